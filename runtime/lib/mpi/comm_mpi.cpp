//===- comm_mpi.cpp - the data-parallel communicator on MPI ---------------===//
//
// libamprt_mpi: amprt_comm (amprt.h) on MPI (OpenMPI 4.1 here), for the
// programs amp-compile --data-parallel writes. Sums are a reduction to rank
// 0 then a broadcast: every rank gets the same bits (an all-reduce may add
// in a different order on each rank). Every collective is non-blocking and
// polled against a deadline (AMPRT_COMM_TIMEOUT seconds, 300 by default): a
// rank that never joins (it failed, it hangs) makes the others fail with a
// message instead of waiting forever. Gradients travel in f32, or in bf16 /
// f16 (--grad-comm) summed by an MPI user reduction that rounds each sum.
//
//===----------------------------------------------------------------------===//

#include "common/check.h"
#include "common/convert_bits.h"
#include "cpu/reduce/reduce.h"
#include "host/context.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <sched.h>
#include <utility>

namespace {

#define failComm(...) amprt::fail(AMPRT_ERR_COMM, __VA_ARGS__)

/// Waits for `req`, polling, until the deadline.
amprt_status waitFor(amprt_comm *c, MPI_Request &req, const char *what) {
  auto start = std::chrono::steady_clock::now();
  double limit = amprt::commTimeoutSeconds();
  int done = 0, spins = 0;
  while (true) {
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return failComm("rank %d: MPI %s failed", c->rank, what);
    if (done)
      return AMPRT_OK;
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // OpenMPI's non-blocking collectives move only inside MPI_Test (a large
    // buffer is many segments, each a call): a sleep per call would cost
    // its length per segment (2 ranks, 0.5 MB: 10 ms a step). So: spin,
    // then yield the core (to a rank that shares it) for the first 20 ms,
    // and only then sleep between the calls (a rank that is late, or gone).
    if (++spins > 1000) {
      if (waited < 0.02)
        sched_yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (waited > limit)
      return failComm("rank %d of %d: the %s waited %.0f s for the other ranks "
                      "(AMPRT_COMM_TIMEOUT): a rank failed or stopped",
                      c->rank, c->size, what, waited);
  }
}

template <class T>
amprt_status sumTo0ThenBroadcast(amprt_comm *c, T *data, int64_t count, MPI_Datatype type,
                                 const char *what, MPI_Op op = MPI_SUM) {
  // MPI counts are int: large buffers go in pieces.
  const int64_t piece = 1 << 28;
  for (int64_t at = 0; at < count; at += piece) {
    int n = (int)std::min(piece, count - at);
    MPI_Request r;
    void *send = c->rank == 0 ? MPI_IN_PLACE : (void *)(data + at);
    if (MPI_Ireduce(send, data + at, n, type, op, 0, MPI_COMM_WORLD, &r) != MPI_SUCCESS)
      return failComm("rank %d: MPI_Ireduce (%s) failed", c->rank, what);
    if (amprt_status s = waitFor(c, r, what))
      return s;
    if (MPI_Ibcast(data + at, n, type, 0, MPI_COMM_WORLD, &r) != MPI_SUCCESS)
      return failComm("rank %d: MPI_Ibcast (%s) failed", c->rank, what);
    if (amprt_status s = waitFor(c, r, what))
      return s;
  }
  return AMPRT_OK;
}

amprt_status sumF32(amprt_comm *c, float *data, int64_t count) {
  return sumTo0ThenBroadcast(c, data, count, MPI_FLOAT, "gradient all-reduce");
}

amprt_status sumF64(amprt_comm *c, double *data, int64_t count) {
  return sumTo0ThenBroadcast(c, data, count, MPI_DOUBLE, "sum");
}

/// MPI's user reductions for 2-byte floats: each sum in f32 (exact for two
/// bf16 / f16 values, or rounded once: f32's 24 bits are over twice theirs
/// plus two), rounded to the type.
template <uint16_t (*Round)(uint32_t), uint32_t (*Widen)(uint16_t)>
void sumHalves(void *in, void *inout, int *len, MPI_Datatype *) {
  const uint16_t *a = static_cast<const uint16_t *>(in);
  uint16_t *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) {
    float x, y, z;
    uint32_t ax = Widen(a[i]), bx = Widen(b[i]), zx;
    std::memcpy(&x, &ax, 4);
    std::memcpy(&y, &bx, 4);
    z = x + y;
    std::memcpy(&zx, &z, 4);
    b[i] = Round(zx);
  }
}

MPI_Op g_sumBf16 = MPI_OP_NULL, g_sumF16 = MPI_OP_NULL;

amprt_status sumHalf(amprt_comm *c, uint16_t *data, int64_t count, int32_t dtype) {
  if (dtype != AMPRT_BF16 && dtype != AMPRT_F16)
    return failComm("rank %d: a 2-byte sum of dtype %d", c->rank, dtype);
  return sumTo0ThenBroadcast(c, data, count, MPI_UINT16_T, "gradient all-reduce",
                             dtype == AMPRT_BF16 ? g_sumBf16 : g_sumF16);
}

amprt_status maxI64(amprt_comm *c, int64_t *data, int64_t count) {
  if (count > (1 << 30))
    return failComm("rank %d: max of %lld values: too many", c->rank, (long long)count);
  MPI_Request r;
  if (MPI_Iallreduce(MPI_IN_PLACE, data, (int)count, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD, &r) !=
      MPI_SUCCESS)
    return failComm("rank %d: MPI_Iallreduce (max) failed", c->rank);
  return waitFor(c, r, "agreement");
}

amprt_status broadcast(amprt_comm *c, void *data, int64_t bytes, int32_t root) {
  const int64_t piece = 1 << 30;
  for (int64_t at = 0; at < bytes; at += piece) {
    MPI_Request r;
    int n = (int)std::min(piece, bytes - at);
    if (MPI_Ibcast(static_cast<char *>(data) + at, n, MPI_BYTE, root, MPI_COMM_WORLD, &r) !=
        MPI_SUCCESS)
      return failComm("rank %d: MPI_Ibcast failed", c->rank);
    if (amprt_status s = waitFor(c, r, "broadcast"))
      return s;
  }
  return AMPRT_OK;
}

void abortJob(amprt_comm *, int32_t code) { MPI_Abort(MPI_COMM_WORLD, code); }

void finalize(amprt_comm *) {
  int done = 0;
  MPI_Finalized(&done);
  if (done)
    return;
  for (MPI_Op *op : {&g_sumBf16, &g_sumF16})
    if (*op != MPI_OP_NULL)
      MPI_Op_free(op);
  MPI_Finalize();
}

amprt_comm g_comm;

} // namespace

/// Starts MPI (once) and fills in the communicator of MPI_COMM_WORLD.
extern "C" amprt_status amprt_mpi_comm_init(int *argc, char ***argv, amprt_comm **out) {
  int started = 0;
  MPI_Initialized(&started);
  if (!started && MPI_Init(argc, argv) != MPI_SUCCESS)
    return failComm("MPI_Init failed");
  int rank = 0, size = 1, localRank = 0, localSize = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm local;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(local, &localRank);
    MPI_Comm_size(local, &localSize);
    MPI_Comm_free(&local);
  }
  // The launchers' variables (torchrun, DeepSpeed): where set, they must
  // be MPI's (a job of processes each started alone is N jobs of one rank).
  for (auto [name, mine] : {std::pair<const char *, int>{"WORLD_SIZE", size},
                            {"RANK", rank},
                            {"LOCAL_RANK", localRank}}) {
    const char *v = std::getenv(name);
    if (v && *v && std::strtol(v, nullptr, 10) != mine)
      return failComm("%s=%s, but MPI started this process as rank %d of %d (%d on this "
                      "machine): start data-parallel programs with mpirun -np N (a launcher "
                      "that starts each process alone, as torchrun does, makes N jobs of one "
                      "rank)",
                      name, v, rank, size, localRank);
  }
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(localRank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(localSize).c_str(), 1);
  if (g_sumBf16 == MPI_OP_NULL &&
      (MPI_Op_create(sumHalves<amprt::bits::f32ToBf16, amprt::bits::bf16ToF32>, 1, &g_sumBf16) !=
           MPI_SUCCESS ||
       MPI_Op_create(sumHalves<amprt::bits::f32ToF16, amprt::bits::f16ToF32>, 1, &g_sumF16) !=
           MPI_SUCCESS))
    return failComm("MPI_Op_create failed");
  g_comm = amprt_comm{rank,   size,      localRank, localSize, nullptr, sumF32, sumF64,
                      maxI64, broadcast, abortJob,  finalize,  sumHalf, nullptr};
  *out = &g_comm;
  return AMPRT_OK;
}
