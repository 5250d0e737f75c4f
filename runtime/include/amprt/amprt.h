/*===- amprt.h - the AMP-MLIR runtime C API ----------------------*- C -*-===*
 *
 * The runtime that compiled training steps call: element types, exact
 * fp16 / bf16 conversions and (as the runtime grows) the kernel ABI. Plain C,
 * no MLIR; errors are returned as codes, never by abort.
 *
 *===----------------------------------------------------------------------===*/

#ifndef AMPRT_AMPRT_H
#define AMPRT_AMPRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types, numbered as in the compiler's lowering. */
typedef enum amprt_dtype {
  AMPRT_F32 = 0,
  AMPRT_F16 = 1,
  AMPRT_BF16 = 2,
  AMPRT_I1 = 3,
  AMPRT_I8 = 4,
  AMPRT_I16 = 5,
  AMPRT_I32 = 6,
  AMPRT_I64 = 7,
  AMPRT_U8 = 8,
  AMPRT_U16 = 9,
  AMPRT_U32 = 10,
  AMPRT_U64 = 11,
  AMPRT_DTYPE_COUNT
} amprt_dtype;

/* Status codes. 0 is success; amprt_last_error() has the message. */
typedef enum amprt_status {
  AMPRT_OK = 0,
  AMPRT_ERR_INVALID_ARGUMENT = 1,
  AMPRT_ERR_UNSUPPORTED = 2,
  AMPRT_ERR_OUT_OF_MEMORY = 3,
  AMPRT_ERR_IO = 4,
  AMPRT_ERR_NO_DEVICE = 5,
  AMPRT_ERR_NUMERIC = 6
} amprt_status;

/* The message of the last error on this thread ("" if none). */
const char *amprt_last_error(void);

/* Name ("f32", "bf16", ...) and size in bytes of an element type; NULL / 0
 * for an invalid value. */
const char *amprt_dtype_name(amprt_dtype t);
size_t amprt_dtype_size(amprt_dtype t);

/*--- Exact conversions ----------------------------------------------------*
 * Round to nearest, ties to even, as IEEE 754 and the GPU's cvt.rn do:
 * overflow gives inf, underflow the correctly rounded subnormal or a signed
 * zero. NaN stays NaN with its sign (quiet; f16: 0x7E00 | sign, bf16:
 * 0x7FC0 | sign). fp16 and bf16 values travel as their uint16_t bits. */
uint16_t amprt_f32_to_f16(float x);
float amprt_f16_to_f32(uint16_t h);
uint16_t amprt_f32_to_bf16(float x);
float amprt_bf16_to_f32(uint16_t b);

/* Converts n elements between any two float element types (f32, f16,
 * bf16), using the widest vector instructions this CPU has. */
amprt_status amprt_convert(const void *src, amprt_dtype src_type, void *dst,
                           amprt_dtype dst_type, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* AMPRT_AMPRT_H */
