// consumer MODEL.onnx PIPELINE (passes on the module, e.g. "amp-autocast{target=bf16}"): imports an
// ONNX file with AMP-MLIR's importer, runs a pass pipeline of its passes (registered by name, as an
// embedding compiler would) and prints the module; then asks the runtime
// for a context. Built against the installed package only.
#include "amp/Dialect/AMP/IR/AMPDialect.h"
#include "amp/Target/ONNX/ImportONNX.h"
#include "amp/Transforms/Passes.h"
#include "amprt/amprt.h"

#include "mlir/IR/MLIRContext.h"
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
  mlir::amp::registerAMPPasses();
  mlir::MLIRContext ctx(registry);
  auto module = mlir::amp::importONNXFile(argv[1], &ctx);
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
