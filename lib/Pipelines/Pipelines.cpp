//===- Pipelines.cpp - the registered pass pipelines ----------------------===//
//
// One place builds each pipeline; amp-compile and amp-run (through
// lib/Execution/Program.cpp) and amp-opt (through the registrations) run
// the same passes with the same options.
//
//===----------------------------------------------------------------------===//

#include "amp/Pipelines/Pipelines.h"

#include "amp/Conversion/Passes.h"
#include "amp/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::amp;

void mlir::amp::buildTrainStepPipeline(OpPassManager &pm, const TrainingOptions &o) {
  if (o.differentiate && !o.lossFn.empty()) {
    AMPAddLossOptions al = o.addLoss;
    al.kind = o.lossFn;
    pm.addPass(createAMPAddLoss(al));
  }
  if (o.differentiate)
    pm.addPass(createAMPAutodiff(o.autodiff));
  pm.addPass(createAMPOptimizer(o.optim));
  pm.addPass(createAMPLossScaling(o.scaling));
}

/// amp-autocast for fp16 / bf16; an error for an unknown precision or a
/// policy / block list with fp32.
static LogicalResult addAutocast(OpPassManager &pm, const PrecisionOptions &p, std::string &error) {
  const AMPAutocastOptions &a = p.autocast;
  if (a.f32Accumulators != "auto" && a.f32Accumulators != "on" && a.f32Accumulators != "off") {
    error = "--f32-accumulators must be auto, on or off, got '" + a.f32Accumulators + "'";
    return failure();
  }
  if (p.precision == "fp16" || p.precision == "bf16") {
    AMPAutocastOptions o = a;
    o.target = p.precision == "fp16" ? "f16" : "bf16";
    pm.addPass(createAMPAutocast(o));
  } else if (p.precision != "fp32") {
    error = "precision must be fp32, fp16 or bf16, got '" + p.precision + "'";
    return failure();
  } else if (!a.policy.empty() || !a.blockList.empty() ||
             a.f32Accumulators != AMPAutocastOptions().f32Accumulators) {
    error = std::string(!a.policy.empty()      ? "--policy"
                        : !a.blockList.empty() ? "--block-list"
                                               : "--f32-accumulators") +
            " needs --precision fp16 or bf16 (fp32 runs no autocast)";
    return failure();
  }
  return success();
}

LogicalResult mlir::amp::buildRuntimePrepPipeline(OpPassManager &pm, const PrecisionOptions &p,
                                                  std::string &error) {
  if (failed(addAutocast(pm, p, error)))
    return failure();
  // After amp-fold-transposes: a weight read transposed (a Linear exported
  // as MatMul of its transpose) is then cast first, its transpose folded
  // into the product.
  pm.addPass(createAMPFoldTransposes());
  // Autocast casts each use's operand: one f32 value read by several
  // products (a layer norm's output feeding Q, K and V, and the three
  // weight gradients) became a cast per product, each a pass over the
  // tensor, every step. CSE leaves one (only pure ops are merged: dropout
  // and the random ops never are).
  pm.addPass(createCSEPass());
  if (p.keepWeightCasts && p.precision != "fp32")
    pm.addPass(createAMPKeepWeightCasts());
  else if (p.recastWeights && p.precision != "fp32")
    pm.addPass(createAMPRecastWeights());
  return success();
}

void mlir::amp::buildRuntimeLoweringPipeline(OpPassManager &pm, llvm::StringRef memoryReport) {
  AMPPlanMemoryOptions plan;
  plan.report = memoryReport.str();
  pm.addPass(createAMPPlanMemory(plan));
  pm.addPass(createAMPLowerToRuntime());
}

LogicalResult mlir::amp::buildLowerForRuntimePipeline(OpPassManager &pm, const PrecisionOptions &p,
                                                      std::string &error) {
  if (failed(buildRuntimePrepPipeline(pm, p, error)))
    return failure();
  buildRuntimeLoweringPipeline(pm);
  return success();
}

LogicalResult mlir::amp::buildLowerToLinalgPipeline(OpPassManager &pm, const PrecisionOptions &p,
                                                    std::string &error) {
  if (failed(addAutocast(pm, p, error)))
    return failure();
  pm.addPass(createAMPFoldTransposes());
  pm.addPass(createAMPLowerToLinalg());
  return success();
}

namespace {

/// Registers pipeline `arg` with options `O`; a builder's error goes to the
/// pass-pipeline parser's error handler (amp-opt prints it and exits 1).
template <class O>
void registerPipeline(
    StringRef arg, StringRef description,
    std::function<LogicalResult(OpPassManager &, const O &, std::string &)> build) {
  registerPassPipeline(
      arg, description,
      [build, arg](OpPassManager &pm, StringRef text,
                   function_ref<LogicalResult(const Twine &)> errorHandler) -> LogicalResult {
        O options;
        if (failed(options.parseFromString(text)))
          return failure();
        std::string error;
        if (failed(build(pm, options, error)))
          return errorHandler(arg + ": " + error);
        return success();
      },
      [](function_ref<void(const mlir::detail::PassOptions &)> optHandler) { optHandler(O()); });
}

} // namespace

void mlir::amp::registerAMPPipelines() {
  registerPipeline<TrainStepPipelineOptions>(
      "amp-train-step",
      "A forward graph with a loss -> a training step: amp-add-loss (loss-fn set), "
      "amp-autodiff, amp-optimizer, amp-loss-scaling",
      [](OpPassManager &pm, const TrainStepPipelineOptions &o, std::string &) {
        buildTrainStepPipeline(pm, o.training());
        return success();
      });
  registerPipeline<LowerForRuntimePipelineOptions>(
      "amp-lower-for-runtime",
      "amp-autocast (precision fp16 / bf16), amp-fold-transposes, cse, amp-keep-weight-casts "
      "or amp-recast-weights (fp16 / bf16), amp-plan-memory, amp-lower-to-runtime",
      [](OpPassManager &pm, const LowerForRuntimePipelineOptions &o, std::string &error) {
        return buildLowerForRuntimePipeline(pm, o.precisionOptions(), error);
      });
  registerPipeline<TrainingPipelineOptions>(
      "amp-training-pipeline",
      "amp-train-step then amp-lower-for-runtime: what amp-compile runs on a forward graph",
      [](OpPassManager &pm, const TrainingPipelineOptions &o, std::string &error) {
        buildTrainStepPipeline(pm, o.training());
        return buildLowerForRuntimePipeline(pm, o.precisionOptions(), error);
      });
  registerPipeline<TrainingPipelineOptions>(
      "amp-training-to-linalg",
      "amp-train-step, amp-autocast (precision fp16 / bf16) and amp-lower-to-linalg: a forward "
      "graph to a training step in linalg on tensors (what amp-compile --emit=linalg writes)",
      [](OpPassManager &pm, const TrainingPipelineOptions &o, std::string &error) {
        buildTrainStepPipeline(pm, o.training());
        return buildLowerToLinalgPipeline(pm, o.precisionOptions(), error);
      });
}
