//===- OpsRandom.cpp - random generators and Dropout ------------------------===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

/// Dropout's (and DropoutGrad's) constant `ratio` and `training_mode`
/// inputs at `first` and `first + 1`, where present (else unchanged).
LogicalResult dropoutInputs(NodeCtx &n, size_t first, float &ratio, bool &training) {
  if (n.hasInput(first)) {
    auto r = n.constInput(first, "ratio");
    if (failed(r))
      return failure();
    if ((*r)->numElements() != 1)
      return n.fail("'ratio' must hold one value");
    ratio = (float)(*r)->toDouble()[0];
  }
  if (n.hasInput(first + 1)) {
    auto t = n.constInput(first + 1, "training_mode");
    if (failed(t))
      return failure();
    if ((*t)->numElements() != 1)
      return n.fail("'training_mode' must hold one value");
    training = (*t)->toInt64()[0] != 0;
  }
  return success();
}

/// The element type the node's optional `dtype` attribute names, else `elt`.
LogicalResult dtypeAttr(NodeCtx &n, Type &elt) {
  if (!n.attr("dtype"))
    return success();
  auto dt = n.getInt("dtype", std::nullopt);
  if (failed(dt))
    return failure();
  auto t = n.im.elementType((int32_t)*dt, "dtype");
  if (failed(t))
    return failure();
  elt = *t;
  return success();
}

namespace {

/// A random op's optional `seed` (kept for the record), or a null attribute.
FailureOr<FloatAttr> seedAttr(NodeCtx &n) {
  if (!n.attr("seed"))
    return FloatAttr();
  auto sv = n.getFloat("seed", std::nullopt);
  if (failed(sv))
    return failure();
  return n.im.b.getF32FloatAttr(*sv);
}

/// RandomNormal / RandomUniform and their Like forms: amp.random_normal /
/// amp.random_uniform of the shape the node gives (or its input's, which
/// must be static), in `dtype` (the input's type by default for the Like
/// forms, f32 for the others; f32, f16 or bf16).
LogicalResult handleRandom(NodeCtx &n) {
  llvm::StringRef op = n.node.op_type();
  bool normal = op.starts_with("RandomNormal"), like = op.ends_with("Like");
  if (failed(n.allowAttrs(
          like ? (normal ? llvm::ArrayRef<llvm::StringRef>{"dtype", "mean", "scale", "seed"}
                         : llvm::ArrayRef<llvm::StringRef>{"dtype", "low", "high", "seed"})
               : (normal
                      ? llvm::ArrayRef<llvm::StringRef>{"dtype", "mean", "scale", "seed", "shape"}
                      : llvm::ArrayRef<llvm::StringRef>{"dtype", "low", "high", "seed", "shape"}))))
    return failure();
  auto a = n.getFloat(normal ? "mean" : "low", 0.0f);
  auto bv = n.getFloat(normal ? "scale" : "high", 1.0f);
  if (failed(a) || failed(bv))
    return failure();
  if (!std::isfinite(*a) || !std::isfinite(*bv))
    return n.fail(llvm::Twine(normal ? "mean and scale" : "low and high") + " must be finite");
  if (!normal && *a > *bv)
    return n.fail("low " + std::to_string(*a) + " is above high " + std::to_string(*bv));
  SmallVector<int64_t> shape;
  Type elt = n.im.b.getF32Type();
  if (like) {
    auto x = n.input(0);
    if (failed(x))
      return failure();
    auto xt = cast<RankedTensorType>(x->getType());
    if (!xt.hasStaticShape())
      return n.fail("needs an input of static shape, got " + typeString(xt));
    shape.assign(xt.getShape().begin(), xt.getShape().end());
    elt = xt.getElementType();
  } else {
    auto sh = n.getInts("shape");
    if (failed(sh))
      return failure();
    if (!*sh)
      return n.fail("needs the 'shape' attribute");
    for (int64_t d : **sh)
      if (d < 0)
        return n.fail("'shape' has a negative dimension " + llvm::Twine(d));
    shape.assign((*sh)->begin(), (*sh)->end());
  }
  if (failed(dtypeAttr(n, elt)))
    return failure();
  if (!isa<Float32Type, Float16Type, BFloat16Type>(elt))
    return n.fail(
        "unsupported op ai.onnx." + op + " of element type " + typeString(elt) +
        " (f32, f16 or bf16; the Like forms take the input's type unless dtype is given)");
  auto seedOr = seedAttr(n);
  if (failed(seedOr))
    return failure();
  FloatAttr seed = *seedOr;
  auto rt = RankedTensorType::get(shape, elt);
  Value v = normal ? RandomNormalOp::create(n.im.b, n.loc, rt, n.im.b.getF32FloatAttr(*a),
                                            n.im.b.getF32FloatAttr(*bv), seed)
                         .getResult()
                   : RandomUniformOp::create(n.im.b, n.loc, rt, n.im.b.getF32FloatAttr(*a),
                                             n.im.b.getF32FloatAttr(*bv), seed)
                         .getResult();
  n.setOutput(0, v);
  return success();
}

/// Bernoulli: amp.bernoulli of the float probabilities, then a cast to
/// `dtype` when it differs (an integer or boolean dtype gives 0 / 1).
LogicalResult handleBernoulli(NodeCtx &n) {
  if (failed(n.allowAttrs({"dtype", "seed"})))
    return failure();
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  if (!isa<Float32Type, Float16Type, BFloat16Type>(xt.getElementType()))
    return n.fail("unsupported op ai.onnx.Bernoulli on " + typeString(xt) +
                  " (f32, f16 or bf16 probabilities)");
  Type elt = xt.getElementType();
  if (failed(dtypeAttr(n, elt)))
    return failure();
  auto seed = seedAttr(n);
  if (failed(seed))
    return failure();
  SmallVector<NamedAttribute> attrs;
  if (*seed)
    attrs.push_back(named(n, "seed", *seed));
  auto op = n.im.tryCreate<BernoulliOp>(n, {*x}, attrs, 1);
  if (failed(op))
    return failure();
  Value v = (*op)->getResult(0);
  if (elt != xt.getElementType())
    v = CastOp::create(n.im.b, n.loc, RankedTensorType::get(xt.getShape(), elt), v);
  n.setOutput(0, v);
  return success();
}

LogicalResult handleDropout(NodeCtx &n) {
  if (failed(n.allowAttrs({"ratio", "seed", "is_test", "consumed_inputs"})))
    return failure();
  float ratio = 0.5f;
  bool training = false;
  if (n.opset < 12) {
    auto r = n.getFloat("ratio", 0.5f);
    auto t = n.getInt("is_test", 0);
    if (failed(r) || failed(t))
      return failure();
    ratio = *r;
    // Before opset 7 `is_test` = 0 meant training; since 7 Dropout is
    // inference-only unless the runtime says otherwise.
    training = n.opset < 7 && *t == 0;
  } else {
    if (failed(dropoutInputs(n, 1, ratio, training)))
      return failure();
  }
  auto seed = n.attr("seed") ? n.getInt("seed", 0) : FailureOr<int64_t>(-1);
  if (failed(seed))
    return failure();
  SmallVector<NamedAttribute> attrs{named(n, "ratio", f32(n, ratio)),
                                    named(n, "training_mode", boolean(n, training))};
  if (n.attr("seed"))
    attrs.push_back(named(n, "seed", i64(n, *seed)));
  auto x = n.input(0);
  if (failed(x))
    return failure();
  auto op = n.im.tryCreate<DropoutOp>(n, {*x}, attrs, 2);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  n.setOutput(1, (*op)->getResult(1));
  return success();
}

} // namespace

void registerRandomOps(OpRegistry &r) {
  r.on("Dropout", 1, handleDropout, {1, 2});
  for (const char *name :
       {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"})
    r.on(name, 1, handleRandom);
  r.on("Bernoulli", 15, handleBernoulli);
}
} // namespace onnx_import
