// torch-mlir torch_mlir.fx export of test/embedding/test_autocast_iree.py's cnn (linalg), weights elided:
// test_autocast_iree.py --write-fixtures
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d1, 0, 0)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#map4 = affine_map<(d0, d1) -> (d0, d1)>
#map5 = affine_map<(d0, d1) -> (d1)>
#map6 = affine_map<(d0, d1) -> (d0)>
#map7 = affine_map<(d0, d1) -> (d0, 0)>
module {
  func.func @main(%arg0: tensor<2x3x16x16xf32>) -> tensor<2x10xf32> {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0xFF800000 : f32
    %cst_1 = arith.constant dense_resource<torch_tensor_10_torch.float32> : tensor<10xf32>
    %cst_2 = arith.constant dense_resource<torch_tensor_10_16_torch.float32> : tensor<10x16xf32>
    %cst_3 = arith.constant dense_resource<torch_tensor_16_torch.float32> : tensor<16xf32>
    %cst_4 = arith.constant dense_resource<torch_tensor_16_8_3_3_torch.float32> : tensor<16x8x3x3xf32>
    %cst_5 = arith.constant dense_resource<torch_tensor_8_torch.float32_4> : tensor<8xf32>
    %cst_6 = arith.constant dense_resource<torch_tensor_8_torch.float32_3> : tensor<8xf32>
    %cst_7 = arith.constant 1.000000e-05 : f64
    %cst_8 = arith.constant dense_resource<torch_tensor_8_torch.float32_2> : tensor<8xf32>
    %cst_9 = arith.constant dense_resource<torch_tensor_8_torch.float32_1> : tensor<8xf32>
    %cst_10 = arith.constant dense_resource<torch_tensor_8_3_3_3_torch.float32> : tensor<8x3x3x3xf32>
    %cst_11 = arith.constant dense_resource<torch_tensor_8_torch.float32> : tensor<8xf32>
    %cst_12 = arith.constant 6.400000e+01 : f32
    %padded = tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%arg1: index, %arg2: index, %arg3: index, %arg4: index):
      tensor.yield %cst : f32
    } : tensor<2x3x16x16xf32> to tensor<2x3x18x18xf32>
    %0 = tensor.empty() : tensor<2x8x16x16xf32>
    %broadcasted = linalg.broadcast ins(%cst_11 : tensor<8xf32>) outs(%0 : tensor<2x8x16x16xf32>) dimensions = [0, 2, 3] 
    %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%padded, %cst_10 : tensor<2x3x18x18xf32>, tensor<8x3x3x3xf32>) outs(%broadcasted : tensor<2x8x16x16xf32>) -> tensor<2x8x16x16xf32>
    %2 = tensor.empty() : tensor<8xf32>
    %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%cst_8 : tensor<8xf32>) outs(%2 : tensor<8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %35 = arith.truncf %cst_7 : f64 to f32
      %36 = arith.addf %in, %35 : f32
      linalg.yield %36 : f32
    } -> tensor<8xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%3 : tensor<8xf32>) outs(%2 : tensor<8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %35 = math.rsqrt %in : f32
      linalg.yield %35 : f32
    } -> tensor<8xf32>
    %expanded = tensor.expand_shape %cst_9 [[0, 1, 2]] output_shape [8, 1, 1] : tensor<8xf32> into tensor<8x1x1xf32>
    %expanded_13 = tensor.expand_shape %4 [[0, 1, 2]] output_shape [8, 1, 1] : tensor<8xf32> into tensor<8x1x1xf32>
    %5 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1, %expanded : tensor<2x8x16x16xf32>, tensor<8x1x1xf32>) outs(%0 : tensor<2x8x16x16xf32>) {
    ^bb0(%in: f32, %in_19: f32, %out: f32):
      %35 = arith.subf %in, %in_19 : f32
      linalg.yield %35 : f32
    } -> tensor<2x8x16x16xf32>
    %6 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%5, %expanded_13 : tensor<2x8x16x16xf32>, tensor<8x1x1xf32>) outs(%0 : tensor<2x8x16x16xf32>) {
    ^bb0(%in: f32, %in_19: f32, %out: f32):
      %35 = arith.mulf %in, %in_19 : f32
      linalg.yield %35 : f32
    } -> tensor<2x8x16x16xf32>
    %expanded_14 = tensor.expand_shape %cst_6 [[0, 1, 2]] output_shape [8, 1, 1] : tensor<8xf32> into tensor<8x1x1xf32>
    %7 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%6, %expanded_14 : tensor<2x8x16x16xf32>, tensor<8x1x1xf32>) outs(%0 : tensor<2x8x16x16xf32>) {
    ^bb0(%in: f32, %in_19: f32, %out: f32):
      %35 = arith.mulf %in, %in_19 : f32
      linalg.yield %35 : f32
    } -> tensor<2x8x16x16xf32>
    %expanded_15 = tensor.expand_shape %cst_5 [[0, 1, 2]] output_shape [8, 1, 1] : tensor<8xf32> into tensor<8x1x1xf32>
    %8 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%7, %expanded_15 : tensor<2x8x16x16xf32>, tensor<8x1x1xf32>) outs(%0 : tensor<2x8x16x16xf32>) {
    ^bb0(%in: f32, %in_19: f32, %out: f32):
      %35 = arith.addf %in, %in_19 : f32
      linalg.yield %35 : f32
    } -> tensor<2x8x16x16xf32>
    %9 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%8 : tensor<2x8x16x16xf32>) outs(%0 : tensor<2x8x16x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %35 = arith.cmpf ugt, %in, %cst : f32
      %36 = arith.select %35, %in, %cst : f32
      linalg.yield %36 : f32
    } -> tensor<2x8x16x16xf32>
    %padded_16 = tensor.pad %9 low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%arg1: index, %arg2: index, %arg3: index, %arg4: index):
      tensor.yield %cst : f32
    } : tensor<2x8x16x16xf32> to tensor<2x8x18x18xf32>
    %10 = tensor.empty() : tensor<2x16x8x8xf32>
    %broadcasted_17 = linalg.broadcast ins(%cst_3 : tensor<16xf32>) outs(%10 : tensor<2x16x8x8xf32>) dimensions = [0, 2, 3] 
    %11 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%padded_16, %cst_4 : tensor<2x8x18x18xf32>, tensor<16x8x3x3xf32>) outs(%broadcasted_17 : tensor<2x16x8x8xf32>) -> tensor<2x16x8x8xf32>
    %12 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%11 : tensor<2x16x8x8xf32>) outs(%10 : tensor<2x16x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %35 = arith.cmpf ugt, %in, %cst : f32
      %36 = arith.select %35, %in, %cst : f32
      linalg.yield %36 : f32
    } -> tensor<2x16x8x8xf32>
    %13 = tensor.empty() : tensor<2x16xf32>
    %14 = linalg.fill ins(%cst : f32) outs(%13 : tensor<2x16xf32>) -> tensor<2x16xf32>
    %15 = linalg.generic {indexing_maps = [#map1, #map3], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%12 : tensor<2x16x8x8xf32>) outs(%14 : tensor<2x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %35 = arith.addf %in, %out : f32
      linalg.yield %35 : f32
    } -> tensor<2x16xf32>
    %16 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%15 : tensor<2x16xf32>) outs(%13 : tensor<2x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %35 = arith.divf %in, %cst_12 : f32
      linalg.yield %35 : f32
    } -> tensor<2x16xf32>
    %17 = tensor.empty() : tensor<16x10xf32>
    %transposed = linalg.transpose ins(%cst_2 : tensor<10x16xf32>) outs(%17 : tensor<16x10xf32>) permutation = [1, 0] 
    %18 = tensor.empty() : tensor<2x10xf32>
    %19 = linalg.fill ins(%cst : f32) outs(%18 : tensor<2x10xf32>) -> tensor<2x10xf32>
    %20 = linalg.matmul ins(%16, %transposed : tensor<2x16xf32>, tensor<16x10xf32>) outs(%19 : tensor<2x10xf32>) -> tensor<2x10xf32>
    %21 = linalg.generic {indexing_maps = [#map5, #map4], iterator_types = ["parallel", "parallel"]} ins(%cst_1 : tensor<10xf32>) outs(%18 : tensor<2x10xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<2x10xf32>
    %22 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%20, %21 : tensor<2x10xf32>, tensor<2x10xf32>) outs(%18 : tensor<2x10xf32>) {
    ^bb0(%in: f32, %in_19: f32, %out: f32):
      %35 = arith.addf %in, %in_19 : f32
      linalg.yield %35 : f32
    } -> tensor<2x10xf32>
    %23 = tensor.empty() : tensor<2xi64>
    %24 = linalg.fill ins(%c0_i64 : i64) outs(%23 : tensor<2xi64>) -> tensor<2xi64>
    %25 = tensor.empty() : tensor<2xf32>
    %26 = linalg.fill ins(%cst_0 : f32) outs(%25 : tensor<2xf32>) -> tensor<2xf32>
    %27:2 = linalg.generic {indexing_maps = [#map4, #map6, #map6], iterator_types = ["parallel", "reduction"]} ins(%22 : tensor<2x10xf32>) outs(%26, %24 : tensor<2xf32>, tensor<2xi64>) {
    ^bb0(%in: f32, %out: f32, %out_19: i64):
      %35 = linalg.index 1 : index
      %36 = arith.index_cast %35 : index to i64
      %37 = arith.maximumf %in, %out : f32
      %38 = arith.cmpf ogt, %in, %out : f32
      %39 = arith.select %38, %36, %out_19 : i64
      linalg.yield %37, %39 : f32, i64
    } -> (tensor<2xf32>, tensor<2xi64>)
    %expanded_18 = tensor.expand_shape %27#0 [[0, 1]] output_shape [2, 1] : tensor<2xf32> into tensor<2x1xf32>
    %28 = linalg.generic {indexing_maps = [#map4, #map7, #map4], iterator_types = ["parallel", "parallel"]} ins(%22, %expanded_18 : tensor<2x10xf32>, tensor<2x1xf32>) outs(%18 : tensor<2x10xf32>) {
    ^bb0(%in: f32, %in_19: f32, %out: f32):
      %35 = arith.subf %in, %in_19 : f32
      linalg.yield %35 : f32
    } -> tensor<2x10xf32>
    %29 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%28 : tensor<2x10xf32>) outs(%18 : tensor<2x10xf32>) {
    ^bb0(%in: f32, %out: f32):
      %35 = math.exp %in : f32
      linalg.yield %35 : f32
    } -> tensor<2x10xf32>
    %30 = tensor.empty() : tensor<2x1xf32>
    %31 = linalg.fill ins(%cst : f32) outs(%30 : tensor<2x1xf32>) -> tensor<2x1xf32>
    %32 = linalg.generic {indexing_maps = [#map4, #map7], iterator_types = ["parallel", "reduction"]} ins(%29 : tensor<2x10xf32>) outs(%31 : tensor<2x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %35 = arith.addf %in, %out : f32
      linalg.yield %35 : f32
    } -> tensor<2x1xf32>
    %33 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%32 : tensor<2x1xf32>) outs(%30 : tensor<2x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %35 = math.log %in : f32
      linalg.yield %35 : f32
    } -> tensor<2x1xf32>
    %34 = linalg.generic {indexing_maps = [#map4, #map7, #map4], iterator_types = ["parallel", "parallel"]} ins(%28, %33 : tensor<2x10xf32>, tensor<2x1xf32>) outs(%18 : tensor<2x10xf32>) {
    ^bb0(%in: f32, %in_19: f32, %out: f32):
      %35 = arith.subf %in, %in_19 : f32
      linalg.yield %35 : f32
    } -> tensor<2x10xf32>
    return %34 : tensor<2x10xf32>
  }
}

