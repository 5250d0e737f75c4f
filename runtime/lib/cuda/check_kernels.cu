//===- check_kernels.cu - the AMP step's CUDA kernels (the checker's API) ---===//
//
// amprt_cuda.h. Each kernel mirrors its CPU twin in runtime/lib/cpu (the
// same f32 operations in the same order; this file is compiled with
// -fmad=false so that no product and sum fuse), so the two agree bit for
// bit. Decisions that depend on found_inf or on the step count are taken on
// the device: nothing here synchronises with the host except the checker's
// timing helpers and amprt_cuda_synchronize.
//
//===----------------------------------------------------------------------===//

#include "common/check.h"
#include "device.cuh"

#include <cstdio>
#include <cstring>
#include <vector>

using amprt::fail;
using namespace amprt::cuda;

namespace {

bool isHalfType(amprt_dtype t) { return t == AMPRT_F16 || t == AMPRT_BF16; }

amprt_status checkDevice(const amprt_tensor *t, const char *what, bool f32Only) {
  if (!t || !t->data)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: null tensor", what);
  if (!amprt_tensor_is_contiguous(t))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: must be contiguous", what);
  if (f32Only ? t->dtype != AMPRT_F32 : !(t->dtype == AMPRT_F32 || isHalfType(t->dtype)))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: element type %s not supported", what,
                amprt_dtype_name(t->dtype));
  return AMPRT_OK;
}

amprt_status launchUnscale(const amprt_tensor *grads, amprt_tensor *outs, int32_t n,
                           const float *scale, float *found) {
  if (n > kMaxTensors)
    return fail(AMPRT_ERR_UNSUPPORTED,
                "amprt_cuda_unscale_and_check: %d tensors (at most %d per call)", n, kMaxTensors);
  UnscaleF f{};
  int64_t units = 0;
  for (int32_t k = 0; k < n; ++k) {
    AMPRT_CHECK(checkDevice(&grads[k], "amprt_cuda_unscale_and_check: gradient", false));
    AMPRT_CHECK(checkDevice(&outs[k], "amprt_cuda_unscale_and_check: output", true));
    if (amprt_tensor_numel(&grads[k]) != amprt_tensor_numel(&outs[k]))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_cuda_unscale_and_check: gradient %d and its output differ in size", k);
    int64_t len = amprt_tensor_numel(&grads[k]);
    f.items[k] = {grads[k].data, static_cast<float *>(outs[k].data), len, units, grads[k].dtype};
    units += (len + 3) / 4;
  }
  f.count = n;
  f.scale = scale;
  f.found = found;
  f.foundIsByte = 0;
  return each(nullptr, units, f, "amprt_cuda_unscale_and_check");
}

} // namespace

extern "C" amprt_status amprt_cuda_device_count(int32_t *count) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (count)
    *count = e == cudaSuccess ? n : 0;
  if (e != cudaSuccess)
    return fail(AMPRT_ERR_NO_DEVICE, "no CUDA device: %s", cudaGetErrorString(e));
  if (n == 0)
    return fail(AMPRT_ERR_NO_DEVICE, "no CUDA device: the driver reports none");
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cuda_device_name(int32_t device, char *name, size_t size) {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "amprt_cuda_device_name");
  std::snprintf(name, size, "%s (sm_%d%d, %.0f GiB)", prop.name, prop.major, prop.minor,
                prop.totalGlobalMem / 1073741824.0);
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cuda_malloc(void **ptr, size_t bytes) {
  CUDA_CHECK(cudaMalloc(ptr, bytes ? bytes : 1), "amprt_cuda_malloc");
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cuda_free(void *ptr) {
  CUDA_CHECK(cudaFree(ptr), "amprt_cuda_free");
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cuda_memcpy(void *dst, const void *src, size_t bytes, int32_t kind) {
  cudaMemcpyKind k = kind == 0   ? cudaMemcpyHostToDevice
                     : kind == 1 ? cudaMemcpyDeviceToHost
                                 : cudaMemcpyDeviceToDevice;
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, k), "amprt_cuda_memcpy");
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cuda_memset(void *dst, int32_t value, size_t bytes) {
  CUDA_CHECK(cudaMemset(dst, value, bytes), "amprt_cuda_memset");
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cuda_synchronize(void) {
  CUDA_CHECK(cudaDeviceSynchronize(), "amprt_cuda_synchronize");
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cuda_cast(const amprt_tensor *x, amprt_tensor *y) {
  AMPRT_CHECK(checkDevice(x, "amprt_cuda_cast: x", false));
  AMPRT_CHECK(checkDevice(y, "amprt_cuda_cast: y", false));
  int64_t n = amprt_tensor_numel(x);
  if (n != amprt_tensor_numel(y))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_cast: x and y differ in size");
  return each(nullptr, n, CastFloatF{x->data, y->data, x->dtype, y->dtype}, "amprt_cuda_cast");
}

extern "C" amprt_status amprt_cuda_unscale_and_check(const amprt_tensor *grads, amprt_tensor *outs,
                                                     int32_t n, const float *scale,
                                                     float *found_inf) {
  if (n < 0 || (n > 0 && (!grads || !outs)) || !scale || !found_inf)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_unscale_and_check: null argument");
  return launchUnscale(grads, outs, n, scale, found_inf);
}

extern "C" amprt_status amprt_cuda_time_unscale(const amprt_tensor *grads, amprt_tensor *outs,
                                                int32_t n, const float *scale, float *found_inf,
                                                int32_t repeat, float *ms) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a), "amprt_cuda_time_unscale");
  CUDA_CHECK(cudaEventCreate(&b), "amprt_cuda_time_unscale");
  AMPRT_CHECK(launchUnscale(grads, outs, n, scale, found_inf)); // warm-up
  CUDA_CHECK(cudaEventRecord(a), "amprt_cuda_time_unscale");
  for (int32_t r = 0; r < repeat; ++r)
    AMPRT_CHECK(launchUnscale(grads, outs, n, scale, found_inf));
  CUDA_CHECK(cudaEventRecord(b), "amprt_cuda_time_unscale");
  CUDA_CHECK(cudaEventSynchronize(b), "amprt_cuda_time_unscale");
  CUDA_CHECK(cudaEventElapsedTime(ms, a, b), "amprt_cuda_time_unscale");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cuda_time_copy(void *dst, const void *src, size_t bytes,
                                             int32_t repeat, float *ms) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a), "amprt_cuda_time_copy");
  CUDA_CHECK(cudaEventCreate(&b), "amprt_cuda_time_copy");
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice), "amprt_cuda_time_copy");
  CUDA_CHECK(cudaEventRecord(a), "amprt_cuda_time_copy");
  for (int32_t r = 0; r < repeat; ++r)
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice), "amprt_cuda_time_copy");
  CUDA_CHECK(cudaEventRecord(b), "amprt_cuda_time_copy");
  CUDA_CHECK(cudaEventSynchronize(b), "amprt_cuda_time_copy");
  CUDA_CHECK(cudaEventElapsedTime(ms, a, b), "amprt_cuda_time_copy");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cuda_update_scale(const amprt_scaler_config *cfg,
                                                amprt_scaler_state *state, const float *found_inf) {
  if (!cfg || !state || !found_inf)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_update_scale: null argument");
  if (!(cfg->growth_factor > 1.0f) || !(cfg->backoff_factor > 0.0f) ||
      !(cfg->backoff_factor < 1.0f) || cfg->growth_interval < 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_cuda_update_scale: needs growth_factor > 1, 0 < backoff_factor < 1 and "
                "growth_interval >= 1");
  return each(nullptr, 1, UpdateScaleF{*cfg, state, found_inf, 0, nullptr, 0},
              "amprt_cuda_update_scale");
}

extern "C" amprt_status amprt_cuda_sgd_step(const amprt_sgd_config *cfg, amprt_tensor *param,
                                            const amprt_tensor *grad, amprt_tensor *buf,
                                            const int64_t *step, const float *found_inf) {
  if (!cfg || !step || !found_inf)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_sgd_step: null argument");
  AMPRT_CHECK(checkDevice(param, "amprt_cuda_sgd_step: param", true));
  AMPRT_CHECK(checkDevice(grad, "amprt_cuda_sgd_step: grad", true));
  int64_t n = amprt_tensor_numel(param);
  if (amprt_tensor_numel(grad) != n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_sgd_step: grad size differs");
  if (cfg->momentum != 0.0f) {
    if (!buf)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_sgd_step: momentum needs a buffer");
    AMPRT_CHECK(checkDevice(buf, "amprt_cuda_sgd_step: momentum buffer", true));
    if (amprt_tensor_numel(buf) != n)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_sgd_step: buffer size differs");
  }
  float *p = static_cast<float *>(param->data);
  float *b = cfg->momentum != 0.0f ? static_cast<float *>(buf->data) : nullptr;
  return each(nullptr, n,
              SgdF{*cfg, p, static_cast<const float *>(grad->data), b, p, b, step, found_inf, 0},
              "amprt_cuda_sgd_step");
}

extern "C" amprt_status amprt_cuda_adam_step(const amprt_adam_config *cfg, amprt_tensor *param,
                                             const amprt_tensor *grad, amprt_tensor *exp_avg,
                                             amprt_tensor *exp_avg_sq, const int64_t *step,
                                             const float *found_inf) {
  if (!cfg || !step || !found_inf)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_adam_step: null argument");
  for (const amprt_tensor *t : {(const amprt_tensor *)param, grad, (const amprt_tensor *)exp_avg,
                                (const amprt_tensor *)exp_avg_sq})
    AMPRT_CHECK(checkDevice(t, "amprt_cuda_adam_step: tensor", true));
  int64_t n = amprt_tensor_numel(param);
  if (amprt_tensor_numel(grad) != n || amprt_tensor_numel(exp_avg) != n ||
      amprt_tensor_numel(exp_avg_sq) != n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_adam_step: sizes differ");
  float *p = static_cast<float *>(param->data), *m = static_cast<float *>(exp_avg->data),
        *v = static_cast<float *>(exp_avg_sq->data);
  return each(
      nullptr, n,
      AdamF{*cfg, p, static_cast<const float *>(grad->data), m, v, p, m, v, step, found_inf, 0},
      "amprt_cuda_adam_step");
}
