/* lightning.c: lightning attention, one head of one sequence (contract: tk_testing.h,
 * tk_lightning_head): linear attention with a fixed per-head decay lambda = exp(-s),
 *   S <- lambda S + k_t v_t^T;  o_t = S^T q_t      (S: d x d, indexed [k][v])
 * (spec more-hybrids.md §5.4; HF modeling_minimax.py MiniMaxLightningAttention).  The state
 * is stored as llama.cpp keeps it: element (k, v) at S[v*d + k] (value row v holds S[:, v]).
 * Two forms of the same sums:
 *   - recurrent: token by token, O(n_tok d^2); the decode path and the reference (scalar),
 *     and its AVX2+FMA / AVX-512 forms (4 value rows through 32 tokens at a time);
 *   - block (HF's prefill, modeling_minimax.py MiniMaxLightningAttention.forward, the
 *     `attn_weights_inter is None` branch): blocks of B = TK_LIGHTNING_BLOCK tokens.  Per
 *     block of L <= B tokens (Q, K, V: L x d rows; S the state entering the block), with
 *     lambda^n = exp(-s n):
 *       M_ij  = lambda^(i-j) for j <= i, else 0                 (HF's diagonal_decay)
 *       O     = (lambda^(i+1) Q_i) S + ((Q K^T) * M) V          (query_decay: inter + intra)
 *       S    <- lambda^L S + (lambda^(L-1-j) K_j)^T V           (key_decay, block_decay)
 *     which is the recurrence unrolled over the block.  HF's block_size (config) only picks
 *     where the blocks end: the sums are the same whatever B (verified in the spec §5.1),
 *     so B here is ours (a partial last block is L < B rows: nothing is padded).
 * Every product of the block form is one kernel, lt_gemm: out[r][0:N] (+)= sum_j c[r][j]
 * m[j][0:N], with a plain reference (lt_gemm_ref), an AVX2+FMA instance and an AVX-512
 * instance chosen by tk_cpu_level().  The decay powers are computed in double.  During a
 * block run the state is held transposed, Sn[k][v] (key row k of d values).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"

#define TK_LIGHTNING_BLOCK 64
/* Runs from this length take the block form; 0: none do.  Measured with
 * `python bench/lightning_kernels.py -r 5` (one head, 1 thread, slope 0.1; recurrent and block
 * samples in alternation, median tokens/s of thread CPU time and median ratio "x" = block /
 * recurrent; Intel Xeon, Sapphire Rapids class, 2 cores under KVM shared with five other
 * helpers' builds and tests: load average 7.4-8.9 during the runs):
 *            ---------------- avx2 ----------------   --------------- avx512 ---------------
 *    n_tok   d128 rec   block     x   d64 rec  block  x   d128 rec   block     x   d64 rec  block  x
 *        1    613135    46432  0.08  2558545  189188 0.07   649096    45225  0.07  2365606 173793 0.07
 *        8    852549   300427  0.35  2786648 1081694 0.39  1077490   289164  0.27  3351082 1119460 0.33
 *       16    894533   478791  0.54  3243018 1843874 0.56  1104723   485981  0.43  3582267 1890840 0.53
 *       32    696576   624763  0.90  3306677 2419001 0.73  1015866   738250  0.73  3845108 2370329 0.62
 *       64    881470   740975  0.81  2714251 2484686 0.92   938839   911419  0.98  4010883 2929847 0.73
 *       96    774946   865688  1.11  2868572 2874815 0.99   954975  1084720  1.13  3606736 3495659 0.97
 *      128    881215   909196  1.04  2928917 2824538 0.96   945650  1148875  1.21  3624129 3533965 0.97
 *      256    895953   997180  1.11  2844307 2924442 1.03   948662  1290747  1.35  3594061 4172736 1.17
 *      512    890201   972285  1.10  2836667 3133292 1.11   956199  1314374  1.37  3496206 4016581 1.15
 * (2, 4, 24, 48 tokens also measured: below 0.9x.)  A second run (-r 9, 64..512 tokens) gave
 * x = 1.01-1.39 (avx2) and 1.01-1.27 (avx512) at d 128 from 64 tokens, 1.15-1.39 / 1.22-1.27
 * from 128; at d 64 0.86-1.06 (within the noise: single figures move by up to 20% between
 * runs here).  Blocks of 32 instead of 64: no clear difference (0.91-1.32 at d 128).
 * Per token the block form takes 2 d^2 + B d multiply-adds (Q S, K^T V, and the in-block
 * Q K^T and A V at B/2 each on average), the recurrence 2 d^2 multiply-adds and d^2 multiplies:
 * the block form can gain at most ~1.2x at d = B = 64 and ~1.5x at d = 128, B = 64, which
 * is what d 128 shows at avx512 (its products run nearer the FMA peak than the recurrence's
 * L1-bound update).  MiniMax-Text-01's heads are d = 128: the default is 128 tokens, from
 * which d 128 won in both runs at both levels; at d 64 it costs nothing measurable. */
#define TK_LIGHTNING_MIN_DEFAULT 128

#if defined(__x86_64__) && defined(__GNUC__) && !defined(TK_EMULATE_AVX512)
#define LT_X86 1
#include <immintrin.h>
#define LT_AVX2 __attribute__((target("avx2,fma")))
#define LT_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#define LT_INLINE static inline __attribute__((always_inline))
#endif

/* ==== threshold (as gdn.c's tk_gdn_threshold) ========================================= */

static int g_lt_min = -1;      /* run length from which the block form is used; -1: the default */

int tk_lightning_threshold(void) {
    const int v = __atomic_load_n(&g_lt_min, __ATOMIC_RELAXED);
    return v < 0 ? TK_LIGHTNING_MIN_DEFAULT : v;
}

int tk_lightning_set_threshold(int n) {
    if (n < 0) { __atomic_store_n(&g_lt_min, -1, __ATOMIC_RELAXED); return tk_lightning_threshold(); }
    __atomic_store_n(&g_lt_min, n, __ATOMIC_RELAXED);
    return n;
}

int64_t tk_lightning_work_floats(int32_t d) {
    const int64_t B = TK_LIGHTNING_BLOCK;
    /* Sn [d][d], KT [d][B], A [B][B], pw [B + 1] */
    return d > 0 ? (int64_t) d * d + (int64_t) d * B + B * B + B + 1 : 0;
}

/* ==== recurrent form =================================================================== */

/* The reference: per token, per value row v, S[.][v] <- lambda S[.][v] + k v_v (one
 * multiply, one multiply-add per element), o_v = S[.][v] . q in ascending k. */
static void lt_recurrent_scalar(const tk_lightning_head * h) {
    const int32_t d = h->d;
    const float decay = expf(-h->slope);
    for (int32_t t = 0; t < h->n_tok; t++) {
        const float * q = h->q + t * h->q_stride, * k = h->k + t * h->k_stride, * v = h->v + t * h->v_stride;
        float * o = h->o + t * h->o_stride;
        for (int32_t vi = 0; vi < d; vi++) {
            float * col = h->S + (int64_t) vi * d;
            float acc = 0.0f;
            for (int32_t ki = 0; ki < d; ki++) {
                col[ki] = decay * col[ki] + k[ki] * v[vi];
                acc += col[ki] * q[ki];
            }
            o[vi] = acc;
        }
    }
}

/* The SIMD recurrences: the value rows 4 at a time (then 1) through blocks of LT_TOK_BLOCK
 * tokens while they sit in L1 (the rows of S are independent: row v reads only v_t[v]), per
 * element s <- fma(k, v_v, s lambda), acc <- fma(s, q, acc) in two accumulators of 8 (AVX2)
 * or 16 (AVX-512) lanes, the tail lanes masked.  The order of operations depends on the
 * token alone, not on where a call's run starts or ends: a run split over calls gives the
 * same bits (DESIGN.md: chunked prefill == one-shot). */
#define LT_TOK_BLOCK 32

#ifdef LT_X86
LT_AVX2 LT_INLINE __m256i lt_mask8(int32_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 lanes at S + i of NR rows (S_r = S + r d): S_r <- k v_r + lambda S_r; acc[r] += S_r q */
LT_AVX2 LT_INLINE void lt_upd8_avx2(float * S, int32_t d, int32_t i, const float * q, const float * k,
                                    const __m256 * vb, __m256 dec, __m256 * acc, int full, __m256i tail,
                                    const int NR) {
    const __m256 kk = full ? _mm256_loadu_ps(k + i) : _mm256_maskload_ps(k + i, tail);
    const __m256 qq = full ? _mm256_loadu_ps(q + i) : _mm256_maskload_ps(q + i, tail);
    for (int r = 0; r < NR; r++) {
        float * Sr = S + (int64_t) r * d + i;
        __m256 s = full ? _mm256_loadu_ps(Sr) : _mm256_maskload_ps(Sr, tail);
        s = _mm256_fmadd_ps(kk, vb[r], _mm256_mul_ps(s, dec));
        if (full) _mm256_storeu_ps(Sr, s); else _mm256_maskstore_ps(Sr, tail, s);
        acc[r] = _mm256_fmadd_ps(s, qq, acc[r]);
    }
}

LT_AVX2 LT_INLINE void lt_rows_avx2(float * S, int32_t d, const float * q, const float * k, const float * v,
                                    __m256 dec, float * o, const int NR) {
    const int32_t d8 = d & ~7;
    const __m256i tail = lt_mask8(d - d8 > 0 ? d - d8 : 1);
    __m256 a[4], b[4], vb[4];
    for (int r = 0; r < NR; r++) { vb[r] = _mm256_set1_ps(v[r]); a[r] = b[r] = _mm256_setzero_ps(); }
    int32_t i = 0;
    for (; i + 16 <= d; i += 16) {
        lt_upd8_avx2(S, d, i, q, k, vb, dec, a, 1, tail, NR);
        lt_upd8_avx2(S, d, i + 8, q, k, vb, dec, b, 1, tail, NR);
    }
    for (; i < d; i += 8) lt_upd8_avx2(S, d, i, q, k, vb, dec, a, i < d8, tail, NR);
    for (int r = 0; r < NR; r++) o[r] = tk_hsum8_avx2(_mm256_add_ps(a[r], b[r]));
}

LT_AVX2 static void lt_recurrent_avx2(const tk_lightning_head * h) {
    const int32_t d = h->d;
    const __m256 dec = _mm256_set1_ps(expf(-h->slope));
    for (int32_t t0 = 0; t0 < h->n_tok; t0 += LT_TOK_BLOCK) {
        const int32_t T = h->n_tok - t0 < LT_TOK_BLOCK ? h->n_tok - t0 : LT_TOK_BLOCK;
        for (int32_t j = 0; j < d;) {
            const int NR = d - j >= 4 ? 4 : 1;
            float * Sj = h->S + (int64_t) j * d;
            for (int32_t t = t0; t < t0 + T; t++) {
                const float * q = h->q + t * h->q_stride, * k = h->k + t * h->k_stride;
                const float * v = h->v + t * h->v_stride + j;
                float * o = h->o + t * h->o_stride + j;
                if (NR == 4) lt_rows_avx2(Sj, d, q, k, v, dec, o, 4);
                else lt_rows_avx2(Sj, d, q, k, v, dec, o, 1);
            }
            j += NR;
        }
    }
}

/* AVX-512: the same with 16 lanes; the 16 lanes summed as two halves of 8 added, then
 * tk_hsum8's tree. */
LT_AVX512 LT_INLINE float lt_hsum16(__m512 x) {
    const __m256 lo = _mm512_castps512_ps256(x);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
    return tk_hsum8_avx2(_mm256_add_ps(lo, hi));
}

LT_AVX512 LT_INLINE void lt_upd16_avx512(float * S, int32_t d, int32_t i, const float * q, const float * k,
                                         const __m512 * vb, __m512 dec, __m512 * acc, __mmask16 m, const int NR) {
    const __m512 kk = _mm512_maskz_loadu_ps(m, k + i), qq = _mm512_maskz_loadu_ps(m, q + i);
    for (int r = 0; r < NR; r++) {
        float * Sr = S + (int64_t) r * d + i;
        __m512 s = _mm512_maskz_loadu_ps(m, Sr);
        s = _mm512_fmadd_ps(kk, vb[r], _mm512_mul_ps(s, dec));
        _mm512_mask_storeu_ps(Sr, m, s);
        acc[r] = _mm512_fmadd_ps(s, qq, acc[r]);
    }
}

LT_AVX512 LT_INLINE void lt_rows_avx512(float * S, int32_t d, const float * q, const float * k, const float * v,
                                        __m512 dec, float * o, const int NR) {
    __m512 a[4], b[4], vb[4];
    for (int r = 0; r < NR; r++) { vb[r] = _mm512_set1_ps(v[r]); a[r] = b[r] = _mm512_setzero_ps(); }
    int32_t i = 0;
    for (; i + 32 <= d; i += 32) {
        lt_upd16_avx512(S, d, i, q, k, vb, dec, a, 0xFFFF, NR);
        lt_upd16_avx512(S, d, i + 16, q, k, vb, dec, b, 0xFFFF, NR);
    }
    for (; i < d; i += 16) {
        const __mmask16 m = d - i >= 16 ? 0xFFFF : (__mmask16) ((1u << (d - i)) - 1u);
        lt_upd16_avx512(S, d, i, q, k, vb, dec, a, m, NR);
    }
    for (int r = 0; r < NR; r++) o[r] = lt_hsum16(_mm512_add_ps(a[r], b[r]));
}

LT_AVX512 static void lt_recurrent_avx512(const tk_lightning_head * h) {
    const int32_t d = h->d;
    const __m512 dec = _mm512_set1_ps(expf(-h->slope));
    for (int32_t t0 = 0; t0 < h->n_tok; t0 += LT_TOK_BLOCK) {
        const int32_t T = h->n_tok - t0 < LT_TOK_BLOCK ? h->n_tok - t0 : LT_TOK_BLOCK;
        for (int32_t j = 0; j < d;) {
            const int NR = d - j >= 4 ? 4 : 1;
            float * Sj = h->S + (int64_t) j * d;
            for (int32_t t = t0; t < t0 + T; t++) {
                const float * q = h->q + t * h->q_stride, * k = h->k + t * h->k_stride;
                const float * v = h->v + t * h->v_stride + j;
                float * o = h->o + t * h->o_stride + j;
                if (NR == 4) lt_rows_avx512(Sj, d, q, k, v, dec, o, 4);
                else lt_rows_avx512(Sj, d, q, k, v, dec, o, 1);
            }
            j += NR;
        }
    }
}
#endif

void tk_lightning_recurrent(const tk_lightning_head * h) {
    if (h->n_tok <= 0) return;
#ifdef LT_X86
    const int lv = tk_cpu_level();
    if (lv >= TK_CPU_AVX512) { lt_recurrent_avx512(h); return; }
    if (lv >= TK_CPU_AVX2) { lt_recurrent_avx2(h); return; }
#endif
    lt_recurrent_scalar(h);
}

/* ==== the block form: the product kernel ============================================== */
/* Contract: for r < R and n < N,
 *   out[r*ldo + n] = (acc ? out[r*ldo + n] : 0) + sum_{j<J, ascending} c[r*ldc + j] m[j*ldm + n]
 * out must not overlap c or m.  Reference: plain loops, one axpy per (r, j); AVX2: 6 rows x
 * 16 columns in registers, columns n % 8 masked; AVX-512: 6 rows x 32 columns, n % 16
 * masked. */
typedef void (*lt_gemm_fn)(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm,
                           int32_t R, int32_t J, int32_t N, int acc);

static void lt_gemm_ref(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm,
                        int32_t R, int32_t J, int32_t N, int acc) {
    for (int32_t r = 0; r < R; r++) {
        float * o = out + r * ldo;
        if (!acc) memset(o, 0, (size_t) N * sizeof(float));
        for (int32_t j = 0; j < J; j++) {
            const float cj = c[r * ldc + j];
            const float * mj = m + j * ldm;
            for (int32_t n = 0; n < N; n++) o[n] += cj * mj[n];
        }
    }
}

#ifdef LT_X86
/* NR (1..6) rows x NV (1..2) vectors of 8 columns at out; the last vector's lanes under
 * `last` when `masked`. */
LT_AVX2 LT_INLINE void lt_gemm_block_avx2(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m,
                                          int64_t ldm, int32_t J, int acc, const int NR, const int NV,
                                          const int masked, __m256i last) {
    __m256 a[6][2];
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) {
            const int mk = masked && v == NV - 1;
            float * p = out + r * ldo + 8 * v;
            a[r][v] = !acc ? _mm256_setzero_ps() : mk ? _mm256_maskload_ps(p, last) : _mm256_loadu_ps(p);
        }
    for (int32_t j = 0; j < J; j++) {
        __m256 mv[2];
        for (int v = 0; v < NV; v++) {
            const float * p = m + j * ldm + 8 * v;
            mv[v] = masked && v == NV - 1 ? _mm256_maskload_ps(p, last) : _mm256_loadu_ps(p);
        }
        for (int r = 0; r < NR; r++) {
            const __m256 cr = _mm256_broadcast_ss(c + r * ldc + j);
            for (int v = 0; v < NV; v++) a[r][v] = _mm256_fmadd_ps(cr, mv[v], a[r][v]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) {
            float * p = out + r * ldo + 8 * v;
            if (masked && v == NV - 1) _mm256_maskstore_ps(p, last, a[r][v]); else _mm256_storeu_ps(p, a[r][v]);
        }
}

LT_AVX2 LT_INLINE void lt_gemm_panel_avx2(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m,
                                          int64_t ldm, int32_t R, int32_t J, int acc, const int NV, const int masked,
                                          __m256i last) {
    int32_t r = 0;
    for (; r + 6 <= R; r += 6) lt_gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 6, NV, masked, last);
    if (R - r >= 4) { lt_gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 4, NV, masked, last); r += 4; }
    if (R - r >= 2) { lt_gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 2, NV, masked, last); r += 2; }
    if (R - r >= 1) lt_gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 1, NV, masked, last);
}

LT_AVX2 static void lt_gemm_avx2(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m,
                                 int64_t ldm, int32_t R, int32_t J, int32_t N, int acc) {
    int32_t n = 0;
    const __m256i all = _mm256_set1_epi32(-1);
    for (; n + 16 <= N; n += 16) lt_gemm_panel_avx2(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 2, 0, all);
    if (n + 8 <= N) { lt_gemm_panel_avx2(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, 0, all); n += 8; }
    if (n < N) lt_gemm_panel_avx2(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, 1, lt_mask8(N - n));
}

/* AVX-512: NR (1..6) rows x NV (1..2) vectors of 16 columns; the last vector under `last` */
LT_AVX512 LT_INLINE void lt_gemm_block_avx512(float * out, int64_t ldo, const float * c, int64_t ldc,
                                              const float * m, int64_t ldm, int32_t J, int acc, const int NR,
                                              const int NV, __mmask16 last) {
    __m512 a[6][2];
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) {
            const __mmask16 mk = v == NV - 1 ? last : 0xFFFF;
            a[r][v] = acc ? _mm512_maskz_loadu_ps(mk, out + r * ldo + 16 * v) : _mm512_setzero_ps();
        }
    for (int32_t j = 0; j < J; j++) {
        __m512 mv[2];
        for (int v = 0; v < NV; v++) mv[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xFFFF, m + j * ldm + 16 * v);
        for (int r = 0; r < NR; r++) {
            const __m512 cr = _mm512_set1_ps(c[r * ldc + j]);
            for (int v = 0; v < NV; v++) a[r][v] = _mm512_fmadd_ps(cr, mv[v], a[r][v]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) _mm512_mask_storeu_ps(out + r * ldo + 16 * v, v == NV - 1 ? last : 0xFFFF, a[r][v]);
}

LT_AVX512 LT_INLINE void lt_gemm_panel_avx512(float * out, int64_t ldo, const float * c, int64_t ldc,
                                              const float * m, int64_t ldm, int32_t R, int32_t J, int acc,
                                              const int NV, __mmask16 last) {
    int32_t r = 0;
    for (; r + 6 <= R; r += 6) lt_gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 6, NV, last);
    if (R - r >= 4) { lt_gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 4, NV, last); r += 4; }
    if (R - r >= 2) { lt_gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 2, NV, last); r += 2; }
    if (R - r >= 1) lt_gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 1, NV, last);
}

LT_AVX512 static void lt_gemm_avx512(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m,
                                     int64_t ldm, int32_t R, int32_t J, int32_t N, int acc) {
    int32_t n = 0;
    for (; n + 32 <= N; n += 32) lt_gemm_panel_avx512(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 2, 0xFFFF);
    if (n + 16 <= N) { lt_gemm_panel_avx512(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, 0xFFFF); n += 16; }
    if (n < N) lt_gemm_panel_avx512(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, (__mmask16) ((1u << (N - n)) - 1u));
}
#endif

/* ==== the block form ==================================================================== */

/* Powers below this are taken as 0: lambda^n for a long block of a fast-decaying head
 * (s = 0.5: lambda^256 = 2.6e-56) would be a subnormal float32 operand (a microcode assist
 * per multiply on x86, as gdn.c found) and weighs its term far below the float32 resolution
 * of the block's O(1) terms (M_ii = 1). */
#define LT_TINY 1e-30

static void dst_transpose(const float * src, int32_t d, float * dst) {
    for (int32_t r0 = 0; r0 < d; r0 += 8)
        for (int32_t c0 = 0; c0 < d; c0 += 8) {
            const int32_t r1 = r0 + 8 < d ? r0 + 8 : d, c1 = c0 + 8 < d ? c0 + 8 : d;
            for (int32_t c = c0; c < c1; c++)
                for (int32_t r = r0; r < r1; r++) dst[(int64_t) c * d + r] = src[(int64_t) r * d + c];
        }
}

/* The whole run block by block; the state transposed into Sn on entry and back on exit.
 * Work: Sn [d][d], KT [d][B] (K transposed), A [B][B] (the masked Q K^T), pw [B + 1]. */
static void lt_block(const tk_lightning_head * h, lt_gemm_fn gemm) {
    const int32_t d = h->d, B = TK_LIGHTNING_BLOCK;
    float * Sn = h->work, * KT = Sn + (int64_t) d * d, * A = KT + (int64_t) d * B, * pw = A + (int64_t) B * B;
    for (int32_t n = 0; n <= B; n++) {           /* pw[n] = lambda^n */
        const double x = exp(-(double) h->slope * (double) n);
        pw[n] = x < LT_TINY ? 0.0f : (float) x;
    }
    dst_transpose(h->S, d, Sn);
    for (int32_t t0 = 0; t0 < h->n_tok; t0 += B) {
        const int32_t L = h->n_tok - t0 < B ? h->n_tok - t0 : B;
        const float * Q = h->q + t0 * h->q_stride, * V = h->v + t0 * h->v_stride;
        float * O = h->o + t0 * h->o_stride;
        /* KT[i][j] = k_{t0+j}[i] */
        for (int32_t j = 0; j < L; j++) {
            const float * k = h->k + (int64_t) (t0 + j) * h->k_stride;
            for (int32_t i = 0; i < d; i++) KT[(int64_t) i * B + j] = k[i];
        }
        /* A = Q K^T on and below the diagonal (8-row blocks up to the block's last row), then
         * A_ij *= lambda^(i-j) (j <= i), 0 above */
        for (int32_t r0 = 0; r0 < L; r0 += 8) {
            const int32_t R = L - r0 < 8 ? L - r0 : 8;
            gemm(A + (int64_t) r0 * B, B, Q + r0 * h->q_stride, h->q_stride, KT, B, R, d, r0 + R, 0);
            for (int32_t i = r0; i < r0 + R; i++) {
                float * a = A + (int64_t) i * B;
                for (int32_t j = 0; j <= i; j++) a[j] *= pw[i - j];
                for (int32_t j = i + 1; j < r0 + R; j++) a[j] = 0.0f;
            }
        }
        /* O = lambda^(i+1) (Q_i Sn)  (inter), then O += A V  (intra) */
        gemm(O, h->o_stride, Q, h->q_stride, Sn, d, L, d, d, 0);
        for (int32_t i = 0; i < L; i++) {
            float * o = O + i * h->o_stride;
            const float f = pw[i + 1];
            for (int32_t v = 0; v < d; v++) o[v] *= f;
        }
        for (int32_t r0 = 0; r0 < L; r0 += 8) {
            const int32_t R = L - r0 < 8 ? L - r0 : 8;
            gemm(O + r0 * h->o_stride, h->o_stride, A + (int64_t) r0 * B, B, V, h->v_stride, R, r0 + R, d, 1);
        }
        /* Sn <- lambda^L Sn + (lambda^(L-1-j) K_j)^T V */
        const float eL = pw[L];
        for (int64_t x = 0; x < (int64_t) d * d; x++) Sn[x] *= eL;
        for (int32_t i = 0; i < d; i++) {
            float * kt = KT + (int64_t) i * B;
            for (int32_t j = 0; j < L; j++) kt[j] *= pw[L - 1 - j];
        }
        gemm(Sn, d, KT, B, V, h->v_stride, d, L, d, 1);
    }
    dst_transpose(Sn, d, h->S);
}

void tk_lightning_block(const tk_lightning_head * h) {
    if (h->n_tok <= 0 || !h->work) { tk_lightning_recurrent(h); return; }
#ifdef LT_X86
    const int lv = tk_cpu_level();
    if (lv >= TK_CPU_AVX512) { lt_block(h, lt_gemm_avx512); return; }
    if (lv >= TK_CPU_AVX2) { lt_block(h, lt_gemm_avx2); return; }
#endif
    lt_block(h, lt_gemm_ref);
}

/* ==== dispatch ========================================================================= */

void tk_lightning_run(const tk_lightning_head * h) {
    const int thr = tk_chunk_min(h->min_chunk, tk_lightning_threshold());
    if (h->n_tok <= 0) return;
    if (thr <= 0 || h->n_tok < thr || !h->work) { tk_lightning_recurrent(h); return; }
    tk_lightning_block(h);
}
