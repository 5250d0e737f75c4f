//===- Autodiff.cpp - amp-autodiff ---------------------------------------===//
//
// Reverse-mode differentiation over the single block of a function: the
// loss is seeded with 1, ops are visited in reverse, each one builds the
// gradients of its operands from those of its results (GradientOpInterface),
// and the gradients of a value used several times are added up.
//
//===----------------------------------------------------------------------===//

#include "amp/Transforms/Passes.h"

#include "amp/Dialect/AMP/IR/AMPOps.h"
#include "amp/Transforms/Autocast.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::amp {
#define GEN_PASS_DEF_AMPADDLOSS
#define GEN_PASS_DEF_AMPOPTIMIZER
#define GEN_PASS_DEF_AMPAUTODIFF
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

FailureOr<SmallVector<Value>> mlir::amp::gradientsOf(OpBuilder &b, Value y, ArrayRef<Value> xs,
                                                     StringRef what) {
  Block *block = b.getInsertionBlock();
  auto yt = dyn_cast<RankedTensorType>(y.getType());
  if (!yt || !yt.hasStaticShape() || !isa<FloatType>(yt.getElementType()))
    return emitError(y.getLoc()) << "amp-autodiff: " << what
                                 << " must be a statically shaped float tensor, it is "
                                 << y.getType();
  // The ops before the insertion point, in order; values that depend on xs
  // (the only ones needing gradients).
  SmallVector<Operation *> forward;
  for (auto it = block->begin(); it != b.getInsertionPoint(); ++it)
    forward.push_back(&*it);
  DenseSet<Value> needs(xs.begin(), xs.end());
  for (Operation *op : forward)
    if (llvm::any_of(op->getOperands(), [&](Value v) { return needs.contains(v); }))
      for (Value r : op->getResults())
        needs.insert(r);
  if (!needs.contains(y))
    return emitError(y.getLoc()) << "amp-autodiff: " << what
                                 << " does not depend on any "
                                    "parameter";

  DenseMap<Value, Value> grads;
  // A value read whole by gathers of single constant indices along one axis
  // (a stacked q / k / v split as qkv[0], qkv[1], qkv[2]) gets one
  // gather_grad per read, each as large as the value and zero outside its
  // slab, and then their sum: several passes over the whole value. Such
  // contributions wait here until they cover the axis once each; then the
  // gradient is the concatenation of their dy's in index order (every
  // element one dy's, as the sum of zeros and that dy gives it), added to
  // the other contributions like one of them. Those that never complete a
  // cover are added when the value's gradient is read (pendingInto).
  struct Pending {
    GatherGradOp op;
    int64_t index;
    Location loc;
    std::string node;
  };
  DenseMap<Value, SmallVector<Pending>> pending;
  auto add = [&](Value v, Value g, Location loc, StringRef node) -> LogicalResult {
    auto it = grads.find(v);
    if (it == grads.end()) {
      grads[v] = g;
      return success();
    }
    Operation *sum =
        createWithInferredTypes(b, loc, AddOp::getOperationName(), {it->second, g}, {}, 1);
    if (!sum)
      return failure();
    sum->setAttr(attrname::kDifferentiates, b.getStringAttr(node));
    it->second = sum->getResult(0);
    return success();
  };
  // The slab index of a gather_grad of one constant index (a scalar, or
  // one element with dy keeping the axis), or -1.
  auto slabOf = [](GatherGradOp gg) -> int64_t {
    DenseIntElementsAttr idx;
    auto shape = gg.getShape();
    int64_t axis = (int64_t)gg.getAxis();
    if (axis < 0 || axis >= (int64_t)shape.size() ||
        !matchPattern(gg.getIndices(), m_Constant(&idx)) || idx.getNumElements() != 1 ||
        cast<ShapedType>(idx.getType()).getRank() > 1)
      return -1;
    int64_t i = (*idx.getValues<APInt>().begin()).getSExtValue();
    i = i < 0 ? i + shape[axis] : i;
    return i >= 0 && i < shape[axis] ? i : -1;
  };
  auto accumulate = [&](Value v, Value g, Location loc, StringRef node) -> LogicalResult {
    auto gg = g.getDefiningOp<GatherGradOp>();
    int64_t slab = gg && g.use_empty() ? slabOf(gg) : -1;
    if (slab < 0)
      return add(v, g, loc, node);
    SmallVector<Pending> &ps = pending[v];
    ps.push_back({gg, slab, loc, node.str()});
    // A cover: the gathers of the same axis, shape and dy type as this one,
    // one per slab.
    int64_t axis = (int64_t)gg.getAxis(), n = gg.getShape()[axis];
    SmallVector<int> at(n, -1);
    for (auto [k, q] : llvm::enumerate(ps))
      if ((int64_t)q.op.getAxis() == axis && q.op.getShape() == gg.getShape() &&
          q.op.getDy().getType() == gg.getDy().getType() && at[q.index] < 0)
        at[q.index] = (int)k;
    if (llvm::is_contained(at, -1))
      return success();
    SmallVector<Value> slabs;
    auto dyType = cast<RankedTensorType>(g.getType());
    SmallVector<int64_t> one(dyType.getShape());
    one[axis] = 1;
    for (int k : at) {
      Value dy = ps[k].op.getDy();
      if (cast<RankedTensorType>(dy.getType()).getShape() != ArrayRef<int64_t>(one)) {
        Operation *r =
            createWithInferredTypes(b, loc, ReshapeOp::getOperationName(), {dy},
                                    {b.getNamedAttr("shape", b.getDenseI64ArrayAttr(one))}, 1);
        if (!r)
          return failure();
        r->setAttr(attrname::kDifferentiates, b.getStringAttr(ps[k].node));
        dy = r->getResult(0);
      }
      slabs.push_back(dy);
    }
    Operation *cat =
        createWithInferredTypes(b, loc, ConcatOp::getOperationName(), slabs,
                                {b.getNamedAttr("axis", b.getI64IntegerAttr(axis))}, 1);
    if (!cat)
      return failure();
    cat->setAttr(attrname::kDifferentiates, b.getStringAttr(node));
    SmallVector<Pending> rest;
    for (auto [k, q] : llvm::enumerate(ps))
      if (!llvm::is_contained(at, (int)k))
        rest.push_back(q);
      else
        q.op->erase();
    ps = std::move(rest);
    return add(v, cat->getResult(0), loc, node);
  };
  // The contributions still waiting for v, added in their order.
  auto pendingInto = [&](Value v) -> LogicalResult {
    auto it = pending.find(v);
    if (it == pending.end())
      return success();
    SmallVector<Pending> ps = std::move(it->second);
    pending.erase(it);
    for (Pending &q : ps)
      if (failed(add(v, q.op.getResult(), q.loc, q.node)))
        return failure();
    return success();
  };
  // The seed: ones (for a non-scalar y, the gradient of the sum of y).
  // Marked: amp-loss-scaling replaces it with the loss scale.
  auto seed = arith::ConstantOp::create(
      b, y.getLoc(), yt, DenseElementsAttr::get(yt, b.getFloatAttr(yt.getElementType(), 1.0)));
  seed->setAttr(attrname::kLossSeed, b.getUnitAttr());
  grads[y] = seed;

  for (Operation *op : llvm::reverse(forward)) {
    SmallVector<Value> rg;
    bool any = false;
    for (Value r : op->getResults()) {
      if (failed(pendingInto(r)))
        return failure();
      auto it = grads.find(r);
      rg.push_back(it == grads.end() ? Value() : it->second);
      any |= rg.back() != nullptr;
    }
    if (!any)
      continue;
    bool operandsNeed = llvm::any_of(op->getOperands(), [&](Value v) { return needs.contains(v); });
    if (!operandsNeed)
      continue;
    auto iface = dyn_cast<GradientOpInterface>(op);
    if (!iface)
      return op->emitOpError("has no gradient rule, and it lies between the parameters and "
                             "the loss");
    // Backward ops are named after their forward node and marked for
    // amp-autocast.
    std::string node = nodeNameOf(op);
    Operation *last =
        b.getInsertionPoint() == block->begin() ? nullptr : &*std::prev(b.getInsertionPoint());
    SmallVector<Value> og;
    if (failed(iface.buildGradients(b, rg, og)))
      return failure();
    Location gradLoc = NameLoc::get(b.getStringAttr(node + "/grad"), op->getLoc());
    for (auto it = last ? std::next(last->getIterator()) : block->begin();
         it != b.getInsertionPoint(); ++it) {
      it->setLoc(gradLoc);
      if (isa<AMPDialect>(it->getDialect()))
        it->setAttr(attrname::kDifferentiates, b.getStringAttr(node));
    }
    if (og.size() != op->getNumOperands())
      return op->emitOpError("gradient rule returned ")
             << og.size() << " gradients for " << op->getNumOperands() << " operands";
    for (auto [v, g] : llvm::zip(op->getOperands(), og))
      if (g && needs.contains(v) && failed(accumulate(v, g, gradLoc, node)))
        return failure();
  }
  // An x the output does not reach gets zeros.
  SmallVector<Value> out;
  for (Value x : xs) {
    if (failed(pendingInto(x)))
      return failure();
    Value g = grads.lookup(x);
    if (!g) {
      auto t = cast<RankedTensorType>(x.getType());
      g = arith::ConstantOp::create(b, x.getLoc(), t,
                                    DenseElementsAttr::get(t, b.getZeroAttr(t.getElementType())));
    }
    out.push_back(g);
  }
  return out;
}

SmallVector<DictionaryAttr> mlir::amp::resultAttrDicts(func::FuncOp f) {
  SmallVector<DictionaryAttr> attrs;
  for (unsigned i = 0; i < f.getNumResults(); ++i)
    attrs.push_back(f.getResultAttrDict(i) ? f.getResultAttrDict(i)
                                           : DictionaryAttr::get(f.getContext()));
  return attrs;
}

void mlir::amp::setFunctionResults(func::FuncOp f, ValueRange results,
                                   ArrayRef<DictionaryAttr> attrs) {
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  ret->setOperands(results);
  f.setFunctionType(
      FunctionType::get(f.getContext(), f.getArgumentTypes(), TypeRange(results.getTypes())));
  f.setAllResultAttrs(attrs);
}

LogicalResult mlir::amp::differentiate(func::FuncOp f, StringRef lossName,
                                       ArrayRef<std::string> frozen,
                                       ArrayRef<std::string> paddingRows) {
  if (f.isExternal())
    return success();
  if (!f.getBody().hasOneBlock())
    return f.emitError("amp-autodiff: '") << f.getSymName() << "' has control flow";
  Block &block = f.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());

  // The loss.
  int lossIndex = -1;
  for (unsigned i = 0; i < f.getNumResults(); ++i)
    if (auto n = f.getResultAttrOfType<StringAttr>(i, attrname::kOutput);
        n && n.getValue() == lossName)
      lossIndex = i;
  if (lossIndex < 0)
    return f.emitError("amp-autodiff: '") << f.getSymName() << "' has no result named '" << lossName
                                          << "' (name the loss with loss=<output name>)";
  Value loss = ret.getOperand(lossIndex);
  auto lt = dyn_cast<RankedTensorType>(loss.getType());
  if (!lt || !lt.hasStaticShape() || lt.getNumElements() != 1 ||
      !isa<FloatType>(lt.getElementType()))
    return f.emitError("amp-autodiff: the loss '")
           << lossName << "' must be a float scalar, it is " << loss.getType();

  // Parameters to differentiate.
  llvm::StringMap<BlockArgument> params;
  for (BlockArgument a : f.getArguments())
    if (auto p = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), attrname::kParam))
      params[p.getValue()] = a;
  for (const std::string &name : frozen)
    if (!params.count(name))
      return f.emitError("amp-autodiff: frozen parameter '")
             << name << "' is not a parameter of '" << f.getSymName() << "'";
  // Batch norm statistics are buffers, not trained (PyTorch's running_mean
  // / running_var): a parameter used only as one gets no gradient.
  auto isBuffer = [](BlockArgument a) {
    return !a.use_empty() && llvm::all_of(a.getUses(), [](OpOperand &u) {
      return isa<BatchNormOp>(u.getOwner()) && u.getOperandNumber() >= 3;
    });
  };
  // Padding rows: name -> rows along the first dimension.
  llvm::StringMap<SmallVector<int64_t>> padRows;
  for (const std::string &spec : paddingRows) {
    StringRef name, row;
    std::tie(name, row) = StringRef(spec).rsplit(':');
    int64_t r;
    if (row.empty() || row.getAsInteger(10, r))
      return f.emitError("amp-autodiff: padding row '")
             << spec << "' is not name:row (a row number after the last ':')";
    auto it = params.find(name);
    if (it == params.end())
      return f.emitError("amp-autodiff: padding row '")
             << spec << "': '" << name << "' is not a parameter of '" << f.getSymName() << "'";
    auto t = dyn_cast<RankedTensorType>(it->second.getType());
    if (!t || t.getRank() < 1 || !t.hasStaticShape() || r < 0 || r >= t.getDimSize(0))
      return f.emitError("amp-autodiff: padding row '")
             << spec << "': row " << r << " is outside '" << name << "' (" << it->second.getType()
             << ")";
    if (llvm::is_contained(frozen, name.str()))
      return f.emitError("amp-autodiff: padding row '")
             << spec << "': '" << name << "' is frozen (it gets no gradient at all)";
    padRows[name].push_back(r);
  }
  SmallVector<BlockArgument> wrt;
  for (BlockArgument a : f.getArguments()) {
    auto p = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), attrname::kParam);
    if (p && !llvm::is_contained(frozen, p.getValue().str()) && !isBuffer(a))
      wrt.push_back(a);
  }

  // Padding rows: the gathers reading such a parameter along its first axis
  // (an embedding lookup) carry the rows, and their gradient rule leaves
  // them out, as torch's embedding backward does; other uses of the same
  // parameter (a tied output projection) keep their whole gradient.
  SmallVector<GatherOp> padded;
  for (auto &[name, rows] : padRows) {
    BlockArgument a = params[name];
    unsigned before = padded.size();
    for (Operation *user : a.getUsers())
      if (auto g = dyn_cast<GatherOp>(user); g && g.getData() == a && g.getAxis() == 0) {
        g->setAttr(attrname::kPaddingRows, DenseI64ArrayAttr::get(f.getContext(), rows));
        padded.push_back(g);
      }
    if (padded.size() == before)
      return f.emitError("amp-autodiff: padding row of '")
             << name << "': no Gather reads it along its first axis (an embedding lookup)";
  }

  OpBuilder b(ret);
  SmallVector<Value> wrtValues(wrt.begin(), wrt.end());
  auto grads = gradientsOf(b, loss, wrtValues, "the loss '" + lossName.str() + "'");
  if (failed(grads))
    return failure();
  for (GatherOp g : padded)
    g->removeAttr(attrname::kPaddingRows);

  // Gradients as results; a parameter the loss does not reach gets zeros.
  SmallVector<Value> results(ret.getOperands());
  results.append(grads->begin(), grads->end());
  SmallVector<DictionaryAttr> resAttrs = resultAttrDicts(f);
  for (BlockArgument a : wrt)
    resAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(attrname::kGrad, f.getArgAttr(a.getArgNumber(), attrname::kParam))}));
  setFunctionResults(f, results, resAttrs);

  // Forward values nothing uses any more (e.g. a loss's unused second result
  // keeps its op alive: only whole ops without users go).
  bool changed = true;
  while (changed) {
    changed = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
      if (&op != ret.getOperation() && op.use_empty() && isPure(&op)) {
        op.erase();
        changed = true;
      }
  }
  return success();
}

namespace {
struct AMPAutodiffPass : public amp::impl::AMPAutodiffBase<AMPAutodiffPass> {
  using AMPAutodiffBase::AMPAutodiffBase;
  void runOnOperation() override {
    std::vector<std::string> fz(frozen.begin(), frozen.end());
    std::vector<std::string> pads(paddingRows.begin(), paddingRows.end());
    for (func::FuncOp f : getOperation().getOps<func::FuncOp>()) {
      bool hasParams = llvm::any_of(f.getArguments(), [&](BlockArgument a) {
        return f.getArgAttr(a.getArgNumber(), attrname::kParam) != nullptr;
      });
      if (hasParams && failed(differentiate(f, loss, fz, pads)))
        return signalPassFailure();
    }
  }
};
} // namespace

//===----------------------------------------------------------------------===//
// amp-optimizer
//===----------------------------------------------------------------------===//

namespace {
struct AMPOptimizerPass : public amp::impl::AMPOptimizerBase<AMPOptimizerPass> {
  using AMPOptimizerBase::AMPOptimizerBase;

  LogicalResult rewrite(func::FuncOp f) {
    Block &block = f.getBody().front();
    auto ret = cast<func::ReturnOp>(block.getTerminator());
    OpBuilder b(ret);
    Location loc = f.getLoc();
    bool sgd = optimizer == "sgd";
    // weight-decay -1 (the default): PyTorch's default for the optimizer.
    double wd = weightDecay == -1.0 ? (optimizer == "adamw" ? 0.01 : 0.0) : (double)weightDecay;
    // Each hyper-parameter named with its rule; NaN and inf fail every rule.
    struct Rule {
      llvm::StringRef name;
      double v;
      bool ok;
      const char *want;
    } rules[] = {
        {lr.getArgStr(), lr, lr > 0 && std::isfinite((double)lr), "a finite number > 0"},
        {momentum.getArgStr(), momentum, momentum >= 0 && std::isfinite((double)momentum),
         "a finite number >= 0"},
        {dampening.getArgStr(), dampening, std::isfinite((double)dampening), "finite"},
        {weightDecay.getArgStr(), wd, wd >= 0 && std::isfinite(wd), "a finite number >= 0"},
        {beta1.getArgStr(), beta1, beta1 >= 0 && beta1 < 1, "in [0, 1)"},
        {beta2.getArgStr(), beta2, beta2 >= 0 && beta2 < 1, "in [0, 1)"},
        {eps.getArgStr(), eps, eps > 0 && std::isfinite((double)eps), "a finite number > 0"}};
    for (const Rule &r : rules)
      if (!r.ok)
        return f.emitError("amp-optimizer: ") << r.name << " must be " << r.want << ", got " << r.v;
    if (adamMode != "torch" && adamMode != "hf")
      return f.emitError("amp-optimizer: adam-mode must be torch or hf, got '") << adamMode << "'";
    if (adamMode == "hf" && optimizer != "adamw")
      return f.emitError("amp-optimizer: adam-mode hf goes with optimizer adamw");
    if (nesterov && (!sgd || momentum == 0 || dampening != 0))
      return f.emitError("amp-optimizer: nesterov needs sgd with momentum > 0 and dampening 0");

    llvm::StringMap<BlockArgument> params;
    for (BlockArgument a : f.getArguments())
      if (auto p = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), attrname::kParam))
        params[p.getValue()] = a;

    // State arguments, appended; zeros to start.
    auto addState = [&](Type t, StringRef name) -> Value {
      auto rt = cast<RankedTensorType>(t);
      SmallVector<NamedAttribute> attrs = {
          b.getNamedAttr(attrname::kOptState, b.getStringAttr(name)),
          b.getNamedAttr(attrname::kInit,
                         DenseElementsAttr::get(rt, b.getZeroAttr(rt.getElementType())))};
      unsigned i = f.getNumArguments();
      if (failed(f.insertArgument(i, t, b.getDictionaryAttr(attrs), loc)))
        return Value();
      return f.getArgument(i);
    };
    auto stepType = RankedTensorType::get({}, b.getI64Type());
    Value step = addState(stepType, "step");
    auto flagType = RankedTensorType::get({}, b.getI1Type());
    Value foundInf = arith::ConstantOp::create(
        b, loc, flagType, DenseElementsAttr::get(flagType, b.getBoolAttr(false)));
    foundInf.getDefiningOp()->setAttr(attrname::kFoundInf, b.getUnitAttr());

    SmallVector<Value> results;
    SmallVector<DictionaryAttr> resAttrs;
    auto updates = [&](StringRef name) {
      return b.getDictionaryAttr({b.getNamedAttr(attrname::kUpdates, b.getStringAttr(name))});
    };
    SmallVector<std::pair<Value, std::string>> state; // new state values, after params
    for (unsigned i = 0; i < f.getNumResults(); ++i) {
      auto g = f.getResultAttrOfType<StringAttr>(i, attrname::kGrad);
      if (!g) {
        results.push_back(ret.getOperand(i));
        resAttrs.push_back(f.getResultAttrDict(i) ? f.getResultAttrDict(i)
                                                  : b.getDictionaryAttr({}));
        continue;
      }
      std::string name = g.getValue().str();
      auto it = params.find(name);
      if (it == params.end())
        return f.emitError("amp-optimizer: gradient of '") << name << "' has no parameter";
      Value p = it->second, grad = ret.getOperand(i);
      auto pt = dyn_cast<RankedTensorType>(p.getType());
      if (!pt || !pt.getElementType().isF32() || grad.getType() != p.getType())
        return f.emitError("amp-optimizer: parameter '")
               << name << "' must be an f32 master weight with an f32 gradient, it is "
               << p.getType() << " with " << grad.getType();
      if (sgd) {
        Value buf;
        if (momentum != 0 && !(buf = addState(pt, name + ".momentum_buffer")))
          return failure();
        auto op = SGDUpdateOp::create(b, loc, pt, buf ? Type(pt) : Type(), p, grad, buf, step,
                                      foundInf, b.getF32FloatAttr(lr), b.getF32FloatAttr(momentum),
                                      b.getF32FloatAttr(dampening), b.getF32FloatAttr(wd),
                                      b.getBoolAttr(nesterov));
        results.push_back(op.getNewParam());
        resAttrs.push_back(updates(name));
        if (buf)
          state.push_back({op.getNewMomentumBuf(), name + ".momentum_buffer"});
      } else {
        Value m = addState(pt, name + ".exp_avg"), v = addState(pt, name + ".exp_avg_sq");
        if (!m || !v)
          return failure();
        auto op = AdamUpdateOp::create(
            b, loc, p, grad, m, v, step, foundInf, b.getF32FloatAttr(lr), b.getF32FloatAttr(beta1),
            b.getF32FloatAttr(beta2), b.getF32FloatAttr(eps), b.getF32FloatAttr(wd),
            b.getBoolAttr(optimizer == "adamw"),
            AdamModeAttr::get(b.getContext(), *symbolizeAdamMode(adamMode))); // checked above
        results.push_back(op.getNewParam());
        resAttrs.push_back(updates(name));
        state.push_back({op.getNewExpAvg(), name + ".exp_avg"});
        state.push_back({op.getNewExpAvgSq(), name + ".exp_avg_sq"});
      }
    }
    // Batch norm in training mode: its running statistics (parameters of
    // the graph, no gradient) are state that every step's forward updates,
    // skipped steps included (as PyTorch's forward does).
    llvm::StringSet<> trained, statNames;
    for (unsigned i = 0; i < f.getNumResults(); ++i)
      if (auto g = f.getResultAttrOfType<StringAttr>(i, attrname::kGrad))
        trained.insert(g.getValue());
    WalkResult walk = f.walk([&](BatchNormOp bn) {
      if (!bn.getTrainingMode())
        return WalkResult::advance();
      for (auto [operand, updated] : {std::make_pair(bn.getMean(), bn.getRunningMean()),
                                      std::make_pair(bn.getVar(), bn.getRunningVar())}) {
        auto arg = dyn_cast<BlockArgument>(operand);
        auto name = arg && arg.getOwner() == &block
                        ? f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attrname::kParam)
                        : StringAttr();
        if (!name)
          continue; // a computed or constant statistic: nothing to carry
        if (trained.contains(name.getValue()) || !statNames.insert(name.getValue()).second) {
          bn.emitError("amp-optimizer: the running statistic '")
              << name.getValue() << "' is "
              << (trained.contains(name.getValue()) ? "also trained by the optimizer"
                                                    : "updated by two batch norms");
          return WalkResult::interrupt();
        }
        state.push_back({updated, name.getValue().str()});
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    for (auto &[v, n] : state) {
      results.push_back(v);
      resAttrs.push_back(updates(n));
    }
    results.push_back(StepCountOp::create(b, loc, step, foundInf));
    resAttrs.push_back(updates("step"));
    setFunctionResults(f, results, resAttrs);
    return success();
  }

  void runOnOperation() override {
    if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw") {
      getOperation().emitError("amp-optimizer: unknown optimizer '")
          << optimizer << "' (sgd, adam or adamw)";
      return signalPassFailure();
    }
    bool anyGrads = false;
    for (func::FuncOp f : getOperation().getOps<func::FuncOp>()) {
      if (f.isExternal())
        continue;
      bool hasGrads = false;
      for (unsigned i = 0; i < f.getNumResults(); ++i)
        hasGrads |= f.getResultAttr(i, attrname::kGrad) != nullptr;
      anyGrads |= hasGrads;
      if (hasGrads && failed(rewrite(f)))
        return signalPassFailure();
    }
    if (!anyGrads) {
      getOperation().emitError("amp-optimizer: no function has gradients (run amp-autodiff first)");
      return signalPassFailure();
    }
  }
};
} // namespace

//===----------------------------------------------------------------------===//
// amp-add-loss
//===----------------------------------------------------------------------===//

namespace {
struct AMPAddLossPass : public amp::impl::AMPAddLossBase<AMPAddLossPass> {
  using AMPAddLossBase::AMPAddLossBase;

  LogicalResult rewrite(func::FuncOp f) {
    auto err = [&]() { return f.emitError("amp-add-loss: "); };
    if (kind != "cross_entropy" && kind != "nll" && kind != "mse")
      return err() << "unknown loss kind '" << kind << "' (cross_entropy, nll or mse)";
    if (!f.getBody().hasOneBlock())
      return err() << "'" << f.getSymName() << "' has control flow";
    Block &block = f.getBody().front();
    auto ret = cast<func::ReturnOp>(block.getTerminator());
    int index = -1;
    std::string names;
    for (unsigned i = 0; i < f.getNumResults(); ++i) {
      auto n = f.getResultAttrOfType<StringAttr>(i, attrname::kOutput);
      if (!n)
        continue;
      if (n.getValue() == "loss")
        return err() << "the graph already has a result named 'loss' (train it as it is, or "
                        "name another output)";
      names += (names.empty() ? "" : ", ") + n.getValue().str();
      if (n.getValue() == output)
        index = i;
    }
    if (output.empty()) { // the graph's only output
      int count = 0;
      for (unsigned i = 0; i < f.getNumResults(); ++i)
        if (f.getResultAttr(i, attrname::kOutput)) {
          index = i;
          ++count;
        }
      if (count != 1)
        return err() << "the graph has " << count << " outputs (" << names
                     << "): name the one the loss reads (output=NAME)";
      output = f.getResultAttrOfType<StringAttr>(index, attrname::kOutput).getValue().str();
    }
    if (index < 0)
      return err() << "no result named '" << output
                   << "' (the results are: " << (names.empty() ? "none" : names) << ")";
    for (BlockArgument a : f.getArguments())
      for (StringRef key : {attrname::kInput, attrname::kParam})
        if (auto n = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), key);
            n && n.getValue() == label)
          return err() << "the label name '" << label
                       << "' is already taken by an input or "
                          "parameter";
    Value out = ret.getOperand(index);
    auto ot = dyn_cast<RankedTensorType>(out.getType());
    if (!ot || !ot.hasStaticShape() || !isa<FloatType>(ot.getElementType()))
      return err() << "the output '" << output << "' must be a statically shaped float tensor, "
                   << "it is " << out.getType();
    OpBuilder b(ret);
    Location loc = NameLoc::get(b.getStringAttr("/loss/" + kind), f.getLoc());
    Type labelType;
    if (kind == "mse") {
      labelType = RankedTensorType::get(ot.getShape(), b.getF32Type());
    } else {
      if (ot.getRank() < 2)
        return err() << kind << " needs scores of rank >= 2 ([N, C, ...]), '" << output << "' is "
                     << ot;
      SmallVector<int64_t> ls{ot.getDimSize(0)};
      for (int64_t d = 2; d < ot.getRank(); ++d)
        ls.push_back(ot.getDimSize(d));
      labelType = RankedTensorType::get(ls, b.getI64Type());
    }
    unsigned argIndex = f.getNumArguments();
    if (failed(f.insertArgument(
            argIndex, labelType,
            b.getDictionaryAttr({b.getNamedAttr(attrname::kInput, b.getStringAttr(label))}), loc)))
      return failure();
    Value lab = f.getArgument(argIndex);
    Operation *lossOp;
    if (kind == "cross_entropy") {
      lossOp = createWithInferredTypes(b, loc, SoftmaxCrossEntropyLossOp::getOperationName(),
                                       {out, lab}, {}, 2);
    } else if (kind == "nll") {
      lossOp = createWithInferredTypes(b, loc, NLLLossOp::getOperationName(), {out, lab}, {}, 1);
    } else {
      Value x = out;
      if (!ot.getElementType().isF32())
        x = CastOp::create(b, loc, RankedTensorType::get(ot.getShape(), b.getF32Type()), x);
      Operation *d = createWithInferredTypes(b, loc, SubOp::getOperationName(), {x, lab}, {}, 1);
      Operation *sq = d ? createWithInferredTypes(b, loc, MulOp::getOperationName(),
                                                  {d->getResult(0), d->getResult(0)}, {}, 1)
                        : nullptr;
      lossOp =
          sq ? createWithInferredTypes(b, loc, ReduceMeanOp::getOperationName(), {sq->getResult(0)},
                                       {b.getNamedAttr("keepdims", b.getBoolAttr(false))}, 1)
             : nullptr;
    }
    if (!lossOp)
      return failure();
    SmallVector<Value> results(ret.getOperands());
    results.push_back(lossOp->getResult(0));
    SmallVector<DictionaryAttr> resAttrs = resultAttrDicts(f);
    resAttrs.push_back(
        b.getDictionaryAttr({b.getNamedAttr(attrname::kOutput, b.getStringAttr("loss"))}));
    setFunctionResults(f, results, resAttrs);
    return success();
  }

  void runOnOperation() override {
    bool any = false;
    for (func::FuncOp f : getOperation().getOps<func::FuncOp>()) {
      if (f.isExternal())
        continue;
      bool hasParams = llvm::any_of(f.getArguments(), [&](BlockArgument a) {
        return f.getArgAttr(a.getArgNumber(), attrname::kParam) != nullptr;
      });
      if (!hasParams)
        continue;
      any = true;
      if (failed(rewrite(f)))
        return signalPassFailure();
    }
    if (!any) {
      getOperation().emitError("amp-add-loss: no function with parameters");
      return signalPassFailure();
    }
  }
};
} // namespace
