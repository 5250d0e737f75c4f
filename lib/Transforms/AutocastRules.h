//===- AutocastRules.h - shared by the two autocast walks -------*- C++ -*-===//
//
// amp-autocast walks amp functions (Autocast.cpp) and functions of upstream
// dialects (AutocastUpstream.cpp); both look rules up the same way and
// report the same fields.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_LIB_TRANSFORMS_AUTOCASTRULES_H
#define AMP_LIB_TRANSFORMS_AUTOCASTRULES_H

#include "amp/Transforms/Autocast.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringSet.h"

#include <optional>
#include <string>

namespace mlir::amp::autocast_detail {

struct RuleChoice {
  PolicyRule rule;
  std::string why;
};

/// The block list or a per-node override for `node`, if either names it.
std::optional<RuleChoice> lookupNodeRule(const AutocastOptions &opts,
                                         const llvm::StringSet<> &blocked, llvm::StringRef node);
/// The policy's rule for `policyName`, or fp32 (the safe default) with why.
RuleChoice lookupOpRule(const AutocastOptions &opts, llvm::StringRef policyName);

std::string typeName(Type t);

/// amp.cast, tosa.cast, or a linalg.generic whose body only converts.
bool isCastOp(Operation *op);

/// The walk over a function of upstream ops (no amp op in it).
LogicalResult runUpstreamAutocast(FunctionOpInterface func, const AutocastOptions &opts,
                                  AutocastReport &report, Type low);

} // namespace mlir::amp::autocast_detail

#endif // AMP_LIB_TRANSFORMS_AUTOCASTRULES_H
