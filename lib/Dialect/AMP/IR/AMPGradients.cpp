//===- AMPGradients.cpp - each op's reverse-mode derivative --------------===//
//
// GradientOpInterface implementations. Gradients have the forward
// operand's type and shape: broadcasting is undone by summing (sumToShape).
// An op not listed here has no rule yet, and amp-autodiff says so.
//
//===----------------------------------------------------------------------===//

#include "amp/Dialect/AMP/IR/AMPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace mlir::amp;

namespace {

NamedAttribute attr(OpBuilder &b, StringRef name, Attribute a) {
  return b.getNamedAttr(name, a);
}

Value make(OpBuilder &b, Location loc, StringRef name, ValueRange operands,
           ArrayRef<NamedAttribute> attrs = {}) {
  Operation *op = createWithInferredTypes(b, loc, name, operands, attrs, 1);
  return op ? op->getResult(0) : Value();
}

/// A rank-0 constant of the element type of `like`.
Value scalar(OpBuilder &b, Location loc, Value like, double v) {
  auto elt = cast<FloatType>(getElementTypeOrSelf(like.getType()));
  auto t = RankedTensorType::get({}, elt);
  return arith::ConstantOp::create(b, loc, t, DenseElementsAttr::get(t, b.getFloatAttr(elt, v)));
}

Value reshape(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  if (cast<RankedTensorType>(v.getType()).getShape() == shape)
    return v;
  return make(b, loc, ReshapeOp::getOperationName(), v, {attr(b, "shape", b.getDenseI64ArrayAttr(shape))});
}

/// Sums `g` down to `target`'s shape (the gradient of a numpy broadcast).
Value sumToShape(OpBuilder &b, Location loc, Value g, Type targetType) {
  auto gt = cast<RankedTensorType>(g.getType());
  auto tt = cast<RankedTensorType>(targetType);
  if (gt.getShape() == tt.getShape())
    return g;
  int64_t lead = gt.getRank() - tt.getRank();
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < gt.getRank(); ++d)
    if (d < lead || (tt.getDimSize(d - lead) == 1 && gt.getDimSize(d) != 1))
      axes.push_back(d);
  Value s = g;
  if (!axes.empty())
    s = make(b, loc, ReduceSumOp::getOperationName(), g,
             {attr(b, "axes", b.getDenseI64ArrayAttr(axes)), attr(b, "keepdims", b.getBoolAttr(true))});
  return s ? reshape(b, loc, s, tt.getShape()) : Value();
}

Value transposeLast2(OpBuilder &b, Location loc, Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> perm;
  for (int64_t i = 0; i < t.getRank(); ++i)
    perm.push_back(i);
  std::swap(perm[t.getRank() - 1], perm[t.getRank() - 2]);
  return make(b, loc, TransposeOp::getOperationName(), v, {attr(b, "perm", b.getDenseI64ArrayAttr(perm))});
}

LogicalResult unaryGrad(OpBuilder &b, Operation *op, ArrayRef<Value> rg,
                        SmallVectorImpl<Value> &og, StringRef kind, float alpha = 0.0f,
                        float beta = 0.0f) {
  og.assign(op->getNumOperands(), Value());
  if (!rg[0])
    return success();
  og[0] = UnaryGradOp::create(b, op->getLoc(), op->getOperand(0), rg[0], b.getStringAttr(kind),
                              b.getF32FloatAttr(alpha), b.getF32FloatAttr(beta));
  return success();
}

LogicalResult fail(Operation *op, const Twine &why) {
  return op->emitOpError("has no gradient rule for ") << why;
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                    SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0])
    return success();
  og[0] = sumToShape(b, getLoc(), rg[0], getLhs().getType());
  og[1] = sumToShape(b, getLoc(), rg[0], getRhs().getType());
  return success(og[0] && og[1]);
}

LogicalResult SubOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                    SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0])
    return success();
  Value neg = make(b, getLoc(), MulOp::getOperationName(), {rg[0], scalar(b, getLoc(), rg[0], -1.0)});
  og[0] = sumToShape(b, getLoc(), rg[0], getLhs().getType());
  og[1] = neg ? sumToShape(b, getLoc(), neg, getRhs().getType()) : Value();
  return success(og[0] && og[1]);
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                    SmallVectorImpl<Value> &og) {
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

LogicalResult DivOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                    SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(getType())))
    return success();
  Location loc = getLoc();
  // d(a / b) = dy / b, -dy * a / b^2 = -(dy / b) * (a / b) = -(dy / b) * y
  Value q = make(b, loc, DivOp::getOperationName(), {rg[0], getRhs()});
  Value qy = q ? make(b, loc, MulOp::getOperationName(), {q, getResult()}) : Value();
  Value neg = qy ? make(b, loc, MulOp::getOperationName(), {qy, scalar(b, loc, qy, -1.0)}) : Value();
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
  Value whole = !q ? Value()
                : floor ? make(b, loc, FloorOp::getOperationName(), {q})
                        : make(b, loc, SubOp::getOperationName(), {q, make(b, loc, FModOp::getOperationName(), {q, scalar(b, loc, q, 1.0)})});
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
  auto relu = b.getStringAttr("relu");
  auto zero = b.getF32FloatAttr(0.0f);
  Value g1 = UnaryGradOp::create(b, loc, d, rg[0], relu, zero, zero);
  Value g2 = UnaryGradOp::create(b, loc, nd, rg[0], relu, zero, zero);
  Value rest = make(b, loc, SubOp::getOperationName(), {rg[0], g1});
  rest = rest ? make(b, loc, SubOp::getOperationName(), {rest, g2}) : Value();
  Value tie = rest ? make(b, loc, MulOp::getOperationName(), {rest, scalar(b, loc, rest, 0.5)}) : Value();
  Value toLhs = tie ? make(b, loc, AddOp::getOperationName(), {isMax ? g1 : g2, tie}) : Value();
  Value toRhs = tie ? make(b, loc, AddOp::getOperationName(), {isMax ? g2 : g1, tie}) : Value();
  og[0] = toLhs ? sumToShape(b, loc, toLhs, lhs.getType()) : Value();
  og[1] = toRhs ? sumToShape(b, loc, toRhs, rhs.getType()) : Value();
  return success(og[0] && og[1]);
}

LogicalResult MaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                    SmallVectorImpl<Value> &og) {
  return minMaxGrad(b, *this, rg, og, true);
}

LogicalResult MinOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                    SmallVectorImpl<Value> &og) {
  return minMaxGrad(b, *this, rg, og, false);
}

#define AMP_UNARY_GRAD(OP, KIND)                                               \
  LogicalResult OP::buildGradients(OpBuilder &b, ArrayRef<Value> rg,           \
                                   SmallVectorImpl<Value> &og) {               \
    return unaryGrad(b, *this, rg, og, KIND);                                  \
  }
AMP_UNARY_GRAD(SqrtOp, "sqrt")
AMP_UNARY_GRAD(ExpOp, "exp")
AMP_UNARY_GRAD(LogOp, "log")
AMP_UNARY_GRAD(ErfOp, "erf")
AMP_UNARY_GRAD(TanhOp, "tanh")
AMP_UNARY_GRAD(SigmoidOp, "sigmoid")
AMP_UNARY_GRAD(AbsOp, "abs")
AMP_UNARY_GRAD(ReciprocalOp, "reciprocal")
AMP_UNARY_GRAD(SoftplusOp, "softplus")
AMP_UNARY_GRAD(HardSwishOp, "hard_swish")
AMP_UNARY_GRAD(SoftsignOp, "softsign")
AMP_UNARY_GRAD(SinOp, "sin")
AMP_UNARY_GRAD(CosOp, "cos")
AMP_UNARY_GRAD(TanOp, "tan")
AMP_UNARY_GRAD(AsinOp, "asin")
AMP_UNARY_GRAD(AcosOp, "acos")
AMP_UNARY_GRAD(AtanOp, "atan")
AMP_UNARY_GRAD(SinhOp, "sinh")
AMP_UNARY_GRAD(CoshOp, "cosh")
AMP_UNARY_GRAD(AsinhOp, "asinh")
AMP_UNARY_GRAD(AcoshOp, "acosh")
AMP_UNARY_GRAD(AtanhOp, "atanh")
AMP_UNARY_GRAD(FloorOp, "floor")
AMP_UNARY_GRAD(CeilOp, "ceil")
AMP_UNARY_GRAD(RoundOp, "round")
AMP_UNARY_GRAD(SignOp, "sign")
#undef AMP_UNARY_GRAD

// Unary ops with parameters: alpha (and beta) passed on to amp.unary_grad.
#define AMP_UNARY_GRAD_PARAMS(OP, KIND, ALPHA, BETA)                           \
  LogicalResult OP::buildGradients(OpBuilder &b, ArrayRef<Value> rg,           \
                                   SmallVectorImpl<Value> &og) {               \
    return unaryGrad(b, *this, rg, og, KIND, ALPHA, BETA);                     \
  }
AMP_UNARY_GRAD_PARAMS(EluOp, "elu", getAlpha().convertToFloat(), 0.0f)
AMP_UNARY_GRAD_PARAMS(CeluOp, "celu", getAlpha().convertToFloat(), 0.0f)
AMP_UNARY_GRAD_PARAMS(SeluOp, "selu", getAlpha().convertToFloat(), getGamma().convertToFloat())
AMP_UNARY_GRAD_PARAMS(HardSigmoidOp, "hard_sigmoid", getAlpha().convertToFloat(),
                      getBeta().convertToFloat())
AMP_UNARY_GRAD_PARAMS(ThresholdedReluOp, "thresholded_relu", getAlpha().convertToFloat(), 0.0f)
AMP_UNARY_GRAD_PARAMS(ClipOp, "clip", getMin().convertToFloat(), getMax().convertToFloat())
#undef AMP_UNARY_GRAD_PARAMS

LogicalResult ReluOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                     SmallVectorImpl<Value> &og) {
  if (!isa<FloatType>(getElementTypeOrSelf(getType()))) {
    og.assign(1, Value());
    return success();
  }
  return unaryGrad(b, *this, rg, og, "relu");
}

LogicalResult LeakyReluOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                          SmallVectorImpl<Value> &og) {
  return unaryGrad(b, *this, rg, og, "leaky_relu", getAlpha().convertToFloat());
}

LogicalResult GeluOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                     SmallVectorImpl<Value> &og) {
  return unaryGrad(b, *this, rg, og, getApproximate() == "tanh" ? "gelu_tanh" : "gelu");
}

LogicalResult IdentityOp::buildGradients(OpBuilder &, ArrayRef<Value> rg,
                                         SmallVectorImpl<Value> &og) {
  og.assign(1, rg[0]);
  return success();
}

LogicalResult CastOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                     SmallVectorImpl<Value> &og) {
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
  og[0] = SoftmaxCrossEntropyLossGradOp::create(
      b, getLoc(), getScores().getType(), getLogProb(), getLabels(), getWeights(), rg[0],
      getReduction(), getIgnoreIndexAttr());
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
    Value db = make(b, loc, GemmOp::getOperationName(), {a2, dy2}, {attr(b, "trans_a", b.getBoolAttr(true))});
    og[1] = db ? reshape(b, loc, db, bt.getShape()) : Value();
  } else {
    Value aT = transposeLast2(b, loc, getLhs());
    Value db = aT ? make(b, loc, MatMulOp::getOperationName(), {aT, rg[0]}) : Value();
    og[1] = db ? sumToShape(b, loc, db, bt) : Value();
  }
  return success(og[0] && og[1]);
}

LogicalResult GemmOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                     SmallVectorImpl<Value> &og) {
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
      dc = make(b, loc, MulOp::getOperationName(), {dy, scalar(b, loc, dy, getBeta().convertToDouble())});
    og[2] = dc ? sumToShape(b, loc, dc, c.getType()) : Value();
    if (!og[2])
      return failure();
  }
  return success();
}

LogicalResult ConvOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                     SmallVectorImpl<Value> &og) {
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
  StringAttr notSet = b.getStringAttr("NOTSET");
  og[0] = ConvOp::create(b, loc, rg[0], getW(), Value(), notSet, getDilationsAttr(),
                         getGroupAttr(), getKernelShapeAttr(), getPadsAttr(), getStridesAttr(),
                         getAccumulateAttr())
              .getOutput();
  og[1] = ConvGradOp::create(b, loc, rg[0], getW(), getX(), notSet, getDilationsAttr(),
                             getGroupAttr(), getKernelShapeAttr(), getPadsAttr(), getStridesAttr(),
                             getAccumulateAttr())
              .getDw();
  if (getBias()) {
    SmallVector<int64_t> axes{0};
    for (int64_t d = 2; d < getX().getType().getRank(); ++d)
      axes.push_back(d);
    og[2] = make(b, loc, ReduceSumOp::getOperationName(), rg[0],
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
  auto g = LayerNormGradOp::create(b, getLoc(), getX(), getScale(), getMean(), getInvStdDev(),
                                   rg[0], (int64_t)getAxis() < 0 ? (int64_t)getAxis() + rank
                                                                 : (int64_t)getAxis());
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
  og[0] = AveragePoolGradOp::create(b, getLoc(), getX(), rg[0], getAutoPadAttr(),
                                    getCeilModeAttr(), getCountIncludePadAttr(),
                                    getDilationsAttr(), getKernelShapeAttr(), getPadsAttr(),
                                    getStridesAttr());
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
    Value inv = sd ? make(b, loc, DivOp::getOperationName(), {scalar(b, loc, sd, 1.0), sd}) : Value();
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

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

static LogicalResult reshapeBack(OpBuilder &b, Operation *op, ArrayRef<Value> rg,
                                 SmallVectorImpl<Value> &og) {
  og.assign(1, Value());
  if (!rg[0])
    return success();
  og[0] = reshape(b, op->getLoc(), rg[0],
                  cast<RankedTensorType>(op->getOperand(0).getType()).getShape());
  return success(og[0] != nullptr);
}

LogicalResult ReshapeOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                        SmallVectorImpl<Value> &og) {
  return reshapeBack(b, *this, rg, og);
}
LogicalResult FlattenOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                        SmallVectorImpl<Value> &og) {
  return reshapeBack(b, *this, rg, og);
}
LogicalResult SqueezeOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                        SmallVectorImpl<Value> &og) {
  return reshapeBack(b, *this, rg, og);
}
LogicalResult UnsqueezeOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                          SmallVectorImpl<Value> &og) {
  return reshapeBack(b, *this, rg, og);
}

LogicalResult TransposeOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                          SmallVectorImpl<Value> &og) {
  og.assign(1, Value());
  if (!rg[0])
    return success();
  int64_t r = getType().getRank();
  SmallVector<int64_t> perm, inv(r);
  for (int64_t i = 0; i < r; ++i)
    perm.push_back(getPerm() ? (*getPerm())[i] : r - 1 - i);
  for (int64_t i = 0; i < r; ++i)
    inv[perm[i]] = i;
  og[0] = make(b, getLoc(), TransposeOp::getOperationName(), rg[0], {attr(b, "perm", b.getDenseI64ArrayAttr(inv))});
  return success(og[0] != nullptr);
}

//===----------------------------------------------------------------------===//
// Reductions, broadcasts, selection, concatenation, powers, dropout
//===----------------------------------------------------------------------===//

/// Broadcasts `g` (the gradient of a reduction: the input's shape with the
/// reduced dims dropped or kept as 1) back to `target`, times `factor`.
static Value broadcastBack(OpBuilder &b, Location loc, Value g, RankedTensorType target,
                           ArrayRef<int64_t> keptShape, double factor) {
  Value k = reshape(b, loc, g, keptShape);
  if (k && factor != 1.0)
    k = make(b, loc, MulOp::getOperationName(), {k, scalar(b, loc, k, factor)});
  if (!k || cast<RankedTensorType>(k.getType()).getShape() == target.getShape())
    return k;
  return make(b, loc, ExpandOp::getOperationName(), k, {attr(b, "shape", b.getDenseI64ArrayAttr(target.getShape()))});
}

/// A reduction's axes, non-negative (all dims when none are given), or
/// nullopt for noop_with_empty_axes with none: the input passes through.
template <typename ReduceOpT>
static std::optional<SmallVector<int64_t>> reducedAxes(ReduceOpT op, RankedTensorType in) {
  SmallVector<int64_t> axes;
  // (The optional must outlive the loop: ranging over *op.getAxes() would
  // read a destroyed temporary.)
  std::optional<ArrayRef<int64_t>> given = op.getAxes();
  if (given)
    for (int64_t a : *given)
      axes.push_back(a < 0 ? a + in.getRank() : a);
  if (axes.empty()) {
    if (op.getNoopWithEmptyAxes())
      return std::nullopt;
    for (int64_t d = 0; d < in.getRank(); ++d)
      axes.push_back(d);
  }
  return axes;
}

/// What every reduction's gradient starts with: og sized; `go` false when
/// it is already decided (no gradient asked for, a non-float result, or
/// nothing reduced: the gradient passes through); else the reduced axes and
/// the input's shape with them kept as 1.
template <typename ReduceOpT>
static LogicalResult reductionGradStart(ReduceOpT op, ArrayRef<Value> rg, SmallVectorImpl<Value> &og,
                                        bool &go, SmallVector<int64_t> &axes, SmallVector<int64_t> &kept) {
  go = false;
  og.assign(1, Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(op.getType())))
    return success();
  auto in = cast<RankedTensorType>(op.getInput().getType());
  if (!in.hasStaticShape())
    return fail(op, "dynamic shapes");
  std::optional<SmallVector<int64_t>> axesOr = reducedAxes(op, in);
  if (!axesOr) {
    og[0] = rg[0];
    return success();
  }
  axes = *axesOr;
  kept.assign(in.getShape().begin(), in.getShape().end());
  for (int64_t a : axes)
    kept[a] = 1;
  go = true;
  return success();
}

template <typename ReduceOpT>
static LogicalResult reduceGrad(OpBuilder &b, ReduceOpT op, ArrayRef<Value> rg,
                                SmallVectorImpl<Value> &og, bool mean) {
  bool go;
  SmallVector<int64_t> axes, kept;
  if (LogicalResult r = reductionGradStart(op, rg, og, go, axes, kept); failed(r) || !go)
    return r;
  auto in = cast<RankedTensorType>(op.getInput().getType());
  int64_t count = 1;
  for (int64_t a : axes)
    count *= in.getDimSize(a);
  og[0] = broadcastBack(b, op.getLoc(), rg[0], in, kept, mean ? 1.0 / (double)count : 1.0);
  return success(og[0] != nullptr);
}

LogicalResult ReduceSumOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                          SmallVectorImpl<Value> &og) {
  return reduceGrad(b, *this, rg, og, false);
}

LogicalResult ReduceMaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                          SmallVectorImpl<Value> &og) {
  bool go;
  SmallVector<int64_t> axes, kept;
  if (LogicalResult r = reductionGradStart(*this, rg, og, go, axes, kept); failed(r) || !go)
    return r;
  auto in = cast<RankedTensorType>(getInput().getType());
  Location loc = getLoc();
  Value y = reshape(b, loc, getResult(), kept), dy = reshape(b, loc, rg[0], kept);
  if (!y || !dy)
    return failure();
  og[0] = ReduceMaxGradOp::create(b, loc, in, getInput(), y, dy);
  return success();
}

/// torch.prod's gradient without dividing by a zero: with p the product of
/// the nonzero elements and z their count of zeros over the reduced dims,
/// d x_i = dy * (x_i != 0 ? (z == 0 ? p / x_i : 0) : (z == 1 ? p : 0)).
LogicalResult ReduceProdOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                           SmallVectorImpl<Value> &og) {
  bool go;
  SmallVector<int64_t> axes, kept;
  if (LogicalResult r = reductionGradStart(*this, rg, og, go, axes, kept); failed(r) || !go)
    return r;
  Location loc = getLoc();
  Value x = getInput(), dy = reshape(b, loc, rg[0], kept);
  Value zero = scalar(b, loc, x, 0.0), one = scalar(b, loc, x, 1.0);
  SmallVector<NamedAttribute> red{attr(b, "axes", b.getDenseI64ArrayAttr(axes)),
                                  attr(b, "keepdims", b.getBoolAttr(true))};
  Value isZero = make(b, loc, EqualOp::getOperationName(), {x, zero});
  Value xs = isZero ? make(b, loc, WhereOp::getOperationName(), {isZero, one, x}) : Value();
  Value p = xs ? make(b, loc, ReduceProdOp::getOperationName(), xs, red) : Value();
  Value zf = isZero ? make(b, loc, WhereOp::getOperationName(), {isZero, one, zero}) : Value();
  Value nz = zf ? make(b, loc, ReduceSumOp::getOperationName(), zf, red) : Value();
  Value none = nz ? make(b, loc, EqualOp::getOperationName(), {nz, zero}) : Value();
  Value single = nz ? make(b, loc, EqualOp::getOperationName(), {nz, one}) : Value();
  Value pOverX = p ? make(b, loc, DivOp::getOperationName(), {p, xs}) : Value();
  Value atZero = single && p ? make(b, loc, WhereOp::getOperationName(), {single, p, zero}) : Value();
  Value atOther = none && pOverX ? make(b, loc, WhereOp::getOperationName(), {none, pOverX, zero}) : Value();
  Value g = atZero && atOther ? make(b, loc, WhereOp::getOperationName(), {isZero, atZero, atOther}) : Value();
  og[0] = g && dy ? make(b, loc, MulOp::getOperationName(), {g, dy}) : Value();
  return success(og[0] != nullptr);
}

LogicalResult SliceOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                      SmallVectorImpl<Value> &og) {
  og.assign(getOperation()->getNumOperands(), Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(getType())))
    return success();
  auto in = cast<RankedTensorType>(getInput().getType());
  if (!in.hasStaticShape())
    return fail(*this, "dynamic shapes");
  og[0] = SliceGradOp::create(b, getLoc(), rg[0], b.getDenseI64ArrayAttr(in.getShape()),
                              getStartsAttr(), getEndsAttr(), getAxesAttr(), getStepsAttr());
  return success();
}

/// Gather and GatherElements: GradOp scatters dy back into data's shape
/// (summing repeats); integer data carries no gradient.
template <typename GradOp, typename FwdOp>
static LogicalResult gatherGrad(FwdOp op, OpBuilder &b, ArrayRef<Value> rg,
                                SmallVectorImpl<Value> &og) {
  og.assign(op->getNumOperands(), Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(op.getType())))
    return success();
  auto in = cast<RankedTensorType>(op.getData().getType());
  if (!in.hasStaticShape())
    return fail(op, "dynamic shapes");
  // (I64Attr getters are unsigned: a negative axis compares as huge)
  int64_t axis = (int64_t)op.getAxis() < 0 ? (int64_t)op.getAxis() + in.getRank()
                                           : (int64_t)op.getAxis();
  og[0] = GradOp::create(b, op.getLoc(), op.getIndices(), rg[0],
                         b.getDenseI64ArrayAttr(in.getShape()), b.getI64IntegerAttr(axis));
  return success();
}

LogicalResult GatherOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                       SmallVectorImpl<Value> &og) {
  if (failed(gatherGrad<GatherGradOp>(*this, b, rg, og)))
    return failure();
  // Rows amp-autodiff's padding-rows names (nn.Embedding's padding_idx, the
  // gather along axis 0): where(row, 0, dW), exact.
  auto rows = (*this)->getAttrOfType<DenseI64ArrayAttr>("amp.padding_rows");
  if (!rows || !og[0])
    return success();
  auto gt = cast<RankedTensorType>(og[0].getType());
  SmallVector<int64_t> maskShape(gt.getRank(), 1);
  maskShape[0] = gt.getDimSize(0);
  auto mt = RankedTensorType::get(maskShape, b.getI1Type());
  SmallVector<bool> bits(maskShape[0], false);
  for (int64_t r : rows.asArrayRef())
    bits[r] = true;
  Value mask = arith::ConstantOp::create(b, getLoc(), mt,
                                         DenseElementsAttr::get(mt, ArrayRef<bool>(bits)));
  og[0] = WhereOp::create(b, getLoc(), gt, mask, scalar(b, getLoc(), og[0], 0.0), og[0]);
  return success();
}

LogicalResult GatherElementsOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                               SmallVectorImpl<Value> &og) {
  return gatherGrad<GatherElementsGradOp>(*this, b, rg, og);
}

LogicalResult GridSampleOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0])
    return success();
  auto g = GridSampleGradOp::create(b, getLoc(), getX(), getGrid(), rg[0], getModeAttr(), getPaddingModeAttr(),
                                    getAlignCornersAttr());
  og[0] = g.getDx();
  og[1] = g.getDgrid();
  return success();
}

/// TopK's values are a gather of the input at the indices.
LogicalResult TopKOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
  og.assign((*this)->getNumOperands(), Value());
  if (!rg[0])
    return success();
  auto in = getInput().getType();
  if (!in.hasStaticShape())
    return fail(*this, "dynamic shapes");
  int64_t axis = (int64_t)getAxis() < 0 ? (int64_t)getAxis() + in.getRank() : (int64_t)getAxis();
  og[0] = GatherElementsGradOp::create(b, getLoc(), getIndices(), rg[0], b.getDenseI64ArrayAttr(in.getShape()),
                                       b.getI64IntegerAttr(axis))
              .getDdata();
  return success();
}

/// A scatter-add is linear in dy: its gradient gathers from the same places.
LogicalResult GatherElementsGradOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                                   SmallVectorImpl<Value> &og) {
  og.assign(getNumOperands(), Value());
  if (!rg[0])
    return success();
  og[1] = GatherElementsOp::create(b, getLoc(), rg[0], getIndices(), getAxisAttr()).getOutput();
  return success();
}

LogicalResult CumSumOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                       SmallVectorImpl<Value> &og) {
  og.assign(1, Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(getType())))
    return success();
  og[0] = CumSumOp::create(b, getLoc(), rg[0], getAxisAttr(), getExclusiveAttr(),
                           b.getBoolAttr(!getReverse()));
  return success();
}

LogicalResult SliceGradOp::verify() {
  auto dy = cast<RankedTensorType>(getDy().getType());
  auto dx = cast<RankedTensorType>(getDx().getType());
  if (dy.getElementType() != dx.getElementType() || dy.getRank() != dx.getRank())
    return emitOpError("dy and dx must share element type and rank");
  size_t n = getStarts().size();
  if (getEnds().size() != n || (getAxes() && getAxes()->size() != n) ||
      (getSteps() && getSteps()->size() != n))
    return emitOpError("starts, ends, axes and steps must have one entry per sliced axis");
  return success();
}

LogicalResult GatherGradOp::verify() {
  auto dy = cast<RankedTensorType>(getDy().getType());
  auto dd = cast<RankedTensorType>(getDdata().getType());
  auto ix = cast<RankedTensorType>(getIndices().getType());
  if (dy.getElementType() != dd.getElementType())
    return emitOpError("dy and ddata must share the element type");
  if ((int64_t)getAxis() < 0 || (int64_t)getAxis() >= dd.getRank() ||
      dy.getRank() != dd.getRank() - 1 + ix.getRank())
    return emitOpError("shapes of indices ") << ix << ", dy " << dy << " and ddata " << dd
                                             << " do not agree for axis " << getAxis();
  return success();
}

LogicalResult ReduceMaxGradOp::verify() {
  auto x = cast<RankedTensorType>(getX().getType());
  auto y = cast<RankedTensorType>(getY().getType());
  auto dy = cast<RankedTensorType>(getDy().getType());
  if (y.getShape() != dy.getShape() || y.getRank() != x.getRank())
    return emitOpError("y and dy must have x's rank with the reduced dims as 1");
  for (int64_t d = 0; d < x.getRank(); ++d)
    if (y.getDimSize(d) != 1 && y.getDimSize(d) != x.getDimSize(d))
      return emitOpError("y's dim ") << d << " must be 1 or x's";
  return success();
}
LogicalResult ReduceMeanOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                           SmallVectorImpl<Value> &og) {
  return reduceGrad(b, *this, rg, og, true);
}

LogicalResult GlobalAveragePoolOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                                  SmallVectorImpl<Value> &og) {
  og.assign(1, Value());
  if (!rg[0])
    return success();
  auto in = cast<RankedTensorType>(getX().getType());
  if (!in.hasStaticShape())
    return fail(*this, "dynamic shapes");
  SmallVector<int64_t> kept(in.getShape());
  int64_t count = 1;
  for (int64_t d = 2; d < in.getRank(); ++d) {
    count *= in.getDimSize(d);
    kept[d] = 1;
  }
  og[0] = broadcastBack(b, getLoc(), rg[0], in, kept, 1.0 / (double)count);
  return success(og[0] != nullptr);
}

LogicalResult ExpandOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                       SmallVectorImpl<Value> &og) {
  og.assign(1, Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(getType())))
    return success();
  og[0] = sumToShape(b, getLoc(), rg[0], getInput().getType());
  return success(og[0] != nullptr);
}

LogicalResult WhereOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                      SmallVectorImpl<Value> &og) {
  og.assign(3, Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(getType())))
    return success();
  Location loc = getLoc();
  Value zero = scalar(b, loc, rg[0], 0.0);
  Value dx = make(b, loc, WhereOp::getOperationName(), {getCondition(), rg[0], zero});
  Value dy = make(b, loc, WhereOp::getOperationName(), {getCondition(), zero, rg[0]});
  og[1] = dx ? sumToShape(b, loc, dx, getX().getType()) : Value();
  og[2] = dy ? sumToShape(b, loc, dy, getY().getType()) : Value();
  return success(og[1] && og[2]);
}

LogicalResult ConcatOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                       SmallVectorImpl<Value> &og) {
  og.assign(getNumOperands(), Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(getType())))
    return success();
  int64_t rank = getType().getRank();
  int64_t axis = (int64_t)getAxis() < 0 ? (int64_t)getAxis() + rank : (int64_t)getAxis();
  int64_t offset = 0;
  for (auto [i, v] : llvm::enumerate(getInputs())) {
    int64_t size = cast<RankedTensorType>(v.getType()).getDimSize(axis);
    if (ShapedType::isDynamic(size))
      return fail(*this, "dynamic shapes");
    og[i] = make(b, getLoc(), SliceOp::getOperationName(), rg[0],
                 {attr(b, "starts", b.getDenseI64ArrayAttr({offset})),
                  attr(b, "ends", b.getDenseI64ArrayAttr({offset + size})),
                  attr(b, "axes", b.getDenseI64ArrayAttr({axis}))});
    if (!og[i])
      return failure();
    offset += size;
  }
  return success();
}

LogicalResult PowOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                    SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0] || !isa<FloatType>(getElementTypeOrSelf(getType())))
    return success();
  if (getElementTypeOrSelf(getLhs().getType()) != getElementTypeOrSelf(getRhs().getType()))
    return fail(*this, "an exponent of another element type (cast it first)");
  Location loc = getLoc();
  Value a = getLhs(), e = getRhs(), y = getResult();
  // d/da = e * a^(e - 1) * dy;  d/de = y * log(a) * dy.
  Value em1 = make(b, loc, SubOp::getOperationName(), {e, scalar(b, loc, e, 1.0)});
  Value p = em1 ? make(b, loc, PowOp::getOperationName(), {a, em1}) : Value();
  Value pe = p ? make(b, loc, MulOp::getOperationName(), {p, e}) : Value();
  Value da = pe ? make(b, loc, MulOp::getOperationName(), {pe, rg[0]}) : Value();
  Value la = make(b, loc, LogOp::getOperationName(), a);
  Value yl = la ? make(b, loc, MulOp::getOperationName(), {y, la}) : Value();
  Value de = yl ? make(b, loc, MulOp::getOperationName(), {yl, rg[0]}) : Value();
  og[0] = da ? sumToShape(b, loc, da, a.getType()) : Value();
  og[1] = de ? sumToShape(b, loc, de, e.getType()) : Value();
  return success(og[0] && og[1]);
}

LogicalResult DropoutOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                        SmallVectorImpl<Value> &og) {
  og.assign(1, Value());
  if (rg.size() > 1 && rg[1])
    return fail(*this, "its mask");
  if (!rg[0])
    return success();
  double ratio = getRatio().convertToDouble();
  if (!getTrainingMode() || ratio == 0.0) {
    og[0] = rg[0];
    return success();
  }
  // y = x * mask / (1 - ratio): dx = dy * mask / (1 - ratio).
  Location loc = getLoc();
  Value m = CastOp::create(b, loc, getInput().getType(), getMask());
  Value dm = make(b, loc, MulOp::getOperationName(), {rg[0], m});
  og[0] = dm ? make(b, loc, MulOp::getOperationName(), {dm, scalar(b, loc, dm, 1.0 / (1.0 - ratio))}) : Value();
  return success(og[0] != nullptr);
}

LogicalResult BernoulliOp::buildGradients(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &og) {
  og.assign(1, Value()); // torch.bernoulli: zero with respect to p
  return success();
}

LogicalResult UnaryGradOp::verify() {
  static const char *kinds[] = {
      "relu",     "sqrt",         "exp",        "log",      "erf",  "tanh",
      "sigmoid",  "gelu",         "gelu_tanh",  "leaky_relu", "abs", "reciprocal",
      "softplus", "elu",          "celu",       "selu",     "hard_sigmoid",
      "hard_swish", "softsign",   "sin",        "cos",      "floor", "ceil",
      "round",    "sign",         "clip",       "thresholded_relu", "tan", "asin",
      "acos",     "atan",         "sinh",       "cosh",     "asinh", "acosh", "atanh"};
  if (getKind() == "celu" && getAlpha().convertToDouble() == 0.0)
    return emitOpError("celu needs a nonzero alpha");
  for (const char *k : kinds)
    if (getKind() == k)
      return success();
  return emitOpError("unknown kind '") << getKind() << "'";
}

LogicalResult AdamUpdateOp::verify() {
  if (getMode() != "torch" && getMode() != "hf")
    return emitOpError("mode must be torch or hf, got '") << getMode() << "'";
  if (getMode() == "hf" && !getDecoupled())
    return emitOpError("mode hf (Hugging Face's AdamW) has decoupled weight decay");
  return success();
}

LogicalResult SGDUpdateOp::verify() {
  bool hasBuf = getMomentumBuf() != nullptr, hasNew = getNewMomentumBuf() != nullptr;
  if (hasBuf != hasNew)
    return emitOpError("momentum_buf and its result go together");
  if (hasBuf != (getMomentum().convertToDouble() != 0.0))
    return emitOpError("needs a momentum buffer exactly when momentum != 0");
  if (hasBuf && (getMomentumBuf().getType() != getParam().getType() ||
                 getNewMomentumBuf().getType() != getParam().getType()))
    return emitOpError("the momentum buffer must have the parameter's type");
  if (getNesterov() && (getMomentum().convertToDouble() == 0.0 ||
                        getDampening().convertToDouble() != 0.0))
    return emitOpError("nesterov needs momentum > 0 and dampening 0 (as PyTorch)");
  return success();
}

//===----------------------------------------------------------------------===//
// Loss-scaling ops
//===----------------------------------------------------------------------===//

LogicalResult UnscaleAndCheckOp::verify() {
  if (getGrads().size() != getUnscaled().size())
    return emitOpError("has ") << getGrads().size() << " gradients and "
                               << getUnscaled().size() << " results";
  for (auto [i, g, u] : llvm::enumerate(getGrads(), getUnscaled()))
    if (cast<ShapedType>(g.getType()).getShape() != cast<ShapedType>(u.getType()).getShape())
      return emitOpError("result ") << i << " must have gradient " << i << "'s shape";
  return success();
}

void ClipGradNormOp::build(OpBuilder &b, OperationState &state, ValueRange grads,
                           Value foundInf, float maxNorm) {
  SmallVector<Type> types(grads.getTypes());
  build(b, state, types, RankedTensorType::get({}, b.getF32Type()), grads, foundInf,
        b.getF32FloatAttr(maxNorm));
}

LogicalResult ClipGradNormOp::verify() {
  if (getGrads().getTypes() != getClipped().getTypes())
    return emitOpError("results must have the gradients' types");
  if (!(getMaxNorm().convertToDouble() > 0))
    return emitOpError("max_norm must be > 0");
  return success();
}

LogicalResult UpdateScaleOp::verify() {
  if (!(getGrowthFactor().convertToDouble() > 1.0))
    return emitOpError("growth_factor must be > 1");
  double bo = getBackoffFactor().convertToDouble();
  if (!(bo > 0.0 && bo < 1.0))
    return emitOpError("backoff_factor must lie in (0, 1)");
  if (getGrowthInterval() < 1 || getGrowthInterval() > INT32_MAX)
    return emitOpError("growth_interval must be >= 1");
  if (getHysteresis() < 1 || getHysteresis() > INT32_MAX)
    return emitOpError("hysteresis must be >= 1");
  if (!(getMinScale().convertToDouble() >= 0.0))
    return emitOpError("min_scale must be >= 0");
  if (getOnMinScale() != "error" && getOnMinScale() != "warn")
    return emitOpError("on_min_scale must be \"error\" or \"warn\"");
  return success();
}

LogicalResult MicroStepOp::verify() {
  if (getEvery() < 1)
    return emitOpError("every must be >= 1");
  return success();
}
