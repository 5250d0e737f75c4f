// amp-autocast: constants that the target type cannot hold are not weak.
// A causal mask built from constants alone (transformers' Where(causal, 0,
// finfo(f32).min)) would become -inf in f16 / bf16 and, added to the scores
// in the low type, make softmax rows NaN; PyTorch's type promotion keeps the
// f32 mask and the Add reading it in f32. Constants that fit stay weak.
// RUN: amp-opt %s -split-input-file -amp-autocast | FileCheck %s
// RUN: amp-opt %s -split-input-file -amp-autocast=target=bf16 | FileCheck %s --check-prefix=BF16
// RUN: amp-opt %s "-amp-autocast=target=bf16 why=add_mask" -o /dev/null 2>&1 | FileCheck %s --check-prefix=WHY

// CHECK-LABEL: func @causal_mask
// CHECK: %[[LOW:.+]] = arith.constant dense<-3.40282347E+38> : tensor<f32>
// CHECK: %[[S:.+]] = amp.matmul {{.*}} -> tensor<1x4x4xf16>
// CHECK-DAG: %[[M:.+]] = amp.where %{{.+}}, %{{.+}}, %[[LOW]] : (tensor<1x4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<1x4x4xf32>
// CHECK-DAG: %[[SW:.+]] = amp.cast %[[S]] : tensor<1x4x4xf16> to tensor<1x4x4xf32>
// CHECK: %[[A:.+]] = amp.add %[[SW]], %[[M]] : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x4xf32>
// CHECK: amp.softmax %[[A]] : tensor<1x4x4xf32>
// BF16-LABEL: func @causal_mask
// BF16: amp.where {{.*}} -> tensor<1x4x4xf32>
// BF16: amp.add {{.*}} : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x4xf32>
// WHY: remark: amp-autocast: node 'add_mask' (amp.add): follow -> f32: {{.*}}input from 'where_mask' (from 'min' (holds -3.40282347e+38, which bf16 cannot hold)) is f32
func.func @causal_mask(%w: tensor<4x4xf32> {amp.param = "w"}, %q: tensor<1x4x4xf32> {amp.input = "q"}, %c: tensor<1x4x4xi1> {amp.input = "causal"}) -> tensor<1x4x4xf32> {
  %zero = arith.constant dense<0.0> : tensor<f32> loc("zero")
  %min = arith.constant dense<-3.40282347E+38> : tensor<f32> loc("min")
  %s = amp.matmul %q, %w : (tensor<1x4x4xf32>, tensor<4x4xf32>) -> tensor<1x4x4xf32> loc("scores")
  %m = amp.where %c, %zero, %min : (tensor<1x4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<1x4x4xf32> loc("where_mask")
  %a = amp.add %s, %m : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> tensor<1x4x4xf32> loc("add_mask")
  %p = amp.softmax %a : tensor<1x4x4xf32> loc("softmax")
  return %p : tensor<1x4x4xf32>
}

// -----

// A folded mask tensor with -inf entries (nn.Transformer's square
// subsequent mask) forces f32 too; a scale of 0.125 fits and stays weak.
// CHECK-LABEL: func @inf_mask_and_scale
// CHECK: %[[S:.+]] = amp.matmul {{.*}} -> tensor<2x2xf16>
// CHECK: %[[SC:.+]] = amp.mul %[[S]], %{{.+}} : (tensor<2x2xf16>, tensor<f16>) -> tensor<2x2xf16>
// CHECK: %[[W:.+]] = amp.cast %[[SC]] : tensor<2x2xf16> to tensor<2x2xf32>
// CHECK: amp.add %[[W]], %{{.+}} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
// BF16-LABEL: func @inf_mask_and_scale
// BF16: amp.mul {{.*}} : (tensor<2x2xbf16>, tensor<bf16>) -> tensor<2x2xbf16>
// BF16: amp.add {{.*}} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
func.func @inf_mask_and_scale(%w: tensor<2x2xf32> {amp.param = "w"}, %x: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %scale = arith.constant dense<0.125> : tensor<f32>
  %mask = arith.constant dense<[[0.0, 0xFF800000], [0.0, 0.0]]> : tensor<2x2xf32>
  %s = amp.matmul %x, %w : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %t = amp.mul %s, %scale : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  %a = amp.add %t, %mask : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %a : tensor<2x2xf32>
}

// -----

// 1e5 is beyond f16's range (65504) but fits bf16: f32 in f16 only.
// CHECK-LABEL: func @beyond_f16
// CHECK: amp.add {{.*}} : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
// BF16-LABEL: func @beyond_f16
// BF16: amp.add {{.*}} : (tensor<2x2xbf16>, tensor<bf16>) -> tensor<2x2xbf16>
func.func @beyond_f16(%w: tensor<2x2xf32> {amp.param = "w"}, %x: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %big = arith.constant dense<1.0e5> : tensor<f32>
  %s = amp.matmul %x, %w : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %a = amp.add %s, %big : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  return %a : tensor<2x2xf32>
}
