// With f32-accumulators (auto: bf16) products in the target type keep their
// bias f32 (added to the f32 accumulator before the one rounding), and a
// product, product gradient or sum whose result only f32 reads writes its
// f32 accumulator: the weight and bias gradients of the f32 masters come
// out f32 with no cast (PyTorch rounds them to bf16 and widens them). f16
// keeps PyTorch's roundings unless f32-accumulators=on.
// RUN: amp-opt %s -split-input-file -amp-autocast=target=bf16 | FileCheck %s
// RUN: amp-opt %s -split-input-file -amp-autocast | FileCheck %s --check-prefix=F16
// RUN: amp-opt %s -split-input-file "-amp-autocast=f32-accumulators=on" | FileCheck %s --check-prefix=F16ON
// RUN: amp-opt %s -split-input-file "-amp-autocast=target=bf16 f32-accumulators=off" | FileCheck %s --check-prefix=OFF
// RUN: amp-opt %s "-amp-autocast=target=bf16 report=%t.json" -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT < %t.json
// RUN: not amp-opt %s -split-input-file "-amp-autocast=f32-accumulators=maybe" 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: amp-autocast: f32-accumulators must be auto, on or off, got 'maybe'

// A linear layer and its gradients (as amp-autodiff writes them, one ONNX
// node "fc" made a reshape, a gemm and a reshape): the forward gemm adds
// the f32 bias; its backward gemms take the gemm's decision (lower,
// accumulate f32), not the reshapes' (follow); the weight gradient and the
// bias gradient's sum write f32 (through the reshape); the data gradient,
// read in bf16, stays bf16.
// CHECK-LABEL: func @linear
// CHECK-SAME: (%[[W:[^:]+]]: tensor<4x8xf32> {amp.param = "w"}, %[[B:[^:]+]]: tensor<8xf32> {amp.param = "b"}
// CHECK-NOT: amp.cast %[[B]]
// CHECK: %[[Y:.+]] = amp.gemm %{{.+}}, %{{.+}}, %[[B]] {accumulate = f32} : (tensor<6x4xbf16>, tensor<4x8xbf16>, tensor<8xf32>) -> tensor<6x8xbf16>
// CHECK: %[[DX:.+]] = amp.gemm {{.*}} {accumulate = f32, amp.differentiates = "fc", trans_b = true} : (tensor<6x8xbf16>, tensor<4x8xbf16>) -> tensor<6x4xbf16>
// CHECK: %[[DW:.+]] = amp.gemm {{.*}} {accumulate = f32, amp.differentiates = "fc", trans_a = true} : (tensor<6x4xbf16>, tensor<6x8xbf16>) -> tensor<4x8xf32>
// CHECK: %[[S:.+]] = amp.reduce_sum {{.*}} : (tensor<6x8xbf16>) -> tensor<1x8xf32>
// CHECK-NEXT: %[[DB:.+]] = amp.reshape %[[S]] {{.*}} : (tensor<1x8xf32>) -> tensor<8xf32>
// CHECK: return %{{.+}}, %{{.+}}, %[[DW]], %[[DB]] : tensor<6x8xf32>, tensor<6x4xf32>, tensor<4x8xf32>, tensor<8xf32>
// F16-LABEL: func @linear
// F16: amp.gemm %{{.+}}, %{{.+}}, %{{.+}} {accumulate = f32} : (tensor<6x4xf16>, tensor<4x8xf16>, tensor<8xf16>) -> tensor<6x8xf16>
// F16: %[[DW:.+]] = amp.gemm {{.*}} trans_a = true} : (tensor<6x4xf16>, tensor<6x8xf16>) -> tensor<4x8xf16>
// F16: amp.cast %[[DW]] : tensor<4x8xf16> to tensor<4x8xf32>
// F16ON-LABEL: func @linear
// F16ON: amp.gemm %{{.+}}, %{{.+}}, %{{.+}} {accumulate = f32} : (tensor<6x4xf16>, tensor<4x8xf16>, tensor<8xf32>) -> tensor<6x8xf16>
// F16ON: amp.gemm {{.*}} trans_a = true} : (tensor<6x4xf16>, tensor<6x8xf16>) -> tensor<4x8xf32>
// OFF-LABEL: func @linear
// OFF: amp.gemm %{{.+}}, %{{.+}}, %{{.+}} {accumulate = f32} : (tensor<6x4xbf16>, tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<6x8xbf16>
// OFF: %[[DW:.+]] = amp.gemm {{.*}} trans_a = true} : (tensor<6x4xbf16>, tensor<6x8xbf16>) -> tensor<4x8xbf16>
// OFF: amp.cast %[[DW]] : tensor<4x8xbf16> to tensor<4x8xf32>
// REPORT: "op": "amp.gemm",
// REPORT-NEXT: "reason": "default policy lists amp.gemm as lower; C stays f32 (added to the f32 accumulator before the one rounding)"
// REPORT: "op": "amp.gemm",
// REPORT-NEXT: "reason": "backward of 'fc', which is lower in bf16"
// REPORT: "op": "amp.gemm",
// REPORT-NEXT: "reason": "backward of 'fc', which is lower in bf16; result f32: only f32 reads it, so the f32 accumulator is written unrounded"
// REPORT: "op": "amp.reduce_sum",
// REPORT-NEXT: "reason": "backward of 'fc', which is lower in bf16; result f32: only f32 reads it, so the f32 accumulator is written unrounded"
// REPORT: "op": "amp.conv_grad",
// REPORT-NEXT: "reason": "backward of 'conv', which is lower in bf16; result #1 f32: only f32 reads it, so the f32 accumulator is written unrounded; result #2 f32: only f32 reads it, so the f32 accumulator is written unrounded"
func.func @linear(%w: tensor<4x8xf32> {amp.param = "w"}, %b: tensor<8xf32> {amp.param = "b"}, %x: tensor<2x3x4xf32> {amp.input = "x"}, %dy: tensor<2x3x8xf32> {amp.input = "dy"}) -> (tensor<6x8xf32>, tensor<6x4xf32>, tensor<4x8xf32> {amp.grad = "w"}, tensor<8xf32> {amp.grad = "b"}) {
  %x2 = amp.reshape %x {shape = array<i64: 6, 4>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32> loc("fc")
  %y = amp.gemm %x2, %w, %b : (tensor<6x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<6x8xf32> loc("fc")
  %y3 = amp.reshape %y {shape = array<i64: 2, 3, 8>} : (tensor<6x8xf32>) -> tensor<2x3x8xf32> loc("fc")
  %r = amp.relu %y3 : tensor<2x3x8xf32> loc("relu")
  %r2 = amp.reshape %r {shape = array<i64: 6, 8>} : (tensor<2x3x8xf32>) -> tensor<6x8xf32> loc("flat")
  %dy2 = amp.reshape %dy {amp.differentiates = "fc", shape = array<i64: 6, 8>} : (tensor<2x3x8xf32>) -> tensor<6x8xf32> loc("fc/grad")
  %dx = amp.gemm %dy2, %w {amp.differentiates = "fc", trans_b = true} : (tensor<6x8xf32>, tensor<4x8xf32>) -> tensor<6x4xf32> loc("fc/grad")
  %dw = amp.gemm %x2, %dy2 {amp.differentiates = "fc", trans_a = true} : (tensor<6x4xf32>, tensor<6x8xf32>) -> tensor<4x8xf32> loc("fc/grad")
  %s = amp.reduce_sum %dy2 {amp.differentiates = "fc", axes = array<i64: 0>} : (tensor<6x8xf32>) -> tensor<1x8xf32> loc("fc/grad")
  %db = amp.reshape %s {amp.differentiates = "fc", shape = array<i64: 8>} : (tensor<1x8xf32>) -> tensor<8xf32> loc("fc/grad")
  %dxr = amp.relu %dx : tensor<6x4xf32> loc("use_dx")
  return %r2, %dxr, %dw, %db : tensor<6x8xf32>, tensor<6x4xf32>, tensor<4x8xf32>, tensor<8xf32>
}

// -----

// A convolution's gradient: dx (read in bf16) stays bf16, dw and db (read
// only in f32) are f32 results of the same op.
// CHECK-LABEL: func @conv
// CHECK: amp.conv %{{.+}}, %{{.+}}, %{{.+}} {accumulate = f32{{.*}}} : (tensor<2x3x6x6xbf16>, tensor<4x3x3x3xbf16>, tensor<4xf32>) -> tensor<2x4x4x4xbf16>
// CHECK: amp.conv_grad {{.*}} -> (tensor<2x3x6x6xbf16>, tensor<4x3x3x3xf32>, tensor<4xf32>)
// OFF-LABEL: func @conv
// OFF: amp.conv_grad {{.*}} -> (tensor<2x3x6x6xbf16>, tensor<4x3x3x3xbf16>, tensor<4xbf16>)
func.func @conv(%w: tensor<4x3x3x3xf32> {amp.param = "w"}, %b: tensor<4xf32> {amp.param = "b"}, %x: tensor<2x3x6x6xf32> {amp.input = "x"}, %dy: tensor<2x4x4x4xf32> {amp.input = "dy"}) -> (tensor<2x4x4x4xf32>, tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32> {amp.grad = "w"}, tensor<4xf32> {amp.grad = "b"}) {
  %y = amp.conv %x, %w, %b : (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x4x4xf32> loc("conv")
  %r = amp.relu %y : tensor<2x4x4x4xf32> loc("relu")
  %dx, %dw, %db = amp.conv_grad %x, %w, %dy {amp.differentiates = "conv"} : (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<2x4x4x4xf32>) -> (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) loc("conv/grad")
  %dxr = amp.relu %dx : tensor<2x3x6x6xf32> loc("use_dx")
  return %r, %dxr, %dw, %db : tensor<2x4x4x4xf32>, tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>
}

// -----

// A result that something reads in bf16 stays bf16 for every reader (one
// rounding, one widening cast for the f32 reader).
// CHECK-LABEL: func @mixed_readers
// CHECK: %[[M:.+]] = amp.matmul {{.*}} -> tensor<2x4xbf16>
// CHECK: amp.cast %[[M]] : tensor<2x4xbf16> to tensor<2x4xf32>
func.func @mixed_readers(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("mm")
  %1 = amp.softmax %0 : tensor<2x4xf32> loc("sm")
  %2 = amp.relu %0 : tensor<2x4xf32> loc("relu")
  return %1, %2 : tensor<2x4xf32>, tensor<2x4xf32>
}
