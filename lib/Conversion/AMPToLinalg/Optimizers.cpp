//===- Optimizers.cpp - loss scaling and optimizer updates to linalg --------===//
//
// unscale_and_check, clip_grad_norm, the SGD and Adam updates, the loss
// scale's update and the step counters as element-wise selects on
// found_inf: no control flow, a skipped step is data.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::linalg_lowering;

namespace {

/// beta^t in double by squaring (t < 2^40): math.powf on f64 would need
/// libm, which IREE's CPU executables do not link.
Value powInt(Emit &q, double beta, Value t) {
  Type i64 = t.getType();
  Value r = q.cst(1.0, q.f64()), p = q.cst(beta, q.f64());
  for (int bit = 0; bit < 40; ++bit) {
    Value set = q.cmpi(arith::CmpIPredicate::ne,
                       arith::AndIOp::create(q.b, q.loc, t, q.cstI(int64_t(1) << bit, i64)),
                       q.cstI(0, i64));
    r = q.sel(set, q.mul(r, p), r);
    p = q.mul(p, p);
  }
  return r;
}

/// The family's ops (see Lowering.h).
struct Optimizers : OpLowering {
  using OpLowering::OpLowering;
  LogicalResult unscale(UnscaleAndCheckOp o, SmallVector<Value> &out);
  LogicalResult clipGradNorm(ClipGradNormOp o, SmallVector<Value> &out);
  LogicalResult sgd(SGDUpdateOp o, SmallVector<Value> &out);
  LogicalResult adam(AdamUpdateOp o, SmallVector<Value> &out);
  LogicalResult updateScale(UpdateScaleOp o, SmallVector<Value> &out);
};

} // namespace

// inv = f32(1 / f64(scale)); every gradient times inv in f32; found_inf when
// any gradient value is inf or NaN (checked before the multiply, as PyTorch).
LogicalResult Optimizers::unscale(UnscaleAndCheckOp o, SmallVector<Value> &out) {
  auto st = RankedTensorType::get({}, e.f32());
  Value inv = e.map1(st, {o.getScale()}, [](Emit &q, ValueRange a) {
    return q.div(q.cst(1.0, q.f64()), q.convert(a[0], q.f64()));
  });
  Value flag;
  auto ft = RankedTensorType::get({}, b.getI1Type());
  for (auto [g, res] : llvm::zip(o.getGrads(), o.getUnscaled())) {
    auto rt = cast<RankedTensorType>(res.getType());
    out.push_back(e.map1(rt, {g, inv}, [](Emit &q, ValueRange a) { return q.mul(a[0], a[1]); }));
    auto gt = rtt(g);
    int64_t r = gt.getRank();
    Value init = e.full(ft, arith::ConstantIntOp::create(b, op->getLoc(), 0, 1));
    Value any = e.generic(
        {ft}, {g}, {init}, {b.getMultiDimIdentityMap(r), AffineMap::get(r, 0, {}, b.getContext())},
        SmallVector<Iter>(r, Iter::reduction), [](OpBuilder &nb, Location nl, ValueRange a) {
          Emit q{nb, nl};
          Value bad = q.isNonFinite(q.convert(a[0], q.f32()));
          linalg::YieldOp::create(nb, nl, arith::OrIOp::create(nb, nl, a[1], bad).getResult());
        })[0];
    flag = flag ? e.map1(ft, {flag, any},
                         [](Emit &q, ValueRange a) {
                           return arith::OrIOp::create(q.b, q.loc, a[0], a[1]).getResult();
                         })
                : any;
  }
  if (!flag)
    flag = e.full(ft, arith::ConstantIntOp::create(b, op->getLoc(), 0, 1));
  out.push_back(flag);
  return success();
}

// PyTorch's clip_grad_norm_: the norm in double; coef = max_norm / (norm +
// 1e-6) applied when below 1, the norm finite and the step not skipped.
LogicalResult Optimizers::clipGradNorm(ClipGradNormOp o, SmallVector<Value> &out) {
  auto d0 = RankedTensorType::get({}, e.f64());
  Value sq;
  for (Value g : o.getGrads()) {
    auto gt = rtt(g);
    Value s = e.map1(RankedTensorType::get(gt.getShape(), e.f64()), {g}, [](Emit &q, ValueRange a) {
      Value v = q.convert(a[0], q.f64());
      return q.mul(v, v);
    });
    SmallVector<int64_t> all;
    for (int64_t i = 0; i < gt.getRank(); ++i)
      all.push_back(i);
    Value part = e.reduce(s, all, false, e.f64());
    sq =
        sq ? e.map1(d0, {sq, part}, [](Emit &q, ValueRange a) { return q.add(a[0], a[1]); }) : part;
  }
  if (!sq)
    sq = e.full(d0, e.cst(0.0, e.f64()));
  float maxNorm = o.getMaxNorm().convertToFloat();
  Value norm = e.map1(d0, {sq}, [](Emit &q, ValueRange a) { return q.sqrt(a[0]); });
  auto f0 = RankedTensorType::get({}, e.f32());
  Value coef = e.map1(f0, {norm, o.getFoundInf()}, [&](Emit &q, ValueRange a) {
    Value c = q.convert(q.div(q.cst((double)maxNorm, q.f64()), q.add(a[0], q.cst(1e-6, q.f64()))),
                        q.f32());
    Value apply = arith::AndIOp::create(
        q.b, q.loc, q.cmp(P::OLT, c, q.cstF(1)),
        arith::AndIOp::create(
            q.b, q.loc,
            arith::XOrIOp::create(q.b, q.loc, a[1], arith::ConstantIntOp::create(q.b, q.loc, 1, 1)),
            q.cmp(P::OLT, math::AbsFOp::create(q.b, q.loc, a[0]),
                  q.cst(std::numeric_limits<double>::infinity(), q.f64()))));
    return q.sel(apply, c, q.cstF(1));
  });
  for (auto [g, res] : llvm::zip(o.getGrads(), o.getClipped()))
    out.push_back(e.map1(cast<RankedTensorType>(res.getType()), {g, coef},
                         [](Emit &q, ValueRange a) { return q.mul(a[0], a[1]); }));
  out.push_back(e.map1(f0, {norm}, [](Emit &, ValueRange a) { return a[0]; }));
  return success();
}

LogicalResult Optimizers::sgd(SGDUpdateOp o, SmallVector<Value> &out) {
  float lr = o.getLr().convertToFloat(), mom = o.getMomentum().convertToFloat(),
        damp = o.getDampening().convertToFloat(), wd = o.getWeightDecay().convertToFloat();
  bool nesterov = o.getNesterov();
  auto pt = rtt(o.getParam());
  SmallVector<Value> ins = {o.getParam(), o.getGrad(), o.getStep(), o.getFoundInf()};
  if (o.getMomentumBuf())
    ins.push_back(o.getMomentumBuf());
  SmallVector<Type> elts = {e.f32()};
  if (o.getMomentumBuf())
    elts.push_back(e.f32());
  auto r = e.map(pt.getShape(), elts, ins,
                 [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
                   Emit q{nb, nl};
                   Value p = a[0], d = a[1], found = a[3];
                   if (wd != 0.0f)
                     d = q.add(d, q.mul(q.cstF(wd), p));
                   Value nbuf;
                   if (mom != 0.0f) {
                     Value first =
                         q.cmpi(arith::CmpIPredicate::eq, a[2], q.cstI(0, a[2].getType()));
                     Value upd = q.add(q.mul(a[4], q.cstF(mom)), q.mul(q.cstF(1.0f - damp), d));
                     nbuf = q.sel(first, d, upd);
                     d = nesterov ? q.add(d, q.mul(q.cstF(mom), nbuf)) : nbuf;
                   }
                   Value np = q.add(p, q.mul(q.cstF(-lr), d));
                   SmallVector<Value> res = {q.sel(found, p, np)};
                   if (nbuf)
                     res.push_back(q.sel(found, a[4], nbuf));
                   return res;
                 });
  out.append(r.begin(), r.end());
  return success();
}

LogicalResult Optimizers::adam(AdamUpdateOp o, SmallVector<Value> &out) {
  double lr = o.getLr().convertToFloat(), b1 = o.getBeta1().convertToFloat(),
         b2 = o.getBeta2().convertToFloat(), eps = o.getEps().convertToFloat(),
         wd = o.getWeightDecay().convertToFloat();
  bool decoupled = o.getDecoupled(), hf = o.getMode() == AdamMode::hf;
  auto pt = rtt(o.getParam());
  // The step's scalars from the step counter (0-d tensors).
  auto scal = e.map({}, {e.f32(), e.f32(), e.f32()}, {o.getStep()},
                    [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
                      Emit q{nb, nl};
                      Value t = q.add(a[0], q.cstI(1, a[0].getType()));
                      Value p1 = powInt(q, b1, t), p2 = powInt(q, b2, t);
                      Value one = q.cst(1.0, q.f64());
                      if (hf) {
                        Value ac = q.sub(q.cstF(1), q.convert(p1, q.f32()));
                        Value bc = q.sub(q.cstF(1), q.convert(p2, q.f32()));
                        Value lrc = q.mul(q.cstF((float)lr), q.div(q.sqrt(bc), ac));
                        return {lrc, q.cstF(0), q.cstF(0)};
                      }
                      Value bc1 = q.sub(one, p1), bc2 = q.sub(one, p2);
                      Value stepSize = q.convert(q.div(q.cst(lr, q.f64()), bc1), q.f32());
                      Value bc2Sqrt = q.convert(q.sqrt(bc2), q.f32());
                      return {stepSize, bc2Sqrt, q.cstF(0)};
                    });
  float w1 = 1.0f - (float)b1, w2 = 1.0f - (float)b2;
  float decay = (float)(1.0 - lr * wd);
  auto r = e.map(pt.getShape(), {e.f32(), e.f32(), e.f32()},
                 {o.getParam(), o.getGrad(), o.getExpAvg(), o.getExpAvgSq(), o.getFoundInf(),
                  scal[0], scal[1]},
                 [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
                   Emit q{nb, nl};
                   Value p = a[0], g = a[1], m = a[2], v = a[3], found = a[4];
                   Value np, nm, nv;
                   if (hf) {
                     nm = q.add(q.mul(q.cstF((float)b1), m), q.mul(q.cstF(w1), g));
                     nv = q.add(q.mul(q.cstF((float)b2), v), q.mul(q.mul(q.cstF(w2), g), g));
                     np = q.sub(p, q.div(q.mul(a[5], nm), q.add(q.sqrt(nv), q.cstF((float)eps))));
                     np = q.sub(np, q.mul(q.cstF((float)(lr * wd)), np));
                   } else {
                     if (wd != 0.0) {
                       if (decoupled)
                         p = q.mul(p, q.cstF(decay));
                       else
                         g = q.add(g, q.mul(q.cstF((float)wd), p));
                     }
                     // lerp as PyTorch (the weight < 0.5 form).
                     nm = w1 < 0.5f ? q.add(m, q.mul(q.cstF(w1), q.sub(g, m)))
                                    : q.sub(g, q.mul(q.sub(g, m), q.cstF(1.0f - w1)));
                     nv = q.add(q.mul(v, q.cstF((float)b2)), q.mul(q.mul(q.cstF(w2), g), g));
                     Value denom = q.add(q.div(q.sqrt(nv), a[6]), q.cstF((float)eps));
                     np = q.add(p, q.mul(q.neg(a[5]), q.div(nm, denom)));
                   }
                   return {q.sel(found, a[0], np), q.sel(found, m, nm), q.sel(found, v, nv)};
                 });
  out.append(r.begin(), r.end());
  return success();
}

LogicalResult Optimizers::updateScale(UpdateScaleOp o, SmallVector<Value> &out) {
  float growth = o.getGrowthFactor().convertToFloat(),
        backoff = o.getBackoffFactor().convertToFloat(),
        minScale = o.getMinScale().convertToFloat();
  int64_t interval = o.getGrowthInterval(), hyst = std::max<int64_t>(1, o.getHysteresis());
  if (minScale > 0.0f && o.getOnMinScale() == OnMinScale::error)
    return refuse("min_scale with on_min_scale = error stops the run at the floor, which a "
                  "linalg step cannot do (use on-min-scale=warn)");
  auto r = e.map({}, {e.f32(), b.getI64Type(), b.getI64Type()},
                 {o.getScale(), o.getGrowthTracker(), o.getHysteresisLeft(), o.getFoundInf()},
                 [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
                   Emit q{nb, nl};
                   Type i64 = nb.getI64Type();
                   Value scale = a[0], tracker = a[1], left = a[2], found = a[3];
                   using IP = arith::CmpIPredicate;
                   // Overflow: back off unless hysteresis tolerates it.
                   Value backNow = q.cstI(hyst <= 1 ? 1 : 0, nb.getI1Type());
                   backNow =
                       arith::OrIOp::create(nb, nl, backNow, q.cmpi(IP::sle, left, q.cstI(1, i64)));
                   Value next = q.mul(scale, q.cstF(backoff));
                   next = q.sel(q.cmp(P::OLT, next, q.cstF(minScale)), q.cstF(minScale), next);
                   Value fScale = q.sel(backNow, next, scale);
                   Value fLeft = q.sel(backNow, left, q.sub(left, q.cstI(1, i64)));
                   // A clean step: grow after `interval` of them, if finite.
                   Value succ = q.add(tracker, q.cstI(1, i64));
                   Value grow = q.cmpi(IP::eq, succ, q.cstI(interval, i64));
                   Value grown = q.mul(scale, q.cstF(growth));
                   Value finite = q.cmp(P::OLT, math::AbsFOp::create(nb, nl, grown),
                                        q.cstF(std::numeric_limits<float>::infinity()));
                   Value cScale = q.sel(arith::AndIOp::create(nb, nl, grow, finite), grown, scale);
                   Value cTracker = q.sel(grow, q.cstI(0, i64), succ);
                   Value cLeft = q.sel(grow, q.cstI(hyst, i64), left);
                   return {q.sel(found, fScale, cScale), q.sel(found, q.cstI(0, i64), cTracker),
                           q.sel(found, fLeft, cLeft)};
                 });
  out.append(r.begin(), r.end());
  return success();
}

void mlir::amp::linalg_lowering::populateOptimizerLowerings(LoweringSet &set) {
  set.addMember(&Optimizers::unscale);
  set.addMember(&Optimizers::clipGradNorm);
  set.addMember(&Optimizers::sgd);
  set.addMember(&Optimizers::adam);
  set.addMember(&Optimizers::updateScale);
  set.add<StepCountOp>([](OpLowering &l, Operation *op, SmallVector<Value> &out) {
    auto o = cast<StepCountOp>(op);
    out.push_back(
        l.e.map1(l.resultType(), {o.getStep(), o.getFoundInf()}, [](Emit &x, ValueRange a) {
          Value one = x.cstI(1, a[0].getType());
          return x.sel(a[1], a[0], x.add(a[0], one));
        }));
    return success();
  });
  set.add<MicroStepOp>([](OpLowering &l, Operation *op, SmallVector<Value> &out) {
    auto o = cast<MicroStepOp>(op);
    int64_t every = o.getEvery();
    auto r = l.e.map({}, {l.b.getI1Type(), l.b.getI64Type()}, {o.getMicroStep()},
                     [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
                       Emit x{nb, nl};
                       Value next = x.add(a[0], x.cstI(1, a[0].getType()));
                       Value apply =
                           x.cmpi(arith::CmpIPredicate::eq, next, x.cstI(every, a[0].getType()));
                       return {apply, x.sel(apply, x.cstI(0, a[0].getType()), next)};
                     });
    out.append(r.begin(), r.end());
    return success();
  });
}
