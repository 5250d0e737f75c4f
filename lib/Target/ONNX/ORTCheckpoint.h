//===- ORTCheckpoint.h - onnxruntime-training checkpoint files -*- C++ -*-===//
//
// The `checkpoint` file of onnxruntime-training's artifacts (a FlatBuffer,
// file identifier "ODTC", schema ort_training_checkpoint.fbs): the trainable
// and frozen parameters and, when saved with the optimizer state, the step,
// learning rate and moments. Read without the FlatBuffers library; every
// offset is bounds-checked, so a corrupt or hostile file is an error naming
// what is wrong, never a crash.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_LIB_TARGET_ONNX_ORTCHECKPOINT_H
#define AMP_LIB_TARGET_ONNX_ORTCHECKPOINT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace onnx_import {

struct ORTTensor {
  std::string name;
  std::vector<int64_t> dims;
  int32_t dataType = 0; // ONNX TensorProto data type numbering
  std::string raw;      // little-endian element bytes
};

struct ORTCheckpoint {
  int32_t version = 0;
  std::vector<ORTTensor> trainable, frozen;
  /// Optimizer state (group0), when the checkpoint holds it.
  bool hasOptimizerState = false;
  int64_t step = 0;
  float initialLearningRate = 0;
  /// parameter name -> moment name ("momentum0", "momentum1") -> tensor.
  std::map<std::string, std::map<std::string, ORTTensor>> moments;
};

/// Parses a checkpoint held in memory; `what` names it in messages.
llvm::Expected<ORTCheckpoint> parseORTCheckpoint(llvm::StringRef bytes, llvm::StringRef what);

/// Reads and parses the file at `path`.
llvm::Expected<ORTCheckpoint> readORTCheckpoint(llvm::StringRef path);

} // namespace onnx_import

#endif // AMP_LIB_TARGET_ONNX_ORTCHECKPOINT_H
