//===- onednn.cpp - oneDNN's engine, operands and product primitives ------===//
//
// Built with exceptions (oneDNN's C++ API throws): see onednn.h.
//
//===----------------------------------------------------------------------===//

#include "cpu/matmul/onednn.h"

#include "common/check.h"
#include "common/exec_decode.h"
#include "cpu/conv/conv.h"
#include "cpu/elementwise/elementwise.h"
#include "host/context.h"
#include "host/profile.h"
#include "host/threads.h"

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace amprt {

dnnl::engine &cpuEngine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

thread_local ScratchVec<WidenBuf> widenPool;

Operand operandOf(const amprt_tensor *t, bool widenBf16) {
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

namespace {

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

struct GemmPrim {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias;
  std::string impl; // oneDNN's implementation (AMPRT_PROFILE shows it)
};

} // namespace

bool reluCannotMeetNaN(const amprt_tensor *x, const amprt_tensor *w, int64_t k, const float *bias,
                       int64_t nbias) {
  double mb = 0.0;
  for (int64_t i = 0; i < nbias; ++i) // a NaN bias makes mb NaN (the test fails)
    mb = !((double)std::fabs(bias[i]) <= mb) ? (double)std::fabs(bias[i]) : mb;
  return maxAbsOrInf(x) * maxAbsOrInf(w) * (double)k * 1.01 + mb * 1.01 < 3.0e38;
}

/// The product into `out`: f32, or bf16 with key.bf16Out (the f32
/// accumulator plus bias and ReLU rounded once, to nearest even, as our
/// conversion does).
void gemmAcc(const GemmKey &key0, const void *a, const void *b, void *out, const float *bias) {
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

bool bf16KernelsForTesting() { return bf16Kernels(); }

} // namespace amprt
