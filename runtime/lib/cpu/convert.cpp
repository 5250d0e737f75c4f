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
  amprt::convertScalar(src, st, dst, dt, n);
  return AMPRT_OK;
}
