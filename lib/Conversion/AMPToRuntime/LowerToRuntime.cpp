//===- LowerToRuntime.cpp - amp-lower-to-runtime -------------------------===//
//
// A planned function
//
//   func.func @f(%args...) -> (results...)      (amp ops with amp.slots)
//
// becomes
//
//   llvm.func @f(%ctx: !llvm.ptr, %arena: !llvm.ptr, %args: !llvm.ptr,
//                %results: !llvm.ptr) -> i32
//
// where %args / %results point to arrays of buffer pointers, one per
// function argument / result. Each op is one call
//
//   %s = llvm.call @amprt_exec(%ctx, @desc_N, %bufs) : (...) -> i32
//
// with a constant descriptor (runtime/include/amprt/amprt.h, "Compiled
// code") and an array of the op's buffer pointers; a non-zero status
// returns at once. Views (transpose, slice, expand) are descriptors with
// strides over the input's bytes; reshape-like ops are no code at all.
//
//===----------------------------------------------------------------------===//

#include "amp/Conversion/Passes.h"
#include "amp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>
#include <set>

#include "amprt/amprt.h"

namespace mlir::amp {
#define GEN_PASS_DEF_AMPLOWERTORUNTIME
#include "amp/Conversion/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

FailureOr<int64_t> mlir::amp::runtimeDTypeCode(Type t) {
  t = getElementTypeOrSelf(t);
  if (t.isF32())
    return AMPRT_F32;
  if (t.isF16())
    return AMPRT_F16;
  if (t.isBF16())
    return AMPRT_BF16;
  if (auto i = dyn_cast<IntegerType>(t)) {
    bool u = i.isUnsigned();
    switch (i.getWidth()) {
    case 1:
      return AMPRT_I1;
    case 8:
      return u ? AMPRT_U8 : AMPRT_I8;
    case 16:
      return u ? AMPRT_U16 : AMPRT_I16;
    case 32:
      return u ? AMPRT_U32 : AMPRT_I32;
    case 64:
      return u ? AMPRT_U64 : AMPRT_I64;
    default:
      break;
    }
  }
  return failure();
}

#include "Lowerer.h"

namespace mlir::amp::lowering {

LogicalResult Lowerer::constant(arith::ConstantOp c) {
  auto t = dyn_cast<RankedTensorType>(c.getType());
  if (!t)
    return c.emitOpError("only tensor constants run on the runtime");
  auto elements = dyn_cast<ElementsAttr>(c.getValue());
  if (!elements)
    return c.emitOpError("constant value is not an elements attribute");
  DenseElementsAttr dense = dyn_cast<DenseElementsAttr>(elements);
  if (!dense) {
    auto res = dyn_cast<DenseResourceElementsAttr>(elements);
    AsmResourceBlob *blob = res ? res.getRawHandle().getBlob() : nullptr;
    if (!blob)
      return c.emitOpError("constant data is not available (elided resource?)");
    dense = DenseElementsAttr::getFromRawBuffer(t, blob->getData());
  }
  Type elt = t.getElementType();
  if (t.getNumElements() == 0) {
    // No data: one zero element keeps the global well formed (an empty
    // dense attribute has no splat value to read).
    Type store = elt.isInteger(1) ? Type(b.getI8Type()) : elt;
    if (auto it = dyn_cast<IntegerType>(store); it && !it.isSignless())
      store = IntegerType::get(b.getContext(), it.getWidth());
    auto g = global(c.getLoc(), LLVM::LLVMArrayType::get(store, 1),
                    DenseElementsAttr::get(RankedTensorType::get({1}, store), b.getZeroAttr(store)),
                    "__amp_const");
    ptrs[c.getResult()] = addressOf(c.getLoc(), g);
    return success();
  }
  if (elt.isInteger(1)) {
    // Booleans as bytes, as the runtime stores them.
    auto bytesTy = RankedTensorType::get(t.getShape(), b.getI8Type());
    SmallVector<int8_t> bytes;
    for (bool v : dense.getValues<bool>())
      bytes.push_back(v);
    dense = DenseElementsAttr::get(bytesTy, ArrayRef<int8_t>(bytes));
    elt = b.getI8Type();
  } else if (auto it = dyn_cast<IntegerType>(elt); it && !it.isSignless()) {
    auto signless = IntegerType::get(b.getContext(), it.getWidth());
    dense = DenseElementsAttr::getFromRawBuffer(RankedTensorType::get(t.getShape(), signless),
                                                dense.getRawData());
    elt = signless;
  }
  int64_t n = std::max<int64_t>(1, t.getNumElements());
  if (dense.isSplat())
    dense = DenseElementsAttr::get(RankedTensorType::get({n}, elt),
                                   SmallVector<Attribute>(n, dense.getSplatValue<Attribute>()));
  else
    dense = dense.reshape(RankedTensorType::get({n}, elt));
  auto g = global(c.getLoc(), LLVM::LLVMArrayType::get(elt, n), dense, "__amp_const");
  ptrs[c.getResult()] = addressOf(c.getLoc(), g);
  return success();
}

/// The node name of `op`'s location (a NameLoc, or the first in a
/// FusedLoc), control bytes as '?', cut to 256 bytes; empty without one.
static std::string descName(Operation *op) {
  StringRef n;
  Location loc = op->getLoc();
  if (auto nl = dyn_cast<NameLoc>(loc))
    n = nl.getName().getValue();
  else if (auto f = dyn_cast<FusedLoc>(loc))
    for (Location l : f.getLocations())
      if (auto nl = dyn_cast<NameLoc>(l)) {
        n = nl.getName().getValue();
        break;
      }
  std::string s = n.take_front(256).str();
  for (char &c : s)
    if ((unsigned char)c < 0x20 || c == 0x7f)
      c = '?';
  return s;
}

LogicalResult Lowerer::emit(Operation *op, int64_t opcode, Desc &d) {
  Location loc = op->getLoc();
  SmallVector<int64_t> words{AMPRT_EXEC_VERSION_NAMED, opcode, d.ntensors, (int64_t)d.attrs.size()};
  words.append(d.words.begin(), d.words.end());
  words.append(d.attrs.begin(), d.attrs.end());
  // The op's name (its ONNX node, "<node>/grad" for its gradient), which
  // the runtime puts in front of a failing call's message: printable
  // bytes, at most 256.
  std::string name = descName(op);
  words.push_back((int64_t)name.size());
  for (size_t i = 0; i < name.size(); i += 8) {
    uint64_t w = 0;
    for (size_t j = 0; j < 8 && i + j < name.size(); ++j)
      w |= (uint64_t)(uint8_t)name[i + j] << (8 * j);
    words.push_back((int64_t)w);
  }
  auto attr = DenseElementsAttr::get(RankedTensorType::get({(int64_t)words.size()}, i64),
                                     ArrayRef<int64_t>(words));
  auto g = global(loc, LLVM::LLVMArrayType::get(i64, words.size()), attr, "__amp_desc");
  Value desc = addressOf(loc, g);
  Value count = LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(d.ptrs.size()));
  Value bufs = LLVM::AllocaOp::create(b, loc, ptrTy, ptrTy, count, /*alignment=*/8);
  for (auto [i, p] : llvm::enumerate(d.ptrs)) {
    Value slot =
        LLVM::GEPOp::create(b, loc, ptrTy, ptrTy, bufs, ArrayRef<LLVM::GEPArg>{(int32_t)i});
    LLVM::StoreOp::create(b, loc, p, slot);
  }
  Value status = LLVM::CallOp::create(b, loc, exec, ValueRange{ctx, desc, bufs}).getResult();
  Value zero = LLVM::ConstantOp::create(b, loc, i32, b.getI32IntegerAttr(0));
  Value bad = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::ne, status, zero);
  Block *cur = b.getInsertionBlock();
  Block *next = cur->splitBlock(b.getInsertionPoint());
  b.setInsertionPointToEnd(cur);
  LLVM::CondBrOp::create(b, loc, bad, fail, ValueRange{status}, next, ValueRange{});
  b.setInsertionPointToStart(next);
  return success();
}

LogicalResult Lowerer::lower(func::FuncOp f) {
  if (f.isExternal())
    return success();
  if (!f->hasAttr(attrname::kArenaBytes))
    return f.emitError("amp-lower-to-runtime: '")
           << f.getSymName() << "' has no memory plan; run amp-plan-memory first";
  Location loc = f.getLoc();
  ptrs.clear();
  exec = module.lookupSymbol<LLVM::LLVMFuncOp>("amprt_exec");
  auto fnTy = LLVM::LLVMFunctionType::get(i32, {ptrTy, ptrTy, ptrTy, ptrTy});
  b.setInsertionPoint(f);
  auto fn = LLVM::LLVMFuncOp::create(b, loc, (f.getSymName() + "__lowering").str(), fnTy);
  for (StringRef keep : {attrname::kArenaBytes, attrname::kArenaBytesIfF32})
    fn->setAttr(keep, f->getAttr(keep));
  Block *entry = fn.addEntryBlock(b);
  ctx = entry->getArgument(0);
  arena = entry->getArgument(1);
  argsPtr = entry->getArgument(2);
  resultsPtr = entry->getArgument(3);
  fail = new Block();
  fail->addArgument(i32, loc);
  fn.getBody().push_back(fail);
  b.setInsertionPointToStart(fail);
  LLVM::ReturnOp::create(b, loc, fail->getArgument(0));
  b.setInsertionPointToStart(entry);
  for (BlockArgument a : f.getArguments()) {
    Value slot = LLVM::GEPOp::create(b, loc, ptrTy, ptrTy, argsPtr,
                                     ArrayRef<LLVM::GEPArg>{(int32_t)a.getArgNumber()});
    ptrs[a] = LLVM::LoadOp::create(b, loc, ptrTy, slot);
  }
  placed.clear();
  analyseConvs(f);
  std::map<unsigned, unsigned> inPlace = amp::inPlaceResults(f);
  auto fret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  SmallVector<int64_t> inPlaceList;
  for (auto [i, argNo] : inPlace) {
    Value slot =
        LLVM::GEPOp::create(b, loc, ptrTy, ptrTy, resultsPtr, ArrayRef<LLVM::GEPArg>{(int32_t)i});
    placed[fret.getOperand(i)] = LLVM::LoadOp::create(b, loc, ptrTy, slot);
    inPlaceList.push_back(i);
  }
  fn->setAttr(attrname::kInplaceResults, b.getDenseI64ArrayAttr(inPlaceList));
  func::ReturnOp ret;
  for (Operation &op : f.getBody().front()) {
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      if (failed(constant(c)))
        return failure();
    } else if (auto r = dyn_cast<func::ReturnOp>(op)) {
      ret = r;
    } else if (failed(lowerOp(&op))) {
      return failure();
    }
  }
  // Results: copied into the caller's buffers (those written in place are
  // there already).
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    if (inPlace.count(i))
      continue;
    Value slot =
        LLVM::GEPOp::create(b, loc, ptrTy, ptrTy, resultsPtr, ArrayRef<LLVM::GEPArg>{(int32_t)i});
    Value out = LLVM::LoadOp::create(b, loc, ptrTy, slot);
    Desc d;
    if (failed(tensor(d, v, ret)))
      return failure();
    SmallVector<int64_t> same(d.words); // the same view, in the caller's buffer
    d.words.append(same.begin(), same.end());
    d.ptrs.push_back(out);
    ++d.ntensors;
    if (failed(emitAs(ret, amprt::attrs::copy{}, d)))
      return failure();
  }
  LLVM::ReturnOp::create(b, loc, LLVM::ConstantOp::create(b, loc, i32, b.getI32IntegerAttr(0)));
  std::string name = f.getSymName().str();
  f.erase();
  fn.setSymName(name);
  return success();
}

void Lowerer::analyseConvs(func::FuncOp f) {
  convCalls.clear();
  gemmRelu.clear();
  bnRelu.clear();
  bnGradRelu.clear();
  fusedAway.clear();
  blocked.clear();
  SmallVector<Operation *> seq;
  for (Operation &op : f.getBody().front())
    if (!isa<arith::ConstantOp>(op))
      seq.push_back(&op);
  auto f32 = [](Value v) { return getElementTypeOrSelf(v.getType()).isF32(); };
  // A value's bytes in the arena, if it has its own slot there.
  auto range = [](Value v) -> std::optional<std::pair<int64_t, int64_t>> {
    while (Operation *d = v.getDefiningOp()) {
      if (isAliasOp(d)) {
        v = d->getOperand(0);
        continue;
      }
      auto slots = d->getAttrOfType<DenseI64ArrayAttr>(attrname::kSlots);
      unsigned k = cast<OpResult>(v).getResultNumber();
      if (!slots || k >= slots.size() || slots[k] < 0)
        return std::nullopt;
      auto t = cast<RankedTensorType>(v.getType());
      int64_t bytes = t.getNumElements() * (int64_t)((t.getElementTypeBitWidth() + 7) / 8);
      return std::make_pair(slots[k], slots[k] + bytes);
    }
    return std::nullopt; // an argument or a constant: not in the arena
  };
  // Whether two values' bytes overlap in the arena, and whether they are
  // the same bytes.
  auto overlap = [&](Value a, Value b2) {
    auto ra = range(a), rb = range(b2);
    return ra && rb && ra->first < rb->second && rb->first < ra->second;
  };
  auto same = [&](Value a, Value b2) {
    auto ra = range(a), rb = range(b2);
    return ra && rb && *ra == *rb;
  };
  // The fused ops' result is written at the convolution: its slot (which
  // the plan may have given to storage whose last reader is the
  // convolution, its input say) must not overlap anything the call reads.
  auto fits = [&](Value out, ArrayRef<Value> reads) {
    return range(out) && llvm::none_of(reads, [&](Value in) { return overlap(out, in); });
  };
  for (size_t i = 0; i < seq.size(); ++i) {
    // A batch norm (not folded into a convolution) read only by a ReLU
    // right after it: the call writes the ReLU's result, read nowhere in
    // the call.
    if (auto bn = dyn_cast<BatchNormOp>(seq[i])) {
      Value y = bn.getOutput();
      if (!fusedAway.contains(bn) && i + 1 < seq.size() && isa<ReluOp>(seq[i + 1]) &&
          seq[i + 1]->getOperand(0) == y && y.hasOneUse() &&
          seq[i + 1]->getResult(0).getType() == y.getType() &&
          fits(seq[i + 1]->getResult(0), {bn.getX(), bn.getScale(), bn.getBias(), bn.getMean(),
                                          bn.getVar(), bn.getRunningMean(), bn.getRunningVar()})) {
        bnRelu[bn] = seq[i + 1];
        fusedAway.insert(seq[i + 1]);
      }
      continue;
    }
    // A batch-norm gradient whose dy is the ReLU gradient right before it,
    // read nowhere else: the call reads that op's x (the ReLU's input or
    // output: the same mask) and dy, so its results must not overlap them
    // (dx may be exactly one of them: each element is read before it is
    // written).
    if (auto bg = dyn_cast<BatchNormGradOp>(seq[i])) {
      auto ug = i > 0 ? dyn_cast<UnaryGradOp>(seq[i - 1]) : UnaryGradOp();
      if (ug && ug.getKind() == UnaryKind::relu && bg.getDy() == ug.getDx() &&
          ug.getDx().hasOneUse() && ug.getX().getType() == bg.getX().getType() &&
          ug.getDy().getType() == ug.getDx().getType()) {
        bool ok = true;
        for (Value read : {ug.getX(), ug.getDy()}) {
          ok &= !overlap(bg.getDscale(), read) && !overlap(bg.getDbias(), read);
          ok &= !overlap(bg.getDx(), read) || same(bg.getDx(), read);
        }
        if (ok) {
          bnGradRelu[bg] = ug;
          fusedAway.insert(ug);
        }
      }
      continue;
    }
    // A matrix product read only by a ReLU right after it.
    if (auto gemm = dyn_cast<GemmOp>(seq[i])) {
      Value out = gemm.getOutput();
      if (i + 1 < seq.size() && isa<ReluOp>(seq[i + 1]) &&
          (!gemm.getAccumulate() || gemm.getAccumulate()->isF32()) &&
          seq[i + 1]->getOperand(0) == out && out.hasOneUse() &&
          isa<FloatType>(getElementTypeOrSelf(out.getType())) &&
          fits(seq[i + 1]->getResult(0), SmallVector<Value>(gemm->getOperands()))) {
        gemmRelu[gemm] = seq[i + 1];
        fusedAway.insert(seq[i + 1]);
      }
      continue;
    }
    auto conv = dyn_cast<ConvOp>(seq[i]);
    if (!conv || (conv.getAccumulate() && !conv.getAccumulate()->isF32()) ||
        !conv.getOutput().hasOneUse())
      continue;
    SmallVector<Value> reads(conv->getOperands());
    ConvCall cc;
    size_t j = i + 1;
    auto bn = j < seq.size() ? dyn_cast<BatchNormOp>(seq[j]) : BatchNormOp();
    if (bn && !bn.getTrainingMode() && bn.getX() == conv.getOutput() &&
        bn.getRunningMean().use_empty() && bn.getRunningVar().use_empty() &&
        llvm::all_of(conv->getOperands(), f32) && f32(conv.getOutput()) &&
        llvm::all_of(bn->getOperands(), f32) && f32(bn.getOutput()) &&
        fits(bn.getOutput(), reads)) {
      cc.bn = bn;
      reads.append({bn.getScale(), bn.getBias(), bn.getMean(), bn.getVar()});
      ++j;
    }
    Value tail = cc.bn ? bn.getOutput() : conv.getOutput();
    if (j < seq.size() && isa<ReluOp>(seq[j]) && seq[j]->getOperand(0) == tail &&
        tail.hasOneUse() && isa<FloatType>(getElementTypeOrSelf(tail.getType())) &&
        fits(seq[j]->getResult(0), reads))
      cc.relu = seq[j];
    if (!cc.bn && !cc.relu)
      continue;
    convCalls[conv] = cc;
    for (Operation *o : {cc.bn, cc.relu})
      if (o)
        fusedAway.insert(o);
  }
  // Channel-blocked chains, each from a convolution's result.
  auto blockable = [&](Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.hasStaticShape() && t.getElementType().isF32() && t.getRank() == 4 &&
           t.getDimSize(1) % 16 == 0 && t.getDimSize(1) > 0 && t.getNumElements() > 0;
  };
  auto meanOverHW = [](Operation *u) {
    if (isa<GlobalAveragePoolOp>(u))
      return true;
    if (!isa<ReduceMeanOp>(u))
      return false;
    auto axes = u->getAttrOfType<DenseI64ArrayAttr>("axes");
    if (!axes || axes.size() != 2)
      return false;
    SmallVector<int64_t> a{normAxis(axes[0], 4), normAxis(axes[1], 4)};
    llvm::sort(a);
    return a[0] == 2 && a[1] == 3;
  };
  for (Operation *op : seq) {
    auto conv = dyn_cast<ConvOp>(op);
    if (!conv)
      continue;
    Value root = convWrites(conv);
    if (!blockable(root))
      continue;
    SmallVector<Value> chain{root};
    bool ok = true;
    for (size_t k = 0; k < chain.size() && ok; ++k) {
      for (OpOperand &use : chain[k].getUses()) {
        Operation *u = use.getOwner();
        if (fusedAway.contains(u)) {
          ok = false;
        } else if (isa<ReluOp, LeakyReluOp, SigmoidOp, TanhOp, GeluOp>(u)) {
          ok = u->getResult(0).getType() == chain[k].getType();
          chain.push_back(u->getResult(0));
        } else if (auto mp = dyn_cast<MaxPoolOp>(u)) {
          ok = mp.getIndices().use_empty() && blockable(mp.getOutput());
          chain.push_back(mp.getOutput());
        } else if (auto c = dyn_cast<ConvOp>(u)) {
          ok = use.getOperandNumber() == 0 && f32(c.getW());
        } else {
          ok = meanOverHW(u) && f32(u->getResult(0));
        }
        if (!ok)
          break;
      }
    }
    if (ok)
      blocked.insert(chain.begin(), chain.end());
  }
}

struct AMPLowerToRuntimePass : public amp::impl::AMPLowerToRuntimeBase<AMPLowerToRuntimePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    Lowerer lowerer(module);
    OpBuilder b(module.getContext());
    b.setInsertionPointToStart(module.getBody());
    auto ptr = LLVM::LLVMPointerType::get(module.getContext());
    auto execTy = LLVM::LLVMFunctionType::get(b.getI32Type(), {ptr, ptr, ptr});
    if (!module.lookupSymbol("amprt_exec"))
      LLVM::LLVMFuncOp::create(b, module.getLoc(), "amprt_exec", execTy);
    std::vector<func::FuncOp> funcs(module.getOps<func::FuncOp>().begin(),
                                    module.getOps<func::FuncOp>().end());
    for (func::FuncOp f : funcs)
      if (failed(lowerer.lower(f)))
        return signalPassFailure();
  }
};

} // namespace mlir::amp::lowering
