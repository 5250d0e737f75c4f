//===- amp-translate.cpp - model files <-> the amp dialect ---------------===//
//
//   amp-translate --import-onnx model.onnx [-o out.mlir]
//   amp-translate --import-onnx training_model.onnx --ort-checkpoint checkpoint
//
// Prints the model as a module in the amp dialect. On any error: one message
// per problem on stderr, exit code 1, and no output file.
//
//===----------------------------------------------------------------------===//

#include "amp/Pipelines/PipelineFlags.h"
#include "amp/Support/Batch.h"
#include "amp/Target/ONNX/ImportONNX.h"
#include "amp/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static cl::OptionCategory category("amp-translate options");

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"), cl::cat(category));
static cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                       cl::value_desc("file"), cl::init("-"), cl::cat(category));
static cl::opt<bool> importOnnx("import-onnx",
                                cl::desc("Import an ONNX model into the amp dialect"),
                                cl::cat(category));
static cl::opt<std::string> funcName("func-name", cl::desc("Name of the imported function"),
                                     cl::init("main"), cl::cat(category));
static cl::list<std::string>
    frozen("freeze", cl::desc("Import these float initializers as constants, not parameters"),
           cl::CommaSeparated, cl::value_desc("name,..."), cl::cat(category));
static cl::list<std::string>
    constInputs("const-input",
                cl::desc("Bind a graph input to the TensorProto in a .pb file (name=file.pb)"),
                cl::value_desc("name=file.pb"), cl::cat(category));
static cl::opt<bool>
    noLocations("no-locations",
                cl::desc("Do not print op locations (the ONNX node names); by default they "
                         "are printed so that later tools can name the user's nodes"),
                cl::cat(category));
static cl::opt<int64_t>
    inlineLimit("inline-limit",
                cl::desc("Print tensors up to this many elements inline, larger ones as resources"),
                cl::init(256), cl::cat(category));

// --loss-fn, --loss-of, --label: a training spec for a graph without a loss
// op (amp-add-loss), as amp-compile's.
static mlir::amp::LossFlags lossFlags(category);

static cl::opt<std::string> ortCheckpoint(
    "ort-checkpoint",
    cl::desc("The model is an onnxruntime-training training_model.onnx and this its "
             "checkpoint: import them as the function train_step (loss and gradients)"),
    cl::value_desc("checkpoint"), cl::cat(category));

static cl::opt<std::string> batchFile(
    "batch",
    cl::desc("Run many jobs: one per line of this file, LOG<TAB>ARG<TAB>ARG... (amp-translate's "
             "arguments; stdout and stderr to LOG); prints '<line> <exit status>' per job"),
    cl::value_desc("file"), cl::cat(category));
static cl::opt<unsigned> batchTimeout("batch-timeout",
                                      cl::desc("--batch: end a job after this many seconds "
                                               "(its status then -14, SIGALRM); 0: no limit"),
                                      cl::init(0), cl::cat(category));

int main(int argc, char **argv) {
  InitLLVM y(argc, argv);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv, "AMP-MLIR model translator\n");
  if (!batchFile.empty()) {
    if (inputFile.getNumOccurrences()) {
      errs() << "amp-translate: error: --batch takes the models from its file, not from the "
                "command line\n";
      return 1;
    }
    mlir::amp::runBatch("amp-translate", batchFile, batchTimeout, argv[0],
                        "AMP-MLIR model translator\n");
    if (!batchFile.empty()) {
      errs() << "amp-translate: error: --batch inside a batch job\n";
      return 1;
    }
  }

  if (inputFile.empty()) {
    errs() << "amp-translate: error: no model given (usage: amp-translate --import-onnx "
              "MODEL.onnx [-o OUT.mlir] ...; --help lists the options)\n";
    return 1;
  }
  if (!importOnnx) {
    errs() << "amp-translate: error: no translation given; use --import-onnx\n";
    return 1;
  }
  mlir::amp::ONNXImportOptions opts;
  opts.funcName = funcName;
  opts.frozen.assign(frozen.begin(), frozen.end());
  opts.inlineElementLimit = inlineLimit;
  for (const std::string &kv : constInputs) {
    auto [name, file] = StringRef(kv).split('=');
    if (name.empty() || file.empty()) {
      errs() << "amp-translate: error: --const-input needs name=file.pb, got '" << kv << "'\n";
      return 1;
    }
    opts.constantInputs[name.str()] = file.str();
  }

  mlir::DialectRegistry registry;
  mlir::amp::registerONNXImportDialects(registry);
  mlir::MLIRContext ctx(registry);
  unsigned numErrors = 0;
  ctx.getDiagEngine().registerHandler([&](mlir::Diagnostic &d) {
    if (d.getSeverity() == mlir::DiagnosticSeverity::Error)
      ++numErrors;
    const char *sev = d.getSeverity() == mlir::DiagnosticSeverity::Error     ? "error"
                      : d.getSeverity() == mlir::DiagnosticSeverity::Warning ? "warning"
                                                                             : "note";
    errs() << "amp-translate: " << sev << ": " << d.str() << "\n";
    for (auto &note : d.getNotes())
      errs() << "amp-translate: note: " << note.str() << "\n";
    return mlir::success();
  });

  if (!ortCheckpoint.empty() &&
      (funcName.getNumOccurrences() || frozen.getNumOccurrences() || !lossFlags.lossFn.empty())) {
    errs() << "amp-translate: error: --ort-checkpoint imports artifacts as they are: "
              "--func-name, --freeze and --loss-fn do not apply\n";
    return 1;
  }
  auto module = ortCheckpoint.empty()
                    ? mlir::amp::importONNXFile(inputFile, &ctx, opts)
                    : mlir::amp::importORTTrainingArtifacts(inputFile, ortCheckpoint, &ctx, opts);
  if (!module) {
    if (!numErrors)
      errs() << "amp-translate: error: " << inputFile << ": import failed\n";
    return 1;
  }
  mlir::amp::LossOptions loss;
  lossFlags.get(loss);
  if (loss.lossFn.empty() &&
      (lossFlags.lossOf.getNumOccurrences() || lossFlags.label.getNumOccurrences())) {
    errs() << "amp-translate: error: --loss-of and --label go with --loss-fn\n";
    return 1;
  }
  if (!loss.lossFn.empty()) {
    mlir::PassManager pm(&ctx);
    mlir::amp::AMPAddLossOptions o = loss.addLoss;
    o.kind = loss.lossFn;
    pm.addPass(mlir::amp::createAMPAddLoss(o));
    if (failed(pm.run(*module)))
      return 1;
  }
  std::string err;
  auto out = mlir::openOutputFile(outputFile, &err);
  if (!out) {
    errs() << "amp-translate: error: cannot write '" << outputFile << "': " << err << "\n";
    return 1;
  }
  mlir::OpPrintingFlags flags;
  if (!noLocations)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  module->print(out->os(), flags);
  out->os().flush();
  if (out->os().has_error()) {
    errs() << "amp-translate: error: writing '" << outputFile << "' failed\n";
    out->os().clear_error();
    return 1;
  }
  out->keep();
  return 0;
}
