//===- TestUtil.h - tensors, references and tolerances for kernel tests ---===//
//
// Inputs are fresh random values (never zeros; a new seed every run, printed
// on failure); references are computed in double from the values actually
// stored (after rounding to f16 / bf16). A result passes when it is within
// the tolerance of its element type; NaN passes only where the reference is
// NaN.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_UNITTESTS_TESTUTIL_H
#define AMPRT_UNITTESTS_TESTUTIL_H

#include "amprt/amprt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace amprt_test {

inline uint64_t testSeed() {
  static const uint64_t seed = std::random_device{}();
  return seed;
}

inline std::mt19937_64 &rng() {
  static std::mt19937_64 r(testSeed());
  return r;
}

/// A tensor owning its bytes.
struct Buf {
  amprt_dtype dtype = AMPRT_F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
  amprt_tensor t;

  Buf() = default;
  Buf(amprt_dtype dt, std::vector<int64_t> s) : dtype(dt), shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    bytes.assign(std::max<int64_t>(n, 1) * amprt_dtype_size(dt), 0);
    refresh();
  }
  Buf(const Buf &o) : dtype(o.dtype), shape(o.shape), bytes(o.bytes) { refresh(); }
  Buf &operator=(const Buf &o) {
    dtype = o.dtype;
    shape = o.shape;
    bytes = o.bytes;
    refresh();
    return *this;
  }
  void refresh() {
    t = amprt_tensor_make(bytes.data(), dtype, (int32_t)shape.size(), shape.data());
  }
  int64_t numel() const { return amprt_tensor_numel(&t); }
  amprt_tensor *p() { return &t; }
  double get(int64_t i) const {
    switch (dtype) {
    case AMPRT_F32:
      return reinterpret_cast<const float *>(bytes.data())[i];
    case AMPRT_F16:
      return amprt_f16_to_f32(reinterpret_cast<const uint16_t *>(bytes.data())[i]);
    case AMPRT_BF16:
      return amprt_bf16_to_f32(reinterpret_cast<const uint16_t *>(bytes.data())[i]);
    case AMPRT_I1:
      return bytes[i] ? 1 : 0;
    case AMPRT_I32:
      return reinterpret_cast<const int32_t *>(bytes.data())[i];
    case AMPRT_I64:
      return (double)reinterpret_cast<const int64_t *>(bytes.data())[i];
    case AMPRT_I8:
      return reinterpret_cast<const int8_t *>(bytes.data())[i];
    case AMPRT_U8:
      return bytes[i];
    default:
      return NAN;
    }
  }
  void set(int64_t i, double v) {
    switch (dtype) {
    case AMPRT_F32:
      reinterpret_cast<float *>(bytes.data())[i] = (float)v;
      break;
    case AMPRT_F16:
      reinterpret_cast<uint16_t *>(bytes.data())[i] = amprt_f32_to_f16((float)v);
      break;
    case AMPRT_BF16:
      reinterpret_cast<uint16_t *>(bytes.data())[i] = amprt_f32_to_bf16((float)v);
      break;
    case AMPRT_I1:
      bytes[i] = v != 0;
      break;
    case AMPRT_I32:
      reinterpret_cast<int32_t *>(bytes.data())[i] = (int32_t)v;
      break;
    case AMPRT_I64:
      reinterpret_cast<int64_t *>(bytes.data())[i] = (int64_t)v;
      break;
    case AMPRT_I8:
      reinterpret_cast<int8_t *>(bytes.data())[i] = (int8_t)v;
      break;
    case AMPRT_U8:
      bytes[i] = (unsigned char)v;
      break;
    default:
      break;
    }
  }
  std::vector<double> values() const {
    std::vector<double> v(numel());
    for (int64_t i = 0; i < numel(); ++i)
      v[i] = get(i);
    return v;
  }
};

/// Normal(mean, stddev) values, none of them exactly zero.
inline Buf randn(amprt_dtype dt, std::vector<int64_t> shape, double stddev = 1.0,
                 double mean = 0.0) {
  Buf b(dt, std::move(shape));
  std::normal_distribution<double> nd(mean, stddev);
  for (int64_t i = 0; i < b.numel(); ++i) {
    double v;
    do {
      v = nd(rng());
    } while (v == 0.0);
    b.set(i, v);
    if (b.get(i) == 0.0)
      b.set(i, stddev * 0.5);
  }
  return b;
}

inline Buf uniform(amprt_dtype dt, std::vector<int64_t> shape, double lo, double hi) {
  Buf b(dt, std::move(shape));
  std::uniform_real_distribution<double> ud(lo, hi);
  for (int64_t i = 0; i < b.numel(); ++i) {
    double v;
    do {
      v = ud(rng());
    } while (v == 0.0);
    b.set(i, v);
  }
  return b;
}

inline Buf randint(amprt_dtype dt, std::vector<int64_t> shape, int64_t lo, int64_t hi) {
  Buf b(dt, std::move(shape));
  std::uniform_int_distribution<int64_t> ud(lo, hi - 1);
  for (int64_t i = 0; i < b.numel(); ++i)
    b.set(i, (double)ud(rng()));
  return b;
}

/// Unit in the last place of the type at |v| (the rounding step).
inline double ulp(amprt_dtype t, double v) {
  int mant = t == AMPRT_F32 ? 23 : t == AMPRT_F16 ? 10 : 7;
  int minExp = t == AMPRT_F32 ? -126 : t == AMPRT_F16 ? -14 : -126;
  double a = std::fabs(v);
  if (!std::isfinite(a)) // inf or NaN has no exponent: the smallest step
    return std::ldexp(1.0, minExp - mant);
  int e = a > 0 ? (int)std::floor(std::log2(a)) : minExp;
  if (e < minExp)
    e = minExp;
  return std::ldexp(1.0, e - mant);
}

/// Compares got against ref elementwise: |got - ref| <= ulps * ulp(type, ref)
/// + rel * |ref| + abs. NaN only where the reference is NaN; infinities must
/// match exactly.
inline ::testing::AssertionResult near(const Buf &got, const std::vector<double> &ref, double ulps,
                                       double rel = 0.0, double abs = 0.0) {
  if ((int64_t)ref.size() != got.numel())
    return ::testing::AssertionFailure()
           << "size " << got.numel() << " vs reference " << ref.size();
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.get(i), r = ref[i];
    bool ok;
    if (std::isnan(r) || std::isnan(g))
      ok = std::isnan(r) && std::isnan(g);
    else if (std::isinf(r) || std::isinf(g))
      ok = g == r;
    else
      ok = std::fabs(g - r) <= ulps * ulp(got.dtype, r) + rel * std::fabs(r) + abs;
    if (!ok)
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << g << ", reference " << r << " ("
             << amprt_dtype_name(got.dtype) << ", seed " << testSeed() << ")";
  }
  return ::testing::AssertionSuccess();
}

#define AMPRT_OK_OR_FAIL(expr) ASSERT_EQ((expr), AMPRT_OK) << amprt_last_error()

} // namespace amprt_test

#endif // AMPRT_UNITTESTS_TESTUTIL_H
