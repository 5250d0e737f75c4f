//===- gridsample.cpp - GridSample and its gradient on the CPU -----------===//
//
// The taps (grid_sample.h) are shared with the CUDA backend; here a point's
// channels are read through X's strides, in f32, and the input gradient
// sums in an f32 plane per batch item (batch items in parallel: they write
// disjoint planes).
//
//===----------------------------------------------------------------------===//

#include "common/grid_sample.h"
#include "common/check.h"
#include "cpu/elementwise/elementwise.h"
#include "host/threads.h"

#include <algorithm>
#include <cstring>
#include <vector>

using namespace amprt;
namespace gs = amprt_gs;

namespace {
amprt_status checkGridSample(const char *what, const amprt_tensor *x, const amprt_tensor *grid,
                             const amprt_tensor *y, int mode, int pad) {
  AMPRT_CHECK(check(x, what));
  AMPRT_CHECK(check(grid, what));
  AMPRT_CHECK(check(y, what));
  if (mode < 0 || mode > 2 || pad < 0 || pad > 2)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: mode %d / padding %d unknown", what, mode, pad);
  bool ok = x->rank == 4 && grid->rank == 4 && y->rank == 4 && grid->shape[3] == 2 &&
            grid->shape[0] == x->shape[0] && y->shape[0] == x->shape[0] &&
            y->shape[1] == x->shape[1] && y->shape[2] == grid->shape[1] &&
            y->shape[3] == grid->shape[2] && isFloat(x->dtype) && isFloat(grid->dtype) &&
            isFloat(y->dtype) && x->shape[2] > 0 && x->shape[3] > 0;
  if (!ok)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: x %s [N, C, H, W], grid %s [N, Ho, Wo, 2] and y %s [N, C, Ho, Wo] (floats) do "
                "not agree",
                what, shapeString(x).c_str(), shapeString(grid).c_str(), shapeString(y).c_str());
  return AMPRT_OK;
}
} // namespace

extern "C" amprt_status amprt_grid_sample(amprt_context *, const amprt_tensor *x,
                                          const amprt_tensor *grid, int mode, int padding,
                                          int align_corners, amprt_tensor *y) {
  AMPRT_CHECK(checkGridSample("amprt_grid_sample", x, grid, y, mode, padding));
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], Ho = grid->shape[1],
          Wo = grid->shape[2];
  const int64_t *xs = x->strides, *gs_ = grid->strides, *ys = y->strides;
  parallelFor(N * Ho * Wo, 256, 1, [&](int64_t p0, int64_t p1) {
    gs::Taps t;
    for (int64_t p = p0; p < p1; ++p) {
      int64_t n = p / (Ho * Wo), h = p / Wo % Ho, w = p % Wo;
      int64_t go = n * gs_[0] + h * gs_[1] + w * gs_[2];
      gs::taps(loadF(grid->data, grid->dtype, go), loadF(grid->data, grid->dtype, go + gs_[3]), H,
               W, mode, padding, align_corners != 0, t);
      for (int64_t c = 0; c < C; ++c) {
        float acc = t.nan ? NAN : 0.0f;
        for (int k = 0; k < t.n; ++k)
          if (t.off[k] >= 0)
            acc += t.w[k] *
                   loadF(x->data, x->dtype,
                         n * xs[0] + c * xs[1] + (t.off[k] / W) * xs[2] + (t.off[k] % W) * xs[3]);
        storeF(y->data, y->dtype, n * ys[0] + c * ys[1] + h * ys[2] + w * ys[3], acc);
      }
    }
  });
  return AMPRT_OK;
}

extern "C" amprt_status amprt_grid_sample_grad(amprt_context *, const amprt_tensor *x,
                                               const amprt_tensor *grid, const amprt_tensor *dy,
                                               int mode, int padding, int align_corners,
                                               amprt_tensor *dx, amprt_tensor *dgrid) {
  AMPRT_CHECK(checkGridSample("amprt_grid_sample_grad", x, grid, dy, mode, padding));
  for (amprt_tensor *g : {dx, dgrid})
    if (g) {
      AMPRT_CHECK(check(g, "amprt_grid_sample_grad: gradient"));
      if (!isFloat(g->dtype) || !amprt_tensor_is_contiguous(g))
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "amprt_grid_sample_grad: gradients must be contiguous floats");
    }
  if ((dx && amprt_tensor_numel(dx) != amprt_tensor_numel(x)) ||
      (dgrid && amprt_tensor_numel(dgrid) != amprt_tensor_numel(grid)))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_grid_sample_grad: gradient shapes do not match");
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], Ho = grid->shape[1],
          Wo = grid->shape[2];
  const int64_t *xs = x->strides, *gs_ = grid->strides, *ds = dy->strides;
  // dx in f32 (a scratch plane when dx is f16 / bf16), zeroed.
  amprt_tensor acc{};
  float *a = nullptr;
  if (dx) {
    acc = dx->dtype == AMPRT_F32 ? *dx : scratchF32(dx, 3);
    a = static_cast<float *>(acc.data);
    std::fill(a, a + amprt_tensor_numel(dx), 0.0f);
  }
  // One batch item per piece: its dx plane is written by it alone.
  parallelFor(N, 1, 1, [&](int64_t n0, int64_t n1) {
    gs::Taps t;
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t h = 0; h < Ho; ++h)
        for (int64_t w = 0; w < Wo; ++w) {
          int64_t go = n * gs_[0] + h * gs_[1] + w * gs_[2];
          gs::taps(loadF(grid->data, grid->dtype, go), loadF(grid->data, grid->dtype, go + gs_[3]),
                   H, W, mode, padding, align_corners != 0, t);
          float gx = 0.0f, gy = 0.0f;
          for (int64_t c = 0; c < C; ++c) {
            float g = loadF(dy->data, dy->dtype, n * ds[0] + c * ds[1] + h * ds[2] + w * ds[3]);
            for (int k = 0; k < t.n; ++k) {
              if (t.off[k] < 0)
                continue;
              if (a)
                a[(n * C + c) * H * W + t.off[k]] += t.w[k] * g;
              if (dgrid) {
                float v =
                    loadF(x->data, x->dtype,
                          n * xs[0] + c * xs[1] + (t.off[k] / W) * xs[2] + (t.off[k] % W) * xs[3]);
                gx += t.wx[k] * v * g;
                gy += t.wy[k] * v * g;
              }
            }
          }
          if (dgrid) {
            int64_t o = ((n * Ho + h) * Wo + w) * 2;
            storeF(dgrid->data, dgrid->dtype, o, t.nan ? NAN : gx * t.mx);
            storeF(dgrid->data, dgrid->dtype, o + 1, t.nan ? NAN : gy * t.my);
          }
        }
  });
  if (dx)
    return storeFromF32(acc, dx);
  return AMPRT_OK;
}
