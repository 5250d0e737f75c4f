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

#include "amprt/amprt_ops.hpp"
#include "common/check.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace amprt::desc {

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

/// A descriptor whose attributes or tensor count do not fit its opcode.
inline amprt_status corrupt(const char *op, const char *what, long long got, long long want) {
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec: corrupt %s descriptor: %s %lld, expected %lld", op, what, got, want);
}

inline amprt_status outOfRange(const char *op, const char *field, long long v, long long lo,
                               long long hi) {
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec: corrupt %s descriptor: %s = %lld outside [%lld, %lld]", op, field, v, lo,
              hi);
}

// read(d, a): the attributes of `d` into the opcode's struct (amprt_ops.hpp),
// generated from amprt_ops.def: every count in range, no word missing or
// left over, and the tensor count the fields imply.
#define I64(x)                                                                                     \
  if (i >= na)                                                                                     \
    return corrupt(op, "attribute count", na, i + 1);                                              \
  a.x = w[i++];
#define I64_IN(x, lo, hi)                                                                          \
  I64(x) if (a.x < (lo) || a.x > (hi)) return outOfRange(op, #x, a.x, (lo), (hi));
#define F64(x)                                                                                     \
  if (i >= na)                                                                                     \
    return corrupt(op, "attribute count", na, i + 1);                                              \
  a.x = attrs::bitsF64(w[i++]);
#define OPT_I64(x)                                                                                 \
  if (i < na)                                                                                      \
    a.x = w[i++];
#define OPT_F64(x)                                                                                 \
  if (i < na)                                                                                      \
    a.x = attrs::bitsF64(w[i++]);
#define LIST(x, n, max)                                                                            \
  if (a.n < 0 || a.n > (max) || na - i < a.n)                                                      \
    return corrupt(op, #n, a.n, na - i);                                                           \
  for (int64_t k = 0; k < a.n; ++k)                                                                \
    a.x[k] = w[i++];
#define CONV_WINDOW(n)                                                                             \
  if (a.n < 1 || a.n > attrs::kMaxSpatial || na - i < 4 * a.n)                                     \
    return corrupt(op, #n, a.n, attrs::kMaxSpatial);                                               \
  for (int64_t k = 0; k < a.n; ++k) {                                                              \
    a.stride[k] = w[i++];                                                                          \
    a.dilation[k] = w[i++];                                                                        \
    a.pad_begin[k] = w[i++];                                                                       \
    a.pad_end[k] = w[i++];                                                                         \
  }
#define POOL_WINDOW(n)                                                                             \
  if (a.n < 1 || a.n > attrs::kMaxSpatial || na - i < 5 * a.n)                                     \
    return corrupt(op, #n, a.n, attrs::kMaxSpatial);                                               \
  for (int64_t k = 0; k < a.n; ++k) {                                                              \
    a.kernel[k] = w[i++];                                                                          \
    a.stride[k] = w[i++];                                                                          \
    a.dilation[k] = w[i++];                                                                        \
    a.pad_begin[k] = w[i++];                                                                       \
    a.pad_end[k] = w[i++];                                                                         \
  }
#define AMPRT_OPCODE(NAME, VALUE, name, fields, ntensors, tensors, notes)                          \
  inline amprt_status read(const Decoded &d, attrs::name &a) {                                     \
    const char *op = #name;                                                                        \
    if (d.opcode != AMPRT_OP_##NAME)                                                               \
      return corrupt(op, "opcode", d.opcode, AMPRT_OP_##NAME);                                     \
    [[maybe_unused]] const int64_t *w = d.attrs;                                                   \
    int64_t na = d.nattrs, i = 0;                                                                  \
    a = attrs::name{};                                                                             \
    fields if (i != na) return corrupt(op, "attribute count", na, i);                              \
    int64_t want = tensorCount(a), got = (int64_t)d.t.size();                                      \
    if (want >= 0 ? got != want : got < -want)                                                     \
      return corrupt(op, want >= 0 ? "tensor count" : "tensor count (at least)", got,              \
                     want >= 0 ? want : -want);                                                    \
    return AMPRT_OK;                                                                               \
  }
#include "amprt/amprt_ops.def"
#include "amprt/amprt_ops_undef.h"

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
/// totals per opcode, then per kernel implementation where the ops named
/// theirs: oneDNN's, such as "brg:avx512_core_amx") to stderr, or appended
/// to the file AMPRT_PROFILE_OUT names.
struct ProfileTable {
  struct Entry {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Entry> byOp, byImpl;
  void add(const std::string &key, double seconds, const std::string &impl = "") {
    Entry &e = byOp[impl.empty() ? key : key + " [" + impl + "]"];
    e.seconds += seconds;
    ++e.calls;
    Entry &i = byImpl[impl.empty() ? "(ours)" : impl];
    i.seconds += seconds;
    ++i.calls;
  }
  void print(const char *where) const {
    const char *to = std::getenv("AMPRT_PROFILE_OUT");
    FILE *out = to && *to ? std::fopen(to, "a") : nullptr;
    printTo(out ? out : stderr, where);
    if (out)
      std::fclose(out);
  }
  void printTo(FILE *f, const char *where) const {
    double total = 0;
    for (auto &[k, e] : byOp)
      total += e.seconds;
    std::fprintf(f, "amprt profile%s: %.3f ms in kernels\n", where, total * 1e3);
    // AMPRT_PROFILE_TOP=n: the n largest (0: all), 40 by default.
    const char *top = std::getenv("AMPRT_PROFILE_TOP");
    long lines = top && *top ? std::strtol(top, nullptr, 10) : 40;
    printSorted(f, byOp, total, lines > 0 ? (size_t)lines : byOp.size());
    std::map<std::string, Entry> perOpcode; // the key's name, before its shapes
    for (auto &[k, e] : byOp) {
      Entry &t = perOpcode[k.substr(0, k.find(' '))];
      t.seconds += e.seconds;
      t.calls += e.calls;
    }
    std::fprintf(f, "amprt profile%s by opcode:\n", where);
    printSorted(f, perOpcode, total);
    if (byImpl.size() > 1 || !byImpl.count("(ours)")) {
      std::fprintf(f, "amprt profile%s by kernel implementation:\n", where);
      printSorted(f, byImpl, total);
    }
  }
  /// One line per entry, the largest first (at most `limit`).
  static void printSorted(FILE *f, const std::map<std::string, Entry> &m, double total,
                          size_t limit = SIZE_MAX) {
    std::vector<std::pair<double, std::string>> rows;
    for (auto &[k, e] : m)
      rows.push_back({e.seconds, k});
    std::sort(rows.rbegin(), rows.rend());
    for (size_t i = 0; i < rows.size() && i < limit; ++i)
      std::fprintf(f, "  %6.2f%%  %9.3f ms  %7lld calls  %s\n", 100 * rows[i].first / total,
                   rows[i].first * 1e3, (long long)m.at(rows[i].second).calls,
                   rows[i].second.c_str());
  }
};

inline bool profilingRequested() {
  static const bool on = std::getenv("AMPRT_PROFILE") && *std::getenv("AMPRT_PROFILE") != '0';
  return on;
}

/// An axis field as the kernels take it: out of range (> AMPRT_MAX_RANK or
/// negative) as -1, which every kernel refuses.
inline int32_t axisField(int64_t v) { return v < 0 || v > AMPRT_MAX_RANK ? -1 : (int32_t)v; }

/// The convolution parameters of conv, conv_bn and conv_grad's fields.
template <typename ConvFields> amprt_conv_params convParams(const ConvFields &a) {
  amprt_conv_params p{};
  p.spatial = (int32_t)a.spatial;
  p.group = a.group;
  for (int64_t i = 0; i < a.spatial; ++i) {
    p.strides[i] = a.stride[i];
    p.dilations[i] = a.dilation[i];
    p.pads_begin[i] = a.pad_begin[i];
    p.pads_end[i] = a.pad_end[i];
  }
  return p;
}

/// conv_grad: the convolution, and which of dx, dw, db are wanted.
inline amprt_status convGradParams(const Decoded &d, amprt_conv_params &p, bool want[3],
                                   bool *checkDw = nullptr) {
  attrs::conv_grad a;
  AMPRT_CHECK(read(d, a));
  p = convParams(a);
  want[0] = a.want_dx != 0;
  want[1] = a.want_dw != 0;
  want[2] = a.want_db != 0;
  if (checkDw)
    *checkDw = a.check_dw.value_or(0) != 0;
  return AMPRT_OK;
}

/// A pool's parameters (max_pool, average_pool, average_pool_grad); a max
/// pool's storage order, whether its indices are wanted, whether x and y are
/// channel-blocked.
struct PoolAttrs {
  amprt_pool_params p;
  bool wantIndices = false, blocked = false;
};
template <typename PoolFields> amprt_pool_params poolParams(const PoolFields &a) {
  amprt_pool_params p{};
  p.spatial = (int32_t)a.spatial;
  p.count_include_pad = (int32_t)a.count_include_pad;
  for (int64_t i = 0; i < a.spatial; ++i) {
    p.kernel[i] = a.kernel[i];
    p.strides[i] = a.stride[i];
    p.dilations[i] = a.dilation[i];
    p.pads_begin[i] = a.pad_begin[i];
    p.pads_end[i] = a.pad_end[i];
  }
  return p;
}
inline amprt_status poolAttrs(const Decoded &d, PoolAttrs &pa) {
  pa = PoolAttrs{};
  if (d.opcode == AMPRT_OP_MAX_POOL) {
    attrs::max_pool a;
    AMPRT_CHECK(read(d, a));
    pa.p = poolParams(a);
    pa.p.storage_order = (int32_t)a.storage_order;
    // The indices are skipped when the compiler says nothing reads them.
    pa.wantIndices = a.want_indices.value_or(1) != 0;
    pa.blocked = a.blocked.value_or(0) != 0;
    if (pa.blocked && pa.wantIndices)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec: a channel-blocked max pool has no indices");
    return AMPRT_OK;
  }
  if (d.opcode == AMPRT_OP_AVERAGE_POOL) {
    attrs::average_pool a;
    AMPRT_CHECK(read(d, a));
    pa.p = poolParams(a);
    return AMPRT_OK;
  }
  attrs::average_pool_grad a;
  AMPRT_CHECK(read(d, a));
  pa.p = poolParams(a);
  return AMPRT_OK;
}

/// The losses' fields: reduction, has_ignore, ignore_index, has_weights;
/// tensors in, labels, [w], then (forward) loss, [log_prob] or (gradient)
/// dloss, dinput. `out` is the index of the first tensor after [w].
struct LossAttrs {
  amprt_reduction reduction = AMPRT_REDUCTION_NONE;
  int hasIgnore = 0;
  int64_t ignore = 0;
  bool hasWeights = false, softmax = false;
  size_t out = 0;
};
template <typename LossFields> amprt_status lossFrom(const Decoded &d, LossAttrs &la) {
  LossFields a;
  AMPRT_CHECK(read(d, a));
  la.reduction = (amprt_reduction)a.reduction;
  la.hasIgnore = (int)a.has_ignore;
  la.ignore = a.ignore_index;
  la.hasWeights = a.has_weights != 0;
  la.out = la.hasWeights ? 3 : 2;
  return AMPRT_OK;
}
/// lossAttrs: softmax_cross_entropy, nll_loss (grad false) or their
/// gradients (grad true).
inline amprt_status lossAttrs(const Decoded &d, bool grad, LossAttrs &la) {
  la = LossAttrs{};
  la.softmax =
      d.opcode == AMPRT_OP_SOFTMAX_CROSS_ENTROPY || d.opcode == AMPRT_OP_SOFTMAX_CROSS_ENTROPY_GRAD;
  if (grad)
    return la.softmax ? lossFrom<attrs::softmax_cross_entropy_grad>(d, la)
                      : lossFrom<attrs::nll_loss_grad>(d, la);
  return la.softmax ? lossFrom<attrs::softmax_cross_entropy>(d, la)
                    : lossFrom<attrs::nll_loss>(d, la);
}

/// The step counter (i64 []) and found_inf (i1 []) of an update.
inline amprt_status checkStepAndFlag(const amprt_tensor &step, const amprt_tensor &flag) {
  if (step.dtype != AMPRT_I64 || amprt_tensor_numel(&step) != 1 || flag.dtype != AMPRT_I1 ||
      amprt_tensor_numel(&flag) != 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec: the step must be i64 [] and found_inf i1 []");
  return AMPRT_OK;
}

/// sgd_update: tensors param, grad, [buf], step, found_inf, new_param,
/// [new_buf], [new_param_lowp]; `o` indexes step; `lowp`: the index of
/// new_param_lowp, or 0.
inline amprt_status sgdAttrs(const Decoded &d, amprt_sgd_config &cfg, bool &buf, size_t &o,
                             size_t &lowp) {
  attrs::sgd_update a;
  AMPRT_CHECK(read(d, a));
  buf = a.has_buf != 0;
  o = buf ? 3 : 2;
  lowp = a.lowp.value_or(0) ? d.t.size() - 1 : 0;
  AMPRT_CHECK(checkStepAndFlag(d.t[o], d.t[o + 1]));
  cfg = amprt_sgd_config{(float)a.lr, (float)a.momentum, (float)a.dampening, (float)a.wd,
                         (int32_t)a.nesterov};
  return AMPRT_OK;
}

/// adam_update: tensors param, grad, m, v, step, found_inf, new_param, new_m,
/// new_v, [new_param_lowp]; `lowp` as sgdAttrs'.
inline amprt_status adamAttrs(const Decoded &d, amprt_adam_config &cfg, size_t &lowp) {
  attrs::adam_update a;
  AMPRT_CHECK(read(d, a));
  lowp = a.lowp.value_or(0) ? 9 : 0;
  AMPRT_CHECK(checkStepAndFlag(d.t[4], d.t[5]));
  cfg = amprt_adam_config{(float)a.lr,  (float)a.beta1, (float)a.beta2,
                          (float)a.eps, (float)a.wd,    (int32_t)a.decoupled};
  return AMPRT_OK;
}

/// unscale_and_check (grads[n], scale, outs[n], found_inf) and
/// clip_grad_norm (grads[n], found_inf, outs[n], norm): n, and clip's
/// max_norm.
inline amprt_status multiTensorCount(const Decoded &d, size_t &n, double *maxNorm = nullptr) {
  bool unscale = d.opcode == AMPRT_OP_UNSCALE_AND_CHECK;
  if (unscale) {
    attrs::unscale_and_check a;
    AMPRT_CHECK(read(d, a));
    n = (size_t)a.n;
  } else {
    attrs::clip_grad_norm a;
    AMPRT_CHECK(read(d, a));
    n = (size_t)a.n;
    if (maxNorm)
      *maxNorm = a.max_norm;
  }
  const amprt_tensor &scalar = unscale ? d.t[n] : d.t[2 * n + 1];
  const amprt_tensor &flag = unscale ? d.t[2 * n + 1] : d.t[n];
  if (scalar.dtype != AMPRT_F32 || amprt_tensor_numel(&scalar) != 1 || flag.dtype != AMPRT_I1 ||
      amprt_tensor_numel(&flag) != 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: %s needs an f32 [] %s and an i1 [] flag",
                unscale ? "unscale_and_check" : "clip_grad_norm", unscale ? "scale" : "norm");
  return AMPRT_OK;
}

/// update_scale: tensors scale, tracker, hysteresis_left, found_inf,
/// new_scale, new_tracker, new_hysteresis_left.
inline amprt_status updateScaleAttrs(const Decoded &d, amprt_scaler_config &cfg, bool &errorAtMin) {
  attrs::update_scale a;
  AMPRT_CHECK(read(d, a));
  const auto &t = d.t;
  for (int k : {1, 2, 5, 6})
    if (t[k].dtype != AMPRT_I64 || amprt_tensor_numel(&t[k]) != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: update_scale's trackers must be i64 []");
  for (int k : {0, 4})
    if (t[k].dtype != AMPRT_F32 || amprt_tensor_numel(&t[k]) != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: update_scale's scale must be f32 []");
  if (t[3].dtype != AMPRT_I1 || amprt_tensor_numel(&t[3]) != 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: update_scale's flag must be i1 []");
  cfg = amprt_scaler_config{(float)a.growth_factor, (float)a.backoff_factor,
                            (int32_t)a.growth_interval, (int32_t)a.hysteresis, (float)a.min_scale};
  errorAtMin = a.error_at_min != 0;
  return AMPRT_OK;
}

/// micro_step: tensors micro_step (i64 []), apply (i1 []), next.
inline amprt_status microStepAttrs(const Decoded &d, int64_t &every) {
  attrs::micro_step a;
  AMPRT_CHECK(read(d, a));
  const auto &t = d.t;
  if (t[0].dtype != AMPRT_I64 || t[2].dtype != AMPRT_I64 || t[1].dtype != AMPRT_I1 ||
      amprt_tensor_numel(&t[0]) != 1 || amprt_tensor_numel(&t[1]) != 1 ||
      amprt_tensor_numel(&t[2]) != 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt micro_step");
  every = a.every;
  return AMPRT_OK;
}

} // namespace amprt::desc

#endif // AMPRT_EXEC_DECODE_H
