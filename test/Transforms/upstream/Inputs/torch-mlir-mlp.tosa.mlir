// torch-mlir torch_mlir.fx export of test/embedding/test_autocast_iree.py's mlp (tosa), weights elided:
// test_autocast_iree.py --write-fixtures
"builtin.module"() ({
  "func.func"() <{function_type = (tensor<8x64xf32>) -> tensor<8x10xf32>, sym_name = "main"}> ({
  ^bb0(%arg0: tensor<8x64xf32>):
    %0 = "tosa.const"() <{values = dense<0.000000e+00> : tensor<1xf32>}> : () -> tensor<1xf32>
    %1 = "tosa.const_shape"() <{values = dense<[1, 8, 64]> : tensor<3xindex>}> : () -> !tosa.shape<3>
    %2 = "tosa.const_shape"() <{values = dense<[8, 128]> : tensor<2xindex>}> : () -> !tosa.shape<2>
    %3 = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
    %4 = "tosa.const_shape"() <{values = dense<[1, 8, 128]> : tensor<3xindex>}> : () -> !tosa.shape<3>
    %5 = "tosa.const_shape"() <{values = dense<[8, 10]> : tensor<2xindex>}> : () -> !tosa.shape<2>
    %6 = "tosa.const"() <{values = dense_resource<__elided__> : tensor<1x64x128xf32>}> : () -> tensor<1x64x128xf32>
    %7 = "tosa.const"() <{values = dense_resource<torch_tensor_128_torch.float32> : tensor<1x128xf32>}> : () -> tensor<1x128xf32>
    %8 = "tosa.const"() <{values = dense<1.000000e+00> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
    %9 = "tosa.const"() <{values = dense<5.000000e-01> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
    %10 = "tosa.const"() <{values = dense<0.707106769> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
    %11 = "tosa.const"() <{values = dense_resource<__elided__> : tensor<1x128x10xf32>}> : () -> tensor<1x128x10xf32>
    %12 = "tosa.const"() <{values = dense_resource<torch_tensor_10_torch.float32> : tensor<1x10xf32>}> : () -> tensor<1x10xf32>
    %13 = "tosa.reshape"(%arg0, %1) : (tensor<8x64xf32>, !tosa.shape<3>) -> tensor<1x8x64xf32>
    %14 = "tosa.matmul"(%13, %6, %0, %0) : (tensor<1x8x64xf32>, tensor<1x64x128xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x8x128xf32>
    %15 = "tosa.reshape"(%14, %2) : (tensor<1x8x128xf32>, !tosa.shape<2>) -> tensor<8x128xf32>
    %16 = "tosa.add"(%15, %7) : (tensor<8x128xf32>, tensor<1x128xf32>) -> tensor<8x128xf32>
    %17 = "tosa.mul"(%16, %10, %3) : (tensor<8x128xf32>, tensor<1x1xf32>, tensor<1xi8>) -> tensor<8x128xf32>
    %18 = "tosa.erf"(%17) : (tensor<8x128xf32>) -> tensor<8x128xf32>
    %19 = "tosa.add"(%18, %8) : (tensor<8x128xf32>, tensor<1x1xf32>) -> tensor<8x128xf32>
    %20 = "tosa.mul"(%9, %19, %3) : (tensor<1x1xf32>, tensor<8x128xf32>, tensor<1xi8>) -> tensor<8x128xf32>
    %21 = "tosa.mul"(%16, %20, %3) : (tensor<8x128xf32>, tensor<8x128xf32>, tensor<1xi8>) -> tensor<8x128xf32>
    %22 = "tosa.reshape"(%21, %4) : (tensor<8x128xf32>, !tosa.shape<3>) -> tensor<1x8x128xf32>
    %23 = "tosa.matmul"(%22, %11, %0, %0) : (tensor<1x8x128xf32>, tensor<1x128x10xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x8x10xf32>
    %24 = "tosa.reshape"(%23, %5) : (tensor<1x8x10xf32>, !tosa.shape<2>) -> tensor<8x10xf32>
    %25 = "tosa.add"(%24, %12) : (tensor<8x10xf32>, tensor<1x10xf32>) -> tensor<8x10xf32>
    %26 = "tosa.reduce_max"(%25) <{axis = 1 : i32, nan_mode = #tosa.nan_mode<PROPAGATE>}> : (tensor<8x10xf32>) -> tensor<8x1xf32>
    %27 = "tosa.sub"(%25, %26) : (tensor<8x10xf32>, tensor<8x1xf32>) -> tensor<8x10xf32>
    %28 = "tosa.exp"(%27) : (tensor<8x10xf32>) -> tensor<8x10xf32>
    %29 = "tosa.reduce_sum"(%28) <{axis = 1 : i32}> : (tensor<8x10xf32>) -> tensor<8x1xf32>
    %30 = "tosa.reciprocal"(%29) : (tensor<8x1xf32>) -> tensor<8x1xf32>
    %31 = "tosa.mul"(%28, %30, %3) : (tensor<8x10xf32>, tensor<8x1xf32>, tensor<1xi8>) -> tensor<8x10xf32>
    "func.return"(%31) : (tensor<8x10xf32>) -> ()
  }) : () -> ()
}) : () -> ()

