// amp-autocast on linalg on tensors: products and convolutions read the
// target type (IREE's cast form: linalg.generic of arith.truncf), keep their
// f32 outs (the accumulator); each value is cast once per type, right after
// its definition; everything else keeps its types.
// RUN: amp-opt %s -split-input-file -amp-autocast=target=bf16 | FileCheck %s
// RUN: amp-opt %s -split-input-file -amp-autocast=target=f16 | FileCheck %s --check-prefix=F16
// RUN: amp-opt %s -split-input-file -amp-autocast=target=bf16 --mlir-print-op-generic | FileCheck %s --check-prefix=BODY

// CHECK-LABEL: func.func @matmul
// CHECK-SAME:    (%[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8x16xf32>)
// CHECK-DAG:     %[[XE:.*]] = tensor.empty() : tensor<4x8xbf16>
// CHECK-DAG:     %[[XB:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<4x8xf32>) outs(%[[XE]] : tensor<4x8xbf16>)
// CHECK-DAG:       arith.truncf %{{.*}} : f32 to bf16
// CHECK-DAG:     %[[WB:.*]] = linalg.generic {{.*}} ins(%[[W]] : tensor<8x16xf32>) outs(%{{.*}} : tensor<8x16xbf16>)
// CHECK:         %[[ACC:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK:         linalg.matmul ins(%[[XB]], %[[WB]] : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%[[ACC]] : tensor<4x16xf32>) -> tensor<4x16xf32>
// F16-LABEL:   func.func @matmul
// F16:           linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x8xf16>, tensor<8x16xf16>) outs(%{{.*}} : tensor<4x16xf32>)
// The named op's body widens the narrowed inputs (what cast_signed builds).
// BODY-LABEL:  sym_name = "matmul"
// BODY:          "linalg.matmul"
// BODY-NEXT:     ^bb0(%[[A:.*]]: bf16, %[[B:.*]]: bf16, %[[C:.*]]: f32):
// BODY-DAG:        %[[AW:.*]] = "arith.extf"(%[[A]]) : (bf16) -> f32
// BODY-DAG:        %[[BW:.*]] = "arith.extf"(%[[B]]) : (bf16) -> f32
// BODY:            "arith.mulf"
// BODY:            "arith.addf"
func.func @matmul(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// A weight read by two products is cast once; a weight transposed for its
// product is cast before the transpose, which then moves bf16.
// CHECK-LABEL: func.func @shared_and_transposed_weight
// CHECK:         %[[W:.*]] = arith.constant dense<{{.*}}> : tensor<16x8xf32>
// CHECK-NEXT:    %[[WE:.*]] = tensor.empty() : tensor<16x8xbf16>
// CHECK-NEXT:    %[[WB:.*]] = linalg.generic {{.*}} ins(%[[W]] : tensor<16x8xf32>) outs(%[[WE]] : tensor<16x8xbf16>)
// CHECK-NOT:     ins(%[[W]] : tensor<16x8xf32>) outs(%{{.*}} : tensor<16x8xbf16>)
// CHECK:         %[[T:.*]] = linalg.transpose ins(%[[WB]] : tensor<16x8xbf16>) outs(%{{.*}} : tensor<8x16xbf16>) permutation = [1, 0]
// CHECK-NOT:     tensor<8x16xf32>
// CHECK:         linalg.matmul ins(%{{.*}}, %[[T]] : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK:         linalg.matmul ins(%{{.*}}, %[[WB]] : tensor<4x16xbf16>, tensor<16x8xbf16>) outs(%{{.*}} : tensor<4x8xf32>)
func.func @shared_and_transposed_weight(%x: tensor<4x8xf32>) -> (tensor<4x16xf32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %w = arith.constant dense<0.5> : tensor<16x8xf32>
  %te = tensor.empty() : tensor<8x16xf32>
  %wt = linalg.transpose ins(%w : tensor<16x8xf32>) outs(%te : tensor<8x16xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<4x16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = linalg.matmul ins(%x, %wt : tensor<4x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<4x16xf32>) -> tensor<4x16xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %acc2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %z = linalg.matmul ins(%y, %w : tensor<4x16xf32>, tensor<16x8xf32>) outs(%acc2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %z : tensor<4x16xf32>, tensor<4x8xf32>
}

// -----

// A contraction written as linalg.generic (the upstream contraction
// interface finds it) is lowered the same way; its body widens each input.
#mk = affine_map<(m, n, k) -> (m, k)>
#kn = affine_map<(m, n, k) -> (k, n)>
#mn = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @generic_contraction
// CHECK:         linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK-NEXT:    ^bb0(%[[A:.*]]: bf16, %[[B:.*]]: bf16, %[[C:.*]]: f32):
// CHECK-DAG:       %[[AW:.*]] = arith.extf %[[A]] : bf16 to f32
// CHECK-DAG:       %[[BW:.*]] = arith.extf %[[B]] : bf16 to f32
// CHECK:           %[[P:.*]] = arith.mulf %[[AW]], %[[BW]] : f32
// CHECK:           arith.addf %[[C]], %[[P]] : f32
func.func @generic_contraction(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %acc: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %y = linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<4x16xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Convolutions (NCHW, depthwise) and batch products; reshapes of an input
// move its cast above them (a reshape with another use keeps it below).
// CHECK-LABEL: func.func @convs
// CHECK:         linalg.conv_2d_nchw_fchw {{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x3x8x8xbf16>, tensor<4x3x3x3xbf16>) outs(%{{.*}} : tensor<1x4x6x6xf32>)
// CHECK:         linalg.depthwise_conv_2d_nhwc_hwc {{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x8x8x3xbf16>, tensor<3x3x3xbf16>) outs(%{{.*}} : tensor<1x6x6x3xf32>)
// CHECK:         %[[EX:.*]] = tensor.expand_shape %{{[0-9]+}} {{\[\[}}0, 1], [2], [3]] output_shape [1, 4, 6, 6] : tensor<4x6x6xbf16> into tensor<1x4x6x6xbf16>
// CHECK:         %[[CO:.*]] = tensor.collapse_shape %[[EX]] {{.*}} : tensor<1x4x6x6xbf16> into tensor<1x24x6xbf16>
// CHECK:         linalg.batch_matmul ins(%[[CO]], %{{.*}} : tensor<1x24x6xbf16>, tensor<1x6x6xbf16>) outs(%{{.*}} : tensor<1x24x6xf32>)
// CHECK:         %[[KEEP:.*]] = tensor.expand_shape %{{.*}} : tensor<4x6x6xf32> into tensor<1x4x6x6xf32>
// CHECK:         %[[KEEPC:.*]] = tensor.collapse_shape %[[KEEP]] {{.*}} : tensor<1x4x6x6xf32> into tensor<1x24x6xf32>
// CHECK:         %[[KB:.*]] = linalg.generic {{.*}} ins(%[[KEEPC]] : tensor<1x24x6xf32>) outs(%{{.*}} : tensor<1x24x6xbf16>)
// CHECK:         linalg.batch_matmul ins(%[[KB]], %{{.*}} : tensor<1x24x6xbf16>, tensor<1x6x6xbf16>) outs(%{{.*}} : tensor<1x24x6xf32>)
func.func @convs(%x: tensor<1x3x8x8xf32>, %f: tensor<4x3x3x3xf32>, %acc: tensor<1x4x6x6xf32>,
                 %xh: tensor<1x8x8x3xf32>, %dw: tensor<3x3x3xf32>, %acch: tensor<1x6x6x3xf32>,
                 %r: tensor<4x6x6xf32>, %b: tensor<1x6x6xf32>, %bacc: tensor<1x24x6xf32>)
    -> (tensor<1x4x6x6xf32>, tensor<1x6x6x3xf32>, tensor<1x24x6xf32>, tensor<1x24x6xf32>, tensor<1x24x6xf32>) {
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %f : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) outs(%acc : tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %d = linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%xh, %dw : tensor<1x8x8x3xf32>, tensor<3x3x3xf32>) outs(%acch : tensor<1x6x6x3xf32>) -> tensor<1x6x6x3xf32>
  %ex = tensor.expand_shape %r [[0, 1], [2], [3]] output_shape [1, 4, 6, 6] : tensor<4x6x6xf32> into tensor<1x4x6x6xf32>
  %co = tensor.collapse_shape %ex [[0], [1, 2], [3]] : tensor<1x4x6x6xf32> into tensor<1x24x6xf32>
  %bm = linalg.batch_matmul ins(%co, %b : tensor<1x24x6xf32>, tensor<1x6x6xf32>) outs(%bacc : tensor<1x24x6xf32>) -> tensor<1x24x6xf32>
  %ex2 = tensor.expand_shape %r [[0, 1], [2], [3]] output_shape [1, 4, 6, 6] : tensor<4x6x6xf32> into tensor<1x4x6x6xf32>
  %co2 = tensor.collapse_shape %ex2 [[0], [1, 2], [3]] : tensor<1x4x6x6xf32> into tensor<1x24x6xf32>
  %bm2 = linalg.batch_matmul ins(%co2, %b : tensor<1x24x6xf32>, tensor<1x6x6xf32>) outs(%bacc : tensor<1x24x6xf32>) -> tensor<1x24x6xf32>
  return %y, %d, %co2, %bm, %bm2 : tensor<1x4x6x6xf32>, tensor<1x6x6x3xf32>, tensor<1x24x6xf32>, tensor<1x24x6xf32>, tensor<1x24x6xf32>
}

// -----

// Dynamic sizes: the cast's init takes them from tensor.dim.
// CHECK-LABEL: func.func @dynamic
// CHECK:         %[[D:.*]] = tensor.dim %[[X:.*]], %{{.*}} : tensor<?x8xf32>
// CHECK:         tensor.empty(%[[D]]) : tensor<?x8xbf16>
// CHECK:         linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<?x8xbf16>, tensor<8x16xbf16>) outs(%{{.*}} : tensor<?x16xf32>)
func.func @dynamic(%x: tensor<?x8xf32>, %w: tensor<8x16xf32>, %acc: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %y = linalg.matmul ins(%x, %w : tensor<?x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<?x16xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
