//===- AutocastPolicy.cpp - reading precision policies --------------------===//
//
// A policy file is JSON:
//
//   {
//     "extends": "default",            // or "none": replace the default
//     "ops":   { "amp.matmul": {"class": "lower", "accumulate": "f32"},
//                "amp.exp": "fp32" },   // a class alone is enough
//     "nodes": { "/fc1/Gemm": "fp32" }  // ONNX node names: overrides
//   }
//
//===----------------------------------------------------------------------===//

#include "amp/Dialect/AMP/IR/AMPOps.h"
#include "amp/Transforms/Autocast.h"
#include "amp/Transforms/AutocastOpInterface.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;
using namespace mlir::amp;

bool mlir::amp::isAutocastPolicyRefinement(llvm::StringRef name) {
  return llvm::StringSwitch<bool>(name)
      .Cases({"linalg.generic.contraction", "linalg.generic.convolution",
              "linalg.generic.reduction", "linalg.generic.elementwise"},
             true)
      .Default(false);
}

static const char kDefaultPolicy[] =
#include "DefaultPolicy.inc"
    ;

llvm::StringRef mlir::amp::stringifyPrecisionClass(PrecisionClass c) {
  switch (c) {
  case PrecisionClass::Lower:
    return "lower";
  case PrecisionClass::FP32:
    return "fp32";
  case PrecisionClass::Follow:
    return "follow";
  case PrecisionClass::Promote:
    return "promote";
  case PrecisionClass::Storage:
    return "storage";
  }
  return "unknown";
}

std::optional<PrecisionClass> mlir::amp::parsePrecisionClass(llvm::StringRef s) {
  if (s == "lower")
    return PrecisionClass::Lower;
  if (s == "fp32")
    return PrecisionClass::FP32;
  if (s == "follow")
    return PrecisionClass::Follow;
  if (s == "promote")
    return PrecisionClass::Promote;
  if (s == "storage")
    return PrecisionClass::Storage;
  return std::nullopt;
}

namespace {
/// The ops of the storage class and their activation operands:
/// batch_norm(x, scale, bias, mean, var) keeps x, batch_norm_grad(x, scale,
/// dy) keeps x and dy in the target type.
const unsigned kBatchNormActivations[] = {0}, kBatchNormGradActivations[] = {0, 2};
const std::pair<llvm::StringRef, llvm::ArrayRef<unsigned>> kStorageOps[] = {
    {BatchNormOp::getOperationName(), kBatchNormActivations},
    {BatchNormGradOp::getOperationName(), kBatchNormGradActivations}};
} // namespace

llvm::ArrayRef<unsigned> mlir::amp::storageOperands(llvm::StringRef opName) {
  for (auto [name, operands] : kStorageOps)
    if (opName == name)
      return operands;
  return {};
}

std::string mlir::amp::storageOpNames() {
  std::string list;
  for (auto [name, operands] : kStorageOps)
    list += (list.empty() ? "" : ", ") + std::string(name);
  return list;
}

/// ONNX op types users may write by habit, with the op to write instead.
static llvm::StringRef onnxHint(llvm::StringRef name) {
  static const std::pair<const char *, llvm::StringRef> hints[] = {
      {"MatMul", MatMulOp::getOperationName()},
      {"Gemm", GemmOp::getOperationName()},
      {"Conv", ConvOp::getOperationName()},
      {"Softmax", SoftmaxOp::getOperationName()},
      {"ConvTranspose", ConvTransposeOp::getOperationName()},
      {"LayerNormalization", LayerNormOp::getOperationName()},
      {"BatchNormalization", BatchNormOp::getOperationName()},
      {"Relu", ReluOp::getOperationName()},
      {"Add", AddOp::getOperationName()},
      {"Mul", MulOp::getOperationName()},
      {"ReduceSum", ReduceSumOp::getOperationName()},
      {"ReduceMean", ReduceMeanOp::getOperationName()},
      {"SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyLossOp::getOperationName()}};
  for (auto [onnx, amp] : hints)
    if (name == onnx)
      return amp;
  return {};
}

static LogicalResult parseRule(const llvm::json::Value &v, llvm::StringRef key,
                               llvm::StringRef source, PolicyRule &rule,
                               function_ref<InFlightDiagnostic()> emitError) {
  std::string clsName;
  if (auto s = v.getAsString()) {
    clsName = s->str();
  } else if (auto *obj = v.getAsObject()) {
    for (const auto &kv : *obj)
      if (kv.first != "class" && kv.first != "accumulate")
        return emitError() << source << ": '" << key << "': unknown field '" << kv.first.str()
                           << "' (known: class, accumulate)";
    auto cls = obj->getString("class");
    if (!cls)
      return emitError() << source << ": '" << key << "' needs a \"class\" string";
    clsName = cls->str();
    if (auto acc = obj->getString("accumulate")) {
      if (*acc != "f32" && *acc != "f16" && *acc != "bf16")
        return emitError() << source << ": '" << key << "': accumulate must be "
                           << "f32, f16 or bf16, got '" << *acc << "'";
      rule.accumulate = acc->str();
    } else if (obj->get("accumulate")) {
      return emitError() << source << ": '" << key << "': accumulate must be a string";
    }
  } else {
    return emitError() << source << ": '" << key << "' must be a class name or an object";
  }
  auto cls = parsePrecisionClass(clsName);
  if (!cls)
    return emitError() << source << ": '" << key << "': unknown class '" << clsName
                       << "' (known: lower, fp32, follow, promote, storage)";
  rule.cls = *cls;
  rule.source = source.str();
  return success();
}

FailureOr<Policy> Policy::parse(llvm::StringRef text, llvm::StringRef source, const Policy &base,
                                MLIRContext *ctx, function_ref<InFlightDiagnostic()> emitError) {
  auto json = llvm::json::parse(text);
  if (!json) {
    std::string msg = llvm::toString(json.takeError());
    return LogicalResult(emitError() << source << ": not valid JSON: " << msg);
  }
  auto *root = json->getAsObject();
  if (!root)
    return LogicalResult(emitError() << source << ": the policy must be a JSON object");
  for (const auto &kv : *root)
    if (kv.first != "ops" && kv.first != "nodes" && kv.first != "extends" &&
        kv.first != "description")
      return LogicalResult(emitError() << source << ": unknown top-level key '" << kv.first.str()
                                       << "' (known: extends, ops, nodes, description)");
  Policy p = base;
  if (auto ext = root->getString("extends")) {
    if (*ext == "none")
      p = Policy();
    else if (*ext != "default")
      return LogicalResult(emitError() << source << ": \"extends\" must be "
                                       << "\"default\" or \"none\", got '" << *ext << "'");
  }
  std::vector<std::string> unknown;
  if (const auto *v = root->get("ops")) {
    auto *ops = v->getAsObject();
    if (!ops)
      return LogicalResult(emitError() << source << ": \"ops\" must be an object");
    for (const auto &kv : *ops) {
      llvm::StringRef name = kv.first;
      if (ctx && !RegisteredOperationName::lookup(name, ctx) &&
          !(isAutocastPolicyRefinement(name) &&
            RegisteredOperationName::lookup(name.rsplit('.').first, ctx))) {
        llvm::StringRef hint = onnxHint(name);
        unknown.push_back("'" + name.str() + "'" +
                          (hint.empty() ? std::string() : " (did you mean '" + hint.str() + "'?)"));
        continue;
      }
      PolicyRule rule;
      if (failed(parseRule(kv.second, name, source, rule, emitError)))
        return failure();
      if (rule.cls == PrecisionClass::Storage && storageOperands(name).empty())
        return LogicalResult(emitError()
                             << source << ": '" << name
                             << "': class 'storage' (low-precision activations, f32 statistics "
                                "and arithmetic) is for ops whose activations and statistics "
                                "can be typed apart: "
                             << storageOpNames());
      p.ops[name] = rule;
    }
  }
  if (!unknown.empty()) {
    llvm::sort(unknown); // JSON objects do not keep their order
    std::string list;
    for (const auto &u : unknown)
      list += (list.empty() ? "" : ", ") + u;
    return LogicalResult(emitError() << source << ": unknown op name(s) " << list
                                     << "; use registered op names such as "
                                        "'amp.matmul'");
  }
  if (const auto *v = root->get("nodes")) {
    auto *nodes = v->getAsObject();
    if (!nodes)
      return LogicalResult(emitError() << source << ": \"nodes\" must be an object");
    for (const auto &kv : *nodes) {
      PolicyRule rule;
      if (failed(parseRule(kv.second, kv.first, source, rule, emitError)))
        return failure();
      p.nodes[kv.first] = rule;
    }
  }
  return p;
}

FailureOr<Policy> Policy::load(llvm::StringRef path, const Policy &base, MLIRContext *ctx,
                               function_ref<InFlightDiagnostic()> emitError) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buf)
    return LogicalResult(emitError() << "cannot read policy file '" << path
                                     << "': " << buf.getError().message());
  return parse((*buf)->getBuffer(), ("policy file " + path).str(), base, ctx, emitError);
}

Policy Policy::getDefault() {
  static const Policy def = [] {
    Policy p;
    // The default is checked by a unit test; op names are not validated
    // here because no context is at hand.
    auto parsed =
        parse(kDefaultPolicy, "default policy", Policy(), nullptr, []() -> InFlightDiagnostic {
          llvm::report_fatal_error("the compiled-in default policy is invalid");
        });
    if (succeeded(parsed))
      p = *parsed;
    return p;
  }();
  return def;
}
