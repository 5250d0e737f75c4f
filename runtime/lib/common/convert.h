//===- convert.h - conversions between element types ------*- C++ -*-===//

#ifndef AMPRT_COMMON_CONVERT_H
#define AMPRT_COMMON_CONVERT_H

#include "amprt/amprt.h"

#include <cstddef>
#include <cstdint>

namespace amprt {

/// The portable conversion loop (the definition vector paths must match).
void convertScalar(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n);
/// amprt_convert between float types the caller has checked, without its
/// checks: the fastest path the CPU has (AVX-512, AVX2 + F16C, or the
/// scalar loop), for short runs called many times (a batch norm's planes,
/// the optimizer's blocks).
void convertRun(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n);
/// Whether convertRun has its AVX-512 paths here (AVX-512 F + BW, and
/// AMPRT_NO_AVX512 / AMPRT_NO_AVX2 unset).
bool haveAvx512bw();

/// n elements of type t widened to f32 / f32 narrowed to type t, exactly
/// as amprt_convert: short runs (a late layer's 2 x 2 planes) by the scalar
/// definitions inline, since a call and its checks cost more than the work
/// there; long ones by amprt_convert's vector paths (batch_norm.cpp).
void widenRun(const void *src, amprt_dtype t, float *dst, int64_t n);
void narrowRun(const float *src, void *dst, amprt_dtype t, int64_t n);

} // namespace amprt

#endif // AMPRT_COMMON_CONVERT_H
