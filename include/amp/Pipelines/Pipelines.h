//===- Pipelines.h - the registered pass pipelines --------------*- C++ -*-===//
//
// The pipelines every tool runs, registered so that amp-opt and lit tests
// run exactly what amp-compile and amp-run do:
//
//   amp-train-step{...}        forward graph -> training step: amp-add-loss
//                              (loss-fn set), amp-autodiff, amp-optimizer,
//                              amp-loss-scaling
//   amp-lower-for-runtime{...} amp-autocast (precision fp16 / bf16),
//                              amp-fold-transposes, amp-plan-memory,
//                              amp-lower-to-runtime
//   amp-training-pipeline{...} both, with the options of both
//
//   amp-opt --pass-pipeline='builtin.module(amp-training-pipeline{
//       precision=bf16 optimizer=adamw lr=0.001 loss-scaling=dynamic})'
//
//===----------------------------------------------------------------------===//

#ifndef AMP_PIPELINES_PIPELINES_H
#define AMP_PIPELINES_PIPELINES_H

#include "amp/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>
#include <vector>

namespace mlir::amp {

// Each option is declared once: in its pass (Passes.td) or in
// PipelineOptions.td; PipelineOptions.h.inc gives one row per option, which
// the structs, the pipelines' textual options and the tools' flags
// (PipelineFlags.h) expand.

/// A loss for a forward graph without one: amp-add-loss of kind lossFn
/// (empty: the graph has its loss output).
struct LossOptions {
#define AMP_LOSS_OWN(FIELD, FLAG, TYPE, DEFAULT, HELP) TYPE FIELD = DEFAULT;
#define AMP_LOSS_MEMBER(MEMBER, STRUCT) STRUCT MEMBER;
#include "amp/Pipelines/PipelineOptions.h.inc"
};

/// What turns a forward graph with a loss into a training step: the loss,
/// the options of amp-autodiff, amp-optimizer and amp-loss-scaling, and
/// differentiate.
struct TrainingOptions : LossOptions {
#define AMP_TRAINING_OWN(FIELD, FLAG, TYPE, DEFAULT, HELP) TYPE FIELD = DEFAULT;
#define AMP_TRAINING_MEMBER(MEMBER, STRUCT) STRUCT MEMBER;
#include "amp/Pipelines/PipelineOptions.h.inc"
};

/// How amp-autocast runs before the lowering: the precision, and
/// amp-autocast's policy, block list and f32 accumulators.
struct PrecisionOptions {
#define AMP_PRECISION_OWN(FIELD, FLAG, TYPE, DEFAULT, HELP) TYPE FIELD = DEFAULT;
#define AMP_PRECISION_MEMBER(MEMBER, STRUCT) STRUCT MEMBER;
#include "amp/Pipelines/PipelineOptions.h.inc"
};

/// Adds the training-step passes to `pm` (a module pass manager).
void buildTrainStepPipeline(OpPassManager &pm, const TrainingOptions &o);

/// Adds the lowering passes to `pm`; fails with `error` set when the
/// options contradict each other (an unknown precision, a policy or block
/// list with fp32, which would be ignored).
LogicalResult buildLowerForRuntimePipeline(OpPassManager &pm, const PrecisionOptions &p,
                                           std::string &error);
/// Its two halves: the passes up to the function's final signature
/// (amp-autocast, amp-fold-transposes, cse, amp-keep-weight-casts: new state
/// arguments), and the rest (amp-plan-memory, amp-lower-to-runtime;
/// `memoryReport` non-empty: amp-plan-memory's report=, the JSON memory
/// report written there).
LogicalResult buildRuntimePrepPipeline(OpPassManager &pm, const PrecisionOptions &p,
                                       std::string &error);
void buildRuntimeLoweringPipeline(OpPassManager &pm, llvm::StringRef memoryReport = "");

/// Adds autocast (fp16 / bf16) and amp-lower-to-linalg to `pm`: the step
/// as linalg on tensors for another compiler; fails as
/// buildLowerForRuntimePipeline on contradicting options.
LogicalResult buildLowerToLinalgPipeline(OpPassManager &pm, const PrecisionOptions &p,
                                         std::string &error);

/// The pipelines' textual options: the names of the passes' own options
/// (Passes.td), added to a pass-options base by these mixins so that the
/// combined pipeline has both sets and each is written once.
using Opts = ::mlir::detail::PassOptions;

// The X-macros of one option as a pass-options member, and its copy into
// the options struct `r`.
#define AMP_PIPELINE_OWN(FIELD, FLAG, TYPE, DEFAULT, HELP)                                         \
  Opts::Option<TYPE> FIELD{*this, FLAG, llvm::cl::desc(HELP), llvm::cl::init(TYPE(DEFAULT))};
#define AMP_PIPELINE_OPTION(STRUCT, MEMBER, PASSFIELD, FIELD, FLAG, TYPE, HELP)                    \
  Opts::Option<TYPE> FIELD{*this, FLAG, llvm::cl::desc(HELP),                                      \
                           llvm::cl::init(STRUCT().MEMBER.PASSFIELD)};
#define AMP_PIPELINE_LIST(MEMBER, PASSFIELD, FIELD, FLAG, HELP)                                    \
  Opts::ListOption<std::string> FIELD{*this, FLAG, llvm::cl::desc(HELP)};
#define AMP_COPY_OWN(FIELD, ...) r.FIELD = this->FIELD;
#define AMP_COPY_OPTION(MEMBER, PASSFIELD, FIELD, ...) r.MEMBER.PASSFIELD = this->FIELD;
#define AMP_COPY_LIST(MEMBER, PASSFIELD, FIELD, ...)                                               \
  r.MEMBER.PASSFIELD.assign(this->FIELD.begin(), this->FIELD.end());

template <class Base> struct WithTrainStepOptions : Base {
#define AMP_LOSS_OWN AMP_PIPELINE_OWN
#define AMP_LOSS_OPTION(...) AMP_PIPELINE_OPTION(TrainingOptions, __VA_ARGS__)
#define AMP_LOSS_LIST AMP_PIPELINE_LIST
#define AMP_TRAINING_OWN AMP_PIPELINE_OWN
#define AMP_TRAINING_OPTION(...) AMP_PIPELINE_OPTION(TrainingOptions, __VA_ARGS__)
#define AMP_TRAINING_LIST AMP_PIPELINE_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"

  TrainingOptions training() const {
    TrainingOptions r;
#define AMP_LOSS_OWN AMP_COPY_OWN
#define AMP_LOSS_OPTION AMP_COPY_OPTION
#define AMP_LOSS_LIST AMP_COPY_LIST
#define AMP_TRAINING_OWN AMP_COPY_OWN
#define AMP_TRAINING_OPTION AMP_COPY_OPTION
#define AMP_TRAINING_LIST AMP_COPY_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
    return r;
  }
};

template <class Base> struct WithPrecisionOptions : Base {
#define AMP_PRECISION_OWN AMP_PIPELINE_OWN
#define AMP_PRECISION_OPTION(...) AMP_PIPELINE_OPTION(PrecisionOptions, __VA_ARGS__)
#define AMP_PRECISION_LIST AMP_PIPELINE_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"

  PrecisionOptions precisionOptions() const {
    PrecisionOptions r;
#define AMP_PRECISION_OWN AMP_COPY_OWN
#define AMP_PRECISION_OPTION AMP_COPY_OPTION
#define AMP_PRECISION_LIST AMP_COPY_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
    return r;
  }
};

#undef AMP_PIPELINE_OWN
#undef AMP_PIPELINE_OPTION
#undef AMP_PIPELINE_LIST
#undef AMP_COPY_OWN
#undef AMP_COPY_OPTION
#undef AMP_COPY_LIST

struct TrainStepPipelineOptions
    : WithTrainStepOptions<PassPipelineOptions<TrainStepPipelineOptions>> {};
struct LowerForRuntimePipelineOptions
    : WithPrecisionOptions<PassPipelineOptions<LowerForRuntimePipelineOptions>> {};
struct TrainingPipelineOptions
    : WithPrecisionOptions<WithTrainStepOptions<PassPipelineOptions<TrainingPipelineOptions>>> {};

/// Registers amp-train-step, amp-lower-for-runtime, amp-training-pipeline
/// and amp-training-to-linalg.
void registerAMPPipelines();

} // namespace mlir::amp

#endif // AMP_PIPELINES_PIPELINES_H
