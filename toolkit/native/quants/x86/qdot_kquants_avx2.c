/* qdot_kquants_avx2.c: AVX2 row kernels for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights x
 * Q8_K activations (x86-64 only; contract: qdot.h, tk_qdot_rows_fn).
 *
 * Compiled with the package's portable flags; only the functions here carry
 * __attribute__((target("avx2,fma,f16c"))), and the type table (ggml_types.c) hands them
 * out only when cpu.c found AVX2 + FMA + F16C and the OS's YMM support.
 *
 * Inputs of a row kernel: w = weight rows r0..r1-1 (row r at w + r * row_bytes, K/256
 * super-blocks each), a = n_tok activation rows (row t at a + t * a_bytes, K/256 blk_q8_K
 * each), y[t * ldy + r] = dot(weight row r, activation row t).
 *
 * Per output (weight row r, token t) every kernel does exactly this, whatever the tile:
 *   acc = 0 (8 float lanes)
 *   for each super-block i, in order:
 *     isum = 8 int32 lanes of sum_l sc * q_l * q8_l (lane k collects a fixed set of the 256
 *            products; integer, exact)
 *     Q4_K, Q5_K:  msum = 8 int32 lanes, lane k = m_k * (bsums[2k] + bsums[2k+1])
 *                  acc = fma(d8 * d, (float) isum, acc); acc = fnma(d8 * dmin, (float) msum, acc)
 *     Q2_K:        the same with the 16 4-bit mins: lane k = m_2k bsums[2k] + m_2k+1 bsums[2k+1]
 *     Q6_K:        isum -= 32 * sc * bsums (lane-wise, exact: the -32 offset of the quants)
 *                  acc = fma(d8 * d, (float) isum, acc)
 *     Q3_K:        isum over the unsigned low + 4 * high (0..7); isum -= 4 * sc * bsums
 *                  (the -4 offset, exact); acc = fma(d8 * d, (float) isum, acc)
 *     IQ4_XS:      isum over the signed code-book values (maddubs(|w|, sign(q8, w)));
 *                  acc = fma(d8 * d, (float) isum, acc)
 *   y = hsum(acc): ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))
 * The products d8 * d and d8 * dmin are one float multiply each.  The integer lanes are
 * exact, so a tile of R rows x T tokens computes each output with the same float operations
 * as a lone row and token: the result for a token does not depend on n_tok, r0, r1 or the
 * tile it fell in.  Against the scalar reference (qdot_kquants.c, one float per
 * super-block) the difference is float reordering of the per-super-block terms only.
 *
 * No int16 saturation: _mm256_maddubs_epi16 adds two products u * s with u <= 63 (Q6_K),
 * |s| <= 127 (Q8_K quants are in [-127, 127]), so |pair| <= 16002 < 32767; IQ4_XS:
 * |w| <= 127, so |pair| <= 32258.
 *
 * Tiles: the tile functions take R weight rows x T tokens (R rows would share activation
 * loads, T tokens share each row's unpacked quants and scales); only R = 1 is instantiated,
 * T = 1..8.  Measured on this Zen 3 (EPYC, 2 shared cores), M = 2816, K = 1024:
 *   prompt, 64 tokens, ns per row and token: 1 x 8 17.5, 2 x 8 19, 1 x 4 20, 2 x 4 21-24;
 *   generation with weights beyond L3 (M = 65536): 1 row at a time 44 (Q4_K) / 62 (Q6_K)
 *   ns per row, 4 rows at a time 71 / 170 (four interleaved row streams defeat the
 *   prefetcher), so generation runs one row after the other.
 * Prompts run over chunks of KQ_RCHUNK rows so a chunk's weights stay in L1 while the
 * token groups stream past; 2..16 tokens take the few-token drive (balanced groups, the
 * first with generation's prefetch hints; figures at kq_drive_avx2).
 *
 * Q2_K, Q3_K and IQ4_XS (added later) use the same 1 x T tiles and driver; measured on the
 * same machine, M = 2816, K = 1024, ns per row (tk_mat_mul, 1 thread, scalar -> AVX2):
 *   n_tok = 1:  Q2_K 348 -> 46, Q3_K 275 -> 48, IQ4_XS 677 -> 56 (Q4_K 253 -> 41)
 *   n_tok = 64: Q2_K 15951 -> 1145, Q3_K 17236 -> 1719, IQ4_XS 41355 -> 1825 (Q4_K 1135)
 *
 * ref: ggml-org/llama.cpp ggml/src/ggml-cpu/arch/x86/quants.c ggml_vec_dot_{q2_K,q3_K,q4_K,
 * q5_K,q6_K,iq4_xs}_q8_K (AVX2 branch: the same maddubs / madd scheme, scale shuffles and
 * bsums corrections; Q3_K here folds its -4 offset into a bsums correction instead of a
 * second maddubs).
 */
#include <stdint.h>
#include <string.h>

#include "quants/qdot.h"
#include "tk_cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define KQ_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KQ_INLINE KQ_AVX2 static inline __attribute__((always_inline))

#define KQ_RMAX 4          /* largest R the tile functions accept (instantiated: 1) */
#define KQ_TMAX 8          /* largest tile: tokens */
#define KQ_RCHUNK 16       /* prompt path: rows per chunk (a chunk's weights stay cached) */

/* ---- helpers ----------------------------------------------------------------------- */

/* fixed reduction tree: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) */
KQ_INLINE float kq_half(tk_half h) { return _cvtsh_ss(h); }

/* int16 lane pairs picking 16-bit element i in every position (ggml get_scale_shuffle_k4) */
static const uint8_t kq_shuf_k4[8][32] __attribute__((aligned(32))) = {
#define KQ_S2(i) 2*(i), 2*(i)+1
#define KQ_ROW(i) { KQ_S2(i), KQ_S2(i), KQ_S2(i), KQ_S2(i), KQ_S2(i), KQ_S2(i), KQ_S2(i), KQ_S2(i), \
                    KQ_S2(i), KQ_S2(i), KQ_S2(i), KQ_S2(i), KQ_S2(i), KQ_S2(i), KQ_S2(i), KQ_S2(i) }
    KQ_ROW(0), KQ_ROW(1), KQ_ROW(2), KQ_ROW(3), KQ_ROW(4), KQ_ROW(5), KQ_ROW(6), KQ_ROW(7),
#undef KQ_ROW
#undef KQ_S2
};

/* Q6_K: from int16 scales [s0..s7 | s0..s7] (or s8..s15), the 32-value vector k (0..3)
 * of a 128-value half needs s_2k in the low 128-bit lane and s_2k+1 in the high one */
static const uint8_t kq_shuf_q6[4][32] __attribute__((aligned(32))) = {
#define KQ_S2(i) 2*(i), 2*(i)+1
#define KQ_ROW(i) { KQ_S2(2*(i)), KQ_S2(2*(i)), KQ_S2(2*(i)), KQ_S2(2*(i)), KQ_S2(2*(i)), KQ_S2(2*(i)), KQ_S2(2*(i)), KQ_S2(2*(i)), \
                    KQ_S2(2*(i)+1), KQ_S2(2*(i)+1), KQ_S2(2*(i)+1), KQ_S2(2*(i)+1), KQ_S2(2*(i)+1), KQ_S2(2*(i)+1), KQ_S2(2*(i)+1), KQ_S2(2*(i)+1) }
    KQ_ROW(0), KQ_ROW(1), KQ_ROW(2), KQ_ROW(3),
#undef KQ_ROW
#undef KQ_S2
};

KQ_INLINE __m256i kq_load(const void * p) { return _mm256_loadu_si256((const __m256i *) p); }

/* Keeps an integer accumulator in a register at this point: without it gcc reassociates
 * the (exact) integer sums of a whole super-block into one tree and spills every product
 * to the stack first (measured 2x slower on the 2 x 4 tile). */
/* Generation (the 1 x 1 tile) asks, at each super-block, for the bytes KQ_PF_BYTES ahead
 * in the weight stream: hints spread over the row instead of a burst of a whole row at a
 * time (qdot.h).  417M Q4_K_M model, tg128 -t 2, 6 alternating runs, medians: 81.6 / 74.1
 * t/s with the burst, 85.5 / 76.7 spread 4608 bytes ahead (1152: 81.4, 2304: 82.5,
 * 8192: 75.9, 12288: 73.8 against 74.1). */
#define KQ_PF_BYTES 4608
KQ_INLINE void kq_prefetch_sb(const uint8_t * p, size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *) p + o, _MM_HINT_T0);
}
#define KQ_PIN(v) __asm__("" : "+x"(v))

/* Q4_K / Q5_K 12-byte scales -> scl: the 8 6-bit scales as int16, in both 128-bit halves;
 * mns: the 8 6-bit mins as int16, each twice (m0 m0 m1 m1 ... m7 m7), to madd with bsums.
 * Bytes b0..b11 (ggml get_scale_min_k4): s0..3 = b0..3 & 63, m0..3 = b4..7 & 63,
 * s4..7 = (b8..11 & 15) | (b0..3 >> 6) << 4, m4..7 = (b8..11 >> 4) | (b4..7 >> 6) << 4.
 * Reads 16 bytes from s12 (the 4 after the scales are the next field of the block). */
static const uint8_t kq_k4_sel_a[16] __attribute__((aligned(16))) = { 0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11 };
static const uint8_t kq_k4_sel_b[16] __attribute__((aligned(16))) = {
    0x80, 0x80, 0x80, 0x80, 0, 1, 2, 3, 0x80, 0x80, 0x80, 0x80, 4, 5, 6, 7 };
static const uint8_t kq_k4_mask1[16] __attribute__((aligned(16))) = {
    63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0 };
static const uint8_t kq_k4_mask2[16] __attribute__((aligned(16))) = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15 };

KQ_INLINE void kq_scales_k4(const uint8_t * s12, __m256i * scl, __m256i * mns) {
    const __m128i v = _mm_loadu_si128((const __m128i *) (const void *) s12);
    const __m128i a = _mm_shuffle_epi8(v, _mm_load_si128((const __m128i *) (const void *) kq_k4_sel_a));  /* b0..3 b8..11 b4..7 b8..11 */
    const __m128i b = _mm_shuffle_epi8(v, _mm_load_si128((const __m128i *) (const void *) kq_k4_sel_b));  /* 0 b0..3 0 b4..7 */
    const __m128i lo = _mm_and_si128(a, _mm_load_si128((const __m128i *) (const void *) kq_k4_mask1));
    const __m128i hn = _mm_and_si128(_mm_srli_epi16(a, 4), _mm_load_si128((const __m128i *) (const void *) kq_k4_mask2));
    const __m128i h2 = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30));
    const __m128i sm = _mm_or_si128(_mm_or_si128(lo, hn), h2);                                            /* s0..s7 m0..m7 */
    *scl = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    *mns = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
}

/* every byte: 16 if bit b (0..7, a constant after inlining) of hbits' byte is set, else 0 */
KQ_INLINE __m256i kq_bit16(__m256i hbits, int b) {
    const __m256i m = _mm256_set1_epi8(0x10);
    if (b < 4) return _mm256_and_si256(_mm256_slli_epi16(hbits, 4 - b), m);
    if (b == 4) return _mm256_and_si256(hbits, m);
    return _mm256_and_si256(_mm256_srli_epi16(hbits, b - 4), m);
}

/* ---- Q4_K / Q5_K tile: R rows x T tokens (constants after inlining) -------------------
 * Element layout of a super-block: sub-block 2c (c < 4) = low nibbles of qs[32c .. 32c+32),
 * sub-block 2c+1 = their high nibbles; Q5_K's 5th bit of sub-block j is bit j of qh[l]. */
KQ_INLINE void kq_tile_q45(const int five, const uint8_t * w, size_t rb, const uint8_t * a, size_t ab, int64_t nb,
                           const int R, const int T, float * y, int64_t ldy, const uint8_t * pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[KQ_RMAX][KQ_TMAX];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    const size_t bw = five ? sizeof(blk_q5_K) : sizeof(blk_q4_K);
    for (int64_t i = 0; i < nb; i++) {
        if (pf) kq_prefetch_sb(pf + i * bw, bw);
        const uint8_t * x[KQ_RMAX];
        const blk_q8_K * q[KQ_TMAX];
        __m256i scl[KQ_RMAX], mns[KQ_RMAX];
        for (int r = 0; r < R; r++) {
            x[r] = w + r * rb + i * bw;
            kq_scales_k4(x[r] + 4, &scl[r], &mns[r]);   /* d, dmin, scales[12], ... */
        }
        for (int t = 0; t < T; t++) q[t] = (const blk_q8_K *) (const void *) (a + t * ab) + i;
        __m256i isum[KQ_RMAX][KQ_TMAX];
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++) isum[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            for (int r = 0; r < R; r++) {
                const uint8_t * qs = x[r] + (five ? offsetof(blk_q5_K, qs) : offsetof(blk_q4_K, qs));
                const __m256i bits = kq_load(qs + 32 * c);
                __m256i lo = _mm256_and_si256(bits, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                if (five) {
                    const __m256i hb = kq_load(x[r] + offsetof(blk_q5_K, qh));
                    lo = _mm256_or_si256(lo, kq_bit16(hb, 2 * c));
                    hi = _mm256_or_si256(hi, kq_bit16(hb, 2 * c + 1));
                }
                const __m256i sl = _mm256_shuffle_epi8(scl[r], kq_load(kq_shuf_k4[2 * c]));
                const __m256i sh = _mm256_shuffle_epi8(scl[r], kq_load(kq_shuf_k4[2 * c + 1]));
                for (int t = 0; t < T; t++) {
                    const __m256i pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, kq_load(q[t]->qs + 64 * c)));
                    const __m256i ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, kq_load(q[t]->qs + 64 * c + 32)));
                    isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_add_epi32(pl, ph));
                    KQ_PIN(isum[r][t]);
                }
            }
        }
        for (int r = 0; r < R; r++) {
            tk_half hd, hm;
            memcpy(&hd, x[r], 2);
            memcpy(&hm, x[r] + 2, 2);
            const __m256 xd = _mm256_set1_ps(kq_half(hd)), xm = _mm256_set1_ps(kq_half(hm));
            for (int t = 0; t < T; t++) {
                const __m256i msum = _mm256_madd_epi16(mns[r], kq_load(q[t]->bsums));
                const __m256 d8 = _mm256_broadcast_ss(&q[t]->d);
                /* d8 * d and d8 * dmin: one float product each, in every lane */
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, xd), _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
                acc[r][t] = _mm256_fnmadd_ps(_mm256_mul_ps(d8, xm), _mm256_cvtepi32_ps(msum), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) y[t * ldy + r] = tk_hsum8_avx2(acc[r][t]);
}

/* ---- Q6_K tile ------------------------------------------------------------------------
 * Element 128h + 32k + l (h < 2, k < 4, l < 32): low nibble of ql[64h + 32(k&1) + l]
 * (k >= 2: high nibble), bits 2k..2k+1 of qh[32h + l]; value 0..63, minus 32; the 16
 * signed scales cover 16 values each.  kq_vals_q6: the unsigned values (0..63) of the 64
 * elements 128h + 64p .. +64, as two vectors of 32 (k = 2p, 2p+1); the tile is kq_tile_s16. */
KQ_INLINE void kq_vals_q6(const uint8_t * blk, int h, int p, __m256i * v0, __m256i * v1) {
    const __m256i m15 = _mm256_set1_epi8(0x0F);
    const __m256i m3 = _mm256_set1_epi8(0x03), m12 = _mm256_set1_epi8(0x0C);
    const __m256i m48 = _mm256_set1_epi8(0x30), m192 = _mm256_set1_epi8((char) 0xC0);
    const blk_q6_K * x = (const blk_q6_K *) (const void *) blk;
    const __m256i b1 = kq_load(x->ql + 64 * h);
    const __m256i b2 = kq_load(x->ql + 64 * h + 32);
    const __m256i bh = kq_load(x->qh + 32 * h);
    if (p == 0) {
        *v0 = _mm256_or_si256(_mm256_and_si256(b1, m15), _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4));
        *v1 = _mm256_or_si256(_mm256_and_si256(b2, m15), _mm256_slli_epi16(_mm256_and_si256(bh, m12), 2));
    } else {
        *v0 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m15), _mm256_and_si256(bh, m48));
        *v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m15),
                              _mm256_srli_epi16(_mm256_and_si256(bh, m192), 2));
    }
}

/* ---- Q2_K tile ------------------------------------------------------------------------
 * Element 128h + 32s + l (h < 2, s < 4, l < 32): bits 2s..2s+1 of qs[32h + l], value 0..3;
 * sub-block 8h + 2s + l/16; scales[j] = scale (low nibble) | min (high nibble) of
 * sub-block j.  Per output as Q4_K: isum over sc * q * q8, msum = madd(mins, bsums),
 * acc = fma(d8 * d, isum, acc), acc = fnma(d8 * dmin, msum, acc) (the tile: kq_tile_s16).
 * kq_vals_q2: the values (0..3) of the 64 elements 128h + 64p .. +64, as two vectors of 32
 * (s = 2p, 2p+1). */
KQ_INLINE void kq_vals_q2(const uint8_t * blk, int h, int p, __m256i * v0, __m256i * v1) {
    const __m256i m3 = _mm256_set1_epi8(0x03);
    const __m256i bits = kq_load(((const blk_q2_K *) (const void *) blk)->qs + 32 * h);
    *v0 = _mm256_and_si256(_mm256_srli_epi16(bits, 4 * p), m3);
    *v1 = _mm256_and_si256(_mm256_srli_epi16(bits, 4 * p + 2), m3);
}

/* ---- Q3_K tile ------------------------------------------------------------------------
 * Element 128h + 32s + l: low bits 2s..2s+1 of qs[32h + l], high bit (4h + s) of hmask[l];
 * q = low + 4 * high - 4, sub-block 8h + 2s + l/16, 16 signed 6-bit scales (stored + 32).
 * The kernel multiplies the unsigned v = low + 4 * high (0..7) and subtracts the offset once
 * per super-block, exactly: isum -= 4 * sum_j sc_j * bsums_j (lane-wise, as Q6_K's -32).
 * Per output: acc = fma(d8 * d, isum, acc). */
/* the 16 scales - 32 as int16 (ggml's kmask1 / kmask2 unpacking of the 12 bytes: low 4 bits
 * of scale j in byte j % 8 (j >= 8: high nibble), high 2 bits in byte 8 + j % 4, bits
 * 2 (j / 4) .. 2 (j / 4) + 1) */
KQ_INLINE __m256i kq_scales_q3(const uint8_t * s12) {
    uint32_t aux[3];
    memcpy(aux, s12, 12);
    const uint32_t m2 = 0x03030303u, m4 = 0x0f0f0f0fu;
    const __m128i s = _mm_set_epi32((int) (((aux[1] >> 4) & m4) | (((aux[2] >> 6) & m2) << 4)),
                                    (int) (((aux[0] >> 4) & m4) | (((aux[2] >> 4) & m2) << 4)),
                                    (int) ((aux[1] & m4) | (((aux[2] >> 2) & m2) << 4)),
                                    (int) ((aux[0] & m4) | ((aux[2] & m2) << 4)));
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(s, _mm_set1_epi8(32)));
}

/* every byte: 4 if bit b (0..7, a constant after inlining) of hbits' byte is set, else 0 */
KQ_INLINE __m256i kq_bit4(__m256i hbits, int b) {
    const __m256i m = _mm256_set1_epi8(0x04);
    if (b < 2) return _mm256_and_si256(_mm256_slli_epi16(hbits, 2 - b), m);
    if (b == 2) return _mm256_and_si256(hbits, m);
    return _mm256_and_si256(_mm256_srli_epi16(hbits, b - 2), m);
}

/* the unsigned values (0..7) of the 64 elements 128h + 64p .. +64, as two vectors of 32
 * (s = 2p, 2p+1) */
KQ_INLINE void kq_vals_q3(const uint8_t * blk, int h, int p, __m256i * v0, __m256i * v1) {
    const __m256i m3 = _mm256_set1_epi8(0x03);
    const blk_q3_K * x = (const blk_q3_K *) (const void *) blk;
    const __m256i bits = kq_load(x->qs + 32 * h);
    const __m256i hm = kq_load(x->hmask);
    *v0 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4 * p), m3), kq_bit4(hm, 4 * h + 2 * p));
    *v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4 * p + 2), m3), kq_bit4(hm, 4 * h + 2 * p + 1));
}

/* ---- Q6_K / Q3_K / Q2_K tile: R rows x T tokens (constants after inlining) ------------
 * All three have 16 int16 scales sc_j of 16 values each and unsigned values v (kq_vals_q6 /
 * kq_vals_q3 / kq_vals_q2).  Per output and super-block: isum = sum_j sc_j (v . q8)_j
 * (exact); then Q6_K / Q3_K, which store q + off (off = 32 / 4), subtract
 * off * madd(bsums, sc) (a shift by 5 / 2) and do acc = fma(d8 * d, isum, acc); Q2_K does
 * acc = fma(d8 * d, isum, acc), acc = fnma(d8 * dmin, madd(mins, bsums), acc). */
enum { KQ_S16_Q6, KQ_S16_Q3, KQ_S16_Q2 };
KQ_INLINE void kq_tile_s16(const int kind, const uint8_t * w, size_t rb, const uint8_t * a, size_t ab, int64_t nb,
                           const int R, const int T, float * y, int64_t ldy, const uint8_t * pf) {
    const size_t bw = kind == KQ_S16_Q6 ? sizeof(blk_q6_K) : kind == KQ_S16_Q3 ? sizeof(blk_q3_K) : sizeof(blk_q2_K);
    __m256 acc[KQ_RMAX][KQ_TMAX];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        if (pf) kq_prefetch_sb(pf + i * bw, bw);
        const uint8_t * x[KQ_RMAX];
        const blk_q8_K * q[KQ_TMAX];
        __m256i sc16[KQ_RMAX], mn16[KQ_RMAX];   /* the 16 scales (Q2_K: and mins) as int16 */
        for (int r = 0; r < R; r++) {
            x[r] = w + r * rb + i * bw;
            if (kind == KQ_S16_Q6) {
                sc16[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) (const void *) ((const blk_q6_K *) (const void *) x[r])->scales));
            } else if (kind == KQ_S16_Q3) {
                sc16[r] = kq_scales_q3(((const blk_q3_K *) (const void *) x[r])->scales);
            } else {
                const __m128i m15 = _mm_set1_epi8(0x0F);
                const __m128i sm = _mm_loadu_si128((const __m128i *) (const void *) ((const blk_q2_K *) (const void *) x[r])->scales);
                sc16[r] = _mm256_cvtepu8_epi16(_mm_and_si128(sm, m15));
                mn16[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m15));
            }
        }
        for (int t = 0; t < T; t++) q[t] = (const blk_q8_K *) (const void *) (a + t * ab) + i;
        __m256i isum[KQ_RMAX][KQ_TMAX];
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++) isum[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                for (int r = 0; r < R; r++) {
                    __m256i v0, v1;
                    if (kind == KQ_S16_Q6) kq_vals_q6(x[r], h, p, &v0, &v1);
                    else if (kind == KQ_S16_Q3) kq_vals_q3(x[r], h, p, &v0, &v1);
                    else kq_vals_q2(x[r], h, p, &v0, &v1);
                    const __m256i sh = h ? _mm256_permute4x64_epi64(sc16[r], 0xEE) : _mm256_permute4x64_epi64(sc16[r], 0x44);
                    const __m256i s0 = _mm256_shuffle_epi8(sh, kq_load(kq_shuf_q6[2 * p]));
                    const __m256i s1 = _mm256_shuffle_epi8(sh, kq_load(kq_shuf_q6[2 * p + 1]));
                    for (int t = 0; t < T; t++) {
                        const int8_t * q8 = q[t]->qs + 128 * h + 64 * p;
                        const __m256i p0 = _mm256_madd_epi16(s0, _mm256_maddubs_epi16(v0, kq_load(q8)));
                        const __m256i p1 = _mm256_madd_epi16(s1, _mm256_maddubs_epi16(v1, kq_load(q8 + 32)));
                        isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_add_epi32(p0, p1));
                        KQ_PIN(isum[r][t]);
                    }
                }
            }
        }
        for (int r = 0; r < R; r++) {
            if (kind == KQ_S16_Q2) {
                const blk_q2_K * x2 = (const blk_q2_K *) (const void *) x[r];
                const __m256 xd = _mm256_set1_ps(kq_half(x2->d)), xm = _mm256_set1_ps(kq_half(x2->dmin));
                for (int t = 0; t < T; t++) {
                    const __m256i msum = _mm256_madd_epi16(mn16[r], kq_load(q[t]->bsums));
                    const __m256 d8 = _mm256_broadcast_ss(&q[t]->d);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, xd), _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
                    acc[r][t] = _mm256_fnmadd_ps(_mm256_mul_ps(d8, xm), _mm256_cvtepi32_ps(msum), acc[r][t]);
                }
                continue;
            }
            const __m256 xd = _mm256_set1_ps(kq_half(kind == KQ_S16_Q3 ? ((const blk_q3_K *) (const void *) x[r])->d
                                                                       : ((const blk_q6_K *) (const void *) x[r])->d));
            for (int t = 0; t < T; t++) {
                const __m256i msc = _mm256_madd_epi16(kq_load(q[t]->bsums), sc16[r]);
                const __m256i corr = kind == KQ_S16_Q3 ? _mm256_slli_epi32(msc, 2) : _mm256_slli_epi32(msc, 5);
                const __m256i s = _mm256_sub_epi32(isum[r][t], corr);
                const __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&q[t]->d), xd);
                acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) y[t * ldy + r] = tk_hsum8_avx2(acc[r][t]);
}

/* ---- IQ4_XS tile ------------------------------------------------------------------------
 * Sub-block j (8 of 32 values): code-book values of the low nibbles of qs[16j .. 16j+16),
 * then of their high nibbles; 6-bit scale ls_j = (scales_l[j/2] >> 4(j%2)) & 15 |
 * ((scales_h >> 2j) & 3) << 4, minus 32.  Signed weights x signed activations:
 * maddubs(|w|, sign(q8, w)) (|pair| <= 2 * 127 * 127 = 32258, no saturation).
 * Per output: acc = fma(d8 * d, isum, acc). */
KQ_INLINE __m256i kq_scales_iq4xs(const blk_iq4_xs * x) {
    uint64_t v = 0;
    const unsigned sh = x->scales_h;
    for (int j = 0; j < 8; j++) {
        const unsigned ls = ((x->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((sh >> (2 * j)) & 3) << 4);
        v |= (uint64_t) ls << (8 * j);
    }
    const __m128i s = _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long) v)), _mm_set1_epi16(32));
    return _mm256_broadcastsi128_si256(s);
}

KQ_INLINE void kq_tile_iq4xs(const uint8_t * w, size_t rb, const uint8_t * a, size_t ab, int64_t nb,
                             const int R, const int T, float * y, int64_t ldy, const uint8_t * pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m128i kv128 = _mm_loadu_si128((const __m128i *) (const void *) tk_kvalues_iq4nl);
    const __m256i kv = _mm256_broadcastsi128_si256(kv128);
    __m256 acc[KQ_RMAX][KQ_TMAX];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        if (pf) kq_prefetch_sb(pf + i * sizeof(blk_iq4_xs), sizeof(blk_iq4_xs));
        const blk_iq4_xs * x[KQ_RMAX];
        const blk_q8_K * q[KQ_TMAX];
        __m256i scl[KQ_RMAX];   /* the 8 scales - 32 as int16, in both 128-bit halves */
        for (int r = 0; r < R; r++) {
            x[r] = (const blk_iq4_xs *) (const void *) (w + r * rb) + i;
            scl[r] = kq_scales_iq4xs(x[r]);
        }
        for (int t = 0; t < T; t++) q[t] = (const blk_q8_K *) (const void *) (a + t * ab) + i;
        __m256i isum[KQ_RMAX][KQ_TMAX];
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++) isum[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {                /* sub-blocks 2c, 2c+1 */
            for (int r = 0; r < R; r++) {
                const __m128i b0 = _mm_loadu_si128((const __m128i *) (const void *) (x[r]->qs + 32 * c));
                const __m128i b1 = _mm_loadu_si128((const __m128i *) (const void *) (x[r]->qs + 32 * c + 16));
                const __m256i w0 = _mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b0, 4), b0), m4));
                const __m256i w1 = _mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b1, 4), b1), m4));
                const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
                const __m256i s0 = _mm256_shuffle_epi8(scl[r], kq_load(kq_shuf_k4[2 * c]));
                const __m256i s1 = _mm256_shuffle_epi8(scl[r], kq_load(kq_shuf_k4[2 * c + 1]));
                for (int t = 0; t < T; t++) {
                    const int8_t * q8 = q[t]->qs + 64 * c;
                    const __m256i p0 = _mm256_madd_epi16(s0, _mm256_maddubs_epi16(a0, _mm256_sign_epi8(kq_load(q8), w0)));
                    const __m256i p1 = _mm256_madd_epi16(s1, _mm256_maddubs_epi16(a1, _mm256_sign_epi8(kq_load(q8 + 32), w1)));
                    isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_add_epi32(p0, p1));
                    KQ_PIN(isum[r][t]);
                }
            }
        }
        for (int r = 0; r < R; r++) {
            const __m256 xd = _mm256_set1_ps(kq_half(x[r]->d));
            for (int t = 0; t < T; t++) {
                const __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&q[t]->d), xd);
                acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) y[t * ldy + r] = tk_hsum8_avx2(acc[r][t]);
}

/* ---- tile instances and the row driver ------------------------------------------------ */
/* pf: NULL, or where the prefetch hints of the tile's super-block i start (+ i * block bytes) */
typedef void (*kq_tile_fn)(const uint8_t * w, size_t rb, const uint8_t * a, size_t ab, int64_t nb, float * y, int64_t ldy,
                           const uint8_t * pf);

#define KQ_INST(name, body, R, T)                                                                  \
    KQ_AVX2 static void name##_##R##_##T(const uint8_t * w, size_t rb, const uint8_t * a, size_t ab, \
                                         int64_t nb, float * y, int64_t ldy, const uint8_t * pf) {  \
        body(R, T); }
/* tiles 1 x T, T = 1..8, and their table by T - 1 */
#define KQ_INST_ALL(name, body)                                                                    \
    KQ_INST(name, body, 1, 1) KQ_INST(name, body, 1, 2) KQ_INST(name, body, 1, 3)                 \
    KQ_INST(name, body, 1, 4) KQ_INST(name, body, 1, 5) KQ_INST(name, body, 1, 6)                 \
    KQ_INST(name, body, 1, 7) KQ_INST(name, body, 1, 8)                                           \
    static const kq_tile_fn name##_toks[KQ_TMAX] = { name##_1_1, name##_1_2, name##_1_3, name##_1_4, \
                                                     name##_1_5, name##_1_6, name##_1_7, name##_1_8 };

#define KQ_Q4(R, T) kq_tile_q45(0, w, rb, a, ab, nb, R, T, y, ldy, pf)
#define KQ_Q5(R, T) kq_tile_q45(1, w, rb, a, ab, nb, R, T, y, ldy, pf)
#define KQ_Q6(R, T) kq_tile_s16(KQ_S16_Q6, w, rb, a, ab, nb, R, T, y, ldy, pf)
KQ_INST_ALL(kq_q4k_avx2, KQ_Q4)
KQ_INST_ALL(kq_q5k_avx2, KQ_Q5)
KQ_INST_ALL(kq_q6k_avx2, KQ_Q6)
#define KQ_Q2(R, T) kq_tile_s16(KQ_S16_Q2, w, rb, a, ab, nb, R, T, y, ldy, pf)
#define KQ_Q3(R, T) kq_tile_s16(KQ_S16_Q3, w, rb, a, ab, nb, R, T, y, ldy, pf)
#define KQ_IQ4XS(R, T) kq_tile_iq4xs(w, rb, a, ab, nb, R, T, y, ldy, pf)
KQ_INST_ALL(kq_q2k_avx2, KQ_Q2)
KQ_INST_ALL(kq_q3k_avx2, KQ_Q3)
KQ_INST_ALL(kq_iq4xs_avx2, KQ_IQ4XS)

/* Few-token drive, 2 <= n_tok <= KQ_FEW_MAX (a verify call, several sequences): the tokens
 * in ceil(n_tok / KQ_TMAX) groups of nearly equal size (9 = 4 + 5, not 8 + 1); in a chunk
 * of KQ_RCHUNK rows, every row against the first group with generation's prefetch hints
 * KQ_PF_BYTES ahead in the weight stream (the rows come from memory then), then against
 * the other groups (the chunk's rows cached).  So every weight block is read from memory
 * once per call, and the first pass streams as generation does.  Measured
 * (bench/matmul_fewtok.py, M 16384 x K 2048, 1 thread, CPU time, min of 3 alternating
 * runs x 9 calls, 2-core EPYC Zen 3 at load 7-9), ms for T = 1 2 3 4 5 8 9 16:
 *   Q4_K before      1.45 2.23 2.44 2.95 3.34 5.02 6.43 10.31
 *        no hints    1.78 2.60 2.69 3.35 3.79 5.45 6.41 10.07
 *        hints       1.79 1.86 2.32 2.76 3.15 4.69 6.07  9.62
 *   Q6_K before      2.30 3.25 3.51 3.79 4.25 5.73 6.95 10.49
 *        no hints    2.00 3.24 3.60 3.75 3.99 5.64 7.20 10.57
 *        hints       2.92 2.79 2.78 3.07 3.55 5.30 6.24  9.92
 * (T = 1, unchanged, shows the noise).  At load 3 (final code, 3 alternating runs x 9
 * calls): Q4_K before 1.20 1.74 2.09 2.56 2.96 4.37 5.56 8.69, after 1.21 1.59 2.06 2.50
 * 2.98 4.41 5.33 8.67; Q6_K before 1.39 2.21 2.60 2.89 3.21 4.74 6.01 9.20, after 1.50 1.80
 * 2.22 2.64 3.16 4.72 5.65 9.02.  From 8 tokens the tiles are compute-bound; at
 * T = 16 20 24 32 48 Q4_K measured the same with this drive or the prompt drive, so
 * KQ_FEW_MAX is the range, 16. */
#define KQ_FEW_MAX 16

/* Chunks of KQ_RCHUNK rows; in a chunk, groups of up to KQ_TMAX tokens, each row of the
 * chunk against the whole group (its unpacked weights reused by every token of the group;
 * the chunk's rows and the group's activations stay in L1).  Generation (n_tok == 1) is
 * the 1 x 1 tile row after row, with the prefetch hints.  The last group takes a smaller
 * tile, with the same per-output operations. */
static void kq_drive_avx2(const kq_tile_fn toks[KQ_TMAX], const uint8_t * w, size_t row_bytes, int64_t K,
                          const uint8_t * a, size_t a_bytes, int64_t n_tok, float * y, int64_t ldy, int64_t r0,
                          int64_t r1) {
    const int64_t nb = K / QK_K;
    const int few = n_tok <= KQ_FEW_MAX;
    const int64_t ng = (n_tok + KQ_TMAX - 1) / KQ_TMAX;   /* token groups */
    for (int64_t rc = r0; rc < r1; rc += KQ_RCHUNK) {
        const int64_t rce = r1 - rc < KQ_RCHUNK ? r1 : rc + KQ_RCHUNK;
        int64_t t = 0;
        for (int64_t g = 0; g < ng; g++) {
            const int tn = few ? (int) ((n_tok - t) / (ng - g)) : (int) (n_tok - t < KQ_TMAX ? n_tok - t : KQ_TMAX);
            const int pf = few ? g == 0 : tn == 1;   /* prompts: the 1 x 1 tile keeps its hints */
            for (int64_t r = rc; r < rce; r++) {
                const uint8_t * wr = w + r * row_bytes;
                toks[tn - 1](wr, row_bytes, a + t * a_bytes, a_bytes, nb, y + t * ldy + r, ldy, pf ? wr + KQ_PF_BYTES : NULL);
            }
            t += tn;
        }
    }
}

/* the row kernels the type table hands out (qdot.h) */
#define KQ_ROWS_FN(fname, name)                                                                \
    void fname(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes,        \
               int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1) {                          \
        kq_drive_avx2(name##_toks, w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);                  \
    }
KQ_ROWS_FN(tk_qdot_rows_q4_K_avx2, kq_q4k_avx2)
KQ_ROWS_FN(tk_qdot_rows_q5_K_avx2, kq_q5k_avx2)
KQ_ROWS_FN(tk_qdot_rows_q6_K_avx2, kq_q6k_avx2)
KQ_ROWS_FN(tk_qdot_rows_q2_K_avx2, kq_q2k_avx2)
KQ_ROWS_FN(tk_qdot_rows_q3_K_avx2, kq_q3k_avx2)
KQ_ROWS_FN(tk_qdot_rows_iq4_xs_avx2, kq_iq4xs_avx2)

#endif /* __x86_64__ */
