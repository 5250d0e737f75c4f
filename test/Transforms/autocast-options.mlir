// amp-autocast options: keep-io-types, block-list, policy overrides, why,
// backward ops following their forward op.
// RUN: amp-opt %s -split-input-file -amp-autocast=keep-io-types=false | FileCheck %s --check-prefix=NOIO
// RUN: amp-opt %s -split-input-file -amp-autocast=block-list=fc2 | FileCheck %s --check-prefix=BLOCK
// RUN: amp-opt %s -split-input-file -amp-autocast=policy=%S/Inputs/policy-override.json | FileCheck %s --check-prefix=POLICY
// RUN: amp-opt %s -split-input-file -amp-autocast=why=fc1 -o /dev/null 2>&1 | FileCheck %s --check-prefix=WHY

// NOIO-LABEL: func @mlp
// NOIO-SAME: (%{{.+}}: tensor<4x4xf32> {amp.param = "w1"}, %{{.+}}: tensor<4x4xf32> {amp.param = "w2"}, %[[X:.+]]: tensor<2x4xf16> {amp.input = "x"}) -> tensor<2x4xf16>
// NOIO: amp.matmul %[[X]]
// BLOCK-LABEL: func @mlp
// BLOCK: amp.matmul {{.*}} : (tensor<2x4xf16>, tensor<4x4xf16>) -> tensor<2x4xf16>
// BLOCK: amp.relu %{{.+}} : tensor<2x4xf16>
// BLOCK: amp.matmul {{.*}} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
// POLICY-LABEL: func @mlp
// POLICY: amp.matmul {{.*}} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
// POLICY: amp.relu %{{.+}} : tensor<2x4xf32>
// POLICY: amp.matmul {{.*}} : (tensor<2x4xf16>, tensor<4x4xf16>) -> tensor<2x4xf16>
// WHY: remark: amp-autocast: node 'fc1' (amp.matmul): lower -> f16, accumulate f32: default policy lists amp.matmul as lower
func.func @mlp(%w1: tensor<4x4xf32> {amp.param = "w1"}, %w2: tensor<4x4xf32> {amp.param = "w2"}, %x: tensor<2x4xf32> {amp.input = "x"}) -> tensor<2x4xf32> {
  %0 = amp.matmul %x, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("fc1")
  %1 = amp.relu %0 : tensor<2x4xf32> loc("relu")
  %2 = amp.matmul %1, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("fc2")
  return %2 : tensor<2x4xf32>
}
