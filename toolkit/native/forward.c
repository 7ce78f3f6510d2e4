/* forward.c: one micro-batch through the model, layer by layer, routed by layer kind.
 *
 * Glossary: U tokens in the ubatch (n_seqs rows x n_seq_tokens), D n_embd, DI d_inner,
 * N d_state, R dt_rank, H heads (Mamba-2 or attention), P Mamba-2 head dim, G n_group,
 * hd attention head dim, F FFN width, E experts.
 *
 * Block (every family here):  x += rs * mixer(rmsnorm(x));  x += rs * ffn(rmsnorm(x))
 * with rs the Granite residual multiplier (1 elsewhere), the mixer chosen by layer kind and
 * the FFN by ffn kind (none / dense SwiGLU / MoE with optional shared expert).
 * refs: transformers modeling_mamba.py, modeling_mamba2.py, modeling_bamba.py,
 *       modeling_granitemoehybrid.py, modeling_jamba.py; llama.cpp src/models/ (one graph builder per family).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"

/* ==== per-token work, split over the pool's threads ==================================
 * Each token's (or channel's) result is computed by the same loop whichever thread runs
 * it, so results do not depend on the thread count.  Loops of fewer than PAR_MIN elements
 * run on the calling thread (waking the workers costs more). */
#define PAR_MIN 16384

typedef struct {
    const float * a;           /* input rows (or the gate z rows) */
    const float * b;           /* weights / second operand */
    float * y;                 /* output rows */
    int64_t a_stride, y_stride, n;  /* row strides (floats), row width */
    float f;                   /* eps or scale */
    int32_t groups;
} rows_job;

static void par_rows(tk_pool * pool, int64_t n_rows, int64_t width, tk_task_fn fn, void * job) {
    if (n_rows * width < PAR_MIN) fn(job, 0, n_rows, 0);
    else tk_pool_run(pool, n_rows, fn, job);
}

/* y[t] = rmsnorm(a[t]) * b */
static void rms_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const rows_job * j = arg;
    (void) thread;
    for (int64_t t = t0; t < t1; t++) tk_rms_norm(j->a + t * j->a_stride, j->b, j->f, j->n, j->y + t * j->y_stride);
}

static void rms_norm_rows(tk_context * ctx, const float * x, const float * w, float eps, int64_t n, int32_t U, float * y) {
    rows_job j = {x, w, y, n, n, n, eps, 1};
    par_rows(ctx->pool, U, n, rms_rows, &j);
}

/* y[t] += a[t] * f */
static void add_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const rows_job * j = arg;
    (void) thread;
    for (int64_t i = t0 * j->n; i < t1 * j->n; i++) j->y[i] += j->a[i] * j->f;
}

/* y[t] = silu(y[t]) * a[t] */
static void silu_mul_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const rows_job * j = arg;
    (void) thread;
    for (int64_t t = t0; t < t1; t++) tk_silu_mul_row(j->y + t * j->y_stride, j->a + t * j->a_stride, j->n);
}

/* Mamba-2 gate: y[t] *= silu(z[t]); then RMSNorm over each of `groups` groups, weight b */
static void gated_norm_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const rows_job * j = arg;
    (void) thread;
    const int64_t gs = j->n / j->groups;
    for (int64_t t = t0; t < t1; t++) {
        float * y = j->y + t * j->y_stride;
        const float * z = j->a + t * j->a_stride;
        tk_mul_silu_row(y, z, j->n);
        for (int32_t g = 0; g < j->groups; g++) tk_rms_norm(y + g * gs, j->b + g * gs, j->f, gs, y + g * gs);
    }
}

/* causal conv over a channel range of one sequence's run, then SiLU (contract: tk_ssm_conv) */
typedef struct {
    const float * x;
    int64_t x_stride;
    int32_t n_tok, d_conv;
    const float * w, * b;
    float * state;
    float * y;
    int64_t y_stride;
    int64_t channels;
} conv_job;

/* [b0, b1): blocks of 8 channels (tk_ssm_conv's lanes: a split at a multiple of 8 keeps
 * every channel's result) */
static void conv_silu_channels(void * arg, int64_t b0, int64_t b1, int thread) {
    const conv_job * j = arg;
    (void) thread;
    const int64_t c0 = 8 * b0, c1 = 8 * b1 < j->channels ? 8 * b1 : j->channels;
    const int32_t nc = (int32_t) (c1 - c0), ns = j->d_conv - 1;
    tk_ssm_conv(j->x + c0, j->x_stride, j->n_tok, nc, j->d_conv, j->w + c0 * j->d_conv, j->b ? j->b + c0 : NULL,
                j->state + c0 * ns, j->y + c0, j->y_stride);
    for (int32_t t = 0; t < j->n_tok; t++) tk_silu_row(j->y + t * j->y_stride + c0, nc);
}

static void conv_silu(tk_context * ctx, const float * x, int64_t x_stride, int32_t n_tok, int32_t channels, int32_t d_conv,
                      const float * w, const float * b, float * state, float * y, int64_t y_stride) {
    conv_job j = {x, x_stride, n_tok, d_conv, w, b, state, y, y_stride, channels};
    par_rows(ctx->pool, (channels + 7) / 8, 8 * (int64_t) n_tok, conv_silu_channels, &j);
}

/* ==== Mamba-1 mixer ================================================================== */
/* in_proj -> (x, z); x = silu(conv(x) + b); (dt, B, C) = x_proj(x) [Jamba: RMSNorm each];
 * dt = softplus(dt_proj(dt) + dt_bias); selective scan; y = (C.s + D x) * silu(z); out_proj. */
static tk_status mixer_mamba1(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t D = hp->n_embd, DI = hp->d_inner, N = hp->d_state, R = hp->dt_rank, K = hp->d_conv;
    const int32_t U = ub->n_tokens, nst = ub->n_seq_tokens, XD = R + 2 * N;
    tk_memory_rs * rs = ctx->rs;
    (void) D;

    TK_CHECK(tk_matmul(&l->ssm_in, 0, ctx->cur, U, ctx->zx, &ctx->mm));
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        const int32_t cell = rs->ub_cells[s];
        conv_silu(ctx, ctx->zx + (int64_t) s * nst * 2 * DI, 2 * DI, nst, DI, K, l->ssm_conv1d, l->ssm_conv1d_b,
                  rs->conv[il] + (size_t) cell * rs->conv_n, ctx->xc + (int64_t) s * nst * DI, DI);
    }

    TK_CHECK(tk_matmul(&l->ssm_x, 0, ctx->xc, U, ctx->xdbl, &ctx->mm));
    for (int32_t t = 0; t < U; t++) {
        float * xd = ctx->xdbl + (int64_t) t * XD;
        if (l->ssm_dt_norm || hp->dt_b_c_rms) {
            tk_rms_norm(xd, l->ssm_dt_norm, hp->rms_eps, R, xd);
            tk_rms_norm(xd + R, l->ssm_b_norm, hp->rms_eps, N, xd + R);
            tk_rms_norm(xd + R + N, l->ssm_c_norm, hp->rms_eps, N, xd + R + N);
        }
        memcpy(ctx->dtr + (int64_t) t * R, xd, (size_t) R * sizeof(float));
    }
    TK_CHECK(tk_matmul(&l->ssm_dt, 0, ctx->dtr, U, ctx->dt, &ctx->mm));
    for (int32_t t = 0; t < U; t++) {
        float * dt = ctx->dt + (int64_t) t * DI;
        for (int32_t c = 0; c < DI; c++) dt[c] = tk_softplus(l->ssm_dt_b ? dt[c] + l->ssm_dt_b[c] : dt[c]);
    }
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        float * state = rs->ssm[il] + (size_t) rs->ub_cells[s] * rs->ssm_n;
        for (int32_t i = 0; i < nst; i++) {
            const int64_t t = (int64_t) s * nst + i;
            const float * xd = ctx->xdbl + t * XD;
            tk_ssm_scan_mamba1(state, ctx->xc + t * DI, ctx->dt + t * DI, l->ssm_a, xd + R, xd + R + N, l->ssm_d,
                               ctx->zx + t * 2 * DI + DI, DI, N, ctx->y + t * DI);
        }
    }
    return tk_matmul(&l->ssm_out, 0, ctx->y, U, out, &ctx->mm);
}

/* ==== Mamba-2 mixer ================================================================== */
/* in_proj -> (z, xBC, dt); xBC = silu(conv(xBC) + b); dt = softplus(dt + dt_bias);
 * scan with scalar A per head, B/C per group; y = y + D x;
 * y = grouped RMSNorm(y * silu(z)) * w  (group size DI/G); out_proj.
 * ref: transformers MambaRMSNormGated; llama.cpp build_mamba2_layer. */
static tk_status mixer_mamba2(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t DI = hp->d_inner, N = hp->d_state, H = hp->ssm_n_head, P = hp->ssm_head_dim, G = hp->n_group;
    const int32_t K = hp->d_conv, CD = ctx->model->conv_dim, W = 2 * DI + 2 * G * N + H;
    const int32_t U = ub->n_tokens, nst = ub->n_seq_tokens;
    tk_memory_rs * rs = ctx->rs;

    TK_CHECK(tk_matmul(&l->ssm_in, 0, ctx->cur, U, ctx->zx, &ctx->mm));
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        const int32_t cell = rs->ub_cells[s];
        conv_silu(ctx, ctx->zx + (int64_t) s * nst * W + DI, W, nst, CD, K, l->ssm_conv1d, l->ssm_conv1d_b,
                  rs->conv[il] + (size_t) cell * rs->conv_n, ctx->xc + (int64_t) s * nst * CD, CD);
    }

    /* dt = softplus(dt + dt_bias), in place in zx's dt columns; then each sequence's run
     * through the scan (recurrence, or chunked SSD from tk_ssd_threshold() tokens; heads
     * split over the threads) */
    for (int32_t t = 0; t < U; t++) {
        float * dtr = ctx->zx + (int64_t) t * W + DI + CD;
        for (int32_t h = 0; h < H; h++) dtr[h] = tk_softplus(dtr[h] + l->ssm_dt_b[h]);
    }
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        float * state = rs->ssm[il] + (size_t) rs->ub_cells[s] * rs->ssm_n;
        const int64_t t = (int64_t) s * nst;
        TK_CHECK(tk_ssm_mamba2_run(ctx->pool, state, ctx->xc + t * CD, CD, ctx->zx + t * W + DI + CD, W, l->ssm_a,
                                   l->ssm_d, nst, H, P, N, G, ctx->y + t * DI, DI, ctx->ssd_ws, ctx->ssd_ws_bytes));
    }
    rows_job gj = {ctx->zx, l->ssm_norm, ctx->y, W, DI, DI, hp->rms_eps, G};
    par_rows(ctx->pool, U, DI, gated_norm_rows, &gj);
    return tk_matmul(&l->ssm_out, 0, ctx->y, U, out, &ctx->mm);
}

/* ==== attention ====================================================================== */

typedef float v8f __attribute__((vector_size(32)));   /* 8 float lanes (GCC vector extension) */

typedef struct {
    tk_context * ctx;
    const tk_ubatch * ub;
    int il;
    int32_t H, hd, kvd, grp;
    float scale;
    int level;                 /* tk_cpu_level() */
} attn_job;

/* One (token t = p / H, head h = p % H) pair: its query and output rows, its KV head's rows
 * in cell 0 (cell c at + c * kvd), and what selects the cells it attends. */
typedef struct {
    const float * q, * k, * v;
    float * o;
    uint64_t sbit;             /* the token's sequence */
    int32_t pos;
} attn_pair;

static inline __attribute__((always_inline)) attn_pair attn_pair_at(const attn_job * j, int64_t p) {
    const tk_context * ctx = j->ctx;
    const int32_t H = j->H, hd = j->hd, t = (int32_t) (p / H), h = (int32_t) (p % H);
    const size_t kvo = (size_t) (h / j->grp) * (size_t) hd, qo = (size_t) t * H * hd + (size_t) h * hd;
    const attn_pair a = {ctx->q + qo, ctx->kv->k[j->il] + kvo, ctx->kv->v[j->il] + kvo, ctx->att + qo,
                         UINT64_C(1) << j->ub->seq[t / j->ub->n_seq_tokens], j->ub->pos[t]};
    return a;
}

/* cell c is attended by the pair: its sequence, at or before its position, not empty */
static inline __attribute__((always_inline)) int attn_sees(const tk_memory_kv * kv, int32_t c, const attn_pair * a) {
    return (kv->seqs[c] & a->sbit) && kv->pos[c] <= a->pos && kv->pos[c] >= 0;
}

/* score[c] <- exp(score[c] - mx) over the cells the pair sees; returns their sum, in
 * cell order, in double */
static inline __attribute__((always_inline)) double attn_exp(const tk_memory_kv * kv, const attn_pair * a,
                                                             float * score, float mx) {
    double den = 0.0;
    for (int32_t c = 0; c < kv->n_cells; c++) {
        if (!attn_sees(kv, c, a)) continue;
        score[c] = expf(score[c] - mx);
        den += score[c];
    }
    return den;
}

/* pairs [p0, p1) of (token t = p / H, head h = p % H): softmax(q.k * scale) v over the
 * cells of t's sequence with pos <= t's; scores in the thread's row of ctx->vec.  q.k keeps
 * 8 partial sums (i mod 8) added in a fixed tree, so the loops vectorize; a plain and an
 * AVX2+FMA instance, chosen by level.  Each pair's operations do not depend on the split. */
static inline __attribute__((always_inline)) void attn_heads_body(const attn_job * j, int64_t p0, int64_t p1, int thread) {
    tk_context * ctx = j->ctx;
    const tk_memory_kv * kv = ctx->kv;
    const int32_t hd = j->hd, kvd = j->kvd;
    float * score = ctx->vec + (size_t) thread * ctx->vec_n;   /* [n_cells] */
    for (int64_t p = p0; p < p1; p++) {
        const attn_pair a = attn_pair_at(j, p);
        const float * qh = a.q;
        float mx = -FLT_MAX;
        for (int32_t c = 0; c < kv->n_cells; c++) {
            if (!attn_sees(kv, c, &a)) continue;
            const float * kc = a.k + (size_t) c * kvd;
            v8f acc = {0};
            int32_t i = 0;
            for (; i + 8 <= hd; i += 8) {
                v8f x, y;
                memcpy(&x, qh + i, sizeof x);
                memcpy(&y, kc + i, sizeof y);
                acc += x * y;
            }
            float d = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (; i < hd; i++) d += qh[i] * kc[i];
            score[c] = d * j->scale;
            if (score[c] > mx) mx = score[c];
        }
        float * o = a.o;
        for (int32_t i = 0; i < hd; i++) o[i] = 0.0f;
        const double den = attn_exp(kv, &a, score, mx);
        for (int32_t c = 0; c < kv->n_cells; c++) {
            if (!attn_sees(kv, c, &a)) continue;
            const float * vc = a.v + (size_t) c * kvd;
            for (int32_t i = 0; i < hd; i++) o[i] += score[c] * vc[i];
        }
        const float inv = den > 0 ? (float) (1.0 / den) : 0.0f;
        for (int32_t i = 0; i < hd; i++) o[i] *= inv;
    }
}

static void attn_heads_plain(const attn_job * j, int64_t p0, int64_t p1, int thread) { attn_heads_body(j, p0, p1, thread); }
#if defined(__x86_64__) && defined(__GNUC__)
/* attn_heads_body written out for head_dim = 8 V (V a constant after inlining): q and the
 * output held in registers across the cells (the body reloads and stores o for every cell).
 * The same operations per pair as the body at this level: q.k in one 8-lane FMA chain over
 * i, then the tk_hsum8_avx2 tree (the body's tree), o[i] += pr * v[i] by FMA. */
__attribute__((target("avx2,fma"), always_inline)) static inline void attn_heads_regs(const attn_job * j, int64_t p0,
                                                                                     int64_t p1, int thread, const int V) {
    tk_context * ctx = j->ctx;
    const tk_memory_kv * kv = ctx->kv;
    const int32_t kvd = j->kvd;
    float * score = ctx->vec + (size_t) thread * ctx->vec_n;   /* [n_cells] */
    for (int64_t p = p0; p < p1; p++) {
        const attn_pair a = attn_pair_at(j, p);
        __m256 q[16], o[16];
        for (int v = 0; v < V; v++) q[v] = _mm256_loadu_ps(a.q + 8 * v);
        float mx = -FLT_MAX;
        for (int32_t c = 0; c < kv->n_cells; c++) {
            if (!attn_sees(kv, c, &a)) continue;
            const float * kc = a.k + (size_t) c * kvd;
            __m256 acc = _mm256_mul_ps(q[0], _mm256_loadu_ps(kc));
            for (int v = 1; v < V; v++) acc = _mm256_fmadd_ps(q[v], _mm256_loadu_ps(kc + 8 * v), acc);
            score[c] = tk_hsum8_avx2(acc) * j->scale;
            if (score[c] > mx) mx = score[c];
        }
        for (int v = 0; v < V; v++) o[v] = _mm256_setzero_ps();
        const double den = attn_exp(kv, &a, score, mx);
        for (int32_t c = 0; c < kv->n_cells; c++) {
            if (!attn_sees(kv, c, &a)) continue;
            const float * vc = a.v + (size_t) c * kvd;
            const __m256 pv = _mm256_set1_ps(score[c]);
            for (int v = 0; v < V; v++) o[v] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vc + 8 * v), o[v]);
        }
        const __m256 inv = _mm256_set1_ps(den > 0 ? (float) (1.0 / den) : 0.0f);
        for (int v = 0; v < V; v++) _mm256_storeu_ps(a.o + 8 * v, _mm256_mul_ps(o[v], inv));
    }
}

__attribute__((target("avx2,fma")))
static void attn_heads_avx2(const attn_job * j, int64_t p0, int64_t p1, int thread) {
    switch (j->hd) {
        case 64: attn_heads_regs(j, p0, p1, thread, 8); return;
        case 128: attn_heads_regs(j, p0, p1, thread, 16); return;
        default: attn_heads_body(j, p0, p1, thread); return;
    }
}
#endif

static void attn_heads(void * arg, int64_t p0, int64_t p1, int thread) {
    const attn_job * j = arg;
#if defined(__x86_64__) && defined(__GNUC__)
    if (j->level >= TK_CPU_AVX2) { attn_heads_avx2(j, p0, p1, thread); return; }
#endif
    attn_heads_plain(j, p0, p1, thread);
}

static tk_status mixer_attention(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t U = ub->n_tokens;
    const int32_t H = hp->n_head, Hkv = l->n_head_kv, hd = hp->head_dim, kvd = Hkv * hd, grp = H / Hkv;
    const float scale = hp->attention_scale != 0.0f ? hp->attention_scale : (float) (1.0 / sqrt((double) hd));
    tk_memory_kv * kv = ctx->kv;

    TK_CHECK(tk_matmul(&l->wq, 0, ctx->cur, U, ctx->q, &ctx->mm));
    TK_CHECK(tk_matmul(&l->wk, 0, ctx->cur, U, ctx->k, &ctx->mm));
    TK_CHECK(tk_matmul(&l->wv, 0, ctx->cur, U, ctx->v, &ctx->mm));
    for (int32_t t = 0; t < U; t++) {
        if (hp->use_rope && hp->n_rot > 0) {
            tk_rope_norm(ctx->q + (int64_t) t * H * hd, H, hd, hp->n_rot, ub->pos[t], hp->rope_freq_base);
            tk_rope_norm(ctx->k + (int64_t) t * kvd, Hkv, hd, hp->n_rot, ub->pos[t], hp->rope_freq_base);
        }
        const int32_t c = kv->ub_cells[t];
        memcpy(kv->k[il] + (size_t) c * kvd, ctx->k + (int64_t) t * kvd, (size_t) kvd * sizeof(float));
        memcpy(kv->v[il] + (size_t) c * kvd, ctx->v + (int64_t) t * kvd, (size_t) kvd * sizeof(float));
    }
    attn_job aj = {ctx, ub, il, H, hd, kvd, grp, scale, tk_cpu_level()};
    /* (token, head) pairs over the threads; each thread scores into its own row of vec */
    par_rows(ctx->pool, (int64_t) U * H, (int64_t) kv->n_cells * hd / 4, attn_heads, &aj);
    return tk_matmul(&l->wo, 0, ctx->att, U, out, &ctx->mm);
}

/* ==== feed-forward =================================================================== */

/* SwiGLU: down(silu(gate(x)) * up(x)) for n tokens of x [n, D] into y [n, D]. */
static tk_status swiglu(tk_context * ctx, const tk_weight * gate, const tk_weight * up, const tk_weight * down,
                        int64_t mat, const float * x, int32_t n, float * y) {
    const int64_t F = up->ne[1];
    TK_CHECK(tk_matmul(gate, mat, x, n, ctx->g, &ctx->mm));
    TK_CHECK(tk_matmul(up, mat, x, n, ctx->u, &ctx->mm));
    rows_job j = {ctx->u, NULL, ctx->g, F, F, F, 0.0f, 1};
    par_rows(ctx->pool, n, F, silu_mul_rows, &j);
    return tk_matmul(down, mat, ctx->g, n, y, &ctx->mm);
}

/* MoE: router logits r = W_inp x [E];
 *   moe_softmax_topk (Jamba):  p = softmax(r); top-k of p; weights = p[k] (not renormalised)
 *   else (Granite):            top-k of r; weights = softmax over the k logits
 * y = sum_k w_k * SwiGLU_k(x)  (+ shared expert SwiGLU(x) when present).
 * ref: transformers JambaSparseMoeBlock, GraniteMoeHybridTopKGating / GraniteMoeHybridMoE. */
static tk_status ffn_moe(tk_context * ctx, const tk_layer * l, int32_t U, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t D = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used;
    float * r = ctx->vec;      /* [E] */
    int32_t sel[64];
    float w[64];
    if (k > 64) return TK_FAIL(TK_ERR_UNSUPPORTED, "n_expert_used = %d > 64", k);
    for (int32_t t = 0; t < U; t++) {
        const float * xt = ctx->cur + (int64_t) t * D;
        float * ot = out + (int64_t) t * D;
        TK_CHECK(tk_matmul(&l->ffn_gate_inp, 0, xt, 1, r, &ctx->mm));
        if (hp->moe_softmax_topk) {
            float mx = -FLT_MAX;
            for (int32_t e = 0; e < E; e++) mx = r[e] > mx ? r[e] : mx;
            double sum = 0.0;
            for (int32_t e = 0; e < E; e++) { r[e] = expf(r[e] - mx); sum += r[e]; }
            for (int32_t e = 0; e < E; e++) r[e] = (float) (r[e] / sum);
        }
        /* top-k, ties to the lower index (torch.topk order for distinct values) */
        for (int32_t j = 0; j < k; j++) {
            int32_t best = -1;
            for (int32_t e = 0; e < E; e++) {
                int taken = 0;
                for (int32_t q = 0; q < j; q++) taken |= sel[q] == e;
                if (!taken && (best < 0 || r[e] > r[best])) best = e;
            }
            sel[j] = best;
            w[j] = r[best];
        }
        if (!hp->moe_softmax_topk) {
            const float mx = w[0];
            double sum = 0.0;
            for (int32_t j = 0; j < k; j++) { w[j] = expf(w[j] - mx); sum += w[j]; }
            for (int32_t j = 0; j < k; j++) w[j] = (float) (w[j] / sum);
        }
        for (int32_t i = 0; i < D; i++) ot[i] = 0.0f;
        for (int32_t j = 0; j < k; j++) {
            TK_CHECK(swiglu(ctx, &l->ffn_gate_exps, &l->ffn_up_exps, &l->ffn_down_exps, sel[j], xt, 1, ctx->f1));
            for (int32_t i = 0; i < D; i++) ot[i] += w[j] * ctx->f1[i];
        }
        if (l->n_ff_shexp) {
            TK_CHECK(swiglu(ctx, &l->ffn_gate_shexp, &l->ffn_up_shexp, &l->ffn_down_shexp, 0, xt, 1, ctx->f1));
            for (int32_t i = 0; i < D; i++) ot[i] += ctx->f1[i];
        }
    }
    return TK_OK;
}

/* ==== the whole ubatch =============================================================== */

/* x += out * residual_scale */
static void residual_add(tk_context * ctx, int32_t D, int32_t U) {
    rows_job j = {ctx->out, NULL, ctx->x, D, D, D, ctx->model->hp.residual_scale, 1};
    par_rows(ctx->pool, U, D, add_rows, &j);
}

tk_status tk_forward_ubatch(tk_context * ctx, const tk_ubatch * ub, float * logits_out) {
    const tk_model * m = ctx->model;
    const tk_hparams * hp = &m->hp;
    const int32_t D = hp->n_embd, U = ub->n_tokens;

    tk_model_prefetch_rows(m, ub->token, U);
    for (int32_t t = 0; t < U; t++) {
        float * xt = ctx->x + (int64_t) t * D;
        TK_CHECK(tk_weight_row(&m->tok_embd, ub->token[t], xt));
        if (hp->embedding_scale != 1.0f)
            for (int32_t i = 0; i < D; i++) xt[i] *= hp->embedding_scale;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const tk_layer * l = &m->layers[il];
        if (__atomic_load_n(&ctx->abort_requested, __ATOMIC_RELAXED)) return TK_FAIL(TK_ERR_STATE, "decode aborted");
        rms_norm_rows(ctx, ctx->x, l->attn_norm, hp->rms_eps, D, U, ctx->cur);
        switch (l->kind) {
            case TK_LAYER_MAMBA1: TK_CHECK(mixer_mamba1(ctx, l, il, ub, ctx->out)); break;
            case TK_LAYER_MAMBA2: TK_CHECK(mixer_mamba2(ctx, l, il, ub, ctx->out)); break;
            default: TK_CHECK(mixer_attention(ctx, l, il, ub, ctx->out)); break;
        }
        residual_add(ctx, D, U);
        if (l->ffn_kind == TK_FFN_NONE) continue;
        rms_norm_rows(ctx, ctx->x, l->ffn_norm, hp->rms_eps, D, U, ctx->cur);
        if (l->ffn_kind == TK_FFN_DENSE) TK_CHECK(swiglu(ctx, &l->ffn_gate, &l->ffn_up, &l->ffn_down, 0, ctx->cur, U, ctx->out));
        else TK_CHECK(ffn_moe(ctx, l, U, ctx->out));
        residual_add(ctx, D, U);
    }
    /* logits only for the tokens that asked for them */
    for (int32_t t = 0; t < U; t++) {
        if (ub->out_row[t] < 0) continue;
        float * lo = logits_out + (int64_t) ub->out_row[t] * hp->n_vocab;
        tk_rms_norm(ctx->x + (int64_t) t * D, m->output_norm, hp->rms_eps, D, ctx->cur);
        TK_CHECK(tk_matmul(&m->output, 0, ctx->cur, 1, lo, &ctx->mm));
        if (hp->logit_scale != 1.0f)
            for (int32_t i = 0; i < hp->n_vocab; i++) lo[i] /= hp->logit_scale;
    }
    return TK_OK;
}
