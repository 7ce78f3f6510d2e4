/* attn_avx2.c: the blocked attention's AVX2 + FMA instance (attn_body.h on 8 lanes; contract:
 * attn.h), called by attn.c's driver at TK_CPU_AVX2. */
#include "kernels/attn.h"
#include "tk_cpu.h"

#ifdef TK_HAVE_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define ATTN_VL 8
#define ATTN_NB 2              /* 4 rows x 2 value vectors: 8 accumulators of the 16 registers */
#define ATTN_NAME(x) x##_avx2
#include "kernels/attn_body.h"
#pragma GCC pop_options
#endif
