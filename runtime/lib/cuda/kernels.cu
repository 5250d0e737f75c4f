//===- kernels.cu - the AMP step's CUDA kernels ---------------------------===//
//
// amprt_cuda.h. Each kernel mirrors its CPU twin in runtime/lib/cpu (the
// same f32 operations in the same order; this file is compiled with
// -fmad=false so that no product and sum fuse), so the two agree bit for
// bit. Decisions that depend on found_inf or on the step count are taken on
// the device: nothing here synchronises with the host except the checker's
// timing helpers and amprt_cuda_synchronize.
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt_cuda.h"

#include "../cpu/convert_bits.h"
#include "../cpu/internal.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

using amprt::fail;

namespace {

amprt_status cudaFail(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return AMPRT_OK;
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
    return fail(AMPRT_ERR_NO_DEVICE, "%s: no CUDA device: %s", what, cudaGetErrorString(e));
  return fail(AMPRT_ERR_DEVICE, "%s: CUDA error: %s", what, cudaGetErrorString(e));
}

#define CUDA_CHECK(call, what)                                                 \
  do {                                                                         \
    amprt_status s_ = cudaFail((call), what);                                  \
    if (s_ != AMPRT_OK)                                                        \
      return s_;                                                               \
  } while (0)

amprt_status launched(const char *what) { return cudaFail(cudaGetLastError(), what); }

bool isHalfType(amprt_dtype t) { return t == AMPRT_F16 || t == AMPRT_BF16; }

int blocksFor(int64_t n, int threads = 256) {
  int64_t b = (n + threads - 1) / threads;
  return (int)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

//--- Conversions: the CPU runtime's definitions (../cpu/convert_bits.h) --

__device__ inline uint16_t f32ToF16(float f) { return amprt::bits::f32ToF16(__float_as_uint(f)); }
__device__ inline float f16ToF32(uint16_t h) { return __uint_as_float(amprt::bits::f16ToF32(h)); }
__device__ inline uint16_t f32ToBf16(float f) { return amprt::bits::f32ToBf16(__float_as_uint(f)); }
__device__ inline float bf16ToF32(uint16_t b) { return __uint_as_float(amprt::bits::bf16ToF32(b)); }

__device__ inline float load(const void *p, int dtype, int64_t i) {
  if (dtype == AMPRT_F32)
    return static_cast<const float *>(p)[i];
  uint16_t h = static_cast<const uint16_t *>(p)[i];
  return dtype == AMPRT_F16 ? f16ToF32(h) : bf16ToF32(h);
}

__device__ inline void store(void *p, int dtype, int64_t i, float v) {
  if (dtype == AMPRT_F32)
    static_cast<float *>(p)[i] = v;
  else
    static_cast<uint16_t *>(p)[i] = dtype == AMPRT_F16 ? f32ToF16(v) : f32ToBf16(v);
}

__global__ void castKernel(const void *x, int xt, void *y, int yt, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    store(y, yt, i, load(x, xt, i));
}

//--- Multi-tensor unscale and check (one launch, like Apex's
//    multi_tensor_apply): blockIdx.y picks the tensor.

struct UnscaleItem {
  const void *grad;
  float *out;
  int64_t n;
  int32_t dtype;
};

__global__ void unscaleKernel(const UnscaleItem *items, const float *scale, float *found) {
  const UnscaleItem it = items[blockIdx.y];
  float inv = (float)(1.0 / (double)*scale);
  bool bad = false;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (it.dtype == AMPRT_F32 && (reinterpret_cast<uintptr_t>(it.grad) % 16) == 0 &&
      (reinterpret_cast<uintptr_t>(it.out) % 16) == 0) {
    // 16-byte loads and stores.
    const float4 *g4 = static_cast<const float4 *>(it.grad);
    float4 *o4 = reinterpret_cast<float4 *>(it.out);
    int64_t n4 = it.n / 4;
    for (int64_t k = i; k < n4; k += stride) {
      float4 v = g4[k];
      bad |= !isfinite(v.x) || !isfinite(v.y) || !isfinite(v.z) || !isfinite(v.w);
      o4[k] = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
    }
    for (int64_t k = n4 * 4 + i; k < it.n; k += stride) {
      float v = static_cast<const float *>(it.grad)[k];
      bad |= !isfinite(v);
      it.out[k] = v * inv;
    }
  } else {
    for (int64_t k = i; k < it.n; k += stride) {
      float v = load(it.grad, it.dtype, k);
      bad |= !isfinite(v);
      it.out[k] = v * inv;
    }
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0)
    *found = 1.0f;
}

//--- The scale update (PyTorch's _amp_update_scale_, DeepSpeed's
//    hysteresis, a floor): runtime/lib/cpu/amp.cpp's amprt_update_scale.

__global__ void updateScaleKernel(amprt_scaler_config cfg, amprt_scaler_state *st,
                                  const float *found) {
  int32_t hyst = cfg.hysteresis > 0 ? cfg.hysteresis : 1;
  if (*found != 0.0f) {
    bool floor = false;
    if (hyst <= 1 || st->hysteresis_left <= 1) {
      floor = cfg.min_scale > 0.0f && st->scale <= cfg.min_scale;
      float next = st->scale * cfg.backoff_factor;
      st->scale = next < cfg.min_scale ? cfg.min_scale : next;
    } else {
      --st->hysteresis_left;
    }
    st->growth_tracker = 0;
    st->at_min_scale = floor;
    return;
  }
  st->at_min_scale = 0;
  int32_t successful = st->growth_tracker + 1;
  if (successful == cfg.growth_interval) {
    float grown = st->scale * cfg.growth_factor;
    if (isfinite(grown))
      st->scale = grown;
    st->growth_tracker = 0;
    st->hysteresis_left = hyst;
  } else {
    st->growth_tracker = successful;
  }
}

//--- Optimizer steps: runtime/lib/cpu/amp.cpp's, skipped on the device.

__global__ void sgdKernel(amprt_sgd_config cfg, float *p, const float *g, float *b, int64_t n,
                          const int64_t *step, const float *found) {
  if (*found != 0.0f)
    return;
  bool first = *step == 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float d = g[i];
    if (cfg.weight_decay != 0.0f)
      d = d + cfg.weight_decay * p[i];
    if (cfg.momentum != 0.0f) {
      b[i] = first ? d : b[i] * cfg.momentum + (1.0f - cfg.dampening) * d;
      d = cfg.nesterov ? d + cfg.momentum * b[i] : b[i];
    }
    p[i] = p[i] + (-cfg.lr) * d;
  }
}

__global__ void adamKernel(amprt_adam_config cfg, float *p, const float *g, float *m, float *v,
                           int64_t n, const int64_t *step, const float *found) {
  if (*found != 0.0f)
    return;
  if (cfg.decoupled == 2) { // Hugging Face's AdamW, as amprt_adam_step
    float ac = 1.0f - (float)pow((double)cfg.beta1, (double)(*step + 1));
    float bc = 1.0f - (float)pow((double)cfg.beta2, (double)(*step + 1));
    float lrc = cfg.lr * (sqrtf(bc) / ac);
    float w1 = 1.0f - cfg.beta1, w2 = 1.0f - cfg.beta2, decay = cfg.lr * cfg.weight_decay;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
      float gi = g[i];
      m[i] = cfg.beta1 * m[i] + w1 * gi;
      v[i] = cfg.beta2 * v[i] + w2 * gi * gi;
      p[i] = p[i] - lrc * m[i] / (sqrtf(v[i]) + cfg.eps);
      p[i] = p[i] - decay * p[i];
    }
    return;
  }
  double t = (double)(*step + 1);
  double bc1 = 1.0 - pow((double)cfg.beta1, t);
  double bc2 = 1.0 - pow((double)cfg.beta2, t);
  float stepSize = (float)((double)cfg.lr / bc1);
  float bc2Sqrt = (float)sqrt(bc2);
  float w1 = 1.0f - cfg.beta1, w2 = 1.0f - cfg.beta2;
  float decay = (float)(1.0 - (double)cfg.lr * (double)cfg.weight_decay);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float gi = g[i];
    if (cfg.weight_decay != 0.0f) {
      if (cfg.decoupled)
        p[i] = p[i] * decay;
      else
        gi = gi + cfg.weight_decay * p[i];
    }
    m[i] = w1 < 0.5f ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (1.0f - w1);
    v[i] = v[i] * cfg.beta2 + w2 * gi * gi;
    float denom = sqrtf(v[i]) / bc2Sqrt + cfg.eps;
    p[i] = p[i] + (-stepSize) * (m[i] / denom);
  }
}

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
                           const float *scale, float *found, UnscaleItem **devItems) {
  std::vector<UnscaleItem> items;
  int64_t longest = 0;
  for (int32_t k = 0; k < n; ++k) {
    AMPRT_CHECK(checkDevice(&grads[k], "amprt_cuda_unscale_and_check: gradient", false));
    AMPRT_CHECK(checkDevice(&outs[k], "amprt_cuda_unscale_and_check: output", true));
    if (amprt_tensor_numel(&grads[k]) != amprt_tensor_numel(&outs[k]))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_cuda_unscale_and_check: gradient %d and its output differ in size", k);
    items.push_back({grads[k].data, static_cast<float *>(outs[k].data),
                     amprt_tensor_numel(&grads[k]), grads[k].dtype});
    longest = items.back().n > longest ? items.back().n : longest;
  }
  if (n > 65535)
    return fail(AMPRT_ERR_UNSUPPORTED, "amprt_cuda_unscale_and_check: %d tensors (at most 65535)",
                n);
  if (!*devItems)
    CUDA_CHECK(cudaMalloc(devItems, items.size() * sizeof(UnscaleItem) + 1),
               "amprt_cuda_unscale_and_check");
  CUDA_CHECK(cudaMemcpyAsync(*devItems, items.data(), items.size() * sizeof(UnscaleItem),
                             cudaMemcpyHostToDevice),
             "amprt_cuda_unscale_and_check");
  dim3 grid(blocksFor((longest + 3) / 4), n > 0 ? n : 1);
  if (n > 0)
    unscaleKernel<<<grid, 256>>>(*devItems, scale, found);
  return launched("amprt_cuda_unscale_and_check");
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

extern "C" amprt_status amprt_cuda_memcpy(void *dst, const void *src, size_t bytes,
                                          int32_t kind) {
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
  if (n)
    castKernel<<<blocksFor(n), 256>>>(x->data, x->dtype, y->data, y->dtype, n);
  return launched("amprt_cuda_cast");
}

extern "C" amprt_status amprt_cuda_unscale_and_check(const amprt_tensor *grads,
                                                     amprt_tensor *outs, int32_t n,
                                                     const float *scale, float *found_inf) {
  if (n < 0 || (n > 0 && (!grads || !outs)) || !scale || !found_inf)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_unscale_and_check: null argument");
  UnscaleItem *items = nullptr;
  amprt_status s = launchUnscale(grads, outs, n, scale, found_inf, &items);
  if (items)
    cudaFree(items); // stream-ordered after the launch (cudaFree synchronises)
  return s;
}

extern "C" amprt_status amprt_cuda_time_unscale(const amprt_tensor *grads, amprt_tensor *outs,
                                                int32_t n, const float *scale,
                                                float *found_inf, int32_t repeat, float *ms) {
  UnscaleItem *items = nullptr;
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a), "amprt_cuda_time_unscale");
  CUDA_CHECK(cudaEventCreate(&b), "amprt_cuda_time_unscale");
  AMPRT_CHECK(launchUnscale(grads, outs, n, scale, found_inf, &items)); // warm-up
  CUDA_CHECK(cudaEventRecord(a), "amprt_cuda_time_unscale");
  for (int32_t r = 0; r < repeat; ++r)
    AMPRT_CHECK(launchUnscale(grads, outs, n, scale, found_inf, &items));
  CUDA_CHECK(cudaEventRecord(b), "amprt_cuda_time_unscale");
  CUDA_CHECK(cudaEventSynchronize(b), "amprt_cuda_time_unscale");
  CUDA_CHECK(cudaEventElapsedTime(ms, a, b), "amprt_cuda_time_unscale");
  cudaFree(items);
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
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice),
               "amprt_cuda_time_copy");
  CUDA_CHECK(cudaEventRecord(b), "amprt_cuda_time_copy");
  CUDA_CHECK(cudaEventSynchronize(b), "amprt_cuda_time_copy");
  CUDA_CHECK(cudaEventElapsedTime(ms, a, b), "amprt_cuda_time_copy");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cuda_update_scale(const amprt_scaler_config *cfg,
                                                amprt_scaler_state *state,
                                                const float *found_inf) {
  if (!cfg || !state || !found_inf)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cuda_update_scale: null argument");
  if (!(cfg->growth_factor > 1.0f) || !(cfg->backoff_factor > 0.0f) ||
      !(cfg->backoff_factor < 1.0f) || cfg->growth_interval < 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_cuda_update_scale: needs growth_factor > 1, 0 < backoff_factor < 1 and "
                "growth_interval >= 1");
  updateScaleKernel<<<1, 1>>>(*cfg, state, found_inf);
  return launched("amprt_cuda_update_scale");
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
  if (n)
    sgdKernel<<<blocksFor(n), 256>>>(*cfg, static_cast<float *>(param->data),
                                     static_cast<const float *>(grad->data),
                                     buf ? static_cast<float *>(buf->data) : nullptr, n, step,
                                     found_inf);
  return launched("amprt_cuda_sgd_step");
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
  if (n)
    adamKernel<<<blocksFor(n), 256>>>(*cfg, static_cast<float *>(param->data),
                                      static_cast<const float *>(grad->data),
                                      static_cast<float *>(exp_avg->data),
                                      static_cast<float *>(exp_avg_sq->data), n, step, found_inf);
  return launched("amprt_cuda_adam_step");
}
