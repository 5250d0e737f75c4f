//===- resume.cpp - checkpoints of a training run, and resuming -------------===//
//
// The checkpoint (D/checkpoint.safetensors) holds every state tensor and, in
// its metadata, the step, the skipped-step count and the dropout
// generator's state (amp.rng_state), so a resumed run draws the masks it
// would have drawn. --steps counts all steps of the run, so `--resume`
// continues an interrupted run to N.
//
//===----------------------------------------------------------------------===//

#include "runner.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <sys/stat.h>

namespace amprt::runner {

void resumeRun(Program &p, const Options &o, const Carry &carry, RunState &rs) {
  rs.ckFile = o.checkpointDir.empty() ? "" : o.checkpointDir + "/checkpoint.safetensors";
  const std::string &ckFile = rs.ckFile;
  int64_t &start = rs.start, &skipped = rs.skipped;
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
    const char *sig = amprt_checkpoint_metadata(rc, AMPRT_META_SIGNATURE);
    const char *it = amprt_checkpoint_metadata(rc, AMPRT_META_STEPS_DONE);
    const char *sk = amprt_checkpoint_metadata(rc, AMPRT_META_SKIPPED_TOTAL);
    if (!sig || std::string(sig) != p.sigString || !it || !sk)
      die("--resume: '" + ckFile + "' was not written by this program (its signature differs)");
    for (auto [ai, ri] : carry) {
      Slot &s = p.args[ai];
      void *host = p.onHost ? p.ap[ai] : s.data.data();
      amprt_tensor t = amprt_tensor_make(host, s.dtype, (int32_t)s.shape.size(), s.shape.data());
      if (amprt_checkpoint_read(rc, s.name.c_str(), &t) != AMPRT_OK)
        die(std::string("--resume: ") + amprt_last_error());
      checkStateFinite(host, s.dtype, s.numel(),
                       "--resume: tensor '" + s.name + "' in '" + ckFile + "'", o.nanCheck);
      p.upload(s, p.ap[ai]);
    }
    start = std::strtoll(it, nullptr, 10);
    skipped = std::strtoll(sk, nullptr, 10);
    // The dropout generator goes on where it stopped (older checkpoints
    // have no state: the fresh one).
    if (const char *rng = amprt_checkpoint_metadata(rc, AMPRT_META_RNG_STATE)) {
      char *end = nullptr;
      errno = 0;
      unsigned long long v = std::strtoull(rng, &end, 16);
      if (errno || !*rng || *end)
        die("--resume: '" + ckFile + "': amp.rng_state '" + rng + "' is not a hexadecimal number");
      amprt_context_set_rng_state(p.ctx, (uint64_t)v);
    }
    amprt_checkpoint_close(rc);
  }
  p.jobHash = mixHash(p.jobHash, std::to_string(o.steps) + (o.resume ? " resume" : "") + " " +
                                     std::to_string(o.seed) + " " + o.nanCheck + " " + o.gradComm);
  agreeOk(p.jobHash);
  if (g_comm && g_comm->size > 1 && o.resume) {
    // Rank 0's state and counters, on every rank.
    int64_t counters[3] = {start, skipped, (int64_t)amprt_context_rng_state(p.ctx)};
    if (g_comm->broadcast(g_comm, counters, sizeof counters, 0) != AMPRT_OK)
      die(amprt_last_error());
    start = counters[0];
    skipped = counters[1];
    amprt_context_set_rng_state(p.ctx, (uint64_t)counters[2]);
    for (auto [ai, ri] : carry) { // from the host copy (a device's buffer is uploaded)
      Slot &s = p.args[ai];
      void *host = p.onHost ? p.ap[ai] : s.data.data();
      if (g_comm->broadcast(g_comm, host, (int64_t)s.data.size(), 0) != AMPRT_OK)
        die(amprt_last_error());
      if (!rank0())
        p.upload(s, p.ap[ai]);
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
}

void saveCheckpoint(Program &p, const Carry &carry, const RunState &rs, int64_t done) {
  if (!rank0())
    return;
  std::vector<amprt_named_tensor> ts;
  for (auto [ai, ri] : carry) {
    Slot &s = p.args[ai];
    p.download(s, p.ap[ai]);
    void *host = p.onHost ? p.ap[ai] : s.data.data();
    ts.push_back({s.name.c_str(),
                  amprt_tensor_make(host, s.dtype, (int32_t)s.shape.size(), s.shape.data())});
  }
  std::string d = std::to_string(done), k = std::to_string(rs.skipped);
  char rng[32];
  std::snprintf(rng, sizeof rng, "%016llx", (unsigned long long)amprt_context_rng_state(p.ctx));
  amprt_metadata meta[] = {{AMPRT_META_SIGNATURE, p.sigString.c_str()},
                           {AMPRT_META_STEPS_DONE, d.c_str()},
                           {AMPRT_META_SKIPPED_TOTAL, k.c_str()},
                           {AMPRT_META_TRAINING, p.trainingString.c_str()},
                           {AMPRT_META_RNG_STATE, rng}};
  if (amprt_checkpoint_save(rs.ckFile.c_str(), ts.data(), (int32_t)ts.size(), meta, 5) != AMPRT_OK)
    die(amprt_last_error());
}

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

} // namespace amprt::runner
