//===- softmax.cpp - softmax and log-softmax, their gradients ---------------===//
//
// These compute in f32 or wider (sums in double) whatever the element
// type, and round once on store: they are the ops AMP keeps in fp32.
//
//===----------------------------------------------------------------------===//

#include "cpu/reduce/reduce.h"

#include "common/check.h"
#include "common/convert.h"
#include "common/convert_avx2.h"
#include "common/convert_bits.h"
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

namespace {
#if defined(__x86_64__)
/// softmaxPrep's two loops in AVX2 (the compiler keeps both scalar: a
/// maximum with its index, and a branch per element), with the same
/// results: the maximum ignoring NaNs (flagged apart) and its first index,
/// then d = x - max in double split into f32 hi and lo, eight at a time.
__attribute__((target("avx2"))) void softmaxPrepAvx2(const float *xr, int64_t len, float *h,
                                                     float *l, int64_t &at, char &bad) {
  __m256 vm = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 vnan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    __m256 v = _mm256_loadu_ps(xr + i);
    vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vm = _mm256_max_ps(v, vm); // a NaN v gives vm (NaNs are flagged apart)
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vm);
  float m = lanes[0];
  for (int k = 1; k < 8; ++k)
    m = lanes[k] > m ? lanes[k] : m;
  bool nan = !_mm256_testz_ps(vnan, vnan);
  for (; i < len; ++i) {
    nan |= xr[i] != xr[i];
    m = xr[i] > m ? xr[i] : m;
  }
  // The first index holding the maximum (the scalar loop's: a later equal
  // value does not replace it); 0 when no element exceeds -inf.
  at = 0;
  if (m > -std::numeric_limits<float>::infinity()) {
    __m256 target = _mm256_set1_ps(m);
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
      int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(xr + j), target, _CMP_EQ_OQ));
      if (hit) {
        j += __builtin_ctz((unsigned)hit);
        break;
      }
    }
    while (j < len && !(xr[j] == m))
      ++j;
    at = j < len ? j : 0;
    m = xr[at]; // that element's own value (a -0 found before a +0 stays -0)
  }
  bad = nan || std::isinf(m);
  const __m256d md = _mm256_set1_pd((double)m);
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)),
               inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  i = 0;
  for (; i + 8 <= len; i += 8) {
    __m256 v = _mm256_loadu_ps(xr + i);
    __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), md);
    __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), md);
    __m256 hv = _mm256_set_m128(_mm256_cvtpd_ps(d1), _mm256_cvtpd_ps(d0));
    __m256d r0 = _mm256_sub_pd(d0, _mm256_cvtps_pd(_mm256_castps256_ps128(hv)));
    __m256d r1 = _mm256_sub_pd(d1, _mm256_cvtps_pd(_mm256_extractf128_ps(hv, 1)));
    __m256 lv = _mm256_set_m128(_mm256_cvtpd_ps(r1), _mm256_cvtpd_ps(r0));
    __m256 isInf = _mm256_cmp_ps(_mm256_and_ps(hv, absMask), inf, _CMP_EQ_OQ);
    _mm256_storeu_ps(h + i, hv);
    _mm256_storeu_ps(l + i, _mm256_andnot_ps(isInf, lv));
  }
  for (; i < len; ++i) {
    double d = (double)xr[i] - (double)m;
    h[i] = (float)d;
    l[i] = std::isinf(h[i]) ? 0.0f : (float)(d - (double)h[i]);
  }
}
#endif

/// One f32 row of the softmax fast path: the first maximum, whether the row
/// is NaN (a NaN, +inf, or all -inf, as the general path gives it), and d =
/// x - max (exact in double) split into hi = (float)d and lo = d - hi.
inline void softmaxPrep(const float *xr, int64_t len, float *h, float *l, int64_t &at, char &bad) {
#if defined(__x86_64__)
  if (amprt::avx2::haveAvx2F16c()) {
    softmaxPrepAvx2(xr, len, h, l, at, bad);
    return;
  }
#endif
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  at = 0;
  for (int64_t i = 0; i < len; ++i) {
    nan |= xr[i] != xr[i];
    if (xr[i] > m) {
      m = xr[i];
      at = i;
    }
  }
  // NaN anywhere, +inf (inf - inf), or a row that is -inf throughout (no
  // finite maximum): NaN, as torch.softmax gives.
  bad = nan || std::isinf(m);
  for (int64_t i = 0; i < len; ++i) {
    double d = (double)xr[i] - (double)m;
    h[i] = (float)d;
    // -inf (a masked entry), or d below -FLT_MAX (an f32 finfo.min mask
    // minus a positive maximum): exp gives 0 and the low part must be 0,
    // not -inf - -inf.
    l[i] = std::isinf(h[i]) ? 0.0f : (float)(d - (double)h[i]);
  }
}

/// The rest of the row from e = expf(hi): exp(d) = e (1 + lo); the largest
/// term (index k, exp(0) = 1) apart from the others so that log(1 + rest)
/// keeps its precision when the rest is tiny; the sum in double.
inline void softmaxFinish(float *yr, float *er, const float *h, const float *l, int64_t len,
                          int64_t k, int log) {
  for (int64_t i = 0; i < len; ++i)
    er[i] = er[i] + er[i] * l[i];
  double rest = sumF32(er, k) + sumF32(er + k + 1, len - k - 1);
  if (log) {
    double ls = std::log1p(rest);
    for (int64_t i = 0; i < len; ++i)
      yr[i] = (float)(((double)h[i] + (double)l[i]) - ls);
  } else {
    double inv = 1.0 / (1.0 + rest);
    for (int64_t i = 0; i < len; ++i)
      yr[i] = (float)((double)er[i] * inv);
  }
}
#if defined(__x86_64__)
// The softmax rows on AVX-512 (F, BW, DQ): softmaxPrep and softmaxFinish
// with sixteen lanes and masked tails (attention's rows of 49 or 16 spent
// most of their time in the AVX2 loops' scalar tails, horizontal steps and
// calls). The same operations per element; the sums in double keep
// sumF32's eight lanes (element i in lane i mod 8) and its final order, so
// the results are the same bits.
AMPRT_AVX512_QUIET_BEGIN
#define AMPRT_SM512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

AMPRT_SM512 inline __mmask16 smLanes(int64_t left) {
  return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

AMPRT_SM512 inline __m512d smLowPd(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
AMPRT_SM512 inline __m512d smHighPd(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
AMPRT_SM512 inline __m512 smJoin(__m256 lo, __m256 hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/// sumF32 of p[0, n) with its lanes and order.
AMPRT_SM512 inline double sumF32x8(const float *p, int64_t n) {
  __m512d acc = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 8) {
    __mmask8 m = n - i >= 8 ? (__mmask8)0xff : (__mmask8)((1u << (n - i)) - 1u);
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, p + i)));
  }
  alignas(64) double s[8];
  _mm512_store_pd(s, acc);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

AMPRT_SM512 void softmaxPrepRow512(const float *xr, int64_t len, float *h, float *l, int64_t &at,
                                   char &bad) {
  const float ninf = -std::numeric_limits<float>::infinity();
  __m512 vm = _mm512_set1_ps(ninf);
  __mmask16 nan = 0;
  for (int64_t i = 0; i < len; i += 16) {
    __mmask16 k = smLanes(len - i);
    __m512 v = _mm512_maskz_loadu_ps(k, xr + i);
    nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
    vm = _mm512_mask_max_ps(vm, k, v, vm); // a NaN v gives vm (NaNs are flagged apart)
  }
  float m = _mm512_reduce_max_ps(vm);
  // The first index holding the maximum; 0 when no element exceeds -inf.
  at = 0;
  if (m > ninf) {
    __m512 target = _mm512_set1_ps(m);
    int64_t j = len;
    for (int64_t i = 0; i < len; i += 16) {
      __mmask16 hit = _mm512_mask_cmp_ps_mask(
          smLanes(len - i), _mm512_maskz_loadu_ps(smLanes(len - i), xr + i), target, _CMP_EQ_OQ);
      if (hit) {
        j = i + __builtin_ctz((unsigned)hit);
        break;
      }
    }
    at = j < len ? j : 0;
    m = xr[at]; // that element's own value (a -0 found before a +0 stays -0)
  }
  bad = nan != 0 || std::isinf(m);
  const __m512d md = _mm512_set1_pd((double)m);
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < len; i += 16) {
    __mmask16 k = smLanes(len - i);
    __m512 v = _mm512_maskz_loadu_ps(k, xr + i);
    __m512d d0 = _mm512_sub_pd(smLowPd(v), md), d1 = _mm512_sub_pd(smHighPd(v), md);
    __m512 hv = smJoin(_mm512_cvtpd_ps(d0), _mm512_cvtpd_ps(d1));
    __m512d r0 = _mm512_sub_pd(d0, smLowPd(hv)), r1 = _mm512_sub_pd(d1, smHighPd(hv));
    __m512 lv = smJoin(_mm512_cvtpd_ps(r0), _mm512_cvtpd_ps(r1));
    __mmask16 isInf = _mm512_cmp_ps_mask(_mm512_abs_ps(hv), inf, _CMP_EQ_OQ);
    _mm512_mask_storeu_ps(h + i, k, hv);
    _mm512_mask_storeu_ps(l + i, k, _mm512_maskz_mov_ps((__mmask16)~isInf, lv));
  }
}

AMPRT_SM512 void softmaxFinishRow512(float *yr, float *er, const float *h, const float *l,
                                     int64_t len, int64_t k, int log) {
  for (int64_t i = 0; i < len; i += 16) {
    __mmask16 m = smLanes(len - i);
    __m512 e = _mm512_maskz_loadu_ps(m, er + i);
    _mm512_mask_storeu_ps(er + i, m,
                          _mm512_add_ps(e, _mm512_mul_ps(e, _mm512_maskz_loadu_ps(m, l + i))));
  }
  double rest = sumF32x8(er, k) + sumF32x8(er + k + 1, len - k - 1);
  if (log) {
    const __m512d ls = _mm512_set1_pd(std::log1p(rest));
    for (int64_t i = 0; i < len; i += 16) {
      __mmask16 m = smLanes(len - i);
      __m512 hv = _mm512_maskz_loadu_ps(m, h + i), lv = _mm512_maskz_loadu_ps(m, l + i);
      __m512d a = _mm512_sub_pd(_mm512_add_pd(smLowPd(hv), smLowPd(lv)), ls);
      __m512d b = _mm512_sub_pd(_mm512_add_pd(smHighPd(hv), smHighPd(lv)), ls);
      _mm512_mask_storeu_ps(yr + i, m, smJoin(_mm512_cvtpd_ps(a), _mm512_cvtpd_ps(b)));
    }
    return;
  }
  const __m512d inv = _mm512_set1_pd(1.0 / (1.0 + rest));
  for (int64_t i = 0; i < len; i += 16) {
    __mmask16 m = smLanes(len - i);
    __m512 e = _mm512_maskz_loadu_ps(m, er + i);
    _mm512_mask_storeu_ps(yr + i, m,
                          smJoin(_mm512_cvtpd_ps(_mm512_mul_pd(smLowPd(e), inv)),
                                 _mm512_cvtpd_ps(_mm512_mul_pd(smHighPd(e), inv))));
  }
}

AMPRT_SM512 void softmaxPrepRows512(const float *xp, int64_t nr, int64_t len, float *hi, float *lo,
                                    int64_t *argmax, char *bad) {
  for (int64_t r = 0; r < nr; ++r)
    softmaxPrepRow512(xp + r * len, len, hi + r * len, lo + r * len, argmax[r], bad[r]);
}

AMPRT_SM512 void softmaxFinishRows512(float *yp, float *e, const float *hi, const float *lo,
                                      int64_t nr, int64_t len, const int64_t *argmax,
                                      const char *bad, int log) {
  for (int64_t r = 0; r < nr; ++r) {
    float *yr = yp + r * len;
    if (bad[r]) {
      std::fill(yr, yr + len, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    softmaxFinishRow512(yr, e + r * len, hi + r * len, lo + r * len, len, argmax[r], log);
  }
}
#undef AMPRT_SM512
AMPRT_AVX512_QUIET_END

/// Whether the softmax rows run on AVX-512.
bool softmax512() {
  static const bool ok =
      haveAvx512bw() && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return ok;
}
#endif

/// nr rows (the loops over rows inside the instruction-set variants: short
/// rows, as attention's, would otherwise pay a dispatch per row).
AMPRT_CLONES void softmaxPrepRows(const float *xp, int64_t nr, int64_t len, float *hi, float *lo,
                                  int64_t *argmax, char *bad) {
  for (int64_t r = 0; r < nr; ++r)
    softmaxPrep(xp + r * len, len, hi + r * len, lo + r * len, argmax[r], bad[r]);
}

AMPRT_CLONES void softmaxFinishRows(float *yp, float *e, const float *hi, const float *lo,
                                    int64_t nr, int64_t len, const int64_t *argmax, const char *bad,
                                    int log) {
  for (int64_t r = 0; r < nr; ++r) {
    float *yr = yp + r * len;
    if (bad[r]) {
      std::fill(yr, yr + len, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    softmaxFinish(yr, e + r * len, hi + r * len, lo + r * len, len, argmax[r], log);
  }
}

/// nr rows of softmax's gradient in f32: dot = sum(dy y) (log: sum(dy)) in
/// double, eight running sums in a fixed order; dx = y (dy - dot) (log: dy
/// - exp(y) dot), each element in double and rounded once.
AMPRT_CLONES void softmaxGradRows(const float *yp, const float *gp, float *xp, int64_t nr,
                                  int64_t len, int log) {
  for (int64_t r = 0; r < nr; ++r) {
    const float *yr = yp + r * len, *gr = gp + r * len;
    float *xr = xp + r * len;
    if (log) {
      double dot = sumF32(gr, len);
      for (int64_t i = 0; i < len; ++i)
        xr[i] = (float)((double)gr[i] - std::exp((double)yr[i]) * dot);
      continue;
    }
    double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= len; i += 8)
      for (int k = 0; k < 8; ++k)
        s[k] += (double)gr[i + k] * (double)yr[i + k];
    for (; i < len; ++i)
      s[i & 7] += (double)gr[i] * (double)yr[i];
    double dot = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (i = 0; i < len; ++i)
      xr[i] = (float)((double)yr[i] * ((double)gr[i] - dot));
  }
}
} // namespace

extern "C" amprt_status amprt_softmax(amprt_context *, const amprt_tensor *x, int32_t axis, int log,
                                      amprt_tensor *y) {
  AMPRT_CHECK(checkFloat(x, "amprt_softmax: x"));
  AMPRT_CHECK(checkFloat(y, "amprt_softmax: y"));
  if (!sameShape(x, y) || axis < 0 || axis >= x->rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_softmax: x %s, y %s, axis %d do not agree",
                shapeString(x).c_str(), shapeString(y).c_str(), axis);
  int64_t len = x->shape[axis], xs = x->strides[axis], ys = y->strides[axis];
  // Fast path: rows along the contiguous last axis. d = x - max is exact
  // in double; exp(d) = expf(hi) * (1 + lo) with hi = (float)d and lo = d -
  // hi, so the argument's rounding does not cost accuracy (libmvec's expf:
  // <= 2 ulp). The sum is in double; the log form is d - log(sum). f16 /
  // bf16 rows are widened block by block (exactly) and an f16 / bf16 y is
  // rounded from the f32 result once, as the f32 path's.
  if (axis == x->rank - 1 && amprt_tensor_is_contiguous(x) && amprt_tensor_is_contiguous(y) &&
      len > 0) {
    int64_t rows = amprt_tensor_numel(x) / len;
    // Rows in blocks of about 1024 elements: one exp call per block (the
    // blocks do not depend on the thread count, nor do the results).
    int64_t per = std::max<int64_t>(1, 1024 / len);
    const char *xp = static_cast<const char *>(x->data);
    char *yp = static_cast<char *>(y->data);
    const int64_t xb = (int64_t)amprt_dtype_size(x->dtype),
                  yb = (int64_t)amprt_dtype_size(y->dtype);
    int64_t blocks = (rows + per - 1) / per;
    // Blocks on the threads (each block's rows as in one thread: the same
    // exp calls, the same results).
    parallelFor(blocks, 1, 1, [&](int64_t b0, int64_t b1) {
      thread_local std::vector<float> hiBuf, loBuf, eBuf, xBuf, yBuf;
      thread_local std::vector<char> bad;
      thread_local std::vector<int64_t> argmax;
      size_t need = (size_t)(per * len);
      if (hiBuf.size() < need) {
        hiBuf.resize(need);
        loBuf.resize(need);
        eBuf.resize(need);
      }
      if (x->dtype != AMPRT_F32 && xBuf.size() < need)
        xBuf.resize(need);
      if (y->dtype != AMPRT_F32 && yBuf.size() < need)
        yBuf.resize(need);
      if ((int64_t)bad.size() < per) {
        bad.resize(per);
        argmax.resize(per);
      }
      float *hi = hiBuf.data(), *lo = loBuf.data(), *e = eBuf.data();
      for (int64_t r0 = b0 * per; r0 < std::min(rows, b1 * per); r0 += per) {
        int64_t nr = std::min(per, rows - r0);
        const float *xr = reinterpret_cast<const float *>(xp + r0 * len * xb);
        if (x->dtype != AMPRT_F32) {
          amprt_convert(xp + r0 * len * xb, x->dtype, xBuf.data(), AMPRT_F32, (size_t)(nr * len));
          xr = xBuf.data();
        }
        float *yr =
            y->dtype == AMPRT_F32 ? reinterpret_cast<float *>(yp + r0 * len * yb) : yBuf.data();
#if defined(__x86_64__)
        if (softmax512()) {
          softmaxPrepRows512(xr, nr, len, hi, lo, argmax.data(), bad.data());
          expF32(hi, e, nr * len);
          softmaxFinishRows512(yr, e, hi, lo, nr, len, argmax.data(), bad.data(), log);
        } else
#endif
        {
          softmaxPrepRows(xr, nr, len, hi, lo, argmax.data(), bad.data());
          expF32(hi, e, nr * len);
          softmaxFinishRows(yr, e, hi, lo, nr, len, argmax.data(), bad.data(), log);
        }
        if (y->dtype != AMPRT_F32)
          amprt_convert(yr, AMPRT_F32, yp + r0 * len * yb, y->dtype, (size_t)(nr * len));
      }
    });
    return AMPRT_OK;
  }
  std::vector<float> row(len);
  std::vector<double> e(len);
  // y's base offset for a row: same index as x's, in y's strides.
  int64_t shape[AMPRT_MAX_RANK];
  int64_t s[2][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < x->rank; ++d) {
    shape[d] = d == axis ? 1 : x->shape[d];
    s[0][d] = x->strides[d];
    s[1][d] = y->strides[d];
  }
  forEach<2>(x->rank, shape, s, [&](const int64_t *o) {
    float m = -std::numeric_limits<float>::infinity();
    bool nan = false;
    for (int64_t i = 0; i < len; ++i) {
      row[i] = loadF(x->data, x->dtype, o[0] + i * xs);
      nan |= std::isnan(row[i]);
      m = std::max(m, row[i]);
    }
    double sum = 0.0;
    for (int64_t i = 0; i < len; ++i)
      sum += (e[i] = std::exp((double)row[i] - m));
    double logSum = log ? std::log(sum) : 0.0;
    for (int64_t i = 0; i < len; ++i) {
      double v = log ? (double)row[i] - m - logSum : e[i] / sum;
      if (nan)
        v = std::numeric_limits<double>::quiet_NaN();
      storeF(y->data, y->dtype, o[1] + i * ys, (float)v);
    }
  });
  return AMPRT_OK;
}

extern "C" amprt_status amprt_softmax_grad(amprt_context *, const amprt_tensor *y,
                                           const amprt_tensor *dy, int32_t axis, int log,
                                           amprt_tensor *dx) {
  AMPRT_CHECK(checkFloat(y, "amprt_softmax_grad: y"));
  AMPRT_CHECK(checkFloat(dy, "amprt_softmax_grad: dy"));
  AMPRT_CHECK(checkFloat(dx, "amprt_softmax_grad: dx"));
  if (!sameShape(y, dy) || !sameShape(y, dx) || axis < 0 || axis >= y->rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_softmax_grad: shapes or axis do not agree");
  int64_t len = y->shape[axis];
  if (axis == y->rank - 1 && amprt_tensor_is_contiguous(y) && amprt_tensor_is_contiguous(dy) &&
      amprt_tensor_is_contiguous(dx) && len > 0) {
    // Rows along the contiguous last axis (attention's), on the threads in
    // blocks of about 4096 elements; f16 / bf16 rows widened exactly and dx
    // rounded once. Each row's sums in a fixed order (softmaxGradRows), so
    // the results do not depend on the thread count.
    int64_t rows = amprt_tensor_numel(y) / len;
    int64_t per = std::max<int64_t>(1, 4096 / len);
    const char *yp = static_cast<const char *>(y->data), *gp = static_cast<const char *>(dy->data);
    char *xp = static_cast<char *>(dx->data);
    const int64_t yb = (int64_t)amprt_dtype_size(y->dtype),
                  gb = (int64_t)amprt_dtype_size(dy->dtype),
                  xb = (int64_t)amprt_dtype_size(dx->dtype);
    parallelFor((rows + per - 1) / per, 1, 1, [&](int64_t b0, int64_t b1) {
      thread_local std::vector<float> yBuf, gBuf, xBuf;
      for (int64_t r0 = b0 * per; r0 < std::min(rows, b1 * per); r0 += per) {
        int64_t nr = std::min(per, rows - r0), n = nr * len;
        auto in = [&](const char *p, amprt_dtype t, int64_t size, std::vector<float> &buf) {
          if (t == AMPRT_F32)
            return reinterpret_cast<const float *>(p + r0 * len * size);
          buf.resize((size_t)std::max<int64_t>(n, (int64_t)buf.size()));
          widenRun(p + r0 * len * size, t, buf.data(), n);
          return static_cast<const float *>(buf.data());
        };
        const float *yr = in(yp, y->dtype, yb, yBuf), *gr = in(gp, dy->dtype, gb, gBuf);
        float *xr = reinterpret_cast<float *>(xp + r0 * len * xb);
        if (dx->dtype != AMPRT_F32) {
          xBuf.resize((size_t)std::max<int64_t>(n, (int64_t)xBuf.size()));
          xr = xBuf.data();
        }
        softmaxGradRows(yr, gr, xr, nr, len, log);
        if (dx->dtype != AMPRT_F32)
          narrowRun(xr, xp + r0 * len * xb, dx->dtype, n);
      }
    });
    return AMPRT_OK;
  }
  int64_t shape[AMPRT_MAX_RANK];
  int64_t s[3][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < y->rank; ++d) {
    shape[d] = d == axis ? 1 : y->shape[d];
    s[0][d] = y->strides[d];
    s[1][d] = dy->strides[d];
    s[2][d] = dx->strides[d];
  }
  forEach<3>(y->rank, shape, s, [&](const int64_t *o) {
    // The sums of softmaxGradRows, in its order.
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < len; ++i) {
      double g = loadF(dy->data, dy->dtype, o[1] + i * dy->strides[axis]);
      part[i & 7] += log ? g : g * loadF(y->data, y->dtype, o[0] + i * y->strides[axis]);
    }
    double dot =
        ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    for (int64_t i = 0; i < len; ++i) {
      double yv = loadF(y->data, y->dtype, o[0] + i * y->strides[axis]);
      double g = loadF(dy->data, dy->dtype, o[1] + i * dy->strides[axis]);
      double v = log ? g - std::exp(yv) * dot : yv * (g - dot);
      storeF(dx->data, dx->dtype, o[2] + i * dx->strides[axis], (float)v);
    }
  });
  return AMPRT_OK;
}
