//===- reduce.cpp - sums, means, maxima over axes ---------------------------===//
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
