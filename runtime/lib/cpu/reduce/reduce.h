//===- reduce.h - sums in double --------------------------*- C++ -*-===//

#ifndef AMPRT_CPU_REDUCE_H
#define AMPRT_CPU_REDUCE_H

#include <cstdint>

namespace amprt {

/// Sum of n f32 values in double with eight partial sums (no single
/// dependency chain: a serial double sum costs an add latency per element).
inline double sumF32(const float *p, int64_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k)
      s[k] += (double)p[i + k];
  for (; i < n; ++i)
    s[i & 7] += (double)p[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/// Sum of (p[i] - mu)^2 in double, as sumF32.
inline double sumSqDevF32(const float *p, int64_t n, double mu) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      double d = (double)p[i + k] - mu;
      s[k] += d * d;
    }
  for (; i < n; ++i) {
    double d = (double)p[i] - mu;
    s[i & 7] += d * d;
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

} // namespace amprt

#endif // AMPRT_CPU_REDUCE_H
