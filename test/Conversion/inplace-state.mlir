// amp-lower-to-runtime writes optimizer-state results straight into the
// caller's buffer, and lists them in amp.inplace_results, when the state op
// reads its input element by element and nothing reads the argument after
// it: the runner may then pass one buffer as argument and result.
// RUN: amp-opt %s -split-input-file -amp-plan-memory -amp-lower-to-runtime | FileCheck %s

// new:w (sgd_update of w) and new:step (step_count of step) are in place;
// the loss is not state.
// CHECK-LABEL: llvm.func @sgd(
// CHECK-SAME: amp.inplace_results = array<i64: 1, 2>
func.func @sgd(%w: tensor<4xf32> {amp.param = "w", amp.init = dense<1.0> : tensor<4xf32>},
               %step: tensor<i64> {amp.opt_state = "step", amp.init = dense<0> : tensor<i64>},
               %g: tensor<4xf32> {amp.input = "g"})
    -> (tensor<4xf32> {amp.output = "loss"}, tensor<4xf32> {amp.updates = "w"},
        tensor<i64> {amp.updates = "step"}) {
  %f = arith.constant dense<false> : tensor<i1>
  %l = amp.mul %w, %g : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %nw = amp.sgd_update %w, %g step %step found_inf %f {lr = 0.1 : f32} : tensor<4xf32>
  %ns = amp.step_count %step found_inf %f
  return %l, %nw, %ns : tensor<4xf32>, tensor<4xf32>, tensor<i64>
}

// -----

// w is read after its update (the second mul): new:w must not share w's
// buffer; new:step still may.
// CHECK-LABEL: llvm.func @read_after(
// CHECK-SAME: amp.inplace_results = array<i64: 2>
func.func @read_after(%w: tensor<4xf32> {amp.param = "w", amp.init = dense<1.0> : tensor<4xf32>},
                      %step: tensor<i64> {amp.opt_state = "step", amp.init = dense<0> : tensor<i64>},
                      %g: tensor<4xf32> {amp.input = "g"})
    -> (tensor<4xf32> {amp.output = "late"}, tensor<4xf32> {amp.updates = "w"},
        tensor<i64> {amp.updates = "step"}) {
  %f = arith.constant dense<false> : tensor<i1>
  %nw = amp.sgd_update %w, %g step %step found_inf %f {lr = 0.1 : f32} : tensor<4xf32>
  %l = amp.mul %w, %g : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %ns = amp.step_count %step found_inf %f
  return %l, %nw, %ns : tensor<4xf32>, tensor<4xf32>, tensor<i64>
}

// -----

// A state result computed by an ordinary op (here an add) is copied as
// before: only the optimizer-state ops are known to be alias-safe.
// CHECK-LABEL: llvm.func @plain(
// CHECK-SAME: amp.inplace_results = array<i64>
func.func @plain(%a: tensor<4xf32> {amp.opt_state = "acc", amp.init = dense<0.0> : tensor<4xf32>},
                 %g: tensor<4xf32> {amp.input = "g"})
    -> (tensor<4xf32> {amp.updates = "acc"}) {
  %s = amp.add %a, %g : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %s : tensor<4xf32>
}
