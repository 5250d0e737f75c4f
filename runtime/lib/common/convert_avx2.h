//===- convert_avx2.h - eight f32 <-> f16 / bf16 in AVX2 registers -*- C++ -*-===//
//
// The vector forms of convert_bits.h's conversions, for kernels that widen,
// compute and round in registers (no f32 copy in memory). Each agrees with
// the scalar definition bit for bit, NaN included (a NaN becomes the scalar
// path's canonical quiet NaN of its sign). Callers check for AVX2 + F16C at
// run time (haveAvx2F16c) before calling any of them.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CONVERT_AVX2_H
#define AMPRT_CONVERT_AVX2_H

#if defined(__x86_64__)
#include "amprt/amprt.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>

namespace amprt::avx2 {

/// AMPRT_NO_AVX2=1 turns the runtime's own AVX2 paths off, as on a CPU
/// without AVX2 (the kernel tests' baseline rerun exercises the fallbacks).
inline bool avx2Disabled() {
  static const bool off = [] {
    const char *v = std::getenv("AMPRT_NO_AVX2");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return off;
}

/// AVX2 and F16C, found at run time.
inline bool haveAvx2F16c() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && !avx2Disabled();
  return ok;
}

/// f32 bits -> bf16 bits in the low halves of 32-bit lanes: round to nearest
/// even; a NaN becomes the quiet NaN 0x7fc0 with its sign.
__attribute__((target("avx2"))) inline __m256i roundBf16x8(__m256i v) {
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff),
                absMask = _mm256_set1_epi32(0x7fffffff), expAll = _mm256_set1_epi32(0x7f800000),
                sign = _mm256_set1_epi32(0x8000), quiet = _mm256_set1_epi32(0x7fc0);
  __m256i hi = _mm256_srli_epi32(v, 16);
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(v, bias), _mm256_and_si256(hi, one)), 16);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, absMask), expAll);
  if (_mm256_testz_si256(nan, nan)) // no NaN: the common case, no blend
    return r;
  __m256i q = _mm256_or_si256(_mm256_and_si256(hi, sign), quiet);
  return _mm256_blendv_epi8(r, q, nan);
}

/// roundBf16x8 on AVX-512: sixteen f32 bits -> bf16 bits in the low halves
/// of 32-bit lanes, the same values.
__attribute__((target("avx512f"))) inline __m512i roundBf16x16(__m512i v) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff),
                absMask = _mm512_set1_epi32(0x7fffffff), expAll = _mm512_set1_epi32(0x7f800000),
                sign = _mm512_set1_epi32(0x8000), quiet = _mm512_set1_epi32(0x7fc0);
  __m512i hi = _mm512_srli_epi32(v, 16);
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(v, bias), _mm512_and_si512(hi, one)), 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(v, absMask), expAll);
  return _mm512_mask_or_epi32(r, nan, _mm512_and_si512(hi, sign), quiet);
}

/// Eight f32 -> eight f16 (round to nearest even; a NaN becomes 0x7e00 with
/// its sign).
__attribute__((target("avx2,f16c"))) inline __m128i roundF16x8(__m256 v) {
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff), expAll = _mm256_set1_epi32(0x7f800000);
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256i bits = _mm256_castps_si256(v);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, absMask), expAll);
  if (!_mm256_testz_si256(nan, nan)) {
    __m256i canon =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x8000)),
                        _mm256_set1_epi32(0x7e00));
    __m128i c16 =
        _mm_packus_epi32(_mm256_castsi256_si128(canon), _mm256_extracti128_si256(canon, 1));
    __m128i m16 = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
    h = _mm_blendv_epi8(h, c16, m16);
  }
  return h;
}

/// Eight f16 -> eight f32 (a NaN is quieted, as f16ToF32 does).
__attribute__((target("avx2,f16c"))) inline __m256 widenF16x8(__m128i h) {
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff), expAll = _mm256_set1_epi32(0x7f800000);
  __m256i bits = _mm256_castps_si256(_mm256_cvtph_ps(h));
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, absMask), expAll);
  bits = _mm256_or_si256(bits, _mm256_and_si256(nan, _mm256_set1_epi32(0x400000)));
  return _mm256_castsi256_ps(bits);
}

/// Eight elements of type T at p + i, as f32.
template <amprt_dtype T>
__attribute__((target("avx2,f16c"))) inline __m256 load8(const void *p, int64_t i) {
  if constexpr (T == AMPRT_F32) {
    return _mm256_loadu_ps(static_cast<const float *>(p) + i);
  } else {
    __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(p) + i));
    if constexpr (T == AMPRT_F16)
      return widenF16x8(h);
    else
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

/// Eight f32 stored as type T at p + i (rounded once).
template <amprt_dtype T>
__attribute__((target("avx2,f16c"))) inline void store8(void *p, int64_t i, __m256 v) {
  if constexpr (T == AMPRT_F32) {
    _mm256_storeu_ps(static_cast<float *>(p) + i, v);
  } else {
    __m128i h;
    if constexpr (T == AMPRT_F16) {
      h = roundF16x8(v);
    } else {
      __m256i r = roundBf16x8(_mm256_castps_si256(v));
      h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i *>(static_cast<uint16_t *>(p) + i), h);
  }
}

} // namespace amprt::avx2

#endif // __x86_64__
#endif // AMPRT_CONVERT_AVX2_H
