// torch-mlir torch_mlir.fx export of test/embedding/test_autocast_iree.py's mlp (linalg), weights elided:
// test_autocast_iree.py --write-fixtures
#map = affine_map<(d0, d1) -> (d1)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
module {
  func.func @main(%arg0: tensor<8x64xf32>) -> tensor<8x10xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %c0_i64 = arith.constant 0 : i64
    %cst_0 = arith.constant 1.000000e+00 : f32
    %cst_1 = arith.constant 5.000000e-01 : f32
    %cst_2 = arith.constant 0xFF800000 : f32
    %cst_3 = arith.constant dense_resource<torch_tensor_10_torch.float32> : tensor<10xf32>
    %cst_4 = arith.constant dense_resource<torch_tensor_10_128_torch.float32> : tensor<10x128xf32>
    %cst_5 = arith.constant dense_resource<torch_tensor_128_torch.float32> : tensor<128xf32>
    %cst_6 = arith.constant dense_resource<torch_tensor_128_64_torch.float32> : tensor<128x64xf32>
    %cst_7 = arith.constant 1.41421354 : f32
    %0 = tensor.empty() : tensor<64x128xf32>
    %transposed = linalg.transpose ins(%cst_6 : tensor<128x64xf32>) outs(%0 : tensor<64x128xf32>) permutation = [1, 0] 
    %1 = tensor.empty() : tensor<8x128xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<8x128xf32>) -> tensor<8x128xf32>
    %3 = linalg.matmul ins(%arg0, %transposed : tensor<8x64xf32>, tensor<64x128xf32>) outs(%2 : tensor<8x128xf32>) -> tensor<8x128xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%cst_5 : tensor<128xf32>) outs(%1 : tensor<8x128xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<8x128xf32>
    %5 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%3, %4 : tensor<8x128xf32>, tensor<8x128xf32>) outs(%1 : tensor<8x128xf32>) {
    ^bb0(%in: f32, %in_9: f32, %out: f32):
      %24 = arith.addf %in, %in_9 : f32
      linalg.yield %24 : f32
    } -> tensor<8x128xf32>
    %6 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<8x128xf32>) outs(%1 : tensor<8x128xf32>) {
    ^bb0(%in: f32, %out: f32):
      %24 = arith.divf %in, %cst_7 : f32
      %25 = math.erf %24 : f32
      %26 = arith.addf %25, %cst_0 : f32
      %27 = arith.mulf %26, %cst_1 : f32
      %28 = arith.mulf %in, %27 : f32
      linalg.yield %28 : f32
    } -> tensor<8x128xf32>
    %7 = tensor.empty() : tensor<128x10xf32>
    %transposed_8 = linalg.transpose ins(%cst_4 : tensor<10x128xf32>) outs(%7 : tensor<128x10xf32>) permutation = [1, 0] 
    %8 = tensor.empty() : tensor<8x10xf32>
    %9 = linalg.fill ins(%cst : f32) outs(%8 : tensor<8x10xf32>) -> tensor<8x10xf32>
    %10 = linalg.matmul ins(%6, %transposed_8 : tensor<8x128xf32>, tensor<128x10xf32>) outs(%9 : tensor<8x10xf32>) -> tensor<8x10xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%cst_3 : tensor<10xf32>) outs(%8 : tensor<8x10xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<8x10xf32>
    %12 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%10, %11 : tensor<8x10xf32>, tensor<8x10xf32>) outs(%8 : tensor<8x10xf32>) {
    ^bb0(%in: f32, %in_9: f32, %out: f32):
      %24 = arith.addf %in, %in_9 : f32
      linalg.yield %24 : f32
    } -> tensor<8x10xf32>
    %13 = tensor.empty() : tensor<8xi64>
    %14 = linalg.fill ins(%c0_i64 : i64) outs(%13 : tensor<8xi64>) -> tensor<8xi64>
    %15 = tensor.empty() : tensor<8xf32>
    %16 = linalg.fill ins(%cst_2 : f32) outs(%15 : tensor<8xf32>) -> tensor<8xf32>
    %17:2 = linalg.generic {indexing_maps = [#map1, #map2, #map2], iterator_types = ["parallel", "reduction"]} ins(%12 : tensor<8x10xf32>) outs(%16, %14 : tensor<8xf32>, tensor<8xi64>) {
    ^bb0(%in: f32, %out: f32, %out_9: i64):
      %24 = linalg.index 1 : index
      %25 = arith.index_cast %24 : index to i64
      %26 = arith.maximumf %in, %out : f32
      %27 = arith.cmpf ogt, %in, %out : f32
      %28 = arith.select %27, %25, %out_9 : i64
      linalg.yield %26, %28 : f32, i64
    } -> (tensor<8xf32>, tensor<8xi64>)
    %expanded = tensor.expand_shape %17#0 [[0, 1]] output_shape [8, 1] : tensor<8xf32> into tensor<8x1xf32>
    %18 = linalg.generic {indexing_maps = [#map1, #map3, #map1], iterator_types = ["parallel", "parallel"]} ins(%12, %expanded : tensor<8x10xf32>, tensor<8x1xf32>) outs(%8 : tensor<8x10xf32>) {
    ^bb0(%in: f32, %in_9: f32, %out: f32):
      %24 = arith.subf %in, %in_9 : f32
      linalg.yield %24 : f32
    } -> tensor<8x10xf32>
    %19 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%18 : tensor<8x10xf32>) outs(%8 : tensor<8x10xf32>) {
    ^bb0(%in: f32, %out: f32):
      %24 = math.exp %in : f32
      linalg.yield %24 : f32
    } -> tensor<8x10xf32>
    %20 = tensor.empty() : tensor<8x1xf32>
    %21 = linalg.fill ins(%cst : f32) outs(%20 : tensor<8x1xf32>) -> tensor<8x1xf32>
    %22 = linalg.generic {indexing_maps = [#map1, #map3], iterator_types = ["parallel", "reduction"]} ins(%19 : tensor<8x10xf32>) outs(%21 : tensor<8x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %24 = arith.addf %in, %out : f32
      linalg.yield %24 : f32
    } -> tensor<8x1xf32>
    %23 = linalg.generic {indexing_maps = [#map1, #map3, #map1], iterator_types = ["parallel", "parallel"]} ins(%19, %22 : tensor<8x10xf32>, tensor<8x1xf32>) outs(%8 : tensor<8x10xf32>) {
    ^bb0(%in: f32, %in_9: f32, %out: f32):
      %24 = arith.divf %in, %in_9 : f32
      linalg.yield %24 : f32
    } -> tensor<8x10xf32>
    return %23 : tensor<8x10xf32>
  }
}

