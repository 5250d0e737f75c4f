# CUDA detection, shared by the project and a standalone build of runtime/
# (scripts/gpu-check): the toolkit's nvcc (/usr/local/cuda here), machine code
# for sm_80 and sm_90 plus PTX. Sets AMP_HAVE_CUDA.
option(AMP_ENABLE_CUDA "Build the CUDA kernels when the CUDA toolkit is found" ON)
if(AMP_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # sm_80 (A100) and sm_90 (H100 / H200) machine code, plus PTX for newer.
    set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
    # No ccache for CUDA: ccache preprocesses a .cu file once, as device
    # code (__CUDA_ARCH__ defined), so an edit confined to the host side of
    # an #ifdef __CUDA_ARCH__ (the emulated paths) hits a stale object.
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(AMP_HAVE_CUDA ON)
    message(STATUS "CUDA: ${CMAKE_CUDA_COMPILER} (${CMAKE_CUDA_COMPILER_VERSION}); "
                   "kernels for ${CMAKE_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "CUDA: no toolkit found; the CUDA kernels are not built")
  endif()
endif()
