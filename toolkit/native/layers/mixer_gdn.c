/* mixer_gdn.c: the gated delta net mixer (TK_LAYER_GDN: the linear-attention layers of
 * qwen3next, qwen35 and qwen35moe).
 *
 * Shapes (U ubatch tokens, D n_embd, Hk key heads = n_group, Hv value heads = ssm_n_head,
 * r = Hv / Hk, Dk key head dim = d_state, Dv value head dim = ssm_head_dim, K = d_conv,
 * C = 2 Hk Dk + Hv Dv conv channels):
 *   in:  ctx->cur [U, D]            out: [U, D]
 *   attn_qkv [D, C]: rows [q (Hk x Dk) | k (Hk x Dk) | v (Hv x Dv)];  attn_gate [D, Hv Dv]: z
 *   ssm_beta, ssm_alpha [D, Hv] (qwen35, qwen35moe), or ssm_ba [D, 2 Hv] (qwen3next): per
 *     K-head g the rows [b (r) | a (r)], so v-head h = g r + j has b at row 2 g r + j and a at
 *     row 2 g r + r + j (docs/specs/gdn-family.md §1.4.1)
 *   ssm_conv1d [K, C] (no bias), ssm_dt.bias [Hv], ssm_a [Hv] (A = -exp(A_log)),
 *   ssm_norm [Dv] (shared by the heads, no +1), ssm_out [Hv Dv, D]
 *   OLMo-Hybrid: attn_q, attn_k [D, Hk Dk], attn_v [D, Hv Dv] in place of attn_qkv, and
 *     ssm_conv1d_q, ssm_conv1d_k [K, Hk Dk], ssm_conv1d_v [K, Hv Dv] in place of ssm_conv1d
 *     (joined into one [C][K] array at bind: the same conv)
 *   state per sequence: "conv" [C, K-1] (the last K-1 conv inputs), "S" [Hv, Dv, Dk]: head h's
 *     S (Dk x Dv) with element (i, j) at h Dk Dv + j Dk + i (llama.cpp's layout); on a qwen4exp
 *     PLE layer also ple.c's "ple_conv" and "ple_hist" (ple.c runs them, before this mixer)
 * (qwen4exp's linear layers are this kind too: gdn_gate_act from the file, tiled heads.)
 * Formula, per token (docs/specs/gdn-family.md §2.1):
 *   m = attn_qkv x;  z = attn_gate x;  b, a = ssm_beta x, ssm_alpha x (or ssm_ba x)
 *   c = act(causal_conv1d(m)) (hp.ssm.act, HF hidden_act; default silu)  (tap K-1 on the current token; window carried, zero at start)
 *   q_g, k_g, v_h = the parts of c;  q_g <- l2(q_g) / sqrt(Dk), k_g <- l2(k_g),
 *     l2(x) = x (sum x^2 + 1e-6)^-1/2  (HF's fixed eps; llama.cpp uses rms_eps, docs/specs/gdn-family.md B14)
 *   beta_h = sigmoid(b_h) * gdn_beta_scale (0: 1; OLMo-Hybrid's 2: beta in (0, 2), I - beta k k^T
 *     may have a negative eigenvalue);  g_h = A_h softplus(a_h + dt_bias_h)  (softplus threshold 20)
 *   v-head h reads K-head kh(h) = h % Hk (gdn_head_tiled: qwen35 GGUFs' tiled order) or
 *     h / r (qwen3next's grouped order) (docs/specs/gdn-family.md §1.4.2, B19)
 *   S_h <- exp(g_h) S_h;  u = beta_h (v_h - S_h^T k);  S_h += k u^T;  o_h = S_h^T q  (tk_gdn_run)
 *   y_h = rmsnorm(o_h) * ssm_norm * act(z_h)  (eps gdn_norm_eps, 0: rms_eps (OLMo-Hybrid: 1e-5); act
 *     silu, or sigmoid by gdn_gate_act)
 *   out = ssm_out y
 *   speculative window (memory_rs.c): a row that keeps per-token snapshots runs one-token
 *     tk_gdn_recurrent calls (never the chunked form) and copies "conv" and "S" after each token
 * Scratch: proj [U, C] m, conv [U, C] c, gate [U, Hv Dv] z, narrow [U, 2 Hv] b and a, step
 *   [U, 2 Hv] beta | g, y [U, Hv Dv]; the workspace: tk_gdn_work_floats per thread.
 * ref: transformers modeling_qwen3_next.py Qwen3NextGatedDeltaNet, Qwen3NextRMSNormGated,
 *      modeling_qwen3_5.py Qwen3_5GatedDeltaNet, modeling_olmo_hybrid.py OlmoHybridGatedDeltaNet
 *      (docs/specs/more-hybrids.md §3.4); llama.cpp qwen3next.cpp / qwen35.cpp
 *      build_layer_attn_linear.
 */
#include <math.h>
#include <string.h>

#include "layers/layer.h"

#define GDN_L2_EPS 1e-6f

/* C: channels of the causal conv (q, k, v) */
static int32_t gdn_conv_dim(const tk_hparams * hp) { return 2 * hp->ssm.n_group * hp->ssm.d_state + hp->ssm.d_inner; }

static int32_t gdn_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) {
    const tk_hparams * hp = &m->hp;
    out[0] = (tk_rs_piece) {"conv", (size_t) (hp->ssm.d_conv - 1) * (size_t) gdn_conv_dim(hp), 1};
    out[1] = (tk_rs_piece) {"S", (size_t) hp->ssm.n_head * (size_t) hp->ssm.d_state * (size_t) hp->ssm.head_dim, 1};
    return 2 + tk_ple_rs_pieces(m, il, out + 2);   /* qwen4exp's PLE layer keeps its conv window and history too (ple.c) */
}

static void gdn_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    const tk_hparams * hp = &m->hp;
    const size_t C = (size_t) gdn_conv_dim(hp), Hv = (size_t) hp->ssm.n_head, HvDv = (size_t) hp->ssm.d_inner;
    (void) il;
    tk_scratch_need(&need->proj, C);
    tk_scratch_need(&need->conv, C);
    tk_scratch_need(&need->narrow, 2 * Hv);
    tk_scratch_need(&need->step, 2 * Hv);
    tk_scratch_need(&need->gate, HvDv);
    tk_scratch_need(&need->y, HvDv);
    tk_scratch_need(&need->work_bytes, tk_chunked_work_bytes(tk_chunk_min(need->gdn_min, tk_gdn_threshold()), n_ubatch, n_threads,
                                                             tk_gdn_work_floats(hp->ssm.d_state, hp->ssm.head_dim)));
}

/* ---- load: hparams and tensors ---- */

static tk_status gdn_check(const tk_hparams * hp, int il) {
    (void) il;
    if (hp->ssm.d_conv < 1 || hp->ssm.d_conv > 64 || hp->ssm.d_state <= 0 || hp->ssm.d_state > 4096 || hp->ssm.head_dim <= 0 ||
        hp->ssm.head_dim > 4096)
        return TK_FAIL(TK_ERR_INVALID, "gated delta net hparams out of range (d_conv %d, key head dim %d, value head dim %d)",
                       hp->ssm.d_conv, hp->ssm.d_state, hp->ssm.head_dim);
    if (hp->ssm.n_group <= 0 || hp->ssm.n_head <= 0 || hp->ssm.n_head > 65536 || hp->ssm.n_head % hp->ssm.n_group ||
        hp->ssm.d_inner != hp->ssm.n_head * hp->ssm.head_dim)
        return TK_FAIL(TK_ERR_INVALID, "gated delta net heads inconsistent: %d K heads, %d V heads of %d, d_inner %d",
                       hp->ssm.n_group, hp->ssm.n_head, hp->ssm.head_dim, hp->ssm.d_inner);
    if (hp->gdn.gate_act != 0 && hp->gdn.gate_act != 1)
        return TK_FAIL(TK_ERR_INVALID, "gdn_gate_act = %d (0 silu, 1 sigmoid)", hp->gdn.gate_act);
    return TK_OK;
}

/* q / k / v: attn_q, attn_k, attn_v and ssm_conv1d_{q,k,v} with gdn_qkv_apart, else attn_qkv
 * and ssm_conv1d; beta / alpha: ssm_beta + ssm_alpha when either is in the file, else ssm_ba */
static tk_status gdn_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd, C = gdn_conv_dim(hp), Hv = hp->ssm.n_head, HvDv = hp->ssm.d_inner;
    char nm[128], nm2[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    if (hp->gdn.qkv_apart) {   /* OLMo-Hybrid: q / k / v and their convs apart */
        const int64_t HkDk = (int64_t) hp->ssm.n_group * hp->ssm.d_state;
        TK_CHECK(tk_bind_weight(m, tab, NAME("attn_q.weight"), TK_SHAPE(D, HkDk), 1, &l->wq));
        TK_CHECK(tk_bind_weight(m, tab, NAME("attn_k.weight"), TK_SHAPE(D, HkDk), 1, &l->wk));
        TK_CHECK(tk_bind_weight(m, tab, NAME("attn_v.weight"), TK_SHAPE(D, HvDv), 1, &l->wv));
        static const char * convs[3] = {"ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight"};
        float * part[3];
        for (int p = 0; p < 3; p++)
            TK_CHECK(tk_bind_vec(m, tab, NAME(convs[p]), TK_SHAPE(hp->ssm.d_conv, p < 2 ? HkDk : HvDv), 1, &part[p]));
        float * w = tk_model_alloc(m, (size_t) C * (size_t) hp->ssm.d_conv);
        if (!w) return TK_FAIL(TK_ERR_NOMEM, "out of memory joining layer %d's conv", il);
        const size_t kk = (size_t) hp->ssm.d_conv;   /* [channel][K] rows, q | k | v */
        memcpy(w, part[0], (size_t) HkDk * kk * sizeof(float));
        memcpy(w + (size_t) HkDk * kk, part[1], (size_t) HkDk * kk * sizeof(float));
        memcpy(w + (size_t) 2 * HkDk * kk, part[2], (size_t) HvDv * kk * sizeof(float));
        l->ssm_conv1d = w;
    } else {
        TK_CHECK(tk_bind_weight(m, tab, NAME("attn_qkv.weight"), TK_SHAPE(D, C), 1, &l->wqkv));
    }
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_gate.weight"), TK_SHAPE(D, HvDv), 1, &l->wgate));
    if (tk_table_find(tab, NAME("ssm_beta.weight")) || tk_table_find(tab, tk_blk_name(nm2, sizeof nm2, il, "ssm_alpha.weight"))) {
        TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_beta.weight"), TK_SHAPE(D, Hv), 1, &l->ssm_beta));
        TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_alpha.weight"), TK_SHAPE(D, Hv), 1, &l->ssm_alpha));
    } else {
        TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_ba.weight"), TK_SHAPE(D, 2 * Hv), 1, &l->ssm_ba));
    }
    if (!l->ssm_conv1d) TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_conv1d.weight"), TK_SHAPE(hp->ssm.d_conv, C), 1, &l->ssm_conv1d));
    if (tk_table_find(tab, NAME("ssm_conv1d.bias")))
        return TK_FAIL(TK_ERR_UNSUPPORTED, "%s: tensor '%s': a gated delta net conv bias is not supported", tab->path, nm);
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_dt.bias"), TK_SHAPE(Hv), 1, &l->ssm_dt_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_a"), TK_SHAPE(Hv), 1, &l->ssm_a));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_norm.weight"), TK_SHAPE(hp->ssm.head_dim), 1, &l->ssm_norm));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_out.weight"), TK_SHAPE(HvDv, D), 1, &l->ssm_out));
#undef NAME
    return TK_OK;
}

/* ---- forward ---- */

/* Per token t: q, k of c (conv row) l2-normed in place, q scaled by 1/sqrt(Dk); beta | g into
 * gb [2 Hv] from the raw b, a (b of v-head h at b + t b_stride + b_off(h), a likewise). */
typedef struct {
    const tk_hparams * hp;
    const tk_layer * l;        /* ssm_a, ssm_dt_b [Hv] */
    float * conv;              /* [U, C] conv output, q and k normed in place */
    const float * b, * a;      /* raw b, a: [U, Hv] each (ba_stride Hv) or [U, 2 Hv] grouped */
    int64_t ba_stride;         /* floats between tokens in b and a */
    int grouped_ba;            /* ssm_ba: per K-head [b (r) | a (r)] */
    float * gb;                /* [U, 2 Hv] out: beta | g */
} gdn_prep_job;

static void gdn_prep_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const gdn_prep_job * j = arg;
    const tk_hparams * hp = j->hp;
    const int32_t Hk = hp->ssm.n_group, Hv = hp->ssm.n_head, Dk = hp->ssm.d_state, r = Hv / Hk, C = gdn_conv_dim(hp);
    const float qscale = (float) (1.0 / sqrt((double) Dk));
    const float bscale = hp->gdn.beta_scale > 0 ? hp->gdn.beta_scale : 1.0f;
    (void) thread;
    for (int64_t t = t0; t < t1; t++) {
        float * c = j->conv + t * C;
        for (int32_t g = 0; g < Hk; g++) {
            tk_l2_norm(c + (int64_t) g * Dk, Dk, GDN_L2_EPS, qscale);
            tk_l2_norm(c + (int64_t) (Hk + g) * Dk, Dk, GDN_L2_EPS, 1.0f);
        }
        float * gb = j->gb + t * 2 * Hv;
        for (int32_t h = 0; h < Hv; h++) {
            const int64_t o = j->grouped_ba ? (int64_t) (h / r) * 2 * r + h % r : h;
            const float b = j->b[t * j->ba_stride + o], a = j->a[t * j->ba_stride + o + (j->grouped_ba ? r : 0)];
            gb[h] = 1.0f / (1.0f + expf(-b)) * bscale;
            gb[Hv + h] = j->l->ssm_a[h] * tk_softplus(a + j->l->ssm_dt_b[h]);
        }
    }
}

/* The delta rule for (sequence row s, v-head h) pairs p = s Hv + h over the threads. */
typedef struct {
    tk_context * ctx;          /* conv [U, C], step [U, 2 Hv], y [U, Hv Dv], work (the workspace) */
    const tk_ubatch * ub;
    tk_rs_view rv;             /* piece 1: "S" [Hv, Dv, Dk] per cell */
    int64_t work_floats;       /* per thread: tk_gdn_work_floats(Dk, Dv) */
} gdn_rule_job;

static void gdn_rule_heads(void * arg, int64_t p0, int64_t p1, int thread) {
    const gdn_rule_job * j = arg;
    const tk_hparams * hp = &j->ctx->model->hp;
    const int32_t Hk = hp->ssm.n_group, Hv = hp->ssm.n_head, Dk = hp->ssm.d_state, Dv = hp->ssm.head_dim, r = Hv / Hk;
    const int32_t C = gdn_conv_dim(hp), nst = j->ub->n_seq_tokens;
    float * work = tk_chunked_work(j->ctx, thread, j->work_floats);
    for (int64_t p = p0; p < p1; p++) {
        const int32_t s = (int32_t) (p / Hv), h = (int32_t) (p % Hv), kh = hp->gdn.head_tiled ? h % Hk : h / r;
        const int64_t t0 = (int64_t) s * nst;
        const float * c = j->ctx->conv + t0 * C;
        const float * gb = j->ctx->step + t0 * 2 * Hv;
        float * S = j->rv.piece[1] + (size_t) j->rv.ub_cells[s] * j->rv.piece_n[1] + (size_t) h * Dk * Dv;
        const tk_gdn_head hd = {nst, Dk, Dv,
                                c + (int64_t) kh * Dk, C,
                                c + (int64_t) (Hk + kh) * Dk, C,
                                c + (int64_t) 2 * Hk * Dk + (int64_t) h * Dv, C,
                                gb + Hv + h, gb + h, 2 * Hv,
                                S,
                                j->ctx->y + t0 * hp->ssm.d_inner + (int64_t) h * Dv, hp->ssm.d_inner,
                                work, NULL, 0, j->ctx->params.gdn_min};
        if (!tk_rs_snaps_row(&j->rv, s, nst)) { tk_gdn_run(&hd); continue; }
        /* speculative window: one token at a time (the recurrence's bits do not depend on
         * the split), the head's S copied after each token that keeps a snapshot */
        for (int32_t i = 0; i < nst; i++) {
            tk_gdn_head h1 = hd;
            h1.n_tok = 1;
            h1.q += i * hd.q_stride; h1.k += i * hd.k_stride; h1.v += i * hd.v_stride;
            h1.g += i * hd.gb_stride; h1.beta += i * hd.gb_stride; h1.o += i * hd.o_stride;
            tk_gdn_recurrent(&h1);
            float * snap = tk_rs_snap(&j->rv, 1, s, nst, i);
            if (snap) memcpy(snap + (size_t) h * Dk * Dv, S, (size_t) Dk * Dv * sizeof(float));
        }
    }
}

/* y[t] per v-head: rmsnorm(y_h) * ssm_norm * act(z_h), rows [t0, t1) of job j (act: silu, or
 * sigmoid with gdn_gate_act) */
static void gdn_norm_gate(const tk_rows_job * j, int64_t t0, int64_t t1, int sigmoid) {
    const int32_t Dv = (int32_t) (j->n / j->groups);
    for (int64_t t = t0; t < t1; t++) {
        float * y = j->y + t * j->y_stride;
        const float * z = j->a + t * j->a_stride;
        for (int32_t h = 0; h < j->groups; h++) tk_rms_norm(y + (int64_t) h * Dv, j->b, j->f, Dv, y + (int64_t) h * Dv);
        if (sigmoid) for (int64_t i = 0; i < j->n; i++) y[i] *= 1.0f / (1.0f + expf(-z[i]));
        else tk_mul_silu_row(y, z, j->n);
    }
}

static void gdn_gated_norm_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    (void) thread;
    gdn_norm_gate(arg, t0, t1, 0);
}

static void gdn_sigmoid_norm_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    (void) thread;
    gdn_norm_gate(arg, t0, t1, 1);
}

/* OLMo-Hybrid: q, k, v by their own matrices into conv (free until the conv writes it: [U, Hk Dk]
 * q, then k, then [U, Hv Dv] v, U C floats in all), then interleaved into proj rows [q | k | v] */
static tk_status gdn_project_apart(tk_context * ctx, const tk_layer * l, int32_t U) {
    const tk_hparams * hp = &ctx->model->hp;
    const int64_t HkDk = (int64_t) hp->ssm.n_group * hp->ssm.d_state, HvDv = hp->ssm.d_inner, C = gdn_conv_dim(hp);
    float * q = ctx->conv, * k = q + U * HkDk, * v = k + U * HkDk;
    TK_CHECK(tk_matmul(&l->wq, 0, ctx->cur, U, q, &ctx->mm));
    TK_CHECK(tk_matmul(&l->wk, 0, ctx->cur, U, k, &ctx->mm));
    TK_CHECK(tk_matmul(&l->wv, 0, ctx->cur, U, v, &ctx->mm));
    for (int64_t t = 0; t < U; t++) {
        float * row = ctx->proj + t * C;
        memcpy(row, q + t * HkDk, (size_t) HkDk * sizeof(float));
        memcpy(row + HkDk, k + t * HkDk, (size_t) HkDk * sizeof(float));
        memcpy(row + 2 * HkDk, v + t * HvDv, (size_t) HvDv * sizeof(float));
    }
    return TK_OK;
}

static tk_status gdn_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t Hv = hp->ssm.n_head, HvDv = hp->ssm.d_inner, C = gdn_conv_dim(hp), K = hp->ssm.d_conv;
    const int32_t U = ub->n_tokens, nst = ub->n_seq_tokens;
    tk_rs_view rv;
    TK_CHECK(ctx->mem->rs_view(ctx->mem, il, &rv));

    /* projections: m -> proj (or q, k and v apart), z -> gate, raw b / a -> narrow */
    if (l->wqkv.data) TK_CHECK(tk_matmul(&l->wqkv, 0, ctx->cur, U, ctx->proj, &ctx->mm));
    else TK_CHECK(gdn_project_apart(ctx, l, U));
    TK_CHECK(tk_matmul(&l->wgate, 0, ctx->cur, U, ctx->gate, &ctx->mm));
    gdn_prep_job pj = {hp, l, ctx->conv, ctx->narrow, ctx->narrow, 2 * Hv, 1, ctx->step};
    if (l->ssm_ba.data) {
        TK_CHECK(tk_matmul(&l->ssm_ba, 0, ctx->cur, U, ctx->narrow, &ctx->mm));
    } else {
        TK_CHECK(tk_matmul(&l->ssm_beta, 0, ctx->cur, U, ctx->narrow, &ctx->mm));
        TK_CHECK(tk_matmul(&l->ssm_alpha, 0, ctx->cur, U, ctx->narrow + (int64_t) U * Hv, &ctx->mm));
        pj.a = ctx->narrow + (int64_t) U * Hv;
        pj.ba_stride = Hv;
        pj.grouped_ba = 0;
    }
    /* causal conv + act per sequence row, its window carried in the "conv" piece */
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        tk_rs_snap_conv(&rv, 0, s, ctx->proj + (int64_t) s * nst * C, C, nst, C, K);
        tk_conv_act(ctx, hp->ssm.act, ctx->proj + (int64_t) s * nst * C, C, nst, C, K, l->ssm_conv1d, NULL,
                      rv.piece[0] + (size_t) rv.ub_cells[s] * rv.piece_n[0], ctx->conv + (int64_t) s * nst * C, C);
    }
    tk_par_rows(ctx->pool, U, C, gdn_prep_rows, &pj);

    /* the delta rule per (sequence, v-head), heads over the threads */
    gdn_rule_job rj = {ctx, ub, rv, tk_gdn_work_floats(hp->ssm.d_state, hp->ssm.head_dim)};
    tk_par_rows(ctx->pool, (int64_t) ub->n_seqs * Hv, (int64_t) nst * hp->ssm.d_state * hp->ssm.head_dim, gdn_rule_heads, &rj);

    tk_rows_job gj = {ctx->gate, l->ssm_norm, ctx->y, HvDv, HvDv, HvDv, hp->gdn.norm_eps > 0 ? hp->gdn.norm_eps : hp->rms_eps, Hv};
    tk_par_rows(ctx->pool, U, HvDv, hp->gdn.gate_act ? gdn_sigmoid_norm_rows : gdn_gated_norm_rows, &gj);
    return tk_matmul(&l->ssm_out, 0, ctx->y, U, out, &ctx->mm);
}

const tk_mixer_ops tk_mixer_gdn = {
    .name = "gdn",
    .check = gdn_check,
    .bind = gdn_bind,
    .rs_pieces = gdn_rs_pieces,
    .scratch = gdn_scratch,
    .forward = gdn_forward,
};
