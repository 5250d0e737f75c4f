//===- Shape.cpp - reshapes, transposes, slices to linalg -------------------===//
//
// Reshapes (identity, reshape, flatten, squeeze, unsqueeze) as
// tensor.collapse / expand_shape, transposes, concatenations, slices,
// broadcasts, and dropout where it passes its input through.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "amp/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::amp;
using namespace mlir::amp::linalg_lowering;

namespace {

/// The family's ops (see Lowering.h).
struct Shape : OpLowering {
  using OpLowering::OpLowering;
  LogicalResult transpose(TransposeOp o, SmallVector<Value> &out);
  LogicalResult concat(ConcatOp o, SmallVector<Value> &out);
  LogicalResult slice(SliceOp o, SmallVector<Value> &out);
};

} // namespace

LogicalResult Shape::transpose(TransposeOp o, SmallVector<Value> &out) {
  auto in = rtt(o.getInput());
  int64_t r = in.getRank();
  SmallVector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i)
    perm.push_back(o.getPerm() ? (*o.getPerm())[i] : r - 1 - i);
  // out[i] = in[perm[i]]: the input's dim perm[i] is the loop i.
  SmallVector<AffineExpr> exprs(r);
  for (int64_t i = 0; i < r; ++i)
    exprs[perm[i]] = b.getAffineDimExpr(i);
  RankedTensorType rt = resultType();
  out.push_back(e.generic(
      {rt}, {o.getInput()}, {e.empty(rt)},
      {AffineMap::get(r, 0, exprs, b.getContext()), b.getMultiDimIdentityMap(r)},
      SmallVector<Iter>(r, Iter::parallel),
      [](OpBuilder &nb, Location nl, ValueRange a) { linalg::YieldOp::create(nb, nl, a[0]); })[0]);
  return success();
}

LogicalResult Shape::concat(ConcatOp o, SmallVector<Value> &out) {
  RankedTensorType rt = resultType();
  int64_t axis = normAxis(o.getAxis(), rt.getRank());
  Value acc = e.empty(rt);
  int64_t off = 0;
  for (Value in : o.getInputs()) {
    auto t = rtt(in);
    SmallVector<OpFoldResult> offs(rt.getRank(), b.getIndexAttr(0)), sizes, strides;
    offs[axis] = b.getIndexAttr(off);
    for (int64_t d : t.getShape())
      sizes.push_back(b.getIndexAttr(d));
    strides.assign(rt.getRank(), b.getIndexAttr(1));
    acc = tensor::InsertSliceOp::create(b, op->getLoc(), in, acc, offs, sizes, strides);
    off += t.getDimSize(axis);
  }
  out.push_back(acc);
  return success();
}

LogicalResult Shape::slice(SliceOp o, SmallVector<Value> &out) {
  auto in = rtt(o.getInput());
  RankedTensorType rt = resultType();
  int64_t r = in.getRank();
  SmallVector<int64_t> start(r, 0), step(r, 1);
  ArrayRef<int64_t> starts = o.getStarts();
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = o.getAxes() ? normAxis((*o.getAxes())[i], r) : (int64_t)i;
    int64_t st = o.getSteps() ? (*o.getSteps())[i] : 1;
    int64_t dim = in.getDimSize(axis);
    if (st < 0)
      return refuse("a negative step (the runtime's reversed slice has no lowering yet)");
    int64_t s0 = starts[i] < 0 ? starts[i] + dim : starts[i];
    start[axis] = std::clamp<int64_t>(s0, 0, dim);
    step[axis] = st;
  }
  SmallVector<OpFoldResult> offs, sizes, strides;
  for (int64_t i = 0; i < r; ++i) {
    offs.push_back(b.getIndexAttr(start[i]));
    sizes.push_back(b.getIndexAttr(rt.getDimSize(i)));
    strides.push_back(b.getIndexAttr(step[i]));
  }
  out.push_back(
      tensor::ExtractSliceOp::create(b, op->getLoc(), rt, o.getInput(), offs, sizes, strides));
  return success();
}

void mlir::amp::linalg_lowering::populateShapeLowerings(LoweringSet &set) {
  set.add<IdentityOp, ReshapeOp, FlattenOp, SqueezeOp, UnsqueezeOp>(
      [](OpLowering &l, Operation *op, SmallVector<Value> &out) {
        out.push_back(l.e.reshape(op->getOperand(0), l.resultType().getShape()));
        return success();
      });
  set.add<DropoutOp>([](OpLowering &l, Operation *op, SmallVector<Value> &out) -> LogicalResult {
    if (!isIdentityDropout(op))
      return l.refuse("dropout in training mode draws random masks (the runtime's generator has "
                      "no linalg form yet); export the model in eval mode or without dropout");
    out.push_back(cast<DropoutOp>(op).getInput());
    out.push_back(Value());
    return success();
  });
  set.add<ExpandOp>([](OpLowering &l, Operation *op, SmallVector<Value> &out) {
    out.push_back(l.e.map1(
        l.resultType(), cast<ExpandOp>(op).getInput(), [](Emit &, ValueRange a) { return a[0]; },
        false));
    return success();
  });
  set.addMember(&Shape::transpose);
  set.addMember(&Shape::concat);
  set.addMember(&Shape::slice);
}
