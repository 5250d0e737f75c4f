//===- batch_norm_grad.cpp - batch normalisation's gradients -------------===//
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
#include "host/scratch.h"
#include "host/threads.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace amprt;
using namespace amprt::bn;

namespace {
/// dx = g * is / m * (m * dy - sdy - xhat * sdyx) over a row, in double.
AMPRT_CLONES void bnGradDx(const float *x, const float *dy, float *dx, int64_t n, double mu,
                           double is, double g, double m, double sdy, double sdyx) {
  double k = g * is / m;
  for (int64_t i = 0; i < n; ++i) {
    double xhat = ((double)x[i] - mu) * is;
    dx[i] = (float)(k * (m * (double)dy[i] - sdy - xhat * sdyx));
  }
}

/// The gradient's arguments (save_mean / save_inv_std when given).
amprt_status checkGrad(const char *k, const amprt_tensor *x, const amprt_tensor *scale,
                       const amprt_tensor *save_mean, const amprt_tensor *save_inv_std,
                       const amprt_tensor *dy, const amprt_tensor *dx, const amprt_tensor *dscale,
                       const amprt_tensor *dbias, const amprt_tensor *mask = nullptr) {
  std::string w = k;
  AMPRT_CHECK(checkFloat(x, (w + ": x").c_str()));
  AMPRT_CHECK(checkFloat(dy, (w + ": dy").c_str()));
  if (x->rank < 2 || !amprt_tensor_is_contiguous(x) || !sameShape(x, dy) ||
      !amprt_tensor_is_contiguous(dy))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: x and dy must be contiguous [N, C, ...], one shape", k);
  int64_t c = x->shape[1];
  AMPRT_CHECK(checkChannel(scale, c, (w + ": scale").c_str()));
  if (save_mean)
    AMPRT_CHECK(checkChannel(save_mean, c, (w + ": save_mean").c_str()));
  if (save_inv_std)
    AMPRT_CHECK(checkChannel(save_inv_std, c, (w + ": save_inv_std").c_str()));
  if (mask) {
    AMPRT_CHECK(checkFloat(mask, (w + ": z").c_str()));
    if (!sameShape(x, mask) || !amprt_tensor_is_contiguous(mask))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: z must be contiguous, of x's shape %s", k,
                  shapeString(x).c_str());
  }
  if (dx) {
    AMPRT_CHECK(checkFloat(dx, (w + ": dx").c_str()));
    if (!sameShape(x, dx) || !amprt_tensor_is_contiguous(dx))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: dx must be contiguous, of x's shape %s", k,
                  shapeString(x).c_str());
  }
  if (dscale)
    AMPRT_CHECK(checkChannel(dscale, c, (w + ": dscale").c_str()));
  if (dbias)
    AMPRT_CHECK(checkChannel(dbias, c, (w + ": dbias").c_str()));
  return AMPRT_OK;
}

/// The gradient (arguments checked), from save_mean / save_inv_std, or
/// (recompute) from the batch statistics of x as amprt_batch_norm
/// computes them, found in the pass that sums dy and dy * (x - mean).
amprt_status batchNormGrad(const amprt_tensor *x, const amprt_tensor *scale,
                           const amprt_tensor *save_mean, const amprt_tensor *save_inv_std,
                           bool recompute, float epsilon, const amprt_tensor *dy, amprt_tensor *dx,
                           amprt_tensor *dscale, amprt_tensor *dbias,
                           const amprt_tensor *mask = nullptr) {
  int64_t n = x->shape[0], c = x->shape[1], inner = 1;
  for (int32_t d = 2; d < x->rank; ++d)
    inner *= x->shape[d];
  double m = (double)n * inner;
  // The channel's first value: the recomputing sums' shift.
  auto first = [&](int64_t ch) -> double {
    return m > 0 ? loadF(x->data, x->dtype, ch * inner) : 0.0;
  };
  // A channel's mean, 1 / std, sum dy and sum dy * xhat, dscale and dbias
  // stored: sums(k, r) sums d = x - k, d^2, dy and dy * d over the channel,
  // k its first value (recompute: the statistics from the same pass; sum dy
  // (x - mean) = sum dy d - (mean - k) sum dy) or its saved mean.
  auto channelGrad = [&](int64_t ch, auto &&sums, double &mu, double &is, double &sdy,
                         double &sdyx) {
    double k = recompute ? first(ch) : loadF(save_mean->data, save_mean->dtype, ch), r[4];
    sums(k, r);
    if (recompute) {
      float mf, isf;
      shiftedStatistics(k, r[0], r[1], m, epsilon, mf, isf);
      mu = mf;
      is = isf;
      sdyx = r[3] - (mu - k) * r[2];
    } else {
      mu = k;
      is = loadF(save_inv_std->data, save_inv_std->dtype, ch);
      sdyx = r[3];
    }
    sdy = r[2];
    sdyx *= is;
    if (dscale)
      storeF(dscale->data, dscale->dtype, ch, (float)sdyx);
    if (dbias)
      storeF(dbias->data, dbias->dtype, ch, (float)sdy);
  };
#if defined(__x86_64__)
  if (int shift = packedShift(inner); m > 0 && shift >= 0 && useBn512({x, dy, dx, mask})) {
    forPackedGroups(c, n, shift, [&](int64_t ch0, int64_t count) {
      double k[16] = {}, r[4][16], mu[16] = {}, is[16] = {}, sdy[16] = {}, sdyx[16] = {},
             kk[16] = {};
      for (int64_t j = 0; j < count; ++j)
        k[j] = recompute ? first(ch0 + j) : loadF(save_mean->data, save_mean->dtype, ch0 + j);
      bn512Kernels().packedSums(x->data, x->dtype, dy->data, dy->dtype, mask ? mask->data : nullptr,
                                mask ? mask->dtype : AMPRT_F32, n, c, shift, ch0, count, k, r);
      for (int64_t j = 0; j < count; ++j) {
        channelGrad(
            ch0 + j,
            [&](double, double *o) {
              for (int q = 0; q < 4; ++q)
                o[q] = r[q][j];
            },
            mu[j], is[j], sdy[j], sdyx[j]);
        kk[j] = loadF(scale->data, scale->dtype, ch0 + j) * is[j] / m;
      }
      if (dx)
        bn512Kernels().packedGradDx(x->data, x->dtype, dy->data, dy->dtype,
                                    mask ? mask->data : nullptr, mask ? mask->dtype : AMPRT_F32,
                                    dx->data, dx->dtype, n, c, shift, ch0, count, mu, is, kk, m,
                                    sdy, sdyx);
    });
    return AMPRT_OK;
  }
  if (m > 0 && inner >= kVectorPlane && useBn512({x, dy, dx, mask})) {
    size_t xb = amprt_dtype_size(x->dtype), db = amprt_dtype_size(dy->dtype),
           zb = mask ? amprt_dtype_size(mask->dtype) : 0;
    parallelFor(c, std::max<int64_t>(1, kBnGrain / (int64_t)m), 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        int64_t at = ch * inner;
        Planes xp{static_cast<const char *>(x->data) + at * xb, x->dtype, c * inner};
        Planes dp{static_cast<const char *>(dy->data) + at * db, dy->dtype, c * inner};
        Planes zp{mask ? static_cast<const char *>(mask->data) + at * zb : nullptr,
                  mask ? mask->dtype : AMPRT_F32, c * inner};
        const Planes *z = mask ? &zp : nullptr;
        double mu, is, sdy, sdyx;
        channelGrad(
            ch,
            [&](double k, double *r) { bn512Kernels().channelSums(xp, &dp, z, n, inner, k, r); },
            mu, is, sdy, sdyx);
        double g = loadF(scale->data, scale->dtype, ch);
        if (dx)
          bn512Kernels().gradDx(xp, dp, z,
                                static_cast<char *>(dx->data) + at * amprt_dtype_size(dx->dtype),
                                dx->dtype, n, inner, mu, is, g * is / m, m, sdy, sdyx);
      }
    });
    return AMPRT_OK;
  }
#endif
  if (inner < kShortPlane) {
    // Short planes: the column path (see kShortPlane).
    int64_t cols = c * inner;
    std::vector<double> mu(c), is(c);
    if (recompute) {
      std::vector<double> shift, sum, sumSq;
      columnShiftedSums(x, n, c, inner, shift, sum, sumSq);
      for (int64_t ch = 0; ch < c; ++ch) {
        float mf, isf;
        shiftedStatistics(shift[ch], sum[ch], sumSq[ch], m, epsilon, mf, isf);
        mu[ch] = mf;
        is[ch] = isf;
      }
    } else {
      for (int64_t ch = 0; ch < c; ++ch) {
        mu[ch] = loadF(save_mean->data, save_mean->dtype, ch);
        is[ch] = loadF(save_inv_std->data, save_inv_std->dtype, ch);
      }
    }
    // A row segment of dy as f32 (with a mask: dy * (z > 0), in bd).
    auto dyRow = [&](int64_t off, int64_t len, float *bd) -> const float * {
      const float *r = rowF32(dy->data, dy->dtype, off, len, bd);
      if (!mask)
        return r;
      maskAny(r, static_cast<const char *>(mask->data) + off * amprt_dtype_size(mask->dtype),
              mask->dtype, bd, len);
      return bd;
    };
    thread_local ScratchVec<double> tlsd, tlsx;
    std::vector<double> &sd = tlsd, &sx = tlsx; // (the calling thread's, as above)
    sd.assign(cols, 0.0);
    sx.assign(cols, 0.0);
    forColumnChunks(n, cols, [&](int64_t j0, int64_t j1) {
      float bx[kChunk], bd[kChunk];
      double muC[kChunk];
      expand(mu.data(), inner, j0, j1 - j0, muC);
      for (int64_t b = 0; b < n; ++b) {
        int64_t off = b * cols + j0;
        colAddGrad(sd.data() + j0, sx.data() + j0, rowF32(x->data, x->dtype, off, j1 - j0, bx),
                   dyRow(off, j1 - j0, bd), muC, j1 - j0);
      }
    });
    std::vector<double> k(c), sdy(c), sdyx(c);
    for (int64_t ch = 0; ch < c; ++ch) {
      sdy[ch] = channelSum(sd, ch, inner);
      sdyx[ch] = channelSum(sx, ch, inner) * is[ch];
      k[ch] = loadF(scale->data, scale->dtype, ch) * is[ch] / m;
      if (dscale)
        storeF(dscale->data, dscale->dtype, ch, (float)sdyx[ch]);
      if (dbias)
        storeF(dbias->data, dbias->dtype, ch, (float)sdy[ch]);
    }
    if (!dx)
      return AMPRT_OK;
    columnOutputs(dx, n, cols, [&](int64_t j0, int64_t len, auto &&rows) {
      double muC[kChunk], isC[kChunk], kC[kChunk], sdyC[kChunk], sdyxC[kChunk];
      expand(mu.data(), inner, j0, len, muC);
      expand(is.data(), inner, j0, len, isC);
      expand(k.data(), inner, j0, len, kC);
      expand(sdy.data(), inner, j0, len, sdyC);
      expand(sdyx.data(), inner, j0, len, sdyxC);
      rows([&](float *out, int64_t off) {
        float bx[kChunk], bd[kChunk];
        colGradDx(rowF32(x->data, x->dtype, off, len, bx), dyRow(off, len, bd), out, muC, isC, kC,
                  sdyC, sdyxC, m, len);
      });
    });
    return AMPRT_OK;
  }
  // f16 / bf16 x, dy or dx: a channel's planes of x and dy widened into the
  // thread's buffers (exactly), dx computed in f32 and narrowed plane by
  // plane (one rounding), so every type runs the f32 kernel's arithmetic.
  bool xHalf = isHalf(x->dtype), dyHalf = isHalf(dy->dtype), dxHalf = dx && isHalf(dx->dtype);
  size_t xb = amprt_dtype_size(x->dtype), db = amprt_dtype_size(dy->dtype);
  int64_t count = n * inner;
  // Channels on the threads (each channel's sums and dx are its own).
  parallelFor(
      c, std::max<int64_t>(1, 32768 / std::max<int64_t>(count, 1)), 1, [&](int64_t c0, int64_t c1) {
        bool dyCopy = dyHalf || mask; // dy in the buffer (widened, and / or masked)
        std::vector<float> xs(xHalf ? count : 0), dys(dyCopy ? count : 0), zs(mask ? inner : 0),
            out(dxHalf ? inner : 0);
        for (int64_t ch = c0; ch < c1; ++ch) {
          for (int64_t b = 0; xHalf && b < n; ++b)
            widenRun(static_cast<const char *>(x->data) + (b * c + ch) * inner * xb, x->dtype,
                     xs.data() + b * inner, inner);
          for (int64_t b = 0; dyCopy && b < n; ++b) {
            int64_t off = (b * c + ch) * inner;
            float *out = dys.data() + b * inner;
            const float *dp0 = static_cast<const float *>(dy->data) + off;
            if (dyHalf) {
              widenRun(static_cast<const char *>(dy->data) + off * db, dy->dtype, out, inner);
              dp0 = out;
            }
            if (mask)
              maskAny(dp0,
                      static_cast<const char *>(mask->data) + off * amprt_dtype_size(mask->dtype),
                      mask->dtype, out, inner);
          }
          // Plane b of this channel's x and dy as f32.
          auto xp = [&](int64_t b) -> const float * {
            return xHalf ? xs.data() + b * inner
                         : static_cast<const float *>(x->data) + (b * c + ch) * inner;
          };
          auto dp = [&](int64_t b) -> const float * {
            return dyCopy ? dys.data() + b * inner
                          : static_cast<const float *>(dy->data) + (b * c + ch) * inner;
          };
          // The sums in one pass over the planes (shifted: see shiftedSums).
          double mu, is, sdy, sdyx;
          channelGrad(
              ch,
              [&](double k, double *r) {
                r[0] = r[1] = r[2] = r[3] = 0.0;
                for (int64_t b = 0; b < n; ++b) {
                  double p[4];
                  shiftedSums(xp(b), dp(b), inner, k, p);
                  for (int j = 0; j < 4; ++j)
                    r[j] += p[j];
                }
              },
              mu, is, sdy, sdyx);
          double g = loadF(scale->data, scale->dtype, ch);
          if (!dx)
            continue;
          for (int64_t b = 0; b < n; ++b) {
            const float *xf = xp(b), *df = dp(b);
            float *of = dxHalf ? out.data() : static_cast<float *>(dx->data) + (b * c + ch) * inner;
            bnGradDx(xf, df, of, inner, mu, is, g, m, sdy, sdyx);
            if (dxHalf)
              narrowRun(of,
                        static_cast<char *>(dx->data) +
                            (b * c + ch) * inner * amprt_dtype_size(dx->dtype),
                        dx->dtype, inner);
          }
        }
      });
  return AMPRT_OK;
}
} // namespace

extern "C" amprt_status amprt_batch_norm_grad(amprt_context *, const amprt_tensor *x,
                                              const amprt_tensor *scale,
                                              const amprt_tensor *save_mean,
                                              const amprt_tensor *save_inv_std,
                                              const amprt_tensor *dy, amprt_tensor *dx,
                                              amprt_tensor *dscale, amprt_tensor *dbias) {
  AMPRT_CHECK(
      checkGrad("amprt_batch_norm_grad", x, scale, save_mean, save_inv_std, dy, dx, dscale, dbias));
  return batchNormGrad(x, scale, save_mean, save_inv_std, false, 0.0f, dy, dx, dscale, dbias);
}

extern "C" amprt_status amprt_batch_norm_relu_grad_recompute(amprt_context *, const amprt_tensor *x,
                                                             const amprt_tensor *scale,
                                                             const amprt_tensor *z,
                                                             const amprt_tensor *dz, float epsilon,
                                                             amprt_tensor *dx, amprt_tensor *dscale,
                                                             amprt_tensor *dbias) {
  AMPRT_CHECK(checkGrad("amprt_batch_norm_relu_grad_recompute", x, scale, nullptr, nullptr, dz, dx,
                        dscale, dbias, z));
  return batchNormGrad(x, scale, nullptr, nullptr, true, epsilon, dz, dx, dscale, dbias, z);
}

extern "C" amprt_status amprt_batch_norm_grad_recompute(amprt_context *, const amprt_tensor *x,
                                                        const amprt_tensor *scale,
                                                        const amprt_tensor *dy, float epsilon,
                                                        amprt_tensor *dx, amprt_tensor *dscale,
                                                        amprt_tensor *dbias) {
  AMPRT_CHECK(checkGrad("amprt_batch_norm_grad_recompute", x, scale, nullptr, nullptr, dy, dx,
                        dscale, dbias));
  return batchNormGrad(x, scale, nullptr, nullptr, true, epsilon, dy, dx, dscale, dbias);
}
