/* qdot_avx512.c: AVX-512 VNNI row kernel for Q8_0 weights x Q8_0 activations, prompts
 * (n_tok >= 2); generation (n_tok == 1) runs the AVX2 kernel (x86-64 only; contract:
 * qdot.h, tk_qdot_rows_fn).
 *
 * Compiled with the package's portable flags; every function here carries the AVX-512
 * target attribute and is handed out (the type table's AVX512 slot, ggml_types.c) only
 * when cpu.c found AVX-512 F + BW + VL + VNNI and the OS's ZMM support (TK_CPU_AVX512).
 *
 * Per output (weight row r, token t) exactly the operations of qdot_legacy_avx2.c's Q8_0
 * kernels, so the outputs are bit-identical to them (and a token's result does not depend
 * on its ubatch):
 *   acc = 0 (8 float lanes); for each block b, in order:
 *     p   = 8 int32 lanes, lane l = sum of the 4 products w[4l+m] * a[4l+m]   (exact)
 *     acc = fma(broadcast(d_w * d_a), float(p), acc)
 *   y = tk_hsum8_avx2(acc)
 * AVX2 forms p as madd(maddubs(|w|, sign(a, w)), 1); here it is one vpdpbusd(|w|, a'),
 * a' = a negated where w < 0 (where w == 0, |w| = 0 zeroes the product either way): the same
 * exact integers.  Two tokens share one 512-bit register (token 2p in lanes 0-7, 2p+1 in
 * 8-15, the weight block broadcast to both halves), so each instruction does the work of
 * two AVX2 ones; with 32 registers a tile is 4 weight rows x 8 tokens (16 accumulators).
 *
 * ref: Intel SDM vol. 2 VPDPBUSD; ggml-org/llama.cpp ggml/src/ggml-cpu/arch/x86/quants.c
 * ggml_vec_dot_q8_0_q8_0 (the sign trick, mul_sum_i8_pairs_float's VNNI branch).
 */
#include <stdint.h>
#include <string.h>

#include "quants/qdot.h"
#include "quants/x86/tk_avx512.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define Q8Z TK_AVX512_TARGET
#define Q8Z_INLINE Q8Z TK_AVX512_INLINE


/* R (1..4) weight rows x n (1..8) tokens as P = ceil(n / 2) pairs; an odd last token is
 * paired with itself and its copy is not stored.  dwf[4 b + i]: d_w of row i, block b;
 * daf[t nb + b]: d_a of token t (floats, exact conversions of the f16 scales). */
Q8Z_INLINE void q8z_tile(int R, int P, int n, const uint8_t * w, size_t row_bytes, const uint8_t * a,
                         size_t a_bytes, int64_t nb, const float * dwf, const float * daf, float * y, int64_t ldy) {
    const size_t bs = sizeof(blk_q8_0);
    const uint8_t * a0[4], * a1[4];
    const float * d0[4], * d1[4];
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int p = 0; p < P; p++) {
        const int t0 = 2 * p, t1 = 2 * p + 1 < n ? 2 * p + 1 : 2 * p;
        a0[p] = a + (size_t) t0 * a_bytes + 2;
        a1[p] = a + (size_t) t1 * a_bytes + 2;
        d0[p] = daf + t0 * nb;
        d1[p] = daf + t1 * nb;
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) acc[i][p] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        __m512i x[4];
        __m512 da[4];
#pragma GCC unroll 4
        for (int p = 0; p < P; p++) {
            const __m256i lo = _mm256_loadu_si256((const __m256i *) (const void *) (a0[p] + (size_t) b * bs));
            const __m256i hi = _mm256_loadu_si256((const __m256i *) (const void *) (a1[p] + (size_t) b * bs));
            x[p] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            da[p] = _mm512_insertf32x8(_mm512_set1_ps(d0[p][b]), _mm256_set1_ps(d1[p][b]), 1);
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const __m256i w8 = _mm256_loadu_si256((const __m256i *) (const void *) (w + (size_t) i * row_bytes + (size_t) b * bs + 2));
            const __m512i wv = _mm512_broadcast_i64x4(w8);
            const __m512i u = _mm512_abs_epi8(wv);
            const __mmask64 neg = _mm512_movepi8_mask(wv);
            const __m512 dw = _mm512_set1_ps(dwf[4 * b + i]);
#pragma GCC unroll 4
            for (int p = 0; p < P; p++) {
                const __m512i s = _mm512_mask_sub_epi8(x[p], neg, _mm512_setzero_si512(), x[p]);
                const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s));
                acc[i][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da[p]), pf, acc[i][p]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int p = 0; p < P; p++) {
            y[(2 * p) * ldy + i] = tk_hsum8_avx2(_mm512_castps512_ps256(acc[i][p]));
            if (2 * p + 1 < n) y[(2 * p + 1) * ldy + i] = tk_hsum8_avx2(_mm512_extractf32x8_ps(acc[i][p], 1));
        }
}

/* R rows against tokens [0, n) of a token block, 8 at a time (the remainder, 1..7 tokens:
 * one tile of the 1..4 pairs it needs) */
Q8Z_INLINE void q8z_rows(int R, const uint8_t * w, size_t row_bytes, const uint8_t * a, size_t a_bytes, int64_t nb,
                         const float * dwf, const float * daf, int64_t n, float * y, int64_t ldy) {
    int64_t t = 0;
    for (; t + 8 <= n; t += 8)
        q8z_tile(R, 4, 8, w, row_bytes, a + (size_t) t * a_bytes, a_bytes, nb, dwf, daf + t * nb, y + t * ldy, ldy);
    const int rest = (int) (n - t);
    const uint8_t * at = a + (size_t) t * a_bytes;
    switch ((rest + 1) / 2) {
        case 1: q8z_tile(R, 1, rest, w, row_bytes, at, a_bytes, nb, dwf, daf + t * nb, y + t * ldy, ldy); break;
        case 2: q8z_tile(R, 2, rest, w, row_bytes, at, a_bytes, nb, dwf, daf + t * nb, y + t * ldy, ldy); break;
        case 3: q8z_tile(R, 3, rest, w, row_bytes, at, a_bytes, nb, dwf, daf + t * nb, y + t * ldy, ldy); break;
        case 4: q8z_tile(R, 4, rest, w, row_bytes, at, a_bytes, nb, dwf, daf + t * nb, y + t * ldy, ldy); break;
        default: break;   /* rest == 0 */
    }
}

/* Rows [r0, r1) x all tokens (qdot.h tk_q8_drive): token blocks of about 192 KiB of
 * activations (as the AVX2 kernel), a multiple of 8 tokens, in a block 4 rows at a time
 * (their scales converted once), then single rows. */
TK_Q8_KERNEL(Q8Z, tk_qdot_rows_q8_0_avx512, q8z_rows, 8)

#endif /* __x86_64__ && __GNUC__ */
