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

/* CDEF-END */

#ifdef __cplusplus
}
#endif
#endif /* TOOLKIT_H */
