//===- Program.h - compiling a model for the runtime ------------*- C++ -*-===//
//
// What amp-run (JIT) and amp-compile (AOT) share: the signature of a model
// function (its inputs, parameters with their initial values, results) and
// the pass pipeline from the amp dialect to runtime calls in LLVM IR.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_EXECUTION_PROGRAM_H
#define AMP_EXECUTION_PROGRAM_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include "amp/Pipelines/Pipelines.h"
#include "amprt/amprt.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::amp {

struct TensorSlot {
  std::string name;
  bool isParam = false;
  RankedTensorType type;
  amprt_dtype dtype = AMPRT_F32;
  std::vector<char> init; // parameters: the initial value's bytes
  uint64_t bytes = 0;     // the tensor's size (checked not to overflow)
};

struct ProgramSignature {
  std::vector<TensorSlot> args, results;
};

/// Imports an .onnx file (binding graph inputs named in constInputs to .pb
/// files, importing the float initializers in `freeze` as constants) or
/// parses an .mlir file; null after reporting errors.
OwningOpRef<ModuleOp> loadModelFile(llvm::StringRef path, MLIRContext *ctx,
                                    const std::map<std::string, std::string> &constInputs,
                                    const std::vector<std::string> &freeze = {});

/// The runtime element type of an MLIR element type.
FailureOr<amprt_dtype> runtimeDType(Type elementType);

/// Reads the function's arguments (amp.input / amp.param with amp.init) and
/// results (amp.output); errors at the function name what is missing. A
/// tensor whose size overflows 64 bits, or a parameter (whose initial value
/// is materialised here) larger than amprt_host_memory_bytes(), is an error naming it.
FailureOr<ProgramSignature> signatureOf(func::FuncOp f);

/// "2199023255552 bytes (2.0 TiB)".
std::string bytesText(uint64_t bytes);

/// Whether the host can hold a tensor of `bytes` next to `already` bytes;
/// otherwise the error to give ("<what> (<type>) needs ..., more than this
/// machine's memory ...").
std::optional<std::string> exceedsHostMemory(const TensorSlot &s, uint64_t already,
                                             llvm::StringRef what);

/// The training-step pipeline (amp-train-step) on the module.
LogicalResult buildTrainingStep(ModuleOp module, const TrainingOptions &o);

/// Runs autocast (fp16 / bf16) and amp-lower-to-linalg on `module`: every
/// function becomes linalg on tensors, its initial state `@<name>_init`.
LogicalResult lowerToLinalg(ModuleOp module, const PrecisionOptions &p);

/// The lowering pipeline (amp-lower-for-runtime: amp-autocast for "fp16" /
/// "bf16", amp-fold-transposes, amp-plan-memory, amp-lower-to-runtime). Returns the arena size of
/// `name`. A policy or block list with fp32 is refused (it would be ignored).
/// `prepared`: prepareForRuntime ran already (only the rest runs).
/// `memoryReport`: where amp-plan-memory writes its JSON report (none if
/// empty).
FailureOr<int64_t> lowerForRuntime(ModuleOp module, llvm::StringRef name,
                                   const PrecisionOptions &precision, bool prepared = false,
                                   llvm::StringRef memoryReport = "");

/// The first half of lowerForRuntime (amp-autocast, amp-fold-transposes,
/// amp-keep-weight-casts):
/// after it the functions have their final signatures (signatureOf), with
/// the state arguments amp-keep-weight-casts adds.
LogicalResult prepareForRuntime(ModuleOp module, const PrecisionOptions &precision);

} // namespace mlir::amp

#endif // AMP_EXECUTION_PROGRAM_H
