//===- scaler.cu - loss scaling on the device ------------------------------===//
//
// unscale_and_check, clip_grad_norm, the loss-scale update and the step
// counters: found_inf and the skip decision stay on the device (no host
// synchronisation per step). The optimizer steps: optimizers.cu.
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"
#include "cpu/optim/scaler.h"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

//--- AMP bookkeeping -------------------------------------------------------------

struct StepCountF {
  const int64_t *step;
  const uint8_t *found;
  int64_t *out;
  HD void operator()(int64_t) const { *out = *step + (*found ? 0 : 1); }
};

struct MicroStepF {
  const int64_t *m;
  uint8_t *apply;
  int64_t *next, every;
  DeviceError *err;
  HD void operator()(int64_t) const {
    int64_t v = *m;
    if (v < 0 || v >= every) {
      recordError(err, ERR_MICRO_STEP, v, every, 0);
      v = 0;
    }
    bool a = v + 1 == every;
    *apply = a;
    *next = a ? 0 : v + 1;
  }
};

/// update_scale on the executor's tensors: scale f32 [], trackers i64 [],
/// found i1 [] -> new scale and trackers.
struct UpdateScaleTensorsF {
  amprt_scaler_config cfg;
  const float *scale;
  const int64_t *tracker, *hyst;
  const uint8_t *found;
  float *newScale;
  int64_t *newTracker, *newHyst;
  DeviceError *err;
  int32_t errorAtMin;
  HD void operator()(int64_t) const {
    amprt_scaler_state st;
    st.scale = *scale;
    st.growth_tracker = (int32_t)*tracker;
    st.hysteresis_left = (int32_t)*hyst;
    st.at_min_scale = 0;
    UpdateScaleF{cfg, &st, found, 1, err, errorAtMin}(0);
    *newScale = st.scale;
    *newTracker = st.growth_tracker;
    *newHyst = st.hysteresis_left;
  }
};

/// Sum of squares per chunk of 4096 elements of a gradient (double).
struct SumSqF {
  const float *g;
  int64_t n;
  double *out;
  HD void operator()(int64_t k) const {
    double s = 0.0;
    int64_t e = (k + 1) * 4096 < n ? (k + 1) * 4096 : n;
    for (int64_t i = k * 4096; i < e; ++i)
      s += (double)g[i] * g[i];
    out[k] = s;
  }
};

/// The total norm and the clip coefficient (one index).
struct ClipCoefF {
  const double *parts;
  int64_t count;
  float maxNorm;
  const uint8_t *found;
  float *norm, *coef;
  HD void operator()(int64_t) const {
    double sq = 0.0;
    for (int64_t k = 0; k < count; ++k)
      sq += parts[k];
    double nrm = sqrt(sq);
    *norm = (float)nrm;
    float c = 1.0f;
    if (!*found && !isNaN(nrm) && nrm != INFINITY) {
      c = (float)((double)maxNorm / (nrm + 1e-6));
      if (c >= 1.0f)
        c = 1.0f;
    }
    *coef = c;
  }
};

struct ScaleByF {
  const float *x;
  float *y;
  const float *coef;
  HD void operator()(int64_t i) const { y[i] = *coef < 1.0f ? x[i] * *coef : x[i]; }
};

amprt_status unscaleAndCheck(Dev &d, const Decoded &dd) {
  const auto &t = dd.t;
  size_t n = 0;
  AMPRT_CHECK(multiTensorCount(dd, n));
  const amprt_tensor &scale = t[n], &flag = t[2 * n + 1];
  AMPRT_CHECK(zero(d, flag.data, 1));
  for (size_t first = 0; first < n; first += kMaxTensors) {
    UnscaleF f{};
    int64_t units = 0;
    size_t last = std::min(n, first + kMaxTensors);
    for (size_t k = first; k < last; ++k) {
      const amprt_tensor &g = t[k], &out = t[n + 1 + k];
      if (!floatType(g.dtype) || !amprt_tensor_is_contiguous(&g) || out.dtype != AMPRT_F32 ||
          !amprt_tensor_is_contiguous(&out) || numel(g) != numel(out))
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "amprt_exec (cuda): unscale_and_check: gradient %zu and its output", k);
      f.items[k - first] = {g.data, static_cast<float *>(out.data), numel(g), units, g.dtype};
      units += (numel(g) + 3) / 4;
    }
    f.count = (int32_t)(last - first);
    f.scale = static_cast<const float *>(scale.data);
    f.found = flag.data;
    f.foundIsByte = 1;
    AMPRT_CHECK(each(&d, units, f, "unscale_and_check"));
  }
  return AMPRT_OK;
}

amprt_status clipGradNorm(Dev &d, const Decoded &dd) {
  const auto &t = dd.t;
  size_t n = 0;
  double maxNormField = 0;
  AMPRT_CHECK(multiTensorCount(dd, n, &maxNormField));
  float maxNorm = (float)maxNormField;
  if (!(maxNorm > 0.0f))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec (cuda): clip_grad_norm's max_norm must be > 0");
  const amprt_tensor &flag = t[n], &norm = t[2 * n + 1];
  int64_t chunks = 0;
  for (size_t k = 0; k < n; ++k) {
    if (t[k].dtype != AMPRT_F32 || !amprt_tensor_is_contiguous(&t[k]) ||
        numel(t[k]) != numel(t[n + 1 + k]))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): clip_grad_norm: gradient %zu", k);
    chunks += (numel(t[k]) + 4095) / 4096;
  }
  void *buf;
  AMPRT_CHECK(scratch(d, 3, (size_t)(chunks + 1) * 8 + 8, &buf));
  double *parts = static_cast<double *>(buf);
  float *coef = reinterpret_cast<float *>(parts + chunks);
  int64_t at = 0;
  for (size_t k = 0; k < n; ++k) {
    int64_t c = (numel(t[k]) + 4095) / 4096;
    AMPRT_CHECK(each(&d, c, SumSqF{static_cast<const float *>(t[k].data), numel(t[k]), parts + at},
                     "clip_grad_norm"));
    at += c;
  }
  AMPRT_CHECK(each(&d, 1,
                   ClipCoefF{parts, chunks, maxNorm, static_cast<const uint8_t *>(flag.data),
                             static_cast<float *>(norm.data), coef},
                   "clip_grad_norm"));
  for (size_t k = 0; k < n; ++k)
    AMPRT_CHECK(each(&d, numel(t[k]),
                     ScaleByF{static_cast<const float *>(t[k].data),
                              static_cast<float *>(t[n + 1 + k].data), coef},
                     "clip_grad_norm"));
  return AMPRT_OK;
}

/// The scaler opcodes of amprt_exec (exec.cu dispatches them here).
int32_t execScaler(amprt_context *ctx, Dev &d, Decoded &dd) {
  (void)ctx;
  auto &t = dd.t;
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_STEP_COUNT: {
    attrs::step_count a;
    AMPRT_CHECK(read(dd, a));
    AMPRT_CHECK(checkStepAndFlag(t[0], t[1]));
    if (t[2].dtype != AMPRT_I64 || numel(t[2]) != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): step_count's output");
    return each(&d, 1,
                StepCountF{static_cast<const int64_t *>(t[0].data),
                           static_cast<const uint8_t *>(t[1].data),
                           static_cast<int64_t *>(t[2].data)},
                "step_count");
  }
  case AMPRT_OP_UNSCALE_AND_CHECK:
    return unscaleAndCheck(d, dd);
  case AMPRT_OP_CLIP_GRAD_NORM:
    return clipGradNorm(d, dd);
  case AMPRT_OP_UPDATE_SCALE: {
    amprt_scaler_config cfg{};
    bool errorAtMin = true;
    AMPRT_CHECK(updateScaleAttrs(dd, cfg, errorAtMin));
    if (!(cfg.growth_factor > 1.0f) || !(cfg.backoff_factor > 0.0f) ||
        !(cfg.backoff_factor < 1.0f) || cfg.growth_interval < 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): update_scale needs growth_factor > 1, 0 < backoff_factor < 1 "
                  "and growth_interval >= 1");
    return each(
        &d, 1,
        UpdateScaleTensorsF{
            cfg, static_cast<const float *>(t[0].data), static_cast<const int64_t *>(t[1].data),
            static_cast<const int64_t *>(t[2].data), static_cast<const uint8_t *>(t[3].data),
            static_cast<float *>(t[4].data), static_cast<int64_t *>(t[5].data),
            static_cast<int64_t *>(t[6].data), d.err, errorAtMin},
        "update_scale");
  }
  case AMPRT_OP_MICRO_STEP: {
    int64_t every = 1;
    AMPRT_CHECK(microStepAttrs(dd, every));
    return each(&d, 1,
                MicroStepF{static_cast<const int64_t *>(t[0].data),
                           static_cast<uint8_t *>(t[1].data), static_cast<int64_t *>(t[2].data),
                           every, d.err},
                "micro_step");
  }
  default:
    break;
  }
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec (cuda): opcode %lld is not one of the scaler ops", (long long)dd.opcode);
}

} // namespace amprt::cuda
