//===- OpsSignal.cpp - windows, MelWeightMatrix, DFT, STFT ------------------===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

namespace {

/// HannWindow, HammingWindow, BlackmanWindow of a constant size: constants
/// a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the size (periodic) or
/// the size - 1, computed in double.
LogicalResult handleWindow(NodeCtx &n, double a0, double a1, double a2) {
  if (failed(n.allowAttrs({"output_datatype", "periodic"})))
    return failure();
  auto dt = n.getInt("output_datatype", onnx::TensorProto::FLOAT),
       periodic = n.getInt("periodic", 1);
  auto size = n.constInts(0, "size");
  if (failed(dt) || failed(periodic) || failed(size))
    return failure();
  if (size->size() != 1 || (*size)[0] < 0 || (*size)[0] > (1 << 24))
    return n.fail("size must be one value in [0, 2^24]");
  auto elt = n.im.elementType((int32_t)*dt, "output_datatype");
  if (failed(elt))
    return failure();
  if (!isa<FloatType>(*elt))
    return n.fail("output_datatype must be a float type");
  int64_t len = (*size)[0];
  double N = *periodic ? (double)len : (double)(len - 1);
  SmallVector<double> w;
  for (int64_t i = 0; i < len; ++i)
    w.push_back(N <= 0 ? 1.0
                       : a0 - a1 * std::cos(2 * M_PI * i / N) + a2 * std::cos(4 * M_PI * i / N));
  auto t = RankedTensorType::get({len}, *elt);
  SmallVector<Attribute> vals;
  for (double v : w)
    vals.push_back(n.im.b.getFloatAttr(*elt, v));
  n.setOutput(0, arith::ConstantOp::create(n.im.b, n.loc, t, DenseElementsAttr::get(t, vals)));
  return success();
}

/// MelWeightMatrix of constant inputs: ONNX's reference computation
/// (triangles between mel-spaced bins, the edges in f32 as its float
/// inputs give them), folded to a constant [dft_length / 2 + 1, bins].
LogicalResult handleMelWeightMatrix(NodeCtx &n) {
  if (failed(n.allowAttrs({"output_datatype"})))
    return failure();
  auto dt = n.getInt("output_datatype", onnx::TensorProto::FLOAT);
  auto bins = n.constInts(0, "num_mel_bins"), dftLen = n.constInts(1, "dft_length"),
       rate = n.constInts(2, "sample_rate");
  auto lo = n.constInput(3, "lower_edge_hertz"), hi = n.constInput(4, "upper_edge_hertz");
  if (failed(dt) || failed(bins) || failed(dftLen) || failed(rate) || failed(lo) || failed(hi))
    return failure();
  if (bins->size() != 1 || dftLen->size() != 1 || rate->size() != 1 || (*lo)->numElements() != 1 ||
      (*hi)->numElements() != 1)
    return n.fail("every input must be a single value");
  int64_t M = (*bins)[0], L = (*dftLen)[0], sr = (*rate)[0];
  if (M < 1 || L < 1 || sr < 1 || M > 4096 || L > (1 << 20))
    return n.fail("num_mel_bins, dft_length and sample_rate must be positive (and not huge)");
  auto elt = n.im.elementType((int32_t)*dt, "output_datatype");
  if (failed(elt))
    return failure();
  float loHz = (float)(*lo)->toDouble()[0], hiHz = (float)(*hi)->toDouble()[0];
  float loMel = 2595.0f * std::log10(1.0f + loHz / 700.0f),
        hiMel = 2595.0f * std::log10(1.0f + hiHz / 700.0f);
  double step = ((double)hiMel - (double)loMel) / (double)(M + 2);
  int64_t K = L / 2 + 1;
  if (K * M > ((int64_t)1 << 22))
    return n.fail("the matrix would have " + llvm::Twine(K) + " x " + llvm::Twine(M) +
                  " entries, more than 2^22");
  SmallVector<int64_t> f;
  for (int64_t i = 0; i < M + 2; ++i) {
    double hz = 700.0 * (std::pow(10.0, (i * step + (double)loMel) / 2595.0) - 1.0);
    double bin = std::floor((double)(L + 1) * hz / (double)sr);
    // Checked as a double first: NaN or a huge edge has no int64 value.
    if (!(bin >= 0 && bin < (double)K))
      return n.fail("the mel edges fall outside the " + llvm::Twine(K) +
                    " spectrogram bins (check "
                    "lower_edge_hertz, upper_edge_hertz, sample_rate)");
    f.push_back((int64_t)bin);
  }
  std::vector<double> w((size_t)(K * M), 0.0);
  for (int64_t i = 0; i < M; ++i) {
    int64_t l = f[i], c = f[i + 1], h = f[i + 2];
    if (c == l)
      w[c * M + i] = 1.0;
    else
      for (int64_t j = l; j <= c; ++j)
        w[j * M + i] = (double)(j - l) / (double)(c - l);
    if (h > c)
      for (int64_t j = c; j < h; ++j)
        w[j * M + i] = (double)(h - j) / (double)(h - c);
  }
  auto t = RankedTensorType::get({K, M}, *elt);
  SmallVector<Attribute> vals;
  for (double v : w)
    vals.push_back(isa<FloatType>(*elt) ? Attribute(n.im.b.getFloatAttr(*elt, v))
                                        : Attribute(n.im.b.getIntegerAttr(*elt, (int64_t)v)));
  n.setOutput(0, arith::ConstantOp::create(n.im.b, n.loc, t, DenseElementsAttr::get(t, vals)));
  return success();
}

/// The largest DFT table (L x K entries, two of them): 16 MiB each in f32.
constexpr int64_t kMaxDftTable = (int64_t)1 << 22;

/// The DFT of signals along their last dim (xr, xi: real and imaginary
/// parts, xi null for a real signal) of length L, the first K bins, as
/// matrix products with cos / sin tables (inverse: the conjugate, / L).
static std::pair<Value, Value> dftLast(NodeCtx &n, Elementwise &e, Value xr, Value xi, int64_t L,
                                       int64_t K, bool inverse) {
  Type elt = getElementTypeOrSelf(xr.getType());
  auto tt = RankedTensorType::get({L, K}, elt);
  SmallVector<Attribute> cs, sn;
  double scale = inverse ? 1.0 / (double)L : 1.0;
  for (int64_t i = 0; i < L; ++i)
    for (int64_t k = 0; k < K; ++k) {
      // The angle of i * k mod L: exact tables for long signals.
      double th = 2 * M_PI * (double)((i * k) % L) / (double)L;
      cs.push_back(n.im.b.getFloatAttr(elt, std::cos(th) * scale));
      sn.push_back(n.im.b.getFloatAttr(elt, std::sin(th) * scale));
    }
  Value C = arith::ConstantOp::create(n.im.b, n.loc, tt, DenseElementsAttr::get(tt, cs));
  Value S = arith::ConstantOp::create(n.im.b, n.loc, tt, DenseElementsAttr::get(tt, sn));
  auto mm = [&](Value a, Value m) { return e.op<MatMulOp>({a, m}); };
  // forward: e^{-i th}: yr = xr C + xi S, yi = xi C - xr S; inverse: e^{+i th}.
  Value yr = mm(xr, C), yi = e.mul(mm(xr, S), e.cst(elt, inverse ? 1.0 : -1.0));
  if (xi) {
    yr = inverse ? e.sub(yr, mm(xi, S)) : e.add(yr, mm(xi, S));
    yi = e.add(yi, mm(xi, C));
  }
  return {yr, yi};
}

/// [..., 1] or [..., 2] -> its real part and (null or) imaginary part, the
/// last dim dropped.
static std::pair<Value, Value> complexParts(NodeCtx &n, Elementwise &e, Value x) {
  auto xt = cast<RankedTensorType>(x.getType());
  int64_t r = xt.getRank();
  SmallVector<int64_t> shape(xt.getShape().drop_back());
  auto part = [&](int64_t i) {
    Value s =
        e.op<SliceOp>({x}, {named(n, "starts", ints(n, {i})), named(n, "ends", ints(n, {i + 1})),
                            named(n, "axes", ints(n, {r - 1}))});
    return e.op<ReshapeOp>({s}, {named(n, "shape", ints(n, shape))});
  };
  return {part(0), xt.getDimSize(r - 1) == 2 ? part(1) : Value()};
}

/// (re, im) -> [..., 2].
static Value complexJoin(NodeCtx &n, Elementwise &e, Value re, Value im) {
  SmallVector<int64_t> shape(cast<RankedTensorType>(re.getType()).getShape());
  shape.push_back(1);
  return e.op<ConcatOp>({e.op<ReshapeOp>({re}, {named(n, "shape", ints(n, shape))}),
                         e.op<ReshapeOp>({im}, {named(n, "shape", ints(n, shape))})},
                        {named(n, "axis", i64(n, (int64_t)shape.size() - 1))});
}

/// DFT (opset 17 / 20) by matrix products with constant tables, marked
/// fp32 (torch.fft runs outside autocast's lists, in the input's type).
LogicalResult handleDFT(NodeCtx &n) {
  if (failed(n.allowAttrs(n.opset < 20
                              ? llvm::ArrayRef<llvm::StringRef>{"axis", "inverse", "onesided"}
                              : llvm::ArrayRef<llvm::StringRef>{"inverse", "onesided"})))
    return failure();
  auto inverse = n.getInt("inverse", 0), onesided = n.getInt("onesided", 0);
  auto x = n.input(0);
  if (failed(inverse) || failed(onesided) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  int64_t r = xt.getRank();
  if (!isa<FloatType>(xt.getElementType()) || !xt.hasStaticShape() || r < 2 ||
      (xt.getDimSize(r - 1) != 1 && xt.getDimSize(r - 1) != 2))
    return n.fail("the input must be a float [..., N, 1 or 2] of static shape");
  int64_t axis;
  if (n.opset < 20) {
    auto a = n.getInt("axis", 1);
    if (failed(a))
      return failure();
    axis = *a;
  } else if (n.hasInput(2)) {
    auto a = n.constInts(2, "axis");
    if (failed(a))
      return failure();
    axis = a->empty() ? -2 : (*a)[0];
  } else {
    axis = -2;
  }
  if (axis < 0)
    axis += r;
  if (axis < 0 || axis > r - 2)
    return n.fail("axis out of range (the last dim holds the real / imaginary parts)");
  int64_t N = xt.getDimSize(axis), L = N;
  if (n.hasInput(1)) {
    auto l = n.constInts(1, "dft_length");
    if (failed(l))
      return failure();
    if (l->size() != 1 || (*l)[0] < 1)
      return n.fail("dft_length must be one positive value");
    L = (*l)[0];
  }
  if (*inverse && *onesided)
    return n.fail("unsupported op ai.onnx.DFT with inverse and onesided together");
  int64_t K = *onesided ? L / 2 + 1 : L;
  if (L * K > kMaxDftTable)
    return n.fail("unsupported op ai.onnx.DFT of length " + llvm::Twine(L) +
                  " (its cos / sin tables are constant matrices of at most 2^22 entries)");
  ClassMark mark(n);
  Elementwise e{n};
  auto [xr, xi] = complexParts(n, e, *x);
  // The signal axis last.
  int64_t sr = r - 1;
  SmallVector<int64_t> perm, inv(sr);
  for (int64_t d = 0; d < sr; ++d)
    if (d != axis)
      perm.push_back(d);
  perm.push_back(axis);
  for (int64_t d = 0; d < sr; ++d)
    inv[perm[d]] = d;
  auto moveLast = [&](Value v) {
    return v ? e.op<TransposeOp>({v}, {named(n, "perm", ints(n, perm))}) : v;
  };
  auto fit = [&](Value v) -> Value { // to length L: truncated or zero-padded
    if (!v || L == N)
      return v;
    auto vt = cast<RankedTensorType>(v.getType());
    if (L < N)
      return e.op<SliceOp>({v}, {named(n, "starts", ints(n, {0})), named(n, "ends", ints(n, {L})),
                                 named(n, "axes", ints(n, {sr - 1}))});
    SmallVector<int64_t> zs(vt.getShape());
    zs.back() = L - N;
    auto zt = RankedTensorType::get(zs, vt.getElementType());
    Value z = arith::ConstantOp::create(
        n.im.b, n.loc, zt,
        DenseElementsAttr::get(zt, n.im.b.getFloatAttr(vt.getElementType(), 0.0)));
    return e.op<ConcatOp>({v, z}, {named(n, "axis", i64(n, sr - 1))});
  };
  xr = fit(moveLast(xr));
  xi = fit(moveLast(xi));
  if (!e.ok)
    return failure();
  auto [yr, yi] = dftLast(n, e, xr, xi, L, K, *inverse != 0);
  auto back = [&](Value v) { return e.op<TransposeOp>({v}, {named(n, "perm", ints(n, inv))}); };
  Value y = complexJoin(n, e, back(yr), back(yi));
  if (!e.ok)
    return failure();
  mark.apply("fp32");
  n.setOutput(0, y);
  return success();
}

/// STFT: frames gathered from the signal (constant indices), times the
/// window, then the DFT of each frame (onesided: the first L/2 + 1 bins);
/// marked fp32.
LogicalResult handleSTFT(NodeCtx &n) {
  if (failed(n.allowAttrs({"onesided"})))
    return failure();
  auto onesided = n.getInt("onesided", 1);
  auto x = n.input(0);
  auto step = n.constInts(1, "frame_step");
  if (failed(onesided) || failed(x) || failed(step))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (!isa<FloatType>(xt.getElementType()) || !xt.hasStaticShape() || xt.getRank() != 3 ||
      (xt.getDimSize(2) != 1 && xt.getDimSize(2) != 2))
    return n.fail("the signal must be a float [batch, length, 1 or 2] of static shape");
  Value window = n.optInput(2);
  int64_t FL = -1;
  if (window) {
    auto wt = cast<RankedTensorType>(window.getType());
    if (wt.getRank() != 1 || !wt.hasStaticShape())
      return n.fail("the window must be 1-D");
    FL = wt.getDimSize(0);
  }
  if (n.hasInput(3)) {
    auto fl = n.constInts(3, "frame_length");
    if (failed(fl))
      return failure();
    if (fl->size() != 1 || (FL >= 0 && (*fl)[0] != FL))
      return n.fail("frame_length must be one value equal to the window's length");
    FL = (*fl)[0];
  }
  int64_t B = xt.getDimSize(0), len = xt.getDimSize(1), s = step->size() == 1 ? (*step)[0] : 0;
  if (FL < 1 || FL > len || s < 1)
    return n.fail("needs a frame length in [1, signal length] (a window or frame_length) and a "
                  "positive frame_step");
  if (*onesided && xt.getDimSize(2) == 2)
    return n.fail("onesided needs a real signal");
  int64_t frames = 1 + (len - FL) / s, K = *onesided ? FL / 2 + 1 : FL;
  if (FL * K > kMaxDftTable)
    return n.fail("unsupported op ai.onnx.STFT with frames of " + llvm::Twine(FL) +
                  " (its cos / sin tables are constant matrices of at most 2^22 entries)");
  ClassMark mark(n);
  Elementwise e{n};
  auto [xr, xi] = complexParts(n, e, *x); // [B, len]
  auto it = RankedTensorType::get({frames, FL}, n.im.b.getI64Type());
  SmallVector<int64_t> idx;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < FL; ++j)
      idx.push_back(f * s + j);
  Value index = arith::ConstantOp::create(n.im.b, n.loc, it,
                                          DenseElementsAttr::get(it, ArrayRef<int64_t>(idx)));
  auto framed = [&](Value v) -> Value {
    if (!v)
      return v;
    Value g = e.op<GatherOp>({v, index}, {named(n, "axis", i64(n, 1))}); // [B, frames, FL]
    return window ? e.mul(g, window) : g;
  };
  xr = framed(xr);
  xi = framed(xi);
  if (!e.ok)
    return failure();
  auto [yr, yi] = dftLast(n, e, xr, xi, FL, K, false);
  Value y = complexJoin(n, e, yr, yi);
  if (!e.ok)
    return failure();
  (void)B;
  mark.apply("fp32");
  n.setOutput(0, y);
  return success();
}

} // namespace

void registerSignalOps(OpRegistry &r) {
  r.on("HannWindow", 17, [](NodeCtx &n) { return handleWindow(n, 0.5, 0.5, 0.0); }, {0});
  r.on("HammingWindow", 17,
       [](NodeCtx &n) { return handleWindow(n, 25.0 / 46.0, 21.0 / 46.0, 0.0); }, {0});
  r.on("BlackmanWindow", 17, [](NodeCtx &n) { return handleWindow(n, 0.42, 0.5, 0.08); }, {0});
  r.on("DFT", 17, handleDFT, {1, 2});
  r.on("MelWeightMatrix", 17, handleMelWeightMatrix, {0, 1, 2, 3, 4});
  r.on("STFT", 17, handleSTFT, {1, 3});
}
} // namespace onnx_import
