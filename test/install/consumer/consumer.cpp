// consumer MODEL.onnx|MODEL.mlir PIPELINE (passes on the module, e.g. "amp-autocast{target=bf16}"):
// imports an ONNX file with AMP-MLIR's importer, or parses upstream MLIR
// (linalg on tensors, TOSA) as another ML compiler holds it, runs a pass
// pipeline of AMP-MLIR's passes (registered by name, as an embedding
// compiler would) and prints the module; then asks the runtime for a
// context. Built against the installed package only.
#include "amp/Dialect/AMP/IR/AMPDialect.h"
#include "amp/Target/ONNX/ImportONNX.h"
#include "amp/Transforms/AutocastOpInterface.h"
#include "amp/Transforms/Passes.h"
#include "amprt/amprt.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    llvm::errs() << "usage: consumer MODEL.onnx PIPELINE\n";
    return 2;
  }
  mlir::DialectRegistry registry;
  mlir::amp::registerONNXImportDialects(registry);
  // An embedding compiler's own dialects, and amp-autocast's models for them.
  registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect, mlir::linalg::LinalgDialect,
                  mlir::math::MathDialect, mlir::tensor::TensorDialect, mlir::tosa::TosaDialect>();
  mlir::amp::registerAutocastExternalModels(registry);
  mlir::amp::registerAMPPasses();
  mlir::MLIRContext ctx(registry);
  llvm::StringRef path(argv[1]);
  mlir::OwningOpRef<mlir::ModuleOp> module = path.ends_with(".mlir")
                                                 ? mlir::parseSourceFile<mlir::ModuleOp>(path, &ctx)
                                                 : mlir::amp::importONNXFile(argv[1], &ctx);
  if (!module)
    return 1;
  mlir::PassManager pm(&ctx);
  if (mlir::failed(mlir::parsePassPipeline(argv[2], pm, llvm::errs())) ||
      mlir::failed(pm.run(*module)))
    return 1;
  module->print(llvm::outs());
  amprt_context *rt = nullptr;
  if (amprt_context_create("cpu", &rt) != AMPRT_OK) {
    llvm::errs() << "amprt_context_create: " << amprt_last_error() << "\n";
    return 1;
  }
  amprt_context_destroy(rt);
  llvm::outs() << "runtime: cpu context ok\n";
  return 0;
}
