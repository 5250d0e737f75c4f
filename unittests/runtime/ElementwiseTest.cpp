//===- ElementwiseTest.cpp - elementwise kernels against double ----------===//

#include "cpu/elementwise/elementwise.h"
#include "TestUtil.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>

using namespace amprt_test;

namespace {

const amprt_dtype kFloats[] = {AMPRT_F32, AMPRT_F16, AMPRT_BF16};

double refUnary(amprt_unary_op op, double x, double alpha, double beta = 0.0) {
  switch (op) {
  case AMPRT_UNARY_IDENTITY:
    return x;
  case AMPRT_UNARY_RELU:
    return std::isnan(x) ? x : x > 0 ? x : 0; // NaN propagates
  case AMPRT_UNARY_SQRT:
    return std::sqrt(x);
  case AMPRT_UNARY_EXP:
    return std::exp(x);
  case AMPRT_UNARY_LOG:
    return std::log(x);
  case AMPRT_UNARY_ERF:
    return std::erf(x);
  case AMPRT_UNARY_TANH:
    return std::tanh(x);
  case AMPRT_UNARY_SIGMOID:
    return 1.0 / (1.0 + std::exp(-x));
  case AMPRT_UNARY_GELU:
    return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
  case AMPRT_UNARY_GELU_TANH: // 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), exact in double
    return x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  case AMPRT_UNARY_LEAKY_RELU:
    return x >= 0 ? x : alpha * x;
  case AMPRT_UNARY_ABS:
    return std::fabs(x);
  case AMPRT_UNARY_RECIPROCAL:
    return 1.0 / x;
  case AMPRT_UNARY_SOFTPLUS:
    return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  case AMPRT_UNARY_ELU:
    return x > 0 ? x : alpha * std::expm1(x);
  case AMPRT_UNARY_CELU:
    return std::isnan(x) ? x : std::max(0.0, x) + std::min(0.0, alpha * std::expm1(x / alpha));
  case AMPRT_UNARY_SELU:
    return x > 0 ? beta * x : beta * alpha * std::expm1(x);
  case AMPRT_UNARY_HARD_SIGMOID:
    return std::isnan(x) ? x : std::clamp(alpha * x + beta, 0.0, 1.0);
  case AMPRT_UNARY_HARD_SWISH:
    return std::isnan(x) ? x : x * std::clamp(x / 6 + 0.5, 0.0, 1.0);
  case AMPRT_UNARY_SOFTSIGN:
    return x / (1 + std::fabs(x));
  case AMPRT_UNARY_SIN:
    return std::sin(x);
  case AMPRT_UNARY_COS:
    return std::cos(x);
  case AMPRT_UNARY_FLOOR:
    return std::floor(x);
  case AMPRT_UNARY_CEIL:
    return std::ceil(x);
  case AMPRT_UNARY_ROUND:
    return std::nearbyint(x); // halves to even
  case AMPRT_UNARY_SIGN:
    return std::isnan(x) ? x : x > 0 ? 1 : x < 0 ? -1 : 0;
  case AMPRT_UNARY_CLAMP:
    return std::isnan(x) ? x : std::min(std::max(x, alpha), beta);
  case AMPRT_UNARY_THRESHOLDED_RELU:
    return std::isnan(x) ? x : x > alpha ? x : 0;
  case AMPRT_UNARY_TAN:
    return std::tan(x);
  case AMPRT_UNARY_ASIN:
    return std::asin(x);
  case AMPRT_UNARY_ACOS:
    return std::acos(x);
  case AMPRT_UNARY_ATAN:
    return std::atan(x);
  case AMPRT_UNARY_SINH:
    return std::sinh(x);
  case AMPRT_UNARY_COSH:
    return std::cosh(x);
  case AMPRT_UNARY_ASINH:
    return std::asinh(x);
  case AMPRT_UNARY_ACOSH:
    return std::acosh(x);
  case AMPRT_UNARY_ATANH:
    return std::atanh(x);
  case AMPRT_UNARY_MISH: // x tanh(log(1 + e^x)), the log without overflow
    return x * std::tanh(x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)));
  }
  return NAN;
}

// Derivatives by central differences in long double, independent of the
// closed forms the kernels use.
double refDerivative(amprt_unary_op op, double x, double alpha, double beta = 0.0) {
  // The piecewise-linear ones exactly (a central difference straddles the
  // kink when x lies within h of 0).
  if (op == AMPRT_UNARY_RELU)
    return x > 0 ? 1.0 : 0.0;
  if (op == AMPRT_UNARY_LEAKY_RELU) // torch: the slope at 0
    return x > 0 ? 1.0 : alpha;
  if (op == AMPRT_UNARY_ABS)
    return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
  // PyTorch's at the kinks (measured on torch 2.15): clamp with scalar
  // bounds passes none of dy at its bounds, hardsigmoid none at its corners,
  // hardswish x / 3 + 1/2 strictly inside (-3, 3): 0 at -3, 1 at 3.
  if (op == AMPRT_UNARY_CLAMP)
    return x > alpha && x < beta ? 1.0 : 0.0;
  if (op == AMPRT_UNARY_THRESHOLDED_RELU)
    return x > alpha ? 1.0 : 0.0;
  if (op == AMPRT_UNARY_HARD_SIGMOID)
    return alpha * x + beta > 0 && alpha * x + beta < 1 ? alpha : 0.0;
  if (op == AMPRT_UNARY_HARD_SWISH)
    return x <= -3 ? 0.0 : x < 3 ? x / 3 + 0.5 : 1.0;
  if (op == AMPRT_UNARY_FLOOR || op == AMPRT_UNARY_CEIL || op == AMPRT_UNARY_ROUND ||
      op == AMPRT_UNARY_SIGN)
    return 0.0;
  long double h = 1e-6L * std::max(1.0L, (long double)std::fabs(x));
  return (double)(((long double)refUnary(op, (double)(x + h), alpha, beta) -
                   (long double)refUnary(op, (double)(x - h), alpha, beta)) /
                  (2 * h));
}

// The parameters each op is tested with (alpha 0.1 for the others).
std::pair<float, float> params(amprt_unary_op op) {
  switch (op) {
  case AMPRT_UNARY_ELU:
    return {0.7f, 0.0f};
  case AMPRT_UNARY_CELU:
    return {1.3f, 0.0f};
  case AMPRT_UNARY_SELU:
    return {1.67326319f, 1.05070102f};
  case AMPRT_UNARY_HARD_SIGMOID:
    return {0.2f, 0.5f};
  case AMPRT_UNARY_CLAMP:
    return {-1.0f, 2.0f};
  case AMPRT_UNARY_THRESHOLDED_RELU:
    return {0.5f, 0.0f};
  default:
    return {0.1f, 0.0f};
  }
}

const amprt_unary_op kNewOps[] = {AMPRT_UNARY_ELU,        AMPRT_UNARY_CELU,
                                  AMPRT_UNARY_SELU,       AMPRT_UNARY_HARD_SIGMOID,
                                  AMPRT_UNARY_HARD_SWISH, AMPRT_UNARY_SOFTSIGN,
                                  AMPRT_UNARY_SIN,        AMPRT_UNARY_COS,
                                  AMPRT_UNARY_FLOOR,      AMPRT_UNARY_CEIL,
                                  AMPRT_UNARY_ROUND,      AMPRT_UNARY_SIGN,
                                  AMPRT_UNARY_CLAMP,      AMPRT_UNARY_THRESHOLDED_RELU,
                                  AMPRT_UNARY_TAN,        AMPRT_UNARY_ASIN,
                                  AMPRT_UNARY_ACOS,       AMPRT_UNARY_ATAN,
                                  AMPRT_UNARY_SINH,       AMPRT_UNARY_COSH,
                                  AMPRT_UNARY_ASINH,      AMPRT_UNARY_ACOSH,
                                  AMPRT_UNARY_ATANH,      AMPRT_UNARY_MISH};

// Inputs inside the domain of the inverse functions (mostly: a few of the
// randn ones fall outside, where both sides must give NaN).
bool unitDomain(amprt_unary_op op) {
  return op == AMPRT_UNARY_ASIN || op == AMPRT_UNARY_ACOS || op == AMPRT_UNARY_ATANH;
}

} // namespace

TEST(Unary, EveryOpEveryFloatType) {
  const amprt_unary_op ops[] = {AMPRT_UNARY_IDENTITY,   AMPRT_UNARY_RELU,       AMPRT_UNARY_SQRT,
                                AMPRT_UNARY_EXP,        AMPRT_UNARY_LOG,        AMPRT_UNARY_ERF,
                                AMPRT_UNARY_TANH,       AMPRT_UNARY_SIGMOID,    AMPRT_UNARY_GELU,
                                AMPRT_UNARY_GELU_TANH,  AMPRT_UNARY_LEAKY_RELU, AMPRT_UNARY_ABS,
                                AMPRT_UNARY_RECIPROCAL, AMPRT_UNARY_SOFTPLUS};
  std::vector<amprt_unary_op> all(std::begin(ops), std::end(ops));
  all.insert(all.end(), std::begin(kNewOps), std::end(kNewOps));
  for (amprt_dtype dt : kFloats)
    for (amprt_unary_op op : all) {
      auto [alpha, beta] = params(op);
      bool positive = op == AMPRT_UNARY_SQRT || op == AMPRT_UNARY_LOG;
      Buf x = positive                  ? uniform(dt, {7, 33}, 0.01, 20.0)
              : unitDomain(op)          ? uniform(dt, {7, 33}, -1.05, 1.05)
              : op == AMPRT_UNARY_ACOSH ? uniform(dt, {7, 33}, 0.95, 20.0)
                                        : randn(dt, {7, 33}, 3.0);
      // Special values: inf, -inf, nan, a subnormal.
      x.set(0, INFINITY);
      x.set(1, positive ? 1e-30 : -INFINITY);
      x.set(2, NAN);
      x.set(3, dt == AMPRT_F16 ? 3e-6 : 1e-39);
      Buf y(dt, {7, 33});
      // Halves (round's ties) and the clamp's bounds exactly.
      if (op == AMPRT_UNARY_ROUND || op == AMPRT_UNARY_CLAMP) {
        const double v[] = {0.5, 1.5, 2.5, -0.5, -2.5, -1.0, 2.0};
        for (int i = 0; i < 7; ++i)
          x.set(4 + i, v[i]);
      }
      AMPRT_OK_OR_FAIL(amprt_unary_ex(nullptr, op, alpha, beta, x.p(), y.p()));
      // Correctly rounded up to f32's own error, which the function's
      // condition number amplifies (|x * f'(x) / f(x)| grows like x^2 in the
      // tails of exp, sigmoid and gelu): 1.2e-7 * (2 + x^2) relative.
      for (int64_t i = 0; i < x.numel(); ++i) {
        double xv = x.get(i), r = refUnary(op, xv, alpha, beta), g = y.get(i);
        // Beyond the format's largest finite value the rounded result is
        // inf (exp(11.3) in f16).
        double big = dt == AMPRT_F16    ? 65520.0
                     : dt == AMPRT_BF16 ? 3.3961775292304e38
                                        : 3.4028235677973366e38;
        if (std::isfinite(r) && std::fabs(r) >= big)
          r = std::copysign(INFINITY, r);
        double tol = (0.5 + (dt == AMPRT_F32 ? 4 : 0.01)) * ulp(dt, r) +
                     std::fabs(r) * 1.2e-7 * (2 + (std::isfinite(xv) ? xv * xv : 0)) + 1e-37;
        // alpha x + beta in f32 cancels near the hard sigmoid's corner at 0.
        if (std::isfinite(xv) && op == AMPRT_UNARY_HARD_SIGMOID)
          tol += 1.2e-7 * (std::fabs(alpha * xv) + std::fabs(beta));
        if (std::isfinite(xv) && op == AMPRT_UNARY_HARD_SWISH)
          tol += 1.2e-7 * std::fabs(xv) * (std::fabs(xv / 6) + 0.5);
        bool ok = std::isnan(r) || std::isnan(g)   ? std::isnan(r) && std::isnan(g)
                  : std::isinf(r) || std::isinf(g) ? g == r
                                                   : std::fabs(g - r) <= tol;
        EXPECT_TRUE(ok) << "op " << op << " " << amprt_dtype_name(dt) << " x " << xv << ": got "
                        << g << ", reference " << r << " (seed " << testSeed() << ")";
      }
    }
}

TEST(Unary, GradientsMatchNumericDerivative) {
  const amprt_unary_op ops[] = {AMPRT_UNARY_RELU,       AMPRT_UNARY_SQRT, AMPRT_UNARY_EXP,
                                AMPRT_UNARY_LOG,        AMPRT_UNARY_ERF,  AMPRT_UNARY_TANH,
                                AMPRT_UNARY_SIGMOID,    AMPRT_UNARY_GELU, AMPRT_UNARY_GELU_TANH,
                                AMPRT_UNARY_LEAKY_RELU, AMPRT_UNARY_ABS,  AMPRT_UNARY_RECIPROCAL,
                                AMPRT_UNARY_SOFTPLUS};
  std::vector<amprt_unary_op> all(std::begin(ops), std::end(ops));
  all.insert(all.end(), std::begin(kNewOps), std::end(kNewOps));
  for (amprt_unary_op op : all) {
    auto [alpha, beta] = params(op);
    // 1 / x: away from its pole, where a central difference is accurate.
    bool positive = op == AMPRT_UNARY_SQRT || op == AMPRT_UNARY_LOG || op == AMPRT_UNARY_RECIPROCAL;
    // Away from the poles of tan and of the inverse functions' derivatives.
    Buf x = positive                  ? uniform(AMPRT_F32, {200}, 0.1, 5.0)
            : unitDomain(op)          ? uniform(AMPRT_F32, {200}, -0.9, 0.9)
            : op == AMPRT_UNARY_ACOSH ? uniform(AMPRT_F32, {200}, 1.2, 5.0)
            : op == AMPRT_UNARY_TAN   ? uniform(AMPRT_F32, {200}, -1.3, 1.3)
                                      : randn(AMPRT_F32, {200}, 2.0);
    Buf dy = randn(AMPRT_F32, {200});
    Buf dx(AMPRT_F32, {200});
    // The kinks themselves (values exact in f32).
    if (op == AMPRT_UNARY_CLAMP || op == AMPRT_UNARY_HARD_SWISH)
      for (int i = 0; i < 4; ++i)
        x.set(i, op == AMPRT_UNARY_CLAMP ? (i % 2 ? alpha : beta) : (i % 2 ? -3.0 : 3.0));
    if (op == AMPRT_UNARY_HARD_SIGMOID) // alpha 0.2, beta 0.5: corners at -2.5 and 2.5
      for (int i = 0; i < 4; ++i)
        x.set(i, i % 2 ? -2.5 : 2.5);
    if (op == AMPRT_UNARY_RELU || op == AMPRT_UNARY_LEAKY_RELU || op == AMPRT_UNARY_ABS)
      for (int i = 0; i < 4; ++i)
        x.set(i, 0.0);
    if (op == AMPRT_UNARY_THRESHOLDED_RELU)
      for (int i = 0; i < 4; ++i)
        x.set(i, alpha);
    AMPRT_OK_OR_FAIL(amprt_unary_grad_ex(nullptr, op, alpha, beta, x.p(), dy.p(), dx.p()));
    std::vector<double> ref;
    for (int64_t i = 0; i < 200; ++i)
      ref.push_back(dy.get(i) * refDerivative(op, x.get(i), alpha, beta));
    EXPECT_TRUE(near(dx, ref, 8, 1e-5, 1e-6)) << "op " << op;
  }
}

TEST(Binary, BroadcastingEveryOpAndType) {
  const amprt_binary_op ops[] = {AMPRT_BINARY_ADD, AMPRT_BINARY_SUB, AMPRT_BINARY_MUL,
                                 AMPRT_BINARY_DIV, AMPRT_BINARY_POW, AMPRT_BINARY_MAX,
                                 AMPRT_BINARY_MIN, AMPRT_BINARY_MOD, AMPRT_BINARY_FMOD};
  for (amprt_dtype dt : kFloats)
    for (amprt_binary_op op : ops) {
      Buf a = op == AMPRT_BINARY_POW ? uniform(dt, {4, 1, 5}, 0.5, 3.0) : randn(dt, {4, 1, 5});
      Buf b = op == AMPRT_BINARY_POW ? uniform(dt, {3, 1}, -2.0, 2.0) : randn(dt, {3, 1});
      Buf y(dt, {4, 3, 5});
      AMPRT_OK_OR_FAIL(amprt_binary(nullptr, op, a.p(), b.p(), y.p()));
      std::vector<double> ref;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j)
          for (int k = 0; k < 5; ++k) {
            double p = a.get(i * 5 + k), q = b.get(j);
            double r =
                op == AMPRT_BINARY_ADD   ? p + q
                : op == AMPRT_BINARY_SUB ? p - q
                : op == AMPRT_BINARY_MUL ? p * q
                : op == AMPRT_BINARY_DIV ? p / q
                : op == AMPRT_BINARY_POW ? std::pow(p, q)
                : op == AMPRT_BINARY_MAX ? std::max(p, q)
                : op == AMPRT_BINARY_MIN ? std::min(p, q)
                : op == AMPRT_BINARY_FMOD
                    ? std::fmod(p, q)
                    : std::fmod(p, q) + (std::fmod(p, q) != 0 && (std::fmod(p, q) < 0) != (q < 0)
                                             ? q
                                             : 0.0); // MOD
            ref.push_back(r);
          }
      // f32 arithmetic then one rounding: within half an ulp of the exact
      // value plus f32's own rounding (pow: a few f32 ulps).
      EXPECT_TRUE(near(y, ref, 0.5 + (dt == AMPRT_F32 ? 2 : 0.01), 4e-7)) << "op " << op;
    }
}

TEST(Binary, OverflowToInfInLowPrecision) {
  Buf a(AMPRT_F16, {2}), b(AMPRT_F16, {2}), y(AMPRT_F16, {2});
  a.set(0, 60000.0);
  b.set(0, 10000.0);
  a.set(1, 1e-7);
  b.set(1, 1e-3);
  AMPRT_OK_OR_FAIL(amprt_binary(nullptr, AMPRT_BINARY_ADD, a.p(), b.p(), y.p()));
  EXPECT_TRUE(std::isinf(y.get(0)));
  AMPRT_OK_OR_FAIL(amprt_binary(nullptr, AMPRT_BINARY_MUL, a.p(), b.p(), y.p()));
  EXPECT_EQ(y.get(1), 0.0); // 1.2e-10 underflows past the smallest subnormal
}

TEST(Binary, IntegerRemaindersTakeTheirSigns) {
  Buf a = randint(AMPRT_I64, {40}, -50, 50), b = randint(AMPRT_I64, {40}, -9, 9),
      y(AMPRT_I64, {40});
  for (int i = 0; i < 40; ++i)
    if (b.get(i) == 0)
      b.set(i, 7);
  a.set(0, (double)INT64_MIN);
  b.set(0, -1);
  AMPRT_OK_OR_FAIL(amprt_binary(nullptr, AMPRT_BINARY_MOD, a.p(), b.p(), y.p()));
  for (int i = 0; i < 40; ++i) {
    int64_t p = (int64_t)a.get(i), q = (int64_t)b.get(i);
    int64_t r = q == -1 ? 0 : p % q;
    EXPECT_EQ((int64_t)y.get(i), r != 0 && (r < 0) != (q < 0) ? r + q : r) << p << " mod " << q;
  }
  AMPRT_OK_OR_FAIL(amprt_binary(nullptr, AMPRT_BINARY_FMOD, a.p(), b.p(), y.p()));
  for (int i = 1; i < 40; ++i)
    EXPECT_EQ((int64_t)y.get(i), (int64_t)a.get(i) % (int64_t)b.get(i));
  b.set(3, 0);
  EXPECT_EQ(amprt_binary(nullptr, AMPRT_BINARY_MOD, a.p(), b.p(), y.p()), AMPRT_ERR_NUMERIC);
}

TEST(Binary, IntegersWrapAndDivisionByZeroIsAnError) {
  Buf a = randint(AMPRT_I64, {6}, -50, 50), b = randint(AMPRT_I64, {6}, 1, 9), y(AMPRT_I64, {6});
  AMPRT_OK_OR_FAIL(amprt_binary(nullptr, AMPRT_BINARY_DIV, a.p(), b.p(), y.p()));
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(y.get(i), (double)((int64_t)a.get(i) / (int64_t)b.get(i)));
  b.set(2, 0);
  EXPECT_EQ(amprt_binary(nullptr, AMPRT_BINARY_DIV, a.p(), b.p(), y.p()), AMPRT_ERR_NUMERIC);
  EXPECT_NE(std::string(amprt_last_error()).find("division by zero"), std::string::npos);
}

TEST(Binary, ShapeMismatchIsAnError) {
  Buf a = randn(AMPRT_F32, {3, 4}), b = randn(AMPRT_F32, {5}), y(AMPRT_F32, {3, 4});
  EXPECT_EQ(amprt_binary(nullptr, AMPRT_BINARY_ADD, a.p(), b.p(), y.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("does not broadcast"), std::string::npos);
}

TEST(Where, SelectsWithBroadcast) {
  Buf c = randint(AMPRT_I1, {3, 1}, 0, 2), a = randn(AMPRT_BF16, {3, 4}),
      b = randn(AMPRT_BF16, {4}), y(AMPRT_BF16, {3, 4});
  AMPRT_OK_OR_FAIL(amprt_where(nullptr, c.p(), a.p(), b.p(), y.p()));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(y.get(i * 4 + j), c.get(i) ? a.get(i * 4 + j) : b.get(j));
}

TEST(Cast, AllDirections) {
  Buf x = randn(AMPRT_F32, {64}, 100.0);
  x.set(0, NAN);
  x.set(1, 70000.0);
  x.set(2, -0.75);
  for (amprt_dtype to : {AMPRT_F16, AMPRT_BF16, AMPRT_I32, AMPRT_I8, AMPRT_I1}) {
    Buf y(to, {64});
    AMPRT_OK_OR_FAIL(amprt_cast(nullptr, x.p(), y.p()));
    for (int i = 0; i < 64; ++i) {
      double v = x.get(i), g = y.get(i);
      if (to == AMPRT_F16) {
        uint16_t want = amprt_f32_to_f16((float)v);
        EXPECT_EQ(reinterpret_cast<uint16_t *>(y.bytes.data())[i], want);
      } else if (to == AMPRT_BF16) {
        EXPECT_EQ(reinterpret_cast<uint16_t *>(y.bytes.data())[i], amprt_f32_to_bf16((float)v));
      } else if (to == AMPRT_I1) {
        EXPECT_EQ(g, v != 0 ? 1.0 : 0.0);
      } else if (!std::isnan(v) && std::fabs(v) < 100) {
        EXPECT_EQ(g, (double)(int64_t)std::trunc(v)) << v;
      }
    }
  }
  // int -> float rounds correctly, i1 -> float is 0 / 1.
  Buf i(AMPRT_I64, {2}), f(AMPRT_F32, {2});
  i.set(0, (double)((1LL << 24) + 1));
  i.set(1, -7);
  AMPRT_OK_OR_FAIL(amprt_cast(nullptr, i.p(), f.p()));
  EXPECT_EQ(f.get(0), 16777216.0);
  EXPECT_EQ(f.get(1), -7.0);
}

TEST(Copy, TransposeViewAndReshape) {
  Buf x = randn(AMPRT_F32, {3, 5});
  Buf y(AMPRT_F32, {5, 3});
  amprt_tensor view = x.t;
  view.shape[0] = 5;
  view.shape[1] = 3;
  view.strides[0] = 1;
  view.strides[1] = 5;
  AMPRT_OK_OR_FAIL(amprt_copy(nullptr, &view, y.p()));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(y.get(i * 3 + j), x.get(j * 5 + i));
  Buf z(AMPRT_F32, {15});
  AMPRT_OK_OR_FAIL(amprt_copy(nullptr, &view, z.p()));
  for (int k = 0; k < 15; ++k)
    EXPECT_EQ(z.get(k), y.get(k));
}

namespace {
/// amprt_copy of x's view with dims permuted (view dim d = x's dim perm[d])
/// into a dense y; the first element of y that is not x's element under
/// the view, or -1.
int64_t firstWrongPermutedCopy(Buf &x, const std::vector<int> &perm) {
  const int rank = (int)perm.size();
  const size_t es = amprt_dtype_size(x.dtype);
  amprt_tensor view = x.t;
  std::vector<int64_t> ys(rank);
  for (int d = 0; d < rank; ++d) {
    view.shape[d] = x.t.shape[perm[d]];
    view.strides[d] = x.t.strides[perm[d]];
    ys[d] = view.shape[d];
  }
  Buf y(x.dtype, ys);
  if (amprt_copy(nullptr, &view, y.p()) != AMPRT_OK) {
    ADD_FAILURE() << amprt_last_error();
    return 0;
  }
  for (int64_t i = 0; i < y.numel(); ++i) {
    int64_t rest = i, off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += rest % ys[d] * view.strides[d];
      rest /= ys[d];
    }
    if (std::memcmp(&y.bytes[i * es], &x.bytes[off * es], es) != 0)
      return i;
  }
  return -1;
}
} // namespace

// Every permutation of 4-D to 6-D tensors (NCHW <-> NHWC, attention heads,
// Swin's windows), in every element size: the transposing copy's 8 x 8
// register blocks (32- and 16-bit), their edges, the loops around them and
// the element-by-element path must all give y[i] = x[permuted i], bit for
// bit (random bytes: NaN patterns too).
TEST(Copy, EveryPermutationInEveryElementSize) {
  const std::vector<std::vector<int64_t>> shapes = {{2, 19, 7, 9},    {3, 64, 4, 4},
                                                    {1, 8, 16, 1},    {2, 96, 3, 17},
                                                    {2, 3, 9, 5, 10}, {2, 1, 3, 2, 4, 9}};
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16, AMPRT_F16, AMPRT_I64, AMPRT_U8})
    for (const auto &shape : shapes) {
      Buf x(dt, shape);
      for (auto &b : x.bytes)
        b = (unsigned char)(rng()() & 0xff);
      const int rank = (int)shape.size();
      std::vector<int> perm(rank);
      for (int d = 0; d < rank; ++d)
        perm[d] = d;
      do {
        std::string name = std::string(amprt_dtype_name(dt)) + " perm ";
        for (int d : perm)
          name += std::to_string(d);
        SCOPED_TRACE(name + " of rank " + std::to_string(rank));
        EXPECT_EQ(firstWrongPermutedCopy(x, perm), -1) << "first wrong element";
      } while (std::next_permutation(perm.begin(), perm.end()));
    }
}

// A larger 5-D permutation that keeps the innermost dim (Swin's q / k / v
// split, [3, B, heads, tokens, head_dim] from [B, tokens, 3, heads,
// head_dim]): the dense runs copied whole, on both threads.
TEST(Copy, FiveDimPermutationOfDenseRunsOnTheThreads) {
  const std::vector<int64_t> shape = {8, 49, 3, 12, 32};
  for (amprt_dtype dt : {AMPRT_BF16, AMPRT_F32})
    for (const std::vector<int> &perm :
         {std::vector<int>{2, 0, 3, 1, 4}, std::vector<int>{1, 3, 0, 2, 4}}) {
      Buf x(dt, shape);
      for (auto &b : x.bytes)
        b = (unsigned char)(rng()() & 0xff);
      EXPECT_EQ(firstWrongPermutedCopy(x, perm), -1)
          << amprt_dtype_name(dt) << ": first wrong element";
    }
}

// Swin's window partition ([8, 21, 21, 96] as [8, 3, 7, 3, 7, 96], the
// window rows and columns swapped): four dims once the dense ones merge,
// rows of 672 dense elements, on both threads.
TEST(Copy, WindowPartitionRowsOnTheThreads) {
  const std::vector<int64_t> shape = {8, 3, 7, 3, 7, 96};
  for (amprt_dtype dt : {AMPRT_BF16, AMPRT_F32}) {
    Buf x(dt, shape);
    for (auto &b : x.bytes)
      b = (unsigned char)(rng()() & 0xff);
    EXPECT_EQ(firstWrongPermutedCopy(x, {0, 1, 3, 2, 4, 5}), -1)
        << amprt_dtype_name(dt) << ": first wrong element";
  }
}

// Empty tensors (a zero-size batch, an empty index list) may have null
// data: copies, casts and unary ops on them do nothing and succeed (found by
// test/Import/mutated-models.test under UBSan: memmove from null).
TEST(Copy, EmptyTensorsWithNullData) {
  int64_t shape[2] = {0, 2}, flat[1] = {0};
  amprt_tensor x = amprt_tensor_make(nullptr, AMPRT_I64, 2, shape);
  amprt_tensor y = amprt_tensor_make(nullptr, AMPRT_I64, 2, shape);
  amprt_tensor z = amprt_tensor_make(nullptr, AMPRT_I64, 1, flat);
  AMPRT_OK_OR_FAIL(amprt_copy(nullptr, &x, &y));
  AMPRT_OK_OR_FAIL(amprt_copy(nullptr, &x, &z));
  amprt_tensor xf = amprt_tensor_make(nullptr, AMPRT_F32, 2, shape);
  amprt_tensor yf = amprt_tensor_make(nullptr, AMPRT_F32, 2, shape);
  amprt_tensor yh = amprt_tensor_make(nullptr, AMPRT_F16, 2, shape);
  AMPRT_OK_OR_FAIL(amprt_unary(nullptr, AMPRT_UNARY_IDENTITY, 0.0f, &xf, &yf));
  AMPRT_OK_OR_FAIL(amprt_cast(nullptr, &xf, &yh));
  // A non-empty tensor with null data is still an error.
  int64_t one[1] = {1};
  amprt_tensor bad = amprt_tensor_make(nullptr, AMPRT_I64, 1, one);
  Buf good(AMPRT_I64, {1});
  EXPECT_NE(amprt_copy(nullptr, &bad, good.p()), AMPRT_OK);
}

TEST(Concat, AlongMiddleAxis) {
  Buf a = randn(AMPRT_F16, {2, 1, 3}), b = randn(AMPRT_F16, {2, 2, 3}), y(AMPRT_F16, {2, 3, 3});
  amprt_tensor in[2] = {a.t, b.t};
  AMPRT_OK_OR_FAIL(amprt_concat(nullptr, in, 2, 1, y.p()));
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(y.get((n * 3 + c) * 3 + k),
                  c == 0 ? a.get(n * 3 + k) : b.get((n * 2 + c - 1) * 3 + k));
}

TEST(Gather, NegativeIndicesAndRangeErrors) {
  Buf data = randn(AMPRT_F32, {5, 4}), idx(AMPRT_I64, {2, 2}), y(AMPRT_F32, {2, 2, 4});
  int64_t want[4] = {0, -1, 3, 2};
  for (int i = 0; i < 4; ++i)
    idx.set(i, (double)want[i]);
  AMPRT_OK_OR_FAIL(amprt_gather(nullptr, data.p(), idx.p(), 0, y.p()));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(y.get(i * 4 + j), data.get(((want[i] + 5) % 5) * 4 + j));
  idx.set(1, 5);
  EXPECT_EQ(amprt_gather(nullptr, data.p(), idx.p(), 0, y.p()), AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("index 5 out of range"), std::string::npos);
}

TEST(GatherElements, EveryAxisAgainstLoopsAndItsGradient) {
  // data [4, 5, 3]; indices smaller than data off the axis (torch.gather's
  // rule), negative ones included, repeated ones summed by the gradient.
  const int64_t ds[3] = {4, 5, 3};
  for (int32_t axis = 0; axis < 3; ++axis)
    for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16}) {
      std::vector<int64_t> is = {3, 4, 2};
      is[axis] = 6; // more picks than the axis holds: repeats
      Buf data = randn(dt, {4, 5, 3}), idx = randint(AMPRT_I64, is, -ds[axis], ds[axis]);
      Buf y(dt, is), dy = randn(dt, is), dd(dt, {4, 5, 3});
      AMPRT_OK_OR_FAIL(amprt_gather_elements(nullptr, data.p(), idx.p(), axis, y.p()));
      AMPRT_OK_OR_FAIL(amprt_gather_elements_grad(nullptr, idx.p(), dy.p(), axis, dd.p()));
      std::vector<double> ref(60, 0.0);
      int wrong = 0;
      for (int64_t i = 0; i < is[0]; ++i)
        for (int64_t j = 0; j < is[1]; ++j)
          for (int64_t k = 0; k < is[2]; ++k) {
            int64_t lin = (i * is[1] + j) * is[2] + k, c[3] = {i, j, k};
            int64_t v = (int64_t)idx.get(lin);
            c[axis] = v < 0 ? v + ds[axis] : v;
            int64_t at = (c[0] * 5 + c[1]) * 3 + c[2];
            wrong += y.get(lin) != data.get(at);
            ref[at] += dy.get(lin);
          }
      EXPECT_EQ(wrong, 0) << "axis " << axis << " " << amprt_dtype_name(dt);
      // f32 sums of at most 6 normal terms (|dy| < 6): an error below
      // 6 * 6 * 2^-24 whatever cancels, then one rounding to the type.
      EXPECT_TRUE(near(dd, ref, dt == AMPRT_F32 ? 1 : 0.6, 0.0, 3e-6)) << "axis " << axis;
    }
  Buf data = randn(AMPRT_F32, {2, 3}), idx(AMPRT_I64, {2, 3}), y(AMPRT_F32, {2, 3});
  idx.set(4, 3);
  EXPECT_EQ(amprt_gather_elements(nullptr, data.p(), idx.p(), 1, y.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("index 3 out of range [-3, 3)"),
            std::string::npos);
  Buf big(AMPRT_I64, {2, 4}), y2(AMPRT_F32, {2, 4});
  EXPECT_EQ(amprt_gather_elements(nullptr, data.p(), big.p(), 0, y2.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
}

TEST(ArgReduce, MaxMinTiesNaNAndIntegers) {
  // Every axis of [3, 4, 5], small integers (many ties), a NaN; max and
  // min, first and last of equal values.
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_F16, AMPRT_I64})
    for (int32_t axis = 0; axis < 3; ++axis)
      for (int mn = 0; mn < 2; ++mn)
        for (int last = 0; last < 2; ++last) {
          Buf x = randint(dt == AMPRT_I64 ? AMPRT_I64 : AMPRT_I32, {3, 4, 5}, -3, 4);
          Buf xt(dt, {3, 4, 5});
          for (int64_t i = 0; i < 60; ++i)
            xt.set(i, x.get(i));
          if (dt != AMPRT_I64)
            xt.set(7, NAN);
          std::vector<int64_t> ys = {3, 4, 5};
          ys[axis] = 1;
          Buf y(AMPRT_I64, ys);
          AMPRT_OK_OR_FAIL(amprt_arg_reduce(nullptr, xt.p(), axis, mn, last, y.p()));
          const int64_t st[3] = {20, 5, 1};
          int wrong = 0;
          for (int64_t lin = 0; lin < y.numel(); ++lin) {
            int64_t c[3] = {lin / (ys[1] * ys[2]), (lin / ys[2]) % ys[1], lin % ys[2]};
            int64_t base = c[0] * 20 + c[1] * 5 + c[2], best = -1;
            double bv = 0;
            for (int64_t i = 0; i < (int64_t)(axis == 0 ? 3 : axis == 1 ? 4 : 5); ++i) {
              double v = xt.get(base + i * st[axis]);
              bool take =
                  best < 0 ||
                  (!std::isnan(bv) &&
                   (std::isnan(v) || (mn ? (last ? v <= bv : v < bv) : (last ? v >= bv : v > bv))));
              if (take)
                best = i, bv = v;
            }
            wrong += y.get(lin) != (double)best;
          }
          EXPECT_EQ(wrong, 0) << amprt_dtype_name(dt) << " axis " << axis << " min " << mn
                              << " last " << last << " (seed " << testSeed() << ")";
        }
  Buf x = randn(AMPRT_F32, {2, 3}), bad(AMPRT_I32, {2, 1});
  EXPECT_EQ(amprt_arg_reduce(nullptr, x.p(), 1, 0, 0, bad.p()), AMPRT_ERR_INVALID_ARGUMENT);
}

TEST(CumSum, EveryAxisExclusiveReverseAgainstDouble) {
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16, AMPRT_I64})
    for (int32_t axis = 0; axis < 3; ++axis)
      for (int ex = 0; ex < 2; ++ex)
        for (int rev = 0; rev < 2; ++rev) {
          Buf x = dt == AMPRT_I64 ? randint(dt, {3, 4, 5}, -50, 50) : randn(dt, {3, 4, 5});
          Buf y(dt, {3, 4, 5});
          AMPRT_OK_OR_FAIL(amprt_cumsum(nullptr, x.p(), axis, ex, rev, y.p()));
          const int64_t sh[3] = {3, 4, 5}, st[3] = {20, 5, 1};
          std::vector<double> ref(60);
          for (int64_t e = 0; e < 60; ++e) {
            int64_t c[3] = {e / 20, (e / 5) % 4, e % 5}, base = e - c[axis] * st[axis];
            double sum = 0;
            for (int64_t k = 0; k < sh[axis]; ++k) {
              bool in = rev ? (ex ? k > c[axis] : k >= c[axis]) : (ex ? k < c[axis] : k <= c[axis]);
              if (in)
                sum += x.get(base + k * st[axis]);
            }
            ref[e] = sum;
          }
          // f32 running sums of at most 5 normal terms: 5 * 5 * 2^-24 absolute,
          // then one rounding to the type; integers exactly.
          EXPECT_TRUE(dt == AMPRT_I64 ? near(y, ref, 0, 0, 0) : near(y, ref, 1, 0, 2e-6))
              << amprt_dtype_name(dt) << " axis " << axis << " exclusive " << ex << " reverse "
              << rev;
        }
  Buf x = randn(AMPRT_F32, {2, 3}), y(AMPRT_F32, {3, 2});
  EXPECT_EQ(amprt_cumsum(nullptr, x.p(), 0, 0, 0, y.p()), AMPRT_ERR_INVALID_ARGUMENT);
}

TEST(Dropout, KeepsAboutOneMinusRatioAndRescales) {
  amprt_context *ctx;
  AMPRT_OK_OR_FAIL(amprt_context_create("cpu", &ctx));
  amprt_context_seed(ctx, testSeed());
  Buf x = uniform(AMPRT_F32, {20000}, 1.0, 2.0), y(AMPRT_F32, {20000}), m(AMPRT_I1, {20000});
  AMPRT_OK_OR_FAIL(amprt_dropout(ctx, x.p(), 0.3f, y.p(), m.p()));
  int64_t kept = 0;
  for (int i = 0; i < 20000; ++i) {
    if (m.get(i)) {
      ++kept;
      EXPECT_FLOAT_EQ((float)y.get(i), (float)(x.get(i) / 0.7));
    } else {
      EXPECT_EQ(y.get(i), 0.0);
    }
  }
  // Binomial(20000, 0.7): 6 standard deviations is about 390.
  EXPECT_NEAR((double)kept, 14000.0, 400.0);
  amprt_context_destroy(ctx);
}

TEST(ReduceTo, SumsBroadcastDims) {
  Buf dy = randn(AMPRT_F32, {4, 3, 5}), dx(AMPRT_F32, {3, 1});
  AMPRT_OK_OR_FAIL(amprt_reduce_to(nullptr, dy.p(), dx.p()));
  std::vector<double> ref(3, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 5; ++k)
        ref[j] += dy.get((i * 3 + j) * 5 + k);
  EXPECT_TRUE(near(dx, ref, 1, 1e-6));
}

TEST(Context, DevicesAndArena) {
  amprt_context *ctx = nullptr;
  EXPECT_EQ(amprt_context_create("tpu", &ctx), AMPRT_ERR_INVALID_ARGUMENT);
  // This binary does not link libamprt_cuda: a clean refusal.
  EXPECT_EQ(amprt_context_create("cuda", &ctx), AMPRT_ERR_NO_DEVICE);
  EXPECT_NE(std::string(amprt_last_error()).find("without the CUDA runtime"), std::string::npos);
  EXPECT_EQ(amprt_context_create("cuda:x", &ctx), AMPRT_ERR_INVALID_ARGUMENT);
  AMPRT_OK_OR_FAIL(amprt_context_create("cpu", &ctx));
  EXPECT_STREQ(amprt_context_device(ctx), "cpu");
  // The device memory API on the host: malloc and memmove; no graphs.
  EXPECT_EQ(amprt_context_on_host(ctx), 1);
  void *dev = nullptr;
  AMPRT_OK_OR_FAIL(amprt_device_alloc(ctx, 12, &dev));
  const char src[12] = "hello world";
  char back[12] = {0};
  AMPRT_OK_OR_FAIL(amprt_device_copy(ctx, dev, src, 12, 0));
  AMPRT_OK_OR_FAIL(amprt_device_copy(ctx, back, dev, 12, 1));
  EXPECT_STREQ(back, "hello world");
  // Kind 3 (either side, cudaMemcpyDefault) is a copy too; 4 is no kind.
  std::memset(back, 0, sizeof back);
  AMPRT_OK_OR_FAIL(amprt_device_copy(ctx, back, dev, 12, 3));
  EXPECT_STREQ(back, "hello world");
  EXPECT_EQ(amprt_device_copy(ctx, back, dev, 12, 4), AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(amprt_device_copy(ctx, back, dev, 12, -1), AMPRT_ERR_INVALID_ARGUMENT);
  AMPRT_OK_OR_FAIL(amprt_device_synchronize(ctx));
  EXPECT_EQ(amprt_device_sync_count(ctx), 0);
  EXPECT_EQ(amprt_graph_begin(ctx), AMPRT_ERR_UNSUPPORTED);
  amprt_device_free(ctx, dev);
  amprt_arena *arena;
  AMPRT_OK_OR_FAIL(amprt_arena_create(ctx, 1000, &arena));
  void *p;
  AMPRT_OK_OR_FAIL(amprt_arena_at(arena, 992, 8, &p));
  EXPECT_EQ(p, static_cast<char *>(amprt_arena_base(arena)) + 992);
  EXPECT_EQ(amprt_arena_at(arena, 996, 8, &p), AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(amprt_arena_base(arena)) % 64, 0u);
  amprt_arena_destroy(arena);
  amprt_context_destroy(ctx);
  EXPECT_NE(std::string(amprt_cpu_features_string()), "");
}

TEST(Binary, ContiguousF32FastPathsMatchTheGeneralOne) {
  // Same shape, a trailing vector (a bias) and a scalar take the fast loops;
  // a strided view of the same data takes the general one: equal bits.
  for (std::vector<int64_t> bs : {std::vector<int64_t>{6, 7}, {7}, {1, 7}, {}}) {
    Buf a = randn(AMPRT_F32, {6, 7}), b = randn(AMPRT_F32, bs), y(AMPRT_F32, {6, 7}),
        ref(AMPRT_F32, {6, 7});
    for (amprt_binary_op op :
         {AMPRT_BINARY_ADD, AMPRT_BINARY_SUB, AMPRT_BINARY_MUL, AMPRT_BINARY_DIV}) {
      AMPRT_OK_OR_FAIL(amprt_binary(nullptr, op, a.p(), b.p(), y.p()));
      amprt_tensor refView = ref.t; // strides [1, 6]: a transposed layout
      refView.strides[0] = 1;
      refView.strides[1] = 6;
      AMPRT_OK_OR_FAIL(amprt_binary(nullptr, op, a.p(), b.p(), &refView));
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 7; ++j)
          ASSERT_EQ(y.get(i * 7 + j), ref.get(j * 6 + i)) << "op " << op;
    }
  }
}

// Broadcasts equal to y in a trailing block (an attention mask [1, H, 1,
// L, L] against [B, H, W, L, L]; [1, C, H, W] against [N, C, H, W]) take
// the row loops, and same-shape operands with an f16 / bf16 among them the
// pieces widened on the fly: each y element is the f32 operation on the
// widened operands, rounded once (exactly what the general path computes).
TEST(Binary, BlockBroadcastAndHalfPiecesMatchF32ThenRound) {
  struct Case {
    std::vector<int64_t> y, b;
  };
  const Case cases[] = {{{3, 4, 2, 5, 7}, {1, 4, 1, 5, 7}},
                        {{3, 4, 5, 7}, {1, 4, 5, 7}},
                        {{2, 3, 4, 9}, {3, 1, 9}},
                        {{2, 3, 4, 9}, {2, 1, 4, 9}},
                        {{5, 3000}, {5, 3000}},
                        {{4, 6, 5, 5}, {4, 6, 1, 1}},
                        {{3, 40}, {40}},
                        {{3, 40}, {}}};
  // a, b, y of one type, and mixes with an f32 y (computed in y itself)
  // or a half y; the last one in place (y is a's buffer).
  struct Types {
    amprt_dtype a, b, y;
    bool inPlace;
  };
  std::vector<Types> types;
  for (amprt_dtype dt : kFloats)
    types.push_back({dt, dt, dt, false});
  types.insert(types.end(), {{AMPRT_BF16, AMPRT_F32, AMPRT_F32, false},
                             {AMPRT_F32, AMPRT_F16, AMPRT_F32, false},
                             {AMPRT_BF16, AMPRT_BF16, AMPRT_F32, false},
                             {AMPRT_F32, AMPRT_BF16, AMPRT_BF16, false},
                             {AMPRT_F32, AMPRT_BF16, AMPRT_F32, true}});
  for (const Case &c : cases)
    for (const Types &t : types)
      for (amprt_binary_op op :
           {AMPRT_BINARY_ADD, AMPRT_BINARY_SUB, AMPRT_BINARY_MUL, AMPRT_BINARY_DIV})
        for (bool bFirst : {false, true}) { // b op a: the broadcast operand first
          const amprt_dtype dt = t.y;
          Buf a = randn(t.a, c.y), b = randn(t.b, c.b), y(dt, c.y);
          Buf a0 = a; // a's values, for the reference when y overwrites a
          amprt_tensor *out = t.inPlace ? a.p() : y.p();
          AMPRT_OK_OR_FAIL(bFirst ? amprt_binary(nullptr, op, b.p(), a.p(), out)
                                  : amprt_binary(nullptr, op, a.p(), b.p(), out));
          if (t.inPlace)
            y = a;
          int32_t r = (int32_t)c.y.size(), lead = r - (int32_t)c.b.size();
          Buf want(dt, c.y);
          for (int64_t i = 0; i < y.numel(); ++i) {
            // b's element for y's index i (broadcast dims read index 0)
            int64_t rem = i, off = 0, st = 1;
            for (int32_t d = r - 1; d >= 0; --d) {
              int64_t idx = rem % c.y[d];
              rem /= c.y[d];
              if (d >= lead) {
                int64_t bd = c.b[d - lead];
                off += (bd == 1 ? 0 : idx) * st;
                st *= bd;
              }
            }
            float p = (float)a0.get(i), q = (float)b.get(off);
            if (bFirst)
              std::swap(p, q);
            float v = op == AMPRT_BINARY_ADD   ? p + q
                      : op == AMPRT_BINARY_SUB ? p - q
                      : op == AMPRT_BINARY_MUL ? p * q
                                               : p / q;
            want.set(i, v);
          }
          ASSERT_EQ(y.bytes, want.bytes)
              << amprt_dtype_name(t.a) << " " << amprt_dtype_name(t.b) << " -> "
              << amprt_dtype_name(dt) << (t.inPlace ? " in place" : "") << " op " << op
              << " b rank " << c.b.size() << (bFirst ? " (b first)" : "");
        }
}

// Dense same-shape add / sub / mul / div with an f16 / bf16 among a, b and
// y, every mix of the three float types (widened, computed and rounded in
// AVX2 registers where the CPU has AVX2 + F16C, in pieces otherwise): the
// f32 arithmetic of the widened operands, rounded once, bit for bit;
// special values (NaN, inf, signed zeros, subnormals, f16 overflow) among
// them, a size that runs on the threads and ends in a tail.
namespace {
/// Element i of t as f32 by the scalar conversions (the definition; the
/// vector ones are what the binary tests check).
float widenAt(const Buf &t, int64_t i) {
  float v;
  uint16_t h;
  if (t.dtype == AMPRT_F32) {
    std::memcpy(&v, t.bytes.data() + 4 * i, 4);
    return v;
  }
  std::memcpy(&h, t.bytes.data() + 2 * i, 2);
  return t.dtype == AMPRT_F16 ? amprt_f16_to_f32(h) : amprt_bf16_to_f32(h);
}

/// p op q in f32 (add, sub, mul, div).
float f32Op(amprt_binary_op op, float p, float q) {
  return op == AMPRT_BINARY_ADD   ? p + q
         : op == AMPRT_BINARY_SUB ? p - q
         : op == AMPRT_BINARY_MUL ? p * q
                                  : p / q;
}

/// v rounded once into element i of t (f32 as it is).
void storeRounded(Buf &t, int64_t i, float v) {
  if (t.dtype == AMPRT_F32) {
    std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    return;
  }
  uint16_t h = t.dtype == AMPRT_F16 ? amprt_f32_to_f16(v) : amprt_f32_to_bf16(v);
  std::memcpy(t.bytes.data() + 2 * i, &h, 2);
}
} // namespace

TEST(Binary, HalfDenseEveryTypeMixMatchesF32ThenRound) {
  const int64_t n = 70001;
  const double inf = std::numeric_limits<double>::infinity();
  const double special[] = {std::nan(""), -std::nan(""), inf, -inf,   0.0,   -0.0,
                            1e-40,        -3e-8,         7e4, -9e-41, 65504, 1.5e-5};
  for (amprt_dtype ta : kFloats)
    for (amprt_dtype tb : kFloats)
      for (amprt_dtype ty : kFloats) {
        if (ta == AMPRT_F32 && tb == AMPRT_F32 && ty == AMPRT_F32)
          continue;
        for (amprt_binary_op op :
             {AMPRT_BINARY_ADD, AMPRT_BINARY_SUB, AMPRT_BINARY_MUL, AMPRT_BINARY_DIV}) {
          Buf a = randn(ta, {n}, 3.0), b = randn(tb, {n}, 3.0), y(ty, {n});
          // Specials at different places in a and b (a NaN meeting a NaN
          // would leave the sign to the hardware's choice of operand).
          for (size_t k = 0; k < std::size(special); ++k) {
            a.set(8 * (int64_t)k + 3 + 4096 * (int64_t)k, special[k]);
            b.set(8 * (int64_t)k + 5 + 4096 * (int64_t)k, special[k]);
            a.set(n - 1 - (int64_t)k, special[k]); // the tail
          }
          // Signalling NaNs with payloads, of either sign, by their bits.
          for (Buf *t : {&a, &b}) {
            int64_t at = t == &a ? 40001 : 50003;
            for (int s = 0; s < 2; ++s) {
              size_t es = amprt_dtype_size(t->dtype);
              uint32_t bits = t->dtype == AMPRT_F32    ? 0x7f800021u | (uint32_t)s << 31
                              : t->dtype == AMPRT_BF16 ? 0x7f81u | (uint32_t)s << 15
                                                       : 0x7c05u | (uint32_t)s << 15;
              std::memcpy(t->bytes.data() + (at + 8 * s) * es, &bits, es);
            }
          }
          AMPRT_OK_OR_FAIL(amprt_binary(nullptr, op, a.p(), b.p(), y.p()));
          Buf want(ty, {n});
          for (int64_t i = 0; i < n; ++i)
            storeRounded(want, i, f32Op(op, widenAt(a, i), widenAt(b, i)));
          ASSERT_EQ(y.bytes, want.bytes) << "op " << op << ": " << amprt_dtype_name(ta) << ", "
                                         << amprt_dtype_name(tb) << " -> " << amprt_dtype_name(ty);
        }
      }
}

// One operand a single value ([] or [1, 1]; attention's scale, a loss's
// factor) and the other dense, an f16 / bf16 among the three types: the
// scalar definition (widened, f32 arithmetic, rounded once), bit for bit,
// the value first or second, the value itself ordinary or special.
TEST(Binary, HalfWithOneValueEveryTypeMixMatchesF32ThenRound) {
  const int64_t n = 40003;
  const double inf = std::numeric_limits<double>::infinity();
  for (amprt_dtype td : kFloats)
    for (amprt_dtype ts : kFloats)
      for (amprt_dtype ty : kFloats) {
        if (td == AMPRT_F32 && ts == AMPRT_F32 && ty == AMPRT_F32)
          continue;
        for (amprt_binary_op op :
             {AMPRT_BINARY_ADD, AMPRT_BINARY_SUB, AMPRT_BINARY_MUL, AMPRT_BINARY_DIV})
          for (bool first : {false, true})
            for (double value : {0.3125 * (1 + (double)(rng()() % 7)), -inf, 0.0, -2.5}) {
              Buf d = randn(td, {4, n}, 3.0), y(ty, {4, n});
              Buf v = first ? Buf(ts, {}) : Buf(ts, {1, 1});
              v.set(0, value);
              d.set(5, std::nan(""));
              d.set(4 * n - 1, inf);
              d.set(77, 0.0);
              const amprt_tensor *a = first ? v.p() : d.p(), *b = first ? d.p() : v.p();
              AMPRT_OK_OR_FAIL(amprt_binary(nullptr, op, a, b, y.p()));
              Buf want(ty, {4, n});
              const float s = widenAt(v, 0);
              for (int64_t i = 0; i < 4 * n; ++i)
                storeRounded(want, i,
                             first ? f32Op(op, s, widenAt(d, i)) : f32Op(op, widenAt(d, i), s));
              ASSERT_EQ(y.bytes, want.bytes)
                  << "op " << op << (first ? " value first " : " value second ") << value << ": "
                  << amprt_dtype_name(td) << " with " << amprt_dtype_name(ts) << " -> "
                  << amprt_dtype_name(ty);
            }
      }
}

// Gather's gradient: dy's blocks added at their indices' rows of a zeroed
// ddata. Distinct indices (attention's q = qkv[0]; a permutation) take the
// copy path, repeated ones the f32 sums: both against the definition.
TEST(GatherGrad, DistinctAndRepeatedIndicesAgainstTheDefinition) {
  const std::vector<int64_t> shape{3, 5, 4, 2};
  struct Case {
    std::vector<int64_t> idx, idxShape;
    int32_t axis;
  };
  const Case cases[] = {{{3, 0, -1}, {3}, 1}, {{1, 1, 3, -4}, {2, 2}, 1}, {{2}, {}, 0},
                        {{0, 2, 1}, {3}, 0},  {{1, -2, 0, 3, 2}, {5}, 2}, {{0, 1, 1}, {3}, 3}};
  for (const Case &c : cases)
    for (amprt_dtype dt : kFloats) {
      int32_t axis = c.axis;
      std::vector<int64_t> dyShape(shape.begin(), shape.begin() + axis);
      dyShape.insert(dyShape.end(), c.idxShape.begin(), c.idxShape.end());
      dyShape.insert(dyShape.end(), shape.begin() + axis + 1, shape.end());
      Buf idx(AMPRT_I64, c.idxShape);
      for (size_t i = 0; i < c.idx.size(); ++i)
        idx.set((int64_t)i, (double)c.idx[i]);
      Buf dy = randn(dt, dyShape), dd(dt, shape);
      AMPRT_OK_OR_FAIL(amprt_gather_grad(nullptr, idx.p(), dy.p(), axis, dd.p()));
      int64_t outer = 1, inner = 1, limit = shape[axis], nidx = (int64_t)c.idx.size();
      for (int32_t d = 0; d < axis; ++d)
        outer *= shape[d];
      for (size_t d = axis + 1; d < shape.size(); ++d)
        inner *= shape[d];
      std::vector<double> ref(dd.numel(), 0.0);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < nidx; ++j) {
          int64_t k = c.idx[j] < 0 ? c.idx[j] + limit : c.idx[j];
          for (int64_t i = 0; i < inner; ++i)
            ref[(o * limit + k) * inner + i] += dy.get((o * nidx + j) * inner + i);
        }
      // A distinct index's block is its dy exactly; a row hit three times
      // is a sum in f32 (two roundings of partial sums of unit-size terms),
      // then stored.
      EXPECT_TRUE(near(dd, ref, 0.5, 0.0, 4e-6)) << amprt_dtype_name(dt) << " axis " << axis;
      bool distinct = true;
      for (size_t i = 0; i < c.idx.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          distinct &= (c.idx[i] + limit) % limit != (c.idx[j] + limit) % limit;
      if (distinct) {
        EXPECT_TRUE(near(dd, ref, 0.0)) << amprt_dtype_name(dt) << " axis " << axis;
      }
    }
}

// The vector erf / erf-gradient paths (glibc libmvec) stay within 2 ulp of
// the correctly rounded value, over the whole range where erf is not +-1.
TEST(Unary, ErfAndItsGradientWithinTwoUlp) {
  const int n = 400003; // not a multiple of the vector width: the tail too
  std::vector<float> x(n), y(n), g(n), dx(n);
  for (int i = 0; i < n; ++i) {
    x[i] = -4.5f + 9.0f * (float)i / (float)n;
    g[i] = 1.0f + 0.5f * std::sin((float)i);
  }
  int64_t sh[1] = {n};
  amprt_tensor tx = amprt_tensor_make(x.data(), AMPRT_F32, 1, sh);
  amprt_tensor ty = amprt_tensor_make(y.data(), AMPRT_F32, 1, sh);
  amprt_tensor tg = amprt_tensor_make(g.data(), AMPRT_F32, 1, sh);
  amprt_tensor tdx = amprt_tensor_make(dx.data(), AMPRT_F32, 1, sh);
  ASSERT_EQ(amprt_unary(nullptr, AMPRT_UNARY_ERF, 0.0f, &tx, &ty), AMPRT_OK);
  ASSERT_EQ(amprt_unary_grad(nullptr, AMPRT_UNARY_ERF, 0.0f, &tx, &tg, &tdx), AMPRT_OK);
  auto ulps = [](float a, double ref) {
    float r = (float)ref;
    int32_t ia, ir;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ir, &r, 4);
    return std::abs((int64_t)ia - (int64_t)ir);
  };
  for (int i = 0; i < n; ++i) {
    ASSERT_LE(ulps(y[i], std::erf((double)x[i])), 2) << "erf(" << x[i] << ")";
    // x^2 rounded to f32 as the kernel does (its rounding alone moves
    // exp(-x^2) by up to |x|^2 * 2^-24, several ulp at |x| = 4.5).
    float xx = x[i] * x[i];
    double d = (double)g[i] * 1.1283791670955126 * std::exp(-(double)xx);
    // libmvec expf (<= 2 ulp), then two f32 products: <= 6 ulp in all.
    ASSERT_LE(ulps(dx[i], d), 6) << "erf'(" << x[i] << ")";
  }
}

TEST(Binary, ComparisonsAndLogicalOpsGiveI1) {
  const amprt_binary_op ops[] = {AMPRT_BINARY_EQ, AMPRT_BINARY_LT, AMPRT_BINARY_LE,
                                 AMPRT_BINARY_GT, AMPRT_BINARY_GE, AMPRT_BINARY_AND,
                                 AMPRT_BINARY_OR, AMPRT_BINARY_XOR};
  // In long double (exact for int64 too) with the IEEE rules.
  auto ref = [](amprt_binary_op op, long double p, long double q) -> bool {
    switch (op) {
    case AMPRT_BINARY_EQ:
      return p == q;
    case AMPRT_BINARY_LT:
      return p < q;
    case AMPRT_BINARY_LE:
      return p <= q;
    case AMPRT_BINARY_GT:
      return p > q;
    case AMPRT_BINARY_GE:
      return p >= q;
    case AMPRT_BINARY_AND:
      return p != 0 && q != 0;
    case AMPRT_BINARY_OR:
      return p != 0 || q != 0;
    default:
      return (p != 0) != (q != 0);
    }
  };
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_F16, AMPRT_BF16, AMPRT_I64, AMPRT_I32, AMPRT_I1})
    for (amprt_binary_op op : ops) {
      bool isInt = dt == AMPRT_I64 || dt == AMPRT_I32 || dt == AMPRT_I1;
      int64_t lo = dt == AMPRT_I1 ? 0 : -2, hi = dt == AMPRT_I1 ? 2 : 4;
      // Small integers (many ties); floats with a copy of b's value in a,
      // NaNs and zeros (logical ops read 0 as false).
      Buf a = isInt ? randint(dt, {4, 1, 5}, lo, hi) : randn(dt, {4, 1, 5});
      Buf b = isInt ? randint(dt, {3, 1}, lo, hi) : randn(dt, {3, 1});
      if (!isInt) {
        a.set(0, b.get(0));
        a.set(1, NAN);
        b.set(2, NAN);
        a.set(7, 0.0);
        b.set(1, 0.0);
      }
      auto at = [&](const Buf &t, int64_t i) -> long double {
        return t.dtype == AMPRT_I64 ? (long double)reinterpret_cast<const int64_t *>(
                                          const_cast<Buf &>(t).p()->data)[i]
                                    : (long double)t.get(i);
      };
      if (dt == AMPRT_I64) { // 2^53 + 1 against 2^53: equal only through a double
        reinterpret_cast<int64_t *>(a.p()->data)[3] = ((int64_t)1 << 53) + 1;
        reinterpret_cast<int64_t *>(b.p()->data)[0] = (int64_t)1 << 53;
      }
      Buf y(AMPRT_I1, {4, 3, 5});
      AMPRT_OK_OR_FAIL(amprt_binary(nullptr, op, a.p(), b.p(), y.p()));
      int wrong = 0;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j)
          for (int k = 0; k < 5; ++k)
            wrong +=
                y.get((i * 3 + j) * 5 + k) != (ref(op, at(a, i * 5 + k), at(b, j)) ? 1.0 : 0.0);
      EXPECT_EQ(wrong, 0) << "op " << op << " " << amprt_dtype_name(dt) << " (seed " << testSeed()
                          << ")";
    }
  // A comparison gives i1 from operands of one type; other ops never give i1.
  Buf f(AMPRT_F32, {2}), g(AMPRT_F16, {2}), y1(AMPRT_I1, {2}), yf(AMPRT_F32, {2});
  EXPECT_NE(amprt_binary(nullptr, AMPRT_BINARY_LT, f.p(), g.p(), y1.p()), AMPRT_OK);
  EXPECT_NE(amprt_binary(nullptr, AMPRT_BINARY_LT, f.p(), f.p(), yf.p()), AMPRT_OK);
  EXPECT_NE(amprt_binary(nullptr, AMPRT_BINARY_ADD, f.p(), f.p(), y1.p()), AMPRT_OK);
}

// Dense f16 / bf16 unary ops and gradients (GELU, its gradient, ...) run by
// table (the costly ops: every input's result computed once, looked up by
// AVX-512 gathers where there are) or in pieces widened to f32 on the
// threads: every op, over several pieces on both threads and a tail, with
// y / dx in the low type or f32, is bit for bit the f32 path on the widened
// values, rounded once (the f32 path is checked against double in
// Unary.EveryOpEveryFloatType). The tables are dropped before each case, so
// that every op runs by table here, not only the first 64 tables' ops.
TEST(Unary, HalfPiecesMatchF32ThenRound) {
  const int64_t n = 2 * 16384 + 3 * 2048 + 77;
  for (amprt_dtype dt : {AMPRT_F16, AMPRT_BF16})
    for (amprt_dtype yt : {dt, AMPRT_F32})
      for (int op = 0; op <= (int)AMPRT_UNARY_LAST; ++op) {
        amprt::dropUnaryTables();
        auto u = (amprt_unary_op)op;
        float alpha = u == AMPRT_UNARY_CLAMP ? -0.5f : 0.7f, beta = 1.3f;
        Buf x = randn(dt, {n}, 2.0), dy = randn(dt, {n});
        // Special values among them (ReLU works on the bits): NaNs of
        // either sign with payloads, +-0, +-inf, the smallest subnormals.
        auto *bits = reinterpret_cast<uint16_t *>(x.bytes.data());
        const uint16_t bf16Special[9] = {0x7fc1, 0xffa0, 0x7f81, 0x8000, 0x0000,
                                         0x7f80, 0xff80, 0x0001, 0x8001};
        const uint16_t f16Special[9] = {0x7e01, 0xfd00, 0x7c01, 0x8000, 0x0000,
                                        0x7c00, 0xfc00, 0x0001, 0x8001};
        const uint16_t *special = dt == AMPRT_BF16 ? bf16Special : f16Special;
        static_assert(2040 + 500 * 8 < n, "special values inside x");
        for (size_t k = 0; k < 9; ++k)
          bits[2040 + 500 * k] = special[k]; // around the pieces' seams, below n
        // The f32 copies by the conversion itself (a round trip through
        // double would quieten signalling NaNs).
        Buf x32(AMPRT_F32, {n}), dy32(AMPRT_F32, {n});
        AMPRT_OK_OR_FAIL(amprt_convert(x.bytes.data(), dt, x32.bytes.data(), AMPRT_F32, (size_t)n));
        AMPRT_OK_OR_FAIL(
            amprt_convert(dy.bytes.data(), dt, dy32.bytes.data(), AMPRT_F32, (size_t)n));
        Buf y(yt, {n}), y32(AMPRT_F32, {n}), want(yt, {n});
        AMPRT_OK_OR_FAIL(amprt_unary_ex(nullptr, u, alpha, beta, x.p(), y.p()));
        AMPRT_OK_OR_FAIL(amprt_unary_ex(nullptr, u, alpha, beta, x32.p(), y32.p()));
        AMPRT_OK_OR_FAIL(
            amprt_convert(y32.bytes.data(), AMPRT_F32, want.bytes.data(), yt, (size_t)n));
        ASSERT_EQ(y.bytes, want.bytes)
            << "op " << op << " " << amprt_dtype_name(dt) << " -> " << amprt_dtype_name(yt);
        Buf dx(yt, {n}), dx32(AMPRT_F32, {n}), wantDx(yt, {n});
        AMPRT_OK_OR_FAIL(amprt_unary_grad_ex(nullptr, u, alpha, beta, x.p(), dy.p(), dx.p()));
        AMPRT_OK_OR_FAIL(amprt_unary_grad_ex(nullptr, u, alpha, beta, x32.p(), dy32.p(), dx32.p()));
        AMPRT_OK_OR_FAIL(
            amprt_convert(dx32.bytes.data(), AMPRT_F32, wantDx.bytes.data(), yt, (size_t)n));
        ASSERT_EQ(dx.bytes, wantDx.bytes) << "gradient of op " << op << " " << amprt_dtype_name(dt)
                                          << " -> " << amprt_dtype_name(yt);
      }
}
