//===- RecastWeights.cpp - amp-recast-weights ------------------------------===//
//
// A parameter's f16 / bf16 cast (amp-autocast, merged by cse) is read by
// the forward's products and again by the backward's: one copy per weight,
// live from the forward to the backward. At the end of the forward, where
// a transformer's training step holds every activation saved for the
// backward, those copies are 2 bytes a parameter more. This pass gives the
// backward's readers (ops carrying amp.differentiates) a cast of their own,
// made right before the first of them: the forward's copy dies after its
// last forward reader. The same values bit for bit (the master weight is
// updated only after the backward); one more pass over the weights.
//
//===----------------------------------------------------------------------===//

#include "amp/Dialect/AMP/IR/AMPDialect.h"
#include "amp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::amp {
#define GEN_PASS_DEF_AMPRECASTWEIGHTS
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

namespace {

bool isBackward(Operation *op) { return op->hasAttr(attrname::kDifferentiates); }

struct AMPRecastWeightsPass : public amp::impl::AMPRecastWeightsBase<AMPRecastWeightsPass> {
  void runOnOperation() override {
    for (func::FuncOp f : getOperation().getOps<func::FuncOp>()) {
      if (f.isExternal() || !f.getBody().hasOneBlock())
        continue;
      SmallVector<CastOp> casts;
      for (BlockArgument a : f.getArguments()) {
        if (!f.getArgAttr(a.getArgNumber(), attrname::kParam))
          continue;
        for (Operation *u : a.getUsers())
          if (auto c = dyn_cast<CastOp>(u))
            if (isa<Float16Type, BFloat16Type>(getElementTypeOrSelf(c.getOutput().getType())))
              casts.push_back(c);
      }
      OpBuilder b(f.getContext());
      for (CastOp c : casts) {
        Operation *first = nullptr;
        bool forward = false;
        for (Operation *u : c.getOutput().getUsers()) {
          if (!isBackward(u)) {
            forward = true;
          } else if (!first || u->isBeforeInBlock(first)) {
            first = u;
          }
        }
        // Only where the forward reads the copy too, and before the
        // backward (a cast the backward alone reads is made there already).
        if (!forward || !first || first->isBeforeInBlock(c))
          continue;
        b.setInsertionPoint(first);
        auto again = CastOp::create(b, c.getLoc(), c.getOutput().getType(), c.getInput());
        c.getOutput().replaceUsesWithIf(again.getOutput(),
                                        [](OpOperand &use) { return isBackward(use.getOwner()); });
      }
    }
  }
};

} // namespace
