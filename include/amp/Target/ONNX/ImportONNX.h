//===- ImportONNX.h - ONNX model -> amp dialect -----------------*- C++ -*-===//
//
// The importer behind `amp-translate --import-onnx`, for every tool and
// library user: one function from an .onnx file to a module holding
// func.func @<name> in the amp dialect.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_TARGET_ONNX_IMPORTONNX_H
#define AMP_TARGET_ONNX_IMPORTONNX_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/MemoryBuffer.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace mlir {
class DialectRegistry;
namespace amp {

struct ONNXImportOptions {
  /// Name of the imported function.
  std::string funcName = "main";
  /// Float initializers named here become constants instead of amp.param
  /// arguments (frozen parameters). An unknown name is an error.
  std::vector<std::string> frozen;
  /// Graph inputs to import as constants: name -> TensorProto (.pb) file.
  /// Lets a model whose shape-like inputs (Reshape's shape, Slice's starts,
  /// ...) come from the caller be specialised to one value.
  std::map<std::string, std::string> constantInputs;
  /// Tensors with at most this many elements are printed inline; larger ones
  /// become dense_resource blobs.
  int64_t inlineElementLimit = 256;
  /// Initializers imported as state arguments whatever their type (float
  /// ones as amp.param, others as amp.opt_state), never folded: the ones a
  /// TrainingInfoProto's update_binding writes.
  std::set<std::string> stateInitializers;
  /// Import ModelProto.training_info's algorithm too, as the function
  /// `train_step` (its update_binding outputs marked amp.updates).
  bool importTrainingInfo = true;
  /// Recognise GELU written out as x * 0.5 * (1 + erf(x / sqrt 2)) (what
  /// torch.onnx.export writes below opset 20) and import it as amp.gelu.
  bool fuseGelu = true;
  /// Import MatMul ([..., K] x [K, N]) + Add of an [N] bias as amp.gemm with
  /// that bias on the rows (between reshapes).
  bool fuseMatMulBias = true;
};

/// Imports the model at `path` ("-" for stdin). On failure returns null after
/// emitting one error per problem through the context's diagnostic engine;
/// each message names the file, the node (name, op type, domain, opset) or
/// tensor, and the reason. Unsupported ops are all listed, not just the
/// first.
OwningOpRef<ModuleOp> importONNXFile(llvm::StringRef path, MLIRContext *ctx,
                                     const ONNXImportOptions &options = {});

/// The same for a model in memory (an embedding compiler's bytes, a fuzzer's
/// input): the buffer's identifier names it in messages, and external data
/// is looked up in the identifier's directory.
OwningOpRef<ModuleOp> importONNXBuffer(llvm::MemoryBufferRef buffer, MLIRContext *ctx,
                                       const ONNXImportOptions &options = {});

/// onnxruntime-training's artifacts (generate_artifacts): the training model
/// (forward, backward with com.microsoft gradient ops, InPlaceAccumulatorV2
/// into gradient buffers) with its parameters in the `checkpoint` file
/// becomes one function `train_step` in the form amp-autodiff leaves: the
/// trainable parameters are amp.param arguments (initial values from the
/// checkpoint), the batch inputs amp.input arguments, result 0 the loss
/// (amp.output "loss"), then one gradient per trainable parameter (amp.grad).
/// One call is ORT's `module(batch); optimizer.step();
/// module.lazy_reset_grad()` once amp-optimizer adds the update: gradient
/// buffers are overwritten, not accumulated. The constant that seeds the
/// backward (the loss's gradient, 1) is marked amp.loss_seed, so
/// amp-loss-scaling applies. Errors name the file and what is wrong.
OwningOpRef<ModuleOp> importORTTrainingArtifacts(llvm::StringRef trainingModel,
                                                 llvm::StringRef checkpoint, MLIRContext *ctx,
                                                 const ONNXImportOptions &options = {});

/// The update an artifacts' optimizer_model.onnx performs (one
/// com.microsoft AdamWOptimizer or SGDOptimizerV2 node over sequences of
/// all parameters), as amp-optimizer's options.
struct ORTOptimizerSpec {
  std::string optimizer; // "adamw" or "sgd"
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  /// AdamWOptimizer adam_mode: 0 PyTorch's AdamW, 1 Hugging Face's (bias
  /// correction folded into the learning rate, eps added to sqrt(v), weight
  /// decay after the update).
  std::string adamMode = "torch";
};
FailureOr<ORTOptimizerSpec> readORTOptimizerModel(llvm::StringRef path, MLIRContext *ctx);

/// The optimizer state of a checkpoint saved with it (ORT's
/// save_checkpoint(include_optimizer_state=True)): the applied-step count and
/// per parameter its moments ("momentum0", "momentum1"), little-endian f32.
struct ORTOptimizerState {
  bool present = false;
  int64_t step = 0;
  float learningRate = 0;
  std::map<std::string, std::map<std::string, std::string>> moments;
};
FailureOr<ORTOptimizerState> readORTOptimizerState(llvm::StringRef checkpoint, MLIRContext *ctx);

/// A TensorProto read from a .pb file (the ONNX test-data format).
struct ONNXTensorFile {
  std::string name;
  Type elementType; // null when amp has no such type
  std::vector<int64_t> shape;
  std::string bytes; // little-endian, bool as one byte
};

/// Reads a serialized TensorProto; errors name the file.
FailureOr<ONNXTensorFile> readTensorProtoFile(llvm::StringRef path, MLIRContext *ctx);

/// The dialects an imported module uses.
void registerONNXImportDialects(DialectRegistry &registry);

/// The ops (domain-qualified for non-default domains: "com.microsoft.Gelu")
/// the importer maps, with the first opset version it accepts.
std::vector<std::pair<std::string, int>> supportedONNXOps();

} // namespace amp
} // namespace mlir

#endif // AMP_TARGET_ONNX_IMPORTONNX_H
