//===- AmpTest.cpp - loss scaling, clipping and optimizer kernels --------===//
//
// (PyTorch's exact sequences are checked against torch itself in
// test/runtime/test_against_torch.py; these tests pin the semantics.)
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "cpu/optim/optimizers.h"
#include <cstdlib>
#include <cstring>
#include <memory>

using namespace amprt_test;

TEST(Unscale, MultipliesByInverseScaleAndFlagsNonFinite) {
  Buf g1 = randn(AMPRT_F32, {1000}, 1000.0), g2 = randn(AMPRT_F16, {37}, 100.0),
      g3 = randn(AMPRT_BF16, {5, 5}, 10.0);
  Buf o1(AMPRT_F32, {1000}), o2(AMPRT_F32, {37}), o3(AMPRT_F32, {5, 5});
  amprt_tensor in[3] = {g1.t, g2.t, g3.t}, out[3] = {o1.t, o2.t, o3.t};
  float scale = 65536.0f * 3.0f, found = 0.0f;
  AMPRT_OK_OR_FAIL(amprt_unscale_and_check(nullptr, in, out, 3, &scale, &found));
  EXPECT_EQ(found, 0.0f);
  float inv = (float)(1.0 / (double)scale);
  for (auto [g, o] : {std::pair<Buf *, Buf *>{&g1, &o1}, {&g2, &o2}, {&g3, &o3}})
    for (int64_t i = 0; i < g->numel(); ++i)
      ASSERT_EQ((float)o->get(i), (float)g->get(i) * inv) << i; // one f32 multiply
  // One inf in the f16 tensor, one NaN in the bf16 tensor: flagged, and the
  // flag is never cleared by a clean call.
  g2.set(11, INFINITY);
  AMPRT_OK_OR_FAIL(amprt_unscale_and_check(nullptr, in, out, 3, &scale, &found));
  EXPECT_EQ(found, 1.0f);
  g2.set(11, 1.0);
  AMPRT_OK_OR_FAIL(amprt_unscale_and_check(nullptr, in, out, 3, &scale, &found));
  EXPECT_EQ(found, 1.0f);
  found = 0.0f;
  g3.set(24, NAN);
  AMPRT_OK_OR_FAIL(amprt_unscale_and_check(nullptr, in, out, 3, &scale, &found));
  EXPECT_EQ(found, 1.0f);
  // In place for f32.
  Buf g = randn(AMPRT_F32, {64}), before = g;
  amprt_tensor io = g.t;
  found = 0.0f;
  AMPRT_OK_OR_FAIL(amprt_unscale_and_check(nullptr, &io, &io, 1, &scale, &found));
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ((float)g.get(i), (float)before.get(i) * inv);
}

// The f32 check (vector loops per CPU: AMPRT_CLONES) finds one inf / -inf /
// NaN wherever it sits: in a vector, in the tail of a thread's piece, in
// the last element; in place with scale 1 (loss scaling "none": the check
// alone, the gradient untouched) and unscaled into another tensor.
TEST(Unscale, F32CheckFindsOneNonFiniteAnywhere) {
  const int64_t n = 200003; // pieces on the threads, a tail
  for (bool inPlace : {true, false})
    for (int64_t at : {int64_t(0), int64_t(37), int64_t(100000), int64_t(100001), n - 1})
      for (float bad : {INFINITY, -INFINITY, NAN, 0.0f}) {
        Buf g = randn(AMPRT_F32, {n}, 100.0), o(AMPRT_F32, {n});
        g.set(at, bad);
        Buf before = g;
        amprt_tensor in = g.t, out = inPlace ? g.t : o.t;
        float scale = inPlace ? 1.0f : 1024.0f, found = 0.0f;
        AMPRT_OK_OR_FAIL(amprt_unscale_and_check(nullptr, &in, &out, 1, &scale, &found));
        EXPECT_EQ(found, std::isfinite(bad) ? 0.0f : 1.0f)
            << (inPlace ? "in place" : "unscaled") << " at " << at << " value " << bad;
        if (inPlace) {
          EXPECT_EQ(g.bytes, before.bytes);
        } else {
          for (int64_t i : {int64_t(1), int64_t(4099), at, n - 2}) {
            float want = (float)g.get(i) * (1.0f / 1024.0f), got = (float)o.get(i);
            ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << i;
          }
        }
      }
}

TEST(UpdateScale, PyTorchRule) {
  amprt_scaler_config cfg = amprt_scaler_default_config();
  cfg.growth_interval = 3;
  amprt_scaler_state st = amprt_scaler_init(&cfg, 65536.0f);
  // clean x3 -> grow; inf -> halve; clean x2, inf -> halve; clean x3 -> grow
  const float pattern[] = {0, 0, 0, 1, 0, 0, 1, 0, 0, 0};
  const float scales[] = {65536, 65536, 131072, 65536, 65536, 65536, 32768, 32768, 32768, 65536};
  const int trackers[] = {1, 2, 0, 0, 1, 2, 0, 1, 2, 0};
  for (int i = 0; i < 10; ++i) {
    AMPRT_OK_OR_FAIL(amprt_update_scale(nullptr, &cfg, &st, pattern[i]));
    EXPECT_EQ(st.scale, scales[i]) << "step " << i;
    EXPECT_EQ(st.growth_tracker, trackers[i]) << "step " << i;
  }
  // found_inf is tested as != 0: a summed flag of 3 counts.
  AMPRT_OK_OR_FAIL(amprt_update_scale(nullptr, &cfg, &st, 3.0f));
  EXPECT_EQ(st.scale, 32768.0f);
  // Growth past the largest float is refused (PyTorch #98828).
  st.scale = 2.0e38f;
  st.growth_tracker = 2;
  AMPRT_OK_OR_FAIL(amprt_update_scale(nullptr, &cfg, &st, 0.0f));
  EXPECT_EQ(st.scale, 2.0e38f);
  EXPECT_EQ(st.growth_tracker, 0);
}

TEST(UpdateScale, DeepSpeedHysteresisAndFloor) {
  // DeepSpeed DynamicLossScaler(delayed_shift=2, scale_window=4,
  // min_scale=1): the first overflow only uses up the hysteresis; the next
  // ones back off until a growth restores it.
  amprt_scaler_config cfg = amprt_scaler_default_config();
  cfg.growth_interval = 4;
  cfg.hysteresis = 2;
  cfg.min_scale = 1.0f;
  amprt_scaler_state st = amprt_scaler_init(&cfg, 8.0f);
  struct {
    float inf;
    float scale;
    int hyst;
  } seq[] = {{1, 8, 1}, {1, 4, 1}, {0, 4, 1}, {0, 4, 1}, {0, 4, 1},
             {0, 8, 2}, {1, 8, 1}, {1, 4, 1}, {1, 2, 1}, {1, 1, 1}};
  for (auto &s : seq) {
    AMPRT_OK_OR_FAIL(amprt_update_scale(nullptr, &cfg, &st, s.inf));
    EXPECT_EQ(st.scale, s.scale);
    EXPECT_EQ(st.hysteresis_left, s.hyst);
  }
  // An overflow at the floor: DeepSpeed raises; here an error status, the
  // scale stays at the floor and the state says so.
  EXPECT_EQ(amprt_update_scale(nullptr, &cfg, &st, 1.0f), AMPRT_ERR_NUMERIC);
  EXPECT_EQ(st.scale, 1.0f);
  EXPECT_EQ(st.at_min_scale, 1);
  EXPECT_NE(std::string(amprt_last_error()).find("minimum loss scale"), std::string::npos);
}

TEST(ClipGradNorm, UsesTheGlobalNorm) {
  Buf a = randn(AMPRT_F32, {100}, 3.0), b = randn(AMPRT_F32, {7, 3}, 3.0);
  double sq = 0;
  for (double v : a.values())
    sq += v * v;
  for (double v : b.values())
    sq += v * v;
  double norm = std::sqrt(sq);
  Buf a0 = a, b0 = b;
  amprt_tensor g[2] = {a.t, b.t};
  float total = 0;
  AMPRT_OK_OR_FAIL(amprt_clip_grad_norm(nullptr, g, 2, 1.0f, 0.0f, &total));
  EXPECT_NEAR(total, norm, 1e-5 * norm);
  float coef = (float)(1.0 / (norm + 1e-6));
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ((float)a.get(i), (float)a0.get(i) * coef);
  // Below the threshold nothing changes; with found_inf nothing changes.
  Buf c = randn(AMPRT_F32, {10}, 0.01), c0 = c;
  amprt_tensor gc = c.t;
  AMPRT_OK_OR_FAIL(amprt_clip_grad_norm(nullptr, &gc, 1, 100.0f, 0.0f, &total));
  EXPECT_EQ(c.bytes, c0.bytes);
  AMPRT_OK_OR_FAIL(amprt_clip_grad_norm(nullptr, &gc, 1, 1e-6f, 1.0f, &total));
  EXPECT_EQ(c.bytes, c0.bytes);
}

TEST(Optimizers, SgdMatchesReferenceFormulas) {
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    amprt_sgd_config cfg{0.1f, 0.9f, 0.0f, 0.01f, nesterov};
    Buf p = randn(AMPRT_F32, {50}), buf(AMPRT_F32, {50});
    std::vector<double> rp = p.values(), rb(50, 0.0);
    int64_t step = 0;
    for (int it = 0; it < 4; ++it) {
      Buf g = randn(AMPRT_F32, {50});
      AMPRT_OK_OR_FAIL(amprt_sgd_step(nullptr, &cfg, p.p(), g.p(), buf.p(), &step, 0.0f));
      for (int i = 0; i < 50; ++i) {
        double d = g.get(i) + 0.01 * rp[i];
        rb[i] = step == 0 ? d : 0.9 * rb[i] + d;
        d = nesterov ? d + 0.9 * rb[i] : rb[i];
        rp[i] -= 0.1 * d;
      }
      AMPRT_OK_OR_FAIL(amprt_step_count(nullptr, &step, 0.0f));
    }
    EXPECT_TRUE(near(p, rp, 0, 1e-5, 1e-6));
  }
}

TEST(Optimizers, AdamAndAdamWMatchReferenceFormulas) {
  for (int decoupled = 0; decoupled < 2; ++decoupled) {
    amprt_adam_config cfg{1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, decoupled};
    Buf p = randn(AMPRT_F32, {40}), m(AMPRT_F32, {40}), v(AMPRT_F32, {40});
    std::vector<double> rp = p.values(), rm(40, 0), rv(40, 0);
    int64_t step = 0;
    for (int it = 0; it < 5; ++it) {
      Buf g = randn(AMPRT_F32, {40});
      AMPRT_OK_OR_FAIL(amprt_adam_step(nullptr, &cfg, p.p(), g.p(), m.p(), v.p(), &step, 0.0f));
      AMPRT_OK_OR_FAIL(amprt_step_count(nullptr, &step, 0.0f));
      double t = (double)step;
      for (int i = 0; i < 40; ++i) {
        double gi = g.get(i);
        if (decoupled)
          rp[i] *= 1 - 1e-2 * 0.05;
        else
          gi += 0.05 * rp[i];
        // The config's f32 betas (0.999f is 0.99900001287...: 1 - beta2
        // differs from 0.001 by 1.3e-5 relative).
        const double b1 = 0.9f, b2 = 0.999f;
        rm[i] = b1 * rm[i] + (1 - b1) * gi;
        rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
        double mhat = rm[i] / (1 - std::pow(b1, t)), vhat = rv[i] / (1 - std::pow(b2, t));
        rp[i] -= 1e-2 * mhat / (std::sqrt(vhat) + 1e-8);
      }
    }
    EXPECT_TRUE(near(p, rp, 0, 1e-4, 1e-5)) << "decoupled " << decoupled;
    EXPECT_TRUE(near(m, rm, 0, 1e-5, 1e-6));
    EXPECT_TRUE(near(v, rv, 0, 1e-5, 1e-7));
  }
}

namespace {
/// Equal bits, or both NaN (a NaN's payload may come from either operand).
::testing::AssertionResult sameFloats(const Buf &got, const std::vector<float> &want) {
  for (int64_t i = 0; i < got.numel(); ++i) {
    float g = (float)got.get(i), w = want[(size_t)i];
    if (std::isnan(g) && std::isnan(w))
      continue;
    if (std::memcmp(&g, &w, 4) != 0)
      return ::testing::AssertionFailure()
             << "element " << i << ": " << g << ", the f32 formula gives " << w;
  }
  return ::testing::AssertionSuccess();
}
} // namespace

// The optimizers' loops run vectorised (one clone per vector width, pieces
// on the threads): every element must still be PyTorch's f32 arithmetic in
// its order, bit for bit, written out here one element at a time: SGD with
// and without momentum (first and later steps), dampening, Nesterov and
// weight decay; Adam and AdamW with beta1 on either side of 0.5 (PyTorch's
// two lerp forms), with and without weight decay. An odd length over
// several pieces, and special values: an inf weight without weight decay
// stays inf (nothing multiplies it by 0), a NaN gradient gives NaN.
TEST(Optimizers, VectorisedUpdatesAreTheF32FormulasBitForBit) {
  const int64_t n = 200003;
  const amprt_sgd_config sgds[] = {{0.1f, 0.0f, 0.0f, 0.0f, 0},   {0.1f, 0.0f, 0.0f, 0.01f, 0},
                                   {0.1f, 0.9f, 0.0f, 0.0f, 0},   {0.1f, 0.9f, 0.3f, 0.01f, 0},
                                   {0.05f, 0.9f, 0.0f, 0.01f, 1}, {0.05f, 0.5f, 0.0f, 0.0f, 1}};
  for (const amprt_sgd_config &c : sgds)
    for (int64_t step0 : {0, 3}) {
      Buf p = randn(AMPRT_F32, {n}), g = randn(AMPRT_F32, {n}), b = randn(AMPRT_F32, {n});
      p.set(7, INFINITY);
      g.set(11, NAN);
      std::vector<float> rp(n), rb(n);
      for (int64_t i = 0; i < n; ++i) {
        float pi = (float)p.get(i), gi = (float)g.get(i), bi = (float)b.get(i);
        float d = gi;
        if (c.weight_decay != 0.0f)
          d = d + c.weight_decay * pi;
        if (c.momentum != 0.0f) {
          bi = step0 == 0 ? d : bi * c.momentum + (1.0f - c.dampening) * d;
          d = c.nesterov ? d + c.momentum * bi : bi;
        }
        rp[i] = pi + (-c.lr) * d;
        rb[i] = bi;
      }
      int64_t step = step0;
      AMPRT_OK_OR_FAIL(amprt_sgd_step(nullptr, &c, p.p(), g.p(), b.p(), &step, 0.0f));
      std::string what = "sgd momentum " + std::to_string(c.momentum) + " dampening " +
                         std::to_string(c.dampening) + " decay " + std::to_string(c.weight_decay) +
                         " nesterov " + std::to_string(c.nesterov) + " step " +
                         std::to_string(step0);
      EXPECT_TRUE(sameFloats(p, rp)) << what;
      if (c.momentum != 0.0f)
        EXPECT_TRUE(sameFloats(b, rb)) << what;
      if (c.weight_decay == 0.0f)
        EXPECT_TRUE(std::isinf(p.get(7))) << what;
      EXPECT_TRUE(std::isnan(p.get(11))) << what;
    }
  const amprt_adam_config adams[] = {{1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f, 0},
                                     {1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, 0},
                                     {1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, 1},
                                     {1e-3f, 0.3f, 0.99f, 1e-6f, 0.01f, 1},
                                     {1e-3f, 0.3f, 0.99f, 1e-6f, 0.0f, 0}};
  for (const amprt_adam_config &c : adams) {
    Buf p = randn(AMPRT_F32, {n}), g = randn(AMPRT_F32, {n}), m = randn(AMPRT_F32, {n}),
        v = uniform(AMPRT_F32, {n}, 0.1, 1.0);
    p.set(7, INFINITY);
    g.set(11, NAN);
    const int64_t step0 = 4;
    const double t = (double)(step0 + 1);
    const float stepSize = (float)((double)c.lr / (1.0 - std::pow((double)c.beta1, t)));
    const float bc2Sqrt = (float)std::sqrt(1.0 - std::pow((double)c.beta2, t));
    const float w1 = 1.0f - c.beta1, w2 = 1.0f - c.beta2;
    const float decay = (float)(1.0 - (double)c.lr * (double)c.weight_decay);
    std::vector<float> rp(n), rm(n), rv(n);
    for (int64_t i = 0; i < n; ++i) {
      float pi = (float)p.get(i), gi = (float)g.get(i), mi = (float)m.get(i), vi = (float)v.get(i);
      if (c.weight_decay != 0.0f) {
        if (c.decoupled)
          pi = pi * decay;
        else
          gi = gi + c.weight_decay * pi;
      }
      mi = w1 < 0.5f ? mi + w1 * (gi - mi) : gi - (gi - mi) * (1.0f - w1);
      vi = vi * c.beta2 + w2 * gi * gi;
      float denom = std::sqrt(vi) / bc2Sqrt + c.eps;
      rp[i] = pi + (-stepSize) * (mi / denom);
      rm[i] = mi;
      rv[i] = vi;
    }
    int64_t step = step0;
    AMPRT_OK_OR_FAIL(amprt_adam_step(nullptr, &c, p.p(), g.p(), m.p(), v.p(), &step, 0.0f));
    std::string what = "adam beta1 " + std::to_string(c.beta1) + " decay " +
                       std::to_string(c.weight_decay) + " decoupled " + std::to_string(c.decoupled);
    EXPECT_TRUE(sameFloats(p, rp)) << what;
    EXPECT_TRUE(sameFloats(m, rm)) << what;
    EXPECT_TRUE(sameFloats(v, rv)) << what;
    if (c.weight_decay == 0.0f)
      EXPECT_TRUE(std::isinf(p.get(7))) << what;
    EXPECT_TRUE(std::isnan(p.get(11))) << what;
  }
}

TEST(Optimizers, SkippedStepLeavesEveryByteUnchanged) {
  Buf p = randn(AMPRT_F32, {33}), g = randn(AMPRT_F32, {33}), b = randn(AMPRT_F32, {33}),
      m = randn(AMPRT_F32, {33}), v = uniform(AMPRT_F32, {33}, 0.1, 1.0);
  g.set(5, NAN); // whatever the gradient holds
  Buf p0 = p, b0 = b, m0 = m, v0 = v;
  int64_t step = 7, step0 = 7;
  amprt_sgd_config sgd{0.1f, 0.9f, 0.0f, 0.01f, 1};
  amprt_adam_config adam{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1};
  AMPRT_OK_OR_FAIL(amprt_sgd_step(nullptr, &sgd, p.p(), g.p(), b.p(), &step, 1.0f));
  AMPRT_OK_OR_FAIL(amprt_adam_step(nullptr, &adam, p.p(), g.p(), m.p(), v.p(), &step, 2.0f));
  AMPRT_OK_OR_FAIL(amprt_step_count(nullptr, &step, 1.0f));
  EXPECT_EQ(p.bytes, p0.bytes);
  EXPECT_EQ(b.bytes, b0.bytes);
  EXPECT_EQ(m.bytes, m0.bytes);
  EXPECT_EQ(v.bytes, v0.bytes);
  EXPECT_EQ(step, step0);
}

// The optimizers' low-precision copy (amp-keep-weight-casts' sgd_update /
// adam_update with lowp): the parameter, its moments and the rest are what
// the steps without a copy give, byte for byte, and the copy is the updated
// parameter rounded as amprt_cast rounds, for every optimizer form (first
// and later steps), in bf16 (written per element, 16 at a time on AVX-512)
// and f16 (per block), on a size that runs on the threads and ends in a
// tail; a skipped step writes the unchanged parameter's copy. Values beyond f16's range and a NaN
// gradient are among them.
TEST(Optimizers, LowPrecisionCopyIsTheUpdatedParameterRounded) {
  const int64_t n = 70001;
  struct Opt {
    bool adam;
    amprt_sgd_config sgd;
    amprt_adam_config ad;
  };
  const Opt opts[] = {{false, {0.1f, 0.0f, 0.0f, 0.0f, 0}, {}},
                      {false, {0.1f, 0.0f, 0.0f, 0.01f, 0}, {}},
                      {false, {0.1f, 0.9f, 0.0f, 0.01f, 1}, {}},
                      {false, {0.1f, 0.9f, 0.1f, 0.0f, 0}, {}},
                      {true, {}, {1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, 0}},
                      {true, {}, {1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, 1}},
                      {true, {}, {1e-2f, 0.3f, 0.999f, 1e-8f, 0.0f, 0}},
                      {true, {}, {1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, 2}}};
  // (bf16 on AVX-512 CPUs: the AVX-512 loops, against the scalar ones.)
  for (const Opt &o : opts)
    for (amprt_dtype lt : {AMPRT_BF16, AMPRT_F16})
      for (float found : {0.0f, 1.0f})
        for (int64_t step0 : {0, 3}) {
          Buf p = randn(AMPRT_F32, {n}), g = randn(AMPRT_F32, {n}), b = randn(AMPRT_F32, {n}),
              m = randn(AMPRT_F32, {n}), v = uniform(AMPRT_F32, {n}, 0.1, 1.0);
          p.set(3, 1e6f); // beyond f16: its copy is inf
          p.set(4, -7e4f);
          g.set(n - 1, NAN); // in the scalar tail
          g.set(21, NAN);    // in a vector
          Buf p2 = p, b2 = b, m2 = m, v2 = v, copy(lt, {n}), want(lt, {n});
          int64_t step = step0;
          std::string what = std::string(o.adam ? "adam form " + std::to_string(o.ad.decoupled) +
                                                      " beta1 " + std::to_string(o.ad.beta1)
                                                : "sgd momentum " + std::to_string(o.sgd.momentum) +
                                                      " wd " + std::to_string(o.sgd.weight_decay)) +
                             " " + amprt_dtype_name(lt) + (found != 0.0f ? " skipped" : "") +
                             " step " + std::to_string(step0);
          if (o.adam) {
            AMPRT_OK_OR_FAIL(amprt::adamStep(nullptr, &o.ad, p.p(), g.p(), m.p(), v.p(), &step,
                                             found, copy.p()));
            AMPRT_OK_OR_FAIL(
                amprt_adam_step(nullptr, &o.ad, p2.p(), g.p(), m2.p(), v2.p(), &step, found));
          } else {
            AMPRT_OK_OR_FAIL(
                amprt::sgdStep(nullptr, &o.sgd, p.p(), g.p(), b.p(), &step, found, copy.p()));
            AMPRT_OK_OR_FAIL(amprt_sgd_step(nullptr, &o.sgd, p2.p(), g.p(), b2.p(), &step, found));
          }
          ASSERT_EQ(p.bytes, p2.bytes) << what;
          ASSERT_EQ(b.bytes, b2.bytes) << what;
          ASSERT_EQ(m.bytes, m2.bytes) << what;
          ASSERT_EQ(v.bytes, v2.bytes) << what;
          AMPRT_OK_OR_FAIL(amprt_cast(nullptr, p.p(), want.p()));
          ASSERT_EQ(copy.bytes, want.bytes) << what;
          if (lt == AMPRT_F16)
            EXPECT_TRUE(std::isinf(copy.get(3))) << what;
          EXPECT_TRUE(found != 0.0f || std::isnan(copy.get(n - 1))) << what;
          EXPECT_TRUE(found != 0.0f || std::isnan(copy.get(21))) << what;
        }
  // A copy of the wrong type or size is refused, naming it.
  Buf p = randn(AMPRT_F32, {8}), g = randn(AMPRT_F32, {8}), bad(AMPRT_F32, {8}),
      small(AMPRT_BF16, {7});
  int64_t step = 0;
  amprt_sgd_config sgd{0.1f, 0.0f, 0.0f, 0.0f, 0};
  EXPECT_EQ(amprt::sgdStep(nullptr, &sgd, p.p(), g.p(), nullptr, &step, 0.0f, bad.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("low-precision copy"), std::string::npos);
  EXPECT_EQ(amprt::sgdStep(nullptr, &sgd, p.p(), g.p(), nullptr, &step, 0.0f, small.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
}

// A large parameter's bf16 copy (a million elements and more, 32-byte
// aligned as the runtime allocates) is written past the caches on AVX-512
// (streamCopy): still the updated parameter rounded, to the last element.
TEST(Optimizers, LargeLowPrecisionCopyIsTheUpdatedParameterRounded) {
  const int64_t n = (int64_t(1) << 20) + 37;
  uint16_t *data = static_cast<uint16_t *>(std::aligned_alloc(64, (n * 2 + 63) / 64 * 64));
  ASSERT_NE(data, nullptr);
  std::unique_ptr<uint16_t, decltype(&std::free)> hold(data, &std::free);
  int64_t shape[1] = {n};
  amprt_tensor copy = amprt_tensor_make(data, AMPRT_BF16, 1, shape);
  for (bool adam : {false, true}) {
    Buf p = randn(AMPRT_F32, {n}), g = randn(AMPRT_F32, {n}), b = randn(AMPRT_F32, {n}),
        v = uniform(AMPRT_F32, {n}, 0.1, 1.0), want(AMPRT_BF16, {n});
    int64_t step = 2;
    amprt_sgd_config sgd{0.1f, 0.9f, 0.0f, 0.01f, 0};
    amprt_adam_config ad{1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, 1};
    if (adam)
      AMPRT_OK_OR_FAIL(
          amprt::adamStep(nullptr, &ad, p.p(), g.p(), b.p(), v.p(), &step, 0.0f, &copy));
    else
      AMPRT_OK_OR_FAIL(amprt::sgdStep(nullptr, &sgd, p.p(), g.p(), b.p(), &step, 0.0f, &copy));
    AMPRT_OK_OR_FAIL(amprt_cast(nullptr, p.p(), want.p()));
    ASSERT_EQ(std::memcmp(data, want.bytes.data(), n * 2), 0) << (adam ? "adam" : "sgd");
  }
}

TEST(Optimizers, BadArgumentsAreErrors) {
  Buf p = randn(AMPRT_F32, {3}), g = randn(AMPRT_F32, {4});
  int64_t step = 0;
  amprt_sgd_config sgd{0.1f, 0.0f, 0.0f, 0.0f, 0};
  EXPECT_EQ(amprt_sgd_step(nullptr, &sgd, p.p(), g.p(), nullptr, &step, 0.0f),
            AMPRT_ERR_INVALID_ARGUMENT);
  Buf h = randn(AMPRT_F16, {3});
  EXPECT_EQ(amprt_sgd_step(nullptr, &sgd, p.p(), h.p(), nullptr, &step, 0.0f),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("contiguous f32"), std::string::npos);
}
