/*===- amprt.h - the AMP-MLIR runtime C API ----------------------*- C -*-===*
 *
 * The runtime that compiled training steps call, and that tests, the Python
 * package and hand-written programs call the same way. Plain C, no MLIR.
 *
 *  - a context bound to a device ("cpu" now; "cuda" where built with CUDA);
 *  - tensors: pointer, element type, shape, strides (in elements; a stride
 *    of 0 broadcasts);
 *  - an arena allocator (one block, offsets planned by the compiler);
 *  - the kernel ABI: one function per op, element types in the tensor
 *    descriptors of each call;
 *  - the loss-scaling kernels, optimizer steps that read found_inf, gradient
 *    clipping;
 *  - checkpoints (safetensors) and metrics (JSON lines).
 *
 * Every function returns an amprt_status; on error amprt_last_error() holds
 * one message naming the kernel and the problem. Nothing aborts.
 *
 * Numerics: f16 / bf16 results are the correctly rounded (nearest even)
 * values of the f32 computation, exactly as a GPU stores them; matrix
 * products and convolutions on f16 / bf16 accumulate in f32; elementwise ops
 * on f16 / bf16 compute in f32 and round once.
 *
 *===----------------------------------------------------------------------===*/

#ifndef AMPRT_AMPRT_H
#define AMPRT_AMPRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*--- Types and errors -----------------------------------------------------*/

/* Element types, numbered as in the compiler's lowering. */
typedef enum amprt_dtype {
  AMPRT_F32 = 0,
  AMPRT_F16 = 1,
  AMPRT_BF16 = 2,
  AMPRT_I1 = 3, /* one byte per element, 0 or 1 */
  AMPRT_I8 = 4,
  AMPRT_I16 = 5,
  AMPRT_I32 = 6,
  AMPRT_I64 = 7,
  AMPRT_U8 = 8,
  AMPRT_U16 = 9,
  AMPRT_U32 = 10,
  AMPRT_U64 = 11,
  AMPRT_DTYPE_COUNT
} amprt_dtype;

/* Status codes. 0 is success; amprt_last_error() has the message. */
typedef enum amprt_status {
  AMPRT_OK = 0,
  AMPRT_ERR_INVALID_ARGUMENT = 1,
  AMPRT_ERR_UNSUPPORTED = 2,
  AMPRT_ERR_OUT_OF_MEMORY = 3,
  AMPRT_ERR_IO = 4,
  AMPRT_ERR_NO_DEVICE = 5,
  AMPRT_ERR_NUMERIC = 6,
  AMPRT_ERR_FORMAT = 7,
  AMPRT_ERR_DEVICE = 8, /* the device (CUDA) reported an error */
  AMPRT_ERR_COMM = 9    /* a collective of a data-parallel job failed or timed out */
} amprt_status;

/* The message of the last error on this thread ("" if none). */
const char *amprt_last_error(void);
/* Name of a status ("AMPRT_ERR_IO", ...). */
const char *amprt_status_name(amprt_status s);

/* Name ("f32", "bf16", ...) and size in bytes of an element type; NULL / 0
 * for an invalid value. */
const char *amprt_dtype_name(amprt_dtype t);
size_t amprt_dtype_size(amprt_dtype t);

/* This machine's physical memory in bytes (UINT64_MAX when unknown). */
uint64_t amprt_host_memory_bytes(void);
/* The memory this process can still take without swapping, in bytes: the
 * smallest of the physical memory, /proc/meminfo's MemAvailable and the
 * headroom under a cgroup v2 limit (memory.max - memory.current). What the
 * tools check a model's tensors against before allocating them: more ends
 * in the kernel's OOM killer, not in a message. */
uint64_t amprt_host_available_bytes(void);

/*--- Exact conversions ----------------------------------------------------*
 * Round to nearest, ties to even, as IEEE 754 and the GPU's cvt.rn do:
 * overflow gives inf, underflow the correctly rounded subnormal or a signed
 * zero. NaN stays NaN with its sign (quiet; f16: 0x7E00 | sign, bf16:
 * 0x7FC0 | sign). fp16 and bf16 values travel as their uint16_t bits. */
uint16_t amprt_f32_to_f16(float x);
float amprt_f16_to_f32(uint16_t h);
uint16_t amprt_f32_to_bf16(float x);
float amprt_bf16_to_f32(uint16_t b);

/* Converts n elements between any two float element types (f32, f16,
 * bf16), using the vector instructions this CPU has. */
amprt_status amprt_convert(const void *src, amprt_dtype src_type, void *dst, amprt_dtype dst_type,
                           size_t n);

#define AMPRT_MAX_RANK 8

typedef struct amprt_tensor {
  void *data;
  amprt_dtype dtype;
  int32_t rank;
  int64_t shape[AMPRT_MAX_RANK];
  int64_t strides[AMPRT_MAX_RANK]; /* in elements; 0 broadcasts */
} amprt_tensor;

/* A contiguous (row-major) descriptor. */
amprt_tensor amprt_tensor_make(void *data, amprt_dtype dtype, int32_t rank, const int64_t *shape);
int64_t amprt_tensor_numel(const amprt_tensor *t);
/* 1 when the strides are the row-major ones of the shape. */
int amprt_tensor_is_contiguous(const amprt_tensor *t);

/*--- Context, device, memory ----------------------------------------------*/

typedef struct amprt_context amprt_context;

/* device: "cpu", or "cuda" / "cuda:N": a context on a CUDA device, when the
 * program links libamprt_cuda (amp-compile --device cuda); AMPRT_ERR_NO_DEVICE
 * without a device or without that library. On a CUDA context amprt_exec
 * runs each op on the device, asynchronously, on the context's stream: a
 * descriptor's buffers are device memory (amprt_device_alloc, the arena),
 * except the compiled program's constants, which the context copies to the
 * device once, on first use. Errors a kernel finds (a label outside its
 * classes, an overflow at the scale's floor) are recorded on the device and
 * returned by the next amprt_device_synchronize. AMPRT_CUDA_EMULATE=1 runs a
 * CUDA context's kernels on the host, on host memory (the tests' way of
 * checking the CUDA executor where there is no GPU). */
amprt_status amprt_context_create(const char *device, amprt_context **out);
void amprt_context_destroy(amprt_context *ctx);
const char *amprt_context_device(const amprt_context *ctx);
/* Seeds the context's random generator (dropout). A CUDA context keeps the
 * state in device memory and its dropout kernels draw the CPU's sequence
 * (the same masks for the same state). */
void amprt_context_seed(amprt_context *ctx, uint64_t seed);
/* The generator state, for checkpoints (on a device: waits for it). */
uint64_t amprt_context_rng_state(const amprt_context *ctx);
void amprt_context_set_rng_state(amprt_context *ctx, uint64_t state);

/* Data parallel: the communicator of a job of `size` ranks (this process
 * is `rank`), filled in by a back-end (libamprt_mpi: amprt_mpi_comm_init).
 * Every function is collective: every rank calls it, in the same order.
 * sum_f32 / sum_f64 leave the sum of every rank's `data` on every rank,
 * bit-identical (reduced to rank 0 in one order, then broadcast); max_i64
 * the element-wise maximum; broadcast rank `root`'s bytes. They fail (an
 * error status and message) when a rank does not join within the back-end's
 * timeout instead of waiting forever. abort ends every rank of the job. */
typedef struct amprt_comm {
  int32_t rank, size;
  int32_t local_rank, local_size; /* among the ranks of this machine */
  void *impl;
  amprt_status (*sum_f32)(struct amprt_comm *c, float *data, int64_t count);
  amprt_status (*sum_f64)(struct amprt_comm *c, double *data, int64_t count);
  amprt_status (*max_i64)(struct amprt_comm *c, int64_t *data, int64_t count);
  amprt_status (*broadcast)(struct amprt_comm *c, void *data, int64_t bytes, int32_t root);
  void (*abort)(struct amprt_comm *c, int32_t code);
  void (*finalize)(struct amprt_comm *c);
  /* 2-byte floats (dtype AMPRT_BF16 or AMPRT_F16), each addition rounded to
   * the type once (--grad-comm bf16 / fp16); otherwise as sum_f32. */
  amprt_status (*sum_half)(struct amprt_comm *c, uint16_t *data, int64_t count, int32_t dtype);
  /* The sum of device memory (dtype AMPRT_F32, AMPRT_BF16 or AMPRT_F16) in
   * place on every rank, enqueued on `stream` (a cudaStream_t) without
   * waiting for it; null where the back-end has no device memory (MPI).
   * The NCCL back-end's (libamprt_nccl) calls it even on one rank. */
  amprt_status (*sum_device)(struct amprt_comm *c, void *data, int64_t count, int32_t dtype,
                             void *stream);
} amprt_comm;

/* The communicator amp.all_reduce uses (null: one rank, the inputs are the
 * results). The context does not own it. */
void amprt_context_set_comm(amprt_context *ctx, amprt_comm *comm);
amprt_comm *amprt_context_comm(const amprt_context *ctx);

/* The type gradients travel in between the ranks: AMPRT_F32 (the default),
 * AMPRT_BF16 or AMPRT_F16 (half the traffic; with a mean each rank's values
 * are divided by the number of ranks before they are rounded, so that the
 * sum overflows no sooner than the mean would; an overflow is an inf in
 * the result, which unscale_and_check after it catches). */
amprt_status amprt_context_set_comm_dtype(amprt_context *ctx, amprt_dtype dtype);

/* outs[i] = sum over the ranks of ins[i] (mean: / size), outs f32 (ins any
 * float type), travelling in the context's comm dtype; the inputs where the
 * context has no communicator or one rank (but the NCCL back-end's, which
 * runs on one rank too). One collective for all n tensors. */
amprt_status amprt_all_reduce(amprt_context *ctx, const amprt_tensor *ins, amprt_tensor *outs,
                              int32_t n, int32_t mean);

/* CPU features found at run time (bit set of AMPRT_CPU_*). */
enum {
  AMPRT_CPU_AVX2 = 1 << 0,
  AMPRT_CPU_F16C = 1 << 1,
  AMPRT_CPU_AVX512F = 1 << 2,
  AMPRT_CPU_AVX512_BF16 = 1 << 3,
  AMPRT_CPU_AVX512_FP16 = 1 << 4,
  AMPRT_CPU_AMX_BF16 = 1 << 5
};
uint32_t amprt_cpu_features(void);
/* "avx2 f16c avx512f avx512_bf16 ..." */
const char *amprt_cpu_features_string(void);

/* Memory of the context's device (host memory for "cpu"), and copies; kind
 * 0: host -> device, 1: device -> host (waits for the device's work queued
 * before it), 2: device -> device (overlapping ranges allowed), 3: either
 * side, told apart by the pointers (cudaMemcpyDefault; waits as kind 1).
 * Copies are ordered with the context's kernels. */
amprt_status amprt_device_alloc(amprt_context *ctx, size_t bytes, void **out);
void amprt_device_free(amprt_context *ctx, void *ptr);
amprt_status amprt_device_copy(amprt_context *ctx, void *dst, const void *src, size_t bytes,
                               int32_t kind);
/* Waits for the work queued on the context; returns the first error a
 * kernel recorded since the last call (and clears it). A warning recorded
 * (on_min_scale=warn) is printed to stderr once. */
amprt_status amprt_device_synchronize(amprt_context *ctx);
/* How many times the host has waited for the context's device so far
 * (synchronisations, reads back, synchronous copies); 0 for "cpu". */
int64_t amprt_device_sync_count(amprt_context *ctx);
/* CPU threads on a shared machine. Call once per training step (after it):
 * when other processes keep the cores busy (the process is preempted more
 * than AMPRT_BUSY_PREEMPTIONS times a second, 120 by default: in two
 * windows of at least 0.1 s in a row, or twice that in one), the CPU
 * kernels drop to one thread, since a kernel split over threads waits at
 * its end for a thread the scheduler took away; after a whole second with
 * under a third of that rate, they go back to all threads. Returns the
 * thread count the next step uses. Off when the user fixed the count
 * (OMP_NUM_THREADS) or with AMPRT_ADAPT_THREADS=0; AMPRT_ADAPT_THREADS=debug
 * prints each window's rate and decision to stderr. */
int32_t amprt_threads_adapt(void);

/* CUDA graphs: the ops amprt_exec receives between begin and end are
 * captured (not run) into a graph that amprt_graph_launch replays with the
 * same buffers, one launch for a whole training step. Everything an op sets
 * up on first use (constants' device copies, scratch memory, matrix-product
 * plans) must exist already: run the step once before capturing it. An
 * emulated context records the calls and replays them. AMPRT_ERR_UNSUPPORTED
 * on a "cpu" context. */
typedef struct amprt_graph amprt_graph;
amprt_status amprt_graph_begin(amprt_context *ctx);
amprt_status amprt_graph_end(amprt_context *ctx, amprt_graph **out);
amprt_status amprt_graph_launch(amprt_context *ctx, amprt_graph *graph);
void amprt_graph_destroy(amprt_context *ctx, amprt_graph *graph);
/* 1 for a context whose memory is the host's ("cpu"). */
int32_t amprt_context_on_host(const amprt_context *ctx);

/* One block of the context's device memory; the compiler's memory plan
 * places every intermediate at an offset in it. */
typedef struct amprt_arena amprt_arena;
amprt_status amprt_arena_create(amprt_context *ctx, size_t bytes, amprt_arena **out);
void amprt_arena_destroy(amprt_arena *arena);
void *amprt_arena_base(amprt_arena *arena);
size_t amprt_arena_size(const amprt_arena *arena);
/* base + offset, checked against the arena's size. */
amprt_status amprt_arena_at(amprt_arena *arena, size_t offset, size_t bytes, void **out);

/*--- Elementwise ----------------------------------------------------------*
 * Inputs broadcast to the output's shape (numpy rules). Float ops compute
 * in f32 (f64 for the reference tests' purposes is not used) and round
 * once to the output type. */

typedef enum amprt_unary_op {
  AMPRT_UNARY_IDENTITY = 0,
  AMPRT_UNARY_RELU,
  AMPRT_UNARY_SQRT,
  AMPRT_UNARY_EXP,
  AMPRT_UNARY_LOG,
  AMPRT_UNARY_ERF,
  AMPRT_UNARY_TANH,
  AMPRT_UNARY_SIGMOID,
  AMPRT_UNARY_GELU,       /* x * Phi(x), erf form */
  AMPRT_UNARY_GELU_TANH,  /* tanh approximation */
  AMPRT_UNARY_LEAKY_RELU, /* uses alpha */
  AMPRT_UNARY_ABS,
  AMPRT_UNARY_RECIPROCAL,   /* 1 / x */
  AMPRT_UNARY_SOFTPLUS,     /* log(1 + e^x) */
  AMPRT_UNARY_ELU,          /* x > 0 ? x : alpha (e^x - 1) */
  AMPRT_UNARY_CELU,         /* x > 0 ? x : alpha (e^(x / alpha) - 1) */
  AMPRT_UNARY_SELU,         /* beta * (x > 0 ? x : alpha (e^x - 1)) */
  AMPRT_UNARY_HARD_SIGMOID, /* max(0, min(1, alpha x + beta)) */
  AMPRT_UNARY_HARD_SWISH,   /* x * max(0, min(1, x / 6 + 1 / 2)) */
  AMPRT_UNARY_SOFTSIGN,     /* x / (1 + |x|) */
  AMPRT_UNARY_SIN,
  AMPRT_UNARY_COS,
  AMPRT_UNARY_FLOOR, /* FLOOR to SIGN: derivative 0 */
  AMPRT_UNARY_CEIL,
  AMPRT_UNARY_ROUND, /* half to even */
  AMPRT_UNARY_SIGN,
  AMPRT_UNARY_CLAMP,            /* min(max(x, alpha), beta); NaN stays NaN */
  AMPRT_UNARY_THRESHOLDED_RELU, /* x > alpha ? x : 0 (NaN kept) */
  AMPRT_UNARY_TAN,
  AMPRT_UNARY_ASIN,
  AMPRT_UNARY_ACOS,
  AMPRT_UNARY_ATAN,
  AMPRT_UNARY_SINH,
  AMPRT_UNARY_COSH,
  AMPRT_UNARY_ASINH,
  AMPRT_UNARY_ACOSH,
  AMPRT_UNARY_ATANH,
  AMPRT_UNARY_MISH /* x * tanh(softplus(x)) (ONNX Mish, torch.nn.Mish) */
} amprt_unary_op;
/* The last op: amprt_unary refuses larger ones. */
#define AMPRT_UNARY_LAST AMPRT_UNARY_MISH

typedef enum amprt_binary_op {
  AMPRT_BINARY_ADD = 0,
  AMPRT_BINARY_SUB,
  AMPRT_BINARY_MUL,
  AMPRT_BINARY_DIV,
  AMPRT_BINARY_POW,
  AMPRT_BINARY_MAX,
  AMPRT_BINARY_MIN,
  /* EQ .. XOR: y is i1 and a, b have one element type; floats compare in
   * f32 (a NaN is unequal to everything), integers in int64; AND / OR / XOR
   * read x != 0. */
  AMPRT_BINARY_EQ,
  AMPRT_BINARY_LT,
  AMPRT_BINARY_LE,
  AMPRT_BINARY_GT,
  AMPRT_BINARY_GE,
  AMPRT_BINARY_AND,
  AMPRT_BINARY_OR,
  AMPRT_BINARY_XOR,
  /* MOD: the remainder with the divisor's sign (Python's %, torch.remainder,
   * ONNX Mod fmod = 0); FMOD: with the dividend's (C fmod, torch.fmod).
   * An integer divisor of 0 is an error. */
  AMPRT_BINARY_MOD,
  AMPRT_BINARY_FMOD
} amprt_binary_op;
#define AMPRT_BINARY_LAST AMPRT_BINARY_FMOD

amprt_status amprt_unary(amprt_context *ctx, amprt_unary_op op, float alpha, const amprt_tensor *x,
                         amprt_tensor *y);
/* amprt_unary for the ops with a second parameter (SELU, HARD_SIGMOID,
 * CLAMP); amprt_unary passes beta = 0. */
amprt_status amprt_unary_ex(amprt_context *ctx, amprt_unary_op op, float alpha, float beta,
                            const amprt_tensor *x, amprt_tensor *y);
amprt_status amprt_binary(amprt_context *ctx, amprt_binary_op op, const amprt_tensor *a,
                          const amprt_tensor *b, amprt_tensor *y);
/* y = cond ? a : b (cond is i1). */
amprt_status amprt_where(amprt_context *ctx, const amprt_tensor *cond, const amprt_tensor *a,
                         const amprt_tensor *b, amprt_tensor *y);
/* Element type change with the rules of amp.cast: floats round to nearest
 * even, float -> int truncates toward zero, anything -> i1 is x != 0. */
amprt_status amprt_cast(amprt_context *ctx, const amprt_tensor *x, amprt_tensor *y);
/* Strided copy (transpose, expand, slice, reshape of contiguous data: the
 * caller describes the source view). Same element type. */
amprt_status amprt_copy(amprt_context *ctx, const amprt_tensor *x, amprt_tensor *y);
/* Concatenation along axis. */
amprt_status amprt_concat(amprt_context *ctx, const amprt_tensor *inputs, int32_t count,
                          int32_t axis, amprt_tensor *y);
/* ONNX Gather along axis; indices i32 / i64, negative counts from the end,
 * out of range is AMPRT_ERR_INVALID_ARGUMENT. */
amprt_status amprt_gather(amprt_context *ctx, const amprt_tensor *data, const amprt_tensor *indices,
                          int32_t axis, amprt_tensor *y);
/* Inverted dropout: y = x * mask / (1 - ratio), mask drawn from the
 * context's generator (or all ones when ratio == 0). mask may be NULL. */
amprt_status amprt_dropout(amprt_context *ctx, const amprt_tensor *x, float ratio, amprt_tensor *y,
                           amprt_tensor *mask);
/* Random numbers from the context's generator, in y's row-major order
 * (y contiguous, a float type): AMPRT_RANDOM_UNIFORM a + (b - a) * u with u
 * uniform in [0, 1) (one draw per element); AMPRT_RANDOM_NORMAL a + b * z,
 * z standard normal (Box-Muller, two draws per element); AMPRT_RANDOM_BERNOULLI
 * 1 with probability p (p of y's shape, in [0, 1]; one draw per element),
 * else 0. The values are computed in double, rounded to f32, then to y's type. */
typedef enum amprt_random_kind {
  AMPRT_RANDOM_UNIFORM = 0,
  AMPRT_RANDOM_NORMAL = 1,
  AMPRT_RANDOM_BERNOULLI = 2
} amprt_random_kind;
amprt_status amprt_random(amprt_context *ctx, int32_t kind, double a, double b,
                          const amprt_tensor *p, amprt_tensor *y);

/*--- Reductions and normalisation -----------------------------------------*
 * Reductions accumulate in f32 (f16 / bf16 inputs) and round once. `axes`
 * lists the reduced dims of x (normalised, ascending); y has x's rank with
 * those dims of size 1 (keepdims form: callers reshape), and x's type, or
 * f32 for an f16 / bf16 x (the f32 result, not rounded to x's type). */

typedef enum amprt_reduce_op {
  AMPRT_REDUCE_SUM = 0,
  AMPRT_REDUCE_MEAN,
  AMPRT_REDUCE_MAX,
  AMPRT_REDUCE_PROD /* in double (floats), int64 wrapping (integers) */
} amprt_reduce_op;

amprt_status amprt_reduce(amprt_context *ctx, amprt_reduce_op op, const amprt_tensor *x,
                          const int32_t *axes, int32_t naxes, amprt_tensor *y);
/* Softmax / log-softmax along one axis, computed in f32. */
amprt_status amprt_softmax(amprt_context *ctx, const amprt_tensor *x, int32_t axis, int log,
                           amprt_tensor *y);
/* Layer norm over the dims from `axis` on; mean and inv_std_dev are f32 with
 * shape x[:axis] (+ ones). scale / bias broadcast to x[axis:]; bias may be
 * NULL. */
amprt_status amprt_layer_norm(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *scale,
                              const amprt_tensor *bias, int32_t axis, float epsilon,
                              amprt_tensor *y, amprt_tensor *mean, amprt_tensor *inv_std_dev);
/* Batch norm over [N, C, ...]. Training: normalise with the batch
 * statistics (biased variance), write running_mean / running_var as
 * momentum * old + (1 - momentum) * batch, with the biased batch variance
 * as ONNX's BatchNormalization defines it (PyTorch's nn.BatchNorm uses the
 * unbiased one for its running estimate), and the batch mean / inverse std
 * (f32, [C]) for the backward pass when save_mean / save_inv_std are not
 * NULL. Inference: normalise
 * with mean / var, running outputs are copies. */
amprt_status amprt_batch_norm(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *scale,
                              const amprt_tensor *bias, const amprt_tensor *mean,
                              const amprt_tensor *var, float epsilon, float momentum, int training,
                              amprt_tensor *y, amprt_tensor *running_mean,
                              amprt_tensor *running_var, amprt_tensor *save_mean,
                              amprt_tensor *save_inv_std);
/* amprt_batch_norm with AMPRT_BN_* flags: AMPRT_BN_RELU writes relu(y)
 * (max(y, 0), NaN kept, as AMPRT_UNARY_RELU): a batch norm and the ReLU that
 * reads it in one pass, y never stored. */
enum { AMPRT_BN_RELU = 1 };
amprt_status amprt_batch_norm_ex(amprt_context *ctx, const amprt_tensor *x,
                                 const amprt_tensor *scale, const amprt_tensor *bias,
                                 const amprt_tensor *mean, const amprt_tensor *var, float epsilon,
                                 float momentum, int training, int32_t flags, amprt_tensor *y,
                                 amprt_tensor *running_mean, amprt_tensor *running_var,
                                 amprt_tensor *save_mean, amprt_tensor *save_inv_std);

/*--- Matrix products and convolution ----------------------------------------*
 * f32 / f16 / bf16 inputs (a and b of one type), f32 accumulation, output in
 * the output tensor's type (rounded once). oneDNN does the work (AMX /
 * AVX512-BF16 for bf16 where the CPU has them). */

/* y = alpha * op(a) @ op(b) + beta * c, a / b 2-D, c broadcast to [M, N]
 * (may be NULL). */
amprt_status amprt_gemm(amprt_context *ctx, const amprt_tensor *a, const amprt_tensor *b,
                        const amprt_tensor *c, float alpha, float beta, int trans_a, int trans_b,
                        amprt_tensor *y);
/* amprt_gemm, then y = max(y, 0) (NaN kept) when flags has AMPRT_GEMM_RELU:
 * in one pass where no NaN can arise, else in place after the product. */
enum { AMPRT_GEMM_RELU = 1 };
amprt_status amprt_gemm_ex(amprt_context *ctx, const amprt_tensor *a, const amprt_tensor *b,
                           const amprt_tensor *c, float alpha, float beta, int trans_a, int trans_b,
                           int32_t flags, amprt_tensor *y);
/* numpy matmul: batch dims broadcast, 1-D operands promoted. */
amprt_status amprt_matmul(amprt_context *ctx, const amprt_tensor *a, const amprt_tensor *b,
                          amprt_tensor *y);

typedef struct amprt_conv_params {
  int32_t spatial; /* number of spatial dims, 1 to 3 */
  int64_t strides[3], dilations[3];
  int64_t pads_begin[3], pads_end[3];
  int64_t group;
} amprt_conv_params;

/* y = conv(x, w) + bias; x [N, C, D...], w [M, C/group, K...], bias [M]
 * or NULL. */
amprt_status amprt_conv(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *w,
                        const amprt_tensor *bias, const amprt_conv_params *p, amprt_tensor *y);
/* Gradients of amprt_conv: dx and / or dw and / or db (NULL to skip). */
amprt_status amprt_conv_backward(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *w,
                                 const amprt_tensor *dy, const amprt_conv_params *p,
                                 amprt_tensor *dx, amprt_tensor *dw, amprt_tensor *db);

typedef struct amprt_pool_params {
  int32_t spatial;
  int64_t kernel[3], strides[3], dilations[3];
  int64_t pads_begin[3], pads_end[3];
  int32_t count_include_pad; /* average pooling */
  int32_t storage_order;     /* max pooling indices: 0 row-major, 1 column-major */
} amprt_pool_params;

/* Max pooling; indices (i64, may be NULL) are flat positions in x, as
 * ONNX's MaxPool Indices output: row-major, or with storage_order 1 the
 * spatial dims in column-major order. amprt_max_pool_grad reads row-major
 * indices only. */
amprt_status amprt_max_pool(amprt_context *ctx, const amprt_tensor *x, const amprt_pool_params *p,
                            amprt_tensor *y, amprt_tensor *indices);
amprt_status amprt_average_pool(amprt_context *ctx, const amprt_tensor *x,
                                const amprt_pool_params *p, amprt_tensor *y);

/*--- Channel-blocked layout --------------------------------------------------*
 * An f32 [N, C, H, W] tensor may be stored channel-blocked, as oneDNN's
 * nChw8c / nChw16c: [N, C/B, H, W, B] with B = amprt_channel_block() (16
 * where the CPU runs oneDNN's AVX-512 kernels, else 8) and C a multiple of
 * B. The tensor's shape stays the logical [N, C, H, W]; only these entry
 * points read or write the blocked bytes. The compiler keeps a chain of
 * convolution -> element-wise / max pool -> convolution or global average
 * pool in this layout, so that no reorder runs between them. Element-wise
 * kernels do not care about the layout. */
int32_t amprt_channel_block(void);

enum {
  AMPRT_CONV_RELU = 1,        /* y = max(conv(x, w) + bias, 0), in one pass */
  AMPRT_CONV_SRC_BLOCKED = 2, /* x is channel-blocked */
  AMPRT_CONV_DST_BLOCKED = 4  /* y is written channel-blocked */
};
/* amprt_conv with AMPRT_CONV_* flags (blocked layouts: f32, 2 spatial dims). */
amprt_status amprt_conv_ex(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *w,
                           const amprt_tensor *bias, const amprt_conv_params *p, int32_t flags,
                           amprt_tensor *y);
/* Max pooling (no indices) of a channel-blocked x into a channel-blocked y,
 * with block size `block`; the same comparisons as amprt_max_pool. */
amprt_status amprt_max_pool_blocked(amprt_context *ctx, const amprt_tensor *x,
                                    const amprt_pool_params *p, int32_t block, amprt_tensor *y);
/* The mean over H and W of a channel-blocked x [N, C, H, W] into a plain y
 * with N * C elements ([N, C, 1, 1] or [N, C]). */
amprt_status amprt_global_average_pool_blocked(amprt_context *ctx, const amprt_tensor *x,
                                               int32_t block, amprt_tensor *y);

/*--- Losses ------------------------------------------------------------------*
 * scores [N, C, D...] (f32 / f16 / bf16; computed in f32), labels [N, D...]
 * i32 / i64, weights [C] or NULL, ignore_index used when has_ignore_index.
 * reduction: 0 none, 1 sum, 2 mean (weighted mean over non-ignored). */

typedef enum amprt_reduction {
  AMPRT_REDUCTION_NONE = 0,
  AMPRT_REDUCTION_SUM = 1,
  AMPRT_REDUCTION_MEAN = 2
} amprt_reduction;

amprt_status amprt_softmax_cross_entropy(amprt_context *ctx, const amprt_tensor *scores,
                                         const amprt_tensor *labels, const amprt_tensor *weights,
                                         amprt_reduction reduction, int has_ignore_index,
                                         int64_t ignore_index, amprt_tensor *loss,
                                         amprt_tensor *log_prob);
amprt_status amprt_nll_loss(amprt_context *ctx, const amprt_tensor *log_prob,
                            const amprt_tensor *labels, const amprt_tensor *weights,
                            amprt_reduction reduction, int has_ignore_index, int64_t ignore_index,
                            amprt_tensor *loss);

/*--- Backward kernels ------------------------------------------------------*/

/* dx = dy * f'(x) for every amprt_unary_op (PyTorch's derivative where a
 * kink has two: relu 0 at 0, leaky_relu alpha at 0, elu alpha at 0, clamp
 * 0 at its bounds, hard_sigmoid 0 at its corners, hard_swish 0 at -3 and 1
 * at 3); x is the forward input. */
amprt_status amprt_unary_grad(amprt_context *ctx, amprt_unary_op op, float alpha,
                              const amprt_tensor *x, const amprt_tensor *dy, amprt_tensor *dx);
amprt_status amprt_unary_grad_ex(amprt_context *ctx, amprt_unary_op op, float alpha, float beta,
                                 const amprt_tensor *x, const amprt_tensor *dy, amprt_tensor *dx);
/* From the forward output y: dx = y * (dy - sum(dy * y)) (softmax) or
 * dy - exp(y) * sum(dy) (log-softmax). */
amprt_status amprt_softmax_grad(amprt_context *ctx, const amprt_tensor *y, const amprt_tensor *dy,
                                int32_t axis, int log, amprt_tensor *dx);
amprt_status amprt_layer_norm_grad(amprt_context *ctx, const amprt_tensor *x,
                                   const amprt_tensor *scale, const amprt_tensor *mean,
                                   const amprt_tensor *inv_std_dev, const amprt_tensor *dy,
                                   int32_t axis, amprt_tensor *dx, amprt_tensor *dscale,
                                   amprt_tensor *dbias);
/* Training-mode batch norm backward from the saved batch statistics. */
amprt_status amprt_batch_norm_grad(amprt_context *ctx, const amprt_tensor *x,
                                   const amprt_tensor *scale, const amprt_tensor *save_mean,
                                   const amprt_tensor *save_inv_std, const amprt_tensor *dy,
                                   amprt_tensor *dx, amprt_tensor *dscale, amprt_tensor *dbias);
/* The same, from the batch statistics recomputed from x (the forward op's
 * own are not kept); dx / dscale / dbias may be NULL. */
amprt_status amprt_batch_norm_grad_recompute(amprt_context *ctx, const amprt_tensor *x,
                                             const amprt_tensor *scale, const amprt_tensor *dy,
                                             float epsilon, amprt_tensor *dx, amprt_tensor *dscale,
                                             amprt_tensor *dbias);
/* amprt_batch_norm_grad_recompute for a batch norm whose output a ReLU
 * reads: dz is the gradient of the ReLU's output, z the ReLU's input or
 * output (the same mask); the batch norm's dy = dz * (z > 0 ? 1 : 0), as
 * amprt_unary_grad's ReLU computes it, is never stored. */
amprt_status amprt_batch_norm_relu_grad_recompute(amprt_context *ctx, const amprt_tensor *x,
                                                  const amprt_tensor *scale, const amprt_tensor *z,
                                                  const amprt_tensor *dz, float epsilon,
                                                  amprt_tensor *dx, amprt_tensor *dscale,
                                                  amprt_tensor *dbias);
amprt_status amprt_max_pool_grad(amprt_context *ctx, const amprt_tensor *dy,
                                 const amprt_tensor *indices, amprt_tensor *dx);
amprt_status amprt_average_pool_grad(amprt_context *ctx, const amprt_tensor *dy,
                                     const amprt_pool_params *p, amprt_tensor *dx);
/* Gradient of the loss w.r.t. the scores, scaled by dloss (a scalar for
 * sum / mean, [N, D...] for none). */
amprt_status amprt_softmax_cross_entropy_grad(amprt_context *ctx, const amprt_tensor *log_prob,
                                              const amprt_tensor *labels,
                                              const amprt_tensor *weights,
                                              amprt_reduction reduction, int has_ignore_index,
                                              int64_t ignore_index, const amprt_tensor *dloss,
                                              amprt_tensor *dscores);
amprt_status amprt_nll_loss_grad(amprt_context *ctx, const amprt_tensor *labels,
                                 const amprt_tensor *weights, amprt_reduction reduction,
                                 int has_ignore_index, int64_t ignore_index,
                                 const amprt_tensor *dloss, amprt_tensor *dinput);
/* Gradient of amprt_gather for its data: ddata = 0, then each dy slice is
 * added at the row (along `axis`) its index names; negative indices count
 * from the end; sums accumulate in f32. */
amprt_status amprt_gather_grad(amprt_context *ctx, const amprt_tensor *indices,
                               const amprt_tensor *dy, int32_t axis, amprt_tensor *ddata);
/* ONNX GatherElements / torch.gather: y and indices share a shape (data's
 * rank; on the other dims no larger than data's), y[..., i, ...] =
 * data[..., indices[..., i, ...], ...] along `axis`. Negative indices count
 * from the end; one out of range is an error. */
amprt_status amprt_gather_elements(amprt_context *ctx, const amprt_tensor *data,
                                   const amprt_tensor *indices, int32_t axis, amprt_tensor *y);
/* Its gradient for data: ddata = 0, then dy added where each element was
 * read (an element read twice gets both); sums accumulate in f32. */
amprt_status amprt_gather_elements_grad(amprt_context *ctx, const amprt_tensor *indices,
                                        const amprt_tensor *dy, int32_t axis, amprt_tensor *ddata);
/* ONNX ArgMax / ArgMin along `axis`: y (int64, x's shape with the axis 1)
 * holds the index of the largest (min: smallest) value, the first of equal
 * ones (the last with select_last); a NaN counts as the extreme, as numpy
 * and torch have it. */
amprt_status amprt_arg_reduce(amprt_context *ctx, const amprt_tensor *x, int32_t axis, int min,
                              int select_last, amprt_tensor *y);
/* ONNX CumSum along `axis` (exclusive: without the element itself; reverse:
 * from the end); floats accumulate in f32 and round each output once,
 * integers in int64 (wrapping). */
/* ONNX TopK / torch.topk along `axis` (float x): values and indices (i64,
 * x's shape with the axis k) of the k largest (or smallest) elements,
 * sorted; equal values in index order; a NaN counts as larger than any
 * number. */
amprt_status amprt_topk(amprt_context *ctx, const amprt_tensor *x, int32_t axis, int largest,
                        amprt_tensor *values, amprt_tensor *indices);
/* ONNX GridSample / torch grid_sample, 2-D: y [N, C, Ho, Wo] samples x
 * [N, C, H, W] at grid [N, Ho, Wo, 2] ((x, y) in [-1, 1]); mode 0 bilinear,
 * 1 nearest, 2 bicubic; padding 0 zeros, 1 border, 2 reflection; PyTorch's
 * taps and weights, sums in f32. The gradient gives dx (summed in f32)
 * and / or dgrid (NULL to skip). */
amprt_status amprt_grid_sample(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *grid,
                               int mode, int padding, int align_corners, amprt_tensor *y);
amprt_status amprt_grid_sample_grad(amprt_context *ctx, const amprt_tensor *x,
                                    const amprt_tensor *grid, const amprt_tensor *dy, int mode,
                                    int padding, int align_corners, amprt_tensor *dx,
                                    amprt_tensor *dgrid);
amprt_status amprt_cumsum(amprt_context *ctx, const amprt_tensor *x, int32_t axis, int exclusive,
                          int reverse, amprt_tensor *y);
/* Gradient of a max reduction (torch.amax's): y and dy have x's rank with
 * the reduced dims as 1; dx = dy / count where x == y (count: how many
 * elements of the slot equal its maximum), else 0. */
amprt_status amprt_reduce_max_grad(amprt_context *ctx, const amprt_tensor *x, const amprt_tensor *y,
                                   const amprt_tensor *dy, amprt_tensor *dx);
/* Sums `dy` down to `dx`'s shape (the gradient of a broadcast). */
amprt_status amprt_reduce_to(amprt_context *ctx, const amprt_tensor *dy, amprt_tensor *dx);

/*--- Loss scaling (docs/semantics.md section 3) ------------------------------*/

/* For each of the n gradient tensors: out[i] = f32(grads[i]) * inv_scale,
 * where inv_scale = (float)(1.0 / (double)*scale) is computed here, and
 * *found_inf (f32 scalar) is set to 1.0 if any value of any input is inf or
 * NaN (it is never reset here: callers zero it, as PyTorch does). outs[i]
 * may alias grads[i] when both are f32. One pass over all tensors. */
amprt_status amprt_unscale_and_check(amprt_context *ctx, const amprt_tensor *grads,
                                     amprt_tensor *outs, int32_t n, const float *scale,
                                     float *found_inf);

typedef struct amprt_scaler_config {
  float growth_factor;     /* 2.0 */
  float backoff_factor;    /* 0.5 */
  int32_t growth_interval; /* 2000 */
  int32_t hysteresis;      /* 1 = PyTorch; DeepSpeed / Megatron use 2 */
  float min_scale;         /* 0 = no floor */
} amprt_scaler_config;

typedef struct amprt_scaler_state {
  float scale;
  int32_t growth_tracker;  /* clean steps since the last change */
  int32_t hysteresis_left; /* overflows still tolerated before backoff */
  int32_t at_min_scale;    /* 1 when the last update hit min_scale */
} amprt_scaler_state;

/* The default configuration and a state at init_scale. */
amprt_scaler_config amprt_scaler_default_config(void);
amprt_scaler_state amprt_scaler_init(const amprt_scaler_config *cfg, float init_scale);

/* PyTorch's _amp_update_scale_ with DeepSpeed's hysteresis and a floor:
 *   found_inf != 0: while hysteresis_left > 1 it is decremented (the
 *     overflow is tolerated); otherwise scale = max(scale * backoff,
 *     min_scale). growth_tracker = 0 either way (DeepSpeed's
 *     DynamicLossScaler: hysteresis_left is restored only by growth);
 *   else: growth_tracker += 1; when it reaches growth_interval: scale *=
 *     growth_factor if the result is finite; growth_tracker = 0 (and, as
 *     DeepSpeed, hysteresis_left is restored).
 * found_inf is tested as != 0. Returns AMPRT_ERR_NUMERIC when the scale
 * reached min_scale on this update (the state is still updated; callers
 * decide whether that is fatal). */
amprt_status amprt_update_scale(amprt_context *ctx, const amprt_scaler_config *cfg,
                                amprt_scaler_state *state, float found_inf);

/* Global L2 norm of the (unscaled) gradients, computed in double; when it
 * exceeds max_norm every gradient is multiplied by max_norm / (norm + 1e-6)
 * (PyTorch's clip_grad_norm_). Skipped (norm still reported) when found_inf
 * != 0. */
amprt_status amprt_clip_grad_norm(amprt_context *ctx, amprt_tensor *grads, int32_t n,
                                  float max_norm, float found_inf, float *total_norm);

/*--- Optimizer steps --------------------------------------------------------*
 * Parameters and moments are f32; gradients f32. When found_inf != 0 the
 * step changes nothing: parameters, moments and the step counter stay
 * bit-identical. */

typedef struct amprt_sgd_config {
  float lr, momentum, dampening, weight_decay;
  int32_t nesterov;
} amprt_sgd_config;

/* PyTorch SGD: g += wd * p; with momentum: buf = g on the first step (step
 * == 0), else buf = momentum * buf + (1 - dampening) * g; g = nesterov ? g
 * + momentum * buf : buf; p -= lr * g. momentum_buf may be NULL when
 * momentum == 0. *step counts applied steps. */
amprt_status amprt_sgd_step(amprt_context *ctx, const amprt_sgd_config *cfg, amprt_tensor *param,
                            const amprt_tensor *grad, amprt_tensor *momentum_buf,
                            const int64_t *step, float found_inf);

typedef struct amprt_adam_config {
  float lr, beta1, beta2, eps, weight_decay;
  int32_t decoupled; /* 1: AdamW (p *= 1 - lr * wd), 0: Adam (g += wd * p),
                       2: Hugging Face's AdamW (see below) */
} amprt_adam_config;

/* Adam / AdamW with bias correction (PyTorch's formulas, step counted from
 * 1): m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t)
 * * m / (sqrt(v) / sqrt(1 - b2^t) + eps); t = *step + 1.
 * decoupled == 2 is Hugging Face's AdamW (onnxruntime-training's adam_mode
 * 1), in f32 as ORT computes it: lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t)
 * (the powers in double, rounded to f32); m = b1 m + (1 - b1) g; v = b2 v +
 * (1 - b2) g^2; p -= lr_t * m / (sqrt(v) + eps); p -= lr * wd * p. */
amprt_status amprt_adam_step(amprt_context *ctx, const amprt_adam_config *cfg, amprt_tensor *param,
                             const amprt_tensor *grad, amprt_tensor *exp_avg,
                             amprt_tensor *exp_avg_sq, const int64_t *step, float found_inf);

/* *step += 1 unless found_inf != 0 (the one place the counter moves). */
amprt_status amprt_step_count(amprt_context *ctx, int64_t *step, float found_inf);

/*--- Compiled code ---------------------------------------------------------*
 * Code generated by amp-lower-to-runtime runs each op as one call
 *   amprt_exec(ctx, desc, bufs)
 * where desc is a constant descriptor the compiler emitted:
 *   [AMPRT_EXEC_VERSION, opcode, ntensors, nattrs,
 *    per tensor: dtype, rank, element offset, shape[rank], strides[rank],
 *    attrs[nattrs]]            (float attributes as f64 bit patterns)
 * or, with AMPRT_EXEC_VERSION_NAMED first, the same followed by the op's
 * name (its ONNX node; what the compiler emits):
 *    name_bytes, name (bytes packed little-endian into ceil(name_bytes / 8)
 *    words, no terminator)
 * and bufs[k] is the base pointer of tensor k (an arena slot, an argument,
 * a constant). Returns an amprt_status; a failing call's message (see
 * amprt_last_error) starts with "node '<name>': " when the descriptor has
 * a name. */

/* The opcodes and each descriptor's attributes and tensors, in order:
 * amprt/amprt_ops.def (one table; amprt/amprt_ops.hpp has the typed
 * attribute structs and their encoder, for C++). */

#define AMPRT_EXEC_VERSION 1
#define AMPRT_EXEC_VERSION_NAMED 2

typedef enum amprt_opcode {
#define AMPRT_OPCODE(NAME, VALUE, name, fields, ntensors, tensors, notes) AMPRT_OP_##NAME = VALUE,
#include "amprt/amprt_ops.def"
#undef AMPRT_OPCODE
} amprt_opcode;

int32_t amprt_exec(amprt_context *ctx, const int64_t *desc, void **bufs);

/* The opcode's name ("gemm", "softmax_grad"; "?" for an unknown one), as
 * AMPRT_PROFILE and amprt-exec-replay print it. */
const char *amprt_opcode_name(int64_t opcode);

#ifdef __cplusplus
}
#endif

/* Checkpoints, .npy / .npz arrays and metrics: amprt_io.h, part of this API. */
#include "amprt/amprt_io.h"

#endif /* AMPRT_AMPRT_H */
