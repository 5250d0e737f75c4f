//===- OpsLoss.cpp - SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss -----===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

namespace {

LogicalResult handleLoss(NodeCtx &n, llvm::StringRef opName, int results) {
  if (failed(n.allowAttrs({"reduction", "ignore_index"})))
    return failure();
  auto red = n.getString("reduction", std::string("mean"));
  if (failed(red))
    return failure();
  auto redAttr = enumAttr<ReductionAttr>(n, "reduction", *red);
  if (failed(redAttr))
    return failure();
  SmallVector<NamedAttribute> attrs{named(n, "reduction", *redAttr)};
  if (n.attr("ignore_index")) {
    auto ii = n.getInt("ignore_index", 0);
    if (failed(ii))
      return failure();
    attrs.push_back(named(n, "ignore_index", i64(n, *ii)));
  }
  auto s = n.input(0), l = n.input(1);
  if (failed(s) || failed(l))
    return failure();
  SmallVector<Value> operands{*s, *l};
  if (n.hasInput(2)) {
    auto w = n.input(2);
    if (failed(w))
      return failure();
    operands.push_back(*w);
  }
  auto op = n.im.create(n, opName, operands, attrs, results);
  if (failed(op))
    return failure();
  for (int i = 0; i < results; ++i)
    n.setOutput(i, (*op)->getResult(i));
  return success();
}

} // namespace

void registerLossOps(OpRegistry &r) {
  r.on("SoftmaxCrossEntropyLoss", 12,
       [](NodeCtx &n) { return handleLoss(n, SoftmaxCrossEntropyLossOp::getOperationName(), 2); });
  r.on("NegativeLogLikelihoodLoss", 12,
       [](NodeCtx &n) { return handleLoss(n, NLLLossOp::getOperationName(), 1); });
}
} // namespace onnx_import
