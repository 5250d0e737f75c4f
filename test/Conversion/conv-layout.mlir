// Convolution and matrix-product calls that do more than the product, and channel-blocked
// layouts. Descriptor: [version 1, opcode, tensors, attributes, tensors...,
// attributes...]; a convolution's last attribute is its flags (1: ReLU in
// the call, 2: x channel-blocked, 4: y channel-blocked), a max pool's and a
// global average pool's last attribute says whether x is channel-blocked.
// Descriptors are printed last op first.
// RUN: amp-opt %s -split-input-file -amp-plan-memory -amp-lower-to-runtime | FileCheck %s

// conv -> relu -> max pool -> conv -> sigmoid -> global average pool: every
// value between the first convolution and the pool stays channel-blocked
// (16 and 32 channels); the first ReLU runs inside the first convolution's
// call (no opcode 1 for it), the sigmoid is an element-wise call as before.
// CHECK: dense<[2, 9, 2, 5, {{.*}}, 1, 2, 2, 3, 1, 0]>
// CHECK: dense<[2, 1, 2, 2, {{.*}}, 7, 0, 0]>
// CHECK: dense<[2, 15, 3, 12, {{.*}}, 1, 1, 1, 1, 1, 1, 1, 1, 6, 0]>
// CHECK: dense<[2, 16, 3, 15, {{.*}}, 0, 0, 1, 0]>
// CHECK: dense<[2, 15, 4, 12, {{.*}}, 1, 1, 1, 1, 1, 1, 1, 1, 5, 0]>
// CHECK-LABEL: llvm.func @chain(
func.func @chain(%x: tensor<2x3x8x8xf32> {amp.input = "x"}, %w1: tensor<16x3x3x3xf32> {amp.input = "w1"},
                 %b1: tensor<16xf32> {amp.input = "b1"}, %w2: tensor<32x16x3x3xf32> {amp.input = "w2"})
    -> (tensor<2x32x1x1xf32> {amp.output = "g"}) {
  %c1 = amp.conv %x, %w1, %b1 {pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<2x16x8x8xf32>
  %r1 = amp.relu %c1 : tensor<2x16x8x8xf32>
  %p, %i = amp.max_pool %r1 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<2x16x8x8xf32>) -> (tensor<2x16x4x4xf32>, tensor<2x16x4x4xi64>)
  %c2 = amp.conv %p, %w2 {pads = array<i64: 1, 1, 1, 1>} : (tensor<2x16x4x4xf32>, tensor<32x16x3x3xf32>) -> tensor<2x32x4x4xf32>
  %s = amp.sigmoid %c2 : tensor<2x32x4x4xf32>
  %g = amp.global_average_pool %s : (tensor<2x32x4x4xf32>) -> tensor<2x32x1x1xf32>
  return %g : tensor<2x32x1x1xf32>
}

// -----

// The ReLU's result is returned: the ReLU still runs in the call, but the
// result stays plain (flags 1).
// CHECK-NOT: dense<[2, 1,
// CHECK: dense<[2, 15, 3, 12, {{.*}}, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]>
// CHECK-NOT: dense<[2, 1,
// CHECK-LABEL: llvm.func @returned(
func.func @returned(%x: tensor<1x16x4x4xf32> {amp.input = "x"}, %w: tensor<16x16x3x3xf32> {amp.input = "w"})
    -> (tensor<1x16x4x4xf32> {amp.output = "y"}) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x16x4x4xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x4x4xf32>
  %r = amp.relu %c : tensor<1x16x4x4xf32>
  return %r : tensor<1x16x4x4xf32>
}

// -----

// A reader that needs the plain layout (an add) anywhere in the chain keeps
// the whole chain plain: max pool flag 0, convolution flags 1.
// CHECK: dense<[2, 2, 3, 1,
// CHECK: dense<[2, 16, 3, 15, {{.*}}, 0, 0, 0, 0]>
// CHECK: dense<[2, 15, 3, 12, {{.*}}, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]>
// CHECK-LABEL: llvm.func @plain_reader(
func.func @plain_reader(%x: tensor<1x16x4x4xf32> {amp.input = "x"}, %w: tensor<16x16x3x3xf32> {amp.input = "w"},
                        %z: tensor<1x16x2x2xf32> {amp.input = "z"})
    -> (tensor<1x16x2x2xf32> {amp.output = "y"}) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x16x4x4xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x4x4xf32>
  %r = amp.relu %c : tensor<1x16x4x4xf32>
  %p, %i = amp.max_pool %r {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x16x4x4xf32>) -> (tensor<1x16x2x2xf32>, tensor<1x16x2x2xi64>)
  %y = amp.add %p, %z : (tensor<1x16x2x2xf32>, tensor<1x16x2x2xf32>) -> tensor<1x16x2x2xf32>
  return %y : tensor<1x16x2x2xf32>
}

// -----

// The max pool's indices are read (returned): the chain stays plain.
// CHECK: dense<[2, 16, 3, 15, {{.*}}, 0, 1, 0, 0]>
// CHECK: dense<[2, 15, 3, 12, {{.*}}, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]>
// CHECK-LABEL: llvm.func @indices_read(
func.func @indices_read(%x: tensor<1x16x4x4xf32> {amp.input = "x"}, %w: tensor<16x16x3x3xf32> {amp.input = "w"})
    -> (tensor<1x16x2x2xf32> {amp.output = "y"}, tensor<1x16x2x2xi64> {amp.output = "i"}) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x16x4x4xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x4x4xf32>
  %r = amp.relu %c : tensor<1x16x4x4xf32>
  %p, %i = amp.max_pool %r {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x16x4x4xf32>) -> (tensor<1x16x2x2xf32>, tensor<1x16x2x2xi64>)
  return %p, %i : tensor<1x16x2x2xf32>, tensor<1x16x2x2xi64>
}

// -----

// 8 channels (not a multiple of 16): plain.
// CHECK: dense<[2, 9, 2, 4, {{.*}}, 1, 2, 2, 3, 0]>
// CHECK: dense<[2, 15, 3, 12, {{.*}}, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]>
// CHECK-LABEL: llvm.func @eight_channels(
func.func @eight_channels(%x: tensor<1x16x4x4xf32> {amp.input = "x"}, %w: tensor<8x16x3x3xf32> {amp.input = "w"})
    -> (tensor<1x8x1x1xf32> {amp.output = "y"}) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x16x4x4xf32>, tensor<8x16x3x3xf32>) -> tensor<1x8x4x4xf32>
  %r = amp.relu %c : tensor<1x8x4x4xf32>
  %g = amp.global_average_pool %r : (tensor<1x8x4x4xf32>) -> tensor<1x8x1x1xf32>
  return %g : tensor<1x8x1x1xf32>
}

// -----

// The convolution's result is read twice: the ReLU is a call of its own.
// CHECK: dense<[2, 1, 2, 2,
// CHECK: dense<[2, 15, 3, 11, {{.*}}, 1, 1, 1, 1, 1, 1, 1, 1, 0]>
// CHECK-LABEL: llvm.func @read_twice(
func.func @read_twice(%x: tensor<1x16x4x4xf32> {amp.input = "x"}, %w: tensor<16x16x3x3xf32> {amp.input = "w"})
    -> (tensor<1x16x4x4xf32> {amp.output = "y"}, tensor<1x16x4x4xf32> {amp.output = "c"}) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x16x4x4xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x4x4xf32>
  %r = amp.relu %c : tensor<1x16x4x4xf32>
  return %r, %c : tensor<1x16x4x4xf32>, tensor<1x16x4x4xf32>
}

// -----

// bf16: the ReLU runs in the call (it commutes with rounding); nothing is
// blocked (f32 only).
// CHECK-NOT: dense<[2, 1,
// CHECK: dense<[2, 15, 3, 12, {{.*}}, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]>
// CHECK-LABEL: llvm.func @bf16(
func.func @bf16(%x: tensor<1x16x4x4xbf16> {amp.input = "x"}, %w: tensor<16x16x3x3xbf16> {amp.input = "w"})
    -> (tensor<1x16x1x1xbf16> {amp.output = "y"}) {
  %c = amp.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x16x4x4xbf16>, tensor<16x16x3x3xbf16>) -> tensor<1x16x4x4xbf16>
  %r = amp.relu %c : tensor<1x16x4x4xbf16>
  %g = amp.global_average_pool %r : (tensor<1x16x4x4xbf16>) -> tensor<1x16x1x1xbf16>
  return %g : tensor<1x16x1x1xbf16>
}

// -----

// The convolution's input is computed (a relu) and dies at the convolution:
// if the plan gives its slot to the second ReLU's result, the call (which
// would write that slot while reading its input) must not include it.
// CHECK: dense<[2, 1, 2, 2,
// CHECK: dense<[2, 15, 3, 11,
// CHECK-LABEL: llvm.func @input_slot_reused(
func.func @input_slot_reused(%x: tensor<1x16x4x4xf32> {amp.input = "x"}, %w: tensor<16x16x3x3xf32> {amp.input = "w"})
    -> (tensor<1x16x4x4xf32> {amp.output = "y"}) {
  %a = amp.relu %x : tensor<1x16x4x4xf32>
  %c = amp.conv %a, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x16x4x4xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x4x4xf32>
  %r = amp.relu %c : tensor<1x16x4x4xf32>
  return %r : tensor<1x16x4x4xf32>
}

// -----

// A matrix product read only by the next op, a ReLU: one call (opcode 13
// with the ReLU flag after its five attributes), no opcode 1.
// CHECK-NOT: dense<[2, 1,
// CHECK: dense<[2, 13, 4, 6, {{.*}}, 0, 1, 1, 1, 0]>
// CHECK-NOT: dense<[2, 1,
// CHECK-LABEL: llvm.func @gemm_relu(
func.func @gemm_relu(%x: tensor<4x8xf32> {amp.input = "x"}, %w: tensor<16x8xf32> {amp.input = "w"},
                     %b: tensor<16xf32> {amp.input = "b"}) -> (tensor<4x16xf32> {amp.output = "y"}) {
  %g = amp.gemm %x, %w, %b {trans_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %r = amp.relu %g : tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

// The product is also returned: two calls.
// CHECK: dense<[2, 1, 2, 2,
// CHECK: dense<[2, 13, 4, 5,
// CHECK-LABEL: llvm.func @gemm_read_twice(
func.func @gemm_read_twice(%x: tensor<4x8xf32> {amp.input = "x"}, %w: tensor<16x8xf32> {amp.input = "w"},
                           %b: tensor<16xf32> {amp.input = "b"})
    -> (tensor<4x16xf32> {amp.output = "y"}, tensor<4x16xf32> {amp.output = "g"}) {
  %g = amp.gemm %x, %w, %b {trans_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %r = amp.relu %g : tensor<4x16xf32>
  return %r, %g : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// bf16 with f32 accumulation (what amp-autocast writes): the ReLU still runs
// in the product's call (it commutes with the rounding to bf16).
// CHECK-NOT: dense<[2, 1,
// CHECK: dense<[2, 13, 4, 6, {{.*}}, 0, 1, 1, 1, 0]>
// CHECK-LABEL: llvm.func @gemm_relu_bf16(
func.func @gemm_relu_bf16(%x: tensor<4x8xbf16> {amp.input = "x"}, %w: tensor<16x8xbf16> {amp.input = "w"},
                          %b: tensor<16xbf16> {amp.input = "b"}) -> (tensor<4x16xbf16> {amp.output = "y"}) {
  %g = amp.gemm %x, %w, %b {accumulate = f32, trans_b = true} : (tensor<4x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>) -> tensor<4x16xbf16>
  %r = amp.relu %g : tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}
