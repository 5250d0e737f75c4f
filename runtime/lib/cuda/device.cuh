//===- device.cuh - the CUDA backend's launch helpers and shared kernels ---===//
//
// Every kernel of the CUDA backend is a functor with a __host__ __device__
// call operator over one index: `each(dev, n, f)` runs it on the GPU (a
// grid-stride loop on the context's stream) or, on an emulated context
// (AMPRT_CUDA_EMULATE=1), in a loop on the host over host memory. So the
// executor's kernels, its descriptor handling and the runner's device path
// are checked on machines without a GPU, with the very code the GPU runs.
//
// The arithmetic mirrors the CPU runtime (runtime/lib/cpu): f32 compute,
// one rounding on store, sums in double; the library is compiled without
// FMA contraction (-fmad=false), so casts, the loss-scaling kernels and the
// optimizer steps agree with the CPU bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CUDA_DEVICE_CUH
#define AMPRT_CUDA_DEVICE_CUH

#include "amprt/amprt_cuda.h"

#include "common/check.h"
#include "common/convert_bits.h"
#include "host/threads.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#define HD __host__ __device__

namespace amprt::cuda {

amprt_status cudaFail(cudaError_t e, const char *what);

#define CUDA_CHECK(call, what)                                                                     \
  do {                                                                                             \
    amprt_status s_ = ::amprt::cuda::cudaFail((call), what);                                       \
    if (s_ != AMPRT_OK)                                                                            \
      return s_;                                                                                   \
  } while (0)

//--- Scalars ----------------------------------------------------------------

HD inline uint32_t bitsOf(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
HD inline float floatOf(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
HD inline bool nonFinite(float v) { return (bitsOf(v) & 0x7f800000u) == 0x7f800000u; }
HD inline bool isNaN(float v) { return v != v; }
HD inline bool isNaN(double v) { return v != v; }

HD inline float ldF(const void *p, int32_t t, int64_t i) {
  switch (t) {
  case AMPRT_F32:
    return static_cast<const float *>(p)[i];
  case AMPRT_F16:
    return floatOf(bits::f16ToF32(static_cast<const uint16_t *>(p)[i]));
  case AMPRT_BF16:
    return floatOf(bits::bf16ToF32(static_cast<const uint16_t *>(p)[i]));
  case AMPRT_I1:
    return static_cast<const uint8_t *>(p)[i] ? 1.0f : 0.0f;
  case AMPRT_I8:
    return static_cast<const int8_t *>(p)[i];
  case AMPRT_I16:
    return static_cast<const int16_t *>(p)[i];
  case AMPRT_I32:
    return (float)static_cast<const int32_t *>(p)[i];
  case AMPRT_I64:
    return (float)static_cast<const int64_t *>(p)[i];
  case AMPRT_U8:
    return static_cast<const uint8_t *>(p)[i];
  case AMPRT_U16:
    return static_cast<const uint16_t *>(p)[i];
  case AMPRT_U32:
    return (float)static_cast<const uint32_t *>(p)[i];
  case AMPRT_U64:
    return (float)static_cast<const uint64_t *>(p)[i];
  default:
    return 0.0f;
  }
}

HD inline int64_t ldI(const void *p, int32_t t, int64_t i) {
  switch (t) {
  case AMPRT_I1:
    return static_cast<const uint8_t *>(p)[i] != 0;
  case AMPRT_I8:
    return static_cast<const int8_t *>(p)[i];
  case AMPRT_I16:
    return static_cast<const int16_t *>(p)[i];
  case AMPRT_I32:
    return static_cast<const int32_t *>(p)[i];
  case AMPRT_I64:
    return static_cast<const int64_t *>(p)[i];
  case AMPRT_U8:
    return static_cast<const uint8_t *>(p)[i];
  case AMPRT_U16:
    return static_cast<const uint16_t *>(p)[i];
  case AMPRT_U32:
    return static_cast<const uint32_t *>(p)[i];
  case AMPRT_U64:
    return (int64_t)static_cast<const uint64_t *>(p)[i];
  default:
    return (int64_t)ldF(p, t, i);
  }
}

HD inline void stF(void *p, int32_t t, int64_t i, float v) {
  switch (t) {
  case AMPRT_F32:
    static_cast<float *>(p)[i] = v;
    break;
  case AMPRT_F16:
    static_cast<uint16_t *>(p)[i] = bits::f32ToF16(bitsOf(v));
    break;
  case AMPRT_BF16:
    static_cast<uint16_t *>(p)[i] = bits::f32ToBf16(bitsOf(v));
    break;
  default:
    break;
  }
}

HD inline void stI(void *p, int32_t t, int64_t i, int64_t v) {
  switch (t) {
  case AMPRT_I1:
    static_cast<uint8_t *>(p)[i] = v != 0;
    break;
  case AMPRT_I8:
    static_cast<int8_t *>(p)[i] = (int8_t)v;
    break;
  case AMPRT_I16:
    static_cast<int16_t *>(p)[i] = (int16_t)v;
    break;
  case AMPRT_I32:
    static_cast<int32_t *>(p)[i] = (int32_t)v;
    break;
  case AMPRT_I64:
    static_cast<int64_t *>(p)[i] = v;
    break;
  case AMPRT_U8:
    static_cast<uint8_t *>(p)[i] = (uint8_t)v;
    break;
  case AMPRT_U16:
    static_cast<uint16_t *>(p)[i] = (uint16_t)v;
    break;
  case AMPRT_U32:
    static_cast<uint32_t *>(p)[i] = (uint32_t)v;
    break;
  case AMPRT_U64:
    static_cast<uint64_t *>(p)[i] = (uint64_t)v;
    break;
  default:
    stF(p, t, i, (float)v);
    break;
  }
}

/// *p += v: atomic on the device (threads may meet), in order on the host.
HD inline void addTo(float *p, float v) {
#ifdef __CUDA_ARCH__
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

HD inline bool floatType(int32_t t) { return t == AMPRT_F32 || t == AMPRT_F16 || t == AMPRT_BF16; }

//--- The context's device state ----------------------------------------------

/// An error a kernel found, in device memory; read by amprt_device_synchronize.
struct DeviceError {
  int32_t kind; // DeviceErrorKind; 0: none
  int32_t pad;
  int64_t a, b, c;
};
enum DeviceErrorKind {
  ERR_NONE = 0,
  ERR_LABEL = 1,          // a: label, b: position, c: classes
  ERR_INDEX = 2,          // a: index, b: limit
  ERR_MIN_SCALE = 3,      // an overflow at the scale's floor (on_min_scale=error)
  ERR_MIN_SCALE_WARN = 4, // the same with on_min_scale=warn
  ERR_MICRO_STEP = 5,     // a: the counter, b: the accumulation count
  ERR_INT_DIV_ZERO = 6,
  ERR_PROBABILITY = 7 // a: the value's f32 bits, b: position
};

/// Records the first error (a warning gives way to an error): many threads
/// may find one at once, so the record is claimed by a compare-and-swap on
/// `kind` and only its winner writes a, b, c (read after the kernels end).
HD inline void recordError(DeviceError *e, int32_t kind, int64_t a, int64_t b, int64_t c) {
  auto cas = [e](int32_t expect, int32_t want) {
#ifdef __CUDA_ARCH__
    return atomicCAS(reinterpret_cast<int *>(&e->kind), expect, want) == expect;
#else
    return __atomic_compare_exchange_n(&e->kind, &expect, want, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
#endif
  };
  bool won = cas(ERR_NONE, kind) || (kind != ERR_MIN_SCALE_WARN && cas(ERR_MIN_SCALE_WARN, kind));
  if (won) {
    e->a = a;
    e->b = b;
    e->c = c;
  }
}

struct Dev;

/// Whether `dev` runs its kernels on the host (AMPRT_CUDA_EMULATE=1).
bool emulated(const Dev &dev);
cudaStream_t streamOf(const Dev &dev);

//--- Launches ------------------------------------------------------------------

template <class F> __global__ void eachKernel(F f, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    f(i);
}

/// A grid of `blocks` blocks, at most 2^20 (the kernels loop over the rest).
inline unsigned gridOf(int64_t blocks) {
  return (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20));
}

/// f(i) for i in [0, n): on the device, or on the host when emulated.
template <class F> amprt_status each(const Dev *dev, int64_t n, const F &f, const char *what) {
  if (n <= 0)
    return AMPRT_OK;
  if (dev && emulated(*dev)) {
    for (int64_t i = 0; i < n; ++i)
      f(i);
    return AMPRT_OK;
  }
  eachKernel<<<gridOf((n + 255) / 256), 256, 0, dev ? streamOf(*dev) : nullptr>>>(f, n);
  return cudaFail(cudaGetLastError(), what);
}

//--- Row kernels: a thread or a warp per row --------------------------------------

constexpr int kWarp = 32;

/// The lanes working on one row of `len` elements, for row kernels
/// f(row, lane, lanes). lanes == 1: one thread does the row in order (short
/// rows). lanes == 32: on the device a warp, lane l taking elements l, l +
/// 32, ... (coalesced), sum / max combining the lanes' parts in a butterfly
/// of shuffles (commutative steps: every lane ends with the same value);
/// emulated on the host, the same 32 parts combined in the same butterfly,
/// so the host computes the device's very values.
struct RowLanes {
  int lane, lanes;
  int64_t len;

  template <class F> HD double sum(const F &f) const {
    if (lanes == 1) {
      double s = 0.0;
      for (int64_t i = 0; i < len; ++i)
        s += f(i);
      return s;
    }
#ifdef __CUDA_ARCH__
    double s = 0.0;
    for (int64_t i = lane; i < len; i += kWarp)
      s += f(i);
    for (int o = kWarp / 2; o; o >>= 1)
      s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
#else
    double p[kWarp];
    for (int l = 0; l < kWarp; ++l) {
      p[l] = 0.0;
      for (int64_t i = l; i < len; i += kWarp)
        p[l] += f(i);
    }
    for (int o = kWarp / 2; o; o >>= 1) {
      double q[kWarp];
      for (int l = 0; l < kWarp; ++l)
        q[l] = p[l] + p[l ^ o];
      for (int l = 0; l < kWarp; ++l)
        p[l] = q[l];
    }
    return p[0];
#endif
  }

  /// The largest f(i) (-inf for none); a NaN wins.
  template <class F> HD float max(const F &f) const {
    float m = -INFINITY;
    if (lanes == 1) {
      for (int64_t i = 0; i < len; ++i)
        m = maxNaN(m, f(i));
      return m;
    }
#ifdef __CUDA_ARCH__
    for (int64_t i = lane; i < len; i += kWarp)
      m = maxNaN(m, f(i));
    for (int o = kWarp / 2; o; o >>= 1)
      m = maxNaN(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
#else
    for (int64_t i = 0; i < len; ++i) // max is exact: any order
      m = maxNaN(m, f(i));
    return m;
#endif
  }

  /// f(i) for this lane's elements (every element on the host).
  template <class F> HD void forEach(const F &f) const {
#ifdef __CUDA_ARCH__
    if (lanes > 1) {
      for (int64_t i = lane; i < len; i += kWarp)
        f(i);
      return;
    }
#endif
    for (int64_t i = 0; i < len; ++i)
      f(i);
  }

  /// The one lane that writes a row's scalars.
  HD bool leader() const { return lane == 0; }

  HD static float maxNaN(float a, float b) { return isNaN(a) || isNaN(b) ? NAN : (b > a ? b : a); }
};

template <class F> struct PerThreadRow {
  F f;
  HD void operator()(int64_t r) const { f(r, 0, 1); }
};

template <class F> __global__ void rowKernel(F f, int64_t rows) {
  int lane = threadIdx.x % kWarp;
  int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / kWarp,
          nw = ((int64_t)gridDim.x * blockDim.x) / kWarp;
  for (int64_t r = w; r < rows; r += nw) // r is the same for the whole warp
    f(r, lane, kWarp);
}

/// f(r, lane, lanes) for the rows [0, rows) of `len` elements: a warp per
/// row for rows of 32 elements or more, else a thread per row.
template <class F>
amprt_status eachRow(const Dev *dev, int64_t rows, int64_t len, const F &f, const char *what) {
  if (rows <= 0)
    return AMPRT_OK;
  if (len < kWarp)
    return each(dev, rows, PerThreadRow<F>{f}, what);
  if (dev && emulated(*dev)) {
    for (int64_t r = 0; r < rows; ++r)
      f(r, 0, kWarp);
    return AMPRT_OK;
  }
  // 8 warps per block of 256.
  rowKernel<<<gridOf((rows + 7) / 8), 256, 0, dev ? streamOf(*dev) : nullptr>>>(f, rows);
  return cudaFail(cudaGetLastError(), what);
}

//--- The loss-scaling kernels and the optimizer steps (amp.cpp's twins) --------

/// Multi-tensor unscale and check (like Apex's multi_tensor_apply): one
/// launch over up to kMaxTensors gradients, four elements per index, 16-byte
/// loads where aligned. found is an f32 or an i1 flag (foundIsByte).
constexpr int kMaxTensors = 64;
struct UnscaleF {
  struct Item {
    const void *grad;
    float *out;
    int64_t n;
    int64_t firstUnit; // prefix sum of the units (4 elements) before it
    int32_t dtype;
  } items[kMaxTensors];
  int32_t count;
  const float *scale;
  void *found;
  int32_t foundIsByte;
  HD void operator()(int64_t u) const {
    int lo = 0, hi = count - 1; // the item holding unit u
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (items[mid].firstUnit <= u)
        lo = mid;
      else
        hi = mid - 1;
    }
    const Item &it = items[lo];
    int64_t i = (u - it.firstUnit) * 4;
    float inv = (float)(1.0 / (double)*scale);
    bool bad = false;
    if (it.dtype == AMPRT_F32 && i + 4 <= it.n &&
        (reinterpret_cast<uintptr_t>(it.grad) % 16) == 0 &&
        (reinterpret_cast<uintptr_t>(it.out) % 16) == 0) {
#ifdef __CUDA_ARCH__
      float4 v = static_cast<const float4 *>(it.grad)[i / 4];
      bad = nonFinite(v.x) || nonFinite(v.y) || nonFinite(v.z) || nonFinite(v.w);
      reinterpret_cast<float4 *>(it.out)[i / 4] =
          make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
#else
      for (int k = 0; k < 4; ++k) {
        float v = static_cast<const float *>(it.grad)[i + k];
        bad |= nonFinite(v);
        it.out[i + k] = v * inv;
      }
#endif
    } else {
      for (int64_t k = i; k < i + 4 && k < it.n; ++k) {
        float v = ldF(it.grad, it.dtype, k);
        bad |= nonFinite(v);
        it.out[k] = v * inv;
      }
    }
    if (bad) {
      if (foundIsByte)
        *static_cast<uint8_t *>(found) = 1;
      else
        *static_cast<float *>(found) = 1.0f;
    }
  }
};

/// The scale update (PyTorch's _amp_update_scale_, DeepSpeed's hysteresis,
/// a floor), one index: amprt_update_scale.
struct UpdateScaleF {
  amprt_scaler_config cfg;
  amprt_scaler_state *st;
  const void *found;
  int32_t foundIsByte;
  DeviceError *err; // null: no error recorded (the checker's API)
  int32_t errorAtMin;
  HD void operator()(int64_t) const {
    bool overflow = foundIsByte ? *static_cast<const uint8_t *>(found) != 0
                                : *static_cast<const float *>(found) != 0.0f;
    int32_t hyst = cfg.hysteresis > 0 ? cfg.hysteresis : 1;
    if (overflow) {
      bool floor = false;
      if (hyst <= 1 || st->hysteresis_left <= 1) {
        floor = cfg.min_scale > 0.0f && st->scale <= cfg.min_scale;
        float next = st->scale * cfg.backoff_factor;
        st->scale = next < cfg.min_scale ? cfg.min_scale : next;
      } else {
        --st->hysteresis_left;
      }
      st->growth_tracker = 0;
      st->at_min_scale = floor;
      if (floor && err) // a: the floor's bits, for the message
        recordError(err, errorAtMin ? ERR_MIN_SCALE : ERR_MIN_SCALE_WARN,
                    (int64_t)bitsOf(cfg.min_scale), 0, 0);
      return;
    }
    st->at_min_scale = 0;
    int32_t successful = st->growth_tracker + 1;
    if (successful == cfg.growth_interval) {
      float grown = st->scale * cfg.growth_factor;
      if (!nonFinite(grown))
        st->scale = grown;
      st->growth_tracker = 0;
      st->hysteresis_left = hyst;
    } else {
      st->growth_tracker = successful;
    }
  }
};

/// The updated parameter's f16 / bf16 copy (amp-keep-weight-casts), when
/// an optimizer writes one: lp[i] = np[i] rounded as amp.cast rounds.
HD inline void storeLowp(void *lp, int32_t lpBf16, int64_t i, float v) {
  if (lp)
    static_cast<uint16_t *>(lp)[i] =
        lpBf16 ? bits::f32ToBf16(bitsOf(v)) : bits::f32ToF16(bitsOf(v));
}

/// SGD (amprt_sgd_step) from (p, b) into (np, nb), which may be p and b:
/// a skipped step (found set) copies. lp: the new parameter's f16 / bf16
/// copy, or null.
struct SgdF {
  amprt_sgd_config cfg;
  const float *p, *g, *b;
  float *np, *nb;
  const int64_t *step;
  const void *found;
  int32_t foundIsByte;
  void *lp = nullptr;
  int32_t lpBf16 = 0;
  HD void operator()(int64_t i) const {
    bool skip = foundIsByte ? *static_cast<const uint8_t *>(found) != 0
                            : *static_cast<const float *>(found) != 0.0f;
    float pi = p[i];
    if (skip) {
      np[i] = pi;
      if (nb)
        nb[i] = b[i];
      storeLowp(lp, lpBf16, i, pi);
      return;
    }
    float d = g[i];
    if (cfg.weight_decay != 0.0f)
      d = d + cfg.weight_decay * pi;
    if (cfg.momentum != 0.0f) {
      float bi = *step == 0 ? d : b[i] * cfg.momentum + (1.0f - cfg.dampening) * d;
      nb[i] = bi;
      d = cfg.nesterov ? d + cfg.momentum * bi : bi;
    } else if (nb) {
      nb[i] = b[i];
    }
    float out = pi + (-cfg.lr) * d;
    np[i] = out;
    storeLowp(lp, lpBf16, i, out);
  }
};

/// Adam / AdamW (amprt_adam_step) from (p, m, v) into (np, nm, nv); lp as
/// SgdF's.
struct AdamF {
  amprt_adam_config cfg;
  const float *p, *g, *m, *v;
  float *np, *nm, *nv;
  const int64_t *step;
  const void *found;
  int32_t foundIsByte;
  void *lp = nullptr;
  int32_t lpBf16 = 0;
  HD void operator()(int64_t i) const {
    bool skip = foundIsByte ? *static_cast<const uint8_t *>(found) != 0
                            : *static_cast<const float *>(found) != 0.0f;
    float pi = p[i], mi = m[i], vi = v[i];
    if (skip) {
      np[i] = pi;
      nm[i] = mi;
      nv[i] = vi;
      storeLowp(lp, lpBf16, i, pi);
      return;
    }
    float gi = g[i];
    if (cfg.decoupled == 2) { // Hugging Face's AdamW
      float ac = 1.0f - (float)pow((double)cfg.beta1, (double)(*step + 1));
      float bc = 1.0f - (float)pow((double)cfg.beta2, (double)(*step + 1));
      float lrc = cfg.lr * (sqrtf(bc) / ac);
      float w1 = 1.0f - cfg.beta1, w2 = 1.0f - cfg.beta2, decay = cfg.lr * cfg.weight_decay;
      mi = cfg.beta1 * mi + w1 * gi;
      vi = cfg.beta2 * vi + w2 * gi * gi;
      pi = pi - lrc * mi / (sqrtf(vi) + cfg.eps);
      pi = pi - decay * pi;
    } else {
      double t = (double)(*step + 1);
      double bc1 = 1.0 - pow((double)cfg.beta1, t);
      double bc2 = 1.0 - pow((double)cfg.beta2, t);
      float stepSize = (float)((double)cfg.lr / bc1);
      float bc2Sqrt = (float)sqrt(bc2);
      float w1 = 1.0f - cfg.beta1, w2 = 1.0f - cfg.beta2;
      float decay = (float)(1.0 - (double)cfg.lr * (double)cfg.weight_decay);
      if (cfg.weight_decay != 0.0f) {
        if (cfg.decoupled)
          pi = pi * decay;
        else
          gi = gi + cfg.weight_decay * pi;
      }
      mi = w1 < 0.5f ? mi + w1 * (gi - mi) : gi - (gi - mi) * (1.0f - w1);
      vi = vi * cfg.beta2 + w2 * gi * gi;
      float denom = sqrtf(vi) / bc2Sqrt + cfg.eps;
      pi = pi + (-stepSize) * (mi / denom);
    }
    np[i] = pi;
    nm[i] = mi;
    nv[i] = vi;
    storeLowp(lp, lpBf16, i, pi);
  }
};

/// Contiguous float -> float conversion (the CPU's definition).
struct CastFloatF {
  const void *x;
  void *y;
  int32_t xt, yt;
  HD void operator()(int64_t i) const { stF(y, yt, i, ldF(x, xt, i)); }
};

} // namespace amprt::cuda

#endif // AMPRT_CUDA_DEVICE_CUH
