//===- batch_norm.cpp - batch normalisation and its gradient -------------===//
//
// Statistics and arithmetic in double, whatever the element type (f16 / bf16
// activations are the storage class: widened exactly, rounded once on store).
//
//===----------------------------------------------------------------------===//

#include "convert_avx2.h"
#include "convert_bits.h"
#include "internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace amprt;

void amprt::widenRun(const void *src, amprt_dtype t, float *dst, int64_t n) {
  if (n >= 8 || t == AMPRT_F32) {
    convertRun(src, t, dst, AMPRT_F32, (size_t)n);
    return;
  }
  const uint16_t *h = static_cast<const uint16_t *>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b = t == AMPRT_BF16 ? bits::bf16ToF32(h[i]) : bits::f16ToF32(h[i]);
    std::memcpy(dst + i, &b, 4);
  }
}

void amprt::narrowRun(const float *src, void *dst, amprt_dtype t, int64_t n) {
  if (n >= 8 || t == AMPRT_F32) {
    convertRun(src, AMPRT_F32, dst, t, (size_t)n);
    return;
  }
  uint16_t *h = static_cast<uint16_t *>(dst);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, src + i, 4);
    h[i] = t == AMPRT_BF16 ? bits::f32ToBf16(b) : bits::f32ToF16(b);
  }
}

namespace {

// The batch statistics, shifted: with d = x - k, k a channel's first
// value (close to its mean wherever its values are close to each other, so
// nothing below cancels), a channel's sums of d and d^2 give its mean k +
// sum d / m and its (biased) variance sum d^2 / m - (sum d / m)^2 in one
// pass. amprt_batch_norm and the recomputing gradient find them the same
// way, in the same order: the same statistics to the bit.

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

/// A channel's mean and biased variance from its shifted sums (the shift
/// k, sums of d and d^2 over m values).
inline void shiftedMoments(double k, double s, double q, double m, double &mean, double &variance) {
  double dm = s / m;
  mean = k + dm;
  variance = std::max(0.0, q / m - dm * dm);
}

/// ... and the mean and 1 / sqrt(var + eps) as amprt_batch_norm saves them.
inline void shiftedStatistics(double k, double s, double q, double m, float epsilon, float &mean,
                              float &invStd) {
  double mu, variance;
  shiftedMoments(k, s, q, m, mu, variance);
  mean = (float)mu;
  invStd = (float)(1.0 / std::sqrt(variance + (double)epsilon));
}

// Short planes (a late layer's 2 x 2 to 5 x 5 maps, fewer than
// kShortPlane elements): the per-plane loops cannot vectorise over a few
// elements and pay a call per plane, so x is read as rows [N, C * inner]
// instead: each column is summed over the rows in double (vector adds
// along the rows), a channel's sums are its inner columns added in order,
// and the outputs run along the rows with per-column copies of the
// channels' statistics. Columns go to the threads in chunks of kChunk; a
// column's arithmetic does not depend on the split.
constexpr int64_t kShortPlane = 32;
constexpr int64_t kChunk = 256;

/// The row segment [off, off + len) of a tensor of type t as f32: itself,
/// or widened into buf (exactly).
inline const float *rowF32(const void *base, amprt_dtype t, int64_t off, int64_t len, float *buf) {
  if (t == AMPRT_F32)
    return static_cast<const float *>(base) + off;
  widenRun(static_cast<const char *>(base) + off * 2, t, buf, len);
  return buf;
}

/// ReLU in place, as amprt_unary's: v where v > 0 or v is NaN, else +0
/// (no branch: the signs are random).
AMPRT_CLONES void reluRow(float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = y[i];
    y[i] = ((v > 0.0f) | (v != v)) ? v : 0.0f;
  }
}

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

/// dy * (z > 0) into out for z of any float type (z: n elements of type zt).
void maskAny(const float *dy, const void *z, amprt_dtype zt, float *out, int64_t n) {
  if (zt == AMPRT_F32)
    reluGradF32(static_cast<const float *>(z), dy, out, n);
  else
    maskInto16(dy, static_cast<const uint16_t *>(z), zt == AMPRT_BF16 ? 0x7F80 : 0x7C00, out, n);
}

/// f(j0, j1) for the column chunks of [0, cols) on the threads (at least
/// 8k elements of the n rows each).
template <class F> void forColumnChunks(int64_t rows, int64_t cols, F f) {
  int64_t chunks = (cols + kChunk - 1) / kChunk;
  parallelFor(chunks, std::max<int64_t>(1, 8192 / std::max<int64_t>(rows * kChunk, 1)), 1,
              [&](int64_t k0, int64_t k1) {
                for (int64_t k = k0; k < k1; ++k)
                  f(k * kChunk, std::min(cols, (k + 1) * kChunk));
              });
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

/// Columns [j0, j0 + len) of per-channel values (each repeated over its
/// channel's inner columns), into out.
inline void expand(const double *perChannel, int64_t inner, int64_t j0, int64_t len, double *out) {
  int64_t ch = j0 / inner, end = j0 + len;
  for (int64_t j = j0; j < end; ++ch) {
    int64_t stop = std::min(end, (ch + 1) * inner);
    double v = perChannel[ch];
    for (; j < stop; ++j)
      out[j - j0] = v;
  }
}

/// A channel's sum: its inner columns added in order.
inline double channelSum(const std::vector<double> &s, int64_t ch, int64_t inner) {
  double r = 0.0;
  for (int64_t i = 0; i < inner; ++i)
    r += s[ch * inner + i];
  return r;
}

/// Writes y by column chunks: f(j0, len, rows) prepares chunk [j0, j0 +
/// len) and calls rows(g); g(out, off) computes the row segment at flat
/// offset off into out: y itself, or (f16 / bf16 y) a buffer then narrowed
/// into y.
template <class F> void columnOutputs(amprt_tensor *y, int64_t rows, int64_t cols, F f) {
  forColumnChunks(rows, cols, [&](int64_t j0, int64_t j1) {
    int64_t len = j1 - j0;
    f(j0, len, [&](auto &&g) {
      float buf[kChunk];
      for (int64_t b = 0; b < rows; ++b) {
        int64_t off = b * cols + j0;
        if (y->dtype == AMPRT_F32) {
          g(static_cast<float *>(y->data) + off, off);
        } else {
          g(buf, off);
          narrowRun(buf, static_cast<char *>(y->data) + off * 2, y->dtype, len);
        }
      }
    });
  });
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
  thread_local std::vector<double> tls, tlq;
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

} // namespace

// AVX-512 (x86-64 CPUs with AVX512F / BW / VL, AMPRT_NO_AVX512 unset; f32 and
// bf16 tensors): a channel's planes are read where they lie, sixteen
// elements at a time, widened in registers (bf16 exactly), with the same
// double arithmetic and one rounding to f32 per value (then to bf16, as
// the planes' narrowing above), and a channel's sums kept in vector
// registers over all its planes. The other paths widen each plane into a
// buffer and pay a call, a horizontal sum and a narrowing per plane, which
// cost more than the arithmetic on the 2 x 2 to 16 x 16 maps of a late
// layer. The statistics' sums are added in another order (double, eight
// lanes), the same for amprt_batch_norm and the recomputing gradient.
#if defined(__x86_64__)
AMPRT_AVX512_QUIET_BEGIN // (see internal.h)
namespace {

/// Planes of at least this many elements (4 x 4 maps and larger); shorter
/// ones fill too little of a vector, and the column path (see
/// kShortPlane) runs along the channels instead.
constexpr int64_t kVectorPlane = 16;

/// Tensors this path takes: f32 or bf16.
inline bool bn512Type(const amprt_tensor *t) {
  return !t || t->dtype == AMPRT_F32 || t->dtype == AMPRT_BF16;
}

/// One channel's planes: plane b's element i at base + b * stride + i.
struct Planes {
  const void *base;
  amprt_dtype type;
  int64_t stride;
};

// The kernels, without and with AVX512-BF16 (batch_norm_avx512.inc).
namespace bn512 {
#define AMPRT_BN512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define AMPRT_BN512_HW 0
#include "batch_norm_avx512.inc"
#undef AMPRT_BN512
#undef AMPRT_BN512_HW
} // namespace bn512
namespace bn512bf16 {
#define AMPRT_BN512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define AMPRT_BN512_HW 1
#include "batch_norm_avx512.inc"
#undef AMPRT_BN512
#undef AMPRT_BN512_HW
} // namespace bn512bf16

/// The kernels this CPU runs: the AVX512-BF16 build where it has that.
struct Bn512 {
  decltype(&bn512::channelSumsAny) channelSums;
  decltype(&bn512::normalizeAny) normalize;
  decltype(&bn512::gradDxAny) gradDx;
  decltype(&bn512::packedSums) packedSums;
  decltype(&bn512::packedNormalize) packedNormalize;
  decltype(&bn512::packedGradDx) packedGradDx;
};
const Bn512 &bn512Kernels() {
  static const Bn512 k =
      (amprt_cpu_features() & AMPRT_CPU_AVX512_BF16) && __builtin_cpu_supports("avx512dq")
          ? Bn512{bn512bf16::channelSumsAny, bn512bf16::normalizeAny,    bn512bf16::gradDxAny,
                  bn512bf16::packedSums,     bn512bf16::packedNormalize, bn512bf16::packedGradDx}
          : Bn512{bn512::channelSumsAny, bn512::normalizeAny,    bn512::gradDxAny,
                  bn512::packedSums,     bn512::packedNormalize, bn512::packedGradDx};
  return k;
}

/// The AVX-512 paths' work per thread: at least this many elements (a late
/// layer's whole batch norm is 16k to 128k of them, a few tens of
/// microseconds: worth both threads; 32k per thread kept them on one).
constexpr int64_t kBnGrain = 4096;

/// Channel groups of the packed small-plane path (see packedSums): f(ch0,
/// count) for each group of 16 / inner channels, on the threads.
template <class F> void forPackedGroups(int64_t c, int64_t n, int shift, F f) {
  int64_t per = 16 >> shift, groups = (c + per - 1) / per;
  parallelFor(groups, std::max<int64_t>(1, kBnGrain / std::max<int64_t>(n * 16, 1)), 1,
              [&](int64_t g0, int64_t g1) {
                for (int64_t gi = g0; gi < g1; ++gi)
                  f(gi * per, std::min(per, c - gi * per));
              });
}

/// Whether the AVX-512 path takes these tensors.
bool useBn512(std::initializer_list<const amprt_tensor *> ts) {
  static const bool vl = __builtin_cpu_supports("avx512vl");
  if (!haveAvx512bw() || !vl)
    return false;
  for (const amprt_tensor *t : ts)
    if (!bn512Type(t))
      return false;
  return true;
}

} // namespace
AMPRT_AVX512_QUIET_END
#endif

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
  if (int shift = bn512::packedShift(inner); m > 0 && shift >= 0 && useBn512({x, y})) {
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
  if (int shift = bn512::packedShift(inner); m > 0 && shift >= 0 && useBn512({x, dy, dx, mask})) {
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
    thread_local std::vector<double> tlsd, tlsx;
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
