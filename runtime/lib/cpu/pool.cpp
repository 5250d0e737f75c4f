//===- pool.cpp - max / average pooling and their gradients --------------===//

#include "convert_avx2.h"
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

struct Window {
  int64_t n, c, in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
};

amprt_status windowOf(const amprt_tensor *x, const amprt_tensor *y, const amprt_pool_params *p,
                      const char *k, Window &w) {
  AMPRT_CHECK(check(x, k));
  AMPRT_CHECK(check(y, k));
  if (!p || p->spatial < 1 || p->spatial > 3 || x->rank != p->spatial + 2 || y->rank != x->rank ||
      !amprt_tensor_is_contiguous(x) || !amprt_tensor_is_contiguous(y) ||
      x->shape[0] != y->shape[0] || x->shape[1] != y->shape[1])
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: x %s and y %s must be contiguous [N, C, D...] with the "
                "parameters' spatial rank",
                k, shapeString(x).c_str(), shapeString(y).c_str());
  w.n = x->shape[0];
  w.c = x->shape[1];
  for (int i = 0; i < 3; ++i) {
    bool on = i < p->spatial;
    w.in[i] = on ? x->shape[2 + i] : 1;
    w.out[i] = on ? y->shape[2 + i] : 1;
    w.k[i] = on ? p->kernel[i] : 1;
    w.s[i] = on && p->strides[i] > 0 ? p->strides[i] : 1;
    w.d[i] = on && p->dilations[i] > 0 ? p->dilations[i] : 1;
    w.pb[i] = on ? p->pads_begin[i] : 0;
    w.pe[i] = on ? p->pads_end[i] : 0;
    if (w.k[i] < 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: kernel size %lld", k, (long long)w.k[i]);
  }
  return AMPRT_OK;
}

/// Calls f(output index, input index or -1 for padding) for every window
/// position of every output element of planes [nc0, nc1) ([N, C] flat);
/// begin(o) / end(o) bracket each window.
template <typename Begin, typename Each, typename End>
void forWindows(const Window &w, int64_t nc0, int64_t nc1, Begin begin, Each each, End end) {
  int64_t plane = w.in[0] * w.in[1] * w.in[2];
  int64_t oplane = w.out[0] * w.out[1] * w.out[2];
  for (int64_t nc = nc0; nc < nc1; ++nc)
    for (int64_t o0 = 0; o0 < w.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < w.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < w.out[2]; ++o2) {
          int64_t oi = nc * oplane + (o0 * w.out[1] + o1) * w.out[2] + o2;
          begin(oi);
          for (int64_t k0 = 0; k0 < w.k[0]; ++k0)
            for (int64_t k1 = 0; k1 < w.k[1]; ++k1)
              for (int64_t k2 = 0; k2 < w.k[2]; ++k2) {
                int64_t i0 = o0 * w.s[0] - w.pb[0] + k0 * w.d[0];
                int64_t i1 = o1 * w.s[1] - w.pb[1] + k1 * w.d[1];
                int64_t i2 = o2 * w.s[2] - w.pb[2] + k2 * w.d[2];
                bool inside =
                    i0 >= 0 && i0 < w.in[0] && i1 >= 0 && i1 < w.in[1] && i2 >= 0 && i2 < w.in[2];
                // Positions past the padded input (its end padding; ceil
                // mode's last windows) do not count.
                bool padded =
                    i0 < w.in[0] + w.pe[0] && i1 < w.in[1] + w.pe[1] && i2 < w.in[2] + w.pe[2];
                if (inside)
                  each(oi, nc * plane + (i0 * w.in[1] + i1) * w.in[2] + i2);
                else if (padded)
                  each(oi, -1);
              }
          end(oi);
        }
}

/// forWindows over the [N, C] planes on the threads, each piece of planes
/// with its own state: f(nc0, nc1) runs forWindows on its planes. A plane's
/// outputs read (and a gradient's write) only its own plane, so the results
/// are those of one serial loop.
template <typename F> void forPlanes(const Window &w, F f) {
  int64_t work = w.out[0] * w.out[1] * w.out[2] * w.k[0] * w.k[1] * w.k[2];
  parallelFor(w.n * w.c, std::max<int64_t>(1, 32768 / std::max<int64_t>(work, 1)), 1, f);
}

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

namespace {

/// Average pooling's 2-D windows without dilation, per output row and per
/// output column: the window's input rows [r0, r1) (and columns) inside
/// the input, and how many of its rows (columns) count towards the divisor
/// with count_include_pad (those before the end of the padded input, as
/// forWindows counts them).
struct AvgWindows2D {
  std::vector<int64_t> r0, r1, rc, c0, c1, cc;
  explicit AvgWindows2D(const Window &w) {
    auto axis = [&](int a, std::vector<int64_t> &lo, std::vector<int64_t> &hi,
                    std::vector<int64_t> &cnt) {
      lo.resize(w.out[a]);
      hi.resize(w.out[a]);
      cnt.resize(w.out[a]);
      for (int64_t o = 0; o < w.out[a]; ++o) {
        int64_t start = o * w.s[a] - w.pb[a];
        lo[o] = std::max<int64_t>(start, 0);
        hi[o] = std::max(lo[o], std::min(start + w.k[a], w.in[a]));
        cnt[o] = std::max<int64_t>(0, std::min(start + w.k[a], w.in[a] + w.pe[a]) - start);
      }
    };
    axis(0, r0, r1, rc);
    axis(1, c0, c1, cc);
  }
  /// The divisor of output (oh, ow).
  int64_t count(int64_t oh, int64_t ow, bool includePad) const {
    return includePad ? rc[oh] * cc[ow] : (r1[oh] - r0[oh]) * (c1[ow] - c0[ow]);
  }
};

/// The fast form of average pooling and its gradient: 2-D, no dilation
/// (what networks use). The same sums in the same order as the window
/// loops (rows, then columns; a gradient's shares in the outputs' order),
/// so the same results, with pointers instead of a call per position.
bool avgFast(const Window &w, const amprt_pool_params *p) {
  return p->spatial == 2 && w.d[0] == 1 && w.d[1] == 1;
}

} // namespace

const float *amprt::planeF32(const amprt_tensor *t, int64_t nc, int64_t n,
                             std::vector<float> &buf) {
  if (t->dtype == AMPRT_F32)
    return static_cast<const float *>(t->data) + nc * n;
  buf.resize(n);
  widenRun(static_cast<const char *>(t->data) + nc * n * amprt_dtype_size(t->dtype), t->dtype,
           buf.data(), n);
  return buf.data();
}

float *amprt::outPlane(amprt_tensor *t, int64_t nc, int64_t n, std::vector<float> &buf) {
  if (t->dtype == AMPRT_F32)
    return static_cast<float *>(t->data) + nc * n;
  buf.resize(n);
  return buf.data();
}

void amprt::storePlane(amprt_tensor *t, int64_t nc, int64_t n, const float *f) {
  if (t->dtype != AMPRT_F32)
    narrowRun(f, static_cast<char *>(t->data) + nc * n * amprt_dtype_size(t->dtype), t->dtype, n);
}

extern "C" amprt_status amprt_average_pool(amprt_context *, const amprt_tensor *x,
                                           const amprt_pool_params *p, amprt_tensor *y) {
  Window w;
  AMPRT_CHECK(windowOf(x, y, p, "amprt_average_pool", w));
  if (avgFast(w, p)) {
    AvgWindows2D aw(w);
    const int64_t H = w.in[0], W = w.in[1], OH = w.out[0], OW = w.out[1];
    forPlanes(w, [&](int64_t nc0, int64_t nc1) {
      std::vector<float> xb, yb;
      for (int64_t nc = nc0; nc < nc1; ++nc) {
        const float *xp = planeF32(x, nc, H * W, xb);
        float *yp = outPlane(y, nc, OH * OW, yb);
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double sum = 0;
            for (int64_t h = aw.r0[oh]; h < aw.r1[oh]; ++h)
              for (int64_t c = aw.c0[ow]; c < aw.c1[ow]; ++c)
                sum += xp[h * W + c];
            int64_t count = aw.count(oh, ow, p->count_include_pad);
            yp[oh * OW + ow] = count ? (float)(sum / count) : 0.0f;
          }
        storePlane(y, nc, OH * OW, yp);
      }
    });
    return AMPRT_OK;
  }
  forPlanes(w, [&](int64_t nc0, int64_t nc1) {
    double sum = 0;
    int64_t count = 0;
    forWindows(
        w, nc0, nc1,
        [&](int64_t) {
          sum = 0;
          count = 0;
        },
        [&](int64_t, int64_t i) {
          if (i >= 0)
            sum += loadF(x->data, x->dtype, i);
          if (i >= 0 || p->count_include_pad)
            ++count;
        },
        [&](int64_t o) { storeF(y->data, y->dtype, o, count ? (float)(sum / count) : 0.0f); });
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

extern "C" amprt_status amprt_average_pool_grad(amprt_context *, const amprt_tensor *dy,
                                                const amprt_pool_params *p, amprt_tensor *dx) {
  Window w;
  AMPRT_CHECK(windowOf(dx, dy, p, "amprt_average_pool_grad", w));
  // Each dx element sums its windows' shares in double, in the outputs'
  // order, then rounds once; a plane's windows touch only its own plane.
  const int64_t plane = w.in[0] * w.in[1] * w.in[2];
  if (avgFast(w, p)) {
    AvgWindows2D aw(w);
    const int64_t W = w.in[1], OH = w.out[0], OW = w.out[1];
    forPlanes(w, [&](int64_t nc0, int64_t nc1) {
      std::vector<double> acc((size_t)plane);
      std::vector<float> gb, xb;
      for (int64_t nc = nc0; nc < nc1; ++nc) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const float *gp = planeF32(dy, nc, OH * OW, gb);
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t count = aw.count(oh, ow, p->count_include_pad);
            if (!count)
              continue;
            double g = (double)gp[oh * OW + ow] / (double)count; // in double
            for (int64_t h = aw.r0[oh]; h < aw.r1[oh]; ++h)
              for (int64_t c = aw.c0[ow]; c < aw.c1[ow]; ++c)
                acc[(size_t)(h * W + c)] += g;
          }
        float *xp = outPlane(dx, nc, plane, xb);
        for (int64_t i = 0; i < plane; ++i)
          xp[i] = (float)acc[(size_t)i];
        storePlane(dx, nc, plane, xp);
      }
    });
    return AMPRT_OK;
  }
  forPlanes(w, [&](int64_t nc0, int64_t nc1) {
    std::vector<double> acc((size_t)plane);
    std::vector<int64_t> members;
    int64_t count = 0, base = 0;
    for (int64_t nc = nc0; nc < nc1; ++nc) {
      std::fill(acc.begin(), acc.end(), 0.0);
      base = nc * plane;
      forWindows(
          w, nc, nc + 1,
          [&](int64_t) {
            members.clear();
            count = 0;
          },
          [&](int64_t, int64_t i) {
            if (i >= 0)
              members.push_back(i - base);
            if (i >= 0 || p->count_include_pad)
              ++count;
          },
          [&](int64_t o) {
            if (!count)
              return;
            double g = (double)loadF(dy->data, dy->dtype, o) / (double)count; // in double
            for (int64_t i : members)
              acc[(size_t)i] += g;
          });
      for (int64_t i = 0; i < plane; ++i)
        storeF(dx->data, dx->dtype, base + i, (float)acc[(size_t)i]);
    }
  });
  return AMPRT_OK;
}
