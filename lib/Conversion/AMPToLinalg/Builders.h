//===- Builders.h - small builders of linalg on tensors --------*- C++ -*-===//
//
// What amp-lower-to-linalg builds its ops from: element-wise generics with
// numpy broadcasting (f16 / bf16 widened to f32 in the body and rounded
// once on the way out, as the runtime's kernels compute), reductions with
// f32 or f64 accumulators, reshapes, and scalar casts.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_CONVERSION_AMPTOLINALG_BUILDERS_H
#define AMP_CONVERSION_AMPTOLINALG_BUILDERS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

namespace mlir::amp::linalg_lowering {

/// The body of an element-wise generic: its block arguments (inputs
/// widened to f32 where they are f16 / bf16 and `widen` is set) to one
/// value per result, converted afterwards to the result's element type.
using ScalarFn = llvm::function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange)>;

struct Emit {
  OpBuilder &b;
  Location loc;

  Type f32() { return b.getF32Type(); }
  Type f64() { return b.getF64Type(); }
  Value cst(double v, Type t);
  Value cstF(double v) { return cst(v, f32()); }
  Value cstI(int64_t v, Type t);
  Value idx(int64_t v);

  // Scalar arithmetic.
  Value add(Value x, Value y);
  Value sub(Value x, Value y);
  Value mul(Value x, Value y);
  Value div(Value x, Value y);
  Value neg(Value x) { return arith::NegFOp::create(b, loc, x); }
  Value cmp(arith::CmpFPredicate p, Value x, Value y) {
    return arith::CmpFOp::create(b, loc, p, x, y);
  }
  Value cmpi(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, p, x, y);
  }
  Value sel(Value c, Value x, Value y) { return arith::SelectOp::create(b, loc, c, x, y); }
  Value exp(Value x) { return math::ExpOp::create(b, loc, x); }
  Value log(Value x) { return math::LogOp::create(b, loc, x); }
  Value sqrt(Value x) { return math::SqrtOp::create(b, loc, x); }
  Value isNonFinite(Value x); ///< i1: x is inf or NaN
  /// `v` converted to `to` (float <-> float rounding to nearest even,
  /// int -> float, float -> int truncating, anything -> i1 as v != 0).
  Value convert(Value v, Type to);

  // Tensors.
  Value empty(RankedTensorType t);
  Value full(RankedTensorType t, Value scalar);
  /// `v` with the static shape `shape` (same element count).
  Value reshape(Value v, ArrayRef<int64_t> shape);
  /// The maps of an element-wise op reading `in` into a result of `shape`
  /// with numpy broadcasting (size-1 and missing leading dims).
  AffineMap broadcastMap(RankedTensorType in, ArrayRef<int64_t> shape);
  /// One linalg.generic.
  SmallVector<Value> generic(TypeRange results, ValueRange ins, ValueRange outs,
                             ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iters,
                             llvm::function_ref<void(OpBuilder &, Location, ValueRange)> body);
  /// Element-wise over `shape` with broadcasting inputs; results of the
  /// element types `elts`.
  SmallVector<Value> map(ArrayRef<int64_t> shape, ArrayRef<Type> elts, ValueRange ins, ScalarFn fn,
                         bool widen = true);
  Value map1(RankedTensorType result, ValueRange ins,
             llvm::function_ref<Value(Emit &, ValueRange)> fn, bool widen = true);
  /// Sum (or max with isMax) of `x` over `axes`, accumulated in `acc`,
  /// keeping the reduced dims as 1 when `keep`; the result's element type
  /// is `acc`.
  Value reduce(Value x, ArrayRef<int64_t> axes, bool keep, Type acc, bool isMax = false);
};

/// True for f16 / bf16.
bool isLowFloat(Type t);

} // namespace mlir::amp::linalg_lowering

#endif // AMP_CONVERSION_AMPTOLINALG_BUILDERS_H
