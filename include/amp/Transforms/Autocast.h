//===- Autocast.h - precision policy and the autocast rewrite ---*- C++ -*-===//
//
// The policy (which op computes in which precision) is data: the default
// lives in policies/default.json and is compiled in; users replace or amend
// it from a JSON file, the pass options or this API. runAutocast applies it
// to one function and returns a per-op report of every decision.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_TRANSFORMS_AUTOCAST_H
#define AMP_TRANSFORMS_AUTOCAST_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::amp {

/// lower: computes in the target type, accumulating in f32. fp32: computes
/// in f32. follow: the target type only when every activation input has it.
/// promote: mixed inputs cast to the widest. storage: low-precision storage,
/// f32 compute: when every activation input is in the target type, the
/// activations (in and out) stay in it while the op's parameters and
/// statistics stay f32 and its arithmetic is f32 (PyTorch's mixed-type batch
/// norm); else as fp32. Only ops whose activations and statistics can be
/// typed apart take it (storageOperands).
enum class PrecisionClass { Lower, FP32, Follow, Promote, Storage };

llvm::StringRef stringifyPrecisionClass(PrecisionClass c);
std::optional<PrecisionClass> parsePrecisionClass(llvm::StringRef s);

/// The operands an op of the storage class keeps in the target type (its
/// activations; the others stay f32), by op name; empty when the op cannot
/// take the storage class.
llvm::ArrayRef<unsigned> storageOperands(llvm::StringRef opName);
/// The ops that can take the storage class, for messages
/// ("amp.batch_norm, amp.batch_norm_grad").
std::string storageOpNames();

struct PolicyRule {
  PrecisionClass cls;
  /// Accumulation type for `lower` matrix products ("f32" by default).
  std::string accumulate = "f32";
  /// Where the rule comes from, for the report ("default policy",
  /// "policy file p.json", "block list", ...).
  std::string source;
};

struct Policy {
  llvm::StringMap<PolicyRule> ops;   // by op name, e.g. "amp.matmul"
  llvm::StringMap<PolicyRule> nodes; // by ONNX node name

  /// The compiled-in default (policies/default.json).
  static Policy getDefault();
  /// Reads a policy file on top of `base` (replacing it when the file says
  /// "extends": "none"). Errors name the file and the offending key: bad
  /// JSON, unknown class, unknown op name (not an op of a loaded dialect).
  static FailureOr<Policy> load(llvm::StringRef path, const Policy &base, MLIRContext *ctx,
                                function_ref<InFlightDiagnostic()> emitError);
  /// Parses policy JSON text (`source` names it in messages).
  static FailureOr<Policy> parse(llvm::StringRef text, llvm::StringRef source, const Policy &base,
                                 MLIRContext *ctx, function_ref<InFlightDiagnostic()> emitError);
};

struct AutocastOptions {
  /// "f16" or "bf16".
  std::string target = "f16";
  Policy policy = Policy::getDefault();
  /// Keep the float inputs and results of the function in their declared
  /// types; when false, float graph inputs (not parameters) and results take
  /// the target type.
  bool keepIOTypes = true;
  /// Node names forced to fp32.
  std::vector<std::string> blockList;
  /// Products keep their bias f32, and products, their gradients and sums
  /// in the target type whose result only f32 reads write their f32
  /// accumulator (no rounding, no cast): "auto" (bf16 targets only: f16
  /// keeps PyTorch's roundings, whose overflowing f16 weight gradients
  /// dynamic loss scaling skips), "on" or "off".
  std::string f32Accumulators = "auto";
};

/// One decision, as the report shows it.
struct AutocastDecision {
  std::string node, op, cls, computeType, accumulate, reason;
};

struct AutocastReport {
  std::string target;
  std::vector<AutocastDecision> ops;
  unsigned castsBefore = 0, castsAfter = 0, paramsCast = 0;
  llvm::json::Value toJSON() const;
};

/// Rewrites `func` by the options' policy; appends every decision to
/// `report`. Fails (with an error at the function) when the options are
/// invalid (target, a block-listed or policy node that no op has).
///
/// A function of amp ops is autocast as a whole (every op in the precision
/// of its class). Any other function (func.func, IREE's util.func, ...)
/// holding upstream ops (linalg on tensors, tensor, arith, math, TOSA) is
/// read through AutocastOpInterface: `lower` ops read the target type and
/// keep f32 accumulators; the other ops keep the types they have, and the
/// report says why. A function mixing amp ops with modelled upstream ops on
/// float tensors is refused.
LogicalResult runAutocast(FunctionOpInterface func, const AutocastOptions &options,
                          AutocastReport &report);

/// The name an op is reported under: its ONNX node name (the NameLoc the
/// importer gives it) or its printed location.
std::string nodeNameOf(Operation *op);

/// Writes a Graphviz picture of `func` coloured by element type; when `dot`
/// is on PATH also renders <path without .dot>.svg and .png. Returns the
/// files written.
FailureOr<std::vector<std::string>> writePrecisionGraph(FunctionOpInterface func,
                                                        llvm::StringRef path);

} // namespace mlir::amp

#endif // AMP_TRANSFORMS_AUTOCAST_H
