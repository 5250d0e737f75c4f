//===- matmul.h - matrix products -------------------------*- C++ -*-===//

#ifndef AMPRT_CPU_MATMUL_H
#define AMPRT_CPU_MATMUL_H

#include "amprt/amprt.h"

#include <cstdint>

namespace amprt {

/// amxProduct runs here: an x86-64 CPU with AMX-BF16 whose OS grants the
/// tile state, AVX-512 paths on (AMPRT_NO_AVX512 unset), AMPRT_NO_AMX unset.
bool amxProductAvailable();
/// c [m x n] f32 (row stride ldc) = a [m x k] @ b [k x n], bf16 operands
/// (amx.cpp): element (i, kk) of a at a[i * a0 + kk * a1], (kk, j) of b at
/// b[kk * b0 + j * b1] (one of a0 / a1 and one of b0 / b1 should be 1: the
/// others are packed element by element). TDPBF16PS's arithmetic, as
/// oneDNN's AMX kernels: exact products, f32 sums in the order of k, bf16
/// subnormals read as zero. Only where amxProductAvailable(). With
/// nonFinite, also whether c holds an inf or NaN, each tile read as it is
/// stored (the inf check of a weight gradient, in L1).
void amxProduct(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t a0, int64_t a1,
                const uint16_t *b, int64_t b0, int64_t b1, float *c, int64_t ldc,
                bool *nonFinite = nullptr);
/// A 2-D convolution's weight gradient on the AMX tiles without its
/// im2col matrix: dw [oc, C x KH x KW] (f32, rows of K) = dyt [oc, P]
/// (bf16 rows, P = N x OH x OW in (n, oh, ow) order) @ the columns of x
/// [N, C, H, W] (bf16; any row stride, column stride 1 or 2, dilation 1,
/// padding padT / padL), each tile of the columns made from x's rows where
/// the product reads it. amxProduct's arithmetic; nonFinite as there. Only
/// where amxProductAvailable().
void amxConvWeightGrad(const uint16_t *x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t KH,
                       int64_t KW, int64_t strideH, int64_t strideW, int64_t padT, int64_t padL,
                       int64_t OH, int64_t OW, const uint16_t *dyt, int64_t oc, float *dw,
                       bool *nonFinite = nullptr);
/// Whether amxProduct reads a row-major a (a1 = 1) of m rows and k columns
/// in place, tile by tile, instead of packing it: whole tiles (m a
/// multiple of 16, k of 32) and a sum of more than one tile.
inline bool amxReadsAInPlace(int64_t m, int64_t k) { return m % 16 == 0 && k % 32 == 0 && k > 32; }

} // namespace amprt

#endif // AMPRT_CPU_MATMUL_H
