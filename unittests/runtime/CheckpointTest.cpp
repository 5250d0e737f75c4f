//===- CheckpointTest.cpp - safetensors checkpoints and metrics ----------===//

#include "TestUtil.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace amprt_test;

namespace {
std::string tempPath(const char *name) {
  return testing::TempDir() + "/amprt_" + std::to_string(getpid()) + "_" + name;
}
std::string slurp(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
} // namespace

TEST(Checkpoint, RoundTripsBitExactWithMetadata) {
  Buf w = randn(AMPRT_F32, {4, 3}), h = randn(AMPRT_F16, {5}), b = randn(AMPRT_BF16, {2, 2}),
      s(AMPRT_I64, {}), mask = randint(AMPRT_I1, {3}, 0, 2);
  s.set(0, 123456789);
  w.set(0, NAN);
  amprt_named_tensor ts[] = {{"fc1.weight", w.t}, {"fc1.weight.momentum \"q\"", h.t},
                             {"b", b.t}, {"step", s.t}, {"mask", mask.t}};
  amprt_metadata meta[] = {{"loss_scale", "65536"}, {"growth_tracker", "17"},
                           {"note", "line\nbreak \"quoted\""}};
  std::string path = tempPath("ck.safetensors");
  AMPRT_OK_OR_FAIL(amprt_checkpoint_save(path.c_str(), ts, 5, meta, 3));
  amprt_checkpoint *ck;
  AMPRT_OK_OR_FAIL(amprt_checkpoint_open(path.c_str(), &ck));
  EXPECT_EQ(amprt_checkpoint_count(ck), 5);
  EXPECT_STREQ(amprt_checkpoint_metadata(ck, "loss_scale"), "65536");
  EXPECT_STREQ(amprt_checkpoint_metadata(ck, "note"), "line\nbreak \"quoted\"");
  EXPECT_EQ(amprt_checkpoint_metadata(ck, "missing"), nullptr);
  for (auto &nt : ts) {
    Buf back(nt.tensor.dtype,
             std::vector<int64_t>(nt.tensor.shape, nt.tensor.shape + nt.tensor.rank));
    AMPRT_OK_OR_FAIL(amprt_checkpoint_read(ck, nt.name, back.p()));
    size_t bytes = (size_t)amprt_tensor_numel(&nt.tensor) * amprt_dtype_size(nt.tensor.dtype);
    EXPECT_EQ(std::memcmp(back.bytes.data(), nt.tensor.data, bytes), 0) << nt.name;
  }
  Buf wrong(AMPRT_F32, {3, 4});
  EXPECT_EQ(amprt_checkpoint_read(ck, "fc1.weight", wrong.p()), AMPRT_ERR_FORMAT);
  EXPECT_NE(std::string(amprt_last_error()).find("the model expects f32 [3, 4]"), std::string::npos);
  EXPECT_EQ(amprt_checkpoint_read(ck, "nope", wrong.p()), AMPRT_ERR_FORMAT);
  amprt_checkpoint_close(ck);
  // No temporary file left behind.
  EXPECT_NE(access((path + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
  std::remove(path.c_str());
}

TEST(Checkpoint, TruncatedAndForeignFilesAreClearErrors) {
  Buf w = randn(AMPRT_F32, {64});
  amprt_named_tensor ts[] = {{"w", w.t}};
  std::string path = tempPath("t.safetensors");
  AMPRT_OK_OR_FAIL(amprt_checkpoint_save(path.c_str(), ts, 1, nullptr, 0));
  std::string full = slurp(path);
  amprt_checkpoint *ck = nullptr;
  for (size_t cut : {size_t(0), size_t(5), size_t(20), full.size() - 1}) {
    std::string p = tempPath("cut.safetensors");
    std::ofstream(p, std::ios::binary) << full.substr(0, cut);
    EXPECT_EQ(amprt_checkpoint_open(p.c_str(), &ck), AMPRT_ERR_FORMAT) << "cut at " << cut;
    EXPECT_NE(std::string(amprt_last_error()).find(p), std::string::npos);
    std::remove(p.c_str());
  }
  std::string foreign = tempPath("foreign.bin");
  std::ofstream(foreign, std::ios::binary) << "PK\3\4 this is a zip file, not a checkpoint";
  EXPECT_EQ(amprt_checkpoint_open(foreign.c_str(), &ck), AMPRT_ERR_FORMAT);
  std::remove(foreign.c_str());
  EXPECT_EQ(amprt_checkpoint_open(tempPath("missing").c_str(), &ck), AMPRT_ERR_IO);
  std::remove(path.c_str());
}

TEST(Metrics, OneJsonObjectPerLine) {
  std::string path = tempPath("m.jsonl");
  amprt_metrics *m;
  AMPRT_OK_OR_FAIL(amprt_metrics_open(path.c_str(), 0, &m));
  amprt_step_metrics s{1, 2.5, 65536.0, 0, 0, 0.0125};
  AMPRT_OK_OR_FAIL(amprt_metrics_write(m, &s));
  s = {2, NAN, 32768.0, 1, 1, 0.011};
  AMPRT_OK_OR_FAIL(amprt_metrics_write(m, &s));
  amprt_metrics_close(m);
  EXPECT_EQ(slurp(path),
            "{\"step\": 1, \"loss\": 2.5, \"loss_scale\": 65536, \"found_inf\": 0, "
            "\"skipped_total\": 0, \"step_time_s\": 0.0125}\n"
            "{\"step\": 2, \"loss\": NaN, \"loss_scale\": 32768, \"found_inf\": 1, "
            "\"skipped_total\": 1, \"step_time_s\": 0.011}\n");
  char buf[128];
  amprt_format_progress(buf, sizeof(buf), &s, 200);
  EXPECT_STREQ(buf, "step 2/200  loss nan  scale 32768  skipped 1  11.0 ms/step");
  std::remove(path.c_str());
}

TEST(Npz, WritesWhatItReadsBackAndRefusesFourGiB) {
  // Three arrays (f32, i64, an empty f16) written, then read back by the
  // reader, bytes equal.
  Buf a = randn(AMPRT_F32, {3, 5}), h(AMPRT_F16, {0, 4});
  std::vector<int64_t> idx = {7, -3, 1LL << 40, 0, 42};
  amprt_array arrays[3] = {};
  arrays[0].data = a.t.data;
  arrays[0].dtype = AMPRT_F32;
  arrays[0].rank = 2;
  arrays[0].shape[0] = 3;
  arrays[0].shape[1] = 5;
  arrays[1].data = idx.data();
  arrays[1].dtype = AMPRT_I64;
  arrays[1].rank = 1;
  arrays[1].shape[0] = 5;
  arrays[2].data = h.t.data;
  arrays[2].dtype = AMPRT_F16;
  arrays[2].rank = 2;
  arrays[2].shape[0] = 0;
  arrays[2].shape[1] = 4;
  const char *names[3] = {"weights", "index", "empty"};
  std::string p = tempPath("w.npz");
  AMPRT_OK_OR_FAIL(amprt_npz_write(p.c_str(), names, arrays, 3));
  amprt_npz *z = nullptr;
  AMPRT_OK_OR_FAIL(amprt_npz_open(p.c_str(), &z));
  ASSERT_EQ(amprt_npz_count(z), 3);
  for (int i = 0; i < 3; ++i) {
    const amprt_array *r = amprt_npz_get(z, names[i]);
    ASSERT_NE(r, nullptr) << names[i];
    EXPECT_EQ(r->dtype, arrays[i].dtype) << names[i];
    ASSERT_EQ(r->rank, arrays[i].rank) << names[i];
    int64_t n = 1;
    for (int d = 0; d < r->rank; ++d) {
      EXPECT_EQ(r->shape[d], arrays[i].shape[d]) << names[i];
      n *= r->shape[d];
    }
    EXPECT_EQ(std::memcmp(r->data, arrays[i].data, (size_t)n * amprt_dtype_size(r->dtype)), 0)
        << names[i];
  }
  amprt_npz_close(z);
  std::remove(p.c_str());
  // 4 GiB of f32 (never read: refused from its shape), alone or in sum:
  // refused before the file is created.
  std::string big = tempPath("big.npz");
  amprt_array huge = arrays[0];
  huge.rank = 1;
  huge.shape[0] = int64_t(1) << 30;
  EXPECT_EQ(amprt_npz_write(big.c_str(), names, &huge, 1), AMPRT_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(amprt_last_error()).find("4 GiB or more"), std::string::npos)
      << amprt_last_error();
  amprt_array two[2] = {huge, huge};
  two[0].shape[0] = two[1].shape[0] = (int64_t(1) << 29) + 1024; // 2 GiB + 4 KiB each
  EXPECT_EQ(amprt_npz_write(big.c_str(), names, two, 2), AMPRT_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(amprt_last_error()).find("together"), std::string::npos)
      << amprt_last_error();
  EXPECT_NE(access(big.c_str(), F_OK), 0);
  EXPECT_NE(access((big + ".tmp").c_str(), F_OK), 0);
}
