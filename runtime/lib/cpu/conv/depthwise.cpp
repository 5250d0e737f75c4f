//===- depthwise.cpp - direct 2-D depthwise convolutions ------------------===//
//
// A depthwise convolution (group = input channels, one input channel per
// group: MobileNet's 3 x 3, ConvNeXt's 7 x 7) does a few dozen products per
// output. oneDNN 2.6 runs it well on large maps (jit_dw, blocked layouts),
// but where the kernel is much larger than the map (ConvNeXt's 7 x 7 on
// its late 2 x 2 maps) its forward falls to im2col + gemm (3.1 ms for
// [8, 768, 2, 2] on an AVX2 EPYC, 2 threads, where the work is 0.1 M
// products), and its weight gradient has no direct kernel on AVX2 (im2col
// + gemm, 1.7-3.8 ms for ConvNeXt's). Here the three passes run in blocks
// of eight channels, one 8-lane vector per product, on the threads, in f32
// (f16 / bf16 widened exactly, results rounded once into their type).
// dnnl.cpp chooses between these and oneDNN's kernels per shape and pass
// (see there).
//
//===----------------------------------------------------------------------===//

#include "common/check.h"
#include "cpu/conv/conv.h"
#include "host/threads.h"

#include <algorithm>
#include <cstring>
#include <vector>

using namespace amprt;

namespace {

/// The geometry of a 2-D depthwise convolution: x [N, C, H, W], w [C * M,
/// 1, KH, KW] (M outputs per channel), y [N, C * M, OH, OW].
struct Dw {
  int64_t n, c, m, h, w, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw;
  int64_t hp, wp; // the padded block the outputs' taps read (see paddedExtent)
};

/// The padded extent of an input dim: the rows (or columns) an output's
/// taps reach, from -pad on.
inline int64_t paddedExtent(int64_t out, int64_t stride, int64_t k, int64_t dil) {
  return (out - 1) * stride + (k - 1) * dil + 1;
}

Dw geometry(const amprt_tensor *x, const amprt_tensor *w, const amprt_tensor *y,
            const amprt_conv_params *p) {
  Dw g;
  g.n = x->shape[0];
  g.c = x->shape[1];
  g.m = w->shape[0] / g.c;
  g.h = x->shape[2];
  g.w = x->shape[3];
  g.oh = y->shape[2];
  g.ow = y->shape[3];
  g.kh = w->shape[2];
  g.kw = w->shape[3];
  g.sh = std::max<int64_t>(p->strides[0], 1);
  g.sw = std::max<int64_t>(p->strides[1], 1);
  g.dh = std::max<int64_t>(p->dilations[0], 1);
  g.dw = std::max<int64_t>(p->dilations[1], 1);
  g.ph = p->pads_begin[0];
  g.pw = p->pads_begin[1];
  g.hp = paddedExtent(g.oh, g.sh, g.kh, g.dh);
  g.wp = paddedExtent(g.ow, g.sw, g.kw, g.dw);
  return g;
}

// The planes run in blocks of eight channels, interleaved ([rows][columns]
// [8], as oneDNN's nChw8c): every product is then one 8-lane vector
// operation whatever the map's size (a 2 x 2 map's rows give a vector
// loop nothing to work on). The input block is zero-padded, so that every
// tap's address is inside it; the loops still skip the taps that read
// padding (tapRange).

constexpr int64_t L = 8; // channels per block

typedef float v8 __attribute__((vector_size(32), aligned(4), may_alias));

/// dst [hp][wp][8] = the eight planes src[l] (h x w elements, null: a lane
/// of zeros) at offset (ph, pw), zero elsewhere (a zero pattern is +0 in
/// every float type).
template <typename T>
void interleave(const T *const *src, int64_t h, int64_t w, int64_t hp, int64_t wp, int64_t ph,
                int64_t pw, T *dst) {
  std::fill(dst, dst + hp * wp * L, T(0));
  const int64_t r0 = std::max<int64_t>(0, -ph), r1 = std::min(h, hp - ph);
  const int64_t c0 = std::max<int64_t>(0, -pw), c1 = std::min(w, wp - pw);
  for (int64_t l = 0; l < L; ++l) {
    if (!src[l])
      continue;
    for (int64_t r = r0; r < r1; ++r) {
      const T *s = src[l] + r * w;
      T *d = dst + ((r + ph) * wp + pw) * L + l;
      for (int64_t c = c0; c < c1; ++c)
        d[c * L] = s[c];
    }
  }
}

/// The eight planes dst[l] (h x w elements, null: skipped) = src [.][wp][8]
/// from offset (ph, pw).
template <typename T>
void deinterleave(const T *src, int64_t wp, int64_t ph, int64_t pw, int64_t h, int64_t w,
                  T *const *dst) {
  for (int64_t l = 0; l < L; ++l) {
    if (!dst[l])
      continue;
    for (int64_t r = 0; r < h; ++r) {
      const T *s = src + ((r + ph) * wp + pw) * L + l;
      T *d = dst[l] + r * w;
      for (int64_t c = 0; c < w; ++c)
        d[c] = s[c * L];
    }
  }
}

/// The taps of eight output channels o0.. (fewer than eight at the end:
/// zero lanes), interleaved [k][8], in f32.
void tapsBlock(const amprt_tensor *w, int64_t o0, int64_t lanes, int64_t k, float *tmp,
               float *out) {
  (void)amprt_convert(static_cast<const char *>(w->data) + o0 * k * amprt_dtype_size(w->dtype),
                      w->dtype, tmp, AMPRT_F32, (size_t)(lanes * k));
  std::fill(out, out + k * L, 0.0f);
  for (int64_t l = 0; l < lanes; ++l)
    for (int64_t t = 0; t < k; ++t)
      out[t * L + l] = tmp[l * k + t];
}

/// The loops of a blocked pass: an output of oh x ow, taps kh x kw,
/// strides and dilations.
struct Loops {
  int64_t oh, ow, kh, kw, sh, sw, dh, dw;
  int64_t r0, r1, c0, c1; // the rows and columns of x holding data (not padding)
};

/// The taps t in [0, k) whose position base + t * d lies in [lo, hi):
/// [t0, t1) (the others read padding: skipped, as oneDNN does, so that an
/// inf tap meets no 0).
inline void tapRange(int64_t base, int64_t d, int64_t k, int64_t lo, int64_t hi, int64_t &t0,
                     int64_t &t1) {
  auto ceilDiv = [d](int64_t a) { return d == 1 ? a : a >= 0 ? (a + d - 1) / d : -((-a) / d); };
  t0 = std::min(k, std::max<int64_t>(0, ceilDiv(lo - base)));
  t1 = std::max(t0, std::min(k, ceilDiv(hi - base)));
}

/// y [oh][ow][8] = (accumulate ? y : bias) + sum over taps of w[a, q] *
/// x[i * sh + a * dh, j * sw + q * dw] (x: a padded block, rows of wp
/// positions): four outputs of a row at a time in registers.
AMPRT_CLONES void forwardBlock(const float *x, int64_t wp, const float *w8, const float *b8,
                               const Loops &g, bool accumulate, float *y) {
  const v8 b = *reinterpret_cast<const v8 *>(b8);
  const int64_t xs = g.sw * L; // between outputs of a row
  for (int64_t i = 0; i < g.oh; ++i) {
    v8 *o = reinterpret_cast<v8 *>(y + i * g.ow * L);
    int64_t a0r, a1r;
    tapRange(i * g.sh, g.dh, g.kh, g.r0, g.r1, a0r, a1r);
    int64_t j = 0;
    for (; j + 4 <= g.ow; j += 4) {
      v8 a0 = accumulate ? o[j] : b, a1 = accumulate ? o[j + 1] : b, a2 = accumulate ? o[j + 2] : b,
         a3 = accumulate ? o[j + 3] : b;
      int64_t q0, q1, qa, qb;
      tapRange((j + 3) * g.sw, g.dw, g.kw, g.c0, g.c1, q0, qa);
      tapRange(j * g.sw, g.dw, g.kw, g.c0, g.c1, qb, q1);
      q1 = std::max(q1, qa); // the taps any of the four reaches
      for (int64_t a = a0r; a < a1r; ++a) {
        const float *xr = x + ((i * g.sh + a * g.dh) * wp + j * g.sw) * L;
        const float *wr = w8 + a * g.kw * L;
        for (int64_t q = q0; q < q1; ++q) {
          const v8 wv = *reinterpret_cast<const v8 *>(wr + q * L);
          const float *p = xr + q * g.dw * L;
          a0 += wv * *reinterpret_cast<const v8 *>(p);
          a1 += wv * *reinterpret_cast<const v8 *>(p + xs);
          a2 += wv * *reinterpret_cast<const v8 *>(p + 2 * xs);
          a3 += wv * *reinterpret_cast<const v8 *>(p + 3 * xs);
        }
      }
      o[j] = a0;
      o[j + 1] = a1;
      o[j + 2] = a2;
      o[j + 3] = a3;
    }
    // The last outputs one at a time (a small map's only ones): the taps'
    // products into four sums (independent chains), added last.
    for (; j < g.ow; ++j) {
      v8 s0 = accumulate ? o[j] : b, s1 = {}, s2 = {}, s3 = {};
      int64_t q0, q1;
      tapRange(j * g.sw, g.dw, g.kw, g.c0, g.c1, q0, q1);
      for (int64_t a = a0r; a < a1r; ++a) {
        const float *xr = x + ((i * g.sh + a * g.dh) * wp + j * g.sw) * L;
        const float *wr = w8 + a * g.kw * L;
        const v8 *wq = reinterpret_cast<const v8 *>(wr);
        const int64_t qs = g.dw * L;
        int64_t q = q0;
        for (; q + 4 <= q1; q += 4) {
          const float *p = xr + q * qs;
          s0 += wq[q] * *reinterpret_cast<const v8 *>(p);
          s1 += wq[q + 1] * *reinterpret_cast<const v8 *>(p + qs);
          s2 += wq[q + 2] * *reinterpret_cast<const v8 *>(p + 2 * qs);
          s3 += wq[q + 3] * *reinterpret_cast<const v8 *>(p + 3 * qs);
        }
        for (; q < q1; ++q)
          s0 += wq[q] * *reinterpret_cast<const v8 *>(xr + q * qs);
      }
      o[j] = (s0 + s1) + (s2 + s3);
    }
  }
}

/// dx [hp][wp][8] += w[a, q] * dy[i, j] at (i * sh + a * dh, j * sw + q *
/// dw) (dy: [oh][ow][8]).
AMPRT_CLONES void backwardDataBlock(const float *dy, const float *w8, const Dw &g, int64_t wp,
                                    float *dx) {
  for (int64_t i = 0; i < g.oh; ++i) {
    const v8 *gr = reinterpret_cast<const v8 *>(dy + i * g.ow * L);
    for (int64_t a = 0; a < g.kh; ++a) {
      float *dr = dx + (i * g.sh + a * g.dh) * wp * L;
      for (int64_t q = 0; q < g.kw; ++q) {
        const v8 wv = *reinterpret_cast<const v8 *>(w8 + (a * g.kw + q) * L);
        float *ds = dr + q * g.dw * L;
        for (int64_t j = 0; j < g.ow; ++j)
          *reinterpret_cast<v8 *>(ds + j * g.sw * L) += wv * gr[j];
      }
    }
  }
}

/// acc[a, q] (8 lanes, double) += sum over i, j of dy[i, j] * x[i * sh + a
/// * dh, j * sw + q * dw]: each row's products summed in f32 (four taps at
/// a time: four independent sums), the rows in double.
AMPRT_CLONES void weightGradBlock(const float *dy, const float *x, int64_t wp, const Dw &g,
                                  double *acc) {
  const int64_t xs = g.sw * L, qs = g.dw * L;
  auto add = [&](double *d, const v8 &s) {
    for (int64_t l = 0; l < L; ++l)
      d[l] += (double)s[l];
  };
  // Only the taps on x's data (rows ph .. ph + h, columns pw .. pw + w of
  // the padded block).
  for (int64_t i = 0; i < g.oh; ++i) {
    const v8 *gr = reinterpret_cast<const v8 *>(dy + i * g.ow * L);
    int64_t a0, a1;
    tapRange(i * g.sh, g.dh, g.kh, g.ph, g.ph + g.h, a0, a1);
    for (int64_t a = a0; a < a1; ++a) {
      const float *xr = x + (i * g.sh + a * g.dh) * wp * L;
      double *d = acc + a * g.kw * L;
      int64_t q = 0;
      for (; q + 4 <= g.kw; q += 4) {
        // The columns any of the four taps reaches on data.
        int64_t j0, j1, ja, jb;
        tapRange((q + 3) * g.dw, g.sw, g.ow, g.pw, g.pw + g.w, j0, ja);
        tapRange(q * g.dw, g.sw, g.ow, g.pw, g.pw + g.w, jb, j1);
        j1 = std::max(j1, ja);
        if (j0 >= j1)
          continue;
        v8 s0 = {}, s1 = {}, s2 = {}, s3 = {};
        const float *p = xr + q * qs + j0 * xs;
        for (int64_t j = j0; j < j1; ++j, p += xs) {
          const v8 gv = gr[j];
          s0 += gv * *reinterpret_cast<const v8 *>(p);
          s1 += gv * *reinterpret_cast<const v8 *>(p + qs);
          s2 += gv * *reinterpret_cast<const v8 *>(p + 2 * qs);
          s3 += gv * *reinterpret_cast<const v8 *>(p + 3 * qs);
        }
        add(d + q * L, s0);
        add(d + (q + 1) * L, s1);
        add(d + (q + 2) * L, s2);
        add(d + (q + 3) * L, s3);
      }
      for (; q < g.kw; ++q) {
        int64_t j0, j1;
        tapRange(q * g.dw, g.sw, g.ow, g.pw, g.pw + g.w, j0, j1);
        if (j0 >= j1)
          continue;
        v8 s0 = {}, s1 = {};
        const float *p = xr + q * qs;
        int64_t j = j0;
        for (; j + 2 <= j1; j += 2) {
          s0 += gr[j] * *reinterpret_cast<const v8 *>(p + j * xs);
          s1 += gr[j + 1] * *reinterpret_cast<const v8 *>(p + (j + 1) * xs);
        }
        if (j < j1)
          s0 += gr[j] * *reinterpret_cast<const v8 *>(p + j * xs);
        add(d + q * L, s0 + s1);
      }
    }
  }
}

/// Per-thread buffers of the blocked kernels.
struct Buffers {
  std::vector<float> padded, out, taps, tmp;
  std::vector<uint16_t> half; // a 16-bit block before widening / after rounding
  std::vector<double> acc;
};

Buffers &buffers() {
  thread_local Buffers b;
  return b;
}

/// Planes idx[l] (-1: none) of t, n elements each: their addresses.
template <typename T> void planes(const amprt_tensor *t, const int64_t *idx, int64_t n, T **out) {
  for (int64_t l = 0; l < L; ++l)
    out[l] = idx[l] < 0 ? nullptr : static_cast<T *>(t->data) + idx[l] * n;
}

/// dst [hp][wp][8] (f32) = planes idx[l] of t (h x w) at offset (ph, pw),
/// zero-padded: f32 planes interleaved, 16-bit ones interleaved as they are
/// and then widened in one vector pass (exact).
void loadBlock(const amprt_tensor *t, const int64_t *idx, int64_t h, int64_t w, int64_t hp,
               int64_t wp, int64_t ph, int64_t pw, Buffers &bf, float *dst) {
  if (t->dtype == AMPRT_F32) {
    const float *src[L];
    planes(t, idx, h * w, src);
    interleave(src, h, w, hp, wp, ph, pw, dst);
    return;
  }
  const uint16_t *src[L];
  planes(t, idx, h * w, src);
  bf.half.resize(hp * wp * L);
  interleave(src, h, w, hp, wp, ph, pw, bf.half.data());
  (void)amprt_convert(bf.half.data(), t->dtype, dst, AMPRT_F32, (size_t)(hp * wp * L));
}

/// Planes idx[l] of t (h x w) = src [rows][wp][8] (f32) from offset (ph,
/// pw): f32 deinterleaved, f16 / bf16 rounded once in one vector pass (the
/// rows from ph to ph + h) and then deinterleaved.
void storeBlock(amprt_tensor *t, const int64_t *idx, const float *src, int64_t wp, int64_t ph,
                int64_t pw, int64_t h, int64_t w, Buffers &bf) {
  if (t->dtype == AMPRT_F32) {
    float *dst[L];
    planes(t, idx, h * w, dst);
    deinterleave(src, wp, ph, pw, h, w, dst);
    return;
  }
  uint16_t *dst[L];
  planes(t, idx, h * w, dst);
  bf.half.resize(h * wp * L);
  (void)amprt_convert(src + ph * wp * L, AMPRT_F32, bf.half.data(), t->dtype, (size_t)(h * wp * L));
  deinterleave(bf.half.data(), wp, 0, pw, h, w, dst);
}

} // namespace

bool amprt::depthwiseDirectFits(const amprt_tensor *x, const amprt_tensor *w,
                                const amprt_conv_params *p) {
  return p->spatial == 2 && x->rank == 4 && w->rank == 4 && p->group > 1 &&
         x->shape[1] == p->group && w->shape[1] == 1 && w->shape[0] % p->group == 0;
}

void amprt::depthwiseForward(const amprt_tensor *x, const amprt_tensor *w, const float *bias,
                             const amprt_conv_params *p, amprt_tensor *y) {
  if (amprt_tensor_numel(y) == 0)
    return;
  const Dw g = geometry(x, w, y, p);
  const int64_t co = g.c * g.m, k = g.kh * g.kw, yplane = g.oh * g.ow;
  const int64_t hp = g.hp, wp = g.wp;
  const int64_t blocks = (co + L - 1) / L;
  Loops loops{g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, 0, 0, 0, 0};
  loops.r0 = g.ph; // x's data in the padded block
  loops.r1 = g.ph + g.h;
  loops.c0 = g.pw;
  loops.c1 = g.pw + g.w;
  // Blocks of eight output channels (lane l: output channel o0 + l, which
  // reads input channel (o0 + l) / M), blocks and images on the threads.
  parallelFor(blocks * g.n, 1, 1, [&](int64_t t0, int64_t t1) {
    Buffers &bf = buffers();
    bf.padded.resize(hp * wp * L);
    bf.out.resize(yplane * L);
    bf.taps.resize(k * L);
    bf.tmp.resize(k * L);
    float b8[L];
    int64_t tapsOf = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o0 = (t / g.n) * L, b = t % g.n, lanes = std::min(L, co - o0);
      if (tapsOf != o0) {
        tapsBlock(w, o0, lanes, k, bf.tmp.data(), bf.taps.data());
        for (int64_t l = 0; l < L; ++l)
          b8[l] = bias && l < lanes ? bias[o0 + l] : 0.0f;
        tapsOf = o0;
      }
      int64_t xi[L], yi[L];
      for (int64_t l = 0; l < L; ++l) {
        xi[l] = l < lanes ? b * g.c + (o0 + l) / g.m : -1;
        yi[l] = l < lanes ? b * co + o0 + l : -1;
      }
      loadBlock(x, xi, g.h, g.w, hp, wp, g.ph, g.pw, bf, bf.padded.data());
      forwardBlock(bf.padded.data(), wp, bf.taps.data(), b8, loops, false, bf.out.data());
      storeBlock(y, yi, bf.out.data(), g.ow, 0, 0, g.oh, g.ow, bf);
    }
  });
}

void amprt::depthwiseBackwardData(const amprt_tensor *w, const amprt_tensor *dy,
                                  const amprt_conv_params *p, amprt_tensor *dx) {
  if (amprt_tensor_numel(dy) == 0) { // no outputs (an empty batch or map): dx = 0
    std::memset(dx->data, 0, (size_t)amprt_tensor_numel(dx) * amprt_dtype_size(dx->dtype));
    return;
  }
  const Dw g = geometry(dx, w, dy, p);
  const int64_t co = g.c * g.m, k = g.kh * g.kw, xplane = g.h * g.w, yplane = g.oh * g.ow;
  const bool unit = g.sh == 1 && g.sw == 1;
  // Stride 1: dx is the forward's loops over dy zero-padded by the kernel's
  // extent with the taps flipped: dx[h, c] = sum of w[kh-1-a, kw-1-q] *
  // G[h + ph + a * dh, c + pw + q * dw], G[i + th, j + tw] = dy[i, j].
  // Other strides: each dy position scattered tap by tap into the padded
  // block.
  const int64_t th = (g.kh - 1) * g.dh, tw = (g.kw - 1) * g.dw;
  const int64_t hp = unit ? std::max(g.oh, g.h + g.ph) + th : std::max(g.hp, g.h + g.ph),
                wp = unit ? std::max(g.ow, g.w + g.pw) + tw : std::max(g.wp, g.w + g.pw);
  // (rows and columns relative to G's row ph, column pw)
  Loops flipped{g.h, g.w, g.kh, g.kw, 1, 1, g.dh, g.dw, 0, 0, 0, 0};
  flipped.r0 = th - g.ph;
  flipped.r1 = th - g.ph + g.oh;
  flipped.c0 = tw - g.pw;
  flipped.c1 = tw - g.pw + g.ow;
  const int64_t blocks = (g.c + L - 1) / L;
  // Blocks of eight input channels (lane l: input channel c0 + l), each
  // summing the contributions of its M output channels.
  parallelFor(blocks * g.n, 1, 1, [&](int64_t t0, int64_t t1) {
    Buffers &bf = buffers();
    bf.padded.resize(hp * wp * L);
    bf.out.resize((unit ? xplane : yplane) * L);
    bf.taps.resize(k * L * g.m);
    bf.tmp.resize(k);
    const float zero[L] = {};
    int64_t tapsOf = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t c0 = (t / g.n) * L, b = t % g.n, lanes = std::min(L, g.c - c0);
      if (tapsOf != c0) {
        // The taps of output channels (c0 + l) * M + mm, flipped for stride 1.
        std::fill(bf.taps.begin(), bf.taps.end(), 0.0f);
        for (int64_t mm = 0; mm < g.m; ++mm)
          for (int64_t l = 0; l < lanes; ++l) {
            (void)amprt_convert(static_cast<const char *>(w->data) +
                                    ((c0 + l) * g.m + mm) * k * amprt_dtype_size(w->dtype),
                                w->dtype, bf.tmp.data(), AMPRT_F32, (size_t)k);
            for (int64_t q = 0; q < k; ++q)
              bf.taps[(mm * k + (unit ? k - 1 - q : q)) * L + l] = bf.tmp[q];
          }
        tapsOf = c0;
      }
      if (!unit)
        std::fill(bf.padded.begin(), bf.padded.end(), 0.0f);
      for (int64_t mm = 0; mm < g.m; ++mm) {
        int64_t gi[L];
        for (int64_t l = 0; l < L; ++l)
          gi[l] = l < lanes ? b * co + (c0 + l) * g.m + mm : -1;
        const float *taps = bf.taps.data() + mm * k * L;
        if (unit) {
          loadBlock(dy, gi, g.oh, g.ow, hp, wp, th, tw, bf, bf.padded.data());
          forwardBlock(bf.padded.data() + (g.ph * wp + g.pw) * L, wp, taps, zero, flipped, mm > 0,
                       bf.out.data());
        } else {
          loadBlock(dy, gi, g.oh, g.ow, g.oh, g.ow, 0, 0, bf, bf.out.data());
          backwardDataBlock(bf.out.data(), taps, g, wp, bf.padded.data());
        }
      }
      int64_t xi[L];
      for (int64_t l = 0; l < L; ++l)
        xi[l] = l < lanes ? b * g.c + c0 + l : -1;
      if (unit)
        storeBlock(dx, xi, bf.out.data(), g.w, 0, 0, g.h, g.w, bf);
      else
        storeBlock(dx, xi, bf.padded.data(), wp, g.ph, g.pw, g.h, g.w, bf);
    }
  });
}

void amprt::depthwiseWeightGrad(const amprt_tensor *x, const amprt_tensor *dy,
                                const amprt_conv_params *p, amprt_tensor *dw) {
  if (amprt_tensor_numel(dy) == 0 || amprt_tensor_numel(x) == 0) { // nothing summed: dw = 0
    std::memset(dw->data, 0, (size_t)amprt_tensor_numel(dw) * amprt_dtype_size(dw->dtype));
    return;
  }
  const Dw g = geometry(x, dw, dy, p);
  const int64_t co = g.c * g.m, k = g.kh * g.kw, yplane = g.oh * g.ow;
  const int64_t hp = g.hp, wp = g.wp;
  const int64_t blocks = (co + L - 1) / L;
  // Blocks of eight output channels on the threads, each summing over the
  // images in double.
  parallelFor(blocks, 1, 1, [&](int64_t t0, int64_t t1) {
    Buffers &bf = buffers();
    bf.padded.resize(hp * wp * L);
    bf.out.resize(yplane * L);
    bf.acc.resize(k * L);
    std::vector<float> gwt(k * L);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o0 = t * L, lanes = std::min(L, co - o0);
      std::fill(bf.acc.begin(), bf.acc.end(), 0.0);
      for (int64_t b = 0; b < g.n; ++b) {
        int64_t xi[L], gi[L];
        for (int64_t l = 0; l < L; ++l) {
          xi[l] = l < lanes ? b * g.c + (o0 + l) / g.m : -1;
          gi[l] = l < lanes ? b * co + o0 + l : -1;
        }
        loadBlock(x, xi, g.h, g.w, hp, wp, g.ph, g.pw, bf, bf.padded.data());
        loadBlock(dy, gi, g.oh, g.ow, g.oh, g.ow, 0, 0, bf, bf.out.data());
        weightGradBlock(bf.out.data(), bf.padded.data(), wp, g, bf.acc.data());
      }
      for (int64_t l = 0; l < lanes; ++l)
        for (int64_t q = 0; q < k; ++q)
          gwt[l * k + q] = (float)bf.acc[q * L + l];
      (void)amprt_convert(gwt.data(), AMPRT_F32,
                          static_cast<char *>(dw->data) + o0 * k * amprt_dtype_size(dw->dtype),
                          dw->dtype, (size_t)(lanes * k));
    }
  });
}
