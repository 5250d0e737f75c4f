//===- program.cpp - the program, its weights and its buffers ---------------===//
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

#include "runner.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

namespace amprt::runner {

namespace {

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

} // namespace

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

void checkStateFinite(const void *data, amprt_dtype dtype, int64_t numel, const std::string &what,
                      const std::string &nanCheck) {
  int64_t first;
  int64_t bad = amprt_count_nonfinite(data, dtype, numel, &first);
  if (bad && nanCheck != "off")
    die(what + " holds " + std::to_string(bad) + " NaN / inf value(s), the first at flat index " +
        std::to_string(first) + " (a corrupted or diverged file; --nan-check=off loads it anyway)");
}

std::string arrayNames(const amprt_npz *z) {
  std::string have;
  for (int32_t i = 0; i < amprt_npz_count(z); ++i)
    have += (i ? ", " : "") + std::string(amprt_npz_name(z, i));
  return have;
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

void *Program::deviceBuffer(Slot &s) {
  if (onHost)
    return s.data.data();
  void *p = nullptr;
  if (amprt_device_alloc(ctx, std::max<size_t>(1, s.data.size()), &p) != AMPRT_OK)
    die(amprt_last_error());
  owned.push_back(p);
  return p;
}

void Program::upload(Slot &s, void *dst) {
  if (!onHost && amprt_device_copy(ctx, dst, s.data.data(), s.data.size(), 0) != AMPRT_OK)
    die(amprt_last_error());
}

void Program::download(Slot &s, const void *src) {
  if (!onHost && amprt_device_copy(ctx, s.data.data(), src, s.data.size(), 1) != AMPRT_OK)
    die(amprt_last_error());
}

std::vector<void *> Program::resultsOnHost() {
  std::vector<void *> host;
  for (size_t r = 0; r < results.size(); ++r) {
    download(results[r], rp[r]);
    host.push_back(onHost ? rp[r] : results[r].data.data());
  }
  return host;
}

void Program::finish() {
  for (void *p : owned)
    amprt_device_free(ctx, p);
  amprt_arena_destroy(arena);
  amprt_context_destroy(ctx);
  if (g_comm)
    g_comm->finalize(g_comm);
}

void loadProgram(Options &o, Program &p) {
  amprt_checkpoint *ck = nullptr;
  if (amprt_checkpoint_open(o.weights.c_str(), &ck) != AMPRT_OK)
    die(std::string(amprt_last_error()) + " (the weights file written beside the program)");
  const char *sigMeta = amprt_checkpoint_metadata(ck, AMPRT_META_SIGNATURE);
  const char *arenaMeta = amprt_checkpoint_metadata(ck, AMPRT_META_ARENA_BYTES);
  const char *trainingMeta = amprt_checkpoint_metadata(ck, AMPRT_META_TRAINING);
  const char *deviceMeta = amprt_checkpoint_metadata(ck, AMPRT_META_DEVICE);
  p.dataParallel = amprt_checkpoint_metadata(ck, AMPRT_META_DATA_PARALLEL) != nullptr;
  if (p.dataParallel && !g_comm)
    die("this program was compiled with --data-parallel but not linked with the MPI back-end "
        "(libamprt_mpi)");
  if (o.device.empty())
    o.device = deviceMeta ? deviceMeta : "cpu";
  // Data parallel on CUDA: rank r of a machine takes its GPU r (cuda:N
  // given, every rank takes N).
  if (p.dataParallel && g_comm && o.device == "cuda" && g_comm->local_size > 1)
    o.device = "cuda:" + std::to_string(g_comm->local_rank);
  if (!sigMeta || !arenaMeta)
    die("'" + o.weights + "' has no program signature: not written by amp-compile");
  // Copies: the metadata lives as long as the open weights file.
  p.sigString = sigMeta;
  p.trainingString = trainingMeta ? trainingMeta : "";
  const std::string arenaString = arenaMeta;
  const char *sigText = p.sigString.c_str(), *arenaText = arenaString.c_str();
  p.training = !p.trainingString.empty();
  bool loop = !o.data.empty() || o.steps >= 0;
  if (loop && !p.training)
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
  if (!o.gradComm.empty() && !p.dataParallel)
    die("--grad-comm: this program was not compiled with --data-parallel");

  std::vector<uint64_t> argBytes, resultBytes;
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
    bool result = s.kind == "result" || s.kind == "result_inplace";
    if (!result && s.kind != "input" && s.kind != "param")
      die("'" + o.weights + "': unknown kind '" + s.kind + "' in signature line '" + line + "'");
    (result ? resultBytes : argBytes).push_back(bytes);
    (result ? p.results : p.args).push_back(std::move(s));
  }
  // A state result the step writes into its argument's buffer
  // (result_inplace "new:<name>", the compiler marked it safe) has no
  // buffer of its own, from the start: one copy of each parameter and
  // moment lives in this process, never two.
  std::map<std::string, size_t> argIndex;
  for (size_t i = 0; i < p.args.size(); ++i)
    argIndex[p.args[i].name] = i;
  p.inplaceArg.assign(p.results.size(), -1);
  for (size_t r = 0; r < p.results.size(); ++r) {
    const Slot &s = p.results[r];
    if (s.kind != "result_inplace" || s.name.rfind("new:", 0) != 0)
      continue;
    auto it = argIndex.find(s.name.substr(4));
    if (it != argIndex.end() && p.args[it->second].kind == "param" &&
        p.args[it->second].dtype == s.dtype && p.args[it->second].shape == s.shape)
      p.inplaceArg[r] = (int64_t)it->second;
  }
  // All of the signature's tensors live in this process at once: one the
  // machine cannot hold is named here, not left to a failing allocation.
  const uint64_t hostMemory = amprt_host_available_bytes();
  uint64_t held = 0;
  auto reserve = [&](const Slot &s, uint64_t bytes) {
    if (bytes > hostMemory || held > hostMemory - bytes)
      die("the " + s.kind + " '" + s.name + "' needs " +
          (bytes == UINT64_MAX ? std::string("more than 2^64") : std::to_string(bytes)) + " bytes" +
          (held ? " on top of " + std::to_string(held) + " for the tensors before it" : "") +
          ", more than this machine's available memory (" + std::to_string(hostMemory) + " bytes)");
    held += bytes;
  };
  for (size_t i = 0; i < p.args.size(); ++i)
    reserve(p.args[i], argBytes[i]);
  for (size_t r = 0; r < p.results.size(); ++r)
    if (p.inplaceArg[r] < 0)
      reserve(p.results[r], resultBytes[r]);
  // Each parameter read straight into its buffer.
  for (size_t i = 0; i < p.args.size(); ++i) {
    Slot &s = p.args[i];
    s.data.resize(argBytes[i]);
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

  if (amprt_context_create(o.device.c_str(), &p.ctx) != AMPRT_OK)
    die(std::string(amprt_last_error()) + " (--device " + o.device + ")");
  amprt_context_set_comm(p.ctx, g_comm);
  if (o.gradComm == "bf16" || o.gradComm == "fp16")
    amprt_context_set_comm_dtype(p.ctx, o.gradComm == "bf16" ? AMPRT_BF16 : AMPRT_F16);
  p.ranks = g_comm ? g_comm->size : 1;
  p.rank = g_comm ? g_comm->rank : 0;
  p.jobHash = mixHash(mixHash(mixHash(0xcbf29ce484222325ULL, p.sigString), p.trainingString),
                      std::to_string(p.ranks));
  if (o.seed >= 0) // dropout's masks (a checkpoint's state wins on --resume)
    amprt_context_seed(p.ctx, (uint64_t)o.seed);
  char *arenaEnd = nullptr;
  errno = 0;
  unsigned long long arenaBytes = std::strtoull(arenaText, &arenaEnd, 10);
  if (!*arenaText || *arenaEnd || errno || arenaText[0] == '-')
    die("'" + o.weights + "': bad amp.arena_bytes '" + arenaText + "'");
  if (amprt_arena_create(p.ctx, (size_t)arenaBytes, &p.arena) != AMPRT_OK)
    die(amprt_last_error());
  // ap / rp: the buffers the program reads and writes (the slots' host
  // memory, or device memory mirrored by them). An in-place result's host
  // memory is its argument's; on a device it keeps a host mirror (for
  // outputs and checkpoints) and writes its argument's device buffer.
  p.onHost = amprt_context_on_host(p.ctx);
  for (Slot &s : p.args) {
    p.ap.push_back(p.deviceBuffer(s));
    if (s.kind == "param")
      p.upload(s, p.ap.back());
  }
  for (size_t r = 0; r < p.results.size(); ++r) {
    Slot &s = p.results[r];
    if (p.inplaceArg[r] >= 0) {
      if (!p.onHost)
        s.data.resize(resultBytes[r]);
      p.rp.push_back(p.ap[p.inplaceArg[r]]);
      continue;
    }
    s.data.resize(resultBytes[r]);
    p.rp.push_back(p.deviceBuffer(s));
  }
}

int runOnce(Program &p, const Options &o) {
  amprt_npz *in = nullptr;
  bool needInputs = false;
  for (Slot &s : p.args)
    needInputs |= s.kind == "input";
  if (needInputs) {
    if (o.inputs.empty())
      die("the program has inputs; give them with --inputs file.npz" +
          std::string(p.training ? " (or train it: --data data.npz --steps N)" : ""));
    if (amprt_npz_open(o.inputs.c_str(), &in) != AMPRT_OK)
      die(amprt_last_error());
  }
  for (Slot &s : p.args) {
    if (s.kind == "param")
      continue;
    const amprt_array *a = amprt_npz_get(in, s.name.c_str());
    if (!a) {
      std::string have = arrayNames(in);
      die("input '" + s.name + "' is missing from '" + o.inputs +
          "' (it holds: " + (have.empty() ? "nothing" : have) + ")");
    }
    std::string what = "input '" + s.name + "' in '" + o.inputs + "'";
    if (amprt_feed(a, s.dtype, (int32_t)s.shape.size(), s.shape.data(), s.data.data(),
                   what.c_str()) != AMPRT_OK)
      die(amprt_last_error());
    checkFinite(s, "input '" + s.name + "'", o.nanCheck);
    p.upload(s, p.ap[&s - p.args.data()]);
  }
  if (in) {
    warnUnusedArrays(in, p.args, o.inputs, [](const Slot &s) { return s.kind != "param"; });
    amprt_npz_close(in);
  }
  agreeOk(p.jobHash);
  if (p.step() != AMPRT_OK || amprt_device_synchronize(p.ctx) != AMPRT_OK)
    die(amprt_last_error());
  if (!o.outputs.empty() && (rank0() || o.outputsPerRank))
    writeOutputs(o.outputs, p.results, p.resultsOnHost());
  p.finish();
  return 0;
}

} // namespace amprt::runner
