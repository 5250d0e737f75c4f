//===- context.h - the context and device backends --------*- C++ -*-===//

#ifndef AMPRT_HOST_CONTEXT_H
#define AMPRT_HOST_CONTEXT_H

#include "amprt/amprt.h"

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

/// A device backend other than the host (libamprt_cuda's): the context's
/// kernels, memory and copies. Found through a weak symbol, so that a
/// program without that library links and reports "no CUDA device".
struct amprt_device_ops {
  amprt_status (*open)(amprt_context *ctx, int32_t device);
  void (*close)(amprt_context *ctx);
  int32_t (*exec)(amprt_context *ctx, const int64_t *desc, void **bufs);
  amprt_status (*alloc)(amprt_context *ctx, size_t bytes, void **out);
  void (*free)(amprt_context *ctx, void *ptr);
  amprt_status (*copy)(amprt_context *ctx, void *dst, const void *src, size_t bytes, int32_t kind);
  amprt_status (*sync)(amprt_context *ctx);
  int64_t (*syncCount)(amprt_context *ctx);
  amprt_status (*graphBegin)(amprt_context *ctx);
  amprt_status (*graphEnd)(amprt_context *ctx, void **graph);
  amprt_status (*graphLaunch)(amprt_context *ctx, void *graph);
  void (*graphDestroy)(amprt_context *ctx, void *graph);
  // The dropout generator's state, kept on the device (ctx->rng mirrors
  // what was last set).
  amprt_status (*rngSet)(amprt_context *ctx, uint64_t state);
  amprt_status (*rngGet)(amprt_context *ctx, uint64_t *state);
};

extern "C" const amprt_device_ops *amprt_cuda_device_ops(void) __attribute__((weak));

struct amprt_context {
  std::string device;
  uint64_t rng = 0x853c49e6748fea9bULL;
  const amprt_device_ops *ops = nullptr; // null: the host
  void *impl = nullptr;                  // the backend's state
  bool capturing = false;                // between amprt_graph_begin and _end
  amprt_comm *comm = nullptr;            // data parallel (not owned)
  int32_t commDtype = AMPRT_F32;         // what the gradients travel in
  // Gradients checked for inf / NaN by the op that wrote them (see
  // amprt::notePrechecked), until the step's unscale_and_check reads them.
  struct Prechecked {
    const void *data;
    int64_t numel;
    bool nonFinite;
  };
  std::mutex precheckedMu;
  std::vector<Prechecked> prechecked;
};

namespace amprt {

/// How long a collective waits for the other ranks: AMPRT_COMM_TIMEOUT
/// seconds, 300 by default (the MPI and NCCL back-ends; context.cpp).
double commTimeoutSeconds();

/// Next value of the context's generator (xorshift64*), uniform in [0, 1).
float nextUniform(amprt_context *ctx);

} // namespace amprt

#endif // AMPRT_HOST_CONTEXT_H
