// amp-autodiff padding-rows=name:row (nn.Embedding's padding_idx): the
// embedding lookup's gradient leaves the row out (where(row, 0, dW)); the
// same weight's other use (a tied output projection) keeps its whole
// gradient, which is added after.
// RUN: amp-opt %s "-amp-autodiff=padding-rows=emb:0,emb:3" | FileCheck %s
// CHECK-LABEL: func @tied
// CHECK-DAG: %[[MASK:.+]] = arith.constant dense<[{{\[}}true], [false], [false], [true], [false]]> : tensor<5x1xi1>
// CHECK-DAG: %[[G:.+]] = amp.gather_grad %[[IDS:.+]], %{{.+}} {{.*}} -> tensor<5x3xf32>
// CHECK: %[[Z:.+]] = amp.where %[[MASK]], %{{[^,]+}}, %[[G]] {{.*}}: (tensor<5x1xi1>, tensor<f32>, tensor<5x3xf32>) -> tensor<5x3xf32>
// CHECK: amp.add {{.*}}%[[Z]]
// CHECK-NOT: amp.padding_rows
func.func @tied(%emb: tensor<5x3xf32> {amp.param = "emb"}, %ids: tensor<4xi64> {amp.input = "ids"},
                %y: tensor<4xi64> {amp.input = "y"}) -> (tensor<f32> {amp.output = "loss"}) {
  %e = amp.gather %emb, %ids {axis = 0 : i64} : (tensor<5x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>
  %z = amp.gemm %e, %emb {trans_b = true} : (tensor<4x3xf32>, tensor<5x3xf32>) -> tensor<4x5xf32>
  %loss, %lp = amp.softmax_cross_entropy_loss %z, %y : (tensor<4x5xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x5xf32>)
  return %loss : tensor<f32>
}

// RUN: not amp-opt %s "-amp-autodiff=padding-rows=emb:5" 2>&1 | FileCheck %s --check-prefix=RANGE
// RANGE: error: amp-autodiff: padding row 'emb:5': row 5 is outside 'emb' ('tensor<5x3xf32>')
// RUN: not amp-opt %s "-amp-autodiff=padding-rows=emb" 2>&1 | FileCheck %s --check-prefix=FORM
// FORM: error: amp-autodiff: padding row 'emb' is not name:row
// RUN: not amp-opt %s "-amp-autodiff=padding-rows=nope:1" 2>&1 | FileCheck %s --check-prefix=NAME
// NAME: error: amp-autodiff: padding row 'nope:1': 'nope' is not a parameter of 'tied'
// RUN: not amp-opt %s "-amp-autodiff=frozen=emb padding-rows=emb:1" 2>&1 | FileCheck %s --check-prefix=FROZEN
// FROZEN: error: amp-autodiff: padding row 'emb:1': 'emb' is frozen
