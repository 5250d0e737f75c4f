//===- pool.cu - max and average pools --------------------------------------===//
//
// The pools and their gradients (direct kernels).
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

struct MaxPoolF {
  Geom gm;
  const void *x;
  void *y;
  int64_t *indices;
  int32_t xt, yt, storageOrder;
  HD void operator()(int64_t o) const {
    int64_t op = o % gm.outPlane(), nc = o / gm.outPlane(), oi[3];
    outIndex(gm, op, oi);
    float best = -INFINITY;
    int64_t arg = -1;
    forWindow(gm, oi, [&](int64_t, int64_t ip) {
      int64_t i = nc * gm.inPlane() + ip;
      float v = ldF(x, xt, i);
      if (arg >= 0 && isNaN(best))
        return;
      if (isNaN(v) || arg < 0 || v > best) {
        best = v;
        arg = i;
      }
    });
    if (floatType(yt))
      stF(y, yt, o, best);
    else
      stI(y, yt, o, arg >= 0 ? ldI(x, xt, arg) : 0);
    if (indices) {
      int64_t at = arg;
      if (at >= 0 && storageOrder == 1) {
        int64_t plane = gm.inPlane(), q = at / plane, r = at % plane;
        int64_t j2 = r % gm.in[2], j1 = (r / gm.in[2]) % gm.in[1], j0 = r / (gm.in[2] * gm.in[1]);
        at = q * plane + (j2 * gm.in[1] + j1) * gm.in[0] + j0;
      }
      indices[o] = at;
    }
  }
};

/// The end padding of an average's windows, per spatial dim.
struct PadEnd {
  int64_t e[3];
};

inline PadEnd padEnd(const amprt_pool_params &p) {
  PadEnd pe{{0, 0, 0}};
  for (int i = 0; i < p.spatial && i < 3; ++i)
    pe.e[i] = p.pads_end[i];
  return pe;
}

/// The number of window positions an average counts, per dim: inside the
/// input, or (count_include_pad) before its end plus the end padding.
HD inline int64_t windowCount(const Geom &gm, const PadEnd &pe, const int64_t *o,
                              int32_t includePad) {
  int64_t count = 1;
  for (int dd = 0; dd < 3; ++dd) {
    int64_t c = 0;
    for (int64_t k = 0; k < gm.k[dd]; ++k) {
      int64_t i = o[dd] * gm.s[dd] - gm.pb[dd] + k * gm.d[dd];
      c += includePad ? i < gm.in[dd] + pe.e[dd] : (i >= 0 && i < gm.in[dd]);
    }
    count *= c;
  }
  return count;
}

struct AvgPoolF {
  Geom gm;
  PadEnd pe;
  const void *x;
  void *y;
  int32_t xt, yt, includePad;
  HD void operator()(int64_t o) const {
    int64_t op = o % gm.outPlane(), nc = o / gm.outPlane(), oo[3];
    outIndex(gm, op, oo);
    double sum = 0.0;
    forWindow(gm, oo, [&](int64_t, int64_t ip) { sum += ldF(x, xt, nc * gm.inPlane() + ip); });
    int64_t count = windowCount(gm, pe, oo, includePad);
    stF(y, yt, o, count ? (float)(sum / (double)count) : 0.0f);
  }
};

struct AvgPoolGradF {
  Geom gm;
  PadEnd pe;
  const void *dy;
  void *dx;
  int32_t dyt, dxt, includePad;
  HD void operator()(int64_t e) const {
    int64_t ip = e % gm.inPlane(), nc = e / gm.inPlane();
    int64_t ii[3] = {ip / (gm.in[2] * gm.in[1]), (ip / gm.in[2]) % gm.in[1], ip % gm.in[2]};
    double acc = 0.0;
    forWindowsOf(gm, ii, [&](int64_t, int64_t opos) {
      int64_t oo[3];
      outIndex(gm, opos, oo);
      int64_t count = windowCount(gm, pe, oo, includePad);
      if (count)
        acc += (double)ldF(dy, dyt, nc * gm.outPlane() + opos) / (double)count;
    });
    stF(dx, dxt, e, (float)acc);
  }
};

/// dx[indices[o]] += dy[o] into an f32 accumulator (atomics on the device).
struct MaxPoolGradF {
  const void *dy;
  int32_t dyt;
  const int64_t *indices;
  float *acc;
  int64_t nx;
  DeviceError *err;
  HD void operator()(int64_t o) const {
    int64_t i = indices[o];
    if (i < 0)
      return;
    if (i >= nx) {
      recordError(err, ERR_INDEX, i, nx, 0);
      return;
    }
    addTo(acc + i, ldF(dy, dyt, o));
  }
};

// Batch norm's per-channel sums, in parallel and in one order: each
// channel's n * plane elements (batch item by batch item, in the plane's
// order) split into parts of kBnChunk, each part summed in double by one
// thread (BnPartsF), the parts then added in order by one thread per channel
// (the same numbers on every run, and on the emulation).

amprt_status pool(Dev &d, const Decoded &dd) {
  // A channel-blocked max pool's x and y are plain NCHW here (see conv).
  PoolAttrs pa;
  AMPRT_CHECK(poolAttrs(dd, pa));
  const amprt_pool_params &p = pa.p;
  const auto &t = dd.t;
  Geom g;
  if (dd.opcode == AMPRT_OP_AVERAGE_POOL) {
    AMPRT_CHECK(geomOf(t[0], t[1], p.spatial, p.kernel, p.strides, p.dilations, p.pads_begin, 1,
                       "average_pool", g));
    return each(
        &d, numel(t[1]),
        AvgPoolF{g, padEnd(p), t[0].data, t[1].data, t[0].dtype, t[1].dtype, p.count_include_pad},
        "average_pool");
  }
  int32_t storage = p.storage_order;
  bool wantIndices = pa.wantIndices;
  AMPRT_CHECK(geomOf(t[0], t[1], p.spatial, p.kernel, p.strides, p.dilations, p.pads_begin, 1,
                     "max_pool", g));
  if (g.c != g.m)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): max_pool channels differ");
  int64_t *idx = nullptr;
  if (wantIndices) {
    if (t[2].dtype != AMPRT_I64 || numel(t[2]) != numel(t[1]))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): max_pool indices must be i64 with y's size");
    idx = static_cast<int64_t *>(t[2].data);
  }
  return each(&d, numel(t[1]),
              MaxPoolF{g, t[0].data, t[1].data, idx, t[0].dtype, t[1].dtype, storage}, "max_pool");
}

amprt_status poolGrad(Dev &d, const Decoded &dd) {
  const auto &t = dd.t;
  if (dd.opcode == AMPRT_OP_MAX_POOL_GRAD) {
    attrs::max_pool_grad a;
    AMPRT_CHECK(read(dd, a));
    const amprt_tensor &dy = t[1], &idx = t[2], &dx = t[3];
    if (idx.dtype != AMPRT_I64 || numel(idx) != numel(dy) || !amprt_tensor_is_contiguous(&dx) ||
        !amprt_tensor_is_contiguous(&dy) || !floatType(dx.dtype))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): max_pool_grad's operands");
    void *acc = dx.data;
    if (dx.dtype != AMPRT_F32)
      AMPRT_CHECK(scratch(d, 0, (size_t)numel(dx) * 4, &acc));
    AMPRT_CHECK(zero(d, acc, (size_t)numel(dx) * 4));
    AMPRT_CHECK(each(&d, numel(dy),
                     MaxPoolGradF{dy.data, dy.dtype, static_cast<const int64_t *>(idx.data),
                                  static_cast<float *>(acc), numel(dx), d.err},
                     "max_pool_grad"));
    if (dx.dtype != AMPRT_F32)
      AMPRT_CHECK(
          each(&d, numel(dx), CastFloatF{acc, dx.data, AMPRT_F32, dx.dtype}, "max_pool_grad"));
    return AMPRT_OK;
  }
  PoolAttrs pa;
  AMPRT_CHECK(poolAttrs(dd, pa));
  const amprt_pool_params &p = pa.p;
  Geom g;
  AMPRT_CHECK(geomOf(t[2], t[1], p.spatial, p.kernel, p.strides, p.dilations, p.pads_begin, 1,
                     "average_pool_grad", g));
  return each(
      &d, numel(t[2]),
      AvgPoolGradF{g, padEnd(p), t[1].data, t[2].data, t[1].dtype, t[2].dtype, p.count_include_pad},
      "average_pool_grad");
}

/// The pool opcodes of amprt_exec (exec.cu dispatches them here).
int32_t execPool(amprt_context *ctx, Dev &d, Decoded &dd) {
  (void)ctx;
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_MAX_POOL:
  case AMPRT_OP_AVERAGE_POOL:
    return pool(d, dd);
  case AMPRT_OP_MAX_POOL_GRAD:
  case AMPRT_OP_AVERAGE_POOL_GRAD:
    return poolGrad(d, dd);
  default:
    break;
  }
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec (cuda): opcode %lld is not one of the pool ops", (long long)dd.opcode);
}

} // namespace amprt::cuda
