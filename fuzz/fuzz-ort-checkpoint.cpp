//===- fuzz-ort-checkpoint.cpp - libFuzzer: ORT training checkpoints ------===//
//
// onnxruntime-training's checkpoint (a FlatBuffer read without the library):
// every offset, count and copy comes from the file.
//
//===----------------------------------------------------------------------===//

#include "ORTCheckpoint.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto ck = onnx_import::parseORTCheckpoint(
      llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.ckpt");
  if (!ck) {
    llvm::consumeError(ck.takeError());
    return 0;
  }
  // Touch what was read: the sizes must be what the bytes hold.
  size_t sum = 0;
  for (const auto &t : ck->trainable)
    sum += t.raw.size() + t.name.size();
  for (const auto &t : ck->frozen)
    sum += t.raw.size() + t.name.size();
  return sum > size ? __builtin_trap(), 0 : 0;
}
