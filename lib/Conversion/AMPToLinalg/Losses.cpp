//===- Losses.cpp - cross entropy and NLL to linalg -------------------------===//
//
// Cross entropy / NLL and their gradients, as the runtime computes them.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::linalg_lowering;

namespace {

// Cross entropy / NLL: per element l = -w[label] * logp[label] (0 for the
// ignored label), reduced by none, sum or the weighted mean. The pick is a
// sum over the classes of a select (no gather).
struct LossParts {
  Value picked, weight; // [N, D..] f64: w[label] * logp[label], w[label]
};

LossParts pickLabels(Emit &e, Value logp, Value labels, Value weights,
                     std::optional<int64_t> ignore) {
  OpBuilder &b = e.b;
  auto lt = rtt(logp);
  int64_t r = lt.getRank();
  SmallVector<int64_t> outShape;
  SmallVector<AffineExpr> oe, le;
  SmallVector<Iter> iters;
  for (int64_t i = 0; i < r; ++i) {
    iters.push_back(i == 1 ? Iter::reduction : Iter::parallel);
    if (i != 1) {
      outShape.push_back(lt.getDimSize(i));
      oe.push_back(b.getAffineDimExpr(i));
    }
  }
  MLIRContext *ctx = b.getContext();
  auto ot = RankedTensorType::get(outShape, e.f64());
  SmallVector<Value> ins = {logp, labels};
  SmallVector<AffineMap> maps = {b.getMultiDimIdentityMap(r), AffineMap::get(r, 0, oe, ctx)};
  if (weights) {
    ins.push_back(weights);
    maps.push_back(AffineMap::get(r, 0, {b.getAffineDimExpr(1)}, ctx));
  }
  maps.push_back(AffineMap::get(r, 0, oe, ctx));
  maps.push_back(AffineMap::get(r, 0, oe, ctx));
  Value z = e.full(ot, e.cst(0.0, e.f64()));
  auto res =
      e.generic({ot, ot}, ins, {z, z}, maps, iters, [&](OpBuilder &nb, Location nl, ValueRange a) {
        Emit q{nb, nl};
        Type lt = a[1].getType();
        Value c = arith::IndexCastOp::create(nb, nl, lt, linalg::IndexOp::create(nb, nl, 1));
        Value hit = q.cmpi(arith::CmpIPredicate::eq, c, a[1]);
        if (ignore)
          hit = arith::AndIOp::create(nb, nl, hit,
                                      q.cmpi(arith::CmpIPredicate::ne, a[1], q.cstI(*ignore, lt)));
        Value w = weights ? q.convert(a[2], q.f64()) : q.cst(1.0, q.f64());
        Value lp = q.mul(w, q.convert(a[0], q.f64()));
        unsigned k = weights ? 3 : 2;
        Value zero = q.cst(0.0, q.f64());
        linalg::YieldOp::create(
            nb, nl,
            ValueRange{q.add(a[k], q.sel(hit, lp, zero)), q.add(a[k + 1], q.sel(hit, w, zero))});
      });
  return {res[0], res[1]};
}

/// The family's ops (see Lowering.h).
struct Losses : OpLowering {
  using OpLowering::OpLowering;
  LogicalResult lossOp(SmallVector<Value> &out);
  LogicalResult lossGrad(SmallVector<Value> &out);
};

} // namespace

LogicalResult Losses::lossOp(SmallVector<Value> &out) {
  bool sce = isa<SoftmaxCrossEntropyLossOp>(op);
  Value scores = op->getOperand(0), labels = op->getOperand(1);
  Value weights = op->getNumOperands() > 2 ? op->getOperand(2) : Value();
  auto red = op->getAttrOfType<ReductionAttr>("reduction");
  Reduction reduction = red ? red.getValue() : Reduction::mean;
  std::optional<int64_t> ignore;
  if (auto ig = op->getAttrOfType<IntegerAttr>("ignore_index"))
    ignore = ig.getInt();
  Value logp = scores;
  if (sce) {
    SmallVector<Value> lp;
    auto lpt = cast<RankedTensorType>(op->getResult(1).getType());
    if (failed(softmax(scores, 1, true, lpt, lp)))
      return failure();
    logp = lp[0];
  }
  LossParts p = pickLabels(e, logp, labels, weights, ignore);
  RankedTensorType rt = resultType(0);
  if (reduction == Reduction::none) {
    out.push_back(e.map1(rt, {p.picked}, [](Emit &q, ValueRange a) { return q.neg(a[0]); }, false));
  } else {
    auto pt = rtt(p.picked);
    SmallVector<int64_t> all;
    for (int64_t i = 0; i < pt.getRank(); ++i)
      all.push_back(i);
    Value s = e.reduce(p.picked, all, false, e.f64());
    if (reduction == Reduction::sum) {
      out.push_back(e.map1(rt, {s}, [](Emit &q, ValueRange a) { return q.neg(a[0]); }, false));
    } else {
      Value ws = e.reduce(p.weight, all, false, e.f64());
      out.push_back(e.map1(
          rt, {s, ws}, [](Emit &q, ValueRange a) { return q.neg(q.div(a[0], a[1])); }, false));
    }
  }
  if (sce)
    out.push_back(logp);
  return success();
}

LogicalResult Losses::lossGrad(SmallVector<Value> &out) {
  bool sce = isa<SoftmaxCrossEntropyLossGradOp>(op);
  // (log_prob | input, labels, [weights], dloss)
  Value in = op->getOperand(0), labels = op->getOperand(1);
  bool hasW = op->getNumOperands() == 4;
  Value weights = hasW ? op->getOperand(2) : Value();
  Value dloss = op->getOperand(hasW ? 3 : 2);
  auto red = op->getAttrOfType<ReductionAttr>("reduction");
  Reduction reduction = red ? red.getValue() : Reduction::mean;
  std::optional<int64_t> ignore;
  if (auto ig = op->getAttrOfType<IntegerAttr>("ignore_index"))
    ignore = ig.getInt();
  auto it = rtt(in);
  int64_t r = it.getRank();
  // The divisor of the mean: the summed weights of the labels that count.
  Value denom;
  if (reduction == Reduction::mean) {
    LossParts p = pickLabels(e, in, labels, weights, ignore);
    SmallVector<int64_t> all;
    for (int64_t i = 0; i < r - 1; ++i)
      all.push_back(i);
    denom = e.reduce(p.weight, all, false, e.f64());
  }
  MLIRContext *ctx = b.getContext();
  SmallVector<AffineExpr> le;
  for (int64_t i = 0; i < r; ++i)
    if (i != 1)
      le.push_back(b.getAffineDimExpr(i));
  SmallVector<Value> ins = {in, labels};
  SmallVector<AffineMap> maps = {b.getMultiDimIdentityMap(r), AffineMap::get(r, 0, le, ctx)};
  if (weights) {
    ins.push_back(weights);
    maps.push_back(AffineMap::get(r, 0, {b.getAffineDimExpr(1)}, ctx));
  }
  ins.push_back(dloss);
  maps.push_back(reduction == Reduction::none ? AffineMap::get(r, 0, le, ctx)
                                              : AffineMap::get(r, 0, {}, ctx));
  if (denom) {
    ins.push_back(denom);
    maps.push_back(AffineMap::get(r, 0, {}, ctx));
  }
  RankedTensorType rt = resultType();
  maps.push_back(b.getMultiDimIdentityMap(r));
  out.push_back(e.generic(
      {rt}, ins, {e.empty(rt)}, maps, SmallVector<Iter>(r, Iter::parallel),
      [&](OpBuilder &nb, Location nl, ValueRange a) {
        Emit q{nb, nl};
        Type lt = a[1].getType();
        Value c = arith::IndexCastOp::create(nb, nl, lt, linalg::IndexOp::create(nb, nl, 1));
        Value hit = q.cmpi(arith::CmpIPredicate::eq, c, a[1]);
        Value counts = arith::ConstantIntOp::create(nb, nl, 1, 1);
        if (ignore)
          counts = q.cmpi(arith::CmpIPredicate::ne, a[1], q.cstI(*ignore, lt));
        unsigned k = 2;
        // w[label]: the weight of this row's label (the pick over classes is
        // not available per element: the weight tensor read at the label).
        Value w = q.cst(1.0, q.f64());
        if (weights) {
          Value lab = q.sel(counts, a[1], q.cstI(0, lt));
          Value li = arith::IndexCastOp::create(nb, nl, nb.getIndexType(), lab);
          w = q.convert(tensor::ExtractOp::create(nb, nl, weights, ValueRange{li}), q.f64());
          ++k;
        }
        Value g = q.convert(a[k], q.f64());
        Value v = q.convert(a[0], q.f64());
        Value one = q.cst(1.0, q.f64()), zero = q.cst(0.0, q.f64());
        // d/dscores of -w logsoftmax[label] is w (softmax - onehot); of NLL's
        // -w input[label] it is -w onehot.
        Value base =
            sce ? q.sub(q.convert(q.exp(q.convert(v, q.f32())), q.f64()), q.sel(hit, one, zero))
                : q.sel(hit, q.cst(-1.0, q.f64()), zero);
        Value d = q.mul(q.mul(base, w), g);
        if (denom)
          d = q.div(d, a[k + 1]);
        d = q.sel(counts, d, zero);
        linalg::YieldOp::create(nb, nl, q.convert(d, rt.getElementType()));
      })[0]);
  return success();
}

void mlir::amp::linalg_lowering::populateLossLowerings(LoweringSet &set) {
  set.add<SoftmaxCrossEntropyLossOp, NLLLossOp>(
      [](OpLowering &l, Operation *op, SmallVector<Value> &out) { return Losses(op).lossOp(out); });
  set.add<SoftmaxCrossEntropyLossGradOp, NLLLossGradOp>(
      [](OpLowering &l, Operation *op, SmallVector<Value> &out) {
        return Losses(op).lossGrad(out);
      });
}
