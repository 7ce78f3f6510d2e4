/* repack_bf16_avx512.c: the repacked BF16 GEMMs (repack.h) at avx512: with AVX512_BF16's
 * VDPBF16PS (64 rows x 6 tokens per register tile, bf16 activations), and with FMA on the
 * weights widened to fp32 (32 rows x 12 tokens, fp32 activations; below).  cpu.c's
 * choose_bf16_gemm picks one per machine (tk_cpu_bf16dot); both read the same layout.
 *
 * Layout: per group of 16 rows, for each pair j of columns (2j, 2j + 1), one 64-byte vector
 * holds the 16 rows' pairs (bf16 w[r][2j] low, w[r][2j + 1] high).  The token's pair
 * a[2j], a[2j + 1] (4 bytes of its bf16 activation row) is broadcast to the 16 lanes, so one
 * VDPBF16PS adds two products into each of 16 rows' fp32 lanes: no horizontal sums, and a
 * tile of 4 groups x 6 tokens does 24 of them per 4 weight loads and 6 broadcasts.
 *
 * Per output (row r, token t), whatever n_tok, the thread split or the tile it falls in:
 *   acc = +0
 *   for j = 0 .. K/2 - 1, in order:
 *     acc = RNE(acc + w[r][2j+1] a[t][2j+1]);  acc = RNE(acc + w[r][2j] a[t][2j])
 *     (one VDPBF16PS lane: each bf16 product exact in fp32, DAZ / FTZ; Intel SDM vol. 2,
 *      VDPBF16PS; tk_avx512.h models it)
 *   y = acc
 * so a token's result never depends on its ubatch.  It is another order than the row kernel's
 * (qdot_bf16_avx512.c: 16 lanes over chunks of 32, then a horizontal sum): outputs with
 * repacking on differ from those with it off by float rounding (tests/unit/test_repack.py).
 *
 * Handed out at TK_CPU_AVX512 only where cpu.c found AVX512_BF16 and chose it (repack.c
 * tk_repack_rows); there the BF16 weights take bf16 activations (tk_type_vec_dot_type), as the
 * row kernel does.
 */
#include <stdint.h>
#include <string.h>

#include "quants/repack.h"
#include "quants/x86/tk_avx512.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define RB TK_AVX512BF16_TARGET
#define RB_INLINE RB TK_AVX512_INLINE
#define RB_G 4   /* groups (of 16 rows) per tile */
#define RB_T 6   /* tokens per tile */

RB_INLINE __m512i dp_avx512_bcast(const uint8_t * p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* G groups from wg (gsz bytes apart) x T tokens; nr: rows of the tile's last group */
RB_INLINE void dp_avx512_tile(int G, int T, const uint8_t * wg, size_t gsz, int64_t np, const uint8_t * a, size_t a_bytes,
                       float * y, int64_t ldy, int nr) {
    __m512 acc[RB_G][RB_T];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) acc[g][t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < np; j++) {
        __m512i w[RB_G];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) w[g] = _mm512_loadu_si512((const void *) (wg + (size_t) g * gsz + (size_t) j * 64));
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            const __m512i av = dp_avx512_bcast(a + (size_t) t * a_bytes + (size_t) j * 4);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) acc[g][t] = TK_DPBF16_PS(acc[g][t], w[g], av);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        const __mmask16 m = tk_rp_rows_mask(g, G, nr);
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy + g * TK_RP_ROWS, m, acc[g][t]);
    }
}

#define RB_T_CASES(G)                                                                    \
    switch (T) {                                                                         \
        case 6: dp_avx512_tile(G, 6, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 5: dp_avx512_tile(G, 5, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 4: dp_avx512_tile(G, 4, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 3: dp_avx512_tile(G, 3, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 2: dp_avx512_tile(G, 2, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        default: dp_avx512_tile(G, 1, wg, gsz, np, a, a_bytes, y, ldy, nr); break;              \
    }

RB static void dp_avx512_tiles(int G, int T, const uint8_t * wg, size_t gsz, int64_t np, const uint8_t * a, size_t a_bytes,
                        float * y, int64_t ldy, int nr) {
    switch (G) {
        case 4: RB_T_CASES(4) break;
        case 3: RB_T_CASES(3) break;
        case 2: RB_T_CASES(2) break;
        default: RB_T_CASES(1) break;
    }
}

RB void tk_rp_rows_bf16_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                               int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    (void) prep;
    tk_rp_drive_bf16(dp_avx512_tiles, RB_G, RB_T, wp, K, M, a, a_bytes, n_tok, y, ldy, g0, g1);
}

/* ---- FMA on widened weights (the default on Intel CPUs: cpu.c choose_bf16_gemm) ---------
 * A pair vector widens to two fp32 vectors (low halves << 16: the even columns; & 0xffff0000:
 * the odd ones), each FMA'd against one fp32 activation broadcast.  Tile: 2 groups x 12 tokens
 * (24 accumulators, 4 widened weights, 2 broadcasts).  Per output the order of repack.c's
 * scalar reference rp_bf16_tile_scalar (acc = fma(w_2j, a_2j, acc), then w_2j+1), so the
 * bits equal it and the AVX2 tiles' (repack_bf16_avx2.c). */
#define RF TK_AVX512_TARGET
#define RF_INLINE RF TK_AVX512_INLINE
#define RF_G 2
#define RF_T 12

RF_INLINE void fma_avx512_tile(int G, int T, const uint8_t * wg, size_t gsz, int64_t np, const uint8_t * a, size_t a_bytes,
                       float * y, int64_t ldy, int nr) {
    const __m512i hi = _mm512_set1_epi32((int) 0xffff0000u);
    __m512 acc[RF_G][RF_T];
#pragma GCC unroll 2
    for (int g = 0; g < G; g++)
#pragma GCC unroll 12
        for (int t = 0; t < T; t++) acc[g][t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < np; j++) {
        __m512 we[RF_G], wo[RF_G];
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            const __m512i v = _mm512_loadu_si512((const void *) (wg + (size_t) g * gsz + (size_t) j * 64));
            we[g] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            wo[g] = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
        }
#pragma GCC unroll 12
        for (int t = 0; t < T; t++) {
            const float * at = (const float *) (const void *) (a + (size_t) t * a_bytes) + 2 * j;
            const __m512 ae = _mm512_set1_ps(at[0]), ao = _mm512_set1_ps(at[1]);
#pragma GCC unroll 2
            for (int g = 0; g < G; g++) acc[g][t] = _mm512_fmadd_ps(wo[g], ao, _mm512_fmadd_ps(we[g], ae, acc[g][t]));
        }
    }
#pragma GCC unroll 2
    for (int g = 0; g < G; g++) {
        const __mmask16 m = tk_rp_rows_mask(g, G, nr);
#pragma GCC unroll 12
        for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy + g * TK_RP_ROWS, m, acc[g][t]);
    }
}

#define RF_T_CASES(G)                                                                    \
    switch (T) {                                                                         \
        case 12: fma_avx512_tile(G, 12, wg, gsz, np, a, a_bytes, y, ldy, nr); break;             \
        case 11: fma_avx512_tile(G, 11, wg, gsz, np, a, a_bytes, y, ldy, nr); break;             \
        case 10: fma_avx512_tile(G, 10, wg, gsz, np, a, a_bytes, y, ldy, nr); break;             \
        case 9: fma_avx512_tile(G, 9, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 8: fma_avx512_tile(G, 8, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 7: fma_avx512_tile(G, 7, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 6: fma_avx512_tile(G, 6, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 5: fma_avx512_tile(G, 5, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 4: fma_avx512_tile(G, 4, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 3: fma_avx512_tile(G, 3, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        case 2: fma_avx512_tile(G, 2, wg, gsz, np, a, a_bytes, y, ldy, nr); break;               \
        default: fma_avx512_tile(G, 1, wg, gsz, np, a, a_bytes, y, ldy, nr); break;              \
    }

RF static void fma_avx512_tiles(int G, int T, const uint8_t * wg, size_t gsz, int64_t np, const uint8_t * a, size_t a_bytes,
                        float * y, int64_t ldy, int nr) {
    if (G == 2) {
        RF_T_CASES(2)
    } else {
        RF_T_CASES(1)
    }
}

RF void tk_rp_rows_bf16_fma_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                                   int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    (void) prep;
    tk_rp_drive_bf16(fma_avx512_tiles, RF_G, RF_T, wp, K, M, a, a_bytes, n_tok, y, ldy, g0, g1);
}

#endif /* __x86_64__ && __GNUC__ */
