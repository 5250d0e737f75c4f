//===- ONNXModel.h - reading and checking ONNX files ------------*- C++ -*-===//
//
// The protobuf side of the importer, with no MLIR in it: parse a ModelProto
// from a file, check the structure a hostile file could break (sizes,
// external data paths, names), and decode TensorProtos into host tensors.
// Every failure is a message naming the file and the culprit.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_LIB_TARGET_ONNX_ONNXMODEL_H
#define AMP_LIB_TARGET_ONNX_ONNXMODEL_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <onnx/onnx_pb.h> // the ONNX-ML protos (ONNX_ML is set by CMake)

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace onnx_import {

/// A tensor's bytes in ONNX's little-endian raw layout (bool: one byte per
/// element; fp16 / bf16: their 16-bit patterns).
struct HostTensor {
  int32_t dtype = 0; // onnx::TensorProto::DataType
  std::vector<int64_t> shape;
  std::shared_ptr<std::string> bytes;

  int64_t numElements() const;
  const char *data() const { return bytes ? bytes->data() : nullptr; }
  /// Values of an integer tensor (any width, bool included) as int64.
  std::vector<int64_t> toInt64() const;
  /// Values of a float tensor (f32, f16, bf16, f64) as double.
  std::vector<double> toDouble() const;
};

/// Size in bytes of one element of an ONNX data type; 0 when the importer
/// does not handle the type (string, complex, float8, ...).
size_t elementSize(int32_t dtype);

/// The ONNX name of a data type ("FLOAT", "INT64", ...).
const char *dataTypeName(int32_t dtype);

/// Parses `path` into `model`. Errors: unreadable, empty, not a ModelProto
/// (malformed or truncated protobuf), no graph, IR version out of range.
llvm::Error loadModel(llvm::StringRef path, onnx::ModelProto &model);
/// The same from bytes in memory; the buffer's identifier names it in errors.
llvm::Error parseModel(llvm::MemoryBufferRef buf, onnx::ModelProto &model);

/// Decodes a TensorProto (typed fields, raw_data or external data resolved
/// in `modelDir`). May move raw_data out of `t` to avoid a copy.
/// `what` names the tensor in messages.
llvm::Expected<HostTensor> decodeTensor(onnx::TensorProto &t, llvm::StringRef modelDir,
                                        llvm::StringRef what);

/// Builds a HostTensor of int64 values.
HostTensor makeInt64(std::vector<int64_t> shape, const std::vector<int64_t> &values);

} // namespace onnx_import

#endif // AMP_LIB_TARGET_ONNX_ONNXMODEL_H
