//===- blocked_pool.cpp - pooling of channel-blocked tensors ----------------===//

#include "cpu/pool/pool.h"

#include "common/check.h"
#include "common/convert.h"
#include "common/convert_avx2.h"
#include "cpu/elementwise/elementwise.h"
#include "host/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace amprt;
using namespace amprt::pool;

namespace {

amprt_status checkBlocked(const amprt_tensor *t, int32_t block, const char *k, const char *what) {
  AMPRT_CHECK(check(t, k));
  if (block != 8 && block != 16)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: block size %d (8 or 16)", k, (int)block);
  if (t->dtype != AMPRT_F32 || t->rank != 4 || !amprt_tensor_is_contiguous(t) ||
      t->shape[1] % block)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: a channel-blocked %s must be contiguous f32 [N, C, H, W] with C a "
                "multiple of %d, got %s",
                k, what, (int)block, shapeString(t).c_str());
  return AMPRT_OK;
}

/// A blocked max pool: per output position, the window's positions
/// (padding skipped) in row-major order, B lanes at a time. The loop is a
/// macro so that each instruction-set variant compiles it with its target.
#define AMPRT_MAX_POOL_BLOCKED_LOOP(B, VEC, INIT, LOAD, STEP, STORE)                               \
  const int64_t H = w.in[0], W = w.in[1], OH = w.out[0], OW = w.out[1];                            \
  const int64_t planes = w.n * (w.c / (B));                                                        \
  const bool k2s2 = w.k[0] == 2 && w.k[1] == 2 && w.s[0] == 2 && w.s[1] == 2 && w.d[0] == 1 &&     \
                    w.d[1] == 1 && w.pb[0] == 0 && w.pb[1] == 0 && 2 * OH <= H && 2 * OW <= W;     \
  /* The window positions inside the input, per output column / row. */                            \
  std::vector<int64_t> kw0(OW), kw1(OW), kh0(OH), kh1(OH);                                         \
  auto span = [](int64_t o, int64_t s, int64_t pb, int64_t d, int64_t k, int64_t n, int64_t &lo,   \
                 int64_t &hi) {                                                                    \
    lo = 0;                                                                                        \
    while (lo < k && o * s - pb + lo * d < 0)                                                      \
      ++lo;                                                                                        \
    hi = lo;                                                                                       \
    while (hi < k && o * s - pb + hi * d < n)                                                      \
      ++hi;                                                                                        \
  };                                                                                               \
  for (int64_t o = 0; o < OW; ++o)                                                                 \
    span(o, w.s[1], w.pb[1], w.d[1], w.k[1], W, kw0[o], kw1[o]);                                   \
  for (int64_t o = 0; o < OH; ++o)                                                                 \
    span(o, w.s[0], w.pb[0], w.d[0], w.k[0], H, kh0[o], kh1[o]);                                   \
  for (int64_t pl = 0; pl < planes; ++pl) {                                                        \
    const float *xp = x + pl * H * W * (B);                                                        \
    float *yp = y + pl * OH * OW * (B);                                                            \
    for (int64_t oh = 0; oh < OH; ++oh) {                                                          \
      if (k2s2) {                                                                                  \
        const float *r0 = xp + 2 * oh * W * (B), *r1 = r0 + W * (B);                               \
        float *out = yp + oh * OW * (B);                                                           \
        for (int64_t ow = 0; ow < OW; ++ow) {                                                      \
          VEC best = STEP(LOAD(r0 + 2 * ow * (B)), LOAD(r0 + (2 * ow + 1) * (B)));                 \
          best = STEP(best, LOAD(r1 + 2 * ow * (B)));                                              \
          best = STEP(best, LOAD(r1 + (2 * ow + 1) * (B)));                                        \
          STORE(out + ow * (B), best);                                                             \
        }                                                                                          \
        continue;                                                                                  \
      }                                                                                            \
      for (int64_t ow = 0; ow < OW; ++ow) {                                                        \
        VEC best = INIT;                                                                           \
        for (int64_t kh = kh0[oh]; kh < kh1[oh]; ++kh) {                                           \
          const float *row = xp + (oh * w.s[0] - w.pb[0] + kh * w.d[0]) * W * (B);                 \
          for (int64_t kw = kw0[ow]; kw < kw1[ow]; ++kw)                                           \
            best = STEP(best, LOAD(row + (ow * w.s[1] - w.pb[1] + kw * w.d[1]) * (B)));            \
        }                                                                                          \
        STORE(yp + (oh * OW + ow) * (B), best);                                                    \
      }                                                                                            \
    }                                                                                              \
  }

#if defined(__x86_64__)
__attribute__((target("avx512f"))) inline __m512 maxStep16(__m512 b, __m512 v) {
  __mmask16 t = (_mm512_cmp_ps_mask(v, b, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) &
                ~_mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(t, b, v);
}

__attribute__((target("avx512f"))) void maxPoolBlocked16(const Window &w, const float *x,
                                                         float *y) {
  const __m512 init = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  AMPRT_MAX_POOL_BLOCKED_LOOP(16, __m512, init, _mm512_loadu_ps, maxStep16, _mm512_storeu_ps)
}

__attribute__((target("avx2"))) inline __m256 maxStep8(__m256 b, __m256 v) {
  __m256 t = _mm256_andnot_ps(
      _mm256_cmp_ps(b, b, _CMP_UNORD_Q),
      _mm256_or_ps(_mm256_cmp_ps(v, b, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  return _mm256_blendv_ps(b, v, t);
}

__attribute__((target("avx2"))) void maxPoolBlocked8(const Window &w, const float *x, float *y) {
  const __m256 init = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  AMPRT_MAX_POOL_BLOCKED_LOOP(8, __m256, init, _mm256_loadu_ps, maxStep8, _mm256_storeu_ps)
}
#endif

#if defined(__x86_64__)
/// Eight floats widened to double (the masked form: GCC warns about the
/// unmasked one's undefined source).
__attribute__((target("avx512f"))) inline __m512d wide(const float *q) {
  return _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(q));
}

/// Per plane of 16 channels: the mean over hw positions, each lane summed
/// in double (two chains for the even and odd positions).
__attribute__((target("avx512f"))) void gapBlocked16(const float *x, float *y, int64_t planes,
                                                     int64_t hw) {
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float *src = x + pl * hw * 16;
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, b0 = a0, b1 = a0;
    int64_t i = 0;
    for (; i + 2 <= hw; i += 2) {
      const float *q = src + i * 16;
      a0 = _mm512_add_pd(a0, wide(q));
      a1 = _mm512_add_pd(a1, wide(q + 8));
      b0 = _mm512_add_pd(b0, wide(q + 16));
      b1 = _mm512_add_pd(b1, wide(q + 24));
    }
    if (i < hw) {
      a0 = _mm512_add_pd(a0, wide(src + i * 16));
      a1 = _mm512_add_pd(a1, wide(src + i * 16 + 8));
    }
    alignas(64) double sum[16];
    _mm512_store_pd(sum, _mm512_add_pd(a0, b0));
    _mm512_store_pd(sum + 8, _mm512_add_pd(a1, b1));
    for (int l = 0; l < 16; ++l)
      y[pl * 16 + l] = (float)(sum[l] / (double)hw);
  }
}
#endif

template <int B> struct Lanes {
  float l[B];
};

template <int B> Lanes<B> loadLanes(const float *p) {
  Lanes<B> v;
  std::memcpy(v.l, p, sizeof(v.l));
  return v;
}

template <int B> Lanes<B> maxStepScalar(Lanes<B> b, Lanes<B> v) {
  for (int l = 0; l < B; ++l) {
    float o = b.l[l], c = v.l[l];
    b.l[l] = o != o ? o : (c > o || c != c) ? c : o;
  }
  return b;
}

template <int B> void storeLanes(float *p, Lanes<B> v) { std::memcpy(p, v.l, sizeof(v.l)); }

template <int B> void maxPoolBlockedScalar(const Window &w, const float *x, float *y) {
  Lanes<B> init;
  for (int l = 0; l < B; ++l)
    init.l[l] = -std::numeric_limits<float>::infinity();
  AMPRT_MAX_POOL_BLOCKED_LOOP(B, Lanes<B>, init, loadLanes<B>, maxStepScalar<B>, storeLanes<B>)
}

} // namespace

extern "C" amprt_status amprt_max_pool_blocked(amprt_context *, const amprt_tensor *x,
                                               const amprt_pool_params *p, int32_t block,
                                               amprt_tensor *y) {
  const char *k = "amprt_max_pool_blocked";
  AMPRT_CHECK(checkBlocked(x, block, k, "x"));
  AMPRT_CHECK(checkBlocked(y, block, k, "y"));
  Window w;
  AMPRT_CHECK(windowOf(x, y, p, k, w));
  if (p->spatial != 2)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: 2 spatial dims only", k);
  const float *xp = static_cast<const float *>(x->data);
  float *yp = static_cast<float *>(y->data);
  // Images on the threads.
  int64_t inImage = w.c * w.in[0] * w.in[1], outImage = w.c * w.out[0] * w.out[1];
  parallelFor(w.n, std::max<int64_t>(1, 16384 / std::max<int64_t>(inImage, 1)), 1,
              [&](int64_t n0, int64_t n1) {
                Window part = w;
                part.n = n1 - n0;
                const float *xs = xp + n0 * inImage;
                float *ys = yp + n0 * outImage;
#if defined(__x86_64__)
                if (block == 16 && __builtin_cpu_supports("avx512f"))
                  maxPoolBlocked16(part, xs, ys);
                else if (block == 8 && __builtin_cpu_supports("avx2"))
                  maxPoolBlocked8(part, xs, ys);
                else
#endif
                    if (block == 16)
                  maxPoolBlockedScalar<16>(part, xs, ys);
                else
                  maxPoolBlockedScalar<8>(part, xs, ys);
              });
  return AMPRT_OK;
}

extern "C" amprt_status amprt_global_average_pool_blocked(amprt_context *, const amprt_tensor *x,
                                                          int32_t block, amprt_tensor *y) {
  const char *k = "amprt_global_average_pool_blocked";
  AMPRT_CHECK(checkBlocked(x, block, k, "x"));
  AMPRT_CHECK(check(y, k));
  int64_t n = x->shape[0], c = x->shape[1], hw = x->shape[2] * x->shape[3];
  if (y->dtype != AMPRT_F32 || !amprt_tensor_is_contiguous(y) || amprt_tensor_numel(y) != n * c ||
      y->shape[0] != n || (y->rank > 1 && y->shape[1] != c))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: y %s must be contiguous f32 [%lld, %lld(, 1, 1)]",
                k, shapeString(y).c_str(), (long long)n, (long long)c);
  if (hw == 0)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: empty spatial dims", k);
  const float *xp = static_cast<const float *>(x->data);
  float *yp = static_cast<float *>(y->data);
  // Each lane summed in double (the plain mean is accurate to f32 too).
  int64_t planes = n * (c / block);
#if defined(__x86_64__)
  if (block == 16 && __builtin_cpu_supports("avx512f")) {
    parallelFor(planes, std::max<int64_t>(1, 16384 / (hw * 16)), 1, [&](int64_t p0, int64_t p1) {
      gapBlocked16(xp + p0 * hw * 16, yp + p0 * 16, p1 - p0, hw);
    });
    return AMPRT_OK;
  }
#endif
  for (int64_t pl = 0; pl < planes; ++pl) {
    double acc[16] = {0};
    const float *src = xp + pl * hw * block;
    for (int64_t i = 0; i < hw; ++i)
      for (int l = 0; l < block; ++l)
        acc[l] += src[i * block + l];
    for (int l = 0; l < block; ++l)
      yp[pl * block + l] = (float)(acc[l] / (double)hw);
  }
  return AMPRT_OK;
}
