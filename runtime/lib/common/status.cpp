//===- status.cpp - errors, element types, tensor descriptors ------------===//
#include "common/check.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace {
thread_local char lastError[2048] = "";
} // namespace

amprt_status amprt::fail(amprt_status status, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(lastError, sizeof(lastError), fmt, args);
  va_end(args);
  return status;
}

extern "C" const char *amprt_last_error(void) { return lastError; }

extern "C" const char *amprt_status_name(amprt_status s) {
  switch (s) {
  case AMPRT_OK:
    return "AMPRT_OK";
  case AMPRT_ERR_INVALID_ARGUMENT:
    return "AMPRT_ERR_INVALID_ARGUMENT";
  case AMPRT_ERR_UNSUPPORTED:
    return "AMPRT_ERR_UNSUPPORTED";
  case AMPRT_ERR_OUT_OF_MEMORY:
    return "AMPRT_ERR_OUT_OF_MEMORY";
  case AMPRT_ERR_IO:
    return "AMPRT_ERR_IO";
  case AMPRT_ERR_NO_DEVICE:
    return "AMPRT_ERR_NO_DEVICE";
  case AMPRT_ERR_NUMERIC:
    return "AMPRT_ERR_NUMERIC";
  case AMPRT_ERR_FORMAT:
    return "AMPRT_ERR_FORMAT";
  case AMPRT_ERR_DEVICE:
    return "AMPRT_ERR_DEVICE";
  case AMPRT_ERR_COMM:
    return "AMPRT_ERR_COMM";
  }
  return "AMPRT_ERR_UNKNOWN";
}

extern "C" const char *amprt_dtype_name(amprt_dtype t) {
  static const char *names[] = {"f32", "f16", "bf16", "i1",  "i8",  "i16",
                                "i32", "i64", "u8",   "u16", "u32", "u64"};
  if ((unsigned)t >= AMPRT_DTYPE_COUNT)
    return nullptr;
  return names[t];
}

extern "C" size_t amprt_dtype_size(amprt_dtype t) {
  static const size_t sizes[] = {4, 2, 2, 1, 1, 2, 4, 8, 1, 2, 4, 8};
  if ((unsigned)t >= AMPRT_DTYPE_COUNT)
    return 0;
  return sizes[t];
}

extern "C" uint64_t amprt_host_memory_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : UINT64_MAX;
}

namespace {
/// The first number in `path` (after `key` when given), or nothing.
bool readNumber(const char *path, const char *key, unsigned long long &v) {
  FILE *f = std::fopen(path, "r");
  if (!f)
    return false;
  char line[256];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f)) {
    const char *at = line;
    if (key) {
      size_t n = std::strlen(key);
      if (std::strncmp(line, key, n) != 0)
        continue;
      at += n;
    }
    char *end = nullptr;
    errno = 0;
    v = std::strtoull(at, &end, 10);
    found = end != at && errno == 0;
    if (!key)
      break;
  }
  std::fclose(f);
  return found;
}
} // namespace

extern "C" uint64_t amprt_host_available_bytes(void) {
  uint64_t avail = amprt_host_memory_bytes();
  unsigned long long kb = 0;
  if (readNumber("/proc/meminfo", "MemAvailable:", kb) && kb < UINT64_MAX / 1024)
    avail = std::min<uint64_t>(avail, uint64_t(kb) * 1024);
  unsigned long long limit = 0, used = 0; // memory.max is "max" without a limit
  if (readNumber("/sys/fs/cgroup/memory.max", nullptr, limit) &&
      readNumber("/sys/fs/cgroup/memory.current", nullptr, used))
    avail = std::min<uint64_t>(avail, limit > used ? uint64_t(limit - used) : 0);
  return avail;
}

void amprt::contiguousStrides(int32_t rank, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
}

extern "C" amprt_tensor amprt_tensor_make(void *data, amprt_dtype dtype, int32_t rank,
                                          const int64_t *shape) {
  amprt_tensor t;
  std::memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dtype;
  t.rank = rank < 0 ? 0 : rank > AMPRT_MAX_RANK ? AMPRT_MAX_RANK : rank;
  for (int32_t d = 0; d < t.rank; ++d)
    t.shape[d] = shape[d];
  amprt::contiguousStrides(t.rank, t.shape, t.strides);
  return t;
}

extern "C" int64_t amprt_tensor_numel(const amprt_tensor *t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->rank; ++d)
    n *= t->shape[d];
  return n;
}

extern "C" int amprt_tensor_is_contiguous(const amprt_tensor *t) {
  int64_t s = 1;
  for (int32_t d = t->rank - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && t->strides[d] != s)
      return 0;
    s *= t->shape[d];
  }
  return 1;
}

std::string amprt::shapeString(const amprt_tensor *t) {
  std::string s = "[";
  for (int32_t d = 0; d < t->rank; ++d) {
    if (d)
      s += ", ";
    s += std::to_string(t->shape[d]);
  }
  return s + "]";
}

amprt_status amprt::check(const amprt_tensor *t, const char *what) {
  if (!t)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: missing tensor", what);
  if (!isValid(t->dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: invalid element type %d", what, (int)t->dtype);
  if (t->rank < 0 || t->rank > AMPRT_MAX_RANK)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: rank %d outside 0..%d", what, t->rank,
                AMPRT_MAX_RANK);
  int64_t n = 1;
  for (int32_t d = 0; d < t->rank; ++d) {
    if (t->shape[d] < 0)
      return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: negative dimension %lld", what,
                  (long long)t->shape[d]);
    n *= t->shape[d];
  }
  if (n > 0 && !t->data)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: null data for %lld elements", what, (long long)n);
  return AMPRT_OK;
}

amprt_status amprt::broadcastStrides(const amprt_tensor *x, int32_t rank, const int64_t *shape,
                                     int64_t *strides, const char *what) {
  if (x->rank > rank)
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: shape %s has more dims than the output's %d", what,
                shapeString(x).c_str(), rank);
  int32_t lead = rank - x->rank;
  for (int32_t d = 0; d < rank; ++d) {
    if (d < lead) {
      strides[d] = 0;
      continue;
    }
    int64_t xs = x->shape[d - lead];
    if (xs == shape[d])
      strides[d] = shape[d] == 1 ? 0 : x->strides[d - lead];
    else if (xs == 1)
      strides[d] = 0;
    else
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "%s: shape %s does not broadcast to the output's dim %d "
                  "(%lld)",
                  what, shapeString(x).c_str(), d, (long long)shape[d]);
  }
  return AMPRT_OK;
}

amprt_status amprt::checkF32(const amprt_tensor *t, const char *what) {
  AMPRT_CHECK(check(t, what));
  if (t->dtype != AMPRT_F32 || !amprt_tensor_is_contiguous(t))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: must be a contiguous f32 tensor, got %s %s", what,
                amprt_dtype_name(t->dtype), shapeString(t).c_str());
  return AMPRT_OK;
}

amprt_status amprt::sameCount(const amprt_tensor *a, const amprt_tensor *b, const char *kernel,
                              const char *what) {
  if (amprt_tensor_numel(a) != amprt_tensor_numel(b))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: %s has %s, the parameter %s", kernel, what,
                shapeString(b).c_str(), shapeString(a).c_str());
  return AMPRT_OK;
}

bool amprt::sameShape(const amprt_tensor *a, const amprt_tensor *b) {
  if (a->rank != b->rank)
    return false;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != b->shape[d])
      return false;
  return true;
}

amprt_status amprt::checkFloat(const amprt_tensor *t, const char *what) {
  AMPRT_CHECK(check(t, what));
  if (!isFloat(t->dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: must be f32, f16 or bf16, got %s", what,
                amprt_dtype_name(t->dtype));
  return AMPRT_OK;
}

amprt_status amprt::checkChannel(const amprt_tensor *t, int64_t c, const char *what) {
  AMPRT_CHECK(checkFloat(t, what));
  if (amprt_tensor_numel(t) != c || !amprt_tensor_is_contiguous(t))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "%s: must be contiguous [%lld]", what, (long long)c);
  return AMPRT_OK;
}
