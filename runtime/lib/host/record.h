//===- record.h - AMPRT_EXEC_RECORD -----------------------*- C++ -*-===//

#ifndef AMPRT_HOST_RECORD_H
#define AMPRT_HOST_RECORD_H

#include "amprt/amprt.h"

#include <cstdint>

namespace amprt {

/// AMPRT_EXEC_RECORD's folder, or null (record.cpp).
const char *recordFolder();
/// Runs `run` and records the call (its tensors' bytes before and after).
int32_t recordExec(amprt_context *ctx, const int64_t *desc, void **bufs,
                   int32_t (*run)(amprt_context *, const int64_t *, void **));

} // namespace amprt

#endif // AMPRT_HOST_RECORD_H
