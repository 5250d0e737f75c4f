//===- batch_norm.cpp - batch normalisation -------------------------------===//
//
// Statistics and arithmetic in double, whatever the element type (f16 / bf16
// activations are the storage class: widened exactly, rounded once on store).
//
//===----------------------------------------------------------------------===//

#include "cpu/norm/batch_norm_avx512.h"
#include "cpu/norm/batch_norm_kernels.h"

#include "common/check.h"
#include "common/convert.h"
#include "common/convert_avx2.h"
#include "common/convert_bits.h"
#include "cpu/elementwise/elementwise.h"
#include "host/threads.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace amprt;
using namespace amprt::bn;

namespace {
/// y = (x - mu) * invStd * g + b in double, rounded once.
AMPRT_CLONES void normalizeRow(const float *x, float *y, int64_t n, double mu, double invStd,
                               double g, double b) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = (float)((x[i] - mu) * invStd * g + b);
}
} // namespace

extern "C" amprt_status amprt_batch_norm(amprt_context *ctx, const amprt_tensor *x,
                                         const amprt_tensor *scale, const amprt_tensor *bias,
                                         const amprt_tensor *mean, const amprt_tensor *var,
                                         float epsilon, float momentum, int training,
                                         amprt_tensor *y, amprt_tensor *running_mean,
                                         amprt_tensor *running_var, amprt_tensor *save_mean,
                                         amprt_tensor *save_inv_std) {
  return amprt_batch_norm_ex(ctx, x, scale, bias, mean, var, epsilon, momentum, training, 0, y,
                             running_mean, running_var, save_mean, save_inv_std);
}

extern "C" amprt_status amprt_batch_norm_ex(amprt_context *, const amprt_tensor *x,
                                            const amprt_tensor *scale, const amprt_tensor *bias,
                                            const amprt_tensor *mean, const amprt_tensor *var,
                                            float epsilon, float momentum, int training,
                                            int32_t flags, amprt_tensor *y,
                                            amprt_tensor *running_mean, amprt_tensor *running_var,
                                            amprt_tensor *save_mean, amprt_tensor *save_inv_std) {
  if (flags & ~AMPRT_BN_RELU)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_batch_norm: unknown flags %d", (int)flags);
  const bool relu = flags & AMPRT_BN_RELU;
  AMPRT_CHECK(checkFloat(x, "amprt_batch_norm: x"));
  AMPRT_CHECK(checkFloat(y, "amprt_batch_norm: y"));
  if (x->rank < 2 || !amprt_tensor_is_contiguous(x) || !sameShape(x, y) ||
      !amprt_tensor_is_contiguous(y))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_batch_norm: x and y must be contiguous [N, C, ...] of "
                "one shape");
  int64_t n = x->shape[0], c = x->shape[1], inner = 1;
  for (int32_t d = 2; d < x->rank; ++d)
    inner *= x->shape[d];
  AMPRT_CHECK(checkChannel(scale, c, "amprt_batch_norm: scale"));
  AMPRT_CHECK(checkChannel(bias, c, "amprt_batch_norm: bias"));
  AMPRT_CHECK(checkChannel(mean, c, "amprt_batch_norm: mean"));
  AMPRT_CHECK(checkChannel(var, c, "amprt_batch_norm: var"));
  for (amprt_tensor *t : {running_mean, running_var})
    if (t)
      AMPRT_CHECK(checkChannel(t, c, "amprt_batch_norm: running statistics"));
  for (amprt_tensor *t : {save_mean, save_inv_std})
    if (t && (t->dtype != AMPRT_F32 || amprt_tensor_numel(t) != c))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_batch_norm: saved statistics must be f32 [%lld]", (long long)c);
  int64_t m = n * inner;
  // A channel's running statistics, saved statistics and 1 / sqrt(var +
  // eps) from its batch (training) or running statistics.
  auto statistics = [&](int64_t ch, double &mu, double &variance) {
    double oldMean = loadF(mean->data, mean->dtype, ch);
    double oldVar = loadF(var->data, var->dtype, ch);
    if (training) {
      if (running_mean)
        storeF(running_mean->data, running_mean->dtype, ch,
               (float)(momentum * oldMean + (1.0 - momentum) * mu));
      if (running_var)
        storeF(running_var->data, running_var->dtype, ch,
               (float)(momentum * oldVar + (1.0 - momentum) * variance));
    } else {
      mu = oldMean;
      variance = oldVar;
      if (running_mean)
        storeF(running_mean->data, running_mean->dtype, ch, (float)oldMean);
      if (running_var)
        storeF(running_var->data, running_var->dtype, ch, (float)oldVar);
    }
    double invStd = 1.0 / std::sqrt(variance + (double)epsilon);
    if (save_mean)
      static_cast<float *>(save_mean->data)[ch] = (float)mu;
    if (save_inv_std)
      static_cast<float *>(save_inv_std->data)[ch] = (float)invStd;
    return invStd;
  };
#if defined(__x86_64__)
  if (int shift = packedShift(inner); m > 0 && shift >= 0 && useBn512({x, y})) {
    forPackedGroups(c, n, shift, [&](int64_t ch0, int64_t count) {
      double k[16] = {}, mu[16] = {}, variance[16] = {}, is[16] = {}, g[16] = {}, bb[16] = {},
             r[4][16];
      if (training) {
        for (int64_t j = 0; j < count; ++j)
          k[j] = loadF(x->data, x->dtype, (ch0 + j) * inner);
        bn512Kernels().packedSums(x->data, x->dtype, nullptr, AMPRT_F32, nullptr, AMPRT_F32, n, c,
                                  shift, ch0, count, k, r);
        for (int64_t j = 0; j < count; ++j)
          shiftedMoments(k[j], r[0][j], r[1][j], (double)m, mu[j], variance[j]);
      }
      for (int64_t j = 0; j < count; ++j) {
        is[j] = statistics(ch0 + j, mu[j], variance[j]);
        g[j] = loadF(scale->data, scale->dtype, ch0 + j);
        bb[j] = loadF(bias->data, bias->dtype, ch0 + j);
      }
      bn512Kernels().packedNormalize(x->data, x->dtype, y->data, y->dtype, n, c, shift, ch0, count,
                                     mu, is, g, bb, relu);
    });
    return AMPRT_OK;
  }
  if (m > 0 && inner >= kVectorPlane && useBn512({x, y})) {
    size_t xb = amprt_dtype_size(x->dtype), yb = amprt_dtype_size(y->dtype);
    parallelFor(c, std::max<int64_t>(1, kBnGrain / m), 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        Planes xp{static_cast<const char *>(x->data) + ch * inner * xb, x->dtype, c * inner};
        double mu = 0.0, variance = 0.0;
        if (training) {
          double k = loadF(x->data, x->dtype, ch * inner), r[4];
          bn512Kernels().channelSums(xp, nullptr, nullptr, n, inner, k, r);
          shiftedMoments(k, r[0], r[1], (double)m, mu, variance);
        }
        double invStd = statistics(ch, mu, variance);
        bn512Kernels().normalize(xp, static_cast<char *>(y->data) + ch * inner * yb, y->dtype, n,
                                 inner, mu, invStd, loadF(scale->data, scale->dtype, ch),
                                 loadF(bias->data, bias->dtype, ch), relu);
      }
    });
    return AMPRT_OK;
  }
#endif
  if (inner < kShortPlane) {
    // Short planes: the column path (see kShortPlane). The column sums'
    // buffers stay with the thread (no allocation per call).
    int64_t cols = c * inner;
    std::vector<double> mu(c, 0.0), variance(c, 0.0), is(c), g(c), bb(c);
    if (training) {
      std::vector<double> shift, sum, sumSq;
      columnShiftedSums(x, n, c, inner, shift, sum, sumSq);
      for (int64_t ch = 0; ch < c; ++ch)
        shiftedMoments(shift[ch], sum[ch], sumSq[ch], (double)m, mu[ch], variance[ch]);
    }
    for (int64_t ch = 0; ch < c; ++ch) {
      is[ch] = statistics(ch, mu[ch], variance[ch]);
      g[ch] = loadF(scale->data, scale->dtype, ch);
      bb[ch] = loadF(bias->data, bias->dtype, ch);
    }
    columnOutputs(y, n, cols, [&](int64_t j0, int64_t len, auto &&rows) {
      double muC[kChunk], isC[kChunk], gC[kChunk], bC[kChunk];
      expand(mu.data(), inner, j0, len, muC);
      expand(is.data(), inner, j0, len, isC);
      expand(g.data(), inner, j0, len, gC);
      expand(bb.data(), inner, j0, len, bC);
      rows([&](float *out, int64_t off) {
        float buf[kChunk];
        colNormalize(rowF32(x->data, x->dtype, off, len, buf), out, muC, isC, gC, bC, len);
        if (relu)
          reluRow(out, len);
      });
    });
    return AMPRT_OK;
  }
  // f16 / bf16 x or y (the storage class: low-precision activations, f32
  // statistics and arithmetic): a channel's planes are widened into the
  // thread's buffer (exactly), normalised there and narrowed into y (one
  // rounding from f32, as the f32 kernel's result would be), so every type
  // runs the f32 kernel's arithmetic with vector conversions.
  bool xHalf = isHalf(x->dtype), yHalf = isHalf(y->dtype);
  size_t xb = amprt_dtype_size(x->dtype), yb = amprt_dtype_size(y->dtype);
  // Channels on the threads (each channel's statistics and outputs are its own).
  parallelFor(c, std::max<int64_t>(1, 32768 / std::max<int64_t>(m, 1)), 1,
              [&](int64_t c0, int64_t c1) {
                std::vector<float> chan(xHalf || yHalf ? m : 0);
                for (int64_t ch = c0; ch < c1; ++ch) {
                  if (xHalf)
                    for (int64_t b = 0; b < n; ++b)
                      widenRun(static_cast<const char *>(x->data) + (b * c + ch) * inner * xb,
                               x->dtype, chan.data() + b * inner, inner);
                  // Plane b of this channel as f32.
                  auto plane = [&](int64_t b) -> const float * {
                    return xHalf ? chan.data() + b * inner
                                 : static_cast<const float *>(x->data) + (b * c + ch) * inner;
                  };
                  double mu = 0.0, variance = 0.0;
                  if (training) {
                    double k = m > 0 ? plane(0)[0] : 0.0, r[2] = {0, 0};
                    for (int64_t b = 0; b < n; ++b) {
                      double p[2];
                      shiftedSums(plane(b), nullptr, inner, k, p);
                      r[0] += p[0];
                      r[1] += p[1];
                    }
                    shiftedMoments(k, r[0], r[1], (double)m, mu, variance);
                  }
                  double invStd = statistics(ch, mu, variance);
                  double g = loadF(scale->data, scale->dtype, ch);
                  double bb = loadF(bias->data, bias->dtype, ch);
                  if (yHalf) {
                    // In place over the widened planes (or into the buffer from an
                    // f32 x), then narrowed plane by plane.
                    for (int64_t b = 0; b < n; ++b) {
                      float *o = chan.data() + b * inner;
                      normalizeRow(plane(b), o, inner, mu, invStd, g, bb);
                      if (relu)
                        reluRow(o, inner);
                      narrowRun(o, static_cast<char *>(y->data) + (b * c + ch) * inner * yb,
                                y->dtype, inner);
                    }
                    continue;
                  }
                  float *yf = static_cast<float *>(y->data);
                  for (int64_t b = 0; b < n; ++b) { // the same arithmetic, typed
                    normalizeRow(plane(b), yf + (b * c + ch) * inner, inner, mu, invStd, g, bb);
                    if (relu)
                      reluRow(yf + (b * c + ch) * inner, inner);
                  }
                }
              });
  return AMPRT_OK;
}
