// RUN: amp-opt %s -split-input-file -amp-autodiff | FileCheck %s
// RUN: amp-opt %s -split-input-file -amp-autodiff -amp-autocast=target=f16 -amp-plan-memory -amp-lower-to-runtime -o /dev/null

// The MLP: the loss is seeded with 1, Gemm gives the weight gradient as a
// transposed product and the bias gradient as a sum over the batch; the
// input x (not a parameter) gets no gradient, and the results are appended
// in parameter order, marked amp.grad. ReLU's gradient reads its result (the
// same mask as its input, which then need not stay alive).
// CHECK-LABEL: func @mlp
// CHECK-SAME: -> (tensor<f32> {amp.output = "loss"}, tensor<3x4xf32> {amp.grad = "w1"}, tensor<3xf32> {amp.grad = "b1"}, tensor<2x3xf32> {amp.grad = "w2"})
// CHECK: %[[H:.+]] = amp.gemm %arg3, %arg0, %arg1 {trans_b = true}
// CHECK: %[[R:.+]] = amp.relu %[[H]]
// CHECK: %[[Z:.+]] = amp.gemm %[[R]], %arg2 {trans_b = true}
// CHECK: %[[LOSS:.+]], %[[LP:.+]] = amp.softmax_cross_entropy_loss %[[Z]], %arg4
// CHECK: %[[ONE:.+]] = arith.constant {amp.loss_seed} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DZ:.+]] = amp.softmax_cross_entropy_loss_grad %[[LP]], %arg4, %[[ONE]] {amp.differentiates = "loss_node"}
// CHECK: %[[DR:.+]] = amp.gemm %[[DZ]], %arg2 {amp.differentiates = "fc2"} : (tensor<5x2xf32>, tensor<2x3xf32>) -> tensor<5x3xf32>
// CHECK: %[[DW2:.+]] = amp.gemm %[[DZ]], %[[R]] {amp.differentiates = "fc2", trans_a = true} : (tensor<5x2xf32>, tensor<5x3xf32>) -> tensor<2x3xf32>
// CHECK: %[[DH:.+]] = amp.unary_grad %[[R]], %[[DR]] {amp.differentiates = "relu", kind = #amp.unary<relu>}
// CHECK: %[[DW1:.+]] = amp.gemm %[[DH]], %arg3 {amp.differentiates = "fc1", trans_a = true} : (tensor<5x3xf32>, tensor<5x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[S:.+]] = amp.reduce_sum %[[DH]] {amp.differentiates = "fc1", axes = array<i64: 0>}
// CHECK: %[[DB1:.+]] = amp.reshape %[[S]] {amp.differentiates = "fc1", shape = array<i64: 3>}
// CHECK: return %[[LOSS]], %[[DW1]], %[[DB1]], %[[DW2]]
func.func @mlp(%w1: tensor<3x4xf32> {amp.param = "w1"}, %b1: tensor<3xf32> {amp.param = "b1"},
               %w2: tensor<2x3xf32> {amp.param = "w2"}, %x: tensor<5x4xf32> {amp.input = "x"},
               %y: tensor<5xi64> {amp.input = "y"}) -> (tensor<f32> {amp.output = "loss"}) {
  %h = amp.gemm %x, %w1, %b1 {trans_b = true} : (tensor<5x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<5x3xf32> loc("fc1")
  %r = amp.relu %h : tensor<5x3xf32> loc("relu")
  %z = amp.gemm %r, %w2 {trans_b = true} : (tensor<5x3xf32>, tensor<2x3xf32>) -> tensor<5x2xf32> loc("fc2")
  %loss, %lp = amp.softmax_cross_entropy_loss %z, %y : (tensor<5x2xf32>, tensor<5xi64>) -> (tensor<f32>, tensor<5x2xf32>) loc("loss_node")
  return %loss : tensor<f32>
}

// -----

// A value used twice gets the sum of both gradients; broadcasting is undone
// by summing over the broadcast dims (keepdims, then reshaped).
// CHECK-LABEL: func @fanout
// CHECK: amp.mul %arg0, %arg1
// CHECK: %[[DL:.+]] = amp.softmax_cross_entropy_loss_grad
// CHECK: %[[G0:.+]] = amp.mul %[[DL]], %arg1 {amp.differentiates = "mul"}
// CHECK: %[[G1:.+]] = amp.mul %[[DL]], %arg0 {amp.differentiates = "mul"} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
// CHECK: %[[DV:.+]] = amp.reduce_sum %[[G1]] {amp.differentiates = "mul", axes = array<i64: 0>} : (tensor<4x3xf32>) -> tensor<1x3xf32>
// CHECK: %[[DW:.+]] = amp.add %[[DL]], %[[G0]] {amp.differentiates = "mul"}
// CHECK: return %{{.+}}, %[[DW]], %[[DV]] :
func.func @fanout(%w: tensor<4x3xf32> {amp.param = "w"}, %v: tensor<1x3xf32> {amp.param = "v"},
                  %y: tensor<4xi64> {amp.input = "y"}) -> (tensor<f32> {amp.output = "loss"}) {
  %a = amp.mul %w, %v : (tensor<4x3xf32>, tensor<1x3xf32>) -> tensor<4x3xf32> loc("mul")
  %b = amp.add %a, %w : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %loss, %lp = amp.softmax_cross_entropy_loss %b, %y : (tensor<4x3xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x3xf32>)
  return %loss : tensor<f32>
}


// -----

// ReduceMean's gradient: reshaped to the kept shape, scaled by 1/count,
// broadcast back with amp.expand.
// CHECK-LABEL: func @mean
// CHECK: %[[DL:.+]] = amp.softmax_cross_entropy_loss_grad
// CHECK: %[[K:.+]] = amp.reshape %[[DL]] {amp.differentiates = "reshape", shape = array<i64: 4, 3, 1>}
// CHECK: %[[C:.+]] = arith.constant dense<2.000000e-01> : tensor<f32>
// CHECK: %[[S:.+]] = amp.mul %[[K]], %[[C]] {amp.differentiates = "mean"}
// CHECK: %[[E:.+]] = amp.expand %[[S]] {amp.differentiates = "mean", shape = array<i64: 4, 3, 5>}
// CHECK: return %{{.+}}, %[[E]] :
func.func @mean(%w: tensor<4x3x5xf32> {amp.param = "w"}, %y: tensor<4xi64> {amp.input = "y"}) -> (tensor<f32> {amp.output = "loss"}) {
  %0 = amp.reduce_mean %w {axes = array<i64: 2>} : (tensor<4x3x5xf32>) -> tensor<4x3x1xf32> loc("mean")
  %1 = amp.reshape %0 {shape = array<i64: 4, 3>} : (tensor<4x3x1xf32>) -> tensor<4x3xf32> loc("reshape")
  %loss, %lp = amp.softmax_cross_entropy_loss %1, %y : (tensor<4x3xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x3xf32>)
  return %loss : tensor<f32>
}

// -----

// A MatMul whose weight is shared by every batch (a Linear layer on a 3-D
// activation): the weight's gradient is one product of the flattened rows,
// x as [rows, K] transposed times dz as [rows, N], not a product per batch
// and a sum; the input's gradient is dz @ w^T with the weight broadcast.
// CHECK-LABEL: func @matmul_shared_weight
// CHECK: %[[Z:.+]] = amp.matmul %arg1, %arg0 : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
// CHECK: %[[DZ:.+]] = amp.reshape %{{.+}} {amp.differentiates = "{{.+}}", shape = array<i64: 2, 3, 5>}
// CHECK: %[[X2:.+]] = amp.reshape %arg1 {amp.differentiates = "mm", shape = array<i64: 6, 4>}
// CHECK: %[[DZ2:.+]] = amp.reshape %[[DZ]] {amp.differentiates = "mm", shape = array<i64: 6, 5>}
// CHECK: %[[DW:.+]] = amp.gemm %[[X2]], %[[DZ2]] {amp.differentiates = "mm", trans_a = true} : (tensor<6x4xf32>, tensor<6x5xf32>) -> tensor<4x5xf32>
// CHECK-NOT: amp.reduce_sum
// CHECK: return %{{.+}}, %[[DW]]
func.func @matmul_shared_weight(%w: tensor<4x5xf32> {amp.param = "w"}, %x: tensor<2x3x4xf32> {amp.input = "x"},
                                %y: tensor<6xi64> {amp.input = "y"}) -> (tensor<f32> {amp.output = "loss"}) {
  %z = amp.matmul %x, %w : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32> loc("mm")
  %z2 = amp.reshape %z {shape = array<i64: 6, 5>} : (tensor<2x3x5xf32>) -> tensor<6x5xf32>
  %loss, %lp = amp.softmax_cross_entropy_loss %z2, %y : (tensor<6x5xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x5xf32>)
  return %loss : tensor<f32>
}
