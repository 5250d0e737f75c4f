// Dynamic shapes cannot be planned.
// RUN: not amp-opt %s -amp-plan-memory 2>&1 | FileCheck %s --check-prefix=DYN
// DYN: error: 'amp.relu' op result type 'tensor<?x64xf32>' has dynamic dims: the memory plan needs static shapes
func.func @dynamic(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %0 = amp.relu %x : tensor<?x64xf32>
  return %0 : tensor<?x64xf32>
}
