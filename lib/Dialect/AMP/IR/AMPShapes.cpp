//===- AMPShapes.cpp - ONNX shape and type rules of the amp ops ----------===//
//
// Result-type inference for every amp op. These functions are the verifier
// (InferTypeOpInterface checks declared results against them) and the
// importer's shape inference at once, so each rule is written once. Every
// failure names the op and the rule it breaks.
//
//===----------------------------------------------------------------------===//

#include "ShapeRules.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::shape_rules;

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

template <typename OpTy>
static LogicalResult inferBinary(std::optional<Location> loc, typename OpTy::Adaptor adaptor,
                                 SmallVectorImpl<Type> &types, bool sameElementType) {
  Rules r(loc, OpTy::getOperationName());
  auto lhs = r.ranked(adaptor.getLhs(), "lhs");
  auto rhs = r.ranked(adaptor.getRhs(), "rhs");
  if (failed(lhs) || failed(rhs))
    return failure();
  if (sameElementType && failed(r.sameElementType(*lhs, *rhs, "lhs", "rhs")))
    return failure();
  auto shape = broadcast(r, lhs->getShape(), rhs->getShape(), "lhs", "rhs");
  if (failed(shape))
    return failure();
  types.push_back(RankedTensorType::get(*shape, lhs->getElementType()));
  return success();
}

/// Comparisons and logical ops: the broadcast shape, i1.
template <typename OpTy>
static LogicalResult inferCompare(std::optional<Location> loc, typename OpTy::Adaptor adaptor,
                                  SmallVectorImpl<Type> &types) {
  SmallVector<Type> t;
  if (failed(inferBinary<OpTy>(loc, adaptor, t, true)))
    return failure();
  auto r = cast<RankedTensorType>(t[0]);
  types.push_back(RankedTensorType::get(r.getShape(), IntegerType::get(r.getContext(), 1)));
  return success();
}

#define AMP_COMPARE_INFER(OP)                                                                      \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,          \
                                     SmallVectorImpl<Type> &t) {                                   \
    return inferCompare<OP>(l, a, t);                                                              \
  }
AMP_COMPARE_INFER(EqualOp)
AMP_COMPARE_INFER(LessOp)
AMP_COMPARE_INFER(LessEqualOp)
AMP_COMPARE_INFER(GreaterOp)
AMP_COMPARE_INFER(GreaterEqualOp)
AMP_COMPARE_INFER(AndOp)
AMP_COMPARE_INFER(OrOp)
AMP_COMPARE_INFER(XorOp)
#undef AMP_COMPARE_INFER

#define AMP_BINARY_INFER(OP, SAME)                                                                 \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,          \
                                     SmallVectorImpl<Type> &t) {                                   \
    return inferBinary<OP>(l, a, t, SAME);                                                         \
  }
AMP_BINARY_INFER(AddOp, true)
AMP_BINARY_INFER(SubOp, true)
AMP_BINARY_INFER(MulOp, true)
AMP_BINARY_INFER(DivOp, true)
AMP_BINARY_INFER(PowOp, false)
AMP_BINARY_INFER(MaxOp, true)
AMP_BINARY_INFER(MinOp, true)
AMP_BINARY_INFER(ModOp, true)
AMP_BINARY_INFER(FModOp, true)
#undef AMP_BINARY_INFER

LogicalResult WhereOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto c = r.ranked(adaptor.getCondition(), "condition");
  auto x = r.ranked(adaptor.getX(), "x");
  auto y = r.ranked(adaptor.getY(), "y");
  if (failed(c) || failed(x) || failed(y) || failed(r.sameElementType(*x, *y, "x", "y")))
    return failure();
  auto xy = broadcast(r, x->getShape(), y->getShape(), "x", "y");
  if (failed(xy))
    return failure();
  auto all = broadcast(r, c->getShape(), *xy, "condition", "x/y");
  if (failed(all))
    return failure();
  types.push_back(RankedTensorType::get(*all, x->getElementType()));
  return success();
}

LogicalResult ConvGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  auto w = r.ranked(adaptor.getW(), "w");
  auto dy = r.ranked(adaptor.getDy(), "dy");
  if (failed(x) || failed(w) || failed(dy))
    return failure();
  if (failed(r.sameElementType(*x, *w, "x", "w")) || failed(r.sameElementType(*x, *dy, "x", "dy")))
    return failure();
  if (x->getRank() < 3 || w->getRank() != x->getRank() || dy->getRank() != x->getRank())
    return r.fail("x, w and dy must have the same rank (>= 3), got ", shapeString(x->getShape()),
                  ", ", shapeString(w->getShape()), ", ", shapeString(dy->getShape()));
  types.push_back(*x);
  types.push_back(*w);
  types.push_back(RankedTensorType::get({w->getDimSize(0)}, w->getElementType()));
  return success();
}

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  auto scale = r.ranked(adaptor.getScale(), "scale");
  auto dy = r.ranked(adaptor.getDy(), "dy");
  if (failed(x) || failed(scale) || failed(dy))
    return failure();
  if (failed(verifyCompatibleShape(x->getShape(), dy->getShape())))
    return r.fail("dy ", shapeString(dy->getShape()), " must have x's shape ",
                  shapeString(x->getShape()));
  int64_t axis = adaptor.getAxis();
  if (axis < -x->getRank() || axis >= x->getRank())
    return r.fail("axis ", axis, " out of range for rank ", x->getRank());
  types.push_back(RankedTensorType::get(x->getShape(), dy->getElementType()));
  types.push_back(*scale);
  types.push_back(*scale);
  return success();
}

template <typename Adaptor>
static LogicalResult poolGradTypes(std::optional<Location> loc, StringRef name, Adaptor adaptor,
                                   SmallVectorImpl<Type> &types) {
  Rules r(loc, name);
  auto x = r.ranked(adaptor.getX(), "x");
  auto dy = r.ranked(adaptor.getDy(), "dy");
  if (failed(x) || failed(dy))
    return failure();
  if (x->getRank() != dy->getRank() || x->getRank() < 3)
    return r.fail("x and dy must have the same rank (>= 3), got ", shapeString(x->getShape()),
                  " and ", shapeString(dy->getShape()));
  types.push_back(RankedTensorType::get(x->getShape(), dy->getElementType()));
  return success();
}

LogicalResult MaxPoolGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return poolGradTypes(loc, getOperationName(), adaptor, types);
}

LogicalResult AveragePoolGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                  Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return poolGradTypes(loc, getOperationName(), adaptor, types);
}

LogicalResult BatchNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  auto scale = r.ranked(adaptor.getScale(), "scale");
  auto dy = r.ranked(adaptor.getDy(), "dy");
  if (failed(x) || failed(scale) || failed(dy))
    return failure();
  if (x->getRank() < 2 || failed(verifyCompatibleShape(x->getShape(), dy->getShape())))
    return r.fail("x and dy must be one shape [N, C, ...], got ", shapeString(x->getShape()),
                  " and ", shapeString(dy->getShape()));
  types.push_back(RankedTensorType::get(x->getShape(), dy->getElementType()));
  types.push_back(*scale);
  types.push_back(*scale);
  return success();
}

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  float ratio = adaptor.getRatio().convertToFloat();
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return r.fail("ratio must be in [0, 1), got ", ratio);
  types.push_back(*in);
  types.push_back(RankedTensorType::get(in->getShape(), IntegerType::get(ctx, 1)));
  return success();
}

LogicalResult BernoulliOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  types.push_back(*in);
  return success();
}

/// A random op's result: a static shape, finite parameters.
static LogicalResult verifyRandom(Operation *op, RankedTensorType t, float a, float b,
                                  const char *na, const char *nb) {
  if (!t.hasStaticShape())
    return op->emitOpError("needs a static result shape, got ") << t;
  if (!std::isfinite(a) || !std::isfinite(b))
    return op->emitOpError(na) << " and " << nb << " must be finite, got " << a << " and " << b;
  return success();
}

LogicalResult RandomNormalOp::verify() {
  return verifyRandom(*this, getType(), getMean().convertToFloat(), getScale().convertToFloat(),
                      "mean", "scale");
}

LogicalResult RandomUniformOp::verify() {
  float lo = getLow().convertToFloat(), hi = getHigh().convertToFloat();
  if (failed(verifyRandom(*this, getType(), lo, hi, "low", "high")))
    return failure();
  if (lo > hi)
    return emitOpError("low ") << lo << " is above high " << hi;
  return success();
}

static LogicalResult verifySoftmaxAxis(Operation *op, int64_t axis, RankedTensorType t) {
  int64_t rank = t.getRank();
  if (rank == 0)
    return op->emitOpError("needs an input of rank >= 1");
  if (axis < -rank || axis >= rank)
    return op->emitOpError("axis ") << axis << " is out of range for rank " << rank << " (valid: ["
                                    << -rank << ", " << rank - 1 << "])";
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifySoftmaxAxis(*this, getAxis(), getInput().getType());
}
LogicalResult LogSoftmaxOp::verify() {
  return verifySoftmaxAxis(*this, getAxis(), getInput().getType());
}

LogicalResult CumSumOp::verify() {
  int64_t rank = cast<RankedTensorType>(getType()).getRank(), axis = (int64_t)getAxis();
  if (rank == 0 || axis < -rank || axis >= rank)
    return emitOpError("axis ") << axis << " is out of range for rank " << rank;
  return success();
}

LogicalResult CeluOp::verify() {
  if (getAlpha().convertToDouble() == 0.0)
    return emitOpError("alpha must be nonzero (it divides x)");
  return success();
}

//===----------------------------------------------------------------------===//
// Matrix products and convolution
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto a = r.ranked(adaptor.getLhs(), "lhs");
  auto b = r.ranked(adaptor.getRhs(), "rhs");
  if (failed(a) || failed(b) || failed(r.sameElementType(*a, *b, "lhs", "rhs")))
    return failure();
  if (failed(checkAccumulate(r, adaptor.getAccumulate(), a->getElementType())))
    return failure();
  if (a->getRank() == 0 || b->getRank() == 0)
    return r.fail("operands must have rank >= 1, got ", shapeString(a->getShape()), " and ",
                  shapeString(b->getShape()));
  SmallVector<int64_t> as(a->getShape()), bs(b->getShape());
  bool aVec = as.size() == 1, bVec = bs.size() == 1;
  if (aVec)
    as.insert(as.begin(), 1);
  if (bVec)
    bs.push_back(1);
  int64_t k1 = as.back(), k2 = bs[bs.size() - 2];
  if (!ShapedType::isDynamic(k1) && !ShapedType::isDynamic(k2) && k1 != k2)
    return r.fail("contracted dims differ: lhs ", shapeString(a->getShape()), " has K = ", k1,
                  ", rhs ", shapeString(b->getShape()), " has K = ", k2);
  auto batch = broadcast(r, ArrayRef<int64_t>(as).drop_back(2), ArrayRef<int64_t>(bs).drop_back(2),
                         "lhs batch", "rhs batch");
  if (failed(batch))
    return failure();
  SmallVector<int64_t> out(*batch);
  if (!aVec)
    out.push_back(as[as.size() - 2]);
  if (!bVec)
    out.push_back(bs.back());
  types.push_back(RankedTensorType::get(out, a->getElementType()));
  return success();
}

LogicalResult GemmOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto a = r.ranked(adaptor.getA(), "a");
  auto b = r.ranked(adaptor.getB(), "b");
  if (failed(a) || failed(b) || failed(r.sameElementType(*a, *b, "a", "b")))
    return failure();
  if (failed(checkAccumulate(r, adaptor.getAccumulate(), a->getElementType())))
    return failure();
  if (a->getRank() != 2 || b->getRank() != 2)
    return r.fail("a and b must be 2-D, got ", shapeString(a->getShape()), " and ",
                  shapeString(b->getShape()));
  bool ta = adaptor.getTransA(), tb = adaptor.getTransB();
  int64_t m = a->getDimSize(ta ? 1 : 0), ka = a->getDimSize(ta ? 0 : 1);
  int64_t kb = b->getDimSize(tb ? 1 : 0), n = b->getDimSize(tb ? 0 : 1);
  if (!ShapedType::isDynamic(ka) && !ShapedType::isDynamic(kb) && ka != kb)
    return r.fail("contracted dims differ: op(a) is [", m, ", ", ka, "], op(b) is [", kb, ", ", n,
                  "] (trans_a = ", ta, ", trans_b = ", tb, ")");
  if (Value cv = adaptor.getC()) {
    auto c = r.ranked(cv, "c");
    if (failed(c) || failed(r.epilogueType(*a, *c, "a", "c")))
      return failure();
    ArrayRef<int64_t> cs = c->getShape();
    int64_t want[2] = {m, n};
    bool ok = cs.size() <= 2;
    for (size_t i = 0; ok && i < cs.size(); ++i) {
      int64_t cd = cs[cs.size() - 1 - i], od = want[1 - i];
      ok = cd == 1 || ShapedType::isDynamic(cd) || ShapedType::isDynamic(od) || cd == od;
    }
    if (!ok)
      return r.fail("c ", shapeString(cs), " cannot be broadcast to the result [", m, ", ", n, "]");
  }
  types.push_back(RankedTensorType::get({m, n}, a->getElementType()));
  return success();
}

LogicalResult ConvTransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  auto w = r.ranked(adaptor.getW(), "w");
  if (failed(x) || failed(w) || failed(r.sameElementType(*x, *w, "x", "w")))
    return failure();
  if (failed(checkAccumulate(r, adaptor.getAccumulate(), x->getElementType())))
    return failure();
  int64_t rank = x->getRank(), n = rank - 2;
  if (rank < 3)
    return r.fail("x must be [N, C, D1, ...] with at least one spatial dim, got ",
                  shapeString(x->getShape()));
  if (w->getRank() != rank)
    return r.fail("w must have the rank of x (", rank, "), got ", shapeString(w->getShape()));
  int64_t group = adaptor.getGroup();
  if (group < 1)
    return r.fail("group must be >= 1, got ", group);
  int64_t c = x->getDimSize(1), wc = w->getDimSize(0), mg = w->getDimSize(1);
  if (!ShapedType::isDynamic(c) && !ShapedType::isDynamic(wc) && c != wc)
    return r.fail("input channels ", c, " must equal w's dim 0 (", wc, ")");
  if (!ShapedType::isDynamic(wc) && wc % group != 0)
    return r.fail("input channels ", wc, " must be divisible by group ", group);
  int64_t m = ShapedType::isDynamic(mg) ? ShapedType::kDynamic : mg * group;
  SmallVector<int64_t> kernel(w->getShape().drop_front(2));
  if (auto ks = adaptor.getKernelShape()) {
    if (failed(verifyCompatibleShape(*ks, kernel)))
      return r.fail("kernel_shape ", shapeString(*ks), " does not match w's spatial dims ",
                    shapeString(kernel));
    kernel.assign(ks->begin(), ks->end());
  }
  if (llvm::any_of(kernel, ShapedType::isDynamic))
    return r.fail("needs static kernel dims, w is ", shapeString(w->getShape()));
  auto per = [&](std::optional<ArrayRef<int64_t>> a, size_t len, const char *name,
                 SmallVectorImpl<int64_t> &out, int64_t dflt) -> LogicalResult {
    if (!a) {
      out.assign(len, dflt);
      return success();
    }
    if (a->size() != len)
      return r.fail(name, " must have ", (int64_t)len, " values, got ", shapeString(*a));
    out.assign(a->begin(), a->end());
    return success();
  };
  SmallVector<int64_t> strides, dil, pads, outPad;
  if (failed(per(adaptor.getStrides(), n, "strides", strides, 1)) ||
      failed(per(adaptor.getDilations(), n, "dilations", dil, 1)) ||
      failed(per(adaptor.getPads(), 2 * n, "pads", pads, 0)) ||
      failed(per(adaptor.getOutputPadding(), n, "output_padding", outPad, 0)))
    return failure();
  SmallVector<int64_t> out{x->getDimSize(0), m};
  for (int64_t i = 0; i < n; ++i) {
    if (strides[i] < 1 || dil[i] < 1 || kernel[i] < 1)
      return r.fail("strides, dilations and kernel dims must be >= 1");
    if (pads[i] < 0 || pads[n + i] < 0)
      return r.fail("pads must be >= 0, got ", shapeString(pads));
    if (outPad[i] < 0 || outPad[i] >= strides[i])
      return r.fail("output_padding ", shapeString(outPad),
                    " must be >= 0 and less than the stride ", shapeString(strides));
    int64_t d = x->getDimSize(2 + i);
    if (ShapedType::isDynamic(d)) {
      out.push_back(ShapedType::kDynamic);
      continue;
    }
    int64_t o =
        strides[i] * (d - 1) + outPad[i] + (kernel[i] - 1) * dil[i] + 1 - pads[i] - pads[n + i];
    if (o < 1)
      return r.fail("spatial dim ", i, " of the result would be ", o, " (pads too large)");
    out.push_back(o);
  }
  if (Value bv = adaptor.getBias()) {
    auto b = r.ranked(bv, "bias");
    if (failed(b) || failed(r.epilogueType(*x, *b, "x", "bias")))
      return failure();
    if (b->getRank() != 1 || failed(verifyCompatibleShape(b->getShape(), {m})))
      return r.fail("bias must be [M] = [", m, "], got ", shapeString(b->getShape()));
  }
  types.push_back(RankedTensorType::get(out, x->getElementType()));
  return success();
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  auto w = r.ranked(adaptor.getW(), "w");
  if (failed(x) || failed(w) || failed(r.sameElementType(*x, *w, "x", "w")))
    return failure();
  if (failed(checkAccumulate(r, adaptor.getAccumulate(), x->getElementType())))
    return failure();
  if (x->getRank() < 3)
    return r.fail("x must be [N, C, D1, ...] with at least one spatial dim, "
                  "got ",
                  shapeString(x->getShape()));
  if (w->getRank() != x->getRank())
    return r.fail("w must have the rank of x (", x->getRank(), "), got ",
                  shapeString(w->getShape()));
  int64_t group = adaptor.getGroup();
  if (group < 1)
    return r.fail("group must be >= 1, got ", group);
  int64_t c = x->getDimSize(1), m = w->getDimSize(0), cg = w->getDimSize(1);
  if (!ShapedType::isDynamic(c) && !ShapedType::isDynamic(cg) && c != cg * group)
    return r.fail("input channels ", c, " must equal w's dim 1 (", cg, ") times group (", group,
                  ")");
  if (!ShapedType::isDynamic(m) && m % group != 0)
    return r.fail("output channels ", m, " must be divisible by group ", group);
  SmallVector<int64_t> kernel(w->getShape().drop_front(2));
  if (auto ks = adaptor.getKernelShape()) {
    if (failed(verifyCompatibleShape(*ks, kernel)))
      return r.fail("kernel_shape ", shapeString(*ks), " does not match w's spatial dims ",
                    shapeString(kernel));
    kernel.assign(ks->begin(), ks->end());
  }
  if (llvm::any_of(kernel, ShapedType::isDynamic))
    return r.fail("needs static kernel dims, w is ", shapeString(w->getShape()));
  if (Value bv = adaptor.getBias()) {
    auto b = r.ranked(bv, "bias");
    if (failed(b) || failed(r.epilogueType(*x, *b, "x", "bias")))
      return failure();
    if (b->getRank() != 1 || failed(verifyCompatibleShape(b->getShape(), {m})))
      return r.fail("bias must be [M] = [", m, "], got ", shapeString(b->getShape()));
  }
  WindowAttrs wa{adaptor.getAutoPad(), kernel, adaptor.getStrides(), adaptor.getDilations(),
                 adaptor.getPads(),    false};
  auto spatial = windowOutput(r, x->getShape().drop_front(2), wa);
  if (failed(spatial))
    return failure();
  SmallVector<int64_t> out{x->getDimSize(0), m};
  llvm::append_range(out, *spatial);
  types.push_back(RankedTensorType::get(out, x->getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Normalisation and pooling
//===----------------------------------------------------------------------===//

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  if (failed(x))
    return failure();
  if (x->getRank() < 2)
    return r.fail("x must be [N, C, ...], got ", shapeString(x->getShape()));
  int64_t c = x->getDimSize(1);
  std::pair<Value, StringRef> params[] = {{adaptor.getScale(), "scale"},
                                          {adaptor.getBias(), "bias"},
                                          {adaptor.getMean(), "mean"},
                                          {adaptor.getVar(), "var"}};
  for (auto [v, name] : params) {
    auto t = r.ranked(v, name);
    if (failed(t))
      return failure();
    if (t->getRank() != 1 || failed(verifyCompatibleShape(t->getShape(), {c})))
      return r.fail(name, " must be [C] = [", c, "], got ", shapeString(t->getShape()));
  }
  if (failed(r.sameElementType(adaptor.getScale().getType(), adaptor.getBias().getType(), "scale",
                               "bias")) ||
      failed(r.sameElementType(adaptor.getMean().getType(), adaptor.getVar().getType(), "mean",
                               "var")))
    return failure();
  float momentum = adaptor.getMomentum().convertToFloat();
  if (!(momentum >= 0.0f && momentum <= 1.0f))
    return r.fail("momentum must be in [0, 1], got ", momentum);
  if (!(adaptor.getEpsilon().convertToFloat() >= 0.0f))
    return r.fail("epsilon must be >= 0");
  types.push_back(*x);
  types.push_back(adaptor.getMean().getType());
  types.push_back(adaptor.getVar().getType());
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  auto s = r.ranked(adaptor.getScale(), "scale");
  if (failed(x) || failed(s) || failed(r.sameElementType(*x, *s, "x", "scale")))
    return failure();
  if (x->getRank() == 0)
    return r.fail("x must have rank >= 1");
  auto axis = r.axis(adaptor.getAxis(), x->getRank(), "axis");
  if (failed(axis))
    return failure();
  if (adaptor.getStashType() != 1)
    return r.fail("stash_type ", adaptor.getStashType(),
                  " is not supported (statistics are computed in f32, "
                  "stash_type 1)");
  ArrayRef<int64_t> normalized = x->getShape().drop_front(*axis);
  auto checkParam = [&](RankedTensorType t, StringRef name) -> LogicalResult {
    SmallVector<int64_t> b;
    if (t.getRank() > (int64_t)normalized.size() ||
        !OpTrait::util::getBroadcastedShape(normalized, t.getShape(), b) ||
        failed(verifyCompatibleShape(b, normalized)))
      return r.fail(name, " ", shapeString(t.getShape()),
                    " does not broadcast to the normalized shape ", shapeString(normalized));
    return success();
  };
  if (failed(checkParam(*s, "scale")))
    return failure();
  if (Value bv = adaptor.getBias()) {
    auto b = r.ranked(bv, "bias");
    if (failed(b) || failed(r.sameElementType(*x, *b, "x", "bias")) ||
        failed(checkParam(*b, "bias")))
      return failure();
  }
  SmallVector<int64_t> stat(x->getShape().take_front(*axis));
  stat.append(x->getRank() - *axis, 1);
  auto statType = RankedTensorType::get(stat, Float32Type::get(ctx));
  types.push_back(*x);
  types.push_back(statType);
  types.push_back(statType);
  return success();
}

template <typename Adaptor>
static FailureOr<SmallVector<int64_t>> poolShape(const Rules &r, RankedTensorType x,
                                                 Adaptor adaptor) {
  if (x.getRank() < 3)
    return r.fail("x must be [N, C, D1, ...] with at least one "
                  "spatial dim, got ",
                  shapeString(x.getShape()));
  WindowAttrs wa{adaptor.getAutoPad(),   adaptor.getKernelShape(), adaptor.getStrides(),
                 adaptor.getDilations(), adaptor.getPads(),        adaptor.getCeilMode()};
  auto spatial = windowOutput(r, x.getShape().drop_front(2), wa);
  if (failed(spatial))
    return failure();
  SmallVector<int64_t> out(x.getShape().take_front(2));
  llvm::append_range(out, *spatial);
  return out;
}

LogicalResult MaxPoolOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  if (failed(x))
    return failure();
  if (adaptor.getStorageOrder() != 0 && adaptor.getStorageOrder() != 1)
    return r.fail("storage_order must be 0 or 1, got ", adaptor.getStorageOrder());
  auto out = poolShape(r, *x, adaptor);
  if (failed(out))
    return failure();
  types.push_back(RankedTensorType::get(*out, x->getElementType()));
  types.push_back(RankedTensorType::get(*out, IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult AveragePoolOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  if (failed(x))
    return failure();
  auto out = poolShape(r, *x, adaptor);
  if (failed(out))
    return failure();
  types.push_back(RankedTensorType::get(*out, x->getElementType()));
  return success();
}

LogicalResult GlobalAveragePoolOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                    Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  if (failed(x))
    return failure();
  if (x->getRank() < 3)
    return r.fail("x must be [N, C, D1, ...], got ", shapeString(x->getShape()));
  SmallVector<int64_t> out(x->getShape().take_front(2));
  out.append(x->getRank() - 2, 1);
  types.push_back(RankedTensorType::get(out, x->getElementType()));
  return success();
}
