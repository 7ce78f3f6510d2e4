/* ops_avx2.c: AVX2 + FMA + F16C mat-vec / mat-mat kernels (x86-64 only).
 *
 * Compiled with the portable flags like every file; only the functions below carry
 * __attribute__((target("avx2,fma,f16c"))), and ops.c calls them only when cpu.c found the
 * instructions and the OS's YMM support, so the package still runs on any x86-64.
 *
 * One accumulation order per output, whatever the path:
 *   acc: one 8-lane FMA accumulator over elements [8i, 8i+8); then s = hsum(acc) (fixed
 *   tree); then the K % 8 tail in order with fmaf.  Independent chains come from computing
 *   several outputs at once (4 rows in the mat-vec, R rows x G tokens in the few-token
 *   tiles, 3 rows x 4 tokens in the mat-mat).
 * Weights here are F32, F16 or BF16 (quantized types take the integer path, qdot.h).  A
 * weight element is the same float whichever way it is produced (F16/BF16 conversion is
 * exact), so the direct mat-vec (generation, n_tok == 1), the few-token tiles (a
 * speculative verify, several slots or sequences: n_tok 2..16) and the expand-once mat-mat
 * (prompt) give bit-identical results for a token, and a token's result never depends on
 * the ubatch it shares (tests/unit/test_dispatch.py checks n_tok 1..24 against n_tok 1).
 * The order differs from the scalar path (ops.c: 8 separate mul+add lanes), so the two
 * levels agree to float reordering, not bit for bit.
 *
 * Three paths by n_tok:
 *   1        dot_rows_direct_avx2: 4 rows read in place (F16/BF16 converted in registers)
 *            against one token, software prefetch TK_PF_ROWS rows ahead.
 *   2..16    few_rows_avx2 (F16/BF16; F32 up to 3): the same in-place reads against R x G
 *            register tiles (4 x n_tok for 2-3 tokens, 2 x 4 for 4, 4 rows x groups of 2-3
 *            tokens past that, the later groups finding the rows in L1), prefetch in every
 *            pass.  Each weight is read from memory once per call, so a call costs about
 *            one token's read until the FMAs (T per 8 weights) outgrow it.
 *   more     expand 3 rows to float32 once per L2-sized token block (F32: read in place),
 *            then 3 x 4 tiles.
 * Measured (bench/matmul_fewtok.py, M = 16384 x K = 2048, 1 thread, 2-core EPYC Zen 3
 * shared with other jobs, load 4-7; wall ms, fastest of 7 over 2 alternated runs per build,
 * before (the tile path) -> after):
 *   BF16  T=1 5.5 -> 4.6 (same kernel: the machine's spread)   T=2 12.9 -> 4.9   T=3 14.1 -> 4.4
 *         T=4 12.3 -> 6.2   T=5 16.7 -> 7.0   T=8 14.3 -> 11.6   T=9 17.2 -> 10.4   T=16 23.1 -> 19.1
 *   F16   T=1 4.3 -> 4.1   T=2 9.8 -> 4.8   T=3 11.6 -> 5.2   T=4 10.6 -> 6.4   T=5 11.3 -> 6.4
 *         T=8 16.2 -> 9.5   T=9 17.9 -> 10.4   T=16 22.0 -> 18.7
 *   F32   T=2,3,4 within noise of the tile path (it reads F32 rows in place too); at T=5..16
 *         the few-token tiles were 1.1-1.4x slower (4 F32 rows of K = 2048 are 32 KiB: the
 *         later passes no longer find them in L1; 2-row tiles were slower still), hence
 *         TK_FEWTOK_MAX_F32 = 3.
 * The threshold: at K = 2048 the few-token tiles still tie the tile path at T = 32-128 and
 * at K = 8192 (where the tile path's L2 token blocks are 8 tokens) they are 0.56-0.8x its
 * time up to T = 96; at K = 1024 they tie at 16-32 and lose at 64 (CPU time, BF16).  16 is
 * where they win or tie for every K measured; T=16 is FMA-bound on this machine (16 FMAs
 * per 8 weights against ~3 cycles of memory per row step), so about 4x a token there.
 */
#include <math.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"

#ifdef TK_HAVE_X86
#include <immintrin.h>

#define TK_AVX2 __attribute__((target("avx2,fma,f16c")))

/* 8 weights from element i (i % 8 == 0) of a row of `type` */
TK_AVX2 static inline __m256 load8_avx2(int type, const uint8_t * p, int64_t i) {
    switch (type) {
        case TK_GGML_F16:
            return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (const void *) (p + 2 * i)));
        case TK_GGML_BF16: {
            const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *) (const void *) (p + 2 * i)));
            return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
        }
        default:   /* F32 */
            return _mm256_loadu_ps((const float *) (const void *) p + i);
    }
}

TK_AVX2 static inline float elem_avx2(int type, const uint8_t * p, int64_t i) {
    uint16_t h;
    switch (type) {
        case TK_GGML_F16: memcpy(&h, p + 2 * i, 2); return _cvtsh_ss(h);
        case TK_GGML_BF16: memcpy(&h, p + 2 * i, 2); return tk_bf16_to_fp32(h);
        default: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    }
}

/* One accumulation order for every output: acc (8 lanes) += w[i:i+8] * x[i:i+8] for
 * i = 0, 8, ... (FMA), then tk_hsum8_avx2(acc), then the K % 8 tail in order with fmaf.
 * Kernels below compute several outputs at once, each with exactly these operations. */

#define TK_PF_ROWS 8             /* mat-vec prefetch distance, rows (two 4-row passes) */

/* R rows (weights read and converted in place) x 1 token, R == 4 or 1 */
TK_AVX2 static void dot_rows_direct_avx2(int type, const uint8_t * w, size_t row_bytes, int R, const float * x, int64_t K, float * out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const uint8_t * w0 = w, * w1 = w + row_bytes, * w2 = w + 2 * row_bytes, * w3 = w + 3 * row_bytes;
    int64_t i = 0;
    if (R == 4) {
        /* software prefetch of the rows TK_PF_ROWS ahead, at the pace the 4 rows are read
         * (4 * row_bytes per K elements: 64 bytes per step for F16/BF16, 128 for F32).  Rows of under a page share pages, which the hardware stream
         * prefetcher follows poorly: measured on the EPYC (BF16, K = 1024, 1 thread)
         * 11 -> 14 GB/s; the Bamba-430m weight set on 2 threads 35 -> 28 ms a token. */
        const size_t step = 32 * row_bytes / (size_t) K;
        const char * pf = (const char *) w + TK_PF_ROWS * row_bytes;
        for (; i + 8 <= K; i += 8, pf += step) {
            _mm_prefetch(pf, _MM_HINT_T0);
            if (step > 64) _mm_prefetch(pf + 64, _MM_HINT_T0);
            const __m256 xv = _mm256_loadu_ps(x + i);
            a0 = _mm256_fmadd_ps(load8_avx2(type, w0, i), xv, a0);
            a1 = _mm256_fmadd_ps(load8_avx2(type, w1, i), xv, a1);
            a2 = _mm256_fmadd_ps(load8_avx2(type, w2, i), xv, a2);
            a3 = _mm256_fmadd_ps(load8_avx2(type, w3, i), xv, a3);
        }
    } else {
        for (; i + 8 <= K; i += 8) a0 = _mm256_fmadd_ps(load8_avx2(type, w0, i), _mm256_loadu_ps(x + i), a0);
        R = 1;
    }
    float s[4] = {tk_hsum8_avx2(a0), tk_hsum8_avx2(a1), tk_hsum8_avx2(a2), tk_hsum8_avx2(a3)};
    const uint8_t * wr[4] = {w0, w1, w2, w3};
    for (int r = 0; r < R; r++) {
        for (int64_t k = i; k < K; k++) s[r] = fmaf(elem_avx2(type, wr[r], k), x[k], s[r]);
        out[r] = s[r];
    }
}

/* ---- few tokens (2 <= n_tok <= TK_FEWTOK_MAX): each weight row read once from memory ----
 * A tile is R rows (read and converted in registers, as the mat-vec does) x G tokens: R * G
 * 8-lane accumulators, the G token vectors of a step loaded once and shared by the R rows.
 * Each output has the mat-vec's operations exactly (FMA over [8i, 8i+8) into its own
 * accumulator, tk_hsum8_avx2, the K % 8 tail with fmaf), so it is bit-identical to that
 * token's n_tok == 1 result.  pf: software prefetch TK_PF_ROWS rows ahead, at the pace the
 * R rows are read, as in dot_rows_direct_avx2.  Writes y[g * M + r] for r < R, g < G. */
TK_AVX2 __attribute__((always_inline)) static inline void few_tile_avx2(const int type, const int R, const int G, const int pf,
                                                                       const uint8_t * w, size_t row_bytes, const float * x,
                                                                       int64_t K, float * y, int64_t M) {
    /* named accumulators c<row><token>: an array would be left in memory by the compiler */
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00,
           c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00;
    /* the R rows are read at 8 * R * elem bytes per step (row_bytes == K * elem for these types) */
    const int step = 8 * R * (type == TK_GGML_F32 ? 4 : 2);
    const char * pfp = (const char *) w + TK_PF_ROWS * row_bytes;
    int64_t i = 0;
    for (; i + 8 <= K; i += 8, pfp += step) {
        if (pf) {
            _mm_prefetch(pfp, _MM_HINT_T0);
            if (step > 64) _mm_prefetch(pfp + 64, _MM_HINT_T0);
        }
#define FEW_X(g) (G > g ? _mm256_loadu_ps(x + g * K + i) : _mm256_setzero_ps())
        const __m256 v0 = FEW_X(0), v1 = FEW_X(1), v2 = FEW_X(2), v3 = FEW_X(3);
#undef FEW_X
#define FEW_ROW(q, A0, A1, A2, A3)                                    \
        if (R > q) {                                                  \
            const __m256 wv = load8_avx2(type, w + q * row_bytes, i); \
            A0 = _mm256_fmadd_ps(wv, v0, A0);                         \
            if (G > 1) A1 = _mm256_fmadd_ps(wv, v1, A1);              \
            if (G > 2) A2 = _mm256_fmadd_ps(wv, v2, A2);              \
            if (G > 3) A3 = _mm256_fmadd_ps(wv, v3, A3);              \
        }
        FEW_ROW(0, c00, c01, c02, c03)
        FEW_ROW(1, c10, c11, c12, c13)
        FEW_ROW(2, c20, c21, c22, c23)
        FEW_ROW(3, c30, c31, c32, c33)
#undef FEW_ROW
    }
    const __m256 acc[4][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23}, {c30, c31, c32, c33}};
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) {
            float s = tk_hsum8_avx2(acc[r][g]);
            for (int64_t k = i; k < K; k++) s = fmaf(elem_avx2(type, w + r * row_bytes, k), x[g * K + k], s);
            y[g * M + r] = s;
        }
}

/* The few-token shapes, chosen on the 2-core EPYC (Zen 3, BF16, M = 16384 x K = 2048,
 * 1 thread, bench/matmul_fewtok.py --cpu-time, load 6-9, so +-10%):
 *   n_tok 2, 3: 4 rows x n_tok tokens, one pass (8 or 12 accumulators + the token vectors);
 *   n_tok 4:    2 rows x 4 tokens, one pass (4 x [2, 2] was ~10% slower);
 *   n_tok >= 5: 4 rows x groups of 2-3 tokens (12 accumulators + 3 token vectors + 1 row
 *               vector = the 16 ymm registers); the later groups find the 4 rows in L1, and
 *               every pass prefetches (prefetching in the first pass only left memory idle
 *               during the others: n_tok 8, 12.3 -> 10.5 ms).
 * The last (r1 - r0) % R rows take 1-row tiles without prefetch. */
#define TK_FEWTOK_MAX 16         /* F16 / BF16: few-token path up to this n_tok (see the header) */
#define TK_FEWTOK_MAX_F32 3      /* F32: the tile path reads F32 rows in place, as fast past 3 */
#define TK_FEW_GMAX 3            /* tokens per group in the 4-row tiles (n_tok >= 5) */

typedef void (*few_tile_fn)(const uint8_t * w, size_t row_bytes, const float * x, int64_t K, float * y, int64_t M);
#define FEW_DEF(TN, TY, R, G, PF)                                                                              \
    TK_AVX2 static void few_##TN##_##R##x##G##_avx2(const uint8_t * w, size_t rb, const float * x, int64_t K,     \
                                                    float * y, int64_t M) {                                    \
        few_tile_avx2(TY, R, G, PF, w, rb, x, K, y, M);                                                        \
    }
#define FEW_DEF_TYPE(TN, TY) FEW_DEF(TN, TY, 4, 2, 1) FEW_DEF(TN, TY, 4, 3, 1) FEW_DEF(TN, TY, 2, 4, 1) \
    FEW_DEF(TN, TY, 1, 2, 0) FEW_DEF(TN, TY, 1, 3, 0) FEW_DEF(TN, TY, 1, 4, 0)
FEW_DEF_TYPE(f32, TK_GGML_F32)
FEW_DEF_TYPE(f16, TK_GGML_F16)
FEW_DEF_TYPE(bf16, TK_GGML_BF16)
/* [type: F32, F16, BF16][G - 2]: the R-row tile (R = 4 for G 2-3, 2 for G 4), the 1-row tile */
#define FEW_TAB(TN)                                                                \
    {{few_##TN##_4x2_avx2, few_##TN##_1x2_avx2}, {few_##TN##_4x3_avx2, few_##TN##_1x3_avx2}, \
     {few_##TN##_2x4_avx2, few_##TN##_1x4_avx2}}
static const few_tile_fn few_tiles[3][3][2] = {FEW_TAB(f32), FEW_TAB(f16), FEW_TAB(bf16)};

/* rows [r0, r1) x n_tok (2..TK_FEWTOK_MAX) tokens of tk_matmul_rows_avx2's contract, shapes
 * as above */
TK_AVX2 static void few_rows_avx2(int type, const uint8_t * base, size_t row_bytes, int64_t K, int64_t M, const float * x,
                                  int64_t n_tok, float * y, int64_t r0, int64_t r1) {
    const few_tile_fn (*tab)[2] = few_tiles[type == TK_GGML_F32 ? 0 : type == TK_GGML_F16 ? 1 : 2];
    const int64_t n_grp = n_tok == 4 ? 1 : (n_tok + TK_FEW_GMAX - 1) / TK_FEW_GMAX;
    const int R = n_tok == 4 ? 2 : 4;
    int64_t r = r0;
    for (int last = 0; r < r1; r += last ? 1 : R) {
        last = r + R > r1;              /* the remaining rows, one at a time */
        int64_t t = 0;
        for (int64_t q = 0; q < n_grp; q++) {
            const int64_t G = n_tok / n_grp + (q < n_tok % n_grp);     /* group sizes differ by <= 1 */
            tab[G - 2][last](base + (size_t) r * row_bytes, row_bytes, x + t * K, K, y + t * M + r, M);
            t += G;
        }
    }
}

/* 3 float32 rows (w, w + ldw, w + 2 ldw) x 4 tokens (x, x + ldx, ...): 12 outputs,
 * out[r * ldo + t] */
TK_AVX2 static void tile3x4_avx2(const float * w, int64_t ldw, const float * x, int64_t ldx, int64_t K, float * out, int64_t ldo) {
    const float * w0 = w, * w1 = w + ldw, * w2 = w + 2 * ldw;
    const float * x0 = x, * x1 = x + ldx, * x2 = x + 2 * ldx, * x3 = x + 3 * ldx;
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00,
           c20 = c00, c21 = c00, c22 = c00, c23 = c00;
    int64_t i = 0;
    for (; i + 8 <= K; i += 8) {
        const __m256 b0 = _mm256_loadu_ps(w0 + i), b1 = _mm256_loadu_ps(w1 + i), b2 = _mm256_loadu_ps(w2 + i);
        __m256 xv = _mm256_loadu_ps(x0 + i);
        c00 = _mm256_fmadd_ps(b0, xv, c00); c10 = _mm256_fmadd_ps(b1, xv, c10); c20 = _mm256_fmadd_ps(b2, xv, c20);
        xv = _mm256_loadu_ps(x1 + i);
        c01 = _mm256_fmadd_ps(b0, xv, c01); c11 = _mm256_fmadd_ps(b1, xv, c11); c21 = _mm256_fmadd_ps(b2, xv, c21);
        xv = _mm256_loadu_ps(x2 + i);
        c02 = _mm256_fmadd_ps(b0, xv, c02); c12 = _mm256_fmadd_ps(b1, xv, c12); c22 = _mm256_fmadd_ps(b2, xv, c22);
        xv = _mm256_loadu_ps(x3 + i);
        c03 = _mm256_fmadd_ps(b0, xv, c03); c13 = _mm256_fmadd_ps(b1, xv, c13); c23 = _mm256_fmadd_ps(b2, xv, c23);
    }
    float s[12] = {tk_hsum8_avx2(c00), tk_hsum8_avx2(c01), tk_hsum8_avx2(c02), tk_hsum8_avx2(c03), tk_hsum8_avx2(c10), tk_hsum8_avx2(c11),
                   tk_hsum8_avx2(c12), tk_hsum8_avx2(c13), tk_hsum8_avx2(c20), tk_hsum8_avx2(c21), tk_hsum8_avx2(c22), tk_hsum8_avx2(c23)};
    for (int r = 0; r < 3; r++)
        for (int t = 0; t < 4; t++) {
            float v = s[r * 4 + t];
            const float * wr = w + r * ldw, * xt = x + t * ldx;
            for (int64_t k = i; k < K; k++) v = fmaf(wr[k], xt[k], v);
            out[r * ldo + t] = v;
        }
}

/* 3 float32 rows x 1 token (three independent chains) */
TK_AVX2 static void dot3_avx2(const float * w, int64_t ldw, const float * x, int64_t K, float * out, int64_t ldo) {
    const float * w0 = w, * w1 = w + ldw, * w2 = w + 2 * ldw;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0;
    int64_t i = 0;
    for (; i + 8 <= K; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), xv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i), xv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i), xv, a2);
    }
    float s0 = tk_hsum8_avx2(a0), s1 = tk_hsum8_avx2(a1), s2 = tk_hsum8_avx2(a2);
    for (; i < K; i++) {
        s0 = fmaf(w0[i], x[i], s0);
        s1 = fmaf(w1[i], x[i], s1);
        s2 = fmaf(w2[i], x[i], s2);
    }
    out[0] = s0; out[ldo] = s1; out[2 * ldo] = s2;
}

/* 1 float32 row x 1 token */
TK_AVX2 static float dot1_avx2(const float * w, const float * x, int64_t K) {
    __m256 a = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= K; i += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a);
    float s = tk_hsum8_avx2(a);
    for (; i < K; i++) s = fmaf(w[i], x[i], s);
    return s;
}

/* an F16 / BF16 row to float32, the values load8 gives */
TK_AVX2 static void expand_avx2(int type, const uint8_t * p, float * dst, int64_t K) {
    int64_t i = 0;
    for (; i + 8 <= K; i += 8) _mm256_storeu_ps(dst + i, load8_avx2(type, p, i));
    for (; i < K; i++) dst[i] = elem_avx2(type, p, i);
}

#define TK_TILE_K_MAX 8192      /* 3 expanded rows on the stack: 96 KiB */

TK_AVX2 void tk_matmul_rows_avx2(int type, const uint8_t * base, size_t row_bytes, int64_t K, int64_t M,
                                 const float * x, int64_t n_tok, float * y, float * scratch, int64_t r0, int64_t r1) {
    if (n_tok == 1) {                            /* mat-vec: 4 rows share each x load */
        float o[4];
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) {
            dot_rows_direct_avx2(type, base + (size_t) r * row_bytes, row_bytes, 4, x, K, o);
            y[r] = o[0]; y[r + 1] = o[1]; y[r + 2] = o[2]; y[r + 3] = o[3];
        }
        for (; r < r1; r++) {
            dot_rows_direct_avx2(type, base + (size_t) r * row_bytes, row_bytes, 1, x, K, o);
            y[r] = o[0];
        }
        return;
    }
    if (n_tok <= (type == TK_GGML_F32 ? TK_FEWTOK_MAX_F32 : TK_FEWTOK_MAX)) {
        few_rows_avx2(type, base, row_bytes, K, M, x, n_tok, y, r0, r1);
        return;
    }
    /* mat-mat: token blocks whose activations stay in L2 (~256 KiB); in a block, tiles of
     * 3 rows (expanded once to float32) x 4 tokens, remainders one row / one token at a time */
    float rows3[K <= TK_TILE_K_MAX ? 3 * K : 1];
    const int tile = K <= TK_TILE_K_MAX;
    int64_t tb = (int64_t) 65536 / (K > 0 ? K : 1);
    tb = tb < 4 ? 4 : tb - tb % 4;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int64_t t1 = t0 + tb < n_tok ? t0 + tb : n_tok;
        int64_t r = r0;
        if (tile) {
            for (; r + 3 <= r1; r += 3) {
                const float * w3;
                if (type == TK_GGML_F32 && row_bytes == (size_t) K * sizeof(float)) {
                    w3 = (const float *) (const void *) (base + (size_t) r * row_bytes);
                } else {
                    for (int q = 0; q < 3; q++) {
                        const uint8_t * row = base + (size_t) (r + q) * row_bytes;
                        if (type == TK_GGML_F32) memcpy(rows3 + q * K, row, (size_t) K * sizeof(float));
                        else expand_avx2(type, row, rows3 + q * K, K);
                    }
                    w3 = rows3;
                }
                int64_t t = t0;
                float o[12];
                for (; t + 4 <= t1; t += 4) {
                    tile3x4_avx2(w3, K, x + t * K, K, K, o, 4);
                    for (int q = 0; q < 3; q++)
                        for (int u = 0; u < 4; u++) y[(t + u) * M + r + q] = o[q * 4 + u];
                }
                for (; t < t1; t++) dot3_avx2(w3, K, x + t * K, K, y + t * M + r, 1);
            }
        }
        for (; r < r1; r++) {
            const uint8_t * row = base + (size_t) r * row_bytes;
            const float * wr = (const float *) (const void *) row;
            if (type != TK_GGML_F32) {
                expand_avx2(type, row, scratch, K);
                wr = scratch;
            }
            for (int64_t t = t0; t < t1; t++) y[t * M + r] = dot1_avx2(wr, x + t * K, K);
        }
    }
}

/* tk_rms_norm at AVX2: the sum of squares in double, 8 lanes (two 4-double accumulators
 * for even and odd 4-float halves), added in a fixed tree, then the K % 8 tail in order;
 * y = (x * scale) * w as in the scalar loop.  Agrees with the scalar sum to double
 * rounding, so the float scale nearly always comes out the same. */
TK_AVX2 void tk_rms_norm_avx2(const float * x, const float * w, float eps, int64_t n, float * y) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        a0 = _mm256_fmadd_pd(lo, lo, a0);
        a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    const __m256d a = _mm256_add_pd(a0, a1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    double ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; i < n; i++) ss += (double) x[i] * (double) x[i];
    const float scale = (float) (1.0 / sqrt(ss / (double) n + (double) eps));
    const __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        _mm256_storeu_ps(y + i, w ? _mm256_mul_ps(v, _mm256_loadu_ps(w + i)) : v);
    }
    for (; i < n; i++) y[i] = w ? x[i] * scale * w[i] : x[i] * scale;
}

#endif
