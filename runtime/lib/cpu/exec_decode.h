//===- exec_decode.h - reading amprt_exec's descriptors ---------*- C++ -*-===//
//
// The descriptor format of amprt_exec (amprt.h, "Compiled code"), read by
// the CPU executor (exec.cpp) and the CUDA one (../cuda/exec.cu) alike.
// Every field is checked: a corrupt descriptor is an error, not a wild
// write.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_EXEC_DECODE_H
#define AMPRT_EXEC_DECODE_H

#include "internal.h"

#include <cstring>
#include <vector>

namespace amprt::desc {

inline double attrF(const int64_t *a, int i) {
  double d;
  std::memcpy(&d, &a[i], 8);
  return d;
}

struct Decoded {
  int64_t opcode = 0;
  std::vector<amprt_tensor> t;
  const int64_t *attrs = nullptr;
  int64_t nattrs = 0;
};

inline amprt_status decode(const int64_t *desc, void **bufs, Decoded &d) {
  if (!desc)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: null descriptor");
  if (desc[0] != AMPRT_EXEC_VERSION)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec: descriptor version %lld, this runtime reads %d (the "
                "program was compiled for another runtime)",
                (long long)desc[0], AMPRT_EXEC_VERSION);
  d.opcode = desc[1];
  int64_t n = desc[2];
  d.nattrs = desc[3];
  if (n < 0 || n > 4096 || d.nattrs < 0 || d.nattrs > 256)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt descriptor");
  const int64_t *p = desc + 4;
  for (int64_t k = 0; k < n; ++k) {
    amprt_tensor t;
    std::memset(&t, 0, sizeof(t));
    int64_t dtype = *p++, rank = *p++, offset = *p++;
    if (dtype < 0 || dtype >= AMPRT_DTYPE_COUNT || rank < 0 || rank > AMPRT_MAX_RANK)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt tensor %lld",
                  (long long)k);
    t.dtype = (amprt_dtype)dtype;
    t.rank = (int32_t)rank;
    for (int64_t i = 0; i < rank; ++i)
      t.shape[i] = *p++;
    for (int64_t i = 0; i < rank; ++i)
      t.strides[i] = *p++;
    t.data = bufs && bufs[k]
                 ? static_cast<char *>(bufs[k]) + offset * (int64_t)amprt_dtype_size(t.dtype)
                 : nullptr;
    d.t.push_back(t);
  }
  d.attrs = p;
  return AMPRT_OK;
}

inline amprt_status need(const Decoded &d, size_t tensors, int64_t attrs, const char *op) {
  if (d.t.size() != tensors || d.nattrs < attrs)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec: %s expects %zu tensors and %lld attributes, got %zu / %lld", op,
                tensors, (long long)attrs, d.t.size(), (long long)d.nattrs);
  return AMPRT_OK;
}

inline void windowParams(const int64_t *a, int spatial, int64_t *kernel, int64_t *strides,
                  int64_t *dil, int64_t *pb, int64_t *pe) {
  for (int i = 0; i < spatial; ++i) {
    if (kernel)
      kernel[i] = *a++;
    strides[i] = *a++;
    dil[i] = *a++;
    pb[i] = *a++;
    pe[i] = *a++;
  }
}

/// A convolution's attributes (spatial, group, has_bias, per dim: stride,
/// dilation, pad begin, pad end, then `extraAttrs` more) and tensor count
/// (`tensors` without the bias, one more with it).
inline amprt_status convParams(const Decoded &d, size_t tensors, int64_t extraAttrs, const char *op,
                        amprt_conv_params &p, bool &hasBias) {
  const int64_t *a = d.attrs;
  if (d.nattrs < 3 || a[0] < 1 || a[0] > 3 || d.nattrs < 3 + 4 * a[0] + extraAttrs)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt %s", op);
  hasBias = a[2] != 0;
  AMPRT_CHECK(need(d, tensors + (hasBias ? 1 : 0), 3 + 4 * a[0] + extraAttrs, op));
  p.spatial = (int32_t)a[0];
  p.group = a[1];
  windowParams(a + 3, p.spatial, nullptr, p.strides, p.dilations, p.pads_begin, p.pads_end);
  return AMPRT_OK;
}

} // namespace amprt::desc

#endif // AMPRT_EXEC_DECODE_H
