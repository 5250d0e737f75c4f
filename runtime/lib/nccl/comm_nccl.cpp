//===- comm_nccl.cpp - the data-parallel communicator on NCCL -------------===//
//
// libamprt_nccl: amprt_comm (amprt.h) for programs amp-compile
// --data-parallel --device cuda writes. The host collectives (the set-up's
// agreement, the loss's mean, --resume's broadcast) are the MPI back-end's
// (libamprt_mpi); the gradients' all-reduce on device memory is NCCL's
// (ncclAllReduce, sum, in f32 / bf16 / f16 as --grad-comm says) on the
// context's stream, without a host synchronisation. NCCL is bootstrapped at
// the first all-reduce (which every rank reaches at the same step): rank 0's
// ncclGetUniqueId broadcast over MPI, then ncclCommInitRank on the device
// the context made current. libnccl.so.2 is opened at run time (as cuBLASLt
// and cuDNN are): a program starts, and runs on the CPU, without it.
//
// Hangs: NCCL's collectives do not time out. A watchdog thread polls an
// event recorded after each all-reduce and NCCL's asynchronous error; an
// all-reduce not done AMPRT_COMM_TIMEOUT seconds (300 by default) after it
// was queued, or an asynchronous error, aborts the communicator and ends the
// job with a message (the rank exits; mpirun then stops every rank). Under a CUDA
// graph (--cuda-graph) the launches are the graph's: only NCCL's errors are
// watched there.
//
//===----------------------------------------------------------------------===//
#include "common/check.h"
#include "host/context.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

extern "C" amprt_status amprt_mpi_comm_init(int *argc, char ***argv, amprt_comm **out);

namespace {

#define failComm(...) amprt::fail(AMPRT_ERR_COMM, __VA_ARGS__)

// clang-format off
#define AMP_NCCL_FUNCTIONS(X)                                                                      \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclAllReduce)                        \
  X(ncclCommGetAsyncError) X(ncclCommAbort) X(ncclCommDestroy) X(ncclGetErrorString)
// clang-format on
struct NcclApi {
#define AMP_NCCL_FN(f) decltype(&::f) f = nullptr;
  AMP_NCCL_FUNCTIONS(AMP_NCCL_FN)
#undef AMP_NCCL_FN
};

struct Pending {
  cudaEvent_t done;
  std::chrono::steady_clock::time_point queued;
};

struct State {
  amprt_comm host; // the MPI back-end's
  NcclApi api;
  ncclComm_t comm = nullptr;
  int device = -1;
  std::mutex m; // guards pending, free
  std::deque<Pending> pending;
  std::deque<cudaEvent_t> free;
  std::atomic<bool> stop{false};
  bool watching = false;
} g_state;

amprt_comm g_comm;

/// libnccl.so.2 from the loader's path (LD_LIBRARY_PATH, a wheel's folder),
/// else this build's NCCL folder or the toolkit's.
amprt_status loadNccl(NcclApi &api) {
  std::string why;
  void *h = nullptr;
  for (std::string path : {std::string("libnccl.so.2"),
#ifdef AMPRT_NCCL_LIB_DIR
                           std::string(AMPRT_NCCL_LIB_DIR) + "/libnccl.so.2",
#endif
                           std::string("/usr/local/cuda/lib64/libnccl.so.2")}) {
    if ((h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)))
      break;
    if (const char *e = dlerror(); why.empty() && e)
      why = e;
  }
  if (!h)
    return failComm("NCCL (libnccl.so.2) not found: %s (set LD_LIBRARY_PATH)", why.c_str());
#define AMP_NCCL_LOAD(f)                                                                           \
  if (!(api.f = reinterpret_cast<decltype(api.f)>(dlsym(h, #f))))                                  \
    return failComm("libnccl.so.2 has no %s", #f);
  AMP_NCCL_FUNCTIONS(AMP_NCCL_LOAD)
#undef AMP_NCCL_LOAD
  return AMPRT_OK;
}

[[noreturn]] void endJob(const char *what) {
  State &s = g_state;
  std::fprintf(stderr, "error: rank %d of %d: %s\n", g_comm.rank, g_comm.size, what);
  std::fflush(stderr);
  if (s.comm)
    s.api.ncclCommAbort(s.comm);
  // Not MPI_Abort from this thread (MPI was started for one thread): a rank
  // that exits without MPI_Finalize makes mpirun stop every other rank.
  std::_Exit(1);
}

/// The watchdog: the oldest all-reduce not done in time, or an error NCCL
/// found on its own threads, ends the job.
void watch() {
  State &s = g_state;
  cudaSetDevice(s.device);
  const double limit = amprt::commTimeoutSeconds();
  while (!s.stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(s.m); // finalize destroys the communicator under it
    if (s.stop.load() || !s.comm)
      return;
    ncclResult_t async = ncclSuccess;
    if (s.api.ncclCommGetAsyncError(s.comm, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
      std::string msg = std::string("NCCL failed during the gradient all-reduce: ") +
                        s.api.ncclGetErrorString(async);
      endJob(msg.c_str());
    }
    while (!s.pending.empty()) {
      Pending &p = s.pending.front();
      cudaError_t q = cudaEventQuery(p.done);
      if (q == cudaSuccess) {
        s.free.push_back(p.done);
        s.pending.pop_front();
        continue;
      }
      if (q != cudaErrorNotReady) {
        std::string msg = std::string("the GPU failed (found by the all-reduce watchdog): ") +
                          cudaGetErrorString(q);
        endJob(msg.c_str());
      }
      double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - p.queued).count();
      if (waited > limit) {
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "the gradient all-reduce (NCCL) waited %.0f s for the other ranks "
                      "(AMPRT_COMM_TIMEOUT): a rank failed or stopped",
                      waited);
        endJob(msg);
      }
      break;
    }
  }
}

/// NCCL's communicator, made by the first all-reduce (collective).
amprt_status bootstrap(State &s) {
  if (s.comm)
    return AMPRT_OK;
  if (amprt_status st = loadNccl(s.api))
    return st;
  if (cudaGetDevice(&s.device) != cudaSuccess)
    return failComm("rank %d: NCCL: no current CUDA device", g_comm.rank);
  ncclUniqueId id{};
  if (g_comm.rank == 0) {
    ncclResult_t r = s.api.ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      return failComm("rank 0: ncclGetUniqueId: %s", s.api.ncclGetErrorString(r));
  }
  if (amprt_status st = s.host.broadcast(&s.host, &id, sizeof id, 0))
    return st;
  ncclResult_t r = s.api.ncclCommInitRank(&s.comm, g_comm.size, id, g_comm.rank);
  if (r != ncclSuccess) {
    s.comm = nullptr;
    return failComm("rank %d: ncclCommInitRank (%d ranks, CUDA device %d): %s", g_comm.rank,
                    g_comm.size, s.device, s.api.ncclGetErrorString(r));
  }
  s.watching = true;
  std::thread(watch).detach();
  return AMPRT_OK;
}

amprt_status sumDevice(amprt_comm *c, void *data, int64_t count, int32_t dtype, void *stream) {
  State &s = g_state;
  if (amprt_status st = bootstrap(s))
    return st;
  ncclDataType_t type = dtype == AMPRT_F32    ? ncclFloat32
                        : dtype == AMPRT_BF16 ? ncclBfloat16
                        : dtype == AMPRT_F16  ? ncclFloat16
                                              : ncclNumTypes;
  if (type == ncclNumTypes)
    return failComm("rank %d: NCCL all-reduce of dtype %d", c->rank, dtype);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  ncclResult_t r = s.api.ncclAllReduce(data, data, (size_t)count, type, ncclSum, s.comm, st);
  if (r != ncclSuccess)
    return failComm("rank %d: ncclAllReduce (%lld values): %s", c->rank, (long long)count,
                    s.api.ncclGetErrorString(r));
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(st, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone)
    return AMPRT_OK; // a graph's launches: not watched per call
  std::lock_guard<std::mutex> lock(s.m);
  cudaEvent_t ev;
  if (!s.free.empty()) {
    ev = s.free.front();
    s.free.pop_front();
  } else if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
    return failComm("rank %d: cudaEventCreate for the all-reduce watchdog failed", c->rank);
  }
  if (cudaEventRecord(ev, st) != cudaSuccess)
    return failComm("rank %d: cudaEventRecord after the all-reduce failed", c->rank);
  s.pending.push_back({ev, std::chrono::steady_clock::now()});
  return AMPRT_OK;
}

void finalize(amprt_comm *) {
  State &s = g_state;
  if (s.comm) {
    std::lock_guard<std::mutex> lock(s.m); // the watchdog is not inside a check
    s.stop.store(true);
    s.api.ncclCommDestroy(s.comm);
    s.comm = nullptr;
  }
  s.host.finalize(&s.host);
}

} // namespace

/// MPI's communicator with NCCL's device all-reduce.
extern "C" amprt_status amprt_nccl_comm_init(int *argc, char ***argv, amprt_comm **out) {
  amprt_comm *host = nullptr;
  if (amprt_status st = amprt_mpi_comm_init(argc, argv, &host))
    return st;
  g_state.host = *host;
  g_comm = *host;
  g_comm.impl = &g_state;
  g_comm.sum_device = sumDevice;
  g_comm.finalize = finalize;
  *out = &g_comm;
  return AMPRT_OK;
}
