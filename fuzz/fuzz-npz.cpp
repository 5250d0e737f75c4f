//===- fuzz-npz.cpp - libFuzzer: the .npz / .npy reader -------------------===//
//
// amprt_npz_open on one input (a zip of .npy members, stored or deflated,
// ZIP64 sizes, or a bare .npy), then every array it lists is read through.
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt.h"
#include "memfile.h"

#include <cstdint>
#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MemFile f(data, size, ".npz");
  amprt_npz *z = nullptr;
  if (amprt_npz_open(f.c_str(), &z) != AMPRT_OK)
    return 0;
  volatile uint8_t sink = 0;
  for (int32_t i = 0; i < amprt_npz_count(z); ++i) {
    const char *name = amprt_npz_name(z, i);
    const amprt_array *a = amprt_npz_get(z, name);
    if (!a)
      __builtin_trap(); // a listed name must be found
    int64_t n = 1;
    for (int32_t d = 0; d < a->rank; ++d)
      n *= a->shape[d];
    size_t bytes = (size_t)n * amprt_dtype_size(a->dtype);
    const uint8_t *p = static_cast<const uint8_t *>(a->data);
    for (size_t k = 0; k < bytes; k += 4096)
      sink ^= p[k];
    if (bytes)
      sink ^= p[bytes - 1];
  }
  amprt_npz_close(z);
  return 0;
}
