/* ffn_dense.c: the dense SwiGLU feed-forward (TK_FFN_DENSE).
 *
 * Shapes (U tokens, D n_embd, F = n_ff of the layer):  in ctx->cur [U, D], out [U, D];
 * scratch ctx->g, ctx->u [U, F].
 * Formula: out = down(act(gate(x) + b_g) * (up(x) + b_u)) + b_d, the biases where the file has
 * ffn_{gate,up,down}.bias (HF mlp_bias: the three together), else none; act is hp.ffn.act (HF
 * hidden_act, TK_ACT_* of layer.h; 0 silu, the default), for the routed / shared experts too.
 * ref: transformers LlamaMLP / BambaMLP / JambaMLP (bias=config.mlp_bias); llama.cpp build_ffn
 * (LLM_FFN_SILU, PAR, with its optional up_b / gate_b / down_b).
 */
#include <stdio.h>

#include "layers/layer.h"

/* SwiGLU: down(act(gate(x)) * up(x)), act hp.ffn.act (HF hidden_act; 0 silu), for n tokens of x [n, D] into y [n, D]. */
tk_status tk_swiglu(tk_context * ctx, const tk_weight * gate, const tk_weight * up, const tk_weight * down,
                    int64_t mat, const float * x, int32_t n, float * y) {
    return tk_swiglu_clamped(ctx, gate, up, down, mat, x, n, 0.0f, y);
}

/* The same with GLM-5-Next's clamp when limit > 0: gate <- min(gate, limit), up <- clamp(up,
 * -limit, limit) before silu(gate) * up (transformers 5.24 modeling_glm5_next.py Glm5NextTextMLP
 * :99-105, Glm5NextTextExperts._apply_gate :138-143; llama.cpp glm5-next swiglu_clamp_*). */
tk_status tk_swiglu_clamped(tk_context * ctx, const tk_weight * gate, const tk_weight * up, const tk_weight * down,
                            int64_t mat, const float * x, int32_t n, float limit, float * y) {
    const int64_t F = up->ne[1];
    TK_CHECK(tk_matmul2(gate, up, mat, x, n, ctx->g, ctx->u, &ctx->mm));
    tk_rows_job j = {ctx->u, NULL, ctx->g, F, F, F, limit > 0.0f ? limit : 0.0f, 1};
    j.act = ctx->model->hp.ffn.act;   /* HF hidden_act (0: silu) */
    tk_par_rows(ctx->pool, n, F, tk_silu_mul_rows, &j);
    return tk_matmul(down, mat, ctx->g, n, y, &ctx->mm);
}

/* ffn_up [D, F], ffn_gate [D, F] (with_gate) and ffn_down [F, D], named prefix + "ffn_*.weight",
 * into l; F (l->n_ff) from ffn_up.  TK_ERR_INVALID names a missing or misshaped tensor. */
tk_status tk_bind_ffn(tk_model * m, const tk_table * tab, const char * prefix, int with_gate, tk_layer * l) {
    const int64_t D = m->hp.n_embd;
    char nm[128];
#define NAME(s) (snprintf(nm, sizeof nm, "%s%s", prefix, s), nm)
    const tk_tensor_desc * up = tk_table_find(tab, NAME("ffn_up.weight"));
    if (!up) return TK_FAIL(TK_ERR_INVALID, "%s: missing tensor '%s'", tab->path, nm);
    const int64_t F = up->ne[1];
    l->n_ff = (int32_t) F;
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_up.weight"), TK_SHAPE(D, F), 1, &l->ffn_up));
    if (with_gate) TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_gate.weight"), TK_SHAPE(D, F), 1, &l->ffn_gate));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_down.weight"), TK_SHAPE(F, D), 1, &l->ffn_down));
#undef NAME
    return TK_OK;
}

static tk_status dense_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    char prefix[32], nm[128];
    TK_CHECK(tk_bind_ffn(m, tab, tk_blk_name(prefix, sizeof prefix, il, ""), 1, l));
    /* mlp_bias: gate / up / down biases, the three together (absent: none) */
    const int64_t D = m->hp.n_embd, F = l->n_ff;
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    const int biased = tk_table_find(tab, NAME("ffn_up.bias")) != NULL;
    TK_CHECK(tk_bind_vec(m, tab, NAME("ffn_gate.bias"), TK_SHAPE(F), biased, &l->ffn_gate_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ffn_up.bias"), TK_SHAPE(F), biased, &l->ffn_up_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ffn_down.bias"), TK_SHAPE(D), biased, &l->ffn_down_b));
    if (!biased && (l->ffn_gate_b || l->ffn_down_b))
        return TK_FAIL(TK_ERR_INVALID, "%s: layer %d: ffn_gate.bias / ffn_down.bias without ffn_up.bias", tab->path, il);
#undef NAME
    return TK_OK;
}

static tk_status dense_forward(tk_context * ctx, const tk_layer * l, int32_t U, float * out) {
    const float limit = ctx->model->hp.ffn.swiglu_clamp_shexp;
    if (!l->ffn_up_b)   /* GLM-5-Next clamps the dense MLP with the shared experts' limit (llama-graph.cpp:1843-1860) */
        return tk_swiglu_clamped(ctx, &l->ffn_gate, &l->ffn_up, &l->ffn_down, 0, ctx->cur, U, limit, out);
    /* mlp_bias: the biases after each projection (BambaMLP's nn.Linear(..., bias=True)) */
    const int64_t F = l->n_ff, D = ctx->model->hp.n_embd;
    TK_CHECK(tk_matmul2(&l->ffn_gate, &l->ffn_up, 0, ctx->cur, U, ctx->g, ctx->u, &ctx->mm));
    tk_bias_rows(ctx, ctx->g, l->ffn_gate_b, F, U, 0);
    tk_bias_rows(ctx, ctx->u, l->ffn_up_b, F, U, 0);
    tk_rows_job j = {ctx->u, NULL, ctx->g, F, F, F, limit > 0.0f ? limit : 0.0f, 1};
    j.act = ctx->model->hp.ffn.act;
    tk_par_rows(ctx->pool, U, F, tk_silu_mul_rows, &j);
    TK_CHECK(tk_matmul(&l->ffn_down, 0, ctx->g, U, out, &ctx->mm));
    tk_bias_rows(ctx, out, l->ffn_down_b, D, U, 0);
    return TK_OK;
}

const tk_ffn_ops tk_ffn_dense = {
    .name = "dense",
    .bind = dense_bind,
    .forward = dense_forward,
};
