//===- Passes.h - amp conversion passes -------------------------*- C++ -*-===//
//
// amp-lower-to-runtime (calls into libamprt) and amp-lower-to-linalg (linalg
// on tensors, for other compilers).
//
//===----------------------------------------------------------------------===//

#ifndef AMP_CONVERSION_PASSES_H
#define AMP_CONVERSION_PASSES_H

#include "amp/Dialect/AMP/IR/AMPOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::amp {

#define GEN_PASS_DECL
#include "amp/Conversion/Passes.h.inc"

/// The runtime's element type code (an amprt_dtype) for an MLIR type or the
/// element type of a shaped type; failure when the runtime has none
/// (AMPToRuntime).
FailureOr<int64_t> runtimeDTypeCode(Type t);

#define GEN_PASS_REGISTRATION
#include "amp/Conversion/Passes.h.inc"

} // namespace mlir::amp

#endif // AMP_CONVERSION_PASSES_H
