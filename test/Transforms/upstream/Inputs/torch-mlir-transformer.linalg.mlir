// torch-mlir torch_mlir.fx export of test/embedding/test_autocast_iree.py's transformer (linalg), weights elided:
// test_autocast_iree.py --write-fixtures
#map = affine_map<(d0, d1, d2) -> (d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map2 = affine_map<(d0, d1, d2) -> (d2)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map5 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#map6 = affine_map<(d0, d1) -> (d1)>
#map7 = affine_map<(d0, d1) -> (d0, d1)>
#map8 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
module {
  func.func @main(%arg0: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0xFF800000 : f32
    %true = arith.constant true
    %cst_1 = arith.constant 0.000000e+00 : f64
    %cst_2 = arith.constant dense<0.000000e+00> : tensor<2x4x16x16xf32>
    %cst_3 = arith.constant dense_resource<torch_tensor_64_torch.float32_5> : tensor<64xf32>
    %cst_4 = arith.constant dense_resource<torch_tensor_64_torch.float32_4> : tensor<64xf32>
    %cst_5 = arith.constant dense_resource<torch_tensor_64_torch.float32_3> : tensor<64xf32>
    %cst_6 = arith.constant dense_resource<torch_tensor_64_128_torch.float32> : tensor<64x128xf32>
    %cst_7 = arith.constant dense_resource<torch_tensor_128_torch.float32> : tensor<128xf32>
    %cst_8 = arith.constant dense_resource<torch_tensor_128_64_torch.float32> : tensor<128x64xf32>
    %cst_9 = arith.constant dense_resource<torch_tensor_64_torch.float32_2> : tensor<64xf32>
    %cst_10 = arith.constant dense_resource<torch_tensor_64_torch.float32_1> : tensor<64xf32>
    %cst_11 = arith.constant 1.000000e-05 : f64
    %cst_12 = arith.constant dense_resource<torch_tensor_64_torch.float32> : tensor<64xf32>
    %cst_13 = arith.constant dense_resource<torch_tensor_64_64_torch.float32> : tensor<64x64xf32>
    %cst_14 = arith.constant 0xFFF0000000000000 : f64
    %cst_15 = arith.constant dense_resource<torch_tensor_192_torch.float32> : tensor<192xf32>
    %cst_16 = arith.constant dense_resource<torch_tensor_192_64_torch.float32> : tensor<192x64xf32>
    %cst_17 = arith.constant 5.000000e-01 : f32
    %cst_18 = arith.constant 6.400000e+01 : f64
    %cst_19 = arith.constant 6.400000e+01 : f32
    %0 = tensor.empty() : tensor<16x2x64xf32>
    %transposed = linalg.transpose ins(%arg0 : tensor<2x16x64xf32>) outs(%0 : tensor<16x2x64xf32>) permutation = [1, 0, 2] 
    %1 = tensor.empty() : tensor<64x192xf32>
    %transposed_20 = linalg.transpose ins(%cst_16 : tensor<192x64xf32>) outs(%1 : tensor<64x192xf32>) permutation = [1, 0] 
    %2 = tensor.empty() : tensor<16x64x192xf32>
    %3 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%transposed_20 : tensor<64x192xf32>) outs(%2 : tensor<16x64x192xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<16x64x192xf32>
    %4 = tensor.empty() : tensor<16x2x192xf32>
    %5 = linalg.fill ins(%cst : f32) outs(%4 : tensor<16x2x192xf32>) -> tensor<16x2x192xf32>
    %6 = linalg.batch_matmul ins(%transposed, %3 : tensor<16x2x64xf32>, tensor<16x64x192xf32>) outs(%5 : tensor<16x2x192xf32>) -> tensor<16x2x192xf32>
    %7 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6, %cst_15 : tensor<16x2x192xf32>, tensor<192xf32>) outs(%4 : tensor<16x2x192xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.addf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<16x2x192xf32>
    %expanded = tensor.expand_shape %7 [[0, 1], [2], [3, 4]] output_shape [1, 16, 2, 3, 64] : tensor<16x2x192xf32> into tensor<1x16x2x3x64xf32>
    %8 = tensor.empty() : tensor<3x16x2x1x64xf32>
    %transposed_21 = linalg.transpose ins(%expanded : tensor<1x16x2x3x64xf32>) outs(%8 : tensor<3x16x2x1x64xf32>) permutation = [3, 1, 2, 0, 4] 
    %collapsed = tensor.collapse_shape %transposed_21 [[0], [1], [2, 3], [4]] : tensor<3x16x2x1x64xf32> into tensor<3x16x2x64xf32>
    %extracted_slice = tensor.extract_slice %collapsed[0, 0, 0, 0] [1, 16, 2, 64] [1, 1, 1, 1] : tensor<3x16x2x64xf32> to tensor<1x16x2x64xf32>
    %extracted_slice_22 = tensor.extract_slice %collapsed[1, 0, 0, 0] [1, 16, 2, 64] [1, 1, 1, 1] : tensor<3x16x2x64xf32> to tensor<1x16x2x64xf32>
    %extracted_slice_23 = tensor.extract_slice %collapsed[2, 0, 0, 0] [1, 16, 2, 64] [1, 1, 1, 1] : tensor<3x16x2x64xf32> to tensor<1x16x2x64xf32>
    %collapsed_24 = tensor.collapse_shape %extracted_slice [[0, 1], [2, 3]] : tensor<1x16x2x64xf32> into tensor<16x128xf32>
    %expanded_25 = tensor.expand_shape %collapsed_24 [[0], [1, 2]] output_shape [16, 8, 16] : tensor<16x128xf32> into tensor<16x8x16xf32>
    %9 = tensor.empty() : tensor<8x16x16xf32>
    %transposed_26 = linalg.transpose ins(%expanded_25 : tensor<16x8x16xf32>) outs(%9 : tensor<8x16x16xf32>) permutation = [1, 0, 2] 
    %collapsed_27 = tensor.collapse_shape %extracted_slice_22 [[0, 1], [2, 3]] : tensor<1x16x2x64xf32> into tensor<16x128xf32>
    %expanded_28 = tensor.expand_shape %collapsed_27 [[0], [1, 2]] output_shape [16, 8, 16] : tensor<16x128xf32> into tensor<16x8x16xf32>
    %transposed_29 = linalg.transpose ins(%expanded_28 : tensor<16x8x16xf32>) outs(%9 : tensor<8x16x16xf32>) permutation = [1, 0, 2] 
    %collapsed_30 = tensor.collapse_shape %extracted_slice_23 [[0, 1], [2, 3]] : tensor<1x16x2x64xf32> into tensor<16x128xf32>
    %expanded_31 = tensor.expand_shape %collapsed_30 [[0], [1, 2]] output_shape [16, 8, 16] : tensor<16x128xf32> into tensor<16x8x16xf32>
    %transposed_32 = linalg.transpose ins(%expanded_31 : tensor<16x8x16xf32>) outs(%9 : tensor<8x16x16xf32>) permutation = [1, 0, 2] 
    %expanded_33 = tensor.expand_shape %transposed_26 [[0, 1], [2], [3]] output_shape [2, 4, 16, 16] : tensor<8x16x16xf32> into tensor<2x4x16x16xf32>
    %expanded_34 = tensor.expand_shape %transposed_29 [[0, 1], [2], [3]] output_shape [2, 4, 16, 16] : tensor<8x16x16xf32> into tensor<2x4x16x16xf32>
    %10 = tensor.empty() : tensor<2x4x16x16xf32>
    %11 = linalg.generic {indexing_maps = [#map3, #map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_33 : tensor<2x4x16x16xf32>) outs(%10 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = arith.mulf %in, %cst_17 : f32
      linalg.yield %92 : f32
    } -> tensor<2x4x16x16xf32>
    %transposed_35 = linalg.transpose ins(%expanded_34 : tensor<2x4x16x16xf32>) outs(%10 : tensor<2x4x16x16xf32>) permutation = [0, 1, 3, 2] 
    %12 = linalg.generic {indexing_maps = [#map3, #map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%transposed_35 : tensor<2x4x16x16xf32>) outs(%10 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = arith.mulf %in, %cst_17 : f32
      linalg.yield %92 : f32
    } -> tensor<2x4x16x16xf32>
    %collapsed_36 = tensor.collapse_shape %11 [[0, 1], [2], [3]] : tensor<2x4x16x16xf32> into tensor<8x16x16xf32>
    %collapsed_37 = tensor.collapse_shape %12 [[0, 1], [2], [3]] : tensor<2x4x16x16xf32> into tensor<8x16x16xf32>
    %13 = linalg.fill ins(%cst : f32) outs(%9 : tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
    %14 = linalg.batch_matmul ins(%collapsed_36, %collapsed_37 : tensor<8x16x16xf32>, tensor<8x16x16xf32>) outs(%13 : tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
    %expanded_38 = tensor.expand_shape %14 [[0, 1], [2], [3]] output_shape [2, 4, 16, 16] : tensor<8x16x16xf32> into tensor<2x4x16x16xf32>
    %15 = tensor.empty() : tensor<2x4x16xi64>
    %16 = linalg.fill ins(%c0_i64 : i64) outs(%15 : tensor<2x4x16xi64>) -> tensor<2x4x16xi64>
    %17 = tensor.empty() : tensor<2x4x16xf32>
    %18 = linalg.fill ins(%cst_0 : f32) outs(%17 : tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %19:2 = linalg.generic {indexing_maps = [#map3, #map4, #map4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%expanded_38 : tensor<2x4x16x16xf32>) outs(%18, %16 : tensor<2x4x16xf32>, tensor<2x4x16xi64>) {
    ^bb0(%in: f32, %out: f32, %out_53: i64):
      %92 = linalg.index 3 : index
      %93 = arith.index_cast %92 : index to i64
      %94 = arith.maximumf %in, %out : f32
      %95 = arith.cmpf ogt, %in, %out : f32
      %96 = arith.select %95, %93, %out_53 : i64
      linalg.yield %94, %96 : f32, i64
    } -> (tensor<2x4x16xf32>, tensor<2x4x16xi64>)
    %expanded_39 = tensor.expand_shape %19#0 [[0], [1], [2, 3]] output_shape [2, 4, 16, 1] : tensor<2x4x16xf32> into tensor<2x4x16x1xf32>
    %20 = linalg.generic {indexing_maps = [#map3, #map5, #map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_38, %expanded_39 : tensor<2x4x16x16xf32>, tensor<2x4x16x1xf32>) outs(%10 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.subf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x4x16x16xf32>
    %21 = linalg.generic {indexing_maps = [#map3, #map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%20 : tensor<2x4x16x16xf32>) outs(%10 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = math.exp %in : f32
      linalg.yield %92 : f32
    } -> tensor<2x4x16x16xf32>
    %22 = tensor.empty() : tensor<2x4x16x1xf32>
    %23 = linalg.fill ins(%cst : f32) outs(%22 : tensor<2x4x16x1xf32>) -> tensor<2x4x16x1xf32>
    %24 = linalg.generic {indexing_maps = [#map3, #map5], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%21 : tensor<2x4x16x16xf32>) outs(%23 : tensor<2x4x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = arith.addf %in, %out : f32
      linalg.yield %92 : f32
    } -> tensor<2x4x16x1xf32>
    %25 = linalg.generic {indexing_maps = [#map3, #map5, #map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%21, %24 : tensor<2x4x16x16xf32>, tensor<2x4x16x1xf32>) outs(%10 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.divf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x4x16x16xf32>
    %26 = tensor.empty() : tensor<2x4x16x16xi1>
    %27 = linalg.generic {indexing_maps = [#map3, #map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_38 : tensor<2x4x16x16xf32>) outs(%26 : tensor<2x4x16x16xi1>) {
    ^bb0(%in: f32, %out: i1):
      %92 = arith.extf %in : f32 to f64
      %93 = arith.cmpf oeq, %92, %cst_14 : f64
      linalg.yield %93 : i1
    } -> tensor<2x4x16x16xi1>
    %28 = tensor.empty() : tensor<2x4x16x1xi1>
    %29 = linalg.fill ins(%true : i1) outs(%28 : tensor<2x4x16x1xi1>) -> tensor<2x4x16x1xi1>
    %30 = linalg.generic {indexing_maps = [#map3, #map5], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%27 : tensor<2x4x16x16xi1>) outs(%29 : tensor<2x4x16x1xi1>) {
    ^bb0(%in: i1, %out: i1):
      %92 = arith.andi %in, %out : i1
      linalg.yield %92 : i1
    } -> tensor<2x4x16x1xi1>
    %31 = linalg.generic {indexing_maps = [#map5, #map3, #map3, #map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%30, %cst_2, %25 : tensor<2x4x16x1xi1>, tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) outs(%10 : tensor<2x4x16x16xf32>) {
    ^bb0(%in: i1, %in_53: f32, %in_54: f32, %out: f32):
      %92 = arith.select %in, %in_53, %in_54 : f32
      linalg.yield %92 : f32
    } -> tensor<2x4x16x16xf32>
    %collapsed_40 = tensor.collapse_shape %31 [[0, 1], [2], [3]] : tensor<2x4x16x16xf32> into tensor<8x16x16xf32>
    %32 = linalg.batch_matmul ins(%collapsed_40, %transposed_32 : tensor<8x16x16xf32>, tensor<8x16x16xf32>) outs(%13 : tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
    %expanded_41 = tensor.expand_shape %32 [[0, 1], [2], [3]] output_shape [2, 4, 16, 16] : tensor<8x16x16xf32> into tensor<2x4x16x16xf32>
    %33 = tensor.empty() : tensor<16x2x4x16xf32>
    %transposed_42 = linalg.transpose ins(%expanded_41 : tensor<2x4x16x16xf32>) outs(%33 : tensor<16x2x4x16xf32>) permutation = [2, 0, 1, 3] 
    %collapsed_43 = tensor.collapse_shape %transposed_42 [[0, 1], [2, 3]] : tensor<16x2x4x16xf32> into tensor<32x64xf32>
    %34 = tensor.empty() : tensor<64x64xf32>
    %transposed_44 = linalg.transpose ins(%cst_13 : tensor<64x64xf32>) outs(%34 : tensor<64x64xf32>) permutation = [1, 0] 
    %35 = tensor.empty() : tensor<32x64xf32>
    %36 = linalg.fill ins(%cst : f32) outs(%35 : tensor<32x64xf32>) -> tensor<32x64xf32>
    %37 = linalg.matmul ins(%collapsed_43, %transposed_44 : tensor<32x64xf32>, tensor<64x64xf32>) outs(%36 : tensor<32x64xf32>) -> tensor<32x64xf32>
    %38 = linalg.generic {indexing_maps = [#map6, #map7], iterator_types = ["parallel", "parallel"]} ins(%cst_12 : tensor<64xf32>) outs(%35 : tensor<32x64xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<32x64xf32>
    %39 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel", "parallel"]} ins(%37, %38 : tensor<32x64xf32>, tensor<32x64xf32>) outs(%35 : tensor<32x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.addf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<32x64xf32>
    %expanded_45 = tensor.expand_shape %39 [[0, 1], [2]] output_shape [16, 2, 64] : tensor<32x64xf32> into tensor<16x2x64xf32>
    %40 = tensor.empty() : tensor<2x16x64xf32>
    %transposed_46 = linalg.transpose ins(%expanded_45 : tensor<16x2x64xf32>) outs(%40 : tensor<2x16x64xf32>) permutation = [1, 0, 2] 
    %41 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0, %transposed_46 : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%40 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.addf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x64xf32>
    %42 = tensor.empty() : tensor<2x16x64xf64>
    %43 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%41 : tensor<2x16x64xf32>) outs(%42 : tensor<2x16x64xf64>) {
    ^bb0(%in: f32, %out: f64):
      %92 = arith.extf %in : f32 to f64
      linalg.yield %92 : f64
    } -> tensor<2x16x64xf64>
    %44 = tensor.empty() : tensor<2x16x1xf64>
    %45 = linalg.fill ins(%cst_1 : f64) outs(%44 : tensor<2x16x1xf64>) -> tensor<2x16x1xf64>
    %46 = linalg.generic {indexing_maps = [#map1, #map8], iterator_types = ["parallel", "parallel", "reduction"]} ins(%43 : tensor<2x16x64xf64>) outs(%45 : tensor<2x16x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %92 = arith.addf %in, %out : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x1xf64>
    %47 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%46 : tensor<2x16x1xf64>) outs(%44 : tensor<2x16x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %92 = arith.divf %in, %cst_18 : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x1xf64>
    %48 = linalg.generic {indexing_maps = [#map1, #map8, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%43, %47 : tensor<2x16x64xf64>, tensor<2x16x1xf64>) outs(%42 : tensor<2x16x64xf64>) {
    ^bb0(%in: f64, %in_53: f64, %out: f64):
      %92 = arith.subf %in, %in_53 : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x64xf64>
    %49 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%48, %48 : tensor<2x16x64xf64>, tensor<2x16x64xf64>) outs(%42 : tensor<2x16x64xf64>) {
    ^bb0(%in: f64, %in_53: f64, %out: f64):
      %92 = arith.mulf %in, %in_53 : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x64xf64>
    %50 = linalg.generic {indexing_maps = [#map1, #map8], iterator_types = ["parallel", "parallel", "reduction"]} ins(%49 : tensor<2x16x64xf64>) outs(%45 : tensor<2x16x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %92 = arith.addf %in, %out : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x1xf64>
    %51 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%50 : tensor<2x16x1xf64>) outs(%44 : tensor<2x16x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %92 = arith.divf %in, %cst_18 : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x1xf64>
    %52 = tensor.empty() : tensor<2x16x1xf32>
    %53 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%51 : tensor<2x16x1xf64>) outs(%52 : tensor<2x16x1xf32>) {
    ^bb0(%in: f64, %out: f32):
      %92 = arith.truncf %in : f64 to f32
      linalg.yield %92 : f32
    } -> tensor<2x16x1xf32>
    %54 = linalg.fill ins(%cst : f32) outs(%52 : tensor<2x16x1xf32>) -> tensor<2x16x1xf32>
    %55 = linalg.generic {indexing_maps = [#map1, #map8], iterator_types = ["parallel", "parallel", "reduction"]} ins(%41 : tensor<2x16x64xf32>) outs(%54 : tensor<2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = arith.addf %in, %out : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x1xf32>
    %56 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%55 : tensor<2x16x1xf32>) outs(%52 : tensor<2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = arith.divf %in, %cst_19 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x1xf32>
    %57 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%53 : tensor<2x16x1xf32>) outs(%52 : tensor<2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = arith.truncf %cst_11 : f64 to f32
      %93 = arith.addf %in, %92 : f32
      linalg.yield %93 : f32
    } -> tensor<2x16x1xf32>
    %58 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%57 : tensor<2x16x1xf32>) outs(%52 : tensor<2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = math.rsqrt %in : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x1xf32>
    %59 = linalg.generic {indexing_maps = [#map1, #map8, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%41, %56 : tensor<2x16x64xf32>, tensor<2x16x1xf32>) outs(%40 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.subf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x64xf32>
    %60 = linalg.generic {indexing_maps = [#map1, #map8, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%59, %58 : tensor<2x16x64xf32>, tensor<2x16x1xf32>) outs(%40 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.mulf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x64xf32>
    %61 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%60, %cst_10 : tensor<2x16x64xf32>, tensor<64xf32>) outs(%40 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.mulf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x64xf32>
    %62 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%61, %cst_9 : tensor<2x16x64xf32>, tensor<64xf32>) outs(%40 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.addf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x64xf32>
    %collapsed_47 = tensor.collapse_shape %62 [[0, 1], [2]] : tensor<2x16x64xf32> into tensor<32x64xf32>
    %63 = tensor.empty() : tensor<64x128xf32>
    %transposed_48 = linalg.transpose ins(%cst_8 : tensor<128x64xf32>) outs(%63 : tensor<64x128xf32>) permutation = [1, 0] 
    %64 = tensor.empty() : tensor<32x128xf32>
    %65 = linalg.fill ins(%cst : f32) outs(%64 : tensor<32x128xf32>) -> tensor<32x128xf32>
    %66 = linalg.matmul ins(%collapsed_47, %transposed_48 : tensor<32x64xf32>, tensor<64x128xf32>) outs(%65 : tensor<32x128xf32>) -> tensor<32x128xf32>
    %67 = linalg.generic {indexing_maps = [#map6, #map7], iterator_types = ["parallel", "parallel"]} ins(%cst_7 : tensor<128xf32>) outs(%64 : tensor<32x128xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<32x128xf32>
    %68 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel", "parallel"]} ins(%66, %67 : tensor<32x128xf32>, tensor<32x128xf32>) outs(%64 : tensor<32x128xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.addf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<32x128xf32>
    %expanded_49 = tensor.expand_shape %68 [[0, 1], [2]] output_shape [2, 16, 128] : tensor<32x128xf32> into tensor<2x16x128xf32>
    %69 = tensor.empty() : tensor<2x16x128xf32>
    %70 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expanded_49 : tensor<2x16x128xf32>) outs(%69 : tensor<2x16x128xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = arith.cmpf ugt, %in, %cst : f32
      %93 = arith.select %92, %in, %cst : f32
      linalg.yield %93 : f32
    } -> tensor<2x16x128xf32>
    %collapsed_50 = tensor.collapse_shape %70 [[0, 1], [2]] : tensor<2x16x128xf32> into tensor<32x128xf32>
    %71 = tensor.empty() : tensor<128x64xf32>
    %transposed_51 = linalg.transpose ins(%cst_6 : tensor<64x128xf32>) outs(%71 : tensor<128x64xf32>) permutation = [1, 0] 
    %72 = linalg.matmul ins(%collapsed_50, %transposed_51 : tensor<32x128xf32>, tensor<128x64xf32>) outs(%36 : tensor<32x64xf32>) -> tensor<32x64xf32>
    %73 = linalg.generic {indexing_maps = [#map6, #map7], iterator_types = ["parallel", "parallel"]} ins(%cst_5 : tensor<64xf32>) outs(%35 : tensor<32x64xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<32x64xf32>
    %74 = linalg.generic {indexing_maps = [#map7, #map7, #map7], iterator_types = ["parallel", "parallel"]} ins(%72, %73 : tensor<32x64xf32>, tensor<32x64xf32>) outs(%35 : tensor<32x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.addf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<32x64xf32>
    %expanded_52 = tensor.expand_shape %74 [[0, 1], [2]] output_shape [2, 16, 64] : tensor<32x64xf32> into tensor<2x16x64xf32>
    %75 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%62, %expanded_52 : tensor<2x16x64xf32>, tensor<2x16x64xf32>) outs(%40 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.addf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x64xf32>
    %76 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%75 : tensor<2x16x64xf32>) outs(%42 : tensor<2x16x64xf64>) {
    ^bb0(%in: f32, %out: f64):
      %92 = arith.extf %in : f32 to f64
      linalg.yield %92 : f64
    } -> tensor<2x16x64xf64>
    %77 = linalg.generic {indexing_maps = [#map1, #map8], iterator_types = ["parallel", "parallel", "reduction"]} ins(%76 : tensor<2x16x64xf64>) outs(%45 : tensor<2x16x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %92 = arith.addf %in, %out : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x1xf64>
    %78 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%77 : tensor<2x16x1xf64>) outs(%44 : tensor<2x16x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %92 = arith.divf %in, %cst_18 : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x1xf64>
    %79 = linalg.generic {indexing_maps = [#map1, #map8, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%76, %78 : tensor<2x16x64xf64>, tensor<2x16x1xf64>) outs(%42 : tensor<2x16x64xf64>) {
    ^bb0(%in: f64, %in_53: f64, %out: f64):
      %92 = arith.subf %in, %in_53 : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x64xf64>
    %80 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%79, %79 : tensor<2x16x64xf64>, tensor<2x16x64xf64>) outs(%42 : tensor<2x16x64xf64>) {
    ^bb0(%in: f64, %in_53: f64, %out: f64):
      %92 = arith.mulf %in, %in_53 : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x64xf64>
    %81 = linalg.generic {indexing_maps = [#map1, #map8], iterator_types = ["parallel", "parallel", "reduction"]} ins(%80 : tensor<2x16x64xf64>) outs(%45 : tensor<2x16x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %92 = arith.addf %in, %out : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x1xf64>
    %82 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%81 : tensor<2x16x1xf64>) outs(%44 : tensor<2x16x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %92 = arith.divf %in, %cst_18 : f64
      linalg.yield %92 : f64
    } -> tensor<2x16x1xf64>
    %83 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%82 : tensor<2x16x1xf64>) outs(%52 : tensor<2x16x1xf32>) {
    ^bb0(%in: f64, %out: f32):
      %92 = arith.truncf %in : f64 to f32
      linalg.yield %92 : f32
    } -> tensor<2x16x1xf32>
    %84 = linalg.generic {indexing_maps = [#map1, #map8], iterator_types = ["parallel", "parallel", "reduction"]} ins(%75 : tensor<2x16x64xf32>) outs(%54 : tensor<2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = arith.addf %in, %out : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x1xf32>
    %85 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%84 : tensor<2x16x1xf32>) outs(%52 : tensor<2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = arith.divf %in, %cst_19 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x1xf32>
    %86 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%83 : tensor<2x16x1xf32>) outs(%52 : tensor<2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = arith.truncf %cst_11 : f64 to f32
      %93 = arith.addf %in, %92 : f32
      linalg.yield %93 : f32
    } -> tensor<2x16x1xf32>
    %87 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%86 : tensor<2x16x1xf32>) outs(%52 : tensor<2x16x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %92 = math.rsqrt %in : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x1xf32>
    %88 = linalg.generic {indexing_maps = [#map1, #map8, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%75, %85 : tensor<2x16x64xf32>, tensor<2x16x1xf32>) outs(%40 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.subf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x64xf32>
    %89 = linalg.generic {indexing_maps = [#map1, #map8, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%88, %87 : tensor<2x16x64xf32>, tensor<2x16x1xf32>) outs(%40 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.mulf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x64xf32>
    %90 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%89, %cst_4 : tensor<2x16x64xf32>, tensor<64xf32>) outs(%40 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.mulf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x64xf32>
    %91 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%90, %cst_3 : tensor<2x16x64xf32>, tensor<64xf32>) outs(%40 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %in_53: f32, %out: f32):
      %92 = arith.addf %in, %in_53 : f32
      linalg.yield %92 : f32
    } -> tensor<2x16x64xf32>
    return %91 : tensor<2x16x64xf32>
  }
}

