//===- lt_host.h - cuBLASLt on the host, for the emulated CUDA context ------===//
//
// The cuBLASLt calls the backend makes (dynamic_symbols.h's table), done on
// the host: an emulated context (AMPRT_CUDA_EMULATE=1) runs the backend's
// own cuBLASLt code (ltMatmul: descriptors, layouts, preferences, the
// heuristic, the matmul) against these functions instead of the library.
// They check what they are given against cuBLASLt's documented rules and
// fail where cuBLASLt would (a status, and the reason in
// hostLtLastError()), and compute what cuBLASLt defines: column-major
// D = epilogue(alpha op(A) op(B) + beta C) with f32 accumulation, rounded
// once to D's type.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CUDA_LT_HOST_H
#define AMPRT_CUDA_LT_HOST_H

#include "dynamic_symbols.h"

#include <cstddef>
#include <cstdint>
#include <functional>

namespace amprt::cuda {

/// The host implementation's function table (loaded = true).
const LtApi &hostLtApi();

/// How a host handle behaves beyond the documented rules (the emulated
/// context's AMPRT_CUDA_EMULATE_LT): noAlgorithm makes the heuristic find
/// no algorithm for any problem (as cuBLASLt may, for a shape or an
/// alignment it has no kernel for); reluDropsNaN makes the ReLU epilogue
/// fmaxf(v, 0) (NaN -> 0; what the ReLU probe must detect).
struct HostLtOptions {
  bool noAlgorithm = false;
  bool reluDropsNaN = false;
};

/// Attaches to a handle made by hostLtApi().cublasLtCreate the test of
/// device memory (whether [p, p + bytes) lies in the context's device
/// memory) and the options.
void hostLtAttach(cublasLtHandle_t h, std::function<bool(const void *, size_t)> inDeviceMemory,
                  HostLtOptions options);
/// Matmuls the handle ran.
int64_t hostLtMatmuls(cublasLtHandle_t h);
/// Why the last failing call on this thread failed ("" when none failed).
const char *hostLtLastError();

} // namespace amprt::cuda

#endif // AMPRT_CUDA_LT_HOST_H
