//===- unary.cpp - unary ops and their gradients ----------------------------===//
//
// Float math runs in f32 (as PyTorch's opmath does for f16 / bf16) and is
// rounded once when stored. Integer math runs in int64 and wraps to the
// output type.
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

/// f32 loops with the op chosen outside the loop (vectorisable).
template <typename F> void mapF32(const float *x, float *y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = f(x[i]);
}

// exp, erf and erfc with glibc's vector math library (libmvec, within a
// few ulp like the scalar functions): eight at a time where the CPU has AVX2
// (checked at run time), four at a time with SSE otherwise.
#if defined(__x86_64__) && defined(__GLIBC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
extern "C" __m128 _ZGVbN4v_erff(__m128);
extern "C" __m128 _ZGVbN4v_erfcf(__m128);
extern "C" __m128 _ZGVbN4v_expf(__m128);
// The AVX2 variants take and return __m256: declared for AVX2 (clang refuses
// a __m256 argument in a function compiled for the baseline ABI).
extern "C" __attribute__((target("avx2"))) __m256 _ZGVdN8v_erff(__m256);
extern "C" __attribute__((target("avx2"))) __m256 _ZGVdN8v_erfcf(__m256);
extern "C" __attribute__((target("avx2"))) __m256 _ZGVdN8v_expf(__m256);

bool haveAvx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && !amprt::avx2::avx2Disabled();
  return yes;
}

enum class VFn { Exp, Erf, Erfc };

__attribute__((target("avx2"))) int64_t vmap8(VFn f, const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    v = f == VFn::Exp ? _ZGVdN8v_expf(v) : f == VFn::Erf ? _ZGVdN8v_erff(v) : _ZGVdN8v_erfcf(v);
    _mm256_storeu_ps(y + i, v);
  }
  return i;
}
#pragma GCC diagnostic pop

/// Every element by the same vector function whatever its position (the
/// tail padded to a full vector): a value's result does not depend on the
/// length or split of the array (the f16 / bf16 tables rely on it).
void vmap(VFn f, const float *x, float *y, int64_t n) {
  if (haveAvx2()) {
    int64_t i = vmap8(f, x, y, n);
    if (i < n) {
      float in[8] = {}, out[8];
      std::copy(x + i, x + n, in);
      vmap8(f, in, out, 8);
      std::copy(out, out + (n - i), y + i);
    }
    return;
  }
  auto sse = [f](__m128 v) {
    return f == VFn::Exp ? _ZGVbN4v_expf(v) : f == VFn::Erf ? _ZGVbN4v_erff(v) : _ZGVbN4v_erfcf(v);
  };
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    _mm_storeu_ps(y + i, sse(_mm_loadu_ps(x + i)));
  if (i < n) {
    float in[4] = {}, out[4];
    std::copy(x + i, x + n, in);
    _mm_storeu_ps(out, sse(_mm_loadu_ps(in)));
    std::copy(out, out + (n - i), y + i);
  }
}
#else
enum class VFn { Exp, Erf, Erfc };
void vmap(VFn f, const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = f == VFn::Exp ? std::exp(x[i]) : f == VFn::Erf ? std::erf(x[i]) : std::erfc(x[i]);
}
#endif

void erfF32(const float *x, float *y, int64_t n) { vmap(VFn::Erf, x, y, n); }

/// Chunks of a long array small enough for the cache, for the multi-pass
/// vector kernels below.
constexpr int64_t kChunk = 1024;

/// dx = dy * 2/sqrt(pi) * exp(-x^2)
void erfGradF32(const float *x, const float *dy, float *dx, int64_t n) {
  float t[kChunk];
  for (int64_t c = 0; c < n; c += kChunk) {
    int64_t m = std::min(kChunk, n - c);
    for (int64_t i = 0; i < m; ++i)
      t[i] = -x[c + i] * x[c + i];
    vmap(VFn::Exp, t, t, m);
    for (int64_t i = 0; i < m; ++i)
      dx[c + i] = dy[c + i] * (1.12837916709551257390f * t[i]);
  }
}

/// gelu(x) = x * Phi(x), Phi(x) = 0.5 * erfc(-x / sqrt 2) (as the scalar
/// gelu above).
void geluF32(const float *x, float *y, int64_t n) {
  float t[kChunk];
  for (int64_t c = 0; c < n; c += kChunk) {
    int64_t m = std::min(kChunk, n - c);
    for (int64_t i = 0; i < m; ++i)
      t[i] = -x[c + i] * kSqrt1_2;
    vmap(VFn::Erfc, t, t, m);
    for (int64_t i = 0; i < m; ++i)
      y[c + i] = x[c + i] * (0.5f * t[i]);
  }
}

/// d gelu / dx = Phi(x) + x * phi(x), times dy (as unaryDerivative).
void geluGradF32(const float *x, const float *dy, float *dx, int64_t n) {
  float cdf[kChunk], e[kChunk];
  for (int64_t c = 0; c < n; c += kChunk) {
    int64_t m = std::min(kChunk, n - c);
    for (int64_t i = 0; i < m; ++i) {
      cdf[i] = -x[c + i] * kSqrt1_2;
      e[i] = -0.5f * x[c + i] * x[c + i];
    }
    vmap(VFn::Erfc, cdf, cdf, m);
    vmap(VFn::Exp, e, e, m);
    for (int64_t i = 0; i < m; ++i) {
      float pdf = 0.39894228040143267794f * e[i];
      dx[c + i] = dy[c + i] * (0.5f * cdf[i] + x[c + i] * pdf);
    }
  }
}

/// sigmoid(x) = 1 / (1 + exp(-x)) with the vector exp, in pieces; and its
/// gradient g * s * (1 - s) (SiLU's halves: efficientnet, mobilenet v3).
void sigmoidF32(const float *x, const float *g, float *y, int64_t n) {
  constexpr int64_t kPiece = 1024;
  float t[kPiece];
  for (int64_t b = 0; b < n; b += kPiece) {
    int64_t m = std::min(kPiece, n - b);
    for (int64_t i = 0; i < m; ++i)
      t[i] = -x[b + i];
    vmap(VFn::Exp, t, t, m);
    if (g) {
      for (int64_t i = 0; i < m; ++i) {
        float sv = 1.0f / (1.0f + t[i]);
        y[b + i] = g[b + i] * (sv * (1.0f - sv));
      }
    } else {
      for (int64_t i = 0; i < m; ++i)
        y[b + i] = 1.0f / (1.0f + t[i]);
    }
  }
}

bool unaryFastF32(amprt_unary_op op, float alpha, float beta, const float *x, float *y, int64_t n) {
  switch (op) {
  case AMPRT_UNARY_CLAMP: // applyUnary's selects (NaN kept), vectorised
    mapF32(x, y, n, [alpha, beta](float v) {
      float t = v < alpha ? alpha : v;
      return t > beta ? beta : t;
    });
    return true;
  case AMPRT_UNARY_IDENTITY:
    if (n) // an empty tensor's data may be null
      std::memmove(y, x, n * 4);
    return true;
  case AMPRT_UNARY_RELU: {
    // Branch-free (random signs mispredict): keep v where v > 0 or v is NaN.
    int64_t i = 0;
#if defined(__x86_64__)
    const __m128 zero = _mm_setzero_ps();
    for (; i + 4 <= n; i += 4) {
      __m128 v = _mm_loadu_ps(x + i);
      __m128 keep = _mm_or_ps(_mm_cmpgt_ps(v, zero), _mm_cmpunord_ps(v, v));
      _mm_storeu_ps(y + i, _mm_and_ps(keep, v));
    }
#endif
    for (; i < n; ++i)
      y[i] = x[i] > 0.0f ? x[i] : (x[i] != x[i] ? x[i] : 0.0f);
    return true;
  }
  case AMPRT_UNARY_LEAKY_RELU:
    mapF32(x, y, n, [alpha](float v) { return v >= 0.0f ? v : alpha * v; });
    return true;
  case AMPRT_UNARY_EXP:
    expF32(x, y, n);
    return true;
  case AMPRT_UNARY_TANH:
    mapF32(x, y, n, [](float v) { return std::tanh(v); });
    return true;
  case AMPRT_UNARY_SIGMOID:
    sigmoidF32(x, nullptr, y, n);
    return true;
  case AMPRT_UNARY_GELU:
    geluF32(x, y, n);
    return true;
  case AMPRT_UNARY_GELU_TANH:
    mapF32(x, y, n, geluTanh);
    return true;
  case AMPRT_UNARY_ERF:
    erfF32(x, y, n);
    return true;
  default:
    return false;
  }
}

/// The memory-bound unary ops (no transcendental): threads only for large
/// tensors.
bool cheapUnary(amprt_unary_op op) {
  return op == AMPRT_UNARY_RELU || op == AMPRT_UNARY_LEAKY_RELU || op == AMPRT_UNARY_CLAMP ||
         op == AMPRT_UNARY_IDENTITY;
}

/// ReLU on n f16 / bf16 values in their own bits (no widening): a value
/// with the sign bit set becomes +0, a NaN the quiet NaN the widened path
/// rounds it to (sign kept), anything else is itself: bit for bit the f32
/// kernel on the widened values, rounded back.
void relu16(const uint16_t *x, uint16_t *y, int64_t n, bool bf16) {
  const uint16_t expAll = bf16 ? 0x7f80 : 0x7c00, quiet = bf16 ? 0x7fc0 : 0x7e00;
  int64_t i = 0;
#if defined(__x86_64__)
  const __m128i absMask = _mm_set1_epi16(0x7fff), exp = _mm_set1_epi16((short)expAll),
                signBit = _mm_set1_epi16((short)0x8000), q = _mm_set1_epi16((short)quiet);
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i));
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, absMask), exp);
    __m128i pos = _mm_andnot_si128(_mm_srai_epi16(h, 15), h); // negative -> 0
    __m128i canon = _mm_or_si128(_mm_and_si128(h, signBit), q);
    __m128i r = _mm_or_si128(_mm_and_si128(nan, canon), _mm_andnot_si128(nan, pos));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i), r);
  }
#endif
  for (; i < n; ++i) {
    uint16_t h = x[i];
    y[i] = (h & 0x7fff) > expAll ? (uint16_t)((h & 0x8000) | quiet) : (h & 0x8000) ? 0 : h;
  }
}

/// amprt_unary on n dense f32 elements: the vectorised kernels where there
/// is one, applyUnary per element for the others.
void unaryDenseF32(amprt_unary_op op, float alpha, float beta, const float *x, float *y,
                   int64_t n) {
  if (!unaryFastF32(op, alpha, beta, x, y, n))
    for (int64_t i = 0; i < n; ++i)
      y[i] = applyUnary(op, x[i], alpha, beta);
}

#if defined(__x86_64__)

/// ReLU's gradient dy * (x > 0 ? 1 : 0) over [i0, i1) of dense x, dy, dx of
/// the types X, G, D, in AVX2 registers: the f32 path's arithmetic (an inf
/// or NaN dy stays visible: inf * 0 is NaN), rounded once.
struct ReluGradHalf {
  using Fn = void (*)(const void *, const void *, void *, int64_t, int64_t);
  template <amprt_dtype X, amprt_dtype G, amprt_dtype D>
  __attribute__((target("avx2,f16c"))) static void run(const void *x, const void *g, void *dx,
                                                       int64_t i0, int64_t i1) {
    using namespace amprt::avx2;
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
      __m256 m = _mm256_and_ps(_mm256_cmp_ps(load8<X>(x, i), zero, _CMP_GT_OQ), one);
      store8<D>(dx, i, _mm256_mul_ps(load8<G>(g, i), m));
    }
    for (; i < i1; ++i)
      storeF(dx, D, i, loadF(g, G, i) * (loadF(x, X, i) > 0.0f ? 1.0f : 0.0f));
  }
};
#endif

} // namespace

namespace amprt {

void expF32(const float *x, float *y, int64_t n) { vmap(VFn::Exp, x, y, n); }

void reluGradF32(const float *x, const float *dy, float *out, int64_t n) {
  int64_t i = 0; // dy * 0 keeps an inf / NaN dy visible
#if defined(__x86_64__)
  // Branch-free: the signs of relu inputs are random, a branch per element
  // mispredicts half the time.
  const __m128 zero = _mm_setzero_ps(), one = _mm_set1_ps(1.0f);
  for (; i + 4 <= n; i += 4) {
    __m128 m = _mm_and_ps(_mm_cmpgt_ps(_mm_loadu_ps(x + i), zero), one);
    _mm_storeu_ps(out + i, _mm_mul_ps(_mm_loadu_ps(dy + i), m));
  }
#endif
  for (; i < n; ++i)
    out[i] = dy[i] * (x[i] > 0.0f ? 1.0f : 0.0f);
}

} // namespace amprt

namespace {
/// The f32 fast path of amprt_unary_grad over n contiguous elements.
void unaryGradF32(amprt_unary_op op, float alpha, float beta, const float *xp, const float *gp,
                  float *o, int64_t n) {
  if (op == AMPRT_UNARY_ERF) {
    erfGradF32(xp, gp, o, n);
    return;
  }
  if (op == AMPRT_UNARY_GELU) {
    geluGradF32(xp, gp, o, n);
    return;
  }
  if (op == AMPRT_UNARY_RELU) {
    reluGradF32(xp, gp, o, n);
    return;
  }
  if (op == AMPRT_UNARY_SIGMOID) {
    sigmoidF32(xp, gp, o, n);
    return;
  }
  if (op == AMPRT_UNARY_CLAMP) { // unaryDerivative's test, vectorised
    for (int64_t i = 0; i < n; ++i)
      o[i] = gp[i] * (float)((xp[i] > alpha) & (xp[i] < beta)); // no branch: data-dependent
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    o[i] = gp[i] * unaryDerivative(op, xp[i], alpha, beta);
}

/// Every f16 / bf16 input has one of 65536 bit patterns, so a costly unary
/// op on one (GELU, erf, exp, sigmoid, tanh, ...) is a table of its result
/// for each pattern, computed once per process by the f32 kernels
/// themselves (widened exactly, the same vectorised code, then rounded as
/// the widened path rounds): the same values as computing per element, for
/// a load per element. Its gradient likewise: dy times a table of the
/// derivative (the f32 kernel run with dy = 1, exactly the factor it
/// multiplies dy by), then rounded once.
struct UnaryTable {
  std::vector<uint16_t> half; // the op's result in a half output type
  std::vector<float> f32;     // the result in f32, or the derivative (grad)
};

/// The table for (op, alpha, beta) on `in` (f16 / bf16) with output type
/// `out` (the derivative's for grad), or null where none is kept: a
/// process keeps at most 64 (a table is 128 or 256 KiB).
struct UnaryTables {
  std::mutex mu;
  std::map<std::tuple<int, uint32_t, uint32_t, int, int, bool>, std::unique_ptr<UnaryTable>> map;
};
UnaryTables &unaryTables() {
  static UnaryTables t;
  return t;
}

const UnaryTable *unaryTable(amprt_unary_op op, float alpha, float beta, amprt_dtype in,
                             amprt_dtype out, bool grad) {
  std::mutex &mu = unaryTables().mu;
  auto &tables = unaryTables().map;
  uint32_t a, b;
  std::memcpy(&a, &alpha, 4);
  std::memcpy(&b, &beta, 4);
  auto key = std::make_tuple((int)op, a, b, (int)in, grad ? (int)AMPRT_F32 : (int)out, grad);
  std::lock_guard<std::mutex> lock(mu);
  auto it = tables.find(key);
  if (it != tables.end())
    return it->second.get();
  if (tables.size() >= 64)
    return nullptr;
  constexpr int64_t kN = 65536;
  std::vector<uint16_t> bits(kN);
  for (int64_t i = 0; i < kN; ++i)
    bits[(size_t)i] = (uint16_t)i;
  std::vector<float> xs(kN), ys(kN);
  amprt_convert(bits.data(), in, xs.data(), AMPRT_F32, kN);
  auto t = std::make_unique<UnaryTable>();
  if (grad) {
    std::vector<float> ones(kN, 1.0f);
    unaryGradF32(op, alpha, beta, xs.data(), ones.data(), ys.data(), kN);
    t->f32 = std::move(ys);
  } else {
    unaryDenseF32(op, alpha, beta, xs.data(), ys.data(), kN);
    if (isHalf(out)) {
      // Two more entries: the gathers of lookupHalf512 read four bytes at
      // each entry.
      t->half.resize(kN + 2);
      amprt_convert(ys.data(), AMPRT_F32, t->half.data(), out, kN);
    } else {
      t->f32 = std::move(ys);
    }
  }
  return tables.emplace(key, std::move(t)).first->second.get();
}

#if defined(__x86_64__)
// The tables' loads sixteen at a time by AVX-512 gathers (a table is 128 or
// 256 KiB, in L2): the same entries, and the gradient's product and its
// rounding to bf16 the same IEEE operations as the loops below (roundBf16x16
// is amprt_convert's rounding). A transformer block's [8, 16, 256] bf16
// GELU: 32 us forward and 43 us gradient per call on one thread before.
AMPRT_AVX512_QUIET_BEGIN
#define AMPRT_AVX512 __attribute__((target("avx512f,avx512bw")))

inline __mmask16 lanes16(int64_t left) {
  return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/// The first lanes (m) of 16 16-bit values at p, the others 0.
AMPRT_AVX512 inline __m256i load16x16(__mmask16 m, const uint16_t *p) {
  return _mm512_castsi512_si256(_mm512_maskz_loadu_epi16((__mmask32)m, p));
}

/// y[i] = tab[x[i]] for 16-bit entries (tab padded by two entries).
AMPRT_AVX512 void lookupHalf512(const uint16_t *tab, const uint16_t *x, uint16_t *y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = lanes16(n - i);
    __m512i idx = _mm512_cvtepu16_epi32(load16x16(m, x + i));
    __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, tab, 2);
    _mm512_mask_cvtepi32_storeu_epi16(y + i, m, v);
  }
}

/// y[i] = tab[x[i]] for f32 entries.
AMPRT_AVX512 void lookupF32512(const float *tab, const uint16_t *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = lanes16(n - i);
    __m512i idx = _mm512_cvtepu16_epi32(load16x16(m, x + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, tab, 4));
  }
}

/// dx[i] = dy[i] * tab[x[i]] in f32, dy f32 or bf16, dx f32 or bf16
/// (rounded once).
AMPRT_AVX512 void gradLookup512(const float *tab, const uint16_t *x, const void *dy, bool dyBf16,
                                void *dx, bool dxBf16, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = lanes16(n - i);
    __m512i idx = _mm512_cvtepu16_epi32(load16x16(m, x + i));
    __m512 d = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, tab, 4);
    __m512 g =
        dyBf16
            ? _mm512_castsi512_ps(_mm512_slli_epi32(
                  _mm512_cvtepu16_epi32(load16x16(m, static_cast<const uint16_t *>(dy) + i)), 16))
            : _mm512_maskz_loadu_ps(m, static_cast<const float *>(dy) + i);
    __m512 o = _mm512_mul_ps(g, d);
    if (dxBf16)
      _mm512_mask_cvtepi32_storeu_epi16(static_cast<uint16_t *>(dx) + i, m,
                                        amprt::avx2::roundBf16x16(_mm512_castps_si512(o)));
    else
      _mm512_mask_storeu_ps(static_cast<float *>(dx) + i, m, o);
  }
}
#undef AMPRT_AVX512
AMPRT_AVX512_QUIET_END
#endif

/// Elements a thread takes by table: a load per element.
constexpr int64_t kTableGrain = 16384;

/// Tensors this small keep the per-element path (a table costs 65536
/// evaluations once).
constexpr int64_t kTableMin = 1024;

/// amprt_unary by table: x f16 / bf16, y any float type, both dense of one
/// shape; false where it does not apply.
bool unaryByTable(amprt_unary_op op, float alpha, float beta, const amprt_tensor *x,
                  amprt_tensor *y) {
  const int64_t n = amprt_tensor_numel(y);
  if (cheapUnary(op) || !isHalf(x->dtype) || !isFloat(y->dtype) || n < kTableMin ||
      !sameDense(x, y))
    return false;
  const UnaryTable *t = unaryTable(op, alpha, beta, x->dtype, y->dtype, false);
  if (!t)
    return false;
  const uint16_t *xp = static_cast<const uint16_t *>(x->data);
  parallelFor(n, kTableGrain, 64, [&](int64_t b, int64_t e) {
#if defined(__x86_64__)
    if (haveAvx512bw()) {
      if (isHalf(y->dtype))
        lookupHalf512(t->half.data(), xp + b, static_cast<uint16_t *>(y->data) + b, e - b);
      else
        lookupF32512(t->f32.data(), xp + b, static_cast<float *>(y->data) + b, e - b);
      return;
    }
#endif
    if (isHalf(y->dtype)) {
      const uint16_t *tab = t->half.data();
      uint16_t *yp = static_cast<uint16_t *>(y->data);
      for (int64_t i = b; i < e; ++i)
        yp[i] = tab[xp[i]];
    } else {
      const float *tab = t->f32.data();
      float *yp = static_cast<float *>(y->data);
      for (int64_t i = b; i < e; ++i)
        yp[i] = tab[xp[i]];
    }
  });
  return true;
}

/// amprt_unary_grad by table: x f16 / bf16, dy and dx any float types, all
/// dense of one shape: dx = dy * derivative(x) in f32, rounded once.
bool unaryGradByTable(amprt_unary_op op, float alpha, float beta, const amprt_tensor *x,
                      const amprt_tensor *dy, amprt_tensor *dx) {
  const int64_t n = amprt_tensor_numel(dx);
  if (cheapUnary(op) || !isHalf(x->dtype) || n < kTableMin || !sameDense(x, dx) ||
      !sameDense(dy, dx))
    return false;
  const UnaryTable *t = unaryTable(op, alpha, beta, x->dtype, AMPRT_F32, true);
  if (!t)
    return false;
  const uint16_t *xp = static_cast<const uint16_t *>(x->data);
  const float *tab = t->f32.data();
#if defined(__x86_64__)
  const bool bf16Dy = dy->dtype == AMPRT_BF16, bf16Dx = dx->dtype == AMPRT_BF16;
  if (haveAvx512bw() && (bf16Dy || dy->dtype == AMPRT_F32) && (bf16Dx || dx->dtype == AMPRT_F32)) {
    parallelFor(n, kTableGrain, 64, [&](int64_t b, int64_t e) {
      size_t dys = amprt_dtype_size(dy->dtype), dxs = amprt_dtype_size(dx->dtype);
      gradLookup512(tab, xp + b, static_cast<const char *>(dy->data) + b * dys, bf16Dy,
                    static_cast<char *>(dx->data) + b * dxs, bf16Dx, e - b);
    });
    return true;
  }
#endif
  constexpr int64_t kPiece = 2048;
  parallelFor((n + kPiece - 1) / kPiece, kTableGrain / kPiece, 1, [&](int64_t p0, int64_t p1) {
    float g[kPiece], out[kPiece];
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t i = p * kPiece, m = std::min(kPiece, n - i);
      const float *gp = g;
      if (dy->dtype == AMPRT_F32)
        gp = static_cast<const float *>(dy->data) + i;
      else
        amprt_convert(static_cast<const uint16_t *>(dy->data) + i, dy->dtype, g, AMPRT_F32,
                      (size_t)m);
      float *o = dx->dtype == AMPRT_F32 ? static_cast<float *>(dx->data) + i : out;
      for (int64_t k = 0; k < m; ++k)
        o[k] = gp[k] * tab[xp[i + k]];
      if (dx->dtype != AMPRT_F32)
        amprt_convert(out, AMPRT_F32, static_cast<uint16_t *>(dx->data) + i, dx->dtype, (size_t)m);
    }
  });
  return true;
}
} // namespace

void amprt::dropUnaryTables() {
  std::lock_guard<std::mutex> lock(unaryTables().mu);
  unaryTables().map.clear();
}

extern "C" amprt_status amprt_unary(amprt_context *ctx, amprt_unary_op op, float alpha,
                                    const amprt_tensor *x, amprt_tensor *y) {
  return amprt_unary_ex(ctx, op, alpha, 0.0f, x, y);
}

extern "C" amprt_status amprt_unary_ex(amprt_context *, amprt_unary_op op, float alpha, float beta,
                                       const amprt_tensor *x, amprt_tensor *y) {
  int64_t s[2][AMPRT_MAX_RANK];
  AMPRT_CHECK(prepare("amprt_unary", y, {x}, s));
  if ((unsigned)op > AMPRT_UNARY_LAST)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_unary: unknown op %d", op);
  if (x->dtype == AMPRT_F32 && y->dtype == AMPRT_F32 && sameDense(x, y)) {
    const float *xp = static_cast<const float *>(x->data);
    float *yp = static_cast<float *>(y->data);
    int64_t n = amprt_tensor_numel(y);
    if (op == AMPRT_UNARY_IDENTITY) { // a memmove: one piece
      unaryFastF32(op, alpha, beta, xp, yp, n);
      return AMPRT_OK;
    }
    // Threads for the transcendental ones from a few thousand elements,
    // for the memory-bound ReLUs only for large tensors.
    parallelFor(n, cheapUnary(op) ? (int64_t)1 << 17 : 4096, 64, [&](int64_t b, int64_t e) {
      unaryDenseF32(op, alpha, beta, xp + b, yp + b, e - b);
    });
    return AMPRT_OK;
  }
  // f16 / bf16 ReLU in the same type: on the bits, as f32's (a third of
  // the widening path's work).
  if (op == AMPRT_UNARY_RELU && isHalf(x->dtype) && x->dtype == y->dtype && sameDense(x, y)) {
    const uint16_t *xp = static_cast<const uint16_t *>(x->data);
    uint16_t *yp = static_cast<uint16_t *>(y->data);
    parallelFor(amprt_tensor_numel(y), (int64_t)1 << 17, 64, [&](int64_t b, int64_t e) {
      relu16(xp + b, yp + b, e - b, x->dtype == AMPRT_BF16);
    });
    return AMPRT_OK;
  }
  // f16 / bf16 x, a costly op: by table.
  if (unaryByTable(op, alpha, beta, x, y))
    return AMPRT_OK;
  // f16 / bf16 dense: widened piece by piece, the f32 kernels, rounded once.
  if (isFloat(x->dtype) && halfPieces<1>({x}, y, cheapUnary(op) ? (int64_t)1 << 17 : 4096,
                                         [&](const float *const *in, float *out, int64_t m) {
                                           unaryDenseF32(op, alpha, beta, in[0], out, m);
                                         }))
    return AMPRT_OK;
  if (isFloat(y->dtype)) {
    if (!isFloat(x->dtype))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_unary: float output needs a float input, got %s",
                  amprt_dtype_name(x->dtype));
    if (isHalf(x->dtype) || isHalf(y->dtype)) {
      amprt_tensor x32 = asF32(x, 0), y32 = outF32(y, 1);
      AMPRT_CHECK(amprt_unary_ex(nullptr, op, alpha, beta, &x32, &y32));
      return storeFromF32(y32, y);
    }
    forEach<2>(y->rank, y->shape, s, [&](const int64_t *o) {
      storeF(y->data, y->dtype, o[1], applyUnary(op, loadF(x->data, x->dtype, o[0]), alpha, beta));
    });
    return AMPRT_OK;
  }
  if (op != AMPRT_UNARY_RELU && op != AMPRT_UNARY_IDENTITY)
    return fail(AMPRT_ERR_UNSUPPORTED, "amprt_unary: op %d on integers (only relu and identity)",
                op);
  forEach<2>(y->rank, y->shape, s, [&](const int64_t *o) {
    int64_t v = loadI(x->data, x->dtype, o[0]);
    storeI(y->data, y->dtype, o[1], op == AMPRT_UNARY_RELU && v < 0 ? 0 : v);
  });
  return AMPRT_OK;
}

extern "C" amprt_status amprt_unary_grad(amprt_context *ctx, amprt_unary_op op, float alpha,
                                         const amprt_tensor *x, const amprt_tensor *dy,
                                         amprt_tensor *dx) {
  return amprt_unary_grad_ex(ctx, op, alpha, 0.0f, x, dy, dx);
}

extern "C" amprt_status amprt_unary_grad_ex(amprt_context *, amprt_unary_op op, float alpha,
                                            float beta, const amprt_tensor *x,
                                            const amprt_tensor *dy, amprt_tensor *dx) {
  int64_t s[3][AMPRT_MAX_RANK];
  AMPRT_CHECK(prepare("amprt_unary_grad", dx, {x, dy}, s));
  if ((unsigned)op > AMPRT_UNARY_LAST)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_unary_grad: unknown op %d", op);
  if (!isFloat(x->dtype) || !isFloat(dy->dtype) || !isFloat(dx->dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_unary_grad: x, dy and dx must be float");
#if defined(__x86_64__)
  if (op == AMPRT_UNARY_RELU && amprt::avx2::haveAvx2F16c() && halfDense({x, dy}, dx)) {
    auto f = pickTypes<ReluGradHalf>(x->dtype, dy->dtype, dx->dtype);
    parallelFor(amprt_tensor_numel(dx), (int64_t)1 << 16, 64,
                [&](int64_t b, int64_t e) { f(x->data, dy->data, dx->data, b, e); });
    return AMPRT_OK;
  }
#endif
  if (unaryGradByTable(op, alpha, beta, x, dy, dx))
    return AMPRT_OK;
  bool costly = !cheapUnary(op);
  // f16 / bf16 dense: widened piece by piece, the f32 kernels, rounded once.
  if (halfPieces<2>({x, dy}, dx, costly ? 4096 : (int64_t)1 << 16,
                    [&](const float *const *in, float *out, int64_t m) {
                      unaryGradF32(op, alpha, beta, in[0], in[1], out, m);
                    }))
    return AMPRT_OK;
  if (isHalf(x->dtype) || isHalf(dy->dtype) || isHalf(dx->dtype)) {
    amprt_tensor x32 = asF32(x, 0), dy32 = asF32(dy, 1), dx32 = scratchF32(dx, 2);
    AMPRT_CHECK(amprt_unary_grad_ex(nullptr, op, alpha, beta, &x32, &dy32, &dx32));
    return storeFromF32(dx32, dx);
  }
  if (x->dtype == AMPRT_F32 && dy->dtype == AMPRT_F32 && dx->dtype == AMPRT_F32 &&
      sameDense(x, dx) && sameDense(dy, dx)) {
    // Pieces on the threads (aligned: the same vector / scalar split of the
    // elements as one piece).
    parallelFor(amprt_tensor_numel(dx), costly ? 4096 : (int64_t)1 << 16, 64,
                [&](int64_t b, int64_t e) {
                  unaryGradF32(op, alpha, beta, static_cast<const float *>(x->data) + b,
                               static_cast<const float *>(dy->data) + b,
                               static_cast<float *>(dx->data) + b, e - b);
                });
    return AMPRT_OK;
  }
  forEach<3>(dx->rank, dx->shape, s, [&](const int64_t *o) {
    float xv = loadF(x->data, x->dtype, o[0]);
    float g = loadF(dy->data, dy->dtype, o[1]);
    storeF(dx->data, dx->dtype, o[2], g * unaryDerivative(op, xv, alpha, beta));
  });
  return AMPRT_OK;
}
