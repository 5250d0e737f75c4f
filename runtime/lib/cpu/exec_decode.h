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

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
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

/// Whether `v` is a descriptor version this runtime reads.
inline bool knownVersion(int64_t v) {
  return v == AMPRT_EXEC_VERSION || v == AMPRT_EXEC_VERSION_NAMED;
}

/// The words of a descriptor whose header is sane (knownVersion, tensor and
/// attribute counts in range): tensors, attributes and, when named, the name.
/// `name` / `nameLen` (may be null) get the name (empty when none).
inline int64_t descWords(const int64_t *desc, const char **name = nullptr,
                         int64_t *nameLen = nullptr) {
  const int64_t *p = desc + 4;
  for (int64_t k = 0; k < desc[2]; ++k)
    p += 3 + 2 * std::clamp<int64_t>(p[1], 0, AMPRT_MAX_RANK);
  p += desc[3];
  if (name)
    *name = "";
  if (nameLen)
    *nameLen = 0;
  if (desc[0] != AMPRT_EXEC_VERSION_NAMED)
    return p - desc;
  int64_t n = std::clamp<int64_t>(*p, 0, 4096);
  if (name)
    *name = reinterpret_cast<const char *>(p + 1);
  if (nameLen)
    *nameLen = n;
  return (p - desc) + 1 + (n + 7) / 8;
}

/// Fills `d` (reused: cleared first) from a descriptor and its buffers.
inline amprt_status decode(const int64_t *desc, void **bufs, Decoded &d) {
  d.opcode = 0;
  d.t.clear();
  d.attrs = nullptr;
  d.nattrs = 0;
  if (!desc)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: null descriptor");
  if (!knownVersion(desc[0]))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec: descriptor version %lld, this runtime reads %d and %d (the "
                "program was compiled for another runtime)",
                (long long)desc[0], AMPRT_EXEC_VERSION, AMPRT_EXEC_VERSION_NAMED);
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
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt tensor %lld", (long long)k);
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

/// AMPRT_PROFILE's key for a call: the opcode's name and its first four
/// tensors' [shape] (with /strides when not dense).
inline std::string profileKey(const int64_t *desc) {
  std::string key = amprt_opcode_name(desc ? desc[1] : -1);
  const int64_t *p = desc ? desc + 4 : nullptr;
  for (int64_t k = 0; p && k < desc[2] && k < 4; ++k) {
    int64_t rank = p[1];
    const int64_t *shape = p + 3, *strides = p + 3 + rank;
    std::string sh, st;
    int64_t dense = 1;
    bool isDense = true;
    for (int64_t i = rank - 1; i >= 0; --i) {
      isDense &= shape[i] == 1 || strides[i] == dense;
      dense *= shape[i];
    }
    for (int64_t i = 0; i < rank; ++i) {
      sh += (i ? "x" : "") + std::to_string(shape[i]);
      st += (i ? "," : "") + std::to_string(strides[i]);
    }
    key += " [" + sh + (isDense ? "" : "/" + st) + "]";
    p += 3 + 2 * rank;
  }
  return key;
}

/// Seconds and calls per profileKey, printed (the 40 largest, then the
/// totals per opcode) to stderr.
struct ProfileTable {
  struct Entry {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Entry> byOp;
  void add(const std::string &key, double seconds) {
    Entry &e = byOp[key];
    e.seconds += seconds;
    ++e.calls;
  }
  void print(const char *where) const {
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (auto &[k, e] : byOp) {
      rows.push_back({e.seconds, k});
      total += e.seconds;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "amprt profile%s: %.3f ms in kernels\n", where, total * 1e3);
    for (size_t i = 0; i < rows.size() && i < 40; ++i)
      std::fprintf(stderr, "  %6.2f%%  %9.3f ms  %7lld calls  %s\n", 100 * rows[i].first / total,
                   rows[i].first * 1e3, (long long)byOp.at(rows[i].second).calls,
                   rows[i].second.c_str());
    std::map<std::string, Entry> perOpcode; // the key's name, before its shapes
    for (auto &[k, e] : byOp) {
      Entry &t = perOpcode[k.substr(0, k.find(' '))];
      t.seconds += e.seconds;
      t.calls += e.calls;
    }
    std::vector<std::pair<double, std::string>> sums;
    for (auto &[k, e] : perOpcode)
      sums.push_back({e.seconds, k});
    std::sort(sums.rbegin(), sums.rend());
    std::fprintf(stderr, "amprt profile%s by opcode:\n", where);
    for (auto &[sec, k] : sums)
      std::fprintf(stderr, "  %6.2f%%  %9.3f ms  %7lld calls  %s\n", 100 * sec / total, sec * 1e3,
                   (long long)perOpcode.at(k).calls, k.c_str());
  }
};

inline bool profilingRequested() {
  static const bool on = std::getenv("AMPRT_PROFILE") && *std::getenv("AMPRT_PROFILE") != '0';
  return on;
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

/// conv_grad: conv's attributes, then want_dx, want_dw, want_db.
inline amprt_status convGradParams(const Decoded &d, amprt_conv_params &p, const int64_t *&want) {
  const int64_t *a = d.attrs;
  if (d.nattrs < 3 || a[0] < 1 || a[0] > 3 || d.nattrs < 6 + 4 * a[0])
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt conv_grad");
  AMPRT_CHECK(need(d, 6, 6 + 4 * a[0], "conv_grad"));
  p = amprt_conv_params{};
  p.spatial = (int32_t)a[0];
  p.group = a[1];
  windowParams(a + 3, p.spatial, nullptr, p.strides, p.dilations, p.pads_begin, p.pads_end);
  want = a + 3 + 4 * a[0];
  return AMPRT_OK;
}

/// A pool's attributes: spatial, count_include_pad, per dim kernel, stride,
/// dilation, pads; a max pool then storage_order, [want_indices, [blocked]].
struct PoolAttrs {
  amprt_pool_params p;
  bool wantIndices = false, blocked = false;
};
inline amprt_status poolAttrs(const Decoded &d, PoolAttrs &pa) {
  const int64_t *a = d.attrs;
  if (d.nattrs < 2 || a[0] < 1 || a[0] > 3 || d.nattrs < 2 + 5 * a[0])
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt pool");
  pa = PoolAttrs{};
  amprt_pool_params &p = pa.p;
  p.spatial = (int32_t)a[0];
  p.count_include_pad = (int32_t)a[1];
  windowParams(a + 2, p.spatial, p.kernel, p.strides, p.dilations, p.pads_begin, p.pads_end);
  if (d.opcode == AMPRT_OP_MAX_POOL) {
    AMPRT_CHECK(need(d, 3, 3 + 5 * a[0], "max_pool"));
    p.storage_order = (int32_t)a[2 + 5 * a[0]];
    // The indices are skipped when the compiler says nothing reads them;
    // then whether x and y are channel-blocked (no indices then).
    pa.wantIndices = d.nattrs < 4 + 5 * a[0] || a[3 + 5 * a[0]] != 0;
    pa.blocked = d.nattrs > 4 + 5 * a[0] && a[4 + 5 * a[0]] != 0;
    if (pa.blocked && pa.wantIndices)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec: a channel-blocked max pool has no indices");
  } else if (d.opcode == AMPRT_OP_AVERAGE_POOL) {
    AMPRT_CHECK(need(d, 2, 2 + 5 * a[0], "average_pool"));
  } else {
    AMPRT_CHECK(need(d, 3, 2 + 5 * a[0], "average_pool_grad"));
  }
  return AMPRT_OK;
}

/// The losses' attributes: reduction, has_ignore, ignore_index, has_weights;
/// tensors in, labels, [w], then (forward) loss, [log_prob] or (gradient)
/// dloss, dinput. `out` is the index of the first tensor after [w].
struct LossAttrs {
  amprt_reduction reduction = AMPRT_REDUCTION_NONE;
  int hasIgnore = 0;
  int64_t ignore = 0;
  bool hasWeights = false, softmax = false;
  size_t out = 0;
};
inline amprt_status lossAttrs(const Decoded &d, bool grad, LossAttrs &la) {
  const int64_t *a = d.attrs;
  if (d.nattrs < 4)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt loss");
  la.reduction = (amprt_reduction)a[0];
  la.hasIgnore = (int)a[1];
  la.ignore = a[2];
  la.hasWeights = a[3] != 0;
  la.softmax =
      d.opcode == AMPRT_OP_SOFTMAX_CROSS_ENTROPY || d.opcode == AMPRT_OP_SOFTMAX_CROSS_ENTROPY_GRAD;
  la.out = la.hasWeights ? 3 : 2;
  size_t n = grad ? la.out + 2 : la.out + 1 + (la.softmax ? 1 : 0);
  return need(d, n, 4, grad ? "loss gradient" : la.softmax ? "softmax_cross_entropy" : "nll_loss");
}

/// The step counter (i64 []) and found_inf (i1 []) of an update.
inline amprt_status checkStepAndFlag(const amprt_tensor &step, const amprt_tensor &flag) {
  if (step.dtype != AMPRT_I64 || amprt_tensor_numel(&step) != 1 || flag.dtype != AMPRT_I1 ||
      amprt_tensor_numel(&flag) != 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec: the step must be i64 [] and found_inf i1 []");
  return AMPRT_OK;
}

/// sgd_update: lr, momentum, dampening, wd, nesterov, has_buf; tensors param,
/// grad, [buf], step, found_inf, new_param, [new_buf]; `o` indexes step.
inline amprt_status sgdAttrs(const Decoded &d, amprt_sgd_config &cfg, bool &buf, size_t &o) {
  const int64_t *a = d.attrs;
  if (d.nattrs < 6)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt sgd_update");
  buf = a[5] != 0;
  AMPRT_CHECK(need(d, buf ? 7 : 5, 6, "sgd_update"));
  o = buf ? 3 : 2;
  AMPRT_CHECK(checkStepAndFlag(d.t[o], d.t[o + 1]));
  cfg = amprt_sgd_config{(float)attrF(a, 0), (float)attrF(a, 1), (float)attrF(a, 2),
                         (float)attrF(a, 3), (int32_t)a[4]};
  return AMPRT_OK;
}

/// adam_update: lr, beta1, beta2, eps, wd, decoupled; tensors param, grad, m,
/// v, step, found_inf, new_param, new_m, new_v.
inline amprt_status adamAttrs(const Decoded &d, amprt_adam_config &cfg) {
  AMPRT_CHECK(need(d, 9, 6, "adam_update"));
  AMPRT_CHECK(checkStepAndFlag(d.t[4], d.t[5]));
  const int64_t *a = d.attrs;
  cfg = amprt_adam_config{(float)attrF(a, 0), (float)attrF(a, 1), (float)attrF(a, 2),
                          (float)attrF(a, 3), (float)attrF(a, 4), (int32_t)a[5]};
  return AMPRT_OK;
}

/// unscale_and_check (n; grads[n], scale, outs[n], found_inf) and
/// clip_grad_norm (n, max_norm; grads[n], found_inf, outs[n], norm): n.
inline amprt_status multiTensorCount(const Decoded &d, const char *op, int64_t attrs, size_t &n) {
  const int64_t *a = d.attrs;
  if (d.nattrs < attrs || a[0] < 0 || (size_t)(2 * a[0] + 2) != d.t.size())
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt %s", op);
  n = (size_t)a[0];
  const amprt_tensor &scalar = d.opcode == AMPRT_OP_UNSCALE_AND_CHECK ? d.t[n] : d.t[2 * n + 1];
  const amprt_tensor &flag = d.opcode == AMPRT_OP_UNSCALE_AND_CHECK ? d.t[2 * n + 1] : d.t[n];
  if (scalar.dtype != AMPRT_F32 || amprt_tensor_numel(&scalar) != 1 || flag.dtype != AMPRT_I1 ||
      amprt_tensor_numel(&flag) != 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: %s needs an f32 [] %s and an i1 [] flag",
                op, d.opcode == AMPRT_OP_UNSCALE_AND_CHECK ? "scale" : "norm");
  return AMPRT_OK;
}

/// update_scale: growth_factor, backoff_factor, growth_interval, hysteresis,
/// min_scale, error_at_min; tensors scale, tracker, hysteresis_left,
/// found_inf, new_scale, new_tracker, new_hysteresis_left.
inline amprt_status updateScaleAttrs(const Decoded &d, amprt_scaler_config &cfg, bool &errorAtMin) {
  AMPRT_CHECK(need(d, 7, 6, "update_scale"));
  const auto &t = d.t;
  for (int k : {1, 2, 5, 6})
    if (t[k].dtype != AMPRT_I64 || amprt_tensor_numel(&t[k]) != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: update_scale's trackers must be i64 []");
  for (int k : {0, 4})
    if (t[k].dtype != AMPRT_F32 || amprt_tensor_numel(&t[k]) != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: update_scale's scale must be f32 []");
  if (t[3].dtype != AMPRT_I1 || amprt_tensor_numel(&t[3]) != 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: update_scale's flag must be i1 []");
  const int64_t *a = d.attrs;
  cfg = amprt_scaler_config{(float)attrF(a, 0), (float)attrF(a, 1), (int32_t)a[2], (int32_t)a[3],
                            (float)attrF(a, 4)};
  errorAtMin = a[5] != 0;
  return AMPRT_OK;
}

/// micro_step: every; tensors micro_step (i64 []), apply (i1 []), next.
inline amprt_status microStepAttrs(const Decoded &d, int64_t &every) {
  AMPRT_CHECK(need(d, 3, 1, "micro_step"));
  const auto &t = d.t;
  if (t[0].dtype != AMPRT_I64 || t[2].dtype != AMPRT_I64 || t[1].dtype != AMPRT_I1 ||
      amprt_tensor_numel(&t[0]) != 1 || amprt_tensor_numel(&t[1]) != 1 ||
      amprt_tensor_numel(&t[2]) != 1 || d.attrs[0] < 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt micro_step");
  every = d.attrs[0];
  return AMPRT_OK;
}

} // namespace amprt::desc

#endif // AMPRT_EXEC_DECODE_H
