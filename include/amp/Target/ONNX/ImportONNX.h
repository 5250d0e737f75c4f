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
};

/// Imports the model at `path` ("-" for stdin). On failure returns null after
/// emitting one error per problem through the context's diagnostic engine;
/// each message names the file, the node (name, op type, domain, opset) or
/// tensor, and the reason. Unsupported ops are all listed, not just the
/// first.
OwningOpRef<ModuleOp> importONNXFile(llvm::StringRef path, MLIRContext *ctx,
                                     const ONNXImportOptions &options = {});

/// A TensorProto read from a .pb file (the ONNX test-data format).
struct ONNXTensorFile {
  std::string name;
  Type elementType;           // null when amp has no such type
  std::vector<int64_t> shape;
  std::string bytes;          // little-endian, bool as one byte
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
