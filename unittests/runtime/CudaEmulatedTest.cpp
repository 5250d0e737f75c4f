//===- CudaEmulatedTest.cpp - what the CUDA emulation must refuse --------===//
//
// The CUDA backend on an emulated context (AMPRT_CUDA_EMULATE=1: its
// kernels as host loops over host memory), where the emulation must fail
// as a device would instead of hiding the mistake behind host memory:
//   - copies whose device side is not device memory; device-to-device
//     copies of overlapping ranges keep memmove's meaning (cudaMemcpy's is
//     undefined there: the emulated CUDA call refuses it, the backend
//     stages such copies);
//   - AMPRT_CHECK_NUMERICS reading the program's host constants (a copy of
//     the wrong kind on a device, which then blamed the next op);
//   - a CUDA graph launched after a scratch buffer it captured was freed;
//   - cuBLASLt's rules, by its host implementation (lt_host.h): misaligned
//     and mis-strided calls refused; the bias pointer given to the
//     heuristic; no algorithm (the fallback kernel); an epilogue whose ReLU
//     drops NaN (the probe keeps ReLU a second pass);
//   - cuDNN's (dnn_host.h): f32 convolutions taken though cuDNN 9 reports
//     their kernels as CUDNN_DEFAULT_MATH; a misaligned view that cuDNN
//     fails drops the plan of its alignment only.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "lt_host.h"

#include <cstdlib>
#include <cstring>

using namespace amprt_test;

namespace {

// Before any context or amprt_exec call reads them (both are read once).
const int kEnv = [] {
  setenv("AMPRT_CUDA_EMULATE", "1", 1);
  setenv("AMPRT_CHECK_NUMERICS", "1", 1);
  setenv("AMPRT_PROFILE", "1", 1); // the convolution counts, printed when a context closes
  return 0;
}();

void pushTensor(std::vector<int64_t> &d, const amprt_tensor &t, int64_t offset = 0) {
  d.push_back(t.dtype);
  d.push_back(t.rank);
  d.push_back(offset);
  for (int i = 0; i < t.rank; ++i)
    d.push_back(t.shape[i]);
  for (int i = 0; i < t.rank; ++i)
    d.push_back(t.strides[i]);
}

struct Device {
  amprt_context *ctx = nullptr;
  Device() {
    (void)kEnv;
    EXPECT_EQ(amprt_context_create("cuda", &ctx), AMPRT_OK) << amprt_last_error();
  }
  ~Device() { amprt_context_destroy(ctx); }
  /// A device copy of `b` (its tensor's data pointing at device memory).
  amprt_tensor upload(const Buf &b, void **mem) {
    EXPECT_EQ(amprt_device_alloc(ctx, b.bytes.size(), mem), AMPRT_OK) << amprt_last_error();
    EXPECT_EQ(amprt_device_copy(ctx, *mem, b.bytes.data(), b.bytes.size(), 0), AMPRT_OK)
        << amprt_last_error();
    amprt_tensor t = b.t;
    t.data = *mem;
    return t;
  }
};

/// clip_grad_norm of one gradient (its partial sums of squares in a scratch
/// buffer that grows with the gradient): its descriptor and buffers.
struct Clip {
  std::vector<int64_t> desc;
  std::vector<void *> bufs;
  Clip(const amprt_tensor &g, const amprt_tensor &found, const amprt_tensor &out,
       const amprt_tensor &norm) {
    desc = {AMPRT_EXEC_VERSION, AMPRT_OP_CLIP_GRAD_NORM, 4, 2};
    for (const amprt_tensor *t : {&g, &found, &out, &norm})
      pushTensor(desc, *t);
    double maxNorm = 0.5;
    int64_t bits;
    std::memcpy(&bits, &maxNorm, 8);
    desc.push_back(1); // n
    desc.push_back(bits);
    bufs = {g.data, found.data, out.data, norm.data};
  }
};

} // namespace

TEST(CudaEmulated, CopiesRefuseWhatCudaRefuses) {
  Device dev;
  ASSERT_TRUE(dev.ctx);
  std::vector<char> host(256, 1), back(256, 0);
  void *mem = nullptr;
  ASSERT_EQ(amprt_device_alloc(dev.ctx, 256, &mem), AMPRT_OK) << amprt_last_error();
  // Host memory named as the device side of a copy: CUDA's invalid argument.
  EXPECT_EQ(amprt_device_copy(dev.ctx, back.data(), host.data(), 64, 1),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("not this context's device memory"),
            std::string::npos)
      << amprt_last_error();
  EXPECT_EQ(amprt_device_copy(dev.ctx, host.data(), back.data(), 64, 0),
            AMPRT_ERR_INVALID_ARGUMENT);
  // Kind 3 (cudaMemcpyDefault) takes either side.
  EXPECT_EQ(amprt_device_copy(dev.ctx, back.data(), host.data(), 64, 3), AMPRT_OK);
  EXPECT_EQ(amprt_device_copy(dev.ctx, mem, host.data(), 256, 3), AMPRT_OK);
  EXPECT_EQ(amprt_device_copy(dev.ctx, back.data(), mem, 256, 3), AMPRT_OK);
  EXPECT_EQ(back, host);
  // Overlapping device ranges: memmove's meaning (cudaMemcpy's is undefined
  // there and the emulated CUDA call refuses it: the backend stages the copy
  // through scratch memory).
  char *m = static_cast<char *>(mem);
  std::vector<char> ramp(256), want(256), got(256);
  for (int i = 0; i < 256; ++i)
    ramp[i] = (char)i;
  ASSERT_EQ(amprt_device_copy(dev.ctx, mem, ramp.data(), 256, 0), AMPRT_OK);
  want = ramp;
  std::memmove(want.data() + 8, want.data(), 128);
  EXPECT_EQ(amprt_device_copy(dev.ctx, m + 8, m, 128, 2), AMPRT_OK) << amprt_last_error();
  ASSERT_EQ(amprt_device_copy(dev.ctx, got.data(), mem, 256, 1), AMPRT_OK);
  EXPECT_EQ(got, want);
  amprt_device_free(dev.ctx, mem);
}

TEST(CudaEmulated, CheckNumericsReadsTheProgramsHostConstants) {
  // y = x + c with c one of the program's constants (host memory, which only
  // the device executor swaps for its device copy) holding an inf: y's inf
  // comes from a non-finite operand, so AMPRT_CHECK_NUMERICS must say
  // nothing. Reading c with a device-to-host copy failed: c was taken as
  // finite and the op blamed for an inf it did not make.
  Device dev;
  ASSERT_TRUE(dev.ctx);
  Buf x = randn(AMPRT_F32, {16}), c = randn(AMPRT_F32, {16}), y(AMPRT_F32, {16});
  reinterpret_cast<float *>(c.bytes.data())[3] = std::numeric_limits<float>::infinity();
  void *xm, *ym;
  amprt_tensor xd = dev.upload(x, &xm), yd = dev.upload(y, &ym);
  std::vector<int64_t> d = {AMPRT_EXEC_VERSION, AMPRT_OP_BINARY, 3, 1};
  pushTensor(d, xd);
  pushTensor(d, c.t);
  pushTensor(d, yd);
  d.push_back(AMPRT_BINARY_ADD);
  void *bufs[3] = {xm, c.bytes.data(), ym};
  testing::internal::CaptureStderr();
  amprt_status s = (amprt_status)amprt_exec(dev.ctx, d.data(), bufs);
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(s, AMPRT_OK) << amprt_last_error();
  EXPECT_EQ(err.find("check-numerics"), std::string::npos) << err;
  Buf out(AMPRT_F32, {16});
  ASSERT_EQ(amprt_device_copy(dev.ctx, out.bytes.data(), ym, out.bytes.size(), 1), AMPRT_OK);
  EXPECT_TRUE(std::isinf(out.get(3)));
  EXPECT_EQ(out.get(0), (double)((float)x.get(0) + (float)c.get(0)));
  amprt_device_free(dev.ctx, xm);
  amprt_device_free(dev.ctx, ym);
}

TEST(CudaEmulated, AGraphKeepsTheScratchItCaptured) {
  // Capture clip_grad_norm of a small gradient (its partial sums in a
  // scratch buffer), then run a larger one eagerly (the scratch grows),
  // then launch the graph: on a device the graph reads the buffer it
  // captured, which must still be allocated.
  Device dev;
  ASSERT_TRUE(dev.ctx);
  Buf gs = randn(AMPRT_F32, {64}), gl = randn(AMPRT_F32, {1 << 20});
  Buf found(AMPRT_I1, {}), norm(AMPRT_F32, {}), outs(AMPRT_F32, {64}), outl(AMPRT_F32, {1 << 20});
  void *m[6];
  amprt_tensor gsd = dev.upload(gs, &m[0]), gld = dev.upload(gl, &m[1]),
               fd = dev.upload(found, &m[2]), nd = dev.upload(norm, &m[3]),
               osd = dev.upload(outs, &m[4]), old = dev.upload(outl, &m[5]);
  Clip small(gsd, fd, osd, nd), large(gld, fd, old, nd);
  // Once eagerly (the scratch made), then captured.
  ASSERT_EQ(amprt_exec(dev.ctx, small.desc.data(), small.bufs.data()), AMPRT_OK)
      << amprt_last_error();
  ASSERT_EQ(amprt_graph_begin(dev.ctx), AMPRT_OK) << amprt_last_error();
  ASSERT_EQ(amprt_exec(dev.ctx, small.desc.data(), small.bufs.data()), AMPRT_OK)
      << amprt_last_error();
  amprt_graph *g = nullptr;
  ASSERT_EQ(amprt_graph_end(dev.ctx, &g), AMPRT_OK) << amprt_last_error();
  ASSERT_EQ(amprt_exec(dev.ctx, large.desc.data(), large.bufs.data()), AMPRT_OK)
      << amprt_last_error();
  EXPECT_EQ(amprt_graph_launch(dev.ctx, g), AMPRT_OK) << amprt_last_error();
  ASSERT_EQ(amprt_device_synchronize(dev.ctx), AMPRT_OK) << amprt_last_error();
  // The small gradient clipped to norm 0.5 (its norm is ~8).
  Buf out(AMPRT_F32, {64});
  ASSERT_EQ(amprt_device_copy(dev.ctx, out.bytes.data(), m[4], out.bytes.size(), 1), AMPRT_OK);
  double sq = 0;
  for (int i = 0; i < 64; ++i)
    sq += out.get(i) * out.get(i);
  EXPECT_NEAR(std::sqrt(sq), 0.5, 1e-4);
  amprt_graph_destroy(dev.ctx, g);
  for (void *p : m)
    amprt_device_free(dev.ctx, p);
}

namespace {

/// Column-major reference in double: D[m, n] = op(A) op(B) (+ bias[i]).
std::vector<double> refProduct(const Buf &a, const Buf &b, bool ta, bool tb, int64_t m, int64_t n,
                               int64_t k, int64_t lda, int64_t ldb) {
  std::vector<double> r((size_t)(m * n));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += a.get(ta ? p + i * lda : i + p * lda) * b.get(tb ? j + p * ldb : p + j * ldb);
      r[(size_t)(i + j * m)] = s;
    }
  return r;
}

struct HostLt {
  const amprt::cuda::LtApi &api = amprt::cuda::hostLtApi();
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t res{};
  std::vector<std::pair<const char *, size_t>> device; // "device memory"
  HostLt() {
    EXPECT_EQ(api.cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
    amprt::cuda::hostLtAttach(h,
                              [this](const void *p, size_t n) {
                                for (auto [base, bytes] : device)
                                  if (static_cast<const char *>(p) >= base &&
                                      static_cast<const char *>(p) + n <= base + bytes)
                                    return true;
                                return false;
                              },
                              {});
  }
  ~HostLt() {
    for (cublasLtMatrixLayout_t l : {la, lb, lc})
      if (l)
        api.cublasLtMatrixLayoutDestroy(l);
    if (op)
      api.cublasLtMatmulDescDestroy(op);
    if (pref)
      api.cublasLtMatmulPreferenceDestroy(pref);
    api.cublasLtDestroy(h);
  }
  /// D[m, n] = op(A) op(B), column-major f16 operands, f32 D, lds given;
  /// the heuristic told every matrix is aligned to `align` bytes.
  cublasStatus_t plan(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                      int64_t ldc, uint32_t align) {
    EXPECT_EQ(api.cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              CUBLAS_STATUS_SUCCESS);
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    EXPECT_EQ(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob),
              CUBLAS_STATUS_SUCCESS);
    api.cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, ta ? k : m, ta ? m : k, lda);
    api.cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, tb ? n : k, tb ? k : n, ldb);
    api.cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc);
    EXPECT_EQ(api.cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    uint32_t alignCD = std::max<uint32_t>(align, 4); // D is f32
    for (auto [attr, al] : {std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align),
                            std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align),
                            std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignCD),
                            std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignCD)})
      EXPECT_EQ(api.cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al),
                CUBLAS_STATUS_SUCCESS);
    int found = 0;
    cublasStatus_t st =
        api.cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found != 1)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    return st;
  }
  cublasStatus_t run(const void *A, const void *B, void *D) {
    float one = 1.0f, zero = 0.0f;
    return api.cublasLtMatmul(h, op, &one, A, la, B, lb, &zero, D, lc, D, lc, &res.algo, nullptr, 0,
                              nullptr);
  }
};

} // namespace

TEST(CudaEmulated, HostCublasLtComputesWhatCublasLtDefinesAndRefusesBadCalls) {
  // A valid call first: op(A) = A^T (A stored k x m, ld k + 3), op(B) = B
  // (k x n, ld k), f16 operands, f32 D: against a double reference.
  const int64_t m = 5, n = 7, k = 9, lda = k + 3, ldb = k, ldc = m;
  Buf a = randn(AMPRT_F16, {m * lda + 256}), b = randn(AMPRT_F16, {n * ldb + 64}),
      dd(AMPRT_F32, {m * n + 64});
  {
    HostLt lt;
    lt.device = {{reinterpret_cast<const char *>(a.bytes.data()), a.bytes.size()},
                 {reinterpret_cast<const char *>(b.bytes.data()), b.bytes.size()},
                 {reinterpret_cast<const char *>(dd.bytes.data()), dd.bytes.size()}};
    ASSERT_EQ(lt.plan(true, false, m, n, k, lda, ldb, ldc, 2), CUBLAS_STATUS_SUCCESS)
        << amprt::cuda::hostLtLastError();
    ASSERT_EQ(lt.run(a.bytes.data(), b.bytes.data(), dd.bytes.data()), CUBLAS_STATUS_SUCCESS)
        << amprt::cuda::hostLtLastError();
    std::vector<double> ref = refProduct(a, b, true, false, m, n, k, lda, ldb);
    for (int64_t i = 0; i < m * n; ++i)
      EXPECT_NEAR(dd.get(i), ref[(size_t)i], 1e-5 * (1 + std::fabs(ref[(size_t)i]))) << i;
    EXPECT_EQ(amprt::cuda::hostLtMatmuls(lt.h), 1);
    // Matrices the heuristic was told are 16-byte aligned, given at a
    // 2-byte offset: refused (the device would misread them).
    HostLt al;
    al.device = lt.device;
    ASSERT_EQ(al.plan(false, false, 8, 8, 8, 8, 8, 8, 16), CUBLAS_STATUS_SUCCESS)
        << amprt::cuda::hostLtLastError();
    EXPECT_EQ(al.run(a.bytes.data() + 2, b.bytes.data(), dd.bytes.data()),
              CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(std::string(amprt::cuda::hostLtLastError()).find("A at"), std::string::npos)
        << amprt::cuda::hostLtLastError();
    EXPECT_EQ(al.run(a.bytes.data(), b.bytes.data(), dd.bytes.data()), CUBLAS_STATUS_SUCCESS)
        << amprt::cuda::hostLtLastError();
    // Host memory as an operand (not in device memory): a fault on a GPU.
    std::vector<uint16_t> hostB(64, 0x3c00);
    EXPECT_EQ(al.run(a.bytes.data(), hostB.data(), dd.bytes.data()),
              CUBLAS_STATUS_EXECUTION_FAILED);
    // D overlapping A: undefined, refused.
    EXPECT_EQ(al.run(a.bytes.data(), b.bytes.data(), a.bytes.data() + 64),
              CUBLAS_STATUS_INVALID_VALUE);
  }
  {
    // A mis-strided layout: ld < rows (column-major matrices would overlap).
    HostLt lt;
    EXPECT_EQ(lt.plan(false, false, m, n, k, m - 1, k, m, 2), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(std::string(amprt::cuda::hostLtLastError()).find("leading dimension"),
              std::string::npos)
        << amprt::cuda::hostLtLastError();
  }
  {
    // Shapes that do not agree: op(A) m x k, op(B) (k + 1) x n.
    HostLt lt;
    EXPECT_EQ(lt.plan(false, false, m, n, k, m, k + 1, m, 2), CUBLAS_STATUS_SUCCESS)
        << amprt::cuda::hostLtLastError();
    cublasLtMatrixLayout_t bad;
    lt.api.cublasLtMatrixLayoutCreate(&bad, CUDA_R_16F, k + 1, n, k + 1);
    int found = 0;
    EXPECT_EQ(lt.api.cublasLtMatmulAlgoGetHeuristic(lt.h, lt.op, lt.la, bad, lt.lc, lt.lc, lt.pref,
                                                    1, &lt.res, &found),
              CUBLAS_STATUS_INVALID_VALUE);
    lt.api.cublasLtMatrixLayoutDestroy(bad);
    // An attribute set with the wrong size.
    int64_t wide = CUBLAS_OP_T;
    EXPECT_EQ(lt.api.cublasLtMatmulDescSetAttribute(lt.op, CUBLASLT_MATMUL_DESC_TRANSA, &wide,
                                                    sizeof wide),
              CUBLAS_STATUS_INVALID_VALUE);
    // A batch whose D matrices overlap (stride smaller than a matrix).
    int32_t two = 2;
    int64_t small = m * n - 1;
    for (cublasLtMatrixLayout_t l : {lt.la, lt.lb, lt.lc})
      lt.api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two,
                                              sizeof two);
    lt.api.cublasLtMatrixLayoutSetAttribute(lt.lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &small, sizeof small);
    EXPECT_EQ(lt.api.cublasLtMatmulAlgoGetHeuristic(lt.h, lt.op, lt.la, lt.lb, lt.lc, lt.lc,
                                                    lt.pref, 1, &lt.res, &found),
              CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(std::string(amprt::cuda::hostLtLastError()).find("overlap"), std::string::npos)
        << amprt::cuda::hostLtLastError();
    // An f16 product written as bf16: no kernel. (Single matrices again.)
    int32_t onlyOne = 1;
    for (cublasLtMatrixLayout_t l : {lt.la, lt.lb, lt.lc})
      lt.api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &onlyOne,
                                              sizeof onlyOne);
    cublasLtMatrixLayout_t bf;
    lt.api.cublasLtMatrixLayoutCreate(&bf, CUDA_R_16BF, m, n, m);
    EXPECT_EQ(lt.api.cublasLtMatmulAlgoGetHeuristic(lt.h, lt.op, lt.la, lt.lb, bf, bf, lt.pref, 1,
                                                    &lt.res, &found),
              CUBLAS_STATUS_NOT_SUPPORTED);
    lt.api.cublasLtMatrixLayoutDestroy(bf);
  }
}

namespace {

/// gemm through amprt_exec on the emulated device: y[m, n] = a[m, k] b[k, n]
/// + c (a bias row of n elements, at element offset cOff of its buffer),
/// f16 throughout; flags (AMPRT_GEMM_RELU). Returns the status; y in `out`.
amprt_status emulatedGemm(const Buf &a, const Buf &b, const Buf &c, int64_t cOff, int64_t flags,
                          Buf &out) {
  Device dev;
  if (!dev.ctx)
    return AMPRT_ERR_DEVICE;
  int64_t m = a.shape[0], n = b.shape[1];
  void *am, *bm, *cm, *ym;
  amprt_tensor ad = dev.upload(a, &am), bd = dev.upload(b, &bm), cd = dev.upload(c, &cm),
               yd = dev.upload(out, &ym);
  cd.shape[0] = n;
  cd.rank = 1;
  cd.strides[0] = 1;
  std::vector<int64_t> d = {AMPRT_EXEC_VERSION, AMPRT_OP_GEMM, 4, 6};
  pushTensor(d, ad);
  pushTensor(d, bd);
  pushTensor(d, cd, cOff);
  pushTensor(d, yd);
  int64_t one;
  double o = 1.0;
  std::memcpy(&one, &o, 8);
  for (int64_t v : {one, one, (int64_t)0, (int64_t)0, (int64_t)1, flags})
    d.push_back(v);
  void *bufs[4] = {am, bm, cm, ym};
  amprt_status s = (amprt_status)amprt_exec(dev.ctx, d.data(), bufs);
  if (s == AMPRT_OK)
    s = amprt_device_copy(dev.ctx, out.bytes.data(), ym, out.bytes.size(), 1);
  for (void *p : {am, bm, cm, ym})
    amprt_device_free(dev.ctx, p);
  (void)m;
  return s;
}

void expectGemm(const Buf &a, const Buf &b, const Buf &c, int64_t cOff, bool relu, const Buf &y) {
  int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = c.get(cOff + j);
      for (int64_t p = 0; p < k; ++p)
        s += a.get(i * k + p) * b.get(p * n + j);
      bool nan = std::isnan(s);
      if (relu && !nan && s < 0)
        s = 0;
      double got = y.get(i * n + j);
      if (nan)
        EXPECT_TRUE(std::isnan(got)) << i << "," << j;
      else
        EXPECT_NEAR(got, s, 2e-3 * (1 + std::fabs(s))) << i << "," << j;
    }
}

struct EnvVar {
  const char *name;
  EnvVar(const char *n, const char *v) : name(n) { setenv(n, v, 1); }
  ~EnvVar() { unsetenv(name); }
};

} // namespace

TEST(CudaEmulated, TheBiasPointerIsGivenToTheHeuristic) {
  // A bias row at a 2-byte offset (an f16 view starting at element 1): the
  // heuristic must see the pointer (cublasLt.h: its value decides the
  // alignment the algorithm expects). Set only after the heuristic, the
  // algorithm was chosen for a null (fully aligned) bias and the call was
  // refused.
  Buf a = randn(AMPRT_F16, {6, 10}), b = randn(AMPRT_F16, {10, 12}), c = randn(AMPRT_F16, {13}),
      y(AMPRT_F16, {6, 12});
  ASSERT_EQ(emulatedGemm(a, b, c, 1, 0, y), AMPRT_OK) << amprt_last_error();
  expectGemm(a, b, c, 1, false, y);
  Buf y0(AMPRT_F16, {6, 12});
  ASSERT_EQ(emulatedGemm(a, b, c, 0, 0, y0), AMPRT_OK) << amprt_last_error();
  expectGemm(a, b, c, 0, false, y0);
}

TEST(CudaEmulated, NoAlgorithmRunsTheFallbackKernel) {
  // cuBLASLt finding no algorithm (AMPRT_CUDA_EMULATE_LT=no-algorithm)
  // failed the op; now the backend's own kernel computes it (bias row and
  // ReLU included).
  EnvVar e("AMPRT_CUDA_EMULATE_LT", "no-algorithm");
  Buf a = randn(AMPRT_F16, {5, 9}), b = randn(AMPRT_F16, {9, 7}), c = randn(AMPRT_F16, {7}),
      y(AMPRT_F16, {5, 7});
  testing::internal::CaptureStderr();
  amprt_status s = emulatedGemm(a, b, c, 0, AMPRT_GEMM_RELU, y);
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(s, AMPRT_OK) << amprt_last_error();
  expectGemm(a, b, c, 0, true, y);
  EXPECT_NE(err.find("no algorithm"), std::string::npos) << err;
}

TEST(CudaEmulated, AReluEpilogueThatDropsNaNIsNotUsed) {
  // cuBLASLt's ReLU epilogue as fmaxf (NaN -> 0): the context's probe finds
  // it and ReLU stays a second pass, which keeps a NaN of the product.
  for (const char *mode : {"relu-drops-nan", ""}) {
    EnvVar e("AMPRT_CUDA_EMULATE_LT", mode);
    Buf a = randn(AMPRT_F16, {4, 8}), b = randn(AMPRT_F16, {8, 6}), c = randn(AMPRT_F16, {6}),
        y(AMPRT_F16, {4, 6});
    reinterpret_cast<uint16_t *>(a.bytes.data())[3] = 0x7e00; // NaN in row 0
    ASSERT_EQ(emulatedGemm(a, b, c, 0, AMPRT_GEMM_RELU, y), AMPRT_OK) << amprt_last_error();
    expectGemm(a, b, c, 0, true, y);
  }
}

TEST(CudaEmulated, ABadEmulatedCublasLtOptionIsAnError) {
  EnvVar e("AMPRT_CUDA_EMULATE_LT", "fast");
  amprt_context *ctx = nullptr;
  EXPECT_NE(amprt_context_create("cuda", &ctx), AMPRT_OK);
  EXPECT_NE(std::string(amprt_last_error()).find("AMPRT_CUDA_EMULATE_LT=fast"), std::string::npos)
      << amprt_last_error();
}

namespace {

/// conv2d (no bias, stride 1, no padding) of x [n, c, h, w] (at element
/// offset xOff of its buffer) with w [m, c, kh, kw], on one emulated
/// context, `times` calls with the offsets given; the profile's count of
/// calls on cuDNN and on the other path in `dnn`, `ours`.
void emulatedConvs(const Buf &x, const Buf &w, const std::vector<int64_t> &xOffs, Buf &y,
                   int64_t &dnn, int64_t &ours, std::string &err) {
  int64_t n = y.shape[0], c = w.shape[1], h = y.shape[2] + w.shape[2] - 1,
          wd = y.shape[3] + w.shape[3] - 1;
  testing::internal::CaptureStderr();
  {
    Device dev;
    void *xm, *wm, *ym;
    amprt_tensor xd = dev.upload(x, &xm), wt = dev.upload(w, &wm), yd = dev.upload(y, &ym);
    int64_t shape[4] = {n, c, h, wd};
    amprt_tensor xv = amprt_tensor_make(xm, x.dtype, 4, shape);
    (void)xd;
    for (int64_t off : xOffs) {
      std::vector<int64_t> d = {AMPRT_EXEC_VERSION, AMPRT_OP_CONV, 3, 11};
      pushTensor(d, xv, off);
      pushTensor(d, wt);
      pushTensor(d, yd);
      for (int64_t v : {2, 1, 0, 1, 1, 0, 0, 1, 1, 0, 0})
        d.push_back(v);
      void *bufs[3] = {xm, wm, ym};
      EXPECT_EQ(amprt_exec(dev.ctx, d.data(), bufs), AMPRT_OK) << amprt_last_error();
      // Each result against the double reference.
      Buf out = y;
      ASSERT_EQ(amprt_device_copy(dev.ctx, out.bytes.data(), ym, out.bytes.size(), 1), AMPRT_OK);
      int64_t m = w.shape[0], kh = w.shape[2], kw = w.shape[3], oh = y.shape[2], ow = y.shape[3];
      double tol = x.dtype == AMPRT_F32 ? 1e-5 : 4e-3;
      for (int64_t in = 0; in < n; ++in)
        for (int64_t im = 0; im < m; ++im)
          for (int64_t i = 0; i < oh; ++i)
            for (int64_t j = 0; j < ow; ++j) {
              double r = 0;
              for (int64_t ic = 0; ic < c; ++ic)
                for (int64_t a = 0; a < kh; ++a)
                  for (int64_t b = 0; b < kw; ++b)
                    r += x.get(off + ((in * c + ic) * h + i + a) * wd + j + b) *
                         w.get(((im * c + ic) * kh + a) * kw + b);
              int64_t e = ((in * m + im) * oh + i) * ow + j;
              EXPECT_NEAR(out.get(e), r, tol * (1 + std::fabs(r))) << "offset " << off << ", " << e;
            }
    }
    for (void *p : {xm, wm, ym})
      amprt_device_free(dev.ctx, p);
  }
  err = testing::internal::GetCapturedStderr();
  dnn = ours = -1;
  size_t at = err.find(" on cuDNN, ");
  if (at != std::string::npos) {
    size_t b = err.rfind(' ', at - 1);
    dnn = std::atoll(err.c_str() + b + 1);
    ours = std::atoll(err.c_str() + at + 11);
  }
}

} // namespace

TEST(CudaEmulated, F32ConvolutionsRunOnCudnnThoughItReportsDefaultMath) {
  // cuDNN 9 reports f32 kernels as CUDNN_DEFAULT_MATH with CUDNN_FMA_MATH
  // asked for; taking only candidates that said FMA refused every f32
  // convolution (all of them ran as im2col + cuBLASLt).
  Buf x = randn(AMPRT_F32, {2 * 3 * 8 * 8}), w = randn(AMPRT_F32, {4, 3, 3, 3}),
      y(AMPRT_F32, {2, 4, 6, 6});
  int64_t dnn, ours;
  std::string err;
  emulatedConvs(x, w, {0}, y, dnn, ours, err);
  EXPECT_EQ(dnn, 1) << err;
  EXPECT_EQ(ours, 0) << err;
}

TEST(CudaEmulated, AMisalignedViewDropsOnlyItsOwnCudnnPlan) {
  // The same f16 convolution on an aligned input, on a view 2 bytes off
  // (cuDNN's preferred algorithm needs 16-byte aligned tensors: that call
  // fails and runs as im2col + cuBLASLt), then aligned again: the plan of
  // the aligned calls must stand (the alignment is part of its key; it was
  // dropped for every later call of the problem).
  Buf x = randn(AMPRT_F16, {2 * 3 * 8 * 8 + 8}), w = randn(AMPRT_F16, {4, 3, 3, 3}),
      y(AMPRT_F16, {2, 4, 6, 6});
  int64_t dnn, ours;
  std::string err;
  emulatedConvs(x, w, {0, 1, 0}, y, dnn, ours, err);
  EXPECT_EQ(dnn, 2) << err;
  EXPECT_EQ(ours, 1) << err;
  EXPECT_NE(err.find("MISALIGNED"), std::string::npos) << err;
}
