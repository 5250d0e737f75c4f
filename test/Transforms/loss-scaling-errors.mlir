// RUN: not amp-opt %s -amp-loss-scaling 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="mode=fancy" 2>&1 | FileCheck %s --check-prefix=MODE
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="init-scale=0" 2>&1 | FileCheck %s --check-prefix=INIT
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="init-scale=1e39" 2>&1 | FileCheck %s --check-prefix=INIT
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="growth-factor=1" 2>&1 | FileCheck %s --check-prefix=GROWTH
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="backoff-factor=1" 2>&1 | FileCheck %s --check-prefix=BACKOFF
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="growth-interval=0" 2>&1 | FileCheck %s --check-prefix=INTERVAL
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="hysteresis=0" 2>&1 | FileCheck %s --check-prefix=HYST
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="min-scale=1e6" 2>&1 | FileCheck %s --check-prefix=MIN
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="on-min-scale=ignore" 2>&1 | FileCheck %s --check-prefix=ONMIN
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="max-norm=-1" 2>&1 | FileCheck %s --check-prefix=NORM
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="accumulate=0" 2>&1 | FileCheck %s --check-prefix=ACC
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling -amp-loss-scaling 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.1" -amp-loss-scaling="data-parallel=true accumulate=2" 2>&1 | FileCheck %s --check-prefix=DPACC

// NOSTEP: error: amp-loss-scaling: no training step (no function with an amp.found_inf flag): run amp-autodiff and amp-optimizer first
// DPACC: error: amp-loss-scaling: data-parallel with accumulate > 1 is not supported yet
// MODE: error: amp-loss-scaling: unknown mode 'fancy' (dynamic, static or none)
// INIT: error: amp-loss-scaling: init-scale must be a positive finite f32
// GROWTH: error: amp-loss-scaling: growth-factor must be > 1, got 1
// BACKOFF: error: amp-loss-scaling: backoff-factor must lie in (0, 1), got 1
// INTERVAL: error: amp-loss-scaling: growth-interval must be >= 1, got 0
// HYST: error: amp-loss-scaling: hysteresis must be >= 1, got 0
// MIN: error: amp-loss-scaling: min-scale must lie in [0, init-scale], got 1.000000e+06
// ONMIN: error: amp-loss-scaling: on-min-scale must be error or warn, got 'ignore'
// NORM: error: amp-loss-scaling: max-norm must be >= 0 (0: no clipping), got -1
// ACC: error: amp-loss-scaling: accumulate must lie in [1, 2^24], got 0
// TWICE: error: amp-loss-scaling: 'step' is already loss-scaled
func.func @step(%w: tensor<3x4xf32> {amp.param = "w"}, %x: tensor<5x4xf32> {amp.input = "x"},
                %y: tensor<5xi64> {amp.input = "y"}) -> (tensor<f32> {amp.output = "loss"}) {
  %z = amp.gemm %x, %w {trans_b = true} : (tensor<5x4xf32>, tensor<3x4xf32>) -> tensor<5x3xf32>
  %loss, %lp = amp.softmax_cross_entropy_loss %z, %y : (tensor<5x3xf32>, tensor<5xi64>) -> (tensor<f32>, tensor<5x3xf32>)
  return %loss : tensor<f32>
}
