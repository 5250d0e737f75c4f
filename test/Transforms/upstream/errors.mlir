// Upstream input amp-autocast refuses, each with one message naming the
// culprit.
// RUN: rm -rf %t && mkdir -p %t
// RUN: echo '{"ops": {"tosa.exp": "lower"}}' > %t/exp.json
// RUN: not amp-opt %s -split-input-file -amp-autocast="target=bf16 policy=%t/exp.json" 2>&1 | FileCheck %s --check-prefix=LOWER
// RUN: echo '{"ops": {"linalg.matmul": {"class": "lower", "accumulate": "bf16"}}}' > %t/acc.json
// RUN: not amp-opt %s -split-input-file -amp-autocast="target=bf16 policy=%t/acc.json" 2>&1 | FileCheck %s --check-prefix=ACC
// RUN: echo '{"ops": {"linalg.generic.matmul": "lower"}}' > %t/bad.json
// RUN: not amp-opt %s -split-input-file -amp-autocast="target=bf16 policy=%t/bad.json" 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not amp-opt %s -split-input-file -amp-autocast="target=bf16 keep-io-types=false" 2>&1 | FileCheck %s --check-prefix=IO
// RUN: not amp-opt %s -split-input-file -amp-autocast="target=bf16 block-list=nosuchnode" 2>&1 | FileCheck %s --check-prefix=BLOCK

// LOWER: error: amp-autocast: policy file {{.*}}exp.json lists tosa.exp as lower, but tosa.exp cannot be rebuilt to read bf16 (only products, convolutions and linalg structured ops can)
// ACC: error: amp-autocast: policy file {{.*}}acc.json asks linalg.matmul to accumulate in bf16; on upstream ops the accumulator stays f32
// NAME: unknown op name(s) 'linalg.generic.matmul'
// IO: error: amp-autocast: keep-io-types=false is for amp programs; on upstream ops the function's types are kept
// BLOCK: error: amp-autocast: block-list names node 'nosuchnode', but no op has that name
func.func @f(%x: tensor<1x4x8xf32>, %w: tensor<1x8x16xf32>, %a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> (tensor<1x4x8xf32>, tensor<4x16xf32>) {
  %e = tosa.exp %x : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %y = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%c : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %e, %y : tensor<1x4x8xf32>, tensor<4x16xf32>
}

// -----

// A function of amp ops and modelled upstream ops is refused.
// RUN: not amp-opt %s -split-input-file -amp-autocast=target=bf16 2>&1 | FileCheck %s --check-prefix=MIX
// MIX: error: amp-autocast: function mixes amp ops ('amp.relu') with upstream ops on float tensors ('linalg.matmul')
func.func @mixed(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %y = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%c : tensor<4x16xf32>) -> tensor<4x16xf32>
  %r = amp.relu %y : tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}
