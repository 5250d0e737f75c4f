//===- AutocastOpInterface.h - autocast on any dialect ----------*- C++ -*-===//
//
// The op interface amp-autocast uses on ops outside the amp dialect, and the
// external models for upstream MLIR (linalg on tensors, tensor, TOSA).
//
//===----------------------------------------------------------------------===//

#ifndef AMP_TRANSFORMS_AUTOCASTOPINTERFACE_H
#define AMP_TRANSFORMS_AUTOCASTOPINTERFACE_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OpDefinition.h"

#include <string>

#include "amp/Transforms/AutocastOpInterface.h.inc"

namespace mlir::amp {

/// Attaches AutocastOpInterface to the ops of linalg, tensor and TOSA (when
/// those dialects are loaded). A compiler embedding the passes calls this on
/// its registry, next to registerAMPPasses().
void registerAutocastExternalModels(DialectRegistry &registry);

/// The refinements of `linalg.generic` the models report (and a policy file
/// may name): linalg.generic.contraction, .convolution, .reduction,
/// .elementwise.
bool isAutocastPolicyRefinement(llvm::StringRef name);

} // namespace mlir::amp

#endif // AMP_TRANSFORMS_AUTOCASTOPINTERFACE_H
