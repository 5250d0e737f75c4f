//===- fuzz-safetensors.cpp - libFuzzer: the safetensors reader -----------===//
//
// amprt_checkpoint_open on one input, then every tensor it lists is read
// into a buffer of the size its entry declares, and the metadata looked up.
//
//===----------------------------------------------------------------------===//

#include "amprt/amprt.h"
#include "memfile.h"

#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MemFile f(data, size, ".safetensors");
  amprt_checkpoint *ck = nullptr;
  if (amprt_checkpoint_open(f.c_str(), &ck) != AMPRT_OK)
    return 0;
  (void)amprt_checkpoint_metadata(ck, "amp.signature");
  for (int32_t i = 0; i < amprt_checkpoint_count(ck); ++i) {
    const char *name = amprt_checkpoint_name(ck, i);
    amprt_dtype dtype;
    int32_t rank;
    int64_t shape[AMPRT_MAX_RANK];
    if (amprt_checkpoint_info(ck, name, &dtype, &rank, shape) != AMPRT_OK)
      __builtin_trap(); // a listed name must be found
    // The entry's bytes lie in the file: never more than it holds (no
    // wrapped numel x element size).
    unsigned __int128 bytes = amprt_dtype_size(dtype);
    for (int32_t d = 0; d < rank; ++d)
      if (shape[d] == 0)
        bytes = 0;
    for (int32_t d = 0; d < rank && bytes; ++d) {
      bytes *= (uint64_t)shape[d];
      if (bytes > size)
        __builtin_trap();
    }
    std::vector<char> buf((size_t)bytes + 1);
    amprt_tensor t = amprt_tensor_make(buf.data(), dtype, rank, shape);
    (void)amprt_checkpoint_read(ck, name, &t);
  }
  amprt_checkpoint_close(ck);
  return 0;
}
