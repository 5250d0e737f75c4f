//===- kernels.h - the element-wise family's shared loops ---*- C++ -*-===//

#ifndef AMPRT_CPU_ELEMENTWISE_KERNELS_H
#define AMPRT_CPU_ELEMENTWISE_KERNELS_H

#include "common/check.h"
#include "host/threads.h"

#include <algorithm>
#include <initializer_list>

namespace amprt {

/// Same shape, both contiguous: the element order is the flat order.
inline bool sameDense(const amprt_tensor *a, const amprt_tensor *y) {
  if (a->rank != y->rank || !amprt_tensor_is_contiguous(a) || !amprt_tensor_is_contiguous(y))
    return false;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != y->shape[d])
      return false;
  return true;
}

/// Same-shape dense float operands with an f16 / bf16 among them: pieces
/// of 2048 elements widened to f32 in thread-local buffers (an f32 operand
/// is read in place), `f(in, out, m)` computes the f32 arithmetic of the
/// f32 path over a piece, and the piece is rounded back once (an f32 y is
/// written in place), on the threads: one pass over memory instead of the
/// four of whole-tensor f32 copies. Pieces are whole multiples of the
/// vector width, so every element sees the f32 path's vector / scalar
/// split. `grain`: elements per thread worth starting one for. False when
/// the operands do not qualify.
template <size_t N, typename F>
bool halfPieces(const amprt_tensor *const (&in)[N], amprt_tensor *y, int64_t grain, F f) {
  bool half = isHalf(y->dtype);
  for (const amprt_tensor *t : in) {
    if (!isFloat(t->dtype) || !sameDense(t, y))
      return false;
    half |= isHalf(t->dtype);
  }
  if (!half || !isFloat(y->dtype))
    return false;
  constexpr int64_t kPiece = 2048;
  int64_t n = amprt_tensor_numel(y);
  parallelFor((n + kPiece - 1) / kPiece, std::max<int64_t>(1, grain / kPiece), 1,
              [&](int64_t p0, int64_t p1) {
                float buf[N][kPiece], out[kPiece];
                for (int64_t p = p0; p < p1; ++p) {
                  int64_t i = p * kPiece, m = std::min(kPiece, n - i);
                  const float *ptr[N];
                  for (size_t k = 0; k < N; ++k) {
                    const char *src = static_cast<const char *>(in[k]->data) +
                                      i * (int64_t)amprt_dtype_size(in[k]->dtype);
                    if (in[k]->dtype == AMPRT_F32) {
                      ptr[k] = reinterpret_cast<const float *>(src);
                    } else {
                      amprt_convert(src, in[k]->dtype, buf[k], AMPRT_F32, (size_t)m);
                      ptr[k] = buf[k];
                    }
                  }
                  char *dst =
                      static_cast<char *>(y->data) + i * (int64_t)amprt_dtype_size(y->dtype);
                  bool direct = y->dtype == AMPRT_F32;
                  f(ptr, direct ? reinterpret_cast<float *>(dst) : out, m);
                  if (!direct)
                    amprt_convert(out, AMPRT_F32, dst, y->dtype, (size_t)m);
                }
              });
  return true;
}

#if defined(__x86_64__)
/// K::run<T...> for the float types at hand (f32 / f16 / bf16, picked one
/// at a time): the kernels below exist for every combination.
template <typename K, amprt_dtype... Ts> typename K::Fn pickTypes() {
  return &K::template run<Ts...>;
}
template <typename K, amprt_dtype... Ts, typename... Rest>
typename K::Fn pickTypes(amprt_dtype t, Rest... rest) {
  switch (t) {
  case AMPRT_F32:
    return pickTypes<K, Ts..., AMPRT_F32>(rest...);
  case AMPRT_F16:
    return pickTypes<K, Ts..., AMPRT_F16>(rest...);
  default:
    return pickTypes<K, Ts..., AMPRT_BF16>(rest...);
  }
}
#endif

/// Dense float operands of y's shape, at least one of them f16 / bf16.
inline bool halfDense(std::initializer_list<const amprt_tensor *> in, const amprt_tensor *y) {
  bool half = isHalf(y->dtype);
  for (const amprt_tensor *t : in) {
    if (!isFloat(t->dtype) || !sameDense(t, y))
      return false;
    half |= isHalf(t->dtype);
  }
  return half && isFloat(y->dtype);
}

} // namespace amprt

#endif // AMPRT_CPU_ELEMENTWISE_KERNELS_H
