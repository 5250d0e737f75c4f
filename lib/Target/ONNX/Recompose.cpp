//===- Recompose.cpp - exporters' multi-node patterns as single amp ops ---===//
//
// Rewrite patterns applied to the imported function once its graph is in:
// GELU written as five nodes becomes amp.gelu, MatMul + bias row becomes
// amp.gemm. Applied by the walk driver (one pass, no folding, no dead-code
// elimination: nothing else in the imported IR changes). Each pattern is
// rooted at the last op of its chain, so everything it erases comes before
// the op being visited.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

#include <cmath>

namespace onnx_import {

namespace {

/// The value of a splat float constant with one element (a scalar), if `v`
/// is one.
std::optional<double> scalarConst(Value v) {
  auto c = v.getDefiningOp<arith::ConstantOp>();
  if (!c)
    return std::nullopt;
  auto d = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!d || !d.isSplat() || d.getNumElements() != 1 || !isa<FloatType>(d.getElementType()))
    return std::nullopt;
  return d.getSplatValue<APFloat>().convertToDouble();
}

/// A GELU chain found from its erf: its input x, the op whose result is the
/// GELU, and the chain's other ops (erased once the result is replaced).
struct GeluChain {
  Value x;
  Operation *last = nullptr;
  SmallVector<Operation *> dead;
};

/// x * 0.5 * (1 + erf(x / sqrt 2)) from the erf on: (x * P) * 0.5 or
/// (x * 0.5) * P with P = 1 + erf(...). Only the exact chain matches: every
/// intermediate used once, the constants scalars of x's type (sqrt 2 or
/// 1 / sqrt 2 to 1e-6, 1 and 0.5 exactly).
std::optional<GeluChain> matchGelu(ErfOp erf) {
  auto near = [](std::optional<double> v, double want, double tol) {
    return v && std::fabs(*v - want) <= tol * want;
  };
  auto other = [](Operation *op, Value v) -> Value {
    return op->getOperand(0) == v ? op->getOperand(1) : op->getOperand(0);
  };
  Operation *e = erf;
  Value t = e->getOperand(0);
  Operation *d = t.getDefiningOp();
  if (!d || !t.hasOneUse() || !e->getResult(0).hasOneUse())
    return std::nullopt;
  Value x;
  if (isa<DivOp>(d) && near(scalarConst(d->getOperand(1)), M_SQRT2, 1e-6))
    x = d->getOperand(0);
  else if (isa<MulOp>(d) && near(scalarConst(d->getOperand(1)), M_SQRT1_2, 1e-6))
    x = d->getOperand(0);
  else if (isa<MulOp>(d) && near(scalarConst(d->getOperand(0)), M_SQRT1_2, 1e-6))
    x = d->getOperand(1);
  if (!x || x.getType() != e->getResult(0).getType())
    return std::nullopt;
  Operation *a = *e->getResult(0).getUsers().begin();
  if (!isa<AddOp>(a) || scalarConst(other(a, e->getResult(0))) != 1.0 ||
      !a->getResult(0).hasOneUse() || a->getResult(0).getType() != x.getType())
    return std::nullopt;
  Operation *m1 = *a->getResult(0).getUsers().begin();
  if (!isa<MulOp>(m1) || m1->getResult(0).getType() != x.getType() || !m1->getResult(0).hasOneUse())
    return std::nullopt;
  Value o = other(m1, a->getResult(0));
  GeluChain c;
  c.x = x;
  Operation *half = nullptr;
  if (o == x) {
    Operation *m2 = *m1->getResult(0).getUsers().begin();
    if (isa<MulOp>(m2) && scalarConst(other(m2, m1->getResult(0))) == 0.5 &&
        m2->getResult(0).getType() == x.getType())
      c.last = m2;
  } else if (Operation *h = o.getDefiningOp();
             h && isa<MulOp>(h) && o.hasOneUse() &&
             ((h->getOperand(0) == x && scalarConst(h->getOperand(1)) == 0.5) ||
              (h->getOperand(1) == x && scalarConst(h->getOperand(0)) == 0.5))) {
    c.last = m1;
    half = h;
  }
  if (!c.last)
    return std::nullopt;
  if (c.last != m1)
    c.dead.push_back(m1);
  c.dead.append({a, e, d});
  if (half)
    c.dead.push_back(half);
  return c;
}

/// Exporters write GELU (erf form) in five nodes (torch.onnx.export below
/// opset 20); it becomes one amp.gelu, which runs as one vector pass and has
/// one gradient rule. Rooted at the chain's last multiply.
struct RecomposeGelu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp last, PatternRewriter &rewriter) const override {
    // The erf is two (last = (x * P) * 0.5) or three (last = (x * P) * 0.5
    // written as (x * 0.5) * P) producers up.
    SmallVector<ErfOp> erfs;
    auto addsOf = [&](Value v) {
      if (auto add = v.getDefiningOp<AddOp>())
        for (Value w : add->getOperands())
          if (auto erf = w.getDefiningOp<ErfOp>())
            erfs.push_back(erf);
    };
    for (Value v : last->getOperands()) {
      addsOf(v);
      if (auto m = v.getDefiningOp<MulOp>())
        for (Value w : m->getOperands())
          addsOf(w);
    }
    for (ErfOp erf : erfs) {
      std::optional<GeluChain> c = matchGelu(erf);
      if (!c || c->last != last.getOperation())
        continue;
      auto g = GeluOp::create(
          rewriter, last.getLoc(), c->x.getType(), c->x,
          GeluApproximationAttr::get(rewriter.getContext(), GeluApproximation::none));
      rewriter.replaceOp(last, g.getResult());
      for (Operation *op : c->dead)
        if (op->use_empty())
          rewriter.eraseOp(op);
      return success();
    }
    return failure();
  }
};

/// MatMul followed by the Add of a bias row (how exporters write a Linear
/// layer on 3-D activations) becomes one amp.gemm on the rows, between
/// reshapes (free views): the runtime adds the bias inside the matrix
/// product instead of in a second pass. Only [..., K] x [K, N] + [N] with the
/// product read by the Add alone and static shapes; the result is the same
/// f32 sum rounded once. Rooted at the Add.
struct RecomposeMatMulBias : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  static bool fits(MatMulOp mm) {
    auto at = dyn_cast<RankedTensorType>(mm.getLhs().getType());
    auto bt = dyn_cast<RankedTensorType>(mm.getRhs().getType());
    auto yt = dyn_cast<RankedTensorType>(mm.getOutput().getType());
    return at && bt && yt && at.getRank() >= 2 && bt.getRank() == 2 && at.hasStaticShape() &&
           bt.hasStaticShape() && isa<FloatType>(yt.getElementType()) &&
           mm.getOutput().hasOneUse() && !mm.getAccumulateAttr();
  }

  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rewriter) const override {
    // The product that comes first in the block is tried first.
    SmallVector<MatMulOp, 2> mms;
    for (Value v : add->getOperands())
      if (auto mm = v.getDefiningOp<MatMulOp>(); mm && fits(mm))
        mms.push_back(mm);
    if (mms.size() == 2 && mms[1]->isBeforeInBlock(mms[0]))
      std::swap(mms[0], mms[1]);
    for (MatMulOp mm : mms) {
      auto at = cast<RankedTensorType>(mm.getLhs().getType());
      auto bt = cast<RankedTensorType>(mm.getRhs().getType());
      auto yt = cast<RankedTensorType>(mm.getOutput().getType());
      if (add.getResult().getType() != yt)
        continue;
      Value bias = add.getLhs() == mm.getOutput() ? add.getRhs() : add.getLhs();
      auto ct = dyn_cast<RankedTensorType>(bias.getType());
      int64_t n = bt.getDimSize(1), k = bt.getDimSize(0);
      if (!ct || ct.getRank() != 1 || ct.getDimSize(0) != n ||
          ct.getElementType() != yt.getElementType() || bias == mm.getOutput())
        continue;
      int64_t m = at.getNumElements() / k;
      Location loc = add.getLoc();
      Value a = mm.getLhs();
      auto a2 = RankedTensorType::get({m, k}, at.getElementType());
      if (at.getRank() != 2)
        a = ReshapeOp::create(rewriter, loc, a2, a, rewriter.getDenseI64ArrayAttr({m, k}),
                              rewriter.getBoolAttr(false));
      auto g = GemmOp::create(rewriter, loc, RankedTensorType::get({m, n}, yt.getElementType()), a,
                              mm.getRhs(), bias, rewriter.getF32FloatAttr(1.0f),
                              rewriter.getF32FloatAttr(1.0f), rewriter.getBoolAttr(false),
                              rewriter.getBoolAttr(false), TypeAttr());
      Value y = g.getOutput();
      if (yt.getRank() != 2)
        y = ReshapeOp::create(rewriter, loc, yt, y, rewriter.getDenseI64ArrayAttr(yt.getShape()),
                              rewriter.getBoolAttr(false));
      rewriter.replaceOp(add, y);
      rewriter.eraseOp(mm);
      return success();
    }
    return failure();
  }
};

} // namespace

void populateONNXRecomposePatterns(RewritePatternSet &patterns, const ONNXImportOptions &opts) {
  if (opts.fuseGelu)
    patterns.add<RecomposeGelu>(patterns.getContext());
  if (opts.fuseMatMulBias)
    patterns.add<RecomposeMatMulBias>(patterns.getContext());
}

void recompose(func::FuncOp f, const ONNXImportOptions &opts) {
  RewritePatternSet patterns(f.getContext());
  populateONNXRecomposePatterns(patterns, opts);
  if (patterns.getNativePatterns().empty())
    return;
  walkAndApplyPatterns(f, std::move(patterns));
}

} // namespace onnx_import
