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
#include "amp/Transforms/Passes.h.inc"
} // namespace mlir::amp

using namespace mlir;
using namespace mlir::amp;

FailureOr<int64_t> mlir::amp::runtimeDTypeCode(Type t) {
  t = getElementTypeOrSelf(t);
  if (t.isF32()) return AMPRT_F32;
  if (t.isF16()) return AMPRT_F16;
  if (t.isBF16()) return AMPRT_BF16;
  if (auto i = dyn_cast<IntegerType>(t)) {
    bool u = i.isUnsigned();
    switch (i.getWidth()) {
    case 1: return AMPRT_I1;
    case 8: return u ? AMPRT_U8 : AMPRT_I8;
    case 16: return u ? AMPRT_U16 : AMPRT_I16;
    case 32: return u ? AMPRT_U32 : AMPRT_I32;
    case 64: return u ? AMPRT_U64 : AMPRT_I64;
    default: break;
    }
  }
  return failure();
}

namespace {

int64_t f64Bits(double v) {
  int64_t b;
  std::memcpy(&b, &v, 8);
  return b;
}

SmallVector<int64_t> contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
    s[d] = acc;
    acc *= shape[d];
  }
  return s;
}

int64_t normAxis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

class Lowerer {
public:
  Lowerer(ModuleOp module) : module(module), b(module.getContext()) {
    ptrTy = LLVM::LLVMPointerType::get(module.getContext());
    i32 = b.getI32Type();
    i64 = b.getI64Type();
  }

  LogicalResult lower(func::FuncOp f);

private:
  /// Results an optimizer-state op writes straight into the caller's buffer:
  /// result index -> the state argument it updates. The caller may pass one
  /// buffer for both (the state is then updated in place) because nothing
  /// reads the argument after that op, and the op reads each element of its
  /// input before it writes the same element of its output.
  static std::map<unsigned, unsigned> inPlaceResults(func::FuncOp f);
  llvm::DenseMap<Value, Value> placed; // result value -> caller's buffer
  /// What a convolution's runtime call does besides the convolution: an f32
  /// convolution whose only reader is the next op, an inference-mode batch
  /// norm, folds the normalisation into its weights; a ReLU that is the
  /// only reader of the result (and the next op) runs inside the call.
  /// The call writes the last of them; the others are skipped (fusedAway).
  struct ConvCall {
    Operation *bn = nullptr, *relu = nullptr;
  };
  llvm::DenseMap<Operation *, ConvCall> convCalls;
  /// Matrix products (amp.gemm) whose only reader is the next op, a ReLU:
  /// the ReLU runs in the product's call.
  llvm::DenseMap<Operation *, Operation *> gemmRelu;
  llvm::DenseSet<Operation *> fusedAway;
  /// f32 [N, C, H, W] values kept channel-blocked (amprt_channel_block()):
  /// a convolution's result whose readers, and their results' readers, are
  /// only element-wise ops, max pools, convolutions and global average
  /// pools; nothing is reordered between them.
  llvm::DenseSet<Value> blocked;
  void analyseConvs(func::FuncOp f);
  /// Points ptrs[v] at v's arena slot (v: the single result of an op whose
  /// call is fused into an earlier one).
  LogicalResult slotPtr(Value v) {
    Operation *def = v.getDefiningOp();
    auto slots = def->getAttrOfType<DenseI64ArrayAttr>("amp.slots");
    if (!slots || slots.empty() || slots[0] < 0)
      return def->emitOpError("has no memory plan: run amp-plan-memory first");
    Value offset = LLVM::ConstantOp::create(b, def->getLoc(), i64, b.getI64IntegerAttr(slots[0]));
    ptrs[v] = LLVM::GEPOp::create(b, def->getLoc(), ptrTy, b.getI8Type(), arena,
                                  ArrayRef<LLVM::GEPArg>{offset});
    return success();
  }
  /// The value a convolution's call writes.
  Value convWrites(ConvOp conv) {
    auto it = convCalls.find(conv);
    if (it == convCalls.end())
      return conv.getOutput();
    if (it->second.relu)
      return it->second.relu->getResult(0);
    return cast<BatchNormOp>(it->second.bn).getOutput();
  }

  struct Desc {
    SmallVector<int64_t> words;
    SmallVector<Value> ptrs;
    int64_t ntensors = 0;
    SmallVector<int64_t> attrs;
  };

  /// A tensor in the descriptor: a view (shape, strides, element offset)
  /// over the bytes of `v`.
  LogicalResult tensor(Desc &d, Value v, Operation *op,
                       std::optional<ArrayRef<int64_t>> shape = std::nullopt,
                       std::optional<ArrayRef<int64_t>> strides = std::nullopt,
                       int64_t offset = 0) {
    auto t = cast<RankedTensorType>(v.getType());
    auto code = runtimeDTypeCode(t);
    if (failed(code))
      return op->emitOpError("element type ") << t.getElementType()
                                              << " has no runtime type";
    ArrayRef<int64_t> sh = shape ? *shape : t.getShape();
    SmallVector<int64_t> st = strides ? SmallVector<int64_t>(*strides) : contiguousStrides(sh);
    // A transpose the products read in place: its input's strides with the
    // last two swapped.
    if (Operation *def = v.getDefiningOp(); !shape && !strides && def && isMatmulViewTranspose(def)) {
      st = contiguousStrides(cast<RankedTensorType>(def->getOperand(0).getType()).getShape());
      std::swap(st[st.size() - 1], st[st.size() - 2]);
    }
    d.words.push_back(*code);
    d.words.push_back((int64_t)sh.size());
    d.words.push_back(offset);
    d.words.append(sh.begin(), sh.end());
    d.words.append(st.begin(), st.end());
    d.ptrs.push_back(ptrOf(v));
    ++d.ntensors;
    return success();
  }

  Value ptrOf(Value v) {
    auto it = ptrs.find(v);
    assert(it != ptrs.end() && "every operand is defined before its use in "
                               "a single-block function");
    return it->second;
  }

  LLVM::GlobalOp global(Location loc, Type type, Attribute value, StringRef prefix) {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(module.getBody());
    std::string name = (prefix + "_" + llvm::Twine(counter++)).str();
    return LLVM::GlobalOp::create(b, loc, type, /*isConstant=*/true,
                                  LLVM::Linkage::Internal, name, value,
                                  /*alignment=*/64);
  }

  Value addressOf(Location loc, LLVM::GlobalOp g) {
    return LLVM::AddressOfOp::create(b, loc, ptrTy, g.getSymName());
  }

  LogicalResult constant(arith::ConstantOp c);
  LogicalResult emit(Operation *op, int64_t opcode, Desc &d);
  LogicalResult lowerOp(Operation *op);

  ModuleOp module;
  OpBuilder b;
  Type ptrTy, i32, i64;
  Value ctx, arena, argsPtr, resultsPtr;
  Block *fail = nullptr; // returns its status argument
  DenseMap<Value, Value> ptrs;
  LLVM::LLVMFuncOp exec;
  unsigned counter = 0;
};

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
    dense = DenseElementsAttr::get(
        RankedTensorType::get({n}, elt),
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
  SmallVector<int64_t> words{AMPRT_EXEC_VERSION_NAMED, opcode, d.ntensors,
                             (int64_t)d.attrs.size()};
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
  auto attr = DenseElementsAttr::get(
      RankedTensorType::get({(int64_t)words.size()}, i64), ArrayRef<int64_t>(words));
  auto g = global(loc, LLVM::LLVMArrayType::get(i64, words.size()), attr, "__amp_desc");
  Value desc = addressOf(loc, g);
  Value count = LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(d.ptrs.size()));
  Value bufs = LLVM::AllocaOp::create(b, loc, ptrTy, ptrTy, count, /*alignment=*/8);
  for (auto [i, p] : llvm::enumerate(d.ptrs)) {
    Value slot = LLVM::GEPOp::create(b, loc, ptrTy, ptrTy, bufs,
                                     ArrayRef<LLVM::GEPArg>{(int32_t)i});
    LLVM::StoreOp::create(b, loc, p, slot);
  }
  Value status =
      LLVM::CallOp::create(b, loc, exec, ValueRange{ctx, desc, bufs}).getResult();
  Value zero = LLVM::ConstantOp::create(b, loc, i32, b.getI32IntegerAttr(0));
  Value bad = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::ne, status, zero);
  Block *cur = b.getInsertionBlock();
  Block *next = cur->splitBlock(b.getInsertionPoint());
  b.setInsertionPointToEnd(cur);
  LLVM::CondBrOp::create(b, loc, bad, fail, ValueRange{status}, next, ValueRange{});
  b.setInsertionPointToStart(next);
  return success();
}

/// Explicit pads of a window op from auto_pad (static shapes).
void windowPads(StringRef autoPad, ArrayRef<int64_t> in, ArrayRef<int64_t> out,
                ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                ArrayRef<int64_t> dil, std::optional<ArrayRef<int64_t>> pads,
                SmallVectorImpl<int64_t> &pb, SmallVectorImpl<int64_t> &pe) {
  size_t n = in.size();
  for (size_t i = 0; i < n; ++i) {
    int64_t eff = (kernel[i] - 1) * dil[i] + 1;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      int64_t total = std::max<int64_t>(0, (out[i] - 1) * strides[i] + eff - in[i]);
      int64_t small = total / 2, large = total - small;
      pb.push_back(autoPad == "SAME_UPPER" ? small : large);
      pe.push_back(autoPad == "SAME_UPPER" ? large : small);
    } else if (autoPad == "NOTSET" && pads) {
      pb.push_back((*pads)[i]);
      pe.push_back((*pads)[i + n]);
    } else {
      pb.push_back(0);
      pe.push_back(0);
    }
  }
}

/// The runtime's loss attributes: reduction, has_ignore, ignore_index,
/// has_weights (the forward losses and their gradients).
static SmallVector<int64_t> lossAttrs(Operation *op, bool hasWeights) {
  auto redAttr = op->getAttrOfType<StringAttr>("reduction");
  StringRef red = redAttr ? redAttr.getValue() : "mean";
  auto ignore = op->getAttrOfType<IntegerAttr>("ignore_index");
  return {red == "none"  ? AMPRT_REDUCTION_NONE
          : red == "sum" ? AMPRT_REDUCTION_SUM
                         : AMPRT_REDUCTION_MEAN,
          ignore ? 1 : 0, ignore ? ignore.getInt() : 0, hasWeights ? 1 : 0};
}

/// The runtime's convolution attributes (spatial, group, 0, then per dim
/// stride, dilation, pad begin, pad end) for amp.conv / amp.conv_grad.
template <typename ConvLike>
static LogicalResult convAttrs(ConvLike o, RankedTensorType y, SmallVector<int64_t> &attrs) {
  if (o.getAccumulate() && !o.getAccumulate()->isF32())
    return o.emitOpError("accumulate = ")
           << *o.getAccumulate() << " is not supported by the CPU runtime (f32 only)";
  auto x = cast<RankedTensorType>(o.getX().getType());
  auto w = cast<RankedTensorType>(o.getW().getType());
  int64_t n = x.getRank() - 2;
  if (n < 1 || n > 3)
    return o.emitOpError("needs 1 to 3 spatial dims");
  SmallVector<int64_t> kernel(w.getShape().drop_front(2)), strides, dil, pb, pe;
  for (int64_t i = 0; i < n; ++i) {
    strides.push_back(o.getStrides() ? (*o.getStrides())[i] : 1);
    dil.push_back(o.getDilations() ? (*o.getDilations())[i] : 1);
  }
  windowPads(o.getAutoPad(), x.getShape().drop_front(2), y.getShape().drop_front(2), kernel,
             strides, dil, o.getPads(), pb, pe);
  attrs = {n, (int64_t)o.getGroup(), 0};
  for (int64_t i = 0; i < n; ++i)
    attrs.append({strides[i], dil[i], pb[i], pe[i]});
  return success();
}

/// The strides (in the input's elements) and offset of a slice's view of
/// its input: ONNX Slice's clamping of starts, per sliced axis.
static SmallVector<int64_t> sliceView(RankedTensorType in, ArrayRef<int64_t> starts,
                                      std::optional<ArrayRef<int64_t>> axes,
                                      std::optional<ArrayRef<int64_t>> steps,
                                      int64_t &offset) {
  int64_t r = in.getRank();
  SmallVector<int64_t> st = contiguousStrides(in.getShape());
  offset = 0;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t ax = axes ? normAxis((*axes)[i], r) : (int64_t)i;
    int64_t step = steps ? (*steps)[i] : 1, dim = in.getDimSize(ax);
    int64_t s = starts[i];
    if (s < 0)
      s = s < -dim ? 0 : s + dim;
    s = step > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
    offset += s * st[ax];
    st[ax] *= step;
  }
  return st;
}

LogicalResult Lowerer::lowerOp(Operation *op) {
  if (fusedAway.contains(op))
    return success();
  if (isAliasOp(op)) {
    ptrs[op->getResult(0)] = ptrOf(op->getOperand(0));
    return success();
  }
  auto slots = op->getAttrOfType<DenseI64ArrayAttr>("amp.slots");
  if (!slots || (int64_t)slots.size() != op->getNumResults())
    return op->emitOpError("has no memory plan: run amp-plan-memory first");
  for (auto [r, off] : llvm::zip(op->getResults(), slots.asArrayRef())) {
    if (off < 0)
      return op->emitOpError("result without an arena slot");
    // An i64 index: arenas may exceed 2 GiB.
    Value offset = LLVM::ConstantOp::create(b, op->getLoc(), i64, b.getI64IntegerAttr(off));
    ptrs[r] = LLVM::GEPOp::create(b, op->getLoc(), ptrTy, b.getI8Type(), arena,
                                  ArrayRef<LLVM::GEPArg>{offset});
    if (auto p = placed.find(r); p != placed.end())
      ptrs[r] = p->second;
  }
  Desc d;
  auto all = [&](ValueRange vs) -> LogicalResult {
    for (Value v : vs)
      if (failed(tensor(d, v, op)))
        return failure();
    return success();
  };
  auto unary = [&](amprt_unary_op u, double alpha, std::optional<double> beta = {}) -> LogicalResult {
    if (failed(all(op->getOperands())) || failed(all(op->getResults())))
      return failure();
    d.attrs = {u, f64Bits(alpha)};
    if (beta)
      d.attrs.push_back(f64Bits(*beta));
    return emit(op, AMPRT_OP_UNARY, d);
  };
  auto binary = [&](amprt_binary_op bo) -> LogicalResult {
    if (failed(all(op->getOperands())) || failed(all(op->getResults())))
      return failure();
    d.attrs = {bo};
    return emit(op, AMPRT_OP_BINARY, d);
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](AddOp) { return binary(AMPRT_BINARY_ADD); })
      .Case([&](SubOp) { return binary(AMPRT_BINARY_SUB); })
      .Case([&](MulOp) { return binary(AMPRT_BINARY_MUL); })
      .Case([&](DivOp) { return binary(AMPRT_BINARY_DIV); })
      .Case([&](PowOp) { return binary(AMPRT_BINARY_POW); })
      .Case([&](MaxOp) { return binary(AMPRT_BINARY_MAX); })
      .Case([&](MinOp) { return binary(AMPRT_BINARY_MIN); })
      .Case([&](EqualOp) { return binary(AMPRT_BINARY_EQ); })
      .Case([&](LessOp) { return binary(AMPRT_BINARY_LT); })
      .Case([&](LessEqualOp) { return binary(AMPRT_BINARY_LE); })
      .Case([&](GreaterOp) { return binary(AMPRT_BINARY_GT); })
      .Case([&](GreaterEqualOp) { return binary(AMPRT_BINARY_GE); })
      .Case([&](AndOp) { return binary(AMPRT_BINARY_AND); })
      .Case([&](OrOp) { return binary(AMPRT_BINARY_OR); })
      .Case([&](XorOp) { return binary(AMPRT_BINARY_XOR); })
      .Case([&](ModOp) { return binary(AMPRT_BINARY_MOD); })
      .Case([&](FModOp) { return binary(AMPRT_BINARY_FMOD); })
      .Case([&](ReluOp) { return unary(AMPRT_UNARY_RELU, 0); })
      .Case([&](SqrtOp) { return unary(AMPRT_UNARY_SQRT, 0); })
      .Case([&](ExpOp) { return unary(AMPRT_UNARY_EXP, 0); })
      .Case([&](LogOp) { return unary(AMPRT_UNARY_LOG, 0); })
      .Case([&](ErfOp) { return unary(AMPRT_UNARY_ERF, 0); })
      .Case([&](TanhOp) { return unary(AMPRT_UNARY_TANH, 0); })
      .Case([&](SigmoidOp) { return unary(AMPRT_UNARY_SIGMOID, 0); })
      .Case([&](AbsOp) { return unary(AMPRT_UNARY_ABS, 0); })
      .Case([&](ReciprocalOp) { return unary(AMPRT_UNARY_RECIPROCAL, 0); })
      .Case([&](SoftplusOp) { return unary(AMPRT_UNARY_SOFTPLUS, 0); })
      .Case([&](HardSwishOp) { return unary(AMPRT_UNARY_HARD_SWISH, 0); })
      .Case([&](SoftsignOp) { return unary(AMPRT_UNARY_SOFTSIGN, 0); })
      .Case([&](SinOp) { return unary(AMPRT_UNARY_SIN, 0); })
      .Case([&](CosOp) { return unary(AMPRT_UNARY_COS, 0); })
      .Case([&](TanOp) { return unary(AMPRT_UNARY_TAN, 0); })
      .Case([&](AsinOp) { return unary(AMPRT_UNARY_ASIN, 0); })
      .Case([&](AcosOp) { return unary(AMPRT_UNARY_ACOS, 0); })
      .Case([&](AtanOp) { return unary(AMPRT_UNARY_ATAN, 0); })
      .Case([&](SinhOp) { return unary(AMPRT_UNARY_SINH, 0); })
      .Case([&](CoshOp) { return unary(AMPRT_UNARY_COSH, 0); })
      .Case([&](AsinhOp) { return unary(AMPRT_UNARY_ASINH, 0); })
      .Case([&](AcoshOp) { return unary(AMPRT_UNARY_ACOSH, 0); })
      .Case([&](AtanhOp) { return unary(AMPRT_UNARY_ATANH, 0); })
      .Case([&](FloorOp) { return unary(AMPRT_UNARY_FLOOR, 0); })
      .Case([&](CeilOp) { return unary(AMPRT_UNARY_CEIL, 0); })
      .Case([&](RoundOp) { return unary(AMPRT_UNARY_ROUND, 0); })
      .Case([&](SignOp) { return unary(AMPRT_UNARY_SIGN, 0); })
      .Case([&](EluOp o) { return unary(AMPRT_UNARY_ELU, o.getAlpha().convertToDouble()); })
      .Case([&](CeluOp o) { return unary(AMPRT_UNARY_CELU, o.getAlpha().convertToDouble()); })
      .Case([&](SeluOp o) {
        return unary(AMPRT_UNARY_SELU, o.getAlpha().convertToDouble(), o.getGamma().convertToDouble());
      })
      .Case([&](HardSigmoidOp o) {
        return unary(AMPRT_UNARY_HARD_SIGMOID, o.getAlpha().convertToDouble(),
                     o.getBeta().convertToDouble());
      })
      .Case([&](ThresholdedReluOp o) {
        return unary(AMPRT_UNARY_THRESHOLDED_RELU, o.getAlpha().convertToDouble());
      })
      .Case([&](ClipOp o) {
        return unary(AMPRT_UNARY_CLAMP, o.getMin().convertToDouble(), o.getMax().convertToDouble());
      })
      .Case([&](LeakyReluOp o) {
        return unary(AMPRT_UNARY_LEAKY_RELU, o.getAlpha().convertToDouble());
      })
      .Case([&](GeluOp o) {
        return unary(o.getApproximate() == "tanh" ? AMPRT_UNARY_GELU_TANH : AMPRT_UNARY_GELU, 0);
      })
      .Case([&](CastOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_CAST, d);
      })
      .Case([&](WhereOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_WHERE, d);
      })
      .Case([&](TransposeOp o) -> LogicalResult {
        auto in = cast<RankedTensorType>(o.getInput().getType());
        auto outTy = cast<RankedTensorType>(o.getType());
        SmallVector<int64_t> inStrides = contiguousStrides(in.getShape()), st;
        int64_t r = in.getRank();
        for (int64_t i = 0; i < r; ++i)
          st.push_back(inStrides[o.getPerm() ? (*o.getPerm())[i] : r - 1 - i]);
        if (failed(tensor(d, o.getInput(), op, outTy.getShape(), st)) ||
            failed(tensor(d, o.getResult(), op)))
          return failure();
        return emit(op, AMPRT_OP_COPY, d);
      })
      .Case([&](ExpandOp o) -> LogicalResult {
        auto in = cast<RankedTensorType>(o.getInput().getType());
        auto outTy = cast<RankedTensorType>(o.getType());
        SmallVector<int64_t> inStrides = contiguousStrides(in.getShape());
        int64_t lead = outTy.getRank() - in.getRank();
        SmallVector<int64_t> st;
        for (int64_t i = 0; i < outTy.getRank(); ++i)
          st.push_back(i < lead || in.getDimSize(i - lead) == 1 ? 0 : inStrides[i - lead]);
        if (failed(tensor(d, o.getInput(), op, outTy.getShape(), st)) ||
            failed(tensor(d, o.getResult(), op)))
          return failure();
        return emit(op, AMPRT_OP_COPY, d);
      })
      .Case([&](SliceOp o) -> LogicalResult {
        auto in = cast<RankedTensorType>(o.getInput().getType());
        auto outTy = cast<RankedTensorType>(o.getType());
        int64_t offset = 0;
        SmallVector<int64_t> st =
            sliceView(in, o.getStarts(), o.getAxes(), o.getSteps(), offset);
        if (failed(tensor(d, o.getInput(), op, outTy.getShape(), st, offset)) ||
            failed(tensor(d, o.getResult(), op)))
          return failure();
        return emit(op, AMPRT_OP_COPY, d);
      })
      .Case([&](SliceGradOp o) -> LogicalResult {
        // dy into the slice's view of dx, after dx is zeroed.
        auto whole = cast<RankedTensorType>(o.getDx().getType());
        auto dyTy = cast<RankedTensorType>(o.getDy().getType());
        int64_t offset = 0;
        SmallVector<int64_t> st =
            sliceView(whole, o.getStarts(), o.getAxes(), o.getSteps(), offset);
        if (failed(tensor(d, o.getDy(), op)) ||
            failed(tensor(d, o.getDx(), op, dyTy.getShape(), st, offset)) ||
            failed(tensor(d, o.getDx(), op)))
          return failure();
        return emit(op, AMPRT_OP_SLICE_GRAD, d);
      })
      .Case([&](CumSumOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis((int64_t)o.getAxis(), o.getType().getRank()), o.getExclusive() ? 1 : 0,
                   o.getReverse() ? 1 : 0};
        return emit(op, AMPRT_OP_CUMSUM, d);
      })
      .Case<GridSampleOp, GridSampleGradOp>([&](Operation *) -> LogicalResult {
        auto mode = op->getAttrOfType<StringAttr>("mode"), pad = op->getAttrOfType<StringAttr>("padding_mode");
        auto align = op->getAttrOfType<BoolAttr>("align_corners");
        StringRef m = mode ? mode.getValue() : "bilinear", p = pad ? pad.getValue() : "zeros";
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {m == "nearest" ? 1 : m == "bicubic" ? 2 : 0, p == "border" ? 1 : p == "reflection" ? 2 : 0,
                   align && align.getValue() ? 1 : 0};
        if (isa<GridSampleOp>(op))
          return emit(op, AMPRT_OP_GRID_SAMPLE, d);
        for (Value r : op->getResults())
          d.attrs.push_back(r.use_empty() ? 0 : 1);
        return emit(op, AMPRT_OP_GRID_SAMPLE_GRAD, d);
      })
      .Case([&](TopKOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis((int64_t)o.getAxis(), o.getInput().getType().getRank()), o.getLargest() ? 1 : 0};
        return emit(op, AMPRT_OP_TOPK, d);
      })
      .Case<ArgMaxOp, ArgMinOp>([&](Operation *) -> LogicalResult {
        auto in = cast<RankedTensorType>(op->getOperand(0).getType());
        int64_t axis = normAxis(op->getAttrOfType<IntegerAttr>("axis").getInt(), in.getRank());
        SmallVector<int64_t> keep(in.getShape());
        keep[axis] = 1;
        if (failed(tensor(d, op->getOperand(0), op)) ||
            failed(tensor(d, op->getResult(0), op, keep)))
          return failure();
        auto last = op->getAttrOfType<BoolAttr>("select_last_index");
        d.attrs = {axis, isa<ArgMinOp>(op) ? 1 : 0, last && last.getValue() ? 1 : 0};
        return emit(op, AMPRT_OP_ARG_REDUCE, d);
      })
      .Case([&](GatherElementsOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), cast<RankedTensorType>(o.getData().getType()).getRank())};
        return emit(op, AMPRT_OP_GATHER_ELEMENTS, d);
      })
      .Case([&](GatherElementsGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {(int64_t)o.getAxis()};
        return emit(op, AMPRT_OP_GATHER_ELEMENTS_GRAD, d);
      })
      .Case([&](GatherGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {(int64_t)o.getAxis()};
        return emit(op, AMPRT_OP_GATHER_GRAD, d);
      })
      .Case([&](ReduceMaxGradOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_REDUCE_MAX_GRAD, d);
      })
      .Case([&](ConcatOp o) -> LogicalResult {
        if (failed(all(o.getInputs())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), o.getType().getRank())};
        return emit(op, AMPRT_OP_CONCAT, d);
      })
      .Case([&](GatherOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), cast<RankedTensorType>(o.getData().getType()).getRank())};
        return emit(op, AMPRT_OP_GATHER, d);
      })
      .Case<RandomNormalOp, RandomUniformOp, BernoulliOp>([&](Operation *) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        if (auto o = dyn_cast<RandomNormalOp>(op))
          d.attrs = {AMPRT_RANDOM_NORMAL, f64Bits(o.getMean().convertToDouble()),
                     f64Bits(o.getScale().convertToDouble())};
        else if (auto o = dyn_cast<RandomUniformOp>(op))
          d.attrs = {AMPRT_RANDOM_UNIFORM, f64Bits(o.getLow().convertToDouble()),
                     f64Bits(o.getHigh().convertToDouble())};
        else
          d.attrs = {AMPRT_RANDOM_BERNOULLI, f64Bits(0.0), f64Bits(0.0)};
        return emit(op, AMPRT_OP_RANDOM, d);
      })
      .Case([&](DropoutOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getRatio().convertToDouble()), o.getTrainingMode() ? 1 : 0};
        return emit(op, AMPRT_OP_DROPOUT, d);
      })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceProdOp, GlobalAveragePoolOp>(
          [&](Operation *) -> LogicalResult {
            Value x = op->getOperand(0);
            auto in = cast<RankedTensorType>(x.getType());
            SmallVector<int64_t> axes;
            int64_t kind = isa<ReduceSumOp>(op)    ? AMPRT_REDUCE_SUM
                           : isa<ReduceMaxOp>(op)  ? AMPRT_REDUCE_MAX
                           : isa<ReduceProdOp>(op) ? AMPRT_REDUCE_PROD
                                                   : AMPRT_REDUCE_MEAN;
            if (isa<GlobalAveragePoolOp>(op)) {
              for (int64_t i = 2; i < in.getRank(); ++i)
                axes.push_back(i);
            } else {
              auto list = op->getAttrOfType<DenseI64ArrayAttr>("axes");
              bool noop = op->getAttrOfType<BoolAttr>("noop_with_empty_axes") &&
                          op->getAttrOfType<BoolAttr>("noop_with_empty_axes").getValue();
              if (!list || list.empty()) {
                if (noop) {
                  if (failed(all(op->getOperands())) || failed(all(op->getResults())))
                    return failure();
                  return emit(op, AMPRT_OP_COPY, d);
                }
                for (int64_t i = 0; i < in.getRank(); ++i)
                  axes.push_back(i);
              } else {
                for (int64_t a : list.asArrayRef())
                  axes.push_back(normAxis(a, in.getRank()));
                llvm::sort(axes);
              }
            }
            SmallVector<int64_t> keep(in.getShape());
            for (int64_t a : axes)
              keep[a] = 1;
            if (failed(tensor(d, x, op)) || failed(tensor(d, op->getResult(0), op, keep)))
              return failure();
            d.attrs = {kind, (int64_t)axes.size()};
            d.attrs.append(axes.begin(), axes.end());
            if (blocked.contains(x))
              d.attrs.push_back(1);
            return emit(op, AMPRT_OP_REDUCE, d);
          })
      .Case<SoftmaxOp, LogSoftmaxOp>([&](Operation *) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        int64_t axis = op->getAttrOfType<IntegerAttr>("axis").getInt();
        d.attrs = {normAxis(axis, cast<RankedTensorType>(op->getResult(0).getType()).getRank()),
                   isa<LogSoftmaxOp>(op) ? 1 : 0};
        return emit(op, AMPRT_OP_SOFTMAX, d);
      })
      .Case([&](LayerNormOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), o.getX().getType().getRank()),
                   f64Bits(o.getEpsilon().convertToDouble()), o.getBias() ? 1 : 0};
        return emit(op, AMPRT_OP_LAYER_NORM, d);
      })
      .Case([&](BatchNormOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getEpsilon().convertToDouble()),
                   f64Bits(o.getMomentum().convertToDouble()), o.getTrainingMode() ? 1 : 0};
        return emit(op, AMPRT_OP_BATCH_NORM, d);
      })
      .Case([&](GemmOp o) -> LogicalResult {
        if (o.getAccumulate() && !o.getAccumulate()->isF32())
          return op->emitOpError("accumulate = ")
                 << *o.getAccumulate() << " is not supported by the CPU runtime (f32 only)";
        if (failed(all(op->getOperands())))
          return failure();
        d.attrs = {f64Bits(o.getAlpha().convertToDouble()), f64Bits(o.getBeta().convertToDouble()),
                   o.getTransA() ? 1 : 0, o.getTransB() ? 1 : 0, o.getC() ? 1 : 0};
        if (Operation *relu = gemmRelu.lookup(op)) {
          // Written into the ReLU's result, in its own arena slot.
          Value out = relu->getResult(0);
          if (failed(slotPtr(out)) || failed(tensor(d, out, op)))
            return failure();
          d.attrs.push_back(AMPRT_GEMM_RELU);
          return emit(op, AMPRT_OP_GEMM, d);
        }
        if (failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_GEMM, d);
      })
      .Case([&](MatMulOp o) -> LogicalResult {
        if (o.getAccumulate() && !o.getAccumulate()->isF32())
          return op->emitOpError("accumulate = ")
                 << *o.getAccumulate() << " is not supported by the CPU runtime (f32 only)";
        auto a = cast<RankedTensorType>(o.getLhs().getType());
        if (!isa<FloatType>(a.getElementType()))
          return op->emitOpError("integer matrix products are not supported by the "
                                 "runtime");
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_MATMUL, d);
      })
      .Case([&](ConvOp o) -> LogicalResult {
        if (failed(convAttrs(o, o.getType(), d.attrs)) || failed(all(op->getOperands())))
          return failure();
        d.attrs[2] = o.getBias() ? 1 : 0;
        ConvCall cc = convCalls.lookup(op);
        Value out = convWrites(o);
        if (out != o.getOutput() && failed(slotPtr(out)))
          return failure(); // the last fused op's result, in its own slot
        auto bn = dyn_cast_or_null<BatchNormOp>(cc.bn);
        if (bn && failed(all({bn.getScale(), bn.getBias(), bn.getMean(), bn.getVar()})))
          return failure();
        if (failed(tensor(d, out, op)))
          return failure();
        int64_t flags = (cc.relu ? AMPRT_CONV_RELU : 0) |
                        (blocked.contains(o.getX()) ? AMPRT_CONV_SRC_BLOCKED : 0) |
                        (blocked.contains(out) ? AMPRT_CONV_DST_BLOCKED : 0);
        if (bn) {
          d.attrs.push_back(f64Bits(bn.getEpsilon().convertToDouble()));
          d.attrs.push_back(flags);
          return emit(op, AMPRT_OP_CONV_BN, d);
        }
        if (flags)
          d.attrs.push_back(flags);
        return emit(op, AMPRT_OP_CONV, d);
      })
      .Case([&](NLLLossGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = lossAttrs(op, o.getWeight() != nullptr);
        return emit(op, AMPRT_OP_NLL_LOSS_GRAD, d);
      })
      .Case([&](SGDUpdateOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getLr().convertToDouble()),
                   f64Bits(o.getMomentum().convertToDouble()),
                   f64Bits(o.getDampening().convertToDouble()),
                   f64Bits(o.getWeightDecay().convertToDouble()), o.getNesterov() ? 1 : 0,
                   o.getMomentumBuf() ? 1 : 0};
        return emit(op, AMPRT_OP_SGD_UPDATE, d);
      })
      .Case([&](AdamUpdateOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getLr().convertToDouble()), f64Bits(o.getBeta1().convertToDouble()),
                   f64Bits(o.getBeta2().convertToDouble()), f64Bits(o.getEps().convertToDouble()),
                   f64Bits(o.getWeightDecay().convertToDouble()),
                   o.getMode() == "hf" ? 2 : o.getDecoupled() ? 1 : 0};
        return emit(op, AMPRT_OP_ADAM_UPDATE, d);
      })
      .Case([&](UnscaleAndCheckOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {(int64_t)o.getGrads().size()};
        return emit(op, AMPRT_OP_UNSCALE_AND_CHECK, d);
      })
      .Case([&](ClipGradNormOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {(int64_t)o.getGrads().size(), f64Bits(o.getMaxNorm().convertToDouble())};
        return emit(op, AMPRT_OP_CLIP_GRAD_NORM, d);
      })
      .Case([&](UpdateScaleOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getGrowthFactor().convertToDouble()),
                   f64Bits(o.getBackoffFactor().convertToDouble()), (int64_t)o.getGrowthInterval(),
                   (int64_t)o.getHysteresis(), f64Bits(o.getMinScale().convertToDouble()),
                   o.getOnMinScale() == "error" ? 1 : 0};
        return emit(op, AMPRT_OP_UPDATE_SCALE, d);
      })
      .Case([&](MicroStepOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {(int64_t)o.getEvery()};
        return emit(op, AMPRT_OP_MICRO_STEP, d);
      })
      .Case([&](StepCountOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_STEP_COUNT, d);
      })
      .Case([&](BatchNormGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {f64Bits(o.getEpsilon().convertToDouble())};
        for (Value r : op->getResults())
          d.attrs.push_back(r.use_empty() ? 0 : 1);
        return emit(op, AMPRT_OP_BATCH_NORM_GRAD, d);
      })
      .Case([&](LayerNormGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), o.getX().getType().getRank())};
        for (Value r : op->getResults())
          d.attrs.push_back(r.use_empty() ? 0 : 1);
        return emit(op, AMPRT_OP_LAYER_NORM_GRAD, d);
      })
      .Case([&](ConvGradOp o) -> LogicalResult {
        // attrs: the conv's, then which of dx, dw, db are wanted.
        if (failed(convAttrs(o, o.getDy().getType(), d.attrs)) || failed(all(op->getOperands())) ||
            failed(all(op->getResults())))
          return failure();
        for (Value r : op->getResults())
          d.attrs.push_back(r.use_empty() ? 0 : 1);
        return emit(op, AMPRT_OP_CONV_GRAD, d);
      })
      .Case([&](ConvTransposeOp o) -> LogicalResult {
        // amp.conv's input gradient: the runtime's conv_grad with the result
        // as the convolution's input (its shape only) and dx, x as its dy;
        // then the bias added in place, broadcast along the channels.
        if (o.getAccumulate() && !o.getAccumulate()->isF32())
          return op->emitOpError("accumulate = ")
                 << *o.getAccumulate() << " is not supported by the CPU runtime (f32 only)";
        auto y = o.getType();
        auto x = o.getX().getType();
        int64_t n = x.getRank() - 2;
        if (n < 1 || n > 3)
          return op->emitOpError("needs 1 to 3 spatial dims");
        if (!y.hasStaticShape())
          return op->emitOpError("needs a static result shape");
        d.attrs = {n, (int64_t)o.getGroup(), 0};
        for (int64_t i = 0; i < n; ++i)
          d.attrs.append({o.getStrides() ? (*o.getStrides())[i] : 1,
                          o.getDilations() ? (*o.getDilations())[i] : 1,
                          o.getPads() ? (*o.getPads())[i] : 0,
                          o.getPads() ? (*o.getPads())[n + i] : 0});
        d.attrs.append({1, 0, 0});
        Value out = o.getOutput();
        if (failed(all({out, o.getW(), o.getX(), out, o.getW(), o.getW()})))
          return failure();
        if (failed(emit(op, AMPRT_OP_CONV_GRAD, d)))
          return failure();
        Value bias = o.getBias();
        if (!bias)
          return success();
        Desc add;
        SmallVector<int64_t> bshape(y.getRank(), 1);
        bshape[1] = y.getDimSize(1);
        if (failed(tensor(add, out, op)) || failed(tensor(add, bias, op, ArrayRef<int64_t>(bshape))) ||
            failed(tensor(add, out, op)))
          return failure();
        add.attrs = {AMPRT_BINARY_ADD};
        return emit(op, AMPRT_OP_BINARY, add);
      })
      .Case([&](MaxPoolGradOp) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        return emit(op, AMPRT_OP_MAX_POOL_GRAD, d);
      })
      .Case<MaxPoolOp, AveragePoolOp, AveragePoolGradOp>([&](Operation *) -> LogicalResult {
        bool grad = isa<AveragePoolGradOp>(op);
        auto x = cast<RankedTensorType>(op->getOperand(0).getType());
        auto y = cast<RankedTensorType>(grad ? op->getOperand(1).getType()
                                             : op->getResult(0).getType());
        int64_t n = x.getRank() - 2;
        if (n > 3)
          return op->emitOpError("more than 3 spatial dims are not supported");
        auto kAttr = op->getAttrOfType<DenseI64ArrayAttr>("kernel_shape");
        auto sAttr = op->getAttrOfType<DenseI64ArrayAttr>("strides");
        auto dAttr = op->getAttrOfType<DenseI64ArrayAttr>("dilations");
        auto pAttr = op->getAttrOfType<DenseI64ArrayAttr>("pads");
        auto apAttr = op->getAttrOfType<StringAttr>("auto_pad");
        SmallVector<int64_t> kernel(kAttr.asArrayRef()), strides, dil, pb, pe;
        for (int64_t i = 0; i < n; ++i) {
          strides.push_back(sAttr ? sAttr[i] : 1);
          dil.push_back(dAttr ? dAttr[i] : 1);
        }
        std::optional<ArrayRef<int64_t>> pads;
        if (pAttr)
          pads = pAttr.asArrayRef();
        windowPads(apAttr ? apAttr.getValue() : "NOTSET", x.getShape().drop_front(2),
                   y.getShape().drop_front(2), kernel, strides, dil, pads, pb, pe);
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        auto cip = op->getAttrOfType<BoolAttr>("count_include_pad");
        d.attrs = {n, cip && cip.getValue() ? 1 : 0};
        for (int64_t i = 0; i < n; ++i)
          d.attrs.append({kernel[i], strides[i], dil[i], pb[i], pe[i]});
        if (auto mp = dyn_cast<MaxPoolOp>(op)) {
          d.attrs.push_back(mp.getStorageOrder());
          // Whether anything reads the indices (the forward alone does not).
          d.attrs.push_back(mp.getIndices().use_empty() ? 0 : 1);
          d.attrs.push_back(blocked.contains(mp.getX()) ? 1 : 0);
        }
        return emit(op,
                    grad                 ? AMPRT_OP_AVERAGE_POOL_GRAD
                    : isa<MaxPoolOp>(op) ? AMPRT_OP_MAX_POOL
                                         : AMPRT_OP_AVERAGE_POOL,
                    d);
      })
      .Case<SoftmaxCrossEntropyLossOp, NLLLossOp>([&](Operation *) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = lossAttrs(op, op->getNumOperands() == 3);
        return emit(op,
                    isa<NLLLossOp>(op) ? AMPRT_OP_NLL_LOSS : AMPRT_OP_SOFTMAX_CROSS_ENTROPY,
                    d);
      })
      .Case([&](UnaryGradOp o) -> LogicalResult {
        static const std::pair<StringRef, amprt_unary_op> kinds[] = {
            {"relu", AMPRT_UNARY_RELU},       {"sqrt", AMPRT_UNARY_SQRT},
            {"exp", AMPRT_UNARY_EXP},         {"log", AMPRT_UNARY_LOG},
            {"erf", AMPRT_UNARY_ERF},         {"tanh", AMPRT_UNARY_TANH},
            {"sigmoid", AMPRT_UNARY_SIGMOID}, {"gelu", AMPRT_UNARY_GELU},
            {"gelu_tanh", AMPRT_UNARY_GELU_TANH}, {"leaky_relu", AMPRT_UNARY_LEAKY_RELU},
            {"abs", AMPRT_UNARY_ABS},         {"reciprocal", AMPRT_UNARY_RECIPROCAL},
            {"softplus", AMPRT_UNARY_SOFTPLUS}, {"elu", AMPRT_UNARY_ELU},
            {"celu", AMPRT_UNARY_CELU},       {"selu", AMPRT_UNARY_SELU},
            {"hard_sigmoid", AMPRT_UNARY_HARD_SIGMOID}, {"hard_swish", AMPRT_UNARY_HARD_SWISH},
            {"softsign", AMPRT_UNARY_SOFTSIGN}, {"sin", AMPRT_UNARY_SIN},
            {"cos", AMPRT_UNARY_COS},         {"floor", AMPRT_UNARY_FLOOR},
            {"ceil", AMPRT_UNARY_CEIL},       {"round", AMPRT_UNARY_ROUND},
            {"sign", AMPRT_UNARY_SIGN},       {"clip", AMPRT_UNARY_CLAMP},
            {"thresholded_relu", AMPRT_UNARY_THRESHOLDED_RELU},
            {"tan", AMPRT_UNARY_TAN},         {"asin", AMPRT_UNARY_ASIN},
            {"acos", AMPRT_UNARY_ACOS},       {"atan", AMPRT_UNARY_ATAN},
            {"sinh", AMPRT_UNARY_SINH},       {"cosh", AMPRT_UNARY_COSH},
            {"asinh", AMPRT_UNARY_ASINH},     {"acosh", AMPRT_UNARY_ACOSH},
            {"atanh", AMPRT_UNARY_ATANH}};
        const auto *k = llvm::find_if(kinds, [&](auto &p) { return p.first == o.getKind(); });
        if (k == std::end(kinds))
          return o.emitOpError("unknown kind '") << o.getKind() << "'";
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {k->second, f64Bits(o.getAlpha().convertToDouble()),
                   f64Bits(o.getBeta().convertToDouble())};
        return emit(op, AMPRT_OP_UNARY_GRAD, d);
      })
      .Case([&](SoftmaxGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = {normAxis(o.getAxis(), cast<RankedTensorType>(o.getY().getType()).getRank()),
                   o.getLog() ? 1 : 0};
        return emit(op, AMPRT_OP_SOFTMAX_GRAD, d);
      })
      .Case([&](SoftmaxCrossEntropyLossGradOp o) -> LogicalResult {
        if (failed(all(op->getOperands())) || failed(all(op->getResults())))
          return failure();
        d.attrs = lossAttrs(op, o.getWeights() != nullptr);
        return emit(op, AMPRT_OP_SOFTMAX_CROSS_ENTROPY_GRAD, d);
      })
      .Default([&](Operation *) {
        return op->emitOpError("has no runtime lowering");
      });
}

std::map<unsigned, unsigned> Lowerer::inPlaceResults(func::FuncOp f) {
  std::map<unsigned, unsigned> out;
  Block &block = f.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  llvm::StringMap<BlockArgument> state;
  for (BlockArgument a : f.getArguments())
    for (StringRef key : {"amp.param", "amp.opt_state"})
      if (auto n = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), key))
        state[n.getValue()] = a;
  std::set<unsigned> argsTaken;
  for (unsigned i = 0; i < f.getNumResults(); ++i) {
    auto name = f.getResultAttrOfType<StringAttr>(i, "amp.updates");
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
    if (in != a)
      continue;
    // Returned once, and the argument read by nothing after the op.
    if (llvm::count(ret.getOperands(), v) != 1)
      continue;
    bool laterRead = llvm::any_of(a.getUsers(), [&](Operation *u) {
      return u != x && x->isBeforeInBlock(u);
    });
    if (laterRead)
      continue;
    out[i] = a.getArgNumber();
    argsTaken.insert(a.getArgNumber());
  }
  return out;
}

LogicalResult Lowerer::lower(func::FuncOp f) {
  if (f.isExternal())
    return success();
  if (!f->hasAttr("amp.arena_bytes"))
    return f.emitError("amp-lower-to-runtime: '")
           << f.getSymName() << "' has no memory plan; run amp-plan-memory first";
  Location loc = f.getLoc();
  ptrs.clear();
  exec = module.lookupSymbol<LLVM::LLVMFuncOp>("amprt_exec");
  auto fnTy = LLVM::LLVMFunctionType::get(i32, {ptrTy, ptrTy, ptrTy, ptrTy});
  b.setInsertionPoint(f);
  auto fn = LLVM::LLVMFuncOp::create(b, loc, (f.getSymName() + "__lowering").str(), fnTy);
  for (StringRef keep : {"amp.arena_bytes", "amp.arena_bytes_if_f32"})
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
  std::map<unsigned, unsigned> inPlace = inPlaceResults(f);
  auto fret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  SmallVector<int64_t> inPlaceList;
  for (auto [i, argNo] : inPlace) {
    Value slot = LLVM::GEPOp::create(b, loc, ptrTy, ptrTy, resultsPtr,
                                     ArrayRef<LLVM::GEPArg>{(int32_t)i});
    placed[fret.getOperand(i)] = LLVM::LoadOp::create(b, loc, ptrTy, slot);
    inPlaceList.push_back(i);
  }
  fn->setAttr("amp.inplace_results", b.getDenseI64ArrayAttr(inPlaceList));
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
    Value slot = LLVM::GEPOp::create(b, loc, ptrTy, ptrTy, resultsPtr,
                                     ArrayRef<LLVM::GEPArg>{(int32_t)i});
    Value out = LLVM::LoadOp::create(b, loc, ptrTy, slot);
    Desc d;
    if (failed(tensor(d, v, ret)))
      return failure();
    SmallVector<int64_t> same(d.words); // the same view, in the caller's buffer
    d.words.append(same.begin(), same.end());
    d.ptrs.push_back(out);
    ++d.ntensors;
    if (failed(emit(ret, AMPRT_OP_COPY, d)))
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
      auto slots = d->getAttrOfType<DenseI64ArrayAttr>("amp.slots");
      unsigned k = cast<OpResult>(v).getResultNumber();
      if (!slots || k >= slots.size() || slots[k] < 0)
        return std::nullopt;
      auto t = cast<RankedTensorType>(v.getType());
      int64_t bytes = t.getNumElements() * (int64_t)((t.getElementTypeBitWidth() + 7) / 8);
      return std::make_pair(slots[k], slots[k] + bytes);
    }
    return std::nullopt; // an argument or a constant: not in the arena
  };
  // The fused ops' result is written at the convolution: its slot (which
  // the plan may have given to storage whose last reader is the
  // convolution, its input say) must not overlap anything the call reads.
  auto fits = [&](Value out, ArrayRef<Value> reads) {
    auto o = range(out);
    if (!o)
      return false;
    for (Value in : reads)
      if (auto r = range(in); r && r->first < o->second && o->first < r->second)
        return false;
    return true;
  };
  for (size_t i = 0; i < seq.size(); ++i) {
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

struct AMPLowerToRuntimePass
    : public amp::impl::AMPLowerToRuntimeBase<AMPLowerToRuntimePass> {
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

} // namespace
