// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.5 momentum=0.9" | FileCheck %s --check-prefix=SGD
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=adamw lr=0.001" | FileCheck %s --check-prefix=ADAMW
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-autocast=target=bf16 -amp-plan-memory -amp-lower-to-runtime -o /dev/null

// The training-step form of docs/architecture.md (the training-step form): the optimizer state and the
// step counter are arguments starting at zero, every update result names
// what it replaces (amp.updates), updates read found_inf, gradients are gone.
// SGD-LABEL: func @step
// SGD-SAME: %arg3: tensor<i64> {amp.init = dense<0> : tensor<i64>, amp.opt_state = "step"}
// SGD-SAME: %arg4: tensor<3x4xf32> {amp.init = dense<0.000000e+00> : tensor<3x4xf32>, amp.opt_state = "w.momentum_buffer"}
// SGD-SAME: -> (tensor<f32> {amp.output = "loss"}, tensor<3x4xf32> {amp.updates = "w"}, tensor<3x4xf32> {amp.updates = "w.momentum_buffer"}, tensor<i64> {amp.updates = "step"})
// SGD: %[[FLAG:.+]] = arith.constant {amp.found_inf} dense<false> : tensor<i1>
// SGD: %[[P:.+]], %[[B:.+]] = amp.sgd_update %arg0, %{{.+}} momentum_buf %arg4 : tensor<3x4xf32> step %arg3 found_inf %[[FLAG]] {lr = 5.000000e-01 : f32, momentum = 0.899999976 : f32} : tensor<3x4xf32>, tensor<3x4xf32>
// SGD: %[[S:.+]] = amp.step_count %arg3 found_inf %[[FLAG]]
// SGD: return %{{.+}}, %[[P]], %[[B]], %[[S]]
// SGD-NOT: amp.grad

// ADAMW-LABEL: func @step
// ADAMW-SAME: amp.opt_state = "w.exp_avg"
// ADAMW-SAME: amp.opt_state = "w.exp_avg_sq"
// ADAMW: amp.adam_update %arg0, %{{.+}}, %arg4, %arg5 step %arg3 found_inf %{{.+}} {decoupled = true, lr = 1.000000e-03 : f32, weight_decay = 0.00999999977 : f32}
func.func @step(%w: tensor<3x4xf32> {amp.param = "w"}, %x: tensor<5x4xf32> {amp.input = "x"},
                %y: tensor<5xi64> {amp.input = "y"}) -> (tensor<f32> {amp.output = "loss"}) {
  %z = amp.gemm %x, %w {trans_b = true} : (tensor<5x4xf32>, tensor<3x4xf32>) -> tensor<5x3xf32>
  %loss, %lp = amp.softmax_cross_entropy_loss %z, %y : (tensor<5x3xf32>, tensor<5xi64>) -> (tensor<f32>, tensor<5x3xf32>)
  return %loss : tensor<f32>
}
