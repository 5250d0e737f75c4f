// amp-lower-to-linalg refuses what it cannot lower, naming the op.
// RUN: not amp-opt %s -split-input-file --amp-lower-to-linalg 2>&1 | FileCheck %s

// CHECK: error: 'amp.random_normal' op has no lowering to linalg: no lowering is written for this op
func.func @random() -> tensor<4xf32> {
  %0 = amp.random_normal {seed = 1.0 : f32} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK: error: 'amp.dropout' op has no lowering to linalg: dropout in training mode draws random masks
func.func @dropout(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>) {
  %y, %m = amp.dropout %x {ratio = 0.5 : f32, training_mode = true} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>)
  return %y, %m : tensor<4xf32>, tensor<4xi1>
}

// -----

// CHECK: error: 'amp.update_scale' op has no lowering to linalg: min_scale with on_min_scale = error stops the run
func.func @floor(%s: tensor<f32>, %t: tensor<i64>, %h: tensor<i64>, %f: tensor<i1>) -> (tensor<f32>, tensor<i64>, tensor<i64>) {
  %ns, %nt, %nh = amp.update_scale %s tracker %t hysteresis %h found_inf %f {min_scale = 1.0 : f32}
  return %ns, %nt, %nh : tensor<f32>, tensor<i64>, tensor<i64>
}

// -----

// CHECK: error: 'amp.gemm' op has no lowering to linalg: accumulate must be f32
func.func @acc(%a: tensor<2x2xf16>, %b: tensor<2x2xf16>) -> tensor<2x2xf16> {
  %0 = amp.gemm %a, %b {accumulate = f16} : (tensor<2x2xf16>, tensor<2x2xf16>) -> tensor<2x2xf16>
  return %0 : tensor<2x2xf16>
}

// -----

// CHECK: error: 'amp.max_pool' op has no lowering to linalg: ceil_mode = 1
func.func @ceil(%x: tensor<1x1x5x5xf32>) -> tensor<1x1x3x3xf32> {
  %y, %i = amp.max_pool %x {ceil_mode = true, kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x1x5x5xf32>) -> (tensor<1x1x3x3xf32>, tensor<1x1x3x3xi64>)
  return %y : tensor<1x1x3x3xf32>
}
