// RUN: not amp-opt %s -split-input-file -amp-add-loss 2>&1 | FileCheck %s

// CHECK: error: amp-add-loss: the graph has 2 outputs (a, b): name the one the loss reads (output=NAME)
func.func @two(%w: tensor<3x4xf32> {amp.param = "w"}, %x: tensor<5x4xf32> {amp.input = "x"})
    -> (tensor<5x3xf32> {amp.output = "a"}, tensor<5x3xf32> {amp.output = "b"}) {
  %z = amp.gemm %x, %w {trans_b = true} : (tensor<5x4xf32>, tensor<3x4xf32>) -> tensor<5x3xf32>
  return %z, %z : tensor<5x3xf32>, tensor<5x3xf32>
}

// -----

// CHECK: error: amp-add-loss: the graph already has a result named 'loss'
func.func @has(%w: tensor<3x4xf32> {amp.param = "w"}, %x: tensor<5x4xf32> {amp.input = "x"})
    -> (tensor<5x3xf32> {amp.output = "loss"}) {
  %z = amp.gemm %x, %w {trans_b = true} : (tensor<5x4xf32>, tensor<3x4xf32>) -> tensor<5x3xf32>
  return %z : tensor<5x3xf32>
}

// -----

// CHECK: error: amp-add-loss: cross_entropy needs scores of rank >= 2 ([N, C, ...]), 'v' is 'tensor<4xf32>'
func.func @rank(%w: tensor<4xf32> {amp.param = "w"}) -> (tensor<4xf32> {amp.output = "v"}) {
  %z = amp.relu %w : tensor<4xf32>
  return %z : tensor<4xf32>
}

// -----

// CHECK: error: amp-add-loss: no function with parameters
func.func @none(%x: tensor<4xf32> {amp.input = "x"}) -> (tensor<4xf32> {amp.output = "v"}) {
  return %x : tensor<4xf32>
}
