//===- LossScaling.cpp - amp-loss-scaling --------------------------------===//
//
// PyTorch's GradScaler as a rewrite of the training step that amp-autodiff
// and amp-optimizer built (docs/semantics.md section 3): the backward's seed
// becomes the loss scale, one fused unscale-and-check feeds the optimizer
// updates and their found_inf flag, and the scale with its trackers becomes
// state that amp.update_scale advances after the step.
//
//===----------------------------------------------------------------------===//

#include "amp/Transforms/Passes.h"

#include "amp/Dialect/AMP/IR/AMPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <cmath>

namespace mlir::amp {
#define GEN_PASS_DEF_AMPLOSSSCALING
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

namespace {

struct AMPLossScalingPass : public amp::impl::AMPLossScalingBase<AMPLossScalingPass> {
  using AMPLossScalingBase::AMPLossScalingBase;

  LogicalResult checkOptions(Operation *where) {
    auto err = [&]() { return where->emitError("amp-loss-scaling: "); };
    if (mode != "dynamic" && mode != "static" && mode != "none")
      return err() << "unknown mode '" << mode << "' (dynamic, static or none)";
    if (!(initScale > 0) || !std::isfinite((float)initScale))
      return err() << "init-scale must be a positive finite f32, got " << initScale;
    if (!(growthFactor > 1))
      return err() << "growth-factor must be > 1, got " << growthFactor;
    if (!(backoffFactor > 0 && backoffFactor < 1))
      return err() << "backoff-factor must lie in (0, 1), got " << backoffFactor;
    if (growthInterval < 1 || growthInterval > INT32_MAX)
      return err() << "growth-interval must be >= 1, got " << (int64_t)growthInterval;
    if (hysteresis < 1 || hysteresis > INT32_MAX)
      return err() << "hysteresis must be >= 1, got " << (int64_t)hysteresis;
    if (!(minScale >= 0) || minScale > initScale)
      return err() << "min-scale must lie in [0, init-scale], got " << minScale;
    if (onMinScale != "error" && onMinScale != "warn")
      return err() << "on-min-scale must be error or warn, got '" << onMinScale << "'";
    if (!(maxNorm >= 0))
      return err() << "max-norm must be >= 0 (0: no clipping), got " << maxNorm;
    if (accumulate < 1 || accumulate > (1 << 24))
      return err() << "accumulate must lie in [1, 2^24], got " << (int64_t)accumulate;
    if (dataParallel && accumulate > 1)
      return err() << "data-parallel with accumulate > 1 is not supported yet (each micro-step "
                      "would reduce the running sum again)";
    return success();
  }

  LogicalResult rewrite(func::FuncOp f, arith::ConstantOp flag) {
    MLIRContext *ctx = f.getContext();
    Block &block = f.getBody().front();
    auto ret = cast<func::ReturnOp>(block.getTerminator());
    Location loc = f.getLoc();
    OpBuilder b(ctx);

    // The updates and their gradients, in order.
    SmallVector<OpOperand *> gradUses;
    for (Operation &op : block) {
      if (auto s = dyn_cast<SGDUpdateOp>(op))
        gradUses.push_back(&s.getGradMutable());
      else if (auto a = dyn_cast<AdamUpdateOp>(op))
        gradUses.push_back(&a.getGradMutable());
    }
    if (gradUses.empty())
      return f.emitError("amp-loss-scaling: '") << f.getSymName()
                                                << "' has a found_inf flag but no optimizer "
                                                   "update";
    for (Operation &op : block)
      if (isa<UnscaleAndCheckOp, UpdateScaleOp>(op))
        return op.emitOpError("amp-loss-scaling: the step is already loss-scaled");
    if (dataParallel)
      for (Operation &op : block)
        if (auto bn = dyn_cast<BatchNormOp>(op); bn && bn.getTrainingMode())
          return bn.emitOpError(
              "amp-loss-scaling: data-parallel with batch norm in training mode is not supported "
              "yet (each rank would keep its own running statistics, as DDP without "
              "SyncBatchNorm does)");

    arith::ConstantOp seed;
    for (Operation &op : block)
      if (op.hasAttr(attrname::kLossSeed)) {
        if (seed)
          return op.emitError("amp-loss-scaling: two backward seeds in '") << f.getSymName() << "'";
        seed = cast<arith::ConstantOp>(op);
      }
    if (!seed && mode != "none")
      return f.emitError("amp-loss-scaling: '")
             << f.getSymName()
             << "' has no backward seed (amp.loss_seed): run it right after amp-autodiff and "
                "amp-optimizer, before passes that fold constants";

    auto f32 = RankedTensorType::get({}, b.getF32Type());
    auto i64 = RankedTensorType::get({}, b.getI64Type());
    auto addState = [&](Type t, StringRef name, Attribute init) -> Value {
      SmallVector<NamedAttribute> attrs = {
          b.getNamedAttr(attrname::kOptState, b.getStringAttr(name)),
          b.getNamedAttr(attrname::kInit, DenseElementsAttr::get(cast<ShapedType>(t), init))};
      unsigned i = f.getNumArguments();
      if (failed(f.insertArgument(i, t, b.getDictionaryAttr(attrs), loc)))
        return Value();
      return f.getArgument(i);
    };
    for (BlockArgument a : f.getArguments())
      if (auto n = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), attrname::kOptState);
          n && (n.getValue() == "loss_scale" || n.getValue() == "growth_tracker" ||
                n.getValue() == "hysteresis_left"))
        return f.emitError("amp-loss-scaling: '")
               << f.getSymName() << "' already has a state argument '" << n.getValue() << "'";

    // The scale this step's backward uses.
    Value scale, tracker, hystLeft;
    b.setInsertionPointToStart(&block);
    if (mode == "dynamic") {
      scale = addState(f32, "loss_scale", b.getF32FloatAttr((float)initScale));
      tracker = addState(i64, "growth_tracker", b.getI64IntegerAttr(0));
      hystLeft = addState(i64, "hysteresis_left", b.getI64IntegerAttr(hysteresis));
      if (!scale || !tracker || !hystLeft)
        return failure();
    } else {
      double s = mode == "static" ? initScale : 1.0;
      scale = arith::ConstantOp::create(b, loc, f32,
                                        DenseElementsAttr::get(f32, b.getF32FloatAttr((float)s)));
    }

    // Gradient accumulation state.
    int64_t k = accumulate;
    Value micro;
    SmallVector<Value> accs;
    if (k > 1) {
      if (!(micro = addState(i64, "micro_step", b.getI64IntegerAttr(0))))
        return failure();
      for (OpOperand *u : gradUses) {
        auto p = dyn_cast<BlockArgument>(u->getOwner()->getOperand(0));
        auto name =
            p ? f.getArgAttrOfType<StringAttr>(p.getArgNumber(), attrname::kParam) : StringAttr();
        if (!name)
          return u->getOwner()->emitOpError("amp-loss-scaling: updates no named parameter");
        auto gt =
            RankedTensorType::get(cast<ShapedType>(u->get().getType()).getShape(), b.getF32Type());
        Value a = addState(gt, (name.getValue() + ".grad_accum").str(), b.getF32FloatAttr(0));
        if (!a)
          return failure();
        accs.push_back(a);
      }
    }

    // Seed the backward with the scale (divided by k when accumulating).
    if (seed && (mode != "none" || k > 1)) {
      b.setInsertionPoint(seed);
      auto st = cast<RankedTensorType>(seed.getType());
      Value s = scale;
      if (k > 1)
        s = DivOp::create(
            b, seed.getLoc(), f32, s,
            arith::ConstantOp::create(b, seed.getLoc(), f32,
                                      DenseElementsAttr::get(f32, b.getF32FloatAttr((float)k))));
      if (!st.getElementType().isF32())
        s = CastOp::create(b, seed.getLoc(), RankedTensorType::get({}, st.getElementType()), s);
      if (st.getRank() != 0) {
        if (st.getNumElements() != 1)
          return seed.emitError("amp-loss-scaling: the loss must be a scalar, its seed is ") << st;
        s = ReshapeOp::create(b, seed.getLoc(), st, s, b.getDenseI64ArrayAttr(st.getShape()),
                              false);
      }
      seed.replaceAllUsesWith(s);
      seed.erase();
    } else if (seed) {
      seed->removeAttr(attrname::kLossSeed);
    }

    // Unscale, check, clip; the updates read the results.
    b.setInsertionPoint(gradUses.front()->getOwner());
    Value found = flag;
    Value gradNorm;
    Value apply, newMicro;
    SmallVector<Value> summed;
    auto flagType = RankedTensorType::get({}, b.getI1Type());
    auto boolConst = [&](bool v) -> Value {
      return arith::ConstantOp::create(b, loc, flagType,
                                       DenseElementsAttr::get(flagType, b.getBoolAttr(v)));
    };
    if (k > 1) {
      auto ms = MicroStepOp::create(b, loc, flagType, i64, micro, b.getI64IntegerAttr(k));
      apply = ms.getApply();
      newMicro = ms.getNewMicroStep();
      for (auto [u, a] : llvm::zip(gradUses, accs)) {
        Value g = AddOp::create(b, loc, a.getType(), a, u->get());
        summed.push_back(g);
        u->set(g);
      }
    }
    if (dataParallel) {
      // One all-reduce of every gradient (f32), averaged over the ranks,
      // before anything reads them: each rank then unscales, checks and
      // updates the same values.
      SmallVector<Value> grads;
      for (OpOperand *u : gradUses) {
        Value g = u->get();
        auto gt = cast<RankedTensorType>(g.getType());
        if (!gt.getElementType().isF32())
          g = CastOp::create(b, loc, RankedTensorType::get(gt.getShape(), b.getF32Type()), g);
        grads.push_back(g);
      }
      auto ar = AllReduceOp::create(b, loc, ValueRange(grads).getTypes(), grads, b.getUnitAttr());
      for (auto [u, g] : llvm::zip(gradUses, ar.getOutputs()))
        u->set(g);
    }
    if (mode != "none" || checkInf) {
      SmallVector<Value> grads;
      SmallVector<Type> types;
      for (OpOperand *u : gradUses) {
        grads.push_back(u->get());
        types.push_back(
            RankedTensorType::get(cast<ShapedType>(u->get().getType()).getShape(), b.getF32Type()));
      }
      auto un = UnscaleAndCheckOp::create(b, loc, types, RankedTensorType::get({}, b.getI1Type()),
                                          grads, scale);
      SmallVector<Value> newGrads(un.getUnscaled());
      found = un.getFoundInf();
      if (maxNorm > 0) {
        auto clip = ClipGradNormOp::create(b, loc, newGrads, found, (float)maxNorm);
        newGrads.assign(clip.getClipped().begin(), clip.getClipped().end());
        gradNorm = clip.getTotalNorm();
      }
      for (auto [u, g] : llvm::zip(gradUses, newGrads))
        u->set(g);
      flag.replaceAllUsesWith(found);
      flag.erase();
      flag = nullptr;
    } else {
      flag->removeAttr(attrname::kFoundInf);
      if (maxNorm > 0) {
        SmallVector<Value> grads;
        for (OpOperand *u : gradUses)
          grads.push_back(u->get());
        auto clip = ClipGradNormOp::create(b, loc, grads, flag, (float)maxNorm);
        for (auto [u, g] : llvm::zip(gradUses, clip.getClipped()))
          u->set(g);
        gradNorm = clip.getTotalNorm();
      }
    }

    // Accumulating: the updates skip unless this call applies.
    Value reportFound = found;
    if (k > 1) {
      auto skip = WhereOp::create(b, loc, flagType, apply, found, boolConst(true));
      Value skipV = skip.getResult();
      for (Operation &op : block)
        if (isa<SGDUpdateOp, AdamUpdateOp, StepCountOp>(op))
          for (OpOperand &o : op.getOpOperands())
            if (o.get() == found)
              o.set(skipV);
      reportFound = WhereOp::create(b, loc, flagType, apply, found, boolConst(false));
    }

    // Results: the scale's new state, and what the runner reports.
    b.setInsertionPoint(ret);
    SmallVector<Value> results(ret.getOperands());
    SmallVector<DictionaryAttr> resAttrs = resultAttrDicts(f);
    auto add = [&](Value v, StringRef key, StringRef name) {
      results.push_back(v);
      resAttrs.push_back(b.getDictionaryAttr({b.getNamedAttr(key, b.getStringAttr(name))}));
    };
    if (mode == "dynamic") {
      // Accumulating: an overflow counts on the applying call only.
      auto up = UpdateScaleOp::create(
          b, loc, f32, i64, i64, scale, tracker, hystLeft, reportFound,
          b.getF32FloatAttr((float)growthFactor), b.getF32FloatAttr((float)backoffFactor),
          b.getI64IntegerAttr(growthInterval), b.getI64IntegerAttr(hysteresis),
          b.getF32FloatAttr((float)minScale),
          OnMinScaleAttr::get(b.getContext(), *symbolizeOnMinScale(onMinScale))); // checked above
      Value ns = up.getNewScale(), nt = up.getNewGrowthTracker(), nh = up.getNewHysteresisLeft();
      if (k > 1) { // the scale moves on applying calls only
        ns = WhereOp::create(b, loc, f32, apply, ns, scale);
        nt = WhereOp::create(b, loc, i64, apply, nt, tracker);
        nh = WhereOp::create(b, loc, i64, apply, nh, hystLeft);
      }
      add(ns, attrname::kUpdates, "loss_scale");
      add(nt, attrname::kUpdates, "growth_tracker");
      add(nh, attrname::kUpdates, "hysteresis_left");
    }
    if (k > 1) {
      add(newMicro, attrname::kUpdates, "micro_step");
      for (auto [a, g] : llvm::zip(accs, summed)) {
        auto t = cast<RankedTensorType>(a.getType());
        Value zeros = arith::ConstantOp::create(b, loc, t,
                                                DenseElementsAttr::get(t, b.getF32FloatAttr(0.0f)));
        auto name = f.getArgAttrOfType<StringAttr>(cast<BlockArgument>(a).getArgNumber(),
                                                   attrname::kOptState);
        add(WhereOp::create(b, loc, t, apply, zeros, g), attrname::kUpdates, name.getValue());
      }
    }
    add(scale, attrname::kOutput, "loss_scale");
    add(reportFound, attrname::kOutput, "found_inf");
    if (gradNorm)
      add(gradNorm, attrname::kOutput, "grad_norm");
    setFunctionResults(f, results, resAttrs);
    return success();
  }

  void runOnOperation() override {
    if (failed(checkOptions(getOperation())))
      return signalPassFailure();
    bool any = false;
    for (func::FuncOp f : getOperation().getOps<func::FuncOp>()) {
      if (f.isExternal())
        continue;
      arith::ConstantOp flag;
      for (Operation &op : f.getBody().front())
        if (op.hasAttr(attrname::kFoundInf))
          flag = dyn_cast<arith::ConstantOp>(op);
      if (!flag) {
        for (Operation &op : f.getBody().front())
          if (isa<UnscaleAndCheckOp, UpdateScaleOp>(op)) {
            op.emitError("amp-loss-scaling: '") << f.getSymName() << "' is already loss-scaled";
            return signalPassFailure();
          }
        continue;
      }
      any = true;
      if (failed(rewrite(f, flag)))
        return signalPassFailure();
    }
    if (!any) {
      getOperation().emitError("amp-loss-scaling: no training step (no function with an ")
          << attrname::kFoundInf << " flag): run amp-autodiff and amp-optimizer first";
      return signalPassFailure();
    }
  }
};

} // namespace
