//===- AutocastRules.cpp - rules and names both autocast walks use --------===//
//
// The policy lookups, node and type names and the cast test of
// AutocastRules.h, shared by amp-autocast's walk over amp functions
// (Autocast.cpp) and over upstream dialects (AutocastUpstream.cpp).
//
//===----------------------------------------------------------------------===//

#include "AutocastRules.h"

#include "amp/Dialect/AMP/IR/AMPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::amp;

std::string mlir::amp::nodeNameOf(Operation *op) {
  Location loc = op->getLoc();
  if (auto n = dyn_cast<NameLoc>(loc))
    return n.getName().str();
  if (auto f = dyn_cast<FusedLoc>(loc))
    for (Location l : f.getLocations())
      if (auto n = dyn_cast<NameLoc>(l))
        return n.getName().str();
  if (auto f = dyn_cast<FileLineColLoc>(loc))
    return (f.getFilename().getValue() + ":" + llvm::Twine(f.getLine()) + ":" +
            llvm::Twine(f.getColumn()))
        .str();
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}

std::string mlir::amp::autocast_detail::typeName(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

std::optional<autocast_detail::RuleChoice>
mlir::amp::autocast_detail::lookupNodeRule(const AutocastOptions &opts,
                                           const llvm::StringSet<> &blocked, llvm::StringRef name) {
  if (blocked.contains(name))
    return RuleChoice{PolicyRule{PrecisionClass::FP32, "f32", "block list"},
                      "node '" + name.str() + "' is on the block list"};
  if (auto it = opts.policy.nodes.find(name); it != opts.policy.nodes.end())
    return RuleChoice{it->second, "node override in " + it->second.source};
  return std::nullopt;
}

autocast_detail::RuleChoice mlir::amp::autocast_detail::lookupOpRule(const AutocastOptions &opts,
                                                                     llvm::StringRef opName) {
  if (auto it = opts.policy.ops.find(opName); it != opts.policy.ops.end())
    return RuleChoice{it->second, it->second.source + " lists " + opName.str() + " as " +
                                      stringifyPrecisionClass(it->second.cls).str()};
  return RuleChoice{PolicyRule{PrecisionClass::FP32, "f32", "fallback"},
                    opName.str() + " is not in the policy: fp32, the safe default"};
}

bool mlir::amp::autocast_detail::isCastOp(Operation *op) {
  if (isa<CastOp>(op) || op->getName().getStringRef() == "tosa.cast")
    return true;
  // linalg.generic { arith.truncf / extf (one or two), linalg.yield }, one
  // input, one init: the casts IREE and this pass write on tensors.
  if (op->getName().getStringRef() != "linalg.generic" || op->getNumRegions() != 1 ||
      op->getNumResults() != 1 || op->getRegion(0).empty())
    return false;
  Block &body = op->getRegion(0).front();
  if (body.getNumArguments() != 2 || body.getOperations().size() < 2 ||
      body.getOperations().size() > 3)
    return false;
  for (Operation &o : body.without_terminator())
    if (!isa<arith::TruncFOp, arith::ExtFOp>(o))
      return false;
  return true;
}
