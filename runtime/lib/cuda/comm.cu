//===- comm.cu - amp.all_reduce on a CUDA context ---------------------------===//
//
// The data-parallel gradient all-reduce (AMPRT_OP_ALL_REDUCE) on a CUDA
// context, the device twin of amprt_all_reduce (../cpu/context.cpp): the n
// gradients are packed into one contiguous buffer of the travelling type
// (f32, or bf16 / f16 pre-divided by the ranks: --grad-comm), summed in
// place by the communicator, and unpacked to the f32 results (divided by
// the ranks after an f32 sum), all on the context's stream: no host
// synchronisation. The sum is the NCCL back-end's (libamprt_nccl:
// amprt_comm.sum_device, on device memory, run on one rank too); an
// emulated context (host memory) uses the host back-end's (MPI) sums, so
// the executor's path runs under mpirun without a GPU.
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"
#include "host/context.h"

using namespace amprt;
using namespace amprt::desc;

namespace amprt::cuda {

namespace {

/// buf[at + i] = x[i] * scale, rounded to the buffer's type.
struct PackF {
  View x;
  void *buf;
  int32_t bt;
  int64_t at;
  float scale;
  HD void operator()(int64_t i) const {
    stF(buf, bt, at + i, ldF(x.data, x.dtype, x.at(i)) * scale);
  }
};

/// y[i] (f32) = buf[at + i] * scale.
struct UnpackF {
  const void *buf;
  int32_t bt;
  int64_t at;
  float scale;
  View y;
  HD void operator()(int64_t i) const {
    stF(y.data, y.dtype, y.at(i), ldF(buf, bt, at + i) * scale);
  }
};

} // namespace

int32_t execAllReduce(amprt_context *ctx, Dev &d, Decoded &dd) {
  attrs::all_reduce a;
  AMPRT_CHECK(read(dd, a));
  std::vector<amprt_tensor> &t = dd.t;
  const int64_t n = a.n;
  if ((int64_t)t.size() != 2 * n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): all_reduce: %lld tensors for %lld",
                (long long)t.size(), (long long)n);
  int64_t total = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (!floatType(t[k].dtype) || t[n + k].dtype != AMPRT_F32 || numel(t[k]) != numel(t[n + k]))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): all_reduce: tensor %lld: a float input and an f32 output "
                  "of its size needed",
                  (long long)k);
    total += numel(t[k]);
  }
  amprt_comm *comm = ctx->comm;
  // NCCL: even on one rank; emulated (host memory), the host sums.
  const bool onDevice = comm && comm->sum_device && !d.emulate;
  const bool collective = onDevice || (comm && comm->size > 1);
  if (collective && !onDevice && !d.emulate)
    return fail(AMPRT_ERR_UNSUPPORTED,
                "amprt_exec (cuda): all_reduce: this communicator sums host memory only; data "
                "parallel on a CUDA device needs the NCCL back-end (amp-compile --data-parallel "
                "--device cuda links it)");
  const int32_t bt = collective ? ctx->commDtype : AMPRT_F32;
  if (collective && bt != AMPRT_F32 && !onDevice && !comm->sum_half)
    return fail(
        AMPRT_ERR_UNSUPPORTED,
        "amprt_exec (cuda): all_reduce: this communicator has no 2-byte sums (--grad-comm)");
  const float inv = 1.0f / (float)(comm ? comm->size : 1);
  // Pre-divided where the sum is in two bytes (no overflow before the
  // mean's), divided after an f32 sum (the CPU runtime's order).
  const float pre = a.mean && collective && bt != AMPRT_F32 ? inv : 1.0f;
  const float post = a.mean && collective && bt == AMPRT_F32 ? inv : 1.0f;
  void *buf = nullptr;
  AMPRT_CHECK(scratch(
      d, 13, (size_t)std::max<int64_t>(total, 1) * amprt_dtype_size((amprt_dtype)bt), &buf));
  int64_t at = 0;
  for (int64_t k = 0; k < n; ++k) {
    AMPRT_CHECK(each(&d, numel(t[k]), PackF{viewOf(t[k]), buf, bt, at, pre}, "all_reduce (pack)"));
    at += numel(t[k]);
  }
  if (onDevice) {
    if (comm->sum_device(comm, buf, total, bt, d.stream) != AMPRT_OK)
      return AMPRT_ERR_COMM; // the back-end's message stands
  } else if (collective) {
    // Emulated: the buffer is host memory, and the kernels before ran.
    amprt_status s = bt == AMPRT_F32
                         ? comm->sum_f32(comm, static_cast<float *>(buf), total)
                         : comm->sum_half(comm, static_cast<uint16_t *>(buf), total, bt);
    if (s != AMPRT_OK)
      return AMPRT_ERR_COMM;
  }
  at = 0;
  for (int64_t k = 0; k < n; ++k) {
    AMPRT_CHECK(
        each(&d, numel(t[k]), UnpackF{buf, bt, at, post, viewOf(t[n + k])}, "all_reduce (unpack)"));
    at += numel(t[k]);
  }
  return AMPRT_OK;
}

} // namespace amprt::cuda
