//===- conv.h - convolutions ------------------------------*- C++ -*-===//

#ifndef AMPRT_CPU_CONV_H
#define AMPRT_CPU_CONV_H

#include "amprt/amprt.h"

#include <cstdint>

namespace amprt {

/// amprt_conv_backward; checkDw: an f32 dw checked for inf / NaN as it is
/// written and noted (notePrechecked: amprt_exec's conv_grad with check_dw).
amprt_status convBackwardChecked(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *w,
                                 const amprt_tensor *dy, const amprt_conv_params *p,
                                 amprt_tensor *dx, amprt_tensor *dw, amprt_tensor *db,
                                 bool checkDw);

/// Direct 2-D depthwise convolutions (depthwise.cpp): group = x's channels,
/// w [C * M, 1, KH, KW]; operands of any float type, contiguous, computed
/// in f32 and rounded once. The caller has checked the shapes (convDims).
bool depthwiseDirectFits(const amprt_tensor *x, const amprt_tensor *w, const amprt_conv_params *p);
void depthwiseForward(const amprt_tensor *x, const amprt_tensor *w, const float *bias,
                      const amprt_conv_params *p, amprt_tensor *y);
void depthwiseBackwardData(const amprt_tensor *w, const amprt_tensor *dy,
                           const amprt_conv_params *p, amprt_tensor *dx);
void depthwiseWeightGrad(const amprt_tensor *x, const amprt_tensor *dy, const amprt_conv_params *p,
                         amprt_tensor *dw);

/// For the kernel tests: how many convolution passes ran as im2col + one
/// product (forward, data or weight gradient; direct-amx's weight gradient,
/// its columns made tile by tile, included) in this process.
int64_t im2colConvCallsForTesting();
/// Whether oneDNN has bf16 kernels here (the bf16-only candidates exist).
bool bf16KernelsForTesting();
/// For the kernel tests: the data gradient's col2im of a small output map
/// (oh x ow at most 64 positions) into out [n x c planes of h x w] from
/// dcol [c x kh x kw rows, n x oh x ow], by the AVX-512 gather (vector,
/// where the CPU has it) or by the scalar scatter. Returns whether the
/// AVX-512 loop ran.
bool smallMapCol2imForTesting(const amprt_conv_params *p, int64_t n, int64_t c, int64_t h,
                              int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                              const float *dcol, bool vector, float *out);

} // namespace amprt

#endif // AMPRT_CPU_CONV_H
