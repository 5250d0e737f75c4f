// amp-lower-for-runtime runs CSE after autocast: a value the graph reads
// through two identical reshapes (a layer norm's output feeding Q, K and V
// as exported by torch.onnx) is cast to bf16 once, not once per product.
//
// RUN: amp-opt %s -amp-autocast=target=bf16 | FileCheck %s --check-prefix=AUTOCAST
// RUN: amp-opt %s --pass-pipeline='builtin.module(amp-lower-for-runtime{precision=bf16})' -mlir-print-ir-after=cse -o /dev/null 2>&1 | FileCheck %s --check-prefix=CSE

// AUTOCAST-COUNT-2: amp.cast %{{.*}} : tensor<8x16xf32> to tensor<8x16xbf16>

// CSE-LABEL: IR Dump After CSE
// CSE: %[[R:.*]] = amp.reshape %arg0
// CSE-NOT: amp.reshape
// CSE: %[[C:.*]] = amp.cast %[[R]] : tensor<8x16xf32> to tensor<8x16xbf16>
// CSE-NOT: tensor<8x16xf32> to tensor<8x16xbf16>
// CSE: amp.gemm %[[C]]
// CSE: amp.gemm %[[C]]

func.func @main(%x: tensor<2x4x16xf32> {amp.input = "x"},
                %w1: tensor<16x16xf32> {amp.param = "w1", amp.init = dense<0.5> : tensor<16x16xf32>},
                %w2: tensor<16x16xf32> {amp.param = "w2", amp.init = dense<0.25> : tensor<16x16xf32>})
    -> (tensor<8x16xf32> {amp.output = "y"}) {
  %x1 = amp.reshape %x {shape = array<i64: 8, 16>} : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %a = amp.gemm %x1, %w1 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %x2 = amp.reshape %x {shape = array<i64: 8, 16>} : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %b = amp.gemm %x2, %w2 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %y = amp.add %a, %b : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
