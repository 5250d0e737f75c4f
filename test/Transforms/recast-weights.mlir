// amp-recast-weights: a parameter's f16 / bf16 cast read by the forward and
// the backward gets a second cast right before the backward's first reader;
// the forward keeps its own. A cast only the forward reads, an input's cast
// and a cast to f32 are left alone.
// RUN: amp-opt %s -amp-recast-weights | FileCheck %s

// CHECK-LABEL: func @linear
// CHECK-SAME: (%[[W:[^:]+]]: tensor<8x16xf32> {amp.param = "w"}, %[[V:[^:]+]]: tensor<16x4xf32> {amp.param = "v"}, %[[X:[^:]+]]: tensor<4x8xf32>
// CHECK: %[[WF:.+]] = amp.cast %[[W]] : tensor<8x16xf32> to tensor<8x16xbf16>
// CHECK: %[[XB:.+]] = amp.cast %[[X]]
// CHECK: %[[H:.+]] = amp.matmul %[[XB]], %[[WF]]
// CHECK: %[[VF:.+]] = amp.cast %[[V]] : tensor<16x4xf32> to tensor<16x4xbf16>
// CHECK: amp.matmul %[[H]], %[[VF]]
// CHECK-NOT: amp.cast %[[V]]
// CHECK: %[[WB:.+]] = amp.cast %[[W]] : tensor<8x16xf32> to tensor<8x16xbf16>
// CHECK-NEXT: amp.gemm %{{.+}}, %[[WB]] {amp.differentiates = "x"
// CHECK-NEXT: amp.gemm %{{.+}}, %[[WB]] {amp.differentiates = "x2"
// CHECK-NOT: amp.cast
func.func @linear(%w: tensor<8x16xf32> {amp.param = "w"}, %v: tensor<16x4xf32> {amp.param = "v"},
                  %x: tensor<4x8xf32> {amp.input = "x"}, %dy: tensor<4x16xbf16> {amp.input = "dy"})
    -> (tensor<4x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %wb = amp.cast %w : tensor<8x16xf32> to tensor<8x16xbf16>
  %xb = amp.cast %x : tensor<4x8xf32> to tensor<4x8xbf16>
  %h = amp.matmul %xb, %wb : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xbf16>
  %vb = amp.cast %v : tensor<16x4xf32> to tensor<16x4xbf16>
  %o = amp.matmul %h, %vb : (tensor<4x16xbf16>, tensor<16x4xbf16>) -> tensor<4x4xf32>
  %dx = amp.gemm %dy, %wb {amp.differentiates = "x", trans_b = true} : (tensor<4x16xbf16>, tensor<8x16xbf16>) -> tensor<4x8xf32>
  %dx2 = amp.gemm %dy, %wb {amp.differentiates = "x2", trans_b = true} : (tensor<4x16xbf16>, tensor<8x16xbf16>) -> tensor<4x8xf32>
  return %o, %dx, %dx2 : tensor<4x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
