//===- DomainPreviewTraining.cpp - ai.onnx.preview.training: Adagrad, Momentum, Adam, Gradient
//---===//
//
// (the formulas of the ONNX operator reference, which are not PyTorch's).
// R (learning rate) and T (update count) are run-time scalars; "T > 0" is
// read as T != 0.
//===----------------------------------------------------------------------===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "amp/Transforms/Passes.h"

namespace onnx_import {

namespace {

/// R, T and the n groups of `groups` tensors; T as a float and as "T != 0".
struct TrainingInputs {
  Value r, tf, tNonZero;
  SmallVector<SmallVector<Value>> group; // group[k][i]: k-th input kind of tensor i
};

FailureOr<TrainingInputs> trainingInputs(NodeCtx &n, unsigned groups, unsigned outGroups) {
  size_t count = n.numInputs();
  if (count < 2 + groups || (count - 2) % groups != 0)
    return n.fail("needs R, T and " + llvm::Twine(groups) + " inputs per optimized tensor, got " +
                  llvm::Twine(count) + " inputs");
  size_t k = (count - 2) / groups;
  if ((size_t)n.node.output_size() != outGroups * k)
    return n.fail("needs " + llvm::Twine(outGroups * k) + " outputs for " + llvm::Twine(k) +
                  " optimized tensors, got " + llvm::Twine(n.node.output_size()));
  TrainingInputs in;
  auto r = n.input(0), t = n.input(1);
  if (failed(r) || failed(t))
    return failure();
  auto rt = dyn_cast<RankedTensorType>(r->getType());
  auto tt = dyn_cast<RankedTensorType>(t->getType());
  if (!rt || rt.getRank() != 0 || !isa<FloatType>(rt.getElementType()))
    return n.fail("R must be a float scalar");
  if (!tt || tt.getRank() != 0 || !tt.getElementType().isInteger(64))
    return n.fail("T must be an int64 scalar");
  in.r = *r;
  in.tf = CastOp::create(n.im.b, n.loc, rt, *t);
  in.tNonZero = CastOp::create(n.im.b, n.loc, RankedTensorType::get({}, n.im.b.getI1Type()), *t);
  in.group.resize(groups);
  for (unsigned g = 0; g < groups; ++g)
    for (size_t i = 0; i < k; ++i) {
      auto v = n.input(2 + g * k + i);
      if (failed(v))
        return failure();
      if (getElementTypeOrSelf(v->getType()) != rt.getElementType())
        return n.fail("input '" + n.node.input(2 + g * k + i) + "' must have R's element type");
      in.group[g].push_back(*v);
    }
  return in;
}

LogicalResult handleAdagrad(NodeCtx &n) {
  if (failed(n.allowAttrs({"decay_factor", "epsilon", "norm_coefficient"})))
    return failure();
  auto decay = n.getFloat("decay_factor", 0.0f), eps = n.getFloat("epsilon", 1e-6f),
       norm = n.getFloat("norm_coefficient", 0.0f);
  auto in = trainingInputs(n, 3, 2);
  if (failed(decay) || failed(eps) || failed(norm) || failed(in))
    return failure();
  Elementwise e{n};
  Type elt = getElementTypeOrSelf(in->r.getType());
  size_t k = in->group[0].size();
  // r_ = R / (1 + T * decay); g = norm * X + G; H' = H + g^2;
  // X' = X - r_ * g / (sqrt(H') + eps)
  Value rr = e.div(in->r, e.add(e.cst(elt, 1.0), e.mul(in->tf, e.cst(elt, *decay))));
  for (size_t i = 0; i < k; ++i) {
    Value x = in->group[0][i], g0 = in->group[1][i], h = in->group[2][i];
    Value g = e.add(e.mul(e.cst(elt, *norm), x), g0);
    Value hn = e.add(h, e.mul(g, g));
    Value xn = e.sub(x, e.div(e.mul(rr, g), e.add(e.sqrt(hn), e.cst(elt, *eps))));
    if (!e.ok)
      return failure();
    n.setOutput(i, xn);
    n.setOutput(k + i, hn);
  }
  return success();
}

LogicalResult handleMomentum(NodeCtx &n) {
  if (failed(n.allowAttrs({"alpha", "beta", "mode", "norm_coefficient"})))
    return failure();
  auto alpha = n.getFloat("alpha", std::nullopt), beta = n.getFloat("beta", std::nullopt),
       norm = n.getFloat("norm_coefficient", std::nullopt);
  auto mode = n.getString("mode", std::nullopt);
  auto in = trainingInputs(n, 3, 2);
  if (failed(alpha) || failed(beta) || failed(norm) || failed(mode) || failed(in))
    return failure();
  if (*mode != "standard" && *mode != "nesterov")
    return n.fail("mode must be \"standard\" or \"nesterov\", got \"" + *mode + "\"");
  Elementwise e{n};
  Type elt = getElementTypeOrSelf(in->r.getType());
  size_t k = in->group[0].size();
  // beta' = T > 0 ? beta : 1; g = norm * X + G; V' = alpha V + beta' g;
  // X' = X - R * V' (standard) or X - R * (g + alpha V') (nesterov)
  Value betaAdj = e.op<WhereOp>({in->tNonZero, e.cst(elt, *beta), e.cst(elt, 1.0)});
  for (size_t i = 0; i < k; ++i) {
    Value x = in->group[0][i], g0 = in->group[1][i], v = in->group[2][i];
    Value g = e.add(e.mul(e.cst(elt, *norm), x), g0);
    Value vn = e.add(e.mul(e.cst(elt, *alpha), v), e.mul(betaAdj, g));
    Value step = *mode == "standard" ? vn : e.add(g, e.mul(e.cst(elt, *alpha), vn));
    Value xn = e.sub(x, e.mul(in->r, step));
    if (!e.ok)
      return failure();
    n.setOutput(i, xn);
    n.setOutput(k + i, vn);
  }
  return success();
}

LogicalResult handleAdam(NodeCtx &n) {
  if (failed(
          n.allowAttrs({"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"})))
    return failure();
  auto alpha = n.getFloat("alpha", 0.9f), beta = n.getFloat("beta", 0.999f),
       eps = n.getFloat("epsilon", 1e-6f), norm = n.getFloat("norm_coefficient", 0.0f),
       post = n.getFloat("norm_coefficient_post", 0.0f);
  auto in = trainingInputs(n, 4, 3);
  if (failed(alpha) || failed(beta) || failed(eps) || failed(norm) || failed(post) || failed(in))
    return failure();
  Elementwise e{n};
  Type elt = getElementTypeOrSelf(in->r.getType());
  size_t k = in->group[0].size();
  Value one = e.cst(elt, 1.0);
  // R' = T > 0 ? R sqrt(1 - beta^T) / (1 - alpha^T) : R
  Value bt = e.op<PowOp>({e.cst(elt, *beta), in->tf});
  Value at = e.op<PowOp>({e.cst(elt, *alpha), in->tf});
  Value corrected = e.div(e.mul(in->r, e.sqrt(e.sub(one, bt))), e.sub(one, at));
  Value rAdj = e.op<WhereOp>({in->tNonZero, corrected, in->r});
  for (size_t i = 0; i < k; ++i) {
    Value x = in->group[0][i], g0 = in->group[1][i], v = in->group[2][i], h = in->group[3][i];
    // g = norm X + G; V' = alpha V + (1 - alpha) g; H' = beta H + (1 - beta) g^2;
    // X' = (1 - post) (X - R' V' / (sqrt(H') + eps))
    Value g = e.add(e.mul(e.cst(elt, *norm), x), g0);
    Value vn = e.add(e.mul(e.cst(elt, *alpha), v), e.mul(e.cst(elt, 1.0 - *alpha), g));
    Value hn = e.add(e.mul(e.cst(elt, *beta), h), e.mul(e.cst(elt, 1.0 - *beta), e.mul(g, g)));
    Value xn = e.sub(x, e.mul(rAdj, e.div(vn, e.add(e.sqrt(hn), e.cst(elt, *eps)))));
    if (*post != 0.0f)
      xn = e.mul(e.cst(elt, 1.0 - *post), xn);
    if (!e.ok)
      return failure();
    n.setOutput(i, xn);
    n.setOutput(k + i, vn);
    n.setOutput(2 * k + i, hn);
  }
  return success();
}

/// Gradient (ai.onnx.preview.training): d y / d xs by amp-autodiff's
/// reverse sweep over the ops imported so far. The node's inputs must be
/// the xs (then zs) themselves: feeding other values would re-run the graph.
LogicalResult handleGradient(NodeCtx &n) {
  if (failed(n.allowAttrs({"xs", "y", "zs"})))
    return failure();
  const onnx::AttributeProto *xsA = n.attr("xs"), *yA = n.attr("y"), *zsA = n.attr("zs");
  if (!xsA || !yA || xsA->strings_size() == 0)
    return n.fail("needs the attributes xs and y");
  int nx = xsA->strings_size(), nz = zsA ? zsA->strings_size() : 0;
  if ((int)n.numInputs() != nx + nz || n.node.output_size() != nx)
    return n.fail("needs one input per name in xs and zs and one output per x");
  SmallVector<Value> xs;
  for (int i = 0; i < nx + nz; ++i) {
    const std::string &want = i < nx ? xsA->strings(i) : zsA->strings(i - nx);
    if (n.node.input(i) != want)
      return n.fail("input " + llvm::Twine(i) + " is '" + n.node.input(i) + "' but the " +
                    (i < nx ? "xs" : "zs") + " attribute names '" + want +
                    "': feeding other values than the graph's is not supported");
    auto v = n.input(i);
    if (failed(v))
      return failure();
    if (i < nx)
      xs.push_back(*v);
  }
  auto y = n.im.lookup(yA->s(), n.loc);
  if (failed(y))
    return n.fail("y '" + yA->s() + "' is not computed by the graph");
  auto grads = gradientsOf(n.im.b, *y, xs, "Gradient's y '" + yA->s() + "'");
  if (failed(grads))
    return n.fail("cannot differentiate '" + yA->s() + "' (see above)");
  for (int i = 0; i < nx; ++i)
    n.setOutput(i, (*grads)[i]);
  return success();
}

} // namespace

void registerPreviewTrainingOps(OpRegistry &r) {
  // Other domains are keyed "<domain>.<op>".
  r.on("ai.onnx.preview.training.Adagrad", 1, handleAdagrad);
  r.on("ai.onnx.preview.training.Momentum", 1, handleMomentum);
  r.on("ai.onnx.preview.training.Adam", 1, handleAdam);
  r.on("ai.onnx.preview.training.Gradient", 1, handleGradient);
}
} // namespace onnx_import
