// amp-lower-to-linalg, element-wise ops: f16 / bf16 math in f32, rounded
// once (arith.truncf, round to nearest even); broadcasting by the maps.
// RUN: amp-opt %s --amp-lower-to-linalg=state-init=false | FileCheck %s

// CHECK-DAG: #[[ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[ROW:.+]] = affine_map<(d0, d1) -> (d1)>
// CHECK-DAG: #[[SCALAR:.+]] = affine_map<(d0, d1) -> ()>

// CHECK-LABEL: func.func @casts
func.func @casts(%x: tensor<2x3xf32>) -> (tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xi64>) {
  // CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
  // CHECK: arith.truncf %{{.+}} : f32 to f16
  %h = amp.cast %x : tensor<2x3xf32> to tensor<2x3xf16>
  // f16 -> bf16 goes through f32 (one rounding).
  // CHECK: arith.extf %{{.+}} : f16 to f32
  // CHECK: arith.truncf %{{.+}} : f32 to bf16
  %b = amp.cast %h : tensor<2x3xf16> to tensor<2x3xbf16>
  // CHECK: arith.fptosi %{{.+}} : f32 to i64
  %i = amp.cast %x : tensor<2x3xf32> to tensor<2x3xi64>
  return %h, %b, %i : tensor<2x3xf16>, tensor<2x3xbf16>, tensor<2x3xi64>
}

// CHECK-LABEL: func.func @binary_broadcast
func.func @binary_broadcast(%x: tensor<2x3xf16>, %r: tensor<3xf16>, %s: tensor<f16>) -> (tensor<2x3xf16>, tensor<2x3xi1>) {
  // CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ID]]]
  // CHECK: ^bb0(%[[A:.+]]: f16, %[[B:.+]]: f16, %{{.+}}: f16):
  // CHECK-DAG: %[[AW:.+]] = arith.extf %[[A]] : f16 to f32
  // CHECK-DAG: %[[BW:.+]] = arith.extf %[[B]] : f16 to f32
  // CHECK: %[[S:.+]] = arith.addf %[[AW]], %[[BW]] : f32
  // CHECK: %[[T:.+]] = arith.truncf %[[S]] : f32 to f16
  // CHECK: linalg.yield %[[T]] : f16
  %a = amp.add %x, %r : (tensor<2x3xf16>, tensor<3xf16>) -> tensor<2x3xf16>
  // CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[SCALAR]], #[[ID]]]
  // CHECK: arith.cmpf olt
  %c = amp.less %a, %s : (tensor<2x3xf16>, tensor<f16>) -> tensor<2x3xi1>
  return %a, %c : tensor<2x3xf16>, tensor<2x3xi1>
}

// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<4xbf16>, %dy: tensor<4xbf16>) -> (tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>) {
  // bf16 widens by a shift of its bits (IREE would fold an extf of a
  // truncf away); relu keeps a NaN: x > 0 ? x : (x != x ? x : 0).
  // CHECK: ^bb0(%[[X:.+]]: bf16, %{{.+}}: bf16):
  // CHECK: %[[BITS:.+]] = arith.bitcast %[[X]] : bf16 to i16
  // CHECK: %[[W:.+]] = arith.extui %[[BITS]] : i16 to i32
  // CHECK: %[[SH:.+]] = arith.shli %[[W]], %{{.+}} : i32
  // CHECK: %[[XF:.+]] = arith.bitcast %[[SH]] : i32 to f32
  // CHECK-DAG: arith.cmpf uno, %[[XF]], %[[XF]]
  // CHECK-DAG: arith.cmpf ogt, %[[XF]]
  // CHECK: arith.truncf %{{.+}} : f32 to bf16
  %r = amp.relu %x : tensor<4xbf16>
  // GELU: x * 0.5 * erfc(-x / sqrt 2), erfc as MLIR's f32 polynomial (no
  // math.erfc left: IREE's CPU back-end has none).
  // CHECK-NOT: math.erfc
  // CHECK: arith.truncf %{{.+}} : f32 to bf16
  %g = amp.gelu %x : tensor<4xbf16>
  // relu's gradient: dy * (x > 0 ? 1 : 0).
  // CHECK: linalg.generic
  // CHECK: arith.cmpf ogt
  // CHECK: arith.select
  // CHECK: arith.mulf
  %d = amp.unary_grad %x, %dy {kind = #amp.unary<relu>} : tensor<4xbf16>
  return %r, %g, %d : tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>
}

// CHECK-LABEL: func.func @where_and_int
func.func @where_and_int(%c: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xf32>, %i: tensor<4xi64>) -> (tensor<4xf32>, tensor<4xi64>) {
  // CHECK: arith.select
  %w = amp.where %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // Integer math on the element type (no f32).
  // CHECK: arith.muli %{{.+}}, %{{.+}} : i64
  %m = amp.mul %i, %i : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  return %w, %m : tensor<4xf32>, tensor<4xi64>
}
