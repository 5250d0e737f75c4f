//===- fuzz-mlir-parse.cpp - libFuzzer: .mlir text through our verifiers --===//
//
// What amp-opt reads: the MLIR parser with the amp, arith and func dialects,
// then the verifiers (each op's own, the shape rules' inferred types) on
// every op that parsed.
//
//===----------------------------------------------------------------------===//

#include "amp/Dialect/AMP/IR/AMPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static mlir::DialectRegistry *registry = [] {
    auto *r = new mlir::DialectRegistry();
    r->insert<mlir::amp::AMPDialect, mlir::arith::ArithDialect, mlir::func::FuncDialect>();
    return r;
  }();
  mlir::MLIRContext ctx(*registry, mlir::MLIRContext::Threading::DISABLED);
  ctx.allowUnregisteredDialects(false);
  mlir::ScopedDiagnosticHandler drop(&ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  mlir::ParserConfig config(&ctx, /*verifyAfterParse=*/true);
  // MLIR's lexer reads up to a NUL after the text (what a MemoryBuffer of a
  // file, as amp-opt reads it, has): the fuzzer's bytes are not terminated,
  // so they are copied into a string that is.
  std::string text(reinterpret_cast<const char *>(data), size);
  (void)mlir::parseSourceString<mlir::ModuleOp>(text, config, "fuzz.mlir");
  return 0;
}
