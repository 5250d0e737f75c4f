// An f32 convolution read only by the next op, an inference-mode batch norm,
// lowers to one runtime call (opcode 39, conv_bn: the normalisation folded
// into the weights); the batch norm itself emits nothing (no opcode 12).
// RUN: amp-opt %s -split-input-file -amp-plan-memory -amp-lower-to-runtime | FileCheck %s

// Version 1, opcode 39, 7 tensors (x, w, scale, shift, mean, var, y), 13
// attributes (2 spatial dims, group 1, no bias, 4 per dim, epsilon, flags).
// CHECK-NOT: dense<[2, 12,
// CHECK: llvm.mlir.global internal constant @{{.+}}(dense<[2, 39, 7, 13,
// CHECK-NOT: dense<[2, 12,
// CHECK-LABEL: llvm.func @fused(
func.func @fused(%x: tensor<1x2x4x4xf32> {amp.input = "x"}, %w: tensor<3x2x3x3xf32> {amp.input = "w"},
                 %s: tensor<3xf32> {amp.input = "s"}, %b: tensor<3xf32> {amp.input = "b"},
                 %m: tensor<3xf32> {amp.input = "m"}, %v: tensor<3xf32> {amp.input = "v"})
    -> (tensor<1x3x4x4xf32> {amp.output = "y"}) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32>
  %y, %rm, %rv = amp.batch_norm %c, %s, %b, %m, %v : (tensor<1x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<1x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  return %y : tensor<1x3x4x4xf32>
}

// -----

// Training mode (batch statistics): two calls, conv (15) then batch norm (12).
// CHECK: dense<[2, 12, 8,
// CHECK: dense<[2, 15, 3,
// CHECK-LABEL: llvm.func @training(
func.func @training(%x: tensor<1x2x4x4xf32> {amp.input = "x"}, %w: tensor<3x2x3x3xf32> {amp.input = "w"},
                    %s: tensor<3xf32> {amp.input = "s"}, %b: tensor<3xf32> {amp.input = "b"},
                    %m: tensor<3xf32> {amp.input = "m"}, %v: tensor<3xf32> {amp.input = "v"})
    -> (tensor<1x3x4x4xf32> {amp.output = "y"}) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32>
  %y, %rm, %rv = amp.batch_norm %c, %s, %b, %m, %v {training_mode = true} : (tensor<1x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<1x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  return %y : tensor<1x3x4x4xf32>
}

// -----

// The convolution's result is also returned: not folded.
// CHECK: dense<[2, 12, 8,
// CHECK: dense<[2, 15, 3,
// CHECK-LABEL: llvm.func @conv_read_twice(
func.func @conv_read_twice(%x: tensor<1x2x4x4xf32> {amp.input = "x"}, %w: tensor<3x2x3x3xf32> {amp.input = "w"},
                           %s: tensor<3xf32> {amp.input = "s"}, %b: tensor<3xf32> {amp.input = "b"},
                           %m: tensor<3xf32> {amp.input = "m"}, %v: tensor<3xf32> {amp.input = "v"})
    -> (tensor<1x3x4x4xf32> {amp.output = "y"}, tensor<1x3x4x4xf32> {amp.output = "c"}) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32>
  %y, %rm, %rv = amp.batch_norm %c, %s, %b, %m, %v : (tensor<1x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<1x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  return %y, %c : tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>
}

// -----

// The convolution's input is computed (a relu) and dies at the convolution:
// the plan gives its slot to the batch norm's result, so folding (which
// writes that slot while reading the input) is not done.
// CHECK: dense<[2, 12, 8,
// CHECK: dense<[2, 15, 3,
// CHECK-LABEL: llvm.func @input_slot_reused(
func.func @input_slot_reused(%x: tensor<1x3x4x4xf32> {amp.input = "x"}, %w: tensor<3x3x3x3xf32> {amp.input = "w"},
                             %s: tensor<3xf32> {amp.input = "s"}, %b: tensor<3xf32> {amp.input = "b"},
                             %m: tensor<3xf32> {amp.input = "m"}, %v: tensor<3xf32> {amp.input = "v"})
    -> (tensor<1x3x4x4xf32> {amp.output = "y"}) {
  %r = amp.relu %x : tensor<1x3x4x4xf32>
  %c = amp.conv %r, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x3x4x4xf32>, tensor<3x3x3x3xf32>) -> tensor<1x3x4x4xf32>
  %y, %rm, %rv = amp.batch_norm %c, %s, %b, %m, %v : (tensor<1x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<1x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  return %y : tensor<1x3x4x4xf32>
}
