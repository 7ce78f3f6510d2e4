/* gemm_avx2.c: the panel GEMM's AVX2+FMA instance (contract: kernels/kernels.h, tk_gemm_fn):
 * 6 rows x 2 vectors of 8 columns in registers, the column panel of m in L1 across the row
 * blocks, the last vector's columns under a lane mask.  Each output is one FMA chain over j,
 * ascending.  Reached only through tk_gemm_at at the avx2 level or above. */
#include "kernels/kernels.h"

#ifdef TK_HAVE_X86
/* NR (1..6) rows x NV (1..2) vectors of 8 columns at out + n0; the last vector's lanes
 * under `last` (all lanes when the block is whole). */
TK_TARGET_AVX2 TK_KINLINE void gemm_block_avx2(
    float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t J, int acc,
    const int NR, const int NV, const int masked, __m256i last) {
    __m256 a[6][2];
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) {
            const int mk = masked && v == NV - 1;
            float * p = out + r * ldo + 8 * v;
            a[r][v] = !acc ? _mm256_setzero_ps() : mk ? _mm256_maskload_ps(p, last) : _mm256_loadu_ps(p);
        }
    for (int32_t j = 0; j < J; j++) {
        __m256 mv[2];
        for (int v = 0; v < NV; v++) {
            const float * p = m + j * ldm + 8 * v;
            mv[v] = masked && v == NV - 1 ? _mm256_maskload_ps(p, last) : _mm256_loadu_ps(p);
        }
        for (int r = 0; r < NR; r++) {
            const __m256 cr = _mm256_broadcast_ss(c + r * ldc + j);
            for (int v = 0; v < NV; v++) a[r][v] = _mm256_fmadd_ps(cr, mv[v], a[r][v]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) {
            float * p = out + r * ldo + 8 * v;
            if (masked && v == NV - 1) _mm256_maskstore_ps(p, last, a[r][v]); else _mm256_storeu_ps(p, a[r][v]);
        }
}

/* One panel of NV vectors of columns (at out, m) over all R rows: 6 rows at a time, then
 * 4, 2, 1.  The panel of m (J x 8 NV floats) stays in L1 across the row blocks. */
TK_TARGET_AVX2 TK_KINLINE void gemm_panel_avx2(
    float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t R, int32_t J,
    int acc, const int NV, const int masked, __m256i last) {
    int32_t r = 0;
    for (; r + 6 <= R; r += 6) gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 6, NV, masked, last);
    if (R - r >= 4) { gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 4, NV, masked, last); r += 4; }
    if (R - r >= 2) { gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 2, NV, masked, last); r += 2; }
    if (R - r >= 1) gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 1, NV, masked, last);
}

/* Column panels of 16, then 8, then a masked 1..7. */
TK_TARGET_AVX2 void tk_gemm_avx2(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m,
                                   int64_t ldm, int32_t R, int32_t J, int32_t N, int acc) {
    int32_t n = 0;
    const __m256i all = _mm256_set1_epi32(-1);
    for (; n + 16 <= N; n += 16) gemm_panel_avx2(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 2, 0, all);
    if (n + 8 <= N) { gemm_panel_avx2(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, 0, all); n += 8; }
    if (n < N) gemm_panel_avx2(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, 1, tk_mask8_avx2(N - n));
}
#endif
