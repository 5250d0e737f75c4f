//===- kernels.h - a convolution pass's call and its candidates -*- C++ -*-===//
//
// Each pass of a convolution (forward, data gradient, weight gradient) has
// one ordered table of candidate kernels (candidates.cpp), in the manner of
// oneDNN's cpu_convolution_list.cpp: a name, whether it fits the call, and
// how it runs. The fixed rule names the preferred one; with tuning on, the
// fitting candidates are timed on the real operands (host/tune.h) and the
// fastest is kept per shape. This header is the convolution family's own:
// the call, the table entries and the kernels they run (onednn_conv.cpp,
// im2col.cpp, direct_amx.cpp, depthwise.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CPU_CONV_KERNELS_H
#define AMPRT_CPU_CONV_KERNELS_H

#include "cpu/matmul/onednn.h"

#include <optional>
#include <vector>

namespace amprt::conv {

struct ConvDims {
  dnnl::memory::dims src, wei, dst, bias, strides, dil, padL, padR;
  /// Everything that shapes a primitive, for cache keys (callers append
  /// the rest: types, flags, threads).
  std::vector<int64_t> key() const {
    std::vector<int64_t> k(src.begin(), src.end());
    for (const auto *v : {&wei, &dst, &strides, &dil, &padL, &padR}) {
      k.push_back(-1);
      k.insert(k.end(), v->begin(), v->end());
    }
    return k;
  }
};

/// Checks x, w and y (or dy) against the parameters and fills cd (`k`
/// names the kernel in messages).
amprt_status convDims(const amprt_tensor *x, const amprt_tensor *w, const amprt_tensor *y,
                      const amprt_conv_params *p, const char *k, ConvDims &cd);

/// The passes of a convolution.
enum class Pass { Forward, Data, Weights };

/// One call of a pass, checked, as its candidates see it.
struct Call {
  amprt_context *ctx = nullptr;
  Pass pass = Pass::Forward;
  const amprt_tensor *x = nullptr, *w = nullptr;
  const amprt_conv_params *p = nullptr;
  ConvDims cd;
  /// Forward: x and w bf16 and oneDNN's bf16 kernels here. Backward: x,
  /// w and dy bf16 and oneDNN's bf16 kernels here.
  bool bf16 = false;
  // The forward's.
  const amprt_tensor *bias = nullptr;
  const float *biasF32 = nullptr; // the bias widened (null without one)
  int32_t flags = 0;              // AMPRT_CONV_*
  amprt_tensor *y = nullptr;
  // The backward's: the output of the side that runs (dx for Data, dw for
  // Weights; the final call runs both).
  const amprt_tensor *dy = nullptr;
  amprt_tensor *dx = nullptr, *dw = nullptr;
  /// Where set (an f32 dw): dw checked for inf / NaN as it is stored, where
  /// the kernel can (*dwChecked), the answer in *dwNonFinite.
  bool *dwChecked = nullptr, *dwNonFinite = nullptr;
  /// Shared by the two sides of one backward call: dy widened to f32
  /// (dyF32 below), and dy in the oneDNN data side's layout (reused by the
  /// weights side where it wants the same one).
  mutable const float *dyF32Cache = nullptr;
  mutable std::optional<dnnl::memory> dyData;
  mutable bool dyDataLow = false;
};

/// dy as f32: itself, or widened once per call (a thread's buffer).
const float *dyF32(const Call &c);

/// A candidate kernel of a pass: its name (AMPRT_TUNE=debug, tuning keys'
/// choices, forceKernelForTesting), whether it can compute this call, and
/// the run, which writes the pass's whole output from its inputs.
struct Candidate {
  const char *name;
  bool (*fits)(const Call &);
  amprt_status (*run)(const Call &);
};

// oneDNN's primitives (onednn_conv.cpp). widen / low: bf16 operands on
// oneDNN's f32 kernels (widened: exact) or on its bf16 kernels.
amprt_status oneDnnForward(const Call &c, bool widen);
amprt_status oneDnnBackwardData(const Call &c, bool low);
amprt_status oneDnnBackwardWeights(const Call &c, bool low);
/// The fixed rule for a depthwise convolution: the direct kernel
/// (depthwise.cpp) for a pass where oneDNN's f32 implementation for the
/// shape is im2col + gemm or its reference kernel, else oneDNN's.
bool depthwiseOneDnnSlow(const ConvDims &cd, Pass pass);

// im2col / col2im + one product (im2col.cpp).
/// A convolution pass about to run as im2col + one product: counted for
/// the tests, named for AMPRT_PROFILE.
void noteIm2col(const char *impl);
/// Whether a 2-D convolution may run as im2col + one product (forward) or
/// one product + col2im (data gradient): one group, its columns (K x P
/// elements of `es` bytes, K = C x KH x KW, P = N x OH x OW) at most 64 MiB.
bool im2colFits(const amprt_tensor *w, const amprt_tensor *y, const amprt_conv_params *p,
                int64_t es);
/// Whether a convolution is pointwise: 2-D, one group, 1 x 1 taps, stride
/// 1, no padding, the output map the input's.
bool pointwise(const amprt_tensor *x, const amprt_tensor *w, const amprt_tensor *y,
               const amprt_conv_params *p);
/// The forward as one product of the columns (bf16 with `low`, else f32),
/// or (batched) a pointwise convolution as one batched product, or (amx)
/// the columns on the AMX tiles with the weights read in place.
void im2colForward(const amprt_tensor *x, const amprt_tensor *w, const float *bias,
                   const amprt_conv_params *p, int32_t flags, amprt_tensor *y, bool low,
                   bool batched = false, bool amx = false);
/// The data gradient as one product + col2im (or, batched, a pointwise
/// convolution's one batched product).
void im2colDataGrad(const amprt_tensor *w, const amprt_tensor *dy, const amprt_conv_params *p,
                    amprt_tensor *dx, bool low, bool batched = false);
/// The weight gradient as one product of dy's rows and x's columns, dy's
/// elements of `es` bytes (bf16 or f32) into out (f32, or bf16 with
/// bf16Out). With nonFinite (an f32 out): true where the product checked
/// out for inf / NaN as it stored it, *nonFinite the answer.
bool im2colWeightGrad(const amprt_tensor *x, const void *dy, int64_t es, const amprt_tensor *ws,
                      const amprt_tensor *dys, const amprt_conv_params *p, void *out, bool bf16Out,
                      bool *nonFinite);
/// dy [N, OC, OH, OW] (elements of es bytes) as rows [OC, N x OH x OW], in
/// the calling thread's buffer.
char *dyRows(const void *dy, int64_t es, const amprt_tensor *dys);

// The weight gradient on the AMX tiles without an im2col matrix
// (direct_amx.cpp).
bool directAmxFits(const Call &c);
amprt_status directAmxWeightGrad(const Call &c);

} // namespace amprt::conv

#endif // AMPRT_CPU_CONV_KERNELS_H
