/* exp_avx2.h: the 8-lane float exp the AVX2 kernels share (act_avx2.c's SiLU gates,
 * rglru.c's RG-LRU scan).  x = n ln2 + r (n = round(x log2e), r by two FMAs with ln2 split
 * hi/lo, |r| <= ln2/2), e^r by its degree-6 Taylor polynomial in Horner form, times 2^n built
 * in the exponent bits; x is clamped to [-87.3, 88.7] first.  About 2 ulp from a correctly
 * rounded exp (tests/unit/test_kernels.py).  ref: Cephes expf, as in ggml's ggml_v_expf.
 * Include after tk_cpu.h, inside TK_HAVE_X86. */
#ifndef TK_EXP_AVX2_H
#define TK_EXP_AVX2_H

#include <immintrin.h>

__attribute__((target("avx2,fma"), always_inline)) static inline __m256 tk_exp8_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);          /* ln2 hi */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);              /* ln2 lo */
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n, n in [-126, 128]: split in two factors so that n = 128 does not overflow the
     * exponent field before the multiply */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i h = _mm256_srai_epi32(ni, 1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

#endif
