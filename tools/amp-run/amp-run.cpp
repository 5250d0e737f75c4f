//===- amp-run.cpp - run a model on the runtime through the JIT -----------===//
//
//   amp-run model.onnx|model.mlir --inputs in.npz|a.pb,b.pb --outputs out.npz
//           [--precision fp32|fp16|bf16] [--policy FILE] [--block-list NODES]
//           [--nan-check warn|error|off]
//           [--const-input name=file.pb] [--func NAME] [--print]
//
// Imports (or parses) the model, puts it in the requested precision
// (amp-autocast), plans its memory, lowers it to runtime calls, compiles it
// with MLIR's ExecutionEngine and runs it on the CPU runtime. Inputs are
// matched by the graph's input names (.npz keys), or by position (.pb
// files, as the ONNX test data stores them). Outputs are written under the
// graph's output names. Every problem is one message and exit code 1.
//
//===----------------------------------------------------------------------===//

#include "amp/Dialect/AMP/IR/AMPDialect.h"
#include "amp/Execution/Program.h"
#include "amp/Pipelines/PipelineFlags.h"
#include "amp/Support/Batch.h"
#include "amp/Target/ONNX/ImportONNX.h"
#include "amp/Transforms/Autocast.h"
#include "amp/Transforms/Passes.h"

#include "amprt/amprt.h"
#include "amprt/bounded_spin.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <new>
#include <unistd.h>

using llvm::cl::opt;
namespace cl = llvm::cl;
using llvm::errs;
using llvm::outs;
using llvm::SmallVector;
using llvm::StringRef;
using llvm::Twine;
using namespace mlir;

static cl::OptionCategory category("amp-run options");
static opt<std::string> modelFile(cl::Positional, cl::desc("<model.onnx|model.mlir>"),
                                  cl::cat(category));
static opt<std::string> inputsOpt("inputs",
                                  cl::desc("Inputs: an .npz (keys = input names) or "
                                           "comma-separated .pb files in input order"),
                                  cl::value_desc("file"), cl::cat(category));
static opt<std::string> outputsOpt("outputs", cl::desc("Write the outputs to this .npz"),
                                   cl::value_desc("file"), cl::cat(category));
// --precision, --policy, --block-list, --f32-accumulators (and
// --keep-weight-casts, which applies to training programs: refused).
static amp::PrecisionFlags precisionFlags(category);
static opt<std::string> nanCheck("nan-check",
                                 cl::desc("NaN / inf in a float input: warn, error or off"),
                                 cl::init("warn"), cl::cat(category));
static cl::list<std::string>
    constInputs("const-input", cl::desc("Bind a graph input to a TensorProto (.pb) at import"),
                cl::value_desc("name=file.pb"), cl::cat(category));
static opt<std::string> funcName("func", cl::desc("Function to run (default: main)"),
                                 cl::init("main"), cl::cat(category));
static opt<std::string> deviceOpt("device",
                                  cl::desc("Run on cpu, or on cuda[:N] (AMPRT_CUDA_EMULATE=1: "
                                           "the CUDA executor emulated on the host)"),
                                  cl::init("cpu"), cl::cat(category));
static opt<uint64_t>
    seedOpt("seed",
            cl::desc("Seed the runtime's generator (Dropout in training, the random ops; "
                     "a fixed state by default)"),
            cl::init(0), cl::cat(category));
static opt<bool> printOutputs("print", cl::desc("Print a summary of each output"),
                              cl::cat(category));
static opt<std::string> batchFile(
    "batch",
    cl::desc("Run many jobs: one per line of this file, LOG<TAB>ARG<TAB>ARG... (amp-run's "
             "arguments; stdout and stderr to LOG); prints '<line> <exit status>' per job"),
    cl::value_desc("file"), cl::cat(category));
static opt<unsigned> batchTimeout("batch-timeout",
                                  cl::desc("--batch: end a job after this many seconds "
                                           "(its status then -14, SIGALRM); 0: no limit"),
                                  cl::init(0), cl::cat(category));
static opt<int> repeat("repeat",
                       cl::desc("Run the compiled function this many times and report the "
                                "median time of one run (compilation excluded)"),
                       cl::init(1), cl::cat(category));

namespace {

[[noreturn]] void die(const Twine &msg) {
  errs() << "amp-run: error: " << msg << "\n";
  exit(1);
}

std::string shapeStr(ArrayRef<int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

struct Slot {
  std::string name;
  RankedTensorType type;
  amprt_dtype dtype;
  std::vector<char> data;
};

/// Copies caller data into slot.data (shape and type checked by the runtime).
void fill(Slot &slot, const void *bytes, amprt_dtype from, llvm::ArrayRef<int64_t> shape,
          const std::string &what) {
  amprt_array a{};
  a.data = bytes;
  a.dtype = from;
  a.rank = (int32_t)shape.size();
  for (size_t d = 0; d < shape.size() && d < AMPRT_MAX_RANK; ++d)
    a.shape[d] = shape[d];
  slot.data.assign(slot.type.getNumElements() * amprt_dtype_size(slot.dtype), 0);
  if (amprt_feed(&a, slot.dtype, slot.type.getRank(), slot.type.getShape().data(), slot.data.data(),
                 what.c_str()) != AMPRT_OK)
    die(amprt_last_error());
}

void checkFinite(const Slot &s) {
  if (nanCheck == "off")
    return;
  int64_t first;
  int64_t bad = amprt_count_nonfinite(s.data.data(), s.dtype, s.type.getNumElements(), &first);
  if (!bad)
    return;
  std::string msg = "input '" + s.name + "' holds " + std::to_string(bad) +
                    " NaN / inf value(s), the first at flat index " + std::to_string(first);
  if (nanCheck == "error")
    die(msg + " (--nan-check=error)");
  errs() << "amp-run: warning: " << msg << "\n";
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  // In place of LLVM's handler (a crash report): a failed allocation (data
  // too large for this machine) is a one-line error.
  std::set_new_handler([] {
    static const char msg[] = "amp-run: error: out of memory\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
  });
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv, "AMP-MLIR model runner (JIT)\n");
  if (!batchFile.empty()) {
    if (!modelFile.empty())
      die("--batch takes the models from its file, not from the command line");
    amp::runBatch("amp-run", batchFile, batchTimeout, argv[0], "AMP-MLIR model runner (JIT)\n");
    if (!batchFile.empty())
      die("--batch inside a batch job");
  }
  if (modelFile.empty())
    die("no model given (usage: amp-run MODEL.onnx|MODEL.mlir [--inputs FILE] "
        "[--outputs FILE.npz] ...; --help lists the options)");
  const std::string precision = precisionFlags.precision;
  if (precision != "fp32" && precision != "fp16" && precision != "bf16")
    die("--precision must be fp32, fp16 or bf16, got '" + precision + "'");
  if (precisionFlags.keepWeightCasts.getNumOccurrences())
    die("--keep-weight-casts applies to training programs (amp-compile); amp-run runs one "
        "call, with no low-precision weight copies carried to a next step");
  if (nanCheck != "warn" && nanCheck != "error" && nanCheck != "off")
    die("--nan-check must be warn, error or off, got '" + nanCheck + "'");
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();

  DialectRegistry registry;
  amp::registerONNXImportDialects(registry);
  registry.insert<LLVM::LLVMDialect>();
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  ctx.getDiagEngine().registerHandler([](Diagnostic &d) {
    errs() << "amp-run: "
           << (d.getSeverity() == DiagnosticSeverity::Error     ? "error"
               : d.getSeverity() == DiagnosticSeverity::Warning ? "warning"
                                                                : "note")
           << ": " << d.str() << "\n";
    return success();
  });

  // 1. The model.
  std::map<std::string, std::string> bound;
  for (const std::string &kv : constInputs) {
    auto [name, file] = StringRef(kv).split('=');
    if (name.empty() || file.empty())
      die("--const-input needs name=file.pb, got '" + kv + "'");
    bound[name.str()] = file.str();
  }
  OwningOpRef<ModuleOp> module = amp::loadModelFile(modelFile, &ctx, bound);
  if (!module)
    return 1;
  auto f = module->lookupSymbol<func::FuncOp>(funcName);
  if (!f)
    die("'" + modelFile + "' has no function '" + funcName + "'");

  // 2. Its signature, before lowering.
  auto sig = amp::signatureOf(f);
  if (failed(sig))
    return 1;
  std::vector<Slot> args, results;
  std::vector<size_t> inputArgs; // indices of args the caller feeds
  // Every tensor of the signature lives in this process's memory at once:
  // one larger than the machine is refused here, naming it, before any
  // allocation (an allocation that fails aborts the process).
  uint64_t held = 0;
  for (amp::TensorSlot &t : sig->args) {
    if (auto big =
            amp::exceedsHostMemory(t, held, (t.isParam ? "parameter '" : "input '") + t.name + "'"))
      die(*big);
    held += t.bytes;
  }
  uint64_t npzBytes = 0; // --outputs: the .npz's arrays (bf16 written as f32)
  for (amp::TensorSlot &t : sig->results) {
    if (auto big = amp::exceedsHostMemory(t, held, "result '" + t.name + "'"))
      die(*big);
    held += t.bytes;
    npzBytes += t.dtype == AMPRT_BF16 ? 2 * t.bytes : t.bytes;
    // (The writer has no zip64: under 4 GiB with the headers, refused now
    // rather than after the run.)
    if (!outputsOpt.empty() && npzBytes >= (uint64_t(1) << 32) - 4096 * (sig->results.size() + 1))
      die("result '" + t.name + "' brings the outputs to " + amp::bytesText(npzBytes) +
          ": --outputs writes .npz files without zip64, which hold less than 4 GiB in all "
          "(run without --outputs, or return less)");
  }
  for (amp::TensorSlot &t : sig->args) {
    Slot s{t.name, t.type, t.dtype, std::move(t.init)};
    if (!t.isParam)
      inputArgs.push_back(args.size());
    args.push_back(std::move(s));
  }
  for (amp::TensorSlot &t : sig->results) {
    Slot s{t.name, t.type, t.dtype, {}};
    s.data.assign(t.type.getNumElements() * amprt_dtype_size(t.dtype), 0);
    results.push_back(std::move(s));
  }

  // 3. The inputs.
  if (inputArgs.size() && inputsOpt.empty())
    die("the model has inputs; give them with --inputs");
  if (StringRef(inputsOpt).ends_with(".npz") || StringRef(inputsOpt).ends_with(".npy")) {
    amprt_npz *z = nullptr;
    if (amprt_npz_open(inputsOpt.c_str(), &z) != AMPRT_OK)
      die(amprt_last_error());
    for (size_t k : inputArgs) {
      Slot &s = args[k];
      const amprt_array *a = amprt_npz_get(z, s.name.c_str());
      if (!a) {
        std::string have;
        for (int32_t i = 0; i < amprt_npz_count(z); ++i)
          have += (i ? ", " : "") + std::string(amprt_npz_name(z, i));
        die("input '" + s.name + "' is missing from '" + inputsOpt +
            "' (it holds: " + (have.empty() ? "nothing" : have) + ")");
      }
      fill(s, a->data, a->dtype, ArrayRef<int64_t>(a->shape, a->rank),
           "input '" + s.name + "' in '" + inputsOpt + "'");
    }
    // An array no input takes (a misspelt name, most likely): said, not
    // silently dropped.
    std::string unused, names;
    for (size_t k : inputArgs)
      names += (names.empty() ? "" : ", ") + args[k].name;
    for (int32_t i = 0; i < amprt_npz_count(z); ++i) {
      std::string n = amprt_npz_name(z, i);
      if (llvm::none_of(inputArgs, [&](size_t k) { return args[k].name == n; }))
        unused += (unused.empty() ? "'" : ", '") + n + "'";
    }
    if (!unused.empty())
      errs() << "amp-run: warning: " << unused << " in '" << inputsOpt
             << "' is no input of the model (its inputs: " << (names.empty() ? "none" : names)
             << "); ignored\n";
    amprt_npz_close(z);
  } else if (!inputsOpt.empty()) {
    SmallVector<StringRef> files;
    StringRef(inputsOpt).split(files, ',');
    if (files.size() != inputArgs.size())
      die("the model has " + std::to_string(inputArgs.size()) + " inputs, --inputs gives " +
          std::to_string(files.size()) + " .pb files");
    for (auto [file, k] : llvm::zip(files, inputArgs)) {
      auto t = amp::readTensorProtoFile(file, &ctx);
      if (failed(t))
        return 1;
      auto dt =
          t->elementType ? amp::runtimeDType(t->elementType) : FailureOr<amprt_dtype>(failure());
      if (failed(dt))
        die(file + ": element type not supported by the runtime");
      fill(args[k], t->bytes.data(), *dt, t->shape,
           "input '" + args[k].name + "' ('" + file.str() + "')");
    }
  }
  for (size_t k : inputArgs)
    checkFinite(args[k]);

  // 4. Compile.
  // One call: no low-precision weight copies carried to a next step.
  amp::PrecisionOptions po = precisionFlags.get();
  po.keepWeightCasts = false;
  auto arenaBytes = amp::lowerForRuntime(*module, funcName, po);
  if (failed(arenaBytes))
    return 1;
  // ExecutionEngineOptions::transformer is a function_ref: the function it
  // refers to must outlive create().
  std::function<llvm::Error(llvm::Module *)> optimize = makeOptimizingTransformer(2, 0, nullptr);
  ExecutionEngineOptions eo;
  eo.transformer = optimize;
  auto engine = ExecutionEngine::create(*module, eo);
  if (!engine)
    die("JIT compilation failed: " + llvm::toString(engine.takeError()));
  // The generated code calls into this process's runtime.
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap m;
    m[interner("amprt_exec")] = {llvm::orc::ExecutorAddr::fromPtr(&amprt_exec),
                                 llvm::JITSymbolFlags::Exported};
    return m;
  });
  (*engine)->initialize();
  auto sym = (*engine)->lookup(funcName);
  if (!sym)
    die("JIT lookup failed: " + llvm::toString(sym.takeError()));
  auto fn = reinterpret_cast<int32_t (*)(amprt_context *, void *, void **, void **)>(*sym);

  // 5. Run.
  amprt_context *rctx = nullptr;
  amprt_arena *arena = nullptr;
  if (amprt_context_create(deviceOpt.c_str(), &rctx) != AMPRT_OK ||
      amprt_arena_create(rctx, (size_t)*arenaBytes, &arena) != AMPRT_OK)
    die(amprt_last_error());
  if (seedOpt.getNumOccurrences())
    amprt_context_seed(rctx, seedOpt);
  // Host buffers, or device copies of them.
  const bool onHost = amprt_context_on_host(rctx);
  std::vector<void *> argPtrs, resPtrs, owned;
  auto bufferOf = [&](Slot &s, bool upload) -> void * {
    if (onHost)
      return s.data.data();
    void *p = nullptr;
    if (amprt_device_alloc(rctx, std::max<size_t>(1, s.data.size()), &p) != AMPRT_OK ||
        (upload && amprt_device_copy(rctx, p, s.data.data(), s.data.size(), 0) != AMPRT_OK))
      die(amprt_last_error());
    owned.push_back(p);
    return p;
  };
  for (Slot &s : args)
    argPtrs.push_back(bufferOf(s, true));
  for (Slot &s : results)
    resPtrs.push_back(bufferOf(s, false));
  if (repeat < 1)
    die("--repeat must be at least 1");
  std::vector<double> times;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    int32_t status = fn(rctx, amprt_arena_base(arena), argPtrs.data(), resPtrs.data());
    if (status == AMPRT_OK)
      status = amprt_device_synchronize(rctx);
    auto t1 = std::chrono::steady_clock::now();
    if (status != AMPRT_OK)
      die(std::string("running '") + funcName + "': " + amprt_last_error());
    times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  if (repeat > 1) {
    std::sort(times.begin(), times.end());
    outs() << "median time per run: " << times[times.size() / 2] * 1e3 << " ms (" << repeat
           << " runs)\n";
  }
  for (size_t i = 0; i < results.size() && !onHost; ++i)
    if (amprt_device_copy(rctx, results[i].data.data(), resPtrs[i], results[i].data.size(), 1) !=
        AMPRT_OK)
      die(amprt_last_error());
  for (void *p : owned)
    amprt_device_free(rctx, p);
  amprt_arena_destroy(arena);
  amprt_context_destroy(rctx);

  // 6. Outputs (bf16 as f32: numpy has no bf16).
  std::vector<std::vector<char>> widened(results.size());
  std::vector<amprt_array> arrays;
  std::vector<const char *> names;
  for (auto [i, s] : llvm::enumerate(results)) {
    amprt_array a{};
    a.dtype = s.dtype;
    a.data = s.data.data();
    a.rank = s.type.getRank();
    for (int32_t d = 0; d < a.rank; ++d)
      a.shape[d] = s.type.getDimSize(d);
    if (s.dtype == AMPRT_BF16) {
      widened[i].resize(s.type.getNumElements() * 4);
      amprt_convert(s.data.data(), AMPRT_BF16, widened[i].data(), AMPRT_F32,
                    s.type.getNumElements());
      a.dtype = AMPRT_F32;
      a.data = widened[i].data();
    }
    arrays.push_back(a);
    names.push_back(s.name.c_str());
    if (printOutputs) {
      outs() << s.name << ": " << amprt_dtype_name(s.dtype) << " " << shapeStr(s.type.getShape());
      int64_t n = std::min<int64_t>(s.type.getNumElements(), 8);
      std::vector<float> v(n);
      if (s.dtype == AMPRT_F32 || s.dtype == AMPRT_F16 || s.dtype == AMPRT_BF16) {
        amprt_convert(s.data.data(), s.dtype, v.data(), AMPRT_F32, n);
        outs() << " =";
        for (float x : v)
          outs() << " " << x;
        if (n < s.type.getNumElements())
          outs() << " ...";
      } else if (s.dtype == AMPRT_I64 || s.dtype == AMPRT_I32 || s.dtype == AMPRT_I1) {
        outs() << " =";
        for (int64_t k = 0; k < n; ++k) {
          const char *p = s.data.data() + k * amprt_dtype_size(s.dtype);
          int64_t x = s.dtype == AMPRT_I64   ? *reinterpret_cast<const int64_t *>(p)
                      : s.dtype == AMPRT_I32 ? *reinterpret_cast<const int32_t *>(p)
                                             : (int64_t)(*p != 0);
          outs() << " " << x;
        }
        if (n < s.type.getNumElements())
          outs() << " ...";
      }
      outs() << "\n";
    }
  }
  if (!outputsOpt.empty() && amprt_npz_write(outputsOpt.c_str(), names.data(), arrays.data(),
                                             (int32_t)arrays.size()) != AMPRT_OK)
    die(amprt_last_error());
  return 0;
}
