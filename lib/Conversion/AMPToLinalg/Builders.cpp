//===- Builders.cpp - small builders of linalg on tensors -----------------===//

#include "Builders.h"

#include "mlir/Dialect/Utils/StructuredOpsUtils.h"

using namespace mlir;
using namespace mlir::amp::linalg_lowering;

bool mlir::amp::linalg_lowering::isLowFloat(Type t) { return t.isF16() || t.isBF16(); }

Value Emit::cst(double v, Type t) {
  if (isa<FloatType>(t))
    return arith::ConstantOp::create(b, loc, b.getFloatAttr(t, v));
  return cstI((int64_t)v, t);
}

Value Emit::cstI(int64_t v, Type t) {
  return arith::ConstantOp::create(b, loc, b.getIntegerAttr(t, v));
}

Value Emit::idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }

Value Emit::add(Value x, Value y) {
  if (isa<FloatType>(x.getType()))
    return arith::AddFOp::create(b, loc, x, y);
  return arith::AddIOp::create(b, loc, x, y);
}
Value Emit::sub(Value x, Value y) {
  if (isa<FloatType>(x.getType()))
    return arith::SubFOp::create(b, loc, x, y);
  return arith::SubIOp::create(b, loc, x, y);
}
Value Emit::mul(Value x, Value y) {
  if (isa<FloatType>(x.getType()))
    return arith::MulFOp::create(b, loc, x, y);
  return arith::MulIOp::create(b, loc, x, y);
}
Value Emit::div(Value x, Value y) {
  if (isa<FloatType>(x.getType()))
    return arith::DivFOp::create(b, loc, x, y);
  return arith::DivSIOp::create(b, loc, x, y);
}

Value Emit::isNonFinite(Value x) {
  Value a = math::AbsFOp::create(b, loc, x);
  Value inf = cst(std::numeric_limits<double>::infinity(), x.getType());
  // !(|x| < inf): true for inf and NaN.
  return cmp(arith::CmpFPredicate::UGE, a, inf);
}

Value Emit::convert(Value v, Type to) {
  Type from = v.getType();
  if (from == to)
    return v;
  auto ff = dyn_cast<FloatType>(from);
  auto tf = dyn_cast<FloatType>(to);
  if (ff && tf) {
    if (from.isBF16()) {
      // bf16 -> f32 is the bits shifted up: written so, because IREE folds
      // extf(truncf(x)) to x (a bias cast to bf16 by autocast would then
      // reach the product unrounded).
      Value bits = arith::BitcastOp::create(b, loc, b.getI16Type(), v);
      Value wide = arith::ExtUIOp::create(b, loc, b.getI32Type(), bits);
      wide = arith::ShLIOp::create(b, loc, wide, cstI(16, b.getI32Type()));
      return convert(arith::BitcastOp::create(b, loc, f32(), wide), to);
    }
    if (ff.getWidth() < tf.getWidth())
      return arith::ExtFOp::create(b, loc, to, v);
    if (from.isF64() && tf.getWidth() < 32) // as the runtime stores it: (float) first
      return arith::TruncFOp::create(b, loc, to, arith::TruncFOp::create(b, loc, f32(), v));
    if (ff.getWidth() > tf.getWidth())
      return arith::TruncFOp::create(b, loc, to, v);
    // f16 <-> bf16: through f32 (the widening is exact: one rounding).
    return arith::TruncFOp::create(b, loc, to, arith::ExtFOp::create(b, loc, f32(), v));
  }
  if (ff) { // float -> int
    if (to.isInteger(1))
      return cmp(arith::CmpFPredicate::UNE, v, cst(0.0, from));
    return arith::FPToSIOp::create(b, loc, to, v);
  }
  unsigned fw = from.getIntOrFloatBitWidth();
  if (tf) { // int -> float
    if (fw == 1)
      return arith::UIToFPOp::create(b, loc, to, v);
    return arith::SIToFPOp::create(b, loc, to, v);
  }
  unsigned tw = to.getIntOrFloatBitWidth();
  if (tw == 1)
    return cmpi(arith::CmpIPredicate::ne, v, cstI(0, from));
  if (fw == 1)
    return arith::ExtUIOp::create(b, loc, to, v);
  if (fw < tw)
    return arith::ExtSIOp::create(b, loc, to, v);
  return arith::TruncIOp::create(b, loc, to, v);
}

Value Emit::empty(RankedTensorType t) {
  return tensor::EmptyOp::create(b, loc, t.getShape(), t.getElementType());
}

Value Emit::full(RankedTensorType t, Value scalar) {
  return linalg::FillOp::create(b, loc, ValueRange{scalar}, ValueRange{empty(t)}).getResult(0);
}

Value Emit::reshape(Value v, ArrayRef<int64_t> shape) {
  auto t = cast<RankedTensorType>(v.getType());
  if (t.getShape() == shape)
    return v;
  auto all = [](int64_t n) {
    ReassociationIndices r;
    for (int64_t i = 0; i < n; ++i)
      r.push_back(i);
    return r;
  };
  // Through rank 1 (rank 0 for a one-element target of rank 0): any static
  // reshape is a collapse and an expand.
  Value flat = v;
  bool toScalar = shape.empty();
  if (t.getRank() > 1 || (toScalar && t.getRank() == 1)) {
    SmallVector<ReassociationIndices> re;
    SmallVector<int64_t> flatShape;
    if (!toScalar) {
      re.push_back(all(t.getRank()));
      flatShape.push_back(t.getNumElements());
    }
    flat = tensor::CollapseShapeOp::create(
        b, loc, RankedTensorType::get(flatShape, t.getElementType()), v, re);
  }
  auto ft = cast<RankedTensorType>(flat.getType());
  if (ft.getShape() == shape)
    return flat;
  SmallVector<ReassociationIndices> re;
  if (ft.getRank() == 1)
    re.push_back(all(shape.size()));
  return tensor::ExpandShapeOp::create(b, loc, RankedTensorType::get(shape, t.getElementType()),
                                       flat, re);
}

AffineMap Emit::broadcastMap(RankedTensorType in, ArrayRef<int64_t> shape) {
  int64_t r = shape.size(), ir = in.getRank();
  SmallVector<AffineExpr> exprs;
  for (int64_t i = 0; i < ir; ++i) {
    int64_t d = r - ir + i;
    if (in.getDimSize(i) == 1 && shape[d] != 1)
      exprs.push_back(b.getAffineConstantExpr(0));
    else
      exprs.push_back(b.getAffineDimExpr(d));
  }
  return AffineMap::get(r, 0, exprs, b.getContext());
}

SmallVector<Value> Emit::generic(TypeRange results, ValueRange ins, ValueRange outs,
                                 ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iters,
                                 llvm::function_ref<void(OpBuilder &, Location, ValueRange)> body) {
  auto g = linalg::GenericOp::create(b, loc, results, ins, outs, maps, iters, body);
  return SmallVector<Value>(g.getResults());
}

SmallVector<Value> Emit::map(ArrayRef<int64_t> shape, ArrayRef<Type> elts, ValueRange ins,
                             ScalarFn fn, bool widen) {
  SmallVector<AffineMap> maps;
  for (Value in : ins)
    maps.push_back(broadcastMap(cast<RankedTensorType>(in.getType()), shape));
  SmallVector<Value> outs;
  SmallVector<Type> types;
  for (Type e : elts) {
    auto t = RankedTensorType::get(shape, e);
    outs.push_back(empty(t));
    types.push_back(t);
    maps.push_back(b.getMultiDimIdentityMap(shape.size()));
  }
  SmallVector<utils::IteratorType> iters(shape.size(), utils::IteratorType::parallel);
  size_t nIn = ins.size();
  return generic(types, ins, outs, maps, iters, [&](OpBuilder &nb, Location nl, ValueRange args) {
    Emit e{nb, nl};
    SmallVector<Value> a;
    for (size_t i = 0; i < nIn; ++i)
      a.push_back(widen && isLowFloat(args[i].getType()) ? e.convert(args[i], e.f32()) : args[i]);
    SmallVector<Value> r = fn(nb, nl, a);
    for (size_t i = 0; i < r.size(); ++i)
      r[i] = e.convert(r[i], elts[i]);
    linalg::YieldOp::create(nb, nl, r);
  });
}

Value Emit::map1(RankedTensorType result, ValueRange ins,
                 llvm::function_ref<Value(Emit &, ValueRange)> fn, bool widen) {
  return map(
      result.getShape(), {result.getElementType()}, ins,
      [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
        Emit e{nb, nl};
        return {fn(e, a)};
      },
      widen)[0];
}

Value Emit::reduce(Value x, ArrayRef<int64_t> axes, bool keep, Type acc, bool isMax) {
  auto t = cast<RankedTensorType>(x.getType());
  int64_t r = t.getRank();
  SmallVector<bool> red(r, false);
  for (int64_t a : axes)
    red[a] = true;
  SmallVector<int64_t> outShape, keptShape;
  SmallVector<AffineExpr> outExprs;
  SmallVector<utils::IteratorType> iters;
  for (int64_t i = 0; i < r; ++i) {
    iters.push_back(red[i] ? utils::IteratorType::reduction : utils::IteratorType::parallel);
    keptShape.push_back(red[i] ? 1 : t.getDimSize(i));
    if (!red[i]) {
      outShape.push_back(t.getDimSize(i));
      outExprs.push_back(b.getAffineDimExpr(i));
    }
  }
  auto outT = RankedTensorType::get(outShape, acc);
  double init = isMax ? -std::numeric_limits<double>::infinity() : 0.0;
  Value out = full(outT, isa<FloatType>(acc) ? cst(init, acc) : cstI(0, acc));
  SmallVector<AffineMap> maps = {b.getMultiDimIdentityMap(r),
                                 AffineMap::get(r, 0, outExprs, b.getContext())};
  Value res =
      generic({outT}, {x}, {out}, maps, iters, [&](OpBuilder &nb, Location nl, ValueRange a) {
        Emit e{nb, nl};
        Value v = e.convert(a[0], acc);
        Value s = isMax ? arith::MaximumFOp::create(nb, nl, a[1], v).getResult() : e.add(a[1], v);
        linalg::YieldOp::create(nb, nl, s);
      })[0];
  return keep ? reshape(res, keptShape) : res;
}
