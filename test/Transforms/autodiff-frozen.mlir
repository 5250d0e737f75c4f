// RUN: amp-opt %s -amp-autodiff=frozen=v | FileCheck %s

// A frozen parameter gets no gradient result.
// CHECK-LABEL: func @frozen
// CHECK-SAME: -> (tensor<f32> {amp.output = "loss"}, tensor<4x3xf32> {amp.grad = "w"})
// CHECK-NOT: amp.grad = "v"
func.func @frozen(%w: tensor<4x3xf32> {amp.param = "w"}, %v: tensor<1x3xf32> {amp.param = "v"},
                  %y: tensor<4xi64> {amp.input = "y"}) -> (tensor<f32> {amp.output = "loss"}) {
  %a = amp.sub %w, %v : (tensor<4x3xf32>, tensor<1x3xf32>) -> tensor<4x3xf32>
  %loss, %lp = amp.softmax_cross_entropy_loss %a, %y : (tensor<4x3xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x3xf32>)
  return %loss : tensor<f32>
}

// RUN: not amp-opt %s -amp-autodiff=frozen=nope 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: error: amp-autodiff: frozen parameter 'nope' is not a parameter of 'frozen'
