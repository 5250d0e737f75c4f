//===- amp-compile.cpp - a model to a native program ---------------------===//
//
//   amp-compile model.onnx|model.mlir -o prog [--precision fp32|fp16|bf16]
//               [--policy FILE] [--block-list NODES]
//               [--const-input name=file.pb] [--func NAME] [--device cpu|cuda]
//
// Writes `prog` (an executable: the model compiled to an object file, linked
// with libamprt and its main()) and `prog.weights` (the parameters and the
// program's signature, safetensors). The pair runs anywhere the runtime's
// shared dependencies (oneDNN, zlib) are installed, without the compiler:
//
//   ./prog --inputs in.npz --outputs out.npz
//
// With --optimizer sgd|adam|adamw (and the training options below) the
// program is a training step instead, run in a loop:
//
//   amp-compile model.onnx -o train --precision fp16 --optimizer sgd --lr 0.01
//   ./train --data data.npz --steps 200 --metrics m.jsonl [--checkpoint-dir D]
//           [--resume]
//
// --freeze NAMES imports initializers as constants (never trained),
// --frozen NAME keeps a parameter out of the gradients, --padding-rows
// NAME:ROW gives an embedding lookup's row no gradient (padding_idx).
//
// onnxruntime-training artifacts train the same way:
//
//   amp-compile artifacts/ -o train --lr 0.01   (training_model.onnx, checkpoint,
//                                               optimizer_model.onnx)
//
// --device cuda links the CUDA runtime too (libamprt_cuda, cudart; cuBLASLt
// is opened when a CUDA device is used): the
// program then runs on the GPU by default (--device cpu still runs it on the
// CPU); the weights file records the device (amp.device).
//
// Nothing is left behind on failure.
//
//===----------------------------------------------------------------------===//

#include "amp/Dialect/AMP/IR/AMPDialect.h"
#include "amp/Execution/Program.h"
#include "amp/Pipelines/PipelineFlags.h"
#include "amp/Target/ONNX/ImportONNX.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

#include <set>

#ifndef AMP_RUNTIME_LIB_DIR
#error "AMP_RUNTIME_LIB_DIR must name the folder of libamprt.a"
#endif

namespace cl = llvm::cl;
using namespace mlir;

static cl::OptionCategory category("amp-compile options");
static cl::opt<std::string> modelFile(cl::Positional, cl::desc("<model.onnx|model.mlir>"),
                                      cl::cat(category));
static cl::opt<std::string> outputFile("o", cl::desc("The program to write"),
                                       cl::value_desc("prog"), cl::cat(category));
// --precision, --policy, --block-list, --f32-accumulators, --keep-weight-casts.
static amp::PrecisionFlags precisionFlags(category);
static cl::list<std::string> constInputs("const-input",
                                         cl::desc("Bind a graph input to a TensorProto (.pb)"),
                                         cl::value_desc("name=file.pb"), cl::cat(category));
static cl::opt<std::string> deviceName("device",
                                       cl::desc("Where the program runs: cpu, or cuda (links "
                                                "the CUDA runtime; default cpu)"),
                                       cl::init("cpu"), cl::cat(category));
static cl::opt<std::string> emitKind(
    "emit",
    cl::desc("What to write: program (a native executable, the default) or linalg (the step "
             "as MLIR text in linalg on tensors, with @<func>_init giving the initial state, "
             "for IREE or another MLIR compiler)"),
    cl::init("program"), cl::cat(category));
static cl::opt<std::string> funcName("func", cl::desc("Function to compile (default: main)"),
                                     cl::init("main"), cl::cat(category));

// The training front end: with --optimizer the model's loss is differentiated
// and the program is one training step (amp-autodiff, amp-optimizer,
// amp-loss-scaling), which `./prog --data d.npz --steps N` runs in a loop.
static cl::OptionCategory trainCat("amp-compile training options (with --optimizer)");
// --optimizer, --lr, ..., --loss-scaling, ... (PipelineOptions.td, Passes.td).
static amp::TrainingFlags trainingFlags(trainCat);
static cl::opt<std::string> ortCheckpoint(
    "ort-checkpoint",
    cl::desc("onnxruntime-training artifacts: the model is training_model.onnx and this its "
             "checkpoint (a folder given as the model holds training_model.onnx, checkpoint "
             "and optimizer_model.onnx)"),
    cl::value_desc("checkpoint"), cl::cat(trainCat));
static cl::opt<std::string> ortOptimizer(
    "ort-optimizer",
    cl::desc("The artifacts' optimizer_model.onnx: the optimizer and its hyper-parameters"),
    cl::value_desc("optimizer_model.onnx"), cl::cat(trainCat));
static cl::list<std::string> freezeInits(
    "freeze",
    cl::desc("Import these float initializers as constants, not parameters (as amp-translate "
             "--freeze: never trained, not in the checkpoint)"),
    cl::CommaSeparated, cl::value_desc("name,..."), cl::cat(trainCat));
static cl::alias paddingRowAlias("padding-row", cl::desc("Alias for --padding-rows"),
                                 cl::aliasopt(trainingFlags.paddingRows), cl::cat(trainCat));
static cl::opt<bool> describeFlags(
    "describe-flags",
    cl::desc("Print the flags as JSON (flag, type, default, help) and exit: what the Python "
             "API checks its keywords against"),
    cl::cat(category));

static cl::opt<std::string> memoryReport(
    "memory-report",
    cl::desc("Write the memory plan here as JSON: the predicted peak, by category (parameters, "
             "low-precision copies, optimizer state, inputs, the arena and what is live at its "
             "peak, kernel workspace, the runtime), per function (docs/runtime.md, Memory)"),
    cl::value_desc("file.json"), cl::init(""), cl::cat(category));

static cl::opt<std::string> runtimeDir(
    "runtime-dir",
    cl::desc("Folder holding libamprt.a and libamprt_runner.a (default: ../lib next to this "
             "amp-compile, as in the build and the install tree)"),
    cl::init(""), cl::cat(category));

namespace {

std::vector<std::string> temporaries;

[[noreturn]] void die(const llvm::Twine &msg) {
  for (const std::string &t : temporaries)
    llvm::sys::fs::remove(t);
  llvm::errs() << "amp-compile: error: " << msg << "\n";
  exit(1);
}

std::string fmtG(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string signatureLine(const char *kind, const amp::TensorSlot &s) {
  if (s.name.find_first_of("\t\n") != std::string::npos)
    die("name '" + s.name + "' holds a tab or newline");
  std::string dims;
  for (int64_t d : s.type.getShape())
    dims += (dims.empty() ? "" : ",") + std::to_string(d);
  return std::string(kind) + "\t" + s.name + "\t" + amprt_dtype_name(s.dtype) + "\t" + dims + "\n";
}

/// A checkpoint saved with ORT's optimizer state: the step count and the
/// moments become the initial values of amp-optimizer's state arguments.
void restoreORTOptimizerState(func::FuncOp f, const amp::ORTOptimizerState &st,
                              const std::string &ckPath) {
  for (BlockArgument a : f.getArguments()) {
    unsigned i = a.getArgNumber();
    auto name = f.getArgAttrOfType<StringAttr>(i, mlir::amp::attrname::kOptState);
    if (!name)
      continue;
    auto type = cast<RankedTensorType>(a.getType());
    llvm::StringRef n = name.getValue();
    if (n == "step") {
      f.setArgAttr(i, mlir::amp::attrname::kInit,
                   DenseElementsAttr::get(type, llvm::APInt(64, st.step)));
      continue;
    }
    auto [p, kind] = n.rsplit('.');
    const char *moment = kind == "exp_avg"      ? "momentum0"
                         : kind == "exp_avg_sq" ? "momentum1"
                                                : nullptr;
    if (!moment)
      continue;
    auto pm = st.moments.find(p.str());
    auto m = pm == st.moments.end() ? decltype(pm->second.end())() : pm->second.find(moment);
    if (pm == st.moments.end() || m == pm->second.end())
      die("'" + ckPath + "' holds optimizer state but no " + moment + " for '" + p + "'");
    if ((int64_t)m->second.size() != type.getNumElements() * 4)
      die("'" + ckPath + "': " + moment + " of '" + p + "' has the wrong size");
    f.setArgAttr(i, mlir::amp::attrname::kInit,
                 DenseElementsAttr::getFromRawBuffer(
                     type, llvm::ArrayRef<char>(m->second.data(), m->second.size())));
  }
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  cl::HideUnrelatedOptions({&category, &trainCat});
  cl::ParseCommandLineOptions(argc, argv, "AMP-MLIR ahead-of-time compiler\n");
  if (describeFlags) {
    llvm::json::Array rows;
    precisionFlags.describe(rows);
    trainingFlags.describe(rows);
    // The flags of amp-compile itself (the model and -o are positional to the API).
    for (const cl::Option *o : std::initializer_list<const cl::Option *>{
             std::addressof(constInputs), &deviceName, &emitKind, &funcName, &ortCheckpoint,
             &ortOptimizer, std::addressof(freezeInits), &memoryReport, &runtimeDir})
      rows.push_back(amp::describeFlag(*o));
    llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(rows))) << "\n";
    return 0;
  }
  if (modelFile.empty())
    die("no model given (amp-compile model.onnx|model.mlir -o prog; --help lists the flags)");
  if (outputFile.empty())
    die("no program to write: give -o prog");
  const amp::TrainingFlags &T = trainingFlags;
  const std::string precision = precisionFlags.precision;
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  if (deviceName != "cpu" && deviceName != "cuda")
    die("--device must be cpu or cuda, got '" + deviceName + "'");
  if (emitKind != "program" && emitKind != "linalg")
    die("--emit must be program or linalg, got '" + emitKind + "'");
  if (emitKind == "linalg" && !memoryReport.empty())
    die("--memory-report applies to --emit program (the linalg step is planned by the compiler "
        "that takes it)");
  if (emitKind == "linalg" && precisionFlags.keepWeightCasts.getNumOccurrences())
    die("--keep-weight-casts applies to --emit program (the linalg step keeps its casts)");
  if (emitKind == "linalg" && deviceName.getNumOccurrences())
    die("--device applies to --emit program (the linalg step's compiler picks the device)");
  if (runtimeDir.empty()) {
    // ../lib beside the executable (build/bin -> build/lib, <prefix>/bin ->
    // <prefix>/lib), else the build tree this amp-compile came from.
    static int anchor;
    std::string exe = llvm::sys::fs::getMainExecutable(argv[0], &anchor);
    llvm::SmallString<256> lib(llvm::sys::path::parent_path(llvm::sys::path::parent_path(exe)));
    llvm::sys::path::append(lib, "lib");
    llvm::SmallString<256> probe(lib);
    llvm::sys::path::append(probe, "libamprt.a");
    runtimeDir = !exe.empty() && llvm::sys::fs::exists(probe) ? std::string(lib)
                                                              : std::string(AMP_RUNTIME_LIB_DIR);
  }
#ifndef AMP_CUDA_LIB_DIR
  if (deviceName == "cuda")
    die("--device cuda: this amp-compile was built without the CUDA toolkit (no CUDA runtime "
        "to link)");
#endif

  DialectRegistry registry;
  amp::registerONNXImportDialects(registry);
  registry.insert<LLVM::LLVMDialect>();
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  ctx.getDiagEngine().registerHandler([](Diagnostic &d) {
    llvm::errs() << "amp-compile: "
                 << (d.getSeverity() == DiagnosticSeverity::Error ? "error" : "note") << ": "
                 << d.str() << "\n";
    return success();
  });

  std::map<std::string, std::string> bound;
  for (const std::string &kv : constInputs) {
    auto [name, file] = llvm::StringRef(kv).split('=');
    if (name.empty() || file.empty())
      die("--const-input needs name=file.pb, got '" + kv + "'");
    bound[name.str()] = file.str();
  }
  // onnxruntime-training artifacts: a training model whose gradients are
  // already in the graph, its checkpoint and its optimizer model.
  std::string optName = T.optimizer.getNumOccurrences() ? std::string(T.optimizer) : "";
  bool ort = !ortCheckpoint.empty() || llvm::sys::fs::is_directory(modelFile);
  std::string ckPath = ortCheckpoint, optPath = ortOptimizer, trainingModel = modelFile;
  amp::ORTOptimizerState ortState;
  amp::ORTOptimizerSpec ortSpec;
  if (!ortOptimizer.empty() && !ort)
    die("--ort-optimizer goes with --ort-checkpoint (or a folder of artifacts as the model)");
  if (ort) {
    if (llvm::sys::fs::is_directory(modelFile)) {
      auto inDir = [&](const char *name) {
        llvm::SmallString<256> p(modelFile);
        llvm::sys::path::append(p, name);
        return std::string(p);
      };
      trainingModel = inDir("training_model.onnx");
      if (ckPath.empty())
        ckPath = inDir("checkpoint");
      if (optPath.empty() && llvm::sys::fs::exists(inDir("optimizer_model.onnx")))
        optPath = inDir("optimizer_model.onnx");
      for (const std::string &p : {trainingModel, ckPath})
        if (!llvm::sys::fs::exists(p))
          die("'" + modelFile + "' is a folder but has no '" + llvm::sys::path::filename(p).str() +
              "' (onnxruntime-training artifacts: training_model.onnx, checkpoint, "
              "optimizer_model.onnx)");
    }
    if (!bound.empty())
      die("--const-input does not apply to onnxruntime-training artifacts");
    if (T.lossFn.getNumOccurrences() || T.loss.getNumOccurrences() ||
        T.frozen.getNumOccurrences() || T.paddingRows.getNumOccurrences() ||
        freezeInits.getNumOccurrences())
      die("--loss, --loss-fn, --frozen, --freeze and --padding-rows do not apply to "
          "onnxruntime-training artifacts "
          "(their loss and trainable parameters are fixed by generate_artifacts)");
    if (!optPath.empty()) {
      auto spec = amp::readORTOptimizerModel(optPath, &ctx);
      if (failed(spec))
        return 1;
      ortSpec = *spec;
      if (!optName.empty() && optName != ortSpec.optimizer)
        die("--optimizer " + optName + " contradicts '" + optPath + "', which is " +
            ortSpec.optimizer);
      for (const cl::Option *o : std::initializer_list<const cl::Option *>{
               &T.momentum, &T.dampening, &T.nesterov, &T.weightDecay, &T.beta1, &T.beta2, &T.eps,
               &T.adamMode})
        if (o->getNumOccurrences())
          die("--" + o->ArgStr + ": the hyper-parameters come from '" + optPath + "'");
      optName = ortSpec.optimizer;
    } else if (optName.empty()) {
      die("onnxruntime-training artifacts without optimizer_model.onnx: give --optimizer "
          "sgd|adam|adamw (or --ort-optimizer FILE)");
    }
    auto st = amp::readORTOptimizerState(ckPath, &ctx);
    if (failed(st))
      return 1;
    ortState = *st;
    if (!funcName.getNumOccurrences())
      funcName = "train_step";
  }
  OwningOpRef<ModuleOp> module =
      ort ? amp::importORTTrainingArtifacts(trainingModel, ckPath, &ctx)
          : amp::loadModelFile(modelFile, &ctx, bound, {freezeInits.begin(), freezeInits.end()});
  if (!module)
    return 1;
  auto f = module->lookupSymbol<func::FuncOp>(funcName);
  if (!f)
    die("'" + modelFile + "' has no function '" + funcName + "'");
  // Only that function goes into the program (another one, say the model's
  // @main next to its @train_step, would otherwise define C's main()).
  for (func::FuncOp other : llvm::make_early_inc_range(module->getOps<func::FuncOp>()))
    if (other != f)
      other.erase();
  std::string training;
  if (optName.empty()) {
    // A function that is a training step already (ONNX TrainingInfoProto's
    // algorithm, or one built with amp-opt): results tied to their state.
    for (unsigned i = 0; i < f.getNumResults(); ++i)
      if (f.getResultAttr(i, mlir::amp::attrname::kUpdates))
        training = "the model's own training step '" + funcName + "', " + precision;
    for (const cl::Option *o : T.all())
      if (o->getNumOccurrences())
        die("--" + o->ArgStr + " is a training option: give --optimizer sgd|adam|adamw too");
  } else {
    if (precision != "fp32" && precision != "fp16" && precision != "bf16")
      die("--precision must be fp32, fp16 or bf16, got '" + precision + "'");
    amp::TrainingOptions t = T.get();
    if (t.lossFn.empty() && (T.lossOf.getNumOccurrences() || T.label.getNumOccurrences()))
      die("--loss-of and --label go with --loss-fn cross_entropy|nll|mse");
    if (!t.lossFn.empty() && T.loss.getNumOccurrences())
      die("--loss names an existing loss output; --loss-fn adds one: give one of them");
    t.optim.optimizer = optName;
    if (ort) {
      t.differentiate = false;
      // ORT's default learning rate, or the one the checkpoint saved.
      if (!T.lr.getNumOccurrences())
        t.optim.lr = ortState.present && ortState.learningRate > 0 ? ortState.learningRate : 0.001;
    }
    if (T.weightDecay.getNumOccurrences() && !(T.weightDecay >= 0))
      die("--weight-decay must be >= 0, got " + std::to_string(T.weightDecay));
    if (ort && !optPath.empty()) {
      t.optim.beta1 = ortSpec.beta1;
      t.optim.beta2 = ortSpec.beta2;
      t.optim.eps = ortSpec.eps;
      t.optim.weightDecay = ortSpec.weightDecay;
      t.optim.adamMode = ortSpec.adamMode;
    }
    // PyTorch's practice: GradScaler for fp16; bf16 has fp32's range.
    if (!T.lossScaling.getNumOccurrences())
      t.scaling.mode = precision == "fp16" ? "dynamic" : "none";
    amp::AMPLossScalingOptions &ls = t.scaling;
    if (ls.dataParallel) {
#ifndef AMP_MPI_LINK
      die("--data-parallel: this amp-compile was built without MPI (libopenmpi-dev)");
#endif
#ifndef AMP_HAVE_NCCL
      if (deviceName == "cuda")
        die("--data-parallel with --device cuda: this amp-compile was built without the NCCL "
            "back-end (nccl.h of the CUDA toolkit)");
#endif
      if (emitKind == "linalg")
        die("--data-parallel: the linalg form has no collectives (--emit linalg runs one "
            "process)");
    }
    if (!ls.checkInf && ls.mode != "none")
      die("--check-inf=false applies to --loss-scaling none only (loss scaling checks every "
          "step)");
    if (t.lossFn.empty() && !ort) {
      bool hasLoss = false;
      for (unsigned i = 0; i < f.getNumResults(); ++i)
        if (auto n = f.getResultAttrOfType<StringAttr>(i, mlir::amp::attrname::kOutput))
          hasLoss |= n.getValue() == t.autodiff.loss;
      if (!hasLoss)
        die("'" + modelFile + "' has no output named '" + t.autodiff.loss +
            "': name the loss output with --loss NAME, or add a loss to a forward graph with "
            "--loss-fn cross_entropy|nll|mse [--loss-of OUTPUT] [--label NAME]");
    }
    if (failed(amp::buildTrainingStep(*module, t)))
      return 1;
    if (ortState.present)
      restoreORTOptimizerState(f, ortState, ckPath);
    training = (ort ? "onnxruntime-training artifacts, " : "") + optName +
               (t.optim.adamMode == "hf" ? " (Hugging Face form)" : "") +
               " lr=" + fmtG(t.optim.lr) + ", " + precision + ", loss scaling " + ls.mode;
    if (ls.mode == "dynamic")
      training += " (init " + fmtG(ls.initScale) + ", growth interval " +
                  std::to_string(ls.growthInterval) + ")";
    else if (ls.mode == "static")
      training += " (" + fmtG(ls.initScale) + ")";
    if (ls.accumulate > 1)
      training += ", " + std::to_string(ls.accumulate) + " micro-batches per update";
    if (ls.dataParallel)
      training += ", data parallel";
  }
  if (emitKind == "linalg") {
    if (failed(amp::lowerToLinalg(*module, precisionFlags.get())))
      return 1;
    std::string tmp = outputFile + ".tmp";
    {
      std::error_code ec;
      llvm::raw_fd_ostream os(tmp, ec);
      if (ec)
        die("cannot write '" + tmp + "': " + ec.message());
      module->print(os);
      os.close();
      if (os.has_error()) {
        llvm::sys::fs::remove(tmp);
        die("cannot write '" + tmp + "'");
      }
    }
    if (std::error_code ec = llvm::sys::fs::rename(tmp, outputFile))
      die("cannot write '" + outputFile + "': " + ec.message());
    llvm::outs() << "wrote " << outputFile << " (linalg on tensors, " << precision
                 << (training.empty() ? "" : "; " + training) << ")\n";
    return 0;
  }
  // Autocast and amp-keep-weight-casts first: the signature (and the
  // weights file) includes the state arguments the latter adds.
  amp::PrecisionOptions po = precisionFlags.get();
  if (failed(amp::prepareForRuntime(*module, po)))
    return 1;
  auto sig = amp::signatureOf(f);
  if (failed(sig))
    return 1;
  auto arena = amp::lowerForRuntime(*module, funcName, po, /*prepared=*/true, memoryReport);
  if (failed(arena))
    return 1;
  auto fn = module->lookupSymbol<LLVM::LLVMFuncOp>(funcName);
  if (failed(SymbolTable::replaceAllSymbolUses(fn, StringAttr::get(&ctx, "amp_entry"), *module)))
    die("cannot rename the entry point");
  fn.setSymName("amp_entry");

  // Object code for this machine's architecture (generic CPU: the runtime
  // picks vector instructions at run time).
  llvm::LLVMContext llctx;
  auto llmod = translateModuleToLLVMIR(*module, llctx, "amp_program");
  if (!llmod)
    die("translation to LLVM IR failed");
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target)
    die("no target for " + triple.str() + ": " + err);
  llvm::TargetOptions topts;
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(triple, "generic", "", topts, llvm::Reloc::PIC_, std::nullopt,
                                  llvm::CodeGenOptLevel::Default));
  llmod->setDataLayout(tm->createDataLayout());
  llmod->setTargetTriple(triple);

  std::string obj = outputFile + ".o.tmp", prog = outputFile + ".tmp",
              weights = outputFile + ".weights.tmp";
  temporaries = {obj, prog, weights};
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(obj, ec, llvm::sys::fs::OF_None);
    if (ec)
      die("cannot write '" + obj + "': " + ec.message());
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
      die("this target cannot emit object files");
    pm.run(*llmod);
  }

  // Weights and signature.
  std::string sigText;
  std::vector<amprt_named_tensor> params;
  for (const amp::TensorSlot &s : sig->args) {
    sigText += signatureLine(s.isParam ? "param" : "input", s);
    if (s.isParam) {
      amprt_named_tensor nt;
      nt.name = s.name.c_str();
      nt.tensor = amprt_tensor_make(const_cast<char *>(s.init.data()), s.dtype, s.type.getRank(),
                                    s.type.getShape().data());
      params.push_back(nt);
    }
  }
  // State results the program writes in place (the runner then gives the
  // argument and the result one buffer).
  std::set<int64_t> inPlace;
  if (auto a = fn->getAttrOfType<DenseI64ArrayAttr>(mlir::amp::attrname::kInplaceResults))
    inPlace.insert(a.asArrayRef().begin(), a.asArrayRef().end());
  for (auto [i, s] : llvm::enumerate(sig->results))
    sigText += signatureLine(inPlace.count(i) ? "result_inplace" : "result", s);
  std::string arenaText = std::to_string(*arena);
  std::vector<amprt_metadata> meta = {{AMPRT_META_SIGNATURE, sigText.c_str()},
                                      {AMPRT_META_ARENA_BYTES, arenaText.c_str()},
                                      {AMPRT_META_PRECISION, precision.c_str()},
                                      {AMPRT_META_MODEL, modelFile.c_str()},
                                      {AMPRT_META_DEVICE, deviceName.c_str()}};
  if (!training.empty())
    meta.push_back({AMPRT_META_TRAINING, training.c_str()});
  if (trainingFlags.dataParallel)
    meta.push_back({AMPRT_META_DATA_PARALLEL, "1"});
  if (amprt_checkpoint_save(weights.c_str(), params.data(), (int32_t)params.size(), meta.data(),
                            (int32_t)meta.size()) != AMPRT_OK)
    die(amprt_last_error());

  // Link with the system's C++ driver.
#ifdef AMP_LINK_DRIVER
  llvm::ErrorOr<std::string> cxx = std::string(AMP_LINK_DRIVER);
#else
  auto cxx = llvm::sys::findProgramByName("c++");
#endif
  if (!cxx)
    die("no C++ compiler driver ('c++') on PATH to link the program");
  std::string rt = runtimeDir + "/libamprt.a", runner = runtimeDir + "/libamprt_runner.a";
  for (const std::string &lib : {rt, runner})
    if (!llvm::sys::fs::exists(lib))
      die("runtime library '" + lib + "' not found (--runtime-dir)");
  std::string errFile = outputFile + ".link.log";
  temporaries.push_back(errFile);
  std::vector<llvm::StringRef> args = {*cxx, obj, runner};
#ifdef AMP_HAVE_NCCL
  // Data parallel on CUDA: NCCL's device all-reduce over MPI's communicator
  // (reached through a weak symbol: -u pulls it in).
  std::string ncclLib = runtimeDir + "/libamprt_nccl.a";
  if (trainingFlags.dataParallel && deviceName == "cuda") {
    if (!llvm::sys::fs::exists(ncclLib))
      die("runtime library '" + ncclLib + "' not found (--runtime-dir)");
    args.push_back("-Wl,-u,amprt_nccl_comm_init");
    args.push_back(ncclLib);
  }
#endif
  std::string cudaLib = runtimeDir + "/libamprt_cuda.a";
#ifdef AMP_CUDA_LIB_DIR
  std::string cudaDir = AMP_CUDA_LIB_DIR, cudaL = "-L" + cudaDir,
              cudaRpath = "-Wl,-rpath," + cudaDir;
  if (deviceName == "cuda") {
    if (!llvm::sys::fs::exists(cudaLib))
      die("runtime library '" + cudaLib + "' not found (--runtime-dir)");
    // The CUDA backend is reached through a weak symbol: -u pulls it in.
    for (llvm::StringRef a :
         {llvm::StringRef("-Wl,-u,amprt_cuda_device_ops"), llvm::StringRef(cudaLib)})
      args.push_back(a);
  }
#endif
  std::string mpiLib = runtimeDir + "/libamprt_mpi.a";
  std::vector<std::string> mpiFlags;
#ifdef AMP_MPI_LINK
  if (trainingFlags.dataParallel) {
    if (!llvm::sys::fs::exists(mpiLib))
      die("runtime library '" + mpiLib + "' not found (--runtime-dir)");
    // The communicator is reached through a weak symbol: -u pulls it in.
    args.push_back("-Wl,-u,amprt_mpi_comm_init");
    args.push_back(mpiLib);
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(AMP_MPI_LINK).split(parts, ' ', -1, false);
    for (llvm::StringRef p : parts)
      mpiFlags.push_back(p.str());
  }
#endif
  args.push_back(rt);
  for (const std::string &f : mpiFlags)
    args.push_back(f);
  for (const char *a : {"-ldnnl", "-lz", "-fopenmp", "-lmvec", "-lm", "-lpthread"})
    args.push_back(a);
#ifdef AMP_CUDA_LIB_DIR
  if (deviceName == "cuda")
    for (llvm::StringRef a :
         {llvm::StringRef(cudaL), llvm::StringRef(cudaRpath), llvm::StringRef("-lcudart_static"),
          llvm::StringRef("-ldl"), llvm::StringRef("-lrt")})
      args.push_back(a);
#endif
#ifdef AMP_LINK_FLAGS
  args.push_back(AMP_LINK_FLAGS);
#endif
  args.push_back("-o");
  args.push_back(prog);
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(errFile),
                                                llvm::StringRef(errFile)};
  if (llvm::sys::ExecuteAndWait(*cxx, args, std::nullopt, redirects) != 0) {
    auto log = llvm::MemoryBuffer::getFile(errFile);
    die("linking failed:\n" + (log ? (*log)->getBuffer().str() : std::string("(no output)")));
  }
  if (std::error_code ec = llvm::sys::fs::rename(weights, outputFile + ".weights"))
    die("cannot write '" + outputFile + ".weights': " + ec.message());
  if (std::error_code ec = llvm::sys::fs::rename(prog, outputFile))
    die("cannot write '" + outputFile + "': " + ec.message());
  llvm::sys::fs::remove(obj);
  llvm::sys::fs::remove(errFile);
  llvm::outs() << "wrote " << outputFile << " and " << outputFile << ".weights ("
               << (training.empty() ? precision : "training step: " + training) << ", arena "
               << *arena << " bytes)\n";
  return 0;
}
