//===- OpsShape.cpp - shape ops: Reshape, Slice, Concat, Split, Pad, Tile, ... ---===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

namespace {

LogicalResult handleReshape(NodeCtx &n) {
  if (failed(n.allowAttrs({"allowzero", "shape", "consumed_inputs"})))
    return failure();
  auto az = n.getInt("allowzero", 0);
  if (failed(az))
    return failure();
  std::vector<int64_t> shape;
  if (n.opset < 5) {
    auto s = n.getInts("shape");
    if (failed(s))
      return failure();
    if (!*s)
      return n.fail("attribute 'shape' is required");
    shape = **s;
  } else {
    auto s = n.constInts(1, "shape");
    if (failed(s))
      return failure();
    shape = *s;
  }
  return simple<ReshapeOp>(
      n, {0}, {named(n, "shape", ints(n, shape)), named(n, "allowzero", boolean(n, *az != 0))});
}

LogicalResult handleSlice(NodeCtx &n) {
  if (failed(n.allowAttrs({"starts", "ends", "axes"})))
    return failure();
  std::vector<int64_t> starts, ends;
  std::optional<std::vector<int64_t>> axes, steps;
  if (n.opset < 10) {
    auto s = n.getInts("starts"), e = n.getInts("ends"), a = n.getInts("axes");
    if (failed(s) || failed(e) || failed(a))
      return failure();
    if (!*s || !*e)
      return n.fail("attributes 'starts' and 'ends' are required");
    starts = **s;
    ends = **e;
    axes = *a;
  } else {
    auto s = n.constInts(1, "starts"), e = n.constInts(2, "ends");
    if (failed(s) || failed(e))
      return failure();
    starts = *s;
    ends = *e;
    if (n.hasInput(3)) {
      auto a = n.constInts(3, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
    if (n.hasInput(4)) {
      auto st = n.constInts(4, "steps");
      if (failed(st))
        return failure();
      steps = *st;
    }
  }
  SmallVector<NamedAttribute> attrs{named(n, "starts", ints(n, starts)),
                                    named(n, "ends", ints(n, ends))};
  if (axes)
    attrs.push_back(named(n, "axes", ints(n, *axes)));
  if (steps)
    attrs.push_back(named(n, "steps", ints(n, *steps)));
  return simple<SliceOp>(n, {0}, attrs);
}

LogicalResult handleSqueeze(NodeCtx &n, bool unsqueeze) {
  if (failed(n.allowAttrs({"axes"})))
    return failure();
  auto axes = axesOf(n, 13);
  if (failed(axes))
    return failure();
  SmallVector<NamedAttribute> attrs;
  if (*axes)
    attrs.push_back(named(n, "axes", ints(n, **axes)));
  else if (unsqueeze)
    return n.fail("'axes' is required");
  return simple(n, unsqueeze ? UnsqueezeOp::getOperationName() : SqueezeOp::getOperationName(), {0},
                attrs);
}

/// Shape of a statically shaped value, folded to a constant.
LogicalResult handleShape(NodeCtx &n) {
  if (failed(n.allowAttrs({"start", "end"})))
    return failure();
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto t = cast<RankedTensorType>(x->getType());
  int64_t r = t.getRank();
  auto start = n.getInt("start", 0), end = n.getInt("end", r);
  if (failed(start) || failed(end))
    return failure();
  int64_t s = std::clamp<int64_t>(*start < 0 ? *start + r : *start, 0, r);
  int64_t e = std::clamp<int64_t>(*end < 0 ? *end + r : *end, 0, r);
  std::vector<int64_t> dims;
  for (int64_t i = s; i < e; ++i) {
    if (t.isDynamicDim(i))
      return n.fail("the shape of '" + n.node.input(0) + "' (" + llvm::Twine(i) +
                    "-th dim) is only known at run time; shapes computed at "
                    "run time are not supported (export with static shapes)");
    dims.push_back(t.getDimSize(i));
  }
  n.setConstOutput(0, makeInt64({(int64_t)dims.size()}, dims));
  return success();
}

/// Size: the element count of a statically shaped input, a constant.
LogicalResult handleSize(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto t = cast<RankedTensorType>(x->getType());
  if (!t.hasStaticShape())
    return n.fail("the size of '" + n.node.input(0) +
                  "' is only known at run time; sizes computed at run time are not "
                  "supported (export with static shapes)");
  n.setConstOutput(0, makeInt64({}, {t.getNumElements()}));
  return success();
}

/// Split: slices along `axis`; the sizes from `split` (an input since opset
/// 13, an attribute before), else equal parts, one per output (opset 18's
/// `num_outputs`: parts of ceil(dim / num_outputs), the last one smaller;
/// a part may be empty).
LogicalResult handleSplit(NodeCtx &n) {
  SmallVector<llvm::StringRef> allowed{"axis"};
  if (n.opset < 13)
    allowed.push_back("split");
  if (n.opset >= 18)
    allowed.push_back("num_outputs");
  if (failed(n.allowAttrs(allowed)))
    return failure();
  auto x = n.input(0);
  auto axis = n.getInt("axis", 0);
  if (failed(x) || failed(axis))
    return failure();
  auto type = cast<RankedTensorType>(x->getType());
  int64_t rank = type.getRank(), ax = *axis < 0 ? *axis + rank : *axis;
  if (ax < 0 || ax >= rank)
    return n.fail("axis " + llvm::Twine(*axis) + " is out of range for rank " + llvm::Twine(rank));
  int64_t dim = type.getDimSize(ax), outs = n.node.output_size();
  if (ShapedType::isDynamic(dim))
    return n.fail("the split axis must have a static size");
  if (outs < 1)
    return n.fail("needs at least one output");
  std::optional<std::vector<int64_t>> sizes;
  if (n.opset < 13) {
    auto s = n.getInts("split");
    if (failed(s))
      return failure();
    if (*s)
      sizes = **s;
  } else if (n.hasInput(1)) {
    auto s = n.constInts(1, "split");
    if (failed(s))
      return failure();
    sizes = *s;
  }
  if (n.opset >= 18 && n.attr("num_outputs")) {
    if (sizes)
      return n.fail("give either the 'split' input or 'num_outputs', not both");
    auto k = n.getInt("num_outputs", 0);
    if (failed(k))
      return failure();
    if (*k != outs)
      return n.fail("num_outputs is " + llvm::Twine(*k) + " but the node has " + llvm::Twine(outs) +
                    " outputs");
    int64_t part = (dim + outs - 1) / outs;
    sizes = std::vector<int64_t>(outs, part);
    sizes->back() = dim - part * (outs - 1);
    if (sizes->back() < 0)
      return n.fail("cannot split a dim of " + llvm::Twine(dim) + " into " + llvm::Twine(outs) +
                    " parts of " + llvm::Twine(part));
  } else if (!sizes) {
    if (n.opset >= 18)
      return n.fail("needs the 'split' input or the 'num_outputs' attribute");
    if (dim % outs)
      return n.fail("cannot split a dim of " + llvm::Twine(dim) + " into " + llvm::Twine(outs) +
                    " equal parts");
    sizes = std::vector<int64_t>(outs, dim / outs);
  }
  if ((int64_t)sizes->size() != outs)
    return n.fail("'split' has " + llvm::Twine(sizes->size()) + " sizes for " + llvm::Twine(outs) +
                  " outputs");
  int64_t total = 0;
  for (int64_t v : *sizes) {
    if (v < 0)
      return n.fail("a part of negative size " + llvm::Twine(v));
    total += v;
  }
  if (total != dim)
    return n.fail("the parts add up to " + llvm::Twine(total) + ", not the axis size " +
                  llvm::Twine(dim));
  int64_t start = 0;
  for (int64_t i = 0; i < outs; ++i) {
    int64_t size = (*sizes)[i];
    if (n.hasOutput(i)) {
      auto op = n.im.tryCreate<SliceOp>(n, {*x},
                                        {named(n, "starts", ints(n, {start})),
                                         named(n, "ends", ints(n, {start + size})),
                                         named(n, "axes", ints(n, {ax}))},
                                        1);
      if (failed(op))
        return failure();
      n.setOutput(i, (*op)->getResult(0));
    }
    start += size;
  }
  return success();
}

/// Trilu: x where the last two dims' (i, j) has j - i >= k (upper) or
/// j - i <= k (lower), else 0; the mask a constant, k a constant.
LogicalResult handleTrilu(NodeCtx &n) {
  if (failed(n.allowAttrs({"upper"})))
    return failure();
  auto upper = n.getInt("upper", 1);
  auto x = n.input(0);
  if (failed(upper) || failed(x))
    return failure();
  int64_t k = 0;
  if (n.hasInput(1)) {
    auto kv = n.constInts(1, "k");
    if (failed(kv))
      return failure();
    if (kv->size() != 1)
      return n.fail("'k' must be a single value");
    k = (*kv)[0];
  }
  auto xt = cast<RankedTensorType>(x->getType());
  if (xt.getRank() < 2)
    return n.fail("the input must have rank 2 or more");
  int64_t rows = xt.getDimSize(xt.getRank() - 2), cols = xt.getDimSize(xt.getRank() - 1);
  if (ShapedType::isDynamic(rows) || ShapedType::isDynamic(cols))
    return n.fail("the last two dims must have static sizes");
  std::vector<bool> mask(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      // j - i compared without overflow for any k.
      __int128 d = (__int128)j - i;
      mask[i * cols + j] = *upper ? d >= k : d <= k;
    }
  auto b = n.im.b;
  auto mt = RankedTensorType::get({rows, cols}, b.getI1Type());
  SmallVector<bool> bits(mask.begin(), mask.end());
  Value m =
      arith::ConstantOp::create(b, n.loc, mt, DenseElementsAttr::get(mt, ArrayRef<bool>(bits)));
  auto zt = RankedTensorType::get({}, xt.getElementType());
  Value zero = arith::ConstantOp::create(
      b, n.loc, zt, DenseElementsAttr::get(zt, b.getZeroAttr(xt.getElementType())));
  return emitAll<WhereOp>(n, {m, *x, zero}, {}, 1);
}

/// Tile with constant repeats: x reshaped to [1, d0, 1, d1, ...], expanded
/// to [r0, d0, r1, d1, ...] and reshaped to [r0 d0, r1 d1, ...] (the
/// expand's gradient sums the copies).
LogicalResult handleTile(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto x = n.input(0);
  auto reps = n.constInts(1, "repeats");
  if (failed(x) || failed(reps))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if ((int64_t)reps->size() != xt.getRank())
    return n.fail("'repeats' has " + llvm::Twine(reps->size()) + " values for rank " +
                  llvm::Twine(xt.getRank()));
  SmallVector<int64_t> inter, expanded, out;
  for (int64_t i = 0; i < xt.getRank(); ++i) {
    int64_t d = xt.getDimSize(i), r = (*reps)[i];
    if (ShapedType::isDynamic(d))
      return n.fail("the input must have a static shape");
    if (r < 0)
      return n.fail("a negative repeat " + llvm::Twine(r));
    if (r > 0 && d > (((int64_t)1 << 40) / r))
      return n.fail("the tiled shape is too large");
    inter.append({1, d});
    expanded.append({r, d});
    out.push_back(r * d);
  }
  if (llvm::all_of(*reps, [](int64_t r) { return r == 1; })) {
    n.setOutput(0, *x);
    return success();
  }
  auto a = n.im.tryCreate<ReshapeOp>(n, {*x}, {named(n, "shape", ints(n, inter))}, 1);
  if (failed(a))
    return failure();
  auto e =
      n.im.tryCreate<ExpandOp>(n, {(*a)->getResult(0)}, {named(n, "shape", ints(n, expanded))}, 1);
  if (failed(e))
    return failure();
  return emitAll<ReshapeOp>(n, {(*e)->getResult(0)}, {named(n, "shape", ints(n, out))}, 1);
}

/// Pad with constant pads, axis by axis: a negative pad slices, a positive
/// one concatenates a block on each side: the constant expanded
/// ("constant"), the first / last slice expanded ("edge"), the mirrored
/// slices without the border ("reflect"), or the other end ("wrap"). The
/// slices', expands' and concatenation's gradients make Pad's.
LogicalResult handlePad(NodeCtx &n) {
  if (failed(n.allowAttrs(n.opset < 11 ? llvm::ArrayRef<llvm::StringRef>{"mode", "pads", "value"}
                                       : llvm::ArrayRef<llvm::StringRef>{"mode"})))
    return failure();
  auto mode = n.getString("mode", std::string("constant"));
  auto x = n.input(0);
  if (failed(mode) || failed(x))
    return failure();
  if (*mode != "constant" && *mode != "edge" && *mode != "reflect" &&
      !(*mode == "wrap" && n.opset >= 19))
    return n.fail("mode '" + *mode + "' is not supported (constant, edge, reflect" +
                  (n.opset >= 19 ? ", wrap" : "") + ")");
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t rank = xt.getRank();
  Type elt = xt.getElementType();
  std::vector<int64_t> pads;
  double value = 0.0;
  std::optional<Attribute> valueAttr;
  std::vector<int64_t> axes;
  if (n.opset < 11) {
    auto p = n.getInts("pads");
    auto v = n.getFloat("value", 0.0f);
    if (failed(p) || failed(v))
      return failure();
    if (!*p)
      return n.fail("attribute 'pads' is required");
    pads = **p;
    value = *v;
  } else {
    auto p = n.constInts(1, "pads");
    if (failed(p))
      return failure();
    pads = *p;
    if (n.hasInput(2)) {
      auto c = n.constInput(2, "constant_value");
      if (failed(c))
        return failure();
      if ((*c)->numElements() != 1)
        return n.fail("'constant_value' must be a single value");
      if (isa<FloatType>(elt))
        value = (*c)->toDouble()[0];
      else
        valueAttr = IntegerAttr::get(elt, (*c)->toInt64()[0]);
    }
    if (n.hasInput(3)) {
      auto a = n.constInts(3, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
  }
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  if (pads.size() != 2 * axes.size())
    return n.fail("'pads' has " + llvm::Twine(pads.size()) + " values for " +
                  llvm::Twine(axes.size()) + " axes (two per axis)");
  auto b = n.im.b;
  Value r = *x;
  auto create = [&](llvm::StringRef name, ValueRange in,
                    SmallVector<NamedAttribute> attrs) -> FailureOr<Value> {
    auto op = n.im.create(n, name, in, attrs, 1);
    if (failed(op))
      return failure();
    return (*op)->getResult(0);
  };
  auto slice = [&](Value v, int64_t ax, int64_t start, int64_t end, int64_t step) {
    return create(SliceOp::getOperationName(), {v},
                  {named(n, "starts", ints(n, {start})), named(n, "ends", ints(n, {end})),
                   named(n, "axes", ints(n, {ax})), named(n, "steps", ints(n, {step}))});
  };
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t ax = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (ax < 0 || ax >= rank || seen[ax])
      return n.fail("axis " + llvm::Twine(axes[i]) + " is out of range or repeated");
    seen[ax] = true;
    int64_t before = pads[i], after = pads[i + axes.size()];
    auto shape = llvm::to_vector(cast<RankedTensorType>(r.getType()).getShape());
    int64_t dim = shape[ax];
    if (ShapedType::isDynamic(dim))
      return n.fail("a padded axis must have a static size");
    if (before < -dim || after < -dim || before + after < -dim)
      return n.fail("pads " + llvm::Twine(before) + ", " + llvm::Twine(after) +
                    " remove more than the axis' " + llvm::Twine(dim) + " elements");
    // Crops first.
    if (before < 0 || after < 0) {
      auto c = slice(r, ax, std::max<int64_t>(0, -before), dim - std::max<int64_t>(0, -after), 1);
      if (failed(c))
        return failure();
      r = *c;
      dim -= std::max<int64_t>(0, -before) + std::max<int64_t>(0, -after);
      shape[ax] = dim;
      before = std::max<int64_t>(0, before);
      after = std::max<int64_t>(0, after);
    }
    if (before == 0 && after == 0)
      continue;
    if (*mode != "constant" && dim == 0)
      return n.fail("mode '" + *mode + "' cannot pad an empty axis");
    if (*mode == "reflect" && (before > dim - 1 || after > dim - 1))
      return n.fail("mode 'reflect' pads at most " + llvm::Twine(dim - 1) + " on an axis of " +
                    llvm::Twine(dim));
    if (*mode == "wrap" && (before > dim || after > dim))
      return n.fail("mode 'wrap' pads at most the axis size " + llvm::Twine(dim));
    auto block = [&](int64_t width, bool front) -> FailureOr<Value> {
      SmallVector<int64_t> bs(shape.begin(), shape.end());
      bs[ax] = width;
      if (*mode == "constant") {
        auto st = RankedTensorType::get({}, elt);
        Attribute a = valueAttr ? *valueAttr : Attribute(b.getFloatAttr(elt, value));
        Value c = arith::ConstantOp::create(b, n.loc, st, DenseElementsAttr::get(st, a));
        return create(ExpandOp::getOperationName(), {c}, {named(n, "shape", ints(n, bs))});
      }
      if (*mode == "edge") {
        auto e = front ? slice(r, ax, 0, 1, 1) : slice(r, ax, dim - 1, dim, 1);
        if (failed(e))
          return failure();
        return create(ExpandOp::getOperationName(), {*e}, {named(n, "shape", ints(n, bs))});
      }
      if (*mode == "reflect") // x[width], ..., x[1] / x[dim-2], ..., x[dim-1-width]
        // (an end before index 0 is written -dim - 1: a plain -1 would count
        // from the back)
        return front ? slice(r, ax, width, 0, -1)
                     : slice(r, ax, dim - 2, dim - 2 - width < 0 ? -dim - 1 : dim - 2 - width, -1);
      return front ? slice(r, ax, dim - width, dim, 1) : slice(r, ax, 0, width, 1); // wrap
    };
    SmallVector<Value> parts;
    if (before) {
      auto v = block(before, true);
      if (failed(v))
        return failure();
      parts.push_back(*v);
    }
    parts.push_back(r);
    if (after) {
      auto v = block(after, false);
      if (failed(v))
        return failure();
      parts.push_back(*v);
    }
    auto c = create(ConcatOp::getOperationName(), parts, {named(n, "axis", i64(n, ax))});
    if (failed(c))
      return failure();
    r = *c;
  }
  n.setOutput(0, r);
  return success();
}

/// DepthToSpace (DCR / CRD) and SpaceToDepth: a reshape to 6-D, a
/// transpose, a reshape back (torch.nn.PixelShuffle is DepthToSpace CRD).
LogicalResult handleDepthSpace(NodeCtx &n, bool toSpace) {
  if (failed(n.allowAttrs(toSpace ? llvm::ArrayRef<llvm::StringRef>{"blocksize", "mode"}
                                  : llvm::ArrayRef<llvm::StringRef>{"blocksize"})))
    return failure();
  auto bs = n.getInt("blocksize", std::nullopt);
  auto mode = n.getString("mode", std::string("DCR"));
  auto x = n.input(0);
  if (failed(bs) || failed(mode) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (xt.getRank() != 4 || !xt.hasStaticShape())
    return n.fail("the input must be [N, C, H, W] with a static shape");
  int64_t b = *bs, N = xt.getDimSize(0), C = xt.getDimSize(1), H = xt.getDimSize(2),
          W = xt.getDimSize(3);
  if (b < 1)
    return n.fail("blocksize must be positive");
  if (*mode != "DCR" && *mode != "CRD")
    return n.fail("mode '" + *mode + "' is not supported (DCR, CRD)");
  SmallVector<int64_t> s6, perm, out;
  if (toSpace) {
    if (C % (b * b))
      return n.fail("channels " + llvm::Twine(C) + " are not a multiple of blocksize^2");
    int64_t c = C / (b * b);
    if (*mode == "DCR") {
      s6 = {N, b, b, c, H, W};
      perm = {0, 3, 4, 1, 5, 2};
    } else {
      s6 = {N, c, b, b, H, W};
      perm = {0, 1, 4, 2, 5, 3};
    }
    out = {N, c, H * b, W * b};
  } else {
    if (H % b || W % b)
      return n.fail("height and width must be multiples of blocksize");
    s6 = {N, C, H / b, b, W / b, b};
    perm = {0, 3, 5, 1, 2, 4};
    out = {N, C * b * b, H / b, W / b};
  }
  auto r = n.im.tryCreate<ReshapeOp>(n, {*x}, {named(n, "shape", ints(n, s6))}, 1);
  if (failed(r))
    return failure();
  auto t =
      n.im.tryCreate<TransposeOp>(n, {(*r)->getResult(0)}, {named(n, "perm", ints(n, perm))}, 1);
  if (failed(t))
    return failure();
  return emitAll<ReshapeOp>(n, {(*t)->getResult(0)}, {named(n, "shape", ints(n, out))}, 1);
}

/// EyeLike: a constant (ones on diagonal k) of the input's static 2-D shape.
LogicalResult handleEyeLike(NodeCtx &n) {
  if (failed(n.allowAttrs({"dtype", "k"})))
    return failure();
  auto k = n.getInt("k", 0);
  auto x = n.input(0);
  if (failed(k) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (xt.getRank() != 2 || !xt.hasStaticShape())
    return n.fail("the input must be 2-D with a static shape");
  Type elt = xt.getElementType();
  if (failed(dtypeAttr(n, elt)))
    return failure();
  auto rt = RankedTensorType::get(xt.getShape(), elt);
  SmallVector<Attribute> vals;
  for (int64_t i = 0; i < xt.getDimSize(0); ++i)
    for (int64_t j = 0; j < xt.getDimSize(1); ++j) {
      bool on = j - i == *k;
      vals.push_back(isa<FloatType>(elt) ? Attribute(n.im.b.getFloatAttr(elt, on ? 1.0 : 0.0))
                                         : Attribute(n.im.b.getIntegerAttr(elt, on ? 1 : 0)));
    }
  n.setOutput(0, arith::ConstantOp::create(n.im.b, n.loc, rt, DenseElementsAttr::get(rt, vals)));
  return success();
}

} // namespace

void registerShapeOps(OpRegistry &r) {
  r.on("Split", 1, handleSplit, {1});
  r.on("Trilu", 14, handleTrilu, {1});
  r.on("Tile", 6, handleTile, {1});
  r.on("Pad", 2, handlePad, {1, 2, 3});
  r.on("DepthToSpace", 1, [](NodeCtx &n) { return handleDepthSpace(n, true); });
  r.on("SpaceToDepth", 1, [](NodeCtx &n) { return handleDepthSpace(n, false); });
  r.on("EyeLike", 9, handleEyeLike);
  r.on("Flatten", 1, [](NodeCtx &n) {
    if (failed(n.allowAttrs({"axis"})))
      return failure();
    auto axis = n.getInt("axis", 1);
    if (failed(axis))
      return failure();
    return simple<FlattenOp>(n, {0}, {named(n, "axis", i64(n, *axis))});
  });
  r.on("Reshape", 1, handleReshape, {1});
  r.on("Transpose", 1, [](NodeCtx &n) {
    if (failed(n.allowAttrs({"perm"})))
      return failure();
    auto perm = n.getInts("perm");
    if (failed(perm))
      return failure();
    SmallVector<NamedAttribute> attrs;
    if (*perm)
      attrs.push_back(named(n, "perm", ints(n, **perm)));
    return simple<TransposeOp>(n, {0}, attrs);
  });
  r.on("Concat", 1, [](NodeCtx &n) {
    if (failed(n.allowAttrs({"axis"})))
      return failure();
    auto axis = n.getInt("axis", n.opset < 4 ? std::optional<int64_t>(1) : std::nullopt);
    if (failed(axis))
      return failure();
    SmallVector<Value> in;
    for (size_t i = 0; i < n.numInputs(); ++i) {
      auto v = n.input(i);
      if (failed(v))
        return failure();
      in.push_back(*v);
    }
    auto op = n.im.tryCreate<ConcatOp>(n, in, {named(n, "axis", i64(n, *axis))}, 1);
    if (failed(op))
      return failure();
    n.setOutput(0, (*op)->getResult(0));
    return success();
  });
  r.on("Slice", 1, handleSlice, {1, 2, 3, 4});
  r.on("Squeeze", 1, [](NodeCtx &n) { return handleSqueeze(n, false); }, {1});
  r.on("Unsqueeze", 1, [](NodeCtx &n) { return handleSqueeze(n, true); }, {1});
  r.on("Expand", 8,
       [](NodeCtx &n) {
         if (failed(n.allowAttrs({})))
           return failure();
         auto shape = n.constInts(1, "shape");
         if (failed(shape))
           return failure();
         return simple<ExpandOp>(n, {0}, {named(n, "shape", ints(n, *shape))});
       },
       {1});
  r.on("Shape", 1, handleShape);
  r.on("Size", 1, handleSize);
}
} // namespace onnx_import
