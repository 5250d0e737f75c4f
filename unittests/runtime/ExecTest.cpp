//===- ExecTest.cpp - the descriptor entry point of compiled code --------===//

#include "TestUtil.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

using namespace amprt_test;

namespace {
void pushTensor(std::vector<int64_t> &d, const amprt_tensor &t, int64_t offset = 0) {
  d.push_back(t.dtype);
  d.push_back(t.rank);
  d.push_back(offset);
  for (int i = 0; i < t.rank; ++i)
    d.push_back(t.shape[i]);
  for (int i = 0; i < t.rank; ++i)
    d.push_back(t.strides[i]);
}
int64_t f64bits(double v) {
  int64_t b;
  std::memcpy(&b, &v, 8);
  return b;
}
} // namespace

TEST(Exec, RunsAGemmFromADescriptor) {
  Buf a = randn(AMPRT_F32, {3, 4}), b = randn(AMPRT_F32, {4, 2}), y(AMPRT_F32, {3, 2}),
      ref(AMPRT_F32, {3, 2});
  std::vector<int64_t> d = {AMPRT_EXEC_VERSION, AMPRT_OP_GEMM, 3, 5};
  pushTensor(d, a.t);
  pushTensor(d, b.t);
  pushTensor(d, y.t);
  for (int64_t v : {f64bits(2.0), f64bits(0.0), (int64_t)0, (int64_t)0, (int64_t)0})
    d.push_back(v);
  void *bufs[3] = {a.t.data, b.t.data, y.t.data};
  ASSERT_EQ(amprt_exec(nullptr, d.data(), bufs), AMPRT_OK) << amprt_last_error();
  AMPRT_OK_OR_FAIL(amprt_gemm(nullptr, a.p(), b.p(), nullptr, 2.0f, 0.0f, 0, 0, ref.p()));
  EXPECT_EQ(y.bytes, ref.bytes);
}

TEST(Exec, ElementOffsetsAddressViews) {
  // Slice [:, 1:3] of a 2x4 tensor as a strided view at element offset 1.
  Buf x = randn(AMPRT_F32, {2, 4}), y(AMPRT_F32, {2, 2});
  amprt_tensor view = x.t;
  view.shape[1] = 2;
  std::vector<int64_t> d = {AMPRT_EXEC_VERSION, AMPRT_OP_COPY, 2, 0};
  pushTensor(d, view, 1);
  pushTensor(d, y.t);
  void *bufs[2] = {x.t.data, y.t.data};
  ASSERT_EQ(amprt_exec(nullptr, d.data(), bufs), AMPRT_OK) << amprt_last_error();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      EXPECT_EQ(y.get(i * 2 + j), x.get(i * 4 + 1 + j));
}

TEST(Exec, CorruptDescriptorsAreErrors) {
  Buf x = randn(AMPRT_F32, {4}), y(AMPRT_F32, {4});
  void *bufs[2] = {x.t.data, y.t.data};
  std::vector<int64_t> d = {AMPRT_EXEC_VERSION + 7, AMPRT_OP_COPY, 2, 0};
  EXPECT_EQ(amprt_exec(nullptr, d.data(), bufs), AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("compiled for another runtime"),
            std::string::npos);
  d = {AMPRT_EXEC_VERSION, 999, 2, 0};
  pushTensor(d, x.t);
  pushTensor(d, y.t);
  EXPECT_EQ(amprt_exec(nullptr, d.data(), bufs), AMPRT_ERR_UNSUPPORTED);
  d = {AMPRT_EXEC_VERSION, AMPRT_OP_UNARY, 2, 1}; // unary needs 2 attributes
  pushTensor(d, x.t);
  pushTensor(d, y.t);
  d.push_back(0);
  EXPECT_EQ(amprt_exec(nullptr, d.data(), bufs), AMPRT_ERR_INVALID_ARGUMENT);
  d = {AMPRT_EXEC_VERSION, AMPRT_OP_COPY, 2, 0, AMPRT_F32, 99};
  EXPECT_EQ(amprt_exec(nullptr, d.data(), bufs), AMPRT_ERR_INVALID_ARGUMENT);
}

TEST(Exec, NamedDescriptorsPutTheNodeInFrontOfAnError) {
  // A copy whose shapes differ fails; named (version 2: the name after the
  // attributes, packed little-endian), its message starts with the node.
  Buf x = randn(AMPRT_F32, {4}), y(AMPRT_F32, {5});
  void *bufs[2] = {x.t.data, y.t.data};
  const std::string name = "/encoder/layer.0/Copy";
  std::vector<int64_t> d = {AMPRT_EXEC_VERSION_NAMED, AMPRT_OP_COPY, 2, 0};
  pushTensor(d, x.t);
  pushTensor(d, y.t);
  d.push_back((int64_t)name.size());
  for (size_t i = 0; i < name.size(); i += 8) {
    int64_t w = 0;
    std::memcpy(&w, name.data() + i, std::min<size_t>(8, name.size() - i));
    d.push_back(w);
  }
  ASSERT_NE(amprt_exec(nullptr, d.data(), bufs), AMPRT_OK);
  std::string named = amprt_last_error();
  EXPECT_EQ(named.rfind("node '/encoder/layer.0/Copy': ", 0), 0u) << named;
  // The same call without a name: the runtime's message alone.
  d.resize(4 + 2 * 5);
  d[0] = AMPRT_EXEC_VERSION;
  ASSERT_NE(amprt_exec(nullptr, d.data(), bufs), AMPRT_OK);
  std::string plain = amprt_last_error();
  EXPECT_EQ(plain.find("node '"), std::string::npos) << plain;
  EXPECT_EQ(named, "node '/encoder/layer.0/Copy': " + plain);
  // A named call that succeeds: status and result as without the name.
  Buf z(AMPRT_F32, {4});
  void *ok[2] = {x.t.data, z.t.data};
  d = {AMPRT_EXEC_VERSION_NAMED, AMPRT_OP_COPY, 2, 0};
  pushTensor(d, x.t);
  pushTensor(d, z.t);
  d.push_back(3);
  d.push_back(0x637762); // "bwc"
  ASSERT_EQ(amprt_exec(nullptr, d.data(), ok), AMPRT_OK) << amprt_last_error();
  EXPECT_EQ(z.bytes, x.bytes);
}

namespace {
/// A named AMPRT_OP_UNARY descriptor: y = op(x).
std::vector<int64_t> namedUnary(const std::string &name, amprt_unary_op op, const amprt_tensor &x,
                                const amprt_tensor &y) {
  std::vector<int64_t> d = {AMPRT_EXEC_VERSION_NAMED, AMPRT_OP_UNARY, 2, 2};
  pushTensor(d, x);
  pushTensor(d, y);
  d.push_back(op);
  d.push_back(f64bits(0.0));
  d.push_back((int64_t)name.size());
  for (size_t i = 0; i < name.size(); i += 8) {
    int64_t w = 0;
    std::memcpy(&w, name.data() + i, std::min<size_t>(8, name.size() - i));
    d.push_back(w);
  }
  return d;
}

void runUnary(const std::string &name, amprt_tensor &x, amprt_tensor &y) {
  std::vector<int64_t> d = namedUnary(name, AMPRT_UNARY_EXP, x, y);
  void *bufs[2] = {x.data, y.data};
  ASSERT_EQ(amprt_exec(nullptr, d.data(), bufs), AMPRT_OK) << amprt_last_error();
}
} // namespace

// Run by CheckNumerics.NamesOriginsNotLeftoversOrPropagation in a child
// process with AMPRT_CHECK_NUMERICS=1 (the runtime reads it once per
// process); disabled in the ordinary runs.
TEST(CheckNumerics, DISABLED_Child) {
  ASSERT_NE(std::getenv("AMPRT_CHECK_NUMERICS"), nullptr);
  // exp of finite operands overflowing f32, into an output whose earlier
  // bytes are NaN (a slot's leftovers, not read): named.
  Buf x = randn(AMPRT_F32, {8}), y(AMPRT_F32, {8});
  x.set(0, 200.0);
  for (int i = 0; i < 8; ++i)
    y.set(i, NAN);
  runUnary("/overflow/Exp", x.t, y.t);
  // exp in place over a NaN: the NaN was read, not made: not named.
  Buf z = randn(AMPRT_F32, {8});
  z.set(3, NAN);
  runUnary("/inplace-nan/Exp", z.t, z.t);
  // exp of a NaN operand into a fresh output: propagated: not named.
  Buf w = randn(AMPRT_F32, {8}), v(AMPRT_F32, {8});
  w.set(2, NAN);
  runUnary("/propagates/Exp", w.t, v.t);
  // exp in place over finite values that overflow: named.
  Buf u = randn(AMPRT_F32, {8});
  u.set(5, 300.0);
  runUnary("/inplace-overflow/Exp", u.t, u.t);
}

TEST(CheckNumerics, NamesOriginsNotLeftoversOrPropagation) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(len, 0);
  self[len] = 0;
  std::string cmd =
      std::string("AMPRT_CHECK_NUMERICS=1 '") + self +
      "' --gtest_also_run_disabled_tests --gtest_filter=CheckNumerics.DISABLED_Child 2>&1";
  FILE *p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;)
    out.append(buf, n);
  int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  EXPECT_NE(
      out.find("amprt: check-numerics: node '/overflow/Exp' (unary [8] [8]) wrote 1 NaN / inf "
               "value(s) into its tensor 1 (f32 [8], the first at flat index 0) from finite "
               "operands"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("node '/inplace-overflow/Exp' ("), std::string::npos) << out;
  EXPECT_EQ(out.find("/inplace-nan/Exp"), std::string::npos) << out;
  EXPECT_EQ(out.find("/propagates/Exp"), std::string::npos) << out;
}

//===----------------------------------------------------------------------===//
// The descriptor table (amprt_ops.def): the compiler's encoder and the
// executors' decoder, both generated from it, agree on every opcode, and
// the decoder refuses what does not fit.
//===----------------------------------------------------------------------===//

#include "common/exec_decode.h"

#include <random>

namespace {
namespace attrs = amprt::attrs;

/// Every field of `a` random (flags 0 or 1, counts in range; each optional
/// field present with probability 1/2, or always with `allOptional`).
struct Filler {
  std::mt19937_64 rng;
  bool allOptional = false;
  bool optional() { return allOptional || pick(0, 1); }
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  double real() { return std::normal_distribution<double>(0.0, 1e3)(rng); }
};

#define I64(x) a.x = f.pick(0, 1);
#define I64_IN(x, lo, hi) a.x = f.pick((lo), std::min<int64_t>((hi), (lo) + 3));
#define F64(x) a.x = f.real();
#define OPT_I64(x)                                                                                 \
  if (f.optional())                                                                                \
    a.x = f.pick(-5, 5);
#define OPT_F64(x)                                                                                 \
  if (f.optional())                                                                                \
    a.x = f.real();
#define LIST(x, n, max)                                                                            \
  a.n = f.pick(0, (max));                                                                          \
  for (int64_t k = 0; k < a.n; ++k)                                                                \
    a.x[k] = f.pick(-9, 9);
#define CONV_WINDOW(n)                                                                             \
  a.n = f.pick(1, 3);                                                                              \
  for (int64_t k = 0; k < a.n; ++k) {                                                              \
    a.stride[k] = f.pick(1, 4);                                                                    \
    a.dilation[k] = f.pick(1, 4);                                                                  \
    a.pad_begin[k] = f.pick(0, 4);                                                                 \
    a.pad_end[k] = f.pick(0, 4);                                                                   \
  }
#define POOL_WINDOW(n)                                                                             \
  CONV_WINDOW(n)                                                                                   \
  for (int64_t k = 0; k < a.n; ++k)                                                                \
    a.kernel[k] = f.pick(1, 7);
#define AMPRT_OPCODE(NAME, VALUE, name, fields, ntensors, tensors, notes)                          \
  [[maybe_unused]] void fill(Filler &f, attrs::name &a) { fields }
#include "amprt/amprt_ops.def"
#include "amprt/amprt_ops_undef.h"

/// A decoded descriptor with these attribute words and `n` (empty) tensors.
amprt::desc::Decoded decoded(int64_t opcode, const std::vector<int64_t> &words, int64_t n) {
  amprt::desc::Decoded d;
  d.opcode = opcode;
  d.t.assign((size_t)std::max<int64_t>(n, 0), amprt_tensor{});
  d.attrs = words.data();
  d.nattrs = (int64_t)words.size();
  return d;
}

template <typename A> void roundTrip(Filler &f) {
  SCOPED_TRACE(A::label);
  EXPECT_STREQ(amprt_opcode_name(A::opcode), A::label);
  for (int rep = 0; rep < 20; ++rep) {
    A a;
    f.allOptional = rep % 2 == 0;
    fill(f, a);
    std::vector<int64_t> words;
    ASSERT_TRUE(attrs::encode(a, words));
    int64_t n = attrs::tensorCount(a), exact = n >= 0 ? n : -n;
    A b;
    ASSERT_EQ(amprt::desc::read(decoded(A::opcode, words, exact), b), AMPRT_OK)
        << amprt_last_error();
    std::vector<int64_t> again;
    ASSERT_TRUE(attrs::encode(b, again));
    EXPECT_EQ(again, words);
    // A word too many (every optional field present), a tensor too few (or,
    // exact counts, too many), another opcode: each refused.
    std::vector<int64_t> longer = words;
    longer.push_back(1);
    if (f.allOptional) {
      EXPECT_EQ(amprt::desc::read(decoded(A::opcode, longer, exact), b),
                AMPRT_ERR_INVALID_ARGUMENT);
    }
    EXPECT_EQ(amprt::desc::read(decoded(A::opcode, words, exact - 1), b),
              AMPRT_ERR_INVALID_ARGUMENT);
    if (n >= 0) {
      EXPECT_EQ(amprt::desc::read(decoded(A::opcode, words, exact + 1), b),
                AMPRT_ERR_INVALID_ARGUMENT);
    }
    EXPECT_EQ(amprt::desc::read(decoded(A::opcode == 1 ? 2 : 1, words, exact), b),
              AMPRT_ERR_INVALID_ARGUMENT);
  }
}
} // namespace

TEST(DescriptorTable, EveryOpcodeRoundTripsAndRefusesWhatDoesNotFit) {
  uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Filler f{std::mt19937_64(seed)};
  int opcodes = 0;
#define AMPRT_OPCODE(NAME, VALUE, name, fields, ntensors, tensors, notes)                          \
  roundTrip<attrs::name>(f);                                                                       \
  ++opcodes;
#include "amprt/amprt_ops.def"
#undef AMPRT_OPCODE
  EXPECT_EQ(opcodes, AMPRT_OP_ALL_REDUCE);
}

TEST(DescriptorTable, CountsWindowsAndMissingWordsAreRefused) {
  using amprt::desc::read;
  // A convolution: 2 spatial dims, a bias (4 tensors).
  attrs::conv c;
  c.spatial = 2;
  c.group = 1;
  c.has_bias = 1;
  for (int k = 0; k < 2; ++k)
    c.stride[k] = c.dilation[k] = 1;
  std::vector<int64_t> w;
  ASSERT_TRUE(attrs::encode(c, w));
  ASSERT_EQ(w.size(), 3u + 4 * 2);
  attrs::conv out;
  EXPECT_EQ(read(decoded(AMPRT_OP_CONV, w, 4), out), AMPRT_OK) << amprt_last_error();
  EXPECT_FALSE(out.flags.has_value());
  EXPECT_EQ(read(decoded(AMPRT_OP_CONV, w, 3), out), AMPRT_ERR_INVALID_ARGUMENT); // bias missing
  EXPECT_NE(std::string(amprt_last_error()).find("tensor count"), std::string::npos)
      << amprt_last_error();
  std::vector<int64_t> cut(w.begin(), w.end() - 1); // the last pad_end missing
  EXPECT_EQ(read(decoded(AMPRT_OP_CONV, cut, 4), out), AMPRT_ERR_INVALID_ARGUMENT);
  w[0] = 4; // four spatial dims
  EXPECT_EQ(read(decoded(AMPRT_OP_CONV, w, 4), out), AMPRT_ERR_INVALID_ARGUMENT);
  c.spatial = 0;
  EXPECT_FALSE(attrs::encode(c, w)); // the encoder refuses it too
  // unscale_and_check: n in [0, 2047], 2n + 2 tensors.
  std::vector<int64_t> n = {-1};
  attrs::unscale_and_check u;
  EXPECT_EQ(read(decoded(AMPRT_OP_UNSCALE_AND_CHECK, n, 0), u), AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("outside"), std::string::npos)
      << amprt_last_error();
  n = {3};
  EXPECT_EQ(read(decoded(AMPRT_OP_UNSCALE_AND_CHECK, n, 7), u), AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(read(decoded(AMPRT_OP_UNSCALE_AND_CHECK, n, 8), u), AMPRT_OK) << amprt_last_error();
  EXPECT_EQ(u.n, 3);
  // reduce: at most AMPRT_MAX_RANK axes, and all of them present.
  std::vector<int64_t> r = {AMPRT_REDUCE_SUM, AMPRT_MAX_RANK + 1};
  attrs::reduce rd;
  EXPECT_EQ(read(decoded(AMPRT_OP_REDUCE, r, 2), rd), AMPRT_ERR_INVALID_ARGUMENT);
  r = {AMPRT_REDUCE_SUM, 2, 0};
  EXPECT_EQ(read(decoded(AMPRT_OP_REDUCE, r, 2), rd), AMPRT_ERR_INVALID_ARGUMENT);
  r = {AMPRT_REDUCE_SUM, 2, 0, 1};
  EXPECT_EQ(read(decoded(AMPRT_OP_REDUCE, r, 2), rd), AMPRT_OK) << amprt_last_error();
  EXPECT_EQ(rd.axes[1], 1);
  EXPECT_FALSE(rd.blocked.has_value());
  // Floats travel as their bits, every one of them.
  attrs::sgd_update s;
  s.lr = 0.1;
  s.momentum = -0.0;
  s.dampening = std::numeric_limits<double>::denorm_min();
  s.wd = std::numeric_limits<double>::infinity();
  std::vector<int64_t> sw;
  ASSERT_TRUE(attrs::encode(s, sw));
  attrs::sgd_update back;
  ASSERT_EQ(read(decoded(AMPRT_OP_SGD_UPDATE, sw, 5), back), AMPRT_OK) << amprt_last_error();
  EXPECT_EQ(back.lr, 0.1);
  EXPECT_TRUE(std::signbit(back.momentum));
  EXPECT_EQ(back.dampening, std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(back.wd, std::numeric_limits<double>::infinity());
}

namespace {
/// amprt_exec of one op: the descriptor from its attributes and tensors.
template <typename Attrs>
int32_t execOp(amprt_context *ctx, const Attrs &a, std::vector<amprt_tensor *> ts) {
  std::vector<int64_t> words;
  if (!attrs::encode(a, words))
    return -1;
  std::vector<int64_t> d = {AMPRT_EXEC_VERSION, Attrs::opcode, (int64_t)ts.size(),
                            (int64_t)words.size()};
  std::vector<void *> bufs;
  for (amprt_tensor *t : ts) {
    pushTensor(d, *t);
    bufs.push_back(t->data);
  }
  d.insert(d.end(), words.begin(), words.end());
  return amprt_exec(ctx, d.data(), bufs.data());
}
} // namespace

// A conv_grad whose dw feeds the step's inf check directly (check_dw, set
// by the compiler) checks dw as it writes it; the check then takes that
// answer instead of reading dw again. On a late layer's shape (bf16, the
// product on the AMX tiles where there are any) and an early one's (f32,
// oneDNN's kernels): the same dw as without the flag; the check says 0 for
// finite operands, 1 for an inf in dy and for products that overflow from
// finite operands. The note is the producer's answer (a NaN written into
// dw behind the program's back afterwards is not seen: nothing may write
// there between the two ops), taken once, and dropped when an op fails.
TEST(Exec, WeightGradientsCheckedByTheirProducer) {
  amprt_context *ctx = nullptr;
  AMPRT_OK_OR_FAIL(amprt_context_create("cpu", &ctx));
  struct Case {
    amprt_dtype t;
    int64_t n, c, oc, h;
  };
  for (Case cs : {Case{AMPRT_BF16, 8, 64, 64, 2}, Case{AMPRT_F32, 2, 8, 16, 8}}) {
    SCOPED_TRACE(std::string(amprt_dtype_name(cs.t)) + " c " + std::to_string(cs.c));
    Buf x = randn(cs.t, {cs.n, cs.c, cs.h, cs.h}), w = randn(cs.t, {cs.oc, cs.c, 3, 3}),
        dy = randn(cs.t, {cs.n, cs.oc, cs.h, cs.h}), dx(cs.t, {cs.n, cs.c, cs.h, cs.h}),
        dw(AMPRT_F32, {cs.oc, cs.c, 3, 3}), db(AMPRT_F32, {cs.oc}),
        ref(AMPRT_F32, {cs.oc, cs.c, 3, 3}), scale(AMPRT_F32, {}), flag(AMPRT_I1, {});
    scale.set(0, 1.0);
    attrs::conv_grad g;
    g.spatial = 2;
    g.group = 1;
    for (int k = 0; k < 2; ++k) {
      g.stride[k] = g.dilation[k] = 1;
      g.pad_begin[k] = g.pad_end[k] = 1;
    }
    g.want_dw = 1;
    attrs::conv_grad checked = g;
    checked.check_dw = 1;
    attrs::unscale_and_check u;
    u.n = 1;
    auto grad = [&](const attrs::conv_grad &a) {
      return execOp(ctx, a, {x.p(), w.p(), dy.p(), dx.p(), dw.p(), db.p()});
    };
    auto check = [&]() -> int {
      flag.set(0, 0.0);
      if (execOp(ctx, u, {dw.p(), scale.p(), dw.p(), flag.p()}) != AMPRT_OK)
        return -1;
      return flag.bytes[0];
    };
    amprt_conv_params p{};
    p.spatial = 2;
    p.group = 1;
    for (int k = 0; k < 2; ++k) {
      p.strides[k] = p.dilations[k] = 1;
      p.pads_begin[k] = p.pads_end[k] = 1;
    }
    // Finite: 0, and the same dw as the plain call.
    ASSERT_EQ(grad(checked), AMPRT_OK) << amprt_last_error();
    AMPRT_OK_OR_FAIL(amprt_conv_backward(ctx, x.p(), w.p(), dy.p(), &p, nullptr, ref.p(), nullptr));
    EXPECT_EQ(dw.bytes, ref.bytes);
    EXPECT_EQ(check(), 0);
    // An inf in dy reaches dw's row for its channel.
    Buf finiteDy = dy;
    dy.set(cs.h * cs.h + 1, INFINITY); // image 0, channel 1
    ASSERT_EQ(grad(checked), AMPRT_OK) << amprt_last_error();
    EXPECT_EQ(check(), 1);
    // Finite operands whose products overflow f32.
    dy = finiteDy;
    Buf big = x;
    for (int64_t i = 0; i < big.numel(); ++i)
      big.set(i, 3.0e38);
    std::swap(big, x);
    ASSERT_EQ(grad(checked), AMPRT_OK) << amprt_last_error();
    EXPECT_EQ(check(), 1);
    std::swap(big, x);
    // The producer's answer is what the check takes, once.
    ASSERT_EQ(grad(checked), AMPRT_OK) << amprt_last_error();
    dw.set(5, NAN); // behind the program's back
    EXPECT_EQ(check(), 0);
    EXPECT_EQ(check(), 1);                              // the note was taken: read now
    ASSERT_EQ(grad(g), AMPRT_OK) << amprt_last_error(); // no check_dw: no note
    dw.set(5, NAN);
    EXPECT_EQ(check(), 1);
    // A failed op between drops the notes (a step cut short).
    ASSERT_EQ(grad(checked), AMPRT_OK) << amprt_last_error();
    std::vector<int64_t> bad = {AMPRT_EXEC_VERSION, 999, 0, 0};
    EXPECT_EQ(amprt_exec(ctx, bad.data(), nullptr), AMPRT_ERR_UNSUPPORTED);
    dw.set(5, NAN);
    EXPECT_EQ(check(), 1);
  }
  amprt_context_destroy(ctx);
}
