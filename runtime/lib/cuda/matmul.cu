//===- matmul.cu - matrix products on cuBLASLt ------------------------------===//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"
#include "common/matmul_dims.h"
#include "elementwise.cuh"
#include "lt_host.h"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

/// y = acc * 1 + beta * c (c broadcast), rounded once to y's type; or a
/// conversion of acc alone (no c).
struct AddCF {
  const float *acc;
  View c, y;
  float beta;
  int32_t hasC;
  HD void operator()(int64_t i) const {
    float v = acc[i];
    if (hasC)
      v += beta * ldF(c.data, c.dtype, c.at(i));
    stF(y.data, y.dtype, i, v);
  }
};

//--- Matrix products (cuBLASLt) ------------------------------------------------------

cudaDataType_t cudaType(int32_t t) {
  return t == AMPRT_F16 ? CUDA_R_16F : t == AMPRT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/// A cuBLASLt status as an error; emulated, with the host implementation's
/// reason (lt_host.h).
amprt_status ltFail(const Dev &d, cublasStatus_t st, const char *what) {
  return fail(AMPRT_ERR_DEVICE, "%s: cuBLASLt status %d%s%s", what, (int)st, d.emulate ? ": " : "",
              d.emulate ? hostLtLastError() : "");
}

#define LT_CHECK(call, what)                                                                       \
  do {                                                                                             \
    cublasStatus_t st_ = (call);                                                                   \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                              \
      return ltFail(d, st_, what);                                                                 \
  } while (0)

/// Y_q[m, n] = alpha op(A_q) op(B_q) (+ the bias row, ReLU with NaN kept),
/// row-major, X_q = X + q * sX (elements): one thread per output, an f32
/// sum in k order, rounded once. Where cuBLASLt has no algorithm.
struct GemmFallbackF {
  const char *A, *B, *bias;
  char *Y;
  int32_t abType, yType, ta, tb, relu;
  int64_t m, n, k, sA, sB, sY;
  float alpha;
  HD void operator()(int64_t idx) const {
    int64_t mn = m * n, q = idx / mn, r = idx % mn, i = r / n, j = r % n;
    float acc = 0.0f;
    for (int64_t p = 0; p < k; ++p)
      acc += ldF(A, abType, q * sA + (ta ? p * m + i : i * k + p)) *
             ldF(B, abType, q * sB + (tb ? j * k + p : p * n + j));
    float v = alpha * acc;
    if (bias)
      v += ldF(bias, yType, j);
    if (relu && !(v > 0.0f || v != v))
      v = 0.0f;
    stF(Y, yType, q * sY + i * n + j, v);
  }
};

/// Row-major Y[m, n] (= alpha op(A) op(B) [+ bias row]) for `batch`
/// matrices at strides sA, sB, sY (elements): computed as the column-major
/// Y^T = op(B)^T op(A)^T, so that no operand moves.
amprt_status ltMatmul(Dev &d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A,
                      const void *B, int32_t abType, void *Y, int32_t yType, float alpha,
                      const void *bias, int64_t batch, int64_t sA, int64_t sB, int64_t sY,
                      bool relu) {
  // The operands' alignment (a view may start anywhere): the algorithm is
  // chosen for it.
  auto alignOf = [](const void *p) -> uint32_t {
    uint32_t a = 256;
    while (a > 1 && reinterpret_cast<uintptr_t>(p) % a)
      a /= 2;
    return a;
  };
  // A batch's later matrices start at multiples of its strides.
  size_t eAB = amprt_dtype_size((amprt_dtype)abType), eY = amprt_dtype_size((amprt_dtype)yType);
  auto alignIn = [&](const void *p, int64_t strideBytes) {
    uint32_t a = alignOf(p);
    return batch > 1 ? std::min(a, alignOf(reinterpret_cast<const void *>((uintptr_t)strideBytes)))
                     : a;
  };
  auto fallback = [&] {
    ++d.fallbackCalls;
    return each(&d, batch * m * n,
                GemmFallbackF{static_cast<const char *>(A), static_cast<const char *>(B),
                              static_cast<const char *>(bias), static_cast<char *>(Y), abType,
                              yType, ta, tb, relu, m, n, k, sA, sB, sY, alpha},
                "matmul (fallback kernel)");
  };
  if (d.gemmFallback)
    return fallback();
  uint32_t alA = alignIn(B, sB * (int64_t)eAB), alB = alignIn(A, sA * (int64_t)eAB),
           alC = alignIn(Y, sY * (int64_t)eY), alBias = bias ? alignOf(bias) : 256;
  std::vector<int64_t> key{ta, tb, m,   n,   k,   abType, yType, bias != nullptr, batch, sA,
                           sB, sY, alA, alB, alC, alBias, relu};
  auto it = d.plans.find(key);
  if (it == d.plans.end()) {
    Dev::LtPlan p;
    const char *w = "cuBLASLt matmul setup";
    LT_CHECK(d.lta->cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), w);
    cublasOperation_t opA = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opB = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(
        d.lta->cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA),
        w);
    LT_CHECK(
        d.lta->cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB),
        w);
    if (bias || relu) {
      cublasLtEpilogue_t epi = !relu  ? CUBLASLT_EPILOGUE_BIAS
                               : bias ? CUBLASLT_EPILOGUE_RELU_BIAS
                                      : CUBLASLT_EPILOGUE_RELU;
      LT_CHECK(d.lta->cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                     sizeof epi),
               w);
    }
    // The heuristic reads the bias pointer's value for the alignment the
    // algorithm may expect of it (cublasLt.h): set before it runs (the key
    // holds that alignment, so later calls give one as aligned).
    if (bias)
      LT_CHECK(d.lta->cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                     sizeof bias),
               w);
    // Lt's A is our B, its B our A.
    LT_CHECK(d.lta->cublasLtMatrixLayoutCreate(&p.a, cudaType(abType), tb ? k : n, tb ? n : k,
                                               tb ? k : n),
             w);
    LT_CHECK(d.lta->cublasLtMatrixLayoutCreate(&p.b, cudaType(abType), ta ? m : k, ta ? k : m,
                                               ta ? m : k),
             w);
    LT_CHECK(d.lta->cublasLtMatrixLayoutCreate(&p.c, cudaType(yType), n, m, n), w);
    if (batch > 1) {
      int32_t bc = (int32_t)batch;
      for (auto [lay, stride] :
           {std::make_pair(p.a, sB), std::make_pair(p.b, sA), std::make_pair(p.c, sY)}) {
        LT_CHECK(d.lta->cublasLtMatrixLayoutSetAttribute(lay, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                         &bc, sizeof bc),
                 w);
        LT_CHECK(d.lta->cublasLtMatrixLayoutSetAttribute(
                     lay, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                 w);
      }
    }
    cublasLtMatmulPreference_t pref;
    LT_CHECK(d.lta->cublasLtMatmulPreferenceCreate(&pref), w);
    LT_CHECK(d.lta->cublasLtMatmulPreferenceSetAttribute(pref,
                                                         CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &d.ltWorkBytes, sizeof d.ltWorkBytes),
             w);
    for (auto [attr, al] : {std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alA),
                            std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alB),
                            std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alC),
                            std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alC)})
      LT_CHECK(d.lta->cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al), w);
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublasStatus_t st =
        d.lta->cublasLtMatmulAlgoGetHeuristic(d.lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &h, &found);
    d.lta->cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      d.lta->cublasLtMatmulDescDestroy(p.op);
      for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c})
        d.lta->cublasLtMatrixLayoutDestroy(l);
      // No algorithm with the ReLU epilogue: the caller retries without it
      // (cuBLASLt and a second pass beat the fallback kernel).
      if (relu)
        return fail(AMPRT_ERR_UNSUPPORTED,
                    "cuBLASLt has no algorithm with the ReLU epilogue for this problem");
      if (!d.warnedFallback) {
        d.warnedFallback = true;
        std::fprintf(stderr,
                     "amprt (cuda): cuBLASLt has no algorithm for [%lld, %lld] x [%lld, %lld] (%s "
                     "-> %s, batch %lld, status %d%s%s); such products run on the backend's own "
                     "(slower) kernel\n",
                     (long long)m, (long long)k, (long long)k, (long long)n,
                     amprt_dtype_name((amprt_dtype)abType), amprt_dtype_name((amprt_dtype)yType),
                     (long long)batch, (int)st, d.emulate ? ": " : "",
                     d.emulate ? hostLtLastError() : "");
      }
      p = Dev::LtPlan{};
      p.fallback = true;
    } else {
      p.algo = h.algo;
    }
    it = d.plans.emplace(key, p).first;
  }
  Dev::LtPlan &p = it->second;
  if (p.fallback)
    return fallback();
  ++d.ltCalls;
  if (bias)
    LT_CHECK(d.lta->cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof bias),
             "cuBLASLt bias");
  float beta = 0.0f;
  LT_CHECK(d.lta->cublasLtMatmul(d.lt, p.op, &alpha, B, p.a, A, p.b, &beta, Y, p.c, Y, p.c, &p.algo,
                                 d.ltWork, d.ltWorkBytes, d.stream),
           "cublasLtMatmul");
  return AMPRT_OK;
}

/// `batch` row-major products Y_q[m, n] = op(A_q) op(B_q), X_q = X + q * sX
/// (elements): one strided cuBLASLt call.
amprt_status bmm(Dev &d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A,
                 const void *B, int32_t abType, void *Y, int32_t yType, int64_t batch, int64_t sA,
                 int64_t sB, int64_t sY) {
  return ltMatmul(d, ta, tb, m, n, k, A, B, abType, Y, yType, 1.0f, nullptr, batch, sA, sB, sY);
}

/// Whether cuBLASLt writes this output type from these operands directly.
bool ltWrites(int32_t ab, int32_t y) { return y == AMPRT_F32 || y == ab; }

amprt_status gemm(amprt_context *ctx, Dev &d, const Decoded &dd, const attrs::gemm &a) {
  const auto &t = dd.t;
  bool hasC = a.has_c != 0;
  float alpha = (float)a.alpha, beta = (float)a.beta;
  int ta = (int)a.trans_a, tb = (int)a.trans_b;
  int32_t flags = (int32_t)a.flags.value_or(0);
  const amprt_tensor &A = t[0], &B = t[1], &Y = t.back();
  const amprt_tensor *C = hasC ? &t[2] : nullptr;
  if (flags & ~AMPRT_GEMM_RELU)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): gemm flags %d", flags);
  for (const amprt_tensor *x : {&A, &B, &Y})
    if (x->rank != 2 || !floatType(x->dtype) || !amprt_tensor_is_contiguous(x))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): gemm needs contiguous 2-D float operands");
  if (A.dtype != B.dtype)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): gemm operands differ in type");
  int64_t m = ta ? A.shape[1] : A.shape[0], k = ta ? A.shape[0] : A.shape[1];
  int64_t kb = tb ? B.shape[1] : B.shape[0], n = tb ? B.shape[0] : B.shape[1];
  if (k != kb || Y.shape[0] != m || Y.shape[1] != n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): gemm shapes do not agree");
  View cv{};
  if (C)
    AMPRT_CHECK(broadcastView(*C, Y, "amprt_exec (cuda): gemm c", cv));
  bool fusedRelu = false;
  bool biasRow = C && alpha == 1.0f && beta == 1.0f && C->dtype == Y.dtype && cv.strides[0] == 0 &&
                 cv.strides[1] == 1 && ltWrites(A.dtype, Y.dtype) && k > 0;
  if (m && n) {
    if (k == 0 || !ltWrites(A.dtype, Y.dtype) || (C && !biasRow && beta != 0.0f)) {
      // The product in f32 scratch, then + beta * c, rounded once.
      void *acc;
      AMPRT_CHECK(scratch(d, 0, (size_t)(m * n) * 4, &acc));
      if (k == 0)
        AMPRT_CHECK(each(&d, m * n * 4, FillZeroF{static_cast<char *>(acc)}, "gemm"));
      else
        AMPRT_CHECK(ltMatmul(d, ta, tb, m, n, k, A.data, B.data, A.dtype, acc, AMPRT_F32, alpha,
                             nullptr, 1, 0, 0, 0));
      if (k == 0 && alpha != 1.0f) {
      } // 0 * alpha is 0
      View yv = viewOf(Y);
      AMPRT_CHECK(each(&d, m * n,
                       AddCF{static_cast<const float *>(acc), cv, yv, beta, C && beta != 0.0f},
                       "gemm"));
    } else {
      // ReLU in cuBLASLt's epilogue where it keeps NaN as ours (probed when
      // the context was made), else a second pass.
      fusedRelu = (flags & AMPRT_GEMM_RELU) && d.ltReluKeepsNaN && d.reluEpilogue;
      amprt_status st = ltMatmul(d, ta, tb, m, n, k, A.data, B.data, A.dtype, Y.data, Y.dtype,
                                 alpha, biasRow ? C->data : nullptr, 1, 0, 0, 0, fusedRelu);
      if (st != AMPRT_OK && fusedRelu) { // no algorithm with the ReLU epilogue for this problem
        fusedRelu = false;
        st = ltMatmul(d, ta, tb, m, n, k, A.data, B.data, A.dtype, Y.data, Y.dtype, alpha,
                      biasRow ? C->data : nullptr, 1, 0, 0, 0);
      }
      AMPRT_CHECK(st);
    }
  }
  if ((flags & AMPRT_GEMM_RELU) && !fusedRelu) {
    View yv = viewOf(Y);
    AMPRT_CHECK(each(&d, m * n, UnaryF{yv, yv, AMPRT_UNARY_RELU, 0.0f, 0.0f}, "gemm relu"));
  }
  (void)ctx;
  return AMPRT_OK;
}

amprt_status matmul(Dev &d, const Decoded &dd) {
  const amprt_tensor &A = dd.t[0], &B = dd.t[1], &Y = dd.t[2];
  // A and B dense, or transposed views of dense matrix stacks (read in
  // place: cuBLASLt's transposes).
  int la = matrixLayout(&A), lb = matrixLayout(&B);
  for (const amprt_tensor *x : {&A, &B, &Y})
    if (!floatType(x->dtype) || x->rank < 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): matmul needs float operands");
  if (la < 0 || lb < 0 || !amprt_tensor_is_contiguous(&Y))
    return fail(
        AMPRT_ERR_INVALID_ARGUMENT,
        "amprt_exec (cuda): matmul needs dense operands (or transposed views of dense ones)");
  bool ta = la == 1, tb = lb == 1;
  if (A.dtype != B.dtype)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): matmul operands differ in type");
  MatmulDims md;
  AMPRT_CHECK(matmulDims(&A, &B, &Y, "amprt_exec (cuda): matmul", md));
  int64_t m = md.m, k = md.k, n = md.n, batches = md.batches;
  if (!batches || !m || !n)
    return AMPRT_OK;
  // Per batch the matrix offsets of a and b; one strided call when they are
  // affine in the batch index, else one call per batch.
  std::vector<int64_t> offA(batches), offB(batches);
  for (int64_t q = 0; q < batches; ++q) {
    md.offsets(q, offA[q], offB[q]);
    offA[q] *= m * k;
    offB[q] *= k * n;
  }
  bool affine = true;
  int64_t dA = batches > 1 ? offA[1] - offA[0] : 0, dB = batches > 1 ? offB[1] - offB[0] : 0;
  for (int64_t q = 0; q < batches && affine; ++q)
    affine = offA[q] == q * dA && offB[q] == q * dB;
  // One b for every batch and a's matrices stacked: one product of
  // [batches * m, k] x [k, n].
  if (affine && batches > 1 && dB == 0 && dA == m * k && !ta) {
    m *= batches;
    batches = 1;
    dA = 0;
  }
  bool direct = ltWrites(A.dtype, Y.dtype);
  void *out = Y.data;
  int32_t outType = Y.dtype;
  if (!direct) {
    AMPRT_CHECK(scratch(d, 0, (size_t)(batches * m * n) * 4, &out));
    outType = AMPRT_F32;
  }
  size_t es = amprt_dtype_size((amprt_dtype)A.dtype), ys = amprt_dtype_size((amprt_dtype)outType);
  if (k == 0) {
    AMPRT_CHECK(
        each(&d, batches * m * n * (int64_t)ys, FillZeroF{static_cast<char *>(out)}, "matmul"));
  } else if (affine) {
    AMPRT_CHECK(ltMatmul(d, ta, tb, m, n, k, A.data, B.data, A.dtype, out, outType, 1.0f, nullptr,
                         batches, dA, dB, m * n));
  } else {
    for (int64_t q = 0; q < batches; ++q)
      AMPRT_CHECK(ltMatmul(d, ta, tb, m, n, k, static_cast<const char *>(A.data) + offA[q] * es,
                           static_cast<const char *>(B.data) + offB[q] * es, A.dtype,
                           static_cast<char *>(out) + q * m * n * ys, outType, 1.0f, nullptr, 1, 0,
                           0, 0));
  }
  if (!direct)
    AMPRT_CHECK(each(&d, batches * m * n, CastFloatF{out, Y.data, AMPRT_F32, Y.dtype}, "matmul"));
  return AMPRT_OK;
}

/// The matmul opcodes of amprt_exec (exec.cu dispatches them here).
int32_t execMatMul(amprt_context *ctx, Dev &d, Decoded &dd) {
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_GEMM: {
    attrs::gemm a;
    AMPRT_CHECK(read(dd, a));
    return gemm(ctx, d, dd, a);
  }
  case AMPRT_OP_MATMUL: {
    attrs::matmul a;
    AMPRT_CHECK(read(dd, a));
    return matmul(d, dd);
  }
  default:
    break;
  }
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec (cuda): opcode %lld is not one of the matmul ops", (long long)dd.opcode);
}

} // namespace amprt::cuda
