//===- candidates.cpp - each convolution pass's candidate kernels ---------===//
//
// The three passes of a convolution, each an ordered table of candidates
// ({name, fits, run}: kernels.h) walked by one chooser: the fixed rule
// names the preferred candidate; with tuning on (host/tune.h), the fitting
// candidates are timed on the real operands the first time a shape is
// seen and the fastest is kept. Every candidate computes the same products
// up to the order of the f32 sums (oneDNN's bf16 kernels, or its f32 ones
// on exactly widened bf16 values; im2col + one product; the AMX tiles; the
// direct depthwise loops). Adding one: a kernel (its own file), a row in
// its pass's table, a test that forces it by name (cpu/README.md).
//
//===----------------------------------------------------------------------===//

#include "cpu/conv/conv.h"
#include "cpu/conv/kernels.h"
#include "cpu/matmul/matmul.h"

#include "common/check.h"
#include "common/exec_decode.h"
#include "cpu/elementwise/elementwise.h"
#include "cpu/optim/scaler.h"
#include "cpu/reduce/reduce.h"
#include "host/profile.h"
#include "host/threads.h"
#include "host/tune.h"

#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

using namespace amprt;
using namespace amprt::conv;

namespace {

const int32_t kBlocked = AMPRT_CONV_SRC_BLOCKED | AMPRT_CONV_DST_BLOCKED;

/// The direct depthwise kernels (depthwise.cpp) take the shape.
bool depthwiseShape(const Call &c) { return depthwiseDirectFits(c.x, c.w, c.p); }

amprt_status noteDirectDw() {
  if (desc::profilingRequested())
    noteKernelImpl("direct-dw");
  return AMPRT_OK;
}

//===-- The forward ------------------------------------------------------===//

/// bf16 with few input channels per group (an image's first layer):
/// oneDNN's bf16 kernels run slower than its f32 ones there, and bf16
/// values widen to f32 exactly (the same products, f32 accumulation either
/// way), so the f32 kernel is the fixed rule's. A depthwise convolution
/// takes the direct kernel where oneDNN's is im2col + gemm or its reference
/// kernel.
const char *forwardRule(const Call &c) {
  if (!(c.flags & kBlocked) && depthwiseShape(c) && depthwiseOneDnnSlow(c.cd, Pass::Forward))
    return "direct";
  const bool widen =
      c.x->dtype == AMPRT_BF16 && c.x->shape[1] / std::max<int64_t>(c.p->group, 1) < 8;
  return c.bf16 && !widen ? "bf16" : "f32";
}

/// im2col + one product, the weight read in its plain layout: faster where
/// the output is small next to the weight. Plain x and y only.
bool im2colBf16Forward(const Call &c) {
  return !(c.flags & kBlocked) && c.bf16 && im2colFits(c.w, c.y, c.p, 2);
}

const Candidate kForward[] = {
    // oneDNN's bf16 kernels (x and w bf16).
    {"bf16", [](const Call &c) { return c.bf16; },
     [](const Call &c) { return oneDnnForward(c, false); }},
    // oneDNN's f32 kernels (bf16 / f16 operands widened: exact).
    {"f32", [](const Call &) { return true; },
     [](const Call &c) { return oneDnnForward(c, true); }},
    {"im2col-bf16", im2colBf16Forward,
     [](const Call &c) {
       im2colForward(c.x, c.w, c.biasF32, c.p, c.flags, c.y, true);
       return AMPRT_OK;
     }},
    {"im2col-f32",
     [](const Call &c) { return !(c.flags & kBlocked) && im2colFits(c.w, c.y, c.p, 4); },
     [](const Call &c) {
       im2colForward(c.x, c.w, c.biasF32, c.p, c.flags, c.y, false);
       return AMPRT_OK;
     }},
    // A pointwise convolution as one batched product in NCHW (no im2col):
    // fast where the maps are large, slow on 2 x 2 ones (one small product
    // per image, the weight read by each). bf16 only: the matmul sums its K
    // products in one running f32 sum, 2-3x the rounding of oneDNN's
    // convolution on long sums (K = 1152: mean error 1.3e-5 against 7.5e-6
    // on sums near 34), which fp32 training of a sensitive model shows
    // (timm's EfficientNet-B0: loss 1.3e-3 from float64 against PyTorch's
    // 6.7e-5); in bf16 the operands' rounding is 100x that.
    {"pointwise-bf16",
     [](const Call &c) { return !(c.flags & kBlocked) && c.bf16 && pointwise(c.x, c.w, c.y, c.p); },
     [](const Call &c) {
       im2colForward(c.x, c.w, c.biasF32, c.p, c.flags, c.y, true, true);
       return AMPRT_OK;
     }},
    // The same columns on the AMX tiles with the weights read in place
    // (rows of OC, C x KH x KW columns: amxReadsAInPlace).
    {"im2col-amx",
     [](const Call &c) {
       return im2colBf16Forward(c) && c.w->dtype == AMPRT_BF16 && amprt_tensor_is_contiguous(c.w) &&
              amxProductAvailable() &&
              amxReadsAInPlace(c.w->shape[0], amprt_tensor_numel(c.w) / c.w->shape[0]);
     },
     [](const Call &c) {
       im2colForward(c.x, c.w, c.biasF32, c.p, c.flags, c.y, true, false, true);
       return AMPRT_OK;
     }},
    // A depthwise convolution by the direct loops (depthwise.cpp).
    {"direct", [](const Call &c) { return !(c.flags & kBlocked) && depthwiseShape(c); },
     [](const Call &c) {
       noteDirectDw();
       depthwiseForward(c.x, c.w, c.biasF32, c.p, c.y);
       return c.flags & AMPRT_CONV_RELU ? amprt_unary(c.ctx, AMPRT_UNARY_RELU, 0.0f, c.y, c.y)
                                        : AMPRT_OK;
     }},
};

//===-- The data gradient ------------------------------------------------===//

const Candidate kData[] = {
    // Not for the depthwise shapes the direct kernels take (oneDNN's bf16
    // kernels are slower there).
    {"bf16", [](const Call &c) { return c.bf16 && !depthwiseShape(c); },
     [](const Call &c) { return oneDnnBackwardData(c, true); }},
    {"f32", [](const Call &) { return true; },
     [](const Call &c) { return oneDnnBackwardData(c, false); }},
    // One product + col2im, the weight read in its plain layout.
    {"im2col-bf16", [](const Call &c) { return c.bf16 && im2colFits(c.w, c.dy, c.p, 2); },
     [](const Call &c) {
       im2colDataGrad(c.w, c.dy, c.p, c.dx, true);
       return AMPRT_OK;
     }},
    {"im2col-f32", [](const Call &c) { return im2colFits(c.w, c.dy, c.p, 4); },
     [](const Call &c) {
       im2colDataGrad(c.w, c.dy, c.p, c.dx, false);
       return AMPRT_OK;
     }},
    // bf16 only: see the forward's.
    {"pointwise-bf16", [](const Call &c) { return c.bf16 && pointwise(c.dx, c.w, c.dy, c.p); },
     [](const Call &c) {
       im2colDataGrad(c.w, c.dy, c.p, c.dx, true, true);
       return AMPRT_OK;
     }},
    {"direct", depthwiseShape,
     [](const Call &c) {
       noteDirectDw();
       depthwiseBackwardData(c.w, c.dy, c.p, c.dx);
       return AMPRT_OK;
     }},
};

//===-- The weight gradient ----------------------------------------------===//

/// Whether the weight gradient runs as im2col + one product instead of
/// oneDNN's backward-weights kernel: 2-D, one group, an output of at most 4
/// positions per image (late layers on small images: oneDNN's direct
/// kernel, f32 or bf16, takes several times the product's time there;
/// resnet18's 512x512x3x3 weight gradient on 8 x 2 x 2 outputs on an AMD
/// EPYC with AVX512-BF16, 2 threads: 5.3 ms a call in bf16 and f32, 2.3 ms
/// with dx by this path; at 4 x 4 the two were level). A fixed rule from
/// that measurement; the timed choice may take another.
bool weightGradByIm2col(const amprt_tensor *dy, const amprt_conv_params *p) {
  return p->spatial == 2 && p->group == 1 && dy->rank == 4 && dy->shape[2] * dy->shape[3] <= 4;
}

/// The weight gradient as one product: the bf16 operands as they are
/// (`low`), or f32 (widened: exact).
amprt_status im2colWeights(const Call &c, bool low) {
  amprt_tensor *dw = c.dw;
  const void *dyp = low ? c.dy->data : (const void *)dyF32(c);
  const bool bf16Out = low && dw->dtype == AMPRT_BF16;
  std::vector<float> gw(dw->dtype == AMPRT_F32 || bf16Out ? 0 : amprt_tensor_numel(c.w));
  bool checked =
      im2colWeightGrad(c.x, dyp, low ? 2 : 4, c.w, c.dy, c.p, gw.empty() ? dw->data : gw.data(),
                       bf16Out, dw->dtype == AMPRT_F32 ? c.dwNonFinite : nullptr);
  if (c.dwChecked)
    *c.dwChecked = checked;
  if (!gw.empty())
    return convertPar(gw.data(), AMPRT_F32, dw->data, dw->dtype, gw.size());
  return AMPRT_OK;
}

/// A 2-D convolution of one input channel per group.
bool depthwiseGroups(const Call &c) {
  return c.p->spatial == 2 && c.p->group > 1 && c.x->shape[1] == c.p->group;
}

const Candidate kWeights[] = {
    {"bf16", [](const Call &c) { return c.bf16 && !depthwiseGroups(c); },
     [](const Call &c) { return oneDnnBackwardWeights(c, true); }},
    {"f32", [](const Call &) { return true; },
     [](const Call &c) { return oneDnnBackwardWeights(c, false); }},
    {"im2col-bf16", [](const Call &c) { return c.bf16 && im2colFits(c.w, c.dy, c.p, 2); },
     [](const Call &c) { return im2colWeights(c, true); }},
    {"im2col-f32", [](const Call &c) { return im2colFits(c.w, c.dy, c.p, c.bf16 ? 2 : 4); },
     [](const Call &c) { return im2colWeights(c, false); }},
    // The columns made tile by tile on the AMX tiles (direct_amx.cpp).
    {"direct-amx", directAmxFits, directAmxWeightGrad},
    {"direct", depthwiseShape,
     [](const Call &c) {
       noteDirectDw();
       depthwiseWeightGrad(c.x, c.dy, c.p, c.dw);
       return AMPRT_OK;
     }},
};

//===-- The chooser ------------------------------------------------------===//

/// Runs a candidate, oneDNN's exceptions (its products inside im2col too)
/// turned into a status.
amprt_status runCandidate(const Candidate *cand, const Call &c) {
  AMPRT_DNNL_TRY(c.pass == Pass::Forward ? "amprt_conv" : "amprt_conv_backward",
                 { return cand->run(c); })
  return AMPRT_OK;
}

/// The shapes and parameters of a convolution for a tuning key.
std::string convTuneKey(const char *pass, const ConvDims &cd, int64_t group,
                        const std::string &types) {
  std::string s = std::string(pass) + " " + types;
  auto dims = [&](const char *name, const dnnl::memory::dims &d) {
    s += std::string(" ") + name + "[";
    for (size_t i = 0; i < d.size(); ++i)
      s += (i ? "," : "") + std::to_string(d[i]);
    s += "]";
  };
  dims("x", cd.src);
  dims("w", cd.wei);
  dims("y", cd.dst);
  dims("stride", cd.strides);
  dims("dilation", cd.dil);
  dims("pad", cd.padL);
  dims("", cd.padR);
  s += " group " + std::to_string(group) + " threads " + std::to_string(maxThreads()) + " " +
       isaTag();
  return s;
}

/// The candidate of `table` that runs c: the fixed rule's `preferred`
/// unless tuning is on and another fitting one is faster for the shape
/// (key() names it). The preferred candidate runs even where its fits()
/// says no (a fixed rule outside the timed set).
template <size_t N>
amprt_status choose(const Call &c, const Candidate (&table)[N], bool tune, const char *preferred,
                    const std::function<std::string()> &key, const Candidate **out) {
  *out = nullptr;
  std::vector<const Candidate *> fit;
  int pref = -1;
  for (const Candidate &cand : table) {
    if (!std::strcmp(cand.name, preferred))
      *out = &cand;
    if (cand.fits(c)) {
      if (!std::strcmp(cand.name, preferred))
        pref = (int)fit.size();
      fit.push_back(&cand);
    }
  }
  if (!*out)
    return fail(AMPRT_ERR_UNSUPPORTED, "convolution: no candidate %s", preferred);
  if (!tune || pref < 0 || fit.size() < 2)
    return AMPRT_OK;
  std::vector<const char *> names;
  for (const Candidate *f : fit)
    names.push_back(f->name);
  int choice = pref;
  AMPRT_CHECK(chooseKernel(
      c.ctx, key(), names, pref, [&](int i) { return runCandidate(fit[(size_t)i], c); }, &choice));
  *out = fit[(size_t)choice];
  return AMPRT_OK;
}

amprt_status convForward(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *w,
                         const amprt_tensor *bias, const amprt_conv_params *p, int32_t flags,
                         amprt_tensor *y) {
  const char *k = "amprt_conv";
  AMPRT_CHECK(checkFloatContig(x, "amprt_conv: x"));
  AMPRT_CHECK(checkFloatContig(w, "amprt_conv: w"));
  AMPRT_CHECK(checkFloatContig(y, "amprt_conv: y"));
  if (x->dtype != w->dtype)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: x and w must share a type", k);
  if (flags & ~(AMPRT_CONV_RELU | AMPRT_CONV_SRC_BLOCKED | AMPRT_CONV_DST_BLOCKED))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: unknown flags %d", k, (int)flags);
  ConvDims cd;
  AMPRT_CHECK(convDims(x, w, y, p, k, cd));
  const int32_t block = amprt_channel_block();
  for (auto [t, bit, what] : {std::tuple{x, AMPRT_CONV_SRC_BLOCKED, "x"},
                              std::tuple{(const amprt_tensor *)y, AMPRT_CONV_DST_BLOCKED, "y"}})
    if ((flags & bit) && (t->dtype != AMPRT_F32 || t->rank != 4 || t->shape[1] % block))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "%s: a channel-blocked %s must be f32 [N, C, H, W] with C a multiple "
                  "of %d, got %s",
                  k, what, (int)block, shapeString(t).c_str());
  std::vector<float> bf;
  if (bias) {
    AMPRT_CHECK(checkFloatContig(bias, "amprt_conv: bias"));
    if (amprt_tensor_numel(bias) != cd.bias[0])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: bias must be [%lld]", k, (long long)cd.bias[0]);
    bf.resize(cd.bias[0]);
    convertPar(bias->data, bias->dtype, bf.data(), AMPRT_F32, bf.size());
  }
  if ((flags & AMPRT_CONV_RELU) && amprt_tensor_numel(y)) {
    // oneDNN's ReLU post-op turns NaN into 0 where ours keeps it (a NaN must
    // reach the loss and the inf check). It runs in the call only where no
    // NaN can arise: finite inputs whose largest products cannot overflow a
    // partial sum; otherwise the convolution, then our ReLU in place.
    int64_t k = amprt_tensor_numel(w) / std::max<int64_t>(1, w->shape[0]);
    if (!reluCannotMeetNaN(x, w, k, bf.data(), (int64_t)bf.size())) {
      AMPRT_CHECK(convForward(ctx, x, w, bias, p, flags & ~AMPRT_CONV_RELU, y));
      return amprt_unary(ctx, AMPRT_UNARY_RELU, 0.0f, y, y);
    }
  }
  if (!amprt_tensor_numel(y))
    return AMPRT_OK;
  Call c;
  c.ctx = ctx;
  c.pass = Pass::Forward;
  c.x = x;
  c.w = w;
  c.p = p;
  c.cd = cd;
  c.bf16 = x->dtype == AMPRT_BF16 && bf16Kernels();
  c.bias = bias;
  c.biasF32 = bias ? bf.data() : nullptr;
  c.flags = flags;
  c.y = y;
  const Candidate *run;
  AMPRT_CHECK(choose(
      c, kForward, tuningOn(ctx), forwardRule(c),
      [&] {
        std::string types =
            std::string(amprt_dtype_name(x->dtype)) + "->" + amprt_dtype_name(y->dtype);
        return convTuneKey(flags & AMPRT_CONV_RELU ? "conv+relu" : "conv", cd, p->group, types) +
               (bias ? " bias" : "") + (flags & kBlocked ? " blocked" : "");
      },
      &run));
  return runCandidate(run, c);
}

} // namespace

extern "C" amprt_status amprt_conv(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *w,
                                   const amprt_tensor *bias, const amprt_conv_params *p,
                                   amprt_tensor *y) {
  return amprt_conv_ex(ctx, x, w, bias, p, 0, y);
}

extern "C" amprt_status amprt_conv_ex(amprt_context *ctx, const amprt_tensor *x,
                                      const amprt_tensor *w, const amprt_tensor *bias,
                                      const amprt_conv_params *p, int32_t flags, amprt_tensor *y) {
  return convForward(ctx, x, w, bias, p, flags, y);
}

extern "C" amprt_status amprt_conv_backward(amprt_context *ctx, const amprt_tensor *x,
                                            const amprt_tensor *w, const amprt_tensor *dy,
                                            const amprt_conv_params *p, amprt_tensor *dx,
                                            amprt_tensor *dw, amprt_tensor *db) {
  return convBackwardChecked(ctx, x, w, dy, p, dx, dw, db, false);
}

amprt_status amprt::convBackwardChecked(amprt_context *ctx, const amprt_tensor *x,
                                        const amprt_tensor *w, const amprt_tensor *dy,
                                        const amprt_conv_params *p, amprt_tensor *dx,
                                        amprt_tensor *dw, amprt_tensor *db, bool checkDw) {
  const char *k = "amprt_conv_backward";
  AMPRT_CHECK(checkFloatContig(x, "amprt_conv_backward: x"));
  AMPRT_CHECK(checkFloatContig(w, "amprt_conv_backward: w"));
  AMPRT_CHECK(checkFloatContig(dy, "amprt_conv_backward: dy"));
  ConvDims cd;
  AMPRT_CHECK(convDims(x, w, dy, p, k, cd));
  for (amprt_tensor *t : {dx, dw, db})
    if (t)
      AMPRT_CHECK(checkFloatContig(t, "amprt_conv_backward: gradient"));
  if ((dx && amprt_tensor_numel(dx) != amprt_tensor_numel(x)) ||
      (dw && amprt_tensor_numel(dw) != amprt_tensor_numel(w)) ||
      (db && amprt_tensor_numel(db) != cd.bias[0]))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: gradient shapes do not match", k);
  // The fixed rules. bf16 operands run on oneDNN's bf16 kernels (as
  // PyTorch's autocast backward does): products of bf16 values are exact in
  // f32 and summed in f32, as in the f32 kernels on widened copies, at
  // twice their speed where the CPU has bf16 instructions. Not for few
  // input channels per group (an image's first layer, depthwise
  // convolutions: oneDNN's bf16 kernels are slower there, as in the
  // forward), nor where oneDNN would take its reference kernel (then f32).
  // The weight gradient as im2col + a product on small outputs; depthwise
  // sides by the direct kernels where oneDNN's are im2col + gemm.
  const bool allBf16 =
      dy->dtype == AMPRT_BF16 && w->dtype == AMPRT_BF16 && x->dtype == AMPRT_BF16 && bf16Kernels();
  const bool lowp = allBf16 && x->shape[1] / std::max<int64_t>(p->group, 1) >= 8;
  Call c;
  c.ctx = ctx;
  c.x = x;
  c.w = w;
  c.p = p;
  c.cd = cd;
  c.bf16 = allBf16;
  c.dy = dy;
  const bool depthwise = depthwiseShape(c);
  // Each side timed alone on the real operands.
  const bool tune =
      tuningOn(ctx) && amprt_tensor_numel(dy) && amprt_tensor_numel(x) && amprt_tensor_numel(w);
  const std::string types = allBf16 ? "bf16" : x->dtype == AMPRT_F32 ? "f32" : "mixed";
  const Candidate *dataRun = nullptr, *weightsRun = nullptr;
  if (dx) {
    Call side = c;
    side.pass = Pass::Data;
    side.dx = dx;
    const char *rule = depthwise && depthwiseOneDnnSlow(cd, Pass::Data) ? "direct"
                       : lowp                                           ? "bf16"
                                                                        : "f32";
    AMPRT_CHECK(choose(
        side, kData, tune, rule,
        [&] {
          return convTuneKey("conv backward-data", cd, p->group, types) + " dx " +
                 amprt_dtype_name(dx->dtype);
        },
        &dataRun));
  }
  if (dw) {
    Call side = c;
    side.pass = Pass::Weights;
    side.dw = dw;
    const char *rule = depthwise && depthwiseOneDnnSlow(cd, Pass::Weights) ? "direct"
                       : weightGradByIm2col(dy, p) ? (lowp ? "im2col-bf16" : "im2col-f32")
                       : lowp                      ? "bf16"
                                                   : "f32";
    AMPRT_CHECK(choose(
        side, kWeights, tune, rule,
        [&] {
          return convTuneKey("conv backward-weights", cd, p->group, types) + " dw " +
                 amprt_dtype_name(dw->dtype);
        },
        &weightsRun));
  }
  // The final call, both sides: with checkDw, an f32 dw's inf check as it
  // is written (amxProduct's tiles), else right after, while it is in the
  // caches; the answer noted for the step's unscale_and_check.
  checkDw = checkDw && dw && dw->dtype == AMPRT_F32;
  bool checked = false, bad = false;
  c.dx = dx;
  c.dw = dw;
  if (checkDw) {
    c.dwChecked = &checked;
    c.dwNonFinite = &bad;
  }
  if (dx) {
    c.pass = Pass::Data;
    AMPRT_CHECK(runCandidate(dataRun, c));
  }
  if (dw) {
    c.pass = Pass::Weights;
    AMPRT_CHECK(runCandidate(weightsRun, c));
  }
  if (db) {
    // db[c] = sum of dy over N and the spatial dims, in double (oneDNN's
    // f32 sum loses digits when the terms cancel).
    const float *dyf = dyF32(c);
    int64_t oc = cd.dst[1], inner = 1;
    for (size_t d = 2; d < cd.dst.size(); ++d)
      inner *= cd.dst[d];
    std::vector<float> gb(oc);
    for (int64_t ch = 0; ch < oc; ++ch) {
      double sum = 0.0;
      for (int64_t b = 0; b < cd.dst[0]; ++b)
        sum += sumF32(dyf + (b * oc + ch) * inner, inner);
      gb[ch] = (float)sum;
    }
    AMPRT_CHECK(convertPar(gb.data(), AMPRT_F32, db->data, db->dtype, gb.size()));
  }
  if (checkDw) {
    if (!checked)
      bad = anyNonFiniteF32(static_cast<const float *>(dw->data), amprt_tensor_numel(dw));
    notePrechecked(ctx, dw, bad);
  }
  return AMPRT_OK;
}
