//===- record.cpp - amprt_exec calls recorded for replay on another device -===//
//
// AMPRT_EXEC_RECORD=<folder>: every successful amprt_exec call on the CPU
// is written to <folder>/<pid>-<n>.rec: the descriptor, the dropout
// generator's state, and the bytes of every tensor the call names before and
// after it ran (tensors whose bytes overlap share one region, so in-place
// ops and views replay as they ran). amprt-exec-replay runs the same calls
// on a CUDA device and compares what each wrote with what the CPU wrote: the
// kernel-by-kernel check of the CUDA backend against the CPU runtime.
//
// File (little-endian):
//   "AMPREC01"  int64 descLen  int64 desc[descLen]  uint64 rngBefore
//   int64 regions, per region: int64 bytes, bytes before, bytes after
//   int64 tensors, per tensor: int64 region (-1: no data, -2: empty),
//                              int64 offset of bufs[k] in its region (bytes)
// A call whose regions hold more than AMPRT_EXEC_RECORD_MAX bytes (8 MiB by
// default) is not recorded. Each file is written whole (temporary + rename).
//
//===----------------------------------------------------------------------===//

#include "host/record.h"
#include "common/exec_decode.h"
#include "host/context.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

namespace amprt {

const char *recordFolder() {
  static const char *dir = [] {
    const char *d = std::getenv("AMPRT_EXEC_RECORD");
    return d && *d ? d : nullptr;
  }();
  return dir;
}

namespace {

struct Span {
  intptr_t lo = 0, hi = 0; // bytes [lo, hi); lo == hi: nothing
  int region = -1;
};

/// The descriptor's length in int64s and each tensor's byte span.
bool spans(const int64_t *desc, void **bufs, int64_t &len, std::vector<Span> &out) {
  if (!desc || !desc::knownVersion(desc[0]) || desc[2] < 0 || desc[2] > 4096 || desc[3] < 0 ||
      desc[3] > 256)
    return false;
  const int64_t *p = desc + 4;
  out.assign((size_t)desc[2], Span{});
  for (int64_t k = 0; k < desc[2]; ++k) {
    int64_t dtype = p[0], rank = p[1], offset = p[2];
    if (dtype < 0 || dtype >= AMPRT_DTYPE_COUNT || rank < 0 || rank > AMPRT_MAX_RANK)
      return false;
    const int64_t *shape = p + 3, *strides = p + 3 + rank;
    int64_t lo = offset, hi = offset;
    bool empty = false;
    for (int64_t i = 0; i < rank; ++i) {
      empty |= shape[i] == 0;
      int64_t reach = (shape[i] - 1) * strides[i];
      (reach < 0 ? lo : hi) += reach;
    }
    int64_t es = (int64_t)amprt_dtype_size((amprt_dtype)dtype);
    if (bufs && bufs[k] && !empty) {
      // From the base pointer itself (a replay's buffers start there: a
      // device executor finds its allocations by the pointers it is given).
      intptr_t base = reinterpret_cast<intptr_t>(bufs[k]);
      out[k].lo = std::min(base, base + lo * es);
      out[k].hi = base + (hi + 1) * es;
    } else {
      out[k].region = bufs && bufs[k] ? -2 : -1;
    }
    p += 3 + 2 * rank;
  }
  len = desc::descWords(desc); // the name too, when named
  return true;
}

struct Writer {
  std::string bytes;
  void i64(int64_t v) { bytes.append(reinterpret_cast<const char *>(&v), 8); }
  void raw(const void *p, size_t n) { bytes.append(static_cast<const char *>(p), n); }
};

} // namespace

int32_t recordExec(amprt_context *ctx, const int64_t *desc, void **bufs,
                   int32_t (*run)(amprt_context *, const int64_t *, void **)) {
  int64_t len = 0;
  std::vector<Span> ts;
  if (!spans(desc, bufs, len, ts))
    return run(ctx, desc, bufs); // the executor reports what is wrong
  // Regions: the tensors' spans, overlapping ones merged.
  std::vector<std::pair<intptr_t, intptr_t>> regions;
  std::vector<size_t> order;
  for (size_t k = 0; k < ts.size(); ++k)
    if (ts[k].region == -1 && ts[k].hi > ts[k].lo)
      order.push_back(k);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ts[a].lo < ts[b].lo; });
  for (size_t k : order) {
    if (regions.empty() || ts[k].lo >= regions.back().second)
      regions.push_back({ts[k].lo, ts[k].hi});
    else
      regions.back().second = std::max(regions.back().second, ts[k].hi);
    ts[k].region = (int)regions.size() - 1;
  }
  static const size_t maxBytes = [] {
    const char *m = std::getenv("AMPRT_EXEC_RECORD_MAX");
    return m && *m ? (size_t)std::strtoull(m, nullptr, 10) : (size_t)8 << 20;
  }();
  size_t total = 0;
  for (auto &[lo, hi] : regions)
    total += (size_t)(hi - lo);
  if (total > maxBytes)
    return run(ctx, desc, bufs);
  Writer w;
  w.raw("AMPREC01", 8);
  w.i64(len);
  w.raw(desc, (size_t)len * 8);
  w.i64((int64_t)(ctx ? ctx->rng : 0));
  std::vector<std::string> before;
  for (auto &[lo, hi] : regions)
    before.emplace_back(reinterpret_cast<const char *>(lo), (size_t)(hi - lo));
  int32_t r = run(ctx, desc, bufs);
  if (r != AMPRT_OK)
    return r;
  w.i64((int64_t)regions.size());
  for (size_t i = 0; i < regions.size(); ++i) {
    w.i64((int64_t)before[i].size());
    w.raw(before[i].data(), before[i].size());
    w.raw(reinterpret_cast<const void *>(regions[i].first), before[i].size());
  }
  w.i64((int64_t)ts.size());
  for (size_t k = 0; k < ts.size(); ++k) {
    w.i64(ts[k].region);
    w.i64(ts[k].region >= 0
              ? (int64_t)(reinterpret_cast<intptr_t>(bufs[k]) - regions[(size_t)ts[k].region].first)
              : 0);
  }
  static std::atomic<int64_t> seq{0};
  std::string path = std::string(recordFolder()) + "/" + std::to_string((long long)getpid()) + "-" +
                     std::to_string((long long)seq++) + ".rec";
  std::string tmp = path + ".tmp";
  bool ok = false;
  if (FILE *f = std::fopen(tmp.c_str(), "wb")) {
    ok = std::fwrite(w.bytes.data(), 1, w.bytes.size(), f) == w.bytes.size();
    ok &= std::fclose(f) == 0;
    ok = ok && std::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok)
      std::remove(tmp.c_str());
  }
  static std::atomic<bool> warned{false};
  if (!ok && !warned.exchange(true)) // the run goes on; the recording is incomplete
    std::fprintf(stderr, "warning: AMPRT_EXEC_RECORD: cannot write %s: %s\n", path.c_str(),
                 std::strerror(errno));
  return r;
}

} // namespace amprt
