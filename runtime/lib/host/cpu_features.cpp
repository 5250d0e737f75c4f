//===- cpu_features.cpp - what this CPU has --------------------------------===//

#include "amprt/amprt.h"

#include <cpuid.h>
#include <string>

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
