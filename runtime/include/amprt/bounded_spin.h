/*===- amprt/bounded_spin.h - OpenMP threads that yield on a busy machine --===*
 *
 * Include in the one translation unit of an executable that defines main()
 * (the training program's runner, amp-run). libgomp's idle threads spin
 * for 300000 iterations before they sleep, and its barriers wait the same
 * way: while other processes keep the cores busy, a thread spinning for a
 * descheduled partner burns the time slice that partner needs, and a step
 * became 10-50x slower (resnet10t bf16 on 2 cores, two busy processes:
 * 77 -> 2142 ms). bench/under_load.py on 2 cores (AMD EPYC, AVX2), loaded /
 * quiet step of resnet10t: spin 30000 5.2x, 10000 2.9x, 3000 2.4-3.6x,
 * 1000 2.2x, 300 1.3x, passive 1.9x; the quiet 2.5 ms GPT-2 step within
 * noise down to 3000, about +10 % at 1000 and 300, +30 % passive. 1000.
 *
 * libgomp reads GOMP_SPINCOUNT once, in its constructor, before main():
 * the value is set from the executable's .preinit_array, which the dynamic
 * loader runs before any shared library's initialisers. A user's own
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT is left as it is.
 *
 *===----------------------------------------------------------------------===*/

#ifndef AMPRT_BOUNDED_SPIN_H
#define AMPRT_BOUNDED_SPIN_H

#include <stdlib.h>

#if defined(__linux__) && defined(__ELF__)
static void amprt_bound_openmp_spinning(int, char **, char **) {
  if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT"))
    setenv("GOMP_SPINCOUNT", "1000", 0);
}
__attribute__((section(".preinit_array"), used)) static void (*amprt_bound_openmp_spinning_entry)(
    int, char **, char **) = amprt_bound_openmp_spinning;
#endif

#endif /* AMPRT_BOUNDED_SPIN_H */
