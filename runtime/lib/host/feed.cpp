//===- feed.cpp - putting caller data into program buffers ---------------===//
#include "common/check.h"

#include <string>
#include <vector>

using namespace amprt;

extern "C" amprt_status amprt_feed(const amprt_array *src, amprt_dtype dtype, int32_t rank,
                                   const int64_t *shape, void *dst, const char *what) {
  if (!src || !what || rank < 0 || rank > AMPRT_MAX_RANK)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_feed: bad arguments");
  bool same = src->rank == rank;
  for (int32_t d = 0; same && d < rank; ++d)
    same = src->shape[d] == shape[d];
  if (!same) {
    amprt_tensor a = amprt_tensor_make(nullptr, src->dtype, src->rank, src->shape);
    amprt_tensor b = amprt_tensor_make(nullptr, dtype, rank, shape);
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: shape %s does not match the model's %s", what,
                shapeString(&a).c_str(), shapeString(&b).c_str());
  }
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d)
    n *= shape[d];
  bool bitwise = src->dtype == dtype || (src->dtype == AMPRT_U16 && dtype == AMPRT_BF16);
  if (!bitwise && !(isFloat(src->dtype) && isFloat(dtype)))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: element type %s does not match the model's %s",
                what, amprt_dtype_name(src->dtype), amprt_dtype_name(dtype));
  if (n == 0)
    return AMPRT_OK; // an empty tensor may have no storage at all
  if (!dst || !src->data)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: no storage for %lld elements", what, (long long)n);
  if (bitwise) {
    std::memcpy(dst, src->data, (size_t)n * amprt_dtype_size(dtype));
    return AMPRT_OK;
  }
  return amprt_convert(src->data, src->dtype, dst, dtype, (size_t)n);
}

extern "C" int64_t amprt_count_nonfinite(const void *data, amprt_dtype t, int64_t n,
                                         int64_t *first) {
  if (first)
    *first = -1;
  if (!isFloat(t) || !data)
    return 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(loadF(data, t, i))) {
      if (!bad && first)
        *first = i;
      ++bad;
    }
  return bad;
}
