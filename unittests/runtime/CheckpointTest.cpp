//===- CheckpointTest.cpp - safetensors checkpoints and metrics ----------===//

#include "TestUtil.h"

#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <unistd.h>
#include <zlib.h>

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
  amprt_named_tensor ts[] = {{"fc1.weight", w.t},
                             {"fc1.weight.momentum \"q\"", h.t},
                             {"b", b.t},
                             {"step", s.t},
                             {"mask", mask.t}};
  amprt_metadata meta[] = {
      {"loss_scale", "65536"}, {"growth_tracker", "17"}, {"note", "line\nbreak \"quoted\""}};
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
  EXPECT_NE(std::string(amprt_last_error()).find("the model expects f32 [3, 4]"),
            std::string::npos);
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
  EXPECT_EQ(slurp(path), "{\"step\": 1, \"loss\": 2.5, \"loss_scale\": 65536, \"found_inf\": 0, "
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

namespace {
/// A safetensors file of `header` (the JSON) and `data` bytes.
std::string safetensors(const std::string &header, size_t data) {
  std::string f(8, '\0');
  uint64_t n = header.size();
  for (int b = 0; b < 8; ++b)
    f[b] = (char)(n >> (8 * b));
  return f + header + std::string(data, '\x11');
}
amprt_status openBytes(const std::string &bytes, const char *name, amprt_checkpoint **ck) {
  std::string p = tempPath(name);
  std::ofstream(p, std::ios::binary) << bytes;
  amprt_status s = amprt_checkpoint_open(p.c_str(), ck);
  std::remove(p.c_str());
  return s;
}
} // namespace

// Fuzzing findings (issue 29): a shape whose numel x element size wraps 64
// bits matched tiny data_offsets (2^62 F32 elements "are" 0 bytes), and a
// name listed twice was kept twice.
TEST(Checkpoint, WrappingSizesAndRepeatedNamesAreRefused) {
  amprt_checkpoint *ck = nullptr;
  // 2^62 x 4 bytes wraps to 0: with offsets [0, 0] it was accepted.
  EXPECT_EQ(openBytes(safetensors(R"({"w":{"dtype":"F32","shape":[4611686018427387904],)"
                                  R"("data_offsets":[0,0]}})",
                                  0),
                      "wrap.safetensors", &ck),
            AMPRT_ERR_FORMAT);
  EXPECT_NE(std::string(amprt_last_error()).find("tensor 'w' has data_offsets [0, 0]"),
            std::string::npos)
      << amprt_last_error();
  EXPECT_EQ(openBytes(safetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                  R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                  8),
                      "twice.safetensors", &ck),
            AMPRT_ERR_FORMAT);
  EXPECT_NE(std::string(amprt_last_error()).find("tensor 'w' is listed twice"), std::string::npos)
      << amprt_last_error();
  // A name with a NUL (listed, then not found: fuzz-safetensors).
  EXPECT_EQ(
      openBytes(safetensors(R"({"a\u0000b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
                "nul.safetensors", &ck),
      AMPRT_ERR_FORMAT);
  EXPECT_NE(std::string(amprt_last_error()).find("holds a NUL character"), std::string::npos)
      << amprt_last_error();
  // A refused file leaves no descriptor open (found by fuzz-safetensors: a
  // bad entry after the header leaked the FILE and its fd).
  auto openFds = [] {
    int n = 0;
    for (int fd = 0; fd < 4096; ++fd)
      n += fcntl(fd, F_GETFD) != -1;
    return n;
  };
  int before = openFds();
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(openBytes(safetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,9]}})", 8),
                        "bad.safetensors", &ck),
              AMPRT_ERR_FORMAT);
  EXPECT_EQ(openFds(), before);
  // The same entry once is read, and amprt_checkpoint_info tells its shape.
  ASSERT_EQ(openBytes(safetensors(R"({"w":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]}})", 8),
                      "ok.safetensors", &ck),
            AMPRT_OK)
      << amprt_last_error();
  amprt_dtype dt;
  int32_t rank;
  int64_t shape[AMPRT_MAX_RANK];
  AMPRT_OK_OR_FAIL(amprt_checkpoint_info(ck, "w", &dt, &rank, shape));
  EXPECT_EQ(dt, AMPRT_F32);
  ASSERT_EQ(rank, 2);
  EXPECT_EQ(shape[0], 2);
  EXPECT_EQ(shape[1], 1);
  EXPECT_EQ(amprt_checkpoint_info(ck, "v", &dt, &rank, shape), AMPRT_ERR_FORMAT);
  amprt_checkpoint_close(ck);
}

namespace {
/// A zip with one deflated member `name` holding `content` (numpy's
/// savez_compressed layout, without ZIP64); `declared` overrides the
/// uncompressed size in the header.
std::string deflatedZip(const std::string &name, const std::string &content,
                        int64_t declared = -1) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, content.size()), '\0');
  zs.next_in = (Bytef *)content.data();
  zs.avail_in = content.size();
  zs.next_out = (Bytef *)out.data();
  zs.avail_out = out.size();
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  auto le = [](uint64_t v, int n) {
    std::string s;
    for (int i = 0; i < n; ++i)
      s.push_back((char)(v >> (8 * i)));
    return s;
  };
  uint32_t crc = crc32(0, (const Bytef *)content.data(), content.size());
  uint64_t usize = declared >= 0 ? (uint64_t)declared : content.size();
  std::string local = le(0x04034b50, 4) + le(20, 2) + le(0, 2) + le(8, 2) + le(0, 4) + le(crc, 4) +
                      le(out.size(), 4) + le(usize, 4) + le(name.size(), 2) + le(0, 2) + name + out;
  std::string central = le(0x02014b50, 4) + le(20, 2) + le(20, 2) + le(0, 2) + le(8, 2) + le(0, 4) +
                        le(crc, 4) + le(out.size(), 4) + le(usize, 4) + le(name.size(), 2) +
                        le(0, 2) + le(0, 2) + le(0, 2) + le(0, 2) + le(0, 4) + le(0, 4) + name;
  std::string end = le(0x06054b50, 4) + le(0, 2) + le(0, 2) + le(1, 2) + le(1, 2) +
                    le(central.size(), 4) + le(local.size(), 4) + le(0, 2);
  return local + central + end;
}
std::string npy(const std::vector<float> &v) {
  std::string h =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(v.size()) + ",), }";
  while ((10 + h.size() + 1) % 64)
    h.push_back(' ');
  h.push_back('\n');
  std::string f = std::string("\x93NUMPY\x01\x00", 8);
  f.push_back((char)(h.size() & 0xff));
  f.push_back((char)(h.size() >> 8));
  return f + h + std::string((const char *)v.data(), v.size() * 4);
}
} // namespace

// Fuzzing findings (issue 29): the deflated member's declared size was
// allocated (and zero-filled) before inflating; it now grows as inflate
// produces bytes, so a member of many chunks must still come back exact.
TEST(Npz, DeflatedMembersInflateInChunksAndDeclaredSizesAreChecked) {
  std::vector<float> v(300000);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = (float)std::sin(0.001 * (double)i) * (float)(i % 97);
  std::string image = npy(v);
  std::string p = tempPath("big.npz");
  std::ofstream(p, std::ios::binary) << deflatedZip("x.npy", image);
  amprt_npz *z = nullptr;
  ASSERT_EQ(amprt_npz_open(p.c_str(), &z), AMPRT_OK) << amprt_last_error();
  const amprt_array *a = amprt_npz_get(z, "x");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->rank, 1);
  ASSERT_EQ(a->shape[0], (int64_t)v.size());
  EXPECT_EQ(std::memcmp(a->data, v.data(), v.size() * 4), 0);
  amprt_npz_close(z);
  // One byte more or less declared than the stream holds: corrupt.
  for (int64_t d : {(int64_t)image.size() - 1, (int64_t)image.size() + 1}) {
    std::ofstream(p, std::ios::binary) << deflatedZip("x.npy", image, d);
    EXPECT_EQ(amprt_npz_open(p.c_str(), &z), AMPRT_ERR_FORMAT) << "declared " << d;
    EXPECT_NE(std::string(amprt_last_error()).find("corrupt compressed entry"), std::string::npos);
  }
  // A declared size no deflate stream of this length can give.
  std::ofstream(p, std::ios::binary) << deflatedZip("x.npy", npy({1, 2, 3}), 1 << 30);
  EXPECT_EQ(amprt_npz_open(p.c_str(), &z), AMPRT_ERR_FORMAT);
  EXPECT_NE(std::string(amprt_last_error()).find("its declared size cannot come from its"),
            std::string::npos)
      << amprt_last_error();
  std::remove(p.c_str());
}
