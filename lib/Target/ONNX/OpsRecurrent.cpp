//===- OpsRecurrent.cpp - RNN, GRU, LSTM ------------------------------------===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

namespace {

/// RNN (kind 0), GRU (1) and LSTM (2), unrolled over the static sequence:
/// per direction one amp.gemm of all steps' inputs by W (with Wb), then per
/// step a gemm of the state by R (with Rb) and the gates' element-wise ops,
/// exactly the ONNX equations (gate orders: GRU z r h, LSTM i o f c;
/// peepholes P = [Pi, Po, Pf]; clip on the activations' inputs). Variable
/// sequence_lens keep the state and write zeros past each sequence's end
/// (a reverse pass starts at its last valid step; an empty sequence's final
/// state is 0, as onnxruntime's). Gradients come from the
/// ops composed (as torch's own nn.LSTM / nn.GRU backward).
LogicalResult handleRecurrent(NodeCtx &n, int kind) {
  SmallVector<llvm::StringRef> known{"activation_alpha", "activation_beta", "activations", "clip",
                                     "direction",        "hidden_size",     "layout"};
  if (kind == 1)
    known.push_back("linear_before_reset");
  if (kind == 2)
    known.push_back("input_forget");
  if (failed(n.allowAttrs(known)))
    return failure();
  auto dirS = n.getString("direction", std::string("forward"));
  auto hidden = n.getInt("hidden_size", std::nullopt);
  auto layout = n.getInt("layout", 0);
  auto lbr = n.getInt("linear_before_reset", 0);
  auto inForget = n.getInt("input_forget", 0);
  if (failed(dirS) || failed(hidden) || failed(layout) || failed(lbr) || failed(inForget))
    return failure();
  const onnx::AttributeProto *clipA = n.attr("clip");
  std::optional<float> clip;
  if (clipA) {
    auto c = n.getFloat("clip", std::nullopt);
    if (failed(c))
      return failure();
    if (!(*c > 0.0f))
      return n.fail("clip must be positive");
    clip = *c;
  }
  int64_t D = *dirS == "bidirectional" ? 2 : 1;
  if (*dirS != "forward" && *dirS != "reverse" && *dirS != "bidirectional")
    return n.fail("direction '" + *dirS + "' is not forward, reverse or bidirectional");
  int64_t Hd = *hidden, G = kind == 0 ? 1 : kind == 1 ? 3 : 4, nAct = kind + 1;
  if (Hd < 1)
    return n.fail("hidden_size must be positive");
  if (*layout != 0 && *layout != 1)
    return n.fail("layout must be 0 or 1");
  // Activations, alphas and betas, consumed in order.
  SmallVector<std::string> acts;
  if (const onnx::AttributeProto *a = n.attr("activations"))
    for (const auto &v : a->strings())
      acts.push_back(llvm::StringRef(v).lower());
  if (acts.empty())
    for (int64_t d = 0; d < D; ++d) {
      static const char *defaults[3][3] = {
          {"tanh"}, {"sigmoid", "tanh"}, {"sigmoid", "tanh", "tanh"}};
      for (int64_t k = 0; k < nAct; ++k)
        acts.push_back(defaults[kind][k]);
    }
  if ((int64_t)acts.size() != nAct * D)
    return n.fail("needs " + llvm::Twine(nAct * D) + " activations, got " +
                  llvm::Twine(acts.size()));
  std::vector<float> alphas, betas;
  if (const onnx::AttributeProto *a = n.attr("activation_alpha"))
    alphas.assign(a->floats().begin(), a->floats().end());
  if (const onnx::AttributeProto *a = n.attr("activation_beta"))
    betas.assign(a->floats().begin(), a->floats().end());
  struct Act {
    std::string name;
    float alpha, beta;
  };
  SmallVector<Act> actList;
  size_t ai = 0, bi = 0;
  for (const std::string &name : acts) {
    static const std::map<std::string, std::pair<int, float>> alphaOf = {
        {"leakyrelu", {1, 0.01f}}, {"thresholdedrelu", {1, 1.0f}},
        {"scaledtanh", {1, 1.0f}}, {"hardsigmoid", {1, 0.2f}},
        {"elu", {1, 1.0f}},        {"affine", {1, 1.0f}}};
    static const std::map<std::string, float> betaOf = {
        {"scaledtanh", 1.0f}, {"hardsigmoid", 0.5f}, {"affine", 0.0f}};
    static const std::set<std::string> plain = {"sigmoid", "tanh", "relu", "softsign", "softplus"};
    Act a{name, 0.0f, 0.0f};
    if (auto it = alphaOf.find(name); it != alphaOf.end())
      a.alpha = ai < alphas.size() ? alphas[ai++] : it->second.second;
    else if (!plain.count(name))
      return n.fail(
          "unsupported op ai.onnx." + n.node.op_type() + " with activation '" + name +
          "' (Sigmoid, Tanh, Relu, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, "
          "Softsign, Softplus, Affine are supported)");
    if (auto it = betaOf.find(name); it != betaOf.end())
      a.beta = bi < betas.size() ? betas[bi++] : it->second;
    actList.push_back(a);
  }

  auto x = n.input(0), w = n.input(1), r = n.input(2);
  if (failed(x) || failed(w) || failed(r))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  Type elt = xt.getElementType();
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  if (xt.getRank() != 3 || !xt.hasStaticShape())
    return n.fail("X must be 3-D with a static shape");
  int64_t T = xt.getDimSize(*layout ? 1 : 0), B = xt.getDimSize(*layout ? 0 : 1),
          I = xt.getDimSize(2);
  auto shapeString = [](ArrayRef<int64_t> shape) {
    std::string str = "[";
    for (auto [i, d] : llvm::enumerate(shape))
      str += (i ? ", " : "") + std::to_string(d);
    return str + "]";
  };
  auto expect = [&](Value v, ArrayRef<int64_t> shape, const char *what) -> LogicalResult {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getShape() != shape || t.getElementType() != elt)
      return n.fail(llvm::Twine(what) + " must be " + shapeString(shape) + " of X's type, got " +
                    shapeString(t.getShape()));
    return success();
  };
  if (failed(expect(*w, {D, G * Hd, I}, "W")) || failed(expect(*r, {D, G * Hd, Hd}, "R")))
    return failure();
  Value bias = n.optInput(3);
  if (bias && failed(expect(bias, {D, 2 * G * Hd}, "B")))
    return failure();
  Value seqLens = n.optInput(4);
  SmallVector<int64_t> stateShape =
      *layout ? SmallVector<int64_t>{B, D, Hd} : SmallVector<int64_t>{D, B, Hd};
  Value h0 = n.optInput(5), c0 = kind == 2 ? n.optInput(6) : Value(),
        peep = kind == 2 ? n.optInput(7) : Value();
  if ((h0 && failed(expect(h0, stateShape, "initial_h"))) ||
      (c0 && failed(expect(c0, stateShape, "initial_c"))) ||
      (peep && failed(expect(peep, {D, 3 * Hd}, "P"))))
    return failure();
  for (size_t i = 3; i < n.numInputs(); ++i)
    if (n.hasInput(i) && !n.optInput(i))
      return failure();
  if (seqLens) {
    auto st = cast<RankedTensorType>(seqLens.getType());
    if (st.getShape() != ArrayRef<int64_t>{B} || !isa<IntegerType>(st.getElementType()))
      return n.fail("sequence_lens must be [" + llvm::Twine(B) + "] integers");
    // Constant lengths all equal to the sequence's: no masks.
    auto it = n.im.consts.find(n.node.input(4));
    if (it != n.im.consts.end()) {
      auto lens = it->second.toInt64();
      if (llvm::all_of(lens, [&](int64_t l) { return l == T; }))
        seqLens = Value();
      else if (llvm::any_of(lens, [&](int64_t l) { return l < 0 || l > T; }))
        return n.fail("sequence_lens must lie in [0, " + llvm::Twine(T) + "]");
    }
  }

  Elementwise e{n};
  auto &bld = n.im.b;
  auto sliceOf = [&](Value v, int64_t axis, int64_t start, int64_t end) {
    return e.op<SliceOp>({v},
                         {named(n, "starts", ints(n, {start})), named(n, "ends", ints(n, {end})),
                          named(n, "axes", ints(n, {axis}))});
  };
  auto reshape = [&](Value v, ArrayRef<int64_t> shape) {
    return e.op<ReshapeOp>({v}, {named(n, "shape", ints(n, shape))});
  };
  auto transpose = [&](Value v, ArrayRef<int64_t> perm) {
    return e.op<TransposeOp>({v}, {named(n, "perm", ints(n, perm))});
  };
  auto gemmT = [&](Value a, Value b, Value c) { // a @ b^T + c
    SmallVector<Value> ins{a, b};
    if (c)
      ins.push_back(c);
    return e.op<GemmOp>(ins, {named(n, "trans_b", boolean(n, true))});
  };
  auto apply = [&](const Act &a, Value v) -> Value {
    if (clip)
      v = e.op<ClipOp>({v}, {named(n, "min", f32(n, -*clip)), named(n, "max", f32(n, *clip))});
    const std::string &k = a.name;
    if (k == "sigmoid")
      return e.op<SigmoidOp>({v});
    if (k == "tanh")
      return e.op<TanhOp>({v});
    if (k == "relu")
      return e.op<ReluOp>({v});
    if (k == "softsign")
      return e.op<SoftsignOp>({v});
    if (k == "softplus")
      return e.op<SoftplusOp>({v});
    if (k == "leakyrelu")
      return e.op<LeakyReluOp>({v}, {named(n, "alpha", f32(n, a.alpha))});
    if (k == "thresholdedrelu")
      return e.op<ThresholdedReluOp>({v}, {named(n, "alpha", f32(n, a.alpha))});
    if (k == "elu")
      return e.op<EluOp>({v}, {named(n, "alpha", f32(n, a.alpha))});
    if (k == "hardsigmoid")
      return e.op<HardSigmoidOp>(
          {v}, {named(n, "alpha", f32(n, a.alpha)), named(n, "beta", f32(n, a.beta))});
    if (k == "affine")
      return e.add(e.mul(v, e.cst(elt, a.alpha)), e.cst(elt, a.beta));
    // scaledtanh
    return e.mul(e.op<TanhOp>({e.mul(v, e.cst(elt, a.beta))}), e.cst(elt, a.alpha));
  };

  Value xs = *layout ? transpose(*x, {1, 0, 2}) : *x; // [T, B, I]
  Value x2 = reshape(xs, {T * B, I});
  Value lens;
  if (seqLens) {
    auto st = cast<RankedTensorType>(seqLens.getType());
    lens = CastOp::create(bld, n.loc, RankedTensorType::get({B, 1}, bld.getI64Type()),
                          reshape(seqLens, {B, 1}))
               .getResult();
    (void)st;
  }
  auto stateT = RankedTensorType::get({B, Hd}, elt);
  Value zeros = arith::ConstantOp::create(
      bld, n.loc, stateT, DenseElementsAttr::get(stateT, bld.getFloatAttr(elt, 0.0)));
  auto initial = [&](Value s, int64_t d) -> Value {
    if (!s)
      return zeros;
    Value sd = D == 1 ? s : sliceOf(s, *layout ? 1 : 0, d, d + 1);
    return reshape(sd, {B, Hd});
  };
  auto ofDir = [&](Value v, int64_t d) { return D == 1 ? v : sliceOf(v, 0, d, d + 1); };
  SmallVector<Value> ys(D), yh(D), yc(D);
  for (int64_t d = 0; d < D && e.ok; ++d) {
    bool reverse = *dirS == "reverse" || d == 1;
    Value wd = reshape(ofDir(*w, d), {G * Hd, I});
    Value rd = reshape(ofDir(*r, d), {G * Hd, Hd});
    Value wb, rb;
    if (bias) {
      Value bd = reshape(ofDir(bias, d), {2 * G * Hd});
      wb = sliceOf(bd, 0, 0, G * Hd);
      rb = sliceOf(bd, 0, G * Hd, 2 * G * Hd);
    }
    // Peepholes, hoisted out of the steps.
    Value pi, po, pf;
    if (peep) {
      Value pd = reshape(ofDir(peep, d), {3 * Hd});
      pi = sliceOf(pd, 0, 0, Hd);
      po = sliceOf(pd, 0, Hd, 2 * Hd);
      pf = sliceOf(pd, 0, 2 * Hd, 3 * Hd);
    }
    // Both biases go with the input's product, but for GRU with
    // linear_before_reset, whose Rbh is multiplied by the reset gate.
    Value rbh, xb;
    if (bias) {
      if (kind == 1 && *lbr) {
        rbh = sliceOf(rb, 0, 2 * Hd, 3 * Hd);
        xb = e.op<ConcatOp>({e.add(sliceOf(wb, 0, 0, 2 * Hd), sliceOf(rb, 0, 0, 2 * Hd)),
                             sliceOf(wb, 0, 2 * Hd, 3 * Hd)},
                            {named(n, "axis", i64(n, 0))});
      } else {
        xb = e.add(wb, rb);
      }
    }
    Value xw = gemmT(x2, wd, xb); // [T * B, G * Hd]
    const Act *f = &actList[d * nAct], *g = nAct > 1 ? &actList[d * nAct + 1] : nullptr,
              *h = nAct > 2 ? &actList[d * nAct + 2] : nullptr;
    Value H = initial(h0, d), C = kind == 2 ? initial(c0, d) : Value();
    // GRU: R split into the z / r rows and the h rows.
    Value rzr, rh;
    if (kind == 1) {
      rzr = sliceOf(rd, 0, 0, 2 * Hd);
      rh = sliceOf(rd, 0, 2 * Hd, 3 * Hd);
    }
    // state @ m^T + c: one gemm (c: the step's input product), nothing for
    // the zero state.
    auto plus = [&](Value state, Value m, Value c) {
      return state == zeros ? c : gemmT(state, m, c);
    };
    SmallVector<Value> steps(T);
    for (int64_t s = 0; s < T && e.ok; ++s) {
      int64_t t = reverse ? T - 1 - s : s;
      Value xt_ = sliceOf(xw, 0, t * B, (t + 1) * B); // [B, G * Hd]
      auto gate = [&](Value v, int64_t k) { return sliceOf(v, 1, k * Hd, (k + 1) * Hd); };
      Value Hn, Cn;
      if (kind == 0) {
        Hn = apply(*f, plus(H, rd, xt_));
      } else if (kind == 1) {
        Value zr = plus(H, rzr, sliceOf(xt_, 1, 0, 2 * Hd));
        Value z = apply(*f, gate(zr, 0)), rg = apply(*f, gate(zr, 1));
        Value xh = gate(xt_, 2), pre;
        if (*lbr) {
          Value hr = H == zeros ? rbh : gemmT(H, rh, rbh);
          pre = hr ? e.add(xh, e.mul(rg, hr)) : xh;
        } else {
          pre = H == zeros ? xh : gemmT(e.mul(rg, H), rh, xh);
        }
        Value hh = apply(*g, pre);
        Hn = H == zeros ? e.sub(hh, e.mul(z, hh))
                        : e.add(hh, e.mul(z, e.sub(H, hh))); // (1 - z) hh + z H
      } else {
        Value gates = plus(H, rd, xt_);
        Value gi = gate(gates, 0), go = gate(gates, 1), gf = gate(gates, 2), gc = gate(gates, 3);
        if (peep && C != zeros) {
          gi = e.add(gi, e.mul(pi, C));
          gf = e.add(gf, e.mul(pf, C));
        }
        Value it = apply(*f, gi);
        Value in = e.mul(it, apply(*g, gc));
        if (C == zeros) {
          Cn = in;
        } else {
          Value ft = *inForget ? e.sub(e.cst(elt, 1.0), it) : apply(*f, gf);
          Cn = e.add(e.mul(ft, C), in);
        }
        if (peep)
          go = e.add(go, e.mul(po, Cn));
        Hn = e.mul(apply(*f, go), apply(*h, Cn));
      }
      if (lens) {
        auto it64 = RankedTensorType::get({}, bld.getI64Type());
        Value tc = arith::ConstantOp::create(bld, n.loc, it64, DenseElementsAttr::get(it64, t));
        Value m = e.op<LessOp>({tc, lens}); // [B, 1]
        steps[t] = e.op<WhereOp>({m, Hn, zeros});
        Hn = e.op<WhereOp>({m, Hn, H});
        if (Cn)
          Cn = e.op<WhereOp>({m, Cn, C});
      } else {
        steps[t] = Hn;
      }
      H = Hn;
      C = Cn;
    }
    if (!e.ok)
      break;
    if (n.hasOutput(0)) {
      SmallVector<Value> parts;
      for (Value v : steps)
        parts.push_back(reshape(v, {1, 1, B, Hd}));
      ys[d] = T == 1 ? parts[0] : e.op<ConcatOp>(parts, {named(n, "axis", i64(n, 0))});
    }
    if (lens && (h0 || c0)) {
      // An empty sequence's final state is 0, not the initial one (as
      // onnxruntime).
      auto it64 = RankedTensorType::get({}, bld.getI64Type());
      Value z =
          arith::ConstantOp::create(bld, n.loc, it64, DenseElementsAttr::get(it64, (int64_t)0));
      Value some = e.op<LessOp>({z, lens});
      H = e.op<WhereOp>({some, H, zeros});
      if (kind == 2)
        C = e.op<WhereOp>({some, C, zeros});
    }
    yh[d] = reshape(H, {1, B, Hd});
    if (kind == 2)
      yc[d] = reshape(C, {1, B, Hd});
  }
  auto join = [&](ArrayRef<Value> v, int64_t axis) {
    return v.size() == 1 ? v[0] : e.op<ConcatOp>(v, {named(n, "axis", i64(n, axis))});
  };
  if (n.hasOutput(0)) {
    Value y = join(ys, 1); // [T, D, B, Hd]
    n.setOutput(0, *layout ? transpose(y, {2, 0, 1, 3}) : y);
  }
  if (n.hasOutput(1)) {
    Value v = join(yh, 0);
    n.setOutput(1, *layout ? transpose(v, {1, 0, 2}) : v);
  }
  if (kind == 2 && n.hasOutput(2)) {
    Value v = join(yc, 0);
    n.setOutput(2, *layout ? transpose(v, {1, 0, 2}) : v);
  }
  return e.ok ? success() : failure();
}

} // namespace

void registerRecurrentOps(OpRegistry &r) {
  r.on("RNN", 7, [](NodeCtx &n) { return handleRecurrent(n, 0); });
  r.on("GRU", 7, [](NodeCtx &n) { return handleRecurrent(n, 1); });
  r.on("LSTM", 7, [](NodeCtx &n) { return handleRecurrent(n, 2); });
}
} // namespace onnx_import
