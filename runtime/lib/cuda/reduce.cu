//===- reduce.cu - reductions, softmax, layer norm, losses ------------------===//
//
// Sums in double, in one order (the CPU runtime's results, bit for bit where it can).
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"
#include "elementwise.cuh"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

//--- Reductions, softmax, normalisation, losses (sums in double) ---------------

/// One output slot of a reduction: x's elements over the reduced dims, in
/// row-major order (the CPU's generic order).
struct ReduceF {
  View x, y;
  int32_t op; // amprt_reduce_op
  bool reduced[AMPRT_MAX_RANK];
  int64_t count;
  // Split over the reduced range (few slots, long sums: more threads): index
  // = slot * chunks + part, each part's sum / max into partial[index];
  // ReduceFinishF combines them in order. partial null: one index per slot.
  double *partial;
  int64_t chunks, chunk;
  // Each slot's elements one dense run from its base (denseRun): read in
  // order, aligned groups of kVec with 16-byte loads.
  bool run;
  HD void operator()(int64_t idx) const {
    int64_t slot = partial ? idx / chunks : idx;
    int64_t r0 = partial ? (idx % chunks) * chunk : 0;
    int64_t r1 = partial ? (r0 + chunk < count ? r0 + chunk : count) : count;
    // Slot -> base offset in x (kept dims), and y's offset.
    int64_t rem = slot, base = 0, yo = 0;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      int64_t c = rem % y.shape[d];
      rem /= y.shape[d];
      base += c * x.strides[d];
      yo += c * y.strides[d];
    }
    double acc = op == AMPRT_REDUCE_PROD ? 1.0 : 0.0;
    float m = 0.0f;
    bool first = true;
    auto take = [&](float v) {
      if (op == AMPRT_REDUCE_MAX) {
        if (first || isNaN(v) || (!isNaN(m) && v > m))
          m = v;
        first = false;
      } else if (op == AMPRT_REDUCE_PROD) {
        acc *= (double)v;
      } else {
        acc += (double)v;
      }
    };
    if (run) {
      int64_t r = r0;
      if (floatType(x.dtype) && reinterpret_cast<uintptr_t>(x.data) % 16 == 0) {
        for (; r < r1 && (base + r) % kVec; ++r)
          take(ldF(x.data, x.dtype, base + r));
        for (; r + kVec <= r1; r += kVec) {
          float v[kVec];
          loadRun8(x.data, x.dtype, base + r, v);
#pragma unroll
          for (int k = 0; k < kVec; ++k)
            take(v[k]);
        }
      }
      for (; r < r1; ++r)
        take(ldF(x.data, x.dtype, base + r));
    } else {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t off = base, q = r;
        for (int32_t d = x.rank - 1; d >= 0; --d)
          if (reduced[d]) {
            off += (q % x.shape[d]) * x.strides[d];
            q /= x.shape[d];
          }
        take(ldF(x.data, x.dtype, off));
      }
    }
    if (partial) {
      partial[idx] = op == AMPRT_REDUCE_MAX ? (double)m : acc;
      return;
    }
    float out = op == AMPRT_REDUCE_MAX    ? m
                : op == AMPRT_REDUCE_MEAN ? (float)(acc / (double)count)
                                          : (float)acc;
    if (op == AMPRT_REDUCE_MAX && count == 0)
      out = -INFINITY;
    stF(y.data, y.dtype, yo, out);
  }
};

/// Whether each output slot's elements are one dense run of x in the
/// reduction's order: the reduced dims (size-1 dims aside) a suffix of x's,
/// their strides chaining down to 1.
bool denseRun(const View &x, const bool *reduced) {
  int64_t expect = 1;
  bool suffix = true;
  for (int32_t d = x.rank - 1; d >= 0; --d) {
    if (x.shape[d] == 1)
      continue;
    if (!reduced[d]) {
      suffix = false;
      continue;
    }
    if (!suffix || x.strides[d] != expect)
      return false;
    expect *= x.shape[d];
  }
  return true;
}

/// Combines a split reduction's parts in order (a NaN part wins a max).
struct ReduceFinishF {
  View y;
  int32_t op;
  int64_t count, chunks;
  const double *partial;
  HD void operator()(int64_t slot) const {
    int64_t rem = slot, yo = 0;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      yo += (rem % y.shape[d]) * y.strides[d];
      rem /= y.shape[d];
    }
    double acc = op == AMPRT_REDUCE_PROD ? 1.0 : 0.0;
    float m = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) {
      double v = partial[slot * chunks + k];
      if (op == AMPRT_REDUCE_MAX) {
        float f = (float)v;
        if (k == 0 || isNaN(f) || (!isNaN(m) && f > m))
          m = f;
      } else if (op == AMPRT_REDUCE_PROD) {
        acc *= v;
      } else {
        acc += v;
      }
    }
    stF(y.data, y.dtype, yo,
        op == AMPRT_REDUCE_MAX    ? m
        : op == AMPRT_REDUCE_MEAN ? (float)(acc / (double)count)
                                  : (float)acc);
  }
};

/// How to split `slots` sums of `count` terms each: 1 part when there are
/// threads enough, else parts of >= 64 terms up to ~32K threads in all.
int64_t partsFor(int64_t slots, int64_t count) {
  if (slots >= 16384 || count < 256)
    return 1;
  int64_t parts = std::max<int64_t>(1, 32768 / std::max<int64_t>(slots, 1));
  return std::max<int64_t>(1, std::min(parts, count / 64));
}

/// Rows along `axis` of a tensor: row r's base offset and element stride.
struct Rows {
  int32_t rank, axis;
  int64_t shape[AMPRT_MAX_RANK];
  HD int64_t base(int64_t r, const int64_t *strides) const {
    int64_t off = 0;
    for (int32_t d = rank - 1; d >= 0; --d) {
      if (d == axis)
        continue;
      off += (r % shape[d]) * strides[d];
      r /= shape[d];
    }
    return off;
  }
};

Rows rowsOf(const amprt_tensor &t, int32_t axis, int64_t &count) {
  Rows r;
  r.rank = t.rank;
  r.axis = axis;
  count = 1;
  for (int32_t d = 0; d < t.rank; ++d) {
    r.shape[d] = t.shape[d];
    if (d != axis)
      count *= t.shape[d];
  }
  return r;
}

struct SoftmaxF {
  View x, y;
  Rows rows;
  int32_t log;
  HD void operator()(int64_t r, int lane, int lanes) const {
    int64_t len = x.shape[rows.axis];
    int64_t xb = rows.base(r, x.strides), yb = rows.base(r, y.strides);
    int64_t xs = x.strides[rows.axis], ys = y.strides[rows.axis];
    RowLanes L{lane, lanes, len};
    auto xAt = [&](int64_t i) { return ldF(x.data, x.dtype, xb + i * xs); };
    float m = L.max(xAt);
    double sum = L.sum([&](int64_t i) { return exp((double)xAt(i) - m); });
    double logSum = log ? ::log(sum) : 0.0;
    bool nan = isNaN(m); // a NaN anywhere in the row: all NaN
    L.forEach([&](int64_t i) {
      double xv = xAt(i);
      double v = nan ? (double)NAN : log ? xv - m - logSum : exp(xv - m) / sum;
      stF(y.data, y.dtype, yb + i * ys, (float)v);
    });
  }
};

struct SoftmaxGradF {
  View y, dy, dx;
  Rows rows;
  int32_t log;
  HD void operator()(int64_t r, int lane, int lanes) const {
    int64_t len = y.shape[rows.axis];
    int64_t yb = rows.base(r, y.strides), gb = rows.base(r, dy.strides),
            xb = rows.base(r, dx.strides);
    int64_t ys = y.strides[rows.axis], gs = dy.strides[rows.axis], xs = dx.strides[rows.axis];
    RowLanes L{lane, lanes, len};
    double dot = L.sum([&](int64_t i) {
      double g = ldF(dy.data, dy.dtype, gb + i * gs);
      return log ? g : g * ldF(y.data, y.dtype, yb + i * ys);
    });
    L.forEach([&](int64_t i) {
      double yv = ldF(y.data, y.dtype, yb + i * ys);
      double g = ldF(dy.data, dy.dtype, gb + i * gs);
      double v = log ? g - exp(yv) * dot : yv * (g - dot);
      stF(dx.data, dx.dtype, xb + i * xs, (float)v);
    });
  }
};

/// Layer norm over the trailing `cols` elements of each of `rows` rows (x, y
/// contiguous); scale / bias seen with the trailing shape (broadcast views).
struct LayerNormF {
  View x, y, scale, bias;
  float *mean, *invStd;
  int64_t cols;
  float eps;
  int32_t hasBias;
  HD void operator()(int64_t r, int lane, int lanes) const {
    RowLanes L{lane, lanes, cols};
    auto xAt = [&](int64_t c) { return (double)ldF(x.data, x.dtype, r * cols + c); };
    double mu = L.sum(xAt) / (double)cols;
    double q = L.sum([&](int64_t c) {
      double d = xAt(c) - mu;
      return d * d;
    });
    double rstd = 1.0 / sqrt(q / (double)cols + (double)eps);
    L.forEach([&](int64_t c) {
      double sc = ldF(scale.data, scale.dtype, scale.at(c));
      double bi = hasBias ? (double)ldF(bias.data, bias.dtype, bias.at(c)) : 0.0;
      stF(y.data, y.dtype, r * cols + c, (float)((xAt(c) - mu) * rstd * sc + bi));
    });
    if (mean && L.leader())
      mean[r] = (float)mu;
    if (invStd && L.leader())
      invStd[r] = (float)rstd;
  }
};

struct LayerNormGradDxF {
  View x, scale, dy, dx;
  const float *mean, *invStd;
  int64_t cols;
  HD void operator()(int64_t r, int lane, int lanes) const {
    RowLanes L{lane, lanes, cols};
    double mu = mean[r], rstd = invStd[r];
    auto xh = [&](int64_t c) { return ((double)ldF(x.data, x.dtype, r * cols + c) - mu) * rstd; };
    auto dxh = [&](int64_t c) {
      return (double)ldF(dy.data, dy.dtype, r * cols + c) *
             (double)ldF(scale.data, scale.dtype, scale.at(c));
    };
    double m1 = L.sum(dxh) / (double)cols;
    double m2 = L.sum([&](int64_t c) { return dxh(c) * xh(c); }) / (double)cols;
    L.forEach([&](int64_t c) {
      stF(dx.data, dx.dtype, r * cols + c, (float)(rstd * (dxh(c) - m1 - xh(c) * m2)));
    });
  }
};

/// dscale / dbias per column (the scale covers the trailing dims one to one).
struct LayerNormGradParamF {
  View x, dy, dscale, dbias;
  const float *mean, *invStd;
  int64_t rows, cols;
  // Split over the rows: index = c * chunks + part, sums into partial[2 *
  // index + {0, 1}]; LayerNormGradParamFinishF adds the parts in order.
  double *partial;
  int64_t chunks, chunk;
  // Each slot's elements one dense run from its base (denseRun): read in
  // order, aligned groups of kVec with 16-byte loads.
  bool run;
  HD void operator()(int64_t idx) const {
    int64_t c = partial ? idx / chunks : idx;
    int64_t r0 = partial ? (idx % chunks) * chunk : 0;
    int64_t r1 = partial ? (r0 + chunk < rows ? r0 + chunk : rows) : rows;
    double gs = 0.0, gb = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
      double g = ldF(dy.data, dy.dtype, r * cols + c);
      double xh =
          ((double)ldF(x.data, x.dtype, r * cols + c) - (double)mean[r]) * (double)invStd[r];
      gs += g * xh;
      gb += g;
    }
    if (partial) {
      partial[2 * idx] = gs;
      partial[2 * idx + 1] = gb;
      return;
    }
    if (dscale.data)
      stF(dscale.data, dscale.dtype, c, (float)gs);
    if (dbias.data)
      stF(dbias.data, dbias.dtype, c, (float)gb);
  }
};

struct LayerNormGradParamFinishF {
  View dscale, dbias;
  const double *partial;
  int64_t chunks;
  HD void operator()(int64_t c) const {
    double gs = 0.0, gb = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      gs += partial[2 * (c * chunks + k)];
      gb += partial[2 * (c * chunks + k) + 1];
    }
    if (dscale.data)
      stF(dscale.data, dscale.dtype, c, (float)gs);
    if (dbias.data)
      stF(dbias.data, dbias.dtype, c, (float)gb);
  }
};

/// Scores [N, C, inner...], labels [N, inner...]: per sample s = b * inner +
/// i, the class and weight (0 for an ignored sample).
struct LossCommon {
  View labels, weights; // weights.data null: none
  int64_t n, c, inner;
  int32_t hasIgnore;
  int64_t ignore;
  DeviceError *err;
  HD bool sample(int64_t s, int64_t &cls, double &w) const {
    cls = ldI(labels.data, labels.dtype, s);
    w = 0.0;
    if (hasIgnore && cls == ignore)
      return true;
    if (cls < 0 || cls >= c) {
      recordError(err, ERR_LABEL, cls, s, c);
      return false;
    }
    w = weights.data ? (double)ldF(weights.data, weights.dtype, cls) : 1.0;
    return true;
  }
};

/// Per-sample loss (-w * logp[label]) and weight into scratch (double).
struct NllSampleF {
  LossCommon lc;
  View logp;
  double *loss, *weight;
  HD void operator()(int64_t s) const {
    int64_t cls;
    double w;
    lc.sample(s, cls, w);
    int64_t b = s / lc.inner, i = s % lc.inner;
    loss[s] =
        w == 0.0 ? 0.0 : -w * (double)ldF(logp.data, logp.dtype, (b * lc.c + cls) * lc.inner + i);
    weight[s] = w;
  }
};

/// The reduction of the per-sample losses (one index: in sample order).
struct NllReduceF {
  const double *loss, *weight;
  int64_t samples;
  int32_t reduction;
  View out;
  double *wsumOut; // the weight sum, for the gradient (may be null)
  HD void operator()(int64_t) const {
    double total = 0.0, wsum = 0.0;
    for (int64_t s = 0; s < samples; ++s) {
      total += loss[s];
      wsum += weight[s];
    }
    if (reduction == AMPRT_REDUCTION_SUM)
      stF(out.data, out.dtype, 0, (float)total);
    else if (reduction == AMPRT_REDUCTION_MEAN)
      stF(out.data, out.dtype, 0, (float)(total / wsum));
    if (wsumOut)
      *wsumOut = wsum;
  }
};

struct NllStoreNoneF {
  const double *loss;
  View out;
  HD void operator()(int64_t s) const { stF(out.data, out.dtype, s, (float)loss[s]); }
};

/// The sum of the weights of all samples (one index).
struct WeightSumF {
  LossCommon lc;
  double *wsum;
  HD void operator()(int64_t) const {
    double t = 0.0;
    for (int64_t s = 0; s < lc.n * lc.inner; ++s) {
      int64_t cls;
      double w;
      lc.sample(s, cls, w);
      t += w;
    }
    *wsum = t;
  }
};

/// dscores (softmax cross entropy) or dinput (nll) per element.
struct LossGradF {
  LossCommon lc;
  View logp, dloss, dout;
  const double *wsum;
  int32_t reduction, softmax;
  HD void operator()(int64_t o) const {
    int64_t i = o % lc.inner, ch = (o / lc.inner) % lc.c, b = o / (lc.inner * lc.c);
    int64_t s = b * lc.inner + i, cls;
    double w;
    if (!lc.sample(s, cls, w)) {
      stF(dout.data, dout.dtype, o, 0.0f);
      return;
    }
    double g;
    if (reduction == AMPRT_REDUCTION_NONE) {
      g = w * (double)ldF(dloss.data, dloss.dtype, s);
    } else {
      double d = ldF(dloss.data, dloss.dtype, 0);
      if (reduction == AMPRT_REDUCTION_MEAN)
        d /= *wsum;
      g = w * d;
    }
    if (softmax) {
      double p = exp((double)ldF(logp.data, logp.dtype, o));
      stF(dout.data, dout.dtype, o, (float)(g * (p - (ch == cls ? 1.0 : 0.0))));
    } else {
      stF(dout.data, dout.dtype, o, ch == cls ? (float)-g : 0.0f);
    }
  }
};

/// reduce_max_grad: per output slot, the number of maxima (pass 1); then per
/// element of x its share of dy (pass 2).
struct MaxCountF {
  View x, y;
  bool reduced[AMPRT_MAX_RANK];
  int64_t count;
  float *counts; // per slot (dense in y's shape)
  HD void operator()(int64_t slot) const {
    int64_t rem = slot, base = 0, yo = 0;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      int64_t c = rem % y.shape[d];
      rem /= y.shape[d];
      base += c * x.strides[d];
      yo += c * y.strides[d];
    }
    float m = ldF(y.data, y.dtype, yo);
    int64_t hits = 0;
    for (int64_t r = 0; r < count; ++r) {
      int64_t off = base, q = r;
      for (int32_t d = x.rank - 1; d >= 0; --d)
        if (reduced[d]) {
          off += (q % x.shape[d]) * x.strides[d];
          q /= x.shape[d];
        }
      hits += ldF(x.data, x.dtype, off) == m;
    }
    counts[slot] = (float)hits;
  }
};

struct MaxGradF {
  View x, y, dy, dx;
  bool reduced[AMPRT_MAX_RANK];
  const float *counts;
  HD void operator()(int64_t i) const {
    int64_t rem = i, slot = 0, mul = 1, yo = 0, go = 0;
    int64_t c[AMPRT_MAX_RANK];
    for (int32_t d = x.rank - 1; d >= 0; --d) {
      c[d] = rem % x.shape[d];
      rem /= x.shape[d];
    }
    for (int32_t d = x.rank - 1; d >= 0; --d) {
      int64_t k = reduced[d] ? 0 : c[d];
      slot += k * mul;
      mul *= y.shape[d];
      yo += k * y.strides[d];
      go += k * dy.strides[d];
    }
    float xv = ldF(x.data, x.dtype, x.at(i));
    bool hit = xv == ldF(y.data, y.dtype, yo);
    stF(dx.data, dx.dtype, dx.at(i), hit ? ldF(dy.data, dy.dtype, go) / counts[slot] : 0.0f);
  }
};

//--- The executor ------------------------------------------------------------------

amprt_status reduceMask(const amprt_tensor &x, const amprt_tensor &y, bool *reduced, int64_t &count,
                        const char *what) {
  if (x.rank != y.rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: ranks differ", what);
  count = 1;
  for (int32_t i = 0; i < AMPRT_MAX_RANK; ++i)
    reduced[i] = false;
  for (int32_t i = 0; i < x.rank; ++i) {
    if (y.shape[i] != x.shape[i] && y.shape[i] != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: shapes do not agree", what);
    reduced[i] = y.shape[i] == 1 && x.shape[i] != 1;
    if (reduced[i])
      count *= x.shape[i];
  }
  return AMPRT_OK;
}

amprt_status loss(Dev &d, const Decoded &dd, bool grad) {
  const auto &t = dd.t;
  LossAttrs la;
  AMPRT_CHECK(lossAttrs(dd, grad, la));
  bool hasW = la.hasWeights, sce = la.softmax;
  int32_t reduction = la.reduction;
  size_t o = la.out;
  // The scores' (or log-probabilities') shape: t[0] (for nll_loss_grad t[0]
  // is the input, shape only).
  const amprt_tensor &scores = t[0], &labels = t[1];
  if (scores.rank < 2 || labels.rank != scores.rank - 1 || !floatType(scores.dtype) ||
      (labels.dtype != AMPRT_I32 && labels.dtype != AMPRT_I64))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): loss shapes / types");
  AMPRT_CHECK(checkContiguous(scores, -1, "the scores"));
  AMPRT_CHECK(checkContiguous(labels, -1, "the labels"));
  LossCommon lc{viewOf(labels), View{}, scores.shape[0], scores.shape[1], 1, la.hasIgnore,
                la.ignore,      d.err};
  for (int32_t i = 2; i < scores.rank; ++i) {
    if (labels.shape[i - 1] != scores.shape[i])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): labels do not match the scores");
    lc.inner *= scores.shape[i];
  }
  if (labels.shape[0] != lc.n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): labels do not match the scores");
  if (hasW) {
    if (numel(t[2]) != lc.c)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): class weights size");
    lc.weights = viewOf(t[2]);
  }
  int64_t samples = lc.n * lc.inner;
  if (!grad) {
    const amprt_tensor &out = t[o];
    View logp = viewOf(scores);
    if (sce) {
      // log_softmax along the classes into log_prob (f32 scratch when it
      // is another type: the loss reads f32, as the CPU runtime).
      const amprt_tensor &lp = t[o + 1];
      AMPRT_CHECK(checkContiguous(lp, -1, "log_prob"));
      int64_t rows;
      Rows r = rowsOf(scores, 1, rows);
      AMPRT_CHECK(eachRow(&d, rows, scores.shape[1], SoftmaxF{viewOf(scores), viewOf(lp), r, 1},
                          "softmax_cross_entropy"));
      logp = viewOf(lp);
      if (lp.dtype != AMPRT_F32) {
        void *tmp;
        AMPRT_CHECK(scratch(d, 2, (size_t)numel(scores) * 4, &tmp));
        amprt_tensor f = amprt_tensor_make(tmp, AMPRT_F32, scores.rank, scores.shape);
        AMPRT_CHECK(eachRow(&d, rows, scores.shape[1], SoftmaxF{viewOf(scores), viewOf(f), r, 1},
                            "softmax_cross_entropy"));
        logp = viewOf(f);
      }
    }
    if (reduction == AMPRT_REDUCTION_NONE ? numel(out) != samples : numel(out) != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): loss output size");
    void *buf;
    AMPRT_CHECK(scratch(d, 1, (size_t)samples * 16 + 16, &buf));
    double *ls = static_cast<double *>(buf), *ws = ls + samples;
    AMPRT_CHECK(each(&d, samples, NllSampleF{lc, logp, ls, ws}, "loss"));
    if (reduction == AMPRT_REDUCTION_NONE)
      return each(&d, samples, NllStoreNoneF{ls, viewOf(out)}, "loss");
    return each(&d, 1, NllReduceF{ls, ws, samples, reduction, viewOf(out), nullptr}, "loss");
  }
  const amprt_tensor &dloss = t[o], &dout = t[o + 1];
  AMPRT_CHECK(checkContiguous(dout, -1, "the loss gradient"));
  if (!sameShape(dout, scores))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): the loss gradient's shape");
  if (reduction == AMPRT_REDUCTION_NONE ? numel(dloss) != samples : numel(dloss) != 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): dloss size");
  void *wsum;
  AMPRT_CHECK(scratch(d, 1, 16, &wsum));
  AMPRT_CHECK(each(&d, 1, WeightSumF{lc, static_cast<double *>(wsum)}, "loss gradient"));
  return each(&d, numel(dout),
              LossGradF{lc, viewOf(scores), viewOf(dloss), viewOf(dout),
                        static_cast<const double *>(wsum), reduction, sce ? 1 : 0},
              "loss gradient");
}

/// A layer norm's x [rows, cols] split at `axis` (x and `other`, y or dy,
/// contiguous of one shape) and its parameter `p` seen over the trailing
/// dims (broadcast).
amprt_status layerNormShape(const amprt_tensor &x, const amprt_tensor &other, int32_t axis,
                            const amprt_tensor &p, const char *what, int64_t &rows, int64_t &cols,
                            View &pv) {
  if (axis < 0 || axis >= x.rank || !sameShape(x, other) || !amprt_tensor_is_contiguous(&x) ||
      !amprt_tensor_is_contiguous(&other))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec (cuda): %s: x %s must be contiguous, of the other operand's shape, "
                "axis %d in range",
                what, shapeString(&x).c_str(), axis);
  rows = cols = 1;
  for (int32_t i = 0; i < x.rank; ++i)
    (i < axis ? rows : cols) *= x.shape[i];
  amprt_tensor trail = x;
  trail.rank = x.rank - axis;
  for (int32_t i = 0; i < trail.rank; ++i)
    trail.shape[i] = x.shape[axis + i];
  return broadcastView(p, trail, what, pv);
}

amprt_status layerNorm(Dev &d, const Decoded &dd) {
  attrs::layer_norm a;
  AMPRT_CHECK(read(dd, a));
  const auto &t = dd.t;
  bool hasBias = a.has_bias != 0;
  size_t o = hasBias ? 3 : 2;
  const amprt_tensor &x = t[0], &y = t[o], &mean = t[o + 1], &inv = t[o + 2];
  int64_t rows, cols;
  View sv, bv{};
  AMPRT_CHECK(layerNormShape(x, y, axisField(a.axis), t[1], "layer_norm (scale)", rows, cols, sv));
  if (hasBias)
    AMPRT_CHECK(layerNormShape(x, y, axisField(a.axis), t[2], "layer_norm (bias)", rows, cols, bv));
  for (const amprt_tensor *st : {&mean, &inv})
    if (st->data && (st->dtype != AMPRT_F32 || numel(*st) != rows))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): layer_norm statistics");
  return eachRow(&d, rows, cols,
                 LayerNormF{viewOf(x), viewOf(y), sv, bv, static_cast<float *>(mean.data),
                            static_cast<float *>(inv.data), cols, (float)a.eps, hasBias},
                 "layer_norm");
}

amprt_status layerNormGrad(Dev &d, const Decoded &dd) {
  attrs::layer_norm_grad a;
  AMPRT_CHECK(read(dd, a));
  const auto &t = dd.t;
  const amprt_tensor &x = t[0], &scale = t[1], &mean = t[2], &inv = t[3], &dy = t[4];
  int64_t rows, cols;
  View sv;
  AMPRT_CHECK(layerNormShape(x, dy, axisField(a.axis), scale, "layer_norm_grad", rows, cols, sv));
  if (mean.dtype != AMPRT_F32 || inv.dtype != AMPRT_F32 || numel(mean) != rows ||
      numel(inv) != rows)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): layer_norm_grad statistics");
  const float *mp = static_cast<const float *>(mean.data),
              *ip = static_cast<const float *>(inv.data);
  if (a.want_dx)
    AMPRT_CHECK(eachRow(&d, rows, cols,
                        LayerNormGradDxF{viewOf(x), sv, viewOf(dy), viewOf(t[5]), mp, ip, cols},
                        "layer_norm_grad"));
  if (a.want_dscale || a.want_dbias) {
    if (numel(scale) != cols || !amprt_tensor_is_contiguous(&scale))
      return unsupported("layer_norm_grad with a broadcast scale");
    View ds = a.want_dscale ? viewOf(t[6]) : View{}, db = a.want_dbias ? viewOf(t[7]) : View{};
    LayerNormGradParamF f{viewOf(x), viewOf(dy), ds, db, mp, ip, rows, cols, nullptr, 1, rows};
    int64_t parts = partsFor(cols, rows);
    if (parts == 1) {
      AMPRT_CHECK(each(&d, cols, f, "layer_norm_grad"));
    } else {
      void *buf;
      f.chunk = (rows + parts - 1) / parts;
      f.chunks = (rows + f.chunk - 1) / f.chunk;
      AMPRT_CHECK(scratch(d, 6, (size_t)(cols * f.chunks) * 16, &buf));
      f.partial = static_cast<double *>(buf);
      AMPRT_CHECK(each(&d, cols * f.chunks, f, "layer_norm_grad"));
      AMPRT_CHECK(each(&d, cols, LayerNormGradParamFinishF{ds, db, f.partial, f.chunks},
                       "layer_norm_grad"));
    }
  }
  return AMPRT_OK;
}

/// The reduce opcodes of amprt_exec (exec.cu dispatches them here).
int32_t execReduce(amprt_context *ctx, Dev &d, Decoded &dd) {
  (void)ctx;
  auto &t = dd.t;
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_REDUCE: {
    attrs::reduce a;
    AMPRT_CHECK(read(dd, a));
    // A channel-blocked input (a mean over H, W) is plain NCHW on this
    // device (see conv).
    const amprt_tensor &x = t[0], &y = t[1];
    // An f16 / bf16 x may write an f32 y (the f32 result, unrounded).
    bool wideY = (x.dtype == AMPRT_F16 || x.dtype == AMPRT_BF16) && y.dtype == AMPRT_F32;
    if (x.rank != y.rank || (x.dtype != y.dtype && !wideY) || (unsigned)a.op > AMPRT_REDUCE_PROD ||
        (a.op == AMPRT_REDUCE_PROD && !floatType(x.dtype)))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): reduce's operands");
    ReduceF f{viewOf(x), viewOf(y), (int32_t)a.op, {}, 1, nullptr, 1, 0, false};
    for (int64_t i = 0; i < a.naxes; ++i) {
      if (a.axes[i] < 0 || a.axes[i] >= x.rank)
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): reduce axis");
      f.reduced[a.axes[i]] = true;
    }
    for (int32_t i = 0; i < x.rank; ++i) {
      if (y.shape[i] != (f.reduced[i] ? 1 : x.shape[i]))
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): reduce's y shape");
      if (f.reduced[i])
        f.count *= x.shape[i];
    }
    f.run = d.vec && denseRun(f.x, f.reduced);
    int64_t parts = partsFor(numel(y), f.count);
    if (parts == 1)
      return each(&d, numel(y), f, "reduce");
    void *buf;
    AMPRT_CHECK(scratch(d, 6, (size_t)(numel(y) * parts) * 8, &buf));
    f.partial = static_cast<double *>(buf);
    f.chunks = parts;
    f.chunk = (f.count + parts - 1) / parts;
    f.chunks = (f.count + f.chunk - 1) / f.chunk;
    AMPRT_CHECK(each(&d, numel(y) * f.chunks, f, "reduce"));
    return each(&d, numel(y), ReduceFinishF{viewOf(y), f.op, f.count, f.chunks, f.partial},
                "reduce");
  }
  case AMPRT_OP_REDUCE_MAX_GRAD: {
    attrs::reduce_max_grad a;
    AMPRT_CHECK(read(dd, a));
    const amprt_tensor &x = t[0], &y = t[1], &dy = t[2], &dx = t[3];
    if (!sameShape(x, dx) || !sameShape(y, dy))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): reduce_max_grad shapes");
    MaxCountF mc{viewOf(x), viewOf(y), {}, 1, nullptr};
    AMPRT_CHECK(reduceMask(x, y, mc.reduced, mc.count, "reduce_max_grad"));
    void *counts;
    AMPRT_CHECK(scratch(d, 0, (size_t)numel(y) * 4, &counts));
    mc.counts = static_cast<float *>(counts);
    AMPRT_CHECK(each(&d, numel(y), mc, "reduce_max_grad"));
    MaxGradF mg{viewOf(x), viewOf(y), viewOf(dy), viewOf(dx), {}, mc.counts};
    std::memcpy(mg.reduced, mc.reduced, sizeof mg.reduced);
    return each(&d, numel(x), mg, "reduce_max_grad");
  }
  case AMPRT_OP_SOFTMAX: {
    attrs::softmax a;
    AMPRT_CHECK(read(dd, a));
    int32_t axis = axisField(a.axis);
    if (!sameShape(t[0], t[1]) || axis < 0 || axis >= t[0].rank || !floatType(t[0].dtype) ||
        !floatType(t[1].dtype))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): softmax's operands");
    int64_t rows;
    Rows r = rowsOf(t[0], axis, rows);
    return eachRow(&d, rows, t[0].shape[r.axis],
                   SoftmaxF{viewOf(t[0]), viewOf(t[1]), r, (int32_t)a.log}, "softmax");
  }
  case AMPRT_OP_SOFTMAX_GRAD: {
    attrs::softmax_grad a;
    AMPRT_CHECK(read(dd, a));
    int32_t axis = axisField(a.axis);
    if (!sameShape(t[0], t[1]) || !sameShape(t[0], t[2]) || axis < 0 || axis >= t[0].rank)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): softmax_grad's operands");
    int64_t rows;
    Rows r = rowsOf(t[0], axis, rows);
    return eachRow(&d, rows, t[0].shape[r.axis],
                   SoftmaxGradF{viewOf(t[0]), viewOf(t[1]), viewOf(t[2]), r, (int32_t)a.log},
                   "softmax_grad");
  }
  case AMPRT_OP_LAYER_NORM:
    return layerNorm(d, dd);
  case AMPRT_OP_LAYER_NORM_GRAD:
    return layerNormGrad(d, dd);
  case AMPRT_OP_SOFTMAX_CROSS_ENTROPY:
  case AMPRT_OP_NLL_LOSS:
    return loss(d, dd, false);
  case AMPRT_OP_SOFTMAX_CROSS_ENTROPY_GRAD:
  case AMPRT_OP_NLL_LOSS_GRAD:
    return loss(d, dd, true);
  default:
    break;
  }
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec (cuda): opcode %lld is not one of the reduce ops", (long long)dd.opcode);
}

} // namespace amprt::cuda
