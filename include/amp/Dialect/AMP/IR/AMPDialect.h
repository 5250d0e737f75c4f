//===- AMPDialect.h - the amp dialect ---------------------------*- C++ -*-===//

#ifndef AMP_DIALECT_AMP_IR_AMPDIALECT_H
#define AMP_DIALECT_AMP_IR_AMPDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Dialect.h"

#include "amp/Dialect/AMP/IR/AMPOpsDialect.h.inc"

#include "llvm/ADT/StringRef.h"

/// The names of the amp dialect's discardable attributes, declared once:
/// the training-step form's argument and result attributes (docs/dialect.md,
/// "The training-step form") and the marks the passes leave on ops.
namespace mlir::amp::attrname {
// Function arguments.
/// A parameter (fp32 master weight): its name.
inline constexpr llvm::StringLiteral kParam = "amp.param";
/// Optimizer or loss-scaling state: its name.
inline constexpr llvm::StringLiteral kOptState = "amp.opt_state";
/// A graph input fed per step: its name.
inline constexpr llvm::StringLiteral kInput = "amp.input";
/// The ONNX names of an input's dims.
inline constexpr llvm::StringLiteral kDimNames = "amp.dim_names";
/// A state argument's initial value.
inline constexpr llvm::StringLiteral kInit = "amp.init";
/// amp-lower-to-linalg's @<name>_init results: the argument each one starts.
inline constexpr llvm::StringLiteral kArg = "amp.arg";
// Function results.
/// An output of the graph (the loss, the loss scale, ...): its name.
inline constexpr llvm::StringLiteral kOutput = "amp.output";
/// The gradient of the parameter it names.
inline constexpr llvm::StringLiteral kGrad = "amp.grad";
/// The new value of the state argument it names.
inline constexpr llvm::StringLiteral kUpdates = "amp.updates";
// Ops and modules.
/// A backward op: the forward node it differentiates.
inline constexpr llvm::StringLiteral kDifferentiates = "amp.differentiates";
/// The op seeding the backward (d loss / d loss = the loss scale).
inline constexpr llvm::StringLiteral kLossSeed = "amp.loss_seed";
/// The op whose result is the step's found_inf.
inline constexpr llvm::StringLiteral kFoundInf = "amp.found_inf";
/// An embedding gradient's rows kept zero (padding_idx).
inline constexpr llvm::StringLiteral kPaddingRows = "amp.padding_rows";
/// The importer's precision class hint for an op (an ONNX domain op's).
inline constexpr llvm::StringLiteral kClass = "amp.class";
/// amp-plan-memory: an op's results' arena offsets.
inline constexpr llvm::StringLiteral kSlots = "amp.slots";
/// amp-plan-memory: a function's arena size in bytes, and what it would be
/// with every f16 / bf16 tensor in f32.
inline constexpr llvm::StringLiteral kArenaBytes = "amp.arena_bytes";
inline constexpr llvm::StringLiteral kArenaBytesIfF32 = "amp.arena_bytes_if_f32";
/// amp-lower-to-runtime: the results written into their arguments' buffers.
inline constexpr llvm::StringLiteral kInplaceResults = "amp.inplace_results";
/// The module's producer (the ONNX exporter that wrote the model).
inline constexpr llvm::StringLiteral kProducer = "amp.producer";
} // namespace mlir::amp::attrname

#endif // AMP_DIALECT_AMP_IR_AMPDIALECT_H
