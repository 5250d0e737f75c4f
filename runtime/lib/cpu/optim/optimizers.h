//===- optimizers.h - SGD and Adam ------------------------*- C++ -*-===//

#ifndef AMPRT_CPU_OPTIMIZERS_H
#define AMPRT_CPU_OPTIMIZERS_H

#include "amprt/amprt.h"

namespace amprt {

/// amprt_sgd_step / amprt_adam_step that also write `lowp` (may be null): a
/// contiguous f16 / bf16 tensor of the parameter's size gets the updated
/// parameter rounded, piece by piece in the update's pass (the unchanged
/// one when the step is skipped). amprt_exec's sgd_update / adam_update
/// with lowp (amp-keep-weight-casts).
amprt_status sgdStep(amprt_context *ctx, const amprt_sgd_config *cfg, amprt_tensor *param,
                     const amprt_tensor *grad, amprt_tensor *buf, const int64_t *step,
                     float found_inf, amprt_tensor *lowp);
amprt_status adamStep(amprt_context *ctx, const amprt_adam_config *cfg, amprt_tensor *param,
                      const amprt_tensor *grad, amprt_tensor *exp_avg, amprt_tensor *exp_avg_sq,
                      const int64_t *step, float found_inf, amprt_tensor *lowp);

} // namespace amprt

#endif // AMPRT_CPU_OPTIMIZERS_H
