//===- replay_products.cpp - recorded matrix products, one per shape class --===//
//
// amprt-exec-replay --record-products FOLDER: runs on the CPU, recorded
// (AMPRT_EXEC_RECORD=FOLDER), one gemm or matmul call per shape class the
// CUDA backend treats apart, so that replaying FOLDER on a device (or the
// emulated one) checks each class against the CPU runtime:
//   - gemm: operands f32 / f16 / bf16 x outputs of their type, f32 and (for
//     the 2-byte types) the other 2-byte type (cuBLASLt does not write it:
//     the f32 scratch + cast path); both transposes each; odd (5 x 7 x 9)
//     and aligned (16 x 24 x 32) sizes; no c, a bias row (cuBLASLt's
//     epilogue), a full c with beta (scratch + add); ReLU (the epilogue and
//     its probe); k = 0; views at odd element offsets (2-byte aligned
//     pointers, bias row included);
//   - matmul: a stack against one matrix (folded into one product), strided
//     batches, a broadcast batch that is not affine (a call per batch),
//     transposed views of dense stacks (cuBLASLt's transposes) against a
//     stride-0 batch, odd offsets; outputs of the operands' type and f32.
// Inputs are fresh random normals (never zeros).
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct T {
  int32_t dtype;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0; // elements
  std::vector<unsigned char> bytes;
};

int64_t extent(const T &t) {
  int64_t e = 1;
  for (size_t d = 0; d < t.shape.size(); ++d)
    e += (t.shape[d] - 1) * t.strides[d];
  return t.offset + e;
}

/// A tensor of `shape` (row-major unless strides are given) at element
/// offset `off` of its buffer, filled with random normals.
T make(std::mt19937_64 &rng, int32_t dtype, std::vector<int64_t> shape, int64_t off = 0,
       std::vector<int64_t> strides = {}) {
  T t{dtype, shape, strides, off, {}};
  if (t.strides.empty()) {
    t.strides.assign(shape.size(), 1);
    for (int d = (int)shape.size() - 2; d >= 0; --d)
      t.strides[d] = t.strides[d + 1] * shape[d + 1];
  }
  bool empty = false;
  for (int64_t s : shape)
    empty |= s == 0;
  int64_t n = empty ? off + 1 : extent(t);
  size_t es = amprt_dtype_size((amprt_dtype)dtype);
  t.bytes.assign((size_t)n * es, 0);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < n; ++i) {
    float v = nd(rng);
    if (dtype == AMPRT_F32)
      std::memcpy(&t.bytes[(size_t)i * 4], &v, 4);
    else {
      uint16_t h = dtype == AMPRT_F16 ? amprt_f32_to_f16(v) : amprt_f32_to_bf16(v);
      std::memcpy(&t.bytes[(size_t)i * 2], &h, 2);
    }
  }
  return t;
}

void push(std::vector<int64_t> &d, const T &t) {
  d.push_back(t.dtype);
  d.push_back((int64_t)t.shape.size());
  d.push_back(t.offset);
  for (int64_t s : t.shape)
    d.push_back(s);
  for (int64_t s : t.strides)
    d.push_back(s);
}

int64_t bits(double v) {
  int64_t b;
  std::memcpy(&b, &v, 8);
  return b;
}

bool call(int64_t opcode, std::vector<T *> ts, std::vector<int64_t> attrs, const char *what) {
  std::vector<int64_t> d = {AMPRT_EXEC_VERSION, opcode, (int64_t)ts.size(), (int64_t)attrs.size()};
  std::vector<void *> bufs;
  for (T *t : ts) {
    push(d, *t);
    bufs.push_back(t->bytes.data());
  }
  d.insert(d.end(), attrs.begin(), attrs.end());
  if (amprt_exec(nullptr, d.data(), bufs.data()) != AMPRT_OK) {
    std::fprintf(stderr, "amprt-exec-replay --record-products: %s: %s\n", what, amprt_last_error());
    return false;
  }
  return true;
}

} // namespace

/// Records the classes into `folder`; the number of calls, or -1.
int64_t recordProducts(const std::string &folder) {
  if (setenv("AMPRT_EXEC_RECORD", folder.c_str(), 1) != 0)
    return -1;
  std::mt19937_64 rng(std::random_device{}());
  int64_t calls = 0;
  bool ok = true;
  auto other16 = [](int32_t t) { return t == AMPRT_F16 ? AMPRT_BF16 : AMPRT_F16; };
  for (int32_t ab : {AMPRT_F32, AMPRT_F16, AMPRT_BF16}) {
    std::vector<int32_t> outs = {ab};
    if (ab != AMPRT_F32)
      outs = {ab, AMPRT_F32, other16(ab)};
    for (int32_t yt : outs)
      for (auto [m, n, k] : {std::array<int64_t, 3>{5, 7, 9}, std::array<int64_t, 3>{16, 24, 32}})
        for (int ta = 0; ta < 2; ++ta)
          for (int tb = 0; tb < 2; ++tb)
            for (int cKind = 0; cKind < 3; ++cKind)
              for (int relu = 0; relu < 2; ++relu) {
                if (relu && cKind == 2)
                  continue;
                T a = make(rng, ab, ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k});
                T b = make(rng, ab, tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n});
                T y = make(rng, yt, {m, n});
                T c = cKind == 1 ? make(rng, yt, {n}) : make(rng, yt, {m, n});
                double alpha = cKind == 2 ? 1.5 : 1.0, beta = cKind == 2 ? 0.5 : 1.0;
                std::vector<T *> ts = {&a, &b};
                if (cKind)
                  ts.push_back(&c);
                ts.push_back(&y);
                ok = ok && call(AMPRT_OP_GEMM, ts,
                                {bits(alpha), bits(cKind ? beta : 0.0), ta, tb, cKind ? 1 : 0,
                                 relu ? AMPRT_GEMM_RELU : 0},
                                "gemm");
                ++calls;
              }
    // k = 0 (with and without a bias row), and views at odd element offsets.
    for (int withC = 0; withC < 2; ++withC) {
      T a = make(rng, ab, {4, 0}), b = make(rng, ab, {0, 6}), c = make(rng, ab, {6}),
        y = make(rng, ab, {4, 6});
      std::vector<T *> ts = {&a, &b};
      if (withC)
        ts.push_back(&c);
      ts.push_back(&y);
      ok = ok && call(AMPRT_OP_GEMM, ts, {bits(1.0), bits(withC ? 1.0 : 0.0), 0, 0, withC, 0},
                      "gemm k = 0");
      ++calls;
    }
    for (auto [m, n, k] : {std::array<int64_t, 3>{5, 7, 9}, std::array<int64_t, 3>{16, 24, 32}})
      for (int relu = 0; relu < 2; ++relu) {
        T a = make(rng, ab, {m, k}, 1), b = make(rng, ab, {k, n}, 3), c = make(rng, ab, {n}, 1),
          y = make(rng, ab, {m, n}, 1);
        ok = ok && call(AMPRT_OP_GEMM, {&a, &b, &c, &y},
                        {bits(1.0), bits(1.0), 0, 0, 1, relu ? AMPRT_GEMM_RELU : 0},
                        "gemm at odd offsets");
        ++calls;
      }
    // matmul's batch forms.
    std::vector<int32_t> matmulOuts = {ab};
    if (ab != AMPRT_F32)
      matmulOuts.push_back(AMPRT_F32);
    for (int32_t yt : matmulOuts) {
      const int64_t m = 5, n = 6, k = 7;
      struct Case {
        std::vector<int64_t> as, bs;
        bool transA, transB;
        int64_t offA;
        const char *what;
      };
      for (const Case &cs : {Case{{2, 3, m, k}, {k, n}, false, false, 0, "a stack x one matrix"},
                             Case{{4, m, k}, {4, k, n}, false, false, 0, "strided batches"},
                             Case{{2, 3, m, k}, {3, k, n}, false, false, 0, "broadcast batches"},
                             Case{{4, m, k}, {1, k, n}, true, false, 0, "a^T views x stride 0"},
                             Case{{4, m, k}, {4, k, n}, false, true, 0, "b^T views"},
                             Case{{3, m, k}, {3, k, n}, false, false, 1, "an odd offset"}}) {
        auto view = [&](const std::vector<int64_t> &s, bool trans, int64_t off) {
          if (!trans)
            return make(rng, ab, s, off);
          // A transposed view of a dense stack [.., cols, rows].
          std::vector<int64_t> dense = s;
          std::swap(dense[dense.size() - 1], dense[dense.size() - 2]);
          T t = make(rng, ab, dense, off);
          t.shape = s;
          std::swap(t.strides[t.strides.size() - 1], t.strides[t.strides.size() - 2]);
          return t;
        };
        T a = view(cs.as, cs.transA, cs.offA), b = view(cs.bs, cs.transB, 0);
        std::vector<int64_t> ys;
        size_t ra = cs.as.size(), rb = cs.bs.size(), r = std::max(ra, rb);
        for (size_t d = 0; d + 2 < r; ++d) {
          int64_t da = d + ra >= r ? cs.as[d + ra - r] : 1,
                  db = d + rb >= r ? cs.bs[d + rb - r] : 1;
          ys.push_back(std::max(da, db));
        }
        ys.push_back(m);
        ys.push_back(n);
        T y = make(rng, yt, ys);
        ok = ok && call(AMPRT_OP_MATMUL, {&a, &b, &y}, {}, cs.what);
        ++calls;
      }
    }
  }
  return ok ? calls : -1;
}
