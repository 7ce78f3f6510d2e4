/* common.c: error reporting and version. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tk_internal.h"

#if defined(__GNUC__)
#define TK_TLS __thread
#else
#define TK_TLS
#endif

static TK_TLS char g_err[1024];

tk_status tk_set_error(const char * file, int line, tk_status st, const char * fmt, ...) {
    const char * base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(g_err, sizeof g_err, "%s:%d: ", base, line);
    if (n < 0 || n >= (int) sizeof g_err) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err + n, sizeof g_err - (size_t) n, fmt, ap);
    va_end(ap);
    return st;
}

const char * tk_last_error(void) { return g_err; }

const char * tk_version(void) { return "0.1.0"; }
