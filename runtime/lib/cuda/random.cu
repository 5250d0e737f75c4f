//===- random.cu - dropout and the random generators ------------------------===//
//
// The CPU runtime's generator, jumped ahead per chunk, so that the device draws the CPU's bits.
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"
#include "elementwise.cuh"

using namespace amprt;
using namespace amprt::desc;
using namespace amprt::ops;

namespace amprt::cuda {

//--- Dropout (the CPU's generator, jumped ahead) ----------------------------------

constexpr int kRngJumps = 48;          // elements per dropout call < 2^48
constexpr int64_t kDropoutChunk = 256; // elements per thread (one jump each)

/// The state k steps after s: the product of the jump matrices of k's bits.
HD inline uint64_t rngJump(const uint64_t *jumps, uint64_t s, int64_t k) {
  for (int j = 0; k && j < kRngJumps; ++j, k >>= 1) {
    if (!(k & 1))
      continue;
    const uint64_t *col = jumps + 64 * j;
    uint64_t r = 0;
    for (int b = 0; b < 64; ++b)
      r ^= col[b] & (0 - ((s >> b) & 1));
    s = r;
  }
  return s;
}

/// The 64 columns of the step's matrix to the powers 2^0 .. 2^47.
const std::vector<uint64_t> &rngJumpTable() {
  static const std::vector<uint64_t> table = [] {
    std::vector<uint64_t> t((size_t)kRngJumps * 64);
    for (int b = 0; b < 64; ++b)
      t[b] = ops::rngStep(uint64_t(1) << b);
    for (int j = 1; j < kRngJumps; ++j) // M^(2^j) = M^(2^(j-1)) squared
      for (int b = 0; b < 64; ++b) {
        uint64_t v = t[64 * (j - 1) + b], r = 0;
        for (int c = 0; c < 64; ++c)
          if ((v >> c) & 1)
            r ^= t[64 * (j - 1) + c];
        t[64 * j + b] = r;
      }
    return t;
  }();
  return table;
}

/// Inverted dropout over kDropoutChunk elements per index (y's row-major
/// order): element i draws from the state i + 1 steps after *state, keeps
/// x * keepScale where the uniform >= ratio (amprt_dropout's definition).
struct DropoutF {
  View x, y;
  uint8_t *mask;
  const uint64_t *state, *jumps;
  int64_t n;
  float ratio, keepScale;
  HD void operator()(int64_t c) const {
    int64_t i0 = c * kDropoutChunk, i1 = i0 + kDropoutChunk < n ? i0 + kDropoutChunk : n;
    uint64_t s = rngJump(jumps, *state, i0);
    for (int64_t i = i0; i < i1; ++i) {
      s = ops::rngStep(s);
      bool keep = ops::rngUniform(s) >= ratio;
      stF(y.data, y.dtype, y.at(i), keep ? ldF(x.data, x.dtype, x.at(i)) * keepScale : 0.0f);
      if (mask)
        mask[i] = keep;
    }
  }
};

/// amprt_random over kDropoutChunk elements per index (y contiguous, in
/// row-major order; element i takes draws i * steps + 1 .. i * steps + steps
/// after *state, as the CPU's loop). A bernoulli probability outside [0, 1]
/// is recorded as a device error (its element is 0).
struct RandomF {
  void *y;
  const void *p;
  int32_t yt, pt, kind, steps;
  double a, b;
  const uint64_t *state, *jumps;
  int64_t n;
  DeviceError *err;
  HD void operator()(int64_t c) const {
    int64_t i0 = c * kDropoutChunk, i1 = i0 + kDropoutChunk < n ? i0 + kDropoutChunk : n;
    uint64_t s = rngJump(jumps, *state, i0 * steps);
    for (int64_t i = i0; i < i1; ++i) {
      s = ops::rngStep(s);
      float u1 = ops::rngUniform(s), u2 = 0.0f, pv = 0.0f;
      if (steps == 2) {
        s = ops::rngStep(s);
        u2 = ops::rngUniform(s);
      }
      if (p) {
        pv = ldF(p, pt, i);
        if (!(pv >= 0.0f && pv <= 1.0f)) {
          uint32_t bits;
          memcpy(&bits, &pv, 4);
          recordError(err, ERR_PROBABILITY, bits, i, 0);
          pv = 0.0f;
        }
      }
      stF(y, yt, i, (float)ops::randomValue(kind, a, b, u1, u2, pv));
    }
  }
};

/// *state moves n steps on (after the draws that read it).
struct RngAdvanceF {
  uint64_t *state;
  const uint64_t *jumps;
  int64_t n;
  HD void operator()(int64_t) const { *state = rngJump(jumps, *state, n); }
};

/// The random opcodes of amprt_exec (exec.cu dispatches them here).
int32_t execRandom(amprt_context *ctx, Dev &d, Decoded &dd) {
  (void)ctx;
  auto &t = dd.t;
  switch ((amprt_opcode)dd.opcode) {
  case AMPRT_OP_RANDOM: {
    attrs::random a;
    AMPRT_CHECK(read(dd, a));
    bool bern = a.kind == AMPRT_RANDOM_BERNOULLI;
    const amprt_tensor &y = t.back();
    if (a.kind < AMPRT_RANDOM_UNIFORM || a.kind > AMPRT_RANDOM_BERNOULLI)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_random: unknown kind %lld", (long long)a.kind);
    if (!floatType(y.dtype) || !amprt_tensor_is_contiguous(&y))
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_random: y must be a contiguous float tensor");
    int64_t n = numel(y);
    int32_t steps = a.kind == AMPRT_RANDOM_NORMAL ? 2 : 1;
    if (bern && (!floatType(t[0].dtype) || !amprt_tensor_is_contiguous(&t[0]) || numel(t[0]) != n))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_random: p %s must be a contiguous float tensor of y's size %s",
                  shapeString(&t[0]).c_str(), shapeString(&y).c_str());
    if (n * steps >= ((int64_t)1 << kRngJumps))
      return fail(AMPRT_ERR_UNSUPPORTED, "amprt_exec (cuda): random over %lld elements",
                  (long long)n);
    if (n == 0)
      return AMPRT_OK;
    AMPRT_CHECK(
        each(&d, (n + kDropoutChunk - 1) / kDropoutChunk,
             RandomF{y.data, bern ? t[0].data : nullptr, y.dtype, bern ? t[0].dtype : AMPRT_F32,
                     (int32_t)a.kind, steps, a.a, a.b, d.rngState, d.rngJumps, n, d.err},
             "random"));
    return each(&d, 1, RngAdvanceF{d.rngState, d.rngJumps, n * steps}, "random");
  }
  case AMPRT_OP_DROPOUT: {
    attrs::dropout a;
    AMPRT_CHECK(read(dd, a));
    float ratio = a.training ? (float)a.ratio : 0.0f;
    if (ratio != 0.0f) {
      amprt_tensor &x = t[0], &y = t[1], &mask = t[2];
      if (!(ratio > 0.0f && ratio < 1.0f))
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_dropout: ratio %g outside [0, 1)", ratio);
      if (!floatType(x.dtype) || !floatType(y.dtype))
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): dropout needs float tensors");
      if (mask.data &&
          (mask.dtype != AMPRT_I1 || numel(mask) != numel(y) || !amprt_tensor_is_contiguous(&mask)))
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "amprt_dropout: mask must be a contiguous i1 tensor of y's size");
      int64_t n = numel(y);
      if (n >= ((int64_t)1 << kRngJumps))
        return fail(AMPRT_ERR_UNSUPPORTED, "amprt_exec (cuda): dropout over %lld elements",
                    (long long)n);
      View xv;
      AMPRT_CHECK(broadcastView(x, y, "amprt_exec (cuda): dropout", xv));
      AMPRT_CHECK(each(&d, (n + kDropoutChunk - 1) / kDropoutChunk,
                       DropoutF{flat(xv), flat(viewOf(y)), static_cast<uint8_t *>(mask.data),
                                d.rngState, d.rngJumps, n, ratio, 1.0f / (1.0f - ratio)},
                       "dropout"));
      return each(&d, 1, RngAdvanceF{d.rngState, d.rngJumps, n}, "dropout");
    }
    AMPRT_CHECK(each(&d, numel(t[1]), CastF{flat(viewOf(t[0])), flat(viewOf(t[1]))}, "dropout"));
    if (t[2].data) {
      if (t[2].dtype != AMPRT_I1 || !amprt_tensor_is_contiguous(&t[2]))
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): dropout's mask");
      if (d.emulate)
        std::memset(t[2].data, 1, (size_t)numel(t[2]));
      else
        CUDA_CHECK(cudaMemsetAsync(t[2].data, 1, (size_t)numel(t[2]), d.stream), "dropout");
    }
    return AMPRT_OK;
  }
  default:
    break;
  }
  return fail(AMPRT_ERR_INVALID_ARGUMENT,
              "amprt_exec (cuda): opcode %lld is not one of the random ops", (long long)dd.opcode);
}

} // namespace amprt::cuda
