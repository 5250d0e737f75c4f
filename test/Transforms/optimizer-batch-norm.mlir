// RUN: amp-opt %s -split-input-file -verify-diagnostics -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" | FileCheck %s
// RUN: not amp-opt %s -split-input-file -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="data-parallel=true" 2>&1 | FileCheck %s --check-prefix=DP
// DP: error: 'amp.batch_norm' op amp-loss-scaling: data-parallel with batch norm in training mode is not supported yet

// Batch norm in training mode: its running statistics (parameters without a
// gradient) become state the step returns, each naming what it replaces;
// the optimizer trains only scale and bias.
// CHECK-LABEL: func @step
// CHECK-SAME: -> (tensor<f32> {amp.output = "loss"}, tensor<3xf32> {amp.updates = "g"}, tensor<3xf32> {amp.updates = "b"}, tensor<3xf32> {amp.updates = "bn.mean"}, tensor<3xf32> {amp.updates = "bn.var"}, tensor<i64> {amp.updates = "step"})
// CHECK: %[[Y:.+]], %[[RM:.+]], %[[RV:.+]] = amp.batch_norm
// CHECK-NOT: amp.sgd_update %arg2
// CHECK-NOT: amp.sgd_update %arg3
// CHECK: return %{{.+}}, %{{.+}}, %{{.+}}, %[[RM]], %[[RV]], %{{.+}}
func.func @step(%g: tensor<3xf32> {amp.param = "g"}, %b: tensor<3xf32> {amp.param = "b"},
                %m: tensor<3xf32> {amp.param = "bn.mean"}, %v: tensor<3xf32> {amp.param = "bn.var"},
                %x: tensor<4x3x2x2xf32> {amp.input = "x"}) -> (tensor<f32> {amp.output = "loss"}) {
  %y, %rm, %rv = amp.batch_norm %x, %g, %b, %m, %v {training_mode = true} : (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>)
  %l = amp.reduce_mean %y {keepdims = false} : (tensor<4x3x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// In inference mode the statistics are read, not updated: no state.
// CHECK-LABEL: func @eval_bn
// CHECK-SAME: -> (tensor<f32> {amp.output = "loss"}, tensor<3xf32> {amp.updates = "g"}, tensor<3xf32> {amp.updates = "b"}, tensor<i64> {amp.updates = "step"})
func.func @eval_bn(%g: tensor<3xf32> {amp.param = "g"}, %b: tensor<3xf32> {amp.param = "b"},
                   %m: tensor<3xf32> {amp.param = "bn.mean"}, %v: tensor<3xf32> {amp.param = "bn.var"},
                   %x: tensor<4x3x2x2xf32> {amp.input = "x"}) -> (tensor<f32> {amp.output = "loss"}) {
  %y, %rm, %rv = amp.batch_norm %x, %g, %b, %m, %v : (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>)
  %l = amp.reduce_mean %y {keepdims = false} : (tensor<4x3x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// One running statistic updated by two batch norms: which update wins is
// not defined, so it is an error.
func.func @shared(%g: tensor<3xf32> {amp.param = "g"}, %b: tensor<3xf32> {amp.param = "b"},
                  %m: tensor<3xf32> {amp.param = "bn.mean"}, %v: tensor<3xf32> {amp.param = "bn.var"},
                  %x: tensor<4x3x2x2xf32> {amp.input = "x"}) -> (tensor<f32> {amp.output = "loss"}) {
  %y, %rm, %rv = amp.batch_norm %x, %g, %b, %m, %v {training_mode = true} : (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>)
  // expected-error @+1 {{amp-optimizer: the running statistic 'bn.mean' is updated by two batch norms}}
  %y2, %rm2, %rv2 = amp.batch_norm %y, %g, %b, %m, %v {training_mode = true} : (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>)
  %l = amp.reduce_mean %y2 {keepdims = false} : (tensor<4x3x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
