// RUN: amp-opt %s -split-input-file -amp-add-loss | FileCheck %s --check-prefix=CE
// RUN: amp-opt %s -split-input-file -amp-add-loss="kind=nll output=logits label=target" | FileCheck %s --check-prefix=NLL
// RUN: amp-opt %s -split-input-file -amp-add-loss="kind=mse label=y" | FileCheck %s --check-prefix=MSE
// RUN: amp-opt %s -split-input-file -amp-add-loss -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling -amp-autocast=target=f16 -amp-plan-memory -amp-lower-to-runtime -o /dev/null
// RUN: not amp-opt %s -split-input-file -amp-add-loss="kind=hinge" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not amp-opt %s -split-input-file -amp-add-loss="output=probs" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not amp-opt %s -split-input-file -amp-add-loss="label=x" 2>&1 | FileCheck %s --check-prefix=TAKEN

// The training spec of a forward graph (no loss op): a loss of the only
// output against a new label input, returned as `loss`; the forward results
// stay. cross_entropy: int64 labels [N]; nll: the same, of log-probabilities;
// mse: mean of squares against an f32 label of the output's shape.
// CE-LABEL: func @main
// CE-SAME: %arg2: tensor<5xi64> {amp.input = "labels"}
// CE-SAME: -> (tensor<5x3xf32> {amp.output = "logits"}, tensor<f32> {amp.output = "loss"})
// CE: %[[L:.+]], %{{.+}} = amp.softmax_cross_entropy_loss %[[Z:.+]], %arg2
// CE: return %[[Z]], %[[L]]
// NLL-LABEL: func @main
// NLL-SAME: %arg2: tensor<5xi64> {amp.input = "target"}
// NLL: %[[L:.+]] = amp.nll_loss %{{.+}}, %arg2
// NLL: return %{{.+}}, %[[L]]
// MSE-LABEL: func @main
// MSE-SAME: %arg2: tensor<5x3xf32> {amp.input = "y"}
// MSE: %[[D:.+]] = amp.sub %[[Z:.+]], %arg2
// MSE: %[[S:.+]] = amp.mul %[[D]], %[[D]]
// MSE: %[[L:.+]] = amp.reduce_mean %[[S]] {keepdims = false} : (tensor<5x3xf32>) -> tensor<f32>
// MSE: return %[[Z]], %[[L]]
// KIND: error: amp-add-loss: unknown loss kind 'hinge' (cross_entropy, nll or mse)
// MISSING: error: amp-add-loss: no result named 'probs' (the results are: logits)
// TAKEN: error: amp-add-loss: the label name 'x' is already taken by an input or parameter
func.func @main(%w: tensor<3x4xf32> {amp.param = "w"}, %x: tensor<5x4xf32> {amp.input = "x"})
    -> (tensor<5x3xf32> {amp.output = "logits"}) {
  %z = amp.gemm %x, %w {trans_b = true} : (tensor<5x4xf32>, tensor<3x4xf32>) -> tensor<5x3xf32>
  return %z : tensor<5x3xf32>
}
