//===- direct_amx.cpp - the weight gradient on the AMX tiles, no im2col ---===//
//
// The candidate direct-amx of the weight gradient (candidates.cpp):
// amxConvWeightGrad (matmul/amx.cpp) makes each tile of x's columns where
// the product reads it, without the im2col matrix.
//
//===----------------------------------------------------------------------===//

#include "cpu/conv/kernels.h"
#include "cpu/matmul/matmul.h"

namespace amprt::conv {

/// bf16 x and dy, an f32 dw, 2-D, one group, column stride 1 or 2,
/// dilation 1, on a CPU with AMX; its packed columns are the im2col
/// matrix's bytes, under the same cap (im2colFits).
bool directAmxFits(const Call &c) {
  const amprt_tensor *x = c.x, *w = c.w, *dy = c.dy, *dw = c.dw;
  const amprt_conv_params *p = c.p;
  return x->dtype == AMPRT_BF16 && dy->dtype == AMPRT_BF16 && dw->dtype == AMPRT_F32 &&
         im2colFits(w, dy, p, 2) && x->rank == 4 && p->strides[0] >= 1 &&
         (p->strides[1] == 1 || p->strides[1] == 2) && std::max<int64_t>(p->dilations[0], 1) == 1 &&
         std::max<int64_t>(p->dilations[1], 1) == 1 && amprt_tensor_is_contiguous(x) &&
         amprt_tensor_is_contiguous(dy) && amprt_tensor_is_contiguous(dw) &&
         amprt_tensor_numel(dy) > 0 && amxProductAvailable();
}

amprt_status directAmxWeightGrad(const Call &c) {
  const amprt_tensor *x = c.x, *w = c.w, *dy = c.dy;
  const amprt_conv_params *p = c.p;
  noteIm2col("direct-amx"); // (the columns made tile by tile)
  const char *dyt = dyRows(dy->data, 2, dy);
  amxConvWeightGrad(static_cast<const uint16_t *>(x->data), x->shape[0], x->shape[1], x->shape[2],
                    x->shape[3], w->shape[2], w->shape[3], p->strides[0], p->strides[1],
                    p->pads_begin[0], p->pads_begin[1], dy->shape[2], dy->shape[3],
                    reinterpret_cast<const uint16_t *>(dyt), dy->shape[1],
                    static_cast<float *>(c.dw->data), c.dwNonFinite);
  if (c.dwChecked)
    *c.dwChecked = c.dwNonFinite != nullptr;
  return AMPRT_OK;
}

} // namespace amprt::conv
