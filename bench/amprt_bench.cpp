//===- amprt_bench.cpp - runtime kernel throughput ------------------------===//
//
//   build/bin/amprt-bench
//
// GFLOP/s of amprt_gemm in f32, bf16 and f16 (f32 accumulation) at a few
// sizes; nanoseconds per element of the transformer's element-wise ops
// (GELU, its gradient, ReLU, its gradient, add, a bias gradient) in f32, bf16
// and f16, with each low type's time over f32's (<= 1: the low type is at
// least as fast per element); a language model's loss (softmax cross entropy
// over [1024, 50257] logits, forward and gradient, f32 and bf16 logits);
// batch norm in training (forward, recomputing gradient) and layer norm per
// element, f32 and bf16 activations; depthwise convolutions' three passes
// (ms a call, f32 and bf16); and GB/s of
// amprt_unscale_and_check against memcpy of the same bytes (read +
// write), in one run. Best of several repetitions.
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

namespace {

double seconds(const std::function<void()> &f, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

} // namespace

int main() {
  std::printf("CPU features: %s\n\n", amprt_cpu_features_string());
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::printf("%-6s %6s %12s\n", "type", "n", "GFLOP/s");
  for (int64_t n : {256, 512, 1024}) {
    std::vector<float> a(n * n), b(n * n);
    for (auto &v : a)
      v = nd(rng);
    for (auto &v : b)
      v = nd(rng);
    for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16, AMPRT_F16}) {
      size_t es = amprt_dtype_size(dt);
      std::vector<unsigned char> ab(n * n * es), bb(n * n * es), yb(n * n * es);
      amprt_convert(a.data(), AMPRT_F32, ab.data(), dt, n * n);
      amprt_convert(b.data(), AMPRT_F32, bb.data(), dt, n * n);
      int64_t shape[2] = {n, n};
      amprt_tensor ta = amprt_tensor_make(ab.data(), dt, 2, shape);
      amprt_tensor tb = amprt_tensor_make(bb.data(), dt, 2, shape);
      amprt_tensor ty = amprt_tensor_make(yb.data(), dt, 2, shape);
      amprt_status st = AMPRT_OK;
      double t = seconds([&] { st = amprt_gemm(nullptr, &ta, &tb, nullptr, 1, 0, 0, 0, &ty); },
                         n >= 1024 ? 3 : 10);
      if (st != AMPRT_OK) {
        std::printf("%s: %s\n", amprt_dtype_name(dt), amprt_last_error());
        return 1;
      }
      std::printf("%-6s %6lld %12.1f\n", amprt_dtype_name(dt), (long long)n,
                  2.0 * n * n * n / t * 1e-9);
    }
  }
  std::printf("\n");
  // Element-wise ops on an MLP activation's size (128 tokens x 3072).
  {
    const int64_t n = 128 * 3072;
    std::vector<float> x(n), d(n);
    for (auto &v : x)
      v = nd(rng);
    for (auto &v : d)
      v = nd(rng);
    std::printf("%-10s %10s %10s %10s %12s %12s\n", "op (ns/el)", "f32", "bf16", "f16",
                "bf16 / f32", "f16 / f32");
    const char *names[] = {"gelu", "gelu grad", "relu", "relu grad", "add", "bias grad"};
    for (int op = 0; op < 6; ++op) {
      double ns[3];
      int k = 0;
      for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16, AMPRT_F16}) {
        size_t es = amprt_dtype_size(dt);
        std::vector<unsigned char> xb(n * es), db(n * es), yb(n * es);
        amprt_convert(x.data(), AMPRT_F32, xb.data(), dt, n);
        amprt_convert(d.data(), AMPRT_F32, db.data(), dt, n);
        int64_t shape[1] = {n};
        amprt_tensor tx = amprt_tensor_make(xb.data(), dt, 1, shape);
        amprt_tensor td = amprt_tensor_make(db.data(), dt, 1, shape);
        amprt_tensor ty = amprt_tensor_make(yb.data(), dt, 1, shape);
        // The bias gradient: dy [128, 3072] summed over the rows into an
        // f32 [1, 3072] (f32-accumulators).
        int64_t rows[2] = {128, 3072}, cols[2] = {1, 3072};
        std::vector<float> db32(3072);
        amprt_tensor t2 = amprt_tensor_make(db.data(), dt, 2, rows);
        amprt_tensor tb = amprt_tensor_make(db32.data(), AMPRT_F32, 2, cols);
        const int32_t axis0[1] = {0};
        amprt_status st = AMPRT_OK;
        double t = seconds(
            [&] {
              st = op == 0   ? amprt_unary(nullptr, AMPRT_UNARY_GELU, 0, &tx, &ty)
                   : op == 1 ? amprt_unary_grad(nullptr, AMPRT_UNARY_GELU, 0, &tx, &td, &ty)
                   : op == 2 ? amprt_unary(nullptr, AMPRT_UNARY_RELU, 0, &tx, &ty)
                   : op == 3 ? amprt_unary_grad(nullptr, AMPRT_UNARY_RELU, 0, &tx, &td, &ty)
                   : op == 4 ? amprt_binary(nullptr, AMPRT_BINARY_ADD, &tx, &td, &ty)
                             : amprt_reduce(nullptr, AMPRT_REDUCE_SUM, &t2, axis0, 1, &tb);
            },
            20);
        if (st != AMPRT_OK) {
          std::printf("%s %s: %s\n", names[op], amprt_dtype_name(dt), amprt_last_error());
          return 1;
        }
        ns[k++] = t / n * 1e9;
      }
      std::printf("%-10s %10.3f %10.3f %10.3f %12.2f %12.2f\n", names[op], ns[0], ns[1], ns[2],
                  ns[1] / ns[0], ns[2] / ns[0]);
    }
    std::printf("\n");
  }
  // A language model's loss: [tokens, vocabulary] logits, f32 log-probs
  // kept for the gradient, the gradient in f32.
  {
    const int64_t n = 1024, c = 50257;
    std::vector<float> s32(n * c), lp(n * c), ds(n * c);
    std::vector<int64_t> labels(n);
    for (auto &v : s32)
      v = 3.0f * nd(rng);
    for (int64_t i = 0; i < n; ++i)
      labels[i] = (int64_t)(rng() % (uint64_t)c);
    std::vector<uint16_t> s16(n * c);
    amprt_convert(s32.data(), AMPRT_F32, s16.data(), AMPRT_BF16, (size_t)(n * c));
    int64_t sh[2] = {n, c}, ls[1] = {n};
    float loss = 0.0f, dl = 1.0f;
    amprt_tensor tl = amprt_tensor_make(labels.data(), AMPRT_I64, 1, ls);
    amprt_tensor tlp = amprt_tensor_make(lp.data(), AMPRT_F32, 2, sh);
    amprt_tensor tds = amprt_tensor_make(ds.data(), AMPRT_F32, 2, sh);
    amprt_tensor tloss = amprt_tensor_make(&loss, AMPRT_F32, 0, nullptr);
    amprt_tensor tdl = amprt_tensor_make(&dl, AMPRT_F32, 0, nullptr);
    for (amprt_dtype dt : {AMPRT_F32, AMPRT_BF16}) {
      amprt_tensor ts =
          amprt_tensor_make(dt == AMPRT_F32 ? (void *)s32.data() : (void *)s16.data(), dt, 2, sh);
      amprt_status st = AMPRT_OK;
      double fwd = seconds(
          [&] {
            st = amprt_softmax_cross_entropy(nullptr, &ts, &tl, nullptr, AMPRT_REDUCTION_MEAN, 0, 0,
                                             &tloss, &tlp);
          },
          3);
      double grad = seconds(
          [&] {
            st = st ? st
                    : amprt_softmax_cross_entropy_grad(nullptr, &tlp, &tl, nullptr,
                                                       AMPRT_REDUCTION_MEAN, 0, 0, &tdl, &tds);
          },
          3);
      if (st != AMPRT_OK) {
        std::printf("cross entropy %s: %s\n", amprt_dtype_name(dt), amprt_last_error());
        return 1;
      }
      std::printf("cross entropy [%lld x %lld] %-5s logits: forward %7.1f ms, gradient %7.1f ms\n",
                  (long long)n, (long long)c, amprt_dtype_name(dt), fwd * 1e3, grad * 1e3);
    }
    std::printf("\n");
  }
  // Batch norm in training (the forward with its statistics, the gradient
  // recomputing them): a late layer's short planes and longer ones, f32 and
  // bf16 activations (f32 statistics), nanoseconds per element.
  {
    std::printf("%-26s %10s %10s %10s %10s\n", "batch norm (ns/el)", "fwd f32", "fwd bf16",
                "grad f32", "grad bf16");
    for (std::vector<int64_t> shape : {std::vector<int64_t>{8, 512, 2, 2},
                                       {8, 128, 4, 4},
                                       {8, 256, 8, 8},
                                       {8, 128, 16, 16},
                                       {32, 256, 56, 56}}) {
      int64_t c = shape[1], n = 1;
      for (int64_t d : shape)
        n *= d;
      std::vector<float> x32(n), dy32(n), y(n), dx(n), g(c, 1.0f), b(c, 0.0f), rm(c, 0.0f),
          rv(c, 1.0f), nm(c), nv(c), dg(c), db(c);
      for (int64_t i = 0; i < n; ++i) {
        x32[i] = 1.0f + nd(rng);
        dy32[i] = nd(rng);
      }
      std::vector<uint16_t> x16(n), dy16(n), y16(n), dx16(n);
      amprt_convert(x32.data(), AMPRT_F32, x16.data(), AMPRT_BF16, (size_t)n);
      amprt_convert(dy32.data(), AMPRT_F32, dy16.data(), AMPRT_BF16, (size_t)n);
      int64_t cs[1] = {c};
      auto ct = [&](std::vector<float> &v) {
        return amprt_tensor_make(v.data(), AMPRT_F32, 1, cs);
      };
      amprt_tensor tg = ct(g), tb = ct(b), trm = ct(rm), trv = ct(rv), tnm = ct(nm), tnv = ct(nv),
                   tdg = ct(dg), tdb = ct(db);
      double ns[2][2];
      for (int k = 0; k < 2; ++k) {
        amprt_dtype dt = k ? AMPRT_BF16 : AMPRT_F32;
        auto t = [&](void *p) {
          return amprt_tensor_make(p, dt, (int32_t)shape.size(), shape.data());
        };
        amprt_tensor tx = t(k ? (void *)x16.data() : x32.data()),
                     ty = t(k ? (void *)y16.data() : y.data()),
                     tdy = t(k ? (void *)dy16.data() : dy32.data()),
                     tdx = t(k ? (void *)dx16.data() : dx.data());
        amprt_status st = AMPRT_OK;
        int reps = n > (1 << 22) ? 3 : 30;
        double fwd = seconds(
            [&] {
              st = st ? st
                      : amprt_batch_norm(nullptr, &tx, &tg, &tb, &trm, &trv, 1e-5f, 0.9f, 1, &ty,
                                         &tnm, &tnv, nullptr, nullptr);
            },
            reps);
        double grad = seconds(
            [&] {
              st = st ? st
                      : amprt_batch_norm_grad_recompute(nullptr, &tx, &tg, &tdy, 1e-5f, &tdx, &tdg,
                                                        &tdb);
            },
            reps);
        if (st != AMPRT_OK) {
          std::printf("batch norm %s: %s\n", amprt_dtype_name(dt), amprt_last_error());
          return 1;
        }
        ns[k][0] = fwd * 1e9 / (double)n;
        ns[k][1] = grad * 1e9 / (double)n;
      }
      char name[64];
      std::snprintf(name, sizeof name, "[%lld x %lld x %lld x %lld]", (long long)shape[0],
                    (long long)shape[1], (long long)shape[2], (long long)shape[3]);
      std::printf("%-26s %10.3f %10.3f %10.3f %10.3f\n", name, ns[0][0], ns[1][0], ns[0][1],
                  ns[1][1]);
    }
    std::printf("\n");
  }
  // Layer norm over the last axis (the transformer's), forward with its
  // statistics and gradient, f32 and bf16 activations, ns per element.
  {
    std::printf("%-26s %10s %10s %10s %10s\n", "layer norm (ns/el)", "fwd f32", "fwd bf16",
                "grad f32", "grad bf16");
    for (std::vector<int64_t> shape : {std::vector<int64_t>{128, 64}, {1024, 768}}) {
      int64_t rows = shape[0], cols = shape[1], n = rows * cols;
      std::vector<float> x32(n), dy32(n), y(n), dx(n), g(cols), b(cols), m(rows), s(rows), dg(cols),
          db(cols);
      for (int64_t i = 0; i < n; ++i) {
        x32[i] = nd(rng);
        dy32[i] = nd(rng);
      }
      for (int64_t c = 0; c < cols; ++c) {
        g[c] = 1.0f + 0.1f * nd(rng);
        b[c] = 0.1f * nd(rng);
      }
      std::vector<uint16_t> x16(n), dy16(n), y16(n), dx16(n);
      amprt_convert(x32.data(), AMPRT_F32, x16.data(), AMPRT_BF16, (size_t)n);
      amprt_convert(dy32.data(), AMPRT_F32, dy16.data(), AMPRT_BF16, (size_t)n);
      int64_t cs[1] = {cols}, rs[1] = {rows};
      amprt_tensor tg = amprt_tensor_make(g.data(), AMPRT_F32, 1, cs),
                   tb = amprt_tensor_make(b.data(), AMPRT_F32, 1, cs),
                   tm = amprt_tensor_make(m.data(), AMPRT_F32, 1, rs),
                   ts = amprt_tensor_make(s.data(), AMPRT_F32, 1, rs),
                   tdg = amprt_tensor_make(dg.data(), AMPRT_F32, 1, cs),
                   tdb = amprt_tensor_make(db.data(), AMPRT_F32, 1, cs);
      double ns[2][2];
      for (int k = 0; k < 2; ++k) {
        amprt_dtype dt = k ? AMPRT_BF16 : AMPRT_F32;
        auto t = [&](void *p) { return amprt_tensor_make(p, dt, 2, shape.data()); };
        amprt_tensor tx = t(k ? (void *)x16.data() : x32.data()),
                     ty = t(k ? (void *)y16.data() : y.data()),
                     tdy = t(k ? (void *)dy16.data() : dy32.data()),
                     tdx = t(k ? (void *)dx16.data() : dx.data());
        amprt_status st = AMPRT_OK;
        double fwd = seconds(
            [&] {
              st = st ? st : amprt_layer_norm(nullptr, &tx, &tg, &tb, 1, 1e-5f, &ty, &tm, &ts);
            },
            30);
        double grad = seconds(
            [&] {
              st = st ? st
                      : amprt_layer_norm_grad(nullptr, &tx, &tg, &tm, &ts, &tdy, 1, &tdx, &tdg,
                                              &tdb);
            },
            30);
        if (st != AMPRT_OK) {
          std::printf("layer norm %s: %s\n", amprt_dtype_name(dt), amprt_last_error());
          return 1;
        }
        ns[k][0] = fwd * 1e9 / (double)n;
        ns[k][1] = grad * 1e9 / (double)n;
      }
      char name[64];
      std::snprintf(name, sizeof name, "[%lld x %lld]", (long long)rows, (long long)cols);
      std::printf("%-26s %10.3f %10.3f %10.3f %10.3f\n", name, ns[0][0], ns[1][0], ns[0][1],
                  ns[1][1]);
    }
    std::printf("\n");
  }
  // Depthwise convolutions (ConvNeXt's 7 x 7 on its four stages' maps,
  // MobileNet's 3 x 3): milliseconds a call of each pass with the kernels
  // the per-shape choice takes (AMPRT_TUNE=debug prints oneDNN's and the
  // direct kernel's times for each).
  {
    std::printf("%-30s %9s %9s %9s %9s %9s %9s\n", "depthwise (ms)", "fwd f32", "fwd bf16",
                "dx f32", "dx bf16", "dw f32", "dw bf16");
    for (std::vector<int64_t> sh : {std::vector<int64_t>{8, 96, 16, 16, 7},
                                    {8, 192, 8, 8, 7},
                                    {8, 384, 4, 4, 7},
                                    {8, 768, 2, 2, 7},
                                    {8, 144, 16, 16, 3}}) {
      const int64_t n = sh[0], c = sh[1], h = sh[2], w = sh[3], k = sh[4];
      int64_t xs[4] = {n, c, h, w}, ws[4] = {c, 1, k, k}, bs[1] = {c};
      const int64_t nx = n * c * h * w, nw = c * k * k;
      std::vector<float> x32(nx), w32(nw), dy32(nx), b(c), y32(nx), dx32(nx), dw(nw);
      for (auto *v : {&x32, &w32, &dy32, &b})
        for (float &e : *v)
          e = nd(rng);
      std::vector<uint16_t> x16(nx), w16(nw), dy16(nx), y16(nx), dx16(nx);
      amprt_convert(x32.data(), AMPRT_F32, x16.data(), AMPRT_BF16, (size_t)nx);
      amprt_convert(w32.data(), AMPRT_F32, w16.data(), AMPRT_BF16, (size_t)nw);
      amprt_convert(dy32.data(), AMPRT_F32, dy16.data(), AMPRT_BF16, (size_t)nx);
      amprt_conv_params p{};
      p.spatial = 2;
      p.group = c;
      for (int i = 0; i < 2; ++i) {
        p.strides[i] = p.dilations[i] = 1;
        p.pads_begin[i] = p.pads_end[i] = k / 2;
      }
      amprt_tensor tb = amprt_tensor_make(b.data(), AMPRT_F32, 1, bs),
                   tdw = amprt_tensor_make(dw.data(), AMPRT_F32, 4, ws);
      double ms[2][3];
      for (int lo = 0; lo < 2; ++lo) {
        amprt_dtype dt = lo ? AMPRT_BF16 : AMPRT_F32;
        auto t = [&](void *d, int64_t *shape) { return amprt_tensor_make(d, dt, 4, shape); };
        amprt_tensor tx = t(lo ? (void *)x16.data() : x32.data(), xs),
                     tw = t(lo ? (void *)w16.data() : w32.data(), ws),
                     tdy = t(lo ? (void *)dy16.data() : dy32.data(), xs),
                     ty = t(lo ? (void *)y16.data() : y32.data(), xs),
                     tdx = t(lo ? (void *)dx16.data() : dx32.data(), xs);
        amprt_status st = AMPRT_OK;
        auto time = [&](const std::function<amprt_status()> &f) {
          return seconds([&] { st = st ? st : f(); }, 20) * 1e3;
        };
        ms[lo][0] = time([&] { return amprt_conv(nullptr, &tx, &tw, &tb, &p, &ty); });
        ms[lo][1] = time([&] {
          return amprt_conv_backward(nullptr, &tx, &tw, &tdy, &p, &tdx, nullptr, nullptr);
        });
        ms[lo][2] = time([&] {
          return amprt_conv_backward(nullptr, &tx, &tw, &tdy, &p, nullptr, &tdw, nullptr);
        });
        if (st != AMPRT_OK) {
          std::printf("depthwise %s: %s\n", amprt_dtype_name(dt), amprt_last_error());
          return 1;
        }
      }
      char name[64];
      std::snprintf(name, sizeof name, "[%lld x %lld x %lld x %lld] %lldx%lld", (long long)n,
                    (long long)c, (long long)h, (long long)w, (long long)k, (long long)k);
      std::printf("%-30s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", name, ms[0][0], ms[1][0], ms[0][1],
                  ms[1][1], ms[0][2], ms[1][2]);
    }
    std::printf("\n");
  }
  const int64_t count = 16 << 20; // 64 MiB of f32 gradients
  std::vector<float> g(count), out(count), dst(count);
  for (int64_t i = 0; i < count; ++i)
    g[i] = (float)(i % 1000) * 0.25f + 1.0f;
  int64_t shape[1] = {count};
  amprt_tensor tg = amprt_tensor_make(g.data(), AMPRT_F32, 1, shape);
  amprt_tensor to = amprt_tensor_make(out.data(), AMPRT_F32, 1, shape);
  float scale = 65536.0f, found = 0.0f;
  double bytes = 2.0 * count * sizeof(float); // read + write
  double tu = seconds([&] { amprt_unscale_and_check(nullptr, &tg, &to, 1, &scale, &found); }, 10);
  double tm = seconds([&] { std::memcpy(dst.data(), g.data(), count * sizeof(float)); }, 10);
  std::printf("%-28s %8.1f GB/s\n", "unscale_and_check (f32)", bytes / tu * 1e-9);
  std::printf("%-28s %8.1f GB/s\n", "memcpy of the same bytes", bytes / tm * 1e-9);
  std::printf("%-28s %8.2f\n", "ratio (unscale / memcpy)", tm / tu);
  return found != 0.0f;
}
