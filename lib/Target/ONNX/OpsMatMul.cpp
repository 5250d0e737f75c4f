//===- OpsMatMul.cpp - MatMul, Gemm, Einsum ---------------------------------===//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace onnx_import {

namespace {

LogicalResult handleGemm(NodeCtx &n) {
  if (failed(n.allowAttrs({"alpha", "beta", "transA", "transB", "broadcast"})))
    return failure();
  auto alpha = n.getFloat("alpha", 1.0f), beta = n.getFloat("beta", 1.0f);
  auto ta = n.getInt("transA", 0), tb = n.getInt("transB", 0);
  if (failed(alpha) || failed(beta) || failed(ta) || failed(tb))
    return failure();
  auto a = n.input(0), bb = n.input(1);
  if (failed(a) || failed(bb))
    return failure();
  SmallVector<Value> operands{*a, *bb};
  if (Value c = n.optInput(2))
    operands.push_back(c);
  else if (n.hasInput(2))
    return failure();
  auto op = n.im.tryCreate<GemmOp>(
      n, operands,
      {named(n, "alpha", f32(n, *alpha)), named(n, "beta", f32(n, *beta)),
       named(n, "trans_a", boolean(n, *ta != 0)), named(n, "trans_b", boolean(n, *tb != 0))},
      1);
  if (failed(op))
    return failure();
  n.setOutput(0, (*op)->getResult(0));
  return success();
}

/// Einsum as torch.einsum computes it: each operand's repeated labels
/// (diagonals) taken by a mask and a sum, labels no one else needs summed,
/// then the operands contracted left to right, each pair one batched
/// amp.matmul ([batch..., M, K] x [batch..., K, N]) between transposes and
/// reshapes; the result transposed to the output's order. The ellipsis
/// broadcasts as numpy's; implicit output: the ellipsis, then the labels
/// seen once, sorted.
LogicalResult handleEinsum(NodeCtx &n) {
  if (failed(n.allowAttrs({"equation"})))
    return failure();
  auto eqn = n.getString("equation", std::nullopt);
  if (failed(eqn))
    return failure();
  std::string eq;
  for (char c : *eqn)
    if (c != ' ')
      eq += c;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::optional<std::string> rhs;
  if (arrow != std::string::npos)
    rhs = eq.substr(arrow + 2);
  SmallVector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (terms.size() != n.numInputs())
    return n.fail("equation '" + *eqn + "' has " + llvm::Twine(terms.size()) +
                  " operands, the node " + llvm::Twine(n.numInputs()) + " inputs");
  // Labels: letters 0..51, ellipsis dims 100 + position (right-aligned).
  auto parse = [&](const std::string &t, int64_t rank, SmallVector<int64_t> &labels,
                   int64_t &ellDims, bool isOut) -> LogicalResult {
    size_t dots = t.find("...");
    if (dots != std::string::npos && t.find("...", dots + 1) != std::string::npos)
      return n.fail("equation '" + *eqn + "': more than one ellipsis in '" + t + "'");
    int64_t letters = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      if (dots != std::string::npos && i >= dots && i < dots + 3)
        continue;
      if (!llvm::isAlpha(t[i]))
        return n.fail("equation '" + *eqn + "': '" + std::string(1, t[i]) + "' is not a label");
      ++letters;
    }
    ellDims = dots == std::string::npos ? 0 : rank - letters;
    if (!isOut && (ellDims < 0 || (dots == std::string::npos && letters != rank)))
      return n.fail("equation '" + *eqn + "': term '" + t + "' does not match an input of rank " +
                    llvm::Twine(rank));
    for (size_t i = 0; i < t.size(); ++i) {
      if (dots != std::string::npos && i == dots) {
        // Placed once the widest ellipsis is known (the output's: one -1).
        for (int64_t k = 0; k < (isOut ? 1 : ellDims); ++k)
          labels.push_back(-1 - k);
        i += 2;
        continue;
      }
      labels.push_back(llvm::isLower(t[i]) ? t[i] - 'a' : 26 + t[i] - 'A');
    }
    return success();
  };
  struct Term {
    Value v;
    SmallVector<int64_t> labels;
  };
  SmallVector<Term> ops;
  SmallVector<int64_t> ellOf;
  int64_t maxEll = 0;
  Type elt;
  for (size_t i = 0; i < terms.size(); ++i) {
    auto v = n.input(i);
    if (failed(v))
      return failure();
    auto t = cast<RankedTensorType>(v->getType());
    if (!t.hasStaticShape())
      return n.fail("needs static input shapes");
    if (!isa<FloatType>(t.getElementType()))
      return n.fail("only float tensors are supported");
    elt = t.getElementType();
    Term term{*v, {}};
    int64_t ell;
    if (failed(parse(terms[i], t.getRank(), term.labels, ell, false)))
      return failure();
    ellOf.push_back(ell);
    maxEll = std::max(maxEll, ell);
    ops.push_back(term);
  }
  for (size_t i = 0; i < ops.size(); ++i)
    for (int64_t &l : ops[i].labels)
      if (l < 0)
        l = 100 + (maxEll - ellOf[i]) + (-1 - l);
  // Sizes (ellipsis dims broadcast; letters must agree).
  std::map<int64_t, int64_t> size;
  for (const Term &t : ops) {
    auto shape = cast<RankedTensorType>(t.v.getType()).getShape();
    for (auto [l, d] : llvm::zip(t.labels, shape)) {
      auto it = size.find(l);
      if (it == size.end() || it->second == d)
        size[l] = d;
      else if (l >= 100 && (it->second == 1 || d == 1))
        size[l] = std::max(it->second, d);
      else
        return n.fail(
            "equation '" + *eqn + "': label '" +
            (l >= 100 ? std::string("...") : std::string(1, l < 26 ? 'a' + l : 'A' + l - 26)) +
            "' spans dims of sizes " + llvm::Twine(it->second) + " and " + llvm::Twine(d));
    }
  }
  SmallVector<int64_t> out;
  if (rhs) {
    int64_t ell;
    if (failed(parse(*rhs, 0, out, ell, true)))
      return failure();
    SmallVector<int64_t> fixed;
    for (int64_t l : out)
      if (l == -1)
        for (int64_t k = 0; k < maxEll; ++k)
          fixed.push_back(100 + k);
      else if (l >= 0)
        fixed.push_back(l);
    out = fixed;
    for (int64_t l : out) {
      if (!size.count(l))
        return n.fail("equation '" + *eqn + "': output label '" +
                      std::string(1, l < 26 ? 'a' + l : 'A' + l - 26) + "' is in no input");
      if (llvm::count(out, l) != 1)
        return n.fail("equation '" + *eqn + "': an output label repeats");
    }
  } else {
    for (int64_t k = 0; k < maxEll; ++k)
      out.push_back(100 + k);
    std::map<int64_t, int> seen;
    for (const Term &t : ops)
      for (int64_t l : t.labels)
        if (l < 100)
          ++seen[l];
    // ASCII order: upper case before lower case.
    for (int64_t l = 26; l < 52; ++l)
      if (seen.count(l) && seen[l] == 1)
        out.push_back(l);
    for (int64_t l = 0; l < 26; ++l)
      if (seen.count(l) && seen[l] == 1)
        out.push_back(l);
  }

  Elementwise e{n};
  auto create = [&](llvm::StringRef name, ValueRange ins, ArrayRef<NamedAttribute> attrs) {
    return e.op(name, ins, attrs);
  };
  auto shapeOf = [](Value v) { return cast<RankedTensorType>(v.getType()).getShape(); };
  auto sumOver = [&](Term &t, ArrayRef<int64_t> axes) {
    if (axes.empty() || !e.ok)
      return;
    t.v = create(ReduceSumOp::getOperationName(), {t.v},
                 {named(n, "axes", ints(n, axes)), named(n, "keepdims", boolean(n, false))});
    SmallVector<int64_t> keep;
    for (auto [i, l] : llvm::enumerate(t.labels))
      if (!llvm::is_contained(axes, (int64_t)i))
        keep.push_back(l);
    t.labels = keep;
  };
  auto permute = [&](Term &t, ArrayRef<int64_t> order) {
    SmallVector<int64_t> perm;
    for (int64_t l : order)
      perm.push_back(llvm::find(t.labels, l) - t.labels.begin());
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i)
      identity &= perm[i] == (int64_t)i;
    if (!identity && e.ok)
      t.v = create(TransposeOp::getOperationName(), {t.v}, {named(n, "perm", ints(n, perm))});
    t.labels.assign(order.begin(), order.end());
  };
  auto reshape = [&](Value v, ArrayRef<int64_t> shape) {
    if (!e.ok || shapeOf(v) == shape)
      return v;
    return create(ReshapeOp::getOperationName(), {v}, {named(n, "shape", ints(n, shape))});
  };
  // Diagonals: x * eye over the two dims, summed over the second.
  for (Term &t : ops) {
    for (bool again = true; again && e.ok;) {
      again = false;
      for (size_t p = 0; p < t.labels.size() && !again; ++p)
        for (size_t q = p + 1; q < t.labels.size() && !again; ++q) {
          if (t.labels[p] != t.labels[q])
            continue;
          auto shape = shapeOf(t.v);
          if (shape[p] != shape[q])
            return n.fail("equation '" + *eqn + "': a diagonal of dims of sizes " +
                          llvm::Twine(shape[p]) + " and " + llvm::Twine(shape[q]));
          SmallVector<int64_t> ms(shape.size(), 1);
          ms[p] = ms[q] = shape[p];
          auto mt = RankedTensorType::get(ms, elt);
          SmallVector<Attribute> vals;
          auto zero = n.im.b.getFloatAttr(elt, 0.0), one = n.im.b.getFloatAttr(elt, 1.0);
          for (int64_t i = 0; i < shape[p]; ++i)
            for (int64_t j = 0; j < shape[p]; ++j)
              vals.push_back(i == j ? one : zero);
          Value mask =
              arith::ConstantOp::create(n.im.b, n.loc, mt, DenseElementsAttr::get(mt, vals));
          t.v = e.mul(t.v, mask);
          sumOver(t, {(int64_t)q});
          again = true;
        }
    }
  }
  // Labels needed after operand i: in the output or a later operand.
  auto neededAfter = [&](size_t i, int64_t l) {
    if (llvm::is_contained(out, l))
      return true;
    for (size_t j = i + 1; j < ops.size(); ++j)
      if (llvm::is_contained(ops[j].labels, l))
        return true;
    return false;
  };
  auto inOthers = [&](size_t i, int64_t l) {
    for (size_t j = 0; j < ops.size(); ++j)
      if (j != i && llvm::is_contained(ops[j].labels, l))
        return true;
    return llvm::is_contained(out, l);
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    SmallVector<int64_t> axes;
    for (auto [k, l] : llvm::enumerate(ops[i].labels))
      if (!inOthers(i, l))
        axes.push_back(k);
    sumOver(ops[i], axes);
  }
  Term cur = ops[0];
  for (size_t i = 1; i < ops.size() && e.ok; ++i) {
    Term other = ops[i];
    SmallVector<int64_t> batch, con, aOnly, bOnly;
    for (int64_t l : cur.labels) {
      bool inB = llvm::is_contained(other.labels, l);
      bool later = neededAfter(i, l);
      (inB ? (later ? batch : con) : aOnly).push_back(l);
    }
    for (int64_t l : other.labels)
      if (!llvm::is_contained(cur.labels, l))
        bOnly.push_back(l);
    auto sizeIn = [&](const Term &t, int64_t l) {
      return shapeOf(t.v)[llvm::find(t.labels, l) - t.labels.begin()];
    };
    for (int64_t l : con)
      if (sizeIn(cur, l) != sizeIn(other, l))
        return n.fail("equation '" + *eqn +
                      "': a summed ellipsis dim is broadcast (not supported)");
    auto prod = [&](const Term &t, ArrayRef<int64_t> ls) {
      int64_t p = 1;
      for (int64_t l : ls)
        p *= sizeIn(t, l);
      return p;
    };
    SmallVector<int64_t> aOrder(batch), bOrder(batch), aShape, bShape, rShape;
    llvm::append_range(aOrder, aOnly);
    llvm::append_range(aOrder, con);
    llvm::append_range(bOrder, con);
    llvm::append_range(bOrder, bOnly);
    for (int64_t l : batch) {
      aShape.push_back(sizeIn(cur, l));
      bShape.push_back(sizeIn(other, l));
      rShape.push_back(std::max(sizeIn(cur, l), sizeIn(other, l)));
    }
    int64_t M = prod(cur, aOnly), K = prod(cur, con), N = prod(other, bOnly);
    for (int64_t l : aOnly)
      rShape.push_back(sizeIn(cur, l));
    for (int64_t l : bOnly)
      rShape.push_back(sizeIn(other, l));
    permute(cur, aOrder);
    permute(other, bOrder);
    aShape.append({M, K});
    bShape.append({K, N});
    Value a = reshape(cur.v, aShape), b = reshape(other.v, bShape);
    Value mm = e.ok ? create(MatMulOp::getOperationName(), {a, b}, {}) : Value();
    SmallVector<int64_t> labels(batch);
    llvm::append_range(labels, aOnly);
    llvm::append_range(labels, bOnly);
    cur = Term{reshape(mm, rShape), labels};
  }
  if (!e.ok)
    return failure();
  SmallVector<int64_t> axes;
  for (auto [k, l] : llvm::enumerate(cur.labels))
    if (!llvm::is_contained(out, l))
      axes.push_back(k);
  sumOver(cur, axes);
  permute(cur, out);
  if (!e.ok)
    return failure();
  n.setOutput(0, cur.v);
  return success();
}

} // namespace

void registerMatMulOps(OpRegistry &r) {
  r.on("MatMul", 1, binaryOp<MatMulOp>());
  r.on("Einsum", 12, handleEinsum);
  r.on("Gemm", 1, handleGemm);
}
} // namespace onnx_import
