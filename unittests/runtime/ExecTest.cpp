//===- ExecTest.cpp - the descriptor entry point of compiled code --------===//

#include "TestUtil.h"

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
  EXPECT_NE(std::string(amprt_last_error()).find("compiled for another runtime"), std::string::npos);
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
