//===- scalar_ops.h - the element-wise ops on one value --------*- C++ -*-===//
//
// The definitions of the unary ops, their derivatives and the integer power,
// shared by the CPU runtime (elementwise.cpp: the generic and f16 / bf16
// paths) and the CUDA kernels (../cuda/*.cu), so that both compute each
// op with the same formula.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_SCALAR_OPS_H
#define AMPRT_SCALAR_OPS_H

#include "amprt/amprt.h"
#include "common/convert_bits.h"

#include <cmath>
#include <cstdint>

namespace amprt::ops {

constexpr float kSqrt1_2 = 0.70710678118654752440f;

// The dropout generator (xorshift64*): a context's state steps once per
// drawn element and the uniform in [0, 1) is read from the new state. The
// step is linear over GF(2), so the CUDA kernels jump ahead to any element
// (a product of bit matrices) and draw the CPU's very sequence.
AMPRT_HOST_DEVICE inline uint64_t rngStep(uint64_t x) {
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  return x;
}
AMPRT_HOST_DEVICE inline float rngUniform(uint64_t x) {
  return (float)((x * 0x2545F4914F6CDD1DULL) >> 40) * (1.0f / 16777216.0f);
}

/// One random value of amprt_random from its draws (u1, u2: rngUniform
/// values, in [0, 1); u2 only for the normal): in double, rounded by
/// the caller. The normal is Box-Muller's cosine branch on 1 - u1 (in (0, 1]).
AMPRT_HOST_DEVICE inline double randomValue(int32_t kind, double a, double b, float u1, float u2,
                                            float p) {
  if (kind == 0)
    return a + (b - a) * (double)u1;
  if (kind == 1)
    return a + b * (sqrt(-2.0 * log(1.0 - (double)u1)) * cos(6.283185307179586 * (double)u2));
  return u1 < p ? 1.0 : 0.0;
}

// Phi(x) = 0.5 * erfc(-x / sqrt 2): unlike 0.5 * (1 + erf(x / sqrt 2)) it
// keeps its relative accuracy in the negative tail (no cancellation).
AMPRT_HOST_DEVICE inline float normalCdf(float x) { return 0.5f * erfcf(-x * kSqrt1_2); }
AMPRT_HOST_DEVICE inline float gelu(float x) { return x * normalCdf(x); }
// 0.5 * (1 + tanh(u)) = 1 / (1 + exp(-2u)), again without cancellation.
AMPRT_HOST_DEVICE inline float geluTanh(float x) {
  const float k = 0.79788456080286535588f; // sqrt(2 / pi)
  float u = k * (x + 0.044715f * x * x * x);
  return x / (1.0f + expf(-2.0f * u));
}
AMPRT_HOST_DEVICE inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/// max(0, min(1, t)), a NaN kept.
AMPRT_HOST_DEVICE inline float unitClamp(float t) {
  return t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
}

/// log(1 + e^x) without overflow: x + log(1 + e^-x) for x > 0.
AMPRT_HOST_DEVICE inline float softplus(float x) {
  return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
}

/// `Trig` false leaves the trigonometric and hyperbolic functions out (they
/// return x): sin / cos / tan's range reduction for huge arguments needs
/// local memory on a GPU, which the CUDA backend's grouped kernels must not
/// use, and the others are rare; it sends them (isTrig) elsewhere.
AMPRT_HOST_DEVICE inline bool isTrig(int op) {
  return op == AMPRT_UNARY_SIN || op == AMPRT_UNARY_COS ||
         (op >= AMPRT_UNARY_TAN && op <= AMPRT_UNARY_ATANH);
}

template <bool Trig = true>
AMPRT_HOST_DEVICE inline float applyUnary(int op, float x, float alpha, float beta = 0.0f) {
  switch (op) {
  case AMPRT_UNARY_IDENTITY:
    return x;
  case AMPRT_UNARY_RELU:
    return x > 0.0f ? x : ((x != x) ? x : 0.0f);
  case AMPRT_UNARY_SQRT:
    return sqrtf(x);
  case AMPRT_UNARY_EXP:
    return expf(x);
  case AMPRT_UNARY_LOG:
    return logf(x);
  case AMPRT_UNARY_ERF:
    return erff(x);
  case AMPRT_UNARY_TANH:
    return tanhf(x);
  case AMPRT_UNARY_SIGMOID:
    return sigmoid(x);
  case AMPRT_UNARY_GELU:
    return gelu(x);
  case AMPRT_UNARY_GELU_TANH:
    return geluTanh(x);
  case AMPRT_UNARY_LEAKY_RELU:
    return x >= 0.0f ? x : alpha * x;
  case AMPRT_UNARY_ABS:
    return fabsf(x);
  case AMPRT_UNARY_RECIPROCAL:
    return 1.0f / x;
  case AMPRT_UNARY_SOFTPLUS:
    return softplus(x);
  case AMPRT_UNARY_ELU:
    return x > 0.0f ? x : alpha * expm1f(x);
  case AMPRT_UNARY_CELU:
    return x > 0.0f ? x : alpha * expm1f(x / alpha);
  case AMPRT_UNARY_SELU:
    return x > 0.0f ? beta * x : (beta * alpha) * expm1f(x);
  case AMPRT_UNARY_HARD_SIGMOID:
    return unitClamp(alpha * x + beta);
  case AMPRT_UNARY_HARD_SWISH:
    return x * unitClamp(x * (1.0f / 6.0f) + 0.5f);
  case AMPRT_UNARY_SOFTSIGN:
    return x / (1.0f + fabsf(x));
  case AMPRT_UNARY_SIN:
    return Trig ? sinf(x) : x;
  case AMPRT_UNARY_COS:
    return Trig ? cosf(x) : x;
  case AMPRT_UNARY_FLOOR:
    return floorf(x);
  case AMPRT_UNARY_CEIL:
    return ceilf(x);
  case AMPRT_UNARY_ROUND:
    return rintf(x);
  case AMPRT_UNARY_SIGN:
    return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
  case AMPRT_UNARY_CLAMP: {
    float v = x < alpha ? alpha : x;
    return v > beta ? beta : v;
  }
  case AMPRT_UNARY_THRESHOLDED_RELU:
    return x > alpha ? x : ((x != x) ? x : 0.0f);
  case AMPRT_UNARY_TAN:
    return Trig ? tanf(x) : x;
  case AMPRT_UNARY_ASIN:
    return Trig ? asinf(x) : x;
  case AMPRT_UNARY_ACOS:
    return Trig ? acosf(x) : x;
  case AMPRT_UNARY_ATAN:
    return Trig ? atanf(x) : x;
  case AMPRT_UNARY_SINH:
    return Trig ? sinhf(x) : x;
  case AMPRT_UNARY_COSH:
    return Trig ? coshf(x) : x;
  case AMPRT_UNARY_ASINH:
    return Trig ? asinhf(x) : x;
  case AMPRT_UNARY_ACOSH:
    return Trig ? acoshf(x) : x;
  case AMPRT_UNARY_ATANH:
    return Trig ? atanhf(x) : x;
  case AMPRT_UNARY_MISH:
    return x * tanhf(softplus(x));
  }
  return x;
}

template <bool Trig = true>
AMPRT_HOST_DEVICE inline float unaryDerivative(int op, float x, float alpha, float beta = 0.0f) {
  switch (op) {
  case AMPRT_UNARY_IDENTITY:
    return 1.0f;
  case AMPRT_UNARY_RELU:
    return x > 0.0f ? 1.0f : 0.0f;
  case AMPRT_UNARY_SQRT:
    return 0.5f / sqrtf(x);
  case AMPRT_UNARY_EXP:
    return expf(x);
  case AMPRT_UNARY_LOG:
    return 1.0f / x;
  case AMPRT_UNARY_ERF:
    return 1.12837916709551257390f * expf(-x * x);
  case AMPRT_UNARY_TANH: {
    float t = tanhf(x);
    return 1.0f - t * t;
  }
  case AMPRT_UNARY_SIGMOID: {
    float s = sigmoid(x);
    return s * (1.0f - s);
  }
  case AMPRT_UNARY_GELU: {
    float cdf = normalCdf(x);
    float pdf = 0.39894228040143267794f * expf(-0.5f * x * x);
    return cdf + x * pdf;
  }
  case AMPRT_UNARY_GELU_TANH: {
    // 0.5 (1 + tanh u) = s = sigmoid(2u) and 1 - tanh(u)^2 = 4 s (1 - s),
    // with 1 - s = sigmoid(-2u): no cancellation in either tail.
    const float k = 0.79788456080286535588f;
    float inner = k * (x + 0.044715f * x * x * x);
    float sp = 1.0f / (1.0f + expf(-2.0f * inner));
    float sm = 1.0f / (1.0f + expf(2.0f * inner));
    float dinner = k * (1.0f + 3.0f * 0.044715f * x * x);
    return sp + 2.0f * x * (sp * sm) * dinner;
  }
  // torch's leaky_relu_backward: the slope's side includes 0.
  case AMPRT_UNARY_LEAKY_RELU:
    return x > 0.0f ? 1.0f : alpha;
  // torch.abs's: sign(x), 0 at 0 (a NaN stays NaN).
  case AMPRT_UNARY_ABS:
    return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x != x ? x : 0.0f));
  case AMPRT_UNARY_RECIPROCAL: {
    float r = 1.0f / x;
    return -(r * r);
  }
  case AMPRT_UNARY_SOFTPLUS:
    return sigmoid(x);
  // torch's elu_backward on the input: the exponential's side includes 0.
  case AMPRT_UNARY_ELU:
    return x > 0.0f ? 1.0f : alpha * expf(x);
  case AMPRT_UNARY_CELU:
    return x > 0.0f ? 1.0f : expf(x / alpha);
  case AMPRT_UNARY_SELU:
    return x > 0.0f ? beta : (beta * alpha) * expf(x);
  case AMPRT_UNARY_HARD_SIGMOID: {
    float t = alpha * x + beta;
    return (t > 0.0f && t < 1.0f) ? alpha : 0.0f;
  }
  // torch's hardswish_backward (2.x): 0 at and below -3, x / 3 + 1/2
  // strictly inside (-3, 3), 1 at and above 3. In fp16 an input of exactly
  // +-3 is common (3 * b for any b that rounds to 1).
  case AMPRT_UNARY_HARD_SWISH:
    return x <= -3.0f ? 0.0f : (x < 3.0f ? x / 3.0f + 0.5f : 1.0f);
  case AMPRT_UNARY_SOFTSIGN: {
    float d = 1.0f + fabsf(x);
    return 1.0f / (d * d);
  }
  case AMPRT_UNARY_SIN:
    return Trig ? cosf(x) : x;
  case AMPRT_UNARY_COS:
    return Trig ? -sinf(x) : x;
  case AMPRT_UNARY_FLOOR:
  case AMPRT_UNARY_CEIL:
  case AMPRT_UNARY_ROUND:
  case AMPRT_UNARY_SIGN:
    return 0.0f; // dy * 0 keeps an inf / NaN dy visible
  // torch.clamp's with scalar bounds (and hardtanh's): the whole gradient
  // strictly inside (alpha, beta), none at the bounds.
  case AMPRT_UNARY_CLAMP:
    return (x > alpha && x < beta) ? 1.0f : 0.0f;
  case AMPRT_UNARY_THRESHOLDED_RELU:
    return x > alpha ? 1.0f : 0.0f;
  // torch's formulas (outside the domain: NaN, as the function).
  case AMPRT_UNARY_TAN: {
    if (!Trig)
      return x;
    float t = tanf(x);
    return 1.0f + t * t;
  }
  case AMPRT_UNARY_ASIN:
    return Trig ? 1.0f / sqrtf(1.0f - x * x) : x;
  case AMPRT_UNARY_ACOS:
    return Trig ? -1.0f / sqrtf(1.0f - x * x) : x;
  case AMPRT_UNARY_ATAN:
    return Trig ? 1.0f / (1.0f + x * x) : x;
  case AMPRT_UNARY_SINH:
    return Trig ? coshf(x) : x;
  case AMPRT_UNARY_COSH:
    return Trig ? sinhf(x) : x;
  case AMPRT_UNARY_ASINH:
    return Trig ? 1.0f / sqrtf(x * x + 1.0f) : x;
  case AMPRT_UNARY_ACOSH:
    return Trig ? 1.0f / sqrtf((x - 1.0f) * (x + 1.0f)) : x;
  case AMPRT_UNARY_ATANH:
    return Trig ? 1.0f / (1.0f - x * x) : x;
  // torch's mish_backward: tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2).
  case AMPRT_UNARY_MISH: {
    float t = tanhf(softplus(x));
    return t + x * sigmoid(x) * (1.0f - t * t);
  }
  }
  return 1.0f;
}

AMPRT_HOST_DEVICE inline int64_t ipow(int64_t b, int64_t e) {
  if (e < 0)
    return b == 1 ? 1 : (b == -1 ? (e % 2 ? -1 : 1) : 0);
  int64_t r = 1;
  while (e) {
    if (e & 1)
      r *= b;
    b *= b;
    e >>= 1;
  }
  return r;
}

/// The comparisons and logical ops (EQ .. XOR): i1 results.
AMPRT_HOST_DEVICE inline bool isCompare(int op) {
  return op >= AMPRT_BINARY_EQ && op <= AMPRT_BINARY_XOR;
}

/// A binary op in f32 (MAX / MIN: a NaN in p wins).
AMPRT_HOST_DEVICE inline float binaryF(int op, float p, float q) {
  switch (op) {
  case AMPRT_BINARY_FMOD:
    return fmodf(p, q);
  case AMPRT_BINARY_MOD: {
    float r = fmodf(p, q);
    return (r != 0.0f && ((r < 0.0f) != (q < 0.0f))) ? r + q : r;
  }
  case AMPRT_BINARY_ADD:
    return p + q;
  case AMPRT_BINARY_SUB:
    return p - q;
  case AMPRT_BINARY_MUL:
    return p * q;
  case AMPRT_BINARY_DIV:
    return p / q;
  case AMPRT_BINARY_POW:
    return powf(p, q);
  case AMPRT_BINARY_MAX:
    return ((p != p) || p > q) ? p : q;
  default:
    return ((p != p) || p < q) ? p : q;
  }
}

/// A comparison or logical op (AMPRT_BINARY_EQ and after) on two floats
/// (IEEE: a NaN is unequal to everything) or two int64s.
template <typename T> AMPRT_HOST_DEVICE inline bool compareOp(int op, T p, T q) {
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
    return p != T(0) && q != T(0);
  case AMPRT_BINARY_OR:
    return p != T(0) || q != T(0);
  default:
    return (p != T(0)) != (q != T(0));
  }
}

/// One line of a cumulative sum: a running total of T (f32, or int64
/// wrapping), each output stored once: ld(i) reads element i, st(i, v)
/// writes it.
AMPRT_HOST_DEVICE inline float cumsumAdd(float a, float b) { return a + b; }
AMPRT_HOST_DEVICE inline int64_t cumsumAdd(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a + (uint64_t)b);
}
template <typename T, typename Load, typename Store>
AMPRT_HOST_DEVICE inline void cumsumScan(int64_t len, bool exclusive, bool reverse, Load ld,
                                         Store st) {
  T acc = T(0);
  for (int64_t k = 0; k < len; ++k) {
    int64_t i = reverse ? len - 1 - k : k;
    if (exclusive)
      st(i, acc);
    acc = cumsumAdd(acc, (T)ld(i));
    if (!exclusive)
      st(i, acc);
  }
}

/// Whether v replaces the current extreme `best` of an arg max / min scan
/// (a NaN is the extreme: the first one stays; ties per select_last).
template <typename T> AMPRT_HOST_DEVICE inline bool argBetter(T v, T best, bool min, bool last) {
  if (best != best)
    return false;
  if (v != v)
    return true;
  return min ? (last ? v <= best : v < best) : (last ? v >= best : v > best);
}

/// TopK's order: whether (a, ia) comes before (b, ib). Largest first (or
/// smallest), equal values by their index; a NaN counts as larger than any
/// number (torch.topk's order), NaNs among themselves by index.
AMPRT_HOST_DEVICE inline bool topBefore(float a, int64_t ia, float b, int64_t ib, bool largest) {
  bool an = a != a, bn = b != b;
  if (an || bn)
    return an && bn ? ia < ib : (largest ? an : bn);
  if (a == b)
    return ia < ib;
  return largest ? a > b : a < b;
}

/// A binary op in int64 (wrapping); an integer division by zero gives 0 and
/// sets *divByZero.
AMPRT_HOST_DEVICE inline int64_t binaryI(int op, int64_t p, int64_t q, bool *divByZero) {
  switch (op) {
  case AMPRT_BINARY_ADD:
    return (int64_t)((uint64_t)p + (uint64_t)q);
  case AMPRT_BINARY_SUB:
    return (int64_t)((uint64_t)p - (uint64_t)q);
  case AMPRT_BINARY_MUL:
    return (int64_t)((uint64_t)p * (uint64_t)q);
  case AMPRT_BINARY_DIV:
    if (q == 0) {
      *divByZero = true;
      return 0;
    }
    return (p == INT64_MIN && q == -1) ? p : p / q;
  case AMPRT_BINARY_POW:
    return ipow(p, q);
  case AMPRT_BINARY_MOD:
  case AMPRT_BINARY_FMOD: {
    if (q == 0) {
      *divByZero = true;
      return 0;
    }
    int64_t r = q == -1 ? 0 : p % q; // (INT64_MIN % -1 overflows in C)
    return (op == AMPRT_BINARY_MOD && r != 0 && ((r < 0) != (q < 0))) ? r + q : r;
  }
  case AMPRT_BINARY_MAX:
    return p > q ? p : q;
  default:
    return p < q ? p : q;
  }
}

/// A float to an integer: truncation toward zero; NaN gives 0, values out
/// of range saturate (undefined in C).
AMPRT_HOST_DEVICE inline int64_t floatToInt(float v) {
  return (v != v)                       ? 0
         : v >= 9.2233720368547758e18f  ? INT64_MAX
         : v <= -9.2233720368547758e18f ? INT64_MIN
                                        : (int64_t)v;
}

} // namespace amprt::ops

#endif // AMPRT_SCALAR_OPS_H
