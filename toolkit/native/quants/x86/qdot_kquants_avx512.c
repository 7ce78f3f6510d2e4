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

#include "quants/qdot.h"
#include "quants/x86/tk_avx512.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define KZ TK_AVX512_TARGET
#define KZ_INLINE KZ TK_AVX512_INLINE
#define TK_KQX_INLINE KZ_INLINE
#include "quants/x86/tk_kq_x86.h"   /* AVX2's scale layouts and float step (shared with qdot_avxvnni.c) */

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

/* keeps an accumulator in a register here (qdot_kquants_avx2.c's KQ_PIN); not under SIMDe */
#ifdef TK_EMULATE_AVX512
#define KZ_PIN(v) ((void) 0)
#else
#define KZ_PIN(v) __asm__("" : "+v"(v))
#endif

/* ---- Q4_K / Q5_K ------------------------------------------------------------------------ */

/* 1 row x T tokens (T a constant after inlining) */
KZ_INLINE void kz_tile_q45(const int five, const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, const int T,
                           float * y, int64_t ldy) {
    const size_t bw = five ? sizeof(blk_q5_K) : sizeof(blk_q4_K);
    const size_t qs_off = five ? offsetof(blk_q5_K, qs) : offsetof(blk_q4_K, qs);
    __m256 acc[TK_KQ_TMAX];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const blk_q8_K * q[TK_KQ_TMAX];
        const uint8_t * x = tk_kq_sb(w, bw, i, a, ab, T, q);
        __m256i mns;
        const __m128i sm = tk_kqx_scales_k4(x + 4, &mns);       /* d, dmin, scales[12], ... */
        const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi32(sm));   /* (s, 0) int16 pairs */
        __m512i isum[TK_KQ_TMAX];
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
        __m256 xd, xm;
        tk_kqx_d(1, 0, x, &xd, &xm);
        for (int t = 0; t < T; t++) acc[t] = tk_kqx_step(1, 0, acc[t], kz_fold(isum[t]), mns, q[t], xd, xm);
    }
    for (int t = 0; t < T; t++) y[t * ldy] = tk_hsum8_avx2(acc[t]);
}

/* ---- Q6_K / Q3_K / Q2_K: 16 scales of 16 values ------------------------------------------
 * Step (h, p) (h, p < 2) covers the 64 values 128h + 64p .. +64: 128-bit lane j of the
 * register holds values 16j .. 16j + 16 of them, scale 8h + 4p + j. */
enum { KZ_Q6 = TK_KQX_Q6, KZ_Q3 = TK_KQX_Q3, KZ_Q2 = TK_KQX_Q2 };

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
    __m256 acc[TK_KQ_TMAX];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const blk_q8_K * q[TK_KQ_TMAX];
        const uint8_t * x = tk_kq_sb(w, bw, i, a, ab, T, q);
        __m256i sc16, mn16;   /* AVX2's int16 scales (Q2_K: and mins) */
        tk_kqx_scales_s16(kind, x, &sc16, &mn16);
        /* (sc, 0) int16 pairs: the scales' 16-bit patterns zero-extended */
        const __m512i sc32 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(sc16))),
                                                _mm256_cvtepu16_epi32(_mm256_extracti128_si256(sc16, 1)), 1);
        __m512i isum[TK_KQ_TMAX];
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
        __m256 xd, xm;
        tk_kqx_d(0, kind, x, &xd, &xm);
        const __m256i s16 = kind == KZ_Q2 ? mn16 : sc16;
        for (int t = 0; t < T; t++) acc[t] = tk_kqx_step(0, kind, acc[t], kz_fold(isum[t]), s16, q[t], xd, xm);
    }
    for (int t = 0; t < T; t++) y[t * ldy] = tk_hsum8_avx2(acc[t]);
}

/* ---- the row kernels the type table hands out at TK_CPU_AVX512 (qdot.h) ----------------------
 * Tiles 1 x T, T = 1..8 (T = 1: the last token of an odd prompt), in chunks of 16 rows
 * (qdot.h tk_kq_drive, the AVX2 driver's order); generation (n_tok == 1): the AVX2 kernel. */
TK_KQ_KERNELS(KZ, avx512, kz_tile_q45, kz_tile_s16, 1, 1)

#endif /* __x86_64__ && __GNUC__ */
