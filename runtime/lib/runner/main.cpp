//===- main.cpp - the main() of programs written by amp-compile -----------===//
//
//   ./prog --inputs in.npz --outputs out.npz [--weights prog.weights]
//          [--nan-check warn|error|off] [--device cpu|cuda[:N]]
//
// A training step (amp-compile --optimizer ...) also runs in a loop:
//
//   ./train --data data.npz --steps N [--metrics m.jsonl] [--checkpoint-dir D]
//           [--resume] [--print-every K] [--checkpoint-every K] [--outputs last.npz]
//
// Each step feeds the next full batch of every input (the arrays of data.npz
// named like the inputs, cut into batches of the program's batch size, in
// order, starting again after the last), runs the step, and makes each
// `new:<name>` result the next step's `<name>` argument (parameters,
// optimizer moments, the loss scale and its trackers). --steps counts all
// steps of the run, so `--resume` continues an interrupted run to N. The
// checkpoint (D/checkpoint.safetensors) holds every state tensor and, in its
// metadata, the step, the skipped-step count and the dropout generator's
// state (amp.rng_state), so a resumed run draws the masks it would have
// drawn. --seed N seeds the generator (dropout's masks; a fixed default
// state without it).
//
// --device: where the program runs; by default where it was compiled for
// (amp.device in the weights' metadata; amp-compile --device cuda). On a
// CUDA device the parameters, the state, the arena and the whole data set
// live in device memory; a step is a sequence of asynchronous launches and
// the loop reads the loss, the scale and found_inf back only every
// --sync-every steps (32 by default; at print and checkpoint steps too): no
// host synchronisation inside a step, one per block of steps. The metrics
// then give each step of a block the block's mean time. --cuda-graph: after
// the first step, the step is captured as a CUDA graph (two: the state
// buffers alternate) and each step is one graph launch; the batch is copied
// into a fixed buffer first.
//
// Links with the object amp-compile emits (which defines amp_entry) and
// libamprt. The weights file beside the program (safetensors) holds the
// parameters and, in its metadata, the program's signature:
//
//   amp.arena_bytes  N
//   amp.signature    one line per argument / result:
//                    "input|param|result|result_inplace <TAB> name <TAB> dtype
//                     <TAB> d0,d1,..."; result_inplace: a state result the
//                    program may write into its argument's buffer (the loop
//                    passes one buffer for both; the others swap per step)
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt.h"
#include "amprt/bounded_spin.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

extern "C" int32_t amp_entry(amprt_context *ctx, void *arena, void **args, void **results);
// libamprt_mpi (amp-compile --data-parallel links it): the job's communicator.
extern "C" amprt_status amprt_mpi_comm_init(int *argc, char ***argv, amprt_comm **out)
    __attribute__((weak));
// libamprt_nccl (--data-parallel --device cuda): MPI's, with NCCL's device
// all-reduce.
extern "C" amprt_status amprt_nccl_comm_init(int *argc, char ***argv, amprt_comm **out)
    __attribute__((weak));

namespace {

amprt_comm *g_comm = nullptr; // data parallel: this job (null: one process)
bool g_agreeing = false;      // the set-up: a failing rank stops every rank, with its message

void agree(const std::string &err, uint64_t hash);

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

/// Data parallel: "{rank}" in a file name becomes this rank's number (each
/// rank its own file). Returns whether the name had it.
bool perRank(std::string &path) {
  size_t at = path.find("{rank}");
  if (at == std::string::npos)
    return false;
  path.replace(at, 6, std::to_string(g_comm ? g_comm->rank : 0));
  return true;
}

/// The end of the set-up of a data-parallel job, on every rank: whether a
/// rank failed (its message, said by every rank) and whether they all run
/// the same program on the same data (`hash`). Returns only when all is well.
void agreeOk(uint64_t hash) {
  if (g_comm && g_comm->size > 1)
    agree("", hash);
  g_agreeing = false;
}

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

/// FNV-1a, for the job's signature.
uint64_t mixHash(uint64_t h, const std::string &s) {
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ULL;
  }
  h ^= 0xff;
  return h * 0x100000001b3ULL;
}

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

amprt_dtype dtypeNamed(const std::string &s) {
  for (int i = 0; i < AMPRT_DTYPE_COUNT; ++i)
    if (s == amprt_dtype_name((amprt_dtype)i))
      return (amprt_dtype)i;
  die("the weights file names an unknown element type '" + s + "'");
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos)
      return out;
    start = at + 1;
  }
}

// The value of a scalar result as a double (0 when absent).
double scalarOf(const Slot *s) {
  if (!s || s->numel() != 1)
    return 0.0;
  const void *p = s->data.data();
  switch (s->dtype) {
  case AMPRT_F32:
    return *static_cast<const float *>(p);
  case AMPRT_F16:
    return amprt_f16_to_f32(*static_cast<const uint16_t *>(p));
  case AMPRT_BF16:
    return amprt_bf16_to_f32(*static_cast<const uint16_t *>(p));
  case AMPRT_I1:
    return *static_cast<const uint8_t *>(p) ? 1.0 : 0.0;
  case AMPRT_I64:
    return (double)*static_cast<const int64_t *>(p);
  case AMPRT_I32:
    return *static_cast<const int32_t *>(p);
  default:
    return 0.0;
  }
}

struct Options {
  std::string inputs, outputs, weights, nanCheck = "warn", data, metrics, checkpointDir, device,
                                        gradComm;
  int64_t steps = -1, printEvery = 0, checkpointEvery = 0, syncEvery = 32, seed = -1;
  bool resume = false, cudaGraph = false;
};

void checkFinite(const Slot &s, const std::string &what, const std::string &nanCheck) {
  int64_t first;
  int64_t bad = amprt_count_nonfinite(s.data.data(), s.dtype, s.numel(), &first);
  if (!bad || nanCheck == "off")
    return;
  std::string msg = what + " holds " + std::to_string(bad) +
                    " NaN / inf value(s), the first at flat index " + std::to_string(first);
  if (nanCheck == "error")
    die(msg + " (--nan-check=error)");
  std::fprintf(stderr, "warning: %s\n", msg.c_str());
}

/// State read from a file (the parameters of the .weights file, every
/// tensor of a --resume checkpoint) must be finite: a NaN there is a
/// corrupted or diverged file, and every step from it would be NaN. An
/// error naming the tensor unless --nan-check=off.
void checkStateFinite(const void *data, amprt_dtype dtype, int64_t numel, const std::string &what,
                      const std::string &nanCheck) {
  int64_t first;
  int64_t bad = amprt_count_nonfinite(data, dtype, numel, &first);
  if (bad && nanCheck != "off")
    die(what + " holds " + std::to_string(bad) + " NaN / inf value(s), the first at flat index " +
        std::to_string(first) + " (a corrupted or diverged file; --nan-check=off loads it anyway)");
}

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

void writeOutputs(const std::string &path, std::vector<Slot> &results,
                  const std::vector<void *> &rp) {
  std::vector<amprt_array> arrays;
  std::vector<const char *> names;
  std::vector<std::vector<float>> widened(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    Slot &s = results[i];
    amprt_array a{};
    a.data = rp[i];
    a.dtype = s.dtype;
    a.rank = (int32_t)s.shape.size();
    for (size_t d = 0; d < s.shape.size(); ++d)
      a.shape[d] = s.shape[d];
    if (s.dtype == AMPRT_BF16) { // numpy has no bf16
      widened[i].resize(s.numel());
      amprt_convert(rp[i], AMPRT_BF16, widened[i].data(), AMPRT_F32, s.numel());
      a.data = widened[i].data();
      a.dtype = AMPRT_F32;
    }
    arrays.push_back(a);
    names.push_back(s.name.c_str());
  }
  if (amprt_npz_write(path.c_str(), names.data(), arrays.data(), (int32_t)arrays.size()) !=
      AMPRT_OK)
    die(amprt_last_error());
}

// Keeps the metrics lines of steps <= upTo (a resumed run repeats the steps
// after its checkpoint). Temporary file + rename.
void truncateMetrics(const std::string &path, int64_t upTo) {
  std::ifstream in(path);
  if (!in)
    return;
  std::string line, kept;
  while (std::getline(in, line)) {
    size_t at = line.find("\"step\": ");
    if (at == std::string::npos)
      continue;
    if (std::strtoll(line.c_str() + at + 8, nullptr, 10) <= upTo)
      kept += line + "\n";
  }
  in.close();
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    if (!out)
      die("metrics file '" + path + "': cannot rewrite it for --resume");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    die("metrics file '" + path + "': cannot rewrite it for --resume");
}

} // namespace

int main(int argc, char **argv) {
  // An allocation that fails (a data file too large for this machine) ends
  // the run with a message, not an uncaught std::bad_alloc.
  std::set_new_handler([] {
    static const char msg[] = "error: out of memory\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
  });
  if (amprt_nccl_comm_init || amprt_mpi_comm_init) {
    if ((amprt_nccl_comm_init ? amprt_nccl_comm_init : amprt_mpi_comm_init)(&argc, &argv,
                                                                            &g_comm) != AMPRT_OK)
      die(amprt_last_error());
    g_agreeing = true;
  }
  Options o;
  o.weights = std::string(argv[0]) + ".weights";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto is = [&](const char *flag) {
      std::string f = flag;
      return a == f || a.rfind(f + "=", 0) == 0;
    };
    auto value = [&](const char *flag) -> std::string {
      std::string f = flag;
      if (a.rfind(f + "=", 0) == 0)
        return a.substr(f.size() + 1);
      if (a == f && i + 1 < argc)
        return argv[++i];
      die(f + " needs a value");
    };
    auto count = [&](const char *flag, int64_t lo) -> int64_t {
      std::string v = value(flag);
      char *end = nullptr;
      errno = 0;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || errno == ERANGE || n < lo)
        die(std::string(flag) + " needs an integer >= " + std::to_string(lo) + ", got '" + v + "'");
      return n;
    };
    if (is("--inputs"))
      o.inputs = value("--inputs");
    else if (is("--outputs"))
      o.outputs = value("--outputs");
    else if (is("--weights"))
      o.weights = value("--weights");
    else if (is("--nan-check"))
      o.nanCheck = value("--nan-check");
    else if (is("--data"))
      o.data = value("--data");
    else if (is("--steps"))
      o.steps = count("--steps", 1);
    else if (is("--metrics"))
      o.metrics = value("--metrics");
    else if (is("--checkpoint-dir"))
      o.checkpointDir = value("--checkpoint-dir");
    else if (is("--print-every"))
      o.printEvery = count("--print-every", 0);
    else if (is("--checkpoint-every"))
      o.checkpointEvery = count("--checkpoint-every", 0);
    else if (a == "--resume")
      o.resume = true;
    else if (is("--device"))
      o.device = value("--device");
    else if (a == "--cuda-graph")
      o.cudaGraph = true;
    else if (is("--sync-every"))
      o.syncEvery = count("--sync-every", 1);
    else if (is("--seed"))
      o.seed = count("--seed", 0);
    else if (is("--grad-comm"))
      o.gradComm = value("--grad-comm");
    else if (a == "-h" || a == "--help") {
      std::printf("usage: %s --inputs in.npz --outputs out.npz [--weights FILE] "
                  "[--nan-check warn|error|off] [--device cpu|cuda[:N]] [--seed N]\n"
                  "       %s --data data.npz --steps N [--metrics m.jsonl] "
                  "[--checkpoint-dir D] [--resume]\n"
                  "          [--print-every K] [--checkpoint-every K] [--outputs last.npz] "
                  "[--sync-every K] [--cuda-graph] (a training step)\n"
                  "          [--grad-comm f32|bf16|fp16] (--data-parallel, under mpirun)\n",
                  argv[0], argv[0]);
      return 0;
    } else
      die("unknown argument '" + a + "' (see --help)");
  }
  if (o.nanCheck != "warn" && o.nanCheck != "error" && o.nanCheck != "off")
    die("--nan-check must be warn, error or off");
  // --data: the file of every rank; --outputs and --metrics: rank 0's; each
  // rank its own where the name holds {rank}.
  perRank(o.data);
  const bool outputsPerRank = perRank(o.outputs), metricsPerRank = perRank(o.metrics);

  amprt_checkpoint *ck = nullptr;
  if (amprt_checkpoint_open(o.weights.c_str(), &ck) != AMPRT_OK)
    die(std::string(amprt_last_error()) + " (the weights file written beside the program)");
  const char *sigMeta = amprt_checkpoint_metadata(ck, "amp.signature");
  const char *arenaMeta = amprt_checkpoint_metadata(ck, "amp.arena_bytes");
  const char *trainingMeta = amprt_checkpoint_metadata(ck, "amp.training");
  const char *deviceMeta = amprt_checkpoint_metadata(ck, "amp.device");
  const bool dataParallel = amprt_checkpoint_metadata(ck, "amp.data_parallel") != nullptr;
  if (dataParallel && !g_comm)
    die("this program was compiled with --data-parallel but not linked with the MPI back-end "
        "(libamprt_mpi)");
  if (o.device.empty())
    o.device = deviceMeta ? deviceMeta : "cpu";
  // Data parallel on CUDA: rank r of a machine takes its GPU r (cuda:N
  // given, every rank takes N).
  if (dataParallel && g_comm && o.device == "cuda" && g_comm->local_size > 1)
    o.device = "cuda:" + std::to_string(g_comm->local_rank);
  if (!sigMeta || !arenaMeta)
    die("'" + o.weights + "' has no program signature: not written by amp-compile");
  // Copies: the metadata lives as long as the open weights file.
  const std::string sigString = sigMeta, arenaString = arenaMeta,
                    trainingString = trainingMeta ? trainingMeta : "";
  const char *sigText = sigString.c_str(), *arenaText = arenaString.c_str(),
             *trainingText = trainingString.c_str();
  bool training = !trainingString.empty();
  bool loop = !o.data.empty() || o.steps >= 0;
  if (loop && !training)
    die("this program is not a training step (compile the model with amp-compile "
        "--optimizer sgd|adam|adamw); run it with --inputs in.npz --outputs out.npz");
  if (loop && (o.data.empty() || o.steps < 0))
    die("training needs both --data data.npz and --steps N");
  if (loop && !o.inputs.empty())
    die("--inputs runs one step; --data runs the training loop: give one of them");
  if (!loop && (!o.metrics.empty() || !o.checkpointDir.empty() || o.resume || o.printEvery ||
                o.checkpointEvery))
    die("--metrics, --checkpoint-dir, --resume, --print-every and --checkpoint-every go "
        "with --data and --steps");
  if (o.resume && o.checkpointDir.empty())
    die("--resume needs --checkpoint-dir (where the run's checkpoint is)");
  if (!o.gradComm.empty() && o.gradComm != "f32" && o.gradComm != "bf16" && o.gradComm != "fp16")
    die("--grad-comm must be f32, bf16 or fp16 (the type the gradients travel in)");
  if (!o.gradComm.empty() && !dataParallel)
    die("--grad-comm: this program was not compiled with --data-parallel");

  std::vector<Slot> args, results;
  const uint64_t hostMemory = amprt_host_available_bytes();
  uint64_t held = 0;
  for (const std::string &line : split(sigText, '\n')) {
    if (line.empty())
      continue;
    auto f = split(line, '\t');
    if (f.size() != 4)
      die("'" + o.weights + "': malformed signature line '" + line + "'");
    Slot s{f[0], f[1], dtypeNamed(f[2]), {}, {}};
    uint64_t bytes = amprt_dtype_size(s.dtype);
    if (!f[3].empty())
      for (const std::string &d : split(f[3], ',')) {
        char *end = nullptr;
        errno = 0;
        long long v = std::strtoll(d.c_str(), &end, 10);
        if (d.empty() || *end || errno || v < 0 || s.shape.size() >= AMPRT_MAX_RANK)
          die("'" + o.weights + "': bad shape in signature line '" + line + "'");
        s.shape.push_back(v);
        if (__builtin_mul_overflow(bytes, uint64_t(v), &bytes))
          bytes = UINT64_MAX;
      }
    // All of the signature's tensors live in this process at once: one the
    // machine cannot hold is named here, not left to a failing allocation.
    if (bytes > hostMemory || held > hostMemory - bytes)
      die("the " + s.kind + " '" + s.name + "' needs " +
          (bytes == UINT64_MAX ? std::string("more than 2^64") : std::to_string(bytes)) + " bytes" +
          (held ? " on top of " + std::to_string(held) + " for the tensors before it" : "") +
          ", more than this machine's available memory (" + std::to_string(hostMemory) + " bytes)");
    held += bytes;
    s.data.assign(bytes, 0);
    bool result = s.kind == "result" || s.kind == "result_inplace";
    if (!result && s.kind != "input" && s.kind != "param")
      die("'" + o.weights + "': unknown kind '" + s.kind + "' in signature line '" + line + "'");
    (result ? results : args).push_back(std::move(s));
  }
  for (Slot &s : args) {
    if (s.kind != "param")
      continue;
    amprt_tensor t =
        amprt_tensor_make(s.data.data(), s.dtype, (int32_t)s.shape.size(), s.shape.data());
    if (amprt_checkpoint_read(ck, s.name.c_str(), &t) != AMPRT_OK)
      die(amprt_last_error());
    checkStateFinite(s.data.data(), s.dtype, s.numel(),
                     "parameter '" + s.name + "' in '" + o.weights + "'", o.nanCheck);
  }
  amprt_checkpoint_close(ck);

  amprt_context *ctx = nullptr;
  amprt_arena *arena = nullptr;
  if (amprt_context_create(o.device.c_str(), &ctx) != AMPRT_OK)
    die(std::string(amprt_last_error()) + " (--device " + o.device + ")");
  amprt_context_set_comm(ctx, g_comm);
  if (o.gradComm == "bf16" || o.gradComm == "fp16")
    amprt_context_set_comm_dtype(ctx, o.gradComm == "bf16" ? AMPRT_BF16 : AMPRT_F16);
  const int64_t ranks = g_comm ? g_comm->size : 1, rank = g_comm ? g_comm->rank : 0;
  uint64_t jobHash = mixHash(mixHash(mixHash(0xcbf29ce484222325ULL, sigString), trainingString),
                             std::to_string(ranks));
  if (o.seed >= 0) // dropout's masks (a checkpoint's state wins on --resume)
    amprt_context_seed(ctx, (uint64_t)o.seed);
  char *arenaEnd = nullptr;
  errno = 0;
  unsigned long long arenaBytes = std::strtoull(arenaText, &arenaEnd, 10);
  if (!*arenaText || *arenaEnd || errno || arenaText[0] == '-')
    die("'" + o.weights + "': bad amp.arena_bytes '" + arenaText + "'");
  if (amprt_arena_create(ctx, (size_t)arenaBytes, &arena) != AMPRT_OK)
    die(amprt_last_error());
  // ap / rp: the buffers the program reads and writes (the slots' host
  // memory, or device memory mirrored by them).
  const bool onHost = amprt_context_on_host(ctx);
  std::vector<void *> ap, rp, owned;
  auto deviceBuffer = [&](Slot &s) -> void * {
    if (onHost)
      return s.data.data();
    void *p = nullptr;
    if (amprt_device_alloc(ctx, std::max<size_t>(1, s.data.size()), &p) != AMPRT_OK)
      die(amprt_last_error());
    owned.push_back(p);
    return p;
  };
  auto upload = [&](Slot &s, void *dst) {
    if (!onHost && amprt_device_copy(ctx, dst, s.data.data(), s.data.size(), 0) != AMPRT_OK)
      die(amprt_last_error());
  };
  auto download = [&](Slot &s, const void *src) {
    if (!onHost && amprt_device_copy(ctx, s.data.data(), src, s.data.size(), 1) != AMPRT_OK)
      die(amprt_last_error());
  };
  for (Slot &s : args) {
    ap.push_back(deviceBuffer(s));
    if (s.kind == "param")
      upload(s, ap.back());
  }
  for (Slot &s : results)
    rp.push_back(deviceBuffer(s));
  auto finish = [&]() {
    for (void *p : owned)
      amprt_device_free(ctx, p);
    amprt_arena_destroy(arena);
    amprt_context_destroy(ctx);
    if (g_comm)
      g_comm->finalize(g_comm);
  };
  const bool writesOutputs = !o.outputs.empty() && (rank0() || outputsPerRank);

  if (!loop) {
    amprt_npz *in = nullptr;
    bool needInputs = false;
    for (Slot &s : args)
      needInputs |= s.kind == "input";
    if (needInputs) {
      if (o.inputs.empty())
        die("the program has inputs; give them with --inputs file.npz" +
            std::string(training ? " (or train it: --data data.npz --steps N)" : ""));
      if (amprt_npz_open(o.inputs.c_str(), &in) != AMPRT_OK)
        die(amprt_last_error());
    }
    for (Slot &s : args) {
      if (s.kind == "param")
        continue;
      const amprt_array *a = amprt_npz_get(in, s.name.c_str());
      if (!a) {
        std::string have;
        for (int32_t i = 0; i < amprt_npz_count(in); ++i)
          have += (i ? ", " : "") + std::string(amprt_npz_name(in, i));
        die("input '" + s.name + "' is missing from '" + o.inputs +
            "' (it holds: " + (have.empty() ? "nothing" : have) + ")");
      }
      std::string what = "input '" + s.name + "' in '" + o.inputs + "'";
      if (amprt_feed(a, s.dtype, (int32_t)s.shape.size(), s.shape.data(), s.data.data(),
                     what.c_str()) != AMPRT_OK)
        die(amprt_last_error());
      checkFinite(s, "input '" + s.name + "'", o.nanCheck);
      upload(s, ap[&s - args.data()]);
    }
    if (in) {
      warnUnusedArrays(in, args, o.inputs, [](const Slot &s) { return s.kind != "param"; });
      amprt_npz_close(in);
    }
    agreeOk(jobHash);
    if (amp_entry(ctx, amprt_arena_base(arena), ap.data(), rp.data()) != AMPRT_OK ||
        amprt_device_synchronize(ctx) != AMPRT_OK)
      die(amprt_last_error());
    if (writesOutputs) {
      std::vector<void *> host;
      for (size_t r = 0; r < results.size(); ++r) {
        download(results[r], rp[r]);
        host.push_back(onHost ? rp[r] : results[r].data.data());
      }
      writeOutputs(o.outputs, results, host);
    }
    finish();
    return 0;
  }

  //--- The training loop ------------------------------------------------------
  // State: result "new:<name>" feeds argument <name> of the next step.
  std::vector<std::pair<size_t, size_t>> carry; // (arg, result)
  std::map<std::string, size_t> argIndex, resIndex;
  for (size_t i = 0; i < args.size(); ++i)
    argIndex[args[i].name] = i;
  for (size_t i = 0; i < results.size(); ++i)
    resIndex[results[i].name] = i;
  for (size_t r = 0; r < results.size(); ++r) {
    const std::string &n = results[r].name;
    if (n.rfind("new:", 0) != 0)
      continue;
    auto it = argIndex.find(n.substr(4));
    if (it == argIndex.end() || args[it->second].kind != "param")
      die("'" + o.weights + "': result '" + n + "' updates no state argument");
    const Slot &a = args[it->second], &b = results[r];
    if (a.dtype != b.dtype || a.shape != b.shape)
      die("'" + o.weights + "': result '" + n + "' does not match its argument's type");
    carry.push_back({it->second, r});
    // State the step updates in place (the compiler marked it safe): one
    // buffer serves as argument and result.
    if (results[r].kind == "result_inplace") {
      rp[r] = ap[it->second];
      if (onHost)
        std::vector<char>().swap(results[r].data);
    }
  }
  auto resultOf = [&](const char *name) -> const Slot * {
    auto it = resIndex.find(name);
    return it == resIndex.end() ? nullptr : &results[it->second];
  };
  if (!resultOf("loss"))
    die("the training step has no output named 'loss'");

  // The data: every input's array, cut into full batches.
  amprt_npz *data = nullptr;
  if (amprt_npz_open(o.data.c_str(), &data) != AMPRT_OK)
    die(amprt_last_error());
  struct Feed {
    size_t arg;
    const amprt_array *array;
    int64_t rowBytes;
    char *device = nullptr;  // the whole array, converted, on the device
    char *staging = nullptr; // --cuda-graph: the batch's fixed buffer
  };
  std::vector<Feed> feeds;
  int64_t batches = -1;
  std::string batchesFrom;
  for (size_t i = 0; i < args.size(); ++i) {
    Slot &s = args[i];
    if (s.kind != "input")
      continue;
    const amprt_array *a = amprt_npz_get(data, s.name.c_str());
    if (!a) {
      std::string have;
      for (int32_t k = 0; k < amprt_npz_count(data); ++k)
        have += (k ? ", " : "") + std::string(amprt_npz_name(data, k));
      die("input '" + s.name + "' is missing from '" + o.data +
          "' (it holds: " + (have.empty() ? "nothing" : have) + ")");
    }
    if (s.shape.empty() || a->rank != (int32_t)s.shape.size())
      die("input '" + s.name + "' in '" + o.data + "' has rank " + std::to_string(a->rank) +
          ", the program's input has rank " + std::to_string(s.shape.size()) +
          (s.shape.empty() ? " (a scalar input cannot be batched)" : ""));
    for (size_t d = 1; d < s.shape.size(); ++d)
      if (a->shape[d] != s.shape[d])
        die("input '" + s.name + "' in '" + o.data + "': dimension " + std::to_string(d) + " is " +
            std::to_string(a->shape[d]) + ", the program needs " + std::to_string(s.shape[d]));
    if (s.shape[0] == 0)
      die("the program's input '" + s.name +
          "' has a batch of 0 rows: --data cannot feed it "
          "batches (give its inputs with --inputs)");
    // Data parallel: a batch of the data set is ranks x the program's
    // batch; rank r feeds its r-th share.
    if (a->shape[0] < ranks * s.shape[0])
      die("input '" + s.name + "' in '" + o.data + "' has " + std::to_string(a->shape[0]) +
          " rows, fewer than the program's batch of " + std::to_string(s.shape[0]) +
          (ranks > 1 ? " times " + std::to_string(ranks) + " ranks" : std::string()));
    int64_t nb = a->shape[0] / (ranks * s.shape[0]);
    {
      std::string dims = s.name + ":" + std::to_string(a->dtype);
      for (int32_t d = 0; d < a->rank; ++d)
        dims += "," + std::to_string(a->shape[d]);
      jobHash = mixHash(jobHash, dims);
    }
    if (batches >= 0 && nb != batches)
      die("input '" + s.name + "' in '" + o.data + "' holds " + std::to_string(nb) + " batches, '" +
          batchesFrom + "' holds " + std::to_string(batches));
    batches = nb;
    batchesFrom = s.name;
    int64_t row = amprt_dtype_size(a->dtype);
    for (int32_t d = 1; d < a->rank; ++d)
      row *= a->shape[d];
    feeds.push_back({i, a, row});
    if (!onHost) {
      // Every full batch (data parallel: this rank's share of each),
      // converted to the program's type, copied once.
      Slot all{s.kind, s.name, s.dtype, s.shape, {}};
      all.shape[0] = nb * s.shape[0];
      all.data.resize((size_t)all.numel() * amprt_dtype_size(s.dtype));
      const size_t batchBytes = all.data.size() / (size_t)std::max<int64_t>(nb, 1);
      std::string what = "input '" + s.name + "' in '" + o.data + "'";
      for (int64_t b = 0; b < nb; ++b) {
        amprt_array share = *a;
        share.data = static_cast<const char *>(a->data) + (b * ranks + rank) * s.shape[0] * row;
        share.shape[0] = s.shape[0];
        if (amprt_feed(&share, s.dtype, (int32_t)s.shape.size(), s.shape.data(),
                       all.data.data() + b * batchBytes, what.c_str()) != AMPRT_OK)
          die(amprt_last_error());
      }
      feeds.back().device = static_cast<char *>(deviceBuffer(all));
      upload(all, feeds.back().device);
      if (o.cudaGraph)
        feeds.back().staging = static_cast<char *>(ap[i]);
    }
    // NaN in the data: said once, before training.
    int64_t first;
    int64_t total = a->shape[0] * (row / (int64_t)amprt_dtype_size(a->dtype));
    int64_t bad = amprt_count_nonfinite(a->data, a->dtype, total, &first);
    if (bad && o.nanCheck != "off") {
      std::string msg = "input '" + s.name + "' in '" + o.data + "' holds " + std::to_string(bad) +
                        " NaN / inf value(s), the first at flat index " + std::to_string(first);
      if (o.nanCheck == "error")
        die(msg + " (--nan-check=error)");
      std::fprintf(stderr, "warning: %s\n", msg.c_str());
    }
  }
  warnUnusedArrays(data, args, o.data, [](const Slot &s) { return s.kind == "input"; });
  if (batches < 0)
    batches = 1;
  if (o.cudaGraph && onHost)
    die("--cuda-graph needs a CUDA device (--device cuda)");
  amprt_graph *graphs[2] = {nullptr, nullptr};

  // Resume: the state and the counters from the checkpoint.
  std::string ckFile = o.checkpointDir.empty() ? "" : o.checkpointDir + "/checkpoint.safetensors";
  int64_t start = 0, skipped = 0;
  if (!o.checkpointDir.empty() && rank0()) {
    struct stat st;
    if (stat(o.checkpointDir.c_str(), &st) != 0) {
      if (o.resume)
        die("--resume: checkpoint folder '" + o.checkpointDir + "' does not exist");
      if (mkdir(o.checkpointDir.c_str(), 0777) != 0)
        die("cannot create checkpoint folder '" + o.checkpointDir + "'");
    } else if (!S_ISDIR(st.st_mode)) {
      die("--checkpoint-dir '" + o.checkpointDir + "' is not a folder");
    }
  }
  if (o.resume && rank0()) { // (data parallel: rank 0 reads, then broadcasts)
    amprt_checkpoint *rc = nullptr;
    if (amprt_checkpoint_open(ckFile.c_str(), &rc) != AMPRT_OK)
      die(std::string("--resume: ") + amprt_last_error());
    const char *sig = amprt_checkpoint_metadata(rc, "amp.signature");
    const char *it = amprt_checkpoint_metadata(rc, "amp.steps_done");
    const char *sk = amprt_checkpoint_metadata(rc, "amp.skipped_total");
    if (!sig || std::string(sig) != sigText || !it || !sk)
      die("--resume: '" + ckFile + "' was not written by this program (its signature differs)");
    for (auto [ai, ri] : carry) {
      Slot &s = args[ai];
      void *host = onHost ? ap[ai] : s.data.data();
      amprt_tensor t = amprt_tensor_make(host, s.dtype, (int32_t)s.shape.size(), s.shape.data());
      if (amprt_checkpoint_read(rc, s.name.c_str(), &t) != AMPRT_OK)
        die(std::string("--resume: ") + amprt_last_error());
      checkStateFinite(host, s.dtype, s.numel(),
                       "--resume: tensor '" + s.name + "' in '" + ckFile + "'", o.nanCheck);
      upload(s, ap[ai]);
    }
    start = std::strtoll(it, nullptr, 10);
    skipped = std::strtoll(sk, nullptr, 10);
    // The dropout generator goes on where it stopped (older checkpoints
    // have no state: the fresh one).
    if (const char *rs = amprt_checkpoint_metadata(rc, "amp.rng_state")) {
      char *end = nullptr;
      errno = 0;
      unsigned long long v = std::strtoull(rs, &end, 16);
      if (errno || !*rs || *end)
        die("--resume: '" + ckFile + "': amp.rng_state '" + rs + "' is not a hexadecimal number");
      amprt_context_set_rng_state(ctx, (uint64_t)v);
    }
    amprt_checkpoint_close(rc);
  }
  jobHash = mixHash(jobHash, std::to_string(o.steps) + (o.resume ? " resume" : "") + " " +
                                 std::to_string(o.seed) + " " + o.nanCheck + " " + o.gradComm);
  agreeOk(jobHash);
  if (g_comm && g_comm->size > 1 && o.resume) {
    // Rank 0's state and counters, on every rank.
    int64_t counters[3] = {start, skipped, (int64_t)amprt_context_rng_state(ctx)};
    if (g_comm->broadcast(g_comm, counters, sizeof counters, 0) != AMPRT_OK)
      die(amprt_last_error());
    start = counters[0];
    skipped = counters[1];
    amprt_context_set_rng_state(ctx, (uint64_t)counters[2]);
    for (auto [ai, ri] : carry) { // from the host copy (a device's buffer is uploaded)
      Slot &s = args[ai];
      void *host = onHost ? ap[ai] : s.data.data();
      if (g_comm->broadcast(g_comm, host, (int64_t)s.data.size(), 0) != AMPRT_OK)
        die(amprt_last_error());
      if (!rank0())
        upload(s, ap[ai]);
    }
  }
  if (o.resume && rank0()) {
    if (start >= o.steps)
      std::printf("resumed at step %lld: nothing to do for --steps %lld\n", (long long)start,
                  (long long)o.steps);
    else
      std::printf("resumed at step %lld of %lld (%lld skipped so far)\n", (long long)start,
                  (long long)o.steps, (long long)skipped);
  }
  auto saveCheckpoint = [&](int64_t done) {
    if (!rank0())
      return;
    std::vector<amprt_named_tensor> ts;
    for (auto [ai, ri] : carry) {
      Slot &s = args[ai];
      download(s, ap[ai]);
      void *host = onHost ? ap[ai] : s.data.data();
      ts.push_back({s.name.c_str(),
                    amprt_tensor_make(host, s.dtype, (int32_t)s.shape.size(), s.shape.data())});
    }
    std::string d = std::to_string(done), k = std::to_string(skipped);
    char rng[32];
    std::snprintf(rng, sizeof rng, "%016llx", (unsigned long long)amprt_context_rng_state(ctx));
    amprt_metadata meta[] = {{"amp.signature", sigText},
                             {"amp.steps_done", d.c_str()},
                             {"amp.skipped_total", k.c_str()},
                             {"amp.training", trainingText},
                             {"amp.rng_state", rng}};
    if (amprt_checkpoint_save(ckFile.c_str(), ts.data(), (int32_t)ts.size(), meta, 5) != AMPRT_OK)
      die(amprt_last_error());
  };

  amprt_metrics *metrics = nullptr;
  if (!o.metrics.empty() && (rank0() || metricsPerRank)) {
    if (o.resume)
      truncateMetrics(o.metrics, start);
    if (amprt_metrics_open(o.metrics.c_str(), o.resume ? 1 : 0, &metrics) != AMPRT_OK)
      die(amprt_last_error());
  }
  int64_t printEvery = o.printEvery ? o.printEvery : std::max<int64_t>(1, o.steps / 10);
  if (start < o.steps && rank0()) {
    std::printf("training: %s; %lld batch(es) of %s; steps %lld..%lld\n", trainingText,
                (long long)batches, o.data.c_str(), (long long)start + 1, (long long)o.steps);
    if (ranks > 1)
      std::printf("data parallel: %lld ranks, each feeding its share of every batch of %lld "
                  "rows\n",
                  (long long)ranks,
                  (long long)(feeds.empty() ? 0 : ranks * args[feeds.front().arg].shape[0]));
  }
  const Slot *lossSlot = resultOf("loss"), *scaleSlot = resultOf("loss_scale"),
             *foundSlot = resultOf("found_inf");
  // The scalars the loop reports, copied after each step into a history
  // block (device memory on a device) and read back a block at a time.
  const Slot *watched[3] = {lossSlot, scaleSlot, foundSlot};
  const int64_t block = onHost ? 1 : o.syncEvery;
  void *history = nullptr;
  if (amprt_device_alloc(ctx, (size_t)block * 24, &history) != AMPRT_OK)
    die(amprt_last_error());
  owned.push_back(history);
  std::vector<char> historyHost((size_t)block * 24);
  auto valueIn = [&](const Slot *s, const char *bytes) -> double {
    Slot tmp{s->kind, s->name, s->dtype, s->shape, {}};
    tmp.data.assign(bytes, bytes + amprt_dtype_size(s->dtype));
    return scalarOf(&tmp);
  };
  int64_t runOfSkips = 0, pending = 0, syncsInSteps = 0, syncsFirstStep = 0;
  bool warnedSkips = false;
  amprt_step_metrics m{};
  std::vector<double> times;
  auto blockStart = std::chrono::steady_clock::now();
  // Reads the pending steps' values; writes their metrics and progress.
  auto flush = [&](int64_t lastStep) {
    if (!pending)
      return;
    if (amprt_device_copy(ctx, historyHost.data(), history, (size_t)pending * 24, 1) != AMPRT_OK ||
        amprt_device_synchronize(ctx) != AMPRT_OK)
      die("steps " + std::to_string(lastStep - pending + 1) + ".." + std::to_string(lastStep) +
          ": " + amprt_last_error());
    if (!onHost) { // the block's mean time for each of its steps
      double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - blockStart).count();
      times.assign((size_t)pending, dt / (double)pending);
    }
    for (int64_t k = 0; k < pending; ++k) {
      const char *row = historyHost.data() + k * 24;
      m.step = lastStep - pending + 1 + k;
      m.loss = valueIn(lossSlot, row);
      if (ranks > 1) { // the job's loss: the mean of the ranks' (the batch of all of them)
        double sum = m.loss;
        if (g_comm->sum_f64(g_comm, &sum, 1) != AMPRT_OK)
          die(amprt_last_error());
        m.loss = sum / (double)ranks;
      }
      m.loss_scale = scaleSlot ? valueIn(scaleSlot, row + 8) : 1.0;
      m.found_inf = foundSlot && valueIn(foundSlot, row + 16) != 0.0;
      skipped += m.found_inf;
      m.skipped_total = skipped;
      m.step_time_s = times[(size_t)k];
      if (metrics && amprt_metrics_write(metrics, &m) != AMPRT_OK)
        die(amprt_last_error());
      runOfSkips = m.found_inf ? runOfSkips + 1 : 0;
      if (runOfSkips >= 10 && !warnedSkips) {
        std::fprintf(stderr,
                     "warning: %lld steps in a row skipped for inf / NaN gradients (scale %g): "
                     "the model is overflowing, not just the scale; lower the learning rate, "
                     "check the data, look for exp / pow / division in fp16\n",
                     (long long)runOfSkips, m.loss_scale);
        warnedSkips = true;
      }
      if (!std::isfinite(m.loss) && !m.found_inf)
        std::fprintf(stderr, "warning: step %lld: the loss is %g\n", (long long)m.step, m.loss);
      if ((m.step % printEvery == 0 || m.step == o.steps) && rank0()) {
        char line[256];
        amprt_format_progress(line, sizeof line, &m, o.steps);
        std::printf("%s\n", line);
        std::fflush(stdout);
      }
    }
    pending = 0;
    times.clear();
    blockStart = std::chrono::steady_clock::now();
  };
  for (int64_t step = start; step < o.steps; ++step) {
    int64_t b = step % batches;
    for (const Feed &f : feeds) {
      Slot &s = args[f.arg];
      if (f.device) { // this batch's rows, already on the device
        const char *rows = f.device + b * (int64_t)s.data.size();
        if (f.staging) {
          if (amprt_device_copy(ctx, f.staging, rows, s.data.size(), 2) != AMPRT_OK)
            die(amprt_last_error());
        } else {
          ap[f.arg] = const_cast<char *>(rows);
        }
        continue;
      }
      amprt_array view = *f.array;
      view.data =
          static_cast<const char *>(f.array->data) + (b * ranks + rank) * s.shape[0] * f.rowBytes;
      view.shape[0] = s.shape[0];
      std::string what = "input '" + s.name + "' (batch " + std::to_string(b) + ")";
      if (amprt_feed(&view, s.dtype, (int32_t)s.shape.size(), s.shape.data(), ap[f.arg],
                     what.c_str()) != AMPRT_OK)
        die(amprt_last_error());
    }
    auto t0 = std::chrono::steady_clock::now();
    int64_t syncsBefore = amprt_device_sync_count(ctx);
    amprt_graph *&graph = graphs[(step - start) % 2];
    if (o.cudaGraph && step > start && !graph &&
        (amprt_graph_begin(ctx) != AMPRT_OK ||
         amp_entry(ctx, amprt_arena_base(arena), ap.data(), rp.data()) != AMPRT_OK ||
         amprt_graph_end(ctx, &graph) != AMPRT_OK))
      die("step " + std::to_string(step + 1) +
          ": capturing the step as a CUDA graph: " + amprt_last_error());
    if (graph ? amprt_graph_launch(ctx, graph) != AMPRT_OK
              : amp_entry(ctx, amprt_arena_base(arena), ap.data(), rp.data()) != AMPRT_OK)
      die("step " + std::to_string(step + 1) + ": " + amprt_last_error());
    (step == start ? syncsFirstStep : syncsInSteps) += amprt_device_sync_count(ctx) - syncsBefore;
    if (onHost) {
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      amprt_threads_adapt(); // one thread while the machine is busy
    }
    // The new state becomes the next step's arguments (buffers swap: no copy).
    for (auto [ai, ri] : carry)
      std::swap(ap[ai], rp[ri]);
    for (int k = 0; k < 3; ++k)
      if (const Slot *ws = watched[k])
        if (amprt_device_copy(ctx, static_cast<char *>(history) + pending * 24 + 8 * k,
                              rp[ws - results.data()], amprt_dtype_size(ws->dtype), 2) != AMPRT_OK)
          die(amprt_last_error());
    ++pending;
    int64_t done = step + 1;
    bool ckNow = !ckFile.empty() && o.checkpointEvery && done % o.checkpointEvery == 0;
    if (pending == block || done % printEvery == 0 || done == o.steps || ckNow)
      flush(done);
    if (ckNow)
      saveCheckpoint(done);
  }
  if (metrics)
    amprt_metrics_close(metrics);
  if (!ckFile.empty() && start < o.steps)
    saveCheckpoint(o.steps);
  if (start < o.steps && rank0())
    std::printf("done: %lld steps, %lld skipped (%lld applied)%s\n", (long long)o.steps,
                (long long)skipped, (long long)(o.steps - skipped),
                ckFile.empty() ? "" : (", checkpoint " + ckFile).c_str());
  if (start < o.steps && !onHost && rank0())
    std::printf("device %s: host synchronisations inside steps: %lld in the %lld steps after "
                "the first, %lld in the first (first-use set-up); %lld in all\n",
                o.device.c_str(), (long long)syncsInSteps, (long long)(o.steps - start - 1),
                (long long)syncsFirstStep, (long long)amprt_device_sync_count(ctx));
  if (writesOutputs && start < o.steps) {
    // The last step's results: the state results now sit in the argument
    // buffers (swapped above), so swap back for the write.
    for (auto [ai, ri] : carry)
      std::swap(ap[ai], rp[ri]);
    std::vector<void *> host;
    for (size_t r = 0; r < results.size(); ++r) {
      download(results[r], rp[r]);
      host.push_back(onHost ? rp[r] : results[r].data.data());
    }
    writeOutputs(o.outputs, results, host);
  }
  amprt_npz_close(data);
  for (amprt_graph *g : graphs)
    amprt_graph_destroy(ctx, g);
  finish();
  return 0;
}
