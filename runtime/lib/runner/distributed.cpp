//===- distributed.cpp - the job across data-parallel ranks -----------------===//
//
// A data-parallel program (amp-compile --data-parallel) runs as N ranks
// under mpirun: during the set-up a failing rank stops every rank with its
// message, and the ranks check that they run the same program with the
// same options on the same data (agreeOk); during training a failing rank
// ends the job.
//
//===----------------------------------------------------------------------===//

#include "runner.h"

#include <cstdlib>

// libamprt_mpi (amp-compile --data-parallel links it): the job's communicator.
extern "C" amprt_status amprt_mpi_comm_init(int *argc, char ***argv, amprt_comm **out)
    __attribute__((weak));
// libamprt_nccl (--data-parallel --device cuda): MPI's, with NCCL's device
// all-reduce.
extern "C" amprt_status amprt_nccl_comm_init(int *argc, char ***argv, amprt_comm **out)
    __attribute__((weak));

namespace amprt::runner {

amprt_comm *g_comm = nullptr;

namespace {
bool g_agreeing = false; // the set-up: a failing rank stops every rank, with its message

void agree(const std::string &err, uint64_t hash);

[[noreturn]] void agreeFailed(const std::string &msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  std::fflush(stderr);
  g_comm->finalize(g_comm);
  std::exit(1);
}

void agree(const std::string &err, uint64_t hash) {
  g_agreeing = false; // errors from here on end the job
  amprt_comm *c = g_comm;
  auto commDie = [&]() {
    std::fprintf(stderr, "error: %s\n", amprt_last_error());
    std::fflush(stderr);
    c->abort(c, 1);
  };
  // The lowest failing rank speaks; the signatures' max and min must meet.
  int64_t h = (int64_t)(hash >> 1);
  int64_t v[3] = {err.empty() ? 0 : c->size - c->rank, h, -h};
  if (c->max_i64(c, v, 3) != AMPRT_OK)
    commDie();
  if (v[0] > 0) {
    int32_t who = (int32_t)(c->size - v[0]);
    std::string m = c->rank == who ? err : std::string();
    int64_t len = (int64_t)m.size();
    if (c->broadcast(c, &len, sizeof len, who) != AMPRT_OK)
      commDie();
    m.resize((size_t)len);
    if (len && c->broadcast(c, m.data(), len, who) != AMPRT_OK)
      commDie();
    agreeFailed(c->rank == who
                    ? "rank " + std::to_string(who) + " of " + std::to_string(c->size) + ": " + m
                    : "rank " + std::to_string(who) + " of " + std::to_string(c->size) +
                          " stopped the job: " + m);
  }
  if (v[1] != -v[2])
    agreeFailed("rank " + std::to_string(c->rank) + " of " + std::to_string(c->size) +
                ": the ranks do not run the same program with the same options on the same data "
                "(their signatures differ): start every rank with the same program, weights, "
                "data and flags");
  if (!err.empty()) // (a failing rank always has v[0] > 0)
    agreeFailed(err);
}

} // namespace

void startJob(int *argc, char ***argv) {
  if (amprt_nccl_comm_init || amprt_mpi_comm_init) {
    if ((amprt_nccl_comm_init ? amprt_nccl_comm_init : amprt_mpi_comm_init)(argc, argv, &g_comm) !=
        AMPRT_OK)
      die(amprt_last_error());
    g_agreeing = true;
  }
}

[[noreturn]] void die(const std::string &msg) {
  if (g_comm && g_comm->size > 1) {
    if (g_agreeing) {
      agree(msg, 0); // (says msg on every rank and exits)
      std::exit(1);
    }
    // During training: the job ends (mpirun stops every rank).
    std::fprintf(stderr, "error: rank %d of %d: %s\n", g_comm->rank, g_comm->size, msg.c_str());
    std::fflush(stderr);
    g_comm->abort(g_comm, 1);
  }
  std::fprintf(stderr, "%s\n", ("error: " + msg).c_str());
  std::exit(1);
}

bool rank0() { return !g_comm || g_comm->rank == 0; }

bool perRank(std::string &path) {
  size_t at = path.find("{rank}");
  if (at == std::string::npos)
    return false;
  path.replace(at, 6, std::to_string(g_comm ? g_comm->rank : 0));
  return true;
}

void agreeOk(uint64_t hash) {
  if (g_comm && g_comm->size > 1)
    agree("", hash);
  g_agreeing = false;
}

uint64_t mixHash(uint64_t h, const std::string &s) {
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ULL;
  }
  h ^= 0xff;
  return h * 0x100000001b3ULL;
}

} // namespace amprt::runner
