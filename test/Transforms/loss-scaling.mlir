// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.5" -amp-loss-scaling | FileCheck %s --check-prefix=DYN
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=adam lr=0.001" -amp-loss-scaling="init-scale=1024 growth-factor=4 backoff-factor=0.25 growth-interval=10 hysteresis=2 min-scale=1 on-min-scale=warn" | FileCheck %s --check-prefix=OPTS
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.5" -amp-loss-scaling="mode=static init-scale=128" | FileCheck %s --check-prefix=STATIC
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.5" -amp-loss-scaling="mode=none" | FileCheck %s --check-prefix=NONE
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.5" -amp-loss-scaling="mode=none check-inf=false" | FileCheck %s --check-prefix=NOCHECK
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.5" -amp-loss-scaling="max-norm=1.5" | FileCheck %s --check-prefix=CLIP
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.5" -amp-loss-scaling="accumulate=4" | FileCheck %s --check-prefix=ACC
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.5" -amp-loss-scaling="data-parallel=true" | FileCheck %s --check-prefix=DP
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.5" -amp-loss-scaling="data-parallel=true" -amp-autocast=target=f16 -amp-plan-memory -amp-lower-to-runtime -o /dev/null
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=sgd lr=0.5" -amp-loss-scaling -amp-autocast=target=f16 -amp-plan-memory -amp-lower-to-runtime -o /dev/null
// RUN: amp-opt %s -amp-autodiff -amp-optimizer="optimizer=adam lr=0.5" -amp-loss-scaling="accumulate=3 max-norm=1" -amp-autocast=target=bf16 -amp-plan-memory -amp-lower-to-runtime -o /dev/null

// Dynamic (PyTorch's GradScaler defaults): the scale and its trackers are
// state; the backward's seed is the scale; one unscale_and_check feeds every
// update and the step counter; update_scale reads the scale from before the
// step; the step reports the scale it used and found_inf.
// DYN-LABEL: func @step
// DYN-SAME: %arg5: tensor<f32> {amp.init = dense<6.553600e+04> : tensor<f32>, amp.opt_state = "loss_scale"}
// DYN-SAME: %arg6: tensor<i64> {amp.init = dense<0> : tensor<i64>, amp.opt_state = "growth_tracker"}
// DYN-SAME: %arg7: tensor<i64> {amp.init = dense<1> : tensor<i64>, amp.opt_state = "hysteresis_left"}
// DYN-SAME: tensor<f32> {amp.updates = "loss_scale"}, tensor<i64> {amp.updates = "growth_tracker"}, tensor<i64> {amp.updates = "hysteresis_left"}, tensor<f32> {amp.output = "loss_scale"}, tensor<i1> {amp.output = "found_inf"})
// DYN-NOT: amp.loss_seed
// DYN-NOT: arith.constant {amp.found_inf}
// DYN: amp.softmax_cross_entropy_loss_grad %{{.+}}, %{{.+}}, %arg5
// DYN: %[[U:.+]]:2, %[[F:.+]] = amp.unscale_and_check %[[GW:.+]], %[[GB:.+]] scale %arg5 : tensor<3x4xf32>, tensor<3xf32> -> tensor<3x4xf32>, tensor<3xf32>
// DYN: amp.sgd_update %arg0, %[[U]]#0 step %arg4 found_inf %[[F]]
// DYN: amp.sgd_update %arg1, %[[U]]#1 step %arg4 found_inf %[[F]]
// DYN: %[[S:.+]] = amp.step_count %arg4 found_inf %[[F]]
// DYN: %[[NS:.+]], %[[NT:.+]], %[[NH:.+]] = amp.update_scale %arg5 tracker %arg6 hysteresis %arg7 found_inf %[[F]]
// DYN-NOT: growth
// DYN: return %{{.+}}, %{{.+}}, %{{.+}}, %[[S]], %[[NS]], %[[NT]], %[[NH]], %arg5, %[[F]]

// Data parallel: one all-reduce (mean) of every gradient, before the
// unscale and check read them.
// DP: %[[R:.+]]:2 = amp.all_reduce %{{.+}}, %{{.+}} {mean} : tensor<3x4xf32>, tensor<3xf32> -> tensor<3x4xf32>, tensor<3xf32>
// DP: amp.unscale_and_check %[[R]]#0, %[[R]]#1 scale %arg5

// Every option reaches the op; Adam's moments are skipped by the same flag.
// OPTS: amp.init = dense<1.024000e+03> : tensor<f32>, amp.opt_state = "loss_scale"
// OPTS: amp.init = dense<2> : tensor<i64>, amp.opt_state = "hysteresis_left"
// OPTS: %{{.+}}:2, %[[F:.+]] = amp.unscale_and_check
// OPTS: amp.adam_update {{.+}} found_inf %[[F]]
// OPTS: amp.update_scale %{{.+}} found_inf %[[F]] {backoff_factor = 2.500000e-01 : f32, growth_factor = 4.000000e+00 : f32, growth_interval = 10 : i64, hysteresis = 2 : i64, min_scale = 1.000000e+00 : f32, on_min_scale = #amp.on_min_scale<warn>}

// Static: a constant scale seeds the backward and unscales; no state.
// STATIC-LABEL: func @step
// STATIC-NOT: amp.opt_state = "loss_scale"
// STATIC: %[[C:.+]] = arith.constant dense<1.280000e+02> : tensor<f32>
// STATIC: amp.softmax_cross_entropy_loss_grad %{{.+}}, %{{.+}}, %[[C]]
// STATIC: amp.unscale_and_check %{{.+}}, %{{.+}} scale %[[C]]
// STATIC-NOT: amp.update_scale
// STATIC: return {{.+}}, %[[C]], %{{.+}} :

// None: the seed stays 1; the inf check (and the skip) stays, scale 1.
// NONE: %[[ONE:.+]] = arith.constant dense<1.000000e+00> : tensor<f32>
// NONE: %[[SEED:.+]] = arith.constant dense<1.000000e+00> : tensor<f32>
// NONE: amp.softmax_cross_entropy_loss_grad %{{.+}}, %{{.+}}, %[[SEED]]
// NONE: %{{.+}}:2, %[[F:.+]] = amp.unscale_and_check %{{.+}}, %{{.+}} scale %[[ONE]]
// NONE: amp.sgd_update {{.+}} found_inf %[[F]]
// NONE-NOT: amp.update_scale

// None without the check: found_inf stays the constant false.
// NOCHECK-NOT: amp.unscale_and_check
// NOCHECK: %[[F:.+]] = arith.constant dense<false> : tensor<i1>
// NOCHECK: amp.sgd_update {{.+}} found_inf %[[F]]
// NOCHECK: return {{.+}}, %[[F]] :

// Clipping acts on the unscaled gradients, before the updates, and reports
// the norm.
// CLIP-LABEL: func @step
// CLIP-SAME: tensor<i1> {amp.output = "found_inf"}, tensor<f32> {amp.output = "grad_norm"})
// CLIP: %[[U:.+]]:2, %[[F:.+]] = amp.unscale_and_check
// CLIP: %[[C:.+]]:2, %[[N:.+]] = amp.clip_grad_norm %[[U]]#0, %[[U]]#1 found_inf %[[F]] {max_norm = 1.500000e+00 : f32}
// CLIP: amp.sgd_update %arg0, %[[C]]#0
// CLIP: return {{.+}}, %[[F]], %[[N]] :
// Gradient accumulation (4 micro-batches per update): the seed is S / 4,
// scaled gradients add up in state, the k-th call applies: the updates see
// "skip" (found_inf, or not the applying call), the scale state and the
// accumulators change only then, found_inf is reported only then.
// ACC-LABEL: func @step
// ACC-SAME: %arg8: tensor<i64> {amp.init = dense<0> : tensor<i64>, amp.opt_state = "micro_step"}
// ACC-SAME: %arg9: tensor<3x4xf32> {amp.init = dense<0.000000e+00> : tensor<3x4xf32>, amp.opt_state = "w.grad_accum"}
// ACC-SAME: %arg10: tensor<3xf32> {amp.init = dense<0.000000e+00> : tensor<3xf32>, amp.opt_state = "b.grad_accum"}
// ACC-SAME: tensor<i64> {amp.updates = "micro_step"}, tensor<3x4xf32> {amp.updates = "w.grad_accum"}, tensor<3xf32> {amp.updates = "b.grad_accum"}
// ACC: %[[K:.+]] = arith.constant dense<4.000000e+00> : tensor<f32>
// ACC: %[[SEED:.+]] = amp.div %arg5, %[[K]]
// ACC: amp.softmax_cross_entropy_loss_grad %{{.+}}, %{{.+}}, %[[SEED]]
// ACC: %[[APPLY:.+]], %[[NM:.+]] = amp.micro_step %arg8 {every = 4 : i64}
// ACC: %[[SW:.+]] = amp.add %arg9, %{{.+}} : (tensor<3x4xf32>, tensor<3x4xf32>)
// ACC: %[[SB:.+]] = amp.add %arg10, %{{.+}} : (tensor<3xf32>, tensor<3xf32>)
// ACC: %[[U:.+]]:2, %[[F:.+]] = amp.unscale_and_check %[[SW]], %[[SB]] scale %arg5
// ACC: %[[T:.+]] = arith.constant dense<true>
// ACC: %[[SKIP:.+]] = amp.where %[[APPLY]], %[[F]], %[[T]]
// ACC: %[[FALSE:.+]] = arith.constant dense<false>
// ACC: %[[REP:.+]] = amp.where %[[APPLY]], %[[F]], %[[FALSE]]
// ACC: amp.sgd_update %arg0, %[[U]]#0 step %arg4 found_inf %[[SKIP]]
// ACC: amp.sgd_update %arg1, %[[U]]#1 step %arg4 found_inf %[[SKIP]]
// ACC: amp.step_count %arg4 found_inf %[[SKIP]]
// ACC: %[[NS:.+]], %{{.+}}, %{{.+}} = amp.update_scale %arg5 tracker %arg6 hysteresis %arg7 found_inf %[[REP]]
// ACC: %[[S2:.+]] = amp.where %[[APPLY]], %[[NS]], %arg5
// ACC: amp.where %[[APPLY]], %{{.+}}, %[[SW]]
// ACC: return {{.+}}, %[[S2]], {{.+}}, %[[NM]], {{.+}}, %arg5, %[[REP]] :
func.func @step(%w: tensor<3x4xf32> {amp.param = "w"}, %b: tensor<3xf32> {amp.param = "b"},
                %x: tensor<5x4xf32> {amp.input = "x"},
                %y: tensor<5xi64> {amp.input = "y"}) -> (tensor<f32> {amp.output = "loss"}) {
  %z = amp.gemm %x, %w, %b {trans_b = true} : (tensor<5x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<5x3xf32>
  %loss, %lp = amp.softmax_cross_entropy_loss %z, %y : (tensor<5x3xf32>, tensor<5xi64>) -> (tensor<f32>, tensor<5x3xf32>)
  return %loss : tensor<f32>
}
