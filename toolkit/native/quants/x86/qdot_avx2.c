/* qdot_avx2.c: AVX2 activation quantizers for the integer path (x86-64 only): Q8_0 and
 * Q8_K blocks, the same bytes as qdot.c's scalar ones (the row kernels are in
 * qdot_legacy_avx2.c and qdot_kquants_avx2.c).
 *
 * Every function carries __attribute__((target("avx2,fma,f16c"))) and is reached only
 * through the type table's AVX2 slot (ggml_types.c) when cpu.c found AVX2 and the OS's YMM
 * support.
 */
#include <math.h>
#include <string.h>

#include "quants/qdot.h"
#include "tk_cpu.h"

#ifdef TK_HAVE_X86
#include <immintrin.h>

#define TK_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TK_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

/* ---- activation quantizers: the bytes of qdot.c's scalar ones ---------------------- */

TK_AVX2_INLINE __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

TK_AVX2_INLINE float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 0x55));
    return _mm_cvtss_f32(m);
}

/* round to nearest even (rintf in the default mode) and convert, 8 lanes */
TK_AVX2_INLINE __m256i rint_epi32(__m256 v) {
    return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* 32 int32 in four vectors -> 32 int8 in element order (values within int8) */
TK_AVX2_INLINE __m256i pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    const __m256i p01 = _mm256_packs_epi32(i0, i1), p23 = _mm256_packs_epi32(i2, i3);
    const __m256i p = _mm256_packs_epi16(p01, p23);
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* lanes where v is an inf or a NaN (v - v is NaN there) */
TK_AVX2_INLINE __m256 nonfinite_ps(__m256 v) { return _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ); }

TK_AVX2 void tk_quantize_act_q8_0_avx2(const float * x, void * vy, int64_t K) {
    blk_q8_0 * y = vy;
    for (int64_t b = 0; b < K / QK32; b++, x += QK32) {
        const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16),
                     v3 = _mm256_loadu_ps(x + 24);
        const __m256 bad = _mm256_or_ps(_mm256_or_ps(nonfinite_ps(v0), nonfinite_ps(v1)), _mm256_or_ps(nonfinite_ps(v2), nonfinite_ps(v3)));
        if (_mm256_movemask_ps(bad)) {                  /* as qdot.c: d = NaN, q = 0 */
            y[b].d = tkq_fp32_to_fp16(NAN);
            memset(y[b].qs, 0, QK32);
            continue;
        }
        const float amax = hmax_ps(_mm256_max_ps(_mm256_max_ps(abs_ps(v0), abs_ps(v1)), _mm256_max_ps(abs_ps(v2), abs_ps(v3))));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = tkq_fp32_to_fp16(d);
        const __m256 s = _mm256_set1_ps(id);
        const __m256i q = pack32(rint_epi32(_mm256_mul_ps(v0, s)), rint_epi32(_mm256_mul_ps(v1, s)),
                                 rint_epi32(_mm256_mul_ps(v2, s)), rint_epi32(_mm256_mul_ps(v3, s)));
        _mm256_storeu_si256((__m256i *) (void *) y[b].qs, q);
    }
}

TK_AVX2 void tk_quantize_act_q8_K_avx2(const float * x, void * vy, int64_t K) {
    blk_q8_K * y = vy;
    for (int64_t b = 0; b < K / QK_K; b++, x += QK_K) {
        __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) {
            const __m256 v = _mm256_loadu_ps(x + j);
            m = _mm256_max_ps(m, abs_ps(v));
            bad = _mm256_or_ps(bad, nonfinite_ps(v));
        }
        if (_mm256_movemask_ps(bad)) {                  /* as qdot.c: d = NaN, q = 0 */
            memset(&y[b], 0, sizeof(blk_q8_K));
            y[b].d = NAN;
            continue;
        }
        const float amax = hmax_ps(m);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof(blk_q8_K));
            continue;
        }
        float max = 0.0f;      /* the first value of largest magnitude, as the scalar scan */
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) == amax) { max = x[j]; break; }
        const float iscale = -127.0f / max;
        const __m256 s = _mm256_set1_ps(iscale);
        const __m256i c127 = _mm256_set1_epi32(127);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i i[4];
            for (int k = 0; k < 4; k++) i[k] = _mm256_min_epi32(rint_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), s)), c127);
            /* bsums: 16 values each, i.e. i[0]+i[1] and i[2]+i[3] */
            const __m256i s01 = _mm256_add_epi32(i[0], i[1]), s23 = _mm256_add_epi32(i[2], i[3]);
            const __m256i h = _mm256_hadd_epi32(s01, s23);               /* pairs, lanes interleaved */
            const __m128i h2 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            const __m128i h3 = _mm_hadd_epi32(h2, h2);                   /* [s01, s23, s01, s23] */
            y[b].bsums[j / 16] = (int16_t) _mm_cvtsi128_si32(h3);
            y[b].bsums[j / 16 + 1] = (int16_t) _mm_extract_epi32(h3, 1);
            _mm256_storeu_si256((__m256i *) (void *) (y[b].qs + j), pack32(i[0], i[1], i[2], i[3]));
        }
        y[b].d = 1.0f / iscale;
    }
}

#endif
