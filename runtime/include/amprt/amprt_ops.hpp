//===- amprt_ops.hpp - typed descriptor attributes, from amprt_ops.def ---*- C++ -*-===//
//
// Generated from the opcode table (amprt/amprt_ops.def) by the preprocessor:
// one struct per opcode in namespace amprt::attrs, named like the opcode
// (amprt::attrs::conv, amprt::attrs::sgd_update), holding its attribute fields;
//
//   tensorCount(a)   the number of tensors the descriptor must carry
//                    (negative: at least -n)
//   encode(a, out)   appends the attribute words to `out` (push_back);
//                    false when a count field is out of its range
//
// The compiler (amp-lower-to-runtime) fills a struct and encodes it; the
// executors decode descriptors into the same structs, checked
// (runtime/lib/cpu/exec_decode.h, amprt::desc::read). Neither side writes
// a layout by hand.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_OPS_HPP
#define AMPRT_OPS_HPP

#include "amprt/amprt.h"

#include <cstdint>
#include <cstring>
#include <optional>

#if defined(I64) || defined(I64_IN) || defined(F64) || defined(OPT_I64) || defined(OPT_F64) ||     \
    defined(LIST) || defined(CONV_WINDOW) || defined(POOL_WINDOW)
#error "amprt_ops.hpp: the table's field macros are already defined"
#endif

namespace amprt::attrs {

inline int64_t f64Bits(double v) {
  int64_t bits;
  std::memcpy(&bits, &v, 8);
  return bits;
}

inline double bitsF64(int64_t bits) {
  double v;
  std::memcpy(&v, &bits, 8);
  return v;
}

/// The most spatial dims of a window op.
constexpr int kMaxSpatial = 3;

// The structs: one member per field.
#define I64(x) int64_t x = 0;
#define I64_IN(x, lo, hi) int64_t x = 0;
#define F64(x) double x = 0;
#define OPT_I64(x) std::optional<int64_t> x;
#define OPT_F64(x) std::optional<double> x;
#define LIST(x, n, max) int64_t x[max] = {};
#define CONV_WINDOW(n)                                                                             \
  int64_t stride[kMaxSpatial] = {}, dilation[kMaxSpatial] = {}, pad_begin[kMaxSpatial] = {},       \
          pad_end[kMaxSpatial] = {};
#define POOL_WINDOW(n)                                                                             \
  int64_t kernel[kMaxSpatial] = {};                                                                \
  CONV_WINDOW(n)
#define AMPRT_VARIADIC(k) (-(k))
#define AMPRT_OPCODE(NAME, VALUE, name, fields, ntensors, tensors, notes)                          \
  struct name {                                                                                    \
    static constexpr amprt_opcode opcode = AMPRT_OP_##NAME;                                        \
    static constexpr const char *label = #name;                                                    \
    fields                                                                                         \
  };                                                                                               \
  inline int64_t tensorCount([[maybe_unused]] const name &a) { return (ntensors); }
#include "amprt/amprt_ops.def"
#include "amprt/amprt_ops_undef.h"

// The encoders: the fields' words in order; an absent optional field ends
// the descriptor (the ones after it are absent too).
#define I64(x) out.push_back(a.x);
#define I64_IN(x, lo, hi)                                                                          \
  if (a.x < (lo) || a.x > (hi))                                                                    \
    return false;                                                                                  \
  out.push_back(a.x);
#define F64(x) out.push_back(f64Bits(a.x));
#define OPT_I64(x)                                                                                 \
  if (!a.x)                                                                                        \
    return true;                                                                                   \
  out.push_back(*a.x);
#define OPT_F64(x)                                                                                 \
  if (!a.x)                                                                                        \
    return true;                                                                                   \
  out.push_back(f64Bits(*a.x));
#define LIST(x, n, max)                                                                            \
  if (a.n < 0 || a.n > (max))                                                                      \
    return false;                                                                                  \
  for (int64_t k = 0; k < a.n; ++k)                                                                \
    out.push_back(a.x[k]);
#define CONV_WINDOW(n)                                                                             \
  if (a.n < 1 || a.n > kMaxSpatial)                                                                \
    return false;                                                                                  \
  for (int64_t k = 0; k < a.n; ++k) {                                                              \
    out.push_back(a.stride[k]);                                                                    \
    out.push_back(a.dilation[k]);                                                                  \
    out.push_back(a.pad_begin[k]);                                                                 \
    out.push_back(a.pad_end[k]);                                                                   \
  }
#define POOL_WINDOW(n)                                                                             \
  if (a.n < 1 || a.n > kMaxSpatial)                                                                \
    return false;                                                                                  \
  for (int64_t k = 0; k < a.n; ++k) {                                                              \
    out.push_back(a.kernel[k]);                                                                    \
    out.push_back(a.stride[k]);                                                                    \
    out.push_back(a.dilation[k]);                                                                  \
    out.push_back(a.pad_begin[k]);                                                                 \
    out.push_back(a.pad_end[k]);                                                                   \
  }
#define AMPRT_OPCODE(NAME, VALUE, name, fields, ntensors, tensors, notes)                          \
  template <typename Words>                                                                        \
  bool encode([[maybe_unused]] const name &a, [[maybe_unused]] Words &out) {                       \
    fields return true;                                                                            \
  }
#include "amprt/amprt_ops.def"
#include "amprt/amprt_ops_undef.h"
#undef AMPRT_VARIADIC

} // namespace amprt::attrs

#endif // AMPRT_OPS_HPP
