//===- ImportONNX.cpp - ONNX model -> amp dialect ------------------------===//
//
// Graph inputs become arguments (`amp.input`), float initializers become
// parameters (`amp.param`, initial value in `amp.init`), graph outputs become
// results (`amp.output`). Every node maps to amp ops through a handler that
// knows the node's opset; result types come from the amp ops' shape rules,
// and value_info, where present, is checked against them. Shape-like inputs
// (Reshape's shape, Slice's bounds, reduction axes, ...) must be constants;
// small constant subgraphs on shapes (Shape, Gather, Concat, ...) are folded.
//
// Errors are collected, not thrown: every unsupported node, every bad tensor
// and every rule a node breaks is reported, each naming the file and the
// node, and nothing is returned.
//
//===----------------------------------------------------------------------===//

#include "llvm/Support/CheckedArithmetic.h"
#include "amp/Target/ONNX/ImportONNX.h"

#include "ONNXModel.h"
#include "ORTCheckpoint.h"

#include "amp/Dialect/AMP/IR/AMPOps.h"
#include "amp/Transforms/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <functional>
#include <set>

using namespace mlir;
using namespace mlir::amp;
using namespace onnx_import;

namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;

bool isFloatType(int32_t dt);
static void fuseGelu(func::FuncOp f);
static void fuseMatMulBias(func::FuncOp f);

struct Importer;

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
  FailureOr<std::string> getString(llvm::StringRef n,
                                   std::optional<std::string> def) const;
  FailureOr<std::optional<std::vector<int64_t>>>
  getInts(llvm::StringRef n) const;

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
  bool hasOutput(size_t i) const {
    return (int)i < node.output_size() && !node.output(i).empty();
  }
  /// The MLIR value of input i (materialising a constant if needed).
  FailureOr<Value> input(size_t i) const;
  Value optInput(size_t i) const;
  /// The compile-time value of input i, which must be known.
  FailureOr<const HostTensor *> constInput(size_t i,
                                           llvm::StringRef role) const;
  FailureOr<std::vector<int64_t>> constInts(size_t i,
                                            llvm::StringRef role) const;
  /// Binds output i to `v` (an absent output is skipped).
  void setOutput(size_t i, Value v) const;
  void setConstOutput(size_t i, HostTensor t) const;
};

using Handler = std::function<LogicalResult(NodeCtx &)>;
struct OpInfo {
  int minOpset;
  Handler handle;
  /// Inputs read as compile-time values (attributes), not as tensors.
  std::vector<int> attributeInputs;
};

const std::map<std::string, OpInfo> &opTable();

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
  FailureOr<RankedTensorType> valueInfoType(const onnx::ValueInfoProto &vi,
                                            const llvm::Twine &what,
                                            SmallVectorImpl<std::string> *dimNames);
  /// A constant op for a host tensor (inline or as a dense_resource blob).
  FailureOr<Value> materialize(const HostTensor &t, llvm::StringRef name,
                               Location loc);
  ElementsAttr elementsAttr(const HostTensor &t, RankedTensorType type,
                            llvm::StringRef name);
  FailureOr<Value> lookup(const std::string &name, Location loc);

  /// Creates `opName` with inferred result types; errors name the node.
  FailureOr<Operation *> create(NodeCtx &n, llvm::StringRef opName,
                                ValueRange operands,
                                ArrayRef<NamedAttribute> attrs,
                                unsigned numResults);

  MLIRContext *ctx;
  std::string path, dir, fileName;
  onnx::ModelProto &model;
  const ONNXImportOptions &opts;
  OpBuilder b;
  llvm::StringMap<int64_t> opsets;
  llvm::StringMap<Value> values;
  llvm::StringMap<HostTensor> consts;
  llvm::StringMap<onnx::TensorProto *> initializers;
  llvm::StringSet<> poisoned;
  std::vector<std::pair<Location, std::string>> errors;
  NodeCtx *current = nullptr;
  unsigned blobCounter = 0;
};

//===----------------------------------------------------------------------===//
// NodeCtx
//===----------------------------------------------------------------------===//

std::string NodeCtx::describe() const {
  return "node '" + name + "' (" + node.op_type() + ", domain " + domain +
         ", opset " + std::to_string(opset) + ")";
}

LogicalResult NodeCtx::fail(const llvm::Twine &msg) const {
  im.error(loc, describe() + ": " + msg);
  return failure();
}

LogicalResult
NodeCtx::allowAttrs(llvm::ArrayRef<llvm::StringRef> known) const {
  bool ok = true;
  for (const auto &a : node.attribute()) {
    if (std::find(known.begin(), known.end(), a.name()) == known.end()) {
      (void)fail("attribute '" + a.name() + "' is not supported by the "
                 "importer's " + node.op_type() + " (known: " +
                 llvm::join(known, ", ") + ")");
      ok = false;
    }
  }
  return success(ok);
}

static const char *attrTypeName(int t) {
  switch (t) {
  case onnx::AttributeProto::FLOAT: return "FLOAT";
  case onnx::AttributeProto::INT: return "INT";
  case onnx::AttributeProto::STRING: return "STRING";
  case onnx::AttributeProto::TENSOR: return "TENSOR";
  case onnx::AttributeProto::GRAPH: return "GRAPH";
  case onnx::AttributeProto::FLOATS: return "FLOATS";
  case onnx::AttributeProto::INTS: return "INTS";
  case onnx::AttributeProto::STRINGS: return "STRINGS";
  case onnx::AttributeProto::TENSORS: return "TENSORS";
  case onnx::AttributeProto::GRAPHS: return "GRAPHS";
  case onnx::AttributeProto::SPARSE_TENSOR: return "SPARSE_TENSOR";
  case onnx::AttributeProto::TYPE_PROTO: return "TYPE_PROTO";
  default: return "UNDEFINED";
  }
}

/// The attribute's type, trusting `type` and falling back to the field that
/// is set (very old files leave `type` empty).
static int attrType(const onnx::AttributeProto &a) {
  if (a.type() != onnx::AttributeProto::UNDEFINED)
    return a.type();
  if (a.has_f()) return onnx::AttributeProto::FLOAT;
  if (a.has_i()) return onnx::AttributeProto::INT;
  if (a.has_s()) return onnx::AttributeProto::STRING;
  if (a.has_t()) return onnx::AttributeProto::TENSOR;
  if (a.ints_size()) return onnx::AttributeProto::INTS;
  if (a.floats_size()) return onnx::AttributeProto::FLOATS;
  return onnx::AttributeProto::UNDEFINED;
}

FailureOr<int64_t> NodeCtx::getInt(llvm::StringRef n,
                                   std::optional<int64_t> def) const {
  const auto *a = attr(n);
  if (!a) {
    if (def)
      return *def;
    return fail("attribute '" + n + "' is required");
  }
  if (attrType(*a) != onnx::AttributeProto::INT)
    return fail("attribute '" + n + "' must be INT, got " +
                attrTypeName(attrType(*a)));
  return a->i();
}

FailureOr<float> NodeCtx::getFloat(llvm::StringRef n,
                                   std::optional<float> def) const {
  const auto *a = attr(n);
  if (!a) {
    if (def)
      return *def;
    return fail("attribute '" + n + "' is required");
  }
  if (attrType(*a) != onnx::AttributeProto::FLOAT)
    return fail("attribute '" + n + "' must be FLOAT, got " +
                attrTypeName(attrType(*a)));
  return a->f();
}

FailureOr<std::string>
NodeCtx::getString(llvm::StringRef n, std::optional<std::string> def) const {
  const auto *a = attr(n);
  if (!a) {
    if (def)
      return *def;
    return fail("attribute '" + n + "' is required");
  }
  if (attrType(*a) != onnx::AttributeProto::STRING)
    return fail("attribute '" + n + "' must be STRING, got " +
                attrTypeName(attrType(*a)));
  return a->s();
}

FailureOr<std::optional<std::vector<int64_t>>>
NodeCtx::getInts(llvm::StringRef n) const {
  const auto *a = attr(n);
  if (!a)
    return std::optional<std::vector<int64_t>>();
  if (attrType(*a) != onnx::AttributeProto::INTS &&
      !(attrType(*a) == onnx::AttributeProto::UNDEFINED && !a->ints_size()))
    return fail("attribute '" + n + "' must be INTS, got " +
                attrTypeName(attrType(*a)));
  return std::optional<std::vector<int64_t>>(
      std::vector<int64_t>(a->ints().begin(), a->ints().end()));
}

FailureOr<Value> NodeCtx::input(size_t i) const {
  if (!hasInput(i))
    return fail("input " + llvm::Twine(i) + " is required");
  return im.lookup(node.input(i), loc);
}

Value NodeCtx::optInput(size_t i) const {
  if (!hasInput(i))
    return {};
  auto v = input(i);
  return succeeded(v) ? *v : Value();
}

FailureOr<const HostTensor *> NodeCtx::constInput(size_t i,
                                                  llvm::StringRef role) const {
  if (!hasInput(i))
    return fail("input " + llvm::Twine(i) + " ('" + role + "') is required");
  auto it = im.consts.find(node.input(i));
  if (it == im.consts.end())
    return fail("input " + llvm::Twine(i) + " ('" + role + "' = '" +
                node.input(i) +
                "') must be a constant (an initializer, a Constant node, or "
                "a graph input bound with --const-input); it is computed at "
                "run time");
  return &it->second;
}

FailureOr<std::vector<int64_t>> NodeCtx::constInts(size_t i,
                                                   llvm::StringRef role) const {
  auto t = constInput(i, role);
  if (failed(t))
    return failure();
  int32_t dt = (*t)->dtype;
  if (dt != onnx::TensorProto::INT64 && dt != onnx::TensorProto::INT32)
    return fail("input " + llvm::Twine(i) + " ('" + role +
                "') must hold INT64 or INT32 values, got " + dataTypeName(dt));
  if ((*t)->shape.size() > 1)
    return fail("input " + llvm::Twine(i) + " ('" + role +
                "') must be a scalar or 1-D");
  return (*t)->toInt64();
}

void NodeCtx::setOutput(size_t i, Value v) const {
  if (hasOutput(i))
    im.values[node.output(i)] = v;
}

void NodeCtx::setConstOutput(size_t i, HostTensor t) const {
  if (hasOutput(i))
    im.consts[node.output(i)] = std::move(t);
}

//===----------------------------------------------------------------------===//
// Importer helpers
//===----------------------------------------------------------------------===//

FailureOr<Type> Importer::elementType(int32_t dtype, const llvm::Twine &what) {
  switch (dtype) {
  case onnx::TensorProto::FLOAT: return b.getF32Type();
  case onnx::TensorProto::FLOAT16: return b.getF16Type();
  case onnx::TensorProto::BFLOAT16: return b.getBF16Type();
  case onnx::TensorProto::BOOL: return b.getI1Type();
  case onnx::TensorProto::INT8: return b.getIntegerType(8);
  case onnx::TensorProto::INT16: return b.getIntegerType(16);
  case onnx::TensorProto::INT32: return b.getIntegerType(32);
  case onnx::TensorProto::INT64: return b.getIntegerType(64);
  case onnx::TensorProto::UINT8: return b.getIntegerType(8, false);
  case onnx::TensorProto::UINT16: return b.getIntegerType(16, false);
  case onnx::TensorProto::UINT32: return b.getIntegerType(32, false);
  case onnx::TensorProto::UINT64: return b.getIntegerType(64, false);
  default:
    if (current)
      (void)current->fail(what + " has element type " + dataTypeName(dtype) +
                          ", which amp does not support (supported: FLOAT, "
                          "FLOAT16, BFLOAT16, BOOL and the integer types)");
    else
      errorAt(what + " has element type " + dataTypeName(dtype) +
              ", which amp does not support (supported: FLOAT, FLOAT16, "
              "BFLOAT16, BOOL and the integer types)");
    return failure();
  }
}

FailureOr<RankedTensorType>
Importer::valueInfoType(const onnx::ValueInfoProto &vi, const llvm::Twine &what,
                        SmallVectorImpl<std::string> *dimNames) {
  if (!vi.has_type() || !vi.type().has_tensor_type()) {
    errorAt(what + " '" + vi.name() +
            "' is not a tensor (sequences, maps and optionals are not "
            "supported) or has no type");
    return failure();
  }
  const auto &tt = vi.type().tensor_type();
  auto elt = elementType(tt.elem_type(), what + " '" + vi.name() + "'");
  if (failed(elt))
    return failure();
  if (!tt.has_shape()) {
    errorAt(what + " '" + vi.name() +
            "' has no shape; the importer needs at least its rank");
    return failure();
  }
  SmallVector<int64_t> shape;
  for (const auto &d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) {
        errorAt(what + " '" + vi.name() + "' has a negative dimension " +
                llvm::Twine(d.dim_value()));
        return failure();
      }
      shape.push_back(d.dim_value());
      if (dimNames)
        dimNames->push_back("");
    } else {
      shape.push_back(kDyn);
      if (dimNames)
        dimNames->push_back(d.has_dim_param() ? d.dim_param() : "");
    }
  }
  return RankedTensorType::get(shape, *elt);
}

ElementsAttr Importer::elementsAttr(const HostTensor &t, RankedTensorType type,
                                    llvm::StringRef name) {
  int64_t n = t.numElements();
  Type elt = type.getElementType();
  if (elt.isInteger(1)) {
    SmallVector<bool> bits(n);
    for (int64_t i = 0; i < n; ++i)
      bits[i] = t.data()[i] != 0;
    return DenseElementsAttr::get(type, ArrayRef<bool>(bits));
  }
  ArrayRef<char> raw(t.data(), t.bytes->size());
  if (n <= opts.inlineElementLimit)
    return DenseElementsAttr::getFromRawBuffer(type, raw);
  size_t align = elementSize(t.dtype);
  // Adopt the bytes when they are aligned (they usually are: heap memory);
  // the blob keeps the buffer alive.
  AsmResourceBlob blob;
  if (reinterpret_cast<uintptr_t>(t.data()) % align == 0) {
    std::shared_ptr<std::string> keep = t.bytes;
    blob = AsmResourceBlob(
        raw, align,
        [keep](void *, size_t, size_t) mutable { keep.reset(); },
        /*dataIsMutable=*/false);
  } else {
    blob = HeapAsmResourceBlob::allocateAndCopyWithAlign(raw, align);
  }
  std::string key = name.empty() ? "constant" : name.str();
  return DenseResourceElementsAttr::get(type, key, std::move(blob));
}

FailureOr<Value> Importer::materialize(const HostTensor &t,
                                       llvm::StringRef name, Location loc) {
  auto elt = elementType(t.dtype, "constant '" + name + "'");
  if (failed(elt))
    return failure();
  auto type = RankedTensorType::get(t.shape, *elt);
  auto attr = elementsAttr(t, type, name);
  return arith::ConstantOp::create(b, loc, type, cast<TypedAttr>(attr))
      .getResult();
}

FailureOr<Value> Importer::lookup(const std::string &name, Location loc) {
  auto it = values.find(name);
  if (it != values.end())
    return it->second;
  auto c = consts.find(name);
  if (c != consts.end()) {
    // Constants are materialised once, at the top of the function.
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(b.getInsertionBlock());
    auto v = materialize(c->second, name, NameLoc::get(b.getStringAttr(name), fileLoc()));
    if (failed(v))
      return failure();
    values[name] = *v;
    return *v;
  }
  // The graph checks ran before: a name with no value here was produced by
  // a node that failed, which reported its own error.
  return failure();
}

FailureOr<Operation *> Importer::create(NodeCtx &n, llvm::StringRef opName,
                                        ValueRange operands,
                                        ArrayRef<NamedAttribute> attrs,
                                        unsigned numResults) {
  // Shape-rule errors go to the context's diagnostics; capture them so that
  // they are reported with the node that caused them.
  std::string captured;
  Operation *op;
  {
    ScopedDiagnosticHandler h(ctx, [&](Diagnostic &d) {
      if (!captured.empty())
        captured += "; ";
      captured += d.str();
      return success();
    });
    op = createWithInferredTypes(b, n.loc, opName, operands, attrs, numResults);
  }
  if (!op)
    return n.fail(captured.empty() ? "cannot infer the result types of " + opName
                                   : llvm::Twine(captured));
  return op;
}

//===----------------------------------------------------------------------===//
// Op handlers
//===----------------------------------------------------------------------===//

NamedAttribute named(NodeCtx &n, llvm::StringRef name, Attribute a) {
  return NamedAttribute(StringAttr::get(n.im.ctx, name), a);
}
Attribute i64(NodeCtx &n, int64_t v) { return n.im.b.getI64IntegerAttr(v); }
Attribute f32(NodeCtx &n, float v) { return n.im.b.getF32FloatAttr(v); }
Attribute boolean(NodeCtx &n, bool v) { return n.im.b.getBoolAttr(v); }
Attribute str(NodeCtx &n, llvm::StringRef v) {
  return n.im.b.getStringAttr(v);
}
Attribute ints(NodeCtx &n, ArrayRef<int64_t> v) {
  return n.im.b.getDenseI64ArrayAttr(v);
}

/// Maps every input to a value; fails if any is missing.
FailureOr<SmallVector<Value>> tensorInputs(NodeCtx &n,
                                           std::initializer_list<int> idx) {
  SmallVector<Value> out;
  for (int i : idx) {
    auto v = n.input(i);
    if (failed(v))
      return failure();
    out.push_back(*v);
  }
  return out;
}

/// One-result op on the given inputs; binds output 0.
LogicalResult simple(NodeCtx &n, llvm::StringRef opName,
                     std::initializer_list<int> idx,
                     SmallVector<NamedAttribute> attrs = {}) {
  auto in = tensorInputs(n, idx);
  if (failed(in))
    return failure();
  auto op = n.im.create(n, opName, *in, attrs, 1);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  return success();
}

/// Creates `opName` on `operands` and binds its `results` results to the
/// node's outputs in order.
LogicalResult emitAll(NodeCtx &n, llvm::StringRef opName, ValueRange operands,
                      ArrayRef<NamedAttribute> attrs, unsigned results) {
  auto op = n.im.create(n, opName, operands, attrs, results);
  if (failed(op))
    return failure();
  for (unsigned i = 0; i < results; ++i)
    n.setOutput(i, (*op)->getResult(i));
  return success();
}

LogicalResult binary(NodeCtx &n, llvm::StringRef opName) {
  if (failed(n.allowAttrs({})))
    return failure();
  return simple(n, opName, {0, 1});
}

static std::string typeString(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

/// Add, Sub, Mul, Div, Pow before opset 7: no numpy broadcasting, but with
/// broadcast = 1 B broadcasts to A's shape with its dims placed from `axis`
/// (default: at the end), size-1 dims stretching; with broadcast = 0 the
/// shapes must be equal.
LogicalResult legacyBinary(NodeCtx &n, llvm::StringRef opName) {
  if (n.opset >= 7)
    return binary(n, opName);
  if (failed(n.allowAttrs({"broadcast", "axis", "consumed_inputs"})))
    return failure();
  auto bc = n.getInt("broadcast", 0);
  auto a = n.input(0), b = n.input(1);
  if (failed(bc) || failed(a) || failed(b))
    return failure();
  auto at = cast<RankedTensorType>(a->getType()), bt = cast<RankedTensorType>(b->getType());
  Value rhs = *b;
  if (*bc == 0) {
    if (at.getShape() != bt.getShape())
      return n.fail("broadcast = 0 (before opset 7) needs equal shapes, got " + typeString(at) + " and " +
                    typeString(bt));
  } else {
    int64_t ra = at.getRank(), rb = bt.getRank();
    auto ax = n.getInt("axis", ra - rb);
    if (failed(ax))
      return failure();
    int64_t axis = *ax < 0 ? *ax + ra : *ax;
    bool fits = rb <= ra && axis >= 0 && axis + rb <= ra;
    for (int64_t i = 0; fits && i < rb; ++i)
      fits = bt.getDimSize(i) == 1 || bt.getDimSize(i) == at.getDimSize(axis + i);
    if (!fits)
      return n.fail("B " + typeString(bt) + " does not fit A " + typeString(at) + " from axis " +
                    llvm::Twine(*ax));
    if (rb < ra) {
      if (!bt.hasStaticShape())
        return n.fail("needs B's static shape");
      SmallVector<int64_t> shape(axis, 1);
      llvm::append_range(shape, bt.getShape());
      shape.resize(ra, 1);
      auto r = n.im.create(n, "amp.reshape", {rhs}, {named(n, "shape", ints(n, shape))}, 1);
      if (failed(r))
        return failure();
      rhs = (*r)->getResult(0);
    }
  }
  auto op = n.im.create(n, opName, {*a, rhs}, {}, 1);
  if (failed(op))
    return failure();
  Value y = (*op)->getResult(0);
  if (cast<RankedTensorType>(y.getType()).getShape() != at.getShape())
    return n.fail("B " + typeString(bt) + " does not broadcast to A " + typeString(at) + " (one way)");
  n.setOutput(0, y);
  return success();
}

LogicalResult unary(NodeCtx &n, llvm::StringRef opName) {
  // consumed_inputs: a legacy (opset < 6) hint with no semantics.
  if (failed(n.allowAttrs({"consumed_inputs"})))
    return failure();
  return simple(n, opName, {0});
}

/// Pooling / convolution window attributes shared by Conv and the pools.
LogicalResult windowAttrs(NodeCtx &n, SmallVector<NamedAttribute> &attrs,
                          bool withCeil) {
  auto autoPad = n.getString("auto_pad", std::string("NOTSET"));
  auto dil = n.getInts("dilations");
  auto pads = n.getInts("pads");
  auto strides = n.getInts("strides");
  auto ks = n.getInts("kernel_shape");
  if (failed(autoPad) || failed(dil) || failed(pads) || failed(strides) ||
      failed(ks))
    return failure();
  attrs.push_back(named(n, "auto_pad", str(n, *autoPad)));
  if (*dil)
    attrs.push_back(named(n, "dilations", ints(n, **dil)));
  if (*pads)
    attrs.push_back(named(n, "pads", ints(n, **pads)));
  if (*strides)
    attrs.push_back(named(n, "strides", ints(n, **strides)));
  if (*ks)
    attrs.push_back(named(n, "kernel_shape", ints(n, **ks)));
  if (withCeil) {
    auto ceil = n.getInt("ceil_mode", 0);
    if (failed(ceil))
      return failure();
    attrs.push_back(named(n, "ceil_mode", boolean(n, *ceil != 0)));
  }
  return success();
}

LogicalResult handleGemm(NodeCtx &n) {
  if (failed(n.allowAttrs({"alpha", "beta", "transA", "transB", "broadcast"})))
    return failure();
  auto alpha = n.getFloat("alpha", 1.0f), beta = n.getFloat("beta", 1.0f);
  auto ta = n.getInt("transA", 0), tb = n.getInt("transB", 0);
  if (failed(alpha) || failed(beta) || failed(ta) || failed(tb))
    return failure();
  auto a = n.input(0), bb = n.input(1);
  if (failed(a) || failed(bb))
    return failure();
  SmallVector<Value> operands{*a, *bb};
  if (Value c = n.optInput(2))
    operands.push_back(c);
  else if (n.hasInput(2))
    return failure();
  auto op = n.im.create(n, "amp.gemm", operands,
                        {named(n, "alpha", f32(n, *alpha)),
                         named(n, "beta", f32(n, *beta)),
                         named(n, "trans_a", boolean(n, *ta != 0)),
                         named(n, "trans_b", boolean(n, *tb != 0))},
                        1);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  return success();
}

LogicalResult handleConv(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "dilations", "group", "kernel_shape",
                           "pads", "strides"})))
    return failure();
  SmallVector<NamedAttribute> attrs;
  auto group = n.getInt("group", 1);
  if (failed(group) || failed(windowAttrs(n, attrs, false)))
    return failure();
  attrs.push_back(named(n, "group", i64(n, *group)));
  auto x = n.input(0), w = n.input(1);
  if (failed(x) || failed(w))
    return failure();
  SmallVector<Value> operands{*x, *w};
  if (n.hasInput(2)) {
    auto bias = n.input(2);
    if (failed(bias))
      return failure();
    operands.push_back(*bias);
  }
  auto op = n.im.create(n, "amp.conv", operands, attrs, 1);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  return success();
}

/// ConvTranspose with explicit pads: auto_pad and output_shape resolved as
/// the ONNX spec gives them (total padding split evenly, the odd one at the
/// end for SAME_UPPER, at the start for SAME_LOWER and for NOTSET with
/// output_shape); padding "removed" below zero at the end becomes output
/// padding, as PyTorch's output_size argument does.
LogicalResult handleConvTranspose(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                           "output_shape", "pads", "strides"})))
    return failure();
  auto autoPad = n.getString("auto_pad", std::string("NOTSET"));
  auto group = n.getInt("group", 1);
  auto dilA = n.getInts("dilations"), padA = n.getInts("pads"), strA = n.getInts("strides"),
       ksA = n.getInts("kernel_shape"), opA = n.getInts("output_padding"),
       osA = n.getInts("output_shape");
  if (failed(autoPad) || failed(group) || failed(dilA) || failed(padA) || failed(strA) ||
      failed(ksA) || failed(opA) || failed(osA))
    return failure();
  auto x = n.input(0), w = n.input(1);
  if (failed(x) || failed(w))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(x->getType());
  auto wt = dyn_cast<RankedTensorType>(w->getType());
  if (!xt || !wt || !xt.hasStaticShape() || !wt.hasStaticShape())
    return n.fail("needs static shapes of X and W");
  int64_t rank = xt.getRank(), sp = rank - 2;
  if (rank < 3 || wt.getRank() != rank)
    return n.fail("X must be [N, C, D1, ...] and W of the same rank");
  auto perDim = [&](const std::optional<std::vector<int64_t>> &a, size_t len, const char *what,
                    int64_t dflt, SmallVector<int64_t> &out) -> LogicalResult {
    if (!a) {
      out.assign(len, dflt);
      return success();
    }
    if (a->size() != len)
      return n.fail(llvm::Twine(what) + " must have " + llvm::Twine(len) + " values");
    out.assign(a->begin(), a->end());
    return success();
  };
  SmallVector<int64_t> dil, strides, kernel, outPad, pads;
  if (failed(perDim(*dilA, sp, "dilations", 1, dil)) ||
      failed(perDim(*strA, sp, "strides", 1, strides)) ||
      failed(perDim(*opA, sp, "output_padding", 0, outPad)))
    return failure();
  kernel.assign(wt.getShape().begin() + 2, wt.getShape().end());
  if (*ksA && ArrayRef<int64_t>(**ksA) != ArrayRef<int64_t>(kernel))
    return n.fail("kernel_shape does not match W's spatial dims");
  const std::string &ap = *autoPad;
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID")
    return n.fail("auto_pad '" + ap + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  std::optional<std::vector<int64_t>> outShape = *osA;
  if (outShape && outShape->size() == (size_t)rank)
    outShape = std::vector<int64_t>(outShape->begin() + 2, outShape->end());
  if (outShape && outShape->size() != (size_t)sp)
    return n.fail("output_shape must have one value per spatial dim");
  if (outShape || ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    pads.assign(2 * sp, 0);
    for (int64_t i = 0; i < sp; ++i) {
      int64_t in = xt.getDimSize(2 + i);
      int64_t target = outShape ? (*outShape)[i] : in * strides[i];
      int64_t total = strides[i] * (in - 1) + outPad[i] + (kernel[i] - 1) * dil[i] + 1 - target;
      // total // 2 rounded toward minus infinity, as the reference's Python.
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      bool lower = ap != "SAME_UPPER";
      pads[i] = lower ? total - half : half;
      pads[sp + i] = lower ? half : total - half;
      if (pads[sp + i] < 0) { // a larger output: extra rows at the end
        outPad[i] -= pads[sp + i];
        pads[sp + i] = 0;
      }
      if (pads[i] < 0)
        return n.fail("output_shape " + llvm::Twine(target) + " for spatial dim " + llvm::Twine(i) +
                      " needs padding before the first row, which is not supported");
    }
  } else if (ap == "VALID") {
    pads.assign(2 * sp, 0);
  } else if (failed(perDim(*padA, 2 * sp, "pads", 0, pads))) {
    return failure();
  }
  for (int64_t i = 0; i < sp; ++i)
    if (outPad[i] < 0 || outPad[i] >= strides[i])
      return n.fail("output padding " + llvm::Twine(outPad[i]) + " of spatial dim " + llvm::Twine(i) +
                    " must be less than its stride " + llvm::Twine(strides[i]) +
                    " (a larger one is not supported)");
  SmallVector<Value> operands{*x, *w};
  if (n.hasInput(2)) {
    auto bias = n.input(2);
    if (failed(bias))
      return failure();
    operands.push_back(*bias);
  }
  SmallVector<NamedAttribute> attrs{named(n, "dilations", ints(n, dil)),
                                    named(n, "group", i64(n, *group)),
                                    named(n, "output_padding", ints(n, outPad)),
                                    named(n, "pads", ints(n, pads)),
                                    named(n, "strides", ints(n, strides))};
  auto op = n.im.create(n, "amp.conv_transpose", operands, attrs, 1);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  return success();
}

LogicalResult handleBatchNorm(NodeCtx &n) {
  if (failed(n.allowAttrs({"epsilon", "momentum", "training_mode", "spatial",
                           "is_test", "consumed_inputs"})))
    return failure();
  auto eps = n.getFloat("epsilon", 1e-5f), mom = n.getFloat("momentum", 0.9f);
  auto spatial = n.getInt("spatial", 1);
  if (failed(eps) || failed(mom) || failed(spatial))
    return failure();
  if (*spatial != 1)
    return n.fail("spatial = 0 (per-activation statistics) is not supported");
  bool training;
  if (n.opset >= 14) {
    auto tm = n.getInt("training_mode", 0);
    if (failed(tm))
      return failure();
    training = *tm != 0;
  } else {
    training = n.hasOutput(1) || n.hasOutput(2);
  }
  if (n.hasOutput(3) || n.hasOutput(4))
    return n.fail("the saved_mean / saved_var outputs (opset < 14 training) "
                  "are not supported; export with opset >= 14");
  auto in = tensorInputs(n, {0, 1, 2, 3, 4});
  if (failed(in))
    return failure();
  auto op = n.im.create(n, "amp.batch_norm", *in,
                        {named(n, "epsilon", f32(n, *eps)),
                         named(n, "momentum", f32(n, *mom)),
                         named(n, "training_mode", boolean(n, training))},
                        3);
  if (failed(op))
    return failure();
  for (int i = 0; i < 3; ++i)
    n.setOutput(i, (*op)->getResult(i));
  return success();
}

LogicalResult handleMaxPool(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "ceil_mode", "dilations",
                           "kernel_shape", "pads", "storage_order",
                           "strides"})))
    return failure();
  SmallVector<NamedAttribute> attrs;
  auto so = n.getInt("storage_order", 0);
  if (failed(so) || failed(windowAttrs(n, attrs, true)))
    return failure();
  if (!n.attr("kernel_shape"))
    return n.fail("attribute 'kernel_shape' is required");
  attrs.push_back(named(n, "storage_order", i64(n, *so)));
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto op = n.im.create(n, "amp.max_pool", {*x}, attrs, 2);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  n.setOutput(1, (*op)->getResult(1));
  return success();
}

LogicalResult handleAveragePool(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "ceil_mode", "count_include_pad",
                           "dilations", "kernel_shape", "pads", "strides"})))
    return failure();
  SmallVector<NamedAttribute> attrs;
  auto cip = n.getInt("count_include_pad", 0);
  if (failed(cip) || failed(windowAttrs(n, attrs, true)))
    return failure();
  if (!n.attr("kernel_shape"))
    return n.fail("attribute 'kernel_shape' is required");
  attrs.push_back(named(n, "count_include_pad", boolean(n, *cip != 0)));
  return simple(n, "amp.average_pool", {0}, attrs);
}

LogicalResult handleSoftmax(NodeCtx &n, llvm::StringRef opName) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto axis = n.getInt("axis", n.opset >= 13 ? -1 : 1);
  auto x = n.input(0);
  if (failed(axis) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t rank = xt.getRank();
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  if (n.opset >= 13 || a == rank - 1)
    return simple(n, opName, {0}, {named(n, "axis", i64(n, *axis))});
  // Before opset 13 the input is coerced to 2-D at `axis` and normalised
  // over the second dim: flatten, normalise the last dim, reshape back.
  if (!xt.hasStaticShape())
    return n.fail("opset < 13 Softmax with axis != rank - 1 needs a static "
                  "input shape");
  auto flat = n.im.create(n, "amp.flatten", {*x},
                          {named(n, "axis", i64(n, *axis))}, 1);
  if (failed(flat))
    return failure();
  auto sm = n.im.create(n, opName, {(*flat)->getResult(0)},
                        {named(n, "axis", i64(n, -1))}, 1);
  if (failed(sm))
    return failure();
  auto back = n.im.create(n, "amp.reshape", {(*sm)->getResult(0)},
                          {named(n, "shape", ints(n, xt.getShape()))}, 1);
  if (failed(back))
    return failure();
  n.setOutput(0, (*back)->getResult(0));
  return success();
}

LogicalResult handleLayerNorm(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis", "epsilon", "stash_type"})))
    return failure();
  auto axis = n.getInt("axis", -1);
  auto eps = n.getFloat("epsilon", 1e-5f);
  auto stash = n.getInt("stash_type", 1);
  auto x = n.input(0), s = n.input(1);
  if (failed(axis) || failed(eps) || failed(stash) || failed(x) || failed(s))
    return failure();
  SmallVector<Value> operands{*x, *s};
  if (n.hasInput(2)) {
    auto bias = n.input(2);
    if (failed(bias))
      return failure();
    operands.push_back(*bias);
  }
  auto op = n.im.create(n, "amp.layer_norm", operands,
                        {named(n, "axis", i64(n, *axis)),
                         named(n, "epsilon", f32(n, *eps)),
                         named(n, "stash_type", i64(n, *stash))},
                        3);
  if (failed(op))
    return failure();
  for (int i = 0; i < 3; ++i)
    n.setOutput(i, (*op)->getResult(i));
  return success();
}

/// InstanceNormalization: layer_norm over the spatial dims (axis 2, unit
/// scale, no bias; its f32 statistics and gradient), then the per-channel
/// scale and bias, reshaped to [C, 1, ...].
LogicalResult handleInstanceNorm(NodeCtx &n) {
  if (failed(n.allowAttrs({"epsilon"})))
    return failure();
  auto eps = n.getFloat("epsilon", 1e-5f);
  auto x = n.input(0), s = n.input(1), b = n.input(2);
  if (failed(eps) || failed(x) || failed(s) || failed(b))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (xt.getRank() < 3 || !xt.hasStaticShape())
    return n.fail("the input must be [N, C, D...] with a static shape");
  int64_t c = xt.getDimSize(1);
  for (auto [v, what] : {std::make_pair(*s, "scale"), std::make_pair(*b, "B")}) {
    auto vt = cast<RankedTensorType>(v.getType());
    if (vt.getRank() != 1 || vt.getDimSize(0) != c)
      return n.fail(llvm::Twine("'") + what + "' must have shape [" + llvm::Twine(c) + "]");
  }
  auto ot = RankedTensorType::get(xt.getShape().drop_front(2), xt.getElementType());
  Value ones = arith::ConstantOp::create(n.im.b, n.loc, ot,
                                         DenseElementsAttr::get(ot, n.im.b.getFloatAttr(xt.getElementType(), 1.0)));
  auto ln = n.im.create(n, "amp.layer_norm", {*x, ones},
                        {named(n, "axis", i64(n, 2)), named(n, "epsilon", f32(n, *eps))}, 3);
  if (failed(ln))
    return failure();
  SmallVector<int64_t> cs(xt.getRank() - 1, 1);
  cs[0] = c;
  SmallVector<Value> sb;
  for (Value v : {*s, *b}) {
    auto r = n.im.create(n, "amp.reshape", {v}, {named(n, "shape", ints(n, cs))}, 1);
    if (failed(r))
      return failure();
    sb.push_back((*r)->getResult(0));
  }
  auto mul = n.im.create(n, "amp.mul", {(*ln)->getResult(0), sb[0]}, {}, 1);
  if (failed(mul))
    return failure();
  return emitAll(n, "amp.add", {(*mul)->getResult(0), sb[1]}, {}, 1);
}

/// Axes from the attribute (old opsets) or the constant input 1 (new ones).
FailureOr<std::optional<std::vector<int64_t>>>
axesOf(NodeCtx &n, int inputSince) {
  if (n.opset >= inputSince) {
    if (n.attr("axes"))
      return n.fail("'axes' is an input since opset " +
                    llvm::Twine(inputSince) + ", not an attribute");
    if (!n.hasInput(1))
      return std::optional<std::vector<int64_t>>();
    auto v = n.constInts(1, "axes");
    if (failed(v))
      return failure();
    return std::optional<std::vector<int64_t>>(*v);
  }
  if (n.numInputs() > 1) // ignoring it would reduce / squeeze other axes
    return n.fail("has a second input, but 'axes' is an input only since opset " +
                  llvm::Twine(inputSince) + " (this model imports opset " +
                  llvm::Twine(n.opset) + "): use the 'axes' attribute");
  return n.getInts("axes");
}

LogicalResult handleReduce(NodeCtx &n, llvm::StringRef opName,
                           int axesInputSince) {
  if (failed(n.allowAttrs({"axes", "keepdims", "noop_with_empty_axes"})))
    return failure();
  auto keep = n.getInt("keepdims", 1);
  auto noop = n.getInt("noop_with_empty_axes", 0);
  auto axes = axesOf(n, axesInputSince);
  if (failed(keep) || failed(noop) || failed(axes))
    return failure();
  SmallVector<NamedAttribute> attrs{
      named(n, "keepdims", boolean(n, *keep != 0)),
      named(n, "noop_with_empty_axes", boolean(n, *noop != 0))};
  if (*axes)
    attrs.push_back(named(n, "axes", ints(n, **axes)));
  return simple(n, opName, {0}, attrs);
}

LogicalResult handleReshape(NodeCtx &n) {
  if (failed(n.allowAttrs({"allowzero", "shape", "consumed_inputs"})))
    return failure();
  auto az = n.getInt("allowzero", 0);
  if (failed(az))
    return failure();
  std::vector<int64_t> shape;
  if (n.opset < 5) {
    auto s = n.getInts("shape");
    if (failed(s))
      return failure();
    if (!*s)
      return n.fail("attribute 'shape' is required");
    shape = **s;
  } else {
    auto s = n.constInts(1, "shape");
    if (failed(s))
      return failure();
    shape = *s;
  }
  return simple(n, "amp.reshape", {0},
                {named(n, "shape", ints(n, shape)),
                 named(n, "allowzero", boolean(n, *az != 0))});
}

LogicalResult handleSlice(NodeCtx &n) {
  if (failed(n.allowAttrs({"starts", "ends", "axes"})))
    return failure();
  std::vector<int64_t> starts, ends;
  std::optional<std::vector<int64_t>> axes, steps;
  if (n.opset < 10) {
    auto s = n.getInts("starts"), e = n.getInts("ends"), a = n.getInts("axes");
    if (failed(s) || failed(e) || failed(a))
      return failure();
    if (!*s || !*e)
      return n.fail("attributes 'starts' and 'ends' are required");
    starts = **s;
    ends = **e;
    axes = *a;
  } else {
    auto s = n.constInts(1, "starts"), e = n.constInts(2, "ends");
    if (failed(s) || failed(e))
      return failure();
    starts = *s;
    ends = *e;
    if (n.hasInput(3)) {
      auto a = n.constInts(3, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
    if (n.hasInput(4)) {
      auto st = n.constInts(4, "steps");
      if (failed(st))
        return failure();
      steps = *st;
    }
  }
  SmallVector<NamedAttribute> attrs{named(n, "starts", ints(n, starts)),
                                    named(n, "ends", ints(n, ends))};
  if (axes)
    attrs.push_back(named(n, "axes", ints(n, *axes)));
  if (steps)
    attrs.push_back(named(n, "steps", ints(n, *steps)));
  return simple(n, "amp.slice", {0}, attrs);
}

LogicalResult handleSqueeze(NodeCtx &n, bool unsqueeze) {
  if (failed(n.allowAttrs({"axes"})))
    return failure();
  auto axes = axesOf(n, 13);
  if (failed(axes))
    return failure();
  SmallVector<NamedAttribute> attrs;
  if (*axes)
    attrs.push_back(named(n, "axes", ints(n, **axes)));
  else if (unsqueeze)
    return n.fail("'axes' is required");
  return simple(n, unsqueeze ? "amp.unsqueeze" : "amp.squeeze", {0}, attrs);
}

/// Dropout's (and DropoutGrad's) constant `ratio` and `training_mode`
/// inputs at `first` and `first + 1`, where present (else unchanged).
LogicalResult dropoutInputs(NodeCtx &n, size_t first, float &ratio, bool &training) {
  if (n.hasInput(first)) {
    auto r = n.constInput(first, "ratio");
    if (failed(r))
      return failure();
    if ((*r)->numElements() != 1)
      return n.fail("'ratio' must hold one value");
    ratio = (float)(*r)->toDouble()[0];
  }
  if (n.hasInput(first + 1)) {
    auto t = n.constInput(first + 1, "training_mode");
    if (failed(t))
      return failure();
    if ((*t)->numElements() != 1)
      return n.fail("'training_mode' must hold one value");
    training = (*t)->toInt64()[0] != 0;
  }
  return success();
}

/// The element type the node's optional `dtype` attribute names, else `elt`.
LogicalResult dtypeAttr(NodeCtx &n, Type &elt) {
  if (!n.attr("dtype"))
    return success();
  auto dt = n.getInt("dtype", std::nullopt);
  if (failed(dt))
    return failure();
  auto t = n.im.elementType((int32_t)*dt, "dtype");
  if (failed(t))
    return failure();
  elt = *t;
  return success();
}

/// A random op's optional `seed` (kept for the record), or a null attribute.
FailureOr<FloatAttr> seedAttr(NodeCtx &n) {
  if (!n.attr("seed"))
    return FloatAttr();
  auto sv = n.getFloat("seed", std::nullopt);
  if (failed(sv))
    return failure();
  return n.im.b.getF32FloatAttr(*sv);
}

/// RandomNormal / RandomUniform and their Like forms: amp.random_normal /
/// amp.random_uniform of the shape the node gives (or its input's, which
/// must be static), in `dtype` (the input's type by default for the Like
/// forms, f32 for the others; f32, f16 or bf16).
LogicalResult handleRandom(NodeCtx &n) {
  llvm::StringRef op = n.node.op_type();
  bool normal = op.starts_with("RandomNormal"), like = op.ends_with("Like");
  if (failed(n.allowAttrs(like ? (normal ? llvm::ArrayRef<llvm::StringRef>{"dtype", "mean", "scale", "seed"}
                                         : llvm::ArrayRef<llvm::StringRef>{"dtype", "low", "high", "seed"})
                               : (normal ? llvm::ArrayRef<llvm::StringRef>{"dtype", "mean", "scale", "seed", "shape"}
                                         : llvm::ArrayRef<llvm::StringRef>{"dtype", "low", "high", "seed", "shape"}))))
    return failure();
  auto a = n.getFloat(normal ? "mean" : "low", 0.0f);
  auto bv = n.getFloat(normal ? "scale" : "high", 1.0f);
  if (failed(a) || failed(bv))
    return failure();
  if (!std::isfinite(*a) || !std::isfinite(*bv))
    return n.fail(llvm::Twine(normal ? "mean and scale" : "low and high") + " must be finite");
  if (!normal && *a > *bv)
    return n.fail("low " + std::to_string(*a) + " is above high " + std::to_string(*bv));
  SmallVector<int64_t> shape;
  Type elt = n.im.b.getF32Type();
  if (like) {
    auto x = n.input(0);
    if (failed(x))
      return failure();
    auto xt = cast<RankedTensorType>(x->getType());
    if (!xt.hasStaticShape())
      return n.fail("needs an input of static shape, got " + typeString(xt));
    shape.assign(xt.getShape().begin(), xt.getShape().end());
    elt = xt.getElementType();
  } else {
    auto sh = n.getInts("shape");
    if (failed(sh))
      return failure();
    if (!*sh)
      return n.fail("needs the 'shape' attribute");
    for (int64_t d : **sh)
      if (d < 0)
        return n.fail("'shape' has a negative dimension " + llvm::Twine(d));
    shape.assign((*sh)->begin(), (*sh)->end());
  }
  if (failed(dtypeAttr(n, elt)))
    return failure();
  if (!isa<Float32Type, Float16Type, BFloat16Type>(elt))
    return n.fail("unsupported op ai.onnx." + op + " of element type " + typeString(elt) +
                  " (f32, f16 or bf16; the Like forms take the input's type unless dtype is given)");
  auto seedOr = seedAttr(n);
  if (failed(seedOr))
    return failure();
  FloatAttr seed = *seedOr;
  auto rt = RankedTensorType::get(shape, elt);
  Value v = normal ? RandomNormalOp::create(n.im.b, n.loc, rt, n.im.b.getF32FloatAttr(*a),
                                            n.im.b.getF32FloatAttr(*bv), seed)
                         .getResult()
                   : RandomUniformOp::create(n.im.b, n.loc, rt, n.im.b.getF32FloatAttr(*a),
                                             n.im.b.getF32FloatAttr(*bv), seed)
                         .getResult();
  n.setOutput(0, v);
  return success();
}

/// Bernoulli: amp.bernoulli of the float probabilities, then a cast to
/// `dtype` when it differs (an integer or boolean dtype gives 0 / 1).
LogicalResult handleBernoulli(NodeCtx &n) {
  if (failed(n.allowAttrs({"dtype", "seed"})))
    return failure();
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (!isa<Float32Type, Float16Type, BFloat16Type>(xt.getElementType()))
    return n.fail("unsupported op ai.onnx.Bernoulli on " + typeString(xt) + " (f32, f16 or bf16 probabilities)");
  Type elt = xt.getElementType();
  if (failed(dtypeAttr(n, elt)))
    return failure();
  auto seed = seedAttr(n);
  if (failed(seed))
    return failure();
  SmallVector<NamedAttribute> attrs;
  if (*seed)
    attrs.push_back(named(n, "seed", *seed));
  auto op = n.im.create(n, "amp.bernoulli", {*x}, attrs, 1);
  if (failed(op))
    return failure();
  Value v = (*op)->getResult(0);
  if (elt != xt.getElementType())
    v = CastOp::create(n.im.b, n.loc, RankedTensorType::get(xt.getShape(), elt), v);
  n.setOutput(0, v);
  return success();
}

LogicalResult handleDropout(NodeCtx &n) {
  if (failed(n.allowAttrs({"ratio", "seed", "is_test", "consumed_inputs"})))
    return failure();
  float ratio = 0.5f;
  bool training = false;
  if (n.opset < 12) {
    auto r = n.getFloat("ratio", 0.5f);
    auto t = n.getInt("is_test", 0);
    if (failed(r) || failed(t))
      return failure();
    ratio = *r;
    // Before opset 7 `is_test` = 0 meant training; since 7 Dropout is
    // inference-only unless the runtime says otherwise.
    training = n.opset < 7 && *t == 0;
  } else {
    if (failed(dropoutInputs(n, 1, ratio, training)))
      return failure();
  }
  auto seed = n.attr("seed") ? n.getInt("seed", 0) : FailureOr<int64_t>(-1);
  if (failed(seed))
    return failure();
  SmallVector<NamedAttribute> attrs{
      named(n, "ratio", f32(n, ratio)),
      named(n, "training_mode", boolean(n, training))};
  if (n.attr("seed"))
    attrs.push_back(named(n, "seed", i64(n, *seed)));
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto op = n.im.create(n, "amp.dropout", {*x}, attrs, 2);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  n.setOutput(1, (*op)->getResult(1));
  return success();
}

LogicalResult handleLoss(NodeCtx &n, llvm::StringRef opName, int results) {
  if (failed(n.allowAttrs({"reduction", "ignore_index"})))
    return failure();
  auto red = n.getString("reduction", std::string("mean"));
  if (failed(red))
    return failure();
  SmallVector<NamedAttribute> attrs{named(n, "reduction", str(n, *red))};
  if (n.attr("ignore_index")) {
    auto ii = n.getInt("ignore_index", 0);
    if (failed(ii))
      return failure();
    attrs.push_back(named(n, "ignore_index", i64(n, *ii)));
  }
  auto s = n.input(0), l = n.input(1);
  if (failed(s) || failed(l))
    return failure();
  SmallVector<Value> operands{*s, *l};
  if (n.hasInput(2)) {
    auto w = n.input(2);
    if (failed(w))
      return failure();
    operands.push_back(*w);
  }
  auto op = n.im.create(n, opName, operands, attrs, results);
  if (failed(op))
    return failure();
  for (int i = 0; i < results; ++i)
    n.setOutput(i, (*op)->getResult(i));
  return success();
}

/// Cast (`to`), or CastLike (input 1's element type; `like`).
/// An INT64 or INT32 constant of `values`.
static HostTensor makeInteger(int32_t dtype, std::vector<int64_t> shape,
                              const std::vector<int64_t> &values) {
  HostTensor t = makeInt64(std::move(shape), values);
  if (dtype == onnx::TensorProto::INT32) {
    t.dtype = dtype;
    auto bytes = std::make_shared<std::string>(values.size() * 4, '\0');
    for (size_t i = 0; i < values.size(); ++i) {
      int32_t x = (int32_t)values[i];
      std::memcpy(bytes->data() + 4 * i, &x, 4);
    }
    t.bytes = bytes;
  }
  return t;
}

LogicalResult handleCast(NodeCtx &n, bool like = false) {
  if (failed(n.allowAttrs(like ? llvm::ArrayRef<llvm::StringRef>{"saturate"}
                               : llvm::ArrayRef<llvm::StringRef>{"to", "saturate"})))
    return failure();
  FailureOr<int64_t> to = failure();
  Type likeElt;
  if (like) {
    if (!n.hasInput(1))
      return n.fail("input 1 ('target_type') is required");
    auto c1 = n.im.consts.find(n.node.input(1));
    if (c1 != n.im.consts.end()) {
      to = c1->second.dtype;
    } else {
      auto target = n.input(1);
      if (failed(target))
        return failure();
      likeElt = getElementTypeOrSelf(target->getType());
      // An integer target folds a constant input like Cast does (torch.export
      // writes CastLike(0.0, input_ids) for arange bounds); otherwise the
      // type is likeElt: no folding below.
      to = likeElt.isSignlessInteger(64)   ? onnx::TensorProto::INT64
           : likeElt.isSignlessInteger(32) ? onnx::TensorProto::INT32
                                           : -1;
    }
  } else {
    to = n.getInt("to", std::nullopt);
  }
  if (failed(to))
    return failure();
  // A cast of a compile-time integer (shape arithmetic) stays a constant,
  // and so does a small float constant cast to an integer (torch.export's
  // CastLike(0.0, int64) for arange bounds): truncated toward zero.
  auto c = n.im.consts.find(n.hasInput(0) ? n.node.input(0) : "");
  if (c != n.im.consts.end() && elementSize(*to) &&
      (*to == onnx::TensorProto::INT64 || *to == onnx::TensorProto::INT32)) {
    bool isFloat = c->second.dtype == onnx::TensorProto::FLOAT ||
                   c->second.dtype == onnx::TensorProto::DOUBLE ||
                   c->second.dtype == onnx::TensorProto::FLOAT16 ||
                   c->second.dtype == onnx::TensorProto::BFLOAT16;
    std::optional<std::vector<int64_t>> v;
    if (!isFloat) {
      v = c->second.toInt64();
    } else if (c->second.numElements() <= (1 << 16)) {
      v.emplace();
      for (double d : c->second.toDouble()) {
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) {
          v.reset(); // undefined in ONNX: left to the op
          break;
        }
        v->push_back((int64_t)std::trunc(d));
      }
    }
    if (v) {
      n.setConstOutput(0, makeInteger((int32_t)*to, c->second.shape, *v));
      return success();
    }
  }
  // (A DOUBLE constant cast to a float type was folded before the handler:
  // foldDoubleNode.)
  auto elt = likeElt ? FailureOr<Type>(likeElt)
                     : n.im.elementType((int32_t)*to, "the cast's target type");
  auto x = n.input(0);
  if (failed(elt) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  auto op = CastOp::create(n.im.b, n.loc, RankedTensorType::get(xt.getShape(), *elt), *x);
  n.setOutput(0, op.getResult());
  return success();
}

LogicalResult handleConstant(NodeCtx &n) {
  if (n.node.attribute_size() != 1)
    return n.fail("needs exactly one of value, value_float(s), value_int(s)");
  const auto &a = n.node.attribute(0);
  HostTensor t;
  if (a.name() == "value") {
    onnx::TensorProto copy = a.t();
    auto d = decodeTensor(copy, n.im.dir, n.name);
    if (!d)
      return n.fail(llvm::toString(d.takeError()));
    t = std::move(*d);
  } else if (a.name() == "value_int") {
    t = makeInt64({}, {a.i()});
  } else if (a.name() == "value_ints") {
    t = makeInt64({(int64_t)a.ints_size()},
                  std::vector<int64_t>(a.ints().begin(), a.ints().end()));
  } else if (a.name() == "value_float" || a.name() == "value_floats") {
    std::vector<float> v;
    if (a.name() == "value_float")
      v.push_back(a.f());
    else
      v.assign(a.floats().begin(), a.floats().end());
    t.dtype = onnx::TensorProto::FLOAT;
    if (a.name() == "value_floats")
      t.shape = {(int64_t)v.size()};
    t.bytes = std::make_shared<std::string>(v.size() * 4, '\0');
    if (!v.empty()) // (an empty vector's data() may be null)
      std::memcpy(t.bytes->data(), v.data(), v.size() * 4);
  } else {
    return n.fail("attribute '" + a.name() +
                  "' is not supported (sparse or string constants)");
  }
  n.setConstOutput(0, std::move(t));
  return success();
}

/// ConstantOfShape with a constant shape: a constant tensor filled with
/// `value`'s one element (float 0 when absent).
LogicalResult handleConstantOfShape(NodeCtx &n) {
  if (failed(n.allowAttrs({"value"})))
    return failure();
  if (n.hasInput(0) && !n.im.consts.count(n.node.input(0)))
    return n.fail("unsupported op ai.onnx.ConstantOfShape on a shape computed at run time (only a "
                  "constant shape folds: export with static shapes)");
  auto shape = n.constInts(0, "input");
  if (failed(shape))
    return failure();
  HostTensor fill;
  if (const onnx::AttributeProto *a = n.attr("value")) {
    if (a->type() != onnx::AttributeProto::TENSOR)
      return n.fail("attribute 'value' must be a TENSOR");
    onnx::TensorProto copy = a->t();
    auto d = decodeTensor(copy, n.im.dir, n.name + " value");
    if (!d)
      return n.fail(llvm::toString(d.takeError()));
    fill = std::move(*d);
    if (fill.numElements() != 1)
      return n.fail("attribute 'value' must hold one element");
  } else {
    fill.dtype = onnx::TensorProto::FLOAT;
    fill.bytes = std::make_shared<std::string>(4, '\0');
  }
  int64_t count = 1;
  for (int64_t d : *shape) {
    if (d < 0)
      return n.fail("the shape has a negative dimension " + llvm::Twine(d));
    if (d && count > ((int64_t)1 << 30) / d)
      return n.fail("the shape asks for more than 2^30 elements");
    count *= d;
  }
  size_t es = elementSize(fill.dtype);
  if (!es)
    return n.fail(llvm::Twine("attribute 'value' has element type ") + dataTypeName(fill.dtype));
  if ((uint64_t)count * es > ((uint64_t)1 << 30))
    return n.fail("the constant would take more than 1 GiB");
  HostTensor t;
  t.dtype = fill.dtype;
  t.shape = *shape;
  t.bytes = std::make_shared<std::string>((size_t)count * es, '\0');
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(t.bytes->data() + i * es, fill.data(), es);
  n.setConstOutput(0, std::move(t));
  return success();
}

/// Shape of a statically shaped value, folded to a constant.
LogicalResult handleShape(NodeCtx &n) {
  if (failed(n.allowAttrs({"start", "end"})))
    return failure();
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto t = cast<RankedTensorType>(x->getType());
  int64_t r = t.getRank();
  auto start = n.getInt("start", 0), end = n.getInt("end", r);
  if (failed(start) || failed(end))
    return failure();
  int64_t s = std::clamp<int64_t>(*start < 0 ? *start + r : *start, 0, r);
  int64_t e = std::clamp<int64_t>(*end < 0 ? *end + r : *end, 0, r);
  std::vector<int64_t> dims;
  for (int64_t i = s; i < e; ++i) {
    if (t.isDynamicDim(i))
      return n.fail("the shape of '" + n.node.input(0) + "' (" +
                    llvm::Twine(i) +
                    "-th dim) is only known at run time; shapes computed at "
                    "run time are not supported (export with static shapes)");
    dims.push_back(t.getDimSize(i));
  }
  n.setConstOutput(0, makeInt64({(int64_t)dims.size()}, dims));
  return success();
}

/// Size: the element count of a statically shaped input, a constant.
LogicalResult handleSize(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto t = cast<RankedTensorType>(x->getType());
  if (!t.hasStaticShape())
    return n.fail("the size of '" + n.node.input(0) +
                  "' is only known at run time; sizes computed at run time are not "
                  "supported (export with static shapes)");
  n.setConstOutput(0, makeInt64({}, {t.getNumElements()}));
  return success();
}

/// A Concat of 1-D FLOAT constants (torch's training-mode export writes
/// Resize's scales so) is a FLOAT constant.
LogicalResult foldFloatConcat(NodeCtx &n) {
  if (n.node.op_type() != "Concat" || n.node.input_size() == 0)
    return failure();
  auto out = std::make_shared<std::string>();
  int64_t count = 0;
  for (int i = 0; i < n.node.input_size(); ++i) {
    auto it = n.im.consts.find(n.node.input(i));
    if (it == n.im.consts.end() || it->second.dtype != onnx::TensorProto::FLOAT ||
        it->second.shape.size() != 1)
      return failure();
    out->append(it->second.data(), (size_t)it->second.numElements() * 4);
    count += it->second.numElements();
  }
  HostTensor t;
  t.dtype = onnx::TensorProto::FLOAT;
  t.shape = {count};
  t.bytes = out;
  n.setConstOutput(0, std::move(t));
  return success();
}

/// Integer constant folding for the small shape subgraphs exporters emit.
/// Returns success() with the output bound when it folded, failure() when
/// it did not apply (the node is then imported as an op).
static HostTensor makeBool(std::vector<int64_t> shape, const std::vector<int64_t> &values) {
  HostTensor t;
  t.dtype = onnx::TensorProto::BOOL;
  t.shape = std::move(shape);
  t.bytes = std::make_shared<std::string>(values.size(), '\0');
  for (size_t i = 0; i < values.size(); ++i)
    (*t.bytes)[i] = values[i] != 0;
  return t;
}

/// numpy broadcasting of small constants: the result's shape and, per
/// operand, the flat index of its element for each result element.
static bool broadcastConsts(ArrayRef<const HostTensor *> ts, std::vector<int64_t> &shape,
                            std::vector<std::vector<int64_t>> &index) {
  size_t rank = 0;
  for (const HostTensor *t : ts)
    rank = std::max(rank, t->shape.size());
  shape.assign(rank, 1);
  for (const HostTensor *t : ts)
    for (size_t k = 0; k < t->shape.size(); ++k) {
      int64_t d = t->shape[k], &o = shape[rank - t->shape.size() + k];
      if (d != 1 && o != 1 && d != o)
        return false;
      if (d != 1)
        o = d;
    }
  int64_t total = 1;
  for (int64_t d : shape)
    total *= d;
  if (total > (1 << 16))
    return false; // shape arithmetic only
  index.assign(ts.size(), std::vector<int64_t>(total));
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < total; ++e) {
    for (size_t q = 0; q < ts.size(); ++q) {
      const auto &sh = ts[q]->shape;
      int64_t off = 0;
      for (size_t k = 0; k < sh.size(); ++k)
        off = off * sh[k] + (sh[k] == 1 ? 0 : idx[rank - sh.size() + k]);
      index[q][e] = off;
    }
    for (int64_t d = (int64_t)rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
  return true;
}

/// A float tensor of `dtype` (FLOAT, DOUBLE, FLOAT16, BFLOAT16) holding
/// `values` rounded to nearest even.
static HostTensor makeFloat(int32_t dtype, std::vector<int64_t> shape,
                            const std::vector<double> &values) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  size_t es = elementSize(dtype);
  t.bytes = std::make_shared<std::string>(values.size() * es, '\0');
  const llvm::fltSemantics &sem = dtype == onnx::TensorProto::FLOAT16    ? APFloat::IEEEhalf()
                                  : dtype == onnx::TensorProto::BFLOAT16 ? APFloat::BFloat()
                                  : dtype == onnx::TensorProto::FLOAT    ? APFloat::IEEEsingle()
                                                                         : APFloat::IEEEdouble();
  for (size_t i = 0; i < values.size(); ++i) {
    APFloat a(values[i]);
    bool lost;
    a.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    uint64_t bits = a.bitcastToAPInt().getZExtValue();
    std::memcpy(&(*t.bytes)[i * es], &bits, es);
  }
  return t;
}

/// DOUBLE constants: the runtime has no f64, and exporters write them only
/// for compile-time scalars (transformers' sdpa attention: the scale as
/// Constant(DOUBLE) -> Sqrt -> Cast(FLOAT)). A node whose inputs are all
/// constants and one of them DOUBLE is computed here in double (unary and
/// binary element-wise ops with broadcasting, Cast, the movement ops on a
/// single value); its output is a constant of the node's type, rounded once.
/// A DOUBLE value that reaches an op this cannot fold is an error there.
LogicalResult foldDoubleNode(NodeCtx &n) {
  const std::string &op = n.node.op_type();
  std::vector<const HostTensor *> in;
  bool anyDouble = false;
  for (int i = 0; i < n.node.input_size(); ++i) {
    if (n.node.input(i).empty())
      return failure();
    auto it = n.im.consts.find(n.node.input(i));
    if (it == n.im.consts.end())
      return failure();
    anyDouble |= it->second.dtype == onnx::TensorProto::DOUBLE;
    in.push_back(&it->second);
  }
  if (!anyDouble || in.empty() || in[0]->numElements() > (1 << 16))
    return failure();
  std::vector<double> x = in[0]->toDouble();
  auto unary = [&](double (*f)(double)) {
    for (double &v : x)
      v = f(v);
    n.setConstOutput(0, makeFloat(in[0]->dtype, in[0]->shape, x));
    return success();
  };
  if (in.size() == 1) {
    if (op == "Sqrt") return unary([](double v) { return std::sqrt(v); });
    if (op == "Neg") return unary([](double v) { return -v; });
    if (op == "Abs") return unary([](double v) { return std::fabs(v); });
    if (op == "Reciprocal") return unary([](double v) { return 1.0 / v; });
    if (op == "Exp") return unary([](double v) { return std::exp(v); });
    if (op == "Log") return unary([](double v) { return std::log(v); });
    if (op == "Floor") return unary([](double v) { return std::floor(v); });
    if (op == "Ceil") return unary([](double v) { return std::ceil(v); });
    if (op == "Identity") return unary([](double v) { return v; });
    if (op == "Cast") {
      auto to = n.getInt("to", std::nullopt);
      if (failed(to))
        return failure();
      int32_t dt = (int32_t)*to;
      if (dt == onnx::TensorProto::FLOAT || dt == onnx::TensorProto::DOUBLE ||
          dt == onnx::TensorProto::FLOAT16 || dt == onnx::TensorProto::BFLOAT16) {
        n.setConstOutput(0, makeFloat(dt, in[0]->shape, x));
        return success();
      }
      return failure(); // to an integer: handleCast folds it
    }
    return failure();
  }
  bool binary = op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" ||
                op == "Min" || op == "Max";
  if (binary && in.size() == 2) {
    if (in[0]->dtype != in[1]->dtype)
      return failure();
    std::vector<int64_t> shape;
    std::vector<std::vector<int64_t>> index;
    if (!broadcastConsts(in, shape, index))
      return failure();
    std::vector<double> y = in[1]->toDouble(), r(index[0].size());
    for (size_t e = 0; e < r.size(); ++e) {
      double p = x[index[0][e]], q = y[index[1][e]];
      r[e] = op == "Add"   ? p + q
             : op == "Sub" ? p - q
             : op == "Mul" ? p * q
             : op == "Div" ? p / q
             : op == "Pow" ? std::pow(p, q)
             : op == "Min" ? (std::isnan(p) || std::isnan(q) ? NAN : std::min(p, q))
                           : (std::isnan(p) || std::isnan(q) ? NAN : std::max(p, q));
    }
    n.setConstOutput(0, makeFloat(in[0]->dtype, shape, r));
    return success();
  }
  if ((op == "Unsqueeze" || op == "Squeeze" || op == "Reshape") && in.size() == 2 &&
      in[0]->numElements() == 1 && n.opset >= 13) {
    // A single value takes the shape the op gives it: all ones.
    size_t rank = in[0]->shape.size();
    if (op == "Unsqueeze")
      rank += in[1]->numElements();
    else if (op == "Squeeze")
      rank = in[1]->numElements() ? rank - std::min<size_t>(rank, in[1]->numElements()) : 0;
    else
      rank = in[1]->numElements();
    n.setConstOutput(0, makeFloat(in[0]->dtype, std::vector<int64_t>(rank, 1), x));
    return success();
  }
  return failure();
}

LogicalResult foldIntegerNode(NodeCtx &n) {
  const std::string &op = n.node.op_type();
  std::vector<const HostTensor *> in;
  // Boolean constants take part where the op is about them (comparisons'
  // results feeding a Where: torch's expand(-1) pattern).
  bool boolOp = op == "Where" || op == "Not" || op == "And" || op == "Or" || op == "Xor";
  for (int i = 0; i < n.node.input_size(); ++i) {
    if (n.node.input(i).empty()) {
      in.push_back(nullptr);
      continue;
    }
    auto it = n.im.consts.find(n.node.input(i));
    if (it == n.im.consts.end())
      return failure();
    int32_t dt = it->second.dtype;
    bool isBool = dt == onnx::TensorProto::BOOL;
    if (dt != onnx::TensorProto::INT64 && dt != onnx::TensorProto::INT32 && !(isBool && boolOp))
      return failure();
    if (boolOp && isBool != (op != "Where" || i == 0))
      return failure(); // Where: a boolean condition and integer values; the others all boolean
    in.push_back(&it->second);
  }
  if (in.empty() || !in[0])
    return failure();
  auto vals = [](const HostTensor *t) { return t->toInt64(); };
  bool compare = op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" ||
                 op == "GreaterOrEqual";
  // Min / Max: variadic, of one type (T5's relative-position buckets: Min
  // of two constant int64 tables).
  bool minMax = (op == "Min" || op == "Max") &&
                llvm::all_of(in, [&](const HostTensor *t) { return t && t->dtype == in[0]->dtype; });
  if ((compare || op == "And" || op == "Or" || op == "Xor" || op == "Where" || minMax) &&
      llvm::all_of(in, [](const HostTensor *t) { return t != nullptr; }) &&
      (minMax || in.size() == (op == "Where" ? 3u : 2u))) {
    std::vector<int64_t> shape;
    std::vector<std::vector<int64_t>> index;
    if (!broadcastConsts(in, shape, index))
      return failure();
    std::vector<std::vector<int64_t>> v;
    for (const HostTensor *t : in)
      v.push_back(vals(t));
    std::vector<int64_t> r(index[0].size());
    for (size_t e = 0; e < r.size(); ++e) {
      if (minMax) {
        r[e] = v[0][index[0][e]];
        for (size_t k = 1; k < in.size(); ++k)
          r[e] = op == "Min" ? std::min(r[e], v[k][index[k][e]]) : std::max(r[e], v[k][index[k][e]]);
        continue;
      }
      int64_t p = v[0][index[0][e]], q = v[1][index[1][e]];
      if (op == "Equal") r[e] = p == q;
      else if (op == "Less") r[e] = p < q;
      else if (op == "Greater") r[e] = p > q;
      else if (op == "LessOrEqual") r[e] = p <= q;
      else if (op == "GreaterOrEqual") r[e] = p >= q;
      else if (op == "And") r[e] = p && q;
      else if (op == "Or") r[e] = p || q;
      else if (op == "Xor") r[e] = (p != 0) != (q != 0);
      else r[e] = p ? q : v[2][index[2][e]];
    }
    n.setConstOutput(0, minMax          ? makeInteger(in[0]->dtype, shape, r)
                        : op == "Where" ? makeInt64(shape, r)
                                        : makeBool(shape, r));
    return success();
  }
  if (op == "Not") {
    auto v = vals(in[0]);
    for (int64_t &x : v)
      x = !x;
    n.setConstOutput(0, makeBool(in[0]->shape, v));
    return success();
  }
  if (boolOp)
    return failure();
  if (op == "Identity") {
    n.setConstOutput(0, *in[0]);
    return success();
  }
  if (op == "Neg" || op == "Abs") {
    auto v = vals(in[0]);
    for (int64_t &x : v)
      x = op == "Abs" && x >= 0 ? x : (int64_t)(0 - (uint64_t)x);
    n.setConstOutput(0, makeInteger(in[0]->dtype, in[0]->shape, v));
    return success();
  }

  if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes;
    if (n.opset >= 13) {
      if (in.size() > 1 && in[1])
        axes = vals(in[1]);
    } else if (auto a = n.attr("axes")) {
      axes.assign(a->ints().begin(), a->ints().end());
    }
    std::vector<int64_t> shape = in[0]->shape;
    if (op == "Unsqueeze") {
      int64_t r = shape.size() + axes.size();
      for (int64_t &a : axes)
        if (a < 0)
          a += r;
      std::sort(axes.begin(), axes.end());
      for (int64_t a : axes) {
        if (a < 0 || a > (int64_t)shape.size())
          return failure();
        shape.insert(shape.begin() + a, 1);
      }
    } else {
      std::vector<int64_t> out;
      int64_t r = shape.size();
      for (int64_t i = 0; i < r; ++i) {
        bool drop = axes.empty()
                        ? shape[i] == 1
                        : std::find_if(axes.begin(), axes.end(), [&](int64_t a) {
                            return (a < 0 ? a + r : a) == i;
                          }) != axes.end();
        if (!drop)
          out.push_back(shape[i]);
      }
      shape = out;
    }
    n.setConstOutput(0, makeInt64(shape, vals(in[0])));
    return success();
  }
  if (op == "Slice" && n.opset >= 10 && in.size() >= 3 && in[1] && in[2]) {
    // Any rank, ONNX's clamping rules (torch's F.pad pads go through a
    // reversed 2-D slice).
    auto starts = vals(in[1]), ends = vals(in[2]);
    int64_t rank = in[0]->shape.size();
    std::vector<int64_t> axes = in.size() > 3 && in[3] ? vals(in[3]) : std::vector<int64_t>();
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i)
        axes.push_back(i);
    std::vector<int64_t> steps = in.size() > 4 && in[4] ? vals(in[4])
                                                        : std::vector<int64_t>(starts.size(), 1);
    if (starts.size() != ends.size() || starts.size() != axes.size() ||
        starts.size() != steps.size() || rank == 0)
      return failure();
    std::vector<int64_t> b(rank, 0), st(rank, 1), cnt = in[0]->shape;
    std::vector<bool> seen(rank, false);
    auto clampTo = [](int64_t x, int64_t lo, int64_t hi) { return std::max(lo, std::min(x, hi)); };
    for (size_t k = 0; k < axes.size(); ++k) {
      int64_t ax = axes[k] < 0 ? axes[k] + rank : axes[k];
      if (ax < 0 || ax >= rank || seen[ax] || steps[k] == 0)
        return failure();
      seen[ax] = true;
      int64_t dim = in[0]->shape[ax], step = steps[k];
      int64_t lo = starts[k] < 0 ? starts[k] + dim : starts[k];
      int64_t hi = ends[k] < 0 ? ends[k] + dim : ends[k];
      if (step > 0) {
        lo = clampTo(lo, 0, dim);
        hi = clampTo(hi, 0, dim);
        cnt[ax] = hi > lo ? (hi - lo + step - 1) / step : 0;
      } else {
        lo = clampTo(lo, 0, dim - 1);
        hi = clampTo(hi, -1, dim - 1);
        cnt[ax] = lo > hi ? (lo - hi - step - 1) / -step : 0;
      }
      b[ax] = lo;
      st[ax] = step;
    }
    auto v = vals(in[0]);
    std::vector<int64_t> strides(rank, 1);
    for (int64_t d = rank - 2; d >= 0; --d)
      strides[d] = strides[d + 1] * in[0]->shape[d + 1];
    int64_t total = 1;
    for (int64_t c : cnt)
      total *= c;
    std::vector<int64_t> out;
    out.reserve(total);
    std::vector<int64_t> idx(rank, 0);
    for (int64_t e = 0; e < total; ++e) {
      int64_t off = 0;
      for (int64_t d = 0; d < rank; ++d)
        off += (b[d] + idx[d] * st[d]) * strides[d];
      out.push_back(v[off]);
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (++idx[d] < cnt[d])
          break;
        idx[d] = 0;
      }
    }
    n.setConstOutput(0, makeInt64(cnt, out));
    return success();
  }
  if (op == "Transpose") {
    int64_t rank = in[0]->shape.size();
    std::vector<int64_t> perm;
    if (auto a = n.attr("perm"))
      perm.assign(a->ints().begin(), a->ints().end());
    else
      for (int64_t d = rank - 1; d >= 0; --d)
        perm.push_back(d);
    if ((int64_t)perm.size() != rank)
      return failure();
    std::vector<int64_t> shape(rank), strides(rank, 1);
    for (int64_t d = rank - 2; d >= 0; --d)
      strides[d] = strides[d + 1] * in[0]->shape[d + 1];
    std::vector<bool> used(rank, false);
    for (int64_t d = 0; d < rank; ++d) {
      if (perm[d] < 0 || perm[d] >= rank || used[perm[d]])
        return failure();
      used[perm[d]] = true;
      shape[d] = in[0]->shape[perm[d]];
    }
    auto v = vals(in[0]);
    std::vector<int64_t> out;
    out.reserve(v.size());
    std::vector<int64_t> idx(rank, 0);
    for (size_t e = 0; e < v.size(); ++e) {
      int64_t off = 0;
      for (int64_t d = 0; d < rank; ++d)
        off += idx[d] * strides[perm[d]];
      out.push_back(v[off]);
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (++idx[d] < shape[d])
          break;
        idx[d] = 0;
      }
    }
    n.setConstOutput(0, makeInt64(shape, out));
    return success();
  }
  if (op == "Reshape" && n.opset >= 5 && in.size() == 2 && in[1] && in[1]->shape.size() == 1) {
    // ONNX's rules: 0 copies the input's dim (unless allowzero), -1 is
    // inferred; anything inconsistent is left to the op's own checks.
    auto allowZero = n.getInt("allowzero", 0);
    if (failed(allowZero))
      return failure();
    std::vector<int64_t> shape = vals(in[1]);
    int64_t known = 1, infer = -1, count = in[0]->numElements();
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !*allowZero) {
        if (i >= in[0]->shape.size())
          return failure();
        shape[i] = in[0]->shape[i];
      }
      if (shape[i] == -1) {
        if (infer >= 0)
          return failure();
        infer = i;
      } else if (shape[i] < 0) {
        return failure();
      } else {
        std::optional<int64_t> k = llvm::checkedMul(known, shape[i]);
        if (!k)
          return failure(); // the op's own shape rules report it
        known = *k;
      }
    }
    if (infer >= 0) {
      if (known == 0 || count % known)
        return failure();
      shape[infer] = count / known;
    } else if (known != count) {
      return failure();
    }
    n.setConstOutput(0, makeInt64(shape, vals(in[0])));
    return success();
  }
  if (op == "Concat") {
    std::vector<int64_t> out;
    for (const HostTensor *t : in) {
      if (!t || t->shape.size() != 1)
        return failure();
      auto v = vals(t);
      out.insert(out.end(), v.begin(), v.end());
    }
    n.setConstOutput(0, makeInt64({(int64_t)out.size()}, out));
    return success();
  }
  if (op == "Gather") {
    if (in.size() < 2 || !in[1] || in[0]->shape.size() != 1)
      return failure();
    auto data = vals(in[0]), idx = vals(in[1]);
    std::vector<int64_t> out;
    int64_t len = data.size();
    for (int64_t i : idx) {
      if (i < -len || i >= len)
        return n.fail("index " + llvm::Twine(i) + " is out of range for " +
                      llvm::Twine(len) + " values");
      out.push_back(data[i < 0 ? i + len : i]);
    }
    n.setConstOutput(0, makeInt64(in[1]->shape, out));
    return success();
  }
  if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Mod") &&
      in.size() == 2 && in[1]) {
    // Same shapes, or one side a single value of no higher rank (broadcast).
    const HostTensor *x = in[0], *y = in[1];
    bool same = x->shape == y->shape;
    bool xOne = x->numElements() == 1 && x->shape.size() <= y->shape.size();
    bool yOne = y->numElements() == 1 && y->shape.size() <= x->shape.size();
    if ((!same && !xOne && !yOne) || x->dtype != y->dtype)
      return failure(); // (mixed types: the op's own rules report them)
    auto fmod = n.getInt("fmod", 0);
    if (failed(fmod))
      return failure();
    auto a = vals(x), c = vals(y);
    const auto &shape = same || yOne ? x->shape : y->shape;
    std::vector<int64_t> r(std::max(a.size(), c.size()));
    for (size_t i = 0; i < r.size(); ++i) {
      int64_t p = a[a.size() == 1 ? 0 : i], q = c[c.size() == 1 ? 0 : i];
      if ((op == "Div" || op == "Mod") && q == 0)
        return n.fail("integer division by zero in a shape computation");
      // Checked: a folded value that wraps is a wrong shape, not a result.
      std::optional<int64_t> v;
      if (op == "Add") v = llvm::checkedAdd(p, q);
      else if (op == "Sub") v = llvm::checkedSub(p, q);
      else if (op == "Mul") v = llvm::checkedMul(p, q);
      else if (op == "Div") {
        if (!(p == INT64_MIN && q == -1))
          v = p / q; // truncates, as ONNX's integer Div
      } else {
        v = 0;
      }
      if (!v)
        return n.fail("integer overflow folding " + llvm::Twine(p) + " " + op + " " +
                      llvm::Twine(q) + " (the int64 result wraps)");
      if (x->dtype == onnx::TensorProto::INT32 && (*v < INT32_MIN || *v > INT32_MAX))
        return n.fail("integer overflow folding " + llvm::Twine(p) + " " + op + " " +
                      llvm::Twine(q) + " (the int32 result wraps)");
      r[i] = *v;
      if (op == "Mod") { // the divisor's sign (fmod=0, Python's %), or the dividend's (fmod=1)
        r[i] = q == -1 ? 0 : p % q;
        if (*fmod == 0 && r[i] != 0 && ((r[i] < 0) != (q < 0)))
          r[i] += q;
      }
    }
    n.setConstOutput(0, makeInteger(x->dtype, shape, r));
    return success();
  }
  return failure();
}

//===----------------------------------------------------------------------===//
// ai.onnx.preview.training: Adagrad, Momentum, Adam as elementwise amp ops
// (the formulas of the ONNX operator reference, which are not PyTorch's).
// R (learning rate) and T (update count) are run-time scalars; "T > 0" is
// read as T != 0.
//===----------------------------------------------------------------------===//

namespace {
struct Elementwise {
  NodeCtx &n;
  bool ok = true;
  Value op(llvm::StringRef name, ValueRange ins, ArrayRef<NamedAttribute> attrs = {}) {
    if (!ok || llvm::any_of(ins, [](Value v) { return !v; })) {
      ok = false;
      return Value();
    }
    auto r = n.im.create(n, name, ins, attrs, 1);
    if (failed(r)) {
      ok = false;
      return Value();
    }
    return (*r)->getResult(0);
  }
  Value cst(Type elt, double v) {
    auto t = RankedTensorType::get({}, elt);
    return arith::ConstantOp::create(n.im.b, n.loc, t,
                                     DenseElementsAttr::get(t, n.im.b.getFloatAttr(elt, v)));
  }
  Value add(Value a, Value b) { return op("amp.add", {a, b}); }
  Value sub(Value a, Value b) { return op("amp.sub", {a, b}); }
  Value mul(Value a, Value b) { return op("amp.mul", {a, b}); }
  Value div(Value a, Value b) { return op("amp.div", {a, b}); }
  Value sqrt(Value a) { return op("amp.sqrt", {a}); }
};

/// R, T and the n groups of `groups` tensors; T as a float and as "T != 0".
struct TrainingInputs {
  Value r, tf, tNonZero;
  SmallVector<SmallVector<Value>> group; // group[k][i]: k-th input kind of tensor i
};

FailureOr<TrainingInputs> trainingInputs(NodeCtx &n, unsigned groups, unsigned outGroups) {
  size_t count = n.numInputs();
  if (count < 2 + groups || (count - 2) % groups != 0)
    return n.fail("needs R, T and " + llvm::Twine(groups) + " inputs per optimized tensor, got " +
                  llvm::Twine(count) + " inputs");
  size_t k = (count - 2) / groups;
  if ((size_t)n.node.output_size() != outGroups * k)
    return n.fail("needs " + llvm::Twine(outGroups * k) + " outputs for " + llvm::Twine(k) +
                  " optimized tensors, got " + llvm::Twine(n.node.output_size()));
  TrainingInputs in;
  auto r = n.input(0), t = n.input(1);
  if (failed(r) || failed(t))
    return failure();
  auto rt = dyn_cast<RankedTensorType>(r->getType());
  auto tt = dyn_cast<RankedTensorType>(t->getType());
  if (!rt || rt.getRank() != 0 || !isa<FloatType>(rt.getElementType()))
    return n.fail("R must be a float scalar");
  if (!tt || tt.getRank() != 0 || !tt.getElementType().isInteger(64))
    return n.fail("T must be an int64 scalar");
  in.r = *r;
  in.tf = CastOp::create(n.im.b, n.loc, rt, *t);
  in.tNonZero = CastOp::create(n.im.b, n.loc, RankedTensorType::get({}, n.im.b.getI1Type()), *t);
  in.group.resize(groups);
  for (unsigned g = 0; g < groups; ++g)
    for (size_t i = 0; i < k; ++i) {
      auto v = n.input(2 + g * k + i);
      if (failed(v))
        return failure();
      if (getElementTypeOrSelf(v->getType()) != rt.getElementType())
        return n.fail("input '" + n.node.input(2 + g * k + i) + "' must have R's element type");
      in.group[g].push_back(*v);
    }
  return in;
}

LogicalResult handleAdagrad(NodeCtx &n) {
  if (failed(n.allowAttrs({"decay_factor", "epsilon", "norm_coefficient"})))
    return failure();
  auto decay = n.getFloat("decay_factor", 0.0f), eps = n.getFloat("epsilon", 1e-6f),
       norm = n.getFloat("norm_coefficient", 0.0f);
  auto in = trainingInputs(n, 3, 2);
  if (failed(decay) || failed(eps) || failed(norm) || failed(in))
    return failure();
  Elementwise e{n};
  Type elt = getElementTypeOrSelf(in->r.getType());
  size_t k = in->group[0].size();
  // r_ = R / (1 + T * decay); g = norm * X + G; H' = H + g^2;
  // X' = X - r_ * g / (sqrt(H') + eps)
  Value rr = e.div(in->r, e.add(e.cst(elt, 1.0), e.mul(in->tf, e.cst(elt, *decay))));
  for (size_t i = 0; i < k; ++i) {
    Value x = in->group[0][i], g0 = in->group[1][i], h = in->group[2][i];
    Value g = e.add(e.mul(e.cst(elt, *norm), x), g0);
    Value hn = e.add(h, e.mul(g, g));
    Value xn = e.sub(x, e.div(e.mul(rr, g), e.add(e.sqrt(hn), e.cst(elt, *eps))));
    if (!e.ok)
      return failure();
    n.setOutput(i, xn);
    n.setOutput(k + i, hn);
  }
  return success();
}

LogicalResult handleMomentum(NodeCtx &n) {
  if (failed(n.allowAttrs({"alpha", "beta", "mode", "norm_coefficient"})))
    return failure();
  auto alpha = n.getFloat("alpha", std::nullopt), beta = n.getFloat("beta", std::nullopt),
       norm = n.getFloat("norm_coefficient", std::nullopt);
  auto mode = n.getString("mode", std::nullopt);
  auto in = trainingInputs(n, 3, 2);
  if (failed(alpha) || failed(beta) || failed(norm) || failed(mode) || failed(in))
    return failure();
  if (*mode != "standard" && *mode != "nesterov")
    return n.fail("mode must be \"standard\" or \"nesterov\", got \"" + *mode + "\"");
  Elementwise e{n};
  Type elt = getElementTypeOrSelf(in->r.getType());
  size_t k = in->group[0].size();
  // beta' = T > 0 ? beta : 1; g = norm * X + G; V' = alpha V + beta' g;
  // X' = X - R * V' (standard) or X - R * (g + alpha V') (nesterov)
  Value betaAdj = e.op("amp.where", {in->tNonZero, e.cst(elt, *beta), e.cst(elt, 1.0)});
  for (size_t i = 0; i < k; ++i) {
    Value x = in->group[0][i], g0 = in->group[1][i], v = in->group[2][i];
    Value g = e.add(e.mul(e.cst(elt, *norm), x), g0);
    Value vn = e.add(e.mul(e.cst(elt, *alpha), v), e.mul(betaAdj, g));
    Value step = *mode == "standard" ? vn : e.add(g, e.mul(e.cst(elt, *alpha), vn));
    Value xn = e.sub(x, e.mul(in->r, step));
    if (!e.ok)
      return failure();
    n.setOutput(i, xn);
    n.setOutput(k + i, vn);
  }
  return success();
}

LogicalResult handleAdam(NodeCtx &n) {
  if (failed(n.allowAttrs({"alpha", "beta", "epsilon", "norm_coefficient",
                           "norm_coefficient_post"})))
    return failure();
  auto alpha = n.getFloat("alpha", 0.9f), beta = n.getFloat("beta", 0.999f),
       eps = n.getFloat("epsilon", 1e-6f), norm = n.getFloat("norm_coefficient", 0.0f),
       post = n.getFloat("norm_coefficient_post", 0.0f);
  auto in = trainingInputs(n, 4, 3);
  if (failed(alpha) || failed(beta) || failed(eps) || failed(norm) || failed(post) ||
      failed(in))
    return failure();
  Elementwise e{n};
  Type elt = getElementTypeOrSelf(in->r.getType());
  size_t k = in->group[0].size();
  Value one = e.cst(elt, 1.0);
  // R' = T > 0 ? R sqrt(1 - beta^T) / (1 - alpha^T) : R
  Value bt = e.op("amp.pow", {e.cst(elt, *beta), in->tf});
  Value at = e.op("amp.pow", {e.cst(elt, *alpha), in->tf});
  Value corrected = e.div(e.mul(in->r, e.sqrt(e.sub(one, bt))), e.sub(one, at));
  Value rAdj = e.op("amp.where", {in->tNonZero, corrected, in->r});
  for (size_t i = 0; i < k; ++i) {
    Value x = in->group[0][i], g0 = in->group[1][i], v = in->group[2][i], h = in->group[3][i];
    // g = norm X + G; V' = alpha V + (1 - alpha) g; H' = beta H + (1 - beta) g^2;
    // X' = (1 - post) (X - R' V' / (sqrt(H') + eps))
    Value g = e.add(e.mul(e.cst(elt, *norm), x), g0);
    Value vn = e.add(e.mul(e.cst(elt, *alpha), v), e.mul(e.cst(elt, 1.0 - *alpha), g));
    Value hn = e.add(e.mul(e.cst(elt, *beta), h), e.mul(e.cst(elt, 1.0 - *beta), e.mul(g, g)));
    Value xn = e.sub(x, e.mul(rAdj, e.div(vn, e.add(e.sqrt(hn), e.cst(elt, *eps)))));
    if (*post != 0.0f)
      xn = e.mul(e.cst(elt, 1.0 - *post), xn);
    if (!e.ok)
      return failure();
    n.setOutput(i, xn);
    n.setOutput(k + i, vn);
    n.setOutput(2 * k + i, hn);
  }
  return success();
}
} // namespace

/// Gradient (ai.onnx.preview.training): d y / d xs by amp-autodiff's
/// reverse sweep over the ops imported so far. The node's inputs must be
/// the xs (then zs) themselves: feeding other values would re-run the graph.
LogicalResult handleGradient(NodeCtx &n) {
  if (failed(n.allowAttrs({"xs", "y", "zs"})))
    return failure();
  const onnx::AttributeProto *xsA = n.attr("xs"), *yA = n.attr("y"), *zsA = n.attr("zs");
  if (!xsA || !yA || xsA->strings_size() == 0)
    return n.fail("needs the attributes xs and y");
  int nx = xsA->strings_size(), nz = zsA ? zsA->strings_size() : 0;
  if ((int)n.numInputs() != nx + nz || n.node.output_size() != nx)
    return n.fail("needs one input per name in xs and zs and one output per x");
  SmallVector<Value> xs;
  for (int i = 0; i < nx + nz; ++i) {
    const std::string &want = i < nx ? xsA->strings(i) : zsA->strings(i - nx);
    if (n.node.input(i) != want)
      return n.fail("input " + llvm::Twine(i) + " is '" + n.node.input(i) + "' but the " +
                    (i < nx ? "xs" : "zs") + " attribute names '" + want +
                    "': feeding other values than the graph's is not supported");
    auto v = n.input(i);
    if (failed(v))
      return failure();
    if (i < nx)
      xs.push_back(*v);
  }
  auto y = n.im.lookup(yA->s(), n.loc);
  if (failed(y))
    return n.fail("y '" + yA->s() + "' is not computed by the graph");
  auto grads = gradientsOf(n.im.b, *y, xs, "Gradient's y '" + yA->s() + "'");
  if (failed(grads))
    return n.fail("cannot differentiate '" + yA->s() + "' (see above)");
  for (int i = 0; i < nx; ++i)
    n.setOutput(i, (*grads)[i]);
  return success();
}

//===----------------------------------------------------------------------===//
// com.microsoft gradient ops (what onnxruntime-training's gradient builder
// writes into training artifacts), mapped onto the amp dialect's own
// backward ops. Input orders follow ORT's contrib schemas.
//===----------------------------------------------------------------------===//

/// dX of an elementwise op from (dY, X): ReluGrad, GeluGrad, FastGeluGrad.
/// ReluGrad reads the Relu's output, whose sign pattern is its input's.
LogicalResult handleUnaryGrad(NodeCtx &n, llvm::StringRef kind) {
  if (failed(n.allowAttrs({})))
    return failure();
  if (n.hasInput(2))
    return n.fail("the bias input (input 2) is not supported");
  auto dy = n.input(0), x = n.input(1);
  if (failed(dy) || failed(x))
    return failure();
  if (dy->getType() != x->getType())
    return n.fail("dY and X must have the same type");
  n.setOutput(0, UnaryGradOp::create(n.im.b, n.loc, *x, *dy, n.im.b.getStringAttr(kind),
                                     n.im.b.getF32FloatAttr(0.0f), n.im.b.getF32FloatAttr(0.0f)));
  return success();
}

/// dX of tanh / sigmoid from (dY, Y): dY (1 - Y^2), dY Y (1 - Y).
LogicalResult handleOutputGrad(NodeCtx &n, bool tanh) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto dy = n.input(0), y = n.input(1);
  if (failed(dy) || failed(y))
    return failure();
  Elementwise e{n};
  Type elt = getElementTypeOrSelf(y->getType());
  Value one = e.cst(elt, 1.0);
  Value d = tanh ? e.sub(one, e.mul(*y, *y)) : e.mul(*y, e.sub(one, *y));
  Value r = e.mul(*dy, d);
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// SoftmaxGrad_13 / LogSoftmaxGrad_13 (dY, Y), axis default -1; the older
/// SoftmaxGrad (2-D coercion at axis, default 1) only where that is the
/// last axis.
LogicalResult handleSoftmaxGradMS(NodeCtx &n, bool log, bool v13) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto dy = n.input(0), y = n.input(1);
  auto axis = n.getInt("axis", v13 ? -1 : 1);
  if (failed(dy) || failed(y) || failed(axis))
    return failure();
  if (dy->getType() != y->getType())
    return n.fail("dY and Y must have the same type");
  int64_t rank = cast<RankedTensorType>(y->getType()).getRank();
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  if (a < 0 || a >= rank)
    return n.fail("axis " + llvm::Twine(*axis) + " is out of range for rank " +
                  llvm::Twine(rank));
  if (!v13 && a != rank - 1)
    return n.fail("the pre-13 form normalises over the dims from axis " + llvm::Twine(a) +
                  " on together; only the last axis is supported");
  n.setOutput(0, SoftmaxGradOp::create(n.im.b, n.loc, *y, *dy, a, log));
  return success();
}

/// SoftmaxCrossEntropyLossGrad (dY, log_prob, label [, weight]).
LogicalResult handleSCELossGrad(NodeCtx &n) {
  if (failed(n.allowAttrs({"reduction", "ignore_index"})))
    return failure();
  if (n.numInputs() > 4)
    return n.fail("the bias input (input 4) is not supported");
  auto red = n.getString("reduction", std::string("mean"));
  auto dy = n.input(0), lp = n.input(1), lab = n.input(2);
  if (failed(red) || failed(dy) || failed(lp) || failed(lab))
    return failure();
  if (*red != "mean" && *red != "sum" && *red != "none")
    return n.fail("unknown reduction '" + *red + "'");
  IntegerAttr ii;
  if (n.attr("ignore_index")) {
    auto v = n.getInt("ignore_index", 0);
    if (failed(v))
      return failure();
    ii = n.im.b.getI64IntegerAttr(*v);
  }
  Value w = n.optInput(3);
  if (n.hasInput(3) && !w)
    return failure();
  auto lpt = dyn_cast<RankedTensorType>(lp->getType());
  if (!lpt || lpt.getRank() < 2 || !isa<IntegerType>(getElementTypeOrSelf(lab->getType())))
    return n.fail("needs log_prob [N, C, ...] and integer labels");
  n.setOutput(0, SoftmaxCrossEntropyLossGradOp::create(n.im.b, n.loc, lpt, *lp, *lab, w, *dy,
                                                      *red, ii));
  return success();
}

/// ConvGrad (dY, X, W) -> dX, dW, dB with Conv's attributes.
LogicalResult handleConvGrad(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "dilations", "group", "kernel_shape", "pads",
                           "strides"})))
    return failure();
  SmallVector<NamedAttribute> attrs;
  auto group = n.getInt("group", 1);
  if (failed(group) || failed(windowAttrs(n, attrs, false)))
    return failure();
  attrs.push_back(named(n, "group", i64(n, *group)));
  auto in = tensorInputs(n, {1, 2, 0});
  if (failed(in))
    return failure();
  return emitAll(n, "amp.conv_grad", *in, attrs, 3);
}

/// MaxPoolGrad (dY, Indices): the shape of dX is the pooled input's, found
/// through the MaxPool that produced the indices.
LogicalResult handleMaxPoolGradMS(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                           "storage_order", "strides"})))
    return failure();
  auto dy = n.input(0), idx = n.input(1);
  if (failed(dy) || failed(idx))
    return failure();
  auto pool = idx->getDefiningOp<MaxPoolOp>();
  if (!pool)
    return n.fail("its indices '" + n.node.input(1) +
                  "' must be the Indices output of a MaxPool of this graph");
  if (dy->getType() != pool.getOutput().getType())
    return n.fail("dY must have the type of the MaxPool's output");
  return emitAll(n, "amp.max_pool_grad", {pool.getX(), *dy, *idx}, {}, 1);
}

/// BatchNormInternal (X, scale, B, mean, var) -> Y, running mean / var,
/// saved mean, saved inv std. The saved statistics may only feed
/// BatchNormalizationGrad, which recomputes them from X.
LogicalResult handleBatchNormInternal(NodeCtx &n) {
  if (failed(n.allowAttrs({"epsilon", "momentum", "training_mode"})))
    return failure();
  auto eps = n.getFloat("epsilon", 1e-5f), mom = n.getFloat("momentum", 0.9f);
  auto tm = n.getInt("training_mode", 1);
  if (failed(eps) || failed(mom) || failed(tm))
    return failure();
  for (int k = 3; k < 5; ++k) {
    if (!n.hasOutput(k))
      continue;
    const std::string &name = n.node.output(k);
    for (const auto &other : n.im.model.graph().node())
      for (int j = 0; j < other.input_size(); ++j)
        if (other.input(j) == name &&
            !(other.op_type() == "BatchNormalizationGrad" && other.domain() == "com.microsoft" &&
              (j == 3 || j == 4)))
          return n.fail("its saved statistic '" + name + "' is read by a " + other.op_type() +
                        " node; only BatchNormalizationGrad may read it");
    for (const auto &o : n.im.model.graph().output())
      if (o.name() == name)
        return n.fail("its saved statistic '" + name + "' is a graph output (not supported)");
    n.skipOutput(k); // BatchNormalizationGrad recomputes it from X
  }
  auto in = tensorInputs(n, {0, 1, 2, 3, 4});
  if (failed(in))
    return failure();
  return emitAll(n, "amp.batch_norm", *in,
                 {named(n, "epsilon", f32(n, *eps)), named(n, "momentum", f32(n, *mom)),
                  named(n, "training_mode", boolean(n, *tm != 0))},
                 3);
}

/// BatchNormalizationGrad (dY, X, scale, saved mean, saved inv std).
LogicalResult handleBatchNormGradMS(NodeCtx &n) {
  if (failed(n.allowAttrs({"epsilon"})))
    return failure();
  auto eps = n.getFloat("epsilon", 1e-5f);
  auto in = tensorInputs(n, {1, 2, 0});
  if (failed(eps) || failed(in))
    return failure();
  // The statistics must be those of a batch norm of X (recomputed from X).
  if (!n.hasInput(3) || !n.hasInput(4))
    return n.fail("its saved mean and inverse std (inputs 3 and 4) are required");
  bool found = false;
  for (const auto &other : n.im.model.graph().node())
    if (other.op_type() == "BatchNormInternal" && other.output_size() > 4 &&
        other.output(3) == n.node.input(3) && other.output(4) == n.node.input(4) &&
        other.input_size() > 0 && other.input(0) == n.node.input(1)) {
      for (const auto &a : other.attribute())
        if (a.name() == "epsilon" && a.f() != *eps)
          return n.fail("its epsilon differs from the BatchNormInternal's");
      found = true;
    }
  if (!found)
    return n.fail("its saved statistics must come from a BatchNormInternal of the same X");
  return emitAll(n, "amp.batch_norm_grad", *in, {named(n, "epsilon", f32(n, *eps))}, 3);
}

/// LayerNormalizationGrad (dY, X, scale, mean, inv_std_dev).
LogicalResult handleLayerNormGradMS(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis", "epsilon", "stash_type"})))
    return failure();
  auto axis = n.getInt("axis", -1);
  auto stash = n.getInt("stash_type", 1);
  auto in = tensorInputs(n, {1, 2, 3, 4, 0});
  if (failed(axis) || failed(stash) || failed(in))
    return failure();
  if (*stash != 1)
    return n.fail("stash_type " + llvm::Twine(*stash) +
                  " is not supported (the statistics are f32: stash_type 1)");
  int64_t rank = cast<RankedTensorType>((*in)[0].getType()).getRank();
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  return emitAll(n, "amp.layer_norm_grad", *in, {named(n, "axis", i64(n, a))}, 3);
}

/// DropoutGrad (dY, mask [, ratio [, training_mode]]): dY * mask / (1 - ratio).
LogicalResult handleDropoutGrad(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  float ratio = 0.5f;
  bool training = true;
  if (failed(dropoutInputs(n, 2, ratio, training)))
    return failure();
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return n.fail("ratio must lie in [0, 1), got " + llvm::formatv("{0}", ratio).str());
  auto dy = n.input(0), mask = n.input(1);
  if (failed(dy) || failed(mask))
    return failure();
  if (!training || ratio == 0.0f) {
    n.setOutput(0, *dy);
    return success();
  }
  Elementwise e{n};
  Type elt = getElementTypeOrSelf(dy->getType());
  auto mt = cast<RankedTensorType>(mask->getType());
  Value m = CastOp::create(n.im.b, n.loc, RankedTensorType::get(mt.getShape(), elt), *mask);
  Value r = e.mul(e.mul(*dy, m), e.cst(elt, 1.0 / (1.0 - (double)ratio)));
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// FusedMatMul (A, B): alpha * op(A) op(B), op transposing the last two dims.
LogicalResult handleFusedMatMul(NodeCtx &n) {
  if (failed(n.allowAttrs({"alpha", "transA", "transB", "transBatchA", "transBatchB"})))
    return failure();
  auto alpha = n.getFloat("alpha", 1.0f);
  auto ta = n.getInt("transA", 0), tb = n.getInt("transB", 0);
  auto tba = n.getInt("transBatchA", 0), tbb = n.getInt("transBatchB", 0);
  if (failed(alpha) || failed(ta) || failed(tb) || failed(tba) || failed(tbb))
    return failure();
  if (*tba || *tbb)
    return n.fail("transBatchA / transBatchB are not supported");
  auto a = n.input(0), bv = n.input(1);
  if (failed(a) || failed(bv))
    return failure();
  auto tr = [&](Value v) -> FailureOr<Value> {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getRank() < 2)
      return n.fail("a transposed operand must have rank >= 2");
    SmallVector<int64_t> perm;
    for (int64_t i = 0; i < t.getRank(); ++i)
      perm.push_back(i);
    std::swap(perm[t.getRank() - 1], perm[t.getRank() - 2]);
    auto op = n.im.create(n, "amp.transpose", {v}, {named(n, "perm", ints(n, perm))}, 1);
    if (failed(op))
      return failure();
    return (*op)->getResult(0);
  };
  Value x = *a, y = *bv;
  if (*ta) {
    auto t = tr(x);
    if (failed(t))
      return failure();
    x = *t;
  }
  if (*tb) {
    auto t = tr(y);
    if (failed(t))
      return failure();
    y = *t;
  }
  auto mm = n.im.create(n, "amp.matmul", {x, y}, {}, 1);
  if (failed(mm))
    return failure();
  Value r = (*mm)->getResult(0);
  if (*alpha != 1.0f) {
    Elementwise e{n};
    r = e.mul(r, e.cst(getElementTypeOrSelf(r.getType()), *alpha));
    if (!e.ok)
      return failure();
  }
  n.setOutput(0, r);
  return success();
}

/// GatherGrad (shape, indices, dY), axis: dY summed into zeros of `shape`.
LogicalResult handleGatherGradMS(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto axis = n.getInt("axis", 0);
  auto shape = n.constInts(0, "shape");
  auto idx = n.input(1), dy = n.input(2);
  if (failed(axis) || failed(shape) || failed(idx) || failed(dy))
    return failure();
  int64_t rank = (int64_t)shape->size();
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  return emitAll(n, "amp.gather_grad", {*idx, *dy},
                 {named(n, "shape", ints(n, *shape)), named(n, "axis", i64(n, a))}, 1);
}

/// InPlaceAccumulatorV2 (buffer, value [, overwrite_flag]) -> updated flag
/// [, new buffer], in functional form: the new buffer is value where the
/// flag is set, buffer + value otherwise; the flag output is true.
LogicalResult handleInPlaceAccumulatorV2(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto buf = n.input(0), val = n.input(1);
  if (failed(buf) || failed(val))
    return failure();
  if (buf->getType() != val->getType())
    return n.fail("the buffer and the value must have the same type");
  Elementwise e{n};
  Value sum = e.add(*buf, *val);
  if (!e.ok)
    return failure();
  Value out = sum;
  if (n.hasInput(2)) {
    auto flag = n.input(2);
    if (failed(flag))
      return failure();
    auto ft = dyn_cast<RankedTensorType>(flag->getType());
    if (!ft || !ft.getElementType().isInteger(1) || ft.getNumElements() != 1)
      return n.fail("overwrite_flag must be one bool");
    auto w = n.im.create(n, "amp.where", {*flag, *val, sum}, {}, 1);
    if (failed(w))
      return failure();
    out = (*w)->getResult(0);
  }
  auto bt = RankedTensorType::get({1}, n.im.b.getI1Type());
  n.setOutput(0, arith::ConstantOp::create(n.im.b, n.loc, bt,
                                           DenseElementsAttr::get(bt, n.im.b.getBoolAttr(true))));
  n.setOutput(1, out);
  return success();
}

/// Scale (com.microsoft): input * scale, or input / scale with scale_down;
/// the scalar scale (any number type) in the input's element type.
LogicalResult handleScaleMS(NodeCtx &n) {
  if (failed(n.allowAttrs({"scale_down"})))
    return failure();
  auto down = n.getInt("scale_down", 0);
  auto x = n.input(0);
  if (failed(down) || failed(x))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float inputs are supported");
  Elementwise e{n};
  Value sv;
  auto c = n.hasInput(1) ? n.im.consts.find(n.node.input(1)) : n.im.consts.end();
  if (c != n.im.consts.end()) {
    if (c->second.numElements() != 1)
      return n.fail("the scale must be one value");
    bool isFloat = isFloatType(c->second.dtype);
    double v = isFloat ? c->second.toDouble()[0] : (double)c->second.toInt64()[0];
    sv = e.cst(elt, v);
  } else {
    auto s = n.input(1);
    if (failed(s))
      return failure();
    auto st = cast<RankedTensorType>(s->getType());
    if (st.getNumElements() != 1)
      return n.fail("the scale must be one value");
    sv = CastOp::create(n.im.b, n.loc, RankedTensorType::get(st.getShape(), elt), *s);
  }
  Value r = *down ? e.div(*x, sv) : e.mul(*x, sv);
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// Sum / Max / Min: the inputs combined left to right by `opName`
/// (multidirectional broadcast); one input is itself.
LogicalResult handleVariadic(NodeCtx &n, llvm::StringRef opName) {
  if (failed(n.allowAttrs({"consumed_inputs"})))
    return failure();
  if (n.numInputs() < 1)
    return n.fail("needs at least one input");
  auto acc = n.input(0);
  if (failed(acc))
    return failure();
  Value r = *acc;
  for (size_t i = 1; i < n.numInputs(); ++i) {
    auto v = n.input(i);
    if (failed(v))
      return failure();
    auto op = n.im.create(n, opName, {r, *v}, {}, 1);
    if (failed(op))
      return failure();
    r = (*op)->getResult(0);
  }
  n.setOutput(0, r);
  return success();
}

/// Clip. Constant (non-NaN) bounds on a float tensor give amp.clip, with
/// torch.clamp's gradient for scalar bounds (none at a bound); otherwise
/// max(x, min) then min(., max), which split a tie as torch.clamp does with
/// tensor bounds. Each bound is optional (inputs
/// since opset 11, attributes before); min > max gives max everywhere, as
/// ONNX says.
LogicalResult handleClip(NodeCtx &n) {
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto elt = cast<RankedTensorType>(x->getType()).getElementType();
  if (n.opset < 11) {
    if (failed(n.allowAttrs({"min", "max", "consumed_inputs"})))
      return failure();
    if (!isa<FloatType>(elt))
      return n.fail("Clip before opset 11 takes float inputs");
  } else if (failed(n.allowAttrs({}))) {
    return failure();
  }
  // The bounds known now: (present, value), ±inf when absent.
  double inf = std::numeric_limits<double>::infinity();
  auto known = [&](size_t i, const char *what, double none) -> FailureOr<std::optional<double>> {
    if (n.opset < 11) {
      if (!n.attr(what))
        return std::optional<double>(none);
      auto f = n.getFloat(what, std::nullopt);
      if (failed(f))
        return failure();
      return std::optional<double>(*f);
    }
    if (!n.hasInput(i))
      return std::optional<double>(none);
    auto it = n.im.consts.find(n.node.input(i));
    if (it == n.im.consts.end())
      return std::optional<double>();
    if (it->second.numElements() != 1)
      return n.fail(llvm::Twine("'") + what + "' must be a single value");
    if (!isa<FloatType>(elt))
      return std::optional<double>(); // integer bounds: amp.max / amp.min
    return std::optional<double>(it->second.toDouble()[0]);
  };
  auto cl = known(1, "min", -inf), ch = known(2, "max", inf);
  if (failed(cl) || failed(ch))
    return failure();
  if (isa<FloatType>(elt) && *cl && *ch && !std::isnan(**cl) && !std::isnan(**ch))
    return simple(n, "amp.clip", {0},
                  {named(n, "min", f32(n, (float)**cl)), named(n, "max", f32(n, (float)**ch))});
  Value lo, hi;
  if (n.opset < 11) {
    Elementwise e{n};
    if (n.attr("min"))
      lo = e.cst(elt, **cl);
    if (n.attr("max"))
      hi = e.cst(elt, **ch);
    if (!e.ok)
      return failure();
  } else {
    lo = n.optInput(1);
    hi = n.optInput(2);
    for (auto [v, what] : {std::make_pair(lo, "min"), std::make_pair(hi, "max")})
      if (v && cast<RankedTensorType>(v.getType()).getNumElements() != 1)
        return n.fail(llvm::Twine("'") + what + "' must be a single value");
  }
  Value r = *x;
  for (auto [bound, opName] : {std::make_pair(lo, "amp.max"), std::make_pair(hi, "amp.min")}) {
    if (!bound)
      continue;
    auto op = n.im.create(n, opName, {r, bound}, {}, 1);
    if (failed(op))
      return failure();
    r = (*op)->getResult(0);
  }
  n.setOutput(0, r);
  return success();
}

/// A unary activation with float attributes (name, default), passed on
/// under the same names (`rename` maps an ONNX name to the op's).
LogicalResult unaryWithAttrs(NodeCtx &n, llvm::StringRef opName,
                             std::initializer_list<std::pair<const char *, float>> params,
                             std::initializer_list<std::pair<const char *, const char *>> rename = {}) {
  SmallVector<llvm::StringRef> allowed{"consumed_inputs"};
  for (auto &p : params)
    allowed.push_back(p.first);
  if (failed(n.allowAttrs(allowed)))
    return failure();
  SmallVector<NamedAttribute> attrs;
  for (auto &[name, def] : params) {
    auto v = n.getFloat(name, def);
    if (failed(v))
      return failure();
    if (std::isnan(*v))
      return n.fail(llvm::Twine("attribute '") + name + "' is NaN");
    llvm::StringRef as = name;
    for (auto &[from, to] : rename)
      if (as == from)
        as = to;
    attrs.push_back(named(n, as, f32(n, *v)));
  }
  return simple(n, opName, {0}, attrs);
}

/// Split: slices along `axis`; the sizes from `split` (an input since opset
/// 13, an attribute before), else equal parts, one per output (opset 18's
/// `num_outputs`: parts of ceil(dim / num_outputs), the last one smaller;
/// a part may be empty).
LogicalResult handleSplit(NodeCtx &n) {
  SmallVector<llvm::StringRef> allowed{"axis"};
  if (n.opset < 13)
    allowed.push_back("split");
  if (n.opset >= 18)
    allowed.push_back("num_outputs");
  if (failed(n.allowAttrs(allowed)))
    return failure();
  auto x = n.input(0);
  auto axis = n.getInt("axis", 0);
  if (failed(x) || failed(axis))
    return failure();
  auto type = cast<RankedTensorType>(x->getType());
  int64_t rank = type.getRank(), ax = *axis < 0 ? *axis + rank : *axis;
  if (ax < 0 || ax >= rank)
    return n.fail("axis " + llvm::Twine(*axis) + " is out of range for rank " + llvm::Twine(rank));
  int64_t dim = type.getDimSize(ax), outs = n.node.output_size();
  if (ShapedType::isDynamic(dim))
    return n.fail("the split axis must have a static size");
  if (outs < 1)
    return n.fail("needs at least one output");
  std::optional<std::vector<int64_t>> sizes;
  if (n.opset < 13) {
    auto s = n.getInts("split");
    if (failed(s))
      return failure();
    if (*s)
      sizes = **s;
  } else if (n.hasInput(1)) {
    auto s = n.constInts(1, "split");
    if (failed(s))
      return failure();
    sizes = *s;
  }
  if (n.opset >= 18 && n.attr("num_outputs")) {
    if (sizes)
      return n.fail("give either the 'split' input or 'num_outputs', not both");
    auto k = n.getInt("num_outputs", 0);
    if (failed(k))
      return failure();
    if (*k != outs)
      return n.fail("num_outputs is " + llvm::Twine(*k) + " but the node has " +
                    llvm::Twine(outs) + " outputs");
    int64_t part = (dim + outs - 1) / outs;
    sizes = std::vector<int64_t>(outs, part);
    sizes->back() = dim - part * (outs - 1);
    if (sizes->back() < 0)
      return n.fail("cannot split a dim of " + llvm::Twine(dim) + " into " + llvm::Twine(outs) +
                    " parts of " + llvm::Twine(part));
  } else if (!sizes) {
    if (n.opset >= 18)
      return n.fail("needs the 'split' input or the 'num_outputs' attribute");
    if (dim % outs)
      return n.fail("cannot split a dim of " + llvm::Twine(dim) + " into " + llvm::Twine(outs) +
                    " equal parts");
    sizes = std::vector<int64_t>(outs, dim / outs);
  }
  if ((int64_t)sizes->size() != outs)
    return n.fail("'split' has " + llvm::Twine(sizes->size()) + " sizes for " + llvm::Twine(outs) +
                  " outputs");
  int64_t total = 0;
  for (int64_t v : *sizes) {
    if (v < 0)
      return n.fail("a part of negative size " + llvm::Twine(v));
    total += v;
  }
  if (total != dim)
    return n.fail("the parts add up to " + llvm::Twine(total) + ", not the axis size " +
                  llvm::Twine(dim));
  int64_t start = 0;
  for (int64_t i = 0; i < outs; ++i) {
    int64_t size = (*sizes)[i];
    if (n.hasOutput(i)) {
      auto op = n.im.create(n, "amp.slice", {*x},
                            {named(n, "starts", ints(n, {start})),
                             named(n, "ends", ints(n, {start + size})),
                             named(n, "axes", ints(n, {ax}))},
                            1);
      if (failed(op))
        return failure();
      n.setOutput(i, (*op)->getResult(0));
    }
    start += size;
  }
  return success();
}

/// Marks the amp ops a handler creates from here on with `amp.class`, the
/// precision class amp-autocast gives them (its report says why): for ops
/// composed of several whose PyTorch counterpart autocast runs in fp32.
struct ClassMark {
  NodeCtx &n;
  Operation *last;
  explicit ClassMark(NodeCtx &n) : n(n) {
    Block *blk = n.im.b.getInsertionBlock();
    last = blk->empty() ? nullptr : &blk->back();
  }
  void apply(llvm::StringRef cls) {
    Block *blk = n.im.b.getInsertionBlock();
    for (Operation *op = last ? last->getNextNode() : (blk->empty() ? nullptr : &blk->front()); op;
         op = op->getNextNode())
      if (op->getName().getDialectNamespace() == "amp")
        op->setAttr("amp.class", n.im.b.getStringAttr(cls));
  }
};

/// ReduceMin, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and
/// ReduceLogSumExp, composed from amp.reduce_sum / amp.reduce_max and
/// element-wise ops (so their gradients and precisions follow theirs):
/// min = -max(-x), l1 = sum |x|, l2 = sqrt(sum x^2), log_sum_exp =
/// log(sum e^(x - m)) + m with m = max x (no overflow).
LogicalResult handleComposedReduce(NodeCtx &n, llvm::StringRef kind) {
  if (failed(n.allowAttrs({"axes", "keepdims", "noop_with_empty_axes"})))
    return failure();
  auto keep = n.getInt("keepdims", 1);
  auto noop = n.getInt("noop_with_empty_axes", 0);
  auto axes = axesOf(n, 18);
  auto x = n.input(0);
  if (failed(keep) || failed(noop) || failed(axes) || failed(x))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  Elementwise e{n};
  auto reduce = [&](llvm::StringRef name, Value v, bool keepdims) -> Value {
    if (!e.ok || !v)
      return Value();
    SmallVector<NamedAttribute> attrs{named(n, "keepdims", boolean(n, keepdims)),
                                      named(n, "noop_with_empty_axes", boolean(n, *noop != 0))};
    if (*axes)
      attrs.push_back(named(n, "axes", ints(n, **axes)));
    auto op = n.im.create(n, name, {v}, attrs, 1);
    if (failed(op)) {
      e.ok = false;
      return Value();
    }
    return (*op)->getResult(0);
  };
  bool kd = *keep != 0;
  ClassMark mark(n);
  Value r;
  if (kind == "min") {
    Value neg = e.cst(elt, -1.0);
    r = e.mul(reduce("amp.reduce_max", e.mul(*x, neg), kd), neg);
  } else if (kind == "l1") {
    r = reduce("amp.reduce_sum", e.op("amp.abs", {*x}), kd);
  } else if (kind == "l2" || kind == "sum_square") {
    r = reduce("amp.reduce_sum", e.mul(*x, *x), kd);
    if (kind == "l2")
      r = e.sqrt(r);
  } else if (kind == "log_sum") {
    r = e.op("amp.log", {reduce("amp.reduce_sum", *x, kd)});
  } else { // log_sum_exp
    // An infinite maximum counts as 0 (torch.logsumexp): a row that is -inf
    // throughout gives -inf, not -inf - -inf = NaN; one with +inf gives +inf.
    double big = std::numeric_limits<double>::infinity();
    auto finiteMax = [&](bool keepdims) -> Value {
      Value m = reduce("amp.reduce_max", *x, keepdims);
      if (!e.ok || !m)
        return Value();
      Value isInf = e.op("amp.equal", {e.op("amp.abs", {m}), e.cst(elt, big)});
      return e.op("amp.where", {isInf, e.cst(elt, 0.0), m});
    };
    Value m = finiteMax(true);
    Value s = reduce("amp.reduce_sum", e.op("amp.exp", {e.sub(*x, m)}), kd);
    Value mo = kd ? m : finiteMax(false);
    r = e.add(e.op("amp.log", {s}), mo);
  }
  if (!e.ok || !r)
    return failure();
  // The norms and log-sum-exp in fp32, as torch.autocast runs them (a square
  // in f16 overflows from 256 on); the minimum follows its input.
  if (kind != "min")
    mark.apply("fp32");
  n.setOutput(0, r);
  return success();
}

/// PRelu: where(x > 0, x, slope * x), slope broadcast to x (torch.prelu's
/// gradients: slope at x = 0; the slope's summed over the broadcast).
LogicalResult handlePRelu(NodeCtx &n) {
  if (failed(n.allowAttrs({"consumed_inputs"})))
    return failure();
  auto x = n.input(0), slope = n.input(1);
  if (failed(x) || failed(slope))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  Elementwise e{n};
  Value s = *slope;
  auto xt = cast<RankedTensorType>(x->getType()), st = cast<RankedTensorType>(s.getType());
  if (n.opset < 7 && st.getRank() == 1 && xt.getRank() >= 3 && st.getDimSize(0) == xt.getDimSize(1) &&
      st.getDimSize(0) != 1) {
    // Before opset 7 a slope of C values is per channel (dim 1).
    SmallVector<int64_t> shape(xt.getRank() - 1, 1);
    shape[0] = st.getDimSize(0);
    s = e.op("amp.reshape", {s}, {named(n, "shape", ints(n, shape))});
  }
  Value neg = e.mul(s, *x);
  if (neg && neg.getType() != x->getType())
    return n.fail("the slope does not broadcast to the input's shape (unidirectionally)");
  Value r = e.op("amp.where", {e.op("amp.greater", {*x, e.cst(elt, 0.0)}), *x, neg});
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// IsNaN: x != x. IsInf: x == +inf or x == -inf (each side optional).
LogicalResult handleIsNaNOrInf(NodeCtx &n, bool inf) {
  if (failed(n.allowAttrs(inf ? llvm::ArrayRef<llvm::StringRef>{"detect_negative", "detect_positive"}
                              : llvm::ArrayRef<llvm::StringRef>{})))
    return failure();
  auto x = n.input(0);
  auto neg = n.getInt("detect_negative", 1), pos = n.getInt("detect_positive", 1);
  if (failed(x) || failed(neg) || failed(pos))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  Elementwise e{n};
  Value r;
  if (!inf) {
    auto t = RankedTensorType::get({}, n.im.b.getI1Type());
    Value one = arith::ConstantOp::create(n.im.b, n.loc, t, DenseElementsAttr::get(t, true));
    r = e.op("amp.xor", {e.op("amp.equal", {*x, *x}), one});
  } else {
    double big = std::numeric_limits<double>::infinity();
    Value p = *pos ? e.op("amp.equal", {*x, e.cst(elt, big)}) : Value();
    Value m = *neg ? e.op("amp.equal", {*x, e.cst(elt, -big)}) : Value();
    if (p && m)
      r = e.op("amp.or", {p, m});
    else if (p || m)
      r = p ? p : m;
    else // neither side: all false
      r = e.op("amp.xor", {e.op("amp.equal", {*x, *x}), e.op("amp.equal", {*x, *x})});
  }
  if (!e.ok || !r)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// Mean of n inputs: their sum (left to right) divided by n.
LogicalResult handleMean(NodeCtx &n) {
  if (failed(n.allowAttrs({"consumed_inputs"})))
    return failure();
  if (n.numInputs() < 1)
    return n.fail("needs at least one input");
  auto first = n.input(0);
  if (failed(first))
    return failure();
  Type elt = getElementTypeOrSelf(first->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  Elementwise e{n};
  Value r = *first;
  for (size_t i = 1; i < n.numInputs(); ++i) {
    auto v = n.input(i);
    if (failed(v))
      return failure();
    r = e.add(r, *v);
  }
  if (n.numInputs() > 1)
    r = e.div(r, e.cst(elt, (double)n.numInputs()));
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// Trilu: x where the last two dims' (i, j) has j - i >= k (upper) or
/// j - i <= k (lower), else 0; the mask a constant, k a constant.
LogicalResult handleTrilu(NodeCtx &n) {
  if (failed(n.allowAttrs({"upper"})))
    return failure();
  auto upper = n.getInt("upper", 1);
  auto x = n.input(0);
  if (failed(upper) || failed(x))
    return failure();
  int64_t k = 0;
  if (n.hasInput(1)) {
    auto kv = n.constInts(1, "k");
    if (failed(kv))
      return failure();
    if (kv->size() != 1)
      return n.fail("'k' must be a single value");
    k = (*kv)[0];
  }
  auto xt = cast<RankedTensorType>(x->getType());
  if (xt.getRank() < 2)
    return n.fail("the input must have rank 2 or more");
  int64_t rows = xt.getDimSize(xt.getRank() - 2), cols = xt.getDimSize(xt.getRank() - 1);
  if (ShapedType::isDynamic(rows) || ShapedType::isDynamic(cols))
    return n.fail("the last two dims must have static sizes");
  std::vector<bool> mask(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      // j - i compared without overflow for any k.
      __int128 d = (__int128)j - i;
      mask[i * cols + j] = *upper ? d >= k : d <= k;
    }
  auto b = n.im.b;
  auto mt = RankedTensorType::get({rows, cols}, b.getI1Type());
  SmallVector<bool> bits(mask.begin(), mask.end());
  Value m = arith::ConstantOp::create(b, n.loc, mt, DenseElementsAttr::get(mt, ArrayRef<bool>(bits)));
  auto zt = RankedTensorType::get({}, xt.getElementType());
  Value zero = arith::ConstantOp::create(b, n.loc, zt,
                                         DenseElementsAttr::get(zt, b.getZeroAttr(xt.getElementType())));
  return emitAll(n, "amp.where", {m, *x, zero}, {}, 1);
}

/// Range of constants, folded: start + i * delta for i < max(ceil((limit -
/// start) / delta), 0); INT64, INT32 or FLOAT. A bound that is a graph input
/// is an error naming it (bind it with --const-input); one computed by other
/// nodes makes the op unsupported.
LogicalResult handleRange(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  const char *roles[] = {"start", "limit", "delta"};
  const HostTensor *c[3];
  for (int i = 0; i < 3; ++i) {
    // A bound computed by other nodes (not a graph input one could bind):
    // the op is unsupported there.
    if (n.hasInput(i) && !n.im.consts.count(n.node.input(i))) {
      auto v = n.im.values.find(n.node.input(i));
      if (v != n.im.values.end() && !isa<BlockArgument>(v->second))
        return n.fail("unsupported op ai.onnx.Range on a bound computed at run time ('" +
                      n.node.input(i) + "'; Range is folded at import from constant bounds)");
    }
    auto t = n.constInput(i, roles[i]);
    if (failed(t))
      return failure();
    if ((*t)->numElements() != 1)
      return n.fail(llvm::Twine("'") + roles[i] + "' must be a scalar");
    c[i] = *t;
  }
  int32_t dt = c[0]->dtype;
  if (c[1]->dtype != dt || c[2]->dtype != dt)
    return n.fail("start, limit and delta must have one type");
  constexpr int64_t kMax = (int64_t)1 << 30;
  HostTensor out;
  out.dtype = dt;
  if (dt == onnx::TensorProto::INT64 || dt == onnx::TensorProto::INT32) {
    int64_t s0 = c[0]->toInt64()[0], l = c[1]->toInt64()[0], d = c[2]->toInt64()[0];
    if (d == 0)
      return n.fail("'delta' is zero");
    __int128 span = (__int128)l - s0;
    __int128 cnt = span / d + ((span % d != 0 && ((span > 0) == (d > 0))) ? 1 : 0);
    if (cnt < 0)
      cnt = 0;
    if (cnt > kMax)
      return n.fail("the range has more than 2^30 elements");
    std::vector<int64_t> v((size_t)cnt);
    // start + i * delta lies in [start, limit); only the product may leave
    // 64 bits (start = INT64_MIN, delta = 2^62).
    for (int64_t i = 0; i < (int64_t)cnt; ++i)
      v[i] = (int64_t)((__int128)s0 + (__int128)i * d);
    out = makeInt64({(int64_t)cnt}, v);
    if (dt == onnx::TensorProto::INT32) {
      out.dtype = dt;
      out.bytes = std::make_shared<std::string>(v.size() * 4, '\0');
      for (size_t i = 0; i < v.size(); ++i) {
        int32_t x = (int32_t)v[i];
        std::memcpy(out.bytes->data() + 4 * i, &x, 4);
      }
    }
  } else if (dt == onnx::TensorProto::FLOAT) {
    double s0 = c[0]->toDouble()[0], l = c[1]->toDouble()[0], d = c[2]->toDouble()[0];
    if (d == 0 || !std::isfinite(s0) || !std::isfinite(l) || !std::isfinite(d))
      return n.fail("'delta' is zero or a bound is not finite");
    double cnt = std::max(std::ceil((l - s0) / d), 0.0);
    if (cnt > (double)kMax)
      return n.fail("the range has more than 2^30 elements");
    out.shape = {(int64_t)cnt};
    out.bytes = std::make_shared<std::string>((size_t)cnt * 4, '\0');
    for (int64_t i = 0; i < (int64_t)cnt; ++i) {
      float f = (float)(s0 + (double)i * d);
      std::memcpy(out.bytes->data() + 4 * i, &f, 4);
    }
  } else {
    return n.fail(llvm::Twine("Range of ") + dataTypeName(dt) + " is not supported");
  }
  n.setConstOutput(0, std::move(out));
  return success();
}

/// Tile with constant repeats: x reshaped to [1, d0, 1, d1, ...], expanded
/// to [r0, d0, r1, d1, ...] and reshaped to [r0 d0, r1 d1, ...] (the
/// expand's gradient sums the copies).
LogicalResult handleTile(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto x = n.input(0);
  auto reps = n.constInts(1, "repeats");
  if (failed(x) || failed(reps))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if ((int64_t)reps->size() != xt.getRank())
    return n.fail("'repeats' has " + llvm::Twine(reps->size()) + " values for rank " +
                  llvm::Twine(xt.getRank()));
  SmallVector<int64_t> inter, expanded, out;
  for (int64_t i = 0; i < xt.getRank(); ++i) {
    int64_t d = xt.getDimSize(i), r = (*reps)[i];
    if (ShapedType::isDynamic(d))
      return n.fail("the input must have a static shape");
    if (r < 0)
      return n.fail("a negative repeat " + llvm::Twine(r));
    if (r > 0 && d > (((int64_t)1 << 40) / r))
      return n.fail("the tiled shape is too large");
    inter.append({1, d});
    expanded.append({r, d});
    out.push_back(r * d);
  }
  if (llvm::all_of(*reps, [](int64_t r) { return r == 1; })) {
    n.setOutput(0, *x);
    return success();
  }
  auto a = n.im.create(n, "amp.reshape", {*x}, {named(n, "shape", ints(n, inter))}, 1);
  if (failed(a))
    return failure();
  auto e = n.im.create(n, "amp.expand", {(*a)->getResult(0)}, {named(n, "shape", ints(n, expanded))}, 1);
  if (failed(e))
    return failure();
  return emitAll(n, "amp.reshape", {(*e)->getResult(0)}, {named(n, "shape", ints(n, out))}, 1);
}

/// Pad with constant pads, axis by axis: a negative pad slices, a positive
/// one concatenates a block on each side: the constant expanded
/// ("constant"), the first / last slice expanded ("edge"), the mirrored
/// slices without the border ("reflect"), or the other end ("wrap"). The
/// slices', expands' and concatenation's gradients make Pad's.
LogicalResult handlePad(NodeCtx &n) {
  if (failed(n.allowAttrs(n.opset < 11 ? llvm::ArrayRef<llvm::StringRef>{"mode", "pads", "value"}
                                       : llvm::ArrayRef<llvm::StringRef>{"mode"})))
    return failure();
  auto mode = n.getString("mode", std::string("constant"));
  auto x = n.input(0);
  if (failed(mode) || failed(x))
    return failure();
  if (*mode != "constant" && *mode != "edge" && *mode != "reflect" &&
      !(*mode == "wrap" && n.opset >= 19))
    return n.fail("mode '" + *mode + "' is not supported (constant, edge, reflect" +
                  (n.opset >= 19 ? ", wrap" : "") + ")");
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t rank = xt.getRank();
  Type elt = xt.getElementType();
  std::vector<int64_t> pads;
  double value = 0.0;
  std::optional<Attribute> valueAttr;
  std::vector<int64_t> axes;
  if (n.opset < 11) {
    auto p = n.getInts("pads");
    auto v = n.getFloat("value", 0.0f);
    if (failed(p) || failed(v))
      return failure();
    if (!*p)
      return n.fail("attribute 'pads' is required");
    pads = **p;
    value = *v;
  } else {
    auto p = n.constInts(1, "pads");
    if (failed(p))
      return failure();
    pads = *p;
    if (n.hasInput(2)) {
      auto c = n.constInput(2, "constant_value");
      if (failed(c))
        return failure();
      if ((*c)->numElements() != 1)
        return n.fail("'constant_value' must be a single value");
      if (isa<FloatType>(elt))
        value = (*c)->toDouble()[0];
      else
        valueAttr = IntegerAttr::get(elt, (*c)->toInt64()[0]);
    }
    if (n.hasInput(3)) {
      auto a = n.constInts(3, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
  }
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  if (pads.size() != 2 * axes.size())
    return n.fail("'pads' has " + llvm::Twine(pads.size()) + " values for " +
                  llvm::Twine(axes.size()) + " axes (two per axis)");
  auto b = n.im.b;
  Value r = *x;
  auto create = [&](llvm::StringRef name, ValueRange in, SmallVector<NamedAttribute> attrs)
      -> FailureOr<Value> {
    auto op = n.im.create(n, name, in, attrs, 1);
    if (failed(op))
      return failure();
    return (*op)->getResult(0);
  };
  auto slice = [&](Value v, int64_t ax, int64_t start, int64_t end, int64_t step) {
    return create("amp.slice", {v},
                  {named(n, "starts", ints(n, {start})), named(n, "ends", ints(n, {end})),
                   named(n, "axes", ints(n, {ax})), named(n, "steps", ints(n, {step}))});
  };
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t ax = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (ax < 0 || ax >= rank || seen[ax])
      return n.fail("axis " + llvm::Twine(axes[i]) + " is out of range or repeated");
    seen[ax] = true;
    int64_t before = pads[i], after = pads[i + axes.size()];
    auto shape = llvm::to_vector(cast<RankedTensorType>(r.getType()).getShape());
    int64_t dim = shape[ax];
    if (ShapedType::isDynamic(dim))
      return n.fail("a padded axis must have a static size");
    if (before < -dim || after < -dim || before + after < -dim)
      return n.fail("pads " + llvm::Twine(before) + ", " + llvm::Twine(after) +
                    " remove more than the axis' " + llvm::Twine(dim) + " elements");
    // Crops first.
    if (before < 0 || after < 0) {
      auto c = slice(r, ax, std::max<int64_t>(0, -before), dim - std::max<int64_t>(0, -after), 1);
      if (failed(c))
        return failure();
      r = *c;
      dim -= std::max<int64_t>(0, -before) + std::max<int64_t>(0, -after);
      shape[ax] = dim;
      before = std::max<int64_t>(0, before);
      after = std::max<int64_t>(0, after);
    }
    if (before == 0 && after == 0)
      continue;
    if (*mode != "constant" && dim == 0)
      return n.fail("mode '" + *mode + "' cannot pad an empty axis");
    if (*mode == "reflect" && (before > dim - 1 || after > dim - 1))
      return n.fail("mode 'reflect' pads at most " + llvm::Twine(dim - 1) + " on an axis of " +
                    llvm::Twine(dim));
    if (*mode == "wrap" && (before > dim || after > dim))
      return n.fail("mode 'wrap' pads at most the axis size " + llvm::Twine(dim));
    auto block = [&](int64_t width, bool front) -> FailureOr<Value> {
      SmallVector<int64_t> bs(shape.begin(), shape.end());
      bs[ax] = width;
      if (*mode == "constant") {
        auto st = RankedTensorType::get({}, elt);
        Attribute a = valueAttr ? *valueAttr : Attribute(b.getFloatAttr(elt, value));
        Value c = arith::ConstantOp::create(b, n.loc, st, DenseElementsAttr::get(st, a));
        return create("amp.expand", {c}, {named(n, "shape", ints(n, bs))});
      }
      if (*mode == "edge") {
        auto e = front ? slice(r, ax, 0, 1, 1) : slice(r, ax, dim - 1, dim, 1);
        if (failed(e))
          return failure();
        return create("amp.expand", {*e}, {named(n, "shape", ints(n, bs))});
      }
      if (*mode == "reflect") // x[width], ..., x[1] / x[dim-2], ..., x[dim-1-width]
        // (an end before index 0 is written -dim - 1: a plain -1 would count
        // from the back)
        return front ? slice(r, ax, width, 0, -1)
                     : slice(r, ax, dim - 2, dim - 2 - width < 0 ? -dim - 1 : dim - 2 - width, -1);
      return front ? slice(r, ax, dim - width, dim, 1) : slice(r, ax, 0, width, 1); // wrap
    };
    SmallVector<Value> parts;
    if (before) {
      auto v = block(before, true);
      if (failed(v))
        return failure();
      parts.push_back(*v);
    }
    parts.push_back(r);
    if (after) {
      auto v = block(after, false);
      if (failed(v))
        return failure();
      parts.push_back(*v);
    }
    auto c = create("amp.concat", parts, {named(n, "axis", i64(n, ax))});
    if (failed(c))
      return failure();
    r = *c;
  }
  n.setOutput(0, r);
  return success();
}

/// Resize (nearest, linear, cubic) and Upsample, axis by axis: a Gather of
/// constant indices (nearest) or a weighted sum of Gathers (linear: 2 taps,
/// cubic: 4), the indices and weights computed here from ONNX's coordinate
/// transformation, edge taps clamped as its reference does. The gathers'
/// and products' gradients make Resize's. Linear and cubic run in fp32
/// (torch.autocast's upsample ops); nearest only copies.
/// The longest axis Resize makes (4 Mi elements: an image 4 million pixels
/// wide); its host tables are taps x this many entries.
constexpr int64_t kMaxResizedAxis = int64_t(1) << 22;

LogicalResult handleResize(NodeCtx &n, bool upsample) {
  static const llvm::StringRef kAttrs[] = {"mode", "coordinate_transformation_mode", "nearest_mode",
                                           "cubic_coeff_a", "exclude_outside", "extrapolation_value",
                                           "antialias", "axes", "keep_aspect_ratio_policy"};
  if (failed(n.allowAttrs(upsample || n.opset < 11 ? llvm::ArrayRef<llvm::StringRef>(kAttrs, 1)
                                                    : llvm::ArrayRef<llvm::StringRef>(kAttrs))))
    return failure();
  auto mode = n.getString("mode", std::string("nearest"));
  bool old = upsample || n.opset < 11;
  auto coord = n.getString("coordinate_transformation_mode",
                           std::string(old ? "asymmetric" : "half_pixel"));
  auto nearest = n.getString("nearest_mode", std::string(old ? "floor" : "round_prefer_floor"));
  auto cubicA = n.getFloat("cubic_coeff_a", -0.75f);
  auto exclude = n.getInt("exclude_outside", 0);
  auto antialias = n.getInt("antialias", 0);
  auto policy = n.getString("keep_aspect_ratio_policy", std::string("stretch"));
  auto axesAttr = n.getInts("axes");
  auto x = n.input(0);
  if (failed(mode) || failed(coord) || failed(nearest) || failed(cubicA) || failed(exclude) ||
      failed(antialias) || failed(policy) || failed(axesAttr) || failed(x))
    return failure();
  if (*mode != "nearest" && *mode != "linear" && *mode != "cubic" &&
      !(upsample && *mode == "bilinear"))
    return n.fail("unsupported op ai.onnx." + n.node.op_type() + " with mode '" + *mode +
                  "' (nearest, linear, cubic)");
  bool isNearest = *mode == "nearest";
  int taps = isNearest ? 1 : (*mode == "cubic" ? 4 : 2);
  static const char *kCoords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                   "tf_half_pixel_for_nn", "half_pixel_symmetric"};
  if (llvm::find(kCoords, *coord) == std::end(kCoords))
    return n.fail("unsupported op ai.onnx.Resize with coordinate_transformation_mode '" + *coord +
                  "' (half_pixel, pytorch_half_pixel, align_corners, asymmetric, "
                  "tf_half_pixel_for_nn, half_pixel_symmetric)");
  if (*nearest != "round_prefer_floor" && *nearest != "round_prefer_ceil" && *nearest != "floor" &&
      *nearest != "ceil")
    return n.fail("nearest_mode '" + *nearest + "' is not supported");
  if (*policy != "stretch")
    return n.fail("unsupported op ai.onnx.Resize with keep_aspect_ratio_policy '" + *policy +
                  "' (stretch)");
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t rank = xt.getRank();
  if (!xt.hasStaticShape())
    return n.fail("the input must have a static shape");
  // Scales or sizes, for `axes` (all by default).
  std::vector<int64_t> axes;
  if (*axesAttr)
    for (int64_t a : **axesAttr)
      axes.push_back(a < 0 ? a + rank : a);
  else
    for (int64_t a = 0; a < rank; ++a)
      axes.push_back(a);
  for (int64_t a : axes)
    if (a < 0 || a >= rank)
      return n.fail("an axis is out of range for rank " + llvm::Twine(rank));
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  size_t scalesIn = old ? 1 : 2, sizesIn = 3;
  if (!old)
    (void)n.hasInput(1); // roi: read by tf_crop_and_resize only, refused above
  if (n.hasInput(scalesIn)) {
    auto c = n.constInput(scalesIn, "scales");
    if (failed(c))
      return failure();
    scales = (*c)->toDouble();
  }
  if (!old && n.hasInput(sizesIn)) {
    auto c = n.constInts(sizesIn, "sizes");
    if (failed(c))
      return failure();
    sizes = *c;
  }
  if (scales.empty() == sizes.empty())
    return n.fail("needs exactly one of 'scales' and 'sizes' (non-empty)");
  size_t given = scales.empty() ? sizes.size() : scales.size();
  if (given != axes.size())
    return n.fail(llvm::Twine(scales.empty() ? "'sizes'" : "'scales'") + " has " + llvm::Twine(given) +
                  " values for " + llvm::Twine(axes.size()) + " axes");
  auto b = n.im.b;
  Type elt = xt.getElementType();
  if (!isNearest && !isa<FloatType>(elt))
    return n.fail("mode '" + *mode + "' needs a float input");
  ClassMark mark(n);
  Value r = *x;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t ax = axes[i], len = xt.getDimSize(ax), out;
    double scale;
    if (!sizes.empty()) {
      out = sizes[i];
      if (out <= 0 || len == 0)
        return n.fail("a size must be positive (got " + llvm::Twine(out) + ")");
      scale = (double)out / (double)len;
    } else {
      scale = scales[i];
      if (!(scale > 0) || !std::isfinite(scale))
        return n.fail("a scale must be a positive number");
      double outD = std::floor((double)len * scale);
      if (!(outD <= double(kMaxResizedAxis)))
        return n.fail("the scale " + llvm::Twine(std::to_string(scale)) + " makes axis " +
                      llvm::Twine(ax) + " longer than 2^22 elements");
      out = (int64_t)outD;
      if (out <= 0)
        return n.fail("the scale " + llvm::Twine(std::to_string(scale)) + " leaves no element on axis " + llvm::Twine(ax));
    }
    // The taps and weights below are host tables of taps x out entries:
    // the axis is bounded before they are allocated.
    if (out > kMaxResizedAxis)
      return n.fail("the resized axis " + llvm::Twine(ax) + " would have " + llvm::Twine(out) +
                    " elements, more than 2^22");
    if (*antialias && scale < 1.0 && !isNearest)
      return n.fail("unsupported op ai.onnx.Resize with antialias = 1 on a downscale");
    // Taps and weights per output index; ONNX's reference uses the
    // unrounded output length scale * len where the formulas name it.
    double outF = scale * (double)len;
    std::vector<std::vector<int64_t>> idx(taps, std::vector<int64_t>(out));
    std::vector<std::vector<double>> w(taps, std::vector<double>(out, 0.0));
    for (int64_t o = 0; o < out; ++o) {
      double xo;
      double oo = (double)o;
      if (*coord == "half_pixel")
        xo = (oo + 0.5) / scale - 0.5;
      else if (*coord == "pytorch_half_pixel") // (the reference's -0.5 for one output)
        xo = outF == 1.0 ? -0.5 : (oo + 0.5) / scale - 0.5;
      else if (*coord == "align_corners")
        xo = outF == 1.0 ? 0.0 : oo * (double)(len - 1) / (outF - 1.0);
      else if (*coord == "asymmetric")
        xo = oo / scale;
      else if (*coord == "tf_half_pixel_for_nn")
        xo = (oo + 0.5) / scale;
      else { // half_pixel_symmetric
        double adj = (double)out / outF;
        double center = (double)len / 2.0;
        xo = center * (1.0 - adj) + (oo + 0.5) / scale - 0.5;
      }
      auto clampIdx = [&](int64_t k) { return std::max<int64_t>(0, std::min<int64_t>(k, len - 1)); };
      // (Clamped: the taps are clamped to the axis anyway, and a source
      // coordinate past 2^62 has no int64.)
      xo = std::max(-4.0e18, std::min(xo, 4.0e18));
      bool whole = xo == std::floor(xo);
      int64_t i0 = (int64_t)std::floor(xo);
      double ratio = whole ? 1.0 : xo - (double)i0;
      if (whole)
        i0 -= 1; // the reference's neighbours of an integer x: x - 1 and x (ratio 1)
      if (isNearest) {
        int64_t k;
        if (whole)
          k = i0 + 1;
        else if (*nearest == "floor")
          k = i0;
        else if (*nearest == "ceil")
          k = i0 + 1;
        else if (*nearest == "round_prefer_floor")
          k = ratio <= 0.5 ? i0 : i0 + 1;
        else
          k = ratio < 0.5 ? i0 : i0 + 1;
        idx[0][o] = clampIdx(k);
        w[0][o] = 1.0;
      } else if (taps == 2) {
        idx[0][o] = clampIdx(i0);
        idx[1][o] = clampIdx(i0 + 1);
        w[0][o] = 1.0 - ratio;
        w[1][o] = ratio;
      } else {
        double A = *cubicA, t = ratio, u = 1.0 - ratio;
        double c[4] = {((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
                       ((A + 2) * t - (A + 3)) * t * t + 1, ((A + 2) * u - (A + 3)) * u * u + 1,
                       ((A * (u + 1) - 5 * A) * (u + 1) + 8 * A) * (u + 1) - 4 * A};
        double sum = 0.0;
        for (int k = 0; k < 4; ++k) {
          int64_t at = i0 - 1 + k;
          if (*exclude && (at < 0 || at >= len))
            c[k] = 0.0;
          sum += c[k];
        }
        for (int k = 0; k < 4; ++k) {
          idx[k][o] = clampIdx(i0 - 1 + k);
          w[k][o] = *exclude ? c[k] / sum : c[k];
        }
      }
    }
    // An axis whose output is its input (every o reads o, weight 1): skip.
    bool identity = out == len;
    for (int64_t o = 0; identity && o < out; ++o) {
      double self = 0.0, other = 0.0;
      for (int k = 0; k < taps; ++k)
        (idx[k][o] == o ? self : other) += std::fabs(w[k][o]);
      identity = self == 1.0 && other == 0.0;
    }
    if (identity)
      continue;
    auto it = RankedTensorType::get({out}, b.getI64Type());
    SmallVector<int64_t> wshape(rank - ax, 1);
    wshape[0] = out;
    auto wt = RankedTensorType::get(wshape, elt);
    Value acc;
    for (int k = 0; k < taps; ++k) {
      if (!isNearest && llvm::all_of(w[k], [](double v) { return v == 0.0; }))
        continue;
      Value iv = arith::ConstantOp::create(b, n.loc, it, DenseElementsAttr::get(it, ArrayRef<int64_t>(idx[k])));
      auto g = n.im.create(n, "amp.gather", {r, iv}, {named(n, "axis", i64(n, ax))}, 1);
      if (failed(g))
        return failure();
      Value term = (*g)->getResult(0);
      if (!isNearest) {
        SmallVector<Attribute> wa;
        for (double v : w[k])
          wa.push_back(b.getFloatAttr(elt, v));
        Value wv = arith::ConstantOp::create(b, n.loc, wt, DenseElementsAttr::get(wt, wa));
        auto m = n.im.create(n, "amp.mul", {term, wv}, {}, 1);
        if (failed(m))
          return failure();
        term = (*m)->getResult(0);
      }
      if (acc) {
        auto a = n.im.create(n, "amp.add", {acc, term}, {}, 1);
        if (failed(a))
          return failure();
        term = (*a)->getResult(0);
      }
      acc = term;
    }
    r = acc;
  }
  if (!isNearest)
    mark.apply("fp32");
  n.setOutput(0, r);
  return success();
}

/// DepthToSpace (DCR / CRD) and SpaceToDepth: a reshape to 6-D, a
/// transpose, a reshape back (torch.nn.PixelShuffle is DepthToSpace CRD).
LogicalResult handleDepthSpace(NodeCtx &n, bool toSpace) {
  if (failed(n.allowAttrs(toSpace ? llvm::ArrayRef<llvm::StringRef>{"blocksize", "mode"}
                                  : llvm::ArrayRef<llvm::StringRef>{"blocksize"})))
    return failure();
  auto bs = n.getInt("blocksize", std::nullopt);
  auto mode = n.getString("mode", std::string("DCR"));
  auto x = n.input(0);
  if (failed(bs) || failed(mode) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (xt.getRank() != 4 || !xt.hasStaticShape())
    return n.fail("the input must be [N, C, H, W] with a static shape");
  int64_t b = *bs, N = xt.getDimSize(0), C = xt.getDimSize(1), H = xt.getDimSize(2),
          W = xt.getDimSize(3);
  if (b < 1)
    return n.fail("blocksize must be positive");
  if (*mode != "DCR" && *mode != "CRD")
    return n.fail("mode '" + *mode + "' is not supported (DCR, CRD)");
  SmallVector<int64_t> s6, perm, out;
  if (toSpace) {
    if (C % (b * b))
      return n.fail("channels " + llvm::Twine(C) + " are not a multiple of blocksize^2");
    int64_t c = C / (b * b);
    if (*mode == "DCR") {
      s6 = {N, b, b, c, H, W};
      perm = {0, 3, 4, 1, 5, 2};
    } else {
      s6 = {N, c, b, b, H, W};
      perm = {0, 1, 4, 2, 5, 3};
    }
    out = {N, c, H * b, W * b};
  } else {
    if (H % b || W % b)
      return n.fail("height and width must be multiples of blocksize");
    s6 = {N, C, H / b, b, W / b, b};
    perm = {0, 3, 5, 1, 2, 4};
    out = {N, C * b * b, H / b, W / b};
  }
  auto r = n.im.create(n, "amp.reshape", {*x}, {named(n, "shape", ints(n, s6))}, 1);
  if (failed(r))
    return failure();
  auto t = n.im.create(n, "amp.transpose", {(*r)->getResult(0)}, {named(n, "perm", ints(n, perm))}, 1);
  if (failed(t))
    return failure();
  return emitAll(n, "amp.reshape", {(*t)->getResult(0)}, {named(n, "shape", ints(n, out))}, 1);
}

/// Einsum as torch.einsum computes it: each operand's repeated labels
/// (diagonals) taken by a mask and a sum, labels no one else needs summed,
/// then the operands contracted left to right, each pair one batched
/// amp.matmul ([batch..., M, K] x [batch..., K, N]) between transposes and
/// reshapes; the result transposed to the output's order. The ellipsis
/// broadcasts as numpy's; implicit output: the ellipsis, then the labels
/// seen once, sorted.
LogicalResult handleEinsum(NodeCtx &n) {
  if (failed(n.allowAttrs({"equation"})))
    return failure();
  auto eqn = n.getString("equation", std::nullopt);
  if (failed(eqn))
    return failure();
  std::string eq;
  for (char c : *eqn)
    if (c != ' ')
      eq += c;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::optional<std::string> rhs;
  if (arrow != std::string::npos)
    rhs = eq.substr(arrow + 2);
  SmallVector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (terms.size() != n.numInputs())
    return n.fail("equation '" + *eqn + "' has " + llvm::Twine(terms.size()) + " operands, the node " +
                  llvm::Twine(n.numInputs()) + " inputs");
  // Labels: letters 0..51, ellipsis dims 100 + position (right-aligned).
  auto parse = [&](const std::string &t, int64_t rank, SmallVector<int64_t> &labels,
                   int64_t &ellDims, bool isOut) -> LogicalResult {
    size_t dots = t.find("...");
    if (dots != std::string::npos && t.find("...", dots + 1) != std::string::npos)
      return n.fail("equation '" + *eqn + "': more than one ellipsis in '" + t + "'");
    int64_t letters = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      if (dots != std::string::npos && i >= dots && i < dots + 3)
        continue;
      if (!llvm::isAlpha(t[i]))
        return n.fail("equation '" + *eqn + "': '" + std::string(1, t[i]) + "' is not a label");
      ++letters;
    }
    ellDims = dots == std::string::npos ? 0 : rank - letters;
    if (!isOut && (ellDims < 0 || (dots == std::string::npos && letters != rank)))
      return n.fail("equation '" + *eqn + "': term '" + t + "' does not match an input of rank " +
                    llvm::Twine(rank));
    for (size_t i = 0; i < t.size(); ++i) {
      if (dots != std::string::npos && i == dots) {
        // Placed once the widest ellipsis is known (the output's: one -1).
        for (int64_t k = 0; k < (isOut ? 1 : ellDims); ++k)
          labels.push_back(-1 - k);
        i += 2;
        continue;
      }
      labels.push_back(llvm::isLower(t[i]) ? t[i] - 'a' : 26 + t[i] - 'A');
    }
    return success();
  };
  struct Term {
    Value v;
    SmallVector<int64_t> labels;
  };
  SmallVector<Term> ops;
  SmallVector<int64_t> ellOf;
  int64_t maxEll = 0;
  Type elt;
  for (size_t i = 0; i < terms.size(); ++i) {
    auto v = n.input(i);
    if (failed(v))
      return failure();
    auto t = cast<RankedTensorType>(v->getType());
    if (!t.hasStaticShape())
      return n.fail("needs static input shapes");
    if (!isa<FloatType>(t.getElementType()))
      return n.fail("only float tensors are supported");
    elt = t.getElementType();
    Term term{*v, {}};
    int64_t ell;
    if (failed(parse(terms[i], t.getRank(), term.labels, ell, false)))
      return failure();
    ellOf.push_back(ell);
    maxEll = std::max(maxEll, ell);
    ops.push_back(term);
  }
  for (size_t i = 0; i < ops.size(); ++i)
    for (int64_t &l : ops[i].labels)
      if (l < 0)
        l = 100 + (maxEll - ellOf[i]) + (-1 - l);
  // Sizes (ellipsis dims broadcast; letters must agree).
  std::map<int64_t, int64_t> size;
  for (const Term &t : ops) {
    auto shape = cast<RankedTensorType>(t.v.getType()).getShape();
    for (auto [l, d] : llvm::zip(t.labels, shape)) {
      auto it = size.find(l);
      if (it == size.end() || it->second == d)
        size[l] = d;
      else if (l >= 100 && (it->second == 1 || d == 1))
        size[l] = std::max(it->second, d);
      else
        return n.fail("equation '" + *eqn + "': label '" +
                      (l >= 100 ? std::string("...") : std::string(1, l < 26 ? 'a' + l : 'A' + l - 26)) +
                      "' spans dims of sizes " + llvm::Twine(it->second) + " and " + llvm::Twine(d));
    }
  }
  SmallVector<int64_t> out;
  if (rhs) {
    int64_t ell;
    if (failed(parse(*rhs, 0, out, ell, true)))
      return failure();
    SmallVector<int64_t> fixed;
    for (int64_t l : out)
      if (l == -1)
        for (int64_t k = 0; k < maxEll; ++k)
          fixed.push_back(100 + k);
      else if (l >= 0)
        fixed.push_back(l);
    out = fixed;
    for (int64_t l : out) {
      if (!size.count(l))
        return n.fail("equation '" + *eqn + "': output label '" +
                      std::string(1, l < 26 ? 'a' + l : 'A' + l - 26) + "' is in no input");
      if (llvm::count(out, l) != 1)
        return n.fail("equation '" + *eqn + "': an output label repeats");
    }
  } else {
    for (int64_t k = 0; k < maxEll; ++k)
      out.push_back(100 + k);
    std::map<int64_t, int> seen;
    for (const Term &t : ops)
      for (int64_t l : t.labels)
        if (l < 100)
          ++seen[l];
    // ASCII order: upper case before lower case.
    for (int64_t l = 26; l < 52; ++l)
      if (seen.count(l) && seen[l] == 1)
        out.push_back(l);
    for (int64_t l = 0; l < 26; ++l)
      if (seen.count(l) && seen[l] == 1)
        out.push_back(l);
  }

  Elementwise e{n};
  auto create = [&](llvm::StringRef name, ValueRange ins, ArrayRef<NamedAttribute> attrs) {
    return e.op(name, ins, attrs);
  };
  auto shapeOf = [](Value v) { return cast<RankedTensorType>(v.getType()).getShape(); };
  auto sumOver = [&](Term &t, ArrayRef<int64_t> axes) {
    if (axes.empty() || !e.ok)
      return;
    t.v = create("amp.reduce_sum", {t.v},
                 {named(n, "axes", ints(n, axes)), named(n, "keepdims", boolean(n, false))});
    SmallVector<int64_t> keep;
    for (auto [i, l] : llvm::enumerate(t.labels))
      if (!llvm::is_contained(axes, (int64_t)i))
        keep.push_back(l);
    t.labels = keep;
  };
  auto permute = [&](Term &t, ArrayRef<int64_t> order) {
    SmallVector<int64_t> perm;
    for (int64_t l : order)
      perm.push_back(llvm::find(t.labels, l) - t.labels.begin());
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i)
      identity &= perm[i] == (int64_t)i;
    if (!identity && e.ok)
      t.v = create("amp.transpose", {t.v}, {named(n, "perm", ints(n, perm))});
    t.labels.assign(order.begin(), order.end());
  };
  auto reshape = [&](Value v, ArrayRef<int64_t> shape) {
    if (!e.ok || shapeOf(v) == shape)
      return v;
    return create("amp.reshape", {v}, {named(n, "shape", ints(n, shape))});
  };
  // Diagonals: x * eye over the two dims, summed over the second.
  for (Term &t : ops) {
    for (bool again = true; again && e.ok;) {
      again = false;
      for (size_t p = 0; p < t.labels.size() && !again; ++p)
        for (size_t q = p + 1; q < t.labels.size() && !again; ++q) {
          if (t.labels[p] != t.labels[q])
            continue;
          auto shape = shapeOf(t.v);
          if (shape[p] != shape[q])
            return n.fail("equation '" + *eqn + "': a diagonal of dims of sizes " + llvm::Twine(shape[p]) +
                          " and " + llvm::Twine(shape[q]));
          SmallVector<int64_t> ms(shape.size(), 1);
          ms[p] = ms[q] = shape[p];
          auto mt = RankedTensorType::get(ms, elt);
          SmallVector<Attribute> vals;
          auto zero = n.im.b.getFloatAttr(elt, 0.0), one = n.im.b.getFloatAttr(elt, 1.0);
          for (int64_t i = 0; i < shape[p]; ++i)
            for (int64_t j = 0; j < shape[p]; ++j)
              vals.push_back(i == j ? one : zero);
          Value mask = arith::ConstantOp::create(n.im.b, n.loc, mt, DenseElementsAttr::get(mt, vals));
          t.v = e.mul(t.v, mask);
          sumOver(t, {(int64_t)q});
          again = true;
        }
    }
  }
  // Labels needed after operand i: in the output or a later operand.
  auto neededAfter = [&](size_t i, int64_t l) {
    if (llvm::is_contained(out, l))
      return true;
    for (size_t j = i + 1; j < ops.size(); ++j)
      if (llvm::is_contained(ops[j].labels, l))
        return true;
    return false;
  };
  auto inOthers = [&](size_t i, int64_t l) {
    for (size_t j = 0; j < ops.size(); ++j)
      if (j != i && llvm::is_contained(ops[j].labels, l))
        return true;
    return llvm::is_contained(out, l);
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    SmallVector<int64_t> axes;
    for (auto [k, l] : llvm::enumerate(ops[i].labels))
      if (!inOthers(i, l))
        axes.push_back(k);
    sumOver(ops[i], axes);
  }
  Term cur = ops[0];
  for (size_t i = 1; i < ops.size() && e.ok; ++i) {
    Term other = ops[i];
    SmallVector<int64_t> batch, con, aOnly, bOnly;
    for (int64_t l : cur.labels) {
      bool inB = llvm::is_contained(other.labels, l);
      bool later = neededAfter(i, l);
      (inB ? (later ? batch : con) : aOnly).push_back(l);
    }
    for (int64_t l : other.labels)
      if (!llvm::is_contained(cur.labels, l))
        bOnly.push_back(l);
    auto sizeIn = [&](const Term &t, int64_t l) {
      return shapeOf(t.v)[llvm::find(t.labels, l) - t.labels.begin()];
    };
    for (int64_t l : con)
      if (sizeIn(cur, l) != sizeIn(other, l))
        return n.fail("equation '" + *eqn + "': a summed ellipsis dim is broadcast (not supported)");
    auto prod = [&](const Term &t, ArrayRef<int64_t> ls) {
      int64_t p = 1;
      for (int64_t l : ls)
        p *= sizeIn(t, l);
      return p;
    };
    SmallVector<int64_t> aOrder(batch), bOrder(batch), aShape, bShape, rShape;
    llvm::append_range(aOrder, aOnly);
    llvm::append_range(aOrder, con);
    llvm::append_range(bOrder, con);
    llvm::append_range(bOrder, bOnly);
    for (int64_t l : batch) {
      aShape.push_back(sizeIn(cur, l));
      bShape.push_back(sizeIn(other, l));
      rShape.push_back(std::max(sizeIn(cur, l), sizeIn(other, l)));
    }
    int64_t M = prod(cur, aOnly), K = prod(cur, con), N = prod(other, bOnly);
    for (int64_t l : aOnly)
      rShape.push_back(sizeIn(cur, l));
    for (int64_t l : bOnly)
      rShape.push_back(sizeIn(other, l));
    permute(cur, aOrder);
    permute(other, bOrder);
    aShape.append({M, K});
    bShape.append({K, N});
    Value a = reshape(cur.v, aShape), b = reshape(other.v, bShape);
    Value mm = e.ok ? create("amp.matmul", {a, b}, {}) : Value();
    SmallVector<int64_t> labels(batch);
    llvm::append_range(labels, aOnly);
    llvm::append_range(labels, bOnly);
    cur = Term{reshape(mm, rShape), labels};
  }
  if (!e.ok)
    return failure();
  SmallVector<int64_t> axes;
  for (auto [k, l] : llvm::enumerate(cur.labels))
    if (!llvm::is_contained(out, l))
      axes.push_back(k);
  sumOver(cur, axes);
  permute(cur, out);
  if (!e.ok)
    return failure();
  n.setOutput(0, cur.v);
  return success();
}

/// RNN (kind 0), GRU (1) and LSTM (2), unrolled over the static sequence:
/// per direction one amp.gemm of all steps' inputs by W (with Wb), then per
/// step a gemm of the state by R (with Rb) and the gates' element-wise ops,
/// exactly the ONNX equations (gate orders: GRU z r h, LSTM i o f c;
/// peepholes P = [Pi, Po, Pf]; clip on the activations' inputs). Variable
/// sequence_lens keep the state and write zeros past each sequence's end
/// (a reverse pass starts at its last valid step; an empty sequence's final
/// state is 0, as onnxruntime's). Gradients come from the
/// ops composed (as torch's own nn.LSTM / nn.GRU backward).
LogicalResult handleRecurrent(NodeCtx &n, int kind) {
  SmallVector<llvm::StringRef> known{"activation_alpha", "activation_beta", "activations", "clip",
                                     "direction", "hidden_size", "layout"};
  if (kind == 1)
    known.push_back("linear_before_reset");
  if (kind == 2)
    known.push_back("input_forget");
  if (failed(n.allowAttrs(known)))
    return failure();
  auto dirS = n.getString("direction", std::string("forward"));
  auto hidden = n.getInt("hidden_size", std::nullopt);
  auto layout = n.getInt("layout", 0);
  auto lbr = n.getInt("linear_before_reset", 0);
  auto inForget = n.getInt("input_forget", 0);
  if (failed(dirS) || failed(hidden) || failed(layout) || failed(lbr) || failed(inForget))
    return failure();
  const onnx::AttributeProto *clipA = n.attr("clip");
  std::optional<float> clip;
  if (clipA) {
    auto c = n.getFloat("clip", std::nullopt);
    if (failed(c))
      return failure();
    if (!(*c > 0.0f))
      return n.fail("clip must be positive");
    clip = *c;
  }
  int64_t D = *dirS == "bidirectional" ? 2 : 1;
  if (*dirS != "forward" && *dirS != "reverse" && *dirS != "bidirectional")
    return n.fail("direction '" + *dirS + "' is not forward, reverse or bidirectional");
  int64_t Hd = *hidden, G = kind == 0 ? 1 : kind == 1 ? 3 : 4, nAct = kind + 1;
  if (Hd < 1)
    return n.fail("hidden_size must be positive");
  if (*layout != 0 && *layout != 1)
    return n.fail("layout must be 0 or 1");
  // Activations, alphas and betas, consumed in order.
  SmallVector<std::string> acts;
  if (const onnx::AttributeProto *a = n.attr("activations"))
    for (const auto &v : a->strings())
      acts.push_back(llvm::StringRef(v).lower());
  if (acts.empty())
    for (int64_t d = 0; d < D; ++d) {
      static const char *defaults[3][3] = {{"tanh"}, {"sigmoid", "tanh"}, {"sigmoid", "tanh", "tanh"}};
      for (int64_t k = 0; k < nAct; ++k)
        acts.push_back(defaults[kind][k]);
    }
  if ((int64_t)acts.size() != nAct * D)
    return n.fail("needs " + llvm::Twine(nAct * D) + " activations, got " + llvm::Twine(acts.size()));
  std::vector<float> alphas, betas;
  if (const onnx::AttributeProto *a = n.attr("activation_alpha"))
    alphas.assign(a->floats().begin(), a->floats().end());
  if (const onnx::AttributeProto *a = n.attr("activation_beta"))
    betas.assign(a->floats().begin(), a->floats().end());
  struct Act {
    std::string name;
    float alpha, beta;
  };
  SmallVector<Act> actList;
  size_t ai = 0, bi = 0;
  for (const std::string &name : acts) {
    static const std::map<std::string, std::pair<int, float>> alphaOf = {
        {"leakyrelu", {1, 0.01f}}, {"thresholdedrelu", {1, 1.0f}}, {"scaledtanh", {1, 1.0f}},
        {"hardsigmoid", {1, 0.2f}}, {"elu", {1, 1.0f}},          {"affine", {1, 1.0f}}};
    static const std::map<std::string, float> betaOf = {
        {"scaledtanh", 1.0f}, {"hardsigmoid", 0.5f}, {"affine", 0.0f}};
    static const std::set<std::string> plain = {"sigmoid", "tanh", "relu", "softsign", "softplus"};
    Act a{name, 0.0f, 0.0f};
    if (auto it = alphaOf.find(name); it != alphaOf.end())
      a.alpha = ai < alphas.size() ? alphas[ai++] : it->second.second;
    else if (!plain.count(name))
      return n.fail("unsupported op ai.onnx." + n.node.op_type() + " with activation '" + name +
                    "' (Sigmoid, Tanh, Relu, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, "
                    "Softsign, Softplus, Affine are supported)");
    if (auto it = betaOf.find(name); it != betaOf.end())
      a.beta = bi < betas.size() ? betas[bi++] : it->second;
    actList.push_back(a);
  }

  auto x = n.input(0), w = n.input(1), r = n.input(2);
  if (failed(x) || failed(w) || failed(r))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  Type elt = xt.getElementType();
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  if (xt.getRank() != 3 || !xt.hasStaticShape())
    return n.fail("X must be 3-D with a static shape");
  int64_t T = xt.getDimSize(*layout ? 1 : 0), B = xt.getDimSize(*layout ? 0 : 1), I = xt.getDimSize(2);
  auto shapeString = [](ArrayRef<int64_t> shape) {
    std::string str = "[";
    for (auto [i, d] : llvm::enumerate(shape))
      str += (i ? ", " : "") + std::to_string(d);
    return str + "]";
  };
  auto expect = [&](Value v, ArrayRef<int64_t> shape, const char *what) -> LogicalResult {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getShape() != shape || t.getElementType() != elt)
      return n.fail(llvm::Twine(what) + " must be " + shapeString(shape) + " of X's type, got " +
                    shapeString(t.getShape()));
    return success();
  };
  if (failed(expect(*w, {D, G * Hd, I}, "W")) || failed(expect(*r, {D, G * Hd, Hd}, "R")))
    return failure();
  Value bias = n.optInput(3);
  if (bias && failed(expect(bias, {D, 2 * G * Hd}, "B")))
    return failure();
  Value seqLens = n.optInput(4);
  SmallVector<int64_t> stateShape = *layout ? SmallVector<int64_t>{B, D, Hd} : SmallVector<int64_t>{D, B, Hd};
  Value h0 = n.optInput(5), c0 = kind == 2 ? n.optInput(6) : Value(), peep = kind == 2 ? n.optInput(7) : Value();
  if ((h0 && failed(expect(h0, stateShape, "initial_h"))) ||
      (c0 && failed(expect(c0, stateShape, "initial_c"))) || (peep && failed(expect(peep, {D, 3 * Hd}, "P"))))
    return failure();
  for (size_t i = 3; i < n.numInputs(); ++i)
    if (n.hasInput(i) && !n.optInput(i))
      return failure();
  if (seqLens) {
    auto st = cast<RankedTensorType>(seqLens.getType());
    if (st.getShape() != ArrayRef<int64_t>{B} || !isa<IntegerType>(st.getElementType()))
      return n.fail("sequence_lens must be [" + llvm::Twine(B) + "] integers");
    // Constant lengths all equal to the sequence's: no masks.
    auto it = n.im.consts.find(n.node.input(4));
    if (it != n.im.consts.end()) {
      auto lens = it->second.toInt64();
      if (llvm::all_of(lens, [&](int64_t l) { return l == T; }))
        seqLens = Value();
      else if (llvm::any_of(lens, [&](int64_t l) { return l < 0 || l > T; }))
        return n.fail("sequence_lens must lie in [0, " + llvm::Twine(T) + "]");
    }
  }

  Elementwise e{n};
  auto &bld = n.im.b;
  auto sliceOf = [&](Value v, int64_t axis, int64_t start, int64_t end) {
    return e.op("amp.slice", {v},
                {named(n, "starts", ints(n, {start})), named(n, "ends", ints(n, {end})),
                 named(n, "axes", ints(n, {axis}))});
  };
  auto reshape = [&](Value v, ArrayRef<int64_t> shape) {
    return e.op("amp.reshape", {v}, {named(n, "shape", ints(n, shape))});
  };
  auto transpose = [&](Value v, ArrayRef<int64_t> perm) {
    return e.op("amp.transpose", {v}, {named(n, "perm", ints(n, perm))});
  };
  auto gemmT = [&](Value a, Value b, Value c) { // a @ b^T + c
    SmallVector<Value> ins{a, b};
    if (c)
      ins.push_back(c);
    return e.op("amp.gemm", ins, {named(n, "trans_b", boolean(n, true))});
  };
  auto apply = [&](const Act &a, Value v) -> Value {
    if (clip)
      v = e.op("amp.clip", {v}, {named(n, "min", f32(n, -*clip)), named(n, "max", f32(n, *clip))});
    const std::string &k = a.name;
    if (k == "sigmoid" || k == "tanh" || k == "relu" || k == "softsign" || k == "softplus")
      return e.op(("amp." + k).c_str(), {v});
    if (k == "leakyrelu")
      return e.op("amp.leaky_relu", {v}, {named(n, "alpha", f32(n, a.alpha))});
    if (k == "thresholdedrelu")
      return e.op("amp.thresholded_relu", {v}, {named(n, "alpha", f32(n, a.alpha))});
    if (k == "elu")
      return e.op("amp.elu", {v}, {named(n, "alpha", f32(n, a.alpha))});
    if (k == "hardsigmoid")
      return e.op("amp.hard_sigmoid", {v}, {named(n, "alpha", f32(n, a.alpha)), named(n, "beta", f32(n, a.beta))});
    if (k == "affine")
      return e.add(e.mul(v, e.cst(elt, a.alpha)), e.cst(elt, a.beta));
    // scaledtanh
    return e.mul(e.op("amp.tanh", {e.mul(v, e.cst(elt, a.beta))}), e.cst(elt, a.alpha));
  };

  Value xs = *layout ? transpose(*x, {1, 0, 2}) : *x; // [T, B, I]
  Value x2 = reshape(xs, {T * B, I});
  Value lens;
  if (seqLens) {
    auto st = cast<RankedTensorType>(seqLens.getType());
    lens = CastOp::create(bld, n.loc, RankedTensorType::get({B, 1}, bld.getI64Type()),
                          reshape(seqLens, {B, 1})).getResult();
    (void)st;
  }
  auto stateT = RankedTensorType::get({B, Hd}, elt);
  Value zeros = arith::ConstantOp::create(bld, n.loc, stateT,
                                          DenseElementsAttr::get(stateT, bld.getFloatAttr(elt, 0.0)));
  auto initial = [&](Value s, int64_t d) -> Value {
    if (!s)
      return zeros;
    Value sd = D == 1 ? s : sliceOf(s, *layout ? 1 : 0, d, d + 1);
    return reshape(sd, {B, Hd});
  };
  auto ofDir = [&](Value v, int64_t d) { return D == 1 ? v : sliceOf(v, 0, d, d + 1); };
  SmallVector<Value> ys(D), yh(D), yc(D);
  for (int64_t d = 0; d < D && e.ok; ++d) {
    bool reverse = *dirS == "reverse" || d == 1;
    Value wd = reshape(ofDir(*w, d), {G * Hd, I});
    Value rd = reshape(ofDir(*r, d), {G * Hd, Hd});
    Value wb, rb;
    if (bias) {
      Value bd = reshape(ofDir(bias, d), {2 * G * Hd});
      wb = sliceOf(bd, 0, 0, G * Hd);
      rb = sliceOf(bd, 0, G * Hd, 2 * G * Hd);
    }
    // Peepholes, hoisted out of the steps.
    Value pi, po, pf;
    if (peep) {
      Value pd = reshape(ofDir(peep, d), {3 * Hd});
      pi = sliceOf(pd, 0, 0, Hd);
      po = sliceOf(pd, 0, Hd, 2 * Hd);
      pf = sliceOf(pd, 0, 2 * Hd, 3 * Hd);
    }
    // Both biases go with the input's product, but for GRU with
    // linear_before_reset, whose Rbh is multiplied by the reset gate.
    Value rbh, xb;
    if (bias) {
      if (kind == 1 && *lbr) {
        rbh = sliceOf(rb, 0, 2 * Hd, 3 * Hd);
        xb = e.op("amp.concat", {e.add(sliceOf(wb, 0, 0, 2 * Hd), sliceOf(rb, 0, 0, 2 * Hd)),
                                 sliceOf(wb, 0, 2 * Hd, 3 * Hd)},
                  {named(n, "axis", i64(n, 0))});
      } else {
        xb = e.add(wb, rb);
      }
    }
    Value xw = gemmT(x2, wd, xb); // [T * B, G * Hd]
    const Act *f = &actList[d * nAct], *g = nAct > 1 ? &actList[d * nAct + 1] : nullptr,
              *h = nAct > 2 ? &actList[d * nAct + 2] : nullptr;
    Value H = initial(h0, d), C = kind == 2 ? initial(c0, d) : Value();
    // GRU: R split into the z / r rows and the h rows.
    Value rzr, rh;
    if (kind == 1) {
      rzr = sliceOf(rd, 0, 0, 2 * Hd);
      rh = sliceOf(rd, 0, 2 * Hd, 3 * Hd);
    }
    // state @ m^T + c: one gemm (c: the step's input product), nothing for
    // the zero state.
    auto plus = [&](Value state, Value m, Value c) { return state == zeros ? c : gemmT(state, m, c); };
    SmallVector<Value> steps(T);
    for (int64_t s = 0; s < T && e.ok; ++s) {
      int64_t t = reverse ? T - 1 - s : s;
      Value xt_ = sliceOf(xw, 0, t * B, (t + 1) * B); // [B, G * Hd]
      auto gate = [&](Value v, int64_t k) { return sliceOf(v, 1, k * Hd, (k + 1) * Hd); };
      Value Hn, Cn;
      if (kind == 0) {
        Hn = apply(*f, plus(H, rd, xt_));
      } else if (kind == 1) {
        Value zr = plus(H, rzr, sliceOf(xt_, 1, 0, 2 * Hd));
        Value z = apply(*f, gate(zr, 0)), rg = apply(*f, gate(zr, 1));
        Value xh = gate(xt_, 2), pre;
        if (*lbr) {
          Value hr = H == zeros ? rbh : gemmT(H, rh, rbh);
          pre = hr ? e.add(xh, e.mul(rg, hr)) : xh;
        } else {
          pre = H == zeros ? xh : gemmT(e.mul(rg, H), rh, xh);
        }
        Value hh = apply(*g, pre);
        Hn = H == zeros ? e.sub(hh, e.mul(z, hh)) : e.add(hh, e.mul(z, e.sub(H, hh))); // (1 - z) hh + z H
      } else {
        Value gates = plus(H, rd, xt_);
        Value gi = gate(gates, 0), go = gate(gates, 1), gf = gate(gates, 2), gc = gate(gates, 3);
        if (peep && C != zeros) {
          gi = e.add(gi, e.mul(pi, C));
          gf = e.add(gf, e.mul(pf, C));
        }
        Value it = apply(*f, gi);
        Value in = e.mul(it, apply(*g, gc));
        if (C == zeros) {
          Cn = in;
        } else {
          Value ft = *inForget ? e.sub(e.cst(elt, 1.0), it) : apply(*f, gf);
          Cn = e.add(e.mul(ft, C), in);
        }
        if (peep)
          go = e.add(go, e.mul(po, Cn));
        Hn = e.mul(apply(*f, go), apply(*h, Cn));
      }
      if (lens) {
        auto it64 = RankedTensorType::get({}, bld.getI64Type());
        Value tc = arith::ConstantOp::create(bld, n.loc, it64, DenseElementsAttr::get(it64, t));
        Value m = e.op("amp.less", {tc, lens}); // [B, 1]
        steps[t] = e.op("amp.where", {m, Hn, zeros});
        Hn = e.op("amp.where", {m, Hn, H});
        if (Cn)
          Cn = e.op("amp.where", {m, Cn, C});
      } else {
        steps[t] = Hn;
      }
      H = Hn;
      C = Cn;
    }
    if (!e.ok)
      break;
    if (n.hasOutput(0)) {
      SmallVector<Value> parts;
      for (Value v : steps)
        parts.push_back(reshape(v, {1, 1, B, Hd}));
      ys[d] = T == 1 ? parts[0] : e.op("amp.concat", parts, {named(n, "axis", i64(n, 0))});
    }
    if (lens && (h0 || c0)) {
      // An empty sequence's final state is 0, not the initial one (as
      // onnxruntime).
      auto it64 = RankedTensorType::get({}, bld.getI64Type());
      Value z = arith::ConstantOp::create(bld, n.loc, it64, DenseElementsAttr::get(it64, (int64_t)0));
      Value some = e.op("amp.less", {z, lens});
      H = e.op("amp.where", {some, H, zeros});
      if (kind == 2)
        C = e.op("amp.where", {some, C, zeros});
    }
    yh[d] = reshape(H, {1, B, Hd});
    if (kind == 2)
      yc[d] = reshape(C, {1, B, Hd});
  }
  auto join = [&](ArrayRef<Value> v, int64_t axis) {
    return v.size() == 1 ? v[0] : e.op("amp.concat", v, {named(n, "axis", i64(n, axis))});
  };
  if (n.hasOutput(0)) {
    Value y = join(ys, 1); // [T, D, B, Hd]
    n.setOutput(0, *layout ? transpose(y, {2, 0, 1, 3}) : y);
  }
  if (n.hasOutput(1)) {
    Value v = join(yh, 0);
    n.setOutput(1, *layout ? transpose(v, {1, 0, 2}) : v);
  }
  if (kind == 2 && n.hasOutput(2)) {
    Value v = join(yc, 0);
    n.setOutput(2, *layout ? transpose(v, {1, 0, 2}) : v);
  }
  return e.ok ? success() : failure();
}

/// The scatter of ScatterElements / ScatterND along `axis` of data (float,
/// static): reduction "add" is data + the scatter-add of the updates
/// (amp.gather_elements_grad); "none" takes the scattered values where an
/// index points, data elsewhere. Gradients: the scatter-add's (a gather of
/// dy) and the where's.
static Value scatterAlong(NodeCtx &n, Elementwise &e, Value data, Value indices, Value updates,
                          int64_t axis, llvm::StringRef reduction) {
  auto dt = cast<RankedTensorType>(data.getType());
  SmallVector<NamedAttribute> attrs{named(n, "shape", ints(n, dt.getShape())),
                                    named(n, "axis", i64(n, axis))};
  if (!isa<FloatType>(dt.getElementType())) {
    // Integer data (T5 / BART shift the labels into decoder inputs with an
    // int64 ScatterND): scatter each update's position (1-based, exact in
    // f32 below 2^24), then gather the integer updates at the positions
    // that were written, the data elsewhere; no arithmetic on the values.
    auto ut = cast<RankedTensorType>(updates.getType());
    int64_t count = ut.getNumElements();
    if (reduction != "none") {
      (void)n.fail("reduction '" + reduction + "' on integer data is not supported (none is)");
      e.ok = false;
      return Value();
    }
    if (count >= (int64_t(1) << 24)) {
      (void)n.fail("integer data with " + llvm::Twine(count) +
                   " updates (2^24 or more) is not supported");
      e.ok = false;
      return Value();
    }
    auto &b = n.im.b;
    auto pt = RankedTensorType::get(ut.getShape(), b.getF32Type());
    SmallVector<float> positions;
    for (int64_t i = 0; i < count; ++i)
      positions.push_back(float(i + 1));
    Value pos = arith::ConstantOp::create(b, n.loc, pt, DenseElementsAttr::get(pt, ArrayRef<float>(positions)));
    Value at = e.op("amp.gather_elements_grad", {indices, pos}, attrs);
    Value hit = e.op("amp.greater", {at, e.cst(b.getF32Type(), 0.0)});
    Value from = e.op("amp.where", {hit, e.sub(at, e.cst(b.getF32Type(), 1.0)), e.cst(b.getF32Type(), 0.0)});
    if (!e.ok)
      return Value();
    from = CastOp::create(b, n.loc, RankedTensorType::get(dt.getShape(), b.getI64Type()), from).getResult();
    Value flat = e.op("amp.reshape", {updates}, {named(n, "shape", ints(n, {count}))});
    Value vals = e.op("amp.gather", {flat, from}, {named(n, "axis", i64(n, 0))});
    return e.op("amp.where", {hit, vals, data});
  }
  Value scattered = e.op("amp.gather_elements_grad", {indices, updates}, attrs);
  if (reduction == "add")
    return e.add(data, scattered);
  auto ut = cast<RankedTensorType>(updates.getType());
  auto onesT = RankedTensorType::get(ut.getShape(), ut.getElementType());
  Value ones = arith::ConstantOp::create(n.im.b, n.loc, onesT,
                                         DenseElementsAttr::get(onesT, n.im.b.getFloatAttr(ut.getElementType(), 1.0)));
  Value hits = e.op("amp.gather_elements_grad", {indices, ones}, attrs);
  Value hit = e.op("amp.greater", {hits, e.cst(ut.getElementType(), 0.0)});
  return e.op("amp.where", {hit, scattered, data});
}

/// ScatterElements (and the deprecated Scatter): reduction none or add.
LogicalResult handleScatterElements(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis", "reduction"})))
    return failure();
  auto axis = n.getInt("axis", 0);
  auto red = n.getString("reduction", std::string("none"));
  auto data = n.input(0), idx = n.input(1), upd = n.input(2);
  if (failed(axis) || failed(red) || failed(data) || failed(idx) || failed(upd))
    return failure();
  if (*red != "none" && *red != "add")
    return n.fail("unsupported op ai.onnx." + n.node.op_type() + " with reduction '" + *red +
                  "' (none and add are supported)");
  auto dt = cast<RankedTensorType>(data->getType());
  auto it = cast<RankedTensorType>(idx->getType());
  auto ut = cast<RankedTensorType>(upd->getType());
  if (!dt.hasStaticShape() || !it.hasStaticShape() || it.getShape() != ut.getShape())
    return n.fail("needs static shapes, and updates of the indices' shape");
  int64_t rank = dt.getRank(), ax = *axis < 0 ? *axis + rank : *axis;
  if (ax < 0 || ax >= rank || it.getRank() != rank)
    return n.fail("axis " + llvm::Twine(*axis) + " out of range, or indices not of data's rank");
  for (int64_t d = 0; d < rank; ++d)
    if (d != ax && it.getDimSize(d) > dt.getDimSize(d))
      return n.fail("indices are larger than data off the axis");
  Elementwise e{n};
  Value y = scatterAlong(n, e, *data, *idx, *upd, ax, *red);
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// The row of each index tuple of GatherND / ScatterND (indices [..., k])
/// in data viewed as [d0 * ... * d(k-1), rest]: sum of the components
/// (negative ones counted from the end, each checked against its dim at
/// run time) times their strides; int64, of shape indices.shape[:-1].
static Value linearIndex(NodeCtx &n, Elementwise &e, Value indices, ArrayRef<int64_t> dataShape) {
  auto it = cast<RankedTensorType>(indices.getType());
  int64_t k = it.getDimSize(it.getRank() - 1), r = it.getRank();
  SmallVector<int64_t> outer(it.getShape().drop_back());
  auto &b = n.im.b;
  Value idx = indices;
  if (!it.getElementType().isInteger(64))
    idx = CastOp::create(b, n.loc, RankedTensorType::get(it.getShape(), b.getI64Type()), idx).getResult();
  Value lin;
  int64_t stride = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    Value comp = e.op("amp.slice", {idx},
                      {named(n, "starts", ints(n, {j})), named(n, "ends", ints(n, {j + 1})),
                       named(n, "axes", ints(n, {r - 1}))});
    comp = e.op("amp.reshape", {comp}, {named(n, "shape", ints(n, outer))});
    // stride * comp, comp counted from the end when negative, by a gather
    // from [0, stride, 2 stride, ...]: its range check names a component
    // out of range (which would otherwise land in another row).
    auto tt = RankedTensorType::get({dataShape[j]}, b.getI64Type());
    SmallVector<int64_t> steps;
    for (int64_t v = 0; v < dataShape[j]; ++v)
      steps.push_back(v * stride);
    Value table = arith::ConstantOp::create(b, n.loc, tt, DenseElementsAttr::get(tt, ArrayRef<int64_t>(steps)));
    Value term = e.op("amp.gather", {table, comp}, {named(n, "axis", i64(n, 0))});
    lin = lin ? e.add(lin, term) : term;
    stride *= dataShape[j];
  }
  return lin;
}

/// GatherND: a Gather from data with its batch dims and the k indexed dims
/// flattened into one (each index tuple's row offset by its batch's).
LogicalResult handleGatherND(NodeCtx &n) {
  if (failed(n.allowAttrs({"batch_dims"})))
    return failure();
  auto bd = n.getInt("batch_dims", 0);
  auto data = n.input(0), idx = n.input(1);
  if (failed(bd) || failed(data) || failed(idx))
    return failure();
  auto dt = cast<RankedTensorType>(data->getType());
  auto it = cast<RankedTensorType>(idx->getType());
  if (!dt.hasStaticShape() || !it.hasStaticShape() || it.getRank() < 1)
    return n.fail("needs static shapes and indices of rank >= 1");
  int64_t nb = *bd, k = it.getDimSize(it.getRank() - 1);
  if (nb < 0 || nb >= it.getRank() || nb >= dt.getRank())
    return n.fail("batch_dims " + llvm::Twine(nb) + " out of range");
  for (int64_t j = 0; j < nb; ++j)
    if (it.getDimSize(j) != dt.getDimSize(j))
      return n.fail("the batch dims of data and indices differ");
  if (k < 1 || nb + k > dt.getRank())
    return n.fail("the indices' last dim " + llvm::Twine(k) + " must lie in [1, " +
                  llvm::Twine(dt.getRank() - nb) + "]");
  Elementwise e{n};
  Value lin = linearIndex(n, e, *idx, dt.getShape().slice(nb, k));
  int64_t rows = 1, batch = 1;
  for (int64_t j = 0; j < nb + k; ++j)
    (j < nb ? batch : rows) *= dt.getDimSize(j);
  if (nb) { // + the batch's number times its rows, broadcast over the middle dims
    SmallVector<int64_t> bshape(it.getShape().begin(), it.getShape().end() - 1);
    for (int64_t j = nb; j < (int64_t)bshape.size(); ++j)
      bshape[j] = 1;
    auto bt = RankedTensorType::get(bshape, n.im.b.getI64Type());
    SmallVector<int64_t> offs;
    for (int64_t i = 0; i < batch; ++i)
      offs.push_back(i * rows);
    lin = e.add(lin, arith::ConstantOp::create(n.im.b, n.loc, bt, DenseElementsAttr::get(bt, ArrayRef<int64_t>(offs))));
    rows *= batch;
  }
  SmallVector<int64_t> flat{rows};
  llvm::append_range(flat, dt.getShape().drop_front(nb + k));
  Value d2 = e.op("amp.reshape", {*data}, {named(n, "shape", ints(n, flat))});
  Value y = e.op("amp.gather", {d2, lin}, {named(n, "axis", i64(n, 0))});
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// ScatterND (reduction none or add): ScatterElements along the rows of
/// data viewed as [d0 * ... * d(k-1), rest], each update row's index
/// broadcast over the rest.
LogicalResult handleScatterND(NodeCtx &n) {
  if (failed(n.allowAttrs({"reduction"})))
    return failure();
  auto red = n.getString("reduction", std::string("none"));
  auto data = n.input(0), idx = n.input(1), upd = n.input(2);
  if (failed(red) || failed(data) || failed(idx) || failed(upd))
    return failure();
  if (*red != "none" && *red != "add")
    return n.fail("unsupported op ai.onnx." + n.node.op_type() + " with reduction '" + *red +
                  "' (none and add are supported)");
  auto dt = cast<RankedTensorType>(data->getType());
  auto it = cast<RankedTensorType>(idx->getType());
  auto ut = cast<RankedTensorType>(upd->getType());
  if (!dt.hasStaticShape() || !it.hasStaticShape() || !ut.hasStaticShape() || it.getRank() < 1)
    return n.fail("needs static shapes and indices of rank >= 1");
  int64_t k = it.getDimSize(it.getRank() - 1);
  if (k < 1 || k > dt.getRank())
    return n.fail("the indices' last dim " + llvm::Twine(k) + " must lie in [1, " + llvm::Twine(dt.getRank()) + "]");
  SmallVector<int64_t> want(it.getShape().drop_back());
  llvm::append_range(want, dt.getShape().drop_front(k));
  if (ut.getShape() != ArrayRef<int64_t>(want))
    return n.fail("updates must have the shape indices.shape[:-1] + data.shape[k:]");
  int64_t rows = 1, rest = 1, count = 1;
  for (int64_t j = 0; j < dt.getRank(); ++j)
    (j < k ? rows : rest) *= dt.getDimSize(j);
  for (int64_t j = 0; j + 1 < it.getRank(); ++j)
    count *= it.getDimSize(j);
  Elementwise e{n};
  Value lin = linearIndex(n, e, *idx, dt.getShape());
  lin = e.op("amp.reshape", {lin}, {named(n, "shape", ints(n, {count, 1}))});
  lin = e.op("amp.expand", {lin}, {named(n, "shape", ints(n, {count, rest}))});
  Value d2 = e.op("amp.reshape", {*data}, {named(n, "shape", ints(n, {rows, rest}))});
  Value u2 = e.op("amp.reshape", {*upd}, {named(n, "shape", ints(n, {count, rest}))});
  if (!e.ok)
    return failure();
  Value y = scatterAlong(n, e, d2, lin, u2, 0, *red);
  y = e.op("amp.reshape", {y}, {named(n, "shape", ints(n, dt.getShape()))});
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// GridSample (opset 16; 20's linear / cubic names too), 2-D.
LogicalResult handleGridSample(NodeCtx &n) {
  if (failed(n.allowAttrs({"align_corners", "mode", "padding_mode"})))
    return failure();
  auto align = n.getInt("align_corners", 0);
  auto mode = n.getString("mode", std::string(n.opset >= 20 ? "linear" : "bilinear"));
  auto pad = n.getString("padding_mode", std::string("zeros"));
  auto x = n.input(0), grid = n.input(1);
  if (failed(align) || failed(mode) || failed(pad) || failed(x) || failed(grid))
    return failure();
  std::string m = *mode == "linear" ? "bilinear" : *mode == "cubic" ? "bicubic" : *mode;
  if (m != "bilinear" && m != "nearest" && m != "bicubic")
    return n.fail("unsupported op ai.onnx.GridSample with mode '" + *mode + "'");
  if (*pad != "zeros" && *pad != "border" && *pad != "reflection")
    return n.fail("unsupported op ai.onnx.GridSample with padding_mode '" + *pad + "'");
  if (cast<RankedTensorType>(x->getType()).getRank() != 4)
    return n.fail("unsupported op ai.onnx.GridSample on a rank other than 4 (2-D sampling is supported)");
  return emitAll(n, "amp.grid_sample", {*x, *grid},
                 {named(n, "mode", str(n, m)), named(n, "padding_mode", str(n, *pad)),
                  named(n, "align_corners", boolean(n, *align != 0))},
                 1);
}

/// TopK (k an attribute before opset 10, a constant input after).
LogicalResult handleTopK(NodeCtx &n) {
  if (failed(n.allowAttrs(n.opset < 10 ? llvm::ArrayRef<llvm::StringRef>{"axis", "k"}
                                       : llvm::ArrayRef<llvm::StringRef>{"axis", "largest", "sorted"})))
    return failure();
  auto axis = n.getInt("axis", -1), largest = n.getInt("largest", 1), sorted = n.getInt("sorted", 1);
  auto x = n.input(0);
  if (failed(axis) || failed(largest) || failed(sorted) || failed(x))
    return failure();
  int64_t k;
  if (n.opset < 10) {
    auto ka = n.getInt("k", std::nullopt);
    if (failed(ka))
      return failure();
    k = *ka;
  } else {
    auto ks = n.constInts(1, "K");
    if (failed(ks))
      return failure();
    if (ks->size() != 1)
      return n.fail("K must hold one value");
    k = (*ks)[0];
  }
  auto xt = cast<RankedTensorType>(x->getType());
  if (!isa<FloatType>(xt.getElementType()))
    return n.fail("only float tensors are supported");
  // sorted = 0 leaves the order free: sorted is one of them.
  auto op = n.im.create(n, "amp.top_k", {*x},
                        {named(n, "k", i64(n, k)), named(n, "axis", i64(n, *axis)),
                         named(n, "largest", boolean(n, *largest != 0))},
                        2);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  n.setOutput(1, (*op)->getResult(1));
  return success();
}

/// LRN: x * (bias + alpha * mean of x^2 over the channel window)^-beta, the
/// window's mean an AveragePool (count_include_pad) of x^2 viewed as
/// [N, 1, C, rest] with ONNX's padding (floor((size - 1) / 2) before,
/// the rest after); marked fp32 (the sum of squares and the power).
LogicalResult handleLRN(NodeCtx &n) {
  if (failed(n.allowAttrs({"alpha", "beta", "bias", "size"})))
    return failure();
  auto alpha = n.getFloat("alpha", 1e-4f), beta = n.getFloat("beta", 0.75f), bias = n.getFloat("bias", 1.0f);
  auto size = n.getInt("size", std::nullopt);
  auto x = n.input(0);
  if (failed(alpha) || failed(beta) || failed(bias) || failed(size) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (!isa<FloatType>(xt.getElementType()) || xt.getRank() < 3 || !xt.hasStaticShape())
    return n.fail("X must be a float [N, C, D1, ...] of static shape");
  if (*size < 1)
    return n.fail("size must be positive");
  int64_t N = xt.getDimSize(0), C = xt.getDimSize(1), rest = xt.getNumElements() / std::max<int64_t>(1, N * C);
  Type elt = xt.getElementType();
  ClassMark mark(n);
  Elementwise e{n};
  Value sq = e.op("amp.reshape", {e.mul(*x, *x)}, {named(n, "shape", ints(n, {N, 1, C, rest}))});
  int64_t before = (*size - 1) / 2, after = *size - 1 - before;
  Value avg = e.op("amp.average_pool", {sq},
                   {named(n, "kernel_shape", ints(n, {*size, 1})), named(n, "pads", ints(n, {before, 0, after, 0})),
                    named(n, "count_include_pad", boolean(n, true))});
  avg = e.op("amp.reshape", {avg}, {named(n, "shape", ints(n, xt.getShape()))});
  Value den = e.op("amp.pow", {e.add(e.mul(avg, e.cst(elt, *alpha)), e.cst(elt, *bias)), e.cst(elt, -*beta)});
  Value y = e.mul(*x, den);
  if (!e.ok)
    return failure();
  mark.apply("fp32");
  n.setOutput(0, y);
  return success();
}

/// MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over `axes`
/// (ONNX's function body, the variance as the mean of squared deviations);
/// marked fp32.
LogicalResult handleMVN(NodeCtx &n) {
  if (failed(n.allowAttrs({"axes"})))
    return failure();
  auto axesA = n.getInts("axes");
  auto x = n.input(0);
  if (failed(axesA) || failed(x))
    return failure();
  std::vector<int64_t> axes = *axesA ? **axesA : std::vector<int64_t>{0, 2, 3};
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  ClassMark mark(n);
  Elementwise e{n};
  SmallVector<NamedAttribute> attrs{named(n, "axes", ints(n, axes)), named(n, "keepdims", boolean(n, true))};
  Value d = e.sub(*x, e.op("amp.reduce_mean", {*x}, attrs));
  Value sd = e.op("amp.sqrt", {e.op("amp.reduce_mean", {e.mul(d, d)}, attrs)});
  Value y = e.div(d, e.add(sd, e.cst(elt, 1e-9)));
  if (!e.ok)
    return failure();
  mark.apply("fp32");
  n.setOutput(0, y);
  return success();
}

/// Shrink: x + bias below -lambd, x - bias above lambd, 0 between
/// (torch's hardshrink / softshrink).
LogicalResult handleShrink(NodeCtx &n) {
  if (failed(n.allowAttrs({"bias", "lambd"})))
    return failure();
  auto bias = n.getFloat("bias", 0.0f), lambd = n.getFloat("lambd", 0.5f);
  auto x = n.input(0);
  if (failed(bias) || failed(lambd) || failed(x))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("unsupported op ai.onnx.Shrink on integers (float tensors are supported)");
  Elementwise e{n};
  auto xt = cast<RankedTensorType>(x->getType());
  Value zeros = arith::ConstantOp::create(n.im.b, n.loc, xt, DenseElementsAttr::get(xt, n.im.b.getFloatAttr(elt, 0.0)));
  Value hi = e.op("amp.where", {e.op("amp.greater", {*x, e.cst(elt, *lambd)}), e.sub(*x, e.cst(elt, *bias)), zeros});
  Value y = e.op("amp.where", {e.op("amp.less", {*x, e.cst(elt, -*lambd)}), e.add(*x, e.cst(elt, *bias)), hi});
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// EyeLike: a constant (ones on diagonal k) of the input's static 2-D shape.
LogicalResult handleEyeLike(NodeCtx &n) {
  if (failed(n.allowAttrs({"dtype", "k"})))
    return failure();
  auto k = n.getInt("k", 0);
  auto x = n.input(0);
  if (failed(k) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (xt.getRank() != 2 || !xt.hasStaticShape())
    return n.fail("the input must be 2-D with a static shape");
  Type elt = xt.getElementType();
  if (failed(dtypeAttr(n, elt)))
    return failure();
  auto rt = RankedTensorType::get(xt.getShape(), elt);
  SmallVector<Attribute> vals;
  for (int64_t i = 0; i < xt.getDimSize(0); ++i)
    for (int64_t j = 0; j < xt.getDimSize(1); ++j) {
      bool on = j - i == *k;
      vals.push_back(isa<FloatType>(elt) ? Attribute(n.im.b.getFloatAttr(elt, on ? 1.0 : 0.0))
                                         : Attribute(n.im.b.getIntegerAttr(elt, on ? 1 : 0)));
    }
  n.setOutput(0, arith::ConstantOp::create(n.im.b, n.loc, rt, DenseElementsAttr::get(rt, vals)));
  return success();
}

/// Compress with a constant condition: a Gather of the selected positions
/// along `axis` (of the flattened input without one).
LogicalResult handleCompress(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto x = n.input(0);
  auto cond = n.constInput(1, "condition");
  if (failed(x) || failed(cond))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (!xt.hasStaticShape())
    return n.fail("needs a static input shape");
  Value in = *x;
  int64_t axis = 0, len;
  if (n.attr("axis")) {
    auto a = n.getInt("axis", std::nullopt);
    if (failed(a))
      return failure();
    axis = *a < 0 ? *a + xt.getRank() : *a;
    if (axis < 0 || axis >= xt.getRank())
      return n.fail("axis " + llvm::Twine(*a) + " is out of range");
    len = xt.getDimSize(axis);
  } else {
    len = xt.getNumElements();
    auto r = n.im.create(n, "amp.reshape", {in}, {named(n, "shape", ints(n, {len}))}, 1);
    if (failed(r))
      return failure();
    in = (*r)->getResult(0);
  }
  auto c = (*cond)->toInt64();
  if ((int64_t)c.size() > len)
    return n.fail("condition has " + llvm::Twine(c.size()) + " entries for an axis of " + llvm::Twine(len));
  SmallVector<int64_t> keep;
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i])
      keep.push_back((int64_t)i);
  auto it = RankedTensorType::get({(int64_t)keep.size()}, n.im.b.getI64Type());
  Value idx = arith::ConstantOp::create(n.im.b, n.loc, it, DenseElementsAttr::get(it, ArrayRef<int64_t>(keep)));
  return emitAll(n, "amp.gather", {in, idx}, {named(n, "axis", i64(n, axis))}, 1);
}

/// ReverseSequence with constant lengths: the batch and time axes moved to
/// the front, one row gather with each sequence's first len steps reversed,
/// moved back.
LogicalResult handleReverseSequence(NodeCtx &n) {
  if (failed(n.allowAttrs({"batch_axis", "time_axis"})))
    return failure();
  auto ba = n.getInt("batch_axis", 1), ta = n.getInt("time_axis", 0);
  auto x = n.input(0);
  auto lensT = n.constInput(1, "sequence_lens");
  if (failed(ba) || failed(ta) || failed(x) || failed(lensT))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t rank = xt.getRank();
  if (!xt.hasStaticShape() || rank < 2 || !((*ba == 0 && *ta == 1) || (*ba == 1 && *ta == 0)))
    return n.fail("needs a static input of rank >= 2 and batch / time axes 0 and 1");
  int64_t B = xt.getDimSize(*ba), T = xt.getDimSize(*ta);
  auto lens = (*lensT)->toInt64();
  if ((int64_t)lens.size() != B)
    return n.fail("sequence_lens must have one entry per batch element (" + llvm::Twine(B) + ")");
  SmallVector<int64_t> rows; // in the [B, T] order of the data's first two dims
  for (int64_t p = 0; p < xt.getDimSize(0); ++p)
    for (int64_t q = 0; q < xt.getDimSize(1); ++q) {
      int64_t b = *ba == 0 ? p : q, t = *ba == 0 ? q : p, l = lens[b];
      if (l < 0 || l > T)
        return n.fail("sequence length " + llvm::Twine(l) + " is out of range [0, " + llvm::Twine(T) + "]");
      int64_t src = t < l ? l - 1 - t : t;
      rows.push_back(*ba == 0 ? b * T + src : src * B + b);
    }
  SmallVector<int64_t> flat{xt.getDimSize(0) * xt.getDimSize(1)};
  llvm::append_range(flat, xt.getShape().drop_front(2));
  Elementwise e{n};
  Value r = e.op("amp.reshape", {*x}, {named(n, "shape", ints(n, flat))});
  auto it = RankedTensorType::get({(int64_t)rows.size()}, n.im.b.getI64Type());
  Value idx = arith::ConstantOp::create(n.im.b, n.loc, it, DenseElementsAttr::get(it, ArrayRef<int64_t>(rows)));
  Value g = e.op("amp.gather", {r, idx}, {named(n, "axis", i64(n, 0))});
  Value y = e.op("amp.reshape", {g}, {named(n, "shape", ints(n, xt.getShape()))});
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// MaxUnpool: zeros with X written at the flat positions I names (I as
/// MaxPool's Indices: over the whole output tensor), a scatter-add.
LogicalResult handleMaxUnpool(NodeCtx &n) {
  if (failed(n.allowAttrs({"kernel_shape", "pads", "strides"})))
    return failure();
  auto ks = n.getInts("kernel_shape"), pads = n.getInts("pads"), strides = n.getInts("strides");
  auto x = n.input(0), idx = n.input(1);
  if (failed(ks) || failed(pads) || failed(strides) || failed(x) || failed(idx))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  auto it = cast<RankedTensorType>(idx->getType());
  if (!xt.hasStaticShape() || xt.getRank() < 3 || it.getShape() != xt.getShape() || !*ks)
    return n.fail("needs a static X [N, C, D...], indices of its shape and kernel_shape");
  if (!isa<FloatType>(xt.getElementType()))
    return n.fail("unsupported op ai.onnx.MaxUnpool on integers (float tensors are supported)");
  int64_t sp = xt.getRank() - 2;
  // The indices address the pooled-from shape; a larger output_shape gets
  // zeros after it (as onnxruntime).
  SmallVector<int64_t> out(xt.getShape().take_front(2));
  if ((int64_t)(**ks).size() != sp)
    return n.fail("kernel_shape must have one entry per spatial dim");
  for (int64_t i = 0; i < sp; ++i) {
    int64_t s = *strides ? (**strides)[i] : 1;
    int64_t p = *pads ? (**pads)[i] + (**pads)[sp + i] : 0;
    out.push_back((xt.getDimSize(2 + i) - 1) * s + (**ks)[i] - p);
  }
  SmallVector<int64_t> want(out);
  if (n.hasInput(2)) {
    auto os = n.constInts(2, "output_shape");
    if (failed(os))
      return failure();
    if ((int64_t)os->size() != xt.getRank())
      return n.fail("output_shape must have X's rank");
    want.assign(os->begin(), os->end());
    for (int64_t i = 0; i < xt.getRank(); ++i)
      if (want[i] < out[i] || (i < 2 && want[i] != out[i]))
        return n.fail("output_shape " + llvm::Twine(want[i]) + " of dim " + llvm::Twine(i) +
                      " is smaller than the pooled-from " + llvm::Twine(out[i]) + " (or changes N / C)");
  }
  int64_t total = 1;
  for (int64_t d : out)
    total *= d;
  Elementwise e{n};
  Value fi = e.op("amp.reshape", {*idx}, {named(n, "shape", ints(n, {xt.getNumElements()}))});
  Value fx = e.op("amp.reshape", {*x}, {named(n, "shape", ints(n, {xt.getNumElements()}))});
  Value y = e.op("amp.gather_elements_grad", {fi, fx},
                 {named(n, "shape", ints(n, {total})), named(n, "axis", i64(n, 0))});
  y = e.op("amp.reshape", {y}, {named(n, "shape", ints(n, out))});
  SmallVector<int64_t> cur(out);
  for (int64_t i = 2; i < xt.getRank() && e.ok; ++i) {
    if (want[i] == cur[i])
      continue;
    SmallVector<int64_t> zs(cur);
    zs[i] = want[i] - cur[i];
    auto zt = RankedTensorType::get(zs, xt.getElementType());
    Value z = arith::ConstantOp::create(n.im.b, n.loc, zt,
                                        DenseElementsAttr::get(zt, n.im.b.getFloatAttr(xt.getElementType(), 0.0)));
    y = e.op("amp.concat", {y, z}, {named(n, "axis", i64(n, i))});
    cur[i] = want[i];
  }
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// HannWindow, HammingWindow, BlackmanWindow of a constant size: constants
/// a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the size (periodic) or
/// the size - 1, computed in double.
LogicalResult handleWindow(NodeCtx &n, double a0, double a1, double a2) {
  if (failed(n.allowAttrs({"output_datatype", "periodic"})))
    return failure();
  auto dt = n.getInt("output_datatype", onnx::TensorProto::FLOAT), periodic = n.getInt("periodic", 1);
  auto size = n.constInts(0, "size");
  if (failed(dt) || failed(periodic) || failed(size))
    return failure();
  if (size->size() != 1 || (*size)[0] < 0 || (*size)[0] > (1 << 24))
    return n.fail("size must be one value in [0, 2^24]");
  auto elt = n.im.elementType((int32_t)*dt, "output_datatype");
  if (failed(elt))
    return failure();
  if (!isa<FloatType>(*elt))
    return n.fail("output_datatype must be a float type");
  int64_t len = (*size)[0];
  double N = *periodic ? (double)len : (double)(len - 1);
  SmallVector<double> w;
  for (int64_t i = 0; i < len; ++i)
    w.push_back(N <= 0 ? 1.0 : a0 - a1 * std::cos(2 * M_PI * i / N) + a2 * std::cos(4 * M_PI * i / N));
  auto t = RankedTensorType::get({len}, *elt);
  SmallVector<Attribute> vals;
  for (double v : w)
    vals.push_back(n.im.b.getFloatAttr(*elt, v));
  n.setOutput(0, arith::ConstantOp::create(n.im.b, n.loc, t, DenseElementsAttr::get(t, vals)));
  return success();
}

/// MelWeightMatrix of constant inputs: ONNX's reference computation
/// (triangles between mel-spaced bins, the edges in f32 as its float
/// inputs give them), folded to a constant [dft_length / 2 + 1, bins].
LogicalResult handleMelWeightMatrix(NodeCtx &n) {
  if (failed(n.allowAttrs({"output_datatype"})))
    return failure();
  auto dt = n.getInt("output_datatype", onnx::TensorProto::FLOAT);
  auto bins = n.constInts(0, "num_mel_bins"), dftLen = n.constInts(1, "dft_length"),
       rate = n.constInts(2, "sample_rate");
  auto lo = n.constInput(3, "lower_edge_hertz"), hi = n.constInput(4, "upper_edge_hertz");
  if (failed(dt) || failed(bins) || failed(dftLen) || failed(rate) || failed(lo) || failed(hi))
    return failure();
  if (bins->size() != 1 || dftLen->size() != 1 || rate->size() != 1 || (*lo)->numElements() != 1 ||
      (*hi)->numElements() != 1)
    return n.fail("every input must be a single value");
  int64_t M = (*bins)[0], L = (*dftLen)[0], sr = (*rate)[0];
  if (M < 1 || L < 1 || sr < 1 || M > 4096 || L > (1 << 20))
    return n.fail("num_mel_bins, dft_length and sample_rate must be positive (and not huge)");
  auto elt = n.im.elementType((int32_t)*dt, "output_datatype");
  if (failed(elt))
    return failure();
  float loHz = (float)(*lo)->toDouble()[0], hiHz = (float)(*hi)->toDouble()[0];
  float loMel = 2595.0f * std::log10(1.0f + loHz / 700.0f), hiMel = 2595.0f * std::log10(1.0f + hiHz / 700.0f);
  double step = ((double)hiMel - (double)loMel) / (double)(M + 2);
  int64_t K = L / 2 + 1;
  if (K * M > ((int64_t)1 << 22))
    return n.fail("the matrix would have " + llvm::Twine(K) + " x " + llvm::Twine(M) +
                  " entries, more than 2^22");
  SmallVector<int64_t> f;
  for (int64_t i = 0; i < M + 2; ++i) {
    double hz = 700.0 * (std::pow(10.0, (i * step + (double)loMel) / 2595.0) - 1.0);
    double bin = std::floor((double)(L + 1) * hz / (double)sr);
    // Checked as a double first: NaN or a huge edge has no int64 value.
    if (!(bin >= 0 && bin < (double)K))
      return n.fail("the mel edges fall outside the " + llvm::Twine(K) + " spectrogram bins (check "
                    "lower_edge_hertz, upper_edge_hertz, sample_rate)");
    f.push_back((int64_t)bin);
  }
  std::vector<double> w((size_t)(K * M), 0.0);
  for (int64_t i = 0; i < M; ++i) {
    int64_t l = f[i], c = f[i + 1], h = f[i + 2];
    if (c == l)
      w[c * M + i] = 1.0;
    else
      for (int64_t j = l; j <= c; ++j)
        w[j * M + i] = (double)(j - l) / (double)(c - l);
    if (h > c)
      for (int64_t j = c; j < h; ++j)
        w[j * M + i] = (double)(h - j) / (double)(h - c);
  }
  auto t = RankedTensorType::get({K, M}, *elt);
  SmallVector<Attribute> vals;
  for (double v : w)
    vals.push_back(isa<FloatType>(*elt) ? Attribute(n.im.b.getFloatAttr(*elt, v))
                                        : Attribute(n.im.b.getIntegerAttr(*elt, (int64_t)v)));
  n.setOutput(0, arith::ConstantOp::create(n.im.b, n.loc, t, DenseElementsAttr::get(t, vals)));
  return success();
}

/// The largest DFT table (L x K entries, two of them): 16 MiB each in f32.
constexpr int64_t kMaxDftTable = (int64_t)1 << 22;

/// The DFT of signals along their last dim (xr, xi: real and imaginary
/// parts, xi null for a real signal) of length L, the first K bins, as
/// matrix products with cos / sin tables (inverse: the conjugate, / L).
static std::pair<Value, Value> dftLast(NodeCtx &n, Elementwise &e, Value xr, Value xi, int64_t L, int64_t K,
                                       bool inverse) {
  Type elt = getElementTypeOrSelf(xr.getType());
  auto tt = RankedTensorType::get({L, K}, elt);
  SmallVector<Attribute> cs, sn;
  double scale = inverse ? 1.0 / (double)L : 1.0;
  for (int64_t i = 0; i < L; ++i)
    for (int64_t k = 0; k < K; ++k) {
      // The angle of i * k mod L: exact tables for long signals.
      double th = 2 * M_PI * (double)((i * k) % L) / (double)L;
      cs.push_back(n.im.b.getFloatAttr(elt, std::cos(th) * scale));
      sn.push_back(n.im.b.getFloatAttr(elt, std::sin(th) * scale));
    }
  Value C = arith::ConstantOp::create(n.im.b, n.loc, tt, DenseElementsAttr::get(tt, cs));
  Value S = arith::ConstantOp::create(n.im.b, n.loc, tt, DenseElementsAttr::get(tt, sn));
  auto mm = [&](Value a, Value m) { return e.op("amp.matmul", {a, m}); };
  // forward: e^{-i th}: yr = xr C + xi S, yi = xi C - xr S; inverse: e^{+i th}.
  Value yr = mm(xr, C), yi = e.mul(mm(xr, S), e.cst(elt, inverse ? 1.0 : -1.0));
  if (xi) {
    yr = inverse ? e.sub(yr, mm(xi, S)) : e.add(yr, mm(xi, S));
    yi = e.add(yi, mm(xi, C));
  }
  return {yr, yi};
}

/// [..., 1] or [..., 2] -> its real part and (null or) imaginary part, the
/// last dim dropped.
static std::pair<Value, Value> complexParts(NodeCtx &n, Elementwise &e, Value x) {
  auto xt = cast<RankedTensorType>(x.getType());
  int64_t r = xt.getRank();
  SmallVector<int64_t> shape(xt.getShape().drop_back());
  auto part = [&](int64_t i) {
    Value s = e.op("amp.slice", {x}, {named(n, "starts", ints(n, {i})), named(n, "ends", ints(n, {i + 1})),
                                      named(n, "axes", ints(n, {r - 1}))});
    return e.op("amp.reshape", {s}, {named(n, "shape", ints(n, shape))});
  };
  return {part(0), xt.getDimSize(r - 1) == 2 ? part(1) : Value()};
}

/// (re, im) -> [..., 2].
static Value complexJoin(NodeCtx &n, Elementwise &e, Value re, Value im) {
  SmallVector<int64_t> shape(cast<RankedTensorType>(re.getType()).getShape());
  shape.push_back(1);
  return e.op("amp.concat",
              {e.op("amp.reshape", {re}, {named(n, "shape", ints(n, shape))}),
               e.op("amp.reshape", {im}, {named(n, "shape", ints(n, shape))})},
              {named(n, "axis", i64(n, (int64_t)shape.size() - 1))});
}

/// DFT (opset 17 / 20) by matrix products with constant tables, marked
/// fp32 (torch.fft runs outside autocast's lists, in the input's type).
LogicalResult handleDFT(NodeCtx &n) {
  if (failed(n.allowAttrs(n.opset < 20 ? llvm::ArrayRef<llvm::StringRef>{"axis", "inverse", "onesided"}
                                       : llvm::ArrayRef<llvm::StringRef>{"inverse", "onesided"})))
    return failure();
  auto inverse = n.getInt("inverse", 0), onesided = n.getInt("onesided", 0);
  auto x = n.input(0);
  if (failed(inverse) || failed(onesided) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t r = xt.getRank();
  if (!isa<FloatType>(xt.getElementType()) || !xt.hasStaticShape() || r < 2 ||
      (xt.getDimSize(r - 1) != 1 && xt.getDimSize(r - 1) != 2))
    return n.fail("the input must be a float [..., N, 1 or 2] of static shape");
  int64_t axis;
  if (n.opset < 20) {
    auto a = n.getInt("axis", 1);
    if (failed(a))
      return failure();
    axis = *a;
  } else if (n.hasInput(2)) {
    auto a = n.constInts(2, "axis");
    if (failed(a))
      return failure();
    axis = a->empty() ? -2 : (*a)[0];
  } else {
    axis = -2;
  }
  if (axis < 0)
    axis += r;
  if (axis < 0 || axis > r - 2)
    return n.fail("axis out of range (the last dim holds the real / imaginary parts)");
  int64_t N = xt.getDimSize(axis), L = N;
  if (n.hasInput(1)) {
    auto l = n.constInts(1, "dft_length");
    if (failed(l))
      return failure();
    if (l->size() != 1 || (*l)[0] < 1)
      return n.fail("dft_length must be one positive value");
    L = (*l)[0];
  }
  if (*inverse && *onesided)
    return n.fail("unsupported op ai.onnx.DFT with inverse and onesided together");
  int64_t K = *onesided ? L / 2 + 1 : L;
  if (L * K > kMaxDftTable)
    return n.fail("unsupported op ai.onnx.DFT of length " + llvm::Twine(L) +
                  " (its cos / sin tables are constant matrices of at most 2^22 entries)");
  ClassMark mark(n);
  Elementwise e{n};
  auto [xr, xi] = complexParts(n, e, *x);
  // The signal axis last.
  int64_t sr = r - 1;
  SmallVector<int64_t> perm, inv(sr);
  for (int64_t d = 0; d < sr; ++d)
    if (d != axis)
      perm.push_back(d);
  perm.push_back(axis);
  for (int64_t d = 0; d < sr; ++d)
    inv[perm[d]] = d;
  auto moveLast = [&](Value v) { return v ? e.op("amp.transpose", {v}, {named(n, "perm", ints(n, perm))}) : v; };
  auto fit = [&](Value v) -> Value { // to length L: truncated or zero-padded
    if (!v || L == N)
      return v;
    auto vt = cast<RankedTensorType>(v.getType());
    if (L < N)
      return e.op("amp.slice", {v}, {named(n, "starts", ints(n, {0})), named(n, "ends", ints(n, {L})),
                                     named(n, "axes", ints(n, {sr - 1}))});
    SmallVector<int64_t> zs(vt.getShape());
    zs.back() = L - N;
    auto zt = RankedTensorType::get(zs, vt.getElementType());
    Value z = arith::ConstantOp::create(n.im.b, n.loc, zt,
                                        DenseElementsAttr::get(zt, n.im.b.getFloatAttr(vt.getElementType(), 0.0)));
    return e.op("amp.concat", {v, z}, {named(n, "axis", i64(n, sr - 1))});
  };
  xr = fit(moveLast(xr));
  xi = fit(moveLast(xi));
  if (!e.ok)
    return failure();
  auto [yr, yi] = dftLast(n, e, xr, xi, L, K, *inverse != 0);
  auto back = [&](Value v) { return e.op("amp.transpose", {v}, {named(n, "perm", ints(n, inv))}); };
  Value y = complexJoin(n, e, back(yr), back(yi));
  if (!e.ok)
    return failure();
  mark.apply("fp32");
  n.setOutput(0, y);
  return success();
}

/// STFT: frames gathered from the signal (constant indices), times the
/// window, then the DFT of each frame (onesided: the first L/2 + 1 bins);
/// marked fp32.
LogicalResult handleSTFT(NodeCtx &n) {
  if (failed(n.allowAttrs({"onesided"})))
    return failure();
  auto onesided = n.getInt("onesided", 1);
  auto x = n.input(0);
  auto step = n.constInts(1, "frame_step");
  if (failed(onesided) || failed(x) || failed(step))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (!isa<FloatType>(xt.getElementType()) || !xt.hasStaticShape() || xt.getRank() != 3 ||
      (xt.getDimSize(2) != 1 && xt.getDimSize(2) != 2))
    return n.fail("the signal must be a float [batch, length, 1 or 2] of static shape");
  Value window = n.optInput(2);
  int64_t FL = -1;
  if (window) {
    auto wt = cast<RankedTensorType>(window.getType());
    if (wt.getRank() != 1 || !wt.hasStaticShape())
      return n.fail("the window must be 1-D");
    FL = wt.getDimSize(0);
  }
  if (n.hasInput(3)) {
    auto fl = n.constInts(3, "frame_length");
    if (failed(fl))
      return failure();
    if (fl->size() != 1 || (FL >= 0 && (*fl)[0] != FL))
      return n.fail("frame_length must be one value equal to the window's length");
    FL = (*fl)[0];
  }
  int64_t B = xt.getDimSize(0), len = xt.getDimSize(1), s = step->size() == 1 ? (*step)[0] : 0;
  if (FL < 1 || FL > len || s < 1)
    return n.fail("needs a frame length in [1, signal length] (a window or frame_length) and a "
                  "positive frame_step");
  if (*onesided && xt.getDimSize(2) == 2)
    return n.fail("onesided needs a real signal");
  int64_t frames = 1 + (len - FL) / s, K = *onesided ? FL / 2 + 1 : FL;
  if (FL * K > kMaxDftTable)
    return n.fail("unsupported op ai.onnx.STFT with frames of " + llvm::Twine(FL) +
                  " (its cos / sin tables are constant matrices of at most 2^22 entries)");
  ClassMark mark(n);
  Elementwise e{n};
  auto [xr, xi] = complexParts(n, e, *x); // [B, len]
  auto it = RankedTensorType::get({frames, FL}, n.im.b.getI64Type());
  SmallVector<int64_t> idx;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < FL; ++j)
      idx.push_back(f * s + j);
  Value index = arith::ConstantOp::create(n.im.b, n.loc, it, DenseElementsAttr::get(it, ArrayRef<int64_t>(idx)));
  auto framed = [&](Value v) -> Value {
    if (!v)
      return v;
    Value g = e.op("amp.gather", {v, index}, {named(n, "axis", i64(n, 1))}); // [B, frames, FL]
    return window ? e.mul(g, window) : g;
  };
  xr = framed(xr);
  xi = framed(xi);
  if (!e.ok)
    return failure();
  auto [yr, yi] = dftLast(n, e, xr, xi, FL, K, false);
  Value y = complexJoin(n, e, yr, yi);
  if (!e.ok)
    return failure();
  (void)B;
  mark.apply("fp32");
  n.setOutput(0, y);
  return success();
}

/// An int64 constant 0, 1, ..., len - 1 laid along `axis` of a rank-`rank`
/// shape (ones elsewhere).
static Value iotaAlong(NodeCtx &n, int64_t len, int64_t axis, int64_t rank) {
  SmallVector<int64_t> shape(rank, 1);
  shape[axis] = len;
  auto t = RankedTensorType::get(shape, n.im.b.getI64Type());
  SmallVector<int64_t> v(len);
  for (int64_t i = 0; i < len; ++i)
    v[i] = i;
  return arith::ConstantOp::create(n.im.b, n.loc, t, DenseElementsAttr::get(t, ArrayRef<int64_t>(v)));
}

/// Hardmax (opset 13): 1 at the first maximum along `axis`, 0 elsewhere:
/// cast(arg_max(x) == iota). No gradient (as ONNX defines none).
LogicalResult handleHardmax(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto axis = n.getInt("axis", -1);
  auto x = n.input(0);
  if (failed(axis) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t rank = xt.getRank(), ax = *axis < 0 ? *axis + rank : *axis;
  if (ax < 0 || ax >= rank || ShapedType::isDynamic(xt.getDimSize(ax)))
    return n.fail("axis " + llvm::Twine(*axis) + " is out of range or dynamic");
  if (!isa<FloatType>(xt.getElementType()))
    return n.fail("only float tensors are supported");
  auto am = n.im.create(n, "amp.arg_max", {*x}, {named(n, "axis", i64(n, ax))}, 1);
  if (failed(am))
    return failure();
  auto eq = n.im.create(n, "amp.equal", {(*am)->getResult(0), iotaAlong(n, xt.getDimSize(ax), ax, rank)},
                        {}, 1);
  if (failed(eq))
    return failure();
  auto c = CastOp::create(n.im.b, n.loc, xt, (*eq)->getResult(0));
  n.setOutput(0, c.getResult());
  return success();
}

/// OneHot with a constant depth and values: where(unsqueeze(i') == iota,
/// on, off), i' = i + depth for negative i (out of range: all off); float
/// indices truncate to integers first, as ONNX's reference does.
LogicalResult handleOneHot(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto axis = n.getInt("axis", -1);
  auto ind = n.input(0);
  auto depth = n.constInput(1, "depth");
  auto values = n.constInput(2, "values");
  if (failed(axis) || failed(ind) || failed(depth) || failed(values))
    return failure();
  auto it = cast<RankedTensorType>(ind->getType());
  if (it.getElementType().isInteger(1))
    return n.fail("indices must be numbers, not bool");
  if ((*depth)->numElements() != 1 || (*values)->numElements() != 2)
    return n.fail("'depth' must be a single value and 'values' two (off, on)");
  bool intDepth = (*depth)->dtype != onnx::TensorProto::FLOAT && (*depth)->dtype != onnx::TensorProto::DOUBLE &&
                  (*depth)->dtype != onnx::TensorProto::FLOAT16;
  // A float depth is checked before it is converted (NaN or 1e30 as an
  // int64 is undefined).
  double fd = intDepth ? 0 : (*depth)->toDouble()[0];
  if (!intDepth && !(fd >= 1 && fd < double((int64_t)1 << 24) + 1))
    return n.fail("depth " + llvm::Twine(std::to_string(fd)) + " is out of range [1, 2^24]");
  int64_t d = intDepth ? (*depth)->toInt64()[0] : (int64_t)fd;
  if (d < 1 || d > ((int64_t)1 << 24))
    return n.fail("depth " + llvm::Twine(d) + " is out of range [1, 2^24]");
  int64_t rank = it.getRank() + 1, ax = *axis < 0 ? *axis + rank : *axis;
  if (ax < 0 || ax >= rank)
    return n.fail("axis " + llvm::Twine(*axis) + " is out of range for rank " + llvm::Twine(rank));
  auto b = n.im.b;
  auto vt = RankedTensorType::get({}, b.getI64Type());
  auto i64c = [&](int64_t v) {
    return arith::ConstantOp::create(b, n.loc, vt, DenseElementsAttr::get(vt, v)).getResult();
  };
  Value i = *ind;
  if (!it.getElementType().isInteger(64))
    i = CastOp::create(b, n.loc, RankedTensorType::get(it.getShape(), b.getI64Type()), i).getResult();
  Elementwise e{n};
  Value wrapped = e.op("amp.where", {e.op("amp.less", {i, i64c(0)}), e.add(i, i64c(d)), i});
  if (!e.ok)
    return failure();
  auto un = n.im.create(n, "amp.unsqueeze", {wrapped}, {named(n, "axes", ints(n, {ax}))}, 1);
  if (failed(un))
    return failure();
  Value hot = e.op("amp.equal", {(*un)->getResult(0), iotaAlong(n, d, ax, rank)});
  // off / on in the values' element type.
  auto elt = n.im.elementType((*values)->dtype, "values");
  if (failed(elt))
    return failure();
  auto st = RankedTensorType::get({}, *elt);
  auto scalar = [&](int k) -> Value {
    Attribute a = isa<FloatType>(*elt) ? Attribute(b.getFloatAttr(*elt, (*values)->toDouble()[k]))
                                       : Attribute(IntegerAttr::get(*elt, (*values)->toInt64()[k]));
    return arith::ConstantOp::create(b, n.loc, st, DenseElementsAttr::get(st, a)).getResult();
  };
  Value r = e.op("amp.where", {hot, scalar(1), scalar(0)});
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// Not: x xor true.
LogicalResult handleNot(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto t = RankedTensorType::get({}, n.im.b.getI1Type());
  Value one = arith::ConstantOp::create(n.im.b, n.loc, t, DenseElementsAttr::get(t, true));
  return emitAll(n, "amp.xor", {*x, one}, {}, 1);
}

/// Neg: -x, as x * -1 (exact).
LogicalResult handleNeg(NodeCtx &n) {
  if (failed(n.allowAttrs({"consumed_inputs"})))
    return failure();
  auto x = n.input(0);
  if (failed(x))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  Elementwise e{n};
  Value r = e.mul(*x, e.cst(elt, -1.0));
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

const std::map<std::string, OpInfo> &opTable() {
  static const std::map<std::string, OpInfo> table = [] {
    std::map<std::string, OpInfo> t;
    auto bin = [](const char *name) {
      return [name](NodeCtx &n) { return binary(n, name); };
    };
    auto un = [](const char *name) {
      return [name](NodeCtx &n) { return unary(n, name); };
    };
    auto legacyBin = [](const char *name) {
      return [name](NodeCtx &n) { return legacyBinary(n, name); };
    };
    t["Add"] = {1, legacyBin("amp.add")};
    t["Sub"] = {1, legacyBin("amp.sub")};
    t["Mul"] = {1, legacyBin("amp.mul")};
    t["Div"] = {1, legacyBin("amp.div")};
    t["Pow"] = {1, legacyBin("amp.pow")};
    t["MatMul"] = {1, bin("amp.matmul")};
    t["Sqrt"] = {1, un("amp.sqrt")};
    t["Exp"] = {1, un("amp.exp")};
    t["Log"] = {1, un("amp.log")};
    t["Erf"] = {9, un("amp.erf")};
    t["Tanh"] = {1, un("amp.tanh")};
    t["Sigmoid"] = {1, un("amp.sigmoid")};
    t["Abs"] = {1, un("amp.abs")};
    t["Reciprocal"] = {1, un("amp.reciprocal")};
    t["Softplus"] = {1, un("amp.softplus")};
    t["Relu"] = {1, un("amp.relu")};
    t["HardSwish"] = {14, un("amp.hard_swish")};
    t["Softsign"] = {1, un("amp.softsign")};
    t["Sin"] = {7, un("amp.sin")};
    t["Cos"] = {7, un("amp.cos")};
    t["Tan"] = {7, un("amp.tan")};
    t["Asin"] = {7, un("amp.asin")};
    t["Acos"] = {7, un("amp.acos")};
    t["Atan"] = {7, un("amp.atan")};
    t["Sinh"] = {9, un("amp.sinh")};
    t["Cosh"] = {9, un("amp.cosh")};
    t["Asinh"] = {9, un("amp.asinh")};
    t["Acosh"] = {9, un("amp.acosh")};
    t["Atanh"] = {9, un("amp.atanh")};
    t["Floor"] = {1, un("amp.floor")};
    t["Ceil"] = {1, un("amp.ceil")};
    t["Round"] = {11, un("amp.round")};
    t["Sign"] = {9, un("amp.sign")};
    t["Elu"] = {1, [](NodeCtx &n) { return unaryWithAttrs(n, "amp.elu", {{"alpha", 1.0f}}); }};
    t["Celu"] = {12, [](NodeCtx &n) {
      auto a = n.getFloat("alpha", 1.0f);
      if (succeeded(a) && *a == 0.0f)
        return n.fail("attribute 'alpha' must be nonzero");
      return unaryWithAttrs(n, "amp.celu", {{"alpha", 1.0f}});
    }};
    t["Selu"] = {1, [](NodeCtx &n) {
      return unaryWithAttrs(n, "amp.selu",
                            {{"alpha", 1.67326319217681884765625f}, {"gamma", 1.05070102214813232421875f}});
    }};
    t["HardSigmoid"] = {1, [](NodeCtx &n) {
      return unaryWithAttrs(n, "amp.hard_sigmoid", {{"alpha", 0.2f}, {"beta", 0.5f}});
    }};
    t["ThresholdedRelu"] = {10, [](NodeCtx &n) {
      return unaryWithAttrs(n, "amp.thresholded_relu", {{"alpha", 1.0f}});
    }};
    t["Split"] = {1, handleSplit, {1}};
    t["Equal"] = {7, bin("amp.equal")};
    t["Less"] = {7, bin("amp.less")};
    t["LessOrEqual"] = {12, bin("amp.less_equal")};
    t["Greater"] = {7, bin("amp.greater")};
    t["GreaterOrEqual"] = {12, bin("amp.greater_equal")};
    t["And"] = {7, bin("amp.and")};
    t["Or"] = {7, bin("amp.or")};
    t["Xor"] = {7, bin("amp.xor")};
    t["Not"] = {1, handleNot};
    t["PRelu"] = {1, handlePRelu};
    t["IsNaN"] = {9, [](NodeCtx &n) { return handleIsNaNOrInf(n, false); }};
    t["IsInf"] = {10, [](NodeCtx &n) { return handleIsNaNOrInf(n, true); }};
    t["Mean"] = {6, handleMean};
    t["CastLike"] = {15, [](NodeCtx &n) { return handleCast(n, true); }};
    t["Trilu"] = {14, handleTrilu, {1}};
    t["Range"] = {11, handleRange, {0, 1, 2}};
    t["Tile"] = {6, handleTile, {1}};
    t["Pad"] = {2, handlePad, {1, 2, 3}};
    t["InstanceNormalization"] = {6, handleInstanceNorm};
    t["DepthToSpace"] = {1, [](NodeCtx &n) { return handleDepthSpace(n, true); }};
    t["SpaceToDepth"] = {1, [](NodeCtx &n) { return handleDepthSpace(n, false); }};
    t["Hardmax"] = {13, handleHardmax};
    t["Einsum"] = {12, handleEinsum};
    t["RNN"] = {7, [](NodeCtx &n) { return handleRecurrent(n, 0); }};
    t["GRU"] = {7, [](NodeCtx &n) { return handleRecurrent(n, 1); }};
    t["LSTM"] = {7, [](NodeCtx &n) { return handleRecurrent(n, 2); }};
    t["CumSum"] = {11, [](NodeCtx &n) -> LogicalResult {
      if (failed(n.allowAttrs({"exclusive", "reverse"})))
        return failure();
      auto ex = n.getInt("exclusive", 0), rev = n.getInt("reverse", 0);
      auto axis = n.constInts(1, "axis");
      if (failed(ex) || failed(rev) || failed(axis))
        return failure();
      if (axis->size() != 1)
        return n.fail("'axis' must be a single value");
      return simple(n, "amp.cumsum", {0},
                    {named(n, "axis", i64(n, (*axis)[0])), named(n, "exclusive", boolean(n, *ex != 0)),
                     named(n, "reverse", boolean(n, *rev != 0))});
    }, {1}};
    t["OneHot"] = {11, handleOneHot, {1, 2}};
    t["GlobalMaxPool"] = {1, [](NodeCtx &n) -> LogicalResult {
      if (failed(n.allowAttrs({})))
        return failure();
      auto x = n.input(0);
      if (failed(x))
        return failure();
      int64_t rank = cast<RankedTensorType>(x->getType()).getRank();
      if (rank < 3)
        return n.fail("the input must be [N, C, D...]");
      SmallVector<int64_t> axes;
      for (int64_t a = 2; a < rank; ++a)
        axes.push_back(a);
      return simple(n, "amp.reduce_max", {0},
                    {named(n, "axes", ints(n, axes)), named(n, "keepdims", boolean(n, true))});
    }};
    t["Resize"] = {10, [](NodeCtx &n) { return handleResize(n, false); }, {1, 2, 3}};
    t["Upsample"] = {9, [](NodeCtx &n) { return handleResize(n, true); }, {1}};
    for (const char *name : {"ArgMax", "ArgMin"})
      t[name] = {1, [isMin = std::string(name) == "ArgMin"](NodeCtx &n) -> LogicalResult {
        if (failed(n.allowAttrs(n.opset >= 12 ? llvm::ArrayRef<llvm::StringRef>{"axis", "keepdims",
                                                                               "select_last_index"}
                                              : llvm::ArrayRef<llvm::StringRef>{"axis", "keepdims"})))
          return failure();
        auto axis = n.getInt("axis", 0), keep = n.getInt("keepdims", 1),
             last = n.getInt("select_last_index", 0);
        if (failed(axis) || failed(keep) || failed(last))
          return failure();
        return simple(n, isMin ? "amp.arg_min" : "amp.arg_max", {0},
                      {named(n, "axis", i64(n, *axis)), named(n, "keepdims", boolean(n, *keep != 0)),
                       named(n, "select_last_index", boolean(n, *last != 0))});
      }};
    t["GatherElements"] = {11, [](NodeCtx &n) {
      if (failed(n.allowAttrs({"axis"})))
        return failure();
      auto axis = n.getInt("axis", 0);
      if (failed(axis))
        return failure();
      return simple(n, "amp.gather_elements", {0, 1}, {named(n, "axis", i64(n, *axis))});
    }};
    t["TopK"] = {1, handleTopK, {1}};
    t["GridSample"] = {16, handleGridSample};
    t["LRN"] = {1, handleLRN};
    t["HannWindow"] = {17, [](NodeCtx &n) { return handleWindow(n, 0.5, 0.5, 0.0); }, {0}};
    t["HammingWindow"] = {17, [](NodeCtx &n) { return handleWindow(n, 25.0 / 46.0, 21.0 / 46.0, 0.0); }, {0}};
    t["BlackmanWindow"] = {17, [](NodeCtx &n) { return handleWindow(n, 0.42, 0.5, 0.08); }, {0}};
    t["DFT"] = {17, handleDFT, {1, 2}};
    t["MelWeightMatrix"] = {17, handleMelWeightMatrix, {0, 1, 2, 3, 4}};
    t["STFT"] = {17, handleSTFT, {1, 3}};
    t["MeanVarianceNormalization"] = {9, handleMVN};
    t["Shrink"] = {9, handleShrink};
    t["EyeLike"] = {9, handleEyeLike};
    t["Compress"] = {9, handleCompress, {1}};
    t["ReverseSequence"] = {10, handleReverseSequence, {1}};
    t["MaxUnpool"] = {9, handleMaxUnpool, {2}};
    t["ScatterElements"] = {11, handleScatterElements};
    t["Scatter"] = {9, handleScatterElements};
    t["GatherND"] = {11, handleGatherND};
    t["ScatterND"] = {11, handleScatterND};
    t["Identity"] = {1, un("amp.identity")};
    t["LeakyRelu"] = {1, [](NodeCtx &n) {
      if (failed(n.allowAttrs({"alpha", "consumed_inputs"})))
        return failure();
      auto alpha = n.getFloat("alpha", 0.01f);
      if (failed(alpha))
        return failure();
      return simple(n, "amp.leaky_relu", {0}, {named(n, "alpha", f32(n, *alpha))});
    }};
    t["Gelu"] = {20, [](NodeCtx &n) {
      if (failed(n.allowAttrs({"approximate"})))
        return failure();
      auto ap = n.getString("approximate", std::string("none"));
      if (failed(ap))
        return failure();
      return simple(n, "amp.gelu", {0}, {named(n, "approximate", str(n, *ap))});
    }};
    t["Where"] = {9, [](NodeCtx &n) {
      if (failed(n.allowAttrs({})))
        return failure();
      return simple(n, "amp.where", {0, 1, 2});
    }};
    t["Gemm"] = {1, handleGemm};
    // Other domains are keyed "<domain>.<op>".
    t["ai.onnx.preview.training.Adagrad"] = {1, handleAdagrad};
    t["ai.onnx.preview.training.Momentum"] = {1, handleMomentum};
    t["ai.onnx.preview.training.Adam"] = {1, handleAdam};
    t["ai.onnx.preview.training.Gradient"] = {1, handleGradient};
    t["Conv"] = {1, handleConv};
    t["ConvTranspose"] = {1, handleConvTranspose};
    t["BatchNormalization"] = {1, handleBatchNorm};
    t["MaxPool"] = {1, handleMaxPool};
    t["AveragePool"] = {1, handleAveragePool};
    t["GlobalAveragePool"] = {1, [](NodeCtx &n) {
      if (failed(n.allowAttrs({})))
        return failure();
      return simple(n, "amp.global_average_pool", {0});
    }};
    t["Flatten"] = {1, [](NodeCtx &n) {
      if (failed(n.allowAttrs({"axis"})))
        return failure();
      auto axis = n.getInt("axis", 1);
      if (failed(axis))
        return failure();
      return simple(n, "amp.flatten", {0}, {named(n, "axis", i64(n, *axis))});
    }};
    t["Reshape"] = {1, handleReshape, {1}};
    t["Transpose"] = {1, [](NodeCtx &n) {
      if (failed(n.allowAttrs({"perm"})))
        return failure();
      auto perm = n.getInts("perm");
      if (failed(perm))
        return failure();
      SmallVector<NamedAttribute> attrs;
      if (*perm)
        attrs.push_back(named(n, "perm", ints(n, **perm)));
      return simple(n, "amp.transpose", {0}, attrs);
    }};
    t["Concat"] = {1, [](NodeCtx &n) {
      if (failed(n.allowAttrs({"axis"})))
        return failure();
      auto axis = n.getInt("axis", n.opset < 4 ? std::optional<int64_t>(1)
                                               : std::nullopt);
      if (failed(axis))
        return failure();
      SmallVector<Value> in;
      for (size_t i = 0; i < n.numInputs(); ++i) {
        auto v = n.input(i);
        if (failed(v))
          return failure();
        in.push_back(*v);
      }
      auto op = n.im.create(n, "amp.concat", in,
                            {named(n, "axis", i64(n, *axis))}, 1);
      if (failed(op))
        return failure();
      n.setOutput(0, (*op)->getResult(0));
      return success();
    }};
    t["Slice"] = {1, handleSlice, {1, 2, 3, 4}};
    t["Squeeze"] = {1, [](NodeCtx &n) { return handleSqueeze(n, false); }, {1}};
    t["Unsqueeze"] = {1, [](NodeCtx &n) { return handleSqueeze(n, true); }, {1}};
    t["Gather"] = {1, [](NodeCtx &n) {
      if (failed(n.allowAttrs({"axis"})))
        return failure();
      auto axis = n.getInt("axis", 0);
      if (failed(axis))
        return failure();
      return simple(n, "amp.gather", {0, 1}, {named(n, "axis", i64(n, *axis))});
    }};
    t["Expand"] = {8, [](NodeCtx &n) {
      if (failed(n.allowAttrs({})))
        return failure();
      auto shape = n.constInts(1, "shape");
      if (failed(shape))
        return failure();
      return simple(n, "amp.expand", {0}, {named(n, "shape", ints(n, *shape))});
    }, {1}};
    t["Dropout"] = {1, handleDropout, {1, 2}};
    for (const char *r : {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"})
      t[r] = {1, handleRandom};
    t["Bernoulli"] = {15, handleBernoulli};
    t["Softmax"] = {1, [](NodeCtx &n) { return handleSoftmax(n, "amp.softmax"); }};
    t["LogSoftmax"] = {1, [](NodeCtx &n) {
      return handleSoftmax(n, "amp.log_softmax");
    }};
    t["LayerNormalization"] = {17, handleLayerNorm};
    t["ReduceSum"] = {1, [](NodeCtx &n) {
      return handleReduce(n, "amp.reduce_sum", 13);
    }, {1}};
    t["ReduceMean"] = {1, [](NodeCtx &n) {
      return handleReduce(n, "amp.reduce_mean", 18);
    }, {1}};
    t["ReduceMax"] = {1, [](NodeCtx &n) {
      return handleReduce(n, "amp.reduce_max", 18);
    }, {1}};
    t["ReduceProd"] = {1, [](NodeCtx &n) {
      return handleReduce(n, "amp.reduce_prod", 18);
    }, {1}};
    for (auto [onnxName, kind] : {std::make_pair("ReduceMin", "min"), std::make_pair("ReduceL1", "l1"),
                                  std::make_pair("ReduceL2", "l2"),
                                  std::make_pair("ReduceSumSquare", "sum_square"),
                                  std::make_pair("ReduceLogSum", "log_sum"),
                                  std::make_pair("ReduceLogSumExp", "log_sum_exp")})
      t[onnxName] = {1, [kind = std::string(kind)](NodeCtx &n) {
        return handleComposedReduce(n, kind);
      }, {1}};
    t["SoftmaxCrossEntropyLoss"] = {12, [](NodeCtx &n) {
      return handleLoss(n, "amp.softmax_cross_entropy_loss", 2);
    }};
    t["NegativeLogLikelihoodLoss"] = {12, [](NodeCtx &n) {
      return handleLoss(n, "amp.nll_loss", 1);
    }};
    t["Cast"] = {6, [](NodeCtx &n) { return handleCast(n); }};
    // (Folded at import on integer constants: shape arithmetic.)
    t["Mod"] = {10, [](NodeCtx &n) -> LogicalResult {
      if (failed(n.allowAttrs({"fmod"})))
        return failure();
      auto fm = n.getInt("fmod", 0);
      auto a = n.input(0);
      if (failed(fm) || failed(a))
        return failure();
      if (*fm == 0 && isa<FloatType>(getElementTypeOrSelf(a->getType())))
        return n.fail("fmod = 0 on floats: ONNX requires fmod = 1 for floating-point inputs");
      return simple(n, *fm ? "amp.fmod" : "amp.mod", {0, 1});
    }};
    t["Constant"] = {1, handleConstant};
    t["Shape"] = {1, handleShape};
    t["ConstantOfShape"] = {9, handleConstantOfShape, {0}};
    t["Sum"] = {1, [](NodeCtx &n) { return handleVariadic(n, "amp.add"); }};
    t["Max"] = {6, [](NodeCtx &n) { return handleVariadic(n, "amp.max"); }};
    t["Min"] = {6, [](NodeCtx &n) { return handleVariadic(n, "amp.min"); }};
    t["Clip"] = {6, handleClip, {1, 2}}; // bounds: constants, never parameters
    t["Size"] = {1, handleSize};
    t["com.microsoft.Scale"] = {1, handleScaleMS};
    t["Neg"] = {1, handleNeg};
    // onnxruntime-training's gradient ops (MaxPoolGrad is in the default
    // domain there).
    t["MaxPoolGrad"] = {1, handleMaxPoolGradMS};
    t["com.microsoft.ReluGrad"] = {1, [](NodeCtx &n) { return handleUnaryGrad(n, "relu"); }};
    t["com.microsoft.GeluGrad"] = {1, [](NodeCtx &n) { return handleUnaryGrad(n, "gelu"); }};
    t["com.microsoft.FastGeluGrad"] = {1, [](NodeCtx &n) {
      return handleUnaryGrad(n, "gelu_tanh");
    }};
    t["com.microsoft.TanhGrad"] = {1, [](NodeCtx &n) { return handleOutputGrad(n, true); }};
    t["com.microsoft.SigmoidGrad"] = {1, [](NodeCtx &n) { return handleOutputGrad(n, false); }};
    t["com.microsoft.SoftmaxGrad_13"] = {1, [](NodeCtx &n) {
      return handleSoftmaxGradMS(n, false, true);
    }};
    t["com.microsoft.LogSoftmaxGrad_13"] = {1, [](NodeCtx &n) {
      return handleSoftmaxGradMS(n, true, true);
    }};
    t["com.microsoft.SoftmaxGrad"] = {1, [](NodeCtx &n) {
      return handleSoftmaxGradMS(n, false, false);
    }};
    t["com.microsoft.LogSoftmaxGrad"] = {1, [](NodeCtx &n) {
      return handleSoftmaxGradMS(n, true, false);
    }};
    t["com.microsoft.SoftmaxCrossEntropyLossGrad"] = {1, handleSCELossGrad};
    t["com.microsoft.ConvGrad"] = {1, handleConvGrad};
    t["com.microsoft.BatchNormInternal"] = {1, handleBatchNormInternal};
    t["com.microsoft.BatchNormalizationGrad"] = {1, handleBatchNormGradMS};
    t["com.microsoft.LayerNormalizationGrad"] = {1, handleLayerNormGradMS};
    t["com.microsoft.DropoutGrad"] = {1, handleDropoutGrad, {2, 3}};
    t["com.microsoft.FusedMatMul"] = {1, handleFusedMatMul};
    t["com.microsoft.GatherGrad"] = {1, handleGatherGradMS, {0}};
    t["com.microsoft.InPlaceAccumulatorV2"] = {1, handleInPlaceAccumulatorV2};
    return t;
  }();
  return table;
}

//===----------------------------------------------------------------------===//
// The graph
//===----------------------------------------------------------------------===//

bool isFloatType(int32_t dt) {
  return dt == onnx::TensorProto::FLOAT || dt == onnx::TensorProto::FLOAT16 ||
         dt == onnx::TensorProto::BFLOAT16 || dt == onnx::TensorProto::DOUBLE;
}

OwningOpRef<ModuleOp> Importer::run() {
  onnx::GraphProto &g = *model.mutable_graph();
  Location moduleLoc = fileLoc();

  // Opsets by domain; "" and "ai.onnx" are the same domain.
  for (const auto &os : model.opset_import()) {
    std::string d = os.domain() == "ai.onnx" ? "" : os.domain();
    if (opsets.count(d) && opsets[d] != os.version())
      errorAt("the model imports domain '" +
              (d.empty() ? std::string("ai.onnx") : d) +
              "' twice, with versions " + llvm::Twine(opsets[d]) + " and " +
              llvm::Twine(os.version()));
    opsets[d] = os.version();
  }

  // Names: every value is produced once.
  llvm::StringMap<std::string> producer; // value -> what produces it
  auto define = [&](const std::string &name, const std::string &what) {
    if (name.empty())
      return;
    auto [it, inserted] = producer.try_emplace(name, what);
    if (!inserted)
      errorAt("the name '" + name + "' is defined twice: by " + it->second +
              " and by " + what);
  };
  for (auto &init : *g.mutable_initializer()) {
    if (init.name().empty()) {
      errorAt("an initializer has no name");
      continue;
    }
    if (initializers.count(init.name()))
      errorAt("the name '" + init.name() + "' is defined twice: by two "
              "initializers");
    initializers[init.name()] = &init;
  }
  for (const auto &[name, t] : initializers)
    producer[name] = "initializer '" + name.str() + "'";
  std::vector<const onnx::ValueInfoProto *> graphInputs;
  llvm::StringSet<> inputNames;
  for (const auto &in : g.input()) {
    if (!inputNames.insert(in.name()).second) {
      errorAt("the graph input '" + in.name() + "' is listed twice");
      continue;
    }
    if (initializers.count(in.name()))
      continue; // IR < 4: initializers are also listed as inputs
    define(in.name(), "graph input '" + in.name() + "'");
    graphInputs.push_back(&in);
  }
  std::vector<std::string> nodeNames(g.node_size());
  for (int i = 0; i < g.node_size(); ++i) {
    const auto &node = g.node(i);
    nodeNames[i] = !node.name().empty()       ? node.name()
                   : node.output_size() > 0 && !node.output(0).empty()
                       ? node.output(0)
                       : node.op_type() + "_" + std::to_string(i);
    for (const auto &o : node.output())
      define(o, "node '" + nodeNames[i] + "' (" + node.op_type() + ")");
  }
  // Constant graph inputs given on the command line.
  for (const auto &[name, file] : opts.constantInputs) {
    if (!inputNames.count(name)) {
      errorAt("--const-input names '" + name + "', which is not a graph input");
      continue;
    }
    auto buf = llvm::MemoryBuffer::getFile(file, false, false);
    onnx::TensorProto tp;
    if (!buf || !tp.ParseFromArray((*buf)->getBufferStart(),
                                   (int)(*buf)->getBufferSize())) {
      errorAt("--const-input " + name + "=" + file +
              ": not a readable TensorProto file");
      continue;
    }
    auto d = decodeTensor(tp, dir, name);
    if (!d) {
      errorAt(llvm::toString(d.takeError()));
      continue;
    }
    consts[name] = std::move(*d);
  }
  for (const auto &f : opts.frozen)
    if (!initializers.count(f))
      errorAt("frozen parameter '" + f + "' is not an initializer of the "
              "model");

  // Topological order; dangling names and cycles are errors.
  std::vector<int> order;
  {
    llvm::StringMap<int> producedBy;
    for (int i = 0; i < g.node_size(); ++i)
      for (const auto &o : g.node(i).output())
        if (!o.empty())
          producedBy[o] = i;
    std::vector<int> pending(g.node_size(), 0);
    std::vector<std::vector<int>> users(g.node_size());
    for (int i = 0; i < g.node_size(); ++i) {
      for (const auto &in : g.node(i).input()) {
        if (in.empty())
          continue;
        auto p = producedBy.find(in);
        if (p != producedBy.end()) {
          ++pending[i];
          users[p->second].push_back(i);
        } else if (!producer.count(in)) {
          errorAt("node '" + nodeNames[i] + "' (" + g.node(i).op_type() +
                  ") reads '" + in + "', which no node, input or "
                  "initializer defines");
        }
      }
      // A Gradient node reads its y (an attribute) too.
      if (g.node(i).op_type() == "Gradient")
        for (const auto &a : g.node(i).attribute())
          if (a.name() == "y") {
            auto p = producedBy.find(a.s());
            if (p != producedBy.end()) {
              ++pending[i];
              users[p->second].push_back(i);
            }
          }
      // Subgraph attributes (If / Loop / Scan bodies) are not supported;
      // the op itself is reported as unsupported below.
    }
    // Smallest index first: a file already in order keeps its order.
    std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
    for (int i = 0; i < g.node_size(); ++i)
      if (!pending[i])
        ready.push(i);
    while (!ready.empty()) {
      int i = ready.top();
      ready.pop();
      order.push_back(i);
      for (int u : users[i])
        if (--pending[u] == 0)
          ready.push(u);
    }
    if ((int)order.size() != g.node_size()) {
      std::string cyc;
      int shown = 0;
      for (int i = 0; i < g.node_size(); ++i)
        if (pending[i] && shown++ < 8)
          cyc += (cyc.empty() ? "'" : ", '") + nodeNames[i] + "'";
      errorAt("the graph has a cycle through node(s) " + cyc);
    }
  }
  for (const auto &out : g.output())
    if (!producer.count(out.name()))
      errorAt("graph output '" + out.name() + "' is not produced by any "
              "node, input or initializer");

  // Every op must be known: report all unsupported nodes at once.
  const auto &table = opTable();
  for (int i : order) {
    const auto &node = g.node(i);
    std::string domain =
        node.domain() == "ai.onnx" ? std::string() : node.domain();
    std::string shownDomain = domain.empty() ? "ai.onnx" : domain;
    auto os = opsets.find(domain);
    Location loc = NameLoc::get(b.getStringAttr(nodeNames[i]), moduleLoc);
    if (os == opsets.end()) {
      error(loc, "node '" + nodeNames[i] + "' (" + node.op_type() +
                     ", domain " + shownDomain + "): the model imports no "
                     "opset for domain " + shownDomain);
      continue;
    }
    std::string desc = "node '" + nodeNames[i] + "' (" + node.op_type() +
                       ", domain " + shownDomain + ", opset " +
                       std::to_string(os->second) + ")";
    auto it = table.find(domain.empty() ? node.op_type() : domain + "." + node.op_type());
    if (it == table.end()) {
      error(loc, desc + ": unsupported op " + shownDomain + "." +
                     node.op_type());
      continue;
    }
    if (os->second < it->second.minOpset)
      error(loc, desc + ": unsupported op version: " + node.op_type() +
                     " is supported from opset " +
                     llvm::Twine(it->second.minOpset));
  }
  if (!errors.empty())
    return nullptr;

  // Which initializers are parameters: float ones read as tensors.
  llvm::StringSet<> readAsTensor;
  for (const auto &node : g.node()) {
    std::string domain = node.domain() == "ai.onnx" ? std::string() : node.domain();
    auto it = table.find(domain.empty() ? node.op_type() : domain + "." + node.op_type());
    const std::vector<int> *attrIn =
        it != table.end() ? &it->second.attributeInputs : nullptr;
    for (int k = 0; k < node.input_size(); ++k)
      if (!attrIn ||
          std::find(attrIn->begin(), attrIn->end(), k) == attrIn->end())
        readAsTensor.insert(node.input(k));
  }
  for (const auto &out : g.output())
    readAsTensor.insert(out.name());
  std::set<std::string> frozen(opts.frozen.begin(), opts.frozen.end());

  OwningOpRef<ModuleOp> module = ModuleOp::create(moduleLoc);
  b.setInsertionPointToEnd(module->getBody());
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<std::string> argNames;

  // Parameters first (the train_step order: params, state, batch).
  std::vector<std::pair<std::string, HostTensor>> params;
  for (auto &init : *g.mutable_initializer()) {
    if (init.name().empty())
      continue;
    auto d = decodeTensor(init, dir, init.name());
    if (!d) {
      errorAt(llvm::toString(d.takeError()));
      continue;
    }
    bool state = opts.stateInitializers.count(init.name()) > 0;
    // DOUBLE initializers are constants: the runtime has no f64, and
    // exporters write them for compile-time scalars, which fold; one that
    // reaches an op that cannot fold is an error there, naming it.
    bool isParam = isFloatType(d->dtype) && d->dtype != onnx::TensorProto::DOUBLE &&
                   (readAsTensor.count(init.name()) || state) && !frozen.count(init.name());
    if (isParam || state)
      params.emplace_back(init.name(), std::move(*d));
    else
      consts[init.name()] = std::move(*d);
  }
  for (auto &[name, t] : params) {
    auto elt = elementType(t.dtype, "initializer '" + name + "'");
    if (failed(elt))
      continue;
    auto type = RankedTensorType::get(t.shape, *elt);
    argTypes.push_back(type);
    argAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(isFloatType(t.dtype) ? "amp.param" : "amp.opt_state",
                        b.getStringAttr(name)),
         b.getNamedAttr("amp.init", elementsAttr(t, type, name))}));
    argNames.push_back(name);
  }
  for (const auto *in : graphInputs) {
    if (consts.count(in->name()))
      continue; // bound with --const-input
    SmallVector<std::string> dimNames;
    auto type = valueInfoType(*in, "graph input", &dimNames);
    if (failed(type))
      continue;
    SmallVector<NamedAttribute> attrs{
        b.getNamedAttr("amp.input", b.getStringAttr(in->name()))};
    if (llvm::any_of(dimNames, [](const std::string &s) { return !s.empty(); })) {
      SmallVector<Attribute> names;
      for (const auto &s : dimNames)
        names.push_back(b.getStringAttr(s));
      attrs.push_back(b.getNamedAttr("amp.dim_names", b.getArrayAttr(names)));
    }
    argTypes.push_back(*type);
    argAttrs.push_back(b.getDictionaryAttr(attrs));
    argNames.push_back(in->name());
  }
  if (!errors.empty())
    return nullptr;

  auto func = func::FuncOp::create(b, moduleLoc, opts.funcName,
                                   b.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (unsigned i = 0; i < argTypes.size(); ++i) {
    func.setArgAttrs(i, argAttrs[i]);
    values[argNames[i]] = entry->getArgument(i);
  }
  b.setInsertionPointToEnd(entry);

  // value_info types, checked against inferred ones.
  llvm::StringMap<const onnx::ValueInfoProto *> declared;
  for (const auto &vi : g.value_info())
    declared[vi.name()] = &vi;
  for (const auto &vi : g.output())
    declared[vi.name()] = &vi;

  for (int i : order) {
    auto &node = *g.mutable_node(i);
    std::string domain =
        node.domain() == "ai.onnx" ? std::string() : node.domain();
    NodeCtx n{*this,
              node,
              nodeNames[i],
              domain.empty() ? "ai.onnx" : domain,
              opsets[domain],
              NameLoc::get(b.getStringAttr(nodeNames[i]), moduleLoc)};
    bool blocked = false;
    for (const auto &in : node.input())
      blocked |= !in.empty() && poisoned.count(in);
    if (blocked) {
      for (const auto &o : node.output())
        poisoned.insert(o);
      continue;
    }
    current = &n;
    const OpInfo &info =
        table.at(domain.empty() ? node.op_type() : domain + "." + node.op_type());
    size_t errorsBefore = errors.size();
    bool folded = succeeded(foldIntegerNode(n)) || succeeded(foldFloatConcat(n)) ||
                  succeeded(foldDoubleNode(n));
    // A fold that reported an error (an integer overflow) fails the node:
    // it is not handed on to run at run time.
    bool foldError = errors.size() > errorsBefore;
    LogicalResult ok = foldError ? failure() : folded ? success() : info.handle(n);
    if (succeeded(ok) && !folded) {
      int extra = n.unusedInput();
      if (extra >= 0)
        ok = n.fail("input " + llvm::Twine(extra) + " ('" + node.input(extra) +
                    "') is not one this op takes at opset " + llvm::Twine(n.opset) +
                    " (the node has " + llvm::Twine(node.input_size()) + " inputs)");
    }
    for (int k = 0; succeeded(ok) && k < node.output_size(); ++k)
      if (!node.output(k).empty() && !values.count(node.output(k)) &&
          !consts.count(node.output(k)) && !n.skipped.count(k))
        ok = n.fail("output " + llvm::Twine(k) + " ('" + node.output(k) +
                    "') is not one this op produces at opset " + llvm::Twine(n.opset) +
                    " (the node has " + llvm::Twine(node.output_size()) + " outputs)");
    current = nullptr;
    if (failed(ok)) {
      for (const auto &o : node.output())
        poisoned.insert(o);
      continue;
    }
    // Check value_info of the outputs we produced.
    for (const auto &o : node.output()) {
      auto v = values.find(o);
      auto d = declared.find(o);
      if (o.empty() || v == values.end() || d == declared.end() ||
          !d->second->has_type() || !d->second->type().has_tensor_type())
        continue;
      const auto &tt = d->second->type().tensor_type();
      auto got = cast<RankedTensorType>(v->second.getType());
      bool mismatch = false;
      if (tt.elem_type()) {
        auto elt = elementType(tt.elem_type(), "value '" + o + "'");
        mismatch = failed(elt) || *elt != got.getElementType();
      }
      if (!mismatch && tt.has_shape()) {
        if (tt.shape().dim_size() != got.getRank())
          mismatch = true;
        for (int k = 0; !mismatch && k < tt.shape().dim_size(); ++k) {
          const auto &dim = tt.shape().dim(k);
          mismatch = dim.has_dim_value() && !got.isDynamicDim(k) &&
                     dim.dim_value() != got.getDimSize(k);
        }
      }
      if (mismatch) {
        std::string s;
        llvm::raw_string_ostream os(s);
        os << got;
        (void)n.fail("output '" + o + "' is declared (value_info) with a "
                     "type or shape that contradicts the op's rule, which "
                     "gives " + s);
      }
    }
  }

  // Results.
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resAttrs;
  for (const auto &out : g.output()) {
    if (poisoned.count(out.name()))
      continue;
    auto v = lookup(out.name(), NameLoc::get(b.getStringAttr(out.name()), moduleLoc));
    if (failed(v))
      continue;
    results.push_back(*v);
    resAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("amp.output", b.getStringAttr(out.name()))}));
  }
  if (!errors.empty())
    return nullptr;
  func::ReturnOp::create(b, moduleLoc, results);
  func.setFunctionType(
      b.getFunctionType(argTypes, ValueRange(results).getTypes()));
  for (unsigned i = 0; i < resAttrs.size(); ++i)
    func.setResultAttrs(i, resAttrs[i]);
  if (opts.fuseGelu)
    fuseGelu(func);
  if (opts.fuseMatMulBias)
    fuseMatMulBias(func);
  if (model.has_producer_name())
    (*module)->setAttr("amp.producer",
                       b.getStringAttr(model.producer_name() + " " +
                                       model.producer_version()));
  if (failed(verify(*module))) {
    errorAt("the imported module does not verify (an importer bug; the "
            "messages above say where)");
    return nullptr;
  }
  return module;
}

/// The value of a splat float constant with one element (a scalar), if `v`
/// is one.
static std::optional<double> scalarConst(Value v) {
  auto c = v.getDefiningOp<arith::ConstantOp>();
  if (!c)
    return std::nullopt;
  auto d = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!d || !d.isSplat() || d.getNumElements() != 1 || !isa<FloatType>(d.getElementType()))
    return std::nullopt;
  return d.getSplatValue<APFloat>().convertToDouble();
}

/// Exporters write GELU (erf form) as x * 0.5 * (1 + erf(x / sqrt 2)) in five
/// nodes (torch.onnx.export below opset 20); it becomes one amp.gelu, which
/// runs as one vector pass and has one gradient rule. Only the exact chain
/// matches: every intermediate used once, the constants scalars of x's type
/// (sqrt 2 or 1 / sqrt 2 to 1e-6, 1 and 0.5 exactly).
static void fuseGelu(func::FuncOp f) {
  auto near = [](std::optional<double> v, double want, double tol) {
    return v && std::fabs(*v - want) <= tol * want;
  };
  auto other = [](Operation *op, Value v) -> Value {
    return op->getOperand(0) == v ? op->getOperand(1) : op->getOperand(0);
  };
  SmallVector<Operation *> erfs;
  f.walk([&](ErfOp e) { erfs.push_back(e); });
  for (Operation *e : erfs) {
    Value t = e->getOperand(0);
    Operation *d = t.getDefiningOp();
    if (!d || !t.hasOneUse() || !e->getResult(0).hasOneUse())
      continue;
    Value x;
    if (isa<DivOp>(d) && near(scalarConst(d->getOperand(1)), M_SQRT2, 1e-6))
      x = d->getOperand(0);
    else if (isa<MulOp>(d) && near(scalarConst(d->getOperand(1)), M_SQRT1_2, 1e-6))
      x = d->getOperand(0);
    else if (isa<MulOp>(d) && near(scalarConst(d->getOperand(0)), M_SQRT1_2, 1e-6))
      x = d->getOperand(1);
    if (!x || x.getType() != e->getResult(0).getType())
      continue;
    Operation *a = *e->getResult(0).getUsers().begin();
    if (!isa<AddOp>(a) || scalarConst(other(a, e->getResult(0))) != 1.0 ||
        !a->getResult(0).hasOneUse() || a->getResult(0).getType() != x.getType())
      continue;
    // (x * P) * 0.5, or (x * 0.5) * P, with P = 1 + erf(...).
    Operation *m1 = *a->getResult(0).getUsers().begin();
    if (!isa<MulOp>(m1) || m1->getResult(0).getType() != x.getType() ||
        !m1->getResult(0).hasOneUse())
      continue;
    Value o = other(m1, a->getResult(0));
    Operation *last = nullptr, *half = nullptr;
    if (o == x) {
      Operation *m2 = *m1->getResult(0).getUsers().begin();
      if (isa<MulOp>(m2) && scalarConst(other(m2, m1->getResult(0))) == 0.5 &&
          m2->getResult(0).getType() == x.getType())
        last = m2;
    } else if (Operation *h = o.getDefiningOp();
               h && isa<MulOp>(h) && o.hasOneUse() &&
               ((h->getOperand(0) == x && scalarConst(h->getOperand(1)) == 0.5) ||
                (h->getOperand(1) == x && scalarConst(h->getOperand(0)) == 0.5))) {
      last = m1;
      half = h;
    }
    if (!last)
      continue;
    OpBuilder b(last);
    auto g = GeluOp::create(b, last->getLoc(), x.getType(), x, b.getStringAttr("none"));
    last->getResult(0).replaceAllUsesWith(g.getResult());
    SmallVector<Operation *> dead{last};
    if (last != m1)
      dead.push_back(m1);
    dead.append({a, e, d});
    if (half)
      dead.push_back(half);
    for (Operation *op : dead)
      if (op->use_empty())
        op->erase();
  }
}

/// MatMul followed by the Add of a bias row (how exporters write a Linear
/// layer on 3-D activations) becomes one amp.gemm on the rows, between
/// reshapes (free views): the runtime adds the bias inside the matrix
/// product instead of in a second pass. Only [..., K] x [K, N] + [N] with the
/// product read by the Add alone and static shapes; the result is the same
/// f32 sum rounded once.
static void fuseMatMulBias(func::FuncOp f) {
  SmallVector<MatMulOp> mms;
  f.walk([&](MatMulOp m) { mms.push_back(m); });
  for (MatMulOp mm : mms) {
    auto at = dyn_cast<RankedTensorType>(mm.getLhs().getType());
    auto bt = dyn_cast<RankedTensorType>(mm.getRhs().getType());
    auto yt = dyn_cast<RankedTensorType>(mm.getOutput().getType());
    if (!at || !bt || !yt || at.getRank() < 2 || bt.getRank() != 2 || !at.hasStaticShape() ||
        !bt.hasStaticShape() || !isa<FloatType>(yt.getElementType()) ||
        !mm.getOutput().hasOneUse() || mm.getAccumulateAttr())
      continue;
    auto add = dyn_cast<AddOp>(*mm.getOutput().getUsers().begin());
    if (!add || add.getResult().getType() != yt)
      continue;
    Value bias = add.getLhs() == mm.getOutput() ? add.getRhs() : add.getLhs();
    auto ct = dyn_cast<RankedTensorType>(bias.getType());
    int64_t n = bt.getDimSize(1), k = bt.getDimSize(0);
    if (!ct || ct.getRank() != 1 || ct.getDimSize(0) != n ||
        ct.getElementType() != yt.getElementType() || bias == mm.getOutput())
      continue;
    int64_t m = at.getNumElements() / k;
    OpBuilder b(add);
    Location loc = add.getLoc();
    Value a = mm.getLhs();
    auto a2 = RankedTensorType::get({m, k}, at.getElementType());
    if (at.getRank() != 2)
      a = ReshapeOp::create(b, loc, a2, a, b.getDenseI64ArrayAttr({m, k}), b.getBoolAttr(false));
    auto g = GemmOp::create(b, loc, RankedTensorType::get({m, n}, yt.getElementType()), a,
                            mm.getRhs(), bias, b.getF32FloatAttr(1.0f), b.getF32FloatAttr(1.0f),
                            b.getBoolAttr(false), b.getBoolAttr(false), TypeAttr());
    Value y = g.getOutput();
    if (yt.getRank() != 2)
      y = ReshapeOp::create(b, loc, yt, y, b.getDenseI64ArrayAttr(yt.getShape()),
                            b.getBoolAttr(false));
    add.getResult().replaceAllUsesWith(y);
    add.erase();
    mm.erase();
  }
}

/// Names in a hostile file may hold control characters (terminal escapes)
/// or invalid UTF-8: messages show those bytes as \xNN.
std::string printable(llvm::StringRef s) {
  bool utf8 = llvm::json::isUTF8(s);
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f && (c < 0x80 || utf8))) {
      out.push_back(c);
      continue;
    }
    out += llvm::formatv("\\x{0:x-2}", (unsigned)c).str();
  }
  return out;
}

} // namespace

/// ONNX's TrainingInfoProto: the algorithm graph (one training step, which
/// sees ModelProto.graph's initializers) becomes the function `train_step`;
/// each update_binding (initializer <- algorithm output) turns that output
/// into the initializer's new value (amp.updates), so the step is the
/// train_step form of DESIGN.md section 2.
static LogicalResult importTrainingInfo(llvm::StringRef path, MLIRContext *ctx,
                                        const onnx::ModelProto &model,
                                        const ONNXImportOptions &opts, ModuleOp module,
                                        onnx::ModelProto &step) {
  Location loc = FileLineColLoc::get(ctx, path, 0, 0);
  if (model.training_info_size() > 1)
    return emitError(loc) << "the model has " << model.training_info_size()
                          << " TrainingInfoProto entries; one is supported";
  const onnx::TrainingInfoProto &ti = model.training_info(0);
  if (ti.has_initialization() && ti.initialization().node_size() > 0)
    return emitError(loc) << "TrainingInfoProto: initialization graphs (" 
                          << ti.initialization().node_size()
                          << " nodes) are not supported: give the initial values as "
                             "initializers of the model's graph";
  if (!ti.has_algorithm() || ti.algorithm().node_size() == 0)
    return success();
  if (module.lookupSymbol("train_step"))
    return emitError(loc) << "TrainingInfoProto: the module already has a function "
                             "'train_step'";
  std::map<std::string, std::string> binding; // algorithm output -> initializer
  ONNXImportOptions o = opts;
  o.funcName = "train_step";
  for (const auto &kv : ti.update_binding()) {
    bool known = llvm::any_of(step.graph().initializer(),
                              [&](const onnx::TensorProto &t) { return t.name() == kv.key(); });
    bool produced = llvm::any_of(step.graph().output(), [&](const onnx::ValueInfoProto &v) {
      return v.name() == kv.value();
    });
    if (!known || !produced)
      return emitError(loc) << "TrainingInfoProto: update_binding '" << kv.key() << "' <- '"
                            << kv.value() << "': "
                            << (!known ? "no initializer of that name"
                                       : "the algorithm has no output of that name");
    if (binding.count(kv.value()))
      return emitError(loc) << "TrainingInfoProto: output '" << kv.value()
                            << "' is bound twice";
    binding[kv.value()] = kv.key();
    o.stateInitializers.insert(kv.key());
  }
  Importer im(ctx, path, step, o);
  OwningOpRef<ModuleOp> m = im.run();
  for (auto &[l, msg] : im.errors)
    emitError(l) << "TrainingInfoProto algorithm: " << printable(msg);
  if (!im.errors.empty() || !m)
    return failure();
  auto f = m->lookupSymbol<func::FuncOp>("train_step");
  for (unsigned i = 0; i < f.getNumResults(); ++i) {
    auto n = f.getResultAttrOfType<StringAttr>(i, "amp.output");
    if (!n || !binding.count(n.getValue().str()))
      continue;
    std::string key = binding[n.getValue().str()];
    // The bound value must have the initializer's type.
    for (BlockArgument a : f.getArguments()) {
      auto p = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), "amp.param");
      if (!p)
        p = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), "amp.opt_state");
      if (p && p.getValue() == key && a.getType() != f.getResultTypes()[i])
        return emitError(loc) << "TrainingInfoProto: update_binding '" << key << "' <- '"
                              << n.getValue() << "': " << f.getResultTypes()[i]
                              << " does not fit the initializer's " << a.getType();
    }
    f.setResultAttrs(i, DictionaryAttr::get(
                            ctx, {NamedAttribute(StringAttr::get(ctx, "amp.updates"),
                                                 StringAttr::get(ctx, key))}));
  }
  f->remove();
  module.push_back(f);
  return success();
}

OwningOpRef<ModuleOp> mlir::amp::importONNXFile(llvm::StringRef path,
                                                MLIRContext *ctx,
                                                const ONNXImportOptions &opts) {
  auto buf = llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/false,
                                                /*RequiresNullTerminator=*/false);
  if (!buf) {
    emitError(FileLineColLoc::get(ctx, path, 0, 0))
        << path << ": cannot read the file: " << buf.getError().message();
    return nullptr;
  }
  return importONNXBuffer(llvm::MemoryBufferRef((*buf)->getBuffer(), path), ctx, opts);
}

OwningOpRef<ModuleOp> mlir::amp::importONNXBuffer(llvm::MemoryBufferRef buf,
                                                  MLIRContext *ctx,
                                                  const ONNXImportOptions &opts) {
  ctx->loadDialect<AMPDialect, arith::ArithDialect, func::FuncDialect>();
  llvm::StringRef path = buf.getBufferIdentifier();
  onnx::ModelProto model;
  if (llvm::Error e = parseModel(buf, model)) {
    emitError(FileLineColLoc::get(ctx, path, 0, 0)) << llvm::toString(std::move(e));
    return nullptr;
  }
  // The training step's graph: TrainingInfoProto's algorithm with the
  // model's initializers (copied before the main import, which adopts their
  // bytes).
  onnx::ModelProto step;
  bool training = opts.importTrainingInfo && model.training_info_size() > 0;
  if (training && model.training_info(0).has_algorithm()) {
    *step.mutable_opset_import() = model.opset_import();
    step.set_ir_version(model.ir_version());
    *step.mutable_graph() = model.training_info(0).algorithm();
    std::set<std::string> own;
    for (const auto &i : step.graph().initializer())
      own.insert(i.name());
    for (const auto &i : model.graph().initializer())
      if (!own.count(i.name()))
        *step.mutable_graph()->add_initializer() = i;
  }
  Importer im(ctx, path, model, opts);
  OwningOpRef<ModuleOp> module = im.run();
  for (auto &[loc, msg] : im.errors)
    emitError(loc) << printable(msg);
  if (!im.errors.empty())
    return nullptr;
  if (training && failed(importTrainingInfo(path, ctx, model, opts, *module, step)))
    return nullptr;
  return module;
}

FailureOr<ONNXTensorFile> mlir::amp::readTensorProtoFile(llvm::StringRef path,
                                                         MLIRContext *ctx) {
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  Location loc = FileLineColLoc::get(ctx, path, 0, 0);
  onnx::TensorProto tp;
  if (!buf || !tp.ParseFromArray((*buf)->getBufferStart(), (int)(*buf)->getBufferSize()))
    return LogicalResult(emitError(loc) << path << ": not a readable TensorProto file");
  llvm::SmallString<256> dir(path);
  llvm::sys::path::remove_filename(dir);
  auto d = decodeTensor(tp, dir.empty() ? "." : dir.str(), tp.name());
  if (!d)
    return LogicalResult(emitError(loc) << path << ": " << llvm::toString(d.takeError()));
  ONNXTensorFile out;
  out.name = tp.name();
  out.shape = d->shape;
  out.bytes.assign(d->data(), d->bytes->size());
  Builder b(ctx);
  switch (d->dtype) {
  case onnx::TensorProto::FLOAT: out.elementType = b.getF32Type(); break;
  case onnx::TensorProto::FLOAT16: out.elementType = b.getF16Type(); break;
  case onnx::TensorProto::BFLOAT16: out.elementType = b.getBF16Type(); break;
  case onnx::TensorProto::BOOL: out.elementType = b.getI1Type(); break;
  case onnx::TensorProto::INT8: out.elementType = b.getIntegerType(8); break;
  case onnx::TensorProto::INT16: out.elementType = b.getIntegerType(16); break;
  case onnx::TensorProto::INT32: out.elementType = b.getIntegerType(32); break;
  case onnx::TensorProto::INT64: out.elementType = b.getIntegerType(64); break;
  case onnx::TensorProto::UINT8: out.elementType = b.getIntegerType(8, false); break;
  case onnx::TensorProto::UINT16: out.elementType = b.getIntegerType(16, false); break;
  case onnx::TensorProto::UINT32: out.elementType = b.getIntegerType(32, false); break;
  case onnx::TensorProto::UINT64: out.elementType = b.getIntegerType(64, false); break;
  default: break;
  }
  return out;
}

void mlir::amp::registerONNXImportDialects(DialectRegistry &registry) {
  registry.insert<AMPDialect, arith::ArithDialect, func::FuncDialect>();
}

std::vector<std::pair<std::string, int>> mlir::amp::supportedONNXOps() {
  std::vector<std::pair<std::string, int>> out;
  for (const auto &[name, info] : opTable())
    out.emplace_back(name, info.minOpset);
  return out;
}

//===----------------------------------------------------------------------===//
// onnxruntime-training artifacts
//===----------------------------------------------------------------------===//

static constexpr llvm::StringLiteral kGradBufferSuffix = "_grad.accumulation.buffer";

OwningOpRef<ModuleOp> mlir::amp::importORTTrainingArtifacts(llvm::StringRef trainingModel,
                                                            llvm::StringRef checkpoint,
                                                            MLIRContext *ctx,
                                                            const ONNXImportOptions &opts) {
  ctx->loadDialect<AMPDialect, arith::ArithDialect, func::FuncDialect>();
  Location loc = FileLineColLoc::get(ctx, trainingModel, 0, 0);
  auto fail = [&](const llvm::Twine &msg) -> OwningOpRef<ModuleOp> {
    emitError(loc) << printable((trainingModel + ": " + msg).str());
    return nullptr;
  };
  onnx::ModelProto model;
  if (llvm::Error e = loadModel(trainingModel, model)) {
    emitError(loc) << printable(llvm::toString(std::move(e)));
    return nullptr;
  }
  auto ck = readORTCheckpoint(checkpoint);
  if (!ck) {
    emitError(FileLineColLoc::get(ctx, checkpoint, 0, 0))
        << printable(llvm::toString(ck.takeError()));
    return nullptr;
  }
  onnx::GraphProto &g = *model.mutable_graph();
  if (g.output_size() == 0)
    return fail("the training model has no outputs (its first output is the loss)");
  const std::string lossName = g.output(0).name();

  std::set<std::string> trainable, inCheckpoint;
  for (const auto &t : ck->trainable) {
    if (!trainable.insert(t.name).second)
      return fail("the checkpoint lists the parameter '" + t.name + "' twice");
    inCheckpoint.insert(t.name);
  }
  for (const auto &t : ck->frozen)
    if (!inCheckpoint.insert(t.name).second)
      return fail("the checkpoint lists the parameter '" + t.name + "' twice");
  if (trainable.empty())
    return fail("the checkpoint has no trainable parameter");

  // The gradient accumulators: each trainable parameter's gradient value,
  // which the step returns instead of writing it into a buffer.
  std::map<std::string, std::string> gradOf;
  std::set<std::string> dropInputs, dropOutputs;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (const auto &node : g.node()) {
    if (node.op_type() != "InPlaceAccumulatorV2" || node.domain() != "com.microsoft") {
      *kept.Add() = node;
      continue;
    }
    if (node.input_size() < 2)
      return fail("an InPlaceAccumulatorV2 node has fewer than 2 inputs");
    llvm::StringRef buffer = node.input(0);
    if (!buffer.ends_with(kGradBufferSuffix))
      return fail("InPlaceAccumulatorV2 writes '" + buffer + "', which is not named <parameter>" +
                  kGradBufferSuffix + " (not an artifact of generate_artifacts?)");
    std::string p = buffer.drop_back(kGradBufferSuffix.size()).str();
    if (!trainable.count(p))
      return fail("InPlaceAccumulatorV2 accumulates the gradient of '" + p +
                  "', which is not a trainable parameter of the checkpoint");
    if (!gradOf.emplace(p, node.input(1)).second)
      return fail("the gradient of '" + p + "' is accumulated twice");
    dropInputs.insert(buffer.str());
    if (node.input_size() > 2 && !node.input(2).empty())
      dropInputs.insert(node.input(2));
    for (const auto &o : node.output())
      if (!o.empty())
        dropOutputs.insert(o);
  }
  for (const auto &t : ck->trainable)
    if (!gradOf.count(t.name))
      return fail("the trainable parameter '" + t.name +
                  "' has no gradient accumulator (InPlaceAccumulatorV2) in the training model");
  for (const auto &node : kept)
    for (const auto &in : node.input())
      if (dropInputs.count(in) || dropOutputs.count(in))
        return fail("node '" + (node.name().empty() ? node.op_type() : node.name()) +
                    "' reads '" + in + "', a gradient buffer or accumulator flag, "
                    "which is not supported");
  g.mutable_node()->Swap(&kept);

  // Outputs: the loss, the model's other outputs, then the gradients.
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> outs;
  for (const auto &o : g.output())
    if (!dropOutputs.count(o.name()))
      *outs.Add() = o;
  if (outs.empty() || outs[0].name() != lossName)
    return fail("the first output '" + lossName + "' (the loss) is an accumulator's flag");
  for (const auto &t : ck->trainable)
    outs.Add()->set_name(gradOf[t.name]);
  g.mutable_output()->Swap(&outs);

  // Inputs: the checkpoint's parameters become initializers; the gradient
  // buffers and the reset flag go; the rest is the batch.
  std::vector<std::string> frozen;
  for (const auto &init : g.initializer())
    if (isFloatType(init.data_type()))
      frozen.push_back(init.name()); // ORT's own constants (seeds, statistics)
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> ins;
  std::set<std::string> declared;
  for (const auto &in : g.input()) {
    if (dropInputs.count(in.name()))
      continue;
    if (!inCheckpoint.count(in.name())) {
      *ins.Add() = in;
      continue;
    }
    declared.insert(in.name());
  }
  auto addParam = [&](const ORTTensor &t, bool isFrozen) -> bool {
    if (!declared.count(t.name)) {
      (void)fail("the checkpoint's parameter '" + t.name +
                 "' is not an input of the training model");
      return false;
    }
    for (const auto &in : g.input()) {
      if (in.name() != t.name || !in.type().has_tensor_type())
        continue;
      const auto &tt = in.type().tensor_type();
      bool bad = tt.elem_type() && tt.elem_type() != t.dataType;
      if (tt.has_shape()) {
        bad |= tt.shape().dim_size() != (int)t.dims.size();
        for (int k = 0; !bad && k < tt.shape().dim_size(); ++k)
          bad = tt.shape().dim(k).has_dim_value() && tt.shape().dim(k).dim_value() != t.dims[k];
      }
      if (bad) {
        (void)fail("the checkpoint's parameter '" + t.name +
                   "' does not have the type and shape the training model declares");
        return false;
      }
    }
    onnx::TensorProto *init = g.add_initializer();
    init->set_name(t.name);
    init->set_data_type(t.dataType);
    for (int64_t d : t.dims)
      init->add_dims(d);
    init->set_raw_data(t.raw);
    if (isFrozen)
      frozen.push_back(t.name);
    return true;
  };
  for (const auto &t : ck->trainable)
    if (!addParam(t, false))
      return nullptr;
  for (const auto &t : ck->frozen)
    if (!addParam(t, true))
      return nullptr;
  g.mutable_input()->Swap(&ins);

  ONNXImportOptions o = opts;
  o.funcName = "train_step";
  o.frozen = frozen;
  o.importTrainingInfo = false;
  Importer im(ctx, trainingModel, model, o);
  OwningOpRef<ModuleOp> module = im.run();
  for (auto &[l, msg] : im.errors)
    emitError(l) << printable(msg);
  if (!im.errors.empty() || !module)
    return nullptr;
  auto f = module->lookupSymbol<func::FuncOp>("train_step");
  Builder b(ctx);
  auto lt = dyn_cast<RankedTensorType>(f.getResultTypes()[0]);
  if (!lt || lt.getNumElements() != 1 || !isa<FloatType>(lt.getElementType()))
    return fail("the loss '" + lossName + "' is not a float scalar");
  f.setResultAttrs(0, b.getDictionaryAttr(
                          {b.getNamedAttr("amp.output", b.getStringAttr("loss"))}));
  unsigned first = f.getNumResults() - ck->trainable.size();
  for (auto [k, t] : llvm::enumerate(ck->trainable))
    f.setResultAttrs(first + k, b.getDictionaryAttr(
                                    {b.getNamedAttr("amp.grad", b.getStringAttr(t.name))}));
  // The backward's seed: the loss's gradient, an initializer of value 1.
  std::string seedName = lossName + "_grad";
  for (auto c : f.getOps<arith::ConstantOp>()) {
    auto nl = dyn_cast<NameLoc>(c.getLoc());
    auto v = dyn_cast<DenseElementsAttr>(c.getValue());
    if (nl && nl.getName() == seedName && v && v.isSplat() &&
        isa<FloatType>(v.getElementType()) &&
        v.getSplatValue<APFloat>().convertToDouble() == 1.0)
      c->setAttr("amp.loss_seed", b.getUnitAttr());
  }
  return module;
}

FailureOr<ORTOptimizerSpec> mlir::amp::readORTOptimizerModel(llvm::StringRef path,
                                                            MLIRContext *ctx) {
  Location loc = FileLineColLoc::get(ctx, path, 0, 0);
  auto fail = [&](const llvm::Twine &msg) -> FailureOr<ORTOptimizerSpec> {
    emitError(loc) << printable((path + ": " + msg).str());
    return failure();
  };
  onnx::ModelProto model;
  if (llvm::Error e = loadModel(path, model)) {
    emitError(loc) << printable(llvm::toString(std::move(e)));
    return failure();
  }
  const onnx::GraphProto &g = model.graph();
  if (g.node_size() != 1 || g.node(0).domain() != "com.microsoft")
    return fail("an optimizer model is one com.microsoft AdamWOptimizer or SGDOptimizerV2 "
                "node; this graph has " + llvm::Twine(g.node_size()) + " node(s)");
  const onnx::NodeProto &n = g.node(0);
  auto expect = [&](std::initializer_list<const char *> names) -> LogicalResult {
    int k = 0;
    for (const char *want : names) {
      if (k >= n.input_size() || n.input(k) != want)
        return fail(n.op_type() + " input " + llvm::Twine(k) + " must be the graph input '" +
                    want + "'");
      ++k;
    }
    if (n.input_size() > k && !n.input(k).empty())
      return fail(n.op_type() + ": the update_signal input is not supported");
    return success();
  };
  ORTOptimizerSpec s;
  if (n.op_type() == "SGDOptimizerV2") {
    if (failed(expect({"learning_rate", "params", "gradients"})))
      return failure();
    if (n.attribute_size())
      return fail("SGDOptimizerV2 has an unknown attribute '" + n.attribute(0).name() + "'");
    s.optimizer = "sgd";
    return s;
  }
  if (n.op_type() != "AdamWOptimizer")
    return fail("unsupported optimizer op com.microsoft." + n.op_type() +
                " (AdamWOptimizer and SGDOptimizerV2 are)");
  if (failed(expect({"learning_rate", "step", "params", "gradients", "first_order_moments",
                     "second_order_moments"})))
    return failure();
  s.optimizer = "adamw";
  int64_t mode = 0, correctBias = 1;
  for (const auto &a : n.attribute()) {
    const std::string &k = a.name();
    if (k == "alpha") s.beta1 = a.f();
    else if (k == "beta") s.beta2 = a.f();
    else if (k == "epsilon") s.eps = a.f();
    else if (k == "weight_decay") s.weightDecay = a.f();
    else if (k == "adam_mode") mode = a.i();
    else if (k == "correct_bias") correctBias = a.i();
    else
      return fail("AdamWOptimizer has an unknown attribute '" + k + "'");
  }
  if (mode != 0 && mode != 1)
    return fail("AdamWOptimizer adam_mode " + llvm::Twine(mode) + " is unknown (0 or 1)");
  if (correctBias != 1)
    return fail("AdamWOptimizer correct_bias = " + llvm::Twine(correctBias) +
                " (no bias correction) is not supported");
  s.adamMode = mode == 0 ? "torch" : "hf";
  return s;
}

FailureOr<ORTOptimizerState> mlir::amp::readORTOptimizerState(llvm::StringRef checkpoint,
                                                             MLIRContext *ctx) {
  auto ck = readORTCheckpoint(checkpoint);
  if (!ck) {
    emitError(FileLineColLoc::get(ctx, checkpoint, 0, 0))
        << printable(llvm::toString(ck.takeError()));
    return failure();
  }
  ORTOptimizerState s;
  s.present = ck->hasOptimizerState;
  s.step = ck->step;
  s.learningRate = ck->initialLearningRate;
  for (auto &[p, ms] : ck->moments)
    for (auto &[name, t] : ms) {
      if (t.dataType != onnx::TensorProto::FLOAT) {
        emitError(FileLineColLoc::get(ctx, checkpoint, 0, 0))
            << checkpoint << ": the moment '" << name << "' of '" << p << "' is not f32";
        return failure();
      }
      s.moments[p][name] = t.raw;
    }
  return s;
}
