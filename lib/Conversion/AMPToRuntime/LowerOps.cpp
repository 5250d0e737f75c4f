//===- LowerOps.cpp - each amp op's runtime descriptor --------------------===//
//
// Lowerer::lowerOp: the opcode, tensors and attributes of each op's
// descriptor, in the layout runtime/include/amprt/amprt.h documents.
//
//===----------------------------------------------------------------------===//

#include "Lowerer.h"

using namespace mlir;
using namespace mlir::amp;
namespace rt = amprt::attrs; // the descriptors' typed attributes (amprt_ops.def)

// GridSample: AMPRT's mode 0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros,
// 1 border, 2 reflection (amprt_grid_sample).
static_assert((int)GridSampleMode::nearest == 1 && (int)GridSampleMode::bicubic == 2 &&
              (int)GridSamplePadding::border == 1 && (int)GridSamplePadding::reflection == 2);

namespace mlir::amp::lowering {

/// Explicit pads of a window op from auto_pad (static shapes).
void windowPads(AutoPad autoPad, ArrayRef<int64_t> in, ArrayRef<int64_t> out,
                ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides, ArrayRef<int64_t> dil,
                std::optional<ArrayRef<int64_t>> pads, SmallVectorImpl<int64_t> &pb,
                SmallVectorImpl<int64_t> &pe) {
  size_t n = in.size();
  for (size_t i = 0; i < n; ++i) {
    int64_t eff = (kernel[i] - 1) * dil[i] + 1;
    if (autoPad == AutoPad::SAME_UPPER || autoPad == AutoPad::SAME_LOWER) {
      int64_t total = std::max<int64_t>(0, (out[i] - 1) * strides[i] + eff - in[i]);
      int64_t small = total / 2, large = total - small;
      pb.push_back(autoPad == AutoPad::SAME_UPPER ? small : large);
      pe.push_back(autoPad == AutoPad::SAME_UPPER ? large : small);
    } else if (autoPad == AutoPad::NOTSET && pads) {
      pb.push_back((*pads)[i]);
      pe.push_back((*pads)[i + n]);
    } else {
      pb.push_back(0);
      pe.push_back(0);
    }
  }
}

/// The runtime's loss fields: reduction, has_ignore, ignore_index,
/// has_weights (the forward losses and their gradients).
template <typename LossFields> static LossFields lossAttrs(Operation *op, bool hasWeights) {
  auto redAttr = op->getAttrOfType<ReductionAttr>("reduction");
  auto ignore = op->getAttrOfType<IntegerAttr>("ignore_index");
  LossFields a;
  a.reduction = (int64_t)(redAttr ? redAttr.getValue() : Reduction::mean); // amprt_reduction
  a.has_ignore = ignore ? 1 : 0;
  a.ignore_index = ignore ? ignore.getInt() : 0;
  a.has_weights = hasWeights ? 1 : 0;
  return a;
}

/// The runtime's convolution fields (spatial, group, has_bias 0, per dim
/// stride, dilation, pad begin, pad end) for amp.conv / amp.conv_grad.
template <typename ConvLike, typename ConvFields>
static LogicalResult convAttrs(ConvLike o, RankedTensorType y, ConvFields &a) {
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
  a.spatial = n;
  a.group = (int64_t)o.getGroup();
  a.has_bias = 0;
  for (int64_t i = 0; i < n; ++i) {
    a.stride[i] = strides[i];
    a.dilation[i] = dil[i];
    a.pad_begin[i] = pb[i];
    a.pad_end[i] = pe[i];
  }
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
  auto slots = op->getAttrOfType<DenseI64ArrayAttr>(attrname::kSlots);
  if (!slots || (int64_t)slots.size() != op->getNumResults())
    return op->emitOpError("has no memory plan: run amp-plan-memory first");
  for (auto [r, off] : llvm::zip(op->getResults(), slots.asArrayRef())) {
    // A result written in place into its argument's buffer (no slot).
    if (auto p = placed.find(r); p != placed.end()) {
      ptrs[r] = p->second;
      continue;
    }
    if (off < 0)
      return op->emitOpError("result without an arena slot");
    // An i64 index: arenas may exceed 2 GiB.
    Value offset = LLVM::ConstantOp::create(b, op->getLoc(), i64, b.getI64IntegerAttr(off));
    ptrs[r] = LLVM::GEPOp::create(b, op->getLoc(), ptrTy, b.getI8Type(), arena,
                                  ArrayRef<LLVM::GEPArg>{offset});
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
    rt::unary a;
    a.op = u;
    a.alpha = alpha;
    a.beta = beta;
    return emitAs(op, a, d);
  };
  auto binary = [&](amprt_binary_op bo) -> LogicalResult {
    if (failed(all(op->getOperands())) || failed(all(op->getResults())))
      return failure();
    rt::binary a;
    a.op = bo;
    return emitAs(op, a, d);
  };
  // An optimizer update whose new parameter's f16 / bf16 cast is the next op
  // (amp-keep-weight-casts) writes that copy in its own call: one more
  // tensor, attribute lowp = 1; the cast is skipped.
  auto lowpCopy = [&](Value newParam, std::optional<int64_t> &lowp) -> LogicalResult {
    CastOp c = lowpCopyOf(op, newParam);
    if (!c)
      return success();
    if (failed(slotPtr(c.getOutput())) || failed(tensor(d, c.getOutput(), op)))
      return failure();
    lowp = 1;
    fusedAway.insert(c);
    return success();
  };
  // The unary functions: their kind and parameters from the op
  // (UnaryFunctionOpInterface), numbered like amprt_unary_op.
  if (auto u = dyn_cast<UnaryFunctionOpInterface>(op)) {
    UnaryFunction f = u.getUnaryFunction();
    return unary((amprt_unary_op)f.kind, f.alpha,
                 f.beta ? std::optional<double>(*f.beta) : std::nullopt);
  }
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
      .Case([&](CastOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emitAs(op, rt::cast{}, d);
      })
      .Case([&](WhereOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emitAs(op, rt::where{}, d);
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
        return emitAs(op, rt::copy{}, d);
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
        return emitAs(op, rt::copy{}, d);
      })
      .Case([&](SliceOp o) -> LogicalResult {
        auto in = cast<RankedTensorType>(o.getInput().getType());
        auto outTy = cast<RankedTensorType>(o.getType());
        int64_t offset = 0;
        SmallVector<int64_t> st = sliceView(in, o.getStarts(), o.getAxes(), o.getSteps(), offset);
        if (failed(tensor(d, o.getInput(), op, outTy.getShape(), st, offset)) ||
            failed(tensor(d, o.getResult(), op)))
          return failure();
        return emitAs(op, rt::copy{}, d);
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
        return emitAs(op, rt::slice_grad{}, d);
      })
      .Case([&](CumSumOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::cumsum a;
        a.axis = normAxis((int64_t)o.getAxis(), o.getType().getRank());
        a.exclusive = o.getExclusive() ? 1 : 0;
        a.reverse = o.getReverse() ? 1 : 0;
        return emitAs(op, a, d);
      })
      .Case<GridSampleOp, GridSampleGradOp>([&](Operation *) -> LogicalResult {
        // The enums are numbered like the runtime's (AMPEnums.td).
        auto mode = op->getAttrOfType<GridSampleModeAttr>("mode");
        auto pad = op->getAttrOfType<GridSamplePaddingAttr>("padding_mode");
        auto align = op->getAttrOfType<BoolAttr>("align_corners");
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::grid_sample_grad a; // grid_sample's fields, then which results are wanted
        a.mode = (int64_t)(mode ? mode.getValue() : GridSampleMode::bilinear);
        a.padding = (int64_t)(pad ? pad.getValue() : GridSamplePadding::zeros);
        a.align_corners = align && align.getValue() ? 1 : 0;
        if (isa<GridSampleOp>(op)) {
          rt::grid_sample f;
          f.mode = a.mode;
          f.padding = a.padding;
          f.align_corners = a.align_corners;
          return emitAs(op, f, d);
        }
        a.want_dx = op->getResult(0).use_empty() ? 0 : 1;
        a.want_dgrid = op->getResult(1).use_empty() ? 0 : 1;
        return emitAs(op, a, d);
      })
      .Case([&](TopKOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::topk a;
        a.axis = normAxis((int64_t)o.getAxis(), o.getInput().getType().getRank());
        a.largest = o.getLargest() ? 1 : 0;
        return emitAs(op, a, d);
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
        rt::arg_reduce a;
        a.axis = axis;
        a.min = isa<ArgMinOp>(op) ? 1 : 0;
        a.select_last = last && last.getValue() ? 1 : 0;
        return emitAs(op, a, d);
      })
      .Case([&](GatherElementsOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::gather_elements a;
        a.axis = normAxis(o.getAxis(), cast<RankedTensorType>(o.getData().getType()).getRank());
        return emitAs(op, a, d);
      })
      .Case([&](GatherElementsGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::gather_elements_grad a;
        a.axis = (int64_t)o.getAxis();
        return emitAs(op, a, d);
      })
      .Case([&](GatherGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::gather_grad a;
        a.axis = (int64_t)o.getAxis();
        return emitAs(op, a, d);
      })
      .Case([&](ReduceMaxGradOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emitAs(op, rt::reduce_max_grad{}, d);
      })
      .Case([&](ConcatOp o) -> LogicalResult {
        if (failed(all(o.getInputs())) || failed(all(op->getResults())))
          return failure();
        rt::concat a;
        a.axis = normAxis(o.getAxis(), o.getType().getRank());
        return emitAs(op, a, d);
      })
      .Case([&](GatherOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::gather a;
        a.axis = normAxis(o.getAxis(), cast<RankedTensorType>(o.getData().getType()).getRank());
        return emitAs(op, a, d);
      })
      .Case<RandomNormalOp, RandomUniformOp, BernoulliOp>([&](Operation *) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::random a;
        if (auto o = dyn_cast<RandomNormalOp>(op)) {
          a.kind = AMPRT_RANDOM_NORMAL;
          a.a = o.getMean().convertToDouble();
          a.b = o.getScale().convertToDouble();
        } else if (auto o = dyn_cast<RandomUniformOp>(op)) {
          a.kind = AMPRT_RANDOM_UNIFORM;
          a.a = o.getLow().convertToDouble();
          a.b = o.getHigh().convertToDouble();
        } else {
          a.kind = AMPRT_RANDOM_BERNOULLI;
        }
        return emitAs(op, a, d);
      })
      .Case([&](DropoutOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::dropout a;
        a.ratio = o.getRatio().convertToDouble();
        a.training = o.getTrainingMode() ? 1 : 0;
        return emitAs(op, a, d);
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
                  return emitAs(op, rt::copy{}, d);
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
            rt::reduce a;
            a.op = kind;
            a.naxes = (int64_t)axes.size();
            if (a.naxes > AMPRT_MAX_RANK)
              return op->emitOpError("reduces more than ") << AMPRT_MAX_RANK << " axes";
            llvm::copy(axes, a.axes);
            if (blocked.contains(x))
              a.blocked = 1;
            return emitAs(op, a, d);
          })
      .Case<SoftmaxOp, LogSoftmaxOp>([&](Operation *) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        int64_t axis = op->getAttrOfType<IntegerAttr>("axis").getInt();
        rt::softmax a;
        a.axis = normAxis(axis, cast<RankedTensorType>(op->getResult(0).getType()).getRank());
        a.log = isa<LogSoftmaxOp>(op) ? 1 : 0;
        return emitAs(op, a, d);
      })
      .Case([&](LayerNormOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::layer_norm a;
        a.axis = normAxis(o.getAxis(), o.getX().getType().getRank());
        a.eps = o.getEpsilon().convertToDouble();
        a.has_bias = o.getBias() ? 1 : 0;
        return emitAs(op, a, d);
      })
      .Case([&](BatchNormOp o) -> LogicalResult {
        rt::batch_norm a;
        a.eps = o.getEpsilon().convertToDouble();
        a.momentum = o.getMomentum().convertToDouble();
        a.training = o.getTrainingMode() ? 1 : 0;
        if (Operation *relu = bnRelu.lookup(op)) {
          // relu(batch norm) written into the ReLU's result, in its own
          // arena slot; y is never stored.
          Value z = relu->getResult(0);
          if (failed(all(op->getOperands())) || failed(slotPtr(z)) || failed(tensor(d, z, op)) ||
              failed(all(op->getResults().drop_front())))
            return failure();
          a.flags = AMPRT_BN_RELU;
          return emitAs(op, a, d);
        }
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emitAs(op, a, d);
      })
      .Case([&](GemmOp o) -> LogicalResult {
        if (o.getAccumulate() && !o.getAccumulate()->isF32())
          return op->emitOpError("accumulate = ")
                 << *o.getAccumulate() << " is not supported by the CPU runtime (f32 only)";
        if (failed(all(op->getOperands())))
          return failure();
        rt::gemm a;
        a.alpha = o.getAlpha().convertToDouble();
        a.beta = o.getBeta().convertToDouble();
        a.trans_a = o.getTransA() ? 1 : 0;
        a.trans_b = o.getTransB() ? 1 : 0;
        a.has_c = o.getC() ? 1 : 0;
        if (Operation *relu = gemmRelu.lookup(op)) {
          // Written into the ReLU's result, in its own arena slot.
          Value out = relu->getResult(0);
          if (failed(slotPtr(out)) || failed(tensor(d, out, op)))
            return failure();
          a.flags = AMPRT_GEMM_RELU;
          return emitAs(op, a, d);
        }
        if (failed(all(op->getResults())))
          return failure();
        return emitAs(op, a, d);
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
        return emitAs(op, rt::matmul{}, d);
      })
      .Case([&](ConvOp o) -> LogicalResult {
        ConvCall cc = convCalls.lookup(op);
        auto bn = dyn_cast_or_null<BatchNormOp>(cc.bn);
        // conv or conv_bn (a folded inference batch norm): the same fields,
        // conv_bn's epsilon, then the flags (always there for conv_bn).
        auto emitConv = [&](auto &a) -> LogicalResult {
          if (failed(convAttrs(o, o.getType(), a)) || failed(all(op->getOperands())))
            return failure();
          a.has_bias = o.getBias() ? 1 : 0;
          Value out = convWrites(o);
          if (out != o.getOutput() && failed(slotPtr(out)))
            return failure(); // the last fused op's result, in its own slot
          if (bn && failed(all({bn.getScale(), bn.getBias(), bn.getMean(), bn.getVar()})))
            return failure();
          if (failed(tensor(d, out, op)))
            return failure();
          int64_t flags = (cc.relu ? AMPRT_CONV_RELU : 0) |
                          (blocked.contains(o.getX()) ? AMPRT_CONV_SRC_BLOCKED : 0) |
                          (blocked.contains(out) ? AMPRT_CONV_DST_BLOCKED : 0);
          if (flags || bn)
            a.flags = flags;
          return emitAs(op, a, d);
        };
        if (bn) {
          rt::conv_bn a;
          a.epsilon = bn.getEpsilon().convertToDouble();
          return emitConv(a);
        }
        rt::conv a;
        return emitConv(a);
      })
      .Case([&](NLLLossGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emitAs(op, lossAttrs<rt::nll_loss_grad>(op, o.getWeight() != nullptr), d);
      })
      .Case([&](SGDUpdateOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::sgd_update a;
        a.lr = o.getLr().convertToDouble();
        a.momentum = o.getMomentum().convertToDouble();
        a.dampening = o.getDampening().convertToDouble();
        a.wd = o.getWeightDecay().convertToDouble();
        a.nesterov = o.getNesterov() ? 1 : 0;
        a.has_buf = o.getMomentumBuf() ? 1 : 0;
        if (failed(lowpCopy(o.getNewParam(), a.lowp)))
          return failure();
        return emitAs(op, a, d);
      })
      .Case([&](AdamUpdateOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::adam_update a;
        a.lr = o.getLr().convertToDouble();
        a.beta1 = o.getBeta1().convertToDouble();
        a.beta2 = o.getBeta2().convertToDouble();
        a.eps = o.getEps().convertToDouble();
        a.wd = o.getWeightDecay().convertToDouble();
        a.decoupled = o.getMode() == AdamMode::hf ? 2 : o.getDecoupled() ? 1 : 0;
        if (failed(lowpCopy(o.getNewParam(), a.lowp)))
          return failure();
        return emitAs(op, a, d);
      })
      .Case([&](UnscaleAndCheckOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::unscale_and_check a;
        a.n = (int64_t)o.getGrads().size();
        return emitAs(op, a, d);
      })
      .Case([&](AllReduceOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::all_reduce a;
        a.n = (int64_t)o.getInputs().size();
        a.mean = o.getMean() ? 1 : 0;
        return emitAs(op, a, d);
      })
      .Case([&](ClipGradNormOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::clip_grad_norm a;
        a.n = (int64_t)o.getGrads().size();
        a.max_norm = o.getMaxNorm().convertToDouble();
        return emitAs(op, a, d);
      })
      .Case([&](UpdateScaleOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::update_scale a;
        a.growth_factor = o.getGrowthFactor().convertToDouble();
        a.backoff_factor = o.getBackoffFactor().convertToDouble();
        a.growth_interval = (int64_t)o.getGrowthInterval();
        a.hysteresis = (int64_t)o.getHysteresis();
        a.min_scale = o.getMinScale().convertToDouble();
        a.error_at_min = o.getOnMinScale() == OnMinScale::error ? 1 : 0;
        return emitAs(op, a, d);
      })
      .Case([&](MicroStepOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::micro_step a;
        a.every = (int64_t)o.getEvery();
        return emitAs(op, a, d);
      })
      .Case([&](StepCountOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emitAs(op, rt::step_count{}, d);
      })
      .Case([&](BatchNormGradOp o) -> LogicalResult {
        rt::batch_norm_grad a;
        a.eps = o.getEpsilon().convertToDouble();
        a.want_dx = op->getResult(0).use_empty() ? 0 : 1;
        a.want_dscale = op->getResult(1).use_empty() ? 0 : 1;
        a.want_dbias = op->getResult(2).use_empty() ? 0 : 1;
        if (auto ug = dyn_cast_or_null<UnaryGradOp>(bnGradRelu.lookup(op))) {
          // dy = the ReLU gradient's dy masked by its x, in the call.
          if (failed(all(SmallVector<Value>{o.getX(), o.getScale(), ug.getDy()})) ||
              failed(all(op->getResults())) || failed(tensor(d, ug.getX(), op)))
            return failure();
          a.flags = AMPRT_BN_RELU;
          return emitAs(op, a, d);
        }
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emitAs(op, a, d);
      })
      .Case([&](LayerNormGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::layer_norm_grad a;
        a.axis = normAxis(o.getAxis(), o.getX().getType().getRank());
        a.want_dx = op->getResult(0).use_empty() ? 0 : 1;
        a.want_dscale = op->getResult(1).use_empty() ? 0 : 1;
        a.want_dbias = op->getResult(2).use_empty() ? 0 : 1;
        return emitAs(op, a, d);
      })
      .Case([&](ConvGradOp o) -> LogicalResult {
        // attrs: the conv's, then which of dx, dw, db are wanted.
        rt::conv_grad a;
        if (failed(convAttrs(o, o.getDy().getType(), a)) || failed(all(op->getOperands())) ||
            failed(all(op->getResults())))
          return failure();
        a.want_dx = op->getResult(0).use_empty() ? 0 : 1;
        a.want_dw = op->getResult(1).use_empty() ? 0 : 1;
        a.want_db = op->getResult(2).use_empty() ? 0 : 1;
        // An f32 dw that the step's inf check reads as it is: checked as
        // it is written, while it is in the caches (the runtime's
        // check_dw), and not read again by the check.
        Value dw = o.getDw();
        if (cast<RankedTensorType>(dw.getType()).getElementType().isF32() &&
            llvm::any_of(dw.getUsers(), [](Operation *u) { return isa<UnscaleAndCheckOp>(u); }))
          a.check_dw = 1;
        return emitAs(op, a, d);
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
        rt::conv_grad a;
        a.spatial = n;
        a.group = (int64_t)o.getGroup();
        for (int64_t i = 0; i < n; ++i) {
          a.stride[i] = o.getStrides() ? (*o.getStrides())[i] : 1;
          a.dilation[i] = o.getDilations() ? (*o.getDilations())[i] : 1;
          a.pad_begin[i] = o.getPads() ? (*o.getPads())[i] : 0;
          a.pad_end[i] = o.getPads() ? (*o.getPads())[n + i] : 0;
        }
        a.want_dx = 1; // only the input gradient
        Value out = o.getOutput();
        if (failed(all({out, o.getW(), o.getX(), out, o.getW(), o.getW()})))
          return failure();
        if (failed(emitAs(op, a, d)))
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
        rt::binary plus;
        plus.op = AMPRT_BINARY_ADD;
        return emitAs(op, plus, add);
      })
      .Case([&](MaxPoolGradOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emitAs(op, rt::max_pool_grad{}, d);
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
        auto apAttr = op->getAttrOfType<AutoPadAttr>("auto_pad");
        SmallVector<int64_t> kernel(kAttr.asArrayRef()), strides, dil, pb, pe;
        for (int64_t i = 0; i < n; ++i) {
          strides.push_back(sAttr ? sAttr[i] : 1);
          dil.push_back(dAttr ? dAttr[i] : 1);
        }
        std::optional<ArrayRef<int64_t>> pads;
        if (pAttr)
          pads = pAttr.asArrayRef();
        windowPads(apAttr ? apAttr.getValue() : AutoPad::NOTSET, x.getShape().drop_front(2),
                   y.getShape().drop_front(2), kernel, strides, dil, pads, pb, pe);
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        auto cip = op->getAttrOfType<BoolAttr>("count_include_pad");
        auto window = [&](auto &a) {
          a.spatial = n;
          a.count_include_pad = cip && cip.getValue() ? 1 : 0;
          for (int64_t i = 0; i < n; ++i) {
            a.kernel[i] = kernel[i];
            a.stride[i] = strides[i];
            a.dilation[i] = dil[i];
            a.pad_begin[i] = pb[i];
            a.pad_end[i] = pe[i];
          }
          return emitAs(op, a, d);
        };
        if (auto mp = dyn_cast<MaxPoolOp>(op)) {
          rt::max_pool a;
          a.storage_order = mp.getStorageOrder();
          // Whether anything reads the indices (the forward alone does not).
          a.want_indices = mp.getIndices().use_empty() ? 0 : 1;
          a.blocked = blocked.contains(mp.getX()) ? 1 : 0;
          return window(a);
        }
        if (grad) {
          rt::average_pool_grad a;
          return window(a);
        }
        rt::average_pool a;
        return window(a);
      })
      .Case<SoftmaxCrossEntropyLossOp, NLLLossOp>([&](Operation *) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        bool weights = op->getNumOperands() == 3;
        if (isa<NLLLossOp>(op))
          return emitAs(op, lossAttrs<rt::nll_loss>(op, weights), d);
        return emitAs(op, lossAttrs<rt::softmax_cross_entropy>(op, weights), d);
      })
      .Case([&](UnaryGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::unary_grad a;
        a.op = (int64_t)o.getKind(); // UnaryKind is numbered like amprt_unary_op
        a.alpha = o.getAlpha().convertToDouble();
        a.beta = o.getBeta().convertToDouble();
        return emitAs(op, a, d);
      })
      .Case([&](SoftmaxGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        rt::softmax_grad a;
        a.axis = normAxis(o.getAxis(), cast<RankedTensorType>(o.getY().getType()).getRank());
        a.log = o.getLog() ? 1 : 0;
        return emitAs(op, a, d);
      })
      .Case([&](SoftmaxCrossEntropyLossGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emitAs(op, lossAttrs<rt::softmax_cross_entropy_grad>(op, o.getWeights() != nullptr),
                      d);
      })
      .Default([&](Operation *) { return op->emitOpError("has no runtime lowering"); });
}

} // namespace mlir::amp::lowering
