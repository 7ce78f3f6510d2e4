/* attn_avx512.c: the blocked attention's AVX-512 instance (attn_body.h on 16 lanes; contract:
 * attn.h), called by attn.c's driver at TK_CPU_AVX512. */
#include "kernels/attn.h"
#include "tk_cpu.h"

#ifdef TK_HAVE_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#define ATTN_VL 16
#define ATTN_NB 4              /* 4 rows x 4 value vectors: 16 accumulators of the 32 registers */
#define ATTN_NAME(x) x##_avx512
#include "kernels/attn_body.h"
#pragma GCC pop_options
#endif
