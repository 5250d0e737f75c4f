//===- OpsNormalization.cpp - BatchNorm, LayerNorm, InstanceNorm, MVN, Softmax, Hardmax ---===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

/// An int64 constant 0, 1, ..., len - 1 laid along `axis` of a rank-`rank`
/// shape (ones elsewhere).
Value iotaAlong(NodeCtx &n, int64_t len, int64_t axis, int64_t rank) {
  SmallVector<int64_t> shape(rank, 1);
  shape[axis] = len;
  auto t = RankedTensorType::get(shape, n.im.b.getI64Type());
  SmallVector<int64_t> v(len);
  for (int64_t i = 0; i < len; ++i)
    v[i] = i;
  return arith::ConstantOp::create(n.im.b, n.loc, t,
                                   DenseElementsAttr::get(t, ArrayRef<int64_t>(v)));
}

namespace {

LogicalResult handleBatchNorm(NodeCtx &n) {
  if (failed(n.allowAttrs(
          {"epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs"})))
    return failure();
  auto eps = n.getFloat("epsilon", 1e-5f), mom = n.getFloat("momentum", 0.9f);
  auto spatial = n.getInt("spatial", 1);
  if (failed(eps) || failed(mom) || failed(spatial))
    return failure();
  if (*spatial != 1)
    return n.fail("spatial = 0 (per-activation statistics) is not supported");
  bool training;
  if (n.opset >= 14) {
    auto tm = n.getInt("training_mode", 0);
    if (failed(tm))
      return failure();
    training = *tm != 0;
  } else {
    training = n.hasOutput(1) || n.hasOutput(2);
  }
  if (n.hasOutput(3) || n.hasOutput(4))
    return n.fail("the saved_mean / saved_var outputs (opset < 14 training) "
                  "are not supported; export with opset >= 14");
  auto in = tensorInputs(n, {0, 1, 2, 3, 4});
  if (failed(in))
    return failure();
  auto op = n.im.tryCreate<BatchNormOp>(n, *in,
                                        {named(n, "epsilon", f32(n, *eps)),
                                         named(n, "momentum", f32(n, *mom)),
                                         named(n, "training_mode", boolean(n, training))},
                                        3);
  if (failed(op))
    return failure();
  for (int i = 0; i < 3; ++i)
    n.setOutput(i, (*op)->getResult(i));
  return success();
}

LogicalResult handleSoftmax(NodeCtx &n, llvm::StringRef opName) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto axis = n.getInt("axis", n.opset >= 13 ? -1 : 1);
  auto x = n.input(0);
  if (failed(axis) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t rank = xt.getRank();
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  if (n.opset >= 13 || a == rank - 1)
    return simple(n, opName, {0}, {named(n, "axis", i64(n, *axis))});
  // Before opset 13 the input is coerced to 2-D at `axis` and normalised
  // over the second dim: flatten, normalise the last dim, reshape back.
  if (!xt.hasStaticShape())
    return n.fail("opset < 13 Softmax with axis != rank - 1 needs a static "
                  "input shape");
  auto flat = n.im.tryCreate<FlattenOp>(n, {*x}, {named(n, "axis", i64(n, *axis))}, 1);
  if (failed(flat))
    return failure();
  auto sm = n.im.create(n, opName, {(*flat)->getResult(0)}, {named(n, "axis", i64(n, -1))}, 1);
  if (failed(sm))
    return failure();
  auto back = n.im.tryCreate<ReshapeOp>(n, {(*sm)->getResult(0)},
                                        {named(n, "shape", ints(n, xt.getShape()))}, 1);
  if (failed(back))
    return failure();
  n.setOutput(0, (*back)->getResult(0));
  return success();
}

LogicalResult handleLayerNorm(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis", "epsilon", "stash_type"})))
    return failure();
  auto axis = n.getInt("axis", -1);
  auto eps = n.getFloat("epsilon", 1e-5f);
  auto stash = n.getInt("stash_type", 1);
  auto x = n.input(0), s = n.input(1);
  if (failed(axis) || failed(eps) || failed(stash) || failed(x) || failed(s))
    return failure();
  SmallVector<Value> operands{*x, *s};
  if (n.hasInput(2)) {
    auto bias = n.input(2);
    if (failed(bias))
      return failure();
    operands.push_back(*bias);
  }
  auto op = n.im.tryCreate<LayerNormOp>(n, operands,
                                        {named(n, "axis", i64(n, *axis)),
                                         named(n, "epsilon", f32(n, *eps)),
                                         named(n, "stash_type", i64(n, *stash))},
                                        3);
  if (failed(op))
    return failure();
  for (int i = 0; i < 3; ++i)
    n.setOutput(i, (*op)->getResult(i));
  return success();
}

/// InstanceNormalization: layer_norm over the spatial dims (axis 2, unit
/// scale, no bias; its f32 statistics and gradient), then the per-channel
/// scale and bias, reshaped to [C, 1, ...].
LogicalResult handleInstanceNorm(NodeCtx &n) {
  if (failed(n.allowAttrs({"epsilon"})))
    return failure();
  auto eps = n.getFloat("epsilon", 1e-5f);
  auto x = n.input(0), s = n.input(1), b = n.input(2);
  if (failed(eps) || failed(x) || failed(s) || failed(b))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (xt.getRank() < 3 || !xt.hasStaticShape())
    return n.fail("the input must be [N, C, D...] with a static shape");
  int64_t c = xt.getDimSize(1);
  for (auto [v, what] : {std::make_pair(*s, "scale"), std::make_pair(*b, "B")}) {
    auto vt = cast<RankedTensorType>(v.getType());
    if (vt.getRank() != 1 || vt.getDimSize(0) != c)
      return n.fail(llvm::Twine("'") + what + "' must have shape [" + llvm::Twine(c) + "]");
  }
  auto ot = RankedTensorType::get(xt.getShape().drop_front(2), xt.getElementType());
  Value ones = arith::ConstantOp::create(
      n.im.b, n.loc, ot, DenseElementsAttr::get(ot, n.im.b.getFloatAttr(xt.getElementType(), 1.0)));
  auto ln = n.im.tryCreate<LayerNormOp>(
      n, {*x, ones}, {named(n, "axis", i64(n, 2)), named(n, "epsilon", f32(n, *eps))}, 3);
  if (failed(ln))
    return failure();
  SmallVector<int64_t> cs(xt.getRank() - 1, 1);
  cs[0] = c;
  SmallVector<Value> sb;
  for (Value v : {*s, *b}) {
    auto r = n.im.tryCreate<ReshapeOp>(n, {v}, {named(n, "shape", ints(n, cs))}, 1);
    if (failed(r))
      return failure();
    sb.push_back((*r)->getResult(0));
  }
  auto mul = n.im.tryCreate<MulOp>(n, {(*ln)->getResult(0), sb[0]}, {}, 1);
  if (failed(mul))
    return failure();
  return emitAll<AddOp>(n, {(*mul)->getResult(0), sb[1]}, {}, 1);
}

/// MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over `axes`
/// (ONNX's function body, the variance as the mean of squared deviations);
/// marked fp32.
LogicalResult handleMVN(NodeCtx &n) {
  if (failed(n.allowAttrs({"axes"})))
    return failure();
  auto axesA = n.getInts("axes");
  auto x = n.input(0);
  if (failed(axesA) || failed(x))
    return failure();
  std::vector<int64_t> axes = *axesA ? **axesA : std::vector<int64_t>{0, 2, 3};
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  ClassMark mark(n);
  Elementwise e{n};
  SmallVector<NamedAttribute> attrs{named(n, "axes", ints(n, axes)),
                                    named(n, "keepdims", boolean(n, true))};
  Value d = e.sub(*x, e.op<ReduceMeanOp>({*x}, attrs));
  Value sd = e.op<SqrtOp>({e.op<ReduceMeanOp>({e.mul(d, d)}, attrs)});
  Value y = e.div(d, e.add(sd, e.cst(elt, 1e-9)));
  if (!e.ok)
    return failure();
  mark.apply("fp32");
  n.setOutput(0, y);
  return success();
}

/// Hardmax (opset 13): 1 at the first maximum along `axis`, 0 elsewhere:
/// cast(arg_max(x) == iota). No gradient (as ONNX defines none).
LogicalResult handleHardmax(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto axis = n.getInt("axis", -1);
  auto x = n.input(0);
  if (failed(axis) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t rank = xt.getRank(), ax = *axis < 0 ? *axis + rank : *axis;
  if (ax < 0 || ax >= rank || ShapedType::isDynamic(xt.getDimSize(ax)))
    return n.fail("axis " + llvm::Twine(*axis) + " is out of range or dynamic");
  if (!isa<FloatType>(xt.getElementType()))
    return n.fail("only float tensors are supported");
  auto am = n.im.tryCreate<ArgMaxOp>(n, {*x}, {named(n, "axis", i64(n, ax))}, 1);
  if (failed(am))
    return failure();
  auto eq = n.im.tryCreate<EqualOp>(
      n, {(*am)->getResult(0), iotaAlong(n, xt.getDimSize(ax), ax, rank)}, {}, 1);
  if (failed(eq))
    return failure();
  auto c = CastOp::create(n.im.b, n.loc, xt, (*eq)->getResult(0));
  n.setOutput(0, c.getResult());
  return success();
}

} // namespace

void registerNormalizationOps(OpRegistry &r) {
  r.on("InstanceNormalization", 6, handleInstanceNorm);
  r.on("Hardmax", 13, handleHardmax);
  r.on("MeanVarianceNormalization", 9, handleMVN);
  r.on("BatchNormalization", 1, handleBatchNorm);
  r.on("Softmax", 1, [](NodeCtx &n) { return handleSoftmax(n, SoftmaxOp::getOperationName()); });
  r.on("LogSoftmax", 1,
       [](NodeCtx &n) { return handleSoftmax(n, LogSoftmaxOp::getOperationName()); });
  r.on("LayerNormalization", 17, handleLayerNorm);
}
} // namespace onnx_import
