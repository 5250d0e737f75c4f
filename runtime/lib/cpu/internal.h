//===- internal.h - runtime internals shared by the CPU kernels -*- C++ -*-===//

#ifndef AMPRT_LIB_INTERNAL_H
#define AMPRT_LIB_INTERNAL_H

#include "amprt/amprt.h"

namespace amprt {

/// Records a printf-style message as this thread's last error and returns
/// `status`.
amprt_status fail(amprt_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/// The portable conversion loop (the definition vector paths must match).
void convertScalar(const void *src, amprt_dtype st, void *dst, amprt_dtype dt,
                   size_t n);

} // namespace amprt

#endif // AMPRT_LIB_INTERNAL_H
