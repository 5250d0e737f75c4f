//===- dnn_host.h - cuDNN's convolutions on the host, for emulation ---------===//
//
// The cuDNN 9 calls the backend makes (dynamic_symbols.h's DnnApi), done on
// the host so that an emulated context (AMPRT_CUDA_EMULATE=1) runs the
// backend's cuDNN code (conv_cudnn.cu: descriptors, the heuristics'
// candidates, the three convolution calls) as it runs on a GPU. The calls
// check their arguments as cuDNN documents them (descriptor kinds and
// ranks, packed NCHW strides, one data type with a float compute type,
// channel counts that agree with the group count, the output shape cuDNN
// computes, tensors in device memory, the workspace the algorithm asked
// for) and compute cross-correlations in double, rounded once. The
// candidates model what cuDNN 9 reports that the backend must handle:
//   algorithm 1, deterministic, 1 KiB of workspace, which needs 16-byte
//   aligned tensors (a misaligned one: CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER
//   at the call, the heuristics not seeing pointers), then algorithm 0
//   (forward deterministic; data and filter gradients not), no workspace;
//   f32 candidates report CUDNN_DEFAULT_MATH even when the descriptor asks
//   for CUDNN_FMA_MATH.
// HostDnnOptions::noAlgorithm: every candidate CUDNN_STATUS_NOT_SUPPORTED.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CUDA_DNN_HOST_H
#define AMPRT_CUDA_DNN_HOST_H

#include "dynamic_symbols.h"

#include <cstddef>
#include <cstdint>
#include <functional>

#ifdef AMPRT_HAVE_CUDNN
namespace amprt::cuda {

const DnnApi &hostDnnApi();

struct HostDnnOptions {
  bool noAlgorithm = false;
};

/// Attaches the device-memory test and the options to a host handle.
void hostDnnAttach(cudnnHandle_t h, std::function<bool(const void *, size_t)> inDeviceMemory,
                   HostDnnOptions options);
/// Why the last failing call on this thread failed.
const char *hostDnnLastError();

} // namespace amprt::cuda
#endif

#endif // AMPRT_CUDA_DNN_HOST_H
