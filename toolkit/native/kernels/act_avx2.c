/* act_avx2.c: AVX2 + FMA element-wise activations (x86-64 only): SiLU and the SiLU gates.
 *
 * exp is evaluated 8 lanes at a time: x = n ln2 + r (n = round(x log2e), r by two FMAs with
 * ln2 split hi/lo, |r| <= ln2/2), e^r by its degree-6 Taylor polynomial in Horner form,
 * times 2^n built in the exponent bits; x is clamped to [-87.3, 88.7] first.  Error about
 * 2 ulp against a correctly rounded exp (checked in tests/unit/test_kernels.py), so these
 * kernels agree with the scalar path's expf to a few ulp, not bit for bit.
 * Every element is computed by the same lane operations wherever it sits in a row: the
 * tail (n % 8) goes through a zero-padded vector too, so a thread split never changes a
 * result.
 * ref: Cephes expf (range reduction), as in ggml's ggml_v_expf.
 */
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"

#ifdef TK_HAVE_X86
#include <immintrin.h>

#define TK_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline
#define TK_AVX2 __attribute__((target("avx2,fma")))

TK_AVX2_INLINE __m256 exp_ps(__m256 x) {
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

TK_AVX2_INLINE __m256 silu_ps(__m256 x) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* mode 0: y = silu(y); 1: y = silu(y) * a; 2: y = y * silu(a) */
TK_AVX2_INLINE __m256 gate_ps(int mode, __m256 y, __m256 a) {
    if (mode == 0) return silu_ps(y);
    if (mode == 1) return _mm256_mul_ps(silu_ps(y), a);
    return _mm256_mul_ps(y, silu_ps(a));
}

TK_AVX2_INLINE void gate_row(int mode, float * y, const float * a, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, gate_ps(mode, _mm256_loadu_ps(y + i), mode ? _mm256_loadu_ps(a + i) : _mm256_setzero_ps()));
    if (i < n) {
        float ty[8] = {0}, ta[8] = {0};
        memcpy(ty, y + i, (size_t) (n - i) * sizeof(float));
        if (mode) memcpy(ta, a + i, (size_t) (n - i) * sizeof(float));
        _mm256_storeu_ps(ty, gate_ps(mode, _mm256_loadu_ps(ty), _mm256_loadu_ps(ta)));
        memcpy(y + i, ty, (size_t) (n - i) * sizeof(float));
    }
}

TK_AVX2 void tk_silu_row_avx2(float * y, int64_t n) { gate_row(0, y, NULL, n); }
TK_AVX2 void tk_silu_mul_row_avx2(float * y, const float * a, int64_t n) { gate_row(1, y, a, n); }
TK_AVX2 void tk_mul_silu_row_avx2(float * y, const float * z, int64_t n) { gate_row(2, y, z, n); }

#endif
