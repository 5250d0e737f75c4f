//===- max_pool.cpp - max pooling and its gradient --------------------------===//

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

/// Output columns [ow0, ow1) of row oh of 2-D f32 max pool plane nc
/// (no dilation): each window's positions inside the input, in row-major
/// order (padding never wins; a window with none gives -inf and index -1).
void maxPoolRowScalar(const float *plane, int64_t H, int64_t W, const Window &w, int64_t nc,
                      int64_t oh, int64_t ow0, int64_t ow1, float *yp, int64_t *ip) {
  int64_t OH = w.out[0], OW = w.out[1];
  int64_t h0 = oh * w.s[0] - w.pb[0];
  int64_t kh0 = std::max<int64_t>(0, -h0), kh1 = std::min<int64_t>(w.k[0], H - h0);
  for (int64_t ow = ow0; ow < ow1; ++ow) {
    int64_t w0 = ow * w.s[1] - w.pb[1];
    int64_t kw0 = std::max<int64_t>(0, -w0), kw1 = std::min<int64_t>(w.k[1], W - w0);
    int64_t o = (nc * OH + oh) * OW + ow;
    if (kh0 >= kh1 || kw0 >= kw1) { // only padding
      yp[o] = -std::numeric_limits<float>::infinity();
      if (ip)
        ip[o] = -1;
      continue;
    }
    int64_t arg = (h0 + kh0) * W + w0 + kw0;
    float best = plane[arg];
    bool nan = best != best;
    // Selects instead of branches (the larger of random values is a coin
    // flip for the branch predictor): the first NaN wins, else the first
    // maximum.
    for (int64_t kh = kh0; kh < kh1; ++kh)
      for (int64_t kw = kw0; kw < kw1; ++kw) {
        int64_t i = (h0 + kh) * W + w0 + kw;
        float v = plane[i];
        bool take = !nan && (v != v || v > best);
        best = take ? v : best;
        arg = take ? i : arg;
        nan = nan || v != v;
      }
    yp[o] = best;
    if (ip)
      ip[o] = nc * H * W + arg;
  }
}

} // namespace

#if defined(__x86_64__)
#define AMPRT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,bmi2")))
AMPRT_AVX512_QUIET_BEGIN // (see internal.h)
namespace {

/// Lanes l of [0, count) whose column c0 + s * l lies in [0, w).
inline __mmask16 columnLanes(int64_t c0, int64_t s, int64_t w, int64_t count) {
  int64_t lo = c0 >= 0 ? 0 : (-c0 + s - 1) / s;
  if (w - 1 - c0 < 0)
    return 0;
  int64_t hi = std::min<int64_t>((w - 1 - c0) / s + 1, count); // one past the last
  if (lo >= hi)
    return 0;
  uint32_t bits = (hi >= 16 ? 0xFFFFu : ((1u << hi) - 1)) & ~((1u << lo) - 1);
  return (__mmask16)bits;
}

/// The sixteen values at columns c0 + s * l (s 1 or 2) of a row of type t
/// (f32 or bf16) as f32, lanes outside `m` not read.
AMPRT_AVX512 inline __m512 columns16(const void *row, amprt_dtype t, int64_t c0, int64_t s,
                                     __mmask16 m) {
  if (s == 1) {
    if (t == AMPRT_F32)
      return _mm512_maskz_loadu_ps(m, static_cast<const float *>(row) + c0);
    __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t *>(row) + c0);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // Stride 2: 32 positions loaded, the even ones taken.
  uint32_t m32 = _pdep_u32(m, 0x55555555u); // lane l's bit to position 2l
  if (t == AMPRT_F32) {
    const float *f = static_cast<const float *>(row) + c0;
    __m512 lo = _mm512_maskz_loadu_ps((__mmask16)m32, f);
    __m512 hi = _mm512_maskz_loadu_ps((__mmask16)(m32 >> 16), f + 16);
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    return _mm512_permutex2var_ps(lo, even, hi);
  }
  __m512i v = _mm512_maskz_loadu_epi16((__mmask32)m32, static_cast<const uint16_t *>(row) + c0);
  __m256i h = _mm512_cvtepi32_epi16(v); // the low (even) halves
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/// Row oh of 2-D max pool plane nc (no dilation, column stride 1 or 2),
/// sixteen outputs at a time: the scalar rule (positions in row-major
/// order, padding never wins, the first NaN wins, else the first maximum;
/// a window with no position inside gives -inf and index -1), y of x's
/// type (bf16: the maximum's own value), indices flat over the tensor.
AMPRT_AVX512 void maxPoolRow512(const void *x, amprt_dtype t, const Window &w, int64_t nc,
                                int64_t oh, void *y, int64_t *ip) {
  const int64_t H = w.in[0], W = w.in[1], OW = w.out[1], S = w.s[1];
  const int64_t h0 = oh * w.s[0] - w.pb[0];
  const int64_t kh0 = std::max<int64_t>(0, -h0), kh1 = std::min<int64_t>(w.k[0], H - h0);
  const size_t es = amprt_dtype_size(t);
  const char *plane = static_cast<const char *>(x) + (size_t)(nc * H * W) * es;
  const int64_t o0 = (nc * w.out[0] + oh) * OW;
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
    const int64_t count = std::min<int64_t>(16, OW - ow0);
    __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __m512i arg = _mm512_set1_epi32(-1);
    __mmask16 have = 0, nan = 0;
    for (int64_t kh = kh0; kh < kh1; ++kh) {
      const int64_t r = h0 + kh;
      const char *row = plane + (size_t)(r * W) * es;
      for (int64_t kw = 0; kw < w.k[1]; ++kw) {
        const int64_t c0 = ow0 * S - w.pb[1] + kw;
        __mmask16 valid = columnLanes(c0, S, W, count);
        if (!valid)
          continue;
        __m512 v = columns16(row, t, c0, S, valid);
        __mmask16 isNan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & valid;
        __mmask16 take = valid & (__mmask16)~nan &
                         ((__mmask16)~have | isNan | _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ));
        best = _mm512_mask_mov_ps(best, take, v);
        __m512i pos = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(r * W + c0)),
                                       _mm512_mullo_epi32(lane, _mm512_set1_epi32((int32_t)S)));
        arg = _mm512_mask_mov_epi32(arg, take, pos);
        nan |= isNan;
        have |= valid;
      }
    }
    const __mmask16 out = (__mmask16)(count >= 16 ? 0xFFFF : (1u << count) - 1);
    if (t == AMPRT_F32) {
      _mm512_mask_storeu_ps(static_cast<float *>(y) + o0 + ow0, out, best);
    } else {
      __m256i h = _mm512_cvtepi32_epi16(avx2::roundBf16x16(_mm512_castps_si512(best)));
      _mm256_mask_storeu_epi16(static_cast<uint16_t *>(y) + o0 + ow0, out, h);
    }
    if (ip) {
      // Flat indices: the plane's offset added where a position was taken.
      const __m512i base = _mm512_set1_epi64(nc * H * W);
      __m512i lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(arg));
      __m512i hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(arg, 1));
      lo = _mm512_mask_add_epi64(lo, (__mmask8)have, lo, base);
      hi = _mm512_mask_add_epi64(hi, (__mmask8)(have >> 8), hi, base);
      _mm512_mask_storeu_epi64(ip + o0 + ow0, (__mmask8)out, lo);
      _mm512_mask_storeu_epi64(ip + o0 + ow0 + 8, (__mmask8)(out >> 8), hi);
    }
  }
}

} // namespace
AMPRT_AVX512_QUIET_END
#endif

extern "C" amprt_status amprt_max_pool(amprt_context *, const amprt_tensor *x,
                                       const amprt_pool_params *p, amprt_tensor *y,
                                       amprt_tensor *indices) {
  Window w;
  AMPRT_CHECK(windowOf(x, y, p, "amprt_max_pool", w));
  if (indices &&
      (indices->dtype != AMPRT_I64 || amprt_tensor_numel(indices) != amprt_tensor_numel(y)))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_max_pool: indices must be i64 with y's size");
#if defined(__x86_64__)
  // 2-D, f32 or bf16, no dilation, column stride 1 or 2 (every CNN's),
  // on AVX-512: sixteen outputs at a time straight from x's type.
  if (p->spatial == 2 && x->dtype == y->dtype &&
      (x->dtype == AMPRT_F32 || x->dtype == AMPRT_BF16) && p->storage_order == 0 && w.d[0] == 1 &&
      w.d[1] == 1 && (w.s[1] == 1 || w.s[1] == 2) && w.in[0] * w.in[1] < ((int64_t)1 << 30) &&
      haveAvx512bw() && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("bmi2")) {
    int64_t *ip = indices ? static_cast<int64_t *>(indices->data) : nullptr;
    parallelFor(w.n * w.c, std::max<int64_t>(1, 16384 / std::max<int64_t>(w.in[0] * w.in[1], 1)), 1,
                [&](int64_t nc0, int64_t nc1) {
                  for (int64_t nc = nc0; nc < nc1; ++nc)
                    for (int64_t oh = 0; oh < w.out[0]; ++oh)
                      maxPoolRow512(x->data, x->dtype, w, nc, oh, y->data, ip);
                });
    return AMPRT_OK;
  }
#endif
  // f16 / bf16: the f32 kernel on converted copies (max is exact in f32).
  if (isHalf(x->dtype) && x->dtype == y->dtype && p->spatial == 2) {
    amprt_tensor x32 = asF32(x, 0), y32 = scratchF32(y, 1);
    AMPRT_CHECK(amprt_max_pool(nullptr, &x32, p, &y32, indices));
    return storeFromF32(y32, y);
  }
  // 2-D f32 without dilation (the common CNN case): the same comparisons
  // (first maximum wins, a NaN wins) in plain loops over each window's
  // positions inside the input (padding never wins; a window with none
  // gives -inf and index -1, as the generic loop).
  if (p->spatial == 2 && x->dtype == AMPRT_F32 && y->dtype == AMPRT_F32 && p->storage_order == 0 &&
      w.d[0] == 1 && w.d[1] == 1) {
    const float *xp = static_cast<const float *>(x->data);
    float *yp = static_cast<float *>(y->data);
    int64_t *ip = indices ? static_cast<int64_t *>(indices->data) : nullptr;
    int64_t H = w.in[0], W = w.in[1], OH = w.out[0], OW = w.out[1];
    // Stride 1 or 2: the outputs whose windows lie inside the input (no
    // padding in them) run four at a time. Candidates in row-major order
    // with the scalar rule (a NaN wins, else the first maximum); with stride
    // 2 a candidate's four values are the even lanes of eight loaded floats,
    // so a group needs one column to spare after its last window.
    bool vec = (w.s[1] == 1 || w.s[1] == 2) && w.k[0] * W < ((int64_t)1 << 31);
    int64_t S = w.s[1], K0 = w.k[0], K1 = w.k[1], PB = w.pb[1];
    // The first output column whose window starts inside, and one past the
    // last whose group of four can be loaded inside the row.
    int64_t owLo = (PB + S - 1) / S, spare = S == 2 ? 1 : 0;
    int64_t owHi = W - K1 - spare + PB < 0 ? 0 : (W - K1 - spare + PB) / S + 1;
    owHi = std::min(owHi, OW);
    // Planes on the threads (each plane's outputs are its own).
    parallelFor(
        w.n * w.c, std::max<int64_t>(1, 16384 / std::max<int64_t>(H * W, 1)), 1,
        [&](int64_t nc0, int64_t nc1) {
          for (int64_t nc = nc0; nc < nc1; ++nc) {
            const float *plane = xp + nc * H * W;
            for (int64_t oh = 0; oh < OH; ++oh) {
              int64_t ow = 0;
#if defined(__x86_64__)
              int64_t hTop = oh * w.s[0] - w.pb[0];
              if (vec && hTop >= 0 && hTop + K0 <= H && owLo + 4 <= owHi) {
                // The outputs before the first inside window: the scalar loop.
                maxPoolRowScalar(plane, H, W, w, nc, oh, 0, owLo, yp, ip);
                for (ow = owLo; ow + 4 <= owHi; ow += 4) {
                  const float *base = plane + hTop * W + ow * S - PB;
                  __m128 best = _mm_setzero_ps(), nan = _mm_setzero_ps();
                  __m128i code = _mm_setzero_si128();
                  for (int64_t kh = 0; kh < K0; ++kh)
                    for (int64_t kw = 0; kw < K1; ++kw) {
                      const float *at = base + kh * W + kw;
                      __m128 v = S == 1 ? _mm_loadu_ps(at)
                                        : _mm_shuffle_ps(_mm_loadu_ps(at), _mm_loadu_ps(at + 4),
                                                         _MM_SHUFFLE(2, 0, 2, 0));
                      __m128i off = _mm_set1_epi32((int32_t)(kh * W + kw));
                      if (kh == 0 && kw == 0) {
                        best = v;
                        nan = _mm_cmpunord_ps(v, v);
                        code = off;
                        continue;
                      }
                      __m128 cn = _mm_cmpunord_ps(v, v);
                      __m128 take = _mm_andnot_ps(nan, _mm_or_ps(_mm_cmpgt_ps(v, best), cn));
                      best = _mm_or_ps(_mm_and_ps(take, v), _mm_andnot_ps(take, best));
                      __m128i ti = _mm_castps_si128(take);
                      code = _mm_or_si128(_mm_and_si128(ti, off), _mm_andnot_si128(ti, code));
                      nan = _mm_or_ps(nan, cn);
                    }
                  int64_t o = (nc * OH + oh) * OW + ow;
                  _mm_storeu_ps(yp + o, best);
                  if (ip) {
                    alignas(16) int32_t cs[4];
                    _mm_store_si128(reinterpret_cast<__m128i *>(cs), code);
                    for (int j = 0; j < 4; ++j)
                      ip[o + j] = nc * H * W + hTop * W + (ow + j) * S - PB + cs[j];
                  }
                }
              }
#endif
              maxPoolRowScalar(plane, H, W, w, nc, oh, ow, OW, yp, ip);
            }
          }
        });
    return AMPRT_OK;
  }
  forPlanes(w, [&](int64_t nc0, int64_t nc1) {
    float best = 0;
    int64_t arg = -1;
    bool nan = false;
    forWindows(
        w, nc0, nc1,
        [&](int64_t) {
          best = -std::numeric_limits<float>::infinity();
          arg = -1;
          nan = false;
        },
        [&](int64_t, int64_t i) {
          if (i < 0 || nan)
            return;
          float v = loadF(x->data, x->dtype, i);
          if (std::isnan(v)) {
            nan = true;
            best = v;
            arg = i;
          } else if (arg < 0 || v > best) {
            best = v;
            arg = i;
          }
        },
        [&](int64_t o) {
          if (isFloat(y->dtype))
            storeF(y->data, y->dtype, o, best);
          else
            storeI(y->data, y->dtype, o, arg >= 0 ? loadI(x->data, x->dtype, arg) : 0);
          if (indices) {
            int64_t at = arg;
            if (at >= 0 && p->storage_order == 1) {
              // Column-major within each (n, c) plane: reverse the spatial order.
              int64_t plane = w.in[0] * w.in[1] * w.in[2], nc = at / plane, r = at % plane;
              int64_t i2 = r % w.in[2], i1 = (r / w.in[2]) % w.in[1], i0 = r / (w.in[2] * w.in[1]);
              at = nc * plane + (i2 * w.in[1] + i1) * w.in[0] + i0;
            }
            static_cast<int64_t *>(indices->data)[o] = at;
          }
        });
  });
  return AMPRT_OK;
}

extern "C" amprt_status amprt_max_pool_grad(amprt_context *, const amprt_tensor *dy,
                                            const amprt_tensor *indices, amprt_tensor *dx) {
  AMPRT_CHECK(check(dy, "amprt_max_pool_grad: dy"));
  AMPRT_CHECK(check(indices, "amprt_max_pool_grad: indices"));
  AMPRT_CHECK(check(dx, "amprt_max_pool_grad: dx"));
  if (indices->dtype != AMPRT_I64 || amprt_tensor_numel(indices) != amprt_tensor_numel(dy) ||
      !amprt_tensor_is_contiguous(dx) || !amprt_tensor_is_contiguous(dy))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_max_pool_grad: indices must be i64 with dy's size; dx, dy "
                "contiguous");
  int64_t nx = amprt_tensor_numel(dx), ny = amprt_tensor_numel(dy);
  const int64_t *idx = static_cast<const int64_t *>(indices->data);
  // The [N, C] planes of dx and dy (one plane when their shapes do not
  // pair up).
  int64_t planes = dx->rank >= 3 && dy->rank == dx->rank && dx->shape[0] == dy->shape[0] &&
                           dx->shape[1] == dy->shape[1]
                       ? dx->shape[0] * dx->shape[1]
                       : 1;
  if (planes < 1 || nx % planes || ny % planes)
    planes = 1;
  int64_t px = nx / planes, py = ny / planes;
  // f32 and no input position chosen twice (windows that do not overlap,
  // the common stride >= kernel case): each dx element is 0 + one dy, the
  // same as the summing path below, written in place.
  if (dx->dtype == AMPRT_F32 && dy->dtype == AMPRT_F32) {
    float *d = static_cast<float *>(dx->data);
    const float *g = static_cast<const float *>(dy->data);
    thread_local std::vector<uint8_t> seenBuf; // this thread's; workers get the pointer
    seenBuf.assign((size_t)nx, 0);
    uint8_t *seen = seenBuf.data();
    // [N, C, ...] planes on the threads: a plane's outputs index its own
    // input plane (as max pool writes them); any index outside its plane,
    // or chosen twice, sends the whole call to the summing path below.
    bool irregular = false;
    parallelFor(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(px, 1)), 1,
                [&](int64_t p0, int64_t p1) {
                  std::memset(d + p0 * px, 0, (size_t)((p1 - p0) * px) * sizeof(float));
                  bool bad = false;
                  for (int64_t o = p0 * py; o < p1 * py && !bad; ++o) {
                    int64_t i = idx[o];
                    if (i < 0)
                      continue;
                    int64_t pl = o / py;
                    bad = i < pl * px || i >= (pl + 1) * px || seen[i];
                    if (!bad) {
                      seen[i] = 1;
                      d[i] = 0.0f + g[o];
                    }
                  }
                  if (bad) {
#pragma omp critical(amprt_max_pool_grad)
                    irregular = true;
                  }
                });
    if (!irregular)
      return AMPRT_OK;
  }
  if (!isFloat(dx->dtype) || !isFloat(dy->dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_max_pool_grad: dy and dx must be float, got %s, %s",
                amprt_dtype_name(dy->dtype), amprt_dtype_name(dx->dtype));
  // Summed in double, the outputs in ascending order, rounded once:
  // windows that overlap (resnet's 3 x 3 stride 2 stem) choose an input
  // twice, and f16 / bf16 come here too. [N, C] planes on the threads when
  // every index stays in its own plane (the order of each dx element's sum
  // is the serial loop's, so the results are the same); otherwise serially.
  for (int64_t o = 0; o < ny; ++o)
    if (idx[o] >= nx)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_max_pool_grad: index %lld out of range",
                  (long long)idx[o]);
  bool inPlane = true;
  for (int64_t pl = 0; pl < planes && inPlane; ++pl)
    for (int64_t o = pl * py; o < (pl + 1) * py; ++o)
      inPlane &= idx[o] < 0 || (idx[o] >= pl * px && idx[o] < (pl + 1) * px);
  if (!inPlane) {
    planes = 1;
    px = nx;
    py = ny;
  }
  parallelFor(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(px, 1)), 1,
              [&](int64_t p0, int64_t p1) {
                thread_local std::vector<double> acc;
                thread_local std::vector<float> gb, ob;
                acc.resize((size_t)px);
                for (int64_t pl = p0; pl < p1; ++pl) {
                  std::fill(acc.begin(), acc.end(), 0.0);
                  const float *g = planeF32(dy, pl, py, gb);
                  for (int64_t o = 0; o < py; ++o) {
                    int64_t i = idx[pl * py + o];
                    if (i >= 0)
                      acc[(size_t)(i - pl * px)] += g[o];
                  }
                  float *out = outPlane(dx, pl, px, ob);
                  for (int64_t i = 0; i < px; ++i)
                    out[i] = (float)acc[(size_t)i];
                  storePlane(dx, pl, px, out);
                }
              });
  return AMPRT_OK;
}
