// RUN: not amp-opt %s -amp-lower-to-runtime 2>&1 | FileCheck %s
// CHECK: error: amp-lower-to-runtime: 'f' has no memory plan; run amp-plan-memory first
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = amp.relu %x : tensor<2xf32>
  return %0 : tensor<2xf32>
}
