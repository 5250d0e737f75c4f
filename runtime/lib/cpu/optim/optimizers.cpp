//===- optimizers.cpp - SGD and Adam, the step counter --------------------===//
//
// docs/semantics.md section 3: PyTorch's update formulas op by op. Every
// kernel that updates state reads found_inf and changes nothing at all
// when it is non-zero.
//
//===----------------------------------------------------------------------===//

#include "cpu/optim/optimizers.h"

#include "common/check.h"
#include "common/convert.h"
#include "common/convert_avx2.h"
#include "common/convert_bits.h"
#include "host/threads.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

using namespace amprt;

namespace {

/// An optimizer's low-precision output: a contiguous f16 / bf16 tensor of
/// the parameter's size, or none.
amprt_status checkLowp(const amprt_tensor *lowp, const amprt_tensor *param, const char *k) {
  if (!lowp)
    return AMPRT_OK;
  AMPRT_CHECK(check(lowp, k));
  if ((lowp->dtype != AMPRT_F16 && lowp->dtype != AMPRT_BF16) ||
      !amprt_tensor_is_contiguous(lowp) || !lowp->data)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: the low-precision copy must be a contiguous f16 / bf16 tensor, got %s %s", k,
                amprt_dtype_name(lowp->dtype), shapeString(lowp).c_str());
  return sameCount(param, lowp, k, "the low-precision copy");
}

/// p[b0, e0) rounded into the low-precision copy.
void writeLowp(const float *p, amprt_tensor *lowp, int64_t b0, int64_t e0) {
  if (lowp && e0 > b0)
    convertRun(p + b0, AMPRT_F32, static_cast<uint16_t *>(lowp->data) + b0, lowp->dtype,
               (size_t)(e0 - b0));
}

/// A skipped step's copy: the unchanged parameter rounded (the copy's
/// buffer may be another than the argument's: the runner swaps them).
void copyUnchanged(const float *p, amprt_tensor *lowp, int64_t len) {
  if (lowp)
    parallelFor(len, 1 << 16, 16, [&](int64_t b0, int64_t e0) { writeLowp(p, lowp, b0, e0); });
}

/// Where an update puts each new parameter value besides p: nowhere, or
/// its bf16 copy in the same loop (one pass over the weights: the copy
/// costs a 2-byte store, not another read of every weight).
struct NoCopy {
  void operator()(int64_t, float) const {}
};
struct Bf16Copy {
  uint16_t *l;
  void operator()(int64_t i, float v) const {
    uint32_t x;
    std::memcpy(&x, &v, 4);
    l[i] = bits::f32ToBf16(x);
  }
};

/// update(b, e, copy) over [b0, e0) with the low-precision copy written in
/// the same pass: bf16 per element (Bf16Copy), f16 per block of 4096
/// elements right after the block's update, while it is in L1 (the
/// vectorised converter).
template <class F>
void updateWithCopy(int64_t b0, int64_t e0, const float *p, amprt_tensor *lowp, F update) {
  if (!lowp) {
    update(b0, e0, NoCopy{});
  } else if (lowp->dtype == AMPRT_BF16) {
    update(b0, e0, Bf16Copy{static_cast<uint16_t *>(lowp->data)});
  } else {
    for (int64_t b = b0; b < e0; b += 4096) {
      int64_t e = std::min(e0, b + 4096);
      update(b, e, NoCopy{});
      writeLowp(p, lowp, b, e);
    }
  }
}

/// c ? a : b by bit masks: both values computed, no branch (GCC would sink
/// a value into the branch that uses it, and then not if-convert it, as
/// floating-point operations may trap), so the loop around it vectorises.
inline float select(bool c, float a, float b) {
  uint32_t ua, ub, mask = 0u - (uint32_t)c;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  uint32_t r = (ua & mask) | (ub & ~mask);
  float f;
  std::memcpy(&f, &r, 4);
  return f;
}

/// torch.optim.Adam / AdamW's per-element arithmetic (adamStep).
struct AdamCoeffs {
  bool coupled, decoupled, small;
  float wd, beta2, eps, w1, w2, decay, bc2Sqrt, nstep;
};

/// Adam's update of [s, e), each new value also given to copy(i, v):
/// compiled for each vector width (AMPRT_CLONES), no branch or conditional
/// store in the loop (select), the coefficients in locals (a store to p, m
/// or v could alias them otherwise, and they would be loaded again).
template <class Copy>
AMPRT_CLONES void adamRange(const AdamCoeffs &a, float *p, const float *g, float *m, float *v,
                            int64_t s, int64_t e, Copy copy) {
  const bool coupled = a.coupled, decoupled = a.decoupled, small = a.small;
  const float wd = a.wd, beta2 = a.beta2, eps = a.eps, w1 = a.w1, w2 = a.w2, decay = a.decay,
              bc2Sqrt = a.bc2Sqrt, nstep = a.nstep;
  for (int64_t i = s; i < e; ++i) {
    float pi = p[i], gi = g[i], mi = m[i];
    pi = select(decoupled, pi * decay, pi);
    gi = select(coupled, gi + wd * pi, gi);
    // lerp as PyTorch computes it (weight < 0.5 form).
    mi = select(small, mi + w1 * (gi - mi), gi - (gi - mi) * (1.0f - w1));
    float vi = v[i] * beta2 + w2 * gi * gi;
    float denom = std::sqrt(vi) / bc2Sqrt + eps;
    pi = pi + nstep * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    copy(i, pi);
  }
}

/// torch.optim.SGD's update of [s, e) (element by element), each new value
/// also given to copy(i, v): compiled for each vector width
/// (AMPRT_CLONES), one loop per case without branches or conditional
/// stores in it, the coefficients in locals (as adamRange). Every clone
/// does the same IEEE operations per element (no contraction:
/// -ffp-contract=off), so the result does not depend on the CPU.
template <class Copy>
AMPRT_CLONES void sgdRange(const amprt_sgd_config &c, bool first, float *p, const float *g,
                           float *b, int64_t s, int64_t e, Copy copy) {
  const float wd = c.weight_decay, mom = c.momentum, damp = 1.0f - c.dampening, nlr = -c.lr;
  const bool decay = wd != 0.0f, nesterov = c.nesterov;
  if (mom == 0.0f) {
    for (int64_t i = s; i < e; ++i) {
      float d = select(decay, g[i] + wd * p[i], g[i]);
      float v = p[i] + nlr * d;
      p[i] = v;
      copy(i, v);
    }
  } else if (first) {
    for (int64_t i = s; i < e; ++i) {
      float d = select(decay, g[i] + wd * p[i], g[i]);
      b[i] = d;
      float v = p[i] + nlr * select(nesterov, d + mom * d, d);
      p[i] = v;
      copy(i, v);
    }
  } else {
    for (int64_t i = s; i < e; ++i) {
      float d = select(decay, g[i] + wd * p[i], g[i]);
      float bi = b[i] * mom + damp * d;
      b[i] = bi;
      float v = p[i] + nlr * select(nesterov, d + mom * bi, bi);
      p[i] = v;
      copy(i, v);
    }
  }
}

#if defined(__x86_64__)
// The updates with their bf16 copy, 16 elements at a time on AVX-512: the
// compiler vectorises sgdRange / adamRange with Bf16Copy in 256-bit halves
// with a slow pack (20 M elements, SGD: 5.3 ms against 2.8 ms without the
// copy); written out, the copy costs little more than its store. Each
// function does the IEEE operations of its scalar loop above in the same
// order (no contraction), and the rounding of roundBf16x8, so the values
// are the same bit for bit (Optimizers.* check it). It returns where it
// stopped: the rest (fewer than 16) goes through the scalar loop.

// GCC 12 warns of the undefined vectors its own AVX-512 intrinsics start
// from (its bug 105593), here where they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/// bf16 bits of the 16 f32 in v, stored at l; past the caches when stream
/// (l 32-byte aligned).
__attribute__((target("avx512f,avx512bw"))) inline void storeBf16x16(uint16_t *l, __m512 v,
                                                                     bool stream) {
  __m256i h = _mm512_cvtepi32_epi16(avx2::roundBf16x16(_mm512_castps_si512(v)));
  if (stream)
    _mm256_stream_si256(reinterpret_cast<__m256i *>(l), h);
  else
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(l), h);
}

__attribute__((target("avx512f,avx512bw"))) int64_t sgdBf16Avx512(const amprt_sgd_config &c,
                                                                  bool first, float *p,
                                                                  const float *g, float *b,
                                                                  int64_t s, int64_t e, uint16_t *l,
                                                                  bool stream) {
  const __m512 wd = _mm512_set1_ps(c.weight_decay), mom = _mm512_set1_ps(c.momentum),
               damp = _mm512_set1_ps(1.0f - c.dampening), nlr = _mm512_set1_ps(-c.lr);
  const bool decay = c.weight_decay != 0.0f, nesterov = c.nesterov, plain = c.momentum == 0.0f;
  int64_t i = s;
  for (; i + 16 <= e; i += 16) {
    __m512 pi = _mm512_loadu_ps(p + i), gi = _mm512_loadu_ps(g + i);
    __m512 d = decay ? _mm512_add_ps(gi, _mm512_mul_ps(wd, pi)) : gi;
    __m512 step;
    if (plain) {
      step = d;
    } else if (first) {
      _mm512_storeu_ps(b + i, d);
      step = nesterov ? _mm512_add_ps(d, _mm512_mul_ps(mom, d)) : d;
    } else {
      __m512 bi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(b + i), mom), _mm512_mul_ps(damp, d));
      _mm512_storeu_ps(b + i, bi);
      step = nesterov ? _mm512_add_ps(d, _mm512_mul_ps(mom, bi)) : bi;
    }
    __m512 v = _mm512_add_ps(pi, _mm512_mul_ps(nlr, step));
    _mm512_storeu_ps(p + i, v);
    storeBf16x16(l + i, v, stream);
  }
  if (stream)
    _mm_sfence(); // the streamed stores before the join that publishes them
  return i;
}

__attribute__((target("avx512f,avx512bw"))) int64_t adamBf16Avx512(const AdamCoeffs &a, float *p,
                                                                   const float *g, float *m,
                                                                   float *v, int64_t s, int64_t e,
                                                                   uint16_t *l, bool stream) {
  const __m512 wd = _mm512_set1_ps(a.wd), beta2 = _mm512_set1_ps(a.beta2),
               eps = _mm512_set1_ps(a.eps), w1 = _mm512_set1_ps(a.w1),
               w1c = _mm512_set1_ps(1.0f - a.w1), w2 = _mm512_set1_ps(a.w2),
               decay = _mm512_set1_ps(a.decay), bc2Sqrt = _mm512_set1_ps(a.bc2Sqrt),
               nstep = _mm512_set1_ps(a.nstep);
  int64_t i = s;
  for (; i + 16 <= e; i += 16) {
    __m512 pi = _mm512_loadu_ps(p + i), gi = _mm512_loadu_ps(g + i), mi = _mm512_loadu_ps(m + i);
    if (a.decoupled)
      pi = _mm512_mul_ps(pi, decay);
    if (a.coupled)
      gi = _mm512_add_ps(gi, _mm512_mul_ps(wd, pi));
    __m512 diff = _mm512_sub_ps(gi, mi);
    mi = a.small ? _mm512_add_ps(mi, _mm512_mul_ps(w1, diff))
                 : _mm512_sub_ps(gi, _mm512_mul_ps(diff, w1c));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + i), beta2),
                              _mm512_mul_ps(_mm512_mul_ps(w2, gi), gi));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2Sqrt), eps);
    pi = _mm512_add_ps(pi, _mm512_mul_ps(nstep, _mm512_div_ps(mi, denom)));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    _mm512_storeu_ps(p + i, pi);
    storeBf16x16(l + i, pi, stream);
  }
  if (stream)
    _mm_sfence(); // the streamed stores before the join that publishes them
  return i;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

/// The bf16 copy's data where the AVX-512 loops above may write it, else
/// null.
uint16_t *bf16CopyAvx512(amprt_tensor *lowp) {
#if defined(__x86_64__)
  if (lowp && lowp->dtype == AMPRT_BF16 && haveAvx512bw())
    return static_cast<uint16_t *>(lowp->data);
#endif
  (void)lowp;
  return nullptr;
}

/// The optimizer updates' split: pieces of at least this many elements
/// (see sgdStep).
constexpr int64_t kUpdateGrain = 1 << 13;

/// Whether the bf16 copy of a len-element update bypasses the caches: a
/// large model's copies are read again only by the next step's forward,
/// long after the caches have turned over, and a plain store first reads
/// each line it writes (26 M elements with momentum, 2 threads: 12.7 ms with
/// plain stores, 11.2 streamed, 10.0 without the copy). Small tensors keep
/// plain stores: their copies may still be cached when read.
inline bool streamCopy(const uint16_t *l, int64_t len) {
  return len >= (int64_t(1) << 20) && reinterpret_cast<uintptr_t>(l) % 32 == 0;
}

} // namespace

extern "C" amprt_status amprt_sgd_step(amprt_context *ctx, const amprt_sgd_config *cfg,
                                       amprt_tensor *param, const amprt_tensor *grad,
                                       amprt_tensor *buf, const int64_t *step, float found_inf) {
  return amprt::sgdStep(ctx, cfg, param, grad, buf, step, found_inf, nullptr);
}

amprt_status amprt::sgdStep(amprt_context *, const amprt_sgd_config *cfg, amprt_tensor *param,
                            const amprt_tensor *grad, amprt_tensor *buf, const int64_t *step,
                            float found_inf, amprt_tensor *lowp) {
  const char *k = "amprt_sgd_step";
  if (!cfg || !step)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: null config or step", k);
  AMPRT_CHECK(checkF32(param, "amprt_sgd_step: param"));
  AMPRT_CHECK(checkF32(grad, "amprt_sgd_step: grad"));
  AMPRT_CHECK(sameCount(param, grad, k, "grad"));
  if (cfg->nesterov && (cfg->momentum <= 0.0f || cfg->dampening != 0.0f))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: nesterov needs momentum > 0 and dampening 0", k);
  if (cfg->momentum != 0.0f) {
    if (!buf)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: momentum %g needs a buffer", k, cfg->momentum);
    AMPRT_CHECK(checkF32(buf, "amprt_sgd_step: momentum buffer"));
    AMPRT_CHECK(sameCount(param, buf, k, "the momentum buffer"));
  }
  AMPRT_CHECK(checkLowp(lowp, param, k));
  float *p = static_cast<float *>(param->data);
  int64_t len = amprt_tensor_numel(param);
  if (found_inf != 0.0f) { // skipped: the copy of the unchanged weight
    copyUnchanged(p, lowp, len);
    return AMPRT_OK;
  }
  const float *g = static_cast<const float *>(grad->data);
  float *b = buf ? static_cast<float *>(buf->data) : nullptr;
  bool first = *step == 0;
  const amprt_sgd_config c = *cfg;
  // Element by element (the same arithmetic on every piece of the split).
  // Split from 16 K elements (kUpdateGrain): a tensor in the caches
  // updates at about one core's bandwidth, and DenseNet's 58 weights of
  // 37 K elements ran one thread each (Intel Xeon with AMX, 2 threads, 60
  // such tensors with their bf16 copies: 17.5 -> 10.7 us a call; 74 K
  // elements 38 -> 20 us; Adam's 37 K 33 -> 20 us).
  uint16_t *l16 = bf16CopyAvx512(lowp);
  [[maybe_unused]] const bool stream = l16 && streamCopy(l16, len);
  parallelFor(len, kUpdateGrain, 16, [&](int64_t b0, int64_t e0) {
#if defined(__x86_64__)
    if (l16)
      b0 = sgdBf16Avx512(c, first, p, g, b, b0, e0, l16, stream);
#endif
    updateWithCopy(b0, e0, p, lowp, [&](int64_t s, int64_t e, auto copy) {
      sgdRange(c, first, p, g, b, s, e, copy);
    });
  });
  return AMPRT_OK;
}

extern "C" amprt_status amprt_adam_step(amprt_context *ctx, const amprt_adam_config *cfg,
                                        amprt_tensor *param, const amprt_tensor *grad,
                                        amprt_tensor *exp_avg, amprt_tensor *exp_avg_sq,
                                        const int64_t *step, float found_inf) {
  return amprt::adamStep(ctx, cfg, param, grad, exp_avg, exp_avg_sq, step, found_inf, nullptr);
}

amprt_status amprt::adamStep(amprt_context *, const amprt_adam_config *cfg, amprt_tensor *param,
                             const amprt_tensor *grad, amprt_tensor *exp_avg,
                             amprt_tensor *exp_avg_sq, const int64_t *step, float found_inf,
                             amprt_tensor *lowp) {
  const char *k = "amprt_adam_step";
  if (!cfg || !step)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: null config or step", k);
  AMPRT_CHECK(checkF32(param, "amprt_adam_step: param"));
  AMPRT_CHECK(checkF32(grad, "amprt_adam_step: grad"));
  AMPRT_CHECK(checkF32(exp_avg, "amprt_adam_step: exp_avg"));
  AMPRT_CHECK(checkF32(exp_avg_sq, "amprt_adam_step: exp_avg_sq"));
  AMPRT_CHECK(sameCount(param, grad, k, "grad"));
  AMPRT_CHECK(sameCount(param, exp_avg, k, "exp_avg"));
  AMPRT_CHECK(sameCount(param, exp_avg_sq, k, "exp_avg_sq"));
  if (!(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f && cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f &&
        cfg->eps >= 0.0f))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: betas must be in [0, 1) and eps >= 0 (got %g, %g, %g)", k, cfg->beta1,
                cfg->beta2, cfg->eps);
  if (cfg->decoupled < 0 || cfg->decoupled > 2)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: unknown weight decay form %d", k,
                (int)cfg->decoupled);
  AMPRT_CHECK(checkLowp(lowp, param, k));
  float *p = static_cast<float *>(param->data);
  int64_t len = amprt_tensor_numel(param);
  if (found_inf != 0.0f) { // skipped: the copy of the unchanged weight
    copyUnchanged(p, lowp, len);
    return AMPRT_OK;
  }
  const float *g = static_cast<const float *>(grad->data);
  float *m = static_cast<float *>(exp_avg->data);
  float *v = static_cast<float *>(exp_avg_sq->data);
  if (cfg->decoupled == 2) {
    // onnxruntime-training's AdamWOptimizer, adam_mode 1 (its f32 order).
    float ac = 1.0f - (float)std::pow((double)cfg->beta1, (double)(*step + 1));
    float bc = 1.0f - (float)std::pow((double)cfg->beta2, (double)(*step + 1));
    float lrc = cfg->lr * (std::sqrt(bc) / ac);
    float w1 = 1.0f - cfg->beta1, w2 = 1.0f - cfg->beta2;
    float decay = cfg->lr * cfg->weight_decay;
    updateWithCopy(0, len, p, lowp, [&](int64_t s, int64_t e, auto copy) {
      for (int64_t i = s; i < e; ++i) {
        float gi = g[i];
        m[i] = cfg->beta1 * m[i] + w1 * gi;
        v[i] = cfg->beta2 * v[i] + w2 * gi * gi;
        p[i] = p[i] - lrc * m[i] / (std::sqrt(v[i]) + cfg->eps);
        p[i] = p[i] - decay * p[i];
        copy(i, p[i]);
      }
    });
    return AMPRT_OK;
  }
  double t = (double)(*step + 1);
  double bc1 = 1.0 - std::pow((double)cfg->beta1, t);
  double bc2 = 1.0 - std::pow((double)cfg->beta2, t);
  float stepSize = (float)((double)cfg->lr / bc1);
  float bc2Sqrt = (float)std::sqrt(bc2);
  float w1 = 1.0f - cfg->beta1, w2 = 1.0f - cfg->beta2;
  float decay = (float)(1.0 - (double)cfg->lr * (double)cfg->weight_decay);
  AdamCoeffs a;
  a.coupled = cfg->weight_decay != 0.0f && !cfg->decoupled;
  a.decoupled = cfg->weight_decay != 0.0f && cfg->decoupled;
  a.small = w1 < 0.5f;
  a.wd = cfg->weight_decay;
  a.beta2 = cfg->beta2;
  a.eps = cfg->eps;
  a.w1 = w1;
  a.w2 = w2;
  a.decay = decay;
  a.bc2Sqrt = bc2Sqrt;
  a.nstep = -stepSize;
  uint16_t *l16 = bf16CopyAvx512(lowp);
  [[maybe_unused]] const bool stream = l16 && streamCopy(l16, len);
  parallelFor(len, kUpdateGrain, 16, [&](int64_t b0, int64_t e0) { // (see sgdStep)
#if defined(__x86_64__)
    if (l16)
      b0 = adamBf16Avx512(a, p, g, m, v, b0, e0, l16, stream);
#endif
    updateWithCopy(b0, e0, p, lowp,
                   [&](int64_t s, int64_t e, auto copy) { adamRange(a, p, g, m, v, s, e, copy); });
  });
  return AMPRT_OK;
}

extern "C" amprt_status amprt_step_count(amprt_context *, int64_t *step, float found_inf) {
  if (!step)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_step_count: null step");
  if (found_inf == 0.0f)
    ++*step;
  return AMPRT_OK;
}
