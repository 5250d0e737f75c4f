//===- lt_host.cu - cuBLASLt on the host, for the emulated CUDA context -----===//
//
// See lt_host.h. The rules checked, from cuBLASLt's documentation (the
// comments of cublasLt.h, CUDA 13):
//   - attributes are set with exactly their documented size;
//   - CUBLAS_COMPUTE_32F with CUDA_R_32F scale: A and B of one type, C and D
//     of one type, (A, D) one of (32F, 32F), (16F, 16F), (16F, 32F),
//     (16BF, 16BF), (16BF, 32F); TRANSC only CUBLAS_OP_N;
//   - column-major layouts (CUBLASLT_ORDER_COL) with ld >= rows (matrices
//     must not overlap), rows / cols / ld that fit in int32_t;
//   - op(A) m x k, op(B) k x n, C and D m x n; one batch count for all four;
//     strided batches with non-negative strides, D's matrices apart;
//   - the bias vector (CUBLASLT_EPILOGUE_BIAS / RELU_BIAS): D's type, one
//     element per row of D, in device memory; its pointer's value when the
//     heuristic runs decides the alignment the algorithm expects of it;
//   - the MIN_ALIGNMENT_*_BYTES preferences: the heuristic chooses an
//     algorithm for them (an alignment below the element size: none), and
//     the algorithm then needs its operands aligned so (a pointer, or a
//     later matrix of a batch, less aligned: refused, as the device would
//     misread it or fault);
//   - the algorithm was chosen for this very problem; the workspace it needs
//     is given, 256-byte aligned; every matrix lies in device memory;
//   - D overlaps neither A nor B, and C is D only with the same layout (the
//     in-place case cuBLASLt supports).
// Only what the backend uses is implemented: another attribute, epilogue,
// order or type is CUBLAS_STATUS_NOT_SUPPORTED, named.
//
//===----------------------------------------------------------------------===//

#include "lt_host.h"

#include "device.cuh"
#include "host_library.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace amprt::cuda {

namespace {

using host::as;
using host::refuse;

constexpr cublasStatus_t kInvalid = CUBLAS_STATUS_INVALID_VALUE;
constexpr cublasStatus_t kUnsupported = CUBLAS_STATUS_NOT_SUPPORTED;
constexpr uint64_t kHandleMagic = 0x616d702d6c74680aull, kLayoutMagic = 0x616d702d6c746c0aull,
                   kDescMagic = 0x616d702d6c74640aull, kPrefMagic = 0x616d702d6c74700aull,
                   kAlgoMagic = 0x616d702d6c74610aull;

struct Handle : host::Handle<HostLtOptions> {
  Handle() : host::Handle<HostLtOptions>(kHandleMagic) {}
  int64_t matmuls = 0;
};

struct Layout {
  uint64_t magic = kLayoutMagic;
  int32_t type = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};

struct Desc {
  uint64_t magic = kDescMagic;
  int32_t compute = 0, scale = 0;
  int32_t pointerMode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transA = CUBLAS_OP_N, transB = CUBLAS_OP_N, transC = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  int32_t biasType = -1; // -1: D's type
};

struct Pref {
  uint64_t magic = kPrefMagic;
  uint64_t maxWorkspace = 0;
  uint32_t align[4] = {256, 256, 256, 256}; // A, B, C, D
};

/// The amprt type of a cuBLASLt type, -1 for the ones not implemented.
int32_t amprtType(int32_t t) {
  return t == CUDA_R_32F    ? AMPRT_F32
         : t == CUDA_R_16F  ? AMPRT_F16
         : t == CUDA_R_16BF ? AMPRT_BF16
                            : -1;
}
const char *typeName(int32_t t) {
  return t == CUDA_R_32F    ? "CUDA_R_32F"
         : t == CUDA_R_16F  ? "CUDA_R_16F"
         : t == CUDA_R_16BF ? "CUDA_R_16BF"
                            : "another type";
}
size_t typeSize(int32_t t) { return t == CUDA_R_32F ? 4 : 2; }

template <class T>
cublasStatus_t setAttr(T &field, const void *buf, size_t size, const char *name) {
  if (!buf || size != sizeof(T))
    return refuse(kInvalid, "%s: %zu bytes given, the attribute has %zu", name, size, sizeof(T));
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

uint32_t alignOf(uintptr_t v) {
  uint32_t a = 256;
  while (a > 1 && v % a)
    a /= 2;
  return a;
}

/// A product as cuBLASLt sees it (column-major).
struct Problem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int32_t abType = 0, cdType = 0; // CUDA types
  bool tA = false, tB = false, bias = false, relu = false;
  uint64_t fingerprint() const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : {m, n, k, batch, (int64_t)abType, (int64_t)cdType, (int64_t)tA, (int64_t)tB,
                      (int64_t)bias, (int64_t)relu}) {
      h ^= (uint64_t)v;
      h *= 1099511628211ull;
    }
    return h;
  }
};

cublasStatus_t checkLayout(const Layout *l, const char *name) {
  if (!l)
    return refuse(kInvalid, "%s: not a layout made by cublasLtMatrixLayoutCreate", name);
  if (l->order != CUBLASLT_ORDER_COL)
    return refuse(kUnsupported, "%s: order %d (only CUBLASLT_ORDER_COL is implemented here)", name,
                  l->order);
  if (amprtType(l->type) < 0)
    return refuse(kUnsupported, "%s: data type %d is not implemented here", name, l->type);
  constexpr uint64_t kMax = (uint64_t)std::numeric_limits<int32_t>::max();
  if (l->rows > kMax || l->cols > kMax || l->ld > (int64_t)kMax)
    return refuse(kUnsupported,
                  "%s: rows %llu, cols %llu, ld %lld: cuBLASLt supports values that fit in int32_t",
                  name, (unsigned long long)l->rows, (unsigned long long)l->cols, (long long)l->ld);
  if (l->rows == 0 || l->cols == 0)
    return refuse(kInvalid,
                  "%s: an empty matrix (%llu x %llu): the backend never multiplies one (it fills "
                  "zeros)",
                  name, (unsigned long long)l->rows, (unsigned long long)l->cols);
  if (l->ld < (int64_t)l->rows)
    return refuse(kInvalid,
                  "%s: leading dimension %lld < rows %llu (column-major matrices would overlap)",
                  name, (long long)l->ld, (unsigned long long)l->rows);
  if (l->batch < 1 || l->stride < 0)
    return refuse(kInvalid, "%s: batch count %d, batch stride %lld", name, l->batch,
                  (long long)l->stride);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t checkProblem(const Desc *d, const Layout *a, const Layout *b, const Layout *c,
                            const Layout *dd, Problem &p) {
  if (!d)
    return refuse(kInvalid, "not a matmul descriptor made by cublasLtMatmulDescCreate");
  for (auto [l, name] : {std::make_pair(a, "A"), std::make_pair(b, "B"), std::make_pair(c, "C"),
                         std::make_pair(dd, "D")})
    if (cublasStatus_t st = checkLayout(l, name))
      return st;
  if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
    return refuse(kUnsupported,
                  "compute type %d, scale type %d (only CUBLAS_COMPUTE_32F with CUDA_R_32F is "
                  "implemented here)",
                  d->compute, d->scale);
  if (d->pointerMode != CUBLASLT_POINTER_MODE_HOST)
    return refuse(kUnsupported, "pointer mode %d (only CUBLASLT_POINTER_MODE_HOST here)",
                  d->pointerMode);
  if (a->type != b->type || c->type != dd->type)
    return refuse(kUnsupported, "A %s and B %s, C %s and D %s: A and B (and C and D) share a type",
                  typeName(a->type), typeName(b->type), typeName(c->type), typeName(dd->type));
  bool pairOk = dd->type == CUDA_R_32F || dd->type == a->type;
  if (!pairOk)
    return refuse(kUnsupported,
                  "A / B %s with C / D %s: no CUBLAS_COMPUTE_32F kernel (D must be CUDA_R_32F or "
                  "A's type)",
                  typeName(a->type), typeName(dd->type));
  for (auto [t, name] : {std::make_pair(d->transA, "TRANSA"), std::make_pair(d->transB, "TRANSB")})
    if (t != CUBLAS_OP_N && t != CUBLAS_OP_T)
      return refuse(kUnsupported, "%s %d (CUBLAS_OP_N or CUBLAS_OP_T)", name, t);
  if (d->transC != CUBLAS_OP_N)
    return refuse(kUnsupported, "TRANSC %d: only CUBLAS_OP_N is supported", d->transC);
  uint32_t e = d->epilogue;
  if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_RELU &&
      e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_RELU_BIAS)
    return refuse(kUnsupported,
                  "epilogue %u (DEFAULT, RELU, BIAS and RELU_BIAS are implemented here)", e);
  p.tA = d->transA == CUBLAS_OP_T;
  p.tB = d->transB == CUBLAS_OP_T;
  p.m = (int64_t)(p.tA ? a->cols : a->rows);
  p.k = (int64_t)(p.tA ? a->rows : a->cols);
  int64_t kb = (int64_t)(p.tB ? b->cols : b->rows);
  p.n = (int64_t)(p.tB ? b->rows : b->cols);
  if (kb != p.k)
    return refuse(kInvalid, "op(A) is %lld x %lld but op(B) %lld x %lld", (long long)p.m,
                  (long long)p.k, (long long)kb, (long long)p.n);
  for (auto [l, name] : {std::make_pair(c, "C"), std::make_pair(dd, "D")})
    if ((int64_t)l->rows != p.m || (int64_t)l->cols != p.n)
      return refuse(kInvalid, "%s is %llu x %llu, op(A) op(B) %lld x %lld", name,
                    (unsigned long long)l->rows, (unsigned long long)l->cols, (long long)p.m,
                    (long long)p.n);
  if (a->batch != b->batch || a->batch != c->batch || a->batch != dd->batch)
    return refuse(kInvalid, "batch counts A %d, B %d, C %d, D %d differ", a->batch, b->batch,
                  c->batch, dd->batch);
  p.batch = a->batch;
  if (p.batch > 1 && dd->stride < dd->ld * (int64_t)dd->cols)
    return refuse(kInvalid, "D's batch stride %lld < ld %lld x cols %llu: its matrices overlap",
                  (long long)dd->stride, (long long)dd->ld, (unsigned long long)dd->cols);
  p.bias = e & CUBLASLT_EPILOGUE_BIAS;
  p.relu = e & CUBLASLT_EPILOGUE_RELU;
  if (p.bias && d->biasType != -1 && d->biasType != dd->type)
    return refuse(kUnsupported, "bias type %s with D %s (only D's type is implemented here)",
                  typeName(d->biasType), typeName(dd->type));
  p.abType = a->type;
  p.cdType = dd->type;
  return CUBLAS_STATUS_SUCCESS;
}

/// Bytes from a matrix's first element to the end of its last batch item.
size_t extentBytes(const Layout *l) {
  int64_t elems =
      (int64_t)(l->batch - 1) * l->stride + ((int64_t)l->cols - 1) * l->ld + (int64_t)l->rows;
  return (size_t)elems * typeSize(l->type);
}

/// The alignment an algorithm chosen for `promised` bytes needs of a
/// matrix: its vector width (at most 16 bytes), which the columns and the
/// later matrices of a batch must keep too.
uint32_t needed(uint32_t promised, const Layout *l) {
  size_t es = typeSize(l->type);
  uint32_t v = std::min<uint32_t>(promised, 16);
  v = std::min(v, alignOf((uintptr_t)(l->ld * (int64_t)es)));
  if (l->batch > 1)
    v = std::min(v, alignOf((uintptr_t)(l->stride * (int64_t)es)));
  return std::max<uint32_t>(v, (uint32_t)es);
}

// Algorithm words: 0 magic, 1 the problem's fingerprint, 2..5 the
// alignments needed of A, B, C, D, 6 of the bias.
enum { kAlgoMagicWord, kAlgoProblem, kAlgoAlignA, kAlgoAlignBias = kAlgoAlignA + 4 };

//--- The functions ------------------------------------------------------------

cublasStatus_t ltCreate(cublasLtHandle_t *h) {
  if (!h)
    return refuse(kInvalid, "cublasLtCreate: no handle pointer");
  *h = reinterpret_cast<cublasLtHandle_t>(new Handle());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t ltDestroy(cublasLtHandle_t h) {
  return host::destroyOf<Handle>(h, kHandleMagic, CUBLAS_STATUS_SUCCESS,
                                 CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy");
}

cublasStatus_t descCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute,
                          cudaDataType_t scale) {
  if (!out)
    return refuse(kInvalid, "cublasLtMatmulDescCreate: no descriptor pointer");
  auto *d = new Desc();
  d->compute = compute;
  d->scale = scale;
  *out = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t descDestroy(cublasLtMatmulDesc_t o) {
  return host::destroyOf<Desc>(o, kDescMagic, CUBLAS_STATUS_SUCCESS, kInvalid,
                               "cublasLtMatmulDescDestroy");
}

cublasStatus_t descSet(cublasLtMatmulDesc_t o, cublasLtMatmulDescAttributes_t attr, const void *buf,
                       size_t size) {
  Desc *d = as<Desc>(o, kDescMagic);
  if (!d)
    return refuse(kInvalid, "cublasLtMatmulDescSetAttribute: not a descriptor");
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
    return setAttr(d->compute, buf, size, "CUBLASLT_MATMUL_DESC_COMPUTE_TYPE");
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
    return setAttr(d->scale, buf, size, "CUBLASLT_MATMUL_DESC_SCALE_TYPE");
  case CUBLASLT_MATMUL_DESC_POINTER_MODE:
    return setAttr(d->pointerMode, buf, size, "CUBLASLT_MATMUL_DESC_POINTER_MODE");
  case CUBLASLT_MATMUL_DESC_TRANSA:
    return setAttr(d->transA, buf, size, "CUBLASLT_MATMUL_DESC_TRANSA");
  case CUBLASLT_MATMUL_DESC_TRANSB:
    return setAttr(d->transB, buf, size, "CUBLASLT_MATMUL_DESC_TRANSB");
  case CUBLASLT_MATMUL_DESC_TRANSC:
    return setAttr(d->transC, buf, size, "CUBLASLT_MATMUL_DESC_TRANSC");
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    return setAttr(d->epilogue, buf, size, "CUBLASLT_MATMUL_DESC_EPILOGUE");
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    return setAttr(d->bias, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_POINTER");
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    return setAttr(d->biasType, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE");
  default:
    return refuse(kUnsupported,
                  "cublasLtMatmulDescSetAttribute: attribute %d is not implemented here",
                  (int)attr);
  }
}

cublasStatus_t layoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows,
                            uint64_t cols, int64_t ld) {
  if (!out)
    return refuse(kInvalid, "cublasLtMatrixLayoutCreate: no layout pointer");
  auto *l = new Layout();
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *out = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t layoutDestroy(cublasLtMatrixLayout_t o) {
  return host::destroyOf<Layout>(o, kLayoutMagic, CUBLAS_STATUS_SUCCESS, kInvalid,
                                 "cublasLtMatrixLayoutDestroy");
}

cublasStatus_t layoutSet(cublasLtMatrixLayout_t o, cublasLtMatrixLayoutAttribute_t attr,
                         const void *buf, size_t size) {
  Layout *l = as<Layout>(o, kLayoutMagic);
  if (!l)
    return refuse(kInvalid, "cublasLtMatrixLayoutSetAttribute: not a layout");
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_TYPE: {
    uint32_t t;
    cublasStatus_t st = setAttr(t, buf, size, "CUBLASLT_MATRIX_LAYOUT_TYPE");
    l->type = (int32_t)t;
    return st;
  }
  case CUBLASLT_MATRIX_LAYOUT_ORDER:
    return setAttr(l->order, buf, size, "CUBLASLT_MATRIX_LAYOUT_ORDER");
  case CUBLASLT_MATRIX_LAYOUT_ROWS:
    return setAttr(l->rows, buf, size, "CUBLASLT_MATRIX_LAYOUT_ROWS");
  case CUBLASLT_MATRIX_LAYOUT_COLS:
    return setAttr(l->cols, buf, size, "CUBLASLT_MATRIX_LAYOUT_COLS");
  case CUBLASLT_MATRIX_LAYOUT_LD:
    return setAttr(l->ld, buf, size, "CUBLASLT_MATRIX_LAYOUT_LD");
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
    return setAttr(l->batch, buf, size, "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT");
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
    return setAttr(l->stride, buf, size, "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
  default:
    return refuse(kUnsupported,
                  "cublasLtMatrixLayoutSetAttribute: attribute %d is not implemented here",
                  (int)attr);
  }
}

cublasStatus_t prefCreate(cublasLtMatmulPreference_t *out) {
  if (!out)
    return refuse(kInvalid, "cublasLtMatmulPreferenceCreate: no preference pointer");
  *out = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t prefDestroy(cublasLtMatmulPreference_t o) {
  return host::destroyOf<Pref>(o, kPrefMagic, CUBLAS_STATUS_SUCCESS, kInvalid,
                               "cublasLtMatmulPreferenceDestroy");
}

cublasStatus_t prefSet(cublasLtMatmulPreference_t o, cublasLtMatmulPreferenceAttributes_t attr,
                       const void *buf, size_t size) {
  Pref *p = as<Pref>(o, kPrefMagic);
  if (!p)
    return refuse(kInvalid, "cublasLtMatmulPreferenceSetAttribute: not a preference");
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    return setAttr(p->maxWorkspace, buf, size, "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES");
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
    uint32_t &a = p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES];
    cublasStatus_t st = setAttr(a, buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES");
    if (st == CUBLAS_STATUS_SUCCESS && (a == 0 || (a & (a - 1))))
      return refuse(kInvalid, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES %u: not a power of two",
                    a);
    return st;
  }
  default:
    return refuse(kUnsupported,
                  "cublasLtMatmulPreferenceSetAttribute: attribute %d is not implemented here",
                  (int)attr);
  }
}

cublasStatus_t heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                         cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                         cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t pref, int requested,
                         cublasLtMatmulHeuristicResult_t results[], int *returned) {
  Handle *hh = as<Handle>(h, kHandleMagic);
  Pref *pp = as<Pref>(pref, kPrefMagic);
  if (!hh)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmulAlgoGetHeuristic: not a handle");
  if (!pp || requested < 1 || !results || !returned)
    return refuse(kInvalid, "cublasLtMatmulAlgoGetHeuristic: preference %p, %d results requested",
                  (void *)pref, requested);
  *returned = 0;
  const Desc *d = as<Desc>(op, kDescMagic);
  const Layout *la = as<Layout>(a, kLayoutMagic), *lb = as<Layout>(b, kLayoutMagic),
               *lc = as<Layout>(c, kLayoutMagic), *ld = as<Layout>(dd, kLayoutMagic);
  Problem p;
  if (cublasStatus_t st = checkProblem(d, la, lb, lc, ld, p))
    return st;
  const Layout *lays[4] = {la, lb, lc, ld};
  uint32_t need[4];
  for (int i = 0; i < 4; ++i) {
    if (pp->align[i] < typeSize(lays[i]->type)) {
      host::lastError() = "no algorithm: an alignment promised below the element size";
      return CUBLAS_STATUS_SUCCESS; // none found
    }
    need[i] = needed(pp->align[i], lays[i]);
  }
  if (hh->options.noAlgorithm) {
    host::lastError() = "no algorithm (AMPRT_CUDA_EMULATE_LT=no-algorithm)";
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasLtMatmulHeuristicResult_t &r = results[0];
  std::memset(&r, 0, sizeof r);
  r.algo.data[kAlgoMagicWord] = kAlgoMagic;
  r.algo.data[kAlgoProblem] = p.fingerprint();
  for (int i = 0; i < 4; ++i)
    r.algo.data[kAlgoAlignA + i] = need[i];
  // The bias pointer's value now decides what the algorithm expects of it.
  size_t es = typeSize(ld->type);
  r.algo.data[kAlgoAlignBias] =
      p.bias
          ? std::max<uint32_t>(std::min<uint32_t>(16, d->bias ? alignOf((uintptr_t)d->bias) : 256),
                               (uint32_t)es)
          : 0;
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

/// Dot product of two float runs in 8 interleaved partial sums (f32, as the
/// device's accumulator).
float dot(const float *a, const float *b, int64_t k) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t p = 0;
  for (; p + 8 <= k; p += 8)
    for (int l = 0; l < 8; ++l)
      s[l] += a[p + l] * b[p + l];
  float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; p < k; ++p)
    t += a[p] * b[p];
  return t;
}

cublasStatus_t matmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                      cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b,
                      const void *beta, const void *C, cublasLtMatrixLayout_t c, void *D,
                      cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t *algo, void *work,
                      size_t workBytes, cudaStream_t) {
  Handle *hh = as<Handle>(h, kHandleMagic);
  if (!hh)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmul: not a handle");
  const Desc *d = as<Desc>(op, kDescMagic);
  const Layout *la = as<Layout>(a, kLayoutMagic), *lb = as<Layout>(b, kLayoutMagic),
               *lc = as<Layout>(c, kLayoutMagic), *ld = as<Layout>(dd, kLayoutMagic);
  Problem p;
  if (cublasStatus_t st = checkProblem(d, la, lb, lc, ld, p))
    return st;
  if (!alpha || !beta)
    return refuse(kInvalid, "cublasLtMatmul: alpha / beta missing (host pointers)");
  float al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
  if (!algo || algo->data[kAlgoMagicWord] != kAlgoMagic)
    return refuse(kInvalid, "cublasLtMatmul: no algorithm from cublasLtMatmulAlgoGetHeuristic");
  if (algo->data[kAlgoProblem] != p.fingerprint())
    return refuse(kInvalid, "cublasLtMatmul: the algorithm was chosen for another problem");
  if (!A || !B || !D || (be != 0.0f && !C))
    return refuse(kInvalid, "cublasLtMatmul: a matrix pointer is null");
  const void *ptrs[4] = {A, B, C ? C : D, D};
  const Layout *lays[4] = {la, lb, lc, ld};
  const char *names = "ABCD";
  for (int i = 0; i < 4; ++i) {
    uint32_t need = (uint32_t)algo->data[kAlgoAlignA + i];
    if ((uintptr_t)ptrs[i] % need)
      return refuse(kInvalid,
                    "cublasLtMatmul: %c at %p is not aligned to the %u bytes its algorithm was "
                    "chosen for (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)",
                    names[i], ptrs[i], need, names[i]);
    if (hh->inDevice && !hh->inDevice(ptrs[i], extentBytes(lays[i])))
      return refuse(CUBLAS_STATUS_EXECUTION_FAILED,
                    "cublasLtMatmul: %c [%p, +%zu bytes) is not in device memory (on a GPU: an "
                    "illegal address)",
                    names[i], ptrs[i], extentBytes(lays[i]));
  }
  auto overlap = [](const void *x, size_t nx, const void *y, size_t ny) {
    const char *p = static_cast<const char *>(x), *q = static_cast<const char *>(y);
    return p < q + ny && q < p + nx;
  };
  size_t dBytes = extentBytes(ld);
  for (int i = 0; i < 2; ++i)
    if (overlap(D, dBytes, ptrs[i], extentBytes(lays[i])))
      return refuse(kInvalid, "cublasLtMatmul: D overlaps %c (undefined)", names[i]);
  if (C && be != 0.0f) {
    if (C == D && (lc->ld != ld->ld || lc->stride != ld->stride || lc->type != ld->type))
      return refuse(kInvalid, "cublasLtMatmul: C is D (in place) with a different layout");
    if (C != D && overlap(D, dBytes, C, extentBytes(lc)))
      return refuse(kInvalid, "cublasLtMatmul: C and D overlap without being one matrix");
  }
  size_t es = typeSize(ld->type);
  if (p.bias) {
    uint32_t need = (uint32_t)algo->data[kAlgoAlignBias];
    if (!d->bias)
      return refuse(kInvalid,
                    "cublasLtMatmul: a bias epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    if ((uintptr_t)d->bias % need)
      return refuse(kInvalid,
                    "cublasLtMatmul: the bias at %p is not aligned to the %u bytes its algorithm "
                    "was chosen for (the bias pointer's value when the heuristic ran)",
                    d->bias, need);
    if (hh->inDevice && !hh->inDevice(d->bias, (size_t)p.m * es))
      return refuse(CUBLAS_STATUS_EXECUTION_FAILED,
                    "cublasLtMatmul: the bias [%p, +%zu bytes) is not in device memory", d->bias,
                    (size_t)p.m * es);
  }
  if (workBytes &&
      (!work || (uintptr_t)work % 256 || (hh->inDevice && !hh->inDevice(work, workBytes))))
    return refuse(kInvalid,
                  "cublasLtMatmul: the workspace %p (%zu bytes) is not 256-byte aligned "
                  "device memory",
                  work, workBytes);
  // D = epilogue(alpha op(A) op(B) + beta C + bias), column-major.
  int32_t ab = amprtType(p.abType), cd = amprtType(p.cdType);
  size_t eab = typeSize(p.abType);
  std::vector<float> pa((size_t)(p.m * p.k)), pb((size_t)(p.n * p.k));
  for (int64_t q = 0; q < p.batch; ++q) {
    const char *Aq = static_cast<const char *>(A) + q * la->stride * (int64_t)eab;
    const char *Bq = static_cast<const char *>(B) + q * lb->stride * (int64_t)eab;
    const char *Cq = C ? static_cast<const char *>(C) + q * lc->stride * (int64_t)es : nullptr;
    char *Dq = static_cast<char *>(D) + q * ld->stride * (int64_t)es;
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t r = 0; r < p.k; ++r)
        pa[i * p.k + r] = ldF(Aq, ab, p.tA ? r + i * la->ld : i + r * la->ld);
    for (int64_t j = 0; j < p.n; ++j)
      for (int64_t r = 0; r < p.k; ++r)
        pb[j * p.k + r] = ldF(Bq, ab, p.tB ? j + r * lb->ld : r + j * lb->ld);
    for (int64_t j = 0; j < p.n; ++j)
      for (int64_t i = 0; i < p.m; ++i) {
        float v = al * dot(&pa[i * p.k], &pb[j * p.k], p.k);
        if (be != 0.0f)
          v += be * ldF(Cq, cd, i + j * lc->ld);
        if (p.bias)
          v += ldF(d->bias, cd, i);
        if (p.relu)
          v = hh->options.reluDropsNaN ? std::fmax(v, 0.0f) : (v > 0.0f || v != v ? v : 0.0f);
        stF(Dq, cd, i + j * ld->ld, v);
      }
  }
  ++hh->matmuls;
  return CUBLAS_STATUS_SUCCESS;
}

LtApi makeApi() {
  LtApi t;
  t.cublasLtCreate = ltCreate;
  t.cublasLtDestroy = ltDestroy;
  t.cublasLtMatmul = matmul;
  t.cublasLtMatmulAlgoGetHeuristic = heuristic;
  t.cublasLtMatmulDescCreate = descCreate;
  t.cublasLtMatmulDescDestroy = descDestroy;
  t.cublasLtMatmulDescSetAttribute = descSet;
  t.cublasLtMatmulPreferenceCreate = prefCreate;
  t.cublasLtMatmulPreferenceDestroy = prefDestroy;
  t.cublasLtMatmulPreferenceSetAttribute = prefSet;
  t.cublasLtMatrixLayoutCreate = layoutCreate;
  t.cublasLtMatrixLayoutDestroy = layoutDestroy;
  t.cublasLtMatrixLayoutSetAttribute = layoutSet;
  t.loaded = true;
  return t;
}

} // namespace

const LtApi &hostLtApi() {
  static const LtApi api = makeApi();
  return api;
}

void hostLtAttach(cublasLtHandle_t h, std::function<bool(const void *, size_t)> inDeviceMemory,
                  HostLtOptions options) {
  if (Handle *x = as<Handle>(h, kHandleMagic)) {
    x->inDevice = std::move(inDeviceMemory);
    x->options = options;
  }
}

int64_t hostLtMatmuls(cublasLtHandle_t h) {
  Handle *x = as<Handle>(h, kHandleMagic);
  return x ? x->matmuls : 0;
}

const char *hostLtLastError() { return host::lastError().c_str(); }

} // namespace amprt::cuda
