/* lightning.c: lightning attention, one head of one sequence (contract: tk_testing.h,
 * tk_lightning_head): linear attention with a fixed per-head decay lambda = exp(-s),
 *   S <- lambda S + k_t v_t^T;  o_t = S^T q_t      (S: d x d, indexed [k][v])
 * (docs/specs/more-hybrids.md §5.4; HF modeling_minimax.py MiniMaxLightningAttention).  The state
 * is stored as llama.cpp keeps it: element (k, v) at S[v*d + k] (value row v holds S[:, v]).
 * Two forms of the same sums:
 *   - recurrent: token by token, O(n_tok d^2); the decode path and the reference (scalar,
 *     here), and its AVX2+FMA / AVX-512 forms (x86/lightning_avx2.c, lightning_avx512.c: 4
 *     value rows through 32 tokens at a time);
 *   - block (HF's prefill, modeling_minimax.py MiniMaxLightningAttention.forward, the
 *     `attn_weights_inter is None` branch): blocks of B = TK_LIGHTNING_BLOCK tokens.  Per
 *     block of L <= B tokens (Q, K, V: L x d rows; S the state entering the block), with
 *     lambda^n = exp(-s n):
 *       M_ij  = lambda^(i-j) for j <= i, else 0                 (HF's diagonal_decay)
 *       O     = (lambda^(i+1) Q_i) S + ((Q K^T) * M) V          (query_decay: inter + intra)
 *       S    <- lambda^L S + (lambda^(L-1-j) K_j)^T V           (key_decay, block_decay)
 *     which is the recurrence unrolled over the block.  HF's block_size (config) only picks
 *     where the blocks end: the sums are the same whatever B (verified in docs/specs/more-hybrids.md §5.1),
 *     so B here is ours (a partial last block is L < B rows: nothing is padded).
 * Every product of the block form is one kernel, the panel GEMM (gemm.c, tk_gemm_at: the
 * reference, AVX2 or AVX-512 instance of the level).  The decay powers are computed in double.  During a
 * block run the state is held transposed, Sn[k][v] (key row k of d values).
 */

#include <math.h>
#include <stdint.h>

#include "tk_internal.h"
#include "kernels/kernels.h"

#define TK_LIGHTNING_BLOCK 64
/* Runs from this length take the block form; 0: none do.  Why 128: per token the block form
 * takes 2 d^2 + B d multiply-adds (Q S, K^T V, and the in-block Q K^T and A V at B/2 each on
 * average), the recurrence 2 d^2 multiply-adds and d^2 multiplies: the block form can gain
 * at most ~1.2x at d = B = 64 and ~1.5x at d = 128, B = 64, and it does at d 128 at avx512
 * (its products run nearer the FMA peak than the recurrence's L1-bound update), less at
 * avx2.  Below a block its products are short and it loses (measured: below 0.9x up to 48
 * tokens).  MiniMax-Text-01's heads are d = 128: the default is 128 tokens, from which d 128
 * won in two runs at both levels; at d 64 it costs nothing measurable.  The measurements
 * (bench/lightning_kernels.py): bench/README.md, "Kernel thresholds". */
#define TK_LIGHTNING_MIN_DEFAULT 128

/* ==== threshold ======================================================================= */

static int g_lt_min = -1;      /* run length from which the block form is used; -1: the default */

int tk_lightning_threshold(void) {
    return tk_threshold_get(&g_lt_min, TK_LIGHTNING_MIN_DEFAULT);
}

int tk_lightning_set_threshold(int n) {
    return tk_threshold_set(&g_lt_min, n, TK_LIGHTNING_MIN_DEFAULT);
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

void tk_lightning_recurrent(const tk_lightning_head * h) {
    if (h->n_tok <= 0) return;
#ifdef TK_HAVE_X86
    const int lv = tk_cpu_level();
    if (lv >= TK_CPU_AVX512) { tk_lightning_recurrent_avx512(h); return; }
    if (lv >= TK_CPU_AVX2) { tk_lightning_recurrent_avx2(h); return; }
#endif
    lt_recurrent_scalar(h);
}

/* ==== the block form ==================================================================== */

/* Powers below this are taken as 0: lambda^n for a long block of a fast-decaying head
 * (s = 0.5: lambda^256 = 2.6e-56) would be a subnormal float32 operand (a microcode assist
 * per multiply on x86, as gdn_chunked.c found) and weighs its term far below the float32 resolution
 * of the block's O(1) terms (M_ii = 1). */
#define LT_TINY 1e-30

/* The whole run block by block; the state transposed into Sn on entry and back on exit.
 * Work: Sn [d][d], KT [d][B] (K transposed), A [B][B] (the masked Q K^T), pw [B + 1]. */
static void lt_block(const tk_lightning_head * h, tk_gemm_fn gemm) {
    const int32_t d = h->d, B = TK_LIGHTNING_BLOCK;
    float * Sn = h->work, * KT = Sn + (int64_t) d * d, * A = KT + (int64_t) d * B, * pw = A + (int64_t) B * B;
    for (int32_t n = 0; n <= B; n++) {           /* pw[n] = lambda^n */
        const double x = exp(-(double) h->slope * (double) n);
        pw[n] = x < LT_TINY ? 0.0f : (float) x;
    }
    tk_transpose(h->S, d, d, Sn);
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
    tk_transpose(Sn, d, d, h->S);
}

void tk_lightning_block(const tk_lightning_head * h) {
    if (h->n_tok <= 0 || !h->work) { tk_lightning_recurrent(h); return; }
    lt_block(h, tk_gemm_at(tk_cpu_level()));
}

/* ==== dispatch ========================================================================= */

void tk_lightning_run(const tk_lightning_head * h) {
    const int thr = tk_chunk_min(h->min_chunk, tk_lightning_threshold());
    if (h->n_tok <= 0) return;
    if (thr <= 0 || h->n_tok < thr || !h->work) { tk_lightning_recurrent(h); return; }
    tk_lightning_block(h);
}

