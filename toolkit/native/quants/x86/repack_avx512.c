/* repack_avx512.c: AVX-512 VNNI tiles of the repacked formats (repack.h), 16 rows x T <= 8
 * tokens, in the reference order of repack.c's scalar tiles (the same bits).
 *
 * One zmm holds 4 bytes of each of the 16 rows; vpdpbusd adds, into each row's int32 lane,
 * the 4 products with the token's 4 activation bytes broadcast (an embedded-broadcast load):
 * 8 such instructions sum a Q8_0 block for 16 rows, then one conversion and one fma finish
 * the block for 16 rows.  vpdpbusd multiplies unsigned by signed bytes:
 *   Q8_0: the weights are stored + 128 (unsigned); the lane starts at -128 * sum(a) of the
 *         block (the drive's `neg`), so it ends at the exact sum of w * a;
 *   Q4_K: the nibbles are unsigned already; per sub-block pair one vpmulld by the scales,
 *         the mins by vpmaddwd of (m_2k, m_2k+1) pairs with the token's sub-block sums.
 * Handed out at TK_CPU_AVX512 only (repack.c tk_repack_rows).
 * ref: Intel SDM vol. 2 VPDPBUSD; llama.cpp ggml/src/ggml-cpu/arch/x86/repack.cpp
 * (ggml_gemm_q4_K_8x8_q8_K: interleaved rows, the mins from bsums).
 */
#include <stdint.h>
#include <string.h>

#include "quants/repack.h"
#include "quants/x86/repack_scales.h"
#include "quants/x86/tk_avx512.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define RPZ TK_AVX512_TARGET
#define RPZ_INLINE RPZ TK_AVX512_INLINE

RPZ_INLINE __m512i rp_avx512_bcast4(const void * p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

RPZ_INLINE void rp_avx512_store(float * y, __m512 v, int nr) {
    if (nr == TK_RP_ROWS) {
        _mm512_storeu_ps(y, v);
        return;
    }
    float tmp[TK_RP_ROWS];   /* a matrix's last group: its rows only */
    _mm512_storeu_ps(tmp, v);
    memcpy(y, tmp, (size_t) nr * sizeof(float));
}

/* 16 f16 scales as floats (exact) */
RPZ_INLINE __m512 rp_avx512_f16x16(const tk_half * d) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (const void *) d));
}

/* Q8_0 (q4x NULL) and Q4_0 / IQ4_NL (q4x: their tk_rp_q4x_table in each 128-bit lane): per
 * block the 8 registers of unsigned weights wq[k] against the activation bytes 4k .. 4k + 3
 * (Q4_0 / IQ4_NL: k < 4 the low nibbles of q[k], k >= 4 the high nibbles of q[k - 4], looked
 * up by vpshufb), then the same exact sums and float steps */
RPZ_INLINE void rp_avx512_q8_tile(int T, const uint8_t * wg, size_t wbytes, const __m512i * q4x, int64_t nb,
                                  const uint8_t * a, size_t a_bytes, const float * daf, const int32_t * neg, int nr,
                                  float * y, int64_t ldy) {
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t * w = wg + (size_t) b * wbytes;   /* d[16] (f16), then the weight bytes */
        __m512i wq[8];
        if (q4x) {
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m512i v = _mm512_loadu_si512((const void *) (w + 32 + 64 * k));
                wq[k] = _mm512_shuffle_epi8(*q4x, _mm512_and_si512(v, m4));
                wq[k + 4] = _mm512_shuffle_epi8(*q4x, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
            }
        } else {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) wq[k] = _mm512_loadu_si512((const void *) (w + 32 + 64 * k));
        }
        const __m512 dw = rp_avx512_f16x16((const tk_half *) (const void *) w);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const uint8_t * q = a + (size_t) t * a_bytes + (size_t) b * sizeof(blk_q8_0) + 2;
            __m512i s0 = _mm512_set1_epi32(neg[t * nb + b]), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 8; k += 2) {
                s0 = _mm512_dpbusd_epi32(s0, wq[k], rp_avx512_bcast4(q + 4 * k));
                s1 = _mm512_dpbusd_epi32(s1, wq[k + 1], rp_avx512_bcast4(q + 4 * k + 4));
            }
            const __m512 p = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(daf[t * nb + b])), p, acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) rp_avx512_store(y + t * ldy, acc[t], nr);
}

RPZ_INLINE void rp_avx512_q4k_tile(int T, const tk_rp_q4_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                             const float * daf, const int16_t * bs, int nr, float * y, int64_t ldy) {
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const tk_rp_q4_K * w = wg + i;
        const int8_t * q[8];
        __m512i is[8];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            q[t] = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
            is[t] = _mm512_setzero_si512();
        }
        for (int c = 0; c < 4; c++) {
            __m512i lo[8], hi[8];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) lo[t] = hi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i v = _mm512_loadu_si512((const void *) w->q[c][k]);
                const __m512i vl = _mm512_and_si512(v, m4), vh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    lo[t] = _mm512_dpbusd_epi32(lo[t], vl, rp_avx512_bcast4(q[t] + 64 * c + 4 * k));
                    hi[t] = _mm512_dpbusd_epi32(hi[t], vh, rp_avx512_bcast4(q[t] + 64 * c + 32 + 4 * k));
                }
            }
            const __m512i sl = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) (const void *) w->sc[2 * c]));
            const __m512i sh = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) (const void *) w->sc[2 * c + 1]));
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
                is[t] = _mm512_add_epi32(is[t], _mm512_add_epi32(_mm512_mullo_epi32(lo[t], sl), _mm512_mullo_epi32(hi[t], sh)));
        }
        __m512i mn[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) mn[k] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *) (const void *) w->mn[k]));
        const __m512 d = rp_avx512_f16x16(w->d), dm = rp_avx512_f16x16(w->dmin);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const int16_t * s = bs + (t * nb + i) * 8;
            __m512i ms = _mm512_madd_epi16(mn[0], rp_avx512_bcast4(s));
            ms = _mm512_add_epi32(ms, _mm512_madd_epi16(mn[1], rp_avx512_bcast4(s + 2)));
            ms = _mm512_add_epi32(ms, _mm512_madd_epi16(mn[2], rp_avx512_bcast4(s + 4)));
            ms = _mm512_add_epi32(ms, _mm512_madd_epi16(mn[3], rp_avx512_bcast4(s + 6)));
            const __m512 da = _mm512_set1_ps(daf[t * nb + i]);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(is[t]), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, da), _mm512_cvtepi32_ps(ms), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) rp_avx512_store(y + t * ldy, acc[t], nr);
}

/* Q6_K's 6-bit values of sub-block j, 16 rows x 4 values per register (repack.h): wq[m] = the
 * bytes & 63 (m < 3), wq[3] = their bits 6-7 gathered (epi16 shifts: the bits a shift brings in
 * from the lane's other byte are masked off, or land where a later byte's mask takes them off) */
RPZ_INLINE void rp_avx512_q6k_unpack(const uint8_t * q, __m512i wq[4]) {
    const __m512i m63 = _mm512_set1_epi8(63), m3 = _mm512_set1_epi8(3), m15 = _mm512_set1_epi8(15),
                  mc0 = _mm512_set1_epi8((char) 0xC0);
    const __m512i r0 = _mm512_loadu_si512((const void *) q), r1 = _mm512_loadu_si512((const void *) (q + 64)),
                  r2 = _mm512_loadu_si512((const void *) (q + 128));
    wq[0] = _mm512_and_si512(r0, m63);
    wq[1] = _mm512_and_si512(r1, m63);
    wq[2] = _mm512_and_si512(r2, m63);
    /* bits 0-1 from r0 >> 6, bits 2-7 from r1 >> 4 (2-3 its own 6-7) */
    const __m512i lo = _mm512_ternarylogic_epi32(_mm512_srli_epi16(r0, 6), _mm512_srli_epi16(r1, 4), m3, 0xE4);
    /* bits 0-3 from lo, bits 4-7 from (r2 & 0xC0) >> 2 (4-5 its own 6-7, 6-7 zero) */
    wq[3] = _mm512_ternarylogic_epi32(lo, _mm512_srli_epi16(_mm512_and_si512(r2, mc0), 2), m15, 0xE4);
}

/* Q6_K: per sub-block j, p = sum u a over its 16 values (vpdpbusd, u unsigned), is += sc_j p
 * (vpmulld); per block the - 32 sum_j sc_j bsum_j of the stored + 32 (vpmaddwd of the row's
 * scale pairs against the token's bsum pairs) */
RPZ_INLINE void rp_avx512_q6k_tile(int T, const tk_rp_q6_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                             const float * daf, const int16_t * bs, int nr, float * y, int64_t ldy) {
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const tk_rp_q6_K * w = wg + i;
        const int8_t * q[8];
        __m512i is[8];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            q[t] = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
            is[t] = _mm512_setzero_si512();
        }
        for (int k = 0; k < 8; k++) {
            /* the pair (sc_2k, sc_2k+1) of each row: int16 halves of its lane */
            const __m512i sp = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *) (const void *) w->sc[k]));
#pragma GCC unroll 2
            for (int e = 0; e < 2; e++) {
                const int j = 2 * k + e;
                const __m512i sc = e ? _mm512_srai_epi32(sp, 16) : _mm512_srai_epi32(_mm512_slli_epi32(sp, 16), 16);
                __m512i wq[4], p[8];
                rp_avx512_q6k_unpack(w->q[j][0][0], wq);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) p[t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[0], rp_avx512_bcast4(q[t] + 16 * j));
#pragma GCC unroll 3
                for (int m = 1; m < 4; m++)
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) p[t] = _mm512_dpbusd_epi32(p[t], wq[m], rp_avx512_bcast4(q[t] + 16 * j + 4 * m));
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) is[t] = _mm512_add_epi32(is[t], _mm512_mullo_epi32(p[t], sc));
            }
        }
        __m512i sp[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) sp[k] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *) (const void *) w->sc[k]));
        const __m512 d = rp_avx512_f16x16(w->d);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const int16_t * s = bs + (t * nb + i) * 16;
            __m512i off = _mm512_madd_epi16(sp[0], rp_avx512_bcast4(s));
#pragma GCC unroll 7
            for (int k = 1; k < 8; k++) off = _mm512_add_epi32(off, _mm512_madd_epi16(sp[k], rp_avx512_bcast4(s + 2 * k)));
            const __m512i x = _mm512_sub_epi32(is[t], _mm512_slli_epi32(off, 5));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(daf[t * nb + i])), _mm512_cvtepi32_ps(x), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) rp_avx512_store(y + t * ldy, acc[t], nr);
}

/* Q5_K: Q4_K's tile, each nibble with its 5th bit (bit 2c / 2c + 1 of the qh byte, rotated to
 * bit 4), the scales and mins unpacked from the group's packed bytes once per block */
RPZ_INLINE void rp_avx512_q5k_tile(int T, const tk_rp_q5_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                   const float * daf, const int16_t * bs, int nr, float * y, int64_t ldy) {
    const __m512i m4 = _mm512_set1_epi8(15), m5 = _mm512_set1_epi8(31);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const tk_rp_q5_K * w = wg + i;
        uint8_t sc[8][16], mn[4][16][2];
        tk_rp_q5k_scales(w->s12, sc, mn);
        const int8_t * q[8];
        __m512i is[8];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            q[t] = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
            is[t] = _mm512_setzero_si512();
        }
        for (int c = 0; c < 4; c++) {
            /* bit 2c (2c + 1) of each byte to bit 4 of the same byte: a 32-bit rotation */
            const __m512i rl = _mm512_set1_epi32((4 - 2 * c) & 31), rh = _mm512_set1_epi32((3 - 2 * c) & 31);
            __m512i lo[8], hi[8];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) lo[t] = hi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i v = _mm512_loadu_si512((const void *) w->q[c][k]);
                const __m512i hb = _mm512_loadu_si512((const void *) w->qh[k]);
                /* (m4 ? v : the rotation) & 31 (_MM_TERNLOG A ? B : C = 0xCA) */
                const __m512i vl = _mm512_and_si512(_mm512_ternarylogic_epi32(m4, v, _mm512_rolv_epi32(hb, rl), 0xCA), m5);
                const __m512i vh = _mm512_and_si512(
                    _mm512_ternarylogic_epi32(m4, _mm512_srli_epi16(v, 4), _mm512_rolv_epi32(hb, rh), 0xCA), m5);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    lo[t] = _mm512_dpbusd_epi32(lo[t], vl, rp_avx512_bcast4(q[t] + 64 * c + 4 * k));
                    hi[t] = _mm512_dpbusd_epi32(hi[t], vh, rp_avx512_bcast4(q[t] + 64 * c + 32 + 4 * k));
                }
            }
            const __m512i sl = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) (const void *) sc[2 * c]));
            const __m512i sh = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) (const void *) sc[2 * c + 1]));
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
                is[t] = _mm512_add_epi32(is[t], _mm512_add_epi32(_mm512_mullo_epi32(lo[t], sl), _mm512_mullo_epi32(hi[t], sh)));
        }
        __m512i mv[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) mv[k] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *) (const void *) mn[k]));
        const __m512 d = rp_avx512_f16x16(w->d), dm = rp_avx512_f16x16(w->dmin);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const int16_t * s = bs + (t * nb + i) * 8;
            __m512i ms = _mm512_madd_epi16(mv[0], rp_avx512_bcast4(s));
            ms = _mm512_add_epi32(ms, _mm512_madd_epi16(mv[1], rp_avx512_bcast4(s + 2)));
            ms = _mm512_add_epi32(ms, _mm512_madd_epi16(mv[2], rp_avx512_bcast4(s + 4)));
            ms = _mm512_add_epi32(ms, _mm512_madd_epi16(mv[3], rp_avx512_bcast4(s + 6)));
            const __m512 da = _mm512_set1_ps(daf[t * nb + i]);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(is[t]), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, da), _mm512_cvtepi32_ps(ms), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) rp_avx512_store(y + t * ldy, acc[t], nr);
}

/* IQ4_XS: per sub-block of 32, IQ4_NL's looked-up u = v + 128 from -128 * bsum (the sub-block's
 * two Q8_K bsums), then one vpmulld by the 16 rows' ls - 32 */
RPZ_INLINE void rp_avx512_iq4xs_tile(int T, const tk_rp_iq4_xs * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                     const float * daf, const int16_t * bs, int nr, float * y, int64_t ldy) {
    const __m512i m4 = _mm512_set1_epi8(15);
    uint8_t u[16];
    tk_rp_q4x_table(TK_GGML_IQ4_NL, u);
    const __m512i tbl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *) (const void *) u));
    __m512 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const tk_rp_iq4_xs * w = wg + i;
        int8_t ls[8][16];
        tk_rp_iq4xs_scales(w->sh, w->sl, ls);
        const int8_t * q[8];
        const int16_t * s[8];
        __m512i is[8];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            q[t] = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
            s[t] = bs + (t * nb + i) * 8;
            is[t] = _mm512_setzero_si512();
        }
        for (int j = 0; j < 8; j++) {
            __m512i p[8];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) p[t] = _mm512_set1_epi32(-128 * (int32_t) s[t][j]);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m512i v = _mm512_loadu_si512((const void *) w->q[j][k]);
                const __m512i ul = _mm512_shuffle_epi8(tbl, _mm512_and_si512(v, m4));
                const __m512i uh = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    p[t] = _mm512_dpbusd_epi32(p[t], ul, rp_avx512_bcast4(q[t] + 32 * j + 4 * k));
                    p[t] = _mm512_dpbusd_epi32(p[t], uh, rp_avx512_bcast4(q[t] + 32 * j + 16 + 4 * k));
                }
            }
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *) (const void *) ls[j]));
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) is[t] = _mm512_add_epi32(is[t], _mm512_mullo_epi32(p[t], sc));
        }
        const __m512 d = rp_avx512_f16x16(w->d);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(daf[t * nb + i])), _mm512_cvtepi32_ps(is[t]), acc[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) rp_avx512_store(y + t * ldy, acc[t], nr);
}

/* one function per token count (T a constant in each, so the tiles unroll) */
#define RPZ_CASES(F, ...)                                                                   \
    switch (T) {                                                                           \
        case 8: F(8, __VA_ARGS__); break;                                                  \
        case 7: F(7, __VA_ARGS__); break;                                                  \
        case 6: F(6, __VA_ARGS__); break;                                                  \
        case 5: F(5, __VA_ARGS__); break;                                                  \
        case 4: F(4, __VA_ARGS__); break;                                                  \
        case 3: F(3, __VA_ARGS__); break;                                                  \
        case 2: F(2, __VA_ARGS__); break;                                                  \
        default: F(1, __VA_ARGS__); break;                                                 \
    }

RPZ static void rp_avx512_q8_tiles(const tk_rp_q8_0 * wg, int64_t nb, const uint8_t * a, size_t a_bytes, const float * daf,
                             const int32_t * neg, int T, int nr, float * y, int64_t ldy) {
    RPZ_CASES(rp_avx512_q8_tile, (const uint8_t *) wg, sizeof *wg, NULL, nb, a, a_bytes, daf, neg, nr, y, ldy)
}

RPZ_INLINE void rp_avx512_q4x_tiles(int type, const tk_rp_q4_0 * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                    const float * daf, const int32_t * neg, int T, int nr, float * y, int64_t ldy) {
    uint8_t u[16];
    tk_rp_q4x_table(type, u);
    const __m512i tbl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *) (const void *) u));
    RPZ_CASES(rp_avx512_q8_tile, (const uint8_t *) wg, sizeof *wg, &tbl, nb, a, a_bytes, daf, neg, nr, y, ldy)
}

RPZ static void rp_avx512_q4_0_tiles(const tk_rp_q4_0 * wg, int64_t nb, const uint8_t * a, size_t a_bytes, const float * daf,
                                     const int32_t * neg, int T, int nr, float * y, int64_t ldy) {
    rp_avx512_q4x_tiles(TK_GGML_Q4_0, wg, nb, a, a_bytes, daf, neg, T, nr, y, ldy);
}

RPZ static void rp_avx512_iq4_nl_tiles(const tk_rp_q4_0 * wg, int64_t nb, const uint8_t * a, size_t a_bytes, const float * daf,
                                       const int32_t * neg, int T, int nr, float * y, int64_t ldy) {
    rp_avx512_q4x_tiles(TK_GGML_IQ4_NL, wg, nb, a, a_bytes, daf, neg, T, nr, y, ldy);
}

void tk_rp_rows_q4_0_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q4_0(TK_GGML_Q4_0, rp_avx512_q4_0_tiles, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void tk_rp_rows_iq4_nl_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                              int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q4_0(TK_GGML_IQ4_NL, rp_avx512_iq4_nl_tiles, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

RPZ static void rp_avx512_q4k_tiles(const tk_rp_q4_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes, const float * daf,
                              const int16_t * bs, int T, int nr, float * y, int64_t ldy) {
    RPZ_CASES(rp_avx512_q4k_tile, wg, nb, a, a_bytes, daf, bs, nr, y, ldy)
}

RPZ static void rp_avx512_q6k_tiles(const tk_rp_q6_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes, const float * daf,
                              const int16_t * bs, int T, int nr, float * y, int64_t ldy) {
    RPZ_CASES(rp_avx512_q6k_tile, wg, nb, a, a_bytes, daf, bs, nr, y, ldy)
}

void tk_rp_rows_q6_K_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q6_K(rp_avx512_q6k_tiles, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void tk_rp_rows_q8_0_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q8_0(rp_avx512_q8_tiles, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void tk_rp_rows_q4_K_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q4_K(rp_avx512_q4k_tiles, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

RPZ static void rp_avx512_q5k_tiles(const tk_rp_q5_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes, const float * daf,
                                    const int16_t * bs, int T, int nr, float * y, int64_t ldy) {
    RPZ_CASES(rp_avx512_q5k_tile, wg, nb, a, a_bytes, daf, bs, nr, y, ldy)
}

RPZ static void rp_avx512_iq4xs_tiles(const tk_rp_iq4_xs * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                      const float * daf, const int16_t * bs, int T, int nr, float * y, int64_t ldy) {
    RPZ_CASES(rp_avx512_iq4xs_tile, wg, nb, a, a_bytes, daf, bs, nr, y, ldy)
}

void tk_rp_rows_q5_K_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q5_K(rp_avx512_q5k_tiles, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void tk_rp_rows_iq4_xs_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                              int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_iq4_xs(rp_avx512_iq4xs_tiles, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

#endif /* __x86_64__ && __GNUC__ */
