//===- batch_norm_avx512.h - batch norm's AVX-512 kernels -------*- C++ -*-===//
//
// AVX-512 (x86-64 CPUs with AVX512F / BW / VL, AMPRT_NO_AVX512 unset; f32 and
// bf16 tensors): a channel's planes are read where they lie, sixteen
// elements at a time, widened in registers (bf16 exactly), with the same
// double arithmetic and one rounding to f32 per value (then to bf16, as
// the planes' narrowing above), and a channel's sums kept in vector
// registers over all its planes. The other paths widen each plane into a
// buffer and pay a call, a horizontal sum and a narrowing per plane, which
// cost more than the arithmetic on the 2 x 2 to 16 x 16 maps of a late
// layer. The statistics' sums are added in another order (double, eight
// lanes), the same for amprt_batch_norm and the recomputing gradient.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CPU_NORM_BATCH_NORM_AVX512_H
#define AMPRT_CPU_NORM_BATCH_NORM_AVX512_H

#include "common/check.h"
#include "host/threads.h"

#include <algorithm>
#include <initializer_list>

namespace amprt::bn {

/// Planes of at least this many elements (4 x 4 maps and larger); shorter
/// ones fill too little of a vector, and the column path (see
/// kShortPlane) runs along the channels instead.
constexpr int64_t kVectorPlane = 16;

/// One channel's planes: plane b's element i at base + b * stride + i.
struct Planes {
  const void *base;
  amprt_dtype type;
  int64_t stride;
};

/// log2(inner) for the packed path, or -1 where it does not apply.
inline int packedShift(int64_t inner) {
  return inner == 1 ? 0 : inner == 2 ? 1 : inner == 4 ? 2 : inner == 8 ? 3 : -1;
}

/// The kernels this CPU runs (batch_norm_avx512.inc's, built for AVX-512
/// F / BW / VL, or with AVX512-BF16 where the CPU has that).
struct Bn512 {
  void (*channelSums)(Planes x, const Planes *dy, const Planes *z, int64_t n, int64_t inner,
                      double k, double out[4]);
  void (*normalize)(Planes x, void *y, amprt_dtype yt, int64_t n, int64_t inner, double mu,
                    double invStd, double g, double bias, bool relu);
  void (*gradDx)(Planes x, Planes dy, const Planes *z, void *dx, amprt_dtype dxt, int64_t n,
                 int64_t inner, double mu, double is, double k, double m, double sdy, double sdyx);
  void (*packedSums)(const void *x, amprt_dtype xt, const void *dy, amprt_dtype dyt, const void *z,
                     amprt_dtype zt, int64_t n, int64_t c, int shift, int64_t c0, int64_t g,
                     const double *k, double (*out)[16]);
  void (*packedNormalize)(const void *x, amprt_dtype xt, void *y, amprt_dtype yt, int64_t n,
                          int64_t c, int shift, int64_t c0, int64_t g, const double *mu,
                          const double *invStd, const double *scale, const double *bias, bool relu);
  void (*packedGradDx)(const void *x, amprt_dtype xt, const void *dy, amprt_dtype dyt,
                       const void *z, amprt_dtype zt, void *dx, amprt_dtype dxt, int64_t n,
                       int64_t c, int shift, int64_t c0, int64_t g, const double *mu,
                       const double *is, const double *k, double m, const double *sdy,
                       const double *sdyx);
};
/// Only where useBn512.
const Bn512 &bn512Kernels();

/// The AVX-512 paths' work per thread: at least this many elements (a late
/// layer's whole batch norm is 16k to 128k of them, a few tens of
/// microseconds: worth both threads; 32k per thread kept them on one).
constexpr int64_t kBnGrain = 4096;

/// Channel groups of the packed small-plane path (see packedSums): f(ch0,
/// count) for each group of 16 / inner channels, on the threads.
template <class F> void forPackedGroups(int64_t c, int64_t n, int shift, F f) {
  int64_t per = 16 >> shift, groups = (c + per - 1) / per;
  parallelFor(groups, std::max<int64_t>(1, kBnGrain / std::max<int64_t>(n * 16, 1)), 1,
              [&](int64_t g0, int64_t g1) {
                for (int64_t gi = g0; gi < g1; ++gi)
                  f(gi * per, std::min(per, c - gi * per));
              });
}

/// Whether the AVX-512 path takes these tensors.
bool useBn512(std::initializer_list<const amprt_tensor *> ts);

} // namespace amprt::bn

#endif // AMPRT_CPU_NORM_BATCH_NORM_AVX512_H
