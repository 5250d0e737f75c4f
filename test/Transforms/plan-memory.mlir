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
// the returned value lives to the end. An add whose operand dies there
// writes over it: %3 over the sigmoid, %5 over the relu (through its
// reshape).
// CHECK-LABEL: func @long_lived
// CHECK: %[[A:.+]] = amp.relu %{{.+}} {amp.slots = array<i64: 0>}
// CHECK: amp.reshape %[[A]] {amp.slots = array<i64: -1>
// CHECK: amp.tanh %{{.+}} {amp.slots = array<i64: 1024>}
// CHECK: amp.sigmoid %{{.+}} {amp.slots = array<i64: 2048>}
// CHECK: amp.add %{{.+}} {amp.slots = array<i64: 2048>}
// CHECK: amp.add %{{.+}} {amp.slots = array<i64: 0>}
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
// the most bytes live at once: at the check, %g0 (= u#0), %g1, u#1, u#2
// (1024 each), %g2 (512) and the flag (64); the sum writes over %g1, which
// dies there (all f32: %g2 takes 1024 more).
// CHECK-LABEL: func @unscale_in_place
// CHECK-SAME: amp.arena_bytes = 4672 : i64, amp.arena_bytes_if_f32 = 5184 : i64
// CHECK: amp.tanh %{{.+}} {amp.slots = array<i64: [[G0:[0-9]+]]>}
// CHECK: amp.sigmoid %{{.+}} {amp.slots = array<i64: [[G1:[0-9]+]]>}
// CHECK: amp.cast %{{.+}} {amp.slots = array<i64: [[G2:[0-9]+]]>}
// CHECK: amp.unscale_and_check {{.+}} {amp.slots = array<i64: [[G0]], {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}>}
// CHECK: amp.add %{{.+}}, %{{.+}} {amp.slots = array<i64: [[G1]]>}
// REPORT-SAME: {"name": "unscale_in_place", "arena_bytes": 4672, "arena_bytes_if_f32": 5184, "buffers": 6, "live_bytes": 4672
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

// -----

// Gradient sums written in place: a chain of adds whose operands die at
// them takes one slot (a tied weight's three gradients summed); an operand
// read later keeps its own (%k at %n; %m, its last reader, takes it), as
// does one of a smaller shape (%c, broadcast).
// CHECK-LABEL: func @sums_in_place
// CHECK: %[[A:.+]] = amp.tanh %{{.+}} {amp.slots = array<i64: [[SA:[0-9]+]]>}
// CHECK: amp.add %[[A]], %{{.+}} {amp.slots = array<i64: [[SA]]>}
// CHECK: amp.add %{{.+}}, %{{.+}} {amp.slots = array<i64: [[SA]]>}
// CHECK: %[[K:.+]] = amp.exp %{{.+}} {amp.slots = array<i64: [[SK:[0-9]+]]>}
// CHECK: amp.add %[[K]], %{{.+}} {amp.slots = array<i64: [[SA]]>}
// CHECK: %[[C:.+]] = amp.tanh %{{.+}} {amp.slots = array<i64: [[SC:[0-9]+]]>}
// CHECK: amp.add %[[C]], %[[K]] {amp.slots = array<i64: [[SK]]>}
// REPORT-SAME: {"name": "sums_in_place", "arena_bytes": 3072, "arena_bytes_if_f32": 3072, "buffers": 5
func.func @sums_in_place(%x: tensor<4x64xf32>, %b: tensor<64xf32>)
    -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %0 = amp.tanh %x : tensor<4x64xf32>
  %1 = amp.sigmoid %x : tensor<4x64xf32>
  %2 = amp.relu %x : tensor<4x64xf32>
  %s1 = amp.add %0, %1 : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  %s2 = amp.add %s1, %2 : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  %k = amp.exp %x : tensor<4x64xf32>
  %n = amp.add %k, %s2 : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  %c = amp.tanh %b : tensor<64xf32>
  %m = amp.add %c, %k : (tensor<64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  return %n, %m : tensor<4x64xf32>, tensor<4x64xf32>
}

// -----

// The report's prediction, by category: the f32 parameter (8x16: 512
// bytes), its f32 moment (optimizer state) and bf16 copy (low-precision
// copies, 256), the input (4x8 bf16: 64), the result (4x16 bf16: 128), the
// arena, and the workspace: the bf16 product's two operands widened to f32
// (4 x (32 + 128) = 640) and its f32 accumulator (4 x 64 = 256); the
// runtime's own 32 MiB. peak_bytes is their sum.
// REPORT-SAME: {"name": "categories", {{.+}}, "predicted": {"inputs": 64, "low_precision_copies": 256, "optimizer_state": 512, "parameters": 512, "results": 128, "arena": 128, "workspace": 896, "runtime": 33554432, "peak_bytes": 33556928}
func.func @categories(%w: tensor<8x16xf32> {amp.param = "w"}, %m: tensor<8x16xf32> {amp.opt_state = "w.m"},
                      %wl: tensor<8x16xbf16> {amp.opt_state = "w.bf16"}, %x: tensor<4x8xbf16> {amp.input = "x"})
    -> tensor<4x16xbf16> {
  %y = amp.gemm %x, %wl : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}
