//===- Passes.td - amp transformation passes ---------------*- tablegen -*-===//

#ifndef AMP_TRANSFORMS_PASSES_TD
#define AMP_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def AMPFoldCasts : Pass<"amp-fold-casts"> {
  let summary = "Fold exact cast round trips and share one cast per (value, type)";
  let description = [{
    Leaves no redundant `amp.cast`:
      * a cast to the value's own type is removed;
      * `A -> B -> C` where `A -> B` is exact becomes `A -> C` (so
        `f16 -> f32 -> f16` disappears; the lossy `f32 -> f16 -> f32` stays);
      * all casts of one value to one type become a single cast placed right
        after the value's definition, shared by every user;
      * casts left without users are erased.
    Other ops are not touched, so decisions made by amp-autocast (an op kept
    in f32 on purpose) are never undone here.
  }];
  let dependentDialects = ["::mlir::amp::AMPDialect"];
}

#endif // AMP_TRANSFORMS_PASSES_TD
