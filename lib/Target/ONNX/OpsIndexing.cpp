//===- OpsIndexing.cpp - gathers, scatters, Compress, ReverseSequence, OneHot ---===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

namespace {

/// The scatter of ScatterElements / ScatterND along `axis` of data (float,
/// static): reduction "add" is data + the scatter-add of the updates
/// (amp.gather_elements_grad); "none" takes the scattered values where an
/// index points, data elsewhere. Gradients: the scatter-add's (a gather of
/// dy) and the where's.
static Value scatterAlong(NodeCtx &n, Elementwise &e, Value data, Value indices, Value updates,
                          int64_t axis, llvm::StringRef reduction) {
  auto dt = cast<RankedTensorType>(data.getType());
  SmallVector<NamedAttribute> attrs{named(n, "shape", ints(n, dt.getShape())),
                                    named(n, "axis", i64(n, axis))};
  if (!isa<FloatType>(dt.getElementType())) {
    // Integer data (T5 / BART shift the labels into decoder inputs with an
    // int64 ScatterND): scatter each update's position (1-based, exact in
    // f32 below 2^24), then gather the integer updates at the positions
    // that were written, the data elsewhere; no arithmetic on the values.
    auto ut = cast<RankedTensorType>(updates.getType());
    int64_t count = ut.getNumElements();
    if (reduction != "none") {
      (void)n.fail("reduction '" + reduction + "' on integer data is not supported (none is)");
      e.ok = false;
      return Value();
    }
    if (count >= (int64_t(1) << 24)) {
      (void)n.fail("integer data with " + llvm::Twine(count) +
                   " updates (2^24 or more) is not supported");
      e.ok = false;
      return Value();
    }
    auto &b = n.im.b;
    auto pt = RankedTensorType::get(ut.getShape(), b.getF32Type());
    SmallVector<float> positions;
    for (int64_t i = 0; i < count; ++i)
      positions.push_back(float(i + 1));
    Value pos = arith::ConstantOp::create(b, n.loc, pt,
                                          DenseElementsAttr::get(pt, ArrayRef<float>(positions)));
    Value at = e.op<GatherElementsGradOp>({indices, pos}, attrs);
    Value hit = e.op<GreaterOp>({at, e.cst(b.getF32Type(), 0.0)});
    Value from =
        e.op<WhereOp>({hit, e.sub(at, e.cst(b.getF32Type(), 1.0)), e.cst(b.getF32Type(), 0.0)});
    if (!e.ok)
      return Value();
    from = CastOp::create(b, n.loc, RankedTensorType::get(dt.getShape(), b.getI64Type()), from)
               .getResult();
    Value flat = e.op<ReshapeOp>({updates}, {named(n, "shape", ints(n, {count}))});
    Value vals = e.op<GatherOp>({flat, from}, {named(n, "axis", i64(n, 0))});
    return e.op<WhereOp>({hit, vals, data});
  }
  Value scattered = e.op<GatherElementsGradOp>({indices, updates}, attrs);
  if (reduction == "add")
    return e.add(data, scattered);
  auto ut = cast<RankedTensorType>(updates.getType());
  auto onesT = RankedTensorType::get(ut.getShape(), ut.getElementType());
  Value ones = arith::ConstantOp::create(
      n.im.b, n.loc, onesT,
      DenseElementsAttr::get(onesT, n.im.b.getFloatAttr(ut.getElementType(), 1.0)));
  Value hits = e.op<GatherElementsGradOp>({indices, ones}, attrs);
  Value hit = e.op<GreaterOp>({hits, e.cst(ut.getElementType(), 0.0)});
  return e.op<WhereOp>({hit, scattered, data});
}

/// ScatterElements (and the deprecated Scatter): reduction none or add.
LogicalResult handleScatterElements(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis", "reduction"})))
    return failure();
  auto axis = n.getInt("axis", 0);
  auto red = n.getString("reduction", std::string("none"));
  auto data = n.input(0), idx = n.input(1), upd = n.input(2);
  if (failed(axis) || failed(red) || failed(data) || failed(idx) || failed(upd))
    return failure();
  if (*red != "none" && *red != "add")
    return n.fail("unsupported op ai.onnx." + n.node.op_type() + " with reduction '" + *red +
                  "' (none and add are supported)");
  auto dt = cast<RankedTensorType>(data->getType());
  auto it = cast<RankedTensorType>(idx->getType());
  auto ut = cast<RankedTensorType>(upd->getType());
  if (!dt.hasStaticShape() || !it.hasStaticShape() || it.getShape() != ut.getShape())
    return n.fail("needs static shapes, and updates of the indices' shape");
  int64_t rank = dt.getRank(), ax = *axis < 0 ? *axis + rank : *axis;
  if (ax < 0 || ax >= rank || it.getRank() != rank)
    return n.fail("axis " + llvm::Twine(*axis) + " out of range, or indices not of data's rank");
  for (int64_t d = 0; d < rank; ++d)
    if (d != ax && it.getDimSize(d) > dt.getDimSize(d))
      return n.fail("indices are larger than data off the axis");
  Elementwise e{n};
  Value y = scatterAlong(n, e, *data, *idx, *upd, ax, *red);
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// The row of each index tuple of GatherND / ScatterND (indices [..., k])
/// in data viewed as [d0 * ... * d(k-1), rest]: sum of the components
/// (negative ones counted from the end, each checked against its dim at
/// run time) times their strides; int64, of shape indices.shape[:-1].
static Value linearIndex(NodeCtx &n, Elementwise &e, Value indices, ArrayRef<int64_t> dataShape) {
  auto it = cast<RankedTensorType>(indices.getType());
  int64_t k = it.getDimSize(it.getRank() - 1), r = it.getRank();
  SmallVector<int64_t> outer(it.getShape().drop_back());
  auto &b = n.im.b;
  Value idx = indices;
  if (!it.getElementType().isInteger(64))
    idx = CastOp::create(b, n.loc, RankedTensorType::get(it.getShape(), b.getI64Type()), idx)
              .getResult();
  Value lin;
  int64_t stride = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    Value comp =
        e.op<SliceOp>({idx}, {named(n, "starts", ints(n, {j})), named(n, "ends", ints(n, {j + 1})),
                              named(n, "axes", ints(n, {r - 1}))});
    comp = e.op<ReshapeOp>({comp}, {named(n, "shape", ints(n, outer))});
    // stride * comp, comp counted from the end when negative, by a gather
    // from [0, stride, 2 stride, ...]: its range check names a component
    // out of range (which would otherwise land in another row).
    auto tt = RankedTensorType::get({dataShape[j]}, b.getI64Type());
    SmallVector<int64_t> steps;
    for (int64_t v = 0; v < dataShape[j]; ++v)
      steps.push_back(v * stride);
    Value table = arith::ConstantOp::create(b, n.loc, tt,
                                            DenseElementsAttr::get(tt, ArrayRef<int64_t>(steps)));
    Value term = e.op<GatherOp>({table, comp}, {named(n, "axis", i64(n, 0))});
    lin = lin ? e.add(lin, term) : term;
    stride *= dataShape[j];
  }
  return lin;
}

/// GatherND: a Gather from data with its batch dims and the k indexed dims
/// flattened into one (each index tuple's row offset by its batch's).
LogicalResult handleGatherND(NodeCtx &n) {
  if (failed(n.allowAttrs({"batch_dims"})))
    return failure();
  auto bd = n.getInt("batch_dims", 0);
  auto data = n.input(0), idx = n.input(1);
  if (failed(bd) || failed(data) || failed(idx))
    return failure();
  auto dt = cast<RankedTensorType>(data->getType());
  auto it = cast<RankedTensorType>(idx->getType());
  if (!dt.hasStaticShape() || !it.hasStaticShape() || it.getRank() < 1)
    return n.fail("needs static shapes and indices of rank >= 1");
  int64_t nb = *bd, k = it.getDimSize(it.getRank() - 1);
  if (nb < 0 || nb >= it.getRank() || nb >= dt.getRank())
    return n.fail("batch_dims " + llvm::Twine(nb) + " out of range");
  for (int64_t j = 0; j < nb; ++j)
    if (it.getDimSize(j) != dt.getDimSize(j))
      return n.fail("the batch dims of data and indices differ");
  if (k < 1 || nb + k > dt.getRank())
    return n.fail("the indices' last dim " + llvm::Twine(k) + " must lie in [1, " +
                  llvm::Twine(dt.getRank() - nb) + "]");
  Elementwise e{n};
  Value lin = linearIndex(n, e, *idx, dt.getShape().slice(nb, k));
  int64_t rows = 1, batch = 1;
  for (int64_t j = 0; j < nb + k; ++j)
    (j < nb ? batch : rows) *= dt.getDimSize(j);
  if (nb) { // + the batch's number times its rows, broadcast over the middle dims
    SmallVector<int64_t> bshape(it.getShape().begin(), it.getShape().end() - 1);
    for (int64_t j = nb; j < (int64_t)bshape.size(); ++j)
      bshape[j] = 1;
    auto bt = RankedTensorType::get(bshape, n.im.b.getI64Type());
    SmallVector<int64_t> offs;
    for (int64_t i = 0; i < batch; ++i)
      offs.push_back(i * rows);
    lin = e.add(lin, arith::ConstantOp::create(
                         n.im.b, n.loc, bt, DenseElementsAttr::get(bt, ArrayRef<int64_t>(offs))));
    rows *= batch;
  }
  SmallVector<int64_t> flat{rows};
  llvm::append_range(flat, dt.getShape().drop_front(nb + k));
  Value d2 = e.op<ReshapeOp>({*data}, {named(n, "shape", ints(n, flat))});
  Value y = e.op<GatherOp>({d2, lin}, {named(n, "axis", i64(n, 0))});
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// ScatterND (reduction none or add): ScatterElements along the rows of
/// data viewed as [d0 * ... * d(k-1), rest], each update row's index
/// broadcast over the rest.
LogicalResult handleScatterND(NodeCtx &n) {
  if (failed(n.allowAttrs({"reduction"})))
    return failure();
  auto red = n.getString("reduction", std::string("none"));
  auto data = n.input(0), idx = n.input(1), upd = n.input(2);
  if (failed(red) || failed(data) || failed(idx) || failed(upd))
    return failure();
  if (*red != "none" && *red != "add")
    return n.fail("unsupported op ai.onnx." + n.node.op_type() + " with reduction '" + *red +
                  "' (none and add are supported)");
  auto dt = cast<RankedTensorType>(data->getType());
  auto it = cast<RankedTensorType>(idx->getType());
  auto ut = cast<RankedTensorType>(upd->getType());
  if (!dt.hasStaticShape() || !it.hasStaticShape() || !ut.hasStaticShape() || it.getRank() < 1)
    return n.fail("needs static shapes and indices of rank >= 1");
  int64_t k = it.getDimSize(it.getRank() - 1);
  if (k < 1 || k > dt.getRank())
    return n.fail("the indices' last dim " + llvm::Twine(k) + " must lie in [1, " +
                  llvm::Twine(dt.getRank()) + "]");
  SmallVector<int64_t> want(it.getShape().drop_back());
  llvm::append_range(want, dt.getShape().drop_front(k));
  if (ut.getShape() != ArrayRef<int64_t>(want))
    return n.fail("updates must have the shape indices.shape[:-1] + data.shape[k:]");
  int64_t rows = 1, rest = 1, count = 1;
  for (int64_t j = 0; j < dt.getRank(); ++j)
    (j < k ? rows : rest) *= dt.getDimSize(j);
  for (int64_t j = 0; j + 1 < it.getRank(); ++j)
    count *= it.getDimSize(j);
  Elementwise e{n};
  Value lin = linearIndex(n, e, *idx, dt.getShape());
  lin = e.op<ReshapeOp>({lin}, {named(n, "shape", ints(n, {count, 1}))});
  lin = e.op<ExpandOp>({lin}, {named(n, "shape", ints(n, {count, rest}))});
  Value d2 = e.op<ReshapeOp>({*data}, {named(n, "shape", ints(n, {rows, rest}))});
  Value u2 = e.op<ReshapeOp>({*upd}, {named(n, "shape", ints(n, {count, rest}))});
  if (!e.ok)
    return failure();
  Value y = scatterAlong(n, e, d2, lin, u2, 0, *red);
  y = e.op<ReshapeOp>({y}, {named(n, "shape", ints(n, dt.getShape()))});
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// Compress with a constant condition: a Gather of the selected positions
/// along `axis` (of the flattened input without one).
LogicalResult handleCompress(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto x = n.input(0);
  auto cond = n.constInput(1, "condition");
  if (failed(x) || failed(cond))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (!xt.hasStaticShape())
    return n.fail("needs a static input shape");
  Value in = *x;
  int64_t axis = 0, len;
  if (n.attr("axis")) {
    auto a = n.getInt("axis", std::nullopt);
    if (failed(a))
      return failure();
    axis = *a < 0 ? *a + xt.getRank() : *a;
    if (axis < 0 || axis >= xt.getRank())
      return n.fail("axis " + llvm::Twine(*a) + " is out of range");
    len = xt.getDimSize(axis);
  } else {
    len = xt.getNumElements();
    auto r = n.im.tryCreate<ReshapeOp>(n, {in}, {named(n, "shape", ints(n, {len}))}, 1);
    if (failed(r))
      return failure();
    in = (*r)->getResult(0);
  }
  auto c = (*cond)->toInt64();
  if ((int64_t)c.size() > len)
    return n.fail("condition has " + llvm::Twine(c.size()) + " entries for an axis of " +
                  llvm::Twine(len));
  SmallVector<int64_t> keep;
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i])
      keep.push_back((int64_t)i);
  auto it = RankedTensorType::get({(int64_t)keep.size()}, n.im.b.getI64Type());
  Value idx = arith::ConstantOp::create(n.im.b, n.loc, it,
                                        DenseElementsAttr::get(it, ArrayRef<int64_t>(keep)));
  return emitAll<GatherOp>(n, {in, idx}, {named(n, "axis", i64(n, axis))}, 1);
}

/// ReverseSequence with constant lengths: the batch and time axes moved to
/// the front, one row gather with each sequence's first len steps reversed,
/// moved back.
LogicalResult handleReverseSequence(NodeCtx &n) {
  if (failed(n.allowAttrs({"batch_axis", "time_axis"})))
    return failure();
  auto ba = n.getInt("batch_axis", 1), ta = n.getInt("time_axis", 0);
  auto x = n.input(0);
  auto lensT = n.constInput(1, "sequence_lens");
  if (failed(ba) || failed(ta) || failed(x) || failed(lensT))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t rank = xt.getRank();
  if (!xt.hasStaticShape() || rank < 2 || !((*ba == 0 && *ta == 1) || (*ba == 1 && *ta == 0)))
    return n.fail("needs a static input of rank >= 2 and batch / time axes 0 and 1");
  int64_t B = xt.getDimSize(*ba), T = xt.getDimSize(*ta);
  auto lens = (*lensT)->toInt64();
  if ((int64_t)lens.size() != B)
    return n.fail("sequence_lens must have one entry per batch element (" + llvm::Twine(B) + ")");
  SmallVector<int64_t> rows; // in the [B, T] order of the data's first two dims
  for (int64_t p = 0; p < xt.getDimSize(0); ++p)
    for (int64_t q = 0; q < xt.getDimSize(1); ++q) {
      int64_t b = *ba == 0 ? p : q, t = *ba == 0 ? q : p, l = lens[b];
      if (l < 0 || l > T)
        return n.fail("sequence length " + llvm::Twine(l) + " is out of range [0, " +
                      llvm::Twine(T) + "]");
      int64_t src = t < l ? l - 1 - t : t;
      rows.push_back(*ba == 0 ? b * T + src : src * B + b);
    }
  SmallVector<int64_t> flat{xt.getDimSize(0) * xt.getDimSize(1)};
  llvm::append_range(flat, xt.getShape().drop_front(2));
  Elementwise e{n};
  Value r = e.op<ReshapeOp>({*x}, {named(n, "shape", ints(n, flat))});
  auto it = RankedTensorType::get({(int64_t)rows.size()}, n.im.b.getI64Type());
  Value idx = arith::ConstantOp::create(n.im.b, n.loc, it,
                                        DenseElementsAttr::get(it, ArrayRef<int64_t>(rows)));
  Value g = e.op<GatherOp>({r, idx}, {named(n, "axis", i64(n, 0))});
  Value y = e.op<ReshapeOp>({g}, {named(n, "shape", ints(n, xt.getShape()))});
  if (!e.ok)
    return failure();
  n.setOutput(0, y);
  return success();
}

/// OneHot with a constant depth and values: where(unsqueeze(i') == iota,
/// on, off), i' = i + depth for negative i (out of range: all off); float
/// indices truncate to integers first, as ONNX's reference does.
LogicalResult handleOneHot(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis"})))
    return failure();
  auto axis = n.getInt("axis", -1);
  auto ind = n.input(0);
  auto depth = n.constInput(1, "depth");
  auto values = n.constInput(2, "values");
  if (failed(axis) || failed(ind) || failed(depth) || failed(values))
    return failure();
  auto it = cast<RankedTensorType>(ind->getType());
  if (it.getElementType().isInteger(1))
    return n.fail("indices must be numbers, not bool");
  if ((*depth)->numElements() != 1 || (*values)->numElements() != 2)
    return n.fail("'depth' must be a single value and 'values' two (off, on)");
  bool intDepth = (*depth)->dtype != onnx::TensorProto::FLOAT &&
                  (*depth)->dtype != onnx::TensorProto::DOUBLE &&
                  (*depth)->dtype != onnx::TensorProto::FLOAT16;
  // A float depth is checked before it is converted (NaN or 1e30 as an
  // int64 is undefined).
  double fd = intDepth ? 0 : (*depth)->toDouble()[0];
  if (!intDepth && !(fd >= 1 && fd < double((int64_t)1 << 24) + 1))
    return n.fail("depth " + llvm::Twine(std::to_string(fd)) + " is out of range [1, 2^24]");
  int64_t d = intDepth ? (*depth)->toInt64()[0] : (int64_t)fd;
  if (d < 1 || d > ((int64_t)1 << 24))
    return n.fail("depth " + llvm::Twine(d) + " is out of range [1, 2^24]");
  int64_t rank = it.getRank() + 1, ax = *axis < 0 ? *axis + rank : *axis;
  if (ax < 0 || ax >= rank)
    return n.fail("axis " + llvm::Twine(*axis) + " is out of range for rank " + llvm::Twine(rank));
  auto b = n.im.b;
  auto vt = RankedTensorType::get({}, b.getI64Type());
  auto i64c = [&](int64_t v) {
    return arith::ConstantOp::create(b, n.loc, vt, DenseElementsAttr::get(vt, v)).getResult();
  };
  Value i = *ind;
  if (!it.getElementType().isInteger(64))
    i = CastOp::create(b, n.loc, RankedTensorType::get(it.getShape(), b.getI64Type()), i)
            .getResult();
  Elementwise e{n};
  Value wrapped = e.op<WhereOp>({e.op<LessOp>({i, i64c(0)}), e.add(i, i64c(d)), i});
  if (!e.ok)
    return failure();
  auto un = n.im.tryCreate<UnsqueezeOp>(n, {wrapped}, {named(n, "axes", ints(n, {ax}))}, 1);
  if (failed(un))
    return failure();
  Value hot = e.op<EqualOp>({(*un)->getResult(0), iotaAlong(n, d, ax, rank)});
  // off / on in the values' element type.
  auto elt = n.im.elementType((*values)->dtype, "values");
  if (failed(elt))
    return failure();
  auto st = RankedTensorType::get({}, *elt);
  auto scalar = [&](int k) -> Value {
    Attribute a = isa<FloatType>(*elt) ? Attribute(b.getFloatAttr(*elt, (*values)->toDouble()[k]))
                                       : Attribute(IntegerAttr::get(*elt, (*values)->toInt64()[k]));
    return arith::ConstantOp::create(b, n.loc, st, DenseElementsAttr::get(st, a)).getResult();
  };
  Value r = e.op<WhereOp>({hot, scalar(1), scalar(0)});
  if (!e.ok)
    return failure();
  n.setOutput(0, r);
  return success();
}

} // namespace

void registerIndexingOps(OpRegistry &r) {
  r.on("OneHot", 11, handleOneHot, {1, 2});
  r.on("GatherElements", 11, [](NodeCtx &n) {
    if (failed(n.allowAttrs({"axis"})))
      return failure();
    auto axis = n.getInt("axis", 0);
    if (failed(axis))
      return failure();
    return simple<GatherElementsOp>(n, {0, 1}, {named(n, "axis", i64(n, *axis))});
  });
  r.on("Compress", 9, handleCompress, {1});
  r.on("ReverseSequence", 10, handleReverseSequence, {1});
  r.on("ScatterElements", 11, handleScatterElements);
  r.on("Scatter", 9, handleScatterElements);
  r.on("GatherND", 11, handleGatherND);
  r.on("ScatterND", 11, handleScatterND);
  r.on("Gather", 1, [](NodeCtx &n) {
    if (failed(n.allowAttrs({"axis"})))
      return failure();
    auto axis = n.getInt("axis", 0);
    if (failed(axis))
      return failure();
    return simple<GatherOp>(n, {0, 1}, {named(n, "axis", i64(n, *axis))});
  });
}
} // namespace onnx_import
