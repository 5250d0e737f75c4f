//===- conv.cu - convolutions: direct kernels and im2col + cuBLASLt ---------===//
//
// Direct kernels (AMPRT_CUDA_CONV=direct), im2col + one product per batch
// chunk, and the choice between those and cuDNN (conv_cudnn.cu).
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

/// A batch norm folded into f32 weights and bias (conv_bn), per weight.
struct FoldBnF {
  const float *w, *bias, *scale, *shift, *mean, *var;
  float *wf, *bf;
  int64_t per;
  double eps;
  HD void operator()(int64_t e) const {
    int64_t ch = e / per;
    double a = (double)scale[ch] / sqrt((double)var[ch] + eps);
    wf[e] = (float)(w[e] * a);
    if (e % per == 0)
      bf[ch] =
          (float)(((bias ? (double)bias[ch] : 0.0) - (double)mean[ch]) * a + (double)shift[ch]);
  }
};

struct ConvF {
  Geom gm;
  const void *x, *w, *bias;
  void *y;
  int32_t xt, wt, bt, yt, relu;
  HD void operator()(int64_t e) const {
    int64_t op = e % gm.outPlane(), m = (e / gm.outPlane()) % gm.m, n = e / (gm.outPlane() * gm.m);
    int64_t o[3];
    outIndex(gm, op, o);
    int64_t cpg = gm.c / gm.g, grp = m / (gm.m / gm.g);
    double acc = bias ? (double)ldF(bias, bt, m) : 0.0;
    for (int64_t ci = 0; ci < cpg; ++ci) {
      int64_t xb = (n * gm.c + grp * cpg + ci) * gm.inPlane(), wb = (m * cpg + ci) * gm.kPlane();
      forWindow(gm, o, [&](int64_t kp, int64_t ip) {
        acc += (double)ldF(x, xt, xb + ip) * (double)ldF(w, wt, wb + kp);
      });
    }
    float v = (float)acc;
    if (relu && !(v > 0.0f) && !isNaN(v))
      v = 0.0f;
    stF(y, yt, e, v);
  }
};

/// dx[n, c, i] = sum over the outputs whose window holds i and the group's
/// filters of dy * w.
struct ConvDxF {
  Geom gm;
  const void *dy, *w;
  void *dx;
  int32_t dyt, wt, dxt;
  HD void operator()(int64_t e) const {
    int64_t ip = e % gm.inPlane(), c = (e / gm.inPlane()) % gm.c, n = e / (gm.inPlane() * gm.c);
    int64_t i[3] = {ip / (gm.in[2] * gm.in[1]), (ip / gm.in[2]) % gm.in[1], ip % gm.in[2]};
    int64_t cpg = gm.c / gm.g, mpg = gm.m / gm.g, grp = c / cpg, ci = c % cpg;
    double acc = 0.0;
    forWindowsOf(gm, i, [&](int64_t kp, int64_t opos) {
      for (int64_t mm = 0; mm < mpg; ++mm) {
        int64_t m = grp * mpg + mm;
        acc += (double)ldF(dy, dyt, (n * gm.m + m) * gm.outPlane() + opos) *
               (double)ldF(w, wt, (m * cpg + ci) * gm.kPlane() + kp);
      }
    });
    stF(dx, dxt, e, (float)acc);
  }
};

/// dw[m, ci, k] = sum over the batch and the outputs of x * dy: per weight,
/// or per weight and batch item into partial (SumPartsF adds them).
struct ConvDwF {
  Geom gm;
  const void *x, *dy;
  void *dw;
  int32_t xt, dyt, dwt;
  double *partial; // non-null: index = e * n + batch item
  HD void operator()(int64_t idx) const {
    int64_t e = partial ? idx / gm.n : idx;
    int64_t n0 = partial ? idx % gm.n : 0, n1 = partial ? n0 + 1 : gm.n;
    int64_t cpg = gm.c / gm.g, kp = e % gm.kPlane(), ci = (e / gm.kPlane()) % cpg,
            m = e / (gm.kPlane() * cpg);
    int64_t c = (m / (gm.m / gm.g)) * cpg + ci;
    double acc = 0.0;
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t op = 0; op < gm.outPlane(); ++op) {
        int64_t in;
        if (windowInput(gm, op, kp, in))
          acc += (double)ldF(x, xt, (n * gm.c + c) * gm.inPlane() + in) *
                 (double)ldF(dy, dyt, (n * gm.m + m) * gm.outPlane() + op);
      }
    if (partial)
      partial[idx] = acc;
    else
      stF(dw, dwt, e, (float)acc);
  }
};

/// out[e] = the sum over k < parts of part[e * eStep + k * kStep], in
/// order, accumulated in T (double partial sums, or f32 chunk products).
template <class T> struct SumPartsF {
  const T *part;
  int64_t parts, eStep, kStep;
  void *out;
  int32_t outType;
  HD void operator()(int64_t e) const {
    T acc = 0;
    for (int64_t k = 0; k < parts; ++k)
      acc += part[e * eStep + k * kStep];
    stF(out, outType, e, (float)acc);
  }
};

//--- Convolutions as matrix products (im2col + cuBLASLt) ----------------------------
//
// A batch chunk of nc items at a time: the windows of x gathered into
// col[C * KP, nc * OP] (row c * KP + kp, column nn * OP + op), then per group
// one product of the group's filters [M / g, C / g * KP] with its rows of col
// (all groups in one strided call). The gradients use the same layout: dy
// made channel-major ([M, nc * OP]), dx's columns dW^T dy scattered back
// onto x's positions (a gather per input element: no atomics, one order),
// dw = dy col^T, whose [M, C / g * KP] per group is w's own layout.

/// col[c * KP + kp, nn, op] = x[n0 + nn, c, the position of window kp at
/// output op] (0 in the padding), in col's type.
struct Im2ColF {
  Geom gm;
  const void *x;
  void *col;
  int32_t xt, ct;
  int64_t n0, nc;
  HD void operator()(int64_t e) const {
    int64_t OP = gm.outPlane(), KP = gm.kPlane();
    int64_t op = e % OP, nn = (e / OP) % nc, ckp = e / (OP * nc);
    int64_t c = ckp / KP, kp = ckp % KP;
    int64_t in;
    bool inside = windowInput(gm, op, kp, in);
    stF(col, ct, e, inside ? ldF(x, xt, ((n0 + nn) * gm.c + c) * gm.inPlane() + in) : 0.0f);
  }
};

/// dst[ch, nn, p] = src[n0 + nn, ch, p] ([N, CH, P] -> [CH, nc, P]) in dst's type.
struct ChannelMajorF {
  const void *src;
  void *dst;
  int32_t st, dt;
  int64_t ch, plane, n0, nc;
  HD void operator()(int64_t e) const {
    int64_t p = e % plane, nn = (e / plane) % nc, c = e / (plane * nc);
    stF(dst, dt, e, ldF(src, st, ((n0 + nn) * ch + c) * plane + p));
  }
};

/// y[n0 + nn, m, op] = acc[m, nn, op] + bias[m], ReLU (NaN kept) on
/// request, rounded once to y's type.
struct ConvOutF {
  Geom gm;
  const float *acc;
  const void *bias;
  void *y;
  int32_t bt, yt, relu;
  int64_t n0, nc;
  HD void operator()(int64_t e) const {
    int64_t OP = gm.outPlane();
    int64_t op = e % OP, m = (e / OP) % gm.m, nn = e / (OP * gm.m);
    float v = acc[(m * nc + nn) * OP + op];
    if (bias)
      v += ldF(bias, bt, m);
    if (relu && !(v > 0.0f) && !isNaN(v))
      v = 0.0f;
    stF(y, yt, n0 * gm.m * OP + e, v);
  }
};

/// dx[n0 + nn, c, ip] = the sum of dcol[c * KP + kp, nn, op] over the
/// windows (kp, op) that hold input position ip.
struct Col2ImF {
  Geom gm;
  const float *dcol;
  void *dx;
  int32_t dxt;
  int64_t n0, nc;
  HD void operator()(int64_t e) const {
    int64_t IP = gm.inPlane(), OP = gm.outPlane(), KP = gm.kPlane();
    int64_t ip = e % IP, c = (e / IP) % gm.c, nn = e / (IP * gm.c);
    int64_t i[3] = {ip / (gm.in[2] * gm.in[1]), (ip / gm.in[2]) % gm.in[1], ip % gm.in[2]};
    float acc = 0.0f;
    forWindowsOf(gm, i, [&](int64_t kp, int64_t opos) {
      acc += dcol[((c * KP + kp) * nc + nn) * OP + opos];
    });
    stF(dx, dxt, n0 * gm.c * IP + e, acc);
  }
};

/// Per channel of [N, C, plane]: the sum (and, with x, the centred sums).
/// Per channel and batch item of [N, C, plane]: the plane's sum, at
/// out[ch * n + b] (SumPartsF adds the items).
struct ChannelSumF {
  const void *x;
  int32_t xt;
  int64_t n, c, plane;
  double *out;
  HD void operator()(int64_t idx) const {
    int64_t ch = idx / n, b = idx % n;
    double s = 0.0;
    for (int64_t i = 0; i < plane; ++i)
      s += (double)ldF(x, xt, (b * c + ch) * plane + i);
    out[idx] = s;
  }
};

/// Max pool: per output, the window's positions in row-major order (padding
/// skipped); a NaN wins, else the first maximum. Indices: x's flat index
/// (column-major within the plane for storage_order 1), or -1.

amprt_status geomOf(const amprt_tensor &x, const amprt_tensor &y, int32_t spatial,
                    const int64_t *kernel, const int64_t *strides, const int64_t *dil,
                    const int64_t *pb, int64_t group, const char *what, Geom &g) {
  if (spatial < 1 || spatial > 3 || x.rank != spatial + 2 || y.rank != x.rank ||
      !amprt_tensor_is_contiguous(&x) || !amprt_tensor_is_contiguous(&y) ||
      x.shape[0] != y.shape[0] || group < 1 || x.shape[1] % group || y.shape[1] % group)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec (cuda): %s: x %s and y %s must be contiguous [N, C, D...] of the "
                "parameters' spatial rank",
                what, shapeString(&x).c_str(), shapeString(&y).c_str());
  g.n = x.shape[0];
  g.c = x.shape[1];
  g.m = y.shape[1];
  g.g = group;
  for (int i = 0; i < 3; ++i) {
    bool on = i < spatial;
    g.in[i] = on ? x.shape[2 + i] : 1;
    g.out[i] = on ? y.shape[2 + i] : 1;
    g.k[i] = on ? kernel[i] : 1;
    g.s[i] = on && strides[i] > 0 ? strides[i] : 1;
    g.d[i] = on && dil[i] > 0 ? dil[i] : 1;
    g.pb[i] = on ? pb[i] : 0;
    if (g.k[i] < 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: kernel size %lld", what,
                  (long long)g.k[i]);
  }
  return AMPRT_OK;
}

amprt_status convGeom(const amprt_tensor &x, const amprt_tensor &w, const amprt_tensor &y,
                      const amprt_conv_params &p, const char *what, Geom &g) {
  if (w.rank != x.rank || !amprt_tensor_is_contiguous(&w) || !floatType(x.dtype) ||
      !floatType(w.dtype) || !floatType(y.dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: operands", what);
  int64_t kernel[3] = {1, 1, 1};
  for (int32_t i = 0; i < p.spatial && i + 2 < w.rank; ++i)
    kernel[i] = w.shape[2 + i];
  AMPRT_CHECK(
      geomOf(x, y, p.spatial, kernel, p.strides, p.dilations, p.pads_begin, p.group, what, g));
  if (w.shape[0] != g.m || w.shape[1] != g.c / g.g)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: w %s does not fit x %s / y %s",
                what, shapeString(&w).c_str(), shapeString(&x).c_str(), shapeString(&y).c_str());
  return AMPRT_OK;
}

amprt_status bmm(Dev &d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A,
                 const void *B, int32_t abType, void *Y, int32_t yType, int64_t batch, int64_t sA,
                 int64_t sB, int64_t sY);

/// Batch items per chunk of a convolution as products: the gathered
/// windows (C * KP * OP elements of `es` bytes per item) within the budget
/// (AMPRT_CUDA_CONV_CHUNK bytes, 512 MiB by default), one item at least.
int64_t convChunk(const Dev &d, const Geom &g, size_t es) {
  size_t per = (size_t)(g.c * g.kPlane() * g.outPlane()) * es;
  int64_t nc = per ? (int64_t)std::min<size_t>(d.convChunkBytes / per, (size_t)g.n) : g.n;
  return std::max<int64_t>(1, std::min(nc, g.n));
}

/// p (n elements of type t) as type `want`: itself, or a converted copy in
/// scratch slot `slot`.
amprt_status asType(Dev &d, const void *p, int32_t t, int64_t n, int32_t want, int slot,
                    const void **out) {
  *out = p;
  if (t == want)
    return AMPRT_OK;
  void *buf;
  AMPRT_CHECK(scratch(d, slot, (size_t)n * amprt_dtype_size((amprt_dtype)want), &buf));
  *out = buf;
  return each(&d, n, CastFloatF{p, buf, t, want}, "conv operand");
}

/// y = conv(x, w) + bias (ReLU on request) as im2col + one product per
/// chunk: operands of one type (f32 when x and w differ), f32 accumulation,
/// bias and ReLU added in f32 and rounded once.
amprt_status convGemm(Dev &d, const Geom &g, const void *x, int32_t xt, const void *w, int32_t wt,
                      const void *bias, int32_t bt, void *y, int32_t yt, bool relu) {
  int32_t T = xt == wt ? xt : AMPRT_F32;
  int64_t KP = g.kPlane(), OP = g.outPlane(), cpg = g.c / g.g, mpg = g.m / g.g;
  const void *wT;
  AMPRT_CHECK(asType(d, w, wt, g.m * cpg * KP, T, 7, &wT));
  size_t es = amprt_dtype_size((amprt_dtype)T);
  int64_t nc = convChunk(d, g, es);
  void *col, *acc;
  AMPRT_CHECK(scratch(d, 8, (size_t)(g.c * KP * nc * OP) * es, &col));
  AMPRT_CHECK(scratch(d, 9, (size_t)(g.m * nc * OP) * 4, &acc));
  for (int64_t n0 = 0; n0 < g.n; n0 += nc) {
    int64_t cn = std::min(nc, g.n - n0);
    AMPRT_CHECK(each(&d, g.c * KP * cn * OP, Im2ColF{g, x, col, xt, T, n0, cn}, "conv im2col"));
    AMPRT_CHECK(bmm(d, false, false, mpg, cn * OP, cpg * KP, wT, col, T, acc, AMPRT_F32, g.g,
                    mpg * cpg * KP, cpg * KP * cn * OP, mpg * cn * OP));
    AMPRT_CHECK(
        each(&d, cn * g.m * OP,
             ConvOutF{g, static_cast<const float *>(acc), bias, y, bt, yt, relu ? 1 : 0, n0, cn},
             "conv"));
  }
  return AMPRT_OK;
}

/// The data and weight gradients as products (see convGemm): dcol = W^T dy
/// gathered back onto x, dw = dy col^T summed over the chunks.
amprt_status convGradGemm(Dev &d, const Geom &g, const amprt_tensor &x, const amprt_tensor &w,
                          const amprt_tensor &dy, const amprt_tensor *dx, const amprt_tensor *dw) {
  int32_t T = x.dtype == w.dtype && w.dtype == dy.dtype ? x.dtype : AMPRT_F32;
  int64_t KP = g.kPlane(), OP = g.outPlane(), cpg = g.c / g.g, mpg = g.m / g.g, nw = g.m * cpg * KP;
  size_t es = amprt_dtype_size((amprt_dtype)T);
  int64_t nc = convChunk(d, g, 4), chunks = (g.n + nc - 1) / nc;
  const void *wT = nullptr;
  if (dx)
    AMPRT_CHECK(asType(d, w.data, w.dtype, nw, T, 7, &wT));
  void *col = nullptr, *dcol = nullptr, *dyT, *part = nullptr;
  AMPRT_CHECK(scratch(d, 10, (size_t)(g.m * nc * OP) * es, &dyT));
  if (dx)
    AMPRT_CHECK(scratch(d, 9, (size_t)(g.c * KP * nc * OP) * 4, &dcol));
  bool direct = dw && chunks == 1 && dw->dtype == AMPRT_F32;
  if (dw) {
    AMPRT_CHECK(scratch(d, 8, (size_t)(g.c * KP * nc * OP) * es, &col));
    if (!direct)
      AMPRT_CHECK(scratch(d, 11, (size_t)(nw * chunks) * 4, &part));
  }
  for (int64_t n0 = 0, q = 0; n0 < g.n; n0 += nc, ++q) {
    int64_t cn = std::min(nc, g.n - n0);
    AMPRT_CHECK(each(&d, g.m * cn * OP, ChannelMajorF{dy.data, dyT, dy.dtype, T, g.m, OP, n0, cn},
                     "conv_grad"));
    if (dx) {
      AMPRT_CHECK(bmm(d, true, false, cpg * KP, cn * OP, mpg, wT, dyT, T, dcol, AMPRT_F32, g.g,
                      mpg * cpg * KP, mpg * cn * OP, cpg * KP * cn * OP));
      AMPRT_CHECK(each(&d, cn * g.c * g.inPlane(),
                       Col2ImF{g, static_cast<const float *>(dcol), dx->data, dx->dtype, n0, cn},
                       "conv_grad dx"));
    }
    if (dw) {
      AMPRT_CHECK(each(&d, g.c * KP * cn * OP, Im2ColF{g, x.data, col, x.dtype, T, n0, cn},
                       "conv_grad im2col"));
      void *out = direct ? dw->data : static_cast<char *>(part) + (size_t)(q * nw) * 4;
      AMPRT_CHECK(bmm(d, false, true, mpg, cpg * KP, cn * OP, dyT, col, T, out, AMPRT_F32, g.g,
                      mpg * cn * OP, cpg * KP * cn * OP, mpg * cpg * KP));
    }
  }
  if (dw && !direct)
    AMPRT_CHECK(
        each(&d, nw,
             SumPartsF<float>{static_cast<const float *>(part), chunks, 1, nw, dw->data, dw->dtype},
             "conv_grad dw"));
  return AMPRT_OK;
}

amprt_status conv(Dev &d, const Decoded &dd, bool withBn) {
  amprt_conv_params p{};
  bool hasBias = false;
  int32_t flags = 0;
  double eps = 0;
  auto fields = [&](auto &a) { // conv's and conv_bn's shared fields
    AMPRT_CHECK(read(dd, a));
    p = convParams(a);
    hasBias = a.has_bias != 0;
    flags = (int32_t)a.flags.value_or(0);
    return AMPRT_OK;
  };
  if (withBn) {
    attrs::conv_bn a;
    AMPRT_CHECK(fields(a));
    eps = a.epsilon;
  } else {
    attrs::conv a;
    AMPRT_CHECK(fields(a));
  }
  const auto &t = dd.t;
  if (flags & ~(AMPRT_CONV_RELU | AMPRT_CONV_SRC_BLOCKED | AMPRT_CONV_DST_BLOCKED))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv flags %d", flags);
  // Channel-blocked values are plain NCHW here: every reader and writer of
  // them on this device agrees (the blocked flags are the CPU's layouts).
  const amprt_tensor &x = t[0], &w = t[1], &y = t.back();
  Geom g;
  AMPRT_CHECK(convGeom(x, w, y, p, "conv", g));
  const void *wp = w.data, *bp = hasBias ? t[2].data : nullptr;
  int32_t wt = w.dtype, bt = hasBias ? t[2].dtype : AMPRT_F32;
  if (hasBias && numel(t[2]) != g.m)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv bias must be [%lld]",
                (long long)g.m);
  if (withBn) {
    size_t o = hasBias ? 3 : 2; // scale, shift, mean, var
    for (size_t k = 0; k < 4; ++k)
      if (t[o + k].dtype != AMPRT_F32 || numel(t[o + k]) != g.m ||
          !amprt_tensor_is_contiguous(&t[o + k]))
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "amprt_exec (cuda): conv_bn's statistics must be f32 [%lld]", (long long)g.m);
    if (w.dtype != AMPRT_F32 || (hasBias && t[2].dtype != AMPRT_F32))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): conv_bn needs f32 weights and bias");
    void *buf;
    AMPRT_CHECK(scratch(d, 4, (size_t)(numel(w) + g.m) * 4, &buf));
    float *wf = static_cast<float *>(buf), *bf = wf + numel(w);
    AMPRT_CHECK(each(
        &d, numel(w),
        FoldBnF{static_cast<const float *>(w.data),
                hasBias ? static_cast<const float *>(t[2].data) : nullptr,
                static_cast<const float *>(t[o].data), static_cast<const float *>(t[o + 1].data),
                static_cast<const float *>(t[o + 2].data),
                static_cast<const float *>(t[o + 3].data), wf, bf, g.m ? numel(w) / g.m : 1, eps},
        "conv_bn"));
    wp = wf;
    bp = bf;
    wt = bt = AMPRT_F32;
  }
  bool relu = (flags & AMPRT_CONV_RELU) != 0;
  if (!d.directConv && numel(y) > 0) {
#ifdef AMPRT_HAVE_CUDNN
    bool done;
    AMPRT_CHECK(
        dnnConv(d, g, p.spatial, x.data, x.dtype, wp, wt, bp, bt, y.data, y.dtype, relu, done));
    if (done) {
      ++d.convOnDnn;
      return AMPRT_OK;
    }
#endif
    ++d.convOnOurs;
    return convGemm(d, g, x.data, x.dtype, wp, wt, bp, bt, y.data, y.dtype, relu);
  }
  return each(
      &d, numel(y),
      ConvF{g, x.data, wp, bp, y.data, x.dtype, wt, bt, y.dtype, (flags & AMPRT_CONV_RELU) ? 1 : 0},
      "conv");
}

amprt_status convGrad(Dev &d, const Decoded &dd) {
  const auto &t = dd.t;
  amprt_conv_params p{};
  bool want[3];
  AMPRT_CHECK(convGradParams(dd, p, want));
  const amprt_tensor &x = t[0], &w = t[1], &dy = t[2];
  Geom g;
  AMPRT_CHECK(convGeom(x, w, dy, p, "conv_grad", g));
  if (want[0] && (numel(t[3]) != numel(x) || !amprt_tensor_is_contiguous(&t[3])))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv_grad dx");
  if (want[1] && (numel(t[4]) != numel(w) || !amprt_tensor_is_contiguous(&t[4])))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv_grad dw");
  bool gemm = !d.directConv && numel(dy) > 0 && numel(x) > 0;
  const amprt_tensor *dx = want[0] ? &t[3] : nullptr, *dw = want[1] ? &t[4] : nullptr;
#ifdef AMPRT_HAVE_CUDNN
  if (gemm && (dx || dw)) {
    int before = (dx != nullptr) + (dw != nullptr);
    AMPRT_CHECK(dnnConvGrad(d, g, p.spatial, x, w, dy, dx, dw));
    d.convOnDnn += before - (dx != nullptr) - (dw != nullptr);
  }
#endif
  d.convOnOurs += (dx != nullptr) + (dw != nullptr);
  if (gemm && (dx || dw))
    AMPRT_CHECK(convGradGemm(d, g, x, w, dy, dx, dw));
  if (want[0] && !gemm) {
    AMPRT_CHECK(each(&d, numel(x),
                     ConvDxF{g, dy.data, w.data, t[3].data, dy.dtype, w.dtype, t[3].dtype},
                     "conv_grad dx"));
  }
  if (want[1] && !gemm) {
    ConvDwF f{g, x.data, dy.data, t[4].data, x.dtype, dy.dtype, t[4].dtype, nullptr};
    if (numel(w) >= 16384 || g.n == 1) {
      AMPRT_CHECK(each(&d, numel(w), f, "conv_grad dw"));
    } else { // one part per batch item, then their sum
      void *buf;
      AMPRT_CHECK(scratch(d, 6, (size_t)(numel(w) * g.n) * 8, &buf));
      f.partial = static_cast<double *>(buf);
      AMPRT_CHECK(each(&d, numel(w) * g.n, f, "conv_grad dw"));
      AMPRT_CHECK(each(&d, numel(w),
                       SumPartsF<double>{f.partial, g.n, g.n, 1, t[4].data, t[4].dtype},
                       "conv_grad dw"));
    }
  }
  if (want[2]) {
    if (numel(t[5]) != g.m)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv_grad db");
    void *buf;
    AMPRT_CHECK(scratch(d, 5, (size_t)(g.m * g.n) * 8, &buf));
    AMPRT_CHECK(
        each(&d, g.m * g.n,
             ChannelSumF{dy.data, dy.dtype, g.n, g.m, g.outPlane(), static_cast<double *>(buf)},
             "conv_grad db"));
    AMPRT_CHECK(each(
        &d, g.m,
        SumPartsF<double>{static_cast<const double *>(buf), g.n, g.n, 1, t[5].data, t[5].dtype},
        "conv_grad db"));
  }
  return AMPRT_OK;
}

/// The conv opcodes of amprt_exec (exec.cu dispatches them here).
int32_t execConv(amprt_context *ctx, Dev &d, Decoded &dd) {
  (void)ctx;
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_CONV:
    return conv(d, dd, false);
  case AMPRT_OP_CONV_BN:
    return conv(d, dd, true);
  case AMPRT_OP_CONV_GRAD:
    return convGrad(d, dd);
  default:
    break;
  }
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec (cuda): opcode %lld is not one of the conv ops", (long long)dd.opcode);
}

} // namespace amprt::cuda
