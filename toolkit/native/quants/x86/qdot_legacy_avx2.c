/* qdot_legacy_avx2.c: AVX2 row kernels for the 32-value block types: Q8_0, Q4_0, Q5_0 and
 * IQ4_NL weights x Q8_0 activations, Q4_1 / Q5_1 weights x Q8_1 activations (x86-64 only;
 * contract: qdot.h, tk_qdot_rows_fn).
 *
 * Compiled with the package's portable flags; every function here carries
 * __attribute__((target("avx2,fma,f16c"))) and is handed out (the type table's AVX2
 * slot, ggml_types.c) only when cpu.c found AVX2 + FMA + F16C and the OS's YMM support.
 *
 * Inputs of a row kernel: w = weight rows r0..r1-1 (row r at w + r * row_bytes, K/32 blocks
 * each), a = n_tok activation rows (row t at a + t * a_bytes, K/32 blk_q8_0 or blk_q8_1),
 * y[t * ldy + r] = dot(weight row r, activation row t).
 *
 * Per output (weight row r, token t) every kernel does exactly this, whatever the tile:
 *   acc = 0 (8 float lanes), summs = 0 (one float; Q4_1 / Q5_1 only)
 *   for each block b, in order:
 *     Q8_0, Q4_0, Q5_0, IQ4_NL:  w = the 32 weights as signed int8 (element order)
 *                  p = madd(maddubs(|w|, sign(a, w)), 1)        8 int32 lanes, exact
 *     Q4_1, Q5_1:  w = the 32 weights as unsigned int8 in [0, 15] / [0, 31]
 *                  p = madd(maddubs(w, a), 1)                   8 int32 lanes, exact
 *                  summs = summs + m_w * s_a                    (the block minimum times
 *                                                                s_a = d_a * sum(a), Q8_1)
 *     acc = fma(broadcast(d_w * d_a), float(p), acc)          (d_w * d_a, m_w * s_a: one
 *                                                                float product each)
 *   y = hsum(acc) [+ summs], hsum = ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))
 * The integer lanes are exact, so a tile of R rows x T tokens computes each output with
 * the same float operations as a lone row and token.  Against the scalar kernels (qdot.c:
 * one running float sum per block, d*d*sumi + m*s) the difference is float reordering.
 *
 * No int16 saturation: maddubs adds two products u * s with u <= 31, |s| <= 127 (Q5_1), or
 * |w| <= 127, |a| <= 127 (the signed kinds, through the sign trick).
 *
 * Tiles and drive: generation one row at a time (a single sequential stream: interleaving
 * 2 or 4 rows measured 15-40% slower beyond the caches), prompts in tiles of 3 rows x 4
 * tokens (0-20% faster than 4x3, 2x4, 1x4; 4x4 no faster) over token blocks that stay in L2;
 * Q8_0, which has no weights to decode, in tiles of 4 rows x 2 tokens (lg_tile_q8_avx2);
 * Q8_0 with 2..16 tokens (a verify call, several sequences) in its few-token drive: 4 x 3
 * tiles over all the tokens while 4 rows stay in L1, prefetch hints a group ahead
 * (lg_q8_few; figures there).
 * Measured (tk_mat_mul, M = 2816, K = 1024, 1 thread, EPYC Zen 3 shared with other jobs),
 * ns per row, scalar -> AVX2: n_tok = 1: Q5_0 1461 -> 107, Q4_1 930 -> 73, Q5_1 1311 -> 91
 * (Q4_0: 68); n_tok = 64: Q5_0 87295 -> 3345, Q4_1 60141 -> 2867, Q5_1 85967 -> 2523.
 *
 * ref: ggml-org/llama.cpp ggml/src/ggml-cpu/arch/x86/quants.c ggml_vec_dot_q8_0_q8_0,
 * q4_0_q8_0, q5_0_q8_0, iq4_nl_q8_0, q4_1_q8_1, q5_1_q8_1 (AVX2 branches:
 * bytes_from_nibbles_32 / bytes_from_bits_32, the 0xF0 fill for Q5_0's missing fifth bit,
 * mul_sum_i8_pairs_float, summs of m * s); llamafile sgemm.cpp tinyBLAS_Q0_AVX (tiles).
 */
#include <stdint.h>
#include <string.h>

#include "quants/qdot.h"
#include "tk_cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define LG_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LG_INLINE LG_AVX2 static inline __attribute__((always_inline))

enum { LG_Q8_0, LG_Q4_0, LG_IQ4_NL, LG_Q5_0, LG_Q4_1, LG_Q5_1 };
#define LG_WITH_MIN(kind) ((kind) == LG_Q4_1 || (kind) == LG_Q5_1)

/* 16 bytes -> 32 nibbles in element order: low nibbles (elements 0..15), then high */
LG_INLINE __m256i lg_nibbles_avx2(const uint8_t * qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *) (const void *) qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

/* 4 bytes (little-endian 32 bits) -> 32 bytes, byte k = 0xFF if bit k is set, else 0 */
LG_INLINE __m256i lg_bits_avx2(const uint8_t * qh) {
    uint32_t u;
    memcpy(&u, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int) u),
                                               _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                                                  0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x((long long) 0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

/* Block layouts (quants.h): Q8_0 d qs[32]; Q4_0, IQ4_NL d qs[16]; Q5_0 d qh[4] qs[16];
 * Q4_1 d m qs[16]; Q5_1 d m qh[4] qs[16].  The weights of one block as int8: signed for
 * the kinds with Q8_0 activations (Q4_0 nibble - 8, Q5_0 (nibble | 5th bit << 4) - 16,
 * IQ4_NL the code book), unsigned for Q4_1 / Q5_1. */
LG_INLINE __m256i lg_load_w_avx2(int kind, const uint8_t * blk) {
    switch (kind) {
        case LG_Q8_0: return _mm256_loadu_si256((const __m256i *) (const void *) (blk + 2));
        case LG_Q4_0: return _mm256_sub_epi8(lg_nibbles_avx2(blk + 2), _mm256_set1_epi8(8));
        case LG_IQ4_NL: {   /* code book lookup, the same 16 entries in both lanes */
            const __m128i kv = _mm_loadu_si128((const __m128i *) (const void *) tk_kvalues_iq4nl);
            return _mm256_shuffle_epi8(_mm256_set_m128i(kv, kv), lg_nibbles_avx2(blk + 2));
        }
        case LG_Q5_0: {   /* missing 5th bit: 0xF0 | nibble = nibble - 16 as int8 */
            const __m256i hi = _mm256_andnot_si256(lg_bits_avx2(blk + 2), _mm256_set1_epi8((char) 0xF0));
            return _mm256_or_si256(lg_nibbles_avx2(blk + 6), hi);
        }
        case LG_Q4_1: return lg_nibbles_avx2(blk + 4);
        default: {
            const __m256i hi = _mm256_and_si256(lg_bits_avx2(blk + 4), _mm256_set1_epi8(0x10));
            return _mm256_or_si256(lg_nibbles_avx2(blk + 8), hi);
        }
    }
}

/* The block's f16 scales as floats: signed kinds [d, 0, 0, 0]; Q4_1 / Q5_1 [d, m, 0, 0]; a Q8_0
 * activation block [d, 0, 0, 0], a Q8_1 one [d, s, 0, 0] (exact conversions). */
LG_INLINE __m128 lg_scales_avx2(int with_min, const uint8_t * blk) {
    uint32_t u = 0;
    memcpy(&u, blk, with_min ? 4 : 2);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int) u));
}

/* R weight rows x T activation rows, nb blocks; y[t * ldy + i] for the tile's row i and
 * token t; pf (NULL: none): at each block b, a prefetch hint for block b of each of the R
 * rows from pf (rows row_bytes apart).  kind, R, T are constants at every call (the loops unroll).  Per pair and block
 * one float product [d_w * d_a, m_w * s_a] = [d_w, m_w] * [d_a, s_a]: lane 0 is the scale of
 * the integer sum, lane 1 goes to summs (summs += m_w * s_a, one rounding each). */
LG_INLINE void lg_tile_avx2(int kind, int R, int T, const uint8_t * w, size_t row_bytes, size_t wbs,
                            const uint8_t * a, size_t a_bytes, size_t abs_, int64_t nb, float * y, int64_t ldy,
                            const uint8_t * pf) {
    const int with_min = LG_WITH_MIN(kind);
    const size_t aq = with_min ? 4 : 2;   /* offset of the activation quants (Q8_1: d, s) */
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[3][4];
    __m128 summs[3][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            acc[i][t] = _mm256_setzero_ps();
            summs[i][t] = _mm_setzero_ps();
        }
    for (int64_t b = 0; b < nb; b++) {
        if (pf) {
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) _mm_prefetch((const char *) pf + (size_t) i * row_bytes + (size_t) b * wbs, _MM_HINT_T0);
        }
        __m256i ww[3], aw[3];
        __m128 dw[3], da[4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const uint8_t * blk = w + (size_t) i * row_bytes + (size_t) b * wbs;
            ww[i] = lg_load_w_avx2(kind, blk);
            aw[i] = with_min ? ww[i] : _mm256_sign_epi8(ww[i], ww[i]);
            dw[i] = lg_scales_avx2(with_min, blk);
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) da[t] = lg_scales_avx2(with_min, a + (size_t) t * a_bytes + (size_t) b * abs_);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *) (const void *) (a + (size_t) t * a_bytes + (size_t) b * abs_ + aq));
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                const __m256i p16 = with_min ? _mm256_maddubs_epi16(ww[i], x)
                                             : _mm256_maddubs_epi16(aw[i], _mm256_sign_epi8(x, ww[i]));
                const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                const __m128 prod = _mm_mul_ps(dw[i], da[t]);
                acc[i][t] = _mm256_fmadd_ps(_mm256_broadcastss_ps(prod), p, acc[i][t]);
                if (with_min) summs[i][t] = _mm_add_ps(summs[i][t], prod);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const float s = tk_hsum8_avx2(acc[i][t]);
            y[t * ldy + i] = with_min ? s + _mm_cvtss_f32(_mm_shuffle_ps(summs[i][t], summs[i][t], 1)) : s;
        }
}

/* R (3 or 1) rows from wr against the tokens [t0, t1) of a token block, 4 tokens at a time;
 * pf (NULL: none) for the first tile */
LG_INLINE void lg_rows_group(int kind, int R, const uint8_t * wr, size_t row_bytes, size_t wbs, const uint8_t * a,
                             size_t a_bytes, size_t abs_, int64_t nb, int64_t t0, int64_t t1, float * y, int64_t ldy,
                             const uint8_t * pf) {
    int64_t t = t0;
    for (; t + 4 <= t1; t += 4) {
        lg_tile_avx2(kind, R, 4, wr, row_bytes, wbs, a + (size_t) t * a_bytes, a_bytes, abs_, nb, y + t * ldy, ldy, pf);
        pf = NULL;
    }
    for (; t < t1; t++) {
        lg_tile_avx2(kind, R, 1, wr, row_bytes, wbs, a + (size_t) t * a_bytes, a_bytes, abs_, nb, y + t * ldy, ldy, pf);
        pf = NULL;
    }
}

/* Q8_0 tile: R <= 4 weight rows x T <= 4 tokens (prompts: 4 x 2; few tokens: 4 x 3), with
 * the tokens' quants in registers, |w| once per row and block, and the R x T scale products d_w * d_a of a block
 * in a small array (one vector product per token, then a broadcast load per pair): 8
 * accumulators + 2 tokens + 4 temporaries fit the 16 registers, so nothing spills (the
 * 3 x 4 tile of lg_tile_avx2 keeps 18 vectors live).  The scales come as floats, converted
 * once by the driver: dwf[4 b + i] = d_w of row i, block b; daf[t * nb + b] = d_a of token
 * t (both exact conversions of the f16 scales).  Per output the same operations as
 * lg_tile_avx2, so the outputs are bit-identical to it.  Measured (tk_mat_mul, n_tok 128,
 * 1 thread, 40 alternating runs, best): M x K = 4384 x 1024, 2816 x 1024, 1024 x 2816:
 * 31.3-33.4 (3 x 4) -> 32.9-35.1 (4 x 2, f16 scales converted in the tile) -> 34.9-37.2
 * (scales converted once by the driver).  The kinds that decode their weights (Q4_0, IQ4_NL, Q5_0) lose with 4 x 2
 * (28.5 -> 25.3, Q5_0 25.6 -> 21.7): the decode is shared by 2 tokens, not 4.  pf (NULL:
 * none): at each block b, a prefetch hint for block b of each of the R rows from pf. */
LG_INLINE void lg_tile_q8_avx2(int R, int T, const uint8_t * w, size_t row_bytes, const uint8_t * a,
                               size_t a_bytes, int64_t nb, const float * dwf, const float * daf, float * y,
                               int64_t ldy, const uint8_t * pf) {
    const size_t wbs = sizeof(blk_q8_0);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[i][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if (pf) {
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) _mm_prefetch((const char *) pf + (size_t) i * row_bytes + (size_t) b * wbs, _MM_HINT_T0);
        }
        float sc[4][4] __attribute__((aligned(16)));
        const __m128 dw = _mm_loadu_ps(dwf + 4 * b);
        __m256i x[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            _mm_store_ps(sc[t], _mm_mul_ps(dw, _mm_broadcast_ss(daf + t * nb + b)));
            x[t] = _mm256_loadu_si256((const __m256i *) (const void *) (a + (size_t) t * a_bytes + (size_t) b * wbs + 2));
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const __m256i wv = lg_load_w_avx2(LG_Q8_0, w + (size_t) i * row_bytes + (size_t) b * wbs);
            const __m256i u = _mm256_sign_epi8(wv, wv);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const __m256i p16 = _mm256_maddubs_epi16(u, _mm256_sign_epi8(x[t], wv));
                const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                acc[i][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[t][i]), p, acc[i][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) y[t * ldy + i] = tk_hsum8_avx2(acc[i][t]);
}

/* f16 scales of n blocks `stride` bytes apart as floats, dst[k * step] */
LG_INLINE void lg_scales_f32(const uint8_t * blk, size_t stride, int64_t n, float * dst, int step) {
    for (int64_t k = 0; k < n; k++) {
        uint16_t h;
        memcpy(&h, blk + (size_t) k * stride, 2);
        dst[k * step] = _cvtsh_ss(h);
    }
}

/* R (4 or 1) rows from wr against the tokens [t0, t1) of a token block (daf: their scales,
 * from t0), 2 tokens at a time; dwf gets the rows' scales */
LG_INLINE void lg_q8_rows(int R, const uint8_t * wr, size_t row_bytes, const uint8_t * a, size_t a_bytes, int64_t nb,
                          float * dwf, const float * daf, int64_t t0, int64_t t1, float * y, int64_t ldy) {
    for (int i = 0; i < R; i++) lg_scales_f32(wr + (size_t) i * row_bytes, sizeof(blk_q8_0), nb, dwf + i, 4);
    int64_t t = t0;
    for (; t + 2 <= t1; t += 2)
        lg_tile_q8_avx2(R, 2, wr, row_bytes, a + (size_t) t * a_bytes, a_bytes, nb, dwf, daf + (t - t0) * nb, y + t * ldy, ldy, NULL);
    for (; t < t1; t++)
        lg_tile_q8_avx2(R, 1, wr, row_bytes, a + (size_t) t * a_bytes, a_bytes, nb, dwf, daf + (t - t0) * nb, y + t * ldy, ldy, NULL);
}

/* ---- Q8_0 few-token drive (2 <= n_tok <= LG_Q8_FEW_MAX) ---------------------------------
 * A speculative verify call or several decoding sequences run every mat-mul on a few
 * tokens.  Groups of LG_Q8_FEW_R = 4 rows; a group's rows (4 x 34 K / 32 bytes) stay in L1
 * while its tiles walk all the tokens, so every weight block comes from memory once per
 * call; the group's first tile asks, at each block, for the same block of each row
 * LG_Q8_FEW_PF = 1 group ahead (generation's spread hints, qdot.h).  Token tiles of
 * LG_Q8_FEW_T = 3 (4 x 3: 12 accumulators), the tokens left over in one 4 x 2 or 4 x 1 tile.
 * Measured (bench/matmul_fewtok.py, Q8_0 M 16384 x K 2048, 1 thread, CPU time, min of 4
 * alternating runs x 15 calls, 2-core EPYC Zen 3 at load 8-9): ms for T = 1 2 3 4 5 8 16
 *   before (4 x 2, no hints)   2.38 4.42 5.46 6.55 7.27 10.86 17.92
 *   4 x 2, hints               2.67 4.09 5.17 6.63 7.11  9.86 17.77
 *   4 x 2, no hints            2.21 4.36 5.53 6.59 7.47 10.27 18.03
 *   4 x 3, hints (kept)        2.41 3.82 4.13 5.33 6.27  9.44 18.00
 * (T = 1, unchanged code, shows the noise: +-15%); 2 x 4 and 3 x 3 measured no better.
 * At load 3 (final code, 3 alternating runs x 9 calls), T = 1 2 3 4 5 8 9 16: before 1.73
 * 3.86 4.90 5.72 6.58 9.22 10.44 16.44, after 1.66 2.88 3.82 4.80 5.80 8.50 9.36 15.90.
 * Beyond 16 tokens (T = 16 20 24 32 48) this drive and the prompt drive below measured
 * the same (19-52 ms both, compute-bound), so LG_Q8_FEW_MAX is the range, 16.
 * Per output the same operations as every other tile (lg_tile_q8_avx2). */
#define LG_Q8_FEW_R 4
#define LG_Q8_FEW_T 3
#define LG_Q8_FEW_PF 1
#define LG_Q8_FEW_MAX 16

/* R rows from wr (dwf: their scales) against the tokens [0, n_tok) (daf: their scales),
 * tiles of LG_Q8_FEW_T tokens then one of the rest; pf (NULL: none) for the first tile */
LG_INLINE void lg_q8_few_group(int R, const uint8_t * wr, size_t row_bytes, const uint8_t * a, size_t a_bytes,
                               int64_t nb, const float * dwf, const float * daf, int64_t n_tok, float * y,
                               int64_t ldy, const uint8_t * pf) {
    int64_t t = 0;
    for (; t + LG_Q8_FEW_T <= n_tok; t += LG_Q8_FEW_T) {
        lg_tile_q8_avx2(R, LG_Q8_FEW_T, wr, row_bytes, a + (size_t) t * a_bytes, a_bytes, nb, dwf, daf + t * nb,
                        y + t * ldy, ldy, pf);
        pf = NULL;
    }
    const uint8_t * at = a + (size_t) t * a_bytes;
    const float * dt = daf + t * nb;
    _Static_assert(LG_Q8_FEW_T == 3, "the tokens left over take a tile of 2 or 1");
    if (n_tok - t == 2) lg_tile_q8_avx2(R, 2, wr, row_bytes, at, a_bytes, nb, dwf, dt, y + t * ldy, ldy, pf);
    if (n_tok - t == 1) lg_tile_q8_avx2(R, 1, wr, row_bytes, at, a_bytes, nb, dwf, dt, y + t * ldy, ldy, pf);
}

/* rows [r0, r1) x n_tok tokens; scratch: daf n_tok * nb floats, dwf 4 * nb */
LG_INLINE void lg_q8_few(const uint8_t * w, size_t row_bytes, const uint8_t * a, size_t a_bytes, int64_t nb,
                         int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1, float * daf, float * dwf) {
    const int R = LG_Q8_FEW_R;
    for (int64_t t = 0; t < n_tok; t++) lg_scales_f32(a + (size_t) t * a_bytes, sizeof(blk_q8_0), nb, daf + t * nb, 1);
    int64_t r = r0;
    for (; r + R <= r1; r += R) {
        const uint8_t * wr = w + (size_t) r * row_bytes;
        for (int i = 0; i < R; i++) lg_scales_f32(wr + (size_t) i * row_bytes, sizeof(blk_q8_0), nb, dwf + i, 4);
        const int64_t ra = r + (int64_t) R * LG_Q8_FEW_PF;
        const uint8_t * pf = ra + R <= r1 ? w + (size_t) ra * row_bytes : NULL;
        lg_q8_few_group(R, wr, row_bytes, a, a_bytes, nb, dwf, daf, n_tok, y + r, ldy, pf);
    }
    for (; r < r1; r++) {
        const uint8_t * wr = w + (size_t) r * row_bytes;
        lg_scales_f32(wr, sizeof(blk_q8_0), nb, dwf, 4);
        lg_q8_few_group(1, wr, row_bytes, a, a_bytes, nb, dwf, daf, n_tok, y + r, ldy, NULL);
    }
}

/* LG_PF_GROUP: Q4_0 / Q5_0 / IQ4_NL / Q4_1 / Q5_1 with n_tok > 1 prefetch the next row group
 * from the group's first tile, whatever n_tok.  Measured (bench/matmul_fewtok.py, M 16384 x
 * K 2048, 1 thread, CPU time, min of 3 alternating runs, load 8-11 on the 2-core Zen 3), ms
 * for T = 1 2 3 5 8 without -> with the hints: Q4_0 2.45 5.91 7.81 9.15 12.08 -> 2.59 4.16
 * 6.06 6.85 10.06; Q5_0 2.86 6.58 8.90 10.43 15.38 -> 2.85 5.03 7.56 8.08 11.22; and at
 * T = 24 32 48 still 4-8% faster with them than without (Q4_0 32.6 43.2 63.8 -> 31.1 40.8
 * 61.0), so there is no token limit. */
#define LG_Q8_TOK_FLOATS 6144   /* token scales of a token block: tb * nb <= 196608 / 34 + 2 * nb */
#define LG_Q8_MAX_NB 1024       /* K <= 32768 takes the 4 x 2 tiles (dwf: 16 KiB of stack) */

/* Rows [r0, r1) x all tokens.  Generation (one token): one row at a time (one sequential
 * weight stream).  Prompt: token blocks of about 192 KiB of activations, in a block tiles
 * of 3 rows x 4 tokens; remainders 3 x 1, 1 x 4, 1 x 1, all with the same per-output
 * operations.  The first tile of a 3-row group asks, at each block, for the same block of
 * the next 3 rows (LG_PF_GROUP).  Q8_0: its few-token drive (2..16 tokens), then tiles of
 * 4 x 2 (lg_tile_q8_avx2) over token blocks. */
LG_INLINE void lg_rows_avx2(int kind, size_t wbs, size_t abs_, const uint8_t * w, size_t row_bytes, int64_t K,
                            const uint8_t * a, size_t a_bytes, int64_t n_tok, float * y, int64_t ldy, int64_t r0,
                            int64_t r1) {
    const int64_t nb = K / QK32;
    if (n_tok == 1) {
        /* Q8_0: a prefetch hint per block, TK_QDOT_PF_NEAR rows ahead, spread over the row.
         * Measured (one 256 MiB Q8_0 matrix, K = 1024, 1 thread): 13.6 -> 18.9 GB/s; the
         * 417M Q8_0 model, tg128 -t 2, 8 alternating runs: median 33.9 -> 41.9 t/s.  The
         * other kinds are compute-bound here (8-9 GB/s); Q5_0 / Q4_1 / Q5_1 keep the
         * whole-row hint (qdot.h), Q4_0 / IQ4_NL none: measured no faster with either. */
        const int pf_row = kind == LG_Q5_0 || LG_WITH_MIN(kind);
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t * wr = w + (size_t) r * row_bytes;
            if (pf_row && r + TK_QDOT_PF_ROWS < r1) tk_qdot_prefetch_row(wr + TK_QDOT_PF_ROWS * row_bytes, row_bytes);
            const int pf_near = kind == LG_Q8_0 && r + TK_QDOT_PF_NEAR < r1;
            lg_tile_avx2(kind, 1, 1, wr, row_bytes, wbs, a, a_bytes, abs_, nb, y + r, ldy,
                         pf_near ? wr + TK_QDOT_PF_NEAR * row_bytes : NULL);
        }
        return;
    }
    if (kind == LG_Q8_0 && nb <= LG_Q8_MAX_NB) {   /* tiles of 4 rows x 2 tokens (lg_tile_q8_avx2) */
        float daf[LG_Q8_TOK_FLOATS], dwf[4 * LG_Q8_MAX_NB];
        if (n_tok <= LG_Q8_FEW_MAX && n_tok * nb <= LG_Q8_TOK_FLOATS) {
            lg_q8_few(w, row_bytes, a, a_bytes, nb, n_tok, y, ldy, r0, r1, daf, dwf);
            return;
        }
        int64_t tb = (int64_t) 196608 / (a_bytes > 0 ? (int64_t) a_bytes : 1);
        tb = tb < 2 ? 2 : tb - tb % 2;
        if (tb * nb > LG_Q8_TOK_FLOATS) tb = (LG_Q8_TOK_FLOATS / nb) & ~(int64_t) 1;
        for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
            const int64_t t1 = t0 + tb < n_tok ? t0 + tb : n_tok;
            for (int64_t t = t0; t < t1; t++) lg_scales_f32(a + (size_t) t * a_bytes, wbs, nb, daf + (t - t0) * nb, 1);
            int64_t r = r0;
            for (; r + 4 <= r1; r += 4)
                lg_q8_rows(4, w + (size_t) r * row_bytes, row_bytes, a, a_bytes, nb, dwf, daf, t0, t1, y + r, ldy);
            for (; r < r1; r++)
                lg_q8_rows(1, w + (size_t) r * row_bytes, row_bytes, a, a_bytes, nb, dwf, daf, t0, t1, y + r, ldy);
        }
        return;
    }
    int64_t tb = (int64_t) 196608 / (a_bytes > 0 ? (int64_t) a_bytes : 1);
    tb = tb < 4 ? 4 : tb - tb % 4;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int64_t t1 = t0 + tb < n_tok ? t0 + tb : n_tok;
        int64_t r = r0;
        for (; r + 3 <= r1; r += 3) {   /* the first tile prefetches the next 3 rows (LG_PF_GROUP) */
            const uint8_t * wr = w + (size_t) r * row_bytes;
            const uint8_t * pf = r + 6 <= r1 ? wr + 3 * row_bytes : NULL;
            lg_rows_group(kind, 3, wr, row_bytes, wbs, a, a_bytes, abs_, nb, t0, t1, y + r, ldy, pf);
        }
        for (; r < r1; r++)
            lg_rows_group(kind, 1, w + (size_t) r * row_bytes, row_bytes, wbs, a, a_bytes, abs_, nb, t0, t1, y + r, ldy, NULL);
    }
}

/* the row kernels the type table hands out (qdot.h) */
#define LG_ROWS(NAME, KIND, WBS, ABS)                                                                \
    LG_AVX2 void NAME(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a,                \
                      size_t a_bytes, int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1) {   \
        lg_rows_avx2(KIND, WBS, ABS, w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);               \
    }
LG_ROWS(tk_qdot_rows_q8_0_avx2, LG_Q8_0, sizeof(blk_q8_0), sizeof(blk_q8_0))
LG_ROWS(tk_qdot_rows_q4_0_avx2, LG_Q4_0, sizeof(blk_q4_0), sizeof(blk_q8_0))
LG_ROWS(tk_qdot_rows_iq4_nl_avx2, LG_IQ4_NL, sizeof(blk_iq4_nl), sizeof(blk_q8_0))
LG_ROWS(tk_qdot_rows_q5_0_avx2, LG_Q5_0, sizeof(blk_q5_0), sizeof(blk_q8_0))
LG_ROWS(tk_qdot_rows_q4_1_avx2, LG_Q4_1, sizeof(blk_q4_1), sizeof(blk_q8_1))
LG_ROWS(tk_qdot_rows_q5_1_avx2, LG_Q5_1, sizeof(blk_q5_1), sizeof(blk_q8_1))

#endif /* __x86_64__ */
