//===- Autodiff.cpp - amp-autodiff ---------------------------------------===//
//
// Reverse-mode differentiation over the single block of a function: the
// loss is seeded with 1, ops are visited in reverse, each one builds the
// gradients of its operands from those of its results (GradientOpInterface),
// and the gradients of a value used several times are added up.
//
//===----------------------------------------------------------------------===//

#include "amp/Transforms/Passes.h"

#include "amp/Transforms/Autocast.h"
#include "amp/Dialect/AMP/IR/AMPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::amp {
#define GEN_PASS_DEF_AMPAUTODIFF
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

LogicalResult mlir::amp::differentiate(func::FuncOp f, StringRef lossName,
                                       ArrayRef<std::string> frozen) {
  if (f.isExternal())
    return success();
  if (!f.getBody().hasOneBlock())
    return f.emitError("amp-autodiff: '") << f.getSymName() << "' has control flow";
  Block &block = f.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());

  // The loss.
  int lossIndex = -1;
  for (unsigned i = 0; i < f.getNumResults(); ++i)
    if (auto n = f.getResultAttrOfType<StringAttr>(i, "amp.output"); n && n.getValue() == lossName)
      lossIndex = i;
  if (lossIndex < 0)
    return f.emitError("amp-autodiff: '")
           << f.getSymName() << "' has no result named '" << lossName
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
    if (auto p = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), "amp.param"))
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
  SmallVector<BlockArgument> wrt;
  for (BlockArgument a : f.getArguments()) {
    auto p = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), "amp.param");
    if (p && !llvm::is_contained(frozen, p.getValue().str()) && !isBuffer(a))
      wrt.push_back(a);
  }

  // Values that depend on a parameter (the only ones needing gradients).
  DenseSet<Value> needs(wrt.begin(), wrt.end());
  for (Operation &op : block)
    if (llvm::any_of(op.getOperands(), [&](Value v) { return needs.contains(v); }))
      for (Value r : op.getResults())
        needs.insert(r);
  if (!needs.contains(loss))
    return f.emitError("amp-autodiff: the loss '") << lossName << "' does not depend on any "
                                                     "parameter";

  OpBuilder b(ret);
  DenseMap<Value, Value> grads;
  auto accumulate = [&](Value v, Value g, Location loc, StringRef node) -> LogicalResult {
    auto it = grads.find(v);
    if (it == grads.end()) {
      grads[v] = g;
      return success();
    }
    Operation *sum = createWithInferredTypes(b, loc, "amp.add", {it->second, g}, {}, 1);
    if (!sum)
      return failure();
    sum->setAttr("amp.differentiates", b.getStringAttr(node));
    it->second = sum->getResult(0);
    return success();
  };
  Value one = arith::ConstantOp::create(
      b, loss.getLoc(), lt, DenseElementsAttr::get(lt, b.getFloatAttr(lt.getElementType(), 1.0)));
  grads[loss] = one;

  SmallVector<Operation *> forward;
  for (Operation &op : block)
    if (&op != ret.getOperation())
      forward.push_back(&op);
  for (Operation *op : llvm::reverse(forward)) {
    SmallVector<Value> rg;
    bool any = false;
    for (Value r : op->getResults()) {
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
    Block::iterator before = std::prev(b.getInsertionPoint());
    SmallVector<Value> og;
    if (failed(iface.buildGradients(b, rg, og)))
      return failure();
    Location gradLoc =
        NameLoc::get(b.getStringAttr(node + "/grad"), op->getLoc());
    for (auto it = std::next(before); it != b.getInsertionPoint(); ++it) {
      it->setLoc(gradLoc);
      if (isa<AMPDialect>(it->getDialect()))
        it->setAttr("amp.differentiates", b.getStringAttr(node));
    }
    if (og.size() != op->getNumOperands())
      return op->emitOpError("gradient rule returned ")
             << og.size() << " gradients for " << op->getNumOperands() << " operands";
    for (auto [v, g] : llvm::zip(op->getOperands(), og))
      if (g && needs.contains(v) && failed(accumulate(v, g, gradLoc, node)))
        return failure();
  }

  // Gradients as results; a parameter the loss does not reach gets zeros.
  SmallVector<Value> results(ret.getOperands());
  SmallVector<Type> types(f.getResultTypes());
  for (BlockArgument a : wrt) {
    Value g = grads.lookup(a);
    if (!g) {
      auto t = cast<RankedTensorType>(a.getType());
      g = arith::ConstantOp::create(b, f.getLoc(), t,
                                    DenseElementsAttr::get(t, b.getZeroAttr(t.getElementType())));
    }
    results.push_back(g);
    types.push_back(g.getType());
  }
  ret->setOperands(results);
  SmallVector<DictionaryAttr> resAttrs;
  for (unsigned i = 0; i < f.getNumResults(); ++i)
    resAttrs.push_back(f.getResultAttrDict(i) ? f.getResultAttrDict(i)
                                              : b.getDictionaryAttr({}));
  for (BlockArgument a : wrt)
    resAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("amp.grad", f.getArgAttr(a.getArgNumber(), "amp.param"))}));
  f.setFunctionType(FunctionType::get(f.getContext(), f.getArgumentTypes(), types));
  f.setAllResultAttrs(resAttrs);

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
    for (func::FuncOp f : getOperation().getOps<func::FuncOp>()) {
      bool hasParams = llvm::any_of(f.getArguments(), [&](BlockArgument a) {
        return f.getArgAttr(a.getArgNumber(), "amp.param") != nullptr;
      });
      if (hasParams && failed(differentiate(f, loss, fz)))
        return signalPassFailure();
    }
  }
};
} // namespace
