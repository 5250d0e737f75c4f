//===- Lowerer.h - amp-lower-to-runtime's state -----------------*- C++ -*-===//
//
// The lowering of one function to runtime calls: LowerToRuntime.cpp walks
// the function, plans in-place results and fusions and emits the calls;
// LowerOps.cpp encodes each op's descriptor (Lowerer::lowerOp).
//
//===----------------------------------------------------------------------===//

#ifndef AMP_LIB_CONVERSION_AMPTORUNTIME_LOWERER_H
#define AMP_LIB_CONVERSION_AMPTORUNTIME_LOWERER_H

#include "amp/Conversion/Passes.h"
#include "amp/Transforms/Passes.h"
#include "amprt/amprt.h"
#include "amprt/amprt_ops.hpp"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include <map>
#include <set>

#include "amp/Dialect/AMP/IR/AMPOps.h"

namespace mlir::amp::lowering {

inline SmallVector<int64_t> contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
    s[d] = acc;
    acc *= shape[d];
  }
  return s;
}

inline int64_t normAxis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

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
  /// Batch norms whose output only a ReLU reads, the next op: the ReLU runs
  /// in the batch norm's call (AMPRT_BN_RELU), which writes its result.
  llvm::DenseMap<Operation *, Operation *> bnRelu;
  /// Batch-norm gradients whose dy is a ReLU's gradient (amp.unary_grad
  /// relu, read only there, the op before): the ReLU's mask runs in the
  /// gradient's call (AMPRT_BN_RELU), which reads that op's x and dy.
  llvm::DenseMap<Operation *, Operation *> bnGradRelu;
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
    if (auto p = placed.find(v); p != placed.end()) { // a state result written in place
      ptrs[v] = p->second;
      return success();
    }
    Operation *def = v.getDefiningOp();
    auto slots = def->getAttrOfType<DenseI64ArrayAttr>(attrname::kSlots);
    if (!slots || slots.empty() || slots[0] < 0)
      return def->emitOpError("has no memory plan: run amp-plan-memory first");
    Value offset = LLVM::ConstantOp::create(b, def->getLoc(), i64, b.getI64IntegerAttr(slots[0]));
    ptrs[v] = LLVM::GEPOp::create(b, def->getLoc(), ptrTy, b.getI8Type(), arena,
                                  ArrayRef<LLVM::GEPArg>{offset});
    return success();
  }
  /// The f16 / bf16 copy of an optimizer's new parameter that its call
  /// writes (amp-keep-weight-casts): the amp.cast of new_param that is the
  /// next op, else null.
  static CastOp lowpCopyOf(Operation *update, Value newParam) {
    auto c = dyn_cast_or_null<CastOp>(update->getNextNode());
    if (!c || c.getInput() != newParam)
      return nullptr;
    Type e = getElementTypeOrSelf(c.getOutput().getType());
    return e.isF16() || e.isBF16() ? c : nullptr;
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
      return op->emitOpError("element type ") << t.getElementType() << " has no runtime type";
    ArrayRef<int64_t> sh = shape ? *shape : t.getShape();
    SmallVector<int64_t> st = strides ? SmallVector<int64_t>(*strides) : contiguousStrides(sh);
    // A transpose the products read in place: its input's strides with the
    // last two swapped.
    if (Operation *def = v.getDefiningOp();
        !shape && !strides && def && isMatmulViewTranspose(def)) {
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
    return LLVM::GlobalOp::create(b, loc, type, /*isConstant=*/true, LLVM::Linkage::Internal, name,
                                  value,
                                  /*alignment=*/64);
  }

  Value addressOf(Location loc, LLVM::GlobalOp g) {
    return LLVM::AddressOfOp::create(b, loc, ptrTy, g.getSymName());
  }

  LogicalResult constant(arith::ConstantOp c);
  LogicalResult emit(Operation *op, int64_t opcode, Desc &d);
  /// The call for `op` with the opcode and attributes of `a` (amprt_ops.def):
  /// the attributes encoded from the table, the tensors in `d` checked
  /// against the count the table gives.
  template <typename Attrs> LogicalResult emitAs(Operation *op, const Attrs &a, Desc &d) {
    d.attrs.clear();
    if (!amprt::attrs::encode(a, d.attrs))
      return op->emitOpError("internal error: a count out of range in the runtime's ")
             << Attrs::label << " descriptor";
    int64_t want = amprt::attrs::tensorCount(a);
    if (want >= 0 ? d.ntensors != want : d.ntensors < -want)
      return op->emitOpError("internal error: the runtime's ")
             << Attrs::label << " takes " << (want >= 0 ? "" : "at least ")
             << (want >= 0 ? want : -want) << " tensors, not " << d.ntensors;
    return emit(op, Attrs::opcode, d);
  }
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

} // namespace mlir::amp::lowering

// The dialect's enums are numbered like the runtime's (AMPEnums.td), so the
// lowering passes them through.
static_assert((int)::mlir::amp::Reduction::none == AMPRT_REDUCTION_NONE &&
              (int)::mlir::amp::Reduction::sum == AMPRT_REDUCTION_SUM &&
              (int)::mlir::amp::Reduction::mean == AMPRT_REDUCTION_MEAN);
#define AMP_SAME_UNARY(KIND, RT)                                                                   \
  static_assert((int)::mlir::amp::UnaryKind::KIND == AMPRT_UNARY_##RT);
AMP_SAME_UNARY(identity, IDENTITY)
AMP_SAME_UNARY(relu, RELU)
AMP_SAME_UNARY(sqrt, SQRT)
AMP_SAME_UNARY(exp, EXP)
AMP_SAME_UNARY(log, LOG)
AMP_SAME_UNARY(erf, ERF)
AMP_SAME_UNARY(tanh, TANH)
AMP_SAME_UNARY(sigmoid, SIGMOID)
AMP_SAME_UNARY(gelu, GELU)
AMP_SAME_UNARY(gelu_tanh, GELU_TANH)
AMP_SAME_UNARY(leaky_relu, LEAKY_RELU)
AMP_SAME_UNARY(abs, ABS)
AMP_SAME_UNARY(reciprocal, RECIPROCAL)
AMP_SAME_UNARY(softplus, SOFTPLUS)
AMP_SAME_UNARY(elu, ELU)
AMP_SAME_UNARY(celu, CELU)
AMP_SAME_UNARY(selu, SELU)
AMP_SAME_UNARY(hard_sigmoid, HARD_SIGMOID)
AMP_SAME_UNARY(hard_swish, HARD_SWISH)
AMP_SAME_UNARY(softsign, SOFTSIGN)
AMP_SAME_UNARY(sin, SIN)
AMP_SAME_UNARY(cos, COS)
AMP_SAME_UNARY(floor, FLOOR)
AMP_SAME_UNARY(ceil, CEIL)
AMP_SAME_UNARY(round, ROUND)
AMP_SAME_UNARY(sign, SIGN)
AMP_SAME_UNARY(clip, CLAMP)
AMP_SAME_UNARY(thresholded_relu, THRESHOLDED_RELU)
AMP_SAME_UNARY(tan, TAN)
AMP_SAME_UNARY(asin, ASIN)
AMP_SAME_UNARY(acos, ACOS)
AMP_SAME_UNARY(atan, ATAN)
AMP_SAME_UNARY(sinh, SINH)
AMP_SAME_UNARY(cosh, COSH)
AMP_SAME_UNARY(asinh, ASINH)
AMP_SAME_UNARY(acosh, ACOSH)
AMP_SAME_UNARY(atanh, ATANH)
AMP_SAME_UNARY(mish, MISH)
#undef AMP_SAME_UNARY
static_assert(::mlir::amp::getMaxEnumValForUnaryKind() == AMPRT_UNARY_LAST);

#endif // AMP_LIB_CONVERSION_AMPTORUNTIME_LOWERER_H
