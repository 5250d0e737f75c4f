//===- internal.h - runtime internals shared by the CPU kernels -*- C++ -*-===//

#ifndef AMPRT_LIB_INTERNAL_H
#define AMPRT_LIB_INTERNAL_H

#include "amprt/amprt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

/// A device backend other than the host (libamprt_cuda's): the context's
/// kernels, memory and copies. Found through a weak symbol, so that a
/// program without that library links and reports "no CUDA device".
struct amprt_device_ops {
  amprt_status (*open)(amprt_context *ctx, int32_t device);
  void (*close)(amprt_context *ctx);
  int32_t (*exec)(amprt_context *ctx, const int64_t *desc, void **bufs);
  amprt_status (*alloc)(amprt_context *ctx, size_t bytes, void **out);
  void (*free)(amprt_context *ctx, void *ptr);
  amprt_status (*copy)(amprt_context *ctx, void *dst, const void *src, size_t bytes, int32_t kind);
  amprt_status (*sync)(amprt_context *ctx);
  int64_t (*syncCount)(amprt_context *ctx);
  amprt_status (*graphBegin)(amprt_context *ctx);
  amprt_status (*graphEnd)(amprt_context *ctx, void **graph);
  amprt_status (*graphLaunch)(amprt_context *ctx, void *graph);
  void (*graphDestroy)(amprt_context *ctx, void *graph);
  // The dropout generator's state, kept on the device (ctx->rng mirrors
  // what was last set).
  amprt_status (*rngSet)(amprt_context *ctx, uint64_t state);
  amprt_status (*rngGet)(amprt_context *ctx, uint64_t *state);
};

extern "C" const amprt_device_ops *amprt_cuda_device_ops(void) __attribute__((weak));

struct amprt_context {
  std::string device;
  uint64_t rng = 0x853c49e6748fea9bULL;
  const amprt_device_ops *ops = nullptr; // null: the host
  void *impl = nullptr;                  // the backend's state
  bool capturing = false;                // between amprt_graph_begin and _end
  amprt_comm *comm = nullptr;            // data parallel (not owned)
  int32_t commDtype = AMPRT_F32;         // what the gradients travel in
  // Gradients checked for inf / NaN by the op that wrote them (see
  // amprt::notePrechecked), until the step's unscale_and_check reads them.
  struct Prechecked {
    const void *data;
    int64_t numel;
    bool nonFinite;
  };
  std::mutex precheckedMu;
  std::vector<Prechecked> prechecked;
};

namespace amprt {

/// AMPRT_PROFILE: the kernel implementations an op ran (oneDNN's
/// impl_info_str, e.g. "brg:avx512_core_amx"), noted by the kernels while
/// profiling and taken by the profile after the op (exec.cpp).
void noteKernelImpl(const char *impl);
std::string takeKernelImpls();

/// The per-shape kernel choice (tune.cpp). Where several kernels compute
/// the same result up to the order of the f32 sums (oneDNN's bf16 kernels
/// or its f32 ones on exactly widened bf16 values; a backward-weights
/// kernel or im2col + matmul), the first call of a `key` (the op, its
/// shapes, types and thread count) runs each candidate `run(i)` on the real
/// operands, once to make its primitives and twice timed, and keeps the
/// fastest: `preferred` (the fixed rule's) unless another is 5% faster.
/// AMPRT_TUNE=off keeps the fixed rules, =debug prints each choice (as
/// AMPRT_PROFILE does); AMPRT_TUNE_FILE=path reads earlier choices and
/// appends new ones (runs that must agree bit for bit share it). A data-
/// parallel context keeps the fixed rules unless AMPRT_TUNE is set. `run`
/// must write the whole result from the inputs (it is called several times).
bool tuningOn(const amprt_context *ctx);
amprt_status chooseKernel(const amprt_context *ctx, const std::string &key,
                          const std::vector<const char *> &names, int preferred,
                          const std::function<amprt_status(int)> &run, int *choice);
/// AMPRT_TUNE_FILE read and parsed now (where tuning is on): a malformed
/// file is an error when the context is made, whether or not this CPU has
/// anything to choose.
amprt_status checkTuneFile();
/// AMPRT_TUNE=debug: says once that oneDNN has no bf16 kernels on this CPU
/// (AVX2 only), so bf16 products and convolutions run on its f32 kernels
/// and there is nothing to choose.
void noteNoBf16Kernels();
/// The choices made or loaded, as AMPRT_TUNE_FILE lines (a checkpoint keeps
/// them: a resumed run continues with the kernels it had).
std::string kernelChoicesText();
/// Takes choices from a checkpoint where this process has made none.
void adoptKernelChoices(const std::string &text);
/// For the kernel tests: every later choice that offers a candidate named
/// `name` takes it (no timing, nothing cached); others keep the fixed rule.
/// An empty name ends it.
void forceKernelForTesting(const std::string &name);
/// Changes whenever a choice chooseKernel made could turn out otherwise on
/// the next call (forceKernelForTesting, adoptKernelChoices): a caller that keeps chooseKernel's
/// answers per shape (to skip formatting its key on every call) keeps them
/// for one generation.
uint64_t tunerGeneration();
/// For the kernel tests: how many convolution passes ran as im2col + one
/// product (forward, data or weight gradient; direct-amx's weight gradient,
/// its columns made tile by tile, included) in this process.
int64_t im2colConvCallsForTesting();
/// Whether oneDNN has bf16 kernels here (the bf16-only candidates exist).
bool bf16KernelsForTesting();
/// For the kernel tests: the data gradient's col2im of a small output map
/// (oh x ow at most 64 positions) into out [n x c planes of h x w] from
/// dcol [c x kh x kw rows, n x oh x ow], by the AVX-512 gather (vector,
/// where the CPU has it) or by the scalar scatter. Returns whether the
/// AVX-512 loop ran.
bool smallMapCol2imForTesting(const amprt_conv_params *p, int64_t n, int64_t c, int64_t h,
                              int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                              const float *dcol, bool vector, float *out);

/// How long a collective waits for the other ranks: AMPRT_COMM_TIMEOUT
/// seconds, 300 by default (the MPI and NCCL back-ends; context.cpp).
double commTimeoutSeconds();

/// Whether AMPRT_CHECK_NUMERICS asks for the NaN / inf origin check
/// (exec.cpp).
bool checkNumericsRequested();

/// AMPRT_EXEC_RECORD's folder, or null (record.cpp).
const char *recordFolder();
/// Runs `run` and records the call (its tensors' bytes before and after).
int32_t recordExec(amprt_context *ctx, const int64_t *desc, void **bufs,
                   int32_t (*run)(amprt_context *, const int64_t *, void **));

/// Records a printf-style message as this thread's last error and returns
/// `status`.
amprt_status fail(amprt_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/// The portable conversion loop (the definition vector paths must match).
void convertScalar(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n);
/// amprt_convert between float types the caller has checked, without its
/// checks: the fastest path the CPU has (AVX-512, AVX2 + F16C, or the
/// scalar loop), for short runs called many times (a batch norm's planes,
/// the optimizer's blocks).
void convertRun(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n);
/// Whether convertRun has its AVX-512 paths here (AVX-512 F + BW, and
/// AMPRT_NO_AVX512 / AMPRT_NO_AVX2 unset).
bool haveAvx512bw();

// GCC 12 warns of the undefined vectors its own AVX-512 intrinsics start
// from (its bug 105593) wherever they are inlined: AMPRT_AVX512_QUIET_BEGIN
// ... AMPRT_AVX512_QUIET_END around such code.
#if defined(__GNUC__) && !defined(__clang__)
#define AMPRT_AVX512_QUIET_BEGIN                                                                   \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")       \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define AMPRT_AVX512_QUIET_END _Pragma("GCC diagnostic pop")
#else
#define AMPRT_AVX512_QUIET_BEGIN
#define AMPRT_AVX512_QUIET_END
#endif

/// Forgets the f16 / bf16 unary ops' tables (elementwise.cpp; a process
/// keeps 64): for tests that must run every op by table. Only while no
/// kernel runs.
void dropUnaryTables();

/// amxProduct runs here: an x86-64 CPU with AMX-BF16 whose OS grants the
/// tile state, AVX-512 paths on (AMPRT_NO_AVX512 unset), AMPRT_NO_AMX unset.
bool amxProductAvailable();
/// c [m x n] f32 (row stride ldc) = a [m x k] @ b [k x n], bf16 operands
/// (amx.cpp): element (i, kk) of a at a[i * a0 + kk * a1], (kk, j) of b at
/// b[kk * b0 + j * b1] (one of a0 / a1 and one of b0 / b1 should be 1: the
/// others are packed element by element). TDPBF16PS's arithmetic, as
/// oneDNN's AMX kernels: exact products, f32 sums in the order of k, bf16
/// subnormals read as zero. Only where amxProductAvailable(). With
/// nonFinite, also whether c holds an inf or NaN, each tile read as it is
/// stored (the inf check of a weight gradient, in L1).
void amxProduct(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t a0, int64_t a1,
                const uint16_t *b, int64_t b0, int64_t b1, float *c, int64_t ldc,
                bool *nonFinite = nullptr);
/// A 2-D convolution's weight gradient on the AMX tiles without its
/// im2col matrix: dw [oc, C x KH x KW] (f32, rows of K) = dyt [oc, P]
/// (bf16 rows, P = N x OH x OW in (n, oh, ow) order) @ the columns of x
/// [N, C, H, W] (bf16; any row stride, column stride 1 or 2, dilation 1,
/// padding padT / padL), each tile of the columns made from x's rows where
/// the product reads it. amxProduct's arithmetic; nonFinite as there. Only
/// where amxProductAvailable().
void amxConvWeightGrad(const uint16_t *x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t KH,
                       int64_t KW, int64_t strideH, int64_t strideW, int64_t padT, int64_t padL,
                       int64_t OH, int64_t OW, const uint16_t *dyt, int64_t oc, float *dw,
                       bool *nonFinite = nullptr);
/// Whether amxProduct reads a row-major a (a1 = 1) of m rows and k columns
/// in place, tile by tile, instead of packing it: whole tiles (m a
/// multiple of 16, k of 32) and a sum of more than one tile.
inline bool amxReadsAInPlace(int64_t m, int64_t k) { return m % 16 == 0 && k % 32 == 0 && k > 32; }

/// Whether n f32 at p hold an inf or NaN (the exponent's bits all ones),
/// on the threads (amp.cpp).
bool anyNonFiniteF32(const float *p, int64_t n);
/// The inf check moved to a gradient's producer (amp.cpp). A conv_grad
/// whose weight gradient the step's unscale_and_check reads directly (the
/// compiler's check_dw) checks it as it writes it, while it is in the
/// caches, and notes the answer here; that unscale_and_check (through
/// amprt_exec, where it only tests: f32, in place, scale 1) takes the note
/// instead of reading the gradient again. A note names the tensor's data
/// and size; the program writes nothing else there between the two ops
/// (the gradient is live until the check). Notes go when the check has
/// run, and when an op fails (a step cut short). No note without a
/// context.
void notePrechecked(amprt_context *ctx, const amprt_tensor *t, bool nonFinite);
/// The note for t (taken out), if there is one.
bool takePrechecked(amprt_context *ctx, const amprt_tensor *t, bool *nonFinite);
void forgetPrechecked(amprt_context *ctx);
/// amprt_conv_backward; checkDw: an f32 dw checked for inf / NaN as it is
/// written and noted (notePrechecked: amprt_exec's conv_grad with check_dw).
amprt_status convBackwardChecked(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *w,
                                 const amprt_tensor *dy, const amprt_conv_params *p,
                                 amprt_tensor *dx, amprt_tensor *dw, amprt_tensor *db,
                                 bool checkDw);
/// amprt_unscale_and_check; usePrechecked: the producers' notes taken
/// (amprt_exec's unscale_and_check).
amprt_status unscaleAndCheck(amprt_context *ctx, const amprt_tensor *grads, amprt_tensor *outs,
                             int32_t n, const float *scale, float *found_inf, bool usePrechecked);

inline bool isFloat(amprt_dtype t) { return t == AMPRT_F32 || t == AMPRT_F16 || t == AMPRT_BF16; }
inline bool isValid(amprt_dtype t) { return (unsigned)t < (unsigned)AMPRT_DTYPE_COUNT; }

std::string shapeString(const amprt_tensor *t);

/// Loads element i (in elements from `base`) as float / as int64.
inline float loadF(const void *base, amprt_dtype t, int64_t i) {
  switch (t) {
  case AMPRT_F32:
    return static_cast<const float *>(base)[i];
  case AMPRT_F16:
    return amprt_f16_to_f32(static_cast<const uint16_t *>(base)[i]);
  case AMPRT_BF16:
    return amprt_bf16_to_f32(static_cast<const uint16_t *>(base)[i]);
  case AMPRT_I1:
    return static_cast<const uint8_t *>(base)[i] ? 1.0f : 0.0f;
  case AMPRT_I8:
    return static_cast<const int8_t *>(base)[i];
  case AMPRT_I16:
    return static_cast<const int16_t *>(base)[i];
  case AMPRT_I32:
    return (float)static_cast<const int32_t *>(base)[i];
  case AMPRT_I64:
    return (float)static_cast<const int64_t *>(base)[i];
  case AMPRT_U8:
    return static_cast<const uint8_t *>(base)[i];
  case AMPRT_U16:
    return static_cast<const uint16_t *>(base)[i];
  case AMPRT_U32:
    return (float)static_cast<const uint32_t *>(base)[i];
  case AMPRT_U64:
    return (float)static_cast<const uint64_t *>(base)[i];
  default:
    return 0.0f;
  }
}

inline int64_t loadI(const void *base, amprt_dtype t, int64_t i) {
  switch (t) {
  case AMPRT_I1:
    return static_cast<const uint8_t *>(base)[i] != 0;
  case AMPRT_I8:
    return static_cast<const int8_t *>(base)[i];
  case AMPRT_I16:
    return static_cast<const int16_t *>(base)[i];
  case AMPRT_I32:
    return static_cast<const int32_t *>(base)[i];
  case AMPRT_I64:
    return static_cast<const int64_t *>(base)[i];
  case AMPRT_U8:
    return static_cast<const uint8_t *>(base)[i];
  case AMPRT_U16:
    return static_cast<const uint16_t *>(base)[i];
  case AMPRT_U32:
    return static_cast<const uint32_t *>(base)[i];
  case AMPRT_U64:
    return (int64_t)static_cast<const uint64_t *>(base)[i];
  default:
    return (int64_t)loadF(base, t, i);
  }
}

/// Stores v rounded to nearest even in the element type.
inline void storeF(void *base, amprt_dtype t, int64_t i, float v) {
  switch (t) {
  case AMPRT_F32:
    static_cast<float *>(base)[i] = v;
    break;
  case AMPRT_F16:
    static_cast<uint16_t *>(base)[i] = amprt_f32_to_f16(v);
    break;
  case AMPRT_BF16:
    static_cast<uint16_t *>(base)[i] = amprt_f32_to_bf16(v);
    break;
  default:
    break;
  }
}

inline void storeI(void *base, amprt_dtype t, int64_t i, int64_t v) {
  switch (t) {
  case AMPRT_I1:
    static_cast<uint8_t *>(base)[i] = v != 0;
    break;
  case AMPRT_I8:
    static_cast<int8_t *>(base)[i] = (int8_t)v;
    break;
  case AMPRT_I16:
    static_cast<int16_t *>(base)[i] = (int16_t)v;
    break;
  case AMPRT_I32:
    static_cast<int32_t *>(base)[i] = (int32_t)v;
    break;
  case AMPRT_I64:
    static_cast<int64_t *>(base)[i] = v;
    break;
  case AMPRT_U8:
    static_cast<uint8_t *>(base)[i] = (uint8_t)v;
    break;
  case AMPRT_U16:
    static_cast<uint16_t *>(base)[i] = (uint16_t)v;
    break;
  case AMPRT_U32:
    static_cast<uint32_t *>(base)[i] = (uint32_t)v;
    break;
  case AMPRT_U64:
    static_cast<uint64_t *>(base)[i] = (uint64_t)v;
    break;
  default:
    storeF(base, t, i, (float)v);
    break;
  }
}

inline bool isHalf(amprt_dtype t) { return t == AMPRT_F16 || t == AMPRT_BF16; }

/// f16 / bf16 kernels run as their f32 kernels on f32 copies of the operands
/// (vector conversions, thread-local scratch reused from call to call): the
/// same arithmetic (f32, one rounding when stored) as element-wise loads and
/// stores, without a conversion call per element. `slot` picks one of four
/// scratch buffers. An f32 tensor is returned as it is.
amprt_tensor asF32(const amprt_tensor *x, int slot);

/// Whether a and b have one shape (reduce.cpp).
bool sameShape(const amprt_tensor *a, const amprt_tensor *b);
/// A valid f32, f16 or bf16 tensor (reduce.cpp).
amprt_status checkFloat(const amprt_tensor *t, const char *what);
/// A contiguous float tensor of c elements (reduce.cpp).
amprt_status checkChannel(const amprt_tensor *t, int64_t c, const char *what);

/// y's shape must be the broadcast of the inputs': per-input strides over
/// y's shape in strides[0..], y's own strides last (elementwise.cpp).
amprt_status prepare(const char *kernel, const amprt_tensor *y,
                     std::initializer_list<const amprt_tensor *> ins,
                     int64_t (*strides)[AMPRT_MAX_RANK]);
/// A contiguous f32 scratch tensor of y's shape.
amprt_tensor scratchF32(const amprt_tensor *y, int slot);
/// Where an f32 result for y is computed: y itself when it is f32 (then
/// storeFromF32 has nothing to do), else scratchF32(y, slot).
inline amprt_tensor outF32(amprt_tensor *y, int slot) {
  return y->dtype == AMPRT_F32 ? *y : scratchF32(y, slot);
}
/// Stores an f32 scratch result into y (rounding to y's type).
amprt_status storeFromF32(const amprt_tensor &y32, amprt_tensor *y);

/// Checks a descriptor; `what` names it in the message ("amprt_gemm: a").
amprt_status check(const amprt_tensor *t, const char *what);

/// Strides of `x` seen from an output of shape (rank, shape): numpy
/// broadcasting, right-aligned, size-1 dims get stride 0. Fails when x does
/// not broadcast to that shape.
amprt_status broadcastStrides(const amprt_tensor *x, int32_t rank, const int64_t *shape,
                              int64_t *strides, const char *what);

/// Calls f(offsets) for every element of `shape`, where offsets[k] is the
/// element offset in operand k given its strides. N operands.
template <int N, typename F>
void forEach(int32_t rank, const int64_t *shape, const int64_t (*strides)[AMPRT_MAX_RANK], F &&f) {
  int64_t idx[AMPRT_MAX_RANK] = {0};
  int64_t off[N] = {0};
  for (int32_t d = 0; d < rank; ++d)
    if (shape[d] == 0)
      return;
  if (rank == 0) {
    f(off);
    return;
  }
  const int32_t last = rank - 1;
  const int64_t inner = shape[last];
  while (true) {
    int64_t o[N];
    for (int k = 0; k < N; ++k)
      o[k] = off[k];
    for (int64_t i = 0; i < inner; ++i) {
      f(o);
      for (int k = 0; k < N; ++k)
        o[k] += strides[k][last];
    }
    int32_t d = last - 1;
    while (d >= 0) {
      ++idx[d];
      for (int k = 0; k < N; ++k)
        off[k] += strides[k][d];
      if (idx[d] < shape[d])
        break;
      for (int k = 0; k < N; ++k)
        off[k] -= strides[k][d] * idx[d];
      idx[d] = 0;
      --d;
    }
    if (d < 0)
      return;
  }
}

/// A matrix product's shapes (numpy's matmul): 1-D operands promoted, the
/// batch dims broadcast; per batch dim its size and a's and b's strides
/// counted in matrices (0 where the operand is broadcast).
struct MatmulDims {
  int64_t m = 0, k = 0, n = 0, batches = 1;
  int32_t batchRank = 0;
  int64_t batch[AMPRT_MAX_RANK] = {0}, astr[AMPRT_MAX_RANK] = {0}, bstr[AMPRT_MAX_RANK] = {0};
  /// The matrix indices into a and b of batch `bt` (row-major order).
  void offsets(int64_t bt, int64_t &ao, int64_t &bo) const {
    ao = bo = 0;
    for (int32_t d = batchRank - 1; d >= 0; --d) {
      int64_t i = bt % batch[d];
      bt /= batch[d];
      ao += i * astr[d];
      bo += i * bstr[d];
    }
  }
};
/// Fills `md` for y = a @ b (`what` names the kernel in messages): the
/// contracted dims must agree, the batch dims broadcast and y hold the
/// result.
amprt_status matmulDims(const amprt_tensor *a, const amprt_tensor *b, const amprt_tensor *y,
                        const char *what, MatmulDims &md);

/// A matmul operand's layout: 0 dense row-major, 1 a transposed view of a
/// dense stack (its last two dims swapped: strides 1 and R on [..., R, C],
/// the batch dims dense over R x C matrices), -1 anything else.
inline int matrixLayout(const amprt_tensor *t) {
  if (amprt_tensor_is_contiguous(t))
    return 0;
  int32_t r = t->rank;
  if (r < 2)
    return -1;
  int64_t expect = t->shape[r - 2] * t->shape[r - 1];
  if ((t->shape[r - 2] > 1 && t->strides[r - 2] != 1) ||
      (t->shape[r - 1] > 1 && t->strides[r - 1] != t->shape[r - 2]))
    return -1;
  for (int32_t d = r - 3; d >= 0; --d) {
    if (t->shape[d] > 1 && t->strides[d] != expect)
      return -1;
    expect *= t->shape[d];
  }
  return 1;
}

/// Row-major strides of a shape.
void contiguousStrides(int32_t rank, const int64_t *shape, int64_t *strides);

/// Hot loops compiled three times, picked at load time by the CPU's features
/// (GCC's function multiversioning): baseline SSE2, AVX2, AVX-512.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define AMPRT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AMPRT_CLONES
#endif

/// The threads the next kernel may use (amprt_threads_adapt changes it).
inline int maxThreads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// v's storage for at least n elements, for a scratch buffer kept between
/// calls (thread_local): grown when short, never shrunk. (resize(n) would
/// shrink it for a smaller call and value-initialise, that is clear, the
/// difference again at the next larger one: megabytes a call where calls
/// of two sizes alternate.)
template <typename T> T *grown(std::vector<T> &v, size_t n) {
  if (v.size() < n)
    v.resize(n);
  return v.data();
}

/// Runs f(begin, end) over [0, n) in pieces on the OpenMP threads (the
/// pool oneDNN uses too) when there is at least `grain` work per thread;
/// piece boundaries are multiples of `align`, so that each element is
/// computed by the same code (vector body or scalar tail) whatever the
/// number of threads: results do not depend on it. Only for loops whose
/// outputs are independent (no sum across pieces). Inside a parallel
/// region, or with one thread, f(0, n) runs here.
template <typename F> void parallelFor(int64_t n, int64_t grain, int64_t align, F f) {
#if defined(_OPENMP)
  int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  int64_t units = (n + align - 1) / align;
  int64_t pieces = std::min<int64_t>({threads, units, n / std::max<int64_t>(grain, 1)});
  if (pieces > 1) {
#pragma omp parallel for num_threads((int)pieces) schedule(static, 1)
    for (int64_t k = 0; k < pieces; ++k) {
      int64_t b = std::min(n, units * k / pieces * align);
      int64_t e = std::min(n, units * (k + 1) / pieces * align);
      if (b < e)
        f(b, e);
    }
    return;
  }
#endif
  (void)grain;
  (void)align;
  f((int64_t)0, n);
}

/// amprt_convert over pieces on the threads (the conversions are exact and
/// the same on every path, so the split does not show).
amprt_status convertPar(const void *src, amprt_dtype st, void *dst, amprt_dtype dt, size_t n);
/// amprt_sgd_step / amprt_adam_step that also write `lowp` (may be null): a
/// contiguous f16 / bf16 tensor of the parameter's size gets the updated
/// parameter rounded, piece by piece in the update's pass (the unchanged
/// one when the step is skipped). amprt_exec's sgd_update / adam_update
/// with lowp (amp-keep-weight-casts).
amprt_status sgdStep(amprt_context *ctx, const amprt_sgd_config *cfg, amprt_tensor *param,
                     const amprt_tensor *grad, amprt_tensor *buf, const int64_t *step,
                     float found_inf, amprt_tensor *lowp);
amprt_status adamStep(amprt_context *ctx, const amprt_adam_config *cfg, amprt_tensor *param,
                      const amprt_tensor *grad, amprt_tensor *exp_avg, amprt_tensor *exp_avg_sq,
                      const int64_t *step, float found_inf, amprt_tensor *lowp);

/// Sum of n f32 values in double with eight partial sums (no single
/// dependency chain: a serial double sum costs an add latency per element).
inline double sumF32(const float *p, int64_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k)
      s[k] += (double)p[i + k];
  for (; i < n; ++i)
    s[i & 7] += (double)p[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/// Sum of (p[i] - mu)^2 in double, as sumF32.
inline double sumSqDevF32(const float *p, int64_t n, double mu) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      double d = (double)p[i + k] - mu;
      s[k] += d * d;
    }
  for (; i < n; ++i) {
    double d = (double)p[i] - mu;
    s[i & 7] += d * d;
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/// y[i] = exp(x[i]) in f32, four at a time with glibc's libmvec where it
/// exists (within 2 ulp, as the scalar function); y may be x.
void expF32(const float *x, float *y, int64_t n);

/// ReLU's gradient in f32: out[i] = dy[i] * (x[i] > 0 ? 1 : 0), branch-free
/// (an inf / NaN dy stays visible where x <= 0); out may be dy. x is the
/// ReLU's input or its output (the same mask).
void reluGradF32(const float *x, const float *dy, float *out, int64_t n);

/// n elements of type t widened to f32 / f32 narrowed to type t, exactly
/// as amprt_convert: short runs (a late layer's 2 x 2 planes) by the scalar
/// definitions inline, since a call and its checks cost more than the work
/// there; long ones by amprt_convert's vector paths (batch_norm.cpp).
void widenRun(const void *src, amprt_dtype t, float *dst, int64_t n);
void narrowRun(const float *src, void *dst, amprt_dtype t, int64_t n);

/// Plane nc (n elements) of a tensor of type t as f32: itself, or widened
/// into buf.
const float *planeF32(const amprt_tensor *t, int64_t nc, int64_t n, std::vector<float> &buf);
/// Where plane nc of t (n elements) is computed in f32: t itself, or buf
/// (then rounded into t, once, by storePlane).
float *outPlane(amprt_tensor *t, int64_t nc, int64_t n, std::vector<float> &buf);
void storePlane(amprt_tensor *t, int64_t nc, int64_t n, const float *f);

/// Direct 2-D depthwise convolutions (depthwise.cpp): group = x's channels,
/// w [C * M, 1, KH, KW]; operands of any float type, contiguous, computed
/// in f32 and rounded once. The caller has checked the shapes (convDims).
bool depthwiseDirectFits(const amprt_tensor *x, const amprt_tensor *w, const amprt_conv_params *p);
void depthwiseForward(const amprt_tensor *x, const amprt_tensor *w, const float *bias,
                      const amprt_conv_params *p, amprt_tensor *y);
void depthwiseBackwardData(const amprt_tensor *w, const amprt_tensor *dy,
                           const amprt_conv_params *p, amprt_tensor *dx);
void depthwiseWeightGrad(const amprt_tensor *x, const amprt_tensor *dy, const amprt_conv_params *p,
                         amprt_tensor *dw);

/// Next value of the context's generator (xorshift64*), uniform in [0, 1).
float nextUniform(amprt_context *ctx);

} // namespace amprt

#define AMPRT_CHECK(expr)                                                                          \
  do {                                                                                             \
    amprt_status s_ = (expr);                                                                      \
    if (s_ != AMPRT_OK)                                                                            \
      return s_;                                                                                   \
  } while (0)

#endif // AMPRT_LIB_INTERNAL_H
