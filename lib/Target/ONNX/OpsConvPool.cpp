//===- OpsConvPool.cpp - convolutions and pooling ---------------------------===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

/// Pooling / convolution window attributes shared by Conv and the pools.
LogicalResult windowAttrs(NodeCtx &n, SmallVector<NamedAttribute> &attrs, bool withCeil) {
  auto autoPad = n.getString("auto_pad", std::string("NOTSET"));
  auto dil = n.getInts("dilations");
  auto pads = n.getInts("pads");
  auto strides = n.getInts("strides");
  auto ks = n.getInts("kernel_shape");
  if (failed(autoPad) || failed(dil) || failed(pads) || failed(strides) || failed(ks))
    return failure();
  auto ap = enumAttr<AutoPadAttr>(n, "auto_pad", *autoPad);
  if (failed(ap))
    return failure();
  attrs.push_back(named(n, "auto_pad", *ap));
  if (*dil)
    attrs.push_back(named(n, "dilations", ints(n, **dil)));
  if (*pads)
    attrs.push_back(named(n, "pads", ints(n, **pads)));
  if (*strides)
    attrs.push_back(named(n, "strides", ints(n, **strides)));
  if (*ks)
    attrs.push_back(named(n, "kernel_shape", ints(n, **ks)));
  if (withCeil) {
    auto ceil = n.getInt("ceil_mode", 0);
    if (failed(ceil))
      return failure();
    attrs.push_back(named(n, "ceil_mode", boolean(n, *ceil != 0)));
  }
  return success();
}

namespace {

LogicalResult handleConv(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})))
    return failure();
  SmallVector<NamedAttribute> attrs;
  auto group = n.getInt("group", 1);
  if (failed(group) || failed(windowAttrs(n, attrs, false)))
    return failure();
  attrs.push_back(named(n, "group", i64(n, *group)));
  auto x = n.input(0), w = n.input(1);
  if (failed(x) || failed(w))
    return failure();
  SmallVector<Value> operands{*x, *w};
  if (n.hasInput(2)) {
    auto bias = n.input(2);
    if (failed(bias))
      return failure();
    operands.push_back(*bias);
  }
  auto op = n.im.tryCreate<ConvOp>(n, operands, attrs, 1);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  return success();
}

/// ConvTranspose with explicit pads: auto_pad and output_shape resolved as
/// the ONNX spec gives them (total padding split evenly, the odd one at the
/// end for SAME_UPPER, at the start for SAME_LOWER and for NOTSET with
/// output_shape); padding "removed" below zero at the end becomes output
/// padding, as PyTorch's output_size argument does.
LogicalResult handleConvTranspose(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                           "output_shape", "pads", "strides"})))
    return failure();
  auto autoPad = n.getString("auto_pad", std::string("NOTSET"));
  auto group = n.getInt("group", 1);
  auto dilA = n.getInts("dilations"), padA = n.getInts("pads"), strA = n.getInts("strides"),
       ksA = n.getInts("kernel_shape"), opA = n.getInts("output_padding"),
       osA = n.getInts("output_shape");
  if (failed(autoPad) || failed(group) || failed(dilA) || failed(padA) || failed(strA) ||
      failed(ksA) || failed(opA) || failed(osA))
    return failure();
  auto x = n.input(0), w = n.input(1);
  if (failed(x) || failed(w))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(x->getType());
  auto wt = dyn_cast<RankedTensorType>(w->getType());
  if (!xt || !wt || !xt.hasStaticShape() || !wt.hasStaticShape())
    return n.fail("needs static shapes of X and W");
  int64_t rank = xt.getRank(), sp = rank - 2;
  if (rank < 3 || wt.getRank() != rank)
    return n.fail("X must be [N, C, D1, ...] and W of the same rank");
  auto perDim = [&](const std::optional<std::vector<int64_t>> &a, size_t len, const char *what,
                    int64_t dflt, SmallVector<int64_t> &out) -> LogicalResult {
    if (!a) {
      out.assign(len, dflt);
      return success();
    }
    if (a->size() != len)
      return n.fail(llvm::Twine(what) + " must have " + llvm::Twine(len) + " values");
    out.assign(a->begin(), a->end());
    return success();
  };
  SmallVector<int64_t> dil, strides, kernel, outPad, pads;
  if (failed(perDim(*dilA, sp, "dilations", 1, dil)) ||
      failed(perDim(*strA, sp, "strides", 1, strides)) ||
      failed(perDim(*opA, sp, "output_padding", 0, outPad)))
    return failure();
  kernel.assign(wt.getShape().begin() + 2, wt.getShape().end());
  if (*ksA && ArrayRef<int64_t>(**ksA) != ArrayRef<int64_t>(kernel))
    return n.fail("kernel_shape does not match W's spatial dims");
  const std::string &ap = *autoPad;
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID")
    return n.fail("auto_pad '" + ap + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  std::optional<std::vector<int64_t>> outShape = *osA;
  if (outShape && outShape->size() == (size_t)rank)
    outShape = std::vector<int64_t>(outShape->begin() + 2, outShape->end());
  if (outShape && outShape->size() != (size_t)sp)
    return n.fail("output_shape must have one value per spatial dim");
  if (outShape || ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    pads.assign(2 * sp, 0);
    for (int64_t i = 0; i < sp; ++i) {
      int64_t in = xt.getDimSize(2 + i);
      int64_t target = outShape ? (*outShape)[i] : in * strides[i];
      int64_t total = strides[i] * (in - 1) + outPad[i] + (kernel[i] - 1) * dil[i] + 1 - target;
      // total // 2 rounded toward minus infinity, as the reference's Python.
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      bool lower = ap != "SAME_UPPER";
      pads[i] = lower ? total - half : half;
      pads[sp + i] = lower ? half : total - half;
      if (pads[sp + i] < 0) { // a larger output: extra rows at the end
        outPad[i] -= pads[sp + i];
        pads[sp + i] = 0;
      }
      if (pads[i] < 0)
        return n.fail("output_shape " + llvm::Twine(target) + " for spatial dim " + llvm::Twine(i) +
                      " needs padding before the first row, which is not supported");
    }
  } else if (ap == "VALID") {
    pads.assign(2 * sp, 0);
  } else if (failed(perDim(*padA, 2 * sp, "pads", 0, pads))) {
    return failure();
  }
  for (int64_t i = 0; i < sp; ++i)
    if (outPad[i] < 0 || outPad[i] >= strides[i])
      return n.fail("output padding " + llvm::Twine(outPad[i]) + " of spatial dim " +
                    llvm::Twine(i) + " must be less than its stride " + llvm::Twine(strides[i]) +
                    " (a larger one is not supported)");
  SmallVector<Value> operands{*x, *w};
  if (n.hasInput(2)) {
    auto bias = n.input(2);
    if (failed(bias))
      return failure();
    operands.push_back(*bias);
  }
  SmallVector<NamedAttribute> attrs{
      named(n, "dilations", ints(n, dil)), named(n, "group", i64(n, *group)),
      named(n, "output_padding", ints(n, outPad)), named(n, "pads", ints(n, pads)),
      named(n, "strides", ints(n, strides))};
  auto op = n.im.tryCreate<ConvTransposeOp>(n, operands, attrs, 1);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  return success();
}

LogicalResult handleMaxPool(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                           "storage_order", "strides"})))
    return failure();
  SmallVector<NamedAttribute> attrs;
  auto so = n.getInt("storage_order", 0);
  if (failed(so) || failed(windowAttrs(n, attrs, true)))
    return failure();
  if (!n.attr("kernel_shape"))
    return n.fail("attribute 'kernel_shape' is required");
  attrs.push_back(named(n, "storage_order", i64(n, *so)));
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto op = n.im.tryCreate<MaxPoolOp>(n, {*x}, attrs, 2);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  n.setOutput(1, (*op)->getResult(1));
  return success();
}

LogicalResult handleAveragePool(NodeCtx &n) {
  if (failed(n.allowAttrs({"auto_pad", "ceil_mode", "count_include_pad", "dilations",
                           "kernel_shape", "pads", "strides"})))
    return failure();
  SmallVector<NamedAttribute> attrs;
  auto cip = n.getInt("count_include_pad", 0);
  if (failed(cip) || failed(windowAttrs(n, attrs, true)))
    return failure();
  if (!n.attr("kernel_shape"))
    return n.fail("attribute 'kernel_shape' is required");
  attrs.push_back(named(n, "count_include_pad", boolean(n, *cip != 0)));
  return simple<AveragePoolOp>(n, {0}, attrs);
}

/// LRN: x * (bias + alpha * mean of x^2 over the channel window)^-beta, the
/// window's mean an AveragePool (count_include_pad) of x^2 viewed as
/// [N, 1, C, rest] with ONNX's padding (floor((size - 1) / 2) before,
/// the rest after); marked fp32 (the sum of squares and the power).
LogicalResult handleLRN(NodeCtx &n) {
  if (failed(n.allowAttrs({"alpha", "beta", "bias", "size"})))
    return failure();
  auto alpha = n.getFloat("alpha", 1e-4f), beta = n.getFloat("beta", 0.75f),
       bias = n.getFloat("bias", 1.0f);
  auto size = n.getInt("size", std::nullopt);
  auto x = n.input(0);
  if (failed(alpha) || failed(beta) || failed(bias) || failed(size) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (!isa<FloatType>(xt.getElementType()) || xt.getRank() < 3 || !xt.hasStaticShape())
    return n.fail("X must be a float [N, C, D1, ...] of static shape");
  if (*size < 1)
    return n.fail("size must be positive");
  int64_t N = xt.getDimSize(0), C = xt.getDimSize(1),
          rest = xt.getNumElements() / std::max<int64_t>(1, N * C);
  Type elt = xt.getElementType();
  ClassMark mark(n);
  Elementwise e{n};
  Value sq = e.op<ReshapeOp>({e.mul(*x, *x)}, {named(n, "shape", ints(n, {N, 1, C, rest}))});
  int64_t before = (*size - 1) / 2, after = *size - 1 - before;
  Value avg = e.op<AveragePoolOp>({sq}, {named(n, "kernel_shape", ints(n, {*size, 1})),
                                         named(n, "pads", ints(n, {before, 0, after, 0})),
                                         named(n, "count_include_pad", boolean(n, true))});
  avg = e.op<ReshapeOp>({avg}, {named(n, "shape", ints(n, xt.getShape()))});
  Value den =
      e.op<PowOp>({e.add(e.mul(avg, e.cst(elt, *alpha)), e.cst(elt, *bias)), e.cst(elt, -*beta)});
  Value y = e.mul(*x, den);
  if (!e.ok)
    return failure();
  mark.apply("fp32");
  n.setOutput(0, y);
  return success();
}

/// MaxUnpool: zeros with X written at the flat positions I names (I as
/// MaxPool's Indices: over the whole output tensor), a scatter-add.
LogicalResult handleMaxUnpool(NodeCtx &n) {
  if (failed(n.allowAttrs({"kernel_shape", "pads", "strides"})))
    return failure();
  auto ks = n.getInts("kernel_shape"), pads = n.getInts("pads"), strides = n.getInts("strides");
  auto x = n.input(0), idx = n.input(1);
  if (failed(ks) || failed(pads) || failed(strides) || failed(x) || failed(idx))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  auto it = cast<RankedTensorType>(idx->getType());
  if (!xt.hasStaticShape() || xt.getRank() < 3 || it.getShape() != xt.getShape() || !*ks)
    return n.fail("needs a static X [N, C, D...], indices of its shape and kernel_shape");
  if (!isa<FloatType>(xt.getElementType()))
    return n.fail("unsupported op ai.onnx.MaxUnpool on integers (float tensors are supported)");
  int64_t sp = xt.getRank() - 2;
  // The indices address the pooled-from shape; a larger output_shape gets
  // zeros after it (as onnxruntime).
  SmallVector<int64_t> out(xt.getShape().take_front(2));
  if ((int64_t)(**ks).size() != sp)
    return n.fail("kernel_shape must have one entry per spatial dim");
  if (*strides && (int64_t)(**strides).size() != sp)
    return n.fail("strides must have one entry per spatial dim, got " +
                  llvm::Twine((**strides).size()));
  if (*pads && (int64_t)(**pads).size() != 2 * sp)
    return n.fail("pads must have two entries per spatial dim, got " +
                  llvm::Twine((**pads).size()));
  for (int64_t i = 0; i < sp; ++i) {
    int64_t s = *strides ? (**strides)[i] : 1;
    int64_t p0 = *pads ? (**pads)[i] : 0, p1 = *pads ? (**pads)[sp + i] : 0;
    int64_t k = (**ks)[i];
    if (s < 1 || k < 1 || p0 < 0 || p1 < 0 || s > (int64_t(1) << 20) || k > (int64_t(1) << 20) ||
        p0 > (int64_t(1) << 20) || p1 > (int64_t(1) << 20))
      return n.fail("kernel_shape, strides and pads of dim " + llvm::Twine(i) +
                    " must be positive (pads >= 0) and at most 2^20, got kernel " + llvm::Twine(k) +
                    ", stride " + llvm::Twine(s) + ", pads " + llvm::Twine(p0) + " " +
                    llvm::Twine(p1));
    int64_t o = (xt.getDimSize(2 + i) - 1) * s + k - p0 - p1;
    if (o < 1)
      return n.fail("the output's dim " + llvm::Twine(2 + i) + " would be " + llvm::Twine(o) +
                    " (pads larger than the window)");
    out.push_back(o);
  }
  SmallVector<int64_t> want(out);
  if (n.hasInput(2)) {
    auto os = n.constInts(2, "output_shape");
    if (failed(os))
      return failure();
    if ((int64_t)os->size() != xt.getRank())
      return n.fail("output_shape must have X's rank");
    want.assign(os->begin(), os->end());
    for (int64_t i = 0; i < xt.getRank(); ++i)
      if (want[i] < out[i] || (i < 2 && want[i] != out[i]))
        return n.fail("output_shape " + llvm::Twine(want[i]) + " of dim " + llvm::Twine(i) +
                      " is smaller than the pooled-from " + llvm::Twine(out[i]) +
                      " (or changes N / C)");
  }
  int64_t total = 1;
  for (int64_t d : out)
    total *= d;
  Elementwise e{n};
  Value fi = e.op<ReshapeOp>({*idx}, {named(n, "shape", ints(n, {xt.getNumElements()}))});
  Value fx = e.op<ReshapeOp>({*x}, {named(n, "shape", ints(n, {xt.getNumElements()}))});
  Value y = e.op<GatherElementsGradOp>(
      {fi, fx}, {named(n, "shape", ints(n, {total})), named(n, "axis", i64(n, 0))});
  y = e.op<ReshapeOp>({y}, {named(n, "shape", ints(n, out))});
  SmallVector<int64_t> cur(out);
  for (int64_t i = 2; i < xt.getRank() && e.ok; ++i) {
    if (want[i] == cur[i])
      continue;
    SmallVector<int64_t> zs(cur);
    zs[i] = want[i] - cur[i];
    auto zt = RankedTensorType::get(zs, xt.getElementType());
    Value z = arith::ConstantOp::create(
        n.im.b, n.loc, zt,
        DenseElementsAttr::get(zt, n.im.b.getFloatAttr(xt.getElementType(), 0.0)));
    y = e.op<ConcatOp>({y, z}, {named(n, "axis", i64(n, i))});
    cur[i] = want[i];
  }
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

} // namespace

void registerConvPoolOps(OpRegistry &r) {
  r.on("GlobalMaxPool", 1, [](NodeCtx &n) -> LogicalResult {
    if (failed(n.allowAttrs({})))
      return failure();
    auto x = n.input(0);
    if (failed(x))
      return failure();
    int64_t rank = cast<RankedTensorType>(x->getType()).getRank();
    if (rank < 3)
      return n.fail("the input must be [N, C, D...]");
    SmallVector<int64_t> axes;
    for (int64_t a = 2; a < rank; ++a)
      axes.push_back(a);
    return simple<ReduceMaxOp>(
        n, {0}, {named(n, "axes", ints(n, axes)), named(n, "keepdims", boolean(n, true))});
  });
  r.on("LRN", 1, handleLRN);
  r.on("MaxUnpool", 9, handleMaxUnpool, {2});
  r.on("Conv", 1, handleConv);
  r.on("ConvTranspose", 1, handleConvTranspose);
  r.on("MaxPool", 1, handleMaxPool);
  r.on("AveragePool", 1, handleAveragePool);
  r.on("GlobalAveragePool", 1, [](NodeCtx &n) {
    if (failed(n.allowAttrs({})))
      return failure();
    return simple<GlobalAveragePoolOp>(n, {0});
  });
}
} // namespace onnx_import
