//===- PipelineOptions.td - what the pipelines' options are -*- tablegen -*-===//
//
// The registered pipelines (Pipelines.h) take the options of their passes
// (Passes.td), plus a few of their own declared here. Each option is
// declared once: in its pass, or here. scripts/gen-pipeline-options.py
// expands both into PipelineOptions.h.inc, whose rows give
//   - TrainingOptions / PrecisionOptions (Pipelines.h),
//   - the pipelines' textual options (amp-opt --pass-pipeline=...),
//   - the tools' flags (PipelineFlags.h: amp-compile, amp-run),
//   - the typed keywords of the Python API (amp-compile --describe-flags).
//
//===----------------------------------------------------------------------===//

#ifndef AMP_PIPELINES_PIPELINEOPTIONS_TD
#define AMP_PIPELINES_PIPELINEOPTIONS_TD

include "amp/Transforms/Passes.td"

// The options of `pass` that a pipeline takes, held in its options struct
// as member `member`: `only` (C++ names; empty: all) and `renames`
// ([C++ name, the pipeline's flag, the pipeline's C++ name]).
class PassOptionsIn<PassBase p, string m, list<string> o = [],
                    list<list<string>> r = []> {
  PassBase pass = p;
  string member = m;
  list<string> only = o;
  list<list<string>> renames = r;
}

// A group of pipeline options: `own` declared here, the rest from passes.
// `name` is the macro prefix of its rows (AMP_<name>_OPTION, ...).
class PipelineOptionGroup<string n, list<Option> ownOptions,
                          list<PassOptionsIn> passOptions> {
  string name = n;
  list<Option> own = ownOptions;
  list<PassOptionsIn> passes = passOptions;
}

// A forward graph without a loss op gets one (amp-add-loss).
def AMPLossPipelineOptions : PipelineOptionGroup<"LOSS", [
    Option<"lossFn", "loss-fn", "std::string", /*default=*/"\"\"",
           "A graph without a loss op: append one (cross_entropy, nll or mse, "
           "amp-add-loss) against a new input --label; empty: the graph has "
           "its loss output">
  ], [
    PassOptionsIn<AMPAddLoss, "addLoss", ["output", "label"],
                  [["output", "loss-of", "lossOf"]]>
  ]>;

// The rest of a training step: gradients, the update, loss scaling.
def AMPTrainingPipelineOptions : PipelineOptionGroup<"TRAINING", [
    Option<"differentiate", "differentiate", "bool", /*default=*/"true",
           "false: the module holds its gradients already (amp.grad results, "
           "e.g. onnxruntime-training artifacts): no add-loss, no autodiff">
  ], [
    PassOptionsIn<AMPAutodiff, "autodiff">,
    PassOptionsIn<AMPOptimizer, "optim">,
    PassOptionsIn<AMPLossScaling, "scaling", [],
                  [["mode", "loss-scaling", "lossScaling"]]>
  ]>;

def AMPPrecisionPipelineOptions : PipelineOptionGroup<"PRECISION", [
    Option<"precision", "precision", "std::string", /*default=*/"\"fp32\"",
           "fp32, fp16 or bf16 (fp16 / bf16: amp-autocast)">,
    Option<"keepWeightCasts", "keep-weight-casts", "bool", /*default=*/"false",
           "A training step (fp16 / bf16) keeps each updated parameter's "
           "low-precision copy as state, written by the optimizer update "
           "(amp-keep-weight-casts): one pass over the weights less a step, "
           "2 bytes a parameter more at the peak">,
    Option<"recastWeights", "recast-weights", "bool", /*default=*/"true",
           "A training step (fp16 / bf16) casts each weight again for the "
           "backward instead of keeping the forward's copy until then "
           "(amp-recast-weights): 2 bytes a parameter less at the end of the "
           "forward, one pass over the weights more">
  ], [
    PassOptionsIn<AMPAutocast, "autocast",
                  ["policy", "blockList", "f32Accumulators"]>
  ]>;

#endif // AMP_PIPELINES_PIPELINEOPTIONS_TD
