//===- ORTCheckpoint.cpp - onnxruntime-training checkpoint files ---------===//
//
// FlatBuffers layout, as far as this reader needs it: the buffer starts with
// the root table's u32 offset and the 4-byte file identifier; a table starts
// with an i32 offset back to its vtable (u16 vtable size, u16 table size, one
// u16 field offset per field, 0 when absent); strings and vectors are
// reached through u32 offsets relative to where the offset is stored and
// start with a u32 length. All little-endian.
//
//===----------------------------------------------------------------------===//

#include "ORTCheckpoint.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstring>

using namespace onnx_import;

namespace {

/// Size of one element of an ONNX data type the runtime can hold; 0 otherwise.
size_t ortElementSize(int32_t dt) {
  switch (dt) {
  case 1:
  case 6:
  case 12:
    return 4; // FLOAT, INT32, UINT32
  case 2:
  case 3:
  case 9:
    return 1; // UINT8, INT8, BOOL
  case 4:
  case 5:
  case 10:
  case 16:
    return 2; // UINT16, INT16, FLOAT16, BFLOAT16
  case 7:
  case 11:
  case 13:
    return 8; // INT64, DOUBLE, UINT64
  default:
    return 0;
  }
}

struct Reader {
  llvm::StringRef buf;
  std::string what;
  std::string err;
  /// Bytes the strings and tensors read so far copied out of the file. A
  /// FlatBuffer may point many tables at the same bytes; a checkpoint ORT
  /// wrote never does, so copying more than the file holds is a corrupt (or
  /// hostile: a 1 MB file naming one tensor a million times) checkpoint,
  /// refused before the copy.
  uint64_t copied = 0;

  bool take(uint64_t n, const char *name) {
    if (n > buf.size() || copied > buf.size() - n)
      return fail(llvm::Twine(name) +
                  ": the strings and tensors would copy more bytes than "
                  "the " +
                  llvm::Twine(buf.size()) +
                  "-byte file holds (tables share data: "
                  "corrupt checkpoint)");
    copied += n;
    return true;
  }

  bool fail(const llvm::Twine &msg) {
    if (err.empty())
      err = (what + ": " + msg).str();
    return false;
  }
  bool in(uint64_t pos, uint64_t len) const { return pos <= buf.size() && len <= buf.size() - pos; }
  template <typename T> bool read(uint64_t pos, T &out, const char *field) {
    if (!in(pos, sizeof(T)))
      return fail(llvm::Twine("truncated or corrupt (") + field + " at byte " + llvm::Twine(pos) +
                  " lies outside the " + llvm::Twine(buf.size()) + "-byte file)");
    std::memcpy(&out, buf.data() + pos, sizeof(T));
    return true;
  }

  /// The position of field `i` of the table at `t`, or 0 when absent.
  bool field(uint64_t t, unsigned i, uint64_t &pos, const char *name) {
    int32_t soff;
    if (!read(t, soff, name))
      return false;
    int64_t vt = (int64_t)t - soff;
    uint16_t vsize, tsize;
    if (vt < 0 || !read((uint64_t)vt, vsize, name) || !read((uint64_t)vt + 2, tsize, name))
      return vt >= 0 ? false : fail(llvm::Twine("corrupt vtable offset for ") + name);
    if (vsize < 4 || vsize % 2)
      return fail(llvm::Twine("corrupt vtable (size ") + llvm::Twine(vsize) + ") for " + name);
    pos = 0;
    if (4 + 2 * i + 2 > vsize)
      return true;
    uint16_t off;
    if (!read((uint64_t)vt + 4 + 2 * i, off, name))
      return false;
    if (off == 0)
      return true;
    if (off >= tsize || !in(t, tsize))
      return fail(llvm::Twine("corrupt field offset for ") + name);
    pos = t + off;
    return true;
  }
  /// Follows the u32 offset stored at `pos`.
  bool deref(uint64_t pos, uint64_t &target, const char *name) {
    uint32_t off;
    if (!read(pos, off, name))
      return false;
    target = pos + off;
    if (off == 0 || target >= buf.size())
      return fail(llvm::Twine("corrupt offset for ") + name);
    return true;
  }
  /// A vector field: its element count and the position of element 0.
  bool vec(uint64_t t, unsigned i, uint64_t elemSize, uint32_t &count, uint64_t &first,
           const char *name) {
    uint64_t pos;
    count = 0;
    if (!field(t, i, pos, name))
      return false;
    if (!pos)
      return true;
    uint64_t v;
    if (!deref(pos, v, name) || !read(v, count, name))
      return false;
    first = v + 4;
    if (!in(first, (uint64_t)count * elemSize))
      return fail(llvm::Twine(name) + " (" + llvm::Twine(count) +
                  " elements) runs past the end of the file");
    return true;
  }
  bool str(uint64_t t, unsigned i, std::string &out, const char *name) {
    uint32_t n;
    uint64_t first;
    if (!vec(t, i, 1, n, first, name) || !take(n, name))
      return false;
    out.assign(buf.data() + (n ? first : 0), n);
    return true;
  }
  bool table(uint64_t t, unsigned i, uint64_t &out, const char *name) {
    uint64_t pos;
    if (!field(t, i, pos, name))
      return false;
    out = 0;
    return !pos || deref(pos, out, name);
  }
  /// Element k of a vector of tables.
  bool element(uint64_t first, uint32_t k, uint64_t &out, const char *name) {
    return deref(first + 4ull * k, out, name);
  }
  template <typename T> bool scalar(uint64_t t, unsigned i, T &out, T def, const char *name) {
    uint64_t pos;
    out = def;
    if (!field(t, i, pos, name))
      return false;
    return !pos || read(pos, out, name);
  }

  bool tensor(uint64_t t, ORTTensor &out) {
    if (!str(t, 0, out.name, "Tensor.name"))
      return false;
    std::string who = "tensor '" + out.name + "'";
    uint32_t nd;
    uint64_t dims;
    if (!vec(t, 2, 8, nd, dims, "Tensor.dims"))
      return false;
    int64_t count = 1;
    for (uint32_t k = 0; k < nd; ++k) {
      int64_t d;
      std::memcpy(&d, buf.data() + dims + 8ull * k, 8);
      if (d < 0 || (d > 0 && count > (int64_t(1) << 40) / d))
        return fail(who + ": bad dimension " + llvm::Twine(d));
      out.dims.push_back(d);
      count *= d;
    }
    if (!scalar<int32_t>(t, 3, out.dataType, 0, "Tensor.data_type"))
      return false;
    size_t es = ortElementSize(out.dataType);
    if (!es)
      return fail(who + ": unsupported data type " + llvm::Twine(out.dataType));
    int64_t ext;
    if (!scalar<int64_t>(t, 6, ext, -1, "Tensor.external_data_offset"))
      return false;
    if (ext != -1)
      return fail(who + ": its data is in an external file, which is not supported");
    uint32_t nb;
    uint64_t raw;
    if (!vec(t, 4, 1, nb, raw, "Tensor.raw_data"))
      return false;
    if ((uint64_t)nb != (uint64_t)count * es)
      return fail(who + ": holds " + llvm::Twine(nb) + " bytes, its shape and type need " +
                  llvm::Twine((uint64_t)count * es));
    if (!take(nb, "Tensor.raw_data"))
      return false;
    out.raw.assign(buf.data() + (nb ? raw : 0), nb);
    return true;
  }
  bool tensors(uint64_t t, unsigned i, std::vector<ORTTensor> &out, const char *name) {
    uint32_t n;
    uint64_t first;
    if (!vec(t, i, 4, n, first, name))
      return false;
    for (uint32_t k = 0; k < n; ++k) {
      uint64_t e;
      out.emplace_back();
      if (!element(first, k, e, name) || !tensor(e, out.back()))
        return false;
    }
    return true;
  }
};

} // namespace

llvm::Expected<ORTCheckpoint> onnx_import::parseORTCheckpoint(llvm::StringRef bytes,
                                                              llvm::StringRef what) {
  Reader r{bytes, what.str(), {}};
  ORTCheckpoint ck;
  auto error = [&]() { return llvm::createStringError(llvm::inconvertibleErrorCode(), r.err); };
  if (bytes.size() < 8 || bytes.substr(4, 4) != "ODTC") {
    r.fail("not an onnxruntime-training checkpoint (no 'ODTC' file identifier)");
    return error();
  }
  uint64_t root;
  if (!r.deref(0, root, "the root table"))
    return error();
  uint64_t ms = 0;
  if (!r.scalar<int32_t>(root, 0, ck.version, 0, "Checkpoint.version") ||
      !r.table(root, 1, ms, "Checkpoint.module_state"))
    return error();
  if (!ms) {
    r.fail("the checkpoint has no module state (parameters)");
    return error();
  }
  uint8_t nominal = 0, external = 0;
  if (!r.scalar<uint8_t>(ms, 2, nominal, 0, "ModuleState.is_nominal_state") ||
      !r.scalar<uint8_t>(ms, 3, external, 0, "ModuleState.has_external_data"))
    return error();
  if (nominal) {
    r.fail("a nominal checkpoint (parameter names without data) cannot be trained from");
    return error();
  }
  if (external) {
    r.fail("the parameters are in an external data file, which is not supported");
    return error();
  }
  if (!r.tensors(ms, 0, ck.trainable, "ModuleState.requires_grad_params") ||
      !r.tensors(ms, 1, ck.frozen, "ModuleState.frozen_params"))
    return error();
  uint32_t ng;
  uint64_t groups;
  if (!r.vec(root, 2, 4, ng, groups, "Checkpoint.optimizer_groups"))
    return error();
  for (uint32_t k = 0; k < ng; ++k) {
    uint64_t g;
    std::string name;
    if (!r.element(groups, k, g, "OptimizerGroup") ||
        !r.str(g, 0, name, "OptimizerGroup.group_name"))
      return error();
    if (ng > 1 || name != "group0") {
      r.fail("optimizer group '" + name + "': only one group, 'group0', is supported");
      return error();
    }
    ck.hasOptimizerState = true;
    uint32_t np;
    uint64_t states;
    if (!r.scalar<int64_t>(g, 1, ck.step, 0, "OptimizerGroup.step") ||
        !r.scalar<float>(g, 2, ck.initialLearningRate, 0.0f,
                         "OptimizerGroup.initial_learning_rate") ||
        !r.vec(g, 3, 4, np, states, "OptimizerGroup.optimizer_states"))
      return error();
    for (uint32_t j = 0; j < np; ++j) {
      uint64_t s;
      std::string param;
      std::vector<ORTTensor> ms2;
      if (!r.element(states, j, s, "ParameterOptimizerState") ||
          !r.str(s, 0, param, "ParameterOptimizerState.param_name") ||
          !r.tensors(s, 1, ms2, "ParameterOptimizerState.momentums"))
        return error();
      for (auto &t : ms2)
        ck.moments[param][t.name] = std::move(t);
    }
  }
  return ck;
}

llvm::Expected<ORTCheckpoint> onnx_import::readORTCheckpoint(llvm::StringRef path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "%s: cannot read the checkpoint: %s", path.str().c_str(),
                                   buf.getError().message().c_str());
  return parseORTCheckpoint((*buf)->getBuffer(), path);
}
