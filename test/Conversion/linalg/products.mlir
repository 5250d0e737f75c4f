// amp-lower-to-linalg, products and convolutions: the narrow inputs read
// by a contraction with an f32 accumulator, the epilogue (alpha, beta * C,
// bias) in f32, one rounding.
// RUN: amp-opt %s --amp-lower-to-linalg=state-init=false | FileCheck %s


// CHECK-DAG: #[[A:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[BT:.+]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[MN:.+]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG: #[[LB:.+]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[RW:.+]] = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
// CHECK-DAG: #[[XW:.+]] = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 * 2 + d6, d4 * 2 + d7)>

// CHECK-LABEL: func.func @gemm
func.func @gemm(%a: tensor<8x16xf16>, %b: tensor<4x16xf16>, %c: tensor<4xf16>) -> tensor<8x4xf16> {
  // CHECK: %[[Z:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<8x4xf32>)
  // CHECK: %[[ACC:.+]] = linalg.generic {indexing_maps = [#[[A]], #[[BT]], #[[MN]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.+}}, %{{.+}} : tensor<8x16xf16>, tensor<4x16xf16>) outs(%[[Z]] : tensor<8x4xf32>)
  // CHECK: arith.extf %{{.+}} : f16 to f32
  // CHECK: arith.extf %{{.+}} : f16 to f32
  // CHECK: arith.mulf
  // CHECK: arith.addf
  // The epilogue: 2 * acc + 0.5 * C in f32, rounded once.
  // CHECK: linalg.generic {{.+}} ins(%[[ACC]], %{{.+}} : tensor<8x4xf32>, tensor<4xf16>) outs(%{{.+}} : tensor<8x4xf16>)
  // CHECK: arith.mulf %{{.+}}, %{{.+}} : f32
  // CHECK: arith.mulf %{{.+}}, %{{.+}} : f32
  // CHECK: arith.addf
  // CHECK: arith.truncf %{{.+}} : f32 to f16
  %y = amp.gemm %a, %b, %c {accumulate = f32, trans_b = true, alpha = 2.0 : f32, beta = 0.5 : f32} : (tensor<8x16xf16>, tensor<4x16xf16>, tensor<4xf16>) -> tensor<8x4xf16>
  return %y : tensor<8x4xf16>
}

// A weight shared by every batch: its map has no batch dim.
// CHECK-LABEL: func.func @matmul_broadcast
func.func @matmul_broadcast(%x: tensor<2x8x16xbf16>, %w: tensor<16x4xbf16>) -> tensor<2x8x4xbf16> {
  // CHECK: linalg.generic {indexing_maps = [#[[LB]], #[[RW]], #{{.+}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
  // CHECK: arith.truncf %{{.+}} : f32 to bf16
  %y = amp.matmul %x, %w {accumulate = f32} : (tensor<2x8x16xbf16>, tensor<16x4xbf16>) -> tensor<2x8x4xbf16>
  return %y : tensor<2x8x4xbf16>
}

// Conv: zero padding, x viewed as [N, G, C/G, H, W], the window in the map
// (o * stride + k * dilation), the bias added in f32.
// CHECK-LABEL: func.func @conv
func.func @conv(%x: tensor<2x4x9x9xf16>, %w: tensor<6x2x3x3xf16>, %b: tensor<6xf16>) -> tensor<2x6x5x5xf16> {
  // CHECK: tensor.pad %{{.+}} low[0, 0, 1, 1] high[0, 0, 1, 1]
  // CHECK: tensor.expand_shape {{.+}} into tensor<2x2x2x11x11xf16>
  // CHECK: linalg.generic {indexing_maps = [#[[XW]], {{.+}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
  // CHECK: arith.truncf %{{.+}} : f32 to f16
  %y = amp.conv %x, %w, %b {accumulate = f32, group = 2 : i64, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x9x9xf16>, tensor<6x2x3x3xf16>, tensor<6xf16>) -> tensor<2x6x5x5xf16>
  return %y : tensor<2x6x5x5xf16>
}

// Conv's gradients: db a sum, dw a contraction over n and the output
// positions, dx the transposed convolution (dy spread with the stride into
// zeros, the kernel flipped by index, the pads cut off).
// CHECK-LABEL: func.func @conv_grad
func.func @conv_grad(%x: tensor<2x3x8x8xf16>, %w: tensor<4x3x3x3xf16>, %dy: tensor<2x4x4x4xf16>) -> (tensor<2x3x8x8xf16>, tensor<4x3x3x3xf16>, tensor<4xf16>) {
  // CHECK-DAG: tensor.insert_slice %{{.+}} into %{{.+}}[0, 0, 0, 2, 2] [2, 1, 4, 4, 4] [1, 1, 1, 2, 2] : tensor<2x1x4x4x4xf16> into tensor<2x1x4x11x11xf16>
  // CHECK-DAG: tensor.extract %{{.+}}[%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}] : tensor<1x4x3x3x3xf16>
  // CHECK-DAG: tensor.extract_slice %{{.+}}[0, 0, 1, 1] [2, 3, 8, 8] [1, 1, 1, 1] : tensor<2x3x9x9xf32> to tensor<2x3x8x8xf32>
  %dx, %dw, %db = amp.conv_grad %x, %w, %dy {accumulate = f32, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x3x8x8xf16>, tensor<4x3x3x3xf16>, tensor<2x4x4x4xf16>) -> (tensor<2x3x8x8xf16>, tensor<4x3x3x3xf16>, tensor<4xf16>)
  return %dx, %dw, %db : tensor<2x3x8x8xf16>, tensor<4x3x3x3xf16>, tensor<4xf16>
}

// One group in 2-D: linalg's named NCHW convolution with f32 outs.
// CHECK-LABEL: func.func @conv_named
func.func @conv_named(%x: tensor<2x3x8x8xbf16>, %w: tensor<4x3x3x3xbf16>) -> tensor<2x4x6x6xbf16> {
  // CHECK: linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%{{.+}}, %{{.+}} : tensor<2x3x8x8xbf16>, tensor<4x3x3x3xbf16>) outs(%{{.+}} : tensor<2x4x6x6xf32>)
  // CHECK: arith.truncf %{{.+}} : f32 to bf16
  %y = amp.conv %x, %w {accumulate = f32, kernel_shape = array<i64: 3, 3>} : (tensor<2x3x8x8xbf16>, tensor<4x3x3x3xbf16>) -> tensor<2x4x6x6xbf16>
  return %y : tensor<2x4x6x6xbf16>
}
