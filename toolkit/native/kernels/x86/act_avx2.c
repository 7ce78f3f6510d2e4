/* act_avx2.c: AVX2 + FMA element-wise activations (x86-64 only): SiLU and the SiLU gates.
 *
 * exp is evaluated 8 lanes at a time (kernels/x86/exp_avx2.h, shared with rglru.c).  Error about
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

#include "kernels/x86/exp_avx2.h"

#define TK_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline
#define TK_AVX2 __attribute__((target("avx2,fma")))

#define exp_ps tk_exp8_avx2   /* kernels/x86/exp_avx2.h */

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
