/* gdn.c: the gated delta rule, one value head of one sequence (contract: tk_testing.h,
 * tk_gdn_head), with a scalar decay per token (GDN) or, with tk_gdn_head.gk, a decay per
 * key channel (Kimi Delta Attention, KDA: S <- Diag(exp(g_t)) S; its recurrence in
 * scalar, AVX2+FMA and AVX-512, and its chunked form, are in the "KDA" sections below,
 * the chunked form's math above kda_chunked_body).  Two forms of the same recurrence,
 *   S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
 * (S: Dk x Dv, element (key i, value j) at S[j*dk + i], as llama.cpp keeps it):
 *   - recurrent: token by token, O(n_tok Dk Dv); the decode path and the reference
 *     (scalar), and its AVX2+FMA form (4 value rows through 32 tokens at a time);
 *   - chunked (WY/UT, chunks of C = 64 tokens): for runs of at least tk_gdn_threshold()
 *     tokens.  Per chunk of L <= C tokens (K, Q: L x Dk rows, V: L x Dv rows, S the state
 *     entering the chunk, gamma_t = sum_{s<=t} g_s within the chunk):
 *       D_ts = exp(gamma_t - gamma_s) for s <= t, else 0
 *       A    = strictly_lower((beta K) K^T * D),   T = (I + A)^-1
 *       U = T (beta V),   W = T (beta exp(gamma) K),   V' = U - W S
 *       O    = (exp(gamma) Q) S + lower_incl_diag(Q K^T * D) V'
 *       S   <- exp(gamma_L) S + (exp(gamma_L - gamma) K)^T V'
 *     which is the recurrence unrolled over the chunk (a partial last chunk is L < 64 rows:
 *     nothing is padded).  V' is computed as T (beta (V - exp(gamma) K S)), the same
 *     product regrouped: it saves the L x Dk matrix W and its L^2/2 Dk multiply-adds.
 * ref: transformers modeling_qwen3_next.py torch_recurrent_gated_delta_rule /
 *      torch_chunk_gated_delta_rule; flash-linear-attention chunk_gated_delta_rule
 *      (fla/ops/gated_delta_rule/chunk.py: chunk_local_cumsum, chunk_scaled_dot_kkt,
 *      solve_tril, recompute_w_u, chunk_gated_delta_rule_fwd_h, chunk_fwd_o);
 *      llama.cpp ggml-cpu ops.cpp ggml_compute_forward_gated_delta_net (state layout);
 *      spec: ../shared/specs/gdn-family.md section 2.1 "Chunked form".
 *
 * The chunked stages, each a function below (names after fla's kernels):
 *   1. gdn_chunk_gather   the chunk's K and Q rows contiguous, K^T, beta
 *   2. gdn_chunk_gram     K K^T and Q K^T (lower triangles)          (chunk_scaled_dot_kkt)
 *   3. gdn_chunk_decay    D from the log decays: A (negated), Q K^T * D, exp(gamma),
 *                         exp(gamma_L - gamma)                        (chunk_local_cumsum)
 *   4. gdn_chunk_project  K S and Q S; R = beta (V - exp(gamma) K S); o = exp(gamma) Q S
 *   5. gdn_chunk_solve    V' = (I + A)^-1 R by forward substitution  (solve_tril, recompute_w_u)
 *   6. gdn_chunk_output   o += lower_incl_diag(Q K^T * D) V'          (chunk_fwd_o)
 *   7. gdn_chunk_state    S <- exp(gamma_L) S + (exp(gamma_L - gamma) K)^T V'  (chunk_fwd_h)
 * Every product in 2, 4, 5, 6, 7 is one kernel, gdn_gemm: out[r][0:N] += sum_j c[r][j]
 * m[j][0:N], with a plain reference (gdn_gemm_ref) and an AVX2+FMA instance
 * (gdn_gemm_avx2) chosen by tk_cpu_level(); the decays (stage 3) are scalar, in double.
 * (at the avx512 level both GDN's and KDA's chunked forms use an AVX-512 instance,
 * gdn_gemm_avx512; measured below.)
 * During a chunked run the state is held transposed, Sn[i][j] (key row i of Dv values).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"

#define TK_GDN_CHUNK 64
/* Runs from this length take the chunked form; 0: none do.  Measured with
 * `python bench/gdn_kernels.py -r 9` (one head, 1 thread; recurrent and chunked samples in
 * alternation, median tokens/s of thread CPU time and median ratio "x" = chunked /
 * recurrent; AVX2 kernels; Intel Xeon, Sapphire Rapids class, 2 cores under KVM shared
 * with other jobs, load 1.9):
 *    n_tok   128x128 rec  chunked     x     64x64 rec  chunked     x
 *        1        302008    26714  0.08        661965    79453  0.12
 *        8        243851   105380  0.42        915535   427118  0.46
 *       16        368069   247848  0.66       1182738   783848  0.68
 *       32        354781   272825  0.82       1200401   869707  0.72
 *       48        280466   264145  0.93        854886   697456  0.82
 *       64        280843   261871  0.92        913640   687550  0.77
 *       96        259922   257567  0.98        905251   746903  0.84
 *      128        260843   287662  0.99        937734   722594  0.81
 *      256        260023   269108  1.03        832081   720304  0.87
 *      512        302178   308671  1.03       1147306   914576  0.82
 * (2, 4, 12, 24 tokens also measured: below 0.8x.)  Repeated runs move single figures by
 * up to 15%; the ratios by a few %.
 * The chunked form never wins by more than the noise (1.03x at 256+ tokens of 128 x 128;
 * 0.8x at 64 x 64), and that is the arithmetic, not the code: per
 * token it takes 3 Dk Dv multiply-adds (K S, Q S, K^T V') plus C (Dk + Dv) for the in-chunk
 * products (K K^T, Q K^T, the solve, the in-chunk output: C/2 terms each on average), so
 * 65.5k at Dk = Dv = C x 2 = 128; the recurrence 3 Dk Dv multiply-adds plus Dk Dv
 * multiplies, 65.5k too; both kernels run at 65-75% of the FMA peak.  The chunked form pays
 * where matrix units make its products cheap (fla's GPUs); on AVX2 the recurrence, with
 * the state in L1 for 32 tokens at a time, is as fast or faster.  (Chunks of 32 halve the
 * in-chunk term: 1.06-1.08x at 512 tokens of 128 x 128 in a C harness timing both forms
 * alternately; the 64 of the spec and of fla is kept.)  So the default is 0 (never);
 * a context's gdn_min (the CLI's TOOLKIT_GDN_MIN) or tk_gdn_set_threshold turn it on.
 * At avx512 the chunked form's products run on gdn_gemm_avx512 (16-wide FMA).  Measured
 * (issue 36) with `python bench/gdn_kernels.py -r 5 --levels avx2,avx512 --dims
 * 128x128,64x64 --tokens 16,64,128,256,512 --no-steps` on the same Xeon, quiet (load 1.2):
 *            avx2: chunked / recurrent          avx512: chunked / recurrent
 *    n_tok   128x128   64x64                    128x128   64x64
 *       16    0.68     0.70                      0.71     0.59
 *       64    0.99     0.70                      1.07     0.70
 *      128    0.90     0.71                      1.12     0.93
 *      256    0.93     0.73                      1.21     0.77
 *      512    0.96     0.75                      1.24     0.95
 * At avx512 the chunked form wins on 128 x 128 heads (Qwen3.5, Qwen3-Next) from 64 tokens,
 * by 7-24%, and loses on 64 x 64.  The default stays 0 at every level: the GDN heads are
 * 8-10% of a Qwen3.5 pp512 profile, so the gain is 1-2% of a prompt, while a threshold makes
 * a ubatch's arithmetic depend on its length (a prompt taken whole and the same tokens one
 * by one, or a speculative verify, would no longer give the same bits). */
#define TK_GDN_MIN_DEFAULT 0

/* KDA heads (gk != NULL): from this length the chunked form; 0: none.  Measured with
 * `python bench/gdn_kernels.py --kda -r 9 --levels avx2,avx512` (as above, per level; g per
 * channel in [-3, 0]; same machine, 2 cores shared with 5 other jobs, load 8.7-9.0, so
 * single figures move by 20%):
 *                avx2                                     avx512
 *    n_tok  128x128 rec  chunked     x   64x64 x      128x128 rec  chunked     x   64x64 x
 *        1       373982    38400  0.11      0.12           506860    42072  0.08      0.12
 *        8       467929   192250  0.42      0.48           448257   239068  0.53      0.57
 *       16       485647   306740  0.63      0.61           559695   301275  0.54      0.63
 *       32       454173   359028  0.79      0.72           563887   370934  0.66      0.73
 *       64       416847   315045  0.77      0.59           530451   373521  0.70      0.75
 *      128       395694   308302  0.79      0.54           451088   388842  0.86      0.63
 *      256       389507   379944  0.98      0.58           549436   413430  0.75      0.66
 *      512       391322   400199  1.03      0.68           438303   410178  0.93      0.75
 * (2, 4, 12, 24, 48, 96 tokens also measured: 0.18-0.98.)  The chunked form never wins
 * beyond the noise, at either level or head size, for GDN's reason: per token it does the
 * 3 Dk Dv multiply-adds of K S, Q S and K^T V' against the recurrence's 4 Dk Dv vector
 * operations, plus the in-chunk work, which per-channel decay makes heavier (the decay
 * mask applied in the scaled rows and columns of every sub-block, the in-sub-block pairs
 * one by one).  A profile at 128 x 128, 512 tokens, avx512: products (gdn_gemm_avx512)
 * 34%, the in-chunk coefficients 24% (scaled rows and columns 12%, in-sub-block pairs
 * 12%), the state update's decays 7%, expf 7% (the recurrence pays it too).  So the
 * default is 0 (never); a context's kda_min (the CLI's TOOLKIT_KDA_MIN) or
 * tk_kda_set_threshold turn it on. */
#define TK_KDA_MIN_DEFAULT 0

#if defined(__x86_64__) && defined(__GNUC__)
#define GDN_X86 1
#include <immintrin.h>
#define GDN_AVX2 __attribute__((target("avx2,fma")))
#endif

/* ==== thresholds (as ssd.c's tk_ssd_threshold) ======================================= */

static int g_gdn_min = -1;     /* run length from which the chunked form is used; -1: the default */
static int g_kda_min = -1;     /* the same for KDA heads (gk != NULL) */

/* *slot, or dflt while it is not set */
static int gdn_threshold_of(const int * slot, int dflt) {
    const int v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    return v < 0 ? dflt : v;
}

int tk_gdn_threshold(void) { return gdn_threshold_of(&g_gdn_min, TK_GDN_MIN_DEFAULT); }

int tk_gdn_set_threshold(int n) {
    if (n < 0) { __atomic_store_n(&g_gdn_min, -1, __ATOMIC_RELAXED); return tk_gdn_threshold(); }
    __atomic_store_n(&g_gdn_min, n, __ATOMIC_RELAXED);
    return n;
}

int tk_kda_threshold(void) { return gdn_threshold_of(&g_kda_min, TK_KDA_MIN_DEFAULT); }

int tk_kda_set_threshold(int n) {
    if (n < 0) { __atomic_store_n(&g_kda_min, -1, __ATOMIC_RELAXED); return tk_kda_threshold(); }
    __atomic_store_n(&g_kda_min, n, __ATOMIC_RELAXED);
    return n;
}

/* ==== recurrent form =================================================================== */

/* S (Dv rows of Dk: row j = S[:, j]) through one token; o = S^T q after the update */
static void gdn_step_scalar(float * S, int32_t dk, int32_t dv, const float * q, const float * k, const float * v,
                            float g, float beta, float * o) {
    const float decay = expf(g);
    for (int32_t j = 0; j < dv; j++) {
        float * Sj = S + (int64_t) j * dk;
        float kv = 0.0f;                       /* (S^T k)_j after the decay */
        for (int32_t i = 0; i < dk; i++) { Sj[i] *= decay; kv += Sj[i] * k[i]; }
        const float u = beta * (v[j] - kv);
        float oj = 0.0f;
        for (int32_t i = 0; i < dk; i++) { Sj[i] += k[i] * u; oj += Sj[i] * q[i]; }
        o[j] = oj;
    }
}

/* KDA: S through one token with the per-key-channel decay dec[i] = exp(g_t[i]) (value row
 * j: S[j*dk + i] *= dec[i]); otherwise gdn_step_scalar's arithmetic. */
static void kda_step_scalar(float * S, int32_t dk, int32_t dv, const float * q, const float * k, const float * v,
                            const float * dec, float beta, float * o) {
    for (int32_t j = 0; j < dv; j++) {
        float * Sj = S + (int64_t) j * dk;
        float kv = 0.0f;
        for (int32_t i = 0; i < dk; i++) { Sj[i] *= dec[i]; kv += Sj[i] * k[i]; }
        const float u = beta * (v[j] - kv);
        float oj = 0.0f;
        for (int32_t i = 0; i < dk; i++) { Sj[i] += k[i] * u; oj += Sj[i] * q[i]; }
        o[j] = oj;
    }
}

/* Key channels whose decays the recurrent forms keep on the stack (KDA heads have 128);
 * wider heads take their exp(g) a piece at a time (kda_recurrent_scalar). */
#define KDA_DK_STACK 1024

/* The KDA recurrence, token by token: dec = expf(g_t) per channel, then kda_step_scalar.
 * Heads wider than KDA_DK_STACK: the same expf values, recomputed per value row. */
static void kda_recurrent_scalar(const tk_gdn_head * h) {
    const int32_t dk = h->dk, dv = h->dv;
    float dec[KDA_DK_STACK];
    for (int32_t t = 0; t < h->n_tok; t++) {
        const float * q = h->q + t * h->q_stride, * k = h->k + t * h->k_stride, * v = h->v + t * h->v_stride;
        const float * g = h->gk + t * h->gk_stride;
        const float beta = h->beta[t * h->gb_stride];
        float * o = h->o + t * h->o_stride;
        if (dk <= KDA_DK_STACK) {
            for (int32_t i = 0; i < dk; i++) dec[i] = expf(g[i]);
            kda_step_scalar(h->S, dk, dv, q, k, v, dec, beta, o);
            continue;
        }
        for (int32_t j = 0; j < dv; j++) {
            float * Sj = h->S + (int64_t) j * dk;
            float kv = 0.0f;
            for (int32_t i = 0; i < dk; i++) { Sj[i] *= expf(g[i]); kv += Sj[i] * k[i]; }
            const float u = beta * (v[j] - kv);
            float oj = 0.0f;
            for (int32_t i = 0; i < dk; i++) { Sj[i] += k[i] * u; oj += Sj[i] * q[i]; }
            o[j] = oj;
        }
    }
}

#ifdef GDN_X86
/* Lane mask of the first n (1..8) lanes. */
GDN_AVX2 static inline __m256i gdn_mask8(int32_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The AVX2 recurrence: per token and value row j, the scalar form's arithmetic with
 * kv = decay (S_j . k) and S_j <- decay S_j + k u_j (one multiply, one FMA), the dots in
 * 8 lanes.  Its order of operations depends on the token alone, not on where a call's run
 * starts or ends, so that a run split over several calls gives the same bits (DESIGN.md:
 * chunked prefill == one-shot).  (A lazily scaled state, S = c S', saves the multiply
 * but rescales at each call's end: the bits then depend on the split; not taken.) */

/* Pass 1 over NR (1..4) rows S_r = S + r*dk: S_r . k, 16 lanes at a time into two
 * accumulators per row (8 independent FMA chains for NR = 4: the FMA latency hidden), then
 * a[r] = their sum; dk % 16 lanes at the end as 8 and a masked 1..7. */
GDN_AVX2 static inline __attribute__((always_inline)) void gdn_rows_dot_avx2(const float * S, int32_t dk,
                                                                               const float * k, __m256 * a,
                                                                               const int NR) {
    const int32_t d8 = dk & ~7;
    const __m256i tail = gdn_mask8(dk - d8 > 0 ? dk - d8 : 1);
    __m256 b[4];
    for (int r = 0; r < NR; r++) a[r] = b[r] = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 16 <= dk; i += 16) {
        const __m256 k0 = _mm256_loadu_ps(k + i), k1 = _mm256_loadu_ps(k + i + 8);
        for (int r = 0; r < NR; r++) {
            const float * Sr = S + (int64_t) r * dk + i;
            a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(Sr), k0, a[r]);
            b[r] = _mm256_fmadd_ps(_mm256_loadu_ps(Sr + 8), k1, b[r]);
        }
    }
    for (; i < dk; i += 8) {
        const int full = i < d8;
        const __m256 kk = full ? _mm256_loadu_ps(k + i) : _mm256_maskload_ps(k + i, tail);
        for (int r = 0; r < NR; r++) {
            const float * Sr = S + (int64_t) r * dk + i;
            a[r] = _mm256_fmadd_ps(full ? _mm256_loadu_ps(Sr) : _mm256_maskload_ps(Sr, tail), kk, a[r]);
        }
    }
    for (int r = 0; r < NR; r++) a[r] = _mm256_add_ps(a[r], b[r]);
}

/* Pass 2 over 8 lanes at S + i of NR rows: S_r <- k u_r + decay S_r, acc[r] += S_r q
 * (lanes under `tail` when not full). */
GDN_AVX2 static inline __attribute__((always_inline)) void gdn_rows_upd8_avx2(float * S, int32_t dk, int32_t i,
                                                                                const float * q, const float * k,
                                                                                const __m256 * u, __m256 dec,
                                                                                __m256 * acc, int full, __m256i tail,
                                                                                const int NR) {
    const __m256 kk = full ? _mm256_loadu_ps(k + i) : _mm256_maskload_ps(k + i, tail);
    const __m256 qq = full ? _mm256_loadu_ps(q + i) : _mm256_maskload_ps(q + i, tail);
    for (int r = 0; r < NR; r++) {
        float * Sr = S + (int64_t) r * dk + i;
        __m256 s = full ? _mm256_loadu_ps(Sr) : _mm256_maskload_ps(Sr, tail);
        s = _mm256_fmadd_ps(kk, u[r], _mm256_mul_ps(s, dec));
        if (full) _mm256_storeu_ps(Sr, s); else _mm256_maskstore_ps(Sr, tail, s);
        acc[r] = _mm256_fmadd_ps(s, qq, acc[r]);
    }
}

/* NR (1..4) value rows S_r = S + r*dk through one token; v and o at the rows' first value. */
GDN_AVX2 static inline __attribute__((always_inline)) void gdn_rows_avx2(float * S, int32_t dk, const float * q,
                                                                           const float * k, const float * v,
                                                                           float decay, float beta, float * o,
                                                                           const int NR) {
    const int32_t d8 = dk & ~7;
    const __m256i tail = gdn_mask8(dk - d8 > 0 ? dk - d8 : 1);
    __m256 a[4], b[4], u[4];
    gdn_rows_dot_avx2(S, dk, k, a, NR);
    for (int r = 0; r < NR; r++) {
        u[r] = _mm256_set1_ps(beta * (v[r] - decay * tk_hsum8_avx2(a[r])));
        a[r] = b[r] = _mm256_setzero_ps();
    }
    const __m256 dec = _mm256_set1_ps(decay);
    int32_t i = 0;
    for (; i + 16 <= dk; i += 16) {               /* two accumulators per row, as pass 1 */
        gdn_rows_upd8_avx2(S, dk, i, q, k, u, dec, a, 1, tail, NR);
        gdn_rows_upd8_avx2(S, dk, i + 8, q, k, u, dec, b, 1, tail, NR);
    }
    for (; i < dk; i += 8) gdn_rows_upd8_avx2(S, dk, i, q, k, u, dec, a, i < d8, tail, NR);
    for (int r = 0; r < NR; r++) o[r] = tk_hsum8_avx2(_mm256_add_ps(a[r], b[r]));
}

/* The whole run, in blocks of GDN_TOK_BLOCK tokens: the value rows 4 at a time (then 1 at a
 * time) through all the block's tokens while they sit in L1.  The rows of S are independent
 * (row j reads only v_t[j]), so this is the token-major order's arithmetic; the state is
 * read and written from L2 once per block instead of once per token. */
#define GDN_TOK_BLOCK 32

GDN_AVX2 static void gdn_recurrent_avx2(const tk_gdn_head * h) {
    const int32_t dk = h->dk, dv = h->dv;
    float dec[GDN_TOK_BLOCK];
    for (int32_t t0 = 0; t0 < h->n_tok; t0 += GDN_TOK_BLOCK) {
        const int32_t T = h->n_tok - t0 < GDN_TOK_BLOCK ? h->n_tok - t0 : GDN_TOK_BLOCK;
        for (int32_t t = 0; t < T; t++) dec[t] = expf(h->g[(t0 + t) * h->gb_stride]);
        for (int32_t j = 0; j < dv;) {
            const int NR = dv - j >= 4 ? 4 : 1;
            float * Sj = h->S + (int64_t) j * dk;
            for (int32_t t = 0; t < T; t++) {
                const int64_t tt = t0 + t;
                const float * q = h->q + tt * h->q_stride, * k = h->k + tt * h->k_stride;
                const float * v = h->v + tt * h->v_stride + j;
                const float beta = h->beta[tt * h->gb_stride];
                float * o = h->o + tt * h->o_stride + j;
                if (NR == 4) gdn_rows_avx2(Sj, dk, q, k, v, dec[t], beta, o, 4);
                else gdn_rows_avx2(Sj, dk, q, k, v, dec[t], beta, o, 1);
            }
            j += NR;
        }
    }
}

/* ---- KDA (per-channel decay), AVX2+FMA ----
 * Per token t and value row j: kv = S_j . kd with kd[i] = dec[i] k[i] (dec = exp(g_t), per
 * channel), u = beta (v_j - kv), then S_j <- dec * S_j + k u, o_j = S_j . q (the scalar
 * form's arithmetic with the decay folded into the key for the dot, as the AVX2 GDN folds
 * its scalar decay).  dec and kd are computed once per token for a block of tokens; as for
 * GDN the arithmetic of a token does not depend on the blocking or on the call's bounds. */

/* Pass 2 over 8 lanes at S + i of NR rows: S_r <- k u_r + dec * S_r, acc[r] += S_r q. */
GDN_AVX2 static inline __attribute__((always_inline)) void kda_rows_upd8_avx2(float * S, int32_t dk, int32_t i,
                                                                                const float * q, const float * k,
                                                                                const float * dec, const __m256 * u,
                                                                                __m256 * acc, int full, __m256i tail,
                                                                                const int NR) {
    const __m256 kk = full ? _mm256_loadu_ps(k + i) : _mm256_maskload_ps(k + i, tail);
    const __m256 qq = full ? _mm256_loadu_ps(q + i) : _mm256_maskload_ps(q + i, tail);
    const __m256 dd = full ? _mm256_loadu_ps(dec + i) : _mm256_maskload_ps(dec + i, tail);
    for (int r = 0; r < NR; r++) {
        float * Sr = S + (int64_t) r * dk + i;
        __m256 s = full ? _mm256_loadu_ps(Sr) : _mm256_maskload_ps(Sr, tail);
        s = _mm256_fmadd_ps(kk, u[r], _mm256_mul_ps(s, dd));
        if (full) _mm256_storeu_ps(Sr, s); else _mm256_maskstore_ps(Sr, tail, s);
        acc[r] = _mm256_fmadd_ps(s, qq, acc[r]);
    }
}

/* NR (1..4) value rows S_r = S + r*dk through one token; kd = dec * k; v, o at the rows' first value. */
GDN_AVX2 static inline __attribute__((always_inline)) void kda_rows_avx2(float * S, int32_t dk, const float * q,
                                                                           const float * k, const float * kd,
                                                                           const float * dec, const float * v,
                                                                           float beta, float * o, const int NR) {
    const int32_t d8 = dk & ~7;
    const __m256i tail = gdn_mask8(dk - d8 > 0 ? dk - d8 : 1);
    __m256 a[4], b[4], u[4];
    gdn_rows_dot_avx2(S, dk, kd, a, NR);
    for (int r = 0; r < NR; r++) {
        u[r] = _mm256_set1_ps(beta * (v[r] - tk_hsum8_avx2(a[r])));
        a[r] = b[r] = _mm256_setzero_ps();
    }
    int32_t i = 0;
    for (; i + 16 <= dk; i += 16) {
        kda_rows_upd8_avx2(S, dk, i, q, k, dec, u, a, 1, tail, NR);
        kda_rows_upd8_avx2(S, dk, i + 8, q, k, dec, u, b, 1, tail, NR);
    }
    for (; i < dk; i += 8) kda_rows_upd8_avx2(S, dk, i, q, k, dec, u, a, i < d8, tail, NR);
    for (int r = 0; r < NR; r++) o[r] = tk_hsum8_avx2(_mm256_add_ps(a[r], b[r]));
}

/* floats of the per-token decays (dec, kd) the SIMD recurrences keep on the stack: blocks
 * of min(GDN_TOK_BLOCK, KDA_SIMD_FLOATS / dk) tokens; wider heads than KDA_SIMD_FLOATS take
 * the scalar recurrence */
#define KDA_SIMD_FLOATS 4096

/* dec[t][i] = expf(g_{t0+t}[i]), kd[t][i] = dec k for T tokens (the scalar form's expf) */
static void kda_block_decays(const tk_gdn_head * h, int32_t t0, int32_t T, float * dec, float * kd) {
    const int32_t dk = h->dk;
    for (int32_t t = 0; t < T; t++) {
        const float * g = h->gk + (t0 + t) * h->gk_stride, * k = h->k + (t0 + t) * h->k_stride;
        float * d = dec + (int64_t) t * dk, * kk = kd + (int64_t) t * dk;
        for (int32_t i = 0; i < dk; i++) { d[i] = expf(g[i]); kk[i] = d[i] * k[i]; }
    }
}

GDN_AVX2 static void kda_recurrent_avx2(const tk_gdn_head * h) {
    const int32_t dk = h->dk, dv = h->dv, TB = KDA_SIMD_FLOATS / dk < GDN_TOK_BLOCK ? KDA_SIMD_FLOATS / dk : GDN_TOK_BLOCK;
    float dec[KDA_SIMD_FLOATS], kd[KDA_SIMD_FLOATS];
    for (int32_t t0 = 0; t0 < h->n_tok; t0 += TB) {
        const int32_t T = h->n_tok - t0 < TB ? h->n_tok - t0 : TB;
        kda_block_decays(h, t0, T, dec, kd);
        for (int32_t j = 0; j < dv;) {
            const int NR = dv - j >= 4 ? 4 : 1;
            float * Sj = h->S + (int64_t) j * dk;
            for (int32_t t = 0; t < T; t++) {
                const int64_t tt = t0 + t;
                const float * q = h->q + tt * h->q_stride, * k = h->k + tt * h->k_stride;
                const float * v = h->v + tt * h->v_stride + j, * d = dec + (int64_t) t * dk, * kt = kd + (int64_t) t * dk;
                const float beta = h->beta[tt * h->gb_stride];
                float * o = h->o + tt * h->o_stride + j;
                if (NR == 4) kda_rows_avx2(Sj, dk, q, k, kt, d, v, beta, o, 4);
                else kda_rows_avx2(Sj, dk, q, k, kt, d, v, beta, o, 1);
            }
            j += NR;
        }
    }
}

/* ---- KDA, AVX-512 (F, VL): the AVX2 form's arithmetic on 16 lanes, 8 value rows (then 4,
 * then 1) with two accumulators each; tails under a lane mask.  Sums of the 16 lanes: _mm512_reduce_add_ps
 * (a fixed tree). ---- */
#define GDN_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))

/* a[r] = S_r . kd over dk lanes, 32 at a time into two accumulators, then 16, then masked */
GDN_AVX512 static inline __attribute__((always_inline)) void kda_rows_dot_avx512(const float * S, int32_t dk,
                                                                                   const float * kd, __m512 * a,
                                                                                   const int NR) {
    __m512 b[8];
    for (int r = 0; r < NR; r++) a[r] = b[r] = _mm512_setzero_ps();
    int32_t i = 0;
    for (; i + 32 <= dk; i += 32) {
        const __m512 k0 = _mm512_loadu_ps(kd + i), k1 = _mm512_loadu_ps(kd + i + 16);
        for (int r = 0; r < NR; r++) {
            const float * Sr = S + (int64_t) r * dk + i;
            a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(Sr), k0, a[r]);
            b[r] = _mm512_fmadd_ps(_mm512_loadu_ps(Sr + 16), k1, b[r]);
        }
    }
    for (; i < dk; i += 16) {
        const __mmask16 m = dk - i >= 16 ? (__mmask16) 0xffff : (__mmask16) ((1u << (dk - i)) - 1);
        const __m512 kk = _mm512_maskz_loadu_ps(m, kd + i);
        for (int r = 0; r < NR; r++) a[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, S + (int64_t) r * dk + i), kk, a[r]);
    }
    for (int r = 0; r < NR; r++) a[r] = _mm512_add_ps(a[r], b[r]);
}

/* 16 lanes (under m) at S + i of NR rows: S_r <- k u_r + dec * S_r, acc[r] += S_r q */
GDN_AVX512 static inline __attribute__((always_inline)) void kda_rows_upd16_avx512(float * S, int32_t dk, int32_t i,
                                                                                     const float * q, const float * k,
                                                                                     const float * dec, const __m512 * u,
                                                                                     __m512 * acc, __mmask16 m,
                                                                                     const int NR) {
    const __m512 kk = _mm512_maskz_loadu_ps(m, k + i), qq = _mm512_maskz_loadu_ps(m, q + i);
    const __m512 dd = _mm512_maskz_loadu_ps(m, dec + i);
    for (int r = 0; r < NR; r++) {
        float * Sr = S + (int64_t) r * dk + i;
        __m512 s = _mm512_fmadd_ps(kk, u[r], _mm512_mul_ps(_mm512_maskz_loadu_ps(m, Sr), dd));
        _mm512_mask_storeu_ps(Sr, m, s);
        acc[r] = _mm512_fmadd_ps(s, qq, acc[r]);
    }
}

GDN_AVX512 static inline __attribute__((always_inline)) void kda_rows_avx512(float * S, int32_t dk, const float * q,
                                                                               const float * k, const float * kd,
                                                                               const float * dec, const float * v,
                                                                               float beta, float * o, const int NR) {
    __m512 a[8], b[8], u[8];
    kda_rows_dot_avx512(S, dk, kd, a, NR);
    for (int r = 0; r < NR; r++) {
        u[r] = _mm512_set1_ps(beta * (v[r] - _mm512_reduce_add_ps(a[r])));
        a[r] = b[r] = _mm512_setzero_ps();
    }
    int32_t i = 0;
    for (; i + 32 <= dk; i += 32) {
        kda_rows_upd16_avx512(S, dk, i, q, k, dec, u, a, (__mmask16) 0xffff, NR);
        kda_rows_upd16_avx512(S, dk, i + 16, q, k, dec, u, b, (__mmask16) 0xffff, NR);
    }
    for (; i < dk; i += 16) {
        const __mmask16 m = dk - i >= 16 ? (__mmask16) 0xffff : (__mmask16) ((1u << (dk - i)) - 1);
        kda_rows_upd16_avx512(S, dk, i, q, k, dec, u, a, m, NR);
    }
    for (int r = 0; r < NR; r++) o[r] = _mm512_reduce_add_ps(_mm512_add_ps(a[r], b[r]));
}

GDN_AVX512 static void kda_recurrent_avx512(const tk_gdn_head * h) {
    const int32_t dk = h->dk, dv = h->dv, TB = KDA_SIMD_FLOATS / dk < GDN_TOK_BLOCK ? KDA_SIMD_FLOATS / dk : GDN_TOK_BLOCK;
    float dec[KDA_SIMD_FLOATS], kd[KDA_SIMD_FLOATS];
    for (int32_t t0 = 0; t0 < h->n_tok; t0 += TB) {
        const int32_t T = h->n_tok - t0 < TB ? h->n_tok - t0 : TB;
        kda_block_decays(h, t0, T, dec, kd);
        for (int32_t j = 0; j < dv;) {
            const int NR = dv - j >= 8 ? 8 : dv - j >= 4 ? 4 : 1;
            float * Sj = h->S + (int64_t) j * dk;
            for (int32_t t = 0; t < T; t++) {
                const int64_t tt = t0 + t;
                const float * q = h->q + tt * h->q_stride, * k = h->k + tt * h->k_stride;
                const float * v = h->v + tt * h->v_stride + j, * d = dec + (int64_t) t * dk, * kt = kd + (int64_t) t * dk;
                const float beta = h->beta[tt * h->gb_stride];
                float * o = h->o + tt * h->o_stride + j;
                if (NR == 8) kda_rows_avx512(Sj, dk, q, k, kt, d, v, beta, o, 8);
                else if (NR == 4) kda_rows_avx512(Sj, dk, q, k, kt, d, v, beta, o, 4);
                else kda_rows_avx512(Sj, dk, q, k, kt, d, v, beta, o, 1);
            }
            j += NR;
        }
    }
}
#endif

static void gdn_recurrent_scalar(const tk_gdn_head * h) {
    for (int32_t t = 0; t < h->n_tok; t++)
        gdn_step_scalar(h->S, h->dk, h->dv, h->q + t * h->q_stride, h->k + t * h->k_stride, h->v + t * h->v_stride,
                        h->g[t * h->gb_stride], h->beta[t * h->gb_stride], h->o + t * h->o_stride);
}

void tk_gdn_recurrent(const tk_gdn_head * h) {
#ifdef GDN_X86
    if (h->gk && h->dk <= KDA_SIMD_FLOATS && tk_cpu_level() >= TK_CPU_AVX512) { kda_recurrent_avx512(h); return; }
    if (h->gk && h->dk <= KDA_SIMD_FLOATS && tk_cpu_level() >= TK_CPU_AVX2) { kda_recurrent_avx2(h); return; }
#endif
    if (h->gk) { kda_recurrent_scalar(h); return; }
#ifdef GDN_X86
    if (tk_cpu_level() >= TK_CPU_AVX2) { gdn_recurrent_avx2(h); return; }
#endif
    gdn_recurrent_scalar(h);
}

/* ==== the chunked form: the product kernel ============================================ */
/* Contract: for r < R and n < N,
 *   out[r*ldo + n] = (acc ? out[r*ldo + n] : 0) + sum_{j<J, ascending} c[r*ldc + j] m[j*ldm + n]
 * out must not overlap c or m.  Reference: plain loops, one axpy per (r, j) (vectorizable
 * without reassociation); AVX2: 6 rows x 16 columns in registers, columns n % 8 masked. */
typedef void (*gdn_gemm_fn)(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm,
                            int32_t R, int32_t J, int32_t N, int acc);

static void gdn_gemm_ref(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm,
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

#ifdef GDN_X86
/* NR (1..6) rows x NV (1..2) vectors of 8 columns at out + n0; the last vector's lanes
 * under `last` (all lanes when the block is whole). */
GDN_AVX2 static inline __attribute__((always_inline)) void gdn_gemm_block_avx2(
    float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t J, int acc,
    const int NR, const int NV, const int masked, __m256i last) {
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

/* One panel of NV vectors of columns (at out, m) over all R rows: 6 rows at a time, then
 * 4, 2, 1.  The panel of m (J x 8 NV floats) stays in L1 across the row blocks. */
GDN_AVX2 static inline __attribute__((always_inline)) void gdn_gemm_panel_avx2(
    float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t R, int32_t J,
    int acc, const int NV, const int masked, __m256i last) {
    int32_t r = 0;
    for (; r + 6 <= R; r += 6) gdn_gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 6, NV, masked, last);
    if (R - r >= 4) { gdn_gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 4, NV, masked, last); r += 4; }
    if (R - r >= 2) { gdn_gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 2, NV, masked, last); r += 2; }
    if (R - r >= 1) gdn_gemm_block_avx2(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 1, NV, masked, last);
}

/* Column panels of 16, then 8, then a masked 1..7. */
GDN_AVX2 static void gdn_gemm_avx2(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m,
                                   int64_t ldm, int32_t R, int32_t J, int32_t N, int acc) {
    int32_t n = 0;
    const __m256i all = _mm256_set1_epi32(-1);
    for (; n + 16 <= N; n += 16) gdn_gemm_panel_avx2(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 2, 0, all);
    if (n + 8 <= N) { gdn_gemm_panel_avx2(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, 0, all); n += 8; }
    if (n < N) gdn_gemm_panel_avx2(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, 1, gdn_mask8(N - n));
}

/* The AVX-512 instance: the AVX2 one's blocking on 16-float vectors (6 rows x 2 vectors of
 * 16 columns in registers; the last vector's columns under a lane mask). */
GDN_AVX512 static inline __attribute__((always_inline)) void gdn_gemm_block_avx512(
    float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t J, int acc,
    const int NR, const int NV, __mmask16 last) {
    __m512 a[6][2];
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) {
            const __mmask16 mk = v == NV - 1 ? last : (__mmask16) 0xffff;
            a[r][v] = acc ? _mm512_maskz_loadu_ps(mk, out + r * ldo + 16 * v) : _mm512_setzero_ps();
        }
    for (int32_t j = 0; j < J; j++) {
        __m512 mv[2];
        for (int v = 0; v < NV; v++)
            mv[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : (__mmask16) 0xffff, m + j * ldm + 16 * v);
        for (int r = 0; r < NR; r++) {
            const __m512 cr = _mm512_set1_ps(c[r * ldc + j]);
            for (int v = 0; v < NV; v++) a[r][v] = _mm512_fmadd_ps(cr, mv[v], a[r][v]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(out + r * ldo + 16 * v, v == NV - 1 ? last : (__mmask16) 0xffff, a[r][v]);
}

GDN_AVX512 static inline __attribute__((always_inline)) void gdn_gemm_panel_avx512(
    float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t R, int32_t J,
    int acc, const int NV, __mmask16 last) {
    int32_t r = 0;
    for (; r + 6 <= R; r += 6) gdn_gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 6, NV, last);
    if (R - r >= 4) { gdn_gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 4, NV, last); r += 4; }
    if (R - r >= 2) { gdn_gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 2, NV, last); r += 2; }
    if (R - r >= 1) gdn_gemm_block_avx512(out + r * ldo, ldo, c + r * ldc, ldc, m, ldm, J, acc, 1, NV, last);
}

/* Column panels of 32, then 16, then a masked 1..15. */
GDN_AVX512 static void gdn_gemm_avx512(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m,
                                       int64_t ldm, int32_t R, int32_t J, int32_t N, int acc) {
    int32_t n = 0;
    for (; n + 32 <= N; n += 32) gdn_gemm_panel_avx512(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 2, 0xffff);
    if (n + 16 <= N) { gdn_gemm_panel_avx512(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, 0xffff); n += 16; }
    if (n < N) gdn_gemm_panel_avx512(out + n, ldo, c, ldc, m + n, ldm, R, J, acc, 1, (__mmask16) ((1u << (N - n)) - 1));
}
#endif

/* ==== the chunked form: workspace and stages =========================================== */

/* The workspace, carved from tk_gdn_work_floats(dk, dv) floats. */
typedef struct {
    float * Sn;                /* [Dk][Dv] the state, transposed (key row i holds S[i, :]) */
    float * KQ;                /* [2C][Dk] the chunk's K rows, then its Q rows */
    float * KT;                /* [Dk][C] K transposed; stage 7 scales column s by exp(gamma_L - gamma_s) */
    float * G;                 /* [2C][C] rows t < L: -beta_t K_t.K_s D_ts (s < t; A negated),
                                  rows C + t: Q_t.K_s D_ts (s <= t) */
    float * X;                 /* [2C][Dv] rows t < L: K_t S, then R_t, then V'_t;  rows C + t: Q_t S */
    float * eg, * ec, * bt;    /* [C] exp(gamma_t), exp(gamma_L - gamma_t), beta_t */
    double * da;               /* [C] exp(g_t) */
} gdn_ws;

static int64_t gdn_ws_floats(int32_t dk, int32_t dv) {
    const int64_t C = TK_GDN_CHUNK;
    return (int64_t) dk * dv + 3 * C * dk + 2 * C * C + 2 * C * dv + 3 * C + 2 * C + 2;
}

int64_t tk_gdn_work_floats(int32_t dk, int32_t dv) { return dk > 0 && dv > 0 ? gdn_ws_floats(dk, dv) : 0; }

/* KDA's chunked workspace (chunk C = 64, sub-blocks of 16; layout: kda_ws_at): the state
 * transposed (Dk Dv); K and Q rows raw and scaled by exp(Gamma_t) (4 C Dk); a sub-block's
 * rows scaled to its first token (2 x 16 Dk); scaled key rows and their transpose
 * (2 C Dk); exp(g_t) per channel (C Dk); the in-chunk coefficients (2 C C); the row products
 * (2 C Dv); beta (C); a float row (Dk); three double rows of running decay products
 * (6 Dk, + 1 for alignment). */
static int64_t kda_ws_floats(int32_t dk, int32_t dv) {
    const int64_t C = TK_GDN_CHUNK;
    return (int64_t) dk * dv + 4 * C * dk + 2 * 16 * dk + 3 * C * dk + 2 * C * C + 2 * C * dv + C + dk + 6 * dk + 2;
}

static gdn_ws gdn_ws_at(float * work, int32_t dk, int32_t dv) {
    const int64_t C = TK_GDN_CHUNK;
    gdn_ws w;
    w.Sn = work;
    w.KQ = w.Sn + (int64_t) dk * dv;
    w.KT = w.KQ + 2 * C * dk;
    w.G = w.KT + C * dk;
    w.X = w.G + 2 * C * C;
    w.eg = w.X + 2 * C * dv;
    w.ec = w.eg + C;
    w.bt = w.ec + C;
    float * d = w.bt + C;
    w.da = (double *) (void *) (d + ((uintptr_t) d % 8 ? 1 : 0));
    return w;
}

/* One chunk: tokens [t0, t0 + L) of the head. */
typedef struct {
    const tk_gdn_head * h;
    int32_t t0, L;
    gdn_ws * w;
    gdn_gemm_fn gemm;
} gdn_chunk;

/* ---- stage 1 ---- */
/* KQ[t] = k_{t0+t}, KQ[C + t] = q_{t0+t} (t < L);  KT[i][t] = k_{t0+t}[i];  bt[t] = beta;
 * da[t] = exp(g_t) (double). */
static void gdn_chunk_gather(const gdn_chunk * c) {
    const tk_gdn_head * h = c->h;
    const int32_t dk = h->dk, C = TK_GDN_CHUNK, L = c->L;
    gdn_ws * w = c->w;
    for (int32_t t = 0; t < L; t++) {
        const int64_t tt = c->t0 + t;
        const float * k = h->k + tt * h->k_stride;
        memcpy(w->KQ + (int64_t) t * dk, k, (size_t) dk * sizeof(float));
        memcpy(w->KQ + (int64_t) (C + t) * dk, h->q + tt * h->q_stride, (size_t) dk * sizeof(float));
        for (int32_t i = 0; i < dk; i++) w->KT[(int64_t) i * C + t] = k[i];
        w->bt[t] = h->beta[tt * h->gb_stride];
        w->da[t] = exp((double) h->g[tt * h->gb_stride]);
    }
}

/* ---- stage 2 ---- */
/* G[t][s] = K_t . K_s and G[C + t][s] = Q_t . K_s for s <= t (8-row blocks: columns up to
 * the block's last row; the entries above the diagonal a block computes are not read). */
static void gdn_chunk_gram(const gdn_chunk * c) {
    const int32_t dk = c->h->dk, C = TK_GDN_CHUNK, L = c->L;
    gdn_ws * w = c->w;
    for (int32_t r0 = 0; r0 < L; r0 += 8) {
        const int32_t R = L - r0 < 8 ? L - r0 : 8;
        const int32_t N = r0 + R;
        c->gemm(w->G + (int64_t) r0 * C, C, w->KQ + (int64_t) r0 * dk, dk, w->KT, C, R, dk, N, 0);
        c->gemm(w->G + (int64_t) (C + r0) * C, C, w->KQ + (int64_t) (C + r0) * dk, dk, w->KT, C, R, dk, N, 0);
    }
}

/* ---- stage 3 ---- */
/* Decay factors below this are taken as 0.  Over a chunk the log decays add up (64 tokens of
 * g = -1.5 give exp(-96) = 2e-42): such a factor weighs its term more than 1e-23 below the
 * float32 resolution of the O(1) terms beside it (the D_tt = 1 diagonal, the chunk's latest
 * tokens), and as a subnormal float32 operand it costs a microcode assist per multiply
 * (x86): the chunked form ran 5x slower than the recurrence at 64 tokens before this. */
#define GDN_TINY 1e-30

static inline float gdn_flush(double x) { return fabs(x) < GDN_TINY ? 0.0f : (float) x; }

/* D_ts = exp(gamma_t - gamma_s) = prod_{s < u <= t} exp(g_u) (double, 1 at s = t: no
 * difference of large sums, no overflow; below GDN_TINY: 0, and so is every D_ts' for
 * s' < s), then (each product below GDN_TINY: 0)
 *   G[t][s] <- -beta_t G[t][s] D_ts (s < t), 0 (s >= t; up to the row's 8-block end)
 *   G[C+t][s] <- G[C+t][s] D_ts (s <= t), 0 above
 *   eg[t] = exp(gamma_t) = prod_{u <= t} exp(g_u);  ec[s] = D_{L-1,s}. */
static void gdn_chunk_decay(const gdn_chunk * c) {
    const int32_t C = TK_GDN_CHUNK, L = c->L;
    gdn_ws * w = c->w;
    double cum = 1.0;
    for (int32_t t = 0; t < L; t++) {
        float * a = w->G + (int64_t) t * C, * b = w->G + (int64_t) (C + t) * C;
        const int32_t end = ((t >> 3) + 1) * 8 < C ? ((t >> 3) + 1) * 8 : C;
        for (int32_t s = t; s < end; s++) { a[s] = 0.0f; if (s > t) b[s] = 0.0f; }
        const double bt = w->bt[t];
        double e = 1.0;
        int32_t s = t;
        for (; s >= 0 && e >= GDN_TINY; s--) {
            if (s < t) a[s] = gdn_flush(-bt * a[s] * e);
            b[s] = gdn_flush(b[s] * e);
            if (t == L - 1) w->ec[s] = (float) e;
            if (s > 0) e *= w->da[s];
        }
        for (; s >= 0; s--) {
            a[s] = b[s] = 0.0f;
            if (t == L - 1) w->ec[s] = 0.0f;
        }
        cum = cum < GDN_TINY ? 0.0 : cum * w->da[t];
        w->eg[t] = gdn_flush(cum);
    }
}

/* ---- stage 4 ---- */
/* X[t] = K_t S, X[C + t] = Q_t S (one product over the 2 x 64 rows when L = 64), then
 *   X[t] <- beta_t (v_t - eg_t X[t])  (R),   o_t = eg_t X[C + t]. */
static void gdn_chunk_project(const gdn_chunk * c) {
    const tk_gdn_head * h = c->h;
    const int32_t dk = h->dk, dv = h->dv, C = TK_GDN_CHUNK, L = c->L;
    gdn_ws * w = c->w;
    if (L == C) {
        c->gemm(w->X, dv, w->KQ, dk, w->Sn, dv, 2 * C, dk, dv, 0);
    } else {
        c->gemm(w->X, dv, w->KQ, dk, w->Sn, dv, L, dk, dv, 0);
        c->gemm(w->X + (int64_t) C * dv, dv, w->KQ + (int64_t) C * dk, dk, w->Sn, dv, L, dk, dv, 0);
    }
    for (int32_t t = 0; t < L; t++) {
        const int64_t tt = c->t0 + t;
        const float * v = h->v + tt * h->v_stride;
        float * x = w->X + (int64_t) t * dv, * xq = w->X + (int64_t) (C + t) * dv, * o = h->o + tt * h->o_stride;
        const float e = w->eg[t], b = w->bt[t];
        for (int32_t j = 0; j < dv; j++) { x[j] = b * (v[j] - e * x[j]); o[j] = e * xq[j]; }
    }
}

/* ---- stage 5 ---- */
/* (I + A) V' = R by forward substitution, in place in X[0:L]: V'_t = R_t + sum_{s<t}
 * G[t][s] V'_s (G holds -A).  4-row blocks: the rows before the block in one product, then
 * the block's own lower triangle row by row. */
static void gdn_chunk_solve(const gdn_chunk * c) {
    const int32_t dv = c->h->dv, C = TK_GDN_CHUNK, L = c->L;
    gdn_ws * w = c->w;
    for (int32_t r0 = 0; r0 < L; r0 += 4) {
        const int32_t R = L - r0 < 4 ? L - r0 : 4;
        if (r0 > 0) c->gemm(w->X + (int64_t) r0 * dv, dv, w->G + (int64_t) r0 * C, C, w->X, dv, R, r0, dv, 1);
        for (int32_t t = r0 + 1; t < r0 + R; t++)
            c->gemm(w->X + (int64_t) t * dv, dv, w->G + (int64_t) t * C + r0, C, w->X + (int64_t) r0 * dv, dv, 1,
                    t - r0, dv, 1);
    }
}

/* ---- stage 6 ---- */
/* o_t += sum_{s <= t} G[C+t][s] V'_s (8-row blocks, up to the block's last row: the
 * coefficients above the diagonal are 0). */
static void gdn_chunk_output(const gdn_chunk * c) {
    const tk_gdn_head * h = c->h;
    const int32_t dv = h->dv, C = TK_GDN_CHUNK, L = c->L;
    gdn_ws * w = c->w;
    for (int32_t r0 = 0; r0 < L; r0 += 8) {
        const int32_t R = L - r0 < 8 ? L - r0 : 8;
        c->gemm(h->o + (c->t0 + r0) * h->o_stride, h->o_stride, w->G + (int64_t) (C + r0) * C, C, w->X, dv, R,
                r0 + R, dv, 1);
    }
}

/* ---- stage 7 ---- */
/* Sn <- eg_{L-1} Sn;  KT[i][s] *= ec_s;  Sn[i] += sum_{s<L} KT[i][s] V'_s. */
static void gdn_chunk_state(const gdn_chunk * c) {
    const int32_t dk = c->h->dk, dv = c->h->dv, C = TK_GDN_CHUNK, L = c->L;
    gdn_ws * w = c->w;
    const float eL = w->eg[L - 1];
    for (int64_t x = 0; x < (int64_t) dk * dv; x++) w->Sn[x] *= eL;
    for (int32_t i = 0; i < dk; i++) {
        float * kt = w->KT + (int64_t) i * C;
        for (int32_t s = 0; s < L; s++) kt[s] *= w->ec[s];
    }
    c->gemm(w->Sn, dv, w->KT, C, w->X, dv, dk, L, dv, 1);
}

/* dst[c*rows + r] = src[r*cols + c], in 8 x 8 tiles (a row-at-a-time transpose of a
 * 128 x 128 state missed the cache on every element: half of a 16-token chunked call). */
static void gdn_transpose(const float * src, int32_t rows, int32_t cols, float * dst) {
    for (int32_t r0 = 0; r0 < rows; r0 += 8)
        for (int32_t c0 = 0; c0 < cols; c0 += 8) {
            const int32_t r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int32_t c = c0; c < c1; c++)
                for (int32_t r = r0; r < r1; r++) dst[(int64_t) c * rows + r] = src[(int64_t) r * cols + c];
        }
}

/* The whole run chunk by chunk; the state transposed into Sn on entry and back on exit. */
static void gdn_chunked(const tk_gdn_head * h, gdn_gemm_fn gemm) {
    const int32_t dk = h->dk, dv = h->dv, C = TK_GDN_CHUNK;
    gdn_ws w = gdn_ws_at(h->work, dk, dv);
    gdn_transpose(h->S, dv, dk, w.Sn);
    for (int32_t t0 = 0; t0 < h->n_tok; t0 += C) {
        const gdn_chunk c = {h, t0, h->n_tok - t0 < C ? h->n_tok - t0 : C, &w, gemm};
        gdn_chunk_gather(&c);
        gdn_chunk_gram(&c);
        gdn_chunk_decay(&c);
        gdn_chunk_project(&c);
        gdn_chunk_solve(&c);
        gdn_chunk_output(&c);
        gdn_chunk_state(&c);
    }
    gdn_transpose(w.Sn, dk, dv, h->S);
}

/* ==== KDA: the chunked form with per-channel decay ===================================== */
/* Per chunk of L <= C = 64 tokens (K, Q: L x Dk rows, V: L x Dv, S the state entering the
 * chunk, Gamma_t = sum_{u<=t} g_u in R^Dk within the chunk, E_ts = exp(Gamma_t - Gamma_s)
 * per channel = prod_{s<u<=t} exp(g_u)):
 *   A_ts = beta_t sum_c K_tc K_sc E_ts[c]  (s < t),   M_ts = sum_c Q_tc K_sc E_ts[c]  (s <= t)
 *   V' = (I + A)^-1 beta (V - (K * exp(Gamma)) S)
 *   O  = (Q * exp(Gamma)) S + M V'
 *   S <- Diag(exp(Gamma_{L-1})) S + (K * exp(Gamma_{L-1} - Gamma))^T V'
 * (spec kda-family.md 2.2; transformers modeling_kimi_linear.py chunk_kimi_delta_attention,
 * HFK:467-565, which pads to 64; here a partial last chunk is L < 64 rows).  The decay mask
 * is C x C x Dk per chunk; it is never stored.  As fla's chunk_kda (fla/ops/kda/chunk_intra.py,
 * chunk_kda_fwd_kernel_intra_sub_inter: sub-chunks of BC = 16 in chunks of BT = 64), the
 * chunk is cut into sub-blocks of KDA_SUB tokens: for rows t of a sub-block starting at r
 * and columns s < r,
 *   E_ts = exp(Gamma_t - Gamma_r) exp(Gamma_r - Gamma_s),   both factors <= 1,
 * so A and M there are products of scaled rows (K_t exp(Gamma_t - Gamma_r)) and scaled
 * columns (K_s exp(Gamma_r - Gamma_s)): one gdn_gemm each.  Within a sub-block (s >= r) the
 * pairs are summed one by one (a dot kernel per level) with E_ts a running product.  Every
 * decay factor is a running product of the recurrence's own expf(g) values (double across
 * sub-blocks, float within one; below GDN_TINY: 0, as GDN's stage 3), never exp of a
 * difference of sums.  Stages (per chunk): kda_chunk_gather (K, Q, beta, exp(g), the rows
 * scaled by exp(Gamma)), kda_chunk_gram (A, M), kda_chunk_project (K S, Q S; R, o), GDN's
 * gdn_chunk_solve and gdn_chunk_output on the same workspace fields, kda_chunk_state. */
#define KDA_SUB 16
#define KDA_INLINE static inline __attribute__((always_inline))

/* sa = sum_i a[i] (p[i] e[i]), sb = sum_i b[i] (p[i] e[i]), i < n */
typedef void (*kda_dot2_fn)(const float * p, const float * e, const float * a, const float * b, int32_t n, float * sa,
                            float * sb);

static void kda_dot2_ref(const float * p, const float * e, const float * a, const float * b, int32_t n, float * sa,
                         float * sb) {
    float x = 0.0f, y = 0.0f;
    for (int32_t i = 0; i < n; i++) { const float pe = p[i] * e[i]; x += a[i] * pe; y += b[i] * pe; }
    *sa = x;
    *sb = y;
}

#ifdef GDN_X86
GDN_AVX2 static void kda_dot2_avx2(const float * p, const float * e, const float * a, const float * b, int32_t n,
                                   float * sa, float * sb) {
    __m256 x = _mm256_setzero_ps(), y = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 pe = _mm256_mul_ps(_mm256_loadu_ps(p + i), _mm256_loadu_ps(e + i));
        x = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), pe, x);
        y = _mm256_fmadd_ps(_mm256_loadu_ps(b + i), pe, y);
    }
    if (i < n) {
        const __m256i m = gdn_mask8(n - i);
        const __m256 pe = _mm256_mul_ps(_mm256_maskload_ps(p + i, m), _mm256_maskload_ps(e + i, m));
        x = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), pe, x);
        y = _mm256_fmadd_ps(_mm256_maskload_ps(b + i, m), pe, y);
    }
    *sa = tk_hsum8_avx2(x);
    *sb = tk_hsum8_avx2(y);
}

GDN_AVX512 static void kda_dot2_avx512(const float * p, const float * e, const float * a, const float * b, int32_t n,
                                       float * sa, float * sb) {
    __m512 x = _mm512_setzero_ps(), y = _mm512_setzero_ps();
    for (int32_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16) 0xffff : (__mmask16) ((1u << (n - i)) - 1);
        const __m512 pe = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + i), _mm512_maskz_loadu_ps(m, e + i));
        x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), pe, x);
        y = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, b + i), pe, y);
    }
    *sa = _mm512_reduce_add_ps(x);
    *sb = _mm512_reduce_add_ps(y);
}
#endif

/* The workspace, carved from tk_kda_work_floats(dk, dv) floats (sizes: kda_ws_floats).  In
 * base: Sn, KQ (raw K rows, then raw Q rows), KT (scaled key columns, transposed), G (rows
 * t: -A, rows C + t: M), X, bt. */
typedef struct {
    gdn_ws base;
    float * KQe;               /* [2C][Dk] K_t * exp(Gamma_t), then Q_t * exp(Gamma_t) */
    float * KI, * QI;          /* [KDA_SUB][Dk] a sub-block's rows * exp(Gamma_t - Gamma_r) */
    float * KJ;                /* [C][Dk] scaled key rows, before their transpose into KT */
    float * dec;               /* [C][Dk] exp(g_t) (float: the recurrence's expf) */
    float * er;                /* [Dk] kda_chunk_diag's running E_ts */
    double * e0, * e1, * e2;   /* [Dk] running decay products (e1: exp(Gamma_{L-1}) from stage 1 on) */
} kda_ws;

static kda_ws kda_ws_at(float * work, int32_t dk, int32_t dv) {
    const int64_t C = TK_GDN_CHUNK;
    kda_ws w;
    memset(&w, 0, sizeof w);
    w.base.Sn = work;
    w.base.KQ = w.base.Sn + (int64_t) dk * dv;
    w.KQe = w.base.KQ + 2 * C * dk;
    w.KI = w.KQe + 2 * C * dk;
    w.QI = w.KI + KDA_SUB * dk;
    w.base.KT = w.QI + KDA_SUB * dk;
    w.KJ = w.base.KT + C * dk;
    w.dec = w.KJ + C * dk;
    w.base.G = w.dec + C * dk;
    w.base.X = w.base.G + 2 * C * C;
    w.base.bt = w.base.X + 2 * C * dv;
    w.er = w.base.bt + C;
    float * d = w.er + dk;
    w.e0 = (double *) (void *) (d + ((uintptr_t) d % 8 ? 1 : 0));
    w.e1 = w.e0 + dk;
    w.e2 = w.e1 + dk;
    return w;
}

/* One chunk: tokens [t0, t0 + L); c.w is &kw->base (GDN's stages read it); the level's kernels. */
typedef struct {
    gdn_chunk c;
    kda_ws * kw;
    kda_dot2_fn dot2;
} kda_chunk;

/* e[i] <- e[i] d[i] (0 below GDN_TINY, and 1 instead when first), then y[i] = x[i] e[i]
 * and, with x2, y2[i] = x2[i] e[i]: one step of a running decay product (i < n) */
KDA_INLINE void kda_chain(double * restrict e, const float * restrict d, int first, const float * restrict x,
                          float * restrict y, const float * restrict x2, float * restrict y2, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        const double p = first ? 1.0 : e[i] * d[i];
        e[i] = p < GDN_TINY ? 0.0 : p;
    }
    for (int32_t i = 0; i < n; i++) y[i] = (float) (x[i] * e[i]);
    if (x2)
        for (int32_t i = 0; i < n; i++) y2[i] = (float) (x2[i] * e[i]);
}

/* ---- stage 1: KQ rows, beta, dec = expf(g); KQe = K, Q * exp(Gamma_t); e1 = exp(Gamma_{L-1}) ---- */
KDA_INLINE void kda_chunk_gather(const kda_chunk * kc) {
    const tk_gdn_head * h = kc->c.h;
    const int32_t dk = h->dk, C = TK_GDN_CHUNK, L = kc->c.L;
    kda_ws * w = kc->kw;
    for (int32_t i = 0; i < dk; i++) w->e1[i] = 1.0;
    for (int32_t t = 0; t < L; t++) {
        const int64_t tt = kc->c.t0 + t;
        const float * k = h->k + tt * h->k_stride, * q = h->q + tt * h->q_stride, * g = h->gk + tt * h->gk_stride;
        float * d = w->dec + (int64_t) t * dk;
        memcpy(w->base.KQ + (int64_t) t * dk, k, (size_t) dk * sizeof(float));
        memcpy(w->base.KQ + (int64_t) (C + t) * dk, q, (size_t) dk * sizeof(float));
        w->base.bt[t] = h->beta[tt * h->gb_stride];
        for (int32_t i = 0; i < dk; i++) d[i] = expf(g[i]);
        kda_chain(w->e1, d, 0, k, w->KQe + (int64_t) t * dk, q, w->KQe + (int64_t) (C + t) * dk, dk);
    }
}

/* ---- stage 2 within a sub-block: G[t][s] = K_t.(K_s E_ts), G[C+t][s] = Q_t.(K_s E_ts) for
 * r <= s <= t, E_ts a running product from s = t down; the rows' rest (s > t) zeroed ---- */
KDA_INLINE void kda_chunk_diag(const kda_chunk * kc, int32_t r, int32_t R) {
    const int32_t dk = kc->c.h->dk, C = TK_GDN_CHUNK, L = kc->c.L;
    kda_ws * w = kc->kw;
    float * restrict e = w->er;
    for (int32_t t = r; t < r + R; t++) {
        const float * kt = w->base.KQ + (int64_t) t * dk, * qt = w->base.KQ + (int64_t) (C + t) * dk;
        float * a = w->base.G + (int64_t) t * C, * m = w->base.G + (int64_t) (C + t) * C;
        for (int32_t s = t; s < L; s++) a[s] = m[s] = 0.0f;
        for (int32_t i = 0; i < dk; i++) e[i] = 1.0f;
        for (int32_t s = t; s >= r; s--) {
            float sa, sm;
            kc->dot2(w->base.KQ + (int64_t) s * dk, e, kt, qt, dk, &sa, &sm);
            if (s < t) a[s] = sa;
            m[s] = sm;
            if (s > r) {
                const float * restrict d = w->dec + (int64_t) s * dk;
                for (int32_t i = 0; i < dk; i++) { const float x = e[i] * d[i]; e[i] = x < (float) GDN_TINY ? 0.0f : x; }
            }
        }
    }
}

/* ---- stage 2: the in-chunk coefficients, sub-block by sub-block: G rows t < L hold -A
 * (-beta_t A'_ts for s < t, 0 from s = t on), rows C + t hold M (0 above the diagonal) ---- */
KDA_INLINE void kda_chunk_gram(const kda_chunk * kc) {
    const int32_t dk = kc->c.h->dk, C = TK_GDN_CHUNK, L = kc->c.L;
    kda_ws * w = kc->kw;
    float * G = w->base.G;
    for (int32_t r = 0; r < L; r += KDA_SUB) {
        const int32_t R = L - r < KDA_SUB ? L - r : KDA_SUB;
        /* rows: K_t, Q_t * exp(Gamma_t - Gamma_r) */
        for (int32_t t = r; t < r + R; t++)
            kda_chain(w->e0, w->dec + (int64_t) t * dk, t == r, w->base.KQ + (int64_t) t * dk,
                      w->KI + (int64_t) (t - r) * dk, w->base.KQ + (int64_t) (C + t) * dk,
                      w->QI + (int64_t) (t - r) * dk, dk);
        if (r > 0) {
            /* columns s < r: K_s * exp(Gamma_r - Gamma_s) (KJ rows), then KT = KJ^T [Dk][r] */
            for (int32_t i = 0; i < dk; i++) w->e2[i] = 1.0;
            for (int32_t s = r - 1; s >= 0; s--)
                kda_chain(w->e2, w->dec + (int64_t) (s + 1) * dk, 0, w->base.KQ + (int64_t) s * dk,
                          w->KJ + (int64_t) s * dk, NULL, NULL, dk);
            gdn_transpose(w->KJ, r, dk, w->base.KT);
            kc->c.gemm(G + (int64_t) r * C, C, w->KI, dk, w->base.KT, r, R, dk, r, 0);
            kc->c.gemm(G + (int64_t) (C + r) * C, C, w->QI, dk, w->base.KT, r, R, dk, r, 0);
        }
        kda_chunk_diag(kc, r, R);
        for (int32_t t = r; t < r + R; t++) {
            const float nb = -w->base.bt[t];
            for (int32_t s = 0; s < t; s++) G[(int64_t) t * C + s] *= nb;
        }
    }
}

/* ---- stage 3: X[t] = KQe_t S, X[C + t] = KQe_{C+t} S; then X[t] <- beta_t (v_t - X[t]) (R),
 * o_t = X[C + t] ---- */
KDA_INLINE void kda_chunk_project(const kda_chunk * kc) {
    const tk_gdn_head * h = kc->c.h;
    const int32_t dk = h->dk, dv = h->dv, C = TK_GDN_CHUNK, L = kc->c.L;
    kda_ws * w = kc->kw;
    float * X = w->base.X;
    if (L == C) {
        kc->c.gemm(X, dv, w->KQe, dk, w->base.Sn, dv, 2 * C, dk, dv, 0);
    } else {
        kc->c.gemm(X, dv, w->KQe, dk, w->base.Sn, dv, L, dk, dv, 0);
        kc->c.gemm(X + (int64_t) C * dv, dv, w->KQe + (int64_t) C * dk, dk, w->base.Sn, dv, L, dk, dv, 0);
    }
    for (int32_t t = 0; t < L; t++) {
        const int64_t tt = kc->c.t0 + t;
        const float * v = h->v + tt * h->v_stride;
        float * x = X + (int64_t) t * dv, * o = h->o + tt * h->o_stride;
        const float * xq = X + (int64_t) (C + t) * dv;
        const float b = w->base.bt[t];
        for (int32_t j = 0; j < dv; j++) { x[j] = b * (v[j] - x[j]); o[j] = xq[j]; }
    }
}

/* ---- stage 6: Sn[i] <- exp(Gamma_{L-1}[i]) Sn[i] + sum_{s<L} K_s[i] exp(Gamma_{L-1} - Gamma_s)[i] V'_s ---- */
KDA_INLINE void kda_chunk_state(const kda_chunk * kc) {
    const int32_t dk = kc->c.h->dk, dv = kc->c.h->dv, L = kc->c.L;
    kda_ws * w = kc->kw;
    for (int32_t i = 0; i < dk; i++) {
        const float eL = (float) w->e1[i];
        float * restrict sn = w->base.Sn + (int64_t) i * dv;
        for (int32_t j = 0; j < dv; j++) sn[j] *= eL;
    }
    for (int32_t s = L - 1; s >= 0; s--)
        kda_chain(w->e2, w->dec + (s == L - 1 ? 0 : (int64_t) (s + 1) * dk), s == L - 1, w->base.KQ + (int64_t) s * dk,
                  w->KJ + (int64_t) s * dk, NULL, NULL, dk);
    gdn_transpose(w->KJ, L, dk, w->base.KT);
    kc->c.gemm(w->base.Sn, dv, w->base.KT, L, w->base.X, dv, dk, L, dv, 1);
}

/* The whole run chunk by chunk; the state transposed into Sn on entry and back on exit.
 * Instantiated per level (kda_chunked_*): the stages' element-wise loops are compiled for
 * the level's vectors; the products go to its gdn_gemm, the in-sub-block dots to its dot2. */
KDA_INLINE void kda_chunked_body(const tk_gdn_head * h, gdn_gemm_fn gemm, kda_dot2_fn dot2) {
    const int32_t dk = h->dk, dv = h->dv, C = TK_GDN_CHUNK;
    kda_ws w = kda_ws_at(h->work, dk, dv);
    gdn_transpose(h->S, dv, dk, w.base.Sn);
    for (int32_t t0 = 0; t0 < h->n_tok; t0 += C) {
        const kda_chunk kc = {{h, t0, h->n_tok - t0 < C ? h->n_tok - t0 : C, &w.base, gemm}, &w, dot2};
        kda_chunk_gather(&kc);
        kda_chunk_gram(&kc);
        kda_chunk_project(&kc);
        gdn_chunk_solve(&kc.c);
        gdn_chunk_output(&kc.c);
        kda_chunk_state(&kc);
    }
    gdn_transpose(w.base.Sn, dk, dv, h->S);
}

static void kda_chunked_ref(const tk_gdn_head * h) { kda_chunked_body(h, gdn_gemm_ref, kda_dot2_ref); }
#ifdef GDN_X86
GDN_AVX2 static void kda_chunked_avx2(const tk_gdn_head * h) { kda_chunked_body(h, gdn_gemm_avx2, kda_dot2_avx2); }
GDN_AVX512 static void kda_chunked_avx512(const tk_gdn_head * h) {
    kda_chunked_body(h, gdn_gemm_avx512, kda_dot2_avx512);
}
#endif

/* ==== dispatch ========================================================================= */

int64_t tk_kda_work_floats(int32_t dk, int32_t dv) { return dk > 0 && dv > 0 ? kda_ws_floats(dk, dv) : 0; }

/* KDA heads: the chunked form from tk_kda_threshold() tokens when work is given */
static void kda_run(const tk_gdn_head * h) {
    const int thr = tk_chunk_min(h->min_chunk, tk_kda_threshold());
    if (h->n_tok <= 0) return;
    if (thr <= 0 || h->n_tok < thr || !h->work) { tk_gdn_recurrent(h); return; }
#ifdef GDN_X86
    if (tk_cpu_level() >= TK_CPU_AVX512) { kda_chunked_avx512(h); return; }
    if (tk_cpu_level() >= TK_CPU_AVX2) { kda_chunked_avx2(h); return; }
#endif
    kda_chunked_ref(h);
}

void tk_gdn_run(const tk_gdn_head * h) {
    if (h->gk) { kda_run(h); return; }
    const int thr = tk_chunk_min(h->min_chunk, tk_gdn_threshold());
    if (h->n_tok <= 0) return;
    /* no workspace: the recurrence (needs none) */
    if (thr <= 0 || h->n_tok < thr || !h->work) { tk_gdn_recurrent(h); return; }
#ifdef GDN_X86
    if (tk_cpu_level() >= TK_CPU_AVX512) { gdn_chunked(h, gdn_gemm_avx512); return; }
    if (tk_cpu_level() >= TK_CPU_AVX2) { gdn_chunked(h, gdn_gemm_avx2); return; }
#endif
    gdn_chunked(h, gdn_gemm_ref);
}
