//===- ConvertTest.cpp - exact fp16 / bf16 conversions -------------------===//
//
// Checks the runtime's conversions against references that share no code
// with them: the compiler's own _Float16 conversion (libgcc / F16C) for fp16,
// and a nearest-value search in double precision for both formats. Every
// fp16 / bf16 bit pattern is checked in both directions, every rounding
// boundary (each midpoint and its f32 neighbours), and random f32 values.
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

uint32_t bitsOf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}
float floatOf(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Reference decoding from the format's definition, in double.
double decodeF16(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double sign = s ? -1.0 : 1.0;
  if (e == 0x1f)
    return m ? NAN : sign * INFINITY;
  if (e == 0)
    return sign * std::ldexp((double)m, -24);
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}
double decodeBF16(uint16_t b) {
  int s = b >> 15, e = (b >> 7) & 0xff, m = b & 0x7f;
  double sign = s ? -1.0 : 1.0;
  if (e == 0xff)
    return m ? NAN : sign * INFINITY;
  if (e == 0)
    return sign * std::ldexp((double)m, -133);
  return sign * std::ldexp(1.0 + m / 128.0, e - 127);
}

// Reference rounding: the nearest of the two neighbouring finite values of
// the 16-bit format (by exhaustive search over the sorted positive values),
// ties to the even bit pattern, and the IEEE overflow rule (a value at or
// past max + half an ulp is inf).
struct Format {
  std::vector<double> values; // all finite non-negative values, ascending
  std::vector<uint16_t> bits;
  double maxFinite, overflowAt;
  uint16_t infBits, nanBits;
};

Format makeFormat(double (*decode)(uint16_t), uint16_t inf, uint16_t nan, double ulpAtMax) {
  Format f;
  for (uint32_t b = 0; b < 0x8000; ++b) {
    double v = decode((uint16_t)b);
    if (std::isfinite(v)) {
      f.values.push_back(v);
      f.bits.push_back((uint16_t)b);
    }
  }
  f.maxFinite = f.values.back();
  f.overflowAt = f.maxFinite + ulpAtMax / 2;
  f.infBits = inf;
  f.nanBits = nan;
  return f;
}

uint16_t referenceRound(const Format &f, float x) {
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x))
    return sign | f.nanBits;
  double a = std::fabs((double)x);
  if (a >= f.overflowAt)
    return sign | f.infBits;
  auto it = std::lower_bound(f.values.begin(), f.values.end(), a);
  size_t hi = it - f.values.begin();
  if (hi < f.values.size() && f.values[hi] == a)
    return sign | f.bits[hi];
  if (hi == f.values.size()) // between max and the overflow threshold
    return sign | f.bits.back();
  size_t lo = hi - 1;
  double dl = a - f.values[lo], dh = f.values[hi] - a;
  size_t pick = dl < dh ? lo : dh < dl ? hi : ((f.bits[lo] & 1) ? hi : lo);
  return sign | f.bits[pick];
}

const Format &f16Format() {
  static Format f = makeFormat(decodeF16, 0x7c00, 0x7e00, 32.0);
  return f;
}
const Format &bf16Format() {
  static Format f = makeFormat(decodeBF16, 0x7f80, 0x7fc0, std::ldexp(1.0, 127 - 7));
  return f;
}

// Every f32 value whose rounding is decided differently from its
// neighbours: each 16-bit value, each midpoint between consecutive values,
// and the f32 values one ulp either side of those.
std::vector<float> boundaryInputs(const Format &f) {
  std::vector<float> out;
  auto push3 = [&](float v) {
    out.push_back(v);
    out.push_back(std::nextafter(v, 0.0f));
    out.push_back(std::nextafter(v, INFINITY));
  };
  for (size_t i = 0; i < f.values.size(); ++i) {
    push3((float)f.values[i]);
    double next = i + 1 < f.values.size() ? f.values[i + 1] : f.maxFinite * 2; // toward inf
    double mid = (f.values[i] + next) / 2;
    if (mid < 3.4e38)
      push3((float)mid); // exact: 16-bit midpoints fit in f32
  }
  push3((float)f.overflowAt);
  size_t n = out.size();
  for (size_t i = 0; i < n; ++i)
    out.push_back(-out[i]);
  out.push_back(INFINITY);
  out.push_back(-INFINITY);
  return out;
}

TEST(ConvertF16, DecodesEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float got = amprt_f16_to_f32((uint16_t)b);
    double want = decodeF16((uint16_t)b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << "pattern 0x" << std::hex << b;
      EXPECT_EQ(std::signbit(got), (b & 0x8000) != 0);
      continue;
    }
    ASSERT_EQ((double)got, want) << "pattern 0x" << std::hex << b;
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << b;
    // The compiler's own conversion agrees bit for bit.
    _Float16 h;
    uint16_t hb = (uint16_t)b;
    std::memcpy(&h, &hb, 2);
    ASSERT_EQ(bitsOf(got), bitsOf((float)h)) << std::hex << b;
  }
}

TEST(ConvertF16, RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = amprt_f16_to_f32((uint16_t)b);
    uint16_t back = amprt_f32_to_f16(f);
    if (std::isnan(f))
      ASSERT_EQ(back, (b & 0x8000) | 0x7e00) << std::hex << b;
    else
      ASSERT_EQ(back, b) << std::hex << b;
  }
}

TEST(ConvertF16, RoundsEveryBoundaryToNearestEven) {
  const Format &f = f16Format();
  std::vector<float> inputs = boundaryInputs(f);
  ASSERT_GT(inputs.size(), 300000u);
  for (float x : inputs) {
    uint16_t got = amprt_f32_to_f16(x);
    ASSERT_EQ(got, referenceRound(f, x)) << "x = " << x << " (0x" << std::hex << bitsOf(x) << ")";
    _Float16 h = (_Float16)x;
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(got, hb) << "x = " << x << " (0x" << std::hex << bitsOf(x) << ")";
  }
}

TEST(ConvertF16, RoundsRandomValues) {
  const Format &f = f16Format();
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    float x = floatOf(bits(rng));
    uint16_t got = amprt_f32_to_f16(x);
    if (std::isnan(x)) {
      ASSERT_EQ(got & 0x7fff, 0x7e00);
      continue;
    }
    ASSERT_EQ(got, referenceRound(f, x)) << "x = " << x;
  }
}

TEST(ConvertF16, SpecialValues) {
  EXPECT_EQ(amprt_f32_to_f16(65504.0f), 0x7bff);  // max finite
  EXPECT_EQ(amprt_f32_to_f16(65519.99f), 0x7bff); // below the midpoint
  EXPECT_EQ(amprt_f32_to_f16(65520.0f), 0x7c00);  // midpoint: ties to inf
  EXPECT_EQ(amprt_f32_to_f16(1e6f), 0x7c00);      // overflow
  EXPECT_EQ(amprt_f32_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(amprt_f32_to_f16(std::ldexp(1.0f, -24)), 0x0001); // min subnormal
  EXPECT_EQ(amprt_f32_to_f16(std::ldexp(1.0f, -25)), 0x0000); // tie -> even 0
  EXPECT_EQ(amprt_f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(amprt_f32_to_f16(std::ldexp(1.0f, -14)), 0x0400); // min normal
  EXPECT_EQ(amprt_f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(amprt_f32_to_f16(1e-8f), 0x0000); // gradient underflow
  EXPECT_EQ(amprt_f32_to_f16(-NAN), 0xfe00);
}

TEST(ConvertBF16, DecodesEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float got = amprt_bf16_to_f32((uint16_t)b);
    double want = decodeBF16((uint16_t)b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << b;
      continue;
    }
    ASSERT_EQ((double)got, want) << "pattern 0x" << std::hex << b;
    ASSERT_EQ(std::signbit(got), std::signbit(want));
  }
}

TEST(ConvertBF16, RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = amprt_bf16_to_f32((uint16_t)b);
    uint16_t back = amprt_f32_to_bf16(f);
    if (std::isnan(f))
      ASSERT_EQ(back, (b & 0x8000) | 0x7fc0) << std::hex << b;
    else
      ASSERT_EQ(back, b) << std::hex << b;
  }
}

TEST(ConvertBF16, RoundsEveryBoundaryToNearestEven) {
  const Format &f = bf16Format();
  std::vector<float> inputs = boundaryInputs(f);
  for (float x : inputs)
    ASSERT_EQ(amprt_f32_to_bf16(x), referenceRound(f, x))
        << "x = " << x << " (0x" << std::hex << bitsOf(x) << ")";
}

TEST(ConvertBF16, RoundsRandomValues) {
  const Format &f = bf16Format();
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    float x = floatOf(bits(rng));
    if (std::isnan(x))
      continue;
    ASSERT_EQ(amprt_f32_to_bf16(x), referenceRound(f, x)) << "x = " << x;
  }
}

TEST(ConvertBulk, MatchesScalarAndRejectsBadTypes) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> src(1027);
  for (float &v : src)
    v = normal(rng);
  src[5] = NAN;
  src[6] = INFINITY;
  std::vector<uint16_t> h(src.size()), b(src.size());
  ASSERT_EQ(amprt_convert(src.data(), AMPRT_F32, h.data(), AMPRT_F16, src.size()), AMPRT_OK);
  ASSERT_EQ(amprt_convert(src.data(), AMPRT_F32, b.data(), AMPRT_BF16, src.size()), AMPRT_OK);
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(h[i], amprt_f32_to_f16(src[i])) << i;
    ASSERT_EQ(b[i], amprt_f32_to_bf16(src[i])) << i;
  }
  // f16 -> bf16 goes through the exact f32 value: rounded once.
  std::vector<uint16_t> hb(src.size());
  ASSERT_EQ(amprt_convert(h.data(), AMPRT_F16, hb.data(), AMPRT_BF16, h.size()), AMPRT_OK);
  for (size_t i = 0; i < src.size(); ++i)
    ASSERT_EQ(hb[i], referenceRound(bf16Format(), amprt_f16_to_f32(h[i]))) << i;
  EXPECT_EQ(amprt_convert(src.data(), AMPRT_I32, h.data(), AMPRT_F16, 4), AMPRT_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(amprt_last_error()).find("i32"), std::string::npos);
  EXPECT_EQ(amprt_convert(nullptr, AMPRT_F32, h.data(), AMPRT_F16, 4), AMPRT_ERR_INVALID_ARGUMENT);
}

} // namespace

// The vector paths of amprt_convert (F16C / AVX2 where the CPU has them)
// against the scalar definition: every 16-bit pattern decoded, and f32 bit
// patterns of every kind (random, NaN payloads, subnormals, the rounding
// boundaries of both formats) encoded, at every alignment of the tail.
TEST(ConvertBulk, EveryPatternAgreesWithScalar) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i)
    all[i] = (uint16_t)i;
  std::vector<float> f(all.size());
  for (amprt_dtype t : {AMPRT_F16, AMPRT_BF16}) {
    ASSERT_EQ(amprt_convert(all.data(), t, f.data(), AMPRT_F32, all.size()), AMPRT_OK);
    for (uint32_t i = 0; i < 65536; ++i) {
      float want = t == AMPRT_F16 ? amprt_f16_to_f32(all[i]) : amprt_bf16_to_f32(all[i]);
      ASSERT_EQ(bitsOf(f[i]), bitsOf(want)) << amprt_dtype_name(t) << " pattern " << i;
    }
  }
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> src;
  for (int i = 0; i < 300000; ++i)
    src.push_back(floatOf(bits(rng)));
  for (uint32_t b : {0x7f800001u, 0xffc00000u, 0x7fbfffffu, 0x00000001u, 0x807fffffu, 0x477ff000u,
                     0x477fefffu, 0x33000000u, 0x33000001u, 0x38800000u})
    src.push_back(floatOf(b));
  for (uint32_t h = 0; h < 65536; h += 7) // halfway points between f16 neighbours
    src.push_back(floatOf(bitsOf(amprt_f16_to_f32((uint16_t)h)) + 0x1000u));
  for (size_t off = 0; off < 9; ++off) {
    size_t n = src.size() - off;
    std::vector<uint16_t> h(n), b(n);
    ASSERT_EQ(amprt_convert(src.data() + off, AMPRT_F32, h.data(), AMPRT_F16, n), AMPRT_OK);
    ASSERT_EQ(amprt_convert(src.data() + off, AMPRT_F32, b.data(), AMPRT_BF16, n), AMPRT_OK);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[i], amprt_f32_to_f16(src[off + i])) << "0x" << std::hex << bitsOf(src[off + i]);
      ASSERT_EQ(b[i], amprt_f32_to_bf16(src[off + i])) << "0x" << std::hex << bitsOf(src[off + i]);
    }
  }
}
