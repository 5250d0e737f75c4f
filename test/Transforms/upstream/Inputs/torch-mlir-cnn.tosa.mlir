// torch-mlir torch_mlir.fx export of test/embedding/test_autocast_iree.py's cnn (tosa), weights elided:
// test_autocast_iree.py --write-fixtures
"builtin.module"() ({
  "func.func"() <{function_type = (tensor<2x3x16x16xf32>) -> tensor<2x10xf32>, sym_name = "main"}> ({
  ^bb0(%arg0: tensor<2x3x16x16xf32>):
    %0 = "tosa.const"() <{values = dense_resource<torch_tensor_16_torch.float32> : tensor<16xf32>}> : () -> tensor<16xf32>
    %1 = "tosa.const"() <{values = dense_resource<torch_tensor_8_torch.float32_2> : tensor<8xf32>}> : () -> tensor<8xf32>
    %2 = "tosa.const"() <{values = dense_resource<torch_tensor_8_torch.float32> : tensor<8xf32>}> : () -> tensor<8xf32>
    %3 = "tosa.const"() <{values = dense<0.000000e+00> : tensor<1xf32>}> : () -> tensor<1xf32>
    %4 = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
    %5 = "tosa.const_shape"() <{values = dense<[1, 8, 1, 1]> : tensor<4xindex>}> : () -> !tosa.shape<4>
    %6 = "tosa.const_shape"() <{values = dense<[2, 16]> : tensor<2xindex>}> : () -> !tosa.shape<2>
    %7 = "tosa.const_shape"() <{values = dense<[1, 2, 16]> : tensor<3xindex>}> : () -> !tosa.shape<3>
    %8 = "tosa.const_shape"() <{values = dense<[2, 10]> : tensor<2xindex>}> : () -> !tosa.shape<2>
    %9 = "tosa.const"() <{values = dense_resource<__elided__> : tensor<8x3x3x3xf32>}> : () -> tensor<8x3x3x3xf32>
    %10 = "tosa.const"() <{values = dense<9.99999974E-6> : tensor<1xf32>}> : () -> tensor<1xf32>
    %11 = "tosa.const"() <{values = dense_resource<torch_tensor_8_torch.float32_1> : tensor<1x8x1x1xf32>}> : () -> tensor<1x8x1x1xf32>
    %12 = "tosa.const"() <{values = dense_resource<torch_tensor_8_torch.float32_3> : tensor<1x8x1x1xf32>}> : () -> tensor<1x8x1x1xf32>
    %13 = "tosa.const"() <{values = dense_resource<torch_tensor_8_torch.float32_4> : tensor<1x8x1x1xf32>}> : () -> tensor<1x8x1x1xf32>
    %14 = "tosa.const"() <{values = dense_resource<__elided__> : tensor<16x3x3x8xf32>}> : () -> tensor<16x3x3x8xf32>
    %15 = "tosa.const"() <{values = dense<1.562500e-02> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>
    %16 = "tosa.const"() <{values = dense_resource<__elided__> : tensor<1x16x10xf32>}> : () -> tensor<1x16x10xf32>
    %17 = "tosa.const"() <{values = dense_resource<torch_tensor_10_torch.float32> : tensor<1x10xf32>}> : () -> tensor<1x10xf32>
    %18 = "tosa.transpose"(%arg0) <{perms = array<i32: 0, 2, 3, 1>}> : (tensor<2x3x16x16xf32>) -> tensor<2x16x16x3xf32>
    %19 = "tosa.conv2d"(%18, %9, %2, %3, %3) <{acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>}> : (tensor<2x16x16x3xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x16x8xf32>
    %20 = "tosa.transpose"(%19) <{perms = array<i32: 0, 3, 1, 2>}> : (tensor<2x16x16x8xf32>) -> tensor<2x8x16x16xf32>
    %21 = "tosa.add"(%10, %1) : (tensor<1xf32>, tensor<8xf32>) -> tensor<8xf32>
    %22 = "tosa.rsqrt"(%21) : (tensor<8xf32>) -> tensor<8xf32>
    %23 = "tosa.sub"(%20, %11) : (tensor<2x8x16x16xf32>, tensor<1x8x1x1xf32>) -> tensor<2x8x16x16xf32>
    %24 = "tosa.reshape"(%22, %5) : (tensor<8xf32>, !tosa.shape<4>) -> tensor<1x8x1x1xf32>
    %25 = "tosa.mul"(%23, %24, %4) : (tensor<2x8x16x16xf32>, tensor<1x8x1x1xf32>, tensor<1xi8>) -> tensor<2x8x16x16xf32>
    %26 = "tosa.mul"(%25, %12, %4) : (tensor<2x8x16x16xf32>, tensor<1x8x1x1xf32>, tensor<1xi8>) -> tensor<2x8x16x16xf32>
    %27 = "tosa.add"(%26, %13) : (tensor<2x8x16x16xf32>, tensor<1x8x1x1xf32>) -> tensor<2x8x16x16xf32>
    %28 = "tosa.clamp"(%27) <{max_val = 3.40282347E+38 : f32, min_val = 0.000000e+00 : f32, nan_mode = #tosa.nan_mode<PROPAGATE>}> : (tensor<2x8x16x16xf32>) -> tensor<2x8x16x16xf32>
    %29 = "tosa.transpose"(%28) <{perms = array<i32: 0, 2, 3, 1>}> : (tensor<2x8x16x16xf32>) -> tensor<2x16x16x8xf32>
    %30 = "tosa.conv2d"(%29, %14, %0, %3, %3) <{acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 0, 1, 0>, stride = array<i64: 2, 2>}> : (tensor<2x16x16x8xf32>, tensor<16x3x3x8xf32>, tensor<16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x8x8x16xf32>
    %31 = "tosa.transpose"(%30) <{perms = array<i32: 0, 3, 1, 2>}> : (tensor<2x8x8x16xf32>) -> tensor<2x16x8x8xf32>
    %32 = "tosa.clamp"(%31) <{max_val = 3.40282347E+38 : f32, min_val = 0.000000e+00 : f32, nan_mode = #tosa.nan_mode<PROPAGATE>}> : (tensor<2x16x8x8xf32>) -> tensor<2x16x8x8xf32>
    %33 = "tosa.reduce_sum"(%32) <{axis = 2 : i32}> : (tensor<2x16x8x8xf32>) -> tensor<2x16x1x8xf32>
    %34 = "tosa.reduce_sum"(%33) <{axis = 3 : i32}> : (tensor<2x16x1x8xf32>) -> tensor<2x16x1x1xf32>
    %35 = "tosa.reshape"(%34, %6) : (tensor<2x16x1x1xf32>, !tosa.shape<2>) -> tensor<2x16xf32>
    %36 = "tosa.mul"(%35, %15, %4) : (tensor<2x16xf32>, tensor<1x1xf32>, tensor<1xi8>) -> tensor<2x16xf32>
    %37 = "tosa.reshape"(%36, %7) : (tensor<2x16xf32>, !tosa.shape<3>) -> tensor<1x2x16xf32>
    %38 = "tosa.matmul"(%37, %16, %3, %3) : (tensor<1x2x16xf32>, tensor<1x16x10xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x10xf32>
    %39 = "tosa.reshape"(%38, %8) : (tensor<1x2x10xf32>, !tosa.shape<2>) -> tensor<2x10xf32>
    %40 = "tosa.add"(%39, %17) : (tensor<2x10xf32>, tensor<1x10xf32>) -> tensor<2x10xf32>
    %41 = "tosa.reduce_max"(%40) <{axis = 1 : i32, nan_mode = #tosa.nan_mode<PROPAGATE>}> : (tensor<2x10xf32>) -> tensor<2x1xf32>
    %42 = "tosa.sub"(%40, %41) : (tensor<2x10xf32>, tensor<2x1xf32>) -> tensor<2x10xf32>
    %43 = "tosa.exp"(%42) : (tensor<2x10xf32>) -> tensor<2x10xf32>
    %44 = "tosa.reduce_sum"(%43) <{axis = 1 : i32}> : (tensor<2x10xf32>) -> tensor<2x1xf32>
    %45 = "tosa.log"(%44) : (tensor<2x1xf32>) -> tensor<2x1xf32>
    %46 = "tosa.sub"(%42, %45) : (tensor<2x10xf32>, tensor<2x1xf32>) -> tensor<2x10xf32>
    "func.return"(%46) : (tensor<2x10xf32>) -> ()
  }) : () -> ()
}) : () -> ()

