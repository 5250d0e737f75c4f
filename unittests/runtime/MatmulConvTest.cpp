//===- MatmulConvTest.cpp - matrix products, convolution, pooling --------===//
//
// References in double from the stored (already rounded) inputs. f16 / bf16
// products accumulate in f32: the tolerance is half an ulp of the output
// type plus f32 accumulation error, sqrt(K) * K-proportional bound.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "common/convert.h"
#include "cpu/conv/conv.h"
#include "cpu/matmul/matmul.h"
#include "host/tune.h"

using namespace amprt_test;

namespace {
double accTol(int64_t k) { return 1e-6 * std::sqrt((double)k) * 4; }
} // namespace

TEST(Gemm, TransposesAlphaBetaBiasEveryType) {
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_F16, AMPRT_BF16})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t m = 17, n = 23, k = 129;
        Buf a = randn(dt, ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k});
        Buf b = randn(dt, tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n});
        Buf c = randn(dt, {n});
        Buf y(dt, {m, n});
        AMPRT_OK_OR_FAIL(amprt_gemm(nullptr, a.p(), b.p(), c.p(), 0.5f, 2.0f, ta, tb, y.p()));
        std::vector<double> ref(m * n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < k; ++p) {
              double av = ta ? a.get(p * m + i) : a.get(i * k + p);
              double bv = tb ? b.get(j * k + p) : b.get(p * n + j);
              s += av * bv;
              mag += std::fabs(av * bv);
            }
            ref[i * n + j] = 0.5 * s + 2.0 * c.get(j);
            (void)mag;
          }
        EXPECT_TRUE(near(y, ref, 0.5 + (dt == AMPRT_F32 ? 8 : 0.02), accTol(k), 1e-4))
            << amprt_dtype_name(dt) << " ta " << ta << " tb " << tb;
      }
}

// What autocast writes for a bf16 / f16 product: an f32 bias (Gemm's C)
// added to the f32 accumulator before the one rounding, and an f32 result
// (the accumulator unrounded) where only f32 reads it.
TEST(Gemm, F32BiasAndF32ResultWithLowOperands) {
  for (amprt_dtype dt : {AMPRT_F16, AMPRT_BF16})
    for (amprt_dtype yt : {dt, AMPRT_F32})
      for (auto [alpha, beta] : {std::pair{1.0f, 1.0f}, std::pair{0.5f, 2.0f}})
        for (int32_t flags : {0, (int32_t)AMPRT_GEMM_RELU}) {
          const int64_t m = 19, n = 37, k = 200;
          Buf a = randn(dt, {m, k}), b = randn(dt, {n, k}), c = randn(AMPRT_F32, {n});
          Buf y(yt, {m, n});
          AMPRT_OK_OR_FAIL(
              amprt_gemm_ex(nullptr, a.p(), b.p(), c.p(), alpha, beta, 0, 1, flags, y.p()));
          std::vector<double> ref(m * n);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = 0;
              for (int64_t p = 0; p < k; ++p)
                s += a.get(i * k + p) * b.get(j * k + p);
              double v = alpha * s + beta * c.get(j); // c not rounded to dt
              ref[i * n + j] = flags ? std::max(v, 0.0) : v;
            }
          // One rounding to y's type (half an ulp) plus the f32 sum's error.
          EXPECT_TRUE(near(y, ref, yt == AMPRT_F32 ? 8 : 0.5, 0.0, 4 * accTol(k)))
              << amprt_dtype_name(dt) << " -> " << amprt_dtype_name(yt) << " alpha " << alpha
              << " relu " << flags;
        }
  // The matmul's f32 result from bf16 operands.
  Buf a = randn(AMPRT_BF16, {3, 16, 40}), b = randn(AMPRT_BF16, {40, 24}),
      y(AMPRT_F32, {3, 16, 24});
  AMPRT_OK_OR_FAIL(amprt_matmul(nullptr, a.p(), b.p(), y.p()));
  std::vector<double> ref;
  for (int64_t i = 0; i < 3 * 16; ++i)
    for (int64_t j = 0; j < 24; ++j) {
      double s = 0;
      for (int64_t p = 0; p < 40; ++p)
        s += a.get(i * 40 + p) * b.get(p * 24 + j);
      ref.push_back(s);
    }
  EXPECT_TRUE(near(y, ref, 8, 0.0, 4 * accTol(40)));
}

TEST(Matmul, BatchedBroadcastAndVectors) {
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16}) {
    Buf a = randn(dt, {2, 1, 3, 8}), b = randn(dt, {4, 8, 5}), y(dt, {2, 4, 3, 5});
    AMPRT_OK_OR_FAIL(amprt_matmul(nullptr, a.p(), b.p(), y.p()));
    std::vector<double> ref;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j)
        for (int r = 0; r < 3; ++r)
          for (int c = 0; c < 5; ++c) {
            double s = 0;
            for (int p = 0; p < 8; ++p)
              s += a.get((i * 3 + r) * 8 + p) * b.get((j * 8 + p) * 5 + c);
            ref.push_back(s);
          }
    EXPECT_TRUE(near(y, ref, 0.5 + (dt == AMPRT_F32 ? 4 : 0.02), accTol(8), 1e-5));
    Buf v = randn(dt, {8}), yv(dt, {4, 5});
    AMPRT_OK_OR_FAIL(amprt_matmul(nullptr, v.p(), b.p(), yv.p()));
    std::vector<double> rv;
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 5; ++c) {
        double s = 0;
        for (int p = 0; p < 8; ++p)
          s += v.get(p) * b.get((j * 8 + p) * 5 + c);
        rv.push_back(s);
      }
    EXPECT_TRUE(near(yv, rv, 0.5 + (dt == AMPRT_F32 ? 4 : 0.02), accTol(8), 1e-5));
  }
  Buf a = randn(AMPRT_F32, {3, 4}), b = randn(AMPRT_F32, {5, 2}), y(AMPRT_F32, {3, 2});
  EXPECT_EQ(amprt_matmul(nullptr, a.p(), b.p(), y.p()), AMPRT_ERR_INVALID_ARGUMENT);
}

namespace {
/// Forces the per-shape kernel choice for a scope (amprt::forceKernelForTesting).
struct KernelForced {
  explicit KernelForced(const char *name) { amprt::forceKernelForTesting(name); }
  ~KernelForced() { amprt::forceKernelForTesting(""); }
};

struct ConvCase {
  int64_t n, c, h, w, m, kh, kw, stride, pad, dil, group;
  int64_t padEnd = -1; // pads at the end (-1: pad)
  int64_t endPad() const { return padEnd < 0 ? pad : padEnd; }
  int64_t outH() const { return (h + pad + endPad() - ((kh - 1) * dil + 1)) / stride + 1; }
  int64_t outW() const { return (w + pad + endPad() - ((kw - 1) * dil + 1)) / stride + 1; }
  amprt_conv_params params() const;
};

amprt_conv_params convParamsOf(int64_t stride, int64_t pad, int64_t dil, int64_t group = 1) {
  amprt_conv_params p{};
  p.spatial = 2;
  p.group = group;
  for (int i = 0; i < 2; ++i) {
    p.strides[i] = stride;
    p.dilations[i] = dil;
    p.pads_begin[i] = p.pads_end[i] = pad;
  }
  return p;
}

amprt_conv_params ConvCase::params() const {
  amprt_conv_params p = convParamsOf(stride, pad, dil, group);
  p.pads_end[0] = p.pads_end[1] = endPad();
  return p;
}

/// Calls f(y index, x index, w index) for every product of the convolution
/// (each output element's taps inside the padded input).
template <typename F> void forEachTap(const ConvCase &cc, int64_t oh, int64_t ow, F f) {
  int64_t cg = cc.c / cc.group, mg = cc.m / cc.group;
  for (int64_t n = 0; n < cc.n; ++n)
    for (int64_t m = 0; m < cc.m; ++m)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t yi = ((n * cc.m + m) * oh + i) * ow + j, g = m / mg;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t p = 0; p < cc.kh; ++p)
              for (int64_t q = 0; q < cc.kw; ++q) {
                int64_t hi = i * cc.stride - cc.pad + p * cc.dil;
                int64_t wi = j * cc.stride - cc.pad + q * cc.dil;
                if (hi < 0 || hi >= cc.h || wi < 0 || wi >= cc.w)
                  continue;
                f(yi, ((n * cc.c + g * cg + c) * cc.h + hi) * cc.w + wi,
                  ((m * cg + c) * cc.kh + p) * cc.kw + q);
              }
        }
}

std::vector<double> refConv(const Buf &x, const Buf &w, const Buf *bias, const ConvCase &cc,
                            int64_t oh, int64_t ow) {
  std::vector<double> y(cc.n * cc.m * oh * ow, 0.0);
  for (int64_t yi = 0; yi < (int64_t)y.size(); ++yi)
    y[yi] = bias ? bias->get((yi / (oh * ow)) % cc.m) : 0.0;
  forEachTap(cc, oh, ow,
             [&](int64_t yi, int64_t xi, int64_t wi) { y[yi] += x.get(xi) * w.get(wi); });
  return y;
}
} // namespace

TEST(Conv, ForwardAndBackwardAgainstDirectLoops) {
  const ConvCase cases[] = {{2, 3, 9, 8, 4, 3, 3, 1, 1, 1, 1},
                            {1, 4, 11, 10, 6, 3, 2, 2, 0, 1, 2},
                            {2, 2, 12, 12, 2, 3, 3, 1, 2, 2, 1}};
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_F16, AMPRT_BF16})
    for (const ConvCase &cc : cases) {
      int64_t oh = (cc.h + 2 * cc.pad - ((cc.kh - 1) * cc.dil + 1)) / cc.stride + 1;
      int64_t ow = (cc.w + 2 * cc.pad - ((cc.kw - 1) * cc.dil + 1)) / cc.stride + 1;
      Buf x = randn(dt, {cc.n, cc.c, cc.h, cc.w});
      Buf w = randn(dt, {cc.m, cc.c / cc.group, cc.kh, cc.kw});
      Buf b = randn(dt, {cc.m});
      Buf y(dt, {cc.n, cc.m, oh, ow});
      amprt_conv_params p = convParamsOf(cc.stride, cc.pad, cc.dil, cc.group);
      AMPRT_OK_OR_FAIL(amprt_conv(nullptr, x.p(), w.p(), b.p(), &p, y.p()));
      int64_t kk = cc.c / cc.group * cc.kh * cc.kw;
      EXPECT_TRUE(near(y, refConv(x, w, &b, cc, oh, ow), 0.5 + (dt == AMPRT_F32 ? 8 : 0.02),
                       accTol(kk), 1e-4))
          << amprt_dtype_name(dt) << " group " << cc.group;
      if (dt != AMPRT_F32)
        continue;
      // Backward: <dy, conv(x, w)> is bilinear, so dx and dw follow from
      // the reference by linearity: check against central differences of
      // the double reference in a few random directions.
      Buf dy = randn(AMPRT_F32, {cc.n, cc.m, oh, ow});
      Buf dx(AMPRT_F32, x.shape), dw(AMPRT_F32, w.shape), db(AMPRT_F32, {cc.m});
      AMPRT_OK_OR_FAIL(
          amprt_conv_backward(nullptr, x.p(), w.p(), dy.p(), &p, dx.p(), dw.p(), db.p()));
      auto inner = [&](const Buf &xx, const Buf &ww) {
        auto r = refConv(xx, ww, nullptr, cc, oh, ow);
        double s = 0;
        for (size_t i = 0; i < r.size(); ++i)
          s += r[i] * dy.get(i);
        return s;
      };
      // Exact identity for a bilinear form: <dx, x> = <dy, conv(x, w)> = <dw, w>.
      double base = inner(x, w), dxx = 0, dww = 0;
      for (int64_t i = 0; i < x.numel(); ++i)
        dxx += dx.get(i) * x.get(i);
      for (int64_t i = 0; i < w.numel(); ++i)
        dww += dw.get(i) * w.get(i);
      EXPECT_NEAR(dxx, base, 1e-4 * (1 + std::fabs(base)));
      EXPECT_NEAR(dww, base, 1e-4 * (1 + std::fabs(base)));
      std::vector<double> rdb(cc.m, 0.0);
      for (int64_t n = 0; n < cc.n; ++n)
        for (int64_t m = 0; m < cc.m; ++m)
          for (int64_t i = 0; i < oh * ow; ++i)
            rdb[m] += dy.get((n * cc.m + m) * oh * ow + i);
      // f32 accumulation of O(100) unit terms: absolute error, not relative.
      EXPECT_TRUE(near(db, rdb, 4, 1e-6, 2e-5));
      // And element by element for dw: one weight perturbed.
      for (int trial = 0; trial < 3; ++trial) {
        int64_t i = (int64_t)(rng()() % (uint64_t)w.numel());
        Buf wp = w;
        wp.set(i, w.get(i) + 1.0);
        EXPECT_NEAR(dw.get(i), inner(x, wp) - base, 1e-4 * (1 + std::fabs(dw.get(i))));
      }
    }
}

namespace {
/// The adjoint of refConv: dx and dw of <dy, conv(x, w)>, in double.
void refConvBackward(const Buf &x, const Buf &w, const Buf &dy, const ConvCase &cc, int64_t oh,
                     int64_t ow, std::vector<double> &dx, std::vector<double> &dw) {
  dx.assign(x.numel(), 0.0);
  dw.assign(w.numel(), 0.0);
  forEachTap(cc, oh, ow, [&](int64_t yi, int64_t xi, int64_t wi) {
    dx[xi] += dy.get(yi) * w.get(wi);
    dw[wi] += dy.get(yi) * x.get(xi);
  });
}
} // namespace

// bf16 x, w and dy with enough channels per group run on oneDNN's bf16
// backward kernels (the f32 ones on widened copies otherwise): the same
// exact products summed in f32, so within f32 accumulation error of the
// double reference, plus half an ulp where the gradient is stored in bf16.
// Depthwise convolutions' weight gradients (our loop where oneDNN would
// take im2col + gemm) likewise, from f32 and bf16 inputs, and those of small
// outputs (im2col + one product).
TEST(Conv, Bf16AndDepthwiseBackwardAgainstDirectLoops) {
  const ConvCase cases[] = {{2, 16, 9, 8, 24, 3, 3, 1, 1, 1, 1},
                            {2, 16, 11, 10, 16, 3, 3, 2, 0, 1, 2},
                            {1, 8, 12, 12, 8, 3, 3, 1, 2, 2, 1},
                            {2, 32, 6, 6, 16, 1, 1, 1, 0, 1, 1},
                            {2, 24, 5, 5, 24, 5, 5, 1, 2, 1, 24},
                            {8, 32, 2, 2, 32, 5, 5, 1, 2, 1, 32},
                            {2, 16, 9, 10, 16, 3, 3, 2, 1, 1, 16},
                            {1, 16, 8, 8, 16, 3, 3, 1, 2, 2, 16},
                            // At most 4 output positions, one group: the weight gradient as
                            // im2col + one product (2 x 2 with padding, 2 x 2 strided, 2 x 2
                            // dilated, 1 x 3 unpadded).
                            {8, 32, 2, 2, 48, 3, 3, 1, 1, 1, 1},
                            {4, 16, 4, 4, 24, 3, 3, 2, 1, 1, 1},
                            {2, 16, 7, 7, 16, 3, 3, 2, 0, 2, 1},
                            {3, 8, 3, 5, 8, 3, 3, 1, 0, 1, 1},
                            // Small maps whose images im2col takes four at a time
                            // (AVX-512), the last group of one.
                            {5, 16, 4, 4, 16, 3, 3, 1, 1, 1, 1},
                            // direct-amx: rows longer than a chunk of 32
                            // positions, a 5 x 3 kernel with pad 2, more channels than a
                            // tile row.
                            {2, 8, 6, 37, 16, 5, 3, 1, 2, 1, 1},
                            {3, 40, 7, 7, 20, 3, 3, 1, 1, 1, 1},
                            // ... and stride 2: an image's 7 x 7 stem, output rows of 35
                            // (a chunk's 32 positions from 63 input columns).
                            {2, 3, 20, 22, 16, 7, 7, 2, 3, 1, 1},
                            {1, 8, 6, 70, 16, 3, 3, 2, 1, 1, 1}};
  // Each kernel the per-shape choice (AMPRT_TUNE) may take, forced, and
  // the timed choice itself ("").
  for (const char *force : {"", "bf16", "f32", "im2col-bf16", "im2col-f32", "direct-amx"})
    for (const ConvCase &cc : cases)
      // (operands, dx, dw and db): autocast's weight gradients are f32 (the
      // accumulator) next to a bf16 / f16 data gradient.
      for (auto [in, out, wout] : {std::tuple{AMPRT_BF16, AMPRT_BF16, AMPRT_BF16},
                                   std::tuple{AMPRT_BF16, AMPRT_F32, AMPRT_F32},
                                   std::tuple{AMPRT_F32, AMPRT_F32, AMPRT_F32},
                                   std::tuple{AMPRT_F16, AMPRT_F16, AMPRT_F16},
                                   std::tuple{AMPRT_BF16, AMPRT_BF16, AMPRT_F32},
                                   std::tuple{AMPRT_F16, AMPRT_F16, AMPRT_F32}}) {
        SCOPED_TRACE(std::string("kernel forced: ") + (*force ? force : "(timed)"));
        KernelForced forced(force);
        int64_t oh = (cc.h + 2 * cc.pad - ((cc.kh - 1) * cc.dil + 1)) / cc.stride + 1;
        int64_t ow = (cc.w + 2 * cc.pad - ((cc.kw - 1) * cc.dil + 1)) / cc.stride + 1;
        Buf x = randn(in, {cc.n, cc.c, cc.h, cc.w});
        Buf w = randn(in, {cc.m, cc.c / cc.group, cc.kh, cc.kw});
        Buf dy = randn(in, {cc.n, cc.m, oh, ow});
        amprt_conv_params p = convParamsOf(cc.stride, cc.pad, cc.dil, cc.group);
        Buf dx(out, x.shape), dw(wout, w.shape), db(wout, {cc.m});
        AMPRT_OK_OR_FAIL(
            amprt_conv_backward(nullptr, x.p(), w.p(), dy.p(), &p, dx.p(), dw.p(), db.p()));
        std::vector<double> rdx, rdw, rdb(cc.m, 0.0);
        refConvBackward(x, w, dy, cc, oh, ow, rdx, rdw);
        for (int64_t n = 0; n < cc.n; ++n)
          for (int64_t m = 0; m < cc.m; ++m)
            for (int64_t i = 0; i < oh * ow; ++i)
              rdb[m] += dy.get((n * cc.m + m) * oh * ow + i);
        // Terms of magnitude ~1: f32 error ~ sqrt(terms) * 2^-24 each.
        int64_t dxTerms = cc.m / cc.group * cc.kh * cc.kw, dwTerms = cc.n * oh * ow;
        EXPECT_TRUE(near(dx, rdx, 0.5, 0.0, 8 * accTol(dxTerms)))
            << "dx " << amprt_dtype_name(in) << " -> " << amprt_dtype_name(out) << " c " << cc.c
            << " group " << cc.group;
        EXPECT_TRUE(near(dw, rdw, 0.5, 0.0, 8 * accTol(dwTerms)))
            << "dw " << amprt_dtype_name(in) << " -> " << amprt_dtype_name(wout) << " c " << cc.c
            << " group " << cc.group;
        EXPECT_TRUE(near(db, rdb, 0.5, 0.0, 8 * accTol(dwTerms)))
            << "db " << amprt_dtype_name(wout);
        // dx alone (ConvTranspose's call) and dw alone agree with the pair.
        Buf dx2(out, x.shape), dw2(wout, w.shape);
        AMPRT_OK_OR_FAIL(
            amprt_conv_backward(nullptr, x.p(), w.p(), dy.p(), &p, dx2.p(), nullptr, nullptr));
        const int64_t before = amprt::im2colConvCallsForTesting();
        AMPRT_OK_OR_FAIL(
            amprt_conv_backward(nullptr, x.p(), w.p(), dy.p(), &p, nullptr, dw2.p(), nullptr));
        EXPECT_EQ(dx2.bytes, dx.bytes);
        EXPECT_EQ(dw2.bytes, dw.bytes);
        // direct-amx, forced where it is offered (AMX, bf16 operands, an
        // f32 dw, stride 1 or 2, no dilation, one group), ran.
        if (!std::strcmp(force, "direct-amx") && amprt::amxProductAvailable() && in == AMPRT_BF16 &&
            wout == AMPRT_F32 && cc.stride <= 2 && cc.dil == 1 && cc.group == 1 &&
            amprt::bf16KernelsForTesting())
          EXPECT_EQ(amprt::im2colConvCallsForTesting() - before, 1) << "direct-amx did not run";
      }
}

// A convolution's forward and data gradient as im2col + one product (the
// weight in its plain layout), forced and as the per-shape choice takes
// them, against the double reference: every input type (widened to f32,
// or bf16 operands where the CPU has bf16 kernels), outputs in the input's
// type and in f32, bias, ReLU (with a NaN in x: kept, as the element-wise
// ReLU keeps it), strides, dilations, asymmetric pads, non-square and 1 x 1
// kernels, a first layer's 3 channels, a stride that skips input columns.
TEST(Conv, Im2colForwardAndDataGradientAgainstDirectLoops) {
  std::vector<ConvCase> cases = {{8, 32, 2, 2, 48, 3, 3, 1, 1, 1, 1},
                                 {2, 16, 9, 8, 24, 3, 3, 1, 1, 1, 1},
                                 {3, 8, 7, 9, 12, 3, 5, 2, 1, 1, 1, 2},
                                 {2, 8, 10, 10, 8, 3, 3, 1, 2, 2, 1},
                                 {2, 16, 6, 6, 32, 1, 1, 1, 0, 1, 1},
                                 {2, 4, 8, 11, 6, 3, 3, 3, 0, 1, 1},
                                 {1, 3, 12, 12, 16, 7, 7, 2, 3, 1, 1},
                                 {3, 24, 5, 7, 8, 1, 1, 1, 0, 1, 1},
                                 {2, 8, 4, 4, 16, 1, 1, 2, 0, 1, 1},
                                 // im2col-amx (OC a multiple of 16, C x KH x KW of 32): one tile
                                 // row of weights, columns of a partial tile; a longer sum.
                                 {2, 32, 4, 4, 16, 3, 3, 2, 1, 1, 1},
                                 {2, 64, 5, 6, 48, 1, 1, 1, 0, 1, 1},
                                 {8, 64, 2, 2, 32, 3, 3, 1, 1, 1, 1}};
  // (pointwise-bf16: the 1 x 1, stride 1, unpadded cases as one batched
  // product, bf16 operands; im2col-amx: bf16 operands on the AMX tiles, the
  // weights read in place, where the shape has whole tiles.)
  for (const char *force : {"im2col-f32", "im2col-bf16", "pointwise-bf16", "im2col-amx", ""})
    for (const ConvCase &cc : cases)
      for (amprt_dtype in : {AMPRT_F32, AMPRT_F16, AMPRT_BF16})
        for (amprt_dtype out : {in, AMPRT_F32})
          for (int run = 0; run < 3; ++run) {
            const int flags = run ? (int)AMPRT_CONV_RELU : 0;
            const bool withNaN = run == 2;
            const int64_t oh = cc.outH(), ow = cc.outW();
            SCOPED_TRACE(std::string("kernel forced: ") + (*force ? force : "(timed)") + ", " +
                         amprt_dtype_name(in) + " -> " + amprt_dtype_name(out) + ", c " +
                         std::to_string(cc.c) + " " + std::to_string(cc.h) + "x" +
                         std::to_string(cc.w) + " k " + std::to_string(cc.kh) + "x" +
                         std::to_string(cc.kw) + " stride " + std::to_string(cc.stride) +
                         " flags " + std::to_string(flags) + (withNaN ? " NaN" : ""));
            KernelForced forced(force);
            Buf x = randn(in, {cc.n, cc.c, cc.h, cc.w});
            if (withNaN)
              x.set(cc.h * cc.w / 2, NAN); // image 0, channel 0, mid-plane
            Buf w = randn(in, {cc.m, cc.c, cc.kh, cc.kw});
            Buf b = randn(in, {cc.m});
            Buf y(out, {cc.n, cc.m, oh, ow});
            amprt_conv_params p = cc.params();
            const int64_t before = amprt::im2colConvCallsForTesting();
            AMPRT_OK_OR_FAIL(amprt_conv_ex(nullptr, x.p(), w.p(), b.p(), &p, flags, y.p()));
            const int64_t forwardIm2col = amprt::im2colConvCallsForTesting() - before;
            std::vector<double> ref = refConv(x, w, &b, cc, oh, ow);
            int nans = 0;
            if (flags & AMPRT_CONV_RELU)
              for (double &r : ref) {
                nans += std::isnan(r);
                r = std::isnan(r) || r > 0 ? r : 0.0;
              }
            ASSERT_EQ(nans > 0, withNaN);
            const int64_t kk = cc.c * cc.kh * cc.kw;
            EXPECT_TRUE(near(y, ref, out == AMPRT_F32 ? 8.5 : 0.52, accTol(kk), 1e-4)) << "y";
            // The data gradient (no NaN: dy and w are finite).
            Buf dy = randn(in, {cc.n, cc.m, oh, ow});
            Buf dx(out, x.shape);
            AMPRT_OK_OR_FAIL(
                amprt_conv_backward(nullptr, x.p(), w.p(), dy.p(), &p, dx.p(), nullptr, nullptr));
            std::vector<double> rdx, rdw;
            refConvBackward(x, w, dy, cc, oh, ow, rdx, rdw);
            EXPECT_TRUE(
                near(dx, rdx, out == AMPRT_F32 ? 8.5 : 0.52, 0.0, 8 * accTol(cc.m * cc.kh * cc.kw)))
                << "dx";
            // Forced, the f32 product runs for every input type (both
            // passes); the bf16 ones (im2col, pointwise) where the CPU has
            // bf16 kernels.
            if (std::string(force) == "im2col-f32" ||
                (std::string(force) == "pointwise-bf16" && in == AMPRT_BF16 &&
                 amprt::bf16KernelsForTesting() && cc.kh == 1 && cc.stride == 1))
              EXPECT_EQ(amprt::im2colConvCallsForTesting() - before, 2);
            // Forced, im2col-amx runs the forward where it is offered.
            if (std::string(force) == "im2col-amx" && in == AMPRT_BF16 &&
                amprt::bf16KernelsForTesting() && amprt::amxProductAvailable() && cc.m % 16 == 0 &&
                kk % 32 == 0 && kk > 32)
              EXPECT_EQ(forwardIm2col, 1);
          }
  // Strides and dilations of 0 count as 1 (as everywhere in amprt_conv),
  // in every pass by im2col (a late layer's shape: the weight gradient's
  // fixed rule takes it too).
  const ConvCase cc{8, 16, 2, 2, 24, 3, 3, 1, 1, 1, 1};
  for (const char *force : {"im2col-f32", ""}) {
    SCOPED_TRACE(std::string("zero strides, kernel forced: ") + (*force ? force : "(timed)"));
    KernelForced forced(force);
    amprt_conv_params p{};
    p.spatial = 2;
    p.group = 1;
    for (int i = 0; i < 2; ++i)
      p.pads_begin[i] = p.pads_end[i] = 1;
    Buf x = randn(AMPRT_F32, {cc.n, cc.c, cc.h, cc.w}), w = randn(AMPRT_F32, {cc.m, cc.c, 3, 3});
    Buf dy = randn(AMPRT_F32, {cc.n, cc.m, 2, 2});
    Buf y(AMPRT_F32, {cc.n, cc.m, 2, 2}), dx(AMPRT_F32, x.shape), dw(AMPRT_F32, w.shape);
    const int64_t before = amprt::im2colConvCallsForTesting();
    AMPRT_OK_OR_FAIL(amprt_conv(nullptr, x.p(), w.p(), nullptr, &p, y.p()));
    AMPRT_OK_OR_FAIL(
        amprt_conv_backward(nullptr, x.p(), w.p(), dy.p(), &p, dx.p(), dw.p(), nullptr));
    if (*force)
      EXPECT_EQ(amprt::im2colConvCallsForTesting() - before, 3);
    std::vector<double> rdx, rdw;
    refConvBackward(x, w, dy, cc, 2, 2, rdx, rdw);
    EXPECT_TRUE(near(y, refConv(x, w, nullptr, cc, 2, 2), 8.5, accTol(144), 1e-4)) << "y";
    EXPECT_TRUE(near(dx, rdx, 8.5, 0.0, 8 * accTol(216))) << "dx";
    EXPECT_TRUE(near(dw, rdw, 8.5, 0.0, 8 * accTol(32))) << "dw";
  }
}

// The data gradient's col2im of a small output map (matmul+col2im): the
// AVX-512 gather against the scalar scatter and against the definition
// written here (each element of dx the sum, tap by tap in order, of the
// columns' values that reach it, in f32), bit for bit on random columns
// with an inf, a NaN and negative zeros. The maps: 2 x 2 to 8 x 8 outputs
// (one to four registers of a tap's row), planes past 64 elements (stride
// 2), dilation, asymmetric and large pads, kernels larger than the map.
TEST(Conv, SmallMapCol2imGatherMatchesTheScatterBitForBit) {
  const std::vector<ConvCase> cases = {
      {8, 5, 2, 2, 1, 3, 3, 1, 1, 1, 1},    {3, 7, 4, 4, 1, 3, 3, 1, 1, 1, 1},
      {2, 3, 5, 5, 1, 3, 3, 1, 1, 1, 1},    {2, 3, 6, 7, 1, 3, 3, 1, 1, 1, 1},
      {2, 4, 8, 8, 1, 3, 3, 1, 1, 1, 1},    {2, 3, 16, 16, 1, 3, 3, 2, 1, 1, 1},
      {3, 2, 7, 9, 1, 3, 5, 2, 1, 1, 1, 2}, {2, 3, 6, 6, 1, 3, 3, 1, 2, 2, 1},
      {1, 2, 12, 12, 1, 7, 7, 2, 3, 1, 1},  {4, 3, 3, 3, 1, 5, 3, 1, 2, 1, 1, 0}};
  for (const ConvCase &cc : cases) {
    const int64_t oh = cc.outH(), ow = cc.outW(), taps = cc.kh * cc.kw, ohw = oh * ow;
    const int64_t P = cc.n * ohw, hw = cc.h * cc.w;
    SCOPED_TRACE("n " + std::to_string(cc.n) + " c " + std::to_string(cc.c) + " " +
                 std::to_string(cc.h) + "x" + std::to_string(cc.w) + " k " + std::to_string(cc.kh) +
                 "x" + std::to_string(cc.kw) + " stride " + std::to_string(cc.stride) + " pad " +
                 std::to_string(cc.pad) + "/" + std::to_string(cc.endPad()) + " dilation " +
                 std::to_string(cc.dil));
    ASSERT_LE(ohw, 64);
    Buf cols = randn(AMPRT_F32, {cc.c * taps, P});
    std::vector<float> dcol((size_t)(cc.c * taps * P));
    for (size_t i = 0; i < dcol.size(); ++i)
      dcol[i] = (float)cols.get((int64_t)i);
    for (size_t i = 3; i < dcol.size(); i += 11)
      dcol[i] = -0.0f;
    // (f(dx index, column index) for each value that reaches dx, in the
    // order of the sums.)
    auto forEachReach = [&](auto f) {
      for (int64_t b = 0; b < cc.n; ++b)
        for (int64_t ci = 0; ci < cc.c; ++ci)
          for (int64_t a = 0; a < cc.kh; ++a)
            for (int64_t q = 0; q < cc.kw; ++q)
              for (int64_t i = 0; i < oh; ++i)
                for (int64_t j = 0; j < ow; ++j) {
                  const int64_t yi = i * cc.stride - cc.pad + a * cc.dil,
                                xj = j * cc.stride - cc.pad + q * cc.dil;
                  if (yi >= 0 && yi < cc.h && xj >= 0 && xj < cc.w)
                    f((b * cc.c + ci) * hw + yi * cc.w + xj,
                      (ci * taps + a * cc.kw + q) * P + b * ohw + i * ow + j);
                }
    };
    std::vector<int64_t> reached;
    forEachReach([&](int64_t, int64_t col) { reached.push_back(col); });
    dcol[(size_t)reached[reached.size() / 3]] = INFINITY;
    dcol[(size_t)reached[reached.size() / 2]] = NAN;
    std::vector<float> ref((size_t)(cc.n * cc.c * hw), 0.0f);
    forEachReach([&](int64_t at, int64_t col) { ref[(size_t)at] += dcol[(size_t)col]; });
    const amprt_conv_params p = cc.params();
    for (bool vector : {true, false}) {
      SCOPED_TRACE(vector ? "AVX-512 gather" : "scalar scatter");
      std::vector<float> out(ref.size(), 12345.0f);
      const bool ran = amprt::smallMapCol2imForTesting(&p, cc.n, cc.c, cc.h, cc.w, cc.kh, cc.kw, oh,
                                                       ow, dcol.data(), vector, out.data());
      EXPECT_EQ(ran, vector && amprt::haveAvx512bw());
      int64_t bad = 0, nans = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        nans += std::isnan(ref[i]);
        const bool same =
            std::isnan(ref[i]) ? std::isnan(out[i]) : std::memcmp(&ref[i], &out[i], 4) == 0;
        if (!same && bad++ < 5)
          ADD_FAILURE() << "element " << i << ": " << out[i] << ", expected " << ref[i];
      }
      EXPECT_EQ(bad, 0);
      EXPECT_GT(nans, 0);
    }
  }
}

// Depthwise convolutions (group = channels, M outputs per channel) by the
// direct kernels (depthwise.cpp) and by oneDNN's, forced, and as the
// per-shape choice takes them: all three passes against the double
// reference. The shapes: ConvNeXt's 7 x 7 on maps smaller than the kernel,
// channel counts that leave a block of eight part empty, strides,
// dilations, asymmetric pads, non-square kernels, two outputs per channel.
TEST(Conv, DepthwiseDirectAndOneDnnAgainstDirectLoops) {
  std::vector<ConvCase> cases = {{2, 16, 2, 2, 16, 7, 7, 1, 3, 1, 16},
                                 {2, 12, 5, 6, 12, 7, 7, 1, 3, 1, 12},
                                 {3, 8, 9, 10, 8, 3, 3, 2, 1, 1, 8},
                                 {1, 16, 8, 8, 16, 3, 3, 1, 2, 2, 16},
                                 {2, 6, 7, 7, 12, 3, 3, 1, 1, 1, 6},
                                 {2, 9, 8, 7, 9, 5, 5, 2, 2, 1, 9, 1},
                                 {1, 10, 6, 9, 20, 3, 5, 1, 1, 1, 10},
                                 {2, 8, 4, 4, 8, 1, 1, 1, 0, 1, 8},
                                 {2, 24, 16, 16, 24, 7, 7, 1, 3, 1, 24},
                                 {1, 5, 3, 11, 5, 3, 3, 3, 0, 1, 5, 2},
                                 // Empty: no images; no output positions (then dx, dw = 0).
                                 {0, 8, 4, 4, 8, 3, 3, 1, 1, 1, 8},
                                 {2, 8, 1, 1, 8, 3, 3, 2, 0, 1, 8}};
  for (const char *force : {"direct", "f32", ""})
    for (const ConvCase &cc : cases)
      for (auto [in, out, wout] : {std::tuple{AMPRT_F32, AMPRT_F32, AMPRT_F32},
                                   std::tuple{AMPRT_BF16, AMPRT_BF16, AMPRT_F32},
                                   std::tuple{AMPRT_BF16, AMPRT_F32, AMPRT_BF16},
                                   std::tuple{AMPRT_F16, AMPRT_F16, AMPRT_F16}}) {
        SCOPED_TRACE(std::string("kernel forced: ") + (*force ? force : "(timed)") + ", " +
                     amprt_dtype_name(in) + " -> " + amprt_dtype_name(out) + " / " +
                     amprt_dtype_name(wout) + ", c " + std::to_string(cc.c) + " h " +
                     std::to_string(cc.h) + " k " + std::to_string(cc.kh) + " stride " +
                     std::to_string(cc.stride));
        KernelForced forced(force);
        const int64_t oh = cc.outH(), ow = cc.outW();
        Buf x = randn(in, {cc.n, cc.c, cc.h, cc.w});
        Buf w = randn(in, {cc.m, 1, cc.kh, cc.kw});
        Buf b = randn(AMPRT_F32, {cc.m});
        Buf dy = randn(in, {cc.n, cc.m, oh, ow});
        amprt_conv_params p = cc.params();
        // Products of rounded values, summed in f32, rounded once.
        const int64_t taps = cc.kh * cc.kw;
        Buf y(out, {cc.n, cc.m, oh, ow});
        AMPRT_OK_OR_FAIL(amprt_conv(nullptr, x.p(), w.p(), b.p(), &p, y.p()));
        std::vector<double> ry = refConv(x, w, &b, cc, oh, ow);
        EXPECT_TRUE(near(y, ry, 0.5, 0.0, 8 * accTol(taps))) << "y";
        // With the ReLU in the call (its own choice of kernel when timed).
        Buf yr(out, y.shape);
        AMPRT_OK_OR_FAIL(amprt_conv_ex(nullptr, x.p(), w.p(), b.p(), &p, AMPRT_CONV_RELU, yr.p()));
        for (double &v : ry)
          v = std::max(0.0, v);
        EXPECT_TRUE(near(yr, ry, 0.5, 0.0, 8 * accTol(taps))) << "y with ReLU";
        Buf dx(out, x.shape), dw(wout, w.shape), db(wout, {cc.m});
        AMPRT_OK_OR_FAIL(
            amprt_conv_backward(nullptr, x.p(), w.p(), dy.p(), &p, dx.p(), dw.p(), db.p()));
        std::vector<double> rdx, rdw;
        refConvBackward(x, w, dy, cc, oh, ow, rdx, rdw);
        EXPECT_TRUE(near(dx, rdx, 0.5, 0.0, 8 * accTol(cc.m / cc.c * taps))) << "dx";
        EXPECT_TRUE(near(dw, rdw, 0.5, 0.0, 8 * accTol(cc.n * oh * ow))) << "dw";
      }
}

// An inf tap whose position falls into the padding meets no 0 in the
// direct kernels (as in oneDNN's direct ones): the outputs it does not
// reach stay finite, and NaN / inf in x reach exactly the outputs whose
// taps read them.
TEST(Conv, DepthwiseDirectSkipsThePadding) {
  KernelForced forced("direct");
  const ConvCase cc{2, 9, 3, 4, 9, 7, 7, 1, 3, 1, 9};
  const int64_t oh = cc.outH(), ow = cc.outW();
  Buf x = randn(AMPRT_F32, {cc.n, cc.c, cc.h, cc.w}), w = randn(AMPRT_F32, {cc.m, 1, 7, 7});
  w.set(0, INFINITY);          // channel 0, tap (0, 0): reads x[i - 3, j - 3]
  x.set(cc.h * cc.w + 5, NAN); // channel 1, (1, 1)
  amprt_conv_params p = cc.params();
  Buf y(AMPRT_F32, {cc.n, cc.m, oh, ow});
  AMPRT_OK_OR_FAIL(amprt_conv(nullptr, x.p(), w.p(), nullptr, &p, y.p()));
  EXPECT_TRUE(near(y, refConv(x, w, nullptr, cc, oh, ow), 0.5, 0.0, 8 * accTol(49)));
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j)
      EXPECT_TRUE(std::isfinite(y.get(i * ow + j)))
          << i << ", " << j; // 3 x 4 map: tap (0, 0) never inside
}

TEST(Pool, MaxAndAverageWithGradients) {
  Buf x = randn(AMPRT_F32, {2, 3, 7, 6});
  amprt_pool_params p{};
  p.spatial = 2;
  p.kernel[0] = 3;
  p.kernel[1] = 2;
  p.strides[0] = 2;
  p.strides[1] = 2;
  p.dilations[0] = p.dilations[1] = 1;
  p.pads_begin[0] = 1;
  p.pads_end[0] = 1;
  p.count_include_pad = 0;
  int64_t oh = (7 + 2 - 3) / 2 + 1, ow = (6 - 2) / 2 + 1;
  Buf y(AMPRT_F32, {2, 3, oh, ow}), idx(AMPRT_I64, {2, 3, oh, ow}), ya(AMPRT_F32, {2, 3, oh, ow});
  AMPRT_OK_OR_FAIL(amprt_max_pool(nullptr, x.p(), &p, y.p(), idx.p()));
  AMPRT_OK_OR_FAIL(amprt_average_pool(nullptr, x.p(), &p, ya.p()));
  std::vector<double> rmax, ravg;
  for (int nc = 0; nc < 6; ++nc)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        double m = -INFINITY, s = 0;
        int cnt = 0;
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 2; ++b) {
            int hi = i * 2 - 1 + a, wi = j * 2 + b;
            if (hi < 0 || hi >= 7 || wi < 0 || wi >= 6)
              continue;
            double v = x.get((nc * 7 + hi) * 6 + wi);
            m = std::max(m, v);
            s += v;
            ++cnt;
          }
        rmax.push_back(m);
        ravg.push_back(s / cnt);
      }
  EXPECT_TRUE(near(y, rmax, 0));
  EXPECT_TRUE(near(ya, ravg, 1, 1e-7));
  for (int64_t o = 0; o < y.numel(); ++o)
    EXPECT_EQ(x.get((int64_t)idx.get(o)), y.get(o)); // ONNX flat indices
  Buf dy = randn(AMPRT_F32, {2, 3, oh, ow}), dx(AMPRT_F32, {2, 3, 7, 6});
  AMPRT_OK_OR_FAIL(amprt_max_pool_grad(nullptr, dy.p(), idx.p(), dx.p()));
  std::vector<double> rdx(x.numel(), 0.0);
  for (int64_t o = 0; o < y.numel(); ++o)
    rdx[(int64_t)idx.get(o)] += dy.get(o);
  EXPECT_TRUE(near(dx, rdx, 1, 1e-7));
  AMPRT_OK_OR_FAIL(amprt_average_pool_grad(nullptr, dy.p(), &p, dx.p()));
  // <dx, x> = <dy, avgpool(x)> for the linear average pool.
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    lhs += dx.get(i) * x.get(i);
  for (int64_t o = 0; o < dy.numel(); ++o)
    rhs += dy.get(o) * ravg[o];
  EXPECT_NEAR(lhs, rhs, 1e-5 * (1 + std::fabs(rhs)));
}

// Average pooling's gradient is its forward's adjoint: <dx, x> = <dy,
// avgpool(x)>, for asymmetric pads with count_include_pad on and off (the
// divisor counts the end padding a window covers), on the 2-D path and on
// the general window loop (dilation 2), f32 and bf16 dy / dx.
TEST(Pool, AverageGradientIsTheAdjointWithAsymmetricPads) {
  for (int64_t dil : {1, 2})
    for (int include = 0; include < 2; ++include) {
      amprt_pool_params p{};
      p.spatial = 2;
      p.kernel[0] = 2;
      p.kernel[1] = 3;
      p.strides[0] = 2;
      p.strides[1] = 2;
      p.dilations[0] = p.dilations[1] = dil;
      p.pads_begin[0] = 0;
      p.pads_begin[1] = 1;
      p.pads_end[0] = 1;
      p.pads_end[1] = 2;
      p.count_include_pad = include;
      const int64_t H = 7, W = 8;
      int64_t oh = (H + 1 - dil * 1 - 1) / 2 + 1, ow = (W + 3 - dil * 2 - 1) / 2 + 1;
      Buf x = randn(AMPRT_F32, {2, 3, H, W}), y(AMPRT_F32, {2, 3, oh, ow});
      AMPRT_OK_OR_FAIL(amprt_average_pool(nullptr, x.p(), &p, y.p()));
      // The forward against the definition: the window's positions inside
      // the input summed, over those inside [-pads_begin, size + pads_end)
      // (include) or inside the input.
      std::vector<double> ry;
      for (int64_t nc = 0; nc < 6; ++nc)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            double s = 0;
            int cnt = 0;
            for (int64_t a = 0; a < 2; ++a)
              for (int64_t b = 0; b < 3; ++b) {
                int64_t h = i * 2 + a * dil, w = j * 2 - 1 + b * dil;
                bool inside = h >= 0 && h < H && w >= 0 && w < W;
                if (inside)
                  s += x.get((nc * H + h) * W + w);
                cnt += inside || (include && h < H + 1 && w < W + 2);
              }
            ry.push_back(s / cnt);
          }
      EXPECT_TRUE(near(y, ry, 0.5, 1e-12)) << "dilation " << dil << " include " << include;
      for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16}) {
        Buf dy = randn(dt, {2, 3, oh, ow}), dx(dt, {2, 3, H, W});
        AMPRT_OK_OR_FAIL(amprt_average_pool_grad(nullptr, dy.p(), &p, dx.p()));
        double lhs = 0, rhs = 0, scale = 0;
        for (int64_t i = 0; i < x.numel(); ++i) {
          lhs += dx.get(i) * x.get(i);
          scale += std::fabs(dx.get(i) * x.get(i));
        }
        for (int64_t o = 0; o < dy.numel(); ++o)
          rhs += dy.get(o) * ry[o];
        // dx rounded once to its type: half an ulp of each term.
        double tol = (dt == AMPRT_F32 ? 1e-6 : 8e-3) * scale;
        EXPECT_NEAR(lhs, rhs, tol)
            << "dilation " << dil << " include " << include << " " << amprt_dtype_name(dt);
      }
    }
}

// The vector max pool (four outputs at a time, stride 1 or 2, the outputs
// whose windows lie inside the input) and the plain 2-D loop (the padded
// borders, the tails) against a direct reference: values and row-major
// indices, with ties (small integers) and NaNs, widths that leave a scalar
// tail, padding (resnet's 3x3 stride 2 pad 1 stem), every float type.
TEST(Pool, MaxPoolFastPathsMatchTheDefinition) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> small(-3, 3), pct(0, 99);
  struct Config {
    int64_t k, s, pad;
  };
  for (amprt_dtype t : {AMPRT_F32, AMPRT_F16, AMPRT_BF16})
    for (Config cfg : {Config{2, 2, 0}, Config{3, 1, 0}, Config{3, 2, 1}, Config{3, 2, 0},
                       Config{2, 1, 1}, Config{5, 2, 2}, Config{3, 1, 1}})
      for (int64_t W : {8, 13, 22, 33, 70}) {
        int64_t k = cfg.k, s = cfg.s, pad = cfg.pad;
        int64_t N = 2, C = 3, H = 10;
        int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
        std::vector<float> x(N * C * H * W);
        for (float &v : x) { // ties, NaN and -inf (a window of only -inf still has its first)
          int r = pct(rng);
          v = r < 3 ? NAN : r < 6 ? -INFINITY : (float)small(rng);
        }
        std::vector<uint16_t> xh(x.size()), yh(N * C * OH * OW);
        std::vector<float> y(N * C * OH * OW);
        std::vector<int64_t> idx(y.size());
        int64_t xs[4] = {N, C, H, W}, ys[4] = {N, C, OH, OW};
        void *xd = x.data(), *yd = y.data();
        if (t != AMPRT_F32) {
          amprt_convert(x.data(), AMPRT_F32, xh.data(), t, x.size());
          xd = xh.data();
          yd = yh.data();
        }
        amprt_tensor tx = amprt_tensor_make(xd, t, 4, xs), ty = amprt_tensor_make(yd, t, 4, ys),
                     ti = amprt_tensor_make(idx.data(), AMPRT_I64, 4, ys);
        amprt_pool_params p{};
        p.spatial = 2;
        p.kernel[0] = p.kernel[1] = k;
        p.strides[0] = p.strides[1] = s;
        p.dilations[0] = p.dilations[1] = 1;
        p.pads_begin[0] = p.pads_begin[1] = p.pads_end[0] = p.pads_end[1] = pad;
        ASSERT_EQ(amprt_max_pool(nullptr, &tx, &p, &ty, &ti), AMPRT_OK);
        if (t != AMPRT_F32)
          amprt_convert(yh.data(), t, y.data(), AMPRT_F32, y.size());
        for (int64_t nc = 0; nc < N * C; ++nc)
          for (int64_t oh = 0; oh < OH; ++oh)
            for (int64_t ow = 0; ow < OW; ++ow) {
              int64_t arg = -1;
              float best = 0;
              for (int64_t kh = 0; kh < k; ++kh)
                for (int64_t kw = 0; kw < k; ++kw) {
                  int64_t hi = oh * s - pad + kh, wi = ow * s - pad + kw;
                  if (hi < 0 || hi >= H || wi < 0 || wi >= W)
                    continue; // padding never wins
                  int64_t i = nc * H * W + hi * W + wi;
                  if (arg >= 0 && std::isnan(best))
                    continue;
                  if (arg < 0 || std::isnan(x[i]) || x[i] > best) {
                    best = x[i];
                    arg = i;
                  }
                }
              int64_t o = (nc * OH + oh) * OW + ow;
              ASSERT_EQ(idx[o], arg) << amprt_dtype_name(t) << " k" << k << " s" << s << " pad "
                                     << pad << " W" << W << " at " << o;
              ASSERT_TRUE(std::isnan(best) ? std::isnan(y[o]) : y[o] == best) << o;
            }
      }
}

// Channel-blocked layout: [N, C/B, H, W, B] from / to plain NCHW values.
namespace {
std::vector<double> toBlockedOrder(const std::vector<double> &v, int64_t n, int64_t c, int64_t hw,
                                   int64_t b) {
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p)
        out[((i * (c / b) + ch / b) * hw + p) * b + ch % b] = v[(i * c + ch) * hw + p];
  return out;
}

Buf blockedCopy(const Buf &plain, int64_t b) {
  Buf out = plain;
  auto v = toBlockedOrder(plain.values(), plain.shape[0], plain.shape[1],
                          plain.shape[2] * plain.shape[3], b);
  for (int64_t i = 0; i < out.numel(); ++i)
    out.set(i, v[i]);
  return out;
}

} // namespace

// amprt_conv_ex: the ReLU inside the call and channel-blocked x / y, every
// combination, against the double reference (blocked results compared in
// the blocked order); a NaN input stays NaN through the ReLU, as the
// element-wise ReLU keeps it.
TEST(Conv, ReluAndBlockedLayoutsAgainstDirectLoops) {
  const int64_t B = amprt_channel_block();
  ASSERT_TRUE(B == 8 || B == 16);
  const ConvCase cases[] = {{2, 16, 9, 7, 32, 3, 3, 1, 1, 1, 1},
                            {3, 32, 8, 10, 16, 3, 3, 2, 1, 1, 1},
                            {1, 16, 11, 9, 16, 3, 2, 1, 2, 2, 1}};
  for (const ConvCase &cc : cases)
    for (int run = 0; run < 12; ++run) {
      // Flags 0..7, then the ReLU cases again with a NaN in x (the call
      // then cannot use oneDNN's ReLU, which would turn it into 0).
      int flags = run < 8 ? run : (run - 8) * 2 + 1;
      bool withNaN = run >= 8;
      int64_t oh = (cc.h + 2 * cc.pad - ((cc.kh - 1) * cc.dil + 1)) / cc.stride + 1;
      int64_t ow = (cc.w + 2 * cc.pad - ((cc.kw - 1) * cc.dil + 1)) / cc.stride + 1;
      Buf x = randn(AMPRT_F32, {cc.n, cc.c, cc.h, cc.w});
      if (withNaN)
        x.set(cc.h * cc.w + 5, NAN); // image 0, channel 1
      Buf w = randn(AMPRT_F32, {cc.m, cc.c, cc.kh, cc.kw});
      Buf b = randn(AMPRT_F32, {cc.m});
      Buf y(AMPRT_F32, {cc.n, cc.m, oh, ow});
      amprt_conv_params p = convParamsOf(cc.stride, cc.pad, cc.dil);
      Buf xin = flags & AMPRT_CONV_SRC_BLOCKED ? blockedCopy(x, B) : x;
      AMPRT_OK_OR_FAIL(amprt_conv_ex(nullptr, xin.p(), w.p(), b.p(), &p, flags, y.p()));
      std::vector<double> ref = refConv(x, w, &b, cc, oh, ow);
      if (flags & AMPRT_CONV_RELU) {
        int nans = 0;
        for (double &r : ref) {
          nans += std::isnan(r);
          r = std::isnan(r) || r > 0 ? r : 0.0;
        }
        ASSERT_EQ(nans > 0, withNaN);
      }
      if (flags & AMPRT_CONV_DST_BLOCKED)
        ref = toBlockedOrder(ref, cc.n, cc.m, oh * ow, B);
      int64_t kk = cc.c * cc.kh * cc.kw;
      EXPECT_TRUE(near(y, ref, 8.5, accTol(kk), 1e-4)) << "flags " << flags << " c " << cc.c;
      if (flags & AMPRT_CONV_RELU) { // +0 where the convolution is negative, as max(x, 0)
        for (int64_t i = 0; i < y.numel(); ++i) {
          if (ref[i] == 0.0 && y.get(i) == 0.0) {
            ASSERT_FALSE(std::signbit(y.get(i))) << "element " << i << " flags " << flags;
          }
        }
      }
    }
  // bf16 with the ReLU in the call (plain layouts): rounding commutes with it.
  Buf x = randn(AMPRT_BF16, {2, 4, 6, 6}), w = randn(AMPRT_BF16, {5, 4, 3, 3});
  Buf y(AMPRT_BF16, {2, 5, 6, 6});
  amprt_conv_params p = convParamsOf(1, 1, 1);
  AMPRT_OK_OR_FAIL(amprt_conv_ex(nullptr, x.p(), w.p(), nullptr, &p, AMPRT_CONV_RELU, y.p()));
  std::vector<double> ref = refConv(x, w, nullptr, {2, 4, 6, 6, 5, 3, 3, 1, 1, 1, 1}, 6, 6);
  for (double &r : ref)
    r = std::max(r, 0.0);
  EXPECT_TRUE(near(y, ref, 0.52, accTol(36), 1e-5));
  // Products that overflow f32 (an inf minus an inf is NaN): the ReLU must
  // keep the convolution's inf / NaN as the element-wise ReLU does.
  Buf xo = randn(AMPRT_F32, {1, 16, 4, 4}, 1e20), wo = randn(AMPRT_F32, {16, 16, 3, 3}, 1e20);
  Buf yo(AMPRT_F32, {1, 16, 4, 4}), yu(AMPRT_F32, {1, 16, 4, 4});
  AMPRT_OK_OR_FAIL(amprt_conv_ex(nullptr, xo.p(), wo.p(), nullptr, &p, AMPRT_CONV_RELU, yo.p()));
  AMPRT_OK_OR_FAIL(amprt_conv_ex(nullptr, xo.p(), wo.p(), nullptr, &p, 0, yu.p()));
  AMPRT_OK_OR_FAIL(amprt_unary(nullptr, AMPRT_UNARY_RELU, 0.0f, yu.p(), yu.p()));
  int special = 0;
  for (int64_t i = 0; i < yo.numel(); ++i) {
    special += !std::isfinite(yu.get(i));
    ASSERT_TRUE(std::isnan(yu.get(i)) ? std::isnan(yo.get(i)) : yo.get(i) == yu.get(i)) << i;
  }
  EXPECT_GT(special, 0);
  // Refusals: a blocked tensor whose channels are not a multiple of the
  // block, a blocked bf16 tensor, unknown flags.
  Buf x6 = randn(AMPRT_F32, {1, 6, 5, 5}), w6 = randn(AMPRT_F32, {16, 6, 3, 3});
  Buf y6(AMPRT_F32, {1, 16, 5, 5});
  EXPECT_EQ(amprt_conv_ex(nullptr, x6.p(), w6.p(), nullptr, &p, AMPRT_CONV_SRC_BLOCKED, y6.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("multiple of"), std::string::npos);
  EXPECT_EQ(amprt_conv_ex(nullptr, x.p(), w.p(), nullptr, &p, AMPRT_CONV_DST_BLOCKED, y.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(amprt_conv_ex(nullptr, x6.p(), w6.p(), nullptr, &p, 8, y6.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
}

// The blocked max pool against amprt_max_pool on the plain tensor (itself
// checked against the definition above) for both block sizes: ties (small
// integers), NaNs, padding, strides, dilation, windows that end past the
// input; and the blocked global average pool against a double mean.
TEST(Pool, BlockedMaxPoolAndGlobalAverage) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> small(-3, 3), pct(0, 99);
  struct Case {
    int64_t k, s, pad, dil, h, w;
  } cases[] = {{2, 2, 0, 1, 10, 12}, {2, 2, 0, 1, 9, 7}, {3, 1, 1, 1, 8, 9},
               {3, 2, 1, 2, 11, 10}, {2, 1, 0, 1, 5, 6}, {3, 3, 2, 1, 7, 7}};
  for (int64_t B : {8, 16})
    for (const Case &cs : cases) {
      int64_t N = 2, C = 2 * B;
      int64_t OH = (cs.h + 2 * cs.pad - ((cs.k - 1) * cs.dil + 1)) / cs.s + 1;
      int64_t OW = (cs.w + 2 * cs.pad - ((cs.k - 1) * cs.dil + 1)) / cs.s + 1;
      Buf x(AMPRT_F32, {N, C, cs.h, cs.w});
      for (int64_t i = 0; i < x.numel(); ++i)
        x.set(i, pct(rng) < 3 ? NAN : (double)small(rng));
      amprt_pool_params p{};
      p.spatial = 2;
      for (int i = 0; i < 2; ++i) {
        p.kernel[i] = cs.k;
        p.strides[i] = cs.s;
        p.dilations[i] = cs.dil;
        p.pads_begin[i] = p.pads_end[i] = cs.pad;
      }
      Buf y(AMPRT_F32, {N, C, OH, OW}), yb(AMPRT_F32, {N, C, OH, OW});
      AMPRT_OK_OR_FAIL(amprt_max_pool(nullptr, x.p(), &p, y.p(), nullptr));
      Buf xb = blockedCopy(x, B);
      AMPRT_OK_OR_FAIL(amprt_max_pool_blocked(nullptr, xb.p(), &p, (int32_t)B, yb.p()));
      EXPECT_TRUE(near(yb, toBlockedOrder(y.values(), N, C, OH * OW, B), 0))
          << "B " << B << " k " << cs.k << " s " << cs.s << " pad " << cs.pad;
    }
  for (int64_t B : {8, 16})
    for (int64_t hw : {1, 7, 64}) {
      Buf x = randn(AMPRT_F32, {3, 2 * B, hw, 1}, 1.0, 0.5);
      Buf y(AMPRT_F32, {3, 2 * B, 1, 1}), y2(AMPRT_F32, {3, 2 * B});
      Buf xb = blockedCopy(x, B);
      std::vector<double> ref(3 * 2 * B, 0.0);
      for (int64_t i = 0; i < x.numel(); ++i)
        ref[i / hw] += x.get(i) / (double)hw;
      AMPRT_OK_OR_FAIL(amprt_global_average_pool_blocked(nullptr, xb.p(), (int32_t)B, y.p()));
      AMPRT_OK_OR_FAIL(amprt_global_average_pool_blocked(nullptr, xb.p(), (int32_t)B, y2.p()));
      EXPECT_TRUE(near(y, ref, 0.5, 0, 1e-12)) << "B " << B << " hw " << hw;
      EXPECT_TRUE(near(y2, ref, 0.5, 0, 1e-12));
    }
  // Refusals: channels not a multiple of the block, another block size, a
  // wrong output size.
  Buf x(AMPRT_F32, {1, 12, 4, 4}), y(AMPRT_F32, {1, 12, 1, 1}),
      x16 = randn(AMPRT_F32, {1, 16, 4, 4});
  EXPECT_EQ(amprt_global_average_pool_blocked(nullptr, x.p(), 8, y.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(amprt_global_average_pool_blocked(nullptr, x16.p(), 4, y.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(amprt_global_average_pool_blocked(nullptr, x16.p(), 16, y.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
}

// amprt_gemm_ex with the ReLU: the same as amprt_gemm then the element-wise
// ReLU, bit for bit, whichever way the call runs it (inside oneDNN where no
// NaN can arise; after the product with a NaN or an overflowing product, a
// full C matrix, alpha != 1), in every float type; and against the double
// reference.
TEST(Gemm, ReluInTheCallMatchesGemmThenRelu) {
  struct Case {
    amprt_dtype dt;
    int c; // 0 none, 1 bias row, 2 full matrix
    float alpha;
    int special; // 0 none, 1 a NaN in a, 2 products that overflow
  } cases[] = {{AMPRT_F32, 1, 1.0f, 0},  {AMPRT_F32, 0, 1.0f, 0}, {AMPRT_F32, 1, 1.0f, 1},
               {AMPRT_F32, 1, 1.0f, 2},  {AMPRT_F32, 2, 1.0f, 0}, {AMPRT_F32, 1, 0.5f, 0},
               {AMPRT_BF16, 1, 1.0f, 0}, {AMPRT_F16, 1, 1.0f, 0}, {AMPRT_F16, 0, 1.0f, 1}};
  const int64_t m = 37, k = 29, n = 23;
  for (const Case &cc : cases)
    for (int tb : {0, 1}) {
      Buf a = randn(cc.dt, {m, k}, cc.special == 2 ? 1e20 : 1.0);
      Buf b = randn(cc.dt, tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n},
                    cc.special == 2 ? 1e20 : 1.0);
      if (cc.special == 1)
        a.set(3 * k + 4, NAN);
      Buf c = randn(cc.dt, cc.c == 2 ? std::vector<int64_t>{m, n} : std::vector<int64_t>{n});
      Buf fused(cc.dt, {m, n}), plain(cc.dt, {m, n});
      const amprt_tensor *cp = cc.c ? c.p() : nullptr;
      AMPRT_OK_OR_FAIL(amprt_gemm_ex(nullptr, a.p(), b.p(), cp, cc.alpha, 1.0f, 0, tb,
                                     AMPRT_GEMM_RELU, fused.p()));
      AMPRT_OK_OR_FAIL(amprt_gemm(nullptr, a.p(), b.p(), cp, cc.alpha, 1.0f, 0, tb, plain.p()));
      AMPRT_OK_OR_FAIL(amprt_unary(nullptr, AMPRT_UNARY_RELU, 0.0f, plain.p(), plain.p()));
      std::string what = std::string(amprt_dtype_name(cc.dt)) + " c" + std::to_string(cc.c) +
                         " special" + std::to_string(cc.special) + " tb" + std::to_string(tb);
      int nonFinite = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        double f = fused.get(i), p = plain.get(i);
        nonFinite += !std::isfinite(p);
        ASSERT_TRUE(std::isnan(p) ? std::isnan(f) : f == p) << what << " element " << i;
        ASSERT_FALSE(std::signbit(f) && !std::isnan(f)) << what << " element " << i;
      }
      EXPECT_EQ(nonFinite > 0, cc.special != 0) << what; // NaN / inf reach the output
      if (cc.special)
        continue;
      std::vector<double> ref(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p)
            sum += a.get(i * k + p) * (tb ? b.get(j * k + p) : b.get(p * n + j));
          double cv = cc.c == 2 ? c.get(i * n + j) : cc.c == 1 ? c.get(j) : 0.0;
          ref[i * n + j] = std::max(0.0, cc.alpha * sum + cv);
        }
      EXPECT_TRUE(near(fused, ref, 0.5 + (cc.dt == AMPRT_F32 ? 4 : 0.02), accTol(k), 1e-5)) << what;
    }
  Buf a = randn(AMPRT_F32, {2, 3}), b = randn(AMPRT_F32, {3, 2}), y(AMPRT_F32, {2, 2});
  EXPECT_EQ(amprt_gemm_ex(nullptr, a.p(), b.p(), nullptr, 1.0f, 1.0f, 0, 0, 2, y.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
}

// The per-shape kernel choice (AMPRT_TUNE) for bf16 operands: the bf16
// kernels and the f32 ones on widened copies, each forced, and the timed
// choice, all within f32 accumulation error of the double reference (plus
// half an ulp for a bf16 result): products, batched products and
// convolutions (with and without the ReLU in the call).
TEST(Tune, EveryBf16CandidateMatchesTheReference) {
  for (const char *force : {"", "bf16", "f32"}) {
    SCOPED_TRACE(std::string("kernel forced: ") + (*force ? force : "(timed)"));
    KernelForced forced(force);
    for (amprt_dtype out : {AMPRT_BF16, AMPRT_F32}) {
      const int64_t m = 33, n = 40, k = 257;
      Buf a = randn(AMPRT_BF16, {m, k}), b = randn(AMPRT_BF16, {n, k}), c = randn(AMPRT_F32, {n});
      Buf y(out, {m, n});
      AMPRT_OK_OR_FAIL(
          amprt_gemm_ex(nullptr, a.p(), b.p(), c.p(), 1.0f, 1.0f, 0, 1, AMPRT_GEMM_RELU, y.p()));
      std::vector<double> ref(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = c.get(j);
          for (int64_t p = 0; p < k; ++p)
            s += a.get(i * k + p) * b.get(j * k + p);
          ref[i * n + j] = std::max(s, 0.0);
        }
      EXPECT_TRUE(near(y, ref, out == AMPRT_F32 ? 8.5 : 0.52, accTol(k), 1e-4))
          << "gemm -> " << amprt_dtype_name(out);
      // Batched: [3, m, k] x [3, k, n].
      Buf ba = randn(AMPRT_BF16, {3, 9, 65}), bb = randn(AMPRT_BF16, {3, 65, 12});
      Buf by(out, {3, 9, 12});
      AMPRT_OK_OR_FAIL(amprt_matmul(nullptr, ba.p(), bb.p(), by.p()));
      std::vector<double> bref;
      for (int64_t t = 0; t < 3; ++t)
        for (int64_t i = 0; i < 9; ++i)
          for (int64_t j = 0; j < 12; ++j) {
            double s = 0;
            for (int64_t p = 0; p < 65; ++p)
              s += ba.get((t * 9 + i) * 65 + p) * bb.get((t * 65 + p) * 12 + j);
            bref.push_back(s);
          }
      EXPECT_TRUE(near(by, bref, out == AMPRT_F32 ? 8.5 : 0.52, accTol(65), 1e-4))
          << "matmul -> " << amprt_dtype_name(out);
    }
    const ConvCase cases[] = {{2, 16, 9, 7, 32, 3, 3, 1, 1, 1, 1},
                              {2, 3, 12, 12, 16, 3, 3, 2, 1, 1, 1},
                              {1, 32, 6, 6, 32, 3, 3, 1, 1, 1, 32}};
    for (const ConvCase &cc : cases)
      for (int flags : {0, (int)AMPRT_CONV_RELU})
        for (amprt_dtype out : {AMPRT_BF16, AMPRT_F32}) {
          int64_t oh = (cc.h + 2 * cc.pad - ((cc.kh - 1) * cc.dil + 1)) / cc.stride + 1;
          int64_t ow = (cc.w + 2 * cc.pad - ((cc.kw - 1) * cc.dil + 1)) / cc.stride + 1;
          Buf x = randn(AMPRT_BF16, {cc.n, cc.c, cc.h, cc.w});
          Buf w = randn(AMPRT_BF16, {cc.m, cc.c / cc.group, cc.kh, cc.kw});
          Buf b = randn(AMPRT_BF16, {cc.m});
          Buf y(out, {cc.n, cc.m, oh, ow});
          amprt_conv_params p = convParamsOf(cc.stride, cc.pad, cc.dil, cc.group);
          AMPRT_OK_OR_FAIL(amprt_conv_ex(nullptr, x.p(), w.p(), b.p(), &p, flags, y.p()));
          std::vector<double> ref = refConv(x, w, &b, cc, oh, ow);
          if (flags & AMPRT_CONV_RELU)
            for (double &r : ref)
              r = std::max(r, 0.0);
          int64_t kk = cc.c / cc.group * cc.kh * cc.kw;
          EXPECT_TRUE(near(y, ref, out == AMPRT_F32 ? 8.5 : 0.52, accTol(kk), 1e-4))
              << "conv c " << cc.c << " group " << cc.group << " flags " << flags << " -> "
              << amprt_dtype_name(out);
        }
  }
}

// amxProduct (bf16 operands on the AMX tiles, f32 result) against a double
// reference of the same bf16 values: a stored by rows, by columns and with
// neither stride 1 (packed element by element), b likewise; sums of one
// tile chunk (k <= 32: one tile row pass) and of several (pairs of tiles),
// edges of every size; an inf and a NaN reach exactly their row and
// column. Where the CPU has no AMX (or AMPRT_NO_AMX / AMPRT_NO_AVX512 is
// set) there is nothing to run: the test says so and checks only that.
TEST(Amx, ProductAgainstDoubleReference) {
  if (!amprt::amxProductAvailable()) {
    std::printf("amxProduct: not available here (no AMX-BF16, or turned off): not exercised\n");
    EXPECT_FALSE(amprt::amxProductAvailable());
    return;
  }
  struct Case {
    int64_t m, n, k;
  };
  // (m a multiple of 16, k of 32 and above 32, a by rows: a's tiles read in
  // place, one row of tiles or an odd count, sums past the prefetch
  // distance.)
  for (Case cs :
       {Case{1, 1, 1}, Case{16, 16, 32}, Case{17, 33, 45}, Case{40, 70, 100}, Case{96, 300, 32},
        Case{33, 18, 513}, Case{3, 2, 64}, Case{16, 16, 64}, Case{48, 20, 96}, Case{32, 40, 320}})
    for (int la : {0, 1, 2})     // a: rows, columns, neither stride 1
      for (int lb : {0, 1, 2}) { // b likewise
        const int64_t m = cs.m, n = cs.n, k = cs.k;
        SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " +
                     std::to_string(k) + " a layout " + std::to_string(la) + " b layout " +
                     std::to_string(lb));
        // Element (i, kk) of a at a0 * i + a1 * kk; layout 2 spreads both.
        int64_t a0 = la == 0 ? k : la == 1 ? 1 : 2 * k + 3, a1 = la == 0 ? 1 : la == 1 ? m : 2;
        int64_t b0 = lb == 0 ? n : lb == 1 ? 1 : 3, b1 = lb == 0 ? 1 : lb == 1 ? k : 3 * k + 1;
        Buf a = randn(AMPRT_BF16, {(m - 1) * a0 + (k - 1) * a1 + 1});
        Buf b = randn(AMPRT_BF16, {(k - 1) * b0 + (n - 1) * b1 + 1});
        const bool marks = m > 2 && n > 2 && k > 1;
        if (marks) {
          a.set(1 * a0 + (k - 1) * a1, INFINITY); // row 1, the last k
          b.set(0 * b0 + 2 * b1, NAN);            // column 2, the first k
        }
        std::vector<float> c((size_t)(m * (n + 5)), -7.0f); // ldc n + 5: the gap kept
        const auto *ap = reinterpret_cast<const uint16_t *>(a.bytes.data());
        const auto *bp = reinterpret_cast<const uint16_t *>(b.bytes.data());
        amprt::amxProduct(m, n, k, ap, a0, a1, bp, b0, b1, c.data(), n + 5);
        int64_t bad = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n + 5; ++j) {
            float got = c[i * (n + 5) + j];
            if (j >= n) {
              bad += got != -7.0f;
              continue;
            }
            double ref = 0, mag = 0;
            for (int64_t kk = 0; kk < k; ++kk) {
              double t = a.get(i * a0 + kk * a1) * b.get(kk * b0 + j * b1);
              ref += t;
              mag += std::fabs(t);
            }
            if (marks && (j == 2 || i == 1)) { // NaN column; inf row (inf or NaN)
              bool ok = j == 2 ? std::isnan(got) : std::isnan(got) || std::isinf(got);
              bad += !ok;
              continue;
            }
            // f32 sums of exact products: k roundings of at most the running sum's half ulp.
            bad += !(std::fabs(got - ref) <= (double)k * std::ldexp(mag, -24) + 1e-30);
          }
        EXPECT_EQ(bad, 0);
      }
}

// A result of 4 MiB or more in an aligned buffer with rows of whole lines
// (a late layer's weight gradient) is written past the caches; the same
// product into an unaligned buffer by the tile stores must give the same
// bits, and both the double reference's values: one k-chunk (rows of
// tiles) and several (pairs of tiles, a read in place), edges included.
TEST(Amx, LargeResultsWrittenPastTheCachesAgree) {
  if (!amprt::amxProductAvailable()) {
    std::printf("amxProduct: not available here (no AMX-BF16, or turned off): not exercised\n");
    EXPECT_FALSE(amprt::amxProductAvailable());
    return;
  }
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{512, 2048, 32},
                         std::tuple<int64_t, int64_t, int64_t>{520, 2050, 64}}) {
    SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
    Buf a = randn(AMPRT_BF16, {m, k}), b = randn(AMPRT_BF16, {k, n});
    const auto *ap = reinterpret_cast<const uint16_t *>(a.bytes.data());
    const auto *bp = reinterpret_cast<const uint16_t *>(b.bytes.data());
    const int64_t ldc = (n + 15) / 16 * 16; // rows of whole lines
    const size_t count = (size_t)(m * ldc);
    float *streamed = static_cast<float *>(std::aligned_alloc(64, (count * 4 + 63) / 64 * 64));
    std::vector<float> plain(count + 1); // one float in: not 64-byte aligned
    float *unaligned =
        reinterpret_cast<uintptr_t>(plain.data()) % 64 ? plain.data() : plain.data() + 1;
    std::fill(streamed, streamed + count, -7.0f);
    std::fill(unaligned, unaligned + count, -7.0f);
    amprt::amxProduct(m, n, k, ap, k, 1, bp, n, 1, streamed, ldc);
    amprt::amxProduct(m, n, k, ap, k, 1, bp, n, 1, unaligned, ldc);
    EXPECT_EQ(std::memcmp(streamed, unaligned, count * 4), 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < m; i += 7)
      for (int64_t j = 0; j < n; j += 5) {
        double ref = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          double t = a.get(i * k + kk) * b.get(kk * n + j);
          ref += t;
          mag += std::fabs(t);
        }
        bad +=
            !(std::fabs(streamed[i * ldc + j] - ref) <= (double)k * std::ldexp(mag, -24) + 1e-30);
      }
    for (int64_t i = 0; i < m; ++i) // the gap past n kept
      for (int64_t j = n; j < ldc; ++j)
        bad += streamed[i * ldc + j] != -7.0f;
    EXPECT_EQ(bad, 0);
    std::free(streamed);
  }
}

// amxProduct's inf check of each tile as it is stored (a weight gradient
// checked while in L1): the same bits as without it, and the same answer
// as a read of the finished result, on one k-chunk (rows of tiles) and
// several (pairs, a read in place), edge tiles, a result streamed past the
// caches: finite operands (false), an inf or a NaN in one place of a or
// b, finite operands whose products overflow f32, a non-finite value at
// the last row and column only (an edge tile's part inside m x n).
TEST(Amx, InfCheckAsStoredAgreesWithAReadOfTheResult) {
  if (!amprt::amxProductAvailable()) {
    std::printf("amxProduct: not available here (no AMX-BF16, or turned off): not exercised\n");
    EXPECT_FALSE(amprt::amxProductAvailable());
    return;
  }
  std::mt19937 rng(std::random_device{}());
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{16, 16, 32},
                         std::tuple<int64_t, int64_t, int64_t>{17, 33, 20},
                         std::tuple<int64_t, int64_t, int64_t>{48, 70, 96},
                         std::tuple<int64_t, int64_t, int64_t>{33, 18, 100},
                         std::tuple<int64_t, int64_t, int64_t>{512, 2048, 32}})
    for (int what = 0; what < 6; ++what) {
      SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " +
                   std::to_string(k) + " case " + std::to_string(what));
      Buf a = randn(AMPRT_BF16, {m, k}), b = randn(AMPRT_BF16, {k, n});
      const int64_t i = (int64_t)(rng() % m), j = (int64_t)(rng() % n), kk = (int64_t)(rng() % k);
      if (what == 1)
        a.set(i * k + kk, INFINITY);
      if (what == 2)
        b.set(kk * n + j, NAN);
      if (what == 3) // a row of a and a column of b near bf16's largest
        for (int64_t q = 0; q < k; ++q) {
          a.set(i * k + q, 3.0e38);
          b.set(q * n + j, 3.0e38);
        }
      if (what == 4) // the last row only
        a.set((m - 1) * k + kk, -INFINITY);
      if (what == 5) // the last column only
        b.set(kk * n + n - 1, NAN);
      const int64_t ldc = (n + 15) / 16 * 16;
      const size_t count = (size_t)(m * ldc);
      float *c = static_cast<float *>(std::aligned_alloc(64, (count * 4 + 63) / 64 * 64));
      std::vector<float> plain(count, -7.0f);
      std::fill(c, c + count, -7.0f);
      const auto *ap = reinterpret_cast<const uint16_t *>(a.bytes.data());
      const auto *bp = reinterpret_cast<const uint16_t *>(b.bytes.data());
      bool nonFinite = what == 0; // overwritten
      amprt::amxProduct(m, n, k, ap, k, 1, bp, n, 1, c, ldc, &nonFinite);
      amprt::amxProduct(m, n, k, ap, k, 1, bp, n, 1, plain.data(), ldc);
      EXPECT_EQ(std::memcmp(c, plain.data(), count * 4), 0);
      bool read = false;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t q = 0; q < n; ++q)
          read |= !std::isfinite(c[r * ldc + q]);
      EXPECT_EQ(nonFinite, read);
      EXPECT_EQ(read, what != 0);
      std::free(c);
    }
}
