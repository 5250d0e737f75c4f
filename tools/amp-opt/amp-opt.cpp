//===- amp-opt.cpp - the AMP-MLIR optimizer driver -----------------------===//
//
// mlir-opt with the amp dialect and passes, the upstream dialects that amp
// programs contain (func, arith, tensor, scf), the LLVM dialect the lowering
// produces, and the ones other ML compilers hand amp-autocast (linalg on
// tensors, math, tosa), with their autocast models.
//
//===----------------------------------------------------------------------===//

#include "amp/Conversion/Passes.h"
#include "amp/Dialect/AMP/IR/AMPDialect.h"
#include "amp/Pipelines/Pipelines.h"
#include "amp/Transforms/AutocastOpInterface.h"
#include "amp/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::amp::AMPDialect, mlir::arith::ArithDialect, mlir::func::FuncDialect,
                  mlir::LLVM::LLVMDialect, mlir::scf::SCFDialect, mlir::tensor::TensorDialect,
                  mlir::linalg::LinalgDialect, mlir::math::MathDialect, mlir::tosa::TosaDialect>();
  mlir::amp::registerAutocastExternalModels(registry);
  mlir::registerTransformsPasses();
  mlir::amp::registerAMPPasses();
  mlir::amp::registerAMPConversionPasses();
  mlir::amp::registerAMPPipelines();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "AMP-MLIR optimizer driver\n", registry));
}
