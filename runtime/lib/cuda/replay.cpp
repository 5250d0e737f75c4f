//===- replay.cpp - amprt-exec-replay: recorded CPU calls on another device --===//
//
//   amprt-exec-replay [--device cuda|cpu] [--exact] [--quiet] [--ops a,b] FOLDER|FILE...
//   amprt-exec-replay --record-products FOLDER
//
// Replays the amprt_exec calls a CPU run recorded (AMPRT_EXEC_RECORD=folder,
// runtime/lib/cpu/record.cpp): each call's tensors are set to their bytes
// before the call (on the device), the call runs there with the recorded
// dropout generator state, and every element of every tensor it names is
// compared with what the CPU runtime wrote:
//   - bit for bit: integer and boolean tensors; casts, copies, concat,
//     gather, where, dropout, slice gradients, max pools, SGD, the step and
//     micro-step counters, unscale_and_check, update_scale;
//   - within a tolerance (|dev - cpu| <= tol * (|cpu| + 1e-3 * max |cpu|),
//     1e-2 * max |cpu| for f32 sums, whose terms cancel,
//     tol by element type: f32 1e-5, or 2e-4 for long sums (matrix
//     products, convolutions, reductions, losses, statistics) and 1e-4
//     for the unary ops and their derivatives (the CPU's vector erf / exp
//     and CUDA's differ by ulps, more where GELU's tail cancels; random
//     numbers too: the normal's log and cos); f16 4e-3;
//     bf16 3e-2); Adam's steps within 2^-22 (the device's pow). A NaN or an
//     infinity must stand where the CPU's does.
// --exact: every element bit for bit (a CPU replay of a CPU recording; the
// recording and the replay share an AMPRT_TUNE_FILE, so that each call runs
// the kernel the recording's per-shape choice took).
// --ops conv,conv_grad: only the calls of these ops (names as in the table).
// --record-products FOLDER: records a gemm / matmul per shape class the CUDA
// backend treats apart, run on the CPU (replay_products.cpp), and exits.
// Prints one line per failure (the first 20), a table per opcode, and exits
// 0 when every call matched, 1 when one did not, 2 when the device is
// missing (the message says why).
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt.h"
#include "common/check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Record {
  std::vector<int64_t> desc;
  uint64_t rng = 0;
  std::vector<std::string> before, after;
  std::vector<std::pair<int64_t, int64_t>> tensors; // region, offset of bufs[k]
};

bool readRecord(const std::string &path, Record &r, std::string &why) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string b = ss.str();
  size_t at = 0;
  auto i64 = [&](int64_t &v) {
    if (at + 8 > b.size())
      return false;
    std::memcpy(&v, b.data() + at, 8);
    at += 8;
    return true;
  };
  auto bytes = [&](int64_t n, std::string &out) {
    if (n < 0 || at + (size_t)n > b.size())
      return false;
    out.assign(b.data() + at, (size_t)n);
    at += (size_t)n;
    return true;
  };
  int64_t n = 0, v = 0;
  if (b.size() < 8 || b.compare(0, 8, "AMPREC01") != 0) {
    why = "not a recorded call (no AMPREC01 header)";
    return false;
  }
  at = 8;
  if (!i64(n) || n < 4 || n > (1 << 20)) {
    why = "truncated descriptor";
    return false;
  }
  r.desc.resize((size_t)n);
  for (auto &d : r.desc)
    if (!i64(d)) {
      why = "truncated descriptor";
      return false;
    }
  if (!i64(v) || !i64(n) || n < 0 || n > 4096) {
    why = "truncated header";
    return false;
  }
  r.rng = (uint64_t)v;
  r.before.resize((size_t)n);
  r.after.resize((size_t)n);
  for (int64_t i = 0; i < n; ++i)
    if (!i64(v) || !bytes(v, r.before[i]) || !bytes(v, r.after[i])) {
      why = "truncated region";
      return false;
    }
  if (!i64(n) || n != r.desc[2]) {
    why = "tensor count differs from the descriptor's";
    return false;
  }
  r.tensors.resize((size_t)n);
  for (auto &[reg, off] : r.tensors)
    if (!i64(reg) || !i64(off) || reg >= (int64_t)r.before.size()) {
      why = "truncated tensor table";
      return false;
    }
  return true;
}

const char *opName(int64_t op) { return amprt_opcode_name(op); }

enum Kind { kExact, kElementwise, kSums, kUnary, kAdam };

Kind kindOf(int64_t op) {
  switch (op) {
  case AMPRT_OP_CAST:
  case AMPRT_OP_COPY:
  case AMPRT_OP_CONCAT:
  case AMPRT_OP_GATHER:
  case AMPRT_OP_GATHER_ELEMENTS:
  case AMPRT_OP_ARG_REDUCE:
  case AMPRT_OP_TOPK:
  case AMPRT_OP_WHERE:
  case AMPRT_OP_DROPOUT:
  case AMPRT_OP_SLICE_GRAD:
  case AMPRT_OP_MAX_POOL:
  case AMPRT_OP_SGD_UPDATE:
  case AMPRT_OP_STEP_COUNT:
  case AMPRT_OP_MICRO_STEP:
  case AMPRT_OP_UNSCALE_AND_CHECK:
  case AMPRT_OP_UPDATE_SCALE:
    return kExact;
  case AMPRT_OP_GEMM:
  case AMPRT_OP_MATMUL:
  case AMPRT_OP_CONV:
  case AMPRT_OP_CONV_GRAD:
  case AMPRT_OP_CONV_BN:
  case AMPRT_OP_REDUCE:
  case AMPRT_OP_BATCH_NORM:
  case AMPRT_OP_BATCH_NORM_GRAD:
  case AMPRT_OP_LAYER_NORM_GRAD:
  case AMPRT_OP_CLIP_GRAD_NORM:
  case AMPRT_OP_SOFTMAX_CROSS_ENTROPY:
  case AMPRT_OP_NLL_LOSS:
  case AMPRT_OP_GATHER_GRAD:
  case AMPRT_OP_GATHER_ELEMENTS_GRAD:
  case AMPRT_OP_CUMSUM:
  case AMPRT_OP_GRID_SAMPLE:
  case AMPRT_OP_GRID_SAMPLE_GRAD:
  case AMPRT_OP_MAX_POOL_GRAD:
  case AMPRT_OP_AVERAGE_POOL_GRAD:
  case AMPRT_OP_REDUCE_MAX_GRAD:
  case AMPRT_OP_SOFTMAX_CROSS_ENTROPY_GRAD:
  case AMPRT_OP_NLL_LOSS_GRAD:
    return kSums;
  case AMPRT_OP_UNARY:
  case AMPRT_OP_UNARY_GRAD:
  case AMPRT_OP_RANDOM: // the normal's log and cos: the device's against the host's
    return kUnary;
  case AMPRT_OP_ADAM_UPDATE:
    return kAdam;
  default:
    return kElementwise;
  }
}

double widen(const char *p, int32_t dtype) {
  uint16_t h;
  switch (dtype) {
  case AMPRT_F32: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case AMPRT_F16: {
    std::memcpy(&h, p, 2);
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0    ? std::ldexp((double)m, -24)
               : e == 31 ? (m ? NAN : INFINITY)
                         : std::ldexp((double)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
  }
  case AMPRT_BF16: {
    std::memcpy(&h, p, 2);
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  default:
    return 0.0;
  }
}

struct Tally {
  int64_t calls = 0, failed = 0;
  double worst = 0.0; // error / tolerance
};

struct Failure {
  std::string text;
};

} // namespace

int64_t recordProducts(const std::string &folder); // replay_products.cpp

int main(int argc, char **argv) {
  if (argc == 3 && std::string(argv[1]) == "--record-products") {
    int64_t n = recordProducts(argv[2]);
    if (n < 0)
      return 1;
    std::printf("recorded %lld matrix products (one per shape class) in %s\n", (long long)n,
                argv[2]);
    return 0;
  }
  std::string device = "cuda";
  bool exact = false, quiet = false;
  std::vector<std::string> files;
  std::string ops; // ",a,b," or empty: every op
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (a == "--exact") {
      exact = true;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--ops" && i + 1 < argc) {
      ops = std::string(",") + argv[++i] + ",";
      for (size_t b = 1, e; b < ops.size(); b = e + 1) {
        e = ops.find(',', b);
        std::string name = ops.substr(b, e - b);
        bool known = false;
        for (int64_t k = 1; !known && std::string(opName(k)) != "?"; ++k)
          known = name == opName(k);
        if (!known) {
          std::fprintf(stderr, "amprt-exec-replay: --ops: unknown op '%s'\n", name.c_str());
          return 1;
        }
      }
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [--device cuda|cpu] [--exact] [--quiet] [--ops a,b] FOLDER|FILE...\n"
                  "       %s --record-products FOLDER\n",
                  argv[0], argv[0]);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "amprt-exec-replay: unknown argument '%s' (see --help)\n", a.c_str());
      return 1;
    } else if (DIR *d = opendir(a.c_str())) {
      while (dirent *e = readdir(d)) {
        std::string n = e->d_name;
        if (n.size() > 4 && n.compare(n.size() - 4, 4, ".rec") == 0)
          files.push_back(a + "/" + n);
      }
      closedir(d);
    } else {
      files.push_back(a);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "amprt-exec-replay: no recorded calls (*.rec) given\n");
    return 1;
  }
  amprt_context *ctx = nullptr;
  if (amprt_context_create(device.c_str(), &ctx) != AMPRT_OK) {
    std::fprintf(stderr, "amprt-exec-replay: %s\n", amprt_last_error());
    return 2;
  }
  std::map<int64_t, Tally> tally;
  int64_t failures = 0, bitwise = 0, elements = 0;
  void *dummy = nullptr;
  if (amprt_device_alloc(ctx, 64, &dummy) != AMPRT_OK) {
    std::fprintf(stderr, "amprt-exec-replay: %s\n", amprt_last_error());
    return 2;
  }
  for (const std::string &path : files) {
    Record r;
    std::string why;
    if (!readRecord(path, r, why)) {
      std::fprintf(stderr, "amprt-exec-replay: %s: %s\n", path.c_str(), why.c_str());
      return 1;
    }
    int64_t op = r.desc[1];
    if (!ops.empty() && ops.find(std::string(",") + opName(op) + ",") == std::string::npos)
      continue;
    Tally &t = tally[op];
    ++t.calls;
    std::string fail;
    auto note = [&](const std::string &s) {
      if (fail.empty())
        fail = s;
    };
    std::vector<void *> regions(r.before.size(), nullptr), bufs(r.tensors.size(), nullptr);
    bool ok = true;
    for (size_t i = 0; i < regions.size() && ok; ++i)
      ok =
          amprt_device_alloc(ctx, std::max<size_t>(r.before[i].size(), 1), &regions[i]) ==
              AMPRT_OK &&
          amprt_device_copy(ctx, regions[i], r.before[i].data(), r.before[i].size(), 0) == AMPRT_OK;
    for (size_t k = 0; k < bufs.size(); ++k) {
      auto [reg, off] = r.tensors[k];
      bufs[k] = reg >= 0    ? static_cast<char *>(regions[(size_t)reg]) + off
                : reg == -2 ? dummy
                            : nullptr;
    }
    amprt_context_set_rng_state(ctx, r.rng);
    int32_t st = ok ? amprt_exec(ctx, r.desc.data(), bufs.data()) : AMPRT_ERR_OUT_OF_MEMORY;
    if (st == AMPRT_OK)
      st = amprt_device_synchronize(ctx);
    if (st != AMPRT_OK)
      note(std::string("status ") + amprt_status_name((amprt_status)st) + ": " +
           amprt_last_error());
    std::vector<std::string> got(regions.size());
    for (size_t i = 0; i < regions.size() && st == AMPRT_OK; ++i) {
      got[i].resize(r.before[i].size());
      if (amprt_device_copy(ctx, got[i].data(), regions[i], got[i].size(), 1) != AMPRT_OK)
        note(std::string("copy back: ") + amprt_last_error());
    }
    // Element by element, per tensor, at the descriptor's positions.
    const int64_t *p = r.desc.data() + 4;
    Kind kind = exact ? kExact : kindOf(op);
    for (int64_t k = 0; k < r.desc[2] && fail.empty(); ++k) {
      int32_t dtype = (int32_t)p[0], rank = (int32_t)p[1];
      int64_t offset = p[2];
      const int64_t *shape = p + 3, *strides = p + 3 + rank;
      p += 3 + 2 * rank;
      auto [reg, off] = r.tensors[(size_t)k];
      if (reg < 0)
        continue;
      size_t es = amprt_dtype_size((amprt_dtype)dtype);
      bool isFloat = dtype == AMPRT_F32 || dtype == AMPRT_F16 || dtype == AMPRT_BF16;
      const std::string &cpu = r.after[(size_t)reg], &dev = got[(size_t)reg];
      int64_t n = 1;
      for (int32_t d = 0; d < rank; ++d)
        n *= shape[d];
      std::vector<int64_t> at((size_t)n);
      for (int64_t i = 0; i < n; ++i) {
        int64_t rem = i, o = offset;
        for (int32_t d = rank - 1; d >= 0; --d) {
          o += (rem % shape[d]) * strides[d];
          rem /= shape[d];
        }
        at[(size_t)i] = off + o * (int64_t)es;
      }
      double maxAbs = 0.0;
      if (isFloat)
        for (int64_t b : at)
          if (std::isfinite(widen(cpu.data() + b, dtype)))
            maxAbs = std::max(maxAbs, std::fabs(widen(cpu.data() + b, dtype)));
      double tol = dtype == AMPRT_F16    ? 4e-3
                   : dtype == AMPRT_BF16 ? 3e-2
                   : kind == kSums       ? 2e-4
                   : kind == kUnary      ? 1e-4
                                         : 1e-5;
      if (kind == kAdam && dtype == AMPRT_F32)
        tol = std::ldexp(1.0, -22);
      for (int64_t i = 0; i < n; ++i) {
        const char *c = cpu.data() + at[(size_t)i], *g = dev.data() + at[(size_t)i];
        ++elements;
        if (std::memcmp(c, g, es) == 0) {
          ++bitwise;
          continue;
        }
        double cv = isFloat ? widen(c, dtype) : 0.0, gv = isFloat ? widen(g, dtype) : 0.0;
        char pos[160];
        std::snprintf(pos, sizeof pos, "tensor %lld (%s) element %lld: CPU %.9g, device %.9g",
                      (long long)k, amprt_dtype_name((amprt_dtype)dtype), (long long)i, cv, gv);
        if (!isFloat || kind == kExact) {
          note(std::string("not bit for bit: ") + pos);
          break;
        }
        if (std::isnan(cv) && std::isnan(gv))
          continue;
        if (!std::isfinite(cv) || !std::isfinite(gv)) {
          if (cv != gv) {
            note(std::string("non-finite mismatch: ") + pos);
            break;
          }
          continue;
        }
        // The floor: 1e-3 of the tensor's largest value; 1e-2 for f32 sums,
        // whose terms cancel (an f32 weight gradient summed from bf16
        // operands, autocast's f32-accumulators, over 32k terms: an element
        // 2e-6 of 4e-3 was 1.4e-9 off, the sums' order).
        double floor = (kind == kSums && dtype == AMPRT_F32 ? 1e-2 : 1e-3) * maxAbs;
        double err = std::fabs(gv - cv) / (std::fabs(cv) + floor + 1e-30) / tol;
        t.worst = std::max(t.worst, err);
        if (err > 1.0) {
          char msg[64];
          std::snprintf(msg, sizeof msg, " (%.2g x the tolerance %g)", err, tol);
          note(pos + std::string(msg));
          break;
        }
      }
    }
    for (void *reg : regions)
      if (reg)
        amprt_device_free(ctx, reg);
    if (!fail.empty()) {
      ++t.failed;
      if (++failures <= 20 || !quiet)
        std::printf("FAIL  %s (%s): %s\n", path.c_str(), opName(op), fail.c_str());
    }
  }
  amprt_device_free(ctx, dummy);
  amprt_context_destroy(ctx);
  int64_t replayed = 0;
  for (auto &[op, t] : tally)
    replayed += t.calls;
  if (replayed == 0) {
    std::fprintf(stderr,
                 "amprt-exec-replay: none of the %zu recorded calls is of the ops of --ops\n",
                 files.size());
    return 1;
  }
  std::printf("\n| op | calls | failed | worst error / tolerance |\n|---|---|---|---|\n");
  for (auto &[op, t] : tally)
    std::printf("| %s | %lld | %lld | %.3g |\n", opName(op), (long long)t.calls,
                (long long)t.failed, t.worst);
  std::printf(
      "\n%s: %zu recorded calls replayed on %s, %lld failed; %lld of %lld elements bit for bit\n",
      failures ? "FAILED" : "passed", (size_t)replayed, device.c_str(), (long long)failures,
      (long long)bitwise, (long long)elements);
  return failures ? 1 : 0;
}
