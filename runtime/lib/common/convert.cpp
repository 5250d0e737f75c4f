//===- convert.cpp - exact f32 <-> f16 / bf16 conversions ----------------===//
//
// Bit-level round-to-nearest-even conversions. The scalar functions are the
// definition; vector paths must agree with them bit for bit (the unit tests
// check every f16 / bf16 pattern and every rounding boundary).
//
//===----------------------------------------------------------------------===//

#include "common/convert.h"
#include "amprt/amprt.h"
#include "common/check.h"
#include "common/convert_avx2.h"
#include "common/convert_bits.h"

#include <cstdlib>
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

extern "C" uint16_t amprt_f32_to_f16(float f) { return amprt::bits::f32ToF16(bitsOf(f)); }

extern "C" float amprt_f16_to_f32(uint16_t h) { return floatOf(amprt::bits::f16ToF32(h)); }

extern "C" uint16_t amprt_f32_to_bf16(float f) { return amprt::bits::f32ToBf16(bitsOf(f)); }

extern "C" float amprt_bf16_to_f32(uint16_t b) { return floatOf(amprt::bits::bf16ToF32(b)); }

namespace {

// Vector paths, chosen at run time (never assumed: another machine may lack
// F16C / AVX2). Each agrees with the scalar definition bit for bit, NaN
// included (a NaN becomes the scalar path's canonical quiet NaN).
#if defined(__x86_64__)
using amprt::avx2::haveAvx2F16c;
using amprt::avx2::roundBf16x8;

__attribute__((target("avx2,f16c"))) size_t f32ToF16Avx2(const float *x, uint16_t *y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i),
                     amprt::avx2::roundF16x8(_mm256_loadu_ps(x + i)));
  return i;
}

__attribute__((target("avx2,f16c"))) size_t f16ToF32Avx2(const uint16_t *x, float *y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(
        y + i, amprt::avx2::widenF16x8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i))));
  return i;
}

// f32 -> bf16, round to nearest even, NaN to the scalar path's quiet NaN
// (sign kept): 16 at a time, 32-bit lanes rounded (roundBf16x8), then packed
// (the values are below 2^16, so unsigned saturation is exact) and put back
// in order (packus works within 128-bit halves). The compiler's
// vectorisation of the loop below was a third slower than f16's F16C path.
__attribute__((target("avx2"))) void f32ToBf16Avx2(const uint32_t *x, uint16_t *y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i a = roundBf16x8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + i)));
    __m256i b = roundBf16x8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + i + 8)));
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), packed);
  }
  for (; i < n; ++i) {
    uint32_t v = x[i];
    uint32_t r = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16;
    uint32_t q = ((v >> 16) & 0x8000u) | 0x7fc0u;
    y[i] = (uint16_t)((v & 0x7fffffffu) > 0x7f800000u ? q : r);
  }
}

__attribute__((target("avx2"))) void bf16ToF32Avx2(const uint16_t *x, uint32_t *y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), _mm256_slli_epi32(w, 16));
  }
  for (; i < n; ++i)
    y[i] = (uint32_t)x[i] << 16;
}

// The same two on AVX-512 (F + BW): 16 lanes at a time, the tail by a
// masked load and store (no scalar tail, so a run of 16 elements or fewer,
// such as a batch norm's plane of 4 x 4, is one masked step). f32 -> bf16
// rounds as roundBf16x8 does (roundBf16x16), bit for bit.
// GCC 12 warns of the undefined vectors its own AVX-512 intrinsics start
// from (its bug 105593), here where they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f,avx512bw"))) void f32ToBf16Avx512(const uint32_t *x, uint16_t *y,
                                                                 size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    __m512i r = amprt::avx2::roundBf16x16(_mm512_maskz_loadu_epi32(m, x + i));
    _mm512_mask_cvtepi32_storeu_epi16(y + i, m, r);
  }
}

__attribute__((target("avx512f,avx512bw"))) void bf16ToF32Avx512(const uint16_t *x, uint32_t *y,
                                                                 size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    __m512i w = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, x + i)));
    _mm512_mask_storeu_epi32(y + i, m, _mm512_slli_epi32(w, 16));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif

/// The vector path for f32 <-> f16 / bf16; false when there is none.
} // namespace

namespace amprt {
/// AVX-512 F + BW, found at run time; AMPRT_NO_AVX512=1 turns these paths
/// off (the kernel tests' AVX2 rerun then exercises the AVX2 ones on an
/// AVX-512 CPU), as AMPRT_NO_AVX2 does for AVX2.
bool haveAvx512bw() {
#if defined(__x86_64__)
  static const bool ok = [] {
    const char *v = std::getenv("AMPRT_NO_AVX512");
    bool off = v && *v && std::strcmp(v, "0") != 0;
    return !off && haveAvx2F16c() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw");
  }();
  return ok;
#else
  return false;
#endif
}
} // namespace amprt

namespace {
using amprt::haveAvx512bw;

bool convertFast(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n) {
#if defined(__x86_64__)
  if (!haveAvx2F16c())
    return false;
  if (haveAvx512bw() && st == AMPRT_F32 && dt == AMPRT_BF16) {
    f32ToBf16Avx512(static_cast<const uint32_t *>(src), static_cast<uint16_t *>(dst), n);
    return true;
  }
  if (haveAvx512bw() && st == AMPRT_BF16 && dt == AMPRT_F32) {
    bf16ToF32Avx512(static_cast<const uint16_t *>(src), static_cast<uint32_t *>(dst), n);
    return true;
  }
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

void convertScalar(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n) {
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

void convertRun(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n) {
  if (st == dt)
    std::memmove(dst, src, n * amprt_dtype_size(st));
  else if (!convertFast(src, st, dst, dt, n))
    convertScalar(src, st, dst, dt, n);
}

} // namespace amprt

extern "C" amprt_status amprt_convert(const void *src, amprt_dtype st, void *dst, amprt_dtype dt,
                                      size_t n) {
  auto isFloat = [](amprt_dtype t) { return t == AMPRT_F32 || t == AMPRT_F16 || t == AMPRT_BF16; };
  if (!isFloat(st) || !isFloat(dt))
    return amprt::fail(AMPRT_ERR_UNSUPPORTED,
                       "amprt_convert: only f32, f16 and bf16 are supported, "
                       "got %s -> %s",
                       amprt_dtype_name(st) ? amprt_dtype_name(st) : "?",
                       amprt_dtype_name(dt) ? amprt_dtype_name(dt) : "?");
  if (n && (!src || !dst))
    return amprt::fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_convert: null buffer for %zu elements",
                       n);
  amprt::convertRun(src, st, dst, dt, n);
  return AMPRT_OK;
}

void amprt::widenRun(const void *src, amprt_dtype t, float *dst, int64_t n) {
  if (n >= 8 || t == AMPRT_F32) {
    convertRun(src, t, dst, AMPRT_F32, (size_t)n);
    return;
  }
  const uint16_t *h = static_cast<const uint16_t *>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b = t == AMPRT_BF16 ? bits::bf16ToF32(h[i]) : bits::f16ToF32(h[i]);
    std::memcpy(dst + i, &b, 4);
  }
}

void amprt::narrowRun(const float *src, void *dst, amprt_dtype t, int64_t n) {
  if (n >= 8 || t == AMPRT_F32) {
    convertRun(src, AMPRT_F32, dst, t, (size_t)n);
    return;
  }
  uint16_t *h = static_cast<uint16_t *>(dst);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, src + i, 4);
    h[i] = t == AMPRT_BF16 ? bits::f32ToBf16(b) : bits::f32ToF16(b);
  }
}
