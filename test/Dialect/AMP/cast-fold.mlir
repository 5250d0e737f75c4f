// amp.cast folding keeps numerics exact: only round trips through a type
// that holds every value fold.
// RUN: amp-opt %s -split-input-file -canonicalize | FileCheck %s

// CHECK-LABEL: func @low_f32_low_folds
// CHECK-SAME: (%[[X:.+]]: tensor<4xf16>)
// CHECK-NOT: amp.cast
// CHECK: return %[[X]]
func.func @low_f32_low_folds(%x: tensor<4xf16>) -> tensor<4xf16> {
  %0 = amp.cast %x : tensor<4xf16> to tensor<4xf32>
  %1 = amp.cast %0 : tensor<4xf32> to tensor<4xf16>
  return %1 : tensor<4xf16>
}

// -----

// CHECK-LABEL: func @bf16_round_trip_folds
// CHECK-SAME: (%[[X:.+]]: tensor<4xbf16>)
// CHECK-NOT: amp.cast
// CHECK: return %[[X]]
func.func @bf16_round_trip_folds(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %0 = amp.cast %x : tensor<4xbf16> to tensor<4xf32>
  %1 = amp.cast %0 : tensor<4xf32> to tensor<4xbf16>
  return %1 : tensor<4xbf16>
}

// -----

// The lossy direction never folds: f32 -> f16 -> f32 rounds.
// CHECK-LABEL: func @f32_low_f32_stays
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>)
// CHECK: %[[L:.+]] = amp.cast %[[X]] : tensor<4xf32> to tensor<4xf16>
// CHECK: %[[W:.+]] = amp.cast %[[L]] : tensor<4xf16> to tensor<4xf32>
// CHECK: return %[[W]]
func.func @f32_low_f32_stays(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = amp.cast %x : tensor<4xf32> to tensor<4xf16>
  %1 = amp.cast %0 : tensor<4xf16> to tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// f16 -> bf16 is lossy both ways (mantissa one way, range the other).
// CHECK-LABEL: func @f16_bf16_f16_stays
// CHECK: amp.cast {{.*}} to tensor<4xbf16>
// CHECK: amp.cast {{.*}} to tensor<4xf16>
func.func @f16_bf16_f16_stays(%x: tensor<4xf16>) -> tensor<4xf16> {
  %0 = amp.cast %x : tensor<4xf16> to tensor<4xbf16>
  %1 = amp.cast %0 : tensor<4xbf16> to tensor<4xf16>
  return %1 : tensor<4xf16>
}

// -----

// An exact first step collapses into the second: f16 -> f32 -> bf16 is
// f16 -> bf16 (rounding the exact value once).
// CHECK-LABEL: func @exact_then_round
// CHECK-SAME: (%[[X:.+]]: tensor<4xf16>)
// CHECK: %[[C:.+]] = amp.cast %[[X]] : tensor<4xf16> to tensor<4xbf16>
// CHECK-NEXT: return %[[C]]
func.func @exact_then_round(%x: tensor<4xf16>) -> tensor<4xbf16> {
  %0 = amp.cast %x : tensor<4xf16> to tensor<4xf32>
  %1 = amp.cast %0 : tensor<4xf32> to tensor<4xbf16>
  return %1 : tensor<4xbf16>
}

// -----

// CHECK-LABEL: func @same_type
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>)
// CHECK-NEXT: return %[[X]]
func.func @same_type(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = amp.cast %x : tensor<4xf32> to tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// i32 -> f32 loses integers above 2^24, so the round trip stays; i8 -> f16
// is exact and folds.
// CHECK-LABEL: func @integers
// CHECK-SAME: (%[[I:.+]]: tensor<4xi32>, %[[B:.+]]: tensor<4xi8>)
// CHECK: amp.cast %[[I]] : tensor<4xi32> to tensor<4xf32>
// CHECK: amp.cast {{.*}} : tensor<4xf32> to tensor<4xi32>
// CHECK-NOT: amp.cast
// CHECK: return {{.*}}, %[[B]]
func.func @integers(%i: tensor<4xi32>, %b: tensor<4xi8>) -> (tensor<4xi32>, tensor<4xi8>) {
  %0 = amp.cast %i : tensor<4xi32> to tensor<4xf32>
  %1 = amp.cast %0 : tensor<4xf32> to tensor<4xi32>
  %2 = amp.cast %b : tensor<4xi8> to tensor<4xf16>
  %3 = amp.cast %2 : tensor<4xf16> to tensor<4xi8>
  return %1, %3 : tensor<4xi32>, tensor<4xi8>
}

// -----

// Constants fold with round-to-nearest-even: 1 + 2^-11 is a tie between
// 1.0 and 1 + 2^-10 in f16 and goes to the even 1.0; 65520 overflows to inf;
// 1e-8 is below half the smallest f16 subnormal (2^-25) and flushes to 0.
// CHECK-LABEL: func @constant
// CHECK: arith.constant dense<[1.000000e+00, 0x7C00, 0.000000e+00, 1.000980e+00]> : tensor<4xf16>
func.func @constant() -> tensor<4xf16> {
  %c = arith.constant dense<[1.00048828125, 65520.0, 1.0e-8, 1.0009765625]> : tensor<4xf32>
  %0 = amp.cast %c : tensor<4xf32> to tensor<4xf16>
  return %0 : tensor<4xf16>
}
