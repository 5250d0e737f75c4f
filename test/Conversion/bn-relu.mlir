// A batch norm read only by a ReLU right after it lowers to one call
// (opcode 12 with the flags word AMPRT_BN_RELU = 1: 4 attributes) that
// writes the ReLU's result; no unary call (opcode 1). A batch-norm gradient
// whose dy is a ReLU gradient read nowhere else, right before it, lowers to
// one call (opcode 27, flags 1, 7 tensors: the mask z last); no unary_grad
// call (opcode 20).
// RUN: amp-opt %s -split-input-file -amp-plan-memory -amp-lower-to-runtime | FileCheck %s

// (Descriptors: version 2, opcode, tensor count, attribute count, ...; the
// globals come in reverse program order.)
// CHECK-NOT: dense<[2, 1,
// CHECK: dense<[2, 12, 8, 4,
// CHECK-NOT: dense<[2, 1,
// CHECK-LABEL: llvm.func @forward(
func.func @forward(%x: tensor<2x3x4x4xf32> {amp.input = "x"}, %s: tensor<3xf32> {amp.input = "s"},
                   %b: tensor<3xf32> {amp.input = "b"}, %m: tensor<3xf32> {amp.input = "m"},
                   %v: tensor<3xf32> {amp.input = "v"})
    -> (tensor<2x3x4x4xf32> {amp.output = "z"}, tensor<3xf32> {amp.output = "rm"},
        tensor<3xf32> {amp.output = "rv"}) {
  %y, %rm, %rv = amp.batch_norm %x, %s, %b, %m, %v {training_mode = true} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %z = amp.relu %y : tensor<2x3x4x4xf32>
  return %z, %rm, %rv : tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// An unused running statistic's slot goes to the ReLU's result, and the
// batch norm's call would write both: two calls.
// CHECK: dense<[2, 1,
// CHECK: dense<[2, 12, 8, 3,
// CHECK-LABEL: llvm.func @shared_slot(
func.func @shared_slot(%x: tensor<2x3x4x4xf32> {amp.input = "x"}, %s: tensor<3xf32> {amp.input = "s"},
                       %b: tensor<3xf32> {amp.input = "b"}, %m: tensor<3xf32> {amp.input = "m"},
                       %v: tensor<3xf32> {amp.input = "v"})
    -> (tensor<2x3x4x4xf32> {amp.output = "z"}, tensor<3xf32> {amp.output = "rm"}) {
  %y, %rm, %rv = amp.batch_norm %x, %s, %b, %m, %v {training_mode = true} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %z = amp.relu %y : tensor<2x3x4x4xf32>
  return %z, %rm : tensor<2x3x4x4xf32>, tensor<3xf32>
}

// -----

// The batch norm's output is also returned: two calls, the batch norm
// without flags (3 attributes), then the ReLU.
// CHECK: dense<[2, 1,
// CHECK: dense<[2, 12, 8, 3,
// CHECK-LABEL: llvm.func @both(
func.func @both(%x: tensor<2x3x4x4xbf16> {amp.input = "x"}, %s: tensor<3xf32> {amp.input = "s"},
                %b: tensor<3xf32> {amp.input = "b"}, %m: tensor<3xf32> {amp.input = "m"},
                %v: tensor<3xf32> {amp.input = "v"})
    -> (tensor<2x3x4x4xbf16> {amp.output = "y"}, tensor<2x3x4x4xbf16> {amp.output = "z"}) {
  %y, %rm, %rv = amp.batch_norm %x, %s, %b, %m, %v {training_mode = true} : (tensor<2x3x4x4xbf16>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xbf16>, tensor<3xf32>, tensor<3xf32>)
  %z = amp.relu %y : tensor<2x3x4x4xbf16>
  return %y, %z : tensor<2x3x4x4xbf16>, tensor<2x3x4x4xbf16>
}

// -----

// CHECK-NOT: dense<[2, 20,
// CHECK: dense<[2, 27, 7, 5,
// CHECK-NOT: dense<[2, 20,
// CHECK-LABEL: llvm.func @backward(
func.func @backward(%x: tensor<2x3x4x4xbf16> {amp.input = "x"}, %s: tensor<3xf32> {amp.input = "s"},
                    %z: tensor<2x3x4x4xbf16> {amp.input = "z"}, %dz: tensor<2x3x4x4xbf16> {amp.input = "dz"})
    -> (tensor<2x3x4x4xbf16> {amp.output = "dx"}, tensor<3xf32> {amp.output = "ds"}, tensor<3xf32> {amp.output = "db"}) {
  %dy = amp.unary_grad %z, %dz {kind = #amp.unary<relu>} : tensor<2x3x4x4xbf16>
  %dx, %ds, %db = amp.batch_norm_grad %x, %s, %dy : (tensor<2x3x4x4xbf16>, tensor<3xf32>, tensor<2x3x4x4xbf16>) -> (tensor<2x3x4x4xbf16>, tensor<3xf32>, tensor<3xf32>)
  return %dx, %ds, %db : tensor<2x3x4x4xbf16>, tensor<3xf32>, tensor<3xf32>
}

// -----

// The ReLU gradient is also returned: two calls, the gradient without flags
// (4 attributes, 6 tensors).
// CHECK: dense<[2, 27, 6, 4,
// CHECK: dense<[2, 20,
// CHECK-LABEL: llvm.func @kept(
func.func @kept(%x: tensor<2x3x4x4xf32> {amp.input = "x"}, %s: tensor<3xf32> {amp.input = "s"},
                %z: tensor<2x3x4x4xf32> {amp.input = "z"}, %dz: tensor<2x3x4x4xf32> {amp.input = "dz"})
    -> (tensor<2x3x4x4xf32> {amp.output = "dx"}, tensor<2x3x4x4xf32> {amp.output = "dy"}) {
  %dy = amp.unary_grad %z, %dz {kind = #amp.unary<relu>} : tensor<2x3x4x4xf32>
  %dx, %ds, %db = amp.batch_norm_grad %x, %s, %dy : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<2x3x4x4xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  return %dx, %dy : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>
}
