//===- Passes.h - amp transformation passes ---------------------*- C++ -*-===//

#ifndef AMP_TRANSFORMS_PASSES_H
#define AMP_TRANSFORMS_PASSES_H

#include "amp/Dialect/AMP/IR/AMPOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
namespace amp {

#define GEN_PASS_DECL
#include "amp/Transforms/Passes.h.inc"

/// Merges duplicate casts of one value to one type and folds exact round
/// trips in `root`. Returns the number of casts removed.
unsigned foldAndMergeCasts(Operation *root);

#define GEN_PASS_REGISTRATION
#include "amp/Transforms/Passes.h.inc"

} // namespace amp
} // namespace mlir

#endif // AMP_TRANSFORMS_PASSES_H
