//===- scratch.h - per-thread scratch the tuner gives back ------*- C++ -*-===//
//
// Kernels keep growable scratch per thread between calls (im2col columns,
// widened operands, f32 accumulators): it grows to the largest call and
// stays, which is right for the kernels a step runs and wrong for the
// candidates the tuner tried and dropped (ResNet-50 bf16 kept 0.9 GB of
// them). A ScratchVec registers itself with its thread; releaseScratch()
// empties every one of the calling thread's. amprt_exec calls it after an
// op during which the tuner chose a kernel (tookTuningTurn()): the chosen
// kernels' buffers grow again on their next call, the others' stay freed.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_HOST_SCRATCH_H
#define AMPRT_HOST_SCRATCH_H

#include <vector>

namespace amprt {

void registerScratch(void *owner, void (*release)(void *));
void unregisterScratch(void *owner);
/// Empties (frees) every ScratchVec of the calling thread.
void releaseScratch();

/// A std::vector the calling thread's releaseScratch() empties; declare it
/// thread_local (it is registered with the thread that constructs it).
template <class T> struct ScratchVec : std::vector<T> {
  ScratchVec() {
    registerScratch(this, [](void *p) { std::vector<T>().swap(*static_cast<ScratchVec *>(p)); });
  }
  ~ScratchVec() { unregisterScratch(this); }
  ScratchVec(const ScratchVec &) = delete;
  ScratchVec &operator=(const ScratchVec &) = delete;
};

} // namespace amprt

#endif // AMPRT_HOST_SCRATCH_H
