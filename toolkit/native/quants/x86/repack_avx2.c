/* repack_avx2.c: the plain AVX2 tiles of the repacked formats (repack_avx2_tiles.h: vpmaddubsw +
 * vpmaddwd), handed out at TK_CPU_AVX2 without AVX-VNNI (repack.c tk_repack_rows). */
#include "tk_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(TK_EMULATE_AVX512)
#define RPY __attribute__((target("avx2,fma,f16c")))
#define RPY_NAME(x) tk_rp_avx2_##x
#define RPY_VNNI 0
#include "quants/x86/repack_avx2_tiles.h"
#endif
