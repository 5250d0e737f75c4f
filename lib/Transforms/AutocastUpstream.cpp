//===- AutocastUpstream.cpp - amp-autocast on upstream MLIR ---------------===//
//
// The walk over a function another compiler wrote (torch-mlir's linalg on
// tensors or TOSA, IREE's input), through AutocastOpInterface:
//
//   - each op with a model is looked up in the policy by the name its model
//     gives (linalg.matmul, linalg.generic.contraction, tosa.conv2d), after
//     the block list and the per-node overrides (node = the op's location);
//   - a `lower` op reads the target type at the operands its model lists
//     (each value cast once per type, right after its definition; a cast of
//     a reshape / transpose / broadcast result moves above it when the move
//     has no other use) and keeps its f32 accumulators; a result the model
//     had to narrow is cast back for its users;
//   - every other op keeps the element types it has: the program is the
//     user's f32 program (or f64 where torch-mlir wrote f64 islands), and the
//     report says, op by op, why nothing changed;
//   - an op without a model is left as it is and reported as such.
//
// Only f32 inputs are narrowed: a product reading f64 (an island the source
// program computes in double) is kept, and the report says so.
//
//===----------------------------------------------------------------------===//

#include "AutocastRules.h"

#include "amp/Transforms/AutocastOpInterface.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSwitch.h"

#include "amp/Transforms/AutocastOpInterface.cpp.inc"

using namespace mlir;
using namespace mlir::amp;
using mlir::amp::autocast_detail::typeName;

namespace {

FloatType floatElementOf(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  return r ? dyn_cast<FloatType>(r.getElementType()) : FloatType();
}

class UpstreamAutocaster {
public:
  UpstreamAutocaster(FunctionOpInterface func, const AutocastOptions &opts, AutocastReport &report,
                     Type low)
      : func(func), opts(opts), report(report), low(low), f32(Float32Type::get(func.getContext())),
        b(func.getContext()) {
    for (const auto &n : opts.blockList)
      blocked.insert(n);
  }

  LogicalResult run();

private:
  Value castTo(AutocastOpInterface style, Value v, Type elt);
  /// typeName, remembered: printing a type is the costliest step per op.
  const std::string &nameOf(Type t) {
    std::string &s = typeNames[t];
    if (s.empty())
      s = typeName(t);
    return s;
  }
  bool isWeight(Value v);
  LogicalResult visit(Operation *op, AutocastOpInterface iface);

  FunctionOpInterface func;
  const AutocastOptions &opts;
  AutocastReport &report;
  Type low, f32;
  OpBuilder b;
  llvm::StringSet<> blocked;
  /// (value, element type, dialect of the cast): one cast each.
  DenseMap<std::tuple<Value, Type, Dialect *>, Value> castCache;
  SmallVector<Operation *> movedAway; // moves whose only use is now a copy
  DenseSet<Value> weightsCast;
  DenseMap<Type, std::string> typeNames;
  /// Constants lowered ops read before (TOSA's f32 zero points): erased at
  /// the end if nothing reads them any more.
  llvm::SetVector<Operation *> replacedConstants;
  unsigned inserted = 0;
};

bool UpstreamAutocaster::isWeight(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return arg.getOwner()->getParentOp() == func.getOperation();
  return matchPattern(v, m_Constant());
}

Value UpstreamAutocaster::castTo(AutocastOpInterface style, Value v, Type elt) {
  if (getElementTypeOrSelf(v.getType()) == elt)
    return v;
  auto key = std::make_tuple(v, elt, style->getDialect());
  if (Value c = castCache.lookup(key))
    return c;
  Value result;
  // A move with no other use: cast its source and move that instead.
  Operation *def = v.getDefiningOp();
  auto move = dyn_cast_or_null<AutocastOpInterface>(def);
  if (move && v.hasOneUse() && def->getNumResults() == 1 && move.isAutocastDataMovement()) {
    Value src = def->getOperand(move.getAutocastMovedOperand());
    if (floatElementOf(src.getType()) == floatElementOf(v.getType())) {
      Value lowSrc = castTo(style, src, elt);
      FailureOr<Value> copy = move.rebuildAutocastDataMovement(b, lowSrc);
      if (succeeded(copy)) {
        movedAway.push_back(def);
        result = *copy;
      }
    }
  }
  if (!result) {
    OpBuilder::InsertionGuard g(b);
    Location loc = func.getLoc();
    if (def) {
      b.setInsertionPointAfter(def);
      loc = def->getLoc();
    } else {
      b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
    }
    result = style.buildAutocastCast(b, loc, v, elt);
    ++inserted;
    if (elt == low && isWeight(v))
      weightsCast.insert(v);
  }
  castCache[key] = result;
  return result;
}

LogicalResult UpstreamAutocaster::visit(Operation *op, AutocastOpInterface iface) {
  std::string node = nodeNameOf(op);
  SmallVector<Type> floatTypes;
  for (Type t : op->getOperandTypes())
    if (FloatType f = floatElementOf(t))
      floatTypes.push_back(f);
  for (Type t : op->getResultTypes())
    if (FloatType f = floatElementOf(t))
      floatTypes.push_back(f);
  if (floatTypes.empty() || op->getName().getStringRef() == "tensor.empty")
    return success(); // integers, shapes, booleans, inits: not autocast's
  // What the op computes in if nothing changes: its widest float type.
  Type kept = floatTypes.front();
  for (Type t : floatTypes)
    if (cast<FloatType>(t).getWidth() > cast<FloatType>(kept).getWidth())
      kept = t;

  AutocastDecision rec{node, op->getName().getStringRef().str(), "", "", "", ""};
  if (!iface) {
    rec.cls = "none";
    rec.computeType = nameOf(kept);
    rec.reason = rec.op + " has no autocast model (AutocastOpInterface): left as it is";
    report.ops.push_back(std::move(rec));
    return success();
  }
  std::string policyName = iface.getAutocastPolicyName();
  rec.op = policyName;
  autocast_detail::RuleChoice choice;
  if (auto n = autocast_detail::lookupNodeRule(opts, blocked, node))
    choice = *n;
  else
    choice = autocast_detail::lookupOpRule(opts, policyName);
  rec.cls = stringifyPrecisionClass(choice.rule.cls).str();
  rec.reason = choice.why;

  if (choice.rule.cls != PrecisionClass::Lower) {
    rec.computeType = nameOf(kept);
    rec.reason += "; reads " + nameOf(kept) +
                  ": unchanged (an upstream op changes its types "
                  "only when lowered)";
    report.ops.push_back(std::move(rec));
    return success();
  }
  if (!iface.canAutocastLower())
    return op->emitError("amp-autocast: ")
           << choice.why << ", but " << policyName << " cannot be rebuilt to read " << nameOf(low)
           << " (only products, convolutions and linalg structured ops can)";
  if (choice.rule.accumulate != "f32")
    return op->emitError("amp-autocast: ")
           << choice.rule.source << " asks " << policyName << " to accumulate in "
           << choice.rule.accumulate << "; on upstream ops the accumulator stays f32";
  SmallVector<unsigned> inputs = iface.getAutocastInputs();
  for (unsigned i : inputs) {
    FloatType t = floatElementOf(op->getOperand(i).getType());
    if (t && t != f32 && t != low) {
      rec.computeType = nameOf(kept);
      rec.reason += "; operand #" + std::to_string(i) + " is " + nameOf(t) +
                    ": kept (only f32 inputs are narrowed)";
      report.ops.push_back(std::move(rec));
      return success();
    }
  }
  SmallVector<Type> before(op->getResultTypes());
  for (Value v : op->getOperands())
    if (Operation *d = v.getDefiningOp(); d && d->hasTrait<OpTrait::ConstantLike>())
      replacedConstants.insert(d);
  FailureOr<bool> same =
      iface.autocastLower(b, low, [&](Value v, Type elt) { return castTo(iface, v, elt); });
  if (failed(same))
    return failure();
  if (!*same) {
    // Narrowed results back to their types, for every user.
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointAfter(op);
    for (auto [r, t] : llvm::zip(op->getResults(), before)) {
      if (r.getType() == t)
        continue;
      SmallVector<OpOperand *> uses;
      for (OpOperand &u : r.getUses())
        uses.push_back(&u);
      Value back = castTo(iface, r, getElementTypeOrSelf(t));
      for (OpOperand *u : uses)
        u->set(back);
    }
    rec.reason += "; the result is rounded to " + nameOf(low) + " (the op's only " + nameOf(low) +
                  " form) and cast back to " + nameOf(kept);
  }
  rec.computeType = nameOf(low);
  rec.accumulate = "f32";
  report.ops.push_back(std::move(rec));
  return success();
}

LogicalResult UpstreamAutocaster::run() {
  unsigned castsBefore = 0;
  func->walk([&](Operation *op) { castsBefore += autocast_detail::isCastOp(op); });
  // The top-level ops first (the walk must not see the casts it makes).
  SmallVector<Operation *> ops;
  func->walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (op == func.getOperation())
      return WalkResult::advance();
    ops.push_back(op);
    // A modelled op's regions (a linalg body) are part of the op.
    return isa<AutocastOpInterface>(op) ? WalkResult::skip() : WalkResult::advance();
  });
  for (Operation *op : ops) {
    if (op->hasTrait<OpTrait::ConstantLike>() || op->hasTrait<OpTrait::IsTerminator>())
      continue;
    if (failed(visit(op, dyn_cast<AutocastOpInterface>(op))))
      return failure();
  }
  // Moves now read by nothing (their copy took their one use), the inits
  // and shapes only they read, and the constants lowered ops no longer read
  // (TOSA's f32 zero points): erased once each.
  llvm::SetVector<Operation *> maybeDead(replacedConstants.begin(), replacedConstants.end());
  for (Operation *op : llvm::reverse(movedAway)) {
    if (!op->use_empty())
      continue;
    for (Value v : op->getOperands())
      if (Operation *d = v.getDefiningOp())
        maybeDead.insert(d);
    maybeDead.remove(op);
    op->erase();
  }
  for (Operation *d : maybeDead)
    if (d->use_empty() && isOpTriviallyDead(d))
      d->erase();
  report.castsBefore += castsBefore;
  report.castsAfter += castsBefore + inserted;
  report.paramsCast += weightsCast.size();
  return success();
}

} // namespace

LogicalResult mlir::amp::autocast_detail::runUpstreamAutocast(FunctionOpInterface func,
                                                              const AutocastOptions &opts,
                                                              AutocastReport &report, Type low) {
  if (!opts.keepIOTypes)
    return func.emitError("amp-autocast: keep-io-types=false is for amp programs; on "
                          "upstream ops the function's types are kept");
  return UpstreamAutocaster(func, opts, report, low).run();
}
