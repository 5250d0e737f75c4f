//===- batch_norm.cu - batch norm -------------------------------------------===//
//
// Per-channel sums in double, in parts combined in one order.
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

constexpr int64_t kBnChunk = 1024;

/// dy[o], or with z: dy[o] * (z[o] > 0 ? 1 : 0) in f32, as the ReLU's
/// gradient (an inf / NaN dy stays visible).
HD inline float maskedDy(const void *dy, int32_t dyt, const void *z, int32_t zt, int64_t o) {
  float d = ldF(dy, dyt, o);
  return z ? d * (ldF(z, zt, o) > 0.0f ? 1.0f : 0.0f) : d;
}

/// Each channel's first value (the recomputed statistics' shift).
struct BnShiftF {
  const void *x;
  int32_t xt;
  int64_t plane, total;
  double *shift;
  HD void operator()(int64_t ch) const { shift[ch] = total ? ldF(x, xt, ch * plane) : 0.0; }
};

/// Per (channel, part): two sums over the part's elements, by mode:
/// 0: x (and 0); 1: (x - mu)^2 (and 0); 2: d = x - mu and d^2 (mu the
/// shift: the channel's first value, as the CPU's recomputed statistics);
/// 3: dy and dy * (x - mu) * invStd, dy masked by z > 0 where z is given
/// (a batch norm followed by a ReLU).
struct BnPartsF {
  const void *x, *dy, *z;
  int32_t xt, dyt, zt, mode;
  int64_t c, plane, total, parts;
  const double *mu, *invStd;
  double *out; // [c * parts][2]
  HD void operator()(int64_t idx) const {
    int64_t ch = idx / parts, e0 = (idx % parts) * kBnChunk;
    int64_t e1 = e0 + kBnChunk < total ? e0 + kBnChunk : total;
    int64_t b = plane ? e0 / plane : 0, i = plane ? e0 % plane : 0;
    double s0 = 0.0, s1 = 0.0, m = mu ? mu[ch] : 0.0, is = invStd ? invStd[ch] : 0.0;
    for (int64_t e = e0; e < e1; ++e) {
      int64_t o = (b * c + ch) * plane + i;
      double v = ldF(x, xt, o);
      if (mode == 0) {
        s0 += v;
      } else if (mode == 1) {
        s0 += (v - m) * (v - m);
      } else if (mode == 2) {
        s0 += v - m;
        s1 += (v - m) * (v - m);
      } else {
        double d = maskedDy(dy, dyt, z, zt, o);
        s0 += d;
        s1 += d * (v - m) * is;
      }
      if (++i == plane) {
        i = 0;
        ++b;
      }
    }
    out[2 * idx] = s0;
    out[2 * idx + 1] = s1;
  }
};

/// Channel ch's parts added in order: sums[0], sums[1].
HD inline void bnSums(const double *part, int64_t parts, int64_t ch, double *sums) {
  sums[0] = sums[1] = 0.0;
  for (int64_t p = 0; p < parts; ++p) {
    sums[0] += part[2 * (ch * parts + p)];
    sums[1] += part[2 * (ch * parts + p) + 1];
  }
}

/// Training, after the parts of x: the mean.
struct BnMeanF {
  const double *part;
  int64_t parts;
  double count;
  double *mu;
  HD void operator()(int64_t ch) const {
    double s[2];
    bnSums(part, parts, ch, s);
    mu[ch] = s[0] / count;
  }
};

/// Batch-norm statistics per channel: the inverse standard deviation used
/// and the running statistics (training: the variance from the parts of
/// (x - mean)^2, the mean already in mu; inference: the given ones).
struct BnStatsF {
  const void *mean, *var;
  int32_t mt, vt, training;
  const double *part;
  int64_t parts;
  double count;
  float eps, momentum;
  double *mu, *invStd;
  void *runMean, *runVar;
  int32_t rmt, rvt;
  HD void operator()(int64_t ch) const {
    double m, v;
    double oldMean = ldF(mean, mt, ch), oldVar = ldF(var, vt, ch);
    if (training) {
      double s[2];
      bnSums(part, parts, ch, s);
      m = mu[ch];
      v = s[0] / count;
      if (runMean)
        stF(runMean, rmt, ch, (float)(momentum * oldMean + (1.0 - momentum) * m));
      if (runVar)
        stF(runVar, rvt, ch, (float)(momentum * oldVar + (1.0 - momentum) * v));
    } else {
      m = oldMean;
      v = oldVar;
      if (runMean)
        stF(runMean, rmt, ch, (float)oldMean);
      if (runVar)
        stF(runVar, rvt, ch, (float)oldVar);
    }
    mu[ch] = m;
    invStd[ch] = 1.0 / sqrt(v + (double)eps);
  }
};

struct BnApplyF {
  const void *x, *scale, *bias;
  void *y;
  int32_t xt, st, bt, yt, relu;
  int64_t c, plane;
  const double *mu, *invStd;
  HD void operator()(int64_t o) const {
    int64_t ch = (o / plane) % c;
    double v = ((double)ldF(x, xt, o) - mu[ch]) * invStd[ch] * (double)ldF(scale, st, ch) +
               (double)ldF(bias, bt, ch);
    float f = (float)v;
    if (relu) // max(f, 0), NaN kept
      f = f > 0.0f || f != f ? f : 0.0f;
    stF(y, yt, o, f);
  }
};

/// The batch-norm gradient's statistics recomputed from x (after the parts
/// of x and x^2; amprt_batch_norm_grad_recompute), rounded to f32 first as
/// on the CPU.
struct BnGradStatsF {
  const double *part;
  int64_t parts;
  double count;
  float eps;
  double *mu, *invStd;
  HD void operator()(int64_t ch) const {
    double s[2];
    bnSums(part, parts, ch, s);
    double dm = s[0] / count, var = s[1] / count - dm * dm; // mu[ch]: the shift
    if (var < 0.0)
      var = 0.0;
    mu[ch] = (float)(mu[ch] + dm);
    invStd[ch] = (float)(1.0 / sqrt(var + (double)eps));
  }
};

/// The gradient's per-channel sums of dy and dy * xhat (after their parts),
/// and dscale / dbias.
struct BnGradSumsF {
  const double *part;
  int64_t parts;
  double *sdy, *sdyx;
  void *dscale, *dbias;
  int32_t dst, dbt;
  HD void operator()(int64_t ch) const {
    double s[2];
    bnSums(part, parts, ch, s);
    sdy[ch] = s[0];
    sdyx[ch] = s[1];
    if (dscale)
      stF(dscale, dst, ch, (float)s[1]);
    if (dbias)
      stF(dbias, dbt, ch, (float)s[0]);
  }
};

struct BnGradDxF {
  const void *x, *dy, *z, *scale;
  void *dx;
  int32_t xt, dyt, zt, st, dxt;
  int64_t c, plane, n;
  const double *mu, *invStd, *sdy, *sdyx;
  HD void operator()(int64_t o) const {
    int64_t ch = (o / plane) % c;
    double m = (double)(n * plane), is = invStd[ch];
    double xhat = ((double)ldF(x, xt, o) - mu[ch]) * is, d = maskedDy(dy, dyt, z, zt, o);
    double g = ldF(scale, st, ch);
    stF(dx, dxt, o, (float)(g * is / m * (m * d - sdy[ch] - xhat * sdyx[ch])));
  }
};

amprt_status checkChannels(const amprt_tensor &t, int64_t c, const char *what) {
  if (!floatType(t.dtype) || numel(t) != c || !amprt_tensor_is_contiguous(&t))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s must be a float [%lld]", what,
                (long long)c);
  return AMPRT_OK;
}

amprt_status batchNorm(Dev &d, const Decoded &dd) {
  attrs::batch_norm a;
  AMPRT_CHECK(read(dd, a));
  int64_t flags = a.flags.value_or(0);
  if (flags & ~(int64_t)AMPRT_BN_RELU)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): batch_norm: unknown flags %lld",
                (long long)flags);
  const auto &t = dd.t;
  const amprt_tensor &x = t[0], &y = t[5];
  if (x.rank < 2 || !sameShape(x, y) || !amprt_tensor_is_contiguous(&x) ||
      !amprt_tensor_is_contiguous(&y) || !floatType(x.dtype) || !floatType(y.dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): batch_norm's x and y");
  int64_t n = x.shape[0], c = x.shape[1], plane = c ? numel(x) / (n * c ? n * c : 1) : 0;
  for (size_t k : {1, 2, 3, 4})
    AMPRT_CHECK(checkChannels(t[k], c, "a batch_norm parameter"));
  for (size_t k : {6, 7})
    if (t[k].data)
      AMPRT_CHECK(checkChannels(t[k], c, "a running statistic"));
  int64_t total = n * plane, parts = std::max<int64_t>(1, (total + kBnChunk - 1) / kBnChunk);
  bool training = a.training != 0;
  void *buf;
  AMPRT_CHECK(scratch(d, 5, (size_t)c * 16 + (training ? (size_t)(c * parts) * 16 : 0) + 16, &buf));
  double *mu = static_cast<double *>(buf), *is = mu + c, *part = is + c;
  if (training) {
    AMPRT_CHECK(each(&d, c * parts,
                     BnPartsF{x.data, nullptr, nullptr, x.dtype, AMPRT_F32, AMPRT_F32, 0, c, plane,
                              total, parts, nullptr, nullptr, part},
                     "batch_norm"));
    AMPRT_CHECK(each(&d, c, BnMeanF{part, parts, (double)total, mu}, "batch_norm"));
    AMPRT_CHECK(each(&d, c * parts,
                     BnPartsF{x.data, nullptr, nullptr, x.dtype, AMPRT_F32, AMPRT_F32, 1, c, plane,
                              total, parts, mu, nullptr, part},
                     "batch_norm"));
  }
  AMPRT_CHECK(each(&d, c,
                   BnStatsF{t[3].data, t[4].data, t[3].dtype, t[4].dtype, training ? 1 : 0, part,
                            parts, (double)total, (float)a.eps, (float)a.momentum, mu, is,
                            t[6].data, t[7].data, t[6].dtype, t[7].dtype},
                   "batch_norm"));
  return each(&d, numel(x),
              BnApplyF{x.data, t[1].data, t[2].data, y.data, x.dtype, t[1].dtype, t[2].dtype,
                       y.dtype, (flags & AMPRT_BN_RELU) ? 1 : 0, c, plane, mu, is},
              "batch_norm");
}

amprt_status batchNormGrad(Dev &d, const Decoded &dd) {
  attrs::batch_norm_grad a;
  AMPRT_CHECK(read(dd, a));
  int64_t flags = a.flags.value_or(0);
  if (flags & ~(int64_t)AMPRT_BN_RELU)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec (cuda): batch_norm_grad: unknown flags %lld", (long long)flags);
  const auto &t = dd.t;
  const amprt_tensor &x = t[0], &scale = t[1], &dy = t[2];
  if (x.rank < 2 || !sameShape(x, dy) || !amprt_tensor_is_contiguous(&x) ||
      !amprt_tensor_is_contiguous(&dy) || !floatType(x.dtype) || !floatType(dy.dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): batch_norm_grad's x and dy");
  // With AMPRT_BN_RELU: dy is the ReLU output's gradient, masked by z.
  const amprt_tensor *z = (flags & AMPRT_BN_RELU) ? &t[6] : nullptr;
  if (z && (!sameShape(x, *z) || !amprt_tensor_is_contiguous(z) || !floatType(z->dtype)))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): batch_norm_grad's z");
  const void *zd = z ? z->data : nullptr;
  int32_t zt = z ? z->dtype : AMPRT_F32;
  int64_t n = x.shape[0], c = x.shape[1], plane = n * c ? numel(x) / (n * c) : 0;
  AMPRT_CHECK(checkChannels(scale, c, "batch_norm_grad's scale"));
  int64_t total = n * plane, parts = std::max<int64_t>(1, (total + kBnChunk - 1) / kBnChunk);
  void *buf;
  AMPRT_CHECK(scratch(d, 5, (size_t)c * 32 + (size_t)(c * parts) * 16 + 32, &buf));
  double *mu = static_cast<double *>(buf), *is = mu + c, *sdy = is + c, *sdyx = sdy + c,
         *part = sdyx + c;
  AMPRT_CHECK(
      each(&d, c, BnShiftF{x.data, x.dtype, plane, total, mu}, "batch_norm_grad")); // the shift
  AMPRT_CHECK(each(&d, c * parts,
                   BnPartsF{x.data, nullptr, nullptr, x.dtype, AMPRT_F32, AMPRT_F32, 2, c, plane,
                            total, parts, mu, nullptr, part},
                   "batch_norm_grad"));
  AMPRT_CHECK(each(&d, c, BnGradStatsF{part, parts, (double)total, (float)a.eps, mu, is},
                   "batch_norm_grad"));
  AMPRT_CHECK(each(
      &d, c * parts,
      BnPartsF{x.data, dy.data, zd, x.dtype, dy.dtype, zt, 3, c, plane, total, parts, mu, is, part},
      "batch_norm_grad"));
  AMPRT_CHECK(each(&d, c,
                   BnGradSumsF{part, parts, sdy, sdyx, a.want_dscale ? t[4].data : nullptr,
                               a.want_dbias ? t[5].data : nullptr, t[4].dtype, t[5].dtype},
                   "batch_norm_grad"));
  if (!a.want_dx)
    return AMPRT_OK;
  return each(&d, numel(x),
              BnGradDxF{x.data, dy.data, zd, scale.data, t[3].data, x.dtype, dy.dtype, zt,
                        scale.dtype, t[3].dtype, c, plane, n, mu, is, sdy, sdyx},
              "batch_norm_grad");
}

/// The batchnorm opcodes of amprt_exec (exec.cu dispatches them here).
int32_t execBatchNorm(amprt_context *ctx, Dev &d, Decoded &dd) {
  (void)ctx;
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_BATCH_NORM:
    return batchNorm(d, dd);
  case AMPRT_OP_BATCH_NORM_GRAD:
    return batchNormGrad(d, dd);
  default:
    break;
  }
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec (cuda): opcode %lld is not one of the batchnorm ops",
              (long long)dd.opcode);
}

} // namespace amprt::cuda
