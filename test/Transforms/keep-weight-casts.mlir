// amp-keep-weight-casts: an updated parameter's f16 / bf16 cast becomes step
// state, read where the cast was, and the cast moves onto the updated weight
// (returned as the state's next value). amp-lower-to-runtime then writes
// that cast inside the update's call, into the state's own buffer.
// RUN: amp-opt %s -split-input-file -amp-keep-weight-casts | FileCheck %s
// RUN: amp-opt %s -split-input-file -amp-keep-weight-casts -amp-plan-memory \
// RUN:   -amp-lower-to-runtime | FileCheck %s --check-prefix=LOWER

// w is cast to bf16 by two readers' single cast; its initial copy is its
// initial value rounded to nearest even (1.00390625 is halfway between two
// bf16 values: the even one, 1.0; 1.01171875 rounds up to 1.015625; NaN
// becomes the canonical quiet NaN 0x7FC0). b is read in f32 only: untouched.
// CHECK-LABEL: func.func @sgd(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4xf32> {amp.init = {{.*}}, amp.param = "w"}
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<4xbf16> {amp.init = dense<[1.000000e+00, 1.015630e+00, -2.000000e+00, 0x7FC0]> : tensor<4xbf16>, amp.opt_state = "w.bf16"})
// CHECK-SAME: tensor<4xbf16> {amp.updates = "w.bf16"}
// CHECK-NOT: amp.cast %[[W]]
// CHECK: amp.mul %[[C]], %{{.*}} : (tensor<4xbf16>, tensor<4xbf16>)
// CHECK: amp.add %[[C]], %{{.*}} : (tensor<4xbf16>, tensor<4xbf16>)
// CHECK: %[[NW:.*]] = amp.sgd_update %[[W]]
// CHECK-NEXT: %[[NC:.*]] = amp.cast %[[NW]] : tensor<4xf32> to tensor<4xbf16>
// CHECK: return %{{.*}}, %[[NW]], %{{.*}}, %[[NC]] :
// The copy's result is written in place (result 3), by the update's call:
// sgd_update (opcode 28) with 6 tensors and 7 attribute words (lowp = 1,
// the last); no cast (opcode 4) is left.
// LOWER-LABEL: module
// LOWER-NOT: dense<[2, 4,
// LOWER: dense<[2, 28, 6, 7, {{.*}}, 0, 0, 0, 0, 0, 1, 0]>
// LOWER-NOT: dense<[2, 4,
// LOWER: llvm.func @sgd(
// LOWER-SAME: amp.inplace_results = array<i64: 1, 2, 3>
func.func @sgd(%w: tensor<4xf32> {amp.param = "w", amp.init = dense<[1.00390625, 1.01171875, -2.0, 0x7FC00001]> : tensor<4xf32>},
               %b: tensor<4xf32> {amp.param = "b", amp.init = dense<0.5> : tensor<4xf32>},
               %step: tensor<i64> {amp.opt_state = "step", amp.init = dense<0> : tensor<i64>},
               %x: tensor<4xbf16> {amp.input = "x"}, %g: tensor<4xf32> {amp.input = "g"})
    -> (tensor<4xbf16> {amp.output = "y"}, tensor<4xf32> {amp.updates = "w"},
        tensor<i64> {amp.updates = "step"}) {
  %f = arith.constant dense<false> : tensor<i1>
  %c = amp.cast %w : tensor<4xf32> to tensor<4xbf16>
  %m = amp.mul %c, %x : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<4xbf16>
  %y = amp.add %c, %m : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<4xbf16>
  %bb = amp.add %b, %g : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %nw = amp.sgd_update %w, %bb step %step found_inf %f {lr = 0.1 : f32} : tensor<4xf32>
  %ns = amp.step_count %step found_inf %f
  return %y, %nw, %ns : tensor<4xbf16>, tensor<4xf32>, tensor<i64>
}

// -----

// Adam, f16; a parameter without an update (frozen) and one cast to both
// f16 and bf16 keep their casts.
// CHECK-LABEL: func.func @adam(
// CHECK-SAME: tensor<2xf16> {amp.init = dense<[1.500000e+00, -6.550400e+04]> : tensor<2xf16>, amp.opt_state = "w.f16"})
// CHECK-SAME: tensor<2xf16> {amp.updates = "w.f16"}
// CHECK-NOT: amp.cast %arg0 :
// CHECK: amp.cast %arg1 : tensor<2xf32> to tensor<2xf16>
// CHECK: amp.cast %arg2 : tensor<2xf32> to tensor<2xf16>
// CHECK: amp.cast %arg2 : tensor<2xf32> to tensor<2xbf16>
// CHECK: %[[NW:[a-z_0-9]+]], %{{.*}}, %{{.*}} = amp.adam_update %arg0
// CHECK-NEXT: amp.cast %[[NW]] : tensor<2xf32> to tensor<2xf16>
// CHECK-NOT: w2.f16
// CHECK-NOT: frozen.f16
// The updated w's copy comes out of adam_update (opcode 29: 10 tensors, 7
// words); w2's update has none (9 tensors, 6 words) and the casts of w2 and
// of the frozen parameter stay calls of their own.
// LOWER-LABEL: module
// LOWER-DAG: dense<[2, 29, 10, 7,
// LOWER-DAG: dense<[2, 29, 9, 6,
// LOWER-DAG: dense<[2, 4, 2, 0,
// LOWER: llvm.func @adam(
// LOWER-SAME: amp.inplace_results = array<i64: 2, 3, 4, 5, 6, 7, 8>
func.func @adam(%w: tensor<2xf32> {amp.param = "w", amp.init = dense<[1.5, -65504.0]> : tensor<2xf32>},
                %fz: tensor<2xf32> {amp.param = "frozen", amp.init = dense<2.0> : tensor<2xf32>},
                %w2: tensor<2xf32> {amp.param = "w2", amp.init = dense<3.0> : tensor<2xf32>},
                %m: tensor<2xf32> {amp.opt_state = "w.exp_avg", amp.init = dense<0.0> : tensor<2xf32>},
                %v: tensor<2xf32> {amp.opt_state = "w.exp_avg_sq", amp.init = dense<0.0> : tensor<2xf32>},
                %m2: tensor<2xf32> {amp.opt_state = "w2.exp_avg", amp.init = dense<0.0> : tensor<2xf32>},
                %v2: tensor<2xf32> {amp.opt_state = "w2.exp_avg_sq", amp.init = dense<0.0> : tensor<2xf32>},
                %step: tensor<i64> {amp.opt_state = "step", amp.init = dense<0> : tensor<i64>},
                %g: tensor<2xf32> {amp.input = "g"})
    -> (tensor<2xf16> {amp.output = "y"}, tensor<2xbf16> {amp.output = "z"},
        tensor<2xf32> {amp.updates = "w"}, tensor<2xf32> {amp.updates = "w.exp_avg"},
        tensor<2xf32> {amp.updates = "w.exp_avg_sq"}, tensor<2xf32> {amp.updates = "w2"},
        tensor<2xf32> {amp.updates = "w2.exp_avg"}, tensor<2xf32> {amp.updates = "w2.exp_avg_sq"}) {
  %f = arith.constant dense<false> : tensor<i1>
  %c = amp.cast %w : tensor<2xf32> to tensor<2xf16>
  %cf = amp.cast %fz : tensor<2xf32> to tensor<2xf16>
  %c2 = amp.cast %w2 : tensor<2xf32> to tensor<2xf16>
  %c3 = amp.cast %w2 : tensor<2xf32> to tensor<2xbf16>
  %y0 = amp.mul %c, %cf : (tensor<2xf16>, tensor<2xf16>) -> tensor<2xf16>
  %y = amp.mul %y0, %c2 : (tensor<2xf16>, tensor<2xf16>) -> tensor<2xf16>
  %n:3 = amp.adam_update %w, %g, %m, %v step %step found_inf %f {lr = 0.1 : f32} : tensor<2xf32>
  %n2:3 = amp.adam_update %w2, %g, %m2, %v2 step %step found_inf %f {lr = 0.1 : f32} : tensor<2xf32>
  return %y, %c3, %n#0, %n#1, %n#2, %n2#0, %n2#1, %n2#2 : tensor<2xf16>, tensor<2xbf16>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}
