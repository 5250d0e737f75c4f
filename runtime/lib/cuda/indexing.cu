//===- indexing.cu - gathers, scatters and friends --------------------------===//
//
// Gather and its gradient, GatherElements, CumSum, GridSample, TopK, ArgMax / ArgMin.
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "elementwise.cuh"

#include "common/check.h"
#include "common/grid_sample.h"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

/// Gather along `axis`: y = data[..., idx[...], ...].
struct GatherF {
  View data, idx, y;
  int32_t axis;
  int64_t es;
  DeviceError *err;
  HD void operator()(int64_t lin) const {
    int64_t c[AMPRT_MAX_RANK];
    int64_t rem = lin;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      c[d] = rem % y.shape[d];
      rem /= y.shape[d];
    }
    int64_t ioff = 0;
    for (int32_t d = 0; d < idx.rank; ++d)
      ioff += c[axis + d] * idx.strides[d];
    int64_t limit = data.shape[axis];
    int64_t k = ldI(idx.data, idx.dtype, ioff);
    if (k < -limit || k >= limit) {
      recordError(err, ERR_INDEX, k, limit, 0);
      k = 0;
    } else if (k < 0) {
      k += limit;
    }
    int64_t doff = k * data.strides[axis];
    for (int32_t d = 0; d < axis; ++d)
      doff += c[d] * data.strides[d];
    for (int32_t d = axis + 1; d < data.rank; ++d)
      doff += c[d - 1 + idx.rank] * data.strides[d];
    int64_t yoff = 0;
    for (int32_t d = 0; d < y.rank; ++d)
      yoff += c[d] * y.strides[d];
    copyElement(y.data + yoff * es, data.data + doff * es, es);
  }
};

/// The gather's gradient into an f32 accumulator (dense ddata layout):
/// atomic adds on the device, in order on the host.
struct GatherGradF {
  View idx, dy;
  float *acc;
  int32_t axis, ddRank;
  int64_t ddShape[AMPRT_MAX_RANK], dense[AMPRT_MAX_RANK];
  DeviceError *err;
  HD void operator()(int64_t lin) const {
    int64_t c[AMPRT_MAX_RANK];
    int64_t rem = lin, yoff = 0;
    for (int32_t d = dy.rank - 1; d >= 0; --d) {
      c[d] = rem % dy.shape[d];
      rem /= dy.shape[d];
      yoff += c[d] * dy.strides[d];
    }
    int64_t ioff = 0;
    for (int32_t d = 0; d < idx.rank; ++d)
      ioff += c[axis + d] * idx.strides[d];
    int64_t limit = ddShape[axis];
    int64_t k = ldI(idx.data, idx.dtype, ioff);
    if (k < -limit || k >= limit) {
      recordError(err, ERR_INDEX, k, limit, 0);
      return;
    }
    if (k < 0)
      k += limit;
    int64_t doff = k * dense[axis];
    for (int32_t d = 0; d < axis; ++d)
      doff += c[d] * dense[d];
    for (int32_t d = axis + 1; d < ddRank; ++d)
      doff += c[d - 1 + idx.rank] * dense[d];
    addTo(acc + doff, ldF(dy.data, dy.dtype, yoff));
  }
};

/// GatherElements: y's element lin reads data at y's coordinates with the
/// axis one replaced by the index (`dataStrides` data's, or ddata's dense
/// ones for the gradient). Shared by the forward (copy) and the gradient
/// (an f32 atomic add on the device, in order on the host).
struct GatherElementsF {
  View data, idx, y;
  int32_t axis;
  int64_t es;
  float *acc; // the gradient's accumulator, or null for the forward
  int64_t limit, dataStrides[AMPRT_MAX_RANK];
  DeviceError *err;
  HD void operator()(int64_t lin) const {
    int64_t c[AMPRT_MAX_RANK];
    int64_t rem = lin;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      c[d] = rem % y.shape[d];
      rem /= y.shape[d];
    }
    int64_t ioff = 0, yoff = 0, doff = 0;
    for (int32_t d = 0; d < y.rank; ++d) {
      ioff += c[d] * idx.strides[d];
      yoff += c[d] * y.strides[d];
      if (d != axis)
        doff += c[d] * dataStrides[d];
    }
    int64_t k = ldI(idx.data, idx.dtype, ioff);
    if (k < -limit || k >= limit) {
      recordError(err, ERR_INDEX, k, limit, 0);
      return;
    }
    doff += (k < 0 ? k + limit : k) * dataStrides[axis];
    if (acc)
      addTo(acc + doff, ldF(y.data, y.dtype, yoff));
    else
      copyElement(y.data + yoff * es, data.data + doff * es, es);
  }
};

/// CumSum: one line per thread, the CPU's order (f32 / int64 running total).
struct CumsumF {
  View x, y;
  int32_t axis;
  bool exclusive, reverse;
  HD void operator()(int64_t line) const {
    // line's coordinates over x's dims without the axis.
    int64_t xo = 0, yo = 0, rem = line;
    for (int32_t d = x.rank - 1; d >= 0; --d) {
      if (d == axis)
        continue;
      int64_t c = rem % x.shape[d];
      rem /= x.shape[d];
      xo += c * x.strides[d];
      yo += c * y.strides[d];
    }
    int64_t len = x.shape[axis], xs = x.strides[axis], ys = y.strides[axis];
    if (floatType(x.dtype))
      cumsumScan<float>(
          len, exclusive, reverse, [&](int64_t i) { return ldF(x.data, x.dtype, xo + i * xs); },
          [&](int64_t i, float v) { stF(y.data, y.dtype, yo + i * ys, v); });
    else
      cumsumScan<int64_t>(
          len, exclusive, reverse, [&](int64_t i) { return ldI(x.data, x.dtype, xo + i * xs); },
          [&](int64_t i, int64_t v) { stI(y.data, y.dtype, yo + i * ys, v); });
  }
};

/// GridSample: one output point per thread (its taps once, then every
/// channel); the gradient adds dx with f32 atomics (an f32 accumulator) and
/// writes the point's dgrid.
struct GridSampleF {
  View x, grid, y; // y: the output, or dy for the gradient
  int32_t mode, pad;
  bool align;
  float *dx;  // gradient: the f32 accumulator of dx (or null)
  View dgrid; // gradient: dgrid (data null to skip)
  bool grad;
  HD void operator()(int64_t p) const {
    int64_t C = x.shape[1], H = x.shape[2], W = x.shape[3], Ho = grid.shape[1], Wo = grid.shape[2];
    int64_t n = p / (Ho * Wo), h = p / Wo % Ho, w = p % Wo;
    int64_t go = n * grid.strides[0] + h * grid.strides[1] + w * grid.strides[2];
    amprt_gs::Taps t;
    amprt_gs::taps(ldF(grid.data, grid.dtype, go), ldF(grid.data, grid.dtype, go + grid.strides[3]),
                   H, W, mode, pad, align, t);
    float gx = 0.0f, gy = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      int64_t xb = n * x.strides[0] + c * x.strides[1];
      int64_t yo = n * y.strides[0] + c * y.strides[1] + h * y.strides[2] + w * y.strides[3];
      if (!grad) {
        float acc = t.nan ? NAN : 0.0f;
        for (int k = 0; k < t.n; ++k)
          if (t.off[k] >= 0)
            acc += t.w[k] * ldF(x.data, x.dtype,
                                xb + (t.off[k] / W) * x.strides[2] + (t.off[k] % W) * x.strides[3]);
        stF(y.data, y.dtype, yo, acc);
        continue;
      }
      float g = ldF(y.data, y.dtype, yo);
      for (int k = 0; k < t.n; ++k) {
        if (t.off[k] < 0)
          continue;
        if (dx)
          addTo(dx + (n * C + c) * H * W + t.off[k], t.w[k] * g);
        if (dgrid.data) {
          float v = ldF(x.data, x.dtype,
                        xb + (t.off[k] / W) * x.strides[2] + (t.off[k] % W) * x.strides[3]);
          gx += t.wx[k] * v * g;
          gy += t.wy[k] * v * g;
        }
      }
    }
    if (grad && dgrid.data) {
      int64_t o = ((n * Ho + h) * Wo + w) * 2;
      stF(dgrid.data, dgrid.dtype, o, t.nan ? NAN : gx * t.mx);
      stF(dgrid.data, dgrid.dtype, o + 1, t.nan ? NAN : gy * t.my);
    }
  }
};

/// TopK: one row per thread, the k best kept sorted in the outputs as the
/// row is scanned (an insertion each time an element beats the k-th).
struct TopKF {
  View x, v, idx;
  int32_t axis;
  int64_t k, es;
  bool largest;
  HD void operator()(int64_t row) const {
    int64_t xo = 0, vo = 0, io = 0, rem = row;
    for (int32_t d = x.rank - 1; d >= 0; --d) {
      if (d == axis)
        continue;
      int64_t c = rem % x.shape[d];
      rem /= x.shape[d];
      xo += c * x.strides[d];
      vo += c * v.strides[d];
      io += c * idx.strides[d];
    }
    int64_t len = x.shape[axis], xs = x.strides[axis], is = idx.strides[axis];
    int64_t *ix = reinterpret_cast<int64_t *>(idx.data) + io;
    int64_t have = 0;
    for (int64_t i = 0; i < len; ++i) {
      float a = ldF(x.data, x.dtype, xo + i * xs);
      if (have == k && !topBefore(a, i, ldF(x.data, x.dtype, xo + ix[(k - 1) * is] * xs),
                                  ix[(k - 1) * is], largest))
        continue;
      int64_t j = have < k ? have++ : k - 1;
      for (; j > 0; --j) {
        int64_t p = ix[(j - 1) * is];
        if (!topBefore(a, i, ldF(x.data, x.dtype, xo + p * xs), p, largest))
          break;
        ix[j * is] = p;
      }
      ix[j * is] = i;
    }
    for (int64_t j = 0; j < k; ++j)
      copyElement(v.data + (vo + j * v.strides[axis]) * es, x.data + (xo + ix[j * is] * xs) * es,
                  es);
  }
};

/// ArgMax / ArgMin: one output slot per thread, scanning the axis.
struct ArgReduceF {
  View x, y;
  int32_t axis;
  bool min, last;
  HD void operator()(int64_t lin) const {
    int64_t c[AMPRT_MAX_RANK];
    int64_t rem = lin;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      c[d] = rem % y.shape[d];
      rem /= y.shape[d];
    }
    int64_t xoff = 0, yoff = 0;
    for (int32_t d = 0; d < y.rank; ++d) {
      xoff += c[d] * x.strides[d];
      yoff += c[d] * y.strides[d];
    }
    reinterpret_cast<int64_t *>(y.data)[yoff] =
        floatType(x.dtype) ? scan<true>(xoff) : scan<false>(xoff);
  }
  /// The index of the extreme along the axis from xoff (floats or int64s).
  template <bool Float> HD int64_t scan(int64_t xoff) const {
    int64_t best = 0, len = x.shape[axis], st = x.strides[axis];
    auto load = [&](int64_t o) {
      if constexpr (Float)
        return ldF(x.data, x.dtype, o);
      else
        return ldI(x.data, x.dtype, o);
    };
    auto bv = load(xoff);
    for (int64_t i = 1; i < len; ++i) {
      auto v = load(xoff + i * st);
      if (argBetter(v, bv, min, last))
        bv = v, best = i;
    }
    return best;
  }
};

/// The indexing opcodes of amprt_exec (exec.cu dispatches them here).
int32_t execIndexing(amprt_context *ctx, Dev &d, Decoded &dd) {
  (void)ctx;
  auto &t = dd.t;
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_GATHER: {
    attrs::gather a;
    AMPRT_CHECK(read(dd, a));
    int32_t axis = axisField(a.axis);
    if ((t[1].dtype != AMPRT_I32 && t[1].dtype != AMPRT_I64) || axis < 0 || axis >= t[0].rank ||
        t[0].dtype != t[2].dtype || t[2].rank != t[0].rank - 1 + t[1].rank)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): gather's operands do not agree");
    return each(&d, numel(t[2]),
                GatherF{viewOf(t[0]), viewOf(t[1]), viewOf(t[2]), axis,
                        (int64_t)amprt_dtype_size(t[0].dtype), d.err},
                "gather");
  }
  case AMPRT_OP_GATHER_GRAD: {
    attrs::gather_grad a;
    AMPRT_CHECK(read(dd, a));
    int32_t axis = axisField(a.axis);
    const amprt_tensor &idx = t[0], &dy = t[1], &dd2 = t[2];
    if ((idx.dtype != AMPRT_I32 && idx.dtype != AMPRT_I64) || !floatType(dy.dtype) ||
        dy.dtype != dd2.dtype || axis < 0 || axis >= dd2.rank ||
        dy.rank != dd2.rank - 1 + idx.rank || !amprt_tensor_is_contiguous(&dd2))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): gather_grad's operands do not agree");
    void *acc = dd2.data;
    if (dd2.dtype != AMPRT_F32)
      AMPRT_CHECK(scratch(d, 0, (size_t)numel(dd2) * 4, &acc));
    AMPRT_CHECK(zero(d, acc, (size_t)numel(dd2) * 4));
    GatherGradF f{viewOf(idx), viewOf(dy), static_cast<float *>(acc), axis, dd2.rank, {},
                  {},          d.err};
    contiguousStrides(dd2.rank, dd2.shape, f.dense);
    for (int32_t i = 0; i < dd2.rank; ++i)
      f.ddShape[i] = dd2.shape[i];
    AMPRT_CHECK(each(&d, numel(dy), f, "gather_grad"));
    if (dd2.dtype != AMPRT_F32)
      AMPRT_CHECK(
          each(&d, numel(dd2), CastFloatF{acc, dd2.data, AMPRT_F32, dd2.dtype}, "gather_grad"));
    return AMPRT_OK;
  }
  case AMPRT_OP_CUMSUM: {
    attrs::cumsum a;
    AMPRT_CHECK(read(dd, a));
    int32_t axis = axisField(a.axis);
    const amprt_tensor &x = t[0], &y = t[1];
    bool ok = x.rank >= 1 && y.rank == x.rank && axis >= 0 && axis < x.rank &&
              floatType(x.dtype) == floatType(y.dtype);
    for (int32_t i = 0; ok && i < x.rank; ++i)
      ok = y.shape[i] == x.shape[i];
    if (!ok)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): cumsum's operands do not agree");
    int64_t len = x.shape[axis], lines = len ? numel(x) / len : 0;
    return each(&d, lines, CumsumF{viewOf(x), viewOf(y), axis, a.exclusive != 0, a.reverse != 0},
                "cumsum");
  }
  case AMPRT_OP_GRID_SAMPLE:
  case AMPRT_OP_GRID_SAMPLE_GRAD: {
    bool grad = dd.opcode == AMPRT_OP_GRID_SAMPLE_GRAD;
    attrs::grid_sample_grad a; // grid_sample's fields, then want_dx, want_dgrid
    if (grad) {
      AMPRT_CHECK(read(dd, a));
    } else {
      attrs::grid_sample g;
      AMPRT_CHECK(read(dd, g));
      a.mode = g.mode;
      a.padding = g.padding;
      a.align_corners = g.align_corners;
    }
    const amprt_tensor &x = t[0], &grid = t[1], &y = t[2];
    bool ok = x.rank == 4 && grid.rank == 4 && y.rank == 4 && grid.shape[3] == 2 &&
              grid.shape[0] == x.shape[0] && y.shape[0] == x.shape[0] && y.shape[1] == x.shape[1] &&
              y.shape[2] == grid.shape[1] && y.shape[3] == grid.shape[2] && floatType(x.dtype) &&
              floatType(grid.dtype) && floatType(y.dtype) && x.shape[2] > 0 && x.shape[3] > 0 &&
              a.mode >= 0 && a.mode <= 2 && a.padding >= 0 && a.padding <= 2;
    if (grad)
      ok = ok &&
           (!a.want_dx || (numel(t[3]) == numel(x) && floatType(t[3].dtype) &&
                           amprt_tensor_is_contiguous(&t[3]))) &&
           (!a.want_dgrid || (numel(t[4]) == numel(grid) && floatType(t[4].dtype) &&
                              amprt_tensor_is_contiguous(&t[4])));
    if (!ok)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s's operands do not agree",
                  grad ? "grid_sample_grad" : "grid_sample");
    GridSampleF f{viewOf(x),
                  viewOf(grid),
                  viewOf(y),
                  (int32_t)a.mode,
                  (int32_t)a.padding,
                  a.align_corners != 0,
                  nullptr,
                  View{},
                  grad};
    int64_t points = grid.shape[0] * grid.shape[1] * grid.shape[2];
    if (!grad)
      return points ? each(&d, points, f, "grid_sample") : AMPRT_OK;
    void *acc = nullptr;
    if (a.want_dx) {
      acc = t[3].data;
      if (t[3].dtype != AMPRT_F32)
        AMPRT_CHECK(scratch(d, 0, (size_t)numel(x) * 4, &acc));
      AMPRT_CHECK(zero(d, acc, (size_t)numel(x) * 4));
      f.dx = static_cast<float *>(acc);
    }
    if (a.want_dgrid)
      f.dgrid = viewOf(t[4]);
    if (points)
      AMPRT_CHECK(each(&d, points, f, "grid_sample_grad"));
    if (a.want_dx && t[3].dtype != AMPRT_F32)
      AMPRT_CHECK(each(&d, numel(x), CastFloatF{acc, t[3].data, AMPRT_F32, t[3].dtype},
                       "grid_sample_grad"));
    return AMPRT_OK;
  }
  case AMPRT_OP_TOPK: {
    attrs::topk a;
    AMPRT_CHECK(read(dd, a));
    int32_t axis = axisField(a.axis);
    const amprt_tensor &x = t[0], &v = t[1], &ix = t[2];
    bool ok = floatType(x.dtype) && v.dtype == x.dtype && ix.dtype == AMPRT_I64 && x.rank >= 1 &&
              v.rank == x.rank && ix.rank == x.rank && axis >= 0 && axis < x.rank &&
              v.shape[axis] <= x.shape[axis];
    for (int32_t i = 0; ok && i < x.rank; ++i)
      ok = v.shape[i] == ix.shape[i] && (i == axis || v.shape[i] == x.shape[i]);
    if (!ok)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): topk's operands do not agree");
    int64_t len = x.shape[axis], k = v.shape[axis], rows = len ? numel(x) / len : 0;
    if (k == 0 || rows == 0)
      return AMPRT_OK;
    return each(&d, rows,
                TopKF{viewOf(x), viewOf(v), viewOf(ix), axis, k, (int64_t)amprt_dtype_size(x.dtype),
                      a.largest != 0},
                "topk");
  }
  case AMPRT_OP_ARG_REDUCE: {
    attrs::arg_reduce a;
    AMPRT_CHECK(read(dd, a));
    int32_t axis = axisField(a.axis);
    const amprt_tensor &x = t[0], &y = t[1];
    bool ok = y.dtype == AMPRT_I64 && x.rank >= 1 && y.rank == x.rank && axis >= 0 &&
              axis < x.rank && x.shape[axis] >= 1 && y.shape[axis] == 1;
    for (int32_t i = 0; ok && i < x.rank; ++i)
      ok = i == axis || y.shape[i] == x.shape[i];
    if (!ok)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): arg_reduce's operands do not agree");
    return each(&d, numel(y),
                ArgReduceF{viewOf(x), viewOf(y), axis, a.min != 0, a.select_last != 0},
                "arg_reduce");
  }
  case AMPRT_OP_GATHER_ELEMENTS:
  case AMPRT_OP_GATHER_ELEMENTS_GRAD: {
    bool grad = dd.opcode == AMPRT_OP_GATHER_ELEMENTS_GRAD;
    int32_t axis = 0;
    if (grad) {
      attrs::gather_elements_grad a;
      AMPRT_CHECK(read(dd, a));
      axis = axisField(a.axis);
    } else {
      attrs::gather_elements a;
      AMPRT_CHECK(read(dd, a));
      axis = axisField(a.axis);
    }
    // Forward: data, indices, y. Gradient: indices, dy (read as "y"), ddata.
    const amprt_tensor &data = grad ? t[2] : t[0], &idx = grad ? t[0] : t[1],
                       &y = grad ? t[1] : t[2];
    bool ok = (idx.dtype == AMPRT_I32 || idx.dtype == AMPRT_I64) && data.rank >= 1 &&
              idx.rank == data.rank && y.rank == data.rank && axis >= 0 && axis < data.rank &&
              data.dtype == y.dtype &&
              (!grad || (floatType(y.dtype) && amprt_tensor_is_contiguous(&data)));
    for (int32_t i = 0; ok && i < data.rank; ++i)
      ok = y.shape[i] == idx.shape[i] && (i == axis || idx.shape[i] <= data.shape[i]);
    if (!ok)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s's operands do not agree",
                  grad ? "gather_elements_grad" : "gather_elements");
    GatherElementsF f{
        viewOf(data), viewOf(idx),      viewOf(y), axis, (int64_t)amprt_dtype_size(y.dtype),
        nullptr,      data.shape[axis], {},        d.err};
    if (!grad) {
      for (int32_t i = 0; i < data.rank; ++i)
        f.dataStrides[i] = data.strides[i];
      return each(&d, numel(y), f, "gather_elements");
    }
    void *acc = data.data;
    if (data.dtype != AMPRT_F32)
      AMPRT_CHECK(scratch(d, 0, (size_t)numel(data) * 4, &acc));
    AMPRT_CHECK(zero(d, acc, (size_t)numel(data) * 4));
    f.acc = static_cast<float *>(acc);
    contiguousStrides(data.rank, data.shape, f.dataStrides);
    AMPRT_CHECK(each(&d, numel(y), f, "gather_elements_grad"));
    if (data.dtype != AMPRT_F32)
      AMPRT_CHECK(each(&d, numel(data), CastFloatF{acc, data.data, AMPRT_F32, data.dtype},
                       "gather_elements_grad"));
    return AMPRT_OK;
  }
  default:
    break;
  }
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec (cuda): opcode %lld is not one of the indexing ops",
              (long long)dd.opcode);
}

} // namespace amprt::cuda
