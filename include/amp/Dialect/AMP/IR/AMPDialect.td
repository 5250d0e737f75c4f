//===- AMPDialect.td - the amp dialect ---------------------*- tablegen -*-===//
//
// The amp dialect: ONNX-level tensor ops in value semantics, the element-type
// changes that automatic mixed precision inserts, and (in later passes) the
// loss-scaling and optimizer ops of a training step.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_DIALECT_AMP_IR_AMPDIALECT_TD
#define AMP_DIALECT_AMP_IR_AMPDIALECT_TD

include "mlir/IR/OpBase.td"

def AMP_Dialect : Dialect {
  let name = "amp";
  let cppNamespace = "::mlir::amp";
  let summary = "Automatic mixed precision training ops";
  let description = [{
    Tensor ops with ONNX semantics (broadcasting, attributes and shape rules of
    the ONNX operator of the same name, as of opset 17), normalised so that
    every shape-determining value is an attribute: ONNX inputs such as
    Reshape's `shape` or ReduceSum's `axes` become attributes in the importer.

    Matrix products and convolutions on f16 / bf16 operands accumulate in f32
    and round the result once (round to nearest even); their bias (Gemm's C,
    a Conv's B) may be f32, added to the accumulator unrounded, and a
    product's, its gradient's or a sum's result may be declared f32 where
    the operands are f16 / bf16: the f32 accumulator, not rounded (what
    autocast writes where only f32 reads a result). Apart from these and
    the storage-class normalisations (f16 / bf16 activations with f32
    statistics), `amp.cast` is the only op that changes an element type.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
  let hasConstantMaterializer = 1;
  let useDefaultAttributePrinterParser = 1;
}

#endif // AMP_DIALECT_AMP_IR_AMPDIALECT_TD
