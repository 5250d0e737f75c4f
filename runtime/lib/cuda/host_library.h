//===- host_library.h - what the host cuBLASLt and cuDNN share --------------===//
//
// lt_host.cu and dnn_host.cu implement, on the host, the library calls the
// CUDA backend makes, for the emulated context. Both keep the reason of the
// last refused call per thread, hand out their own structs as the
// libraries' opaque handles (each with a magic word, so a stray or
// destroyed handle is refused), and know the context's device memory.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CUDA_HOST_LIBRARY_H
#define AMPRT_CUDA_HOST_LIBRARY_H

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace amprt::cuda::host {

/// Why the last refused call on this thread was refused.
inline std::string &lastError() {
  thread_local std::string e;
  return e;
}

/// Records the reason and returns the status.
template <class Status> Status refuse(Status st, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  lastError() = buf;
  return st;
}

/// The object behind an opaque handle, or nullptr when it is not one of
/// ours (or was destroyed).
template <class T, class O> T *as(O o, uint64_t magic) {
  T *t = reinterpret_cast<T *>(const_cast<void *>(static_cast<const void *>(o)));
  return t && t->magic == magic ? t : nullptr;
}

/// Destroys the object behind a handle; `bad` when it is not one.
template <class T, class H, class Status>
Status destroyOf(H h, uint64_t magic, Status ok, Status bad, const char *what) {
  T *t = as<T>(h, magic);
  if (!t)
    return refuse(bad, "%s: not its handle", what);
  t->magic = 0;
  delete t;
  return ok;
}

/// A library handle: the context's device memory and the options.
template <class Options> struct Handle {
  uint64_t magic;
  std::function<bool(const void *, size_t)> inDevice;
  Options options;
  explicit Handle(uint64_t m) : magic(m) {}
};

} // namespace amprt::cuda::host

#endif // AMPRT_CUDA_HOST_LIBRARY_H
