//===- LowerOps.cpp - each amp op's runtime descriptor --------------------===//
//
// Lowerer::lowerOp: the opcode, tensors and attributes of each op's
// descriptor, in the layout runtime/include/amprt/amprt.h documents.
//
//===----------------------------------------------------------------------===//

#include "Lowerer.h"

using namespace mlir;
using namespace mlir::amp;

namespace mlir::amp::lowering {

/// Explicit pads of a window op from auto_pad (static shapes).
void windowPads(StringRef autoPad, ArrayRef<int64_t> in, ArrayRef<int64_t> out,
                ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides, ArrayRef<int64_t> dil,
                std::optional<ArrayRef<int64_t>> pads, SmallVectorImpl<int64_t> &pb,
                SmallVectorImpl<int64_t> &pe) {
  size_t n = in.size();
  for (size_t i = 0; i < n; ++i) {
    int64_t eff = (kernel[i] - 1) * dil[i] + 1;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      int64_t total = std::max<int64_t>(0, (out[i] - 1) * strides[i] + eff - in[i]);
      int64_t small = total / 2, large = total - small;
      pb.push_back(autoPad == "SAME_UPPER" ? small : large);
      pe.push_back(autoPad == "SAME_UPPER" ? large : small);
    } else if (autoPad == "NOTSET" && pads) {
      pb.push_back((*pads)[i]);
      pe.push_back((*pads)[i + n]);
    } else {
      pb.push_back(0);
      pe.push_back(0);
    }
  }
}

/// The runtime's loss attributes: reduction, has_ignore, ignore_index,
/// has_weights (the forward losses and their gradients).
static SmallVector<int64_t> lossAttrs(Operation *op, bool hasWeights) {
  auto redAttr = op->getAttrOfType<StringAttr>("reduction");
  StringRef red = redAttr ? redAttr.getValue() : "mean";
  auto ignore = op->getAttrOfType<IntegerAttr>("ignore_index");
  return {red == "none"  ? AMPRT_REDUCTION_NONE
          : red == "sum" ? AMPRT_REDUCTION_SUM
                         : AMPRT_REDUCTION_MEAN,
          ignore ? 1 : 0, ignore ? ignore.getInt() : 0, hasWeights ? 1 : 0};
}

/// The runtime's convolution attributes (spatial, group, 0, then per dim
/// stride, dilation, pad begin, pad end) for amp.conv / amp.conv_grad.
template <typename ConvLike>
static LogicalResult convAttrs(ConvLike o, RankedTensorType y, SmallVector<int64_t> &attrs) {
  if (o.getAccumulate() && !o.getAccumulate()->isF32())
    return o.emitOpError("accumulate = ")
           << *o.getAccumulate() << " is not supported by the CPU runtime (f32 only)";
  auto x = cast<RankedTensorType>(o.getX().getType());
  auto w = cast<RankedTensorType>(o.getW().getType());
  int64_t n = x.getRank() - 2;
  if (n < 1 || n > 3)
    return o.emitOpError("needs 1 to 3 spatial dims");
  SmallVector<int64_t> kernel(w.getShape().drop_front(2)), strides, dil, pb, pe;
  for (int64_t i = 0; i < n; ++i) {
    strides.push_back(o.getStrides() ? (*o.getStrides())[i] : 1);
    dil.push_back(o.getDilations() ? (*o.getDilations())[i] : 1);
  }
  windowPads(o.getAutoPad(), x.getShape().drop_front(2), y.getShape().drop_front(2), kernel,
             strides, dil, o.getPads(), pb, pe);
  attrs = {n, (int64_t)o.getGroup(), 0};
  for (int64_t i = 0; i < n; ++i)
    attrs.append({strides[i], dil[i], pb[i], pe[i]});
  return success();
}

/// The strides (in the input's elements) and offset of a slice's view of
/// its input: ONNX Slice's clamping of starts, per sliced axis.
static SmallVector<int64_t> sliceView(RankedTensorType in, ArrayRef<int64_t> starts,
                                      std::optional<ArrayRef<int64_t>> axes,
                                      std::optional<ArrayRef<int64_t>> steps, int64_t &offset) {
  int64_t r = in.getRank();
  SmallVector<int64_t> st = contiguousStrides(in.getShape());
  offset = 0;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t ax = axes ? normAxis((*axes)[i], r) : (int64_t)i;
    int64_t step = steps ? (*steps)[i] : 1, dim = in.getDimSize(ax);
    int64_t s = starts[i];
    if (s < 0)
      s = s < -dim ? 0 : s + dim;
    s = step > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
    offset += s * st[ax];
    st[ax] *= step;
  }
  return st;
}

LogicalResult Lowerer::lowerOp(Operation *op) {
  if (fusedAway.contains(op))
    return success();
  if (isAliasOp(op)) {
    ptrs[op->getResult(0)] = ptrOf(op->getOperand(0));
    return success();
  }
  auto slots = op->getAttrOfType<DenseI64ArrayAttr>("amp.slots");
  if (!slots || (int64_t)slots.size() != op->getNumResults())
    return op->emitOpError("has no memory plan: run amp-plan-memory first");
  for (auto [r, off] : llvm::zip(op->getResults(), slots.asArrayRef())) {
    if (off < 0)
      return op->emitOpError("result without an arena slot");
    // An i64 index: arenas may exceed 2 GiB.
    Value offset = LLVM::ConstantOp::create(b, op->getLoc(), i64, b.getI64IntegerAttr(off));
    ptrs[r] = LLVM::GEPOp::create(b, op->getLoc(), ptrTy, b.getI8Type(), arena,
                                  ArrayRef<LLVM::GEPArg>{offset});
    if (auto p = placed.find(r); p != placed.end())
      ptrs[r] = p->second;
  }
  Desc d;
  auto all = [&](ValueRange vs) -> LogicalResult {
    for (Value v : vs)
      if (failed(tensor(d, v, op)))
        return failure();
    return success();
  };
  auto unary = [&](amprt_unary_op u, double alpha,
                   std::optional<double> beta = {}) -> LogicalResult {
    if (failed(all(op->getOperands())) || failed(all(op->getResults())))
      return failure();
    d.attrs = {u, f64Bits(alpha)};
    if (beta)
      d.attrs.push_back(f64Bits(*beta));
    return emit(op, AMPRT_OP_UNARY, d);
  };
  auto binary = [&](amprt_binary_op bo) -> LogicalResult {
    if (failed(all(op->getOperands())) || failed(all(op->getResults())))
      return failure();
    d.attrs = {bo};
    return emit(op, AMPRT_OP_BINARY, d);
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](AddOp) { return binary(AMPRT_BINARY_ADD); })
      .Case([&](SubOp) { return binary(AMPRT_BINARY_SUB); })
      .Case([&](MulOp) { return binary(AMPRT_BINARY_MUL); })
      .Case([&](DivOp) { return binary(AMPRT_BINARY_DIV); })
      .Case([&](PowOp) { return binary(AMPRT_BINARY_POW); })
      .Case([&](MaxOp) { return binary(AMPRT_BINARY_MAX); })
      .Case([&](MinOp) { return binary(AMPRT_BINARY_MIN); })
      .Case([&](EqualOp) { return binary(AMPRT_BINARY_EQ); })
      .Case([&](LessOp) { return binary(AMPRT_BINARY_LT); })
      .Case([&](LessEqualOp) { return binary(AMPRT_BINARY_LE); })
      .Case([&](GreaterOp) { return binary(AMPRT_BINARY_GT); })
      .Case([&](GreaterEqualOp) { return binary(AMPRT_BINARY_GE); })
      .Case([&](AndOp) { return binary(AMPRT_BINARY_AND); })
      .Case([&](OrOp) { return binary(AMPRT_BINARY_OR); })
      .Case([&](XorOp) { return binary(AMPRT_BINARY_XOR); })
      .Case([&](ModOp) { return binary(AMPRT_BINARY_MOD); })
      .Case([&](FModOp) { return binary(AMPRT_BINARY_FMOD); })
      .Case([&](ReluOp) { return unary(AMPRT_UNARY_RELU, 0); })
      .Case([&](SqrtOp) { return unary(AMPRT_UNARY_SQRT, 0); })
      .Case([&](ExpOp) { return unary(AMPRT_UNARY_EXP, 0); })
      .Case([&](LogOp) { return unary(AMPRT_UNARY_LOG, 0); })
      .Case([&](ErfOp) { return unary(AMPRT_UNARY_ERF, 0); })
      .Case([&](TanhOp) { return unary(AMPRT_UNARY_TANH, 0); })
      .Case([&](SigmoidOp) { return unary(AMPRT_UNARY_SIGMOID, 0); })
      .Case([&](AbsOp) { return unary(AMPRT_UNARY_ABS, 0); })
      .Case([&](ReciprocalOp) { return unary(AMPRT_UNARY_RECIPROCAL, 0); })
      .Case([&](SoftplusOp) { return unary(AMPRT_UNARY_SOFTPLUS, 0); })
      .Case([&](HardSwishOp) { return unary(AMPRT_UNARY_HARD_SWISH, 0); })
      .Case([&](SoftsignOp) { return unary(AMPRT_UNARY_SOFTSIGN, 0); })
      .Case([&](SinOp) { return unary(AMPRT_UNARY_SIN, 0); })
      .Case([&](CosOp) { return unary(AMPRT_UNARY_COS, 0); })
      .Case([&](TanOp) { return unary(AMPRT_UNARY_TAN, 0); })
      .Case([&](AsinOp) { return unary(AMPRT_UNARY_ASIN, 0); })
      .Case([&](AcosOp) { return unary(AMPRT_UNARY_ACOS, 0); })
      .Case([&](AtanOp) { return unary(AMPRT_UNARY_ATAN, 0); })
      .Case([&](SinhOp) { return unary(AMPRT_UNARY_SINH, 0); })
      .Case([&](CoshOp) { return unary(AMPRT_UNARY_COSH, 0); })
      .Case([&](AsinhOp) { return unary(AMPRT_UNARY_ASINH, 0); })
      .Case([&](AcoshOp) { return unary(AMPRT_UNARY_ACOSH, 0); })
      .Case([&](AtanhOp) { return unary(AMPRT_UNARY_ATANH, 0); })
      .Case([&](FloorOp) { return unary(AMPRT_UNARY_FLOOR, 0); })
      .Case([&](CeilOp) { return unary(AMPRT_UNARY_CEIL, 0); })
      .Case([&](RoundOp) { return unary(AMPRT_UNARY_ROUND, 0); })
      .Case([&](SignOp) { return unary(AMPRT_UNARY_SIGN, 0); })
      .Case([&](EluOp o) { return unary(AMPRT_UNARY_ELU, o.getAlpha().convertToDouble()); })
      .Case([&](CeluOp o) { return unary(AMPRT_UNARY_CELU, o.getAlpha().convertToDouble()); })
      .Case([&](SeluOp o) {
        return unary(AMPRT_UNARY_SELU, o.getAlpha().convertToDouble(),
                     o.getGamma().convertToDouble());
      })
      .Case([&](HardSigmoidOp o) {
        return unary(AMPRT_UNARY_HARD_SIGMOID, o.getAlpha().convertToDouble(),
                     o.getBeta().convertToDouble());
      })
      .Case([&](ThresholdedReluOp o) {
        return unary(AMPRT_UNARY_THRESHOLDED_RELU, o.getAlpha().convertToDouble());
      })
      .Case([&](ClipOp o) {
        return unary(AMPRT_UNARY_CLAMP, o.getMin().convertToDouble(), o.getMax().convertToDouble());
      })
      .Case([&](LeakyReluOp o) {
        return unary(AMPRT_UNARY_LEAKY_RELU, o.getAlpha().convertToDouble());
      })
      .Case([&](GeluOp o) {
        return unary(o.getApproximate() == "tanh" ? AMPRT_UNARY_GELU_TANH : AMPRT_UNARY_GELU, 0);
      })
      .Case([&](CastOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_CAST, d);
      })
      .Case([&](WhereOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_WHERE, d);
      })
      .Case([&](TransposeOp o) -> LogicalResult {
        auto in = cast<RankedTensorType>(o.getInput().getType());
        auto outTy = cast<RankedTensorType>(o.getType());
        SmallVector<int64_t> inStrides = contiguousStrides(in.getShape()), st;
        int64_t r = in.getRank();
        for (int64_t i = 0; i < r; ++i)
          st.push_back(inStrides[o.getPerm() ? (*o.getPerm())[i] : r - 1 - i]);
        if (failed(tensor(d, o.getInput(), op, outTy.getShape(), st)) ||
            failed(tensor(d, o.getResult(), op)))
          return failure();
        return emit(op, AMPRT_OP_COPY, d);
      })
      .Case([&](ExpandOp o) -> LogicalResult {
        auto in = cast<RankedTensorType>(o.getInput().getType());
        auto outTy = cast<RankedTensorType>(o.getType());
        SmallVector<int64_t> inStrides = contiguousStrides(in.getShape());
        int64_t lead = outTy.getRank() - in.getRank();
        SmallVector<int64_t> st;
        for (int64_t i = 0; i < outTy.getRank(); ++i)
          st.push_back(i < lead || in.getDimSize(i - lead) == 1 ? 0 : inStrides[i - lead]);
        if (failed(tensor(d, o.getInput(), op, outTy.getShape(), st)) ||
            failed(tensor(d, o.getResult(), op)))
          return failure();
        return emit(op, AMPRT_OP_COPY, d);
      })
      .Case([&](SliceOp o) -> LogicalResult {
        auto in = cast<RankedTensorType>(o.getInput().getType());
        auto outTy = cast<RankedTensorType>(o.getType());
        int64_t offset = 0;
        SmallVector<int64_t> st = sliceView(in, o.getStarts(), o.getAxes(), o.getSteps(), offset);
        if (failed(tensor(d, o.getInput(), op, outTy.getShape(), st, offset)) ||
            failed(tensor(d, o.getResult(), op)))
          return failure();
        return emit(op, AMPRT_OP_COPY, d);
      })
      .Case([&](SliceGradOp o) -> LogicalResult {
        // dy into the slice's view of dx, after dx is zeroed.
        auto whole = cast<RankedTensorType>(o.getDx().getType());
        auto dyTy = cast<RankedTensorType>(o.getDy().getType());
        int64_t offset = 0;
        SmallVector<int64_t> st =
            sliceView(whole, o.getStarts(), o.getAxes(), o.getSteps(), offset);
        if (failed(tensor(d, o.getDy(), op)) ||
            failed(tensor(d, o.getDx(), op, dyTy.getShape(), st, offset)) ||
            failed(tensor(d, o.getDx(), op)))
          return failure();
        return emit(op, AMPRT_OP_SLICE_GRAD, d);
      })
      .Case([&](CumSumOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis((int64_t)o.getAxis(), o.getType().getRank()), o.getExclusive() ? 1 : 0,
                   o.getReverse() ? 1 : 0};
        return emit(op, AMPRT_OP_CUMSUM, d);
      })
      .Case<GridSampleOp, GridSampleGradOp>([&](Operation *) -> LogicalResult {
        auto mode = op->getAttrOfType<StringAttr>("mode"),
             pad = op->getAttrOfType<StringAttr>("padding_mode");
        auto align = op->getAttrOfType<BoolAttr>("align_corners");
        StringRef m = mode ? mode.getValue() : "bilinear", p = pad ? pad.getValue() : "zeros";
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {m == "nearest"   ? 1
                   : m == "bicubic" ? 2
                                    : 0,
                   p == "border"       ? 1
                   : p == "reflection" ? 2
                                       : 0,
                   align && align.getValue() ? 1 : 0};
        if (isa<GridSampleOp>(op))
          return emit(op, AMPRT_OP_GRID_SAMPLE, d);
        for (Value r : op->getResults())
          d.attrs.push_back(r.use_empty() ? 0 : 1);
        return emit(op, AMPRT_OP_GRID_SAMPLE_GRAD, d);
      })
      .Case([&](TopKOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis((int64_t)o.getAxis(), o.getInput().getType().getRank()),
                   o.getLargest() ? 1 : 0};
        return emit(op, AMPRT_OP_TOPK, d);
      })
      .Case<ArgMaxOp, ArgMinOp>([&](Operation *) -> LogicalResult {
        auto in = cast<RankedTensorType>(op->getOperand(0).getType());
        int64_t axis = normAxis(op->getAttrOfType<IntegerAttr>("axis").getInt(), in.getRank());
        SmallVector<int64_t> keep(in.getShape());
        keep[axis] = 1;
        if (failed(tensor(d, op->getOperand(0), op)) ||
            failed(tensor(d, op->getResult(0), op, keep)))
          return failure();
        auto last = op->getAttrOfType<BoolAttr>("select_last_index");
        d.attrs = {axis, isa<ArgMinOp>(op) ? 1 : 0, last && last.getValue() ? 1 : 0};
        return emit(op, AMPRT_OP_ARG_REDUCE, d);
      })
      .Case([&](GatherElementsOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), cast<RankedTensorType>(o.getData().getType()).getRank())};
        return emit(op, AMPRT_OP_GATHER_ELEMENTS, d);
      })
      .Case([&](GatherElementsGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {(int64_t)o.getAxis()};
        return emit(op, AMPRT_OP_GATHER_ELEMENTS_GRAD, d);
      })
      .Case([&](GatherGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {(int64_t)o.getAxis()};
        return emit(op, AMPRT_OP_GATHER_GRAD, d);
      })
      .Case([&](ReduceMaxGradOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_REDUCE_MAX_GRAD, d);
      })
      .Case([&](ConcatOp o) -> LogicalResult {
        if (failed(all(o.getInputs())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), o.getType().getRank())};
        return emit(op, AMPRT_OP_CONCAT, d);
      })
      .Case([&](GatherOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), cast<RankedTensorType>(o.getData().getType()).getRank())};
        return emit(op, AMPRT_OP_GATHER, d);
      })
      .Case<RandomNormalOp, RandomUniformOp, BernoulliOp>([&](Operation *) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        if (auto o = dyn_cast<RandomNormalOp>(op))
          d.attrs = {AMPRT_RANDOM_NORMAL, f64Bits(o.getMean().convertToDouble()),
                     f64Bits(o.getScale().convertToDouble())};
        else if (auto o = dyn_cast<RandomUniformOp>(op))
          d.attrs = {AMPRT_RANDOM_UNIFORM, f64Bits(o.getLow().convertToDouble()),
                     f64Bits(o.getHigh().convertToDouble())};
        else
          d.attrs = {AMPRT_RANDOM_BERNOULLI, f64Bits(0.0), f64Bits(0.0)};
        return emit(op, AMPRT_OP_RANDOM, d);
      })
      .Case([&](DropoutOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getRatio().convertToDouble()), o.getTrainingMode() ? 1 : 0};
        return emit(op, AMPRT_OP_DROPOUT, d);
      })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceProdOp, GlobalAveragePoolOp>(
          [&](Operation *) -> LogicalResult {
            Value x = op->getOperand(0);
            auto in = cast<RankedTensorType>(x.getType());
            SmallVector<int64_t> axes;
            int64_t kind = isa<ReduceSumOp>(op)    ? AMPRT_REDUCE_SUM
                           : isa<ReduceMaxOp>(op)  ? AMPRT_REDUCE_MAX
                           : isa<ReduceProdOp>(op) ? AMPRT_REDUCE_PROD
                                                   : AMPRT_REDUCE_MEAN;
            if (isa<GlobalAveragePoolOp>(op)) {
              for (int64_t i = 2; i < in.getRank(); ++i)
                axes.push_back(i);
            } else {
              auto list = op->getAttrOfType<DenseI64ArrayAttr>("axes");
              bool noop = op->getAttrOfType<BoolAttr>("noop_with_empty_axes") &&
                          op->getAttrOfType<BoolAttr>("noop_with_empty_axes").getValue();
              if (!list || list.empty()) {
                if (noop) {
                  if (failed(all(op->getOperands())) || failed(all(op->getResults())))
                    return failure();
                  return emit(op, AMPRT_OP_COPY, d);
                }
                for (int64_t i = 0; i < in.getRank(); ++i)
                  axes.push_back(i);
              } else {
                for (int64_t a : list.asArrayRef())
                  axes.push_back(normAxis(a, in.getRank()));
                llvm::sort(axes);
              }
            }
            SmallVector<int64_t> keep(in.getShape());
            for (int64_t a : axes)
              keep[a] = 1;
            if (failed(tensor(d, x, op)) || failed(tensor(d, op->getResult(0), op, keep)))
              return failure();
            d.attrs = {kind, (int64_t)axes.size()};
            d.attrs.append(axes.begin(), axes.end());
            if (blocked.contains(x))
              d.attrs.push_back(1);
            return emit(op, AMPRT_OP_REDUCE, d);
          })
      .Case<SoftmaxOp, LogSoftmaxOp>([&](Operation *) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        int64_t axis = op->getAttrOfType<IntegerAttr>("axis").getInt();
        d.attrs = {normAxis(axis, cast<RankedTensorType>(op->getResult(0).getType()).getRank()),
                   isa<LogSoftmaxOp>(op) ? 1 : 0};
        return emit(op, AMPRT_OP_SOFTMAX, d);
      })
      .Case([&](LayerNormOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), o.getX().getType().getRank()),
                   f64Bits(o.getEpsilon().convertToDouble()), o.getBias() ? 1 : 0};
        return emit(op, AMPRT_OP_LAYER_NORM, d);
      })
      .Case([&](BatchNormOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getEpsilon().convertToDouble()),
                   f64Bits(o.getMomentum().convertToDouble()), o.getTrainingMode() ? 1 : 0};
        return emit(op, AMPRT_OP_BATCH_NORM, d);
      })
      .Case([&](GemmOp o) -> LogicalResult {
        if (o.getAccumulate() && !o.getAccumulate()->isF32())
          return op->emitOpError("accumulate = ")
                 << *o.getAccumulate() << " is not supported by the CPU runtime (f32 only)";
        if (failed(all(op->getOperands())))
          return failure();
        d.attrs = {f64Bits(o.getAlpha().convertToDouble()), f64Bits(o.getBeta().convertToDouble()),
                   o.getTransA() ? 1 : 0, o.getTransB() ? 1 : 0, o.getC() ? 1 : 0};
        if (Operation *relu = gemmRelu.lookup(op)) {
          // Written into the ReLU's result, in its own arena slot.
          Value out = relu->getResult(0);
          if (failed(slotPtr(out)) || failed(tensor(d, out, op)))
            return failure();
          d.attrs.push_back(AMPRT_GEMM_RELU);
          return emit(op, AMPRT_OP_GEMM, d);
        }
        if (failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_GEMM, d);
      })
      .Case([&](MatMulOp o) -> LogicalResult {
        if (o.getAccumulate() && !o.getAccumulate()->isF32())
          return op->emitOpError("accumulate = ")
                 << *o.getAccumulate() << " is not supported by the CPU runtime (f32 only)";
        auto a = cast<RankedTensorType>(o.getLhs().getType());
        if (!isa<FloatType>(a.getElementType()))
          return op->emitOpError("integer matrix products are not supported by the "
                                 "runtime");
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_MATMUL, d);
      })
      .Case([&](ConvOp o) -> LogicalResult {
        if (failed(convAttrs(o, o.getType(), d.attrs)) || failed(all(op->getOperands())))
          return failure();
        d.attrs[2] = o.getBias() ? 1 : 0;
        ConvCall cc = convCalls.lookup(op);
        Value out = convWrites(o);
        if (out != o.getOutput() && failed(slotPtr(out)))
          return failure(); // the last fused op's result, in its own slot
        auto bn = dyn_cast_or_null<BatchNormOp>(cc.bn);
        if (bn && failed(all({bn.getScale(), bn.getBias(), bn.getMean(), bn.getVar()})))
          return failure();
        if (failed(tensor(d, out, op)))
          return failure();
        int64_t flags = (cc.relu ? AMPRT_CONV_RELU : 0) |
                        (blocked.contains(o.getX()) ? AMPRT_CONV_SRC_BLOCKED : 0) |
                        (blocked.contains(out) ? AMPRT_CONV_DST_BLOCKED : 0);
        if (bn) {
          d.attrs.push_back(f64Bits(bn.getEpsilon().convertToDouble()));
          d.attrs.push_back(flags);
          return emit(op, AMPRT_OP_CONV_BN, d);
        }
        if (flags)
          d.attrs.push_back(flags);
        return emit(op, AMPRT_OP_CONV, d);
      })
      .Case([&](NLLLossGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = lossAttrs(op, o.getWeight() != nullptr);
        return emit(op, AMPRT_OP_NLL_LOSS_GRAD, d);
      })
      .Case([&](SGDUpdateOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getLr().convertToDouble()),
                   f64Bits(o.getMomentum().convertToDouble()),
                   f64Bits(o.getDampening().convertToDouble()),
                   f64Bits(o.getWeightDecay().convertToDouble()),
                   o.getNesterov() ? 1 : 0,
                   o.getMomentumBuf() ? 1 : 0};
        return emit(op, AMPRT_OP_SGD_UPDATE, d);
      })
      .Case([&](AdamUpdateOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getLr().convertToDouble()),
                   f64Bits(o.getBeta1().convertToDouble()),
                   f64Bits(o.getBeta2().convertToDouble()),
                   f64Bits(o.getEps().convertToDouble()),
                   f64Bits(o.getWeightDecay().convertToDouble()),
                   o.getMode() == "hf" ? 2 : o.getDecoupled() ? 1 : 0};
        return emit(op, AMPRT_OP_ADAM_UPDATE, d);
      })
      .Case([&](UnscaleAndCheckOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {(int64_t)o.getGrads().size()};
        return emit(op, AMPRT_OP_UNSCALE_AND_CHECK, d);
      })
      .Case([&](ClipGradNormOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {(int64_t)o.getGrads().size(), f64Bits(o.getMaxNorm().convertToDouble())};
        return emit(op, AMPRT_OP_CLIP_GRAD_NORM, d);
      })
      .Case([&](UpdateScaleOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getGrowthFactor().convertToDouble()),
                   f64Bits(o.getBackoffFactor().convertToDouble()),
                   (int64_t)o.getGrowthInterval(),
                   (int64_t)o.getHysteresis(),
                   f64Bits(o.getMinScale().convertToDouble()),
                   o.getOnMinScale() == "error" ? 1 : 0};
        return emit(op, AMPRT_OP_UPDATE_SCALE, d);
      })
      .Case([&](MicroStepOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {(int64_t)o.getEvery()};
        return emit(op, AMPRT_OP_MICRO_STEP, d);
      })
      .Case([&](StepCountOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_STEP_COUNT, d);
      })
      .Case([&](BatchNormGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getEpsilon().convertToDouble())};
        for (Value r : op->getResults())
          d.attrs.push_back(r.use_empty() ? 0 : 1);
        return emit(op, AMPRT_OP_BATCH_NORM_GRAD, d);
      })
      .Case([&](LayerNormGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), o.getX().getType().getRank())};
        for (Value r : op->getResults())
          d.attrs.push_back(r.use_empty() ? 0 : 1);
        return emit(op, AMPRT_OP_LAYER_NORM_GRAD, d);
      })
      .Case([&](ConvGradOp o) -> LogicalResult {
        // attrs: the conv's, then which of dx, dw, db are wanted.
        if (failed(convAttrs(o, o.getDy().getType(), d.attrs)) || failed(all(op->getOperands())) ||
            failed(all(op->getResults())))
          return failure();
        for (Value r : op->getResults())
          d.attrs.push_back(r.use_empty() ? 0 : 1);
        return emit(op, AMPRT_OP_CONV_GRAD, d);
      })
      .Case([&](ConvTransposeOp o) -> LogicalResult {
        // amp.conv's input gradient: the runtime's conv_grad with the result
        // as the convolution's input (its shape only) and dx, x as its dy;
        // then the bias added in place, broadcast along the channels.
        if (o.getAccumulate() && !o.getAccumulate()->isF32())
          return op->emitOpError("accumulate = ")
                 << *o.getAccumulate() << " is not supported by the CPU runtime (f32 only)";
        auto y = o.getType();
        auto x = o.getX().getType();
        int64_t n = x.getRank() - 2;
        if (n < 1 || n > 3)
          return op->emitOpError("needs 1 to 3 spatial dims");
        if (!y.hasStaticShape())
          return op->emitOpError("needs a static result shape");
        d.attrs = {n, (int64_t)o.getGroup(), 0};
        for (int64_t i = 0; i < n; ++i)
          d.attrs.append({o.getStrides() ? (*o.getStrides())[i] : 1,
                          o.getDilations() ? (*o.getDilations())[i] : 1,
                          o.getPads() ? (*o.getPads())[i] : 0,
                          o.getPads() ? (*o.getPads())[n + i] : 0});
        d.attrs.append({1, 0, 0});
        Value out = o.getOutput();
        if (failed(all({out, o.getW(), o.getX(), out, o.getW(), o.getW()})))
          return failure();
        if (failed(emit(op, AMPRT_OP_CONV_GRAD, d)))
          return failure();
        Value bias = o.getBias();
        if (!bias)
          return success();
        Desc add;
        SmallVector<int64_t> bshape(y.getRank(), 1);
        bshape[1] = y.getDimSize(1);
        if (failed(tensor(add, out, op)) ||
            failed(tensor(add, bias, op, ArrayRef<int64_t>(bshape))) ||
            failed(tensor(add, out, op)))
          return failure();
        add.attrs = {AMPRT_BINARY_ADD};
        return emit(op, AMPRT_OP_BINARY, add);
      })
      .Case([&](MaxPoolGradOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_MAX_POOL_GRAD, d);
      })
      .Case<MaxPoolOp, AveragePoolOp, AveragePoolGradOp>([&](Operation *) -> LogicalResult {
        bool grad = isa<AveragePoolGradOp>(op);
        auto x = cast<RankedTensorType>(op->getOperand(0).getType());
        auto y =
            cast<RankedTensorType>(grad ? op->getOperand(1).getType() : op->getResult(0).getType());
        int64_t n = x.getRank() - 2;
        if (n > 3)
          return op->emitOpError("more than 3 spatial dims are not supported");
        auto kAttr = op->getAttrOfType<DenseI64ArrayAttr>("kernel_shape");
        auto sAttr = op->getAttrOfType<DenseI64ArrayAttr>("strides");
        auto dAttr = op->getAttrOfType<DenseI64ArrayAttr>("dilations");
        auto pAttr = op->getAttrOfType<DenseI64ArrayAttr>("pads");
        auto apAttr = op->getAttrOfType<StringAttr>("auto_pad");
        SmallVector<int64_t> kernel(kAttr.asArrayRef()), strides, dil, pb, pe;
        for (int64_t i = 0; i < n; ++i) {
          strides.push_back(sAttr ? sAttr[i] : 1);
          dil.push_back(dAttr ? dAttr[i] : 1);
        }
        std::optional<ArrayRef<int64_t>> pads;
        if (pAttr)
          pads = pAttr.asArrayRef();
        windowPads(apAttr ? apAttr.getValue() : "NOTSET", x.getShape().drop_front(2),
                   y.getShape().drop_front(2), kernel, strides, dil, pads, pb, pe);
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        auto cip = op->getAttrOfType<BoolAttr>("count_include_pad");
        d.attrs = {n, cip && cip.getValue() ? 1 : 0};
        for (int64_t i = 0; i < n; ++i)
          d.attrs.append({kernel[i], strides[i], dil[i], pb[i], pe[i]});
        if (auto mp = dyn_cast<MaxPoolOp>(op)) {
          d.attrs.push_back(mp.getStorageOrder());
          // Whether anything reads the indices (the forward alone does not).
          d.attrs.push_back(mp.getIndices().use_empty() ? 0 : 1);
          d.attrs.push_back(blocked.contains(mp.getX()) ? 1 : 0);
        }
        return emit(op,
                    grad                 ? AMPRT_OP_AVERAGE_POOL_GRAD
                    : isa<MaxPoolOp>(op) ? AMPRT_OP_MAX_POOL
                                         : AMPRT_OP_AVERAGE_POOL,
                    d);
      })
      .Case<SoftmaxCrossEntropyLossOp, NLLLossOp>([&](Operation *) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = lossAttrs(op, op->getNumOperands() == 3);
        return emit(op, isa<NLLLossOp>(op) ? AMPRT_OP_NLL_LOSS : AMPRT_OP_SOFTMAX_CROSS_ENTROPY, d);
      })
      .Case([&](UnaryGradOp o) -> LogicalResult {
        static const std::pair<StringRef, amprt_unary_op> kinds[] = {
            {"relu", AMPRT_UNARY_RELU},
            {"sqrt", AMPRT_UNARY_SQRT},
            {"exp", AMPRT_UNARY_EXP},
            {"log", AMPRT_UNARY_LOG},
            {"erf", AMPRT_UNARY_ERF},
            {"tanh", AMPRT_UNARY_TANH},
            {"sigmoid", AMPRT_UNARY_SIGMOID},
            {"gelu", AMPRT_UNARY_GELU},
            {"gelu_tanh", AMPRT_UNARY_GELU_TANH},
            {"leaky_relu", AMPRT_UNARY_LEAKY_RELU},
            {"abs", AMPRT_UNARY_ABS},
            {"reciprocal", AMPRT_UNARY_RECIPROCAL},
            {"softplus", AMPRT_UNARY_SOFTPLUS},
            {"elu", AMPRT_UNARY_ELU},
            {"celu", AMPRT_UNARY_CELU},
            {"selu", AMPRT_UNARY_SELU},
            {"hard_sigmoid", AMPRT_UNARY_HARD_SIGMOID},
            {"hard_swish", AMPRT_UNARY_HARD_SWISH},
            {"softsign", AMPRT_UNARY_SOFTSIGN},
            {"sin", AMPRT_UNARY_SIN},
            {"cos", AMPRT_UNARY_COS},
            {"floor", AMPRT_UNARY_FLOOR},
            {"ceil", AMPRT_UNARY_CEIL},
            {"round", AMPRT_UNARY_ROUND},
            {"sign", AMPRT_UNARY_SIGN},
            {"clip", AMPRT_UNARY_CLAMP},
            {"thresholded_relu", AMPRT_UNARY_THRESHOLDED_RELU},
            {"tan", AMPRT_UNARY_TAN},
            {"asin", AMPRT_UNARY_ASIN},
            {"acos", AMPRT_UNARY_ACOS},
            {"atan", AMPRT_UNARY_ATAN},
            {"sinh", AMPRT_UNARY_SINH},
            {"cosh", AMPRT_UNARY_COSH},
            {"asinh", AMPRT_UNARY_ASINH},
            {"acosh", AMPRT_UNARY_ACOSH},
            {"atanh", AMPRT_UNARY_ATANH}};
        const auto *k = llvm::find_if(kinds, [&](auto &p) { return p.first == o.getKind(); });
        if (k == std::end(kinds))
          return o.emitOpError("unknown kind '") << o.getKind() << "'";
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {k->second, f64Bits(o.getAlpha().convertToDouble()),
                   f64Bits(o.getBeta().convertToDouble())};
        return emit(op, AMPRT_OP_UNARY_GRAD, d);
      })
      .Case([&](SoftmaxGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), cast<RankedTensorType>(o.getY().getType()).getRank()),
                   o.getLog() ? 1 : 0};
        return emit(op, AMPRT_OP_SOFTMAX_GRAD, d);
      })
      .Case([&](SoftmaxCrossEntropyLossGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = lossAttrs(op, o.getWeights() != nullptr);
        return emit(op, AMPRT_OP_SOFTMAX_CROSS_ENTROPY_GRAD, d);
      })
      .Default([&](Operation *) { return op->emitOpError("has no runtime lowering"); });
}

} // namespace mlir::amp::lowering
