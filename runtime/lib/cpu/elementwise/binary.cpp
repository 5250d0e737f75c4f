//===- binary.cpp - binary ops and where ------------------------------------===//
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

#if defined(__x86_64__)

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

} // namespace

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
