//===- check.cpp - amprt-cuda-check: the CUDA kernels against the CPU ------===//
//
//   amprt-cuda-check [--seed N] [--mib 64]
//
// On a machine with a CUDA device: runs every kernel of amprt_cuda.h on
// fresh random inputs (specials included) and on the CPU runtime, and
// compares: casts bit for bit (every f16 / bf16 pattern, and f32 values of
// every kind), unscale_and_check bit for bit with the same found_inf,
// update_scale bit for bit over 300 scripted steps, SGD and Adam / AdamW bit
// for bit over steps with skipped ones (Adam: its bias corrections use the
// device's pow, so 1 ulp is allowed there). Then times unscale_and_check over
// --mib MiB of f32 gradients against a device-to-device copy of the same
// bytes. Prints one line per check and a table; exit 0 when every check
// passed, 1 when one failed, 2 when there is no CUDA device (the message
// says why).
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt_cuda.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

int failures = 0, passes = 0;

void report(bool ok, const std::string &what) {
  (ok ? passes : failures)++;
  std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what.c_str());
}

[[noreturn]] void die(const std::string &what) {
  std::fprintf(stderr, "amprt-cuda-check: %s: %s\n", what.c_str(), amprt_last_error());
  std::exit(1);
}

void must(amprt_status s, const char *what) {
  if (s != AMPRT_OK)
    die(what);
}

/// A device copy of host bytes, freed at scope exit.
struct Dev {
  void *p = nullptr;
  size_t bytes = 0;
  Dev(const void *host, size_t n) : bytes(n) {
    must(amprt_cuda_malloc(&p, n), "cudaMalloc");
    if (host)
      must(amprt_cuda_memcpy(p, host, n, 0), "copy to the device");
  }
  ~Dev() { amprt_cuda_free(p); }
  template <typename T> std::vector<T> get() const {
    std::vector<T> out(bytes / sizeof(T));
    must(amprt_cuda_memcpy(out.data(), p, bytes, 1), "copy to the host");
    return out;
  }
};

amprt_tensor tensor(void *p, amprt_dtype t, int64_t n) { return amprt_tensor_make(p, t, 1, &n); }

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::vector<float> randomFloats(std::mt19937 &rng, size_t n, bool specials) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<uint32_t> any;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (specials && i % 4 == 3) {
      uint32_t b = any(rng);
      std::memcpy(&v[i], &b, 4);
    } else {
      v[i] = normal(rng) * std::ldexp(1.0f, (int)(i % 40) - 20);
    }
  }
  return v;
}

void checkCasts(std::mt19937 &rng) {
  // Every 16-bit pattern to f32.
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i)
    all[i] = (uint16_t)i;
  for (amprt_dtype t : {AMPRT_F16, AMPRT_BF16}) {
    Dev x(all.data(), all.size() * 2), y(nullptr, all.size() * 4);
    amprt_tensor tx = tensor(x.p, t, 65536), ty = tensor(y.p, AMPRT_F32, 65536);
    must(amprt_cuda_cast(&tx, &ty), "amprt_cuda_cast");
    std::vector<float> cpu(65536);
    amprt_convert(all.data(), t, cpu.data(), AMPRT_F32, 65536);
    auto gpu = y.get<float>();
    size_t bad = 0;
    for (size_t i = 0; i < gpu.size(); ++i)
      bad += bits(gpu[i]) != bits(cpu[i]);
    report(bad == 0, std::string("cast ") + amprt_dtype_name(t) + " -> f32, every pattern (" +
                         std::to_string(bad) + " differ)");
  }
  // f32 values of every kind to f16 / bf16.
  std::vector<float> src = randomFloats(rng, 1 << 20, true);
  for (amprt_dtype t : {AMPRT_F16, AMPRT_BF16}) {
    Dev x(src.data(), src.size() * 4), y(nullptr, src.size() * 2);
    amprt_tensor tx = tensor(x.p, AMPRT_F32, (int64_t)src.size()),
                 ty = tensor(y.p, t, (int64_t)src.size());
    must(amprt_cuda_cast(&tx, &ty), "amprt_cuda_cast");
    std::vector<uint16_t> cpu(src.size());
    amprt_convert(src.data(), AMPRT_F32, cpu.data(), t, src.size());
    auto gpu = y.get<uint16_t>();
    size_t bad = 0;
    for (size_t i = 0; i < gpu.size(); ++i)
      bad += gpu[i] != cpu[i];
    report(bad == 0, std::string("cast f32 -> ") + amprt_dtype_name(t) + ", 1M values (" +
                         std::to_string(bad) + " differ)");
  }
}

void checkUnscale(std::mt19937 &rng) {
  const int64_t sizes[] = {1, 37, 1000, 65536 + 3, 300000};
  const amprt_dtype types[] = {AMPRT_F32, AMPRT_F16, AMPRT_BF16, AMPRT_F32, AMPRT_F16};
  for (bool withInf : {false, true}) {
    std::vector<std::vector<uint16_t>> halves(5);
    std::vector<std::vector<float>> fulls(5);
    std::vector<Dev *> dg, dout;
    std::vector<amprt_tensor> g, o, cg, co;
    std::vector<std::vector<float>> cpuOut(5);
    for (int k = 0; k < 5; ++k) {
      fulls[k] = randomFloats(rng, sizes[k], false);
      if (withInf && k == 3)
        fulls[k][sizes[k] / 2] = INFINITY;
      const void *host = fulls[k].data();
      size_t es = amprt_dtype_size(types[k]);
      if (types[k] != AMPRT_F32) {
        halves[k].resize(sizes[k]);
        amprt_convert(fulls[k].data(), AMPRT_F32, halves[k].data(), types[k], sizes[k]);
        host = halves[k].data();
      }
      dg.push_back(new Dev(host, sizes[k] * es));
      dout.push_back(new Dev(nullptr, sizes[k] * 4));
      g.push_back(tensor(dg.back()->p, types[k], sizes[k]));
      o.push_back(tensor(dout.back()->p, AMPRT_F32, sizes[k]));
      cpuOut[k].resize(sizes[k]);
      cg.push_back(tensor(const_cast<void *>(host), types[k], sizes[k]));
      co.push_back(tensor(cpuOut[k].data(), AMPRT_F32, sizes[k]));
    }
    float scale = 65536.0f / 3.0f, zero = 0.0f, cpuFound = 0.0f;
    Dev dscale(&scale, 4), dfound(&zero, 4);
    must(amprt_cuda_unscale_and_check(g.data(), o.data(), 5, static_cast<float *>(dscale.p),
                                      static_cast<float *>(dfound.p)),
         "amprt_cuda_unscale_and_check");
    must(amprt_unscale_and_check(nullptr, cg.data(), co.data(), 5, &scale, &cpuFound),
         "amprt_unscale_and_check");
    size_t bad = 0;
    for (int k = 0; k < 5; ++k) {
      auto got = dout[k]->get<float>();
      for (int64_t i = 0; i < sizes[k]; ++i)
        bad += bits(got[i]) != bits(cpuOut[k][i]);
    }
    float gpuFound = dfound.get<float>()[0];
    report(bad == 0 && gpuFound == cpuFound,
           std::string("unscale_and_check, 5 tensors f32/f16/bf16") +
               (withInf ? " with an inf" : "") + " (" + std::to_string(bad) +
               " differ, found_inf " + std::to_string(gpuFound) + " vs " +
               std::to_string(cpuFound) + ")");
    for (Dev *d : dg)
      delete d;
    for (Dev *d : dout)
      delete d;
  }
}

void checkUpdateScale(std::mt19937 &rng) {
  amprt_scaler_config cfg = amprt_scaler_default_config();
  cfg.growth_interval = 3;
  cfg.hysteresis = 2;
  cfg.min_scale = 1.0f;
  amprt_scaler_state cpu = amprt_scaler_init(&cfg, 65536.0f);
  Dev dstate(&cpu, sizeof cpu), dfound(nullptr, 4);
  std::bernoulli_distribution overflow(0.3);
  int bad = 0;
  for (int step = 0; step < 300; ++step) {
    float f = overflow(rng) ? 1.0f : 0.0f;
    must(amprt_cuda_memcpy(dfound.p, &f, 4, 0), "copy");
    must(amprt_cuda_update_scale(&cfg, static_cast<amprt_scaler_state *>(dstate.p),
                                 static_cast<float *>(dfound.p)),
         "amprt_cuda_update_scale");
    (void)amprt_update_scale(nullptr, &cfg, &cpu, f);
    amprt_scaler_state gpu;
    must(amprt_cuda_memcpy(&gpu, dstate.p, sizeof gpu, 1), "copy");
    bad += bits(gpu.scale) != bits(cpu.scale) || gpu.growth_tracker != cpu.growth_tracker ||
           gpu.hysteresis_left != cpu.hysteresis_left || gpu.at_min_scale != cpu.at_min_scale;
  }
  report(bad == 0, "update_scale, 300 steps (interval 3, hysteresis 2, floor 1): " +
                       std::to_string(bad) + " states differ");
}

void checkOptimizers(std::mt19937 &rng) {
  const int64_t n = 100003;
  for (int which = 0; which < 5; ++which) {
    std::vector<float> p = randomFloats(rng, n, false), b(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
    Dev dp(p.data(), n * 4), db(b.data(), n * 4), dm(m.data(), n * 4), dv(v.data(), n * 4),
        dg(nullptr, n * 4), dstep(nullptr, 8), dfound(nullptr, 4);
    amprt_tensor tp = tensor(dp.p, AMPRT_F32, n), tb = tensor(db.p, AMPRT_F32, n),
                 tm = tensor(dm.p, AMPRT_F32, n), tv = tensor(dv.p, AMPRT_F32, n),
                 tg = tensor(dg.p, AMPRT_F32, n);
    amprt_tensor cp = tensor(p.data(), AMPRT_F32, n), cb = tensor(b.data(), AMPRT_F32, n),
                 cm = tensor(m.data(), AMPRT_F32, n), cv = tensor(v.data(), AMPRT_F32, n);
    amprt_sgd_config sgd{0.05f, which == 1 ? 0.9f : 0.0f, 0.0f, 1e-4f, which == 1 ? 1 : 0};
    // which 3: AdamW (PyTorch's), 4: Hugging Face's AdamW (decoupled 2).
    amprt_adam_config adam{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, which == 3 ? 1 : which == 4 ? 2 : 0};
    int64_t step = 0;
    for (int s = 0; s < 6; ++s) {
      std::vector<float> g = randomFloats(rng, n, false);
      float found = s == 2 ? 1.0f : 0.0f; // one skipped step
      amprt_tensor cg = tensor(g.data(), AMPRT_F32, n);
      must(amprt_cuda_memcpy(dg.p, g.data(), n * 4, 0), "copy");
      must(amprt_cuda_memcpy(dstep.p, &step, 8, 0), "copy");
      must(amprt_cuda_memcpy(dfound.p, &found, 4, 0), "copy");
      if (which < 2) {
        must(amprt_cuda_sgd_step(&sgd, &tp, &tg, which == 1 ? &tb : nullptr,
                                 static_cast<int64_t *>(dstep.p), static_cast<float *>(dfound.p)),
             "amprt_cuda_sgd_step");
        must(amprt_sgd_step(nullptr, &sgd, &cp, &cg, which == 1 ? &cb : nullptr, &step, found),
             "amprt_sgd_step");
      } else {
        must(amprt_cuda_adam_step(&adam, &tp, &tg, &tm, &tv, static_cast<int64_t *>(dstep.p),
                                  static_cast<float *>(dfound.p)),
             "amprt_cuda_adam_step");
        must(amprt_adam_step(nullptr, &adam, &cp, &cg, &cm, &cv, &step, found), "amprt_adam_step");
      }
      if (found == 0.0f)
        ++step;
    }
    auto gp = dp.get<float>();
    int64_t worst = 0;
    for (int64_t i = 0; i < n; ++i)
      worst = std::max<int64_t>(worst, std::llabs((int64_t)bits(gp[i]) - (int64_t)bits(p[i])));
    const char *names[] = {"SGD (weight decay)", "SGD (momentum, nesterov)", "Adam", "AdamW",
                           "AdamW (Hugging Face form)"};
    int64_t allowed = which < 2 ? 0 : 1;
    report(worst <= allowed, std::string(names[which]) + ", 6 steps, one skipped: worst " +
                                 std::to_string(worst) + " ulp (allowed " +
                                 std::to_string(allowed) + ")");
  }
}

void timeUnscale(int64_t mib) {
  int64_t n = mib * 1024 * 1024 / 4;
  Dev g(nullptr, n * 4), o(nullptr, n * 4), scale(nullptr, 4), found(nullptr, 4);
  must(amprt_cuda_memset(g.p, 0, n * 4), "memset");
  float one = 1.0f;
  must(amprt_cuda_memcpy(scale.p, &one, 4, 0), "copy");
  amprt_tensor tg = tensor(g.p, AMPRT_F32, n), to = tensor(o.p, AMPRT_F32, n);
  float ms = 0, copyMs = 0;
  const int repeat = 20;
  must(amprt_cuda_time_unscale(&tg, &to, 1, static_cast<float *>(scale.p),
                               static_cast<float *>(found.p), repeat, &ms),
       "time unscale");
  must(amprt_cuda_time_copy(o.p, g.p, n * 4, repeat, &copyMs), "time copy");
  double bytes = 2.0 * n * 4 * repeat;
  double gbs = bytes / (ms * 1e-3) / 1e9, copyGbs = bytes / (copyMs * 1e-3) / 1e9;
  std::printf("\n| measure | GB/s |\n|---|---|\n| unscale_and_check, %lld MiB f32 | %.0f |\n"
              "| device-to-device copy, same bytes | %.0f |\n| ratio (target >= 0.80) | %.2f |\n",
              (long long)mib, gbs, copyGbs, gbs / copyGbs);
  report(gbs / copyGbs >= 0.8, "unscale_and_check bandwidth >= 80 % of a device copy");
}

} // namespace

int main(int argc, char **argv) {
  unsigned seed = std::random_device{}();
  int64_t mib = 64;
  bool probe = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--probe")
      probe = true; // whether a device is usable (exit 0) or not (exit 2), nothing else
    else if (a == "--seed" && i + 1 < argc)
      seed = (unsigned)std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--mib" && i + 1 < argc)
      mib = std::strtoll(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: %s [--probe] [--seed N] [--mib M]\n", argv[0]);
      return 1;
    }
  }
  int32_t devices = 0;
  if (amprt_cuda_device_count(&devices) != AMPRT_OK) {
    std::printf("amprt-cuda-check: %s; nothing to check on this machine\n", amprt_last_error());
    return 2;
  }
  char name[256];
  must(amprt_cuda_device_name(0, name, sizeof name), "device name");
  if (probe) {
    std::printf("device 0: %s\n", name);
    return 0;
  }
  std::printf("device 0: %s; seed %u\n", name, seed);
  std::mt19937 rng(seed);
  checkCasts(rng);
  checkUnscale(rng);
  checkUpdateScale(rng);
  checkOptimizers(rng);
  timeUnscale(mib);
  std::printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
