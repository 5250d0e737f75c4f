//===- elementwise.cuh - element-wise functors and 16-byte groups ---------===//
//
// The element-wise functors (unary, binary, where, copies, casts) and the
// machinery that runs float ops eight elements at a time with 16-byte loads
// and stores where the views allow; shared by the element-wise ops and the
// families that apply them (matrix products' epilogues, dropout's cast,
// reductions' vector loads).
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CUDA_ELEMENTWISE_CUH
#define AMPRT_CUDA_ELEMENTWISE_CUH

#include "backend.cuh"

namespace amprt::cuda {

using namespace amprt::ops;

//--- Element-wise ----------------------------------------------------------------

struct UnaryF {
  View x, y;
  int32_t op;
  float alpha, beta;
  HD void operator()(int64_t i) const {
    int64_t xo = x.at(i), yo = y.at(i);
    if (floatType(y.dtype)) {
      stF(y.data, y.dtype, yo, applyUnary(op, ldF(x.data, x.dtype, xo), alpha, beta));
    } else {
      int64_t v = ldI(x.data, x.dtype, xo);
      stI(y.data, y.dtype, yo, op == AMPRT_UNARY_RELU && v < 0 ? 0 : v);
    }
  }
};

struct UnaryGradF {
  View x, dy, dx;
  int32_t op;
  float alpha, beta;
  HD void operator()(int64_t i) const {
    float xv = ldF(x.data, x.dtype, x.at(i)), g = ldF(dy.data, dy.dtype, dy.at(i));
    stF(dx.data, dx.dtype, dx.at(i), g * unaryDerivative(op, xv, alpha, beta));
  }
};

struct BinaryF {
  View a, b, y;
  int32_t op;
  DeviceError *err;
  HD void operator()(int64_t i) const {
    int64_t ao = a.at(i), bo = b.at(i), yo = y.at(i);
    if (isCompare(op)) {
      bool r = floatType(a.dtype)
                   ? compareOp<float>(op, ldF(a.data, a.dtype, ao), ldF(b.data, b.dtype, bo))
                   : compareOp<int64_t>(op, ldI(a.data, a.dtype, ao), ldI(b.data, b.dtype, bo));
      reinterpret_cast<uint8_t *>(y.data)[yo] = r ? 1 : 0;
      return;
    }
    if (floatType(y.dtype)) {
      stF(y.data, y.dtype, yo, binaryF(op, ldF(a.data, a.dtype, ao), ldF(b.data, b.dtype, bo)));
      return;
    }
    bool divByZero = false;
    int64_t r = binaryI(op, ldI(a.data, a.dtype, ao), ldI(b.data, b.dtype, bo), &divByZero);
    if (divByZero)
      recordError(err, ERR_INT_DIV_ZERO, 0, 0, 0);
    stI(y.data, y.dtype, yo, r);
  }
};

HD inline void copyElement(char *dst, const char *src, int64_t es) {
  switch (es) {
  case 1:
    *dst = *src;
    break;
  case 2:
    *reinterpret_cast<uint16_t *>(dst) = *reinterpret_cast<const uint16_t *>(src);
    break;
  case 4:
    *reinterpret_cast<uint32_t *>(dst) = *reinterpret_cast<const uint32_t *>(src);
    break;
  default:
    *reinterpret_cast<uint64_t *>(dst) = *reinterpret_cast<const uint64_t *>(src);
    break;
  }
}

struct WhereF {
  View c, a, b, y;
  int64_t es;
  HD void operator()(int64_t i) const {
    bool take = reinterpret_cast<const uint8_t *>(c.data)[c.at(i)] != 0;
    const char *src = take ? a.data + a.at(i) * es : b.data + b.at(i) * es;
    copyElement(y.data + y.at(i) * es, src, es);
  }
};

/// Element i of x (row-major in x's shape) to element i of y (row-major in
/// y's): strided copies, reshapes of strided data.
struct CopyF {
  View x, y;
  int64_t es;
  HD void operator()(int64_t i) const {
    copyElement(y.data + y.at(i) * es, x.data + x.at(i) * es, es);
  }
};

struct CastF {
  View x, y;
  HD void operator()(int64_t i) const {
    int64_t xo = x.at(i), yo = y.at(i);
    if (y.dtype == AMPRT_I1) {
      bool nz =
          floatType(x.dtype) ? ldF(x.data, x.dtype, xo) != 0.0f : ldI(x.data, x.dtype, xo) != 0;
      stI(y.data, y.dtype, yo, nz);
    } else if (floatType(y.dtype)) {
      float v =
          floatType(x.dtype) ? ldF(x.data, x.dtype, xo) : (float)(double)ldI(x.data, x.dtype, xo);
      stF(y.data, y.dtype, yo, v);
    } else if (floatType(x.dtype)) {
      stI(y.data, y.dtype, yo, floatToInt(ldF(x.data, x.dtype, xo)));
    } else {
      stI(y.data, y.dtype, yo, ldI(x.data, x.dtype, xo));
    }
  }
};

//--- Element-wise in groups of 16-byte accesses ----------------------------------
//
// The float element-wise ops (unary, its gradient, binary, float casts) over
// operands whose elements come in runs of kVec: one thread per group of
// kVec consecutive output elements, each dense operand read with one or two
// 16-byte loads (f16 / bf16: one, f32: two) and the output written so; a
// broadcast operand whose group is one element (a stride 0 innermost) read
// once. The per-element formulas are the scalar kernels' (results bit for
// bit the same); the last, partial group goes element by element.

constexpr int kVec = 8;
enum VecMode : int32_t { VEC_NONE = 0, VEC_DENSE = 1, VEC_SPLAT = 2 };

/// How a flattened view can be read in groups of kVec consecutive elements
/// (of the output's order): every group within one run of the innermost
/// dim, dense ones 16-byte aligned.
inline VecMode vecMode(const View &v) {
  if (!floatType(v.dtype))
    return VEC_NONE;
  if (v.rank == 0)
    return VEC_SPLAT;
  int32_t in = v.rank - 1;
  if (v.rank > 1 && v.shape[in] % kVec)
    return VEC_NONE;
  if (v.strides[in] == 0)
    return VEC_SPLAT;
  if (v.strides[in] != 1 || reinterpret_cast<uintptr_t>(v.data) % 16)
    return VEC_NONE;
  for (int32_t d = 0; d < in; ++d)
    if (v.strides[d] % kVec)
      return VEC_NONE;
  return VEC_DENSE;
}

#ifndef __CUDA_ARCH__
/// Emulated, a 16-byte access the device could not make stops the process
/// (on the device it is a misaligned-address fault).
inline void misaligned16(const void *p) {
  if (reinterpret_cast<uintptr_t>(p) % 16) {
    std::fprintf(stderr, "amprt (cuda, emulated): a 16-byte access at %p is not 16-byte aligned\n",
                 p);
    std::abort();
  }
}
#endif

/// The 16-bit element k of 32-bit words (little-endian, as memory has it).
HD inline uint32_t half16(const uint32_t *w, int k) {
  return (w[k >> 1] >> (16 * (k & 1))) & 0xffffu;
}

/// The kVec float elements of type t at element offset o of data, where
/// they lie in 16-byte aligned memory: one or two 16-byte loads.
HD inline void loadRun8(const char *data, int32_t t, int64_t o, float *out) {
  bool f32 = t == AMPRT_F32;
  const char *p = data + o * (f32 ? 4 : 2);
  uint32_t w[kVec];
#ifdef __CUDA_ARCH__
  uint4 a = reinterpret_cast<const uint4 *>(p)[0];
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
  if (f32) {
    uint4 b = reinterpret_cast<const uint4 *>(p)[1];
    w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  }
#else
  misaligned16(p);
  std::memcpy(w, p, f32 ? 32 : 16);
#endif
#pragma unroll
  for (int k = 0; k < kVec; ++k)
    out[k] = f32              ? floatOf(w[k])
             : t == AMPRT_F16 ? floatOf(bits::f16ToF32((uint16_t)half16(w, k)))
                              : floatOf(bits::bf16ToF32((uint16_t)half16(w, k)));
}

/// Elements [i0, i0 + kVec) of v (mode != VEC_NONE) as floats.
HD inline void load8(const View &v, int32_t mode, int64_t i0, float *out) {
  int64_t o = v.at(i0);
  if (mode == VEC_SPLAT) {
    float s = ldF(v.data, v.dtype, o);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      out[k] = s;
    return;
  }
  loadRun8(v.data, v.dtype, o, out);
}

/// Stores val into elements [i0, i0 + kVec) of a VEC_DENSE view.
HD inline void store8(const View &v, int64_t i0, const float *val) {
  bool f32 = v.dtype == AMPRT_F32;
  char *p = v.data + v.at(i0) * (f32 ? 4 : 2);
  uint32_t w[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (f32) {
      w[k] = bitsOf(val[k]);
    } else {
      uint32_t h =
          v.dtype == AMPRT_F16 ? bits::f32ToF16(bitsOf(val[k])) : bits::f32ToBf16(bitsOf(val[k]));
      w[k >> 1] = (k & 1) ? (w[k >> 1] | (h << 16)) : h;
    }
  }
#ifdef __CUDA_ARCH__
  reinterpret_cast<uint4 *>(p)[0] = make_uint4(w[0], w[1], w[2], w[3]);
  if (f32)
    reinterpret_cast<uint4 *>(p)[1] = make_uint4(w[4], w[5], w[6], w[7]);
#else
  misaligned16(p);
  std::memcpy(p, w, f32 ? 32 : 16);
#endif
}

/// y[i] = op(in[0][i], ..., in[N-1][i]) in groups of kVec (index = group).
template <int N, class Op> struct Vec8F {
  View in[N], y;
  int32_t mode[N];
  int64_t n;
  Op op;
  HD void operator()(int64_t g) const {
    int64_t i0 = g * kVec;
    if (i0 + kVec <= n) {
      float v[N][kVec], r[kVec];
#pragma unroll
      for (int j = 0; j < N; ++j)
        load8(in[j], mode[j], i0, v[j]);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        float a[N];
#pragma unroll
        for (int j = 0; j < N; ++j)
          a[j] = v[j][k];
        r[k] = op(a);
      }
      store8(y, i0, r);
      return;
    }
    for (int64_t i = i0; i < n; ++i) {
      float a[N];
      for (int j = 0; j < N; ++j)
        a[j] = ldF(in[j].data, in[j].dtype, in[j].at(i));
      stF(y.data, y.dtype, y.at(i), op(a));
    }
  }
};

struct UnaryOp {
  int32_t op;
  float alpha, beta;
  HD float operator()(const float *a) const { return applyUnary<false>(op, a[0], alpha, beta); }
};
struct UnaryGradOp {
  int32_t op;
  float alpha, beta;
  HD float operator()(const float *a) const {
    return a[1] * unaryDerivative<false>(op, a[0], alpha, beta);
  }
};
struct BinaryOp {
  int32_t op;
  HD float operator()(const float *a) const { return binaryF(op, a[0], a[1]); }
};
struct CastOp {
  HD float operator()(const float *a) const { return a[0]; }
};

/// The grouped launch of op over the flattened views in -> y when every
/// operand allows it (else *done = false and nothing runs).
template <int N, class Op>
amprt_status eachVec8(Dev &d, const View (&in)[N], const View &y, int64_t n, const Op &op,
                      const char *what, bool *done) {
  *done = false;
  if (!d.vec || n < kVec || vecMode(y) != VEC_DENSE)
    return AMPRT_OK;
  Vec8F<N, Op> f;
  for (int j = 0; j < N; ++j) {
    f.in[j] = in[j];
    f.mode[j] = vecMode(in[j]);
    if (f.mode[j] == VEC_NONE)
      return AMPRT_OK;
  }
  f.y = y;
  f.n = n;
  f.op = op;
  *done = true;
  return each(&d, (n + kVec - 1) / kVec, f, what);
}

struct FillZeroF {
  char *p;
  HD void operator()(int64_t i) const { p[i] = 0; }
};

} // namespace amprt::cuda

#endif // AMPRT_CUDA_ELEMENTWISE_CUH
