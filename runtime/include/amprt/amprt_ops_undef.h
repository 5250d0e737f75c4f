/*===- amprt_ops_undef.h - ends one expansion of amprt_ops.def ----*- C -*-===*
 *
 * Undefines AMPRT_OPCODE and the field macros (I64, I64_IN, F64, OPT_I64,
 * OPT_F64, LIST, CONV_WINDOW, POOL_WINDOW) after an #include of
 * amprt/amprt_ops.def that defined them; no include guard (it is included
 * after every expansion).
 *
 *===----------------------------------------------------------------------===*/

#undef AMPRT_OPCODE
#undef I64
#undef I64_IN
#undef F64
#undef OPT_I64
#undef OPT_F64
#undef LIST
#undef CONV_WINDOW
#undef POOL_WINDOW
