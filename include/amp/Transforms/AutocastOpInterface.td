//===- AutocastOpInterface.td - autocast on any dialect ----*- tablegen -*-===//
//
// What amp-autocast needs to know about an op of another dialect (linalg,
// tensor, TOSA, a user's own): the name the policy knows it by, which
// operands may read the target type, which hold the accumulation, and how to
// rebuild the op so it reads them. Dialects that do not know amp-mlir get it
// as external models (registerAutocastExternalModels); an op without one is
// left as it is, and the report says so.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_TRANSFORMS_AUTOCASTOPINTERFACE_TD
#define AMP_TRANSFORMS_AUTOCASTOPINTERFACE_TD

include "mlir/IR/OpBase.td"

def AMP_AutocastOpInterface : OpInterface<"AutocastOpInterface"> {
  let cppNamespace = "::mlir::amp";
  let description = [{
    An op amp-autocast can classify and, for the `lower` class, rebuild with
    low-precision inputs. The pass looks the op up in the policy by
    `getAutocastPolicyName()` (an op name such as `linalg.matmul`, or a
    refinement such as `linalg.generic.contraction`), casts the operands
    `getAutocastInputs()` lists to the target type (once per value and type)
    and calls `autocastLower`, which makes the op read them while its
    accumulators and results keep their f32 types (or, where the op cannot
    produce f32 from low inputs, gives its results the target type: the pass
    then casts them back for their users).
  }];
  let methods = [
    InterfaceMethod<"The name the policy file knows this op by.",
      "std::string", "getAutocastPolicyName">,
    InterfaceMethod<[{
        Whether `autocastLower` can rebuild this op to read the target type
        (false for ops whose only form computes in their operands' type).
      }],
      "bool", "canAutocastLower">,
    InterfaceMethod<[{
        Operand indices that read the target type when the op is lowered (a
        product's inputs, a convolution's input, filter and bias); the rest
        (accumulators, zero points, shapes) keep their types.
      }],
      "::llvm::SmallVector<unsigned>", "getAutocastInputs">,
    InterfaceMethod<[{
        Rebuilds the op in place so that it reads `low` at `getAutocastInputs()`
        (already cast by the pass through `castTo`); returns false when a
        result's type changed (the pass casts those back for the users).
      }],
      "::llvm::FailureOr<bool>", "autocastLower",
      (ins "::mlir::OpBuilder &":$b, "::mlir::Type":$low,
           "::llvm::function_ref<::mlir::Value(::mlir::Value, ::mlir::Type)>":$castTo)>,
    InterfaceMethod<[{
        Builds a cast of the tensor `v` to element type `elt` in this op's
        dialect (linalg.generic of arith.truncf / extf, tosa.cast).
      }],
      "::mlir::Value", "buildAutocastCast",
      (ins "::mlir::OpBuilder &":$b, "::mlir::Location":$loc, "::mlir::Value":$v,
           "::mlir::Type":$elt)>,
    InterfaceMethod<[{
        Whether the op only moves data (a reshape, transpose, broadcast): a
        cast of its result is then made a cast of its source, moved through
        it, so the move runs in the narrower type and a weight is cast once.
      }],
      "bool", "isAutocastDataMovement", (ins), [{}],
      /*defaultImplementation=*/[{ return false; }]>,
    InterfaceMethod<[{
        For a data-movement op: a copy of it, built after it, that reads
        `source` (its moved operand, cast to another element type) and moves
        it in that type; returns the copy's result.
      }],
      "::mlir::FailureOr<::mlir::Value>", "rebuildAutocastDataMovement",
      (ins "::mlir::OpBuilder &":$b, "::mlir::Value":$source), [{}],
      /*defaultImplementation=*/[{ return ::mlir::failure(); }]>,
    InterfaceMethod<"For a data-movement op: the operand index it moves.",
      "unsigned", "getAutocastMovedOperand", (ins), [{}],
      /*defaultImplementation=*/[{ return 0; }]>,
  ];
}

#endif // AMP_TRANSFORMS_AUTOCASTOPINTERFACE_TD
