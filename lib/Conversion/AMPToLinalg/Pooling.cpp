//===- Pooling.cpp - max pooling and its gradient to linalg -----------------===//
//
// The maxima and ONNX's row-major indices of each window's first maximum;
// the gradient gathers over the windows holding each position.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::linalg_lowering;

namespace {

// linalg.index `dim` as an i64.
Value loopIndex(OpBuilder &b, Location l, int64_t dim) {
  return arith::IndexCastOp::create(b, l, b.getI64Type(), linalg::IndexOp::create(b, l, dim));
}

/// The family's ops (see Lowering.h).
struct Pooling : OpLowering {
  using OpLowering::OpLowering;
  LogicalResult maxPool(MaxPoolOp o, SmallVector<Value> &out);
  LogicalResult maxPoolGrad(MaxPoolGradOp o, SmallVector<Value> &out);
};

} // namespace

// Max pooling: the maxima (exact in the element type), and the flat index
// of each window's first maximum (ONNX's row-major Indices) as a min over
// the window's positions holding the maximum.
LogicalResult Pooling::maxPool(MaxPoolOp o, SmallVector<Value> &out) {
  auto xt = rtt(o.getX());
  if (!isa<FloatType>(xt.getElementType()))
    return refuse("integer max pooling");
  int64_t S = xt.getRank() - 2;
  Window w;
  if (failed(windowOf(op, S, {}, w)))
    return failure();
  double ninf = -std::numeric_limits<double>::infinity();
  Value xp = pad(o.getX(), w, ninf);
  RankedTensorType rt = resultType();
  MLIRContext *ctx = b.getContext();
  auto d = [&](int64_t i) { return b.getAffineDimExpr(i); };
  // dims: 0 n, 1 c, 2.. o (S), 2+S.. k (S)
  int64_t loops = 2 + 2 * S;
  SmallVector<AffineExpr> xe = {d(0), d(1)}, oe = {d(0), d(1)};
  for (int64_t i = 0; i < S; ++i) {
    xe.push_back(d(2 + i) * w.strides[i] + d(2 + S + i) * w.dilations[i]);
    oe.push_back(d(2 + i));
  }
  SmallVector<Iter> iters(2 + S, Iter::parallel);
  iters.append(S, Iter::reduction);
  AffineMap xm = AffineMap::get(loops, 0, xe, ctx), om = AffineMap::get(loops, 0, oe, ctx);
  // The window's loops get their range from a shape-only operand, as
  // linalg's pooling ops.
  SmallVector<AffineExpr> ke;
  for (int64_t i = 0; i < S; ++i)
    ke.push_back(d(2 + S + i));
  AffineMap km = AffineMap::get(loops, 0, ke, ctx);
  Value win = e.empty(RankedTensorType::get(w.kernel, b.getI1Type()));
  Type elt = xt.getElementType();
  Value vals = e.generic({rt}, {xp, win}, {e.full(rt, e.cst(ninf, elt))}, {xm, km, om}, iters,
                         [](OpBuilder &nb, Location nl, ValueRange a) {
                           linalg::YieldOp::create(
                               nb, nl, arith::MaximumFOp::create(nb, nl, a[2], a[0]).getResult());
                         })[0];
  out.push_back(vals);
  if (o.getIndices().use_empty()) {
    out.push_back(Value());
    return success();
  }
  auto it = cast<RankedTensorType>(o.getIndices().getType());
  Value init = e.full(it, e.cstI(std::numeric_limits<int64_t>::max(), b.getI64Type()));
  SmallVector<int64_t> dims(xt.getShape());
  Value idx = e.generic({it}, {xp, vals, win}, {init}, {xm, om, km, om}, iters,
                        [&](OpBuilder &nb, Location nl, ValueRange a) {
                          Emit q{nb, nl};
                          Type i64 = nb.getI64Type();
                          auto index = [&](int64_t dim) { return loopIndex(nb, nl, dim); };
                          // flat = ((n * C + c) * D1 + h1) * D2 + h2 ..., h = o * s + k * d - pad.
                          Value flat = q.add(q.mul(index(0), q.cstI(dims[1], i64)), index(1));
                          Value inside = arith::ConstantIntOp::create(nb, nl, 1, 1);
                          for (int64_t i = 0; i < S; ++i) {
                            Value h = q.add(q.mul(index(2 + i), q.cstI(w.strides[i], i64)),
                                            q.mul(index(2 + S + i), q.cstI(w.dilations[i], i64)));
                            h = q.sub(h, q.cstI(w.padLo[i], i64));
                            Value ok = arith::AndIOp::create(
                                nb, nl, q.cmpi(arith::CmpIPredicate::sge, h, q.cstI(0, i64)),
                                q.cmpi(arith::CmpIPredicate::slt, h, q.cstI(dims[2 + i], i64)));
                            inside = arith::AndIOp::create(nb, nl, inside, ok);
                            flat = q.add(q.mul(flat, q.cstI(dims[2 + i], i64)), h);
                          }
                          // The maximum (or a NaN, which the maximum then is).
                          Value hit =
                              arith::AndIOp::create(nb, nl, inside, q.cmp(P::UEQ, a[0], a[1]));
                          Value m = arith::MinSIOp::create(nb, nl, a[3], flat);
                          linalg::YieldOp::create(nb, nl, q.sel(hit, m, a[3]));
                        })[0];
  out.push_back(idx);
  return success();
}

// dx[n, c, i..] = sum over the windows holding i of dy where the window's
// index names i: a gather over at most prod(k) windows per position (the
// window comes from the max_pool that made the indices).
LogicalResult Pooling::maxPoolGrad(MaxPoolGradOp o, SmallVector<Value> &out) {
  // lowerFunction copied the forward max_pool's window onto this op.
  Operation *fwd = op;
  if (!op->hasAttr("kernel_shape"))
    return refuse("indices that no amp.max_pool of this function made (the window is "
                  "unknown)");
  auto xt = rtt(o.getX()), yt = rtt(o.getDy());
  int64_t S = xt.getRank() - 2;
  Window w;
  if (failed(windowOf(fwd, S, {}, w)))
    return failure();
  RankedTensorType rt = resultType();
  // Windows that tile the input exactly (kernel = stride, no padding or
  // dilation, sizes multiples of the stride: 2x2 pooling of even sizes):
  // each position is in one window, read by an affine map (floordiv).
  bool tiles = true;
  for (int64_t i = 0; i < S; ++i)
    tiles &= w.kernel[i] == w.strides[i] && w.padLo[i] == 0 && w.padHi[i] == 0 &&
             w.dilations[i] == 1 && xt.getDimSize(2 + i) == yt.getDimSize(2 + i) * w.strides[i];
  if (tiles) {
    int64_t r = 2 + S;
    SmallVector<AffineExpr> ye = {b.getAffineDimExpr(0), b.getAffineDimExpr(1)};
    for (int64_t i = 0; i < S; ++i)
      ye.push_back(b.getAffineDimExpr(2 + i).floorDiv(w.strides[i]));
    AffineMap ym = AffineMap::get(r, 0, ye, b.getContext());
    SmallVector<int64_t> dims(xt.getShape());
    out.push_back(e.generic(
        {rt}, {o.getDy(), o.getIndices()}, {e.empty(rt)}, {ym, ym, b.getMultiDimIdentityMap(r)},
        SmallVector<Iter>(r, Iter::parallel), [&](OpBuilder &nb, Location nl, ValueRange a) {
          Emit q{nb, nl};
          Type i64 = nb.getI64Type();
          auto index = [&](int64_t dim) { return loopIndex(nb, nl, dim); };
          Value flat = q.add(q.mul(index(0), q.cstI(dims[1], i64)), index(1));
          for (int64_t i = 0; i < S; ++i)
            flat = q.add(q.mul(flat, q.cstI(dims[2 + i], i64)), index(2 + i));
          Value hit = q.cmpi(arith::CmpIPredicate::eq, a[1], flat);
          Value zero = q.cst(0.0, rt.getElementType());
          linalg::YieldOp::create(nb, nl, q.sel(hit, q.convert(a[0], rt.getElementType()), zero));
        })[0]);
    return success();
  }
  auto accT = RankedTensorType::get(xt.getShape(), e.f32());
  // dims: 0 n, 1 c, 2.. i (S), 2+S.. k (S); dy and indices read by index.
  int64_t loops = 2 + 2 * S;
  SmallVector<Iter> iters(2 + S, Iter::parallel);
  iters.append(S, Iter::reduction);
  SmallVector<AffineExpr> oe;
  for (int64_t i = 0; i < 2 + S; ++i)
    oe.push_back(b.getAffineDimExpr(i));
  // A dummy input giving the k loops their range.
  SmallVector<int64_t> ks(w.kernel);
  SmallVector<AffineExpr> ke;
  for (int64_t i = 0; i < S; ++i)
    ke.push_back(b.getAffineDimExpr(2 + S + i));
  Value kshape = e.empty(RankedTensorType::get(ks, b.getI1Type()));
  MLIRContext *ctx = b.getContext();
  Value dy = o.getDy(), ind = o.getIndices();
  SmallVector<int64_t> dims(xt.getShape()), ydims(yt.getShape());
  Value acc = e.generic(
      {accT}, {kshape}, {e.full(accT, e.cstF(0))},
      {AffineMap::get(loops, 0, ke, ctx), AffineMap::get(loops, 0, oe, ctx)}, iters,
      [&](OpBuilder &nb, Location nl, ValueRange a) {
        Emit q{nb, nl};
        Type i64 = nb.getI64Type();
        auto index = [&](int64_t dim) { return loopIndex(nb, nl, dim); };
        Value ok = arith::ConstantIntOp::create(nb, nl, 1, 1);
        Value flat = q.add(q.mul(index(0), q.cstI(dims[1], i64)), index(1));
        SmallVector<Value> at = {linalg::IndexOp::create(nb, nl, 0),
                                 linalg::IndexOp::create(nb, nl, 1)};
        for (int64_t i = 0; i < S; ++i) {
          Value pos = index(2 + i);
          flat = q.add(q.mul(flat, q.cstI(dims[2 + i], i64)), pos);
          // t = i + pad - k * d must be o * s with 0 <= o < O.
          Value t = q.sub(q.add(pos, q.cstI(w.padLo[i], i64)),
                          q.mul(index(2 + S + i), q.cstI(w.dilations[i], i64)));
          Value s = q.cstI(w.strides[i], i64);
          Value oc = arith::DivSIOp::create(nb, nl, t, s);
          Value good = q.cmpi(arith::CmpIPredicate::sge, t, q.cstI(0, i64));
          good =
              arith::AndIOp::create(nb, nl, good,
                                    q.cmpi(arith::CmpIPredicate::eq,
                                           arith::RemSIOp::create(nb, nl, t, s), q.cstI(0, i64)));
          good = arith::AndIOp::create(
              nb, nl, good, q.cmpi(arith::CmpIPredicate::slt, oc, q.cstI(ydims[2 + i], i64)));
          ok = arith::AndIOp::create(nb, nl, ok, good);
          Value safe = q.sel(good, oc, q.cstI(0, i64));
          at.push_back(arith::IndexCastOp::create(nb, nl, nb.getIndexType(), safe));
        }
        Value g = tensor::ExtractOp::create(nb, nl, dy, at);
        Value id = tensor::ExtractOp::create(nb, nl, ind, at);
        Value hit = arith::AndIOp::create(nb, nl, ok, q.cmpi(arith::CmpIPredicate::eq, id, flat));
        Value v = q.sel(hit, q.convert(g, q.f32()), q.cstF(0));
        linalg::YieldOp::create(nb, nl, q.add(a[1], v));
      })[0];
  out.push_back(e.map1(rt, {acc}, [](Emit &, ValueRange a) { return a[0]; }));
  return success();
}

void mlir::amp::linalg_lowering::populatePoolingLowerings(LoweringSet &set) {
  set.addMember(&Pooling::maxPool);
  set.addMember(&Pooling::maxPoolGrad);
}
