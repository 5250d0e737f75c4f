//===- workspace.h - kernel scratch bounds the compiler plans with -*- C++ -*-===//
//
// Read by the kernels and by amp-plan-memory's workspace estimate: no other
// dependency, so that the compiler includes it as it is.
//
//===----------------------------------------------------------------------===//

#ifndef AMPRT_COMMON_WORKSPACE_H
#define AMPRT_COMMON_WORKSPACE_H

#include <cstdint>

namespace amprt {

/// A bf16 product is timed widened to f32 (against the bf16 kernels) only
/// when the two f32 copies take at most this many bytes of scratch; above,
/// it runs on the bf16 kernels.
constexpr int64_t kWidenMaxBytes = int64_t(64) << 20;

} // namespace amprt

#endif // AMPRT_COMMON_WORKSPACE_H
