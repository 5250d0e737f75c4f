//===- AMPGradientsData.cpp - gradients of data movement and reductions ===//
//
// The reverse-mode rules of the data-movement ops, the reductions, the
// broadcasts, selections, concatenation, powers, dropout and the
// loss-scaling ops. Element-wise, softmax, loss and matrix-product rules
// are in AMPGradients.cpp.
//
//===----------------------------------------------------------------------===//

#include "GradientUtils.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::gradient_utils;

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
  og[0] = make(b, getLoc(), TransposeOp::getOperationName(), rg[0],
               {attr(b, "perm", b.getDenseI64ArrayAttr(inv))});
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
  return make(b, loc, ExpandOp::getOperationName(), k,
              {attr(b, "shape", b.getDenseI64ArrayAttr(target.getShape()))});
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
static LogicalResult reductionGradStart(ReduceOpT op, ArrayRef<Value> rg,
                                        SmallVectorImpl<Value> &og, bool &go,
                                        SmallVector<int64_t> &axes, SmallVector<int64_t> &kept) {
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
  Value atZero =
      single && p ? make(b, loc, WhereOp::getOperationName(), {single, p, zero}) : Value();
  Value atOther =
      none && pOverX ? make(b, loc, WhereOp::getOperationName(), {none, pOverX, zero}) : Value();
  Value g = atZero && atOther ? make(b, loc, WhereOp::getOperationName(), {isZero, atZero, atOther})
                              : Value();
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
  int64_t axis =
      (int64_t)op.getAxis() < 0 ? (int64_t)op.getAxis() + in.getRank() : (int64_t)op.getAxis();
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
  auto rows = (*this)->getAttrOfType<DenseI64ArrayAttr>(attrname::kPaddingRows);
  if (!rows || !og[0])
    return success();
  auto gt = cast<RankedTensorType>(og[0].getType());
  SmallVector<int64_t> maskShape(gt.getRank(), 1);
  maskShape[0] = gt.getDimSize(0);
  auto mt = RankedTensorType::get(maskShape, b.getI1Type());
  SmallVector<bool> bits(maskShape[0], false);
  for (int64_t r : rows.asArrayRef())
    bits[r] = true;
  Value mask =
      arith::ConstantOp::create(b, getLoc(), mt, DenseElementsAttr::get(mt, ArrayRef<bool>(bits)));
  og[0] = WhereOp::create(b, getLoc(), gt, mask, scalar(b, getLoc(), og[0], 0.0), og[0]);
  return success();
}

LogicalResult GatherElementsOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                               SmallVectorImpl<Value> &og) {
  return gatherGrad<GatherElementsGradOp>(*this, b, rg, og);
}

LogicalResult GridSampleOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg,
                                           SmallVectorImpl<Value> &og) {
  og.assign(2, Value());
  if (!rg[0])
    return success();
  auto g = GridSampleGradOp::create(b, getLoc(), getX(), getGrid(), rg[0], getModeAttr(),
                                    getPaddingModeAttr(), getAlignCornersAttr());
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
  og[0] =
      GatherElementsGradOp::create(b, getLoc(), getIndices(), rg[0],
                                   b.getDenseI64ArrayAttr(in.getShape()), b.getI64IntegerAttr(axis))
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
    return emitOpError("shapes of indices ")
           << ix << ", dy " << dy << " and ddata " << dd << " do not agree for axis " << getAxis();
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

LogicalResult PowOp::buildGradients(OpBuilder &b, ArrayRef<Value> rg, SmallVectorImpl<Value> &og) {
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
  og[0] =
      dm ? make(b, loc, MulOp::getOperationName(), {dm, scalar(b, loc, dm, 1.0 / (1.0 - ratio))})
         : Value();
  return success(og[0] != nullptr);
}

LogicalResult BernoulliOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                          SmallVectorImpl<Value> &og) {
  og.assign(1, Value()); // torch.bernoulli: zero with respect to p
  return success();
}

LogicalResult UnaryGradOp::verify() {
  if (getKind() == UnaryKind::celu && getAlpha().convertToDouble() == 0.0)
    return emitOpError("celu needs a nonzero alpha");
  return success();
}

LogicalResult AdamUpdateOp::verify() {
  if (getMode() == AdamMode::hf && !getDecoupled())
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
  if (getNesterov() &&
      (getMomentum().convertToDouble() == 0.0 || getDampening().convertToDouble() != 0.0))
    return emitOpError("nesterov needs momentum > 0 and dampening 0 (as PyTorch)");
  return success();
}

//===----------------------------------------------------------------------===//
// Loss-scaling ops
//===----------------------------------------------------------------------===//

LogicalResult UnscaleAndCheckOp::verify() {
  if (getGrads().size() != getUnscaled().size())
    return emitOpError("has ") << getGrads().size() << " gradients and " << getUnscaled().size()
                               << " results";
  for (auto [i, g, u] : llvm::enumerate(getGrads(), getUnscaled()))
    if (cast<ShapedType>(g.getType()).getShape() != cast<ShapedType>(u.getType()).getShape())
      return emitOpError("result ") << i << " must have gradient " << i << "'s shape";
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (getInputs().getTypes() != getOutputs().getTypes())
    return emitOpError("results must have the inputs' types");
  return success();
}

void ClipGradNormOp::build(OpBuilder &b, OperationState &state, ValueRange grads, Value foundInf,
                           float maxNorm) {
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
  return success();
}

LogicalResult MicroStepOp::verify() {
  if (getEvery() < 1)
    return emitOpError("every must be >= 1");
  return success();
}
