//===- context.cu - the backend's entry points ------------------------------===//
//
// Contexts (open, close, the ReLU epilogue probe, the profile), exec,
// memory, copies, synchronisation, graph capture, the dropout generator's
// state, and the ops table amprt_context dispatches to.
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"
#include "dnn_host.h"
#include "host/context.h"
#include "lt_host.h"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

#include <chrono>
#include <mutex>

namespace amprt::cuda {

namespace {

/// Whether cuBLASLt's ReLU epilogue computes ours, max(v, 0) with NaN kept
/// (its documentation does not say what NaN gives): Y[1, 4] = A[1, 1] B[1, 4]
/// with B = [NaN, -2, 3, -0] and A = 1, in f32 and in f16, on this device, once
/// per context (one synchronisation when the context is made, none in steps).
/// Not kept, or not run: ReLU stays a second pass.
bool probeReluEpilogue(Dev &d) {
  void *buf = nullptr;
  if (rawAlloc(d, 1024, &buf) != AMPRT_OK)
    return false;
  char *b = static_cast<char *>(buf);
  bool ok = true;
  for (int32_t t : {AMPRT_F32, AMPRT_F16}) {
    const float in[5] = {1.0f, std::nanf(""), -2.0f, 3.0f, -0.0f};
    alignas(8) char host[20], out[16];
    for (int i = 0; i < 5; ++i)
      stF(host, t, i, in[i]);
    size_t es = amprt_dtype_size((amprt_dtype)t);
    // A at 0, B at 256, Y at 512 (each 256-byte aligned). Every copy on
    // the context's (non-blocking) stream: the legacy stream's cudaMemcpy
    // is not ordered with it (a pageable H2D copy may return before its
    // data lands).
    ok = ok && rawCopy(d, b, host, es, 0) == AMPRT_OK &&
         rawCopy(d, b + 256, host + es, 4 * es, 0) == AMPRT_OK &&
         ltMatmul(d, false, false, 1, 4, 1, b, b + 256, t, b + 512, t, 1.0f, nullptr, 1, 0, 0, 0,
                  true) == AMPRT_OK &&
         rawCopy(d, out, b + 512, 4 * es, 1) == AMPRT_OK &&
         (d.emulate || cudaStreamSynchronize(d.stream) == cudaSuccess);
    ok = ok && std::isnan(ldF(out, t, 0)) && ldF(out, t, 1) == 0.0f && ldF(out, t, 2) == 3.0f &&
         ldF(out, t, 3) == 0.0f;
  }
  if (!d.emulate) {
    cudaStreamSynchronize(d.stream);
    cudaGetLastError(); // a failed probe leaves no error behind
  }
  rawFree(d, buf);
  return ok;
}

amprt_status open(amprt_context *ctx, int32_t device) {
  auto *d = new (std::nothrow) Dev();
  if (!d)
    return fail(AMPRT_ERR_OUT_OF_MEMORY, "amprt_context_create");
  const char *emu = std::getenv("AMPRT_CUDA_EMULATE");
  d->emulate = emu && *emu && std::strcmp(emu, "0") != 0;
  d->profile = desc::profilingRequested();
  d->device = device;
  // A switch: unset or empty keeps the default; `on` / `off` set it.
  auto envSwitch = [&](const char *var, const char *on, const char *off, const char *expect,
                       bool &value) {
    const char *v = std::getenv(var);
    if (!v || !*v)
      return true;
    if (std::strcmp(v, on) != 0 && std::strcmp(v, off) != 0) {
      fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_context_create: %s=%s: expected %s", var, v, expect);
      return false;
    }
    value = std::strcmp(v, on) == 0;
    return true;
  };
  if (const char *v = std::getenv("AMPRT_CUDA_CONV"); v && *v) {
    std::string c = v;
    if (c == "direct" || c == "gemm") {
      d->directConv = c == "direct";
      d->dnnMode = Dev::kDnnOff;
    } else if (c == "cudnn") {
#ifndef AMPRT_HAVE_CUDNN
      delete d;
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_context_create: AMPRT_CUDA_CONV=cudnn: this "
                                              "build has no cuDNN (cudnn.h was not found)");
#endif
      d->dnnMode = Dev::kDnnRequired;
    } else if (c != "auto") {
      delete d;
      return fail(
          AMPRT_ERR_INVALID_ARGUMENT,
          "amprt_context_create: AMPRT_CUDA_CONV=%s: expected 'auto' (cuDNN where it takes the "
          "convolution, else im2col + cuBLASLt; the default), 'cudnn', 'gemm' or 'direct'",
          v);
    }
  }
  if (!envSwitch("AMPRT_CUDA_RELU_EPILOGUE", "1", "0",
                 "1 (ReLU in cuBLASLt's epilogue where it keeps NaN, the default) or 0",
                 d->reluEpilogue) ||
      !envSwitch("AMPRT_CUDA_GEMM", "fallback", "cublaslt",
                 "cublaslt (matrix products on cuBLASLt, the default) or fallback (on the "
                 "backend's own kernel, which runs where cuBLASLt has no algorithm)",
                 d->gemmFallback) ||
      !envSwitch(
          "AMPRT_CUDA_VEC", "1", "0",
          "1 (16-byte groups in the element-wise kernels and the reductions, the default) or 0",
          d->vec)) {
    delete d;
    return AMPRT_ERR_INVALID_ARGUMENT;
  }
  if (const char *cb = std::getenv("AMPRT_CUDA_CONV_CHUNK"); cb && *cb) {
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(cb, &end, 10);
    if (errno || *end || v == 0 || cb[0] == '-') {
      delete d;
      return fail(
          AMPRT_ERR_INVALID_ARGUMENT,
          "amprt_context_create: AMPRT_CUDA_CONV_CHUNK=%s: expected a positive number of bytes",
          cb);
    }
    d->convChunkBytes = (size_t)v;
  }
  auto cleanup = [&](amprt_status s) {
    delete d;
    return s;
  };
  if (!d->emulate) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
      return cleanup(fail(AMPRT_ERR_NO_DEVICE, "amprt_context_create: no CUDA device: %s",
                          cudaGetErrorString(e)));
    if (device >= count)
      return cleanup(fail(AMPRT_ERR_NO_DEVICE,
                          "amprt_context_create: CUDA device %d does not exist (%d found)", device,
                          count));
    amprt_status s = cudaFail(cudaSetDevice(device), "cudaSetDevice");
    if (s == AMPRT_OK)
      s = cudaFail(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking),
                   "cudaStreamCreate");
    if (s == AMPRT_OK)
      s = loadCublasLt();
    if (s == AMPRT_OK && ltApi.cublasLtCreate(&d->lt) != CUBLAS_STATUS_SUCCESS)
      s = fail(AMPRT_ERR_DEVICE, "amprt_context_create: cuBLASLt did not start");
    if (s != AMPRT_OK)
      return cleanup(s);
  } else {
    // cuBLASLt on the host (lt_host.h): the backend's cuBLASLt code runs,
    // its arguments checked against cuBLASLt's rules.
    // What the real libraries may do, modelled on request: comma-separated
    // words of `allowed`, each setting its flag.
    auto emulationOptions = [&](const char *var,
                                std::initializer_list<std::pair<const char *, bool *>> allowed) {
      const char *v = std::getenv(var);
      std::string opts = v ? v : "", names;
      for (auto [name, flag] : allowed)
        names += std::string(names.empty() ? "'" : " or '") + name + "'";
      for (size_t at = 0; !opts.empty() && at <= opts.size();) {
        size_t end = std::min(opts.find(',', at), opts.size());
        std::string o = opts.substr(at, end - at);
        bool known = false;
        for (auto [name, flag] : allowed)
          if (o == name)
            known = *flag = true;
        if (!known) {
          fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_context_create: %s=%s: '%s' is not %s", var, v,
               o.c_str(), names.c_str());
          return false;
        }
        at = end + 1;
      }
      return true;
    };
    HostLtOptions lo;
    if (!emulationOptions("AMPRT_CUDA_EMULATE_LT", {{"no-algorithm", &lo.noAlgorithm},
                                                    {"relu-drops-nan", &lo.reluDropsNaN}}) ||
        !emulationOptions("AMPRT_CUDA_EMULATE_DNN", {{"no-algorithm", &d->emulateDnnNoAlgorithm}}))
      return cleanup(AMPRT_ERR_INVALID_ARGUMENT);
    d->lta = &hostLtApi();
    d->lta->cublasLtCreate(&d->lt);
    Dev *dp = d;
    hostLtAttach(d->lt, [dp](const void *p, size_t n) { return inDeviceMemory(*dp, p, n); }, lo);
  }
  {
    d->ltWorkBytes = (size_t)32 << 20;
    amprt_status s = rawAlloc(*d, d->ltWorkBytes, &d->ltWork);
    if (s != AMPRT_OK)
      return cleanup(s);
    d->ltReluKeepsNaN = probeReluEpilogue(*d);
  }
  void *err;
  amprt_status s = rawAlloc(*d, sizeof(DeviceError), &err);
  if (s != AMPRT_OK)
    return cleanup(s);
  d->err = static_cast<DeviceError *>(err);
  if (d->emulate)
    std::memset(err, 0, sizeof(DeviceError));
  else if ((s = cudaFail(cudaMemsetAsync(err, 0, sizeof(DeviceError), d->stream),
                         "cudaMemsetAsync")) != AMPRT_OK)
    return cleanup(s);
  const std::vector<uint64_t> &jumps = rngJumpTable();
  void *rng;
  if ((s = rawAlloc(*d, 8 + jumps.size() * 8, &rng)) != AMPRT_OK)
    return cleanup(s);
  d->rngState = static_cast<uint64_t *>(rng);
  d->rngJumps = d->rngState + 1;
  if ((s = rawCopy(*d, d->rngJumps, jumps.data(), jumps.size() * 8, 0)) != AMPRT_OK ||
      (s = rawCopy(*d, d->rngState, &ctx->rng, 8, 0)) != AMPRT_OK)
    return cleanup(s);
  ctx->impl = d;
  return AMPRT_OK;
}

/// The profile's pending event pairs, read (the stream is synchronised).
void flushProfile(Dev &d) {
  for (auto &[key, ev] : d.timed) {
    float ms = 0.0f;
    if (cudaEventSynchronize(ev.second) == cudaSuccess &&
        cudaEventElapsedTime(&ms, ev.first, ev.second) == cudaSuccess)
      d.profileTable.add(key, ms * 1e-3);
    d.eventPool.push_back(ev.first);
    d.eventPool.push_back(ev.second);
  }
  d.timed.clear();
}

void close(amprt_context *ctx) {
  Dev *d = static_cast<Dev *>(ctx->impl);
  if (!d)
    return;
  if (!d->emulate)
    cudaStreamSynchronize(d->stream);
  if (d->profile) {
    flushProfile(*d);
    for (cudaEvent_t e : d->eventPool)
      cudaEventDestroy(e);
    std::fprintf(stderr,
                 "amprt (cuda): convolutions (forward, data and weight gradients apart): %lld on "
                 "cuDNN, %lld on "
                 "%s; matrix products: %lld on cuBLASLt%s, %lld on the fallback kernel (no "
                 "algorithm); ReLU after a matrix product: %s\n",
                 (long long)d->convOnDnn, (long long)d->convOnOurs,
                 d->directConv ? "the direct kernels" : "im2col + cuBLASLt", (long long)d->ltCalls,
                 d->emulate ? " (its host implementation)" : "", (long long)d->fallbackCalls,
                 d->ltReluKeepsNaN && d->reluEpilogue
                     ? (d->emulate ? "cuBLASLt's epilogue (the host implementation keeps NaN)"
                                   : "cuBLASLt's epilogue (it keeps NaN on this device)")
                 : d->reluEpilogue ? "a second pass (cuBLASLt's epilogue does not keep NaN here)"
                                   : "a second pass (AMPRT_CUDA_RELU_EPILOGUE=0)");
    d->profileTable.print(d->emulate ? " (cuda, emulated on the host)" : " (cuda)");
  }
  for (auto &[k, p] : d->plans)
    if (!p.fallback) {
      d->lta->cublasLtMatmulDescDestroy(p.op);
      d->lta->cublasLtMatrixLayoutDestroy(p.a);
      d->lta->cublasLtMatrixLayoutDestroy(p.b);
      d->lta->cublasLtMatrixLayoutDestroy(p.c);
    }
#ifdef AMPRT_HAVE_CUDNN
  for (auto &[k, p] : d->dnnPlans)
    dnnFree(*d, p);
  if (d->dnn)
    d->dnna->cudnnDestroy(static_cast<cudnnHandle_t>(d->dnn));
#endif
  for (auto &[k, c] : d->constants)
    rawFree(*d, c.first);
  for (auto &s : d->scratch)
    rawFree(*d, s.first);
  for (void *r : d->retired)
    rawFree(*d, r);
  for (auto &[p, n] : d->allocations)
    rawFree(*d, const_cast<char *>(p));
  rawFree(*d, d->err);
  rawFree(*d, d->rngState);
  rawFree(*d, d->ltWork);
  if (d->lt)
    d->lta->cublasLtDestroy(d->lt);
  if (d->stream)
    cudaStreamDestroy(d->stream);
  delete d;
  ctx->impl = nullptr;
}

int64_t syncCount(amprt_context *ctx) { return devOf(ctx).hostSyncs; }

int32_t profiledExec(amprt_context *ctx, Dev &d, const int64_t *desc, void **bufs) {
  if (d.emulate) {
    auto t0 = std::chrono::steady_clock::now();
    int32_t r = execOne(ctx, d, desc, bufs);
    d.profileTable.add(
        desc::profileKey(desc),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return r;
  }
  cudaEvent_t ev[2];
  for (cudaEvent_t &e : ev) {
    if (d.eventPool.empty()) {
      CUDA_CHECK(cudaEventCreate(&e), "AMPRT_PROFILE: cudaEventCreate");
    } else {
      e = d.eventPool.back();
      d.eventPool.pop_back();
    }
  }
  cudaEventRecord(ev[0], d.stream);
  int32_t r = execOne(ctx, d, desc, bufs);
  cudaEventRecord(ev[1], d.stream);
  d.timed.push_back({desc::profileKey(desc), {ev[0], ev[1]}});
  return r;
}

int32_t exec(amprt_context *ctx, const int64_t *desc, void **bufs) {
  Dev &d = devOf(ctx);
  if (d.profile && !d.capturing)
    return profiledExec(ctx, d, desc, bufs);
  if (d.capturing && d.emulate) {
    // Recorded for the emulated graph: the descriptor is the program's
    // constant, the buffer pointers are copied (the caller's array is not).
    if (!desc || !knownVersion(desc[0]) || desc[2] < 0 || desc[2] > 4096)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt descriptor");
    Dev::Call c{desc, {}};
    if (bufs)
      c.bufs.assign(bufs, bufs + desc[2]);
    d.recorded.push_back(std::move(c));
    return AMPRT_OK;
  }
  return execOne(ctx, d, desc, bufs);
}

struct Graph {
  cudaGraphExec_t exec = nullptr;
  std::vector<Dev::Call> calls;        // emulated
  std::vector<const void *> scratchIn; // the scratch buffers at capture (emulated: checked)
};

amprt_status graphBegin(amprt_context *ctx) {
  Dev &d = devOf(ctx);
  if (d.capturing)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_graph_begin: already capturing");
  if (!d.emulate)
    CUDA_CHECK(cudaStreamBeginCapture(d.stream, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
  d.recorded.clear();
  d.capturing = true;
  return AMPRT_OK;
}

amprt_status graphEnd(amprt_context *ctx, void **out) {
  Dev &d = devOf(ctx);
  *out = nullptr;
  if (!d.capturing)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_graph_end: not capturing");
  d.capturing = false;
  auto *g = new (std::nothrow) Graph();
  if (!g)
    return fail(AMPRT_ERR_OUT_OF_MEMORY, "amprt_graph_end");
  for (auto &sc : d.scratch)
    if (sc.first)
      g->scratchIn.push_back(sc.first);
  if (d.emulate) {
    g->calls.swap(d.recorded);
  } else {
    cudaGraph_t graph = nullptr;
    amprt_status s = cudaFail(cudaStreamEndCapture(d.stream, &graph), "cudaStreamEndCapture");
    if (s == AMPRT_OK)
      s = cudaFail(cudaGraphInstantiate(&g->exec, graph, 0), "cudaGraphInstantiate");
    if (graph)
      cudaGraphDestroy(graph);
    if (s != AMPRT_OK) {
      delete g;
      return s;
    }
  }
  *out = g;
  ++d.graphsAlive;
  return AMPRT_OK;
}

amprt_status graphLaunch(amprt_context *ctx, void *p) {
  Dev &d = devOf(ctx);
  auto *g = static_cast<Graph *>(p);
  if (d.emulate) {
    for (const void *sc : g->scratchIn)
      if (d.freedScratch.count(sc))
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "amprt_graph_launch (emulated): the graph captured a scratch buffer that "
                    "was freed after the capture (a device would read freed memory)");
    for (Dev::Call &c : g->calls)
      AMPRT_CHECK((amprt_status)execOne(ctx, d, c.desc, c.bufs.empty() ? nullptr : c.bufs.data()));
    return AMPRT_OK;
  }
  CUDA_CHECK(cudaGraphLaunch(g->exec, d.stream), "cudaGraphLaunch");
  return AMPRT_OK;
}

void graphDestroy(amprt_context *ctx, void *p) {
  auto *g = static_cast<Graph *>(p);
  if (!g)
    return;
  Dev &d = devOf(ctx);
  if (g->exec) {
    cudaStreamSynchronize(d.stream);
    cudaGraphExecDestroy(g->exec);
  }
  delete g;
  if (--d.graphsAlive == 0) { // nothing captured the retired buffers any more
    for (void *r : d.retired) {
      if (d.emulate)
        d.freedScratch.insert(r);
      rawFree(d, r);
    }
    d.retired.clear();
  }
}

amprt_status alloc(amprt_context *ctx, size_t bytes, void **out) {
  Dev &d = devOf(ctx);
  AMPRT_CHECK(rawAlloc(d, bytes, out));
  d.allocations[static_cast<const char *>(*out)] = bytes ? bytes : 1;
  return AMPRT_OK;
}

void release(amprt_context *ctx, void *p) {
  Dev &d = devOf(ctx);
  auto it = d.allocations.find(static_cast<const char *>(p));
  if (it == d.allocations.end())
    return; // not ours
  ++d.hostSyncs;
  if (!d.emulate)
    cudaStreamSynchronize(d.stream);
  d.allocations.erase(it);
  rawFree(d, p);
}

amprt_status copy(amprt_context *ctx, void *dst, const void *src, size_t bytes, int32_t kind) {
  return rawCopy(devOf(ctx), dst, src, bytes, kind);
}

amprt_status sync(amprt_context *ctx) {
  Dev &d = devOf(ctx);
  DeviceError e{};
  ++d.hostSyncs;
  if (d.emulate) {
    e = *d.err;
    std::memset(d.err, 0, sizeof e);
  } else {
    CUDA_CHECK(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
    flushProfile(d);
    CUDA_CHECK(cudaMemcpyAsync(&e, d.err, sizeof e, cudaMemcpyDeviceToHost, d.stream),
               "reading the device's errors");
    CUDA_CHECK(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
    if (e.kind != ERR_NONE)
      CUDA_CHECK(cudaMemsetAsync(d.err, 0, sizeof e, d.stream), "cudaMemsetAsync"); // in order
  }
  switch (e.kind) {
  case ERR_NONE:
    return AMPRT_OK;
  case ERR_LABEL:
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "a loss: label %lld at position %lld is outside [0, %lld)", (long long)e.a,
                (long long)e.b, (long long)e.c);
  case ERR_INDEX:
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "gather: index %lld out of range [-%lld, %lld)",
                (long long)e.a, (long long)e.b, (long long)e.b);
  case ERR_MIN_SCALE:
  case ERR_MIN_SCALE_WARN: {
    // The CPU runtime's words (amprt_update_scale).
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "amprt_update_scale: an overflow at the minimum loss scale %g: every step is "
                  "being skipped (lower the learning rate, check the data and the fp16 ops)",
                  floatOf((uint32_t)e.a));
    if (e.kind == ERR_MIN_SCALE)
      return fail(AMPRT_ERR_NUMERIC, "%s", msg);
    if (!d.warned)
      std::fprintf(stderr, "warning: %s\n", msg);
    d.warned = true;
    return AMPRT_OK;
  }
  case ERR_MICRO_STEP:
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "micro_step: counter %lld outside [0, %lld) (a checkpoint of another "
                "accumulation setting?)",
                (long long)e.a, (long long)e.b);
  case ERR_INT_DIV_ZERO:
    return fail(AMPRT_ERR_NUMERIC, "binary: integer division by zero");
  case ERR_PROBABILITY: {
    uint32_t bits = (uint32_t)e.a;
    float v;
    std::memcpy(&v, &bits, 4);
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_random: bernoulli probability %g at element %lld is outside [0, 1]", v,
                (long long)e.b);
  }
  }
  return fail(AMPRT_ERR_DEVICE, "the device recorded an unknown error %d", e.kind);
}

amprt_status rngSet(amprt_context *ctx, uint64_t state) {
  Dev &d = devOf(ctx);
  if (d.capturing)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "the dropout generator cannot be set inside a CUDA graph capture");
  return rawCopy(d, d.rngState, &state, 8, 0);
}

amprt_status rngGet(amprt_context *ctx, uint64_t *state) {
  Dev &d = devOf(ctx);
  if (d.capturing)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "the dropout generator cannot be read inside a CUDA graph capture");
  return rawCopy(d, state, d.rngState, 8, 1);
}

const amprt_device_ops kOps = {open,        close,        exec,      alloc,      release,
                               copy,        sync,         syncCount, graphBegin, graphEnd,
                               graphLaunch, graphDestroy, rngSet,    rngGet};

} // namespace
} // namespace amprt::cuda

extern "C" const amprt_device_ops *amprt_cuda_device_ops(void) { return &amprt::cuda::kOps; }
