//===- AMPDialect.cpp - amp dialect, op definitions, amp.cast ------------===//
//
// The dialect registration, the generated op definitions, constant
// materialisation and the element-type rules of amp.cast. The ONNX shape
// rules of the other ops are in AMPShapes.cpp.
//
//===----------------------------------------------------------------------===//

#include "amp/Dialect/AMP/IR/AMPOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::amp;

#include "amp/Dialect/AMP/IR/AMPEnums.cpp.inc"
#include "amp/Dialect/AMP/IR/AMPInterfaces.cpp.inc"
#include "amp/Dialect/AMP/IR/AMPOpsDialect.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "amp/Dialect/AMP/IR/AMPAttrs.cpp.inc"

void AMPDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "amp/Dialect/AMP/IR/AMPOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "amp/Dialect/AMP/IR/AMPAttrs.cpp.inc"
      >();
}

Operation *AMPDialect::materializeConstant(OpBuilder &builder, Attribute value, Type type,
                                           Location loc) {
  auto typed = dyn_cast<TypedAttr>(value);
  if (!typed || typed.getType() != type)
    return nullptr;
  return arith::ConstantOp::create(builder, loc, type, typed);
}

#define GET_OP_CLASSES
#include "amp/Dialect/AMP/IR/AMPOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Element type rules
//===----------------------------------------------------------------------===//

bool mlir::amp::isLowPrecisionFloat(Type elementType) {
  return elementType.isF16() || elementType.isBF16();
}

bool mlir::amp::isExactConversion(Type from, Type to) {
  from = getElementTypeOrSelf(from);
  to = getElementTypeOrSelf(to);
  if (from == to)
    return true;
  // Booleans are 0 and 1 in every numeric type, and x != 0 brings them back.
  if (from.isInteger(1))
    return true;
  if (auto fromFloat = dyn_cast<FloatType>(from)) {
    auto toFloat = dyn_cast<FloatType>(to);
    if (!toFloat)
      return false;
    // Every value of `from` is a value of `to` when `to` has at least as
    // many significand bits and its exponent range covers `from`'s,
    // subnormals included.
    const llvm::fltSemantics &f = fromFloat.getFloatSemantics();
    const llvm::fltSemantics &t = toFloat.getFloatSemantics();
    return llvm::APFloat::semanticsPrecision(t) >= llvm::APFloat::semanticsPrecision(f) &&
           llvm::APFloat::semanticsMaxExponent(t) >= llvm::APFloat::semanticsMaxExponent(f) &&
           llvm::APFloat::semanticsMinExponent(t) - (int)llvm::APFloat::semanticsPrecision(t) <=
               llvm::APFloat::semanticsMinExponent(f) - (int)llvm::APFloat::semanticsPrecision(f);
  }
  auto fromInt = dyn_cast<IntegerType>(from);
  if (!fromInt)
    return false;
  unsigned fromBits = fromInt.getWidth();
  bool fromUnsigned = fromInt.isUnsigned();
  if (auto toInt = dyn_cast<IntegerType>(to)) {
    if (toInt.isInteger(1))
      return false;
    if (fromUnsigned == toInt.isUnsigned())
      return toInt.getWidth() >= fromBits;
    // Unsigned into a wider signed type is exact; signed into unsigned never.
    return fromUnsigned && toInt.getWidth() > fromBits;
  }
  if (auto toFloat = dyn_cast<FloatType>(to)) {
    // Integers up to 2^precision are exact; signed types need one bit less.
    unsigned magnitudeBits = fromUnsigned ? fromBits : fromBits - 1;
    return llvm::APFloat::semanticsPrecision(toFloat.getFloatSemantics()) >= magnitudeBits;
  }
  return false;
}

bool mlir::amp::areCompatibleResultTypes(TypeRange inferred, TypeRange declared,
                                         bool f32Accumulators) {
  if (inferred.size() != declared.size())
    return false;
  for (auto [i, d] : llvm::zip(inferred, declared)) {
    if (i == d)
      continue;
    auto it = dyn_cast<RankedTensorType>(i);
    auto dt = dyn_cast<RankedTensorType>(d);
    if (!it || !dt)
      return false;
    Type ie = it.getElementType(), de = dt.getElementType();
    bool accumulator = f32Accumulators && (ie.isF16() || ie.isBF16()) && de.isF32();
    if ((ie != de && !accumulator) || failed(verifyCompatibleShape(it, dt)))
      return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// amp.cast
//===----------------------------------------------------------------------===//

LogicalResult CastOp::verify() {
  auto in = getInput().getType();
  auto out = getOutput().getType();
  if (failed(verifyCompatibleShape(in, out)))
    return emitOpError("changes the shape: ")
           << in << " to " << out << " (a cast changes only the element type)";
  return success();
}

/// Converts one constant element to `to` the way amp.cast does at run time.
static std::optional<APFloat> castFloat(APFloat value, FloatType to) {
  bool losesInfo = false;
  APFloat::opStatus st =
      value.convert(to.getFloatSemantics(), APFloat::rmNearestTiesToEven, &losesInfo);
  if (st & APFloat::opInvalidOp)
    return std::nullopt;
  return value;
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  Type resultType = getOutput().getType();
  if (getInput().getType() == resultType)
    return getInput();

  // A -> B -> C with an exact first step equals A -> C.
  if (auto inner = getInput().getDefiningOp<CastOp>()) {
    Value source = inner.getInput();
    if (isExactConversion(source.getType(), inner.getOutput().getType())) {
      if (source.getType() == resultType)
        return source;
      getInputMutable().assign(source);
      return getOutput();
    }
  }

  // Constant float -> float casts, rounded to nearest even like the kernel.
  auto dense = dyn_cast_if_present<DenseFPElementsAttr>(adaptor.getInput());
  auto toFloat = dyn_cast<FloatType>(getElementTypeOrSelf(resultType));
  auto resultTensor = dyn_cast<RankedTensorType>(resultType);
  if (!dense || !toFloat || !resultTensor || !resultTensor.hasStaticShape())
    return {};
  bool ok = true;
  auto converted = dense.mapValues(toFloat, [&](const APFloat &v) {
    std::optional<APFloat> c = castFloat(v, toFloat);
    if (!c) {
      ok = false;
      return APInt::getZero(toFloat.getWidth());
    }
    return c->bitcastToAPInt();
  });
  if (!ok || converted.getType() != resultType)
    return {};
  return converted;
}
