// amp-autocast, one rule per function: lower, fp32, follow, promote.
// RUN: amp-opt %s -split-input-file -amp-autocast | FileCheck %s
// RUN: amp-opt %s -split-input-file -amp-autocast=target=bf16 | FileCheck %s --check-prefix=BF16

// lower: a matrix product computes in f16 with f32 accumulation; its f32
// operands are cast; the f32 result the function declares is restored.
// CHECK-LABEL: func @lower
// CHECK-SAME: (%[[W:.+]]: tensor<4x4xf32> {amp.param = "w"}, %[[X:.+]]: tensor<2x4xf32> {amp.input = "x"}) -> tensor<2x4xf32>
// CHECK-DAG: %[[WL:.+]] = amp.cast %[[W]] : tensor<4x4xf32> to tensor<4x4xf16>
// CHECK-DAG: %[[XL:.+]] = amp.cast %[[X]] : tensor<2x4xf32> to tensor<2x4xf16>
// CHECK: %[[M:.+]] = amp.matmul %[[XL]], %[[WL]] {accumulate = f32} : (tensor<2x4xf16>, tensor<4x4xf16>) -> tensor<2x4xf16>
// CHECK: %[[R:.+]] = amp.cast %[[M]] : tensor<2x4xf16> to tensor<2x4xf32>
// CHECK: return %[[R]] : tensor<2x4xf32>
// In bf16 (f32's range) the product, read only by the f32 return, writes
// its f32 accumulator instead (autocast-accumulators.mlir).
// BF16-LABEL: func @lower
// BF16: %[[M:.+]] = amp.matmul {{.*}} {accumulate = f32} : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xf32>
// BF16-NEXT: return %[[M]]
func.func @lower(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32> {amp.input = "x"}) -> tensor<2x4xf32> {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("mm")
  return %0 : tensor<2x4xf32>
}

// -----

// fp32: softmax after a low matmul reads an f32 copy and computes in f32;
// the lossy widening stays (no f32 -> f16 -> f32 shortcut).
// CHECK-LABEL: func @fp32
// CHECK: %[[M:.+]] = amp.matmul {{.*}} -> tensor<2x4xf16>
// CHECK: %[[W:.+]] = amp.cast %[[M]] : tensor<2x4xf16> to tensor<2x4xf32>
// CHECK: %[[S:.+]] = amp.softmax %[[W]] : tensor<2x4xf32>
// CHECK: return %[[S]]
// BF16-LABEL: func @fp32
// BF16: amp.softmax %{{.+}} : tensor<2x4xf32>
func.func @fp32(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = amp.softmax %0 : tensor<2x4xf32>
  return %1 : tensor<2x4xf32>
}

// -----

// follow: relu and the bias add run in f16 after a low matmul (the bias is a
// parameter, which does not force f32: it is cast once); tanh on an f32
// graph input stays f32.
// CHECK-LABEL: func @follow
// CHECK-SAME: (%[[W:.+]]: tensor<4x4xf32> {amp.param = "w"}, %[[B:.+]]: tensor<4xf32> {amp.param = "b"}, %[[X:.+]]: tensor<2x4xf32>)
// CHECK-DAG: %[[BL:.+]] = amp.cast %[[B]] : tensor<4xf32> to tensor<4xf16>
// CHECK: %[[M:.+]] = amp.matmul
// CHECK: %[[A:.+]] = amp.add %[[M]], %[[BL]] : (tensor<2x4xf16>, tensor<4xf16>) -> tensor<2x4xf16>
// CHECK: %[[R:.+]] = amp.relu %[[A]] : tensor<2x4xf16>
// CHECK: %[[T:.+]] = amp.tanh %[[X]] : tensor<2x4xf32>
func.func @follow(%w: tensor<4x4xf32> {amp.param = "w"}, %b: tensor<4xf32> {amp.param = "b"}, %x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = amp.add %0, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %2 = amp.relu %1 : tensor<2x4xf32>
  %3 = amp.tanh %x : tensor<2x4xf32>
  return %2, %3 : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// follow with one low and one f32 activation: f32 wins and the low one is
// widened (exactly).
// CHECK-LABEL: func @follow_mixed
// CHECK: %[[M:.+]] = amp.matmul {{.*}} -> tensor<2x4xf16>
// CHECK: %[[W:.+]] = amp.cast %[[M]] : tensor<2x4xf16> to tensor<2x4xf32>
// CHECK: amp.mul %[[W]], %{{.+}} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
func.func @follow_mixed(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = amp.mul %0, %x : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %1 : tensor<2x4xf32>
}

// -----

// promote: a concat of a low matmul result and an f32 input computes in
// f32, the widest; with two low inputs it stays low.
// CHECK-LABEL: func @promote
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4xf32>)
// CHECK: %[[M:.+]] = amp.matmul {{.*}} -> tensor<2x4xf16>
// CHECK: %[[MW:.+]] = amp.cast %[[M]] : tensor<2x4xf16> to tensor<2x4xf32>
// CHECK: amp.concat %[[MW]], %[[X]] {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// CHECK: amp.concat %[[M]], %[[M]] {axis = 0 : i64} : (tensor<2x4xf16>, tensor<2x4xf16>) -> tensor<4x4xf16>
func.func @promote(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = amp.concat %0, %x {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  %2 = amp.concat %0, %0 {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  return %1, %2 : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// The importer's amp.class mark (Resize's linear taps, the norms): a
// follow op so marked computes in f32 after a low matmul; an unmarked one
// next to it follows its f16 input.
// CHECK-LABEL: func @marked
// CHECK: %[[M:.+]] = amp.matmul {{.*}} -> tensor<2x4xf16>
// CHECK: %[[W:.+]] = amp.cast %[[M]] : tensor<2x4xf16> to tensor<2x4xf32>
// CHECK: amp.mul %[[W]], %[[W]] {amp.class = "fp32"} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: amp.mul %[[M]], %[[M]] : (tensor<2x4xf16>, tensor<2x4xf16>) -> tensor<2x4xf16>
func.func @marked(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = amp.mul %0, %0 {amp.class = "fp32"} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = amp.mul %0, %0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %1, %2 : tensor<2x4xf32>, tensor<2x4xf32>
}
