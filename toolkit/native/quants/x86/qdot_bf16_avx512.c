/* qdot_bf16_avx512.c: BF16 weights x BF16 activations with AVX512_BF16's VDPBF16PS (x86-64;
 * contract: qdot.h, tk_qdot_rows_fn), prompts (register tiles of 4 weight rows x up to 6
 * tokens) and generation (n_tok == 1: tiles of 8 rows x 1 token, the same operations per
 * output); and the f32 -> bf16 activation conversion (plain C, every build).
 *
 * Every function with the BF16 target attribute is handed out (the BF16 row's AVX512 slot,
 * ggml_types.c) only at the level TK_CPU_AVX512 where cpu.c also found AVX512_BF16
 * (tk_cpu_has_avx512bf16): there tk_type_vec_dot_type makes BF16 weights take bf16
 * activations, converted once per mat-mul for every n_tok (generation too, so a token's
 * result never depends on its ubatch); ops.c's activation scratch then holds 2 bytes per
 * value.  TOOLKIT_CPU=avx2 (or lower) gives BF16 weights the float kernels again.
 * Checked under emulation by tests/unit/test_avx512_emulated.py (the test_emulated_bf16_*
 * tests), natively by tests/unit/test_dispatch.py::test_bf16_kernel_native_within_bound and ..._bits_match_sdm_model.
 *
 * Activations: tk_quantize_act_bf16, f32 -> bf16 rounded to nearest even with integer ops
 * (quants.h's tkq_fp32_to_bf16, which the BF16 row quantizer uses too: llama.cpp
 * ggml_compute_fp32_to_bf16, ggml-impl.h, build 0c1e570: NaN -> quiet NaN of the same sign
 * and high bits; otherwise (u + 0x7fff + ((u >> 16) & 1)) >> 16, which also rounds
 * overflow to inf).  The same function in every build, so the activation bits never depend
 * on the level.
 *
 * Per output (weight row r, token t), whatever n_tok, r0, r1 and the position in a tile:
 *   acc = 16 fp32 lanes of +0
 *   for each chunk c of 32 values, in order (the last one zero-padded when K % 32 != 0):
 *     acc = VDPBF16PS(acc, W[r][32c .. 32c+31], A[t][32c .. 32c+31])
 *       lane j: acc[j] += w[2j+1] a[2j+1] (rounded), then acc[j] += w[2j] a[2j] (rounded),
 *       each product exact in fp32, DAZ / FTZ, round to nearest even (Intel SDM vol. 2,
 *       VDPBF16PS; tk_avx512.h models exactly this under emulation)
 *   y = tk_hsum8_avx2(lanes 0-7 + lanes 8-15)   (8 fp32 adds, then the fixed tree)
 * so a token's result does not depend on its ubatch or thread split.  This is the order of
 * llama.cpp's ggml_vec_dot_bf16 AVX512BF16 branch up to its two accumulators and its
 * reduction (ggml-cpu/vec.cpp); results differ from it by float reassociation only.
 *
 * Speed (UNMEASURED: no AVX-512 machine was available when this was written): one
 * VDPBF16PS does 32 multiply-adds where the AVX2 float kernel does 8 per FMA after
 * widening each bf16 (shift) and each activation is read as 2 bytes instead of 4; a
 * 4 x 6 tile keeps 24 accumulators and loads 10 registers per 24 instructions.
 */
#include <stdint.h>
#include <string.h>

#include "quants/qdot.h"
#include "quants/x86/tk_avx512.h"

void tk_quantize_act_bf16(const float * x, void * y, int64_t K) {
    uint16_t * h = y;
    for (int64_t i = 0; i < K; i++) h[i] = tkq_fp32_to_bf16(x[i]);   /* quants.h: ggml's rounding */
}

#if defined(__x86_64__) && defined(__GNUC__)

#define BZ TK_AVX512BF16_TARGET
#define BZ_INLINE BZ TK_AVX512_INLINE
#define BZ_TOK_BYTES 196608   /* activations of a token block (about 192 KiB) */

/* 32 bf16 from p; the last chunk of a row (n < 32 values) zero-padded through a copy */
BZ_INLINE __m512i bz_load(const uint8_t * p, int64_t n) {
    if (n >= 32) return _mm512_loadu_si512((const void *) p);
    uint16_t buf[32] = {0};
    memcpy(buf, p, (size_t) n * 2);
    return _mm512_loadu_si512((const void *) buf);
}

/* R (1..8) weight rows x N (1..6) tokens, R * N <= 24 */
BZ_INLINE void bz_tile(int R, int N, const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a,
                       size_t a_bytes, float * y, int64_t ldy) {
    __m512 acc[8][6];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 6
        for (int t = 0; t < N; t++) acc[i][t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 32) {
        const int64_t n = K - k;
        __m512i wv[8];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) wv[i] = bz_load(w + (size_t) i * row_bytes + (size_t) k * 2, n);
#pragma GCC unroll 6
        for (int t = 0; t < N; t++) {
            const __m512i av = bz_load(a + (size_t) t * a_bytes + (size_t) k * 2, n);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) acc[i][t] = TK_DPBF16_PS(acc[i][t], wv[i], av);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 6
        for (int t = 0; t < N; t++)
            y[t * ldy + i] = tk_hsum8_avx2(_mm256_add_ps(_mm512_castps512_ps256(acc[i][t]), _mm512_extractf32x8_ps(acc[i][t], 1)));
}

/* R (1..4) rows against tokens [0, n), 6 at a time, then one tile of the 1..5 left */
BZ_INLINE void bz_rows(int R, const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes,
                       int64_t n, float * y, int64_t ldy) {
    int64_t t = 0;
    for (; t + 6 <= n; t += 6) bz_tile(R, 6, w, row_bytes, K, a + (size_t) t * a_bytes, a_bytes, y + t * ldy, ldy);
    const uint8_t * at = a + (size_t) t * a_bytes;
    switch (n - t) {
        case 1: bz_tile(R, 1, w, row_bytes, K, at, a_bytes, y + t * ldy, ldy); break;
        case 2: bz_tile(R, 2, w, row_bytes, K, at, a_bytes, y + t * ldy, ldy); break;
        case 3: bz_tile(R, 3, w, row_bytes, K, at, a_bytes, y + t * ldy, ldy); break;
        case 4: bz_tile(R, 4, w, row_bytes, K, at, a_bytes, y + t * ldy, ldy); break;
        case 5: bz_tile(R, 5, w, row_bytes, K, at, a_bytes, y + t * ldy, ldy); break;
        default: break;   /* none left */
    }
}

/* one row against tokens [0, n) (the rows left after the 4-row tiles; R is a constant per call) */
BZ_INLINE void bz_rows_left(int64_t left, const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a,
                            size_t a_bytes, int64_t n, float * y, int64_t ldy) {
    switch (left) {
        case 1: bz_rows(1, w, row_bytes, K, a, a_bytes, n, y, ldy); break;
        case 2: bz_rows(2, w, row_bytes, K, a, a_bytes, n, y, ldy); break;
        case 3: bz_rows(3, w, row_bytes, K, a, a_bytes, n, y, ldy); break;
        default: break;
    }
}

/* Rows [r0, r1) x all tokens.  Generation (n_tok == 1): 8 rows per tile (8 independent
 * accumulator chains), then 4, then the rest.  Prompts: token blocks of about 192 KiB of
 * activations; in a block 4 rows x 6 tokens per tile. */
BZ void tk_qdot_rows_bf16_avx512(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes,
                                 int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1) {
    if (n_tok == 1) {
        int64_t r = r0;
        for (; r + 8 <= r1; r += 8) bz_tile(8, 1, w + (size_t) r * row_bytes, row_bytes, K, a, a_bytes, y + r, ldy);
        for (; r + 4 <= r1; r += 4) bz_tile(4, 1, w + (size_t) r * row_bytes, row_bytes, K, a, a_bytes, y + r, ldy);
        bz_rows_left(r1 - r, w + (size_t) r * row_bytes, row_bytes, K, a, a_bytes, 1, y + r, ldy);
        return;
    }
    int64_t tb = (int64_t) BZ_TOK_BYTES / (a_bytes > 0 ? (int64_t) a_bytes : 1);
    tb = tb < 6 ? 6 : tb - tb % 6;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int64_t n = t0 + tb < n_tok ? tb : n_tok - t0;
        const uint8_t * at = a + (size_t) t0 * a_bytes;
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) bz_rows(4, w + (size_t) r * row_bytes, row_bytes, K, at, a_bytes, n, y + t0 * ldy + r, ldy);
        bz_rows_left(r1 - r, w + (size_t) r * row_bytes, row_bytes, K, at, a_bytes, n, y + t0 * ldy + r, ldy);
    }
}

#endif /* __x86_64__ && __GNUC__ */
