//===- matmul_dims.cpp - a matrix product's shapes ------------------------===//

#include "common/matmul_dims.h"
#include "common/check.h"

amprt_status amprt::matmulDims(const amprt_tensor *a, const amprt_tensor *b, const amprt_tensor *y,
                               const char *k, MatmulDims &md) {
  md = MatmulDims{};
  if (a->rank < 1 || b->rank < 1)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: a and b need at least one dim", k);
  int64_t as[AMPRT_MAX_RANK + 1], bs[AMPRT_MAX_RANK + 1];
  int32_t ar = a->rank, br = b->rank;
  for (int32_t d = 0; d < ar; ++d)
    as[d] = a->shape[d];
  for (int32_t d = 0; d < br; ++d)
    bs[d] = b->shape[d];
  if (ar == 1) {
    as[1] = as[0];
    as[0] = 1;
    ar = 2;
  }
  if (br == 1) {
    bs[1] = 1;
    br = 2;
  }
  md.m = as[ar - 2];
  md.k = as[ar - 1];
  md.n = bs[br - 1];
  if (md.k != bs[br - 2])
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: contracted dims differ (%lld, %lld)", k,
                (long long)md.k, (long long)bs[br - 2]);
  md.batchRank = (ar > br ? ar : br) - 2;
  int64_t sa = 1, sb = 1;
  for (int32_t d = md.batchRank - 1; d >= 0; --d) {
    int32_t ad = d - (md.batchRank - (ar - 2)), bd = d - (md.batchRank - (br - 2));
    int64_t da = ad >= 0 ? as[ad] : 1, db = bd >= 0 ? bs[bd] : 1;
    if (da != db && da != 1 && db != 1)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: batch dims %s and %s do not broadcast", k,
                  shapeString(a).c_str(), shapeString(b).c_str());
    md.batch[d] = da > db ? da : db;
    md.astr[d] = da == 1 ? 0 : sa;
    md.bstr[d] = db == 1 ? 0 : sb;
    sa *= da;
    sb *= db;
  }
  for (int32_t d = 0; d < md.batchRank; ++d)
    md.batches *= md.batch[d];
  if (amprt_tensor_numel(y) != md.batches * md.m * md.n)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: y %s does not hold the result", k,
                shapeString(y).c_str());
  return AMPRT_OK;
}
