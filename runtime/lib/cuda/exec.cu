//===- exec.cu - amprt_exec on a CUDA device --------------------------------===//
//
// The CUDA backend of amprt_context ("cuda" / "cuda:N"): device memory,
// copies on the context's stream, and the executor behind amprt_exec, which
// reads the compiled program's descriptors (../cpu/exec_decode.h) and
// launches a kernel per op, with no host synchronisation: the loss scale,
// found_inf, the step counter and the skip decision stay on the device, and
// errors the kernels find (a label outside its classes, an index out of
// range, an overflow at the scale's floor) are recorded in device memory and
// reported by the next amprt_device_synchronize.
//
// Matrix products: cuBLASLt (f16 / bf16 / f32 operands, f32 compute, the
// bias row and a ReLU in the epilogue). Convolutions: cuDNN 9 where it takes
// them, else im2col + cuBLASLt (or direct kernels). The rest: this file's
// kernels (device.cuh: functors run on the GPU or, emulated, on the host).
// cuBLASLt and cuDNN are opened at run time (dlopen).
//
// AMPRT_CUDA_EMULATE=1: the context runs on the host (host memory, the same
// kernels in host loops, matrix products by the CPU runtime) so that the
// executor and the runner's device path are tested without a GPU.
//
//===----------------------------------------------------------------------===//

#include "device.cuh"

#include "../cpu/exec_decode.h"
#include "../cpu/scalar_ops.h"
#include "../cpu/grid_sample.h"

#include <cublasLt.h>
#ifdef AMPRT_HAVE_CUDNN
#include <cudnn.h>
#endif
#include <dlfcn.h>

#include <mutex>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

amprt_status cudaFail(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return AMPRT_OK;
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
    return fail(AMPRT_ERR_NO_DEVICE, "%s: no CUDA device: %s", what, cudaGetErrorString(e));
  return fail(AMPRT_ERR_DEVICE, "%s: CUDA error: %s", what, cudaGetErrorString(e));
}

struct Dev {
  bool emulate = false;
  bool directConv = false; // AMPRT_CUDA_CONV=direct: the direct kernels, not im2col + cuBLASLt
  // AMPRT_CUDA_CONV: cuDNN for the convolutions it takes (auto, the default:
  // where cuDNN loads; cudnn: required), else im2col + cuBLASLt.
  enum DnnMode { kDnnOff, kDnnAuto, kDnnRequired } dnnMode = kDnnAuto;
  void *dnn = nullptr;  // the cuDNN handle, made at the first convolution
  bool dnnTried = false;
  bool ltReluKeepsNaN = false; // cuBLASLt's ReLU epilogue keeps NaN (probed at creation)
  bool reluEpilogue = true;    // AMPRT_CUDA_RELU_EPILOGUE=0: ReLU always a second pass
  // Convolution calls (forward, data and weight gradients counted apart) on
  // cuDNN and on the other paths, printed with the profile.
  int64_t convOnDnn = 0, convOnOurs = 0;
  size_t convChunkBytes = (size_t)512 << 20; // AMPRT_CUDA_CONV_CHUNK: the gathered windows' budget
  bool vec = true; // AMPRT_CUDA_VEC=0: no 16-byte groups in the element-wise kernels, reductions
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void *ltWork = nullptr;
  size_t ltWorkBytes = 0;
  DeviceError *err = nullptr;
  // The dropout generator's state and its jump table (kRngJumps matrices
  // of 64 columns: the step to the power 2^j), in device memory.
  uint64_t *rngState = nullptr, *rngJumps = nullptr;
  // AMPRT_PROFILE=1: each call outside a graph capture between two events;
  // their times are read at the next synchronisation, printed at close.
  bool profile = false;
  std::vector<std::pair<std::string, std::pair<cudaEvent_t, cudaEvent_t>>> timed;
  std::vector<cudaEvent_t> eventPool;
  desc::ProfileTable profileTable;
  bool warned = false;
  int64_t hostSyncs = 0; // times the host waited for the device
  // Graph capture: on the device the stream is capturing; emulated, the
  // calls are recorded here instead of run.
  bool capturing = false;
  struct Call {
    const int64_t *desc;
    std::vector<void *> bufs;
  };
  std::vector<Call> recorded;
  // Memory this context allocated (base -> bytes): any other pointer a
  // descriptor names is one of the program's constants (host memory).
  std::map<const char *, size_t> allocations;
  // Constants copied to the device: host base -> (device copy, bytes).
  std::map<const void *, std::pair<void *, size_t>> constants;
  // Scratch buffers by slot, grown on demand.
  std::vector<std::pair<void *, size_t>> scratch = std::vector<std::pair<void *, size_t>>(13); // 12: cuDNN's workspace
  // cuBLASLt plans by problem.
  struct LtPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
  };
  std::map<std::vector<int64_t>, LtPlan> plans;
  // cuDNN convolution plans by problem (ok = false: cuDNN refused this one,
  // which then runs as im2col + cuBLASLt).
  struct DnnPlan {
    bool ok = false;
    void *x = nullptr, *y = nullptr, *w = nullptr, *conv = nullptr; // descriptors
    int algo = 0;
    size_t work = 0;
  };
  std::map<std::vector<int64_t>, DnnPlan> dnnPlans;
};


/// cuBLASLt, opened at run time (dlopen) by the first context on a real
/// device: a program built with the CUDA backend starts, and runs with
/// --device cpu or emulated, on a machine without the CUDA libraries.
#define AMP_LT_FUNCTIONS(X)                                                    \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic)   \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                       \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate)                      \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)
struct LtApi {
#define AMP_LT_FN(f) decltype(&::f) f = nullptr;
  AMP_LT_FUNCTIONS(AMP_LT_FN)
#undef AMP_LT_FN
  bool loaded = false;
} ltApi;

/// dlopen of a CUDA library: from the loader's path (LD_LIBRARY_PATH, the
/// program's run path), else the toolkit's folder; nullptr (and the first
/// reason in `why`) when none opens.
void *openCudaLibrary(const std::string &name, std::string &why) {
  for (std::string path : {name,
#ifdef AMPRT_CUDA_LIB_DIR
                           std::string(AMPRT_CUDA_LIB_DIR) + "/" + name,
#endif
                           "/usr/local/cuda/lib64/" + name}) {
    if (void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
      return h;
    const char *e = dlerror();
    if (why.empty() && e)
      why = e;
  }
  return nullptr;
}

/// Loads cuBLASLt once: the library of this toolkit's major version.
amprt_status loadCublasLt() {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (ltApi.loaded)
    return AMPRT_OK;
  std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR), why;
  void *h = openCudaLibrary(name, why);
  if (!h)
    return fail(AMPRT_ERR_DEVICE, "cuBLASLt (%s) not found: %s (set LD_LIBRARY_PATH)", name.c_str(),
                why.c_str());
#define AMP_LT_LOAD(f)                                                         \
  if (!(ltApi.f = reinterpret_cast<decltype(ltApi.f)>(dlsym(h, #f))))        \
    return fail(AMPRT_ERR_DEVICE, "%s has no %s", name.c_str(), #f);
  AMP_LT_FUNCTIONS(AMP_LT_LOAD)
#undef AMP_LT_LOAD
  ltApi.loaded = true;
  return AMPRT_OK;
}

#ifdef AMPRT_HAVE_CUDNN
/// cuDNN 9's convolution API, opened at run time as cuBLASLt (the shim
/// libcudnn.so.9 loads its parts itself) by the first convolution on a real
/// device with AMPRT_CUDA_CONV=auto / cudnn.
#define AMP_DNN_FUNCTIONS(X)                                                                       \
  X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnGetErrorString)                          \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor) X(cudnnDestroyTensorDescriptor)     \
  X(cudnnCreateFilterDescriptor) X(cudnnSetFilterNdDescriptor) X(cudnnDestroyFilterDescriptor)     \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)                           \
  X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)                                  \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnGetConvolutionNdForwardOutputDim)                    \
  X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnConvolutionForward)                             \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7) X(cudnnConvolutionBackwardData)                   \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) X(cudnnConvolutionBackwardFilter)
struct DnnApi {
#define AMP_DNN_FN(f) decltype(&::f) f = nullptr;
  AMP_DNN_FUNCTIONS(AMP_DNN_FN)
#undef AMP_DNN_FN
  bool loaded = false;
} dnnApi;

/// Loads cuDNN once (libcudnn.so.<major> of the headers built against).
amprt_status loadCudnn() {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (dnnApi.loaded)
    return AMPRT_OK;
  std::string name = "libcudnn.so." + std::to_string(CUDNN_MAJOR), why;
  void *h = openCudaLibrary(name, why);
  if (!h)
    return fail(AMPRT_ERR_DEVICE, "cuDNN (%s) not found: %s (set LD_LIBRARY_PATH)", name.c_str(), why.c_str());
#define AMP_DNN_LOAD(f)                                                                            \
  if (!(dnnApi.f = reinterpret_cast<decltype(dnnApi.f)>(dlsym(h, #f))))                            \
    return fail(AMPRT_ERR_DEVICE, "%s has no %s", name.c_str(), #f);
  AMP_DNN_FUNCTIONS(AMP_DNN_LOAD)
#undef AMP_DNN_LOAD
  dnnApi.loaded = true;
  return AMPRT_OK;
}
#endif

bool emulated(const Dev &dev) { return dev.emulate; }
cudaStream_t streamOf(const Dev &dev) { return dev.stream; }

namespace {

Dev &devOf(amprt_context *ctx) { return *static_cast<Dev *>(ctx->impl); }

amprt_status rawAlloc(Dev &d, size_t bytes, void **out) {
  size_t rounded = (bytes + 255) / 256 * 256;
  if (rounded == 0)
    rounded = 256;
  if (d.emulate) {
    *out = std::aligned_alloc(256, rounded);
    if (!*out)
      return fail(AMPRT_ERR_OUT_OF_MEMORY, "cuda (emulated): cannot allocate %zu bytes", bytes);
    return AMPRT_OK;
  }
  cudaError_t e = cudaMalloc(out, rounded);
  if (e == cudaErrorMemoryAllocation)
    return fail(AMPRT_ERR_OUT_OF_MEMORY, "cuda: cannot allocate %zu bytes of device memory",
                bytes);
  CUDA_CHECK(e, "cudaMalloc");
  return AMPRT_OK;
}

void rawFree(Dev &d, void *p) {
  if (!p)
    return;
  if (d.emulate)
    std::free(p);
  else
    cudaFree(p);
}

amprt_status rawCopy(Dev &d, void *dst, const void *src, size_t bytes, int32_t kind) {
  if (!bytes)
    return AMPRT_OK;
  if (d.emulate) {
    std::memmove(dst, src, bytes);
    return AMPRT_OK;
  }
  cudaMemcpyKind k = kind == 0 ? cudaMemcpyHostToDevice
                     : kind == 1 ? cudaMemcpyDeviceToHost
                                 : cudaMemcpyDeviceToDevice;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, d.stream), "cudaMemcpyAsync");
  if (kind == 1) { // the caller reads the bytes next
    ++d.hostSyncs;
    CUDA_CHECK(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
  }
  return AMPRT_OK;
}

/// A scratch buffer of at least `bytes` (slot 0..7); valid until the next
/// call for the same slot with more bytes.
amprt_status scratch(Dev &d, int slot, size_t bytes, void **out) {
  auto &s = d.scratch[slot];
  if (s.second < bytes) {
    if (s.first) {
      if (d.capturing)
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "a CUDA graph capture needs %zu bytes of scratch memory that the step did "
                    "not use before it (run the step once before capturing it)", bytes);
      ++d.hostSyncs;
      if (!d.emulate)
        CUDA_CHECK(cudaStreamSynchronize(d.stream), "scratch");
      rawFree(d, s.first);
      s = {nullptr, 0};
    }
    AMPRT_CHECK(rawAlloc(d, bytes, &s.first));
    s.second = bytes;
  }
  *out = s.first;
  return AMPRT_OK;
}

//--- Views ---------------------------------------------------------------------

/// A tensor as the kernels see it (passed by value).
struct View {
  char *data;
  int32_t dtype, rank;
  int64_t shape[AMPRT_MAX_RANK], strides[AMPRT_MAX_RANK];
  /// The element offset of the i-th element in row-major order of `shape`.
  HD int64_t at(int64_t i) const {
    if (rank <= 1) // i < shape[0]: no division (flat() makes most views so)
      return rank ? i * strides[0] : 0;
    int64_t off = 0;
    for (int32_t d = rank - 1; d >= 0; --d) {
      int64_t n = shape[d];
      off += (i % n) * strides[d];
      i /= n;
    }
    return off;
  }
};

View viewOf(const amprt_tensor &t) {
  View v;
  std::memset(&v, 0, sizeof v);
  v.data = static_cast<char *>(t.data);
  v.dtype = t.dtype;
  v.rank = t.rank;
  for (int32_t d = 0; d < t.rank; ++d) {
    v.shape[d] = t.shape[d];
    v.strides[d] = t.strides[d];
  }
  return v;
}

/// The same element order with fewer dims: dims of size 1 dropped and
/// neighbours whose strides chain (stride[d] == stride[d + 1] * shape[d + 1])
/// merged, so a dense tensor or a broadcast row is one or two dims and the
/// element-wise kernels divide less per element. Only for kernels that use
/// nothing but at(i).
View flat(View v) {
  int32_t r = 0;
  for (int32_t d = 0; d < v.rank; ++d) {
    if (v.shape[d] == 1)
      continue;
    if (r > 0 && v.strides[r - 1] == v.strides[d] * v.shape[d]) {
      v.shape[r - 1] *= v.shape[d];
      v.strides[r - 1] = v.strides[d];
      continue;
    }
    v.shape[r] = v.shape[d];
    v.strides[r] = v.strides[d];
    ++r;
  }
  for (int32_t d = 0; d < v.rank; ++d)
    if (v.shape[d] == 0) { // empty: keep one dim of 0 (at() is never called)
      v.shape[0] = 0;
      r = 1;
    }
  for (int32_t d = r; d < AMPRT_MAX_RANK; ++d) {
    v.shape[d] = 1;
    v.strides[d] = 0;
  }
  v.rank = r;
  return v;
}

/// x seen with y's shape (numpy broadcasting): y's shape, x's strides.
amprt_status broadcastView(const amprt_tensor &x, const amprt_tensor &y, const char *what,
                           View &v) {
  v = viewOf(x);
  v.rank = y.rank;
  for (int32_t d = 0; d < y.rank; ++d)
    v.shape[d] = y.shape[d];
  return broadcastStrides(&x, y.rank, y.shape, v.strides, what);
}

/// A view of `t` over `shape` with y's shape where dims of t of size 1 are
/// reduced ones: strides for the kept dims, 0 for the reduced.
int64_t numel(const amprt_tensor &t) { return amprt_tensor_numel(&t); }

//--- Element-wise ----------------------------------------------------------------

struct UnaryF {
  View x, y;
  int32_t op;
  float alpha, beta;
  HD void operator()(int64_t i) const {
    int64_t xo = x.at(i), yo = y.at(i);
    if (floatType(y.dtype)) {
      stF(y.data, y.dtype, yo, applyUnary(op, ldF(x.data, x.dtype, xo), alpha, beta));
    } else {
      int64_t v = ldI(x.data, x.dtype, xo);
      stI(y.data, y.dtype, yo, op == AMPRT_UNARY_RELU && v < 0 ? 0 : v);
    }
  }
};

struct UnaryGradF {
  View x, dy, dx;
  int32_t op;
  float alpha, beta;
  HD void operator()(int64_t i) const {
    float xv = ldF(x.data, x.dtype, x.at(i)), g = ldF(dy.data, dy.dtype, dy.at(i));
    stF(dx.data, dx.dtype, dx.at(i), g * unaryDerivative(op, xv, alpha, beta));
  }
};

struct BinaryF {
  View a, b, y;
  int32_t op;
  DeviceError *err;
  HD void operator()(int64_t i) const {
    int64_t ao = a.at(i), bo = b.at(i), yo = y.at(i);
    if (isCompare(op)) {
      bool r = floatType(a.dtype) ? compareOp<float>(op, ldF(a.data, a.dtype, ao), ldF(b.data, b.dtype, bo))
                                  : compareOp<int64_t>(op, ldI(a.data, a.dtype, ao), ldI(b.data, b.dtype, bo));
      reinterpret_cast<uint8_t *>(y.data)[yo] = r ? 1 : 0;
      return;
    }
    if (floatType(y.dtype)) {
      stF(y.data, y.dtype, yo, binaryF(op, ldF(a.data, a.dtype, ao), ldF(b.data, b.dtype, bo)));
      return;
    }
    bool divByZero = false;
    int64_t r = binaryI(op, ldI(a.data, a.dtype, ao), ldI(b.data, b.dtype, bo), &divByZero);
    if (divByZero)
      recordError(err, ERR_INT_DIV_ZERO, 0, 0, 0);
    stI(y.data, y.dtype, yo, r);
  }
};

HD inline void copyElement(char *dst, const char *src, int64_t es) {
  switch (es) {
  case 1: *dst = *src; break;
  case 2: *reinterpret_cast<uint16_t *>(dst) = *reinterpret_cast<const uint16_t *>(src); break;
  case 4: *reinterpret_cast<uint32_t *>(dst) = *reinterpret_cast<const uint32_t *>(src); break;
  default: *reinterpret_cast<uint64_t *>(dst) = *reinterpret_cast<const uint64_t *>(src); break;
  }
}

struct WhereF {
  View c, a, b, y;
  int64_t es;
  HD void operator()(int64_t i) const {
    bool take = reinterpret_cast<const uint8_t *>(c.data)[c.at(i)] != 0;
    const char *src = take ? a.data + a.at(i) * es : b.data + b.at(i) * es;
    copyElement(y.data + y.at(i) * es, src, es);
  }
};

/// Element i of x (row-major in x's shape) to element i of y (row-major in
/// y's): strided copies, reshapes of strided data.
struct CopyF {
  View x, y;
  int64_t es;
  HD void operator()(int64_t i) const {
    copyElement(y.data + y.at(i) * es, x.data + x.at(i) * es, es);
  }
};

struct CastF {
  View x, y;
  HD void operator()(int64_t i) const {
    int64_t xo = x.at(i), yo = y.at(i);
    if (y.dtype == AMPRT_I1) {
      bool nz = floatType(x.dtype) ? ldF(x.data, x.dtype, xo) != 0.0f : ldI(x.data, x.dtype, xo) != 0;
      stI(y.data, y.dtype, yo, nz);
    } else if (floatType(y.dtype)) {
      float v = floatType(x.dtype) ? ldF(x.data, x.dtype, xo)
                                   : (float)(double)ldI(x.data, x.dtype, xo);
      stF(y.data, y.dtype, yo, v);
    } else if (floatType(x.dtype)) {
      stI(y.data, y.dtype, yo, floatToInt(ldF(x.data, x.dtype, xo)));
    } else {
      stI(y.data, y.dtype, yo, ldI(x.data, x.dtype, xo));
    }
  }
};

//--- Element-wise in groups of 16-byte accesses ----------------------------------
//
// The float element-wise ops (unary, its gradient, binary, float casts) over
// operands whose elements come in runs of kVec: one thread per group of
// kVec consecutive output elements, each dense operand read with one or two
// 16-byte loads (f16 / bf16: one, f32: two) and the output written so; a
// broadcast operand whose group is one element (a stride 0 innermost) read
// once. The per-element formulas are the scalar kernels' (results bit for
// bit the same); the last, partial group goes element by element.

constexpr int kVec = 8;
enum VecMode : int32_t { VEC_NONE = 0, VEC_DENSE = 1, VEC_SPLAT = 2 };

/// How a flattened view can be read in groups of kVec consecutive elements
/// (of the output's order): every group within one run of the innermost
/// dim, dense ones 16-byte aligned.
VecMode vecMode(const View &v) {
  if (!floatType(v.dtype))
    return VEC_NONE;
  if (v.rank == 0)
    return VEC_SPLAT;
  int32_t in = v.rank - 1;
  if (v.rank > 1 && v.shape[in] % kVec)
    return VEC_NONE;
  if (v.strides[in] == 0)
    return VEC_SPLAT;
  if (v.strides[in] != 1 || reinterpret_cast<uintptr_t>(v.data) % 16)
    return VEC_NONE;
  for (int32_t d = 0; d < in; ++d)
    if (v.strides[d] % kVec)
      return VEC_NONE;
  return VEC_DENSE;
}

#ifndef __CUDA_ARCH__
/// Emulated, a 16-byte access the device could not make stops the process
/// (on the device it is a misaligned-address fault).
inline void misaligned16(const void *p) {
  if (reinterpret_cast<uintptr_t>(p) % 16) {
    std::fprintf(stderr, "amprt (cuda, emulated): a 16-byte access at %p is not 16-byte aligned\n", p);
    std::abort();
  }
}
#endif

/// The 16-bit element k of 32-bit words (little-endian, as memory has it).
HD inline uint32_t half16(const uint32_t *w, int k) { return (w[k >> 1] >> (16 * (k & 1))) & 0xffffu; }

/// The kVec float elements of type t at element offset o of data, where
/// they lie in 16-byte aligned memory: one or two 16-byte loads.
HD inline void loadRun8(const char *data, int32_t t, int64_t o, float *out) {
  bool f32 = t == AMPRT_F32;
  const char *p = data + o * (f32 ? 4 : 2);
  uint32_t w[kVec];
#ifdef __CUDA_ARCH__
  uint4 a = reinterpret_cast<const uint4 *>(p)[0];
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
  if (f32) {
    uint4 b = reinterpret_cast<const uint4 *>(p)[1];
    w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  }
#else
  misaligned16(p);
  std::memcpy(w, p, f32 ? 32 : 16);
#endif
#pragma unroll
  for (int k = 0; k < kVec; ++k)
    out[k] = f32 ? floatOf(w[k])
             : t == AMPRT_F16 ? floatOf(bits::f16ToF32((uint16_t)half16(w, k)))
                              : floatOf(bits::bf16ToF32((uint16_t)half16(w, k)));
}

/// Elements [i0, i0 + kVec) of v (mode != VEC_NONE) as floats.
HD inline void load8(const View &v, int32_t mode, int64_t i0, float *out) {
  int64_t o = v.at(i0);
  if (mode == VEC_SPLAT) {
    float s = ldF(v.data, v.dtype, o);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      out[k] = s;
    return;
  }
  loadRun8(v.data, v.dtype, o, out);
}

/// Stores val into elements [i0, i0 + kVec) of a VEC_DENSE view.
HD inline void store8(const View &v, int64_t i0, const float *val) {
  bool f32 = v.dtype == AMPRT_F32;
  char *p = v.data + v.at(i0) * (f32 ? 4 : 2);
  uint32_t w[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (f32) {
      w[k] = bitsOf(val[k]);
    } else {
      uint32_t h = v.dtype == AMPRT_F16 ? bits::f32ToF16(bitsOf(val[k])) : bits::f32ToBf16(bitsOf(val[k]));
      w[k >> 1] = (k & 1) ? (w[k >> 1] | (h << 16)) : h;
    }
  }
#ifdef __CUDA_ARCH__
  reinterpret_cast<uint4 *>(p)[0] = make_uint4(w[0], w[1], w[2], w[3]);
  if (f32)
    reinterpret_cast<uint4 *>(p)[1] = make_uint4(w[4], w[5], w[6], w[7]);
#else
  misaligned16(p);
  std::memcpy(p, w, f32 ? 32 : 16);
#endif
}

/// y[i] = op(in[0][i], ..., in[N-1][i]) in groups of kVec (index = group).
template <int N, class Op> struct Vec8F {
  View in[N], y;
  int32_t mode[N];
  int64_t n;
  Op op;
  HD void operator()(int64_t g) const {
    int64_t i0 = g * kVec;
    if (i0 + kVec <= n) {
      float v[N][kVec], r[kVec];
#pragma unroll
      for (int j = 0; j < N; ++j)
        load8(in[j], mode[j], i0, v[j]);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        float a[N];
#pragma unroll
        for (int j = 0; j < N; ++j)
          a[j] = v[j][k];
        r[k] = op(a);
      }
      store8(y, i0, r);
      return;
    }
    for (int64_t i = i0; i < n; ++i) {
      float a[N];
      for (int j = 0; j < N; ++j)
        a[j] = ldF(in[j].data, in[j].dtype, in[j].at(i));
      stF(y.data, y.dtype, y.at(i), op(a));
    }
  }
};

struct UnaryOp {
  int32_t op;
  float alpha, beta;
  HD float operator()(const float *a) const { return applyUnary<false>(op, a[0], alpha, beta); }
};
struct UnaryGradOp {
  int32_t op;
  float alpha, beta;
  HD float operator()(const float *a) const { return a[1] * unaryDerivative<false>(op, a[0], alpha, beta); }
};
struct BinaryOp {
  int32_t op;
  HD float operator()(const float *a) const { return binaryF(op, a[0], a[1]); }
};
struct CastOp {
  HD float operator()(const float *a) const { return a[0]; }
};

/// The grouped launch of op over the flattened views in -> y when every
/// operand allows it (else *done = false and nothing runs).
template <int N, class Op>
amprt_status eachVec8(Dev &d, const View (&in)[N], const View &y, int64_t n, const Op &op,
                      const char *what, bool *done) {
  *done = false;
  if (!d.vec || n < kVec || vecMode(y) != VEC_DENSE)
    return AMPRT_OK;
  Vec8F<N, Op> f;
  for (int j = 0; j < N; ++j) {
    f.in[j] = in[j];
    f.mode[j] = vecMode(in[j]);
    if (f.mode[j] == VEC_NONE)
      return AMPRT_OK;
  }
  f.y = y;
  f.n = n;
  f.op = op;
  *done = true;
  return each(&d, (n + kVec - 1) / kVec, f, what);
}

struct FillZeroF {
  char *p;
  HD void operator()(int64_t i) const { p[i] = 0; }
};

/// Gather along `axis`: y = data[..., idx[...], ...].
struct GatherF {
  View data, idx, y;
  int32_t axis;
  int64_t es;
  DeviceError *err;
  HD void operator()(int64_t lin) const {
    int64_t c[AMPRT_MAX_RANK];
    int64_t rem = lin;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      c[d] = rem % y.shape[d];
      rem /= y.shape[d];
    }
    int64_t ioff = 0;
    for (int32_t d = 0; d < idx.rank; ++d)
      ioff += c[axis + d] * idx.strides[d];
    int64_t limit = data.shape[axis];
    int64_t k = ldI(idx.data, idx.dtype, ioff);
    if (k < -limit || k >= limit) {
      recordError(err, ERR_INDEX, k, limit, 0);
      k = 0;
    } else if (k < 0) {
      k += limit;
    }
    int64_t doff = k * data.strides[axis];
    for (int32_t d = 0; d < axis; ++d)
      doff += c[d] * data.strides[d];
    for (int32_t d = axis + 1; d < data.rank; ++d)
      doff += c[d - 1 + idx.rank] * data.strides[d];
    int64_t yoff = 0;
    for (int32_t d = 0; d < y.rank; ++d)
      yoff += c[d] * y.strides[d];
    copyElement(y.data + yoff * es, data.data + doff * es, es);
  }
};

/// The gather's gradient into an f32 accumulator (dense ddata layout):
/// atomic adds on the device, in order on the host.
struct GatherGradF {
  View idx, dy;
  float *acc;
  int32_t axis, ddRank;
  int64_t ddShape[AMPRT_MAX_RANK], dense[AMPRT_MAX_RANK];
  DeviceError *err;
  HD void operator()(int64_t lin) const {
    int64_t c[AMPRT_MAX_RANK];
    int64_t rem = lin, yoff = 0;
    for (int32_t d = dy.rank - 1; d >= 0; --d) {
      c[d] = rem % dy.shape[d];
      rem /= dy.shape[d];
      yoff += c[d] * dy.strides[d];
    }
    int64_t ioff = 0;
    for (int32_t d = 0; d < idx.rank; ++d)
      ioff += c[axis + d] * idx.strides[d];
    int64_t limit = ddShape[axis];
    int64_t k = ldI(idx.data, idx.dtype, ioff);
    if (k < -limit || k >= limit) {
      recordError(err, ERR_INDEX, k, limit, 0);
      return;
    }
    if (k < 0)
      k += limit;
    int64_t doff = k * dense[axis];
    for (int32_t d = 0; d < axis; ++d)
      doff += c[d] * dense[d];
    for (int32_t d = axis + 1; d < ddRank; ++d)
      doff += c[d - 1 + idx.rank] * dense[d];
    addTo(acc + doff, ldF(dy.data, dy.dtype, yoff));
  }
};

/// GatherElements: y's element lin reads data at y's coordinates with the
/// axis one replaced by the index (`dataStrides` data's, or ddata's dense
/// ones for the gradient). Shared by the forward (copy) and the gradient
/// (an f32 atomic add on the device, in order on the host).
struct GatherElementsF {
  View data, idx, y;
  int32_t axis;
  int64_t es;
  float *acc; // the gradient's accumulator, or null for the forward
  int64_t limit, dataStrides[AMPRT_MAX_RANK];
  DeviceError *err;
  HD void operator()(int64_t lin) const {
    int64_t c[AMPRT_MAX_RANK];
    int64_t rem = lin;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      c[d] = rem % y.shape[d];
      rem /= y.shape[d];
    }
    int64_t ioff = 0, yoff = 0, doff = 0;
    for (int32_t d = 0; d < y.rank; ++d) {
      ioff += c[d] * idx.strides[d];
      yoff += c[d] * y.strides[d];
      if (d != axis)
        doff += c[d] * dataStrides[d];
    }
    int64_t k = ldI(idx.data, idx.dtype, ioff);
    if (k < -limit || k >= limit) {
      recordError(err, ERR_INDEX, k, limit, 0);
      return;
    }
    doff += (k < 0 ? k + limit : k) * dataStrides[axis];
    if (acc)
      addTo(acc + doff, ldF(y.data, y.dtype, yoff));
    else
      copyElement(y.data + yoff * es, data.data + doff * es, es);
  }
};

/// CumSum: one line per thread, the CPU's order (f32 / int64 running total).
struct CumsumF {
  View x, y;
  int32_t axis;
  bool exclusive, reverse;
  HD void operator()(int64_t line) const {
    // line's coordinates over x's dims without the axis.
    int64_t xo = 0, yo = 0, rem = line;
    for (int32_t d = x.rank - 1; d >= 0; --d) {
      if (d == axis)
        continue;
      int64_t c = rem % x.shape[d];
      rem /= x.shape[d];
      xo += c * x.strides[d];
      yo += c * y.strides[d];
    }
    int64_t len = x.shape[axis], xs = x.strides[axis], ys = y.strides[axis];
    if (floatType(x.dtype))
      cumsumScan<float>(
          len, exclusive, reverse, [&](int64_t i) { return ldF(x.data, x.dtype, xo + i * xs); },
          [&](int64_t i, float v) { stF(y.data, y.dtype, yo + i * ys, v); });
    else
      cumsumScan<int64_t>(
          len, exclusive, reverse, [&](int64_t i) { return ldI(x.data, x.dtype, xo + i * xs); },
          [&](int64_t i, int64_t v) { stI(y.data, y.dtype, yo + i * ys, v); });
  }
};

/// GridSample: one output point per thread (its taps once, then every
/// channel); the gradient adds dx with f32 atomics (an f32 accumulator) and
/// writes the point's dgrid.
struct GridSampleF {
  View x, grid, y; // y: the output, or dy for the gradient
  int32_t mode, pad;
  bool align;
  float *dx;   // gradient: the f32 accumulator of dx (or null)
  View dgrid;  // gradient: dgrid (data null to skip)
  bool grad;
  HD void operator()(int64_t p) const {
    int64_t C = x.shape[1], H = x.shape[2], W = x.shape[3], Ho = grid.shape[1], Wo = grid.shape[2];
    int64_t n = p / (Ho * Wo), h = p / Wo % Ho, w = p % Wo;
    int64_t go = n * grid.strides[0] + h * grid.strides[1] + w * grid.strides[2];
    amprt_gs::Taps t;
    amprt_gs::taps(ldF(grid.data, grid.dtype, go), ldF(grid.data, grid.dtype, go + grid.strides[3]), H, W, mode,
                   pad, align, t);
    float gx = 0.0f, gy = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      int64_t xb = n * x.strides[0] + c * x.strides[1];
      int64_t yo = n * y.strides[0] + c * y.strides[1] + h * y.strides[2] + w * y.strides[3];
      if (!grad) {
        float acc = t.nan ? NAN : 0.0f;
        for (int k = 0; k < t.n; ++k)
          if (t.off[k] >= 0)
            acc += t.w[k] * ldF(x.data, x.dtype, xb + (t.off[k] / W) * x.strides[2] + (t.off[k] % W) * x.strides[3]);
        stF(y.data, y.dtype, yo, acc);
        continue;
      }
      float g = ldF(y.data, y.dtype, yo);
      for (int k = 0; k < t.n; ++k) {
        if (t.off[k] < 0)
          continue;
        if (dx)
          addTo(dx + (n * C + c) * H * W + t.off[k], t.w[k] * g);
        if (dgrid.data) {
          float v = ldF(x.data, x.dtype, xb + (t.off[k] / W) * x.strides[2] + (t.off[k] % W) * x.strides[3]);
          gx += t.wx[k] * v * g;
          gy += t.wy[k] * v * g;
        }
      }
    }
    if (grad && dgrid.data) {
      int64_t o = ((n * Ho + h) * Wo + w) * 2;
      stF(dgrid.data, dgrid.dtype, o, t.nan ? NAN : gx * t.mx);
      stF(dgrid.data, dgrid.dtype, o + 1, t.nan ? NAN : gy * t.my);
    }
  }
};

/// TopK: one row per thread, the k best kept sorted in the outputs as the
/// row is scanned (an insertion each time an element beats the k-th).
struct TopKF {
  View x, v, idx;
  int32_t axis;
  int64_t k, es;
  bool largest;
  HD void operator()(int64_t row) const {
    int64_t xo = 0, vo = 0, io = 0, rem = row;
    for (int32_t d = x.rank - 1; d >= 0; --d) {
      if (d == axis)
        continue;
      int64_t c = rem % x.shape[d];
      rem /= x.shape[d];
      xo += c * x.strides[d];
      vo += c * v.strides[d];
      io += c * idx.strides[d];
    }
    int64_t len = x.shape[axis], xs = x.strides[axis], is = idx.strides[axis];
    int64_t *ix = reinterpret_cast<int64_t *>(idx.data) + io;
    int64_t have = 0;
    for (int64_t i = 0; i < len; ++i) {
      float a = ldF(x.data, x.dtype, xo + i * xs);
      if (have == k && !topBefore(a, i, ldF(x.data, x.dtype, xo + ix[(k - 1) * is] * xs), ix[(k - 1) * is], largest))
        continue;
      int64_t j = have < k ? have++ : k - 1;
      for (; j > 0; --j) {
        int64_t p = ix[(j - 1) * is];
        if (!topBefore(a, i, ldF(x.data, x.dtype, xo + p * xs), p, largest))
          break;
        ix[j * is] = p;
      }
      ix[j * is] = i;
    }
    for (int64_t j = 0; j < k; ++j)
      copyElement(v.data + (vo + j * v.strides[axis]) * es, x.data + (xo + ix[j * is] * xs) * es, es);
  }
};

/// ArgMax / ArgMin: one output slot per thread, scanning the axis.
struct ArgReduceF {
  View x, y;
  int32_t axis;
  bool min, last;
  HD void operator()(int64_t lin) const {
    int64_t c[AMPRT_MAX_RANK];
    int64_t rem = lin;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      c[d] = rem % y.shape[d];
      rem /= y.shape[d];
    }
    int64_t xoff = 0, yoff = 0;
    for (int32_t d = 0; d < y.rank; ++d) {
      xoff += c[d] * x.strides[d];
      yoff += c[d] * y.strides[d];
    }
    reinterpret_cast<int64_t *>(y.data)[yoff] =
        floatType(x.dtype) ? scan<true>(xoff) : scan<false>(xoff);
  }
  /// The index of the extreme along the axis from xoff (floats or int64s).
  template <bool Float> HD int64_t scan(int64_t xoff) const {
    int64_t best = 0, len = x.shape[axis], st = x.strides[axis];
    auto load = [&](int64_t o) {
      if constexpr (Float)
        return ldF(x.data, x.dtype, o);
      else
        return ldI(x.data, x.dtype, o);
    };
    auto bv = load(xoff);
    for (int64_t i = 1; i < len; ++i) {
      auto v = load(xoff + i * st);
      if (argBetter(v, bv, min, last))
        bv = v, best = i;
    }
    return best;
  }
};

//--- Dropout (the CPU's generator, jumped ahead) ----------------------------------

constexpr int kRngJumps = 48; // elements per dropout call < 2^48
constexpr int64_t kDropoutChunk = 256; // elements per thread (one jump each)

/// The state k steps after s: the product of the jump matrices of k's bits.
HD inline uint64_t rngJump(const uint64_t *jumps, uint64_t s, int64_t k) {
  for (int j = 0; k && j < kRngJumps; ++j, k >>= 1) {
    if (!(k & 1))
      continue;
    const uint64_t *col = jumps + 64 * j;
    uint64_t r = 0;
    for (int b = 0; b < 64; ++b)
      r ^= col[b] & (0 - ((s >> b) & 1));
    s = r;
  }
  return s;
}

/// The 64 columns of the step's matrix to the powers 2^0 .. 2^47.
const std::vector<uint64_t> &rngJumpTable() {
  static const std::vector<uint64_t> table = [] {
    std::vector<uint64_t> t((size_t)kRngJumps * 64);
    for (int b = 0; b < 64; ++b)
      t[b] = ops::rngStep(uint64_t(1) << b);
    for (int j = 1; j < kRngJumps; ++j) // M^(2^j) = M^(2^(j-1)) squared
      for (int b = 0; b < 64; ++b) {
        uint64_t v = t[64 * (j - 1) + b], r = 0;
        for (int c = 0; c < 64; ++c)
          if ((v >> c) & 1)
            r ^= t[64 * (j - 1) + c];
        t[64 * j + b] = r;
      }
    return t;
  }();
  return table;
}

/// Inverted dropout over kDropoutChunk elements per index (y's row-major
/// order): element i draws from the state i + 1 steps after *state, keeps
/// x * keepScale where the uniform >= ratio (amprt_dropout's definition).
struct DropoutF {
  View x, y;
  uint8_t *mask;
  const uint64_t *state, *jumps;
  int64_t n;
  float ratio, keepScale;
  HD void operator()(int64_t c) const {
    int64_t i0 = c * kDropoutChunk, i1 = i0 + kDropoutChunk < n ? i0 + kDropoutChunk : n;
    uint64_t s = rngJump(jumps, *state, i0);
    for (int64_t i = i0; i < i1; ++i) {
      s = ops::rngStep(s);
      bool keep = ops::rngUniform(s) >= ratio;
      stF(y.data, y.dtype, y.at(i), keep ? ldF(x.data, x.dtype, x.at(i)) * keepScale : 0.0f);
      if (mask)
        mask[i] = keep;
    }
  }
};

/// amprt_random over kDropoutChunk elements per index (y contiguous, in
/// row-major order; element i takes draws i * steps + 1 .. i * steps + steps
/// after *state, as the CPU's loop). A bernoulli probability outside [0, 1]
/// is recorded as a device error (its element is 0).
struct RandomF {
  void *y;
  const void *p;
  int32_t yt, pt, kind, steps;
  double a, b;
  const uint64_t *state, *jumps;
  int64_t n;
  DeviceError *err;
  HD void operator()(int64_t c) const {
    int64_t i0 = c * kDropoutChunk, i1 = i0 + kDropoutChunk < n ? i0 + kDropoutChunk : n;
    uint64_t s = rngJump(jumps, *state, i0 * steps);
    for (int64_t i = i0; i < i1; ++i) {
      s = ops::rngStep(s);
      float u1 = ops::rngUniform(s), u2 = 0.0f, pv = 0.0f;
      if (steps == 2) {
        s = ops::rngStep(s);
        u2 = ops::rngUniform(s);
      }
      if (p) {
        pv = ldF(p, pt, i);
        if (!(pv >= 0.0f && pv <= 1.0f)) {
          uint32_t bits;
          memcpy(&bits, &pv, 4);
          recordError(err, ERR_PROBABILITY, bits, i, 0);
          pv = 0.0f;
        }
      }
      stF(y, yt, i, (float)ops::randomValue(kind, a, b, u1, u2, pv));
    }
  }
};

/// *state moves n steps on (after the draws that read it).
struct RngAdvanceF {
  uint64_t *state;
  const uint64_t *jumps;
  int64_t n;
  HD void operator()(int64_t) const { *state = rngJump(jumps, *state, n); }
};

//--- Reductions, softmax, normalisation, losses (sums in double) ---------------

/// One output slot of a reduction: x's elements over the reduced dims, in
/// row-major order (the CPU's generic order).
struct ReduceF {
  View x, y;
  int32_t op; // amprt_reduce_op
  bool reduced[AMPRT_MAX_RANK];
  int64_t count;
  // Split over the reduced range (few slots, long sums: more threads): index
  // = slot * chunks + part, each part's sum / max into partial[index];
  // ReduceFinishF combines them in order. partial null: one index per slot.
  double *partial;
  int64_t chunks, chunk;
  // Each slot's elements one dense run from its base (denseRun): read in
  // order, aligned groups of kVec with 16-byte loads.
  bool run;
  HD void operator()(int64_t idx) const {
    int64_t slot = partial ? idx / chunks : idx;
    int64_t r0 = partial ? (idx % chunks) * chunk : 0;
    int64_t r1 = partial ? (r0 + chunk < count ? r0 + chunk : count) : count;
    // Slot -> base offset in x (kept dims), and y's offset.
    int64_t rem = slot, base = 0, yo = 0;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      int64_t c = rem % y.shape[d];
      rem /= y.shape[d];
      base += c * x.strides[d];
      yo += c * y.strides[d];
    }
    double acc = op == AMPRT_REDUCE_PROD ? 1.0 : 0.0;
    float m = 0.0f;
    bool first = true;
    auto take = [&](float v) {
      if (op == AMPRT_REDUCE_MAX) {
        if (first || isNaN(v) || (!isNaN(m) && v > m))
          m = v;
        first = false;
      } else if (op == AMPRT_REDUCE_PROD) {
        acc *= (double)v;
      } else {
        acc += (double)v;
      }
    };
    if (run) {
      int64_t r = r0;
      if (floatType(x.dtype) && reinterpret_cast<uintptr_t>(x.data) % 16 == 0) {
        for (; r < r1 && (base + r) % kVec; ++r)
          take(ldF(x.data, x.dtype, base + r));
        for (; r + kVec <= r1; r += kVec) {
          float v[kVec];
          loadRun8(x.data, x.dtype, base + r, v);
#pragma unroll
          for (int k = 0; k < kVec; ++k)
            take(v[k]);
        }
      }
      for (; r < r1; ++r)
        take(ldF(x.data, x.dtype, base + r));
    } else {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t off = base, q = r;
        for (int32_t d = x.rank - 1; d >= 0; --d)
          if (reduced[d]) {
            off += (q % x.shape[d]) * x.strides[d];
            q /= x.shape[d];
          }
        take(ldF(x.data, x.dtype, off));
      }
    }
    if (partial) {
      partial[idx] = op == AMPRT_REDUCE_MAX ? (double)m : acc;
      return;
    }
    float out = op == AMPRT_REDUCE_MAX ? m
                : op == AMPRT_REDUCE_MEAN ? (float)(acc / (double)count)
                                          : (float)acc;
    if (op == AMPRT_REDUCE_MAX && count == 0)
      out = -INFINITY;
    stF(y.data, y.dtype, yo, out);
  }
};

/// Whether each output slot's elements are one dense run of x in the
/// reduction's order: the reduced dims (size-1 dims aside) a suffix of x's,
/// their strides chaining down to 1.
bool denseRun(const View &x, const bool *reduced) {
  int64_t expect = 1;
  bool suffix = true;
  for (int32_t d = x.rank - 1; d >= 0; --d) {
    if (x.shape[d] == 1)
      continue;
    if (!reduced[d]) {
      suffix = false;
      continue;
    }
    if (!suffix || x.strides[d] != expect)
      return false;
    expect *= x.shape[d];
  }
  return true;
}

/// Combines a split reduction's parts in order (a NaN part wins a max).
struct ReduceFinishF {
  View y;
  int32_t op;
  int64_t count, chunks;
  const double *partial;
  HD void operator()(int64_t slot) const {
    int64_t rem = slot, yo = 0;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      yo += (rem % y.shape[d]) * y.strides[d];
      rem /= y.shape[d];
    }
    double acc = op == AMPRT_REDUCE_PROD ? 1.0 : 0.0;
    float m = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) {
      double v = partial[slot * chunks + k];
      if (op == AMPRT_REDUCE_MAX) {
        float f = (float)v;
        if (k == 0 || isNaN(f) || (!isNaN(m) && f > m))
          m = f;
      } else if (op == AMPRT_REDUCE_PROD) {
        acc *= v;
      } else {
        acc += v;
      }
    }
    stF(y.data, y.dtype, yo,
        op == AMPRT_REDUCE_MAX ? m
        : op == AMPRT_REDUCE_MEAN ? (float)(acc / (double)count)
                                  : (float)acc);
  }
};

/// How to split `slots` sums of `count` terms each: 1 part when there are
/// threads enough, else parts of >= 64 terms up to ~32K threads in all.
int64_t partsFor(int64_t slots, int64_t count) {
  if (slots >= 16384 || count < 256)
    return 1;
  int64_t parts = std::max<int64_t>(1, 32768 / std::max<int64_t>(slots, 1));
  return std::max<int64_t>(1, std::min(parts, count / 64));
}

/// Rows along `axis` of a tensor: row r's base offset and element stride.
struct Rows {
  int32_t rank, axis;
  int64_t shape[AMPRT_MAX_RANK];
  HD int64_t base(int64_t r, const int64_t *strides) const {
    int64_t off = 0;
    for (int32_t d = rank - 1; d >= 0; --d) {
      if (d == axis)
        continue;
      off += (r % shape[d]) * strides[d];
      r /= shape[d];
    }
    return off;
  }
};

Rows rowsOf(const amprt_tensor &t, int32_t axis, int64_t &count) {
  Rows r;
  r.rank = t.rank;
  r.axis = axis;
  count = 1;
  for (int32_t d = 0; d < t.rank; ++d) {
    r.shape[d] = t.shape[d];
    if (d != axis)
      count *= t.shape[d];
  }
  return r;
}

struct SoftmaxF {
  View x, y;
  Rows rows;
  int32_t log;
  HD void operator()(int64_t r, int lane, int lanes) const {
    int64_t len = x.shape[rows.axis];
    int64_t xb = rows.base(r, x.strides), yb = rows.base(r, y.strides);
    int64_t xs = x.strides[rows.axis], ys = y.strides[rows.axis];
    RowLanes L{lane, lanes, len};
    auto xAt = [&](int64_t i) { return ldF(x.data, x.dtype, xb + i * xs); };
    float m = L.max(xAt);
    double sum = L.sum([&](int64_t i) { return exp((double)xAt(i) - m); });
    double logSum = log ? ::log(sum) : 0.0;
    bool nan = isNaN(m); // a NaN anywhere in the row: all NaN
    L.forEach([&](int64_t i) {
      double xv = xAt(i);
      double v = nan ? (double)NAN : log ? xv - m - logSum : exp(xv - m) / sum;
      stF(y.data, y.dtype, yb + i * ys, (float)v);
    });
  }
};

struct SoftmaxGradF {
  View y, dy, dx;
  Rows rows;
  int32_t log;
  HD void operator()(int64_t r, int lane, int lanes) const {
    int64_t len = y.shape[rows.axis];
    int64_t yb = rows.base(r, y.strides), gb = rows.base(r, dy.strides),
            xb = rows.base(r, dx.strides);
    int64_t ys = y.strides[rows.axis], gs = dy.strides[rows.axis], xs = dx.strides[rows.axis];
    RowLanes L{lane, lanes, len};
    double dot = L.sum([&](int64_t i) {
      double g = ldF(dy.data, dy.dtype, gb + i * gs);
      return log ? g : g * ldF(y.data, y.dtype, yb + i * ys);
    });
    L.forEach([&](int64_t i) {
      double yv = ldF(y.data, y.dtype, yb + i * ys);
      double g = ldF(dy.data, dy.dtype, gb + i * gs);
      double v = log ? g - exp(yv) * dot : yv * (g - dot);
      stF(dx.data, dx.dtype, xb + i * xs, (float)v);
    });
  }
};

/// Layer norm over the trailing `cols` elements of each of `rows` rows (x, y
/// contiguous); scale / bias seen with the trailing shape (broadcast views).
struct LayerNormF {
  View x, y, scale, bias;
  float *mean, *invStd;
  int64_t cols;
  float eps;
  int32_t hasBias;
  HD void operator()(int64_t r, int lane, int lanes) const {
    RowLanes L{lane, lanes, cols};
    auto xAt = [&](int64_t c) { return (double)ldF(x.data, x.dtype, r * cols + c); };
    double mu = L.sum(xAt) / (double)cols;
    double q = L.sum([&](int64_t c) {
      double d = xAt(c) - mu;
      return d * d;
    });
    double rstd = 1.0 / sqrt(q / (double)cols + (double)eps);
    L.forEach([&](int64_t c) {
      double sc = ldF(scale.data, scale.dtype, scale.at(c));
      double bi = hasBias ? (double)ldF(bias.data, bias.dtype, bias.at(c)) : 0.0;
      stF(y.data, y.dtype, r * cols + c, (float)((xAt(c) - mu) * rstd * sc + bi));
    });
    if (mean && L.leader())
      mean[r] = (float)mu;
    if (invStd && L.leader())
      invStd[r] = (float)rstd;
  }
};

struct LayerNormGradDxF {
  View x, scale, dy, dx;
  const float *mean, *invStd;
  int64_t cols;
  HD void operator()(int64_t r, int lane, int lanes) const {
    RowLanes L{lane, lanes, cols};
    double mu = mean[r], rstd = invStd[r];
    auto xh = [&](int64_t c) { return ((double)ldF(x.data, x.dtype, r * cols + c) - mu) * rstd; };
    auto dxh = [&](int64_t c) {
      return (double)ldF(dy.data, dy.dtype, r * cols + c) * (double)ldF(scale.data, scale.dtype, scale.at(c));
    };
    double m1 = L.sum(dxh) / (double)cols;
    double m2 = L.sum([&](int64_t c) { return dxh(c) * xh(c); }) / (double)cols;
    L.forEach([&](int64_t c) {
      stF(dx.data, dx.dtype, r * cols + c, (float)(rstd * (dxh(c) - m1 - xh(c) * m2)));
    });
  }
};

/// dscale / dbias per column (the scale covers the trailing dims one to one).
struct LayerNormGradParamF {
  View x, dy, dscale, dbias;
  const float *mean, *invStd;
  int64_t rows, cols;
  // Split over the rows: index = c * chunks + part, sums into partial[2 *
  // index + {0, 1}]; LayerNormGradParamFinishF adds the parts in order.
  double *partial;
  int64_t chunks, chunk;
  // Each slot's elements one dense run from its base (denseRun): read in
  // order, aligned groups of kVec with 16-byte loads.
  bool run;
  HD void operator()(int64_t idx) const {
    int64_t c = partial ? idx / chunks : idx;
    int64_t r0 = partial ? (idx % chunks) * chunk : 0;
    int64_t r1 = partial ? (r0 + chunk < rows ? r0 + chunk : rows) : rows;
    double gs = 0.0, gb = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
      double g = ldF(dy.data, dy.dtype, r * cols + c);
      double xh = ((double)ldF(x.data, x.dtype, r * cols + c) - (double)mean[r]) * (double)invStd[r];
      gs += g * xh;
      gb += g;
    }
    if (partial) {
      partial[2 * idx] = gs;
      partial[2 * idx + 1] = gb;
      return;
    }
    if (dscale.data)
      stF(dscale.data, dscale.dtype, c, (float)gs);
    if (dbias.data)
      stF(dbias.data, dbias.dtype, c, (float)gb);
  }
};

struct LayerNormGradParamFinishF {
  View dscale, dbias;
  const double *partial;
  int64_t chunks;
  HD void operator()(int64_t c) const {
    double gs = 0.0, gb = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      gs += partial[2 * (c * chunks + k)];
      gb += partial[2 * (c * chunks + k) + 1];
    }
    if (dscale.data)
      stF(dscale.data, dscale.dtype, c, (float)gs);
    if (dbias.data)
      stF(dbias.data, dbias.dtype, c, (float)gb);
  }
};

/// Scores [N, C, inner...], labels [N, inner...]: per sample s = b * inner +
/// i, the class and weight (0 for an ignored sample).
struct LossCommon {
  View labels, weights; // weights.data null: none
  int64_t n, c, inner;
  int32_t hasIgnore;
  int64_t ignore;
  DeviceError *err;
  HD bool sample(int64_t s, int64_t &cls, double &w) const {
    cls = ldI(labels.data, labels.dtype, s);
    w = 0.0;
    if (hasIgnore && cls == ignore)
      return true;
    if (cls < 0 || cls >= c) {
      recordError(err, ERR_LABEL, cls, s, c);
      return false;
    }
    w = weights.data ? (double)ldF(weights.data, weights.dtype, cls) : 1.0;
    return true;
  }
};

/// Per-sample loss (-w * logp[label]) and weight into scratch (double).
struct NllSampleF {
  LossCommon lc;
  View logp;
  double *loss, *weight;
  HD void operator()(int64_t s) const {
    int64_t cls;
    double w;
    lc.sample(s, cls, w);
    int64_t b = s / lc.inner, i = s % lc.inner;
    loss[s] = w == 0.0 ? 0.0 : -w * (double)ldF(logp.data, logp.dtype, (b * lc.c + cls) * lc.inner + i);
    weight[s] = w;
  }
};

/// The reduction of the per-sample losses (one index: in sample order).
struct NllReduceF {
  const double *loss, *weight;
  int64_t samples;
  int32_t reduction;
  View out;
  double *wsumOut; // the weight sum, for the gradient (may be null)
  HD void operator()(int64_t) const {
    double total = 0.0, wsum = 0.0;
    for (int64_t s = 0; s < samples; ++s) {
      total += loss[s];
      wsum += weight[s];
    }
    if (reduction == AMPRT_REDUCTION_SUM)
      stF(out.data, out.dtype, 0, (float)total);
    else if (reduction == AMPRT_REDUCTION_MEAN)
      stF(out.data, out.dtype, 0, (float)(total / wsum));
    if (wsumOut)
      *wsumOut = wsum;
  }
};

struct NllStoreNoneF {
  const double *loss;
  View out;
  HD void operator()(int64_t s) const { stF(out.data, out.dtype, s, (float)loss[s]); }
};

/// The sum of the weights of all samples (one index).
struct WeightSumF {
  LossCommon lc;
  double *wsum;
  HD void operator()(int64_t) const {
    double t = 0.0;
    for (int64_t s = 0; s < lc.n * lc.inner; ++s) {
      int64_t cls;
      double w;
      lc.sample(s, cls, w);
      t += w;
    }
    *wsum = t;
  }
};

/// dscores (softmax cross entropy) or dinput (nll) per element.
struct LossGradF {
  LossCommon lc;
  View logp, dloss, dout;
  const double *wsum;
  int32_t reduction, softmax;
  HD void operator()(int64_t o) const {
    int64_t i = o % lc.inner, ch = (o / lc.inner) % lc.c, b = o / (lc.inner * lc.c);
    int64_t s = b * lc.inner + i, cls;
    double w;
    if (!lc.sample(s, cls, w)) {
      stF(dout.data, dout.dtype, o, 0.0f);
      return;
    }
    double g;
    if (reduction == AMPRT_REDUCTION_NONE) {
      g = w * (double)ldF(dloss.data, dloss.dtype, s);
    } else {
      double d = ldF(dloss.data, dloss.dtype, 0);
      if (reduction == AMPRT_REDUCTION_MEAN)
        d /= *wsum;
      g = w * d;
    }
    if (softmax) {
      double p = exp((double)ldF(logp.data, logp.dtype, o));
      stF(dout.data, dout.dtype, o, (float)(g * (p - (ch == cls ? 1.0 : 0.0))));
    } else {
      stF(dout.data, dout.dtype, o, ch == cls ? (float)-g : 0.0f);
    }
  }
};

/// reduce_max_grad: per output slot, the number of maxima (pass 1); then per
/// element of x its share of dy (pass 2).
struct MaxCountF {
  View x, y;
  bool reduced[AMPRT_MAX_RANK];
  int64_t count;
  float *counts; // per slot (dense in y's shape)
  HD void operator()(int64_t slot) const {
    int64_t rem = slot, base = 0, yo = 0;
    for (int32_t d = y.rank - 1; d >= 0; --d) {
      int64_t c = rem % y.shape[d];
      rem /= y.shape[d];
      base += c * x.strides[d];
      yo += c * y.strides[d];
    }
    float m = ldF(y.data, y.dtype, yo);
    int64_t hits = 0;
    for (int64_t r = 0; r < count; ++r) {
      int64_t off = base, q = r;
      for (int32_t d = x.rank - 1; d >= 0; --d)
        if (reduced[d]) {
          off += (q % x.shape[d]) * x.strides[d];
          q /= x.shape[d];
        }
      hits += ldF(x.data, x.dtype, off) == m;
    }
    counts[slot] = (float)hits;
  }
};

struct MaxGradF {
  View x, y, dy, dx;
  bool reduced[AMPRT_MAX_RANK];
  const float *counts;
  HD void operator()(int64_t i) const {
    int64_t rem = i, slot = 0, mul = 1, yo = 0, go = 0;
    int64_t c[AMPRT_MAX_RANK];
    for (int32_t d = x.rank - 1; d >= 0; --d) {
      c[d] = rem % x.shape[d];
      rem /= x.shape[d];
    }
    for (int32_t d = x.rank - 1; d >= 0; --d) {
      int64_t k = reduced[d] ? 0 : c[d];
      slot += k * mul;
      mul *= y.shape[d];
      yo += k * y.strides[d];
      go += k * dy.strides[d];
    }
    float xv = ldF(x.data, x.dtype, x.at(i));
    bool hit = xv == ldF(y.data, y.dtype, yo);
    stF(dx.data, dx.dtype, dx.at(i), hit ? ldF(dy.data, dy.dtype, go) / counts[slot] : 0.0f);
  }
};

//--- AMP bookkeeping -------------------------------------------------------------

struct StepCountF {
  const int64_t *step;
  const uint8_t *found;
  int64_t *out;
  HD void operator()(int64_t) const { *out = *step + (*found ? 0 : 1); }
};

struct MicroStepF {
  const int64_t *m;
  uint8_t *apply;
  int64_t *next, every;
  DeviceError *err;
  HD void operator()(int64_t) const {
    int64_t v = *m;
    if (v < 0 || v >= every) {
      recordError(err, ERR_MICRO_STEP, v, every, 0);
      v = 0;
    }
    bool a = v + 1 == every;
    *apply = a;
    *next = a ? 0 : v + 1;
  }
};

/// update_scale on the executor's tensors: scale f32 [], trackers i64 [],
/// found i1 [] -> new scale and trackers.
struct UpdateScaleTensorsF {
  amprt_scaler_config cfg;
  const float *scale;
  const int64_t *tracker, *hyst;
  const uint8_t *found;
  float *newScale;
  int64_t *newTracker, *newHyst;
  DeviceError *err;
  int32_t errorAtMin;
  HD void operator()(int64_t) const {
    amprt_scaler_state st;
    st.scale = *scale;
    st.growth_tracker = (int32_t)*tracker;
    st.hysteresis_left = (int32_t)*hyst;
    st.at_min_scale = 0;
    UpdateScaleF{cfg, &st, found, 1, err, errorAtMin}(0);
    *newScale = st.scale;
    *newTracker = st.growth_tracker;
    *newHyst = st.hysteresis_left;
  }
};

/// Sum of squares per chunk of 4096 elements of a gradient (double).
struct SumSqF {
  const float *g;
  int64_t n;
  double *out;
  HD void operator()(int64_t k) const {
    double s = 0.0;
    int64_t e = (k + 1) * 4096 < n ? (k + 1) * 4096 : n;
    for (int64_t i = k * 4096; i < e; ++i)
      s += (double)g[i] * g[i];
    out[k] = s;
  }
};

/// The total norm and the clip coefficient (one index).
struct ClipCoefF {
  const double *parts;
  int64_t count;
  float maxNorm;
  const uint8_t *found;
  float *norm, *coef;
  HD void operator()(int64_t) const {
    double sq = 0.0;
    for (int64_t k = 0; k < count; ++k)
      sq += parts[k];
    double nrm = sqrt(sq);
    *norm = (float)nrm;
    float c = 1.0f;
    if (!*found && !isNaN(nrm) && nrm != INFINITY) {
      c = (float)((double)maxNorm / (nrm + 1e-6));
      if (c >= 1.0f)
        c = 1.0f;
    }
    *coef = c;
  }
};

struct ScaleByF {
  const float *x;
  float *y;
  const float *coef;
  HD void operator()(int64_t i) const { y[i] = *coef < 1.0f ? x[i] * *coef : x[i]; }
};

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

//--- Convolutions, pools, batch norm (direct kernels) ----------------------------

/// A convolution's or a pool's geometry, spatial dims padded to three.
struct Geom {
  int64_t n, c, m, g, in[3], out[3], k[3], s[3], d[3], pb[3];
  HD int64_t inPlane() const { return in[0] * in[1] * in[2]; }
  HD int64_t outPlane() const { return out[0] * out[1] * out[2]; }
  HD int64_t kPlane() const { return k[0] * k[1] * k[2]; }
};

/// Output position `op` (flat in the output plane) -> its three indices.
HD inline void outIndex(const Geom &gm, int64_t op, int64_t *o) {
  o[2] = op % gm.out[2];
  o[1] = (op / gm.out[2]) % gm.out[1];
  o[0] = op / (gm.out[2] * gm.out[1]);
}

/// f(window index, input index) for the window positions of output o that
/// lie inside the input (flat indices in the kernel's and the input's plane),
/// in row-major window order.
template <class F> HD inline void forWindow(const Geom &gm, const int64_t *o, F f) {
  for (int64_t k0 = 0; k0 < gm.k[0]; ++k0) {
    int64_t i0 = o[0] * gm.s[0] - gm.pb[0] + k0 * gm.d[0];
    if (i0 < 0 || i0 >= gm.in[0])
      continue;
    for (int64_t k1 = 0; k1 < gm.k[1]; ++k1) {
      int64_t i1 = o[1] * gm.s[1] - gm.pb[1] + k1 * gm.d[1];
      if (i1 < 0 || i1 >= gm.in[1])
        continue;
      for (int64_t k2 = 0; k2 < gm.k[2]; ++k2) {
        int64_t i2 = o[2] * gm.s[2] - gm.pb[2] + k2 * gm.d[2];
        if (i2 >= 0 && i2 < gm.in[2])
          f((k0 * gm.k[1] + k1) * gm.k[2] + k2, (i0 * gm.in[1] + i1) * gm.in[2] + i2);
      }
    }
  }
}

/// Whether window position kp (flat in the kernel's plane) of output op
/// (flat in the output plane) lies inside the input, and where (flat).
HD inline bool windowInput(const Geom &gm, int64_t op, int64_t kp, int64_t &in) {
  int64_t o[3];
  outIndex(gm, op, o);
  int64_t k[3] = {kp / (gm.k[2] * gm.k[1]), (kp / gm.k[2]) % gm.k[1], kp % gm.k[2]};
  in = 0;
  for (int dd = 0; dd < 3; ++dd) {
    int64_t i = o[dd] * gm.s[dd] - gm.pb[dd] + k[dd] * gm.d[dd];
    if (i < 0 || i >= gm.in[dd])
      return false;
    in = in * gm.in[dd] + i;
  }
  return true;
}

/// f(window index, output index) for the outputs whose window puts window
/// position k on input position i: o * s - pb + k * d == i.
template <class F> HD inline void forWindowsOf(const Geom &gm, const int64_t *i, F f) {
  int64_t t[3];
  for (int64_t k0 = 0; k0 < gm.k[0]; ++k0) {
    t[0] = i[0] + gm.pb[0] - k0 * gm.d[0];
    if (t[0] < 0 || t[0] % gm.s[0] || t[0] / gm.s[0] >= gm.out[0])
      continue;
    for (int64_t k1 = 0; k1 < gm.k[1]; ++k1) {
      t[1] = i[1] + gm.pb[1] - k1 * gm.d[1];
      if (t[1] < 0 || t[1] % gm.s[1] || t[1] / gm.s[1] >= gm.out[1])
        continue;
      for (int64_t k2 = 0; k2 < gm.k[2]; ++k2) {
        t[2] = i[2] + gm.pb[2] - k2 * gm.d[2];
        if (t[2] >= 0 && t[2] % gm.s[2] == 0 && t[2] / gm.s[2] < gm.out[2])
          f((k0 * gm.k[1] + k1) * gm.k[2] + k2,
            ((t[0] / gm.s[0]) * gm.out[1] + t[1] / gm.s[1]) * gm.out[2] + t[2] / gm.s[2]);
      }
    }
  }
}

/// y[n, m, o] = bias[m] + sum over the group's channels and the window of
/// x * w (double accumulation), ReLU (NaN kept) on request.
struct ConvF {
  Geom gm;
  const void *x, *w, *bias;
  void *y;
  int32_t xt, wt, bt, yt, relu;
  HD void operator()(int64_t e) const {
    int64_t op = e % gm.outPlane(), m = (e / gm.outPlane()) % gm.m, n = e / (gm.outPlane() * gm.m);
    int64_t o[3];
    outIndex(gm, op, o);
    int64_t cpg = gm.c / gm.g, grp = m / (gm.m / gm.g);
    double acc = bias ? (double)ldF(bias, bt, m) : 0.0;
    for (int64_t ci = 0; ci < cpg; ++ci) {
      int64_t xb = (n * gm.c + grp * cpg + ci) * gm.inPlane(), wb = (m * cpg + ci) * gm.kPlane();
      forWindow(gm, o, [&](int64_t kp, int64_t ip) {
        acc += (double)ldF(x, xt, xb + ip) * (double)ldF(w, wt, wb + kp);
      });
    }
    float v = (float)acc;
    if (relu && !(v > 0.0f) && !isNaN(v))
      v = 0.0f;
    stF(y, yt, e, v);
  }
};

/// dx[n, c, i] = sum over the outputs whose window holds i and the group's
/// filters of dy * w.
struct ConvDxF {
  Geom gm;
  const void *dy, *w;
  void *dx;
  int32_t dyt, wt, dxt;
  HD void operator()(int64_t e) const {
    int64_t ip = e % gm.inPlane(), c = (e / gm.inPlane()) % gm.c, n = e / (gm.inPlane() * gm.c);
    int64_t i[3] = {ip / (gm.in[2] * gm.in[1]), (ip / gm.in[2]) % gm.in[1], ip % gm.in[2]};
    int64_t cpg = gm.c / gm.g, mpg = gm.m / gm.g, grp = c / cpg, ci = c % cpg;
    double acc = 0.0;
    forWindowsOf(gm, i, [&](int64_t kp, int64_t opos) {
      for (int64_t mm = 0; mm < mpg; ++mm) {
        int64_t m = grp * mpg + mm;
        acc += (double)ldF(dy, dyt, (n * gm.m + m) * gm.outPlane() + opos) *
               (double)ldF(w, wt, (m * cpg + ci) * gm.kPlane() + kp);
      }
    });
    stF(dx, dxt, e, (float)acc);
  }
};

/// dw[m, ci, k] = sum over the batch and the outputs of x * dy: per weight,
/// or per weight and batch item into partial (SumPartsF adds them).
struct ConvDwF {
  Geom gm;
  const void *x, *dy;
  void *dw;
  int32_t xt, dyt, dwt;
  double *partial; // non-null: index = e * n + batch item
  HD void operator()(int64_t idx) const {
    int64_t e = partial ? idx / gm.n : idx;
    int64_t n0 = partial ? idx % gm.n : 0, n1 = partial ? n0 + 1 : gm.n;
    int64_t cpg = gm.c / gm.g, kp = e % gm.kPlane(), ci = (e / gm.kPlane()) % cpg,
            m = e / (gm.kPlane() * cpg);
    int64_t c = (m / (gm.m / gm.g)) * cpg + ci;
    double acc = 0.0;
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t op = 0; op < gm.outPlane(); ++op) {
        int64_t in;
        if (windowInput(gm, op, kp, in))
          acc += (double)ldF(x, xt, (n * gm.c + c) * gm.inPlane() + in) *
                 (double)ldF(dy, dyt, (n * gm.m + m) * gm.outPlane() + op);
      }
    if (partial)
      partial[idx] = acc;
    else
      stF(dw, dwt, e, (float)acc);
  }
};

/// out[e] = the sum over k < parts of part[e * eStep + k * kStep], in
/// order, accumulated in T (double partial sums, or f32 chunk products).
template <class T> struct SumPartsF {
  const T *part;
  int64_t parts, eStep, kStep;
  void *out;
  int32_t outType;
  HD void operator()(int64_t e) const {
    T acc = 0;
    for (int64_t k = 0; k < parts; ++k)
      acc += part[e * eStep + k * kStep];
    stF(out, outType, e, (float)acc);
  }
};

//--- Convolutions as matrix products (im2col + cuBLASLt) ----------------------------
//
// A batch chunk of nc items at a time: the windows of x gathered into
// col[C * KP, nc * OP] (row c * KP + kp, column nn * OP + op), then per group
// one product of the group's filters [M / g, C / g * KP] with its rows of col
// (all groups in one strided call). The gradients use the same layout: dy
// made channel-major ([M, nc * OP]), dx's columns dW^T dy scattered back
// onto x's positions (a gather per input element: no atomics, one order),
// dw = dy col^T, whose [M, C / g * KP] per group is w's own layout.

/// col[c * KP + kp, nn, op] = x[n0 + nn, c, the position of window kp at
/// output op] (0 in the padding), in col's type.
struct Im2ColF {
  Geom gm;
  const void *x;
  void *col;
  int32_t xt, ct;
  int64_t n0, nc;
  HD void operator()(int64_t e) const {
    int64_t OP = gm.outPlane(), KP = gm.kPlane();
    int64_t op = e % OP, nn = (e / OP) % nc, ckp = e / (OP * nc);
    int64_t c = ckp / KP, kp = ckp % KP;
    int64_t in;
    bool inside = windowInput(gm, op, kp, in);
    stF(col, ct, e, inside ? ldF(x, xt, ((n0 + nn) * gm.c + c) * gm.inPlane() + in) : 0.0f);
  }
};

/// dst[ch, nn, p] = src[n0 + nn, ch, p] ([N, CH, P] -> [CH, nc, P]) in dst's type.
struct ChannelMajorF {
  const void *src;
  void *dst;
  int32_t st, dt;
  int64_t ch, plane, n0, nc;
  HD void operator()(int64_t e) const {
    int64_t p = e % plane, nn = (e / plane) % nc, c = e / (plane * nc);
    stF(dst, dt, e, ldF(src, st, ((n0 + nn) * ch + c) * plane + p));
  }
};

/// y[n0 + nn, m, op] = acc[m, nn, op] + bias[m], ReLU (NaN kept) on
/// request, rounded once to y's type.
struct ConvOutF {
  Geom gm;
  const float *acc;
  const void *bias;
  void *y;
  int32_t bt, yt, relu;
  int64_t n0, nc;
  HD void operator()(int64_t e) const {
    int64_t OP = gm.outPlane();
    int64_t op = e % OP, m = (e / OP) % gm.m, nn = e / (OP * gm.m);
    float v = acc[(m * nc + nn) * OP + op];
    if (bias)
      v += ldF(bias, bt, m);
    if (relu && !(v > 0.0f) && !isNaN(v))
      v = 0.0f;
    stF(y, yt, n0 * gm.m * OP + e, v);
  }
};

/// dx[n0 + nn, c, ip] = the sum of dcol[c * KP + kp, nn, op] over the
/// windows (kp, op) that hold input position ip.
struct Col2ImF {
  Geom gm;
  const float *dcol;
  void *dx;
  int32_t dxt;
  int64_t n0, nc;
  HD void operator()(int64_t e) const {
    int64_t IP = gm.inPlane(), OP = gm.outPlane(), KP = gm.kPlane();
    int64_t ip = e % IP, c = (e / IP) % gm.c, nn = e / (IP * gm.c);
    int64_t i[3] = {ip / (gm.in[2] * gm.in[1]), (ip / gm.in[2]) % gm.in[1], ip % gm.in[2]};
    float acc = 0.0f;
    forWindowsOf(gm, i, [&](int64_t kp, int64_t opos) { acc += dcol[((c * KP + kp) * nc + nn) * OP + opos]; });
    stF(dx, dxt, n0 * gm.c * IP + e, acc);
  }
};

/// Per channel of [N, C, plane]: the sum (and, with x, the centred sums).
/// Per channel and batch item of [N, C, plane]: the plane's sum, at
/// out[ch * n + b] (SumPartsF adds the items).
struct ChannelSumF {
  const void *x;
  int32_t xt;
  int64_t n, c, plane;
  double *out;
  HD void operator()(int64_t idx) const {
    int64_t ch = idx / n, b = idx % n;
    double s = 0.0;
    for (int64_t i = 0; i < plane; ++i)
      s += (double)ldF(x, xt, (b * c + ch) * plane + i);
    out[idx] = s;
  }
};

/// Max pool: per output, the window's positions in row-major order (padding
/// skipped); a NaN wins, else the first maximum. Indices: x's flat index
/// (column-major within the plane for storage_order 1), or -1.
struct MaxPoolF {
  Geom gm;
  const void *x;
  void *y;
  int64_t *indices;
  int32_t xt, yt, storageOrder;
  HD void operator()(int64_t o) const {
    int64_t op = o % gm.outPlane(), nc = o / gm.outPlane(), oi[3];
    outIndex(gm, op, oi);
    float best = -INFINITY;
    int64_t arg = -1;
    forWindow(gm, oi, [&](int64_t, int64_t ip) {
      int64_t i = nc * gm.inPlane() + ip;
      float v = ldF(x, xt, i);
      if (arg >= 0 && isNaN(best))
        return;
      if (isNaN(v) || arg < 0 || v > best) {
        best = v;
        arg = i;
      }
    });
    if (floatType(yt))
      stF(y, yt, o, best);
    else
      stI(y, yt, o, arg >= 0 ? ldI(x, xt, arg) : 0);
    if (indices) {
      int64_t at = arg;
      if (at >= 0 && storageOrder == 1) {
        int64_t plane = gm.inPlane(), q = at / plane, r = at % plane;
        int64_t j2 = r % gm.in[2], j1 = (r / gm.in[2]) % gm.in[1], j0 = r / (gm.in[2] * gm.in[1]);
        at = q * plane + (j2 * gm.in[1] + j1) * gm.in[0] + j0;
      }
      indices[o] = at;
    }
  }
};

/// The number of window positions an average counts, per dim: inside the
/// input, or (count_include_pad) before its end plus the end padding.
HD inline int64_t windowCount(const Geom &gm, const int64_t *o, int32_t includePad) {
  int64_t count = 1;
  for (int dd = 0; dd < 3; ++dd) {
    int64_t c = 0;
    for (int64_t k = 0; k < gm.k[dd]; ++k) {
      int64_t i = o[dd] * gm.s[dd] - gm.pb[dd] + k * gm.d[dd];
      c += includePad ? i < gm.in[dd] + gm.pb[dd] : (i >= 0 && i < gm.in[dd]);
    }
    count *= c;
  }
  return count;
}

struct AvgPoolF {
  Geom gm;
  const void *x;
  void *y;
  int32_t xt, yt, includePad;
  HD void operator()(int64_t o) const {
    int64_t op = o % gm.outPlane(), nc = o / gm.outPlane(), oo[3];
    outIndex(gm, op, oo);
    double sum = 0.0;
    forWindow(gm, oo, [&](int64_t, int64_t ip) { sum += ldF(x, xt, nc * gm.inPlane() + ip); });
    int64_t count = windowCount(gm, oo, includePad);
    stF(y, yt, o, count ? (float)(sum / (double)count) : 0.0f);
  }
};

struct AvgPoolGradF {
  Geom gm;
  const void *dy;
  void *dx;
  int32_t dyt, dxt, includePad;
  HD void operator()(int64_t e) const {
    int64_t ip = e % gm.inPlane(), nc = e / gm.inPlane();
    int64_t ii[3] = {ip / (gm.in[2] * gm.in[1]), (ip / gm.in[2]) % gm.in[1], ip % gm.in[2]};
    double acc = 0.0;
    forWindowsOf(gm, ii, [&](int64_t, int64_t opos) {
      int64_t oo[3];
      outIndex(gm, opos, oo);
      int64_t count = windowCount(gm, oo, includePad);
      if (count)
        acc += (double)ldF(dy, dyt, nc * gm.outPlane() + opos) / (double)count;
    });
    stF(dx, dxt, e, (float)acc);
  }
};

/// dx[indices[o]] += dy[o] into an f32 accumulator (atomics on the device).
struct MaxPoolGradF {
  const void *dy;
  int32_t dyt;
  const int64_t *indices;
  float *acc;
  int64_t nx;
  DeviceError *err;
  HD void operator()(int64_t o) const {
    int64_t i = indices[o];
    if (i < 0)
      return;
    if (i >= nx) {
      recordError(err, ERR_INDEX, i, nx, 0);
      return;
    }
    addTo(acc + i, ldF(dy, dyt, o));
  }
};

// Batch norm's per-channel sums, in parallel and in one order: each
// channel's n * plane elements (batch item by batch item, in the plane's
// order) split into parts of kBnChunk, each part summed in double by one
// thread (BnPartsF), the parts then added in order by one thread per channel
// (the same numbers on every run, and on the emulation).
constexpr int64_t kBnChunk = 1024;

/// Per (channel, part): two sums over the part's elements, by mode:
/// 0: x (and 0); 1: (x - mu)^2 (and 0); 2: x and x^2; 3: dy and
/// dy * (x - mu) * invStd.
struct BnPartsF {
  const void *x, *dy;
  int32_t xt, dyt, mode;
  int64_t c, plane, total, parts;
  const double *mu, *invStd;
  double *out; // [c * parts][2]
  HD void operator()(int64_t idx) const {
    int64_t ch = idx / parts, e0 = (idx % parts) * kBnChunk;
    int64_t e1 = e0 + kBnChunk < total ? e0 + kBnChunk : total;
    int64_t b = plane ? e0 / plane : 0, i = plane ? e0 % plane : 0;
    double s0 = 0.0, s1 = 0.0, m = mu ? mu[ch] : 0.0, is = invStd ? invStd[ch] : 0.0;
    for (int64_t e = e0; e < e1; ++e) {
      int64_t o = (b * c + ch) * plane + i;
      double v = ldF(x, xt, o);
      if (mode == 0) {
        s0 += v;
      } else if (mode == 1) {
        s0 += (v - m) * (v - m);
      } else if (mode == 2) {
        s0 += v;
        s1 += v * v;
      } else {
        double d = ldF(dy, dyt, o);
        s0 += d;
        s1 += d * (v - m) * is;
      }
      if (++i == plane) {
        i = 0;
        ++b;
      }
    }
    out[2 * idx] = s0;
    out[2 * idx + 1] = s1;
  }
};

/// Channel ch's parts added in order: sums[0], sums[1].
HD inline void bnSums(const double *part, int64_t parts, int64_t ch, double *sums) {
  sums[0] = sums[1] = 0.0;
  for (int64_t p = 0; p < parts; ++p) {
    sums[0] += part[2 * (ch * parts + p)];
    sums[1] += part[2 * (ch * parts + p) + 1];
  }
}

/// Training, after the parts of x: the mean.
struct BnMeanF {
  const double *part;
  int64_t parts;
  double count;
  double *mu;
  HD void operator()(int64_t ch) const {
    double s[2];
    bnSums(part, parts, ch, s);
    mu[ch] = s[0] / count;
  }
};

/// Batch-norm statistics per channel: the inverse standard deviation used
/// and the running statistics (training: the variance from the parts of
/// (x - mean)^2, the mean already in mu; inference: the given ones).
struct BnStatsF {
  const void *mean, *var;
  int32_t mt, vt, training;
  const double *part;
  int64_t parts;
  double count;
  float eps, momentum;
  double *mu, *invStd;
  void *runMean, *runVar;
  int32_t rmt, rvt;
  HD void operator()(int64_t ch) const {
    double m, v;
    double oldMean = ldF(mean, mt, ch), oldVar = ldF(var, vt, ch);
    if (training) {
      double s[2];
      bnSums(part, parts, ch, s);
      m = mu[ch];
      v = s[0] / count;
      if (runMean)
        stF(runMean, rmt, ch, (float)(momentum * oldMean + (1.0 - momentum) * m));
      if (runVar)
        stF(runVar, rvt, ch, (float)(momentum * oldVar + (1.0 - momentum) * v));
    } else {
      m = oldMean;
      v = oldVar;
      if (runMean)
        stF(runMean, rmt, ch, (float)oldMean);
      if (runVar)
        stF(runVar, rvt, ch, (float)oldVar);
    }
    mu[ch] = m;
    invStd[ch] = 1.0 / sqrt(v + (double)eps);
  }
};

struct BnApplyF {
  const void *x, *scale, *bias;
  void *y;
  int32_t xt, st, bt, yt;
  int64_t c, plane;
  const double *mu, *invStd;
  HD void operator()(int64_t o) const {
    int64_t ch = (o / plane) % c;
    double v = ((double)ldF(x, xt, o) - mu[ch]) * invStd[ch] * (double)ldF(scale, st, ch) +
               (double)ldF(bias, bt, ch);
    stF(y, yt, o, (float)v);
  }
};

/// The batch-norm gradient's statistics recomputed from x (after the parts
/// of x and x^2; amprt_batch_norm_grad_recompute), rounded to f32 first as
/// on the CPU.
struct BnGradStatsF {
  const double *part;
  int64_t parts;
  double count;
  float eps;
  double *mu, *invStd;
  HD void operator()(int64_t ch) const {
    double s[2];
    bnSums(part, parts, ch, s);
    double m = s[0] / count, var = s[1] / count - m * m;
    if (var < 0.0)
      var = 0.0;
    mu[ch] = (float)m;
    invStd[ch] = (float)(1.0 / sqrt(var + (double)eps));
  }
};

/// The gradient's per-channel sums of dy and dy * xhat (after their parts),
/// and dscale / dbias.
struct BnGradSumsF {
  const double *part;
  int64_t parts;
  double *sdy, *sdyx;
  void *dscale, *dbias;
  int32_t dst, dbt;
  HD void operator()(int64_t ch) const {
    double s[2];
    bnSums(part, parts, ch, s);
    sdy[ch] = s[0];
    sdyx[ch] = s[1];
    if (dscale)
      stF(dscale, dst, ch, (float)s[1]);
    if (dbias)
      stF(dbias, dbt, ch, (float)s[0]);
  }
};

struct BnGradDxF {
  const void *x, *dy, *scale;
  void *dx;
  int32_t xt, dyt, st, dxt;
  int64_t c, plane, n;
  const double *mu, *invStd, *sdy, *sdyx;
  HD void operator()(int64_t o) const {
    int64_t ch = (o / plane) % c;
    double m = (double)(n * plane), is = invStd[ch];
    double xhat = ((double)ldF(x, xt, o) - mu[ch]) * is, d = ldF(dy, dyt, o);
    double g = ldF(scale, st, ch);
    stF(dx, dxt, o, (float)(g * is / m * (m * d - sdy[ch] - xhat * sdyx[ch])));
  }
};

/// A batch norm folded into f32 weights and bias (conv_bn), per weight.
struct FoldBnF {
  const float *w, *bias, *scale, *shift, *mean, *var;
  float *wf, *bf;
  int64_t per;
  double eps;
  HD void operator()(int64_t e) const {
    int64_t ch = e / per;
    double a = (double)scale[ch] / sqrt((double)var[ch] + eps);
    wf[e] = (float)(w[e] * a);
    if (e % per == 0)
      bf[ch] = (float)(((bias ? (double)bias[ch] : 0.0) - (double)mean[ch]) * a + (double)shift[ch]);
  }
};

amprt_status unsupported(const char *op) {
  return fail(AMPRT_ERR_UNSUPPORTED,
              "amprt_exec (cuda): %s is not on the CUDA device yet (run this program with "
              "--device cpu)",
              op);
}

/// The geometry of x [N, C, D...] -> y [N, M, D'...] (w [M, C/g, K...] or
/// the pool's kernel).
amprt_status checkContiguous(const amprt_tensor &t, int32_t dtype, const char *what) {
  if (!amprt_tensor_is_contiguous(&t) || (dtype >= 0 && t.dtype != dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s must be contiguous%s%s", what,
                dtype >= 0 ? " " : "", dtype >= 0 ? amprt_dtype_name((amprt_dtype)dtype) : "");
  return AMPRT_OK;
}

bool sameShape(const amprt_tensor &a, const amprt_tensor &b) {
  if (a.rank != b.rank)
    return false;
  for (int32_t i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i])
      return false;
  return true;
}

/// A copy of x into y (same element count; row-major order on both).
amprt_status copyTensor(Dev &d, const amprt_tensor &x, const amprt_tensor &y, const char *what) {
  if (x.dtype != y.dtype || numel(x) != numel(y))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: x and y differ", what);
  size_t es = amprt_dtype_size((amprt_dtype)x.dtype);
  if (amprt_tensor_is_contiguous(&x) && amprt_tensor_is_contiguous(&y)) {
    if (x.data == y.data)
      return AMPRT_OK;
    if (d.emulate) {
      std::memmove(y.data, x.data, (size_t)numel(x) * es);
      return AMPRT_OK;
    }
    CUDA_CHECK(cudaMemcpyAsync(y.data, x.data, (size_t)numel(x) * es, cudaMemcpyDeviceToDevice,
                               d.stream),
               what);
    return AMPRT_OK;
  }
  return each(&d, numel(y), CopyF{flat(viewOf(x)), flat(viewOf(y)), (int64_t)es}, what);
}

amprt_status zero(Dev &d, void *p, size_t bytes) {
  if (d.emulate) {
    std::memset(p, 0, bytes);
    return AMPRT_OK;
  }
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, d.stream), "cudaMemsetAsync");
  return AMPRT_OK;
}

amprt_status geomOf(const amprt_tensor &x, const amprt_tensor &y, int32_t spatial, const int64_t *kernel,
                    const int64_t *strides, const int64_t *dil, const int64_t *pb, int64_t group,
                    const char *what, Geom &g) {
  if (spatial < 1 || spatial > 3 || x.rank != spatial + 2 || y.rank != x.rank ||
      !amprt_tensor_is_contiguous(&x) || !amprt_tensor_is_contiguous(&y) || x.shape[0] != y.shape[0] ||
      group < 1 || x.shape[1] % group || y.shape[1] % group)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec (cuda): %s: x %s and y %s must be contiguous [N, C, D...] of the "
                "parameters' spatial rank",
                what, shapeString(&x).c_str(), shapeString(&y).c_str());
  g.n = x.shape[0];
  g.c = x.shape[1];
  g.m = y.shape[1];
  g.g = group;
  for (int i = 0; i < 3; ++i) {
    bool on = i < spatial;
    g.in[i] = on ? x.shape[2 + i] : 1;
    g.out[i] = on ? y.shape[2 + i] : 1;
    g.k[i] = on ? kernel[i] : 1;
    g.s[i] = on && strides[i] > 0 ? strides[i] : 1;
    g.d[i] = on && dil[i] > 0 ? dil[i] : 1;
    g.pb[i] = on ? pb[i] : 0;
    if (g.k[i] < 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: kernel size %lld", what,
                  (long long)g.k[i]);
  }
  return AMPRT_OK;
}

amprt_status convGeom(const amprt_tensor &x, const amprt_tensor &w, const amprt_tensor &y,
                      const amprt_conv_params &p, const char *what, Geom &g) {
  if (w.rank != x.rank || !amprt_tensor_is_contiguous(&w) || !floatType(x.dtype) || !floatType(w.dtype) ||
      !floatType(y.dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: operands", what);
  int64_t kernel[3] = {1, 1, 1};
  for (int32_t i = 0; i < p.spatial && i + 2 < w.rank; ++i)
    kernel[i] = w.shape[2 + i];
  AMPRT_CHECK(geomOf(x, y, p.spatial, kernel, p.strides, p.dilations, p.pads_begin, p.group, what, g));
  if (w.shape[0] != g.m || w.shape[1] != g.c / g.g)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: w %s does not fit x %s / y %s", what,
                shapeString(&w).c_str(), shapeString(&x).c_str(), shapeString(&y).c_str());
  return AMPRT_OK;
}

amprt_status bmm(Dev &d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A, const void *B,
                 int32_t abType, void *Y, int32_t yType, int64_t batch, int64_t sA, int64_t sB, int64_t sY);

/// Batch items per chunk of a convolution as products: the gathered
/// windows (C * KP * OP elements of `es` bytes per item) within the budget
/// (AMPRT_CUDA_CONV_CHUNK bytes, 512 MiB by default), one item at least.
int64_t convChunk(const Dev &d, const Geom &g, size_t es) {
  size_t per = (size_t)(g.c * g.kPlane() * g.outPlane()) * es;
  int64_t nc = per ? (int64_t)std::min<size_t>(d.convChunkBytes / per, (size_t)g.n) : g.n;
  return std::max<int64_t>(1, std::min(nc, g.n));
}

/// p (n elements of type t) as type `want`: itself, or a converted copy in
/// scratch slot `slot`.
amprt_status asType(Dev &d, const void *p, int32_t t, int64_t n, int32_t want, int slot, const void **out) {
  *out = p;
  if (t == want)
    return AMPRT_OK;
  void *buf;
  AMPRT_CHECK(scratch(d, slot, (size_t)n * amprt_dtype_size((amprt_dtype)want), &buf));
  *out = buf;
  return each(&d, n, CastFloatF{p, buf, t, want}, "conv operand");
}

/// y = conv(x, w) + bias (ReLU on request) as im2col + one product per
/// chunk: operands of one type (f32 when x and w differ), f32 accumulation,
/// bias and ReLU added in f32 and rounded once.
amprt_status convGemm(Dev &d, const Geom &g, const void *x, int32_t xt, const void *w, int32_t wt,
                      const void *bias, int32_t bt, void *y, int32_t yt, bool relu) {
  int32_t T = xt == wt ? xt : AMPRT_F32;
  int64_t KP = g.kPlane(), OP = g.outPlane(), cpg = g.c / g.g, mpg = g.m / g.g;
  const void *wT;
  AMPRT_CHECK(asType(d, w, wt, g.m * cpg * KP, T, 7, &wT));
  size_t es = amprt_dtype_size((amprt_dtype)T);
  int64_t nc = convChunk(d, g, es);
  void *col, *acc;
  AMPRT_CHECK(scratch(d, 8, (size_t)(g.c * KP * nc * OP) * es, &col));
  AMPRT_CHECK(scratch(d, 9, (size_t)(g.m * nc * OP) * 4, &acc));
  for (int64_t n0 = 0; n0 < g.n; n0 += nc) {
    int64_t cn = std::min(nc, g.n - n0);
    AMPRT_CHECK(each(&d, g.c * KP * cn * OP, Im2ColF{g, x, col, xt, T, n0, cn}, "conv im2col"));
    AMPRT_CHECK(bmm(d, false, false, mpg, cn * OP, cpg * KP, wT, col, T, acc, AMPRT_F32, g.g, mpg * cpg * KP,
                    cpg * KP * cn * OP, mpg * cn * OP));
    AMPRT_CHECK(each(&d, cn * g.m * OP,
                     ConvOutF{g, static_cast<const float *>(acc), bias, y, bt, yt, relu ? 1 : 0, n0, cn},
                     "conv"));
  }
  return AMPRT_OK;
}

/// The data and weight gradients as products (see convGemm): dcol = W^T dy
/// gathered back onto x, dw = dy col^T summed over the chunks.
amprt_status convGradGemm(Dev &d, const Geom &g, const amprt_tensor &x, const amprt_tensor &w,
                          const amprt_tensor &dy, const amprt_tensor *dx, const amprt_tensor *dw) {
  int32_t T = x.dtype == w.dtype && w.dtype == dy.dtype ? x.dtype : AMPRT_F32;
  int64_t KP = g.kPlane(), OP = g.outPlane(), cpg = g.c / g.g, mpg = g.m / g.g, nw = g.m * cpg * KP;
  size_t es = amprt_dtype_size((amprt_dtype)T);
  int64_t nc = convChunk(d, g, 4), chunks = (g.n + nc - 1) / nc;
  const void *wT = nullptr;
  if (dx)
    AMPRT_CHECK(asType(d, w.data, w.dtype, nw, T, 7, &wT));
  void *col = nullptr, *dcol = nullptr, *dyT, *part = nullptr;
  AMPRT_CHECK(scratch(d, 10, (size_t)(g.m * nc * OP) * es, &dyT));
  if (dx)
    AMPRT_CHECK(scratch(d, 9, (size_t)(g.c * KP * nc * OP) * 4, &dcol));
  bool direct = dw && chunks == 1 && dw->dtype == AMPRT_F32;
  if (dw) {
    AMPRT_CHECK(scratch(d, 8, (size_t)(g.c * KP * nc * OP) * es, &col));
    if (!direct)
      AMPRT_CHECK(scratch(d, 11, (size_t)(nw * chunks) * 4, &part));
  }
  for (int64_t n0 = 0, q = 0; n0 < g.n; n0 += nc, ++q) {
    int64_t cn = std::min(nc, g.n - n0);
    AMPRT_CHECK(each(&d, g.m * cn * OP, ChannelMajorF{dy.data, dyT, dy.dtype, T, g.m, OP, n0, cn},
                     "conv_grad"));
    if (dx) {
      AMPRT_CHECK(bmm(d, true, false, cpg * KP, cn * OP, mpg, wT, dyT, T, dcol, AMPRT_F32, g.g,
                      mpg * cpg * KP, mpg * cn * OP, cpg * KP * cn * OP));
      AMPRT_CHECK(each(&d, cn * g.c * g.inPlane(),
                       Col2ImF{g, static_cast<const float *>(dcol), dx->data, dx->dtype, n0, cn},
                       "conv_grad dx"));
    }
    if (dw) {
      AMPRT_CHECK(each(&d, g.c * KP * cn * OP, Im2ColF{g, x.data, col, x.dtype, T, n0, cn}, "conv_grad im2col"));
      void *out = direct ? dw->data : static_cast<char *>(part) + (size_t)(q * nw) * 4;
      AMPRT_CHECK(bmm(d, false, true, mpg, cpg * KP, cn * OP, dyT, col, T, out, AMPRT_F32, g.g, mpg * cn * OP,
                      cpg * KP * cn * OP, mpg * cpg * KP));
    }
  }
  if (dw && !direct)
    AMPRT_CHECK(each(&d, nw, SumPartsF<float>{static_cast<const float *>(part), chunks, 1, nw, dw->data, dw->dtype},
                     "conv_grad dw"));
  return AMPRT_OK;
}

/// y[n, m, p] += bias[m], then ReLU (NaN kept) on request, in f32 and
/// rounded to y's type (after cuDNN's convolution, which rounded once).
struct BiasReluF {
  void *y;
  const void *bias;
  int32_t yt, bt, relu;
  int64_t m, plane;
  HD void operator()(int64_t e) const {
    float v = ldF(y, yt, e);
    if (bias)
      v += ldF(bias, bt, (e / plane) % m);
    if (relu && !(v > 0.0f) && !isNaN(v))
      v = 0.0f;
    stF(y, yt, e, v);
  }
};

#ifdef AMPRT_HAVE_CUDNN
//--- Convolutions on cuDNN -------------------------------------------------------
//
// cuDNN 9's convolution API (forward, backward data, backward filter) takes
// the convolutions whose operands share one type (f32, f16 or bf16; the
// "pseudo" configurations: f32 compute, one rounding of the result), whose
// padding is symmetric where it matters (cuDNN's output shape is ours) and
// whose tensors have fewer than 2^31 elements. Algorithms: cuDNN's
// heuristics (no timing runs, so no synchronisation), deterministic ones
// first, at most kDnnWorkMax bytes of workspace; f32 on FMA kernels only
// (no TF32: f32 stays f32, as on the CPU). Anything cuDNN refuses, and every
// convolution with AMPRT_CUDA_CONV=gemm, runs as im2col + cuBLASLt.

constexpr size_t kDnnWorkMax = (size_t)256 << 20;
enum DnnKind { kDnnFwd, kDnnBwdData, kDnnBwdFilter };

cudnnDataType_t dnnType(int32_t t) {
  return t == AMPRT_F16 ? CUDNN_DATA_HALF : t == AMPRT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

void dnnFree(Dev::DnnPlan &p) {
  if (p.x)
    dnnApi.cudnnDestroyTensorDescriptor(static_cast<cudnnTensorDescriptor_t>(p.x));
  if (p.y)
    dnnApi.cudnnDestroyTensorDescriptor(static_cast<cudnnTensorDescriptor_t>(p.y));
  if (p.w)
    dnnApi.cudnnDestroyFilterDescriptor(static_cast<cudnnFilterDescriptor_t>(p.w));
  if (p.conv)
    dnnApi.cudnnDestroyConvolutionDescriptor(static_cast<cudnnConvolutionDescriptor_t>(p.conv));
  p = Dev::DnnPlan{};
}

/// Whether cuDNN runs this context's convolutions: it is made at the first
/// one (never inside a graph capture). AMPRT_CUDA_CONV=cudnn: an error when
/// cuDNN cannot start; auto: one line on stderr, and im2col + cuBLASLt.
amprt_status dnnReady(Dev &d, bool &ready) {
  ready = false;
  if (d.emulate || d.dnnMode == Dev::kDnnOff)
    return AMPRT_OK;
  if (!d.dnn && !d.dnnTried && !d.capturing) {
    d.dnnTried = true;
    amprt_status s = loadCudnn();
    cudnnHandle_t h = nullptr;
    if (s == AMPRT_OK) {
      cudnnStatus_t st = dnnApi.cudnnCreate(&h);
      if (st == CUDNN_STATUS_SUCCESS && (st = dnnApi.cudnnSetStream(h, d.stream)) != CUDNN_STATUS_SUCCESS)
        dnnApi.cudnnDestroy(h);
      if (st != CUDNN_STATUS_SUCCESS)
        s = fail(AMPRT_ERR_DEVICE, "cuDNN did not start: %s", dnnApi.cudnnGetErrorString(st));
    }
    if (s != AMPRT_OK) {
      std::string why = amprt_last_error();
      if (d.dnnMode == Dev::kDnnRequired)
        return fail(s, "AMPRT_CUDA_CONV=cudnn: %s", why.c_str());
      std::fprintf(stderr, "amprt (cuda): %s: the convolutions run as im2col + cuBLASLt\n", why.c_str());
      return AMPRT_OK;
    }
    d.dnn = h;
  }
  if (!d.dnn && d.dnnMode == Dev::kDnnRequired)
    return fail(AMPRT_ERR_DEVICE, d.capturing ? "AMPRT_CUDA_CONV=cudnn: cuDNN cannot start inside a graph capture "
                                                "(run the step once before capturing it)"
                                              : "AMPRT_CUDA_CONV=cudnn: cuDNN did not start");
  ready = d.dnn != nullptr;
  return AMPRT_OK;
}

/// cuDNN's plan for `kind` of the convolution g (spatial dims, operands of
/// type t), made once per problem; nullptr where cuDNN does not take it.
Dev::DnnPlan *dnnPlan(Dev &d, const Geom &g, int32_t spatial, int32_t t, DnnKind kind) {
  std::vector<int64_t> key{kind, t, spatial, g.n, g.c, g.m, g.g};
  for (int i = 0; i < 3; ++i)
    key.insert(key.end(), {g.in[i], g.out[i], g.k[i], g.s[i], g.d[i], g.pb[i]});
  auto it = d.dnnPlans.find(key);
  if (it != d.dnnPlans.end())
    return it->second.ok ? &it->second : nullptr;
  Dev::DnnPlan &p = d.dnnPlans[key];
  int nd = std::max<int32_t>(spatial, 2); // a 1-D convolution as 2-D with a unit dim
  const int64_t lim = INT32_MAX;
  int64_t xe = g.n * g.c * g.inPlane(), ye = g.n * g.m * g.outPlane();
  bool fits = g.n <= lim && g.c <= lim && g.m <= lim && xe < lim && ye < lim;
  int xd[5], yd[5], wd[5], xs[5], ys[5], pad[3], str[3], dil[3];
  xd[0] = yd[0] = (int)g.n;
  xd[1] = (int)g.c;
  yd[1] = wd[0] = (int)g.m;
  wd[1] = (int)(g.c / g.g);
  for (int i = 0; i < nd; ++i) {
    fits = fits && g.in[i] <= lim && g.pb[i] <= lim && g.s[i] <= lim && g.d[i] <= lim;
    xd[2 + i] = (int)g.in[i];
    yd[2 + i] = (int)g.out[i];
    wd[2 + i] = (int)g.k[i];
    pad[i] = (int)g.pb[i];
    str[i] = (int)g.s[i];
    dil[i] = (int)g.d[i];
  }
  if (!fits)
    return nullptr;
  xs[nd + 1] = ys[nd + 1] = 1;
  for (int i = nd; i >= 0; --i) {
    xs[i] = xs[i + 1] * xd[i + 1];
    ys[i] = ys[i + 1] * yd[i + 1];
  }
  cudnnTensorDescriptor_t xdesc = nullptr, ydesc = nullptr;
  cudnnFilterDescriptor_t wdesc = nullptr;
  cudnnConvolutionDescriptor_t cdesc = nullptr;
  bool ok = dnnApi.cudnnCreateTensorDescriptor(&xdesc) == CUDNN_STATUS_SUCCESS;
  p.x = xdesc;
  ok = ok && dnnApi.cudnnCreateTensorDescriptor(&ydesc) == CUDNN_STATUS_SUCCESS;
  p.y = ydesc;
  ok = ok && dnnApi.cudnnCreateFilterDescriptor(&wdesc) == CUDNN_STATUS_SUCCESS;
  p.w = wdesc;
  ok = ok && dnnApi.cudnnCreateConvolutionDescriptor(&cdesc) == CUDNN_STATUS_SUCCESS;
  p.conv = cdesc;
  cudnnDataType_t dt = dnnType(t);
  ok = ok && dnnApi.cudnnSetTensorNdDescriptor(xdesc, dt, nd + 2, xd, xs) == CUDNN_STATUS_SUCCESS &&
       dnnApi.cudnnSetTensorNdDescriptor(ydesc, dt, nd + 2, yd, ys) == CUDNN_STATUS_SUCCESS &&
       dnnApi.cudnnSetFilterNdDescriptor(wdesc, dt, CUDNN_TENSOR_NCHW, nd + 2, wd) == CUDNN_STATUS_SUCCESS &&
       dnnApi.cudnnSetConvolutionNdDescriptor(cdesc, nd, pad, str, dil, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS &&
       dnnApi.cudnnSetConvolutionGroupCount(cdesc, (int)g.g) == CUDNN_STATUS_SUCCESS &&
       dnnApi.cudnnSetConvolutionMathType(cdesc, t == AMPRT_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH) ==
           CUDNN_STATUS_SUCCESS;
  // cuDNN pads both ends by pads_begin: its output shape must be ours (the
  // windows then start where ours do).
  int od[5] = {0, 0, 0, 0, 0};
  ok = ok && dnnApi.cudnnGetConvolutionNdForwardOutputDim(cdesc, xdesc, wdesc, nd + 2, od) == CUDNN_STATUS_SUCCESS &&
       std::equal(od, od + nd + 2, yd);
  // The heuristics' candidates, best first: deterministic ones first, then
  // any; f32 only on FMA kernels.
  struct Cand {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t det;
    cudnnMathType_t math;
  };
  std::vector<Cand> cands;
  if (ok) {
    int n = 0;
    if (kind == kDnnFwd) {
      cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      ok = dnnApi.cudnnGetConvolutionForwardAlgorithm_v7(static_cast<cudnnHandle_t>(d.dnn), xdesc, wdesc, cdesc,
                                                         ydesc, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r) ==
           CUDNN_STATUS_SUCCESS;
      for (int i = 0; ok && i < n; ++i)
        cands.push_back({(int)r[i].algo, r[i].status, r[i].memory, r[i].determinism, r[i].mathType});
    } else if (kind == kDnnBwdData) {
      cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      ok = dnnApi.cudnnGetConvolutionBackwardDataAlgorithm_v7(static_cast<cudnnHandle_t>(d.dnn), wdesc, ydesc,
                                                              cdesc, xdesc, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                              &n, r) == CUDNN_STATUS_SUCCESS;
      for (int i = 0; ok && i < n; ++i)
        cands.push_back({(int)r[i].algo, r[i].status, r[i].memory, r[i].determinism, r[i].mathType});
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      ok = dnnApi.cudnnGetConvolutionBackwardFilterAlgorithm_v7(static_cast<cudnnHandle_t>(d.dnn), xdesc, ydesc,
                                                                cdesc, wdesc,
                                                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r) ==
           CUDNN_STATUS_SUCCESS;
      for (int i = 0; ok && i < n; ++i)
        cands.push_back({(int)r[i].algo, r[i].status, r[i].memory, r[i].determinism, r[i].mathType});
    }
  }
  const Cand *pick = nullptr;
  for (int pass = 0; ok && pass < 2 && !pick; ++pass)
    for (const Cand &c : cands)
      if (c.status == CUDNN_STATUS_SUCCESS && c.memory <= kDnnWorkMax &&
          (t != AMPRT_F32 || c.math == CUDNN_FMA_MATH) && (pass == 1 || c.det == CUDNN_DETERMINISTIC)) {
        pick = &c;
        break;
      }
  ok = ok && pick && dnnApi.cudnnSetConvolutionMathType(cdesc, pick->math) == CUDNN_STATUS_SUCCESS;
  if (!ok) {
    dnnFree(p); // remembered as refused
    return nullptr;
  }
  p.algo = pick->algo;
  p.work = pick->memory;
  p.ok = true;
  return &p;
}

/// Runs one cuDNN call of plan p; false (and the plan dropped) when cuDNN
/// fails it, unless AMPRT_CUDA_CONV=cudnn (then an error).
amprt_status dnnRun(Dev &d, Dev::DnnPlan &p, DnnKind kind, const void *a, const void *b, void *out, bool &done) {
  done = false;
  void *ws = nullptr;
  if (p.work)
    AMPRT_CHECK(scratch(d, 12, p.work, &ws));
  float one = 1.0f, zero = 0.0f;
  auto h = static_cast<cudnnHandle_t>(d.dnn);
  auto xd = static_cast<cudnnTensorDescriptor_t>(p.x), yd = static_cast<cudnnTensorDescriptor_t>(p.y);
  auto wd = static_cast<cudnnFilterDescriptor_t>(p.w);
  auto cd = static_cast<cudnnConvolutionDescriptor_t>(p.conv);
  cudnnStatus_t st =
      kind == kDnnFwd ? dnnApi.cudnnConvolutionForward(h, &one, xd, a, wd, b, cd, (cudnnConvolutionFwdAlgo_t)p.algo,
                                                       ws, p.work, &zero, yd, out)
      : kind == kDnnBwdData
          ? dnnApi.cudnnConvolutionBackwardData(h, &one, wd, a, yd, b, cd, (cudnnConvolutionBwdDataAlgo_t)p.algo,
                                                ws, p.work, &zero, xd, out)
          : dnnApi.cudnnConvolutionBackwardFilter(h, &one, xd, a, yd, b, cd,
                                                  (cudnnConvolutionBwdFilterAlgo_t)p.algo, ws, p.work, &zero, wd,
                                                  out);
  if (st == CUDNN_STATUS_SUCCESS) {
    done = true;
    return AMPRT_OK;
  }
  static const char *names[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                "cudnnConvolutionBackwardFilter"};
  if (d.dnnMode == Dev::kDnnRequired)
    return fail(AMPRT_ERR_DEVICE, "%s: %s", names[kind], dnnApi.cudnnGetErrorString(st));
  std::fprintf(stderr, "amprt (cuda): %s: %s (algorithm %d): this convolution runs as im2col + cuBLASLt\n",
               names[kind], dnnApi.cudnnGetErrorString(st), p.algo);
  dnnFree(p); // refused from now on
  return AMPRT_OK;
}

/// y = conv(x, w) + bias (ReLU on request) on cuDNN where it takes it
/// (done), the bias and ReLU a second pass.
amprt_status dnnConv(Dev &d, const Geom &g, int32_t spatial, const void *x, int32_t xt, const void *w,
                     int32_t wt, const void *bias, int32_t bt, void *y, int32_t yt, bool relu, bool &done) {
  done = false;
  bool ready;
  AMPRT_CHECK(dnnReady(d, ready));
  if (!ready || xt != wt || yt != xt)
    return AMPRT_OK;
  Dev::DnnPlan *p = dnnPlan(d, g, spatial, xt, kDnnFwd);
  if (!p)
    return AMPRT_OK;
  AMPRT_CHECK(dnnRun(d, *p, kDnnFwd, x, w, y, done));
  if (done && (bias || relu))
    AMPRT_CHECK(each(&d, g.n * g.m * g.outPlane(), BiasReluF{y, bias, yt, bt, relu ? 1 : 0, g.m, g.outPlane()},
                     "conv bias"));
  return AMPRT_OK;
}

/// The data and weight gradients on cuDNN where it takes them: each one it
/// computed is set to nullptr (the rest run as products).
amprt_status dnnConvGrad(Dev &d, const Geom &g, int32_t spatial, const amprt_tensor &x, const amprt_tensor &w,
                         const amprt_tensor &dy, const amprt_tensor *&dx, const amprt_tensor *&dw) {
  bool ready;
  AMPRT_CHECK(dnnReady(d, ready));
  if (!ready)
    return AMPRT_OK;
  bool done;
  if (dx && dx->dtype == dy.dtype && w.dtype == dy.dtype)
    if (Dev::DnnPlan *p = dnnPlan(d, g, spatial, dy.dtype, kDnnBwdData)) {
      AMPRT_CHECK(dnnRun(d, *p, kDnnBwdData, w.data, dy.data, dx->data, done));
      if (done)
        dx = nullptr;
    }
  if (dw && dw->dtype == dy.dtype && x.dtype == dy.dtype)
    if (Dev::DnnPlan *p = dnnPlan(d, g, spatial, dy.dtype, kDnnBwdFilter)) {
      AMPRT_CHECK(dnnRun(d, *p, kDnnBwdFilter, x.data, dy.data, dw->data, done));
      if (done)
        dw = nullptr;
    }
  return AMPRT_OK;
}
#endif

amprt_status conv(Dev &d, const Decoded &dd, bool withBn) {
  amprt_conv_params p{};
  bool hasBias = false;
  AMPRT_CHECK(convParams(dd, withBn ? 7 : 3, withBn ? 1 : 0, withBn ? "conv_bn" : "conv", p, hasBias));
  const int64_t *a = dd.attrs;
  const auto &t = dd.t;
  int64_t at = withBn ? 4 + 4 * a[0] : 3 + 4 * a[0];
  int32_t flags = dd.nattrs > at ? (int32_t)a[at] : 0;
  if (flags & ~(AMPRT_CONV_RELU | AMPRT_CONV_SRC_BLOCKED | AMPRT_CONV_DST_BLOCKED))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv flags %d", flags);
  // Channel-blocked values are plain NCHW here: every reader and writer of
  // them on this device agrees (the blocked flags are the CPU's layouts).
  const amprt_tensor &x = t[0], &w = t[1], &y = t.back();
  Geom g;
  AMPRT_CHECK(convGeom(x, w, y, p, "conv", g));
  const void *wp = w.data, *bp = hasBias ? t[2].data : nullptr;
  int32_t wt = w.dtype, bt = hasBias ? t[2].dtype : AMPRT_F32;
  if (hasBias && numel(t[2]) != g.m)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv bias must be [%lld]", (long long)g.m);
  if (withBn) {
    size_t o = hasBias ? 3 : 2; // scale, shift, mean, var
    for (size_t k = 0; k < 4; ++k)
      if (t[o + k].dtype != AMPRT_F32 || numel(t[o + k]) != g.m || !amprt_tensor_is_contiguous(&t[o + k]))
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv_bn's statistics must be f32 [%lld]",
                    (long long)g.m);
    if (w.dtype != AMPRT_F32 || (hasBias && t[2].dtype != AMPRT_F32))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv_bn needs f32 weights and bias");
    void *buf;
    AMPRT_CHECK(scratch(d, 4, (size_t)(numel(w) + g.m) * 4, &buf));
    float *wf = static_cast<float *>(buf), *bf = wf + numel(w);
    AMPRT_CHECK(each(&d, numel(w),
                     FoldBnF{static_cast<const float *>(w.data),
                             hasBias ? static_cast<const float *>(t[2].data) : nullptr,
                             static_cast<const float *>(t[o].data), static_cast<const float *>(t[o + 1].data),
                             static_cast<const float *>(t[o + 2].data), static_cast<const float *>(t[o + 3].data),
                             wf, bf, g.m ? numel(w) / g.m : 1, attrF(a, 3 + 4 * a[0])},
                     "conv_bn"));
    wp = wf;
    bp = bf;
    wt = bt = AMPRT_F32;
  }
  bool relu = (flags & AMPRT_CONV_RELU) != 0;
  if (!d.directConv && numel(y) > 0) {
#ifdef AMPRT_HAVE_CUDNN
    bool done;
    AMPRT_CHECK(dnnConv(d, g, p.spatial, x.data, x.dtype, wp, wt, bp, bt, y.data, y.dtype, relu, done));
    if (done) {
      ++d.convOnDnn;
      return AMPRT_OK;
    }
#endif
    ++d.convOnOurs;
    return convGemm(d, g, x.data, x.dtype, wp, wt, bp, bt, y.data, y.dtype, relu);
  }
  return each(&d, numel(y),
              ConvF{g, x.data, wp, bp, y.data, x.dtype, wt, bt, y.dtype, (flags & AMPRT_CONV_RELU) ? 1 : 0},
              "conv");
}

amprt_status convGrad(Dev &d, const Decoded &dd) {
  const auto &t = dd.t;
  amprt_conv_params p{};
  const int64_t *want = nullptr;
  AMPRT_CHECK(convGradParams(dd, p, want));
  const amprt_tensor &x = t[0], &w = t[1], &dy = t[2];
  Geom g;
  AMPRT_CHECK(convGeom(x, w, dy, p, "conv_grad", g));
  if (want[0] && (numel(t[3]) != numel(x) || !amprt_tensor_is_contiguous(&t[3])))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv_grad dx");
  if (want[1] && (numel(t[4]) != numel(w) || !amprt_tensor_is_contiguous(&t[4])))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv_grad dw");
  bool gemm = !d.directConv && numel(dy) > 0 && numel(x) > 0;
  const amprt_tensor *dx = want[0] ? &t[3] : nullptr, *dw = want[1] ? &t[4] : nullptr;
#ifdef AMPRT_HAVE_CUDNN
  if (gemm && (dx || dw)) {
    int before = (dx != nullptr) + (dw != nullptr);
    AMPRT_CHECK(dnnConvGrad(d, g, p.spatial, x, w, dy, dx, dw));
    d.convOnDnn += before - (dx != nullptr) - (dw != nullptr);
  }
#endif
  d.convOnOurs += (dx != nullptr) + (dw != nullptr);
  if (gemm && (dx || dw))
    AMPRT_CHECK(convGradGemm(d, g, x, w, dy, dx, dw));
  if (want[0] && !gemm) {
    AMPRT_CHECK(each(&d, numel(x), ConvDxF{g, dy.data, w.data, t[3].data, dy.dtype, w.dtype, t[3].dtype},
                     "conv_grad dx"));
  }
  if (want[1] && !gemm) {
    ConvDwF f{g, x.data, dy.data, t[4].data, x.dtype, dy.dtype, t[4].dtype, nullptr};
    if (numel(w) >= 16384 || g.n == 1) {
      AMPRT_CHECK(each(&d, numel(w), f, "conv_grad dw"));
    } else { // one part per batch item, then their sum
      void *buf;
      AMPRT_CHECK(scratch(d, 6, (size_t)(numel(w) * g.n) * 8, &buf));
      f.partial = static_cast<double *>(buf);
      AMPRT_CHECK(each(&d, numel(w) * g.n, f, "conv_grad dw"));
      AMPRT_CHECK(each(&d, numel(w), SumPartsF<double>{f.partial, g.n, g.n, 1, t[4].data, t[4].dtype}, "conv_grad dw"));
    }
  }
  if (want[2]) {
    if (numel(t[5]) != g.m)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): conv_grad db");
    void *buf;
    AMPRT_CHECK(scratch(d, 5, (size_t)(g.m * g.n) * 8, &buf));
    AMPRT_CHECK(each(&d, g.m * g.n,
                     ChannelSumF{dy.data, dy.dtype, g.n, g.m, g.outPlane(), static_cast<double *>(buf)},
                     "conv_grad db"));
    AMPRT_CHECK(each(&d, g.m, SumPartsF<double>{static_cast<const double *>(buf), g.n, g.n, 1, t[5].data, t[5].dtype},
                     "conv_grad db"));
  }
  return AMPRT_OK;
}

amprt_status pool(Dev &d, const Decoded &dd) {
  // A channel-blocked max pool's x and y are plain NCHW here (see conv).
  PoolAttrs pa;
  AMPRT_CHECK(poolAttrs(dd, pa));
  const amprt_pool_params &p = pa.p;
  const auto &t = dd.t;
  Geom g;
  if (dd.opcode == AMPRT_OP_AVERAGE_POOL) {
    AMPRT_CHECK(geomOf(t[0], t[1], p.spatial, p.kernel, p.strides, p.dilations, p.pads_begin, 1,
                       "average_pool", g));
    return each(&d, numel(t[1]), AvgPoolF{g, t[0].data, t[1].data, t[0].dtype, t[1].dtype, p.count_include_pad},
                "average_pool");
  }
  int32_t storage = p.storage_order;
  bool wantIndices = pa.wantIndices;
  AMPRT_CHECK(geomOf(t[0], t[1], p.spatial, p.kernel, p.strides, p.dilations, p.pads_begin, 1, "max_pool", g));
  if (g.c != g.m)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): max_pool channels differ");
  int64_t *idx = nullptr;
  if (wantIndices) {
    if (t[2].dtype != AMPRT_I64 || numel(t[2]) != numel(t[1]))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): max_pool indices must be i64 with y's size");
    idx = static_cast<int64_t *>(t[2].data);
  }
  return each(&d, numel(t[1]), MaxPoolF{g, t[0].data, t[1].data, idx, t[0].dtype, t[1].dtype, storage},
              "max_pool");
}

amprt_status poolGrad(Dev &d, const Decoded &dd) {
  const auto &t = dd.t;
  if (dd.opcode == AMPRT_OP_MAX_POOL_GRAD) {
    AMPRT_CHECK(need(dd, 4, 0, "max_pool_grad"));
    const amprt_tensor &dy = t[1], &idx = t[2], &dx = t[3];
    if (idx.dtype != AMPRT_I64 || numel(idx) != numel(dy) || !amprt_tensor_is_contiguous(&dx) ||
        !amprt_tensor_is_contiguous(&dy) || !floatType(dx.dtype))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): max_pool_grad's operands");
    void *acc = dx.data;
    if (dx.dtype != AMPRT_F32)
      AMPRT_CHECK(scratch(d, 0, (size_t)numel(dx) * 4, &acc));
    AMPRT_CHECK(zero(d, acc, (size_t)numel(dx) * 4));
    AMPRT_CHECK(each(&d, numel(dy),
                     MaxPoolGradF{dy.data, dy.dtype, static_cast<const int64_t *>(idx.data),
                                  static_cast<float *>(acc), numel(dx), d.err},
                     "max_pool_grad"));
    if (dx.dtype != AMPRT_F32)
      AMPRT_CHECK(each(&d, numel(dx), CastFloatF{acc, dx.data, AMPRT_F32, dx.dtype}, "max_pool_grad"));
    return AMPRT_OK;
  }
  PoolAttrs pa;
  AMPRT_CHECK(poolAttrs(dd, pa));
  const amprt_pool_params &p = pa.p;
  Geom g;
  AMPRT_CHECK(geomOf(t[2], t[1], p.spatial, p.kernel, p.strides, p.dilations, p.pads_begin, 1,
                     "average_pool_grad", g));
  return each(&d, numel(t[2]), AvgPoolGradF{g, t[1].data, t[2].data, t[1].dtype, t[2].dtype, p.count_include_pad},
              "average_pool_grad");
}

amprt_status checkChannels(const amprt_tensor &t, int64_t c, const char *what) {
  if (!floatType(t.dtype) || numel(t) != c || !amprt_tensor_is_contiguous(&t))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s must be a float [%lld]", what, (long long)c);
  return AMPRT_OK;
}

amprt_status batchNorm(Dev &d, const Decoded &dd) {
  AMPRT_CHECK(need(dd, 8, 3, "batch_norm"));
  const auto &t = dd.t;
  const int64_t *a = dd.attrs;
  const amprt_tensor &x = t[0], &y = t[5];
  if (x.rank < 2 || !sameShape(x, y) || !amprt_tensor_is_contiguous(&x) || !amprt_tensor_is_contiguous(&y) ||
      !floatType(x.dtype) || !floatType(y.dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): batch_norm's x and y");
  int64_t n = x.shape[0], c = x.shape[1], plane = c ? numel(x) / (n * c ? n * c : 1) : 0;
  for (size_t k : {1, 2, 3, 4})
    AMPRT_CHECK(checkChannels(t[k], c, "a batch_norm parameter"));
  for (size_t k : {6, 7})
    if (t[k].data)
      AMPRT_CHECK(checkChannels(t[k], c, "a running statistic"));
  int64_t total = n * plane, parts = std::max<int64_t>(1, (total + kBnChunk - 1) / kBnChunk);
  bool training = a[2] != 0;
  void *buf;
  AMPRT_CHECK(scratch(d, 5, (size_t)c * 16 + (training ? (size_t)(c * parts) * 16 : 0) + 16, &buf));
  double *mu = static_cast<double *>(buf), *is = mu + c, *part = is + c;
  if (training) {
    AMPRT_CHECK(each(&d, c * parts,
                     BnPartsF{x.data, nullptr, x.dtype, AMPRT_F32, 0, c, plane, total, parts, nullptr, nullptr, part},
                     "batch_norm"));
    AMPRT_CHECK(each(&d, c, BnMeanF{part, parts, (double)total, mu}, "batch_norm"));
    AMPRT_CHECK(each(&d, c * parts,
                     BnPartsF{x.data, nullptr, x.dtype, AMPRT_F32, 1, c, plane, total, parts, mu, nullptr, part},
                     "batch_norm"));
  }
  AMPRT_CHECK(each(&d, c,
                   BnStatsF{t[3].data, t[4].data, t[3].dtype, t[4].dtype, training ? 1 : 0, part, parts,
                            (double)total, (float)attrF(a, 0), (float)attrF(a, 1), mu, is, t[6].data, t[7].data,
                            t[6].dtype, t[7].dtype},
                   "batch_norm"));
  return each(&d, numel(x),
              BnApplyF{x.data, t[1].data, t[2].data, y.data, x.dtype, t[1].dtype, t[2].dtype, y.dtype, c, plane,
                       mu, is},
              "batch_norm");
}

amprt_status batchNormGrad(Dev &d, const Decoded &dd) {
  AMPRT_CHECK(need(dd, 6, 4, "batch_norm_grad"));
  const auto &t = dd.t;
  const int64_t *a = dd.attrs;
  const amprt_tensor &x = t[0], &scale = t[1], &dy = t[2];
  if (x.rank < 2 || !sameShape(x, dy) || !amprt_tensor_is_contiguous(&x) || !amprt_tensor_is_contiguous(&dy) ||
      !floatType(x.dtype) || !floatType(dy.dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): batch_norm_grad's x and dy");
  int64_t n = x.shape[0], c = x.shape[1], plane = n * c ? numel(x) / (n * c) : 0;
  AMPRT_CHECK(checkChannels(scale, c, "batch_norm_grad's scale"));
  int64_t total = n * plane, parts = std::max<int64_t>(1, (total + kBnChunk - 1) / kBnChunk);
  void *buf;
  AMPRT_CHECK(scratch(d, 5, (size_t)c * 32 + (size_t)(c * parts) * 16 + 32, &buf));
  double *mu = static_cast<double *>(buf), *is = mu + c, *sdy = is + c, *sdyx = sdy + c, *part = sdyx + c;
  AMPRT_CHECK(each(&d, c * parts,
                   BnPartsF{x.data, nullptr, x.dtype, AMPRT_F32, 2, c, plane, total, parts, nullptr, nullptr, part},
                   "batch_norm_grad"));
  AMPRT_CHECK(each(&d, c, BnGradStatsF{part, parts, (double)total, (float)attrF(a, 0), mu, is}, "batch_norm_grad"));
  AMPRT_CHECK(each(&d, c * parts,
                   BnPartsF{x.data, dy.data, x.dtype, dy.dtype, 3, c, plane, total, parts, mu, is, part},
                   "batch_norm_grad"));
  AMPRT_CHECK(each(&d, c,
                   BnGradSumsF{part, parts, sdy, sdyx, a[2] ? t[4].data : nullptr, a[3] ? t[5].data : nullptr,
                               t[4].dtype, t[5].dtype},
                   "batch_norm_grad"));
  if (!a[1])
    return AMPRT_OK;
  return each(&d, numel(x),
              BnGradDxF{x.data, dy.data, scale.data, t[3].data, x.dtype, dy.dtype, scale.dtype, t[3].dtype, c,
                        plane, n, mu, is, sdy, sdyx},
              "batch_norm_grad");
}

//--- Matrix products (cuBLASLt) ------------------------------------------------------

cudaDataType_t cudaType(int32_t t) {
  return t == AMPRT_F16 ? CUDA_R_16F : t == AMPRT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

#define LT_CHECK(call, what)                                                   \
  do {                                                                         \
    cublasStatus_t st_ = (call);                                               \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                          \
      return fail(AMPRT_ERR_DEVICE, "%s: cuBLASLt status %d", what, (int)st_); \
  } while (0)

/// Row-major Y[m, n] (= alpha op(A) op(B) [+ bias row]) for `batch`
/// matrices at strides sA, sB, sY (elements): computed as the column-major
/// Y^T = op(B)^T op(A)^T, so that no operand moves.
amprt_status ltMatmul(Dev &d, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      const void *A, const void *B, int32_t abType, void *Y, int32_t yType,
                      float alpha, const void *bias, int64_t batch, int64_t sA, int64_t sB,
                      int64_t sY, bool relu = false) {
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
    return batch > 1 ? std::min(a, alignOf(reinterpret_cast<const void *>((uintptr_t)strideBytes))) : a;
  };
  uint32_t alA = alignIn(B, sB * (int64_t)eAB), alB = alignIn(A, sA * (int64_t)eAB),
           alC = alignIn(Y, sY * (int64_t)eY), alBias = bias ? alignOf(bias) : 256;
  std::vector<int64_t> key{ta, tb, m, n, k, abType, yType, bias != nullptr, batch, sA, sB, sY,
                           alA, alB, alC, alBias, relu};
  auto it = d.plans.find(key);
  if (it == d.plans.end()) {
    Dev::LtPlan p;
    const char *w = "cuBLASLt matmul setup";
    LT_CHECK(ltApi.cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), w);
    cublasOperation_t opA = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opB = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(ltApi.cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA), w);
    LT_CHECK(ltApi.cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB), w);
    if (bias || relu) {
      cublasLtEpilogue_t epi = !relu ? CUBLASLT_EPILOGUE_BIAS
                               : bias ? CUBLASLT_EPILOGUE_RELU_BIAS
                                      : CUBLASLT_EPILOGUE_RELU;
      LT_CHECK(ltApi.cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), w);
    }
    // Lt's A is our B, its B our A.
    LT_CHECK(ltApi.cublasLtMatrixLayoutCreate(&p.a, cudaType(abType), tb ? k : n, tb ? n : k, tb ? k : n), w);
    LT_CHECK(ltApi.cublasLtMatrixLayoutCreate(&p.b, cudaType(abType), ta ? m : k, ta ? k : m, ta ? m : k), w);
    LT_CHECK(ltApi.cublasLtMatrixLayoutCreate(&p.c, cudaType(yType), n, m, n), w);
    if (batch > 1) {
      int32_t bc = (int32_t)batch;
      for (auto [lay, stride] : {std::make_pair(p.a, sB), std::make_pair(p.b, sA), std::make_pair(p.c, sY)}) {
        LT_CHECK(ltApi.cublasLtMatrixLayoutSetAttribute(lay, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc), w);
        LT_CHECK(ltApi.cublasLtMatrixLayoutSetAttribute(lay, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof stride), w);
      }
    }
    cublasLtMatmulPreference_t pref;
    LT_CHECK(ltApi.cublasLtMatmulPreferenceCreate(&pref), w);
    LT_CHECK(ltApi.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &d.ltWorkBytes, sizeof d.ltWorkBytes), w);
    for (auto [attr, al] : {std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alA),
                            std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alB),
                            std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alC),
                            std::make_pair(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alC)})
      LT_CHECK(ltApi.cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al), w);
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublasStatus_t st = ltApi.cublasLtMatmulAlgoGetHeuristic(d.lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &h, &found);
    ltApi.cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      ltApi.cublasLtMatmulDescDestroy(p.op);
      for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c})
        ltApi.cublasLtMatrixLayoutDestroy(l);
      return fail(AMPRT_ERR_UNSUPPORTED,
                  "cuBLASLt has no algorithm for [%lld, %lld] x [%lld, %lld] (%s -> %s)",
                  (long long)m, (long long)k, (long long)k, (long long)n,
                  amprt_dtype_name((amprt_dtype)abType), amprt_dtype_name((amprt_dtype)yType));
    }
    p.algo = h.algo;
    it = d.plans.emplace(key, p).first;
  }
  Dev::LtPlan &p = it->second;
  if (bias)
    LT_CHECK(ltApi.cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
             "cuBLASLt bias");
  float beta = 0.0f;
  LT_CHECK(ltApi.cublasLtMatmul(d.lt, p.op, &alpha, B, p.a, A, p.b, &beta, Y, p.c, Y, p.c, &p.algo,
                          d.ltWork, d.ltWorkBytes, d.stream),
           "cublasLtMatmul");
  return AMPRT_OK;
}

/// `batch` row-major products Y_q[m, n] = op(A_q) op(B_q), X_q = X + q * sX
/// (elements): one strided cuBLASLt call, or emulated the CPU runtime's
/// product per item.
amprt_status bmm(Dev &d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A, const void *B,
                 int32_t abType, void *Y, int32_t yType, int64_t batch, int64_t sA, int64_t sB, int64_t sY) {
  if (!d.emulate)
    return ltMatmul(d, ta, tb, m, n, k, A, B, abType, Y, yType, 1.0f, nullptr, batch, sA, sB, sY);
#ifdef AMPRT_CUDA_CORE_ONLY
  return unsupported("an emulated matrix product (this build has no CPU kernels)");
#else
  size_t ea = amprt_dtype_size((amprt_dtype)abType), ey = amprt_dtype_size((amprt_dtype)yType);
  int64_t shA[2] = {ta ? k : m, ta ? m : k}, shB[2] = {tb ? n : k, tb ? k : n}, shY[2] = {m, n};
  for (int64_t q = 0; q < batch; ++q) {
    amprt_tensor a = amprt_tensor_make(const_cast<char *>(static_cast<const char *>(A)) + q * sA * ea,
                                       (amprt_dtype)abType, 2, shA);
    amprt_tensor b = amprt_tensor_make(const_cast<char *>(static_cast<const char *>(B)) + q * sB * ea,
                                       (amprt_dtype)abType, 2, shB);
    amprt_tensor y = amprt_tensor_make(static_cast<char *>(Y) + q * sY * ey, (amprt_dtype)yType, 2, shY);
    AMPRT_CHECK(amprt_gemm_ex(nullptr, &a, &b, nullptr, 1.0f, 0.0f, ta, tb, 0, &y));
  }
  return AMPRT_OK;
#endif
}

/// Whether cuBLASLt writes this output type from these operands directly.
bool ltWrites(int32_t ab, int32_t y) { return y == AMPRT_F32 || y == ab; }

amprt_status gemm(amprt_context *ctx, Dev &d, const Decoded &dd) {
  const int64_t *a = dd.attrs;
  const auto &t = dd.t;
  bool hasC = a[4] != 0;
  float alpha = (float)attrF(a, 0), beta = (float)attrF(a, 1);
  int ta = (int)a[2], tb = (int)a[3];
  int32_t flags = dd.nattrs > 5 ? (int32_t)a[5] : 0;
  const amprt_tensor &A = t[0], &B = t[1], &Y = t.back();
  const amprt_tensor *C = hasC ? &t[2] : nullptr;
  if (d.emulate) {
#ifdef AMPRT_CUDA_CORE_ONLY
    return unsupported("an emulated gemm (this build has no CPU kernels)");
#else
    return amprt_gemm_ex(nullptr, &A, &B, C, alpha, beta, ta, tb, flags, const_cast<amprt_tensor *>(&Y));
#endif
  }
  if (flags & ~AMPRT_GEMM_RELU)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): gemm flags %d", flags);
  for (const amprt_tensor *x : {&A, &B, &Y})
    if (x->rank != 2 || !floatType(x->dtype) || !amprt_tensor_is_contiguous(x))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): gemm needs contiguous 2-D float operands");
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
      amprt_status st = ltMatmul(d, ta, tb, m, n, k, A.data, B.data, A.dtype, Y.data, Y.dtype, alpha,
                                 biasRow ? C->data : nullptr, 1, 0, 0, 0, fusedRelu);
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
  if (d.emulate) {
#ifdef AMPRT_CUDA_CORE_ONLY
    return unsupported("an emulated matmul (this build has no CPU kernels)");
#else
    return amprt_matmul(nullptr, &A, &B, const_cast<amprt_tensor *>(&Y));
#endif
  }
  // A and B dense, or transposed views of dense matrix stacks (read in
  // place: cuBLASLt's transposes).
  int la = matrixLayout(&A), lb = matrixLayout(&B);
  for (const amprt_tensor *x : {&A, &B, &Y})
    if (!floatType(x->dtype) || x->rank < 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): matmul needs float operands");
  if (la < 0 || lb < 0 || !amprt_tensor_is_contiguous(&Y))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
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
    AMPRT_CHECK(each(&d, batches * m * n * (int64_t)ys, FillZeroF{static_cast<char *>(out)}, "matmul"));
  } else if (affine) {
    AMPRT_CHECK(ltMatmul(d, ta, tb, m, n, k, A.data, B.data, A.dtype, out, outType, 1.0f,
                         nullptr, batches, dA, dB, m * n));
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

//--- The executor ------------------------------------------------------------------

amprt_status reduceMask(const amprt_tensor &x, const amprt_tensor &y, bool *reduced,
                        int64_t &count, const char *what) {
  if (x.rank != y.rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: ranks differ", what);
  count = 1;
  for (int32_t i = 0; i < AMPRT_MAX_RANK; ++i)
    reduced[i] = false;
  for (int32_t i = 0; i < x.rank; ++i) {
    if (y.shape[i] != x.shape[i] && y.shape[i] != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: shapes do not agree", what);
    reduced[i] = y.shape[i] == 1 && x.shape[i] != 1;
    if (reduced[i])
      count *= x.shape[i];
  }
  return AMPRT_OK;
}

amprt_status loss(Dev &d, const Decoded &dd, bool grad) {
  const auto &t = dd.t;
  LossAttrs la;
  AMPRT_CHECK(lossAttrs(dd, grad, la));
  bool hasW = la.hasWeights, sce = la.softmax;
  int32_t reduction = la.reduction;
  size_t o = la.out;
  // The scores' (or log-probabilities') shape: t[0] (for nll_loss_grad t[0]
  // is the input, shape only).
  const amprt_tensor &scores = t[0], &labels = t[1];
  if (scores.rank < 2 || labels.rank != scores.rank - 1 || !floatType(scores.dtype) ||
      (labels.dtype != AMPRT_I32 && labels.dtype != AMPRT_I64))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): loss shapes / types");
  AMPRT_CHECK(checkContiguous(scores, -1, "the scores"));
  AMPRT_CHECK(checkContiguous(labels, -1, "the labels"));
  LossCommon lc{viewOf(labels), View{}, scores.shape[0], scores.shape[1], 1, la.hasIgnore, la.ignore, d.err};
  for (int32_t i = 2; i < scores.rank; ++i) {
    if (labels.shape[i - 1] != scores.shape[i])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): labels do not match the scores");
    lc.inner *= scores.shape[i];
  }
  if (labels.shape[0] != lc.n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): labels do not match the scores");
  if (hasW) {
    if (numel(t[2]) != lc.c)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): class weights size");
    lc.weights = viewOf(t[2]);
  }
  int64_t samples = lc.n * lc.inner;
  if (!grad) {
    const amprt_tensor &out = t[o];
    View logp = viewOf(scores);
    if (sce) {
      // log_softmax along the classes into log_prob (f32 scratch when it
      // is another type: the loss reads f32, as the CPU runtime).
      const amprt_tensor &lp = t[o + 1];
      AMPRT_CHECK(checkContiguous(lp, -1, "log_prob"));
      int64_t rows;
      Rows r = rowsOf(scores, 1, rows);
      AMPRT_CHECK(eachRow(&d, rows, scores.shape[1], SoftmaxF{viewOf(scores), viewOf(lp), r, 1}, "softmax_cross_entropy"));
      logp = viewOf(lp);
      if (lp.dtype != AMPRT_F32) {
        void *tmp;
        AMPRT_CHECK(scratch(d, 2, (size_t)numel(scores) * 4, &tmp));
        amprt_tensor f = amprt_tensor_make(tmp, AMPRT_F32, scores.rank, scores.shape);
        AMPRT_CHECK(eachRow(&d, rows, scores.shape[1], SoftmaxF{viewOf(scores), viewOf(f), r, 1}, "softmax_cross_entropy"));
        logp = viewOf(f);
      }
    }
    if (reduction == AMPRT_REDUCTION_NONE ? numel(out) != samples : numel(out) != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): loss output size");
    void *buf;
    AMPRT_CHECK(scratch(d, 1, (size_t)samples * 16 + 16, &buf));
    double *ls = static_cast<double *>(buf), *ws = ls + samples;
    AMPRT_CHECK(each(&d, samples, NllSampleF{lc, logp, ls, ws}, "loss"));
    if (reduction == AMPRT_REDUCTION_NONE)
      return each(&d, samples, NllStoreNoneF{ls, viewOf(out)}, "loss");
    return each(&d, 1, NllReduceF{ls, ws, samples, reduction, viewOf(out), nullptr}, "loss");
  }
  const amprt_tensor &dloss = t[o], &dout = t[o + 1];
  AMPRT_CHECK(checkContiguous(dout, -1, "the loss gradient"));
  if (!sameShape(dout, scores))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): the loss gradient's shape");
  if (reduction == AMPRT_REDUCTION_NONE ? numel(dloss) != samples : numel(dloss) != 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): dloss size");
  void *wsum;
  AMPRT_CHECK(scratch(d, 1, 16, &wsum));
  AMPRT_CHECK(each(&d, 1, WeightSumF{lc, static_cast<double *>(wsum)}, "loss gradient"));
  return each(&d, numel(dout),
              LossGradF{lc, viewOf(scores), viewOf(dloss), viewOf(dout),
                        static_cast<const double *>(wsum), reduction, sce ? 1 : 0},
              "loss gradient");
}

/// A layer norm's x [rows, cols] split at `axis` (x and `other`, y or dy,
/// contiguous of one shape) and its parameter `p` seen over the trailing
/// dims (broadcast).
amprt_status layerNormShape(const amprt_tensor &x, const amprt_tensor &other, int32_t axis,
                            const amprt_tensor &p, const char *what, int64_t &rows,
                            int64_t &cols, View &pv) {
  if (axis < 0 || axis >= x.rank || !sameShape(x, other) || !amprt_tensor_is_contiguous(&x) ||
      !amprt_tensor_is_contiguous(&other))
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec (cuda): %s: x %s must be contiguous, of the other operand's shape, "
                "axis %d in range",
                what, shapeString(&x).c_str(), axis);
  rows = cols = 1;
  for (int32_t i = 0; i < x.rank; ++i)
    (i < axis ? rows : cols) *= x.shape[i];
  amprt_tensor trail = x;
  trail.rank = x.rank - axis;
  for (int32_t i = 0; i < trail.rank; ++i)
    trail.shape[i] = x.shape[axis + i];
  return broadcastView(p, trail, what, pv);
}

amprt_status layerNorm(Dev &d, const Decoded &dd) {
  const int64_t *a = dd.attrs;
  const auto &t = dd.t;
  if (dd.nattrs < 3)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt layer_norm");
  bool hasBias = a[2] != 0;
  AMPRT_CHECK(need(dd, hasBias ? 6 : 5, 3, "layer_norm"));
  size_t o = hasBias ? 3 : 2;
  const amprt_tensor &x = t[0], &y = t[o], &mean = t[o + 1], &inv = t[o + 2];
  int64_t rows, cols;
  View sv, bv{};
  AMPRT_CHECK(layerNormShape(x, y, (int32_t)a[0], t[1], "layer_norm (scale)", rows, cols, sv));
  if (hasBias)
    AMPRT_CHECK(layerNormShape(x, y, (int32_t)a[0], t[2], "layer_norm (bias)", rows, cols, bv));
  for (const amprt_tensor *st : {&mean, &inv})
    if (st->data && (st->dtype != AMPRT_F32 || numel(*st) != rows))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): layer_norm statistics");
  return eachRow(&d, rows, cols,
              LayerNormF{viewOf(x), viewOf(y), sv, bv, static_cast<float *>(mean.data),
                         static_cast<float *>(inv.data), cols, (float)attrF(a, 1), hasBias},
              "layer_norm");
}

amprt_status layerNormGrad(Dev &d, const Decoded &dd) {
  AMPRT_CHECK(need(dd, 8, 4, "layer_norm_grad"));
  const int64_t *a = dd.attrs;
  const auto &t = dd.t;
  const amprt_tensor &x = t[0], &scale = t[1], &mean = t[2], &inv = t[3], &dy = t[4];
  int64_t rows, cols;
  View sv;
  AMPRT_CHECK(layerNormShape(x, dy, (int32_t)a[0], scale, "layer_norm_grad", rows, cols, sv));
  if (mean.dtype != AMPRT_F32 || inv.dtype != AMPRT_F32 || numel(mean) != rows || numel(inv) != rows)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): layer_norm_grad statistics");
  const float *mp = static_cast<const float *>(mean.data), *ip = static_cast<const float *>(inv.data);
  if (a[1])
    AMPRT_CHECK(eachRow(&d, rows, cols, LayerNormGradDxF{viewOf(x), sv, viewOf(dy), viewOf(t[5]), mp, ip, cols},
                     "layer_norm_grad"));
  if (a[2] || a[3]) {
    if (numel(scale) != cols || !amprt_tensor_is_contiguous(&scale))
      return unsupported("layer_norm_grad with a broadcast scale");
    View ds = a[2] ? viewOf(t[6]) : View{}, db = a[3] ? viewOf(t[7]) : View{};
    LayerNormGradParamF f{viewOf(x), viewOf(dy), ds, db, mp, ip, rows, cols, nullptr, 1, rows};
    int64_t parts = partsFor(cols, rows);
    if (parts == 1) {
      AMPRT_CHECK(each(&d, cols, f, "layer_norm_grad"));
    } else {
      void *buf;
      f.chunk = (rows + parts - 1) / parts;
      f.chunks = (rows + f.chunk - 1) / f.chunk;
      AMPRT_CHECK(scratch(d, 6, (size_t)(cols * f.chunks) * 16, &buf));
      f.partial = static_cast<double *>(buf);
      AMPRT_CHECK(each(&d, cols * f.chunks, f, "layer_norm_grad"));
      AMPRT_CHECK(each(&d, cols, LayerNormGradParamFinishF{ds, db, f.partial, f.chunks}, "layer_norm_grad"));
    }
  }
  return AMPRT_OK;
}

amprt_status unscaleAndCheck(Dev &d, const Decoded &dd) {
  const auto &t = dd.t;
  size_t n = 0;
  AMPRT_CHECK(multiTensorCount(dd, "unscale_and_check", 1, n));
  const amprt_tensor &scale = t[n], &flag = t[2 * n + 1];
  AMPRT_CHECK(zero(d, flag.data, 1));
  for (size_t first = 0; first < n; first += kMaxTensors) {
    UnscaleF f{};
    int64_t units = 0;
    size_t last = std::min(n, first + kMaxTensors);
    for (size_t k = first; k < last; ++k) {
      const amprt_tensor &g = t[k], &out = t[n + 1 + k];
      if (!floatType(g.dtype) || !amprt_tensor_is_contiguous(&g) || out.dtype != AMPRT_F32 ||
          !amprt_tensor_is_contiguous(&out) || numel(g) != numel(out))
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "amprt_exec (cuda): unscale_and_check: gradient %zu and its output", k);
      f.items[k - first] = {g.data, static_cast<float *>(out.data), numel(g), units, g.dtype};
      units += (numel(g) + 3) / 4;
    }
    f.count = (int32_t)(last - first);
    f.scale = static_cast<const float *>(scale.data);
    f.found = flag.data;
    f.foundIsByte = 1;
    AMPRT_CHECK(each(&d, units, f, "unscale_and_check"));
  }
  return AMPRT_OK;
}

amprt_status clipGradNorm(Dev &d, const Decoded &dd) {
  const auto &t = dd.t;
  size_t n = 0;
  AMPRT_CHECK(multiTensorCount(dd, "clip_grad_norm", 2, n));
  float maxNorm = (float)attrF(dd.attrs, 1);
  if (!(maxNorm > 0.0f))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): clip_grad_norm's max_norm must be > 0");
  const amprt_tensor &flag = t[n], &norm = t[2 * n + 1];
  int64_t chunks = 0;
  for (size_t k = 0; k < n; ++k) {
    if (t[k].dtype != AMPRT_F32 || !amprt_tensor_is_contiguous(&t[k]) ||
        numel(t[k]) != numel(t[n + 1 + k]))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): clip_grad_norm: gradient %zu", k);
    chunks += (numel(t[k]) + 4095) / 4096;
  }
  void *buf;
  AMPRT_CHECK(scratch(d, 3, (size_t)(chunks + 1) * 8 + 8, &buf));
  double *parts = static_cast<double *>(buf);
  float *coef = reinterpret_cast<float *>(parts + chunks);
  int64_t at = 0;
  for (size_t k = 0; k < n; ++k) {
    int64_t c = (numel(t[k]) + 4095) / 4096;
    AMPRT_CHECK(each(&d, c, SumSqF{static_cast<const float *>(t[k].data), numel(t[k]), parts + at},
                     "clip_grad_norm"));
    at += c;
  }
  AMPRT_CHECK(each(&d, 1,
                   ClipCoefF{parts, chunks, maxNorm, static_cast<const uint8_t *>(flag.data),
                             static_cast<float *>(norm.data), coef},
                   "clip_grad_norm"));
  for (size_t k = 0; k < n; ++k)
    AMPRT_CHECK(each(&d, numel(t[k]),
                     ScaleByF{static_cast<const float *>(t[k].data),
                              static_cast<float *>(t[n + 1 + k].data), coef},
                     "clip_grad_norm"));
  return AMPRT_OK;
}

amprt_status checkF32State(const amprt_tensor &t, int64_t n, const char *what) {
  if (t.dtype != AMPRT_F32 || !amprt_tensor_is_contiguous(&t) || numel(t) != n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "amprt_exec (cuda): %s must be a contiguous f32 tensor of the parameter's size", what);
  return AMPRT_OK;
}


int32_t execOne(amprt_context *ctx, Dev &d, const int64_t *desc, void **bufs) {
  thread_local Decoded dd;
  AMPRT_CHECK(decode(desc, bufs, dd));
  // The program's constants live in host memory: their device copies.
  for (size_t k = 0; k < dd.t.size(); ++k) {
    if (!bufs || !bufs[k])
      continue;
    const char *base = static_cast<const char *>(bufs[k]);
    auto al = d.allocations.upper_bound(base);
    if (al != d.allocations.begin()) {
      --al;
      if (base < al->first + al->second)
        continue; // this context's memory
    }
    amprt_tensor &tt = dd.t[k];
    int64_t last = 0;
    for (int32_t i = 0; i < tt.rank; ++i)
      if (tt.shape[i] == 0) {
        last = -1;
        break;
      } else {
        last += (tt.shape[i] - 1) * (tt.strides[i] > 0 ? tt.strides[i] : 0);
      }
    size_t es = amprt_dtype_size(tt.dtype);
    size_t bytes = (size_t)((static_cast<char *>(tt.data) - base) + (last + 1) * (int64_t)es);
    auto &c = d.constants[base];
    if (c.second < bytes) {
      if (d.capturing)
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "a CUDA graph capture met a constant the step did not use before (run the "
                    "step once before capturing it)");
      ++d.hostSyncs; // a synchronous copy (the first steps only)
      void *copy;
      AMPRT_CHECK(rawAlloc(d, bytes, &copy));
      if (d.emulate) {
        std::memcpy(copy, base, bytes);
      } else {
        // On the context's stream: ordered before the kernels that read it.
        CUDA_CHECK(cudaMemcpyAsync(copy, base, bytes, cudaMemcpyHostToDevice, d.stream),
                   "a constant's copy");
      }
      c = {copy, bytes}; // the smaller copy, if any, stays (a kernel may still read it)
    }
    tt.data = static_cast<char *>(c.first) + (static_cast<char *>(tt.data) - base);
  }
  auto &t = dd.t;
  const int64_t *a = dd.attrs;
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_UNARY: {
    AMPRT_CHECK(need(dd, 2, 2, "unary"));
    View xv;
    AMPRT_CHECK(broadcastView(t[0], t[1], "amprt_exec (cuda): unary", xv));
    if ((unsigned)a[0] > AMPRT_UNARY_LAST)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): unknown unary op %lld", (long long)a[0]);
    if (!floatType(t[1].dtype) && a[0] != AMPRT_UNARY_RELU && a[0] != AMPRT_UNARY_IDENTITY)
      return fail(AMPRT_ERR_UNSUPPORTED, "amprt_exec (cuda): unary op %lld on integers", (long long)a[0]);
    View yv = flat(viewOf(t[1]));
    float alpha = (float)attrF(a, 1), beta = dd.nattrs > 2 ? (float)attrF(a, 2) : 0.0f;
    // sin, cos, ... element by element (UnaryOp leaves them out: see applyUnary).
    bool trig = isTrig((int)a[0]);
    if (floatType(t[1].dtype) && !trig) {
      bool done;
      AMPRT_CHECK(eachVec8<1>(d, {flat(xv)}, yv, numel(t[1]), UnaryOp{(int32_t)a[0], alpha, beta}, "unary", &done));
      if (done)
        return AMPRT_OK;
    }
    return each(&d, numel(t[1]), UnaryF{flat(xv), yv, (int32_t)a[0], alpha, beta}, "unary");
  }
  case AMPRT_OP_UNARY_GRAD: {
    AMPRT_CHECK(need(dd, 3, 2, "unary_grad"));
    View xv, gv;
    AMPRT_CHECK(broadcastView(t[0], t[2], "amprt_exec (cuda): unary_grad", xv));
    AMPRT_CHECK(broadcastView(t[1], t[2], "amprt_exec (cuda): unary_grad", gv));
    if ((unsigned)a[0] > AMPRT_UNARY_LAST)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): unknown unary op %lld", (long long)a[0]);
    View yv = flat(viewOf(t[2]));
    float alpha = (float)attrF(a, 1), beta = dd.nattrs > 2 ? (float)attrF(a, 2) : 0.0f;
    if (!isTrig((int)a[0])) {
      bool done;
      AMPRT_CHECK(eachVec8<2>(d, {flat(xv), flat(gv)}, yv, numel(t[2]), UnaryGradOp{(int32_t)a[0], alpha, beta},
                              "unary_grad", &done));
      if (done)
        return AMPRT_OK;
    }
    return each(&d, numel(t[2]), UnaryGradF{flat(xv), flat(gv), yv, (int32_t)a[0], alpha, beta}, "unary_grad");
  }
  case AMPRT_OP_BINARY: {
    AMPRT_CHECK(need(dd, 3, 1, "binary"));
    if ((unsigned)a[0] > AMPRT_BINARY_LAST)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): unknown binary op %lld", (long long)a[0]);
    if (isCompare((int)a[0]) != (t[2].dtype == AMPRT_I1) || (isCompare((int)a[0]) && t[0].dtype != t[1].dtype))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): binary op %lld: a comparison (only) gives i1, from one type",
                  (long long)a[0]);
    View av, bv;
    AMPRT_CHECK(broadcastView(t[0], t[2], "amprt_exec (cuda): binary", av));
    AMPRT_CHECK(broadcastView(t[1], t[2], "amprt_exec (cuda): binary", bv));
    View yv = flat(viewOf(t[2]));
    if (floatType(t[2].dtype)) {
      bool done;
      AMPRT_CHECK(eachVec8<2>(d, {flat(av), flat(bv)}, yv, numel(t[2]), BinaryOp{(int32_t)a[0]}, "binary", &done));
      if (done)
        return AMPRT_OK;
    }
    return each(&d, numel(t[2]), BinaryF{flat(av), flat(bv), yv, (int32_t)a[0], d.err}, "binary");
  }
  case AMPRT_OP_WHERE: {
    AMPRT_CHECK(need(dd, 4, 0, "where"));
    if (t[0].dtype != AMPRT_I1 || t[1].dtype != t[3].dtype || t[2].dtype != t[3].dtype)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): where's types");
    View cv, av, bv;
    AMPRT_CHECK(broadcastView(t[0], t[3], "amprt_exec (cuda): where", cv));
    AMPRT_CHECK(broadcastView(t[1], t[3], "amprt_exec (cuda): where", av));
    AMPRT_CHECK(broadcastView(t[2], t[3], "amprt_exec (cuda): where", bv));
    return each(&d, numel(t[3]),
                WhereF{flat(cv), flat(av), flat(bv), flat(viewOf(t[3])), (int64_t)amprt_dtype_size(t[3].dtype)}, "where");
  }
  case AMPRT_OP_CAST:
    AMPRT_CHECK(need(dd, 2, 0, "cast"));
    if (!sameShape(t[0], t[1]))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): cast shapes differ");
    if (floatType(t[0].dtype) && floatType(t[1].dtype)) {
      bool done;
      AMPRT_CHECK(eachVec8<1>(d, {flat(viewOf(t[0]))}, flat(viewOf(t[1])), numel(t[1]), CastOp{}, "cast", &done));
      if (done)
        return AMPRT_OK;
    }
    return each(&d, numel(t[1]), CastF{flat(viewOf(t[0])), flat(viewOf(t[1]))}, "cast");
  case AMPRT_OP_COPY:
    AMPRT_CHECK(need(dd, 2, 0, "copy"));
    return copyTensor(d, t[0], t[1], "copy");
  case AMPRT_OP_CONCAT: {
    if (t.size() < 2 || dd.nattrs < 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: concat needs inputs and an axis");
    amprt_tensor &y = t.back();
    int32_t axis = (int32_t)a[0];
    if (axis < 0 || axis >= y.rank)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): concat axis");
    int64_t at = 0;
    for (size_t i = 0; i + 1 < t.size(); ++i) {
      if (t[i].rank != y.rank || t[i].dtype != y.dtype || at + t[i].shape[axis] > y.shape[axis])
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): concat input %zu", i);
      amprt_tensor view = y;
      view.shape[axis] = t[i].shape[axis];
      view.data = static_cast<char *>(y.data) + at * y.strides[axis] * (int64_t)amprt_dtype_size(y.dtype);
      AMPRT_CHECK(each(&d, numel(view), CopyF{flat(viewOf(t[i])), flat(viewOf(view)), (int64_t)amprt_dtype_size(y.dtype)},
                       "concat"));
      at += t[i].shape[axis];
    }
    if (at != y.shape[axis])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): concat inputs do not fill y");
    return AMPRT_OK;
  }
  case AMPRT_OP_GATHER: {
    AMPRT_CHECK(need(dd, 3, 1, "gather"));
    int32_t axis = (int32_t)a[0];
    if ((t[1].dtype != AMPRT_I32 && t[1].dtype != AMPRT_I64) || axis < 0 || axis >= t[0].rank ||
        t[0].dtype != t[2].dtype || t[2].rank != t[0].rank - 1 + t[1].rank)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): gather's operands do not agree");
    return each(&d, numel(t[2]),
                GatherF{viewOf(t[0]), viewOf(t[1]), viewOf(t[2]), axis,
                        (int64_t)amprt_dtype_size(t[0].dtype), d.err},
                "gather");
  }
  case AMPRT_OP_GATHER_GRAD: {
    AMPRT_CHECK(need(dd, 3, 1, "gather_grad"));
    int32_t axis = (int32_t)a[0];
    const amprt_tensor &idx = t[0], &dy = t[1], &dd2 = t[2];
    if ((idx.dtype != AMPRT_I32 && idx.dtype != AMPRT_I64) || !floatType(dy.dtype) ||
        dy.dtype != dd2.dtype || axis < 0 || axis >= dd2.rank ||
        dy.rank != dd2.rank - 1 + idx.rank || !amprt_tensor_is_contiguous(&dd2))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): gather_grad's operands do not agree");
    void *acc = dd2.data;
    if (dd2.dtype != AMPRT_F32)
      AMPRT_CHECK(scratch(d, 0, (size_t)numel(dd2) * 4, &acc));
    AMPRT_CHECK(zero(d, acc, (size_t)numel(dd2) * 4));
    GatherGradF f{viewOf(idx), viewOf(dy), static_cast<float *>(acc), axis, dd2.rank, {}, {}, d.err};
    contiguousStrides(dd2.rank, dd2.shape, f.dense);
    for (int32_t i = 0; i < dd2.rank; ++i)
      f.ddShape[i] = dd2.shape[i];
    AMPRT_CHECK(each(&d, numel(dy), f, "gather_grad"));
    if (dd2.dtype != AMPRT_F32)
      AMPRT_CHECK(each(&d, numel(dd2), CastFloatF{acc, dd2.data, AMPRT_F32, dd2.dtype}, "gather_grad"));
    return AMPRT_OK;
  }
  case AMPRT_OP_CUMSUM: {
    AMPRT_CHECK(need(dd, 2, 3, "cumsum"));
    int32_t axis = (int32_t)a[0];
    const amprt_tensor &x = t[0], &y = t[1];
    bool ok = x.rank >= 1 && y.rank == x.rank && axis >= 0 && axis < x.rank &&
              floatType(x.dtype) == floatType(y.dtype);
    for (int32_t i = 0; ok && i < x.rank; ++i)
      ok = y.shape[i] == x.shape[i];
    if (!ok)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): cumsum's operands do not agree");
    int64_t len = x.shape[axis], lines = len ? numel(x) / len : 0;
    return each(&d, lines, CumsumF{viewOf(x), viewOf(y), axis, a[1] != 0, a[2] != 0}, "cumsum");
  }
  case AMPRT_OP_GRID_SAMPLE:
  case AMPRT_OP_GRID_SAMPLE_GRAD: {
    bool grad = dd.opcode == AMPRT_OP_GRID_SAMPLE_GRAD;
    AMPRT_CHECK(need(dd, grad ? 5 : 3, grad ? 5 : 3, grad ? "grid_sample_grad" : "grid_sample"));
    const amprt_tensor &x = t[0], &grid = t[1], &y = t[2];
    bool ok = x.rank == 4 && grid.rank == 4 && y.rank == 4 && grid.shape[3] == 2 && grid.shape[0] == x.shape[0] &&
              y.shape[0] == x.shape[0] && y.shape[1] == x.shape[1] && y.shape[2] == grid.shape[1] &&
              y.shape[3] == grid.shape[2] && floatType(x.dtype) && floatType(grid.dtype) && floatType(y.dtype) &&
              x.shape[2] > 0 && x.shape[3] > 0 && a[0] >= 0 && a[0] <= 2 && a[1] >= 0 && a[1] <= 2;
    if (grad)
      ok = ok && (!a[3] || (numel(t[3]) == numel(x) && floatType(t[3].dtype) && amprt_tensor_is_contiguous(&t[3]))) &&
           (!a[4] || (numel(t[4]) == numel(grid) && floatType(t[4].dtype) && amprt_tensor_is_contiguous(&t[4])));
    if (!ok)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s's operands do not agree",
                  grad ? "grid_sample_grad" : "grid_sample");
    GridSampleF f{viewOf(x), viewOf(grid), viewOf(y), (int32_t)a[0], (int32_t)a[1], a[2] != 0, nullptr, View{}, grad};
    int64_t points = grid.shape[0] * grid.shape[1] * grid.shape[2];
    if (!grad)
      return points ? each(&d, points, f, "grid_sample") : AMPRT_OK;
    void *acc = nullptr;
    if (a[3]) {
      acc = t[3].data;
      if (t[3].dtype != AMPRT_F32)
        AMPRT_CHECK(scratch(d, 0, (size_t)numel(x) * 4, &acc));
      AMPRT_CHECK(zero(d, acc, (size_t)numel(x) * 4));
      f.dx = static_cast<float *>(acc);
    }
    if (a[4])
      f.dgrid = viewOf(t[4]);
    if (points)
      AMPRT_CHECK(each(&d, points, f, "grid_sample_grad"));
    if (a[3] && t[3].dtype != AMPRT_F32)
      AMPRT_CHECK(each(&d, numel(x), CastFloatF{acc, t[3].data, AMPRT_F32, t[3].dtype}, "grid_sample_grad"));
    return AMPRT_OK;
  }
  case AMPRT_OP_TOPK: {
    AMPRT_CHECK(need(dd, 3, 2, "topk"));
    int32_t axis = (int32_t)a[0];
    const amprt_tensor &x = t[0], &v = t[1], &ix = t[2];
    bool ok = floatType(x.dtype) && v.dtype == x.dtype && ix.dtype == AMPRT_I64 && x.rank >= 1 &&
              v.rank == x.rank && ix.rank == x.rank && axis >= 0 && axis < x.rank && v.shape[axis] <= x.shape[axis];
    for (int32_t i = 0; ok && i < x.rank; ++i)
      ok = v.shape[i] == ix.shape[i] && (i == axis || v.shape[i] == x.shape[i]);
    if (!ok)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): topk's operands do not agree");
    int64_t len = x.shape[axis], k = v.shape[axis], rows = len ? numel(x) / len : 0;
    if (k == 0 || rows == 0)
      return AMPRT_OK;
    return each(&d, rows, TopKF{viewOf(x), viewOf(v), viewOf(ix), axis, k, (int64_t)amprt_dtype_size(x.dtype), a[1] != 0},
                "topk");
  }
  case AMPRT_OP_ARG_REDUCE: {
    AMPRT_CHECK(need(dd, 2, 3, "arg_reduce"));
    int32_t axis = (int32_t)a[0];
    const amprt_tensor &x = t[0], &y = t[1];
    bool ok = y.dtype == AMPRT_I64 && x.rank >= 1 && y.rank == x.rank && axis >= 0 && axis < x.rank &&
              x.shape[axis] >= 1 && y.shape[axis] == 1;
    for (int32_t i = 0; ok && i < x.rank; ++i)
      ok = i == axis || y.shape[i] == x.shape[i];
    if (!ok)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): arg_reduce's operands do not agree");
    return each(&d, numel(y), ArgReduceF{viewOf(x), viewOf(y), axis, a[1] != 0, a[2] != 0}, "arg_reduce");
  }
  case AMPRT_OP_GATHER_ELEMENTS:
  case AMPRT_OP_GATHER_ELEMENTS_GRAD: {
    bool grad = dd.opcode == AMPRT_OP_GATHER_ELEMENTS_GRAD;
    AMPRT_CHECK(need(dd, 3, 1, grad ? "gather_elements_grad" : "gather_elements"));
    int32_t axis = (int32_t)a[0];
    // Forward: data, indices, y. Gradient: indices, dy (read as "y"), ddata.
    const amprt_tensor &data = grad ? t[2] : t[0], &idx = grad ? t[0] : t[1], &y = grad ? t[1] : t[2];
    bool ok = (idx.dtype == AMPRT_I32 || idx.dtype == AMPRT_I64) && data.rank >= 1 &&
              idx.rank == data.rank && y.rank == data.rank && axis >= 0 && axis < data.rank &&
              data.dtype == y.dtype && (!grad || (floatType(y.dtype) && amprt_tensor_is_contiguous(&data)));
    for (int32_t i = 0; ok && i < data.rank; ++i)
      ok = y.shape[i] == idx.shape[i] && (i == axis || idx.shape[i] <= data.shape[i]);
    if (!ok)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s's operands do not agree",
                  grad ? "gather_elements_grad" : "gather_elements");
    GatherElementsF f{viewOf(data), viewOf(idx), viewOf(y), axis, (int64_t)amprt_dtype_size(y.dtype),
                      nullptr, data.shape[axis], {}, d.err};
    if (!grad) {
      for (int32_t i = 0; i < data.rank; ++i)
        f.dataStrides[i] = data.strides[i];
      return each(&d, numel(y), f, "gather_elements");
    }
    void *acc = data.data;
    if (data.dtype != AMPRT_F32)
      AMPRT_CHECK(scratch(d, 0, (size_t)numel(data) * 4, &acc));
    AMPRT_CHECK(zero(d, acc, (size_t)numel(data) * 4));
    f.acc = static_cast<float *>(acc);
    contiguousStrides(data.rank, data.shape, f.dataStrides);
    AMPRT_CHECK(each(&d, numel(y), f, "gather_elements_grad"));
    if (data.dtype != AMPRT_F32)
      AMPRT_CHECK(each(&d, numel(data), CastFloatF{acc, data.data, AMPRT_F32, data.dtype}, "gather_elements_grad"));
    return AMPRT_OK;
  }
  case AMPRT_OP_RANDOM: {
    bool bern = dd.nattrs > 0 && a[0] == AMPRT_RANDOM_BERNOULLI;
    AMPRT_CHECK(need(dd, bern ? 2 : 1, 3, "random"));
    const amprt_tensor &y = t.back();
    if (a[0] < AMPRT_RANDOM_UNIFORM || a[0] > AMPRT_RANDOM_BERNOULLI)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_random: unknown kind %lld", (long long)a[0]);
    if (!floatType(y.dtype) || !amprt_tensor_is_contiguous(&y))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_random: y must be a contiguous float tensor");
    int64_t n = numel(y);
    int32_t steps = a[0] == AMPRT_RANDOM_NORMAL ? 2 : 1;
    if (bern && (!floatType(t[0].dtype) || !amprt_tensor_is_contiguous(&t[0]) || numel(t[0]) != n))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_random: p %s must be a contiguous float tensor of y's size %s",
                  shapeString(&t[0]).c_str(), shapeString(&y).c_str());
    if (n * steps >= ((int64_t)1 << kRngJumps))
      return fail(AMPRT_ERR_UNSUPPORTED, "amprt_exec (cuda): random over %lld elements", (long long)n);
    if (n == 0)
      return AMPRT_OK;
    AMPRT_CHECK(each(&d, (n + kDropoutChunk - 1) / kDropoutChunk,
                     RandomF{y.data, bern ? t[0].data : nullptr, y.dtype, bern ? t[0].dtype : AMPRT_F32, (int32_t)a[0],
                             steps, attrF(a, 1), attrF(a, 2), d.rngState, d.rngJumps, n, d.err},
                     "random"));
    return each(&d, 1, RngAdvanceF{d.rngState, d.rngJumps, n * steps}, "random");
  }
  case AMPRT_OP_DROPOUT: {
    AMPRT_CHECK(need(dd, 3, 2, "dropout"));
    float ratio = a[1] ? (float)attrF(a, 0) : 0.0f;
    if (ratio != 0.0f) {
      amprt_tensor &x = t[0], &y = t[1], &mask = t[2];
      if (!(ratio > 0.0f && ratio < 1.0f))
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_dropout: ratio %g outside [0, 1)", ratio);
      if (!floatType(x.dtype) || !floatType(y.dtype))
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): dropout needs float tensors");
      if (mask.data && (mask.dtype != AMPRT_I1 || numel(mask) != numel(y) || !amprt_tensor_is_contiguous(&mask)))
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "amprt_dropout: mask must be a contiguous i1 tensor of y's size");
      int64_t n = numel(y);
      if (n >= ((int64_t)1 << kRngJumps))
        return fail(AMPRT_ERR_UNSUPPORTED, "amprt_exec (cuda): dropout over %lld elements", (long long)n);
      View xv;
      AMPRT_CHECK(broadcastView(x, y, "amprt_exec (cuda): dropout", xv));
      AMPRT_CHECK(each(&d, (n + kDropoutChunk - 1) / kDropoutChunk,
                       DropoutF{flat(xv), flat(viewOf(y)), static_cast<uint8_t *>(mask.data), d.rngState,
                                d.rngJumps, n, ratio, 1.0f / (1.0f - ratio)},
                       "dropout"));
      return each(&d, 1, RngAdvanceF{d.rngState, d.rngJumps, n}, "dropout");
    }
    AMPRT_CHECK(each(&d, numel(t[1]), CastF{flat(viewOf(t[0])), flat(viewOf(t[1]))}, "dropout"));
    if (t[2].data) {
      if (t[2].dtype != AMPRT_I1 || !amprt_tensor_is_contiguous(&t[2]))
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): dropout's mask");
      if (d.emulate)
        std::memset(t[2].data, 1, (size_t)numel(t[2]));
      else
        CUDA_CHECK(cudaMemsetAsync(t[2].data, 1, (size_t)numel(t[2]), d.stream), "dropout");
    }
    return AMPRT_OK;
  }
  case AMPRT_OP_REDUCE: {
    if (dd.nattrs < 2 || dd.nattrs < 2 + a[1] || a[1] > AMPRT_MAX_RANK)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt reduce");
    AMPRT_CHECK(need(dd, 2, 2 + a[1], "reduce"));
    // A channel-blocked input (a mean over H, W) is plain NCHW on this
    // device (see conv).
    const amprt_tensor &x = t[0], &y = t[1];
    if (x.rank != y.rank || x.dtype != y.dtype || (unsigned)a[0] > AMPRT_REDUCE_PROD ||
        (a[0] == AMPRT_REDUCE_PROD && !floatType(x.dtype)))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): reduce's operands");
    ReduceF f{viewOf(x), viewOf(y), (int32_t)a[0], {}, 1, nullptr, 1, 0, false};
    for (int64_t i = 0; i < a[1]; ++i) {
      if (a[2 + i] < 0 || a[2 + i] >= x.rank)
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): reduce axis");
      f.reduced[a[2 + i]] = true;
    }
    for (int32_t i = 0; i < x.rank; ++i) {
      if (y.shape[i] != (f.reduced[i] ? 1 : x.shape[i]))
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): reduce's y shape");
      if (f.reduced[i])
        f.count *= x.shape[i];
    }
    f.run = d.vec && denseRun(f.x, f.reduced);
    int64_t parts = partsFor(numel(y), f.count);
    if (parts == 1)
      return each(&d, numel(y), f, "reduce");
    void *buf;
    AMPRT_CHECK(scratch(d, 6, (size_t)(numel(y) * parts) * 8, &buf));
    f.partial = static_cast<double *>(buf);
    f.chunks = parts;
    f.chunk = (f.count + parts - 1) / parts;
    f.chunks = (f.count + f.chunk - 1) / f.chunk;
    AMPRT_CHECK(each(&d, numel(y) * f.chunks, f, "reduce"));
    return each(&d, numel(y), ReduceFinishF{viewOf(y), f.op, f.count, f.chunks, f.partial}, "reduce");
  }
  case AMPRT_OP_REDUCE_MAX_GRAD: {
    AMPRT_CHECK(need(dd, 4, 0, "reduce_max_grad"));
    const amprt_tensor &x = t[0], &y = t[1], &dy = t[2], &dx = t[3];
    if (!sameShape(x, dx) || !sameShape(y, dy))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): reduce_max_grad shapes");
    MaxCountF mc{viewOf(x), viewOf(y), {}, 1, nullptr};
    AMPRT_CHECK(reduceMask(x, y, mc.reduced, mc.count, "reduce_max_grad"));
    void *counts;
    AMPRT_CHECK(scratch(d, 0, (size_t)numel(y) * 4, &counts));
    mc.counts = static_cast<float *>(counts);
    AMPRT_CHECK(each(&d, numel(y), mc, "reduce_max_grad"));
    MaxGradF mg{viewOf(x), viewOf(y), viewOf(dy), viewOf(dx), {}, mc.counts};
    std::memcpy(mg.reduced, mc.reduced, sizeof mg.reduced);
    return each(&d, numel(x), mg, "reduce_max_grad");
  }
  case AMPRT_OP_SOFTMAX: {
    AMPRT_CHECK(need(dd, 2, 2, "softmax"));
    int32_t axis = (int32_t)a[0];
    if (!sameShape(t[0], t[1]) || axis < 0 || axis >= t[0].rank || !floatType(t[0].dtype) ||
        !floatType(t[1].dtype))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): softmax's operands");
    int64_t rows;
    Rows r = rowsOf(t[0], axis, rows);
    return eachRow(&d, rows, t[0].shape[r.axis], SoftmaxF{viewOf(t[0]), viewOf(t[1]), r, (int32_t)a[1]}, "softmax");
  }
  case AMPRT_OP_SOFTMAX_GRAD: {
    AMPRT_CHECK(need(dd, 3, 2, "softmax_grad"));
    int32_t axis = (int32_t)a[0];
    if (!sameShape(t[0], t[1]) || !sameShape(t[0], t[2]) || axis < 0 || axis >= t[0].rank)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): softmax_grad's operands");
    int64_t rows;
    Rows r = rowsOf(t[0], axis, rows);
    return eachRow(&d, rows, t[0].shape[r.axis], SoftmaxGradF{viewOf(t[0]), viewOf(t[1]), viewOf(t[2]), r, (int32_t)a[1]},
                "softmax_grad");
  }
  case AMPRT_OP_LAYER_NORM:
    return layerNorm(d, dd);
  case AMPRT_OP_LAYER_NORM_GRAD:
    return layerNormGrad(d, dd);
  case AMPRT_OP_GEMM: {
    if (dd.nattrs < 5)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt gemm");
    AMPRT_CHECK(need(dd, a[4] ? 4 : 3, 5, "gemm"));
    return gemm(ctx, d, dd);
  }
  case AMPRT_OP_MATMUL:
    AMPRT_CHECK(need(dd, 3, 0, "matmul"));
    return matmul(d, dd);
  case AMPRT_OP_SOFTMAX_CROSS_ENTROPY:
  case AMPRT_OP_NLL_LOSS:
    return loss(d, dd, false);
  case AMPRT_OP_SOFTMAX_CROSS_ENTROPY_GRAD:
  case AMPRT_OP_NLL_LOSS_GRAD:
    return loss(d, dd, true);
  case AMPRT_OP_SGD_UPDATE: {
    amprt_sgd_config cfg{};
    bool buf = false;
    size_t o = 0;
    AMPRT_CHECK(sgdAttrs(dd, cfg, buf, o));
    if (cfg.nesterov && (cfg.momentum <= 0.0f || cfg.dampening != 0.0f))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): nesterov needs momentum > 0 and dampening 0");
    if (cfg.momentum != 0.0f && !buf)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): momentum needs a buffer");
    int64_t n = numel(t[0]);
    AMPRT_CHECK(checkF32State(t[0], n, "the parameter"));
    AMPRT_CHECK(checkF32State(t[1], n, "the gradient"));
    AMPRT_CHECK(checkF32State(t[o + 2], n, "the new parameter"));
    if (buf) {
      AMPRT_CHECK(checkF32State(t[2], n, "the momentum buffer"));
      AMPRT_CHECK(checkF32State(t[o + 3], n, "the new momentum buffer"));
    }
    return each(&d, n,
                SgdF{cfg, static_cast<const float *>(t[0].data), static_cast<const float *>(t[1].data),
                     buf ? static_cast<const float *>(t[2].data) : nullptr,
                     static_cast<float *>(t[o + 2].data), buf ? static_cast<float *>(t[o + 3].data) : nullptr,
                     static_cast<const int64_t *>(t[o].data), t[o + 1].data, 1},
                "sgd_update");
  }
  case AMPRT_OP_ADAM_UPDATE: {
    amprt_adam_config cfg{};
    AMPRT_CHECK(adamAttrs(dd, cfg));
    if (!(cfg.beta1 >= 0.0f && cfg.beta1 < 1.0f && cfg.beta2 >= 0.0f && cfg.beta2 < 1.0f &&
          cfg.eps >= 0.0f) || cfg.decoupled < 0 || cfg.decoupled > 2)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): adam's hyper-parameters");
    int64_t n = numel(t[0]);
    for (size_t k : {0, 1, 2, 3, 6, 7, 8})
      AMPRT_CHECK(checkF32State(t[k], n, "an adam tensor"));
    return each(&d, n,
                AdamF{cfg, static_cast<const float *>(t[0].data), static_cast<const float *>(t[1].data),
                      static_cast<const float *>(t[2].data), static_cast<const float *>(t[3].data),
                      static_cast<float *>(t[6].data), static_cast<float *>(t[7].data),
                      static_cast<float *>(t[8].data), static_cast<const int64_t *>(t[4].data),
                      t[5].data, 1},
                "adam_update");
  }
  case AMPRT_OP_STEP_COUNT:
    AMPRT_CHECK(need(dd, 3, 0, "step_count"));
    AMPRT_CHECK(checkStepAndFlag(t[0], t[1]));
    if (t[2].dtype != AMPRT_I64 || numel(t[2]) != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): step_count's output");
    return each(&d, 1,
                StepCountF{static_cast<const int64_t *>(t[0].data), static_cast<const uint8_t *>(t[1].data),
                           static_cast<int64_t *>(t[2].data)},
                "step_count");
  case AMPRT_OP_UNSCALE_AND_CHECK:
    return unscaleAndCheck(d, dd);
  case AMPRT_OP_CLIP_GRAD_NORM:
    return clipGradNorm(d, dd);
  case AMPRT_OP_UPDATE_SCALE: {
    amprt_scaler_config cfg{};
    bool errorAtMin = true;
    AMPRT_CHECK(updateScaleAttrs(dd, cfg, errorAtMin));
    if (!(cfg.growth_factor > 1.0f) || !(cfg.backoff_factor > 0.0f) || !(cfg.backoff_factor < 1.0f) ||
        cfg.growth_interval < 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): update_scale needs growth_factor > 1, 0 < backoff_factor < 1 "
                  "and growth_interval >= 1");
    return each(&d, 1,
                UpdateScaleTensorsF{cfg, static_cast<const float *>(t[0].data),
                                    static_cast<const int64_t *>(t[1].data),
                                    static_cast<const int64_t *>(t[2].data),
                                    static_cast<const uint8_t *>(t[3].data),
                                    static_cast<float *>(t[4].data), static_cast<int64_t *>(t[5].data),
                                    static_cast<int64_t *>(t[6].data), d.err, errorAtMin},
                "update_scale");
  }
  case AMPRT_OP_MICRO_STEP: {
    int64_t every = 1;
    AMPRT_CHECK(microStepAttrs(dd, every));
    return each(&d, 1,
                MicroStepF{static_cast<const int64_t *>(t[0].data), static_cast<uint8_t *>(t[1].data),
                           static_cast<int64_t *>(t[2].data), every, d.err},
                "micro_step");
  }
  case AMPRT_OP_SLICE_GRAD: {
    AMPRT_CHECK(need(dd, 3, 0, "slice_grad"));
    const amprt_tensor &whole = t[2];
    if (!amprt_tensor_is_contiguous(&whole) || whole.dtype != t[1].dtype)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt slice_grad");
    AMPRT_CHECK(zero(d, whole.data, (size_t)numel(whole) * amprt_dtype_size(whole.dtype)));
    return copyTensor(d, t[0], t[1], "slice_grad");
  }
  case AMPRT_OP_BATCH_NORM:
    return batchNorm(d, dd);
  case AMPRT_OP_BATCH_NORM_GRAD:
    return batchNormGrad(d, dd);
  case AMPRT_OP_CONV:
    return conv(d, dd, false);
  case AMPRT_OP_CONV_BN:
    return conv(d, dd, true);
  case AMPRT_OP_CONV_GRAD:
    return convGrad(d, dd);
  case AMPRT_OP_MAX_POOL:
  case AMPRT_OP_AVERAGE_POOL:
    return pool(d, dd);
  case AMPRT_OP_MAX_POOL_GRAD:
  case AMPRT_OP_AVERAGE_POOL_GRAD:
    return poolGrad(d, dd);
  }
  return fail(AMPRT_ERR_UNSUPPORTED, "amprt_exec (cuda): unknown opcode %lld", (long long)dd.opcode);
}

//--- The backend's entry points ---------------------------------------------------

/// Whether cuBLASLt's ReLU epilogue computes ours, max(v, 0) with NaN kept
/// (its documentation does not say what NaN gives): Y[1, 4] = A[1, 1] B[1, 4]
/// with B = [NaN, -2, 3, -0] and A = 1, in f32 and in f16, on this device, once
/// per context (one synchronisation when the context is made, none in steps).
/// Not kept, or not run: ReLU stays a second pass.
bool probeReluEpilogue(Dev &d) {
  void *buf = nullptr;
  if (rawAlloc(d, 1024, &buf) != AMPRT_OK)
    return false;
  char *b = static_cast<char *>(buf);
  bool ok = true;
  for (int32_t t : {AMPRT_F32, AMPRT_F16}) {
    const float in[5] = {1.0f, std::nanf(""), -2.0f, 3.0f, -0.0f};
    alignas(8) char host[20], out[16];
    for (int i = 0; i < 5; ++i)
      stF(host, t, i, in[i]);
    size_t es = amprt_dtype_size((amprt_dtype)t);
    // A at 0, B at 256, Y at 512 (each 256-byte aligned).
    ok = ok && cudaMemcpy(b, host, es, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(b + 256, host + es, 4 * es, cudaMemcpyHostToDevice) == cudaSuccess &&
         ltMatmul(d, false, false, 1, 4, 1, b, b + 256, t, b + 512, t, 1.0f, nullptr, 1, 0, 0, 0, true) ==
             AMPRT_OK &&
         cudaStreamSynchronize(d.stream) == cudaSuccess &&
         cudaMemcpy(out, b + 512, 4 * es, cudaMemcpyDeviceToHost) == cudaSuccess;
    ok = ok && std::isnan(ldF(out, t, 0)) && ldF(out, t, 1) == 0.0f && ldF(out, t, 2) == 3.0f &&
         ldF(out, t, 3) == 0.0f;
  }
  cudaDeviceSynchronize();
  cudaGetLastError(); // a failed probe leaves no error behind
  rawFree(d, buf);
  return ok;
}

amprt_status open(amprt_context *ctx, int32_t device) {
  auto *d = new (std::nothrow) Dev();
  if (!d)
    return fail(AMPRT_ERR_OUT_OF_MEMORY, "amprt_context_create");
  const char *emu = std::getenv("AMPRT_CUDA_EMULATE");
  d->emulate = emu && *emu && std::strcmp(emu, "0") != 0;
  d->profile = desc::profilingRequested();
  d->device = device;
  // A switch: unset or empty keeps the default; `on` / `off` set it.
  auto envSwitch = [&](const char *var, const char *on, const char *off, const char *expect,
                       bool &value) {
    const char *v = std::getenv(var);
    if (!v || !*v)
      return true;
    if (std::strcmp(v, on) != 0 && std::strcmp(v, off) != 0) {
      fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_context_create: %s=%s: expected %s", var, v, expect);
      return false;
    }
    value = std::strcmp(v, on) == 0;
    return true;
  };
  if (const char *v = std::getenv("AMPRT_CUDA_CONV"); v && *v) {
    std::string c = v;
    if (c == "direct" || c == "gemm") {
      d->directConv = c == "direct";
      d->dnnMode = Dev::kDnnOff;
    } else if (c == "cudnn") {
#ifndef AMPRT_HAVE_CUDNN
      delete d;
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_context_create: AMPRT_CUDA_CONV=cudnn: this build has no cuDNN (cudnn.h was not found)");
#endif
      d->dnnMode = Dev::kDnnRequired;
      if (d->emulate) {
        delete d;
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "amprt_context_create: AMPRT_CUDA_CONV=cudnn: an emulated context (AMPRT_CUDA_EMULATE) "
                    "has no cuDNN");
      }
    } else if (c != "auto") {
      delete d;
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_context_create: AMPRT_CUDA_CONV=%s: expected 'auto' (cuDNN where it takes the "
                  "convolution, else im2col + cuBLASLt; the default), 'cudnn', 'gemm' or 'direct'", v);
    }
  }
  if (!envSwitch("AMPRT_CUDA_RELU_EPILOGUE", "1", "0",
                 "1 (ReLU in cuBLASLt's epilogue where it keeps NaN, the default) or 0", d->reluEpilogue) ||
      !envSwitch("AMPRT_CUDA_VEC", "1", "0",
                 "1 (16-byte groups in the element-wise kernels and the reductions, the default) or 0",
                 d->vec)) {
    delete d;
    return AMPRT_ERR_INVALID_ARGUMENT;
  }
  if (const char *cb = std::getenv("AMPRT_CUDA_CONV_CHUNK"); cb && *cb) {
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(cb, &end, 10);
    if (errno || *end || v == 0 || cb[0] == '-') {
      delete d;
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_context_create: AMPRT_CUDA_CONV_CHUNK=%s: expected a positive number of bytes", cb);
    }
    d->convChunkBytes = (size_t)v;
  }
  auto cleanup = [&](amprt_status s) {
    delete d;
    return s;
  };
  if (!d->emulate) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
      return cleanup(fail(AMPRT_ERR_NO_DEVICE, "amprt_context_create: no CUDA device: %s",
                          cudaGetErrorString(e)));
    if (device >= count)
      return cleanup(fail(AMPRT_ERR_NO_DEVICE,
                          "amprt_context_create: CUDA device %d does not exist (%d found)", device,
                          count));
    amprt_status s = cudaFail(cudaSetDevice(device), "cudaSetDevice");
    if (s == AMPRT_OK)
      s = cudaFail(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (s == AMPRT_OK)
      s = loadCublasLt();
    if (s == AMPRT_OK && ltApi.cublasLtCreate(&d->lt) != CUBLAS_STATUS_SUCCESS)
      s = fail(AMPRT_ERR_DEVICE, "amprt_context_create: cuBLASLt did not start");
    d->ltWorkBytes = (size_t)32 << 20;
    if (s == AMPRT_OK)
      s = rawAlloc(*d, d->ltWorkBytes, &d->ltWork);
    if (s != AMPRT_OK)
      return cleanup(s);
    d->ltReluKeepsNaN = probeReluEpilogue(*d);
  }
  void *err;
  amprt_status s = rawAlloc(*d, sizeof(DeviceError), &err);
  if (s != AMPRT_OK)
    return cleanup(s);
  d->err = static_cast<DeviceError *>(err);
  if (d->emulate)
    std::memset(err, 0, sizeof(DeviceError));
  else if ((s = cudaFail(cudaMemsetAsync(err, 0, sizeof(DeviceError), d->stream),
                         "cudaMemsetAsync")) != AMPRT_OK)
    return cleanup(s);
  const std::vector<uint64_t> &jumps = rngJumpTable();
  void *rng;
  if ((s = rawAlloc(*d, 8 + jumps.size() * 8, &rng)) != AMPRT_OK)
    return cleanup(s);
  d->rngState = static_cast<uint64_t *>(rng);
  d->rngJumps = d->rngState + 1;
  if ((s = rawCopy(*d, d->rngJumps, jumps.data(), jumps.size() * 8, 0)) != AMPRT_OK ||
      (s = rawCopy(*d, d->rngState, &ctx->rng, 8, 0)) != AMPRT_OK)
    return cleanup(s);
  ctx->impl = d;
  return AMPRT_OK;
}

/// The profile's pending event pairs, read (the stream is synchronised).
void flushProfile(Dev &d) {
  for (auto &[key, ev] : d.timed) {
    float ms = 0.0f;
    if (cudaEventSynchronize(ev.second) == cudaSuccess &&
        cudaEventElapsedTime(&ms, ev.first, ev.second) == cudaSuccess)
      d.profileTable.add(key, ms * 1e-3);
    d.eventPool.push_back(ev.first);
    d.eventPool.push_back(ev.second);
  }
  d.timed.clear();
}

void close(amprt_context *ctx) {
  Dev *d = static_cast<Dev *>(ctx->impl);
  if (!d)
    return;
  if (!d->emulate)
    cudaStreamSynchronize(d->stream);
  if (d->profile) {
    flushProfile(*d);
    for (cudaEvent_t e : d->eventPool)
      cudaEventDestroy(e);
    std::fprintf(stderr,
                 "amprt (cuda): convolutions (forward, data and weight gradients apart): %lld on cuDNN, %lld on "
                 "%s; ReLU after a matrix product: %s\n",
                 (long long)d->convOnDnn, (long long)d->convOnOurs,
                 d->directConv ? "the direct kernels" : "im2col + cuBLASLt",
                 d->emulate                           ? "the CPU runtime's (emulated)"
                 : d->ltReluKeepsNaN && d->reluEpilogue ? "cuBLASLt's epilogue (it keeps NaN on this device)"
                 : d->reluEpilogue ? "a second pass (cuBLASLt's epilogue does not keep NaN here)"
                                   : "a second pass (AMPRT_CUDA_RELU_EPILOGUE=0)");
    d->profileTable.print(d->emulate ? " (cuda, emulated on the host)" : " (cuda)");
  }
  for (auto &[k, p] : d->plans) {
    ltApi.cublasLtMatmulDescDestroy(p.op);
    ltApi.cublasLtMatrixLayoutDestroy(p.a);
    ltApi.cublasLtMatrixLayoutDestroy(p.b);
    ltApi.cublasLtMatrixLayoutDestroy(p.c);
  }
#ifdef AMPRT_HAVE_CUDNN
  for (auto &[k, p] : d->dnnPlans)
    dnnFree(p);
  if (d->dnn)
    dnnApi.cudnnDestroy(static_cast<cudnnHandle_t>(d->dnn));
#endif
  for (auto &[k, c] : d->constants)
    rawFree(*d, c.first);
  for (auto &s : d->scratch)
    rawFree(*d, s.first);
  for (auto &[p, n] : d->allocations)
    rawFree(*d, const_cast<char *>(p));
  rawFree(*d, d->err);
  rawFree(*d, d->rngState);
  rawFree(*d, d->ltWork);
  if (d->lt)
    ltApi.cublasLtDestroy(d->lt);
  if (d->stream)
    cudaStreamDestroy(d->stream);
  delete d;
  ctx->impl = nullptr;
}

int64_t syncCount(amprt_context *ctx) { return devOf(ctx).hostSyncs; }

int32_t profiledExec(amprt_context *ctx, Dev &d, const int64_t *desc, void **bufs) {
  if (d.emulate) {
    auto t0 = std::chrono::steady_clock::now();
    int32_t r = execOne(ctx, d, desc, bufs);
    d.profileTable.add(desc::profileKey(desc),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return r;
  }
  cudaEvent_t ev[2];
  for (cudaEvent_t &e : ev) {
    if (d.eventPool.empty()) {
      CUDA_CHECK(cudaEventCreate(&e), "AMPRT_PROFILE: cudaEventCreate");
    } else {
      e = d.eventPool.back();
      d.eventPool.pop_back();
    }
  }
  cudaEventRecord(ev[0], d.stream);
  int32_t r = execOne(ctx, d, desc, bufs);
  cudaEventRecord(ev[1], d.stream);
  d.timed.push_back({desc::profileKey(desc), {ev[0], ev[1]}});
  return r;
}

int32_t exec(amprt_context *ctx, const int64_t *desc, void **bufs) {
  Dev &d = devOf(ctx);
  if (d.profile && !d.capturing)
    return profiledExec(ctx, d, desc, bufs);
  if (d.capturing && d.emulate) {
    // Recorded for the emulated graph: the descriptor is the program's
    // constant, the buffer pointers are copied (the caller's array is not).
    if (!desc || !knownVersion(desc[0]) || desc[2] < 0 || desc[2] > 4096)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt descriptor");
    Dev::Call c{desc, {}};
    if (bufs)
      c.bufs.assign(bufs, bufs + desc[2]);
    d.recorded.push_back(std::move(c));
    return AMPRT_OK;
  }
  return execOne(ctx, d, desc, bufs);
}

struct Graph {
  cudaGraphExec_t exec = nullptr;
  std::vector<Dev::Call> calls; // emulated
};

amprt_status graphBegin(amprt_context *ctx) {
  Dev &d = devOf(ctx);
  if (d.capturing)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_graph_begin: already capturing");
  if (!d.emulate)
    CUDA_CHECK(cudaStreamBeginCapture(d.stream, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
  d.recorded.clear();
  d.capturing = true;
  return AMPRT_OK;
}

amprt_status graphEnd(amprt_context *ctx, void **out) {
  Dev &d = devOf(ctx);
  *out = nullptr;
  if (!d.capturing)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_graph_end: not capturing");
  d.capturing = false;
  auto *g = new (std::nothrow) Graph();
  if (!g)
    return fail(AMPRT_ERR_OUT_OF_MEMORY, "amprt_graph_end");
  if (d.emulate) {
    g->calls.swap(d.recorded);
  } else {
    cudaGraph_t graph = nullptr;
    amprt_status s = cudaFail(cudaStreamEndCapture(d.stream, &graph), "cudaStreamEndCapture");
    if (s == AMPRT_OK)
      s = cudaFail(cudaGraphInstantiate(&g->exec, graph, 0), "cudaGraphInstantiate");
    if (graph)
      cudaGraphDestroy(graph);
    if (s != AMPRT_OK) {
      delete g;
      return s;
    }
  }
  *out = g;
  return AMPRT_OK;
}

amprt_status graphLaunch(amprt_context *ctx, void *p) {
  Dev &d = devOf(ctx);
  auto *g = static_cast<Graph *>(p);
  if (d.emulate) {
    for (Dev::Call &c : g->calls)
      AMPRT_CHECK((amprt_status)execOne(ctx, d, c.desc, c.bufs.empty() ? nullptr : c.bufs.data()));
    return AMPRT_OK;
  }
  CUDA_CHECK(cudaGraphLaunch(g->exec, d.stream), "cudaGraphLaunch");
  return AMPRT_OK;
}

void graphDestroy(amprt_context *ctx, void *p) {
  auto *g = static_cast<Graph *>(p);
  if (g && g->exec) {
    cudaStreamSynchronize(devOf(ctx).stream);
    cudaGraphExecDestroy(g->exec);
  }
  delete g;
}

amprt_status alloc(amprt_context *ctx, size_t bytes, void **out) {
  Dev &d = devOf(ctx);
  AMPRT_CHECK(rawAlloc(d, bytes, out));
  d.allocations[static_cast<const char *>(*out)] = bytes ? bytes : 1;
  return AMPRT_OK;
}

void release(amprt_context *ctx, void *p) {
  Dev &d = devOf(ctx);
  auto it = d.allocations.find(static_cast<const char *>(p));
  if (it == d.allocations.end())
    return; // not ours
  ++d.hostSyncs;
  if (!d.emulate)
    cudaStreamSynchronize(d.stream);
  d.allocations.erase(it);
  rawFree(d, p);
}

amprt_status copy(amprt_context *ctx, void *dst, const void *src, size_t bytes, int32_t kind) {
  return rawCopy(devOf(ctx), dst, src, bytes, kind);
}

amprt_status sync(amprt_context *ctx) {
  Dev &d = devOf(ctx);
  DeviceError e{};
  ++d.hostSyncs;
  if (d.emulate) {
    e = *d.err;
    std::memset(d.err, 0, sizeof e);
  } else {
    CUDA_CHECK(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
    flushProfile(d);
    CUDA_CHECK(cudaMemcpyAsync(&e, d.err, sizeof e, cudaMemcpyDeviceToHost, d.stream),
               "reading the device's errors");
    CUDA_CHECK(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
    if (e.kind != ERR_NONE)
      CUDA_CHECK(cudaMemsetAsync(d.err, 0, sizeof e, d.stream), "cudaMemsetAsync"); // in order
  }
  switch (e.kind) {
  case ERR_NONE: return AMPRT_OK;
  case ERR_LABEL:
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "a loss: label %lld at position %lld is outside [0, %lld)",
                (long long)e.a, (long long)e.b, (long long)e.c);
  case ERR_INDEX:
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "gather: index %lld out of range [-%lld, %lld)",
                (long long)e.a, (long long)e.b, (long long)e.b);
  case ERR_MIN_SCALE:
  case ERR_MIN_SCALE_WARN: {
    // The CPU runtime's words (amprt_update_scale).
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "amprt_update_scale: an overflow at the minimum loss scale %g: every step is "
                  "being skipped (lower the learning rate, check the data and the fp16 ops)",
                  floatOf((uint32_t)e.a));
    if (e.kind == ERR_MIN_SCALE)
      return fail(AMPRT_ERR_NUMERIC, "%s", msg);
    if (!d.warned)
      std::fprintf(stderr, "warning: %s\n", msg);
    d.warned = true;
    return AMPRT_OK;
  }
  case ERR_MICRO_STEP:
    return fail(AMPRT_ERR_INVALID_ARGUMENT,
                "micro_step: counter %lld outside [0, %lld) (a checkpoint of another "
                "accumulation setting?)",
                (long long)e.a, (long long)e.b);
  case ERR_INT_DIV_ZERO:
    return fail(AMPRT_ERR_NUMERIC, "binary: integer division by zero");
  case ERR_PROBABILITY: {
    uint32_t bits = (uint32_t)e.a;
    float v;
    std::memcpy(&v, &bits, 4);
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_random: bernoulli probability %g at element %lld is outside [0, 1]",
                v, (long long)e.b);
  }
  }
  return fail(AMPRT_ERR_DEVICE, "the device recorded an unknown error %d", e.kind);
}

amprt_status rngSet(amprt_context *ctx, uint64_t state) {
  Dev &d = devOf(ctx);
  if (d.capturing)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "the dropout generator cannot be set inside a CUDA graph capture");
  return rawCopy(d, d.rngState, &state, 8, 0);
}

amprt_status rngGet(amprt_context *ctx, uint64_t *state) {
  Dev &d = devOf(ctx);
  if (d.capturing)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "the dropout generator cannot be read inside a CUDA graph capture");
  return rawCopy(d, state, d.rngState, 8, 1);
}

const amprt_device_ops kOps = {open,       close,    exec,        alloc,        release, copy,   sync,
                               syncCount,  graphBegin, graphEnd, graphLaunch, graphDestroy, rngSet, rngGet};

} // namespace
} // namespace amprt::cuda

extern "C" const amprt_device_ops *amprt_cuda_device_ops(void) { return &amprt::cuda::kOps; }
