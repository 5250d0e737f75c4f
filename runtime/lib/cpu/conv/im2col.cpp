//===- im2col.cpp - convolutions as im2col / col2im and one product -------===//
//
// A 2-D convolution pass as one matrix product of its columns: the forward
// (W @ columns), the data gradient (W^T @ dy, then col2im) and the weight
// gradient (dy @ columns^T); small output maps gather their columns by a
// table, and col2im adds them on AVX-512 in the scalar loop's order. The
// candidates im2col-bf16, im2col-f32, pointwise-bf16 and im2col-amx of
// candidates.cpp run here. Built with exceptions (oneDNN's C++ API throws).
//
//===----------------------------------------------------------------------===//

#include "cpu/conv/conv.h"
#include "cpu/conv/kernels.h"
#include "cpu/matmul/matmul.h"

#include "common/check.h"
#include "common/convert.h"
#include "common/exec_decode.h"
#include "cpu/elementwise/elementwise.h"
#include "host/profile.h"
#include "host/scratch.h"
#include "host/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

namespace amprt::conv {

namespace {
std::atomic<int64_t> im2colCalls{0}; // im2colConvCallsForTesting
} // namespace

void noteIm2col(const char *impl) {
  ++im2colCalls;
  if (desc::profilingRequested())
    noteKernelImpl(impl);
}

/// A 2-D convolution's strides and dilations as convDims reads them (0
/// counts as 1) and its leading pads.
struct Window {
  int64_t sh, sw, dh, dw, ph, pw;
  explicit Window(const amprt_conv_params *p)
      : sh(std::max<int64_t>(p->strides[0], 1)), sw(std::max<int64_t>(p->strides[1], 1)),
        dh(std::max<int64_t>(p->dilations[0], 1)), dw(std::max<int64_t>(p->dilations[1], 1)),
        ph(p->pads_begin[0]), pw(p->pads_begin[1]) {}
};

/// Small maps' im2col / col2im table: for tap (a, q) and output position
/// (i, j), the offset in an h x w input plane it reads, or -1 (padding).
std::vector<int32_t> tapTable(const Window &win, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                              int64_t h, int64_t w) {
  std::vector<int32_t> at((size_t)(kh * kw * oh * ow));
  for (int64_t a = 0; a < kh; ++a)
    for (int64_t q = 0; q < kw; ++q)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t yi = i * win.sh - win.ph + a * win.dh,
                        xj = j * win.sw - win.pw + q * win.dw;
          at[(size_t)(((a * kw + q) * oh + i) * ow + j)] =
              yi >= 0 && yi < h && xj >= 0 && xj < w ? (int32_t)(yi * w + xj) : -1;
        }
  return at;
}

/// Whether a 2-D convolution may run as im2col + one product (forward) or
/// one product + col2im (data gradient): one group, its columns (K x P
/// elements of `es` bytes, K = C x KH x KW, P = N x OH x OW) at most 64 MiB.
bool im2colFits(const amprt_tensor *w, const amprt_tensor *y, const amprt_conv_params *p,
                int64_t es) {
  if (p->spatial != 2 || p->group != 1 || y->rank != 4 || w->rank != 4)
    return false;
  int64_t cols = y->shape[0] * y->shape[2] * y->shape[3] * (amprt_tensor_numel(w) / w->shape[0]);
  return cols > 0 && cols * es <= (64 << 20);
}

/// Output maps of at most this many positions take im2colT's gather by
/// table (their rows are short runs).
constexpr int64_t kSmallMap = 64;

#if defined(__x86_64__)
AMPRT_AVX512_QUIET_BEGIN
/// im2colT's small-map gather for 16-bit columns of 16-bit x on AVX-512
/// (BW), planes of at most 64 elements: the planes of g images of a channel
/// (g * hw <= 64) in two registers, and each tap's row segment for those
/// images (g * perImage <= 64 positions) by permutes whose zeroed lanes are
/// the padding. idx: 64 source lanes per tap; keep: the tap's lanes inside
/// x. Channels [c0, c1) of colT [K, P].
__attribute__((target("avx512f,avx512bw"))) void
smallMapRows16(const uint16_t *x, int64_t n, int64_t c, int64_t hw, int64_t taps, int64_t perImage,
               int64_t g, int64_t P, const uint16_t *idx, const uint64_t *keep, int64_t c0,
               int64_t c1, uint16_t *colT) {
  auto lanes = [](int64_t k) { return (__mmask32)(k <= 0 ? 0u : k >= 32 ? ~0u : (1u << k) - 1u); };
  alignas(64) uint16_t stage[64] = {};
  for (int64_t ci = c0; ci < c1; ++ci)
    for (int64_t b0 = 0; b0 < n; b0 += g) {
      const int64_t imgs = std::min(g, n - b0);
      for (int64_t j = 0; j < imgs; ++j)
        std::memcpy(stage + j * hw, x + ((b0 + j) * c + ci) * hw, (size_t)(hw * 2));
      const __m512i a0 = _mm512_load_si512(stage), a1 = _mm512_load_si512(stage + 32);
      const __mmask32 out0 = lanes(imgs * perImage), out1 = lanes(imgs * perImage - 32);
      for (int64_t tap = 0; tap < taps; ++tap) {
        uint16_t *dst = colT + (ci * taps + tap) * P + b0 * perImage;
        const __m512i lo = _mm512_loadu_si512(idx + tap * 64);
        _mm512_mask_storeu_epi16(dst, out0,
                                 _mm512_maskz_permutex2var_epi16((__mmask32)keep[tap], a0, lo, a1));
        if (out1) {
          const __m512i hi = _mm512_loadu_si512(idx + tap * 64 + 32);
          _mm512_mask_storeu_epi16(
              dst + 32, out1,
              _mm512_maskz_permutex2var_epi16((__mmask32)(keep[tap] >> 32), a0, hi, a1));
        }
      }
    }
}
AMPRT_AVX512_QUIET_END
#endif

#if defined(__x86_64__)
AMPRT_AVX512_QUIET_BEGIN
/// SmallMapCol2im's planes on AVX-512 (the output map at most 64
/// positions): a plane in chunks of 16 elements, each tap's contributions
/// to a chunk gathered from the tap's row (at most 64 f32, four registers)
/// by permutes and added in the order of the taps, in the lanes the tap
/// reaches (keep): each element the scalar loop's sum. src: per tap and
/// element of the plane, the output position that reaches it (0 where none).
__attribute__((target("avx512f"))) void
smallMapCol2imAvx512(const float *dcol, int64_t c, int64_t taps, int64_t P, int64_t ohw, int64_t hw,
                     const int32_t *src, const uint16_t *keep, int64_t r0, int64_t r1, float *out) {
  const int64_t chunks = (hw + 15) / 16;
  auto lanes = [](int64_t k) {
    return (__mmask16)(k <= 0 ? 0u : k >= 16 ? 0xffffu : (1u << k) - 1u);
  };
  const __mmask16 m0 = lanes(ohw), m1 = lanes(ohw - 16), m2 = lanes(ohw - 32), m3 = lanes(ohw - 48);
  const __m512i bit5 = _mm512_set1_epi32(32);
  // Channel by channel, its images in turn: a channel's rows are shared by
  // its images (each row's N x ohw positions on a few lines).
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t b = r0 / c; b <= (r1 - 1) / c; ++b) {
      const int64_t r = b * c + ci;
      if (r < r0 || r >= r1)
        continue;
      const float *rows = dcol + ci * taps * P + b * ohw;
      float *plane = out + r * hw;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t tap = 0; tap < taps; ++tap) {
          const __mmask16 k = keep[tap * chunks + ch];
          if (!k)
            continue;
          const float *row = rows + tap * P;
          const __m512i ix = _mm512_loadu_si512(src + (tap * chunks + ch) * 16);
          const __m512 a0 = _mm512_maskz_loadu_ps(m0, row);
          __m512 v;
          if (ohw <= 16) {
            v = _mm512_permutexvar_ps(ix, a0);
          } else {
            v = _mm512_permutex2var_ps(a0, ix, _mm512_maskz_loadu_ps(m1, row + 16));
            if (ohw > 32) {
              const __m512 hi = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(m2, row + 32), ix,
                                                       _mm512_maskz_loadu_ps(m3, row + 48));
              v = _mm512_mask_blend_ps(_mm512_test_epi32_mask(ix, bit5), v, hi);
            }
          }
          acc = _mm512_mask_add_ps(acc, k, acc, v);
        }
        _mm512_mask_storeu_ps(plane + ch * 16, lanes(hw - ch * 16), acc);
      }
    }
}
AMPRT_AVX512_QUIET_END
#endif

/// col2im of a small output map (at most kSmallMap positions): planes
/// [r0, r1) of out [N x C planes of h x w] (f32) = the sum, tap by tap in
/// order, of dcol [C x taps rows, P] (rows of N x ohw positions) through
/// tapTable's `at`. Gathered on AVX-512 where the CPU has it and vectorOk
/// (the tables src and keep; the same sums), else scattered by the table.
struct SmallMapCol2im {
  int64_t c, taps, P, ohw, hw;
  std::vector<int32_t> at, src; // (src, keep: for the AVX-512 loop)
  std::vector<uint16_t> keep;
  bool vector = false;
  SmallMapCol2im(std::vector<int32_t> table, int64_t c, int64_t taps, int64_t P, int64_t ohw,
                 int64_t hw, bool vectorOk)
      : c(c), taps(taps), P(P), ohw(ohw), hw(hw), at(std::move(table)) {
#if defined(__x86_64__)
    vector = vectorOk && ohw <= 64 && haveAvx512bw();
#else
    (void)vectorOk;
#endif
    if (!vector)
      return;
    const int64_t chunks = (hw + 15) / 16;
    src.assign((size_t)(taps * chunks * 16), 0);
    keep.assign((size_t)(taps * chunks), 0);
    for (int64_t tap = 0; tap < taps; ++tap)
      for (int64_t t = 0; t < ohw; ++t)
        if (int32_t e = at[(size_t)(tap * ohw + t)]; e >= 0) {
          src[(size_t)(tap * chunks * 16 + e)] = (int32_t)t;
          keep[(size_t)(tap * chunks + e / 16)] |= (uint16_t)(1u << (e % 16));
        }
  }
  void run(const float *dcol, int64_t r0, int64_t r1, float *out) const {
#if defined(__x86_64__)
    if (vector) {
      smallMapCol2imAvx512(dcol, c, taps, P, ohw, hw, src.data(), keep.data(), r0, r1, out);
      return;
    }
#endif
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / c, ci = r % c;
      float *plane = out + r * hw;
      std::fill(plane, plane + hw, 0.0f);
      for (int64_t tap = 0; tap < taps; ++tap) {
        const float *row = dcol + (ci * taps + tap) * P + b * ohw;
        const int32_t *map = at.data() + tap * ohw;
        for (int64_t t = 0; t < ohw; ++t)
          if (map[t] >= 0)
            plane[map[t]] += row[t];
      }
    }
  }
};

/// An element of x as stored in the columns: the same bits, or widened
/// to f32 (exact).
template <typename Src, typename Dst> inline Dst colElement(Src v, amprt_dtype st) {
  if constexpr (std::is_same_v<Src, Dst>) {
    (void)st;
    return v;
  } else {
    return st == AMPRT_F16 ? amprt_f16_to_f32(v) : amprt_bf16_to_f32(v);
  }
}

/// colT[(c, kh, kw), (n, oh, ow)] = x[n, c, oh*s - pad + kh*d, ow*s - pad +
/// kw*d] (0 outside x): the columns transposed, [K, P], each row built from
/// runs of x. Src / Dst: uint16_t (f16 / bf16 bits) or float.
template <typename Src, typename Dst>
void im2colT(const Src *x, amprt_dtype st, const amprt_tensor *xs, const amprt_tensor *ws,
             const amprt_tensor *ys, const amprt_conv_params *p, Dst *colT) {
  const int64_t n = xs->shape[0], c = xs->shape[1], h = xs->shape[2], w = xs->shape[3];
  const int64_t oh = ys->shape[2], ow = ys->shape[3], kh = ws->shape[2], kw = ws->shape[3];
  const int64_t P = n * oh * ow, K = c * kh * kw;
  const Window win(p);
  const int64_t sh = win.sh, sw = win.sw, dh = win.dh, dw = win.dw, ph = win.ph, pw = win.pw;
  // A 1 x 1 tap with stride 1 and no padding over a map of the output's
  // size (a pointwise convolution): each row of the columns is x's planes
  // of one channel, copied whole.
  const bool plane =
      kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && oh == h && ow == w;
  // n elements of x from src into the columns: copied, or widened (exact).
  auto copyRun = [](const Src *src, amprt_dtype st, Dst *dst, int64_t len) {
    if constexpr (std::is_same_v<Src, Dst>) {
      (void)st;
      std::copy(src, src + len, dst);
    } else {
      convertRun(src, st, dst, AMPRT_F32, (size_t)len);
    }
  };
  // Small output maps (a late layer's 2 x 2 to 7 x 7): a row's runs are a
  // few elements each, and a fill and a copy call per run cost more than
  // the elements. Each tap (a, q) reads the same positions of every image's
  // plane instead: their offsets in one table (-1: padding, 0), and a row
  // is a gather through it, image by image.
  const int64_t perImage = oh * ow;
  if (!plane && perImage <= kSmallMap) {
    const std::vector<int32_t> at = tapTable(win, kh, kw, oh, ow, h, w);
#if defined(__x86_64__)
    if constexpr (std::is_same_v<Src, uint16_t> && std::is_same_v<Dst, uint16_t>) {
      if (h * w <= 64 && haveAvx512bw()) {
        const int64_t taps = kh * kw, hw = h * w;
        const int64_t g = std::max<int64_t>(1, std::min({64 / hw, 64 / perImage, n}));
        std::vector<uint16_t> idx((size_t)(taps * 64), 0);
        std::vector<uint64_t> keep((size_t)taps, 0);
        for (int64_t tap = 0; tap < taps; ++tap)
          for (int64_t j = 0; j < g; ++j)
            for (int64_t t = 0; t < perImage; ++t)
              if (int32_t v = at[(size_t)(tap * perImage + t)]; v >= 0) {
                const int64_t lane = j * perImage + t;
                idx[(size_t)(tap * 64 + lane)] = (uint16_t)(j * hw + v);
                keep[(size_t)tap] |= uint64_t(1) << lane;
              }
        parallelFor(c, 1, 1, [&](int64_t c0, int64_t c1) {
          smallMapRows16(x, n, c, hw, taps, perImage, g, P, idx.data(), keep.data(), c0, c1, colT);
        });
        return;
      }
    }
#endif
    parallelFor(K, 1, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t ci = k / (kh * kw), tap = k % (kh * kw);
        const int32_t *map = at.data() + tap * perImage;
        Dst *row = colT + k * P;
        for (int64_t b = 0; b < n; ++b) {
          const Src *src = x + (b * c + ci) * h * w;
          Dst *dst = row + b * perImage;
          for (int64_t t = 0; t < perImage; ++t)
            dst[t] = map[t] >= 0 ? colElement<Src, Dst>(src[map[t]], st) : Dst(0);
        }
      }
    });
    return;
  }
  parallelFor(K, 1, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t ci = k / (kh * kw), a = (k / kw) % kh, q = k % kw;
      // The output columns j whose tap lies inside x: [jlo, jhi).
      const int64_t off = q * dw - pw;
      int64_t jlo = off >= 0 ? 0 : (-off + sw - 1) / sw;
      int64_t jhi = w - off <= 0 ? 0 : std::min(ow, (w - off + sw - 1) / sw);
      jlo = std::min(jlo, jhi);
      Dst *row = colT + k * P;
      if (plane) { // the tap reads each plane whole, in order: one run per image
        for (int64_t b = 0; b < n; ++b)
          copyRun(x + (b * c + ci) * h * w, st, row + b * oh * ow, oh * ow);
        continue;
      }
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < oh; ++i) {
          Dst *dst = row + (b * oh + i) * ow;
          const int64_t yi = i * sh - ph + a * dh;
          if (yi < 0 || yi >= h) {
            std::fill(dst, dst + ow, Dst(0));
            continue;
          }
          const Src *src = x + ((b * c + ci) * h + yi) * w;
          std::fill(dst, dst + jlo, Dst(0));
          if (sw == 1)
            copyRun(src + jlo + off, st, dst + jlo, jhi - jlo);
          else
            for (int64_t j = jlo; j < jhi; ++j)
              dst[j] = colElement<Src, Dst>(src[j * sw + off], st);
          std::fill(dst + jhi, dst + ow, Dst(0));
        }
    }
  });
}

/// The columns of x (transposed, see im2colT) in bf16 (`low`: x must be
/// bf16) or f32 (x of any float type, widened: exact), into `buf`.
void *columnsOf(const amprt_tensor *x, const amprt_tensor *w, const amprt_tensor *y,
                const amprt_conv_params *p, bool low, std::vector<char> &buf) {
  const int64_t K = amprt_tensor_numel(w) / w->shape[0],
                P = y->shape[0] * y->shape[2] * y->shape[3];
  grown(buf, (size_t)(K * P * (low ? 2 : 4)));
  const auto *u16 = static_cast<const uint16_t *>(x->data);
  if (low)
    im2colT<uint16_t, uint16_t>(u16, x->dtype, x, w, y, p,
                                reinterpret_cast<uint16_t *>(buf.data()));
  else if (x->dtype == AMPRT_F32)
    im2colT<float, float>(static_cast<const float *>(x->data), x->dtype, x, w, y, p,
                          reinterpret_cast<float *>(buf.data()));
  else
    im2colT<uint16_t, float>(u16, x->dtype, x, w, y, p, reinterpret_cast<float *>(buf.data()));
  return buf.data();
}

/// Whether a convolution is pointwise: 2-D, one group, 1 x 1 taps, stride 1, no padding,
/// the output map the input's (then x's planes of an image are already the
/// columns of that image's product: no im2col, no col2im).
bool pointwise(const amprt_tensor *x, const amprt_tensor *w, const amprt_tensor *y,
               const amprt_conv_params *p) {
  if (p->spatial != 2 || p->group != 1 || x->rank != 4 || w->rank != 4 || y->rank != 4)
    return false;
  const Window win(p);
  return w->shape[2] == 1 && w->shape[3] == 1 && win.sh == 1 && win.sw == 1 && win.ph == 0 &&
         win.pw == 0 && p->pads_end[0] == 0 && p->pads_end[1] == 0 && y->shape[2] == x->shape[2] &&
         y->shape[3] == x->shape[3];
}

/// A pointwise convolution's pass as one batched product in NCHW, image by
/// image: out_b[M, HW] = A[M, K] @ in_b[K, HW], with A the weight (forward:
/// W [OC, C]) or its transpose (data gradient: W^T [C, OC]) shared by the
/// images. bf16 operands (on oneDNN's bf16 kernels); the result straight
/// into `out` where it is f32 or bf16 (rounded once by the primitive),
/// else (an f16 out, or a bias / ReLU to add) into f32 and then
/// `finish(acc)`.
template <class Finish>
void pointwiseProduct(const void *a, bool transposeA, const void *in, int64_t m, int64_t k,
                      int64_t hw, int64_t n, amprt_tensor *out, bool direct, Finish finish) {
  const int adt = (int)dnnl::memory::data_type::bf16;
  GemmKey key{m, hw, k, transposeA ? 1 : k, transposeA ? m : 1, hw, 1, adt, adt};
  key.batch = n;
  key.aShared = true;
  if (direct && (out->dtype == AMPRT_F32 || out->dtype == AMPRT_BF16)) {
    key.bf16Out = out->dtype == AMPRT_BF16;
    gemmAcc(key, a, in, out->data);
    return;
  }
  thread_local ScratchVec<float> acc;
  grown(acc, (size_t)(n * m * hw));
  gemmAcc(key, a, in, acc.data());
  finish(acc.data());
}

/// A forward product's epilogue: y's row r (image r / oc, channel r % oc)
/// = the f32 sums at rowOf(r) + bias, with ReLU (keeping a NaN, as the
/// element-wise ReLU does), rounded once to y's type; rows on the threads.
template <class RowOf>
void finishRows(amprt_tensor *y, int64_t n, int64_t oc, int64_t ohw, const float *bias, bool relu,
                RowOf rowOf) {
  parallelFor(n * oc, 1, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> row((size_t)ohw);
    for (int64_t r = r0; r < r1; ++r) {
      const float *src = rowOf(r);
      const float add = bias ? bias[r % oc] : 0.0f;
      for (int64_t i = 0; i < ohw; ++i) {
        float v = bias ? src[i] + add : src[i];
        row[(size_t)i] = relu && !(v > 0.0f) && v == v ? 0.0f : v;
      }
      convertRun(row.data(), AMPRT_F32,
                 static_cast<char *>(y->data) + r * ohw * amprt_dtype_size(y->dtype), y->dtype,
                 (size_t)ohw);
    }
  });
}

/// The forward as one product: yT[OC, P] = W[OC, K] @ colT[K, P] (f32
/// accumulation; bf16 operands with `low`, else f32, widened where x and w
/// are f16 / bf16: exact), then y[n, oc, :] = yT[oc, n's positions] + bias,
/// with ReLU (flags: only where no NaN can arise, see amprt_conv_ex) and
/// rounded once to y's type. The weight in its own plain layout: nothing
/// weight-sized is reordered (where the output is small, the weight's
/// reorder into a blocked layout costs more than the product).
void im2colForward(const amprt_tensor *x, const amprt_tensor *w, const float *bias,
                   const amprt_conv_params *p, int32_t flags, amprt_tensor *y, bool low,
                   bool batched, bool amx) {
  const int64_t n = y->shape[0], oc = y->shape[1], ohw = y->shape[2] * y->shape[3];
  const int64_t P = n * ohw, K = amprt_tensor_numel(w) / oc;
  const bool relu = flags & AMPRT_CONV_RELU;
  if (batched) {
    // y_b[OC, HW] = W[OC, C] @ x_b[C, HW]: y's own layout (a pointwise
    // convolution, bf16 x and w: pointwise-bf16).
    noteIm2col("pointwise matmul");
    pointwiseProduct(
        w->data, false, x->data, oc, K, ohw, n, y, !bias && !relu, [&](const float *acc) {
          finishRows(y, n, oc, ohw, bias, relu, [&](int64_t r) { return acc + r * ohw; });
        });
    return;
  }
  thread_local ScratchVec<char> colBuf;
  thread_local ScratchVec<float> yt;
  void *col = columnsOf(x, w, y, p, low, colBuf);
  Operand wo = operandOf(w, !low);
  const int adt = (int)(low ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32);
  grown(yt, (size_t)(oc * P));
  float *ytp = yt.data(); // (thread_local: the threads below see their own)
  if (amx) {
    // The weights' tiles read where they lie (amxProduct: whole tiles of a
    // row-major a), the columns packed: for a late layer's small output
    // and large weight, whose read bounds the product (resnet18's 512 x 512
    // x 3 x 3 on 2 x 2 maps).
    noteIm2col("im2col+amx");
    amxProduct(oc, P, K, static_cast<const uint16_t *>(w->data), K, 1,
               static_cast<const uint16_t *>(col), P, 1, ytp, P);
  } else {
    noteIm2col("im2col+matmul");
    gemmAcc(GemmKey{oc, P, K, K, 1, P, 1, adt, adt}, wo.ptr, col, ytp);
  }
  finishRows(y, n, oc, ohw, bias, relu,
             [&](int64_t r) { return ytp + (r % oc) * P + (r / oc) * ohw; });
}

/// The data gradient as one product: dcolT[K, P] = W^T[K, OC] @ dyT[OC, P]
/// (dy gathered by output channel), then col2im: each dx element the sum of
/// its taps' columns in a fixed order (planes on the threads: the same
/// result for every thread count), rounded once to dx's type.
void im2colDataGrad(const amprt_tensor *w, const amprt_tensor *dy, const amprt_conv_params *p,
                    amprt_tensor *dx, bool low, bool batched) {
  const int64_t n = dx->shape[0], c = dx->shape[1], h = dx->shape[2], wd = dx->shape[3];
  const int64_t oc = dy->shape[1], oh = dy->shape[2], ow = dy->shape[3], ohw = oh * ow;
  const int64_t kh = w->shape[2], kw = w->shape[3], P = n * ohw, K = c * kh * kw;
  const int64_t es = low ? 2 : 4;
  if (batched) {
    // dx_b[C, HW] = W^T[C, OC] @ dy_b[OC, HW]: dx's own layout, one tap
    // per element (no col2im; a pointwise convolution, bf16 dy and w:
    // pointwise-bf16).
    noteIm2col("pointwise matmul");
    pointwiseProduct(w->data, true, dy->data, c, oc, ohw, n, dx, true, [&](const float *acc) {
      convertPar(acc, AMPRT_F32, dx->data, dx->dtype, (size_t)amprt_tensor_numel(dx));
    });
    return;
  }
  thread_local ScratchVec<char> dyBuf;
  thread_local ScratchVec<float> dcol, acc;
  grown(dyBuf, (size_t)(oc * P * es));
  char *dyt = dyBuf.data();
  const char *db = static_cast<const char *>(dy->data);
  const int64_t des = amprt_dtype_size(dy->dtype);
  parallelFor(oc, 1, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t b = 0; b < n; ++b) {
        const char *src = db + ((b * oc + o) * ohw) * des;
        char *dst = dyt + (o * P + b * ohw) * es;
        if (des == es)
          std::memcpy(dst, src, (size_t)(ohw * es));
        else
          convertRun(src, dy->dtype, dst, AMPRT_F32, (size_t)ohw);
      }
  });
  Operand owp = operandOf(w, !low);
  const int adt = (int)(low ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32);
  grown(dcol, (size_t)(K * P));
  float *dcolp = dcol.data(); // (thread_local: the threads below see their own)
  noteIm2col("matmul+col2im");
  gemmAcc(GemmKey{K, P, oc, 1, K, P, 1, adt, adt}, owp.ptr, dyt, dcolp);
  float *out = static_cast<float *>(dx->data);
  if (dx->dtype != AMPRT_F32) {
    out = grown(acc, (size_t)amprt_tensor_numel(dx));
  }
  const Window win(p);
  const int64_t sh = win.sh, sw = win.sw, dh = win.dh, dwl = win.dw, ph = win.ph, pw = win.pw;
  if (ohw <= kSmallMap) {
    // Small maps (see im2colT): each tap's positions in dx's plane from one
    // table, added tap by tap (SmallMapCol2im: gathered on AVX-512, the
    // same sums; resnet18's 4 x 4 layer, 256 channels, bf16: the data
    // gradient 0.76 -> 0.47 ms); a thread's planes narrowed by one call.
    const SmallMapCol2im col2im(tapTable(win, kh, kw, oh, ow, h, wd), c, kh * kw, P, ohw, h * wd,
                                true);
    parallelFor(n * c, 1, 1, [&](int64_t r0, int64_t r1) {
      col2im.run(dcolp, r0, r1, out);
      if (dx->dtype != AMPRT_F32)
        convertRun(out + r0 * h * wd, AMPRT_F32,
                   static_cast<char *>(dx->data) + r0 * h * wd * amprt_dtype_size(dx->dtype),
                   dx->dtype, (size_t)((r1 - r0) * h * wd));
    });
    return;
  }
  parallelFor(n * c, 1, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / c, ci = r % c;
      float *plane = out + r * h * wd;
      std::fill(plane, plane + h * wd, 0.0f);
      for (int64_t a = 0; a < kh; ++a)
        for (int64_t q = 0; q < kw; ++q) {
          const float *row = dcolp + ((ci * kh + a) * kw + q) * P + b * ohw;
          const int64_t off = q * dwl - pw;
          int64_t jlo = off >= 0 ? 0 : (-off + sw - 1) / sw;
          int64_t jhi = wd - off <= 0 ? 0 : std::min(ow, (wd - off + sw - 1) / sw);
          for (int64_t i = 0; i < oh; ++i) {
            const int64_t yi = i * sh - ph + a * dh;
            if (yi < 0 || yi >= h)
              continue;
            float *dst = plane + yi * wd;
            if (sw == 1) {
              float *d1 = dst + off;
              const float *r1 = row + i * ow;
              for (int64_t j = jlo; j < jhi; ++j)
                d1[j] += r1[j];
            } else {
              for (int64_t j = jlo; j < jhi; ++j)
                dst[j * sw + off] += row[i * ow + j];
            }
          }
        }
      if (dx->dtype != AMPRT_F32)
        convertRun(plane, AMPRT_F32,
                   static_cast<char *>(dx->data) + r * h * wd * amprt_dtype_size(dx->dtype),
                   dx->dtype, (size_t)(h * wd));
    }
  });
}

/// dy [N, OC, OH, OW] (elements of es bytes) as rows [OC, N x OH x OW]
/// (the product's a), in the calling thread's buffer.
char *dyRows(const void *dy, int64_t es, const amprt_tensor *dys) {
  const int64_t n = dys->shape[0], oc = dys->shape[1], ohw = dys->shape[2] * dys->shape[3];
  const int64_t P = n * ohw;
  thread_local ScratchVec<char> dyBuf;
  grown(dyBuf, (size_t)(oc * P * es));
  char *dyt = dyBuf.data();
  const char *db = static_cast<const char *>(dy);
  parallelFor(oc, 1, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t b = 0; b < n; ++b)
        std::memcpy(dyt + (o * P + b * ohw) * es, db + ((b * oc + o) * ohw) * es,
                    (size_t)(ohw * es));
  });
  return dyt;
}

/// dw[oc, (c, kh, kw)] = sum over (n, oh, ow) of dy[n, oc, oh, ow] *
/// x[n, c, oh*s - pad + kh*d, ow*s - pad + kw*d]: dy gathered into [OC,
/// P] and x into its columns (columnsOf: [K, P], P = N x OH x OW, K = C x
/// KH x KW, a tap outside x is 0), one product dyT @ colT^T (oneDNN's
/// matmul, f32 accumulation) in bf16 (`low`: x bf16) or f32 (x widened:
/// exact), of dy's elements of `es` bytes (bf16 or f32), into `out` (f32,
/// or bf16 with bf16Out: rounded once by the primitive). With nonFinite
/// (an f32 out): true where the product checked out for inf / NaN as it
/// stored it (amxProduct), *nonFinite the answer.
bool im2colWeightGrad(const amprt_tensor *x, const void *dy, int64_t es, const amprt_tensor *ws,
                      const amprt_tensor *dys, const amprt_conv_params *p, void *out, bool bf16Out,
                      bool *nonFinite) {
  const int64_t n = dys->shape[0], oc = dys->shape[1], ohw = dys->shape[2] * dys->shape[3];
  const int64_t P = n * ohw, K = amprt_tensor_numel(ws) / oc;
  const bool low = es == 2;
  thread_local ScratchVec<char> colBuf;
  void *col = columnsOf(x, ws, dys, p, low, colBuf);
  char *dyt = dyRows(dy, es, dys);
  // A short sum (P: the batch's output positions) into a large f32 dw: on
  // the AMX tiles directly (amx.cpp), the same arithmetic as oneDNN's AMX
  // kernels at two to three times their speed here.
  if (low && !bf16Out && P <= kAmxMaxSum && amxProductAvailable()) {
    noteIm2col("im2col+amx");
    amxProduct(oc, K, P, reinterpret_cast<const uint16_t *>(dyt), P, 1,
               static_cast<const uint16_t *>(col), 1, P, static_cast<float *>(out), K, nonFinite);
    return nonFinite != nullptr;
  }
  const int adt = (int)(low ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32);
  GemmKey key{oc, K, P, P, 1, 1, P, adt, adt};
  key.bf16Out = bf16Out;
  noteIm2col("im2col+matmul");
  gemmAcc(key, dyt, col, out);
  return false;
}

} // namespace amprt::conv

int64_t amprt::im2colConvCallsForTesting() { return conv::im2colCalls.load(); }
bool amprt::smallMapCol2imForTesting(const amprt_conv_params *p, int64_t n, int64_t c, int64_t h,
                                     int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                                     const float *dcol, bool vector, float *out) {
  using namespace conv;
  const SmallMapCol2im col2im(tapTable(Window(p), kh, kw, oh, ow, h, w), c, kh * kw, n * oh * ow,
                              oh * ow, h * w, vector && oh * ow <= kSmallMap);
  parallelFor(n * c, 1, 1, [&](int64_t r0, int64_t r1) { col2im.run(dcol, r0, r1, out); });
  return col2im.vector;
}
