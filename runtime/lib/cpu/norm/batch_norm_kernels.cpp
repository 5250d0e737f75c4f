//===- batch_norm_kernels.cpp - batch norm's shared loops ----------------===//
//
// Statistics and arithmetic in double, whatever the element type (f16 / bf16
// activations are the storage class: widened exactly, rounded once on store).
//
//===----------------------------------------------------------------------===//

#include "cpu/norm/batch_norm_kernels.h"

#include "common/check.h"
#include "common/convert_avx2.h"
#include "common/convert_bits.h"
#include "cpu/elementwise/elementwise.h"
#include "host/scratch.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace amprt::bn {

namespace {
#if defined(__x86_64__)
/// shiftedSums' vector body (AVX2, no FMA: the scalar loop's roundings):
/// lanes 0-3 and 4-7 of each sum are partials [0..3] and [4..7].
__attribute__((target("avx2"))) int64_t shiftedSums8(const float *x, const float *dy, int64_t n,
                                                     double k, double (*acc)[8]) {
  __m256d kk = _mm256_set1_pd(k), z = _mm256_setzero_pd();
  __m256d s0 = z, s1 = z, q0 = z, q1 = z, a0 = z, a1 = z, p0 = z, p1 = z;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 xv = _mm256_loadu_ps(x + i);
    __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(xv)), kk);
    __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1)), kk);
    s0 = _mm256_add_pd(s0, d0);
    s1 = _mm256_add_pd(s1, d1);
    q0 = _mm256_add_pd(q0, _mm256_mul_pd(d0, d0));
    q1 = _mm256_add_pd(q1, _mm256_mul_pd(d1, d1));
    if (dy) {
      __m256 gv = _mm256_loadu_ps(dy + i);
      __m256d g0 = _mm256_cvtps_pd(_mm256_castps256_ps128(gv));
      __m256d g1 = _mm256_cvtps_pd(_mm256_extractf128_ps(gv, 1));
      a0 = _mm256_add_pd(a0, g0);
      a1 = _mm256_add_pd(a1, g1);
      p0 = _mm256_add_pd(p0, _mm256_mul_pd(g0, d0));
      p1 = _mm256_add_pd(p1, _mm256_mul_pd(g1, d1));
    }
  }
  __m256d lo[4] = {s0, q0, a0, p0}, hi[4] = {s1, q1, a1, p1};
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_pd(acc[j], lo[j]);
    _mm256_storeu_pd(acc[j] + 4, hi[j]);
  }
  return i;
}
#endif

/// reluGradF32 (dy * (z > 0), the gradient a batch norm followed by a ReLU
/// receives) with an f16 / bf16 z read as its bits: z > 0 exactly where the
/// bits, as a signed 16-bit integer, lie in (0, largest finite] (the sign
/// clear, not zero, not NaN).
AMPRT_CLONES void maskInto16(const float *dy, const uint16_t *z, int32_t finite, float *out,
                             int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    int32_t v = (int16_t)z[i];
    out[i] = dy[i] * (float)((v > 0) & (v <= finite));
  }
}
} // namespace

/// A row's shifted sums, in double with eight partial sums each (no single
/// dependency chain): out[0], out[1] = sums of d = x - k and d^2; with dy,
/// out[2], out[3] = sums of dy and dy * d (the recomputing gradient's
/// pass).
void shiftedSums(const float *x, const float *dy, int64_t n, double k, double *out) {
  double acc[4][8] = {};
  int64_t i = 0;
#if defined(__x86_64__)
  if (n >= 8 && amprt::avx2::haveAvx2F16c())
    i = shiftedSums8(x, dy, n, k, acc);
#endif
  for (; i < n; ++i) {
    double d = (double)x[i] - k;
    acc[0][i & 7] += d;
    acc[1][i & 7] += d * d;
    if (dy) {
      double g = dy[i];
      acc[2][i & 7] += g;
      acc[3][i & 7] += g * d;
    }
  }
  for (int j = 0; j < (dy ? 4 : 2); ++j) {
    const double *v = acc[j];
    out[j] = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  }
}

/// ReLU in place, as amprt_unary's: v where v > 0 or v is NaN, else +0
/// (no branch: the signs are random).
AMPRT_CLONES void reluRow(float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = y[i];
    y[i] = ((v > 0.0f) | (v != v)) ? v : 0.0f;
  }
}

/// dy * (z > 0) into out for z of any float type (z: n elements of type zt).
void maskAny(const float *dy, const void *z, amprt_dtype zt, float *out, int64_t n) {
  if (zt == AMPRT_F32)
    reluGradF32(static_cast<const float *>(z), dy, out, n);
  else
    maskInto16(dy, static_cast<const uint16_t *>(z), zt == AMPRT_BF16 ? 0x7F80 : 0x7C00, out, n);
}

/// Column sums of d = x - k[column] and of d^2 (the short planes'
/// statistics, shifted as shiftedSums).
AMPRT_CLONES void colAddShifted(double *s, double *q, const float *x, const double *k, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double d = (double)x[i] - k[i];
    s[i] += d;
    q[i] += d * d;
  }
}

AMPRT_CLONES void colAddGrad(double *sd, double *sx, const float *x, const float *dy,
                             const double *mu, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double d = dy[i];
    sd[i] += d;
    sx[i] += d * ((double)x[i] - mu[i]);
  }
}

/// normalizeRow with per-column statistics.
AMPRT_CLONES void colNormalize(const float *x, float *y, const double *mu, const double *is,
                               const double *g, const double *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = (float)((x[i] - mu[i]) * is[i] * g[i] + b[i]);
}

/// bnGradDx with per-column statistics.
AMPRT_CLONES void colGradDx(const float *x, const float *dy, float *dx, const double *mu,
                            const double *is, const double *k, const double *sdy,
                            const double *sdyx, double m, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double xhat = ((double)x[i] - mu[i]) * is[i];
    dx[i] = (float)(k[i] * (m * (double)dy[i] - sdy[i] - xhat * sdyx[i]));
  }
}

/// The short planes' shifted sums (see shiftedSums) per channel: the
/// shifts (each channel's first value) and the sums of d and d^2, each
/// column summed over the rows, a channel's columns added in order.
void columnShiftedSums(const amprt_tensor *x, int64_t n, int64_t c, int64_t inner,
                       std::vector<double> &shift, std::vector<double> &sum,
                       std::vector<double> &sumSq) {
  int64_t cols = c * inner;
  shift.assign(c, 0.0);
  for (int64_t ch = 0; n > 0 && inner > 0 && ch < c; ++ch) // (an empty x has no first value)
    shift[ch] = loadF(x->data, x->dtype, ch * inner);
  // (References: the lambda runs on other threads, whose own thread_local
  // objects are not these.)
  thread_local ScratchVec<double> tls, tlq;
  std::vector<double> &s = tls, &q = tlq;
  s.assign(cols, 0.0);
  q.assign(cols, 0.0);
  forColumnChunks(n, cols, [&](int64_t j0, int64_t j1) {
    float buf[kChunk];
    double kC[kChunk];
    expand(shift.data(), inner, j0, j1 - j0, kC);
    for (int64_t b = 0; b < n; ++b)
      colAddShifted(s.data() + j0, q.data() + j0,
                    rowF32(x->data, x->dtype, b * cols + j0, j1 - j0, buf), kC, j1 - j0);
  });
  sum.resize(c);
  sumSq.resize(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    sum[ch] = channelSum(s, ch, inner);
    sumSq[ch] = channelSum(q, ch, inner);
  }
}

} // namespace amprt::bn
