// Dynamic shapes cannot be planned.
// RUN: not amp-opt %s -amp-plan-memory 2>&1 | FileCheck %s --check-prefix=DYN
// DYN: error: 'amp.relu' op result type 'tensor<?x64xf32>' has dynamic dims: the memory plan needs static shapes
func.func @dynamic(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %0 = amp.relu %x : tensor<?x64xf32>
  return %0 : tensor<?x64xf32>
}

// A tensor larger than a plan can address (256 TiB), or whose element count
// overflows int64, is an error naming it, never a wrapped-around size.
// RUN: not amp-opt %s -split-input-file -amp-plan-memory 2>&1 | FileCheck %s --check-prefix=BIG
// BIG: error: 'amp.random_normal' op result type 'tensor<2147483648x2147483648x2147483648xf32>' is too large: more than the 281474976710656 bytes (256 TiB) one tensor of a memory plan may take
// BIG: error: 'amp.random_normal' op result type 'tensor<70368744177664x2xf16>' is too large: more than the 281474976710656 bytes (256 TiB) one tensor of a memory plan may take
// -----
func.func @overflows() -> tensor<2147483648x2147483648x2147483648xf32> {
  %0 = amp.random_normal : tensor<2147483648x2147483648x2147483648xf32>
  return %0 : tensor<2147483648x2147483648x2147483648xf32>
}
// -----
// (256 TiB in f16; 512 TiB as f32, the size the f32 plan needs)
func.func @large_as_f32() -> tensor<70368744177664x2xf16> {
  %0 = amp.random_normal : tensor<70368744177664x2xf16>
  return %0 : tensor<70368744177664x2xf16>
}
