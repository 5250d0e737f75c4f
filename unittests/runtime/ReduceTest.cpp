//===- ReduceTest.cpp - reductions, normalisation, losses against double -===//

#include "TestUtil.h"

#include <algorithm>

using namespace amprt_test;

TEST(Reduce, SumMeanMaxOverAxes) {
  // (x, y): an f16 / bf16 x may write its f32 result unrounded (the bias
  // gradients of autocast's products).
  for (auto [dt, yt] : {std::pair{AMPRT_F32, AMPRT_F32}, std::pair{AMPRT_F16, AMPRT_F16},
                        std::pair{AMPRT_BF16, AMPRT_BF16}, std::pair{AMPRT_F16, AMPRT_F32},
                        std::pair{AMPRT_BF16, AMPRT_F32}})
    for (amprt_reduce_op op : {AMPRT_REDUCE_SUM, AMPRT_REDUCE_MEAN, AMPRT_REDUCE_MAX}) {
      Buf x = randn(dt, {3, 4, 5});
      int32_t axes[2] = {0, 2};
      Buf y(yt, {1, 4, 1});
      AMPRT_OK_OR_FAIL(amprt_reduce(nullptr, op, x.p(), axes, 2, y.p()));
      std::vector<double> ref;
      for (int j = 0; j < 4; ++j) {
        double acc = op == AMPRT_REDUCE_MAX ? -INFINITY : 0.0;
        for (int i = 0; i < 3; ++i)
          for (int k = 0; k < 5; ++k) {
            double v = x.get((i * 4 + j) * 5 + k);
            acc = op == AMPRT_REDUCE_MAX ? std::max(acc, v) : acc + v;
          }
        ref.push_back(op == AMPRT_REDUCE_MEAN ? acc / 15 : acc);
      }
      // Accumulated in double, rounded once.
      EXPECT_TRUE(near(y, ref, 0.5, 1e-12))
          << "op " << op << " " << amprt_dtype_name(dt) << " -> " << amprt_dtype_name(yt);
    }
  // Other pairs are refused, naming both.
  Buf x = randn(AMPRT_F32, {3, 4}), y(AMPRT_BF16, {3, 1});
  int32_t ax = 1;
  EXPECT_EQ(amprt_reduce(nullptr, AMPRT_REDUCE_SUM, x.p(), &ax, 1, y.p()),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("bf16 [3, 1]"), std::string::npos)
      << amprt_last_error();
}

// Sums and means over one block of adjacent axes, the contiguous paths:
// rows added into per-column double sums with the columns on the threads,
// runs into one slot in four partial sums widened piece by piece (short
// runs many rows at a time), and f16 /
// bf16 rows read in place (no f32 copy). Against double, rounded once; a
// NaN or inf reaches its slot.
TEST(Reduce, BlockSumsOnTheThreadsAndInPlaceHalfRows) {
  struct Case {
    std::vector<int64_t> shape;
    std::vector<int32_t> axes;
  };
  const Case cases[] = {{{3, 700, 130}, {1}},
                        {{128, 3072}, {0}},
                        {{2, 9000}, {1}},
                        {{4, 6, 5}, {1, 2}},
                        {{5, 1, 37}, {0, 1}},
                        // A global average pool's short runs: many rows
                        // widened by one call, the last call's rows fewer.
                        {{3, 1000, 3, 3}, {2, 3}}};
  for (auto [dt, yt] : {std::pair{AMPRT_F32, AMPRT_F32}, std::pair{AMPRT_F16, AMPRT_F16},
                        std::pair{AMPRT_BF16, AMPRT_BF16}, std::pair{AMPRT_F16, AMPRT_F32},
                        std::pair{AMPRT_BF16, AMPRT_F32}})
    for (const Case &c : cases)
      for (amprt_reduce_op op : {AMPRT_REDUCE_SUM, AMPRT_REDUCE_MEAN}) {
        Buf x = randn(dt, c.shape);
        int64_t n = x.numel();
        x.set(n / 3, NAN);
        x.set(n / 2 + 1, -INFINITY);
        std::vector<int64_t> yshape = c.shape;
        for (int32_t a : c.axes)
          yshape[a] = 1;
        Buf y(yt, yshape);
        AMPRT_OK_OR_FAIL(
            amprt_reduce(nullptr, op, x.p(), c.axes.data(), (int32_t)c.axes.size(), y.p()));
        // The reference: every x element into its slot, in double.
        std::vector<double> ref(y.numel(), 0.0);
        int64_t count = n / y.numel();
        for (int64_t i = 0; i < n; ++i) {
          int64_t rem = i, slot = 0, st = 1;
          for (int32_t d = (int32_t)c.shape.size() - 1; d >= 0; --d) {
            int64_t idx = rem % c.shape[d];
            rem /= c.shape[d];
            slot += (yshape[d] == 1 ? 0 : idx) * st;
            st *= yshape[d];
          }
          ref[slot] += x.get(i);
        }
        if (op == AMPRT_REDUCE_MEAN)
          for (double &r : ref)
            r /= (double)count;
        // Accumulated in double, rounded to f32 (then to a 16-bit y): half
        // an f32 ulp plus, for a 16-bit y, half of its own.
        EXPECT_TRUE(near(y, ref, yt == AMPRT_F32 ? 0.5 : 0.5 + 1e-3, 1e-12))
            << "op " << op << " " << amprt_dtype_name(dt) << " -> " << amprt_dtype_name(yt)
            << " shape " << c.shape.size() << "-d, " << c.axes.size() << " axes";
      }
}

TEST(Reduce, MaxPropagatesNaN) {
  Buf x = randn(AMPRT_F32, {2, 3}), y(AMPRT_F32, {2, 1});
  x.set(4, NAN);
  int32_t ax = 1;
  AMPRT_OK_OR_FAIL(amprt_reduce(nullptr, AMPRT_REDUCE_MAX, x.p(), &ax, 1, y.p()));
  EXPECT_FALSE(std::isnan(y.get(0)));
  EXPECT_TRUE(std::isnan(y.get(1)));
}

TEST(Softmax, StableAndLogForm) {
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_F16, AMPRT_BF16})
    for (int log = 0; log < 2; ++log) {
      Buf x = randn(dt, {3, 7, 2}, 4.0);
      x.set(0, 5000.0 > 60000 ? 0 : (dt == AMPRT_F16 ? 60000.0 : 5000.0)); // large logit
      Buf y(dt, {3, 7, 2});
      AMPRT_OK_OR_FAIL(amprt_softmax(nullptr, x.p(), 1, log, y.p()));
      std::vector<double> ref(x.numel());
      for (int a = 0; a < 3; ++a)
        for (int c = 0; c < 2; ++c) {
          double m = -INFINITY, s = 0;
          for (int j = 0; j < 7; ++j)
            m = std::max(m, x.get((a * 7 + j) * 2 + c));
          for (int j = 0; j < 7; ++j)
            s += std::exp(x.get((a * 7 + j) * 2 + c) - m);
          for (int j = 0; j < 7; ++j) {
            double v = x.get((a * 7 + j) * 2 + c) - m;
            ref[(a * 7 + j) * 2 + c] = log ? v - std::log(s) : std::exp(v) / s;
          }
        }
      EXPECT_TRUE(near(y, ref, 0.5 + (dt == AMPRT_F32 ? 2 : 0.01), 1e-7, 1e-30)) << "log " << log;
    }
}

// f32 along the contiguous last axis (the vectorised path): long and odd
// rows, logits far apart (exp's argument rounding must not show), NaN and
// infinite rows as the general path gives them. Softmax: 6 ulp (libmvec's
// expf measured at <= 2.7 ulp, its argument correction e + e * lo 1.5, the
// sum and the division 1). Log form: the value d - log(s) is exact but for
// log(s), whose error is that of s's terms other than the largest (~4 ulp of
// log(s) at most): 1 ulp of the value plus 6 ulp of |log s|.
TEST(Softmax, LastAxisF32PathWithinSixUlp) {
  for (int log = 0; log < 2; ++log) {
    Buf x = randn(AMPRT_F32, {6, 37}, 12.0);
    x.set(5, 70.0);
    Buf y(AMPRT_F32, {6, 37});
    x.set(4 * 37 + 3, NAN);
    for (int j = 0; j < 37; ++j)
      x.set(3 * 37 + j, -INFINITY);
    AMPRT_OK_OR_FAIL(amprt_softmax(nullptr, x.p(), 1, log, y.p()));
    for (int r = 0; r < 6; ++r) {
      double m = -INFINITY, rest = 0;
      bool nan = r == 3 || r == 4;
      int at = 0;
      for (int j = 0; j < 37; ++j)
        if (x.get(r * 37 + j) > m) {
          m = x.get(r * 37 + j);
          at = j;
        }
      // s = 1 + rest, the largest term apart (log1p keeps a tiny rest).
      for (int j = 0; j < 37; ++j)
        if (j != at)
          rest += std::exp(x.get(r * 37 + j) - m);
      double s = 1 + rest;
      for (int j = 0; j < 37; ++j) {
        double v = x.get(r * 37 + j) - m, g = y.get(r * 37 + j);
        double ref = log ? v - std::log1p(rest) : std::exp(v) / s;
        if (nan) {
          EXPECT_TRUE(std::isnan(g)) << "row " << r << " log " << log;
          continue;
        }
        double tol = log ? ulp(AMPRT_F32, ref) + 6 * ulp(AMPRT_F32, std::log1p(rest))
                         : 6 * ulp(AMPRT_F32, ref);
        EXPECT_LE(std::fabs(g - ref), tol)
            << "row " << r << " col " << j << " log " << log << ": got " << g << ", reference "
            << ref << " (seed " << testSeed() << ")";
      }
    }
  }
}

// The row's maximum found wherever it is (the vector search: first lane,
// middle, the scalar tail past the last eight), with ties (the first one is
// the term set apart), a -0 maximum among -infs, a NaN in the tail: every
// row length around the vector width, against double.
TEST(Softmax, MaximumAnywhereInTheRow) {
  for (int64_t len : {1, 7, 8, 9, 37, 4099})
    for (int64_t pos : {(int64_t)0, len / 2, len - 1})
      for (int log = 0; log < 2; ++log) {
        const int64_t rows = 5;
        Buf x = randn(AMPRT_F32, {rows, len}, 3.0);
        x.set(0 * len + pos, 20.0); // the maximum at pos
        x.set(1 * len + pos, 20.0); // and a tie after it
        x.set(1 * len + std::min(len - 1, pos + 3), 20.0);
        for (int64_t j = 0; j < len; ++j) // -inf but a -0 and a +0
          x.set(2 * len + j, -INFINITY);
        x.set(2 * len + pos, -0.0);
        x.set(2 * len + len - 1, pos == len - 1 ? -0.0 : 0.0);
        x.set(3 * len + len - 1, NAN); // NaN in the tail
        Buf y(AMPRT_F32, {rows, len});
        AMPRT_OK_OR_FAIL(amprt_softmax(nullptr, x.p(), 1, log, y.p()));
        for (int64_t r = 0; r < rows; ++r) {
          double m = -INFINITY;
          for (int64_t j = 0; j < len; ++j)
            m = std::max(m, x.get(r * len + j));
          double sum = 0;
          for (int64_t j = 0; j < len; ++j)
            sum += std::exp(x.get(r * len + j) - m);
          for (int64_t j = 0; j < len; ++j) {
            double g = y.get(r * len + j), v = x.get(r * len + j) - m;
            if (r == 3) {
              EXPECT_TRUE(std::isnan(g)) << "len " << len << " row 3 col " << j;
              continue;
            }
            double ref = log ? v - std::log(sum) : std::exp(v) / sum;
            double tol = 6 * ulp(AMPRT_F32, ref) + (log ? 6 * ulp(AMPRT_F32, std::log(sum)) : 0);
            if (std::isinf(ref))
              EXPECT_EQ(g, ref) << "len " << len << " row " << r << " col " << j;
            else
              EXPECT_LE(std::fabs(g - ref), tol)
                  << "len " << len << " pos " << pos << " row " << r << " col " << j << " log "
                  << log << ": got " << g << ", reference " << ref << " (seed " << testSeed()
                  << ")";
          }
        }
      }
}

// Attention masks: entries of -inf (nn.Transformer's causal mask) and of
// f32's lowest value added to the scores (transformers' finfo.min fill: x -
// max then lies below -FLT_MAX) give probability 0 / log-probability -inf,
// the rest of the row as if they were absent; a row that is -inf throughout
// is NaN, as torch.softmax gives. Every path: the f32 last-axis one, the
// strided one, f16 / bf16.
TEST(Softmax, MaskedEntriesAndFullyMaskedRows) {
  const int64_t rows = 5, len = 19;
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_F16, AMPRT_BF16})
    for (int strided = 0; strided < 2; ++strided)
      for (int log = 0; log < 2; ++log) {
        Buf x = randn(dt, {rows, len}, 3.0);
        // Row 0: one -inf; row 1: a causal half of -inf; row 2: finfo.min
        // fills beside positive scores (f32 only: f16 / bf16 hold -inf
        // there); row 3: all -inf; row 4: untouched.
        x.set(0 * len + 7, -INFINITY);
        for (int64_t j = 9; j < len; ++j)
          x.set(1 * len + j, -INFINITY);
        for (int64_t j = 0; j < len; j += 3) {
          x.set(2 * len + j, dt == AMPRT_F32 ? -3.4028234663852886e38 : -INFINITY);
          x.set(2 * len + j + 1, 5.0 + j);
        }
        for (int64_t j = 0; j < len; ++j)
          x.set(3 * len + j, -INFINITY);
        Buf y(dt, {rows, len});
        amprt_tensor xt = x.t, yt = y.t;
        Buf xs(dt, {len, rows}), ys(dt, {len, rows});
        if (strided) { // the same rows in a transposed layout: the general loop
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < len; ++j)
              xs.set(j * rows + r, x.get(r * len + j));
          xt = xs.t;
          yt = ys.t;
          for (amprt_tensor *t : {&xt, &yt}) {
            t->shape[0] = rows;
            t->shape[1] = len;
            t->strides[0] = 1;
            t->strides[1] = rows;
          }
        }
        AMPRT_OK_OR_FAIL(amprt_softmax(nullptr, &xt, 1, log, &yt));
        auto got = [&](int64_t r, int64_t j) {
          return strided ? ys.get(j * rows + r) : y.get(r * len + j);
        };
        for (int64_t r = 0; r < rows; ++r) {
          double m = -INFINITY, s = 0;
          for (int64_t j = 0; j < len; ++j)
            m = std::max(m, x.get(r * len + j));
          for (int64_t j = 0; j < len; ++j)
            if (std::isfinite(x.get(r * len + j) - m))
              s += std::exp(x.get(r * len + j) - m);
          for (int64_t j = 0; j < len; ++j) {
            double g = got(r, j), v = x.get(r * len + j) - m;
            std::string where = "dtype " + std::to_string(dt) + " strided " +
                                std::to_string(strided) + " log " + std::to_string(log) + " row " +
                                std::to_string(r) + " col " + std::to_string(j) + " (seed " +
                                std::to_string(testSeed()) + ")";
            if (r == 3) {
              EXPECT_TRUE(std::isnan(g)) << where;
              continue;
            }
            ASSERT_FALSE(std::isnan(g)) << where;
            double ref = log ? v - std::log(s) : std::exp(v) / s;
            if (log && !std::isfinite(ref)) {
              // finfo.min: -3.4e38 - max - log s, beyond f32 unless rounded.
              EXPECT_TRUE(g < -1e38) << where << ": got " << g;
              continue;
            }
            double tol = dt == AMPRT_F32 ? 8 * ulp(AMPRT_F32, ref) + 1e-30 : ulp(dt, ref) + 1e-30;
            EXPECT_LE(std::fabs(g - ref), tol) << where << ": got " << g << ", reference " << ref;
          }
        }
      }
}

TEST(Softmax, GradientMatchesJacobian) {
  // Rows of 6 and of 37 (eight running sums and a tail); y, dy and dx of
  // one type.
  for (int64_t len : {6, 37})
    for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16, AMPRT_F16})
      for (int log = 0; log < 2; ++log) {
        const int64_t rows = 4;
        Buf x = randn(AMPRT_F32, {rows, len}), y(dt, {rows, len}), dy = randn(dt, {rows, len}),
            dx(dt, {rows, len});
        AMPRT_OK_OR_FAIL(amprt_softmax(nullptr, x.p(), 1, log, y.p()));
        AMPRT_OK_OR_FAIL(amprt_softmax_grad(nullptr, y.p(), dy.p(), 1, log, dx.p()));
        // The Jacobian at the probabilities the kernel is given (y, a few
        // ulp from exact): (g - dot) cancels, so y's own rounding would
        // otherwise be amplified into the comparison.
        std::vector<double> ref(rows * len, 0.0);
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<double> p(len);
          for (int64_t j = 0; j < len; ++j)
            p[j] = log ? std::exp(y.get(r * len + j)) : y.get(r * len + j);
          for (int64_t i = 0; i < len; ++i)
            for (int64_t j = 0; j < len; ++j) {
              // d out_j / d x_i
              double jac = log ? (i == j) - p[i] : p[j] * ((i == j) - p[i]);
              ref[r * len + i] += dy.get(r * len + j) * jac;
            }
        }
        EXPECT_TRUE(near(dx, ref, dt == AMPRT_F32 ? 8 : 1, 1e-6, 1e-7))
            << "len " << len << " log " << log;
      }
}

// The last-axis path (rows on the threads, f16 / bf16 rows widened)
// computes what the general strided loop does, bit for bit: the same sums
// in the same order, the same roundings.
TEST(Softmax, GradientFastPathMatchesTheGeneralOne) {
  const int64_t rows = 300;
  const amprt_dtype types[3] = {AMPRT_F32, AMPRT_BF16, AMPRT_F16};
  for (int64_t len : {49, 8, 3, 1000})
    for (int log = 0; log < 2; ++log)
      for (amprt_dtype ty : types)
        for (amprt_dtype tg : types) {
          amprt_dtype tx = tg == AMPRT_F32 ? ty : tg;
          Buf x = randn(AMPRT_F32, {rows, len}), y(ty, {rows, len}), dy = randn(tg, {rows, len}),
              dx(tx, {rows, len}), ref(tx, {rows, len});
          AMPRT_OK_OR_FAIL(amprt_softmax(nullptr, x.p(), 1, log, y.p()));
          AMPRT_OK_OR_FAIL(amprt_softmax_grad(nullptr, y.p(), dy.p(), 1, log, dx.p()));
          amprt_tensor view = ref.t; // strides [1, rows]: a transposed layout
          view.strides[0] = 1;
          view.strides[1] = rows;
          AMPRT_OK_OR_FAIL(amprt_softmax_grad(nullptr, y.p(), dy.p(), 1, log, &view));
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < len; ++j) {
              double a = dx.get(r * len + j), b = ref.get(j * rows + r);
              ASSERT_FALSE(std::isnan(a));
              ASSERT_EQ(a, b) << "len " << len << " log " << log << " types " << ty << " " << tg
                              << " " << tx << " row " << r << " col " << j;
            }
        }
}

namespace {
void refLayerNorm(const Buf &x, const Buf &g, const Buf &b, int64_t rows, int64_t cols, double eps,
                  std::vector<double> &y, std::vector<double> &mean, std::vector<double> &rstd) {
  y.assign(rows * cols, 0);
  mean.assign(rows, 0);
  rstd.assign(rows, 0);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c)
      mu += x.get(r * cols + c);
    mu /= cols;
    for (int64_t c = 0; c < cols; ++c)
      var += std::pow(x.get(r * cols + c) - mu, 2);
    var /= cols;
    mean[r] = mu;
    rstd[r] = 1 / std::sqrt(var + eps);
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = (x.get(r * cols + c) - mu) * rstd[r] * g.get(c) + b.get(c);
  }
}
} // namespace

TEST(LayerNorm, ForwardAndGradient) {
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_F16, AMPRT_BF16}) {
    Buf x = randn(dt, {2, 3, 8}, 2.0, 1.0), g = randn(dt, {8}), b = randn(dt, {8});
    Buf y(dt, {2, 3, 8}), mean(AMPRT_F32, {2, 3, 1}), rstd(AMPRT_F32, {2, 3, 1});
    AMPRT_OK_OR_FAIL(
        amprt_layer_norm(nullptr, x.p(), g.p(), b.p(), 2, 1e-5f, y.p(), mean.p(), rstd.p()));
    std::vector<double> ry, rm, rs;
    refLayerNorm(x, g, b, 6, 8, 1e-5, ry, rm, rs);
    EXPECT_TRUE(near(y, ry, 0.5 + (dt == AMPRT_F32 ? 4 : 0.01), 1e-7, 1e-6));
    EXPECT_TRUE(near(mean, rm, 0.5, 0, 1e-12));
    EXPECT_TRUE(near(rstd, rs, 0.5, 0, 1e-12));
  }
  // Gradient against central differences of the double reference.
  Buf x = randn(AMPRT_F32, {3, 5}), g = randn(AMPRT_F32, {5}), b = randn(AMPRT_F32, {5});
  Buf y(AMPRT_F32, {3, 5}), mean(AMPRT_F32, {3, 1}), rstd(AMPRT_F32, {3, 1});
  Buf dy = randn(AMPRT_F32, {3, 5}), dx(AMPRT_F32, {3, 5}), dg(AMPRT_F32, {5}), db(AMPRT_F32, {5});
  AMPRT_OK_OR_FAIL(
      amprt_layer_norm(nullptr, x.p(), g.p(), b.p(), 1, 1e-5f, y.p(), mean.p(), rstd.p()));
  AMPRT_OK_OR_FAIL(amprt_layer_norm_grad(nullptr, x.p(), g.p(), mean.p(), rstd.p(), dy.p(), 1,
                                         dx.p(), dg.p(), db.p()));
  auto lossAt = [&](Buf xx, Buf gg, Buf bb) {
    std::vector<double> ry, rm, rs;
    refLayerNorm(xx, gg, bb, 3, 5, 1e-5, ry, rm, rs);
    double l = 0;
    for (int i = 0; i < 15; ++i)
      l += ry[i] * dy.get(i);
    return l;
  };
  auto numeric = [&](Buf &which, int64_t i) {
    Buf xs = x, gs = g, bs = b;
    Buf *target = &which == &x ? &xs : &which == &g ? &gs : &bs;
    Buf plus = *target, minus = *target;
    // Perturb through double-precision copies of the values.
    double h = 1e-3;
    Buf xd(AMPRT_F32, target->shape);
    (void)xd;
    plus.set(i, target->get(i) + h);
    minus.set(i, target->get(i) - h);
    double hp = plus.get(i) - target->get(i), hm = target->get(i) - minus.get(i);
    Buf *slot = target;
    *slot = plus;
    double lp = lossAt(xs, gs, bs);
    *slot = minus;
    double lm = lossAt(xs, gs, bs);
    return (lp - lm) / (hp + hm);
  };
  std::vector<double> rdx, rdg, rdb;
  for (int i = 0; i < 15; ++i)
    rdx.push_back(numeric(x, i));
  for (int i = 0; i < 5; ++i) {
    rdg.push_back(numeric(g, i));
    rdb.push_back(numeric(b, i));
  }
  EXPECT_TRUE(near(dx, rdx, 0, 2e-3, 2e-4));
  EXPECT_TRUE(near(dg, rdg, 0, 2e-3, 2e-4));
  EXPECT_TRUE(near(db, rdb, 0, 2e-3, 2e-4));
}

// f16 / bf16 activations (rows on the threads, an odd row length): the f32
// computation on the exactly widened values, rounded once, to the byte;
// mean, inv_std_dev, dscale and dbias the f32 computation's bytes.
TEST(LayerNorm, HalfRowsAreTheF32ComputationRoundedOnce) {
  for (amprt_dtype xt : {AMPRT_BF16, AMPRT_F16})
    for (amprt_dtype yt : {xt, AMPRT_F32})
      for (std::vector<int64_t> shape : {std::vector<int64_t>{64, 768}, {5, 33}}) {
        SCOPED_TRACE(std::string(amprt_dtype_name(xt)) + " -> " + amprt_dtype_name(yt) + ", " +
                     std::to_string(shape[1]) + " columns");
        int64_t rows = shape[0], cols = shape[1];
        Buf x = randn(xt, shape, 1.5, 0.5), g = randn(AMPRT_F32, {cols}),
            b = randn(AMPRT_F32, {cols}), dy = randn(xt, shape);
        Buf x32(AMPRT_F32, shape), dy32(AMPRT_F32, shape);
        AMPRT_OK_OR_FAIL(amprt_cast(nullptr, x.p(), x32.p()));
        AMPRT_OK_OR_FAIL(amprt_cast(nullptr, dy.p(), dy32.p()));
        Buf y(yt, shape), m(AMPRT_F32, {rows, 1}), s(AMPRT_F32, {rows, 1});
        Buf y32(AMPRT_F32, shape), m32(AMPRT_F32, {rows, 1}), s32(AMPRT_F32, {rows, 1}),
            yr(yt, shape);
        AMPRT_OK_OR_FAIL(
            amprt_layer_norm(nullptr, x.p(), g.p(), b.p(), 1, 1e-5f, y.p(), m.p(), s.p()));
        AMPRT_OK_OR_FAIL(
            amprt_layer_norm(nullptr, x32.p(), g.p(), b.p(), 1, 1e-5f, y32.p(), m32.p(), s32.p()));
        AMPRT_OK_OR_FAIL(amprt_cast(nullptr, y32.p(), yr.p()));
        EXPECT_EQ(y.bytes, yr.bytes);
        EXPECT_EQ(m.bytes, m32.bytes);
        EXPECT_EQ(s.bytes, s32.bytes);
        Buf dx(yt, shape), dg(AMPRT_F32, {cols}), db(AMPRT_F32, {cols});
        Buf dx32(AMPRT_F32, shape), dg32(AMPRT_F32, {cols}), db32(AMPRT_F32, {cols}),
            dxr(yt, shape);
        AMPRT_OK_OR_FAIL(amprt_layer_norm_grad(nullptr, x.p(), g.p(), m.p(), s.p(), dy.p(), 1,
                                               dx.p(), dg.p(), db.p()));
        AMPRT_OK_OR_FAIL(amprt_layer_norm_grad(nullptr, x32.p(), g.p(), m.p(), s.p(), dy32.p(), 1,
                                               dx32.p(), dg32.p(), db32.p()));
        AMPRT_OK_OR_FAIL(amprt_cast(nullptr, dx32.p(), dxr.p()));
        EXPECT_EQ(dx.bytes, dxr.bytes);
        EXPECT_EQ(dg.bytes, dg32.bytes);
        EXPECT_EQ(db.bytes, db32.bytes);
        // And near the double reference (the forward).
        std::vector<double> ry, rm, rs;
        refLayerNorm(x, g, b, rows, cols, 1e-5, ry, rm, rs);
        EXPECT_TRUE(near(y, ry, yt == AMPRT_F32 ? 4 : 0.5, 1e-7, 1e-6));
      }
}

TEST(BatchNorm, TrainingStatisticsAndGradient) {
  Buf x = randn(AMPRT_F32, {4, 3, 5}, 2.0, 0.5), g = randn(AMPRT_F32, {3}),
      b = randn(AMPRT_F32, {3});
  Buf rm = randn(AMPRT_F32, {3}), rv = uniform(AMPRT_F32, {3}, 0.5, 2.0);
  Buf y(AMPRT_F32, {4, 3, 5}), nm(AMPRT_F32, {3}), nv(AMPRT_F32, {3}), sm(AMPRT_F32, {3}),
      si(AMPRT_F32, {3});
  AMPRT_OK_OR_FAIL(amprt_batch_norm(nullptr, x.p(), g.p(), b.p(), rm.p(), rv.p(), 1e-5f, 0.9f, 1,
                                    y.p(), nm.p(), nv.p(), sm.p(), si.p()));
  std::vector<double> ry(60), rnm(3), rnv(3), rmu(3), rinv(3);
  for (int c = 0; c < 3; ++c) {
    double mu = 0, var = 0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 5; ++i)
        mu += x.get((n * 3 + c) * 5 + i);
    mu /= 20;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 5; ++i)
        var += std::pow(x.get((n * 3 + c) * 5 + i) - mu, 2);
    rmu[c] = mu;
    rinv[c] = 1 / std::sqrt(var / 20 + 1e-5);
    const double mom = 0.9f; // the f32 attribute's value
    rnm[c] = mom * rm.get(c) + (1 - mom) * mu;
    rnv[c] = mom * rv.get(c) + (1 - mom) * var / 20; // biased, as ONNX defines it
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 5; ++i) {
        int o = (n * 3 + c) * 5 + i;
        ry[o] = (x.get(o) - mu) * rinv[c] * g.get(c) + b.get(c);
      }
  }
  EXPECT_TRUE(near(y, ry, 4, 1e-6, 1e-6));
  EXPECT_TRUE(near(nm, rnm, 2, 1e-7));
  EXPECT_TRUE(near(nv, rnv, 2, 1e-7));
  EXPECT_TRUE(near(sm, rmu, 1, 1e-7));
  EXPECT_TRUE(near(si, rinv, 1, 1e-7));
  // Gradient: closed form in double.
  Buf dy = randn(AMPRT_F32, {4, 3, 5}), dx(AMPRT_F32, {4, 3, 5}), dg(AMPRT_F32, {3}),
      db(AMPRT_F32, {3});
  AMPRT_OK_OR_FAIL(
      amprt_batch_norm_grad(nullptr, x.p(), g.p(), sm.p(), si.p(), dy.p(), dx.p(), dg.p(), db.p()));
  std::vector<double> rdx(60), rdg(3), rdb(3);
  for (int c = 0; c < 3; ++c) {
    double sdy = 0, sdyx = 0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 5; ++i) {
        int o = (n * 3 + c) * 5 + i;
        sdy += dy.get(o);
        sdyx += dy.get(o) * (x.get(o) - rmu[c]) * rinv[c];
      }
    rdg[c] = sdyx;
    rdb[c] = sdy;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 5; ++i) {
        int o = (n * 3 + c) * 5 + i;
        double xh = (x.get(o) - rmu[c]) * rinv[c];
        rdx[o] = g.get(c) * rinv[c] / 20 * (20 * dy.get(o) - sdy - xh * sdyx);
      }
  }
  EXPECT_TRUE(near(dx, rdx, 8, 1e-5, 1e-6));
  EXPECT_TRUE(near(dg, rdg, 8, 1e-6, 1e-6));
  EXPECT_TRUE(near(db, rdb, 8, 1e-6, 1e-6));
  // Inference mode: given statistics, copies out.
  AMPRT_OK_OR_FAIL(amprt_batch_norm(nullptr, x.p(), g.p(), b.p(), rm.p(), rv.p(), 1e-5f, 0.9f, 0,
                                    y.p(), nm.p(), nv.p(), nullptr, nullptr));
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(nm.get(c), rm.get(c));
    double want = (x.get(c * 5) - rm.get(c)) / std::sqrt(rv.get(c) + 1e-5) * g.get(c) + b.get(c);
    EXPECT_NEAR(y.get(c * 5), want, 1e-5 * (1 + std::fabs(want)));
  }
}

namespace {
/// Batch statistics of x [N, C, inner...] in double, two passes: the mean
/// and 1 / sqrt(biased variance + eps) per channel.
void bnReference(const Buf &x, double eps, std::vector<double> &mu, std::vector<double> &inv) {
  int64_t n = x.shape[0], c = x.shape[1], inner = x.numel() / (n * c);
  mu.assign(c, 0.0);
  inv.assign(c, 0.0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, q = 0;
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i)
        s += x.get((k * c + ch) * inner + i);
    mu[ch] = s / (n * inner);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i)
        q += std::pow(x.get((k * c + ch) * inner + i) - mu[ch], 2);
    inv[ch] = 1 / std::sqrt(q / (n * inner) + eps);
  }
}

/// The gradient of batch norm in double from the saved statistics sm / si
/// (as stored): dx, dscale, dbias.
void bnGradReference(const Buf &x, const Buf &g, const Buf &sm, const Buf &si, const Buf &dy,
                     std::vector<double> &rdx, std::vector<double> &rdg, std::vector<double> &rdb) {
  int64_t n = x.shape[0], c = x.shape[1], inner = x.numel() / (n * c);
  double m = (double)n * inner;
  rdx.assign(x.numel(), 0.0);
  rdg.assign(c, 0.0);
  rdb.assign(c, 0.0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double mu = sm.get(ch), is = si.get(ch), sdy = 0, sdyx = 0;
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t o = (k * c + ch) * inner + i;
        sdy += dy.get(o);
        sdyx += dy.get(o) * (x.get(o) - mu) * is;
      }
    rdg[ch] = sdyx;
    rdb[ch] = sdy;
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t o = (k * c + ch) * inner + i;
        rdx[o] = g.get(ch) * is / m * (m * dy.get(o) - sdy - (x.get(o) - mu) * is * sdyx);
      }
  }
}
} // namespace

// The storage class: f16 / bf16 activations (x, y, dy, dx) with f32 scale,
// bias and statistics, against double references from the stored values;
// short planes (2 x 2, the inline path) and long ones (7 x 9), one channel
// count that splits across the threads.
TEST(BatchNorm, LowPrecisionActivationsWithF32Statistics) {
  for (amprt_dtype xt : {AMPRT_BF16, AMPRT_F16})
    for (amprt_dtype yt : {xt, AMPRT_F32})
      for (std::vector<int64_t> shape :
           {std::vector<int64_t>{3, 37, 2, 2}, {2, 5, 7, 9}, {3, 4, 5, 13}}) {
        SCOPED_TRACE(std::string(amprt_dtype_name(xt)) + " -> " + amprt_dtype_name(yt) +
                     ", inner " + std::to_string(shape[2] * shape[3]));
        int64_t n = shape[0], c = shape[1], inner = shape[2] * shape[3], total = n * c * inner;
        Buf x = randn(xt, shape, 1.5, 0.75), g = randn(AMPRT_F32, {c}), b = randn(AMPRT_F32, {c});
        Buf rm = randn(AMPRT_F32, {c}), rv = uniform(AMPRT_F32, {c}, 0.5, 2.0);
        Buf y(yt, shape), nm(AMPRT_F32, {c}), nv(AMPRT_F32, {c}), sm(AMPRT_F32, {c}),
            si(AMPRT_F32, {c});
        AMPRT_OK_OR_FAIL(amprt_batch_norm(nullptr, x.p(), g.p(), b.p(), rm.p(), rv.p(), 1e-5f, 0.9f,
                                          1, y.p(), nm.p(), nv.p(), sm.p(), si.p()));
        std::vector<double> ry(total), rnv(c), rmu(c), rinv(c);
        for (int64_t ch = 0; ch < c; ++ch) {
          double mu = 0, var = 0;
          for (int64_t k = 0; k < n; ++k)
            for (int64_t i = 0; i < inner; ++i)
              mu += x.get((k * c + ch) * inner + i);
          mu /= n * inner;
          for (int64_t k = 0; k < n; ++k)
            for (int64_t i = 0; i < inner; ++i)
              var += std::pow(x.get((k * c + ch) * inner + i) - mu, 2);
          var /= n * inner;
          rmu[ch] = mu;
          rinv[ch] = 1 / std::sqrt(var + 1e-5);
          rnv[ch] = 0.9f * rv.get(ch) + (1 - 0.9f) * var;
          for (int64_t k = 0; k < n; ++k)
            for (int64_t i = 0; i < inner; ++i) {
              int64_t o = (k * c + ch) * inner + i;
              ry[o] = (x.get(o) - mu) * rinv[ch] * g.get(ch) + b.get(ch);
            }
        }
        // One rounding from f32: half an ulp of y's type, and f32's.
        EXPECT_TRUE(near(y, ry, yt == AMPRT_F32 ? 4 : 0.5, 0, 1e-6));
        // The f32 kernel on x widened, rounded once to y's type (the 16-bit
        // x is read as it is, not widened into a buffer), with and without
        // the ReLU in the call; also where y is an f32 subnormal (channel
        // 1's scale 1e-39: a 16-bit y rounds it as any other value, never
        // flushed) or NaN (a NaN in channel 2). Bit for bit, except that
        // bf16 -> bf16 on the AVX-512 path computes in f32 (the f32 kernel
        // in double): where (x - mean) * a nearly cancels against the bias
        // a result may differ by f32's error of its terms (1e-6 here, as
        // the reference check above) before its rounding to bf16 (seen in
        // 2.5% of runs), and nowhere else.
        Buf xs = x, gs = g, bs = b;
        gs.set(1, 1e-39f);
        bs.set(1, 0.0f);
        xs.set(2 * inner + 1, NAN);
        for (int32_t flags : {0, (int32_t)AMPRT_BN_RELU})
          for (bool special : {false, true}) {
            Buf &xv = special ? xs : x, &gv = special ? gs : g, &bv = special ? bs : b;
            Buf x32(AMPRT_F32, shape), y32(AMPRT_F32, shape), want(yt, shape), got(yt, shape);
            AMPRT_OK_OR_FAIL(
                amprt_convert(xv.bytes.data(), xt, x32.bytes.data(), AMPRT_F32, (size_t)total));
            AMPRT_OK_OR_FAIL(amprt_batch_norm_ex(nullptr, x32.p(), gv.p(), bv.p(), rm.p(), rv.p(),
                                                 1e-5f, 0.9f, 1, flags, y32.p(), nullptr, nullptr,
                                                 nullptr, nullptr));
            AMPRT_OK_OR_FAIL(
                amprt_convert(y32.bytes.data(), AMPRT_F32, want.bytes.data(), yt, (size_t)total));
            AMPRT_OK_OR_FAIL(amprt_batch_norm_ex(nullptr, xv.p(), gv.p(), bv.p(), rm.p(), rv.p(),
                                                 1e-5f, 0.9f, 1, flags, got.p(), nullptr, nullptr,
                                                 nullptr, nullptr));
            for (int64_t i = 0; i < total; ++i) {
              uint16_t a = 0, b = 0;
              if (yt != AMPRT_F32) {
                std::memcpy(&a, got.bytes.data() + 2 * i, 2);
                std::memcpy(&b, want.bytes.data() + 2 * i, 2);
              }
              if (yt == AMPRT_F32
                      ? std::memcmp(got.bytes.data() + 4 * i, want.bytes.data() + 4 * i, 4) == 0
                      : a == b)
                continue;
              // One rounding (half a bf16 ulp) from within f32's error of
              // the terms of y32's value.
              double v = y32.get(i);
              EXPECT_TRUE(yt == AMPRT_BF16 && std::abs(got.get(i) - v) <= 1e-6 + std::abs(v) / 256)
                  << "flags " << flags << (special ? " special" : "") << ": element " << i << " is "
                  << got.get(i) << ", the f32 kernel's " << v << " rounds to " << want.get(i);
            }
          }
        EXPECT_TRUE(near(sm, rmu, 2, 0, 1e-7));
        EXPECT_TRUE(near(si, rinv, 2));
        EXPECT_TRUE(near(nv, rnv, 2));
        // The gradient: x, dy in the low type, dx in yt, dscale / dbias f32.
        Buf dy = randn(xt, shape), dx(yt, shape), dg(AMPRT_F32, {c}), db(AMPRT_F32, {c});
        AMPRT_OK_OR_FAIL(amprt_batch_norm_grad(nullptr, x.p(), g.p(), sm.p(), si.p(), dy.p(),
                                               dx.p(), dg.p(), db.p()));
        std::vector<double> rdx, rdg, rdb;
        bnGradReference(x, g, sm, si, dy, rdx, rdg, rdb);
        // dx cancels (m dy - sdy - xhat sdyx): an absolute floor at f32's
        // resolution of its terms, plus the one rounding to dx's type.
        EXPECT_TRUE(near(dx, rdx, yt == AMPRT_F32 ? 8 : 0.5, 0, 1e-6));
        EXPECT_TRUE(near(dg, rdg, 8, 0, 1e-5));
        EXPECT_TRUE(near(db, rdb, 8, 0, 1e-5));
        // The recomputing form gives the same gradients from x alone.
        Buf dx2(yt, shape), dg2(AMPRT_F32, {c}), db2(AMPRT_F32, {c});
        AMPRT_OK_OR_FAIL(amprt_batch_norm_grad_recompute(nullptr, x.p(), g.p(), dy.p(), 1e-5f,
                                                         dx2.p(), dg2.p(), db2.p()));
        EXPECT_TRUE(near(dx2, rdx, yt == AMPRT_F32 ? 64 : 1, 0, 1e-5));
        EXPECT_TRUE(near(dg2, rdg, 64, 0, 1e-4));
        EXPECT_TRUE(near(db2, rdb, 8, 0, 1e-5));
      }
}

// Short planes (fewer than 32 elements: the column path, chunks of
// columns on the threads) and long ones (per-plane), every activation
// type, values around 3 (the statistics' shift matters): the forward and
// both gradients against double references, and the recomputing gradient
// finds the forward's statistics to the bit (its dx, dscale and dbias are
// the bytes of the gradient given the saved statistics).
TEST(BatchNorm, ShortAndLongPlanesWithOneSetOfStatistics) {
  for (amprt_dtype xt : {AMPRT_F32, AMPRT_BF16, AMPRT_F16})
    for (std::vector<int64_t> shape : {std::vector<int64_t>{16, 300, 3, 3},
                                       {3, 600, 6, 7},
                                       {5, 7, 1, 1},
                                       {2, 3, 33},
                                       {4, 130, 2, 4}}) {
      int64_t n = shape[0], c = shape[1], total = 1;
      for (int64_t d : shape)
        total *= d;
      int64_t inner = total / (n * c);
      SCOPED_TRACE(std::string(amprt_dtype_name(xt)) + ", inner " + std::to_string(inner) +
                   ", channels " + std::to_string(c));
      Buf x = randn(xt, shape, 0.5, 3.0), g = randn(AMPRT_F32, {c}), b = randn(AMPRT_F32, {c});
      Buf rm = randn(AMPRT_F32, {c}), rv = uniform(AMPRT_F32, {c}, 0.5, 2.0);
      Buf y(xt, shape), nm(AMPRT_F32, {c}), nv(AMPRT_F32, {c}), sm(AMPRT_F32, {c}),
          si(AMPRT_F32, {c});
      AMPRT_OK_OR_FAIL(amprt_batch_norm(nullptr, x.p(), g.p(), b.p(), rm.p(), rv.p(), 1e-5f, 0.9f,
                                        1, y.p(), nm.p(), nv.p(), sm.p(), si.p()));
      std::vector<double> rmu, rinv, ry(total);
      bnReference(x, 1e-5, rmu, rinv);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t i = 0; i < inner; ++i) {
            int64_t o = (k * c + ch) * inner + i;
            ry[o] = (x.get(o) - rmu[ch]) * rinv[ch] * g.get(ch) + b.get(ch);
          }
      EXPECT_TRUE(near(y, ry, xt == AMPRT_F32 ? 4 : 0.5, 0, 1e-6));
      EXPECT_TRUE(near(sm, rmu, 1));
      EXPECT_TRUE(near(si, rinv, 1));
      Buf dy = randn(xt, shape), dx(xt, shape), dg(AMPRT_F32, {c}), db(AMPRT_F32, {c});
      AMPRT_OK_OR_FAIL(amprt_batch_norm_grad(nullptr, x.p(), g.p(), sm.p(), si.p(), dy.p(), dx.p(),
                                             dg.p(), db.p()));
      std::vector<double> rdx, rdg, rdb;
      bnGradReference(x, g, sm, si, dy, rdx, rdg, rdb);
      EXPECT_TRUE(near(dx, rdx, xt == AMPRT_F32 ? 8 : 0.5, 0, 1e-6));
      EXPECT_TRUE(near(dg, rdg, 8, 0, 1e-5));
      EXPECT_TRUE(near(db, rdb, 8, 0, 1e-5));
      Buf dx2(xt, shape), dg2(AMPRT_F32, {c}), db2(AMPRT_F32, {c});
      AMPRT_OK_OR_FAIL(amprt_batch_norm_grad_recompute(nullptr, x.p(), g.p(), dy.p(), 1e-5f,
                                                       dx2.p(), dg2.p(), db2.p()));
      EXPECT_EQ(dx2.bytes, dx.bytes);
      EXPECT_EQ(dg2.bytes, dg.bytes);
      EXPECT_EQ(db2.bytes, db.bytes);
    }
}

// Values far from zero with a small spread (1000 +- 0.01: sums of squares
// minus the squared mean would cancel to nothing) and a channel whose first
// value is far from the rest: the statistics to an ulp of the two-pass
// double reference, forward and recomputing gradient alike.
TEST(BatchNorm, StatisticsOfValuesFarFromZero) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{4, 3, 50}, {4, 3, 5}}) {
    int64_t c = 3, inner = shape[2];
    SCOPED_TRACE("inner " + std::to_string(inner));
    Buf x = randn(AMPRT_F32, shape, 0.01, 1000.0);
    x.set(2 * inner, 1010.0); // channel 2's first value: 1000 standard deviations off
    Buf g = randn(AMPRT_F32, {c}), b = randn(AMPRT_F32, {c});
    Buf rm(AMPRT_F32, {c}), rv = uniform(AMPRT_F32, {c}, 0.5, 2.0), y(AMPRT_F32, shape);
    Buf sm(AMPRT_F32, {c}), si(AMPRT_F32, {c});
    AMPRT_OK_OR_FAIL(amprt_batch_norm(nullptr, x.p(), g.p(), b.p(), rm.p(), rv.p(), 1e-5f, 0.9f, 1,
                                      y.p(), nullptr, nullptr, sm.p(), si.p()));
    std::vector<double> rmu, rinv;
    bnReference(x, 1e-5, rmu, rinv);
    EXPECT_TRUE(near(sm, rmu, 1));
    EXPECT_TRUE(near(si, rinv, 1));
    // The recomputing gradient's dbias and dscale from the same statistics:
    // dscale = sum dy * (x - mean) * inv.
    Buf dy = randn(AMPRT_F32, shape), dx(AMPRT_F32, shape), dg(AMPRT_F32, {c}), db(AMPRT_F32, {c});
    AMPRT_OK_OR_FAIL(amprt_batch_norm_grad_recompute(nullptr, x.p(), g.p(), dy.p(), 1e-5f, dx.p(),
                                                     dg.p(), db.p()));
    std::vector<double> rdg(c, 0.0);
    for (int64_t k = 0; k < shape[0]; ++k)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t o = (k * c + ch) * inner + i;
          rdg[ch] += dy.get(o) * (x.get(o) - sm.get(ch)) * si.get(ch);
        }
    EXPECT_TRUE(near(dg, rdg, 4, 0, 1e-6));
  }
}

// A batch norm and the ReLU after it in one call (AMPRT_BN_RELU), and its
// gradient from the ReLU's dz and mask: the bytes of the separate calls
// (amprt_batch_norm then amprt_unary RELU; amprt_unary_grad RELU then
// amprt_batch_norm_grad_recompute), short, packed (2 x 2, 1) and long
// planes, every type, with NaN and infinite values in dz and an exact zero
// in x.
TEST(BatchNorm, WithItsReluInOneCallAsTheSeparateCalls) {
  for (amprt_dtype xt : {AMPRT_F32, AMPRT_BF16, AMPRT_F16})
    for (std::vector<int64_t> shape :
         {std::vector<int64_t>{6, 40, 3, 3}, {3, 20, 7, 9}, {5, 21, 2, 2}, {16, 24, 1, 1}}) {
      int64_t c = shape[1], total = shape[0] * c * shape[2] * shape[3];
      SCOPED_TRACE(std::string(amprt_dtype_name(xt)) + ", inner " +
                   std::to_string(shape[2] * shape[3]));
      Buf x = randn(xt, shape, 1.0, 0.3), g = randn(AMPRT_F32, {c}), b = randn(AMPRT_F32, {c});
      Buf rm = randn(AMPRT_F32, {c}), rv = uniform(AMPRT_F32, {c}, 0.5, 2.0);
      x.set(5, 0.0);
      Buf y(xt, shape), z(xt, shape), zf(xt, shape), m1(AMPRT_F32, {c}), v1(AMPRT_F32, {c}),
          m2(AMPRT_F32, {c}), v2(AMPRT_F32, {c});
      for (int training = 0; training < 2; ++training) {
        AMPRT_OK_OR_FAIL(amprt_batch_norm(nullptr, x.p(), g.p(), b.p(), rm.p(), rv.p(), 1e-5f, 0.9f,
                                          training, y.p(), m1.p(), v1.p(), nullptr, nullptr));
        AMPRT_OK_OR_FAIL(amprt_unary(nullptr, AMPRT_UNARY_RELU, 0.0f, y.p(), z.p()));
        AMPRT_OK_OR_FAIL(amprt_batch_norm_ex(nullptr, x.p(), g.p(), b.p(), rm.p(), rv.p(), 1e-5f,
                                             0.9f, training, AMPRT_BN_RELU, zf.p(), m2.p(), v2.p(),
                                             nullptr, nullptr));
        EXPECT_EQ(zf.bytes, z.bytes) << "training " << training;
        EXPECT_EQ(m2.bytes, m1.bytes);
        EXPECT_EQ(v2.bytes, v1.bytes);
      }
      int64_t zeros = 0;
      for (int64_t i = 0; i < total; ++i)
        zeros += z.get(i) == 0.0;
      EXPECT_GT(zeros, total / 10); // the mask matters
      Buf dz = randn(xt, shape);
      dz.set(7, NAN);
      dz.set(11, INFINITY);
      Buf dy(xt, shape), dx(xt, shape), dg(AMPRT_F32, {c}), db(AMPRT_F32, {c});
      AMPRT_OK_OR_FAIL(amprt_unary_grad(nullptr, AMPRT_UNARY_RELU, 0.0f, z.p(), dz.p(), dy.p()));
      AMPRT_OK_OR_FAIL(amprt_batch_norm_grad_recompute(nullptr, x.p(), g.p(), dy.p(), 1e-5f, dx.p(),
                                                       dg.p(), db.p()));
      for (Buf *mask : {&z, &y}) { // the ReLU's output or its input: the same mask
        Buf dx2(xt, shape), dg2(AMPRT_F32, {c}), db2(AMPRT_F32, {c});
        AMPRT_OK_OR_FAIL(amprt_batch_norm_relu_grad_recompute(
            nullptr, x.p(), g.p(), mask->p(), dz.p(), 1e-5f, dx2.p(), dg2.p(), db2.p()));
        EXPECT_EQ(dx2.bytes, dx.bytes);
        EXPECT_EQ(dg2.bytes, dg.bytes);
        EXPECT_EQ(db2.bytes, db.bytes);
      }
    }
  // A NaN x (inference: the running statistics) stays NaN through the
  // ReLU, as amprt_unary's, on short and vector-long planes, every type.
  for (amprt_dtype xt : {AMPRT_F32, AMPRT_BF16, AMPRT_F16})
    for (std::vector<int64_t> shape : {std::vector<int64_t>{2, 3, 5}, {2, 3, 37}, {2, 3, 8}}) {
      SCOPED_TRACE(std::string(amprt_dtype_name(xt)) + ", inner " + std::to_string(shape[2]));
      Buf x = randn(xt, shape), g = randn(AMPRT_F32, {3}), b = randn(AMPRT_F32, {3});
      Buf rm = randn(AMPRT_F32, {3}), rv = uniform(AMPRT_F32, {3}, 0.5, 2.0);
      int64_t at = shape[2] + shape[2] - 2; // channel 1, in the last vector's tail
      x.set(at, NAN);
      Buf y(xt, shape), z(xt, shape), zf(xt, shape);
      AMPRT_OK_OR_FAIL(amprt_batch_norm(nullptr, x.p(), g.p(), b.p(), rm.p(), rv.p(), 1e-5f, 0.9f,
                                        0, y.p(), nullptr, nullptr, nullptr, nullptr));
      AMPRT_OK_OR_FAIL(amprt_unary(nullptr, AMPRT_UNARY_RELU, 0.0f, y.p(), z.p()));
      AMPRT_OK_OR_FAIL(amprt_batch_norm_ex(nullptr, x.p(), g.p(), b.p(), rm.p(), rv.p(), 1e-5f,
                                           0.9f, 0, AMPRT_BN_RELU, zf.p(), nullptr, nullptr,
                                           nullptr, nullptr));
      EXPECT_TRUE(std::isnan(zf.get(at)));
      EXPECT_EQ(zf.bytes, z.bytes);
    }
  Buf x = randn(AMPRT_F32, {2, 3, 4}), g = randn(AMPRT_F32, {3}), dz = randn(AMPRT_F32, {2, 3, 4});
  Buf small(AMPRT_F32, {2, 3, 3}), dx(AMPRT_F32, {2, 3, 4});
  EXPECT_NE(amprt_batch_norm_relu_grad_recompute(nullptr, x.p(), g.p(), small.p(), dz.p(), 1e-5f,
                                                 dx.p(), nullptr, nullptr),
            AMPRT_OK);
  EXPECT_NE(std::string(amprt_last_error()).find("z must be contiguous"), std::string::npos)
      << amprt_last_error();
}

// Empty batches, channels or planes: every entry point returns without
// reading or writing an element (an empty batch's statistics are 0 / 0).
TEST(BatchNorm, EmptyTensors) {
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{0, 3, 2, 2}, {2, 0, 5}, {2, 3, 0, 5}, {0, 4, 40}})
    for (amprt_dtype xt : {AMPRT_F32, AMPRT_BF16}) {
      int64_t c = shape[1];
      Buf g = randn(AMPRT_F32, {c}), b = randn(AMPRT_F32, {c}), rm = randn(AMPRT_F32, {c}),
          rv = uniform(AMPRT_F32, {c}, 1, 2), nm(AMPRT_F32, {c}), nv(AMPRT_F32, {c}),
          dg(AMPRT_F32, {c}), db(AMPRT_F32, {c});
      // The activations without storage (an empty tensor's data may be null).
      amprt_tensor x = amprt_tensor_make(nullptr, xt, (int32_t)shape.size(), shape.data());
      amprt_tensor y = x, dy = x, dx = x;
      for (int32_t flags : {0, (int32_t)AMPRT_BN_RELU})
        EXPECT_EQ(amprt_batch_norm_ex(nullptr, &x, g.p(), b.p(), rm.p(), rv.p(), 1e-5f, 0.9f, 1,
                                      flags, &y, nm.p(), nv.p(), nullptr, nullptr),
                  AMPRT_OK)
            << amprt_last_error();
      EXPECT_EQ(
          amprt_batch_norm_grad_recompute(nullptr, &x, g.p(), &dy, 1e-5f, &dx, dg.p(), db.p()),
          AMPRT_OK)
          << amprt_last_error();
      EXPECT_EQ(amprt_batch_norm_relu_grad_recompute(nullptr, &x, g.p(), &y, &dy, 1e-5f, &dx,
                                                     dg.p(), db.p()),
                AMPRT_OK)
          << amprt_last_error();
    }
}

// A dx of another shape or an integer type is refused, not written.
TEST(BatchNorm, GradientRefusesABadDx) {
  Buf x = randn(AMPRT_BF16, {2, 3, 4}), g = randn(AMPRT_F32, {3}),
      dy = randn(AMPRT_BF16, {2, 3, 4});
  Buf sm = randn(AMPRT_F32, {3}), si = uniform(AMPRT_F32, {3}, 0.5, 2.0);
  Buf small(AMPRT_BF16, {2, 3, 3}), ints(AMPRT_I32, {2, 3, 4}), dg(AMPRT_F32, {4});
  EXPECT_NE(amprt_batch_norm_grad(nullptr, x.p(), g.p(), sm.p(), si.p(), dy.p(), small.p(), nullptr,
                                  nullptr),
            AMPRT_OK);
  EXPECT_NE(std::string(amprt_last_error()).find("dx must be contiguous"), std::string::npos)
      << amprt_last_error();
  EXPECT_NE(amprt_batch_norm_grad(nullptr, x.p(), g.p(), sm.p(), si.p(), dy.p(), ints.p(), nullptr,
                                  nullptr),
            AMPRT_OK);
  EXPECT_NE(amprt_batch_norm_grad(nullptr, x.p(), g.p(), sm.p(), si.p(), dy.p(), nullptr, dg.p(),
                                  nullptr),
            AMPRT_OK);
  EXPECT_NE(std::string(amprt_last_error()).find("dscale"), std::string::npos)
      << amprt_last_error();
}

TEST(Losses, CrossEntropyAndNLLWithWeightsAndIgnore) {
  for (amprt_reduction red : {AMPRT_REDUCTION_NONE, AMPRT_REDUCTION_SUM, AMPRT_REDUCTION_MEAN})
    for (amprt_dtype dt : {AMPRT_F32, AMPRT_F16}) {
      Buf s = randn(dt, {6, 5, 2}, 2.0), w = uniform(AMPRT_F32, {5}, 0.5, 2.0);
      if (dt != AMPRT_F32)
        w = uniform(dt, {5}, 0.5, 2.0);
      Buf y = randint(AMPRT_I64, {6, 2}, 0, 5);
      y.set(3, 4);
      y.set(7, -100); // ignored
      Buf loss(AMPRT_F32,
               red == AMPRT_REDUCTION_NONE ? std::vector<int64_t>{6, 2} : std::vector<int64_t>{});
      Buf lp(AMPRT_F32, {6, 5, 2});
      AMPRT_OK_OR_FAIL(amprt_softmax_cross_entropy(nullptr, s.p(), y.p(), w.p(), red, 1, -100,
                                                   loss.p(), lp.p()));
      std::vector<double> per(12), logp(60);
      double total = 0, wsum = 0;
      for (int n = 0; n < 6; ++n)
        for (int k = 0; k < 2; ++k) {
          double m = -INFINITY, z = 0;
          for (int c = 0; c < 5; ++c)
            m = std::max(m, s.get((n * 5 + c) * 2 + k));
          for (int c = 0; c < 5; ++c)
            z += std::exp(s.get((n * 5 + c) * 2 + k) - m);
          for (int c = 0; c < 5; ++c)
            logp[(n * 5 + c) * 2 + k] = s.get((n * 5 + c) * 2 + k) - m - std::log(z);
          int64_t cls = (int64_t)y.get(n * 2 + k);
          double wt = cls == -100 ? 0 : w.get(cls);
          per[n * 2 + k] = cls == -100 ? 0 : -wt * logp[(n * 5 + cls) * 2 + k];
          total += per[n * 2 + k];
          wsum += wt;
        }
      std::vector<double> ref = red == AMPRT_REDUCTION_NONE  ? per
                                : red == AMPRT_REDUCTION_SUM ? std::vector<double>{total}
                                                             : std::vector<double>{total / wsum};
      EXPECT_TRUE(near(loss, ref, 4, 1e-6, 1e-6)) << "reduction " << red;
      EXPECT_TRUE(near(lp, logp, 4, 1e-7, 1e-6));
      // NLL on the log-probabilities gives the same loss.
      Buf loss2 = loss;
      AMPRT_OK_OR_FAIL(amprt_nll_loss(nullptr, lp.p(), y.p(), w.p(), red, 1, -100, loss2.p()));
      EXPECT_TRUE(near(loss2, ref, 4, 1e-6, 1e-6));
      // Gradient: (softmax - onehot) * weight * dloss, divided by the weight
      // sum for mean.
      Buf dloss = red == AMPRT_REDUCTION_NONE ? randn(AMPRT_F32, {6, 2}) : randn(AMPRT_F32, {});
      Buf ds(AMPRT_F32, {6, 5, 2});
      AMPRT_OK_OR_FAIL(amprt_softmax_cross_entropy_grad(nullptr, lp.p(), y.p(), w.p(), red, 1, -100,
                                                        dloss.p(), ds.p()));
      std::vector<double> rg(60);
      for (int n = 0; n < 6; ++n)
        for (int k = 0; k < 2; ++k) {
          int64_t cls = (int64_t)y.get(n * 2 + k);
          double wt = cls == -100 ? 0 : w.get(cls);
          double d = red == AMPRT_REDUCTION_NONE ? dloss.get(n * 2 + k) : dloss.get(0);
          if (red == AMPRT_REDUCTION_MEAN)
            d /= wsum;
          for (int c = 0; c < 5; ++c)
            rg[(n * 5 + c) * 2 + k] = wt * d * (std::exp(logp[(n * 5 + c) * 2 + k]) - (c == cls));
        }
      EXPECT_TRUE(near(ds, rg, 8, 1e-5, 1e-6));
    }
}

// A language model's loss: rows of many classes (the contiguous fast paths:
// blocks of rows on the threads, f16 / bf16 scores widened, exp in f32 with
// the target's p - 1 by expm1), one row's logits spread so that its target
// takes nearly all the probability (p - 1 cancels), an ignored row and a
// NaN row. Against double.
TEST(Losses, CrossEntropyOverAVocabularyAgainstDouble) {
  const int64_t n = 37, c = 3001;
  for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16, AMPRT_F16})
    for (amprt_dtype gt : {AMPRT_F32, AMPRT_BF16}) {
      Buf s = randn(dt, {n, c}, 3.0), y = randint(AMPRT_I64, {n}, 0, c);
      y.set(5, -100);                         // ignored
      s.set(2 * c + (int64_t)y.get(2), 40.0); // p(target) = 1 - 1e-13 or so
      s.set(9 * c + 17, NAN);
      Buf loss(AMPRT_F32, {}), lp(AMPRT_F32, {n, c}), dloss = randn(AMPRT_F32, {}), ds(gt, {n, c});
      AMPRT_OK_OR_FAIL(amprt_softmax_cross_entropy(
          nullptr, s.p(), y.p(), nullptr, AMPRT_REDUCTION_MEAN, 1, -100, loss.p(), lp.p()));
      AMPRT_OK_OR_FAIL(amprt_softmax_cross_entropy_grad(
          nullptr, lp.p(), y.p(), nullptr, AMPRT_REDUCTION_MEAN, 1, -100, dloss.p(), ds.p()));
      std::vector<double> logp(n * c), rg(n * c);
      for (int64_t b = 0; b < n; ++b) {
        double m = -INFINITY, z = 0;
        for (int64_t k = 0; k < c; ++k)
          m = std::max(m, s.get(b * c + k));
        for (int64_t k = 0; k < c; ++k)
          z += std::exp(s.get(b * c + k) - m);
        for (int64_t k = 0; k < c; ++k)
          logp[b * c + k] = b == 9 ? NAN : s.get(b * c + k) - m - std::log(z);
      }
      // The loss's mean over the 36 counted rows is NaN (row 9); the
      // gradient: (softmax - onehot) * dloss / 36 per counted row, 0 for the
      // ignored one, NaN in row 9.
      EXPECT_TRUE(std::isnan(loss.get(0))) << loss.get(0);
      double d = dloss.get(0) / (double)(n - 1);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t k = 0; k < c; ++k) {
          int64_t cls = (int64_t)y.get(b);
          double l = lp.get(b * c + k); // the kernel's input, as stored
          rg[b * c + k] = cls < 0 ? 0.0 : d * (k == cls ? std::expm1(l) : std::exp(l));
        }
      EXPECT_TRUE(near(lp, logp, 4, 1e-7, 1e-6)) << amprt_dtype_name(dt);
      // libmvec's expf within about 2 ulp of its result (seen: 2.0 in the
      // SSE variant, 4.1 ulp of the product at the top of a binade), then
      // the rounding to f32 and to dscores' type.
      EXPECT_TRUE(near(ds, rg, 4, 4e-7, 1e-30))
          << amprt_dtype_name(dt) << " -> " << amprt_dtype_name(gt);
      // The target of the spread row: p - 1 ~ -1e-17 is small, not 0 or a
      // cancellation's noise.
      double t = ds.get(2 * c + (int64_t)y.get(2)), want = rg[2 * c + (int64_t)y.get(2)];
      EXPECT_NEAR(t, want, std::fabs(want) * 1e-2) << amprt_dtype_name(dt);
    }
}

TEST(Losses, BadLabelIsAnError) {
  Buf s = randn(AMPRT_F32, {2, 3}), y(AMPRT_I64, {2}), loss(AMPRT_F32, {});
  y.set(0, 1);
  y.set(1, 3);
  EXPECT_EQ(amprt_softmax_cross_entropy(nullptr, s.p(), y.p(), nullptr, AMPRT_REDUCTION_MEAN, 0, 0,
                                        loss.p(), nullptr),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("label 3 at position 1 is outside [0, 3)"),
            std::string::npos);
}
