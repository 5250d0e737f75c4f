//===- conv_cudnn.cu - convolutions on cuDNN 9 ------------------------------===//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"
#include "dnn_host.h"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

#ifdef AMPRT_HAVE_CUDNN

/// y[n, m, p] = bias[m] (of y's type: exact), before cuDNN adds the
/// convolution to it (beta = 1), so that conv + bias is rounded once.
struct BiasFillF {
  void *y;
  const void *bias;
  int32_t yt;
  int64_t m, plane;
  HD void operator()(int64_t e) const { stF(y, yt, e, ldF(bias, yt, (e / plane) % m)); }
};

/// ReLU (NaN kept) of cuDNN's result, in place (exact).
struct ReluF {
  void *y;
  int32_t yt;
  HD void operator()(int64_t e) const {
    float v = ldF(y, yt, e);
    if (!(v > 0.0f) && !isNaN(v))
      stF(y, yt, e, 0.0f);
  }
};

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
  return t == AMPRT_F16    ? CUDNN_DATA_HALF
         : t == AMPRT_BF16 ? CUDNN_DATA_BFLOAT16
                           : CUDNN_DATA_FLOAT;
}

void dnnFree(const Dev &d, Dev::DnnPlan &p) {
  if (p.x)
    d.dnna->cudnnDestroyTensorDescriptor(static_cast<cudnnTensorDescriptor_t>(p.x));
  if (p.y)
    d.dnna->cudnnDestroyTensorDescriptor(static_cast<cudnnTensorDescriptor_t>(p.y));
  if (p.w)
    d.dnna->cudnnDestroyFilterDescriptor(static_cast<cudnnFilterDescriptor_t>(p.w));
  if (p.conv)
    d.dnna->cudnnDestroyConvolutionDescriptor(static_cast<cudnnConvolutionDescriptor_t>(p.conv));
  std::string why = std::move(p.why);
  p = Dev::DnnPlan{};
  p.why = std::move(why);
}

/// Whether cuDNN runs this context's convolutions: it is made at the first
/// one (never inside a graph capture). AMPRT_CUDA_CONV=cudnn: an error when
/// cuDNN cannot start; auto: one line on stderr, and im2col + cuBLASLt.
amprt_status dnnReady(Dev &d, bool &ready) {
  ready = false;
  if (d.dnnMode == Dev::kDnnOff)
    return AMPRT_OK;
  if (!d.dnn && !d.dnnTried && !d.capturing) {
    d.dnnTried = true;
    amprt_status s = AMPRT_OK;
    if (d.emulate) {
      // cuDNN on the host (dnn_host.h): the backend's cuDNN code runs, its
      // arguments checked.
      HostDnnOptions o;
      o.noAlgorithm = d.emulateDnnNoAlgorithm;
      d.dnna = &hostDnnApi();
      cudnnHandle_t h = nullptr;
      d.dnna->cudnnCreate(&h);
      Dev *dp = &d;
      hostDnnAttach(h, [dp](const void *p, size_t n) { return inDeviceMemory(*dp, p, n); }, o);
      d.dnn = h;
      ready = true;
      return AMPRT_OK;
    }
    s = loadCudnn();
    cudnnHandle_t h = nullptr;
    if (s == AMPRT_OK) {
      cudnnStatus_t st = d.dnna->cudnnCreate(&h);
      if (st == CUDNN_STATUS_SUCCESS &&
          (st = d.dnna->cudnnSetStream(h, d.stream)) != CUDNN_STATUS_SUCCESS)
        d.dnna->cudnnDestroy(h);
      if (st != CUDNN_STATUS_SUCCESS)
        s = fail(AMPRT_ERR_DEVICE, "cuDNN did not start: %s", d.dnna->cudnnGetErrorString(st));
    }
    if (s != AMPRT_OK) {
      std::string why = amprt_last_error();
      if (d.dnnMode == Dev::kDnnRequired)
        return fail(s, "AMPRT_CUDA_CONV=cudnn: %s", why.c_str());
      std::fprintf(stderr, "amprt (cuda): %s: the convolutions run as im2col + cuBLASLt\n",
                   why.c_str());
      return AMPRT_OK;
    }
    d.dnn = h;
  }
  if (!d.dnn && d.dnnMode == Dev::kDnnRequired)
    return fail(AMPRT_ERR_DEVICE,
                d.capturing ? "AMPRT_CUDA_CONV=cudnn: cuDNN cannot start inside a graph capture "
                              "(run the step once before capturing it)"
                            : "AMPRT_CUDA_CONV=cudnn: cuDNN did not start");
  ready = d.dnn != nullptr;
  return AMPRT_OK;
}

/// cuDNN's plan for `kind` of the convolution g (spatial dims, operands of
/// type t), made once per problem; nullptr where cuDNN does not take it.
/// The alignment (at most 16 bytes) the tensors of a call share: part of a
/// plan's key, so that a misaligned view that cuDNN fails drops the plan of
/// its own alignment only.
uint32_t dnnAlignment(std::initializer_list<const void *> ptrs) {
  uint32_t a = 16;
  for (const void *p : ptrs)
    while (a > 1 && reinterpret_cast<uintptr_t>(p) % a)
      a /= 2;
  return a;
}

/// Where no plan is returned: with AMPRT_CUDA_CONV=cudnn, an error when
/// cuDNN itself refused the problem (p.why), not where our rules keep it
/// from cuDNN (operand types, asymmetric padding, sizes).
amprt_status dnnRefused(const Dev &d, const std::string &why, const char *kind) {
  if (d.dnnMode == Dev::kDnnRequired && !why.empty())
    return fail(AMPRT_ERR_DEVICE, "AMPRT_CUDA_CONV=cudnn: cuDNN refused a %s: %s", kind,
                why.c_str());
  return AMPRT_OK;
}

Dev::DnnPlan *dnnPlan(Dev &d, const Geom &g, int32_t spatial, int32_t t, DnnKind kind,
                      uint32_t align, std::string &why) {
  why.clear();
  std::vector<int64_t> key{kind, t, spatial, g.n, g.c, g.m, g.g, align};
  for (int i = 0; i < 3; ++i)
    key.insert(key.end(), {g.in[i], g.out[i], g.k[i], g.s[i], g.d[i], g.pb[i]});
  auto it = d.dnnPlans.find(key);
  if (it != d.dnnPlans.end()) {
    why = it->second.why;
    return it->second.ok ? &it->second : nullptr;
  }
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
  bool ok = d.dnna->cudnnCreateTensorDescriptor(&xdesc) == CUDNN_STATUS_SUCCESS;
  p.x = xdesc;
  ok = ok && d.dnna->cudnnCreateTensorDescriptor(&ydesc) == CUDNN_STATUS_SUCCESS;
  p.y = ydesc;
  ok = ok && d.dnna->cudnnCreateFilterDescriptor(&wdesc) == CUDNN_STATUS_SUCCESS;
  p.w = wdesc;
  ok = ok && d.dnna->cudnnCreateConvolutionDescriptor(&cdesc) == CUDNN_STATUS_SUCCESS;
  p.conv = cdesc;
  if (!ok)
    p.why = "a descriptor could not be created";
  cudnnDataType_t dt = dnnType(t);
  ok = ok &&
       d.dnna->cudnnSetTensorNdDescriptor(xdesc, dt, nd + 2, xd, xs) == CUDNN_STATUS_SUCCESS &&
       d.dnna->cudnnSetTensorNdDescriptor(ydesc, dt, nd + 2, yd, ys) == CUDNN_STATUS_SUCCESS &&
       d.dnna->cudnnSetFilterNdDescriptor(wdesc, dt, CUDNN_TENSOR_NCHW, nd + 2, wd) ==
           CUDNN_STATUS_SUCCESS &&
       d.dnna->cudnnSetConvolutionNdDescriptor(cdesc, nd, pad, str, dil, CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS &&
       d.dnna->cudnnSetConvolutionGroupCount(cdesc, (int)g.g) == CUDNN_STATUS_SUCCESS &&
       d.dnna->cudnnSetConvolutionMathType(
           cdesc, t == AMPRT_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH) == CUDNN_STATUS_SUCCESS;
  if (!ok && p.why.empty())
    p.why = "its descriptors were refused";
  // cuDNN pads both ends by pads_begin: its output shape must be ours (the
  // windows then start where ours do); where it is not (asymmetric
  // padding), cuDNN does not compute this convolution: our rule, not a
  // refusal.
  int od[5] = {0, 0, 0, 0, 0};
  if (ok && d.dnna->cudnnGetConvolutionNdForwardOutputDim(cdesc, xdesc, wdesc, nd + 2, od) !=
                CUDNN_STATUS_SUCCESS) {
    ok = false;
    p.why = "cudnnGetConvolutionNdForwardOutputDim failed";
  }
  bool shapeOurs = ok && std::equal(od, od + nd + 2, yd);
  ok = ok && shapeOurs;
  // The heuristics' candidates, best first: deterministic ones first, then
  // any; f32 never on tensor cores (TF32). cuDNN 9 reports f32 kernels as
  // CUDNN_DEFAULT_MATH even with CUDNN_FMA_MATH asked for (taking only FMA
  // reports refused every f32 convolution): FMA and DEFAULT are taken, and
  // the descriptor keeps CUDNN_FMA_MATH.
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
      ok = d.dnna->cudnnGetConvolutionForwardAlgorithm_v7(
               static_cast<cudnnHandle_t>(d.dnn), xdesc, wdesc, cdesc, ydesc,
               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r) == CUDNN_STATUS_SUCCESS;
      for (int i = 0; ok && i < n; ++i)
        cands.push_back(
            {(int)r[i].algo, r[i].status, r[i].memory, r[i].determinism, r[i].mathType});
    } else if (kind == kDnnBwdData) {
      cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      ok = d.dnna->cudnnGetConvolutionBackwardDataAlgorithm_v7(
               static_cast<cudnnHandle_t>(d.dnn), wdesc, ydesc, cdesc, xdesc,
               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r) == CUDNN_STATUS_SUCCESS;
      for (int i = 0; ok && i < n; ++i)
        cands.push_back(
            {(int)r[i].algo, r[i].status, r[i].memory, r[i].determinism, r[i].mathType});
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      ok = d.dnna->cudnnGetConvolutionBackwardFilterAlgorithm_v7(
               static_cast<cudnnHandle_t>(d.dnn), xdesc, ydesc, cdesc, wdesc,
               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r) == CUDNN_STATUS_SUCCESS;
      for (int i = 0; ok && i < n; ++i)
        cands.push_back(
            {(int)r[i].algo, r[i].status, r[i].memory, r[i].determinism, r[i].mathType});
    }
  }
  if (shapeOurs && !ok && p.why.empty())
    p.why = "its heuristics failed";
  const Cand *pick = nullptr;
  for (int pass = 0; ok && pass < 2 && !pick; ++pass)
    for (const Cand &c : cands)
      if (c.status == CUDNN_STATUS_SUCCESS && c.memory <= kDnnWorkMax &&
          (t != AMPRT_F32 || c.math == CUDNN_FMA_MATH || c.math == CUDNN_DEFAULT_MATH) &&
          (pass == 1 || c.det == CUDNN_DETERMINISTIC)) {
        pick = &c;
        break;
      }
  if (ok && !pick) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "none of its %zu candidates is usable (status SUCCESS, workspace <= %zu MiB%s)",
                  cands.size(), kDnnWorkMax >> 20, t == AMPRT_F32 ? ", no tensor-core math" : "");
    p.why = buf;
  }
  ok = ok && pick &&
       d.dnna->cudnnSetConvolutionMathType(cdesc, t == AMPRT_F32 ? CUDNN_FMA_MATH : pick->math) ==
           CUDNN_STATUS_SUCCESS;
  if (!ok) {
    dnnFree(d, p); // remembered as refused
    why = p.why;
    return nullptr;
  }
  p.algo = pick->algo;
  p.work = pick->memory;
  p.ok = true;
  return &p;
}

/// Runs one cuDNN call of plan p; false (and the plan dropped) when cuDNN
/// fails it, unless AMPRT_CUDA_CONV=cudnn (then an error).
amprt_status dnnRun(Dev &d, Dev::DnnPlan &p, DnnKind kind, const void *a, const void *b, void *out,
                    bool &done, float beta = 0.0f) {
  done = false;
  void *ws = nullptr;
  if (p.work)
    AMPRT_CHECK(scratch(d, 12, p.work, &ws));
  float one = 1.0f, zero = beta;
  auto h = static_cast<cudnnHandle_t>(d.dnn);
  auto xd = static_cast<cudnnTensorDescriptor_t>(p.x),
       yd = static_cast<cudnnTensorDescriptor_t>(p.y);
  auto wd = static_cast<cudnnFilterDescriptor_t>(p.w);
  auto cd = static_cast<cudnnConvolutionDescriptor_t>(p.conv);
  cudnnStatus_t st =
      kind == kDnnFwd ? d.dnna->cudnnConvolutionForward(h, &one, xd, a, wd, b, cd,
                                                        (cudnnConvolutionFwdAlgo_t)p.algo, ws,
                                                        p.work, &zero, yd, out)
      : kind == kDnnBwdData
          ? d.dnna->cudnnConvolutionBackwardData(h, &one, wd, a, yd, b, cd,
                                                 (cudnnConvolutionBwdDataAlgo_t)p.algo, ws, p.work,
                                                 &zero, xd, out)
          : d.dnna->cudnnConvolutionBackwardFilter(h, &one, xd, a, yd, b, cd,
                                                   (cudnnConvolutionBwdFilterAlgo_t)p.algo, ws,
                                                   p.work, &zero, wd, out);
  if (st == CUDNN_STATUS_SUCCESS) {
    done = true;
    return AMPRT_OK;
  }
  static const char *names[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                "cudnnConvolutionBackwardFilter"};
  const char *host = d.emulate ? hostDnnLastError() : "";
  if (d.dnnMode == Dev::kDnnRequired)
    return fail(AMPRT_ERR_DEVICE, "%s: %s%s%s", names[kind], d.dnna->cudnnGetErrorString(st),
                *host ? ": " : "", host);
  std::fprintf(stderr,
               "amprt (cuda): %s: %s (algorithm %d)%s%s: this convolution (at this alignment) "
               "runs as im2col + cuBLASLt\n",
               names[kind], d.dnna->cudnnGetErrorString(st), p.algo, *host ? ": " : "", host);
  dnnFree(d, p); // refused from now on (for this problem and alignment)
  return AMPRT_OK;
}

/// y = conv(x, w) + bias (ReLU on request) on cuDNN where it takes it
/// (done): the bias written into y first and cuDNN's result added to it
/// (beta = 1: one rounding of conv + bias, as on the CPU; adding the bias
/// after cuDNN had rounded conv to a 16-bit y rounded twice, which near a
/// cancellation is far from the CPU's value), the ReLU a second pass. A bias
/// of another type than y's runs as im2col + cuBLASLt.
amprt_status dnnConv(Dev &d, const Geom &g, int32_t spatial, const void *x, int32_t xt,
                     const void *w, int32_t wt, const void *bias, int32_t bt, void *y, int32_t yt,
                     bool relu, bool &done) {
  done = false;
  bool ready;
  AMPRT_CHECK(dnnReady(d, ready));
  if (!ready || xt != wt || yt != xt || (bias && bt != yt))
    return AMPRT_OK;
  std::string why;
  Dev::DnnPlan *p = dnnPlan(d, g, spatial, xt, kDnnFwd, dnnAlignment({x, w, y}), why);
  if (!p)
    return dnnRefused(d, why, "convolution");
  int64_t ye = g.n * g.m * g.outPlane();
  if (bias)
    AMPRT_CHECK(each(&d, ye, BiasFillF{y, bias, yt, g.m, g.outPlane()}, "conv bias"));
  AMPRT_CHECK(dnnRun(d, *p, kDnnFwd, x, w, y, done, bias ? 1.0f : 0.0f));
  if (done && relu)
    AMPRT_CHECK(each(&d, ye, ReluF{y, yt}, "conv relu"));
  return AMPRT_OK;
}

/// The data and weight gradients on cuDNN where it takes them: each one it
/// computed is set to nullptr (the rest run as products).
amprt_status dnnConvGrad(Dev &d, const Geom &g, int32_t spatial, const amprt_tensor &x,
                         const amprt_tensor &w, const amprt_tensor &dy, const amprt_tensor *&dx,
                         const amprt_tensor *&dw) {
  bool ready;
  AMPRT_CHECK(dnnReady(d, ready));
  if (!ready)
    return AMPRT_OK;
  bool done;
  std::string why;
  if (dx && dx->dtype == dy.dtype && w.dtype == dy.dtype) {
    if (Dev::DnnPlan *p = dnnPlan(d, g, spatial, dy.dtype, kDnnBwdData,
                                  dnnAlignment({w.data, dy.data, dx->data}), why)) {
      AMPRT_CHECK(dnnRun(d, *p, kDnnBwdData, w.data, dy.data, dx->data, done));
      if (done)
        dx = nullptr;
    } else {
      AMPRT_CHECK(dnnRefused(d, why, "data gradient"));
    }
  }
  if (dw && dw->dtype == dy.dtype && x.dtype == dy.dtype) {
    if (Dev::DnnPlan *p = dnnPlan(d, g, spatial, dy.dtype, kDnnBwdFilter,
                                  dnnAlignment({x.data, dy.data, dw->data}), why)) {
      AMPRT_CHECK(dnnRun(d, *p, kDnnBwdFilter, x.data, dy.data, dw->data, done));
      if (done)
        dw = nullptr;
    } else {
      AMPRT_CHECK(dnnRefused(d, why, "weight gradient"));
    }
  }
  return AMPRT_OK;
}
#endif

} // namespace amprt::cuda
