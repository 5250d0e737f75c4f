//===- LowerToLinalg.cpp - amp ops to linalg on tensors -------------------===//
//
// amp-lower-to-linalg: every amp op of a function becomes linalg generics
// (and tensor / arith / math ops) on tensors computing what the runtime's
// kernel computes: f16 / bf16 math in f32 rounded once per op, products and
// convolutions with f32 accumulators rounded once after the epilogue (alpha,
// beta * C, bias), the ops AMP keeps in fp32 with f64 sums where the
// runtime sums in double, the loss-scaling ops as selects on found_inf (a
// skipped step is data, not control flow). An op without a lowering is an
// error naming it (docs/linalg.md lists what lowers).
//
// With `state-init` (the default) the initial values of the function's
// state (`amp.init` argument attributes: parameters, optimizer state, the
// loss scale and its trackers) move into a function `@<name>_init` that
// returns them in argument order, so that a compiler without our runtime
// can start the training loop.
//
//===----------------------------------------------------------------------===//

#include "Builders.h"

#include "amp/Dialect/AMP/IR/AMPOps.h"
#include "amp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::amp {
#define GEN_PASS_DEF_AMPLOWERTOLINALG
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::linalg_lowering;

namespace {

RankedTensorType rtt(Value v) { return cast<RankedTensorType>(v.getType()); }
Type eltOf(Value v) { return rtt(v).getElementType(); }
int64_t normAxis(int64_t a, int64_t r) { return a < 0 ? a + r : a; }
std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}
using Iter = utils::IteratorType;

//===----------------------------------------------------------------------===//
// Element-wise functions (f32), as runtime/lib/cpu/scalar_ops.h computes them
//===----------------------------------------------------------------------===//

Value unitClamp(Emit &e, Value t) {
  Value zero = e.cstF(0), one = e.cstF(1);
  Value lo = e.sel(e.cmp(arith::CmpFPredicate::OLT, t, zero), zero, t);
  return e.sel(e.cmp(arith::CmpFPredicate::OGT, lo, one), one, lo);
}

Value sigmoid(Emit &e, Value x) { return e.div(e.cstF(1), e.add(e.cstF(1), e.exp(e.neg(x)))); }

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
  case UnaryKind::softplus: {
    Value pos = e.add(x, math::Log1pOp::create(b, l, e.exp(e.neg(x))));
    Value neg = math::Log1pOp::create(b, l, e.exp(x));
    return e.sel(e.cmp(P::OGT, x, zero), pos, neg);
  }
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
  }
  return {};
}

/// The UnaryKind (and alpha, beta) of a forward element-wise op.
std::optional<std::tuple<UnaryKind, float, float>> unaryKindOf(Operation *op) {
  using R = std::optional<std::tuple<UnaryKind, float, float>>;
  auto k = [](UnaryKind u, double a = 0, double b = 0) -> R {
    return std::make_tuple(u, (float)a, (float)b);
  };
  return llvm::TypeSwitch<Operation *, R>(op)
      .Case([&](ReluOp o) -> R {
        if (!isa<FloatType>(eltOf(o.getInput())))
          return std::nullopt;
        return k(UnaryKind::relu);
      })
      .Case([&](SqrtOp) { return k(UnaryKind::sqrt); })
      .Case([&](ExpOp) { return k(UnaryKind::exp); })
      .Case([&](LogOp) { return k(UnaryKind::log); })
      .Case([&](ErfOp) { return k(UnaryKind::erf); })
      .Case([&](TanhOp) { return k(UnaryKind::tanh); })
      .Case([&](SigmoidOp) { return k(UnaryKind::sigmoid); })
      .Case([&](AbsOp) { return k(UnaryKind::abs); })
      .Case([&](ReciprocalOp) { return k(UnaryKind::reciprocal); })
      .Case([&](SoftplusOp) { return k(UnaryKind::softplus); })
      .Case([&](HardSwishOp) { return k(UnaryKind::hard_swish); })
      .Case([&](SoftsignOp) { return k(UnaryKind::softsign); })
      .Case([&](SinOp) { return k(UnaryKind::sin); })
      .Case([&](CosOp) { return k(UnaryKind::cos); })
      .Case([&](TanOp) { return k(UnaryKind::tan); })
      .Case([&](AsinOp) { return k(UnaryKind::asin); })
      .Case([&](AcosOp) { return k(UnaryKind::acos); })
      .Case([&](AtanOp) { return k(UnaryKind::atan); })
      .Case([&](SinhOp) { return k(UnaryKind::sinh); })
      .Case([&](CoshOp) { return k(UnaryKind::cosh); })
      .Case([&](AsinhOp) { return k(UnaryKind::asinh); })
      .Case([&](AcoshOp) { return k(UnaryKind::acosh); })
      .Case([&](AtanhOp) { return k(UnaryKind::atanh); })
      .Case([&](FloorOp) { return k(UnaryKind::floor); })
      .Case([&](CeilOp) { return k(UnaryKind::ceil); })
      .Case([&](RoundOp) { return k(UnaryKind::round); })
      .Case([&](SignOp) { return k(UnaryKind::sign); })
      .Case([&](EluOp o) { return k(UnaryKind::elu, o.getAlpha().convertToDouble()); })
      .Case([&](CeluOp o) { return k(UnaryKind::celu, o.getAlpha().convertToDouble()); })
      .Case([&](SeluOp o) {
        return k(UnaryKind::selu, o.getAlpha().convertToDouble(), o.getGamma().convertToDouble());
      })
      .Case([&](HardSigmoidOp o) {
        return k(UnaryKind::hard_sigmoid, o.getAlpha().convertToDouble(),
                 o.getBeta().convertToDouble());
      })
      .Case([&](ThresholdedReluOp o) {
        return k(UnaryKind::thresholded_relu, o.getAlpha().convertToDouble());
      })
      .Case([&](ClipOp o) {
        return k(UnaryKind::clip, o.getMin().convertToDouble(), o.getMax().convertToDouble());
      })
      .Case([&](LeakyReluOp o) { return k(UnaryKind::leaky_relu, o.getAlpha().convertToDouble()); })
      .Case([&](GeluOp o) {
        return k(o.getApproximate() == GeluApproximation::tanh ? UnaryKind::gelu_tanh
                                                               : UnaryKind::gelu);
      })
      .Default([](Operation *) -> R { return std::nullopt; });
}

//===----------------------------------------------------------------------===//
// One op
//===----------------------------------------------------------------------===//

/// The window attributes of a convolution or pooling op over `spatial`
/// dims.
struct Window {
  SmallVector<int64_t> kernel, strides, dilations, padLo, padHi;
};

class OpLowering {
public:
  explicit OpLowering(Operation *op) : op(op), b(op), e{b, op->getLoc()} {}

  /// The op's replacement values (null for results nobody reads that the
  /// lowering skips), or failure with the op's error emitted.
  FailureOr<SmallVector<Value>> run();

private:
  Operation *op;
  OpBuilder b;
  Emit e;

  LogicalResult refuse(const Twine &why) {
    return op->emitOpError("has no lowering to linalg: ") << why;
  }
  RankedTensorType resultType(unsigned i = 0) {
    return cast<RankedTensorType>(op->getResult(i).getType());
  }
  Value toF32Tensor(Value v) {
    if (eltOf(v).isF32())
      return v;
    auto t = RankedTensorType::get(rtt(v).getShape(), e.f32());
    return e.map1(t, {v}, [](Emit &, ValueRange a) { return a[0]; });
  }

  LogicalResult windowOf(Operation *o, int64_t spatial, ArrayRef<int64_t> kernelFromW, Window &w);
  Value pad(Value x, const Window &w, double value);

  LogicalResult binary(SmallVector<Value> &out);
  LogicalResult gemm(GemmOp o, SmallVector<Value> &out);
  LogicalResult matmul(MatMulOp o, SmallVector<Value> &out);
  LogicalResult conv(ConvOp o, SmallVector<Value> &out);
  LogicalResult convGrad(ConvGradOp o, SmallVector<Value> &out);
  LogicalResult maxPool(MaxPoolOp o, SmallVector<Value> &out);
  LogicalResult maxPoolGrad(MaxPoolGradOp o, SmallVector<Value> &out);
  LogicalResult reduceOp(Operation *o, SmallVector<Value> &out);
  LogicalResult softmax(Value x, int64_t axis, bool log, RankedTensorType rt,
                        SmallVector<Value> &out);
  LogicalResult softmaxGrad(SoftmaxGradOp o, SmallVector<Value> &out);
  LogicalResult layerNorm(LayerNormOp o, SmallVector<Value> &out);
  LogicalResult layerNormGrad(LayerNormGradOp o, SmallVector<Value> &out);
  LogicalResult batchNorm(BatchNormOp o, SmallVector<Value> &out);
  LogicalResult lossOp(SmallVector<Value> &out);
  LogicalResult lossGrad(SmallVector<Value> &out);
  LogicalResult unscale(UnscaleAndCheckOp o, SmallVector<Value> &out);
  LogicalResult clipGradNorm(ClipGradNormOp o, SmallVector<Value> &out);
  LogicalResult sgd(SGDUpdateOp o, SmallVector<Value> &out);
  LogicalResult adam(AdamUpdateOp o, SmallVector<Value> &out);
  LogicalResult updateScale(UpdateScaleOp o, SmallVector<Value> &out);
  LogicalResult transpose(TransposeOp o, SmallVector<Value> &out);
  LogicalResult concat(ConcatOp o, SmallVector<Value> &out);
  LogicalResult slice(SliceOp o, SmallVector<Value> &out);
};

FailureOr<SmallVector<Value>> OpLowering::run() {
  for (Type t : op->getOperandTypes()) {
    auto rt = dyn_cast<RankedTensorType>(t);
    if (!rt || !rt.hasStaticShape())
      return (refuse("needs statically shaped tensors, got " + typeStr(t)), failure());
    if (rt.getElementType().isUnsignedInteger())
      return (refuse("unsigned element types have no arith ops; got " + typeStr(t)), failure());
  }
  for (Type t : op->getResultTypes()) {
    auto rt = dyn_cast<RankedTensorType>(t);
    if (!rt || !rt.hasStaticShape() || rt.getElementType().isUnsignedInteger())
      return (refuse("needs statically shaped signless tensors, got " + typeStr(t)), failure());
  }
  SmallVector<Value> out;
  LogicalResult ok = success();
  if (auto k = unaryKindOf(op)) {
    auto [kind, alpha, beta] = *k;
    out.push_back(e.map1(resultType(), op->getOperand(0), [&](Emit &x, ValueRange a) {
      return applyUnary(x, kind, a[0], alpha, beta);
    }));
    return out;
  }
  ok = llvm::TypeSwitch<Operation *, LogicalResult>(op)
           .Case<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, EqualOp, LessOp, LessEqualOp,
                 GreaterOp, GreaterEqualOp, AndOp, OrOp, XorOp>(
               [&](Operation *) { return binary(out); })
           .Case([&](ReluOp o) { // integer relu
             out.push_back(e.map1(resultType(), o.getInput(), [&](Emit &x, ValueRange a) {
               Value z = x.cstI(0, a[0].getType());
               return arith::MaxSIOp::create(x.b, x.loc, a[0], z).getResult();
             }));
             return success();
           })
           .Case([&](CastOp o) {
             out.push_back(e.map1(
                 resultType(), o.getInput(), [](Emit &, ValueRange a) { return a[0]; }, false));
             return success();
           })
           .Case([&](WhereOp o) {
             out.push_back(e.map1(
                 resultType(), {o.getCondition(), o.getX(), o.getY()},
                 [](Emit &x, ValueRange a) { return x.sel(a[0], a[1], a[2]); }, false));
             return success();
           })
           .Case([&](UnaryGradOp o) -> LogicalResult {
             UnaryKind kind = o.getKind();
             float alpha = o.getAlpha().convertToFloat(), beta = o.getBeta().convertToFloat();
             out.push_back(e.map1(resultType(), {o.getX(), o.getDy()}, [&](Emit &x, ValueRange a) {
               return x.mul(a[1], unaryDerivative(x, kind, a[0], alpha, beta));
             }));
             return success();
           })
           .Case<IdentityOp, ReshapeOp, FlattenOp, SqueezeOp, UnsqueezeOp>([&](Operation *) {
             out.push_back(e.reshape(op->getOperand(0), resultType().getShape()));
             return success();
           })
           .Case([&](DropoutOp o) -> LogicalResult {
             if (!isIdentityDropout(op))
               return refuse("dropout in training mode draws random masks (the runtime's "
                             "generator has no linalg form yet); export the model in eval mode "
                             "or without dropout");
             out.push_back(o.getInput());
             out.push_back(Value());
             return success();
           })
           .Case([&](ExpandOp o) {
             out.push_back(e.map1(
                 resultType(), o.getInput(), [](Emit &, ValueRange a) { return a[0]; }, false));
             return success();
           })
           .Case([&](TransposeOp o) { return transpose(o, out); })
           .Case([&](ConcatOp o) { return concat(o, out); })
           .Case([&](SliceOp o) { return slice(o, out); })
           .Case([&](GemmOp o) { return gemm(o, out); })
           .Case([&](MatMulOp o) { return matmul(o, out); })
           .Case([&](ConvOp o) { return conv(o, out); })
           .Case([&](ConvGradOp o) { return convGrad(o, out); })
           .Case([&](MaxPoolOp o) { return maxPool(o, out); })
           .Case([&](MaxPoolGradOp o) { return maxPoolGrad(o, out); })
           .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, GlobalAveragePoolOp>(
               [&](Operation *o) { return reduceOp(o, out); })
           .Case([&](SoftmaxOp o) {
             return softmax(o.getInput(), o.getAxis(), false, resultType(), out);
           })
           .Case([&](LogSoftmaxOp o) {
             return softmax(o.getInput(), o.getAxis(), true, resultType(), out);
           })
           .Case([&](SoftmaxGradOp o) { return softmaxGrad(o, out); })
           .Case([&](LayerNormOp o) { return layerNorm(o, out); })
           .Case([&](LayerNormGradOp o) { return layerNormGrad(o, out); })
           .Case([&](BatchNormOp o) { return batchNorm(o, out); })
           .Case<SoftmaxCrossEntropyLossOp, NLLLossOp>([&](Operation *) { return lossOp(out); })
           .Case<SoftmaxCrossEntropyLossGradOp, NLLLossGradOp>(
               [&](Operation *) { return lossGrad(out); })
           .Case([&](UnscaleAndCheckOp o) { return unscale(o, out); })
           .Case([&](ClipGradNormOp o) { return clipGradNorm(o, out); })
           .Case([&](SGDUpdateOp o) { return sgd(o, out); })
           .Case([&](AdamUpdateOp o) { return adam(o, out); })
           .Case([&](UpdateScaleOp o) { return updateScale(o, out); })
           .Case([&](StepCountOp o) {
             out.push_back(
                 e.map1(resultType(), {o.getStep(), o.getFoundInf()}, [](Emit &x, ValueRange a) {
                   Value one = x.cstI(1, a[0].getType());
                   return x.sel(a[1], a[0], x.add(a[0], one));
                 }));
             return success();
           })
           .Case([&](MicroStepOp o) {
             int64_t every = o.getEvery();
             auto r = e.map({}, {b.getI1Type(), b.getI64Type()}, {o.getMicroStep()},
                            [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
                              Emit x{nb, nl};
                              Value next = x.add(a[0], x.cstI(1, a[0].getType()));
                              Value apply = x.cmpi(arith::CmpIPredicate::eq, next,
                                                   x.cstI(every, a[0].getType()));
                              return {apply, x.sel(apply, x.cstI(0, a[0].getType()), next)};
                            });
             out.append(r.begin(), r.end());
             return success();
           })
           .Default([&](Operation *) {
             return refuse("no lowering is written for this op (docs/linalg.md lists the ops "
                           "that lower)");
           });
  if (failed(ok))
    return failure();
  return out;
}

LogicalResult OpLowering::binary(SmallVector<Value> &out) {
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

LogicalResult OpLowering::transpose(TransposeOp o, SmallVector<Value> &out) {
  auto in = rtt(o.getInput());
  int64_t r = in.getRank();
  SmallVector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i)
    perm.push_back(o.getPerm() ? (*o.getPerm())[i] : r - 1 - i);
  // out[i] = in[perm[i]]: the input's dim perm[i] is the loop i.
  SmallVector<AffineExpr> exprs(r);
  for (int64_t i = 0; i < r; ++i)
    exprs[perm[i]] = b.getAffineDimExpr(i);
  RankedTensorType rt = resultType();
  out.push_back(e.generic(
      {rt}, {o.getInput()}, {e.empty(rt)},
      {AffineMap::get(r, 0, exprs, b.getContext()), b.getMultiDimIdentityMap(r)},
      SmallVector<Iter>(r, Iter::parallel),
      [](OpBuilder &nb, Location nl, ValueRange a) { linalg::YieldOp::create(nb, nl, a[0]); })[0]);
  return success();
}

LogicalResult OpLowering::concat(ConcatOp o, SmallVector<Value> &out) {
  RankedTensorType rt = resultType();
  int64_t axis = normAxis(o.getAxis(), rt.getRank());
  Value acc = e.empty(rt);
  int64_t off = 0;
  for (Value in : o.getInputs()) {
    auto t = rtt(in);
    SmallVector<OpFoldResult> offs(rt.getRank(), b.getIndexAttr(0)), sizes, strides;
    offs[axis] = b.getIndexAttr(off);
    for (int64_t d : t.getShape())
      sizes.push_back(b.getIndexAttr(d));
    strides.assign(rt.getRank(), b.getIndexAttr(1));
    acc = tensor::InsertSliceOp::create(b, op->getLoc(), in, acc, offs, sizes, strides);
    off += t.getDimSize(axis);
  }
  out.push_back(acc);
  return success();
}

LogicalResult OpLowering::slice(SliceOp o, SmallVector<Value> &out) {
  auto in = rtt(o.getInput());
  RankedTensorType rt = resultType();
  int64_t r = in.getRank();
  SmallVector<int64_t> start(r, 0), step(r, 1);
  ArrayRef<int64_t> starts = o.getStarts();
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = o.getAxes() ? normAxis((*o.getAxes())[i], r) : (int64_t)i;
    int64_t st = o.getSteps() ? (*o.getSteps())[i] : 1;
    int64_t dim = in.getDimSize(axis);
    if (st < 0)
      return refuse("a negative step (the runtime's reversed slice has no lowering yet)");
    int64_t s0 = starts[i] < 0 ? starts[i] + dim : starts[i];
    start[axis] = std::clamp<int64_t>(s0, 0, dim);
    step[axis] = st;
  }
  SmallVector<OpFoldResult> offs, sizes, strides;
  for (int64_t i = 0; i < r; ++i) {
    offs.push_back(b.getIndexAttr(start[i]));
    sizes.push_back(b.getIndexAttr(rt.getDimSize(i)));
    strides.push_back(b.getIndexAttr(step[i]));
  }
  out.push_back(
      tensor::ExtractSliceOp::create(b, op->getLoc(), rt, o.getInput(), offs, sizes, strides));
  return success();
}

/// The f32 product sum_k A[.., m, k] B[.., k, n] over loops (batch.., m, n, k)
/// given each operand's map; returns the f32 accumulator of `accShape`.
static Value contraction(Emit &e, Value a, Value bv, AffineMap ma, AffineMap mb,
                         ArrayRef<int64_t> accShape) {
  OpBuilder &b = e.b;
  int64_t loops = ma.getNumDims();
  auto accT = RankedTensorType::get(accShape, e.f32());
  Value init = e.full(accT, e.cstF(0));
  SmallVector<AffineExpr> outExprs;
  for (int64_t i = 0; i < loops - 1; ++i)
    outExprs.push_back(b.getAffineDimExpr(i));
  SmallVector<Iter> iters(loops - 1, Iter::parallel);
  iters.push_back(Iter::reduction);
  return e.generic({accT}, {a, bv}, {init},
                   {ma, mb, AffineMap::get(loops, 0, outExprs, b.getContext())}, iters,
                   [](OpBuilder &nb, Location nl, ValueRange x) {
                     Emit q{nb, nl};
                     Value p = q.mul(q.convert(x[0], q.f32()), q.convert(x[1], q.f32()));
                     linalg::YieldOp::create(nb, nl, q.add(x[2], p));
                   })[0];
}

LogicalResult OpLowering::gemm(GemmOp o, SmallVector<Value> &out) {
  if (!isa<FloatType>(eltOf(o.getA())))
    return refuse("an integer product");
  if (o.getAccumulate() && !o.getAccumulate()->isF32())
    return refuse("accumulate must be f32");
  auto at = rtt(o.getA());
  bool ta = o.getTransA(), tb = o.getTransB();
  int64_t m = ta ? at.getDimSize(1) : at.getDimSize(0);
  RankedTensorType rt = resultType();
  int64_t n = rt.getDimSize(1);
  MLIRContext *ctx = b.getContext();
  AffineExpr dm = b.getAffineDimExpr(0), dn = b.getAffineDimExpr(1), dk = b.getAffineDimExpr(2);
  AffineMap ma =
      AffineMap::get(3, 0, ta ? ArrayRef<AffineExpr>{dk, dm} : ArrayRef<AffineExpr>{dm, dk}, ctx);
  AffineMap mb =
      AffineMap::get(3, 0, tb ? ArrayRef<AffineExpr>{dn, dk} : ArrayRef<AffineExpr>{dk, dn}, ctx);
  Value acc = contraction(e, o.getA(), o.getB(), ma, mb, {m, n});
  float alpha = o.getAlpha().convertToFloat(), beta = o.getBeta().convertToFloat();
  SmallVector<Value> ins = {acc};
  if (o.getC())
    ins.push_back(o.getC());
  out.push_back(e.map1(rt, ins, [&](Emit &x, ValueRange a) {
    Value v = a[0];
    if (alpha != 1.0f)
      v = x.mul(x.cstF(alpha), v);
    if (a.size() > 1) {
      Value c = a[1];
      if (beta != 1.0f)
        c = x.mul(x.cstF(beta), c);
      v = x.add(v, c);
    }
    return v;
  }));
  return success();
}

LogicalResult OpLowering::matmul(MatMulOp o, SmallVector<Value> &out) {
  if (!isa<FloatType>(eltOf(o.getLhs())))
    return refuse("an integer product");
  if (o.getAccumulate() && !o.getAccumulate()->isF32())
    return refuse("accumulate must be f32");
  Value lhs = o.getLhs(), rhs = o.getRhs();
  if (rtt(lhs).getRank() == 1)
    lhs = e.reshape(lhs, {1, rtt(lhs).getDimSize(0)});
  if (rtt(rhs).getRank() == 1)
    rhs = e.reshape(rhs, {rtt(rhs).getDimSize(0), 1});
  auto lt = rtt(lhs), qt = rtt(rhs);
  int64_t lb = lt.getRank() - 2, rb = qt.getRank() - 2, nb = std::max(lb, rb);
  SmallVector<int64_t> accShape;
  for (int64_t i = 0; i < nb; ++i) {
    int64_t dl = i - (nb - lb) >= 0 ? lt.getDimSize(i - (nb - lb)) : 1;
    int64_t dr = i - (nb - rb) >= 0 ? qt.getDimSize(i - (nb - rb)) : 1;
    accShape.push_back(std::max(dl, dr));
  }
  int64_t m = lt.getDimSize(lb), n = qt.getDimSize(rb + 1);
  accShape.push_back(m);
  accShape.push_back(n);
  int64_t loops = nb + 3;
  auto operandMap = [&](RankedTensorType t, int64_t batch, bool isLhs) {
    SmallVector<AffineExpr> ex;
    for (int64_t i = 0; i < batch; ++i) {
      int64_t d = nb - batch + i;
      ex.push_back(t.getDimSize(i) == 1 && accShape[d] != 1 ? b.getAffineConstantExpr(0)
                                                            : b.getAffineDimExpr(d));
    }
    AffineExpr dm = b.getAffineDimExpr(nb), dn = b.getAffineDimExpr(nb + 1),
               dk = b.getAffineDimExpr(nb + 2);
    if (isLhs) {
      ex.push_back(dm);
      ex.push_back(dk);
    } else {
      ex.push_back(dk);
      ex.push_back(dn);
    }
    return AffineMap::get(loops, 0, ex, b.getContext());
  };
  Value acc =
      contraction(e, lhs, rhs, operandMap(lt, lb, true), operandMap(qt, rb, false), accShape);
  auto lowT = RankedTensorType::get(accShape, resultType().getElementType());
  Value v = e.map1(lowT, {acc}, [](Emit &, ValueRange a) { return a[0]; });
  out.push_back(e.reshape(v, resultType().getShape()));
  return success();
}

LogicalResult OpLowering::windowOf(Operation *o, int64_t spatial, ArrayRef<int64_t> kernelFromW,
                                   Window &w) {
  auto arr = [&](StringRef name, int64_t n, int64_t dflt) -> SmallVector<int64_t> {
    if (auto a = o->getAttrOfType<DenseI64ArrayAttr>(name))
      return SmallVector<int64_t>(a.asArrayRef());
    return SmallVector<int64_t>(n, dflt);
  };
  if (auto ap = o->getAttrOfType<AutoPadAttr>("auto_pad"))
    if (ap.getValue() != AutoPad::NOTSET && ap.getValue() != AutoPad::VALID)
      return refuse("auto_pad SAME_UPPER / SAME_LOWER (export with explicit pads)");
  if (auto cm = o->getAttrOfType<BoolAttr>("ceil_mode"); cm && cm.getValue())
    return refuse("ceil_mode = 1");
  if (auto so = o->getAttrOfType<IntegerAttr>("storage_order"); so && so.getInt() != 0)
    return refuse("storage_order = 1");
  w.kernel =
      kernelFromW.empty() ? arr("kernel_shape", spatial, 1) : SmallVector<int64_t>(kernelFromW);
  w.strides = arr("strides", spatial, 1);
  w.dilations = arr("dilations", spatial, 1);
  SmallVector<int64_t> pads = arr("pads", 2 * spatial, 0);
  if ((int64_t)w.kernel.size() != spatial || (int64_t)w.strides.size() != spatial ||
      (int64_t)w.dilations.size() != spatial || (int64_t)pads.size() != 2 * spatial)
    return refuse("window attributes of the wrong length");
  w.padLo.assign(pads.begin(), pads.begin() + spatial);
  w.padHi.assign(pads.begin() + spatial, pads.end());
  return success();
}

Value OpLowering::pad(Value x, const Window &w, double value) {
  auto t = rtt(x);
  int64_t lead = t.getRank() - w.padLo.size();
  bool any = false;
  SmallVector<int64_t> lo(lead, 0), hi(lead, 0), shape(t.getShape());
  for (size_t i = 0; i < w.padLo.size(); ++i) {
    lo.push_back(w.padLo[i]);
    hi.push_back(w.padHi[i]);
    shape[lead + i] += w.padLo[i] + w.padHi[i];
    any |= w.padLo[i] || w.padHi[i];
  }
  if (!any)
    return x;
  SmallVector<OpFoldResult> l, h;
  for (size_t i = 0; i < lo.size(); ++i) {
    l.push_back(b.getIndexAttr(lo[i]));
    h.push_back(b.getIndexAttr(hi[i]));
  }
  Value v = e.cst(value, t.getElementType());
  return tensor::PadOp::create(b, op->getLoc(), RankedTensorType::get(shape, t.getElementType()), x,
                               l, h, v);
}

/// `v` with its dims permuted: result dim i is v's dim perm[i].
static Value permute(Emit &e, Value v, ArrayRef<int64_t> perm) {
  auto t = rtt(v);
  int64_t r = t.getRank();
  SmallVector<AffineExpr> exprs(r);
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < r; ++i) {
    exprs[perm[i]] = e.b.getAffineDimExpr(i);
    shape.push_back(t.getDimSize(perm[i]));
  }
  auto rt = RankedTensorType::get(shape, t.getElementType());
  return e.generic(
      {rt}, {v}, {e.empty(rt)},
      {AffineMap::get(r, 0, exprs, e.b.getContext()), e.b.getMultiDimIdentityMap(r)},
      SmallVector<Iter>(r, Iter::parallel),
      [](OpBuilder &nb, Location nl, ValueRange a) { linalg::YieldOp::create(nb, nl, a[0]); })[0];
}

/// linalg.conv_2d_nchw_fchw into a zero f32 accumulator of `accShape`: the
/// named op (IREE's convolution code generation knows it); its body widens
/// both inputs to f32, as the generic form does. (An NHWC form between
/// transposes measured no faster in IREE 3.13 once fused into the step.)
static Value namedConv2d(Emit &e, Value x, Value w, ArrayRef<int64_t> accShape,
                         ArrayRef<int64_t> strides, ArrayRef<int64_t> dilations) {
  auto accT = RankedTensorType::get(accShape, e.f32());
  auto at = RankedTensorType::get({2}, e.b.getI64Type());
  return linalg::Conv2DNchwFchwOp::create(
             e.b, e.loc, TypeRange{accT}, ValueRange{x, w}, ValueRange{e.full(accT, e.cstF(0))},
             DenseIntElementsAttr::get(at, strides), DenseIntElementsAttr::get(at, dilations))
      .getResult(0);
}

// Convolutions: loops (n, g, f, o_1..o_S, c, k_1..k_S) over x viewed as
// [N, G, C/G, D..] and w as [G, M/G, C/G, k..]; an f32 accumulator, the bias
// in f32, one rounding.
LogicalResult OpLowering::conv(ConvOp o, SmallVector<Value> &out) {
  if (o.getAccumulate() && !o.getAccumulate()->isF32())
    return refuse("accumulate must be f32");
  auto xt = rtt(o.getX()), wt = rtt(o.getW());
  int64_t S = xt.getRank() - 2, G = o.getGroup();
  Window w;
  if (failed(windowOf(op, S, wt.getShape().drop_front(2), w)))
    return failure();
  RankedTensorType rt = resultType();
  int64_t N = xt.getDimSize(0), C = xt.getDimSize(1), M = wt.getDimSize(0);
  if (G < 1 || C % G || M % G)
    return refuse("group must divide the channels");
  int64_t Cg = C / G, Mg = M / G;
  Value xp = pad(o.getX(), w, 0.0);
  SmallVector<Value> ins;
  if (S == 2 && G == 1) {
    ins.push_back(namedConv2d(e, xp, o.getW(), rt.getShape(), w.strides, w.dilations));
  } else {
    SmallVector<int64_t> xs = {N, G, Cg};
    for (int64_t i = 0; i < S; ++i)
      xs.push_back(rtt(xp).getDimSize(2 + i));
    xp = e.reshape(xp, xs);
    SmallVector<int64_t> ws = {G, Mg, Cg};
    for (int64_t i = 0; i < S; ++i)
      ws.push_back(w.kernel[i]);
    Value wv = e.reshape(o.getW(), ws);
    int64_t loops = 4 + 2 * S;
    auto d = [&](int64_t i) { return b.getAffineDimExpr(i); };
    // dims: 0 n, 1 g, 2 f, 3..3+S-1 o, 3+S c, 4+S.. k
    SmallVector<AffineExpr> xe = {d(0), d(1), d(3 + S)}, we = {d(1), d(2), d(3 + S)},
                            oe = {d(0), d(1), d(2)};
    SmallVector<int64_t> accShape = {N, G, Mg};
    for (int64_t i = 0; i < S; ++i) {
      xe.push_back(d(3 + i) * w.strides[i] + d(4 + S + i) * w.dilations[i]);
      we.push_back(d(4 + S + i));
      oe.push_back(d(3 + i));
      accShape.push_back(rt.getDimSize(2 + i));
    }
    SmallVector<Iter> iters(3 + S, Iter::parallel);
    iters.append(1 + S, Iter::reduction);
    auto accT = RankedTensorType::get(accShape, e.f32());
    MLIRContext *ctx = b.getContext();
    Value acc = e.generic({accT}, {xp, wv}, {e.full(accT, e.cstF(0))},
                          {AffineMap::get(loops, 0, xe, ctx), AffineMap::get(loops, 0, we, ctx),
                           AffineMap::get(loops, 0, oe, ctx)},
                          iters, [](OpBuilder &nb, Location nl, ValueRange x) {
                            Emit q{nb, nl};
                            Value p = q.mul(q.convert(x[0], q.f32()), q.convert(x[1], q.f32()));
                            linalg::YieldOp::create(nb, nl, q.add(x[2], p));
                          })[0];
    ins.push_back(e.reshape(acc, rt.getShape()));
  }
  if (o.getBias()) {
    SmallVector<int64_t> bs = {M};
    bs.append(S, 1);
    ins.push_back(e.reshape(o.getBias(), bs));
  }
  out.push_back(e.map1(
      rt, ins, [](Emit &x, ValueRange a) { return a.size() > 1 ? x.add(a[0], a[1]) : a[0]; }));
  return success();
}

LogicalResult OpLowering::convGrad(ConvGradOp o, SmallVector<Value> &out) {
  if (o.getAccumulate() && !o.getAccumulate()->isF32())
    return refuse("accumulate must be f32");
  auto xt = rtt(o.getX()), wt = rtt(o.getW()), yt = rtt(o.getDy());
  int64_t S = xt.getRank() - 2, G = o.getGroup();
  Window w;
  if (failed(windowOf(op, S, wt.getShape().drop_front(2), w)))
    return failure();
  int64_t N = xt.getDimSize(0), C = xt.getDimSize(1), M = wt.getDimSize(0);
  if (G < 1 || C % G || M % G)
    return refuse("group must divide the channels");
  int64_t Cg = C / G, Mg = M / G;
  MLIRContext *ctx = b.getContext();
  auto d = [&](int64_t i) { return b.getAffineDimExpr(i); };
  auto bodyMac = [](OpBuilder &nb, Location nl, ValueRange x) {
    Emit q{nb, nl};
    Value p = q.mul(q.convert(x[0], q.f32()), q.convert(x[1], q.f32()));
    linalg::YieldOp::create(nb, nl, q.add(x[2], p));
  };
  SmallVector<int64_t> ys = {N, G, Mg};
  for (int64_t i = 0; i < S; ++i)
    ys.push_back(yt.getDimSize(2 + i));
  Value dy = e.reshape(o.getDy(), ys);
  Value dx, dw, db;
  // db[m] = sum over n and the positions of dy.
  if (!o.getDb().use_empty()) {
    SmallVector<int64_t> axes = {0};
    for (int64_t i = 0; i < S; ++i)
      axes.push_back(2 + i);
    Value s = e.reduce(o.getDy(), axes, false, e.f32());
    db = e.map1(cast<RankedTensorType>(o.getDb().getType()), {s},
                [](Emit &, ValueRange a) { return a[0]; });
  }
  // dw[g, f, c, k..] = sum_{n, o..} dy[n, g, f, o..] * xp[n, g, c, o*s + k*d].
  if (!o.getDw().use_empty() && S == 2 && G == 1) {
    // As a named convolution over the batch: xp^T [C, N, H, W] with the
    // filter dy^T [M, N, O, O], the forward's dilation as its stride and its
    // stride as the dilation; [C, M, k..] (cut to the kernel) transposed.
    Value xp = pad(o.getX(), w, 0.0);
    auto xpt = rtt(xp);
    SmallVector<int64_t> kk;
    for (int64_t i = 0; i < 2; ++i)
      kk.push_back((xpt.getDimSize(2 + i) - (yt.getDimSize(2 + i) - 1) * w.strides[i] - 1) /
                       w.dilations[i] +
                   1);
    Value acc = namedConv2d(e, permute(e, xp, {1, 0, 2, 3}), permute(e, o.getDy(), {1, 0, 2, 3}),
                            {C, M, kk[0], kk[1]}, w.dilations, w.strides);
    if (kk[0] != w.kernel[0] || kk[1] != w.kernel[1]) {
      SmallVector<OpFoldResult> z4(4, b.getIndexAttr(0)), one4(4, b.getIndexAttr(1));
      SmallVector<OpFoldResult> sz = {b.getIndexAttr(C), b.getIndexAttr(M),
                                      b.getIndexAttr(w.kernel[0]), b.getIndexAttr(w.kernel[1])};
      acc = tensor::ExtractSliceOp::create(
          b, op->getLoc(), RankedTensorType::get({C, M, w.kernel[0], w.kernel[1]}, e.f32()), acc,
          z4, sz, one4);
    }
    acc = permute(e, acc, {1, 0, 2, 3});
    dw = e.map1(cast<RankedTensorType>(o.getDw().getType()), {acc},
                [](Emit &, ValueRange a) { return a[0]; });
  } else if (!o.getDw().use_empty()) {
    Value xp = pad(o.getX(), w, 0.0);
    SmallVector<int64_t> xs = {N, G, Cg};
    for (int64_t i = 0; i < S; ++i)
      xs.push_back(rtt(xp).getDimSize(2 + i));
    xp = e.reshape(xp, xs);
    // dims: 0 g, 1 f, 2 c, 3.. k (S), 3+S n, 4+S.. o (S)
    int64_t loops = 4 + 2 * S;
    SmallVector<AffineExpr> ye = {d(3 + S), d(0), d(1)}, xe = {d(3 + S), d(0), d(2)},
                            oe = {d(0), d(1), d(2)};
    SmallVector<int64_t> accShape = {G, Mg, Cg};
    for (int64_t i = 0; i < S; ++i) {
      ye.push_back(d(4 + S + i));
      xe.push_back(d(4 + S + i) * w.strides[i] + d(3 + i) * w.dilations[i]);
      oe.push_back(d(3 + i));
      accShape.push_back(w.kernel[i]);
    }
    SmallVector<Iter> iters(3 + S, Iter::parallel);
    iters.append(1 + S, Iter::reduction);
    auto accT = RankedTensorType::get(accShape, e.f32());
    Value acc = e.generic({accT}, {dy, xp}, {e.full(accT, e.cstF(0))},
                          {AffineMap::get(loops, 0, ye, ctx), AffineMap::get(loops, 0, xe, ctx),
                           AffineMap::get(loops, 0, oe, ctx)},
                          iters, bodyMac)[0];
    acc = e.reshape(acc, wt.getShape());
    dw = e.map1(cast<RankedTensorType>(o.getDw().getType()), {acc},
                [](Emit &, ValueRange a) { return a[0]; });
  }
  // dx: the transposed convolution. dy is spread with stride s into zeros
  // with (k - 1) * d leading and enough trailing zeros, then
  // dxp[n, g, c, i] = sum_{f, k'} z[n, g, f, i + k' d] * w[g, f, c, K-1-k'],
  // and the pads are cut off.
  if (!o.getDx().use_empty()) {
    SmallVector<int64_t> zs = {N, G, Mg}, padded;
    SmallVector<OpFoldResult> offs = {b.getIndexAttr(0), b.getIndexAttr(0), b.getIndexAttr(0)},
                              sizes, strides(3, b.getIndexAttr(1));
    for (int64_t v : ys)
      sizes.push_back(b.getIndexAttr(v));
    sizes.resize(3 + S);
    for (int64_t i = 0; i < S; ++i) {
      int64_t hp = xt.getDimSize(2 + i) + w.padLo[i] + w.padHi[i];
      int64_t lead = (w.kernel[i] - 1) * w.dilations[i];
      int64_t O = ys[3 + i];
      int64_t trail = hp - (O - 1) * w.strides[i] - 1;
      if (trail < 0)
        return refuse("an inconsistent window");
      zs.push_back(lead + (O - 1) * w.strides[i] + 1 + trail);
      padded.push_back(hp);
      offs.push_back(b.getIndexAttr(lead));
      strides.push_back(b.getIndexAttr(w.strides[i]));
    }
    auto zt = RankedTensorType::get(zs, yt.getElementType());
    Value z = tensor::InsertSliceOp::create(
        b, op->getLoc(), dy, e.full(zt, e.cst(0.0, yt.getElementType())), offs, sizes, strides);
    SmallVector<int64_t> ws = {G, Mg, Cg};
    for (int64_t i = 0; i < S; ++i)
      ws.push_back(w.kernel[i]);
    Value wv = e.reshape(o.getW(), ws);
    // The kernel flipped, wf[g, f, c, k'] = w[g, f, c, K-1-k'], by index:
    // a map with negative coefficients would be valid linalg, but IREE's
    // tiling mis-sizes its slices.
    auto wft = RankedTensorType::get(ws, wt.getElementType());
    Value wf = e.generic(
        {wft}, {}, {e.empty(wft)}, {b.getMultiDimIdentityMap(3 + S)},
        SmallVector<Iter>(3 + S, Iter::parallel), [&](OpBuilder &nb, Location nl, ValueRange) {
          Emit q{nb, nl};
          SmallVector<Value> at;
          for (int64_t i = 0; i < 3 + S; ++i) {
            Value ix = linalg::IndexOp::create(nb, nl, i);
            if (i >= 3)
              ix = arith::SubIOp::create(nb, nl, q.idx(w.kernel[i - 3] - 1), ix);
            at.push_back(ix);
          }
          linalg::YieldOp::create(nb, nl, tensor::ExtractOp::create(nb, nl, wv, at).getResult());
        })[0];
    Value acc;
    if (S == 2 && G == 1) {
      SmallVector<int64_t> z4 = {N, M, zs[3], zs[4]}, acc4 = {N, C, padded[0], padded[1]};
      Value wf4 = permute(e, e.reshape(wf, wt.getShape()), {1, 0, 2, 3});
      acc = namedConv2d(e, e.reshape(z, z4), wf4, acc4, {1, 1}, w.dilations);
    } else {
      // dims: 0 n, 1 g, 2 c, 3.. i (S), 3+S f, 4+S.. k' (S)
      int64_t loops = 4 + 2 * S;
      SmallVector<AffineExpr> ze = {d(0), d(1), d(3 + S)}, we = {d(1), d(3 + S), d(2)},
                              oe = {d(0), d(1), d(2)};
      SmallVector<int64_t> accShape = {N, G, Cg};
      for (int64_t i = 0; i < S; ++i) {
        ze.push_back(d(3 + i) + d(4 + S + i) * w.dilations[i]);
        we.push_back(d(4 + S + i));
        oe.push_back(d(3 + i));
        accShape.push_back(padded[i]);
      }
      SmallVector<Iter> iters(3 + S, Iter::parallel);
      iters.append(1 + S, Iter::reduction);
      auto accT = RankedTensorType::get(accShape, e.f32());
      acc = e.generic({accT}, {z, wf}, {e.full(accT, e.cstF(0))},
                      {AffineMap::get(loops, 0, ze, ctx), AffineMap::get(loops, 0, we, ctx),
                       AffineMap::get(loops, 0, oe, ctx)},
                      iters, bodyMac)[0];
    }
    SmallVector<int64_t> full = {N, C};
    full.append(padded.begin(), padded.end());
    acc = e.reshape(acc, full);
    SmallVector<OpFoldResult> so(2, b.getIndexAttr(0)), ss, st(2 + S, b.getIndexAttr(1));
    for (int64_t i = 0; i < S; ++i)
      so.push_back(b.getIndexAttr(w.padLo[i]));
    for (int64_t v : xt.getShape())
      ss.push_back(b.getIndexAttr(v));
    auto cutT = RankedTensorType::get(xt.getShape(), e.f32());
    Value cut = tensor::ExtractSliceOp::create(b, op->getLoc(), cutT, acc, so, ss, st);
    dx = e.map1(cast<RankedTensorType>(o.getDx().getType()), {cut},
                [](Emit &, ValueRange a) { return a[0]; });
  }
  out = {dx, dw, db};
  return success();
}

/// linalg.index `dim` as an i64.
static Value loopIndex(OpBuilder &b, Location l, int64_t dim) {
  return arith::IndexCastOp::create(b, l, b.getI64Type(), linalg::IndexOp::create(b, l, dim));
}

// Max pooling: the maxima (exact in the element type), and the flat index
// of each window's first maximum (ONNX's row-major Indices) as a min over
// the window's positions holding the maximum.
LogicalResult OpLowering::maxPool(MaxPoolOp o, SmallVector<Value> &out) {
  auto xt = rtt(o.getX());
  if (!isa<FloatType>(xt.getElementType()))
    return refuse("integer max pooling");
  int64_t S = xt.getRank() - 2;
  Window w;
  if (failed(windowOf(op, S, {}, w)))
    return failure();
  double ninf = -std::numeric_limits<double>::infinity();
  Value xp = pad(o.getX(), w, ninf);
  RankedTensorType rt = resultType();
  MLIRContext *ctx = b.getContext();
  auto d = [&](int64_t i) { return b.getAffineDimExpr(i); };
  // dims: 0 n, 1 c, 2.. o (S), 2+S.. k (S)
  int64_t loops = 2 + 2 * S;
  SmallVector<AffineExpr> xe = {d(0), d(1)}, oe = {d(0), d(1)};
  for (int64_t i = 0; i < S; ++i) {
    xe.push_back(d(2 + i) * w.strides[i] + d(2 + S + i) * w.dilations[i]);
    oe.push_back(d(2 + i));
  }
  SmallVector<Iter> iters(2 + S, Iter::parallel);
  iters.append(S, Iter::reduction);
  AffineMap xm = AffineMap::get(loops, 0, xe, ctx), om = AffineMap::get(loops, 0, oe, ctx);
  // The window's loops get their range from a shape-only operand, as
  // linalg's pooling ops.
  SmallVector<AffineExpr> ke;
  for (int64_t i = 0; i < S; ++i)
    ke.push_back(d(2 + S + i));
  AffineMap km = AffineMap::get(loops, 0, ke, ctx);
  Value win = e.empty(RankedTensorType::get(w.kernel, b.getI1Type()));
  Type elt = xt.getElementType();
  Value vals = e.generic({rt}, {xp, win}, {e.full(rt, e.cst(ninf, elt))}, {xm, km, om}, iters,
                         [](OpBuilder &nb, Location nl, ValueRange a) {
                           linalg::YieldOp::create(
                               nb, nl, arith::MaximumFOp::create(nb, nl, a[2], a[0]).getResult());
                         })[0];
  out.push_back(vals);
  if (o.getIndices().use_empty()) {
    out.push_back(Value());
    return success();
  }
  auto it = cast<RankedTensorType>(o.getIndices().getType());
  Value init = e.full(it, e.cstI(std::numeric_limits<int64_t>::max(), b.getI64Type()));
  SmallVector<int64_t> dims(xt.getShape());
  Value idx = e.generic({it}, {xp, vals, win}, {init}, {xm, om, km, om}, iters,
                        [&](OpBuilder &nb, Location nl, ValueRange a) {
                          Emit q{nb, nl};
                          Type i64 = nb.getI64Type();
                          auto index = [&](int64_t dim) { return loopIndex(nb, nl, dim); };
                          // flat = ((n * C + c) * D1 + h1) * D2 + h2 ..., h = o * s + k * d - pad.
                          Value flat = q.add(q.mul(index(0), q.cstI(dims[1], i64)), index(1));
                          Value inside = arith::ConstantIntOp::create(nb, nl, 1, 1);
                          for (int64_t i = 0; i < S; ++i) {
                            Value h = q.add(q.mul(index(2 + i), q.cstI(w.strides[i], i64)),
                                            q.mul(index(2 + S + i), q.cstI(w.dilations[i], i64)));
                            h = q.sub(h, q.cstI(w.padLo[i], i64));
                            Value ok = arith::AndIOp::create(
                                nb, nl, q.cmpi(arith::CmpIPredicate::sge, h, q.cstI(0, i64)),
                                q.cmpi(arith::CmpIPredicate::slt, h, q.cstI(dims[2 + i], i64)));
                            inside = arith::AndIOp::create(nb, nl, inside, ok);
                            flat = q.add(q.mul(flat, q.cstI(dims[2 + i], i64)), h);
                          }
                          // The maximum (or a NaN, which the maximum then is).
                          Value hit =
                              arith::AndIOp::create(nb, nl, inside, q.cmp(P::UEQ, a[0], a[1]));
                          Value m = arith::MinSIOp::create(nb, nl, a[3], flat);
                          linalg::YieldOp::create(nb, nl, q.sel(hit, m, a[3]));
                        })[0];
  out.push_back(idx);
  return success();
}

// dx[n, c, i..] = sum over the windows holding i of dy where the window's
// index names i: a gather over at most prod(k) windows per position (the
// window comes from the max_pool that made the indices).
LogicalResult OpLowering::maxPoolGrad(MaxPoolGradOp o, SmallVector<Value> &out) {
  // lowerFunction copied the forward max_pool's window onto this op.
  Operation *fwd = op;
  if (!op->hasAttr("kernel_shape"))
    return refuse("indices that no amp.max_pool of this function made (the window is "
                  "unknown)");
  auto xt = rtt(o.getX()), yt = rtt(o.getDy());
  int64_t S = xt.getRank() - 2;
  Window w;
  if (failed(windowOf(fwd, S, {}, w)))
    return failure();
  RankedTensorType rt = resultType();
  // Windows that tile the input exactly (kernel = stride, no padding or
  // dilation, sizes multiples of the stride: 2x2 pooling of even sizes):
  // each position is in one window, read by an affine map (floordiv).
  bool tiles = true;
  for (int64_t i = 0; i < S; ++i)
    tiles &= w.kernel[i] == w.strides[i] && w.padLo[i] == 0 && w.padHi[i] == 0 &&
             w.dilations[i] == 1 && xt.getDimSize(2 + i) == yt.getDimSize(2 + i) * w.strides[i];
  if (tiles) {
    int64_t r = 2 + S;
    SmallVector<AffineExpr> ye = {b.getAffineDimExpr(0), b.getAffineDimExpr(1)};
    for (int64_t i = 0; i < S; ++i)
      ye.push_back(b.getAffineDimExpr(2 + i).floorDiv(w.strides[i]));
    AffineMap ym = AffineMap::get(r, 0, ye, b.getContext());
    SmallVector<int64_t> dims(xt.getShape());
    out.push_back(e.generic(
        {rt}, {o.getDy(), o.getIndices()}, {e.empty(rt)}, {ym, ym, b.getMultiDimIdentityMap(r)},
        SmallVector<Iter>(r, Iter::parallel), [&](OpBuilder &nb, Location nl, ValueRange a) {
          Emit q{nb, nl};
          Type i64 = nb.getI64Type();
          auto index = [&](int64_t dim) { return loopIndex(nb, nl, dim); };
          Value flat = q.add(q.mul(index(0), q.cstI(dims[1], i64)), index(1));
          for (int64_t i = 0; i < S; ++i)
            flat = q.add(q.mul(flat, q.cstI(dims[2 + i], i64)), index(2 + i));
          Value hit = q.cmpi(arith::CmpIPredicate::eq, a[1], flat);
          Value zero = q.cst(0.0, rt.getElementType());
          linalg::YieldOp::create(nb, nl, q.sel(hit, q.convert(a[0], rt.getElementType()), zero));
        })[0]);
    return success();
  }
  auto accT = RankedTensorType::get(xt.getShape(), e.f32());
  // dims: 0 n, 1 c, 2.. i (S), 2+S.. k (S); dy and indices read by index.
  int64_t loops = 2 + 2 * S;
  SmallVector<Iter> iters(2 + S, Iter::parallel);
  iters.append(S, Iter::reduction);
  SmallVector<AffineExpr> oe;
  for (int64_t i = 0; i < 2 + S; ++i)
    oe.push_back(b.getAffineDimExpr(i));
  // A dummy input giving the k loops their range.
  SmallVector<int64_t> ks(w.kernel);
  SmallVector<AffineExpr> ke;
  for (int64_t i = 0; i < S; ++i)
    ke.push_back(b.getAffineDimExpr(2 + S + i));
  Value kshape = e.empty(RankedTensorType::get(ks, b.getI1Type()));
  MLIRContext *ctx = b.getContext();
  Value dy = o.getDy(), ind = o.getIndices();
  SmallVector<int64_t> dims(xt.getShape()), ydims(yt.getShape());
  Value acc = e.generic(
      {accT}, {kshape}, {e.full(accT, e.cstF(0))},
      {AffineMap::get(loops, 0, ke, ctx), AffineMap::get(loops, 0, oe, ctx)}, iters,
      [&](OpBuilder &nb, Location nl, ValueRange a) {
        Emit q{nb, nl};
        Type i64 = nb.getI64Type();
        auto index = [&](int64_t dim) { return loopIndex(nb, nl, dim); };
        Value ok = arith::ConstantIntOp::create(nb, nl, 1, 1);
        Value flat = q.add(q.mul(index(0), q.cstI(dims[1], i64)), index(1));
        SmallVector<Value> at = {linalg::IndexOp::create(nb, nl, 0),
                                 linalg::IndexOp::create(nb, nl, 1)};
        for (int64_t i = 0; i < S; ++i) {
          Value pos = index(2 + i);
          flat = q.add(q.mul(flat, q.cstI(dims[2 + i], i64)), pos);
          // t = i + pad - k * d must be o * s with 0 <= o < O.
          Value t = q.sub(q.add(pos, q.cstI(w.padLo[i], i64)),
                          q.mul(index(2 + S + i), q.cstI(w.dilations[i], i64)));
          Value s = q.cstI(w.strides[i], i64);
          Value oc = arith::DivSIOp::create(nb, nl, t, s);
          Value good = q.cmpi(arith::CmpIPredicate::sge, t, q.cstI(0, i64));
          good =
              arith::AndIOp::create(nb, nl, good,
                                    q.cmpi(arith::CmpIPredicate::eq,
                                           arith::RemSIOp::create(nb, nl, t, s), q.cstI(0, i64)));
          good = arith::AndIOp::create(
              nb, nl, good, q.cmpi(arith::CmpIPredicate::slt, oc, q.cstI(ydims[2 + i], i64)));
          ok = arith::AndIOp::create(nb, nl, ok, good);
          Value safe = q.sel(good, oc, q.cstI(0, i64));
          at.push_back(arith::IndexCastOp::create(nb, nl, nb.getIndexType(), safe));
        }
        Value g = tensor::ExtractOp::create(nb, nl, dy, at);
        Value id = tensor::ExtractOp::create(nb, nl, ind, at);
        Value hit = arith::AndIOp::create(nb, nl, ok, q.cmpi(arith::CmpIPredicate::eq, id, flat));
        Value v = q.sel(hit, q.convert(g, q.f32()), q.cstF(0));
        linalg::YieldOp::create(nb, nl, q.add(a[1], v));
      })[0];
  out.push_back(e.map1(rt, {acc}, [](Emit &, ValueRange a) { return a[0]; }));
  return success();
}

LogicalResult OpLowering::reduceOp(Operation *o, SmallVector<Value> &out) {
  Value x = o->getOperand(0);
  auto xt = rtt(x);
  int64_t r = xt.getRank();
  RankedTensorType rt = resultType();
  SmallVector<int64_t> axes;
  bool keep = true;
  if (isa<GlobalAveragePoolOp>(o)) {
    for (int64_t i = 2; i < r; ++i)
      axes.push_back(i);
  } else {
    auto a = o->getAttrOfType<DenseI64ArrayAttr>("axes");
    keep = !o->getAttrOfType<BoolAttr>("keepdims") ||
           o->getAttrOfType<BoolAttr>("keepdims").getValue();
    auto noop = o->getAttrOfType<BoolAttr>("noop_with_empty_axes");
    if (!a || a.empty()) {
      if (noop && noop.getValue()) {
        out.push_back(x);
        return success();
      }
      for (int64_t i = 0; i < r; ++i)
        axes.push_back(i);
    } else {
      for (int64_t v : a.asArrayRef())
        axes.push_back(normAxis(v, r));
    }
  }
  bool isMax = isa<ReduceMaxOp>(o);
  bool isFloat = isa<FloatType>(xt.getElementType());
  if (!isFloat && !isa<ReduceSumOp>(o))
    return refuse("an integer reduction other than a sum");
  if (isMax) {
    Value m = e.reduce(toF32Tensor(x), axes, keep, e.f32(), true);
    out.push_back(e.map1(rt, {m}, [](Emit &, ValueRange a) { return a[0]; }));
    return success();
  }
  // Sums in double, as the runtime's (f32 for f16 / bf16 inputs: the same
  // rounding once stored, at half the cost, is not exact: keep double).
  Type acc = isFloat ? e.f64() : b.getI64Type();
  Value s = e.reduce(x, axes, keep, acc);
  int64_t count = 1;
  for (int64_t v : axes)
    count *= xt.getDimSize(v);
  bool mean = isa<ReduceMeanOp, GlobalAveragePoolOp>(o);
  out.push_back(e.map1(
      rt, {s},
      [&](Emit &q, ValueRange a) {
        return mean ? q.div(a[0], q.cst((double)count, q.f64())) : a[0];
      },
      false));
  return success();
}

// Softmax as the runtime: the row's maximum, exp(x - max) in f32, the sum in
// double, y = e / sum (log: x - max - log(sum)); rounded once.
LogicalResult OpLowering::softmax(Value x, int64_t axis, bool log, RankedTensorType rt,
                                  SmallVector<Value> &out) {
  auto xt = rtt(x);
  axis = normAxis(axis, xt.getRank());
  Value xf = toF32Tensor(x);
  Value m = e.reduce(xf, {axis}, true, e.f32(), true);
  auto ft = RankedTensorType::get(xt.getShape(), e.f32());
  // A row of -inf has max -inf: x - max is NaN, as the runtime's.
  Value d = e.map1(ft, {xf, m}, [](Emit &q, ValueRange a) { return q.sub(a[0], a[1]); });
  Value ex = e.map1(ft, {d}, [](Emit &q, ValueRange a) { return q.exp(a[0]); });
  Value s = e.reduce(ex, {axis}, true, e.f64());
  if (log) {
    out.push_back(e.map1(rt, {d, s}, [](Emit &q, ValueRange a) {
      Value ls = q.log(q.convert(a[1], q.f32()));
      return q.sub(a[0], ls);
    }));
    return success();
  }
  out.push_back(e.map1(
      rt, {ex, s}, [](Emit &q, ValueRange a) { return q.div(q.convert(a[0], q.f64()), a[1]); },
      false));
  return success();
}

LogicalResult OpLowering::softmaxGrad(SoftmaxGradOp o, SmallVector<Value> &out) {
  Value y = o.getY(), dy = o.getDy();
  auto yt = rtt(y);
  int64_t axis = normAxis(o.getAxis(), yt.getRank());
  bool log = o.getLog();
  auto dt = RankedTensorType::get(yt.getShape(), e.f64());
  Value prod = log ? dy : e.map1(dt, {dy, y}, [](Emit &q, ValueRange a) {
    return q.mul(q.convert(a[0], q.f64()), q.convert(a[1], q.f64()));
  });
  Value dot = e.reduce(prod, {axis}, true, e.f64());
  out.push_back(e.map1(resultType(), {y, dy, dot}, [&](Emit &q, ValueRange a) {
    Value yv = q.convert(a[0], q.f64()), g = q.convert(a[1], q.f64());
    if (log)
      return q.sub(g, q.mul(q.convert(q.exp(q.convert(yv, q.f32())), q.f64()), a[2]));
    return q.mul(yv, q.sub(g, a[2]));
  }));
  return success();
}

LogicalResult OpLowering::layerNorm(LayerNormOp o, SmallVector<Value> &out) {
  Value x = o.getX();
  auto xt = rtt(x);
  int64_t r = xt.getRank(), axis = normAxis(o.getAxis(), r);
  SmallVector<int64_t> axes;
  int64_t cols = 1;
  for (int64_t i = axis; i < r; ++i) {
    axes.push_back(i);
    cols *= xt.getDimSize(i);
  }
  double eps = o.getEpsilon().convertToDouble();
  auto dt = RankedTensorType::get(xt.getShape(), e.f64());
  Value sum = e.reduce(x, axes, true, e.f64());
  auto st = cast<RankedTensorType>(sum.getType());
  Value mu = e.map1(
      st, {sum}, [&](Emit &q, ValueRange a) { return q.div(a[0], q.cst((double)cols, q.f64())); });
  Value sq = e.map1(dt, {x, mu}, [](Emit &q, ValueRange a) {
    Value dv = q.sub(q.convert(a[0], q.f64()), a[1]);
    return q.mul(dv, dv);
  });
  Value var = e.reduce(sq, axes, true, e.f64());
  Value rstd = e.map1(st, {var}, [&](Emit &q, ValueRange a) {
    return q.div(q.cst(1.0, q.f64()),
                 q.sqrt(q.add(q.div(a[0], q.cst((double)cols, q.f64())), q.cst(eps, q.f64()))));
  });
  SmallVector<Value> ins = {x, mu, rstd, o.getScale()};
  if (o.getBias())
    ins.push_back(o.getBias());
  out.push_back(e.map1(
      resultType(0), ins,
      [](Emit &q, ValueRange a) {
        Value v =
            q.mul(q.mul(q.sub(q.convert(a[0], q.f64()), a[1]), a[2]), q.convert(a[3], q.f64()));
        if (a.size() > 4)
          v = q.add(v, q.convert(a[4], q.f64()));
        return v;
      },
      false));
  out.push_back(e.map1(resultType(1), {mu}, [](Emit &, ValueRange a) { return a[0]; }, false));
  out.push_back(e.map1(resultType(2), {rstd}, [](Emit &, ValueRange a) { return a[0]; }, false));
  return success();
}

LogicalResult OpLowering::layerNormGrad(LayerNormGradOp o, SmallVector<Value> &out) {
  Value x = o.getX(), dy = o.getDy();
  auto xt = rtt(x);
  int64_t r = xt.getRank(), axis = normAxis(o.getAxis(), r);
  SmallVector<int64_t> rows, colsAxes;
  int64_t cols = 1;
  for (int64_t i = 0; i < r; ++i) {
    if (i < axis)
      rows.push_back(i);
    else {
      colsAxes.push_back(i);
      cols *= xt.getDimSize(i);
    }
  }
  auto dt = RankedTensorType::get(xt.getShape(), e.f64());
  // xhat = (x - mu) * rstd and dxhat = dy * scale, in double.
  auto pair = e.map(
      xt.getShape(), {e.f64(), e.f64()}, {x, o.getMean(), o.getInvStdDev(), dy, o.getScale()},
      [](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
        Emit q{nb, nl};
        auto f = [&](Value v) { return q.convert(v, q.f64()); };
        Value xh = q.mul(q.sub(f(a[0]), f(a[1])), f(a[2]));
        return {xh, q.mul(f(a[3]), f(a[4]))};
      },
      false);
  Value xhat = pair[0], dxhat = pair[1];
  Value m1 = e.reduce(dxhat, colsAxes, true, e.f64());
  Value m2 =
      e.reduce(e.map1(dt, {dxhat, xhat}, [](Emit &q, ValueRange a) { return q.mul(a[0], a[1]); }),
               colsAxes, true, e.f64());
  if (!o.getDx().use_empty())
    out.push_back(e.map1(
        resultType(0), {o.getInvStdDev(), dxhat, xhat, m1, m2},
        [&](Emit &q, ValueRange a) {
          Value n = q.cst((double)cols, q.f64());
          Value rs = q.convert(a[0], q.f64());
          return q.mul(rs, q.sub(q.sub(a[1], q.div(a[3], n)), q.mul(a[2], q.div(a[4], n))));
        },
        false));
  else
    out.push_back(Value());
  // dscale = sum over rows of dy * xhat, dbias = sum of dy; shaped as scale.
  auto sum2 = [&](Value v, unsigned res) {
    Value s = e.reduce(v, rows, false, e.f64());
    Value sh = e.reshape(s, cast<RankedTensorType>(op->getResult(res).getType()).getShape());
    return e.map1(resultType(res), {sh}, [](Emit &, ValueRange a) { return a[0]; }, false);
  };
  out.push_back(o.getDscale().use_empty() ? Value()
                                          : sum2(e.map1(
                                                     dt, {dy, xhat},
                                                     [](Emit &q, ValueRange a) {
                                                       return q.mul(q.convert(a[0], q.f64()), a[1]);
                                                     },
                                                     false),
                                                 1));
  out.push_back(o.getDbias().use_empty() ? Value() : sum2(dy, 2));
  return success();
}

LogicalResult OpLowering::batchNorm(BatchNormOp o, SmallVector<Value> &out) {
  Value x = o.getX();
  auto xt = rtt(x);
  int64_t r = xt.getRank(), C = xt.getDimSize(1);
  double eps = o.getEpsilon().convertToDouble(), mom = o.getMomentum().convertToDouble();
  SmallVector<int64_t> axes = {0}, chShape = {C};
  int64_t m = xt.getDimSize(0);
  for (int64_t i = 2; i < r; ++i) {
    axes.push_back(i);
    chShape.push_back(1);
    m *= xt.getDimSize(i);
  }
  Value mu, var;
  if (o.getTrainingMode()) {
    Value s = e.reduce(x, axes, false, e.f64());
    mu = e.map1(RankedTensorType::get({C}, e.f64()), {s},
                [&](Emit &q, ValueRange a) { return q.div(a[0], q.cst((double)m, q.f64())); });
    Value mub = e.reshape(mu, chShape);
    Value sq = e.map1(
        RankedTensorType::get(xt.getShape(), e.f64()), {x, mub},
        [](Emit &q, ValueRange a) {
          Value dv = q.sub(q.convert(a[0], q.f64()), a[1]);
          return q.mul(dv, dv);
        },
        false);
    Value v = e.reduce(sq, axes, false, e.f64());
    var = e.map1(RankedTensorType::get({C}, e.f64()), {v},
                 [&](Emit &q, ValueRange a) { return q.div(a[0], q.cst((double)m, q.f64())); });
  } else {
    mu = e.map1(
        RankedTensorType::get({C}, e.f64()), {o.getMean()},
        [](Emit &q, ValueRange a) { return q.convert(a[0], q.f64()); }, false);
    var = e.map1(
        RankedTensorType::get({C}, e.f64()), {o.getVar()},
        [](Emit &q, ValueRange a) { return q.convert(a[0], q.f64()); }, false);
  }
  Value inv = e.map1(RankedTensorType::get({C}, e.f64()), {var}, [&](Emit &q, ValueRange a) {
    return q.div(q.cst(1.0, q.f64()), q.sqrt(q.add(a[0], q.cst(eps, q.f64()))));
  });
  auto ch = [&](Value v) { return e.reshape(v, chShape); };
  out.push_back(e.map1(
      resultType(0), {x, ch(mu), ch(inv), ch(o.getScale()), ch(o.getBias())},
      [](Emit &q, ValueRange a) {
        auto f = [&](Value v) { return q.convert(v, q.f64()); };
        return q.add(q.mul(q.mul(q.sub(f(a[0]), a[1]), a[2]), f(a[3])), f(a[4]));
      },
      false));
  if (o.getTrainingMode()) {
    auto run = [&](Value old, Value stat, unsigned res) {
      return e.map1(
          resultType(res), {old, stat},
          [&](Emit &q, ValueRange a) {
            Value mm = q.cst(mom, q.f64());
            return q.add(q.mul(mm, q.convert(a[0], q.f64())),
                         q.mul(q.cst(1.0 - mom, q.f64()), a[1]));
          },
          false);
    };
    out.push_back(run(o.getMean(), mu, 1));
    out.push_back(run(o.getVar(), var, 2));
  } else {
    out.push_back(o.getMean());
    out.push_back(o.getVar());
  }
  return success();
}

// Cross entropy / NLL: per element l = -w[label] * logp[label] (0 for the
// ignored label), reduced by none, sum or the weighted mean. The pick is a
// sum over the classes of a select (no gather).
struct LossParts {
  Value picked, weight; // [N, D..] f64: w[label] * logp[label], w[label]
};

static LossParts pickLabels(Emit &e, Value logp, Value labels, Value weights,
                            std::optional<int64_t> ignore) {
  OpBuilder &b = e.b;
  auto lt = rtt(logp);
  int64_t r = lt.getRank();
  SmallVector<int64_t> outShape;
  SmallVector<AffineExpr> oe, le;
  SmallVector<Iter> iters;
  for (int64_t i = 0; i < r; ++i) {
    iters.push_back(i == 1 ? Iter::reduction : Iter::parallel);
    if (i != 1) {
      outShape.push_back(lt.getDimSize(i));
      oe.push_back(b.getAffineDimExpr(i));
    }
  }
  MLIRContext *ctx = b.getContext();
  auto ot = RankedTensorType::get(outShape, e.f64());
  SmallVector<Value> ins = {logp, labels};
  SmallVector<AffineMap> maps = {b.getMultiDimIdentityMap(r), AffineMap::get(r, 0, oe, ctx)};
  if (weights) {
    ins.push_back(weights);
    maps.push_back(AffineMap::get(r, 0, {b.getAffineDimExpr(1)}, ctx));
  }
  maps.push_back(AffineMap::get(r, 0, oe, ctx));
  maps.push_back(AffineMap::get(r, 0, oe, ctx));
  Value z = e.full(ot, e.cst(0.0, e.f64()));
  auto res =
      e.generic({ot, ot}, ins, {z, z}, maps, iters, [&](OpBuilder &nb, Location nl, ValueRange a) {
        Emit q{nb, nl};
        Type lt = a[1].getType();
        Value c = arith::IndexCastOp::create(nb, nl, lt, linalg::IndexOp::create(nb, nl, 1));
        Value hit = q.cmpi(arith::CmpIPredicate::eq, c, a[1]);
        if (ignore)
          hit = arith::AndIOp::create(nb, nl, hit,
                                      q.cmpi(arith::CmpIPredicate::ne, a[1], q.cstI(*ignore, lt)));
        Value w = weights ? q.convert(a[2], q.f64()) : q.cst(1.0, q.f64());
        Value lp = q.mul(w, q.convert(a[0], q.f64()));
        unsigned k = weights ? 3 : 2;
        Value zero = q.cst(0.0, q.f64());
        linalg::YieldOp::create(
            nb, nl,
            ValueRange{q.add(a[k], q.sel(hit, lp, zero)), q.add(a[k + 1], q.sel(hit, w, zero))});
      });
  return {res[0], res[1]};
}

LogicalResult OpLowering::lossOp(SmallVector<Value> &out) {
  bool sce = isa<SoftmaxCrossEntropyLossOp>(op);
  Value scores = op->getOperand(0), labels = op->getOperand(1);
  Value weights = op->getNumOperands() > 2 ? op->getOperand(2) : Value();
  auto red = op->getAttrOfType<ReductionAttr>("reduction");
  Reduction reduction = red ? red.getValue() : Reduction::mean;
  std::optional<int64_t> ignore;
  if (auto ig = op->getAttrOfType<IntegerAttr>("ignore_index"))
    ignore = ig.getInt();
  Value logp = scores;
  if (sce) {
    SmallVector<Value> lp;
    auto lpt = cast<RankedTensorType>(op->getResult(1).getType());
    if (failed(softmax(scores, 1, true, lpt, lp)))
      return failure();
    logp = lp[0];
  }
  LossParts p = pickLabels(e, logp, labels, weights, ignore);
  RankedTensorType rt = resultType(0);
  if (reduction == Reduction::none) {
    out.push_back(e.map1(rt, {p.picked}, [](Emit &q, ValueRange a) { return q.neg(a[0]); }, false));
  } else {
    auto pt = rtt(p.picked);
    SmallVector<int64_t> all;
    for (int64_t i = 0; i < pt.getRank(); ++i)
      all.push_back(i);
    Value s = e.reduce(p.picked, all, false, e.f64());
    if (reduction == Reduction::sum) {
      out.push_back(e.map1(rt, {s}, [](Emit &q, ValueRange a) { return q.neg(a[0]); }, false));
    } else {
      Value ws = e.reduce(p.weight, all, false, e.f64());
      out.push_back(e.map1(
          rt, {s, ws}, [](Emit &q, ValueRange a) { return q.neg(q.div(a[0], a[1])); }, false));
    }
  }
  if (sce)
    out.push_back(logp);
  return success();
}

LogicalResult OpLowering::lossGrad(SmallVector<Value> &out) {
  bool sce = isa<SoftmaxCrossEntropyLossGradOp>(op);
  // (log_prob | input, labels, [weights], dloss)
  Value in = op->getOperand(0), labels = op->getOperand(1);
  bool hasW = op->getNumOperands() == 4;
  Value weights = hasW ? op->getOperand(2) : Value();
  Value dloss = op->getOperand(hasW ? 3 : 2);
  auto red = op->getAttrOfType<ReductionAttr>("reduction");
  Reduction reduction = red ? red.getValue() : Reduction::mean;
  std::optional<int64_t> ignore;
  if (auto ig = op->getAttrOfType<IntegerAttr>("ignore_index"))
    ignore = ig.getInt();
  auto it = rtt(in);
  int64_t r = it.getRank();
  // The divisor of the mean: the summed weights of the labels that count.
  Value denom;
  if (reduction == Reduction::mean) {
    LossParts p = pickLabels(e, in, labels, weights, ignore);
    SmallVector<int64_t> all;
    for (int64_t i = 0; i < r - 1; ++i)
      all.push_back(i);
    denom = e.reduce(p.weight, all, false, e.f64());
  }
  MLIRContext *ctx = b.getContext();
  SmallVector<AffineExpr> le;
  for (int64_t i = 0; i < r; ++i)
    if (i != 1)
      le.push_back(b.getAffineDimExpr(i));
  SmallVector<Value> ins = {in, labels};
  SmallVector<AffineMap> maps = {b.getMultiDimIdentityMap(r), AffineMap::get(r, 0, le, ctx)};
  if (weights) {
    ins.push_back(weights);
    maps.push_back(AffineMap::get(r, 0, {b.getAffineDimExpr(1)}, ctx));
  }
  ins.push_back(dloss);
  maps.push_back(reduction == Reduction::none ? AffineMap::get(r, 0, le, ctx)
                                              : AffineMap::get(r, 0, {}, ctx));
  if (denom) {
    ins.push_back(denom);
    maps.push_back(AffineMap::get(r, 0, {}, ctx));
  }
  RankedTensorType rt = resultType();
  maps.push_back(b.getMultiDimIdentityMap(r));
  out.push_back(e.generic(
      {rt}, ins, {e.empty(rt)}, maps, SmallVector<Iter>(r, Iter::parallel),
      [&](OpBuilder &nb, Location nl, ValueRange a) {
        Emit q{nb, nl};
        Type lt = a[1].getType();
        Value c = arith::IndexCastOp::create(nb, nl, lt, linalg::IndexOp::create(nb, nl, 1));
        Value hit = q.cmpi(arith::CmpIPredicate::eq, c, a[1]);
        Value counts = arith::ConstantIntOp::create(nb, nl, 1, 1);
        if (ignore)
          counts = q.cmpi(arith::CmpIPredicate::ne, a[1], q.cstI(*ignore, lt));
        unsigned k = 2;
        // w[label]: the weight of this row's label (the pick over classes is
        // not available per element: the weight tensor read at the label).
        Value w = q.cst(1.0, q.f64());
        if (weights) {
          Value lab = q.sel(counts, a[1], q.cstI(0, lt));
          Value li = arith::IndexCastOp::create(nb, nl, nb.getIndexType(), lab);
          w = q.convert(tensor::ExtractOp::create(nb, nl, weights, ValueRange{li}), q.f64());
          ++k;
        }
        Value g = q.convert(a[k], q.f64());
        Value v = q.convert(a[0], q.f64());
        Value one = q.cst(1.0, q.f64()), zero = q.cst(0.0, q.f64());
        // d/dscores of -w logsoftmax[label] is w (softmax - onehot); of NLL's
        // -w input[label] it is -w onehot.
        Value base =
            sce ? q.sub(q.convert(q.exp(q.convert(v, q.f32())), q.f64()), q.sel(hit, one, zero))
                : q.sel(hit, q.cst(-1.0, q.f64()), zero);
        Value d = q.mul(q.mul(base, w), g);
        if (denom)
          d = q.div(d, a[k + 1]);
        d = q.sel(counts, d, zero);
        linalg::YieldOp::create(nb, nl, q.convert(d, rt.getElementType()));
      })[0]);
  return success();
}

// inv = f32(1 / f64(scale)); every gradient times inv in f32; found_inf when
// any gradient value is inf or NaN (checked before the multiply, as PyTorch).
LogicalResult OpLowering::unscale(UnscaleAndCheckOp o, SmallVector<Value> &out) {
  auto st = RankedTensorType::get({}, e.f32());
  Value inv = e.map1(st, {o.getScale()}, [](Emit &q, ValueRange a) {
    return q.div(q.cst(1.0, q.f64()), q.convert(a[0], q.f64()));
  });
  Value flag;
  auto ft = RankedTensorType::get({}, b.getI1Type());
  for (auto [g, res] : llvm::zip(o.getGrads(), o.getUnscaled())) {
    auto rt = cast<RankedTensorType>(res.getType());
    out.push_back(e.map1(rt, {g, inv}, [](Emit &q, ValueRange a) { return q.mul(a[0], a[1]); }));
    auto gt = rtt(g);
    int64_t r = gt.getRank();
    Value init = e.full(ft, arith::ConstantIntOp::create(b, op->getLoc(), 0, 1));
    Value any = e.generic(
        {ft}, {g}, {init}, {b.getMultiDimIdentityMap(r), AffineMap::get(r, 0, {}, b.getContext())},
        SmallVector<Iter>(r, Iter::reduction), [](OpBuilder &nb, Location nl, ValueRange a) {
          Emit q{nb, nl};
          Value bad = q.isNonFinite(q.convert(a[0], q.f32()));
          linalg::YieldOp::create(nb, nl, arith::OrIOp::create(nb, nl, a[1], bad).getResult());
        })[0];
    flag = flag ? e.map1(ft, {flag, any},
                         [](Emit &q, ValueRange a) {
                           return arith::OrIOp::create(q.b, q.loc, a[0], a[1]).getResult();
                         })
                : any;
  }
  if (!flag)
    flag = e.full(ft, arith::ConstantIntOp::create(b, op->getLoc(), 0, 1));
  out.push_back(flag);
  return success();
}

// PyTorch's clip_grad_norm_: the norm in double; coef = max_norm / (norm +
// 1e-6) applied when below 1, the norm finite and the step not skipped.
LogicalResult OpLowering::clipGradNorm(ClipGradNormOp o, SmallVector<Value> &out) {
  auto d0 = RankedTensorType::get({}, e.f64());
  Value sq;
  for (Value g : o.getGrads()) {
    auto gt = rtt(g);
    Value s = e.map1(RankedTensorType::get(gt.getShape(), e.f64()), {g}, [](Emit &q, ValueRange a) {
      Value v = q.convert(a[0], q.f64());
      return q.mul(v, v);
    });
    SmallVector<int64_t> all;
    for (int64_t i = 0; i < gt.getRank(); ++i)
      all.push_back(i);
    Value part = e.reduce(s, all, false, e.f64());
    sq =
        sq ? e.map1(d0, {sq, part}, [](Emit &q, ValueRange a) { return q.add(a[0], a[1]); }) : part;
  }
  if (!sq)
    sq = e.full(d0, e.cst(0.0, e.f64()));
  float maxNorm = o.getMaxNorm().convertToFloat();
  Value norm = e.map1(d0, {sq}, [](Emit &q, ValueRange a) { return q.sqrt(a[0]); });
  auto f0 = RankedTensorType::get({}, e.f32());
  Value coef = e.map1(f0, {norm, o.getFoundInf()}, [&](Emit &q, ValueRange a) {
    Value c = q.convert(q.div(q.cst((double)maxNorm, q.f64()), q.add(a[0], q.cst(1e-6, q.f64()))),
                        q.f32());
    Value apply = arith::AndIOp::create(
        q.b, q.loc, q.cmp(P::OLT, c, q.cstF(1)),
        arith::AndIOp::create(
            q.b, q.loc,
            arith::XOrIOp::create(q.b, q.loc, a[1], arith::ConstantIntOp::create(q.b, q.loc, 1, 1)),
            q.cmp(P::OLT, math::AbsFOp::create(q.b, q.loc, a[0]),
                  q.cst(std::numeric_limits<double>::infinity(), q.f64()))));
    return q.sel(apply, c, q.cstF(1));
  });
  for (auto [g, res] : llvm::zip(o.getGrads(), o.getClipped()))
    out.push_back(e.map1(cast<RankedTensorType>(res.getType()), {g, coef},
                         [](Emit &q, ValueRange a) { return q.mul(a[0], a[1]); }));
  out.push_back(e.map1(f0, {norm}, [](Emit &, ValueRange a) { return a[0]; }));
  return success();
}

LogicalResult OpLowering::sgd(SGDUpdateOp o, SmallVector<Value> &out) {
  float lr = o.getLr().convertToFloat(), mom = o.getMomentum().convertToFloat(),
        damp = o.getDampening().convertToFloat(), wd = o.getWeightDecay().convertToFloat();
  bool nesterov = o.getNesterov();
  auto pt = rtt(o.getParam());
  SmallVector<Value> ins = {o.getParam(), o.getGrad(), o.getStep(), o.getFoundInf()};
  if (o.getMomentumBuf())
    ins.push_back(o.getMomentumBuf());
  SmallVector<Type> elts = {e.f32()};
  if (o.getMomentumBuf())
    elts.push_back(e.f32());
  auto r = e.map(pt.getShape(), elts, ins,
                 [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
                   Emit q{nb, nl};
                   Value p = a[0], d = a[1], found = a[3];
                   if (wd != 0.0f)
                     d = q.add(d, q.mul(q.cstF(wd), p));
                   Value nbuf;
                   if (mom != 0.0f) {
                     Value first =
                         q.cmpi(arith::CmpIPredicate::eq, a[2], q.cstI(0, a[2].getType()));
                     Value upd = q.add(q.mul(a[4], q.cstF(mom)), q.mul(q.cstF(1.0f - damp), d));
                     nbuf = q.sel(first, d, upd);
                     d = nesterov ? q.add(d, q.mul(q.cstF(mom), nbuf)) : nbuf;
                   }
                   Value np = q.add(p, q.mul(q.cstF(-lr), d));
                   SmallVector<Value> res = {q.sel(found, p, np)};
                   if (nbuf)
                     res.push_back(q.sel(found, a[4], nbuf));
                   return res;
                 });
  out.append(r.begin(), r.end());
  return success();
}

/// beta^t in double by squaring (t < 2^40): math.powf on f64 would need
/// libm, which IREE's CPU executables do not link.
static Value powInt(Emit &q, double beta, Value t) {
  Type i64 = t.getType();
  Value r = q.cst(1.0, q.f64()), p = q.cst(beta, q.f64());
  for (int bit = 0; bit < 40; ++bit) {
    Value set = q.cmpi(arith::CmpIPredicate::ne,
                       arith::AndIOp::create(q.b, q.loc, t, q.cstI(int64_t(1) << bit, i64)),
                       q.cstI(0, i64));
    r = q.sel(set, q.mul(r, p), r);
    p = q.mul(p, p);
  }
  return r;
}

LogicalResult OpLowering::adam(AdamUpdateOp o, SmallVector<Value> &out) {
  double lr = o.getLr().convertToFloat(), b1 = o.getBeta1().convertToFloat(),
         b2 = o.getBeta2().convertToFloat(), eps = o.getEps().convertToFloat(),
         wd = o.getWeightDecay().convertToFloat();
  bool decoupled = o.getDecoupled(), hf = o.getMode() == AdamMode::hf;
  auto pt = rtt(o.getParam());
  // The step's scalars from the step counter (0-d tensors).
  auto scal = e.map({}, {e.f32(), e.f32(), e.f32()}, {o.getStep()},
                    [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
                      Emit q{nb, nl};
                      Value t = q.add(a[0], q.cstI(1, a[0].getType()));
                      Value p1 = powInt(q, b1, t), p2 = powInt(q, b2, t);
                      Value one = q.cst(1.0, q.f64());
                      if (hf) {
                        Value ac = q.sub(q.cstF(1), q.convert(p1, q.f32()));
                        Value bc = q.sub(q.cstF(1), q.convert(p2, q.f32()));
                        Value lrc = q.mul(q.cstF((float)lr), q.div(q.sqrt(bc), ac));
                        return {lrc, q.cstF(0), q.cstF(0)};
                      }
                      Value bc1 = q.sub(one, p1), bc2 = q.sub(one, p2);
                      Value stepSize = q.convert(q.div(q.cst(lr, q.f64()), bc1), q.f32());
                      Value bc2Sqrt = q.convert(q.sqrt(bc2), q.f32());
                      return {stepSize, bc2Sqrt, q.cstF(0)};
                    });
  float w1 = 1.0f - (float)b1, w2 = 1.0f - (float)b2;
  float decay = (float)(1.0 - lr * wd);
  auto r = e.map(pt.getShape(), {e.f32(), e.f32(), e.f32()},
                 {o.getParam(), o.getGrad(), o.getExpAvg(), o.getExpAvgSq(), o.getFoundInf(),
                  scal[0], scal[1]},
                 [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
                   Emit q{nb, nl};
                   Value p = a[0], g = a[1], m = a[2], v = a[3], found = a[4];
                   Value np, nm, nv;
                   if (hf) {
                     nm = q.add(q.mul(q.cstF((float)b1), m), q.mul(q.cstF(w1), g));
                     nv = q.add(q.mul(q.cstF((float)b2), v), q.mul(q.mul(q.cstF(w2), g), g));
                     np = q.sub(p, q.div(q.mul(a[5], nm), q.add(q.sqrt(nv), q.cstF((float)eps))));
                     np = q.sub(np, q.mul(q.cstF((float)(lr * wd)), np));
                   } else {
                     if (wd != 0.0) {
                       if (decoupled)
                         p = q.mul(p, q.cstF(decay));
                       else
                         g = q.add(g, q.mul(q.cstF((float)wd), p));
                     }
                     // lerp as PyTorch (the weight < 0.5 form).
                     nm = w1 < 0.5f ? q.add(m, q.mul(q.cstF(w1), q.sub(g, m)))
                                    : q.sub(g, q.mul(q.sub(g, m), q.cstF(1.0f - w1)));
                     nv = q.add(q.mul(v, q.cstF((float)b2)), q.mul(q.mul(q.cstF(w2), g), g));
                     Value denom = q.add(q.div(q.sqrt(nv), a[6]), q.cstF((float)eps));
                     np = q.add(p, q.mul(q.neg(a[5]), q.div(nm, denom)));
                   }
                   return {q.sel(found, a[0], np), q.sel(found, m, nm), q.sel(found, v, nv)};
                 });
  out.append(r.begin(), r.end());
  return success();
}

LogicalResult OpLowering::updateScale(UpdateScaleOp o, SmallVector<Value> &out) {
  float growth = o.getGrowthFactor().convertToFloat(),
        backoff = o.getBackoffFactor().convertToFloat(),
        minScale = o.getMinScale().convertToFloat();
  int64_t interval = o.getGrowthInterval(), hyst = std::max<int64_t>(1, o.getHysteresis());
  if (minScale > 0.0f && o.getOnMinScale() == OnMinScale::error)
    return refuse("min_scale with on_min_scale = error stops the run at the floor, which a "
                  "linalg step cannot do (use on-min-scale=warn)");
  auto r = e.map({}, {e.f32(), b.getI64Type(), b.getI64Type()},
                 {o.getScale(), o.getGrowthTracker(), o.getHysteresisLeft(), o.getFoundInf()},
                 [&](OpBuilder &nb, Location nl, ValueRange a) -> SmallVector<Value> {
                   Emit q{nb, nl};
                   Type i64 = nb.getI64Type();
                   Value scale = a[0], tracker = a[1], left = a[2], found = a[3];
                   using IP = arith::CmpIPredicate;
                   // Overflow: back off unless hysteresis tolerates it.
                   Value backNow = q.cstI(hyst <= 1 ? 1 : 0, nb.getI1Type());
                   backNow =
                       arith::OrIOp::create(nb, nl, backNow, q.cmpi(IP::sle, left, q.cstI(1, i64)));
                   Value next = q.mul(scale, q.cstF(backoff));
                   next = q.sel(q.cmp(P::OLT, next, q.cstF(minScale)), q.cstF(minScale), next);
                   Value fScale = q.sel(backNow, next, scale);
                   Value fLeft = q.sel(backNow, left, q.sub(left, q.cstI(1, i64)));
                   // A clean step: grow after `interval` of them, if finite.
                   Value succ = q.add(tracker, q.cstI(1, i64));
                   Value grow = q.cmpi(IP::eq, succ, q.cstI(interval, i64));
                   Value grown = q.mul(scale, q.cstF(growth));
                   Value finite = q.cmp(P::OLT, math::AbsFOp::create(nb, nl, grown),
                                        q.cstF(std::numeric_limits<float>::infinity()));
                   Value cScale = q.sel(arith::AndIOp::create(nb, nl, grow, finite), grown, scale);
                   Value cTracker = q.sel(grow, q.cstI(0, i64), succ);
                   Value cLeft = q.sel(grow, q.cstI(hyst, i64), left);
                   return {q.sel(found, fScale, cScale), q.sel(found, q.cstI(0, i64), cTracker),
                           q.sel(found, fLeft, cLeft)};
                 });
  out.append(r.begin(), r.end());
  return success();
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

LogicalResult lowerFunction(func::FuncOp f) {
  SmallVector<Operation *> ops;
  f.walk([&](Operation *op) {
    if (isa<AMPDialect>(op->getDialect()))
      ops.push_back(op);
  });
  // max_pool_grad reads the window of the max_pool that made its indices.
  for (Operation *op : ops)
    if (auto g = dyn_cast<MaxPoolGradOp>(op))
      if (auto fwd = g.getIndices().getDefiningOp<MaxPoolOp>())
        for (NamedAttribute a : fwd->getAttrs())
          if (a.getName() != "amp.differentiates" && !g->hasAttr(a.getName()))
            g->setAttr(a.getName(), a.getValue());
  for (Operation *op : ops) {
    OpLowering l(op);
    FailureOr<SmallVector<Value>> r = l.run();
    if (failed(r))
      return failure();
    for (auto [i, res] : llvm::enumerate(op->getResults())) {
      Value v = i < r->size() ? (*r)[i] : Value();
      if (!v) {
        if (!res.use_empty())
          return op->emitOpError("amp-lower-to-linalg skipped result #") << i << " that is used";
        continue;
      }
      res.replaceAllUsesWith(v);
    }
  }
  for (Operation *op : llvm::reverse(ops))
    op->erase();
  // math.erfc (GELU's normal CDF) as MLIR's f32 polynomial: IREE's CPU
  // back-end has no erfc.
  RewritePatternSet patterns(f.getContext());
  populatePolynomialApproximateErfcPattern(patterns);
  return applyPatternsGreedily(f, std::move(patterns));
}

/// Moves the `amp.init` values of f's arguments into `@<f>_init`.
LogicalResult splitInit(ModuleOp m, func::FuncOp f) {
  SmallVector<Attribute> inits;
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> resAttrs;
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    auto init = f.getArgAttrOfType<ElementsAttr>(i, "amp.init");
    if (!init)
      continue;
    inits.push_back(init);
    types.push_back(f.getArgument(i).getType());
    SmallVector<NamedAttribute> keep;
    if (DictionaryAttr d = f.getArgAttrDict(i))
      for (NamedAttribute a : d)
        if (a.getName() != "amp.init")
          keep.push_back(a);
    keep.push_back(NamedAttribute(StringAttr::get(m.getContext(), "amp.arg"),
                                  IntegerAttr::get(IntegerType::get(m.getContext(), 64), i)));
    resAttrs.push_back(DictionaryAttr::get(m.getContext(), keep));
    f.removeArgAttr(i, StringAttr::get(m.getContext(), "amp.init"));
  }
  if (inits.empty())
    return success();
  std::string name = (f.getName() + "_init").str();
  if (m.lookupSymbol(name))
    return f.emitOpError("amp-lower-to-linalg: a symbol '") << name << "' exists already";
  OpBuilder b(m.getContext());
  b.setInsertionPointAfter(f);
  auto fn = func::FuncOp::create(b, f.getLoc(), name, b.getFunctionType({}, types));
  for (auto [i, d] : llvm::enumerate(resAttrs))
    fn.setResultAttrs(i, d);
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToStart(body);
  SmallVector<Value> vals;
  for (Attribute a : inits)
    vals.push_back(arith::ConstantOp::create(b, f.getLoc(), cast<TypedAttr>(a)));
  func::ReturnOp::create(b, f.getLoc(), vals);
  return success();
}

struct AMPLowerToLinalgPass : public amp::impl::AMPLowerToLinalgBase<AMPLowerToLinalgPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp m = getOperation();
    SmallVector<func::FuncOp> fs(m.getOps<func::FuncOp>());
    for (func::FuncOp f : fs) {
      if (failed(lowerFunction(f)))
        return signalPassFailure();
      if (stateInit && failed(splitInit(m, f)))
        return signalPassFailure();
    }
  }
};

} // namespace
