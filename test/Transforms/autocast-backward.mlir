// RUN: amp-opt %s -amp-autocast=keep-io-types=false | FileCheck %s


// Backward ops (marked amp.differentiates by amp-autodiff) compute in the
// precision of their forward op; a gradient returned for an f32 master
// parameter arrives in f32.
// CHECK-LABEL: func @backward
// CHECK: amp.matmul {{.*}} -> tensor<2x4xf16>
// CHECK: %[[G:.+]] = amp.matmul {{.*}} {accumulate = f32, amp.differentiates = "fwd"} : (tensor<4x2xf16>, tensor<2x4xf16>) -> tensor<4x4xf16>
// CHECK: %[[GW:.+]] = amp.cast %[[G]] : tensor<4x4xf16> to tensor<4x4xf32>
// CHECK: return %{{.+}}, %[[GW]] : tensor<2x4xf16>, tensor<4x4xf32>
func.func @backward(%w: tensor<4x4xf32> {amp.param = "w"}, %x: tensor<2x4xf32> {amp.input = "x"}, %xt: tensor<4x2xf32> {amp.input = "xt"}, %dy: tensor<2x4xf32> {amp.input = "dy"}) -> (tensor<2x4xf32>, tensor<4x4xf32> {amp.grad = "w"}) {
  %0 = amp.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("fwd")
  %1 = amp.matmul %xt, %dy {amp.differentiates = "fwd"} : (tensor<4x2xf32>, tensor<2x4xf32>) -> tensor<4x4xf32> loc("fwd/grad_w")
  return %0, %1 : tensor<2x4xf32>, tensor<4x4xf32>
}
