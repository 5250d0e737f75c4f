//===- checkpoint.cpp - safetensors checkpoints, metrics -----------------===//
//
// A checkpoint is a safetensors file (8-byte little-endian header length,
// JSON header, raw little-endian data), readable by the `safetensors`
// Python package and by torch. It is written to a temporary file next to
// the target, flushed to disk and renamed, so an interrupted save leaves the
// previous checkpoint intact. Reading validates everything a truncated or
// foreign file could get wrong before touching a byte of data.
//
//===----------------------------------------------------------------------===//
#include "common/check.h"
#include "host/tune.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

using namespace amprt;

namespace {

const char *stName(amprt_dtype t) {
  switch (t) {
  case AMPRT_F32:
    return "F32";
  case AMPRT_F16:
    return "F16";
  case AMPRT_BF16:
    return "BF16";
  case AMPRT_I1:
    return "BOOL";
  case AMPRT_I8:
    return "I8";
  case AMPRT_I16:
    return "I16";
  case AMPRT_I32:
    return "I32";
  case AMPRT_I64:
    return "I64";
  case AMPRT_U8:
    return "U8";
  case AMPRT_U16:
    return "U16";
  case AMPRT_U32:
    return "U32";
  case AMPRT_U64:
    return "U64";
  default:
    return nullptr;
  }
}

bool stType(const std::string &s, amprt_dtype &t) {
  for (int i = 0; i < AMPRT_DTYPE_COUNT; ++i)
    if (stName((amprt_dtype)i) && s == stName((amprt_dtype)i)) {
      t = (amprt_dtype)i;
      return true;
    }
  return false;
}

void jsonString(std::string &out, const char *s) {
  out.push_back('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
    switch (*p) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      if (*p < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", *p);
        out += buf;
      } else {
        out.push_back((char)*p);
      }
    }
  }
  out.push_back('"');
}

/// A strict parser for the safetensors header: objects, arrays, strings,
/// non-negative integers.
struct Json {
  enum Kind { Null, Int, Str, Arr, Obj } kind = Null;
  uint64_t i = 0;
  std::string s;
  std::vector<Json> a;
  std::vector<std::pair<std::string, Json>> o;
};

class Parser {
public:
  Parser(const char *p, size_t n) : p(p), end(p + n) {}
  bool parse(Json &j, std::string &err) {
    if (!value(j, 0)) {
      err = error.empty() ? "malformed JSON header" : error;
      return false;
    }
    ws();
    if (p != end) {
      err = "trailing bytes after the JSON header";
      return false;
    }
    return true;
  }

private:
  void ws() {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
      ++p;
  }
  bool str(std::string &s) {
    if (p >= end || *p != '"')
      return false;
    ++p;
    while (p < end && *p != '"') {
      if (*p == '\\') {
        if (++p >= end)
          return false;
        switch (*p) {
        case 'n':
          s.push_back('\n');
          break;
        case 't':
          s.push_back('\t');
          break;
        case 'r':
          s.push_back('\r');
          break;
        case 'u': {
          if (end - p < 5)
            return false;
          unsigned v = 0;
          for (int k = 1; k <= 4; ++k) {
            char c = p[k];
            v = v * 16 + (c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : 99);
            if (v > 0xffff)
              return false;
          }
          if (v < 0x80) {
            s.push_back((char)v);
          } else if (v < 0x800) {
            s.push_back((char)(0xc0 | (v >> 6)));
            s.push_back((char)(0x80 | (v & 0x3f)));
          } else {
            s.push_back((char)(0xe0 | (v >> 12)));
            s.push_back((char)(0x80 | ((v >> 6) & 0x3f)));
            s.push_back((char)(0x80 | (v & 0x3f)));
          }
          p += 4;
          break;
        }
        default:
          s.push_back(*p);
          break;
        }
        ++p;
      } else {
        s.push_back(*p++);
      }
    }
    if (p >= end)
      return false;
    ++p;
    return true;
  }
  bool value(Json &j, int depth) {
    if (depth > 16) {
      error = "JSON header nested too deeply";
      return false;
    }
    ws();
    if (p >= end)
      return false;
    if (*p == '"') {
      j.kind = Json::Str;
      return str(j.s);
    }
    if (*p >= '0' && *p <= '9') {
      j.kind = Json::Int;
      while (p < end && *p >= '0' && *p <= '9') {
        if (j.i > (UINT64_MAX - 9) / 10)
          return false;
        j.i = j.i * 10 + (uint64_t)(*p++ - '0');
      }
      return true;
    }
    if (*p == '[') {
      j.kind = Json::Arr;
      ++p;
      ws();
      if (p < end && *p == ']') {
        ++p;
        return true;
      }
      while (true) {
        j.a.emplace_back();
        if (!value(j.a.back(), depth + 1))
          return false;
        ws();
        if (p < end && *p == ',') {
          ++p;
          continue;
        }
        if (p < end && *p == ']') {
          ++p;
          return true;
        }
        return false;
      }
    }
    if (*p == '{') {
      j.kind = Json::Obj;
      ++p;
      ws();
      if (p < end && *p == '}') {
        ++p;
        return true;
      }
      while (true) {
        ws();
        std::string key;
        if (!str(key))
          return false;
        ws();
        if (p >= end || *p != ':')
          return false;
        ++p;
        j.o.emplace_back(key, Json());
        if (!value(j.o.back().second, depth + 1))
          return false;
        ws();
        if (p < end && *p == ',') {
          ++p;
          continue;
        }
        if (p < end && *p == '}') {
          ++p;
          return true;
        }
        return false;
      }
    }
    if (end - p >= 4 && std::memcmp(p, "null", 4) == 0) {
      p += 4;
      return true;
    }
    return false;
  }
  const char *p, *end;
  std::string error;
};

struct Entry {
  amprt_dtype dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

} // namespace

/// The metadata key of the kernel choices (tune.cpp).
constexpr const char *kKernelChoicesKey = "amprt.kernel_choices";

struct amprt_checkpoint {
  ~amprt_checkpoint() {
    if (file)
      std::fclose(file);
  }
  std::string path;
  FILE *file = nullptr;
  uint64_t dataStart = 0;
  std::vector<std::string> names;
  std::map<std::string, Entry> entries;
  std::map<std::string, std::string> meta;
};

extern "C" amprt_status amprt_checkpoint_save(const char *path, const amprt_named_tensor *tensors,
                                              int32_t n, const amprt_metadata *meta,
                                              int32_t nmeta) {
  if (!path || n < 0 || (n && !tensors) || nmeta < 0 || (nmeta && !meta))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_checkpoint_save: bad arguments");
  std::string header = "{";
  uint64_t offset = 0;
  std::map<std::string, int> seen;
  for (int32_t i = 0; i < n; ++i) {
    const amprt_tensor *t = &tensors[i].tensor;
    const char *name = tensors[i].name;
    if (!name || !*name || std::strcmp(name, "__metadata__") == 0)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_checkpoint_save: tensor %d has no usable name",
                  i);
    if (seen[name]++)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_checkpoint_save: tensor name '%s' appears twice", name);
    AMPRT_CHECK(check(t, "amprt_checkpoint_save"));
    if (!amprt_tensor_is_contiguous(t))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "amprt_checkpoint_save: tensor '%s' is not contiguous", name);
    uint64_t bytes = (uint64_t)amprt_tensor_numel(t) * amprt_dtype_size(t->dtype);
    if (i)
      header += ",";
    jsonString(header, name);
    header += ":{\"dtype\":\"";
    header += stName(t->dtype);
    header += "\",\"shape\":[";
    for (int32_t d = 0; d < t->rank; ++d)
      header += (d ? "," : "") + std::to_string(t->shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  // The per-shape kernel choices made so far (AMPRT_TUNE): a run resumed
  // from this file takes the same kernels, and continues bit for bit.
  std::string choices = kernelChoicesText();
  for (int32_t i = 0; i < nmeta; ++i)
    if (meta[i].key && !std::strcmp(meta[i].key, kKernelChoicesKey))
      choices.clear(); // the caller's own
  if (nmeta || !choices.empty()) {
    header += n ? ",\"__metadata__\":{" : "\"__metadata__\":{";
    for (int32_t i = 0; i < nmeta; ++i) {
      if (!meta[i].key || !meta[i].value)
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_checkpoint_save: metadata %d is null", i);
      if (i)
        header += ",";
      jsonString(header, meta[i].key);
      header += ":";
      jsonString(header, meta[i].value);
    }
    if (!choices.empty()) {
      header += nmeta ? "," : "";
      jsonString(header, kKernelChoicesKey);
      header += ":";
      jsonString(header, choices.c_str());
    }
    header += "}";
  }
  header += "}";
  while (header.size() % 8)
    header.push_back(' ');

  std::string tmp = std::string(path) + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return fail(AMPRT_ERR_IO, "amprt_checkpoint_save: cannot create '%s': %s", tmp.c_str(),
                std::strerror(errno));
  auto writeAll = [&](const void *data, size_t len) {
    const char *c = static_cast<const char *>(data);
    while (len) {
      ssize_t w = write(fd, c, len);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return false;
      c += w;
      len -= (size_t)w;
    }
    return true;
  };
  uint64_t hlen = header.size();
  uint8_t le[8];
  for (int b = 0; b < 8; ++b)
    le[b] = (uint8_t)(hlen >> (8 * b));
  bool ok = writeAll(le, 8) && writeAll(header.data(), header.size());
  for (int32_t i = 0; ok && i < n; ++i) {
    const amprt_tensor *t = &tensors[i].tensor;
    ok = writeAll(t->data, (size_t)amprt_tensor_numel(t) * amprt_dtype_size(t->dtype));
  }
  ok = ok && fsync(fd) == 0;
  int err = errno;
  ok = (close(fd) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path) != 0) {
    err = err ? err : errno;
    unlink(tmp.c_str());
    return fail(AMPRT_ERR_IO, "amprt_checkpoint_save: writing '%s' failed: %s", path,
                std::strerror(err));
  }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_checkpoint_open(const char *path, amprt_checkpoint **out) {
  if (!path || !out)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_checkpoint_open: null argument");
  *out = nullptr;
  FILE *f = std::fopen(path, "rb");
  if (!f)
    return fail(AMPRT_ERR_IO, "checkpoint '%s': cannot open: %s", path, std::strerror(errno));
  amprt_checkpoint *ck = nullptr; // owns f once made
  auto bad = [&](const char *why) {
    if (ck)
      delete ck;
    else
      std::fclose(f);
    return fail(AMPRT_ERR_FORMAT, "checkpoint '%s': not a valid safetensors file: %s", path, why);
  };
  std::fseek(f, 0, SEEK_END);
  long sizeL = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  if (sizeL < 8)
    return bad("shorter than the 8-byte header length (empty or truncated)");
  uint64_t size = (uint64_t)sizeL;
  uint8_t le[8];
  if (std::fread(le, 1, 8, f) != 8)
    return bad("cannot read the header length");
  uint64_t hlen = 0;
  for (int b = 0; b < 8; ++b)
    hlen |= (uint64_t)le[b] << (8 * b);
  if (hlen < 2 || hlen > (100u << 20) || hlen > size - 8)
    return bad("the header length is impossible for this file (truncated or not a "
               "checkpoint)");
  std::vector<char> hdr(hlen);
  if (std::fread(hdr.data(), 1, hlen, f) != hlen)
    return bad("truncated header");
  Json root;
  std::string err;
  if (!Parser(hdr.data(), hlen).parse(root, err) || root.kind != Json::Obj)
    return bad(err.empty() ? "the header is not a JSON object" : err.c_str());
  ck = new amprt_checkpoint();
  ck->path = path;
  ck->file = f;
  ck->dataStart = 8 + hlen;
  uint64_t dataSize = size - ck->dataStart;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto &[name, j] : root.o) {
    // A NUL (JSON \u0000) would cut the name every C caller sees: listed,
    // then not found.
    if (name.find('\0') != std::string::npos)
      return bad("a tensor or metadata name holds a NUL character");
    if (name == "__metadata__") {
      if (j.kind != Json::Obj) {
        return bad("__metadata__ is not an object");
      }
      for (auto &[k, v] : j.o) {
        if (v.kind != Json::Str) {
          return bad("a metadata value is not a string");
        }
        if (k.find('\0') != std::string::npos || v.s.find('\0') != std::string::npos)
          return bad("a metadata key or value holds a NUL character");
        ck->meta[k] = v.s;
      }
      continue;
    }
    const Json *dt = nullptr, *shape = nullptr, *offs = nullptr;
    if (j.kind == Json::Obj)
      for (auto &[k, v] : j.o) {
        if (k == "dtype")
          dt = &v;
        else if (k == "shape")
          shape = &v;
        else if (k == "data_offsets")
          offs = &v;
      }
    Entry e;
    if (!dt || dt->kind != Json::Str || !stType(dt->s, e.dtype) || !shape ||
        shape->kind != Json::Arr || shape->a.size() > AMPRT_MAX_RANK || !offs ||
        offs->kind != Json::Arr || offs->a.size() != 2 || offs->a[0].kind != Json::Int ||
        offs->a[1].kind != Json::Int) {
      delete ck;
      return fail(AMPRT_ERR_FORMAT,
                  "checkpoint '%s': tensor '%s' has a malformed entry (dtype, "
                  "shape, data_offsets)",
                  path, name.c_str());
    }
    uint64_t numel = 1;
    for (const Json &d : shape->a) {
      if (d.kind != Json::Int || (d.i && numel > (UINT64_MAX >> 1) / d.i)) {
        delete ck;
        return fail(AMPRT_ERR_FORMAT, "checkpoint '%s': tensor '%s' has a bad shape", path,
                    name.c_str());
      }
      numel *= d.i;
      e.shape.push_back((int64_t)d.i);
    }
    if (ck->entries.count(name)) {
      delete ck;
      return fail(AMPRT_ERR_FORMAT, "checkpoint '%s': tensor '%s' is listed twice", path,
                  name.c_str());
    }
    e.begin = offs->a[0].i;
    e.end = offs->a[1].i;
    // numel x element size is compared without wrapping: a shape whose
    // bytes overflow 64 bits never matches the (smaller) offsets.
    uint64_t es = amprt_dtype_size(e.dtype);
    if (e.end < e.begin || e.end > dataSize || numel > dataSize / es ||
        e.end - e.begin != numel * es) {
      delete ck;
      return fail(AMPRT_ERR_FORMAT,
                  "checkpoint '%s': tensor '%s' has data_offsets [%llu, %llu] that "
                  "do not fit its shape or the file (%llu data bytes): truncated?",
                  path, name.c_str(), (unsigned long long)e.begin, (unsigned long long)e.end,
                  (unsigned long long)dataSize);
    }
    ranges.push_back({e.begin, e.end});
    ck->names.push_back(name);
    ck->entries[name] = e;
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) {
      return bad("two tensors overlap");
    }
  // A run resumed from the file takes the kernels the run that wrote it
  // chose (AMPRT_TUNE), where it has not chosen its own.
  auto choices = ck->meta.find(kKernelChoicesKey);
  if (choices != ck->meta.end())
    adoptKernelChoices(choices->second);
  *out = ck;
  return AMPRT_OK;
}

extern "C" void amprt_checkpoint_close(amprt_checkpoint *ck) {
  if (!ck)
    return;
  delete ck; // (closes the file)
}

extern "C" amprt_status amprt_checkpoint_read(amprt_checkpoint *ck, const char *name,
                                              amprt_tensor *dst) {
  if (!ck || !name || !dst)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_checkpoint_read: null argument");
  auto it = ck->entries.find(name);
  if (it == ck->entries.end())
    return fail(AMPRT_ERR_FORMAT, "checkpoint '%s' has no tensor '%s'", ck->path.c_str(), name);
  const Entry &e = it->second;
  AMPRT_CHECK(check(dst, "amprt_checkpoint_read"));
  bool match = e.dtype == dst->dtype && (int32_t)e.shape.size() == dst->rank;
  for (int32_t d = 0; match && d < dst->rank; ++d)
    match = e.shape[d] == dst->shape[d];
  if (!match)
    return fail(AMPRT_ERR_FORMAT,
                "checkpoint '%s': tensor '%s' is %s with %zu dims, the model "
                "expects %s %s",
                ck->path.c_str(), name, amprt_dtype_name(e.dtype), e.shape.size(),
                amprt_dtype_name(dst->dtype), shapeString(dst).c_str());
  uint64_t bytes = e.end - e.begin;
  std::vector<char> buf;
  char *target = static_cast<char *>(dst->data);
  bool contiguous = amprt_tensor_is_contiguous(dst);
  if (!contiguous) {
    buf.resize(bytes);
    target = buf.data();
  }
  if (std::fseek(ck->file, (long)(ck->dataStart + e.begin), SEEK_SET) != 0 ||
      std::fread(target, 1, bytes, ck->file) != bytes)
    return fail(AMPRT_ERR_IO, "checkpoint '%s': reading tensor '%s' failed (truncated?)",
                ck->path.c_str(), name);
  if (!contiguous) {
    amprt_tensor src = amprt_tensor_make(buf.data(), dst->dtype, dst->rank, dst->shape);
    return amprt_copy(nullptr, &src, dst);
  }
  return AMPRT_OK;
}

extern "C" amprt_status amprt_checkpoint_info(amprt_checkpoint *ck, const char *name,
                                              amprt_dtype *dtype, int32_t *rank,
                                              int64_t shape[AMPRT_MAX_RANK]) {
  if (!ck || !name || !dtype || !rank || !shape)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_checkpoint_info: null argument");
  auto it = ck->entries.find(name);
  if (it == ck->entries.end())
    return fail(AMPRT_ERR_FORMAT, "checkpoint '%s' has no tensor '%s'", ck->path.c_str(), name);
  *dtype = it->second.dtype;
  *rank = (int32_t)it->second.shape.size();
  for (int32_t d = 0; d < *rank; ++d)
    shape[d] = it->second.shape[d];
  return AMPRT_OK;
}

extern "C" const char *amprt_checkpoint_metadata(amprt_checkpoint *ck, const char *key) {
  if (!ck || !key)
    return nullptr;
  auto it = ck->meta.find(key);
  return it == ck->meta.end() ? nullptr : it->second.c_str();
}

extern "C" int32_t amprt_checkpoint_count(amprt_checkpoint *ck) {
  return ck ? (int32_t)ck->names.size() : 0;
}

extern "C" const char *amprt_checkpoint_name(amprt_checkpoint *ck, int32_t i) {
  if (!ck || i < 0 || i >= (int32_t)ck->names.size())
    return nullptr;
  return ck->names[i].c_str();
}

//===----------------------------------------------------------------------===//
// Metrics
//===----------------------------------------------------------------------===//

struct amprt_metrics {
  FILE *file;
  std::string path;
};

namespace {
/// A JSON number; non-finite values as Python's json writes them (NaN,
/// Infinity), which json.loads and pandas read back.
std::string jsonNumber(double v) {
  if (std::isnan(v))
    return "NaN";
  if (std::isinf(v))
    return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}
} // namespace

extern "C" amprt_status amprt_metrics_open(const char *path, int append, amprt_metrics **out) {
  if (!path || !out)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_metrics_open: null argument");
  FILE *f = std::fopen(path, append ? "a" : "w");
  if (!f)
    return fail(AMPRT_ERR_IO, "metrics file '%s': cannot open: %s", path, std::strerror(errno));
  *out = new amprt_metrics{f, path};
  return AMPRT_OK;
}

extern "C" amprt_status amprt_metrics_write(amprt_metrics *m, const amprt_step_metrics *s) {
  if (!m || !s)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_metrics_write: null argument");
  std::string line = "{\"step\": " + std::to_string(s->step) +
                     ", \"loss\": " + jsonNumber(s->loss) +
                     ", \"loss_scale\": " + jsonNumber(s->loss_scale) +
                     ", \"found_inf\": " + std::to_string(s->found_inf) +
                     ", \"skipped_total\": " + std::to_string(s->skipped_total) +
                     ", \"step_time_s\": " + jsonNumber(s->step_time_s) + "}\n";
  if (std::fputs(line.c_str(), m->file) < 0 || std::fflush(m->file) != 0)
    return fail(AMPRT_ERR_IO, "metrics file '%s': write failed: %s", m->path.c_str(),
                std::strerror(errno));
  return AMPRT_OK;
}

extern "C" void amprt_metrics_close(amprt_metrics *m) {
  if (!m)
    return;
  std::fclose(m->file);
  delete m;
}

extern "C" int amprt_format_progress(char *buf, size_t size, const amprt_step_metrics *s,
                                     int64_t total) {
  if (!buf || !s || !size)
    return 0;
  return std::snprintf(buf, size, "step %lld/%lld  loss %.4f  scale %g  skipped %lld  %.1f ms/step",
                       (long long)s->step, (long long)total, s->loss, s->loss_scale,
                       (long long)s->skipped_total, s->step_time_s * 1e3);
}
