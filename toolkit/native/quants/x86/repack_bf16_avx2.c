/* repack_bf16_avx2.c: the repacked BF16 GEMM (repack.h) at avx2: FMA on the weights widened
 * to fp32 against fp32 activations, one group of 16 rows (two ymm halves) x up to 5 tokens per
 * tile (10 accumulators, 4 widened weights, 2 broadcasts: the 16 ymm registers).
 *
 * A 32-byte half of a pair line holds 8 rows' (bf16 w[2j] | w[2j + 1] << 16); << 16 gives the
 * even column as fp32, & 0xffff0000 the odd one.  Per output the order of repack.c's scalar
 * reference (acc = fma(w_2j, a_2j, acc), then w_2j+1; one chain from +0), so the bits equal it
 * and the AVX-512 FMA tiles' (repack_bf16_avx512.c).  Handed out at TK_CPU_AVX2 (repack.c
 * tk_repack_rows).
 */
#include "tk_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(TK_EMULATE_AVX512)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quants/repack.h"

#define RY __attribute__((target("avx2,fma")))
#define RY_INLINE RY static inline __attribute__((always_inline))
#define RY_T 5

RY_INLINE void fma_avx2_store(float * y, __m256 v, int n) {
    if (n >= 8) {
        _mm256_storeu_ps(y, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    if (n > 0) memcpy(y, tmp, (size_t) n * sizeof(float));
}

RY_INLINE void fma_avx2_tile(int T, const uint8_t * wg, int64_t np, const uint8_t * a, size_t a_bytes, float * y,
                       int64_t ldy, int nr) {
    const __m256i hi = _mm256_set1_epi32((int) 0xffff0000u);
    __m256 acc[2][RY_T];
#pragma GCC unroll 5
    for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t j = 0; j < np; j++) {
        const __m256i v0 = _mm256_loadu_si256((const __m256i *) (const void *) (wg + (size_t) j * 64));
        const __m256i v1 = _mm256_loadu_si256((const __m256i *) (const void *) (wg + (size_t) j * 64 + 32));
        const __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), o0 = _mm256_castsi256_ps(_mm256_and_si256(v0, hi));
        const __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), o1 = _mm256_castsi256_ps(_mm256_and_si256(v1, hi));
#pragma GCC unroll 5
        for (int t = 0; t < T; t++) {
            const float * at = (const float *) (const void *) (a + (size_t) t * a_bytes) + 2 * j;
            const __m256 ae = _mm256_broadcast_ss(at), ao = _mm256_broadcast_ss(at + 1);
            acc[0][t] = _mm256_fmadd_ps(o0, ao, _mm256_fmadd_ps(e0, ae, acc[0][t]));
            acc[1][t] = _mm256_fmadd_ps(o1, ao, _mm256_fmadd_ps(e1, ae, acc[1][t]));
        }
    }
#pragma GCC unroll 5
    for (int t = 0; t < T; t++) {
        fma_avx2_store(y + t * ldy, acc[0][t], nr);
        fma_avx2_store(y + t * ldy + 8, acc[1][t], nr - 8);
    }
}

RY static void fma_avx2_tiles(int G, int T, const uint8_t * wg, size_t gsz, int64_t np, const uint8_t * a, size_t a_bytes,
                        float * y, int64_t ldy, int nr) {
    (void) G;   /* one group per tile */
    (void) gsz;
    switch (T) {
        case 5: fma_avx2_tile(5, wg, np, a, a_bytes, y, ldy, nr); break;
        case 4: fma_avx2_tile(4, wg, np, a, a_bytes, y, ldy, nr); break;
        case 3: fma_avx2_tile(3, wg, np, a, a_bytes, y, ldy, nr); break;
        case 2: fma_avx2_tile(2, wg, np, a, a_bytes, y, ldy, nr); break;
        default: fma_avx2_tile(1, wg, np, a, a_bytes, y, ldy, nr); break;
    }
}

RY void tk_rp_avx2_rows_bf16(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                             int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    (void) prep;
    tk_rp_drive_bf16(fma_avx2_tiles, 1, RY_T, wp, K, M, a, a_bytes, n_tok, y, ldy, g0, g1);
}
#endif
