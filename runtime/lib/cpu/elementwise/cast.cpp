//===- cast.cpp - casts, conversions on the threads, f32 scratch ------------===//
//
// Float math runs in f32 (as PyTorch's opmath does for f16 / bf16) and is
// rounded once when stored. Integer math runs in int64 and wraps to the
// output type.
//
//===----------------------------------------------------------------------===//

#include "cpu/elementwise/elementwise.h"
#include "cpu/elementwise/kernels.h"

#include "common/check.h"
#include "common/convert.h"
#include "common/convert_avx2.h"
#include "common/scalar_ops.h"
#include "host/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

using namespace amprt;
using namespace amprt::ops;

namespace amprt {

amprt_status prepare(const char *kernel, const amprt_tensor *y,
                     std::initializer_list<const amprt_tensor *> ins,
                     int64_t (*strides)[AMPRT_MAX_RANK]) {
  AMPRT_CHECK(check(y, kernel));
  int k = 0;
  for (const amprt_tensor *in : ins) {
    AMPRT_CHECK(check(in, kernel));
    AMPRT_CHECK(broadcastStrides(in, y->rank, y->shape, strides[k], kernel));
    ++k;
  }
  for (int32_t d = 0; d < y->rank; ++d)
    strides[k][d] = y->strides[d];
  return AMPRT_OK;
}

amprt_status convertPar(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n) {
  // Same type: a memmove (one piece: the buffers may overlap); bad types or
  // buffers: refused here, on the caller's thread (its last error).
  if (st == dt || (n && (!src || !dst)))
    return amprt_convert(src, st, dst, dt, n);
  AMPRT_CHECK(amprt_convert(src, st, dst, dt, 0));
  amprt_status status = AMPRT_OK;
  size_t ss = amprt_dtype_size(st), ds = amprt_dtype_size(dt);
  parallelFor((int64_t)n, (int64_t)1 << 16, 64, [&](int64_t b, int64_t e) {
    amprt_status s = amprt_convert(static_cast<const char *>(src) + b * ss, st,
                                   static_cast<char *>(dst) + b * ds, dt, (size_t)(e - b));
    if (s != AMPRT_OK) {
#pragma omp critical(amprt_convert_status)
      status = s;
    }
  });
  return status;
}

static std::vector<float> &scratch(int slot) {
  thread_local std::vector<float> bufs[4];
  return bufs[slot & 3];
}

amprt_tensor asF32(const amprt_tensor *x, int slot) {
  if (x->dtype == AMPRT_F32)
    return *x;
  amprt_tensor t = scratchF32(x, slot);
  if (amprt_tensor_is_contiguous(x))
    convertPar(x->data, x->dtype, t.data, AMPRT_F32, (size_t)amprt_tensor_numel(x));
  else
    amprt_cast(nullptr, x, &t);
  return t;
}

amprt_tensor scratchF32(const amprt_tensor *y, int slot) {
  std::vector<float> &b = scratch(slot);
  size_t n = (size_t)amprt_tensor_numel(y);
  if (b.size() < n)
    b.resize(n);
  return amprt_tensor_make(b.data(), AMPRT_F32, y->rank, y->shape);
}

amprt_status storeFromF32(const amprt_tensor &y32, amprt_tensor *y) {
  if (y->data == y32.data)
    return AMPRT_OK;
  if (amprt_tensor_is_contiguous(y))
    return convertPar(y32.data, AMPRT_F32, y->data, y->dtype, (size_t)amprt_tensor_numel(y));
  return amprt_cast(nullptr, &y32, y);
}

} // namespace amprt

extern "C" amprt_status amprt_cast(amprt_context *, const amprt_tensor *x, amprt_tensor *y) {
  AMPRT_CHECK(check(x, "amprt_cast: x"));
  AMPRT_CHECK(check(y, "amprt_cast: y"));
  if (x->rank != y->rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cast: x %s and y %s differ",
                shapeString(x).c_str(), shapeString(y).c_str());
  for (int32_t d = 0; d < x->rank; ++d)
    if (x->shape[d] != y->shape[d])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_cast: x %s and y %s differ",
                  shapeString(x).c_str(), shapeString(y).c_str());
  // Contiguous float -> float: the bulk converter (vector paths).
  if (isFloat(x->dtype) && isFloat(y->dtype) && amprt_tensor_is_contiguous(x) &&
      amprt_tensor_is_contiguous(y)) {
    return convertPar(x->data, x->dtype, y->data, y->dtype, (size_t)amprt_tensor_numel(x));
  }
  int64_t s[2][AMPRT_MAX_RANK];
  for (int32_t d = 0; d < y->rank; ++d) {
    s[0][d] = x->strides[d];
    s[1][d] = y->strides[d];
  }
  forEach<2>(y->rank, y->shape, s, [&](const int64_t *o) {
    if (y->dtype == AMPRT_I1) {
      bool nz = isFloat(x->dtype) ? loadF(x->data, x->dtype, o[0]) != 0.0f
                                  : loadI(x->data, x->dtype, o[0]) != 0;
      storeI(y->data, y->dtype, o[1], nz);
    } else if (isFloat(y->dtype)) {
      // Integers above 2^24 round through double for a correctly rounded
      // f32, then once more to f16 / bf16 as the GPU does.
      float v = isFloat(x->dtype) ? loadF(x->data, x->dtype, o[0])
                                  : (float)(double)loadI(x->data, x->dtype, o[0]);
      storeF(y->data, y->dtype, o[1], v);
    } else if (isFloat(x->dtype)) {
      storeI(y->data, y->dtype, o[1], floatToInt(loadF(x->data, x->dtype, o[0])));
    } else {
      storeI(y->data, y->dtype, o[1], loadI(x->data, x->dtype, o[0]));
    }
  });
  return AMPRT_OK;
}
