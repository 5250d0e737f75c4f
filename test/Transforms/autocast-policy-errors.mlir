// Policy and option mistakes are errors that name the culprit.
// RUN: rm -rf %t && mkdir -p %t
// RUN: echo '{"ops": {"MatMul": "lower", "amp.frobnicate": "fp32"}}' > %t/unknown-op.json
// RUN: not amp-opt %s -amp-autocast=policy=%t/unknown-op.json 2>&1 | FileCheck %s --check-prefix=OPNAME
// OPNAME: error: policy file {{.*}}unknown-op.json: unknown op name(s) 'MatMul' (did you mean 'amp.matmul'?), 'amp.frobnicate'; use registered op names such as 'amp.matmul'

// RUN: echo '{"ops": {"amp.matmul": "half"}}' > %t/class.json
// RUN: not amp-opt %s -amp-autocast=policy=%t/class.json 2>&1 | FileCheck %s --check-prefix=CLASS
// CLASS: error: policy file {{.*}}class.json: 'amp.matmul': unknown class 'half' (known: lower, fp32, follow, promote, storage)

// RUN: echo '{"ops": {"amp.matmul": "lower",}' > %t/json.json
// RUN: not amp-opt %s -amp-autocast=policy=%t/json.json 2>&1 | FileCheck %s --check-prefix=JSON
// JSON: error: policy file {{.*}}json.json: not valid JSON: [1:32, byte=32]: Expected object key

// RUN: not amp-opt %s -amp-autocast=policy=%t/missing.json 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: error: cannot read policy file '{{.*}}missing.json': No such file or directory

// RUN: echo '{"nodes": {"no_such_node": "fp32"}}' > %t/node.json
// RUN: not amp-opt %s -amp-autocast=policy=%t/node.json 2>&1 | FileCheck %s --check-prefix=NODE
// NODE: error: amp-autocast: policy file {{.*}}node.json names node 'no_such_node', but no op has that name

// RUN: not amp-opt %s -amp-autocast=block-list=fc9 2>&1 | FileCheck %s --check-prefix=BLOCK
// BLOCK: error: amp-autocast: block-list names node 'fc9', but no op has that name

// RUN: not amp-opt %s -amp-autocast=target=f8 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: error: amp-autocast: target must be f16 or bf16, got 'f8'

// RUN: echo '{"ops": {"amp.matmul": {"class": "lower", "accumulate": "f64"}}}' > %t/acc.json
// RUN: not amp-opt %s -amp-autocast=policy=%t/acc.json 2>&1 | FileCheck %s --check-prefix=ACC
// ACC: error: policy file {{.*}}acc.json: 'amp.matmul': accumulate must be f32, f16 or bf16, got 'f64'

// RUN: echo '{"ops": {"amp.matmul": {"class": "lower", "accumulate": "bf16"}}}' > %t/acc2.json
// RUN: not amp-opt %s -amp-autocast=policy=%t/acc2.json 2>&1 | FileCheck %s --check-prefix=ACC2
// ACC2: error: loc("fc1"): 'amp.matmul' op autocast: accumulate type 'bf16' differs from the compute type 'f16'

// RUN: echo '{"mode": "replace"}' > %t/key.json
// RUN: not amp-opt %s -amp-autocast=policy=%t/key.json 2>&1 | FileCheck %s --check-prefix=KEY
// KEY: error: policy file {{.*}}key.json: unknown top-level key 'mode' (known: extends, ops, nodes, description)

// RUN: not amp-opt %s -amp-autocast=why=nobody 2>&1 | FileCheck %s --check-prefix=WHY
// WHY: error: amp-autocast: why=nobody: no op has that name

// The storage class is for ops whose activations and statistics can be
// typed apart; asked of another op by name or by node, it is an error.
// RUN: echo '{"ops": {"amp.relu": "storage"}}' > %t/storage.json
// RUN: not amp-opt %s -amp-autocast=policy=%t/storage.json 2>&1 | FileCheck %s --check-prefix=STORAGE
// STORAGE: error: policy file {{.*}}storage.json: 'amp.relu': class 'storage' (low-precision activations, f32 statistics and arithmetic) is for ops whose activations and statistics can be typed apart: amp.batch_norm, amp.batch_norm_grad
// RUN: echo '{"nodes": {"relu": "storage"}}' > %t/storage-node.json
// RUN: not amp-opt %s -amp-autocast=policy=%t/storage-node.json 2>&1 | FileCheck %s --check-prefix=STORAGE-NODE
// STORAGE-NODE: error: loc("relu"): 'amp.relu' op autocast: node override in policy file {{.*}}storage-node.json, but class 'storage' is only for ops whose activations and statistics can be typed apart (amp.batch_norm, amp.batch_norm_grad)

// A policy that replaces the default: unlisted ops fall back to fp32.
// RUN: echo '{"extends": "none", "ops": {"amp.matmul": "lower"}}' > %t/replace.json
// RUN: amp-opt %s -amp-autocast=policy=%t/replace.json | FileCheck %s --check-prefix=REPLACE
// REPLACE: amp.matmul {{.*}} -> tensor<2x4xf16>
// REPLACE: amp.relu %{{.+}} : tensor<2x4xf32>

func.func @f(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("fc1")
  %1 = amp.relu %0 : tensor<2x4xf32> loc("relu")
  return %1 : tensor<2x4xf32>
}
