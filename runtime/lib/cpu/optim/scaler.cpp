//===- scaler.cpp - unscale and inf check, the loss scale, clipping -------===//
//
// docs/semantics.md section 3. The formulas follow PyTorch op by op (f32
// arithmetic where PyTorch uses f32, double where it uses Python floats) so
// that a step here and a step there agree to the last bits where they can.
//
//===----------------------------------------------------------------------===//

#include "cpu/optim/scaler.h"

#include "common/check.h"
#include "common/convert_avx2.h"
#include "common/convert_bits.h"
#include "host/context.h"
#include "host/threads.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

using namespace amprt;

namespace {

inline bool nonFinite(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return (b & 0x7f800000u) == 0x7f800000u;
}

/// Whether src[b0, e0) holds an inf or NaN (the f32 bits' exponent all
/// ones); unscaleRange also writes src * inv into dst. Compiled per vector
/// width (AMPRT_CLONES; the baseline build read 16 bytes a step, and the
/// check, a read of every gradient, ran at half the bandwidth of the SGD
/// update).
AMPRT_CLONES uint32_t checkRange(const float *src, int64_t b0, int64_t e0) {
  uint32_t acc = 0;
  for (int64_t i = b0; i < e0; ++i) {
    uint32_t b;
    std::memcpy(&b, &src[i], 4);
    acc |= (b & 0x7f800000u) == 0x7f800000u;
  }
  return acc;
}
AMPRT_CLONES uint32_t unscaleRange(const float *src, float *dst, float inv, int64_t b0,
                                   int64_t e0) {
  uint32_t acc = 0;
  for (int64_t i = b0; i < e0; ++i) {
    uint32_t b;
    std::memcpy(&b, &src[i], 4);
    acc |= (b & 0x7f800000u) == 0x7f800000u;
    dst[i] = src[i] * inv;
  }
  return acc;
}
} // namespace

bool amprt::anyNonFiniteF32(const float *p, int64_t n) {
  std::atomic<uint32_t> any{0};
  parallelFor(n, 1 << 16, 16, [&](int64_t b0, int64_t e0) {
    if (checkRange(p, b0, e0))
      any.store(1, std::memory_order_relaxed);
  });
  return any.load() != 0;
}

void amprt::notePrechecked(amprt_context *ctx, const amprt_tensor *t, bool nonFinite) {
  if (!ctx || t->dtype != AMPRT_F32)
    return;
  std::lock_guard<std::mutex> lock(ctx->precheckedMu);
  for (auto &e : ctx->prechecked)
    if (e.data == t->data) { // the same tensor again (a step cut short)
      e = {t->data, amprt_tensor_numel(t), nonFinite};
      return;
    }
  ctx->prechecked.push_back({t->data, amprt_tensor_numel(t), nonFinite});
}

bool amprt::takePrechecked(amprt_context *ctx, const amprt_tensor *t, bool *nonFinite) {
  if (!ctx)
    return false;
  std::lock_guard<std::mutex> lock(ctx->precheckedMu);
  for (size_t i = 0; i < ctx->prechecked.size(); ++i) {
    auto e = ctx->prechecked[i];
    if (e.data != t->data)
      continue;
    ctx->prechecked.erase(ctx->prechecked.begin() + (ptrdiff_t)i);
    if (e.numel != amprt_tensor_numel(t) || t->dtype != AMPRT_F32)
      return false;
    *nonFinite = e.nonFinite;
    return true;
  }
  return false;
}

void amprt::forgetPrechecked(amprt_context *ctx) {
  if (!ctx)
    return;
  std::lock_guard<std::mutex> lock(ctx->precheckedMu);
  ctx->prechecked.clear();
}

extern "C" amprt_status amprt_unscale_and_check(amprt_context *ctx, const amprt_tensor *grads,
                                                amprt_tensor *outs, int32_t n, const float *scale,
                                                float *found_inf) {
  return unscaleAndCheck(ctx, grads, outs, n, scale, found_inf, false);
}

amprt_status amprt::unscaleAndCheck(amprt_context *ctx, const amprt_tensor *grads,
                                    amprt_tensor *outs, int32_t n, const float *scale,
                                    float *found_inf, bool usePrechecked) {
  if (n < 0 || (n > 0 && (!grads || !outs)) || !scale || !found_inf)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_unscale_and_check: null argument");
  // PyTorch: scale.double().reciprocal().float().
  float inv = (float)(1.0 / (double)*scale);
  bool bad = false;
  for (int32_t k = 0; k < n; ++k) {
    const amprt_tensor *g = &grads[k];
    amprt_tensor *o = &outs[k];
    AMPRT_CHECK(check(g, "amprt_unscale_and_check: gradient"));
    AMPRT_CHECK(checkF32(o, "amprt_unscale_and_check: output"));
    if (!isFloat(g->dtype) || !amprt_tensor_is_contiguous(g) ||
        amprt_tensor_numel(g) != amprt_tensor_numel(o))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_unscale_and_check: gradient %d (%s %s) must be a "
                  "contiguous float tensor of its output's size",
                  k, amprt_dtype_name(g->dtype), shapeString(g).c_str());
    int64_t len = amprt_tensor_numel(g);
    float *dst = static_cast<float *>(o->data);
    std::atomic<uint32_t> any{0};
    // Pieces on the threads; the check is an OR, the same whatever the split.
    bool pre = false;
    if (usePrechecked && takePrechecked(ctx, g, &pre) && g->dtype == AMPRT_F32 && dst == g->data &&
        inv == 1.0f) {
      // Checked by its producer as it was written (see notePrechecked).
      bad |= pre;
      continue;
    }
    if (g->dtype == AMPRT_F32 && dst == g->data && inv == 1.0f) {
      // In place with scale 1 (loss scaling "none": the inf check alone).
      if (anyNonFiniteF32(static_cast<const float *>(g->data), len))
        any.store(1, std::memory_order_relaxed);
    } else if (g->dtype == AMPRT_F32) {
      const float *src = static_cast<const float *>(g->data);
      parallelFor(len, 1 << 16, 16, [&](int64_t b0, int64_t e0) {
        if (unscaleRange(src, dst, inv, b0, e0))
          any.store(1, std::memory_order_relaxed);
      });
    } else {
      const uint16_t *src = static_cast<const uint16_t *>(g->data);
      bool f16 = g->dtype == AMPRT_F16;
      parallelFor(len, 1 << 16, 16, [&](int64_t b0, int64_t e0) {
        uint32_t acc = 0;
        for (int64_t i = b0; i < e0; ++i) {
          float v = f16 ? amprt_f16_to_f32(src[i]) : amprt_bf16_to_f32(src[i]);
          acc |= nonFinite(v);
          dst[i] = v * inv;
        }
        if (acc)
          any.store(1, std::memory_order_relaxed);
      });
    }
    bad |= any.load() != 0;
  }
  if (bad)
    *found_inf = 1.0f;
  return AMPRT_OK;
}

extern "C" amprt_scaler_config amprt_scaler_default_config(void) {
  amprt_scaler_config c;
  c.growth_factor = 2.0f;
  c.backoff_factor = 0.5f;
  c.growth_interval = 2000;
  c.hysteresis = 1;
  c.min_scale = 0.0f;
  return c;
}

extern "C" amprt_scaler_state amprt_scaler_init(const amprt_scaler_config *cfg, float init_scale) {
  amprt_scaler_state s;
  s.scale = init_scale;
  s.growth_tracker = 0;
  s.hysteresis_left = cfg && cfg->hysteresis > 0 ? cfg->hysteresis : 1;
  s.at_min_scale = 0;
  return s;
}

extern "C" amprt_status amprt_update_scale(amprt_context *, const amprt_scaler_config *cfg,
                                           amprt_scaler_state *st, float found_inf) {
  if (!cfg || !st)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_update_scale: null argument");
  if (!(cfg->growth_factor > 1.0f) || !(cfg->backoff_factor > 0.0f) ||
      !(cfg->backoff_factor < 1.0f) || cfg->growth_interval < 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_update_scale: needs growth_factor > 1, 0 < backoff_factor "
                "< 1 and growth_interval >= 1 (got %g, %g, %d)",
                cfg->growth_factor, cfg->backoff_factor, cfg->growth_interval);
  int32_t hyst = cfg->hysteresis > 0 ? cfg->hysteresis : 1;
  if (found_inf != 0.0f) {
    bool floor = false;
    if (hyst <= 1 || st->hysteresis_left <= 1) {
      floor = cfg->min_scale > 0.0f && st->scale <= cfg->min_scale;
      float next = st->scale * cfg->backoff_factor;
      st->scale = next < cfg->min_scale ? cfg->min_scale : next;
    } else {
      --st->hysteresis_left;
    }
    st->growth_tracker = 0;
    st->at_min_scale = floor;
    if (floor)
      return fail(AMPRT_ERR_NUMERIC,
                  "amprt_update_scale: an overflow at the minimum loss scale "
                  "%g: every step is being skipped (lower the learning rate, "
                  "check the data and the fp16 ops)",
                  cfg->min_scale);
    return AMPRT_OK;
  }
  st->at_min_scale = 0;
  int32_t successful = st->growth_tracker + 1;
  if (successful == cfg->growth_interval) {
    float grown = st->scale * cfg->growth_factor;
    if (std::isfinite(grown))
      st->scale = grown;
    st->growth_tracker = 0;
    st->hysteresis_left = hyst;
  } else {
    st->growth_tracker = successful;
  }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_clip_grad_norm(amprt_context *, amprt_tensor *grads, int32_t n,
                                             float max_norm, float found_inf, float *total_norm) {
  if (n < 0 || (n > 0 && !grads))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_clip_grad_norm: null gradients");
  if (!(max_norm > 0.0f))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_clip_grad_norm: max_norm must be > 0, got %g",
                max_norm);
  double sq = 0.0;
  for (int32_t k = 0; k < n; ++k) {
    AMPRT_CHECK(checkF32(&grads[k], "amprt_clip_grad_norm: gradient"));
    const float *g = static_cast<const float *>(grads[k].data);
    int64_t len = amprt_tensor_numel(&grads[k]);
    for (int64_t i = 0; i < len; ++i)
      sq += (double)g[i] * g[i];
  }
  double norm = std::sqrt(sq);
  if (total_norm)
    *total_norm = (float)norm;
  if (found_inf != 0.0f || !std::isfinite(norm))
    return AMPRT_OK;
  float coef = (float)((double)max_norm / (norm + 1e-6));
  if (coef >= 1.0f)
    return AMPRT_OK;
  for (int32_t k = 0; k < n; ++k) {
    float *g = static_cast<float *>(grads[k].data);
    int64_t len = amprt_tensor_numel(&grads[k]);
    for (int64_t i = 0; i < len; ++i)
      g[i] *= coef;
  }
  return AMPRT_OK;
}
