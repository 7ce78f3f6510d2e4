/* threshold.c: the run-length thresholds' reader (contract: kernels/kernels.h), one for the
 * chunked SSD (ssd.c), the chunked GDN and KDA forms (gdn.c) and lightning's block form
 * (lightning.c).  Each keeps its value in a slot of its own, read once, relaxed atomics. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kernels.h"

int tk_threshold_get(int * slot, const char * env, int dflt) {
    int v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (v < 0) {
        const char * e = getenv(env);
        v = dflt;
        if (e && *e) {
            char * end;
            long l = strtol(e, &end, 10);
            if (*end == '\0' && l >= 0) v = l > INT32_MAX ? INT32_MAX : (int) l;
        }
        __atomic_store_n(slot, v, __ATOMIC_RELAXED);
    }
    return v;
}

int tk_threshold_set(int * slot, int n, const char * env, int dflt) {
    if (n < 0) { __atomic_store_n(slot, -1, __ATOMIC_RELAXED); return tk_threshold_get(slot, env, dflt); }
    __atomic_store_n(slot, n, __ATOMIC_RELAXED);
    return n;
}
