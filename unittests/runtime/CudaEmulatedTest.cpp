//===- CudaEmulatedTest.cpp - what the CUDA emulation must refuse --------===//
//
// The CUDA backend on an emulated context (AMPRT_CUDA_EMULATE=1: its
// kernels as host loops over host memory), where the emulation must fail
// as a device would instead of hiding the mistake behind host memory:
//   - copies whose device side is not device memory; device-to-device
//     copies of overlapping ranges keep memmove's meaning (cudaMemcpy's is
//     undefined there: the emulated CUDA call refuses it, the backend
//     stages such copies);
//   - AMPRT_CHECK_NUMERICS reading the program's host constants (a copy of
//     the wrong kind on a device, which then blamed the next op);
//   - a CUDA graph launched after a scratch buffer it captured was freed.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <cstdlib>
#include <cstring>

using namespace amprt_test;

namespace {

// Before any context or amprt_exec call reads them (both are read once).
const int kEnv = [] {
  setenv("AMPRT_CUDA_EMULATE", "1", 1);
  setenv("AMPRT_CHECK_NUMERICS", "1", 1);
  return 0;
}();

void pushTensor(std::vector<int64_t> &d, const amprt_tensor &t) {
  d.push_back(t.dtype);
  d.push_back(t.rank);
  d.push_back(0);
  for (int i = 0; i < t.rank; ++i)
    d.push_back(t.shape[i]);
  for (int i = 0; i < t.rank; ++i)
    d.push_back(t.strides[i]);
}

struct Device {
  amprt_context *ctx = nullptr;
  Device() {
    (void)kEnv;
    EXPECT_EQ(amprt_context_create("cuda", &ctx), AMPRT_OK) << amprt_last_error();
  }
  ~Device() { amprt_context_destroy(ctx); }
  /// A device copy of `b` (its tensor's data pointing at device memory).
  amprt_tensor upload(const Buf &b, void **mem) {
    EXPECT_EQ(amprt_device_alloc(ctx, b.bytes.size(), mem), AMPRT_OK) << amprt_last_error();
    EXPECT_EQ(amprt_device_copy(ctx, *mem, b.bytes.data(), b.bytes.size(), 0), AMPRT_OK)
        << amprt_last_error();
    amprt_tensor t = b.t;
    t.data = *mem;
    return t;
  }
};

/// clip_grad_norm of one gradient (its partial sums of squares in a scratch
/// buffer that grows with the gradient): its descriptor and buffers.
struct Clip {
  std::vector<int64_t> desc;
  std::vector<void *> bufs;
  Clip(const amprt_tensor &g, const amprt_tensor &found, const amprt_tensor &out,
       const amprt_tensor &norm) {
    desc = {AMPRT_EXEC_VERSION, AMPRT_OP_CLIP_GRAD_NORM, 4, 2};
    for (const amprt_tensor *t : {&g, &found, &out, &norm})
      pushTensor(desc, *t);
    double maxNorm = 0.5;
    int64_t bits;
    std::memcpy(&bits, &maxNorm, 8);
    desc.push_back(1); // n
    desc.push_back(bits);
    bufs = {g.data, found.data, out.data, norm.data};
  }
};

} // namespace

TEST(CudaEmulated, CopiesRefuseWhatCudaRefuses) {
  Device dev;
  ASSERT_TRUE(dev.ctx);
  std::vector<char> host(256, 1), back(256, 0);
  void *mem = nullptr;
  ASSERT_EQ(amprt_device_alloc(dev.ctx, 256, &mem), AMPRT_OK) << amprt_last_error();
  // Host memory named as the device side of a copy: CUDA's invalid argument.
  EXPECT_EQ(amprt_device_copy(dev.ctx, back.data(), host.data(), 64, 1),
            AMPRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(amprt_last_error()).find("not this context's device memory"),
            std::string::npos)
      << amprt_last_error();
  EXPECT_EQ(amprt_device_copy(dev.ctx, host.data(), back.data(), 64, 0),
            AMPRT_ERR_INVALID_ARGUMENT);
  // Kind 3 (cudaMemcpyDefault) takes either side.
  EXPECT_EQ(amprt_device_copy(dev.ctx, back.data(), host.data(), 64, 3), AMPRT_OK);
  EXPECT_EQ(amprt_device_copy(dev.ctx, mem, host.data(), 256, 3), AMPRT_OK);
  EXPECT_EQ(amprt_device_copy(dev.ctx, back.data(), mem, 256, 3), AMPRT_OK);
  EXPECT_EQ(back, host);
  // Overlapping device ranges: memmove's meaning (cudaMemcpy's is undefined
  // there and the emulated CUDA call refuses it: the backend stages the copy
  // through scratch memory).
  char *m = static_cast<char *>(mem);
  std::vector<char> ramp(256), want(256), got(256);
  for (int i = 0; i < 256; ++i)
    ramp[i] = (char)i;
  ASSERT_EQ(amprt_device_copy(dev.ctx, mem, ramp.data(), 256, 0), AMPRT_OK);
  want = ramp;
  std::memmove(want.data() + 8, want.data(), 128);
  EXPECT_EQ(amprt_device_copy(dev.ctx, m + 8, m, 128, 2), AMPRT_OK) << amprt_last_error();
  ASSERT_EQ(amprt_device_copy(dev.ctx, got.data(), mem, 256, 1), AMPRT_OK);
  EXPECT_EQ(got, want);
  amprt_device_free(dev.ctx, mem);
}

TEST(CudaEmulated, CheckNumericsReadsTheProgramsHostConstants) {
  // y = x + c with c one of the program's constants (host memory, which only
  // the device executor swaps for its device copy) holding an inf: y's inf
  // comes from a non-finite operand, so AMPRT_CHECK_NUMERICS must say
  // nothing. Reading c with a device-to-host copy failed: c was taken as
  // finite and the op blamed for an inf it did not make.
  Device dev;
  ASSERT_TRUE(dev.ctx);
  Buf x = randn(AMPRT_F32, {16}), c = randn(AMPRT_F32, {16}), y(AMPRT_F32, {16});
  reinterpret_cast<float *>(c.bytes.data())[3] = std::numeric_limits<float>::infinity();
  void *xm, *ym;
  amprt_tensor xd = dev.upload(x, &xm), yd = dev.upload(y, &ym);
  std::vector<int64_t> d = {AMPRT_EXEC_VERSION, AMPRT_OP_BINARY, 3, 1};
  pushTensor(d, xd);
  pushTensor(d, c.t);
  pushTensor(d, yd);
  d.push_back(AMPRT_BINARY_ADD);
  void *bufs[3] = {xm, c.bytes.data(), ym};
  testing::internal::CaptureStderr();
  amprt_status s = (amprt_status)amprt_exec(dev.ctx, d.data(), bufs);
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(s, AMPRT_OK) << amprt_last_error();
  EXPECT_EQ(err.find("check-numerics"), std::string::npos) << err;
  Buf out(AMPRT_F32, {16});
  ASSERT_EQ(amprt_device_copy(dev.ctx, out.bytes.data(), ym, out.bytes.size(), 1), AMPRT_OK);
  EXPECT_TRUE(std::isinf(out.get(3)));
  EXPECT_EQ(out.get(0), (double)((float)x.get(0) + (float)c.get(0)));
  amprt_device_free(dev.ctx, xm);
  amprt_device_free(dev.ctx, ym);
}

TEST(CudaEmulated, AGraphKeepsTheScratchItCaptured) {
  // Capture clip_grad_norm of a small gradient (its partial sums in a
  // scratch buffer), then run a larger one eagerly (the scratch grows),
  // then launch the graph: on a device the graph reads the buffer it
  // captured, which must still be allocated.
  Device dev;
  ASSERT_TRUE(dev.ctx);
  Buf gs = randn(AMPRT_F32, {64}), gl = randn(AMPRT_F32, {1 << 20});
  Buf found(AMPRT_I1, {}), norm(AMPRT_F32, {}), outs(AMPRT_F32, {64}), outl(AMPRT_F32, {1 << 20});
  void *m[6];
  amprt_tensor gsd = dev.upload(gs, &m[0]), gld = dev.upload(gl, &m[1]),
               fd = dev.upload(found, &m[2]), nd = dev.upload(norm, &m[3]),
               osd = dev.upload(outs, &m[4]), old = dev.upload(outl, &m[5]);
  Clip small(gsd, fd, osd, nd), large(gld, fd, old, nd);
  // Once eagerly (the scratch made), then captured.
  ASSERT_EQ(amprt_exec(dev.ctx, small.desc.data(), small.bufs.data()), AMPRT_OK)
      << amprt_last_error();
  ASSERT_EQ(amprt_graph_begin(dev.ctx), AMPRT_OK) << amprt_last_error();
  ASSERT_EQ(amprt_exec(dev.ctx, small.desc.data(), small.bufs.data()), AMPRT_OK)
      << amprt_last_error();
  amprt_graph *g = nullptr;
  ASSERT_EQ(amprt_graph_end(dev.ctx, &g), AMPRT_OK) << amprt_last_error();
  ASSERT_EQ(amprt_exec(dev.ctx, large.desc.data(), large.bufs.data()), AMPRT_OK)
      << amprt_last_error();
  EXPECT_EQ(amprt_graph_launch(dev.ctx, g), AMPRT_OK) << amprt_last_error();
  ASSERT_EQ(amprt_device_synchronize(dev.ctx), AMPRT_OK) << amprt_last_error();
  // The small gradient clipped to norm 0.5 (its norm is ~8).
  Buf out(AMPRT_F32, {64});
  ASSERT_EQ(amprt_device_copy(dev.ctx, out.bytes.data(), m[4], out.bytes.size(), 1), AMPRT_OK);
  double sq = 0;
  for (int i = 0; i < 64; ++i)
    sq += out.get(i) * out.get(i);
  EXPECT_NEAR(std::sqrt(sq), 0.5, 1e-4);
  amprt_graph_destroy(dev.ctx, g);
  for (void *p : m)
    amprt_device_free(dev.ctx, p);
}
