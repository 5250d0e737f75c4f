// amp-fold-casts: one cast per (value, type), exact round trips folded,
// nothing else touched.
// RUN: amp-opt %s -split-input-file -amp-fold-casts | FileCheck %s

// A weight used by two matmuls and cast at each use ends up cast once, right
// after its definition, and both users share it.
// CHECK-LABEL: func @tied_weight
// CHECK-SAME: (%[[W:.+]]: tensor<4x4xf32>, %[[X:.+]]: tensor<2x4xf16>)
// CHECK: %[[C:.+]] = amp.cast %[[W]] : tensor<4x4xf32> to tensor<4x4xf16>
// CHECK-NOT: amp.cast
// CHECK: %[[A:.+]] = amp.matmul %[[X]], %[[C]]
// CHECK: amp.matmul %[[A]], %[[C]]
func.func @tied_weight(%w: tensor<4x4xf32>, %x: tensor<2x4xf16>) -> tensor<2x4xf16> {
  %c0 = amp.cast %w : tensor<4x4xf32> to tensor<4x4xf16>
  %0 = amp.matmul %x, %c0 : (tensor<2x4xf16>, tensor<4x4xf16>) -> tensor<2x4xf16>
  %c1 = amp.cast %w : tensor<4x4xf32> to tensor<4x4xf16>
  %1 = amp.matmul %0, %c1 : (tensor<2x4xf16>, tensor<4x4xf16>) -> tensor<2x4xf16>
  return %1 : tensor<2x4xf16>
}

// -----

// Casts of one value to different types are different casts.
// CHECK-LABEL: func @two_types
// CHECK: amp.cast %{{.*}} : tensor<4xf32> to tensor<4xf16>
// CHECK: amp.cast %{{.*}} : tensor<4xf32> to tensor<4xbf16>
func.func @two_types(%x: tensor<4xf32>) -> (tensor<4xf16>, tensor<4xbf16>) {
  %0 = amp.cast %x : tensor<4xf32> to tensor<4xf16>
  %1 = amp.cast %x : tensor<4xf32> to tensor<4xbf16>
  return %0, %1 : tensor<4xf16>, tensor<4xbf16>
}

// -----

// A value made low, widened for an fp32 op, and narrowed again for the next
// low op: the narrowing folds to the low value; the widening stays for the
// fp32 op. Dead casts vanish; the other ops are untouched, even dead ones.
// CHECK-LABEL: func @boundary
// CHECK-SAME: (%[[X:.+]]: tensor<4xf16>)
// CHECK: %[[W:.+]] = amp.cast %[[X]] : tensor<4xf16> to tensor<4xf32>
// CHECK: amp.exp %[[W]] : tensor<4xf32>
// CHECK: amp.relu %[[X]] : tensor<4xf16>
// CHECK-NOT: amp.cast
func.func @boundary(%x: tensor<4xf16>) -> (tensor<4xf32>, tensor<4xf16>) {
  %w = amp.cast %x : tensor<4xf16> to tensor<4xf32>
  %e = amp.exp %w : tensor<4xf32>
  %n = amp.cast %w : tensor<4xf32> to tensor<4xf16>
  %r = amp.relu %n : tensor<4xf16>
  %dead = amp.cast %x : tensor<4xf16> to tensor<4xbf16>
  %unused = amp.tanh %w : tensor<4xf32>
  return %e, %r : tensor<4xf32>, tensor<4xf16>
}

// -----

// A cast of a block argument used inside a loop body moves to the entry of
// the block that defines the argument.
// CHECK-LABEL: func @region
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>
// CHECK-NEXT: %[[C:.+]] = amp.cast %[[X]] : tensor<4xf32> to tensor<4xf16>
// CHECK: scf.for
// CHECK-NOT: amp.cast
// CHECK: amp.add %{{.*}}, %[[C]]
func.func @region(%x: tensor<4xf32>, %init: tensor<4xf16>, %n: index) -> tensor<4xf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> tensor<4xf16> {
    %c = amp.cast %x : tensor<4xf32> to tensor<4xf16>
    %d = amp.cast %x : tensor<4xf32> to tensor<4xf16>
    %s = amp.add %acc, %c : (tensor<4xf16>, tensor<4xf16>) -> tensor<4xf16>
    %t = amp.add %s, %d : (tensor<4xf16>, tensor<4xf16>) -> tensor<4xf16>
    scf.yield %t : tensor<4xf16>
  }
  return %r : tensor<4xf16>
}
