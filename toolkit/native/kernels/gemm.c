/* gemm.c: the panel GEMM every chunked or block form runs its products on (GDN's and KDA's
 * chunked forms, gdn_chunked.c; lightning's block form, lightning.c), and the blocked
 * transpose they hold their state with.  Contract: kernels/kernels.h, tk_gemm_fn.  Here the
 * plain reference and the choice of instance per level; the SIMD instances are
 * x86/gemm_avx2.c and x86/gemm_avx512.c.
 */
#include <string.h>

#include "kernels/kernels.h"

void tk_gemm_ref(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t R,
                 int32_t J, int32_t N, int acc) {
    for (int32_t r = 0; r < R; r++) {
        float * o = out + r * ldo;
        if (!acc) memset(o, 0, (size_t) N * sizeof(float));
        for (int32_t j = 0; j < J; j++) {
            const float cj = c[r * ldc + j];
            const float * mj = m + j * ldm;
            for (int32_t n = 0; n < N; n++) o[n] += cj * mj[n];
        }
    }
}

tk_gemm_fn tk_gemm_at(int level) {
#ifdef TK_HAVE_X86
    if (level >= TK_CPU_AVX512) return tk_gemm_avx512;
    if (level >= TK_CPU_AVX2) return tk_gemm_avx2;
#endif
    (void) level;
    return tk_gemm_ref;
}

void tk_transpose(const float * src, int32_t rows, int32_t cols, float * dst) {
    for (int32_t r0 = 0; r0 < rows; r0 += 8)
        for (int32_t c0 = 0; c0 < cols; c0 += 8) {
            const int32_t r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int32_t c = c0; c < c1; c++)
                for (int32_t r = r0; r < r1; r++) dst[(int64_t) c * rows + r] = src[(int64_t) r * cols + c];
        }
}
