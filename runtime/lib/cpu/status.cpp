//===- status.cpp - errors and element type facts ------------------------===//

#include "internal.h"

#include <cstdarg>
#include <cstdio>

namespace {
thread_local char lastError[1024] = "";
} // namespace

amprt_status amprt::fail(amprt_status status, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(lastError, sizeof(lastError), fmt, args);
  va_end(args);
  return status;
}

extern "C" const char *amprt_last_error(void) { return lastError; }

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
