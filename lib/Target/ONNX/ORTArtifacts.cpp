//===- ORTArtifacts.cpp - onnxruntime-training artifacts (training model + checkpoint) ---===//
//===----------------------------------------------------------------------===//

#include "Importer.h"
#include "ORTCheckpoint.h"

namespace onnx_import {} // namespace onnx_import

using namespace onnx_import;

static constexpr llvm::StringLiteral kGradBufferSuffix = "_grad.accumulation.buffer";

OwningOpRef<ModuleOp> mlir::amp::importORTTrainingArtifacts(llvm::StringRef trainingModel,
                                                            llvm::StringRef checkpoint,
                                                            MLIRContext *ctx,
                                                            const ONNXImportOptions &opts) {
  ctx->loadDialect<AMPDialect, arith::ArithDialect, func::FuncDialect>();
  Location loc = FileLineColLoc::get(ctx, trainingModel, 0, 0);
  auto fail = [&](const llvm::Twine &msg) -> OwningOpRef<ModuleOp> {
    emitError(loc) << printable((trainingModel + ": " + msg).str());
    return nullptr;
  };
  onnx::ModelProto model;
  if (llvm::Error e = loadModel(trainingModel, model)) {
    emitError(loc) << printable(llvm::toString(std::move(e)));
    return nullptr;
  }
  auto ck = readORTCheckpoint(checkpoint);
  if (!ck) {
    emitError(FileLineColLoc::get(ctx, checkpoint, 0, 0))
        << printable(llvm::toString(ck.takeError()));
    return nullptr;
  }
  onnx::GraphProto &g = *model.mutable_graph();
  if (g.output_size() == 0)
    return fail("the training model has no outputs (its first output is the loss)");
  const std::string lossName = g.output(0).name();

  std::set<std::string> trainable, inCheckpoint;
  for (const auto &t : ck->trainable) {
    if (!trainable.insert(t.name).second)
      return fail("the checkpoint lists the parameter '" + t.name + "' twice");
    inCheckpoint.insert(t.name);
  }
  for (const auto &t : ck->frozen)
    if (!inCheckpoint.insert(t.name).second)
      return fail("the checkpoint lists the parameter '" + t.name + "' twice");
  if (trainable.empty())
    return fail("the checkpoint has no trainable parameter");

  // The gradient accumulators: each trainable parameter's gradient value,
  // which the step returns instead of writing it into a buffer.
  std::map<std::string, std::string> gradOf;
  std::set<std::string> dropInputs, dropOutputs;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (const auto &node : g.node()) {
    if (node.op_type() != "InPlaceAccumulatorV2" || node.domain() != "com.microsoft") {
      *kept.Add() = node;
      continue;
    }
    if (node.input_size() < 2)
      return fail("an InPlaceAccumulatorV2 node has fewer than 2 inputs");
    llvm::StringRef buffer = node.input(0);
    if (!buffer.ends_with(kGradBufferSuffix))
      return fail("InPlaceAccumulatorV2 writes '" + buffer + "', which is not named <parameter>" +
                  kGradBufferSuffix + " (not an artifact of generate_artifacts?)");
    std::string p = buffer.drop_back(kGradBufferSuffix.size()).str();
    if (!trainable.count(p))
      return fail("InPlaceAccumulatorV2 accumulates the gradient of '" + p +
                  "', which is not a trainable parameter of the checkpoint");
    if (!gradOf.emplace(p, node.input(1)).second)
      return fail("the gradient of '" + p + "' is accumulated twice");
    dropInputs.insert(buffer.str());
    if (node.input_size() > 2 && !node.input(2).empty())
      dropInputs.insert(node.input(2));
    for (const auto &o : node.output())
      if (!o.empty())
        dropOutputs.insert(o);
  }
  for (const auto &t : ck->trainable)
    if (!gradOf.count(t.name))
      return fail("the trainable parameter '" + t.name +
                  "' has no gradient accumulator (InPlaceAccumulatorV2) in the training model");
  for (const auto &node : kept)
    for (const auto &in : node.input())
      if (dropInputs.count(in) || dropOutputs.count(in))
        return fail("node '" + (node.name().empty() ? node.op_type() : node.name()) + "' reads '" +
                    in +
                    "', a gradient buffer or accumulator flag, "
                    "which is not supported");
  g.mutable_node()->Swap(&kept);

  // Outputs: the loss, the model's other outputs, then the gradients.
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> outs;
  for (const auto &o : g.output())
    if (!dropOutputs.count(o.name()))
      *outs.Add() = o;
  if (outs.empty() || outs[0].name() != lossName)
    return fail("the first output '" + lossName + "' (the loss) is an accumulator's flag");
  for (const auto &t : ck->trainable)
    outs.Add()->set_name(gradOf[t.name]);
  g.mutable_output()->Swap(&outs);

  // Inputs: the checkpoint's parameters become initializers; the gradient
  // buffers and the reset flag go; the rest is the batch.
  std::vector<std::string> frozen;
  for (const auto &init : g.initializer())
    if (isFloatType(init.data_type()))
      frozen.push_back(init.name()); // ORT's own constants (seeds, statistics)
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> ins;
  std::set<std::string> declared;
  for (const auto &in : g.input()) {
    if (dropInputs.count(in.name()))
      continue;
    if (!inCheckpoint.count(in.name())) {
      *ins.Add() = in;
      continue;
    }
    declared.insert(in.name());
  }
  auto addParam = [&](const ORTTensor &t, bool isFrozen) -> bool {
    if (!declared.count(t.name)) {
      (void)fail("the checkpoint's parameter '" + t.name +
                 "' is not an input of the training model");
      return false;
    }
    for (const auto &in : g.input()) {
      if (in.name() != t.name || !in.type().has_tensor_type())
        continue;
      const auto &tt = in.type().tensor_type();
      bool bad = tt.elem_type() && tt.elem_type() != t.dataType;
      if (tt.has_shape()) {
        bad |= tt.shape().dim_size() != (int)t.dims.size();
        for (int k = 0; !bad && k < tt.shape().dim_size(); ++k)
          bad = tt.shape().dim(k).has_dim_value() && tt.shape().dim(k).dim_value() != t.dims[k];
      }
      if (bad) {
        (void)fail("the checkpoint's parameter '" + t.name +
                   "' does not have the type and shape the training model declares");
        return false;
      }
    }
    onnx::TensorProto *init = g.add_initializer();
    init->set_name(t.name);
    init->set_data_type(t.dataType);
    for (int64_t d : t.dims)
      init->add_dims(d);
    init->set_raw_data(t.raw);
    if (isFrozen)
      frozen.push_back(t.name);
    return true;
  };
  for (const auto &t : ck->trainable)
    if (!addParam(t, false))
      return nullptr;
  for (const auto &t : ck->frozen)
    if (!addParam(t, true))
      return nullptr;
  g.mutable_input()->Swap(&ins);

  ONNXImportOptions o = opts;
  o.funcName = "train_step";
  o.frozen = frozen;
  o.importTrainingInfo = false;
  Importer im(ctx, trainingModel, model, o);
  OwningOpRef<ModuleOp> module = im.run();
  for (auto &[l, msg] : im.errors)
    emitError(l) << printable(msg);
  if (!im.errors.empty() || !module)
    return nullptr;
  auto f = module->lookupSymbol<func::FuncOp>("train_step");
  Builder b(ctx);
  auto lt = dyn_cast<RankedTensorType>(f.getResultTypes()[0]);
  if (!lt || lt.getNumElements() != 1 || !isa<FloatType>(lt.getElementType()))
    return fail("the loss '" + lossName + "' is not a float scalar");
  f.setResultAttrs(
      0, b.getDictionaryAttr({b.getNamedAttr(attrname::kOutput, b.getStringAttr("loss"))}));
  unsigned first = f.getNumResults() - ck->trainable.size();
  for (auto [k, t] : llvm::enumerate(ck->trainable))
    f.setResultAttrs(
        first + k, b.getDictionaryAttr({b.getNamedAttr(attrname::kGrad, b.getStringAttr(t.name))}));
  // The backward's seed: the loss's gradient, an initializer of value 1.
  std::string seedName = lossName + "_grad";
  for (auto c : f.getOps<arith::ConstantOp>()) {
    auto nl = dyn_cast<NameLoc>(c.getLoc());
    auto v = dyn_cast<DenseElementsAttr>(c.getValue());
    if (nl && nl.getName() == seedName && v && v.isSplat() && isa<FloatType>(v.getElementType()) &&
        v.getSplatValue<APFloat>().convertToDouble() == 1.0)
      c->setAttr(attrname::kLossSeed, b.getUnitAttr());
  }
  return module;
}

FailureOr<ORTOptimizerSpec> mlir::amp::readORTOptimizerModel(llvm::StringRef path,
                                                             MLIRContext *ctx) {
  Location loc = FileLineColLoc::get(ctx, path, 0, 0);
  auto fail = [&](const llvm::Twine &msg) -> FailureOr<ORTOptimizerSpec> {
    emitError(loc) << printable((path + ": " + msg).str());
    return failure();
  };
  onnx::ModelProto model;
  if (llvm::Error e = loadModel(path, model)) {
    emitError(loc) << printable(llvm::toString(std::move(e)));
    return failure();
  }
  const onnx::GraphProto &g = model.graph();
  if (g.node_size() != 1 || g.node(0).domain() != "com.microsoft")
    return fail("an optimizer model is one com.microsoft AdamWOptimizer or SGDOptimizerV2 "
                "node; this graph has " +
                llvm::Twine(g.node_size()) + " node(s)");
  const onnx::NodeProto &n = g.node(0);
  auto expect = [&](std::initializer_list<const char *> names) -> LogicalResult {
    int k = 0;
    for (const char *want : names) {
      if (k >= n.input_size() || n.input(k) != want)
        return fail(n.op_type() + " input " + llvm::Twine(k) + " must be the graph input '" + want +
                    "'");
      ++k;
    }
    if (n.input_size() > k && !n.input(k).empty())
      return fail(n.op_type() + ": the update_signal input is not supported");
    return success();
  };
  ORTOptimizerSpec s;
  if (n.op_type() == "SGDOptimizerV2") {
    if (failed(expect({"learning_rate", "params", "gradients"})))
      return failure();
    if (n.attribute_size())
      return fail("SGDOptimizerV2 has an unknown attribute '" + n.attribute(0).name() + "'");
    s.optimizer = "sgd";
    return s;
  }
  if (n.op_type() != "AdamWOptimizer")
    return fail("unsupported optimizer op com.microsoft." + n.op_type() +
                " (AdamWOptimizer and SGDOptimizerV2 are)");
  if (failed(expect({"learning_rate", "step", "params", "gradients", "first_order_moments",
                     "second_order_moments"})))
    return failure();
  s.optimizer = "adamw";
  int64_t mode = 0, correctBias = 1;
  for (const auto &a : n.attribute()) {
    const std::string &k = a.name();
    if (k == "alpha")
      s.beta1 = a.f();
    else if (k == "beta")
      s.beta2 = a.f();
    else if (k == "epsilon")
      s.eps = a.f();
    else if (k == "weight_decay")
      s.weightDecay = a.f();
    else if (k == "adam_mode")
      mode = a.i();
    else if (k == "correct_bias")
      correctBias = a.i();
    else
      return fail("AdamWOptimizer has an unknown attribute '" + k + "'");
  }
  if (mode != 0 && mode != 1)
    return fail("AdamWOptimizer adam_mode " + llvm::Twine(mode) + " is unknown (0 or 1)");
  if (correctBias != 1)
    return fail("AdamWOptimizer correct_bias = " + llvm::Twine(correctBias) +
                " (no bias correction) is not supported");
  s.adamMode = mode == 0 ? "torch" : "hf";
  return s;
}

FailureOr<ORTOptimizerState> mlir::amp::readORTOptimizerState(llvm::StringRef checkpoint,
                                                              MLIRContext *ctx) {
  auto ck = readORTCheckpoint(checkpoint);
  if (!ck) {
    emitError(FileLineColLoc::get(ctx, checkpoint, 0, 0))
        << printable(llvm::toString(ck.takeError()));
    return failure();
  }
  ORTOptimizerState s;
  s.present = ck->hasOptimizerState;
  s.step = ck->step;
  s.learningRate = ck->initialLearningRate;
  for (auto &[p, ms] : ck->moments)
    for (auto &[name, t] : ms) {
      if (t.dataType != onnx::TensorProto::FLOAT) {
        emitError(FileLineColLoc::get(ctx, checkpoint, 0, 0))
            << checkpoint << ": the moment '" << name << "' of '" << p << "' is not f32";
        return failure();
      }
      s.moments[p][name] = t.raw;
    }
  return s;
}
