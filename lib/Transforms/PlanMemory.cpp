//===- PlanMemory.cpp - amp-plan-memory ----------------------------------===//
//
// Static buffer assignment: every tensor an amp op produces gets a byte
// offset in one arena per function, reused once the value is dead (liveness
// over the function's single block, 64-byte aligned): largest first, each
// into the smallest gap it fits left by the values live with it (the
// greedy-by-size placement of TFLite's arena planner, Pisarchyk & Lee 2020),
// or best fit in order of definition where that packs tighter.
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

#include "common/workspace.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>
#include <map>
#include <set>

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

std::map<unsigned, unsigned> mlir::amp::inPlaceResults(func::FuncOp f) {
  std::map<unsigned, unsigned> out;
  Block &block = f.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  llvm::StringMap<BlockArgument> state;
  for (BlockArgument a : f.getArguments())
    for (StringRef key : {attrname::kParam, attrname::kOptState})
      if (auto n = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), key))
        state[n.getValue()] = a;
  std::set<unsigned> argsTaken;
  for (unsigned i = 0; i < f.getNumResults(); ++i) {
    auto name = f.getResultAttrOfType<StringAttr>(i, attrname::kUpdates);
    if (!name || !state.count(name.getValue()))
      continue;
    BlockArgument a = state[name.getValue()];
    Value v = ret.getOperand(i);
    Operation *x = v.getDefiningOp();
    if (!x || v.getType() != a.getType() || argsTaken.count(a.getArgNumber()))
      continue;
    // The op's input that becomes this result, element for element.
    unsigned k = cast<OpResult>(v).getResultNumber();
    Value in;
    if (auto s = dyn_cast<SGDUpdateOp>(x))
      in = k == 0 ? s.getParam() : s.getMomentumBuf();
    else if (auto d = dyn_cast<AdamUpdateOp>(x))
      in = k == 0 ? d.getParam() : k == 1 ? d.getExpAvg() : d.getExpAvgSq();
    else if (auto c = dyn_cast<StepCountOp>(x))
      in = c.getStep();
    else if (isa<UpdateScaleOp>(x))
      in = x->getOperand(k);
    else if (isa<CastOp>(x) && !getElementTypeOrSelf(v.getType()).isF32())
      in = a; // a fresh f16 / bf16 copy (amp-keep-weight-casts): a is not read by x
    if (in != a)
      continue;
    // Returned once, and the argument read by nothing after the op.
    if (llvm::count(ret.getOperands(), v) != 1)
      continue;
    bool laterRead =
        llvm::any_of(a.getUsers(), [&](Operation *u) { return u != x && x->isBeforeInBlock(u); });
    if (laterRead)
      continue;
    out[i] = a.getArgNumber();
    argsTaken.insert(a.getArgNumber());
  }
  return out;
}

namespace {

struct Interval {
  Value v;
  int64_t def, last, size;
};

int64_t aligned(int64_t size) { return (size + 63) / 64 * 64; }

/// The most bytes live at once, and the op index where they are.
std::pair<int64_t, int64_t> liveBytes(const std::vector<Interval> &ivs) {
  std::map<int64_t, int64_t> delta; // op index -> bytes born (+) / freed (-)
  for (const Interval &iv : ivs) {
    delta[iv.def] += aligned(iv.size);
    delta[iv.last + 1] -= aligned(iv.size);
  }
  int64_t live = 0, most = 0, at = 0;
  for (auto [i, d] : delta)
    if ((live += d) > most) {
      most = live;
      at = i;
    }
  return {most, at};
}

/// Largest first: each interval into the smallest gap that holds it
/// between the intervals already placed that overlap it in time (else
/// above them all); returns the peak.
int64_t placeBySize(const std::vector<Interval> &ivs, DenseMap<Value, int64_t> &offsets) {
  std::vector<size_t> order(ivs.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return aligned(ivs[a].size) > aligned(ivs[b].size); });
  struct Placed {
    int64_t def, last, off, end;
  };
  std::vector<Placed> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;
  int64_t peak = 0;
  for (size_t i : order) {
    const Interval &iv = ivs[i];
    int64_t size = aligned(iv.size);
    busy.clear();
    for (const Placed &p : placed)
      if (p.def <= iv.last && iv.def <= p.last)
        busy.push_back({p.off, p.end});
    llvm::sort(busy);
    int64_t cur = 0, best = -1, bestGap = std::numeric_limits<int64_t>::max();
    for (auto [off, end] : busy) {
      if (off - cur >= size && off - cur < bestGap) {
        best = cur;
        bestGap = off - cur;
      }
      cur = std::max(cur, end);
    }
    int64_t off = best >= 0 ? best : cur;
    if (off > std::numeric_limits<int64_t>::max() / 2 - size)
      return -1; // (each size <= 2^48: no overflow above)
    offsets[iv.v] = off;
    placed.push_back({iv.def, iv.last, off, off + size});
    peak = std::max(peak, off + size);
  }
  return peak;
}

/// Best-fit placement of intervals sorted by definition; returns the peak.
int64_t placeInOrder(std::vector<Interval> &ivs, DenseMap<Value, int64_t> &offsets) {
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
    int64_t size = aligned(iv.size);
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
  // Results written straight into their state argument: no slot.
  llvm::DenseSet<Value> inPlace;
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  for (auto [res, arg] : inPlaceResults(f))
    inPlace.insert(ret.getOperand(res));
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
      if (inPlace.contains(r))
        continue;
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
  // Results written over an operand's buffer: the operand dies at the op
  // (the op is its last reader) and has the result's bytes. An amp.add of
  // two tensors of its result's type (the sum of a tied weight's or a
  // residual's gradients; reads and writes each element at one index), and
  // amp.unscale_and_check (an output takes its gradient's bytes when the
  // two have one size: an f32 gradient; with loss scaling "none" the kernel
  // then only reads). The result takes its operand's host's slot (the
  // value placed, the first of a chain) and extends its interval.
  DenseMap<Value, Value> hostOf; // result -> the owned value whose slot it takes
  auto host = [&](Value v) {
    auto it = hostOf.find(v);
    return it == hostOf.end() ? v : it->second;
  };
  auto shareIfDying = [&](Value operand, Value out) {
    Value r = root(operand);
    if (!defAt.count(r) || !defAt.count(out) || hostOf.count(out))
      return false;
    Value h = host(r);
    if (lastAt[r] != defAt[out] || lastAt[h] != defAt[out] ||
        *tensorBytes(r.getType()) != *tensorBytes(out.getType()) ||
        *tensorBytes(r.getType(), true) != *tensorBytes(out.getType(), true))
      return false;
    hostOf[out] = h;
    lastAt[h] = std::max(lastAt[h], lastAt[out]);
    llvm::erase(owned, out);
    return true;
  };
  for (Operation &op : block) {
    if (auto u = dyn_cast<UnscaleAndCheckOp>(&op)) {
      for (auto [g, out] : llvm::zip(u.getGrads(), u.getUnscaled()))
        shareIfDying(g, out);
    } else if (auto a = dyn_cast<AddOp>(&op)) {
      for (Value in : a->getOperands())
        if (in.getType() == a.getType() && shareIfDying(in, a.getResult()))
          break;
    }
  }
  for (bool asF32 : {false, true}) {
    std::vector<Interval> ivs;
    for (Value v : owned)
      ivs.push_back({v, defAt[v], lastAt[v], *tensorBytes(v.getType(), asF32)});
    DenseMap<Value, int64_t> offsets, bySize;
    int64_t peak = placeInOrder(ivs, offsets);
    int64_t peakBySize = placeBySize(ivs, bySize);
    if (peak < 0 || (peakBySize >= 0 && peakBySize < peak)) {
      peak = peakBySize;
      offsets = std::move(bySize);
    }
    if (peak < 0)
      return LogicalResult(f.emitError("amp-plan-memory: '")
                           << f.getSymName() << "' needs an arena of more than 2^62 bytes");
    for (auto [out, h] : hostOf)
      offsets[out] = offsets[h];
    if (asF32) {
      plan.arenaBytesIfF32 = peak;
    } else {
      plan.arenaBytes = peak;
      auto [most, at] = liveBytes(ivs);
      plan.liveBytes = most;
      for (const Interval &iv : ivs)
        if (iv.def <= at && at <= iv.last)
          plan.liveAtPeak.push_back(iv.v);
      plan.offsets = std::move(offsets);
    }
  }
  plan.buffers = owned.size();
  return plan;
}

namespace {

/// What is live at the peak, by kind: a backward op's result (gradients and
/// their temporaries), a forward value the backward reads (saved for it),
/// anything else (forward temporaries, the update's); each kind's bytes and
/// values, and the largest values.
std::string describeLive(const std::vector<Value> &live) {
  auto backward = [](Operation *op) { return op && op->hasAttr(attrname::kDifferentiates); };
  std::map<std::string, std::pair<int64_t, int64_t>> kinds; // kind -> (bytes, values)
  std::vector<std::tuple<int64_t, std::string, std::string>> largest;
  for (Value v : live) {
    Operation *def = v.getDefiningOp();
    std::string kind = "other";
    if (backward(def)) {
      kind = "backward";
    } else {
      // Through the views that alias it (reshapes, ...).
      SmallVector<Value> work{v};
      while (!work.empty() && kind == "other") {
        Value w = work.pop_back_val();
        for (Operation *u : w.getUsers()) {
          if (backward(u))
            kind = "saved_for_backward";
          else if (isAliasOp(u))
            work.push_back(u->getResult(0));
        }
      }
    }
    int64_t bytes = aligned(*tensorBytes(v.getType()));
    kinds[kind].first += bytes;
    kinds[kind].second += 1;
    std::string type;
    llvm::raw_string_ostream(type) << v.getType();
    largest.emplace_back(bytes, def ? def->getName().getStringRef().str() : "?", type);
  }
  llvm::sort(largest, [](auto &a, auto &b) { return std::get<0>(a) > std::get<0>(b); });
  std::string out = "{";
  for (auto &[k, bv] : kinds)
    out += llvm::formatv("\"{0}\": {{\"bytes\": {1}, \"values\": {2}}, ", k, bv.first, bv.second)
               .str();
  out += "\"largest\": [";
  for (size_t i = 0; i < largest.size() && i < 12; ++i)
    out += llvm::formatv("{0}{{\"op\": \"{1}\", \"type\": \"{2}\", \"bytes\": {3}}", i ? ", " : "",
                         std::get<1>(largest[i]), std::get<2>(largest[i]), std::get<0>(largest[i]))
               .str();
  return out + "]}";
}

/// The runtime's own resident bytes: its code, oneDNN's and the C++
/// libraries' pages it touches, the threads' stacks (the MLP example's
/// ./train, whose tensors are a few kB, peaks at this).
constexpr int64_t kRuntimeBytes = int64_t(32) << 20;

/// An estimate of the kernels' workspace: the largest scratch one op's
/// kernel keeps (per-thread buffers that stay at the largest call): a
/// product's f32 copies of f16 operands (and of bf16 ones, where the tuner
/// may time them widened: the runtime's kWidenMaxBytes at most) and its f32 accumulator
/// for a low-precision result with an epilogue.
int64_t workspaceBytes(func::FuncOp f) {
  int64_t most = 0;
  f.walk([&](Operation *op) {
    if (!isa<MatMulOp, GemmOp>(op))
      return;
    auto elems = [](Value v) {
      auto t = cast<RankedTensorType>(v.getType());
      return t.hasStaticShape() ? t.getNumElements() : 0;
    };
    Value a = op->getOperand(0), b = op->getOperand(1), y = op->getResult(0);
    Type et = getElementTypeOrSelf(a.getType());
    int64_t widened = 4 * (elems(a) + elems(b)), bytes = 0;
    if (et.isF16())
      bytes = widened;
    else if (et.isBF16() && widened <= amprt::kWidenMaxBytes)
      bytes = widened;
    if (isa<GemmOp>(op) && !getElementTypeOrSelf(y.getType()).isF32())
      bytes += 4 * elems(y);
    most = std::max(most, bytes);
  });
  return most;
}

/// What the program holds besides the arena, by category (the signature's
/// tensors, as the runner allocates them: an in-place result shares its
/// argument's buffer), and the predicted peak: those, the arena, the
/// kernels' workspace (an estimate: the largest f32 scratch one op's kernel
/// keeps, see workspaceBytes) and the runtime's own (code, libraries,
/// thread stacks). JSON members of the function's entry.
std::string describePeak(func::FuncOp f, const MemoryPlan &plan) {
  std::map<std::string, int64_t> bytes = {{"parameters", 0},
                                          {"low_precision_copies", 0},
                                          {"optimizer_state", 0},
                                          {"inputs", 0},
                                          {"results", 0}};
  for (BlockArgument a : f.getArguments()) {
    int64_t n = aligned(tensorBytes(a.getType()).value_or(0));
    unsigned i = a.getArgNumber();
    if (f.getArgAttr(i, attrname::kParam))
      bytes["parameters"] += n;
    else if (f.getArgAttr(i, attrname::kOptState))
      bytes[getElementTypeOrSelf(a.getType()).isF32() ||
                    !isa<FloatType>(getElementTypeOrSelf(a.getType()))
                ? "optimizer_state"
                : "low_precision_copies"] += n;
    else
      bytes["inputs"] += n;
  }
  auto inPlace = inPlaceResults(f);
  for (auto [i, t] : llvm::enumerate(f.getResultTypes()))
    if (!inPlace.count(i))
      bytes["results"] += aligned(tensorBytes(t).value_or(0));
  int64_t workspace = workspaceBytes(f);
  int64_t total = plan.arenaBytes + workspace + kRuntimeBytes;
  std::string out = "\"predicted\": {";
  for (auto &[k, n] : bytes) {
    out += llvm::formatv("\"{0}\": {1}, ", k, n).str();
    total += n;
  }
  out += llvm::formatv("\"arena\": {0}, \"workspace\": {1}, \"runtime\": {2}, "
                       "\"peak_bytes\": {3}}",
                       plan.arenaBytes, workspace, kRuntimeBytes, total)
             .str();
  return out;
}

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
                            "\"arena_bytes_if_f32\": {3}, \"buffers\": {4}, "
                            "\"live_bytes\": {5}, \"live_at_peak\": {6}, {7}}",
                            first ? "" : ", ", f.getSymName(), plan->arenaBytes,
                            plan->arenaBytesIfF32, plan->buffers, plan->liveBytes,
                            describeLive(plan->liveAtPeak), describePeak(f, *plan))
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
