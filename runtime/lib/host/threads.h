//===- threads.h - the OpenMP threads and scratch buffers ---*- C++ -*-===//

#ifndef AMPRT_HOST_THREADS_H
#define AMPRT_HOST_THREADS_H

#include "amprt/amprt.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace amprt {

/// The threads the next kernel may use (amprt_threads_adapt changes it).
inline int maxThreads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// v's storage for at least n elements, for a scratch buffer kept between
/// calls (thread_local): grown when short, never shrunk. (resize(n) would
/// shrink it for a smaller call and value-initialise, that is clear, the
/// difference again at the next larger one: megabytes a call where calls
/// of two sizes alternate.)
template <typename T> T *grown(std::vector<T> &v, size_t n) {
  if (v.size() < n)
    v.resize(n);
  return v.data();
}

/// Runs f(begin, end) over [0, n) in pieces on the OpenMP threads (the
/// pool oneDNN uses too) when there is at least `grain` work per thread;
/// piece boundaries are multiples of `align`, so that each element is
/// computed by the same code (vector body or scalar tail) whatever the
/// number of threads: results do not depend on it. Only for loops whose
/// outputs are independent (no sum across pieces). Inside a parallel
/// region, or with one thread, f(0, n) runs here.
template <typename F> void parallelFor(int64_t n, int64_t grain, int64_t align, F f) {
#if defined(_OPENMP)
  int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  int64_t units = (n + align - 1) / align;
  int64_t pieces = std::min<int64_t>({threads, units, n / std::max<int64_t>(grain, 1)});
  if (pieces > 1) {
#pragma omp parallel for num_threads((int)pieces) schedule(static, 1)
    for (int64_t k = 0; k < pieces; ++k) {
      int64_t b = std::min(n, units * k / pieces * align);
      int64_t e = std::min(n, units * (k + 1) / pieces * align);
      if (b < e)
        f(b, e);
    }
    return;
  }
#endif
  (void)grain;
  (void)align;
  f((int64_t)0, n);
}

} // namespace amprt

#endif // AMPRT_HOST_THREADS_H
