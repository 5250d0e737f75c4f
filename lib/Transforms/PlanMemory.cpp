//===- PlanMemory.cpp - amp-plan-memory ----------------------------------===//
//
// Static buffer assignment: every tensor an amp op produces gets a byte
// offset in one arena per function, reused once the value is dead (liveness
// over the function's single block, best-fit placement, 64-byte aligned).
// Reshape-like ops (reshape, flatten, squeeze, unsqueeze, identity) alias
// their input: all buffers are contiguous row-major, so they are a new
// shape on the same bytes; so does a dropout that passes its input through
// (ratio 0 or not training, its mask unread). The plan is written as attributes:
//
//   op:   amp.slots = array<i64: off0, off1, ...>   (-1: aliases its input)
//   func: amp.arena_bytes, amp.arena_bytes_if_f32
//
// so that the peak is known at compile time, and what low precision saved.
//
//===----------------------------------------------------------------------===//

#include "amp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>
#include <map>

namespace mlir::amp {
#define GEN_PASS_DEF_AMPPLANMEMORY
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

bool mlir::amp::isAliasOp(Operation *op) {
  return isa<ReshapeOp, FlattenOp, SqueezeOp, UnsqueezeOp, IdentityOp>(op) ||
         isMatmulViewTranspose(op) || isIdentityDropout(op) || isReshapeTranspose(op);
}

bool mlir::amp::isReshapeTranspose(Operation *op) {
  auto t = dyn_cast<TransposeOp>(op);
  if (!t)
    return false;
  auto in = cast<RankedTensorType>(t.getInput().getType());
  int64_t r = in.getRank(), last = -1;
  for (int64_t i = 0; i < r; ++i) {
    int64_t from = t.getPerm() ? (*t.getPerm())[i] : r - 1 - i;
    if (in.getDimSize(from) == 1)
      continue;
    if (from < last || ShapedType::isDynamic(in.getDimSize(from)))
      return false;
    last = from;
  }
  return true;
}

bool mlir::amp::isIdentityDropout(Operation *op) {
  auto d = dyn_cast<DropoutOp>(op);
  return d && (!d.getTrainingMode() || d.getRatio().isZero()) && d.getMask().use_empty();
}

bool mlir::amp::isMatmulViewTranspose(Operation *op) {
  auto t = dyn_cast<TransposeOp>(op);
  if (!t || t.getResult().use_empty())
    return false;
  auto ty = cast<RankedTensorType>(t.getType());
  int64_t r = ty.getRank();
  if (r < 2 || !isa<FloatType>(ty.getElementType()) || !ty.hasStaticShape())
    return false;
  for (int64_t i = 0; i < r; ++i) {
    int64_t from = t.getPerm() ? (*t.getPerm())[i] : r - 1 - i;
    if (from != (i < r - 2 ? i : i == r - 2 ? r - 1 : r - 2))
      return false;
  }
  return llvm::all_of(t.getResult().getUsers(), [](Operation *u) { return isa<MatMulOp>(u); });
}

FailureOr<int64_t> mlir::amp::tensorBytes(Type t, bool asF32) {
  auto rt = dyn_cast<RankedTensorType>(t);
  if (!rt || !rt.hasStaticShape())
    return failure();
  Type e = rt.getElementType();
  int64_t es = e.isInteger(1) ? 1 : (e.getIntOrFloatBitWidth() + 7) / 8;
  if (asF32 && isa<FloatType>(e))
    es = 4;
  int64_t n = es;
  for (int64_t d : rt.getShape())
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxPlannedTensorBytes)
      return failure();
  return n;
}

namespace {

struct Interval {
  Value v;
  int64_t def, last, size;
};

/// Best-fit placement of intervals sorted by definition; returns the peak.
int64_t place(std::vector<Interval> &ivs, DenseMap<Value, int64_t> &offsets) {
  std::map<int64_t, int64_t> freeBlocks; // offset -> size
  int64_t top = 0, peak = 0;
  std::multimap<int64_t, std::pair<int64_t, int64_t>> live; // last -> (off, size)
  auto release = [&](int64_t off, int64_t size) {
    auto it = freeBlocks.emplace(off, size).first;
    // Merge with the next and the previous block.
    auto next = std::next(it);
    if (next != freeBlocks.end() && it->first + it->second == next->first) {
      it->second += next->second;
      freeBlocks.erase(next);
    }
    if (it != freeBlocks.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        freeBlocks.erase(it);
        it = prev;
      }
    }
    if (it->first + it->second == top) { // give the end back
      top = it->first;
      freeBlocks.erase(it);
    }
  };
  for (Interval &iv : ivs) {
    while (!live.empty() && live.begin()->first < iv.def) {
      auto [off, size] = live.begin()->second;
      live.erase(live.begin());
      release(off, size);
    }
    int64_t size = (iv.size + 63) / 64 * 64;
    auto best = freeBlocks.end();
    for (auto it = freeBlocks.begin(); it != freeBlocks.end(); ++it)
      if (it->second >= size && (best == freeBlocks.end() || it->second < best->second))
        best = it;
    int64_t off;
    if (best != freeBlocks.end()) {
      off = best->first;
      int64_t rest = best->second - size;
      freeBlocks.erase(best);
      if (rest)
        freeBlocks.emplace(off + size, rest);
    } else {
      off = top;
      if (top > std::numeric_limits<int64_t>::max() / 2 - size)
        return -1; // (each size <= 2^48: no overflow above)
      top += size;
    }
    offsets[iv.v] = off;
    peak = std::max(peak, top);
    live.emplace(iv.last, std::make_pair(off, size));
  }
  return peak;
}

} // namespace

FailureOr<MemoryPlan> mlir::amp::planMemory(func::FuncOp f) {
  MemoryPlan plan;
  if (f.isExternal())
    return plan;
  if (!f.getBody().hasOneBlock())
    return LogicalResult(f.emitError("amp-plan-memory: '")
                         << f.getSymName() << "' has control flow; only single-block "
                         << "functions are planned");
  Block &block = f.getBody().front();
  DenseMap<Value, Value> rootOf;
  auto root = [&](Value v) {
    auto it = rootOf.find(v);
    return it == rootOf.end() ? v : it->second;
  };
  DenseMap<Value, int64_t> defAt, lastAt;
  std::vector<Value> owned;
  int64_t idx = 0, end = (int64_t)block.getOperations().size() + 1;
  for (Operation &op : block) {
    ++idx;
    if (!isa<AMPDialect>(op.getDialect()) && !isa<arith::ConstantOp, func::ReturnOp>(op))
      return LogicalResult(op.emitOpError("cannot be planned: only amp ops, "
                                          "arith.constant and func.return run on the "
                                          "runtime"));
    for (Value v : op.getOperands()) {
      Value r = root(v);
      if (defAt.count(r))
        lastAt[r] = std::max(lastAt[r], isa<func::ReturnOp>(op) ? end : idx);
    }
    if (isAliasOp(&op)) {
      rootOf[op.getResult(0)] = root(op.getOperand(0));
      continue;
    }
    if (!isa<AMPDialect>(op.getDialect()))
      continue;
    for (Value r : op.getResults()) {
      if (failed(tensorBytes(r.getType())) || failed(tensorBytes(r.getType(), true))) {
        auto rt = dyn_cast<RankedTensorType>(r.getType());
        if (!rt || !rt.hasStaticShape())
          return LogicalResult(op.emitOpError("result type ")
                               << r.getType()
                               << " has dynamic dims: the memory plan needs static "
                                  "shapes (specialise the model's input shapes)");
        return LogicalResult(op.emitOpError("result type ")
                             << r.getType() << " is too large: more than the "
                             << kMaxPlannedTensorBytes << " bytes (256 TiB) one tensor "
                             << "of a memory plan may take");
      }
      defAt[r] = idx;
      lastAt[r] = idx; // a dead result still needs its slot while written
      owned.push_back(r);
    }
  }
  // amp.unscale_and_check works in place: an output takes its gradient's
  // bytes when the check is the gradient's last reader and the two have one
  // size (an f32 gradient; with loss scaling "none" the kernel then only
  // reads). The output's readers extend the gradient's interval.
  DenseMap<Value, Value> sharesWith;
  for (Operation &op : block) {
    auto u = dyn_cast<UnscaleAndCheckOp>(&op);
    if (!u)
      continue;
    for (auto [g, out] : llvm::zip(u.getGrads(), u.getUnscaled())) {
      Value r = root(g);
      if (!defAt.count(r) || sharesWith.count(r) || lastAt[r] != defAt[out] ||
          *tensorBytes(r.getType()) != *tensorBytes(out.getType()) ||
          *tensorBytes(r.getType(), true) != *tensorBytes(out.getType(), true))
        continue;
      sharesWith[r] = out;
      sharesWith[out] = r;
      lastAt[r] = std::max(lastAt[r], lastAt[out]);
      llvm::erase(owned, out);
    }
  }
  for (bool asF32 : {false, true}) {
    std::vector<Interval> ivs;
    for (Value v : owned)
      ivs.push_back({v, defAt[v], lastAt[v], *tensorBytes(v.getType(), asF32)});
    DenseMap<Value, int64_t> offsets;
    int64_t peak = place(ivs, offsets);
    if (peak < 0)
      return LogicalResult(f.emitError("amp-plan-memory: '")
                           << f.getSymName() << "' needs an arena of more than 2^62 bytes");
    for (Value v : owned)
      if (auto it = sharesWith.find(v); it != sharesWith.end())
        offsets[it->second] = offsets[v];
    if (asF32) {
      plan.arenaBytesIfF32 = peak;
    } else {
      plan.arenaBytes = peak;
      plan.offsets = std::move(offsets);
    }
  }
  plan.buffers = owned.size();
  return plan;
}

namespace {
struct AMPPlanMemoryPass : public amp::impl::AMPPlanMemoryBase<AMPPlanMemoryPass> {
  using AMPPlanMemoryBase::AMPPlanMemoryBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string json = "{\"functions\": [";
    bool first = true;
    for (func::FuncOp f : module.getOps<func::FuncOp>()) {
      auto plan = planMemory(f);
      if (failed(plan))
        return signalPassFailure();
      if (f.isExternal())
        continue;
      Builder b(f.getContext());
      for (Operation &op : f.getBody().front()) {
        if (!isa<AMPDialect>(op.getDialect()))
          continue;
        SmallVector<int64_t> slots;
        for (Value r : op.getResults()) {
          auto it = plan->offsets.find(r);
          slots.push_back(it == plan->offsets.end() ? -1 : it->second);
        }
        op.setAttr(attrname::kSlots, b.getDenseI64ArrayAttr(slots));
      }
      f->setAttr(attrname::kArenaBytes, b.getI64IntegerAttr(plan->arenaBytes));
      f->setAttr(attrname::kArenaBytesIfF32, b.getI64IntegerAttr(plan->arenaBytesIfF32));
      json += llvm::formatv("{0}{{\"name\": \"{1}\", \"arena_bytes\": {2}, "
                            "\"arena_bytes_if_f32\": {3}, \"buffers\": {4}}",
                            first ? "" : ", ", f.getSymName(), plan->arenaBytes,
                            plan->arenaBytesIfF32, plan->buffers)
                  .str();
      first = false;
    }
    json += "]}\n";
    if (!report.empty()) {
      if (llvm::Error e = llvm::writeToOutput(report, [&](llvm::raw_ostream &os) {
            os << json;
            return llvm::Error::success();
          })) {
        module.emitError("amp-plan-memory: cannot write '")
            << report << "': " << llvm::toString(std::move(e));
        return signalPassFailure();
      }
    }
  }
};
} // namespace
