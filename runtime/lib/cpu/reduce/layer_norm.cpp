//===- layer_norm.cpp - layer normalisation and its gradient ----------------===//
//
// These compute in f32 or wider (sums in double) whatever the element
// type, and round once on store: they are the ops AMP keeps in fp32.
//
//===----------------------------------------------------------------------===//

#include "cpu/reduce/reduce.h"

#include "common/check.h"
#include "common/convert.h"
#include "common/convert_avx2.h"
#include "common/convert_bits.h"
#include "cpu/elementwise/elementwise.h"
#include "host/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace amprt;

namespace {

/// Rows x normalized-size view of a contiguous tensor split at `axis`.
amprt_status splitAt(const amprt_tensor *x, int32_t axis, const char *kernel, int64_t &rows,
                     int64_t &cols) {
  if (!amprt_tensor_is_contiguous(x))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: x must be contiguous", kernel);
  if (axis < 0 || axis >= x->rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: axis %d out of range for rank %d", kernel, axis,
                x->rank);
  rows = cols = 1;
  for (int32_t d = 0; d < x->rank; ++d)
    (d < axis ? rows : cols) *= x->shape[d];
  return AMPRT_OK;
}

/// Offsets of a parameter broadcast over the normalized dims x[axis:].
amprt_status paramOffsets(const amprt_tensor *x, int32_t axis, const amprt_tensor *p,
                          const char *what, std::vector<int64_t> &out) {
  AMPRT_CHECK(checkFloat(p, what));
  int32_t nrank = x->rank - axis;
  int64_t s[1][AMPRT_MAX_RANK];
  AMPRT_CHECK(broadcastStrides(p, nrank, x->shape + axis, s[0], what));
  out.clear();
  forEach<1>(nrank, x->shape + axis, s, [&](const int64_t *o) { out.push_back(o[0]); });
  return AMPRT_OK;
}

} // namespace

namespace {
/// One row of layer norm: statistics in double (partial sums), then
/// (v - mu) * rstd * scale + bias in double, rounded once.
AMPRT_CLONES void layerNormRow(const float *v, float *yr, int64_t cols, float epsilon,
                               const double *sc, const double *bi, double &mu, double &rstd) {
  mu = sumF32(v, cols) / cols;
  double var = sumSqDevF32(v, cols, mu) / cols;
  rstd = 1.0 / std::sqrt(var + (double)epsilon);
  for (int64_t c = 0; c < cols; ++c)
    yr[c] = (float)(((double)v[c] - mu) * rstd * sc[c] + bi[c]);
}

/// One row of layer norm's gradient with the scale laid along the row
/// (offset c for column c, the common case): xhat, dxhat = dy * scale and
/// the row's dscale / dbias terms in one vector loop, then m1 = mean of
/// dxhat and m2 = mean of dxhat * xhat with four partial sums each.
AMPRT_CLONES void layerNormGradRow(const float *x, const float *g, const double *sc, double mu,
                                   double rstd, int64_t cols, double *xhat, double *dxhat,
                                   double *gscale, double *gbias, double &m1, double &m2) {
  for (int64_t c = 0; c < cols; ++c) {
    double gv = g[c], xh = ((double)x[c] - mu) * rstd;
    xhat[c] = xh;
    dxhat[c] = gv * sc[c];
    gscale[c] += gv * xh;
    gbias[c] += gv;
  }
  double a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 4 <= cols; c += 4)
    for (int j = 0; j < 4; ++j) {
      a[j] += dxhat[c + j];
      b[j] += dxhat[c + j] * xhat[c + j];
    }
  for (; c < cols; ++c) {
    a[c & 3] += dxhat[c];
    b[c & 3] += dxhat[c] * xhat[c];
  }
  m1 = ((a[0] + a[1]) + (a[2] + a[3])) / cols;
  m2 = ((b[0] + b[1]) + (b[2] + b[3])) / cols;
}

/// dx = rstd * (dxhat - m1 - xhat * m2) over a row, rounded once to f32.
AMPRT_CLONES void layerNormDxRow(const double *xhat, const double *dxhat, double m1, double m2,
                                 double rstd, float *out, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c)
    out[c] = (float)(rstd * (dxhat[c] - m1 - xhat[c] * m2));
}
} // namespace

extern "C" amprt_status amprt_layer_norm(amprt_context *, const amprt_tensor *x,
                                         const amprt_tensor *scale, const amprt_tensor *bias,
                                         int32_t axis, float epsilon, amprt_tensor *y,
                                         amprt_tensor *mean, amprt_tensor *inv_std_dev) {
  const char *k = "amprt_layer_norm";
  AMPRT_CHECK(checkFloat(x, "amprt_layer_norm: x"));
  AMPRT_CHECK(checkFloat(y, "amprt_layer_norm: y"));
  if (!sameShape(x, y) || !amprt_tensor_is_contiguous(y))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: y must be contiguous with x's shape", k);
  int64_t rows = 0, cols = 0;
  AMPRT_CHECK(splitAt(x, axis, k, rows, cols));
  std::vector<int64_t> so, bo;
  AMPRT_CHECK(paramOffsets(x, axis, scale, "amprt_layer_norm: scale", so));
  if (bias)
    AMPRT_CHECK(paramOffsets(x, axis, bias, "amprt_layer_norm: bias", bo));
  for (amprt_tensor *st : {mean, inv_std_dev})
    if (st && (st->dtype != AMPRT_F32 || amprt_tensor_numel(st) != rows ||
               !amprt_tensor_is_contiguous(st)))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "%s: mean / inv_std_dev must be contiguous f32 with %lld "
                  "elements",
                  k, (long long)rows);
  // Scale and bias read once; rows of an f32 x read directly.
  std::vector<double> sc(cols), bi(cols, 0.0);
  std::vector<float> out32(y->dtype == AMPRT_F32 ? 0 : cols), row(cols);
  for (int64_t c = 0; c < cols; ++c) {
    sc[c] = loadF(scale->data, scale->dtype, so[c]);
    if (bias)
      bi[c] = loadF(bias->data, bias->dtype, bo[c]);
  }
  const float *xf = x->dtype == AMPRT_F32 && amprt_tensor_is_contiguous(x)
                        ? static_cast<const float *>(x->data)
                        : nullptr;
  if (amprt_tensor_is_contiguous(x)) {
    // Rows independent, on the threads for larger tensors; an f16 / bf16
    // row widened into the thread's buffer (exactly) and an f16 / bf16 y
    // row computed there and rounded once: the f32 computation.
    float *mf = mean ? static_cast<float *>(mean->data) : nullptr;
    float *sf = inv_std_dev ? static_cast<float *>(inv_std_dev->data) : nullptr;
    size_t xs = amprt_dtype_size(x->dtype), ys = amprt_dtype_size(y->dtype);
    parallelFor(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)), 1,
                [&](int64_t r0, int64_t r1) {
                  std::vector<float> in(xf ? 0 : cols), out(y->dtype == AMPRT_F32 ? 0 : cols);
                  for (int64_t r = r0; r < r1; ++r) {
                    const float *v = xf ? xf + r * cols : in.data();
                    if (!xf)
                      (void)amprt_convert(static_cast<const char *>(x->data) + r * cols * xs,
                                          x->dtype, in.data(), AMPRT_F32, (size_t)cols);
                    float *yr = y->dtype == AMPRT_F32 ? static_cast<float *>(y->data) + r * cols
                                                      : out.data();
                    double mu, rstd;
                    layerNormRow(v, yr, cols, epsilon, sc.data(), bi.data(), mu, rstd);
                    if (y->dtype != AMPRT_F32)
                      (void)amprt_convert(yr, AMPRT_F32,
                                          static_cast<char *>(y->data) + r * cols * ys, y->dtype,
                                          (size_t)cols);
                    if (mf)
                      mf[r] = (float)mu;
                    if (sf)
                      sf[r] = (float)rstd;
                  }
                });
    return AMPRT_OK;
  }
  for (int64_t r = 0; r < rows; ++r) {
    // The row in f32 (x's values exactly); statistics in double.
    const float *v = xf ? xf + r * cols : row.data();
    if (!xf)
      for (int64_t c = 0; c < cols; ++c)
        row[c] = loadF(x->data, x->dtype, r * cols + c);
    float *yr = y->dtype == AMPRT_F32 ? static_cast<float *>(y->data) + r * cols : out32.data();
    double mu, rstd;
    layerNormRow(v, yr, cols, epsilon, sc.data(), bi.data(), mu, rstd);
    if (y->dtype != AMPRT_F32)
      amprt_convert(yr, AMPRT_F32, static_cast<char *>(y->data) + r * cols * 2, y->dtype,
                    (size_t)cols);
    if (mean)
      static_cast<float *>(mean->data)[r] = (float)mu;
    if (inv_std_dev)
      static_cast<float *>(inv_std_dev->data)[r] = (float)rstd;
  }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_layer_norm_grad(amprt_context *, const amprt_tensor *x,
                                              const amprt_tensor *scale, const amprt_tensor *mean,
                                              const amprt_tensor *inv_std_dev,
                                              const amprt_tensor *dy, int32_t axis,
                                              amprt_tensor *dx, amprt_tensor *dscale,
                                              amprt_tensor *dbias) {
  const char *k = "amprt_layer_norm_grad";
  AMPRT_CHECK(checkFloat(x, "amprt_layer_norm_grad: x"));
  AMPRT_CHECK(checkFloat(dy, "amprt_layer_norm_grad: dy"));
  int64_t rows = 0, cols = 0;
  AMPRT_CHECK(splitAt(x, axis, k, rows, cols));
  if (!sameShape(x, dy) || !amprt_tensor_is_contiguous(dy))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: dy must be contiguous with x's shape", k);
  std::vector<int64_t> so;
  AMPRT_CHECK(paramOffsets(x, axis, scale, "amprt_layer_norm_grad: scale", so));
  if (mean->dtype != AMPRT_F32 || inv_std_dev->dtype != AMPRT_F32 ||
      amprt_tensor_numel(mean) != rows || amprt_tensor_numel(inv_std_dev) != rows)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: statistics must be f32 [%lld]", k,
                (long long)rows);
  int64_t np = amprt_tensor_numel(scale);
  std::vector<double> sc(cols);
  for (int64_t c = 0; c < cols; ++c)
    sc[c] = loadF(scale->data, scale->dtype, so[c]);
  // x and dy as f32 rows (f16 / bf16 widened once, exactly).
  amprt_tensor x32 = asF32(x, 0), dy32 = asF32(dy, 1);
  if (!amprt_tensor_is_contiguous(&x32)) {
    amprt_tensor t = scratchF32(x, 0);
    AMPRT_CHECK(amprt_cast(nullptr, x, &t));
    x32 = t;
  }
  const float *xf = static_cast<const float *>(x32.data);
  const float *gf = static_cast<const float *>(dy32.data);
  // Rows in at most 64 pieces of fixed boundaries (they depend on the row
  // count only, so the results do not depend on the threads): each piece's
  // rows give their dx and partial sums of dscale / dbias, in double; the
  // partials are added in piece order.
  int64_t per = std::max<int64_t>(16, (rows + 63) / 64);
  int64_t pieces = rows ? (rows + per - 1) / per : 0;
  std::vector<double> partScale(pieces * np, 0.0), partBias(pieces * np, 0.0);
  bool alongRow = np == cols;
  for (int64_t c = 0; alongRow && c < cols; ++c)
    alongRow = so[c] == c;
  parallelFor(pieces, 1, 1, [&](int64_t p0, int64_t p1) {
    std::vector<double> xhat(cols), dxhat(cols);
    std::vector<float> out(dx && dx->dtype != AMPRT_F32 ? cols : 0);
    for (int64_t piece = p0; piece < p1; ++piece) {
      double *gscale = partScale.data() + piece * np, *gbias = partBias.data() + piece * np;
      for (int64_t r = piece * per; r < std::min(rows, (piece + 1) * per); ++r) {
        double mu = static_cast<const float *>(mean->data)[r];
        double rstd = static_cast<const float *>(inv_std_dev->data)[r];
        double m1 = 0.0, m2 = 0.0;
        if (alongRow) {
          // The vector form (the scale along the row: so[c] == c).
          layerNormGradRow(xf + r * cols, gf + r * cols, sc.data(), mu, rstd, cols, xhat.data(),
                           dxhat.data(), gscale, gbias, m1, m2);
          if (!dx)
            continue;
          float *o =
              dx->dtype == AMPRT_F32 ? static_cast<float *>(dx->data) + r * cols : out.data();
          layerNormDxRow(xhat.data(), dxhat.data(), m1, m2, rstd, o, cols);
          if (dx->dtype != AMPRT_F32)
            (void)amprt_convert(o, AMPRT_F32,
                                static_cast<char *>(dx->data) +
                                    r * cols * amprt_dtype_size(dx->dtype),
                                dx->dtype, (size_t)cols);
          continue;
        }
        for (int64_t c = 0; c < cols; ++c) {
          double g = gf[r * cols + c];
          xhat[c] = (xf[r * cols + c] - mu) * rstd;
          dxhat[c] = g * sc[c];
          m1 += dxhat[c];
          m2 += dxhat[c] * xhat[c];
          gscale[so[c]] += g * xhat[c];
          gbias[so[c]] += g;
        }
        m1 /= cols;
        m2 /= cols;
        if (!dx)
          continue;
        if (dx->dtype == AMPRT_F32) {
          float *o = static_cast<float *>(dx->data) + r * cols;
          for (int64_t c = 0; c < cols; ++c)
            o[c] = (float)(rstd * (dxhat[c] - m1 - xhat[c] * m2));
        } else {
          for (int64_t c = 0; c < cols; ++c)
            storeF(dx->data, dx->dtype, r * cols + c,
                   (float)(rstd * (dxhat[c] - m1 - xhat[c] * m2)));
        }
      }
    }
  });
  std::vector<double> gscale(np, 0.0), gbias(np, 0.0);
  for (int64_t piece = 0; piece < pieces; ++piece)
    for (int64_t i = 0; i < np; ++i) {
      gscale[i] += partScale[piece * np + i];
      gbias[i] += partBias[piece * np + i];
    }
  // so[] maps a normalized position to the scale's offset; scale is assumed
  // contiguous (its natural layout) for the gradient.
  if (dscale)
    for (int64_t i = 0; i < np; ++i)
      storeF(dscale->data, dscale->dtype, i, (float)gscale[i]);
  if (dbias)
    for (int64_t i = 0; i < np; ++i)
      storeF(dbias->data, dbias->dtype, i, (float)gbias[i]);
  return AMPRT_OK;
}
