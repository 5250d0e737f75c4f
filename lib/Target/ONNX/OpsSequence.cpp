//===- OpsSequence.cpp - sequences made at import time ----------------------===//
//
// SplitToSequence, SequenceConstruct, SequenceAt, SequenceLength,
// SequenceInsert / SequenceErase and ConcatFromSequence: sequences whose
// tensors are known when the model is imported (torch.export writes
// torch.split / chunk so), held by the importer, never at run time.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

namespace {

/// The tensors of the sequence the node's input `i` names (made at import
/// time by SplitToSequence / SequenceConstruct), or an error.
FailureOr<SmallVector<Value> *> sequenceInput(NodeCtx &n, int i) {
  if (!n.hasInput(i))
    return n.fail("input " + llvm::Twine(i) + " (a sequence) is required");
  auto it = n.im.sequences.find(n.node.input(i));
  if (it == n.im.sequences.end())
    return n.fail("input " + llvm::Twine(i) + " ('" + n.node.input(i) +
                  "') must be a sequence made by SplitToSequence or SequenceConstruct (sequences "
                  "from graph inputs, loops or other ops are not supported)");
  return &it->second;
}

/// A constant position into a sequence of `len` tensors (negative counts
/// from the end); `insert` allows `len` itself.
FailureOr<int64_t> sequencePosition(NodeCtx &n, int i, int64_t len, bool insert) {
  auto p = n.constInts(i, "position");
  if (failed(p))
    return failure();
  if (p->size() != 1)
    return n.fail("'position' must hold one value, it holds " + llvm::Twine(p->size()));
  int64_t v = (*p)[0], hi = insert ? len : len - 1;
  if (v < -len || v > hi)
    return n.fail("position " + llvm::Twine(v) + " is out of range [" + llvm::Twine(-len) + ", " +
                  llvm::Twine(hi) + "] for a sequence of " + llvm::Twine(len) + " tensor(s)");
  return v < 0 ? v + len : v;
}

/// SplitToSequence: Split's slices kept as a sequence (torch.export writes
/// torch.split / chunk so). `split` a scalar: parts of that size, the last
/// one smaller; 1-D: the sizes; absent: parts of 1, squeezed unless
/// keepdims.
LogicalResult handleSplitToSequence(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis", "keepdims"})))
    return failure();
  auto x = n.input(0);
  auto axis = n.getInt("axis", 0), keep = n.getInt("keepdims", 1);
  if (failed(x) || failed(axis) || failed(keep))
    return failure();
  auto type = cast<RankedTensorType>(x->getType());
  int64_t rank = type.getRank(), ax = *axis < 0 ? *axis + rank : *axis;
  if (ax < 0 || ax >= rank)
    return n.fail("axis " + llvm::Twine(*axis) + " is out of range for rank " + llvm::Twine(rank));
  int64_t dim = type.getDimSize(ax);
  if (ShapedType::isDynamic(dim))
    return n.fail("the split axis must have a static size");
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (n.hasInput(1)) {
    auto t = n.constInput(1, "split");
    if (failed(t))
      return failure();
    if ((*t)->dtype != onnx::TensorProto::INT64 && (*t)->dtype != onnx::TensorProto::INT32)
      return n.fail("'split' must be int64 or int32");
    std::vector<int64_t> v = (*t)->toInt64();
    if ((*t)->shape.empty()) {
      if (v[0] <= 0)
        return n.fail("a split size of " + llvm::Twine(v[0]) + " (it must be positive)");
      for (int64_t at = 0; at < dim && sizes.size() <= (1 << 16); at += sizes.back())
        sizes.push_back(std::min(v[0], dim - at));
    } else if ((*t)->shape.size() == 1) {
      int64_t total = 0;
      for (int64_t s : v) {
        if (s < 0)
          return n.fail("a part of negative size " + llvm::Twine(s));
        if (s > dim)
          return n.fail("a part of " + llvm::Twine(s) + " is longer than the axis (" +
                        llvm::Twine(dim) + ")");
        total += s; // (each <= dim: no overflow before the check below)
        if (total > dim)
          return n.fail("the parts add up to more than the axis size " + llvm::Twine(dim));
      }
      if (total != dim)
        return n.fail("the parts add up to " + llvm::Twine(total) + ", not the axis size " +
                      llvm::Twine(dim));
      sizes = v;
    } else {
      return n.fail("'split' must be a scalar or 1-D");
    }
  } else {
    sizes.assign(std::min<int64_t>(dim, (1 << 16) + 1), 1);
    squeeze = *keep == 0;
  }
  if (sizes.size() > (1 << 16))
    return n.fail("a sequence of more than 65536 tensors (import-time sequences are for "
                  "torch.split's few parts)");
  SmallVector<Value> parts;
  int64_t start = 0;
  for (int64_t size : sizes) {
    auto op = n.im.tryCreate<SliceOp>(n, {*x},
                                      {named(n, "starts", ints(n, {start})),
                                       named(n, "ends", ints(n, {start + size})),
                                       named(n, "axes", ints(n, {ax}))});
    if (failed(op))
      return failure();
    Value part = op->getResult();
    if (squeeze) {
      auto sq = n.im.tryCreate<SqueezeOp>(n, {part}, {named(n, "axes", ints(n, {ax}))});
      if (failed(sq))
        return failure();
      part = sq->getResult();
    }
    parts.push_back(part);
    start += size;
  }
  n.im.sequences[n.node.output(0)] = std::move(parts);
  return success();
}

LogicalResult handleSequenceConstruct(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  SmallVector<Value> items;
  for (size_t i = 0; i < n.numInputs(); ++i) {
    auto v = n.input(i);
    if (failed(v))
      return failure();
    if (!items.empty() && cast<RankedTensorType>(v->getType()).getElementType() !=
                              cast<RankedTensorType>(items[0].getType()).getElementType())
      return n.fail("the tensors of a sequence must have one element type");
    items.push_back(*v);
  }
  n.im.sequences[n.node.output(0)] = std::move(items);
  return success();
}

LogicalResult handleSequenceAt(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto seq = sequenceInput(n, 0);
  if (failed(seq))
    return failure();
  auto at = sequencePosition(n, 1, (int64_t)(*seq)->size(), false);
  if (failed(at))
    return failure();
  n.setOutput(0, (**seq)[*at]);
  return success();
}

LogicalResult handleSequenceLength(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto seq = sequenceInput(n, 0);
  if (failed(seq))
    return failure();
  n.setConstOutput(0, makeInt64({}, {(int64_t)(*seq)->size()}));
  return success();
}

/// SequenceInsert / SequenceErase at constant positions (the end when the
/// position is absent).
LogicalResult handleSequenceEdit(NodeCtx &n, bool insert) {
  if (failed(n.allowAttrs({})))
    return failure();
  auto seq = sequenceInput(n, 0);
  if (failed(seq))
    return failure();
  SmallVector<Value> items = **seq;
  int64_t len = items.size();
  int pos = insert ? 2 : 1;
  if (!insert && len == 0)
    return n.fail("cannot erase from an empty sequence");
  int64_t at = insert ? len : len - 1;
  if (n.hasInput(pos)) {
    auto p = sequencePosition(n, pos, len, insert);
    if (failed(p))
      return failure();
    at = *p;
  }
  if (insert) {
    auto v = n.input(1);
    if (failed(v))
      return failure();
    items.insert(items.begin() + at, *v);
  } else {
    items.erase(items.begin() + at);
  }
  n.im.sequences[n.node.output(0)] = std::move(items);
  return success();
}

/// ConcatFromSequence: Concat of the sequence's tensors (new_axis: stacked).
LogicalResult handleConcatFromSequence(NodeCtx &n) {
  if (failed(n.allowAttrs({"axis", "new_axis"})))
    return failure();
  auto seq = sequenceInput(n, 0);
  auto axis = n.getInt("axis", std::nullopt), stack = n.getInt("new_axis", 0);
  if (failed(seq) || failed(axis) || failed(stack))
    return failure();
  if ((*seq)->empty())
    return n.fail("the sequence is empty");
  SmallVector<Value> in;
  int64_t ax = *axis;
  for (Value v : **seq) {
    if (*stack) {
      int64_t rank = cast<RankedTensorType>(v.getType()).getRank() + 1;
      if (ax < -rank || ax >= rank)
        return n.fail("axis " + llvm::Twine(*axis) + " is out of range for rank " +
                      llvm::Twine(rank));
      auto u = n.im.tryCreate<UnsqueezeOp>(n, {v},
                                           {named(n, "axes", ints(n, {ax < 0 ? ax + rank : ax}))});
      if (failed(u))
        return failure();
      v = u->getResult();
    }
    in.push_back(v);
  }
  if (in.size() == 1) {
    n.setOutput(0, in[0]);
    return success();
  }
  auto op = n.im.tryCreate<ConcatOp>(n, in, {named(n, "axis", i64(n, ax))});
  if (failed(op))
    return failure();
  n.setOutput(0, op->getResult());
  return success();
}

} // namespace

void registerSequenceOps(OpRegistry &r) {
  r.on("SplitToSequence", 11, handleSplitToSequence, {1});
  r.on("SequenceConstruct", 11, handleSequenceConstruct);
  r.on("SequenceAt", 11, handleSequenceAt, {1});
  r.on("SequenceLength", 11, handleSequenceLength);
  r.on("SequenceInsert", 11, [](NodeCtx &n) { return handleSequenceEdit(n, true); }, {2});
  r.on("SequenceErase", 11, [](NodeCtx &n) { return handleSequenceEdit(n, false); }, {1});
  r.on("ConcatFromSequence", 11, handleConcatFromSequence);
}

} // namespace onnx_import
