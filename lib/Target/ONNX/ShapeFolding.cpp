//===- ShapeFolding.cpp - compile-time integer and double arithmetic on shapes ---===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "llvm/Support/CheckedArithmetic.h"

namespace onnx_import {

/// A Concat of 1-D FLOAT constants (torch's training-mode export writes
/// Resize's scales so) is a FLOAT constant.
LogicalResult foldFloatConcat(NodeCtx &n) {
  if (n.node.op_type() != "Concat" || n.node.input_size() == 0)
    return failure();
  auto out = std::make_shared<std::string>();
  int64_t count = 0;
  for (int i = 0; i < n.node.input_size(); ++i) {
    auto it = n.im.consts.find(n.node.input(i));
    if (it == n.im.consts.end() || it->second.dtype != onnx::TensorProto::FLOAT ||
        it->second.shape.size() != 1)
      return failure();
    out->append(it->second.data(), (size_t)it->second.numElements() * 4);
    count += it->second.numElements();
  }
  HostTensor t;
  t.dtype = onnx::TensorProto::FLOAT;
  t.shape = {count};
  t.bytes = out;
  n.setConstOutput(0, std::move(t));
  return success();
}

namespace {

/// Integer constant folding for the small shape subgraphs exporters emit.
/// Returns success() with the output bound when it folded, failure() when
/// it did not apply (the node is then imported as an op).
static HostTensor makeBool(std::vector<int64_t> shape, const std::vector<int64_t> &values) {
  HostTensor t;
  t.dtype = onnx::TensorProto::BOOL;
  t.shape = std::move(shape);
  t.bytes = std::make_shared<std::string>(values.size(), '\0');
  for (size_t i = 0; i < values.size(); ++i)
    (*t.bytes)[i] = values[i] != 0;
  return t;
}

/// numpy broadcasting of small constants: the result's shape and, per
/// operand, the flat index of its element for each result element.
static bool broadcastConsts(ArrayRef<const HostTensor *> ts, std::vector<int64_t> &shape,
                            std::vector<std::vector<int64_t>> &index) {
  size_t rank = 0;
  for (const HostTensor *t : ts)
    rank = std::max(rank, t->shape.size());
  shape.assign(rank, 1);
  for (const HostTensor *t : ts)
    for (size_t k = 0; k < t->shape.size(); ++k) {
      int64_t d = t->shape[k], &o = shape[rank - t->shape.size() + k];
      if (d != 1 && o != 1 && d != o)
        return false;
      if (d != 1)
        o = d;
    }
  int64_t total = 1;
  for (int64_t d : shape)
    total *= d;
  if (total > (1 << 16))
    return false; // shape arithmetic only
  index.assign(ts.size(), std::vector<int64_t>(total));
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < total; ++e) {
    for (size_t q = 0; q < ts.size(); ++q) {
      const auto &sh = ts[q]->shape;
      int64_t off = 0;
      for (size_t k = 0; k < sh.size(); ++k)
        off = off * sh[k] + (sh[k] == 1 ? 0 : idx[rank - sh.size() + k]);
      index[q][e] = off;
    }
    for (int64_t d = (int64_t)rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
  return true;
}

/// A float tensor of `dtype` (FLOAT, DOUBLE, FLOAT16, BFLOAT16) holding
/// `values` rounded to nearest even.
static HostTensor makeFloat(int32_t dtype, std::vector<int64_t> shape,
                            const std::vector<double> &values) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  size_t es = elementSize(dtype);
  t.bytes = std::make_shared<std::string>(values.size() * es, '\0');
  const llvm::fltSemantics &sem = dtype == onnx::TensorProto::FLOAT16    ? APFloat::IEEEhalf()
                                  : dtype == onnx::TensorProto::BFLOAT16 ? APFloat::BFloat()
                                  : dtype == onnx::TensorProto::FLOAT    ? APFloat::IEEEsingle()
                                                                         : APFloat::IEEEdouble();
  for (size_t i = 0; i < values.size(); ++i) {
    APFloat a(values[i]);
    bool lost;
    a.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    uint64_t bits = a.bitcastToAPInt().getZExtValue();
    std::memcpy(&(*t.bytes)[i * es], &bits, es);
  }
  return t;
}

} // namespace

/// DOUBLE constants: the runtime has no f64, and exporters write them only
/// for compile-time scalars (transformers' sdpa attention: the scale as
/// Constant(DOUBLE) -> Sqrt -> Cast(FLOAT)). A node whose inputs are all
/// constants and one of them DOUBLE is computed here in double (unary and
/// binary element-wise ops with broadcasting, Cast, the movement ops on a
/// single value); its output is a constant of the node's type, rounded once.
/// A DOUBLE value that reaches an op this cannot fold is an error there.
LogicalResult foldDoubleNode(NodeCtx &n) {
  const std::string &op = n.node.op_type();
  std::vector<const HostTensor *> in;
  bool anyDouble = false;
  for (int i = 0; i < n.node.input_size(); ++i) {
    if (n.node.input(i).empty())
      return failure();
    auto it = n.im.consts.find(n.node.input(i));
    if (it == n.im.consts.end())
      return failure();
    anyDouble |= it->second.dtype == onnx::TensorProto::DOUBLE;
    in.push_back(&it->second);
  }
  if (!anyDouble || in.empty() || in[0]->numElements() > (1 << 16))
    return failure();
  std::vector<double> x = in[0]->toDouble();
  auto unary = [&](double (*f)(double)) {
    for (double &v : x)
      v = f(v);
    n.setConstOutput(0, makeFloat(in[0]->dtype, in[0]->shape, x));
    return success();
  };
  if (in.size() == 1) {
    if (op == "Sqrt")
      return unary([](double v) { return std::sqrt(v); });
    if (op == "Neg")
      return unary([](double v) { return -v; });
    if (op == "Abs")
      return unary([](double v) { return std::fabs(v); });
    if (op == "Reciprocal")
      return unary([](double v) { return 1.0 / v; });
    if (op == "Exp")
      return unary([](double v) { return std::exp(v); });
    if (op == "Log")
      return unary([](double v) { return std::log(v); });
    if (op == "Floor")
      return unary([](double v) { return std::floor(v); });
    if (op == "Ceil")
      return unary([](double v) { return std::ceil(v); });
    if (op == "Identity")
      return unary([](double v) { return v; });
    if (op == "Cast") {
      auto to = n.getInt("to", std::nullopt);
      if (failed(to))
        return failure();
      int32_t dt = (int32_t)*to;
      if (dt == onnx::TensorProto::FLOAT || dt == onnx::TensorProto::DOUBLE ||
          dt == onnx::TensorProto::FLOAT16 || dt == onnx::TensorProto::BFLOAT16) {
        n.setConstOutput(0, makeFloat(dt, in[0]->shape, x));
        return success();
      }
      return failure(); // to an integer: handleCast folds it
    }
    return failure();
  }
  bool binary = op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" ||
                op == "Min" || op == "Max";
  if (binary && in.size() == 2) {
    if (in[0]->dtype != in[1]->dtype)
      return failure();
    std::vector<int64_t> shape;
    std::vector<std::vector<int64_t>> index;
    if (!broadcastConsts(in, shape, index))
      return failure();
    std::vector<double> y = in[1]->toDouble(), r(index[0].size());
    for (size_t e = 0; e < r.size(); ++e) {
      double p = x[index[0][e]], q = y[index[1][e]];
      r[e] = op == "Add"   ? p + q
             : op == "Sub" ? p - q
             : op == "Mul" ? p * q
             : op == "Div" ? p / q
             : op == "Pow" ? std::pow(p, q)
             : op == "Min" ? (std::isnan(p) || std::isnan(q) ? NAN : std::min(p, q))
                           : (std::isnan(p) || std::isnan(q) ? NAN : std::max(p, q));
    }
    n.setConstOutput(0, makeFloat(in[0]->dtype, shape, r));
    return success();
  }
  if ((op == "Unsqueeze" || op == "Squeeze" || op == "Reshape") && in.size() == 2 &&
      in[0]->numElements() == 1 && n.opset >= 13) {
    // A single value takes the shape the op gives it: all ones.
    size_t rank = in[0]->shape.size();
    if (op == "Unsqueeze")
      rank += in[1]->numElements();
    else if (op == "Squeeze")
      rank = in[1]->numElements() ? rank - std::min<size_t>(rank, in[1]->numElements()) : 0;
    else
      rank = in[1]->numElements();
    n.setConstOutput(0, makeFloat(in[0]->dtype, std::vector<int64_t>(rank, 1), x));
    return success();
  }
  return failure();
}

LogicalResult foldIntegerNode(NodeCtx &n) {
  const std::string &op = n.node.op_type();
  std::vector<const HostTensor *> in;
  // Boolean constants take part where the op is about them (comparisons'
  // results feeding a Where: torch's expand(-1) pattern).
  bool boolOp = op == "Where" || op == "Not" || op == "And" || op == "Or" || op == "Xor";
  for (int i = 0; i < n.node.input_size(); ++i) {
    if (n.node.input(i).empty()) {
      in.push_back(nullptr);
      continue;
    }
    auto it = n.im.consts.find(n.node.input(i));
    if (it == n.im.consts.end())
      return failure();
    int32_t dt = it->second.dtype;
    bool isBool = dt == onnx::TensorProto::BOOL;
    if (dt != onnx::TensorProto::INT64 && dt != onnx::TensorProto::INT32 && !(isBool && boolOp))
      return failure();
    if (boolOp && isBool != (op != "Where" || i == 0))
      return failure(); // Where: a boolean condition and integer values; the others all boolean
    in.push_back(&it->second);
  }
  if (in.empty() || !in[0])
    return failure();
  auto vals = [](const HostTensor *t) { return t->toInt64(); };
  bool compare = op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" ||
                 op == "GreaterOrEqual";
  // Min / Max: variadic, of one type (T5's relative-position buckets: Min
  // of two constant int64 tables).
  bool minMax = (op == "Min" || op == "Max") && llvm::all_of(in, [&](const HostTensor *t) {
                  return t && t->dtype == in[0]->dtype;
                });
  if ((compare || op == "And" || op == "Or" || op == "Xor" || op == "Where" || minMax) &&
      llvm::all_of(in, [](const HostTensor *t) { return t != nullptr; }) &&
      (minMax || in.size() == (op == "Where" ? 3u : 2u))) {
    std::vector<int64_t> shape;
    std::vector<std::vector<int64_t>> index;
    if (!broadcastConsts(in, shape, index))
      return failure();
    std::vector<std::vector<int64_t>> v;
    for (const HostTensor *t : in)
      v.push_back(vals(t));
    std::vector<int64_t> r(index[0].size());
    for (size_t e = 0; e < r.size(); ++e) {
      if (minMax) {
        r[e] = v[0][index[0][e]];
        for (size_t k = 1; k < in.size(); ++k)
          r[e] =
              op == "Min" ? std::min(r[e], v[k][index[k][e]]) : std::max(r[e], v[k][index[k][e]]);
        continue;
      }
      int64_t p = v[0][index[0][e]], q = v[1][index[1][e]];
      if (op == "Equal")
        r[e] = p == q;
      else if (op == "Less")
        r[e] = p < q;
      else if (op == "Greater")
        r[e] = p > q;
      else if (op == "LessOrEqual")
        r[e] = p <= q;
      else if (op == "GreaterOrEqual")
        r[e] = p >= q;
      else if (op == "And")
        r[e] = p && q;
      else if (op == "Or")
        r[e] = p || q;
      else if (op == "Xor")
        r[e] = (p != 0) != (q != 0);
      else
        r[e] = p ? q : v[2][index[2][e]];
    }
    n.setConstOutput(0, minMax          ? makeInteger(in[0]->dtype, shape, r)
                        : op == "Where" ? makeInt64(shape, r)
                                        : makeBool(shape, r));
    return success();
  }
  if (op == "Not") {
    auto v = vals(in[0]);
    for (int64_t &x : v)
      x = !x;
    n.setConstOutput(0, makeBool(in[0]->shape, v));
    return success();
  }
  if (boolOp)
    return failure();
  if (op == "Identity") {
    n.setConstOutput(0, *in[0]);
    return success();
  }
  if (op == "Neg" || op == "Abs") {
    auto v = vals(in[0]);
    for (int64_t &x : v)
      x = op == "Abs" && x >= 0 ? x : (int64_t)(0 - (uint64_t)x);
    n.setConstOutput(0, makeInteger(in[0]->dtype, in[0]->shape, v));
    return success();
  }

  if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes;
    if (n.opset >= 13) {
      if (in.size() > 1 && in[1])
        axes = vals(in[1]);
    } else if (auto a = n.attr("axes")) {
      axes.assign(a->ints().begin(), a->ints().end());
    }
    std::vector<int64_t> shape = in[0]->shape;
    if (op == "Unsqueeze") {
      int64_t r = shape.size() + axes.size();
      for (int64_t &a : axes)
        if (a < 0)
          a += r;
      std::sort(axes.begin(), axes.end());
      for (int64_t a : axes) {
        if (a < 0 || a > (int64_t)shape.size())
          return failure();
        shape.insert(shape.begin() + a, 1);
      }
    } else {
      std::vector<int64_t> out;
      int64_t r = shape.size();
      for (int64_t i = 0; i < r; ++i) {
        bool drop =
            axes.empty() ? shape[i] == 1 : std::find_if(axes.begin(), axes.end(), [&](int64_t a) {
                                             return (a < 0 ? a + r : a) == i;
                                           }) != axes.end();
        if (!drop)
          out.push_back(shape[i]);
      }
      shape = out;
    }
    n.setConstOutput(0, makeInt64(shape, vals(in[0])));
    return success();
  }
  if (op == "Slice" && n.opset >= 10 && in.size() >= 3 && in[1] && in[2]) {
    // Any rank, ONNX's clamping rules (torch's F.pad pads go through a
    // reversed 2-D slice).
    auto starts = vals(in[1]), ends = vals(in[2]);
    int64_t rank = in[0]->shape.size();
    std::vector<int64_t> axes = in.size() > 3 && in[3] ? vals(in[3]) : std::vector<int64_t>();
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i)
        axes.push_back(i);
    std::vector<int64_t> steps =
        in.size() > 4 && in[4] ? vals(in[4]) : std::vector<int64_t>(starts.size(), 1);
    if (starts.size() != ends.size() || starts.size() != axes.size() ||
        starts.size() != steps.size() || rank == 0)
      return failure();
    std::vector<int64_t> b(rank, 0), st(rank, 1), cnt = in[0]->shape;
    std::vector<bool> seen(rank, false);
    auto clampTo = [](int64_t x, int64_t lo, int64_t hi) { return std::max(lo, std::min(x, hi)); };
    for (size_t k = 0; k < axes.size(); ++k) {
      int64_t ax = axes[k] < 0 ? axes[k] + rank : axes[k];
      if (ax < 0 || ax >= rank || seen[ax] || steps[k] == 0)
        return failure();
      seen[ax] = true;
      int64_t dim = in[0]->shape[ax], step = steps[k];
      int64_t lo = starts[k] < 0 ? starts[k] + dim : starts[k];
      int64_t hi = ends[k] < 0 ? ends[k] + dim : ends[k];
      if (dim == 0) {
        // An empty axis gives an empty slice, whatever the bounds (the
        // clamps below would make a negative step take one element).
        cnt[ax] = 0;
      } else if (step > 0) {
        lo = clampTo(lo, 0, dim);
        hi = clampTo(hi, 0, dim);
        cnt[ax] = hi > lo ? (hi - lo + step - 1) / step : 0;
      } else {
        lo = clampTo(lo, 0, dim - 1);
        hi = clampTo(hi, -1, dim - 1);
        cnt[ax] = lo > hi ? (lo - hi - step - 1) / -step : 0;
      }
      b[ax] = lo;
      st[ax] = step;
    }
    auto v = vals(in[0]);
    std::vector<int64_t> strides(rank, 1);
    for (int64_t d = rank - 2; d >= 0; --d)
      strides[d] = strides[d + 1] * in[0]->shape[d + 1];
    int64_t total = 1;
    for (int64_t c : cnt)
      total *= c;
    std::vector<int64_t> out;
    out.reserve(total);
    std::vector<int64_t> idx(rank, 0);
    for (int64_t e = 0; e < total; ++e) {
      int64_t off = 0;
      for (int64_t d = 0; d < rank; ++d)
        off += (b[d] + idx[d] * st[d]) * strides[d];
      if (off < 0 || off >= (int64_t)v.size())
        return failure(); // cannot happen after the clamps; never read outside
      out.push_back(v[off]);
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (++idx[d] < cnt[d])
          break;
        idx[d] = 0;
      }
    }
    n.setConstOutput(0, makeInt64(cnt, out));
    return success();
  }
  if (op == "Transpose") {
    int64_t rank = in[0]->shape.size();
    std::vector<int64_t> perm;
    if (auto a = n.attr("perm"))
      perm.assign(a->ints().begin(), a->ints().end());
    else
      for (int64_t d = rank - 1; d >= 0; --d)
        perm.push_back(d);
    if ((int64_t)perm.size() != rank)
      return failure();
    std::vector<int64_t> shape(rank), strides(rank, 1);
    for (int64_t d = rank - 2; d >= 0; --d)
      strides[d] = strides[d + 1] * in[0]->shape[d + 1];
    std::vector<bool> used(rank, false);
    for (int64_t d = 0; d < rank; ++d) {
      if (perm[d] < 0 || perm[d] >= rank || used[perm[d]])
        return failure();
      used[perm[d]] = true;
      shape[d] = in[0]->shape[perm[d]];
    }
    auto v = vals(in[0]);
    std::vector<int64_t> out;
    out.reserve(v.size());
    std::vector<int64_t> idx(rank, 0);
    for (size_t e = 0; e < v.size(); ++e) {
      int64_t off = 0;
      for (int64_t d = 0; d < rank; ++d)
        off += idx[d] * strides[perm[d]];
      out.push_back(v[off]);
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (++idx[d] < shape[d])
          break;
        idx[d] = 0;
      }
    }
    n.setConstOutput(0, makeInt64(shape, out));
    return success();
  }
  if (op == "Reshape" && n.opset >= 5 && in.size() == 2 && in[1] && in[1]->shape.size() == 1) {
    // ONNX's rules: 0 copies the input's dim (unless allowzero), -1 is
    // inferred; anything inconsistent is left to the op's own checks.
    auto allowZero = n.getInt("allowzero", 0);
    if (failed(allowZero))
      return failure();
    std::vector<int64_t> shape = vals(in[1]);
    int64_t known = 1, infer = -1, count = in[0]->numElements();
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !*allowZero) {
        if (i >= in[0]->shape.size())
          return failure();
        shape[i] = in[0]->shape[i];
      }
      if (shape[i] == -1) {
        if (infer >= 0)
          return failure();
        infer = i;
      } else if (shape[i] < 0) {
        return failure();
      } else {
        std::optional<int64_t> k = llvm::checkedMul(known, shape[i]);
        if (!k)
          return failure(); // the op's own shape rules report it
        known = *k;
      }
    }
    if (infer >= 0) {
      if (known == 0 || count % known)
        return failure();
      shape[infer] = count / known;
    } else if (known != count) {
      return failure();
    }
    n.setConstOutput(0, makeInt64(shape, vals(in[0])));
    return success();
  }
  if (op == "Concat") {
    std::vector<int64_t> out;
    for (const HostTensor *t : in) {
      if (!t || t->shape.size() != 1)
        return failure();
      auto v = vals(t);
      out.insert(out.end(), v.begin(), v.end());
    }
    n.setConstOutput(0, makeInt64({(int64_t)out.size()}, out));
    return success();
  }
  if (op == "Expand" && in.size() == 2 && in[1] && in[1]->shape.size() == 1) {
    // numpy's two-way broadcast of the data and the shape (torch.export's
    // expand of a Shape into a repeated dimension list).
    HostTensor target;
    target.shape = vals(in[1]);
    int64_t elements = 1;
    for (int64_t d : target.shape) {
      if (d < 0)
        return n.fail("Expand's shape holds " + llvm::Twine(d) + " (sizes are >= 0)");
      if (d > (1 << 16) || (elements *= std::max<int64_t>(d, 1)) > (1 << 16))
        return failure(); // not shape arithmetic: the op's own rules judge it
    }
    std::vector<int64_t> shape;
    std::vector<std::vector<int64_t>> index;
    if (!broadcastConsts({in[0], &target}, shape, index))
      return failure();
    auto v = vals(in[0]);
    std::vector<int64_t> r(index[0].size());
    for (size_t e = 0; e < r.size(); ++e)
      r[e] = v[index[0][e]];
    n.setConstOutput(0, makeInteger(in[0]->dtype, shape, r));
    return success();
  }
  if (op == "Gather") {
    if (in.size() < 2 || !in[1] || in[0]->shape.size() != 1)
      return failure();
    auto data = vals(in[0]), idx = vals(in[1]);
    std::vector<int64_t> out;
    int64_t len = data.size();
    for (int64_t i : idx) {
      if (i < -len || i >= len)
        return n.fail("index " + llvm::Twine(i) + " is out of range for " + llvm::Twine(len) +
                      " values");
      out.push_back(data[i < 0 ? i + len : i]);
    }
    n.setConstOutput(0, makeInt64(in[1]->shape, out));
    return success();
  }
  if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Mod") && in.size() == 2 &&
      in[1]) {
    // Same shapes, or one side a single value of no higher rank (broadcast).
    const HostTensor *x = in[0], *y = in[1];
    bool same = x->shape == y->shape;
    bool xOne = x->numElements() == 1 && x->shape.size() <= y->shape.size();
    bool yOne = y->numElements() == 1 && y->shape.size() <= x->shape.size();
    if ((!same && !xOne && !yOne) || x->dtype != y->dtype)
      return failure(); // (mixed types: the op's own rules report them)
    auto fmod = n.getInt("fmod", 0);
    if (failed(fmod))
      return failure();
    auto a = vals(x), c = vals(y);
    const auto &shape = same || yOne ? x->shape : y->shape;
    std::vector<int64_t> r(std::max(a.size(), c.size()));
    for (size_t i = 0; i < r.size(); ++i) {
      int64_t p = a[a.size() == 1 ? 0 : i], q = c[c.size() == 1 ? 0 : i];
      if ((op == "Div" || op == "Mod") && q == 0)
        return n.fail("integer division by zero in a shape computation");
      // Checked: a folded value that wraps is a wrong shape, not a result.
      std::optional<int64_t> v;
      if (op == "Add")
        v = llvm::checkedAdd(p, q);
      else if (op == "Sub")
        v = llvm::checkedSub(p, q);
      else if (op == "Mul")
        v = llvm::checkedMul(p, q);
      else if (op == "Div") {
        if (!(p == INT64_MIN && q == -1))
          v = p / q; // truncates, as ONNX's integer Div
      } else {
        v = 0;
      }
      if (!v)
        return n.fail("integer overflow folding " + llvm::Twine(p) + " " + op + " " +
                      llvm::Twine(q) + " (the int64 result wraps)");
      if (x->dtype == onnx::TensorProto::INT32 && (*v < INT32_MIN || *v > INT32_MAX))
        return n.fail("integer overflow folding " + llvm::Twine(p) + " " + op + " " +
                      llvm::Twine(q) + " (the int32 result wraps)");
      r[i] = *v;
      if (op == "Mod") { // the divisor's sign (fmod=0, Python's %), or the dividend's (fmod=1)
        r[i] = q == -1 ? 0 : p % q;
        if (*fmod == 0 && r[i] != 0 && ((r[i] < 0) != (q < 0)))
          r[i] += q;
      }
    }
    n.setConstOutput(0, makeInteger(x->dtype, shape, r));
    return success();
  }
  return failure();
}
} // namespace onnx_import
