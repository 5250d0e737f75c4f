//===- OpsResize.cpp - Resize, Upsample, GridSample -------------------------===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

namespace {

/// Resize (nearest, linear, cubic) and Upsample, axis by axis: a Gather of
/// constant indices (nearest) or a weighted sum of Gathers (linear: 2 taps,
/// cubic: 4), the indices and weights computed here from ONNX's coordinate
/// transformation, edge taps clamped as its reference does. The gathers'
/// and products' gradients make Resize's. Linear and cubic run in fp32
/// (torch.autocast's upsample ops); nearest only copies.
/// The longest axis Resize makes (4 Mi elements: an image 4 million pixels
/// wide); its host tables are taps x this many entries.
constexpr int64_t kMaxResizedAxis = int64_t(1) << 22;

LogicalResult handleResize(NodeCtx &n, bool upsample) {
  static const llvm::StringRef kAttrs[] = {"mode",
                                           "coordinate_transformation_mode",
                                           "nearest_mode",
                                           "cubic_coeff_a",
                                           "exclude_outside",
                                           "extrapolation_value",
                                           "antialias",
                                           "axes",
                                           "keep_aspect_ratio_policy"};
  if (failed(n.allowAttrs(upsample || n.opset < 11 ? llvm::ArrayRef<llvm::StringRef>(kAttrs, 1)
                                                   : llvm::ArrayRef<llvm::StringRef>(kAttrs))))
    return failure();
  auto mode = n.getString("mode", std::string("nearest"));
  bool old = upsample || n.opset < 11;
  auto coord =
      n.getString("coordinate_transformation_mode", std::string(old ? "asymmetric" : "half_pixel"));
  auto nearest = n.getString("nearest_mode", std::string(old ? "floor" : "round_prefer_floor"));
  auto cubicA = n.getFloat("cubic_coeff_a", -0.75f);
  auto exclude = n.getInt("exclude_outside", 0);
  auto antialias = n.getInt("antialias", 0);
  auto policy = n.getString("keep_aspect_ratio_policy", std::string("stretch"));
  auto axesAttr = n.getInts("axes");
  auto x = n.input(0);
  if (failed(mode) || failed(coord) || failed(nearest) || failed(cubicA) || failed(exclude) ||
      failed(antialias) || failed(policy) || failed(axesAttr) || failed(x))
    return failure();
  if (*mode != "nearest" && *mode != "linear" && *mode != "cubic" &&
      !(upsample && *mode == "bilinear"))
    return n.fail("unsupported op ai.onnx." + n.node.op_type() + " with mode '" + *mode +
                  "' (nearest, linear, cubic)");
  bool isNearest = *mode == "nearest";
  int taps = isNearest ? 1 : (*mode == "cubic" ? 4 : 2);
  static const char *kCoords[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                  "asymmetric", "tf_half_pixel_for_nn", "half_pixel_symmetric"};
  if (llvm::find(kCoords, *coord) == std::end(kCoords))
    return n.fail("unsupported op ai.onnx.Resize with coordinate_transformation_mode '" + *coord +
                  "' (half_pixel, pytorch_half_pixel, align_corners, asymmetric, "
                  "tf_half_pixel_for_nn, half_pixel_symmetric)");
  if (*nearest != "round_prefer_floor" && *nearest != "round_prefer_ceil" && *nearest != "floor" &&
      *nearest != "ceil")
    return n.fail("nearest_mode '" + *nearest + "' is not supported");
  if (*policy != "stretch")
    return n.fail("unsupported op ai.onnx.Resize with keep_aspect_ratio_policy '" + *policy +
                  "' (stretch)");
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t rank = xt.getRank();
  if (!xt.hasStaticShape())
    return n.fail("the input must have a static shape");
  // Scales or sizes, for `axes` (all by default).
  std::vector<int64_t> axes;
  if (*axesAttr)
    for (int64_t a : **axesAttr)
      axes.push_back(a < 0 ? a + rank : a);
  else
    for (int64_t a = 0; a < rank; ++a)
      axes.push_back(a);
  for (int64_t a : axes)
    if (a < 0 || a >= rank)
      return n.fail("an axis is out of range for rank " + llvm::Twine(rank));
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  size_t scalesIn = old ? 1 : 2, sizesIn = 3;
  if (!old)
    (void)n.hasInput(1); // roi: read by tf_crop_and_resize only, refused above
  if (n.hasInput(scalesIn)) {
    auto c = n.constInput(scalesIn, "scales");
    if (failed(c))
      return failure();
    scales = (*c)->toDouble();
  }
  if (!old && n.hasInput(sizesIn)) {
    auto c = n.constInts(sizesIn, "sizes");
    if (failed(c))
      return failure();
    sizes = *c;
  }
  if (scales.empty() == sizes.empty())
    return n.fail("needs exactly one of 'scales' and 'sizes' (non-empty)");
  size_t given = scales.empty() ? sizes.size() : scales.size();
  if (given != axes.size())
    return n.fail(llvm::Twine(scales.empty() ? "'sizes'" : "'scales'") + " has " +
                  llvm::Twine(given) + " values for " + llvm::Twine(axes.size()) + " axes");
  auto b = n.im.b;
  Type elt = xt.getElementType();
  if (!isNearest && !isa<FloatType>(elt))
    return n.fail("mode '" + *mode + "' needs a float input");
  ClassMark mark(n);
  Value r = *x;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t ax = axes[i], len = xt.getDimSize(ax), out;
    double scale;
    if (!sizes.empty()) {
      out = sizes[i];
      if (out <= 0 || len == 0)
        return n.fail("a size must be positive (got " + llvm::Twine(out) + ")");
      scale = (double)out / (double)len;
    } else {
      scale = scales[i];
      if (!(scale > 0) || !std::isfinite(scale))
        return n.fail("a scale must be a positive number");
      double outD = std::floor((double)len * scale);
      if (!(outD <= double(kMaxResizedAxis)))
        return n.fail("the scale " + llvm::Twine(std::to_string(scale)) + " makes axis " +
                      llvm::Twine(ax) + " longer than 2^22 elements");
      out = (int64_t)outD;
      if (out <= 0)
        return n.fail("the scale " + llvm::Twine(std::to_string(scale)) +
                      " leaves no element on axis " + llvm::Twine(ax));
    }
    // The taps and weights below are host tables of taps x out entries:
    // the axis is bounded before they are allocated.
    if (out > kMaxResizedAxis)
      return n.fail("the resized axis " + llvm::Twine(ax) + " would have " + llvm::Twine(out) +
                    " elements, more than 2^22");
    if (*antialias && scale < 1.0 && !isNearest)
      return n.fail("unsupported op ai.onnx.Resize with antialias = 1 on a downscale");
    // Taps and weights per output index; ONNX's reference uses the
    // unrounded output length scale * len where the formulas name it.
    double outF = scale * (double)len;
    std::vector<std::vector<int64_t>> idx(taps, std::vector<int64_t>(out));
    std::vector<std::vector<double>> w(taps, std::vector<double>(out, 0.0));
    for (int64_t o = 0; o < out; ++o) {
      double xo;
      double oo = (double)o;
      if (*coord == "half_pixel")
        xo = (oo + 0.5) / scale - 0.5;
      else if (*coord == "pytorch_half_pixel") // (the reference's -0.5 for one output)
        xo = outF == 1.0 ? -0.5 : (oo + 0.5) / scale - 0.5;
      else if (*coord == "align_corners")
        xo = outF == 1.0 ? 0.0 : oo * (double)(len - 1) / (outF - 1.0);
      else if (*coord == "asymmetric")
        xo = oo / scale;
      else if (*coord == "tf_half_pixel_for_nn")
        xo = (oo + 0.5) / scale;
      else { // half_pixel_symmetric
        double adj = (double)out / outF;
        double center = (double)len / 2.0;
        xo = center * (1.0 - adj) + (oo + 0.5) / scale - 0.5;
      }
      auto clampIdx = [&](int64_t k) {
        return std::max<int64_t>(0, std::min<int64_t>(k, len - 1));
      };
      // (Clamped: the taps are clamped to the axis anyway, and a source
      // coordinate past 2^62 has no int64.)
      xo = std::max(-4.0e18, std::min(xo, 4.0e18));
      bool whole = xo == std::floor(xo);
      int64_t i0 = (int64_t)std::floor(xo);
      double ratio = whole ? 1.0 : xo - (double)i0;
      if (whole)
        i0 -= 1; // the reference's neighbours of an integer x: x - 1 and x (ratio 1)
      if (isNearest) {
        int64_t k;
        if (whole)
          k = i0 + 1;
        else if (*nearest == "floor")
          k = i0;
        else if (*nearest == "ceil")
          k = i0 + 1;
        else if (*nearest == "round_prefer_floor")
          k = ratio <= 0.5 ? i0 : i0 + 1;
        else
          k = ratio < 0.5 ? i0 : i0 + 1;
        idx[0][o] = clampIdx(k);
        w[0][o] = 1.0;
      } else if (taps == 2) {
        idx[0][o] = clampIdx(i0);
        idx[1][o] = clampIdx(i0 + 1);
        w[0][o] = 1.0 - ratio;
        w[1][o] = ratio;
      } else {
        double A = *cubicA, t = ratio, u = 1.0 - ratio;
        double c[4] = {((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
                       ((A + 2) * t - (A + 3)) * t * t + 1, ((A + 2) * u - (A + 3)) * u * u + 1,
                       ((A * (u + 1) - 5 * A) * (u + 1) + 8 * A) * (u + 1) - 4 * A};
        double sum = 0.0;
        for (int k = 0; k < 4; ++k) {
          int64_t at = i0 - 1 + k;
          if (*exclude && (at < 0 || at >= len))
            c[k] = 0.0;
          sum += c[k];
        }
        for (int k = 0; k < 4; ++k) {
          idx[k][o] = clampIdx(i0 - 1 + k);
          w[k][o] = *exclude ? c[k] / sum : c[k];
        }
      }
    }
    // An axis whose output is its input (every o reads o, weight 1): skip.
    bool identity = out == len;
    for (int64_t o = 0; identity && o < out; ++o) {
      double self = 0.0, other = 0.0;
      for (int k = 0; k < taps; ++k)
        (idx[k][o] == o ? self : other) += std::fabs(w[k][o]);
      identity = self == 1.0 && other == 0.0;
    }
    if (identity)
      continue;
    auto it = RankedTensorType::get({out}, b.getI64Type());
    SmallVector<int64_t> wshape(rank - ax, 1);
    wshape[0] = out;
    auto wt = RankedTensorType::get(wshape, elt);
    Value acc;
    for (int k = 0; k < taps; ++k) {
      if (!isNearest && llvm::all_of(w[k], [](double v) { return v == 0.0; }))
        continue;
      Value iv = arith::ConstantOp::create(b, n.loc, it,
                                           DenseElementsAttr::get(it, ArrayRef<int64_t>(idx[k])));
      auto g = n.im.tryCreate<GatherOp>(n, {r, iv}, {named(n, "axis", i64(n, ax))}, 1);
      if (failed(g))
        return failure();
      Value term = (*g)->getResult(0);
      if (!isNearest) {
        SmallVector<Attribute> wa;
        for (double v : w[k])
          wa.push_back(b.getFloatAttr(elt, v));
        Value wv = arith::ConstantOp::create(b, n.loc, wt, DenseElementsAttr::get(wt, wa));
        auto m = n.im.tryCreate<MulOp>(n, {term, wv}, {}, 1);
        if (failed(m))
          return failure();
        term = (*m)->getResult(0);
      }
      if (acc) {
        auto a = n.im.tryCreate<AddOp>(n, {acc, term}, {}, 1);
        if (failed(a))
          return failure();
        term = (*a)->getResult(0);
      }
      acc = term;
    }
    r = acc;
  }
  if (!isNearest)
    mark.apply("fp32");
  n.setOutput(0, r);
  return success();
}

/// GridSample (opset 16; 20's linear / cubic names too), 2-D.
LogicalResult handleGridSample(NodeCtx &n) {
  if (failed(n.allowAttrs({"align_corners", "mode", "padding_mode"})))
    return failure();
  auto align = n.getInt("align_corners", 0);
  auto mode = n.getString("mode", std::string(n.opset >= 20 ? "linear" : "bilinear"));
  auto pad = n.getString("padding_mode", std::string("zeros"));
  auto x = n.input(0), grid = n.input(1);
  if (failed(align) || failed(mode) || failed(pad) || failed(x) || failed(grid))
    return failure();
  std::string m = *mode == "linear" ? "bilinear" : *mode == "cubic" ? "bicubic" : *mode;
  auto modeAttr = symbolizeGridSampleMode(m);
  if (!modeAttr)
    return n.fail("unsupported op ai.onnx.GridSample with mode '" + *mode + "'");
  auto padAttr = symbolizeGridSamplePadding(*pad);
  if (!padAttr)
    return n.fail("unsupported op ai.onnx.GridSample with padding_mode '" + *pad + "'");
  if (cast<RankedTensorType>(x->getType()).getRank() != 4)
    return n.fail(
        "unsupported op ai.onnx.GridSample on a rank other than 4 (2-D sampling is supported)");
  return emitAll<GridSampleOp>(
      n, {*x, *grid},
      {named(n, "mode", GridSampleModeAttr::get(n.im.ctx, *modeAttr)),
       named(n, "padding_mode", GridSamplePaddingAttr::get(n.im.ctx, *padAttr)),
       named(n, "align_corners", boolean(n, *align != 0))},
      1);
}

} // namespace

void registerResizeOps(OpRegistry &r) {
  r.on("Resize", 10, [](NodeCtx &n) { return handleResize(n, false); }, {1, 2, 3});
  r.on("Upsample", 9, [](NodeCtx &n) { return handleResize(n, true); }, {1});
  r.on("GridSample", 16, handleGridSample);
}
} // namespace onnx_import
