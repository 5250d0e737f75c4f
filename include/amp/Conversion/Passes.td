//===- Passes.td - amp conversion passes -------------------*- tablegen -*-===//
//
// The conversions out of the amp dialect: to calls into the runtime
// (AMPToRuntime) and to linalg on tensors (AMPToLinalg).
//
//===----------------------------------------------------------------------===//

#ifndef AMP_CONVERSION_PASSES_TD
#define AMP_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def AMPLowerToRuntime : Pass<"amp-lower-to-runtime", "::mlir::ModuleOp"> {
  let summary = "Lower planned amp functions to calls into libamprt";
  let description = [{
    Each planned `func.func @f` becomes
    `llvm.func @f(ctx, arena, args, results) -> i32`: every op is one call
    `amprt_exec(ctx, desc, bufs)` with a constant descriptor (opcode,
    tensors, attributes, the op's node name for the runtime's messages) and the buffer pointers (arena slots, arguments,
    constants); a non-zero status returns at once. Results are copied into
    the caller's buffers. Needs amp-plan-memory first.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def AMPLowerToLinalg : Pass<"amp-lower-to-linalg", "::mlir::ModuleOp"> {
  let summary = "Lower amp ops to linalg on tensors (+ tensor, arith, math)";
  let description = [{
    Every amp op becomes linalg generics on tensors with the numerics of the
    runtime's kernels: f16 / bf16 element-wise math in f32 rounded once,
    products and convolutions reading the narrow inputs with f32
    accumulators (bias, alpha and beta in f32, one rounding), softmax /
    normalisation / losses / reductions in f32 with f64 sums, and the loss
    scaling ops (unscale_and_check, update_scale, the optimizer updates,
    step_count) as element-wise selects on found_inf: no control flow, a
    skipped step is data. An op with no lowering (random ops, dropout in
    training mode, gathers' gradients, ...) is an error naming it.
    With `state-init`, the initial state (`amp.init` argument attributes)
    becomes a function `@<name>_init` returning it in argument order (each
    result carries `amp.arg`, the argument it starts).
  }];
  let options = [
    Option<"stateInit", "state-init", "bool", /*default=*/"true",
           "Move the arguments' amp.init values into @<name>_init">,
  ];
  let dependentDialects = ["::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
                           "::mlir::func::FuncDialect"];
}

#endif // AMP_CONVERSION_PASSES_TD
