//===- matmul_dims.h - a matrix product's shapes ----------*- C++ -*-===//

#ifndef AMPRT_COMMON_MATMUL_DIMS_H
#define AMPRT_COMMON_MATMUL_DIMS_H

#include "amprt/amprt.h"

#include <cstdint>

namespace amprt {

/// A matrix product's shapes (numpy's matmul): 1-D operands promoted, the
/// batch dims broadcast; per batch dim its size and a's and b's strides
/// counted in matrices (0 where the operand is broadcast).
struct MatmulDims {
  int64_t m = 0, k = 0, n = 0, batches = 1;
  int32_t batchRank = 0;
  int64_t batch[AMPRT_MAX_RANK] = {0}, astr[AMPRT_MAX_RANK] = {0}, bstr[AMPRT_MAX_RANK] = {0};
  /// The matrix indices into a and b of batch `bt` (row-major order).
  void offsets(int64_t bt, int64_t &ao, int64_t &bo) const {
    ao = bo = 0;
    for (int32_t d = batchRank - 1; d >= 0; --d) {
      int64_t i = bt % batch[d];
      bt /= batch[d];
      ao += i * astr[d];
      bo += i * bstr[d];
    }
  }
};
/// Fills `md` for y = a @ b (`what` names the kernel in messages): the
/// contracted dims must agree, the batch dims broadcast and y hold the
/// result.
amprt_status matmulDims(const amprt_tensor *a, const amprt_tensor *b, const amprt_tensor *y,
                        const char *what, MatmulDims &md);

/// A matmul operand's layout: 0 dense row-major, 1 a transposed view of a
/// dense stack (its last two dims swapped: strides 1 and R on [..., R, C],
/// the batch dims dense over R x C matrices), -1 anything else.
inline int matrixLayout(const amprt_tensor *t) {
  if (amprt_tensor_is_contiguous(t))
    return 0;
  int32_t r = t->rank;
  if (r < 2)
    return -1;
  int64_t expect = t->shape[r - 2] * t->shape[r - 1];
  if ((t->shape[r - 2] > 1 && t->strides[r - 2] != 1) ||
      (t->shape[r - 1] > 1 && t->strides[r - 1] != t->shape[r - 2]))
    return -1;
  for (int32_t d = r - 3; d >= 0; --d) {
    if (t->shape[d] > 1 && t->strides[d] != expect)
      return -1;
    expect *= t->shape[d];
  }
  return 1;
}

} // namespace amprt

#endif // AMPRT_COMMON_MATMUL_DIMS_H
