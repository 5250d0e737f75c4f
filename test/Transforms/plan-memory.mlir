// amp-plan-memory: liveness-based slots, reuse of dead buffers, aliases for
// reshape-like ops, peaks with and without low precision.
// RUN: amp-opt %s -split-input-file -amp-plan-memory | FileCheck %s
// RUN: amp-opt %s -amp-plan-memory=report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT < %t.json

// A chain: each intermediate dies after its one use, so two slots suffice
// however long the chain (a 4x64 f32 tensor is 1024 bytes).
// CHECK-LABEL: func @chain
// CHECK-SAME: amp.arena_bytes = 2048 : i64
// CHECK: amp.relu %{{.+}} {amp.slots = array<i64: 0>}
// CHECK: amp.tanh %{{.+}} {amp.slots = array<i64: 1024>}
// CHECK: amp.sigmoid %{{.+}} {amp.slots = array<i64: 0>}
// CHECK: amp.exp %{{.+}} {amp.slots = array<i64: 1024>}
// REPORT: {"functions": [{"name": "chain", "arena_bytes": 2048, "arena_bytes_if_f32": 2048, "buffers": 4, "live_bytes": 2048
func.func @chain(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = amp.relu %x : tensor<4x64xf32>
  %1 = amp.tanh %0 : tensor<4x64xf32>
  %2 = amp.sigmoid %1 : tensor<4x64xf32>
  %3 = amp.exp %2 : tensor<4x64xf32>
  return %3 : tensor<4x64xf32>
}

// -----

// A value used late keeps its slot; reshape aliases its input (no slot);
// the returned value lives to the end.
// CHECK-LABEL: func @long_lived
// CHECK: %[[A:.+]] = amp.relu %{{.+}} {amp.slots = array<i64: 0>}
// CHECK: amp.reshape %[[A]] {amp.slots = array<i64: -1>
// CHECK: amp.tanh %{{.+}} {amp.slots = array<i64: 1024>}
// CHECK: amp.sigmoid %{{.+}} {amp.slots = array<i64: 2048>}
// CHECK: amp.add %{{.+}} {amp.slots = array<i64: 1024>}
func.func @long_lived(%x: tensor<4x64xf32>) -> tensor<256xf32> {
  %0 = amp.relu %x : tensor<4x64xf32>
  %r = amp.reshape %0 {shape = array<i64: 256>} : (tensor<4x64xf32>) -> tensor<256xf32>
  %1 = amp.tanh %x : tensor<4x64xf32>
  %2 = amp.sigmoid %1 : tensor<4x64xf32>
  %3 = amp.add %2, %x : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  %4 = amp.reshape %3 {shape = array<i64: 256>} : (tensor<4x64xf32>) -> tensor<256xf32>
  %5 = amp.add %r, %4 : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  return %5 : tensor<256xf32>
}

// -----

// Low precision halves the activations: the report gives both peaks.
// CHECK-LABEL: func @low
// CHECK-SAME: amp.arena_bytes = 1024 : i64, amp.arena_bytes_if_f32 = 2048 : i64
// REPORT-SAME: {"name": "low", "arena_bytes": 1024, "arena_bytes_if_f32": 2048, "buffers": 2, "live_bytes": 1024
func.func @low(%x: tensor<4x64xf16>) -> tensor<4x64xf16> {
  %0 = amp.relu %x : tensor<4x64xf16>
  %1 = amp.tanh %0 : tensor<4x64xf16>
  return %1 : tensor<4x64xf16>
}

// -----

// amp.unscale_and_check works in place: an f32 gradient the check reads last
// shares its bytes with its output; a gradient read again later, and an f16
// one (its output is f32: other bytes), get their own slots. The arena is
// the most bytes live at once: at the add, u#0, %g1, u#1, u#2 (1024 each),
// the flag (64) and the sum (1024).
// CHECK-LABEL: func @unscale_in_place
// CHECK-SAME: amp.arena_bytes = 5184 : i64
// CHECK: amp.tanh %{{.+}} {amp.slots = array<i64: [[G0:[0-9]+]]>}
// CHECK: amp.sigmoid %{{.+}} {amp.slots = array<i64: [[G1:[0-9]+]]>}
// CHECK: amp.cast %{{.+}} {amp.slots = array<i64: [[G2:[0-9]+]]>}
// CHECK: amp.unscale_and_check {{.+}} {amp.slots = array<i64: [[G0]], {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}>}
// REPORT-SAME: {"name": "unscale_in_place", "arena_bytes": 5184, "arena_bytes_if_f32": 5184, "buffers": 7, "live_bytes": 5184
func.func @unscale_in_place(%x: tensor<4x64xf32>, %s: tensor<f32>)
    -> (tensor<4x64xf32>, tensor<4x64xf32>, tensor<4x64xf32>, tensor<i1>) {
  %g0 = amp.tanh %x : tensor<4x64xf32>
  %g1 = amp.sigmoid %x : tensor<4x64xf32>
  %g2 = amp.cast %x : tensor<4x64xf32> to tensor<4x64xf16>
  %u:3, %f = amp.unscale_and_check %g0, %g1, %g2 scale %s : tensor<4x64xf32>, tensor<4x64xf32>, tensor<4x64xf16> -> tensor<4x64xf32>, tensor<4x64xf32>, tensor<4x64xf32>
  %late = amp.add %g1, %u#1 : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  return %u#0, %late, %u#2, %f : tensor<4x64xf32>, tensor<4x64xf32>, tensor<4x64xf32>, tensor<i1>
}

// -----

// A transpose of the last two dims read only by matrix products is a view
// (no slot: the products read its input transposed in place); one with
// another reader, or another permutation, is copied into its own slot.
// CHECK-LABEL: func @matmul_views
// CHECK: amp.transpose %arg0 {amp.slots = array<i64: -1>, perm = array<i64: 0, 2, 1>}
// CHECK: amp.transpose %arg0 {amp.slots = array<i64: {{[0-9]+}}>, perm = array<i64: 0, 2, 1>}
// CHECK: amp.transpose %arg0 {amp.slots = array<i64: {{[0-9]+}}>, perm = array<i64: 1, 0, 2>}
func.func @matmul_views(%x: tensor<2x4x4xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<4x2x4xf32>) {
  %t = amp.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %m = amp.matmul %t, %x : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %u = amp.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %r = amp.relu %u : tensor<2x4x4xf32>
  %v = amp.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<2x4x4xf32>) -> tensor<4x2x4xf32>
  return %m, %r, %v : tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<4x2x4xf32>
}

// -----

// A transpose that moves only dims of size 1 keeps its input's row-major
// bytes: a reshape (no slot, no copy; Swin's window partition of a map
// that is one window). One that swaps two dims of size 7 is copied.
// CHECK-LABEL: func @unit_dim_transposes
// CHECK: amp.transpose %arg0 {amp.slots = array<i64: -1>, perm = array<i64: 0, 1, 3, 2, 4, 5>}
// CHECK: amp.transpose %arg0 {amp.slots = array<i64: -1>, perm = array<i64: 0, 2, 1, 3, 4, 5>}
// CHECK: amp.transpose %arg0 {amp.slots = array<i64: {{[0-9]+}}>, perm = array<i64: 0, 1, 4, 3, 2, 5>}
func.func @unit_dim_transposes(%x: tensor<2x1x7x1x7x4xf32>) -> (tensor<2x1x1x7x7x4xf32>, tensor<2x7x1x1x7x4xf32>, tensor<2x1x7x1x7x4xf32>) {
  %a = amp.transpose %x {perm = array<i64: 0, 1, 3, 2, 4, 5>} : (tensor<2x1x7x1x7x4xf32>) -> tensor<2x1x1x7x7x4xf32>
  %r = amp.relu %a : tensor<2x1x1x7x7x4xf32>
  %b = amp.transpose %x {perm = array<i64: 0, 2, 1, 3, 4, 5>} : (tensor<2x1x7x1x7x4xf32>) -> tensor<2x7x1x1x7x4xf32>
  %q = amp.relu %b : tensor<2x7x1x1x7x4xf32>
  %c = amp.transpose %x {perm = array<i64: 0, 1, 4, 3, 2, 5>} : (tensor<2x1x7x1x7x4xf32>) -> tensor<2x1x7x1x7x4xf32>
  return %r, %q, %c : tensor<2x1x1x7x7x4xf32>, tensor<2x7x1x1x7x4xf32>, tensor<2x1x7x1x7x4xf32>
}

// -----

// Placed by lifetime, largest first: %c (2048 bytes) comes when %a is dead
// but %b and %a1 live on; in order of definition it would go above all
// three (5120 bytes, with %a's 1024 a hole), packed it goes where %a was
// and the arena is the most bytes live at once: %b, %a1 and %c, 4096.
// CHECK-LABEL: func @fragmentation
// CHECK-SAME: amp.arena_bytes = 4096 : i64
// REPORT-SAME: {"name": "fragmentation", "arena_bytes": 4096, "arena_bytes_if_f32": 4096, "buffers": 4, "live_bytes": 4096
func.func @fragmentation(%x: tensor<4x64xf32>, %y: tensor<8x64xf32>)
    -> (tensor<4x64xf32>, tensor<4x64xf32>, tensor<8x64xf32>) {
  %a = amp.relu %x : tensor<4x64xf32>
  %b = amp.tanh %x : tensor<4x64xf32>
  %a1 = amp.sigmoid %a : tensor<4x64xf32>
  %c = amp.relu %y : tensor<8x64xf32>
  return %b, %a1, %c : tensor<4x64xf32>, tensor<4x64xf32>, tensor<8x64xf32>
}
