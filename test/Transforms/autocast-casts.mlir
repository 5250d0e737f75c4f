// amp-autocast cast placement: one cast per (value, type), exact round trips
// fold, lossy ones stay, integers are never touched, fp32 ops stay fp32.
// RUN: amp-opt %s -split-input-file -amp-autocast | FileCheck %s

// A tied weight (one parameter read by two matmuls, as in tied embeddings)
// is cast exactly once, right at the top, and both users share the cast.
// CHECK-LABEL: func @tied_weight
// CHECK-SAME: (%[[W:.+]]: tensor<4x4xf32> {amp.param = "w"}
// CHECK: %[[WL:.+]] = amp.cast %[[W]] : tensor<4x4xf32> to tensor<4x4xf16>
// CHECK-NOT: amp.cast %[[W]]
// CHECK: %[[A:.+]] = amp.matmul %{{.+}}, %[[WL]]
// CHECK: amp.matmul %[[A]], %[[WL]]
// CHECK-NOT: amp.cast %[[W]]
func.func @tied_weight(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = amp.matmul %0, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %1 : tensor<2x4xf32>
}

// -----

// low -> f32 (for an fp32 op) -> low (for the next low op): the narrowing
// folds back to the low value, the widening stays for the fp32 op.
// CHECK-LABEL: func @round_trips
// CHECK: %[[M:.+]] = amp.matmul {{.*}} -> tensor<2x4xf16>
// CHECK: %[[MW:.+]] = amp.cast %[[M]] : tensor<2x4xf16> to tensor<2x4xf32>
// CHECK: amp.exp %[[MW]] : tensor<2x4xf32>
// CHECK-NOT: amp.cast %[[MW]]
// CHECK: amp.matmul %[[M]], %{{.+}} {accumulate = f32} : (tensor<2x4xf16>
func.func @round_trips(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = amp.exp %0 : tensor<2x4xf32>
  %2 = amp.matmul %0, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %1, %2 : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// An fp32 op result feeding a low op: f32 -> f16 is lossy and is never
// folded into an f32 -> f16 -> f32 shortcut for the f32 user.
// CHECK-LABEL: func @lossy_stays
// CHECK: %[[E:.+]] = amp.exp %{{.+}} : tensor<2x4xf32>
// CHECK: %[[EL:.+]] = amp.cast %[[E]] : tensor<2x4xf32> to tensor<2x4xf16>
// CHECK: amp.matmul %[[EL]]
// CHECK: return %{{.+}}, %[[E]]
func.func @lossy_stays(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %0 = amp.exp %x : tensor<2x4xf32>
  %1 = amp.matmul %0, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %1, %0 : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Integers, booleans and indices pass through untouched: an integer add, a
// gather's indices, a where's condition, a loss's labels.
// CHECK-LABEL: func @integers
// CHECK-SAME: (%[[I:.+]]: tensor<4xi64>, %[[E:.+]]: tensor<10x4xf32> {amp.param = "emb"}, %[[C:.+]]: tensor<4x4xi1>, %[[Y:.+]]: tensor<4xi32>)
// CHECK: %[[S:.+]] = amp.add %[[I]], %[[I]] : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
// CHECK: %[[G:.+]] = amp.gather %[[E]], %[[S]] : (tensor<10x4xf32>, tensor<4xi64>) -> tensor<4x4xf32>
// CHECK: %[[W:.+]] = amp.where %[[C]], %[[G]], %[[G]] : (tensor<4x4xi1>, tensor<4x4xf32>, tensor<4x4xf32>)
// CHECK: amp.softmax_cross_entropy_loss %[[W]], %[[Y]] : (tensor<4x4xf32>, tensor<4xi32>) -> (tensor<f32>, tensor<4x4xf32>)
// CHECK-NOT: amp.cast {{.*}}i64
// CHECK-NOT: amp.cast {{.*}}i1
func.func @integers(%i: tensor<4xi64>, %emb: tensor<10x4xf32> {amp.param = "emb"}, %c: tensor<4x4xi1>, %y: tensor<4xi32>) -> (tensor<4xi64>, tensor<f32>) {
  %0 = amp.add %i, %i : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %1 = amp.gather %emb, %0 : (tensor<10x4xf32>, tensor<4xi64>) -> tensor<4x4xf32>
  %2 = amp.where %c, %1, %1 : (tensor<4x4xi1>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %3:2 = amp.softmax_cross_entropy_loss %2, %y : (tensor<4x4xf32>, tensor<4xi32>) -> (tensor<f32>, tensor<4x4xf32>)
  return %0, %3#0 : tensor<4xi64>, tensor<f32>
}

// -----

// Deny (fp32) ops are never in low precision, even when every input arrives
// low and the function is all f16: each reads an f32 copy.
// CHECK-LABEL: func @deny_ops
// CHECK-SAME: (%[[X:.+]]: tensor<2x4xf16>)
// CHECK: %[[XW:.+]] = amp.cast %[[X]] : tensor<2x4xf16> to tensor<2x4xf32>
// CHECK-DAG: amp.exp %[[XW]] : tensor<2x4xf32>
// CHECK-DAG: amp.log %[[XW]] : tensor<2x4xf32>
// CHECK-DAG: amp.pow %[[XW]], %[[XW]] : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-DAG: amp.softmax %[[XW]] : tensor<2x4xf32>
// CHECK-DAG: amp.log_softmax %[[XW]] : tensor<2x4xf32>
// CHECK-DAG: amp.reduce_sum %[[XW]] {{.*}}-> tensor<1x1xf32>
// CHECK-DAG: amp.reduce_mean %[[XW]] {{.*}}-> tensor<1x1xf32>
// CHECK-NOT: amp.{{(exp|log|pow|softmax|log_softmax|reduce_sum|reduce_mean)}} {{.*}}xf16
func.func @deny_ops(%x: tensor<2x4xf16>) -> (tensor<2x4xf16>, tensor<2x4xf16>, tensor<2x4xf16>, tensor<2x4xf16>, tensor<2x4xf16>, tensor<1x1xf16>, tensor<1x1xf16>) {
  %0 = amp.exp %x : tensor<2x4xf16>
  %1 = amp.log %x : tensor<2x4xf16>
  %2 = amp.pow %x, %x : (tensor<2x4xf16>, tensor<2x4xf16>) -> tensor<2x4xf16>
  %3 = amp.softmax %x : tensor<2x4xf16>
  %4 = amp.log_softmax %x : tensor<2x4xf16>
  %5 = amp.reduce_sum %x : (tensor<2x4xf16>) -> tensor<1x1xf16>
  %6 = amp.reduce_mean %x : (tensor<2x4xf16>) -> tensor<1x1xf16>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<2x4xf16>, tensor<2x4xf16>, tensor<2x4xf16>, tensor<2x4xf16>, tensor<2x4xf16>, tensor<1x1xf16>, tensor<1x1xf16>
}

// -----

// Running amp-fold-casts and canonicalize after autocast does not move an
// fp32 op back to f16.
// RUN: amp-opt %s -split-input-file -amp-autocast -amp-fold-casts -canonicalize -cse | FileCheck %s --check-prefix=AFTER
// AFTER-LABEL: func @deny_survives_folding
// AFTER: amp.layer_norm %{{.+}}, %{{.+}}, %{{.+}} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>)
func.func @deny_survives_folding(%w: tensor<4x4xf32> {amp.param = "w"}, %g: tensor<4xf32> {amp.param = "g"}, %x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1:3 = amp.layer_norm %0, %g, %g : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  %2 = amp.matmul %1#0, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %2 : tensor<2x4xf32>
}
