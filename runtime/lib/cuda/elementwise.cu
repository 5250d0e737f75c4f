//===- elementwise.cu - element-wise kernels --------------------------------===//
//
// Unary ops and their gradients, binary ops, where, casts, copies, concat
// and slice gradients; float ops in groups of eight elements (16-byte
// accesses) where the views allow.
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"
#include "elementwise.cuh"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

/// The elementwise opcodes of amprt_exec (exec.cu dispatches them here).
int32_t execElementwise(amprt_context *ctx, Dev &d, Decoded &dd) {
  (void)ctx;
  auto &t = dd.t;
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_UNARY: {
    attrs::unary a;
    AMPRT_CHECK(read(dd, a));
    View xv;
    AMPRT_CHECK(broadcastView(t[0], t[1], "amprt_exec (cuda): unary", xv));
    if ((unsigned)a.op > AMPRT_UNARY_LAST)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): unknown unary op %lld",
                  (long long)a.op);
    if (!floatType(t[1].dtype) && a.op != AMPRT_UNARY_RELU && a.op != AMPRT_UNARY_IDENTITY)
      return fail(AMPRT_ERR_UNSUPPORTED, "amprt_exec (cuda): unary op %lld on integers",
                  (long long)a.op);
    View yv = flat(viewOf(t[1]));
    float alpha = (float)a.alpha, beta = (float)a.beta.value_or(0);
    // sin, cos, ... element by element (UnaryOp leaves them out: see applyUnary).
    bool trig = isTrig((int)a.op);
    if (floatType(t[1].dtype) && !trig) {
      bool done;
      AMPRT_CHECK(eachVec8<1>(d, {flat(xv)}, yv, numel(t[1]), UnaryOp{(int32_t)a.op, alpha, beta},
                              "unary", &done));
      if (done)
        return AMPRT_OK;
    }
    return each(&d, numel(t[1]), UnaryF{flat(xv), yv, (int32_t)a.op, alpha, beta}, "unary");
  }
  case AMPRT_OP_UNARY_GRAD: {
    attrs::unary_grad a;
    AMPRT_CHECK(read(dd, a));
    View xv, gv;
    AMPRT_CHECK(broadcastView(t[0], t[2], "amprt_exec (cuda): unary_grad", xv));
    AMPRT_CHECK(broadcastView(t[1], t[2], "amprt_exec (cuda): unary_grad", gv));
    if ((unsigned)a.op > AMPRT_UNARY_LAST)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): unknown unary op %lld",
                  (long long)a.op);
    View yv = flat(viewOf(t[2]));
    float alpha = (float)a.alpha, beta = (float)a.beta.value_or(0);
    if (!isTrig((int)a.op)) {
      bool done;
      AMPRT_CHECK(eachVec8<2>(d, {flat(xv), flat(gv)}, yv, numel(t[2]),
                              UnaryGradOp{(int32_t)a.op, alpha, beta}, "unary_grad", &done));
      if (done)
        return AMPRT_OK;
    }
    return each(&d, numel(t[2]), UnaryGradF{flat(xv), flat(gv), yv, (int32_t)a.op, alpha, beta},
                "unary_grad");
  }
  case AMPRT_OP_BINARY: {
    attrs::binary a;
    AMPRT_CHECK(read(dd, a));
    if ((unsigned)a.op > AMPRT_BINARY_LAST)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): unknown binary op %lld",
                  (long long)a.op);
    if (isCompare((int)a.op) != (t[2].dtype == AMPRT_I1) ||
        (isCompare((int)a.op) && t[0].dtype != t[1].dtype))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_exec (cuda): binary op %lld: a comparison (only) gives i1, from one type",
                  (long long)a.op);
    View av, bv;
    AMPRT_CHECK(broadcastView(t[0], t[2], "amprt_exec (cuda): binary", av));
    AMPRT_CHECK(broadcastView(t[1], t[2], "amprt_exec (cuda): binary", bv));
    View yv = flat(viewOf(t[2]));
    if (floatType(t[2].dtype)) {
      bool done;
      AMPRT_CHECK(eachVec8<2>(d, {flat(av), flat(bv)}, yv, numel(t[2]), BinaryOp{(int32_t)a.op},
                              "binary", &done));
      if (done)
        return AMPRT_OK;
    }
    return each(&d, numel(t[2]), BinaryF{flat(av), flat(bv), yv, (int32_t)a.op, d.err}, "binary");
  }
  case AMPRT_OP_WHERE: {
    attrs::where a;
    AMPRT_CHECK(read(dd, a));
    if (t[0].dtype != AMPRT_I1 || t[1].dtype != t[3].dtype || t[2].dtype != t[3].dtype)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): where's types");
    View cv, av, bv;
    AMPRT_CHECK(broadcastView(t[0], t[3], "amprt_exec (cuda): where", cv));
    AMPRT_CHECK(broadcastView(t[1], t[3], "amprt_exec (cuda): where", av));
    AMPRT_CHECK(broadcastView(t[2], t[3], "amprt_exec (cuda): where", bv));
    return each(&d, numel(t[3]),
                WhereF{flat(cv), flat(av), flat(bv), flat(viewOf(t[3])),
                       (int64_t)amprt_dtype_size(t[3].dtype)},
                "where");
  }
  case AMPRT_OP_CAST: {
    attrs::cast a;
    AMPRT_CHECK(read(dd, a));
    if (!sameShape(t[0], t[1]))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): cast shapes differ");
    if (floatType(t[0].dtype) && floatType(t[1].dtype)) {
      bool done;
      AMPRT_CHECK(eachVec8<1>(d, {flat(viewOf(t[0]))}, flat(viewOf(t[1])), numel(t[1]), CastOp{},
                              "cast", &done));
      if (done)
        return AMPRT_OK;
    }
    return each(&d, numel(t[1]), CastF{flat(viewOf(t[0])), flat(viewOf(t[1]))}, "cast");
  }
  case AMPRT_OP_COPY: {
    attrs::copy a;
    AMPRT_CHECK(read(dd, a));
    return copyTensor(d, t[0], t[1], "copy");
  }
  case AMPRT_OP_CONCAT: {
    attrs::concat a;
    AMPRT_CHECK(read(dd, a));
    amprt_tensor &y = t.back();
    int32_t axis = axisField(a.axis);
    if (axis < 0 || axis >= y.rank)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): concat axis");
    int64_t at = 0;
    for (size_t i = 0; i + 1 < t.size(); ++i) {
      if (t[i].rank != y.rank || t[i].dtype != y.dtype || at + t[i].shape[axis] > y.shape[axis])
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): concat input %zu", i);
      amprt_tensor view = y;
      view.shape[axis] = t[i].shape[axis];
      view.data =
          static_cast<char *>(y.data) + at * y.strides[axis] * (int64_t)amprt_dtype_size(y.dtype);
      AMPRT_CHECK(
          each(&d, numel(view),
               CopyF{flat(viewOf(t[i])), flat(viewOf(view)), (int64_t)amprt_dtype_size(y.dtype)},
               "concat"));
      at += t[i].shape[axis];
    }
    if (at != y.shape[axis])
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): concat inputs do not fill y");
    return AMPRT_OK;
  }
  case AMPRT_OP_SLICE_GRAD: {
    attrs::slice_grad a;
    AMPRT_CHECK(read(dd, a));
    const amprt_tensor &whole = t[2];
    if (!amprt_tensor_is_contiguous(&whole) || whole.dtype != t[1].dtype)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec: corrupt slice_grad");
    AMPRT_CHECK(zero(d, whole.data, (size_t)numel(whole) * amprt_dtype_size(whole.dtype)));
    return copyTensor(d, t[0], t[1], "slice_grad");
  }
  default:
    break;
  }
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec (cuda): opcode %lld is not one of the elementwise ops",
              (long long)dd.opcode);
}

} // namespace amprt::cuda
