/* gdn_chunked.c: the chunked (WY/UT) form of the gated delta rule, one value head of one
 * sequence (contract: tk_testing.h, tk_gdn_head; chosen by gdn.c's tk_gdn_run for runs of at
 * least tk_gdn_threshold() tokens, tk_kda_threshold() for KDA heads).  Chunks of C = 64
 * tokens.  Per chunk of L <= C tokens (K, Q: L x Dk rows, V: L x Dv rows, S the state
 * entering the chunk, gamma_t = sum_{s<=t} g_s within the chunk):
 *       D_ts = exp(gamma_t - gamma_s) for s <= t, else 0
 *       A    = strictly_lower((beta K) K^T * D),   T = (I + A)^-1
 *       U = T (beta V),   W = T (beta exp(gamma) K),   V' = U - W S
 *       O    = (exp(gamma) Q) S + lower_incl_diag(Q K^T * D) V'
 *       S   <- exp(gamma_L) S + (exp(gamma_L - gamma) K)^T V'
 *     which is the recurrence unrolled over the chunk (a partial last chunk is L < 64 rows:
 *     nothing is padded).  V' is computed as T (beta (V - exp(gamma) K S)), the same
 *     product regrouped: it saves the L x Dk matrix W and its L^2/2 Dk multiply-adds.
 * KDA's per-channel decay: the "KDA" section below, its math above kda_chunked_body.
 * ref: transformers modeling_qwen3_next.py torch_chunk_gated_delta_rule; flash-linear-attention
 *      chunk_gated_delta_rule (fla/ops/gated_delta_rule/chunk.py: chunk_local_cumsum,
 *      chunk_scaled_dot_kkt, solve_tril, recompute_w_u, chunk_gated_delta_rule_fwd_h,
 *      chunk_fwd_o); docs/specs/gdn-family.md section 2.1 "Chunked form".
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
 * Every product in 2, 4, 5, 6, 7 is one kernel, the panel GEMM (gemm.c, tk_gemm_at: the
 * reference, AVX2 or AVX-512 instance of the level); the decays (stage 3) are scalar, in
 * double.  During a chunked run the state is held transposed, Sn[i][j] (key row i of Dv
 * values).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tk_internal.h"
#include "kernels/kernels.h"

#define TK_GDN_CHUNK 64

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
    tk_gemm_fn gemm;
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

/* The whole run chunk by chunk; the state transposed into Sn on entry and back on exit. */
void tk_gdn_chunked(const tk_gdn_head * h, int level) {
    const tk_gemm_fn gemm = tk_gemm_at(level);
    const int32_t dk = h->dk, dv = h->dv, C = TK_GDN_CHUNK;
    gdn_ws w = gdn_ws_at(h->work, dk, dv);
    tk_transpose(h->S, dv, dk, w.Sn);
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
    tk_transpose(w.Sn, dk, dv, h->S);
}

/* ==== KDA: the chunked form with per-channel decay ===================================== */
/* Per chunk of L <= C = 64 tokens (K, Q: L x Dk rows, V: L x Dv, S the state entering the
 * chunk, Gamma_t = sum_{u<=t} g_u in R^Dk within the chunk, E_ts = exp(Gamma_t - Gamma_s)
 * per channel = prod_{s<u<=t} exp(g_u)):
 *   A_ts = beta_t sum_c K_tc K_sc E_ts[c]  (s < t),   M_ts = sum_c Q_tc K_sc E_ts[c]  (s <= t)
 *   V' = (I + A)^-1 beta (V - (K * exp(Gamma)) S)
 *   O  = (Q * exp(Gamma)) S + M V'
 *   S <- Diag(exp(Gamma_{L-1})) S + (K * exp(Gamma_{L-1} - Gamma))^T V'
 * (docs/specs/kda-family.md 2.2; transformers modeling_kimi_linear.py chunk_kimi_delta_attention,
 * which pads to 64; here a partial last chunk is L < 64 rows).  The decay mask
 * is C x C x Dk per chunk; it is never stored.  As fla's chunk_kda (fla/ops/kda/chunk_intra.py,
 * chunk_kda_fwd_kernel_intra_sub_inter: sub-chunks of BC = 16 in chunks of BT = 64), the
 * chunk is cut into sub-blocks of KDA_SUB tokens: for rows t of a sub-block starting at r
 * and columns s < r,
 *   E_ts = exp(Gamma_t - Gamma_r) exp(Gamma_r - Gamma_s),   both factors <= 1,
 * so A and M there are products of scaled rows (K_t exp(Gamma_t - Gamma_r)) and scaled
 * columns (K_s exp(Gamma_r - Gamma_s)): one panel GEMM each.  Within a sub-block (s >= r) the
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
            tk_transpose(w->KJ, r, dk, w->base.KT);
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
    tk_transpose(w->KJ, L, dk, w->base.KT);
    kc->c.gemm(w->base.Sn, dv, w->base.KT, L, w->base.X, dv, dk, L, dv, 1);
}

/* The whole run chunk by chunk; the state transposed into Sn on entry and back on exit.
 * Instantiated per level (kda_chunked_*): the stages' element-wise loops are compiled for
 * the level's vectors; the products go to its panel GEMM, the in-sub-block dots to its dot2. */
KDA_INLINE void kda_chunked_body(const tk_gdn_head * h, tk_gemm_fn gemm, kda_dot2_fn dot2) {
    const int32_t dk = h->dk, dv = h->dv, C = TK_GDN_CHUNK;
    kda_ws w = kda_ws_at(h->work, dk, dv);
    tk_transpose(h->S, dv, dk, w.base.Sn);
    for (int32_t t0 = 0; t0 < h->n_tok; t0 += C) {
        const kda_chunk kc = {{h, t0, h->n_tok - t0 < C ? h->n_tok - t0 : C, &w.base, gemm}, &w, dot2};
        kda_chunk_gather(&kc);
        kda_chunk_gram(&kc);
        kda_chunk_project(&kc);
        gdn_chunk_solve(&kc.c);
        gdn_chunk_output(&kc.c);
        kda_chunk_state(&kc);
    }
    tk_transpose(w.base.Sn, dk, dv, h->S);
}

static void kda_chunked_ref(const tk_gdn_head * h) { kda_chunked_body(h, tk_gemm_ref, kda_dot2_ref); }
#ifdef TK_HAVE_X86
TK_TARGET_AVX2 static void kda_chunked_avx2(const tk_gdn_head * h) { kda_chunked_body(h, tk_gemm_avx2, tk_kda_dot2_avx2); }
TK_TARGET_AVX512 static void kda_chunked_avx512(const tk_gdn_head * h) {
    kda_chunked_body(h, tk_gemm_avx512, tk_kda_dot2_avx512);
}
#endif

void tk_kda_chunked(const tk_gdn_head * h, int level) {
#ifdef TK_HAVE_X86
    if (level >= TK_CPU_AVX512) { kda_chunked_avx512(h); return; }
    if (level >= TK_CPU_AVX2) { kda_chunked_avx2(h); return; }
#endif
    (void) level;
    kda_chunked_ref(h);
}

int64_t tk_kda_work_floats(int32_t dk, int32_t dv) { return dk > 0 && dv > 0 ? kda_ws_floats(dk, dv) : 0; }
