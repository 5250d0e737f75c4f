//===- grid_sample.h - GridSample's taps, shared by the CPU and CUDA -----===//
//
// ONNX GridSample / torch.nn.functional.grid_sample on X [N, C, H, W] by a
// grid [N, Ho, Wo, 2] of (x, y) in [-1, 1]: each output point reads up to
// 16 taps of X's plane with weights, and the gradient needs each weight's
// derivative by the source coordinates and the coordinates' derivative by
// the grid. The taps follow PyTorch's grid_sampler_2d (ATen GridSampler.h):
// unnormalisation by align_corners, border / reflection padding of the
// source coordinate (bilinear, nearest) or of each tap (bicubic, A = -0.75),
// zeros padding as out-of-bounds taps that read 0. Host and device code:
// the CPU runtime and the CUDA backend's functors call the same functions.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_GRID_SAMPLE_H
#define AMPRT_GRID_SAMPLE_H

#include "common/scalar_ops.h"

#include <cmath>
#include <cstdint>

namespace amprt_gs {

enum { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum { kZeros = 0, kBorder = 1, kReflection = 2 };

struct Taps {
  int n = 0;
  int64_t off[16]; // y * W + x in the plane, -1 outside (reads 0)
  float w[16], wx[16], wy[16];
  float mx = 0.0f, my = 0.0f; // d source coordinate / d grid coordinate
  bool nan = false;           // a non-finite grid coordinate: the output is NaN
};

/// [-1, 1] -> pixel index; *g the derivative.
AMPRT_HOST_DEVICE inline float unnormalize(float c, int64_t size, bool align, float *g) {
  if (align) {
    *g = (float)(size - 1) / 2.0f;
    return (c + 1.0f) / 2.0f * (float)(size - 1);
  }
  *g = (float)size / 2.0f;
  return ((c + 1.0f) * (float)size - 1.0f) / 2.0f;
}

AMPRT_HOST_DEVICE inline float clipCoord(float x, int64_t size, float *g) {
  if (x <= 0.0f) {
    *g = 0.0f;
    return 0.0f;
  }
  float hi = (float)(size - 1);
  if (x >= hi) {
    *g = 0.0f;
    return hi;
  }
  *g = 1.0f;
  return x;
}

/// Reflects x into [twiceLow / 2, twiceHigh / 2]; *g is +-1.
AMPRT_HOST_DEVICE inline float reflectCoord(float x, int64_t twiceLow, int64_t twiceHigh,
                                            float *g) {
  if (twiceLow == twiceHigh) {
    *g = 0.0f;
    return 0.0f;
  }
  float lo = (float)twiceLow / 2.0f, span = (float)(twiceHigh - twiceLow) / 2.0f;
  x -= lo;
  float sign = 1.0f;
  if (x < 0.0f) {
    sign = -1.0f;
    x = -x;
  }
  float extra = fmodf(x, span);
  int64_t flips = (int64_t)floorf(x / span);
  if (flips % 2 == 0) {
    *g = sign;
    return extra + lo;
  }
  *g = -sign;
  return span - extra + lo;
}

/// Border / reflection padding of a source coordinate (with its derivative
/// multiplied into *g).
AMPRT_HOST_DEVICE inline float padCoord(float x, int64_t size, int pad, bool align, float *g) {
  float g2 = 1.0f;
  if (pad == kBorder) {
    x = clipCoord(x, size, &g2);
    *g *= g2;
  } else if (pad == kReflection) {
    x = align ? reflectCoord(x, 0, 2 * (size - 1), &g2) : reflectCoord(x, -1, 2 * size - 1, &g2);
    float g3 = 1.0f;
    x = clipCoord(x, size, &g3);
    *g *= g2 * g3;
  }
  return x;
}

AMPRT_HOST_DEVICE inline float cubic1(float x, float A) {
  return ((A + 2.0f) * x - (A + 3.0f)) * x * x + 1.0f;
}
AMPRT_HOST_DEVICE inline float cubic2(float x, float A) {
  return ((A * x - 5.0f * A) * x + 8.0f * A) * x - 4.0f * A;
}
AMPRT_HOST_DEVICE inline float dcubic1(float x, float A) {
  return (3.0f * (A + 2.0f) * x - 2.0f * (A + 3.0f)) * x;
}
AMPRT_HOST_DEVICE inline float dcubic2(float x, float A) {
  return (3.0f * A * x - 10.0f * A) * x + 8.0f * A;
}

/// The four cubic convolution weights at offset t in [0, 1) and their
/// derivatives by t.
AMPRT_HOST_DEVICE inline void cubicWeights(float t, float *c, float *dc) {
  const float A = -0.75f;
  c[0] = cubic2(t + 1.0f, A);
  c[1] = cubic1(t, A);
  c[2] = cubic1(1.0f - t, A);
  c[3] = cubic2(2.0f - t, A);
  dc[0] = dcubic2(t + 1.0f, A);
  dc[1] = dcubic1(t, A);
  dc[2] = -dcubic1(1.0f - t, A);
  dc[3] = -dcubic2(2.0f - t, A);
}

/// The taps of the output point whose grid coordinates are (gx, gy).
AMPRT_HOST_DEVICE inline void taps(float gx, float gy, int64_t H, int64_t W, int mode, int pad,
                                   bool align, Taps &t) {
  t.n = 0;
  t.nan = !(gx == gx && gy == gy) || fabsf(gx) > 1e7f || fabsf(gy) > 1e7f;
  if (t.nan)
    return;
  auto add = [&](float x, float y, float w, float wx, float wy) {
    bool in = x >= 0.0f && y >= 0.0f && x <= (float)(W - 1) && y <= (float)(H - 1);
    t.off[t.n] = in ? (int64_t)y * W + (int64_t)x : -1;
    t.w[t.n] = w;
    t.wx[t.n] = wx;
    t.wy[t.n] = wy;
    ++t.n;
  };
  float ix = unnormalize(gx, W, align, &t.mx), iy = unnormalize(gy, H, align, &t.my);
  if (mode == kBicubic) {
    float x0 = floorf(ix), y0 = floorf(iy);
    float cx[4], dcx[4], cy[4], dcy[4];
    cubicWeights(ix - x0, cx, dcx);
    cubicWeights(iy - y0, cy, dcy);
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        // Each tap's coordinate padded (no derivative: the weights carry it).
        float gdummy = 1.0f;
        float x = padCoord(x0 - 1.0f + (float)i, W, pad, align, &gdummy);
        float y = padCoord(y0 - 1.0f + (float)j, H, pad, align, &gdummy);
        add(x, y, cx[i] * cy[j], dcx[i] * cy[j], cx[i] * dcy[j]);
      }
    return;
  }
  ix = padCoord(ix, W, pad, align, &t.mx);
  iy = padCoord(iy, H, pad, align, &t.my);
  if (mode == kNearest) {
    add(rintf(ix), rintf(iy), 1.0f, 0.0f, 0.0f);
    return;
  }
  float x0 = floorf(ix), y0 = floorf(iy), tx = ix - x0, ty = iy - y0;
  add(x0, y0, (1.0f - tx) * (1.0f - ty), -(1.0f - ty), -(1.0f - tx));
  add(x0 + 1.0f, y0, tx * (1.0f - ty), 1.0f - ty, -tx);
  add(x0, y0 + 1.0f, (1.0f - tx) * ty, -ty, 1.0f - tx);
  add(x0 + 1.0f, y0 + 1.0f, tx * ty, ty, tx);
}

} // namespace amprt_gs

#endif // AMPRT_GRID_SAMPLE_H
