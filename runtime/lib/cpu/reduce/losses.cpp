//===- losses.cpp - softmax cross-entropy, NLL and their gradients -------===//
//
// The CPU runtime's losses: per-sample terms and their weighted sums in
// double, the reductions none / sum / mean, ignore_index, the gradients.
//
//===----------------------------------------------------------------------===//
#include "common/check.h"
#include "cpu/elementwise/elementwise.h"
#include "host/threads.h"

#include <algorithm>

#include <limits>
#include <vector>

using namespace amprt;

namespace {

struct LossShape {
  int64_t n, c, inner; // scores [N, C, inner...], labels [N, inner...]
};

amprt_status lossShape(const amprt_tensor *scores, const amprt_tensor *labels,
                       const amprt_tensor *weights, const char *k, LossShape &ls) {
  AMPRT_CHECK(checkFloat(scores, k));
  AMPRT_CHECK(check(labels, k));
  if (labels->dtype != AMPRT_I32 && labels->dtype != AMPRT_I64)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: labels must be i32 or i64", k);
  if (scores->rank < 2 || labels->rank != scores->rank - 1 || !amprt_tensor_is_contiguous(scores) ||
      !amprt_tensor_is_contiguous(labels))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: scores %s / labels %s must be contiguous [N, C, D...] / "
                "[N, D...]",
                k, shapeString(scores).c_str(), shapeString(labels).c_str());
  ls.n = scores->shape[0];
  ls.c = scores->shape[1];
  ls.inner = 1;
  if (labels->shape[0] != ls.n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: labels %s do not match scores %s", k,
                shapeString(labels).c_str(), shapeString(scores).c_str());
  for (int32_t d = 2; d < scores->rank; ++d) {
    if (labels->shape[d - 1] != scores->shape[d])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: labels %s do not match scores %s", k,
                  shapeString(labels).c_str(), shapeString(scores).c_str());
    ls.inner *= scores->shape[d];
  }
  if (weights) {
    AMPRT_CHECK(checkChannel(weights, ls.c, k));
  }
  return AMPRT_OK;
}

/// Per-sample weight of label y (0 for ignored); fails on a bad label.
amprt_status sampleWeight(const amprt_tensor *labels, const amprt_tensor *weights, int has_ignore,
                          int64_t ignore, int64_t i, int64_t c, const char *k, int64_t &cls,
                          double &w) {
  w = 0.0;
  cls = loadI(labels->data, labels->dtype, i);
  if (has_ignore && cls == ignore) {
    w = 0.0;
    return AMPRT_OK;
  }
  if (cls < 0 || cls >= c)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: label %lld at position %lld is outside [0, %lld)",
                k, (long long)cls, (long long)i, (long long)c);
  w = weights ? loadF(weights->data, weights->dtype, cls) : 1.0;
  return AMPRT_OK;
}

amprt_status nllCore(const amprt_tensor *logp, const LossShape &ls, const amprt_tensor *labels,
                     const amprt_tensor *weights, amprt_reduction reduction, int has_ignore,
                     int64_t ignore, amprt_tensor *loss, const char *k) {
  AMPRT_CHECK(checkFloat(loss, k));
  int64_t samples = ls.n * ls.inner;
  if (reduction == AMPRT_REDUCTION_NONE ? amprt_tensor_numel(loss) != samples
                                        : amprt_tensor_numel(loss) != 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: loss has %lld elements, expected %lld", k,
                (long long)amprt_tensor_numel(loss),
                (long long)(reduction == AMPRT_REDUCTION_NONE ? samples : 1));
  double total = 0.0, wsum = 0.0;
  for (int64_t b = 0; b < ls.n; ++b)
    for (int64_t i = 0; i < ls.inner; ++i) {
      int64_t s = b * ls.inner + i, cls = 0;
      double w = 0.0;
      AMPRT_CHECK(sampleWeight(labels, weights, has_ignore, ignore, s, ls.c, k, cls, w));
      double l =
          w == 0.0 ? 0.0 : -w * loadF(logp->data, logp->dtype, (b * ls.c + cls) * ls.inner + i);
      if (reduction == AMPRT_REDUCTION_NONE)
        storeF(loss->data, loss->dtype, s, (float)l);
      total += l;
      wsum += w;
    }
  if (reduction == AMPRT_REDUCTION_SUM)
    storeF(loss->data, loss->dtype, 0, (float)total);
  else if (reduction == AMPRT_REDUCTION_MEAN)
    storeF(loss->data, loss->dtype, 0, (float)(total / wsum));
  return AMPRT_OK;
}

} // namespace

extern "C" amprt_status amprt_softmax_cross_entropy(amprt_context *ctx, const amprt_tensor *scores,
                                                    const amprt_tensor *labels,
                                                    const amprt_tensor *weights,
                                                    amprt_reduction reduction, int has_ignore_index,
                                                    int64_t ignore_index, amprt_tensor *loss,
                                                    amprt_tensor *log_prob) {
  const char *k = "amprt_softmax_cross_entropy";
  LossShape ls;
  AMPRT_CHECK(lossShape(scores, labels, weights, k, ls));
  // log_prob in f32 (or the caller's tensor, which must match the scores).
  std::vector<float> tmp;
  amprt_tensor lp;
  if (log_prob) {
    AMPRT_CHECK(checkFloat(log_prob, k));
    if (!sameShape(scores, log_prob) || !amprt_tensor_is_contiguous(log_prob))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "%s: log_prob must be contiguous "
                  "with the scores' shape",
                  k);
    lp = *log_prob;
  } else {
    tmp.resize(amprt_tensor_numel(scores));
    lp = amprt_tensor_make(tmp.data(), AMPRT_F32, scores->rank, scores->shape);
  }
  // Softmax over C: in the contiguous layout axis 1 has stride `inner`.
  AMPRT_CHECK(amprt_softmax(ctx, scores, 1, 1, &lp));
  // Read the log-probabilities at f32 precision even when log_prob is low:
  // recompute into f32 if the caller's tensor rounds.
  if (log_prob && log_prob->dtype != AMPRT_F32) {
    tmp.resize(amprt_tensor_numel(scores));
    amprt_tensor f = amprt_tensor_make(tmp.data(), AMPRT_F32, scores->rank, scores->shape);
    AMPRT_CHECK(amprt_softmax(ctx, scores, 1, 1, &f));
    return nllCore(&f, ls, labels, weights, reduction, has_ignore_index, ignore_index, loss, k);
  }
  return nllCore(&lp, ls, labels, weights, reduction, has_ignore_index, ignore_index, loss, k);
}

extern "C" amprt_status amprt_nll_loss(amprt_context *, const amprt_tensor *log_prob,
                                       const amprt_tensor *labels, const amprt_tensor *weights,
                                       amprt_reduction reduction, int has_ignore_index,
                                       int64_t ignore_index, amprt_tensor *loss) {
  const char *k = "amprt_nll_loss";
  LossShape ls;
  AMPRT_CHECK(lossShape(log_prob, labels, weights, k, ls));
  return nllCore(log_prob, ls, labels, weights, reduction, has_ignore_index, ignore_index, loss, k);
}

namespace {
/// d(loss)/d(sample) for each sample: dloss scaled by the reduction.
amprt_status lossScale(const LossShape &ls, const amprt_tensor *labels, const amprt_tensor *weights,
                       amprt_reduction reduction, int has_ignore, int64_t ignore,
                       const amprt_tensor *dloss, const char *k, std::vector<double> &g,
                       std::vector<int64_t> &cls) {
  AMPRT_CHECK(checkFloat(dloss, k));
  int64_t samples = ls.n * ls.inner;
  g.assign(samples, 0.0);
  cls.assign(samples, 0);
  double wsum = 0.0;
  std::vector<double> w(samples);
  for (int64_t s = 0; s < samples; ++s) {
    AMPRT_CHECK(sampleWeight(labels, weights, has_ignore, ignore, s, ls.c, k, cls[s], w[s]));
    wsum += w[s];
  }
  if (reduction == AMPRT_REDUCTION_NONE) {
    if (amprt_tensor_numel(dloss) != samples)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: dloss must have %lld elements", k,
                  (long long)samples);
    for (int64_t s = 0; s < samples; ++s)
      g[s] = w[s] * loadF(dloss->data, dloss->dtype, s);
  } else {
    if (amprt_tensor_numel(dloss) != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: dloss must be a scalar", k);
    double d = loadF(dloss->data, dloss->dtype, 0);
    if (reduction == AMPRT_REDUCTION_MEAN)
      d /= wsum;
    for (int64_t s = 0; s < samples; ++s)
      g[s] = w[s] * d;
  }
  return AMPRT_OK;
}
} // namespace

extern "C" amprt_status amprt_softmax_cross_entropy_grad(
    amprt_context *, const amprt_tensor *log_prob, const amprt_tensor *labels,
    const amprt_tensor *weights, amprt_reduction reduction, int has_ignore_index,
    int64_t ignore_index, const amprt_tensor *dloss, amprt_tensor *dscores) {
  const char *k = "amprt_softmax_cross_entropy_grad";
  LossShape ls;
  AMPRT_CHECK(lossShape(log_prob, labels, weights, k, ls));
  AMPRT_CHECK(checkFloat(dscores, k));
  if (!sameShape(log_prob, dscores) || !amprt_tensor_is_contiguous(dscores))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: dscores must match log_prob", k);
  std::vector<double> g;
  std::vector<int64_t> cls;
  AMPRT_CHECK(
      lossScale(ls, labels, weights, reduction, has_ignore_index, ignore_index, dloss, k, g, cls));
  if (log_prob->dtype == AMPRT_F32 && ls.inner == 1 && ls.c > 0) {
    // Rows of classes (a language model's vocabulary: [tokens, 50k]), on
    // the threads: p = exp(log_prob) by the vector expf (<= 2 ulp; f32
    // log_prob is exact as its argument), the target's p - 1 by expm1 in
    // double (no cancellation when p is near 1), times the sample's scale
    // in double, rounded once (to f32, then to a 16-bit dscores).
    const float *lp = static_cast<const float *>(log_prob->data);
    char *out = static_cast<char *>(dscores->data);
    const int64_t ob = (int64_t)amprt_dtype_size(dscores->dtype), c = ls.c;
    parallelFor(ls.n, std::max<int64_t>(1, 16384 / c), 1, [&](int64_t b0, int64_t b1) {
      thread_local std::vector<float> e;
      if ((int64_t)e.size() < c)
        e.resize(c);
      for (int64_t b = b0; b < b1; ++b) {
        const float *row = lp + b * c;
        expF32(row, e.data(), c);
        double gb = g[b];
        for (int64_t ch = 0; ch < c; ++ch)
          e[ch] = (float)(gb * (double)e[ch]);
        if (cls[b] >= 0 && cls[b] < c) // not an ignored sample (its scale is 0)
          e[cls[b]] = (float)(gb * std::expm1((double)row[cls[b]]));
        if (dscores->dtype == AMPRT_F32)
          std::copy(e.data(), e.data() + c, reinterpret_cast<float *>(out) + b * c);
        else
          amprt_convert(e.data(), AMPRT_F32, out + b * c * ob, dscores->dtype, (size_t)c);
      }
    });
    return AMPRT_OK;
  }
  for (int64_t b = 0; b < ls.n; ++b)
    for (int64_t ch = 0; ch < ls.c; ++ch)
      for (int64_t i = 0; i < ls.inner; ++i) {
        int64_t s = b * ls.inner + i, o = (b * ls.c + ch) * ls.inner + i;
        double p = std::exp((double)loadF(log_prob->data, log_prob->dtype, o));
        double v = g[s] * (p - (ch == cls[s] ? 1.0 : 0.0));
        storeF(dscores->data, dscores->dtype, o, (float)v);
      }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_nll_loss_grad(amprt_context *, const amprt_tensor *labels,
                                            const amprt_tensor *weights, amprt_reduction reduction,
                                            int has_ignore_index, int64_t ignore_index,
                                            const amprt_tensor *dloss, amprt_tensor *dinput) {
  const char *k = "amprt_nll_loss_grad";
  LossShape ls;
  AMPRT_CHECK(lossShape(dinput, labels, weights, k, ls));
  std::vector<double> g;
  std::vector<int64_t> cls;
  AMPRT_CHECK(
      lossScale(ls, labels, weights, reduction, has_ignore_index, ignore_index, dloss, k, g, cls));
  for (int64_t b = 0; b < ls.n; ++b)
    for (int64_t ch = 0; ch < ls.c; ++ch)
      for (int64_t i = 0; i < ls.inner; ++i) {
        int64_t s = b * ls.inner + i, o = (b * ls.c + ch) * ls.inner + i;
        storeF(dinput->data, dinput->dtype, o, ch == cls[s] ? (float)-g[s] : 0.0f);
      }
  return AMPRT_OK;
}
