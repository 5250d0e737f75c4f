//===- ShapeRules.h - helpers of the amp ops' shape rules -------*- C++ -*-===//
//
// What the shape rules share (AMPShapes*.cpp): messages that name the op,
// checked products and broadcasting, window arithmetic, loss types. Private
// to the dialect's library.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_LIB_DIALECT_AMP_IR_SHAPERULES_H
#define AMP_LIB_DIALECT_AMP_IR_SHAPERULES_H

#include "amp/Dialect/AMP/IR/AMPOps.h"

#include "mlir/Dialect/Traits.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <numeric>

namespace mlir::amp::shape_rules {

constexpr int64_t kDyn = ShapedType::kDynamic;

inline std::string shapeString(ArrayRef<int64_t> shape) {
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
  Rules(std::optional<Location> loc, StringRef opName) : loc(loc), opName(opName) {}

  template <typename... Args> LogicalResult fail(Args &&...args) const {
    return emitOptionalError(loc, "'", opName, "' op ", std::forward<Args>(args)...);
  }

  /// The operand as a ranked tensor, or an error naming it.
  FailureOr<RankedTensorType> ranked(Value v, StringRef name) const {
    if (!v)
      return fail("is missing its operand '", name, "'");
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t)
      return fail("operand '", name, "' must be a ranked tensor, got ", v.getType());
    return t;
  }

  /// `axis` in [-rank, rank-1] made non-negative.
  FailureOr<int64_t> axis(int64_t axis, int64_t rank, StringRef what) const {
    if (axis < -rank || axis >= std::max<int64_t>(rank, 1) ||
        (rank == 0 && axis != 0 && axis != -1))
      return fail(what, " ", axis, " is out of range for rank ", rank, " (valid: [", -rank, ", ",
                  rank - 1, "])");
    return axis < 0 ? axis + rank : axis;
  }

  /// A list of unique axes, each normalised to [0, rank).
  FailureOr<SmallVector<int64_t>> axes(ArrayRef<int64_t> list, int64_t rank, StringRef what) const {
    SmallVector<int64_t> out;
    for (int64_t a : list) {
      if (a < -rank || a >= rank)
        return fail(what, " ", a, " is out of range for rank ", rank, " (valid: [", -rank, ", ",
                    rank - 1, "])");
      int64_t n = a < 0 ? a + rank : a;
      if (llvm::is_contained(out, n))
        return fail(what, " name axis ", n, " more than once");
      out.push_back(n);
    }
    return out;
  }

  LogicalResult sameElementType(Type a, Type b, StringRef aName, StringRef bName) const {
    if (getElementTypeOrSelf(a) == getElementTypeOrSelf(b))
      return success();
    return fail("element types of '", aName, "' (", getElementTypeOrSelf(a), ") and '", bName,
                "' (", getElementTypeOrSelf(b), ") must be equal");
  }

  /// A bias / addend added to a float product's f32 accumulator before its
  /// one rounding: the operands' element type, or f32 (kept unrounded).
  LogicalResult epilogueType(Type operand, Type addend, StringRef operandName,
                             StringRef addendName) const {
    Type oe = getElementTypeOrSelf(operand), ae = getElementTypeOrSelf(addend);
    if (ae == oe || (isa<FloatType>(oe) && ae.isF32()))
      return success();
    return fail("'", addendName, "' (", ae, ") must have the element type of '", operandName, "' (",
                oe, ") or be f32 (added to the f32 accumulator)");
  }

  std::optional<Location> loc;
  StringRef opName;
};

/// Multiplies dims; dynamic if any is dynamic; failure (an error naming the
/// shape) when the count does not fit in 63 bits.
inline FailureOr<int64_t> product(const Rules &r, ArrayRef<int64_t> dims) {
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
inline FailureOr<SmallVector<int64_t>> broadcast(const Rules &r, ArrayRef<int64_t> a,
                                                 ArrayRef<int64_t> b, StringRef aName,
                                                 StringRef bName) {
  SmallVector<int64_t> out;
  if (!OpTrait::util::getBroadcastedShape(a, b, out))
    return r.fail("shapes of '", aName, "' ", shapeString(a), " and '", bName, "' ", shapeString(b),
                  " are not broadcast-compatible");
  return out;
}

/// The sizes of the spatial output dims of a convolution or pooling window.
struct WindowAttrs {
  AutoPad autoPad;
  ArrayRef<int64_t> kernel;
  std::optional<ArrayRef<int64_t>> strides, dilations, pads;
  bool ceilMode = false;
};

inline FailureOr<SmallVector<int64_t>> windowOutput(const Rules &r, ArrayRef<int64_t> spatial,
                                                    const WindowAttrs &w) {
  size_t n = spatial.size();
  if (w.kernel.size() != n)
    return r.fail("kernel_shape has ", w.kernel.size(), " entries but the input has ", n,
                  " spatial dims");
  auto check = [&](std::optional<ArrayRef<int64_t>> v, size_t want, StringRef name,
                   int64_t minValue) -> LogicalResult {
    if (!v)
      return success();
    if (v->size() != want)
      return r.fail(name, " has ", v->size(), " entries, expected ", want);
    for (int64_t x : *v)
      if (x < minValue)
        return r.fail(name, " entries must be >= ", minValue, ", got ", x);
    return success();
  };
  if (failed(check(w.strides, n, "strides", 1)) || failed(check(w.dilations, n, "dilations", 1)) ||
      failed(check(w.pads, 2 * n, "pads", 0)))
    return failure();
  for (int64_t k : w.kernel)
    if (k < 1)
      return r.fail("kernel_shape entries must be >= 1, got ", k);
  AutoPad ap = w.autoPad;
  if (ap != AutoPad::NOTSET && w.pads && llvm::any_of(*w.pads, [](int64_t p) { return p != 0; }))
    return r.fail("pads must not be given with auto_pad ", stringifyAutoPad(ap));

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
    if (ap == AutoPad::SAME_UPPER || ap == AutoPad::SAME_LOWER) {
      out.push_back(llvm::divideCeil(in, s));
      continue;
    }
    int64_t padded = in;
    if (ap == AutoPad::NOTSET && w.pads)
      padded += (*w.pads)[i] + (*w.pads)[i + n];
    if (padded < k)
      return r.fail("spatial dim ", i, " (", in, ", ", padded,
                    " with padding) is smaller than the window (", k, ")");
    int64_t span = padded - k;
    int64_t o = (w.ceilMode ? llvm::divideCeil(span, s) : span / s) + 1;
    // Ceil mode: a window that would start inside the end padding is
    // dropped (ONNX >= 1.16 and PyTorch agree on this).
    if (w.ceilMode && ap == AutoPad::NOTSET && (o - 1) * s >= in + (w.pads ? (*w.pads)[i] : 0))
      --o;
    out.push_back(o);
  }
  return out;
}

/// `accumulate` (matrix products, convolution): f32, or the operand type.
inline LogicalResult checkAccumulate(const Rules &r, std::optional<Type> acc, Type operandElt) {
  if (!acc)
    return success();
  if (!isa<FloatType>(operandElt))
    return r.fail("accumulate is only meaningful for float operands, got ", operandElt);
  if (!acc->isF32() && *acc != operandElt)
    return r.fail("accumulate type ", *acc, " must be f32 or the operand type ", operandElt);
  return success();
}

/// Shared rule of the two classification losses: scores [N, C, D...],
/// labels [N, D...], weights [C].
inline FailureOr<Type> lossType(const Rules &r, RankedTensorType scores, RankedTensorType labels,
                                Value weights, Reduction reduction, StringRef scoresName,
                                StringRef labelsName) {
  if (scores.getRank() < 2)
    return r.fail("'", scoresName, "' must be [N, C, ...], got rank ", scores.getRank());
  if (labels.getRank() != scores.getRank() - 1)
    return r.fail("'", labelsName, "' must have rank ", scores.getRank() - 1, " ([N, D...] for '",
                  scoresName, "' ", shapeString(scores.getShape()), "), got ",
                  shapeString(labels.getShape()));
  SmallVector<int64_t> expected{scores.getDimSize(0)};
  llvm::append_range(expected, scores.getShape().drop_front(2));
  if (failed(verifyCompatibleShape(expected, labels.getShape())))
    return r.fail("'", labelsName, "' shape ", shapeString(labels.getShape()), " does not match ",
                  shapeString(expected), " of '", scoresName, "'");
  if (weights) {
    auto w = dyn_cast<RankedTensorType>(weights.getType());
    if (!w || w.getRank() != 1 ||
        failed(verifyCompatibleShape(w.getShape(), {scores.getDimSize(1)})))
      return r.fail("class weights must be [C] = [", scores.getDimSize(1), "], got ",
                    weights.getType());
    if (failed(r.sameElementType(w, scores, "weights", scoresName)))
      return failure();
  }
  if (reduction == Reduction::none)
    return Type(RankedTensorType::get(labels.getShape(), scores.getElementType()));
  return Type(RankedTensorType::get({}, scores.getElementType()));
}

} // namespace mlir::amp::shape_rules

#endif // AMP_LIB_DIALECT_AMP_IR_SHAPERULES_H
