// What stays as it is on linalg input, and why (the report): softmax,
// reductions and element-wise generics keep f32; an f64 island keeps f64; a
// block-listed product keeps f32; an op without a model is reported as such;
// the picture colours linalg ops by type.
// RUN: rm -rf %t && mkdir -p %t
// RUN: amp-opt %s -amp-autocast="target=bf16 block-list=keep report=%t/r.json dot=%t/g.dot" | FileCheck %s
// RUN: FileCheck %s --check-prefix=REPORT < %t/r.json
// RUN: FileCheck %s --check-prefix=DOT < %t/g.dot
// A policy file: element-wise generics read bf16 too (inputs only; the
// generic still computes and writes f32).
// RUN: echo '{"ops": {"linalg.generic.elementwise": "lower"}}' > %t/p.json
// RUN: amp-opt %s -amp-autocast="target=bf16 policy=%t/p.json" | FileCheck %s --check-prefix=POLICY

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0, 0)>

// CHECK-LABEL: func.func @kept
// CHECK:         linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK:         linalg.generic {{.*}} ins(%{{.*}} : tensor<4x16xf32>) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK-NEXT:    ^bb0(%{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT:      math.exp
// CHECK:         linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%{{.*}} : tensor<4x16xf32>) outs(%{{.*}} : tensor<4x1xf32>)
// CHECK:         linalg.softmax dimension(1) ins(%{{.*}} : tensor<4x16xf32>) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK:         linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x8xf64>, tensor<8x16xf64>) outs(%{{.*}} : tensor<4x16xf64>)
// CHECK:         linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8x16xf32>) outs(%{{.*}} : tensor<4x16xf32>) -> tensor<4x16xf32>{{$}}
// POLICY-LABEL: func.func @kept
// POLICY:        linalg.generic {{.*}} ins(%{{.*}} : tensor<4x16xbf16>) outs(%{{.*}} : tensor<4x16xf32>)
// POLICY-NEXT:   ^bb0(%[[IN:.*]]: bf16, %{{.*}}: f32):
// POLICY-NEXT:     %[[W:.*]] = arith.extf %[[IN]] : bf16 to f32
// POLICY-NEXT:     math.exp %[[W]]
func.func @kept(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %x64: tensor<4x8xf64>, %w64: tensor<8x16xf64>)
    -> (tensor<4x16xf32>, tensor<4x1xf32>, tensor<4x16xf32>, tensor<4x16xf64>, tensor<4x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<4x16xf32>) -> tensor<4x16xf32> loc("fc")
  %ex = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %v = math.exp %a : f32
    linalg.yield %v : f32
  } -> tensor<4x16xf32> loc("exp")
  %e1 = tensor.empty() : tensor<4x1xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4x1xf32>) -> tensor<4x1xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%ex : tensor<4x16xf32>) outs(%s0 : tensor<4x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %v = arith.addf %a, %o : f32
    linalg.yield %v : f32
  } -> tensor<4x1xf32> loc("sum")
  %sm = linalg.softmax dimension(1) ins(%y : tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32> loc("softmax")
  %e64 = tensor.empty() : tensor<4x16xf64>
  %z64 = arith.constant 0.0 : f64
  %acc64 = linalg.fill ins(%z64 : f64) outs(%e64 : tensor<4x16xf64>) -> tensor<4x16xf64>
  %y64 = linalg.matmul ins(%x64, %w64 : tensor<4x8xf64>, tensor<8x16xf64>) outs(%acc64 : tensor<4x16xf64>) -> tensor<4x16xf64> loc("fc64")
  %k = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<4x16xf32>) -> tensor<4x16xf32> loc("keep")
  return %ex, %sum, %sm, %y64, %k : tensor<4x16xf32>, tensor<4x1xf32>, tensor<4x16xf32>, tensor<4x16xf64>, tensor<4x16xf32>
}

// REPORT:      "node": "fc",
// REPORT-NEXT: "op": "linalg.matmul",
// REPORT-NEXT: "reason": "default policy lists linalg.matmul as lower"
// REPORT:      "class": "follow",
// REPORT-NEXT: "compute_type": "f32",
// REPORT-NEXT: "node": "exp",
// REPORT-NEXT: "op": "linalg.generic.elementwise",
// REPORT-NEXT: "reason": "default policy lists linalg.generic.elementwise as follow; reads f32: unchanged (an upstream op changes its types only when lowered)"
// REPORT:      "class": "fp32",
// REPORT-NEXT: "compute_type": "f32",
// REPORT-NEXT: "node": "sum",
// REPORT-NEXT: "op": "linalg.generic.reduction",
// REPORT:      "class": "fp32",
// REPORT-NEXT: "compute_type": "f32",
// REPORT-NEXT: "node": "softmax",
// REPORT-NEXT: "op": "linalg.softmax",
// REPORT:      "class": "lower",
// REPORT-NEXT: "compute_type": "f64",
// REPORT-NEXT: "node": "fc64",
// REPORT-NEXT: "op": "linalg.matmul",
// REPORT-NEXT: "reason": "default policy lists linalg.matmul as lower; operand #0 is f64: kept (only f32 inputs are narrowed)"
// REPORT:      "class": "fp32",
// REPORT-NEXT: "compute_type": "f32",
// REPORT-NEXT: "node": "keep",
// REPORT-NEXT: "op": "linalg.matmul",
// REPORT-NEXT: "reason": "node 'keep' is on the block list; reads f32: unchanged
// REPORT:      "summary": {
// REPORT-NEXT:   "casts_after": 2,
// REPORT-NEXT:   "casts_before": 0,
// REPORT-NEXT:   "casts_inserted": 2,
// REPORT:        "params_cast_to_target": 2

// DOT: digraph "kept"
// DOT-DAG: label="fc\nlinalg.matmul\ntensor<4x16xf32>", shape=ellipse, fillcolor="#8ecae6"
// DOT-DAG: label="linalg.generic\ntensor<4x8xbf16>", shape=cds, fillcolor="#e76f51"
