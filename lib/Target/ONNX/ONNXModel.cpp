//===- ONNXModel.cpp - reading and checking ONNX files -------------------===//

#include "ONNXModel.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/io/coded_stream.h>

#include <climits>
#include <cmath>
#include <cstring>

using namespace onnx_import;
using llvm::createStringError;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

namespace {

/// Tensors larger than this are refused as hostile (a 16 GiB tensor is not a
/// model this machine class trains).
constexpr uint64_t kMaxTensorBytes = uint64_t(16) << 30;

Error fail(const llvm::Twine &msg) {
  return createStringError(std::make_error_code(std::errc::invalid_argument), msg);
}

template <typename Src, typename Dst>
void packAs(const google::protobuf::RepeatedField<Src> &in, std::string &out) {
  out.resize(in.size() * sizeof(Dst));
  char *p = out.data();
  for (Src v : in) {
    Dst d = static_cast<Dst>(v);
    std::memcpy(p, &d, sizeof(Dst));
    p += sizeof(Dst);
  }
}

/// Reads `length` bytes at `offset` of the external file `location`, which
/// must stay inside `modelDir`.
Expected<std::string> readExternal(StringRef modelDir, StringRef location, uint64_t offset,
                                   int64_t length, uint64_t expected, StringRef what) {
  if (location.empty())
    return fail("tensor '" + what + "': external data without a location");
  if (llvm::sys::path::is_absolute(location) || location.starts_with("/") ||
      location.starts_with("\\"))
    return fail("tensor '" + what + "': external data location '" + location +
                "' is an absolute path; only paths inside the model's folder "
                "are allowed");
  for (auto it = llvm::sys::path::begin(location), end = llvm::sys::path::end(location); it != end;
       ++it)
    if (*it == "..")
      return fail("tensor '" + what + "': external data location '" + location +
                  "' contains '..'; only paths inside the "
                  "model's folder are allowed");
  llvm::SmallString<256> dir(modelDir.empty() ? "." : modelDir);
  llvm::SmallString<256> realDir, joined(dir), realFile;
  llvm::sys::path::append(joined, location);
  if (llvm::sys::fs::real_path(dir, realDir))
    return fail("tensor '" + what + "': cannot resolve the model folder '" + dir + "'");
  if (std::error_code ec = llvm::sys::fs::real_path(joined, realFile))
    return fail("tensor '" + what + "': external data file '" + joined +
                "' cannot be opened: " + ec.message());
  // A symbolic link may point out of the folder: compare resolved paths.
  llvm::SmallString<256> prefix(realDir);
  prefix.push_back('/');
  if (!StringRef(realFile).starts_with(prefix))
    return fail("tensor '" + what + "': external data file '" + location + "' resolves to '" +
                realFile + "', outside the model's folder '" + realDir + "'");
  auto buf = llvm::MemoryBuffer::getFile(realFile, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return fail("tensor '" + what + "': external data file '" + location +
                "' cannot be read: " + buf.getError().message());
  uint64_t size = (*buf)->getBufferSize();
  if (offset > size)
    return fail("tensor '" + what + "': external data offset " + llvm::Twine(offset) +
                " is past the end of '" + location + "' (" + llvm::Twine(size) + " bytes)");
  uint64_t avail = size - offset;
  uint64_t n = length >= 0 ? uint64_t(length) : avail;
  if (n > avail)
    return fail("tensor '" + what + "': external data file '" + location +
                "' is too short: needs " + llvm::Twine(n) + " bytes at offset " +
                llvm::Twine(offset) + ", has " + llvm::Twine(avail));
  if (n != expected)
    return fail("tensor '" + what + "': external data holds " + llvm::Twine(n) +
                " bytes, the tensor's shape and type need " + llvm::Twine(expected));
  return std::string((*buf)->getBufferStart() + offset, n);
}

} // namespace

size_t onnx_import::elementSize(int32_t t) {
  switch (t) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::BOOL:
    return 1;
  case onnx::TensorProto::UINT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
    return 2;
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
  case onnx::TensorProto::DOUBLE:
    return 8;
  default:
    return 0;
  }
}

const char *onnx_import::dataTypeName(int32_t t) {
  switch (t) {
  case 1:
    return "FLOAT";
  case 2:
    return "UINT8";
  case 3:
    return "INT8";
  case 4:
    return "UINT16";
  case 5:
    return "INT16";
  case 6:
    return "INT32";
  case 7:
    return "INT64";
  case 8:
    return "STRING";
  case 9:
    return "BOOL";
  case 10:
    return "FLOAT16";
  case 11:
    return "DOUBLE";
  case 12:
    return "UINT32";
  case 13:
    return "UINT64";
  case 14:
    return "COMPLEX64";
  case 15:
    return "COMPLEX128";
  case 16:
    return "BFLOAT16";
  case 17:
    return "FLOAT8E4M3FN";
  case 18:
    return "FLOAT8E4M3FNUZ";
  case 19:
    return "FLOAT8E5M2";
  case 20:
    return "FLOAT8E5M2FNUZ";
  case 21:
    return "UINT4";
  case 22:
    return "INT4";
  default:
    return "UNDEFINED";
  }
}

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::vector<int64_t> HostTensor::toInt64() const {
  std::vector<int64_t> out(numElements());
  const char *p = data();
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
    case onnx::TensorProto::INT64: {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      out[i] = v;
      break;
    }
    case onnx::TensorProto::UINT64: {
      uint64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      out[i] = (int64_t)v;
      break;
    }
    case onnx::TensorProto::INT32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = v;
      break;
    }
    case onnx::TensorProto::UINT32: {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = v;
      break;
    }
    case onnx::TensorProto::INT16: {
      int16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
      break;
    }
    case onnx::TensorProto::UINT16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
      break;
    }
    case onnx::TensorProto::INT8:
      out[i] = (int8_t)p[i];
      break;
    case onnx::TensorProto::UINT8:
      out[i] = (uint8_t)p[i];
      break;
    case onnx::TensorProto::BOOL:
      out[i] = p[i] != 0;
      break;
    default:
      out[i] = 0;
      break;
    }
  }
  return out;
}

std::vector<double> HostTensor::toDouble() const {
  std::vector<double> out(numElements());
  const char *p = data();
  std::vector<int64_t> ints;
  bool isFloat = dtype == onnx::TensorProto::FLOAT || dtype == onnx::TensorProto::DOUBLE ||
                 dtype == onnx::TensorProto::FLOAT16 || dtype == onnx::TensorProto::BFLOAT16;
  if (!isFloat)
    ints = toInt64(); // once, not per element
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
    case onnx::TensorProto::FLOAT: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = v;
      break;
    }
    case onnx::TensorProto::DOUBLE: {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      out[i] = v;
      break;
    }
    case onnx::TensorProto::FLOAT16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      int e = (h >> 10) & 31, m = h & 1023;
      double mag = e == 0    ? std::ldexp((double)m, -24)
                   : e == 31 ? (m ? NAN : INFINITY)
                             : std::ldexp(1.0 + m / 1024.0, e - 15);
      out[i] = (h & 0x8000) ? -mag : mag;
      break;
    }
    case onnx::TensorProto::BFLOAT16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      uint32_t w = (uint32_t)h << 16;
      float v;
      std::memcpy(&v, &w, 4);
      out[i] = v;
      break;
    }
    default:
      out[i] = (double)ints[i];
      break;
    }
  }
  return out;
}

HostTensor onnx_import::makeInt64(std::vector<int64_t> shape, const std::vector<int64_t> &values) {
  HostTensor t;
  t.dtype = onnx::TensorProto::INT64;
  t.shape = std::move(shape);
  t.bytes = std::make_shared<std::string>(values.size() * 8, '\0');
  if (!values.empty()) // (an empty vector's data() may be null)
    std::memcpy(t.bytes->data(), values.data(), values.size() * 8);
  return t;
}

Error onnx_import::loadModel(StringRef path, onnx::ModelProto &model) {
  auto buf = llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/false,
                                                /*RequiresNullTerminator=*/false);
  if (!buf)
    return fail(path + ": cannot read the file: " + buf.getError().message());
  return parseModel((*buf)->getMemBufferRef(), model);
}

Error onnx_import::parseModel(llvm::MemoryBufferRef buf, onnx::ModelProto &model) {
  StringRef path = buf.getBufferIdentifier();
  size_t size = buf.getBufferSize();
  if (size == 0)
    return fail(path + ": the file is empty, not an ONNX model");
  if (size > size_t(INT_MAX))
    return fail(path + ": " + llvm::Twine(size) +
                " bytes is over protobuf's 2 GiB limit for one message; "
                "store the weights as external data");
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t *>(buf.getBufferStart()),
                                            (int)size);
  in.SetTotalBytesLimit(INT_MAX);
  in.SetRecursionLimit(256);
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    return fail(path +
                ": not a valid ONNX model: the protobuf is malformed "
                "or truncated (" +
                llvm::Twine(size) + " bytes)");
  if (!model.has_graph())
    return fail(path + ": not an ONNX model: it has no graph (is it a "
                       "different protobuf, or a truncated file?)");
  int64_t ir = model.ir_version();
  if (ir < 3 || ir > 12)
    return fail(path + ": IR version " + llvm::Twine(ir) +
                " is not supported (supported: 3 to 12)");
  return Error::success();
}

Expected<HostTensor> onnx_import::decodeTensor(onnx::TensorProto &t, StringRef modelDir,
                                               StringRef what) {
  HostTensor h;
  h.dtype = t.data_type();
  size_t es = elementSize(h.dtype);
  if (es == 0)
    return fail("tensor '" + what + "' has data type " + dataTypeName(h.dtype) + " (" +
                llvm::Twine(h.dtype) + "), which the importer does not support");
  uint64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return fail("tensor '" + what + "' has a negative dimension " + llvm::Twine(d));
    if (d != 0 && n > kMaxTensorBytes / uint64_t(d))
      return fail("tensor '" + what + "' is too large");
    n *= uint64_t(d);
    h.shape.push_back(d);
  }
  if (n * es > kMaxTensorBytes)
    return fail("tensor '" + what + "' is too large (" + llvm::Twine(n * es) + " bytes)");
  uint64_t want = n * es;
  auto bytes = std::make_shared<std::string>();
  auto countError = [&](StringRef field, size_t have) {
    return fail("tensor '" + what + "' holds " + llvm::Twine(have) + " values in " + field +
                " but its shape needs " + llvm::Twine(n));
  };

  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    uint64_t offset = 0;
    int64_t length = -1;
    for (const auto &kv : t.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset" || kv.key() == "length") {
        char *end = nullptr;
        errno = 0;
        unsigned long long v = std::strtoull(kv.value().c_str(), &end, 10);
        if (kv.value().empty() || *end || errno || kv.value()[0] == '-')
          return fail("tensor '" + what + "': external data " + kv.key() + " '" + kv.value() +
                      "' is not a number");
        if (kv.key() == "offset")
          offset = v;
        else
          length = v > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v);
      }
    }
    auto data = readExternal(modelDir, location, offset, length, want, what);
    if (!data)
      return data.takeError();
    *bytes = std::move(*data);
  } else if (t.has_raw_data()) {
    if (t.raw_data().size() != want)
      return fail("tensor '" + what + "' has " + llvm::Twine(t.raw_data().size()) +
                  " bytes of raw_data but its shape and type need " + llvm::Twine(want));
    // Take the bytes over instead of copying them (weights can be large).
    std::unique_ptr<std::string> raw(t.release_raw_data());
    bytes = std::shared_ptr<std::string>(std::move(raw));
  } else {
    switch (h.dtype) {
    case onnx::TensorProto::FLOAT:
      if ((uint64_t)t.float_data_size() != n)
        return countError("float_data", t.float_data_size());
      packAs<float, float>(t.float_data(), *bytes);
      break;
    case onnx::TensorProto::DOUBLE:
      if ((uint64_t)t.double_data_size() != n)
        return countError("double_data", t.double_data_size());
      packAs<double, double>(t.double_data(), *bytes);
      break;
    case onnx::TensorProto::INT64:
      if ((uint64_t)t.int64_data_size() != n)
        return countError("int64_data", t.int64_data_size());
      packAs<int64_t, int64_t>(t.int64_data(), *bytes);
      break;
    case onnx::TensorProto::UINT32:
    case onnx::TensorProto::UINT64:
      if ((uint64_t)t.uint64_data_size() != n)
        return countError("uint64_data", t.uint64_data_size());
      if (h.dtype == onnx::TensorProto::UINT32)
        packAs<uint64_t, uint32_t>(t.uint64_data(), *bytes);
      else
        packAs<uint64_t, uint64_t>(t.uint64_data(), *bytes);
      break;
    default: // int32_data carries every type of 32 bits or less
      if ((uint64_t)t.int32_data_size() != n)
        return countError("int32_data", t.int32_data_size());
      if (es == 4)
        packAs<int32_t, int32_t>(t.int32_data(), *bytes);
      else if (es == 2)
        packAs<int32_t, uint16_t>(t.int32_data(), *bytes);
      else if (h.dtype == onnx::TensorProto::BOOL) {
        bytes->resize(n);
        for (uint64_t i = 0; i < n; ++i)
          (*bytes)[i] = t.int32_data(i) != 0;
      } else
        packAs<int32_t, uint8_t>(t.int32_data(), *bytes);
      break;
    }
  }
  h.bytes = std::move(bytes);
  return h;
}
