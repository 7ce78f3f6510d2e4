/* gemm_avx512.c: the panel GEMM's AVX-512 (F, VL) instance (contract: kernels/kernels.h,
 * tk_gemm_fn): gemm_avx2.c's blocking on 16-float vectors.  Reached only through tk_gemm_at at
 * the avx512 level. */
#include "kernels/kernels.h"

#ifdef TK_HAVE_X86
/* NR (1..6) rows x NV (1..2) vectors of 16 columns; the last vector's columns under `last` */
TK_TARGET_AVX512 TK_KINLINE void gemm_block_avx512(
    float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t J, int acc,
    const int NR, const int NV, __mmask16 last) {
    __m512 a[6][2];
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) {
            const __mmask16 mk = v == NV - 1 ? last : (__mmask16) 0xffff;
            a[r][v] = acc ? _mm512_maskz_loadu_ps(mk, out + r * ldo + 16 * v) : _mm512_setzero_ps();
        }
    for (int32_t j = 0; j < J; j++) {
        __m512 mv[2];
        for (int v = 0; v < NV; v++)
            mv[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : (__mmask16) 0xffff, m + j * ldm + 16 * v);
        for (int r = 0; r < NR; r++) {
            const __m512 cr = _mm512_set1_ps(c[r * ldc + j]);
            for (int v = 0; v < NV; v++) a[r][v] = _mm512_fmadd_ps(cr, mv[v], a[r][v]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(out + r * ldo + 16 * v, v == NV - 1 ? last : (__mmask16) 0xffff, a[r][v]);
}

TK_TARGET_AVX512 TK_KINLINE void gemm_panel_avx512(
    float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t R, int32_t J,
    int acc, const int NV, __mmask16 last) {
    int32_t r = 0;
    for (; r + 6 <= R; r += 6) gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 6, NV, last);
    if (R - r >= 4) { gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 4, NV, last); r += 4; }
    if (R - r >= 2) { gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 2, NV, last); r += 2; }
    if (R - r >= 1) gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 1, NV, last);
}

/* Column panels of 32, then 16, then a masked 1..15. */
TK_TARGET_AVX512 void tk_gemm_avx512(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m,
                                       int64_t ldm, int32_t R, int32_t J, int32_t N, int acc) {
    int32_t n = 0;
    for (; n + 32 <= N; n += 32) gemm_panel_avx512(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 2, 0xffff);
    if (n + 16 <= N) { gemm_panel_avx512(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, 0xffff); n += 16; }
    if (n < N) gemm_panel_avx512(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, tk_mask16_avx512(N - n));
}
#endif
