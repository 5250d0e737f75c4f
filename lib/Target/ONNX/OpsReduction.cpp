//===- OpsReduction.cpp - reductions, ArgMax / ArgMin, CumSum, TopK ---------===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

/// Axes from the attribute (old opsets) or the constant input 1 (new ones).
FailureOr<std::optional<std::vector<int64_t>>> axesOf(NodeCtx &n, int inputSince) {
  if (n.opset >= inputSince) {
    if (n.attr("axes"))
      return n.fail("'axes' is an input since opset " + llvm::Twine(inputSince) +
                    ", not an attribute");
    if (!n.hasInput(1))
      return std::optional<std::vector<int64_t>>();
    auto v = n.constInts(1, "axes");
    if (failed(v))
      return failure();
    return std::optional<std::vector<int64_t>>(*v);
  }
  if (n.numInputs() > 1) // ignoring it would reduce / squeeze other axes
    return n.fail("has a second input, but 'axes' is an input only since opset " +
                  llvm::Twine(inputSince) + " (this model imports opset " + llvm::Twine(n.opset) +
                  "): use the 'axes' attribute");
  return n.getInts("axes");
}

namespace {

LogicalResult handleReduce(NodeCtx &n, llvm::StringRef opName, int axesInputSince) {
  if (failed(n.allowAttrs({"axes", "keepdims", "noop_with_empty_axes"})))
    return failure();
  auto keep = n.getInt("keepdims", 1);
  auto noop = n.getInt("noop_with_empty_axes", 0);
  auto axes = axesOf(n, axesInputSince);
  if (failed(keep) || failed(noop) || failed(axes))
    return failure();
  SmallVector<NamedAttribute> attrs{named(n, "keepdims", boolean(n, *keep != 0)),
                                    named(n, "noop_with_empty_axes", boolean(n, *noop != 0))};
  if (*axes)
    attrs.push_back(named(n, "axes", ints(n, **axes)));
  return simple(n, opName, {0}, attrs);
}

/// ReduceMin, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and
/// ReduceLogSumExp, composed from amp.reduce_sum / amp.reduce_max and
/// element-wise ops (so their gradients and precisions follow theirs):
/// min = -max(-x), l1 = sum |x|, l2 = sqrt(sum x^2), log_sum_exp =
/// log(sum e^(x - m)) + m with m = max x (no overflow).
LogicalResult handleComposedReduce(NodeCtx &n, llvm::StringRef kind) {
  if (failed(n.allowAttrs({"axes", "keepdims", "noop_with_empty_axes"})))
    return failure();
  auto keep = n.getInt("keepdims", 1);
  auto noop = n.getInt("noop_with_empty_axes", 0);
  auto axes = axesOf(n, 18);
  auto x = n.input(0);
  if (failed(keep) || failed(noop) || failed(axes) || failed(x))
    return failure();
  Type elt = getElementTypeOrSelf(x->getType());
  if (!isa<FloatType>(elt))
    return n.fail("only float tensors are supported");
  Elementwise e{n};
  auto reduce = [&](llvm::StringRef name, Value v, bool keepdims) -> Value {
    if (!e.ok || !v)
      return Value();
    SmallVector<NamedAttribute> attrs{named(n, "keepdims", boolean(n, keepdims)),
                                      named(n, "noop_with_empty_axes", boolean(n, *noop != 0))};
    if (*axes)
      attrs.push_back(named(n, "axes", ints(n, **axes)));
    auto op = n.im.create(n, name, {v}, attrs, 1);
    if (failed(op)) {
      e.ok = false;
      return Value();
    }
    return (*op)->getResult(0);
  };
  bool kd = *keep != 0;
  ClassMark mark(n);
  Value r;
  if (kind == "min") {
    Value neg = e.cst(elt, -1.0);
    r = e.mul(reduce(ReduceMaxOp::getOperationName(), e.mul(*x, neg), kd), neg);
  } else if (kind == "l1") {
    r = reduce(ReduceSumOp::getOperationName(), e.op<AbsOp>({*x}), kd);
  } else if (kind == "l2" || kind == "sum_square") {
    r = reduce(ReduceSumOp::getOperationName(), e.mul(*x, *x), kd);
    if (kind == "l2")
      r = e.sqrt(r);
  } else if (kind == "log_sum") {
    r = e.op<LogOp>({reduce(ReduceSumOp::getOperationName(), *x, kd)});
  } else { // log_sum_exp
    // An infinite maximum counts as 0 (torch.logsumexp): a row that is -inf
    // throughout gives -inf, not -inf - -inf = NaN; one with +inf gives +inf.
    double big = std::numeric_limits<double>::infinity();
    auto finiteMax = [&](bool keepdims) -> Value {
      Value m = reduce(ReduceMaxOp::getOperationName(), *x, keepdims);
      if (!e.ok || !m)
        return Value();
      Value isInf = e.op<EqualOp>({e.op<AbsOp>({m}), e.cst(elt, big)});
      return e.op<WhereOp>({isInf, e.cst(elt, 0.0), m});
    };
    Value m = finiteMax(true);
    Value s = reduce(ReduceSumOp::getOperationName(), e.op<ExpOp>({e.sub(*x, m)}), kd);
    Value mo = kd ? m : finiteMax(false);
    r = e.add(e.op<LogOp>({s}), mo);
  }
  if (!e.ok || !r)
    return failure();
  // The norms and log-sum-exp in fp32, as torch.autocast runs them (a square
  // in f16 overflows from 256 on); the minimum follows its input.
  if (kind != "min")
    mark.apply("fp32");
  n.setOutput(0, r);
  return success();
}

/// TopK (k an attribute before opset 10, a constant input after).
LogicalResult handleTopK(NodeCtx &n) {
  if (failed(n.allowAttrs(n.opset < 10
                              ? llvm::ArrayRef<llvm::StringRef>{"axis", "k"}
                              : llvm::ArrayRef<llvm::StringRef>{"axis", "largest", "sorted"})))
    return failure();
  auto axis = n.getInt("axis", -1), largest = n.getInt("largest", 1),
       sorted = n.getInt("sorted", 1);
  auto x = n.input(0);
  if (failed(axis) || failed(largest) || failed(sorted) || failed(x))
    return failure();
  int64_t k;
  if (n.opset < 10) {
    auto ka = n.getInt("k", std::nullopt);
    if (failed(ka))
      return failure();
    k = *ka;
  } else {
    auto ks = n.constInts(1, "K");
    if (failed(ks))
      return failure();
    if (ks->size() != 1)
      return n.fail("K must hold one value");
    k = (*ks)[0];
  }
  auto xt = cast<RankedTensorType>(x->getType());
  if (!isa<FloatType>(xt.getElementType()))
    return n.fail("only float tensors are supported");
  // sorted = 0 leaves the order free: sorted is one of them.
  auto op = n.im.tryCreate<TopKOp>(n, {*x},
                                   {named(n, "k", i64(n, k)), named(n, "axis", i64(n, *axis)),
                                    named(n, "largest", boolean(n, *largest != 0))},
                                   2);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  n.setOutput(1, (*op)->getResult(1));
  return success();
}

} // namespace

void registerReductionOps(OpRegistry &r) {
  r.on("CumSum", 11,
       [](NodeCtx &n) -> LogicalResult {
         if (failed(n.allowAttrs({"exclusive", "reverse"})))
           return failure();
         auto ex = n.getInt("exclusive", 0), rev = n.getInt("reverse", 0);
         auto axis = n.constInts(1, "axis");
         if (failed(ex) || failed(rev) || failed(axis))
           return failure();
         if (axis->size() != 1)
           return n.fail("'axis' must be a single value");
         return simple<CumSumOp>(n, {0},
                                 {named(n, "axis", i64(n, (*axis)[0])),
                                  named(n, "exclusive", boolean(n, *ex != 0)),
                                  named(n, "reverse", boolean(n, *rev != 0))});
       },
       {1});
  for (const char *name : {"ArgMax", "ArgMin"})
    r.on(name, 1, [isMin = std::string(name) == "ArgMin"](NodeCtx &n) -> LogicalResult {
      if (failed(n.allowAttrs(n.opset >= 12 ? llvm::ArrayRef<llvm::StringRef>{"axis", "keepdims",
                                                                              "select_last_index"}
                                            : llvm::ArrayRef<llvm::StringRef>{"axis", "keepdims"})))
        return failure();
      auto axis = n.getInt("axis", 0), keep = n.getInt("keepdims", 1),
           last = n.getInt("select_last_index", 0);
      if (failed(axis) || failed(keep) || failed(last))
        return failure();
      return simple(n, isMin ? ArgMinOp::getOperationName() : ArgMaxOp::getOperationName(), {0},
                    {named(n, "axis", i64(n, *axis)), named(n, "keepdims", boolean(n, *keep != 0)),
                     named(n, "select_last_index", boolean(n, *last != 0))});
    });
  r.on("TopK", 1, handleTopK, {1});
  r.on("ReduceSum", 1,
       [](NodeCtx &n) { return handleReduce(n, ReduceSumOp::getOperationName(), 13); }, {1});
  r.on("ReduceMean", 1,
       [](NodeCtx &n) { return handleReduce(n, ReduceMeanOp::getOperationName(), 18); }, {1});
  r.on("ReduceMax", 1,
       [](NodeCtx &n) { return handleReduce(n, ReduceMaxOp::getOperationName(), 18); }, {1});
  r.on("ReduceProd", 1,
       [](NodeCtx &n) { return handleReduce(n, ReduceProdOp::getOperationName(), 18); }, {1});
  for (auto [onnxName, kind] :
       {std::make_pair("ReduceMin", "min"), std::make_pair("ReduceL1", "l1"),
        std::make_pair("ReduceL2", "l2"), std::make_pair("ReduceSumSquare", "sum_square"),
        std::make_pair("ReduceLogSum", "log_sum"),
        std::make_pair("ReduceLogSumExp", "log_sum_exp")})
    r.on(onnxName, 1,
         [kind = std::string(kind)](NodeCtx &n) { return handleComposedReduce(n, kind); }, {1});
}
} // namespace onnx_import
