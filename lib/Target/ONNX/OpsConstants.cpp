//===- OpsConstants.cpp - Constant, ConstantOfShape, Cast, CastLike, Range ---===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

/// Cast (`to`), or CastLike (input 1's element type; `like`).
/// An INT64 or INT32 constant of `values`.
HostTensor makeInteger(int32_t dtype, std::vector<int64_t> shape,
                       const std::vector<int64_t> &values) {
  HostTensor t = makeInt64(std::move(shape), values);
  if (dtype == onnx::TensorProto::INT32) {
    t.dtype = dtype;
    auto bytes = std::make_shared<std::string>(values.size() * 4, '\0');
    for (size_t i = 0; i < values.size(); ++i) {
      int32_t x = (int32_t)values[i];
      std::memcpy(bytes->data() + 4 * i, &x, 4);
    }
    t.bytes = bytes;
  }
  return t;
}

LogicalResult handleCast(NodeCtx &n, bool like) {
  if (failed(n.allowAttrs(like ? llvm::ArrayRef<llvm::StringRef>{"saturate"}
                               : llvm::ArrayRef<llvm::StringRef>{"to", "saturate"})))
    return failure();
  FailureOr<int64_t> to = failure();
  Type likeElt;
  if (like) {
    if (!n.hasInput(1))
      return n.fail("input 1 ('target_type') is required");
    auto c1 = n.im.consts.find(n.node.input(1));
    if (c1 != n.im.consts.end()) {
      to = c1->second.dtype;
    } else {
      auto target = n.input(1);
      if (failed(target))
        return failure();
      likeElt = getElementTypeOrSelf(target->getType());
      // An integer target folds a constant input like Cast does (torch.export
      // writes CastLike(0.0, input_ids) for arange bounds); otherwise the
      // type is likeElt: no folding below.
      to = likeElt.isSignlessInteger(64)   ? onnx::TensorProto::INT64
           : likeElt.isSignlessInteger(32) ? onnx::TensorProto::INT32
                                           : -1;
    }
  } else {
    to = n.getInt("to", std::nullopt);
  }
  if (failed(to))
    return failure();
  // A cast of a compile-time integer (shape arithmetic) stays a constant,
  // and so does a small float constant cast to an integer (torch.export's
  // CastLike(0.0, int64) for arange bounds): truncated toward zero.
  auto c = n.im.consts.find(n.hasInput(0) ? n.node.input(0) : "");
  if (c != n.im.consts.end() && elementSize(*to) &&
      (*to == onnx::TensorProto::INT64 || *to == onnx::TensorProto::INT32)) {
    bool isFloat = c->second.dtype == onnx::TensorProto::FLOAT ||
                   c->second.dtype == onnx::TensorProto::DOUBLE ||
                   c->second.dtype == onnx::TensorProto::FLOAT16 ||
                   c->second.dtype == onnx::TensorProto::BFLOAT16;
    std::optional<std::vector<int64_t>> v;
    if (!isFloat) {
      v = c->second.toInt64();
    } else if (c->second.numElements() <= (1 << 16)) {
      v.emplace();
      for (double d : c->second.toDouble()) {
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) {
          v.reset(); // undefined in ONNX: left to the op
          break;
        }
        v->push_back((int64_t)std::trunc(d));
      }
    }
    if (v) {
      n.setConstOutput(0, makeInteger((int32_t)*to, c->second.shape, *v));
      return success();
    }
  }
  // (A DOUBLE constant cast to a float type was folded before the handler:
  // foldDoubleNode.)
  auto elt =
      likeElt ? FailureOr<Type>(likeElt) : n.im.elementType((int32_t)*to, "the cast's target type");
  auto x = n.input(0);
  if (failed(elt) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  auto op = CastOp::create(n.im.b, n.loc, RankedTensorType::get(xt.getShape(), *elt), *x);
  n.setOutput(0, op.getResult());
  return success();
}

namespace {

LogicalResult handleConstant(NodeCtx &n) {
  if (n.node.attribute_size() != 1)
    return n.fail("needs exactly one of value, value_float(s), value_int(s)");
  const auto &a = n.node.attribute(0);
  HostTensor t;
  if (a.name() == "value") {
    onnx::TensorProto copy = a.t();
    auto d = decodeTensor(copy, n.im.dir, n.name);
    if (!d)
      return n.fail(llvm::toString(d.takeError()));
    t = std::move(*d);
  } else if (a.name() == "value_int") {
    t = makeInt64({}, {a.i()});
  } else if (a.name() == "value_ints") {
    t = makeInt64({(int64_t)a.ints_size()}, std::vector<int64_t>(a.ints().begin(), a.ints().end()));
  } else if (a.name() == "value_float" || a.name() == "value_floats") {
    std::vector<float> v;
    if (a.name() == "value_float")
      v.push_back(a.f());
    else
      v.assign(a.floats().begin(), a.floats().end());
    t.dtype = onnx::TensorProto::FLOAT;
    if (a.name() == "value_floats")
      t.shape = {(int64_t)v.size()};
    t.bytes = std::make_shared<std::string>(v.size() * 4, '\0');
    if (!v.empty()) // (an empty vector's data() may be null)
      std::memcpy(t.bytes->data(), v.data(), v.size() * 4);
  } else {
    return n.fail("attribute '" + a.name() + "' is not supported (sparse or string constants)");
  }
  n.setConstOutput(0, std::move(t));
  return success();
}

/// ConstantOfShape with a constant shape: a constant tensor filled with
/// `value`'s one element (float 0 when absent).
LogicalResult handleConstantOfShape(NodeCtx &n) {
  if (failed(n.allowAttrs({"value"})))
    return failure();
  if (n.hasInput(0) && !n.im.consts.count(n.node.input(0)))
    return n.fail("unsupported op ai.onnx.ConstantOfShape on a shape computed at run time (only a "
                  "constant shape folds: export with static shapes)");
  auto shape = n.constInts(0, "input");
  if (failed(shape))
    return failure();
  HostTensor fill;
  if (const onnx::AttributeProto *a = n.attr("value")) {
    if (a->type() != onnx::AttributeProto::TENSOR)
      return n.fail("attribute 'value' must be a TENSOR");
    onnx::TensorProto copy = a->t();
    auto d = decodeTensor(copy, n.im.dir, n.name + " value");
    if (!d)
      return n.fail(llvm::toString(d.takeError()));
    fill = std::move(*d);
    if (fill.numElements() != 1)
      return n.fail("attribute 'value' must hold one element");
  } else {
    fill.dtype = onnx::TensorProto::FLOAT;
    fill.bytes = std::make_shared<std::string>(4, '\0');
  }
  int64_t count = 1;
  for (int64_t d : *shape) {
    if (d < 0)
      return n.fail("the shape has a negative dimension " + llvm::Twine(d));
    if (d && count > ((int64_t)1 << 30) / d)
      return n.fail("the shape asks for more than 2^30 elements");
    count *= d;
  }
  size_t es = elementSize(fill.dtype);
  if (!es)
    return n.fail(llvm::Twine("attribute 'value' has element type ") + dataTypeName(fill.dtype));
  if ((uint64_t)count * es > ((uint64_t)1 << 30))
    return n.fail("the constant would take more than 1 GiB");
  HostTensor t;
  t.dtype = fill.dtype;
  t.shape = *shape;
  t.bytes = std::make_shared<std::string>((size_t)count * es, '\0');
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(t.bytes->data() + i * es, fill.data(), es);
  n.setConstOutput(0, std::move(t));
  return success();
}

/// Range of constants, folded: start + i * delta for i < max(ceil((limit -
/// start) / delta), 0); INT64, INT32 or FLOAT. A bound that is a graph input
/// is an error naming it (bind it with --const-input); one computed by other
/// nodes makes the op unsupported.
LogicalResult handleRange(NodeCtx &n) {
  if (failed(n.allowAttrs({})))
    return failure();
  const char *roles[] = {"start", "limit", "delta"};
  const HostTensor *c[3];
  for (int i = 0; i < 3; ++i) {
    // A bound computed by other nodes (not a graph input one could bind):
    // the op is unsupported there.
    if (n.hasInput(i) && !n.im.consts.count(n.node.input(i))) {
      auto v = n.im.values.find(n.node.input(i));
      if (v != n.im.values.end() && !isa<BlockArgument>(v->second))
        return n.fail("unsupported op ai.onnx.Range on a bound computed at run time ('" +
                      n.node.input(i) + "'; Range is folded at import from constant bounds)");
    }
    auto t = n.constInput(i, roles[i]);
    if (failed(t))
      return failure();
    if ((*t)->numElements() != 1)
      return n.fail(llvm::Twine("'") + roles[i] + "' must be a scalar");
    c[i] = *t;
  }
  int32_t dt = c[0]->dtype;
  if (c[1]->dtype != dt || c[2]->dtype != dt)
    return n.fail("start, limit and delta must have one type");
  constexpr int64_t kMax = (int64_t)1 << 30;
  HostTensor out;
  out.dtype = dt;
  if (dt == onnx::TensorProto::INT64 || dt == onnx::TensorProto::INT32) {
    int64_t s0 = c[0]->toInt64()[0], l = c[1]->toInt64()[0], d = c[2]->toInt64()[0];
    if (d == 0)
      return n.fail("'delta' is zero");
    __int128 span = (__int128)l - s0;
    __int128 cnt = span / d + ((span % d != 0 && ((span > 0) == (d > 0))) ? 1 : 0);
    if (cnt < 0)
      cnt = 0;
    if (cnt > kMax)
      return n.fail("the range has more than 2^30 elements");
    std::vector<int64_t> v((size_t)cnt);
    // start + i * delta lies in [start, limit); only the product may leave
    // 64 bits (start = INT64_MIN, delta = 2^62).
    for (int64_t i = 0; i < (int64_t)cnt; ++i)
      v[i] = (int64_t)((__int128)s0 + (__int128)i * d);
    out = makeInt64({(int64_t)cnt}, v);
    if (dt == onnx::TensorProto::INT32) {
      out.dtype = dt;
      out.bytes = std::make_shared<std::string>(v.size() * 4, '\0');
      for (size_t i = 0; i < v.size(); ++i) {
        int32_t x = (int32_t)v[i];
        std::memcpy(out.bytes->data() + 4 * i, &x, 4);
      }
    }
  } else if (dt == onnx::TensorProto::FLOAT) {
    double s0 = c[0]->toDouble()[0], l = c[1]->toDouble()[0], d = c[2]->toDouble()[0];
    if (d == 0 || !std::isfinite(s0) || !std::isfinite(l) || !std::isfinite(d))
      return n.fail("'delta' is zero or a bound is not finite");
    double cnt = std::max(std::ceil((l - s0) / d), 0.0);
    if (cnt > (double)kMax)
      return n.fail("the range has more than 2^30 elements");
    out.shape = {(int64_t)cnt};
    out.bytes = std::make_shared<std::string>((size_t)cnt * 4, '\0');
    for (int64_t i = 0; i < (int64_t)cnt; ++i) {
      float f = (float)(s0 + (double)i * d);
      std::memcpy(out.bytes->data() + 4 * i, &f, 4);
    }
  } else {
    return n.fail(llvm::Twine("Range of ") + dataTypeName(dt) + " is not supported");
  }
  n.setConstOutput(0, std::move(out));
  return success();
}

} // namespace

void registerConstantOps(OpRegistry &r) {
  r.on("CastLike", 15, [](NodeCtx &n) { return handleCast(n, true); });
  r.on("Range", 11, handleRange, {0, 1, 2});
  r.on("Cast", 6, [](NodeCtx &n) { return handleCast(n); });
  r.on("Constant", 1, handleConstant);
  r.on("ConstantOfShape", 9, handleConstantOfShape, {0});
}
} // namespace onnx_import
