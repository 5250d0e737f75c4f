//===- reduce.cpp - reductions, softmax, normalisation, losses -----------===//
//
// All of these compute in f32 or wider (sums in double) whatever the element
// type, and round once on store: they are the ops AMP keeps in fp32.
//
//===----------------------------------------------------------------------===//

#include "convert_avx2.h"
#include "convert_bits.h"
#include "internal.h"

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

/// Iterates the "rows" of x along `axis`: calls f(base offset) for every
/// index of the other dims. Offsets are in x's strides.
template <typename F> void forEachRow(const amprt_tensor *x, int32_t axis, F &&f) {
  int64_t shape[AMPRT_MAX_RANK];
  int64_t s[1][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < x->rank; ++d) {
    shape[d] = d == axis ? 1 : x->shape[d];
    s[0][d] = x->strides[d];
  }
  forEach<1>(x->rank, shape, s, [&](const int64_t *o) { f(o[0]); });
}

/// acc[i] += x[i] (as f32, then double) for n elements of type t at x:
/// f16 / bf16 widened in registers where the CPU has AVX2 + F16C (the
/// conversions' vector forms, bit for bit the scalar ones), so a 16-bit
/// row costs no f32 copy.
#if defined(__x86_64__)
template <amprt_dtype T>
__attribute__((target("avx2,f16c"))) int64_t addRow8(double *acc, const void *x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = amprt::avx2::load8<T>(x, i);
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    _mm256_storeu_pd(acc + i, _mm256_add_pd(_mm256_loadu_pd(acc + i), lo));
    _mm256_storeu_pd(acc + i + 4, _mm256_add_pd(_mm256_loadu_pd(acc + i + 4), hi));
  }
  return i;
}
#endif

void addRow(double *acc, const void *x, amprt_dtype t, int64_t n) {
  if (t == AMPRT_F32) {
    const float *row = static_cast<const float *>(x);
    for (int64_t i = 0; i < n; ++i)
      acc[i] += row[i];
    return;
  }
  int64_t i = 0;
#if defined(__x86_64__)
  if (amprt::avx2::haveAvx2F16c())
    i = t == AMPRT_BF16 ? addRow8<AMPRT_BF16>(acc, x, n) : addRow8<AMPRT_F16>(acc, x, n);
#endif
  for (; i < n; ++i)
    acc[i] += loadF(x, t, i);
}

} // namespace

namespace amprt {

bool sameShape(const amprt_tensor *a, const amprt_tensor *b) {
  if (a->rank != b->rank)
    return false;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != b->shape[d])
      return false;
  return true;
}

amprt_status checkFloat(const amprt_tensor *t, const char *what) {
  AMPRT_CHECK(check(t, what));
  if (!isFloat(t->dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: must be f32, f16 or bf16, got %s", what,
                amprt_dtype_name(t->dtype));
  return AMPRT_OK;
}

} // namespace amprt

extern "C" amprt_status amprt_reduce(amprt_context *, amprt_reduce_op op, const amprt_tensor *x,
                                     const int32_t *axes, int32_t naxes, amprt_tensor *y) {
  AMPRT_CHECK(check(x, "amprt_reduce: x"));
  AMPRT_CHECK(check(y, "amprt_reduce: y"));
  // An f16 / bf16 x may write an f32 y: the f32 result, unrounded.
  bool wideY = isHalf(x->dtype) && y->dtype == AMPRT_F32;
  if (y->rank != x->rank || (y->dtype != x->dtype && !wideY))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_reduce: y (%s %s) must have x's rank and type (%s %s), or be f32 for "
                "f16 / bf16 x",
                amprt_dtype_name(y->dtype), shapeString(y).c_str(), amprt_dtype_name(x->dtype),
                shapeString(x).c_str());
  if ((unsigned)op > AMPRT_REDUCE_PROD)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_reduce: unknown op %d", (int)op);
  bool reduced[AMPRT_MAX_RANK] = {false};
  for (int32_t i = 0; i < naxes; ++i) {
    if (axes[i] < 0 || axes[i] >= x->rank)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_reduce: axis %d out of range", axes[i]);
    reduced[axes[i]] = true;
  }
  int64_t count = 1;
  for (int32_t d = 0; d < x->rank; ++d) {
    int64_t want = reduced[d] ? 1 : x->shape[d];
    if (y->shape[d] != want)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_reduce: y %s is not x %s with the reduced dims as 1",
                  shapeString(y).c_str(), shapeString(x).c_str());
    if (reduced[d])
      count *= x->shape[d];
  }
  // f16 / bf16 x: a sum / mean over one block of adjacent axes reads the
  // 16-bit rows itself (below); the rest on an f32 copy.
  bool halfBlock = false;
  if (isHalf(x->dtype) && (op == AMPRT_REDUCE_SUM || op == AMPRT_REDUCE_MEAN) &&
      amprt_tensor_is_contiguous(x) && amprt_tensor_is_contiguous(y)) {
    int32_t lo = -1, hi = -1;
    halfBlock = true;
    for (int32_t d = 0; d < x->rank; ++d)
      if (reduced[d] && x->shape[d] != 1) {
        halfBlock &= lo < 0 || hi == d - 1;
        lo = lo < 0 ? d : lo;
        hi = d;
      }
    halfBlock &= lo >= 0;
  }
  if (isHalf(x->dtype) && !halfBlock) {
    amprt_tensor x32 = asF32(x, 0), y32 = wideY ? *y : scratchF32(y, 1);
    AMPRT_CHECK(amprt_reduce(nullptr, op, &x32, axes, naxes, &y32));
    return wideY ? AMPRT_OK : storeFromF32(y32, y);
  }
  // Contiguous f32 sum / mean over one block of adjacent axes: [outer, red,
  // inner] rows added in the generic path's order (double accumulators, the
  // reduced index ascending), so the result is the same to the bit; a run
  // into a single slot (inner 1) uses four partial sums.
  if ((x->dtype == AMPRT_F32 || halfBlock) && (op == AMPRT_REDUCE_SUM || op == AMPRT_REDUCE_MEAN) &&
      amprt_tensor_is_contiguous(x) && amprt_tensor_is_contiguous(y)) {
    int32_t lo = -1, hi = -1;
    bool block = true;
    for (int32_t d = 0; d < x->rank; ++d)
      if (reduced[d] && x->shape[d] != 1) {
        if (lo < 0)
          lo = d;
        else if (hi != d - 1)
          block = false;
        hi = d;
      }
    if (!block && lo >= 0) {
      // Reduced and kept dims interleaved ([N, C, H, W] over {0, 2, 3}): dims
      // merged into runs; the innermost run is added element by element in
      // row-major order, so each slot sees the generic path's order.
      int64_t sh[AMPRT_MAX_RANK], red[AMPRT_MAX_RANK];
      int32_t r = 0;
      for (int32_t d = 0; d < x->rank; ++d) {
        bool rd = reduced[d] && x->shape[d] != 1;
        if (x->shape[d] == 1)
          continue;
        if (r > 0 && red[r - 1] == rd) {
          sh[r - 1] *= x->shape[d];
          continue;
        }
        sh[r] = x->shape[d];
        red[r] = rd;
        ++r;
      }
      // Slot strides of each run (0 for reduced runs).
      int64_t slotStride[AMPRT_MAX_RANK], st = 1;
      for (int32_t d = r - 1; d >= 0; --d) {
        slotStride[d] = red[d] ? 0 : st;
        if (!red[d])
          st *= sh[d];
      }
      int64_t slots = amprt_tensor_numel(y);
      thread_local std::vector<double> accAll;
      accAll.assign(slots, 0.0);
      const float *xp = static_cast<const float *>(x->data);
      int64_t inner = sh[r - 1];
      bool innerRed = red[r - 1];
      int64_t idx[AMPRT_MAX_RANK] = {0}, outerN = 1;
      for (int32_t d = 0; d < r - 1; ++d)
        outerN *= sh[d];
      for (int64_t o = 0; o < outerN; ++o) {
        int64_t slot = 0;
        for (int32_t d = 0; d < r - 1; ++d)
          slot += idx[d] * slotStride[d];
        const float *row = xp + o * inner;
        if (innerRed) {
          // Partial sums, as the inner == 1 block path below (reassociation
          // at the 2^-53 level only).
          accAll[slot] += sumF32(row, inner);
        } else {
          double *a = accAll.data() + slot;
          for (int64_t i = 0; i < inner; ++i)
            a[i] += row[i];
        }
        for (int32_t d = r - 2; d >= 0; --d) {
          if (++idx[d] < sh[d])
            break;
          idx[d] = 0;
        }
      }
      float *yp = static_cast<float *>(y->data);
      for (int64_t i = 0; i < slots; ++i)
        yp[i] = (float)(op == AMPRT_REDUCE_MEAN ? accAll[i] / (double)count : accAll[i]);
      return AMPRT_OK;
    }
    if (block && lo >= 0) {
      int64_t outer = 1, red = 1, inner = 1;
      for (int32_t d = 0; d < x->rank; ++d)
        (d < lo ? outer : d <= hi ? red : inner) *= x->shape[d];
      const char *xp = static_cast<const char *>(x->data);
      const int64_t xs = (int64_t)amprt_dtype_size(x->dtype);
      double div = op == AMPRT_REDUCE_MEAN ? (double)count : 1.0;
      // y's element: f32 from the double, rounded once more for a 16-bit y
      // (as the f32 result stored).
      auto put = [&](int64_t i, double v) {
        float f = (float)(v / div);
        if (y->dtype == AMPRT_F32)
          static_cast<float *>(y->data)[i] = f;
        else
          storeF(y->data, y->dtype, i, f);
      };
      if (inner == 1) {
        // A contiguous run into one slot: four partial sums (a chain of
        // dependent double adds is latency-bound). Exact in double for
        // runs of f32 values up to 2^29 elements apart from reassociation
        // at the 2^-53 level, far below the final rounding to f32. 16-bit
        // runs are widened in pieces (a multiple of 4: the same lanes).
        thread_local std::vector<float> wide;
        auto addLanes = [](const float *row, int64_t m, double &a0, double &a1, double &a2,
                           double &a3) {
          int64_t r = 0;
          for (; r + 4 <= m; r += 4) {
            a0 += row[r];
            a1 += row[r + 1];
            a2 += row[r + 2];
            a3 += row[r + 3];
          }
          for (; r < m; ++r)
            a0 += row[r];
        };
        if (x->dtype != AMPRT_F32 && red <= 4096) {
          // Short 16-bit runs (a global average pool's 2 x 2 maps): many
          // rows widened by one call, each summed as below.
          // Their results are rounded as put rounds, a batch at a time.
          const int64_t per = 4096 / red;
          thread_local std::vector<double> sums;
          thread_local std::vector<float> res;
          float *w = grown(wide, (size_t)(per * red));
          double *sm = grown(sums, (size_t)per);
          float *rs = grown(res, (size_t)per);
          const size_t ys = amprt_dtype_size(y->dtype);
          for (int64_t o0 = 0; o0 < outer; o0 += per) {
            int64_t rows = std::min(per, outer - o0);
            amprt_convert(xp + o0 * red * xs, x->dtype, w, AMPRT_F32, (size_t)(rows * red));
            for (int64_t j = 0; j < rows; ++j) {
              double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
              addLanes(w + j * red, red, a0, a1, a2, a3);
              sm[j] = (a0 + a1) + (a2 + a3);
            }
            float *out = y->dtype == AMPRT_F32 ? static_cast<float *>(y->data) + o0 : rs;
            for (int64_t j = 0; j < rows; ++j)
              out[j] = (float)(sm[j] / div);
            if (y->dtype != AMPRT_F32)
              amprt_convert(rs, AMPRT_F32, static_cast<char *>(y->data) + o0 * ys, y->dtype,
                            (size_t)rows);
          }
          return AMPRT_OK;
        }
        for (int64_t o = 0; o < outer; ++o) {
          double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
          for (int64_t p = 0; p < red; p += 4096) {
            int64_t m = std::min<int64_t>(4096, red - p);
            const float *row;
            if (x->dtype == AMPRT_F32) {
              row = reinterpret_cast<const float *>(xp) + o * red + p;
            } else {
              float *w = grown(wide, 4096);
              amprt_convert(xp + (o * red + p) * xs, x->dtype, w, AMPRT_F32, (size_t)m);
              row = w;
            }
            addLanes(row, m, a0, a1, a2, a3);
          }
          put(o, (a0 + a1) + (a2 + a3));
        }
        return AMPRT_OK;
      }
      // Rows of `inner` added into per-column double sums, the reduced
      // index ascending; the columns split over the threads (each column's
      // order of additions stays the same, so the result does not depend
      // on the thread count).
      std::vector<double> acc(inner);
      for (int64_t o = 0; o < outer; ++o) {
        parallelFor(inner, std::max<int64_t>(64, 32768 / std::max<int64_t>(red, 1)), 64,
                    [&](int64_t c0, int64_t c1) {
                      std::fill(acc.begin() + c0, acc.begin() + c1, 0.0);
                      for (int64_t r = 0; r < red; ++r)
                        addRow(acc.data() + c0, xp + ((o * red + r) * inner + c0) * xs, x->dtype,
                               c1 - c0);
                      for (int64_t i = c0; i < c1; ++i)
                        put(o * inner + i, acc[i]);
                    });
      }
      return AMPRT_OK;
    }
  }
  // Accumulate per dense output index.
  int64_t dense[AMPRT_MAX_RANK];
  contiguousStrides(y->rank, y->shape, dense);
  int64_t s[2][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < x->rank; ++d) {
    s[0][d] = x->strides[d];
    s[1][d] = reduced[d] ? 0 : dense[d];
  }
  int64_t n = amprt_tensor_numel(y);
  bool isF = isFloat(x->dtype);
  std::vector<double> acc(n, op == AMPRT_REDUCE_MAX    ? -std::numeric_limits<double>::infinity()
                             : op == AMPRT_REDUCE_PROD ? 1.0
                                                       : 0.0);
  std::vector<int64_t> iacc(n, op == AMPRT_REDUCE_MAX    ? INT64_MIN
                               : op == AMPRT_REDUCE_PROD ? 1
                                                         : 0);
  forEach<2>(x->rank, x->shape, s, [&](const int64_t *o) {
    if (isF) {
      double v = loadF(x->data, x->dtype, o[0]);
      double &a = acc[o[1]];
      if (op == AMPRT_REDUCE_MAX)
        a = (std::isnan(v) || std::isnan(a) || v > a) ? (std::isnan(a) ? a : v) : a;
      else if (op == AMPRT_REDUCE_PROD)
        a *= v;
      else
        a += v;
    } else {
      int64_t v = loadI(x->data, x->dtype, o[0]);
      int64_t &a = iacc[o[1]];
      if (op == AMPRT_REDUCE_MAX)
        a = std::max(a, v);
      else if (op == AMPRT_REDUCE_PROD)
        a = (int64_t)((uint64_t)a * (uint64_t)v);
      else
        a += v;
    }
  });
  int64_t ys[1][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < y->rank; ++d)
    ys[0][d] = y->strides[d];
  int64_t i = 0;
  forEach<1>(y->rank, y->shape, ys, [&](const int64_t *o) {
    if (isF) {
      double v = acc[i];
      if (op == AMPRT_REDUCE_MEAN)
        v /= (double)count;
      storeF(y->data, y->dtype, o[0], (float)v);
    } else {
      int64_t v = iacc[i];
      if (op == AMPRT_REDUCE_MEAN)
        v = count ? v / count : 0;
      storeI(y->data, y->dtype, o[0], v);
    }
    ++i;
  });
  return AMPRT_OK;
}

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

namespace {

/// Rows x normalized-size view of a contiguous tensor split at `axis`.
amprt_status splitAt(const amprt_tensor *x, int32_t axis, const char *kernel, int64_t &rows,
                     int64_t &cols) {
  if (!amprt_tensor_is_contiguous(x))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: x must be contiguous", kernel);
  if (axis < 0 || axis >= x->rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: axis %d out of range for rank %d", kernel, axis,
                x->rank);
  rows = cols = 1;
  for (int32_t d = 0; d < x->rank; ++d)
    (d < axis ? rows : cols) *= x->shape[d];
  return AMPRT_OK;
}

/// Offsets of a parameter broadcast over the normalized dims x[axis:].
amprt_status paramOffsets(const amprt_tensor *x, int32_t axis, const amprt_tensor *p,
                          const char *what, std::vector<int64_t> &out) {
  AMPRT_CHECK(checkFloat(p, what));
  int32_t nrank = x->rank - axis;
  int64_t s[1][AMPRT_MAX_RANK];
  AMPRT_CHECK(broadcastStrides(p, nrank, x->shape + axis, s[0], what));
  out.clear();
  forEach<1>(nrank, x->shape + axis, s, [&](const int64_t *o) { out.push_back(o[0]); });
  return AMPRT_OK;
}

} // namespace

namespace {
/// One row of layer norm: statistics in double (partial sums), then
/// (v - mu) * rstd * scale + bias in double, rounded once.
AMPRT_CLONES void layerNormRow(const float *v, float *yr, int64_t cols, float epsilon,
                               const double *sc, const double *bi, double &mu, double &rstd) {
  mu = sumF32(v, cols) / cols;
  double var = sumSqDevF32(v, cols, mu) / cols;
  rstd = 1.0 / std::sqrt(var + (double)epsilon);
  for (int64_t c = 0; c < cols; ++c)
    yr[c] = (float)(((double)v[c] - mu) * rstd * sc[c] + bi[c]);
}

/// One row of layer norm's gradient with the scale laid along the row
/// (offset c for column c, the common case): xhat, dxhat = dy * scale and
/// the row's dscale / dbias terms in one vector loop, then m1 = mean of
/// dxhat and m2 = mean of dxhat * xhat with four partial sums each.
AMPRT_CLONES void layerNormGradRow(const float *x, const float *g, const double *sc, double mu,
                                   double rstd, int64_t cols, double *xhat, double *dxhat,
                                   double *gscale, double *gbias, double &m1, double &m2) {
  for (int64_t c = 0; c < cols; ++c) {
    double gv = g[c], xh = ((double)x[c] - mu) * rstd;
    xhat[c] = xh;
    dxhat[c] = gv * sc[c];
    gscale[c] += gv * xh;
    gbias[c] += gv;
  }
  double a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 4 <= cols; c += 4)
    for (int j = 0; j < 4; ++j) {
      a[j] += dxhat[c + j];
      b[j] += dxhat[c + j] * xhat[c + j];
    }
  for (; c < cols; ++c) {
    a[c & 3] += dxhat[c];
    b[c & 3] += dxhat[c] * xhat[c];
  }
  m1 = ((a[0] + a[1]) + (a[2] + a[3])) / cols;
  m2 = ((b[0] + b[1]) + (b[2] + b[3])) / cols;
}

/// dx = rstd * (dxhat - m1 - xhat * m2) over a row, rounded once to f32.
AMPRT_CLONES void layerNormDxRow(const double *xhat, const double *dxhat, double m1, double m2,
                                 double rstd, float *out, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c)
    out[c] = (float)(rstd * (dxhat[c] - m1 - xhat[c] * m2));
}
} // namespace

extern "C" amprt_status amprt_layer_norm(amprt_context *, const amprt_tensor *x,
                                         const amprt_tensor *scale, const amprt_tensor *bias,
                                         int32_t axis, float epsilon, amprt_tensor *y,
                                         amprt_tensor *mean, amprt_tensor *inv_std_dev) {
  const char *k = "amprt_layer_norm";
  AMPRT_CHECK(checkFloat(x, "amprt_layer_norm: x"));
  AMPRT_CHECK(checkFloat(y, "amprt_layer_norm: y"));
  if (!sameShape(x, y) || !amprt_tensor_is_contiguous(y))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: y must be contiguous with x's shape", k);
  int64_t rows = 0, cols = 0;
  AMPRT_CHECK(splitAt(x, axis, k, rows, cols));
  std::vector<int64_t> so, bo;
  AMPRT_CHECK(paramOffsets(x, axis, scale, "amprt_layer_norm: scale", so));
  if (bias)
    AMPRT_CHECK(paramOffsets(x, axis, bias, "amprt_layer_norm: bias", bo));
  for (amprt_tensor *st : {mean, inv_std_dev})
    if (st && (st->dtype != AMPRT_F32 || amprt_tensor_numel(st) != rows ||
               !amprt_tensor_is_contiguous(st)))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "%s: mean / inv_std_dev must be contiguous f32 with %lld "
                  "elements",
                  k, (long long)rows);
  // Scale and bias read once; rows of an f32 x read directly.
  std::vector<double> sc(cols), bi(cols, 0.0);
  std::vector<float> out32(y->dtype == AMPRT_F32 ? 0 : cols), row(cols);
  for (int64_t c = 0; c < cols; ++c) {
    sc[c] = loadF(scale->data, scale->dtype, so[c]);
    if (bias)
      bi[c] = loadF(bias->data, bias->dtype, bo[c]);
  }
  const float *xf = x->dtype == AMPRT_F32 && amprt_tensor_is_contiguous(x)
                        ? static_cast<const float *>(x->data)
                        : nullptr;
  if (amprt_tensor_is_contiguous(x)) {
    // Rows independent, on the threads for larger tensors; an f16 / bf16
    // row widened into the thread's buffer (exactly) and an f16 / bf16 y
    // row computed there and rounded once: the f32 computation.
    float *mf = mean ? static_cast<float *>(mean->data) : nullptr;
    float *sf = inv_std_dev ? static_cast<float *>(inv_std_dev->data) : nullptr;
    size_t xs = amprt_dtype_size(x->dtype), ys = amprt_dtype_size(y->dtype);
    parallelFor(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)), 1,
                [&](int64_t r0, int64_t r1) {
                  std::vector<float> in(xf ? 0 : cols), out(y->dtype == AMPRT_F32 ? 0 : cols);
                  for (int64_t r = r0; r < r1; ++r) {
                    const float *v = xf ? xf + r * cols : in.data();
                    if (!xf)
                      (void)amprt_convert(static_cast<const char *>(x->data) + r * cols * xs,
                                          x->dtype, in.data(), AMPRT_F32, (size_t)cols);
                    float *yr = y->dtype == AMPRT_F32 ? static_cast<float *>(y->data) + r * cols
                                                      : out.data();
                    double mu, rstd;
                    layerNormRow(v, yr, cols, epsilon, sc.data(), bi.data(), mu, rstd);
                    if (y->dtype != AMPRT_F32)
                      (void)amprt_convert(yr, AMPRT_F32,
                                          static_cast<char *>(y->data) + r * cols * ys, y->dtype,
                                          (size_t)cols);
                    if (mf)
                      mf[r] = (float)mu;
                    if (sf)
                      sf[r] = (float)rstd;
                  }
                });
    return AMPRT_OK;
  }
  for (int64_t r = 0; r < rows; ++r) {
    // The row in f32 (x's values exactly); statistics in double.
    const float *v = xf ? xf + r * cols : row.data();
    if (!xf)
      for (int64_t c = 0; c < cols; ++c)
        row[c] = loadF(x->data, x->dtype, r * cols + c);
    float *yr = y->dtype == AMPRT_F32 ? static_cast<float *>(y->data) + r * cols : out32.data();
    double mu, rstd;
    layerNormRow(v, yr, cols, epsilon, sc.data(), bi.data(), mu, rstd);
    if (y->dtype != AMPRT_F32)
      amprt_convert(yr, AMPRT_F32, static_cast<char *>(y->data) + r * cols * 2, y->dtype,
                    (size_t)cols);
    if (mean)
      static_cast<float *>(mean->data)[r] = (float)mu;
    if (inv_std_dev)
      static_cast<float *>(inv_std_dev->data)[r] = (float)rstd;
  }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_layer_norm_grad(amprt_context *, const amprt_tensor *x,
                                              const amprt_tensor *scale, const amprt_tensor *mean,
                                              const amprt_tensor *inv_std_dev,
                                              const amprt_tensor *dy, int32_t axis,
                                              amprt_tensor *dx, amprt_tensor *dscale,
                                              amprt_tensor *dbias) {
  const char *k = "amprt_layer_norm_grad";
  AMPRT_CHECK(checkFloat(x, "amprt_layer_norm_grad: x"));
  AMPRT_CHECK(checkFloat(dy, "amprt_layer_norm_grad: dy"));
  int64_t rows = 0, cols = 0;
  AMPRT_CHECK(splitAt(x, axis, k, rows, cols));
  if (!sameShape(x, dy) || !amprt_tensor_is_contiguous(dy))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: dy must be contiguous with x's shape", k);
  std::vector<int64_t> so;
  AMPRT_CHECK(paramOffsets(x, axis, scale, "amprt_layer_norm_grad: scale", so));
  if (mean->dtype != AMPRT_F32 || inv_std_dev->dtype != AMPRT_F32 ||
      amprt_tensor_numel(mean) != rows || amprt_tensor_numel(inv_std_dev) != rows)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: statistics must be f32 [%lld]", k,
                (long long)rows);
  int64_t np = amprt_tensor_numel(scale);
  std::vector<double> sc(cols);
  for (int64_t c = 0; c < cols; ++c)
    sc[c] = loadF(scale->data, scale->dtype, so[c]);
  // x and dy as f32 rows (f16 / bf16 widened once, exactly).
  amprt_tensor x32 = asF32(x, 0), dy32 = asF32(dy, 1);
  if (!amprt_tensor_is_contiguous(&x32)) {
    amprt_tensor t = scratchF32(x, 0);
    AMPRT_CHECK(amprt_cast(nullptr, x, &t));
    x32 = t;
  }
  const float *xf = static_cast<const float *>(x32.data);
  const float *gf = static_cast<const float *>(dy32.data);
  // Rows in at most 64 pieces of fixed boundaries (they depend on the row
  // count only, so the results do not depend on the threads): each piece's
  // rows give their dx and partial sums of dscale / dbias, in double; the
  // partials are added in piece order.
  int64_t per = std::max<int64_t>(16, (rows + 63) / 64);
  int64_t pieces = rows ? (rows + per - 1) / per : 0;
  std::vector<double> partScale(pieces * np, 0.0), partBias(pieces * np, 0.0);
  bool alongRow = np == cols;
  for (int64_t c = 0; alongRow && c < cols; ++c)
    alongRow = so[c] == c;
  parallelFor(pieces, 1, 1, [&](int64_t p0, int64_t p1) {
    std::vector<double> xhat(cols), dxhat(cols);
    std::vector<float> out(dx && dx->dtype != AMPRT_F32 ? cols : 0);
    for (int64_t piece = p0; piece < p1; ++piece) {
      double *gscale = partScale.data() + piece * np, *gbias = partBias.data() + piece * np;
      for (int64_t r = piece * per; r < std::min(rows, (piece + 1) * per); ++r) {
        double mu = static_cast<const float *>(mean->data)[r];
        double rstd = static_cast<const float *>(inv_std_dev->data)[r];
        double m1 = 0.0, m2 = 0.0;
        if (alongRow) {
          // The vector form (the scale along the row: so[c] == c).
          layerNormGradRow(xf + r * cols, gf + r * cols, sc.data(), mu, rstd, cols, xhat.data(),
                           dxhat.data(), gscale, gbias, m1, m2);
          if (!dx)
            continue;
          float *o =
              dx->dtype == AMPRT_F32 ? static_cast<float *>(dx->data) + r * cols : out.data();
          layerNormDxRow(xhat.data(), dxhat.data(), m1, m2, rstd, o, cols);
          if (dx->dtype != AMPRT_F32)
            (void)amprt_convert(o, AMPRT_F32,
                                static_cast<char *>(dx->data) +
                                    r * cols * amprt_dtype_size(dx->dtype),
                                dx->dtype, (size_t)cols);
          continue;
        }
        for (int64_t c = 0; c < cols; ++c) {
          double g = gf[r * cols + c];
          xhat[c] = (xf[r * cols + c] - mu) * rstd;
          dxhat[c] = g * sc[c];
          m1 += dxhat[c];
          m2 += dxhat[c] * xhat[c];
          gscale[so[c]] += g * xhat[c];
          gbias[so[c]] += g;
        }
        m1 /= cols;
        m2 /= cols;
        if (!dx)
          continue;
        if (dx->dtype == AMPRT_F32) {
          float *o = static_cast<float *>(dx->data) + r * cols;
          for (int64_t c = 0; c < cols; ++c)
            o[c] = (float)(rstd * (dxhat[c] - m1 - xhat[c] * m2));
        } else {
          for (int64_t c = 0; c < cols; ++c)
            storeF(dx->data, dx->dtype, r * cols + c,
                   (float)(rstd * (dxhat[c] - m1 - xhat[c] * m2)));
        }
      }
    }
  });
  std::vector<double> gscale(np, 0.0), gbias(np, 0.0);
  for (int64_t piece = 0; piece < pieces; ++piece)
    for (int64_t i = 0; i < np; ++i) {
      gscale[i] += partScale[piece * np + i];
      gbias[i] += partBias[piece * np + i];
    }
  // so[] maps a normalized position to the scale's offset; scale is assumed
  // contiguous (its natural layout) for the gradient.
  if (dscale)
    for (int64_t i = 0; i < np; ++i)
      storeF(dscale->data, dscale->dtype, i, (float)gscale[i]);
  if (dbias)
    for (int64_t i = 0; i < np; ++i)
      storeF(dbias->data, dbias->dtype, i, (float)gbias[i]);
  return AMPRT_OK;
}

namespace amprt {
amprt_status checkChannel(const amprt_tensor *t, int64_t c, const char *what) {
  AMPRT_CHECK(checkFloat(t, what));
  if (amprt_tensor_numel(t) != c || !amprt_tensor_is_contiguous(t))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: must be contiguous [%lld]", what, (long long)c);
  return AMPRT_OK;
}
} // namespace amprt
