//===- AMPGradients.cpp - each op's reverse-mode derivative --------------===//
//
// GradientOpInterface implementations. Gradients have the forward
// operand's type and shape: broadcasting is undone by summing (sumToShape).
// An op not listed here has no rule yet, and amp-autodiff says so.
//
//===----------------------------------------------------------------------===//

#include "GradientUtils.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::gradient_utils;

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0])
    return success();
  og[0] = sumToShape(b, getLoc(), rg[0], getLhs().getType());
  og[1] = sumToShape(b, getLoc(), rg[0], getRhs().getType());
  return success(og[0] && og[1]);
}

LogicalResult SubOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0])
    return success();
  Value neg =
      make(b, getLoc(), MulOp::getOperationName(), {rg[0], scalar(b, getLoc(), rg[0], -1.0)});
  og[0] = sumToShape(b, getLoc(), rg[0], getLhs().getType());
  og[1] = neg ? sumToShape(b, getLoc(), neg, getRhs().getType()) : Value();
  return success(og[0] && og[1]);
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0])
    return success();
  if (!isa<FloatType>(getElementTypeOrSelf(getType())))
    return success(); // integer products carry no gradient
  Value da = make(b, getLoc(), MulOp::getOperationName(), {rg[0], getRhs()});
  Value db = make(b, getLoc(), MulOp::getOperationName(), {rg[0], getLhs()});
  og[0] = da ? sumToShape(b, getLoc(), da, getLhs().getType()) : Value();
  og[1] = db ? sumToShape(b, getLoc(), db, getRhs().getType()) : Value();
  return success(og[0] && og[1]);
}

LogicalResult DivOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(getType())))
    return success();
  Location loc = getLoc();
  // d(a / b) = dy / b, -dy * a / b^2 = -(dy / b) * (a / b) = -(dy / b) * y
  Value q = make(b, loc, DivOp::getOperationName(), {rg[0], getRhs()});
  Value qy = q ? make(b, loc, MulOp::getOperationName(), {q, getResult()}) : Value();
  Value neg =
      qy ? make(b, loc, MulOp::getOperationName(), {qy, scalar(b, loc, qy, -1.0)}) : Value();
  og[0] = q ? sumToShape(b, loc, q, getLhs().getType()) : Value();
  og[1] = neg ? sumToShape(b, loc, neg, getRhs().getType()) : Value();
  return success(og[0] && og[1]);
}

/// torch.remainder / torch.fmod's: dy to a, -dy * floor(a / b) (remainder)
/// or -dy * trunc(a / b) (fmod, trunc(q) = q - fmod(q, 1)) to b.
static LogicalResult modGrad(OpBuilder &b, Operation *op, ArrayRef<Value> rg,
                             SmallVectorImpl<Value> &og, bool floor) {
  og.assign(2, Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(op->getResult(0).getType())))
    return success(); // integers carry no gradient
  Location loc = op->getLoc();
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  Value q = make(b, loc, DivOp::getOperationName(), {lhs, rhs});
  Value whole =
      !q      ? Value()
      : floor ? make(b, loc, FloorOp::getOperationName(), {q})
              : make(b, loc, SubOp::getOperationName(),
                     {q, make(b, loc, FModOp::getOperationName(), {q, scalar(b, loc, q, 1.0)})});
  Value db = whole ? make(b, loc, MulOp::getOperationName(), {rg[0], whole}) : Value();
  db = db ? make(b, loc, MulOp::getOperationName(), {db, scalar(b, loc, db, -1.0)}) : Value();
  og[0] = sumToShape(b, loc, rg[0], lhs.getType());
  og[1] = db ? sumToShape(b, loc, db, rhs.getType()) : Value();
  return success(og[0] && og[1]);
}

LogicalResult ModOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  return modGrad(b, *this, rg, og, true);
}

LogicalResult FModOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  return modGrad(b, *this, rg, og, false);
}

/// torch.maximum / torch.minimum's gradient: dy to the chosen input, half
/// to each on a tie. With d = lhs - rhs, g1 = dy [d > 0] and g2 = dy [d < 0]
/// (the relu derivative of d and of -d); a tie's share is (dy - g1 - g2) / 2,
/// exact in every float type (no doubling that could overflow).
static LogicalResult minMaxGrad(OpBuilder &b, Operation *op, ArrayRef<Value> rg,
                                SmallVectorImpl<Value> &og, bool isMax) {
  og.assign(2, Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(op->getResult(0).getType())))
    return success(); // integers carry no gradient
  Location loc = op->getLoc();
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  Value d = make(b, loc, SubOp::getOperationName(), {lhs, rhs});
  Value nd = make(b, loc, SubOp::getOperationName(), {rhs, lhs});
  if (!d || !nd)
    return failure();
  auto relu = UnaryKindAttr::get(b.getContext(), UnaryKind::relu);
  auto zero = b.getF32FloatAttr(0.0f);
  Value g1 = UnaryGradOp::create(b, loc, d, rg[0], relu, zero, zero);
  Value g2 = UnaryGradOp::create(b, loc, nd, rg[0], relu, zero, zero);
  Value rest = make(b, loc, SubOp::getOperationName(), {rg[0], g1});
  rest = rest ? make(b, loc, SubOp::getOperationName(), {rest, g2}) : Value();
  Value tie =
      rest ? make(b, loc, MulOp::getOperationName(), {rest, scalar(b, loc, rest, 0.5)}) : Value();
  Value toLhs = tie ? make(b, loc, AddOp::getOperationName(), {isMax ? g1 : g2, tie}) : Value();
  Value toRhs = tie ? make(b, loc, AddOp::getOperationName(), {isMax ? g2 : g1, tie}) : Value();
  og[0] = toLhs ? sumToShape(b, loc, toLhs, lhs.getType()) : Value();
  og[1] = toRhs ? sumToShape(b, loc, toRhs, rhs.getType()) : Value();
  return success(og[0] && og[1]);
}

LogicalResult MaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  return minMaxGrad(b, *this, rg, og, true);
}

LogicalResult MinOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  return minMaxGrad(b, *this, rg, og, false);
}

// The unary functions (UnaryFunctionOpInterface): amp.unary_grad of the
// op's own function and parameters.
LogicalResult mlir::amp::unaryFunctionGradients(OpBuilder &b, UnaryFunctionOpInterface op,
                                                ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  UnaryFunction f = op.getUnaryFunction();
  return unaryGrad(b, op, rg, og, f.kind, f.alpha, f.beta.value_or(0.0f));
}

LogicalResult ReluOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  if (!isa<FloatType>(getElementTypeOrSelf(getType()))) {
    og.assign(1, Value());
    return success();
  }
  // From the result, as PyTorch's threshold_backward: relu(x) > 0 exactly
  // where x > 0 (a NaN in neither), so x need not stay alive for the
  // backward, and a batch norm before the ReLU runs with it in one call.
  return unaryGrad(b, *this, rg, og, UnaryKind::relu, 0.0f, 0.0f, getResult());
}

LogicalResult IdentityOp::buildGradients(OpBuilder &, ArrayRef<Value> rg,
                                         SmallVectorImpl<Value> &og) {
  og.assign(1, rg[0]);
  return success();
}

LogicalResult CastOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  og.assign(1, Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(getInput().getType())))
    return success();
  og[0] = CastOp::create(b, getLoc(), getInput().getType(), rg[0]);
  return success();
}

//===----------------------------------------------------------------------===//
// Softmax and the loss
//===----------------------------------------------------------------------===//

static LogicalResult softmaxGrad(OpBuilder &b, Operation *op, ArrayRef<Value> rg,
                                 SmallVectorImpl<Value> &og, int64_t axis, bool log) {
  og.assign(1, Value());
  if (!rg[0])
    return success();
  int64_t rank = cast<RankedTensorType>(op->getResult(0).getType()).getRank();
  og[0] = SoftmaxGradOp::create(b, op->getLoc(), op->getResult(0), rg[0],
                                axis < 0 ? axis + rank : axis, log);
  return success();
}

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                        SmallVectorImpl<Value> &og) {
  return softmaxGrad(b, *this, rg, og, getAxis(), false);
}

LogicalResult LogSoftmaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                           SmallVectorImpl<Value> &og) {
  return softmaxGrad(b, *this, rg, og, getAxis(), true);
}

LogicalResult SoftmaxCrossEntropyLossOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                                        SmallVectorImpl<Value> &og) {
  og.assign(getNumOperands(), Value());
  if (rg[1])
    return fail(*this, "its log_prob result (only the loss may reach the objective)");
  if (!rg[0])
    return success();
  og[0] = SoftmaxCrossEntropyLossGradOp::create(b, getLoc(), getScores().getType(), getLogProb(),
                                                getLabels(), getWeights(), rg[0], getReduction(),
                                                getIgnoreIndexAttr());
  return success();
}

LogicalResult NLLLossOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                        SmallVectorImpl<Value> &og) {
  og.assign(getNumOperands(), Value());
  if (!rg[0])
    return success();
  og[0] = NLLLossGradOp::create(b, getLoc(), getInput().getType(), getInput(), getTarget(),
                                getWeight(), rg[0], getReduction(), getIgnoreIndexAttr());
  return success();
}

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                       SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0])
    return success();
  auto at = cast<RankedTensorType>(getLhs().getType());
  auto bt = cast<RankedTensorType>(getRhs().getType());
  if (at.getRank() < 2 || bt.getRank() < 2)
    return fail(*this, "1-D operands (reshape them to 2-D)");
  Location loc = getLoc();
  // dA = dY @ B^T, dB = A^T @ dY, summed over broadcast batch dims.
  Value bT = transposeLast2(b, loc, getRhs());
  Value da = bT ? make(b, loc, MatMulOp::getOperationName(), {rg[0], bT}) : Value();
  og[0] = da ? sumToShape(b, loc, da, at) : Value();
  // B shared by every batch of A (a Linear layer on [batch.., M, K]): the
  // sum over the batches of A_i^T dY_i is one product of the flattened
  // rows, (A as [rows, K])^T @ (dY as [rows, N]), accumulated over all the
  // rows at once rather than a product per batch then a sum.
  bool shared = at.getRank() > 2 && at.hasStaticShape() && bt.hasStaticShape() &&
                llvm::all_of(bt.getShape().drop_back(2), [](int64_t d) { return d == 1; });
  if (shared) {
    int64_t k = at.getShape().back(), n = bt.getShape().back();
    int64_t rows = at.getNumElements() / k;
    Value a2 = reshape(b, loc, getLhs(), {rows, k});
    Value dy2 = reshape(b, loc, rg[0], {rows, n});
    Value db = make(b, loc, GemmOp::getOperationName(), {a2, dy2},
                    {attr(b, "trans_a", b.getBoolAttr(true))});
    og[1] = db ? reshape(b, loc, db, bt.getShape()) : Value();
  } else {
    Value aT = transposeLast2(b, loc, getLhs());
    Value db = aT ? make(b, loc, MatMulOp::getOperationName(), {aT, rg[0]}) : Value();
    og[1] = db ? sumToShape(b, loc, db, bt) : Value();
  }
  return success(og[0] && og[1]);
}

LogicalResult GemmOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  og.assign(getNumOperands(), Value());
  if (!rg[0])
    return success();
  Location loc = getLoc();
  Value dy = rg[0], a = getA(), bb = getB();
  FloatAttr alpha = getAlphaAttr();
  auto gemm = [&](Value x, Value y, bool tx, bool ty) {
    return make(b, loc, GemmOp::getOperationName(), {x, y},
                {attr(b, "alpha", alpha), attr(b, "trans_a", b.getBoolAttr(tx)),
                 attr(b, "trans_b", b.getBoolAttr(ty))});
  };
  // The four transpose cases of Y = alpha op(A) op(B) + beta C.
  bool ta = getTransA(), tb = getTransB();
  if (!ta && !tb) {
    og[0] = gemm(dy, bb, false, true);
    og[1] = gemm(a, dy, true, false);
  } else if (!ta && tb) {
    og[0] = gemm(dy, bb, false, false);
    og[1] = gemm(dy, a, true, false);
  } else if (ta && !tb) {
    og[0] = gemm(bb, dy, false, true);
    og[1] = gemm(a, dy, false, false);
  } else {
    og[0] = gemm(bb, dy, true, true);
    og[1] = gemm(dy, a, true, true);
  }
  if (!og[0] || !og[1])
    return failure();
  if (Value c = getC()) {
    Value dc = dy;
    if (getBeta().convertToDouble() != 1.0)
      dc = make(b, loc, MulOp::getOperationName(),
                {dy, scalar(b, loc, dy, getBeta().convertToDouble())});
    og[2] = dc ? sumToShape(b, loc, dc, c.getType()) : Value();
    if (!og[2])
      return failure();
  }
  return success();
}

LogicalResult ConvOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  og.assign(getNumOperands(), Value());
  if (!rg[0])
    return success();
  auto g = ConvGradOp::create(b, getLoc(), getX(), getW(), rg[0], getAutoPadAttr(),
                              getDilationsAttr(), getGroupAttr(), getKernelShapeAttr(),
                              getPadsAttr(), getStridesAttr(), getAccumulateAttr());
  og[0] = g.getDx();
  og[1] = g.getDw();
  if (getBias())
    og[2] = g.getDb();
  return success();
}

/// ConvTranspose is amp.conv's input gradient: its input gradient is the
/// convolution of dy by the same weights, its weight gradient amp.conv's
/// weight gradient with the roles of x and dy swapped, as PyTorch's
/// conv_transpose backward.
LogicalResult ConvTransposeOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                              SmallVectorImpl<Value> &og) {
  og.assign(getNumOperands(), Value());
  if (!rg[0])
    return success();
  Location loc = getLoc();
  auto notSet = AutoPadAttr::get(b.getContext(), AutoPad::NOTSET);
  og[0] = ConvOp::create(b, loc, rg[0], getW(), Value(), notSet, getDilationsAttr(), getGroupAttr(),
                         getKernelShapeAttr(), getPadsAttr(), getStridesAttr(), getAccumulateAttr())
              .getOutput();
  og[1] =
      ConvGradOp::create(b, loc, rg[0], getW(), getX(), notSet, getDilationsAttr(), getGroupAttr(),
                         getKernelShapeAttr(), getPadsAttr(), getStridesAttr(), getAccumulateAttr())
          .getDw();
  if (getBias()) {
    SmallVector<int64_t> axes{0};
    for (int64_t d = 2; d < getX().getType().getRank(); ++d)
      axes.push_back(d);
    og[2] = make(
        b, loc, ReduceSumOp::getOperationName(), rg[0],
        {attr(b, "axes", b.getDenseI64ArrayAttr(axes)), attr(b, "keepdims", b.getBoolAttr(false))});
    if (!og[2])
      return failure();
  }
  return success();
}

LogicalResult LayerNormOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                          SmallVectorImpl<Value> &og) {
  og.assign(getNumOperands(), Value());
  if (rg[1] || rg[2])
    return fail(*this, "its mean / inv_std_dev results");
  if (!rg[0])
    return success();
  int64_t rank = getX().getType().getRank();
  auto g = LayerNormGradOp::create(
      b, getLoc(), getX(), getScale(), getMean(), getInvStdDev(), rg[0],
      (int64_t)getAxis() < 0 ? (int64_t)getAxis() + rank : (int64_t)getAxis());
  og[0] = g.getDx();
  og[1] = g.getDscale();
  if (getBias())
    og[2] = g.getDbias();
  return success();
}

LogicalResult MaxPoolOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                        SmallVectorImpl<Value> &og) {
  og.assign(1, Value());
  if (rg[1])
    return fail(*this, "its indices result");
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(getType(0))))
    return success();
  if (getStorageOrder() != 0)
    return fail(*this, "storage_order = 1 (column-major indices)");
  og[0] = MaxPoolGradOp::create(b, getLoc(), getX(), rg[0], getIndices());
  return success();
}

LogicalResult AveragePoolOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                            SmallVectorImpl<Value> &og) {
  og.assign(1, Value());
  if (!rg[0])
    return success();
  og[0] = AveragePoolGradOp::create(b, getLoc(), getX(), rg[0], getAutoPadAttr(), getCeilModeAttr(),
                                    getCountIncludePadAttr(), getDilationsAttr(),
                                    getKernelShapeAttr(), getPadsAttr(), getStridesAttr());
  return success();
}

LogicalResult BatchNormOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                          SmallVectorImpl<Value> &og) {
  og.assign(getNumOperands(), Value());
  if (rg[1] || rg[2])
    return fail(*this, "its running statistics");
  if (!rg[0])
    return success();
  if (!getTrainingMode()) {
    // Normalised with the given statistics (a frozen batch norm, as a model
    // exported in eval mode has): y = (x - mean) * scale * inv + bias with
    // inv = 1 / sqrt(var + eps), all [C] broadcast over [N, C, ...]. The
    // statistics are buffers and get no gradient.
    Location loc = getLoc();
    auto xt = getX().getType();
    SmallVector<int64_t> cshape(xt.getRank() - 1, 1), axes;
    cshape[0] = xt.getDimSize(1);
    for (int64_t d = 0; d < xt.getRank(); ++d)
      if (d != 1)
        axes.push_back(d);
    Value dy = rg[0];
    Value ve = make(b, loc, AddOp::getOperationName(),
                    {getVar(), scalar(b, loc, getVar(), getEpsilon().convertToDouble())});
    Value sd = ve ? make(b, loc, SqrtOp::getOperationName(), ve) : Value();
    Value inv =
        sd ? make(b, loc, DivOp::getOperationName(), {scalar(b, loc, sd, 1.0), sd}) : Value();
    Value invR = inv ? reshape(b, loc, inv, cshape) : Value();
    Value scaleR = reshape(b, loc, getScale(), cshape);
    Value meanR = reshape(b, loc, getMean(), cshape);
    if (!invR || !scaleR || !meanR)
      return failure();
    Value k = make(b, loc, MulOp::getOperationName(), {scaleR, invR});
    og[0] = k ? make(b, loc, MulOp::getOperationName(), {dy, k}) : Value();
    Value xc = make(b, loc, SubOp::getOperationName(), {getX(), meanR});
    Value xhat = xc ? make(b, loc, MulOp::getOperationName(), {xc, invR}) : Value();
    Value dyx = xhat ? make(b, loc, MulOp::getOperationName(), {dy, xhat}) : Value();
    auto sum = [&](Value v) -> Value {
      Value r = make(b, loc, ReduceSumOp::getOperationName(), v,
                     {attr(b, "axes", b.getDenseI64ArrayAttr(axes)),
                      attr(b, "keepdims", b.getBoolAttr(false))});
      return r;
    };
    og[1] = dyx ? sum(dyx) : Value();
    og[2] = sum(dy);
    return success(og[0] && og[1] && og[2]);
  }
  auto g = BatchNormGradOp::create(b, getLoc(), getX(), getScale(), rg[0], getEpsilonAttr());
  og[0] = g.getDx();
  og[1] = g.getDscale();
  og[2] = g.getDbias();
  return success();
}
