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

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>
#include <vector>

namespace mlir::amp {

/// What turns a forward graph with a loss into a training step: the options
/// of amp-autodiff, amp-optimizer and amp-loss-scaling (see Passes.td).
struct TrainingOptions {
  // A forward graph without a loss op: amp-add-loss with these (lossFn
  // empty: the graph has its `loss` output).
  std::string lossFn, lossOf, label = "labels";
  std::string loss = "loss";
  std::vector<std::string> frozen;
  std::vector<std::string> paddingRows; // name:row, no gradient (padding_idx)
  std::string optimizer = "sgd";        // sgd | adam | adamw
  double lr = 0.01, momentum = 0, dampening = 0, weightDecay = -1, beta1 = 0.9, beta2 = 0.999,
         eps = 1e-8;
  bool nesterov = false;
  std::string adamMode = "torch"; // adamw: torch | hf
  /// False when the module already holds the gradients (amp.grad results,
  /// e.g. imported onnxruntime-training artifacts): no add-loss, no autodiff.
  bool differentiate = true;
  std::string lossScaling = "dynamic"; // dynamic | static | none
  double initScale = 65536, growthFactor = 2, backoffFactor = 0.5, minScale = 0, maxNorm = 0;
  int64_t growthInterval = 2000, hysteresis = 1, accumulate = 1;
  std::string onMinScale = "error";
  bool checkInf = true;
  bool dataParallel = false; // gradients averaged across MPI ranks
};

/// How amp-autocast runs before the lowering: the precision, a policy file
/// amending the default (policies/default.json), ONNX node names kept fp32,
/// and amp-autocast's f32-accumulators (auto: bf16 only; on; off).
struct PrecisionOptions {
  std::string precision = "fp32"; // fp32 | fp16 | bf16
  std::string policy;
  std::vector<std::string> blockList;
  std::string f32Accumulators = "auto";
  /// amp-keep-weight-casts after amp-autocast (amp-lower-for-runtime only).
  bool keepWeightCasts = true;
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
/// arguments), and the rest (amp-plan-memory, amp-lower-to-runtime).
LogicalResult buildRuntimePrepPipeline(OpPassManager &pm, const PrecisionOptions &p,
                                       std::string &error);
void buildRuntimeLoweringPipeline(OpPassManager &pm);

/// Adds autocast (fp16 / bf16) and amp-lower-to-linalg to `pm`: the step
/// as linalg on tensors for another compiler; fails as
/// buildLowerForRuntimePipeline on contradicting options.
LogicalResult buildLowerToLinalgPipeline(OpPassManager &pm, const PrecisionOptions &p,
                                         std::string &error);

/// The pipelines' textual options: the names of the passes' own options
/// (Passes.td), added to a pass-options base by these mixins so that the
/// combined pipeline has both sets and each is written once.
using Opts = ::mlir::detail::PassOptions;

template <class Base> struct WithTrainStepOptions : Base {
  Opts::Option<std::string> lossFn{
      *this, "loss-fn",
      llvm::cl::desc("amp-add-loss kind for a graph without a loss "
                     "(cross_entropy, ...); empty: the graph has one")};
  Opts::Option<std::string> lossOf{*this, "loss-of",
                                   llvm::cl::desc("amp-add-loss: the output the loss reads")};
  Opts::Option<std::string> label{*this, "label", llvm::cl::desc("amp-add-loss: the labels input"),
                                  llvm::cl::init("labels")};
  Opts::Option<std::string> loss{*this, "loss", llvm::cl::desc("The loss output"),
                                 llvm::cl::init("loss")};
  Opts::ListOption<std::string> frozen{*this, "frozen", llvm::cl::desc("Parameters not trained")};
  Opts::ListOption<std::string> paddingRows{*this, "padding-rows",
                                            llvm::cl::desc("name:row, rows with no gradient")};
  Opts::Option<std::string> optimizer{*this, "optimizer", llvm::cl::desc("sgd, adam or adamw"),
                                      llvm::cl::init("sgd")};
  Opts::Option<double> lr{*this, "lr", llvm::cl::desc("Learning rate"), llvm::cl::init(0.01)};
  Opts::Option<double> momentum{*this, "momentum", llvm::cl::desc("SGD momentum"),
                                llvm::cl::init(0.0)};
  Opts::Option<double> dampening{*this, "dampening", llvm::cl::desc("SGD dampening"),
                                 llvm::cl::init(0.0)};
  Opts::Option<bool> nesterov{*this, "nesterov", llvm::cl::desc("SGD Nesterov momentum"),
                              llvm::cl::init(false)};
  Opts::Option<double> weightDecay{*this, "weight-decay",
                                   llvm::cl::desc("Weight decay (-1: the optimizer's default)"),
                                   llvm::cl::init(-1.0)};
  Opts::Option<double> beta1{*this, "beta1", llvm::cl::desc("Adam beta1"), llvm::cl::init(0.9)};
  Opts::Option<double> beta2{*this, "beta2", llvm::cl::desc("Adam beta2"), llvm::cl::init(0.999)};
  Opts::Option<double> eps{*this, "eps", llvm::cl::desc("Adam epsilon"), llvm::cl::init(1e-8)};
  Opts::Option<std::string> adamMode{*this, "adam-mode", llvm::cl::desc("adamw: torch or hf"),
                                     llvm::cl::init("torch")};
  Opts::Option<bool> differentiate{
      *this, "differentiate",
      llvm::cl::desc("false: the module holds its gradients already (no "
                     "add-loss, no autodiff)"),
      llvm::cl::init(true)};
  Opts::Option<std::string> lossScaling{
      *this, "loss-scaling", llvm::cl::desc("dynamic, static or none"), llvm::cl::init("dynamic")};
  Opts::Option<double> initScale{*this, "init-scale", llvm::cl::desc("Initial loss scale"),
                                 llvm::cl::init(65536.0)};
  Opts::Option<double> growthFactor{*this, "growth-factor", llvm::cl::init(2.0)};
  Opts::Option<double> backoffFactor{*this, "backoff-factor", llvm::cl::init(0.5)};
  Opts::Option<int64_t> growthInterval{*this, "growth-interval", llvm::cl::init(2000)};
  Opts::Option<int64_t> hysteresis{*this, "hysteresis", llvm::cl::init(1)};
  Opts::Option<double> minScale{*this, "min-scale", llvm::cl::init(0.0)};
  Opts::Option<std::string> onMinScale{*this, "on-min-scale", llvm::cl::init("error")};
  Opts::Option<double> maxNorm{*this, "max-norm", llvm::cl::desc("Gradient clipping (0: none)"),
                               llvm::cl::init(0.0)};
  Opts::Option<bool> checkInf{*this, "check-inf", llvm::cl::init(true)};
  Opts::Option<int64_t> accumulate{*this, "accumulate", llvm::cl::desc("Micro-steps per update"),
                                   llvm::cl::init(1)};
  Opts::Option<bool> dataParallel{*this, "data-parallel",
                                  llvm::cl::desc("Gradients averaged across MPI ranks"),
                                  llvm::cl::init(false)};

  TrainingOptions training() const {
    TrainingOptions r;
    r.lossFn = this->lossFn;
    r.lossOf = this->lossOf;
    r.label = this->label;
    r.loss = this->loss;
    r.frozen.assign(this->frozen.begin(), this->frozen.end());
    r.paddingRows.assign(this->paddingRows.begin(), this->paddingRows.end());
    r.optimizer = this->optimizer;
    r.lr = this->lr;
    r.momentum = this->momentum;
    r.dampening = this->dampening;
    r.nesterov = this->nesterov;
    r.weightDecay = this->weightDecay;
    r.beta1 = this->beta1;
    r.beta2 = this->beta2;
    r.eps = this->eps;
    r.adamMode = this->adamMode;
    r.differentiate = this->differentiate;
    r.lossScaling = this->lossScaling;
    r.initScale = this->initScale;
    r.growthFactor = this->growthFactor;
    r.backoffFactor = this->backoffFactor;
    r.growthInterval = this->growthInterval;
    r.hysteresis = this->hysteresis;
    r.minScale = this->minScale;
    r.onMinScale = this->onMinScale;
    r.maxNorm = this->maxNorm;
    r.checkInf = this->checkInf;
    r.accumulate = this->accumulate;
    r.dataParallel = this->dataParallel;
    return r;
  }
};

template <class Base> struct WithPrecisionOptions : Base {
  Opts::Option<std::string> precision{*this, "precision", llvm::cl::desc("fp32, fp16 or bf16"),
                                      llvm::cl::init("fp32")};
  Opts::Option<std::string> policy{*this, "policy",
                                   llvm::cl::desc("A policy file amending policies/default.json")};
  Opts::ListOption<std::string> blockList{*this, "block-list",
                                          llvm::cl::desc("Ops (ONNX node names) kept in fp32")};
  Opts::Option<std::string> f32Accumulators{
      *this, "f32-accumulators",
      llvm::cl::desc("amp-autocast's f32 biases and accumulator results: auto (bf16), on, off"),
      llvm::cl::init("auto")};
  Opts::Option<bool> keepWeightCasts{
      *this, "keep-weight-casts",
      llvm::cl::desc("amp-lower-for-runtime: each updated parameter's f16 / bf16 copy is step "
                     "state, written by the optimizer update (amp-keep-weight-casts)"),
      llvm::cl::init(true)};

  PrecisionOptions precisionOptions() const {
    PrecisionOptions r;
    r.precision = this->precision;
    r.policy = this->policy;
    r.blockList.assign(this->blockList.begin(), this->blockList.end());
    r.f32Accumulators = this->f32Accumulators;
    r.keepWeightCasts = this->keepWeightCasts;
    return r;
  }
};

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
