//===- MatmulConvTest.cpp - matrix products, convolution, pooling --------===//
//
// References in double from the stored (already rounded) inputs. f16 / bf16
// products accumulate in f32: the tolerance is half an ulp of the output
// type plus f32 accumulation error, sqrt(K) * K-proportional bound.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

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
struct ConvCase {
  int64_t n, c, h, w, m, kh, kw, stride, pad, dil, group;
};

std::vector<double> refConv(const Buf &x, const Buf &w, const Buf *bias, const ConvCase &cc,
                            int64_t oh, int64_t ow) {
  std::vector<double> y(cc.n * cc.m * oh * ow, 0.0);
  int64_t cg = cc.c / cc.group, mg = cc.m / cc.group;
  for (int64_t n = 0; n < cc.n; ++n)
    for (int64_t m = 0; m < cc.m; ++m)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = bias ? bias->get(m) : 0.0;
          int64_t g = m / mg;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t p = 0; p < cc.kh; ++p)
              for (int64_t q = 0; q < cc.kw; ++q) {
                int64_t hi = i * cc.stride - cc.pad + p * cc.dil;
                int64_t wi = j * cc.stride - cc.pad + q * cc.dil;
                if (hi < 0 || hi >= cc.h || wi < 0 || wi >= cc.w)
                  continue;
                s += x.get(((n * cc.c + g * cg + c) * cc.h + hi) * cc.w + wi) *
                     w.get(((m * cg + c) * cc.kh + p) * cc.kw + q);
              }
          y[((n * cc.m + m) * oh + i) * ow + j] = s;
        }
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
      amprt_conv_params p{};
      p.spatial = 2;
      p.group = cc.group;
      for (int i = 0; i < 2; ++i) {
        p.strides[i] = cc.stride;
        p.dilations[i] = cc.dil;
        p.pads_begin[i] = p.pads_end[i] = cc.pad;
      }
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
      AMPRT_OK_OR_FAIL(amprt_conv_backward(nullptr, x.p(), w.p(), dy.p(), &p, dx.p(), dw.p(), db.p()));
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

// The vector 2x2 / stride 2 max pool (four outputs at a time) and the plain
// 2-D loop against a direct reference: values and row-major indices, with
// ties (small integers) and NaNs, widths that leave a scalar tail, every
// float type.
TEST(Pool, MaxPoolFastPathsMatchTheDefinition) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> small(-3, 3), pct(0, 99);
  for (amprt_dtype t : {AMPRT_F32, AMPRT_F16, AMPRT_BF16})
    for (int64_t k : {2, 3})
      for (int64_t W : {8, 13, 22}) {
        int64_t N = 2, C = 3, H = 10, s = k == 2 ? 2 : 1;
        int64_t OH = (H - k) / s + 1, OW = (W - k) / s + 1;
        std::vector<float> x(N * C * H * W);
        for (float &v : x)
          v = pct(rng) < 3 ? NAN : (float)small(rng);
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
                  int64_t i = nc * H * W + (oh * s + kh) * W + ow * s + kw;
                  if (arg >= 0 && std::isnan(best))
                    continue;
                  if (arg < 0 || std::isnan(x[i]) || x[i] > best) {
                    best = x[i];
                    arg = i;
                  }
                }
              int64_t o = (nc * OH + oh) * OW + ow;
              ASSERT_EQ(idx[o], arg) << amprt_dtype_name(t) << " k" << k << " W" << W << " at " << o;
              ASSERT_TRUE(std::isnan(best) ? std::isnan(y[o]) : y[o] == best) << o;
            }
      }
}
