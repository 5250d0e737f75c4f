//===- ThreadsTest.cpp - kernels on the OpenMP threads ---------------------===//
//
// The kernels that split their work across threads (element-wise ops and
// their gradients, casts, softmax rows, layer-norm rows, pooling) give
// bit-identical results with one thread and with several: each element is
// computed by the same code whatever the split. Sizes are chosen to reach the
// threaded path and to leave vector tails. And amprt_threads_adapt goes to
// one thread when the process is preempted all the time.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "host/scratch.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using namespace amprt_test;

namespace {

/// Runs f with 1 thread and with 3 threads (more than pieces of some
/// kernels: uneven splits) and requires identical bytes.
void sameWithThreads(const char *what, const std::function<void(Buf &)> &f, Buf out) {
  Buf one = out, many = out;
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  f(one);
  omp_set_num_threads(3);
  f(many);
  omp_set_num_threads(saved);
  EXPECT_EQ(one.bytes, many.bytes) << what << " (seed " << testSeed() << ")";
  bool anyNonZero = false;
  for (int64_t i = 0; i < one.numel(); ++i)
    anyNonZero |= one.get(i) != 0.0;
  EXPECT_TRUE(anyNonZero) << what;
}

} // namespace

TEST(Threads, ResultsDoNotDependOnTheThreadCount) {
  Buf x = randn(AMPRT_F32, {50021});
  for (amprt_unary_op op : {AMPRT_UNARY_GELU, AMPRT_UNARY_EXP, AMPRT_UNARY_ERF, AMPRT_UNARY_TANH,
                            AMPRT_UNARY_SIGMOID, AMPRT_UNARY_GELU_TANH})
    sameWithThreads(
        "unary", [&](Buf &y) { AMPRT_OK_OR_FAIL(amprt_unary(nullptr, op, 0.0f, x.p(), y.p())); },
        Buf(AMPRT_F32, {50021}));
  Buf big = randn(AMPRT_F32, {300001});
  sameWithThreads(
      "relu",
      [&](Buf &y) {
        AMPRT_OK_OR_FAIL(amprt_unary(nullptr, AMPRT_UNARY_RELU, 0.0f, big.p(), y.p()));
      },
      Buf(AMPRT_F32, {300001}));
  Buf s = randn(AMPRT_F32, {1031, 17}, 3.0);
  for (int log : {0, 1})
    sameWithThreads(
        "softmax", [&](Buf &y) { AMPRT_OK_OR_FAIL(amprt_softmax(nullptr, s.p(), 1, log, y.p())); },
        Buf(AMPRT_F32, {1031, 17}));
  Buf ln = randn(AMPRT_F32, {515, 64}, 2.0, 1.0), sc = randn(AMPRT_F32, {64}),
      bi = randn(AMPRT_F32, {64});
  sameWithThreads(
      "layer_norm",
      [&](Buf &y) {
        Buf mean(AMPRT_F32, {515, 1}), inv(AMPRT_F32, {515, 1});
        AMPRT_OK_OR_FAIL(
            amprt_layer_norm(nullptr, ln.p(), sc.p(), bi.p(), 1, 1e-5f, y.p(), mean.p(), inv.p()));
      },
      Buf(AMPRT_F32, {515, 64}));
  // Layer norm's gradient: rows in fixed pieces, dscale / dbias summed in
  // piece order.
  {
    Buf mean(AMPRT_F32, {515, 1}), inv(AMPRT_F32, {515, 1}), y(AMPRT_F32, {515, 64}),
        dy = randn(AMPRT_F32, {515, 64});
    AMPRT_OK_OR_FAIL(
        amprt_layer_norm(nullptr, ln.p(), sc.p(), bi.p(), 1, 1e-5f, y.p(), mean.p(), inv.p()));
    for (int which = 0; which < 3; ++which)
      sameWithThreads(
          "layer_norm_grad",
          [&](Buf &out) {
            Buf dx(AMPRT_F32, {515, 64}), ds(AMPRT_F32, {64}), db(AMPRT_F32, {64});
            AMPRT_OK_OR_FAIL(amprt_layer_norm_grad(nullptr, ln.p(), sc.p(), mean.p(), inv.p(),
                                                   dy.p(), 1, dx.p(), ds.p(), db.p()));
            out = which == 0 ? dx : which == 1 ? ds : db;
          },
          which == 0 ? Buf(AMPRT_F32, {515, 64}) : Buf(AMPRT_F32, {64}));
  }
  Buf g = randn(AMPRT_F32, {50021});
  for (amprt_unary_op op : {AMPRT_UNARY_GELU, AMPRT_UNARY_ERF, AMPRT_UNARY_RELU, AMPRT_UNARY_TANH})
    sameWithThreads(
        "unary_grad",
        [&](Buf &dx) {
          AMPRT_OK_OR_FAIL(amprt_unary_grad(nullptr, op, 0.0f, x.p(), g.p(), dx.p()));
        },
        Buf(AMPRT_F32, {50021}));
  // Binary ops with a per-channel operand, a trailing row, a whole tensor.
  Buf t4 = randn(AMPRT_F32, {9, 16, 33, 31}), ch = randn(AMPRT_F32, {16, 1, 1}),
      row = randn(AMPRT_F32, {31}), full = randn(AMPRT_F32, {9, 16, 33, 31});
  for (Buf *other : {&ch, &row, &full})
    sameWithThreads(
        "binary",
        [&](Buf &y) {
          AMPRT_OK_OR_FAIL(amprt_binary(nullptr, AMPRT_BINARY_DIV, t4.p(), other->p(), y.p()));
        },
        Buf(AMPRT_F32, {9, 16, 33, 31}));
  for (amprt_dtype dt : {AMPRT_BF16, AMPRT_F16})
    sameWithThreads(
        "cast", [&](Buf &y) { AMPRT_OK_OR_FAIL(amprt_cast(nullptr, t4.p(), y.p())); },
        Buf(dt, {9, 16, 33, 31}));
  amprt_pool_params q{};
  q.spatial = 2;
  q.kernel[0] = q.kernel[1] = 2;
  q.strides[0] = q.strides[1] = 2;
  q.dilations[0] = q.dilations[1] = 1;
  sameWithThreads(
      "max_pool",
      [&](Buf &y) {
        Buf idx(AMPRT_I64, {9, 16, 16, 15});
        AMPRT_OK_OR_FAIL(amprt_max_pool(nullptr, t4.p(), &q, y.p(), idx.p()));
        y.bytes.insert(y.bytes.end(), idx.bytes.begin(), idx.bytes.end()); // indices too
      },
      Buf(AMPRT_F32, {9, 16, 16, 15}));
  // Max pool gradient: planes on the threads; an index into another plane
  // (legal, if odd) and an index chosen twice take the summing path.
  Buf idx(AMPRT_I64, {9, 16, 16, 15}), pooled(AMPRT_F32, {9, 16, 16, 15});
  AMPRT_OK_OR_FAIL(amprt_max_pool(nullptr, t4.p(), &q, pooled.p(), idx.p()));
  Buf dy = randn(AMPRT_F32, {9, 16, 16, 15});
  for (int variant = 0; variant < 3; ++variant) {
    Buf ix = idx;
    if (variant == 1)
      ix.set(5, idx.get(16 * 15 * 40 + 7)); // plane 0's output 5 -> plane 40's input
    if (variant == 2)
      ix.set(6, idx.get(7)); // one input position chosen twice
    sameWithThreads(
        "max_pool_grad",
        [&](Buf &dx) { AMPRT_OK_OR_FAIL(amprt_max_pool_grad(nullptr, dy.p(), ix.p(), dx.p())); },
        Buf(AMPRT_F32, {9, 16, 33, 31}));
    std::vector<double> ref(9 * 16 * 33 * 31, 0.0);
    for (int64_t o = 0; o < dy.numel(); ++o)
      ref[(int64_t)ix.get(o)] += dy.get(o);
    Buf dx(AMPRT_F32, {9, 16, 33, 31});
    AMPRT_OK_OR_FAIL(amprt_max_pool_grad(nullptr, dy.p(), ix.p(), dx.p()));
    EXPECT_TRUE(near(dx, ref, 0.5)) << "variant " << variant;
    // f16 / bf16 dy and dx (the summing path, planes on the threads), and
    // an f32 dx of a 16-bit dy.
    for (auto [gt, xt] : {std::pair{AMPRT_BF16, AMPRT_BF16}, std::pair{AMPRT_F16, AMPRT_F16},
                          std::pair{AMPRT_BF16, AMPRT_F32}}) {
      Buf dyh(gt, {9, 16, 16, 15});
      AMPRT_OK_OR_FAIL(
          amprt_convert(dy.bytes.data(), AMPRT_F32, dyh.bytes.data(), gt, (size_t)dy.numel()));
      std::vector<double> refh(ref.size(), 0.0);
      for (int64_t o = 0; o < dyh.numel(); ++o)
        refh[(int64_t)ix.get(o)] += dyh.get(o);
      sameWithThreads(
          "max_pool_grad 16-bit",
          [&](Buf &d) { AMPRT_OK_OR_FAIL(amprt_max_pool_grad(nullptr, dyh.p(), ix.p(), d.p())); },
          Buf(xt, {9, 16, 33, 31}));
      Buf dxh(xt, {9, 16, 33, 31});
      AMPRT_OK_OR_FAIL(amprt_max_pool_grad(nullptr, dyh.p(), ix.p(), dxh.p()));
      EXPECT_TRUE(near(dxh, refh, 0.5 + 1e-3))
          << "variant " << variant << " " << amprt_dtype_name(gt) << " -> " << amprt_dtype_name(xt);
    }
  }
  {
    Buf dyi(AMPRT_I32, {9, 16, 16, 15}), dxi(AMPRT_I32, {9, 16, 33, 31});
    EXPECT_EQ(amprt_max_pool_grad(nullptr, dyi.p(), idx.p(), dxi.p()), AMPRT_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(amprt_last_error()).find("must be float"), std::string::npos)
        << amprt_last_error();
  }
  for (amprt_dtype t : {AMPRT_F32, AMPRT_BF16}) { // an index past dx: an error, on every path
    Buf ix = idx, dyt(t, {9, 16, 16, 15}), dxt(t, {9, 16, 33, 31});
    ix.set(9 * 16 * 16 * 15 - 3, 9.0 * 16 * 33 * 31);
    EXPECT_EQ(amprt_max_pool_grad(nullptr, dyt.p(), ix.p(), dxt.p()), AMPRT_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(amprt_last_error()).find("out of range"), std::string::npos)
        << amprt_last_error();
  }
  // The window loops (average pool and its gradient, the general max pool:
  // 3 x 3 stride 2 with padding, ceil mode's partial windows, dilation):
  // planes on the threads, the same bytes as one thread, and the values of
  // a direct double reference.
  // resnet's stem window: 3 x 3, stride 2, padding 1.
  auto stem = [] {
    amprt_pool_params p{};
    p.spatial = 2;
    p.kernel[0] = p.kernel[1] = 3;
    p.strides[0] = p.strides[1] = 2;
    p.dilations[0] = p.dilations[1] = 1;
    p.pads_begin[0] = p.pads_begin[1] = p.pads_end[0] = p.pads_end[1] = 1;
    return p;
  };
  {
    amprt_pool_params a = stem();
    const int64_t H = 33, W = 31, OH = (H + 2 - 3) / 2 + 1, OW = (W + 2 - 3) / 2 + 1;
    for (int include = 0; include < 2; ++include)
      for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16}) {
        a.count_include_pad = include;
        Buf xin(dt, {9, 16, H, W});
        AMPRT_OK_OR_FAIL(
            amprt_convert(t4.bytes.data(), AMPRT_F32, xin.bytes.data(), dt, (size_t)t4.numel()));
        Buf g = randn(dt, {9, 16, OH, OW});
        sameWithThreads(
            "average_pool",
            [&](Buf &y) { AMPRT_OK_OR_FAIL(amprt_average_pool(nullptr, xin.p(), &a, y.p())); },
            Buf(dt, {9, 16, OH, OW}));
        sameWithThreads(
            "average_pool_grad",
            [&](Buf &d) { AMPRT_OK_OR_FAIL(amprt_average_pool_grad(nullptr, g.p(), &a, d.p())); },
            Buf(dt, {9, 16, H, W}));
        Buf y(dt, {9, 16, OH, OW}), d(dt, {9, 16, H, W});
        AMPRT_OK_OR_FAIL(amprt_average_pool(nullptr, xin.p(), &a, y.p()));
        AMPRT_OK_OR_FAIL(amprt_average_pool_grad(nullptr, g.p(), &a, d.p()));
        std::vector<double> ry(y.numel()), rd(d.numel(), 0.0);
        for (int64_t nc = 0; nc < 9 * 16; ++nc)
          for (int64_t oh = 0; oh < OH; ++oh)
            for (int64_t ow = 0; ow < OW; ++ow) {
              double sum = 0;
              int cnt = 0;
              std::vector<int64_t> in;
              for (int64_t kh = 0; kh < 3; ++kh)
                for (int64_t kw = 0; kw < 3; ++kw) {
                  int64_t h = oh * 2 - 1 + kh, w = ow * 2 - 1 + kw;
                  bool inside = h >= 0 && h < H && w >= 0 && w < W;
                  if (inside) {
                    sum += xin.get((nc * H + h) * W + w);
                    in.push_back((nc * H + h) * W + w);
                  }
                  cnt += inside || include;
                }
              int64_t o = (nc * OH + oh) * OW + ow;
              ry[o] = sum / cnt;
              for (int64_t i : in)
                rd[i] += g.get(o) / cnt;
            }
        EXPECT_TRUE(near(y, ry, 0.5, 1e-12)) << "include_pad " << include;
        EXPECT_TRUE(near(d, rd, 0.5, 1e-12)) << "include_pad " << include;
      }
    // The general max pool (dilation 2: not the vector path).
    amprt_pool_params dm = a;
    dm.dilations[0] = dm.dilations[1] = 2;
    const int64_t DH = (H + 2 - 5) / 2 + 1, DW = (W + 2 - 5) / 2 + 1;
    sameWithThreads(
        "max_pool dilated",
        [&](Buf &y) {
          Buf ix(AMPRT_I64, {9, 16, DH, DW});
          AMPRT_OK_OR_FAIL(amprt_max_pool(nullptr, t4.p(), &dm, y.p(), ix.p()));
          y.bytes.insert(y.bytes.end(), ix.bytes.begin(), ix.bytes.end());
        },
        Buf(AMPRT_F32, {9, 16, DH, DW}));
  }
  int32_t b = amprt_channel_block();
  Buf px = randn(AMPRT_F32, {7, 2 * b, 12, 10});
  amprt_pool_params p = stem();
  sameWithThreads(
      "max_pool_blocked",
      [&](Buf &y) { AMPRT_OK_OR_FAIL(amprt_max_pool_blocked(nullptr, px.p(), &p, b, y.p())); },
      Buf(AMPRT_F32, {7, 2 * b, 6, 5}));
  sameWithThreads(
      "global_average_pool_blocked",
      [&](Buf &y) {
        AMPRT_OK_OR_FAIL(amprt_global_average_pool_blocked(nullptr, px.p(), b, y.p()));
      },
      Buf(AMPRT_F32, {7, 2 * b, 1, 1}));
}

namespace {

/// In a fresh process (the governor is made once per process): with more
/// spinning threads than cores, this thread is preempted all the time;
/// amprt_threads_adapt, called as after each step, must go to one thread
/// within 3 s (unless `fixed` names an environment that turns it off, when
/// it must keep both threads). Exits 0 when it behaved.
[[noreturn]] void adaptUnderContention(const char *fixedVar) {
  unsetenv("OMP_NUM_THREADS");
  unsetenv("AMPRT_ADAPT_THREADS");
  setenv("AMPRT_BUSY_PREEMPTIONS", "20", 1);
  if (fixedVar)
    setenv(fixedVar, fixedVar == std::string("OMP_NUM_THREADS") ? "2" : "0", 1);
  omp_set_num_threads(2); // on any machine: two to drop from
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  unsigned n = 2 * std::max(1u, std::thread::hardware_concurrency()) + 2;
  for (unsigned i = 0; i < n; ++i)
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  auto t0 = std::chrono::steady_clock::now();
  int threads = 2;
  volatile double sink = 0;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3)) {
    for (int i = 0; i < 200000; ++i) // a "step" of work, runnable all along
      sink = sink + i * 1e-9;
    threads = amprt_threads_adapt();
    if (!fixedVar && threads == 1)
      break;
  }
  stop = true;
  for (auto &t : spinners)
    t.join();
  std::exit(fixedVar ? (threads == 2 ? 0 : 1) : (threads == 1 ? 0 : 1));
}

} // namespace

// Batch norm: short planes (the column path, chunks of columns on the
// threads) and long ones (channels on the threads), forward and the
// recomputing gradient (dx, dscale), the same bytes for any thread count.
TEST(Threads, BatchNormDoesNotDependOnTheThreadCount) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{16, 300, 3, 3}, {4, 600, 8, 8}})
    for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16}) {
      int64_t c = shape[1];
      Buf x = randn(dt, shape, 0.5, 2.0), dy = randn(dt, shape), g = randn(AMPRT_F32, {c}),
          b = randn(AMPRT_F32, {c}), rm = randn(AMPRT_F32, {c}),
          rv = uniform(AMPRT_F32, {c}, 0.5, 2.0);
      sameWithThreads(
          "batch_norm",
          [&](Buf &y) {
            AMPRT_OK_OR_FAIL(amprt_batch_norm(nullptr, x.p(), g.p(), b.p(), rm.p(), rv.p(), 1e-5f,
                                              0.9f, 1, y.p(), nullptr, nullptr, nullptr, nullptr));
          },
          Buf(dt, shape));
      sameWithThreads(
          "batch_norm_grad_recompute dx",
          [&](Buf &dx) {
            AMPRT_OK_OR_FAIL(amprt_batch_norm_grad_recompute(nullptr, x.p(), g.p(), dy.p(), 1e-5f,
                                                             dx.p(), nullptr, nullptr));
          },
          Buf(dt, shape));
      sameWithThreads(
          "batch_norm_grad_recompute dscale",
          [&](Buf &dg) {
            AMPRT_OK_OR_FAIL(amprt_batch_norm_grad_recompute(nullptr, x.p(), g.p(), dy.p(), 1e-5f,
                                                             nullptr, dg.p(), nullptr));
          },
          Buf(AMPRT_F32, {c}));
    }
}

TEST(Threads, OneThreadWhileTheMachineIsBusy) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(adaptUnderContention(nullptr), testing::ExitedWithCode(0), "");
}

TEST(Threads, AFixedThreadCountIsKept) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(adaptUnderContention("OMP_NUM_THREADS"), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(adaptUnderContention("AMPRT_ADAPT_THREADS"), testing::ExitedWithCode(0), "");
}

// Per-thread scratch (host/scratch.h): releaseScratch() empties the calling
// thread's buffers only, a destroyed buffer is forgotten, and another
// thread's stays as it was.
TEST(Scratch, ReleaseEmptiesThisThreadsBuffers) {
  thread_local amprt::ScratchVec<float> a;
  thread_local amprt::ScratchVec<char> b;
  a.resize(1 << 20);
  b.resize(1 << 16);
  size_t otherCapacity = 0;
  std::thread other([&] {
    thread_local amprt::ScratchVec<double> c;
    c.resize(1000);
    std::thread([] { amprt::releaseScratch(); }).join(); // a third thread's: nothing of ours
    otherCapacity = c.capacity();
  });
  other.join();
  EXPECT_GE(otherCapacity, 1000u);
  {
    amprt::ScratchVec<int> gone;
    gone.resize(10);
  } // unregistered: releasing must not touch it
  amprt::releaseScratch();
  EXPECT_EQ(a.capacity(), 0u);
  EXPECT_EQ(b.capacity(), 0u);
  a.resize(16); // usable again
  EXPECT_EQ(a.size(), 16u);
}
