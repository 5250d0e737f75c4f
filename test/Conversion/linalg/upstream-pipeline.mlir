// A training step (autodiff, fp16 autocast, SGD, dynamic loss scaling) from
// amp-training-to-linalg, then upstream MLIR alone: one-shot bufferization
// and the lowering to the LLVM dialect (no amp op, no IREE).
// RUN: amp-opt %s --pass-pipeline='builtin.module(amp-training-to-linalg{precision=fp16 optimizer=sgd lr=0.1})' > %t.linalg.mlir
// RUN: FileCheck %s --check-prefix=LINALG < %t.linalg.mlir
// RUN: mlir-opt %t.linalg.mlir --one-shot-bufferize="bufferize-function-boundaries" --convert-linalg-to-loops --expand-strided-metadata --lower-affine --convert-scf-to-cf --convert-math-to-llvm --convert-math-to-libm --convert-arith-to-llvm --finalize-memref-to-llvm --convert-cf-to-llvm --convert-func-to-llvm --reconcile-unrealized-casts | FileCheck %s --check-prefix=LLVM

// LINALG-NOT: amp.{{[a-z_]+}} %
// LINALG-LABEL: func.func @main(
// LINALG-SAME: amp.param = "w"
// LINALG-SAME: amp.opt_state = "loss_scale"
// LINALG-SAME: amp.updates = "w"
// LINALG-SAME: amp.output = "found_inf"
// LINALG: func.func @main_init()
// LINALG-SAME: amp.arg = 0 : i64, amp.param = "w"
// LINALG: arith.constant dense<6.553600e+04> : tensor<f32>

// LLVM-NOT: linalg.
// LLVM: llvm.func @main(
// LLVM: llvm.func @main_init(
func.func @main(%w: tensor<4x3xf32> {amp.param = "w", amp.init = dense<0.25> : tensor<4x3xf32>},
                %x: tensor<2x3xf32> {amp.input = "x"}, %y: tensor<2xi64> {amp.input = "y"})
    -> (tensor<f32> {amp.output = "loss"}) {
  %z = amp.gemm %x, %w {trans_b = true} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %loss, %lp = amp.softmax_cross_entropy_loss %z, %y : (tensor<2x4xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x4xf32>)
  return %loss : tensor<f32>
}
