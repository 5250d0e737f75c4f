//===- context.cpp - contexts, devices, arenas -----------------------------===//

#include "host/context.h"
#include "common/check.h"
#include "common/scalar_ops.h"
#include "host/tune.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

extern "C" amprt_status amprt_context_create(const char *device, amprt_context **out) {
  if (!out)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_context_create: null output pointer");
  *out = nullptr;
  std::string dev = device ? device : "cpu";
  const amprt_device_ops *ops = nullptr;
  int32_t index = 0;
  if (dev == "cuda" || dev.rfind("cuda:", 0) == 0) {
    if (dev.size() > 5) {
      char *end = nullptr;
      long v = std::strtol(dev.c_str() + 5, &end, 10);
      if (*end || v < 0 || v > 1024)
        return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                           "amprt_context_create: bad device '%s' (cuda:N)", dev.c_str());
      index = (int32_t)v;
    }
    ops = amprt_cuda_device_ops ? amprt_cuda_device_ops() : nullptr;
    if (!ops)
      return amprt::fail(AMPRT_ERR_NO_DEVICE,
                         "amprt_context_create: device '%s': this program was built "
                         "without the CUDA runtime (amp-compile --device cuda links it)",
                         dev.c_str());
  } else if (dev != "cpu") {
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                       "amprt_context_create: unknown device '%s' (use cpu or "
                       "cuda[:N])",
                       dev.c_str());
  }
  // A malformed AMPRT_TUNE_FILE is an error now, not at the first choice
  // (which a CPU without bf16 kernels never makes).
  AMPRT_CHECK(amprt::checkTuneFile());
  auto *ctx = new (std::nothrow) amprt_context();
  if (!ctx)
    return amprt::fail(AMPRT_ERR_OUT_OF_MEMORY, "amprt_context_create");
  ctx->device = dev;
  if (ops) {
    ctx->ops = ops;
    amprt_status s = ops->open(ctx, index);
    if (s != AMPRT_OK) {
      delete ctx;
      return s;
    }
  }
  *out = ctx;
  return AMPRT_OK;
}

extern "C" void amprt_context_destroy(amprt_context *ctx) {
  if (ctx && ctx->ops)
    ctx->ops->close(ctx);
  delete ctx;
}

extern "C" int64_t amprt_device_sync_count(amprt_context *ctx) {
  return ctx && ctx->ops ? ctx->ops->syncCount(ctx) : 0;
}

extern "C" amprt_status amprt_graph_begin(amprt_context *ctx) {
  if (!ctx || !ctx->ops)
    return amprt::fail(AMPRT_ERR_UNSUPPORTED, "amprt_graph_begin: graphs need a CUDA context");
  amprt_status s = ctx->ops->graphBegin(ctx);
  ctx->capturing = s == AMPRT_OK;
  return s;
}

extern "C" amprt_status amprt_graph_end(amprt_context *ctx, amprt_graph **out) {
  if (!ctx || !ctx->ops || !out)
    return amprt::fail(AMPRT_ERR_UNSUPPORTED, "amprt_graph_end: graphs need a CUDA context");
  void *g = nullptr;
  ctx->capturing = false;
  amprt_status s = ctx->ops->graphEnd(ctx, &g);
  *out = static_cast<amprt_graph *>(g);
  return s;
}

extern "C" amprt_status amprt_graph_launch(amprt_context *ctx, amprt_graph *graph) {
  if (!ctx || !ctx->ops || !graph)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_graph_launch: no graph");
  return ctx->ops->graphLaunch(ctx, graph);
}

extern "C" void amprt_graph_destroy(amprt_context *ctx, amprt_graph *graph) {
  if (ctx && ctx->ops && graph)
    ctx->ops->graphDestroy(ctx, graph);
}

extern "C" int32_t amprt_context_on_host(const amprt_context *ctx) { return ctx && !ctx->ops; }

extern "C" amprt_status amprt_device_alloc(amprt_context *ctx, size_t bytes, void **out) {
  if (!ctx || !out)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_device_alloc: null argument");
  if (ctx->ops)
    return ctx->ops->alloc(ctx, bytes, out);
  size_t rounded = (bytes + 63) / 64 * 64;
  *out = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!*out)
    return amprt::fail(AMPRT_ERR_OUT_OF_MEMORY, "amprt_device_alloc: cannot allocate %zu bytes",
                       bytes);
  return AMPRT_OK;
}

extern "C" void amprt_device_free(amprt_context *ctx, void *ptr) {
  if (!ctx || !ptr)
    return;
  if (ctx->ops)
    ctx->ops->free(ctx, ptr);
  else
    std::free(ptr);
}

extern "C" amprt_status amprt_device_copy(amprt_context *ctx, void *dst, const void *src,
                                          size_t bytes, int32_t kind) {
  if (!ctx || (bytes && (!dst || !src)) || kind < 0 || kind > 3)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_device_copy: bad argument");
  if (ctx->ops)
    return ctx->ops->copy(ctx, dst, src, bytes, kind);
  if (bytes)
    std::memmove(dst, src, bytes);
  return AMPRT_OK;
}

extern "C" amprt_status amprt_device_synchronize(amprt_context *ctx) {
  if (!ctx)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_device_synchronize: null context");
  return ctx->ops ? ctx->ops->sync(ctx) : AMPRT_OK;
}

extern "C" const char *amprt_context_device(const amprt_context *ctx) {
  return ctx ? ctx->device.c_str() : "";
}

extern "C" void amprt_context_set_comm(amprt_context *ctx, amprt_comm *comm) { ctx->comm = comm; }

extern "C" amprt_comm *amprt_context_comm(const amprt_context *ctx) { return ctx->comm; }

double amprt::commTimeoutSeconds() {
  const char *v = std::getenv("AMPRT_COMM_TIMEOUT");
  if (!v || !*v)
    return 300.0;
  char *end = nullptr;
  double s = std::strtod(v, &end);
  return (*end || !(s > 0)) ? 300.0 : s;
}

extern "C" amprt_status amprt_context_set_comm_dtype(amprt_context *ctx, amprt_dtype dtype) {
  if (!ctx || (dtype != AMPRT_F32 && dtype != AMPRT_BF16 && dtype != AMPRT_F16))
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                       "amprt_context_set_comm_dtype: the gradients travel in f32, bf16 or f16");
  ctx->commDtype = dtype;
  return AMPRT_OK;
}

extern "C" amprt_status amprt_all_reduce(amprt_context *ctx, const amprt_tensor *ins,
                                         amprt_tensor *outs, int32_t n, int32_t mean) {
  if (!ctx || (n > 0 && (!ins || !outs)) || n < 0)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_all_reduce: null argument");
  if (ctx->ops)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                       "amprt_all_reduce: a device context's all-reduce runs in its executor");
  int64_t total = 0;
  for (int32_t k = 0; k < n; ++k) {
    if (!amprt::isFloat(ins[k].dtype) || outs[k].dtype != AMPRT_F32)
      return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                         "amprt_all_reduce: tensor %d: a float input and an f32 output needed", k);
    if (amprt_tensor_numel(&ins[k]) != amprt_tensor_numel(&outs[k]))
      return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                         "amprt_all_reduce: tensor %d: input and output differ in size", k);
    total += amprt_tensor_numel(&ins[k]);
  }
  amprt_comm *comm = ctx->comm;
  const bool collective = comm && comm->size > 1;
  const bool half = collective && ctx->commDtype != AMPRT_F32;
  if (half && !comm->sum_half)
    return amprt::fail(AMPRT_ERR_UNSUPPORTED,
                       "amprt_all_reduce: this communicator has no 2-byte sums (--grad-comm)");
  // One buffer for every tensor: one collective per step (kept between
  // steps: the same size every call).
  static thread_local std::vector<float> buf;
  static thread_local std::vector<uint16_t> buf16;
  buf.resize((size_t)total);
  const float inv = 1.0f / (float)(comm ? comm->size : 1);
  int64_t at = 0;
  for (int32_t k = 0; k < n; ++k) {
    int64_t c = amprt_tensor_numel(&ins[k]);
    amprt_convert(ins[k].data, ins[k].dtype, buf.data() + at, AMPRT_F32, c);
    at += c;
  }
  if (half) {
    // Divided first: the sum of the ranks' shares is the mean, and no
    // larger than the largest share times the ranks.
    if (mean)
      for (float &v : buf)
        v *= inv;
    buf16.resize((size_t)total);
    amprt_convert(buf.data(), AMPRT_F32, buf16.data(), (amprt_dtype)ctx->commDtype, total);
    if (comm->sum_half(comm, buf16.data(), total, ctx->commDtype) != AMPRT_OK)
      return AMPRT_ERR_COMM; // the back-end's message stands
    amprt_convert(buf16.data(), (amprt_dtype)ctx->commDtype, buf.data(), AMPRT_F32, total);
  } else if (collective) {
    if (comm->sum_f32(comm, buf.data(), total) != AMPRT_OK)
      return AMPRT_ERR_COMM;
    if (mean)
      for (float &v : buf)
        v *= inv;
  }
  at = 0;
  for (int32_t k = 0; k < n; ++k) {
    int64_t c = amprt_tensor_numel(&outs[k]);
    std::memcpy(outs[k].data, buf.data() + at, (size_t)c * sizeof(float));
    at += c;
  }
  return AMPRT_OK;
}

extern "C" void amprt_context_seed(amprt_context *ctx, uint64_t seed) {
  // SplitMix64 of the seed: any seed, 0 included, gives a good state.
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  ctx->rng = (z ^ (z >> 31)) | 1;
  if (ctx->ops) // a device keeps the state where its kernels draw
    ctx->ops->rngSet(ctx, ctx->rng);
}

extern "C" uint64_t amprt_context_rng_state(const amprt_context *ctx) {
  uint64_t v = ctx->rng;
  if (ctx->ops && ctx->ops->rngGet(const_cast<amprt_context *>(ctx), &v) != AMPRT_OK)
    return ctx->rng;
  return v;
}

extern "C" void amprt_context_set_rng_state(amprt_context *ctx, uint64_t state) {
  ctx->rng = state ? state : 1;
  if (ctx->ops)
    ctx->ops->rngSet(ctx, ctx->rng);
}

float amprt::nextUniform(amprt_context *ctx) {
  ctx->rng = amprt::ops::rngStep(ctx->rng);
  return amprt::ops::rngUniform(ctx->rng);
}

struct amprt_arena {
  void *base;
  size_t size;
  amprt_context *ctx;
};

extern "C" amprt_status amprt_arena_create(amprt_context *ctx, size_t bytes, amprt_arena **out) {
  if (!ctx || !out)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_arena_create: null context or output");
  *out = nullptr;
  void *p = nullptr;
  // A host arena larger than the memory available is refused before the
  // allocation (with overcommit, malloc may grant it and the zeroing below
  // would end in the OOM killer, not in a message).
  if (!ctx->ops && bytes > amprt_host_available_bytes())
    return amprt::fail(AMPRT_ERR_OUT_OF_MEMORY,
                       "amprt_arena_create: an arena of %zu bytes is more than this "
                       "machine's available memory (%llu bytes)",
                       bytes, (unsigned long long)amprt_host_available_bytes());
  if (bytes) {
    amprt_status s = amprt_device_alloc(ctx, bytes, &p);
    if (s != AMPRT_OK) {
      std::string why = amprt_last_error();
      return amprt::fail(s, "amprt_arena_create: cannot allocate %zu bytes (%s)", bytes,
                         why.c_str());
    }
  }
  auto *a = new (std::nothrow) amprt_arena{p, bytes, ctx};
  if (!a) {
    amprt_device_free(ctx, p);
    return amprt::fail(AMPRT_ERR_OUT_OF_MEMORY, "amprt_arena_create");
  }
  // A host arena starts zeroed: the same bytes every run.
  if (p && !ctx->ops)
    std::memset(p, 0, bytes);
  *out = a;
  return AMPRT_OK;
}

extern "C" void amprt_arena_destroy(amprt_arena *a) {
  if (!a)
    return;
  amprt_device_free(a->ctx, a->base);
  delete a;
}

extern "C" void *amprt_arena_base(amprt_arena *a) { return a ? a->base : nullptr; }
extern "C" size_t amprt_arena_size(const amprt_arena *a) { return a ? a->size : 0; }

extern "C" amprt_status amprt_arena_at(amprt_arena *a, size_t offset, size_t bytes, void **out) {
  if (!a || !out)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_arena_at: null arena");
  if (offset > a->size || bytes > a->size - offset)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                       "amprt_arena_at: [%zu, %zu) is outside the arena of "
                       "%zu bytes",
                       offset, offset + bytes, a->size);
  *out = static_cast<char *>(a->base) + offset;
  return AMPRT_OK;
}
