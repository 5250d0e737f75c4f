// A func.func with no op to autocast (a helper passing its input through)
// is still an amp function: keep-io-types=false gives its float input and
// result the target type, as for any amp function (it must not be taken for
// upstream IR, where that option is refused).
// RUN: amp-opt %s -amp-autocast="target=bf16 keep-io-types=false" | FileCheck %s
// CHECK: func.func @id(%{{.*}}: tensor<4xbf16> {amp.input = "x"}) -> tensor<4xbf16>
func.func @id(%x: tensor<4xf32> {amp.input = "x"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
