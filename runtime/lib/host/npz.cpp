//===- npz.cpp - .npy / .npz arrays for programs' inputs and outputs -----===//
//
// Reads what numpy writes (np.save, np.savez, np.savez_compressed: ZIP with
// stored or deflated members, format 1.0 / 2.0 / 3.0 headers, little-endian
// dtypes, C order) and writes .npz files numpy reads. Everything a hostile
// file controls (sizes, offsets, header text) is checked.
//
//===----------------------------------------------------------------------===//
#include "common/check.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#include <zlib.h>

using namespace amprt;

struct amprt_npz {
  std::string path;
  std::vector<std::string> names;
  std::map<std::string, amprt_array> arrays;
  std::map<std::string, std::vector<char>> storage;
};

namespace {

uint32_t rd32(const unsigned char *p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | ((uint32_t)p[3] << 24);
}
uint16_t rd16(const unsigned char *p) { return p[0] | (p[1] << 8); }

bool parseDescr(const std::string &d, amprt_dtype &t) {
  static const std::pair<const char *, amprt_dtype> table[] = {
      {"<f4", AMPRT_F32}, {"<f2", AMPRT_F16}, {"|b1", AMPRT_I1},  {"|i1", AMPRT_I8},
      {"<i2", AMPRT_I16}, {"<i4", AMPRT_I32}, {"<i8", AMPRT_I64}, {"|u1", AMPRT_U8},
      {"<u2", AMPRT_U16}, {"<u4", AMPRT_U32}, {"<u8", AMPRT_U64}};
  for (auto [n, dt] : table)
    if (d == n) {
      t = dt;
      return true;
    }
  return false;
}

const char *descrOf(amprt_dtype t) {
  switch (t) {
  case AMPRT_F32:
    return "<f4";
  case AMPRT_F16:
    return "<f2";
  case AMPRT_I1:
    return "|b1";
  case AMPRT_I8:
    return "|i1";
  case AMPRT_I16:
    return "<i2";
  case AMPRT_I32:
    return "<i4";
  case AMPRT_I64:
    return "<i8";
  case AMPRT_U8:
    return "|u1";
  case AMPRT_U16:
    return "<u2";
  case AMPRT_U32:
    return "<u4";
  case AMPRT_U64:
    return "<u8";
  default:
    return nullptr;
  }
}

/// Parses one .npy image; the array points into `bytes`.
amprt_status parseNpy(const std::vector<char> &bytes, const std::string &what, amprt_array &out) {
  const unsigned char *p = reinterpret_cast<const unsigned char *>(bytes.data());
  size_t n = bytes.size();
  if (n < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0)
    return fail(AMPRT_ERR_FORMAT, "%s: not a .npy array (bad magic)", what.c_str());
  int major = p[6];
  size_t hlen, hstart;
  if (major == 1) {
    hlen = rd16(p + 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (n < 12)
      return fail(AMPRT_ERR_FORMAT, "%s: truncated .npy header", what.c_str());
    hlen = rd32(p + 8);
    hstart = 12;
  } else {
    return fail(AMPRT_ERR_FORMAT, "%s: .npy format version %d is not supported", what.c_str(),
                major);
  }
  if (hstart + hlen > n)
    return fail(AMPRT_ERR_FORMAT, "%s: truncated .npy header", what.c_str());
  std::string h(bytes.data() + hstart, hlen);
  auto field = [&](const char *key) -> std::string {
    size_t k = h.find(std::string("'") + key + "'");
    if (k == std::string::npos)
      return "";
    size_t c = h.find(':', k);
    if (c == std::string::npos)
      return "";
    size_t s = h.find_first_not_of(' ', c + 1);
    if (s == std::string::npos)
      return "";
    if (h[s] == '\'') {
      size_t e = h.find('\'', s + 1);
      return e == std::string::npos ? "" : h.substr(s + 1, e - s - 1);
    }
    if (h[s] == '(') {
      size_t e = h.find(')', s);
      return e == std::string::npos ? "" : h.substr(s, e - s + 1);
    }
    size_t e = h.find_first_of(",}", s);
    return h.substr(s, e - s);
  };
  std::string descr = field("descr"), order = field("fortran_order"), shape = field("shape");
  if (!parseDescr(descr, out.dtype))
    return fail(AMPRT_ERR_UNSUPPORTED,
                "%s: element type '%s' is not supported (use float32, float16, bool or a "
                "little-endian integer type)",
                what.c_str(), descr.c_str());
  if (order.find("True") != std::string::npos)
    return fail(AMPRT_ERR_UNSUPPORTED, "%s: Fortran-order arrays are not supported", what.c_str());
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')')
    return fail(AMPRT_ERR_FORMAT, "%s: malformed shape in the .npy header", what.c_str());
  out.rank = 0;
  int64_t numel = 1;
  std::string inner = shape.substr(1, shape.size() - 2);
  size_t pos = 0;
  while (pos < inner.size()) {
    size_t comma = inner.find(',', pos);
    std::string tok =
        inner.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? inner.size() : comma + 1;
    size_t a = tok.find_first_not_of(' '), b = tok.find_last_not_of(' ');
    if (a == std::string::npos)
      continue;
    tok = tok.substr(a, b - a + 1);
    char *end = nullptr;
    long long v = std::strtoll(tok.c_str(), &end, 10);
    if (*end || v < 0 || out.rank >= AMPRT_MAX_RANK || (v && numel > (INT64_MAX >> 4) / v))
      return fail(AMPRT_ERR_FORMAT, "%s: bad shape entry '%s'", what.c_str(), tok.c_str());
    out.shape[out.rank++] = v;
    numel *= v;
  }
  size_t dataStart = hstart + hlen;
  size_t need = (size_t)numel * amprt_dtype_size(out.dtype);
  if (n - dataStart != need)
    return fail(AMPRT_ERR_FORMAT, "%s: holds %zu data bytes, its shape and type need %zu",
                what.c_str(), n - dataStart, need);
  out.data = bytes.data() + dataStart;
  return AMPRT_OK;
}

amprt_status readFile(const char *path, std::vector<char> &data) {
  FILE *f = std::fopen(path, "rb");
  if (!f)
    return fail(AMPRT_ERR_IO, "'%s': cannot open: %s", path, std::strerror(errno));
  std::fseek(f, 0, SEEK_END);
  long n = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  if (n < 0) {
    std::fclose(f);
    return fail(AMPRT_ERR_IO, "'%s': cannot read", path);
  }
  data.resize((size_t)n);
  size_t got = n ? std::fread(data.data(), 1, (size_t)n, f) : 0;
  std::fclose(f);
  if (got != (size_t)n)
    return fail(AMPRT_ERR_IO, "'%s': short read", path);
  return AMPRT_OK;
}

} // namespace

extern "C" amprt_status amprt_npz_open(const char *path, amprt_npz **out) {
  if (!path || !out)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_npz_open: null argument");
  *out = nullptr;
  std::vector<char> file;
  AMPRT_CHECK(readFile(path, file));
  auto *z = new amprt_npz();
  z->path = path;
  auto bad = [&](const char *fmt, const char *detail) {
    delete z;
    return fail(AMPRT_ERR_FORMAT, fmt, path, detail);
  };
  // A bare .npy file is one array named after the file.
  if (file.size() >= 6 && std::memcmp(file.data(), "\x93NUMPY", 6) == 0) {
    std::string name = path;
    size_t slash = name.find_last_of('/');
    if (slash != std::string::npos)
      name = name.substr(slash + 1);
    if (name.size() > 4 && name.substr(name.size() - 4) == ".npy")
      name.resize(name.size() - 4);
    z->storage[name] = std::move(file);
    amprt_array a{};
    amprt_status s = parseNpy(z->storage[name], std::string(path), a);
    if (s != AMPRT_OK) {
      delete z;
      return s;
    }
    z->names.push_back(name);
    z->arrays[name] = a;
    *out = z;
    return AMPRT_OK;
  }
  const unsigned char *p = reinterpret_cast<const unsigned char *>(file.data());
  size_t n = file.size(), pos = 0;
  // An archive starts with its first entry, or (np.savez with no arrays)
  // with its end record.
  if (n < 4 || (rd32(p) != 0x04034b50 && rd32(p) != 0x06054b50))
    return bad("'%s': not an .npz (zip) or .npy file%s", "");
  while (pos + 30 <= n && rd32(p + pos) == 0x04034b50) {
    uint16_t flags = rd16(p + pos + 6), method = rd16(p + pos + 8);
    uint32_t csize = rd32(p + pos + 18), usize = rd32(p + pos + 22);
    uint16_t nlen = rd16(p + pos + 26), xlen = rd16(p + pos + 28);
    if (flags & 8)
      return bad("'%s': zip entries with data descriptors are not supported%s", "");
    size_t dataAt = pos + 30 + nlen + xlen;
    if (dataAt > n)
      return bad("'%s': truncated zip entry%s", "");
    // ZIP64 (numpy < 2 writes every entry so): the sizes that read
    // 0xFFFFFFFF are in the extra field 0x0001, uncompressed size first.
    if (csize == 0xFFFFFFFFu || usize == 0xFFFFFFFFu) {
      size_t x = pos + 30 + nlen, xend = dataAt;
      bool found = false;
      while (x + 4 <= xend) {
        uint16_t id = rd16(p + x), len = rd16(p + x + 2);
        if (x + 4 + len > xend)
          break;
        if (id == 1) {
          size_t f = x + 4, fend = f + len;
          uint64_t u = usize, c = csize;
          if (usize == 0xFFFFFFFFu) {
            if (f + 8 > fend)
              break;
            u = (uint64_t)rd32(p + f) | ((uint64_t)rd32(p + f + 4) << 32);
            f += 8;
          }
          if (csize == 0xFFFFFFFFu) {
            if (f + 8 > fend)
              break;
            c = (uint64_t)rd32(p + f) | ((uint64_t)rd32(p + f + 4) << 32);
          }
          if (u > (1u << 31) || c > (1u << 31))
            return bad("'%s': entry too large%s", "");
          usize = (uint32_t)u;
          csize = (uint32_t)c;
          found = true;
          break;
        }
        x += 4 + len;
      }
      if (!found)
        return bad("'%s': corrupt ZIP64 entry (no sizes in its extra field)%s", "");
    }
    if (dataAt > n || csize > n - dataAt)
      return bad("'%s': truncated zip entry%s", "");
    std::string name(reinterpret_cast<const char *>(p + pos + 30), nlen);
    // A NUL would cut the name every C caller sees (listed, then not found).
    if (name.find('\0') != std::string::npos)
      return bad("'%s': a zip entry's name holds a NUL byte%s", "");
    if (name.size() > 4 && name.substr(name.size() - 4) == ".npy")
      name.resize(name.size() - 4);
    if (z->storage.count(name)) {
      std::string detail = " ('" + name + "')";
      return bad("'%s': two zip entries hold the same array%s", detail.c_str());
    }
    std::vector<char> data;
    if (method == 0) {
      if (csize != usize)
        return bad("'%s': inconsistent stored entry sizes%s", "");
      data.assign(file.data() + dataAt, file.data() + dataAt + csize);
    } else if (method == 8) {
      if (usize > (1u << 31))
        return bad("'%s': entry too large%s", "");
      // Deflate expands at most 1032:1: a declared size beyond that is a
      // corrupt (or hostile) header, refused before any allocation. The
      // output then grows as inflate produces it, not to the declared size
      // up front (a 73-byte file declaring 2 GiB costs nothing).
      if ((uint64_t)usize > (uint64_t)csize * 1032 + 64)
        return bad("'%s': corrupt compressed entry (its declared size cannot come from its "
                   "compressed bytes)%s",
                   "");
      z_stream zs{};
      zs.next_in = const_cast<Bytef *>(p + dataAt);
      zs.avail_in = csize;
      if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
        return bad("'%s': cannot initialise zlib%s", "");
      int r = Z_OK;
      while (r == Z_OK && zs.total_out < usize) {
        size_t have = zs.total_out;
        size_t grow = std::min<size_t>(usize - have, std::max<size_t>(have, 1 << 16));
        data.resize(have + grow);
        zs.next_out = reinterpret_cast<Bytef *>(data.data() + have);
        zs.avail_out = (uInt)grow;
        r = inflate(&zs, Z_FINISH);
        if (r == Z_BUF_ERROR && zs.avail_out == 0)
          r = Z_OK; // out of room, more to come
      }
      // The stream must end exactly at the declared size.
      if (r == Z_OK && zs.total_out == usize) {
        unsigned char probe;
        zs.next_out = &probe;
        zs.avail_out = 1;
        r = inflate(&zs, Z_FINISH);
      }
      uLong total = zs.total_out;
      inflateEnd(&zs);
      if (r != Z_STREAM_END || total != usize)
        return bad("'%s': corrupt compressed entry%s", "");
      data.resize(usize);
    } else {
      return bad("'%s': zip compression method not supported (use np.savez or "
                 "np.savez_compressed)%s",
                 "");
    }
    pos = dataAt + csize;
    z->storage[name] = std::move(data);
    amprt_array a{};
    amprt_status s = parseNpy(z->storage[name], std::string(path) + ": '" + name + "'", a);
    if (s != AMPRT_OK) {
      delete z;
      return s;
    }
    z->names.push_back(name);
    z->arrays[name] = a;
  }
  // The entries end where the central directory (or, with none, the end
  // record) begins: anything else is a cut or corrupt file.
  if (pos + 4 > n || (rd32(p + pos) != 0x02014b50 && rd32(p + pos) != 0x06054b50))
    return bad("'%s': truncated or corrupt zip (no central directory after the entries)%s", "");
  *out = z;
  return AMPRT_OK;
}

extern "C" void amprt_npz_close(amprt_npz *z) { delete z; }

extern "C" int32_t amprt_npz_count(const amprt_npz *z) { return z ? (int32_t)z->names.size() : 0; }

extern "C" const char *amprt_npz_name(const amprt_npz *z, int32_t i) {
  if (!z || i < 0 || i >= (int32_t)z->names.size())
    return nullptr;
  return z->names[i].c_str();
}

extern "C" const amprt_array *amprt_npz_get(const amprt_npz *z, const char *name) {
  if (!z || !name)
    return nullptr;
  auto it = z->arrays.find(name);
  return it == z->arrays.end() ? nullptr : &it->second;
}

extern "C" amprt_status amprt_npz_write(const char *path, const char *const *names,
                                        const amprt_array *arrays, int32_t n) {
  if (!path || n < 0 || (n && (!names || !arrays)))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_npz_write: bad arguments");
  auto le16 = [](std::string &s, uint32_t v) {
    s.push_back((char)(v & 0xff));
    s.push_back((char)((v >> 8) & 0xff));
  };
  auto le32 = [&](std::string &s, uint32_t v) {
    le16(s, v & 0xffff);
    le16(s, v >> 16);
  };
  // Every array checked, and its .npy header built, before the file is
  // created; the data is then streamed from the caller's buffers (no copy:
  // an output of several GiB is written in the memory it already has).
  struct Entry {
    std::string fname, npyHeader;
    uint64_t dataBytes;
  };
  std::vector<Entry> entries;
  uint64_t zipBytes = 0;
  for (int32_t i = 0; i < n; ++i) {
    const amprt_array &a = arrays[i];
    const char *descr = descrOf(a.dtype);
    if (!descr)
      return fail(AMPRT_ERR_UNSUPPORTED,
                  "amprt_npz_write: '%s' is %s, which .npy cannot hold (convert bf16 to "
                  "f32 first)",
                  names[i], amprt_dtype_name(a.dtype));
    std::string shape = "(";
    uint64_t numel = 1;
    for (int32_t d = 0; d < a.rank; ++d) {
      shape += std::to_string(a.shape[d]) + (a.rank == 1 ? "," : d + 1 < a.rank ? ", " : "");
      if (a.shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)a.shape[d], &numel))
        return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_npz_write: '%s' has a bad shape", names[i]);
    }
    shape += ")";
    std::string header =
        "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + shape + ", }";
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header.push_back('\n');
    std::string npy = "\x93NUMPY";
    npy.push_back(1);
    npy.push_back(0);
    npy.push_back((char)(header.size() & 0xff));
    npy.push_back((char)(header.size() >> 8));
    npy += header;
    uint64_t dataBytes = 0;
    if (__builtin_mul_overflow(numel, (uint64_t)amprt_dtype_size(a.dtype), &dataBytes) ||
        dataBytes > 0xffffffffull - npy.size())
      return fail(AMPRT_ERR_UNSUPPORTED,
                  "amprt_npz_write: '%s' is %llu elements of %s, 4 GiB or more: .npz files "
                  "without zip64 (what this writer makes) hold arrays under 4 GiB",
                  names[i], (unsigned long long)numel, amprt_dtype_name(a.dtype));
    std::string fname = std::string(names[i]) + ".npy";
    zipBytes += 30 + fname.size() + npy.size() + dataBytes;
    if (zipBytes > 0xffffffffull)
      return fail(AMPRT_ERR_UNSUPPORTED,
                  "amprt_npz_write: the arrays together are 4 GiB or more: .npz files without "
                  "zip64 (what this writer makes) hold less");
    entries.push_back({fname, npy, dataBytes});
  }
  std::string tmp = std::string(path) + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    return fail(AMPRT_ERR_IO, "'%s': cannot create: %s", tmp.c_str(), std::strerror(errno));
  auto put = [&](const void *p, size_t bytes) { return std::fwrite(p, 1, bytes, f) == bytes; };
  const size_t chunk = size_t(1) << 30; // crc32 and fwrite take at most uInt / size_t
  std::string central;
  uint64_t at = 0;
  bool ok = true;
  for (int32_t i = 0; i < n && ok; ++i) {
    const Entry &e = entries[(size_t)i];
    const char *data = static_cast<const char *>(arrays[i].data);
    uLong crc =
        crc32(0L, reinterpret_cast<const Bytef *>(e.npyHeader.data()), (uInt)e.npyHeader.size());
    for (uint64_t k = 0; k < e.dataBytes; k += chunk)
      crc = crc32(crc, reinterpret_cast<const Bytef *>(data + k),
                  (uInt)std::min<uint64_t>(chunk, e.dataBytes - k));
    uint32_t size = (uint32_t)(e.npyHeader.size() + e.dataBytes);
    std::string local;
    le32(local, 0x04034b50);
    le16(local, 20);
    le16(local, 0);
    le16(local, 0); // stored
    le16(local, 0);
    le16(local, 0x21);
    le32(local, (uint32_t)crc);
    le32(local, size);
    le32(local, size);
    le16(local, (uint32_t)e.fname.size());
    le16(local, 0);
    local += e.fname;
    local += e.npyHeader;
    ok = put(local.data(), local.size());
    for (uint64_t k = 0; ok && k < e.dataBytes; k += chunk)
      ok = put(data + k, (size_t)std::min<uint64_t>(chunk, e.dataBytes - k));
    le32(central, 0x02014b50);
    le16(central, 20);
    le16(central, 20);
    le16(central, 0);
    le16(central, 0);
    le16(central, 0);
    le16(central, 0x21);
    le32(central, (uint32_t)crc);
    le32(central, size);
    le32(central, size);
    le16(central, (uint32_t)e.fname.size());
    le16(central, 0);
    le16(central, 0);
    le16(central, 0);
    le16(central, 0);
    le32(central, 0);
    le32(central, (uint32_t)at);
    central += e.fname;
    at += 30 + e.fname.size() + size;
  }
  std::string end;
  le32(end, 0x06054b50);
  le16(end, 0);
  le16(end, 0);
  le16(end, (uint32_t)n);
  le16(end, (uint32_t)n);
  le32(end, (uint32_t)central.size());
  le32(end, (uint32_t)at);
  le16(end, 0);
  ok = ok && put(central.data(), central.size()) && put(end.data(), end.size());
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path) != 0) {
    std::remove(tmp.c_str());
    return fail(AMPRT_ERR_IO, "'%s': write failed", path);
  }
  return AMPRT_OK;
}
