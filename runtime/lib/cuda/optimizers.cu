//===- optimizers.cu - the optimizer steps on the device -------------------===//
//
// sgd_update and adam_update (cpu/optim/optimizers.cpp on the host): each
// reads found_inf on the device and leaves the state as it was on a skipped
// step; an updated parameter's f16 / bf16 copy is written in the same pass.
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

namespace {

amprt_status checkF32State(const amprt_tensor &t, int64_t n, const char *what) {
  if (t.dtype != AMPRT_F32 || !amprt_tensor_is_contiguous(&t) || numel(t) != n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec (cuda): %s must be a contiguous f32 tensor of the parameter's size",
                what);
  return AMPRT_OK;
}

amprt_status checkLowpState(const amprt_tensor &t, int64_t n) {
  if ((t.dtype != AMPRT_F16 && t.dtype != AMPRT_BF16) || !amprt_tensor_is_contiguous(&t) ||
      numel(t) != n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec (cuda): the low-precision copy must be a contiguous f16 / bf16 "
                "tensor of the parameter's size");
  return AMPRT_OK;
}

} // namespace

/// The optimizer opcodes of amprt_exec (exec.cu dispatches them here).
int32_t execOptimizer(amprt_context *ctx, Dev &d, Decoded &dd) {
  (void)ctx;
  auto &t = dd.t;
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_SGD_UPDATE: {
    amprt_sgd_config cfg{};
    bool buf = false;
    size_t o = 0, lowp = 0;
    AMPRT_CHECK(sgdAttrs(dd, cfg, buf, o, lowp));
    if (cfg.nesterov && (cfg.momentum <= 0.0f || cfg.dampening != 0.0f))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): nesterov needs momentum > 0 and dampening 0");
    if (cfg.momentum != 0.0f && !buf)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): momentum needs a buffer");
    int64_t n = numel(t[0]);
    AMPRT_CHECK(checkF32State(t[0], n, "the parameter"));
    AMPRT_CHECK(checkF32State(t[1], n, "the gradient"));
    AMPRT_CHECK(checkF32State(t[o + 2], n, "the new parameter"));
    if (buf) {
      AMPRT_CHECK(checkF32State(t[2], n, "the momentum buffer"));
      AMPRT_CHECK(checkF32State(t[o + 3], n, "the new momentum buffer"));
    }
    if (lowp)
      AMPRT_CHECK(checkLowpState(t[lowp], n));
    return each(&d, n,
                SgdF{cfg, static_cast<const float *>(t[0].data),
                     static_cast<const float *>(t[1].data),
                     buf ? static_cast<const float *>(t[2].data) : nullptr,
                     static_cast<float *>(t[o + 2].data),
                     buf ? static_cast<float *>(t[o + 3].data) : nullptr,
                     static_cast<const int64_t *>(t[o].data), t[o + 1].data, 1,
                     lowp ? t[lowp].data : nullptr, lowp && t[lowp].dtype == AMPRT_BF16},
                "sgd_update");
  }
  case AMPRT_OP_ADAM_UPDATE: {
    amprt_adam_config cfg{};
    size_t lowp = 0;
    AMPRT_CHECK(adamAttrs(dd, cfg, lowp));
    if (!(cfg.beta1 >= 0.0f && cfg.beta1 < 1.0f && cfg.beta2 >= 0.0f && cfg.beta2 < 1.0f &&
          cfg.eps >= 0.0f) ||
        cfg.decoupled < 0 || cfg.decoupled > 2)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): adam's hyper-parameters");
    int64_t n = numel(t[0]);
    for (size_t k : {0, 1, 2, 3, 6, 7, 8})
      AMPRT_CHECK(checkF32State(t[k], n, "an adam tensor"));
    if (lowp)
      AMPRT_CHECK(checkLowpState(t[lowp], n));
    return each(&d, n,
                AdamF{cfg, static_cast<const float *>(t[0].data),
                      static_cast<const float *>(t[1].data), static_cast<const float *>(t[2].data),
                      static_cast<const float *>(t[3].data), static_cast<float *>(t[6].data),
                      static_cast<float *>(t[7].data), static_cast<float *>(t[8].data),
                      static_cast<const int64_t *>(t[4].data), t[5].data, 1,
                      lowp ? t[lowp].data : nullptr, lowp && t[lowp].dtype == AMPRT_BF16},
                "adam_update");
  }
  default:
    break;
  }
  return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): opcode %lld is not an optimizer op",
              (long long)dd.opcode);
}

} // namespace amprt::cuda
