// A conv_grad whose f32 dw the step's inf check reads as it is lowers with
// check_dw = 1 (opcode 23, 6 tensors, 2-D: 15 attributes): the runtime
// checks dw as it writes it, and the check takes that answer. A dw summed
// with another contribution first, or a bf16 dw, keeps the 14 attributes
// (the check reads it).
// RUN: amp-opt %s -split-input-file -amp-plan-memory -amp-lower-to-runtime | FileCheck %s

// CHECK: dense<[2, 23, 6, 15,
// CHECK-LABEL: llvm.func @checked(
func.func @checked(%x: tensor<2x3x6x6xf32> {amp.input = "x"}, %w: tensor<4x3x3x3xf32> {amp.input = "w"},
                   %dy: tensor<2x4x4x4xf32> {amp.input = "dy"}, %s: tensor<f32> {amp.input = "s"})
    -> (tensor<4x3x3x3xf32> {amp.output = "g"}, tensor<i1> {amp.output = "f"}) {
  %dx, %dw, %db = amp.conv_grad %x, %w, %dy : (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<2x4x4x4xf32>) -> (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>)
  %u, %f = amp.unscale_and_check %dw scale %s : tensor<4x3x3x3xf32> -> tensor<4x3x3x3xf32>
  return %u, %f : tensor<4x3x3x3xf32>, tensor<i1>
}

// -----

// CHECK-NOT: dense<[2, 23, 6, 15,
// CHECK: dense<[2, 23, 6, 14,
// CHECK-LABEL: llvm.func @summed(
func.func @summed(%x: tensor<2x3x6x6xf32> {amp.input = "x"}, %w: tensor<4x3x3x3xf32> {amp.input = "w"},
                  %dy: tensor<2x4x4x4xf32> {amp.input = "dy"}, %s: tensor<f32> {amp.input = "s"})
    -> (tensor<4x3x3x3xf32> {amp.output = "g"}, tensor<i1> {amp.output = "f"}) {
  %dx, %dw, %db = amp.conv_grad %x, %w, %dy : (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<2x4x4x4xf32>) -> (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>)
  %t = amp.add %dw, %w : (tensor<4x3x3x3xf32>, tensor<4x3x3x3xf32>) -> tensor<4x3x3x3xf32>
  %u, %f = amp.unscale_and_check %t scale %s : tensor<4x3x3x3xf32> -> tensor<4x3x3x3xf32>
  return %u, %f : tensor<4x3x3x3xf32>, tensor<i1>
}

// -----

// CHECK-NOT: dense<[2, 23, 6, 15,
// CHECK: dense<[2, 23, 6, 14,
// CHECK-LABEL: llvm.func @bf16(
func.func @bf16(%x: tensor<2x3x6x6xbf16> {amp.input = "x"}, %w: tensor<4x3x3x3xbf16> {amp.input = "w"},
                %dy: tensor<2x4x4x4xbf16> {amp.input = "dy"}, %s: tensor<f32> {amp.input = "s"})
    -> (tensor<4x3x3x3xf32> {amp.output = "g"}, tensor<i1> {amp.output = "f"}) {
  %dx, %dw, %db = amp.conv_grad %x, %w, %dy : (tensor<2x3x6x6xbf16>, tensor<4x3x3x3xbf16>, tensor<2x4x4x4xbf16>) -> (tensor<2x3x6x6xbf16>, tensor<4x3x3x3xbf16>, tensor<4xbf16>)
  %u, %f = amp.unscale_and_check %dw scale %s : tensor<4x3x3x3xbf16> -> tensor<4x3x3x3xf32>
  return %u, %f : tensor<4x3x3x3xf32>, tensor<i1>
}
