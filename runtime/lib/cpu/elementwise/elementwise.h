//===- elementwise.h - element-wise helpers for other kernels ---*- C++ -*-===//

#ifndef AMPRT_CPU_ELEMENTWISE_H
#define AMPRT_CPU_ELEMENTWISE_H

#include "amprt/amprt.h"

#include <cstdint>
#include <initializer_list>

namespace amprt {

/// Forgets the f16 / bf16 unary ops' tables (elementwise.cpp; a process
/// keeps 64): for tests that must run every op by table. Only while no
/// kernel runs.
void dropUnaryTables();

/// f16 / bf16 kernels run as their f32 kernels on f32 copies of the operands
/// (vector conversions, thread-local scratch reused from call to call): the
/// same arithmetic (f32, one rounding when stored) as element-wise loads and
/// stores, without a conversion call per element. `slot` picks one of four
/// scratch buffers. An f32 tensor is returned as it is.
amprt_tensor asF32(const amprt_tensor *x, int slot);

/// y's shape must be the broadcast of the inputs': per-input strides over
/// y's shape in strides[0..], y's own strides last (elementwise.cpp).
amprt_status prepare(const char *kernel, const amprt_tensor *y,
                     std::initializer_list<const amprt_tensor *> ins,
                     int64_t (*strides)[AMPRT_MAX_RANK]);
/// A contiguous f32 scratch tensor of y's shape.
amprt_tensor scratchF32(const amprt_tensor *y, int slot);
/// Where an f32 result for y is computed: y itself when it is f32 (then
/// storeFromF32 has nothing to do), else scratchF32(y, slot).
inline amprt_tensor outF32(amprt_tensor *y, int slot) {
  return y->dtype == AMPRT_F32 ? *y : scratchF32(y, slot);
}
/// Stores an f32 scratch result into y (rounding to y's type).
amprt_status storeFromF32(const amprt_tensor &y32, amprt_tensor *y);

/// y[i] = exp(x[i]) in f32, four at a time with glibc's libmvec where it
/// exists (within 2 ulp, as the scalar function); y may be x.
void expF32(const float *x, float *y, int64_t n);

/// ReLU's gradient in f32: out[i] = dy[i] * (x[i] > 0 ? 1 : 0), branch-free
/// (an inf / NaN dy stays visible where x <= 0); out may be dy. x is the
/// ReLU's input or its output (the same mask).
void reluGradF32(const float *x, const float *dy, float *out, int64_t n);

/// amprt_convert over pieces on the threads (the conversions are exact and
/// the same on every path, so the split does not show).
amprt_status convertPar(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n);

} // namespace amprt

#endif // AMPRT_CPU_ELEMENTWISE_H
