//===- convert.cpp - exact f32 <-> f16 / bf16 conversions ----------------===//
//
// Bit-level round-to-nearest-even conversions. The scalar functions are the
// definition; vector paths must agree with them bit for bit (the unit tests
// check every f16 / bf16 pattern and every rounding boundary).
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt.h"
#include "internal.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

inline uint32_t bitsOf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}
inline float floatOf(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

} // namespace

extern "C" uint16_t amprt_f32_to_f16(float f) {
  uint32_t x = bitsOf(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) // NaN
    return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) // >= 65520 rounds past 65504: inf (and inf itself)
    return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) { // below 2^-14: f16 subnormal or zero
    uint32_t e = a >> 23;
    if (e < 102) // below 2^-25: rounds to zero
      return (uint16_t)sign;
    // value = m * 2^(e - 150); in units of 2^-24 that is m >> (126 - e).
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t s = 126 - e; // 14..24
    uint32_t q = m >> s, r = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (r > half || (r == half && (q & 1u)))
      ++q;
    return (uint16_t)(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits
  // to nearest even; a carry into the exponent is the correct result.
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

extern "C" float amprt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) // inf / NaN
    return floatOf(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
  if (e == 0) {
    if (m == 0)
      return floatOf(sign);
    // Subnormal m * 2^-24: normalise.
    int shift = 0;
    while (!(m & 0x400u)) {
      m <<= 1;
      ++shift;
    }
    m &= 0x3ffu;
    return floatOf(sign | ((uint32_t)(113 - shift) << 23) | (m << 13));
  }
  return floatOf(sign | ((e + 112) << 23) | (m << 13));
}

extern "C" uint16_t amprt_f32_to_bf16(float f) {
  uint32_t x = bitsOf(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) // NaN
    return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
  // Round to nearest even on the 16 dropped bits; overflow carries into inf.
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

extern "C" float amprt_bf16_to_f32(uint16_t b) {
  return floatOf((uint32_t)b << 16);
}

namespace {

// Vector paths, chosen at run time (never assumed: another machine may lack
// F16C / AVX2). Each agrees with the scalar definition bit for bit, NaN
// included (a NaN becomes the scalar path's canonical quiet NaN).
#if defined(__x86_64__)
bool haveAvx2F16c() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return ok;
}

__attribute__((target("avx2,f16c"))) size_t f32ToF16Avx2(const float *x, uint16_t *y,
                                                          size_t n) {
  size_t i = 0;
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff), expAll = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i bits = _mm256_castps_si256(v);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, absMask), expAll);
    if (!_mm256_testz_si256(nan, nan)) {
      __m256i canon = _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x8000)),
          _mm256_set1_epi32(0x7e00));
      __m128i c16 = _mm_packus_epi32(_mm256_castsi256_si128(canon),
                                     _mm256_extracti128_si256(canon, 1));
      __m128i m16 = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
      h = _mm_blendv_epi8(h, c16, m16);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i), h);
  }
  return i;
}

__attribute__((target("avx2,f16c"))) size_t f16ToF32Avx2(const uint16_t *x, float *y,
                                                          size_t n) {
  size_t i = 0;
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff), expAll = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i)));
    __m256i bits = _mm256_castps_si256(v);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, absMask), expAll);
    bits = _mm256_or_si256(bits, _mm256_and_si256(nan, _mm256_set1_epi32(0x400000)));
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(bits));
  }
  return i;
}

// Plain loops the compiler vectorises for AVX2.
__attribute__((target("avx2"))) void f32ToBf16Avx2(const uint32_t *x, uint16_t *y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t v = x[i];
    uint32_t r = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16;
    uint32_t q = ((v >> 16) & 0x8000u) | 0x7fc0u;
    y[i] = (uint16_t)((v & 0x7fffffffu) > 0x7f800000u ? q : r);
  }
}

__attribute__((target("avx2"))) void bf16ToF32Avx2(const uint16_t *x, uint32_t *y, size_t n) {
  for (size_t i = 0; i < n; ++i)
    y[i] = (uint32_t)x[i] << 16;
}
#endif

/// The vector path for f32 <-> f16 / bf16; false when there is none.
bool convertFast(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n) {
#if defined(__x86_64__)
  if (!haveAvx2F16c())
    return false;
  if (st == AMPRT_F32 && dt == AMPRT_F16) {
    size_t i = f32ToF16Avx2(static_cast<const float *>(src), static_cast<uint16_t *>(dst), n);
    for (; i < n; ++i)
      static_cast<uint16_t *>(dst)[i] = amprt_f32_to_f16(static_cast<const float *>(src)[i]);
    return true;
  }
  if (st == AMPRT_F16 && dt == AMPRT_F32) {
    size_t i = f16ToF32Avx2(static_cast<const uint16_t *>(src), static_cast<float *>(dst), n);
    for (; i < n; ++i)
      static_cast<float *>(dst)[i] = amprt_f16_to_f32(static_cast<const uint16_t *>(src)[i]);
    return true;
  }
  if (st == AMPRT_F32 && dt == AMPRT_BF16) {
    f32ToBf16Avx2(static_cast<const uint32_t *>(src), static_cast<uint16_t *>(dst), n);
    return true;
  }
  if (st == AMPRT_BF16 && dt == AMPRT_F32) {
    bf16ToF32Avx2(static_cast<const uint16_t *>(src), static_cast<uint32_t *>(dst), n);
    return true;
  }
#endif
  (void)src, (void)st, (void)dst, (void)dt, (void)n;
  return false;
}

} // namespace

namespace amprt {

void convertScalar(const void *src, amprt_dtype st, void *dst, amprt_dtype dt,
                   size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v;
    switch (st) {
    case AMPRT_F32:
      v = static_cast<const float *>(src)[i];
      break;
    case AMPRT_F16:
      v = amprt_f16_to_f32(static_cast<const uint16_t *>(src)[i]);
      break;
    default:
      v = amprt_bf16_to_f32(static_cast<const uint16_t *>(src)[i]);
      break;
    }
    switch (dt) {
    case AMPRT_F32:
      static_cast<float *>(dst)[i] = v;
      break;
    case AMPRT_F16:
      static_cast<uint16_t *>(dst)[i] = amprt_f32_to_f16(v);
      break;
    default:
      static_cast<uint16_t *>(dst)[i] = amprt_f32_to_bf16(v);
      break;
    }
  }
}

} // namespace amprt

extern "C" amprt_status amprt_convert(const void *src, amprt_dtype st,
                                      void *dst, amprt_dtype dt, size_t n) {
  auto isFloat = [](amprt_dtype t) {
    return t == AMPRT_F32 || t == AMPRT_F16 || t == AMPRT_BF16;
  };
  if (!isFloat(st) || !isFloat(dt))
    return amprt::fail(AMPRT_ERR_UNSUPPORTED,
                       "amprt_convert: only f32, f16 and bf16 are supported, "
                       "got %s -> %s",
                       amprt_dtype_name(st) ? amprt_dtype_name(st) : "?",
                       amprt_dtype_name(dt) ? amprt_dtype_name(dt) : "?");
  if (n && (!src || !dst))
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT,
                       "amprt_convert: null buffer for %zu elements", n);
  if (st == dt) {
    std::memmove(dst, src, n * amprt_dtype_size(st));
    return AMPRT_OK;
  }
  if (!convertFast(src, st, dst, dt, n))
    amprt::convertScalar(src, st, dst, dt, n);
  return AMPRT_OK;
}
