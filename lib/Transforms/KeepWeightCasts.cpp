//===- KeepWeightCasts.cpp - amp-keep-weight-casts -----------------------===//
//
// A training step casts each f32 master weight to f16 / bf16 at its start
// (amp-autocast's one cast per (value, type)), and its optimizer update
// writes the next master weight at its end. This pass carries the cast
// across steps instead: the low-precision copy becomes step state (an
// argument `<param>.bf16` / `<param>.f16` with `amp.opt_state`), the step
// reads it where it read the cast, and the cast moves to the end of the
// step, onto the updated weight, its result returned as the state's next
// value (`amp.updates`). The initial copy is the initial weight rounded as
// amp.cast rounds it. Apex O2's fp16 model weights beside fp32 master
// weights; the values are the same bit for bit, since cast(new weight) at
// the end of a step is the cast the next step would make.
//
// Why: the runtime lowering writes that cast inside the optimizer's pass
// over the weight (amp-lower-to-runtime: sgd_update / adam_update with a
// low-precision output), so no separate pass reads every master weight
// again at the start of the next step.
//
//===----------------------------------------------------------------------===//

#include "amp/Dialect/AMP/IR/AMPDialect.h"
#include "amp/Transforms/Passes.h"

#include "common/convert_bits.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/StringSet.h"

#include <cstring>

namespace mlir::amp {
#define GEN_PASS_DEF_AMPKEEPWEIGHTCASTS
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

namespace {

/// The raw f32 bytes of an initial value (dense, splat or resource), or
/// nothing when they are not available.
std::optional<ArrayRef<char>> rawF32(ElementsAttr init, int64_t n, std::vector<char> &splat) {
  if (auto dense = dyn_cast<DenseElementsAttr>(init)) {
    if (!dense.getElementType().isF32())
      return std::nullopt;
    ArrayRef<char> raw = dense.getRawData();
    if (dense.isSplat()) {
      splat.resize((size_t)n * 4);
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(splat.data() + i * 4, raw.data(), 4);
      return ArrayRef<char>(splat);
    }
    return raw;
  }
  if (auto res = dyn_cast<DenseResourceElementsAttr>(init)) {
    AsmResourceBlob *blob = res.getRawHandle().getBlob();
    if (!blob || !res.getElementType().isF32())
      return std::nullopt;
    return blob->getData();
  }
  return std::nullopt;
}

/// `init` rounded to `type`'s f16 / bf16 element as amp.cast rounds at run
/// time (the runtime's own bit conversions).
ElementsAttr roundedInit(ArrayRef<char> f32, RankedTensorType type, StringRef name) {
  int64_t n = type.getNumElements();
  bool bf16 = type.getElementType().isBF16();
  std::vector<uint16_t> out((size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, f32.data() + i * 4, 4);
    out[i] = bf16 ? amprt::bits::f32ToBf16(x) : amprt::bits::f32ToF16(x);
  }
  ArrayRef<char> raw(reinterpret_cast<const char *>(out.data()), out.size() * 2);
  if (n <= 64)
    return DenseElementsAttr::getFromRawBuffer(type, raw);
  return DenseResourceElementsAttr::get(type, name,
                                        HeapAsmResourceBlob::allocateAndCopyWithAlign(raw, 2));
}

struct AMPKeepWeightCastsPass : public amp::impl::AMPKeepWeightCastsBase<AMPKeepWeightCastsPass> {
  void runOnOperation() override {
    for (func::FuncOp f : getOperation().getOps<func::FuncOp>())
      if (!f.isExternal())
        run(f);
  }

  void run(func::FuncOp f) {
    Block &block = f.getBody().front();
    auto ret = cast<func::ReturnOp>(block.getTerminator());
    // The state each result updates, by name.
    llvm::StringMap<unsigned> updates;
    for (unsigned i = 0; i < f.getNumResults(); ++i)
      if (auto u = f.getResultAttrOfType<StringAttr>(i, attrname::kUpdates))
        updates[u.getValue()] = i;
    llvm::StringSet<> stateNames;
    for (unsigned i = 0; i < f.getNumArguments(); ++i)
      if (auto s = f.getArgAttrOfType<StringAttr>(i, attrname::kOptState))
        stateNames.insert(s.getValue());

    SmallVector<Value> results(ret.getOperands());
    SmallVector<DictionaryAttr> resAttrs = resultAttrDicts(f);
    OpBuilder b(f.getContext());
    unsigned params = f.getNumArguments();
    for (unsigned i = 0; i < params; ++i) {
      BlockArgument p = f.getArgument(i);
      auto name = f.getArgAttrOfType<StringAttr>(i, attrname::kParam);
      auto init = f.getArgAttrOfType<ElementsAttr>(i, attrname::kInit);
      auto pt = dyn_cast<RankedTensorType>(p.getType());
      if (!name || !init || !pt || !pt.hasStaticShape() || !pt.getElementType().isF32())
        continue;
      // Only an updated parameter (a frozen one is cast once per step, as
      // before: there is no update to hang the cast on).
      auto u = updates.find(name.getValue());
      if (u == updates.end())
        continue;
      // Its casts to one 16-bit float type (amp-autocast leaves one per
      // type; two types: left as they are).
      SmallVector<CastOp> casts;
      Type low;
      bool mixed = false;
      for (Operation *user : p.getUsers())
        if (auto c = dyn_cast<CastOp>(user)) {
          Type e = getElementTypeOrSelf(c.getOutput().getType());
          if (!e.isF16() && !e.isBF16())
            continue;
          mixed |= low && low != e;
          low = e;
          casts.push_back(c);
        }
      if (casts.empty() || mixed)
        continue;
      std::string stateName = (name.getValue() + (low.isBF16() ? ".bf16" : ".f16")).str();
      if (stateNames.contains(stateName) || updates.count(stateName)) {
        f.emitWarning("amp-keep-weight-casts: '")
            << stateName << "' is already a state name; the cast of '" << name.getValue()
            << "' stays in the step";
        continue;
      }
      auto lt = RankedTensorType::get(pt.getShape(), low);
      std::vector<char> splat;
      auto raw = rawF32(init, pt.getNumElements(), splat);
      if (!raw || (int64_t)raw->size() != pt.getNumElements() * 4)
        continue;

      // The state argument, read where the casts were.
      SmallVector<NamedAttribute> attrs = {
          b.getNamedAttr(attrname::kOptState, b.getStringAttr(stateName)),
          b.getNamedAttr(attrname::kInit, roundedInit(*raw, lt, stateName))};
      unsigned at = f.getNumArguments();
      if (failed(f.insertArgument(at, lt, b.getDictionaryAttr(attrs), p.getLoc())))
        return signalPassFailure();
      Value copy = f.getArgument(at);
      for (CastOp c : casts) {
        c.getOutput().replaceAllUsesWith(copy);
        c->erase();
      }
      // The next step's copy: the cast of the updated weight, right after
      // the op that makes it (the lowering fuses the two).
      Value next = results[u->second];
      if (Operation *def = next.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPoint(ret);
      Value nextCopy = CastOp::create(b, next.getLoc(), lt, next);
      results.push_back(nextCopy);
      resAttrs.push_back(
          b.getDictionaryAttr({b.getNamedAttr(attrname::kUpdates, b.getStringAttr(stateName))}));
      stateNames.insert(stateName);
    }
    if (results.size() != ret.getNumOperands())
      setFunctionResults(f, results, resAttrs);
  }
};

} // namespace
