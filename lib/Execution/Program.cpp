//===- Program.cpp - compiling a model for the runtime -------------------===//

#include "amp/Execution/Program.h"

#include "amp/Conversion/Passes.h"
#include "amp/Target/ONNX/ImportONNX.h"
#include "amp/Transforms/Passes.h"

#include "mlir/Parser/Parser.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/Pass/PassManager.h"

#include <cstdio>

using namespace mlir;
using namespace mlir::amp;

OwningOpRef<ModuleOp>
mlir::amp::loadModelFile(llvm::StringRef path, MLIRContext *ctx,
                         const std::map<std::string, std::string> &constInputs,
                         const std::vector<std::string> &freeze) {
  if (path.ends_with(".mlir")) {
    if (!constInputs.empty() || !freeze.empty()) {
      emitError(UnknownLoc::get(ctx)) << (constInputs.empty() ? "--freeze" : "--const-input")
                                      << " applies to .onnx models only";
      return nullptr;
    }
    return parseSourceFile<ModuleOp>(path, ctx);
  }
  ONNXImportOptions opts;
  opts.constantInputs = constInputs;
  opts.frozen.assign(freeze.begin(), freeze.end());
  return importONNXFile(path, ctx, opts);
}

FailureOr<amprt_dtype> mlir::amp::runtimeDType(Type t) {
  auto code = runtimeDTypeCode(t);
  if (failed(code))
    return failure();
  return static_cast<amprt_dtype>(*code);
}

static FailureOr<TensorSlot> slotOf(func::FuncOp f, Type t, const std::string &what) {
  TensorSlot s;
  s.type = dyn_cast<RankedTensorType>(t);
  if (!s.type || !s.type.hasStaticShape())
    return LogicalResult(f.emitError() << what << " is " << t
                                       << ", not a statically shaped tensor (specialise "
                                          "the model's shapes)");
  auto dt = runtimeDType(s.type.getElementType());
  if (failed(dt))
    return LogicalResult(f.emitError() << what << ": element type " << s.type.getElementType()
                                       << " is not supported by the runtime");
  s.dtype = *dt;
  uint64_t n = 1;
  for (int64_t d : s.type.getShape())
    if (__builtin_mul_overflow(n, uint64_t(d), &n))
      n = UINT64_MAX;
  if (n == UINT64_MAX || __builtin_mul_overflow(n, uint64_t(amprt_dtype_size(s.dtype)), &s.bytes) ||
      s.bytes > uint64_t(INT64_MAX))
    return LogicalResult(f.emitError()
                         << what << " (" << t << ") is too large: its size in bytes overflows");
  return s;
}

std::string mlir::amp::bytesText(uint64_t bytes) {
  const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0)
    snprintf(buf, sizeof buf, "%llu bytes", (unsigned long long)bytes);
  else
    snprintf(buf, sizeof buf, "%llu bytes (%.1f %s)", (unsigned long long)bytes, v, unit[u]);
  return buf;
}

std::optional<std::string> mlir::amp::exceedsHostMemory(const TensorSlot &s, uint64_t already,
                                                        llvm::StringRef what) {
  uint64_t mem = amprt_host_available_bytes();
  if (s.bytes <= mem && already <= mem - s.bytes)
    return std::nullopt;
  std::string type;
  llvm::raw_string_ostream os(type);
  os << s.type;
  std::string msg = what.str() + " (" + type + ") needs " + bytesText(s.bytes);
  if (already)
    msg += " on top of " + bytesText(already) + " for the tensors before it";
  return msg + ", more than this machine's available memory (" + bytesText(mem) + ")";
}

FailureOr<ProgramSignature> mlir::amp::signatureOf(func::FuncOp f) {
  ProgramSignature sig;
  for (BlockArgument a : f.getArguments()) {
    unsigned i = a.getArgNumber();
    auto s = slotOf(f, a.getType(), "argument " + std::to_string(i));
    if (failed(s))
      return failure();
    auto p = f.getArgAttrOfType<StringAttr>(i, attrname::kParam);
    if (!p)
      p = f.getArgAttrOfType<StringAttr>(i, attrname::kOptState);
    if (p) {
      s->isParam = true;
      s->name = p.getValue().str();
      auto init = f.getArgAttrOfType<ElementsAttr>(i, attrname::kInit);
      if (!init)
        return LogicalResult(f.emitError()
                             << "parameter '" << s->name << "' has no initial value (amp.init)");
      if (auto big = exceedsHostMemory(*s, 0, "parameter '" + s->name + "'"))
        return LogicalResult(f.emitError() << *big);
      int64_t n = s->type.getNumElements();
      size_t es = amprt_dtype_size(s->dtype);
      if (auto dense = dyn_cast<DenseElementsAttr>(init)) {
        if (s->dtype == AMPRT_I1) {
          for (bool v : dense.getValues<bool>())
            s->init.push_back(v);
        } else if (dense.isSplat()) {
          ArrayRef<char> one = dense.getRawData();
          for (int64_t k = 0; k < n; ++k)
            s->init.insert(s->init.end(), one.begin(), one.begin() + es);
        } else {
          s->init.assign(dense.getRawData().begin(), dense.getRawData().end());
        }
      } else if (auto res = dyn_cast<DenseResourceElementsAttr>(init)) {
        AsmResourceBlob *blob = res.getRawHandle().getBlob();
        if (!blob)
          return LogicalResult(f.emitError() << "parameter '" << s->name
                                             << "': its data is not available "
                                                "(elided resource?)");
        s->init.assign(blob->getData().begin(), blob->getData().end());
      }
      if (s->init.size() != (size_t)n * es)
        return LogicalResult(f.emitError()
                             << "parameter '" << s->name << "': initial value has the wrong size");
    } else {
      auto in = f.getArgAttrOfType<StringAttr>(i, attrname::kInput);
      s->name = in ? in.getValue().str() : "arg" + std::to_string(i);
    }
    sig.args.push_back(std::move(*s));
  }
  for (auto [i, t] : llvm::enumerate(f.getResultTypes())) {
    auto s = slotOf(f, t, "result " + std::to_string(i));
    if (failed(s))
      return failure();
    auto out = f.getResultAttrOfType<StringAttr>(i, attrname::kOutput);
    auto grad = f.getResultAttrOfType<StringAttr>(i, attrname::kGrad);
    auto upd = f.getResultAttrOfType<StringAttr>(i, attrname::kUpdates);
    s->name = out    ? out.getValue().str()
              : grad ? "grad:" + grad.getValue().str()
              : upd  ? "new:" + upd.getValue().str()
                     : "result" + std::to_string(i);
    sig.results.push_back(std::move(*s));
  }
  return sig;
}

LogicalResult mlir::amp::prepareForRuntime(ModuleOp module, const PrecisionOptions &p) {
  PassManager pm(module.getContext());
  std::string error;
  if (failed(buildRuntimePrepPipeline(pm, p, error)))
    return module.emitError(error);
  return pm.run(module);
}

FailureOr<int64_t> mlir::amp::lowerForRuntime(ModuleOp module, llvm::StringRef name,
                                              const PrecisionOptions &p, bool prepared,
                                              llvm::StringRef memoryReport) {
  PassManager pm(module.getContext());
  std::string error;
  if (!prepared && failed(buildRuntimePrepPipeline(pm, p, error)))
    return LogicalResult(module.emitError(error));
  buildRuntimeLoweringPipeline(pm, memoryReport);
  if (failed(pm.run(module)))
    return failure();
  auto fn = module.lookupSymbol<LLVM::LLVMFuncOp>(name);
  if (!fn)
    return LogicalResult(module.emitError("no function '") << name << "' after lowering");
  return fn->getAttrOfType<IntegerAttr>(attrname::kArenaBytes).getInt();
}

LogicalResult mlir::amp::lowerToLinalg(ModuleOp module, const PrecisionOptions &p) {
  PassManager pm(module.getContext());
  std::string error;
  if (failed(buildLowerToLinalgPipeline(pm, p, error)))
    return module.emitError(error);
  return pm.run(module);
}

LogicalResult mlir::amp::buildTrainingStep(ModuleOp module, const TrainingOptions &o) {
  PassManager pm(module.getContext());
  buildTrainStepPipeline(pm, o);
  return pm.run(module);
}
