//===- onednn.h - oneDNN's engine, operands and products --------*- C++ -*-===//
//
// oneDNN computes op(A) @ op(B) (and convolutions, and their gradients)
// into an f32 buffer: f32 inputs as they are, bf16 inputs as bf16 (AMX /
// AVX512-BF16 where the CPU has them), f16 inputs widened to f32 first
// (exact; Debian's oneDNN 2.6 has no f16 matmul). Every path accumulates in
// f32. A bf16 output of bf16 kernels is rounded by oneDNN itself (the
// primitive, or the reorder out of its layout: to nearest even, once).
//
// oneDNN's C++ API throws dnnl::error: the files that include this header
// are built with exceptions and turn every one into an AMPRT status
// (AMPRT_DNNL_TRY).
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CPU_MATMUL_ONEDNN_H
#define AMPRT_CPU_MATMUL_ONEDNN_H

#include "common/check.h"
#include "host/scratch.h"
#include "host/threads.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <memory>
#include <new>
#include <tuple>
#include <vector>

namespace amprt {

dnnl::engine &cpuEngine();

/// The f32 copies' buffers, kept per thread for the next call: a large
/// operand (a language model's [tokens, 50k] logits gradient) would
/// otherwise cost an allocation, its page faults and a zero fill per call
/// on top of the conversion.
struct WidenBuf {
  std::unique_ptr<float[]> p;
  size_t cap = 0;
};
extern thread_local ScratchVec<WidenBuf> widenPool;

/// A float buffer holding `t` (contiguous) as f32 or bf16 for oneDNN:
/// f32 / bf16 contiguous data is used in place, f16 is widened, and so is
/// bf16 where oneDNN has no bf16 kernels (a CPU without AVX-512: widening
/// is exact, the products are then the f32 kernels' on the same values).
struct Operand {
  const void *ptr = nullptr;
  dnnl::memory::data_type dt = dnnl::memory::data_type::f32;
  WidenBuf buf; // the f32 copy, back to the pool when the operand goes

  Operand() = default;
  Operand(Operand &&) = default;
  Operand &operator=(Operand &&) = default;
  ~Operand() {
    if (buf.p)
      widenPool.push_back(std::move(buf));
  }
  /// n floats of this operand's own (uninitialised).
  float *widen(size_t n) {
    if (!widenPool.empty()) { // the largest pooled buffer
      auto it =
          std::max_element(widenPool.begin(), widenPool.end(),
                           [](const WidenBuf &a, const WidenBuf &b) { return a.cap < b.cap; });
      buf = std::move(*it);
      widenPool.erase(it);
    }
    if (buf.cap < n) {
      buf.p.reset(new float[n]);
      buf.cap = n;
    }
    return buf.p.get();
  }
};

/// A float buffer holding `t` (contiguous) as f32 or bf16 for oneDNN (see
/// Operand); widenBf16: bf16 widened to f32 too.
Operand operandOf(const amprt_tensor *t, bool widenBf16 = false);

/// Whether oneDNN has bf16 kernels here (probed once: a build or CPU
/// without them keeps f32 results and our conversion).
bool bf16Kernels();
/// bf16Kernels() and a and b are bf16.
bool bf16Operands(const amprt_tensor *a, const amprt_tensor *b);

/// The CPU's instruction set as oneDNN uses it, for the tuning keys (a
/// choice made on one CPU is not taken on another).
const char *isaTag();

/// Whether max(conv / product, 0) may run as oneDNN's ReLU post-op, which
/// turns NaN into 0 where our ReLU keeps it: only where no NaN can arise,
/// i.e. finite inputs whose largest products cannot overflow a sum of k
/// terms plus the bias.
bool reluCannotMeetNaN(const amprt_tensor *x, const amprt_tensor *w, int64_t k, const float *bias,
                       int64_t nbias);

/// Products with sums of at most this many terms (and bf16 operands, an f32
/// result) may run on amxProduct: its tiles are packed for the whole sum,
/// made for the short sums of weight gradients.
constexpr int64_t kAmxMaxSum = 512;

/// acc[M, N] = op(A)[M, K] @ op(B)[K, N] with strides in elements.
struct GemmKey {
  int64_t m, n, k, lda0, lda1, ldb0, ldb1;
  int adt, bdt;
  int64_t batch = 1;    // > 1: `batch` dense [m,k] x [k,n] products, one primitive
  bool aShared = false; // with batch > 1: one a for every product (a pointwise
                        // convolution's weight)
  bool bias = false;    // an f32 [n] row added by the primitive (batch 1 only)
  bool relu = false;    // max(., 0) as a post-op (see reluCannotMeetNaN)
  bool bf16Out = false; // the f32 result rounded to bf16 by the primitive
  // oneDNN splits a primitive for the thread count it was made with:
  // amprt_threads_adapt changes that count.
  int threads = maxThreads();
  bool operator<(const GemmKey &o) const {
    return std::tie(m, n, k, lda0, lda1, ldb0, ldb1, adt, bdt, batch, aShared, bias, relu, bf16Out,
                    threads) < std::tie(o.m, o.n, o.k, o.lda0, o.lda1, o.ldb0, o.ldb1, o.adt, o.bdt,
                                        o.batch, o.aShared, o.bias, o.relu, o.bf16Out, o.threads);
  }
};

/// The product into `out`: f32, or bf16 with key.bf16Out (the f32
/// accumulator plus bias and ReLU rounded once, to nearest even, as our
/// conversion does).
void gemmAcc(const GemmKey &key0, const void *a, const void *b, void *out,
             const float *bias = nullptr);

/// A contiguous f32 / f16 / bf16 tensor (`what` names it in the message).
amprt_status checkFloatContig(const amprt_tensor *t, const char *what);

/// oneDNN's plain (row-major) format tag for a rank.
dnnl::memory::format_tag plainTag(size_t rank);

} // namespace amprt

/// Runs the statements, turning oneDNN's exceptions into a status that
/// names `kernel`.
#define AMPRT_DNNL_TRY(kernel, ...)                                                                \
  try {                                                                                            \
    __VA_ARGS__                                                                                    \
  } catch (const dnnl::error &e) {                                                                 \
    return fail(AMPRT_ERR_UNSUPPORTED, "%s: oneDNN: %s", kernel, e.what());                        \
  } catch (const std::bad_alloc &) {                                                               \
    return fail(AMPRT_ERR_OUT_OF_MEMORY, "%s: out of memory", kernel);                             \
  }

#endif // AMPRT_CPU_MATMUL_ONEDNN_H
