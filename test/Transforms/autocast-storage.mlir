// amp-autocast's storage class (batch norm by default): low-precision
// activations in and out, f32 scale, bias, statistics and arithmetic.
// RUN: amp-opt %s -split-input-file -amp-autocast=target=bf16 | FileCheck %s
// RUN: amp-opt %s -split-input-file -amp-autocast=target=f16 | FileCheck %s --check-prefix=F16
// RUN: amp-opt %s -split-input-file -amp-autocast='target=bf16 why=bn' 2>&1 >/dev/null | FileCheck %s --check-prefix=WHY
// A policy can put batch norm back in fp32 (the behaviour before the class).
// RUN: echo '{"ops": {"amp.batch_norm": "fp32", "amp.batch_norm_grad": "fp32"}}' > %t.fp32.json
// RUN: amp-opt %s -split-input-file -amp-autocast='target=bf16 policy=%t.fp32.json' | FileCheck %s --check-prefix=FP32

// After a low convolution: x and y stay bf16 (no cast around the norm), the
// parameters and running statistics stay f32 (not cast at all), the ReLU
// and the next convolution follow in bf16. The gradient reads x and dy in
// bf16 and gives dx in bf16, dscale / dbias in f32.
// CHECK-LABEL: func @after_conv
// CHECK-SAME: (%[[W:[^:]+]]: tensor<4x3x3x3xf32> {amp.param = "w"}, %[[G:[^:]+]]: tensor<4xf32> {amp.param = "g"}, %[[B:[^:]+]]: tensor<4xf32> {amp.param = "b"}, %[[M:[^:]+]]: tensor<4xf32> {amp.param = "m"}, %[[V:[^:]+]]: tensor<4xf32> {amp.param = "v"}
// CHECK: %[[C:.+]] = amp.conv {{.*}} -> tensor<2x4x5x5xbf16>
// CHECK-NEXT: %[[Y:.+]], %[[RM:.+]], %[[RV:.+]] = amp.batch_norm %[[C]], %[[G]], %[[B]], %[[M]], %[[V]] {training_mode = true} : (tensor<2x4x5x5xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x5x5xbf16>, tensor<4xf32>, tensor<4xf32>)
// CHECK-NEXT: %[[R:.+]] = amp.relu %[[Y]] : tensor<2x4x5x5xbf16>
// CHECK: amp.batch_norm_grad %[[C]], %[[G]], %{{.+}} : (tensor<2x4x5x5xbf16>, tensor<4xf32>, tensor<2x4x5x5xbf16>) -> (tensor<2x4x5x5xbf16>, tensor<4xf32>, tensor<4xf32>)
// CHECK: return {{.*}} : tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>
// F16-LABEL: func @after_conv
// F16: amp.batch_norm {{.*}} : (tensor<2x4x5x5xf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x5x5xf16>, tensor<4xf32>, tensor<4xf32>)
// F16: amp.batch_norm_grad {{.*}} : (tensor<2x4x5x5xf16>, tensor<4xf32>, tensor<2x4x5x5xf16>) -> (tensor<2x4x5x5xf16>, tensor<4xf32>, tensor<4xf32>)
// FP32-LABEL: func @after_conv
// (the conv, read only by the f32 norm and its gradient, writes its f32
// accumulator: no cast between them)
// FP32: %[[C:.+]] = amp.conv {{.*}} : (tensor<2x3x5x5xbf16>, tensor<4x3x3x3xbf16>) -> tensor<2x4x5x5xf32>
// FP32-NEXT: amp.batch_norm %[[C]], {{.*}} : (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>)
// FP32: amp.batch_norm_grad {{.*}} : (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<2x4x5x5xf32>) -> (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>)
// WHY: remark: amp-autocast: node 'bn' (amp.batch_norm): storage -> bf16, accumulate f32: default policy lists amp.batch_norm as storage; every activation input is bf16 (from 'conv'): activations stay bf16, scale / bias / statistics and arithmetic f32
func.func @after_conv(%w: tensor<4x3x3x3xf32> {amp.param = "w"}, %g: tensor<4xf32> {amp.param = "g"}, %b: tensor<4xf32> {amp.param = "b"}, %m: tensor<4xf32> {amp.param = "m"}, %v: tensor<4xf32> {amp.param = "v"}, %x: tensor<2x3x5x5xf32> {amp.input = "x"}, %dy: tensor<2x4x5x5xf32> {amp.input = "dy"}) -> (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x5x5xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x5x5xf32> loc("conv")
  %y, %rm, %rv = amp.batch_norm %c, %g, %b, %m, %v {training_mode = true} : (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>) loc("bn")
  %r = amp.relu %y : tensor<2x4x5x5xf32> loc("relu")
  %dx, %dg, %db = amp.batch_norm_grad %c, %g, %dy {amp.differentiates = "bn"} : (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<2x4x5x5xf32>) -> (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>) loc("bn_grad")
  return %r, %rm, %rv, %dx, %dg, %db : tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// On an f32 activation (a graph input, no low op before it) the norm
// computes in f32, as the fp32 class would.
// CHECK-LABEL: func @on_input
// CHECK: amp.batch_norm %{{.+}} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
// CHECK-NOT: amp.cast
// CHECK: return
// WHY: remark: amp-autocast: node 'bn' (amp.batch_norm): storage -> f32: default policy lists amp.batch_norm as storage; input from input 'x' is f32: f32
func.func @on_input(%g: tensor<4xf32> {amp.param = "g"}, %b: tensor<4xf32> {amp.param = "b"}, %m: tensor<4xf32> {amp.param = "m"}, %v: tensor<4xf32> {amp.param = "v"}, %x: tensor<2x4x3x3xf32> {amp.input = "x"}) -> tensor<2x4x3x3xf32> {
  %y, %rm, %rv = amp.batch_norm %x, %g, %b, %m, %v {training_mode = true} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>) loc("bn")
  return %y : tensor<2x4x3x3xf32>
}

// -----

// A frozen batch norm's backward is a decomposition (products, sums) marked
// as differentiating the norm: those ops take their own rules (the product
// follows its bf16 inputs), not the storage class.
// CHECK-LABEL: func @frozen_backward
// CHECK: amp.batch_norm %{{.+}} : (tensor<2x4x5x5xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x5x5xbf16>, tensor<4xf32>, tensor<4xf32>)
// CHECK: amp.mul %{{.+}}, %{{.+}} {amp.differentiates = "bn"} : (tensor<2x4x5x5xbf16>, tensor<2x4x5x5xbf16>) -> tensor<2x4x5x5xbf16>
// CHECK: amp.reduce_sum {{.*}}amp.differentiates = "bn"{{.*}} : (tensor<2x4x5x5xf32>) -> tensor<4xf32>
// WHY: remark: amp-autocast: node 'bn' (amp.batch_norm): storage -> bf16, accumulate f32
func.func @frozen_backward(%w: tensor<4x3x3x3xf32> {amp.param = "w"}, %g: tensor<4xf32> {amp.param = "g"}, %b: tensor<4xf32> {amp.param = "b"}, %m: tensor<4xf32> {amp.param = "m"}, %v: tensor<4xf32> {amp.param = "v"}, %x: tensor<2x3x5x5xf32> {amp.input = "x"}) -> (tensor<2x4x5x5xf32>, tensor<4xf32>) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x5x5xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x5x5xf32> loc("conv")
  %y, %rm, %rv = amp.batch_norm %c, %g, %b, %m, %v : (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>) loc("bn")
  %d = amp.mul %y, %c {amp.differentiates = "bn"} : (tensor<2x4x5x5xf32>, tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32> loc("bn_grad_mul")
  %s = amp.reduce_sum %d {axes = array<i64: 0, 2, 3>, keepdims = false, amp.differentiates = "bn"} : (tensor<2x4x5x5xf32>) -> tensor<4xf32> loc("bn_grad_sum")
  return %d, %s : tensor<2x4x5x5xf32>, tensor<4xf32>
}
