// amp-lower-to-linalg, data movement: reshapes as collapse + expand,
// transposes and broadcasts as generics, concat / slice as tensor slices.
// RUN: amp-opt %s --amp-lower-to-linalg=state-init=false | FileCheck %s

// CHECK-DAG: #[[T:.+]] = affine_map<(d0, d1, d2) -> (d1, d2, d0)>
// CHECK-DAG: #[[B:.+]] = affine_map<(d0, d1, d2) -> (0, d1, 0)>

// CHECK-LABEL: func.func @movement
func.func @movement(%x: tensor<2x3x4xf16>, %y: tensor<1x3x1xf16>, %z: tensor<2x5x4xf16>) -> (tensor<6x4xf16>, tensor<4x2x3xf16>, tensor<2x3x4xf16>, tensor<2x8x4xf16>, tensor<2x2x4xf16>) {
  // CHECK: tensor.collapse_shape %{{.+}} {{\[}}[0, 1, 2]] : tensor<2x3x4xf16> into tensor<24xf16>
  // CHECK: tensor.expand_shape %{{.+}} {{\[}}[0, 1]] output_shape [6, 4] : tensor<24xf16> into tensor<6x4xf16>
  %r = amp.reshape %x {shape = array<i64: 6, 4>} : (tensor<2x3x4xf16>) -> tensor<6x4xf16>
  // out[i] = in[perm[i]] with perm [2, 0, 1].
  // CHECK: linalg.generic {indexing_maps = [#[[T]], #{{.+}}]
  %t = amp.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf16>) -> tensor<4x2x3xf16>
  // CHECK: linalg.generic {indexing_maps = [#[[B]], #{{.+}}]
  %e = amp.expand %y {shape = array<i64: 2, 3, 4>} : (tensor<1x3x1xf16>) -> tensor<2x3x4xf16>
  // CHECK: tensor.insert_slice %{{.+}} into %{{.+}}[0, 0, 0] [2, 3, 4] [1, 1, 1]
  // CHECK: tensor.insert_slice %{{.+}} into %{{.+}}[0, 3, 0] [2, 5, 4] [1, 1, 1]
  %c = amp.concat %x, %z {axis = 1 : i64} : (tensor<2x3x4xf16>, tensor<2x5x4xf16>) -> tensor<2x8x4xf16>
  // CHECK: tensor.extract_slice %{{.+}}[0, 1, 0] [2, 2, 4] [1, 2, 1]
  %s = amp.slice %c {starts = array<i64: 1>, ends = array<i64: 5>, axes = array<i64: 1>, steps = array<i64: 2>} : (tensor<2x8x4xf16>) -> tensor<2x2x4xf16>
  return %r, %t, %e, %c, %s : tensor<6x4xf16>, tensor<4x2x3xf16>, tensor<2x3x4xf16>, tensor<2x8x4xf16>, tensor<2x2x4xf16>
}
