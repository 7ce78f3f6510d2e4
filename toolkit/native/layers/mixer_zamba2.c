/* mixer_zamba2.c: the Zamba2 hybrid layer (TK_LAYER_ZAMBA2_SHARED: zamba2's "hybrid" layers; its
 * other layers are plain TK_LAYER_MAMBA2).
 *
 * Shapes (U ubatch tokens, D n_embd, E the token's embedding row [D], A = 2 D, H heads,
 * Hkv KV heads, hd head_dim (H hd = A), r adapter rank, F the shared FFN width):
 *   in:  ctx->x [U, D] (the residual stream; the block's own pre-norm is applied below)
 *   out: [U, D]
 *   shared block b = (rank of this layer among the hybrid layers) % n_shared_block, tensors
 *   shared.b.*; this layer's LoRA adapters blk.il.*_lora_{a,b} and blk.il.shared_linear
 *   KV cache per cell: K [Hkv hd] (after RoPE), V [Hkv hd]; recurrent state: Mamba-2's
 * Formula (transformers modeling_zamba2.py Zamba2HybridLayer / Zamba2AttentionDecoderLayer):
 *   h = rmsnorm([x | E]) * shared.attn_norm                                   [U, A]
 *   q = Wq h + Bq (Aq h), k = Wk h + Bk (Ak h), v = Wv h + Bv (Av h)   (Wq h ... without the
 *       optional attention adapters: HF use_shared_attention_adapter false)
 *   o = Wo softmax(rope(q) rope(k)^T * scale) v   (scale = attention.scale = (hd/2)^-1/2,
 *       NEOX RoPE over n_rot dims; tk_attention_core)
 *   f = rmsnorm(o) * shared.ffn_norm
 *   g = Wg f + bg + Bg (Af f), u = Wu f + bu + Bu (Af f)   (HF gate_up_proj + its adapter, chunked;
 *       bg / bu / bd: shared.b.ffn_{gate,up,down}.bias where the file has them, add_bias_linear)
 *   t = shared_linear(Wd (act(g) * u) + bd)          (act hp.ffn.act, HF hidden_act: default gelu, the erf form)
 *   out = mamba2(rmsnorm(x + t) * attn_norm)          (mixer_mamba2.c, dt floored at ssm_dt_min; its
 *       ssm_in / ssm_out biases with add_bias_linear)
 * The block skeleton (forward.c) then adds out to x.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/attn.h"
#include "layers/layer.h"

/* the shared block this hybrid layer runs: its rank among the hybrid layers (of either Zamba
 * kind), mod n_shared_block */
int32_t tk_zamba_block(const tk_hparams * hp, int il) {
    int32_t j = 0;
    for (int i = 0; i < il; i++) j += hp->layer_kinds[i] == TK_LAYER_ZAMBA2_SHARED || hp->layer_kinds[i] == TK_LAYER_ZAMBA_SHARED;
    return j % hp->zamba.n_shared_block;
}

static int32_t z2_kv_dim(const tk_model * m, int il) { return m->hp.n_head_kv[il] * m->hp.attn.head_dim; }

static int32_t z2_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) {
    return tk_mixer_mamba2.rs_pieces(m, il, out);
}

/* Mamba-2's, plus: proj [A] (h, the shared block's input), narrow [r] (adapter rows), y [max(H hd,
 * F)] (adapter outputs), q [H hd], kv [Hkv hd] */
static void z2_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    const tk_hparams * hp = &m->hp;
    const tk_layer * l = &m->layers[il];
    tk_mixer_mamba2.scratch(m, il, n_ubatch, n_threads, need);
    tk_scratch_need(&need->proj, 2 * (size_t) hp->n_embd);
    tk_scratch_need(&need->narrow, (size_t) l->ffn_lora_a.ne[1]);
    tk_scratch_need(&need->y, (size_t) hp->attn.n_head * (size_t) hp->attn.head_dim);
    tk_scratch_need(&need->y, (size_t) l->n_ff);
    tk_scratch_need(&need->q, (size_t) hp->attn.n_head * (size_t) hp->attn.head_dim);
    tk_scratch_need(&need->kv, (size_t) z2_kv_dim(m, il));
    tk_scratch_need(&need->work_bytes, tk_attn_work_bytes(hp->attn.n_head, z2_kv_dim(m, il) / hp->attn.head_dim, hp->attn.head_dim,
                                                           hp->attn.head_dim, n_threads));   /* the blocked attention's */
    tk_scratch_need(&need->attn_part, tk_attn_part_floats(hp->attn.n_head, z2_kv_dim(m, il) / hp->attn.head_dim, hp->attn.head_dim));
}

static tk_status z2_check(const tk_hparams * hp, int il) {
    TK_CHECK(tk_mixer_mamba2.check(hp, il));
    if (hp->zamba.n_shared_block <= 0) return TK_FAIL(TK_ERR_INVALID, "n_shared_block = %d must be > 0", hp->zamba.n_shared_block);
    if (hp->attn.n_head <= 0 || hp->n_head_kv[il] <= 0 || hp->attn.n_head % hp->n_head_kv[il] || hp->attn.head_dim <= 0 ||
        hp->attn.n_head * hp->attn.head_dim != 2 * hp->n_embd)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: zamba2 attention needs n_head x head_dim = 2 n_embd (n_head %d, n_head_kv %d, "
                       "head_dim %d, n_embd %d)", il, hp->attn.n_head, hp->n_head_kv[il], hp->attn.head_dim, hp->n_embd);
    if (hp->attn.use_rope && (hp->attn.n_rot < 0 || hp->attn.n_rot > hp->attn.head_dim || hp->attn.n_rot % 2 || !(hp->attn.rope_freq_base > 0)))
        return TK_FAIL(TK_ERR_INVALID, "n_rot = %d / rope_freq_base = %g invalid", hp->attn.n_rot, hp->attn.rope_freq_base);
    return TK_OK;
}

/* shared.<b>.<suffix> into buf */
static const char * shared_name(char * buf, size_t n, int32_t b, const char * suffix) {
    snprintf(buf, n, "shared.%d.%s", b, suffix);
    return buf;
}

tk_status tk_zamba_bind_shared(tk_model * m, const tk_table * tab, int32_t b, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd, A = 2 * D, HD = (int64_t) hp->attn.n_head * hp->attn.head_dim, KV = (int64_t) l->n_head_kv * hp->attn.head_dim;
    char nm[128];
#define SNAME(s) shared_name(nm, sizeof nm, b, s)
    TK_CHECK(tk_bind_vec(m, tab, SNAME("attn_norm.weight"), TK_SHAPE(A), 1, &l->shared_attn_norm));
    TK_CHECK(tk_bind_weight(m, tab, SNAME("attn_q.weight"), TK_SHAPE(A, HD), 1, &l->wq));
    TK_CHECK(tk_bind_weight(m, tab, SNAME("attn_k.weight"), TK_SHAPE(A, KV), 1, &l->wk));
    TK_CHECK(tk_bind_weight(m, tab, SNAME("attn_v.weight"), TK_SHAPE(A, KV), 1, &l->wv));
    TK_CHECK(tk_bind_weight(m, tab, SNAME("attn_output.weight"), TK_SHAPE(HD, D), 1, &l->wo));
    TK_CHECK(tk_bind_vec(m, tab, SNAME("ffn_norm.weight"), TK_SHAPE(D), 1, &l->ffn_norm));
    TK_CHECK(tk_bind_ffn(m, tab, shared_name(nm, sizeof nm, b, ""), 1, l));
    /* Zamba2 add_bias_linear: the MLP's gate / up (gate_up_proj's halves) and down biases, the three
     * together (absent: none; Zamba's MLP has none) */
    const int64_t F = l->n_ff;
    const int biased = tk_table_find(tab, SNAME("ffn_up.bias")) != NULL;
    TK_CHECK(tk_bind_vec(m, tab, SNAME("ffn_gate.bias"), TK_SHAPE(F), biased, &l->ffn_gate_b));
    TK_CHECK(tk_bind_vec(m, tab, SNAME("ffn_up.bias"), TK_SHAPE(F), biased, &l->ffn_up_b));
    TK_CHECK(tk_bind_vec(m, tab, SNAME("ffn_down.bias"), TK_SHAPE(D), biased, &l->ffn_down_b));
    if (!biased && (l->ffn_gate_b || l->ffn_down_b))
        return TK_FAIL(TK_ERR_INVALID, "%s: shared block %d: ffn_gate.bias / ffn_down.bias without ffn_up.bias", tab->path, b);
#undef SNAME
    return TK_OK;
}

static tk_status z2_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd, A = 2 * D, HD = (int64_t) hp->attn.n_head * hp->attn.head_dim, KV = (int64_t) l->n_head_kv * hp->attn.head_dim;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    TK_CHECK(tk_mixer_mamba2.bind(m, tab, il, l));
    TK_CHECK(tk_zamba_bind_shared(m, tab, tk_zamba_block(hp, il), l));
    const tk_tensor_desc * fa = tk_table_find(tab, NAME("ffn_lora_a.weight"));
    if (!fa) return TK_FAIL(TK_ERR_INVALID, "%s: missing tensor '%s'", tab->path, nm);
    const int64_t r = fa->ne[1], F = l->n_ff;
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_lora_a.weight"), TK_SHAPE(D, r), 1, &l->ffn_lora_a));
    /* the attention adapters come as a group of six, or not at all (use_shared_attention_adapter) */
    const int attn_lora = tk_table_find(tab, NAME("attn_q_lora_a.weight")) != NULL;
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_q_lora_a.weight"), TK_SHAPE(A, r), attn_lora, &l->lora_qa));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_q_lora_b.weight"), TK_SHAPE(r, HD), attn_lora, &l->lora_qb));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_k_lora_a.weight"), TK_SHAPE(A, r), attn_lora, &l->lora_ka));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_k_lora_b.weight"), TK_SHAPE(r, KV), attn_lora, &l->lora_kb));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_v_lora_a.weight"), TK_SHAPE(A, r), attn_lora, &l->lora_va));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_v_lora_b.weight"), TK_SHAPE(r, KV), attn_lora, &l->lora_vb));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_gate_lora_b.weight"), TK_SHAPE(r, F), 1, &l->ffn_gate_lora_b));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_up_lora_b.weight"), TK_SHAPE(r, F), 1, &l->ffn_up_lora_b));
    TK_CHECK(tk_bind_weight(m, tab, NAME("shared_linear.weight"), TK_SHAPE(D, D), 1, &l->shared_linear));
#undef NAME
    return TK_OK;
}

/* ---- forward ---- */

/* y [U, n] = w x + b (a (x)): the projection plus its LoRA adapter (a: [in, r] into ctx->narrow,
 * b: [r, n] into ctx->y), added row by row; w x alone when the adapter is absent */
static tk_status z2_proj_lora(tk_context * ctx, const tk_weight * w, const tk_weight * a, const tk_weight * b,
                              const float * x, int32_t U, float * y) {
    const int64_t n = w->ne[1];
    TK_CHECK(tk_matmul(w, 0, x, U, y, &ctx->mm));
    if (!a->data) return TK_OK;
    TK_CHECK(tk_matmul(a, 0, x, U, ctx->narrow, &ctx->mm));
    TK_CHECK(tk_matmul(b, 0, ctx->narrow, U, ctx->y, &ctx->mm));
    tk_rows_job j = {ctx->y, NULL, y, n, n, n, 1.0f, 1};
    tk_par_rows(ctx->pool, U, n, tk_add_rows, &j);
    return TK_OK;
}

/* g [U, F] = act(g) * u (j->act, HF hidden_act); gelu(x) = x/2 (1 + erf(x / sqrt 2)) (HF ACT2FN["gelu"],
 * the default) inline as before, the others through tk_act */
static void z2_gelu_mul_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    (void) thread;
    if (j->act != TK_ACT_GELU) {
        for (int64_t t = t0; t < t1; t++) {
            float * g = j->y + t * j->y_stride;
            const float * u = j->a + t * j->a_stride;
            for (int64_t i = 0; i < j->n; i++) g[i] = tk_act(j->act, g[i]) * u[i];
        }
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        float * g = j->y + t * j->y_stride;
        const float * u = j->a + t * j->a_stride;
        for (int64_t i = 0; i < j->n; i++) g[i] = 0.5f * g[i] * (1.0f + erff(g[i] * (float) M_SQRT1_2)) * u[i];
    }
}

/* t = shared_linear(shared block(x, E)) into ctx->cur [U, D] */
tk_status tk_zamba_shared_block(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_model * m = ctx->model;
    const tk_hparams * hp = &m->hp;
    const int32_t U = ub->n_tokens, D = hp->n_embd, A = 2 * D, F = l->n_ff;
    for (int32_t t = 0; t < U; t++) {   /* h = [x | E] */
        float * h = ctx->proj + (int64_t) t * A;
        memcpy(h, ctx->x + (int64_t) t * D, (size_t) D * sizeof(float));
        TK_CHECK(tk_weight_row(&m->tok_embd, ub->token[t], h + D));
        if (hp->embedding_scale != 1.0f)
            for (int32_t i = 0; i < D; i++) h[D + i] *= hp->embedding_scale;
    }
    tk_rms_norm_rows(ctx, ctx->proj, l->shared_attn_norm, hp->rms_eps, A, U, ctx->proj);
    TK_CHECK(z2_proj_lora(ctx, &l->wq, &l->lora_qa, &l->lora_qb, ctx->proj, U, ctx->q));
    TK_CHECK(z2_proj_lora(ctx, &l->wk, &l->lora_ka, &l->lora_kb, ctx->proj, U, ctx->k));
    TK_CHECK(z2_proj_lora(ctx, &l->wv, &l->lora_va, &l->lora_vb, ctx->proj, U, ctx->v));
    TK_CHECK(tk_attention_core(ctx, l, il, ub));
    TK_CHECK(tk_matmul(&l->wo, 0, ctx->att, U, out, &ctx->mm));
    tk_rms_norm_rows(ctx, out, l->ffn_norm, hp->rms_eps, D, U, ctx->cur);
    TK_CHECK(z2_proj_lora(ctx, &l->ffn_gate, &l->ffn_lora_a, &l->ffn_gate_lora_b, ctx->cur, U, ctx->g));
    TK_CHECK(z2_proj_lora(ctx, &l->ffn_up, &l->ffn_lora_a, &l->ffn_up_lora_b, ctx->cur, U, ctx->u));
    if (l->ffn_up_b) {   /* add_bias_linear: gate_up_proj's bias (its adapter has none) */
        tk_bias_rows(ctx, ctx->g, l->ffn_gate_b, F, U, 0);
        tk_bias_rows(ctx, ctx->u, l->ffn_up_b, F, U, 0);
    }
    tk_rows_job j = {ctx->u, NULL, ctx->g, F, F, F, 0.0f, 1};
    j.act = hp->ffn.act;   /* HF hidden_act (gelu by default) */
    tk_par_rows(ctx->pool, U, F, z2_gelu_mul_rows, &j);
    TK_CHECK(tk_matmul(&l->ffn_down, 0, ctx->g, U, out, &ctx->mm));
    if (l->ffn_down_b) tk_bias_rows(ctx, out, l->ffn_down_b, D, U, 0);   /* before shared_linear (no bias) */
    return tk_matmul(&l->shared_linear, 0, out, U, ctx->cur, &ctx->mm);
}

static tk_status z2_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t U = ub->n_tokens, D = hp->n_embd;
    TK_CHECK(tk_zamba_shared_block(ctx, l, il, ub, out));
    /* cur = rmsnorm(x + t) * attn_norm: the Mamba-2 block's input */
    tk_rows_job j = {ctx->x, NULL, ctx->cur, D, D, D, 1.0f, 1};
    tk_par_rows(ctx->pool, U, D, tk_add_rows, &j);
    tk_rms_norm_rows(ctx, ctx->cur, l->attn_norm, hp->rms_eps, D, U, ctx->cur);
    return tk_mixer_mamba2.forward(ctx, l, il, ub, out);
}

const tk_mixer_ops tk_mixer_zamba2 = {
    .name = "zamba2",
    .check = z2_check,
    .bind = z2_bind,
    .rs_pieces = z2_rs_pieces,
    .kv_dim = z2_kv_dim,
    .scratch = z2_scratch,
    .forward = z2_forward,
};
