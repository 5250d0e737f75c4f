//===- pool.h - pooling windows and planes -----------------------*- C++ -*-===//
//
// The pooling family's shared pieces: a window's geometry, the loops over
// windows and planes, f32 views of planes (max_pool.cpp, average_pool.cpp,
// blocked_pool.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CPU_POOL_POOL_H
#define AMPRT_CPU_POOL_POOL_H

#include "common/check.h"
#include "common/convert.h"
#include "host/threads.h"

#include <algorithm>
#include <vector>

namespace amprt::pool {

struct Window {
  int64_t n, c, in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
};

inline amprt_status windowOf(const amprt_tensor *x, const amprt_tensor *y,
                             const amprt_pool_params *p, const char *k, Window &w) {
  AMPRT_CHECK(check(x, k));
  AMPRT_CHECK(check(y, k));
  if (!p || p->spatial < 1 || p->spatial > 3 || x->rank != p->spatial + 2 || y->rank != x->rank ||
      !amprt_tensor_is_contiguous(x) || !amprt_tensor_is_contiguous(y) ||
      x->shape[0] != y->shape[0] || x->shape[1] != y->shape[1])
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: x %s and y %s must be contiguous [N, C, D...] with the "
                "parameters' spatial rank",
                k, shapeString(x).c_str(), shapeString(y).c_str());
  w.n = x->shape[0];
  w.c = x->shape[1];
  for (int i = 0; i < 3; ++i) {
    bool on = i < p->spatial;
    w.in[i] = on ? x->shape[2 + i] : 1;
    w.out[i] = on ? y->shape[2 + i] : 1;
    w.k[i] = on ? p->kernel[i] : 1;
    w.s[i] = on && p->strides[i] > 0 ? p->strides[i] : 1;
    w.d[i] = on && p->dilations[i] > 0 ? p->dilations[i] : 1;
    w.pb[i] = on ? p->pads_begin[i] : 0;
    w.pe[i] = on ? p->pads_end[i] : 0;
    if (w.k[i] < 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: kernel size %lld", k, (long long)w.k[i]);
  }
  return AMPRT_OK;
}

/// Calls f(output index, input index or -1 for padding) for every window
/// position of every output element of planes [nc0, nc1) ([N, C] flat);
/// begin(o) / end(o) bracket each window.
template <typename Begin, typename Each, typename End>
inline void forWindows(const Window &w, int64_t nc0, int64_t nc1, Begin begin, Each each, End end) {
  int64_t plane = w.in[0] * w.in[1] * w.in[2];
  int64_t oplane = w.out[0] * w.out[1] * w.out[2];
  for (int64_t nc = nc0; nc < nc1; ++nc)
    for (int64_t o0 = 0; o0 < w.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < w.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < w.out[2]; ++o2) {
          int64_t oi = nc * oplane + (o0 * w.out[1] + o1) * w.out[2] + o2;
          begin(oi);
          for (int64_t k0 = 0; k0 < w.k[0]; ++k0)
            for (int64_t k1 = 0; k1 < w.k[1]; ++k1)
              for (int64_t k2 = 0; k2 < w.k[2]; ++k2) {
                int64_t i0 = o0 * w.s[0] - w.pb[0] + k0 * w.d[0];
                int64_t i1 = o1 * w.s[1] - w.pb[1] + k1 * w.d[1];
                int64_t i2 = o2 * w.s[2] - w.pb[2] + k2 * w.d[2];
                bool inside =
                    i0 >= 0 && i0 < w.in[0] && i1 >= 0 && i1 < w.in[1] && i2 >= 0 && i2 < w.in[2];
                // Positions past the padded input (its end padding; ceil
                // mode's last windows) do not count.
                bool padded =
                    i0 < w.in[0] + w.pe[0] && i1 < w.in[1] + w.pe[1] && i2 < w.in[2] + w.pe[2];
                if (inside)
                  each(oi, nc * plane + (i0 * w.in[1] + i1) * w.in[2] + i2);
                else if (padded)
                  each(oi, -1);
              }
          end(oi);
        }
}

/// forWindows over the [N, C] planes on the threads, each piece of planes
/// with its own state: f(nc0, nc1) runs forWindows on its planes. A plane's
/// outputs read (and a gradient's write) only its own plane, so the results
/// are those of one serial loop.
template <typename F> void forPlanes(const Window &w, F f) {
  int64_t work = w.out[0] * w.out[1] * w.out[2] * w.k[0] * w.k[1] * w.k[2];
  parallelFor(w.n * w.c, std::max<int64_t>(1, 32768 / std::max<int64_t>(work, 1)), 1, f);
}

/// Output columns [ow0, ow1) of row oh of 2-D f32 max pool plane nc
/// (no dilation): each window's positions inside the input, in row-major

/// Plane nc (n elements) of a tensor of type t as f32: itself, or widened
/// into buf.
inline const float *planeF32(const amprt_tensor *t, int64_t nc, int64_t n,
                             std::vector<float> &buf) {
  if (t->dtype == AMPRT_F32)
    return static_cast<const float *>(t->data) + nc * n;
  buf.resize(n);
  widenRun(static_cast<const char *>(t->data) + nc * n * amprt_dtype_size(t->dtype), t->dtype,
           buf.data(), n);
  return buf.data();
}

/// Where plane nc of t (n elements) is computed in f32: t itself, or buf
/// (then rounded into t, once, by storePlane).
inline float *outPlane(amprt_tensor *t, int64_t nc, int64_t n, std::vector<float> &buf) {
  if (t->dtype == AMPRT_F32)
    return static_cast<float *>(t->data) + nc * n;
  buf.resize(n);
  return buf.data();
}

inline void storePlane(amprt_tensor *t, int64_t nc, int64_t n, const float *f) {
  if (t->dtype != AMPRT_F32)
    narrowRun(f, static_cast<char *>(t->data) + nc * n * amprt_dtype_size(t->dtype), t->dtype, n);
}

} // namespace amprt::pool

#endif // AMPRT_CPU_POOL_POOL_H
