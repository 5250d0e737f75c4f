//===- Importer.h - the ONNX importer's internals ----------------*- C++ -*-===//
//
// What the importer's files share: the node being imported (NodeCtx), the
// importer's state (Importer), the op registry every family file adds its
// handlers to, and the helpers handlers build amp ops with. Private to
// lib/Target/ONNX (the public API is amp/Target/ONNX/ImportONNX.h).
//
// Layout: Importer.cpp (the graph walk), NodeContext.cpp (attributes,
// inputs, op building), ShapeFolding.cpp (compile-time integer / double
// arithmetic on shapes), one Ops<Family>.cpp per op family, Domain*.cpp per
// ONNX domain, Recompose.cpp (fusions as rewrite patterns), TrainingInfo.cpp
// and ORTArtifacts.cpp (training graphs).
//
//===----------------------------------------------------------------------===//

#ifndef AMP_LIB_TARGET_ONNX_IMPORTER_H
#define AMP_LIB_TARGET_ONNX_IMPORTER_H

#include "ONNXModel.h"

#include "amp/Dialect/AMP/IR/AMPOps.h"
#include "amp/Target/ONNX/ImportONNX.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"

namespace mlir {
class RewritePatternSet;
} // namespace mlir

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace onnx_import {

using namespace mlir;
using namespace mlir::amp;

constexpr int64_t kDyn = ShapedType::kDynamic;

/// FLOAT, FLOAT16, BFLOAT16 or DOUBLE.
bool isFloatType(int32_t dt);

/// Names in a hostile file may hold control characters (terminal escapes)
/// or invalid UTF-8: messages show those bytes as \xNN.
std::string printable(llvm::StringRef s);

struct Importer;

/// One node being imported: its identity for messages and its attributes.
/// One node being imported: its identity for messages and its attributes.
struct NodeCtx {
  Importer &im;
  const onnx::NodeProto &node;
  std::string name;   // node name, or its first output when unnamed
  std::string domain; // "ai.onnx" for the default domain
  int64_t opset;
  Location loc;

  std::string describe() const;
  /// Records an error about this node; returns failure.
  LogicalResult fail(const llvm::Twine &msg) const;

  const onnx::AttributeProto *attr(llvm::StringRef n) const {
    for (const auto &a : node.attribute())
      if (a.name() == n)
        return &a;
    return nullptr;
  }
  /// Fails on any attribute not in `known` (nothing is silently ignored).
  LogicalResult allowAttrs(llvm::ArrayRef<llvm::StringRef> known) const;
  FailureOr<int64_t> getInt(llvm::StringRef n, std::optional<int64_t> def) const;
  FailureOr<float> getFloat(llvm::StringRef n, std::optional<float> def) const;
  FailureOr<std::string> getString(llvm::StringRef n, std::optional<std::string> def) const;
  FailureOr<std::optional<std::vector<int64_t>>> getInts(llvm::StringRef n) const;

  size_t numInputs() const { return node.input_size(); }
  /// Whether input i is present; asking marks it as considered (see
  /// unusedInput: every reader of an input goes through here).
  bool hasInput(size_t i) const {
    if ((int)i >= node.input_size())
      return false;
    if (seen.size() <= i)
      seen.resize(i + 1, 0);
    seen[i] = 1;
    return !node.input(i).empty();
  }
  /// The first present input the handler never looked at (-1: none): an
  /// input the op does not take at this opset, which would otherwise be
  /// ignored without a word.
  int unusedInput() const {
    for (int i = 0; i < node.input_size(); ++i)
      if (!node.input(i).empty() && ((size_t)i >= seen.size() || !seen[i]))
        return i;
    return -1;
  }
  mutable std::vector<char> seen;
  /// Output i is deliberately left without a value (nothing may read it).
  void skipOutput(size_t i) const { skipped.insert(i); }
  mutable std::set<size_t> skipped;
  bool hasOutput(size_t i) const { return (int)i < node.output_size() && !node.output(i).empty(); }
  /// The MLIR value of input i (materialising a constant if needed).
  FailureOr<Value> input(size_t i) const;
  Value optInput(size_t i) const;
  /// The compile-time value of input i, which must be known.
  FailureOr<const HostTensor *> constInput(size_t i, llvm::StringRef role) const;
  FailureOr<std::vector<int64_t>> constInts(size_t i, llvm::StringRef role) const;
  /// Binds output i to `v` (an absent output is skipped).
  void setOutput(size_t i, Value v) const;
  void setConstOutput(size_t i, HostTensor t) const;
};

using Handler = std::function<LogicalResult(NodeCtx &)>;

/// One handler of an op, valid from `sinceOpset` until the next version's.
struct OpInfo {
  int sinceOpset;
  Handler handle;
  /// Inputs read as compile-time values (attributes), not as tensors.
  std::vector<int> attributeInputs;
};

/// The ops the importer knows, by name ("Conv"; "<domain>.<op>" outside the
/// default domain, e.g. "com.microsoft.FusedMatMul"), each with one handler
/// per opset range, the way torch-mlir's `patterns.onOp(name, since, fn)`
/// registers them. Every Ops*.cpp / Domain*.cpp file adds its family.
class OpRegistry {
public:
  /// `handle` imports `name` from opset `sinceOpset` on (until a version
  /// registered with a higher `sinceOpset`).
  void on(llvm::StringRef name, int sinceOpset, Handler handle,
          std::vector<int> attributeInputs = {});
  /// The handler for `name` at `opset`; null if the op is unknown or the
  /// opset older than its first version (versions() tells which).
  const OpInfo *lookup(llvm::StringRef name, int64_t opset) const;
  /// Every version of `name`, oldest first; null if the op is unknown.
  const std::vector<OpInfo> *versions(llvm::StringRef name) const;
  const std::map<std::string, std::vector<OpInfo>> &all() const { return ops; }

private:
  std::map<std::string, std::vector<OpInfo>> ops;
};

/// The registry with every family registered (built once).
const OpRegistry &opRegistry();

void registerElementwiseOps(OpRegistry &r);
void registerMatMulOps(OpRegistry &r);
void registerConvPoolOps(OpRegistry &r);
void registerNormalizationOps(OpRegistry &r);
void registerReductionOps(OpRegistry &r);
void registerShapeOps(OpRegistry &r);
void registerSequenceOps(OpRegistry &r);
void registerIndexingOps(OpRegistry &r);
void registerResizeOps(OpRegistry &r);
void registerConstantOps(OpRegistry &r);
void registerRandomOps(OpRegistry &r);
void registerLossOps(OpRegistry &r);
void registerRecurrentOps(OpRegistry &r);
void registerSignalOps(OpRegistry &r);
void registerPreviewTrainingOps(OpRegistry &r);
void registerMicrosoftOps(OpRegistry &r);

struct Importer {
  Importer(MLIRContext *ctx, llvm::StringRef path, onnx::ModelProto &model,
           const ONNXImportOptions &opts)
      : ctx(ctx), path(path.str()), model(model), opts(opts), b(ctx) {
    llvm::SmallString<256> d(path == "-" ? "." : path);
    llvm::sys::path::remove_filename(d);
    dir = d.empty() ? "." : std::string(d);
    fileName = path == "-" ? "<stdin>" : path.str();
  }

  OwningOpRef<ModuleOp> run();

  void error(Location loc, const llvm::Twine &msg) {
    errors.emplace_back(loc, (fileName + ": " + msg).str());
  }
  void errorAt(const llvm::Twine &msg) { error(UnknownLoc::get(ctx), msg); }

  Location fileLoc() { return FileLineColLoc::get(ctx, fileName, 0, 0); }

  FailureOr<Type> elementType(int32_t dtype, const llvm::Twine &what);
  FailureOr<RankedTensorType> valueInfoType(const onnx::ValueInfoProto &vi, const llvm::Twine &what,
                                            SmallVectorImpl<std::string> *dimNames);
  /// A constant op for a host tensor (inline or as a dense_resource blob).
  FailureOr<Value> materialize(const HostTensor &t, llvm::StringRef name, Location loc);
  ElementsAttr elementsAttr(const HostTensor &t, RankedTensorType type, llvm::StringRef name);
  FailureOr<Value> lookup(const std::string &name, Location loc);

  /// Creates `opName` with inferred result types; errors name the node.
  FailureOr<Operation *> create(NodeCtx &n, llvm::StringRef opName, ValueRange operands,
                                ArrayRef<NamedAttribute> attrs, unsigned numResults);
  /// The typed form: an OpTy with inferred result types, or failure (the
  /// rule's error, naming the node, already emitted).
  template <typename OpTy>
  FailureOr<OpTy> tryCreate(NodeCtx &n, ValueRange operands, ArrayRef<NamedAttribute> attrs = {},
                            unsigned numResults = 1) {
    FailureOr<Operation *> op = create(n, OpTy::getOperationName(), operands, attrs, numResults);
    if (failed(op))
      return failure();
    return cast<OpTy>(*op);
  }

  MLIRContext *ctx;
  std::string path, dir, fileName;
  onnx::ModelProto &model;
  const ONNXImportOptions &opts;
  OpBuilder b;
  llvm::StringMap<int64_t> opsets;
  llvm::StringMap<Value> values;
  llvm::StringMap<HostTensor> consts;
  /// ONNX sequences, which live only at import time: their tensors in order.
  llvm::StringMap<SmallVector<Value>> sequences;
  llvm::StringMap<onnx::TensorProto *> initializers;
  llvm::StringSet<> poisoned;
  std::vector<std::pair<Location, std::string>> errors;
  NodeCtx *current = nullptr;
  unsigned blobCounter = 0;
};

//===----------------------------------------------------------------------===//
// Building ops (NodeContext.cpp)
//===----------------------------------------------------------------------===//

NamedAttribute named(NodeCtx &n, llvm::StringRef name, Attribute a);
Attribute i64(NodeCtx &n, int64_t v);
Attribute f32(NodeCtx &n, float v);
Attribute boolean(NodeCtx &n, bool v);
Attribute str(NodeCtx &n, llvm::StringRef v);
Attribute ints(NodeCtx &n, ArrayRef<int64_t> v);
std::string typeString(Type t);

/// `value` (an ONNX string attribute, `what` in messages) as the dialect's
/// enum attribute AttrT, or an error listing the values it takes.
template <typename AttrT>
FailureOr<Attribute> enumAttr(NodeCtx &n, llvm::StringRef what, llvm::StringRef value) {
  using E = decltype(std::declval<AttrT>().getValue());
  if (std::optional<E> e = mlir::amp::symbolizeEnum<E>(value))
    return Attribute(AttrT::get(n.im.ctx, *e));
  std::string all;
  for (unsigned i = 0;; ++i) {
    llvm::StringRef s = mlir::amp::stringifyEnum(static_cast<E>(i));
    if (s.empty())
      break;
    all += (i ? ", " : "") + s.str();
  }
  return n.fail(what + " '" + value + "' is not one of " + all);
}

/// Maps every input to a value; fails if any is missing.
FailureOr<SmallVector<Value>> tensorInputs(NodeCtx &n, std::initializer_list<int> idx);
/// One-result op on the given inputs; binds output 0.
LogicalResult simple(NodeCtx &n, llvm::StringRef opName, std::initializer_list<int> idx,
                     SmallVector<NamedAttribute> attrs = {});
/// Creates `opName` on `operands` and binds its `results` results to the
/// node's outputs in order.
LogicalResult emitAll(NodeCtx &n, llvm::StringRef opName, ValueRange operands,
                      ArrayRef<NamedAttribute> attrs, unsigned results);
/// A two-input op with no attributes.
LogicalResult binary(NodeCtx &n, llvm::StringRef opName);
/// A one-input op with no attributes (but legacy `consumed_inputs`).
LogicalResult unary(NodeCtx &n, llvm::StringRef opName);
/// Handlers for the registry: binary / unary ops named `opName`.
Handler binaryOp(llvm::StringRef opName);
Handler unaryOp(llvm::StringRef opName);

// The same, typed: the op class names the op (simple<ReluOp>(n, {0})).
template <typename OpTy>
LogicalResult simple(NodeCtx &n, std::initializer_list<int> idx,
                     SmallVector<NamedAttribute> attrs = {}) {
  return simple(n, OpTy::getOperationName(), idx, std::move(attrs));
}
template <typename OpTy>
LogicalResult emitAll(NodeCtx &n, ValueRange operands, ArrayRef<NamedAttribute> attrs,
                      unsigned results) {
  return emitAll(n, OpTy::getOperationName(), operands, attrs, results);
}
template <typename OpTy> LogicalResult binary(NodeCtx &n) {
  return binary(n, OpTy::getOperationName());
}
template <typename OpTy> LogicalResult unary(NodeCtx &n) {
  return unary(n, OpTy::getOperationName());
}
template <typename OpTy> Handler binaryOp() { return binaryOp(OpTy::getOperationName()); }
template <typename OpTy> Handler unaryOp() { return unaryOp(OpTy::getOperationName()); }

/// Element-wise ops built one after the other; the first failure sticks
/// (`ok`), later calls return null values.
struct Elementwise {
  NodeCtx &n;
  bool ok = true;
  Value op(llvm::StringRef name, ValueRange ins, ArrayRef<NamedAttribute> attrs = {});
  template <typename OpTy> Value op(ValueRange ins, ArrayRef<NamedAttribute> attrs = {}) {
    return op(OpTy::getOperationName(), ins, attrs);
  }
  /// A rank-0 constant of element type `elt`.
  Value cst(Type elt, double v);
  Value add(Value a, Value b) { return op<AddOp>({a, b}); }
  Value sub(Value a, Value b) { return op<SubOp>({a, b}); }
  Value mul(Value a, Value b) { return op<MulOp>({a, b}); }
  Value div(Value a, Value b) { return op<DivOp>({a, b}); }
  Value sqrt(Value a) { return op<SqrtOp>({a}); }
};

/// Marks the amp ops a handler creates from here on with `amp.class`, the
/// precision class amp-autocast gives them (its report says why): for ops
/// composed of several whose PyTorch counterpart autocast runs in fp32.
struct ClassMark {
  NodeCtx &n;
  Operation *last;
  explicit ClassMark(NodeCtx &n);
  void apply(llvm::StringRef cls);
};

//===----------------------------------------------------------------------===//
// Shared by several families
//===----------------------------------------------------------------------===//

/// Pooling / convolution window attributes shared by Conv and the pools
/// (OpsConvPool.cpp).
LogicalResult windowAttrs(NodeCtx &n, SmallVector<NamedAttribute> &attrs, bool withCeil);
/// The reduction axes: the `axes` attribute before opset `inputSince`,
/// input 1 from it on (OpsReduction.cpp).
FailureOr<std::optional<std::vector<int64_t>>> axesOf(NodeCtx &n, int inputSince);
/// Dropout's ratio and training_mode inputs from input `first` on
/// (OpsRandom.cpp).
LogicalResult dropoutInputs(NodeCtx &n, size_t first, float &ratio, bool &training);
/// The `dtype` attribute as an element type (OpsRandom.cpp).
LogicalResult dtypeAttr(NodeCtx &n, Type &elt);
/// An int64 constant 0, 1, ..., len - 1 laid along `axis` of a rank-`rank`
/// shape (ones elsewhere) (OpsNormalization.cpp).
Value iotaAlong(NodeCtx &n, int64_t len, int64_t axis, int64_t rank);
/// Cast and CastLike (OpsConstants.cpp).
LogicalResult handleCast(NodeCtx &n, bool like = false);
/// An integer HostTensor of ONNX type `dtype` (OpsConstants.cpp).
HostTensor makeInteger(int32_t dtype, std::vector<int64_t> shape,
                       const std::vector<int64_t> &values);

//===----------------------------------------------------------------------===//
// Compile-time folding (ShapeFolding.cpp): success when the node was folded
// into constants; an error it reports fails the node.
//===----------------------------------------------------------------------===//

LogicalResult foldIntegerNode(NodeCtx &n);
LogicalResult foldFloatConcat(NodeCtx &n);
LogicalResult foldDoubleNode(NodeCtx &n);

/// The exporters' multi-node patterns recomposed into single amp ops (GELU,
/// MatMul + bias row), as rewrite patterns (Recompose.cpp).
void populateONNXRecomposePatterns(RewritePatternSet &patterns, const ONNXImportOptions &opts);
void recompose(func::FuncOp f, const ONNXImportOptions &opts);

/// TrainingInfoProto's algorithm graph as the function `train_step`
/// (TrainingInfo.cpp).
LogicalResult importTrainingInfo(llvm::StringRef path, MLIRContext *ctx,
                                 const onnx::ModelProto &model, const ONNXImportOptions &opts,
                                 ModuleOp module, onnx::ModelProto &step);

} // namespace onnx_import

#endif // AMP_LIB_TARGET_ONNX_IMPORTER_H
