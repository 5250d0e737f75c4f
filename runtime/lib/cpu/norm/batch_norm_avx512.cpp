//===- batch_norm_avx512.cpp - batch norm's AVX-512 kernels ---------------===//
//
// batch_norm_avx512.inc compiled twice (see batch_norm_avx512.h).
//
//===----------------------------------------------------------------------===//

#include "cpu/norm/batch_norm_avx512.h"
#include "common/check.h"

#include "common/convert.h"
#include "common/convert_avx2.h"
#include "common/convert_bits.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace amprt::bn {

#if defined(__x86_64__)
AMPRT_AVX512_QUIET_BEGIN
namespace {

/// Tensors this path takes: f32 or bf16.
inline bool bn512Type(const amprt_tensor *t) {
  return !t || t->dtype == AMPRT_F32 || t->dtype == AMPRT_BF16;
}

// The kernels, without and with AVX512-BF16 (batch_norm_avx512.inc).
namespace bn512 {
#define AMPRT_BN512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define AMPRT_BN512_HW 0
#include "batch_norm_avx512.inc"
#undef AMPRT_BN512
#undef AMPRT_BN512_HW
} // namespace bn512
namespace bn512bf16 {
#define AMPRT_BN512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define AMPRT_BN512_HW 1
#include "batch_norm_avx512.inc"
#undef AMPRT_BN512
#undef AMPRT_BN512_HW
} // namespace bn512bf16

} // namespace

const Bn512 &bn512Kernels() {
  static const Bn512 k =
      (amprt_cpu_features() & AMPRT_CPU_AVX512_BF16) && __builtin_cpu_supports("avx512dq")
          ? Bn512{bn512bf16::channelSumsAny, bn512bf16::normalizeAny,    bn512bf16::gradDxAny,
                  bn512bf16::packedSums,     bn512bf16::packedNormalize, bn512bf16::packedGradDx}
          : Bn512{bn512::channelSumsAny, bn512::normalizeAny,    bn512::gradDxAny,
                  bn512::packedSums,     bn512::packedNormalize, bn512::packedGradDx};
  return k;
}

bool useBn512(std::initializer_list<const amprt_tensor *> ts) {
  static const bool vl = __builtin_cpu_supports("avx512vl");
  if (!haveAvx512bw() || !vl)
    return false;
  for (const amprt_tensor *t : ts)
    if (!bn512Type(t))
      return false;
  return true;
}
AMPRT_AVX512_QUIET_END
#else
const Bn512 &bn512Kernels() {
  static const Bn512 none{};
  return none;
}
bool useBn512(std::initializer_list<const amprt_tensor *>) { return false; }
#endif

} // namespace amprt::bn
