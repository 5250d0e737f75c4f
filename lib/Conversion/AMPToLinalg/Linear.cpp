//===- Linear.cpp - products and convolutions to linalg ---------------------===//
//
// gemm and matmul as contractions with f32 accumulators, the epilogue
// (alpha, beta * C, bias) in f32 and one rounding; convolutions and their
// gradients as loops over windows (2-D ones as linalg.conv_2d_nchw_fchw).
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::linalg_lowering;

namespace {

// The f32 product sum_k A[.., m, k] B[.., k, n] over loops (batch.., m, n, k)
/// given each operand's map; returns the f32 accumulator of `accShape`.
Value contraction(Emit &e, Value a, Value bv, AffineMap ma, AffineMap mb,
                  ArrayRef<int64_t> accShape) {
  OpBuilder &b = e.b;
  int64_t loops = ma.getNumDims();
  auto accT = RankedTensorType::get(accShape, e.f32());
  Value init = e.full(accT, e.cstF(0));
  SmallVector<AffineExpr> outExprs;
  for (int64_t i = 0; i < loops - 1; ++i)
    outExprs.push_back(b.getAffineDimExpr(i));
  SmallVector<Iter> iters(loops - 1, Iter::parallel);
  iters.push_back(Iter::reduction);
  return e.generic({accT}, {a, bv}, {init},
                   {ma, mb, AffineMap::get(loops, 0, outExprs, b.getContext())}, iters,
                   [](OpBuilder &nb, Location nl, ValueRange x) {
                     Emit q{nb, nl};
                     Value p = q.mul(q.convert(x[0], q.f32()), q.convert(x[1], q.f32()));
                     linalg::YieldOp::create(nb, nl, q.add(x[2], p));
                   })[0];
}

/// `v` with its dims permuted: result dim i is v's dim perm[i].
Value permute(Emit &e, Value v, ArrayRef<int64_t> perm) {
  auto t = rtt(v);
  int64_t r = t.getRank();
  SmallVector<AffineExpr> exprs(r);
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < r; ++i) {
    exprs[perm[i]] = e.b.getAffineDimExpr(i);
    shape.push_back(t.getDimSize(perm[i]));
  }
  auto rt = RankedTensorType::get(shape, t.getElementType());
  return e.generic(
      {rt}, {v}, {e.empty(rt)},
      {AffineMap::get(r, 0, exprs, e.b.getContext()), e.b.getMultiDimIdentityMap(r)},
      SmallVector<Iter>(r, Iter::parallel),
      [](OpBuilder &nb, Location nl, ValueRange a) { linalg::YieldOp::create(nb, nl, a[0]); })[0];
}

/// linalg.conv_2d_nchw_fchw into a zero f32 accumulator of `accShape`: the
/// named op (IREE's convolution code generation knows it); its body widens
/// both inputs to f32, as the generic form does. (An NHWC form between
/// transposes measured no faster in IREE 3.13 once fused into the step.)
Value namedConv2d(Emit &e, Value x, Value w, ArrayRef<int64_t> accShape, ArrayRef<int64_t> strides,
                  ArrayRef<int64_t> dilations) {
  auto accT = RankedTensorType::get(accShape, e.f32());
  auto at = RankedTensorType::get({2}, e.b.getI64Type());
  return linalg::Conv2DNchwFchwOp::create(
             e.b, e.loc, TypeRange{accT}, ValueRange{x, w}, ValueRange{e.full(accT, e.cstF(0))},
             DenseIntElementsAttr::get(at, strides), DenseIntElementsAttr::get(at, dilations))
      .getResult(0);
}

/// The family's ops (see Lowering.h).
struct Linear : OpLowering {
  using OpLowering::OpLowering;
  LogicalResult gemm(GemmOp o, SmallVector<Value> &out);
  LogicalResult matmul(MatMulOp o, SmallVector<Value> &out);
  LogicalResult conv(ConvOp o, SmallVector<Value> &out);
  LogicalResult convGrad(ConvGradOp o, SmallVector<Value> &out);
};

} // namespace

LogicalResult Linear::gemm(GemmOp o, SmallVector<Value> &out) {
  if (!isa<FloatType>(eltOf(o.getA())))
    return refuse("an integer product");
  if (o.getAccumulate() && !o.getAccumulate()->isF32())
    return refuse("accumulate must be f32");
  auto at = rtt(o.getA());
  bool ta = o.getTransA(), tb = o.getTransB();
  int64_t m = ta ? at.getDimSize(1) : at.getDimSize(0);
  RankedTensorType rt = resultType();
  int64_t n = rt.getDimSize(1);
  MLIRContext *ctx = b.getContext();
  AffineExpr dm = b.getAffineDimExpr(0), dn = b.getAffineDimExpr(1), dk = b.getAffineDimExpr(2);
  AffineMap ma =
      AffineMap::get(3, 0, ta ? ArrayRef<AffineExpr>{dk, dm} : ArrayRef<AffineExpr>{dm, dk}, ctx);
  AffineMap mb =
      AffineMap::get(3, 0, tb ? ArrayRef<AffineExpr>{dn, dk} : ArrayRef<AffineExpr>{dk, dn}, ctx);
  Value acc = contraction(e, o.getA(), o.getB(), ma, mb, {m, n});
  float alpha = o.getAlpha().convertToFloat(), beta = o.getBeta().convertToFloat();
  SmallVector<Value> ins = {acc};
  if (o.getC())
    ins.push_back(o.getC());
  out.push_back(e.map1(rt, ins, [&](Emit &x, ValueRange a) {
    Value v = a[0];
    if (alpha != 1.0f)
      v = x.mul(x.cstF(alpha), v);
    if (a.size() > 1) {
      Value c = a[1];
      if (beta != 1.0f)
        c = x.mul(x.cstF(beta), c);
      v = x.add(v, c);
    }
    return v;
  }));
  return success();
}

LogicalResult Linear::matmul(MatMulOp o, SmallVector<Value> &out) {
  if (!isa<FloatType>(eltOf(o.getLhs())))
    return refuse("an integer product");
  if (o.getAccumulate() && !o.getAccumulate()->isF32())
    return refuse("accumulate must be f32");
  Value lhs = o.getLhs(), rhs = o.getRhs();
  if (rtt(lhs).getRank() == 1)
    lhs = e.reshape(lhs, {1, rtt(lhs).getDimSize(0)});
  if (rtt(rhs).getRank() == 1)
    rhs = e.reshape(rhs, {rtt(rhs).getDimSize(0), 1});
  auto lt = rtt(lhs), qt = rtt(rhs);
  int64_t lb = lt.getRank() - 2, rb = qt.getRank() - 2, nb = std::max(lb, rb);
  SmallVector<int64_t> accShape;
  for (int64_t i = 0; i < nb; ++i) {
    int64_t dl = i - (nb - lb) >= 0 ? lt.getDimSize(i - (nb - lb)) : 1;
    int64_t dr = i - (nb - rb) >= 0 ? qt.getDimSize(i - (nb - rb)) : 1;
    accShape.push_back(std::max(dl, dr));
  }
  int64_t m = lt.getDimSize(lb), n = qt.getDimSize(rb + 1);
  accShape.push_back(m);
  accShape.push_back(n);
  int64_t loops = nb + 3;
  auto operandMap = [&](RankedTensorType t, int64_t batch, bool isLhs) {
    SmallVector<AffineExpr> ex;
    for (int64_t i = 0; i < batch; ++i) {
      int64_t d = nb - batch + i;
      ex.push_back(t.getDimSize(i) == 1 && accShape[d] != 1 ? b.getAffineConstantExpr(0)
                                                            : b.getAffineDimExpr(d));
    }
    AffineExpr dm = b.getAffineDimExpr(nb), dn = b.getAffineDimExpr(nb + 1),
               dk = b.getAffineDimExpr(nb + 2);
    if (isLhs) {
      ex.push_back(dm);
      ex.push_back(dk);
    } else {
      ex.push_back(dk);
      ex.push_back(dn);
    }
    return AffineMap::get(loops, 0, ex, b.getContext());
  };
  Value acc =
      contraction(e, lhs, rhs, operandMap(lt, lb, true), operandMap(qt, rb, false), accShape);
  auto lowT = RankedTensorType::get(accShape, resultType().getElementType());
  Value v = e.map1(lowT, {acc}, [](Emit &, ValueRange a) { return a[0]; });
  out.push_back(e.reshape(v, resultType().getShape()));
  return success();
}

// Convolutions: loops (n, g, f, o_1..o_S, c, k_1..k_S) over x viewed as
// [N, G, C/G, D..] and w as [G, M/G, C/G, k..]; an f32 accumulator, the bias
// in f32, one rounding.
LogicalResult Linear::conv(ConvOp o, SmallVector<Value> &out) {
  if (o.getAccumulate() && !o.getAccumulate()->isF32())
    return refuse("accumulate must be f32");
  auto xt = rtt(o.getX()), wt = rtt(o.getW());
  int64_t S = xt.getRank() - 2, G = o.getGroup();
  Window w;
  if (failed(windowOf(op, S, wt.getShape().drop_front(2), w)))
    return failure();
  RankedTensorType rt = resultType();
  int64_t N = xt.getDimSize(0), C = xt.getDimSize(1), M = wt.getDimSize(0);
  if (G < 1 || C % G || M % G)
    return refuse("group must divide the channels");
  int64_t Cg = C / G, Mg = M / G;
  Value xp = pad(o.getX(), w, 0.0);
  SmallVector<Value> ins;
  if (S == 2 && G == 1) {
    ins.push_back(namedConv2d(e, xp, o.getW(), rt.getShape(), w.strides, w.dilations));
  } else {
    SmallVector<int64_t> xs = {N, G, Cg};
    for (int64_t i = 0; i < S; ++i)
      xs.push_back(rtt(xp).getDimSize(2 + i));
    xp = e.reshape(xp, xs);
    SmallVector<int64_t> ws = {G, Mg, Cg};
    for (int64_t i = 0; i < S; ++i)
      ws.push_back(w.kernel[i]);
    Value wv = e.reshape(o.getW(), ws);
    int64_t loops = 4 + 2 * S;
    auto d = [&](int64_t i) { return b.getAffineDimExpr(i); };
    // dims: 0 n, 1 g, 2 f, 3..3+S-1 o, 3+S c, 4+S.. k
    SmallVector<AffineExpr> xe = {d(0), d(1), d(3 + S)}, we = {d(1), d(2), d(3 + S)},
                            oe = {d(0), d(1), d(2)};
    SmallVector<int64_t> accShape = {N, G, Mg};
    for (int64_t i = 0; i < S; ++i) {
      xe.push_back(d(3 + i) * w.strides[i] + d(4 + S + i) * w.dilations[i]);
      we.push_back(d(4 + S + i));
      oe.push_back(d(3 + i));
      accShape.push_back(rt.getDimSize(2 + i));
    }
    SmallVector<Iter> iters(3 + S, Iter::parallel);
    iters.append(1 + S, Iter::reduction);
    auto accT = RankedTensorType::get(accShape, e.f32());
    MLIRContext *ctx = b.getContext();
    Value acc = e.generic({accT}, {xp, wv}, {e.full(accT, e.cstF(0))},
                          {AffineMap::get(loops, 0, xe, ctx), AffineMap::get(loops, 0, we, ctx),
                           AffineMap::get(loops, 0, oe, ctx)},
                          iters, [](OpBuilder &nb, Location nl, ValueRange x) {
                            Emit q{nb, nl};
                            Value p = q.mul(q.convert(x[0], q.f32()), q.convert(x[1], q.f32()));
                            linalg::YieldOp::create(nb, nl, q.add(x[2], p));
                          })[0];
    ins.push_back(e.reshape(acc, rt.getShape()));
  }
  if (o.getBias()) {
    SmallVector<int64_t> bs = {M};
    bs.append(S, 1);
    ins.push_back(e.reshape(o.getBias(), bs));
  }
  out.push_back(e.map1(
      rt, ins, [](Emit &x, ValueRange a) { return a.size() > 1 ? x.add(a[0], a[1]) : a[0]; }));
  return success();
}

LogicalResult Linear::convGrad(ConvGradOp o, SmallVector<Value> &out) {
  if (o.getAccumulate() && !o.getAccumulate()->isF32())
    return refuse("accumulate must be f32");
  auto xt = rtt(o.getX()), wt = rtt(o.getW()), yt = rtt(o.getDy());
  int64_t S = xt.getRank() - 2, G = o.getGroup();
  Window w;
  if (failed(windowOf(op, S, wt.getShape().drop_front(2), w)))
    return failure();
  int64_t N = xt.getDimSize(0), C = xt.getDimSize(1), M = wt.getDimSize(0);
  if (G < 1 || C % G || M % G)
    return refuse("group must divide the channels");
  int64_t Cg = C / G, Mg = M / G;
  MLIRContext *ctx = b.getContext();
  auto d = [&](int64_t i) { return b.getAffineDimExpr(i); };
  auto bodyMac = [](OpBuilder &nb, Location nl, ValueRange x) {
    Emit q{nb, nl};
    Value p = q.mul(q.convert(x[0], q.f32()), q.convert(x[1], q.f32()));
    linalg::YieldOp::create(nb, nl, q.add(x[2], p));
  };
  SmallVector<int64_t> ys = {N, G, Mg};
  for (int64_t i = 0; i < S; ++i)
    ys.push_back(yt.getDimSize(2 + i));
  Value dy = e.reshape(o.getDy(), ys);
  Value dx, dw, db;
  // db[m] = sum over n and the positions of dy.
  if (!o.getDb().use_empty()) {
    SmallVector<int64_t> axes = {0};
    for (int64_t i = 0; i < S; ++i)
      axes.push_back(2 + i);
    Value s = e.reduce(o.getDy(), axes, false, e.f32());
    db = e.map1(cast<RankedTensorType>(o.getDb().getType()), {s},
                [](Emit &, ValueRange a) { return a[0]; });
  }
  // dw[g, f, c, k..] = sum_{n, o..} dy[n, g, f, o..] * xp[n, g, c, o*s + k*d].
  if (!o.getDw().use_empty() && S == 2 && G == 1) {
    // As a named convolution over the batch: xp^T [C, N, H, W] with the
    // filter dy^T [M, N, O, O], the forward's dilation as its stride and its
    // stride as the dilation; [C, M, k..] (cut to the kernel) transposed.
    Value xp = pad(o.getX(), w, 0.0);
    auto xpt = rtt(xp);
    SmallVector<int64_t> kk;
    for (int64_t i = 0; i < 2; ++i)
      kk.push_back((xpt.getDimSize(2 + i) - (yt.getDimSize(2 + i) - 1) * w.strides[i] - 1) /
                       w.dilations[i] +
                   1);
    Value acc = namedConv2d(e, permute(e, xp, {1, 0, 2, 3}), permute(e, o.getDy(), {1, 0, 2, 3}),
                            {C, M, kk[0], kk[1]}, w.dilations, w.strides);
    if (kk[0] != w.kernel[0] || kk[1] != w.kernel[1]) {
      SmallVector<OpFoldResult> z4(4, b.getIndexAttr(0)), one4(4, b.getIndexAttr(1));
      SmallVector<OpFoldResult> sz = {b.getIndexAttr(C), b.getIndexAttr(M),
                                      b.getIndexAttr(w.kernel[0]), b.getIndexAttr(w.kernel[1])};
      acc = tensor::ExtractSliceOp::create(
          b, op->getLoc(), RankedTensorType::get({C, M, w.kernel[0], w.kernel[1]}, e.f32()), acc,
          z4, sz, one4);
    }
    acc = permute(e, acc, {1, 0, 2, 3});
    dw = e.map1(cast<RankedTensorType>(o.getDw().getType()), {acc},
                [](Emit &, ValueRange a) { return a[0]; });
  } else if (!o.getDw().use_empty()) {
    Value xp = pad(o.getX(), w, 0.0);
    SmallVector<int64_t> xs = {N, G, Cg};
    for (int64_t i = 0; i < S; ++i)
      xs.push_back(rtt(xp).getDimSize(2 + i));
    xp = e.reshape(xp, xs);
    // dims: 0 g, 1 f, 2 c, 3.. k (S), 3+S n, 4+S.. o (S)
    int64_t loops = 4 + 2 * S;
    SmallVector<AffineExpr> ye = {d(3 + S), d(0), d(1)}, xe = {d(3 + S), d(0), d(2)},
                            oe = {d(0), d(1), d(2)};
    SmallVector<int64_t> accShape = {G, Mg, Cg};
    for (int64_t i = 0; i < S; ++i) {
      ye.push_back(d(4 + S + i));
      xe.push_back(d(4 + S + i) * w.strides[i] + d(3 + i) * w.dilations[i]);
      oe.push_back(d(3 + i));
      accShape.push_back(w.kernel[i]);
    }
    SmallVector<Iter> iters(3 + S, Iter::parallel);
    iters.append(1 + S, Iter::reduction);
    auto accT = RankedTensorType::get(accShape, e.f32());
    Value acc = e.generic({accT}, {dy, xp}, {e.full(accT, e.cstF(0))},
                          {AffineMap::get(loops, 0, ye, ctx), AffineMap::get(loops, 0, xe, ctx),
                           AffineMap::get(loops, 0, oe, ctx)},
                          iters, bodyMac)[0];
    acc = e.reshape(acc, wt.getShape());
    dw = e.map1(cast<RankedTensorType>(o.getDw().getType()), {acc},
                [](Emit &, ValueRange a) { return a[0]; });
  }
  // dx: the transposed convolution. dy is spread with stride s into zeros
  // with (k - 1) * d leading and enough trailing zeros, then
  // dxp[n, g, c, i] = sum_{f, k'} z[n, g, f, i + k' d] * w[g, f, c, K-1-k'],
  // and the pads are cut off.
  if (!o.getDx().use_empty()) {
    SmallVector<int64_t> zs = {N, G, Mg}, padded;
    SmallVector<OpFoldResult> offs = {b.getIndexAttr(0), b.getIndexAttr(0), b.getIndexAttr(0)},
                              sizes, strides(3, b.getIndexAttr(1));
    for (int64_t v : ys)
      sizes.push_back(b.getIndexAttr(v));
    sizes.resize(3 + S);
    for (int64_t i = 0; i < S; ++i) {
      int64_t hp = xt.getDimSize(2 + i) + w.padLo[i] + w.padHi[i];
      int64_t lead = (w.kernel[i] - 1) * w.dilations[i];
      int64_t O = ys[3 + i];
      int64_t trail = hp - (O - 1) * w.strides[i] - 1;
      if (trail < 0)
        return refuse("an inconsistent window");
      zs.push_back(lead + (O - 1) * w.strides[i] + 1 + trail);
      padded.push_back(hp);
      offs.push_back(b.getIndexAttr(lead));
      strides.push_back(b.getIndexAttr(w.strides[i]));
    }
    auto zt = RankedTensorType::get(zs, yt.getElementType());
    Value z = tensor::InsertSliceOp::create(
        b, op->getLoc(), dy, e.full(zt, e.cst(0.0, yt.getElementType())), offs, sizes, strides);
    SmallVector<int64_t> ws = {G, Mg, Cg};
    for (int64_t i = 0; i < S; ++i)
      ws.push_back(w.kernel[i]);
    Value wv = e.reshape(o.getW(), ws);
    // The kernel flipped, wf[g, f, c, k'] = w[g, f, c, K-1-k'], by index:
    // a map with negative coefficients would be valid linalg, but IREE's
    // tiling mis-sizes its slices.
    auto wft = RankedTensorType::get(ws, wt.getElementType());
    Value wf = e.generic(
        {wft}, {}, {e.empty(wft)}, {b.getMultiDimIdentityMap(3 + S)},
        SmallVector<Iter>(3 + S, Iter::parallel), [&](OpBuilder &nb, Location nl, ValueRange) {
          Emit q{nb, nl};
          SmallVector<Value> at;
          for (int64_t i = 0; i < 3 + S; ++i) {
            Value ix = linalg::IndexOp::create(nb, nl, i);
            if (i >= 3)
              ix = arith::SubIOp::create(nb, nl, q.idx(w.kernel[i - 3] - 1), ix);
            at.push_back(ix);
          }
          linalg::YieldOp::create(nb, nl, tensor::ExtractOp::create(nb, nl, wv, at).getResult());
        })[0];
    Value acc;
    if (S == 2 && G == 1) {
      SmallVector<int64_t> z4 = {N, M, zs[3], zs[4]}, acc4 = {N, C, padded[0], padded[1]};
      Value wf4 = permute(e, e.reshape(wf, wt.getShape()), {1, 0, 2, 3});
      acc = namedConv2d(e, e.reshape(z, z4), wf4, acc4, {1, 1}, w.dilations);
    } else {
      // dims: 0 n, 1 g, 2 c, 3.. i (S), 3+S f, 4+S.. k' (S)
      int64_t loops = 4 + 2 * S;
      SmallVector<AffineExpr> ze = {d(0), d(1), d(3 + S)}, we = {d(1), d(3 + S), d(2)},
                              oe = {d(0), d(1), d(2)};
      SmallVector<int64_t> accShape = {N, G, Cg};
      for (int64_t i = 0; i < S; ++i) {
        ze.push_back(d(3 + i) + d(4 + S + i) * w.dilations[i]);
        we.push_back(d(4 + S + i));
        oe.push_back(d(3 + i));
        accShape.push_back(padded[i]);
      }
      SmallVector<Iter> iters(3 + S, Iter::parallel);
      iters.append(1 + S, Iter::reduction);
      auto accT = RankedTensorType::get(accShape, e.f32());
      acc = e.generic({accT}, {z, wf}, {e.full(accT, e.cstF(0))},
                      {AffineMap::get(loops, 0, ze, ctx), AffineMap::get(loops, 0, we, ctx),
                       AffineMap::get(loops, 0, oe, ctx)},
                      iters, bodyMac)[0];
    }
    SmallVector<int64_t> full = {N, C};
    full.append(padded.begin(), padded.end());
    acc = e.reshape(acc, full);
    SmallVector<OpFoldResult> so(2, b.getIndexAttr(0)), ss, st(2 + S, b.getIndexAttr(1));
    for (int64_t i = 0; i < S; ++i)
      so.push_back(b.getIndexAttr(w.padLo[i]));
    for (int64_t v : xt.getShape())
      ss.push_back(b.getIndexAttr(v));
    auto cutT = RankedTensorType::get(xt.getShape(), e.f32());
    Value cut = tensor::ExtractSliceOp::create(b, op->getLoc(), cutT, acc, so, ss, st);
    dx = e.map1(cast<RankedTensorType>(o.getDx().getType()), {cut},
                [](Emit &, ValueRange a) { return a[0]; });
  }
  out = {dx, dw, db};
  return success();
}

void mlir::amp::linalg_lowering::populateLinearLowerings(LoweringSet &set) {
  set.addMember(&Linear::gemm);
  set.addMember(&Linear::matmul);
  set.addMember(&Linear::conv);
  set.addMember(&Linear::convGrad);
}
