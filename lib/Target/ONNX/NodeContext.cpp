//===- NodeContext.cpp - a node's attributes, inputs, outputs; op building ===//
//
// What every handler uses: typed attribute getters that refuse a wrong type
// or an unknown attribute, inputs (constant or not) and outputs, and the
// helpers that build amp ops with inferred result types.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

std::string NodeCtx::describe() const {
  return "node '" + name + "' (" + node.op_type() + ", domain " + domain + ", opset " +
         std::to_string(opset) + ")";
}

LogicalResult NodeCtx::fail(const llvm::Twine &msg) const {
  im.error(loc, describe() + ": " + msg);
  return failure();
}

LogicalResult NodeCtx::allowAttrs(llvm::ArrayRef<llvm::StringRef> known) const {
  bool ok = true;
  for (const auto &a : node.attribute()) {
    if (std::find(known.begin(), known.end(), a.name()) == known.end()) {
      (void)fail("attribute '" + a.name() +
                 "' is not supported by the "
                 "importer's " +
                 node.op_type() + " (known: " + llvm::join(known, ", ") + ")");
      ok = false;
    }
  }
  return success(ok);
}

namespace {

static const char *attrTypeName(int t) {
  switch (t) {
  case onnx::AttributeProto::FLOAT:
    return "FLOAT";
  case onnx::AttributeProto::INT:
    return "INT";
  case onnx::AttributeProto::STRING:
    return "STRING";
  case onnx::AttributeProto::TENSOR:
    return "TENSOR";
  case onnx::AttributeProto::GRAPH:
    return "GRAPH";
  case onnx::AttributeProto::FLOATS:
    return "FLOATS";
  case onnx::AttributeProto::INTS:
    return "INTS";
  case onnx::AttributeProto::STRINGS:
    return "STRINGS";
  case onnx::AttributeProto::TENSORS:
    return "TENSORS";
  case onnx::AttributeProto::GRAPHS:
    return "GRAPHS";
  case onnx::AttributeProto::SPARSE_TENSOR:
    return "SPARSE_TENSOR";
  case onnx::AttributeProto::TYPE_PROTO:
    return "TYPE_PROTO";
  default:
    return "UNDEFINED";
  }
}

/// The attribute's type, trusting `type` and falling back to the field that
/// is set (very old files leave `type` empty).
static int attrType(const onnx::AttributeProto &a) {
  if (a.type() != onnx::AttributeProto::UNDEFINED)
    return a.type();
  if (a.has_f())
    return onnx::AttributeProto::FLOAT;
  if (a.has_i())
    return onnx::AttributeProto::INT;
  if (a.has_s())
    return onnx::AttributeProto::STRING;
  if (a.has_t())
    return onnx::AttributeProto::TENSOR;
  if (a.ints_size())
    return onnx::AttributeProto::INTS;
  if (a.floats_size())
    return onnx::AttributeProto::FLOATS;
  return onnx::AttributeProto::UNDEFINED;
}

} // namespace

FailureOr<int64_t> NodeCtx::getInt(llvm::StringRef n, std::optional<int64_t> def) const {
  const auto *a = attr(n);
  if (!a) {
    if (def)
      return *def;
    return fail("attribute '" + n + "' is required");
  }
  if (attrType(*a) != onnx::AttributeProto::INT)
    return fail("attribute '" + n + "' must be INT, got " + attrTypeName(attrType(*a)));
  return a->i();
}

FailureOr<float> NodeCtx::getFloat(llvm::StringRef n, std::optional<float> def) const {
  const auto *a = attr(n);
  if (!a) {
    if (def)
      return *def;
    return fail("attribute '" + n + "' is required");
  }
  if (attrType(*a) != onnx::AttributeProto::FLOAT)
    return fail("attribute '" + n + "' must be FLOAT, got " + attrTypeName(attrType(*a)));
  return a->f();
}

FailureOr<std::string> NodeCtx::getString(llvm::StringRef n, std::optional<std::string> def) const {
  const auto *a = attr(n);
  if (!a) {
    if (def)
      return *def;
    return fail("attribute '" + n + "' is required");
  }
  if (attrType(*a) != onnx::AttributeProto::STRING)
    return fail("attribute '" + n + "' must be STRING, got " + attrTypeName(attrType(*a)));
  return a->s();
}

FailureOr<std::optional<std::vector<int64_t>>> NodeCtx::getInts(llvm::StringRef n) const {
  const auto *a = attr(n);
  if (!a)
    return std::optional<std::vector<int64_t>>();
  if (attrType(*a) != onnx::AttributeProto::INTS &&
      !(attrType(*a) == onnx::AttributeProto::UNDEFINED && !a->ints_size()))
    return fail("attribute '" + n + "' must be INTS, got " + attrTypeName(attrType(*a)));
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

FailureOr<const HostTensor *> NodeCtx::constInput(size_t i, llvm::StringRef role) const {
  if (!hasInput(i))
    return fail("input " + llvm::Twine(i) + " ('" + role + "') is required");
  auto it = im.consts.find(node.input(i));
  if (it == im.consts.end())
    return fail("input " + llvm::Twine(i) + " ('" + role + "' = '" + node.input(i) +
                "') must be a constant (an initializer, a Constant node, or "
                "a graph input bound with --const-input); it is computed at "
                "run time");
  return &it->second;
}

FailureOr<std::vector<int64_t>> NodeCtx::constInts(size_t i, llvm::StringRef role) const {
  auto t = constInput(i, role);
  if (failed(t))
    return failure();
  int32_t dt = (*t)->dtype;
  if (dt != onnx::TensorProto::INT64 && dt != onnx::TensorProto::INT32)
    return fail("input " + llvm::Twine(i) + " ('" + role +
                "') must hold INT64 or INT32 values, got " + dataTypeName(dt));
  if ((*t)->shape.size() > 1)
    return fail("input " + llvm::Twine(i) + " ('" + role + "') must be a scalar or 1-D");
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

NamedAttribute named(NodeCtx &n, llvm::StringRef name, Attribute a) {
  return NamedAttribute(StringAttr::get(n.im.ctx, name), a);
}

Attribute i64(NodeCtx &n, int64_t v) { return n.im.b.getI64IntegerAttr(v); }

Attribute f32(NodeCtx &n, float v) { return n.im.b.getF32FloatAttr(v); }

Attribute boolean(NodeCtx &n, bool v) { return n.im.b.getBoolAttr(v); }

Attribute str(NodeCtx &n, llvm::StringRef v) { return n.im.b.getStringAttr(v); }

Attribute ints(NodeCtx &n, ArrayRef<int64_t> v) { return n.im.b.getDenseI64ArrayAttr(v); }

FailureOr<SmallVector<Value>> tensorInputs(NodeCtx &n, std::initializer_list<int> idx) {
  SmallVector<Value> out;
  for (int i : idx) {
    auto v = n.input(i);
    if (failed(v))
      return failure();
    out.push_back(*v);
  }
  return out;
}

LogicalResult simple(NodeCtx &n, llvm::StringRef opName, std::initializer_list<int> idx,
                     SmallVector<NamedAttribute> attrs) {
  auto in = tensorInputs(n, idx);
  if (failed(in))
    return failure();
  auto op = n.im.create(n, opName, *in, attrs, 1);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  return success();
}

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

std::string typeString(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

LogicalResult unary(NodeCtx &n, llvm::StringRef opName) {
  // consumed_inputs: a legacy (opset < 6) hint with no semantics.
  if (failed(n.allowAttrs({"consumed_inputs"})))
    return failure();
  return simple(n, opName, {0});
}
Handler binaryOp(llvm::StringRef opName) {
  return [opName](NodeCtx &n) { return binary(n, opName); };
}

Handler unaryOp(llvm::StringRef opName) {
  return [opName](NodeCtx &n) { return unary(n, opName); };
}

Value Elementwise::op(llvm::StringRef name, ValueRange ins, ArrayRef<NamedAttribute> attrs) {
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

Value Elementwise::cst(Type elt, double v) {
  auto t = RankedTensorType::get({}, elt);
  return arith::ConstantOp::create(n.im.b, n.loc, t,
                                   DenseElementsAttr::get(t, n.im.b.getFloatAttr(elt, v)));
}

ClassMark::ClassMark(NodeCtx &n) : n(n) {
  Block *blk = n.im.b.getInsertionBlock();
  last = blk->empty() ? nullptr : &blk->back();
}

void ClassMark::apply(llvm::StringRef cls) {
  Block *blk = n.im.b.getInsertionBlock();
  for (Operation *op = last ? last->getNextNode() : (blk->empty() ? nullptr : &blk->front()); op;
       op = op->getNextNode())
    if (op->getName().getDialectNamespace() == "amp")
      op->setAttr(attrname::kClass, n.im.b.getStringAttr(cls));
}

} // namespace onnx_import
