//===- AutocastModels.cpp - AutocastOpInterface for upstream dialects ----===//
//
// External models that let amp-autocast read the IR other ML compilers
// speak (torch-mlir's linalg-on-tensors and TOSA output, IREE's input):
//
//   linalg   every structured op (named products and convolutions,
//            linalg.generic refined by the upstream contraction /
//            convolution interfaces, reductions, element-wise ops) can be
//            lowered: its inputs read the target type, its inits (the
//            accumulator) keep f32, and the body widens each narrowed input
//            with arith.extf (what the named ops' cast_signed builds);
//            casts are linalg.generic of arith.truncf / extf (IREE's form).
//            linalg.softmax is classified only.
//   tosa     matmul (bf16 / f16 x same -> f32) and the convolutions (input,
//            filter, bias and zero points in the target type, acc_type f32,
//            result in the target type, cast back by the pass) can be
//            lowered; casts are tosa.cast.
//   tensor, arith, math on tensors: classified (the shape ops follow).
//
// Reshapes, transposes and broadcasts are data movement: a cast of their
// result becomes a cast of their source moved through them.
//
//===----------------------------------------------------------------------===//

#include "amp/Transforms/AutocastOpInterface.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::amp;

namespace {

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

RankedTensorType withElement(Type t, Type elt) {
  return RankedTensorType::get(cast<RankedTensorType>(t).getShape(), elt);
}

/// One scalar float conversion, round to nearest even (f16 <-> bf16 through
/// f32: neither holds the other).
Value convertScalar(OpBuilder &b, Location loc, Value x, Type to) {
  auto from = cast<FloatType>(x.getType());
  auto dst = cast<FloatType>(to);
  if (from == dst)
    return x;
  if (from.getWidth() == dst.getWidth()) {
    x = arith::ExtFOp::create(b, loc, b.getF32Type(), x);
    from = b.getF32Type();
  }
  if (dst.getWidth() > from.getWidth())
    return arith::ExtFOp::create(b, loc, dst, x);
  return arith::TruncFOp::create(b, loc, dst, x);
}

/// IREE's cast on tensors: an element-wise linalg.generic into a fresh
/// tensor.empty of the new element type.
Value linalgCast(OpBuilder &b, Location loc, Value v, Type elt) {
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<Value> dyn;
  for (int64_t i = 0; i < t.getRank(); ++i)
    if (t.isDynamicDim(i))
      dyn.push_back(tensor::DimOp::create(b, loc, v, i));
  Value init = tensor::EmptyOp::create(b, loc, t.getShape(), elt, dyn);
  AffineMap id = b.getMultiDimIdentityMap(t.getRank());
  SmallVector<utils::IteratorType> its(t.getRank(), utils::IteratorType::parallel);
  auto g = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ValueRange{v}, ValueRange{init},
      ArrayRef<AffineMap>{id, id}, its, [&](OpBuilder &nb, Location l, ValueRange args) {
        linalg::YieldOp::create(nb, l, convertScalar(nb, l, args[0], elt));
      });
  return g.getResult(0);
}

Value tosaCast(OpBuilder &b, Location loc, Value v, Type elt) {
  return tosa::CastOp::create(b, loc, withElement(v.getType(), elt), v);
}

/// A single-source move without an init (a reshape): the same op reading
/// `source`, its result in source's element type.
FailureOr<Value> cloneMove(Operation *op, OpBuilder &b, Value source, unsigned moved) {
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointAfter(op);
  IRMapping m;
  m.map(op->getOperand(moved), source);
  Operation *c = b.clone(*op, m);
  c->getResult(0).setType(withElement(c->getResult(0).getType(), getElementTypeOrSelf(source)));
  return c->getResult(0);
}

//===----------------------------------------------------------------------===//
// linalg
//===----------------------------------------------------------------------===//

/// A linalg.generic that only copies, transposes or broadcasts its one input
/// into a tensor.empty.
bool isGenericMove(linalg::GenericOp g) {
  if (g.getNumDpsInputs() != 1 || g.getNumDpsInits() != 1 || g.getNumReductionLoops() != 0)
    return false;
  if (!g.getDpsInitOperand(0)->get().getDefiningOp<tensor::EmptyOp>())
    return false;
  Block &body = g.getRegion().front();
  if (body.getOperations().size() != 1)
    return false;
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  return yield.getNumOperands() == 1 && yield.getOperand(0) == body.getArgument(0) &&
         g.getMatchingIndexingMap(g.getDpsInputOperand(0)).isProjectedPermutation();
}

template <typename OpTy>
struct LinalgModel : public AutocastOpInterface::ExternalModel<LinalgModel<OpTy>, OpTy> {
  std::string getAutocastPolicyName(Operation *op) const {
    if (auto g = dyn_cast<linalg::GenericOp>(op)) {
      auto l = cast<linalg::LinalgOp>(op);
      // Products and convolutions reduce: an all-parallel generic is
      // element-wise without asking the (costlier) interfaces.
      if (g.getNumReductionLoops() == 0)
        return "linalg.generic.elementwise";
      if (linalg::isaContractionOpInterface(l))
        return "linalg.generic.contraction";
      if (linalg::isaConvolutionOpInterface(l, /*allowEmptyConvolvedDims=*/false))
        return "linalg.generic.convolution";
      if (g.getNumReductionLoops() > 0)
        return "linalg.generic.reduction";
      return "linalg.generic.elementwise";
    }
    return op->getName().getStringRef().str();
  }
  bool canAutocastLower(Operation *) const { return true; }
  SmallVector<unsigned> getAutocastInputs(Operation *op) const {
    SmallVector<unsigned> in;
    for (OpOperand *o : cast<linalg::LinalgOp>(op).getDpsInputOperands())
      if (isFloatTensor(o->get()))
        in.push_back(o->getOperandNumber());
    return in;
  }
  FailureOr<bool> autocastLower(Operation *op, OpBuilder &b, Type low,
                                function_ref<Value(Value, Type)> castTo) const {
    auto l = cast<linalg::LinalgOp>(op);
    for (OpOperand *o : l.getDpsInputOperands()) {
      if (!isFloatTensor(o->get()))
        continue;
      Type old = getElementTypeOrSelf(o->get());
      if (old == low)
        continue;
      o->set(castTo(o->get(), low));
      // The body reads the narrowed element and widens it: what a named
      // op's cast_signed builds for these types.
      BlockArgument arg = l.getMatchingBlockArgument(o);
      arg.setType(low);
      if (arg.use_empty())
        continue;
      SmallVector<OpOperand *> uses;
      for (OpOperand &u : arg.getUses())
        uses.push_back(&u);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(arg.getOwner());
      Value wide = convertScalar(b, op->getLoc(), arg, old);
      for (OpOperand *u : uses)
        u->set(wide);
    }
    return true;
  }
  Value buildAutocastCast(Operation *, OpBuilder &b, Location loc, Value v, Type elt) const {
    return linalgCast(b, loc, v, elt);
  }
  bool isAutocastDataMovement(Operation *op) const {
    if constexpr (llvm::is_one_of<OpTy, linalg::TransposeOp, linalg::BroadcastOp,
                                  linalg::CopyOp>::value)
      return cast<linalg::LinalgOp>(op)
                 .getDpsInitOperand(0)
                 ->get()
                 .getDefiningOp<tensor::EmptyOp>() != nullptr;
    if constexpr (std::is_same_v<OpTy, linalg::GenericOp>)
      return isGenericMove(cast<linalg::GenericOp>(op));
    return false;
  }
  FailureOr<Value> rebuildAutocastDataMovement(Operation *op, OpBuilder &b, Value source) const {
    auto l = cast<linalg::LinalgOp>(op);
    Value init = l.getDpsInitOperand(0)->get();
    auto empty = init.getDefiningOp<tensor::EmptyOp>();
    if (!empty)
      return failure();
    Type elt = getElementTypeOrSelf(source);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointAfter(op);
    Value newInit = tensor::EmptyOp::create(b, op->getLoc(), empty.getType().getShape(), elt,
                                            empty.getDynamicSizes());
    IRMapping m;
    m.map(l.getDpsInputOperand(0)->get(), source);
    m.map(init, newInit);
    Operation *c = b.clone(*op, m);
    for (BlockArgument a : c->getRegion(0).front().getArguments())
      a.setType(elt);
    c->getResult(0).setType(withElement(c->getResult(0).getType(), elt));
    return c->getResult(0);
  }
};

//===----------------------------------------------------------------------===//
// linalg.softmax, tensor, arith, math: classified; reshapes move data
//===----------------------------------------------------------------------===//

template <typename OpTy>
struct ClassifiedModel : public AutocastOpInterface::ExternalModel<ClassifiedModel<OpTy>, OpTy> {
  std::string getAutocastPolicyName(Operation *op) const {
    return op->getName().getStringRef().str();
  }
  bool canAutocastLower(Operation *) const { return false; }
  SmallVector<unsigned> getAutocastInputs(Operation *) const { return {}; }
  FailureOr<bool> autocastLower(Operation *op, OpBuilder &, Type,
                                function_ref<Value(Value, Type)>) const {
    return op->emitOpError("amp-autocast cannot rebuild this op in a narrower type");
  }
  Value buildAutocastCast(Operation *, OpBuilder &b, Location loc, Value v, Type elt) const {
    return linalgCast(b, loc, v, elt);
  }
  bool isAutocastDataMovement(Operation *) const {
    return llvm::is_one_of<OpTy, tensor::ExpandShapeOp, tensor::CollapseShapeOp>::value;
  }
  FailureOr<Value> rebuildAutocastDataMovement(Operation *op, OpBuilder &b, Value source) const {
    return cloneMove(op, b, source, 0);
  }
};

//===----------------------------------------------------------------------===//
// tosa
//===----------------------------------------------------------------------===//

/// A float zero point of `low` (TOSA's float zero points are 0).
FailureOr<Value> lowZeroPoint(Operation *op, OpBuilder &b, Value zp, Type low) {
  DenseElementsAttr attr;
  if (!matchPattern(zp, m_Constant(&attr)) || !isa<FloatType>(attr.getElementType()))
    return LogicalResult(op->emitOpError("amp-autocast: a zero point that is not a float "
                                         "constant cannot be narrowed"));
  for (APFloat v : attr.getValues<APFloat>())
    if (!v.isZero())
      return LogicalResult(op->emitOpError("amp-autocast: float zero point is not 0"));
  auto t = withElement(zp.getType(), low);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(op);
  return tosa::ConstOp::create(b, op->getLoc(), t,
                               DenseElementsAttr::get(t, b.getFloatAttr(low, 0.0)))
      .getResult();
}

template <typename OpTy>
struct TosaModel : public AutocastOpInterface::ExternalModel<TosaModel<OpTy>, OpTy> {
  static constexpr bool kMatMul = std::is_same_v<OpTy, tosa::MatMulOp>;
  static constexpr bool kConv =
      llvm::is_one_of<OpTy, tosa::Conv2DOp, tosa::Conv3DOp, tosa::DepthwiseConv2DOp,
                      tosa::TransposeConv2DOp>::value;

  std::string getAutocastPolicyName(Operation *op) const {
    return op->getName().getStringRef().str();
  }
  bool canAutocastLower(Operation *) const { return kMatMul || kConv; }
  SmallVector<unsigned> getAutocastInputs(Operation *) const {
    if constexpr (kMatMul)
      return {0, 1};
    if constexpr (kConv)
      return {0, 1, 2}; // input, filter, bias: TOSA's bf16 / fp16 profiles
    return {};
  }
  FailureOr<bool> autocastLower(Operation *op, OpBuilder &b, Type low,
                                function_ref<Value(Value, Type)> castTo) const {
    if constexpr (kMatMul || kConv) {
      unsigned zp0 = kMatMul ? 2 : 3;
      for (unsigned i : getAutocastInputs(op))
        op->setOperand(i, castTo(op->getOperand(i), low));
      llvm::SmallDenseMap<Value, Value, 2> narrowed; // one constant per zero point
      for (unsigned i = zp0; i < zp0 + 2; ++i) {
        Value &zp = narrowed[op->getOperand(i)];
        if (!zp) {
          auto made = lowZeroPoint(op, b, op->getOperand(i), low);
          if (failed(made))
            return failure();
          zp = *made;
        }
        op->setOperand(i, zp);
      }
      if constexpr (kMatMul)
        return true; // bf16 x bf16 -> f32, f16 x f16 -> f32
      // Convolutions: acc_type (f32) accumulates, the result is rounded to
      // the input type, as TOSA's profiles have it.
      op->getResult(0).setType(withElement(op->getResult(0).getType(), low));
      return false;
    }
    return op->emitOpError("amp-autocast cannot rebuild this op in a narrower type");
  }
  Value buildAutocastCast(Operation *, OpBuilder &b, Location loc, Value v, Type elt) const {
    return tosaCast(b, loc, v, elt);
  }
  bool isAutocastDataMovement(Operation *) const {
    return llvm::is_one_of<OpTy, tosa::ReshapeOp, tosa::TransposeOp>::value;
  }
  FailureOr<Value> rebuildAutocastDataMovement(Operation *op, OpBuilder &b, Value source) const {
    return cloneMove(op, b, source, 0);
  }
};

template <template <typename> class Model, typename... Ops> void attach(MLIRContext *ctx) {
  (Ops::template attachInterface<Model<Ops>>(*ctx), ...);
}

} // namespace

void mlir::amp::registerAutocastExternalModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, linalg::LinalgDialect *) {
    attach<LinalgModel,
#define GET_OP_LIST
#include "mlir/Dialect/Linalg/IR/LinalgStructuredOps.cpp.inc"
           >(ctx);
    linalg::SoftmaxOp::attachInterface<ClassifiedModel<linalg::SoftmaxOp>>(*ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, tensor::TensorDialect *) {
    attach<ClassifiedModel,
#define GET_OP_LIST
#include "mlir/Dialect/Tensor/IR/TensorOps.cpp.inc"
           >(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, arith::ArithDialect *) {
    attach<ClassifiedModel,
#define GET_OP_LIST
#include "mlir/Dialect/Arith/IR/ArithOps.cpp.inc"
           >(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, math::MathDialect *) {
    attach<ClassifiedModel,
#define GET_OP_LIST
#include "mlir/Dialect/Math/IR/MathOps.cpp.inc"
           >(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, tosa::TosaDialect *) {
    attach<TosaModel,
#define GET_OP_LIST
#include "mlir/Dialect/Tosa/IR/TosaOps.cpp.inc"
           >(ctx);
  });
}
