//===- GradientUtils.h - building blocks of the gradient rules -*- C++ -*-===//
//
// What the gradient rules (AMPGradients*.cpp) build backward graphs with:
// ops with inferred types, scalars, reshapes, sums back to a broadcast
// operand's shape. Private to the dialect's library.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_LIB_DIALECT_AMP_IR_GRADIENTUTILS_H
#define AMP_LIB_DIALECT_AMP_IR_GRADIENTUTILS_H

#include "amp/Dialect/AMP/IR/AMPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/TypeUtilities.h"

namespace mlir::amp::gradient_utils {

inline NamedAttribute attr(OpBuilder &b, StringRef name, Attribute a) {
  return b.getNamedAttr(name, a);
}

inline Value make(OpBuilder &b, Location loc, StringRef name, ValueRange operands,
                  ArrayRef<NamedAttribute> attrs = {}) {
  Operation *op = createWithInferredTypes(b, loc, name, operands, attrs, 1);
  return op ? op->getResult(0) : Value();
}

/// A rank-0 constant of the element type of `like`.
inline Value scalar(OpBuilder &b, Location loc, Value like, double v) {
  auto elt = cast<FloatType>(getElementTypeOrSelf(like.getType()));
  auto t = RankedTensorType::get({}, elt);
  return arith::ConstantOp::create(b, loc, t, DenseElementsAttr::get(t, b.getFloatAttr(elt, v)));
}

inline Value reshape(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  if (cast<RankedTensorType>(v.getType()).getShape() == shape)
    return v;
  return make(b, loc, ReshapeOp::getOperationName(), v,
              {attr(b, "shape", b.getDenseI64ArrayAttr(shape))});
}

/// Sums `g` down to `target`'s shape (the gradient of a numpy broadcast).
inline Value sumToShape(OpBuilder &b, Location loc, Value g, Type targetType) {
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
    s = make(
        b, loc, ReduceSumOp::getOperationName(), g,
        {attr(b, "axes", b.getDenseI64ArrayAttr(axes)), attr(b, "keepdims", b.getBoolAttr(true))});
  return s ? reshape(b, loc, s, tt.getShape()) : Value();
}

inline Value transposeLast2(OpBuilder &b, Location loc, Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> perm;
  for (int64_t i = 0; i < t.getRank(); ++i)
    perm.push_back(i);
  std::swap(perm[t.getRank() - 1], perm[t.getRank() - 2]);
  return make(b, loc, TransposeOp::getOperationName(), v,
              {attr(b, "perm", b.getDenseI64ArrayAttr(perm))});
}

/// The gradient of a unary op as amp.unary_grad of `x` (default: the op's
/// input).
inline LogicalResult unaryGrad(OpBuilder &b, Operation *op, ArrayRef<Value> rg,
                               SmallVectorImpl<Value> &og, UnaryKind kind, float alpha = 0.0f,
                               float beta = 0.0f, Value x = {}) {
  og.assign(op->getNumOperands(), Value());
  if (!rg[0])
    return success();
  og[0] = UnaryGradOp::create(b, op->getLoc(), x ? x : op->getOperand(0), rg[0],
                              UnaryKindAttr::get(b.getContext(), kind), b.getF32FloatAttr(alpha),
                              b.getF32FloatAttr(beta));
  return success();
}

inline LogicalResult fail(Operation *op, const Twine &why) {
  return op->emitOpError("has no gradient rule for ") << why;
}

} // namespace mlir::amp::gradient_utils

#endif // AMP_LIB_DIALECT_AMP_IR_GRADIENTUTILS_H
