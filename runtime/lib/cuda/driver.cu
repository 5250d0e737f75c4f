//===- driver.cu - the CUDA libraries, device memory, views -----------------===//
//
// Errors, cuBLASLt / cuDNN opened at run time (dynamic_symbols.h), the
// context's memory (allocations tracked so that the executor tells its own
// memory from the program's host constants), scratch slots, and the views
// the kernels read tensors through.
//
//===----------------------------------------------------------------------===//

#include "backend.cuh"
#include "common/check.h"
#include "elementwise.cuh"
#include "host/context.h"

#include <dlfcn.h>

#include <mutex>

using namespace amprt;

namespace amprt::cuda {

amprt_status cudaFail(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return AMPRT_OK;
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
    return fail(AMPRT_ERR_NO_DEVICE, "%s: no CUDA device: %s", what, cudaGetErrorString(e));
  return fail(AMPRT_ERR_DEVICE, "%s: CUDA error: %s", what, cudaGetErrorString(e));
}

LtApi ltApi;
#ifdef AMPRT_HAVE_CUDNN
DnnApi dnnApi;
#endif

/// dlopen of a CUDA library: from the loader's path (LD_LIBRARY_PATH, the
/// program's run path), else the toolkit's folder; nullptr (and the first
/// reason in `why`) when none opens.
void *openCudaLibrary(const std::string &name, std::string &why) {
  for (std::string path : {name,
#ifdef AMPRT_CUDA_LIB_DIR
                           std::string(AMPRT_CUDA_LIB_DIR) + "/" + name,
#endif
                           "/usr/local/cuda/lib64/" + name}) {
    if (void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
      return h;
    const char *e = dlerror();
    if (why.empty() && e)
      why = e;
  }
  return nullptr;
}

/// Loads cuBLASLt once: the library of this toolkit's major version.
amprt_status loadCublasLt() {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (ltApi.loaded)
    return AMPRT_OK;
  std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR), why;
  void *h = openCudaLibrary(name, why);
  if (!h)
    return fail(AMPRT_ERR_DEVICE, "cuBLASLt (%s) not found: %s (set LD_LIBRARY_PATH)", name.c_str(),
                why.c_str());
#define AMP_LT_LOAD(f)                                                                             \
  if (!(ltApi.f = reinterpret_cast<decltype(ltApi.f)>(dlsym(h, #f))))                              \
    return fail(AMPRT_ERR_DEVICE, "%s has no %s", name.c_str(), #f);
  AMP_LT_FUNCTIONS(AMP_LT_LOAD)
#undef AMP_LT_LOAD
  ltApi.loaded = true;
  return AMPRT_OK;
}

#ifdef AMPRT_HAVE_CUDNN
/// Loads cuDNN once (libcudnn.so.<major> of the headers built against).
amprt_status loadCudnn() {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (dnnApi.loaded)
    return AMPRT_OK;
  std::string name = "libcudnn.so." + std::to_string(CUDNN_MAJOR), why;
  void *h = openCudaLibrary(name, why);
  if (!h)
    return fail(AMPRT_ERR_DEVICE, "cuDNN (%s) not found: %s (set LD_LIBRARY_PATH)", name.c_str(),
                why.c_str());
#define AMP_DNN_LOAD(f)                                                                            \
  if (!(dnnApi.f = reinterpret_cast<decltype(dnnApi.f)>(dlsym(h, #f))))                            \
    return fail(AMPRT_ERR_DEVICE, "%s has no %s", name.c_str(), #f);
  AMP_DNN_FUNCTIONS(AMP_DNN_LOAD)
#undef AMP_DNN_LOAD
  dnnApi.loaded = true;
  return AMPRT_OK;
}
#endif

bool emulated(const Dev &dev) { return dev.emulate; }
cudaStream_t streamOf(const Dev &dev) { return dev.stream; }

Dev &devOf(amprt_context *ctx) { return *static_cast<Dev *>(ctx->impl); }

amprt_status rawAlloc(Dev &d, size_t bytes, void **out) {
  size_t rounded = (bytes + 255) / 256 * 256;
  if (rounded == 0)
    rounded = 256;
  if (d.emulate) {
    *out = std::aligned_alloc(256, rounded);
    if (!*out)
      return fail(AMPRT_ERR_OUT_OF_MEMORY, "cuda (emulated): cannot allocate %zu bytes", bytes);
    d.emulatedMemory[static_cast<const char *>(*out)] = rounded;
    return AMPRT_OK;
  }
  cudaError_t e = cudaMalloc(out, rounded);
  if (e == cudaErrorMemoryAllocation)
    return fail(AMPRT_ERR_OUT_OF_MEMORY, "cuda: cannot allocate %zu bytes of device memory", bytes);
  CUDA_CHECK(e, "cudaMalloc");
  return AMPRT_OK;
}

void rawFree(Dev &d, void *p) {
  if (!p)
    return;
  if (d.emulate) {
    d.emulatedMemory.erase(static_cast<const char *>(p));
    std::free(p);
  } else {
    cudaFree(p);
  }
}

/// Whether [p, p + bytes) lies inside one of this (emulated) context's
/// allocations.
bool inDeviceMemory(const Dev &d, const void *p, size_t bytes) {
  const char *c = static_cast<const char *>(p);
  auto al = d.emulatedMemory.upper_bound(c);
  if (al == d.emulatedMemory.begin())
    return false;
  --al;
  return c >= al->first && c + bytes <= al->first + al->second;
}

/// cudaMemcpyAsync device to device, as CUDA defines it: the ranges must not
/// overlap (undefined there; emulated, refused, so that a caller relying on
/// the host's memmove is caught).
static amprt_status copyD2D(Dev &d, void *dst, const void *src, size_t bytes, const char *what) {
  const char *s = static_cast<const char *>(src), *t = static_cast<const char *>(dst);
  if (d.emulate) {
    if (t != s && t < s + bytes && s < t + bytes)
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "%s (emulated): a device-to-device cudaMemcpyAsync of %zu bytes between "
                  "overlapping ranges (undefined in CUDA)",
                  what, bytes);
    std::memcpy(dst, src, bytes);
    return AMPRT_OK;
  }
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d.stream), what);
  return AMPRT_OK;
}

/// A device-to-device copy with memmove's meaning: overlapping ranges go
/// through a scratch buffer (two copies that do not overlap).
static amprt_status moveD2D(Dev &d, void *dst, const void *src, size_t bytes, const char *what) {
  const char *s = static_cast<const char *>(src), *t = static_cast<const char *>(dst);
  if (!bytes || s == t)
    return AMPRT_OK;
  if (t < s + bytes && s < t + bytes) {
    void *tmp;
    AMPRT_CHECK(scratch(d, 7, bytes, &tmp));
    AMPRT_CHECK(copyD2D(d, tmp, src, bytes, what));
    return copyD2D(d, dst, tmp, bytes, what);
  }
  return copyD2D(d, dst, src, bytes, what);
}

amprt_status rawCopy(Dev &d, void *dst, const void *src, size_t bytes, int32_t kind) {
  if (!bytes)
    return AMPRT_OK;
  if (d.emulate) {
    // What CUDA refuses, refused here too (the host's memmove would hide
    // it): a copy kind whose device side is not device memory. Kind 3
    // (cudaMemcpyDefault) takes either side.
    const char *kinds[] = {"host-to-device", "device-to-host", "device-to-device"};
    bool dstDev = inDeviceMemory(d, dst, bytes), srcDev = inDeviceMemory(d, src, bytes);
    if ((kind == 0 && !dstDev) || (kind == 1 && !srcDev) || (kind == 2 && (!dstDev || !srcDev)))
      return fail(AMPRT_ERR_INVALID_ARGUMENT,
                  "cudaMemcpyAsync (emulated): a %s copy of %zu bytes whose %s is not this "
                  "context's device memory (CUDA: invalid argument)",
                  kinds[kind], bytes,
                  kind == 1 || (kind == 2 && !srcDev) ? "source" : "destination");
    if (kind == 2)
      return moveD2D(d, dst, src, bytes, "amprt_device_copy");
    std::memmove(dst, src, bytes);
    return AMPRT_OK;
  }
  if (kind == 2)
    return moveD2D(d, dst, src, bytes, "amprt_device_copy");
  cudaMemcpyKind k = kind == 0   ? cudaMemcpyHostToDevice
                     : kind == 1 ? cudaMemcpyDeviceToHost
                                 : cudaMemcpyDefault;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, d.stream);
  if (e != cudaSuccess) {
    cudaGetLastError(); // not left pending for the next, innocent call
    return cudaFail(e, "cudaMemcpyAsync");
  }
  if (kind == 1 || kind == 3) { // the caller may read the bytes next
    ++d.hostSyncs;
    CUDA_CHECK(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
  }
  return AMPRT_OK;
}

/// A scratch buffer of at least `bytes` (slot 0..7); valid until the next
/// call for the same slot with more bytes.
amprt_status scratch(Dev &d, int slot, size_t bytes, void **out) {
  auto &s = d.scratch[slot];
  if (s.second < bytes) {
    if (s.first) {
      if (d.capturing)
        return fail(AMPRT_ERR_INVALID_ARGUMENT,
                    "a CUDA graph capture needs %zu bytes of scratch memory that the step did "
                    "not use before it (run the step once before capturing it)",
                    bytes);
      ++d.hostSyncs;
      if (!d.emulate)
        CUDA_CHECK(cudaStreamSynchronize(d.stream), "scratch");
      if (d.graphsAlive > 0) {
        d.retired.push_back(s.first); // a captured graph may still use it
      } else {
        if (d.emulate)
          d.freedScratch.insert(s.first);
        rawFree(d, s.first);
      }
      s = {nullptr, 0};
    }
    AMPRT_CHECK(rawAlloc(d, bytes, &s.first));
    s.second = bytes;
  }
  *out = s.first;
  return AMPRT_OK;
}

View viewOf(const amprt_tensor &t) {
  View v;
  std::memset(&v, 0, sizeof v);
  v.data = static_cast<char *>(t.data);
  v.dtype = t.dtype;
  v.rank = t.rank;
  for (int32_t d = 0; d < t.rank; ++d) {
    v.shape[d] = t.shape[d];
    v.strides[d] = t.strides[d];
  }
  return v;
}

/// The same element order with fewer dims: dims of size 1 dropped and
/// neighbours whose strides chain (stride[d] == stride[d + 1] * shape[d + 1])
/// merged, so a dense tensor or a broadcast row is one or two dims and the
/// element-wise kernels divide less per element. Only for kernels that use
/// nothing but at(i).
View flat(View v) {
  int32_t r = 0;
  for (int32_t d = 0; d < v.rank; ++d) {
    if (v.shape[d] == 1)
      continue;
    if (r > 0 && v.strides[r - 1] == v.strides[d] * v.shape[d]) {
      v.shape[r - 1] *= v.shape[d];
      v.strides[r - 1] = v.strides[d];
      continue;
    }
    v.shape[r] = v.shape[d];
    v.strides[r] = v.strides[d];
    ++r;
  }
  for (int32_t d = 0; d < v.rank; ++d)
    if (v.shape[d] == 0) { // empty: keep one dim of 0 (at() is never called)
      v.shape[0] = 0;
      r = 1;
    }
  for (int32_t d = r; d < AMPRT_MAX_RANK; ++d) {
    v.shape[d] = 1;
    v.strides[d] = 0;
  }
  v.rank = r;
  return v;
}

/// x seen with y's shape (numpy broadcasting): y's shape, x's strides.
amprt_status broadcastView(const amprt_tensor &x, const amprt_tensor &y, const char *what,
                           View &v) {
  v = viewOf(x);
  v.rank = y.rank;
  for (int32_t d = 0; d < y.rank; ++d)
    v.shape[d] = y.shape[d];
  return broadcastStrides(&x, y.rank, y.shape, v.strides, what);
}

/// A view of `t` over `shape` with y's shape where dims of t of size 1 are
/// reduced ones: strides for the kept dims, 0 for the reduced.
int64_t numel(const amprt_tensor &t) { return amprt_tensor_numel(&t); }

amprt_status unsupported(const char *op) {
  return fail(AMPRT_ERR_UNSUPPORTED,
              "amprt_exec (cuda): %s is not on the CUDA device yet (run this program with "
              "--device cpu)",
              op);
}

/// The geometry of x [N, C, D...] -> y [N, M, D'...] (w [M, C/g, K...] or
/// the pool's kernel).
amprt_status checkContiguous(const amprt_tensor &t, int32_t dtype, const char *what) {
  if (!amprt_tensor_is_contiguous(&t) || (dtype >= 0 && t.dtype != dtype))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s must be contiguous%s%s", what,
                dtype >= 0 ? " " : "", dtype >= 0 ? amprt_dtype_name((amprt_dtype)dtype) : "");
  return AMPRT_OK;
}

bool sameShape(const amprt_tensor &a, const amprt_tensor &b) {
  if (a.rank != b.rank)
    return false;
  for (int32_t i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i])
      return false;
  return true;
}

/// A copy of x into y (same element count; row-major order on both).
amprt_status copyTensor(Dev &d, const amprt_tensor &x, const amprt_tensor &y, const char *what) {
  if (x.dtype != y.dtype || numel(x) != numel(y))
    return fail(AMPRT_ERR_INVALID_ARGUMENT, "amprt_exec (cuda): %s: x and y differ", what);
  size_t es = amprt_dtype_size((amprt_dtype)x.dtype);
  if (amprt_tensor_is_contiguous(&x) && amprt_tensor_is_contiguous(&y)) {
    // x and y may overlap (views of one buffer): memmove's meaning.
    return moveD2D(d, y.data, x.data, (size_t)numel(x) * es, what);
  }
  return each(&d, numel(y), CopyF{flat(viewOf(x)), flat(viewOf(y)), (int64_t)es}, what);
}

amprt_status zero(Dev &d, void *p, size_t bytes) {
  if (d.emulate) {
    std::memset(p, 0, bytes);
    return AMPRT_OK;
  }
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, d.stream), "cudaMemsetAsync");
  return AMPRT_OK;
}
} // namespace amprt::cuda
