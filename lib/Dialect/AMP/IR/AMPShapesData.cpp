//===- AMPShapesData.cpp - shape rules: shapes, indexing, reductions ------===//
//
// The shape and type rules of the data-movement ops (reshape, transpose,
// concat, slice, gather, ...), the reductions and the losses; and
// createWithInferredTypes. The element-wise, contraction, convolution,
// normalisation and pool rules are in AMPShapes.cpp.
//
//===----------------------------------------------------------------------===//

#include "ShapeRules.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::shape_rules;

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult FlattenOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  int64_t rank = in->getRank(), axis = adaptor.getAxis();
  if (axis < -rank || axis > rank)
    return r.fail("axis ", axis, " is out of range for rank ", rank, " (valid: [", -rank, ", ",
                  rank, "])");
  if (axis < 0)
    axis += rank;
  auto lead = product(r, in->getShape().take_front(axis));
  auto tail = product(r, in->getShape().drop_front(axis));
  if (failed(lead) || failed(tail))
    return failure();
  types.push_back(RankedTensorType::get({*lead, *tail}, in->getElementType()));
  return success();
}

LogicalResult ReshapeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  ArrayRef<int64_t> shape = adaptor.getShape();
  bool allowZero = adaptor.getAllowzero();
  SmallVector<int64_t> out;
  int inferIndex = -1;
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (d == -1) {
      if (inferIndex >= 0)
        return r.fail("shape ", shapeString(shape), " has more than one -1");
      inferIndex = i;
      out.push_back(kDyn);
    } else if (d == 0 && !allowZero) {
      if ((int64_t)i >= in->getRank())
        return r.fail("shape entry ", i,
                      " is 0 (copy the input dim) but the "
                      "input ",
                      shapeString(in->getShape()), " has no dim ", i);
      out.push_back(in->getDimSize(i));
    } else if (d < 0) {
      return r.fail("shape entry ", d, " is invalid (only -1 may be negative)");
    } else {
      out.push_back(d);
    }
  }
  if (allowZero && inferIndex >= 0 && llvm::is_contained(shape, 0))
    return r.fail("shape may not hold both -1 and 0 when allowzero is set");
  auto totalOr = product(r, in->getShape());
  if (failed(totalOr))
    return failure();
  int64_t total = *totalOr;
  if (inferIndex >= 0) {
    SmallVector<int64_t> rest(out);
    rest.erase(rest.begin() + inferIndex);
    auto knownOr = product(r, rest);
    if (failed(knownOr))
      return failure();
    int64_t known = *knownOr;
    if (!ShapedType::isDynamic(total) && !ShapedType::isDynamic(known)) {
      if (known == 0 || total % known != 0)
        return r.fail("cannot reshape ", shapeString(in->getShape()), " (", total, " elements) to ",
                      shapeString(shape));
      out[inferIndex] = total / known;
    }
  }
  auto outTotalOr = product(r, out);
  if (failed(outTotalOr))
    return failure();
  int64_t outTotal = *outTotalOr;
  if (!ShapedType::isDynamic(total) && !ShapedType::isDynamic(outTotal) && total != outTotal)
    return r.fail("cannot reshape ", shapeString(in->getShape()), " (", total, " elements) to ",
                  shapeString(shape), " (", outTotal, " elements)");
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  int64_t rank = in->getRank();
  SmallVector<int64_t> perm;
  if (auto p = adaptor.getPerm()) {
    perm.assign(p->begin(), p->end());
    SmallVector<bool> seen(rank, false);
    bool ok = (int64_t)perm.size() == rank;
    for (int64_t v : perm) {
      ok = ok && v >= 0 && v < rank && !seen[v];
      if (ok)
        seen[v] = true;
    }
    if (!ok)
      return r.fail("perm ", shapeString(perm), " is not a permutation of the ", rank, " dims of ",
                    shapeString(in->getShape()));
  } else {
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  }
  SmallVector<int64_t> out;
  for (int64_t p : perm)
    out.push_back(in->getDimSize(p));
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return r.fail("needs at least one input");
  auto first = r.ranked(inputs.front(), "inputs");
  if (failed(first))
    return failure();
  int64_t rank = first->getRank();
  auto axis = r.axis(adaptor.getAxis(), rank, "axis");
  if (failed(axis))
    return failure();
  if (rank == 0)
    return r.fail("cannot concatenate scalars");
  SmallVector<int64_t> out(first->getShape());
  for (auto [i, v] : llvm::enumerate(inputs.drop_front())) {
    auto t = r.ranked(v, "inputs");
    if (failed(t))
      return failure();
    if (t->getElementType() != first->getElementType())
      return r.fail("input ", i + 1, " has element type ", t->getElementType(), ", input 0 has ",
                    first->getElementType());
    if (t->getRank() != rank)
      return r.fail("input ", i + 1, " has rank ", t->getRank(), ", input 0 has rank ", rank);
    for (int64_t d = 0; d < rank; ++d) {
      int64_t a = out[d], b = t->getDimSize(d);
      if (d == *axis) {
        out[d] = (ShapedType::isDynamic(a) || ShapedType::isDynamic(b)) ? kDyn : a + b;
        continue;
      }
      if (!ShapedType::isDynamic(a) && !ShapedType::isDynamic(b) && a != b)
        return r.fail("input ", i + 1, " ", shapeString(t->getShape()), " differs from ",
                      shapeString(first->getShape()), " in dim ", d,
                      ", which is not the concat axis ", *axis);
      if (ShapedType::isDynamic(a))
        out[d] = b;
    }
  }
  types.push_back(RankedTensorType::get(out, first->getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  int64_t rank = in->getRank();
  ArrayRef<int64_t> starts = adaptor.getStarts(), ends = adaptor.getEnds();
  size_t n = starts.size();
  if (ends.size() != n)
    return r.fail("starts has ", n, " entries but ends has ", ends.size());
  SmallVector<int64_t> axesList;
  if (auto a = adaptor.getAxes()) {
    if (a->size() != n)
      return r.fail("axes has ", a->size(), " entries, starts has ", n);
    axesList.assign(a->begin(), a->end());
  } else {
    if ((int64_t)n > rank)
      return r.fail("starts has ", n, " entries, more than the rank ", rank);
    for (size_t i = 0; i < n; ++i)
      axesList.push_back(i);
  }
  auto axes = r.axes(axesList, rank, "axes");
  if (failed(axes))
    return failure();
  SmallVector<int64_t> steps(n, 1);
  if (auto s = adaptor.getSteps()) {
    if (s->size() != n)
      return r.fail("steps has ", s->size(), " entries, starts has ", n);
    steps.assign(s->begin(), s->end());
  }
  SmallVector<int64_t> out(in->getShape());
  for (size_t i = 0; i < n; ++i) {
    int64_t step = steps[i], ax = (*axes)[i], dim = in->getDimSize(ax);
    if (step == 0)
      return r.fail("steps must not be 0 (axis ", ax, ")");
    if (ShapedType::isDynamic(dim)) {
      out[ax] = kDyn;
      continue;
    }
    if (dim == 0) { // nothing to take, whatever the bounds (and no [0, -1] clamp)
      out[ax] = 0;
      continue;
    }
    // ONNX clamping, done on clamped values so that INT64_MAX bounds do not
    // overflow.
    auto clampIndex = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0)
        v = v < -dim ? -dim - 1 : v + dim;
      return std::clamp(v, lo, hi);
    };
    int64_t start, end;
    if (step > 0) {
      start = clampIndex(starts[i], 0, dim);
      end = clampIndex(ends[i], 0, dim);
    } else {
      start = clampIndex(starts[i], 0, dim - 1);
      end = clampIndex(ends[i], -1, dim - 1);
    }
    int64_t len = step > 0 ? llvm::divideCeil(std::max<int64_t>(0, end - start), step)
                           : llvm::divideCeil(std::max<int64_t>(0, start - end), -step);
    out[ax] = len;
  }
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult SqueezeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  SmallVector<int64_t> out;
  if (auto a = adaptor.getAxes()) {
    auto axes = r.axes(*a, in->getRank(), "axes");
    if (failed(axes))
      return failure();
    for (int64_t d = 0; d < in->getRank(); ++d) {
      int64_t size = in->getDimSize(d);
      if (!llvm::is_contained(*axes, d)) {
        out.push_back(size);
        continue;
      }
      if (size != 1 && !ShapedType::isDynamic(size))
        return r.fail("cannot squeeze dim ", d, " of size ", size, " in ",
                      shapeString(in->getShape()));
    }
  } else {
    for (int64_t size : in->getShape()) {
      if (ShapedType::isDynamic(size))
        return r.fail("without axes, needs static dims to know which are 1, "
                      "got ",
                      shapeString(in->getShape()));
      if (size != 1)
        out.push_back(size);
    }
  }
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult UnsqueezeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  int64_t outRank = in->getRank() + adaptor.getAxes().size();
  auto axes = r.axes(adaptor.getAxes(), outRank, "axes");
  if (failed(axes))
    return failure();
  SmallVector<int64_t> out;
  auto it = in->getShape().begin();
  for (int64_t d = 0; d < outRank; ++d)
    out.push_back(llvm::is_contained(*axes, d) ? 1 : *it++);
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto data = r.ranked(adaptor.getData(), "data");
  auto idx = r.ranked(adaptor.getIndices(), "indices");
  if (failed(data) || failed(idx))
    return failure();
  if (data->getRank() == 0)
    return r.fail("data must have rank >= 1");
  auto axis = r.axis(adaptor.getAxis(), data->getRank(), "axis");
  if (failed(axis))
    return failure();
  SmallVector<int64_t> out(data->getShape().take_front(*axis));
  llvm::append_range(out, idx->getShape());
  llvm::append_range(out, data->getShape().drop_front(*axis + 1));
  types.push_back(RankedTensorType::get(out, data->getElementType()));
  return success();
}

LogicalResult GridSampleOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto x = r.ranked(adaptor.getX(), "x");
  auto g = r.ranked(adaptor.getGrid(), "grid");
  if (failed(x) || failed(g) || failed(r.sameElementType(*x, *g, "x", "grid")))
    return failure();
  if (x->getRank() != 4 || g->getRank() != 4 || g->getDimSize(3) != 2)
    return r.fail("needs x [N, C, H, W] and grid [N, Ho, Wo, 2] (2-D sampling), got ",
                  shapeString(x->getShape()), " and ", shapeString(g->getShape()));
  if (failed(verifyCompatibleShape(ArrayRef<int64_t>{x->getDimSize(0)},
                                   ArrayRef<int64_t>{g->getDimSize(0)})))
    return r.fail("x and grid differ in batch");
  types.push_back(RankedTensorType::get(
      {x->getDimSize(0), x->getDimSize(1), g->getDimSize(1), g->getDimSize(2)},
      x->getElementType()));
  return success();
}

LogicalResult GridSampleGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor, SmallVectorImpl<Type> &types) {
  types.push_back(adaptor.getX().getType());
  types.push_back(adaptor.getGrid().getType());
  return success();
}

LogicalResult TopKOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  if (in->getRank() == 0)
    return r.fail("input must have rank >= 1");
  auto axis = r.axis((int64_t)adaptor.getAxis(), in->getRank(), "axis");
  if (failed(axis))
    return failure();
  int64_t k = (int64_t)adaptor.getK(), len = in->getDimSize(*axis);
  if (k < 0 || (!ShapedType::isDynamic(len) && k > len))
    return r.fail("k = ", k, " must lie in [0, ", len, "] (the axis' size)");
  SmallVector<int64_t> out(in->getShape());
  out[*axis] = k;
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  types.push_back(RankedTensorType::get(out, IntegerType::get(in->getContext(), 64)));
  return success();
}

template <typename OpTy>
static LogicalResult inferArgReduce(std::optional<Location> loc, typename OpTy::Adaptor adaptor,
                                    SmallVectorImpl<Type> &types) {
  Rules r(loc, OpTy::getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  if (in->getRank() == 0)
    return r.fail("input must have rank >= 1");
  auto axis = r.axis(adaptor.getAxis(), in->getRank(), "axis");
  if (failed(axis))
    return failure();
  if (in->getDimSize(*axis) == 0)
    return r.fail("the axis is empty");
  SmallVector<int64_t> out;
  for (int64_t d = 0; d < in->getRank(); ++d)
    if (d != *axis)
      out.push_back(in->getDimSize(d));
    else if (adaptor.getKeepdims())
      out.push_back(1);
  types.push_back(RankedTensorType::get(out, IntegerType::get(in->getContext(), 64)));
  return success();
}

LogicalResult ArgMaxOp::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,
                                         SmallVectorImpl<Type> &t) {
  return inferArgReduce<ArgMaxOp>(l, a, t);
}

LogicalResult ArgMinOp::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,
                                         SmallVectorImpl<Type> &t) {
  return inferArgReduce<ArgMinOp>(l, a, t);
}

LogicalResult GatherElementsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto data = r.ranked(adaptor.getData(), "data");
  auto idx = r.ranked(adaptor.getIndices(), "indices");
  if (failed(data) || failed(idx))
    return failure();
  if (data->getRank() == 0 || idx->getRank() != data->getRank())
    return r.fail("indices ", shapeString(idx->getShape()), " must have the rank of data ",
                  shapeString(data->getShape()), " (at least 1)");
  auto axis = r.axis(adaptor.getAxis(), data->getRank(), "axis");
  if (failed(axis))
    return failure();
  for (int64_t d = 0; d < data->getRank(); ++d)
    if (d != *axis && !ShapedType::isDynamic(idx->getDimSize(d)) &&
        !ShapedType::isDynamic(data->getDimSize(d)) && idx->getDimSize(d) > data->getDimSize(d))
      return r.fail("indices ", shapeString(idx->getShape()), " exceed data ",
                    shapeString(data->getShape()), " on dim ", d, " (only the axis may differ)");
  types.push_back(RankedTensorType::get(idx->getShape(), data->getElementType()));
  return success();
}

LogicalResult GatherElementsGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                                     Adaptor adaptor,
                                                     SmallVectorImpl<Type> &types) {
  auto dy = cast<RankedTensorType>(adaptor.getDy().getType());
  types.push_back(RankedTensorType::get(adaptor.getShape(), dy.getElementType()));
  return success();
}

LogicalResult ExpandOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  for (int64_t d : adaptor.getShape())
    if (d < 0)
      return r.fail("shape entries must be >= 0, got ", shapeString(adaptor.getShape()));
  auto out = broadcast(r, in->getShape(), adaptor.getShape(), "input", "shape");
  if (failed(out))
    return failure();
  types.push_back(RankedTensorType::get(*out, in->getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

template <typename OpTy>
static LogicalResult inferReduce(std::optional<Location> loc, typename OpTy::Adaptor adaptor,
                                 SmallVectorImpl<Type> &types) {
  Rules r(loc, OpTy::getOperationName());
  auto in = r.ranked(adaptor.getInput(), "input");
  if (failed(in))
    return failure();
  ArrayRef<int64_t> list;
  if (auto a = adaptor.getAxes())
    list = *a;
  if (list.empty() && adaptor.getNoopWithEmptyAxes()) {
    types.push_back(*in);
    return success();
  }
  auto axes = r.axes(list, in->getRank(), "axes");
  if (failed(axes))
    return failure();
  bool all = axes->empty();
  SmallVector<int64_t> out;
  for (int64_t d = 0; d < in->getRank(); ++d) {
    bool reduced = all || llvm::is_contained(*axes, d);
    if (!reduced)
      out.push_back(in->getDimSize(d));
    else if (adaptor.getKeepdims())
      out.push_back(1);
  }
  types.push_back(RankedTensorType::get(out, in->getElementType()));
  return success();
}

LogicalResult ReduceSumOp::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,
                                            SmallVectorImpl<Type> &t) {
  return inferReduce<ReduceSumOp>(l, a, t);
}
LogicalResult ReduceMeanOp::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,
                                             SmallVectorImpl<Type> &t) {
  return inferReduce<ReduceMeanOp>(l, a, t);
}
LogicalResult ReduceProdOp::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,
                                             SmallVectorImpl<Type> &t) {
  return inferReduce<ReduceProdOp>(l, a, t);
}
LogicalResult ReduceMaxOp::inferReturnTypes(MLIRContext *, std::optional<Location> l, Adaptor a,
                                            SmallVectorImpl<Type> &t) {
  return inferReduce<ReduceMaxOp>(l, a, t);
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxCrossEntropyLossOp::inferReturnTypes(MLIRContext *,
                                                          std::optional<Location> loc,
                                                          Adaptor adaptor,
                                                          SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto scores = r.ranked(adaptor.getScores(), "scores");
  auto labels = r.ranked(adaptor.getLabels(), "labels");
  if (failed(scores) || failed(labels))
    return failure();
  auto loss = lossType(r, *scores, *labels, adaptor.getWeights(), adaptor.getReduction(), "scores",
                       "labels");
  if (failed(loss))
    return failure();
  types.push_back(*loss);
  types.push_back(*scores);
  return success();
}

LogicalResult NLLLossOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &types) {
  Rules r(loc, getOperationName());
  auto input = r.ranked(adaptor.getInput(), "input");
  auto target = r.ranked(adaptor.getTarget(), "target");
  if (failed(input) || failed(target))
    return failure();
  auto loss =
      lossType(r, *input, *target, adaptor.getWeight(), adaptor.getReduction(), "input", "target");
  if (failed(loss))
    return failure();
  types.push_back(*loss);
  return success();
}

Operation *mlir::amp::createWithInferredTypes(OpBuilder &b, Location loc, StringRef name,
                                              ValueRange operands, ArrayRef<NamedAttribute> attrs,
                                              unsigned numResults) {
  OperationState state(loc, name);
  state.addOperands(operands);
  state.addAttributes(attrs);
  state.addTypes(SmallVector<Type>(numResults, b.getNoneType()));
  Operation *op = b.create(state);
  auto iface = dyn_cast<InferTypeOpInterface>(op);
  SmallVector<Type> types;
  if (!iface ||
      failed(iface.inferReturnTypes(op->getContext(), loc, op->getOperands(),
                                    op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                    op->getRegions(), types)) ||
      types.size() != numResults) {
    if (!iface)
      emitError(loc) << "'" << name << "' has no shape rules";
    op->erase();
    return nullptr;
  }
  // Every static result fits in memory's address range: element count and
  // bytes in 63 bits (what the lowering and the runtime compute sizes in).
  for (Type t : types)
    if (auto rt = dyn_cast<RankedTensorType>(t)) {
      uint64_t bytes = std::max<uint64_t>(1, (rt.getElementTypeBitWidth() + 7) / 8);
      bool zero = llvm::is_contained(rt.getShape(), 0);
      for (int64_t d : rt.getShape()) {
        if (zero || ShapedType::isDynamic(d))
          continue;
        if (__builtin_mul_overflow(bytes, (uint64_t)d, &bytes) || bytes > (uint64_t)INT64_MAX) {
          emitError(loc) << "'" << name << "' would make a result of type " << t
                         << ", more bytes than 63 bits count";
          op->erase();
          return nullptr;
        }
      }
    }
  for (auto [r, t] : llvm::zip(op->getResults(), types))
    r.setType(t);
  return op;
}

LogicalResult SliceGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>, Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto dy = cast<RankedTensorType>(adaptor.getDy().getType());
  types.push_back(RankedTensorType::get(adaptor.getShape(), dy.getElementType()));
  return success();
}

LogicalResult GatherGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                             Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto dy = cast<RankedTensorType>(adaptor.getDy().getType());
  types.push_back(RankedTensorType::get(adaptor.getShape(), dy.getElementType()));
  return success();
}
