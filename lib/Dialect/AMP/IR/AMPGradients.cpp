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
  return make(b, loc, "amp.reshape", v, {attr(b, "shape", b.getDenseI64ArrayAttr(shape))});
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
    s = make(b, loc, "amp.reduce_sum", g,
             {attr(b, "axes", b.getDenseI64ArrayAttr(axes)), attr(b, "keepdims", b.getBoolAttr(true))});
  return s ? reshape(b, loc, s, tt.getShape()) : Value();
}

Value transposeLast2(OpBuilder &b, Location loc, Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> perm;
  for (int64_t i = 0; i < t.getRank(); ++i)
    perm.push_back(i);
  std::swap(perm[t.getRank() - 1], perm[t.getRank() - 2]);
  return make(b, loc, "amp.transpose", v, {attr(b, "perm", b.getDenseI64ArrayAttr(perm))});
}

LogicalResult unaryGrad(OpBuilder &b, Operation *op, ArrayRef<Value> rg,
                        SmallVectorImpl<Value> &og, StringRef kind, float alpha = 0.0f) {
  og.assign(op->getNumOperands(), Value());
  if (!rg[0])
    return success();
  og[0] = UnaryGradOp::create(b, op->getLoc(), op->getOperand(0), rg[0], b.getStringAttr(kind),
                              b.getF32FloatAttr(alpha));
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
  Value neg = make(b, getLoc(), "amp.mul", {rg[0], scalar(b, getLoc(), rg[0], -1.0)});
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
  Value da = make(b, getLoc(), "amp.mul", {rg[0], getRhs()});
  Value db = make(b, getLoc(), "amp.mul", {rg[0], getLhs()});
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
  Value q = make(b, loc, "amp.div", {rg[0], getRhs()});
  Value qy = q ? make(b, loc, "amp.mul", {q, getResult()}) : Value();
  Value neg = qy ? make(b, loc, "amp.mul", {qy, scalar(b, loc, qy, -1.0)}) : Value();
  og[0] = q ? sumToShape(b, loc, q, getLhs().getType()) : Value();
  og[1] = neg ? sumToShape(b, loc, neg, getRhs().getType()) : Value();
  return success(og[0] && og[1]);
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
#undef AMP_UNARY_GRAD

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
  Value aT = transposeLast2(b, loc, getLhs());
  Value da = bT ? make(b, loc, "amp.matmul", {rg[0], bT}) : Value();
  Value db = aT ? make(b, loc, "amp.matmul", {aT, rg[0]}) : Value();
  og[0] = da ? sumToShape(b, loc, da, at) : Value();
  og[1] = db ? sumToShape(b, loc, db, bt) : Value();
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
    return make(b, loc, "amp.gemm", {x, y},
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
      dc = make(b, loc, "amp.mul", {dy, scalar(b, loc, dy, getBeta().convertToDouble())});
    og[2] = dc ? sumToShape(b, loc, dc, c.getType()) : Value();
    if (!og[2])
      return failure();
  }
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
  og[0] = make(b, getLoc(), "amp.transpose", rg[0], {attr(b, "perm", b.getDenseI64ArrayAttr(inv))});
  return success(og[0] != nullptr);
}

LogicalResult UnaryGradOp::verify() {
  static const char *kinds[] = {"relu", "sqrt",    "exp",  "log",       "erf",
                                "tanh", "sigmoid", "gelu", "gelu_tanh", "leaky_relu"};
  for (const char *k : kinds)
    if (getKind() == k)
      return success();
  return emitOpError("unknown kind '") << getKind() << "'";
}
