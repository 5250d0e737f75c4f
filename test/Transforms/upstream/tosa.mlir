// amp-autocast on TOSA: casts are tosa.cast; tosa.matmul reads bf16 (and
// bf16 zero points) and still produces f32; the convolutions read bf16
// input, filter and bias, accumulate in f32 (acc_type) and, as TOSA's bf16
// profile has it, produce bf16, cast back to f32 for their users; a
// transpose or reshape of an input moves its cast above it; reductions and
// exp keep f32. The generic form is what crosses MLIR versions.
// RUN: amp-opt %s -amp-autocast=target=bf16 | FileCheck %s
// RUN: amp-opt %s -amp-autocast=target=f16 | FileCheck %s --check-prefix=F16
// RUN: amp-opt %s -amp-autocast=target=bf16 --mlir-print-op-generic | amp-opt | FileCheck %s --check-prefix=ROUNDTRIP

// CHECK-LABEL: func.func @mlp
// CHECK-DAG:     %[[XB:.*]] = tosa.cast %arg0 : (tensor<1x4x8xf32>) -> tensor<1x4x8xbf16>
// CHECK-DAG:     %[[W:.*]] = "tosa.const"() <{values = dense<{{.*}}> : tensor<1x16x8xf32>}>
// CHECK-DAG:     %[[WB:.*]] = tosa.cast %[[W]] : (tensor<1x16x8xf32>) -> tensor<1x16x8xbf16>
// CHECK-DAG:     %[[T:.*]] = tosa.transpose %[[WB]] {perms = array<i32: 0, 2, 1>} : (tensor<1x16x8xbf16>) -> tensor<1x8x16xbf16>
// CHECK-DAG:     %[[Z:.*]] = "tosa.const"() <{values = dense<0.000000e+00> : tensor<1xbf16>}>
// CHECK:         %[[Y:.*]] = tosa.matmul %[[XB]], %[[T]], %[[Z]], %[[Z]] : (tensor<1x4x8xbf16>, tensor<1x8x16xbf16>, tensor<1xbf16>, tensor<1xbf16>) -> tensor<1x4x16xf32>
// CHECK:         tosa.exp %[[Y]] : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
// CHECK:         tosa.reduce_sum %{{.*}} {axis = 2 : i32} : (tensor<1x4x16xf32>) -> tensor<1x4x1xf32>
// F16-LABEL:   func.func @mlp
// F16:           tosa.matmul %{{.*}} : (tensor<1x4x8xf16>, tensor<1x8x16xf16>, tensor<1xf16>, tensor<1xf16>) -> tensor<1x4x16xf32>
// ROUNDTRIP-LABEL: func.func @mlp
// ROUNDTRIP:     tosa.matmul {{.*}} -> tensor<1x4x16xf32>
func.func @mlp(%x: tensor<1x4x8xf32>) -> (tensor<1x4x16xf32>, tensor<1x4x1xf32>) {
  %w = "tosa.const"() <{values = dense<0.25> : tensor<1x16x8xf32>}> : () -> tensor<1x16x8xf32>
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %wt = tosa.transpose %w {perms = array<i32: 0, 2, 1>} : (tensor<1x16x8xf32>) -> tensor<1x8x16xf32>
  %y = tosa.matmul %x, %wt, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x16xf32>
  %e = tosa.exp %y : (tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
  %s = tosa.reduce_sum %e {axis = 2 : i32} : (tensor<1x4x16xf32>) -> tensor<1x4x1xf32>
  return %e, %s : tensor<1x4x16xf32>, tensor<1x4x1xf32>
}

// CHECK-LABEL: func.func @conv
// CHECK:         %[[C:.*]] = tosa.conv2d %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {acc_type = f32, {{.*}}} : (tensor<1x8x8x3xbf16>, tensor<4x3x3x3xbf16>, tensor<4xbf16>, tensor<1xbf16>, tensor<1xbf16>) -> tensor<1x6x6x4xbf16>
// CHECK-NEXT:    %[[CF:.*]] = tosa.cast %[[C]] : (tensor<1x6x6x4xbf16>) -> tensor<1x6x6x4xf32>
// CHECK-NEXT:    tosa.clamp %[[CF]] {{.*}} : (tensor<1x6x6x4xf32>) -> tensor<1x6x6x4xf32>
func.func @conv(%x: tensor<1x8x8x3xf32>, %f: tensor<4x3x3x3xf32>, %b: tensor<4xf32>) -> tensor<1x6x6x4xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %c = tosa.conv2d %x, %f, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>}
      : (tensor<1x8x8x3xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x6x6x4xf32>
  %r = tosa.clamp %c {max_val = 3.40282347E+38 : f32, min_val = 0.0 : f32} : (tensor<1x6x6x4xf32>) -> tensor<1x6x6x4xf32>
  return %r : tensor<1x6x6x4xf32>
}
