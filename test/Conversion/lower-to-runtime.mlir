// amp-lower-to-runtime: one amprt_exec call per op, with its descriptor as a
// constant, buffer pointers from arguments / arena slots / constants, early
// return on a non-zero status, results copied to the caller's buffers.
// RUN: amp-opt %s -amp-plan-memory -amp-lower-to-runtime | FileCheck %s

// CHECK-DAG: llvm.mlir.global internal constant @[[CONST:__amp_const_[0-9]+]](dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>)
// Descriptor of the add: version 2 (named), opcode 2 (binary), 3 tensors,
// 1 attribute; f32 [2, 2] strides [2, 1]; f32 [2] (the constant); f32 [2, 2];
// op 0 (add); the name "block1/add": 10 bytes, packed little-endian.
// CHECK-DAG: llvm.mlir.global internal constant @{{__amp_desc_[0-9]+}}(dense<[2, 2, 3, 1, 0, 2, 0, 2, 2, 2, 1, 0, 1, 0, 2, 1, 0, 2, 0, 2, 2, 2, 1, 0, 10, 7002870282883918946, 25700]> : tensor<27xi64>)
// The result copy (opcode 5, no name): name length 0.
// CHECK-DAG: llvm.mlir.global internal constant @{{__amp_desc_[0-9]+}}(dense<[2, 5, 2, 0, {{.*}}, 0]> : tensor<19xi64>)
// CHECK: llvm.func @amprt_exec(!llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// CHECK: llvm.func @f(%[[CTX:.+]]: !llvm.ptr, %[[ARENA:.+]]: !llvm.ptr, %[[ARGS:.+]]: !llvm.ptr, %[[RES:.+]]: !llvm.ptr) -> i32 attributes {amp.arena_bytes = 64 : i64
// CHECK: %[[SLOT:.+]] = llvm.getelementptr %[[ARGS]][0]
// CHECK: %[[X:.+]] = llvm.load %[[SLOT]] : !llvm.ptr -> !llvm.ptr
// CHECK: llvm.mlir.addressof @[[CONST]]
// CHECK: %[[S:.+]] = llvm.call @amprt_exec(%[[CTX]], %{{.+}}, %{{.+}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// CHECK: %[[BAD:.+]] = llvm.icmp "ne" %[[S]], %{{.+}} : i32
// CHECK: llvm.cond_br %[[BAD]], ^[[FAIL:.+]](%[[S]] : i32), ^
// The result copy (opcode 5) into results[0].
// CHECK: llvm.getelementptr %[[RES]][0]
// CHECK: llvm.call @amprt_exec
// CHECK: llvm.return %{{.+}} : i32
// CHECK: ^[[FAIL]](%[[ST:.+]]: i32):
// CHECK-NEXT: llvm.return %[[ST]] : i32
func.func @f(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %c = arith.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %0 = amp.add %x, %c : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32> loc("block1/add")
  return %0 : tensor<2x2xf32>
}
