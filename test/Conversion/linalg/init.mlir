// amp-lower-to-linalg's state-init: the amp.init values of the arguments
// become @<name>_init, returning them in argument order, each result
// naming its argument (amp.arg); the step's arguments keep their roles.
// RUN: amp-opt %s --amp-lower-to-linalg | FileCheck %s

// CHECK-LABEL: func.func @main(
// CHECK-SAME: %{{.+}}: tensor<2xf32> {amp.param = "w"}
// CHECK-SAME: %{{.+}}: tensor<2xf32> {amp.input = "x"}
// CHECK-SAME: %{{.+}}: tensor<f32> {amp.opt_state = "loss_scale"}
// CHECK-NOT: amp.init
func.func @main(%w: tensor<2xf32> {amp.param = "w", amp.init = dense<[1.5, -2.0]> : tensor<2xf32>},
                %x: tensor<2xf32> {amp.input = "x"},
                %s: tensor<f32> {amp.opt_state = "loss_scale", amp.init = dense<65536.0> : tensor<f32>})
    -> (tensor<2xf32> {amp.output = "y"}) {
  %0 = amp.mul %w, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = amp.mul %0, %s : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  return %1 : tensor<2xf32>
}
// CHECK-LABEL: func.func @main_init() -> (tensor<2xf32> {amp.arg = 0 : i64, amp.param = "w"}, tensor<f32> {amp.arg = 2 : i64, amp.opt_state = "loss_scale"})
// CHECK-DAG: arith.constant dense<[1.500000e+00, -2.000000e+00]> : tensor<2xf32>
// CHECK-DAG: arith.constant dense<6.553600e+04> : tensor<f32>
// CHECK: return
