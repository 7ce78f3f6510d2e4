/* qdot_avx2.c: AVX2 integer dot-product row kernels for the 32-value block types with Q8_0
 * activations (Q8_0, Q4_0, IQ4_NL), and AVX2 activation quantizers (x86-64 only).
 *
 * Every function carries __attribute__((target("avx2,fma,f16c"))) and is reached only
 * through tk_qdot_rows_kernel / tk_qdot_quantize_acts when cpu.c found AVX2 and the OS's
 * YMM support.
 *
 * One sequence of operations per output (qdot.h contract), whatever the tile:
 *   per block b:  w = the block's 32 weights as signed int8, a = the activation block,
 *                 p = madd(maddubs(|w|, sign(a, w)), 1)     8 int32 lanes, exact
 *                 acc = fma(broadcast(d_w * d_a), float(p), acc)
 *   then out = hsum(acc) (fixed tree).
 * ref: ggml-cpu arch/x86/quants.c ggml_vec_dot_q8_0_q8_0 / q4_0 / iq4_nl (mul_sum_i8_pairs_float)
 * and llamafile sgemm.cpp tinyBLAS_Q0_AVX (tiles of rows x tokens).  The result differs from
 * the scalar kernels (one running float sum per block, qdot.c) by float reordering only.
 */
#include <math.h>
#include <string.h>

#include "qdot.h"
#include "tk_cpu.h"

#ifdef TK_HAVE_X86
#include <immintrin.h>

#define TK_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TK_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

TK_AVX2_INLINE float hsum_ps(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    __m128 sh = _mm_movehl_ps(lo, lo);
    lo = _mm_add_ps(lo, sh);
    sh = _mm_shuffle_ps(lo, lo, 0x55);
    return _mm_cvtss_f32(_mm_add_ss(lo, sh));
}

/* ---- weight blocks as 32 signed int8 (element order 0..31) ------------------------- */
enum { W_Q8_0, W_Q4_0, W_IQ4_NL };

TK_AVX2_INLINE __m256i nibbles32(const uint8_t * qs) {       /* 16 bytes -> lo nibbles, then hi */
    const __m128i v = _mm_loadu_si128((const __m128i *) (const void *) qs);
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

TK_AVX2_INLINE __m256i load_w(int kind, const uint8_t * blk) {
    switch (kind) {
        case W_Q8_0: return _mm256_loadu_si256((const __m256i *) (const void *) (blk + 2));
        case W_Q4_0: return _mm256_sub_epi8(nibbles32(blk + 2), _mm256_set1_epi8(8));
        default: {   /* IQ4_NL: code book lookup, the same 16 entries in both lanes */
            const __m128i kv = _mm_loadu_si128((const __m128i *) (const void *) tk_kvalues_iq4nl);
            return _mm256_shuffle_epi8(_mm256_set_m128i(kv, kv), nibbles32(blk + 2));
        }
    }
}

TK_AVX2_INLINE float half_at(const uint8_t * p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* R weight rows x T activation rows, nb blocks; outputs y[t * ldy + i] for the tile's row
 * i and token t.  R, T are compile-time constants at every call (the loops unroll). */
TK_AVX2_INLINE void tile_q0(int kind, int R, int T, const uint8_t * w, size_t row_bytes, size_t wbs,
                            const uint8_t * a, size_t a_bytes, int64_t nb, float * y, int64_t ldy) {
    __m256 acc[4][4];
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[i][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i aw[4];
        float dw[4], da[4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const uint8_t * blk = w + (size_t) i * row_bytes + (size_t) b * wbs;
            aw[i] = load_w(kind, blk);
            dw[i] = half_at(blk);
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) da[t] = half_at(a + (size_t) t * a_bytes + (size_t) b * sizeof(blk_q8_0));
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *) (const void *) (a + (size_t) t * a_bytes + (size_t) b * sizeof(blk_q8_0) + 2));
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(aw[i], aw[i]), _mm256_sign_epi8(x, aw[i]));
                const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                acc[i][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw[i] * da[t]), p, acc[i][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) y[t * ldy + i] = hsum_ps(acc[i][t]);
}

/* Rows [r0, r1) x all tokens.  Generation (one token): one row at a time -- a single
 * sequential stream; interleaving 2 or 4 rows measured 15-40% slower on weights beyond the
 * caches.  Prompt: token blocks that stay in L2, in a block tiles of 3 rows x 4 tokens
 * (3x4 measured 0-20% faster than 4x3, 2x4, 1x4); remainders 1 row / 1 token at a time,
 * with the same per-output operations. */
TK_AVX2_INLINE void rows_q0(int kind, size_t wbs, const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a,
                            size_t a_bytes, int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = K / QK32;
    if (n_tok == 1) {
        int64_t r = r0;

        for (; r < r1; r++) tile_q0(kind, 1, 1, w + (size_t) r * row_bytes, row_bytes, wbs, a, a_bytes, nb, y + r, ldy);
        return;
    }
    int64_t tb = (int64_t) 196608 / (a_bytes > 0 ? (int64_t) a_bytes : 1);
    tb = tb < 4 ? 4 : tb - tb % 4;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int64_t t1 = t0 + tb < n_tok ? t0 + tb : n_tok;
        int64_t r = r0;
        for (; r + 3 <= r1; r += 3) {
            const uint8_t * wr = w + (size_t) r * row_bytes;
            int64_t t = t0;
            for (; t + 4 <= t1; t += 4) tile_q0(kind, 3, 4, wr, row_bytes, wbs, a + (size_t) t * a_bytes, a_bytes, nb, y + t * ldy + r, ldy);
            for (; t < t1; t++) tile_q0(kind, 3, 1, wr, row_bytes, wbs, a + (size_t) t * a_bytes, a_bytes, nb, y + t * ldy + r, ldy);
        }
        for (; r < r1; r++) {
            const uint8_t * wr = w + (size_t) r * row_bytes;
            int64_t t = t0;
            for (; t + 4 <= t1; t += 4) tile_q0(kind, 1, 4, wr, row_bytes, wbs, a + (size_t) t * a_bytes, a_bytes, nb, y + t * ldy + r, ldy);
            for (; t < t1; t++) tile_q0(kind, 1, 1, wr, row_bytes, wbs, a + (size_t) t * a_bytes, a_bytes, nb, y + t * ldy + r, ldy);
        }
    }
}

#define ROWS_Q0(NAME, KIND, WBS)                                                                     \
    TK_AVX2 static void NAME(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a,         \
                             size_t a_bytes, int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1) { \
        rows_q0(KIND, WBS, w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);                       \
    }
ROWS_Q0(rows_q8_0_avx2, W_Q8_0, sizeof(blk_q8_0))
ROWS_Q0(rows_q4_0_avx2, W_Q4_0, sizeof(blk_q4_0))
ROWS_Q0(rows_iq4_nl_avx2, W_IQ4_NL, sizeof(blk_iq4_nl))

tk_qdot_rows_fn tk_qdot_rows_avx2(int wtype) {
    switch (wtype) {
        case TKQ_T_Q8_0: return rows_q8_0_avx2;
        case TKQ_T_Q4_0: return rows_q4_0_avx2;
        case TKQ_T_IQ4_NL: return rows_iq4_nl_avx2;
        default: return NULL;
    }
}

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

TK_AVX2 void tk_quantize_act_q8_0_avx2(const float * x, blk_q8_0 * y, int64_t K) {
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

TK_AVX2 void tk_quantize_act_q8_K_avx2(const float * x, blk_q8_K * y, int64_t K) {
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
