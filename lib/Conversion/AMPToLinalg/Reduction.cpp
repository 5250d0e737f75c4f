//===- Reduction.cpp - reductions, softmax, normalisation to linalg ---------===//
//
// The ops AMP keeps in fp32: reductions, softmax, layer and batch norm and
// their gradients, in f32 with f64 sums where the runtime sums in double.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::linalg_lowering;

namespace {

/// The family's ops (see Lowering.h).
struct Reductions : OpLowering {
  using OpLowering::OpLowering;
  LogicalResult reduceOp(Operation *o, SmallVector<Value> &out);
  LogicalResult softmaxGrad(SoftmaxGradOp o, SmallVector<Value> &out);
  LogicalResult layerNorm(LayerNormOp o, SmallVector<Value> &out);
  LogicalResult layerNormGrad(LayerNormGradOp o, SmallVector<Value> &out);
  LogicalResult batchNorm(BatchNormOp o, SmallVector<Value> &out);
};

} // namespace

LogicalResult Reductions::reduceOp(Operation *o, SmallVector<Value> &out) {
  Value x = o->getOperand(0);
  auto xt = rtt(x);
  int64_t r = xt.getRank();
  RankedTensorType rt = resultType();
  SmallVector<int64_t> axes;
  bool keep = true;
  if (isa<GlobalAveragePoolOp>(o)) {
    for (int64_t i = 2; i < r; ++i)
      axes.push_back(i);
  } else {
    auto a = o->getAttrOfType<DenseI64ArrayAttr>("axes");
    keep = !o->getAttrOfType<BoolAttr>("keepdims") ||
           o->getAttrOfType<BoolAttr>("keepdims").getValue();
    auto noop = o->getAttrOfType<BoolAttr>("noop_with_empty_axes");
    if (!a || a.empty()) {
      if (noop && noop.getValue()) {
        out.push_back(x);
        return success();
      }
      for (int64_t i = 0; i < r; ++i)
        axes.push_back(i);
    } else {
      for (int64_t v : a.asArrayRef())
        axes.push_back(normAxis(v, r));
    }
  }
  bool isMax = isa<ReduceMaxOp>(o);
  bool isFloat = isa<FloatType>(xt.getElementType());
  if (!isFloat && !isa<ReduceSumOp>(o))
    return refuse("an integer reduction other than a sum");
  if (isMax) {
    Value m = e.reduce(toF32Tensor(x), axes, keep, e.f32(), true);
    out.push_back(e.map1(rt, {m}, [](Emit &, ValueRange a) { return a[0]; }));
    return success();
  }
  // Sums in double, as the runtime's (f32 for f16 / bf16 inputs: the same
  // rounding once stored, at half the cost, is not exact: keep double).
  Type acc = isFloat ? e.f64() : b.getI64Type();
  Value s = e.reduce(x, axes, keep, acc);
  int64_t count = 1;
  for (int64_t v : axes)
    count *= xt.getDimSize(v);
  bool mean = isa<ReduceMeanOp, GlobalAveragePoolOp>(o);
  out.push_back(e.map1(
      rt, {s},
      [&](Emit &q, ValueRange a) {
        return mean ? q.div(a[0], q.cst((double)count, q.f64())) : a[0];
      },
      false));
  return success();
}

// Softmax as the runtime: the row's maximum, exp(x - max) in f32, the sum in
// double, y = e / sum (log: x - max - log(sum)); rounded once.
LogicalResult OpLowering::softmax(Value x, int64_t axis, bool log, RankedTensorType rt,
                                  SmallVector<Value> &out) {
  auto xt = rtt(x);
  axis = normAxis(axis, xt.getRank());
  Value xf = toF32Tensor(x);
  Value m = e.reduce(xf, {axis}, true, e.f32(), true);
  auto ft = RankedTensorType::get(xt.getShape(), e.f32());
  // A row of -inf has max -inf: x - max is NaN, as the runtime's.
  Value d = e.map1(ft, {xf, m}, [](Emit &q, ValueRange a) { return q.sub(a[0], a[1]); });
  Value ex = e.map1(ft, {d}, [](Emit &q, ValueRange a) { return q.exp(a[0]); });
  Value s = e.reduce(ex, {axis}, true, e.f64());
  if (log) {
    out.push_back(e.map1(rt, {d, s}, [](Emit &q, ValueRange a) {
      Value ls = q.log(q.convert(a[1], q.f32()));
      return q.sub(a[0], ls);
    }));
    return success();
  }
  out.push_back(e.map1(
      rt, {ex, s}, [](Emit &q, ValueRange a) { return q.div(q.convert(a[0], q.f64()), a[1]); },
      false));
  return success();
}

LogicalResult Reductions::softmaxGrad(SoftmaxGradOp o, SmallVector<Value> &out) {
  Value y = o.getY(), dy = o.getDy();
  auto yt = rtt(y);
  int64_t axis = normAxis(o.getAxis(), yt.getRank());
  bool log = o.getLog();
  auto dt = RankedTensorType::get(yt.getShape(), e.f64());
  Value prod = log ? dy : e.map1(dt, {dy, y}, [](Emit &q, ValueRange a) {
    return q.mul(q.convert(a[0], q.f64()), q.convert(a[1], q.f64()));
  });
  Value dot = e.reduce(prod, {axis}, true, e.f64());
  out.push_back(e.map1(resultType(), {y, dy, dot}, [&](Emit &q, ValueRange a) {
    Value yv = q.convert(a[0], q.f64()), g = q.convert(a[1], q.f64());
    if (log)
      return q.sub(g, q.mul(q.convert(q.exp(q.convert(yv, q.f32())), q.f64()), a[2]));
    return q.mul(yv, q.sub(g, a[2]));
  }));
  return success();
}

LogicalResult Reductions::layerNorm(LayerNormOp o, SmallVector<Value> &out) {
  Value x = o.getX();
  auto xt = rtt(x);
  int64_t r = xt.getRank(), axis = normAxis(o.getAxis(), r);
  SmallVector<int64_t> axes;
  int64_t cols = 1;
  for (int64_t i = axis; i < r; ++i) {
    axes.push_back(i);
    cols *= xt.getDimSize(i);
  }
  double eps = o.getEpsilon().convertToDouble();
  auto dt = RankedTensorType::get(xt.getShape(), e.f64());
  Value sum = e.reduce(x, axes, true, e.f64());
  auto st = cast<RankedTensorType>(sum.getType());
  Value mu = e.map1(
      st, {sum}, [&](Emit &q, ValueRange a) { return q.div(a[0], q.cst((double)cols, q.f64())); });
  Value sq = e.map1(dt, {x, mu}, [](Emit &q, ValueRange a) {
    Value dv = q.sub(q.convert(a[0], q.f64()), a[1]);
    return q.mul(dv, dv);
  });
  Value var = e.reduce(sq, axes, true, e.f64());
  Value rstd = e.map1(st, {var}, [&](Emit &q, ValueRange a) {
    return q.div(q.cst(1.0, q.f64()),
                 q.sqrt(q.add(q.div(a[0], q.cst((double)cols, q.f64())), q.cst(eps, q.f64()))));
  });
  SmallVector<Value> ins = {x, mu, rstd, o.getScale()};
  if (o.getBias())
    ins.push_back(o.getBias());
  out.push_back(e.map1(
      resultType(0), ins,
      [](Emit &q, ValueRange a) {
        Value v =
            q.mul(q.mul(q.sub(q.convert(a[0], q.f64()), a[1]), a[2]), q.convert(a[3], q.f64()));
        if (a.size() > 4)
          v = q.add(v, q.convert(a[4], q.f64()));
        return v;
      },
      false));
  out.push_back(e.map1(resultType(1), {mu}, [](Emit &, ValueRange a) { return a[0]; }, false));
  out.push_back(e.map1(resultType(2), {rstd}, [](Emit &, ValueRange a) { return a[0]; }, false));
  return success();
}

LogicalResult Reductions::layerNormGrad(LayerNormGradOp o, SmallVector<Value> &out) {
  Value x = o.getX(), dy = o.getDy();
  auto xt = rtt(x);
  int64_t r = xt.getRank(), axis = normAxis(o.getAxis(), r);
  SmallVector<int64_t> rows, colsAxes;
  int64_t cols = 1;
  for (int64_t i = 0; i < r; ++i) {
    if (i < axis)
      rows.push_back(i);
    else {
      colsAxes.push_back(i);
      cols *= xt.getDimSize(i);
    }
  }
  auto dt = RankedTensorType::get(xt.getShape(), e.f64());
  // xhat = (x - mu) * rstd and dxhat = dy * scale, in double.
  auto pair = e.map(
      xt.getShape(), {e.f64(), e.f64()}, {x, o.getMean(), o.getInvStdDev(), dy, o.getScale()},
      [](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
        Emit q{nb, nl};
        auto f = [&](Value v) { return q.convert(v, q.f64()); };
        Value xh = q.mul(q.sub(f(a[0]), f(a[1])), f(a[2]));
        return {xh, q.mul(f(a[3]), f(a[4]))};
      },
      false);
  Value xhat = pair[0], dxhat = pair[1];
  Value m1 = e.reduce(dxhat, colsAxes, true, e.f64());
  Value m2 =
      e.reduce(e.map1(dt, {dxhat, xhat}, [](Emit &q, ValueRange a) { return q.mul(a[0], a[1]); }),
               colsAxes, true, e.f64());
  if (!o.getDx().use_empty())
    out.push_back(e.map1(
        resultType(0), {o.getInvStdDev(), dxhat, xhat, m1, m2},
        [&](Emit &q, ValueRange a) {
          Value n = q.cst((double)cols, q.f64());
          Value rs = q.convert(a[0], q.f64());
          return q.mul(rs, q.sub(q.sub(a[1], q.div(a[3], n)), q.mul(a[2], q.div(a[4], n))));
        },
        false));
  else
    out.push_back(Value());
  // dscale = sum over rows of dy * xhat, dbias = sum of dy; shaped as scale.
  auto sum2 = [&](Value v, unsigned res) {
    Value s = e.reduce(v, rows, false, e.f64());
    Value sh = e.reshape(s, cast<RankedTensorType>(op->getResult(res).getType()).getShape());
    return e.map1(resultType(res), {sh}, [](Emit &, ValueRange a) { return a[0]; }, false);
  };
  out.push_back(o.getDscale().use_empty() ? Value()
                                          : sum2(e.map1(
                                                     dt, {dy, xhat},
                                                     [](Emit &q, ValueRange a) {
                                                       return q.mul(q.convert(a[0], q.f64()), a[1]);
                                                     },
                                                     false),
                                                 1));
  out.push_back(o.getDbias().use_empty() ? Value() : sum2(dy, 2));
  return success();
}

LogicalResult Reductions::batchNorm(BatchNormOp o, SmallVector<Value> &out) {
  Value x = o.getX();
  auto xt = rtt(x);
  int64_t r = xt.getRank(), C = xt.getDimSize(1);
  double eps = o.getEpsilon().convertToDouble(), mom = o.getMomentum().convertToDouble();
  SmallVector<int64_t> axes = {0}, chShape = {C};
  int64_t m = xt.getDimSize(0);
  for (int64_t i = 2; i < r; ++i) {
    axes.push_back(i);
    chShape.push_back(1);
    m *= xt.getDimSize(i);
  }
  Value mu, var;
  if (o.getTrainingMode()) {
    Value s = e.reduce(x, axes, false, e.f64());
    mu = e.map1(RankedTensorType::get({C}, e.f64()), {s},
                [&](Emit &q, ValueRange a) { return q.div(a[0], q.cst((double)m, q.f64())); });
    Value mub = e.reshape(mu, chShape);
    Value sq = e.map1(
        RankedTensorType::get(xt.getShape(), e.f64()), {x, mub},
        [](Emit &q, ValueRange a) {
          Value dv = q.sub(q.convert(a[0], q.f64()), a[1]);
          return q.mul(dv, dv);
        },
        false);
    Value v = e.reduce(sq, axes, false, e.f64());
    var = e.map1(RankedTensorType::get({C}, e.f64()), {v},
                 [&](Emit &q, ValueRange a) { return q.div(a[0], q.cst((double)m, q.f64())); });
  } else {
    mu = e.map1(
        RankedTensorType::get({C}, e.f64()), {o.getMean()},
        [](Emit &q, ValueRange a) { return q.convert(a[0], q.f64()); }, false);
    var = e.map1(
        RankedTensorType::get({C}, e.f64()), {o.getVar()},
        [](Emit &q, ValueRange a) { return q.convert(a[0], q.f64()); }, false);
  }
  Value inv = e.map1(RankedTensorType::get({C}, e.f64()), {var}, [&](Emit &q, ValueRange a) {
    return q.div(q.cst(1.0, q.f64()), q.sqrt(q.add(a[0], q.cst(eps, q.f64()))));
  });
  auto ch = [&](Value v) { return e.reshape(v, chShape); };
  out.push_back(e.map1(
      resultType(0), {x, ch(mu), ch(inv), ch(o.getScale()), ch(o.getBias())},
      [](Emit &q, ValueRange a) {
        auto f = [&](Value v) { return q.convert(v, q.f64()); };
        return q.add(q.mul(q.mul(q.sub(f(a[0]), a[1]), a[2]), f(a[3])), f(a[4]));
      },
      false));
  if (o.getTrainingMode()) {
    auto run = [&](Value old, Value stat, unsigned res) {
      return e.map1(
          resultType(res), {old, stat},
          [&](Emit &q, ValueRange a) {
            Value mm = q.cst(mom, q.f64());
            return q.add(q.mul(mm, q.convert(a[0], q.f64())),
                         q.mul(q.cst(1.0 - mom, q.f64()), a[1]));
          },
          false);
    };
    out.push_back(run(o.getMean(), mu, 1));
    out.push_back(run(o.getVar(), var, 2));
  } else {
    out.push_back(o.getMean());
    out.push_back(o.getVar());
  }
  return success();
}

void mlir::amp::linalg_lowering::populateReductionLowerings(LoweringSet &set) {
  set.add<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, GlobalAveragePoolOp>(
      [](OpLowering &l, Operation *op, SmallVector<Value> &out) {
        return Reductions(op).reduceOp(op, out);
      });
  set.add<SoftmaxOp>([](OpLowering &l, Operation *op, SmallVector<Value> &out) {
    auto o = cast<SoftmaxOp>(op);
    return l.softmax(o.getInput(), o.getAxis(), false, l.resultType(), out);
  });
  set.add<LogSoftmaxOp>([](OpLowering &l, Operation *op, SmallVector<Value> &out) {
    auto o = cast<LogSoftmaxOp>(op);
    return l.softmax(o.getInput(), o.getAxis(), true, l.resultType(), out);
  });
  set.addMember(&Reductions::softmaxGrad);
  set.addMember(&Reductions::layerNorm);
  set.addMember(&Reductions::layerNormGrad);
  set.addMember(&Reductions::batchNorm);
}
