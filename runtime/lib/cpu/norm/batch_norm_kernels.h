//===- batch_norm_kernels.h - batch norm's shared loops ---------*- C++ -*-===//
//
// The loops amprt_batch_norm (batch_norm.cpp) and its gradient
// (batch_norm_grad.cpp) share: the shifted statistics and the short planes'
// column path (batch_norm_kernels.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CPU_NORM_BATCH_NORM_KERNELS_H
#define AMPRT_CPU_NORM_BATCH_NORM_KERNELS_H

#include "common/check.h"
#include "common/convert.h"
#include "host/threads.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace amprt::bn {

// The batch statistics, shifted: with d = x - k, k a channel's first
// value (close to its mean wherever its values are close to each other, so
// nothing below cancels), a channel's sums of d and d^2 give its mean k +
// sum d / m and its (biased) variance sum d^2 / m - (sum d / m)^2 in one
// pass. amprt_batch_norm and the recomputing gradient find them the same
// way, in the same order: the same statistics to the bit.

/// A row's shifted sums, in double with eight partial sums each (no single
/// dependency chain): out[0], out[1] = sums of d = x - k and d^2; with dy,
/// out[2], out[3] = sums of dy and dy * d (the recomputing gradient's
/// pass).
void shiftedSums(const float *x, const float *dy, int64_t n, double k, double *out);

/// A channel's mean and biased variance from its shifted sums (the shift
/// k, sums of d and d^2 over m values).
inline void shiftedMoments(double k, double s, double q, double m, double &mean, double &variance) {
  double dm = s / m;
  mean = k + dm;
  variance = std::max(0.0, q / m - dm * dm);
}

/// ... and the mean and 1 / sqrt(var + eps) as amprt_batch_norm saves them.
inline void shiftedStatistics(double k, double s, double q, double m, float epsilon, float &mean,
                              float &invStd) {
  double mu, variance;
  shiftedMoments(k, s, q, m, mu, variance);
  mean = (float)mu;
  invStd = (float)(1.0 / std::sqrt(variance + (double)epsilon));
}

// Short planes (a late layer's 2 x 2 to 5 x 5 maps, fewer than
// kShortPlane elements): the per-plane loops cannot vectorise over a few
// elements and pay a call per plane, so x is read as rows [N, C * inner]
// instead: each column is summed over the rows in double (vector adds
// along the rows), a channel's sums are its inner columns added in order,
// and the outputs run along the rows with per-column copies of the
// channels' statistics. Columns go to the threads in chunks of kChunk; a
// column's arithmetic does not depend on the split.
constexpr int64_t kShortPlane = 32;
constexpr int64_t kChunk = 256;

/// The row segment [off, off + len) of a tensor of type t as f32: itself,
/// or widened into buf (exactly).
inline const float *rowF32(const void *base, amprt_dtype t, int64_t off, int64_t len, float *buf) {
  if (t == AMPRT_F32)
    return static_cast<const float *>(base) + off;
  widenRun(static_cast<const char *>(base) + off * 2, t, buf, len);
  return buf;
}

/// ReLU in place, as amprt_unary's: v where v > 0 or v is NaN, else +0
/// (no branch: the signs are random).
void reluRow(float *y, int64_t n);

/// dy * (z > 0) into out for z of any float type (z: n elements of type zt).
void maskAny(const float *dy, const void *z, amprt_dtype zt, float *out, int64_t n);

/// f(j0, j1) for the column chunks of [0, cols) on the threads (at least
/// 8k elements of the n rows each).
template <class F> void forColumnChunks(int64_t rows, int64_t cols, F f) {
  int64_t chunks = (cols + kChunk - 1) / kChunk;
  parallelFor(chunks, std::max<int64_t>(1, 8192 / std::max<int64_t>(rows * kChunk, 1)), 1,
              [&](int64_t k0, int64_t k1) {
                for (int64_t k = k0; k < k1; ++k)
                  f(k * kChunk, std::min(cols, (k + 1) * kChunk));
              });
}

/// Column sums of d = x - k[column] and of d^2 (the short planes'
/// statistics, shifted as shiftedSums).
void colAddShifted(double *s, double *q, const float *x, const double *k, int64_t n);
void colAddGrad(double *sd, double *sx, const float *x, const float *dy, const double *mu,
                int64_t n);
/// normalizeRow with per-column statistics.
void colNormalize(const float *x, float *y, const double *mu, const double *is, const double *g,
                  const double *b, int64_t n);
/// bnGradDx with per-column statistics.
void colGradDx(const float *x, const float *dy, float *dx, const double *mu, const double *is,
               const double *k, const double *sdy, const double *sdyx, double m, int64_t n);

/// Columns [j0, j0 + len) of per-channel values (each repeated over its
/// channel's inner columns), into out.
inline void expand(const double *perChannel, int64_t inner, int64_t j0, int64_t len, double *out) {
  int64_t ch = j0 / inner, end = j0 + len;
  for (int64_t j = j0; j < end; ++ch) {
    int64_t stop = std::min(end, (ch + 1) * inner);
    double v = perChannel[ch];
    for (; j < stop; ++j)
      out[j - j0] = v;
  }
}

/// A channel's sum: its inner columns added in order.
inline double channelSum(const std::vector<double> &s, int64_t ch, int64_t inner) {
  double r = 0.0;
  for (int64_t i = 0; i < inner; ++i)
    r += s[ch * inner + i];
  return r;
}

/// Writes y by column chunks: f(j0, len, rows) prepares chunk [j0, j0 +
/// len) and calls rows(g); g(out, off) computes the row segment at flat
/// offset off into out: y itself, or (f16 / bf16 y) a buffer then narrowed
/// into y.
template <class F> void columnOutputs(amprt_tensor *y, int64_t rows, int64_t cols, F f) {
  forColumnChunks(rows, cols, [&](int64_t j0, int64_t j1) {
    int64_t len = j1 - j0;
    f(j0, len, [&](auto &&g) {
      float buf[kChunk];
      for (int64_t b = 0; b < rows; ++b) {
        int64_t off = b * cols + j0;
        if (y->dtype == AMPRT_F32) {
          g(static_cast<float *>(y->data) + off, off);
        } else {
          g(buf, off);
          narrowRun(buf, static_cast<char *>(y->data) + off * 2, y->dtype, len);
        }
      }
    });
  });
}

/// The short planes' shifted sums (see shiftedSums) per channel: the
/// shifts (each channel's first value) and the sums of d and d^2, each
/// column summed over the rows, a channel's columns added in order.
void columnShiftedSums(const amprt_tensor *x, int64_t n, int64_t c, int64_t inner,
                       std::vector<double> &shift, std::vector<double> &sum,
                       std::vector<double> &sumSq);

} // namespace amprt::bn

#endif // AMPRT_CPU_NORM_BATCH_NORM_KERNELS_H
