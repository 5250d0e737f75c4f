// RUN: amp-opt %s -split-input-file -amp-autodiff | FileCheck %s
// RUN: amp-opt %s -split-input-file -amp-autodiff -amp-autocast=target=bf16 -amp-plan-memory -amp-lower-to-runtime -o /dev/null

// A stacked q / k / v read as t[0], t[1], t[-1] (gathers of one constant
// index each, covering the axis once): t's gradient is one concatenation
// of the three dy's in index order (scalar indices: each dy gets the axis
// back as a dim of 1), not three zero-filled gather_grads and two adds.
// CHECK-LABEL: func @qkv
// CHECK-NOT: amp.gather_grad
// CHECK: %[[Q:.+]] = amp.reshape %{{.+}} {{.*}}shape = array<i64: 1, 2, 4>{{.*}} -> tensor<1x2x4xf32>
// CHECK: %[[K:.+]] = amp.reshape %{{.+}} -> tensor<1x2x4xf32>
// CHECK: %[[V:.+]] = amp.reshape %{{.+}} -> tensor<1x2x4xf32>
// CHECK: %[[T:.+]] = amp.concat %[[Q]], %[[K]], %[[V]] {{.*}}axis = 0 : i64{{.*}} -> tensor<3x2x4xf32>
// CHECK-NOT: amp.gather_grad
// CHECK: return
func.func @qkv(%t: tensor<3x2x4xf32> {amp.param = "t"}) -> (tensor<f32> {amp.output = "loss"}) {
  %i0 = arith.constant dense<0> : tensor<i64>
  %i1 = arith.constant dense<1> : tensor<i64>
  %i2 = arith.constant dense<-1> : tensor<i64>
  %v = amp.gather %t, %i2 {axis = 0 : i64} : (tensor<3x2x4xf32>, tensor<i64>) -> tensor<2x4xf32>
  %q = amp.gather %t, %i0 {axis = 0 : i64} : (tensor<3x2x4xf32>, tensor<i64>) -> tensor<2x4xf32>
  %k = amp.gather %t, %i1 {axis = 0 : i64} : (tensor<3x2x4xf32>, tensor<i64>) -> tensor<2x4xf32>
  %qk = amp.mul %q, %k : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %s = amp.add %qk, %v : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = amp.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// One-element index vectors keep the axis (no reshape); a fourth use of t
// (its sum over the axis) is added to the concatenation, which comes
// first: t's later uses are differentiated first.
// CHECK-LABEL: func @withAnotherUse
// CHECK-NOT: amp.gather_grad
// CHECK: %[[T:.+]] = amp.concat %{{[^,]+}}, %{{[^ ]+}} {{.*}}axis = 1 : i64{{.*}} : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x2xf32>
// CHECK: amp.add %[[T]], %{{.+}}
func.func @withAnotherUse(%t: tensor<2x2xf32> {amp.param = "t"}) -> (tensor<f32> {amp.output = "loss"}) {
  %i0 = arith.constant dense<[0]> : tensor<1xi64>
  %i1 = arith.constant dense<[1]> : tensor<1xi64>
  %r = amp.reduce_sum %t {axes = array<i64: 1>, keepdims = true} : (tensor<2x2xf32>) -> tensor<2x1xf32>
  %a = amp.gather %t, %i1 {axis = 1 : i64} : (tensor<2x2xf32>, tensor<1xi64>) -> tensor<2x1xf32>
  %b = amp.gather %t, %i0 {axis = 1 : i64} : (tensor<2x2xf32>, tensor<1xi64>) -> tensor<2x1xf32>
  %ab = amp.mul %a, %b : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
  %s = amp.mul %ab, %r : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
  %l = amp.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x1xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Gathers that do not cover the axis once each (index 0 twice, index 2
// never) stay gather_grads, added in their order.
// CHECK-LABEL: func @noCover
// CHECK-NOT: amp.concat
// CHECK: amp.gather_grad
// CHECK: amp.gather_grad
// CHECK: amp.gather_grad
// CHECK-NOT: amp.concat
// CHECK: return
func.func @noCover(%t: tensor<3x4xf32> {amp.param = "t"}) -> (tensor<f32> {amp.output = "loss"}) {
  %i0 = arith.constant dense<0> : tensor<i64>
  %i1 = arith.constant dense<1> : tensor<i64>
  %a = amp.gather %t, %i0 {axis = 0 : i64} : (tensor<3x4xf32>, tensor<i64>) -> tensor<4xf32>
  %b = amp.gather %t, %i1 {axis = 0 : i64} : (tensor<3x4xf32>, tensor<i64>) -> tensor<4xf32>
  %c = amp.gather %t, %i0 {axis = 0 : i64} : (tensor<3x4xf32>, tensor<i64>) -> tensor<4xf32>
  %ab = amp.mul %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %s = amp.mul %ab, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = amp.reduce_sum %s {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
