//===- profile.h - AMPRT_PROFILE and AMPRT_CHECK_NUMERICS ---*- C++ -*-===//

#ifndef AMPRT_HOST_PROFILE_H
#define AMPRT_HOST_PROFILE_H

#include <string>

namespace amprt {

/// AMPRT_PROFILE: the kernel implementations an op ran (oneDNN's
/// impl_info_str, e.g. "brg:avx512_core_amx"), noted by the kernels while
/// profiling and taken by the profile after the op (profile.cpp).
void noteKernelImpl(const char *impl);
std::string takeKernelImpls();

/// Whether AMPRT_CHECK_NUMERICS asks for the NaN / inf origin check
/// (profile.cpp).
bool checkNumericsRequested();

} // namespace amprt

#endif // AMPRT_HOST_PROFILE_H
