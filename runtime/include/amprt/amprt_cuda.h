/*===- amprt_cuda.h - the runtime's CUDA kernels ---------------------------===*
 *
 * The first slice of the CUDA backend (libamprt_cuda.a, built when CMake
 * finds the CUDA toolkit): device memory, and the kernels of the AMP step
 * that must not synchronise with the host: casts, the multi-tensor
 * unscale-and-check, the one-thread scale update and the optimizer steps
 * that read found_inf on the device. Tensors are amprt_tensor descriptors
 * whose `data` points to device memory (contiguous). Every function returns
 * an amprt_status; amprt_last_error() names the call and the CUDA error.
 * Numerics: bit-identical to the CPU runtime for casts, unscale and
 * update_scale and the optimizer steps (compiled without FMA contraction;
 * Adam's bias corrections use the device's double pow).
 *
 *===----------------------------------------------------------------------===*/

#ifndef AMPRT_AMPRT_CUDA_H
#define AMPRT_AMPRT_CUDA_H

#include "amprt/amprt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The number of CUDA devices; AMPRT_ERR_NO_DEVICE ("no CUDA device: ...",
 * with the driver's reason) when there is none or no usable driver. */
amprt_status amprt_cuda_device_count(int32_t *count);
/* The device's name. */
amprt_status amprt_cuda_device_name(int32_t device, char *name, size_t size);

amprt_status amprt_cuda_malloc(void **ptr, size_t bytes);
amprt_status amprt_cuda_free(void *ptr);
/* kind: 0 host -> device, 1 device -> host, 2 device -> device. */
amprt_status amprt_cuda_memcpy(void *dst, const void *src, size_t bytes, int32_t kind);
amprt_status amprt_cuda_memset(void *dst, int32_t value, size_t bytes);
/* Waits for the device (the checker's timing; never inside a step). */
amprt_status amprt_cuda_synchronize(void);
/* Elapsed milliseconds of `repeat` runs of the unscale kernel or of a
 * device-to-device copy of the same bytes, for the bandwidth check. */
amprt_status amprt_cuda_time_unscale(const amprt_tensor *grads, amprt_tensor *outs, int32_t n,
                                     const float *scale, float *found_inf, int32_t repeat,
                                     float *ms);
amprt_status amprt_cuda_time_copy(void *dst, const void *src, size_t bytes, int32_t repeat,
                                  float *ms);

/* f32 <-> f16 / bf16, round to nearest even, NaN as the CPU runtime writes
 * it. */
amprt_status amprt_cuda_cast(const amprt_tensor *x, amprt_tensor *y);

/* As amprt_unscale_and_check, in one launch over all n tensors; scale and
 * found_inf are device pointers (f32 scalars). */
amprt_status amprt_cuda_unscale_and_check(const amprt_tensor *grads, amprt_tensor *outs, int32_t n,
                                          const float *scale, float *found_inf);

/* As amprt_update_scale, one device thread; `state` (an amprt_scaler_state)
 * and found_inf are device pointers; state->at_min_scale is set when an
 * overflow hit min_scale (the host reads it when it chooses to). */
amprt_status amprt_cuda_update_scale(const amprt_scaler_config *cfg, amprt_scaler_state *state,
                                     const float *found_inf);

/* As amprt_sgd_step / amprt_adam_step; step (int64) and found_inf (f32)
 * are device pointers, read by the kernel: a skipped step costs no host
 * synchronisation. */
amprt_status amprt_cuda_sgd_step(const amprt_sgd_config *cfg, amprt_tensor *param,
                                 const amprt_tensor *grad, amprt_tensor *momentum_buf,
                                 const int64_t *step, const float *found_inf);
amprt_status amprt_cuda_adam_step(const amprt_adam_config *cfg, amprt_tensor *param,
                                  const amprt_tensor *grad, amprt_tensor *exp_avg,
                                  amprt_tensor *exp_avg_sq, const int64_t *step,
                                  const float *found_inf);

#ifdef __cplusplus
}
#endif

#endif /* AMPRT_AMPRT_CUDA_H */
