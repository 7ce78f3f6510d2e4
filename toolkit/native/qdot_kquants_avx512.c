/* qdot_kquants_avx512.c: AVX-512 VNNI row kernels for Q4_K, Q5_K, Q6_K, Q3_K and Q2_K weights
 * x Q8_K activations, prompts (n_tok >= 2); generation (n_tok == 1) runs the AVX2 kernels
 * (x86-64 only; contract: qdot.h, tk_qdot_rows_fn).
 *
 * Compiled with the package's portable flags; every function here carries TK_AVX512_TARGET
 * (tk_avx512.h) and the type table (ggml_types.c) hands them out only at TK_CPU_AVX512
 * (cpu.c: AVX-512 F + BW + VL + VNNI and the OS's ZMM state).  Tests build this file under
 * SIMDe too (-DTK_EMULATE_AVX512, tests/unit/test_avx512_emulated.py).
 *
 * Per output exactly the operations of qdot_kquants_avx2.c (its contract at the top), so the
 * outputs are bit-identical to the AVX2 kernels': 8 int32 lanes isum per super-block, lane k
 * holding the same products as AVX2's lane k (exact integers), then the same float
 * operations in the same order on 8 float lanes and the same reduction tree.
 *
 * Integer part, per 64 weights and token: one 512-bit register holds two 32-value pieces
 * that meet 64 consecutive Q8_K quants (Q4_K / Q5_K: the low- and high-nibble sub-blocks 2c,
 * 2c+1 of qs[32c .. 32c+32); Q6_K / Q3_K / Q2_K: the two 32-value vectors of AVX2's (h, p)
 * step), so the activations are one 64-byte load:
 *   p    = vpdpbusd(0, v, q8)        16 int32 lanes, each the sum of 4 products u8 * s8
 *   isum = vpdpwssd(isum, p, (sc, 0)) lane += p * sc: the low int16 of p times the scale,
 *                                     the high one (p's sign) times 0
 * exact because |p| <= 4 * 63 * 127 = 32004 fits int16 (weights 0..63: Q6_K; Q5_K 0..31,
 * Q4_K 0..15, Q3_K 0..7, Q2_K 0..3; Q8_K quants in [-127, 127]) and vpdpwssd does not
 * saturate; per super-block isum's two 256-bit halves are added, giving AVX2's lanes (its
 * lane k = products 4k..4k+3 of both 32-value pieces).  The unsigned weights need no sign
 * trick.  The mins / offset corrections and the float part run on 256-bit registers as in
 * AVX2.
 *
 * Cost, reasoned (NOT measured: this was written on a Zen 3 without AVX-512 and checked only
 * under emulation): per 32 weights x 1 token, AVX2 spends vpmaddubsw + vpmaddwd + 1 vpaddd
 * (3 instructions on 256 bits); here vpdpbusd + vpdpwssd cover 64 weights x 1 token
 * (1 instruction per 32 MACs, a third of AVX2's), plus per super-block and token one
 * extract + add for the halves (2 per 256 MACs).  The weight unpacking (broadcast load,
 * shift, mask; Q5_K / Q6_K / Q3_K: the high bits) and the scale permutes are per row and
 * shared by the tile's T = 8 tokens, as in AVX2.  Zen 4 executes 512-bit operations as two
 * 256-bit halves, so its gain is the instruction count, not the width; Intel cores with two
 * 512-bit FMA ports gain more.  The float part per super-block and token is AVX2's (it is
 * what keeps the outputs bit-identical).  Tiles: 1 row x 8 tokens (8 isum + 8 acc
 * registers), rows in chunks of 16 as the AVX2 driver.
 *
 * ref: Intel SDM vol. 2 VPDPBUSD, VPDPWSSD; ggml-org/llama.cpp ggml/src/ggml-cpu/arch/x86/
 * quants.c ggml_vec_dot_{q2_K,q3_K,q4_K,q5_K,q6_K}_q8_K (the scale layouts, ggml's
 * kmask unpacking of the Q4_K / Q3_K scales).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qdot.h"
#include "tk_avx512.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define KZ TK_AVX512_TARGET
#define KZ_INLINE KZ TK_AVX512_INLINE
#define KZ_TMAX 8          /* tokens per tile */
#define KZ_RCHUNK 16       /* rows per chunk: a chunk's weights stay cached while the token groups pass */

/* 32 bytes at p in both 256-bit halves */
KZ_INLINE __m512i kz_bcast32(const void * p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *) p)); }

/* int16 / int32 lanes: lo in the low 256-bit half, hi in the high one */
KZ_INLINE __m512i kz_halves16(short lo, short hi) { return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1); }
KZ_INLINE __m512i kz_halves32(int lo, int hi) { return _mm512_inserti64x4(_mm512_set1_epi32(lo), _mm256_set1_epi32(hi), 1); }

/* every byte: ((v >> count) & mask) << up, count per 256-bit half (cnt: kz_halves16) */
KZ_INLINE __m512i kz_field(__m512i v, __m512i cnt, char mask, int up) {
    const __m512i f = _mm512_and_si512(_mm512_srlv_epi16(v, cnt), _mm512_set1_epi8(mask));
    return up ? _mm512_slli_epi16(f, up) : f;
}

/* isum += scale * (4-product sums of v . q8), v: 64 unsigned weights, q8: 64 quants */
KZ_INLINE __m512i kz_dot(__m512i isum, __m512i v, const int8_t * q8, __m512i scale) {
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, _mm512_loadu_si512((const void *) q8));
    return _mm512_dpwssd_epi32(isum, p, scale);
}

/* AVX2's 8 isum lanes: the two halves added */
KZ_INLINE __m256i kz_fold(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

/* super-block i of a weight row (blocks bw bytes) and of the T activation rows (q) */
KZ_INLINE const uint8_t * kz_sb(const uint8_t * w, size_t bw, int64_t i, const uint8_t * a, size_t ab, int T,
                                const blk_q8_K ** q) {
    for (int t = 0; t < T; t++) q[t] = (const blk_q8_K *) (const void *) (a + t * ab) + i;
    return w + i * bw;
}

/* the float step of the types with mins (Q4_K, Q5_K, Q2_K), AVX2's order:
 * acc = fma(d8 * d, isum, acc); acc = fnma(d8 * dmin, madd(mins, bsums), acc) */
KZ_INLINE __m256 kz_acc_min(__m256 acc, __m512i isum, __m256i mins, const blk_q8_K * q, __m256 xd, __m256 xm) {
    const __m256i msum = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *) (const void *) q->bsums));
    const __m256 d8 = _mm256_broadcast_ss(&q->d);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d8, xd), _mm256_cvtepi32_ps(kz_fold(isum)), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(d8, xm), _mm256_cvtepi32_ps(msum), acc);
}

/* keeps an accumulator in a register here (qdot_kquants_avx2.c's KQ_PIN); not under SIMDe */
#ifdef TK_EMULATE_AVX512
#define KZ_PIN(v) ((void) 0)
#else
#define KZ_PIN(v) __asm__("" : "+v"(v))
#endif

/* ---- Q4_K / Q5_K ------------------------------------------------------------------------
 * The 12 scale bytes (ggml's utmp / kmask unpacking) -> sc8: the scales s0..s7 as int32
 * (= (s, 0) int16 pairs); mns: the mins as int16, each twice (m0 m0 m1 m1 ...), to madd
 * with the 16 bsums (AVX2's msum lanes). */
KZ_INLINE void kz_scales_k4(const uint8_t * s12, __m256i * sc8, __m256i * mns) {
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    uint32_t u[4];
    memcpy(u, s12, 12);
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);     /* m4..m7 */
    const uint32_t m03 = u[1] & k1;                             /* m0..m3 */
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);            /* s4..s7 */
    u[2] = m03;
    u[0] &= k1;                                                 /* s0..s3 */
    const __m128i sm = _mm_loadu_si128((const __m128i *) (const void *) u);
    *sc8 = _mm256_cvtepu8_epi32(sm);
    *mns = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
}

/* 1 row x T tokens (T a constant after inlining) */
KZ_INLINE void kz_tile_q45(const int five, const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, const int T,
                           float * y, int64_t ldy) {
    const size_t bw = five ? sizeof(blk_q5_K) : sizeof(blk_q4_K);
    const size_t qs_off = five ? offsetof(blk_q5_K, qs) : offsetof(blk_q4_K, qs);
    __m256 acc[KZ_TMAX];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const blk_q8_K * q[KZ_TMAX];
        const uint8_t * x = kz_sb(w, bw, i, a, ab, T, q);
        __m256i sc8, mns;
        kz_scales_k4(x + 4, &sc8, &mns);                        /* d, dmin, scales[12], ... */
        const __m512i sc = _mm512_castsi256_si512(sc8);
        __m512i isum[KZ_TMAX];
        for (int t = 0; t < T; t++) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            /* low nibbles (sub-block 2c) | high nibbles (2c + 1) */
            __m512i v = kz_field(kz_bcast32(x + qs_off + 32 * c), kz_halves16(0, 4), 0x0F, 0);
            if (five) v = _mm512_or_si512(v, kz_field(kz_bcast32(x + offsetof(blk_q5_K, qh)), kz_halves16(2 * c, 2 * c + 1), 1, 4));
            const __m512i s = _mm512_permutexvar_epi32(kz_halves32(2 * c, 2 * c + 1), sc);
            for (int t = 0; t < T; t++) {
                isum[t] = kz_dot(isum[t], v, q[t]->qs + 64 * c, s);
                KZ_PIN(isum[t]);
            }
        }
        tk_half hd, hm;
        memcpy(&hd, x, 2);
        memcpy(&hm, x + 2, 2);
        const __m256 xd = _mm256_set1_ps(_cvtsh_ss(hd)), xm = _mm256_set1_ps(_cvtsh_ss(hm));
        for (int t = 0; t < T; t++) acc[t] = kz_acc_min(acc[t], isum[t], mns, q[t], xd, xm);
    }
    for (int t = 0; t < T; t++) y[t * ldy] = tk_hsum8_avx2(acc[t]);
}

/* ---- Q6_K / Q3_K / Q2_K: 16 scales of 16 values ------------------------------------------
 * Step (h, p) (h, p < 2) covers the 64 values 128h + 64p .. +64: 128-bit lane j of the
 * register holds values 16j .. 16j + 16 of them, scale 8h + 4p + j. */
enum { KZ_Q6, KZ_Q3, KZ_Q2 };

/* Q3_K's 16 scales - 32 as int16 (ggml's kmask unpacking: low 4 bits in the nibbles of
 * bytes 0..7, high 2 bits in bytes 8..11) */
KZ_INLINE __m256i kz_scales_q3(const uint8_t * s12) {
    const uint32_t k4 = 0x0f0f0f0f, k2 = 0x03030303;
    uint32_t u[4], v[3];
    memcpy(v, s12, 12);
    u[0] = (v[0] & k4) | ((v[2] & k2) << 4);
    u[1] = (v[1] & k4) | (((v[2] >> 2) & k2) << 4);
    u[2] = ((v[0] >> 4) & k4) | (((v[2] >> 4) & k2) << 4);
    u[3] = ((v[1] >> 4) & k4) | (((v[2] >> 6) & k2) << 4);
    const __m128i s = _mm_loadu_si128((const __m128i *) (const void *) u);
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(s, _mm_set1_epi8(32)));
}

/* the 64 unsigned values of step (h, p) of one super-block */
KZ_INLINE __m512i kz_vals_s16(const int kind, const uint8_t * blk, int h, int p) {
    if (kind == KZ_Q6) {
        const blk_q6_K * x = (const blk_q6_K *) (const void *) blk;
        /* low 4 bits: ql[64h .. 64h + 64), nibble p; bits 4..5: qh[32h + l] bits 4p + 2 (half) */
        const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512((const void *) (x->ql + 64 * h)), 4 * p),
                                            _mm512_set1_epi8(0x0F));
        return _mm512_or_si512(lo, kz_field(kz_bcast32(x->qh + 32 * h), kz_halves16(4 * p, 4 * p + 2), 3, 4));
    }
    if (kind == KZ_Q3) {
        const blk_q3_K * x = (const blk_q3_K *) (const void *) blk;
        const __m512i lo = kz_field(kz_bcast32(x->qs + 32 * h), kz_halves16(4 * p, 4 * p + 2), 3, 0);
        return _mm512_or_si512(lo, kz_field(kz_bcast32(x->hmask), kz_halves16(4 * h + 2 * p, 4 * h + 2 * p + 1), 1, 2));
    }
    const blk_q2_K * x = (const blk_q2_K *) (const void *) blk;
    return kz_field(kz_bcast32(x->qs + 32 * h), kz_halves16(4 * p, 4 * p + 2), 3, 0);
}

/* scale index of 128-bit lane j at step (h, p), in its 4 int32 lanes */
KZ_INLINE __m512i kz_idx_s16(int h, int p) {
    const int b = 8 * h + 4 * p;
    return _mm512_set_epi32(b + 3, b + 3, b + 3, b + 3, b + 2, b + 2, b + 2, b + 2, b + 1, b + 1, b + 1, b + 1, b, b, b, b);
}

KZ_INLINE void kz_tile_s16(const int kind, const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, const int T,
                           float * y, int64_t ldy) {
    const size_t bw = kind == KZ_Q6 ? sizeof(blk_q6_K) : kind == KZ_Q3 ? sizeof(blk_q3_K) : sizeof(blk_q2_K);
    __m256 acc[KZ_TMAX];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const blk_q8_K * q[KZ_TMAX];
        const uint8_t * x = kz_sb(w, bw, i, a, ab, T, q);
        __m256i sc16, mn16 = _mm256_setzero_si256();   /* AVX2's int16 scales (Q2_K: and mins) */
        if (kind == KZ_Q6) {
            sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) (const void *) ((const blk_q6_K *) (const void *) x)->scales));
        } else if (kind == KZ_Q3) {
            sc16 = kz_scales_q3(((const blk_q3_K *) (const void *) x)->scales);
        } else {
            const __m128i sm = _mm_loadu_si128((const __m128i *) (const void *) ((const blk_q2_K *) (const void *) x)->scales);
            sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, _mm_set1_epi8(0x0F)));
            mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0F)));
        }
        /* (sc, 0) int16 pairs: the scales' 16-bit patterns zero-extended */
        const __m512i sc32 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(sc16))),
                                                _mm256_cvtepu16_epi32(_mm256_extracti128_si256(sc16, 1)), 1);
        __m512i isum[KZ_TMAX];
        for (int t = 0; t < T; t++) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                const __m512i v = kz_vals_s16(kind, x, h, p);
                const __m512i s = _mm512_permutexvar_epi32(kz_idx_s16(h, p), sc32);
                for (int t = 0; t < T; t++) {
                    isum[t] = kz_dot(isum[t], v, q[t]->qs + 128 * h + 64 * p, s);
                    KZ_PIN(isum[t]);
                }
            }
        }
        if (kind == KZ_Q2) {
            const blk_q2_K * x2 = (const blk_q2_K *) (const void *) x;
            const __m256 xd = _mm256_set1_ps(_cvtsh_ss(x2->d)), xm = _mm256_set1_ps(_cvtsh_ss(x2->dmin));
            for (int t = 0; t < T; t++) acc[t] = kz_acc_min(acc[t], isum[t], mn16, q[t], xd, xm);
            continue;
        }
        const __m256 xd = _mm256_set1_ps(_cvtsh_ss(kind == KZ_Q3 ? ((const blk_q3_K *) (const void *) x)->d
                                                                 : ((const blk_q6_K *) (const void *) x)->d));
        for (int t = 0; t < T; t++) {
            const __m256i msc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *) (const void *) q[t]->bsums), sc16);
            const __m256i corr = kind == KZ_Q3 ? _mm256_slli_epi32(msc, 2) : _mm256_slli_epi32(msc, 5);
            const __m256i s = _mm256_sub_epi32(kz_fold(isum[t]), corr);
            const __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&q[t]->d), xd);
            acc[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[t]);
        }
    }
    for (int t = 0; t < T; t++) y[t * ldy] = tk_hsum8_avx2(acc[t]);
}

/* ---- tile instances and the row driver ------------------------------------------------ */
typedef void (*kz_tile_fn)(const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, float * y, int64_t ldy);

#define KZ_INST(name, body, T)                                                                              \
    KZ static void name##_##T(const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, float * y, int64_t ldy) { \
        body(T);                                                                                            \
    }
/* tiles 1 x T, T = 1..8 (T = 1: the last token of an odd prompt), and their table by T - 1 */
#define KZ_INST_ALL(name, body)                                                                             \
    KZ_INST(name, body, 1) KZ_INST(name, body, 2) KZ_INST(name, body, 3) KZ_INST(name, body, 4)             \
    KZ_INST(name, body, 5) KZ_INST(name, body, 6) KZ_INST(name, body, 7) KZ_INST(name, body, 8)             \
    static const kz_tile_fn name##_toks[KZ_TMAX] = { name##_1, name##_2, name##_3, name##_4,                \
                                                     name##_5, name##_6, name##_7, name##_8 };
#define KZ_Q4(T) kz_tile_q45(0, w, a, ab, nb, T, y, ldy)
#define KZ_Q5(T) kz_tile_q45(1, w, a, ab, nb, T, y, ldy)
#define KZ_Q6S(T) kz_tile_s16(KZ_Q6, w, a, ab, nb, T, y, ldy)
#define KZ_Q3S(T) kz_tile_s16(KZ_Q3, w, a, ab, nb, T, y, ldy)
#define KZ_Q2S(T) kz_tile_s16(KZ_Q2, w, a, ab, nb, T, y, ldy)
KZ_INST_ALL(kz_q4k_avx512, KZ_Q4)
KZ_INST_ALL(kz_q5k_avx512, KZ_Q5)
KZ_INST_ALL(kz_q6k_avx512, KZ_Q6S)
KZ_INST_ALL(kz_q3k_avx512, KZ_Q3S)
KZ_INST_ALL(kz_q2k_avx512, KZ_Q2S)

/* Chunks of KZ_RCHUNK rows; in a chunk, groups of up to KZ_TMAX tokens, each row against the
 * whole group (the AVX2 driver's order).  Generation (n_tok == 1): the AVX2 kernel. */
static void kz_drive_avx512(const kz_tile_fn toks[KZ_TMAX], tk_qdot_rows_fn gen, const uint8_t * w, size_t row_bytes,
                            int64_t K, const uint8_t * a, size_t a_bytes, int64_t n_tok, float * y, int64_t ldy, int64_t r0,
                            int64_t r1) {
    if (n_tok == 1) {
        gen(w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);
        return;
    }
    const int64_t nb = K / QK_K;
    for (int64_t rc = r0; rc < r1; rc += KZ_RCHUNK) {
        const int64_t rce = r1 - rc < KZ_RCHUNK ? r1 : rc + KZ_RCHUNK;
        for (int64_t t = 0; t < n_tok; t += KZ_TMAX) {
            const int tn = (int) (n_tok - t < KZ_TMAX ? n_tok - t : KZ_TMAX);
            for (int64_t r = rc; r < rce; r++) toks[tn - 1](w + r * row_bytes, a + t * a_bytes, a_bytes, nb, y + t * ldy + r, ldy);
        }
    }
}

/* the row kernels the type table hands out at TK_CPU_AVX512 (qdot.h) */
#define KZ_ROWS_FN(kname, tiles, avx2)                                                                      \
    void kname(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes, int64_t n_tok, \
               float * y, int64_t ldy, int64_t r0, int64_t r1) {                                            \
        kz_drive_avx512(tiles##_toks, avx2, w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);            \
    }
KZ_ROWS_FN(tk_qdot_rows_q4_K_avx512, kz_q4k_avx512, tk_qdot_rows_q4_K_avx2)
KZ_ROWS_FN(tk_qdot_rows_q5_K_avx512, kz_q5k_avx512, tk_qdot_rows_q5_K_avx2)
KZ_ROWS_FN(tk_qdot_rows_q6_K_avx512, kz_q6k_avx512, tk_qdot_rows_q6_K_avx2)
KZ_ROWS_FN(tk_qdot_rows_q3_K_avx512, kz_q3k_avx512, tk_qdot_rows_q3_K_avx2)
KZ_ROWS_FN(tk_qdot_rows_q2_K_avx512, kz_q2k_avx512, tk_qdot_rows_q2_K_avx2)

#endif /* __x86_64__ && __GNUC__ */
