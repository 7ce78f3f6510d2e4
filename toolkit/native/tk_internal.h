/* tk_internal.h: helpers shared by the C files (not part of the public API). */
#ifndef TK_INTERNAL_H
#define TK_INTERNAL_H

#include "toolkit.h"

/* Record an error for tk_last_error() and return its status. */
tk_status tk_set_error(const char * file, int line, tk_status st, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#define TK_FAIL(st, ...) tk_set_error(__FILE__, __LINE__, (st), __VA_ARGS__)
#define TK_CHECK(expr) do { tk_status _s = (expr); if (_s != TK_OK) return _s; } while (0)

#endif
