// Parse / print round trip of every amp op, in the custom and the generic form.
// RUN: amp-opt %s | amp-opt | FileCheck %s
// RUN: amp-opt %s --mlir-print-op-generic | amp-opt | FileCheck %s

// CHECK-LABEL: func @elementwise
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %c: tensor<2x1xi1>,
                       %i: tensor<3xi64>, %h: tensor<2x3xf16>) -> tensor<2x3xf32> {
  // CHECK: amp.add %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = amp.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: amp.sub {{.*}} -> tensor<2x3xf32>
  %1 = amp.sub %0, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: amp.mul {{.*}} -> tensor<2x3xf32>
  %2 = amp.mul %1, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: amp.div {{.*}} -> tensor<2x3xf32>
  %3 = amp.div %2, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: amp.sqrt {{.*}} : tensor<2x3xf32>
  %x = amp.sqrt %3 : tensor<2x3xf32>
  // CHECK: amp.exp
  %4 = amp.exp %x : tensor<2x3xf32>
  // CHECK: amp.log
  %5 = amp.log %4 : tensor<2x3xf32>
  // CHECK: amp.erf
  %6 = amp.erf %5 : tensor<2x3xf32>
  // CHECK: amp.tanh
  %7 = amp.tanh %6 : tensor<2x3xf32>
  // CHECK: amp.sigmoid
  %8 = amp.sigmoid %7 : tensor<2x3xf32>
  // CHECK: amp.relu
  %9 = amp.relu %8 : tensor<2x3xf32>
  // CHECK: amp.leaky_relu {{.*}} {alpha = 2.000000e-01 : f32} : tensor<2x3xf32>
  %10 = amp.leaky_relu %9 {alpha = 2.000000e-01 : f32} : tensor<2x3xf32>
  // CHECK: amp.gelu {{.*}} {approximate = #amp.approximate<tanh>} : tensor<2x3xf32>
  %11 = amp.gelu %10 {approximate = #amp.approximate<tanh>} : tensor<2x3xf32>
  // CHECK: amp.where {{.*}} : (tensor<2x1xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %12 = amp.where %c, %11, %a : (tensor<2x1xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: amp.identity
  %13 = amp.identity %12 : tensor<2x3xf32>
  // CHECK: amp.dropout {{.*}} -> (tensor<2x3xf32>, tensor<2x3xi1>)
  %14:2 = amp.dropout %13 {ratio = 1.000000e-01 : f32, training_mode = true, seed = 7 : i64} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
  // CHECK: amp.relu {{.*}} : tensor<3xi64>
  %15 = amp.relu %i : tensor<3xi64>
  // CHECK: amp.pow {{.*}} : (tensor<2x3xf32>, tensor<3xi64>) -> tensor<2x3xf32>
  %16 = amp.pow %14#0, %15 : (tensor<2x3xf32>, tensor<3xi64>) -> tensor<2x3xf32>
  // CHECK: amp.sqrt {{.*}} : tensor<2x3xf16>
  %17 = amp.sqrt %h : tensor<2x3xf16>
  return %16 : tensor<2x3xf32>
}

// CHECK-LABEL: func @softmax_family
func.func @softmax_family(%a: tensor<4x10xbf16>) -> (tensor<4x10xbf16>, tensor<4x10xbf16>) {
  // CHECK: amp.softmax {{.*}} {axis = 1 : i64} : tensor<4x10xbf16>
  %0 = amp.softmax %a {axis = 1 : i64} : tensor<4x10xbf16>
  // CHECK: amp.log_softmax {{.*}} : tensor<4x10xbf16>
  %1 = amp.log_softmax %a : tensor<4x10xbf16>
  return %0, %1 : tensor<4x10xbf16>, tensor<4x10xbf16>
}

// CHECK-LABEL: func @products
func.func @products(%a: tensor<8x2x3x4xf16>, %b: tensor<2x4x5xf16>, %v: tensor<4xf16>,
                    %g: tensor<3x6xbf16>, %h: tensor<5x6xbf16>, %hb: tensor<5xbf16>) {
  // CHECK: amp.matmul {{.*}} : (tensor<8x2x3x4xf16>, tensor<2x4x5xf16>) -> tensor<8x2x3x5xf16>
  // CHECK: amp.matmul {{.*}} : (tensor<8x2x3x4xf16>, tensor<4xf16>) -> tensor<8x2x3xf16>
  %0 = amp.matmul %a, %b : (tensor<8x2x3x4xf16>, tensor<2x4x5xf16>) -> tensor<8x2x3x5xf16>
  %1 = amp.matmul %a, %v : (tensor<8x2x3x4xf16>, tensor<4xf16>) -> tensor<8x2x3xf16>
  // CHECK: amp.gemm {{.*}} {alpha = 5.000000e-01 : f32, trans_b = true} : (tensor<3x6xbf16>, tensor<5x6xbf16>, tensor<5xbf16>) -> tensor<3x5xbf16>
  // CHECK: amp.gemm {{.*}} : (tensor<3x6xbf16>, tensor<6x5xbf16>) -> tensor<3x5xbf16>
  %2 = amp.gemm %g, %h, %hb {alpha = 0.5 : f32, trans_b = true} : (tensor<3x6xbf16>, tensor<5x6xbf16>, tensor<5xbf16>) -> tensor<3x5xbf16>
  %t = amp.transpose %h : (tensor<5x6xbf16>) -> tensor<6x5xbf16>
  %3 = amp.gemm %g, %t : (tensor<3x6xbf16>, tensor<6x5xbf16>) -> tensor<3x5xbf16>
  return
}

// CHECK-LABEL: func @cnn
func.func @cnn(%x: tensor<2x3x32x32xf32>, %w: tensor<16x3x3x3xf32>, %bias: tensor<16xf32>,
               %s: tensor<16xf32>, %m: tensor<16xf32>, %v: tensor<16xf32>) -> tensor<2x1024xf32> {
  // CHECK: amp.conv {{.*}} {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x3x32x32xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<2x16x32x32xf32>
  %0 = amp.conv %x, %w, %bias {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x3x32x32xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<2x16x32x32xf32>
  // CHECK: amp.batch_norm {{.*}} -> (tensor<2x16x32x32xf32>, tensor<16xf32>, tensor<16xf32>)
  %1:3 = amp.batch_norm %0, %s, %bias, %m, %v {training_mode = true} : (tensor<2x16x32x32xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x16x32x32xf32>, tensor<16xf32>, tensor<16xf32>)
  // CHECK: amp.max_pool {{.*}} {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<2x16x32x32xf32>) -> (tensor<2x16x16x16xf32>, tensor<2x16x16x16xi64>)
  %2:2 = amp.max_pool %1#0 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<2x16x32x32xf32>) -> (tensor<2x16x16x16xf32>, tensor<2x16x16x16xi64>)
  // CHECK: amp.average_pool {{.*}} -> tensor<2x16x8x8xf32>
  %3 = amp.average_pool %2#0 {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, auto_pad = #amp.auto_pad<SAME_UPPER>, count_include_pad = true} : (tensor<2x16x16x16xf32>) -> tensor<2x16x8x8xf32>
  // CHECK: amp.global_average_pool {{.*}} -> tensor<2x16x1x1xf32>
  %4 = amp.global_average_pool %3 : (tensor<2x16x8x8xf32>) -> tensor<2x16x1x1xf32>
  // CHECK: amp.flatten {{.*}} -> tensor<2x1024xf32>
  %5 = amp.flatten %3 {axis = 1 : i64} : (tensor<2x16x8x8xf32>) -> tensor<2x1024xf32>
  return %5 : tensor<2x1024xf32>
}

// CHECK-LABEL: func @transformer_pieces
func.func @transformer_pieces(%x: tensor<?x16x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>,
                              %emb: tensor<100x64xf32>, %ids: tensor<?x16xi64>) {
  // CHECK: amp.layer_norm {{.*}} -> (tensor<?x16x64xf32>, tensor<?x16x1xf32>, tensor<?x16x1xf32>)
  %0:3 = amp.layer_norm %x, %g, %b {axis = -1 : i64, epsilon = 9.99999974E-6 : f32} : (tensor<?x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<?x16x64xf32>, tensor<?x16x1xf32>, tensor<?x16x1xf32>)
  // CHECK: amp.reshape {{.*}} {shape = array<i64: 0, 16, 4, 16>} : (tensor<?x16x64xf32>) -> tensor<?x16x4x16xf32>
  %1 = amp.reshape %0#0 {shape = array<i64: 0, 16, 4, 16>} : (tensor<?x16x64xf32>) -> tensor<?x16x4x16xf32>
  // CHECK: amp.transpose {{.*}} {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x16x4x16xf32>) -> tensor<?x4x16x16xf32>
  %2 = amp.transpose %1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x16x4x16xf32>) -> tensor<?x4x16x16xf32>
  // CHECK: amp.concat {{.*}} {axis = 3 : i64} : (tensor<?x4x16x16xf32>, tensor<?x4x16x16xf32>) -> tensor<?x4x16x32xf32>
  %3 = amp.concat %2, %2 {axis = 3 : i64} : (tensor<?x4x16x16xf32>, tensor<?x4x16x16xf32>) -> tensor<?x4x16x32xf32>
  // CHECK: amp.slice {{.*}} -> tensor<?x4x16x8xf32>
  %4 = amp.slice %3 {starts = array<i64: 0>, ends = array<i64: 9223372036854775807>, axes = array<i64: -1>, steps = array<i64: 4>} : (tensor<?x4x16x32xf32>) -> tensor<?x4x16x8xf32>
  // CHECK: amp.unsqueeze {{.*}} {axes = array<i64: 0, 3>} : (tensor<?x16x64xf32>) -> tensor<1x?x16x1x64xf32>
  %5 = amp.unsqueeze %x {axes = array<i64: 0, 3>} : (tensor<?x16x64xf32>) -> tensor<1x?x16x1x64xf32>
  // CHECK: amp.squeeze {{.*}} {axes = array<i64: 0, -2>} : (tensor<1x?x16x1x64xf32>) -> tensor<?x16x64xf32>
  %6 = amp.squeeze %5 {axes = array<i64: 0, -2>} : (tensor<1x?x16x1x64xf32>) -> tensor<?x16x64xf32>
  // CHECK: amp.gather {{.*}} : (tensor<100x64xf32>, tensor<?x16xi64>) -> tensor<?x16x64xf32>
  %7 = amp.gather %emb, %ids : (tensor<100x64xf32>, tensor<?x16xi64>) -> tensor<?x16x64xf32>
  // CHECK: amp.expand {{.*}} {shape = array<i64: 3, 1, 1>} : (tensor<64xf32>) -> tensor<3x1x64xf32>
  %8 = amp.expand %g {shape = array<i64: 3, 1, 1>} : (tensor<64xf32>) -> tensor<3x1x64xf32>
  // CHECK: amp.reduce_sum {{.*}} {axes = array<i64: 1>, keepdims = false} : (tensor<?x16x64xf32>) -> tensor<?x64xf32>
  %9 = amp.reduce_sum %7 {axes = array<i64: 1>, keepdims = false} : (tensor<?x16x64xf32>) -> tensor<?x64xf32>
  // CHECK: amp.reduce_mean {{.*}} -> tensor<1x1x1xf32>
  %10 = amp.reduce_mean %7 : (tensor<?x16x64xf32>) -> tensor<1x1x1xf32>
  // CHECK: amp.reduce_max {{.*}} {axes = array<i64: -1>} : (tensor<?x16xi64>) -> tensor<?x1xi64>
  %11 = amp.reduce_max %ids {axes = array<i64: -1>} : (tensor<?x16xi64>) -> tensor<?x1xi64>
  return
}

// CHECK-LABEL: func @losses
func.func @losses(%s: tensor<8x10xf32>, %y: tensor<8xi64>, %w: tensor<10xf32>,
                  %s3: tensor<8x10x5xf32>, %y3: tensor<8x5xi32>) -> tensor<f32> {
  // CHECK: amp.softmax_cross_entropy_loss {{.*}} : (tensor<8x10xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x10xf32>)
  // CHECK: amp.softmax_cross_entropy_loss {{.*}} {ignore_index = 3 : i64, reduction = #amp.reduction<none>} : (tensor<8x10x5xf32>, tensor<8x5xi32>, tensor<10xf32>) -> (tensor<8x5xf32>, tensor<8x10x5xf32>)
  %0:2 = amp.softmax_cross_entropy_loss %s, %y : (tensor<8x10xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x10xf32>)
  %1:2 = amp.softmax_cross_entropy_loss %s3, %y3, %w {reduction = #amp.reduction<none>, ignore_index = 3 : i64} : (tensor<8x10x5xf32>, tensor<8x5xi32>, tensor<10xf32>) -> (tensor<8x5xf32>, tensor<8x10x5xf32>)
  // CHECK: amp.nll_loss {{.*}} {reduction = #amp.reduction<sum>} : (tensor<8x10xf32>, tensor<8xi64>, tensor<10xf32>) -> tensor<f32>
  %2 = amp.nll_loss %0#1, %y, %w {reduction = #amp.reduction<sum>} : (tensor<8x10xf32>, tensor<8xi64>, tensor<10xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

// CHECK-LABEL: func @casts
func.func @casts(%a: tensor<4xf32>, %i: tensor<4xi64>) -> (tensor<4xbf16>, tensor<4xf32>, tensor<4xi1>) {
  // CHECK: amp.cast {{.*}} : tensor<4xf32> to tensor<4xbf16>
  // CHECK: amp.cast {{.*}} : tensor<4xi64> to tensor<4xf32>
  %0 = amp.cast %a : tensor<4xf32> to tensor<4xbf16>
  // CHECK: amp.cast {{.*}} : tensor<4xf32> to tensor<4xi1>
  %1 = amp.cast %i : tensor<4xi64> to tensor<4xf32>
  %2 = amp.cast %a : tensor<4xf32> to tensor<4xi1>
  return %0, %1, %2 : tensor<4xbf16>, tensor<4xf32>, tensor<4xi1>
}

// Backward ops amp-autodiff builds for slicing, gathering and max reductions,
// and gradient accumulation's counter.
// CHECK-LABEL: func @backward
func.func @backward(%dy: tensor<4x2x5xf32>, %i: tensor<4x3xi64>, %g: tensor<4x3x5xf16>,
                    %x: tensor<4x6x5xf32>, %y: tensor<4x1x5xf32>, %dm: tensor<4x1x5xf32>,
                    %m: tensor<i64>)
    -> (tensor<4x6x5xf32>, tensor<7x5xf16>, tensor<4x6x5xf32>, tensor<i1>, tensor<i64>) {
  // CHECK: amp.slice_grad {{.*}} {axes = array<i64: 1>, ends = array<i64: 5>, shape = array<i64: 4, 6, 5>, starts = array<i64: 1>, steps = array<i64: 2>} : tensor<4x2x5xf32> -> tensor<4x6x5xf32>
  %0 = amp.slice_grad %dy {shape = array<i64: 4, 6, 5>, starts = array<i64: 1>, ends = array<i64: 5>, axes = array<i64: 1>, steps = array<i64: 2>} : tensor<4x2x5xf32> -> tensor<4x6x5xf32>
  // CHECK: amp.gather_grad {{.*}} {axis = 0 : i64, shape = array<i64: 7, 5>} : (tensor<4x3xi64>, tensor<4x3x5xf16>) -> tensor<7x5xf16>
  %1 = amp.gather_grad %i, %g {axis = 0 : i64, shape = array<i64: 7, 5>} : (tensor<4x3xi64>, tensor<4x3x5xf16>) -> tensor<7x5xf16>
  // CHECK: amp.reduce_max_grad {{.*}} : (tensor<4x6x5xf32>, tensor<4x1x5xf32>, tensor<4x1x5xf32>) -> tensor<4x6x5xf32>
  %2 = amp.reduce_max_grad %x, %y, %dm : (tensor<4x6x5xf32>, tensor<4x1x5xf32>, tensor<4x1x5xf32>) -> tensor<4x6x5xf32>
  // CHECK: amp.micro_step {{.*}} {every = 4 : i64}
  %apply, %next = amp.micro_step %m {every = 4 : i64}
  return %0, %1, %2, %apply, %next : tensor<4x6x5xf32>, tensor<7x5xf16>, tensor<4x6x5xf32>, tensor<i1>, tensor<i64>
}

// CHECK-LABEL: func @deconv
func.func @deconv(%x: tensor<2x4x5xf16>, %w: tensor<4x3x3xf16>, %b: tensor<6xf16>) -> tensor<2x6x10xf16> {
  // 2 * (5 - 1) + 1 + (3 - 1) * 2 + 1 - 1 - 3 = 10 (grouped: 6 output channels)
  // CHECK: amp.conv_transpose {{.*}} -> tensor<2x6x10xf16>
  %0 = amp.conv_transpose %x, %w, %b {group = 2 : i64, strides = array<i64: 2>, dilations = array<i64: 2>, pads = array<i64: 1, 3>, output_padding = array<i64: 1>, accumulate = f32} : (tensor<2x4x5xf16>, tensor<4x3x3xf16>, tensor<6xf16>) -> tensor<2x6x10xf16>
  return %0 : tensor<2x6x10xf16>
}
