//===- conv_cudnn.cu - convolutions on cuDNN 9 ------------------------------===//
//===----------------------------------------------------------------------===//

#include "backend.cuh"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

#ifdef AMPRT_HAVE_CUDNN

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
      if (st == CUDNN_STATUS_SUCCESS &&
          (st = dnnApi.cudnnSetStream(h, d.stream)) != CUDNN_STATUS_SUCCESS)
        dnnApi.cudnnDestroy(h);
      if (st != CUDNN_STATUS_SUCCESS)
        s = fail(AMPRT_ERR_DEVICE, "cuDNN did not start: %s", dnnApi.cudnnGetErrorString(st));
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
       dnnApi.cudnnSetFilterNdDescriptor(wdesc, dt, CUDNN_TENSOR_NCHW, nd + 2, wd) ==
           CUDNN_STATUS_SUCCESS &&
       dnnApi.cudnnSetConvolutionNdDescriptor(cdesc, nd, pad, str, dil, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS &&
       dnnApi.cudnnSetConvolutionGroupCount(cdesc, (int)g.g) == CUDNN_STATUS_SUCCESS &&
       dnnApi.cudnnSetConvolutionMathType(
           cdesc, t == AMPRT_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH) == CUDNN_STATUS_SUCCESS;
  // cuDNN pads both ends by pads_begin: its output shape must be ours (the
  // windows then start where ours do).
  int od[5] = {0, 0, 0, 0, 0};
  ok = ok &&
       dnnApi.cudnnGetConvolutionNdForwardOutputDim(cdesc, xdesc, wdesc, nd + 2, od) ==
           CUDNN_STATUS_SUCCESS &&
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
      ok = dnnApi.cudnnGetConvolutionForwardAlgorithm_v7(
               static_cast<cudnnHandle_t>(d.dnn), xdesc, wdesc, cdesc, ydesc,
               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r) == CUDNN_STATUS_SUCCESS;
      for (int i = 0; ok && i < n; ++i)
        cands.push_back(
            {(int)r[i].algo, r[i].status, r[i].memory, r[i].determinism, r[i].mathType});
    } else if (kind == kDnnBwdData) {
      cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      ok = dnnApi.cudnnGetConvolutionBackwardDataAlgorithm_v7(
               static_cast<cudnnHandle_t>(d.dnn), wdesc, ydesc, cdesc, xdesc,
               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r) == CUDNN_STATUS_SUCCESS;
      for (int i = 0; ok && i < n; ++i)
        cands.push_back(
            {(int)r[i].algo, r[i].status, r[i].memory, r[i].determinism, r[i].mathType});
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      ok = dnnApi.cudnnGetConvolutionBackwardFilterAlgorithm_v7(
               static_cast<cudnnHandle_t>(d.dnn), xdesc, ydesc, cdesc, wdesc,
               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r) == CUDNN_STATUS_SUCCESS;
      for (int i = 0; ok && i < n; ++i)
        cands.push_back(
            {(int)r[i].algo, r[i].status, r[i].memory, r[i].determinism, r[i].mathType});
    }
  }
  const Cand *pick = nullptr;
  for (int pass = 0; ok && pass < 2 && !pick; ++pass)
    for (const Cand &c : cands)
      if (c.status == CUDNN_STATUS_SUCCESS && c.memory <= kDnnWorkMax &&
          (t != AMPRT_F32 || c.math == CUDNN_FMA_MATH) &&
          (pass == 1 || c.det == CUDNN_DETERMINISTIC)) {
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
amprt_status dnnRun(Dev &d, Dev::DnnPlan &p, DnnKind kind, const void *a, const void *b, void *out,
                    bool &done) {
  done = false;
  void *ws = nullptr;
  if (p.work)
    AMPRT_CHECK(scratch(d, 12, p.work, &ws));
  float one = 1.0f, zero = 0.0f;
  auto h = static_cast<cudnnHandle_t>(d.dnn);
  auto xd = static_cast<cudnnTensorDescriptor_t>(p.x),
       yd = static_cast<cudnnTensorDescriptor_t>(p.y);
  auto wd = static_cast<cudnnFilterDescriptor_t>(p.w);
  auto cd = static_cast<cudnnConvolutionDescriptor_t>(p.conv);
  cudnnStatus_t st =
      kind == kDnnFwd ? dnnApi.cudnnConvolutionForward(h, &one, xd, a, wd, b, cd,
                                                       (cudnnConvolutionFwdAlgo_t)p.algo, ws,
                                                       p.work, &zero, yd, out)
      : kind == kDnnBwdData
          ? dnnApi.cudnnConvolutionBackwardData(h, &one, wd, a, yd, b, cd,
                                                (cudnnConvolutionBwdDataAlgo_t)p.algo, ws, p.work,
                                                &zero, xd, out)
          : dnnApi.cudnnConvolutionBackwardFilter(h, &one, xd, a, yd, b, cd,
                                                  (cudnnConvolutionBwdFilterAlgo_t)p.algo, ws,
                                                  p.work, &zero, wd, out);
  if (st == CUDNN_STATUS_SUCCESS) {
    done = true;
    return AMPRT_OK;
  }
  static const char *names[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                "cudnnConvolutionBackwardFilter"};
  if (d.dnnMode == Dev::kDnnRequired)
    return fail(AMPRT_ERR_DEVICE, "%s: %s", names[kind], dnnApi.cudnnGetErrorString(st));
  std::fprintf(stderr,
               "amprt (cuda): %s: %s (algorithm %d): this convolution runs as im2col + cuBLASLt\n",
               names[kind], dnnApi.cudnnGetErrorString(st), p.algo);
  dnnFree(p); // refused from now on
  return AMPRT_OK;
}

/// y = conv(x, w) + bias (ReLU on request) on cuDNN where it takes it
/// (done), the bias and ReLU a second pass.
amprt_status dnnConv(Dev &d, const Geom &g, int32_t spatial, const void *x, int32_t xt,
                     const void *w, int32_t wt, const void *bias, int32_t bt, void *y, int32_t yt,
                     bool relu, bool &done) {
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
    AMPRT_CHECK(each(&d, g.n * g.m * g.outPlane(),
                     BiasReluF{y, bias, yt, bt, relu ? 1 : 0, g.m, g.outPlane()}, "conv bias"));
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

} // namespace amprt::cuda
