//===- OpsElementwise.cpp - element-wise ops: arithmetic, comparisons, activations, Clip, Where
//---===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

namespace {

/// Add, Sub, Mul, Div, Pow before opset 7: no numpy broadcasting, but with
/// broadcast = 1 B broadcasts to A's shape with its dims placed from `axis`
/// (default: at the end), size-1 dims stretching; with broadcast = 0 the
/// shapes must be equal.
LogicalResult legacyBinary(NodeCtx &n, llvm::StringRef opName) {
  if (n.opset >= 7)
    return binary(n, opName);
  if (failed(n.allowAttrs({"broadcast", "axis", "consumed_inputs"})))
    return failure();
  auto bc = n.getInt("broadcast", 0);
  auto a = n.input(0), b = n.input(1);
  if (failed(bc) || failed(a) || failed(b))
    return failure();
  auto at = cast<RankedTensorType>(a->getType()), bt = cast<RankedTensorType>(b->getType());
  Value rhs = *b;
  if (*bc == 0) {
    if (at.getShape() != bt.getShape())
      return n.fail("broadcast = 0 (before opset 7) needs equal shapes, got " + typeString(at) +
                    " and " + typeString(bt));
  } else {
    int64_t ra = at.getRank(), rb = bt.getRank();
    auto ax = n.getInt("axis", ra - rb);
    if (failed(ax))
      return failure();
    int64_t axis = *ax < 0 ? *ax + ra : *ax;
    bool fits = rb <= ra && axis >= 0 && axis + rb <= ra;
    for (int64_t i = 0; fits && i < rb; ++i)
      fits = bt.getDimSize(i) == 1 || bt.getDimSize(i) == at.getDimSize(axis + i);
    if (!fits)
      return n.fail("B " + typeString(bt) + " does not fit A " + typeString(at) + " from axis " +
                    llvm::Twine(*ax));
    if (rb < ra) {
      if (!bt.hasStaticShape())
        return n.fail("needs B's static shape");
      SmallVector<int64_t> shape(axis, 1);
      llvm::append_range(shape, bt.getShape());
      shape.resize(ra, 1);
      auto r = n.im.tryCreate<ReshapeOp>(n, {rhs}, {named(n, "shape", ints(n, shape))}, 1);
      if (failed(r))
        return failure();
      rhs = (*r)->getResult(0);
    }
  }
  auto op = n.im.create(n, opName, {*a, rhs}, {}, 1);
  if (failed(op))
    return failure();
  Value y = (*op)->getResult(0);
  if (cast<RankedTensorType>(y.getType()).getShape() != at.getShape())
    return n.fail("B " + typeString(bt) + " does not broadcast to A " + typeString(at) +
                  " (one way)");
  n.setOutput(0, y);
  return success();
}

/// Sum / Max / Min: the inputs combined left to right by `opName`
/// (multidirectional broadcast); one input is itself.
LogicalResult handleVariadic(NodeCtx &n, llvm::StringRef opName) {
  if (failed(n.allowAttrs({"consumed_inputs"})))
    return failure();
  if (n.numInputs() < 1)
    return n.fail("needs at least one input");
  auto acc = n.input(0);
  if (failed(acc))
    return failure();
  Value r = *acc;
  for (size_t i = 1; i < n.numInputs(); ++i) {
    auto v = n.input(i);
    if (failed(v))
      return failure();
    auto op = n.im.create(n, opName, {r, *v}, {}, 1);
    if (failed(op))
      return failure();
    r = (*op)->getResult(0);
  }
  n.setOutput(0, r);
  return success();
}

/// Clip. Constant (non-NaN) bounds on a float tensor give amp.clip, with
/// torch.clamp's gradient for scalar bounds (none at a bound); otherwise
/// max(x, min) then min(., max), which split a tie as torch.clamp does with
/// tensor bounds. Each bound is optional (inputs
/// since opset 11, attributes before); min > max gives max everywhere, as
/// ONNX says.
LogicalResult handleClip(NodeCtx &n) {
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto elt = cast<RankedTensorType>(x->getType()).getElementType();
  if (n.opset < 11) {
    if (failed(n.allowAttrs({"min", "max", "consumed_inputs"})))
      return failure();
    if (!isa<FloatType>(elt))
      return n.fail("Clip before opset 11 takes float inputs");
  } else if (failed(n.allowAttrs({}))) {
    return failure();
  }
  // The bounds known now: (present, value), ±inf when absent.
  double inf = std::numeric_limits<double>::infinity();
  auto known = [&](size_t i, const char *what, double none) -> FailureOr<std::optional<double>> {
    if (n.opset < 11) {
      if (!n.attr(what))
        return std::optional<double>(none);
      auto f = n.getFloat(what, std::nullopt);
      if (failed(f))
        return failure();
      return std::optional<double>(*f);
    }
    if (!n.hasInput(i))
      return std::optional<double>(none);
    auto it = n.im.consts.find(n.node.input(i));
    if (it == n.im.consts.end())
      return std::optional<double>();
    if (it->second.numElements() != 1)
      return n.fail(llvm::Twine("'") + what + "' must be a single value");
    if (!isa<FloatType>(elt))
      return std::optional<double>(); // integer bounds: amp.max / amp.min
    return std::optional<double>(it->second.toDouble()[0]);
  };
  auto cl = known(1, "min", -inf), ch = known(2, "max", inf);
  if (failed(cl) || failed(ch))
    return failure();
  if (isa<FloatType>(elt) && *cl && *ch && !std::isnan(**cl) && !std::isnan(**ch))
    return simple<ClipOp>(
        n, {0}, {named(n, "min", f32(n, (float)**cl)), named(n, "max", f32(n, (float)**ch))});
  Value lo, hi;
  if (n.opset < 11) {
    Elementwise e{n};
    if (n.attr("min"))
      lo = e.cst(elt, **cl);
    if (n.attr("max"))
      hi = e.cst(elt, **ch);
    if (!e.ok)
      return failure();
  } else {
    lo = n.optInput(1);
    hi = n.optInput(2);
    for (auto [v, what] : {std::make_pair(lo, "min"), std::make_pair(hi, "max")})
      if (v && cast<RankedTensorType>(v.getType()).getNumElements() != 1)
        return n.fail(llvm::Twine("'") + what + "' must be a single value");
  }
  Value r = *x;
  for (auto [bound, opName] : {std::make_pair(lo, MaxOp::getOperationName()),
                               std::make_pair(hi, MinOp::getOperationName())}) {
    if (!bound)
      continue;
    auto op = n.im.create(n, opName, {r, bound}, {}, 1);
    if (failed(op))
      return failure();
    r = (*op)->getResult(0);
  }
  n.setOutput(0, r);
  return success();
}

/// A unary activation with float attributes (name, default), passed on
/// under the same names (`rename` maps an ONNX name to the op's).
LogicalResult
unaryWithAttrs(NodeCtx &n, llvm::StringRef opName,
               std::initializer_list<std::pair<const char *, float>> params,
               std::initializer_list<std::pair<const char *, const char *>> rename = {}) {
  SmallVector<llvm::StringRef> allowed{"consumed_inputs"};
  for (auto &p : params)
    allowed.push_back(p.first);
  if (failed(n.allowAttrs(allowed)))
    return failure();
  SmallVector<NamedAttribute> attrs;
  for (auto &[name, def] : params) {
    auto v = n.getFloat(name, def);
    if (failed(v))
      return failure();
    if (std::isnan(*v))
      return n.fail(llvm::Twine("attribute '") + name + "' is NaN");
    llvm::StringRef as = name;
    for (auto &[from, to] : rename)
      if (as == from)
        as = to;
    attrs.push_back(named(n, as, f32(n, *v)));
  }
  return simple(n, opName, {0}, attrs);
}

/// PRelu: where(x > 0, x, slope * x), slope broadcast to x (torch.prelu's
/// gradients: slope at x = 0; the slope's summed over the broadcast).
LogicalResult handlePRelu(NodeCtx &n) {
  if (failed(n.allowAttrs({"consumed_inputs"})))
    return failure();
  auto x = n.input(0), slope = n.input(1);
  if (failed(x) || failed(slope))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  Elementwise e{n};
  Value s = *slope;
  auto xt = cast<RankedTensorType>(x->getType()), st = cast<RankedTensorType>(s.getType());
  if (n.opset < 7 && st.getRank() == 1 && xt.getRank() >= 3 &&
      st.getDimSize(0) == xt.getDimSize(1) && st.getDimSize(0) != 1) {
    // Before opset 7 a slope of C values is per channel (dim 1).
    SmallVector<int64_t> shape(xt.getRank() - 1, 1);
    shape[0] = st.getDimSize(0);
    s = e.op<ReshapeOp>({s}, {named(n, "shape", ints(n, shape))});
  }
  Value neg = e.mul(s, *x);
  if (neg && neg.getType() != x->getType())
    return n.fail("the slope does not broadcast to the input's shape (unidirectionally)");
  Value r = e.op<WhereOp>({e.op<GreaterOp>({*x, e.cst(elt, 0.0)}), *x, neg});
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// IsNaN: x != x. IsInf: x == +inf or x == -inf (each side optional).
LogicalResult handleIsNaNOrInf(NodeCtx &n, bool inf) {
  if (failed(
          n.allowAttrs(inf ? llvm::ArrayRef<llvm::StringRef>{"detect_negative", "detect_positive"}
                           : llvm::ArrayRef<llvm::StringRef>{})))
    return failure();
  auto x = n.input(0);
  auto neg = n.getInt("detect_negative", 1), pos = n.getInt("detect_positive", 1);
  if (failed(x) || failed(neg) || failed(pos))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  Elementwise e{n};
  Value r;
  if (!inf) {
    auto t = RankedTensorType::get({}, n.im.b.getI1Type());
    Value one = arith::ConstantOp::create(n.im.b, n.loc, t, DenseElementsAttr::get(t, true));
    r = e.op<XorOp>({e.op<EqualOp>({*x, *x}), one});
  } else {
    double big = std::numeric_limits<double>::infinity();
    Value p = *pos ? e.op<EqualOp>({*x, e.cst(elt, big)}) : Value();
    Value m = *neg ? e.op<EqualOp>({*x, e.cst(elt, -big)}) : Value();
    if (p && m)
      r = e.op<OrOp>({p, m});
    else if (p || m)
      r = p ? p : m;
    else // neither side: all false
      r = e.op<XorOp>({e.op<EqualOp>({*x, *x}), e.op<EqualOp>({*x, *x})});
  }
  if (!e.ok || !r)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// Mean of n inputs: their sum (left to right) divided by n.
LogicalResult handleMean(NodeCtx &n) {
  if (failed(n.allowAttrs({"consumed_inputs"})))
    return failure();
  if (n.numInputs() < 1)
    return n.fail("needs at least one input");
  auto first = n.input(0);
  if (failed(first))
    return failure();
  Type elt = getElementTypeOrSelf(first->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  Elementwise e{n};
  Value r = *first;
  for (size_t i = 1; i < n.numInputs(); ++i) {
    auto v = n.input(i);
    if (failed(v))
      return failure();
    r = e.add(r, *v);
  }
  if (n.numInputs() > 1)
    r = e.div(r, e.cst(elt, (double)n.numInputs()));
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// Shrink: x + bias below -lambd, x - bias above lambd, 0 between
/// (torch's hardshrink / softshrink).
LogicalResult handleShrink(NodeCtx &n) {
  if (failed(n.allowAttrs({"bias", "lambd"})))
    return failure();
  auto bias = n.getFloat("bias", 0.0f), lambd = n.getFloat("lambd", 0.5f);
  auto x = n.input(0);
  if (failed(bias) || failed(lambd) || failed(x))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("unsupported op ai.onnx.Shrink on integers (float tensors are supported)");
  Elementwise e{n};
  auto xt = cast<RankedTensorType>(x->getType());
  Value zeros = arith::ConstantOp::create(
      n.im.b, n.loc, xt, DenseElementsAttr::get(xt, n.im.b.getFloatAttr(elt, 0.0)));
  Value hi = e.op<WhereOp>(
      {e.op<GreaterOp>({*x, e.cst(elt, *lambd)}), e.sub(*x, e.cst(elt, *bias)), zeros});
  Value y =
      e.op<WhereOp>({e.op<LessOp>({*x, e.cst(elt, -*lambd)}), e.add(*x, e.cst(elt, *bias)), hi});
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// Not: x xor true.
LogicalResult handleNot(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto t = RankedTensorType::get({}, n.im.b.getI1Type());
  Value one = arith::ConstantOp::create(n.im.b, n.loc, t, DenseElementsAttr::get(t, true));
  return emitAll<XorOp>(n, {*x, one}, {}, 1);
}

/// Neg: -x, as x * -1 (exact).
LogicalResult handleNeg(NodeCtx &n) {
  if (failed(n.allowAttrs({"consumed_inputs"})))
    return failure();
  auto x = n.input(0);
  if (failed(x))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  Elementwise e{n};
  Value r = e.mul(*x, e.cst(elt, -1.0));
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

} // namespace

namespace {

Handler legacyBinaryOp(llvm::StringRef opName) {
  return [opName](NodeCtx &n) { return legacyBinary(n, opName); };
}

} // namespace

void registerElementwiseOps(OpRegistry &r) {
  r.on("Add", 1, legacyBinaryOp(AddOp::getOperationName()));
  r.on("Sub", 1, legacyBinaryOp(SubOp::getOperationName()));
  r.on("Mul", 1, legacyBinaryOp(MulOp::getOperationName()));
  r.on("Div", 1, legacyBinaryOp(DivOp::getOperationName()));
  r.on("Pow", 1, legacyBinaryOp(PowOp::getOperationName()));
  r.on("Sqrt", 1, unaryOp<SqrtOp>());
  r.on("Exp", 1, unaryOp<ExpOp>());
  r.on("Log", 1, unaryOp<LogOp>());
  r.on("Erf", 9, unaryOp<ErfOp>());
  r.on("Tanh", 1, unaryOp<TanhOp>());
  r.on("Sigmoid", 1, unaryOp<SigmoidOp>());
  r.on("Abs", 1, unaryOp<AbsOp>());
  r.on("Reciprocal", 1, unaryOp<ReciprocalOp>());
  r.on("Softplus", 1, unaryOp<SoftplusOp>());
  r.on("Relu", 1, unaryOp<ReluOp>());
  r.on("HardSwish", 14, unaryOp<HardSwishOp>());
  r.on("Mish", 18, unaryOp<MishOp>());
  r.on("Softsign", 1, unaryOp<SoftsignOp>());
  r.on("Sin", 7, unaryOp<SinOp>());
  r.on("Cos", 7, unaryOp<CosOp>());
  r.on("Tan", 7, unaryOp<TanOp>());
  r.on("Asin", 7, unaryOp<AsinOp>());
  r.on("Acos", 7, unaryOp<AcosOp>());
  r.on("Atan", 7, unaryOp<AtanOp>());
  r.on("Sinh", 9, unaryOp<SinhOp>());
  r.on("Cosh", 9, unaryOp<CoshOp>());
  r.on("Asinh", 9, unaryOp<AsinhOp>());
  r.on("Acosh", 9, unaryOp<AcoshOp>());
  r.on("Atanh", 9, unaryOp<AtanhOp>());
  r.on("Floor", 1, unaryOp<FloorOp>());
  r.on("Ceil", 1, unaryOp<CeilOp>());
  r.on("Round", 11, unaryOp<RoundOp>());
  r.on("Sign", 9, unaryOp<SignOp>());
  r.on("Elu", 1,
       [](NodeCtx &n) { return unaryWithAttrs(n, EluOp::getOperationName(), {{"alpha", 1.0f}}); });
  r.on("Celu", 12, [](NodeCtx &n) {
    auto a = n.getFloat("alpha", 1.0f);
    if (succeeded(a) && *a == 0.0f)
      return n.fail("attribute 'alpha' must be nonzero");
    return unaryWithAttrs(n, CeluOp::getOperationName(), {{"alpha", 1.0f}});
  });
  r.on("Selu", 1, [](NodeCtx &n) {
    return unaryWithAttrs(
        n, SeluOp::getOperationName(),
        {{"alpha", 1.67326319217681884765625f}, {"gamma", 1.05070102214813232421875f}});
  });
  r.on("HardSigmoid", 1, [](NodeCtx &n) {
    return unaryWithAttrs(n, HardSigmoidOp::getOperationName(), {{"alpha", 0.2f}, {"beta", 0.5f}});
  });
  r.on("ThresholdedRelu", 10, [](NodeCtx &n) {
    return unaryWithAttrs(n, ThresholdedReluOp::getOperationName(), {{"alpha", 1.0f}});
  });
  r.on("Equal", 7, binaryOp<EqualOp>());
  r.on("Less", 7, binaryOp<LessOp>());
  r.on("LessOrEqual", 12, binaryOp<LessEqualOp>());
  r.on("Greater", 7, binaryOp<GreaterOp>());
  r.on("GreaterOrEqual", 12, binaryOp<GreaterEqualOp>());
  r.on("And", 7, binaryOp<AndOp>());
  r.on("Or", 7, binaryOp<OrOp>());
  r.on("Xor", 7, binaryOp<XorOp>());
  r.on("Not", 1, handleNot);
  r.on("PRelu", 1, handlePRelu);
  r.on("IsNaN", 9, [](NodeCtx &n) { return handleIsNaNOrInf(n, false); });
  r.on("IsInf", 10, [](NodeCtx &n) { return handleIsNaNOrInf(n, true); });
  r.on("Mean", 6, handleMean);
  r.on("Shrink", 9, handleShrink);
  r.on("Identity", 1, unaryOp<IdentityOp>());
  r.on("LeakyRelu", 1, [](NodeCtx &n) {
    if (failed(n.allowAttrs({"alpha", "consumed_inputs"})))
      return failure();
    auto alpha = n.getFloat("alpha", 0.01f);
    if (failed(alpha))
      return failure();
    return simple<LeakyReluOp>(n, {0}, {named(n, "alpha", f32(n, *alpha))});
  });
  r.on("Gelu", 20, [](NodeCtx &n) {
    if (failed(n.allowAttrs({"approximate"})))
      return failure();
    auto ap = n.getString("approximate", std::string("none"));
    if (failed(ap))
      return failure();
    auto attr = enumAttr<GeluApproximationAttr>(n, "approximate", *ap);
    if (failed(attr))
      return failure();
    return simple<GeluOp>(n, {0}, {named(n, "approximate", *attr)});
  });
  r.on("Where", 9, [](NodeCtx &n) {
    if (failed(n.allowAttrs({})))
      return failure();
    return simple<WhereOp>(n, {0, 1, 2});
  });
  // (Folded at import on integer constants: shape arithmetic.)
  r.on("Mod", 10, [](NodeCtx &n) -> LogicalResult {
    if (failed(n.allowAttrs({"fmod"})))
      return failure();
    auto fm = n.getInt("fmod", 0);
    auto a = n.input(0);
    if (failed(fm) || failed(a))
      return failure();
    if (*fm == 0 && isa<FloatType>(getElementTypeOrSelf(a->getType())))
      return n.fail("fmod = 0 on floats: ONNX requires fmod = 1 for floating-point inputs");
    return simple(n, *fm ? FModOp::getOperationName() : ModOp::getOperationName(), {0, 1});
  });
  r.on("Sum", 1, [](NodeCtx &n) { return handleVariadic(n, AddOp::getOperationName()); });
  r.on("Max", 6, [](NodeCtx &n) { return handleVariadic(n, MaxOp::getOperationName()); });
  r.on("Min", 6, [](NodeCtx &n) { return handleVariadic(n, MinOp::getOperationName()); });
  r.on("Clip", 6, handleClip, {1, 2}); // bounds: constants, never parameters
  r.on("Neg", 1, handleNeg);
}
} // namespace onnx_import
