// RUN: not amp-opt %s -amp-autodiff -amp-optimizer=optimizer=lamb 2>&1 | FileCheck %s --check-prefix=NAME
// NAME: amp-optimizer: unknown optimizer 'lamb' (sgd, adam or adamw)
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0" 2>&1 | FileCheck %s --check-prefix=LR
// LR: amp-optimizer: lr must be a finite number > 0, got 0
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=nan" 2>&1 | FileCheck %s --check-prefix=LRNAN
// LRNAN: amp-optimizer: lr must be a finite number > 0, got nan
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=adamw weight-decay=-0.5" 2>&1 | FileCheck %s --check-prefix=WD
// WD: amp-optimizer: weight-decay must be a finite number >= 0, got -5
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=adam beta2=1" 2>&1 | FileCheck %s --check-prefix=BETA
// BETA: amp-optimizer: beta2 must be in [0, 1), got 1
// RUN: not amp-opt %s -amp-autodiff -amp-optimizer="optimizer=adam nesterov=true" 2>&1 | FileCheck %s --check-prefix=NES
// NES: amp-optimizer: nesterov needs sgd with momentum > 0 and dampening 0
// RUN: not amp-opt %s -amp-optimizer 2>&1 | FileCheck %s --check-prefix=NOGRAD
// NOGRAD: amp-optimizer: no function has gradients (run amp-autodiff first)
func.func @step(%w: tensor<3x4xf32> {amp.param = "w"}, %x: tensor<5x4xf32> {amp.input = "x"},
                %y: tensor<5xi64> {amp.input = "y"}) -> (tensor<f32> {amp.output = "loss"}) {
  %z = amp.gemm %x, %w {trans_b = true} : (tensor<5x4xf32>, tensor<3x4xf32>) -> tensor<5x3xf32>
  %loss, %lp = amp.softmax_cross_entropy_loss %z, %y : (tensor<5x3xf32>, tensor<5xi64>) -> (tensor<f32>, tensor<5x3xf32>)
  return %loss : tensor<f32>
}
