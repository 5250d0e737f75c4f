//===- main.cpp - the main() of programs written by amp-compile -----------===//
//
//   ./prog --inputs in.npz --outputs out.npz [--weights prog.weights]
//          [--nan-check warn|error|off]
//
// Links with the object amp-compile emits (which defines amp_entry) and
// libamprt. The weights file beside the program (safetensors) holds the
// parameters and, in its metadata, the program's signature:
//
//   amp.arena_bytes  N
//   amp.signature    one line per argument / result:
//                    "input|param|result <TAB> name <TAB> dtype <TAB> d0,d1,..."
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" int32_t amp_entry(amprt_context *ctx, void *arena, void **args, void **results);

namespace {

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "%s\n", ("error: " + msg).c_str());
  std::exit(1);
}

struct Slot {
  std::string kind, name;
  amprt_dtype dtype;
  std::vector<int64_t> shape;
  std::vector<char> data;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

amprt_dtype dtypeNamed(const std::string &s) {
  for (int i = 0; i < AMPRT_DTYPE_COUNT; ++i)
    if (s == amprt_dtype_name((amprt_dtype)i))
      return (amprt_dtype)i;
  die("the weights file names an unknown element type '" + s + "'");
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos)
      return out;
    start = at + 1;
  }
}

} // namespace

int main(int argc, char **argv) {
  std::string inputs, outputs, weights = std::string(argv[0]) + ".weights", nanCheck = "warn";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char *flag) -> std::string {
      std::string f = flag;
      if (a.rfind(f + "=", 0) == 0)
        return a.substr(f.size() + 1);
      if (a == f && i + 1 < argc)
        return argv[++i];
      die(f + " needs a value");
    };
    if (a.rfind("--inputs", 0) == 0)
      inputs = value("--inputs");
    else if (a.rfind("--outputs", 0) == 0)
      outputs = value("--outputs");
    else if (a.rfind("--weights", 0) == 0)
      weights = value("--weights");
    else if (a.rfind("--nan-check", 0) == 0)
      nanCheck = value("--nan-check");
    else if (a == "-h" || a == "--help") {
      std::printf("usage: %s --inputs in.npz --outputs out.npz [--weights FILE] "
                  "[--nan-check warn|error|off]\n",
                  argv[0]);
      return 0;
    } else
      die("unknown argument '" + a + "' (see --help)");
  }
  if (nanCheck != "warn" && nanCheck != "error" && nanCheck != "off")
    die("--nan-check must be warn, error or off");

  amprt_checkpoint *ck = nullptr;
  if (amprt_checkpoint_open(weights.c_str(), &ck) != AMPRT_OK)
    die(std::string(amprt_last_error()) + " (the weights file written beside the program)");
  const char *sigText = amprt_checkpoint_metadata(ck, "amp.signature");
  const char *arenaText = amprt_checkpoint_metadata(ck, "amp.arena_bytes");
  if (!sigText || !arenaText)
    die("'" + weights + "' has no program signature: not written by amp-compile");
  std::vector<Slot> args, results;
  for (const std::string &line : split(sigText, '\n')) {
    if (line.empty())
      continue;
    auto f = split(line, '\t');
    if (f.size() != 4)
      die("'" + weights + "': malformed signature line '" + line + "'");
    Slot s{f[0], f[1], dtypeNamed(f[2]), {}, {}};
    if (!f[3].empty())
      for (const std::string &d : split(f[3], ','))
        s.shape.push_back(std::strtoll(d.c_str(), nullptr, 10));
    s.data.assign(s.numel() * amprt_dtype_size(s.dtype), 0);
    (s.kind == "result" ? results : args).push_back(std::move(s));
  }
  amprt_npz *in = nullptr;
  bool needInputs = false;
  for (Slot &s : args)
    needInputs |= s.kind == "input";
  if (needInputs) {
    if (inputs.empty())
      die("the program has inputs; give them with --inputs file.npz");
    if (amprt_npz_open(inputs.c_str(), &in) != AMPRT_OK)
      die(amprt_last_error());
  }
  for (Slot &s : args) {
    if (s.kind == "param") {
      amprt_tensor t = amprt_tensor_make(s.data.data(), s.dtype, (int32_t)s.shape.size(),
                                         s.shape.data());
      if (amprt_checkpoint_read(ck, s.name.c_str(), &t) != AMPRT_OK)
        die(amprt_last_error());
      continue;
    }
    const amprt_array *a = amprt_npz_get(in, s.name.c_str());
    if (!a) {
      std::string have;
      for (int32_t i = 0; i < amprt_npz_count(in); ++i)
        have += (i ? ", " : "") + std::string(amprt_npz_name(in, i));
      die("input '" + s.name + "' is missing from '" + inputs + "' (it holds: " +
          (have.empty() ? "nothing" : have) + ")");
    }
    std::string what = "input '" + s.name + "' in '" + inputs + "'";
    if (amprt_feed(a, s.dtype, (int32_t)s.shape.size(), s.shape.data(), s.data.data(),
                   what.c_str()) != AMPRT_OK)
      die(amprt_last_error());
    int64_t first;
    int64_t bad = amprt_count_nonfinite(s.data.data(), s.dtype, s.numel(), &first);
    if (bad && nanCheck != "off") {
      std::string msg = "input '" + s.name + "' holds " + std::to_string(bad) +
                        " NaN / inf value(s), the first at flat index " + std::to_string(first);
      if (nanCheck == "error")
        die(msg + " (--nan-check=error)");
      std::fprintf(stderr, "warning: %s\n", msg.c_str());
    }
  }
  amprt_checkpoint_close(ck);
  if (in)
    amprt_npz_close(in);

  amprt_context *ctx = nullptr;
  amprt_arena *arena = nullptr;
  if (amprt_context_create("cpu", &ctx) != AMPRT_OK ||
      amprt_arena_create(ctx, (size_t)std::strtoll(arenaText, nullptr, 10), &arena) != AMPRT_OK)
    die(amprt_last_error());
  std::vector<void *> ap, rp;
  for (Slot &s : args)
    ap.push_back(s.data.data());
  for (Slot &s : results)
    rp.push_back(s.data.data());
  if (amp_entry(ctx, amprt_arena_base(arena), ap.data(), rp.data()) != AMPRT_OK)
    die(amprt_last_error());
  amprt_arena_destroy(arena);
  amprt_context_destroy(ctx);

  if (!outputs.empty()) {
    std::vector<amprt_array> arrays;
    std::vector<const char *> names;
    std::vector<std::vector<float>> widened(results.size());
    for (size_t i = 0; i < results.size(); ++i) {
      Slot &s = results[i];
      amprt_array a{};
      a.data = s.data.data();
      a.dtype = s.dtype;
      a.rank = (int32_t)s.shape.size();
      for (size_t d = 0; d < s.shape.size(); ++d)
        a.shape[d] = s.shape[d];
      if (s.dtype == AMPRT_BF16) { // numpy has no bf16
        widened[i].resize(s.numel());
        amprt_convert(s.data.data(), AMPRT_BF16, widened[i].data(), AMPRT_F32, s.numel());
        a.data = widened[i].data();
        a.dtype = AMPRT_F32;
      }
      arrays.push_back(a);
      names.push_back(s.name.c_str());
    }
    if (amprt_npz_write(outputs.c_str(), names.data(), arrays.data(), (int32_t)arrays.size()) !=
        AMPRT_OK)
      die(amprt_last_error());
  }
  return 0;
}
