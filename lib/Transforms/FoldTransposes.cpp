//===- FoldTransposes.cpp - amp-fold-transposes --------------------------===//
//
// Takes copies out of the graph where a transpose can be read differently:
//
//   * transpose(transpose(x))           -> one transpose (none if identity)
//   * cast(transpose(x)), narrowing      -> transpose(cast(x))
//   * transpose(cast(x)), widening       -> cast(transpose(x))
//   * gemm(transpose(a), b)              -> gemm(a, b, trans_a = !trans_a)
//     (the same for b)
//   * transpose(gemm(a, b)), no C        -> gemm(b, a, !trans_b, !trans_a)
//
// The cast moves put each transpose on the narrower side of its cast (fewer
// bytes to move), and next to the products that absorb it: an f32 weight
// transposed and then cast to bf16 for a product becomes a bf16 cast of
// the weight that the product reads transposed. Every rewrite is exact
// (a cast is element-wise; the products' flags transpose their operands).
// A moved cast or transpose is made only when the op it replaces has no
// other user, so nothing is computed twice.
//
//===----------------------------------------------------------------------===//

#include "amp/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::amp {
#define GEN_PASS_DEF_AMPFOLDTRANSPOSES
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

namespace {

SmallVector<int64_t> permOf(TransposeOp t) {
  int64_t r = cast<RankedTensorType>(t.getInput().getType()).getRank();
  if (auto p = t.getPerm())
    return SmallVector<int64_t>(p->begin(), p->end());
  SmallVector<int64_t> rev;
  for (int64_t i = r - 1; i >= 0; --i)
    rev.push_back(i);
  return rev;
}

bool isIdentity(ArrayRef<int64_t> perm) {
  for (auto [i, p] : llvm::enumerate(perm))
    if (p != static_cast<int64_t>(i))
      return false;
  return true;
}

/// A 2-D transpose: rows and columns swapped.
bool isMatrixTranspose(Operation *op) {
  auto t = dyn_cast_or_null<TransposeOp>(op);
  return t && permOf(t) == SmallVector<int64_t>{1, 0};
}

unsigned floatWidth(Type t) {
  auto f = dyn_cast<FloatType>(getElementTypeOrSelf(t));
  return f ? f.getWidth() : 0;
}

/// The type of `like` with `elt` as its element type.
Type withElement(Type like, Type elt) {
  return cast<RankedTensorType>(like).clone(getElementTypeOrSelf(elt));
}

/// Copies the discardable attributes (amp.differentiates and the like) of
/// `from` onto `to`, the op that takes its place.
void keepAttrs(Operation *from, Operation *to) {
  for (NamedAttribute a : from->getDiscardableAttrs())
    if (!to->hasAttr(a.getName()))
      to->setAttr(a.getName(), a.getValue());
}

/// Points `op`'s users at `with`; `op`, now dead, is erased after the
/// round (see eraseReplaced).
void replace(SmallVectorImpl<Operation *> &replaced, Operation *op, Value with) {
  op->getResult(0).replaceAllUsesWith(with);
  replaced.push_back(op);
}

/// Erases the replaced ops and the transposes, casts and products that
/// only they read. Ops that were dead before the pass stay (nothing else
/// is touched).
void eraseReplaced(SmallVectorImpl<Operation *> &ops) {
  llvm::DenseSet<Operation *> erased;
  while (!ops.empty()) {
    Operation *op = ops.pop_back_val();
    if (erased.contains(op) || !op->use_empty())
      continue;
    SmallVector<Operation *> inputs;
    for (Value v : op->getOperands())
      if (Operation *d = v.getDefiningOp(); d && isa<TransposeOp, CastOp, GemmOp>(d))
        inputs.push_back(d);
    op->erase();
    erased.insert(op);
    for (Operation *d : inputs)
      if (d->use_empty())
        ops.push_back(d);
  }
}

/// One rewrite at `op` (which may be replaced); true when something changed.
bool rewriteOne(Operation *op, SmallVectorImpl<Operation *> &replaced) {
  OpBuilder b(op);
  if (auto t = dyn_cast<TransposeOp>(op)) {
    Operation *def = t.getInput().getDefiningOp();
    SmallVector<int64_t> perm = permOf(t);
    if (isIdentity(perm)) {
      replace(replaced, t, t.getInput());
      return true;
    }
    if (auto inner = dyn_cast_or_null<TransposeOp>(def)) {
      SmallVector<int64_t> p0 = permOf(inner), composed;
      for (int64_t p : perm)
        composed.push_back(p0[p]);
      Value x = inner.getInput();
      Value r = isIdentity(composed) ? x
                                     : TransposeOp::create(b, t.getLoc(), t.getType(), x,
                                                           b.getDenseI64ArrayAttr(composed))
                                           .getResult();
      if (Operation *n = r.getDefiningOp(); n && n != x.getDefiningOp())
        keepAttrs(t, n);
      replace(replaced, t, r);
      return true;
    }
    if (auto c = dyn_cast_or_null<CastOp>(def);
        c && c->hasOneUse() && floatWidth(c.getInput().getType()) &&
        floatWidth(c.getType()) > floatWidth(c.getInput().getType())) {
      Value x = c.getInput();
      auto moved = TransposeOp::create(b, t.getLoc(), withElement(t.getType(), x.getType()), x,
                                       b.getDenseI64ArrayAttr(perm));
      keepAttrs(t, moved);
      auto nc = CastOp::create(b, c.getLoc(), t.getType(), moved.getResult());
      keepAttrs(c, nc);
      replace(replaced, t, nc.getResult());
      return true;
    }
    if (auto g = dyn_cast_or_null<GemmOp>(def);
        g && g->hasOneUse() && !g.getC() && isMatrixTranspose(t)) {
      // (op(A) op(B))^T = op(B)^T op(A)^T
      auto n = cast<GemmOp>(b.clone(*g));
      n->setOperand(0, g.getB());
      n->setOperand(1, g.getA());
      n.setTransAAttr(b.getBoolAttr(!g.getTransB()));
      n.setTransBAttr(b.getBoolAttr(!g.getTransA()));
      n.getResult().setType(cast<RankedTensorType>(t.getType()));
      replace(replaced, t, n.getResult());
      return true;
    }
    return false;
  }
  if (auto c = dyn_cast<CastOp>(op)) {
    auto t = dyn_cast_or_null<TransposeOp>(c.getInput().getDefiningOp());
    if (!t || !t->hasOneUse() || !floatWidth(c.getType()) || !floatWidth(t.getType()) ||
        floatWidth(c.getType()) > floatWidth(t.getType()))
      return false;
    Value x = t.getInput();
    auto nc = CastOp::create(b, c.getLoc(), withElement(x.getType(), c.getType()), x);
    keepAttrs(c, nc);
    auto moved = TransposeOp::create(b, t.getLoc(), c.getType(), nc.getResult(),
                                     b.getDenseI64ArrayAttr(permOf(t)));
    keepAttrs(t, moved);
    replace(replaced, c, moved.getResult());
    return true;
  }
  if (auto g = dyn_cast<GemmOp>(op)) {
    bool changed = false;
    for (unsigned i = 0; i < 2; ++i) {
      Operation *def = g->getOperand(i).getDefiningOp();
      if (!isMatrixTranspose(def))
        continue;
      g->setOperand(i, def->getOperand(0));
      replaced.push_back(def); // erased if this was its last user
      if (i == 0)
        g.setTransAAttr(b.getBoolAttr(!g.getTransA()));
      else
        g.setTransBAttr(b.getBoolAttr(!g.getTransB()));
      changed = true;
    }
    return changed;
  }
  return false;
}

} // namespace

unsigned mlir::amp::foldTransposes(Operation *root) {
  unsigned rewrites = 0;
  // A rewrite only replaces uses (the replaced ops are erased between
  // rounds), so the ops collected for a round stay valid through it; an op
  // left without users is skipped. Transposes only ever move to the narrow
  // side of a cast or disappear, so the rounds end; the bound is a safety
  // net.
  for (int round = 0; round < 64; ++round) {
    SmallVector<Operation *> ops;
    root->walk([&](Operation *op) {
      if (isa<TransposeOp, CastOp, GemmOp>(op))
        ops.push_back(op);
    });
    unsigned before = rewrites;
    SmallVector<Operation *> replaced;
    for (Operation *op : ops)
      if (!op->use_empty() && rewriteOne(op, replaced))
        ++rewrites;
    eraseReplaced(replaced);
    if (rewrites == before)
      break;
  }
  return rewrites;
}

namespace {
struct AMPFoldTransposesPass : public amp::impl::AMPFoldTransposesBase<AMPFoldTransposesPass> {
  void runOnOperation() override {
    foldTransposes(getOperation());
    foldAndMergeCasts(getOperation());
  }
};
} // namespace
