//===- onednn_conv.cpp - convolutions on oneDNN's primitives --------------===//
//
// The candidates bf16 and f32 of each pass (candidates.cpp): oneDNN picks
// its layouts (format_tag::any: blocked nChw16c and the like, several times
// faster than plain NCHW); our plain tensors are reordered in and out
// around the primitive. Primitives, reorders and scratch buffers are cached
// per shape. Built with exceptions (oneDNN's C++ API throws).
//
//===----------------------------------------------------------------------===//

#include "cpu/conv/kernels.h"

#include "common/check.h"
#include "common/exec_decode.h"
#include "cpu/elementwise/elementwise.h"
#include "host/context.h"
#include "host/profile.h"
#include "host/scratch.h"
#include "host/threads.h"

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

namespace amprt::conv {

amprt_status convDims(const amprt_tensor *x, const amprt_tensor *w, const amprt_tensor *y,
                      const amprt_conv_params *p, const char *k, ConvDims &cd) {
  if (!p || p->spatial < 1 || p->spatial > 3 || p->group < 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: bad parameters", k);
  int32_t r = p->spatial + 2;
  if (x->rank != r || w->rank != r || y->rank != r)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: x %s, w %s, y %s must have rank %d", k,
                shapeString(x).c_str(), shapeString(w).c_str(), shapeString(y).c_str(), r);
  int64_t g = p->group, c = x->shape[1], mo = w->shape[0];
  if (c != w->shape[1] * g || mo % g || y->shape[1] != mo || y->shape[0] != x->shape[0])
    return fail(
        AMPRT_ERR_INVALID_ARGUMENT, "%s: channels do not agree: x %s, w %s, y %s, group %lld", k,
        shapeString(x).c_str(), shapeString(w).c_str(), shapeString(y).c_str(), (long long)g);
  cd.src.assign(x->shape, x->shape + r);
  cd.dst.assign(y->shape, y->shape + r);
  if (g == 1) {
    cd.wei.assign(w->shape, w->shape + r);
  } else {
    cd.wei = {g, mo / g, w->shape[1]};
    for (int32_t d = 2; d < r; ++d)
      cd.wei.push_back(w->shape[d]);
  }
  cd.bias = {mo};
  for (int32_t i = 0; i < p->spatial; ++i) {
    int64_t kd = w->shape[2 + i], dil = p->dilations[i] > 0 ? p->dilations[i] : 1;
    int64_t st = p->strides[i] > 0 ? p->strides[i] : 1;
    int64_t eff = (kd - 1) * dil + 1;
    int64_t want = (x->shape[2 + i] + p->pads_begin[i] + p->pads_end[i] - eff) / st + 1;
    if (want != y->shape[2 + i])
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "%s: spatial dim %d of y is %lld, the window gives %lld", k, i,
                  (long long)y->shape[2 + i], (long long)want);
    cd.strides.push_back(st);
    cd.dil.push_back(dil - 1); // oneDNN counts dilation from 0
    cd.padL.push_back(p->pads_begin[i]);
    cd.padR.push_back(p->pads_end[i]);
  }
  return AMPRT_OK;
}

/// (oneDNN 2.6: ConvNeXt's
/// 7 x 7 forward on 2 x 2 maps, 3.1 ms against 0.07 ms on the AVX2 EPYC;
/// every 7 x 7 weight gradient on AVX2, 5-10x slower), else oneDNN's
/// (its jit_dw kernels: MobileNet's 3 x 3). The answer is cached per shape.
bool depthwiseOneDnnSlow(const ConvDims &cd, Pass pass) {
  std::vector<int64_t> key = cd.key();
  key.push_back((int64_t)pass);
  static std::mutex mu;
  static std::map<std::vector<int64_t>, bool> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  bool slow = true;
  try {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc xa(cd.src, dt::f32, tag::any), wa(cd.wei, dt::f32, tag::any),
        ya(cd.dst, dt::f32, tag::any), bd(cd.bias, dt::f32, tag::a);
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, xa, wa, bd, ya,
                                       cd.strides, cd.dil, cd.padL, cd.padR);
    dnnl::convolution_forward::primitive_desc fpd(fd, cpuEngine());
    std::string impl = fpd.impl_info_str();
    if (pass == Pass::Data) {
      dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, xa, wa, ya,
                                              cd.strides, cd.dil, cd.padL, cd.padR);
      impl = dnnl::convolution_backward_data::primitive_desc(d, cpuEngine(), fpd).impl_info_str();
    } else if (pass == Pass::Weights) {
      dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, xa, wa, ya,
                                                 cd.strides, cd.dil, cd.padL, cd.padR);
      impl =
          dnnl::convolution_backward_weights::primitive_desc(d, cpuEngine(), fpd).impl_info_str();
    }
    slow = impl.find("gemm") != std::string::npos || impl.find("ref") != std::string::npos;
  } catch (const dnnl::error &) {
    slow = true; // oneDNN has nothing for it: the direct kernel
  }
  cache.emplace(key, slow);
  return slow;
}

amprt_status oneDnnForward(const Call &c, bool widen) {
  const char *k = "amprt_conv";
  const amprt_tensor *x = c.x, *w = c.w, *bias = c.bias;
  amprt_tensor *y = c.y;
  const int32_t flags = c.flags;
  const ConvDims &cd = c.cd;
  const int32_t block = amprt_channel_block();
  const int64_t count = amprt_tensor_numel(y);
  // A bf16 y: the reorder out of oneDNN's layout rounds the f32 result to
  // bf16 itself (to nearest even, once), no f32 copy of y and second pass.
  bool outBf16 = y->dtype == AMPRT_BF16 && bf16Kernels();
  thread_local ScratchVec<float> scratch;
  void *acc = y->data;
  if (y->dtype != AMPRT_F32 && !outBf16) {
    acc = grown(scratch, (size_t)count);
  }
  if (count) {
    AMPRT_DNNL_TRY(k, {
      using dt = dnnl::memory::data_type;
      Operand ox = operandOf(x, widen), ow = operandOf(w, widen);
      // Primitives are cached by everything that shapes them.
      std::vector<int64_t> key = cd.key();
      key.push_back((int64_t)ox.dt);
      key.push_back(bias ? 1 : 0);
      key.push_back(flags);
      key.push_back(outBf16);
      key.push_back(maxThreads()); // oneDNN splits a primitive for its thread count
      // oneDNN picks its layouts (format_tag::any: blocked nChw16c and the
      // like, several times faster than plain NCHW); our plain tensors are
      // reordered in and out around the primitive. Primitives, reorders and
      // scratch buffers are cached per shape.
      struct Conv {
        dnnl::convolution_forward prim;
        dnnl::memory::desc src, wei, dst;
        std::optional<dnnl::reorder> toSrc, toWei, fromDst;
        std::string impl;
      };
      static std::mutex mu;
      static std::map<std::vector<int64_t>, Conv> cache;
      // Our side of the reorders: plain, or channel-blocked where the
      // compiler keeps the tensor so (then oneDNN's own choice, in which
      // case nothing is reordered).
      auto blockedTag =
          block == 16 ? dnnl::memory::format_tag::nChw16c : dnnl::memory::format_tag::nChw8c;
      dnnl::memory::desc xd(cd.src, ox.dt,
                            flags & AMPRT_CONV_SRC_BLOCKED ? blockedTag : plainTag(cd.src.size()));
      dnnl::memory::desc wd(cd.wei, ow.dt, plainTag(cd.wei.size()));
      dnnl::memory::desc yd(cd.dst, outBf16 ? dt::bf16 : dt::f32,
                            flags & AMPRT_CONV_DST_BLOCKED ? blockedTag : plainTag(cd.dst.size()));
      dnnl::memory::desc bd(cd.bias, dt::f32, dnnl::memory::format_tag::a);
      const Conv *conv;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = cache.find(key);
        if (it == cache.end()) {
          using tag = dnnl::memory::format_tag;
          dnnl::memory::desc xa(cd.src, ox.dt, tag::any), wa(cd.wei, ow.dt, tag::any),
              ya(cd.dst, dt::f32, tag::any);
          auto d =
              bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                     dnnl::algorithm::convolution_direct, xa, wa,
                                                     bd, ya, cd.strides, cd.dil, cd.padL, cd.padR)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                     dnnl::algorithm::convolution_direct, xa, wa,
                                                     ya, cd.strides, cd.dil, cd.padL, cd.padR);
          dnnl::primitive_attr pa;
          if (flags & AMPRT_CONV_RELU) {
            dnnl::post_ops po;
            // max(x, 0): turns a NaN into 0 (vmaxps); only used where no NaN
            // can arise (see amprt_conv_ex).
            po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
            pa.set_post_ops(po);
          }
          dnnl::convolution_forward::primitive_desc pd(d, pa, cpuEngine());
          Conv c{dnnl::convolution_forward(pd),
                 pd.src_desc(),
                 pd.weights_desc(),
                 pd.dst_desc(),
                 std::nullopt,
                 std::nullopt,
                 std::nullopt,
                 pd.impl_info_str()};
          if (c.src != xd)
            c.toSrc =
                dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), xd, cpuEngine(), c.src));
          if (c.wei != wd)
            c.toWei =
                dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), wd, cpuEngine(), c.wei));
          if (c.dst != yd)
            c.fromDst =
                dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), c.dst, cpuEngine(), yd));
          it = cache.emplace(key, std::move(c)).first;
        }
        conv = &it->second; // map nodes stay put
      }
      thread_local dnnl::stream s(cpuEngine());
      thread_local ScratchVec<char> bufSrc, bufWei, bufDst;
      auto scratch = [](std::vector<char> &b, const dnnl::memory::desc &d) {
        if (b.size() < d.get_size())
          b.resize(d.get_size());
        return b.data();
      };
      // Memory objects and arguments made once per primitive and thread;
      // each call only points them at its buffers.
      struct Bound {
        dnnl::memory xm, wm, ym, xi, wi, yo, bm;
        std::unordered_map<int, dnnl::memory> args;
      };
      thread_local std::map<const Conv *, Bound> bound;
      auto bit = bound.find(conv);
      if (bit == bound.end()) {
        Bound nb;
        auto none = [](const dnnl::memory::desc &d) {
          return dnnl::memory(d, cpuEngine(), DNNL_MEMORY_NONE);
        };
        nb.xm = none(xd);
        nb.wm = none(wd);
        nb.ym = none(yd);
        nb.xi = conv->toSrc ? none(conv->src) : nb.xm;
        nb.wi = conv->toWei ? none(conv->wei) : nb.wm;
        nb.yo = conv->fromDst ? none(conv->dst) : nb.ym;
        nb.args = {{DNNL_ARG_SRC, nb.xi}, {DNNL_ARG_WEIGHTS, nb.wi}, {DNNL_ARG_DST, nb.yo}};
        if (bias) {
          nb.bm = none(bd);
          nb.args[DNNL_ARG_BIAS] = nb.bm;
        }
        bit = bound.emplace(conv, std::move(nb)).first;
      }
      Bound &m = bit->second;
      m.xm.set_data_handle(const_cast<void *>(ox.ptr));
      m.wm.set_data_handle(const_cast<void *>(ow.ptr));
      m.ym.set_data_handle(acc);
      if (conv->toSrc)
        m.xi.set_data_handle(scratch(bufSrc, conv->src));
      if (conv->toWei)
        m.wi.set_data_handle(scratch(bufWei, conv->wei));
      if (conv->fromDst)
        m.yo.set_data_handle(scratch(bufDst, conv->dst));
      if (bias)
        m.bm.set_data_handle(const_cast<float *>(c.biasF32));
      if (conv->toSrc)
        conv->toSrc->execute(s, m.xm, m.xi);
      if (conv->toWei)
        conv->toWei->execute(s, m.wm, m.wi);
      if (desc::profilingRequested())
        noteKernelImpl(conv->impl.c_str());
      conv->prim.execute(s, m.args);
      if (conv->fromDst)
        conv->fromDst->execute(s, m.yo, m.ym);
      s.wait();
    })
  }
  if (acc != y->data)
    return convertPar(acc, AMPRT_F32, y->data, y->dtype, (size_t)count);
  return AMPRT_OK;
  if (acc != y->data)
    return convertPar(acc, AMPRT_F32, y->data, y->dtype, (size_t)count);
  return AMPRT_OK;
}

namespace {

/// One backward side's primitive and the reorders around it.
struct Side {
  dnnl::memory::desc a, b, out; // the primitive's layouts of its inputs / output
  std::optional<dnnl::reorder> toA, toB, fromOut;
  bool low = false; // its inputs in bf16
  std::string impl;
};
// Data: a = diff_dst, b = weights, out = diff_src.
struct DataPrim {
  std::optional<dnnl::convolution_backward_data> prim;
  Side s;
};
// Weights: a = diff_dst, b = src, out = diff_weights.
struct WeightsPrim {
  std::optional<dnnl::convolution_backward_weights> prim;
  Side s;
};

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

std::optional<dnnl::reorder> reorder(const dnnl::memory::desc &from, const dnnl::memory::desc &to) {
  if (from == to)
    return std::nullopt;
  return dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), from, cpuEngine(), to));
}

dnnl::memory::desc plain(const dnnl::memory::dims &d, dt t) {
  return dnnl::memory::desc(d, t, plainTag(d.size()));
}

bool isRef(const std::string &impl) { return impl.find("ref") != std::string::npos; }

/// t in f32: itself, or widened into buf.
const float *f32Of(const amprt_tensor *t, std::vector<float> &buf) {
  if (t->dtype == AMPRT_F32)
    return static_cast<const float *>(t->data);
  float *out = grown(buf, (size_t)amprt_tensor_numel(t));
  convertPar(t->data, t->dtype, out, AMPRT_F32, (size_t)amprt_tensor_numel(t));
  return out;
}

/// Gradients in f32 or bf16 are written by the reorder out of oneDNN's
/// layout (rounded to nearest even there, once); others (f16) through f32
/// and our conversion.
bool writtenByReorder(const amprt_tensor *t) {
  return t->dtype == AMPRT_F32 || (t->dtype == AMPRT_BF16 && bf16Kernels());
}

dnnl::memory scratchMem(std::vector<char> &b, const dnnl::memory::desc &d) {
  if (b.size() < d.get_size())
    b.resize(d.get_size());
  return dnnl::memory(d, cpuEngine(), b.data());
}

dnnl::memory mem(const dnnl::memory::desc &d, const void *ptr) {
  return dnnl::memory(d, cpuEngine(), const_cast<void *>(ptr));
}

/// A plain input in the primitive's layout: itself, or reordered into buf.
dnnl::memory in(dnnl::stream &s, const std::optional<dnnl::reorder> &r,
                const dnnl::memory::desc &plainDesc, const dnnl::memory::desc &want,
                const void *ptr, std::vector<char> &buf) {
  dnnl::memory m = mem(plainDesc, ptr);
  if (!r)
    return m;
  dnnl::memory t = scratchMem(buf, want);
  r->execute(s, m, t);
  return t;
}

/// The forward primitive descriptor a backward one is made against.
dnnl::convolution_forward::primitive_desc forwardHint(const ConvDims &cd, dt in) {
  dnnl::memory::desc xa(cd.src, in, tag::any), wa(cd.wei, in, tag::any), ya(cd.dst, in, tag::any),
      bd(cd.bias, dt::f32, tag::a);
  dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training,
                                     dnnl::algorithm::convolution_direct, xa, wa, bd, ya,
                                     cd.strides, cd.dil, cd.padL, cd.padR);
  return dnnl::convolution_forward::primitive_desc(fd, cpuEngine());
}

} // namespace

const float *dyF32(const Call &c) {
  thread_local ScratchVec<float> buf;
  if (!c.dyF32Cache)
    c.dyF32Cache = f32Of(c.dy, buf);
  return c.dyF32Cache;
}

// bf16 operands run on oneDNN's bf16 kernels (as PyTorch's autocast
// backward does) where asked (`low`) and oneDNN has a real kernel for the
// side, else on its f32 ones (f32 used in place, f16 / bf16 widened:
// exact). Gradients are rounded once into the outputs.
amprt_status oneDnnBackwardData(const Call &c, bool lowAsked) {
  const char *k = "amprt_conv_backward";
  AMPRT_DNNL_TRY(k, {
    const ConvDims &cd = c.cd;
    amprt_tensor *dx = c.dx;
    const bool dxDirect = writtenByReorder(dx);
    const dt dxOut = dxDirect && dx->dtype == AMPRT_BF16 ? dt::bf16 : dt::f32;
    // Primitives (oneDNN JIT-compiles each one: milliseconds) are cached by
    // everything that shapes them.
    std::vector<int64_t> key = cd.key();
    key.push_back(lowAsked);
    key.push_back((int64_t)dxOut);
    key.push_back(maxThreads()); // oneDNN splits a primitive for its thread count
    static std::mutex mu;
    static std::map<std::vector<int64_t>, DataPrim> cache;
    DataPrim prim;
    {
      std::lock_guard<std::mutex> lock(mu);
      DataPrim &e = cache[key];
      for (bool low : {true, false}) {
        if (e.prim || (low && !lowAsked))
          continue;
        dt in = low ? dt::bf16 : dt::f32;
        dnnl::memory::desc wa(cd.wei, in, tag::any), ya(cd.dst, in, tag::any),
            xo(cd.src, low ? dt::f32 : in, tag::any);
        dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, xo, wa, ya,
                                                cd.strides, cd.dil, cd.padL, cd.padR);
        dnnl::convolution_backward_data::primitive_desc pd(d, cpuEngine(), forwardHint(cd, in));
        if (low && isRef(pd.impl_info_str()))
          continue;
        e.prim = dnnl::convolution_backward_data(pd);
        e.s = Side{pd.diff_dst_desc(),
                   pd.weights_desc(),
                   pd.diff_src_desc(),
                   reorder(plain(cd.dst, in), pd.diff_dst_desc()),
                   reorder(plain(cd.wei, in), pd.weights_desc()),
                   reorder(pd.diff_src_desc(), plain(cd.src, dxOut)),
                   low,
                   pd.impl_info_str()};
      }
      prim = e;
    }
    thread_local dnnl::stream s(cpuEngine());
    thread_local ScratchVec<char> bufA, bufB, bufOut;
    thread_local ScratchVec<float> ww;
    const bool low = prim.s.low;
    const dt et = low ? dt::bf16 : dt::f32;
    std::vector<float> g(dxDirect ? 0 : amprt_tensor_numel(dx));
    const void *dyp = low ? c.dy->data : (const void *)dyF32(c);
    dnnl::memory dyi = in(s, prim.s.toA, plain(cd.dst, et), prim.s.a, dyp, bufA);
    c.dyData = dyi;
    c.dyDataLow = low;
    dnnl::memory wi = in(s, prim.s.toB, plain(cd.wei, et), prim.s.b,
                         low ? c.w->data : (const void *)f32Of(c.w, ww), bufB);
    dnnl::memory gp = mem(plain(cd.src, dxOut), dxDirect ? dx->data : g.data());
    dnnl::memory go = prim.s.fromOut ? scratchMem(bufOut, prim.s.out) : gp;
    if (desc::profilingRequested())
      noteKernelImpl(prim.s.impl.c_str());
    prim.prim->execute(s,
                       {{DNNL_ARG_DIFF_DST, dyi}, {DNNL_ARG_WEIGHTS, wi}, {DNNL_ARG_DIFF_SRC, go}});
    if (prim.s.fromOut)
      prim.s.fromOut->execute(s, go, gp);
    s.wait();
    if (!dxDirect)
      convertPar(g.data(), AMPRT_F32, dx->data, dx->dtype, g.size());
  })
  return AMPRT_OK;
}

amprt_status oneDnnBackwardWeights(const Call &c, bool lowAsked) {
  const char *k = "amprt_conv_backward";
  AMPRT_DNNL_TRY(k, {
    const ConvDims &cd = c.cd;
    amprt_tensor *dw = c.dw;
    const bool dwDirect = writtenByReorder(dw);
    const dt dwOut = dwDirect && dw->dtype == AMPRT_BF16 ? dt::bf16 : dt::f32;
    std::vector<int64_t> key = cd.key();
    key.push_back(lowAsked);
    key.push_back((int64_t)dwOut);
    key.push_back(maxThreads());
    static std::mutex mu;
    static std::map<std::vector<int64_t>, WeightsPrim> cache;
    WeightsPrim prim;
    {
      std::lock_guard<std::mutex> lock(mu);
      WeightsPrim &e = cache[key];
      for (bool low : {true, false}) {
        if (e.prim || (low && !lowAsked))
          continue;
        dt in = low ? dt::bf16 : dt::f32;
        // Without the bias: db is summed by the caller, in double (oneDNN's
        // f32 sum over N x H x W loses digits when the terms cancel).
        dnnl::memory::desc xa(cd.src, in, tag::any), ya(cd.dst, in, tag::any),
            wo(cd.wei, low ? dt::f32 : in, tag::any);
        dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, xa, wo, ya,
                                                   cd.strides, cd.dil, cd.padL, cd.padR);
        dnnl::convolution_backward_weights::primitive_desc pd(d, cpuEngine(), forwardHint(cd, in));
        if (low && isRef(pd.impl_info_str()))
          continue;
        e.prim = dnnl::convolution_backward_weights(pd);
        e.s = Side{pd.diff_dst_desc(),
                   pd.src_desc(),
                   pd.diff_weights_desc(),
                   reorder(plain(cd.dst, in), pd.diff_dst_desc()),
                   reorder(plain(cd.src, in), pd.src_desc()),
                   reorder(pd.diff_weights_desc(), plain(cd.wei, dwOut)),
                   low,
                   pd.impl_info_str()};
      }
      prim = e;
    }
    thread_local dnnl::stream s(cpuEngine());
    thread_local ScratchVec<char> bufA, bufB, bufOut;
    thread_local ScratchVec<float> xw;
    const bool low = prim.s.low;
    const dt et = low ? dt::bf16 : dt::f32;
    std::vector<float> gw(dwDirect ? 0 : amprt_tensor_numel(dw));
    // dy as the data side left it, where that is this side's layout.
    dnnl::memory dyi;
    if (c.dyData && c.dyDataLow == low && c.dyData->get_desc() == prim.s.a) {
      dyi = *c.dyData;
    } else {
      const void *dyp = low ? c.dy->data : (const void *)dyF32(c);
      dyi = in(s, prim.s.toA, plain(cd.dst, et), prim.s.a, dyp, bufA);
    }
    // (x is read only here: for dx alone it gives the shape, and
    // ConvTranspose passes its own, not yet written, result.)
    dnnl::memory xi = in(s, prim.s.toB, plain(cd.src, et), prim.s.b,
                         low ? c.x->data : (const void *)f32Of(c.x, xw), bufB);
    dnnl::memory gp = mem(plain(cd.wei, dwOut), dwDirect ? dw->data : gw.data());
    dnnl::memory go = prim.s.fromOut ? scratchMem(bufOut, prim.s.out) : gp;
    if (desc::profilingRequested())
      noteKernelImpl(prim.s.impl.c_str());
    prim.prim->execute(s,
                       {{DNNL_ARG_DIFF_DST, dyi}, {DNNL_ARG_SRC, xi}, {DNNL_ARG_DIFF_WEIGHTS, go}});
    if (prim.s.fromOut)
      prim.s.fromOut->execute(s, go, gp);
    s.wait();
    if (!dwDirect)
      convertPar(gw.data(), AMPRT_F32, dw->data, dw->dtype, gw.size());
  })
  return AMPRT_OK;
}

} // namespace amprt::conv

extern "C" int32_t amprt_channel_block(void) {
  static const int32_t block = [] {
    int isa = (int)dnnl_get_effective_cpu_isa();
    return (isa & (int)dnnl_cpu_isa_avx512_core) == (int)dnnl_cpu_isa_avx512_core ? 16 : 8;
  }();
  return block;
}
