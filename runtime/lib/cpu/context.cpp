//===- context.cpp - contexts, devices, CPU features, arenas -------------===//

#include "internal.h"

#include <cpuid.h>
#include <cstdlib>
#include <new>

extern "C" amprt_status amprt_context_create(const char *device,
                                             amprt_context **out) {
  if (!out)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                       "amprt_context_create: null output pointer");
  *out = nullptr;
  std::string dev = device ? device : "cpu";
  if (dev == "cuda" || dev.rfind("cuda:", 0) == 0) {
#ifndef AMPRT_HAVE_CUDA
    return amprt::fail(AMPRT_ERR_NO_DEVICE,
                       "amprt_context_create: device '%s': this runtime was "
                       "built without CUDA",
                       dev.c_str());
#endif
  } else if (dev != "cpu") {
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                       "amprt_context_create: unknown device '%s' (use cpu or "
                       "cuda[:N])",
                       dev.c_str());
  }
  auto *ctx = new (std::nothrow) amprt_context();
  if (!ctx)
    return amprt::fail(AMPRT_ERR_OUT_OF_MEMORY, "amprt_context_create");
  ctx->device = dev;
  *out = ctx;
  return AMPRT_OK;
}

extern "C" void amprt_context_destroy(amprt_context *ctx) { delete ctx; }

extern "C" const char *amprt_context_device(const amprt_context *ctx) {
  return ctx ? ctx->device.c_str() : "";
}

extern "C" void amprt_context_seed(amprt_context *ctx, uint64_t seed) {
  // SplitMix64 of the seed: any seed, 0 included, gives a good state.
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  ctx->rng = (z ^ (z >> 31)) | 1;
}

extern "C" uint64_t amprt_context_rng_state(const amprt_context *ctx) {
  return ctx->rng;
}

extern "C" void amprt_context_set_rng_state(amprt_context *ctx,
                                            uint64_t state) {
  ctx->rng = state ? state : 1;
}

float amprt::nextUniform(amprt_context *ctx) {
  uint64_t x = ctx->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  ctx->rng = x;
  return (float)((x * 0x2545F4914F6CDD1DULL) >> 40) * (1.0f / 16777216.0f);
}

extern "C" uint32_t amprt_cpu_features(void) {
  static const uint32_t features = [] {
    uint32_t f = 0;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
      return f;
    bool osxsave = c & (1u << 27);
    if (c & (1u << 29))
      f |= AMPRT_CPU_F16C;
    uint64_t xcr0 = 0;
    if (osxsave) {
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      xcr0 = ((uint64_t)hi << 32) | lo;
    }
    bool avxOS = (xcr0 & 6) == 6, avx512OS = (xcr0 & 0xe6) == 0xe6,
         amxOS = (xcr0 & (3u << 17)) == (3u << 17);
    if (__get_cpuid_max(0, nullptr) < 7)
      return f;
    __cpuid_count(7, 0, a, b, c, d);
    if (avxOS && (b & (1u << 5)))
      f |= AMPRT_CPU_AVX2;
    if (avx512OS && (b & (1u << 16)))
      f |= AMPRT_CPU_AVX512F;
    if (avx512OS && (d & (1u << 23)))
      f |= AMPRT_CPU_AVX512_FP16;
    if (amxOS && (d & (1u << 22)))
      f |= AMPRT_CPU_AMX_BF16;
    __cpuid_count(7, 1, a, b, c, d);
    if (avx512OS && (a & (1u << 5)))
      f |= AMPRT_CPU_AVX512_BF16;
    return f;
  }();
  return features;
}

extern "C" const char *amprt_cpu_features_string(void) {
  static const std::string s = [] {
    uint32_t f = amprt_cpu_features();
    std::string r;
    auto add = [&](uint32_t bit, const char *name) {
      if (f & bit)
        r += (r.empty() ? "" : " ") + std::string(name);
    };
    add(AMPRT_CPU_AVX2, "avx2");
    add(AMPRT_CPU_F16C, "f16c");
    add(AMPRT_CPU_AVX512F, "avx512f");
    add(AMPRT_CPU_AVX512_BF16, "avx512_bf16");
    add(AMPRT_CPU_AVX512_FP16, "avx512_fp16");
    add(AMPRT_CPU_AMX_BF16, "amx_bf16");
    return r.empty() ? std::string("baseline") : r;
  }();
  return s.c_str();
}

struct amprt_arena {
  void *base;
  size_t size;
};

extern "C" amprt_status amprt_arena_create(amprt_context *ctx, size_t bytes,
                                           amprt_arena **out) {
  if (!ctx || !out)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                       "amprt_arena_create: null context or output");
  *out = nullptr;
  size_t rounded = (bytes + 63) / 64 * 64;
  void *p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p)
    return amprt::fail(AMPRT_ERR_OUT_OF_MEMORY,
                       "amprt_arena_create: cannot allocate %zu bytes", bytes);
  auto *a = new (std::nothrow) amprt_arena{p, bytes};
  if (!a) {
    std::free(p);
    return amprt::fail(AMPRT_ERR_OUT_OF_MEMORY, "amprt_arena_create");
  }
  *out = a;
  return AMPRT_OK;
}

extern "C" void amprt_arena_destroy(amprt_arena *a) {
  if (!a)
    return;
  std::free(a->base);
  delete a;
}

extern "C" void *amprt_arena_base(amprt_arena *a) { return a ? a->base : nullptr; }
extern "C" size_t amprt_arena_size(const amprt_arena *a) { return a ? a->size : 0; }

extern "C" amprt_status amprt_arena_at(amprt_arena *a, size_t offset,
                                       size_t bytes, void **out) {
  if (!a || !out)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_arena_at: null arena");
  if (offset > a->size || bytes > a->size - offset)
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                       "amprt_arena_at: [%zu, %zu) is outside the arena of "
                       "%zu bytes",
                       offset, offset + bytes, a->size);
  *out = static_cast<char *>(a->base) + offset;
  return AMPRT_OK;
}
