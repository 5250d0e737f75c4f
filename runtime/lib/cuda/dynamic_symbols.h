//===- dynamic_symbols.h - cuBLASLt and cuDNN, opened at run time -----------===//
//
// The functions the backend takes from cuBLASLt and cuDNN, each listed once
// in an X-macro table (as IREE's cuda_dynamic_symbol_table.h does): the
// table declares the pointers, loads them with dlsym (driver.cu) and names
// the missing one in the error. A program built with the CUDA backend starts,
// and runs with --device cpu or emulated, on a machine without the CUDA
// libraries.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_CUDA_DYNAMIC_SYMBOLS_H
#define AMPRT_CUDA_DYNAMIC_SYMBOLS_H

#include "amprt/amprt.h"

#include <cublasLt.h>
#ifdef AMPRT_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <string>

namespace amprt::cuda {

// clang-format off
#define AMP_LT_FUNCTIONS(X)                                                    \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic)   \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                       \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate)                      \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)
// clang-format on
struct LtApi {
#define AMP_LT_FN(f) decltype(&::f) f = nullptr;
  AMP_LT_FUNCTIONS(AMP_LT_FN)
#undef AMP_LT_FN
  bool loaded = false;
};
extern LtApi ltApi;

/// dlopen of a CUDA library: from the loader's path (LD_LIBRARY_PATH, the
/// program's run path), else the toolkit's folder; nullptr (and the first
/// reason in `why`) when none opens.
void *openCudaLibrary(const std::string &name, std::string &why);
/// Loads cuBLASLt once: the library of this toolkit's major version.
amprt_status loadCublasLt();

#ifdef AMPRT_HAVE_CUDNN
/// cuDNN 9's convolution API, opened at run time as cuBLASLt (the shim
/// libcudnn.so.9 loads its parts itself) by the first convolution on a real
/// device with AMPRT_CUDA_CONV=auto / cudnn.
// clang-format off
#define AMP_DNN_FUNCTIONS(X)                                                                       \
  X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnGetErrorString)                          \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor) X(cudnnDestroyTensorDescriptor)     \
  X(cudnnCreateFilterDescriptor) X(cudnnSetFilterNdDescriptor) X(cudnnDestroyFilterDescriptor)     \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)                           \
  X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)                                  \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnGetConvolutionNdForwardOutputDim)                    \
  X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnConvolutionForward)                             \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7) X(cudnnConvolutionBackwardData)                   \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) X(cudnnConvolutionBackwardFilter)
// clang-format on
struct DnnApi {
#define AMP_DNN_FN(f) decltype(&::f) f = nullptr;
  AMP_DNN_FUNCTIONS(AMP_DNN_FN)
#undef AMP_DNN_FN
  bool loaded = false;
};
extern DnnApi dnnApi;

/// Loads cuDNN once (libcudnn.so.<major> of the headers built against).
amprt_status loadCudnn();
#endif

} // namespace amprt::cuda

#endif // AMPRT_CUDA_DYNAMIC_SYMBOLS_H
