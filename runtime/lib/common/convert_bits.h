//===- convert_bits.h - f32 <-> f16 / bf16 on bit patterns ------*- C++ -*-===//
//
// The definition of the runtime's conversions (round to nearest even, the
// IEEE subnormals, overflow to inf, one canonical quiet NaN per sign), on
// the bit patterns, so that the CPU runtime (convert.cpp) and the CUDA
// kernels (../cuda/check_kernels.cu) share one text of it.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CONVERT_BITS_H
#define AMPRT_CONVERT_BITS_H

#include <cstdint>

#ifdef __CUDACC__
#define AMPRT_HOST_DEVICE __host__ __device__
#else
#define AMPRT_HOST_DEVICE
#endif

namespace amprt::bits {

/// f32 bits -> f16 bits.
AMPRT_HOST_DEVICE inline uint16_t f32ToF16(uint32_t x) {
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

/// f16 bits -> f32 bits (exact; a NaN keeps its payload and becomes quiet).
AMPRT_HOST_DEVICE inline uint32_t f16ToF32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) // inf / NaN
    return sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0);
  if (e == 0) {
    if (m == 0)
      return sign;
    // Subnormal m * 2^-24: normalise.
    int shift = 0;
    while (!(m & 0x400u)) {
      m <<= 1;
      ++shift;
    }
    m &= 0x3ffu;
    return sign | ((uint32_t)(113 - shift) << 23) | (m << 13);
  }
  return sign | ((e + 112) << 23) | (m << 13);
}

/// f32 bits -> bf16 bits. Both results computed and one selected (no
/// branch: loops that store it, such as the optimizer's bf16 copy,
/// vectorise).
AMPRT_HOST_DEVICE inline uint16_t f32ToBf16(uint32_t x) {
  // Round to nearest even on the 16 dropped bits; overflow carries into inf.
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t quiet = ((x >> 16) & 0x8000u) | 0x7fc0u; // a NaN: the quiet NaN, its sign kept
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/// bf16 bits -> f32 bits (exact).
AMPRT_HOST_DEVICE inline uint32_t bf16ToF32(uint16_t b) { return (uint32_t)b << 16; }

} // namespace amprt::bits

#endif // AMPRT_CONVERT_BITS_H
