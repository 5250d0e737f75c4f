//===- fuzz-onnx-import.cpp - libFuzzer: the ONNX importer ----------------===//
//
// One input is one ModelProto in memory: the whole import (protobuf parse,
// initializers, every node's handler, shape inference, constant folding, the
// training-info graph), then the verifier on what it built. Errors are the
// expected outcome of most inputs; they are dropped.
//
//===----------------------------------------------------------------------===//

#include "amp/Target/ONNX/ImportONNX.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static mlir::DialectRegistry *registry = [] {
    auto *r = new mlir::DialectRegistry();
    mlir::amp::registerONNXImportDialects(*r);
    return r;
  }();
  // A fresh context per input: types and attributes are uniqued in it for
  // its lifetime, so a shared one would grow without bound.
  mlir::MLIRContext ctx(*registry, mlir::MLIRContext::Threading::DISABLED);
  mlir::ScopedDiagnosticHandler drop(&ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  // A folder that does not exist: external data is refused, never read.
  llvm::MemoryBufferRef buf(llvm::StringRef(reinterpret_cast<const char *>(data), size),
                            "/nonexistent-amp-fuzz/model.onnx");
  mlir::OwningOpRef<mlir::ModuleOp> m = mlir::amp::importONNXBuffer(buf, &ctx);
  if (m)
    (void)mlir::verify(*m);
  return 0;
}
