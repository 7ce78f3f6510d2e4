/* repack_avxvnni.c: the AVX-VNNI tiles of the repacked formats (repack_avx2_tiles.h: vpdpbusd on
 * ymm), handed out at TK_CPU_AVX2 where the AVX-VNNI kernels are on (tk_cpu_avxvnni; repack.c
 * tk_repack_rows).  The same bits as repack_avx2.c's. */
#include "quants/x86/tk_avxvnni.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define RPY TK_AVXVNNI_TARGET
#define RPY_NAME(x) tk_rp_avxvnni_##x
#define RPY_VNNI 1
#include "quants/x86/repack_avx2_tiles.h"
#endif
