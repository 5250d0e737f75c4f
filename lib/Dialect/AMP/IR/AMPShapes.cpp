//===- AMPShapes.cpp - ONNX shape and type rules of the amp ops ----------===//
//
// Result-type inference for every amp op. These functions are the verifier
// (InferTypeOpInterface checks declared results against them) and the
// importer's shape inference at once, so each rule is written once. Every
// failure names the op and the rule it breaks.
//
//===----------------------------------------------------------------------===//

#include "llvm/Support/CheckedArithmetic.h"
#include "amp/Dialect/AMP/IR/AMPOps.h"

#include "mlir/Dialect/Traits.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <numeric>

using namespace mlir;
using namespace mlir::amp;

namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;

std::string shapeString(ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "[] (scalar)";
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleave(
      shape,
      [&](int64_t d) {
        if (ShapedType::isDynamic(d))
          os << "?";
        else
          os << d;
      },
      [&] { os << ", "; });
  os << "]";
  return s;
}

/// Emits "'amp.<op>' op <message>" where a location is known (verification,
/// import) and stays silent otherwise.
class Rules {
public:
  Rules(std::optional<Location> loc, StringRef opName)
      : loc(loc), opName(opName) {}

  template <typename... Args>
  LogicalResult fail(Args &&...args) const {
    return emitOptionalError(loc, "'", opName, "' op ",
                             std::forward<Args>(args)...);
  }

  /// The operand as a ranked tensor, or an error naming it.
  FailureOr<RankedTensorType> ranked(Value v, StringRef name) const {
    if (!v)
      return fail("is missing its operand '", name, "'");
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t)
      return fail("operand '", name, "' must be a ranked tensor, got ",
                          v.getType());
    return t;
  }

  /// `axis` in [-rank, rank-1] made non-negative.
  FailureOr<int64_t> axis(int64_t axis, int64_t rank, StringRef what) const {
    if (axis < -rank || axis >= std::max<int64_t>(rank, 1) ||
        (rank == 0 && axis != 0 && axis != -1))
      return fail(what, " ", axis, " is out of range for rank ", rank,
                          " (valid: [", -rank, ", ", rank - 1, "])");
    return axis < 0 ? axis + rank : axis;
  }

  /// A list of unique axes, each normalised to [0, rank).
  FailureOr<SmallVector<int64_t>> axes(ArrayRef<int64_t> list, int64_t rank,
                                       StringRef what) const {
    SmallVector<int64_t> out;
    for (int64_t a : list) {
      if (a < -rank || a >= rank)
        return fail(what, " ", a, " is out of range for rank ", rank,
                            " (valid: [", -rank, ", ", rank - 1, "])");
      int64_t n = a < 0 ? a + rank : a;
      if (llvm::is_contained(out, n))
        return fail(what, " name axis ", n, " more than once");
      out.push_back(n);
    }
    return out;
  }

  LogicalResult sameElementType(Type a, Type b, StringRef aName,
                                StringRef bName) const {
    if (getElementTypeOrSelf(a) == getElementTypeOrSelf(b))
      return success();
    return fail("element types of '", aName, "' (", getElementTypeOrSelf(a),
                ") and '", bName, "' (", getElementTypeOrSelf(b),
                ") must be equal");
  }

  std::optional<Location> loc;
  StringRef opName;
};

/// Multiplies dims; dynamic if any is dynamic; failure (an error naming the
/// shape) when the count does not fit in 63 bits.
FailureOr<int64_t> product(const Rules &r, ArrayRef<int64_t> dims) {
  int64_t p = 1;
  bool dyn = false;
  for (int64_t d : dims) {
    if (ShapedType::isDynamic(d)) {
      dyn = true;
      continue;
    }
    if (d < 0)
      return r.fail("shape ", shapeString(dims), " has a negative dim");
    std::optional<int64_t> q = llvm::checkedMul(p, d);
    if (!q)
      return r.fail("shape ", shapeString(dims), " has more elements than 64 bits count");
    p = *q;
  }
  return dyn ? kDyn : p;
}

/// Numpy broadcasting of two shapes, or an error naming both.
FailureOr<SmallVector<int64_t>> broadcast(const Rules &r, ArrayRef<int64_t> a,
                                          ArrayRef<int64_t> b, StringRef aName,
                                          StringRef bName) {
  SmallVector<int64_t> out;
  if (!OpTrait::util::getBroadcastedShape(a, b, out))
    return r.fail("shapes of '", aName, "' ", shapeString(a), " and '",
                          bName, "' ", shapeString(b),
                          " are not broadcast-compatible");
  return out;
}

/// The sizes of the spatial output dims of a convolution or pooling window.
struct WindowAttrs {
  StringRef autoPad;
  ArrayRef<int64_t> kernel;
  std::optional<ArrayRef<int64_t>> strides, dilations, pads;
  bool ceilMode = false;
};

FailureOr<SmallVector<int64_t>> windowOutput(const Rules &r,
                                             ArrayRef<int64_t> spatial,
                                             const WindowAttrs &w) {
  size_t n = spatial.size();
  if (w.kernel.size() != n)
    return r.fail("kernel_shape has ", w.kernel.size(),
                          " entries but the input has ", n, " spatial dims");
  auto check = [&](std::optional<ArrayRef<int64_t>> v, size_t want,
                   StringRef name, int64_t minValue) -> LogicalResult {
    if (!v)
      return success();
    if (v->size() != want)
      return r.fail(name, " has ", v->size(), " entries, expected ", want);
    for (int64_t x : *v)
      if (x < minValue)
        return r.fail(name, " entries must be >= ", minValue, ", got ", x);
    return success();
  };
  if (failed(check(w.strides, n, "strides", 1)) ||
      failed(check(w.dilations, n, "dilations", 1)) ||
      failed(check(w.pads, 2 * n, "pads", 0)))
    return failure();
  for (int64_t k : w.kernel)
    if (k < 1)
      return r.fail("kernel_shape entries must be >= 1, got ", k);
  StringRef ap = w.autoPad;
  if (ap != "NOTSET" && ap != "VALID" && ap != "SAME_UPPER" &&
      ap != "SAME_LOWER")
    return r.fail("auto_pad must be NOTSET, VALID, SAME_UPPER or "
                          "SAME_LOWER, got \"",
                          ap, "\"");
  if (ap != "NOTSET" && w.pads && llvm::any_of(*w.pads, [](int64_t p) {
        return p != 0;
      }))
    return r.fail("pads must not be given with auto_pad ", ap);

  SmallVector<int64_t> out;
  for (size_t i = 0; i < n; ++i) {
    int64_t in = spatial[i];
    int64_t s = w.strides ? (*w.strides)[i] : 1;
    int64_t d = w.dilations ? (*w.dilations)[i] : 1;
    int64_t k = (w.kernel[i] - 1) * d + 1; // effective window
    if (ShapedType::isDynamic(in)) {
      out.push_back(kDyn);
      continue;
    }
    if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      out.push_back(llvm::divideCeil(in, s));
      continue;
    }
    int64_t padded = in;
    if (ap == "NOTSET" && w.pads)
      padded += (*w.pads)[i] + (*w.pads)[i + n];
    if (padded < k)
      return r.fail("spatial dim ", i, " (", in, ", ", padded,
                            " with padding) is smaller than the window (",
                            k, ")");
    int64_t span = padded - k;
    int64_t o = (w.ceilMode ? llvm::divideCeil(span, s) : span / s) + 1;
    // Ceil mode: a window that would start inside the end padding is
    // dropped (ONNX >= 1.16 and PyTorch agree on this).
    if (w.ceilMode && ap == "NOTSET" && (o - 1) * s >= in + (w.pads ? (*w.pads)[i] : 0))
      --o;
    out.push_back(o);
  }
  return out;
}

/// `accumulate` (matrix products, convolution): f32, or the operand type.
LogicalResult checkAccumulate(const Rules &r, std::optional<Type> acc,
                              Type operandElt) {
  if (!acc)
    return success();
  if (!isa<FloatType>(operandElt))
    return r.fail("accumulate is only meaningful for float operands, got ",
                  operandElt);
  if (!acc->isF32() && *acc != operandElt)
    return r.fail("accumulate type ", *acc, " must be f32 or the operand type ",
                  operandElt);
  return success();
}

LogicalResult checkReduction(const Rules &r, StringRef reduction) {
  if (reduction == "mean" || reduction == "sum" || reduction == "none")
    return success();
  return r.fail("reduction must be \"mean\", \"sum\" or \"none\", got \"",
                reduction, "\"");
}

/// Shared rule of the two classification losses: scores [N, C, D...],
/// labels [N, D...], weights [C].
FailureOr<Type> lossType(const Rules &r, RankedTensorType scores,
                         RankedTensorType labels, Value weights,
                         StringRef reduction, StringRef scoresName,
                         StringRef labelsName) {
  if (failed(checkReduction(r, reduction)))
    return failure();
  if (scores.getRank() < 2)
    return r.fail("'", scoresName, "' must be [N, C, ...], got rank ",
                          scores.getRank());
  if (labels.getRank() != scores.getRank() - 1)
    return r.fail("'", labelsName, "' must have rank ",
                          scores.getRank() - 1, " ([N, D...] for '",
                          scoresName, "' ", shapeString(scores.getShape()),
                          "), got ", shapeString(labels.getShape()));
  SmallVector<int64_t> expected{scores.getDimSize(0)};
  llvm::append_range(expected, scores.getShape().drop_front(2));
  if (failed(verifyCompatibleShape(expected, labels.getShape())))
    return r.fail("'", labelsName, "' shape ",
                          shapeString(labels.getShape()), " does not match ",
                          shapeString(expected), " of '", scoresName, "'");
  if (weights) {
    auto w = dyn_cast<RankedTensorType>(weights.getType());
    if (!w || w.getRank() != 1 ||
        failed(verifyCompatibleShape(w.getShape(),
                                     {scores.getDimSize(1)})))
      return r.fail("class weights must be [C] = [",
                            scores.getDimSize(1), "], got ",
                            weights.getType());
    if (failed(r.sameElementType(w, scores, "weights", scoresName)))
      return failure();
  }
  if (reduction == "none")
    return Type(RankedTensorType::get(labels.getShape(),
                                      scores.getElementType()));
  return Type(RankedTensorType::get({}, scores.getElementType()));
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

template <typename OpTy>
static LogicalResult inferBinary(std::optional<Location> loc,
                                 typename OpTy::Adaptor adaptor,
                                 SmallVectorImpl<Type> &types,
                                 bool sameElementType) {
  Rules r(loc, OpTy::getOperationName());
  auto lhs = r.ranked(adaptor.getLhs(), "lhs");
  auto rhs = r.ranked(adaptor.getRhs(), "rhs");
  if (failed(lhs) || failed(rhs))
    return failure();
  if (sameElementType &&
      failed(r.sameElementType(*lhs, *rhs, "lhs", "rhs")))
    return failure();
  auto shape =
      broadcast(r, lhs->getShape(), rhs->getShape(), "lhs", "rhs");
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

#define AMP_COMPARE_INFER(OP)                                                  \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location> l, \
                                     Adaptor a, SmallVectorImpl<Type> &t) {    \
    return inferCompare<OP>(l, a, t);                                          \
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

#define AMP_BINARY_INFER(OP, SAME)                                             \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location> l, \
                                     Adaptor a, SmallVectorImpl<Type> &t) {    \
    return inferBinary<OP>(l, a, t, SAME);                                     \
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

LogicalResult WhereOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto c = r.ranked(adaptor.getCondition(), "condition");
  auto x = r.ranked(adaptor.getX(), "x");
  auto y = r.ranked(adaptor.getY(), "y");
  if (failed(c) || failed(x) || failed(y) ||
      failed(r.sameElementType(*x, *y, "x", "y")))
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
  if (failed(r.sameElementType(*x, *w, "x", "w")) ||
      failed(r.sameElementType(*x, *dy, "x", "dy")))
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
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
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
                                                  Adaptor adaptor,
                                                  SmallVectorImpl<Type> &types) {
  return poolGradTypes(loc, getOperationName(), adaptor, types);
}

LogicalResult BatchNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
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

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  float ratio = adaptor.getRatio().convertToFloat();
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return r.fail("ratio must be in [0, 1), got ", ratio);
  types.push_back(*in);
  types.push_back(RankedTensorType::get(in->getShape(),
                                        IntegerType::get(ctx, 1)));
  return success();
}

LogicalResult BernoulliOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  types.push_back(*in);
  return success();
}

/// A random op's result: a static shape, finite parameters.
static LogicalResult verifyRandom(Operation *op, RankedTensorType t, float a, float b, const char *na,
                                  const char *nb) {
  if (!t.hasStaticShape())
    return op->emitOpError("needs a static result shape, got ") << t;
  if (!std::isfinite(a) || !std::isfinite(b))
    return op->emitOpError(na) << " and " << nb << " must be finite, got " << a << " and " << b;
  return success();
}

LogicalResult RandomNormalOp::verify() {
  return verifyRandom(*this, getType(), getMean().convertToFloat(), getScale().convertToFloat(), "mean",
                      "scale");
}

LogicalResult RandomUniformOp::verify() {
  float lo = getLow().convertToFloat(), hi = getHigh().convertToFloat();
  if (failed(verifyRandom(*this, getType(), lo, hi, "low", "high")))
    return failure();
  if (lo > hi)
    return emitOpError("low ") << lo << " is above high " << hi;
  return success();
}

static LogicalResult verifySoftmaxAxis(Operation *op, int64_t axis,
                                       RankedTensorType t) {
  int64_t rank = t.getRank();
  if (rank == 0)
    return op->emitOpError("needs an input of rank >= 1");
  if (axis < -rank || axis >= rank)
    return op->emitOpError("axis ")
           << axis << " is out of range for rank " << rank << " (valid: ["
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

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

//===----------------------------------------------------------------------===//
// Matrix products and convolution
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto a = r.ranked(adaptor.getLhs(), "lhs");
  auto b = r.ranked(adaptor.getRhs(), "rhs");
  if (failed(a) || failed(b) ||
      failed(r.sameElementType(*a, *b, "lhs", "rhs")))
    return failure();
  if (failed(checkAccumulate(r, adaptor.getAccumulate(), a->getElementType())))
    return failure();
  if (a->getRank() == 0 || b->getRank() == 0)
    return r.fail("operands must have rank >= 1, got ",
                  shapeString(a->getShape()), " and ",
                  shapeString(b->getShape()));
  SmallVector<int64_t> as(a->getShape()), bs(b->getShape());
  bool aVec = as.size() == 1, bVec = bs.size() == 1;
  if (aVec)
    as.insert(as.begin(), 1);
  if (bVec)
    bs.push_back(1);
  int64_t k1 = as.back(), k2 = bs[bs.size() - 2];
  if (!ShapedType::isDynamic(k1) && !ShapedType::isDynamic(k2) && k1 != k2)
    return r.fail("contracted dims differ: lhs ", shapeString(a->getShape()),
                  " has K = ", k1, ", rhs ", shapeString(b->getShape()),
                  " has K = ", k2);
  auto batch = broadcast(r, ArrayRef<int64_t>(as).drop_back(2),
                         ArrayRef<int64_t>(bs).drop_back(2), "lhs batch",
                         "rhs batch");
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

LogicalResult GemmOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto a = r.ranked(adaptor.getA(), "a");
  auto b = r.ranked(adaptor.getB(), "b");
  if (failed(a) || failed(b) || failed(r.sameElementType(*a, *b, "a", "b")))
    return failure();
  if (failed(checkAccumulate(r, adaptor.getAccumulate(), a->getElementType())))
    return failure();
  if (a->getRank() != 2 || b->getRank() != 2)
    return r.fail("a and b must be 2-D, got ", shapeString(a->getShape()),
                  " and ", shapeString(b->getShape()));
  bool ta = adaptor.getTransA(), tb = adaptor.getTransB();
  int64_t m = a->getDimSize(ta ? 1 : 0), ka = a->getDimSize(ta ? 0 : 1);
  int64_t kb = b->getDimSize(tb ? 1 : 0), n = b->getDimSize(tb ? 0 : 1);
  if (!ShapedType::isDynamic(ka) && !ShapedType::isDynamic(kb) && ka != kb)
    return r.fail("contracted dims differ: op(a) is [", m, ", ", ka,
                  "], op(b) is [", kb, ", ", n, "] (trans_a = ", ta,
                  ", trans_b = ", tb, ")");
  if (Value cv = adaptor.getC()) {
    auto c = r.ranked(cv, "c");
    if (failed(c) || failed(r.sameElementType(*a, *c, "a", "c")))
      return failure();
    ArrayRef<int64_t> cs = c->getShape();
    int64_t want[2] = {m, n};
    bool ok = cs.size() <= 2;
    for (size_t i = 0; ok && i < cs.size(); ++i) {
      int64_t cd = cs[cs.size() - 1 - i], od = want[1 - i];
      ok = cd == 1 || ShapedType::isDynamic(cd) || ShapedType::isDynamic(od) ||
           cd == od;
    }
    if (!ok)
      return r.fail("c ", shapeString(cs),
                    " cannot be broadcast to the result [", m, ", ", n, "]");
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
    int64_t o = strides[i] * (d - 1) + outPad[i] + (kernel[i] - 1) * dil[i] + 1 - pads[i] - pads[n + i];
    if (o < 1)
      return r.fail("spatial dim ", i, " of the result would be ", o, " (pads too large)");
    out.push_back(o);
  }
  if (Value bv = adaptor.getBias()) {
    auto b = r.ranked(bv, "bias");
    if (failed(b) || failed(r.sameElementType(*x, *b, "x", "bias")))
      return failure();
    if (b->getRank() != 1 || failed(verifyCompatibleShape(b->getShape(), {m})))
      return r.fail("bias must be [M] = [", m, "], got ", shapeString(b->getShape()));
  }
  types.push_back(RankedTensorType::get(out, x->getElementType()));
  return success();
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
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
  if (!ShapedType::isDynamic(c) && !ShapedType::isDynamic(cg) &&
      c != cg * group)
    return r.fail("input channels ", c, " must equal w's dim 1 (", cg,
                  ") times group (", group, ")");
  if (!ShapedType::isDynamic(m) && m % group != 0)
    return r.fail("output channels ", m, " must be divisible by group ",
                  group);
  SmallVector<int64_t> kernel(w->getShape().drop_front(2));
  if (auto ks = adaptor.getKernelShape()) {
    if (failed(verifyCompatibleShape(*ks, kernel)))
      return r.fail("kernel_shape ", shapeString(*ks),
                    " does not match w's spatial dims ", shapeString(kernel));
    kernel.assign(ks->begin(), ks->end());
  }
  if (llvm::any_of(kernel, ShapedType::isDynamic))
    return r.fail("needs static kernel dims, w is ",
                  shapeString(w->getShape()));
  if (Value bv = adaptor.getBias()) {
    auto b = r.ranked(bv, "bias");
    if (failed(b) || failed(r.sameElementType(*x, *b, "x", "bias")))
      return failure();
    if (b->getRank() != 1 || failed(verifyCompatibleShape(b->getShape(), {m})))
      return r.fail("bias must be [M] = [", m, "], got ",
                    shapeString(b->getShape()));
  }
  WindowAttrs wa{adaptor.getAutoPad(), kernel, adaptor.getStrides(),
                 adaptor.getDilations(), adaptor.getPads(), false};
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

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
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
      return r.fail(name, " must be [C] = [", c, "], got ",
                    shapeString(t->getShape()));
  }
  if (failed(r.sameElementType(adaptor.getScale().getType(),
                               adaptor.getBias().getType(), "scale", "bias")) ||
      failed(r.sameElementType(adaptor.getMean().getType(),
                               adaptor.getVar().getType(), "mean", "var")))
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

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *ctx,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  auto s = r.ranked(adaptor.getScale(), "scale");
  if (failed(x) || failed(s) ||
      failed(r.sameElementType(*x, *s, "x", "scale")))
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
                    " does not broadcast to the normalized shape ",
                    shapeString(normalized));
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
static FailureOr<SmallVector<int64_t>>
poolShape(const Rules &r, RankedTensorType x, Adaptor adaptor) {
  if (x.getRank() < 3)
    return r.fail("x must be [N, C, D1, ...] with at least one "
                          "spatial dim, got ",
                          shapeString(x.getShape()));
  WindowAttrs wa{adaptor.getAutoPad(), adaptor.getKernelShape(),
                 adaptor.getStrides(), adaptor.getDilations(),
                 adaptor.getPads(), adaptor.getCeilMode()};
  auto spatial = windowOutput(r, x.getShape().drop_front(2), wa);
  if (failed(spatial))
    return failure();
  SmallVector<int64_t> out(x.getShape().take_front(2));
  llvm::append_range(out, *spatial);
  return out;
}

LogicalResult MaxPoolOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  if (failed(x))
    return failure();
  if (adaptor.getStorageOrder() != 0 && adaptor.getStorageOrder() != 1)
    return r.fail("storage_order must be 0 or 1, got ",
                  adaptor.getStorageOrder());
  auto out = poolShape(r, *x, adaptor);
  if (failed(out))
    return failure();
  types.push_back(RankedTensorType::get(*out, x->getElementType()));
  types.push_back(RankedTensorType::get(*out, IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult AveragePoolOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
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

LogicalResult GlobalAveragePoolOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  if (failed(x))
    return failure();
  if (x->getRank() < 3)
    return r.fail("x must be [N, C, D1, ...], got ",
                  shapeString(x->getShape()));
  SmallVector<int64_t> out(x->getShape().take_front(2));
  out.append(x->getRank() - 2, 1);
  types.push_back(RankedTensorType::get(out, x->getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult FlattenOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  int64_t rank = in->getRank(), axis = adaptor.getAxis();
  if (axis < -rank || axis > rank)
    return r.fail("axis ", axis, " is out of range for rank ", rank,
                  " (valid: [", -rank, ", ", rank, "])");
  if (axis < 0)
    axis += rank;
  auto lead = product(r, in->getShape().take_front(axis));
  auto tail = product(r, in->getShape().drop_front(axis));
  if (failed(lead) || failed(tail))
    return failure();
  types.push_back(RankedTensorType::get({*lead, *tail}, in->getElementType()));
  return success();
}

LogicalResult ReshapeOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  ArrayRef<int64_t> shape = adaptor.getShape();
  bool allowZero = adaptor.getAllowzero();
  SmallVector<int64_t> out;
  int inferIndex = -1;
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (d == -1) {
      if (inferIndex >= 0)
        return r.fail("shape ", shapeString(shape), " has more than one -1");
      inferIndex = i;
      out.push_back(kDyn);
    } else if (d == 0 && !allowZero) {
      if ((int64_t)i >= in->getRank())
        return r.fail("shape entry ", i, " is 0 (copy the input dim) but the "
                      "input ",
                      shapeString(in->getShape()), " has no dim ", i);
      out.push_back(in->getDimSize(i));
    } else if (d < 0) {
      return r.fail("shape entry ", d, " is invalid (only -1 may be negative)");
    } else {
      out.push_back(d);
    }
  }
  if (allowZero && inferIndex >= 0 && llvm::is_contained(shape, 0))
    return r.fail("shape may not hold both -1 and 0 when allowzero is set");
  auto totalOr = product(r, in->getShape());
  if (failed(totalOr))
    return failure();
  int64_t total = *totalOr;
  if (inferIndex >= 0) {
    SmallVector<int64_t> rest(out);
    rest.erase(rest.begin() + inferIndex);
    auto knownOr = product(r, rest);
    if (failed(knownOr))
      return failure();
    int64_t known = *knownOr;
    if (!ShapedType::isDynamic(total) && !ShapedType::isDynamic(known)) {
      if (known == 0 || total % known != 0)
        return r.fail("cannot reshape ", shapeString(in->getShape()), " (",
                      total, " elements) to ", shapeString(shape));
      out[inferIndex] = total / known;
    }
  }
  auto outTotalOr = product(r, out);
  if (failed(outTotalOr))
    return failure();
  int64_t outTotal = *outTotalOr;
  if (!ShapedType::isDynamic(total) && !ShapedType::isDynamic(outTotal) &&
      total != outTotal)
    return r.fail("cannot reshape ", shapeString(in->getShape()), " (",
                  total, " elements) to ", shapeString(shape), " (", outTotal,
                  " elements)");
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  int64_t rank = in->getRank();
  SmallVector<int64_t> perm;
  if (auto p = adaptor.getPerm()) {
    perm.assign(p->begin(), p->end());
    SmallVector<bool> seen(rank, false);
    bool ok = (int64_t)perm.size() == rank;
    for (int64_t v : perm) {
      ok = ok && v >= 0 && v < rank && !seen[v];
      if (ok)
        seen[v] = true;
    }
    if (!ok)
      return r.fail("perm ", shapeString(perm),
                    " is not a permutation of the ", rank, " dims of ",
                    shapeString(in->getShape()));
  } else {
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  }
  SmallVector<int64_t> out;
  for (int64_t p : perm)
    out.push_back(in->getDimSize(p));
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return r.fail("needs at least one input");
  auto first = r.ranked(inputs.front(), "inputs");
  if (failed(first))
    return failure();
  int64_t rank = first->getRank();
  auto axis = r.axis(adaptor.getAxis(), rank, "axis");
  if (failed(axis))
    return failure();
  if (rank == 0)
    return r.fail("cannot concatenate scalars");
  SmallVector<int64_t> out(first->getShape());
  for (auto [i, v] : llvm::enumerate(inputs.drop_front())) {
    auto t = r.ranked(v, "inputs");
    if (failed(t))
      return failure();
    if (t->getElementType() != first->getElementType())
      return r.fail("input ", i + 1, " has element type ", t->getElementType(),
                    ", input 0 has ", first->getElementType());
    if (t->getRank() != rank)
      return r.fail("input ", i + 1, " has rank ", t->getRank(),
                    ", input 0 has rank ", rank);
    for (int64_t d = 0; d < rank; ++d) {
      int64_t a = out[d], b = t->getDimSize(d);
      if (d == *axis) {
        out[d] = (ShapedType::isDynamic(a) || ShapedType::isDynamic(b))
                     ? kDyn
                     : a + b;
        continue;
      }
      if (!ShapedType::isDynamic(a) && !ShapedType::isDynamic(b) && a != b)
        return r.fail("input ", i + 1, " ", shapeString(t->getShape()),
                      " differs from ", shapeString(first->getShape()),
                      " in dim ", d, ", which is not the concat axis ", *axis);
      if (ShapedType::isDynamic(a))
        out[d] = b;
    }
  }
  types.push_back(RankedTensorType::get(out, first->getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  int64_t rank = in->getRank();
  ArrayRef<int64_t> starts = adaptor.getStarts(), ends = adaptor.getEnds();
  size_t n = starts.size();
  if (ends.size() != n)
    return r.fail("starts has ", n, " entries but ends has ", ends.size());
  SmallVector<int64_t> axesList;
  if (auto a = adaptor.getAxes()) {
    if (a->size() != n)
      return r.fail("axes has ", a->size(), " entries, starts has ", n);
    axesList.assign(a->begin(), a->end());
  } else {
    if ((int64_t)n > rank)
      return r.fail("starts has ", n, " entries, more than the rank ", rank);
    for (size_t i = 0; i < n; ++i)
      axesList.push_back(i);
  }
  auto axes = r.axes(axesList, rank, "axes");
  if (failed(axes))
    return failure();
  SmallVector<int64_t> steps(n, 1);
  if (auto s = adaptor.getSteps()) {
    if (s->size() != n)
      return r.fail("steps has ", s->size(), " entries, starts has ", n);
    steps.assign(s->begin(), s->end());
  }
  SmallVector<int64_t> out(in->getShape());
  for (size_t i = 0; i < n; ++i) {
    int64_t step = steps[i], ax = (*axes)[i], dim = in->getDimSize(ax);
    if (step == 0)
      return r.fail("steps must not be 0 (axis ", ax, ")");
    if (ShapedType::isDynamic(dim)) {
      out[ax] = kDyn;
      continue;
    }
    // ONNX clamping, done on clamped values so that INT64_MAX bounds do not
    // overflow.
    auto clampIndex = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0)
        v = v < -dim ? -dim - 1 : v + dim;
      return std::clamp(v, lo, hi);
    };
    int64_t start, end;
    if (step > 0) {
      start = clampIndex(starts[i], 0, dim);
      end = clampIndex(ends[i], 0, dim);
    } else {
      start = clampIndex(starts[i], 0, dim - 1);
      end = clampIndex(ends[i], -1, dim - 1);
    }
    int64_t len = step > 0 ? llvm::divideCeil(std::max<int64_t>(0, end - start), step)
                           : llvm::divideCeil(std::max<int64_t>(0, start - end), -step);
    out[ax] = len;
  }
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult SqueezeOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  SmallVector<int64_t> out;
  if (auto a = adaptor.getAxes()) {
    auto axes = r.axes(*a, in->getRank(), "axes");
    if (failed(axes))
      return failure();
    for (int64_t d = 0; d < in->getRank(); ++d) {
      int64_t size = in->getDimSize(d);
      if (!llvm::is_contained(*axes, d)) {
        out.push_back(size);
        continue;
      }
      if (size != 1 && !ShapedType::isDynamic(size))
        return r.fail("cannot squeeze dim ", d, " of size ", size, " in ",
                      shapeString(in->getShape()));
    }
  } else {
    for (int64_t size : in->getShape()) {
      if (ShapedType::isDynamic(size))
        return r.fail("without axes, needs static dims to know which are 1, "
                      "got ",
                      shapeString(in->getShape()));
      if (size != 1)
        out.push_back(size);
    }
  }
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult UnsqueezeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  int64_t outRank = in->getRank() + adaptor.getAxes().size();
  auto axes = r.axes(adaptor.getAxes(), outRank, "axes");
  if (failed(axes))
    return failure();
  SmallVector<int64_t> out;
  auto it = in->getShape().begin();
  for (int64_t d = 0; d < outRank; ++d)
    out.push_back(llvm::is_contained(*axes, d) ? 1 : *it++);
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto data = r.ranked(adaptor.getData(), "data");
  auto idx = r.ranked(adaptor.getIndices(), "indices");
  if (failed(data) || failed(idx))
    return failure();
  if (data->getRank() == 0)
    return r.fail("data must have rank >= 1");
  auto axis = r.axis(adaptor.getAxis(), data->getRank(), "axis");
  if (failed(axis))
    return failure();
  SmallVector<int64_t> out(data->getShape().take_front(*axis));
  llvm::append_range(out, idx->getShape());
  llvm::append_range(out, data->getShape().drop_front(*axis + 1));
  types.push_back(RankedTensorType::get(out, data->getElementType()));
  return success();
}

LogicalResult GridSampleOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  auto g = r.ranked(adaptor.getGrid(), "grid");
  if (failed(x) || failed(g) || failed(r.sameElementType(*x, *g, "x", "grid")))
    return failure();
  if (x->getRank() != 4 || g->getRank() != 4 || g->getDimSize(3) != 2)
    return r.fail("needs x [N, C, H, W] and grid [N, Ho, Wo, 2] (2-D sampling), got ", shapeString(x->getShape()),
                  " and ", shapeString(g->getShape()));
  if (failed(verifyCompatibleShape(ArrayRef<int64_t>{x->getDimSize(0)}, ArrayRef<int64_t>{g->getDimSize(0)})))
    return r.fail("x and grid differ in batch");
  StringRef mode = adaptor.getMode(), pad = adaptor.getPaddingMode();
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    return r.fail("mode '", mode.str(), "' is not bilinear, nearest or bicubic");
  if (pad != "zeros" && pad != "border" && pad != "reflection")
    return r.fail("padding_mode '", pad.str(), "' is not zeros, border or reflection");
  types.push_back(RankedTensorType::get({x->getDimSize(0), x->getDimSize(1), g->getDimSize(1), g->getDimSize(2)},
                                        x->getElementType()));
  return success();
}

LogicalResult GridSampleGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  types.push_back(adaptor.getX().getType());
  types.push_back(adaptor.getGrid().getType());
  return success();
}

LogicalResult TopKOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  if (in->getRank() == 0)
    return r.fail("input must have rank >= 1");
  auto axis = r.axis((int64_t)adaptor.getAxis(), in->getRank(), "axis");
  if (failed(axis))
    return failure();
  int64_t k = (int64_t)adaptor.getK(), len = in->getDimSize(*axis);
  if (k < 0 || (!ShapedType::isDynamic(len) && k > len))
    return r.fail("k = ", k, " must lie in [0, ", len, "] (the axis' size)");
  SmallVector<int64_t> out(in->getShape());
  out[*axis] = k;
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  types.push_back(RankedTensorType::get(out, IntegerType::get(in->getContext(), 64)));
  return success();
}

template <typename OpTy>
static LogicalResult inferArgReduce(std::optional<Location> loc, typename OpTy::Adaptor adaptor,
                                    SmallVectorImpl<Type> &types) {
  Rules r(loc, OpTy::getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  if (in->getRank() == 0)
    return r.fail("input must have rank >= 1");
  auto axis = r.axis(adaptor.getAxis(), in->getRank(), "axis");
  if (failed(axis))
    return failure();
  if (in->getDimSize(*axis) == 0)
    return r.fail("the axis is empty");
  SmallVector<int64_t> out;
  for (int64_t d = 0; d < in->getRank(); ++d)
    if (d != *axis)
      out.push_back(in->getDimSize(d));
    else if (adaptor.getKeepdims())
      out.push_back(1);
  types.push_back(RankedTensorType::get(out, IntegerType::get(in->getContext(), 64)));
  return success();
}

LogicalResult ArgMaxOp::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,
                                         SmallVectorImpl<Type> &t) {
  return inferArgReduce<ArgMaxOp>(l, a, t);
}

LogicalResult ArgMinOp::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,
                                         SmallVectorImpl<Type> &t) {
  return inferArgReduce<ArgMinOp>(l, a, t);
}

LogicalResult GatherElementsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto data = r.ranked(adaptor.getData(), "data");
  auto idx = r.ranked(adaptor.getIndices(), "indices");
  if (failed(data) || failed(idx))
    return failure();
  if (data->getRank() == 0 || idx->getRank() != data->getRank())
    return r.fail("indices ", shapeString(idx->getShape()), " must have the rank of data ",
                  shapeString(data->getShape()), " (at least 1)");
  auto axis = r.axis(adaptor.getAxis(), data->getRank(), "axis");
  if (failed(axis))
    return failure();
  for (int64_t d = 0; d < data->getRank(); ++d)
    if (d != *axis && !ShapedType::isDynamic(idx->getDimSize(d)) &&
        !ShapedType::isDynamic(data->getDimSize(d)) && idx->getDimSize(d) > data->getDimSize(d))
      return r.fail("indices ", shapeString(idx->getShape()), " exceed data ",
                    shapeString(data->getShape()), " on dim ", d, " (only the axis may differ)");
  types.push_back(RankedTensorType::get(idx->getShape(), data->getElementType()));
  return success();
}

LogicalResult GatherElementsGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                                     Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto dy = cast<RankedTensorType>(adaptor.getDy().getType());
  types.push_back(RankedTensorType::get(adaptor.getShape(), dy.getElementType()));
  return success();
}

LogicalResult ExpandOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  for (int64_t d : adaptor.getShape())
    if (d < 0)
      return r.fail("shape entries must be >= 0, got ",
                    shapeString(adaptor.getShape()));
  auto out =
      broadcast(r, in->getShape(), adaptor.getShape(), "input", "shape");
  if (failed(out))
    return failure();
  types.push_back(RankedTensorType::get(*out, in->getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

template <typename OpTy>
static LogicalResult inferReduce(std::optional<Location> loc,
                                 typename OpTy::Adaptor adaptor,
                                 SmallVectorImpl<Type> &types) {
  Rules r(loc, OpTy::getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  ArrayRef<int64_t> list;
  if (auto a = adaptor.getAxes())
    list = *a;
  if (list.empty() && adaptor.getNoopWithEmptyAxes()) {
    types.push_back(*in);
    return success();
  }
  auto axes = r.axes(list, in->getRank(), "axes");
  if (failed(axes))
    return failure();
  bool all = axes->empty();
  SmallVector<int64_t> out;
  for (int64_t d = 0; d < in->getRank(); ++d) {
    bool reduced = all || llvm::is_contained(*axes, d);
    if (!reduced)
      out.push_back(in->getDimSize(d));
    else if (adaptor.getKeepdims())
      out.push_back(1);
  }
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult ReduceSumOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> l,
                                            Adaptor a,
                                            SmallVectorImpl<Type> &t) {
  return inferReduce<ReduceSumOp>(l, a, t);
}
LogicalResult ReduceMeanOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> l,
                                             Adaptor a,
                                             SmallVectorImpl<Type> &t) {
  return inferReduce<ReduceMeanOp>(l, a, t);
}
LogicalResult ReduceProdOp::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,
                                             SmallVectorImpl<Type> &t) {
  return inferReduce<ReduceProdOp>(l, a, t);
}
LogicalResult ReduceMaxOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> l,
                                            Adaptor a,
                                            SmallVectorImpl<Type> &t) {
  return inferReduce<ReduceMaxOp>(l, a, t);
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxCrossEntropyLossOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto scores = r.ranked(adaptor.getScores(), "scores");
  auto labels = r.ranked(adaptor.getLabels(), "labels");
  if (failed(scores) || failed(labels))
    return failure();
  auto loss = lossType(r, *scores, *labels, adaptor.getWeights(),
                       adaptor.getReduction(), "scores", "labels");
  if (failed(loss))
    return failure();
  types.push_back(*loss);
  types.push_back(*scores);
  return success();
}

LogicalResult NLLLossOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto input = r.ranked(adaptor.getInput(), "input");
  auto target = r.ranked(adaptor.getTarget(), "target");
  if (failed(input) || failed(target))
    return failure();
  auto loss = lossType(r, *input, *target, adaptor.getWeight(),
                       adaptor.getReduction(), "input", "target");
  if (failed(loss))
    return failure();
  types.push_back(*loss);
  return success();
}

Operation *mlir::amp::createWithInferredTypes(OpBuilder &b, Location loc, StringRef name,
                                              ValueRange operands,
                                              ArrayRef<NamedAttribute> attrs,
                                              unsigned numResults) {
  OperationState state(loc, name);
  state.addOperands(operands);
  state.addAttributes(attrs);
  state.addTypes(SmallVector<Type>(numResults, b.getNoneType()));
  Operation *op = b.create(state);
  auto iface = dyn_cast<InferTypeOpInterface>(op);
  SmallVector<Type> types;
  if (!iface ||
      failed(iface.inferReturnTypes(op->getContext(), loc, op->getOperands(),
                                    op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                    op->getRegions(), types)) ||
      types.size() != numResults) {
    if (!iface)
      emitError(loc) << "'" << name << "' has no shape rules";
    op->erase();
    return nullptr;
  }
  // Every static result fits in memory's address range: element count and
  // bytes in 63 bits (what the lowering and the runtime compute sizes in).
  for (Type t : types)
    if (auto rt = dyn_cast<RankedTensorType>(t)) {
      uint64_t bytes = std::max<uint64_t>(1, (rt.getElementTypeBitWidth() + 7) / 8);
      bool zero = llvm::is_contained(rt.getShape(), 0);
      for (int64_t d : rt.getShape()) {
        if (zero || ShapedType::isDynamic(d))
          continue;
        if (__builtin_mul_overflow(bytes, (uint64_t)d, &bytes) || bytes > (uint64_t)INT64_MAX) {
          emitError(loc) << "'" << name << "' would make a result of type " << t
                         << ", more bytes than 63 bits count";
          op->erase();
          return nullptr;
        }
      }
    }
  for (auto [r, t] : llvm::zip(op->getResults(), types))
    r.setType(t);
  return op;
}

LogicalResult SliceGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                            Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto dy = cast<RankedTensorType>(adaptor.getDy().getType());
  types.push_back(RankedTensorType::get(adaptor.getShape(), dy.getElementType()));
  return success();
}

LogicalResult GatherGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                             Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto dy = cast<RankedTensorType>(adaptor.getDy().getType());
  types.push_back(RankedTensorType::get(adaptor.getShape(), dy.getElementType()));
  return success();
}
