//===- scaler.h - unscale and inf check -------------------*- C++ -*-===//

#ifndef AMPRT_CPU_SCALER_H
#define AMPRT_CPU_SCALER_H

#include "amprt/amprt.h"

#include <cstdint>

namespace amprt {

/// Whether n f32 at p hold an inf or NaN (the exponent's bits all ones),
/// on the threads (scaler.cpp).
bool anyNonFiniteF32(const float *p, int64_t n);
/// The inf check moved to a gradient's producer (scaler.cpp). A conv_grad
/// whose weight gradient the step's unscale_and_check reads directly (the
/// compiler's check_dw) checks it as it writes it, while it is in the
/// caches, and notes the answer here; that unscale_and_check (through
/// amprt_exec, where it only tests: f32, in place, scale 1) takes the note
/// instead of reading the gradient again. A note names the tensor's data
/// and size; the program writes nothing else there between the two ops
/// (the gradient is live until the check). Notes go when the check has
/// run, and when an op fails (a step cut short). No note without a
/// context.
void notePrechecked(amprt_context *ctx, const amprt_tensor *t, bool nonFinite);
/// The note for t (taken out), if there is one.
bool takePrechecked(amprt_context *ctx, const amprt_tensor *t, bool *nonFinite);
void forgetPrechecked(amprt_context *ctx);
/// amprt_unscale_and_check; usePrechecked: the producers' notes taken
/// (amprt_exec's unscale_and_check).
amprt_status unscaleAndCheck(amprt_context *ctx, const amprt_tensor *grads, amprt_tensor *outs,
                             int32_t n, const float *scale, float *found_inf, bool usePrechecked);

} // namespace amprt

#endif // AMPRT_CPU_SCALER_H
