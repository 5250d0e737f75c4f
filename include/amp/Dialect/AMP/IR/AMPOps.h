//===- AMPOps.h - amp dialect operations ------------------------*- C++ -*-===//

#ifndef AMP_DIALECT_AMP_IR_AMPOPS_H
#define AMP_DIALECT_AMP_IR_AMPOPS_H

#include "amp/Dialect/AMP/IR/AMPDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <optional>

namespace mlir::amp {

/// Result types are compatible with the inferred ones when element types are
/// equal and shapes agree wherever both are static.
/// Declared result types match the inferred ones up to static / dynamic
/// dims; with `f32Accumulators` a float result inferred f16 / bf16 may also
/// be declared f32 (the op's f32 accumulator, unrounded).
bool areCompatibleResultTypes(TypeRange inferred, TypeRange declared, bool f32Accumulators = false);

/// True when every value of type `from` is exactly representable in `to`
/// (f16 -> f32, bf16 -> f32, i8 -> i32, i1 -> anything, ...). Element types or
/// tensors of them.
bool isExactConversion(Type from, Type to);

/// Width class of a float element type, for the autocast rules: f16 and bf16
/// are "low", f32 is "full".
bool isLowPrecisionFloat(Type elementType);

/// Creates the amp op `name` at the builder's point with its result types
/// from the op's shape rules. On a rule violation the op is erased, the
/// rule's error is emitted at `loc`, and null is returned.
Operation *createWithInferredTypes(OpBuilder &b, Location loc, StringRef name, ValueRange operands,
                                   ArrayRef<NamedAttribute> attrs, unsigned numResults);

} // namespace mlir::amp

#include "amp/Dialect/AMP/IR/AMPEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "amp/Dialect/AMP/IR/AMPAttrs.h.inc"

namespace mlir::amp {

/// A unary op's runtime function (UnaryFunctionOpInterface): the kind, its
/// alpha and, for the functions with two parameters (selu, hard_sigmoid,
/// clip), its beta.
struct UnaryFunction {
  UnaryKind kind;
  float alpha = 0.0f;
  std::optional<float> beta;
};

} // namespace mlir::amp

#include "amp/Dialect/AMP/IR/AMPInterfaces.h.inc"

namespace mlir::amp {
class UnaryFunctionOpInterface;
/// The gradient of a UnaryFunctionOpInterface op: amp.unary_grad of its
/// function (AMPGradients.cpp).
LogicalResult unaryFunctionGradients(OpBuilder &b, UnaryFunctionOpInterface op,
                                     ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads);
} // namespace mlir::amp

#define GET_OP_CLASSES
#include "amp/Dialect/AMP/IR/AMPOps.h.inc"

#endif // AMP_DIALECT_AMP_IR_AMPOPS_H
