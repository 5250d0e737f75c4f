//===- exec.cu - amprt_exec on a CUDA device --------------------------------===//
//
// The CUDA backend of amprt_context ("cuda" / "cuda:N"): device memory,
// copies on the context's stream, and the executor behind amprt_exec, which
// reads the compiled program's descriptors (../cpu/exec_decode.h) and
// launches a kernel per op, with no host synchronisation: the loss scale,
// found_inf, the step counter and the skip decision stay on the device, and
// errors the kernels find (a label outside its classes, an index out of
// range, an overflow at the scale's floor) are recorded in device memory and
// reported by the next amprt_device_synchronize.
//
// Matrix products: cuBLASLt (f16 / bf16 / f32 operands, f32 compute, the
// bias row and a ReLU in the epilogue). Convolutions: cuDNN 9 where it takes
// them, else im2col + cuBLASLt (or direct kernels). The rest: this file's
// kernels (device.cuh: functors run on the GPU or, emulated, on the host).
// cuBLASLt and cuDNN are opened at run time (dlopen).
//
// AMPRT_CUDA_EMULATE=1: the context runs on the host (host memory, the same
// kernels in host loops, matrix products by the CPU runtime) so that the
// executor and the runner's device path are tested without a GPU.
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

int32_t execOne(amprt_context *ctx, Dev &d, const int64_t *desc, void **bufs) {
  thread_local Decoded dd;
  AMPRT_CHECK(decode(desc, bufs, dd));
  // The program's constants live in host memory: their device copies.
  for (size_t k = 0; k < dd.t.size(); ++k) {
    if (!bufs || !bufs[k])
      continue;
    const char *base = static_cast<const char *>(bufs[k]);
    auto al = d.allocations.upper_bound(base);
    if (al != d.allocations.begin()) {
      --al;
      if (base < al->first + al->second)
        continue; // this context's memory
    }
    amprt_tensor &tt = dd.t[k];
    int64_t last = 0;
    for (int32_t i = 0; i < tt.rank; ++i)
      if (tt.shape[i] == 0) {
        last = -1;
        break;
      } else {
        last += (tt.shape[i] - 1) * (tt.strides[i] > 0 ? tt.strides[i] : 0);
      }
    size_t es = amprt_dtype_size(tt.dtype);
    size_t bytes = (size_t)((static_cast<char *>(tt.data) - base) + (last + 1) * (int64_t)es);
    auto &c = d.constants[base];
    if (c.second < bytes) {
      if (d.capturing)
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "a CUDA graph capture met a constant the step did not use before (run the "
                    "step once before capturing it)");
      ++d.hostSyncs; // a synchronous copy (the first steps only)
      void *copy;
      AMPRT_CHECK(rawAlloc(d, bytes, &copy));
      if (d.emulate) {
        std::memcpy(copy, base, bytes);
      } else {
        // On the context's stream: ordered before the kernels that read it.
        CUDA_CHECK(cudaMemcpyAsync(copy, base, bytes, cudaMemcpyHostToDevice, d.stream),
                   "a constant's copy");
      }
      c = {copy, bytes}; // the smaller copy, if any, stays (a kernel may still read it)
    }
    tt.data = static_cast<char *>(c.first) + (static_cast<char *>(tt.data) - base);
  }
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_UNARY:
  case AMPRT_OP_UNARY_GRAD:
  case AMPRT_OP_BINARY:
  case AMPRT_OP_WHERE:
  case AMPRT_OP_CAST:
  case AMPRT_OP_COPY:
  case AMPRT_OP_CONCAT:
  case AMPRT_OP_SLICE_GRAD:
    return execElementwise(ctx, d, dd);
  case AMPRT_OP_GATHER:
  case AMPRT_OP_GATHER_GRAD:
  case AMPRT_OP_CUMSUM:
  case AMPRT_OP_GRID_SAMPLE:
  case AMPRT_OP_GRID_SAMPLE_GRAD:
  case AMPRT_OP_TOPK:
  case AMPRT_OP_ARG_REDUCE:
  case AMPRT_OP_GATHER_ELEMENTS:
  case AMPRT_OP_GATHER_ELEMENTS_GRAD:
    return execIndexing(ctx, d, dd);
  case AMPRT_OP_RANDOM:
  case AMPRT_OP_DROPOUT:
    return execRandom(ctx, d, dd);
  case AMPRT_OP_REDUCE:
  case AMPRT_OP_REDUCE_MAX_GRAD:
  case AMPRT_OP_SOFTMAX:
  case AMPRT_OP_SOFTMAX_GRAD:
  case AMPRT_OP_LAYER_NORM:
  case AMPRT_OP_LAYER_NORM_GRAD:
  case AMPRT_OP_SOFTMAX_CROSS_ENTROPY:
  case AMPRT_OP_NLL_LOSS:
  case AMPRT_OP_SOFTMAX_CROSS_ENTROPY_GRAD:
  case AMPRT_OP_NLL_LOSS_GRAD:
    return execReduce(ctx, d, dd);
  case AMPRT_OP_GEMM:
  case AMPRT_OP_MATMUL:
    return execMatMul(ctx, d, dd);
  case AMPRT_OP_SGD_UPDATE:
  case AMPRT_OP_ADAM_UPDATE:
    return execOptimizer(ctx, d, dd);
  case AMPRT_OP_STEP_COUNT:
  case AMPRT_OP_UNSCALE_AND_CHECK:
  case AMPRT_OP_CLIP_GRAD_NORM:
  case AMPRT_OP_UPDATE_SCALE:
  case AMPRT_OP_MICRO_STEP:
    return execScaler(ctx, d, dd);
  case AMPRT_OP_CONV:
  case AMPRT_OP_CONV_BN:
  case AMPRT_OP_CONV_GRAD:
    return execConv(ctx, d, dd);
  case AMPRT_OP_MAX_POOL:
  case AMPRT_OP_AVERAGE_POOL:
  case AMPRT_OP_MAX_POOL_GRAD:
  case AMPRT_OP_AVERAGE_POOL_GRAD:
    return execPool(ctx, d, dd);
  case AMPRT_OP_BATCH_NORM:
  case AMPRT_OP_BATCH_NORM_GRAD:
    return execBatchNorm(ctx, d, dd);
  case AMPRT_OP_ALL_REDUCE:
    return execAllReduce(ctx, d, dd);
  }
  return fail(AMPRT_ERR_UNSUPPORTED, "amprt_exec (cuda): unknown opcode %lld",
              (long long)dd.opcode);
}

} // namespace amprt::cuda
