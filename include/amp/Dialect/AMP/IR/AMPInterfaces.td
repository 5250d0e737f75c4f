//===- AMPInterfaces.td - amp op interfaces ----------------*- tablegen -*-===//

#ifndef AMP_DIALECT_AMP_IR_AMPINTERFACES_TD
#define AMP_DIALECT_AMP_IR_AMPINTERFACES_TD

include "mlir/IR/OpBase.td"

def AMP_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::mlir::amp";
  let description = [{
    An op that states its own reverse-mode derivative: amp-autodiff asks each
    op on the path from the parameters to the loss for the gradients of its
    operands, given those of its results. A new op brings its rule with it.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds the gradients of the operands at the builder's insertion point.
        `resultGrads[i]` is null when result i does not reach the loss.
        `operandGrads` receives one value per operand, null where the operand
        has no gradient (integers, indices, shapes). Fails with an error at
        the op for a case the rule does not cover.
      }],
      "::llvm::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$b, "::mlir::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

def AMP_UnaryFunctionOpInterface : OpInterface<"UnaryFunctionOpInterface"> {
  let cppNamespace = "::mlir::amp";
  let description = [{
    An element-wise op that computes one of the runtime's unary functions
    (UnaryKind, with its alpha and beta): the one place that maps the op to
    the function, read by the runtime lowering, the linalg lowering and the
    gradient rule. Ops state it in ODS (AMP_UnaryFunctionOp).
  }];
  let methods = [
    InterfaceMethod<"The function, its alpha and its beta (where it has one).",
      "::mlir::amp::UnaryFunction", "getUnaryFunction">
  ];
}

#endif // AMP_DIALECT_AMP_IR_AMPINTERFACES_TD
