//===- TrainingInfo.cpp - ONNX TrainingInfoProto: the training step's graph ---===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

/// ONNX's TrainingInfoProto: the algorithm graph (one training step, which
/// sees ModelProto.graph's initializers) becomes the function `train_step`;
/// each update_binding (initializer <- algorithm output) turns that output
/// into the initializer's new value (amp.updates), so the step is the
/// train_step form of docs/architecture.md (the training-step form).
LogicalResult importTrainingInfo(llvm::StringRef path, MLIRContext *ctx,
                                 const onnx::ModelProto &model, const ONNXImportOptions &opts,
                                 ModuleOp module, onnx::ModelProto &step) {
  Location loc = FileLineColLoc::get(ctx, path, 0, 0);
  if (model.training_info_size() > 1)
    return emitError(loc) << "the model has " << model.training_info_size()
                          << " TrainingInfoProto entries; one is supported";
  const onnx::TrainingInfoProto &ti = model.training_info(0);
  if (ti.has_initialization() && ti.initialization().node_size() > 0)
    return emitError(loc) << "TrainingInfoProto: initialization graphs ("
                          << ti.initialization().node_size()
                          << " nodes) are not supported: give the initial values as "
                             "initializers of the model's graph";
  if (!ti.has_algorithm() || ti.algorithm().node_size() == 0)
    return success();
  if (module.lookupSymbol("train_step"))
    return emitError(loc) << "TrainingInfoProto: the module already has a function "
                             "'train_step'";
  std::map<std::string, std::string> binding; // algorithm output -> initializer
  ONNXImportOptions o = opts;
  o.funcName = "train_step";
  for (const auto &kv : ti.update_binding()) {
    bool known = llvm::any_of(step.graph().initializer(),
                              [&](const onnx::TensorProto &t) { return t.name() == kv.key(); });
    bool produced = llvm::any_of(step.graph().output(), [&](const onnx::ValueInfoProto &v) {
      return v.name() == kv.value();
    });
    if (!known || !produced)
      return emitError(loc) << "TrainingInfoProto: update_binding '" << kv.key() << "' <- '"
                            << kv.value() << "': "
                            << (!known ? "no initializer of that name"
                                       : "the algorithm has no output of that name");
    if (binding.count(kv.value()))
      return emitError(loc) << "TrainingInfoProto: output '" << kv.value() << "' is bound twice";
    binding[kv.value()] = kv.key();
    o.stateInitializers.insert(kv.key());
  }
  Importer im(ctx, path, step, o);
  OwningOpRef<ModuleOp> m = im.run();
  for (auto &[l, msg] : im.errors)
    emitError(l) << "TrainingInfoProto algorithm: " << printable(msg);
  if (!im.errors.empty() || !m)
    return failure();
  auto f = m->lookupSymbol<func::FuncOp>("train_step");
  for (unsigned i = 0; i < f.getNumResults(); ++i) {
    auto n = f.getResultAttrOfType<StringAttr>(i, attrname::kOutput);
    if (!n || !binding.count(n.getValue().str()))
      continue;
    std::string key = binding[n.getValue().str()];
    // The bound value must have the initializer's type.
    for (BlockArgument a : f.getArguments()) {
      auto p = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), attrname::kParam);
      if (!p)
        p = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), attrname::kOptState);
      if (p && p.getValue() == key && a.getType() != f.getResultTypes()[i])
        return emitError(loc) << "TrainingInfoProto: update_binding '" << key << "' <- '"
                              << n.getValue() << "': " << f.getResultTypes()[i]
                              << " does not fit the initializer's " << a.getType();
    }
    f.setResultAttrs(
        i, DictionaryAttr::get(ctx, {NamedAttribute(StringAttr::get(ctx, attrname::kUpdates),
                                                    StringAttr::get(ctx, key))}));
  }
  f->remove();
  module.push_back(f);
  return success();
}
} // namespace onnx_import
