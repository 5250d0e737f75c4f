//===- backend.cuh - the CUDA backend's shared state and helpers ------------===//
//
// What the backend's files share: a context's device state (Dev), tensors as
// kernels see them (View), the convolution / pool geometry, and the helpers
// and per-family entry points exec.cu dispatches to. One file per concern:
// driver.cu (libraries, memory, views), context.cu (contexts, copies,
// synchronisation, graph capture), exec.cu (the executor), and one file per
// kernel family (elementwise, indexing, random, reduce, scaler, conv,
// conv_cudnn, pool, batchnorm, matmul).
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CUDA_BACKEND_CUH
#define AMPRT_CUDA_BACKEND_CUH

#include "device.cuh"
#include "dynamic_symbols.h"

#include "common/check.h"
#include "common/exec_decode.h"
#include "common/scalar_ops.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace amprt::cuda {

using desc::Decoded;

struct Dev {
  bool emulate = false;
  bool directConv = false; // AMPRT_CUDA_CONV=direct: the direct kernels, not im2col + cuBLASLt
  // AMPRT_CUDA_CONV: cuDNN for the convolutions it takes (auto, the default:
  // where cuDNN loads; cudnn: required), else im2col + cuBLASLt.
  enum DnnMode { kDnnOff, kDnnAuto, kDnnRequired } dnnMode = kDnnAuto;
  void *dnn = nullptr; // the cuDNN handle, made at the first convolution
#ifdef AMPRT_HAVE_CUDNN
  // cuDNN: the library's functions on a device, the host implementation's
  // (dnn_host.h) on an emulated context.
  const DnnApi *dnna = &dnnApi;
#endif
  bool dnnTried = false;
  bool emulateDnnNoAlgorithm = false; // AMPRT_CUDA_EMULATE_DNN=no-algorithm (emulated only)
  bool ltReluKeepsNaN = false;        // cuBLASLt's ReLU epilogue keeps NaN (probed at creation)
  bool reluEpilogue = true;           // AMPRT_CUDA_RELU_EPILOGUE=0: ReLU always a second pass
  // Convolution calls (forward, data and weight gradients counted apart) on
  // cuDNN and on the other paths, printed with the profile.
  int64_t convOnDnn = 0, convOnOurs = 0;
  size_t convChunkBytes = (size_t)512 << 20; // AMPRT_CUDA_CONV_CHUNK: the gathered windows' budget
  bool vec = true; // AMPRT_CUDA_VEC=0: no 16-byte groups in the element-wise kernels, reductions
  int device = 0;
  cudaStream_t stream = nullptr;
  // cuBLASLt: the library's functions on a device, the host
  // implementation's (lt_host.h) on an emulated context.
  const LtApi *lta = &ltApi;
  cublasLtHandle_t lt = nullptr;
  // Matrix products run on cuBLASLt and on the fallback kernel (where
  // cuBLASLt has no algorithm), printed with the profile.
  int64_t ltCalls = 0, fallbackCalls = 0;
  bool warnedFallback = false;
  bool gemmFallback = false; // AMPRT_CUDA_GEMM=fallback: every product on the fallback kernel
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
  std::vector<std::pair<void *, size_t>> scratch =
      std::vector<std::pair<void *, size_t>>(14); // 12: cuDNN's workspace, 13: all_reduce's
  // A CUDA graph keeps the pointers it captured: while any graph lives, a
  // scratch buffer outgrown is retired (freed when the last graph goes),
  // not freed. Emulated, the scratch buffers freed are remembered and a
  // graph launch that would read one fails, as the device would misbehave.
  int64_t graphsAlive = 0;
  // Emulated: every block the context allocated (base -> bytes), so that a
  // copy naming host memory as its device side fails as on a device.
  std::map<const char *, size_t> emulatedMemory;
  std::vector<void *> retired;
  std::set<const void *> freedScratch; // emulated only
  // cuBLASLt plans by problem.
  struct LtPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
    bool fallback = false; // no algorithm: the backend's own kernel
  };
  std::map<std::vector<int64_t>, LtPlan> plans;
  // cuDNN convolution plans by problem (ok = false: cuDNN refused this one,
  // which then runs as im2col + cuBLASLt).
  struct DnnPlan {
    bool ok = false;
    void *x = nullptr, *y = nullptr, *w = nullptr, *conv = nullptr; // descriptors
    int algo = 0;
    size_t work = 0;
    std::string why; // refused by cuDNN itself: why (an error with AMPRT_CUDA_CONV=cudnn)
  };
  std::map<std::vector<int64_t>, DnnPlan> dnnPlans;
};

Dev &devOf(amprt_context *ctx);
amprt_status rawAlloc(Dev &d, size_t bytes, void **out);
void rawFree(Dev &d, void *p);
amprt_status rawCopy(Dev &d, void *dst, const void *src, size_t bytes, int32_t kind);
/// Scratch slot `slot`, grown to at least `bytes`.
amprt_status scratch(Dev &d, int slot, size_t bytes, void **out);
/// Whether [p, p + bytes) lies in one of an emulated context's allocations.
bool inDeviceMemory(const Dev &d, const void *p, size_t bytes);

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

View viewOf(const amprt_tensor &t);
View flat(View v);
amprt_status broadcastView(const amprt_tensor &x, const amprt_tensor &y, const char *what, View &v);
int64_t numel(const amprt_tensor &t);

amprt_status unsupported(const char *op);
amprt_status checkContiguous(const amprt_tensor &t, int32_t dtype, const char *what);
bool sameShape(const amprt_tensor &a, const amprt_tensor &b);
/// A copy of x into y (same element count; row-major order on both).
amprt_status copyTensor(Dev &d, const amprt_tensor &x, const amprt_tensor &y, const char *what);
amprt_status zero(Dev &d, void *p, size_t bytes);

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

amprt_status geomOf(const amprt_tensor &x, const amprt_tensor &y, int32_t spatial,
                    const int64_t *kernel, const int64_t *strides, const int64_t *dil,
                    const int64_t *pb, int64_t group, const char *what, Geom &g);
amprt_status convGeom(const amprt_tensor &x, const amprt_tensor &w, const amprt_tensor &y,
                      const amprt_conv_params &p, const char *what, Geom &g);
/// Batched products on cuBLASLt (matmul.cu).
amprt_status bmm(Dev &d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A,
                 const void *B, int32_t abType, void *Y, int32_t yType, int64_t batch, int64_t sA,
                 int64_t sB, int64_t sY);

/// Y = alpha op(A) op(B) (+ bias row, ReLU) on cuBLASLt (matmul.cu).
amprt_status ltMatmul(Dev &d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A,
                      const void *B, int32_t abType, void *Y, int32_t yType, float alpha,
                      const void *bias, int64_t batch, int64_t sA, int64_t sB, int64_t sY,
                      bool relu = false);
/// The dropout generator's jump table (random.cu).
const std::vector<uint64_t> &rngJumpTable();
#ifdef AMPRT_HAVE_CUDNN
// cuDNN's convolutions (conv_cudnn.cu): done = false where cuDNN does not
// take the problem (it then runs as im2col + cuBLASLt).
void dnnFree(const Dev &d, Dev::DnnPlan &p);
amprt_status dnnConv(Dev &d, const Geom &g, int32_t spatial, const void *x, int32_t xt,
                     const void *w, int32_t wt, const void *bias, int32_t bt, void *y, int32_t yt,
                     bool relu, bool &done);
amprt_status dnnConvGrad(Dev &d, const Geom &g, int32_t spatial, const amprt_tensor &x,
                         const amprt_tensor &w, const amprt_tensor &dy, const amprt_tensor *&dx,
                         const amprt_tensor *&dw);
#endif

// The opcode families (one file each); exec.cu dispatches to them.
int32_t execElementwise(amprt_context *ctx, Dev &d, Decoded &dd);
int32_t execIndexing(amprt_context *ctx, Dev &d, Decoded &dd);
int32_t execRandom(amprt_context *ctx, Dev &d, Decoded &dd);
int32_t execReduce(amprt_context *ctx, Dev &d, Decoded &dd);
int32_t execMatMul(amprt_context *ctx, Dev &d, Decoded &dd);
int32_t execScaler(amprt_context *ctx, Dev &d, Decoded &dd);
int32_t execOptimizer(amprt_context *ctx, Dev &d, Decoded &dd);
int32_t execConv(amprt_context *ctx, Dev &d, Decoded &dd);
int32_t execPool(amprt_context *ctx, Dev &d, Decoded &dd);
int32_t execBatchNorm(amprt_context *ctx, Dev &d, Decoded &dd);
int32_t execAllReduce(amprt_context *ctx, Dev &d, Decoded &dd); // comm.cu
/// One descriptor (exec.cu).
int32_t execOne(amprt_context *ctx, Dev &d, const int64_t *desc, void **bufs);

} // namespace amprt::cuda

#endif // AMPRT_CUDA_BACKEND_CUH
