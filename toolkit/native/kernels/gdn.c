/* gdn.c: the gated delta rule, one value head of one sequence (contract: tk_testing.h,
 * tk_gdn_head), with a scalar decay per token (GDN) or, with tk_gdn_head.gk, a decay per
 * key channel (Kimi Delta Attention, KDA: S <- Diag(exp(g_t)) S).  Two forms of the same
 * recurrence,
 *   S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
 * (S: Dk x Dv, element (key i, value j) at S[j*dk + i], as llama.cpp keeps it):
 *   - recurrent: token by token, O(n_tok Dk Dv); the decode path and the reference.  Here
 *     the scalar forms; x86/gdn_avx2.c (GDN and KDA: 4 value rows through 32 tokens at a
 *     time) and x86/gdn_avx512.c (KDA) the SIMD ones;
 *   - chunked (WY/UT, chunks of 64 tokens; gdn_chunked.c, its math there): for runs of at
 *     least tk_gdn_threshold() (KDA: tk_kda_threshold()) tokens.
 * This file holds the thresholds, the scalar recurrences and the choice of form and level.
 * ref: transformers modeling_qwen3_next.py torch_recurrent_gated_delta_rule; llama.cpp
 *      ggml-cpu ops.cpp ggml_compute_forward_gated_delta_net (state layout);
 *      docs/specs/gdn-family.md section 2.1.
 */
#include <math.h>
#include <stdint.h>

#include "tk_internal.h"
#include "kernels/kernels.h"

/* ==== thresholds ====================================================================== */

/* Runs from this length take the chunked form; 0: none do.  Why never: per token the chunked
 * form takes 3 Dk Dv multiply-adds (K S, Q S, K^T V') plus C (Dk + Dv) for the in-chunk
 * products (K K^T, Q K^T, the solve, the in-chunk output: C/2 terms each on average), so
 * 65.5k at Dk = Dv = C x 2 = 128; the recurrence 3 Dk Dv multiply-adds plus Dk Dv
 * multiplies, 65.5k too, and both kernels run at 65-75% of the FMA peak.  The chunked form
 * pays where matrix units make its products cheap (fla's GPUs); on AVX2 the recurrence, with
 * the state in L1 for 32 tokens at a time, is as fast or faster (measured: never more than
 * the noise, 1.03x at 256+ tokens of 128 x 128, 0.8x at 64 x 64).  At avx512 (16-wide FMA
 * products) the chunked form wins on 128 x 128 heads from 64 tokens by 7-24% and loses on
 * 64 x 64; the default stays 0 at every level: the GDN heads are 8-10% of a Qwen3.5 pp512
 * profile, so the gain is 1-2% of a prompt, while a threshold makes a ubatch's arithmetic
 * depend on its length (a prompt taken whole and the same tokens one by one, or a
 * speculative verify, would no longer give the same bits).  A context's gdn_min (the CLI's
 * TOOLKIT_GDN_MIN) or tk_gdn_set_threshold turn it on.  The measurements (bench/gdn_kernels.py): bench/README.md,
 * "Kernel thresholds". */
#define TK_GDN_MIN_DEFAULT 0

/* KDA heads (gk != NULL): from this length the chunked form; 0: none.  Why never: GDN's
 * reason; per token the chunked form does the 3 Dk Dv multiply-adds of K S, Q S and K^T V'
 * against the recurrence's 4 Dk Dv vector operations, plus the in-chunk work, which
 * per-channel decay makes heavier (the decay mask applied in the scaled rows and columns of
 * every sub-block, the in-sub-block pairs one by one; in a profile at 128 x 128, 512
 * tokens, avx512: products 34%, the in-chunk coefficients 24%, the state update's decays 7%).
 * Measured: never a win beyond the noise, at either level or head size (bench/README.md,
 * "Kernel thresholds").  A context's kda_min (the CLI's TOOLKIT_KDA_MIN) or tk_kda_set_threshold turn it on. */
#define TK_KDA_MIN_DEFAULT 0

static int g_gdn_min = -1;     /* run length from which the chunked form is used; -1: the default */
static int g_kda_min = -1;     /* the same for KDA heads (gk != NULL) */

int tk_gdn_threshold(void) { return tk_threshold_get(&g_gdn_min, TK_GDN_MIN_DEFAULT); }

int tk_gdn_set_threshold(int n) { return tk_threshold_set(&g_gdn_min, n, TK_GDN_MIN_DEFAULT); }

int tk_kda_threshold(void) { return tk_threshold_get(&g_kda_min, TK_KDA_MIN_DEFAULT); }

int tk_kda_set_threshold(int n) { return tk_threshold_set(&g_kda_min, n, TK_KDA_MIN_DEFAULT); }

/* ==== recurrent form =================================================================== */
/* S (Dv rows of Dk: row j = S[:, j]) through one token; o = S^T q after the update.  The
 * decay of key channel i: exp(g_i) of the token's g (KDA, a head wider than KDA_DK_STACK),
 * else dec[i] (KDA), else the token's decay (GDN); a constant choice per caller. */
static inline __attribute__((always_inline)) void step_scalar(float * S, int32_t dk, int32_t dv, const float * q,
                                                              const float * k, const float * v, const float * g,
                                                              const float * dec, float decay, float beta, float * o) {
    for (int32_t j = 0; j < dv; j++) {
        float * Sj = S + (int64_t) j * dk;
        float kv = 0.0f;                       /* (S^T k)_j after the decay */
        for (int32_t i = 0; i < dk; i++) { Sj[i] *= g ? expf(g[i]) : dec ? dec[i] : decay; kv += Sj[i] * k[i]; }
        const float u = beta * (v[j] - kv);
        float oj = 0.0f;
        for (int32_t i = 0; i < dk; i++) { Sj[i] += k[i] * u; oj += Sj[i] * q[i]; }
        o[j] = oj;
    }
}

/* Key channels whose decays the scalar KDA recurrence keeps on the stack (KDA heads have
 * 128); wider heads take their exp(g) per value row (the same expf values). */
#define KDA_DK_STACK 1024

/* The KDA recurrence, token by token: dec = expf(g_t) per channel, then the step. */
static void kda_recurrent_scalar(const tk_gdn_head * h) {
    const int32_t dk = h->dk, dv = h->dv;
    float dec[KDA_DK_STACK];
    for (int32_t t = 0; t < h->n_tok; t++) {
        const float * q = h->q + t * h->q_stride, * k = h->k + t * h->k_stride, * v = h->v + t * h->v_stride;
        const float * g = h->gk + t * h->gk_stride;
        const float beta = h->beta[t * h->gb_stride];
        float * o = h->o + t * h->o_stride;
        if (dk > KDA_DK_STACK) { step_scalar(h->S, dk, dv, q, k, v, g, NULL, 0.0f, beta, o); continue; }
        for (int32_t i = 0; i < dk; i++) dec[i] = expf(g[i]);
        step_scalar(h->S, dk, dv, q, k, v, NULL, dec, 0.0f, beta, o);
    }
}

void tk_kda_block_decays(const tk_gdn_head * h, int32_t t0, int32_t T, float * dec, float * kd) {
    const int32_t dk = h->dk;
    for (int32_t t = 0; t < T; t++) {
        const float * g = h->gk + (t0 + t) * h->gk_stride, * k = h->k + (t0 + t) * h->k_stride;
        float * d = dec + (int64_t) t * dk, * kk = kd + (int64_t) t * dk;
        for (int32_t i = 0; i < dk; i++) { d[i] = expf(g[i]); kk[i] = d[i] * k[i]; }
    }
}

static void gdn_recurrent_scalar(const tk_gdn_head * h) {
    for (int32_t t = 0; t < h->n_tok; t++)
        step_scalar(h->S, h->dk, h->dv, h->q + t * h->q_stride, h->k + t * h->k_stride, h->v + t * h->v_stride, NULL,
                    NULL, expf(h->g[t * h->gb_stride]), h->beta[t * h->gb_stride], h->o + t * h->o_stride);
}

void tk_gdn_recurrent(const tk_gdn_head * h) {
#ifdef TK_HAVE_X86
    if (h->gk && h->dk <= TK_KDA_SIMD_FLOATS && tk_cpu_level() >= TK_CPU_AVX512) { tk_kda_recurrent_avx512(h); return; }
    if (h->gk && h->dk <= TK_KDA_SIMD_FLOATS && tk_cpu_level() >= TK_CPU_AVX2) { tk_kda_recurrent_avx2(h); return; }
#endif
    if (h->gk) { kda_recurrent_scalar(h); return; }
#ifdef TK_HAVE_X86
    if (tk_cpu_level() >= TK_CPU_AVX2) { tk_gdn_recurrent_avx2(h); return; }
#endif
    gdn_recurrent_scalar(h);
}

/* ==== dispatch ========================================================================= */

/* the chunked form from the threshold's run length on (the head's min_chunk, else the process
 * default), when work is given; else the recurrence (needs none) */
void tk_gdn_run(const tk_gdn_head * h) {
    const int thr = tk_chunk_min(h->min_chunk, h->gk ? tk_kda_threshold() : tk_gdn_threshold());
    if (h->n_tok <= 0) return;
    if (thr <= 0 || h->n_tok < thr || !h->work) { tk_gdn_recurrent(h); return; }
    if (h->gk) tk_kda_chunked(h, tk_cpu_level());
    else tk_gdn_chunked(h, tk_cpu_level());
}
