//===- copy.cpp - strided copies and concatenation --------------------------===//
//
// Data movement: element bits copied as they are (no arithmetic).
//
//===----------------------------------------------------------------------===//

#include "cpu/elementwise/elementwise.h"
#include "cpu/elementwise/kernels.h"

#include "common/check.h"
#include "common/convert.h"
#include "common/convert_avx2.h"
#include "common/scalar_ops.h"
#include "host/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

using namespace amprt;
using namespace amprt::ops;

namespace {

#if defined(__x86_64__)
/// dst[r * ds + c] = src[c * ss + r] for r, c < 8: one 8 x 8 block of
/// 32-bit elements transposed in registers (AVX2).
__attribute__((target("avx2"))) void transpose8x8x32(const uint32_t *src, int64_t ss, uint32_t *dst,
                                                     int64_t ds) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_loadu_ps(reinterpret_cast<const float *>(src + i * ss));
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; ++i)
    _mm256_storeu_ps(reinterpret_cast<float *>(dst + i * ds), t[i]);
}

/// The same for 16-bit elements (SSE2).
void transpose8x8x16(const uint16_t *src, int64_t ss, uint16_t *dst, int64_t ds) {
  __m128i r[8], t[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i * ss));
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm_unpacklo_epi16(r[i], r[i + 1]);
    t[i + 1] = _mm_unpackhi_epi16(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm_unpacklo_epi32(t[i], t[i + 2]);
    r[i + 1] = _mm_unpackhi_epi32(t[i], t[i + 2]);
    r[i + 2] = _mm_unpacklo_epi32(t[i + 1], t[i + 3]);
    r[i + 3] = _mm_unpackhi_epi32(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm_unpacklo_epi64(r[i], r[i + 4]);
    t[2 * i + 1] = _mm_unpackhi_epi64(r[i], r[i + 4]);
  }
  for (int i = 0; i < 8; ++i)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i * ds), t[i]);
}
#endif

/// Whether 8 x 8 blocks of T move in registers (transpose8x8): 32-bit
/// elements with AVX2, 16-bit ones always; others element by element.
template <typename T> bool blockTranspose() {
#if defined(__x86_64__)
  return sizeof(T) == 2 || (sizeof(T) == 4 && avx2::haveAvx2F16c());
#else
  return false;
#endif
}

/// One 8 x 8 block transposed in registers (where blockTranspose<T>()).
template <typename T> void transpose8x8(const T *src, int64_t ss, T *dst, int64_t ds) {
#if defined(__x86_64__)
  if constexpr (sizeof(T) == 4)
    transpose8x8x32(reinterpret_cast<const uint32_t *>(src), ss, reinterpret_cast<uint32_t *>(dst),
                    ds);
  else if constexpr (sizeof(T) == 2)
    transpose8x8x16(reinterpret_cast<const uint16_t *>(src), ss, reinterpret_cast<uint16_t *>(dst),
                    ds);
#else
  (void)src;
  (void)ss;
  (void)dst;
  (void)ds;
#endif
}

} // namespace

extern "C" amprt_status amprt_copy(amprt_context *, const amprt_tensor *x, amprt_tensor *y) {
  AMPRT_CHECK(check(x, "amprt_copy: x"));
  AMPRT_CHECK(check(y, "amprt_copy: y"));
  if (x->dtype != y->dtype)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_copy: element types differ (%s, %s); use amprt_cast",
                amprt_dtype_name(x->dtype), amprt_dtype_name(y->dtype));
  if (amprt_tensor_numel(x) != amprt_tensor_numel(y))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_copy: x %s and y %s hold different element counts", shapeString(x).c_str(),
                shapeString(y).c_str());
  size_t es = amprt_dtype_size(x->dtype);
  if (amprt_tensor_numel(x) == 0) // an empty tensor's data may be null
    return AMPRT_OK;
  if (amprt_tensor_is_contiguous(x) && amprt_tensor_is_contiguous(y)) {
    std::memmove(y->data, x->data, (size_t)amprt_tensor_numel(x) * es);
    return AMPRT_OK;
  }
  // Same shape: a strided view copy (transpose, slice, expand). Different
  // shapes with the same count: reshape of non-contiguous data, element
  // order row-major on both sides.
  bool sameShape = x->rank == y->rank;
  for (int32_t d = 0; sameShape && d < x->rank; ++d)
    sameShape = x->shape[d] == y->shape[d];
  if (sameShape) {
    int64_t s[2][AMPRT_MAX_RANK];
    for (int32_t d = 0; d < y->rank; ++d) {
      s[0][d] = x->strides[d];
      s[1][d] = y->strides[d];
    }
    // Merge dimensions that are contiguous in both, then up to four nested
    // loops with the innermost as a memcpy where both sides are dense.
    int64_t sh[AMPRT_MAX_RANK], xs[AMPRT_MAX_RANK], ys[AMPRT_MAX_RANK];
    int32_t r = 0;
    for (int32_t d = 0; d < y->rank; ++d) {
      if (y->shape[d] == 1)
        continue;
      if (r > 0 && xs[r - 1] == s[0][d] * y->shape[d] && ys[r - 1] == s[1][d] * y->shape[d]) {
        sh[r - 1] *= y->shape[d];
        xs[r - 1] = s[0][d];
        ys[r - 1] = s[1][d];
        continue;
      }
      sh[r] = y->shape[d];
      xs[r] = s[0][d];
      ys[r] = s[1][d];
      ++r;
    }
    auto typed = [&](auto tag) {
      using T = decltype(tag);
      const T *xp = static_cast<const T *>(x->data);
      T *yp = static_cast<T *>(y->data);
      if (r <= 4) {
        int64_t n[4] = {1, 1, 1, 1}, a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
        for (int32_t d = 0; d < r; ++d) {
          n[4 - r + d] = sh[d];
          a[4 - r + d] = xs[d];
          b[4 - r + d] = ys[d];
        }
        // A transpose (y's innermost dim strided in x, another of x's dims
        // dense): 16 x 16 tiles written row by row (dense writes; strided
        // writes measured 17x slower: their cache sets collide), so that
        // both sides stay in cache; the tiles of the dense dim on the
        // threads.
        int q = -1;
        for (int dd = 0; dd < 3; ++dd)
          if (a[dd] == 1 && n[dd] >= 8)
            q = dd;
        if (q >= 0 && b[3] == 1 && a[3] != 1 && n[3] >= 8) {
          constexpr int64_t B = 16;
          const bool vecBlocks = blockTranspose<T>();
          int o0 = q == 0 ? 1 : 0, o1 = q == 2 ? 1 : 2; // the other two of 0..2
          parallelFor((n[q] + B - 1) / B, 1, 1, [&](int64_t t0, int64_t t1) {
            for (int64_t i0 = 0; i0 < n[o0]; ++i0)
              for (int64_t i1 = 0; i1 < n[o1]; ++i1) {
                const T *xb = xp + i0 * a[o0] + i1 * a[o1];
                T *yb = yp + i0 * b[o0] + i1 * b[o1];
                for (int64_t qt = t0 * B; qt < std::min(n[q], t1 * B); qt += B)
                  for (int64_t jt = 0; jt < n[3]; jt += B) {
                    int64_t qe = std::min(n[q], qt + B), je = std::min(n[3], jt + B);
                    // Full 8 x 8 blocks in registers, the edges one by one.
                    int64_t qf = qt + (qe - qt) / 8 * 8, jf = jt + (je - jt) / 8 * 8;
                    bool vec = vecBlocks && qf > qt && jf > jt;
                    if (vec)
                      for (int64_t qi = qt; qi < qf; qi += 8)
                        for (int64_t j = jt; j < jf; j += 8)
                          transpose8x8(xb + qi + j * a[3], a[3], yb + qi * b[q] + j, b[q]);
                    for (int64_t qi = qt; qi < qe; ++qi)
                      for (int64_t j = vec && qi < qf ? jf : jt; j < je; ++j)
                        yb[qi * b[q] + j] = xb[qi + j * a[3]];
                  }
              }
          });
          return;
        }
        // The rows of the innermost dim on the threads (Swin's window
        // partitions, rows of 7 x C elements; they ran on one thread).
        parallelFor(n[0] * n[1] * n[2], std::max<int64_t>(1, 16384 / n[3]), 1,
                    [&](int64_t r0, int64_t r1) {
                      // The row's indices kept as an odometer (attention's head
                      // splits: rows of 16 elements, where two divisions a row
                      // cost more than the copy).
                      int64_t i2 = r0 % n[2], i1 = r0 / n[2] % n[1], i0 = r0 / (n[1] * n[2]);
                      for (int64_t row = r0; row < r1; ++row) {
                        const T *xr = xp + i0 * a[0] + i1 * a[1] + i2 * a[2];
                        T *yr = yp + i0 * b[0] + i1 * b[1] + i2 * b[2];
                        if (a[3] == 1 && b[3] == 1)
                          std::memcpy(yr, xr, (size_t)n[3] * sizeof(T));
                        else
                          for (int64_t i3 = 0; i3 < n[3]; ++i3)
                            yr[i3 * b[3]] = xr[i3 * a[3]];
                        if (++i2 == n[2]) {
                          i2 = 0;
                          if (++i1 == n[1]) {
                            i1 = 0;
                            ++i0;
                          }
                        }
                      }
                    });
        return;
      }
      if (xs[r - 1] == 1 && ys[r - 1] == 1) {
        // More dims (attention's [3, B, heads, tokens, head_dim] split of
        // q, k and v): the dense innermost runs copied whole, the outer
        // index kept as an odometer, pieces of the runs on the threads.
        const int64_t run = sh[r - 1];
        int64_t outer = 1;
        for (int32_t d = 0; d < r - 1; ++d)
          outer *= sh[d];
        parallelFor(outer, std::max<int64_t>(1, 16384 / run), 1, [&](int64_t o0, int64_t o1) {
          int64_t idx[AMPRT_MAX_RANK], xo = 0, yo = 0;
          for (int32_t d = r - 2; d >= 0; --d) {
            int64_t below = 1;
            for (int32_t e = d + 1; e < r - 1; ++e)
              below *= sh[e];
            idx[d] = o0 / below % sh[d];
            xo += idx[d] * xs[d];
            yo += idx[d] * ys[d];
          }
          for (int64_t o = o0; o < o1; ++o) {
            std::memcpy(yp + yo, xp + xo, (size_t)run * sizeof(T));
            for (int32_t d = r - 2; d >= 0; --d) {
              xo += xs[d];
              yo += ys[d];
              if (++idx[d] < sh[d])
                break;
              xo -= xs[d] * sh[d];
              yo -= ys[d] * sh[d];
              idx[d] = 0;
            }
          }
        });
        return;
      }
      forEach<2>(y->rank, y->shape, s, [&](const int64_t *o) { yp[o[1]] = xp[o[0]]; });
    };
    switch (es) {
    case 1:
      typed(uint8_t{});
      break;
    case 2:
      typed(uint16_t{});
      break;
    case 4:
      typed(uint32_t{});
      break;
    case 8:
      typed(uint64_t{});
      break;
    default:
      forEach<2>(y->rank, y->shape, s, [&](const int64_t *o) {
        std::memcpy(static_cast<char *>(y->data) + o[1] * es,
                    static_cast<const char *>(x->data) + o[0] * es, es);
      });
    }
    return AMPRT_OK;
  }
  std::vector<int64_t> xo, yo;
  int64_t s1[1][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < x->rank; ++d)
    s1[0][d] = x->strides[d];
  forEach<1>(x->rank, x->shape, s1, [&](const int64_t *o) { xo.push_back(o[0]); });
  for (int32_t d = 0; d < y->rank; ++d)
    s1[0][d] = y->strides[d];
  forEach<1>(y->rank, y->shape, s1, [&](const int64_t *o) { yo.push_back(o[0]); });
  for (size_t i = 0; i < xo.size(); ++i)
    std::memcpy(static_cast<char *>(y->data) + yo[i] * es,
                static_cast<const char *>(x->data) + xo[i] * es, es);
  return AMPRT_OK;
}

extern "C" amprt_status amprt_concat(amprt_context *ctx, const amprt_tensor *inputs, int32_t count,
                                     int32_t axis, amprt_tensor *y) {
  AMPRT_CHECK(check(y, "amprt_concat: y"));
  if (count < 1 || !inputs)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_concat: no inputs");
  if (axis < 0 || axis >= y->rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_concat: axis %d out of range for rank %d", axis,
                y->rank);
  int64_t at = 0;
  for (int32_t i = 0; i < count; ++i) {
    const amprt_tensor *x = &inputs[i];
    AMPRT_CHECK(check(x, "amprt_concat: input"));
    if (x->rank != y->rank || x->dtype != y->dtype)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_concat: input %d (%s %s) does not match y (%s %s)", i,
                  amprt_dtype_name(x->dtype), shapeString(x).c_str(), amprt_dtype_name(y->dtype),
                  shapeString(y).c_str());
    // A view of y for this input's slab.
    amprt_tensor view = *y;
    view.shape[axis] = x->shape[axis];
    view.data =
        static_cast<char *>(y->data) + at * y->strides[axis] * (int64_t)amprt_dtype_size(y->dtype);
    if (at + x->shape[axis] > y->shape[axis])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_concat: inputs exceed y's dim %d (%lld)", axis,
                  (long long)y->shape[axis]);
    AMPRT_CHECK(amprt_copy(ctx, x, &view));
    at += x->shape[axis];
  }
  if (at != y->shape[axis])
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_concat: inputs fill %lld of y's %lld along axis %d", (long long)at,
                (long long)y->shape[axis], axis);
  return AMPRT_OK;
}
