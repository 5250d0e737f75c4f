// amp-fold-transposes: transposes folded into products and each other, and
// moved to the narrow side of casts; nothing computed twice.
// RUN: amp-opt %s -split-input-file -amp-fold-transposes | FileCheck %s

// A Linear layer after autocast (ONNX Gemm of a transposed f32 weight cast
// to bf16): the product reads the bf16 cast of the weight transposed, with
// no transpose left; the backward product that read the same transpose
// flips its flag too.
// CHECK-LABEL: func @linear_forward
// CHECK-SAME: (%[[X:.+]]: tensor<8x16xbf16>, %[[W:.+]]: tensor<32x16xf32>, %[[DY:.+]]: tensor<8x32xbf16>)
// CHECK-NOT: amp.transpose
// CHECK: %[[C:.+]] = amp.cast %[[W]] : tensor<32x16xf32> to tensor<32x16xbf16>
// CHECK-NOT: amp.transpose
// CHECK: amp.gemm %[[X]], %[[C]] {accumulate = f32, trans_b = true} : (tensor<8x16xbf16>, tensor<32x16xbf16>) -> tensor<8x32xbf16>
// CHECK: amp.gemm %[[DY]], %[[C]] : (tensor<8x32xbf16>, tensor<32x16xbf16>) -> tensor<8x16xbf16>
// CHECK-NOT: amp.transpose
func.func @linear_forward(%x: tensor<8x16xbf16>, %w: tensor<32x16xf32>, %dy: tensor<8x32xbf16>)
    -> (tensor<8x32xbf16>, tensor<8x16xbf16>) {
  %t = amp.transpose %w {perm = array<i64: 1, 0>} : (tensor<32x16xf32>) -> tensor<16x32xf32>
  %c = amp.cast %t : tensor<16x32xf32> to tensor<16x32xbf16>
  %y = amp.gemm %x, %c {accumulate = f32} : (tensor<8x16xbf16>, tensor<16x32xbf16>) -> tensor<8x32xbf16>
  %dx = amp.gemm %dy, %c {trans_b = true} : (tensor<8x32xbf16>, tensor<16x32xbf16>) -> tensor<8x16xbf16>
  return %y, %dx : tensor<8x32xbf16>, tensor<8x16xbf16>
}

// -----

// The weight's gradient: the bf16 product X^T dY widened to f32 and
// transposed back to the weight's layout becomes the product dY^T X (the
// operands swapped, the flags flipped) widened, with no transpose.
// CHECK-LABEL: func @linear_weight_grad
// CHECK-SAME: (%[[X:.+]]: tensor<8x16xbf16>, %[[DY:.+]]: tensor<8x32xbf16>)
// CHECK-NOT: amp.transpose
// CHECK: %[[G:.+]] = amp.gemm %[[DY]], %[[X]] {amp.differentiates = "fc", trans_a = true} : (tensor<8x32xbf16>, tensor<8x16xbf16>) -> tensor<32x16xbf16>
// CHECK: %[[F:.+]] = amp.cast %[[G]] : tensor<32x16xbf16> to tensor<32x16xf32>
// CHECK: return %[[F]]
func.func @linear_weight_grad(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>) -> tensor<32x16xf32> {
  %g = amp.gemm %x, %dy {amp.differentiates = "fc", trans_a = true} : (tensor<8x16xbf16>, tensor<8x32xbf16>) -> tensor<16x32xbf16>
  %f = amp.cast %g : tensor<16x32xbf16> to tensor<16x32xf32>
  %t = amp.transpose %f {perm = array<i64: 1, 0>} : (tensor<16x32xf32>) -> tensor<32x16xf32>
  return %t : tensor<32x16xf32>
}

// -----

// A MatMul on a 3-D activation: the cast moves before the transpose (half
// the bytes), which stays for the matmul to read as a view; the transpose
// of that transpose (the input gradient's B^T) is the cast weight itself.
// CHECK-LABEL: func @matmul_3d
// CHECK-SAME: (%[[X:.+]]: tensor<2x8x16xbf16>, %[[W:.+]]: tensor<32x16xf32>, %[[DY:.+]]: tensor<2x8x32xbf16>)
// CHECK: %[[C:.+]] = amp.cast %[[W]] : tensor<32x16xf32> to tensor<32x16xbf16>
// CHECK: %[[T:.+]] = amp.transpose %[[C]] {perm = array<i64: 1, 0>} : (tensor<32x16xbf16>) -> tensor<16x32xbf16>
// CHECK: amp.matmul %[[X]], %[[T]]
// CHECK: amp.matmul %[[DY]], %[[C]]
// CHECK-NOT: amp.transpose
func.func @matmul_3d(%x: tensor<2x8x16xbf16>, %w: tensor<32x16xf32>, %dy: tensor<2x8x32xbf16>)
    -> (tensor<2x8x32xbf16>, tensor<2x8x16xbf16>) {
  %t = amp.transpose %w {perm = array<i64: 1, 0>} : (tensor<32x16xf32>) -> tensor<16x32xf32>
  %c = amp.cast %t : tensor<16x32xf32> to tensor<16x32xbf16>
  %y = amp.matmul %x, %c : (tensor<2x8x16xbf16>, tensor<16x32xbf16>) -> tensor<2x8x32xbf16>
  %ct = amp.transpose %c {perm = array<i64: 1, 0>} : (tensor<16x32xbf16>) -> tensor<32x16xbf16>
  %dx = amp.matmul %dy, %ct : (tensor<2x8x32xbf16>, tensor<32x16xbf16>) -> tensor<2x8x16xbf16>
  return %y, %dx : tensor<2x8x32xbf16>, tensor<2x8x16xbf16>
}

// -----

// Transposes compose: two that cancel vanish, others become one.
// CHECK-LABEL: func @compose
// CHECK-SAME: (%[[X:.+]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[T:.+]] = amp.transpose %[[X]] {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK-NEXT: return %[[X]], %[[T]]
func.func @compose(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4x2x3xf32>) {
  %a = amp.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %b = amp.transpose %a {perm = array<i64: 1, 0, 2>} : (tensor<3x2x4xf32>) -> tensor<2x3x4xf32>
  %c = amp.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<2x3x4xf32>) -> tensor<2x4x3xf32>
  %d = amp.transpose %c {perm = array<i64: 1, 0, 2>} : (tensor<2x4x3xf32>) -> tensor<4x2x3xf32>
  return %b, %d : tensor<2x3x4xf32>, tensor<4x2x3xf32>
}

// -----

// What stays: a transpose with another reader is not duplicated behind the
// cast; a widening cast keeps the transpose on its narrow side; a gemm
// with C is not transposed (C would need the other broadcast); a dead op
// that the pass did not make dead is left alone.
// CHECK-LABEL: func @kept
// CHECK: %[[T:.+]] = amp.transpose %arg0
// CHECK: amp.cast %[[T]] : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK: %[[T2:.+]] = amp.transpose %arg1
// CHECK: amp.cast %[[T2]] : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK: %[[G:.+]] = amp.gemm %arg2, %arg3, %arg4
// CHECK: amp.transpose %[[G]]
// CHECK: amp.transpose %arg0 {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
func.func @kept(%x: tensor<8x4xf32>, %y: tensor<8x4xbf16>, %a: tensor<2x3xf32>, %b: tensor<3x4xf32>,
                %c: tensor<4xf32>)
    -> (tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x2xf32>) {
  %t = amp.transpose %x {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %n = amp.cast %t : tensor<4x8xf32> to tensor<4x8xbf16>
  %t2 = amp.transpose %y {perm = array<i64: 1, 0>} : (tensor<8x4xbf16>) -> tensor<4x8xbf16>
  %w = amp.cast %t2 : tensor<4x8xbf16> to tensor<4x8xf32>
  %g = amp.gemm %a, %b, %c : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %gt = amp.transpose %g {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dead = amp.transpose %x {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  return %n, %t, %w, %gt : tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x2xf32>
}
