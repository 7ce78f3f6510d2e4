/* mixer_kda.c: Kimi Delta Attention (TK_LAYER_KDA: the linear-attention layers of kimi-linear;
 * the same operator as glm5-next's and Ling 3's, whose gate variants the hparams select).
 *
 * Shapes (U ubatch tokens, H n_embd, n = kda_n_head heads of D = kda_head_dim (key dim =
 * value dim), C = n D, K = d_conv, r = the gates' low rank, D for kimi):
 *   in:  ctx->cur [U, H]            out: [U, H]
 *   attn_q, attn_k, attn_v [H, C];  ssm_conv1d_{q,k,v} [K, 1, C, 1] (joined at bind into one
 *     [3C][K] array: the conv over [q | k | v])
 *   ssm_f_a [H, r] + ssm_f_b [r, C] (low rank), or ssm_f_a [H, C] alone (full rank, Ling 3);
 *   ssm_g_a / ssm_g_b likewise;  ssm_beta [H, n];  ssm_a [n] (= -exp(A_log));  ssm_dt.bias [C];
 *   ssm_norm [D] (shared by the heads, no +1);  attn_output [C, H]
 *   state per sequence: "conv" [3C, K-1] (the last K-1 conv inputs), "S" [n, D, D]: head h's
 *     S (Dk x Dv) with element (i, j) at h D D + j D + i (llama.cpp's layout, as mixer_gdn.c)
 * Formula, per token (docs/specs/kda-family.md §2.1):
 *   m = [attn_q x | attn_k x | attn_v x];  c = act(causal_conv1d(m)) (hp.ssm.act, HF hidden_act; default silu)  (tap K-1 on the current
 *     token; window carried, zero at start);  q_h, k_h, v_h = the parts of c
 *   q_h <- l2(q_h) / sqrt(D), k_h <- l2(k_h),  l2(x) = x (sum x^2 + kda_l2_eps)^-1/2
 *     (HF's 1e-6, modeling_kimi_linear.py:402-410; llama.cpp's file reads rms_eps, docs/specs/kda-family.md D4)
 *   u = f_b(f_a(x)) + dt_bias  (per channel);  g[h, c] = ssm_a_h softplus(u[h, c])  (threshold 20),
 *     or with kda_gate_lower_bound lb < 0: g = lb sigmoid(-ssm_a_h u)   (modeling_kimi_linear.py:332-344, modeling_glm5_next.py:360-362);
 *     bailingmoe3 stores ssm_a = +exp(A_log) (hp.kda.a_positive): the same with -ssm_a (modeling_bailing_hybrid.py:442-445)
 *   beta_h = sigmoid(ssm_beta x)_h
 *   S_h <- Diag(exp(g_h)) S_h (key row i by exp(g[h, i]));  u = beta_h (v_h - S_h^T k_h);
 *     S_h += k_h u^T;  o_h = S_h^T q_h     (kernels/gdn.c's tk_gdn_run with gk: the recurrence,
 *     or HF's chunked form past tk_kda_threshold())
 *   z = g_b(g_a(x));  y_h = rmsnorm(o_h; rms_eps) * ssm_norm * sigmoid(z_h)   (modeling_kimi_linear.py:75-95, 712-714)
 *   out = attn_output y
 *   speculative window (memory_rs.c): a row that keeps per-token snapshots runs one-token
 *     recurrence calls and copies "conv" and "S" after each token that keeps one
 * Scratch: proj [U, 3C] m, conv [U, 3C] c, narrow [U, r] the gates' low-rank rows, step [U, C + n]
 *   as two blocks (g [U, C], then beta [U, n]), gate [U, C] z, y [U, C]; the workspace:
 *   tk_kda_work_floats(D, D) per thread.
 * ref: transformers 5.24 modeling_kimi_linear.py KimiLinearDeltaAttention, KimiLinearForgetGate,
 *      KimiLinearRMSNormGated, recurrent_kimi_delta_attention / chunk_kimi_delta_attention;
 *      llama.cpp 0c1e570 src/models/kimi-linear.cpp (LCK:288-384).
 */
#include <math.h>
#include <string.h>

#include "layers/layer.h"

static int32_t kda_C(const tk_hparams * hp) { return hp->kda.n_head * hp->kda.head_dim; }

static int32_t kda_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) {
    const tk_hparams * hp = &m->hp;
    (void) il;
    out[0] = (tk_rs_piece) {"conv", (size_t) (hp->ssm.d_conv - 1) * 3 * (size_t) kda_C(hp), 1};
    out[1] = (tk_rs_piece) {"S", (size_t) hp->kda.n_head * (size_t) hp->kda.head_dim * (size_t) hp->kda.head_dim, 1};
    return 2;
}

/* the gates' low rank r of layer il (its ssm_f_a's width; C when full rank) */
static int64_t kda_rank(const tk_model * m, int il) {
    const tk_layer * l = &m->layers[il];
    return l->ssm_f_a.data ? l->ssm_f_a.ne[1] : kda_C(&m->hp);
}

static void kda_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    const tk_hparams * hp = &m->hp;
    const size_t C = (size_t) kda_C(hp), n = (size_t) hp->kda.n_head;
    tk_scratch_need(&need->proj, 3 * C);
    tk_scratch_need(&need->conv, 3 * C);
    tk_scratch_need(&need->narrow, (size_t) kda_rank(m, il));
    tk_scratch_need(&need->step, C + n);
    tk_scratch_need(&need->gate, C);
    tk_scratch_need(&need->y, C);
    tk_scratch_need(&need->work_bytes, tk_chunked_work_bytes(tk_chunk_min(need->kda_min, tk_kda_threshold()), n_ubatch, n_threads,
                                                             tk_kda_work_floats(hp->kda.head_dim, hp->kda.head_dim)));
}

/* ---- load ---- */

static tk_status kda_check(const tk_hparams * hp, int il) {
    (void) il;
    if (hp->ssm.d_conv < 1 || hp->ssm.d_conv > 64 || hp->kda.head_dim <= 0 || hp->kda.head_dim > 4096 || hp->kda.n_head <= 0 ||
        hp->kda.n_head > 65536)
        return TK_FAIL(TK_ERR_INVALID, "KDA hparams out of range (d_conv %d, %d heads of %d)", hp->ssm.d_conv, hp->kda.n_head,
                       hp->kda.head_dim);
    if (!(hp->kda.l2_eps >= 0) || !isfinite(hp->kda.l2_eps) || !(hp->kda.gate_lower_bound <= 0) ||
        !isfinite(hp->kda.gate_lower_bound))
        return TK_FAIL(TK_ERR_INVALID, "KDA l2 eps %g / gate lower bound %g invalid", hp->kda.l2_eps, hp->kda.gate_lower_bound);
    return TK_OK;
}

/* the low-rank pair a [H, r] + b [r, C], or a [H, C] alone (b absent) */
static tk_status kda_bind_gate(tk_model * m, const tk_table * tab, int il, const char * a, const char * b, tk_weight * wa,
                               tk_weight * wb) {
    const int64_t H = m->hp.n_embd, C = kda_C(&m->hp);
    char nm[128];
    const tk_tensor_desc * tb = tk_table_find(tab, tk_blk_name(nm, sizeof nm, il, b));
    if (!tb) {
        memset(wb, 0, sizeof *wb);
        return tk_bind_weight(m, tab, tk_blk_name(nm, sizeof nm, il, a), TK_SHAPE(H, C), 1, wa);
    }
    const int64_t r = tb->ne[0];
    TK_CHECK(tk_bind_weight(m, tab, tk_blk_name(nm, sizeof nm, il, a), TK_SHAPE(H, r), 1, wa));
    return tk_bind_weight(m, tab, tk_blk_name(nm, sizeof nm, il, b), TK_SHAPE(r, C), 1, wb);
}

static tk_status kda_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t H = hp->n_embd, C = kda_C(hp), n = hp->kda.n_head, K = hp->ssm.d_conv;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_q.weight"), TK_SHAPE(H, C), 1, &l->wq));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_k.weight"), TK_SHAPE(H, C), 1, &l->wk));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_v.weight"), TK_SHAPE(H, C), 1, &l->wv));
    static const char * convs[3] = {"ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight"};
    float * w = tk_model_alloc(m, (size_t) (3 * C * K));
    if (!w) return TK_FAIL(TK_ERR_NOMEM, "out of memory joining layer %d's conv", il);
    for (int p = 0; p < 3; p++) {   /* [channel][K] rows, q | k | v */
        float * part;
        TK_CHECK(tk_bind_vec(m, tab, NAME(convs[p]), TK_SHAPE(K, 1, C, 1), 1, &part));
        memcpy(w + (size_t) (p * C * K), part, (size_t) (C * K) * sizeof(float));
    }
    l->ssm_conv1d = w;
    TK_CHECK(kda_bind_gate(m, tab, il, "ssm_f_a.weight", "ssm_f_b.weight", &l->ssm_f_a, &l->ssm_f_b));
    TK_CHECK(kda_bind_gate(m, tab, il, "ssm_g_a.weight", "ssm_g_b.weight", &l->ssm_g_a, &l->ssm_g_b));
    if ((l->ssm_f_b.data != NULL) != (l->ssm_g_b.data != NULL) ||
        (l->ssm_f_b.data && l->ssm_f_b.ne[0] != l->ssm_g_b.ne[0]))
        return TK_FAIL(TK_ERR_INVALID, "%s: layer %d: ssm_f_b and ssm_g_b must both be present with one rank", tab->path, il);
    TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_beta.weight"), TK_SHAPE(H, n), 1, &l->ssm_beta));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_a"), TK_SHAPE(n), 1, &l->ssm_a));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_dt.bias"), TK_SHAPE(C), 1, &l->ssm_dt_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_norm.weight"), TK_SHAPE(hp->kda.head_dim), 1, &l->ssm_norm));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_output.weight"), TK_SHAPE(C, H), 1, &l->wo));
#undef NAME
    return TK_OK;
}

/* ---- forward ---- */

/* Per token t: q, k of c (conv row [3C]) l2-normed in place, q scaled by 1/sqrt(D); the
 * gate g [C] (in place of u) and beta [n] (in place of the raw b). */
typedef struct {
    const tk_hparams * hp;
    const tk_layer * l;
    float * conv;              /* [U, 3C] */
    float * g;                 /* [U, C]: f_b(f_a(x)) in, g out */
    float * beta;              /* [U, n]: b in, sigmoid(b) out */
} kda_prep_job;

static void kda_prep_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const kda_prep_job * j = arg;
    const tk_hparams * hp = j->hp;
    const int32_t n = hp->kda.n_head, D = hp->kda.head_dim, C = n * D;
    const float qscale = (float) (1.0 / sqrt((double) D)), eps = hp->kda.l2_eps, lb = hp->kda.gate_lower_bound;
    (void) thread;
    for (int64_t t = t0; t < t1; t++) {
        float * c = j->conv + t * 3 * C;
        for (int32_t h = 0; h < n; h++) {
            tk_l2_norm(c + (int64_t) h * D, D, eps, qscale);
            tk_l2_norm(c + C + (int64_t) h * D, D, eps, 1.0f);
        }
        float * g = j->g + t * C, * b = j->beta + t * n;
        for (int32_t h = 0; h < n; h++) {
            const float a = hp->kda.a_positive ? -j->l->ssm_a[h] : j->l->ssm_a[h];   /* -exp(A_log) either way */
            for (int32_t i = h * D; i < (h + 1) * D; i++) {
                const float u = g[i] + j->l->ssm_dt_b[i];
                g[i] = lb < 0 ? lb / (1.0f + expf(a * u)) : a * tk_softplus(u);
            }
            b[h] = 1.0f / (1.0f + expf(-b[h]));
        }
    }
}

/* The delta rule for (sequence row s, head h) pairs p = s n + h over the threads. */
typedef struct {
    tk_context * ctx;
    const tk_ubatch * ub;
    tk_rs_view rv;             /* piece 1: "S" [n, D, D] per cell */
    int64_t work_floats;       /* per thread */
} kda_rule_job;

static void kda_rule_heads(void * arg, int64_t p0, int64_t p1, int thread) {
    const kda_rule_job * j = arg;
    const tk_hparams * hp = &j->ctx->model->hp;
    const int32_t n = hp->kda.n_head, D = hp->kda.head_dim, C = n * D, nst = j->ub->n_seq_tokens, U = j->ub->n_tokens;
    float * work = tk_chunked_work(j->ctx, thread, j->work_floats);
    for (int64_t p = p0; p < p1; p++) {
        const int32_t s = (int32_t) (p / n), h = (int32_t) (p % n);
        const int64_t t0 = (int64_t) s * nst;
        const float * c = j->ctx->conv + t0 * 3 * C;
        const float * g = j->ctx->step + t0 * C + (int64_t) h * D;
        const float * beta = j->ctx->step + (int64_t) U * C + t0 * n + h;
        float * S = j->rv.piece[1] + (size_t) j->rv.ub_cells[s] * j->rv.piece_n[1] + (size_t) h * D * D;
        tk_gdn_head hd = {0};
        hd.n_tok = nst; hd.dk = D; hd.dv = D;
        hd.q = c + (int64_t) h * D; hd.q_stride = 3 * C;
        hd.k = c + C + (int64_t) h * D; hd.k_stride = 3 * C;
        hd.v = c + 2 * C + (int64_t) h * D; hd.v_stride = 3 * C;
        hd.g = NULL; hd.beta = beta; hd.gb_stride = n;
        hd.S = S;
        hd.o = j->ctx->y + t0 * C + (int64_t) h * D; hd.o_stride = C;
        hd.work = work;
        hd.gk = g; hd.gk_stride = C;
        hd.min_chunk = j->ctx->params.kda_min;
        if (!tk_rs_snaps_row(&j->rv, s, nst)) { tk_gdn_run(&hd); continue; }
        for (int32_t i = 0; i < nst; i++) {   /* speculative window: one token at a time, S kept after each */
            tk_gdn_head h1 = hd;
            h1.n_tok = 1;
            h1.q += i * hd.q_stride; h1.k += i * hd.k_stride; h1.v += i * hd.v_stride;
            h1.beta += i * hd.gb_stride; h1.gk += i * hd.gk_stride; h1.o += i * hd.o_stride;
            tk_gdn_recurrent(&h1);
            float * snap = tk_rs_snap(&j->rv, 1, s, nst, i);
            if (snap) memcpy(snap + (size_t) h * D * D, S, (size_t) D * D * sizeof(float));
        }
    }
}

/* y[t] per head: rmsnorm(y_h) * ssm_norm * sigmoid(z_h) */
static void kda_norm_gate_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    const int32_t D = (int32_t) (j->n / j->groups);
    (void) thread;
    for (int64_t t = t0; t < t1; t++) {
        float * y = j->y + t * j->y_stride;
        const float * z = j->a + t * j->a_stride;
        for (int32_t h = 0; h < j->groups; h++) tk_rms_norm(y + (int64_t) h * D, j->b, j->f, D, y + (int64_t) h * D);
        for (int64_t i = 0; i < j->n; i++) y[i] *= 1.0f / (1.0f + expf(-z[i]));
    }
}

/* a gate's rows: b(a(x)) through the narrow buffer, or a(x) when full rank */
static tk_status kda_gate_proj(tk_context * ctx, const tk_weight * a, const tk_weight * b, int32_t U, float * y) {
    if (!b->data) return tk_matmul(a, 0, ctx->cur, U, y, &ctx->mm);
    TK_CHECK(tk_matmul(a, 0, ctx->cur, U, ctx->narrow, &ctx->mm));
    return tk_matmul(b, 0, ctx->narrow, U, y, &ctx->mm);
}

static tk_status kda_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t n = hp->kda.n_head, D = hp->kda.head_dim, C = n * D, K = hp->ssm.d_conv;
    const int32_t U = ub->n_tokens, nst = ub->n_seq_tokens;
    tk_rs_view rv;
    TK_CHECK(ctx->mem->rs_view(ctx->mem, il, &rv));

    /* q, k, v by their own matrices into conv ([U, C] q, then k, then v), interleaved into proj rows [q | k | v] */
    float * q = ctx->conv, * k = q + (int64_t) U * C, * v = k + (int64_t) U * C;
    TK_CHECK(tk_matmul(&l->wq, 0, ctx->cur, U, q, &ctx->mm));
    TK_CHECK(tk_matmul(&l->wk, 0, ctx->cur, U, k, &ctx->mm));
    TK_CHECK(tk_matmul(&l->wv, 0, ctx->cur, U, v, &ctx->mm));
    for (int64_t t = 0; t < U; t++) {
        float * row = ctx->proj + t * 3 * C;
        memcpy(row, q + t * C, (size_t) C * sizeof(float));
        memcpy(row + C, k + t * C, (size_t) C * sizeof(float));
        memcpy(row + 2 * C, v + t * C, (size_t) C * sizeof(float));
    }
    /* gates: f -> step [U, C], b -> step + U C [U, n], z -> gate [U, C] */
    float * g = ctx->step, * beta = ctx->step + (int64_t) U * C;
    TK_CHECK(kda_gate_proj(ctx, &l->ssm_f_a, &l->ssm_f_b, U, g));
    TK_CHECK(tk_matmul(&l->ssm_beta, 0, ctx->cur, U, beta, &ctx->mm));
    TK_CHECK(kda_gate_proj(ctx, &l->ssm_g_a, &l->ssm_g_b, U, ctx->gate));
    /* causal conv + act per sequence row, its window carried in the "conv" piece */
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        tk_rs_snap_conv(&rv, 0, s, ctx->proj + (int64_t) s * nst * 3 * C, 3 * C, nst, 3 * C, K);
        tk_conv_act(ctx, hp->ssm.act, ctx->proj + (int64_t) s * nst * 3 * C, 3 * C, nst, 3 * C, K, l->ssm_conv1d, NULL,
                      rv.piece[0] + (size_t) rv.ub_cells[s] * rv.piece_n[0], ctx->conv + (int64_t) s * nst * 3 * C, 3 * C);
    }
    kda_prep_job pj = {hp, l, ctx->conv, g, beta};
    tk_par_rows(ctx->pool, U, 3 * C, kda_prep_rows, &pj);

    kda_rule_job rj = {ctx, ub, rv, tk_kda_work_floats(D, D)};
    tk_par_rows(ctx->pool, (int64_t) ub->n_seqs * n, (int64_t) nst * D * D, kda_rule_heads, &rj);

    tk_rows_job gj = {ctx->gate, l->ssm_norm, ctx->y, C, C, C, hp->rms_eps, n};
    tk_par_rows(ctx->pool, U, C, kda_norm_gate_rows, &gj);
    return tk_matmul(&l->wo, 0, ctx->y, U, out, &ctx->mm);
}

const tk_mixer_ops tk_mixer_kda = {
    .name = "kda",
    .check = kda_check,
    .bind = kda_bind,
    .rs_pieces = kda_rs_pieces,
    .scratch = kda_scratch,
    .forward = kda_forward,
};
