//===- FoldCasts.cpp - amp-fold-casts ------------------------------------===//
//
// Leaves one amp.cast per (value, type) and no cast that an exact round trip
// makes redundant. Only amp.cast ops are visited: a precision decision made
// by another pass is never undone here.
//
//===----------------------------------------------------------------------===//

#include "amp/Transforms/Passes.h"

#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::amp {
#define GEN_PASS_DEF_AMPFOLDCASTS
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

/// Folds every cast under `root` with CastOp::fold (exact round trips,
/// identity casts, constants); returns how many casts disappeared.
static unsigned foldCasts(Operation *root) {
  SmallVector<Operation *> casts;
  root->walk([&](CastOp c) { casts.push_back(c); });
  if (casts.empty())
    return 0;
  size_t before = casts.size();
  RewritePatternSet none(root->getContext());
  GreedyRewriteConfig config;
  config.setStrictness(GreedyRewriteStrictness::ExistingAndNewOps);
  (void)applyOpPatternsGreedily(casts, std::move(none), config);
  size_t after = 0;
  root->walk([&](CastOp) { ++after; });
  return before > after ? before - after : 0;
}

/// Keeps the first cast of each (value, type), placed right after the value's
/// definition so that it dominates every user, and redirects the others to
/// it. Returns the number of casts merged away.
static unsigned mergeCasts(Operation *root) {
  llvm::DenseMap<std::pair<Value, Type>, CastOp> kept;
  SmallVector<CastOp> duplicates;
  root->walk([&](CastOp c) {
    auto key = std::make_pair(c.getInput(), c.getOutput().getType());
    auto [it, inserted] = kept.try_emplace(key, c);
    if (!inserted)
      duplicates.push_back(c);
  });
  if (duplicates.empty())
    return 0;
  for (CastOp dup : duplicates) {
    Value input = dup.getInput();
    CastOp keep = kept[{input, dup.getOutput().getType()}];
    if (Operation *def = input.getDefiningOp())
      keep->moveAfter(def);
    else
      keep->moveBefore(&cast<BlockArgument>(input).getOwner()->front());
    dup.getOutput().replaceAllUsesWith(keep.getOutput());
    dup->erase();
  }
  return duplicates.size();
}

/// Erases casts whose results nobody uses (a cast has no side effect).
static unsigned eraseDeadCasts(Operation *root) {
  SmallVector<CastOp> dead;
  root->walk([&](CastOp c) {
    if (c->use_empty())
      dead.push_back(c);
  });
  for (CastOp c : dead)
    c->erase();
  return dead.size();
}

unsigned mlir::amp::foldAndMergeCasts(Operation *root) {
  unsigned removed = 0;
  // Folding can expose duplicates (A->B->C becomes A->C) and merging can
  // expose round trips; two rounds reach the fixed point for chains of any
  // length because folding alone already collapses whole chains.
  for (int round = 0; round < 2; ++round) {
    removed += foldCasts(root);
    removed += mergeCasts(root);
    removed += eraseDeadCasts(root);
  }
  return removed;
}

namespace {
struct AMPFoldCastsPass : public amp::impl::AMPFoldCastsBase<AMPFoldCastsPass> {
  void runOnOperation() override { (void)foldAndMergeCasts(getOperation()); }
};
} // namespace
