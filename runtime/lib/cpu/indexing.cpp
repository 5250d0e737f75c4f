//===- indexing.cpp - gathers, dropout, random, arg-reduce, top-k, cumsum ===//
//
// The data-dependent ops of the CPU runtime: gathers and their gradients,
// dropout and the random generators, reduce_to, arg max / min, top-k,
// cumulative sums and reduce_max's gradient.
//
//===----------------------------------------------------------------------===//

#include "common/check.h"
#include "common/scalar_ops.h"
#include "cpu/elementwise/elementwise.h"
#include "host/context.h"
#include "host/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <vector>

using namespace amprt;
using namespace amprt::ops;

namespace {
/// The index values of `indices` in row-major order, range-checked against
/// [-limit, limit) and made non-negative.
/// The products of t's dims before and after `axis` (a gather's outer
/// positions and the block it copies per index).
void aroundAxis(const amprt_tensor *t, int32_t axis, int64_t &outer, int64_t &inner) {
  outer = inner = 1;
  for (int32_t d = 0; d < axis; ++d)
    outer *= t->shape[d];
  for (int32_t d = axis + 1; d < t->rank; ++d)
    inner *= t->shape[d];
}

amprt_status indexList(const amprt_tensor *indices, int64_t limit, const char *k,
                       std::vector<int64_t> &out) {
  int64_t s[1][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < indices->rank; ++d)
    s[0][d] = indices->strides[d];
  out.clear();
  out.reserve(amprt_tensor_numel(indices));
  bool bad = false;
  int64_t badValue = 0;
  forEach<1>(indices->rank, indices->shape, s, [&](const int64_t *o) {
    int64_t v = loadI(indices->data, indices->dtype, o[0]);
    if (!bad && (v < -limit || v >= limit)) {
      bad = true;
      badValue = v;
    }
    out.push_back(v < 0 ? v + limit : v);
  });
  if (bad)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: index %lld out of range [-%lld, %lld)", k,
                (long long)badValue, (long long)limit, (long long)limit);
  return AMPRT_OK;
}
} // namespace

extern "C" amprt_status amprt_gather(amprt_context *, const amprt_tensor *data,
                                     const amprt_tensor *indices, int32_t axis, amprt_tensor *y) {
  AMPRT_CHECK(check(data, "amprt_gather: data"));
  AMPRT_CHECK(check(indices, "amprt_gather: indices"));
  AMPRT_CHECK(check(y, "amprt_gather: y"));
  if (indices->dtype != AMPRT_I32 && indices->dtype != AMPRT_I64)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_gather: indices must be i32 or i64");
  if (axis < 0 || axis >= data->rank || data->dtype != y->dtype ||
      y->rank != data->rank - 1 + indices->rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_gather: data %s, indices %s and y %s do not agree "
                "(axis %d)",
                shapeString(data).c_str(), shapeString(indices).c_str(), shapeString(y).c_str(),
                axis);
  int64_t limit = data->shape[axis];
  size_t es = amprt_dtype_size(data->dtype);
  if (amprt_tensor_is_contiguous(data) && amprt_tensor_is_contiguous(y)) {
    // Dense: one block copy of the inner dims per (outer position, index).
    std::vector<int64_t> ks;
    AMPRT_CHECK(indexList(indices, limit, "amprt_gather", ks));
    int64_t outer, inner, nidx = (int64_t)ks.size();
    aroundAxis(data, axis, outer, inner);
    size_t blk = (size_t)inner * es;
    const char *src = static_cast<const char *>(data->data);
    char *dst = static_cast<char *>(y->data);
    parallelFor(outer * nidx, std::max<int64_t>(1, 65536 / std::max<int64_t>(inner, 1)), 1,
                [&](int64_t t0, int64_t t1) {
                  for (int64_t t = t0; t < t1; ++t)
                    std::memcpy(dst + (size_t)t * blk,
                                src + (size_t)((t / nidx) * limit + ks[t % nidx]) * blk, blk);
                });
    return AMPRT_OK;
  }
  int64_t s[2][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < y->rank; ++d)
    s[1][d] = y->strides[d];
  // Walk y; split its index into (outer, indices..., inner).
  std::vector<int64_t> idx(y->rank, 0);
  int64_t total = amprt_tensor_numel(y);
  for (int64_t lin = 0; lin < total; ++lin) {
    int64_t rem = lin;
    for (int32_t d = y->rank - 1; d >= 0; --d) {
      idx[d] = rem % y->shape[d];
      rem /= y->shape[d];
    }
    int64_t ioff = 0;
    for (int32_t d = 0; d < indices->rank; ++d)
      ioff += idx[axis + d] * indices->strides[d];
    int64_t k = loadI(indices->data, indices->dtype, ioff);
    if (k < -limit || k >= limit)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_gather: index %lld out of range [-%lld, %lld)",
                  (long long)k, (long long)limit, (long long)limit);
    if (k < 0)
      k += limit;
    int64_t doff = 0;
    for (int32_t d = 0; d < axis; ++d)
      doff += idx[d] * data->strides[d];
    doff += k * data->strides[axis];
    for (int32_t d = axis + 1; d < data->rank; ++d)
      doff += idx[d - 1 + indices->rank] * data->strides[d];
    int64_t yoff = 0;
    for (int32_t d = 0; d < y->rank; ++d)
      yoff += idx[d] * s[1][d];
    std::memcpy(static_cast<char *>(y->data) + yoff * es,
                static_cast<const char *>(data->data) + doff * es, es);
  }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_dropout(amprt_context *ctx, const amprt_tensor *x, float ratio,
                                      amprt_tensor *y, amprt_tensor *mask) {
  int64_t s[2][AMPRT_MAX_RANK];
  AMPRT_CHECK(prepare("amprt_dropout", y, {x}, s));
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_dropout: ratio %g outside [0, 1)", ratio);
  if (mask) {
    AMPRT_CHECK(check(mask, "amprt_dropout: mask"));
    if (mask->dtype != AMPRT_I1 || amprt_tensor_numel(mask) != amprt_tensor_numel(y) ||
        !amprt_tensor_is_contiguous(mask))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_dropout: mask must be a contiguous i1 tensor of y's "
                  "size");
  }
  float keepScale = 1.0f / (1.0f - ratio);
  int64_t i = 0;
  forEach<2>(y->rank, y->shape, s, [&](const int64_t *o) {
    bool keep = ratio == 0.0f || nextUniform(ctx) >= ratio;
    float v = keep ? loadF(x->data, x->dtype, o[0]) * keepScale : 0.0f;
    storeF(y->data, y->dtype, o[1], v);
    if (mask)
      static_cast<uint8_t *>(mask->data)[i] = keep;
    ++i;
  });
  return AMPRT_OK;
}

extern "C" amprt_status amprt_random(amprt_context *ctx, int32_t kind, double a, double b,
                                     const amprt_tensor *p, amprt_tensor *y) {
  AMPRT_CHECK(check(y, "amprt_random: y"));
  if (kind < AMPRT_RANDOM_UNIFORM || kind > AMPRT_RANDOM_BERNOULLI)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_random: unknown kind %d", kind);
  if (!isFloat(y->dtype) || !amprt_tensor_is_contiguous(y))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_random: y must be a contiguous float tensor");
  int64_t n = amprt_tensor_numel(y);
  if (kind == AMPRT_RANDOM_BERNOULLI) {
    if (!p)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_random: bernoulli needs p");
    AMPRT_CHECK(check(p, "amprt_random: p"));
    if (!isFloat(p->dtype) || !amprt_tensor_is_contiguous(p) || amprt_tensor_numel(p) != n)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_random: p %s must be a contiguous float tensor of y's size %s",
                  shapeString(p).c_str(), shapeString(y).c_str());
    // Every probability checked before the generator moves (torch: "Expected
    // p_in >= 0 && p_in <= 1").
    for (int64_t i = 0; i < n; ++i) {
      float v = loadF(p->data, p->dtype, i);
      if (!(v >= 0.0f && v <= 1.0f))
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "amprt_random: bernoulli probability %g at element %lld is outside [0, 1]", v,
                    (long long)i);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    float u1 = nextUniform(ctx), u2 = kind == AMPRT_RANDOM_NORMAL ? nextUniform(ctx) : 0.0f;
    float pv = kind == AMPRT_RANDOM_BERNOULLI ? loadF(p->data, p->dtype, i) : 0.0f;
    storeF(y->data, y->dtype, i, (float)ops::randomValue(kind, a, b, u1, u2, pv));
  }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_reduce_to(amprt_context *, const amprt_tensor *dy, amprt_tensor *dx) {
  AMPRT_CHECK(check(dy, "amprt_reduce_to: dy"));
  AMPRT_CHECK(check(dx, "amprt_reduce_to: dx"));
  // dx's strides as seen from dy's shape: broadcast dims accumulate.
  int64_t s[2][AMPRT_MAX_RANK];
  AMPRT_CHECK(broadcastStrides(dx, dy->rank, dy->shape, s[1], "amprt_reduce_to"));
  for (int32_t d = 0; d < dy->rank; ++d)
    s[0][d] = dy->strides[d];
  int64_t n = amprt_tensor_numel(dx);
  std::vector<double> acc(n, 0.0);
  // Map dx offsets to dense indices: dx is required contiguous here.
  if (!amprt_tensor_is_contiguous(dx))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_reduce_to: dx must be contiguous");
  forEach<2>(dy->rank, dy->shape, s,
             [&](const int64_t *o) { acc[o[1]] += loadF(dy->data, dy->dtype, o[0]); });
  for (int64_t i = 0; i < n; ++i)
    storeF(dx->data, dx->dtype, i, (float)acc[i]);
  return AMPRT_OK;
}

extern "C" amprt_status amprt_gather_grad(amprt_context *, const amprt_tensor *indices,
                                          const amprt_tensor *dy, int32_t axis,
                                          amprt_tensor *ddata) {
  AMPRT_CHECK(check(indices, "amprt_gather_grad: indices"));
  AMPRT_CHECK(check(dy, "amprt_gather_grad: dy"));
  AMPRT_CHECK(check(ddata, "amprt_gather_grad: ddata"));
  if (indices->dtype != AMPRT_I32 && indices->dtype != AMPRT_I64)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_gather_grad: indices must be i32 or i64");
  if (!isFloat(dy->dtype) || dy->dtype != ddata->dtype || axis < 0 || axis >= ddata->rank ||
      dy->rank != ddata->rank - 1 + indices->rank || !amprt_tensor_is_contiguous(ddata))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_gather_grad: indices %s, dy %s and ddata %s do not agree (axis %d)",
                shapeString(indices).c_str(), shapeString(dy).c_str(), shapeString(ddata).c_str(),
                axis);
  for (int32_t d = 0; d < axis; ++d)
    if (dy->shape[d] != ddata->shape[d])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_gather_grad: dy %s vs ddata %s",
                  shapeString(dy).c_str(), shapeString(ddata).c_str());
  for (int32_t d = axis + 1; d < ddata->rank; ++d)
    if (dy->shape[d - 1 + indices->rank] != ddata->shape[d])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_gather_grad: dy %s vs ddata %s",
                  shapeString(dy).c_str(), shapeString(ddata).c_str());
  int64_t limit = ddata->shape[axis];
  int64_t dense[AMPRT_MAX_RANK];
  contiguousStrides(ddata->rank, ddata->shape, dense);
  if (amprt_tensor_is_contiguous(dy)) {
    std::vector<int64_t> ks;
    AMPRT_CHECK(indexList(indices, limit, "amprt_gather_grad", ks));
    int64_t outer, inner, nidx = (int64_t)ks.size();
    aroundAxis(ddata, axis, outer, inner);
    // Distinct indices (q = qkv[0], a slice by index): each block of ddata
    // receives at most one block of dy, so ddata is dy's blocks placed at
    // their rows and zeros elsewhere: one pass of copies (0 + v is v, but
    // for the sign of a zero), in any dtype, on the threads.
    std::vector<int64_t> from(limit, -1);
    bool distinct = true;
    for (size_t j = 0; j < ks.size() && distinct; ++j) {
      distinct = from[ks[j]] < 0;
      from[ks[j]] = (int64_t)j;
    }
    if (distinct) {
      size_t es = amprt_dtype_size(ddata->dtype), blk = (size_t)inner * es;
      const char *src = static_cast<const char *>(dy->data);
      char *dst = static_cast<char *>(ddata->data);
      parallelFor(outer * limit, std::max<int64_t>(1, 65536 / std::max<int64_t>(inner, 1)), 1,
                  [&](int64_t t0, int64_t t1) {
                    for (int64_t t = t0; t < t1; ++t) {
                      int64_t o = t / limit, j = from[t % limit];
                      if (j < 0)
                        std::memset(dst + (size_t)t * blk, 0, blk);
                      else
                        std::memcpy(dst + (size_t)t * blk, src + (size_t)(o * nidx + j) * blk, blk);
                    }
                  });
      return AMPRT_OK;
    }
    // Repeated indices: sums in f32 (a scratch copy when ddata is f16 /
    // bf16). Per (outer position, index), dy's inner block added to the
    // indexed block, in dy's order (the same sums, in the same order, as
    // element by element); outer positions on the threads (disjoint blocks).
    amprt_tensor acc = ddata->dtype == AMPRT_F32 ? *ddata : scratchF32(ddata, 3);
    float *a = static_cast<float *>(acc.data);
    std::fill(a, a + amprt_tensor_numel(ddata), 0.0f);
    parallelFor(outer, std::max<int64_t>(1, 65536 / std::max<int64_t>(nidx * inner, 1)), 1,
                [&](int64_t o0, int64_t o1) {
                  for (int64_t o = o0; o < o1; ++o)
                    for (int64_t j = 0; j < nidx; ++j) {
                      float *to = a + (o * limit + ks[j]) * inner;
                      int64_t at = (o * nidx + j) * inner;
                      if (dy->dtype == AMPRT_F32) {
                        const float *f = static_cast<const float *>(dy->data) + at;
                        for (int64_t i = 0; i < inner; ++i)
                          to[i] += f[i];
                      } else {
                        for (int64_t i = 0; i < inner; ++i)
                          to[i] += loadF(dy->data, dy->dtype, at + i);
                      }
                    }
                });
    return storeFromF32(acc, ddata);
  }
  // Strided dy: element by element, sums in f32.
  amprt_tensor acc = ddata->dtype == AMPRT_F32 ? *ddata : scratchF32(ddata, 3);
  float *a = static_cast<float *>(acc.data);
  std::fill(a, a + amprt_tensor_numel(ddata), 0.0f);
  std::vector<int64_t> idx(dy->rank, 0);
  int64_t n = amprt_tensor_numel(dy);
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t rem = lin, yoff = 0;
    for (int32_t d = dy->rank - 1; d >= 0; --d) {
      idx[d] = rem % dy->shape[d];
      rem /= dy->shape[d];
      yoff += idx[d] * dy->strides[d];
    }
    int64_t ioff = 0;
    for (int32_t d = 0; d < indices->rank; ++d)
      ioff += idx[axis + d] * indices->strides[d];
    int64_t k = loadI(indices->data, indices->dtype, ioff);
    if (k < -limit || k >= limit)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_gather_grad: index %lld out of range [-%lld, %lld)", (long long)k,
                  (long long)limit, (long long)limit);
    if (k < 0)
      k += limit;
    int64_t doff = k * dense[axis];
    for (int32_t d = 0; d < axis; ++d)
      doff += idx[d] * dense[d];
    for (int32_t d = axis + 1; d < ddata->rank; ++d)
      doff += idx[d - 1 + indices->rank] * dense[d];
    a[doff] += loadF(dy->data, dy->dtype, yoff);
  }
  return storeFromF32(acc, ddata);
}

namespace {
/// The shared checks of gather_elements and its gradient: indices i32 / i64
/// of data's rank, no larger than data off the axis.
amprt_status gatherElementsShapes(const char *what, const amprt_tensor *data,
                                  const amprt_tensor *indices, int32_t axis,
                                  const amprt_tensor *y) {
  if (indices->dtype != AMPRT_I32 && indices->dtype != AMPRT_I64)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: indices must be i32 or i64", what);
  bool ok = data->rank >= 1 && indices->rank == data->rank && y->rank == data->rank && axis >= 0 &&
            axis < data->rank;
  for (int32_t d = 0; ok && d < data->rank; ++d)
    ok = y->shape[d] == indices->shape[d] && (d == axis || indices->shape[d] <= data->shape[d]);
  if (!ok)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: data %s, indices %s and the result %s do not agree (axis %d)", what,
                shapeString(data).c_str(), shapeString(indices).c_str(), shapeString(y).c_str(),
                axis);
  return AMPRT_OK;
}

/// Calls f(data offset in `strides`, indices offset, y offset) for every
/// element of y; an index out of range stops with an error.
template <typename F>
amprt_status eachGathered(const char *what, const amprt_tensor *indices, const int64_t *dataShape,
                          const int64_t *dataStrides, const amprt_tensor *y, int32_t axis, F f) {
  int32_t rank = y->rank;
  int64_t n = amprt_tensor_numel(y), limit = dataShape[axis];
  int64_t c[AMPRT_MAX_RANK] = {0};
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t ioff = 0, yoff = 0, doff = 0;
    for (int32_t d = 0; d < rank; ++d) {
      ioff += c[d] * indices->strides[d];
      yoff += c[d] * y->strides[d];
      if (d != axis)
        doff += c[d] * dataStrides[d];
    }
    int64_t k = loadI(indices->data, indices->dtype, ioff);
    if (k < -limit || k >= limit)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: index %lld out of range [-%lld, %lld)", what,
                  (long long)k, (long long)limit, (long long)limit);
    f(doff + (k < 0 ? k + limit : k) * dataStrides[axis], ioff, yoff);
    for (int32_t d = rank - 1; d >= 0; --d) {
      if (++c[d] < y->shape[d])
        break;
      c[d] = 0;
    }
  }
  return AMPRT_OK;
}
} // namespace

extern "C" amprt_status amprt_gather_elements(amprt_context *, const amprt_tensor *data,
                                              const amprt_tensor *indices, int32_t axis,
                                              amprt_tensor *y) {
  AMPRT_CHECK(check(data, "amprt_gather_elements: data"));
  AMPRT_CHECK(check(indices, "amprt_gather_elements: indices"));
  AMPRT_CHECK(check(y, "amprt_gather_elements: y"));
  AMPRT_CHECK(gatherElementsShapes("amprt_gather_elements", data, indices, axis, y));
  if (data->dtype != y->dtype)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_gather_elements: data and y differ in type");
  size_t es = amprt_dtype_size(y->dtype);
  return eachGathered("amprt_gather_elements", indices, data->shape, data->strides, y, axis,
                      [&](int64_t doff, int64_t, int64_t yoff) {
                        std::memcpy(static_cast<char *>(y->data) + yoff * es,
                                    static_cast<const char *>(data->data) + doff * es, es);
                      });
}

extern "C" amprt_status amprt_gather_elements_grad(amprt_context *, const amprt_tensor *indices,
                                                   const amprt_tensor *dy, int32_t axis,
                                                   amprt_tensor *ddata) {
  AMPRT_CHECK(check(indices, "amprt_gather_elements_grad: indices"));
  AMPRT_CHECK(check(dy, "amprt_gather_elements_grad: dy"));
  AMPRT_CHECK(check(ddata, "amprt_gather_elements_grad: ddata"));
  AMPRT_CHECK(gatherElementsShapes("amprt_gather_elements_grad", ddata, indices, axis, dy));
  if (!isFloat(dy->dtype) || dy->dtype != ddata->dtype || !amprt_tensor_is_contiguous(ddata))
    return fail(
        AMPRT_ERR_INVALID_ARGUMENT,
        "amprt_gather_elements_grad: dy and ddata must be one float type, ddata contiguous");
  // Sums in f32 (a scratch copy when ddata is f16 / bf16), in y's order.
  amprt_tensor acc = ddata->dtype == AMPRT_F32 ? *ddata : scratchF32(ddata, 3);
  float *a = static_cast<float *>(acc.data);
  std::fill(a, a + amprt_tensor_numel(ddata), 0.0f);
  int64_t dense[AMPRT_MAX_RANK];
  contiguousStrides(ddata->rank, ddata->shape, dense);
  AMPRT_CHECK(eachGathered(
      "amprt_gather_elements_grad", indices, ddata->shape, dense, dy, axis,
      [&](int64_t doff, int64_t, int64_t yoff) { a[doff] += loadF(dy->data, dy->dtype, yoff); }));
  return storeFromF32(acc, ddata);
}

extern "C" amprt_status amprt_arg_reduce(amprt_context *, const amprt_tensor *x, int32_t axis,
                                         int min, int select_last, amprt_tensor *y) {
  AMPRT_CHECK(check(x, "amprt_arg_reduce: x"));
  AMPRT_CHECK(check(y, "amprt_arg_reduce: y"));
  bool ok = y->dtype == AMPRT_I64 && x->rank >= 1 && y->rank == x->rank && axis >= 0 &&
            axis < x->rank && x->shape[axis] >= 1 && y->shape[axis] == 1;
  for (int32_t d = 0; ok && d < x->rank; ++d)
    ok = d == axis || y->shape[d] == x->shape[d];
  if (!ok)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_arg_reduce: x %s and y %s (i64, the axis 1) do not agree for axis %d",
                shapeString(x).c_str(), shapeString(y).c_str(), axis);
  bool flt = isFloat(x->dtype), mn = min != 0, last = select_last != 0;
  int64_t n = amprt_tensor_numel(y), len = x->shape[axis];
  int64_t c[AMPRT_MAX_RANK] = {0};
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t xoff = 0, yoff = 0;
    for (int32_t d = 0; d < x->rank; ++d) {
      xoff += c[d] * x->strides[d];
      yoff += c[d] * y->strides[d];
    }
    auto scan = [&](auto load) {
      auto bv = load(xoff);
      int64_t best = 0;
      for (int64_t i = 1; i < len; ++i) {
        auto v = load(xoff + i * x->strides[axis]);
        if (argBetter(v, bv, mn, last))
          bv = v, best = i;
      }
      return best;
    };
    static_cast<int64_t *>(y->data)[yoff] =
        flt ? scan([&](int64_t o) { return loadF(x->data, x->dtype, o); })
            : scan([&](int64_t o) { return loadI(x->data, x->dtype, o); });
    for (int32_t d = x->rank - 1; d >= 0; --d) {
      if (++c[d] < y->shape[d])
        break;
      c[d] = 0;
    }
  }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_topk(amprt_context *, const amprt_tensor *x, int32_t axis,
                                   int largest, amprt_tensor *values, amprt_tensor *indices) {
  AMPRT_CHECK(check(x, "amprt_topk: x"));
  AMPRT_CHECK(check(values, "amprt_topk: values"));
  AMPRT_CHECK(check(indices, "amprt_topk: indices"));
  bool ok = isFloat(x->dtype) && values->dtype == x->dtype && indices->dtype == AMPRT_I64 &&
            x->rank >= 1 && values->rank == x->rank && indices->rank == x->rank && axis >= 0 &&
            axis < x->rank && values->shape[axis] <= x->shape[axis];
  for (int32_t d = 0; ok && d < x->rank; ++d)
    ok = values->shape[d] == indices->shape[d] && (d == axis || values->shape[d] == x->shape[d]);
  if (!ok)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_topk: x %s (float), values %s (x's type) and indices %s (i64) do not agree "
                "for axis %d",
                shapeString(x).c_str(), shapeString(values).c_str(), shapeString(indices).c_str(),
                axis);
  int64_t len = x->shape[axis], k = values->shape[axis];
  int64_t rows = len ? amprt_tensor_numel(x) / len : 0;
  size_t es = amprt_dtype_size(x->dtype);
  std::vector<int64_t> order(len);
  std::vector<float> v(len);
  for (int64_t row = 0; row < rows && k > 0; ++row) {
    // row's coordinates over the dims but the axis.
    int64_t xo = 0, vo = 0, io = 0, rem = row;
    for (int32_t d = x->rank - 1; d >= 0; --d) {
      if (d == axis)
        continue;
      int64_t c = rem % x->shape[d];
      rem /= x->shape[d];
      xo += c * x->strides[d];
      vo += c * values->strides[d];
      io += c * indices->strides[d];
    }
    for (int64_t i = 0; i < len; ++i) {
      order[i] = i;
      v[i] = loadF(x->data, x->dtype, xo + i * x->strides[axis]);
    }
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      return topBefore(v[a], a, v[b], b, largest != 0);
    });
    for (int64_t j = 0; j < k; ++j) {
      std::memcpy(static_cast<char *>(values->data) + (vo + j * values->strides[axis]) * es,
                  static_cast<const char *>(x->data) + (xo + order[j] * x->strides[axis]) * es, es);
      static_cast<int64_t *>(indices->data)[io + j * indices->strides[axis]] = order[j];
    }
  }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_cumsum(amprt_context *, const amprt_tensor *x, int32_t axis,
                                     int exclusive, int reverse, amprt_tensor *y) {
  AMPRT_CHECK(check(x, "amprt_cumsum: x"));
  AMPRT_CHECK(check(y, "amprt_cumsum: y"));
  bool ok = x->rank >= 1 && y->rank == x->rank && axis >= 0 && axis < x->rank &&
            isFloat(x->dtype) == isFloat(y->dtype);
  for (int32_t d = 0; ok && d < x->rank; ++d)
    ok = y->shape[d] == x->shape[d];
  if (!ok)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cumsum: x %s and y %s do not agree (axis %d)",
                shapeString(x).c_str(), shapeString(y).c_str(), axis);
  int64_t len = x->shape[axis], lines = len ? amprt_tensor_numel(x) / len : 0;
  int64_t c[AMPRT_MAX_RANK] = {0};
  for (int64_t line = 0; line < lines; ++line) {
    int64_t xo = 0, yo = 0;
    for (int32_t d = 0; d < x->rank; ++d) {
      xo += c[d] * x->strides[d];
      yo += c[d] * y->strides[d];
    }
    int64_t xs = x->strides[axis], ys = y->strides[axis];
    if (isFloat(x->dtype))
      cumsumScan<float>(
          len, exclusive != 0, reverse != 0,
          [&](int64_t i) { return loadF(x->data, x->dtype, xo + i * xs); },
          [&](int64_t i, float v) { storeF(y->data, y->dtype, yo + i * ys, v); });
    else
      cumsumScan<int64_t>(
          len, exclusive != 0, reverse != 0,
          [&](int64_t i) { return loadI(x->data, x->dtype, xo + i * xs); },
          [&](int64_t i, int64_t v) { storeI(y->data, y->dtype, yo + i * ys, v); });
    for (int32_t d = x->rank - 1; d >= 0; --d) {
      if (d == axis)
        continue;
      if (++c[d] < x->shape[d])
        break;
      c[d] = 0;
    }
  }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_reduce_max_grad(amprt_context *, const amprt_tensor *x,
                                              const amprt_tensor *y, const amprt_tensor *dy,
                                              amprt_tensor *dx) {
  AMPRT_CHECK(check(x, "amprt_reduce_max_grad: x"));
  AMPRT_CHECK(check(y, "amprt_reduce_max_grad: y"));
  AMPRT_CHECK(check(dy, "amprt_reduce_max_grad: dy"));
  AMPRT_CHECK(check(dx, "amprt_reduce_max_grad: dx"));
  bool ok = isFloat(x->dtype) && isFloat(y->dtype) && isFloat(dy->dtype) && isFloat(dx->dtype) &&
            y->rank == x->rank && dy->rank == x->rank && dx->rank == x->rank;
  for (int32_t d = 0; ok && d < x->rank; ++d)
    ok = dx->shape[d] == x->shape[d] && y->shape[d] == dy->shape[d] &&
         (y->shape[d] == 1 || y->shape[d] == x->shape[d]);
  if (!ok)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_reduce_max_grad: x %s, y %s, dy %s, dx %s do not agree",
                shapeString(x).c_str(), shapeString(y).c_str(), shapeString(dy).c_str(),
                shapeString(dx).c_str());
  // Per output slot (y's dense index): how many elements equal the maximum.
  int64_t dense[AMPRT_MAX_RANK];
  contiguousStrides(y->rank, y->shape, dense);
  int64_t s[3][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < x->rank; ++d) {
    bool reduced = y->shape[d] == 1 && x->shape[d] != 1;
    s[0][d] = x->strides[d];
    s[1][d] = reduced ? 0 : dense[d];
    s[2][d] = dx->strides[d];
  }
  int64_t slots = amprt_tensor_numel(y);
  std::vector<float> ymax(slots), g(slots);
  std::vector<int64_t> count(slots, 0);
  {
    int64_t i = 0, ys[1][AMPRT_MAX_RANK], gs[1][AMPRT_MAX_RANK];
    for (int32_t d = 0; d < y->rank; ++d) {
      ys[0][d] = y->strides[d];
      gs[0][d] = dy->strides[d];
    }
    forEach<1>(y->rank, y->shape, ys,
               [&](const int64_t *o) { ymax[i++] = loadF(y->data, y->dtype, o[0]); });
    i = 0;
    forEach<1>(dy->rank, dy->shape, gs,
               [&](const int64_t *o) { g[i++] = loadF(dy->data, dy->dtype, o[0]); });
  }
  forEach<3>(x->rank, x->shape, s, [&](const int64_t *o) {
    count[o[1]] += loadF(x->data, x->dtype, o[0]) == ymax[o[1]];
  });
  forEach<3>(x->rank, x->shape, s, [&](const int64_t *o) {
    bool hit = loadF(x->data, x->dtype, o[0]) == ymax[o[1]];
    storeF(dx->data, dx->dtype, o[2], hit ? g[o[1]] / (float)count[o[1]] : 0.0f);
  });
  return AMPRT_OK;
}
