//===- gemm.cpp - amprt_gemm and amprt_matmul on oneDNN and AMX -----------===//
//
// The epilogue (alpha, beta * C, bias) runs in f32 and rounds once into the
// output type; a bf16 output of bf16 kernels is rounded by oneDNN itself.
// Built with exceptions (oneDNN's C++ API throws): see onednn.h.
//
//===----------------------------------------------------------------------===//

#include "cpu/matmul/matmul.h"
#include "cpu/matmul/onednn.h"

#include "common/check.h"
#include "common/exec_decode.h"
#include "common/matmul_dims.h"
#include "common/workspace.h"
#include "cpu/elementwise/elementwise.h"
#include "host/profile.h"
#include "host/scratch.h"
#include "host/threads.h"
#include "host/tune.h"

#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

using namespace amprt;

namespace {

/// Whether a product of bf16 a and b (key: their bf16 layout, f32 out) runs
/// on oneDNN's bf16 kernels (true) or its f32 ones on widened copies (the
/// same products, exact in f32, summed in f32 either way): timed per shape
/// (chooseKernel); the fixed rule is the bf16 kernels. `into`: where the
/// timed runs may write their f32 product (the caller's f32 result, which
/// its own run then overwrites), or null (a buffer of their own).
amprt_status lowProduct(const amprt_context *ctx, const GemmKey &key, const amprt_tensor *a,
                        const amprt_tensor *b, const float *bias, bool *low, float *into,
                        bool *amx = nullptr) {
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
  // Widening keeps f32 copies of both operands as scratch until the
  // thread's next release: bounded, so that the workspace stays small and
  // the plan's prediction holds; the products that large run well on the
  // bf16 kernels (an lm_head's 50257 x 768 weight: 154 MB widened).
  if (!amxOffered && 4 * (amprt_tensor_numel(a) + amprt_tensor_numel(b)) > kWidenMaxBytes)
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
  std::vector<float> own;
  int choice = 0;
  std::vector<const char *> names = {"bf16", "f32"};
  if (amxOffered)
    names.push_back("amx");
  AMPRT_CHECK(chooseKernel(
      ctx, k, names, 0,
      [&](int i) -> amprt_status {
        try {
          float *out = into;
          if (!out) {
            own.resize((size_t)(key.batch * key.m * key.n));
            out = own.data();
          }
          GemmKey kk = key;
          kk.bf16Out = false;
          if (i == 2) {
            amxProduct(key.m, key.n, key.k, static_cast<const uint16_t *>(a->data), key.lda0,
                       key.lda1, static_cast<const uint16_t *>(b->data), key.ldb0, key.ldb1, out,
                       key.n);
          } else if (i == 0) {
            gemmAcc(kk, a->data, b->data, out, bias);
          } else {
            Operand oa = operandOf(a, true), ob = operandOf(b, true);
            kk.adt = kk.bdt = (int)dnnl::memory::data_type::f32;
            gemmAcc(kk, oa.ptr, ob.ptr, out, bias);
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

/// y's buffer for the tuner's timed f32 products, where y is f32 and
/// shares no byte with the operands `ins` (null ones skipped); else null.
float *timedInto(amprt_tensor *y, std::initializer_list<const amprt_tensor *> ins) {
  if (y->dtype != AMPRT_F32)
    return nullptr;
  const char *y0 = static_cast<const char *>(y->data);
  const char *y1 = y0 + 4 * amprt_tensor_numel(y);
  for (const amprt_tensor *t : ins) {
    if (!t)
      continue;
    // The extent of t's elements (strided views included).
    int64_t last = 0;
    for (int32_t d = 0; d < t->rank; ++d)
      last += (t->shape[d] - 1) * t->strides[d];
    const char *t0 = static_cast<const char *>(t->data);
    const char *t1 = t0 + (last + 1) * (int64_t)amprt_dtype_size(t->dtype);
    if (t0 < y1 && y0 < t1)
      return nullptr;
  }
  return static_cast<float *>(y->data);
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
  thread_local ScratchVec<float> biasWide;
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
                           a, b, biasF32, &low, timedInto(y, {a, b, useC ? c : nullptr}),
                           plain ? &amx : nullptr));
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
  thread_local ScratchVec<float> scratch;
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
  thread_local ScratchVec<float> scratch;
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
    AMPRT_CHECK(lowProduct(ctx, key, a, b, nullptr, &low, timedInto(y, {a, b})));
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
