//===- threads.cpp - CPU threads on a shared machine ----------------------===//
//
// amprt_threads_adapt: a kernel split over OpenMP threads ends at a barrier
// that waits for its slowest thread; on a machine whose cores other
// processes keep busy, the scheduler takes one of ours away for a time
// slice at a time and every split kernel waits for it. Measured on 2 cores
// with two busy processes (bench/under_load.py, AMD EPYC, AVX2), resnet10t
// bf16: 2 threads 108 ms quiet, 2057 ms loaded; 1 thread 168 ms quiet,
// 296 ms loaded. So when the process is being preempted often (involuntary
// context switches, getrusage), one thread; when that stops, all of them.
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt.h"

#include <sys/resource.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

long preemptions() {
  rusage u;
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_nivcsw : 0;
}

struct Governor {
  bool on = false, debug = false;
  int all = 1, current = 1;
  double busyRate = 120;  // preemptions per second (all threads) that mean "busy"
  int busyWindows = 0;    // consecutive busy windows of >= 0.1 s
  double windowStart = 0; // the measurement window
  long windowCsw = 0;
  double oneStart = -1; // with one thread: since when, and the switches then
  long oneCsw = 0;

  Governor() {
#if defined(_OPENMP)
    all = current = omp_get_max_threads();
    const char *mode = getenv("AMPRT_ADAPT_THREADS");
    on = all > 1 && !getenv("OMP_NUM_THREADS") && !(mode && !strcmp(mode, "0"));
    debug = mode && !strcmp(mode, "debug");
    if (const char *r = getenv("AMPRT_BUSY_PREEMPTIONS"))
      if (double v = atof(r); v > 0)
        busyRate = v;
    windowStart = now();
    windowCsw = preemptions();
#endif
  }

  int step() {
#if defined(_OPENMP)
    if (!on)
      return current;
    double t = now();
    if (t - windowStart < 0.1)
      return current;
    long c = preemptions();
    double rate = (double)(c - windowCsw) / (t - windowStart);
    windowStart = t;
    windowCsw = c;
    int next = current;
    if (current == all) {
      // Busy: one window far above the quiet level (20-60 here), or two
      // in a row above it (a quiet machine has single spikes).
      busyWindows = rate > busyRate ? busyWindows + 1 : 0;
      if (busyWindows >= 2 || rate > 2 * busyRate)
        next = 1;
    } else if (t - oneStart >= 1.0) {
      // One thread is preempted less often than two on the same busy
      // machine (2 cores, 2 busy processes: 30-110 a second, against 250
      // with two): all threads again only when a whole second was quiet.
      double oneRate = (double)(c - oneCsw) / (t - oneStart);
      if (oneRate < busyRate / 3)
        next = all;
      oneStart = t;
      oneCsw = c;
    }
    if (debug)
      std::fprintf(stderr, "amprt: %.0f preemptions/s with %d thread%s%s\n", rate, current,
                   current == 1 ? "" : "s",
                   next != current ? (next == 1 ? ": 1 thread" : ": all threads") : "");
    if (next != current) {
      omp_set_num_threads(next);
      current = next;
      busyWindows = 0;
      oneStart = t;
      oneCsw = c;
    }
#endif
    return current;
  }
};

} // namespace

extern "C" int32_t amprt_threads_adapt(void) {
  static std::mutex mu;
  static Governor g;
  std::lock_guard<std::mutex> lock(mu);
  return g.step();
}
