//===- tune.cpp - the per-shape kernel choice (AMPRT_TUNE) -----------------===//
//
// Where several kernels compute the same product (oneDNN's bf16 kernels or
// its f32 ones on exactly widened bf16 values, a direct backward-weights
// kernel or im2col + matmul), the fastest differs per shape, pass, thread
// count and CPU: AMX, AVX512-BF16 and AVX-512 without bf16 rank them
// differently. The first call of a shape times each candidate on the real
// operands and keeps the fastest (see internal.h, chooseKernel).
//
//===----------------------------------------------------------------------===//

#include "host/tune.h"
#include "common/check.h"
#include "common/exec_decode.h"
#include "host/context.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

using namespace amprt;

namespace {

// Set when this thread timed candidates (tookTuningTurn() takes it).
thread_local bool tunedThisCall = false;

enum class Mode { Time, Off, Debug };

struct Tuner {
  std::mutex mu;
  bool loaded = false;
  std::string loadError;                      // a bad AMPRT_TUNE_FILE: every choice reports it
  std::map<std::string, std::string> choices; // key -> candidate name
  std::string forced;                         // forceKernelForTesting
};

std::atomic<uint64_t> g_generation{0}; // see tunerGeneration

Tuner &tuner() {
  static Tuner *t = new Tuner; // used by kernels until the process ends
  return *t;
}

const char *tuneFile() {
  const char *f = std::getenv("AMPRT_TUNE_FILE");
  return f && *f ? f : nullptr;
}

/// "key\tname" lines: the later line for a key wins (a file appended to by
/// several runs).
std::string parseChoices(const std::string &text, const char *where,
                         std::map<std::string, std::string> &into) {
  size_t pos = 0;
  int line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos)
      end = text.size();
    std::string l = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (l.empty())
      continue;
    size_t tab = l.rfind('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 == l.size())
      return std::string(where) + " line " + std::to_string(line) +
             ": not 'key<TAB>kernel' (a file written by AMPRT_TUNE_FILE)";
    into[l.substr(0, tab)] = l.substr(tab + 1);
  }
  return "";
}

void loadLocked(Tuner &t) {
  if (t.loaded)
    return;
  t.loaded = true;
  const char *path = tuneFile();
  if (!path)
    return;
  FILE *f = std::fopen(path, "rb");
  if (!f)
    return; // made by the first choice
  std::string text;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0)
    text.append(buf, got);
  std::fclose(f);
  std::string where = std::string("AMPRT_TUNE_FILE '") + path + "'";
  t.loadError = parseChoices(text, where.c_str(), t.choices);
}

} // namespace

static Mode tuneModeOf() {
  static const Mode m = [] {
    const char *v = std::getenv("AMPRT_TUNE");
    if (!v || !*v || !std::strcmp(v, "time") || !std::strcmp(v, "1"))
      return Mode::Time;
    if (!std::strcmp(v, "off") || !std::strcmp(v, "0"))
      return Mode::Off;
    if (!std::strcmp(v, "debug"))
      return Mode::Debug;
    std::fprintf(stderr, "amprt: AMPRT_TUNE='%s' is not time, off or debug; using time\n", v);
    return Mode::Time;
  }();
  return m;
}

bool amprt::tuningOn(const amprt_context *ctx) {
  // Data parallel: each rank would time for itself, and a resumed job
  // would not continue bit-exactly; the fixed rules unless asked for.
  if (ctx && ctx->comm && !std::getenv("AMPRT_TUNE"))
    return false;
  return tuneModeOf() != Mode::Off;
}

amprt_status amprt::checkTuneFile() {
  if (!tuningOn(nullptr))
    return AMPRT_OK;
  Tuner &t = tuner();
  std::lock_guard<std::mutex> lock(t.mu);
  loadLocked(t);
  if (!t.loadError.empty())
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s", t.loadError.c_str());
  return AMPRT_OK;
}

void amprt::noteNoBf16Kernels() {
  static std::once_flag once;
  if (tuneModeOf() != Mode::Debug)
    return;
  std::call_once(once, [] {
    std::fprintf(stderr,
                 "amprt: AMPRT_TUNE: oneDNN has no bf16 kernels on this CPU (%s): bf16 "
                 "products and convolutions run on its f32 kernels, nothing to choose\n",
                 amprt_cpu_features_string());
  });
}

bool amprt::tookTuningTurn() {
  bool t = tunedThisCall;
  tunedThisCall = false;
  return t;
}

amprt_status amprt::chooseKernel(const amprt_context *ctx, const std::string &key,
                                 const std::vector<const char *> &names, int preferred,
                                 const std::function<amprt_status(int)> &run, int *choice) {
  Tuner &t = tuner();
  *choice = preferred;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    if (!t.forced.empty()) {
      for (size_t i = 0; i < names.size(); ++i)
        if (t.forced == names[i])
          *choice = (int)i;
      return AMPRT_OK;
    }
    loadLocked(t);
    if (!t.loadError.empty())
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s", t.loadError.c_str());
    auto it = t.choices.find(key);
    if (it != t.choices.end()) {
      for (size_t i = 0; i < names.size(); ++i)
        if (it->second == names[i]) {
          *choice = (int)i;
          return AMPRT_OK;
        }
      // A kernel this build does not offer for the key: timed again.
    }
  }
  if (!tuningOn(ctx) || names.size() < 2)
    return AMPRT_OK;
  // Each candidate once to make its primitives (oneDNN JIT-compiles them),
  // then three rounds of one timed call each, the candidates in turn, and
  // each one's fastest: a burst of load elsewhere on a shared machine
  // (milliseconds) falls on neighbouring calls, and the rounds spread each
  // candidate's calls apart so that one burst cannot make it lose.
  std::vector<double> ms(names.size(), -1.0);
  std::vector<bool> ok(names.size(), true);
  std::string failures;
  auto failed = [&](size_t i) { // candidate i failed: not taken, its error noted
    failures += std::string(failures.empty() ? "" : "; ") + names[i] + ": " + amprt_last_error();
    ok[i] = false;
    ms[i] = -1.0;
  };
  for (size_t i = 0; i < names.size(); ++i)
    if (run((int)i) != AMPRT_OK)
      failed(i);
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < names.size(); ++i) {
      if (!ok[i])
        continue;
      auto t0 = std::chrono::steady_clock::now();
      if (run((int)i) != AMPRT_OK) { // a kernel that fails once is not taken
        failed(i);
        continue;
      }
      double t =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ms[i] = ms[i] < 0 ? t : std::min(ms[i], t);
    }
  if (ms[preferred] < 0) {
    // The fixed rule's kernel failed: its error is the call's.
    return fail(AMPRT_ERR_UNSUPPORTED, "%s: %s", key.c_str(), failures.c_str());
  }
  // Another candidate must be 5% faster to replace the fixed rule's (the
  // timings of one call are noisy).
  int best = preferred;
  for (size_t i = 0; i < names.size(); ++i)
    if (ms[i] >= 0 && ms[i] < 0.95 * ms[best] && (int)i != preferred)
      best = (int)i;
  *choice = best;
  tunedThisCall = true;
  const char *path = tuneFile();
  bool say = tuneModeOf() == Mode::Debug || desc::profilingRequested();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto [it, fresh] = t.choices.emplace(key, names[best]);
    if (!fresh) { // another thread chose meanwhile: its choice stands
      for (size_t i = 0; i < names.size(); ++i)
        if (it->second == names[i])
          *choice = (int)i;
      return AMPRT_OK;
    }
    if (path) {
      if (FILE *f = std::fopen(path, "ab")) {
        std::fprintf(f, "%s\t%s\n", key.c_str(), names[best]);
        std::fclose(f);
      }
    }
  }
  if (say) {
    std::string line = "amprt tune: " + key + ":";
    char buf[64];
    for (size_t i = 0; i < names.size(); ++i) {
      if (ms[i] < 0)
        std::snprintf(buf, sizeof buf, " %s failed", names[i]);
      else
        std::snprintf(buf, sizeof buf, " %s %.3f ms", names[i], ms[i]);
      line += buf;
    }
    line += std::string(" -> ") + names[best] + "\n";
    std::fputs(line.c_str(), stderr);
  }
  return AMPRT_OK;
}

std::string amprt::kernelChoicesText() {
  Tuner &t = tuner();
  std::lock_guard<std::mutex> lock(t.mu);
  std::string s;
  for (auto &[k, v] : t.choices)
    s += k + "\t" + v + "\n";
  return s;
}

void amprt::adoptKernelChoices(const std::string &text) {
  std::map<std::string, std::string> got;
  if (!parseChoices(text, "checkpoint", got).empty())
    return; // not ours: the fixed rules and timing decide
  Tuner &t = tuner();
  std::lock_guard<std::mutex> lock(t.mu);
  loadLocked(t);
  for (auto &[k, v] : got)
    t.choices.emplace(k, v); // choices already made in this process stand
  ++g_generation;
}

void amprt::forceKernelForTesting(const std::string &name) {
  Tuner &t = tuner();
  std::lock_guard<std::mutex> lock(t.mu);
  t.forced = name;
  ++g_generation;
}

uint64_t amprt::tunerGeneration() { return g_generation.load(std::memory_order_relaxed); }
