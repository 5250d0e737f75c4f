//===- Autocast.cpp - amp-autocast ---------------------------------------===//
//
// Puts every amp op in the precision the policy gives its class:
//
//   lower    computes in the target type (f16 / bf16), accumulating in f32;
//   fp32     computes in f32;
//   follow   computes in the target type only when every activation input
//            is already in it, else in f32;
//   promote  casts mixed inputs to the widest;
//   storage  low-precision storage, f32 compute: when every activation input
//            is in the target type, the op's activations (batch norm's x and
//            y, its gradient's x, dy and dx) stay in it while its scale,
//            bias and statistics stay f32 and it computes in f32 (PyTorch's
//            mixed-type batch norm); else as fp32.
//
// Parameters (amp.param arguments) and constants are "weak": they never
// force a type on a follow / promote op, and are cast to whatever the op
// computes in, once per (value, type), right after their definition, so an
// f32 master weight is cast exactly once however many ops read it. A
// constant holding a value the target type cannot hold (finfo(f32).min or
// -inf mask fills, 1e5 for f16, NaN) is not weak: it counts as an f32
// activation, so the ops reading it (the mask's Where, the Add of scores and
// mask) compute in f32, as PyTorch's type promotion keeps them. An op that
// reads parameters at indices computed from a graph input (an embedding
// lookup at the token ids) makes an activation, not a weak value: PyTorch's
// embedding output is an f32 tensor like any other. Casts back
// to a wider type appear only where an op or a function result needs them;
// amp-fold-casts then removes exact round trips. Integer and boolean values
// are never touched.
//
//===----------------------------------------------------------------------===//

#include "amp/Transforms/Autocast.h"
#include "amp/Transforms/AutocastOpInterface.h"
#include "amp/Transforms/Passes.h"

#include "AutocastRules.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace mlir::amp {
#define GEN_PASS_DEF_AMPAUTOCAST
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

using mlir::amp::autocast_detail::typeName;

static FloatType floatElement(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? dyn_cast<FloatType>(t.getElementType()) : FloatType();
}

/// The first element of a float constant that does not survive a cast to
/// `low` (round to nearest even): NaN, an infinity, or a finite value that
/// rounds to one. std::nullopt when every element fits.
static std::optional<double> firstUnfit(arith::ConstantOp c, FloatType low) {
  auto type = dyn_cast<RankedTensorType>(c.getType());
  if (!type || !isa<FloatType>(type.getElementType()))
    return std::nullopt;
  auto fits = [&](double v) {
    if (!std::isfinite(v))
      return false;
    APFloat a(v);
    bool lost;
    a.convert(low.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    return a.isFinite();
  };
  auto elt = cast<FloatType>(type.getElementType());
  ArrayRef<char> raw;
  if (auto dense = dyn_cast<DenseElementsAttr>(c.getValue())) {
    if (dense.isSplat()) {
      double v = dense.getSplatValue<APFloat>().convertToDouble();
      return fits(v) ? std::nullopt : std::optional<double>(v);
    }
    raw = dense.getRawData();
  } else if (auto res = dyn_cast<DenseResourceElementsAttr>(c.getValue())) {
    if (AsmResourceBlob *blob = res.getRawHandle().getBlob())
      raw = blob->getData();
  }
  unsigned bytes = elt.getWidth() / 8;
  if (raw.empty() || bytes == 0 || raw.size() % bytes)
    return std::nullopt;
  // The largest finite magnitude decides, unless a non-finite value comes
  // first; one conversion per element through APFloat would be slow on
  // folded weights.
  double worst = 0, worstValue = 0;
  for (size_t i = 0; i < raw.size(); i += bytes) {
    uint64_t word = 0; // little-endian, as the attribute's storage
    std::memcpy(&word, raw.data() + i, bytes);
    double v = APFloat(elt.getFloatSemantics(), APInt(elt.getWidth(), word)).convertToDouble();
    if (!std::isfinite(v))
      return v;
    if (std::fabs(v) > worst) {
      worst = std::fabs(v);
      worstValue = v;
    }
  }
  return fits(worstValue) ? std::nullopt : std::optional<double>(worstValue);
}

namespace {

class Autocaster {
public:
  Autocaster(func::FuncOp func, const AutocastOptions &opts, AutocastReport &report, Type low)
      : func(func), opts(opts), report(report), low(low), f32(Float32Type::get(func.getContext())),
        b(func.getContext()), f32Accumulators(opts.f32Accumulators == "on" ||
                                              (opts.f32Accumulators == "auto" && low.isBF16())) {
    for (const auto &n : opts.blockList)
      blocked.insert(n);
  }

  LogicalResult run();

private:
  struct Decision {
    PrecisionClass cls;
    Type compute; // null: untouched
    std::string reason;
    std::string accumulate;
    Value from; // the activation input that decided a follow / promote op
  };

  Decision decide(Operation *op, ArrayRef<Value> floats);
  /// Products and sums in the target type whose results only f32 reads
  /// write the f32 accumulator instead (the casts go).
  void keepAccumulators();
  Value castTo(Value v, Type elt);
  bool isWeak(Value v) const { return weak.contains(v); }
  /// An input as the report names it: input 'x', argument #3, 'node'.
  std::string describe(Value v);
  static Type widest(ArrayRef<Type> types, Type f32);

  func::FuncOp func;
  const AutocastOptions &opts;
  AutocastReport &report;
  Type low, f32;
  OpBuilder b;
  llvm::StringSet<> blocked;
  DenseMap<std::pair<Value, Type>, Value> castCache;
  DenseSet<Value> weak;
  /// Constants (and values computed from them) that the target type cannot
  /// hold, with why: "holds -3.4e+38, which bf16 cannot hold".
  DenseMap<Value, std::string> unfit;
  /// Values that depend on a graph input (token ids, masks): a weight read
  /// at such indices (an embedding lookup) is an activation, as in PyTorch.
  DenseSet<Value> dynamic;
  DenseSet<Value> castParams;
  DenseMap<Value, Type> originalType; // values whose type the pass changed
  /// Forward decisions by node name, for backward ops.
  llvm::StringMap<std::pair<PrecisionClass, Type>> byNode;
  /// Each op's entry in report.ops.
  DenseMap<Operation *, size_t> recordOf;
  /// f32-accumulators in effect: products keep their bias f32 and write
  /// their f32 accumulator where only f32 reads it.
  bool f32Accumulators;
};

/// The operand a lower-class product adds to its f32 accumulator before
/// the one rounding (Gemm's C, a convolution's bias): kept f32.
static std::optional<unsigned> epilogueOperand(Operation *op) {
  if (auto g = dyn_cast<GemmOp>(op))
    return g.getC() ? std::optional<unsigned>(2) : std::nullopt;
  if (auto c = dyn_cast<ConvOp>(op))
    return c.getBias() ? std::optional<unsigned>(2) : std::nullopt;
  if (auto c = dyn_cast<ConvTransposeOp>(op))
    return c.getBias() ? std::optional<unsigned>(2) : std::nullopt;
  return std::nullopt;
}

Type Autocaster::widest(ArrayRef<Type> types, Type f32) {
  Type w;
  for (Type t : types) {
    if (!w)
      w = t;
    else if (w != t)
      w = f32; // f16 with bf16, or either with f32: only f32 holds both
  }
  return w ? w : f32;
}

Value Autocaster::castTo(Value v, Type elt) {
  auto t = cast<RankedTensorType>(v.getType());
  if (t.getElementType() == elt)
    return v;
  auto key = std::make_pair(v, elt);
  if (Value c = castCache.lookup(key))
    return c;
  OpBuilder::InsertionGuard g(b);
  Location loc = func.getLoc();
  if (Operation *def = v.getDefiningOp()) {
    b.setInsertionPointAfter(def);
    loc = def->getLoc();
  } else {
    b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
  }
  Value c = CastOp::create(b, loc, RankedTensorType::get(t.getShape(), elt), v);
  castCache[key] = c;
  if (isWeak(v))
    weak.insert(c);
  if (auto arg = dyn_cast<BlockArgument>(v))
    if (func.getArgAttr(arg.getArgNumber(), attrname::kParam) && elt == low)
      castParams.insert(v);
  return c;
}

std::string Autocaster::describe(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (auto in = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attrname::kInput))
      return "input '" + in.getValue().str() + "'";
    return "argument #" + std::to_string(arg.getArgNumber());
  }
  std::string what = "'" + nodeNameOf(v.getDefiningOp()) + "'";
  if (auto it = unfit.find(v); it != unfit.end())
    what += " (" + it->second + ")";
  return what;
}

Autocaster::Decision Autocaster::decide(Operation *op, ArrayRef<Value> floats) {
  std::string name = nodeNameOf(op);
  llvm::StringRef opName = op->getName().getStringRef();
  std::optional<PolicyRule> rule;
  std::string why;
  if (auto node = autocast_detail::lookupNodeRule(opts, blocked, name)) {
    rule = node->rule;
    why = node->why;
  } else if (auto hint = op->getAttrOfType<StringAttr>(attrname::kClass);
             hint && parsePrecisionClass(hint.getValue())) {
    // The importer's mark on the ops it composes one ONNX node of whose
    // PyTorch counterpart autocast runs in fp32 (Resize, the norms).
    rule = PolicyRule{*parsePrecisionClass(hint.getValue()), "f32", "importer"};
    why = "node '" + name + "' (" + opName.str() + ") is part of an op imported as " +
          hint.getValue().str();
  } else if (auto fwd = op->getAttrOfType<StringAttr>(attrname::kDifferentiates)) {
    auto f = byNode.find(fwd.getValue());
    // The ops of a storage-class op's decomposed backward (a frozen batch
    // norm's adds, products and sums) take their own rules: they have no
    // statistics to keep apart.
    if (f != byNode.end() && f->second.first == PrecisionClass::Storage &&
        storageOperands(opName).empty())
      f = byNode.end();
    if (f != byNode.end()) {
      auto [cls, compute] = f->second;
      return Decision{
          cls, compute,
          "backward of '" + fwd.getValue().str() + "', which is " +
              stringifyPrecisionClass(cls).str() + " in " + typeName(compute),
          cls == PrecisionClass::Lower || (cls == PrecisionClass::Storage && compute == low) ? "f32"
                                                                                             : ""};
    }
  }
  if (!rule) {
    autocast_detail::RuleChoice c = autocast_detail::lookupOpRule(opts, opName);
    rule = c.rule;
    why = c.why;
  }

  Decision d{rule->cls, Type(), why, "", Value()};
  SmallVector<Type> strong, all;
  Value decidingInput;
  for (Value v : floats) {
    Type t = floatElement(v);
    all.push_back(t);
    if (!isWeak(v)) {
      strong.push_back(t);
      if (!decidingInput || t != low)
        decidingInput = v;
    }
  }
  switch (rule->cls) {
  case PrecisionClass::Lower:
    d.compute = low;
    d.accumulate = rule->accumulate;
    break;
  case PrecisionClass::FP32:
    d.compute = f32;
    break;
  case PrecisionClass::Follow:
    if (strong.empty()) {
      d.compute = widest(all, f32);
      d.reason += "; only parameters / constants in: keeps " + typeName(d.compute);
    } else if (llvm::all_of(strong, [&](Type t) { return t == low; })) {
      d.compute = low;
      d.reason += "; every activation input is " + typeName(low) + " (from " +
                  describe(decidingInput) + ")";
    } else {
      d.compute = f32;
      d.reason += "; input from " + describe(decidingInput) + " is " +
                  typeName(floatElement(decidingInput));
    }
    break;
  case PrecisionClass::Promote:
    d.compute = widest(strong.empty() ? all : strong, f32);
    d.reason += "; widest activation input is " + typeName(d.compute);
    break;
  case PrecisionClass::Storage:
    if (!strong.empty() && llvm::all_of(strong, [&](Type t) { return t == low; })) {
      d.compute = low;
      d.accumulate = "f32";
      d.reason += "; every activation input is " + typeName(low) + " (from " +
                  describe(decidingInput) + "): activations stay " + typeName(low) +
                  ", scale / bias / statistics and arithmetic f32";
    } else {
      d.compute = f32;
      d.reason += strong.empty() ? "; only parameters / constants in: f32"
                                 : "; input from " + describe(decidingInput) + " is " +
                                       typeName(floatElement(decidingInput)) + ": f32";
    }
    break;
  }
  if (rule->cls == PrecisionClass::Follow || rule->cls == PrecisionClass::Promote ||
      rule->cls == PrecisionClass::Storage)
    d.from = decidingInput;
  return d;
}

LogicalResult Autocaster::run() {
  Block &entry = func.getBody().front();
  // Weak values: parameters and constants (and casts / data movement of
  // them, which stay weak as the walk goes).
  for (BlockArgument arg : entry.getArguments()) {
    if (func.getArgAttr(arg.getArgNumber(), attrname::kParam))
      weak.insert(arg);
    else
      dynamic.insert(arg);
  }

  // keep-io-types=false: float graph inputs take the target type.
  if (!opts.keepIOTypes) {
    SmallVector<Type> argTypes(func.getArgumentTypes());
    for (BlockArgument arg : entry.getArguments()) {
      auto t = dyn_cast<RankedTensorType>(arg.getType());
      if (!t || !isa<FloatType>(t.getElementType()) ||
          func.getArgAttr(arg.getArgNumber(), attrname::kParam))
        continue;
      originalType[arg] = t.getElementType();
      arg.setType(RankedTensorType::get(t.getShape(), low));
      argTypes[arg.getArgNumber()] = arg.getType();
    }
    func.setFunctionType(FunctionType::get(func.getContext(), argTypes, func.getResultTypes()));
  }

  WalkResult walk = func.walk([&](Operation *op) -> WalkResult {
    bool readsDynamic =
        llvm::any_of(op->getOperands(), [&](Value v) { return dynamic.contains(v); });
    if (readsDynamic)
      for (Value r : op->getResults())
        dynamic.insert(r);
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      // Constants come before their users.
      if (auto v = firstUnfit(c, cast<FloatType>(low))) {
        char text[32];
        snprintf(text, sizeof text, "%.9g", *v);
        unfit[c.getResult()] =
            std::string("holds ") + text + ", which " + typeName(low) + " cannot hold";
      } else
        weak.insert(c.getResult());
      return WalkResult::advance();
    }
    if (!isa<AMPDialect>(op->getDialect()) || isa<CastOp>(op))
      return WalkResult::advance();
    std::string name = nodeNameOf(op);
    SmallVector<Value> floats;
    for (Value v : op->getOperands())
      if (floatElement(v))
        floats.push_back(v);
    AutocastDecision rec{name, op->getName().getStringRef().str(), "", "", "", ""};
    if (floats.empty()) {
      rec.cls = "none";
      rec.computeType = "none";
      rec.reason = "no float operands: untouched";
      report.ops.push_back(std::move(rec));
      return WalkResult::advance();
    }
    Decision d = decide(op, floats);
    rec.cls = stringifyPrecisionClass(d.cls).str();
    rec.computeType = typeName(d.compute);
    rec.reason = d.reason;
    // The storage class keeps its activation operands in the compute type
    // and the rest (scale, bias, statistics) in f32.
    ArrayRef<unsigned> stored;
    if (d.cls == PrecisionClass::Storage) {
      stored = storageOperands(op->getName().getStringRef());
      if (stored.empty())
        return op->emitOpError("autocast: ")
               << d.reason.substr(0, d.reason.find(';'))
               << ", but class 'storage' is only for ops whose activations and statistics can "
                  "be typed apart ("
               << storageOpNames() << ")";
      if (d.compute == low)
        rec.accumulate = "f32";
    }

    // Operands to the compute type; weak-only ops keep weak results, unless
    // they read a graph input's integers (a Gather of an embedding table at
    // the token ids: its rows are an activation, f32 as PyTorch has them).
    bool allWeak = true, indexedByInput = false;
    // A lower product accumulating in f32 adds an f32 bias / C to the
    // accumulator as it is (no rounding to the target type first).
    std::optional<unsigned> epilogue;
    if (f32Accumulators && d.cls == PrecisionClass::Lower && d.compute == low &&
        d.accumulate == "f32")
      epilogue = epilogueOperand(op);
    for (OpOperand &use : op->getOpOperands()) {
      if (!floatElement(use.get())) {
        indexedByInput |= dynamic.contains(use.get());
        continue;
      }
      allWeak &= isWeak(use.get());
      bool keepF32 = !stored.empty() && !llvm::is_contained(stored, use.getOperandNumber());
      if (epilogue == use.getOperandNumber() && floatElement(use.get()) == f32) {
        keepF32 = true;
        rec.reason += std::string("; ") + (isa<GemmOp>(op) ? "C" : "bias") +
                      " stays f32 (added to the f32 accumulator before the one rounding)";
      }
      use.set(castTo(use.get(), keepF32 ? f32 : d.compute));
    }
    // Results from the shape rules, on the new operand types.
    if (auto iface = dyn_cast<InferTypeOpInterface>(op)) {
      SmallVector<Type> types;
      if (failed(iface.inferReturnTypes(op->getContext(), op->getLoc(), op->getOperands(),
                                        op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                        op->getRegions(), types)))
        return op->emitOpError("autocast: cannot re-infer the result types "
                               "in ")
               << d.compute;
      for (auto [r, t] : llvm::zip(op->getResults(), types)) {
        if (r.getType() != t) {
          if (!originalType.count(r))
            originalType[r] = getElementTypeOrSelf(r.getType());
          r.setType(t);
        }
      }
    }
    if (allWeak && indexedByInput)
      rec.reason += "; it reads input-dependent indices, so its result is an activation";
    if (allWeak && !indexedByInput)
      for (Value r : op->getResults())
        weak.insert(r);
    // A value computed from an unfit constant in f32 (Where(mask, 0,
    // finfo.min), its Expand) carries the constant's note to its readers.
    if (d.from && d.compute == f32)
      if (auto it = unfit.find(d.from); it != unfit.end()) {
        std::string note = llvm::StringRef(it->second).starts_with("from ")
                               ? it->second
                               : "from " + describe(d.from);
        for (Value r : op->getResults())
          if (floatElement(r))
            unfit[r] = note;
      }
    if (d.cls == PrecisionClass::Lower &&
        isa<MatMulOp, GemmOp, ConvOp, ConvGradOp, ConvTransposeOp>(op)) {
      Type acc = d.accumulate == "f16"    ? Type(Float16Type::get(op->getContext()))
                 : d.accumulate == "bf16" ? Type(BFloat16Type::get(op->getContext()))
                                          : f32;
      if (acc != f32 && acc != d.compute)
        return op->emitOpError("autocast: accumulate type ")
               << acc << " differs from the compute type " << d.compute
               << "; only f32 or the compute type can accumulate";
      op->setAttr("accumulate", TypeAttr::get(acc));
      rec.accumulate = typeName(acc);
    }
    // One ONNX node can become several ops (MatMul + Add: reshape, gemm,
    // reshape); its backward takes the decision of the op that made it a
    // product or fp32, not of the data movement around it.
    auto [it, fresh] = byNode.try_emplace(name, d.cls, d.compute);
    bool moves = d.cls == PrecisionClass::Follow || d.cls == PrecisionClass::Promote;
    bool kept =
        it->second.first != PrecisionClass::Follow && it->second.first != PrecisionClass::Promote;
    if (!fresh && !(moves && kept))
      it->second = {d.cls, d.compute};
    recordOf[op] = report.ops.size();
    report.ops.push_back(std::move(rec));
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();

  // Users outside the dialect (return, scf, arith) get the types they had.
  // Casts read any type (a cast from the new type to its own target is the
  // same value), and the ones this pass made are already right.
  auto returnOp = cast<func::ReturnOp>(entry.getTerminator());
  SmallVector<std::pair<OpOperand *, Type>> fixes;
  for (auto [v, orig] : originalType) {
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (isa<AMPDialect>(user->getDialect()))
        continue;
      if (user == returnOp.getOperation() && !opts.keepIOTypes)
        continue;
      fixes.push_back({&use, orig});
    }
  }
  for (auto [use, orig] : fixes)
    use->set(castTo(use->get(), orig));

  // Results: declared types, or the target type when io types are not kept.
  SmallVector<Type> resultTypes(func.getResultTypes());
  for (OpOperand &use : returnOp->getOpOperands()) {
    unsigned i = use.getOperandNumber();
    Type want = getElementTypeOrSelf(resultTypes[i]);
    if (!opts.keepIOTypes && isa<FloatType>(want) && !func.getResultAttr(i, attrname::kGrad))
      want = low;
    if (isa<FloatType>(want) && floatElement(use.get()))
      use.set(castTo(use.get(), want));
    resultTypes[i] = use.get().getType();
  }
  func.setFunctionType(FunctionType::get(func.getContext(), func.getArgumentTypes(), resultTypes));
  report.paramsCast += castParams.size();
  if (f32Accumulators)
    keepAccumulators();
  return success();
}

void Autocaster::keepAccumulators() {
  // The ops that sum in f32 whatever their operand type: the products (with
  // accumulate = f32) and their gradients, and sums.
  auto accumulates = [&](Operation *op) {
    if (isa<ReduceSumOp>(op))
      return true;
    if (!isa<MatMulOp, GemmOp, ConvOp, ConvTransposeOp, ConvGradOp>(op))
      return false;
    auto acc = op->getAttrOfType<TypeAttr>("accumulate");
    return acc && acc.getValue().isF32();
  };
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (accumulates(op))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    if (!llvm::all_of(op->getOperands(), [&](Value v) {
          FloatType t = floatElement(v);
          return !t || t == low || t == f32;
        }))
      continue;
    for (OpResult r : op->getResults()) {
      if (floatElement(r) != low)
        continue;
      // The result, through reshapes with one user each, read only by
      // casts to f32.
      SmallVector<Value> chain{r};
      while (chain.back().hasOneUse() && isa<ReshapeOp>(*chain.back().getUsers().begin()))
        chain.push_back(chain.back().getUsers().begin()->getResult(0));
      Value last = chain.back();
      if (last.use_empty() || !llvm::all_of(last.getUsers(), [&](Operation *u) {
            auto c = dyn_cast<CastOp>(u);
            return c && floatElement(c.getOutput()) == f32;
          }))
        continue;
      for (Value v : chain) {
        auto t = cast<RankedTensorType>(v.getType());
        v.setType(RankedTensorType::get(t.getShape(), f32));
      }
      for (Operation *u : llvm::make_early_inc_range(last.getUsers())) {
        u->getResult(0).replaceAllUsesWith(last);
        u->erase();
      }
      if (auto rec = recordOf.find(op); rec != recordOf.end()) {
        AutocastDecision &d = report.ops[rec->second];
        d.reason += "; result";
        if (op->getNumResults() > 1)
          d.reason += " #" + std::to_string(r.getResultNumber());
        d.reason += " f32: only f32 reads it, so the f32 accumulator is written unrounded";
      }
    }
  }
}

} // namespace

static unsigned countCasts(Operation *root) {
  unsigned n = 0;
  root->walk([&](CastOp) { ++n; });
  return n;
}

/// Whether `op` is an upstream op autocast would classify (an interface,
/// float tensors): a function with one of these and amp ops is refused.
static bool isModelledUpstreamOp(Operation *op) {
  if (isa<AMPDialect>(op->getDialect()) || !isa<AutocastOpInterface>(op) ||
      op->hasTrait<OpTrait::ConstantLike>())
    return false;
  auto isFloatTensor = [](Type t) {
    auto r = dyn_cast<RankedTensorType>(t);
    return r && isa<FloatType>(r.getElementType());
  };
  return llvm::any_of(op->getOperandTypes(), isFloatTensor) ||
         llvm::any_of(op->getResultTypes(), isFloatTensor);
}

LogicalResult mlir::amp::runAutocast(FunctionOpInterface func, const AutocastOptions &opts,
                                     AutocastReport &report) {
  MLIRContext *ctx = func.getContext();
  Type low;
  if (opts.target == "f16")
    low = Float16Type::get(ctx);
  else if (opts.target == "bf16")
    low = BFloat16Type::get(ctx);
  else
    return func.emitError("amp-autocast: target must be f16 or bf16, got '") << opts.target << "'";
  if (opts.f32Accumulators != "auto" && opts.f32Accumulators != "on" &&
      opts.f32Accumulators != "off")
    return func.emitError("amp-autocast: f32-accumulators must be auto, on or off, got '")
           << opts.f32Accumulators << "'";
  if (func.isExternal())
    return success();
  report.target = opts.target;
  Operation *ampOp = nullptr, *upstreamOp = nullptr;
  func->walk([&](Operation *op) {
    if (!ampOp && isa<AMPDialect>(op->getDialect()))
      ampOp = op;
    else if (!upstreamOp && isModelledUpstreamOp(op))
      upstreamOp = op;
  });
  if (ampOp && upstreamOp)
    return func.emitError("amp-autocast: function mixes amp ops ('")
           << ampOp->getName() << "') with upstream ops on float tensors ('"
           << upstreamOp->getName()
           << "'); autocast the amp program before lowering it, or the lowered one";
  // A func.func with neither (a helper, an empty body) stays an amp
  // function: keep-io-types=false still retypes its float arguments.
  auto ampFunc = dyn_cast<func::FuncOp>(func.getOperation());
  if (upstreamOp || !ampFunc)
    return autocast_detail::runUpstreamAutocast(func, opts, report, low);
  report.castsBefore += countCasts(func);
  Autocaster a(ampFunc, opts, report, low);
  if (failed(a.run()))
    return failure();
  foldAndMergeCasts(ampFunc);
  report.castsAfter += countCasts(func);
  return success();
}

llvm::json::Value AutocastReport::toJSON() const {
  llvm::json::Array list;
  std::map<std::string, int64_t> byType;
  for (const auto &d : ops) {
    llvm::json::Object o{{"node", d.node},
                         {"op", d.op},
                         {"class", d.cls},
                         {"compute_type", d.computeType},
                         {"reason", d.reason}};
    if (!d.accumulate.empty())
      o["accumulate"] = d.accumulate;
    list.push_back(std::move(o));
    ++byType[d.computeType];
  }
  llvm::json::Object perType;
  for (auto &[t, n] : byType)
    perType[t] = n;
  return llvm::json::Object{
      {"target", target},
      {"ops", std::move(list)},
      {"summary",
       llvm::json::Object{{"ops", (int64_t)ops.size()},
                          {"ops_by_compute_type", std::move(perType)},
                          {"casts_before", castsBefore},
                          {"casts_after", castsAfter},
                          {"casts_inserted", (int64_t)castsAfter - (int64_t)castsBefore > 0
                                                 ? (int64_t)castsAfter - (int64_t)castsBefore
                                                 : 0},
                          {"params_cast_to_target", paramsCast}}}};
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

namespace {
struct AMPAutocastPass : public amp::impl::AMPAutocastBase<AMPAutocastPass> {
  using AMPAutocastBase::AMPAutocastBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    AutocastOptions opts;
    opts.target = target;
    opts.keepIOTypes = keepIOTypes;
    opts.f32Accumulators = f32Accumulators;
    opts.blockList.assign(blockList.begin(), blockList.end());
    if (!policy.empty()) {
      auto p = Policy::load(policy, Policy::getDefault(), &getContext(),
                            [&] { return module.emitError(); });
      if (failed(p))
        return signalPassFailure();
      opts.policy = std::move(*p);
    }
    AutocastReport rep;
    std::vector<FunctionOpInterface> funcs(module.getOps<FunctionOpInterface>().begin(),
                                           module.getOps<FunctionOpInterface>().end());
    for (FunctionOpInterface f : funcs)
      if (failed(runAutocast(f, opts, rep)))
        return signalPassFailure();
    // Every op is in the report under its node name.
    llvm::StringSet<> seen;
    if (!opts.blockList.empty() || !opts.policy.nodes.empty())
      for (const auto &d : rep.ops)
        seen.insert(d.node);
    // Names that match nothing are mistakes, not no-ops.
    for (const auto &n : opts.blockList)
      if (!seen.contains(n)) {
        module.emitError("amp-autocast: block-list names node '")
            << n << "', but no op has that name";
        return signalPassFailure();
      }
    if (!policy.empty())
      for (const auto &kv : opts.policy.nodes)
        if (!seen.contains(kv.first())) {
          module.emitError("amp-autocast: ")
              << kv.second.source << " names node '" << kv.first() << "', but no op has that name";
          return signalPassFailure();
        }
    if (!why.empty()) {
      bool found = false;
      for (const auto &d : rep.ops)
        if (d.node == why) {
          found = true;
          module.emitRemark("amp-autocast: node '")
              << d.node << "' (" << d.op << "): " << d.cls << " -> " << d.computeType
              << (d.accumulate.empty() ? "" : ", accumulate " + d.accumulate) << ": " << d.reason;
        }
      if (!found) {
        module.emitError("amp-autocast: why=") << why << ": no op has that name";
        return signalPassFailure();
      }
    }
    if (!report.empty()) {
      // Written to a temporary file and renamed: never half a report.
      if (llvm::Error e = llvm::writeToOutput(report, [&](llvm::raw_ostream &out) {
            out << llvm::formatv("{0:2}", rep.toJSON()) << "\n";
            return llvm::Error::success();
          })) {
        module.emitError("amp-autocast: cannot write report '")
            << report << "': " << llvm::toString(std::move(e));
        return signalPassFailure();
      }
    }
    if (!dot.empty()) {
      if (funcs.empty())
        return;
      if (failed(writePrecisionGraph(funcs.front(), dot)))
        return signalPassFailure();
    }
  }
};
} // namespace
