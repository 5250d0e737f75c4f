//===- runner.h - the parts of the training programs' main() ----*- C++ -*-===//
//
// main() (main.cpp) is a screen over these parts: the options
// (options.cpp), the job across data-parallel ranks (distributed.cpp), the
// program and its buffers (program.cpp), the data set cut into batches
// (data.cpp), checkpoints and resuming (resume.cpp) and the training loop
// (loop.cpp). Every part ends the run through die(): one message naming the
// culprit and exit code 1.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_RUNNER_RUNNER_H
#define AMPRT_RUNNER_RUNNER_H

#include "amprt/amprt.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

/// The step the compiler emitted (amp-compile's object file).
extern "C" int32_t amp_entry(amprt_context *ctx, void *arena, void **args, void **results);

namespace amprt::runner {

//===-- options.cpp ------------------------------------------------------===//

struct Options {
  std::string inputs, outputs, weights, nanCheck = "warn", data, metrics, checkpointDir, device,
                                        gradComm;
  int64_t steps = -1, printEvery = 0, checkpointEvery = 0, syncEvery = 32, seed = -1;
  bool resume = false, cudaGraph = false;
  // Data parallel: whether --outputs / --metrics name a file per rank.
  bool outputsPerRank = false, metricsPerRank = false;
};

/// The command line (--help prints the usage and exits 0); each rank's file
/// names resolved (perRank).
Options parseOptions(int argc, char **argv);

//===-- distributed.cpp --------------------------------------------------===//

/// Data parallel: this job (null: one process).
extern amprt_comm *g_comm;

/// Joins the data-parallel job where the program was linked with a
/// communicator (libamprt_mpi / libamprt_nccl); until agreeOk, a failing
/// rank stops every rank with its message.
void startJob(int *argc, char ***argv);
/// Ends the run with "error: msg" (data parallel: on every rank).
[[noreturn]] void die(const std::string &msg);
bool rank0();
/// Data parallel: "{rank}" in a file name becomes this rank's number (each
/// rank its own file). Returns whether the name had it.
bool perRank(std::string &path);
/// The end of the set-up of a data-parallel job, on every rank: whether a
/// rank failed (its message, said by every rank) and whether they all run
/// the same program on the same data (`hash`). Returns only when all is well.
void agreeOk(uint64_t hash);
/// FNV-1a, for the job's signature.
uint64_t mixHash(uint64_t h, const std::string &s);

//===-- program.cpp ------------------------------------------------------===//

/// A tensor of the program's signature, with its host memory.
struct Slot {
  std::string kind, name;
  amprt_dtype dtype;
  std::vector<int64_t> shape;
  std::vector<char> data;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

/// The program read from its weights file, on its device: the signature's
/// tensors, the context and the arena, and the buffers the step reads (ap)
/// and writes (rp): the slots' host memory, or device memory mirrored by
/// them.
struct Program {
  std::string sigString, trainingString;
  bool training = false, dataParallel = false;
  std::vector<Slot> args, results;
  amprt_context *ctx = nullptr;
  amprt_arena *arena = nullptr;
  bool onHost = true;
  std::vector<void *> ap, rp, owned;
  /// Per result: the argument whose buffer it is written into (an in-place
  /// state result), or -1.
  std::vector<int64_t> inplaceArg;
  int64_t ranks = 1, rank = 0;
  uint64_t jobHash = 0;

  /// A buffer for s on the device (s's own memory on the host).
  void *deviceBuffer(Slot &s);
  void upload(Slot &s, void *dst);
  void download(Slot &s, const void *src);
  /// One step on the buffers the step reads and writes.
  int32_t step() { return amp_entry(ctx, amprt_arena_base(arena), ap.data(), rp.data()); }
  /// The host copy of the results (rp's, downloaded).
  std::vector<void *> resultsOnHost();
  /// Frees the device, the context and the job.
  void finish();
};

/// Reads the weights file and its signature, checks the options against
/// the program, makes the context, the arena and the buffers.
void loadProgram(Options &o, Program &p);
/// One step on --inputs, its results into --outputs.
int runOnce(Program &p, const Options &o);
void writeOutputs(const std::string &path, std::vector<Slot> &results,
                  const std::vector<void *> &rp);

/// The value of a scalar result as a double (0 when absent).
double scalarOf(const Slot *s);
/// NaN / inf in an input: a warning, or an error with --nan-check=error.
void checkFinite(const Slot &s, const std::string &what, const std::string &nanCheck);
/// State read from a file (the parameters of the .weights file, every
/// tensor of a --resume checkpoint) must be finite: a NaN there is a
/// corrupted or diverged file, and every step from it would be NaN. An
/// error naming the tensor unless --nan-check=off.
void checkStateFinite(const void *data, amprt_dtype dtype, int64_t numel, const std::string &what,
                      const std::string &nanCheck);
/// "'a', 'b'" for the arrays of z.
std::string arrayNames(const amprt_npz *z);

/// Warns about the arrays of `z` that no argument of kind `kind` takes (a
/// misspelt name, most likely): said, not silently dropped. `feeds(s)`:
/// whether the file feeds slot s.
template <class Feeds>
void warnUnusedArrays(const amprt_npz *z, const std::vector<Slot> &args, const std::string &file,
                      Feeds feeds) {
  std::string unused, names;
  for (const Slot &s : args)
    if (feeds(s))
      names += (names.empty() ? "" : ", ") + s.name;
  for (int32_t i = 0; i < amprt_npz_count(z); ++i) {
    std::string n = amprt_npz_name(z, i);
    bool used = false;
    for (const Slot &s : args)
      used |= feeds(s) && s.name == n;
    if (!used)
      unused += (unused.empty() ? "'" : ", '") + n + "'";
  }
  if (!unused.empty())
    std::fprintf(stderr,
                 "warning: %s in '%s' is no input of the program (its inputs: %s); ignored\n",
                 unused.c_str(), file.c_str(), names.empty() ? "none" : names.c_str());
}

//===-- data.cpp ---------------------------------------------------------===//

/// An input fed from the data set.
struct Feed {
  size_t arg;
  const amprt_array *array;
  int64_t rowBytes;
  char *device = nullptr;  // the whole array, converted, on the device
  char *staging = nullptr; // --cuda-graph: the batch's fixed buffer
};

/// --data: every input's array, cut into full batches.
struct Data {
  amprt_npz *npz = nullptr;
  std::vector<Feed> feeds;
  int64_t batches = 1;
};

/// Opens --data and checks each input's array against the program (the
/// job's hash gains their shapes); on a device, every batch is copied there
/// once.
void openData(Program &p, const Options &o, Data &d);
/// Batch b into the step's input buffers.
void feedBatch(Program &p, const Data &d, int64_t b);

//===-- resume.cpp -------------------------------------------------------===//

/// (argument, result): result "new:<name>" feeds argument <name> of the
/// next step.
using Carry = std::vector<std::pair<size_t, size_t>>;

/// Where the run stands: the checkpoint file, the steps done before this
/// run, the skipped steps so far.
struct RunState {
  std::string ckFile;
  int64_t start = 0, skipped = 0;
};

/// Makes the checkpoint folder (rank 0), and with --resume reads the state
/// and the counters (data parallel: rank 0's, on every rank).
void resumeRun(Program &p, const Options &o, const Carry &carry, RunState &rs);
/// Writes the state and the counters after `done` steps (rank 0).
void saveCheckpoint(Program &p, const Carry &carry, const RunState &rs, int64_t done);
/// Keeps the metrics lines of steps <= upTo (a resumed run repeats the
/// steps after its checkpoint). Temporary file + rename.
void truncateMetrics(const std::string &path, int64_t upTo);

//===-- loop.cpp ---------------------------------------------------------===//

/// --data and --steps: the training loop, the metrics, the checkpoints and
/// the last step's --outputs.
int trainLoop(Program &p, const Options &o);

} // namespace amprt::runner

#endif // AMPRT_RUNNER_RUNNER_H
