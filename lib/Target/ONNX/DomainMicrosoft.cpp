//===- DomainMicrosoft.cpp - com.microsoft: onnxruntime-training's gradient ops ---===//
//
// writes into training artifacts), mapped onto the amp dialect's own
// backward ops. Input orders follow ORT's contrib schemas.
//===----------------------------------------------------------------------===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "llvm/Support/FormatVariadic.h"

namespace onnx_import {

namespace {

/// dX of an elementwise op from (dY, X): ReluGrad, GeluGrad, FastGeluGrad.
/// ReluGrad reads the Relu's output, whose sign pattern is its input's.
LogicalResult handleUnaryGrad(NodeCtx &n, UnaryKind kind) {
  if (failed(n.allowAttrs({})))
    return failure();
  if (n.hasInput(2))
    return n.fail("the bias input (input 2) is not supported");
  auto dy = n.input(0), x = n.input(1);
  if (failed(dy) || failed(x))
    return failure();
  if (dy->getType() != x->getType())
    return n.fail("dY and X must have the same type");
  n.setOutput(0, UnaryGradOp::create(n.im.b, n.loc, *x, *dy, UnaryKindAttr::get(n.im.ctx, kind),
                                     n.im.b.getF32FloatAttr(0.0f), n.im.b.getF32FloatAttr(0.0f)));
  return success();
}

/// dX of tanh / sigmoid from (dY, Y): dY (1 - Y^2), dY Y (1 - Y).
LogicalResult handleOutputGrad(NodeCtx &n, bool tanh) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto dy = n.input(0), y = n.input(1);
  if (failed(dy) || failed(y))
    return failure();
  Elementwise e{n};
  Type elt = getElementTypeOrSelf(y->getType());
  Value one = e.cst(elt, 1.0);
  Value d = tanh ? e.sub(one, e.mul(*y, *y)) : e.mul(*y, e.sub(one, *y));
  Value r = e.mul(*dy, d);
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// SoftmaxGrad_13 / LogSoftmaxGrad_13 (dY, Y), axis default -1; the older
/// SoftmaxGrad (2-D coercion at axis, default 1) only where that is the
/// last axis.
LogicalResult handleSoftmaxGradMS(NodeCtx &n, bool log, bool v13) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto dy = n.input(0), y = n.input(1);
  auto axis = n.getInt("axis", v13 ? -1 : 1);
  if (failed(dy) || failed(y) || failed(axis))
    return failure();
  if (dy->getType() != y->getType())
    return n.fail("dY and Y must have the same type");
  int64_t rank = cast<RankedTensorType>(y->getType()).getRank();
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  if (a < 0 || a >= rank)
    return n.fail("axis " + llvm::Twine(*axis) + " is out of range for rank " + llvm::Twine(rank));
  if (!v13 && a != rank - 1)
    return n.fail("the pre-13 form normalises over the dims from axis " + llvm::Twine(a) +
                  " on together; only the last axis is supported");
  n.setOutput(0, SoftmaxGradOp::create(n.im.b, n.loc, *y, *dy, a, log));
  return success();
}

/// SoftmaxCrossEntropyLossGrad (dY, log_prob, label [, weight]).
LogicalResult handleSCELossGrad(NodeCtx &n) {
  if (failed(n.allowAttrs({"reduction", "ignore_index"})))
    return failure();
  if (n.numInputs() > 4)
    return n.fail("the bias input (input 4) is not supported");
  auto red = n.getString("reduction", std::string("mean"));
  auto dy = n.input(0), lp = n.input(1), lab = n.input(2);
  if (failed(red) || failed(dy) || failed(lp) || failed(lab))
    return failure();
  std::optional<Reduction> reduction = symbolizeReduction(*red);
  if (!reduction)
    return n.fail("unknown reduction '" + *red + "'");
  IntegerAttr ii;
  if (n.attr("ignore_index")) {
    auto v = n.getInt("ignore_index", 0);
    if (failed(v))
      return failure();
    ii = n.im.b.getI64IntegerAttr(*v);
  }
  Value w = n.optInput(3);
  if (n.hasInput(3) && !w)
    return failure();
  auto lpt = dyn_cast<RankedTensorType>(lp->getType());
  if (!lpt || lpt.getRank() < 2 || !isa<IntegerType>(getElementTypeOrSelf(lab->getType())))
    return n.fail("needs log_prob [N, C, ...] and integer labels");
  n.setOutput(0, SoftmaxCrossEntropyLossGradOp::create(n.im.b, n.loc, lpt, *lp, *lab, w, *dy,
                                                       *reduction, ii));
  return success();
}

/// ConvGrad (dY, X, W) -> dX, dW, dB with Conv's attributes.
LogicalResult handleConvGrad(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})))
    return failure();
  SmallVector<NamedAttribute> attrs;
  auto group = n.getInt("group", 1);
  if (failed(group) || failed(windowAttrs(n, attrs, false)))
    return failure();
  attrs.push_back(named(n, "group", i64(n, *group)));
  auto in = tensorInputs(n, {1, 2, 0});
  if (failed(in))
    return failure();
  return emitAll<ConvGradOp>(n, *in, attrs, 3);
}

/// MaxPoolGrad (dY, Indices): the shape of dX is the pooled input's, found
/// through the MaxPool that produced the indices.
LogicalResult handleMaxPoolGradMS(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                           "storage_order", "strides"})))
    return failure();
  auto dy = n.input(0), idx = n.input(1);
  if (failed(dy) || failed(idx))
    return failure();
  auto pool = idx->getDefiningOp<MaxPoolOp>();
  if (!pool)
    return n.fail("its indices '" + n.node.input(1) +
                  "' must be the Indices output of a MaxPool of this graph");
  if (dy->getType() != pool.getOutput().getType())
    return n.fail("dY must have the type of the MaxPool's output");
  return emitAll<MaxPoolGradOp>(n, {pool.getX(), *dy, *idx}, {}, 1);
}

/// BatchNormInternal (X, scale, B, mean, var) -> Y, running mean / var,
/// saved mean, saved inv std. The saved statistics may only feed
/// BatchNormalizationGrad, which recomputes them from X.
LogicalResult handleBatchNormInternal(NodeCtx &n) {
  if (failed(n.allowAttrs({"epsilon", "momentum", "training_mode"})))
    return failure();
  auto eps = n.getFloat("epsilon", 1e-5f), mom = n.getFloat("momentum", 0.9f);
  auto tm = n.getInt("training_mode", 1);
  if (failed(eps) || failed(mom) || failed(tm))
    return failure();
  for (int k = 3; k < 5; ++k) {
    if (!n.hasOutput(k))
      continue;
    const std::string &name = n.node.output(k);
    for (const auto &other : n.im.model.graph().node())
      for (int j = 0; j < other.input_size(); ++j)
        if (other.input(j) == name && !(other.op_type() == "BatchNormalizationGrad" &&
                                        other.domain() == "com.microsoft" && (j == 3 || j == 4)))
          return n.fail("its saved statistic '" + name + "' is read by a " + other.op_type() +
                        " node; only BatchNormalizationGrad may read it");
    for (const auto &o : n.im.model.graph().output())
      if (o.name() == name)
        return n.fail("its saved statistic '" + name + "' is a graph output (not supported)");
    n.skipOutput(k); // BatchNormalizationGrad recomputes it from X
  }
  auto in = tensorInputs(n, {0, 1, 2, 3, 4});
  if (failed(in))
    return failure();
  return emitAll<BatchNormOp>(n, *in,
                              {named(n, "epsilon", f32(n, *eps)),
                               named(n, "momentum", f32(n, *mom)),
                               named(n, "training_mode", boolean(n, *tm != 0))},
                              3);
}

/// BatchNormalizationGrad (dY, X, scale, saved mean, saved inv std).
LogicalResult handleBatchNormGradMS(NodeCtx &n) {
  if (failed(n.allowAttrs({"epsilon"})))
    return failure();
  auto eps = n.getFloat("epsilon", 1e-5f);
  auto in = tensorInputs(n, {1, 2, 0});
  if (failed(eps) || failed(in))
    return failure();
  // The statistics must be those of a batch norm of X (recomputed from X).
  if (!n.hasInput(3) || !n.hasInput(4))
    return n.fail("its saved mean and inverse std (inputs 3 and 4) are required");
  bool found = false;
  for (const auto &other : n.im.model.graph().node())
    if (other.op_type() == "BatchNormInternal" && other.output_size() > 4 &&
        other.output(3) == n.node.input(3) && other.output(4) == n.node.input(4) &&
        other.input_size() > 0 && other.input(0) == n.node.input(1)) {
      for (const auto &a : other.attribute())
        if (a.name() == "epsilon" && a.f() != *eps)
          return n.fail("its epsilon differs from the BatchNormInternal's");
      found = true;
    }
  if (!found)
    return n.fail("its saved statistics must come from a BatchNormInternal of the same X");
  return emitAll<BatchNormGradOp>(n, *in, {named(n, "epsilon", f32(n, *eps))}, 3);
}

/// LayerNormalizationGrad (dY, X, scale, mean, inv_std_dev).
LogicalResult handleLayerNormGradMS(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis", "epsilon", "stash_type"})))
    return failure();
  auto axis = n.getInt("axis", -1);
  auto stash = n.getInt("stash_type", 1);
  auto in = tensorInputs(n, {1, 2, 3, 4, 0});
  if (failed(axis) || failed(stash) || failed(in))
    return failure();
  if (*stash != 1)
    return n.fail("stash_type " + llvm::Twine(*stash) +
                  " is not supported (the statistics are f32: stash_type 1)");
  int64_t rank = cast<RankedTensorType>((*in)[0].getType()).getRank();
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  return emitAll<LayerNormGradOp>(n, *in, {named(n, "axis", i64(n, a))}, 3);
}

/// DropoutGrad (dY, mask [, ratio [, training_mode]]): dY * mask / (1 - ratio).
LogicalResult handleDropoutGrad(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  float ratio = 0.5f;
  bool training = true;
  if (failed(dropoutInputs(n, 2, ratio, training)))
    return failure();
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return n.fail("ratio must lie in [0, 1), got " + llvm::formatv("{0}", ratio).str());
  auto dy = n.input(0), mask = n.input(1);
  if (failed(dy) || failed(mask))
    return failure();
  if (!training || ratio == 0.0f) {
    n.setOutput(0, *dy);
    return success();
  }
  Elementwise e{n};
  Type elt = getElementTypeOrSelf(dy->getType());
  auto mt = cast<RankedTensorType>(mask->getType());
  Value m = CastOp::create(n.im.b, n.loc, RankedTensorType::get(mt.getShape(), elt), *mask);
  Value r = e.mul(e.mul(*dy, m), e.cst(elt, 1.0 / (1.0 - (double)ratio)));
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

/// FusedMatMul (A, B): alpha * op(A) op(B), op transposing the last two dims.
LogicalResult handleFusedMatMul(NodeCtx &n) {
  if (failed(n.allowAttrs({"alpha", "transA", "transB", "transBatchA", "transBatchB"})))
    return failure();
  auto alpha = n.getFloat("alpha", 1.0f);
  auto ta = n.getInt("transA", 0), tb = n.getInt("transB", 0);
  auto tba = n.getInt("transBatchA", 0), tbb = n.getInt("transBatchB", 0);
  if (failed(alpha) || failed(ta) || failed(tb) || failed(tba) || failed(tbb))
    return failure();
  if (*tba || *tbb)
    return n.fail("transBatchA / transBatchB are not supported");
  auto a = n.input(0), bv = n.input(1);
  if (failed(a) || failed(bv))
    return failure();
  auto tr = [&](Value v) -> FailureOr<Value> {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getRank() < 2)
      return n.fail("a transposed operand must have rank >= 2");
    SmallVector<int64_t> perm;
    for (int64_t i = 0; i < t.getRank(); ++i)
      perm.push_back(i);
    std::swap(perm[t.getRank() - 1], perm[t.getRank() - 2]);
    auto op = n.im.tryCreate<TransposeOp>(n, {v}, {named(n, "perm", ints(n, perm))}, 1);
    if (failed(op))
      return failure();
    return (*op)->getResult(0);
  };
  Value x = *a, y = *bv;
  if (*ta) {
    auto t = tr(x);
    if (failed(t))
      return failure();
    x = *t;
  }
  if (*tb) {
    auto t = tr(y);
    if (failed(t))
      return failure();
    y = *t;
  }
  auto mm = n.im.tryCreate<MatMulOp>(n, {x, y}, {}, 1);
  if (failed(mm))
    return failure();
  Value r = (*mm)->getResult(0);
  if (*alpha != 1.0f) {
    Elementwise e{n};
    r = e.mul(r, e.cst(getElementTypeOrSelf(r.getType()), *alpha));
    if (!e.ok)
      return failure();
  }
  n.setOutput(0, r);
  return success();
}

/// GatherGrad (shape, indices, dY), axis: dY summed into zeros of `shape`.
LogicalResult handleGatherGradMS(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto axis = n.getInt("axis", 0);
  auto shape = n.constInts(0, "shape");
  auto idx = n.input(1), dy = n.input(2);
  if (failed(axis) || failed(shape) || failed(idx) || failed(dy))
    return failure();
  int64_t rank = (int64_t)shape->size();
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  return emitAll<GatherGradOp>(
      n, {*idx, *dy}, {named(n, "shape", ints(n, *shape)), named(n, "axis", i64(n, a))}, 1);
}

/// InPlaceAccumulatorV2 (buffer, value [, overwrite_flag]) -> updated flag
/// [, new buffer], in functional form: the new buffer is value where the
/// flag is set, buffer + value otherwise; the flag output is true.
LogicalResult handleInPlaceAccumulatorV2(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto buf = n.input(0), val = n.input(1);
  if (failed(buf) || failed(val))
    return failure();
  if (buf->getType() != val->getType())
    return n.fail("the buffer and the value must have the same type");
  Elementwise e{n};
  Value sum = e.add(*buf, *val);
  if (!e.ok)
    return failure();
  Value out = sum;
  if (n.hasInput(2)) {
    auto flag = n.input(2);
    if (failed(flag))
      return failure();
    auto ft = dyn_cast<RankedTensorType>(flag->getType());
    if (!ft || !ft.getElementType().isInteger(1) || ft.getNumElements() != 1)
      return n.fail("overwrite_flag must be one bool");
    auto w = n.im.tryCreate<WhereOp>(n, {*flag, *val, sum}, {}, 1);
    if (failed(w))
      return failure();
    out = (*w)->getResult(0);
  }
  auto bt = RankedTensorType::get({1}, n.im.b.getI1Type());
  n.setOutput(0, arith::ConstantOp::create(n.im.b, n.loc, bt,
                                           DenseElementsAttr::get(bt, n.im.b.getBoolAttr(true))));
  n.setOutput(1, out);
  return success();
}

/// Scale (com.microsoft): input * scale, or input / scale with scale_down;
/// the scalar scale (any number type) in the input's element type.
LogicalResult handleScaleMS(NodeCtx &n) {
  if (failed(n.allowAttrs({"scale_down"})))
    return failure();
  auto down = n.getInt("scale_down", 0);
  auto x = n.input(0);
  if (failed(down) || failed(x))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float inputs are supported");
  Elementwise e{n};
  Value sv;
  auto c = n.hasInput(1) ? n.im.consts.find(n.node.input(1)) : n.im.consts.end();
  if (c != n.im.consts.end()) {
    if (c->second.numElements() != 1)
      return n.fail("the scale must be one value");
    bool isFloat = isFloatType(c->second.dtype);
    double v = isFloat ? c->second.toDouble()[0] : (double)c->second.toInt64()[0];
    sv = e.cst(elt, v);
  } else {
    auto s = n.input(1);
    if (failed(s))
      return failure();
    auto st = cast<RankedTensorType>(s->getType());
    if (st.getNumElements() != 1)
      return n.fail("the scale must be one value");
    sv = CastOp::create(n.im.b, n.loc, RankedTensorType::get(st.getShape(), elt), *s);
  }
  Value r = *down ? e.div(*x, sv) : e.mul(*x, sv);
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

} // namespace

void registerMicrosoftOps(OpRegistry &r) {
  r.on("com.microsoft.Scale", 1, handleScaleMS);
  // onnxruntime-training's gradient ops (MaxPoolGrad is in the default
  // domain there).
  r.on("MaxPoolGrad", 1, handleMaxPoolGradMS);
  r.on("com.microsoft.ReluGrad", 1, [](NodeCtx &n) { return handleUnaryGrad(n, UnaryKind::relu); });
  r.on("com.microsoft.GeluGrad", 1, [](NodeCtx &n) { return handleUnaryGrad(n, UnaryKind::gelu); });
  r.on("com.microsoft.FastGeluGrad", 1,
       [](NodeCtx &n) { return handleUnaryGrad(n, UnaryKind::gelu_tanh); });
  r.on("com.microsoft.TanhGrad", 1, [](NodeCtx &n) { return handleOutputGrad(n, true); });
  r.on("com.microsoft.SigmoidGrad", 1, [](NodeCtx &n) { return handleOutputGrad(n, false); });
  r.on("com.microsoft.SoftmaxGrad_13", 1,
       [](NodeCtx &n) { return handleSoftmaxGradMS(n, false, true); });
  r.on("com.microsoft.LogSoftmaxGrad_13", 1,
       [](NodeCtx &n) { return handleSoftmaxGradMS(n, true, true); });
  r.on("com.microsoft.SoftmaxGrad", 1,
       [](NodeCtx &n) { return handleSoftmaxGradMS(n, false, false); });
  r.on("com.microsoft.LogSoftmaxGrad", 1,
       [](NodeCtx &n) { return handleSoftmaxGradMS(n, true, false); });
  r.on("com.microsoft.SoftmaxCrossEntropyLossGrad", 1, handleSCELossGrad);
  r.on("com.microsoft.ConvGrad", 1, handleConvGrad);
  r.on("com.microsoft.BatchNormInternal", 1, handleBatchNormInternal);
  r.on("com.microsoft.BatchNormalizationGrad", 1, handleBatchNormGradMS);
  r.on("com.microsoft.LayerNormalizationGrad", 1, handleLayerNormGradMS);
  r.on("com.microsoft.DropoutGrad", 1, handleDropoutGrad, {2, 3});
  r.on("com.microsoft.FusedMatMul", 1, handleFusedMatMul);
  r.on("com.microsoft.GatherGrad", 1, handleGatherGradMS, {0});
  r.on("com.microsoft.InPlaceAccumulatorV2", 1, handleInPlaceAccumulatorV2);
}
} // namespace onnx_import
