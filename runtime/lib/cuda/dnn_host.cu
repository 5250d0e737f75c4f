//===- dnn_host.cu - cuDNN's convolutions on the host, for emulation --------===//
//
// See dnn_host.h.
//
//===----------------------------------------------------------------------===//

#include "dnn_host.h"

#include "device.cuh"
#include "host_library.h"

#ifdef AMPRT_HAVE_CUDNN

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace amprt::cuda {

namespace {

using host::as;
using host::refuse;

constexpr cudnnStatus_t kBad = CUDNN_STATUS_BAD_PARAM;
constexpr cudnnStatus_t kUnsupported = CUDNN_STATUS_NOT_SUPPORTED;
constexpr uint64_t kHandleMagic = 0x616d702d646e680aull, kTensorMagic = 0x616d702d646e740aull,
                   kFilterMagic = 0x616d702d646e660aull, kConvMagic = 0x616d702d646e630aull;
constexpr size_t kAlgo1Work = 1024;

struct Handle : host::Handle<HostDnnOptions> {
  Handle() : host::Handle<HostDnnOptions>(kHandleMagic) {}
};

struct Tensor {
  uint64_t magic = kTensorMagic;
  bool set = false;
  int32_t type = 0, nb = 0;
  int dims[8] = {}, strides[8] = {};
};

struct Filter {
  uint64_t magic = kFilterMagic;
  bool set = false;
  int32_t type = 0, format = 0, nb = 0;
  int dims[8] = {};
};

struct Conv {
  uint64_t magic = kConvMagic;
  bool set = false;
  int32_t nd = 0, mode = 0, compute = 0, groups = 1, math = CUDNN_DEFAULT_MATH;
  int pad[6] = {}, stride[6] = {}, dil[6] = {};
};

int32_t amprtType(int32_t t) {
  return t == CUDNN_DATA_FLOAT      ? AMPRT_F32
         : t == CUDNN_DATA_HALF     ? AMPRT_F16
         : t == CUDNN_DATA_BFLOAT16 ? AMPRT_BF16
                                    : -1;
}

/// A convolution problem as the descriptors give it (spatial dims padded
/// to three with ones).
struct Problem {
  int64_t n = 0, c = 0, m = 0, g = 1, nd = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1},
          d[3] = {1, 1, 1}, p[3] = {0, 0, 0};
  int32_t type = 0; // amprt
  int64_t xElems() const { return n * c * in[0] * in[1] * in[2]; }
  int64_t yElems() const { return n * m * out[0] * out[1] * out[2]; }
  int64_t wElems() const { return m * (c / g) * k[0] * k[1] * k[2]; }
};

cudnnStatus_t checkTensor(const Tensor *t, const char *name) {
  if (!t || !t->set)
    return refuse(kBad, "%s: not a tensor descriptor set by cudnnSetTensorNdDescriptor", name);
  int64_t packed = 1;
  for (int i = t->nb - 1; i >= 0; --i) {
    if (t->strides[i] != packed)
      return refuse(kUnsupported,
                    "%s: strides not packed NCHW (dim %d stride %d, packed %lld; only packed "
                    "tensors are implemented here)",
                    name, i, t->strides[i], (long long)packed);
    packed *= t->dims[i];
  }
  return CUDNN_STATUS_SUCCESS;
}

/// The problem of x, w, conv, y, checked against each other.
cudnnStatus_t problemOf(const Tensor *x, const Filter *w, const Conv *cv, const Tensor *y,
                        Problem &p) {
  if (cudnnStatus_t st = checkTensor(x, "x"))
    return st;
  if (cudnnStatus_t st = checkTensor(y, "y"))
    return st;
  if (!w || !w->set)
    return refuse(kBad, "not a filter descriptor set by cudnnSetFilterNdDescriptor");
  if (!cv || !cv->set)
    return refuse(kBad, "not a convolution descriptor set by cudnnSetConvolutionNdDescriptor");
  if (x->nb != w->nb || x->nb != y->nb || cv->nd != x->nb - 2)
    return refuse(kBad, "ranks differ: x %d, w %d, y %d, convolution %d spatial dims", x->nb, w->nb,
                  y->nb, cv->nd);
  if (w->format != CUDNN_TENSOR_NCHW)
    return refuse(kUnsupported, "filter format %d (only CUDNN_TENSOR_NCHW here)", w->format);
  if (cv->mode != CUDNN_CROSS_CORRELATION)
    return refuse(kUnsupported, "mode %d (only CUDNN_CROSS_CORRELATION here)", cv->mode);
  if (x->type != w->type || x->type != y->type)
    return refuse(kUnsupported, "data types x %d, w %d, y %d differ", x->type, w->type, y->type);
  if (amprtType(x->type) < 0 || cv->compute != CUDNN_DATA_FLOAT)
    return refuse(kUnsupported,
                  "data type %d with compute type %d: only float, half and bfloat16 data with "
                  "float compute (the pseudo configurations) are implemented here",
                  x->type, cv->compute);
  p.type = amprtType(x->type);
  p.n = x->dims[0];
  p.c = x->dims[1];
  p.m = w->dims[0];
  p.g = cv->groups;
  p.nd = cv->nd;
  if (p.g < 1 || p.c % p.g || p.m % p.g || w->dims[1] * p.g != p.c)
    return refuse(kBad,
                  "x has %lld channels, the filter %d per group of %lld groups and %lld outputs",
                  (long long)p.c, w->dims[1], (long long)p.g, (long long)p.m);
  if (y->dims[0] != p.n || y->dims[1] != p.m)
    return refuse(kBad, "y is [%d, %d, ...], expected [%lld, %lld, ...]", y->dims[0], y->dims[1],
                  (long long)p.n, (long long)p.m);
  for (int i = 0; i < cv->nd; ++i) {
    p.in[i] = x->dims[2 + i];
    p.k[i] = w->dims[2 + i];
    p.s[i] = cv->stride[i];
    p.d[i] = cv->dil[i];
    p.p[i] = cv->pad[i];
    int64_t span = (p.k[i] - 1) * p.d[i] + 1, o = (p.in[i] + 2 * p.p[i] - span) / p.s[i] + 1;
    if (p.in[i] + 2 * p.p[i] < span || o < 1)
      return refuse(kBad, "spatial dim %d: the window (%lld) is larger than the padded input", i,
                    (long long)span);
    if (y->dims[2 + i] != o)
      return refuse(kBad, "y's spatial dim %d is %d, the convolution's output %lld", i,
                    y->dims[2 + i], (long long)o);
    p.out[i] = o;
  }
  return CUDNN_STATUS_SUCCESS;
}

/// The convolution in double over float copies of the operands, per batch
/// item, output position and group: the window's inputs gathered into a
/// column (zeros outside), then contiguous dot products (forward), axpys
/// into the column's gradient (data) or into the filter's gradient rows
/// (filter).
enum Kind { kFwd, kBwdData, kBwdFilter };

void compute(const Problem &p, Kind kind, const std::vector<float> &x, const std::vector<float> &w,
             const std::vector<float> &y, std::vector<double> &acc) {
  int64_t cg = p.c / p.g, mg = p.m / p.g, inPlane = p.in[0] * p.in[1] * p.in[2],
          outPlane = p.out[0] * p.out[1] * p.out[2], kPlane = p.k[0] * p.k[1] * p.k[2],
          len = cg * kPlane;
  std::vector<int64_t> at((size_t)kPlane); // input position of each window position (-1 outside)
  std::vector<double> col((size_t)len), colGrad((size_t)len);
  for (int64_t o = 0; o < outPlane; ++o) {
    int64_t oi[3] = {o / (p.out[1] * p.out[2]), (o / p.out[2]) % p.out[1], o % p.out[2]};
    for (int64_t kp = 0; kp < kPlane; ++kp) {
      int64_t ki[3] = {kp / (p.k[1] * p.k[2]), (kp / p.k[2]) % p.k[1], kp % p.k[2]};
      int64_t in = 0;
      bool inside = true;
      for (int dd = 0; dd < 3 && inside; ++dd) {
        int64_t i = oi[dd] * p.s[dd] - p.p[dd] + ki[dd] * p.d[dd];
        inside = i >= 0 && i < p.in[dd];
        in = in * p.in[dd] + i;
      }
      at[(size_t)kp] = inside ? in : -1;
    }
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t grp = 0; grp < p.g; ++grp) {
        const float *xg = x.data() + (n * p.c + grp * cg) * inPlane;
        if (kind != kBwdData)
          for (int64_t cc = 0; cc < cg; ++cc)
            for (int64_t kp = 0; kp < kPlane; ++kp)
              col[(size_t)(cc * kPlane + kp)] =
                  at[(size_t)kp] < 0 ? 0.0 : xg[cc * inPlane + at[(size_t)kp]];
        else
          std::fill(colGrad.begin(), colGrad.end(), 0.0);
        for (int64_t m = grp * mg; m < (grp + 1) * mg; ++m) {
          const float *wm = w.data() + m * len;
          int64_t yi = (n * p.m + m) * outPlane + o;
          if (kind == kFwd) {
            double s = 0;
            for (int64_t r = 0; r < len; ++r)
              s += col[(size_t)r] * wm[r];
            acc[(size_t)yi] = s;
          } else if (kind == kBwdData) {
            double dy = y[(size_t)yi];
            for (int64_t r = 0; r < len; ++r)
              colGrad[(size_t)r] += dy * wm[r];
          } else {
            double dy = y[(size_t)yi];
            double *dw = acc.data() + m * len;
            for (int64_t r = 0; r < len; ++r)
              dw[r] += dy * col[(size_t)r];
          }
        }
        if (kind == kBwdData)
          for (int64_t cc = 0; cc < cg; ++cc)
            for (int64_t kp = 0; kp < kPlane; ++kp)
              if (at[(size_t)kp] >= 0)
                acc[(size_t)((n * p.c + grp * cg + cc) * inPlane + at[(size_t)kp])] +=
                    colGrad[(size_t)(cc * kPlane + kp)];
      }
  }
}

//--- Descriptors --------------------------------------------------------------

cudnnStatus_t create(cudnnHandle_t *h) {
  if (!h)
    return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnCreate: no handle pointer");
  *h = reinterpret_cast<cudnnHandle_t>(new Handle());
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t destroy(cudnnHandle_t h) {
  return host::destroyOf<Handle>(h, kHandleMagic, CUDNN_STATUS_SUCCESS, kBad, "cudnnDestroy");
}
cudnnStatus_t setStream(cudnnHandle_t h, cudaStream_t) {
  return as<Handle>(h, kHandleMagic) ? CUDNN_STATUS_SUCCESS
                                     : refuse(kBad, "cudnnSetStream: not a handle");
}
const char *errorString(cudnnStatus_t st) {
  switch (st) {
  case CUDNN_STATUS_SUCCESS:
    return "CUDNN_STATUS_SUCCESS";
  case CUDNN_STATUS_BAD_PARAM:
    return "CUDNN_STATUS_BAD_PARAM";
  case CUDNN_STATUS_BAD_PARAM_NULL_POINTER:
    return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
  case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER:
    return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
  case CUDNN_STATUS_NOT_SUPPORTED:
    return "CUDNN_STATUS_NOT_SUPPORTED";
  case CUDNN_STATUS_EXECUTION_FAILED:
    return "CUDNN_STATUS_EXECUTION_FAILED";
  default:
    return "CUDNN_STATUS_(other)";
  }
}

template <class T, class H> cudnnStatus_t createOf(H *out, const char *what) {
  if (!out)
    return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: no descriptor pointer", what);
  *out = reinterpret_cast<H>(new T());
  return CUDNN_STATUS_SUCCESS;
}
template <class T, class H> cudnnStatus_t destroyOf(H h, uint64_t magic, const char *what) {
  return host::destroyOf<T>(h, magic, CUDNN_STATUS_SUCCESS, kBad, what);
}

cudnnStatus_t createTensor(cudnnTensorDescriptor_t *d) {
  return createOf<Tensor>(d, "cudnnCreateTensorDescriptor");
}
cudnnStatus_t destroyTensor(cudnnTensorDescriptor_t d) {
  return destroyOf<Tensor>(d, kTensorMagic, "cudnnDestroyTensorDescriptor");
}
cudnnStatus_t createFilter(cudnnFilterDescriptor_t *d) {
  return createOf<Filter>(d, "cudnnCreateFilterDescriptor");
}
cudnnStatus_t destroyFilter(cudnnFilterDescriptor_t d) {
  return destroyOf<Filter>(d, kFilterMagic, "cudnnDestroyFilterDescriptor");
}
cudnnStatus_t createConv(cudnnConvolutionDescriptor_t *d) {
  return createOf<Conv>(d, "cudnnCreateConvolutionDescriptor");
}
cudnnStatus_t destroyConv(cudnnConvolutionDescriptor_t d) {
  return destroyOf<Conv>(d, kConvMagic, "cudnnDestroyConvolutionDescriptor");
}

cudnnStatus_t setTensor(cudnnTensorDescriptor_t d, cudnnDataType_t type, int nb, const int dims[],
                        const int strides[]) {
  Tensor *t = as<Tensor>(d, kTensorMagic);
  if (!t || !dims || !strides)
    return refuse(kBad, "cudnnSetTensorNdDescriptor: descriptor or arrays missing");
  if (nb < 3 || nb > 8)
    return refuse(kBad, "cudnnSetTensorNdDescriptor: %d dims (3 to 8)", nb);
  for (int i = 0; i < nb; ++i)
    if (dims[i] < 1 || strides[i] < 1)
      return refuse(kBad, "cudnnSetTensorNdDescriptor: dim %d is %d, stride %d", i, dims[i],
                    strides[i]);
  t->type = type;
  t->nb = nb;
  std::memcpy(t->dims, dims, sizeof(int) * nb);
  std::memcpy(t->strides, strides, sizeof(int) * nb);
  t->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t setFilter(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                        int nb, const int dims[]) {
  Filter *f = as<Filter>(d, kFilterMagic);
  if (!f || !dims)
    return refuse(kBad, "cudnnSetFilterNdDescriptor: descriptor or dims missing");
  if (nb < 3 || nb > 8)
    return refuse(kBad, "cudnnSetFilterNdDescriptor: %d dims (3 to 8)", nb);
  for (int i = 0; i < nb; ++i)
    if (dims[i] < 1)
      return refuse(kBad, "cudnnSetFilterNdDescriptor: dim %d is %d", i, dims[i]);
  f->type = type;
  f->format = format;
  f->nb = nb;
  std::memcpy(f->dims, dims, sizeof(int) * nb);
  f->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t setConv(cudnnConvolutionDescriptor_t d, int n, const int pad[], const int stride[],
                      const int dil[], cudnnConvolutionMode_t mode, cudnnDataType_t compute) {
  Conv *c = as<Conv>(d, kConvMagic);
  if (!c || !pad || !stride || !dil)
    return refuse(kBad, "cudnnSetConvolutionNdDescriptor: descriptor or arrays missing");
  if (n < 1 || n > 3)
    return refuse(kBad, "cudnnSetConvolutionNdDescriptor: %d spatial dims (1 to 3)", n);
  for (int i = 0; i < n; ++i)
    if (pad[i] < 0 || stride[i] < 1 || dil[i] < 1)
      return refuse(kBad, "cudnnSetConvolutionNdDescriptor: dim %d: pad %d, stride %d, dilation %d",
                    i, pad[i], stride[i], dil[i]);
  c->nd = n;
  std::memcpy(c->pad, pad, sizeof(int) * n);
  std::memcpy(c->stride, stride, sizeof(int) * n);
  std::memcpy(c->dil, dil, sizeof(int) * n);
  c->mode = mode;
  c->compute = compute;
  c->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t setGroups(cudnnConvolutionDescriptor_t d, int g) {
  Conv *c = as<Conv>(d, kConvMagic);
  if (!c || g < 1)
    return refuse(kBad, "cudnnSetConvolutionGroupCount: %d groups", g);
  c->groups = g;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t setMath(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  Conv *c = as<Conv>(d, kConvMagic);
  if (!c || math < CUDNN_DEFAULT_MATH || math > CUDNN_FMA_MATH)
    return refuse(kBad, "cudnnSetConvolutionMathType: math type %d", (int)math);
  c->math = math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t outputDim(const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t xd,
                        const cudnnFilterDescriptor_t wd, int nb, int out[]) {
  const Conv *c = as<Conv>(cd, kConvMagic);
  const Tensor *x = as<Tensor>(xd, kTensorMagic);
  const Filter *w = as<Filter>(wd, kFilterMagic);
  if (!c || !c->set || !x || !x->set || !w || !w->set || !out || nb != x->nb || nb != w->nb ||
      c->nd != nb - 2)
    return refuse(kBad, "cudnnGetConvolutionNdForwardOutputDim: descriptors or ranks do not agree");
  if (x->dims[1] != w->dims[1] * c->groups)
    return refuse(kBad, "cudnnGetConvolutionNdForwardOutputDim: %d input channels, %d x %d groups",
                  x->dims[1], w->dims[1], c->groups);
  out[0] = x->dims[0];
  out[1] = w->dims[0];
  for (int i = 0; i < c->nd; ++i) {
    int span = (w->dims[2 + i] - 1) * c->dil[i] + 1, padded = x->dims[2 + i] + 2 * c->pad[i];
    if (padded < span)
      return refuse(kBad, "cudnnGetConvolutionNdForwardOutputDim: window larger than the input");
    out[2 + i] = (padded - span) / c->stride[i] + 1;
  }
  return CUDNN_STATUS_SUCCESS;
}

//--- The heuristics and the calls ---------------------------------------------

/// The two candidates (see dnn_host.h), best first.
template <class Perf, class Algo>
cudnnStatus_t candidates(const Handle *h, const Tensor *x, const Filter *w, const Conv *c,
                         const Tensor *y, int requested, int *returned, Perf *r, bool gradient,
                         const char *what) {
  if (!h)
    return refuse(kBad, "%s: not a handle", what);
  if (!returned || !r || requested < 1)
    return refuse(kBad, "%s: %d results requested", what, requested);
  Problem p;
  if (cudnnStatus_t st = problemOf(x, w, c, y, p)) {
    host::lastError() = std::string(what) + ": " + host::lastError();
    return st;
  }
  int n = std::min(requested, 2);
  for (int i = 0; i < n; ++i) {
    std::memset(&r[i], 0, sizeof r[i]);
    r[i].algo = (Algo)(i == 0 ? 1 : 0);
    r[i].status = h->options.noAlgorithm ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS;
    r[i].time = i == 0 ? 1.0f : 2.0f;
    r[i].memory = i == 0 ? kAlgo1Work : 0;
    r[i].determinism = i == 0 || !gradient ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
    // cuDNN 9 reports f32 kernels as CUDNN_DEFAULT_MATH whatever the
    // descriptor asked for; 16-bit ones as the descriptor's.
    r[i].mathType = p.type == AMPRT_F32 ? CUDNN_DEFAULT_MATH : (cudnnMathType_t)c->math;
  }
  *returned = n;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t fwdAlgos(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                       const cudnnFilterDescriptor_t w, const cudnnConvolutionDescriptor_t c,
                       const cudnnTensorDescriptor_t y, const int requested, int *returned,
                       cudnnConvolutionFwdAlgoPerf_t *r) {
  return candidates<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      as<Handle>(h, kHandleMagic), as<Tensor>(x, kTensorMagic), as<Filter>(w, kFilterMagic),
      as<Conv>(c, kConvMagic), as<Tensor>(y, kTensorMagic), requested, returned, r, false,
      "cudnnGetConvolutionForwardAlgorithm_v7");
}
cudnnStatus_t bwdDataAlgos(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                           const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c,
                           const cudnnTensorDescriptor_t dx, const int requested, int *returned,
                           cudnnConvolutionBwdDataAlgoPerf_t *r) {
  return candidates<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      as<Handle>(h, kHandleMagic), as<Tensor>(dx, kTensorMagic), as<Filter>(w, kFilterMagic),
      as<Conv>(c, kConvMagic), as<Tensor>(dy, kTensorMagic), requested, returned, r, true,
      "cudnnGetConvolutionBackwardDataAlgorithm_v7");
}
cudnnStatus_t bwdFilterAlgos(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                             const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c,
                             const cudnnFilterDescriptor_t dw, const int requested, int *returned,
                             cudnnConvolutionBwdFilterAlgoPerf_t *r) {
  return candidates<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      as<Handle>(h, kHandleMagic), as<Tensor>(x, kTensorMagic), as<Filter>(dw, kFilterMagic),
      as<Conv>(c, kConvMagic), as<Tensor>(dy, kTensorMagic), requested, returned, r, true,
      "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
}

/// One convolution call: the checks, then out = alpha * conv + beta * out.
cudnnStatus_t run(Kind kind, cudnnHandle_t hh, const void *alpha, const Tensor *x, const Filter *w,
                  const Conv *c, const Tensor *y, int algo, void *work, size_t workBytes,
                  const void *beta, const void *a, const void *b, void *out, const char *what) {
  Handle *h = as<Handle>(hh, kHandleMagic);
  if (!h)
    return refuse(kBad, "%s: not a handle", what);
  Problem p;
  if (cudnnStatus_t st = problemOf(x, w, c, y, p)) {
    host::lastError() = std::string(what) + ": " + host::lastError();
    return st;
  }
  if (!alpha || !beta || !a || !b || !out)
    return refuse(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: a pointer is null", what);
  if (algo != 0 && algo != 1)
    return refuse(kBad, "%s: algorithm %d is not one the heuristics offered", what, algo);
  size_t es = amprt_dtype_size((amprt_dtype)p.type);
  size_t xb = (size_t)p.xElems() * es, yb = (size_t)p.yElems() * es, wb = (size_t)p.wElems() * es;
  // Which operand is which: forward (x, w) -> y; data (w, dy) -> dx;
  // filter (x, dy) -> dw.
  const void *xp = kind == kBwdData ? out : a,
             *wp = kind == kFwd       ? b
                   : kind == kBwdData ? a
                                      : out,
             *yp = kind == kFwd ? out : b;
  const char *names[3] = {"x", "w", "y"};
  const void *ptrs[3] = {xp, wp, yp};
  size_t bytes[3] = {xb, wb, yb};
  for (int i = 0; i < 3; ++i) {
    if ((uintptr_t)ptrs[i] % es)
      return refuse(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER,
                    "%s: %s at %p is not aligned to its "
                    "elements",
                    what, names[i], ptrs[i]);
    if (algo == 1 && (uintptr_t)ptrs[i] % 16)
      return refuse(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER,
                    "%s: %s at %p: algorithm 1 needs 16-byte aligned tensors", what, names[i],
                    ptrs[i]);
    if (h->inDevice && !h->inDevice(ptrs[i], bytes[i]))
      return refuse(CUDNN_STATUS_EXECUTION_FAILED,
                    "%s: %s [%p, +%zu bytes) is not in device memory (on a GPU: an illegal "
                    "address)",
                    what, names[i], ptrs[i], bytes[i]);
  }
  size_t need = algo == 1 ? kAlgo1Work : 0;
  if (workBytes < need || (need && !work) || (work && h->inDevice && !h->inDevice(work, workBytes)))
    return refuse(kBad, "%s: algorithm %d needs %zu bytes of device workspace, %zu given at %p",
                  what, algo, need, workBytes, work);
  float al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
  int64_t outElems = kind == kFwd ? p.yElems() : kind == kBwdData ? p.xElems() : p.wElems();
  std::vector<double> acc((size_t)outElems, 0.0);
  int32_t t = p.type;
  auto widen = [&](const void *ptr, int64_t n, bool read) {
    std::vector<float> v((size_t)n, 0.0f);
    if (read)
      for (int64_t i = 0; i < n; ++i)
        v[(size_t)i] = ldF(ptr, t, i);
    return v;
  };
  compute(p, kind, widen(xp, p.xElems(), kind != kBwdData),
          widen(wp, p.wElems(), kind != kBwdFilter), widen(yp, p.yElems(), kind != kFwd), acc);
  for (int64_t i = 0; i < outElems; ++i) {
    double v = al * acc[(size_t)i];
    if (be != 0.0f)
      v += (double)be * ldF(out, t, i);
    stF(out, t, i, (float)v);
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t forward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
                      const void *x, const cudnnFilterDescriptor_t wd, const void *w,
                      const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo,
                      void *work, size_t workBytes, const void *beta,
                      const cudnnTensorDescriptor_t yd, void *y) {
  return run(kFwd, h, alpha, as<Tensor>(xd, kTensorMagic), as<Filter>(wd, kFilterMagic),
             as<Conv>(cd, kConvMagic), as<Tensor>(yd, kTensorMagic), (int)algo, work, workBytes,
             beta, x, w, y, "cudnnConvolutionForward");
}
cudnnStatus_t backwardData(cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd,
                           const void *w, const cudnnTensorDescriptor_t dyd, const void *dy,
                           const cudnnConvolutionDescriptor_t cd,
                           cudnnConvolutionBwdDataAlgo_t algo, void *work, size_t workBytes,
                           const void *beta, const cudnnTensorDescriptor_t dxd, void *dx) {
  return run(kBwdData, h, alpha, as<Tensor>(dxd, kTensorMagic), as<Filter>(wd, kFilterMagic),
             as<Conv>(cd, kConvMagic), as<Tensor>(dyd, kTensorMagic), (int)algo, work, workBytes,
             beta, w, dy, dx, "cudnnConvolutionBackwardData");
}
cudnnStatus_t backwardFilter(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
                             const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
                             const cudnnConvolutionDescriptor_t cd,
                             cudnnConvolutionBwdFilterAlgo_t algo, void *work, size_t workBytes,
                             const void *beta, const cudnnFilterDescriptor_t dwd, void *dw) {
  return run(kBwdFilter, h, alpha, as<Tensor>(xd, kTensorMagic), as<Filter>(dwd, kFilterMagic),
             as<Conv>(cd, kConvMagic), as<Tensor>(dyd, kTensorMagic), (int)algo, work, workBytes,
             beta, x, dy, dw, "cudnnConvolutionBackwardFilter");
}

DnnApi makeApi() {
  DnnApi t;
  t.cudnnCreate = create;
  t.cudnnDestroy = destroy;
  t.cudnnSetStream = setStream;
  t.cudnnGetErrorString = errorString;
  t.cudnnCreateTensorDescriptor = createTensor;
  t.cudnnSetTensorNdDescriptor = setTensor;
  t.cudnnDestroyTensorDescriptor = destroyTensor;
  t.cudnnCreateFilterDescriptor = createFilter;
  t.cudnnSetFilterNdDescriptor = setFilter;
  t.cudnnDestroyFilterDescriptor = destroyFilter;
  t.cudnnCreateConvolutionDescriptor = createConv;
  t.cudnnSetConvolutionNdDescriptor = setConv;
  t.cudnnSetConvolutionGroupCount = setGroups;
  t.cudnnSetConvolutionMathType = setMath;
  t.cudnnDestroyConvolutionDescriptor = destroyConv;
  t.cudnnGetConvolutionNdForwardOutputDim = outputDim;
  t.cudnnGetConvolutionForwardAlgorithm_v7 = fwdAlgos;
  t.cudnnConvolutionForward = forward;
  t.cudnnGetConvolutionBackwardDataAlgorithm_v7 = bwdDataAlgos;
  t.cudnnConvolutionBackwardData = backwardData;
  t.cudnnGetConvolutionBackwardFilterAlgorithm_v7 = bwdFilterAlgos;
  t.cudnnConvolutionBackwardFilter = backwardFilter;
  t.loaded = true;
  return t;
}

} // namespace

const DnnApi &hostDnnApi() {
  static const DnnApi api = makeApi();
  return api;
}

void hostDnnAttach(cudnnHandle_t h, std::function<bool(const void *, size_t)> inDeviceMemory,
                   HostDnnOptions options) {
  if (Handle *x = as<Handle>(h, kHandleMagic)) {
    x->inDevice = std::move(inDeviceMemory);
    x->options = options;
  }
}

const char *hostDnnLastError() { return host::lastError().c_str(); }

} // namespace amprt::cuda

#endif // AMPRT_HAVE_CUDNN
