//===- dnnl.cpp - matrix products and convolutions on oneDNN ------------===//
//
// oneDNN computes op(A) @ op(B) (and convolutions, and their gradients)
// into an f32 buffer: f32 inputs as they are, bf16 inputs as bf16 (AMX /
// AVX512-BF16 where the CPU has them), f16 inputs widened to f32 first
// (exact; Debian's oneDNN 2.6 has no f16 matmul). Every path accumulates in
// f32. The epilogue (alpha, beta * C, bias) runs in f32 and rounds once
// into the output type; a bf16 output of bf16 kernels is rounded by oneDNN
// itself (the primitive, or the reorder out of its layout: to nearest even,
// once), without an f32 copy and a second pass.
//
// oneDNN's C++ API throws dnnl::error; this file is built with exceptions
// and turns every one into an AMPRT status.
//
//===----------------------------------------------------------------------===//

#include "exec_decode.h"
#include "internal.h"

#include <optional>

#include <oneapi/dnnl/dnnl.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

using namespace amprt;

namespace {

dnnl::engine &cpuEngine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

/// The f32 copies' buffers, kept per thread for the next call: a large
/// operand (a language model's [tokens, 50k] logits gradient) would
/// otherwise cost an allocation, its page faults and a zero fill per call
/// on top of the conversion.
struct WidenBuf {
  std::unique_ptr<float[]> p;
  size_t cap = 0;
};
thread_local std::vector<WidenBuf> widenPool;

/// A float buffer holding `t` (contiguous) as f32 or bf16 for oneDNN:
/// f32 / bf16 contiguous data is used in place, f16 is widened, and so is
/// bf16 where oneDNN has no bf16 kernels (a CPU without AVX-512: widening
/// is exact, the products are then the f32 kernels' on the same values).
struct Operand {
  const void *ptr = nullptr;
  dnnl::memory::data_type dt = dnnl::memory::data_type::f32;
  WidenBuf buf; // the f32 copy, back to the pool when the operand goes

  Operand() = default;
  Operand(Operand &&) = default;
  Operand &operator=(Operand &&) = default;
  ~Operand() {
    if (buf.p)
      widenPool.push_back(std::move(buf));
  }
  /// n floats of this operand's own (uninitialised).
  float *widen(size_t n) {
    if (!widenPool.empty()) { // the largest pooled buffer
      auto it =
          std::max_element(widenPool.begin(), widenPool.end(),
                           [](const WidenBuf &a, const WidenBuf &b) { return a.cap < b.cap; });
      buf = std::move(*it);
      widenPool.erase(it);
    }
    if (buf.cap < n) {
      buf.p.reset(new float[n]);
      buf.cap = n;
    }
    return buf.p.get();
  }
};

bool bf16Kernels();

Operand operandOf(const amprt_tensor *t, bool widenBf16 = false) {
  Operand o;
  if ((t->dtype == AMPRT_BF16 && (widenBf16 || !bf16Kernels())) || t->dtype == AMPRT_F16) {
    size_t n = (size_t)amprt_tensor_numel(t);
    float *w = o.widen(n);
    convertPar(t->data, t->dtype, w, AMPRT_F32, n);
    o.ptr = w;
  } else if (t->dtype == AMPRT_BF16) {
    o.ptr = t->data;
    o.dt = dnnl::memory::data_type::bf16;
  } else {
    o.ptr = t->data;
  }
  return o;
}

/// Whether oneDNN has bf16 kernels here (probed once: a build or CPU
/// without them keeps f32 results and our conversion); bf16Operands: and
/// a and b are bf16.
bool bf16Kernels() {
  static const bool supported = [] {
    try {
      using dt = dnnl::memory::data_type;
      dnnl::memory::desc x({8, 8}, dt::bf16, {8, 1}), y({8, 8}, dt::bf16, {8, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x, x, y), cpuEngine());
      return true;
    } catch (const dnnl::error &) {
      return false;
    }
  }();
  return supported;
}

/// The CPU's instruction set as oneDNN uses it, for the tuning keys (a
/// choice made on one CPU is not taken on another).
const char *isaTag() {
  switch ((int)dnnl_get_effective_cpu_isa()) {
  case dnnl_cpu_isa_avx512_core_amx:
    return "amx";
  case dnnl_cpu_isa_avx512_core_bf16:
    return "avx512_bf16";
  case dnnl_cpu_isa_avx512_core_vnni:
    return "avx512_vnni";
  case dnnl_cpu_isa_avx512_core:
    return "avx512";
  case dnnl_cpu_isa_avx2_vnni:
    return "avx2_vnni";
  case dnnl_cpu_isa_avx2:
    return "avx2";
  default:
    return "cpu";
  }
}

bool bf16Operands(const amprt_tensor *a, const amprt_tensor *b) {
  return bf16Kernels() && a->dtype == AMPRT_BF16 && b->dtype == AMPRT_BF16;
}

/// The largest of the bits without the sign: for floats, |v| orders as
/// these bits, and inf / NaN have all exponent bits set (an integer max,
/// which vectorises).
template <typename U> AMPRT_CLONES U maxAbsBits(const U *p, int64_t n, U signMask) {
  U m = 0;
  for (int64_t i = 0; i < n; ++i) {
    U a = p[i] & (U)~signMask;
    m = a > m ? a : m;
  }
  return m;
}

/// maxAbsBits over pieces on the threads (a maximum: the same whatever the
/// split).
template <typename U> U maxAbsBitsParallel(const U *p, int64_t n, U signMask) {
  U m = 0;
  parallelFor(n, (int64_t)1 << 16, 64, [&](int64_t b, int64_t e) {
    U part = maxAbsBits<U>(p + b, e - b, signMask);
#pragma omp critical(amprt_max_abs)
    m = std::max(m, part);
  });
  return m;
}

/// The largest |v| of a float tensor, +inf if any element is not finite.
double maxAbsOrInf(const amprt_tensor *t) {
  int64_t n = amprt_tensor_numel(t);
  if (t->dtype == AMPRT_F32) {
    uint32_t m =
        maxAbsBitsParallel<uint32_t>(static_cast<const uint32_t *>(t->data), n, 0x80000000u);
    if (m >= 0x7f800000u)
      return INFINITY;
    float f;
    std::memcpy(&f, &m, 4);
    return f;
  }
  uint16_t m = maxAbsBitsParallel<uint16_t>(static_cast<const uint16_t *>(t->data), n, 0x8000);
  uint16_t expMask = t->dtype == AMPRT_F16 ? 0x7c00 : 0x7f80;
  if ((m & expMask) == expMask)
    return INFINITY;
  return t->dtype == AMPRT_F16 ? amprt_f16_to_f32(m) : amprt_bf16_to_f32(m);
}

/// Whether max(conv / product, 0) may run as oneDNN's ReLU post-op, which
/// turns NaN into 0 where our ReLU keeps it: only where no NaN can arise,
/// i.e. finite inputs whose largest products cannot overflow a sum of k
/// terms plus the bias.
bool reluCannotMeetNaN(const amprt_tensor *x, const amprt_tensor *w, int64_t k, const float *bias,
                       int64_t nbias) {
  double mb = 0.0;
  for (int64_t i = 0; i < nbias; ++i) // a NaN bias makes mb NaN (the test fails)
    mb = !((double)std::fabs(bias[i]) <= mb) ? (double)std::fabs(bias[i]) : mb;
  return maxAbsOrInf(x) * maxAbsOrInf(w) * (double)k * 1.01 + mb * 1.01 < 3.0e38;
}

/// Products with sums of at most this many terms (and bf16 operands, an f32
/// result) may run on amxProduct: its tiles are packed for the whole sum,
/// made for the short sums of weight gradients.
constexpr int64_t kAmxMaxSum = 512;

/// acc[M, N] = op(A)[M, K] @ op(B)[K, N] with strides in elements.
struct GemmKey {
  int64_t m, n, k, lda0, lda1, ldb0, ldb1;
  int adt, bdt;
  int64_t batch = 1;    // > 1: `batch` dense [m,k] x [k,n] products, one primitive
  bool aShared = false; // with batch > 1: one a for every product (a pointwise
                        // convolution's weight)
  bool bias = false;    // an f32 [n] row added by the primitive (batch 1 only)
  bool relu = false;    // max(., 0) as a post-op (see reluCannotMeetNaN)
  bool bf16Out = false; // the f32 result rounded to bf16 by the primitive
  // oneDNN splits a primitive for the thread count it was made with:
  // amprt_threads_adapt changes that count.
  int threads = maxThreads();
  bool operator<(const GemmKey &o) const {
    return std::tie(m, n, k, lda0, lda1, ldb0, ldb1, adt, bdt, batch, aShared, bias, relu, bf16Out,
                    threads) < std::tie(o.m, o.n, o.k, o.lda0, o.lda1, o.ldb0, o.ldb1, o.adt, o.bdt,
                                        o.batch, o.aShared, o.bias, o.relu, o.bf16Out, o.threads);
  }
};

struct GemmPrim {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias;
  std::string impl; // oneDNN's implementation (AMPRT_PROFILE shows it)
};

/// The product into `out`: f32, or bf16 with key.bf16Out (the f32
/// accumulator plus bias and ReLU rounded once, to nearest even, as our
/// conversion does).
void gemmAcc(const GemmKey &key0, const void *a, const void *b, void *out,
             const float *bias = nullptr) {
  // A product of at most 2^20 multiply-adds runs on one thread: starting
  // the others costs more than they save (a transformer block of 8 x 16 x
  // 64, Intel Xeon with AMX, 2 threads: bf16 step 0.397 -> 0.365 ms, fp32
  // 0.433 -> 0.41 ms). The key says so: oneDNN splits a primitive for the
  // thread count it was made with.
  GemmKey key = key0;
  struct OneThread {
    int restore = 0;
    ~OneThread() {
#if defined(_OPENMP)
      if (restore)
        omp_set_num_threads(restore);
#endif
    }
  } one;
  if (key.threads > 1 &&
      (double)key.m * (double)key.n * (double)key.k * (double)key.batch <= (double)(1 << 20)) {
    key.threads = 1;
#if defined(_OPENMP)
    one.restore = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
  }
  static std::mutex mu;
  static std::map<GemmKey, GemmPrim> cache;
  GemmPrim *p;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it == cache.end()) {
      using dt = dnnl::memory::data_type;
      dnnl::memory::desc ad, bd, cd;
      dt odt = key.bf16Out ? dt::bf16 : dt::f32;
      if (key.batch > 1) {
        ad = key.aShared ? dnnl::memory::desc({1, key.m, key.k}, (dt)key.adt,
                                              {key.m * key.k, key.lda0, key.lda1})
                         : dnnl::memory::desc({key.batch, key.m, key.k}, (dt)key.adt,
                                              {key.m * key.k, key.lda0, key.lda1});
        bd = dnnl::memory::desc({key.batch, key.k, key.n}, (dt)key.bdt,
                                {key.k * key.n, key.ldb0, key.ldb1});
        cd = dnnl::memory::desc({key.batch, key.m, key.n}, odt, {key.m * key.n, key.n, 1});
      } else {
        ad = dnnl::memory::desc({key.m, key.k}, (dt)key.adt, {key.lda0, key.lda1});
        bd = dnnl::memory::desc({key.k, key.n}, (dt)key.bdt, {key.ldb0, key.ldb1});
        cd = dnnl::memory::desc({key.m, key.n}, odt, {key.n, 1});
      }
      dnnl::memory::desc biasd;
      if (key.bias)
        biasd = dnnl::memory::desc({1, key.n}, dt::f32, {key.n, 1});
      dnnl::matmul::desc d =
          key.bias ? dnnl::matmul::desc(ad, bd, biasd, cd) : dnnl::matmul::desc(ad, bd, cd);
      dnnl::primitive_attr pa;
      if (key.relu) {
        dnnl::post_ops po;
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        pa.set_post_ops(po);
      }
      dnnl::matmul::primitive_desc pd(d, pa, cpuEngine());
      it = cache.emplace(key, GemmPrim{dnnl::matmul(pd), ad, bd, cd, biasd, pd.impl_info_str()})
               .first;
    }
    p = &it->second;
  }
  thread_local dnnl::stream s(cpuEngine());
  // Memory objects and the argument map are made once per primitive and
  // thread; each call only points them at its buffers.
  struct Bound {
    dnnl::memory a, b, c, bias;
    std::unordered_map<int, dnnl::memory> args;
  };
  thread_local std::map<const GemmPrim *, Bound> bound;
  auto it = bound.find(p);
  if (it == bound.end()) {
    Bound nb{dnnl::memory(p->a, cpuEngine(), DNNL_MEMORY_NONE),
             dnnl::memory(p->b, cpuEngine(), DNNL_MEMORY_NONE),
             dnnl::memory(p->c, cpuEngine(), DNNL_MEMORY_NONE),
             key.bias ? dnnl::memory(p->bias, cpuEngine(), DNNL_MEMORY_NONE) : dnnl::memory(),
             {}};
    nb.args = {{DNNL_ARG_SRC, nb.a}, {DNNL_ARG_WEIGHTS, nb.b}, {DNNL_ARG_DST, nb.c}};
    if (key.bias)
      nb.args[DNNL_ARG_BIAS] = nb.bias;
    it = bound.emplace(p, std::move(nb)).first;
  }
  it->second.a.set_data_handle(const_cast<void *>(a));
  it->second.b.set_data_handle(const_cast<void *>(b));
  it->second.c.set_data_handle(out);
  if (key.bias)
    it->second.bias.set_data_handle(const_cast<float *>(bias));
  if (desc::profilingRequested())
    noteKernelImpl(p->impl.c_str());
  p->prim.execute(s, it->second.args);
  s.wait();
}

amprt_status checkFloatContig(const amprt_tensor *t, const char *what) {
  AMPRT_CHECK(check(t, what));
  if (!isFloat(t->dtype) || !amprt_tensor_is_contiguous(t))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: must be a contiguous f32 / f16 / bf16 tensor, got %s %s", what,
                amprt_dtype_name(t->dtype), shapeString(t).c_str());
  return AMPRT_OK;
}

/// Whether a product of bf16 a and b (key: their bf16 layout, f32 out) runs
/// on oneDNN's bf16 kernels (true) or its f32 ones on widened copies (the
/// same products, exact in f32, summed in f32 either way): timed per shape
/// (chooseKernel); the fixed rule is the bf16 kernels. `na` / `nb`: the
/// elements a and b hold.
amprt_status lowProduct(const amprt_context *ctx, const GemmKey &key, const amprt_tensor *a,
                        const amprt_tensor *b, const float *bias, bool *low, bool *amx = nullptr) {
  // amx: where the caller can take amxProduct (a plain f32 result, no
  // epilogue), it is a third candidate for short sums; *amx says whether
  // it won.
  const bool amxOffered = amx && key.batch == 1 && !key.bias && !key.relu && key.k <= kAmxMaxSum &&
                          amxProductAvailable();
  if (amx)
    *amx = false;
  *low = bf16Operands(a, b);
  if (!*low && a->dtype == AMPRT_BF16 && b->dtype == AMPRT_BF16 && tuningOn(ctx))
    noteNoBf16Kernels();
  if (!*low || !tuningOn(ctx))
    return AMPRT_OK;
  // The answers so far, per shape (formatting the key and looking it up
  // cost about 0.5 us a call: a tenth of a small product's time).
  thread_local std::map<std::pair<GemmKey, bool>, int> known; // (key, amx offered) -> choice
  thread_local uint64_t knownGeneration = 0;
  if (knownGeneration != tunerGeneration()) {
    known.clear();
    knownGeneration = tunerGeneration();
  }
  if (auto it = known.find({key, amxOffered}); it != known.end()) {
    *low = it->second != 1;
    if (amx)
      *amx = it->second == 2;
    return AMPRT_OK;
  }
  char k[256];
  std::snprintf(k, sizeof k,
                "matmul bf16 [%lld x %lld x %lld] a(%lld,%lld) b(%lld,%lld) batch %lld%s%s "
                "threads %d %s",
                (long long)key.m, (long long)key.k, (long long)key.n, (long long)key.lda0,
                (long long)key.lda1, (long long)key.ldb0, (long long)key.ldb1, (long long)key.batch,
                key.bias ? " bias" : "", key.relu ? " relu" : "", key.threads, isaTag());
  // The timed runs' output (allocated only when this shape is timed: a
  // buffer resized on every call would be cleared wherever it grows, a
  // weight gradient's megabytes a call).
  std::vector<float> out;
  int choice = 0;
  std::vector<const char *> names = {"bf16", "f32"};
  if (amxOffered)
    names.push_back("amx");
  AMPRT_CHECK(chooseKernel(
      ctx, k, names, 0,
      [&](int i) -> amprt_status {
        try {
          out.resize((size_t)(key.batch * key.m * key.n));
          GemmKey kk = key;
          kk.bf16Out = false;
          if (i == 2) {
            amxProduct(key.m, key.n, key.k, static_cast<const uint16_t *>(a->data), key.lda0,
                       key.lda1, static_cast<const uint16_t *>(b->data), key.ldb0, key.ldb1,
                       out.data(), key.n);
          } else if (i == 0) {
            gemmAcc(kk, a->data, b->data, out.data(), bias);
          } else {
            Operand oa = operandOf(a, true), ob = operandOf(b, true);
            kk.adt = kk.bdt = (int)dnnl::memory::data_type::f32;
            gemmAcc(kk, oa.ptr, ob.ptr, out.data(), bias);
          }
        } catch (const dnnl::error &e) {
          return fail(AMPRT_ERR_UNSUPPORTED, "oneDNN: %s", e.what());
        } catch (const std::bad_alloc &) {
          return fail(AMPRT_ERR_OUT_OF_MEMORY, "amprt_gemm: out of memory");
        }
        return AMPRT_OK;
      },
      &choice));
  *low = choice != 1;
  if (amx)
    *amx = choice == 2;
  known[{key, amxOffered}] = choice;
  return AMPRT_OK;
}

#define AMPRT_DNNL_TRY(kernel, ...)                                                                \
  try {                                                                                            \
    __VA_ARGS__                                                                                    \
  } catch (const dnnl::error &e) {                                                                 \
    return fail(AMPRT_ERR_UNSUPPORTED, "%s: oneDNN: %s", kernel, e.what());                        \
  } catch (const std::bad_alloc &) {                                                               \
    return fail(AMPRT_ERR_OUT_OF_MEMORY, "%s: out of memory", kernel);                             \
  }

} // namespace

extern "C" amprt_status amprt_gemm(amprt_context *ctx, const amprt_tensor *a, const amprt_tensor *b,
                                   const amprt_tensor *c, float alpha, float beta, int trans_a,
                                   int trans_b, amprt_tensor *y) {
  return amprt_gemm_ex(ctx, a, b, c, alpha, beta, trans_a, trans_b, 0, y);
}

extern "C" amprt_status amprt_gemm_ex(amprt_context *ctx, const amprt_tensor *a,
                                      const amprt_tensor *b, const amprt_tensor *c, float alpha,
                                      float beta, int trans_a, int trans_b, int32_t flags,
                                      amprt_tensor *y) {
  const char *k = "amprt_gemm";
  if (flags & ~AMPRT_GEMM_RELU)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: unknown flags %d", k, (int)flags);
  AMPRT_CHECK(checkFloatContig(a, "amprt_gemm: a"));
  AMPRT_CHECK(checkFloatContig(b, "amprt_gemm: b"));
  AMPRT_CHECK(checkFloatContig(y, "amprt_gemm: y"));
  if (a->rank != 2 || b->rank != 2 || y->rank != 2 || a->dtype != b->dtype)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: a %s and b %s must be 2-D of one type, y %s 2-D",
                k, shapeString(a).c_str(), shapeString(b).c_str(), shapeString(y).c_str());
  int64_t m = trans_a ? a->shape[1] : a->shape[0];
  int64_t kk = trans_a ? a->shape[0] : a->shape[1];
  int64_t kb = trans_b ? b->shape[1] : b->shape[0];
  int64_t n = trans_b ? b->shape[0] : b->shape[1];
  if (kk != kb || y->shape[0] != m || y->shape[1] != n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "%s: op(a) [%lld, %lld] @ op(b) [%lld, %lld] does not give y %s", k, (long long)m,
                (long long)kk, (long long)kb, (long long)n, shapeString(y).c_str());
  int64_t cs[1][AMPRT_MAX_RANK] = {{0}};
  if (c) {
    AMPRT_CHECK(check(c, "amprt_gemm: c"));
    AMPRT_CHECK(broadcastStrides(c, 2, y->shape, cs[0], "amprt_gemm: c"));
  }
  // A bias row with alpha = beta = 1 (f16 / bf16 ones widened: exact).
  bool fusedBias =
      c && alpha == 1.0f && beta == 1.0f && isFloat(c->dtype) && cs[0][0] == 0 && cs[0][1] == 1;
  const float *biasF32 = nullptr;
  thread_local std::vector<float> biasWide;
  if (fusedBias) {
    if (c->dtype == AMPRT_F32) {
      biasF32 = static_cast<const float *>(c->data);
    } else {
      biasWide.resize(n);
      convertPar(c->data, c->dtype, biasWide.data(), AMPRT_F32, (size_t)n);
      biasF32 = biasWide.data();
    }
  }
  // The ReLU inside the primitive when the whole epilogue runs there and no
  // NaN can arise; else the product, then our ReLU in place.
  bool relu = flags & AMPRT_GEMM_RELU;
  if (relu) {
    bool inPrimitive = (fusedBias || (!c && alpha == 1.0f)) && m && n && kk &&
                       reluCannotMeetNaN(a, b, kk, biasF32, fusedBias ? n : 0);
    if (!inPrimitive) {
      AMPRT_CHECK(amprt_gemm_ex(ctx, a, b, c, alpha, beta, trans_a, trans_b, 0, y));
      return amprt_unary(ctx, AMPRT_UNARY_RELU, 0.0f, y, y);
    }
  }
  bool useC = c && beta != 0.0f && !(fusedBias && kk != 0);
  // bf16 a and b: on the bf16 kernels or widened to f32, whichever is
  // faster for this shape.
  // The product's key for operand types adt / bdt.
  auto keyOf = [&](dnnl::memory::data_type adt, dnnl::memory::data_type bdt) {
    GemmKey key{m,
                n,
                kk,
                trans_a ? 1 : a->shape[1],
                trans_a ? a->shape[1] : 1,
                trans_b ? 1 : b->shape[1],
                trans_b ? b->shape[1] : 1,
                (int)adt,
                (int)bdt};
    key.bias = fusedBias;
    key.relu = relu;
    return key;
  };
  bool low = false, amx = false;
  // amxProduct can take a plain f32 y (alpha 1, nothing added, no ReLU).
  const bool plain = y->dtype == AMPRT_F32 && alpha == 1.0f && !useC && !fusedBias && !relu;
  if (m && n && kk)
    AMPRT_CHECK(lowProduct(ctx, keyOf(dnnl::memory::data_type::bf16, dnnl::memory::data_type::bf16),
                           a, b, biasF32, &low, plain ? &amx : nullptr));
  if (amx) {
    noteKernelImpl("amx:own");
    amxProduct(m, n, kk, static_cast<const uint16_t *>(a->data), trans_a ? 1 : a->shape[1],
               trans_a ? a->shape[1] : 1, static_cast<const uint16_t *>(b->data),
               trans_b ? 1 : b->shape[1], trans_b ? b->shape[1] : 1, static_cast<float *>(y->data),
               n);
    return AMPRT_OK;
  }
  // The product (with the common epilogue, an f32 bias row with alpha =
  // beta = 1, and the ReLU inside the primitive: no second pass) into out,
  // f32 or (bf16Out) bf16.
  auto product = [&](void *out, bool bf16Out) -> amprt_status {
    AMPRT_DNNL_TRY(k, {
      Operand oa = operandOf(a, !low), ob = operandOf(b, !low);
      GemmKey key = keyOf(oa.dt, ob.dt);
      key.bf16Out = bf16Out;
      gemmAcc(key, oa.ptr, ob.ptr, out, biasF32);
    })
    return AMPRT_OK;
  };
  // bf16 operands on bf16 kernels and nothing after the primitive: it
  // writes a bf16 y, rounded once (no f32 scratch and second pass).
  if (y->dtype == AMPRT_BF16 && low && alpha == 1.0f && !useC)
    return product(y->data, true);
  // f32 outputs take the product directly; others go through f32 scratch
  // and are rounded once.
  thread_local std::vector<float> scratch;
  float *acc;
  if (y->dtype == AMPRT_F32) {
    acc = static_cast<float *>(y->data);
  } else {
    acc = grown(scratch, (size_t)(m * n));
  }
  if (m && n) {
    if (kk == 0)
      std::fill(acc, acc + m * n, 0.0f);
    else
      AMPRT_CHECK(product(acc, false));
  }
  if (alpha != 1.0f || useC) {
    if (useC && c->dtype == AMPRT_F32 && cs[0][1] == 1 && (cs[0][0] == 0 || cs[0][0] == n)) {
      // The common case: an f32 bias row (or a full matrix), contiguous.
      const float *cp = static_cast<const float *>(c->data);
      for (int64_t i = 0; i < m; ++i) {
        const float *cr = cp + i * cs[0][0];
        float *ar = acc + i * n;
        for (int64_t j = 0; j < n; ++j)
          ar[j] = alpha * ar[j] + beta * cr[j];
      }
    } else {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float v = alpha * acc[i * n + j];
          if (useC)
            v += beta * loadF(c->data, c->dtype, i * cs[0][0] + j * cs[0][1]);
          acc[i * n + j] = v;
        }
    }
  }
  if (y->dtype != AMPRT_F32)
    return convertPar(acc, AMPRT_F32, y->data, y->dtype, (size_t)(m * n));
  return AMPRT_OK;
}

extern "C" amprt_status amprt_matmul(amprt_context *ctx, const amprt_tensor *a,
                                     const amprt_tensor *b, amprt_tensor *y) {
  const char *k = "amprt_matmul";
  AMPRT_CHECK(check(a, "amprt_matmul: a"));
  AMPRT_CHECK(check(b, "amprt_matmul: b"));
  AMPRT_CHECK(checkFloatContig(y, "amprt_matmul: y"));
  // a and b: dense, or transposed views of dense matrix stacks (read in
  // place: the product takes their strides).
  int la = matrixLayout(a), lb = matrixLayout(b);
  for (auto [t, l, what] : {std::make_tuple(a, la, "a"), std::make_tuple(b, lb, "b")})
    if (!isFloat(t->dtype) || l < 0)
      return fail(
          AMPRT_ERR_INVALID_ARGUMENT,
          "%s: %s must be a dense f32 / f16 / bf16 tensor or a transposed view of one, got %s %s",
          k, what, amprt_dtype_name(t->dtype), shapeString(t).c_str());
  bool ta = la == 1, tb = lb == 1;
  if (a->dtype != b->dtype)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: a and b must share a float type", k);
  MatmulDims md;
  AMPRT_CHECK(matmulDims(a, b, y, k, md));
  const int64_t m = md.m, kk = md.k, n = md.n, batches = md.batches;
  const int32_t batchRank = md.batchRank;
  const int64_t *batch = md.batch, *astr = md.astr, *bstr = md.bstr;
  const int64_t aMat = m * kk, bMat = kk * n;
  thread_local std::vector<float> scratch;
  // One primitive for the whole product where the batch allows: b shared by
  // every batch (a's rows stacked: [batches * m, k] x [k, n]), or both
  // batched alike (a batched primitive).
  bool bShared = true, sameBatch = true;
  for (int32_t d = 0; d < batchRank; ++d) {
    bShared &= bstr[d] == 0 || batch[d] == 1;
    sameBatch &= (astr[d] != 0 || batch[d] == 1) && (bstr[d] != 0 || batch[d] == 1);
  }
  // (a's rows stack across batches only when a is row-major.)
  bShared = bShared && !ta;
  // Strides of a [m, k] and b [k, n] within a matrix.
  int64_t a0 = ta ? 1 : kk, a1 = ta ? m : 1, b0 = tb ? 1 : n, b1 = tb ? kk : 1;
  // bf16 operands on bf16 kernels (or widened to f32, whichever is faster
  // for the shape): the primitive writes a bf16 y itself.
  bool low = bf16Operands(a, b);
  const bool oneProduct = batches > 1 && kk > 0 && m && n && (bShared || sameBatch);
  if (oneProduct || (batches == 1 && kk > 0 && m && n)) {
    using dt = dnnl::memory::data_type;
    GemmKey key{bShared ? batches * m : m, n, kk, a0, a1, b0, b1, (int)dt::bf16, (int)dt::bf16,
                bShared ? 1 : batches};
    AMPRT_CHECK(lowProduct(ctx, key, a, b, nullptr, &low));
  }
  bool direct = y->dtype == AMPRT_F32 || (y->dtype == AMPRT_BF16 && low);
  if (oneProduct) {
    if (!direct && scratch.size() < (size_t)(batches * m * n))
      scratch.resize(batches * m * n);
    AMPRT_DNNL_TRY(k, {
      Operand oa = operandOf(a, !low), ob = operandOf(b, !low);
      void *acc = direct ? y->data : scratch.data();
      GemmKey key{bShared ? batches * m : m, n, kk, a0, a1, b0, b1, (int)oa.dt, (int)ob.dt,
                  bShared ? 1 : batches};
      key.bf16Out = y->dtype == AMPRT_BF16 && direct;
      gemmAcc(key, oa.ptr, ob.ptr, acc);
      if (!direct)
        convertPar(acc, AMPRT_F32, y->data, y->dtype, (size_t)(batches * m * n));
    })
    return AMPRT_OK;
  }
  grown(scratch, (size_t)(m * n));
  AMPRT_DNNL_TRY(k, {
    Operand oa = operandOf(a, !low), ob = operandOf(b, !low);
    size_t ae = oa.dt == dnnl::memory::data_type::bf16 ? 2 : 4;
    size_t be = ob.dt == dnnl::memory::data_type::bf16 ? 2 : 4;
    GemmKey key{m, n, kk, a0, a1, b0, b1, (int)oa.dt, (int)ob.dt};
    for (int64_t bt = 0; bt < batches; ++bt) {
      int64_t ao, bo;
      md.offsets(bt, ao, bo);
      float *acc =
          y->dtype == AMPRT_F32 ? static_cast<float *>(y->data) + bt * m * n : scratch.data();
      if (kk == 0)
        std::fill(acc, acc + m * n, 0.0f);
      else if (m && n)
        gemmAcc(key, static_cast<const char *>(oa.ptr) + ao * aMat * ae,
                static_cast<const char *>(ob.ptr) + bo * bMat * be, acc);
      if (y->dtype != AMPRT_F32)
        convertPar(acc, AMPRT_F32,
                   static_cast<char *>(y->data) + bt * m * n * amprt_dtype_size(y->dtype), y->dtype,
                   (size_t)(m * n));
    }
  })
  return AMPRT_OK;
}

namespace {

struct ConvDims {
  dnnl::memory::dims src, wei, dst, bias, strides, dil, padL, padR;
  /// Everything that shapes a primitive, for cache keys (callers append
  /// the rest: types, flags, threads).
  std::vector<int64_t> key() const {
    std::vector<int64_t> k(src.begin(), src.end());
    for (const auto *v : {&wei, &dst, &strides, &dil, &padL, &padR}) {
      k.push_back(-1);
      k.insert(k.end(), v->begin(), v->end());
    }
    return k;
  }
};

amprt_status convDims(const amprt_tensor *x, const amprt_tensor *w, const amprt_tensor *y,
                      const amprt_conv_params *p, const char *k, ConvDims &cd) {
  if (!p || p->spatial < 1 || p->spatial > 3 || p->group < 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: bad parameters", k);
  int32_t r = p->spatial + 2;
  if (x->rank != r || w->rank != r || y->rank != r)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: x %s, w %s, y %s must have rank %d", k,
                shapeString(x).c_str(), shapeString(w).c_str(), shapeString(y).c_str(), r);
  int64_t g = p->group, c = x->shape[1], mo = w->shape[0];
  if (c != w->shape[1] * g || mo % g || y->shape[1] != mo || y->shape[0] != x->shape[0])
    return fail(
        AMPRT_ERR_INVALID_ARGUMENT, "%s: channels do not agree: x %s, w %s, y %s, group %lld", k,
        shapeString(x).c_str(), shapeString(w).c_str(), shapeString(y).c_str(), (long long)g);
  cd.src.assign(x->shape, x->shape + r);
  cd.dst.assign(y->shape, y->shape + r);
  if (g == 1) {
    cd.wei.assign(w->shape, w->shape + r);
  } else {
    cd.wei = {g, mo / g, w->shape[1]};
    for (int32_t d = 2; d < r; ++d)
      cd.wei.push_back(w->shape[d]);
  }
  cd.bias = {mo};
  for (int32_t i = 0; i < p->spatial; ++i) {
    int64_t kd = w->shape[2 + i], dil = p->dilations[i] > 0 ? p->dilations[i] : 1;
    int64_t st = p->strides[i] > 0 ? p->strides[i] : 1;
    int64_t eff = (kd - 1) * dil + 1;
    int64_t want = (x->shape[2 + i] + p->pads_begin[i] + p->pads_end[i] - eff) / st + 1;
    if (want != y->shape[2 + i])
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "%s: spatial dim %d of y is %lld, the window gives %lld", k, i,
                  (long long)y->shape[2 + i], (long long)want);
    cd.strides.push_back(st);
    cd.dil.push_back(dil - 1); // oneDNN counts dilation from 0
    cd.padL.push_back(p->pads_begin[i]);
    cd.padR.push_back(p->pads_end[i]);
  }
  return AMPRT_OK;
}

dnnl::memory::format_tag plainTag(size_t rank) {
  using t = dnnl::memory::format_tag;
  switch (rank) {
  case 1:
    return t::a;
  case 2:
    return t::ab;
  case 3:
    return t::abc;
  case 4:
    return t::abcd;
  case 5:
    return t::abcde;
  default:
    return t::abcdef;
  }
}

} // namespace

extern "C" int32_t amprt_channel_block(void) {
  static const int32_t block = [] {
    int isa = (int)dnnl_get_effective_cpu_isa();
    return (isa & (int)dnnl_cpu_isa_avx512_core) == (int)dnnl_cpu_isa_avx512_core ? 16 : 8;
  }();
  return block;
}

extern "C" amprt_status amprt_conv(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *w,
                                   const amprt_tensor *bias, const amprt_conv_params *p,
                                   amprt_tensor *y) {
  return amprt_conv_ex(ctx, x, w, bias, p, 0, y);
}

namespace {

/// The shapes and parameters of a convolution for a tuning key.
std::string convTuneKey(const char *pass, const ConvDims &cd, int64_t group, const char *types) {
  std::string s = std::string(pass) + " " + types;
  auto dims = [&](const char *name, const dnnl::memory::dims &d) {
    s += std::string(" ") + name + "[";
    for (size_t i = 0; i < d.size(); ++i)
      s += (i ? "," : "") + std::to_string(d[i]);
    s += "]";
  };
  dims("x", cd.src);
  dims("w", cd.wei);
  dims("y", cd.dst);
  dims("stride", cd.strides);
  dims("dilation", cd.dil);
  dims("pad", cd.padL);
  dims("", cd.padR);
  s += " group " + std::to_string(group) + " threads " + std::to_string(maxThreads()) + " " +
       isaTag();
  return s;
}

/// convForward's `widenChoice` beyond 0 / 1: a depthwise convolution by the
/// direct kernel, or by oneDNN's (then bf16 or f32 as the choice decides);
/// im2col + one product on bf16 or f32 operands (im2colForward); a
/// pointwise convolution as one batched product (im2colForward, batched);
/// im2col + amxProduct with the weights read in place (im2colForward, amx).
constexpr int kDepthwiseDirect = 2, kOneDnn = -2, kIm2colBf16 = 3, kIm2colF32 = 4,
              kPointwiseBf16 = 5, kIm2colAmx = 6;

/// The passes of a convolution, for depthwiseOneDnnSlow.
enum class ConvPass { Forward, Data, Weights };

/// The fixed rule for a depthwise convolution: the direct kernel
/// (depthwise.cpp) for a pass where oneDNN's f32 implementation for the
/// shape is im2col + gemm or its reference kernel (oneDNN 2.6: ConvNeXt's
/// 7 x 7 forward on 2 x 2 maps, 3.1 ms against 0.07 ms on the AVX2 EPYC;
/// every 7 x 7 weight gradient on AVX2, 5-10x slower), else oneDNN's
/// (its jit_dw kernels: MobileNet's 3 x 3). The answer is cached per shape.
bool depthwiseOneDnnSlow(const ConvDims &cd, ConvPass pass) {
  std::vector<int64_t> key = cd.key();
  key.push_back((int64_t)pass);
  static std::mutex mu;
  static std::map<std::vector<int64_t>, bool> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  bool slow = true;
  try {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc xa(cd.src, dt::f32, tag::any), wa(cd.wei, dt::f32, tag::any),
        ya(cd.dst, dt::f32, tag::any), bd(cd.bias, dt::f32, tag::a);
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, xa, wa, bd, ya,
                                       cd.strides, cd.dil, cd.padL, cd.padR);
    dnnl::convolution_forward::primitive_desc fpd(fd, cpuEngine());
    std::string impl = fpd.impl_info_str();
    if (pass == ConvPass::Data) {
      dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, xa, wa, ya,
                                              cd.strides, cd.dil, cd.padL, cd.padR);
      impl = dnnl::convolution_backward_data::primitive_desc(d, cpuEngine(), fpd).impl_info_str();
    } else if (pass == ConvPass::Weights) {
      dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, xa, wa, ya,
                                                 cd.strides, cd.dil, cd.padL, cd.padR);
      impl =
          dnnl::convolution_backward_weights::primitive_desc(d, cpuEngine(), fpd).impl_info_str();
    }
    slow = impl.find("gemm") != std::string::npos || impl.find("ref") != std::string::npos;
  } catch (const dnnl::error &) {
    slow = true; // oneDNN has nothing for it: the direct kernel
  }
  cache.emplace(key, slow);
  return slow;
}

std::atomic<int64_t> im2colCalls{0}; // im2colConvCallsForTesting

/// A convolution pass about to run as im2col + one product: counted for the
/// tests, named for AMPRT_PROFILE.
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
  thread_local std::vector<float> acc;
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
                   bool batched = false, bool amx = false) {
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
  thread_local std::vector<char> colBuf;
  thread_local std::vector<float> yt;
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
                    amprt_tensor *dx, bool low, bool batched = false) {
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
  thread_local std::vector<char> dyBuf;
  thread_local std::vector<float> dcol, acc;
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

/// amprt_conv_ex with bf16 x and w widened to f32 (`widenChoice` 1), on the
/// bf16 kernels (0), or as the per-shape choice decides (-1).
amprt_status convForward(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *w,
                         const amprt_tensor *bias, const amprt_conv_params *p, int32_t flags,
                         amprt_tensor *y, int widenChoice) {
  const char *k = "amprt_conv";
  AMPRT_CHECK(checkFloatContig(x, "amprt_conv: x"));
  AMPRT_CHECK(checkFloatContig(w, "amprt_conv: w"));
  AMPRT_CHECK(checkFloatContig(y, "amprt_conv: y"));
  if (x->dtype != w->dtype)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: x and w must share a type", k);
  if (flags & ~(AMPRT_CONV_RELU | AMPRT_CONV_SRC_BLOCKED | AMPRT_CONV_DST_BLOCKED))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: unknown flags %d", k, (int)flags);
  ConvDims cd;
  AMPRT_CHECK(convDims(x, w, y, p, k, cd));
  const int32_t block = amprt_channel_block();
  for (auto [t, bit, what] : {std::tuple{x, AMPRT_CONV_SRC_BLOCKED, "x"},
                              std::tuple{(const amprt_tensor *)y, AMPRT_CONV_DST_BLOCKED, "y"}})
    if ((flags & bit) && (t->dtype != AMPRT_F32 || t->rank != 4 || t->shape[1] % block))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "%s: a channel-blocked %s must be f32 [N, C, H, W] with C a multiple "
                  "of %d, got %s",
                  k, what, (int)block, shapeString(t).c_str());
  std::vector<float> bf;
  if (bias) {
    AMPRT_CHECK(checkFloatContig(bias, "amprt_conv: bias"));
    if (amprt_tensor_numel(bias) != cd.bias[0])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: bias must be [%lld]", k, (long long)cd.bias[0]);
    bf.resize(cd.bias[0]);
    convertPar(bias->data, bias->dtype, bf.data(), AMPRT_F32, bf.size());
  }
  if ((flags & AMPRT_CONV_RELU) && amprt_tensor_numel(y)) {
    // oneDNN's ReLU post-op turns NaN into 0 where ours keeps it (a NaN must
    // reach the loss and the inf check). It runs in the call only where no
    // NaN can arise: finite inputs whose largest products cannot overflow a
    // partial sum; otherwise the convolution, then our ReLU in place.
    int64_t k = amprt_tensor_numel(w) / std::max<int64_t>(1, w->shape[0]);
    if (!reluCannotMeetNaN(x, w, k, bf.data(), (int64_t)bf.size())) {
      AMPRT_CHECK(convForward(ctx, x, w, bias, p, flags & ~AMPRT_CONV_RELU, y, widenChoice));
      return amprt_unary(ctx, AMPRT_UNARY_RELU, 0.0f, y, y);
    }
  }
  int64_t count = amprt_tensor_numel(y);
  // A depthwise convolution: oneDNN's kernels or the direct one
  // (depthwise.cpp), by the fixed rule or the per-shape choice.
  if (!(flags & (AMPRT_CONV_SRC_BLOCKED | AMPRT_CONV_DST_BLOCKED)) &&
      depthwiseDirectFits(x, w, p) && count) {
    if (widenChoice == kDepthwiseDirect) {
      if (desc::profilingRequested())
        noteKernelImpl("direct-dw");
      depthwiseForward(x, w, bias ? bf.data() : nullptr, p, y);
      return flags & AMPRT_CONV_RELU ? amprt_unary(ctx, AMPRT_UNARY_RELU, 0.0f, y, y) : AMPRT_OK;
    }
    if (widenChoice == -1) {
      int choice = depthwiseOneDnnSlow(cd, ConvPass::Forward) ? 1 : 0;
      if (tuningOn(ctx)) {
        std::string key =
            convTuneKey(flags & AMPRT_CONV_RELU ? "conv+relu depthwise" : "conv depthwise", cd,
                        p->group, amprt_dtype_name(x->dtype));
        key += std::string(" y ") + amprt_dtype_name(y->dtype) + (bias ? " bias" : "");
        AMPRT_CHECK(chooseKernel(
            ctx, key, {"onednn", "direct"}, choice,
            [&](int i) {
              return convForward(ctx, x, w, bias, p, flags, y, i ? kDepthwiseDirect : kOneDnn);
            },
            &choice));
      }
      return convForward(ctx, x, w, bias, p, flags, y, choice ? kDepthwiseDirect : kOneDnn);
    }
  }
  if (widenChoice == kOneDnn)
    widenChoice = -1;
  if ((widenChoice == kIm2colBf16 || widenChoice == kIm2colF32) && count) {
    im2colForward(x, w, bias ? bf.data() : nullptr, p, flags, y, widenChoice == kIm2colBf16);
    return AMPRT_OK;
  }
  if (widenChoice == kPointwiseBf16 && count) { // (offered for bf16 x and w only)
    im2colForward(x, w, bias ? bf.data() : nullptr, p, flags, y, true, true);
    return AMPRT_OK;
  }
  if (widenChoice == kIm2colAmx && count) { // (offered for bf16 x and w only)
    im2colForward(x, w, bias ? bf.data() : nullptr, p, flags, y, true, false, true);
    return AMPRT_OK;
  }
  // bf16 with few input channels per group (an image's first layer):
  // oneDNN's bf16 kernels run slower than its f32 ones there, and bf16
  // values widen to f32 exactly (the same products, f32 accumulation
  // either way), so the f32 kernel runs: the fixed rule. The per-shape
  // choice times both (a CPU without bf16 instructions runs oneDNN's bf16
  // kernels emulated, slower than f32 on every shape), and im2col + one
  // product in either where it fits (the weight read in its plain layout:
  // faster where the output is small next to the weight).
  bool widen = x->dtype == AMPRT_BF16 && x->shape[1] / std::max<int64_t>(p->group, 1) < 8;
  if (widenChoice >= 0) {
    widen = widenChoice == 1;
  } else if (count && tuningOn(ctx)) {
    const bool bf16k = x->dtype == AMPRT_BF16 && bf16Kernels();
    std::vector<const char *> names;
    std::vector<int> kernels; // convForward's widenChoice of each name
    if (bf16k) {
      names = {"bf16", "f32"};
      kernels = {0, 1};
    } else {
      names = {"f32"};
      kernels = {1};
    }
    if (!(flags & (AMPRT_CONV_SRC_BLOCKED | AMPRT_CONV_DST_BLOCKED))) {
      if (bf16k && im2colFits(w, y, p, 2)) {
        names.push_back("im2col-bf16");
        kernels.push_back(kIm2colBf16);
      }
      if (im2colFits(w, y, p, 4)) {
        names.push_back("im2col-f32");
        kernels.push_back(kIm2colF32);
      }
      // A pointwise convolution as one batched product in NCHW (no
      // im2col): fast where the maps are large, slow on 2 x 2 ones (one
      // small product per image, the weight read by each). bf16 only: the
      // matmul sums its K products in one running f32 sum, 2-3x the
      // rounding of oneDNN's convolution on long sums (K = 1152: mean
      // error 1.3e-5 against 7.5e-6 on sums near 34), which fp32 training
      // of a sensitive model shows (timm's EfficientNet-B0: loss 1.3e-3
      // from float64 against PyTorch's 6.7e-5); in bf16 the operands'
      // rounding is 100x that.
      if (bf16k && pointwise(x, w, y, p)) {
        names.push_back("pointwise-bf16");
        kernels.push_back(kPointwiseBf16);
      }
      // The same columns on the AMX tiles with the weights read in place
      // (rows of OC, C x KH x KW columns: amxReadsAInPlace).
      if (bf16k && im2colFits(w, y, p, 2) && w->dtype == AMPRT_BF16 &&
          amprt_tensor_is_contiguous(w) && amxProductAvailable() &&
          amxReadsAInPlace(w->shape[0], amprt_tensor_numel(w) / w->shape[0])) {
        names.push_back("im2col-amx");
        kernels.push_back(kIm2colAmx);
      }
    }
    if (names.size() > 1) {
      std::string types =
          std::string(amprt_dtype_name(x->dtype)) + "->" + amprt_dtype_name(y->dtype);
      std::string key =
          convTuneKey(flags & AMPRT_CONV_RELU ? "conv+relu" : "conv", cd, p->group, types.c_str());
      key += bias ? " bias" : "";
      key += flags & (AMPRT_CONV_SRC_BLOCKED | AMPRT_CONV_DST_BLOCKED) ? " blocked" : "";
      int choice = bf16k && widen ? 1 : 0;
      AMPRT_CHECK(chooseKernel(
          ctx, key, names, choice,
          [&](int i) { return convForward(ctx, x, w, bias, p, flags, y, kernels[i]); }, &choice));
      if (kernels[choice] >= kIm2colBf16)
        return convForward(ctx, x, w, bias, p, flags, y, kernels[choice]);
      widen = kernels[choice] == 1;
    }
  }
  // A bf16 y: the reorder out of oneDNN's layout rounds the f32 result to
  // bf16 itself (to nearest even, once), no f32 copy of y and second pass.
  bool outBf16 = y->dtype == AMPRT_BF16 && bf16Kernels();
  thread_local std::vector<float> scratch;
  void *acc = y->data;
  if (y->dtype != AMPRT_F32 && !outBf16) {
    acc = grown(scratch, (size_t)count);
  }
  if (count) {
    AMPRT_DNNL_TRY(k, {
      using dt = dnnl::memory::data_type;
      Operand ox = operandOf(x, widen), ow = operandOf(w, widen);
      // Primitives are cached by everything that shapes them.
      std::vector<int64_t> key = cd.key();
      key.push_back((int64_t)ox.dt);
      key.push_back(bias ? 1 : 0);
      key.push_back(flags);
      key.push_back(outBf16);
      key.push_back(maxThreads()); // oneDNN splits a primitive for its thread count
      // oneDNN picks its layouts (format_tag::any: blocked nChw16c and the
      // like, several times faster than plain NCHW); our plain tensors are
      // reordered in and out around the primitive. Primitives, reorders and
      // scratch buffers are cached per shape.
      struct Conv {
        dnnl::convolution_forward prim;
        dnnl::memory::desc src, wei, dst;
        std::optional<dnnl::reorder> toSrc, toWei, fromDst;
        std::string impl;
      };
      static std::mutex mu;
      static std::map<std::vector<int64_t>, Conv> cache;
      // Our side of the reorders: plain, or channel-blocked where the
      // compiler keeps the tensor so (then oneDNN's own choice, in which
      // case nothing is reordered).
      auto blockedTag =
          block == 16 ? dnnl::memory::format_tag::nChw16c : dnnl::memory::format_tag::nChw8c;
      dnnl::memory::desc xd(cd.src, ox.dt,
                            flags & AMPRT_CONV_SRC_BLOCKED ? blockedTag : plainTag(cd.src.size()));
      dnnl::memory::desc wd(cd.wei, ow.dt, plainTag(cd.wei.size()));
      dnnl::memory::desc yd(cd.dst, outBf16 ? dt::bf16 : dt::f32,
                            flags & AMPRT_CONV_DST_BLOCKED ? blockedTag : plainTag(cd.dst.size()));
      dnnl::memory::desc bd(cd.bias, dt::f32, dnnl::memory::format_tag::a);
      const Conv *conv;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = cache.find(key);
        if (it == cache.end()) {
          using tag = dnnl::memory::format_tag;
          dnnl::memory::desc xa(cd.src, ox.dt, tag::any), wa(cd.wei, ow.dt, tag::any),
              ya(cd.dst, dt::f32, tag::any);
          auto d =
              bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                     dnnl::algorithm::convolution_direct, xa, wa,
                                                     bd, ya, cd.strides, cd.dil, cd.padL, cd.padR)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                     dnnl::algorithm::convolution_direct, xa, wa,
                                                     ya, cd.strides, cd.dil, cd.padL, cd.padR);
          dnnl::primitive_attr pa;
          if (flags & AMPRT_CONV_RELU) {
            dnnl::post_ops po;
            // max(x, 0): turns a NaN into 0 (vmaxps); only used where no NaN
            // can arise (see amprt_conv_ex).
            po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
            pa.set_post_ops(po);
          }
          dnnl::convolution_forward::primitive_desc pd(d, pa, cpuEngine());
          Conv c{dnnl::convolution_forward(pd),
                 pd.src_desc(),
                 pd.weights_desc(),
                 pd.dst_desc(),
                 std::nullopt,
                 std::nullopt,
                 std::nullopt,
                 pd.impl_info_str()};
          if (c.src != xd)
            c.toSrc =
                dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), xd, cpuEngine(), c.src));
          if (c.wei != wd)
            c.toWei =
                dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), wd, cpuEngine(), c.wei));
          if (c.dst != yd)
            c.fromDst =
                dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), c.dst, cpuEngine(), yd));
          it = cache.emplace(key, std::move(c)).first;
        }
        conv = &it->second; // map nodes stay put
      }
      thread_local dnnl::stream s(cpuEngine());
      thread_local std::vector<char> bufSrc, bufWei, bufDst;
      auto scratch = [](std::vector<char> &b, const dnnl::memory::desc &d) {
        if (b.size() < d.get_size())
          b.resize(d.get_size());
        return b.data();
      };
      // Memory objects and arguments made once per primitive and thread;
      // each call only points them at its buffers.
      struct Bound {
        dnnl::memory xm, wm, ym, xi, wi, yo, bm;
        std::unordered_map<int, dnnl::memory> args;
      };
      thread_local std::map<const Conv *, Bound> bound;
      auto bit = bound.find(conv);
      if (bit == bound.end()) {
        Bound nb;
        auto none = [](const dnnl::memory::desc &d) {
          return dnnl::memory(d, cpuEngine(), DNNL_MEMORY_NONE);
        };
        nb.xm = none(xd);
        nb.wm = none(wd);
        nb.ym = none(yd);
        nb.xi = conv->toSrc ? none(conv->src) : nb.xm;
        nb.wi = conv->toWei ? none(conv->wei) : nb.wm;
        nb.yo = conv->fromDst ? none(conv->dst) : nb.ym;
        nb.args = {{DNNL_ARG_SRC, nb.xi}, {DNNL_ARG_WEIGHTS, nb.wi}, {DNNL_ARG_DST, nb.yo}};
        if (bias) {
          nb.bm = none(bd);
          nb.args[DNNL_ARG_BIAS] = nb.bm;
        }
        bit = bound.emplace(conv, std::move(nb)).first;
      }
      Bound &m = bit->second;
      m.xm.set_data_handle(const_cast<void *>(ox.ptr));
      m.wm.set_data_handle(const_cast<void *>(ow.ptr));
      m.ym.set_data_handle(acc);
      if (conv->toSrc)
        m.xi.set_data_handle(scratch(bufSrc, conv->src));
      if (conv->toWei)
        m.wi.set_data_handle(scratch(bufWei, conv->wei));
      if (conv->fromDst)
        m.yo.set_data_handle(scratch(bufDst, conv->dst));
      if (bias)
        m.bm.set_data_handle(bf.data());
      if (conv->toSrc)
        conv->toSrc->execute(s, m.xm, m.xi);
      if (conv->toWei)
        conv->toWei->execute(s, m.wm, m.wi);
      if (desc::profilingRequested())
        noteKernelImpl(conv->impl.c_str());
      conv->prim.execute(s, m.args);
      if (conv->fromDst)
        conv->fromDst->execute(s, m.yo, m.ym);
      s.wait();
    })
  }
  if (acc != y->data)
    return convertPar(acc, AMPRT_F32, y->data, y->dtype, (size_t)count);
  return AMPRT_OK;
}

} // namespace

extern "C" amprt_status amprt_conv_ex(amprt_context *ctx, const amprt_tensor *x,
                                      const amprt_tensor *w, const amprt_tensor *bias,
                                      const amprt_conv_params *p, int32_t flags, amprt_tensor *y) {
  return convForward(ctx, x, w, bias, p, flags, y, -1);
}

namespace {
/// Whether the weight gradient runs as im2col + one product instead of
/// oneDNN's backward-weights kernel: 2-D, one group, an output of at most 4
/// positions per image (late layers on small images: oneDNN's direct
/// kernel, f32 or bf16, takes several times the product's time there;
/// resnet18's 512x512x3x3 weight gradient on 8 x 2 x 2 outputs on an AMD
/// EPYC with AVX512-BF16, 2 threads: 5.3 ms a call in bf16 and f32, 2.3 ms
/// with dx by this path; at 4 x 4 the two were level). A fixed rule from
/// that measurement, not yet a timed choice per shape.
bool weightGradByIm2col(const amprt_tensor *dy, const amprt_conv_params *p) {
  return p->spatial == 2 && p->group == 1 && dy->rank == 4 && dy->shape[2] * dy->shape[3] <= 4;
}

/// dy [N, OC, OH, OW] (elements of es bytes) as rows [OC, N x OH x OW]
/// (the product's a), in the calling thread's buffer.
char *dyRows(const void *dy, int64_t es, const amprt_tensor *dys) {
  const int64_t n = dys->shape[0], oc = dys->shape[1], ohw = dys->shape[2] * dys->shape[3];
  const int64_t P = n * ohw;
  thread_local std::vector<char> dyBuf;
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
  thread_local std::vector<char> colBuf;
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

} // namespace

namespace {

/// Whether amxConvWeightGrad takes this weight gradient: bf16 x and dy, an
/// f32 dw, 2-D, one group, column stride 1 or 2, dilation 1, on a CPU with
/// AMX; its packed columns are the im2col matrix's bytes, under the same
/// cap (im2colFits).
bool directAmxFits(const amprt_tensor *x, const amprt_tensor *w, const amprt_tensor *dy,
                   const amprt_tensor *dw, const amprt_conv_params *p) {
  return x->dtype == AMPRT_BF16 && dy->dtype == AMPRT_BF16 && dw->dtype == AMPRT_F32 &&
         im2colFits(w, dy, p, 2) && x->rank == 4 && p->strides[0] >= 1 &&
         (p->strides[1] == 1 || p->strides[1] == 2) && std::max<int64_t>(p->dilations[0], 1) == 1 &&
         std::max<int64_t>(p->dilations[1], 1) == 1 && amprt_tensor_is_contiguous(x) &&
         amprt_tensor_is_contiguous(dy) && amprt_tensor_is_contiguous(dw) &&
         amprt_tensor_numel(dy) > 0 && amxProductAvailable();
}

/// The kernels of a convolution's backward: the data side on oneDNN's bf16
/// kernels or f32 ones (bf16 widened), the weights side also as im2col +
/// matmul in either (see weightGradByIm2col).
enum WeightsKernel {
  WeightsBf16,
  WeightsF32,
  WeightsIm2colBf16,
  WeightsIm2colF32,
  WeightsDepthwiseDirect,
  WeightsDirectAmx // amxConvWeightGrad: the columns made from x tile by tile
};
/// The data side as one product + col2im (im2colDataGrad) instead of a
/// oneDNN primitive.
enum DataIm2col { DataOneDnn, DataIm2colBf16, DataIm2colF32, DataPointwiseBf16 };
struct BackwardKernels {
  bool dataBf16 = false;
  bool dataDepthwiseDirect = false; // depthwise.cpp's kernel for dx
  DataIm2col dataIm2col = DataOneDnn;
  WeightsKernel weights = WeightsF32;
  // Where set (an f32 dw): dw checked for inf / NaN as it is stored, where
  // the kernel can (*dwChecked), the answer in *dwNonFinite.
  bool *dwChecked = nullptr, *dwNonFinite = nullptr;
};

/// amprt_conv_backward on operands it has checked (cd: their dimensions).
amprt_status convBackward(const amprt_tensor *x, const amprt_tensor *w, const amprt_tensor *dy,
                          const amprt_conv_params *p, const ConvDims &cd, amprt_tensor *dx,
                          amprt_tensor *dw, amprt_tensor *db, const BackwardKernels &kern) {
  const char *k = "amprt_conv_backward";
  AMPRT_DNNL_TRY(k, {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    // bf16 operands run on oneDNN's bf16 kernels (as PyTorch's autocast
    // backward does): products of bf16 values are exact in f32 and summed
    // in f32, as in the f32 kernels on widened copies, at twice their
    // speed. Not for few input channels per group (an image's first layer,
    // depthwise convolutions: oneDNN's bf16 kernels are slower there, as in
    // the forward), nor where oneDNN would take its reference kernel. Else
    // the inputs in f32 (f32 used in place, f16 / bf16 widened: exact).
    // Gradients are rounded once into the outputs (see dxDirect below).
    const bool lowD = kern.dataBf16,
               lowW = kern.weights == WeightsBf16 || kern.weights == WeightsIm2colBf16;
    thread_local std::vector<float> xw, ww, dyw;
    auto f32Of = [](const amprt_tensor *t, std::vector<float> &buf) -> float * {
      if (t->dtype == AMPRT_F32)
        return static_cast<float *>(t->data);
      float *out = grown(buf, (size_t)amprt_tensor_numel(t));
      convertPar(t->data, t->dtype, out, AMPRT_F32, (size_t)amprt_tensor_numel(t));
      return out;
    };
    dnnl::memory::desc bd(cd.bias, dt::f32, tag::a);
    // Primitives (oneDNN JIT-compiles each one: milliseconds) are cached by
    // everything that shapes them. As in the forward, oneDNN picks its own
    // layouts (format_tag::any: blocked, several times faster than the
    // plain-layout gemm implementation); plain tensors are reordered in and
    // out, the reorders cached with the primitives.
    std::vector<int64_t> key = cd.key();
    key.push_back(lowD);
    key.push_back(lowW);
    // Gradients in f32 or bf16 are written by the reorder out of oneDNN's
    // layout (rounded to nearest even there, once); others (f16) through
    // f32 and our conversion.
    auto direct = [](const amprt_tensor *t) {
      return t && (t->dtype == AMPRT_F32 || (t->dtype == AMPRT_BF16 && bf16Kernels()));
    };
    bool dxDirect = direct(dx), dwDirect = direct(dw);
    dt dxOut = dxDirect && dx->dtype == AMPRT_BF16 ? dt::bf16 : dt::f32;
    dt dwOut = dwDirect && dw->dtype == AMPRT_BF16 ? dt::bf16 : dt::f32;
    key.push_back((int64_t)dxOut);
    key.push_back((int64_t)dwOut);
    key.push_back(maxThreads()); // oneDNN splits a primitive for its thread count
    // The weight gradient as im2col + a product where oneDNN's kernel is
    // slow (then no backward-weights primitive is made).
    const bool dwIm2col =
        dw && (kern.weights == WeightsIm2colBf16 || kern.weights == WeightsIm2colF32);
    // The depthwise sides by the direct kernels (then no primitive either).
    const bool dwDepthwise = dw && kern.weights == WeightsDepthwiseDirect;
    const bool dwDirectAmx = dw && kern.weights == WeightsDirectAmx;
    amprt_tensor *dwPrim = dwIm2col || dwDepthwise || dwDirectAmx ? nullptr : dw;
    amprt_tensor *dxPrim = kern.dataDepthwiseDirect || kern.dataIm2col != DataOneDnn ? nullptr : dx;
    key.push_back(dwIm2col);
    struct Side {
      dnnl::memory::desc a, b, out; // the primitive's layouts of its inputs / output
      std::optional<dnnl::reorder> toA, toB, fromOut;
      bool low = false; // its inputs in bf16
      std::string impl;
    };
    struct Prims {
      std::optional<dnnl::convolution_backward_data> data;
      std::optional<dnnl::convolution_backward_weights> weights;
      Side d, w; // d: a = diff_dst, b = weights, out = diff_src; w: a = diff_dst, b = src,
                 // out = diff_weights
    };
    static std::mutex mu;
    static std::map<std::vector<int64_t>, Prims> cache;
    auto reorder = [](const dnnl::memory::desc &from,
                      const dnnl::memory::desc &to) -> std::optional<dnnl::reorder> {
      if (from == to)
        return std::nullopt;
      return dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), from, cpuEngine(), to));
    };
    auto plain = [&](const dnnl::memory::dims &d, dt t) {
      return dnnl::memory::desc(d, t, plainTag(d.size()));
    };
    auto isRef = [](const char *impl) { return std::strstr(impl, "ref") != nullptr; };
    Prims prims;
    {
      std::lock_guard<std::mutex> lock(mu);
      Prims &c = cache[key];
      // Each side in bf16 when asked and oneDNN has a real kernel for it,
      // else in f32.
      for (bool low : {true, false}) {
        const bool wantData = dxPrim && !c.data && (lowD || !low),
                   wantWeights = dwPrim && !c.weights && (lowW || !low);
        if (!wantData && !wantWeights)
          continue;
        dt in = low ? dt::bf16 : dt::f32;
        dnnl::memory::desc xa(cd.src, in, tag::any), wa(cd.wei, in, tag::any),
            ya(cd.dst, in, tag::any), xo(cd.src, dt::f32, tag::any), wo(cd.wei, dt::f32, tag::any);
        dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training,
                                           dnnl::algorithm::convolution_direct, xa, wa, bd, ya,
                                           cd.strides, cd.dil, cd.padL, cd.padR);
        dnnl::convolution_forward::primitive_desc fpd(fd, cpuEngine());
        if (wantData) {
          dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct,
                                                  low ? xo : xa, wa, ya, cd.strides, cd.dil,
                                                  cd.padL, cd.padR);
          dnnl::convolution_backward_data::primitive_desc pd(d, cpuEngine(), fpd);
          if (!low || !isRef(pd.impl_info_str())) {
            c.data = dnnl::convolution_backward_data(pd);
            c.d = Side{pd.diff_dst_desc(),
                       pd.weights_desc(),
                       pd.diff_src_desc(),
                       reorder(plain(cd.dst, in), pd.diff_dst_desc()),
                       reorder(plain(cd.wei, in), pd.weights_desc()),
                       reorder(pd.diff_src_desc(), plain(cd.src, dxOut)),
                       low,
                       pd.impl_info_str()};
          }
        }
        if (wantWeights) {
          // Without the bias: db is summed here, in double (oneDNN's f32 sum
          // over N x H x W loses digits when the terms cancel).
          dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, xa,
                                                     low ? wo : wa, ya, cd.strides, cd.dil, cd.padL,
                                                     cd.padR);
          dnnl::convolution_backward_weights::primitive_desc pd(d, cpuEngine(), fpd);
          if (!low || !isRef(pd.impl_info_str())) {
            c.weights = dnnl::convolution_backward_weights(pd);
            c.w = Side{pd.diff_dst_desc(),
                       pd.src_desc(),
                       pd.diff_weights_desc(),
                       reorder(plain(cd.dst, in), pd.diff_dst_desc()),
                       reorder(plain(cd.src, in), pd.src_desc()),
                       reorder(pd.diff_weights_desc(), plain(cd.wei, dwOut)),
                       low,
                       pd.impl_info_str()};
          }
        }
      }
      prims = c;
    }
    thread_local dnnl::stream s(cpuEngine());
    thread_local std::vector<char> bufA, bufB, bufOut, bufA2;
    auto scratchMem = [](std::vector<char> &b, const dnnl::memory::desc &d) {
      if (b.size() < d.get_size())
        b.resize(d.get_size());
      return dnnl::memory(d, cpuEngine(), b.data());
    };
    auto mem = [&](const dnnl::memory::desc &d, void *ptr) {
      return dnnl::memory(d, cpuEngine(), ptr);
    };
    /// A plain input in the primitive's layout: itself, or reordered.
    auto in = [&](const std::optional<dnnl::reorder> &r, const dnnl::memory::desc &plain,
                  const dnnl::memory::desc &want, void *ptr, std::vector<char> &buf) {
      dnnl::memory m = mem(plain, ptr);
      if (!r)
        return m;
      dnnl::memory t = scratchMem(buf, want);
      r->execute(s, m, t);
      return t;
    };
    /// An input of a side: its bf16 bytes, or f32 (widened when low).
    auto input = [&](bool low, const amprt_tensor *t, std::vector<float> &buf) -> void * {
      return low ? t->data : f32Of(t, buf);
    };
    // dy in the backward-data layout; reused by the weights side when the
    // two want the same one.
    std::optional<dnnl::memory> dyData;
    float *dyf = nullptr; // dy in f32, for db
    if (dx && kern.dataIm2col != DataOneDnn) {
      im2colDataGrad(w, dy, p, dx, kern.dataIm2col != DataIm2colF32,
                     kern.dataIm2col == DataPointwiseBf16);
    } else if (dx && !dxPrim) {
      if (desc::profilingRequested())
        noteKernelImpl("direct-dw");
      depthwiseBackwardData(w, dy, p, dx);
    } else if (dx) {
      bool low = prims.d.low;
      dt et = low ? dt::bf16 : dt::f32;
      std::vector<float> g(dxDirect ? 0 : amprt_tensor_numel(x));
      void *dyp = input(low, dy, dyw);
      if (!low)
        dyf = static_cast<float *>(dyp);
      dnnl::memory dyi = in(prims.d.toA, plain(cd.dst, et), prims.d.a, dyp, bufA);
      dyData = dyi;
      dnnl::memory wi = in(prims.d.toB, plain(cd.wei, et), prims.d.b, input(low, w, ww), bufB);
      dnnl::memory gp = mem(plain(cd.src, dxOut), dxDirect ? dx->data : g.data());
      dnnl::memory go = prims.d.fromOut ? scratchMem(bufOut, prims.d.out) : gp;
      if (desc::profilingRequested())
        noteKernelImpl(prims.d.impl.c_str());
      prims.data->execute(
          s, {{DNNL_ARG_DIFF_DST, dyi}, {DNNL_ARG_WEIGHTS, wi}, {DNNL_ARG_DIFF_SRC, go}});
      if (prims.d.fromOut)
        prims.d.fromOut->execute(s, go, gp);
      s.wait();
      if (!dxDirect)
        convertPar(g.data(), AMPRT_F32, dx->data, dx->dtype, g.size());
    }
    if (dwDepthwise) {
      if (desc::profilingRequested())
        noteKernelImpl("direct-dw");
      depthwiseWeightGrad(x, dy, p, dw);
    } else if (dwDirectAmx) {
      // (Offered for bf16 x and dy, an f32 dw, 2-D, column stride 1 or 2,
      // dilation 1.)
      noteIm2col("direct-amx"); // (the columns made tile by tile)
      const char *dyt = dyRows(dy->data, 2, dy);
      amxConvWeightGrad(static_cast<const uint16_t *>(x->data), x->shape[0], x->shape[1],
                        x->shape[2], x->shape[3], w->shape[2], w->shape[3], p->strides[0],
                        p->strides[1], p->pads_begin[0], p->pads_begin[1], dy->shape[2],
                        dy->shape[3], reinterpret_cast<const uint16_t *>(dyt), dy->shape[1],
                        static_cast<float *>(dw->data), kern.dwNonFinite);
      if (kern.dwChecked)
        *kern.dwChecked = kern.dwNonFinite != nullptr;
    } else if (dwIm2col) {
      // The bf16 operands as they are, or f32 (widened: exact).
      const bool low = lowW;
      void *dyp = low ? dy->data : f32Of(dy, dyw);
      if (!low)
        dyf = static_cast<float *>(dyp);
      const bool bf16Out = low && dw->dtype == AMPRT_BF16;
      std::vector<float> gw(dw->dtype == AMPRT_F32 || bf16Out ? 0 : amprt_tensor_numel(w));
      bool checked =
          im2colWeightGrad(x, dyp, low ? 2 : 4, w, dy, p, gw.empty() ? dw->data : gw.data(),
                           bf16Out, dw->dtype == AMPRT_F32 ? kern.dwNonFinite : nullptr);
      if (kern.dwChecked)
        *kern.dwChecked = checked;
      if (!gw.empty())
        convertPar(gw.data(), AMPRT_F32, dw->data, dw->dtype, gw.size());
    } else if (dw) {
      // (x is read only here: for dx alone it gives the shape, and
      // ConvTranspose passes its own, not yet written, result.)
      bool low = prims.w.low;
      dt et = low ? dt::bf16 : dt::f32;
      std::vector<float> gw(dwDirect ? 0 : amprt_tensor_numel(w));
      dnnl::memory dyi;
      if (dyData && prims.d.low == low && prims.d.a == prims.w.a) {
        dyi = *dyData;
      } else {
        void *dyp = input(low, dy, dyw);
        if (!low)
          dyf = static_cast<float *>(dyp);
        dyi = in(prims.w.toA, plain(cd.dst, et), prims.w.a, dyp, bufA2);
      }
      dnnl::memory xi = in(prims.w.toB, plain(cd.src, et), prims.w.b, input(low, x, xw), bufB);
      dnnl::memory gp = mem(plain(cd.wei, dwOut), dwDirect ? dw->data : gw.data());
      dnnl::memory go = prims.w.fromOut ? scratchMem(bufOut, prims.w.out) : gp;
      if (desc::profilingRequested())
        noteKernelImpl(prims.w.impl.c_str());
      prims.weights->execute(
          s, {{DNNL_ARG_DIFF_DST, dyi}, {DNNL_ARG_SRC, xi}, {DNNL_ARG_DIFF_WEIGHTS, go}});
      if (prims.w.fromOut)
        prims.w.fromOut->execute(s, go, gp);
      s.wait();
      if (!dwDirect)
        convertPar(gw.data(), AMPRT_F32, dw->data, dw->dtype, gw.size());
    }
    if (db && !dyf)
      dyf = f32Of(dy, dyw);
    if (db) {
      // db[c] = sum of dy over N and the spatial dims, in double.
      int64_t oc = cd.dst[1], inner = 1;
      for (size_t d = 2; d < cd.dst.size(); ++d)
        inner *= cd.dst[d];
      std::vector<float> gb(oc);
      for (int64_t c = 0; c < oc; ++c) {
        double sum = 0.0;
        for (int64_t b = 0; b < cd.dst[0]; ++b)
          sum += sumF32(dyf + (b * oc + c) * inner, inner);
        gb[c] = (float)sum;
      }
      convertPar(gb.data(), AMPRT_F32, db->data, db->dtype, gb.size());
    }
  })
  return AMPRT_OK;
}

} // namespace

extern "C" amprt_status amprt_conv_backward(amprt_context *ctx, const amprt_tensor *x,
                                            const amprt_tensor *w, const amprt_tensor *dy,
                                            const amprt_conv_params *p, amprt_tensor *dx,
                                            amprt_tensor *dw, amprt_tensor *db) {
  return convBackwardChecked(ctx, x, w, dy, p, dx, dw, db, false);
}

amprt_status amprt::convBackwardChecked(amprt_context *ctx, const amprt_tensor *x,
                                        const amprt_tensor *w, const amprt_tensor *dy,
                                        const amprt_conv_params *p, amprt_tensor *dx,
                                        amprt_tensor *dw, amprt_tensor *db, bool checkDw) {
  const char *k = "amprt_conv_backward";
  AMPRT_CHECK(checkFloatContig(x, "amprt_conv_backward: x"));
  AMPRT_CHECK(checkFloatContig(w, "amprt_conv_backward: w"));
  AMPRT_CHECK(checkFloatContig(dy, "amprt_conv_backward: dy"));
  ConvDims cd;
  AMPRT_CHECK(convDims(x, w, dy, p, k, cd));
  for (amprt_tensor *t : {dx, dw, db})
    if (t)
      AMPRT_CHECK(checkFloatContig(t, "amprt_conv_backward: gradient"));
  if ((dx && amprt_tensor_numel(dx) != amprt_tensor_numel(x)) ||
      (dw && amprt_tensor_numel(dw) != amprt_tensor_numel(w)) ||
      (db && amprt_tensor_numel(db) != cd.bias[0]))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: gradient shapes do not match", k);
  // The fixed rules. bf16 operands run on oneDNN's bf16 kernels (as
  // PyTorch's autocast backward does): products of bf16 values are exact in
  // f32 and summed in f32, as in the f32 kernels on widened copies, at
  // twice their speed where the CPU has bf16 instructions. Not for few
  // input channels per group (an image's first layer, depthwise
  // convolutions: oneDNN's bf16 kernels are slower there, as in the
  // forward), nor where oneDNN would take its reference kernel (then f32).
  // The weight gradient as im2col + a product on small outputs.
  const bool allBf16 =
      dy->dtype == AMPRT_BF16 && w->dtype == AMPRT_BF16 && x->dtype == AMPRT_BF16 && bf16Kernels();
  const bool lowp = allBf16 && x->shape[1] / std::max<int64_t>(p->group, 1) >= 8;
  BackwardKernels kern;
  kern.dataBf16 = lowp;
  kern.weights = weightGradByIm2col(dy, p) ? (lowp ? WeightsIm2colBf16 : WeightsIm2colF32)
                                           : (lowp ? WeightsBf16 : WeightsF32);
  // Depthwise: the direct kernels where oneDNN's are im2col + gemm (see
  // depthwiseOneDnnSlow).
  const bool dwDirectOk = depthwiseDirectFits(x, w, p);
  if (dwDirectOk) {
    kern.dataDepthwiseDirect = dx && depthwiseOneDnnSlow(cd, ConvPass::Data);
    if (dw && depthwiseOneDnnSlow(cd, ConvPass::Weights))
      kern.weights = WeightsDepthwiseDirect;
  }
  // The final call (after any timing): with checkDw, an f32 dw's inf
  // check as it is written (amxProduct's tiles), else right after, while
  // it is in the caches; the answer noted for the step's unscale_and_check.
  auto run = [&]() -> amprt_status {
    checkDw = checkDw && dw && dw->dtype == AMPRT_F32;
    bool checked = false, bad = false;
    BackwardKernels f = kern;
    if (checkDw) {
      f.dwChecked = &checked;
      f.dwNonFinite = &bad;
    }
    AMPRT_CHECK(convBackward(x, w, dy, p, cd, dx, dw, db, f));
    if (checkDw) {
      if (!checked)
        bad = anyNonFiniteF32(static_cast<const float *>(dw->data), amprt_tensor_numel(dw));
      notePrechecked(ctx, dw, bad);
    }
    return AMPRT_OK;
  };
  if (!tuningOn(ctx) || !amprt_tensor_numel(dy) || !amprt_tensor_numel(x) || !amprt_tensor_numel(w))
    return run();
  const char *types = allBf16 ? "bf16" : x->dtype == AMPRT_F32 ? "f32" : "mixed";
  if (dwDirectOk) {
    // The per-shape choice, each side timed alone.
    auto side = [&](bool data, amprt_tensor *out, bool preferDirect) {
      int choice = preferDirect ? 1 : 0;
      AMPRT_CHECK(chooseKernel(
          ctx,
          convTuneKey(data ? "conv backward-data depthwise" : "conv backward-weights depthwise", cd,
                      p->group, types) +
              " out " + amprt_dtype_name(out->dtype),
          {"onednn", "direct"}, choice,
          [&](int i) {
            BackwardKernels f = kern;
            if (data)
              f.dataDepthwiseDirect = i == 1;
            else
              f.weights = i == 1 ? WeightsDepthwiseDirect : WeightsF32;
            return convBackward(x, w, dy, p, cd, data ? out : nullptr, data ? nullptr : out,
                                nullptr, f);
          },
          &choice));
      if (data)
        kern.dataDepthwiseDirect = choice == 1;
      else
        kern.weights = choice == 1 ? WeightsDepthwiseDirect : WeightsF32;
      return AMPRT_OK;
    };
    if (dx)
      AMPRT_CHECK(side(true, dx, kern.dataDepthwiseDirect));
    if (dw)
      AMPRT_CHECK(side(false, dw, kern.weights == WeightsDepthwiseDirect));
    return run();
  }
  // The per-shape choice: each side timed alone on the real operands. The
  // data side: oneDNN's bf16 or f32 kernels, or one product + col2im in
  // either where it fits (the weight read in its plain layout).
  if (dx) {
    std::vector<const char *> names;
    std::vector<std::pair<bool, DataIm2col>> cands; // (dataBf16, dataIm2col)
    if (allBf16) {
      names = {"bf16", "f32"};
      cands = {{true, DataOneDnn}, {false, DataOneDnn}};
    } else {
      names = {"f32"};
      cands = {{false, DataOneDnn}};
    }
    if (allBf16 && im2colFits(w, dy, p, 2)) {
      names.push_back("im2col-bf16");
      cands.push_back({false, DataIm2colBf16});
    }
    if (im2colFits(w, dy, p, 4)) {
      names.push_back("im2col-f32");
      cands.push_back({false, DataIm2colF32});
    }
    if (allBf16 && pointwise(dx, w, dy, p)) { // bf16 only: see convForward's
      names.push_back("pointwise-bf16");
      cands.push_back({false, DataPointwiseBf16});
    }
    if (names.size() > 1) {
      int choice = allBf16 && !lowp ? 1 : 0;
      AMPRT_CHECK(chooseKernel(
          ctx,
          convTuneKey("conv backward-data", cd, p->group, types) + " dx " +
              amprt_dtype_name(dx->dtype),
          names, choice,
          [&](int i) {
            BackwardKernels f = kern;
            std::tie(f.dataBf16, f.dataIm2col) = cands[i];
            return convBackward(x, w, dy, p, cd, dx, nullptr, nullptr, f);
          },
          &choice));
      std::tie(kern.dataBf16, kern.dataIm2col) = cands[choice];
    }
  }
  // im2col + matmul: 2-D, one group, its columns at most 64 MiB.
  const bool depthwise = p->spatial == 2 && p->group > 1 && x->shape[1] == p->group;
  const bool im2colOk = im2colFits(w, dy, p, allBf16 ? 2 : 4);
  // (f16 operands, and bf16 ones without bf16 kernels: both on f32, widened.)
  if (dw && !depthwise && (allBf16 || im2colOk)) {
    std::vector<WeightsKernel> cands;
    std::vector<const char *> names;
    auto add = [&](WeightsKernel wk, const char *name) {
      cands.push_back(wk);
      names.push_back(name);
    };
    if (allBf16)
      add(WeightsBf16, "bf16");
    add(WeightsF32, "f32");
    if (im2colOk && allBf16)
      add(WeightsIm2colBf16, "im2col-bf16");
    if (im2colOk)
      add(WeightsIm2colF32, "im2col-f32");
    if (directAmxFits(x, w, dy, dw, p))
      add(WeightsDirectAmx, "direct-amx");
    int preferred = 0;
    for (size_t i = 0; i < cands.size(); ++i)
      if (cands[i] == kern.weights)
        preferred = (int)i;
    if (cands[preferred] == kern.weights && cands.size() > 1) {
      int choice = preferred;
      AMPRT_CHECK(chooseKernel(
          ctx,
          convTuneKey("conv backward-weights", cd, p->group, types) + " dw " +
              amprt_dtype_name(dw->dtype),
          names, preferred,
          [&](int i) {
            BackwardKernels f = kern;
            f.weights = cands[i];
            return convBackward(x, w, dy, p, cd, nullptr, dw, nullptr, f);
          },
          &choice));
      kern.weights = cands[choice];
    }
  }
  return run();
}

int64_t amprt::im2colConvCallsForTesting() { return im2colCalls.load(); }
bool amprt::bf16KernelsForTesting() { return bf16Kernels(); }
bool amprt::smallMapCol2imForTesting(const amprt_conv_params *p, int64_t n, int64_t c, int64_t h,
                                     int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                                     const float *dcol, bool vector, float *out) {
  const SmallMapCol2im col2im(tapTable(Window(p), kh, kw, oh, ow, h, w), c, kh * kw, n * oh * ow,
                              oh * ow, h * w, vector && oh * ow <= kSmallMap);
  parallelFor(n * c, 1, 1, [&](int64_t r0, int64_t r1) { col2im.run(dcol, r0, r1, out); });
  return col2im.vector;
}
