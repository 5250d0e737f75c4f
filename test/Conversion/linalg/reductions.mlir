// amp-lower-to-linalg, pooling, reductions, softmax and normalisation: the
// ops AMP keeps in fp32 sum in f64 as the runtime does; max pooling's
// indices are ONNX's flat row-major ones (the first maximum of a window).
// RUN: amp-opt %s --amp-lower-to-linalg=state-init=false | FileCheck %s

// CHECK-LABEL: func.func @max_pool
func.func @max_pool(%x: tensor<1x2x4x4xf32>, %dy: tensor<1x2x2x2xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x4x4xf32>) {
  // CHECK: tensor.pad %{{.+}} low[0, 0, 0, 0] high[0, 0, 1, 1]
  // CHECK: linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]
  // CHECK: arith.maximumf
  // The index: the smallest flat index holding the maximum, inside the input.
  // CHECK: linalg.generic
  // CHECK: linalg.index 1
  // CHECK: arith.cmpf ueq
  // CHECK: arith.minsi
  // The gradient gathers dy where a window's index names the position.
  // CHECK: linalg.generic
  // CHECK: arith.remsi
  // CHECK: tensor.extract %{{.+}} : tensor<1x2x2x2xf32>
  // CHECK: tensor.extract %{{.+}} : tensor<1x2x2x2xi64>
  // CHECK: arith.cmpi eq
  %y, %i = amp.max_pool %x {kernel_shape = array<i64: 3, 3>, pads = array<i64: 0, 0, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>)
  %dx = amp.max_pool_grad %x, %dy, %i : (tensor<1x2x4x4xf32>, tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>) -> tensor<1x2x4x4xf32>
  return %y, %dx : tensor<1x2x2x2xf32>, tensor<1x2x4x4xf32>
}

// CHECK-LABEL: func.func @means
func.func @means(%x: tensor<2x3x4x4xf16>) -> (tensor<2x3x1x1xf16>, tensor<2x4x4xf32>) {
  // CHECK: linalg.fill ins(%{{.+}} : f64) outs(%{{.+}} : tensor<2x3xf64>)
  // CHECK: arith.extf %{{.+}} : f16 to f64
  // CHECK: arith.addf %{{.+}}, %{{.+}} : f64
  // CHECK: tensor.expand_shape {{.+}} into tensor<2x3x1x1xf64>
  // CHECK: arith.divf %{{.+}}, %{{.+}} : f64
  // f64 -> f16 through f32, as the runtime stores it ((float) first).
  // CHECK: %[[F:.+]] = arith.truncf %{{.+}} : f64 to f32
  // CHECK: arith.truncf %[[F]] : f32 to f16
  %g = amp.global_average_pool %x : (tensor<2x3x4x4xf16>) -> tensor<2x3x1x1xf16>
  %w = amp.cast %x : tensor<2x3x4x4xf16> to tensor<2x3x4x4xf32>
  // CHECK: arith.truncf %{{.+}} : f64 to f32
  %s = amp.reduce_sum %w {axes = array<i64: 1>, keepdims = false} : (tensor<2x3x4x4xf32>) -> tensor<2x4x4xf32>
  return %g, %s : tensor<2x3x1x1xf16>, tensor<2x4x4xf32>
}

// Softmax: the row max, exp(x - max) in f32, the sum in f64, e / sum.
// CHECK-LABEL: func.func @softmax
func.func @softmax(%x: tensor<4x8xf32>, %dy: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK: arith.maximumf
  // CHECK: arith.subf
  // CHECK: math.exp %{{.+}} : f32
  // CHECK: arith.addf %{{.+}}, %{{.+}} : f64
  // CHECK: arith.divf %{{.+}}, %{{.+}} : f64
  %y = amp.softmax %x {axis = -1 : i64} : tensor<4x8xf32>
  // dx = y * (dy - sum(dy * y)), in f64.
  // CHECK: arith.mulf %{{.+}}, %{{.+}} : f64
  // CHECK: arith.subf %{{.+}}, %{{.+}} : f64
  %dx = amp.softmax_grad %y, %dy {axis = 1 : i64} : tensor<4x8xf32>
  return %y, %dx : tensor<4x8xf32>, tensor<4x8xf32>
}

// Layer norm: statistics in f64 (results stored f32), y in f64 rounded once.
// CHECK-LABEL: func.func @layer_norm
func.func @layer_norm(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %dy: tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) {
  // CHECK: math.sqrt %{{.+}} : f64
  // CHECK: arith.truncf %{{.+}} : f64 to f32
  %y, %m, %r = amp.layer_norm %x, %g, %b {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x1xf32>, tensor<2x5x1xf32>)
  // CHECK: linalg.generic
  %dx, %dg, %db = amp.layer_norm_grad %x, %g, %m, %r, %dy {axis = 2 : i64} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<2x5x1xf32>, tensor<2x5x1xf32>, tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %y, %dx, %dg, %db : tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>
}

// Batch norm in training mode: batch statistics over N, H, W in f64 and the
// running ones moved by the momentum.
// CHECK-LABEL: func.func @batch_norm
func.func @batch_norm(%x: tensor<4x3x2x2xf32>, %g: tensor<3xf32>, %b: tensor<3xf32>, %m: tensor<3xf32>, %v: tensor<3xf32>) -> (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>) {
  // CHECK: iterator_types = ["reduction", "parallel", "reduction", "reduction"]
  %y, %rm, %rv = amp.batch_norm %x, %g, %b, %m, %v {training_mode = true} : (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>)
  return %y, %rm, %rv : tensor<4x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>
}

// Cross entropy: log_softmax, the label's term picked by a select over the
// classes, the weighted mean; its gradient (softmax - onehot) * dloss / N.
// CHECK-LABEL: func.func @cross_entropy
func.func @cross_entropy(%s: tensor<6x5xf32>, %l: tensor<6xi64>, %d: tensor<f32>) -> (tensor<f32>, tensor<6x5xf32>) {
  // CHECK: math.log
  // CHECK: linalg.index 1
  // CHECK: arith.cmpi eq
  // CHECK: arith.cmpi ne
  %loss, %lp = amp.softmax_cross_entropy_loss %s, %l {ignore_index = -100 : i64} : (tensor<6x5xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x5xf32>)
  // CHECK: math.exp
  // CHECK: arith.divf %{{.+}}, %{{.+}} : f64
  %g = amp.softmax_cross_entropy_loss_grad %lp, %l, %d {ignore_index = -100 : i64} : (tensor<6x5xf32>, tensor<6xi64>, tensor<f32>) -> tensor<6x5xf32>
  return %loss, %g : tensor<f32>, tensor<6x5xf32>
}
