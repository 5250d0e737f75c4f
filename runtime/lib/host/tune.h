//===- tune.h - the per-shape kernel choice ---------------*- C++ -*-===//

#ifndef AMPRT_HOST_TUNE_H
#define AMPRT_HOST_TUNE_H

#include "amprt/amprt.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace amprt {

/// The per-shape kernel choice (tune.cpp). Where several kernels compute
/// the same result up to the order of the f32 sums (oneDNN's bf16 kernels
/// or its f32 ones on exactly widened bf16 values; a backward-weights
/// kernel or im2col + matmul), the first call of a `key` (the op, its
/// shapes, types and thread count) runs each candidate `run(i)` on the real
/// operands, once to make its primitives and twice timed, and keeps the
/// fastest: `preferred` (the fixed rule's) unless another is 5% faster.
/// AMPRT_TUNE=off keeps the fixed rules, =debug prints each choice (as
/// AMPRT_PROFILE does); AMPRT_TUNE_FILE=path reads earlier choices and
/// appends new ones (runs that must agree bit for bit share it). A data-
/// parallel context keeps the fixed rules unless AMPRT_TUNE is set. `run`
/// must write the whole result from the inputs (it is called several times).
bool tuningOn(const amprt_context *ctx);
amprt_status chooseKernel(const amprt_context *ctx, const std::string &key,
                          const std::vector<const char *> &names, int preferred,
                          const std::function<amprt_status(int)> &run, int *choice);
/// Whether this thread timed a key's candidates since the last call: the
/// losers' scratch is then given back (releaseScratch, host/scratch.h).
bool tookTuningTurn();
/// AMPRT_TUNE_FILE read and parsed now (where tuning is on): a malformed
/// file is an error when the context is made, whether or not this CPU has
/// anything to choose.
amprt_status checkTuneFile();
/// AMPRT_TUNE=debug: says once that oneDNN has no bf16 kernels on this CPU
/// (AVX2 only), so bf16 products and convolutions run on its f32 kernels
/// and there is nothing to choose.
void noteNoBf16Kernels();
/// The choices made or loaded, as AMPRT_TUNE_FILE lines (a checkpoint keeps
/// them: a resumed run continues with the kernels it had).
std::string kernelChoicesText();
/// Takes choices from a checkpoint where this process has made none.
void adoptKernelChoices(const std::string &text);
/// For the kernel tests: every later choice that offers a candidate named
/// `name` takes it (no timing, nothing cached); others keep the fixed rule.
/// An empty name ends it.
void forceKernelForTesting(const std::string &name);
/// Changes whenever a choice chooseKernel made could turn out otherwise on
/// the next call (forceKernelForTesting, adoptKernelChoices): a caller that keeps chooseKernel's
/// answers per shape (to skip formatting its key on every call) keeps them
/// for one generation.
uint64_t tunerGeneration();

} // namespace amprt

#endif // AMPRT_HOST_TUNE_H
