//===- Importer.cpp - ONNX model -> amp dialect: the graph walk -----------===//
//
// Graph inputs become arguments (`amp.input`), float initializers become
// parameters (`amp.param`, initial value in `amp.init`), graph outputs become
// results (`amp.output`). Every node maps to amp ops through the handler
// registered for its op and opset (OpRegistry; one Ops*.cpp file per family);
// result types come from the amp ops' shape rules, and value_info, where
// present, is checked against them. Shape-like inputs (Reshape's shape,
// Slice's bounds, reduction axes, ...) must be constants; small constant
// subgraphs on shapes (Shape, Gather, Concat, ...) are folded
// (ShapeFolding.cpp).
//
// Errors are collected, not thrown: every unsupported node, every bad tensor
// and every rule a node breaks is reported, each naming the file and the
// node, and nothing is returned.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <queue>

namespace onnx_import {

//===----------------------------------------------------------------------===//
// The op registry
//===----------------------------------------------------------------------===//

void OpRegistry::on(llvm::StringRef name, int sinceOpset, Handler handle,
                    std::vector<int> attributeInputs) {
  auto &vs = ops[name.str()];
  auto at =
      llvm::lower_bound(vs, sinceOpset, [](const OpInfo &o, int v) { return o.sinceOpset < v; });
  if (at != vs.end() && at->sinceOpset == sinceOpset)
    llvm::report_fatal_error("the ONNX importer registers " + name + " twice for opset " +
                             llvm::Twine(sinceOpset));
  vs.insert(at, OpInfo{sinceOpset, std::move(handle), std::move(attributeInputs)});
}

const std::vector<OpInfo> *OpRegistry::versions(llvm::StringRef name) const {
  auto it = ops.find(name.str());
  return it == ops.end() ? nullptr : &it->second;
}

const OpInfo *OpRegistry::lookup(llvm::StringRef name, int64_t opset) const {
  const std::vector<OpInfo> *vs = versions(name);
  if (!vs)
    return nullptr;
  const OpInfo *best = nullptr;
  for (const OpInfo &o : *vs)
    if (o.sinceOpset <= opset)
      best = &o;
  return best;
}

const OpRegistry &opRegistry() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    registerElementwiseOps(r);
    registerMatMulOps(r);
    registerConvPoolOps(r);
    registerNormalizationOps(r);
    registerReductionOps(r);
    registerShapeOps(r);
    registerSequenceOps(r);
    registerIndexingOps(r);
    registerResizeOps(r);
    registerConstantOps(r);
    registerRandomOps(r);
    registerLossOps(r);
    registerRecurrentOps(r);
    registerSignalOps(r);
    registerPreviewTrainingOps(r);
    registerMicrosoftOps(r);
    return r;
  }();
  return registry;
}

//===----------------------------------------------------------------------===//
// Importer
//===----------------------------------------------------------------------===//

FailureOr<Type> Importer::elementType(int32_t dtype, const llvm::Twine &what) {
  switch (dtype) {
  case onnx::TensorProto::FLOAT:
    return b.getF32Type();
  case onnx::TensorProto::FLOAT16:
    return b.getF16Type();
  case onnx::TensorProto::BFLOAT16:
    return b.getBF16Type();
  case onnx::TensorProto::BOOL:
    return b.getI1Type();
  case onnx::TensorProto::INT8:
    return b.getIntegerType(8);
  case onnx::TensorProto::INT16:
    return b.getIntegerType(16);
  case onnx::TensorProto::INT32:
    return b.getIntegerType(32);
  case onnx::TensorProto::INT64:
    return b.getIntegerType(64);
  case onnx::TensorProto::UINT8:
    return b.getIntegerType(8, false);
  case onnx::TensorProto::UINT16:
    return b.getIntegerType(16, false);
  case onnx::TensorProto::UINT32:
    return b.getIntegerType(32, false);
  case onnx::TensorProto::UINT64:
    return b.getIntegerType(64, false);
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

FailureOr<RankedTensorType> Importer::valueInfoType(const onnx::ValueInfoProto &vi,
                                                    const llvm::Twine &what,
                                                    SmallVectorImpl<std::string> *dimNames) {
  if (!vi.has_type() || !vi.type().has_tensor_type()) {
    errorAt(what + " '" + vi.name() +
            "' is not a tensor (sequences, maps and optionals are not supported as graph inputs or "
            "outputs) or has no type");
    return failure();
  }
  const auto &tt = vi.type().tensor_type();
  auto elt = elementType(tt.elem_type(), what + " '" + vi.name() + "'");
  if (failed(elt))
    return failure();
  if (!tt.has_shape()) {
    errorAt(what + " '" + vi.name() + "' has no shape; the importer needs at least its rank");
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
        raw, align, [keep](void *, size_t, size_t) mutable { keep.reset(); },
        /*dataIsMutable=*/false);
  } else {
    blob = HeapAsmResourceBlob::allocateAndCopyWithAlign(raw, align);
  }
  std::string key = name.empty() ? "constant" : name.str();
  return DenseResourceElementsAttr::get(type, key, std::move(blob));
}

FailureOr<Value> Importer::materialize(const HostTensor &t, llvm::StringRef name, Location loc) {
  auto elt = elementType(t.dtype, "constant '" + name + "'");
  if (failed(elt))
    return failure();
  auto type = RankedTensorType::get(t.shape, *elt);
  auto attr = elementsAttr(t, type, name);
  return arith::ConstantOp::create(b, loc, type, cast<TypedAttr>(attr)).getResult();
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

FailureOr<Operation *> Importer::create(NodeCtx &n, llvm::StringRef opName, ValueRange operands,
                                        ArrayRef<NamedAttribute> attrs, unsigned numResults) {
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
      errorAt("the model imports domain '" + (d.empty() ? std::string("ai.onnx") : d) +
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
      errorAt("the name '" + name + "' is defined twice: by " + it->second + " and by " + what);
  };
  for (auto &init : *g.mutable_initializer()) {
    if (init.name().empty()) {
      errorAt("an initializer has no name");
      continue;
    }
    if (initializers.count(init.name()))
      errorAt("the name '" + init.name() +
              "' is defined twice: by two "
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
    nodeNames[i] = !node.name().empty() ? node.name()
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
    if (!buf || !tp.ParseFromArray((*buf)->getBufferStart(), (int)(*buf)->getBufferSize())) {
      errorAt("--const-input " + name + "=" + file + ": not a readable TensorProto file");
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
      errorAt("frozen parameter '" + f +
              "' is not an initializer of the "
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
          errorAt("node '" + nodeNames[i] + "' (" + g.node(i).op_type() + ") reads '" + in +
                  "', which no node, input or "
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
      errorAt("graph output '" + out.name() +
              "' is not produced by any "
              "node, input or initializer");

  // Every op must be known: report all unsupported nodes at once.
  const OpRegistry &registry = opRegistry();
  auto keyOf = [](const onnx::NodeProto &node) {
    std::string domain = node.domain() == "ai.onnx" ? std::string() : node.domain();
    return domain.empty() ? node.op_type() : domain + "." + node.op_type();
  };
  for (int i : order) {
    const auto &node = g.node(i);
    std::string domain = node.domain() == "ai.onnx" ? std::string() : node.domain();
    std::string shownDomain = domain.empty() ? "ai.onnx" : domain;
    auto os = opsets.find(domain);
    Location loc = NameLoc::get(b.getStringAttr(nodeNames[i]), moduleLoc);
    if (os == opsets.end()) {
      error(loc, "node '" + nodeNames[i] + "' (" + node.op_type() + ", domain " + shownDomain +
                     "): the model imports no "
                     "opset for domain " +
                     shownDomain);
      continue;
    }
    std::string desc = "node '" + nodeNames[i] + "' (" + node.op_type() + ", domain " +
                       shownDomain + ", opset " + std::to_string(os->second) + ")";
    const std::vector<OpInfo> *versions = registry.versions(keyOf(node));
    if (!versions) {
      error(loc, desc + ": unsupported op " + shownDomain + "." + node.op_type());
      continue;
    }
    if (os->second < versions->front().sinceOpset)
      error(loc, desc + ": unsupported op version: " + node.op_type() +
                     " is supported from opset " + llvm::Twine(versions->front().sinceOpset));
  }
  if (!errors.empty())
    return nullptr;

  // Which initializers are parameters: float ones read as tensors.
  llvm::StringSet<> readAsTensor;
  for (const auto &node : g.node()) {
    std::string domain = node.domain() == "ai.onnx" ? std::string() : node.domain();
    const OpInfo *info = registry.lookup(keyOf(node), opsets.lookup(domain));
    const std::vector<int> *attrIn = info ? &info->attributeInputs : nullptr;
    for (int k = 0; k < node.input_size(); ++k)
      if (!attrIn || std::find(attrIn->begin(), attrIn->end(), k) == attrIn->end())
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
        {b.getNamedAttr(isFloatType(t.dtype) ? attrname::kParam : attrname::kOptState,
                        b.getStringAttr(name)),
         b.getNamedAttr(attrname::kInit, elementsAttr(t, type, name))}));
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
        b.getNamedAttr(attrname::kInput, b.getStringAttr(in->name()))};
    if (llvm::any_of(dimNames, [](const std::string &s) { return !s.empty(); })) {
      SmallVector<Attribute> names;
      for (const auto &s : dimNames)
        names.push_back(b.getStringAttr(s));
      attrs.push_back(b.getNamedAttr(attrname::kDimNames, b.getArrayAttr(names)));
    }
    argTypes.push_back(*type);
    argAttrs.push_back(b.getDictionaryAttr(attrs));
    argNames.push_back(in->name());
  }
  if (!errors.empty())
    return nullptr;

  auto func = func::FuncOp::create(b, moduleLoc, opts.funcName, b.getFunctionType(argTypes, {}));
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
    std::string domain = node.domain() == "ai.onnx" ? std::string() : node.domain();
    NodeCtx n{*this,          node,
              nodeNames[i],   domain.empty() ? "ai.onnx" : domain,
              opsets[domain], NameLoc::get(b.getStringAttr(nodeNames[i]), moduleLoc)};
    bool blocked = false;
    for (const auto &in : node.input())
      blocked |= !in.empty() && poisoned.count(in);
    if (blocked) {
      for (const auto &o : node.output())
        poisoned.insert(o);
      continue;
    }
    current = &n;
    const OpInfo &info = *registry.lookup(keyOf(node), n.opset);
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
          !consts.count(node.output(k)) && !sequences.count(node.output(k)) && !n.skipped.count(k))
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
      if (o.empty() || v == values.end() || d == declared.end() || !d->second->has_type() ||
          !d->second->type().has_tensor_type())
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
          mismatch =
              dim.has_dim_value() && !got.isDynamicDim(k) && dim.dim_value() != got.getDimSize(k);
        }
      }
      if (mismatch) {
        std::string s;
        llvm::raw_string_ostream os(s);
        os << got;
        (void)n.fail("output '" + o +
                     "' is declared (value_info) with a "
                     "type or shape that contradicts the op's rule, which "
                     "gives " +
                     s);
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
    resAttrs.push_back(
        b.getDictionaryAttr({b.getNamedAttr(attrname::kOutput, b.getStringAttr(out.name()))}));
  }
  if (!errors.empty())
    return nullptr;
  func::ReturnOp::create(b, moduleLoc, results);
  func.setFunctionType(b.getFunctionType(argTypes, ValueRange(results).getTypes()));
  for (unsigned i = 0; i < resAttrs.size(); ++i)
    func.setResultAttrs(i, resAttrs[i]);
  recompose(func, opts);
  if (model.has_producer_name())
    (*module)->setAttr(attrname::kProducer,
                       b.getStringAttr(model.producer_name() + " " + model.producer_version()));
  if (failed(verify(*module))) {
    errorAt("the imported module does not verify (an importer bug; the "
            "messages above say where)");
    return nullptr;
  }
  return module;
}

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

} // namespace onnx_import

using namespace onnx_import;

OwningOpRef<ModuleOp> mlir::amp::importONNXFile(llvm::StringRef path, MLIRContext *ctx,
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

OwningOpRef<ModuleOp> mlir::amp::importONNXBuffer(llvm::MemoryBufferRef buf, MLIRContext *ctx,
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

FailureOr<ONNXTensorFile> mlir::amp::readTensorProtoFile(llvm::StringRef path, MLIRContext *ctx) {
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
  case onnx::TensorProto::FLOAT:
    out.elementType = b.getF32Type();
    break;
  case onnx::TensorProto::FLOAT16:
    out.elementType = b.getF16Type();
    break;
  case onnx::TensorProto::BFLOAT16:
    out.elementType = b.getBF16Type();
    break;
  case onnx::TensorProto::BOOL:
    out.elementType = b.getI1Type();
    break;
  case onnx::TensorProto::INT8:
    out.elementType = b.getIntegerType(8);
    break;
  case onnx::TensorProto::INT16:
    out.elementType = b.getIntegerType(16);
    break;
  case onnx::TensorProto::INT32:
    out.elementType = b.getIntegerType(32);
    break;
  case onnx::TensorProto::INT64:
    out.elementType = b.getIntegerType(64);
    break;
  case onnx::TensorProto::UINT8:
    out.elementType = b.getIntegerType(8, false);
    break;
  case onnx::TensorProto::UINT16:
    out.elementType = b.getIntegerType(16, false);
    break;
  case onnx::TensorProto::UINT32:
    out.elementType = b.getIntegerType(32, false);
    break;
  case onnx::TensorProto::UINT64:
    out.elementType = b.getIntegerType(64, false);
    break;
  default:
    break;
  }
  return out;
}

void mlir::amp::registerONNXImportDialects(DialectRegistry &registry) {
  registry.insert<AMPDialect, arith::ArithDialect, func::FuncDialect>();
}

std::vector<std::pair<std::string, int>> mlir::amp::supportedONNXOps() {
  std::vector<std::pair<std::string, int>> out;
  for (const auto &[name, versions] : opRegistry().all())
    out.emplace_back(name, versions.front().sinceOpset);
  return out;
}
