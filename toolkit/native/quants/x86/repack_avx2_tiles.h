/* repack_avx2_tiles.h: the AVX2 tiles of the repacked formats (repack.h), included by
 * repack_avx2.c (plain AVX2: vpmaddubsw + vpmaddwd) and repack_avxvnni.c (AVX-VNNI: vpdpbusd on
 * ymm), with RPY (the target attribute), RPY_NAME(x) (the names) and RPY_VNNI (0 / 1) set.
 *
 * A group's 16 rows are two ymm halves (rows 0-7, 8-15: the first and second 32 bytes of each
 * 4-byte-group line); a tile is 8 rows x up to 4 tokens, run over the halves and the token
 * quads of the drive's 16 x T tile.  The integer sums are exact and each output's float steps
 * are the scalar tiles' (repack.c), so both files give the scalar bits:
 *   RPY_DOT(acc, u, s): acc + per int32 lane the 4 products u8 * s8.  VNNI: vpdpbusd.  Plain:
 *   vpmaddubsw then vpmaddwd by 1; vpmaddubsw saturates its int16 pair sums, which the Q4_K
 *   (u <= 15) and Q6_K (u <= 63) values with |s| <= 128 never reach.  Q8_0 (u = w + 128 up to
 *   255) takes the sign form instead in the plain file: vpmaddubsw(|w|, sign(a, w)), |w| <= 128,
 *   |a| <= 127 (as qdot_legacy_avx2.c), from 0 rather than from -128 sum(a).
 */
#include <stdint.h>
#include <string.h>

#include "quants/repack.h"
#include "quants/x86/repack_scales.h"
#include "tk_cpu.h"

#define RPY_INLINE RPY static inline __attribute__((always_inline))

RPY_INLINE __m256i RPY_NAME(bc4)(const void * p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

#if RPY_VNNI
#define RPY_DOT(acc, u, s) TK_DPBUSD256((acc), (u), (s))
#else
#define RPY_DOT(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#endif

/* 8 f16 scales as floats (exact; F16C) */
RPY_INLINE __m256 RPY_NAME(f16x8)(const tk_half * d) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (const void *) d));
}

RPY_INLINE void RPY_NAME(store)(float * y, __m256 v, int nr) {
    if (nr >= 8) {
        _mm256_storeu_ps(y, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    for (int r = 0; r < nr; r++) y[r] = tmp[r];
}

/* ---- Q8_0, Q4_0, IQ4_NL: 8 rows (half h) x T <= 4 tokens ----
 * q4x NULL: Q8_0; else the nibbles' values in each 128-bit lane (tk_rp_q4x_table's u = v + 128
 * with VNNI; v itself, signed, in the plain file's sign form): k < 4 the low nibbles of q[k]
 * against activation bytes 4k .., k >= 4 the high nibbles of q[k - 4] against 4k .. */
#ifndef RPY_Q8_UNROLL
#define RPY_Q8_UNROLL 4
#endif
RPY_INLINE __m256i RPY_NAME(q8w)(const uint8_t * w, const __m256i * q4x, int k, int h) {
    if (!q4x) {
        const __m256i u = _mm256_loadu_si256((const __m256i *) (const void *) (w + 32 + 64 * k + 32 * h));
        return RPY_VNNI ? u : _mm256_xor_si256(u, _mm256_set1_epi8((char) 0x80));   /* plain: w signed */
    }
    const __m256i v = _mm256_loadu_si256((const __m256i *) (const void *) (w + 32 + 64 * (k & 3) + 32 * h));
    const __m256i n = k < 4 ? v : _mm256_srli_epi16(v, 4);
    return _mm256_shuffle_epi8(*q4x, _mm256_and_si256(n, _mm256_set1_epi8(15)));
}

RPY_INLINE void RPY_NAME(q8)(int T, int h, const uint8_t * wg, size_t wbytes, const __m256i * q4x, int64_t nb,
                             const uint8_t * a, size_t a_bytes, const float * daf, const int32_t * neg, int nr, float * y,
                             int64_t ldy) {
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t * w = wg + (size_t) b * wbytes;   /* d[16] (f16), then the weight bytes */
        __m256i p[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) p[t] = RPY_VNNI ? _mm256_set1_epi32(neg[t * nb + b]) : _mm256_setzero_si256();
#if RPY_VNNI
#pragma GCC unroll 8
#else
#pragma GCC unroll 2   /* plain AVX2: 53 GMAC/s against 46 fully unrolled, 52 at 1 (one thread, 3584 x 1024 x 512) */
#endif
        for (int k = 0; k < 8; k++) {
            const __m256i u = RPY_NAME(q8w)(w, q4x, k, h);
#if RPY_VNNI
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) p[t] = RPY_DOT(p[t], u, RPY_NAME(bc4)(a + (size_t) t * a_bytes + (size_t) b * sizeof(blk_q8_0) + 2 + 4 * k));
#else
            const __m256i wa = _mm256_abs_epi8(u);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const __m256i s = _mm256_sign_epi8(RPY_NAME(bc4)(a + (size_t) t * a_bytes + (size_t) b * sizeof(blk_q8_0) + 2 + 4 * k), u);
                p[t] = RPY_DOT(p[t], wa, s);
            }
#endif
        }
        const __m256 dw = RPY_NAME(f16x8)((const tk_half *) (const void *) w + 8 * h);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(daf[t * nb + b])), _mm256_cvtepi32_ps(p[t]), acc[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) RPY_NAME(store)(y + t * ldy + 8 * h, acc[t], nr - 8 * h);
}

/* ---- Q4_K ---- */
RPY_INLINE void RPY_NAME(q4k)(int T, int h, const tk_rp_q4_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                              const float * daf, const int16_t * bs, int nr, float * y, int64_t ldy) {
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const tk_rp_q4_K * w = wg + i;
        const int8_t * q[4];
        __m256i is[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            q[t] = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
            is[t] = _mm256_setzero_si256();
        }
        for (int c = 0; c < 4; c++) {
#if RPY_VNNI
            __m256i lo[4], hi[4];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) lo[t] = hi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *) (const void *) w->q[c][k][8 * h]);
                const __m256i vl = _mm256_and_si256(v, m4), vh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    lo[t] = RPY_DOT(lo[t], vl, RPY_NAME(bc4)(q[t] + 64 * c + 4 * k));
                    hi[t] = RPY_DOT(hi[t], vh, RPY_NAME(bc4)(q[t] + 64 * c + 32 + 4 * k));
                }
            }
            const __m256i sl = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) (const void *) (w->sc[2 * c] + 8 * h)));
            const __m256i sh = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) (const void *) (w->sc[2 * c + 1] + 8 * h)));
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                is[t] = _mm256_add_epi32(is[t], _mm256_add_epi32(_mm256_mullo_epi32(lo[t], sl), _mm256_mullo_epi32(hi[t], sh)));
#else
            /* one nibble half at a time (sub-block 2c + hf): 4 int16 pair-sum registers live in
             * the k loop instead of 8, so the tile's accumulators stay in the 16 ymm registers.
             * int16 pair sums over the sub-block: 8 x 2 x 15 x 128 = 30720 < 32768 */
#pragma GCC unroll 2
            for (int hf = 0; hf < 2; hf++) {
                __m256i ps[4];
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) ps[t] = _mm256_setzero_si256();
#pragma GCC unroll 2   /* 86 GMAC/s against 60 fully unrolled (gcc re-associates the adds and spills) */
                for (int k = 0; k < 8; k++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *) (const void *) w->q[c][k][8 * h]);
                    const __m256i vx = _mm256_and_si256(hf ? _mm256_srli_epi16(v, 4) : v, m4);
#pragma GCC unroll 4
                    for (int t = 0; t < T; t++)
                        ps[t] = _mm256_add_epi16(ps[t], _mm256_maddubs_epi16(vx, RPY_NAME(bc4)(q[t] + 64 * c + 32 * hf + 4 * k)));
                }
                /* the scale in both int16 halves of the row's lane: vpmaddwd gives sc * (pair sums) */
                const __m256i sx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) (const void *) (w->sc[2 * c + hf] + 8 * h)));
                const __m256i sx2 = _mm256_or_si256(sx, _mm256_slli_epi32(sx, 16));
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(ps[t], sx2));
            }
#endif
        }
        __m256i mn[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) mn[k] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *) (const void *) w->mn[k][8 * h]));
        const __m256 d = RPY_NAME(f16x8)(w->d + 8 * h), dm = RPY_NAME(f16x8)(w->dmin + 8 * h);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const int16_t * s = bs + (t * nb + i) * 8;
            __m256i ms = _mm256_madd_epi16(mn[0], RPY_NAME(bc4)(s));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mn[1], RPY_NAME(bc4)(s + 2)));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mn[2], RPY_NAME(bc4)(s + 4)));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mn[3], RPY_NAME(bc4)(s + 6)));
            const __m256 da = _mm256_set1_ps(daf[t * nb + i]);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(is[t]), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, da), _mm256_cvtepi32_ps(ms), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) RPY_NAME(store)(y + t * ldy + 8 * h, acc[t], nr - 8 * h);
}

/* ---- Q6_K ----
 * the 6-bit values of sub-block j, rows 8h .. 8h + 7 (repack.h): wq[m] = the bytes & 63 (m < 3),
 * wq[3] = their bits 6-7 gathered ((r2 & 0xC0) | (r1 & 0xC0) >> 2 | (r0 & 0xC0) >> 4, then >> 2:
 * the epi16 shifts bring in only zero bits) */
RPY_INLINE void RPY_NAME(q6k_unpack)(const uint8_t * q, int h, __m256i wq[4]) {
    const __m256i m63 = _mm256_set1_epi8(63), mc0 = _mm256_set1_epi8((char) 0xC0);
    const __m256i r0 = _mm256_loadu_si256((const __m256i *) (const void *) (q + 32 * h)),
                  r1 = _mm256_loadu_si256((const __m256i *) (const void *) (q + 64 + 32 * h)),
                  r2 = _mm256_loadu_si256((const __m256i *) (const void *) (q + 128 + 32 * h));
    wq[0] = _mm256_and_si256(r0, m63);
    wq[1] = _mm256_and_si256(r1, m63);
    wq[2] = _mm256_and_si256(r2, m63);
    const __m256i v = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(r2, mc0), _mm256_srli_epi16(_mm256_and_si256(r1, mc0), 2)),
                                      _mm256_srli_epi16(_mm256_and_si256(r0, mc0), 4));
    wq[3] = _mm256_srli_epi16(v, 2);
}

/* per sub-block j: VNNI p = sum u a (vpdpbusd), is += sc_j p (vpmulld); plain: two int16 sums
 * of two vpmaddubsw each (|pair sum| <= 2 x 63 x 128, two: 32256 < 32768), is += vpmaddwd by
 * sc_j in both int16 halves of the row's lane.  Per block - 32 sum_j sc_j bsum_j (vpmaddwd of the
 * row's scale pairs against the token's bsum pairs) */
RPY_INLINE void RPY_NAME(q6k)(int T, int h, const tk_rp_q6_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                              const float * daf, const int16_t * bs, int nr, float * y, int64_t ldy) {
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const tk_rp_q6_K * w = wg + i;
        const int8_t * q[4];
        __m256i is[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            q[t] = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
            is[t] = _mm256_setzero_si256();
        }
        for (int k = 0; k < 8; k++) {
            const __m256i sp = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) (const void *) w->sc[k][8 * h]));
#pragma GCC unroll 2
            for (int e = 0; e < 2; e++) {
                const int j = 2 * k + e;
                __m256i wq[4];
                RPY_NAME(q6k_unpack)(w->q[j][0][0], h, wq);
#if RPY_VNNI
                const __m256i sc = e ? _mm256_srai_epi32(sp, 16) : _mm256_srai_epi32(_mm256_slli_epi32(sp, 16), 16);
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    __m256i p = RPY_DOT(_mm256_setzero_si256(), wq[0], RPY_NAME(bc4)(q[t] + 16 * j));
                    p = RPY_DOT(p, wq[1], RPY_NAME(bc4)(q[t] + 16 * j + 4));
                    p = RPY_DOT(p, wq[2], RPY_NAME(bc4)(q[t] + 16 * j + 8));
                    p = RPY_DOT(p, wq[3], RPY_NAME(bc4)(q[t] + 16 * j + 12));
                    is[t] = _mm256_add_epi32(is[t], _mm256_mullo_epi32(p, sc));
                }
#else
                const __m256i sc2 = e ? _mm256_blend_epi16(sp, _mm256_srli_epi32(sp, 16), 0x55)
                                      : _mm256_blend_epi16(sp, _mm256_slli_epi32(sp, 16), 0xAA);
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    const __m256i x = _mm256_add_epi16(_mm256_maddubs_epi16(wq[0], RPY_NAME(bc4)(q[t] + 16 * j)),
                                                       _mm256_maddubs_epi16(wq[1], RPY_NAME(bc4)(q[t] + 16 * j + 4)));
                    const __m256i z = _mm256_add_epi16(_mm256_maddubs_epi16(wq[2], RPY_NAME(bc4)(q[t] + 16 * j + 8)),
                                                       _mm256_maddubs_epi16(wq[3], RPY_NAME(bc4)(q[t] + 16 * j + 12)));
                    is[t] = _mm256_add_epi32(is[t], _mm256_add_epi32(_mm256_madd_epi16(x, sc2), _mm256_madd_epi16(z, sc2)));
                }
#endif
            }
        }
        const __m256 d = RPY_NAME(f16x8)(w->d + 8 * h);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const int16_t * s = bs + (t * nb + i) * 16;
            __m256i off = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                off = _mm256_add_epi32(off, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) (const void *) w->sc[k][8 * h])),
                                                              RPY_NAME(bc4)(s + 2 * k)));
            const __m256i x = _mm256_sub_epi32(is[t], _mm256_slli_epi32(off, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(daf[t * nb + i])), _mm256_cvtepi32_ps(x), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) RPY_NAME(store)(y + t * ldy + 8 * h, acc[t], nr - 8 * h);
}

/* ---- Q5_K: Q4_K's sums on 5-bit values (the nibble | bit n of the qh byte moved to bit 4) ---- */
RPY_INLINE __m256i RPY_NAME(q5v)(__m256i nib, __m256i hb, int n) {
    const __m256i b4 = n <= 4 ? _mm256_sll_epi32(hb, _mm_cvtsi32_si128(4 - n)) : _mm256_srl_epi32(hb, _mm_cvtsi32_si128(n - 4));
    return _mm256_or_si256(_mm256_and_si256(nib, _mm256_set1_epi8(15)), _mm256_and_si256(b4, _mm256_set1_epi8(16)));
}

RPY_INLINE void RPY_NAME(q5k)(int T, int h, const tk_rp_q5_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                              const float * daf, const int16_t * bs, int nr, float * y, int64_t ldy) {
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const tk_rp_q5_K * w = wg + i;
        uint8_t sc[8][16], mn[4][16][2];
        tk_rp_q5k_scales(w->s12, sc, mn);
        const int8_t * q[4];
        __m256i is[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            q[t] = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
            is[t] = _mm256_setzero_si256();
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
#if RPY_VNNI
            __m256i lo[4], hi[4];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) lo[t] = hi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *) (const void *) w->q[c][k][8 * h]);
                const __m256i hb = _mm256_loadu_si256((const __m256i *) (const void *) w->qh[k][8 * h]);
                const __m256i vl = RPY_NAME(q5v)(v, hb, 2 * c), vh = RPY_NAME(q5v)(_mm256_srli_epi16(v, 4), hb, 2 * c + 1);
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    lo[t] = RPY_DOT(lo[t], vl, RPY_NAME(bc4)(q[t] + 64 * c + 4 * k));
                    hi[t] = RPY_DOT(hi[t], vh, RPY_NAME(bc4)(q[t] + 64 * c + 32 + 4 * k));
                }
            }
            const __m256i sl = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) (const void *) (sc[2 * c] + 8 * h)));
            const __m256i sh = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) (const void *) (sc[2 * c + 1] + 8 * h)));
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                is[t] = _mm256_add_epi32(is[t], _mm256_add_epi32(_mm256_mullo_epi32(lo[t], sl), _mm256_mullo_epi32(hi[t], sh)));
#else
            /* as Q4_K's plain tile, the int16 pair sums over 4 of the 8 lines at a time:
             * 4 x 2 x 31 x 128 = 31744 < 32768 */
#pragma GCC unroll 2
            for (int hf = 0; hf < 2; hf++) {
                const __m256i sx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) (const void *) (sc[2 * c + hf] + 8 * h)));
                const __m256i sx2 = _mm256_or_si256(sx, _mm256_slli_epi32(sx, 16));
#pragma GCC unroll 2
                for (int k0 = 0; k0 < 8; k0 += 4) {
                    __m256i ps[4];
#pragma GCC unroll 4
                    for (int t = 0; t < T; t++) ps[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
                    for (int k = k0; k < k0 + 4; k++) {
                        const __m256i v = _mm256_loadu_si256((const __m256i *) (const void *) w->q[c][k][8 * h]);
                        const __m256i hb = _mm256_loadu_si256((const __m256i *) (const void *) w->qh[k][8 * h]);
                        const __m256i vx = RPY_NAME(q5v)(hf ? _mm256_srli_epi16(v, 4) : v, hb, 2 * c + hf);
#pragma GCC unroll 4
                        for (int t = 0; t < T; t++)
                            ps[t] = _mm256_add_epi16(ps[t], _mm256_maddubs_epi16(vx, RPY_NAME(bc4)(q[t] + 64 * c + 32 * hf + 4 * k)));
                    }
#pragma GCC unroll 4
                    for (int t = 0; t < T; t++) is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(ps[t], sx2));
                }
            }
#endif
        }
        __m256i mv[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) mv[k] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *) (const void *) mn[k][8 * h]));
        const __m256 d = RPY_NAME(f16x8)(w->d + 8 * h), dm = RPY_NAME(f16x8)(w->dmin + 8 * h);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const int16_t * s = bs + (t * nb + i) * 8;
            __m256i ms = _mm256_madd_epi16(mv[0], RPY_NAME(bc4)(s));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mv[1], RPY_NAME(bc4)(s + 2)));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mv[2], RPY_NAME(bc4)(s + 4)));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mv[3], RPY_NAME(bc4)(s + 6)));
            const __m256 da = _mm256_set1_ps(daf[t * nb + i]);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(is[t]), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, da), _mm256_cvtepi32_ps(ms), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) RPY_NAME(store)(y + t * ldy + 8 * h, acc[t], nr - 8 * h);
}

/* ---- IQ4_XS: per sub-block of 32 the looked-up nibbles (IQ4_NL's table), times ls - 32.
 * VNNI: u = v + 128 from -128 * bsum, one vpmulld per sub-block; plain: the sign form (v signed,
 * |v| <= 127, pair sums <= 32512) and vpmaddwd by ls - 32 in both int16 halves ---- */
RPY_INLINE void RPY_NAME(iq4xs)(int T, int h, const tk_rp_iq4_xs * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                const float * daf, const int16_t * bs, int nr, float * y, int64_t ldy) {
    const __m256i m4 = _mm256_set1_epi8(15);
    uint8_t u_[16];
    tk_rp_q4x_table(TK_GGML_IQ4_NL, u_);
    const __m128i t_ = _mm_loadu_si128((const __m128i *) (const void *) u_);
    const __m256i tbl = _mm256_broadcastsi128_si256(RPY_VNNI ? t_ : _mm_xor_si128(t_, _mm_set1_epi8((char) 0x80)));
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const tk_rp_iq4_xs * w = wg + i;
        int8_t ls[8][16];
        tk_rp_iq4xs_scales(w->sh, w->sl, ls);
        const int8_t * q[4];
        const int16_t * s[4];
        __m256i is[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            q[t] = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
            s[t] = bs + (t * nb + i) * 8;
            is[t] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 8; j++) {
            const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *) (const void *) (ls[j] + 8 * h)));
#if RPY_VNNI
            __m256i p[4];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) p[t] = _mm256_set1_epi32(-128 * (int32_t) s[t][j]);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *) (const void *) w->q[j][k][8 * h]);
                const __m256i ul = _mm256_shuffle_epi8(tbl, _mm256_and_si256(v, m4));
                const __m256i uh = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    p[t] = RPY_DOT(p[t], ul, RPY_NAME(bc4)(q[t] + 32 * j + 4 * k));
                    p[t] = RPY_DOT(p[t], uh, RPY_NAME(bc4)(q[t] + 32 * j + 16 + 4 * k));
                }
            }
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) is[t] = _mm256_add_epi32(is[t], _mm256_mullo_epi32(p[t], sc));
#else
            const __m256i sx2 = _mm256_or_si256(_mm256_and_si256(sc, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(sc, 16));
#pragma GCC unroll 2
            for (int k = 0; k < 4; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *) (const void *) w->q[j][k][8 * h]);
                const __m256i wl = _mm256_shuffle_epi8(tbl, _mm256_and_si256(v, m4));
                const __m256i wh = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                const __m256i al = _mm256_abs_epi8(wl), ah = _mm256_abs_epi8(wh);
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    const __m256i pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(RPY_NAME(bc4)(q[t] + 32 * j + 4 * k), wl));
                    const __m256i ph = _mm256_maddubs_epi16(ah, _mm256_sign_epi8(RPY_NAME(bc4)(q[t] + 32 * j + 16 + 4 * k), wh));
                    is[t] = _mm256_add_epi32(is[t], _mm256_add_epi32(_mm256_madd_epi16(pl, sx2), _mm256_madd_epi16(ph, sx2)));
                }
            }
            (void) s;
#endif
        }
        const __m256 d = RPY_NAME(f16x8)(w->d + 8 * h);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(daf[t * nb + i])), _mm256_cvtepi32_ps(is[t]), acc[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) RPY_NAME(store)(y + t * ldy + 8 * h, acc[t], nr - 8 * h);
}

/* the drive's 16 x T tile: the halves holding rows, token quads (a constant T in each call);
 * W: the tile's leading weight arguments */
#define RPY_TILES(NAME, KIND, WT, ST, PER, ...)                                                            \
    RPY static void RPY_NAME(NAME##_tiles)(const WT * wg, int64_t nb, const uint8_t * a, size_t a_bytes,    \
                                           const float * daf, const ST * s, int T, int nr, float * y, int64_t ldy) { \
        __VA_ARGS__;                                                                                       \
        for (int h = 0; h < 2 && 8 * h < nr; h++)                                                         \
            for (int t = 0; t < T; t += 4) {                                                               \
                const uint8_t * at = a + (size_t) t * a_bytes;                                             \
                const float * dt = daf + t * nb;                                                           \
                const ST * st = s + t * nb * (PER);                                                        \
                switch (T - t < 4 ? T - t : 4) {                                                           \
                    case 4: RPY_NAME(KIND)(4, h, W, nb, at, a_bytes, dt, st, nr, y + t * ldy, ldy); break; \
                    case 3: RPY_NAME(KIND)(3, h, W, nb, at, a_bytes, dt, st, nr, y + t * ldy, ldy); break; \
                    case 2: RPY_NAME(KIND)(2, h, W, nb, at, a_bytes, dt, st, nr, y + t * ldy, ldy); break; \
                    default: RPY_NAME(KIND)(1, h, W, nb, at, a_bytes, dt, st, nr, y + t * ldy, ldy); break; \
                }                                                                                          \
            }                                                                                              \
    }
/* Q4_0 / IQ4_NL: the nibble table in both lanes (VNNI: u = v + 128; plain: v) */
#define RPY_Q4X_TABLE(TYPE)                                                                                \
    uint8_t u_[16];                                                                                        \
    tk_rp_q4x_table((TYPE), u_);                                                                           \
    const __m128i t_ = _mm_loadu_si128((const __m128i *) (const void *) u_);                               \
    const __m256i tbl = _mm256_broadcastsi128_si256(RPY_VNNI ? t_ : _mm_xor_si128(t_, _mm_set1_epi8((char) 0x80)))
#define W (const uint8_t *) wg, sizeof *wg, NULL
RPY_TILES(q8, q8, tk_rp_q8_0, int32_t, 1, (void) 0)
#undef W
#define W (const uint8_t *) wg, sizeof *wg, &tbl
RPY_TILES(q4_0, q8, tk_rp_q4_0, int32_t, 1, RPY_Q4X_TABLE(TK_GGML_Q4_0))
RPY_TILES(iq4_nl, q8, tk_rp_q4_0, int32_t, 1, RPY_Q4X_TABLE(TK_GGML_IQ4_NL))
#undef W
#define W wg
RPY_TILES(q4k, q4k, tk_rp_q4_K, int16_t, 8, (void) 0)
RPY_TILES(q6k, q6k, tk_rp_q6_K, int16_t, 16, (void) 0)
RPY_TILES(q5k, q5k, tk_rp_q5_K, int16_t, 8, (void) 0)
RPY_TILES(iq4xs, iq4xs, tk_rp_iq4_xs, int16_t, 8, (void) 0)
#undef W

void RPY_NAME(rows_q5_K)(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes, int64_t n_tok,
                         const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q5_K(RPY_NAME(q5k_tiles), wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}
void RPY_NAME(rows_iq4_xs)(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes, int64_t n_tok,
                           const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_iq4_xs(RPY_NAME(iq4xs_tiles), wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void RPY_NAME(rows_q4_0)(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes, int64_t n_tok,
                         const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q4_0(TK_GGML_Q4_0, RPY_NAME(q4_0_tiles), wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}
void RPY_NAME(rows_iq4_nl)(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes, int64_t n_tok,
                           const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q4_0(TK_GGML_IQ4_NL, RPY_NAME(iq4_nl_tiles), wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}
void RPY_NAME(rows_q8_0)(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes, int64_t n_tok,
                         const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q8_0(RPY_NAME(q8_tiles), wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}
void RPY_NAME(rows_q4_K)(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes, int64_t n_tok,
                         const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q4_K(RPY_NAME(q4k_tiles), wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}
void RPY_NAME(rows_q6_K)(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes, int64_t n_tok,
                         const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q6_K(RPY_NAME(q6k_tiles), wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}
