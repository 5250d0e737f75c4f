// RUN: amp-opt %s -split-input-file -verify-diagnostics -amp-autodiff

// expected-error @below {{amp-autodiff: 'noloss' has no result named 'loss' (name the loss with loss=<output name>)}}
func.func @noloss(%w: tensor<3xf32> {amp.param = "w"}) -> (tensor<3xf32> {amp.output = "y"}) {
  %0 = amp.relu %w : tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// expected-error @below {{amp-autodiff: the loss 'loss' must be a float scalar, it is 'tensor<3xf32>'}}
func.func @vector(%w: tensor<3xf32> {amp.param = "w"}) -> (tensor<3xf32> {amp.output = "loss"}) {
  %0 = amp.relu %w : tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @constant(%w: tensor<3xf32> {amp.param = "w"}, %x: tensor<f32> {amp.input = "x"}) -> (tensor<f32> {amp.output = "loss"}) {
  // expected-error @below {{amp-autodiff: the loss 'loss' does not depend on any parameter}}
  %0 = amp.relu %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Second-order: backward ops have no gradient rule of their own.
func.func @norule(%w: tensor<3x4xf32> {amp.param = "w"}, %x: tensor<3x4xf32> {amp.input = "x"}) -> (tensor<f32> {amp.output = "loss"}) {
  // expected-error @below {{'amp.unary_grad' op has no gradient rule, and it lies between the parameters and the loss}}
  %0 = amp.unary_grad %x, %w {kind = #amp.unary<relu>} : tensor<3x4xf32>
  %1 = amp.reduce_sum %0 {keepdims = false} : (tensor<3x4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}
