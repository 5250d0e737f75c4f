// The decision report (JSON) and the picture (Graphviz, rendered to SVG and
// PNG by Debian's graphviz).
// RUN: rm -rf %t && mkdir -p %t
// RUN: amp-opt %s -amp-autocast="report=%t/report.json dot=%t/graph.dot" -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT < %t/report.json
// RUN: FileCheck %s --check-prefix=DOT < %t/graph.dot
// RUN: test -s %t/graph.svg && test -s %t/graph.png

// REPORT:      "ops": [
// REPORT:          "accumulate": "f32",
// REPORT-NEXT:     "class": "lower",
// REPORT-NEXT:     "compute_type": "f16",
// REPORT-NEXT:     "node": "/fc1/Gemm",
// REPORT-NEXT:     "op": "amp.gemm",
// REPORT-NEXT:     "reason": "default policy lists amp.gemm as lower"
// REPORT:          "class": "follow",
// REPORT-NEXT:     "compute_type": "f16",
// REPORT-NEXT:     "node": "/relu/Relu",
// REPORT-NEXT:     "op": "amp.relu",
// REPORT-NEXT:     "reason": "default policy lists amp.relu as follow; every activation input is f16 (from '/fc1/Gemm')"
// REPORT:          "class": "none",
// REPORT-NEXT:     "compute_type": "none",
// REPORT-NEXT:     "node": "/labels/Add",
// REPORT-NEXT:     "op": "amp.add",
// REPORT-NEXT:     "reason": "no float operands: untouched"
// REPORT:          "class": "fp32",
// REPORT-NEXT:     "compute_type": "f32",
// REPORT-NEXT:     "node": "/loss/SoftmaxCrossEntropyLoss",
// REPORT:        "summary": {
// REPORT-NEXT:     "casts_after": 4,
// REPORT-NEXT:     "casts_before": 0,
// REPORT-NEXT:     "casts_inserted": 4,
// REPORT-NEXT:     "ops": 4,
// REPORT-NEXT:     "ops_by_compute_type": {
// REPORT-NEXT:       "f16": 2,
// REPORT-NEXT:       "f32": 1,
// REPORT-NEXT:       "none": 1
// REPORT:          "params_cast_to_target": 2
// REPORT:        "target": "f16"

// DOT: digraph "main" {
// DOT-DAG: [shape=box, label="param fc1.weight\ntensor<8x4xf32>", fillcolor="#8ecae6"];
// DOT-DAG: [label="/fc1/Gemm\namp.gemm\ntensor<2x8xf16>", shape=ellipse, fillcolor="#f4a261"];
// DOT-DAG: [label="amp.cast\ntensor<8x4xf16>", shape=cds, fillcolor="#f4a261"];
// DOT-DAG: [label="/loss/SoftmaxCrossEntropyLoss\namp.softmax_cross_entropy_loss\ntensor<f32>", shape=ellipse, fillcolor="#8ecae6"];

func.func @main(%w: tensor<8x4xf32> {amp.param = "fc1.weight"}, %b: tensor<8xf32> {amp.param = "fc1.bias"},
                %x: tensor<2x4xf32> {amp.input = "input"}, %y: tensor<2xi64> {amp.input = "labels"}) -> tensor<f32> {
  %0 = amp.gemm %x, %w, %b {trans_b = true} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x8xf32> loc("/fc1/Gemm")
  %1 = amp.relu %0 : tensor<2x8xf32> loc("/relu/Relu")
  %2 = amp.add %y, %y : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64> loc("/labels/Add")
  %3:2 = amp.softmax_cross_entropy_loss %1, %2 : (tensor<2x8xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x8xf32>) loc("/loss/SoftmaxCrossEntropyLoss")
  return %3#0 : tensor<f32>
}
