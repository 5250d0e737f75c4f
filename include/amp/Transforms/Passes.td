//===- Passes.td - amp transformation passes ---------------*- tablegen -*-===//

#ifndef AMP_TRANSFORMS_PASSES_TD
#define AMP_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def AMPFoldCasts : Pass<"amp-fold-casts"> {
  let summary = "Fold exact cast round trips and share one cast per (value, type)";
  let description = [{
    Leaves no redundant `amp.cast`:
      * a cast to the value's own type is removed;
      * `A -> B -> C` where `A -> B` is exact becomes `A -> C` (so
        `f16 -> f32 -> f16` disappears; the lossy `f32 -> f16 -> f32` stays);
      * all casts of one value to one type become a single cast placed right
        after the value's definition, shared by every user;
      * casts left without users are erased.
    Other ops are not touched, so decisions made by amp-autocast (an op kept
    in f32 on purpose) are never undone here.
  }];
  let dependentDialects = ["::mlir::amp::AMPDialect"];
}

def AMPFoldTransposes : Pass<"amp-fold-transposes"> {
  let summary = "Fold transposes into products and each other; move them to the narrow side of casts";
  let description = [{
    Removes the copies a transpose would make where the graph can read it
    differently, exactly:
      * `transpose(transpose(x))` becomes one transpose (none if the perms
        compose to the identity);
      * a narrowing float cast of a transpose becomes the transpose of the
        cast, and a transpose of a widening float cast the cast of the
        transpose (fewer bytes to move, and the transpose next to the
        product that reads it);
      * `amp.gemm` of a 2-D transpose flips `trans_a` / `trans_b` instead;
      * the 2-D transpose of an `amp.gemm` without C becomes the gemm with
        its operands swapped and flags flipped.
    An op is moved only when its input has no other user, so nothing is
    computed twice; casts are then merged as amp-fold-casts does. Part of
    the lowering pipeline (after amp-autocast, before amp-plan-memory): a
    weight transposed and then cast to bf16 for a product becomes one cast
    of the weight that the product reads transposed.
  }];
  let dependentDialects = ["::mlir::amp::AMPDialect"];
}

def AMPAutocast : Pass<"amp-autocast", "::mlir::ModuleOp"> {
  let summary = "Put every op in the precision its policy class allows";
  let description = [{
    Classes (docs/semantics.md section 2): `lower` ops (matrix products,
    convolutions) compute in the target type and accumulate in f32 (the
    `accumulate` attribute says so); `fp32` ops (softmax, normalisation,
    reductions, exp / log / pow, losses) compute in f32; `follow` ops compute
    in the target type only when every activation input already is; `promote`
    ops cast mixed inputs to the widest. Parameters (`amp.param`) stay f32
    masters and are cast once per function per type; integer and boolean
    values are never touched; function results keep their declared types
    (unless keep-io-types=false). Ops carrying `amp.differentiates = "<node>"`
    (backward ops) take the precision of that forward node unless the policy
    names them.

    `f32-accumulators`: a `lower` product accumulating in f32 keeps its bias
    (Gemm's C, a Conv's B) f32, added to the accumulator before the one
    rounding; and a product, product gradient or sum in the target type
    whose result only f32 reads (through reshapes) writes its f32
    accumulator instead of rounding it and casting back: the weight and bias
    gradients of the f32 masters, logits into the loss, residual branches.
    `auto` (the default) does both for bf16, whose range is f32's, and
    neither for f16, which keeps PyTorch's roundings: its f16 weight
    gradients overflow and skip the step under dynamic loss scaling, so
    fp16 follows GradScaler's steps; `on` / `off` force it.

    Functions of upstream ops (linalg on tensors, tensor, arith, math, TOSA:
    torch-mlir's and IREE's input) are read through AutocastOpInterface
    (registerAutocastExternalModels): `lower` ops (products, convolutions)
    read the target type through linalg.generic / tosa.cast casts and keep
    f32 accumulators, every other op keeps its types; the report and the
    picture are the same (docs/embedding.md).

    The policy is data: policies/default.json is compiled in; `policy=<file>`
    amends it (or replaces it with "extends": "none"). `report=<file>` writes
    one JSON entry per op (node, op, class, compute_type, accumulate, reason)
    and a summary; `dot=<file>` a Graphviz picture coloured by precision (SVG
    and PNG too when `dot` is installed); `why=<node>` explains one decision
    as a remark.
  }];
  let dependentDialects = ["::mlir::amp::AMPDialect"];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"f16\"",
           "Low-precision type: f16 or bf16">,
    Option<"policy", "policy", "std::string", /*default=*/"\"\"",
           "JSON policy file amending (or replacing) the default">,
    Option<"report", "report", "std::string", /*default=*/"\"\"",
           "Write the per-op decision report (JSON) here">,
    Option<"dot", "dot", "std::string", /*default=*/"\"\"",
           "Write a Graphviz picture of the result here (.dot)">,
    Option<"keepIOTypes", "keep-io-types", "bool", /*default=*/"true",
           "Keep float inputs and results in their declared types">,
    ListOption<"blockList", "block-list", "std::string",
               "ONNX node names to keep in fp32">,
    Option<"why", "why", "std::string", /*default=*/"\"\"",
           "Explain the decision for this node (a remark)">,
    Option<"f32Accumulators", "f32-accumulators", "std::string", /*default=*/"\"auto\"",
           "Products / sums read only in f32 write their f32 accumulator: auto (bf16 only), on, off">
  ];
}

def AMPAutodiff : Pass<"amp-autodiff", "::mlir::ModuleOp"> {
  let summary = "Build the backward graph: gradients of the loss for every parameter";
  let description = [{
    Reverse-mode differentiation of each function with `amp.param`
    arguments: the loss (the result named `loss`, or the one given by
    `loss=`) must be a scalar; every op between the parameters and the loss
    states its gradient (GradientOpInterface); gradients of values used
    more than once are summed. The gradient of each parameter that is not
    `frozen` is appended as a result marked `amp.grad = "<name>"`; the rows
    named by `padding-rows` (name:row, row along the first dimension, as
    nn.Embedding's padding_idx) have a gradient of 0. Backward
    ops carry `amp.differentiates = "<forward node>"` (amp-autocast gives
    them their forward op's precision). Forward values nothing needs are
    erased.
  }];
  let dependentDialects = ["::mlir::amp::AMPDialect", "::mlir::arith::ArithDialect"];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"loss\"",
           "Name (amp.output) of the scalar result to differentiate">,
    ListOption<"frozen", "frozen", "std::string",
               "Parameters that get no gradient">,
    ListOption<"paddingRows", "padding-rows", "std::string",
               "Rows of a parameter that get no gradient, as name:row "
               "(nn.Embedding's padding_idx: the row's gradient is 0)">
  ];
}

def AMPAddLoss : Pass<"amp-add-loss", "::mlir::ModuleOp"> {
  let summary = "Training spec for a forward graph: append a loss against a new label input";
  let description = [{
    For graphs without a loss op (what torch.onnx.export gives for a model
    without its loss): the result named `output` gets a loss against a new
    graph input named `label`, returned as the result `loss` (the forward
    results stay):

    - cross_entropy: softmax cross entropy of scores [N, C, ...] against
      int64 class labels [N, ...] (mean; PyTorch's F.cross_entropy);
    - nll: negative log likelihood of log-probabilities [N, C, ...] against
      int64 labels (mean; F.nll_loss);
    - mse: mean of (output - label)^2 over every element, the label of the
      output's shape in f32 (F.mse_loss).

    amp-autodiff then differentiates `loss`.
  }];
  let dependentDialects = ["::mlir::amp::AMPDialect"];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"\"",
           "The result (amp.output name) the loss reads (default: the only one)">,
    Option<"kind", "kind", "std::string", /*default=*/"\"cross_entropy\"",
           "cross_entropy, nll or mse">,
    Option<"label", "label", "std::string", /*default=*/"\"labels\"",
           "Name of the new label input">
  ];
}

def AMPLossScaling : Pass<"amp-loss-scaling", "::mlir::ModuleOp"> {
  let summary = "GradScaler as a rewrite: scale the backward, unscale + check, skip, update the scale";
  let description = [{
    Runs after amp-autodiff and amp-optimizer, on every training-step
    function (one with optimizer updates). docs/semantics.md section 3:

    - the backward is seeded with the loss scale S instead of 1, so every
      gradient is S times the true one;
    - one `amp.unscale_and_check` takes all parameter gradients to f32
      times 1/S (1/S computed in f64, as PyTorch) and sets `found_inf`
      when any value is inf or NaN;
    - with max-norm > 0, `amp.clip_grad_norm` clips the unscaled gradients;
    - the optimizer updates (parameters, moments, step counter) read that
      found_inf and change nothing when it is set: no host control flow;
    - mode=dynamic: the scale and its trackers are state arguments
      (`amp.opt_state = "loss_scale"`, `"growth_tracker"`,
      `"hysteresis_left"`) updated by `amp.update_scale` from the scale
      captured before the step; mode=static: a constant scale;
      mode=none: scale 1, the inf check (and skip) stays unless
      check-inf=false;
    - results `loss_scale` (the scale this step's backward used) and
      `found_inf` are added for the runner's metrics (and `grad_norm` when
      clipping);
    - accumulate=k > 1: every call is one micro-batch; the backward is seeded
      with S / k (PyTorch's recipe divides the loss by k), the scaled
      gradients add up in state (`amp.opt_state = "<p>.grad_accum"`,
      counter `"micro_step"`), and only the k-th call unscales, checks,
      updates and moves the scale (`amp.micro_step` gives the flag; the
      updates see "skip" on the other calls, the scale state and the
      accumulators are selected with `amp.where`).
  }];
  let dependentDialects = ["::mlir::amp::AMPDialect", "::mlir::arith::ArithDialect"];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"dynamic\"", "dynamic, static or none">,
    Option<"initScale", "init-scale", "double", /*default=*/"65536.0",
           "The first (dynamic) or the fixed (static) scale">,
    Option<"growthFactor", "growth-factor", "double", /*default=*/"2.0", "Scale growth factor">,
    Option<"backoffFactor", "backoff-factor", "double", /*default=*/"0.5",
           "Scale backoff factor">,
    Option<"growthInterval", "growth-interval", "int64_t", /*default=*/"2000",
           "Clean steps before the scale grows">,
    Option<"hysteresis", "hysteresis", "int64_t", /*default=*/"1",
           "Overflows tolerated before a backoff (1 = PyTorch; DeepSpeed uses 2)">,
    Option<"minScale", "min-scale", "double", /*default=*/"0.0",
           "Floor of the scale (0: none)">,
    Option<"onMinScale", "on-min-scale", "std::string", /*default=*/"\"error\"",
           "An overflow at min-scale: error (stop the run) or warn">,
    Option<"maxNorm", "max-norm", "double", /*default=*/"0.0",
           "Clip the unscaled gradients to this global L2 norm (0: no clipping)">,
    Option<"checkInf", "check-inf", "bool", /*default=*/"true",
           "Without loss scaling (none): still check the gradients and skip steps "
           "with inf / NaN">,
    Option<"accumulate", "accumulate", "int64_t", /*default=*/"1",
           "Gradient accumulation: micro-batches per update (the loss of each is "
           "divided by it, as in PyTorch's recipe)">,
    Option<"dataParallel", "data-parallel", "bool", /*default=*/"false",
           "Data parallel: the gradients averaged across the ranks (amp.all_reduce) "
           "before unscale_and_check, so every rank takes the same skip decision">
  ];
}

def AMPOptimizer : Pass<"amp-optimizer", "::mlir::ModuleOp"> {
  let summary = "Turn gradients into optimizer updates: the training-step form";
  let description = [{
    Runs after amp-autodiff. Each gradient result (`amp.grad = "<p>"`) is
    replaced by the updated parameter (`amp.updates = "<p>"`) from an
    `amp.sgd_update` or `amp.adam_update`; the optimizer state becomes
    arguments (`amp.opt_state = "<p>.momentum_buffer"`, `"<p>.exp_avg"`,
    `"<p>.exp_avg_sq"`, and `"step"`, all starting at zero) with matching
    results, as docs/architecture.md (the training-step form) has it. The updates read a `found_inf`
    flag (false here; amp-loss-scaling supplies the real one) and change
    nothing when it is set. The running statistics of an `amp.batch_norm` in
    training mode (parameters without a gradient) become state too: its
    `running_mean` / `running_var` results are returned with `amp.updates`
    naming them, so every step's forward moves them (a skipped step's too,
    as PyTorch's forward does); a statistic shared by two batch norms is an
    error. A bad hyper-parameter (NaN and inf included) is an error naming
    it.
  }];
  let dependentDialects = ["::mlir::amp::AMPDialect", "::mlir::arith::ArithDialect"];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"sgd\"",
           "sgd, adam or adamw">,
    Option<"lr", "lr", "double", /*default=*/"0.01", "Learning rate">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0", "SGD momentum">,
    Option<"dampening", "dampening", "double", /*default=*/"0.0", "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false", "SGD Nesterov momentum">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"-1.0",
           "Weight decay (default: 0 for sgd / adam, 0.01 for adamw, as PyTorch)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "Adam beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "Adam epsilon">,
    Option<"adamMode", "adam-mode", "std::string", /*default=*/"\"torch\"",
           "adamw's formulas: torch (PyTorch) or hf (Hugging Face's, as "
           "onnxruntime-training's AdamWOptimizer adam_mode 1)">
  ];
}

def AMPRecastWeights : Pass<"amp-recast-weights", "::mlir::ModuleOp"> {
  let summary = "Cast a weight again for the backward instead of keeping the forward's copy";
  let description = [{
    After amp-autocast (and cse), a parameter's f16 / bf16 cast is read by
    the forward's products and again by the backward's (a Linear's input
    gradient reads its weight): its copy stays live from the forward to
    the backward, 2 bytes a parameter at the end of the forward, where a
    transformer's training step peaks. This pass gives the backward readers
    (ops with `amp.differentiates`) a cast of their own, made right before
    the first of them, so the forward's copy dies after the forward's last
    reader. The values are the same bit for bit (the master weight does not
    change within the step); the price is one more pass over those
    weights. amp-lower-for-runtime runs it (fp16 / bf16) unless
    recast-weights=false, and not with keep-weight-casts (whose copies are
    state anyway).
  }];
  let dependentDialects = ["::mlir::amp::AMPDialect"];
}

def AMPKeepWeightCasts : Pass<"amp-keep-weight-casts", "::mlir::ModuleOp"> {
  let summary = "Carry each updated parameter's f16 / bf16 cast across steps as state";
  let description = [{
    After amp-autocast, a training step casts each f32 master weight to its
    low-precision type at its start and updates the master weight at its
    end. For every parameter (`amp.param` with `amp.init`) that the step
    updates (a result `amp.updates = <name>`) and that is cast to exactly
    one of f16 / bf16, this pass:
      * adds a state argument `<name>.bf16` (or `.f16`): `amp.opt_state`,
        `amp.init` = the initial weight rounded as amp.cast rounds it;
      * makes every reader of the cast read that argument instead;
      * casts the updated weight right after the op that makes it and
        returns it as the state's next value (`amp.updates`).
    The values are the same bit for bit (cast(new weight) is what the next
    step would cast); what changes is where the cast runs:
    amp-lower-to-runtime writes it inside the optimizer update's own pass
    over the weight (sgd_update / adam_update with a low-precision output),
    so no pass reads every master weight again at the next step's start.
    Apex O2's f16 model weights beside f32 master weights. Frozen
    parameters, parameters without a cast or with casts to both types are
    left as they are. amp-lower-for-runtime runs it after amp-fold-transposes
    (which casts a weight before its transpose) when keep-weight-casts=true
    (off by default: the copies cost 2 bytes a parameter at the peak).
  }];
  let dependentDialects = ["::mlir::amp::AMPDialect"];
}

def AMPPlanMemory : Pass<"amp-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Assign every tensor an offset in one static arena per function";
  let description = [{
    Liveness over the function's block, 64-byte alignment. Values are
    placed largest first, each into the smallest gap left by the values
    live with it (greedy by size, as TFLite's arena planner), or best fit in
    order of definition where that packs tighter: the arena is at or within
    a few percent of the most bytes live at once. Reshape-like ops alias
    their input (so does a transpose that moves only dims of size 1).
    State results written straight into their argument's buffer (an
    optimizer's new parameter and moments, the step count and scale, the
    kept f16 / bf16 weight copies: `inPlaceResults`) take no slot; an
    `amp.add` (of its result's type) or `amp.unscale_and_check` output
    whose operand dies at the op takes that operand's slot. Writes
    `amp.slots` on every amp op (an offset per result, -1 for aliases and
    in-place results) and `amp.arena_bytes` / `amp.arena_bytes_if_f32` on
    the function: the peak, and what it would be with every float in f32.
    `report=<file>` writes the same as JSON, with `live_bytes` (the most
    bytes live at once), `live_at_peak` (their bytes by kind: backward
    results, forward values saved for the backward, others; the largest)
    and `predicted`: the program's bytes by category (parameters,
    low-precision copies, optimizer state, inputs, results, the arena, the
    kernels' workspace, the runtime's own) and their sum `peak_bytes`.
  }];
  let options = [
    Option<"report", "report", "std::string", /*default=*/"\"\"",
           "Write the plan summary (JSON) here">
  ];
}

#endif // AMP_TRANSFORMS_PASSES_TD
