// The registered pipelines are what amp-compile and amp-run run: the whole
// training pipeline from amp-opt gives the same IR as the passes one by one
// with the same options, and its stages can be run alone.
//
// RUN: amp-opt %s --pass-pipeline='builtin.module(amp-training-pipeline{loss-fn=cross_entropy optimizer=adamw lr=0.001 weight-decay=0.01 precision=bf16 keep-weight-casts=true init-scale=1024 growth-interval=3})' -o %t.pipeline.mlir
// RUN: amp-opt %s -amp-add-loss=kind=cross_entropy -amp-autodiff -amp-optimizer="optimizer=adamw lr=0.001 weight-decay=0.01" -amp-loss-scaling="init-scale=1024 growth-interval=3" -amp-autocast=target=bf16 -amp-fold-transposes -cse -amp-keep-weight-casts -amp-plan-memory -amp-lower-to-runtime -o %t.passes.mlir
// RUN: diff %t.pipeline.mlir %t.passes.mlir
// RUN: FileCheck %s --check-prefix=LOWERED < %t.pipeline.mlir
//
// RUN: amp-opt %s --pass-pipeline='builtin.module(amp-train-step{loss-fn=cross_entropy optimizer=sgd lr=0.1 momentum=0.9})' | FileCheck %s --check-prefix=STEP
// RUN: amp-opt %s --amp-train-step='loss-fn=cross_entropy loss-scaling=none' | FileCheck %s --check-prefix=NOSCALE
// RUN: amp-opt %s --amp-train-step=loss-fn=cross_entropy --amp-lower-for-runtime=precision=fp16 | FileCheck %s --check-prefix=FP16
//
// RUN: not amp-opt %s --pass-pipeline='builtin.module(amp-training-pipeline{precision=fp8})' 2>&1 | FileCheck %s --check-prefix=PRECISION
// RUN: not amp-opt %s --pass-pipeline='builtin.module(amp-lower-for-runtime{block-list=gemm_0})' 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not amp-opt %s --pass-pipeline='builtin.module(amp-train-step{optimiser=sgd})' 2>&1 | FileCheck %s --check-prefix=OPTION

// LOWERED: llvm.func @main(
// LOWERED-SAME: amp.arena_bytes
// LOWERED: llvm.call @amprt_exec

// STEP-LABEL: func.func @main
// STEP-SAME: {amp.input = "labels"}
// STEP: amp.softmax_cross_entropy_loss
// STEP: amp.unscale_and_check
// STEP: amp.sgd_update
// STEP: amp.update_scale
// STEP-NOT: bf16
// STEP: return

// NOSCALE-LABEL: func.func @main
// NOSCALE-NOT: amp.update_scale
// NOSCALE: amp.sgd_update
// NOSCALE-NOT: amp.update_scale
// NOSCALE: return

// FP16: llvm.func @main(

// PRECISION: amp-training-pipeline: precision must be fp32, fp16 or bf16, got 'fp8'
// BLOCK: amp-lower-for-runtime: --block-list needs --precision fp16 or bf16 (fp32 runs no autocast)
// OPTION: no such option optimiser

func.func @main(%w: tensor<3x4xf32> {amp.param = "w", amp.init = dense<0.5> : tensor<3x4xf32>},
                %x: tensor<5x4xf32> {amp.input = "x"})
    -> (tensor<5x3xf32> {amp.output = "logits"}) {
  %z = amp.gemm %x, %w {trans_b = true} : (tensor<5x4xf32>, tensor<3x4xf32>) -> tensor<5x3xf32>
  return %z : tensor<5x3xf32>
}
