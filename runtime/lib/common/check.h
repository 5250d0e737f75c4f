//===- check.h - status, checks, element access -----------*- C++ -*-===//

#ifndef AMPRT_COMMON_CHECK_H
#define AMPRT_COMMON_CHECK_H

#include "amprt/amprt.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace amprt {

/// Records a printf-style message as this thread's last error and returns
/// `status`.
amprt_status fail(amprt_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

inline bool isFloat(amprt_dtype t) { return t == AMPRT_F32 || t == AMPRT_F16 || t == AMPRT_BF16; }
inline bool isValid(amprt_dtype t) { return (unsigned)t < (unsigned)AMPRT_DTYPE_COUNT; }

std::string shapeString(const amprt_tensor *t);

/// Loads element i (in elements from `base`) as float / as int64.
inline float loadF(const void *base, amprt_dtype t, int64_t i) {
  switch (t) {
  case AMPRT_F32:
    return static_cast<const float *>(base)[i];
  case AMPRT_F16:
    return amprt_f16_to_f32(static_cast<const uint16_t *>(base)[i]);
  case AMPRT_BF16:
    return amprt_bf16_to_f32(static_cast<const uint16_t *>(base)[i]);
  case AMPRT_I1:
    return static_cast<const uint8_t *>(base)[i] ? 1.0f : 0.0f;
  case AMPRT_I8:
    return static_cast<const int8_t *>(base)[i];
  case AMPRT_I16:
    return static_cast<const int16_t *>(base)[i];
  case AMPRT_I32:
    return (float)static_cast<const int32_t *>(base)[i];
  case AMPRT_I64:
    return (float)static_cast<const int64_t *>(base)[i];
  case AMPRT_U8:
    return static_cast<const uint8_t *>(base)[i];
  case AMPRT_U16:
    return static_cast<const uint16_t *>(base)[i];
  case AMPRT_U32:
    return (float)static_cast<const uint32_t *>(base)[i];
  case AMPRT_U64:
    return (float)static_cast<const uint64_t *>(base)[i];
  default:
    return 0.0f;
  }
}

inline int64_t loadI(const void *base, amprt_dtype t, int64_t i) {
  switch (t) {
  case AMPRT_I1:
    return static_cast<const uint8_t *>(base)[i] != 0;
  case AMPRT_I8:
    return static_cast<const int8_t *>(base)[i];
  case AMPRT_I16:
    return static_cast<const int16_t *>(base)[i];
  case AMPRT_I32:
    return static_cast<const int32_t *>(base)[i];
  case AMPRT_I64:
    return static_cast<const int64_t *>(base)[i];
  case AMPRT_U8:
    return static_cast<const uint8_t *>(base)[i];
  case AMPRT_U16:
    return static_cast<const uint16_t *>(base)[i];
  case AMPRT_U32:
    return static_cast<const uint32_t *>(base)[i];
  case AMPRT_U64:
    return (int64_t)static_cast<const uint64_t *>(base)[i];
  default:
    return (int64_t)loadF(base, t, i);
  }
}

/// Stores v rounded to nearest even in the element type.
inline void storeF(void *base, amprt_dtype t, int64_t i, float v) {
  switch (t) {
  case AMPRT_F32:
    static_cast<float *>(base)[i] = v;
    break;
  case AMPRT_F16:
    static_cast<uint16_t *>(base)[i] = amprt_f32_to_f16(v);
    break;
  case AMPRT_BF16:
    static_cast<uint16_t *>(base)[i] = amprt_f32_to_bf16(v);
    break;
  default:
    break;
  }
}

inline void storeI(void *base, amprt_dtype t, int64_t i, int64_t v) {
  switch (t) {
  case AMPRT_I1:
    static_cast<uint8_t *>(base)[i] = v != 0;
    break;
  case AMPRT_I8:
    static_cast<int8_t *>(base)[i] = (int8_t)v;
    break;
  case AMPRT_I16:
    static_cast<int16_t *>(base)[i] = (int16_t)v;
    break;
  case AMPRT_I32:
    static_cast<int32_t *>(base)[i] = (int32_t)v;
    break;
  case AMPRT_I64:
    static_cast<int64_t *>(base)[i] = v;
    break;
  case AMPRT_U8:
    static_cast<uint8_t *>(base)[i] = (uint8_t)v;
    break;
  case AMPRT_U16:
    static_cast<uint16_t *>(base)[i] = (uint16_t)v;
    break;
  case AMPRT_U32:
    static_cast<uint32_t *>(base)[i] = (uint32_t)v;
    break;
  case AMPRT_U64:
    static_cast<uint64_t *>(base)[i] = (uint64_t)v;
    break;
  default:
    storeF(base, t, i, (float)v);
    break;
  }
}

inline bool isHalf(amprt_dtype t) { return t == AMPRT_F16 || t == AMPRT_BF16; }

/// Whether a and b have one shape (reduce.cpp).
bool sameShape(const amprt_tensor *a, const amprt_tensor *b);
/// A valid f32, f16 or bf16 tensor (reduce.cpp).
amprt_status checkFloat(const amprt_tensor *t, const char *what);
/// A contiguous float tensor of c elements (reduce.cpp).
amprt_status checkChannel(const amprt_tensor *t, int64_t c, const char *what);

/// Checks a descriptor; `what` names it in the message ("amprt_gemm: a").
amprt_status check(const amprt_tensor *t, const char *what);

/// Strides of `x` seen from an output of shape (rank, shape): numpy
/// broadcasting, right-aligned, size-1 dims get stride 0. Fails when x does
/// not broadcast to that shape.
amprt_status broadcastStrides(const amprt_tensor *x, int32_t rank, const int64_t *shape,
                              int64_t *strides, const char *what);

/// Calls f(offsets) for every element of `shape`, where offsets[k] is the
/// element offset in operand k given its strides. N operands.
template <int N, typename F>
void forEach(int32_t rank, const int64_t *shape, const int64_t (*strides)[AMPRT_MAX_RANK], F &&f) {
  int64_t idx[AMPRT_MAX_RANK] = {0};
  int64_t off[N] = {0};
  for (int32_t d = 0; d < rank; ++d)
    if (shape[d] == 0)
      return;
  if (rank == 0) {
    f(off);
    return;
  }
  const int32_t last = rank - 1;
  const int64_t inner = shape[last];
  while (true) {
    int64_t o[N];
    for (int k = 0; k < N; ++k)
      o[k] = off[k];
    for (int64_t i = 0; i < inner; ++i) {
      f(o);
      for (int k = 0; k < N; ++k)
        o[k] += strides[k][last];
    }
    int32_t d = last - 1;
    while (d >= 0) {
      ++idx[d];
      for (int k = 0; k < N; ++k)
        off[k] += strides[k][d];
      if (idx[d] < shape[d])
        break;
      for (int k = 0; k < N; ++k)
        off[k] -= strides[k][d] * idx[d];
      idx[d] = 0;
      --d;
    }
    if (d < 0)
      return;
  }
}

/// Row-major strides of a shape.
void contiguousStrides(int32_t rank, const int64_t *shape, int64_t *strides);

/// A valid contiguous f32 tensor (`what` names it in the message).
amprt_status checkF32(const amprt_tensor *t, const char *what);
/// b holds as many elements as the parameter a (`kernel` and `what` name
/// them in the message).
amprt_status sameCount(const amprt_tensor *a, const amprt_tensor *b, const char *kernel,
                       const char *what);

} // namespace amprt

#define AMPRT_CHECK(expr)                                                                          \
  do {                                                                                             \
    amprt_status s_ = (expr);                                                                      \
    if (s_ != AMPRT_OK)                                                                            \
      return s_;                                                                                   \
  } while (0)

// GCC 12 warns of the undefined vectors its own AVX-512 intrinsics start
// from (its bug 105593) wherever they are inlined: AMPRT_AVX512_QUIET_BEGIN
// ... AMPRT_AVX512_QUIET_END around such code.
#if defined(__GNUC__) && !defined(__clang__)
#define AMPRT_AVX512_QUIET_BEGIN                                                                   \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")       \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define AMPRT_AVX512_QUIET_END _Pragma("GCC diagnostic pop")
#else
#define AMPRT_AVX512_QUIET_BEGIN
#define AMPRT_AVX512_QUIET_END
#endif

/// Hot loops compiled three times, picked at load time by the CPU's features
/// (GCC's function multiversioning): baseline SSE2, AVX2, AVX-512.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define AMPRT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AMPRT_CLONES
#endif

#endif // AMPRT_COMMON_CHECK_H
