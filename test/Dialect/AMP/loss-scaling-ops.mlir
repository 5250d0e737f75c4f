// RUN: amp-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// The loss-scaling ops parse, print and round-trip; bad ones are refused.

// CHECK-LABEL: func @ok
// CHECK: amp.unscale_and_check %arg0, %arg1 scale %arg2 : tensor<2x3xf16>, tensor<4xf32> -> tensor<2x3xf32>, tensor<4xf32>
// CHECK: amp.clip_grad_norm %{{.+}}#0, %{{.+}}#1 found_inf %{{.+}} {max_norm = 1.000000e+00 : f32} : tensor<2x3xf32>, tensor<4xf32> -> tensor<2x3xf32>, tensor<4xf32>
// CHECK: amp.update_scale %arg2 tracker %arg3 hysteresis %arg3 found_inf %{{.+}} {hysteresis = 2 : i64}
func.func @ok(%g0: tensor<2x3xf16>, %g1: tensor<4xf32>, %s: tensor<f32>, %t: tensor<i64>)
    -> (tensor<2x3xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<i64>) {
  %u:2, %f = amp.unscale_and_check %g0, %g1 scale %s : tensor<2x3xf16>, tensor<4xf32> -> tensor<2x3xf32>, tensor<4xf32>
  %c:2, %n = amp.clip_grad_norm %u#0, %u#1 found_inf %f {max_norm = 1.0 : f32} : tensor<2x3xf32>, tensor<4xf32> -> tensor<2x3xf32>, tensor<4xf32>
  %ns, %nt, %nh = amp.update_scale %s tracker %t hysteresis %t found_inf %f {hysteresis = 2}
  return %c#0, %c#1, %n, %ns, %nt, %nh : tensor<2x3xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<i64>
}

// -----

func.func @shape(%g0: tensor<2x3xf16>, %s: tensor<f32>) -> tensor<3x2xf32> {
  // expected-error @+1 {{result 0 must have gradient 0's shape}}
  %u:1, %f = amp.unscale_and_check %g0 scale %s : tensor<2x3xf16> -> tensor<3x2xf32>
  return %u#0 : tensor<3x2xf32>
}

// -----

func.func @count(%g0: tensor<2x3xf16>, %s: tensor<f32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{has 1 gradients and 2 results}}
  %u:2, %f = amp.unscale_and_check %g0 scale %s : tensor<2x3xf16> -> tensor<2x3xf32>, tensor<2x3xf32>
  return %u#0 : tensor<2x3xf32>
}

// -----

func.func @norm(%g: tensor<4xf32>, %f: tensor<i1>) -> tensor<4xf32> {
  // expected-error @+1 {{max_norm must be > 0}}
  %c:1, %n = amp.clip_grad_norm %g found_inf %f {max_norm = 0.0 : f32} : tensor<4xf32> -> tensor<4xf32>
  return %c#0 : tensor<4xf32>
}

// -----

func.func @backoff(%s: tensor<f32>, %t: tensor<i64>, %f: tensor<i1>) -> tensor<f32> {
  // expected-error @+1 {{backoff_factor must lie in (0, 1)}}
  %ns, %nt, %nh = amp.update_scale %s tracker %t hysteresis %t found_inf %f {backoff_factor = 1.5 : f32}
  return %ns : tensor<f32>
}

// -----

func.func @growth(%s: tensor<f32>, %t: tensor<i64>, %f: tensor<i1>) -> tensor<f32> {
  // expected-error @+1 {{growth_interval must be >= 1}}
  %ns, %nt, %nh = amp.update_scale %s tracker %t hysteresis %t found_inf %f {growth_interval = 0}
  return %ns : tensor<f32>
}

// -----

func.func @policy(%s: tensor<f32>, %t: tensor<i64>, %f: tensor<i1>) -> tensor<f32> {
  // expected-error @+2 {{expected ::mlir::amp::OnMinScale to be one of: error, warn}}
  // expected-error @+1 {{failed to parse AMP_OnMinScaleAttr parameter 'value'}}
  %ns, %nt, %nh = amp.update_scale %s tracker %t hysteresis %t found_inf %f {on_min_scale = #amp.on_min_scale<maybe>}
  return %ns : tensor<f32>
}
