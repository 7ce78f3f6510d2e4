/* threshold.c: the run-length thresholds' process defaults (contract: kernels/kernels.h), one
 * for the chunked SSD (ssd.c), the chunked GDN and KDA forms (gdn.c) and lightning's block form
 * (lightning.c).  Each keeps its value in a slot of its own (relaxed atomics); the library reads
 * no environment: a context's own thresholds come in tk_context_params (ssd_min, gdn_min,
 * kda_min, lightning_min), the CLI's TOOLKIT_*_MIN (toolkit/runtime/options.py). */
#include <stdint.h>

#include "kernels/kernels.h"

int tk_threshold_get(const int * slot, int dflt) {
    const int v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    return v < 0 ? dflt : v;
}

int tk_threshold_set(int * slot, int n, int dflt) {
    if (n < 0) { __atomic_store_n(slot, -1, __ATOMIC_RELAXED); return dflt; }
    __atomic_store_n(slot, n, __ATOMIC_RELAXED);
    return n;
}
