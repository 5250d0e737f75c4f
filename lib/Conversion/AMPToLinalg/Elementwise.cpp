//===- Elementwise.cpp - element-wise ops to linalg -------------------------===//
//
// The unary functions (by their UnaryFunctionOpInterface), the binary ops
// with numpy broadcasting, casts, where and unary_grad: one linalg.generic
// each, f16 / bf16 widened to f32, the runtime's formulas
// (runtime/lib/common/scalar_ops.h) in f32, one rounding.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::linalg_lowering;

namespace {

//===----------------------------------------------------------------------===//
// Element-wise functions (f32), as runtime/lib/common/scalar_ops.h computes them
//===----------------------------------------------------------------------===//

Value unitClamp(Emit &e, Value t) {
  Value zero = e.cstF(0), one = e.cstF(1);
  Value lo = e.sel(e.cmp(arith::CmpFPredicate::OLT, t, zero), zero, t);
  return e.sel(e.cmp(arith::CmpFPredicate::OGT, lo, one), one, lo);
}

Value sigmoid(Emit &e, Value x) { return e.div(e.cstF(1), e.add(e.cstF(1), e.exp(e.neg(x)))); }

/// log(1 + e^x) without overflow, as the runtime's softplus.
Value softplus(Emit &e, Value x) {
  Value zero = e.cstF(0);
  Value pos = e.add(x, math::Log1pOp::create(e.b, e.loc, e.exp(e.neg(x))));
  Value neg = math::Log1pOp::create(e.b, e.loc, e.exp(x));
  return e.sel(e.cmp(P::OGT, x, zero), pos, neg);
}

Value normalCdf(Emit &e, Value x) {
  // 0.5 * erfc(-x / sqrt 2): no cancellation in the negative tail.
  Value a = e.mul(e.neg(x), e.cstF(0.70710678118654752440));
  return e.mul(e.cstF(0.5), math::ErfcOp::create(e.b, e.loc, a));
}

using P = arith::CmpFPredicate;

/// f(x) of a UnaryKind; null for none.
Value applyUnary(Emit &e, UnaryKind k, Value x, float alpha, float beta) {
  OpBuilder &b = e.b;
  Location l = e.loc;
  Value zero = e.cstF(0);
  switch (k) {
  case UnaryKind::identity:
    return x;
  case UnaryKind::relu: // NaN kept
    return e.sel(e.cmp(P::OGT, x, zero), x, e.sel(e.cmp(P::UNO, x, x), x, zero));
  case UnaryKind::sqrt:
    return e.sqrt(x);
  case UnaryKind::exp:
    return e.exp(x);
  case UnaryKind::log:
    return e.log(x);
  case UnaryKind::erf:
    return math::ErfOp::create(b, l, x);
  case UnaryKind::tanh:
    return math::TanhOp::create(b, l, x);
  case UnaryKind::sigmoid:
    return sigmoid(e, x);
  case UnaryKind::gelu:
    return e.mul(x, normalCdf(e, x));
  case UnaryKind::gelu_tanh: {
    Value u = e.mul(e.cstF(0.79788456080286535588f),
                    e.add(x, e.mul(e.mul(e.mul(e.cstF(0.044715f), x), x), x)));
    return e.div(x, e.add(e.cstF(1), e.exp(e.mul(e.cstF(-2.0f), u))));
  }
  case UnaryKind::leaky_relu:
    return e.sel(e.cmp(P::OGE, x, zero), x, e.mul(e.cstF(alpha), x));
  case UnaryKind::abs:
    return math::AbsFOp::create(b, l, x);
  case UnaryKind::reciprocal:
    return e.div(e.cstF(1), x);
  case UnaryKind::softplus:
    return softplus(e, x);
  case UnaryKind::elu:
    return e.sel(e.cmp(P::OGT, x, zero), x, e.mul(e.cstF(alpha), math::ExpM1Op::create(b, l, x)));
  case UnaryKind::celu:
    return e.sel(e.cmp(P::OGT, x, zero), x,
                 e.mul(e.cstF(alpha), math::ExpM1Op::create(b, l, e.div(x, e.cstF(alpha)))));
  case UnaryKind::selu:
    return e.sel(e.cmp(P::OGT, x, zero), e.mul(e.cstF(beta), x),
                 e.mul(e.cstF(beta * alpha), math::ExpM1Op::create(b, l, x)));
  case UnaryKind::hard_sigmoid:
    return unitClamp(e, e.add(e.mul(e.cstF(alpha), x), e.cstF(beta)));
  case UnaryKind::hard_swish:
    return e.mul(x, unitClamp(e, e.add(e.mul(x, e.cstF(1.0f / 6.0f)), e.cstF(0.5f))));
  case UnaryKind::softsign:
    return e.div(x, e.add(e.cstF(1), math::AbsFOp::create(b, l, x)));
  case UnaryKind::sin:
    return math::SinOp::create(b, l, x);
  case UnaryKind::cos:
    return math::CosOp::create(b, l, x);
  case UnaryKind::floor:
    return math::FloorOp::create(b, l, x);
  case UnaryKind::ceil:
    return math::CeilOp::create(b, l, x);
  case UnaryKind::round:
    return math::RoundEvenOp::create(b, l, x);
  case UnaryKind::sign:
    return e.sel(e.cmp(P::OGT, x, zero), e.cstF(1), e.sel(e.cmp(P::OLT, x, zero), e.cstF(-1), x));
  case UnaryKind::clip: {
    Value v = e.sel(e.cmp(P::OLT, x, e.cstF(alpha)), e.cstF(alpha), x);
    return e.sel(e.cmp(P::OGT, v, e.cstF(beta)), e.cstF(beta), v);
  }
  case UnaryKind::thresholded_relu:
    return e.sel(e.cmp(P::OGT, x, e.cstF(alpha)), x, e.sel(e.cmp(P::UNO, x, x), x, zero));
  case UnaryKind::tan:
    return math::TanOp::create(b, l, x);
  case UnaryKind::asin:
    return math::AsinOp::create(b, l, x);
  case UnaryKind::acos:
    return math::AcosOp::create(b, l, x);
  case UnaryKind::atan:
    return math::AtanOp::create(b, l, x);
  case UnaryKind::sinh:
    return math::SinhOp::create(b, l, x);
  case UnaryKind::cosh:
    return math::CoshOp::create(b, l, x);
  case UnaryKind::asinh:
    return math::AsinhOp::create(b, l, x);
  case UnaryKind::acosh:
    return math::AcoshOp::create(b, l, x);
  case UnaryKind::atanh:
    return math::AtanhOp::create(b, l, x);
  case UnaryKind::mish:
    return e.mul(x, math::TanhOp::create(b, l, softplus(e, x)));
  }
  return {};
}

/// f'(x) of a UnaryKind; null for none.
Value unaryDerivative(Emit &e, UnaryKind k, Value x, float alpha, float beta) {
  OpBuilder &b = e.b;
  Location l = e.loc;
  Value zero = e.cstF(0), one = e.cstF(1);
  auto gt0 = [&](Value v) { return e.cmp(P::OGT, v, zero); };
  switch (k) {
  case UnaryKind::identity:
    return one;
  case UnaryKind::relu:
    return e.sel(gt0(x), one, zero);
  case UnaryKind::sqrt:
    return e.div(e.cstF(0.5), e.sqrt(x));
  case UnaryKind::exp:
    return e.exp(x);
  case UnaryKind::log:
    return e.div(one, x);
  case UnaryKind::erf:
    return e.mul(e.cstF(1.12837916709551257390f), e.exp(e.neg(e.mul(x, x))));
  case UnaryKind::tanh: {
    Value t = math::TanhOp::create(b, l, x);
    return e.sub(one, e.mul(t, t));
  }
  case UnaryKind::sigmoid: {
    Value s = sigmoid(e, x);
    return e.mul(s, e.sub(one, s));
  }
  case UnaryKind::gelu: {
    Value cdf = normalCdf(e, x);
    Value pdf = e.mul(e.cstF(0.39894228040143267794f), e.exp(e.mul(e.mul(e.cstF(-0.5f), x), x)));
    return e.add(cdf, e.mul(x, pdf));
  }
  case UnaryKind::gelu_tanh: {
    Value k0 = e.cstF(0.79788456080286535588f);
    Value inner = e.mul(k0, e.add(x, e.mul(e.mul(e.mul(e.cstF(0.044715f), x), x), x)));
    Value sp = e.div(one, e.add(one, e.exp(e.mul(e.cstF(-2.0f), inner))));
    Value sm = e.div(one, e.add(one, e.exp(e.mul(e.cstF(2.0f), inner))));
    Value dinner = e.mul(k0, e.add(one, e.mul(e.mul(e.cstF(3.0f * 0.044715f), x), x)));
    return e.add(sp, e.mul(e.mul(e.mul(e.cstF(2.0f), x), e.mul(sp, sm)), dinner));
  }
  case UnaryKind::leaky_relu:
    return e.sel(gt0(x), one, e.cstF(alpha));
  case UnaryKind::abs:
    return e.sel(gt0(x), one,
                 e.sel(e.cmp(P::OLT, x, zero), e.cstF(-1), e.sel(e.cmp(P::UNO, x, x), x, zero)));
  case UnaryKind::reciprocal: {
    Value r = e.div(one, x);
    return e.neg(e.mul(r, r));
  }
  case UnaryKind::softplus:
    return sigmoid(e, x);
  case UnaryKind::elu:
    return e.sel(gt0(x), one, e.mul(e.cstF(alpha), e.exp(x)));
  case UnaryKind::celu:
    return e.sel(gt0(x), one, e.exp(e.div(x, e.cstF(alpha))));
  case UnaryKind::selu:
    return e.sel(gt0(x), e.cstF(beta), e.mul(e.cstF(beta * alpha), e.exp(x)));
  case UnaryKind::hard_sigmoid: {
    Value t = e.add(e.mul(e.cstF(alpha), x), e.cstF(beta));
    Value in = arith::AndIOp::create(b, l, gt0(t), e.cmp(P::OLT, t, one));
    return e.sel(in, e.cstF(alpha), zero);
  }
  case UnaryKind::hard_swish:
    return e.sel(e.cmp(P::OLE, x, e.cstF(-3)), zero,
                 e.sel(e.cmp(P::OLT, x, e.cstF(3)), e.add(e.div(x, e.cstF(3)), e.cstF(0.5)), one));
  case UnaryKind::softsign: {
    Value d = e.add(one, math::AbsFOp::create(b, l, x));
    return e.div(one, e.mul(d, d));
  }
  case UnaryKind::sin:
    return math::CosOp::create(b, l, x);
  case UnaryKind::cos:
    return e.neg(math::SinOp::create(b, l, x));
  case UnaryKind::floor:
  case UnaryKind::ceil:
  case UnaryKind::round:
  case UnaryKind::sign:
    return zero;
  case UnaryKind::clip: {
    Value in = arith::AndIOp::create(b, l, e.cmp(P::OGT, x, e.cstF(alpha)),
                                     e.cmp(P::OLT, x, e.cstF(beta)));
    return e.sel(in, one, zero);
  }
  case UnaryKind::thresholded_relu:
    return e.sel(e.cmp(P::OGT, x, e.cstF(alpha)), one, zero);
  case UnaryKind::tan: {
    Value t = math::TanOp::create(b, l, x);
    return e.add(one, e.mul(t, t));
  }
  case UnaryKind::asin:
    return e.div(one, e.sqrt(e.sub(one, e.mul(x, x))));
  case UnaryKind::acos:
    return e.div(e.cstF(-1), e.sqrt(e.sub(one, e.mul(x, x))));
  case UnaryKind::atan:
    return e.div(one, e.add(one, e.mul(x, x)));
  case UnaryKind::sinh:
    return math::CoshOp::create(b, l, x);
  case UnaryKind::cosh:
    return math::SinhOp::create(b, l, x);
  case UnaryKind::asinh:
    return e.div(one, e.sqrt(e.add(e.mul(x, x), one)));
  case UnaryKind::acosh:
    return e.div(one, e.sqrt(e.sub(e.mul(x, x), one)));
  case UnaryKind::atanh:
    return e.div(one, e.sub(one, e.mul(x, x)));
  case UnaryKind::mish: {
    Value t = math::TanhOp::create(b, l, softplus(e, x));
    return e.add(t, e.mul(e.mul(x, sigmoid(e, x)), e.sub(one, e.mul(t, t))));
  }
  }
  return {};
}

/// The family's ops (see Lowering.h).
struct Elementwise : OpLowering {
  using OpLowering::OpLowering;
  LogicalResult binary(SmallVector<Value> &out);
};

} // namespace

LogicalResult Elementwise::binary(SmallVector<Value> &out) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  bool isFloat = isa<FloatType>(eltOf(lhs));
  if (eltOf(lhs) != eltOf(rhs))
    return refuse("operands of different element types");
  if (isa<PowOp>(op) && !isFloat)
    return refuse("integer pow");
  out.push_back(e.map1(resultType(), {lhs, rhs}, [&](Emit &x, ValueRange a) -> Value {
    OpBuilder &nb = x.b;
    Location l = x.loc;
    Value p = a[0], q = a[1];
    using IP = arith::CmpIPredicate;
    return llvm::TypeSwitch<Operation *, Value>(op)
        .Case([&](AddOp) { return x.add(p, q); })
        .Case([&](SubOp) { return x.sub(p, q); })
        .Case([&](MulOp) { return x.mul(p, q); })
        .Case([&](DivOp) { return x.div(p, q); })
        .Case([&](PowOp) { return math::PowFOp::create(nb, l, p, q).getResult(); })
        .Case([&](MaxOp) -> Value {
          if (isFloat)
            return arith::MaximumFOp::create(nb, l, p, q);
          return arith::MaxSIOp::create(nb, l, p, q);
        })
        .Case([&](MinOp) -> Value {
          if (isFloat)
            return arith::MinimumFOp::create(nb, l, p, q);
          return arith::MinSIOp::create(nb, l, p, q);
        })
        .Case([&](EqualOp) { return isFloat ? x.cmp(P::OEQ, p, q) : x.cmpi(IP::eq, p, q); })
        .Case([&](LessOp) { return isFloat ? x.cmp(P::OLT, p, q) : x.cmpi(IP::slt, p, q); })
        .Case([&](LessEqualOp) { return isFloat ? x.cmp(P::OLE, p, q) : x.cmpi(IP::sle, p, q); })
        .Case([&](GreaterOp) { return isFloat ? x.cmp(P::OGT, p, q) : x.cmpi(IP::sgt, p, q); })
        .Case([&](GreaterEqualOp) { return isFloat ? x.cmp(P::OGE, p, q) : x.cmpi(IP::sge, p, q); })
        .Case([&](AndOp) { return arith::AndIOp::create(nb, l, p, q).getResult(); })
        .Case([&](OrOp) { return arith::OrIOp::create(nb, l, p, q).getResult(); })
        .Case([&](XorOp) { return arith::XOrIOp::create(nb, l, p, q).getResult(); });
  }));
  return success();
}

FailureOr<Value> mlir::amp::linalg_lowering::lowerUnaryFunction(OpLowering &l, Operation *op) {
  auto u = dyn_cast<UnaryFunctionOpInterface>(op);
  if (!u || !isa<FloatType>(eltOf(op->getOperand(0))))
    return failure();
  UnaryFunction f = u.getUnaryFunction();
  float beta = f.beta.value_or(0.0f);
  return l.e.map1(l.resultType(), op->getOperand(0), [&](Emit &x, ValueRange a) {
    return applyUnary(x, f.kind, a[0], f.alpha, beta);
  });
}

void mlir::amp::linalg_lowering::populateElementwiseLowerings(LoweringSet &set) {
  set.add<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, EqualOp, LessOp, LessEqualOp, GreaterOp,
          GreaterEqualOp, AndOp, OrOp, XorOp>(
      [](OpLowering &l, Operation *op, SmallVector<Value> &out) {
        return Elementwise(op).binary(out);
      });
  // ReLU of integers (a float ReLU is a unary function).
  set.add<ReluOp>([](OpLowering &l, Operation *, SmallVector<Value> &out) {
    out.push_back(l.e.map1(l.resultType(), l.op->getOperand(0), [&](Emit &x, ValueRange a) {
      Value z = x.cstI(0, a[0].getType());
      return arith::MaxSIOp::create(x.b, x.loc, a[0], z).getResult();
    }));
    return success();
  });
  set.add<CastOp>([](OpLowering &l, Operation *op, SmallVector<Value> &out) {
    out.push_back(l.e.map1(
        l.resultType(), cast<CastOp>(op).getInput(), [](Emit &, ValueRange a) { return a[0]; },
        false));
    return success();
  });
  set.add<WhereOp>([](OpLowering &l, Operation *op, SmallVector<Value> &out) {
    auto o = cast<WhereOp>(op);
    out.push_back(l.e.map1(
        l.resultType(), {o.getCondition(), o.getX(), o.getY()},
        [](Emit &x, ValueRange a) { return x.sel(a[0], a[1], a[2]); }, false));
    return success();
  });
  set.add<UnaryGradOp>([](OpLowering &l, Operation *op, SmallVector<Value> &out) {
    auto o = cast<UnaryGradOp>(op);
    UnaryKind kind = o.getKind();
    float alpha = o.getAlpha().convertToFloat(), beta = o.getBeta().convertToFloat();
    out.push_back(l.e.map1(l.resultType(), {o.getX(), o.getDy()}, [&](Emit &x, ValueRange a) {
      return x.mul(a[1], unaryDerivative(x, kind, a[0], alpha, beta));
    }));
    return success();
  });
}
