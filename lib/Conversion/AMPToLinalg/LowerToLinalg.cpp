//===- LowerToLinalg.cpp - amp ops to linalg on tensors -------------------===//
//
// amp-lower-to-linalg: every amp op of a function becomes linalg generics
// (and tensor / arith / math ops) on tensors computing what the runtime's
// kernel computes: f16 / bf16 math in f32 rounded once per op, products and
// convolutions with f32 accumulators rounded once after the epilogue (alpha,
// beta * C, bias), the ops AMP keeps in fp32 with f64 sums where the
// runtime sums in double, the loss-scaling ops as selects on found_inf (a
// skipped step is data, not control flow). An op without a lowering is an
// error naming it (docs/linalg.md lists what lowers).
//
// With `state-init` (the default) the initial values of the function's
// state (`amp.init` argument attributes: parameters, optimizer state, the
// loss scale and its trackers) move into a function `@<name>_init` that
// returns them in argument order, so that a compiler without our runtime
// can start the training loop.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "amp/Conversion/Passes.h"
#include "amp/Dialect/AMP/IR/AMPOps.h"
#include "amp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::amp {
#define GEN_PASS_DEF_AMPLOWERTOLINALG
#include "amp/Conversion/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::linalg_lowering;

FailureOr<SmallVector<Value>> OpLowering::run() {
  for (Type t : op->getOperandTypes()) {
    auto rt = dyn_cast<RankedTensorType>(t);
    if (!rt || !rt.hasStaticShape())
      return (refuse("needs statically shaped tensors, got " + typeStr(t)), failure());
    if (rt.getElementType().isUnsignedInteger())
      return (refuse("unsigned element types have no arith ops; got " + typeStr(t)), failure());
  }
  for (Type t : op->getResultTypes()) {
    auto rt = dyn_cast<RankedTensorType>(t);
    if (!rt || !rt.hasStaticShape() || rt.getElementType().isUnsignedInteger())
      return (refuse("needs statically shaped signless tensors, got " + typeStr(t)), failure());
  }
  SmallVector<Value> out;
  if (FailureOr<Value> u = lowerUnaryFunction(*this, op); succeeded(u)) {
    out.push_back(*u);
    return out;
  }
  static const LoweringSet lowerings = [] {
    LoweringSet set;
    populateElementwiseLowerings(set);
    populateShapeLowerings(set);
    populateLinearLowerings(set);
    populatePoolingLowerings(set);
    populateReductionLowerings(set);
    populateLossLowerings(set);
    populateOptimizerLowerings(set);
    return set;
  }();
  const LowerFn *fn = lowerings.lookup(op);
  if (!fn)
    return (refuse("no lowering is written for this op (docs/linalg.md lists the ops that lower)"),
            failure());
  if (failed((*fn)(*this, op, out)))
    return failure();
  return out;
}

namespace {

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

LogicalResult lowerFunction(func::FuncOp f) {
  SmallVector<Operation *> ops;
  f.walk([&](Operation *op) {
    if (isa<AMPDialect>(op->getDialect()))
      ops.push_back(op);
  });
  // max_pool_grad reads the window of the max_pool that made its indices.
  for (Operation *op : ops)
    if (auto g = dyn_cast<MaxPoolGradOp>(op))
      if (auto fwd = g.getIndices().getDefiningOp<MaxPoolOp>())
        for (NamedAttribute a : fwd->getAttrs())
          if (a.getName() != attrname::kDifferentiates && !g->hasAttr(a.getName()))
            g->setAttr(a.getName(), a.getValue());
  for (Operation *op : ops) {
    OpLowering l(op);
    FailureOr<SmallVector<Value>> r = l.run();
    if (failed(r))
      return failure();
    for (auto [i, res] : llvm::enumerate(op->getResults())) {
      Value v = i < r->size() ? (*r)[i] : Value();
      if (!v) {
        if (!res.use_empty())
          return op->emitOpError("amp-lower-to-linalg skipped result #") << i << " that is used";
        continue;
      }
      res.replaceAllUsesWith(v);
    }
  }
  for (Operation *op : llvm::reverse(ops))
    op->erase();
  // math.erfc (GELU's normal CDF) as MLIR's f32 polynomial: IREE's CPU
  // back-end has no erfc.
  RewritePatternSet patterns(f.getContext());
  populatePolynomialApproximateErfcPattern(patterns);
  return applyPatternsGreedily(f, std::move(patterns));
}

/// Moves the `amp.init` values of f's arguments into `@<f>_init`.
LogicalResult splitInit(ModuleOp m, func::FuncOp f) {
  SmallVector<Attribute> inits;
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> resAttrs;
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    auto init = f.getArgAttrOfType<ElementsAttr>(i, attrname::kInit);
    if (!init)
      continue;
    inits.push_back(init);
    types.push_back(f.getArgument(i).getType());
    SmallVector<NamedAttribute> keep;
    if (DictionaryAttr d = f.getArgAttrDict(i))
      for (NamedAttribute a : d)
        if (a.getName() != attrname::kInit)
          keep.push_back(a);
    keep.push_back(NamedAttribute(StringAttr::get(m.getContext(), attrname::kArg),
                                  IntegerAttr::get(IntegerType::get(m.getContext(), 64), i)));
    resAttrs.push_back(DictionaryAttr::get(m.getContext(), keep));
    f.removeArgAttr(i, StringAttr::get(m.getContext(), attrname::kInit));
  }
  if (inits.empty())
    return success();
  std::string name = (f.getName() + "_init").str();
  if (m.lookupSymbol(name))
    return f.emitOpError("amp-lower-to-linalg: a symbol '") << name << "' exists already";
  OpBuilder b(m.getContext());
  b.setInsertionPointAfter(f);
  auto fn = func::FuncOp::create(b, f.getLoc(), name, b.getFunctionType({}, types));
  for (auto [i, d] : llvm::enumerate(resAttrs))
    fn.setResultAttrs(i, d);
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToStart(body);
  SmallVector<Value> vals;
  for (Attribute a : inits)
    vals.push_back(arith::ConstantOp::create(b, f.getLoc(), cast<TypedAttr>(a)));
  func::ReturnOp::create(b, f.getLoc(), vals);
  return success();
}

struct AMPLowerToLinalgPass : public amp::impl::AMPLowerToLinalgBase<AMPLowerToLinalgPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp m = getOperation();
    SmallVector<func::FuncOp> fs(m.getOps<func::FuncOp>());
    for (func::FuncOp f : fs) {
      if (failed(lowerFunction(f)))
        return signalPassFailure();
      if (stateInit && failed(splitInit(m, f)))
        return signalPassFailure();
    }
  }
};

} // namespace
