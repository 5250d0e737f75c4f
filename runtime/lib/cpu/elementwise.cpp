//===- elementwise.cpp - elementwise ops, casts, data movement -----------===//
//
// Float math runs in f32 (as PyTorch's opmath does for f16 / bf16) and is
// rounded once when stored. Integer math runs in int64 and wraps to the
// output type.
//
//===----------------------------------------------------------------------===//

#include "convert_avx2.h"
#include "internal.h"
#include "scalar_ops.h"

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

namespace amprt {

amprt_status prepare(const char *kernel, const amprt_tensor *y,
                     std::initializer_list<const amprt_tensor *> ins,
                     int64_t (*strides)[AMPRT_MAX_RANK]) {
  AMPRT_CHECK(check(y, kernel));
  int k = 0;
  for (const amprt_tensor *in : ins) {
    AMPRT_CHECK(check(in, kernel));
    AMPRT_CHECK(broadcastStrides(in, y->rank, y->shape, strides[k], kernel));
    ++k;
  }
  for (int32_t d = 0; d < y->rank; ++d)
    strides[k][d] = y->strides[d];
  return AMPRT_OK;
}

} // namespace amprt

namespace {

/// Same shape, both contiguous: the element order is the flat order.
bool sameDense(const amprt_tensor *a, const amprt_tensor *y) {
  if (a->rank != y->rank || !amprt_tensor_is_contiguous(a) || !amprt_tensor_is_contiguous(y))
    return false;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != y->shape[d])
      return false;
  return true;
}

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

/// y's rows of `cols` against one row b (a trailing vector, a bias); rows
/// on the threads for large tensors.
template <typename F>
void zipRowF32(const float *a, const float *b, float *y, int64_t rows, int64_t cols, F f) {
  parallelFor(rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(cols, 1)), 1,
              [&](int64_t r0, int64_t r1) {
                for (int64_t r = r0; r < r1; ++r) {
                  const float *ar = a + r * cols;
                  float *yr = y + r * cols;
                  for (int64_t c = 0; c < cols; ++c)
                    yr[c] = f(ar[c], b[c]);
                }
              });
}

/// b broadcast against y in its leading dims but equal to y in a trailing
/// block of `inner` elements (an attention mask [1, H, 1, L, L] against
/// scores [B, H, W, L, L]): y's rows of `inner` each meet one contiguous
/// row of b, found from the row's index with b's strides (0 where b is
/// broadcast). Rows on the threads.
template <typename F>
bool blockRowsF32(const amprt_tensor *a, const amprt_tensor *b, amprt_tensor *y, F f) {
  int32_t lead = y->rank - b->rank;
  if (lead < 0)
    return false;
  auto bdim = [&](int32_t k) { return k < lead ? 1 : b->shape[k - lead]; };
  int32_t t = y->rank;
  int64_t inner = 1;
  while (t > 0 && bdim(t - 1) == y->shape[t - 1])
    inner *= y->shape[--t];
  if (t == 0 || inner < 16)
    return false;
  for (int32_t d = 0; d < t; ++d)
    if (bdim(d) != 1 && bdim(d) != y->shape[d])
      return false;
  int64_t bstride[AMPRT_MAX_RANK];
  int64_t st = inner;
  for (int32_t d = t - 1; d >= 0; --d) {
    bstride[d] = bdim(d) == 1 ? 0 : st;
    st *= bdim(d);
  }
  const float *pa = static_cast<const float *>(a->data), *pb = static_cast<const float *>(b->data);
  float *py = static_cast<float *>(y->data);
  int64_t rows = amprt_tensor_numel(y) / inner;
  parallelFor(rows, std::max<int64_t>(1, 65536 / inner), 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, off = 0;
      for (int32_t d = t - 1; d >= 0; --d) {
        off += (rem % y->shape[d]) * bstride[d];
        rem /= y->shape[d];
      }
      const float *ar = pa + r * inner, *br = pb + off;
      float *yr = py + r * inner;
      for (int64_t i = 0; i < inner; ++i)
        yr[i] = f(ar[i], br[i]);
    }
  });
  return true;
}

/// Calls body(f) with the element function of an f32 add / sub / mul /
/// div; `swapped`: f(p, q) computes q op p (the operands' roles exchanged
/// so that the dense one comes first). False for other ops.
template <typename Body> bool withArith(amprt_binary_op op, bool swapped, Body body) {
  switch (op) {
  case AMPRT_BINARY_ADD:
    body([](float p, float q) { return p + q; });
    return true;
  case AMPRT_BINARY_MUL:
    body([](float p, float q) { return p * q; });
    return true;
  case AMPRT_BINARY_SUB:
    if (swapped)
      body([](float p, float q) { return q - p; });
    else
      body([](float p, float q) { return p - q; });
    return true;
  case AMPRT_BINARY_DIV:
    if (swapped)
      body([](float p, float q) { return q / p; });
    else
      body([](float p, float q) { return p / q; });
    return true;
  default:
    return false;
  }
}

/// y = a op b in f32 where one operand is y's dense shape and the other
/// contiguous: same shape, a scalar, a trailing vector (a bias), a block
/// [1.., M.., 1..] (a per-channel scale), or equal to y in a trailing
/// block. `a` broadcast against a dense `b` (squeeze-excitation's scale
/// times the activations) runs with the roles exchanged.
bool binaryFastF32(amprt_binary_op op, const amprt_tensor *a, const amprt_tensor *b,
                   amprt_tensor *y) {
  if (a->dtype != AMPRT_F32 || b->dtype != AMPRT_F32 || y->dtype != AMPRT_F32)
    return false;
  bool swapped = false;
  if (!sameDense(a, y) || !amprt_tensor_is_contiguous(b)) {
    if (!sameDense(b, y) || !amprt_tensor_is_contiguous(a))
      return false;
    std::swap(a, b);
    swapped = true;
  }
  int64_t n = amprt_tensor_numel(y), nb = amprt_tensor_numel(b);
  int64_t cols = y->rank ? y->shape[y->rank - 1] : 1;
  bool scalar = nb == 1, row = false;
  const float *pa = static_cast<const float *>(a->data), *pb = static_cast<const float *>(b->data);
  float *py = static_cast<float *>(y->data);
  // Other broadcasts equal to y in a trailing block.
  auto blockRows = [&]() {
    bool done = false;
    return withArith(op, swapped, [&](auto f) { done = blockRowsF32(a, b, y, f); }) && done;
  };
  if (!scalar && nb != n) {
    // b: the trailing dims' vector ([..., 1, cols] or [cols]), or a block
    // broadcast [1.., M.., 1..] against y (a per-channel [C, 1, 1] against
    // [N, C, H, W]): y is outer x mid x inner with one b value per inner run.
    if (nb == cols && b->rank > 0 && b->shape[b->rank - 1] == cols) {
      row = true;
    } else {
      int32_t lead = y->rank - b->rank, d = 0;
      if (lead < 0)
        return false;
      int64_t outer = 1, mid = 1, inner = 1;
      auto bdim = [&](int32_t k) { return k < lead ? 1 : b->shape[k - lead]; };
      for (; d < y->rank && bdim(d) == 1; ++d)
        outer *= y->shape[d];
      for (; d < y->rank && bdim(d) != 1; ++d) {
        if (bdim(d) != y->shape[d])
          return blockRows();
        mid *= y->shape[d];
      }
      for (; d < y->rank; ++d) {
        if (bdim(d) != 1)
          return blockRows();
        inner *= y->shape[d];
      }
      if (mid != nb)
        return blockRows();
      // One b value per element ([1, C, H, W] against [N, C, H, W]): b's
      // rows against y's, not a value at a time.
      if (inner < 16 && blockRows())
        return true;
      // Runs of `inner` elements on the threads.
      return withArith(op, swapped, [&](auto f) {
        parallelFor(outer * mid, std::max<int64_t>(1, 65536 / std::max<int64_t>(inner, 1)), 1,
                    [&](int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r) {
                        float q = pb[r % mid];
                        int64_t base = r * inner;
                        for (int64_t i = 0; i < inner; ++i)
                          py[base + i] = f(pa[base + i], q);
                      }
                    });
      });
    }
  }
  if (!row) {
    // Same shape or a scalar: the elements as one flat run, in pieces on
    // the threads (whatever the last dim: rows of 2 cost a call each).
    return withArith(op, swapped, [&](auto f) {
      parallelFor(n, 16384, 64, [&](int64_t b0, int64_t b1) {
        if (scalar) {
          float q = pb[0];
          for (int64_t i = b0; i < b1; ++i)
            py[i] = f(pa[i], q);
        } else {
          for (int64_t i = b0; i < b1; ++i)
            py[i] = f(pa[i], pb[i]);
        }
      });
    });
  }
  int64_t rows = cols ? n / cols : 0;
  return withArith(op, swapped, [&](auto f) { zipRowF32(pa, pb, py, rows, cols, f); });
}

/// Same-shape dense float operands with an f16 / bf16 among them: pieces
/// of 2048 elements widened to f32 in thread-local buffers (an f32 operand
/// is read in place), `f(in, out, m)` computes the f32 arithmetic of the
/// f32 path over a piece, and the piece is rounded back once (an f32 y is
/// written in place), on the threads: one pass over memory instead of the
/// four of whole-tensor f32 copies. Pieces are whole multiples of the
/// vector width, so every element sees the f32 path's vector / scalar
/// split. `grain`: elements per thread worth starting one for. False when
/// the operands do not qualify.
template <size_t N, typename F>
bool halfPieces(const amprt_tensor *const (&in)[N], amprt_tensor *y, int64_t grain, F f) {
  bool half = isHalf(y->dtype);
  for (const amprt_tensor *t : in) {
    if (!isFloat(t->dtype) || !sameDense(t, y))
      return false;
    half |= isHalf(t->dtype);
  }
  if (!half || !isFloat(y->dtype))
    return false;
  constexpr int64_t kPiece = 2048;
  int64_t n = amprt_tensor_numel(y);
  parallelFor((n + kPiece - 1) / kPiece, std::max<int64_t>(1, grain / kPiece), 1,
              [&](int64_t p0, int64_t p1) {
                float buf[N][kPiece], out[kPiece];
                for (int64_t p = p0; p < p1; ++p) {
                  int64_t i = p * kPiece, m = std::min(kPiece, n - i);
                  const float *ptr[N];
                  for (size_t k = 0; k < N; ++k) {
                    const char *src = static_cast<const char *>(in[k]->data) +
                                      i * (int64_t)amprt_dtype_size(in[k]->dtype);
                    if (in[k]->dtype == AMPRT_F32) {
                      ptr[k] = reinterpret_cast<const float *>(src);
                    } else {
                      amprt_convert(src, in[k]->dtype, buf[k], AMPRT_F32, (size_t)m);
                      ptr[k] = buf[k];
                    }
                  }
                  char *dst =
                      static_cast<char *>(y->data) + i * (int64_t)amprt_dtype_size(y->dtype);
                  bool direct = y->dtype == AMPRT_F32;
                  f(ptr, direct ? reinterpret_cast<float *>(dst) : out, m);
                  if (!direct)
                    amprt_convert(out, AMPRT_F32, dst, y->dtype, (size_t)m);
                }
              });
  return true;
}

#if defined(__x86_64__)
/// K::run<T...> for the float types at hand (f32 / f16 / bf16, picked one
/// at a time): the kernels below exist for every combination.
template <typename K, amprt_dtype... Ts> typename K::Fn pickTypes() {
  return &K::template run<Ts...>;
}
template <typename K, amprt_dtype... Ts, typename... Rest>
typename K::Fn pickTypes(amprt_dtype t, Rest... rest) {
  switch (t) {
  case AMPRT_F32:
    return pickTypes<K, Ts..., AMPRT_F32>(rest...);
  case AMPRT_F16:
    return pickTypes<K, Ts..., AMPRT_F16>(rest...);
  default:
    return pickTypes<K, Ts..., AMPRT_BF16>(rest...);
  }
}

/// Dense float operands of y's shape, at least one of them f16 / bf16.
bool halfDense(std::initializer_list<const amprt_tensor *> in, const amprt_tensor *y) {
  bool half = isHalf(y->dtype);
  for (const amprt_tensor *t : in) {
    if (!isFloat(t->dtype) || !sameDense(t, y))
      return false;
    half |= isHalf(t->dtype);
  }
  return half && isFloat(y->dtype);
}

/// y = a op b over [i0, i1) of dense elements of the types A, B, Y (f32 /
/// f16 / bf16), eight at a time widened, computed and rounded in AVX2
/// registers, the tail in scalars: the f32 arithmetic and the one rounding
/// of the pieces below, bit for bit, in one pass and without the copies.
template <amprt_binary_op Op> struct ZipHalf {
  using Fn = void (*)(const void *, const void *, void *, int64_t, int64_t);
  template <amprt_dtype A, amprt_dtype B, amprt_dtype Y>
  __attribute__((target("avx2,f16c"))) static void run(const void *a, const void *b, void *y,
                                                       int64_t i0, int64_t i1) {
    using namespace amprt::avx2;
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
      __m256 p = load8<A>(a, i), q = load8<B>(b, i);
      __m256 r = Op == AMPRT_BINARY_ADD   ? _mm256_add_ps(p, q)
                 : Op == AMPRT_BINARY_SUB ? _mm256_sub_ps(p, q)
                 : Op == AMPRT_BINARY_MUL ? _mm256_mul_ps(p, q)
                                          : _mm256_div_ps(p, q);
      store8<Y>(y, i, r);
    }
    for (; i < i1; ++i) {
      float p = loadF(a, A, i), q = loadF(b, B, i);
      storeF(y, Y, i,
             Op == AMPRT_BINARY_ADD   ? p + q
             : Op == AMPRT_BINARY_SUB ? p - q
             : Op == AMPRT_BINARY_MUL ? p * q
                                      : p / q);
    }
  }
};

/// ZipHalf with one operand a single value (attention's scale, a loss's
/// factor): y = a op s (SFirst false: b is the value s) or s op b (SFirst:
/// a is s), the same arithmetic and rounding.
template <amprt_binary_op Op, bool SFirst> struct ScalarHalf {
  using Fn = void (*)(const void *, const void *, void *, int64_t, int64_t);
  template <amprt_dtype A, amprt_dtype B, amprt_dtype Y>
  __attribute__((target("avx2,f16c"))) static void run(const void *a, const void *b, void *y,
                                                       int64_t i0, int64_t i1) {
    using namespace amprt::avx2;
    auto f = [](float p, float q) {
      return Op == AMPRT_BINARY_ADD   ? p + q
             : Op == AMPRT_BINARY_SUB ? p - q
             : Op == AMPRT_BINARY_MUL ? p * q
                                      : p / q;
    };
    const float sv = SFirst ? loadF(a, A, 0) : loadF(b, B, 0);
    const __m256 sb = _mm256_set1_ps(sv);
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
      __m256 p = SFirst ? sb : load8<A>(a, i), q = SFirst ? load8<B>(b, i) : sb;
      __m256 r = Op == AMPRT_BINARY_ADD   ? _mm256_add_ps(p, q)
                 : Op == AMPRT_BINARY_SUB ? _mm256_sub_ps(p, q)
                 : Op == AMPRT_BINARY_MUL ? _mm256_mul_ps(p, q)
                                          : _mm256_div_ps(p, q);
      store8<Y>(y, i, r);
    }
    for (; i < i1; ++i)
      storeF(y, Y, i, SFirst ? f(sv, loadF(b, B, i)) : f(loadF(a, A, i), sv));
  }
};

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

/// amprt_binary's add / sub / mul / div on dense same-shape operands with
/// an f16 / bf16 among them (gradients summed, residual adds in low
/// precision): in AVX2 registers where the CPU has AVX2 + F16C, otherwise
/// in pieces (halfPieces).
bool binaryHalfDense(amprt_binary_op op, const amprt_tensor *a, const amprt_tensor *b,
                     amprt_tensor *y) {
  if (op > AMPRT_BINARY_DIV)
    return false;
#if defined(__x86_64__)
  if (amprt::avx2::haveAvx2F16c()) {
    auto pick = [&](auto k) { return pickTypes<decltype(k)>(a->dtype, b->dtype, y->dtype); };
    if (!halfDense({a, b}, y)) {
      // One operand a single value, the other y's dense twin.
      const bool sFirst = amprt_tensor_numel(a) == 1;
      const amprt_tensor *dn = sFirst ? b : a, *sv = sFirst ? a : b;
      if (amprt_tensor_numel(sv) != 1 || amprt_tensor_numel(y) <= 1 || !isFloat(sv->dtype) ||
          !isFloat(dn->dtype) || !isFloat(y->dtype) || !sameDense(dn, y) ||
          !(isHalf(sv->dtype) || isHalf(dn->dtype) || isHalf(y->dtype)))
        return false;
      // The value read once (it could lie where y is written).
      alignas(8) unsigned char value[8] = {};
      std::memcpy(value, sv->data, amprt_dtype_size(sv->dtype));
      const void *pa = sFirst ? static_cast<const void *>(value) : a->data,
                 *pb = sFirst ? b->data : static_cast<const void *>(value);
      using F = void (*)(const void *, const void *, void *, int64_t, int64_t);
      F f = nullptr;
      if (sFirst)
        f = op == AMPRT_BINARY_ADD   ? pick(ScalarHalf<AMPRT_BINARY_ADD, true>())
            : op == AMPRT_BINARY_SUB ? pick(ScalarHalf<AMPRT_BINARY_SUB, true>())
            : op == AMPRT_BINARY_MUL ? pick(ScalarHalf<AMPRT_BINARY_MUL, true>())
                                     : pick(ScalarHalf<AMPRT_BINARY_DIV, true>());
      else
        f = op == AMPRT_BINARY_ADD   ? pick(ScalarHalf<AMPRT_BINARY_ADD, false>())
            : op == AMPRT_BINARY_SUB ? pick(ScalarHalf<AMPRT_BINARY_SUB, false>())
            : op == AMPRT_BINARY_MUL ? pick(ScalarHalf<AMPRT_BINARY_MUL, false>())
                                     : pick(ScalarHalf<AMPRT_BINARY_DIV, false>());
      parallelFor(amprt_tensor_numel(y), 32768, 64,
                  [&](int64_t i0, int64_t i1) { f(pa, pb, y->data, i0, i1); });
      return true;
    }
    auto f = op == AMPRT_BINARY_ADD   ? pick(ZipHalf<AMPRT_BINARY_ADD>())
             : op == AMPRT_BINARY_SUB ? pick(ZipHalf<AMPRT_BINARY_SUB>())
             : op == AMPRT_BINARY_MUL ? pick(ZipHalf<AMPRT_BINARY_MUL>())
                                      : pick(ZipHalf<AMPRT_BINARY_DIV>());
    parallelFor(amprt_tensor_numel(y), 32768, 64,
                [&](int64_t i0, int64_t i1) { f(a->data, b->data, y->data, i0, i1); });
    return true;
  }
#endif
  return halfPieces<2>({a, b}, y, 32768, [op](const float *const *in, float *fy, int64_t m) {
    const float *fa = in[0], *fb = in[1];
    switch (op) {
    case AMPRT_BINARY_ADD:
      for (int64_t k = 0; k < m; ++k)
        fy[k] = fa[k] + fb[k];
      break;
    case AMPRT_BINARY_SUB:
      for (int64_t k = 0; k < m; ++k)
        fy[k] = fa[k] - fb[k];
      break;
    case AMPRT_BINARY_MUL:
      for (int64_t k = 0; k < m; ++k)
        fy[k] = fa[k] * fb[k];
      break;
    default:
      for (int64_t k = 0; k < m; ++k)
        fy[k] = fa[k] / fb[k];
      break;
    }
  });
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

} // namespace

namespace amprt {

amprt_status convertPar(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n) {
  // Same type: a memmove (one piece: the buffers may overlap); bad types or
  // buffers: refused here, on the caller's thread (its last error).
  if (st == dt || (n && (!src || !dst)))
    return amprt_convert(src, st, dst, dt, n);
  AMPRT_CHECK(amprt_convert(src, st, dst, dt, 0));
  amprt_status status = AMPRT_OK;
  size_t ss = amprt_dtype_size(st), ds = amprt_dtype_size(dt);
  parallelFor((int64_t)n, (int64_t)1 << 16, 64, [&](int64_t b, int64_t e) {
    amprt_status s = amprt_convert(static_cast<const char *>(src) + b * ss, st,
                                   static_cast<char *>(dst) + b * ds, dt, (size_t)(e - b));
    if (s != AMPRT_OK) {
#pragma omp critical(amprt_convert_status)
      status = s;
    }
  });
  return status;
}

static std::vector<float> &scratch(int slot) {
  thread_local std::vector<float> bufs[4];
  return bufs[slot & 3];
}

amprt_tensor asF32(const amprt_tensor *x, int slot) {
  if (x->dtype == AMPRT_F32)
    return *x;
  amprt_tensor t = scratchF32(x, slot);
  if (amprt_tensor_is_contiguous(x))
    convertPar(x->data, x->dtype, t.data, AMPRT_F32, (size_t)amprt_tensor_numel(x));
  else
    amprt_cast(nullptr, x, &t);
  return t;
}

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

amprt_tensor scratchF32(const amprt_tensor *y, int slot) {
  std::vector<float> &b = scratch(slot);
  size_t n = (size_t)amprt_tensor_numel(y);
  if (b.size() < n)
    b.resize(n);
  return amprt_tensor_make(b.data(), AMPRT_F32, y->rank, y->shape);
}

amprt_status storeFromF32(const amprt_tensor &y32, amprt_tensor *y) {
  if (y->data == y32.data)
    return AMPRT_OK;
  if (amprt_tensor_is_contiguous(y))
    return convertPar(y32.data, AMPRT_F32, y->data, y->dtype, (size_t)amprt_tensor_numel(y));
  return amprt_cast(nullptr, &y32, y);
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

namespace {
/// amprt_binary's add / sub / mul / div where one operand has y's dense
/// shape and the other is broadcast over y's first dim (a per-channel
/// scale or bias, a row vector, an attention mask), with an f16 / bf16
/// among them: the small operand widened once, then y's slices along its
/// first dim (each at most 2^20 elements: in cache) widened, computed by
/// the f32 fast path and rounded once, on the threads. The values of the
/// whole-tensor route (widen everything, the f32 op, round), which reads
/// and writes every element four times in memory. False when the operands
/// do not qualify, or the f32 fast path has no loop for the broadcast.
bool binaryHalfBroadcast(amprt_binary_op op, const amprt_tensor *a, const amprt_tensor *b,
                         amprt_tensor *y) {
  if (op > AMPRT_BINARY_DIV || !isFloat(a->dtype) || !isFloat(b->dtype) || !isFloat(y->dtype) ||
      !(isHalf(a->dtype) || isHalf(b->dtype) || isHalf(y->dtype)) || y->rank < 2 ||
      !amprt_tensor_is_contiguous(y))
    return false;
  const bool aDense = sameDense(a, y);
  const amprt_tensor *d = aDense ? a : b, *sm = aDense ? b : a;
  if (!sameDense(d, y) || sameDense(sm, y) || !amprt_tensor_is_contiguous(sm))
    return false;
  const int32_t lead = y->rank - sm->rank;
  if (lead < 0 || (lead == 0 && sm->shape[0] != 1))
    return false; // sm varies along y's first dim
  const int64_t slices = y->shape[0], slice = slices ? amprt_tensor_numel(y) / slices : 0;
  const int64_t nsm = amprt_tensor_numel(sm);
  if (slice == 0 || slice > (1 << 20) || nsm > slice)
    return false;
  // sm must not overlap y (its values are read while y is written).
  const char *s0 = static_cast<const char *>(sm->data), *y0 = static_cast<const char *>(y->data);
  const int64_t yBytes = amprt_tensor_numel(y) * amprt_dtype_size(y->dtype);
  if (s0 + nsm * amprt_dtype_size(sm->dtype) > y0 && s0 < y0 + yBytes)
    return false;
  std::vector<float> small((size_t)nsm);
  convertRun(sm->data, sm->dtype, small.data(), AMPRT_F32, (size_t)nsm);
  const amprt_tensor sm32 = amprt_tensor_make(small.data(), AMPRT_F32, sm->rank, sm->shape);
  int64_t shape[AMPRT_MAX_RANK];
  std::copy(y->shape, y->shape + y->rank, shape);
  shape[0] = 1;
  const size_t db = amprt_dtype_size(d->dtype), yb = amprt_dtype_size(y->dtype);
  // Slice k: widened (where d / y are f16 / bf16), computed, rounded.
  auto run = [&](int64_t k) {
    thread_local std::vector<float> dBuf, yBuf;
    const void *dk = static_cast<const char *>(d->data) + k * slice * db;
    void *yk = static_cast<char *>(y->data) + k * slice * yb;
    float *df = const_cast<float *>(static_cast<const float *>(dk)), *yf = static_cast<float *>(yk);
    if (d->dtype != AMPRT_F32) {
      df = grown(dBuf, (size_t)slice);
      convertRun(dk, d->dtype, df, AMPRT_F32, (size_t)slice);
    }
    if (y->dtype != AMPRT_F32) {
      yf = grown(yBuf, (size_t)slice);
    }
    amprt_tensor dt = amprt_tensor_make(df, AMPRT_F32, y->rank, shape);
    amprt_tensor yt = amprt_tensor_make(yf, AMPRT_F32, y->rank, shape);
    if (!(aDense ? binaryFastF32(op, &dt, &sm32, &yt) : binaryFastF32(op, &sm32, &dt, &yt)))
      return false;
    if (y->dtype != AMPRT_F32)
      convertRun(yf, AMPRT_F32, yk, y->dtype, (size_t)slice);
    return true;
  };
  if (!run(0)) // the f32 fast path takes this broadcast (then it takes every slice)
    return false;
  parallelFor(slices - 1, std::max<int64_t>(1, 65536 / slice), 1, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      run(k + 1);
  });
  return true;
}
} // namespace

extern "C" amprt_status amprt_binary(amprt_context *, amprt_binary_op op, const amprt_tensor *a,
                                     const amprt_tensor *b, amprt_tensor *y) {
  int64_t s[3][AMPRT_MAX_RANK];
  AMPRT_CHECK(prepare("amprt_binary", y, {a, b}, s));
  if ((unsigned)op > AMPRT_BINARY_LAST)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_binary: unknown op %d", op);
  if (isCompare(op)) {
    if (y->dtype != AMPRT_I1 || a->dtype != b->dtype)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_binary: a comparison takes a and b of one type (got %s, %s) and gives "
                  "i1 (got %s)",
                  amprt_dtype_name(a->dtype), amprt_dtype_name(b->dtype),
                  amprt_dtype_name(y->dtype));
    bool flt = isFloat(a->dtype);
    forEach<3>(y->rank, y->shape, s, [&](const int64_t *o) {
      bool r =
          flt ? compareOp<float>(op, loadF(a->data, a->dtype, o[0]), loadF(b->data, b->dtype, o[1]))
              : compareOp<int64_t>(op, loadI(a->data, a->dtype, o[0]),
                                   loadI(b->data, b->dtype, o[1]));
      static_cast<uint8_t *>(y->data)[o[2]] = r ? 1 : 0;
    });
    return AMPRT_OK;
  }
  if (y->dtype == AMPRT_I1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_binary: op %d does not give i1", op);
  if (binaryFastF32(op, a, b, y))
    return AMPRT_OK;
  if (binaryHalfDense(op, a, b, y))
    return AMPRT_OK;
  if (binaryHalfBroadcast(op, a, b, y))
    return AMPRT_OK;
  if (isFloat(y->dtype) && isFloat(a->dtype) && isFloat(b->dtype) &&
      (isHalf(a->dtype) || isHalf(b->dtype) || isHalf(y->dtype))) {
    amprt_tensor a32 = asF32(a, 0), b32 = asF32(b, 1), y32 = outF32(y, 2);
    AMPRT_CHECK(amprt_binary(nullptr, op, &a32, &b32, &y32));
    return storeFromF32(y32, y);
  }
  if (isFloat(y->dtype)) {
    forEach<3>(y->rank, y->shape, s, [&](const int64_t *o) {
      storeF(y->data, y->dtype, o[2],
             binaryF(op, loadF(a->data, a->dtype, o[0]), loadF(b->data, b->dtype, o[1])));
    });
    return AMPRT_OK;
  }
  bool divByZero = false;
  forEach<3>(y->rank, y->shape, s, [&](const int64_t *o) {
    storeI(y->data, y->dtype, o[2],
           binaryI(op, loadI(a->data, a->dtype, o[0]), loadI(b->data, b->dtype, o[1]), &divByZero));
  });
  if (divByZero)
    return fail(AMPRT_ERR_NUMERIC, "amprt_binary: integer division by zero");
  return AMPRT_OK;
}

extern "C" amprt_status amprt_where(amprt_context *, const amprt_tensor *cond,
                                    const amprt_tensor *a, const amprt_tensor *b, amprt_tensor *y) {
  int64_t s[4][AMPRT_MAX_RANK];
  AMPRT_CHECK(prepare("amprt_where", y, {cond, a, b}, s));
  if (cond->dtype != AMPRT_I1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_where: condition must be i1");
  if (a->dtype != y->dtype || b->dtype != y->dtype)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_where: a, b and y must have one element type");
  size_t es = amprt_dtype_size(y->dtype);
  forEach<4>(y->rank, y->shape, s, [&](const int64_t *o) {
    bool c = static_cast<const uint8_t *>(cond->data)[o[0]] != 0;
    const char *src = c ? static_cast<const char *>(a->data) + o[1] * es
                        : static_cast<const char *>(b->data) + o[2] * es;
    std::memcpy(static_cast<char *>(y->data) + o[3] * es, src, es);
  });
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cast(amprt_context *, const amprt_tensor *x, amprt_tensor *y) {
  AMPRT_CHECK(check(x, "amprt_cast: x"));
  AMPRT_CHECK(check(y, "amprt_cast: y"));
  if (x->rank != y->rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cast: x %s and y %s differ",
                shapeString(x).c_str(), shapeString(y).c_str());
  for (int32_t d = 0; d < x->rank; ++d)
    if (x->shape[d] != y->shape[d])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cast: x %s and y %s differ",
                  shapeString(x).c_str(), shapeString(y).c_str());
  // Contiguous float -> float: the bulk converter (vector paths).
  if (isFloat(x->dtype) && isFloat(y->dtype) && amprt_tensor_is_contiguous(x) &&
      amprt_tensor_is_contiguous(y)) {
    return convertPar(x->data, x->dtype, y->data, y->dtype, (size_t)amprt_tensor_numel(x));
  }
  int64_t s[2][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < y->rank; ++d) {
    s[0][d] = x->strides[d];
    s[1][d] = y->strides[d];
  }
  forEach<2>(y->rank, y->shape, s, [&](const int64_t *o) {
    if (y->dtype == AMPRT_I1) {
      bool nz = isFloat(x->dtype) ? loadF(x->data, x->dtype, o[0]) != 0.0f
                                  : loadI(x->data, x->dtype, o[0]) != 0;
      storeI(y->data, y->dtype, o[1], nz);
    } else if (isFloat(y->dtype)) {
      // Integers above 2^24 round through double for a correctly rounded
      // f32, then once more to f16 / bf16 as the GPU does.
      float v = isFloat(x->dtype) ? loadF(x->data, x->dtype, o[0])
                                  : (float)(double)loadI(x->data, x->dtype, o[0]);
      storeF(y->data, y->dtype, o[1], v);
    } else if (isFloat(x->dtype)) {
      storeI(y->data, y->dtype, o[1], floatToInt(loadF(x->data, x->dtype, o[0])));
    } else {
      storeI(y->data, y->dtype, o[1], loadI(x->data, x->dtype, o[0]));
    }
  });
  return AMPRT_OK;
}

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
