/* toolkit.h: the one public header of the toolkit C runtime (prefix tk_).
 *
 * C99. Nothing here knows about Python. Every fallible call returns a tk_status;
 * tk_last_error() gives "file:line: message" of the last failure on this thread.
 * The library never calls exit() or abort() on bad input.
 *
 * The block between CDEF-BEGIN and CDEF-END is plain declarations (no preprocessor
 * lines): the cffi builder (_build.py) feeds it to ffi.cdef(). Enums only grow at the end.
 */
#ifndef TOOLKIT_H
#define TOOLKIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF-BEGIN */

/* ---- status ------------------------------------------------------------------------ */
typedef enum {
    TK_OK = 0,
    TK_ERR_INVALID = 1,      /* bad argument or malformed input */
    TK_ERR_IO = 2,           /* open/mmap/read failed */
    TK_ERR_NOMEM = 3,        /* allocation failed or would exceed a limit */
    TK_ERR_UNSUPPORTED = 4,  /* valid input this build does not handle */
    TK_ERR_STATE = 5         /* operation refused in the current state (memory unchanged) */
} tk_status;

const char * tk_last_error(void);
const char * tk_version(void);

/* ==== quantization (quants.c) ======================================================== */
/* `type` is a ggml type number (F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8,
 * Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14, IQ4_NL 20, IQ4_XS 23, BF16 30).
 * Quantizers are bit-exact ports of ggml's reference path (ggml_quantize_chunk with no
 * imatrix, llama.cpp 0c1e570); rows are independent, so any split into row bands gives
 * the same bytes.                                                                         */

/* 1 if `type` can be quantized to and dequantized from here, else 0. */
int tk_quant_type_supported(int type);
/* Bytes of one row of n_per_row elements of `type`; -1 if unsupported or not a block multiple. */
int64_t tk_quant_row_size(int type, int64_t n_per_row);
/* src: n elements of `type` (n a multiple of its block size) -> dst: float32[n]. */
tk_status tk_dequantize_row(int type, const void * src, float * dst, int64_t n);
/* src: float32[n_rows, n_per_row] -> dst: n_rows rows of tk_quant_row_size(type, n_per_row)
 * bytes; n_threads pthreads over contiguous runs of rows. */
tk_status tk_quantize_rows(int type, const float * src, void * dst, int64_t n_rows, int64_t n_per_row, int n_threads);
/* src: n_rows rows of `type` -> dst: float32[n_rows, n_per_row]. */
tk_status tk_dequantize_rows(int type, const void * src, float * dst, int64_t n_rows, int64_t n_per_row, int n_threads);


/* CDEF-END */

#ifdef __cplusplus
}
#endif
#endif /* TOOLKIT_H */
