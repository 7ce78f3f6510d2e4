/* ffn_geglu.c: the GeGLU feed-forward with biases (TK_FFN_GEGLU: RecurrentGemma's MLP).
 *
 * Shapes (U tokens, D n_embd, F = n_ff of the layer: intermediate_size / 2, modeling_recurrent_gemma.py:480):
 *   in ctx->cur [U, D], out [U, D]; ffn_gate, ffn_up [D, F] + .bias [F], ffn_down [F, D] + .bias [D];
 *   scratch ctx->g, ctx->u [U, F].
 * Formula: out = down(act(gate x + b_g) * (up x + b_u)) + b_d, act hp.ffn.act (HF hidden_activation,
 * TK_ACT_* of layer.h; default gelu_tanh: gelu_pytorch_tanh).
 * ref: transformers 5.24 modeling_recurrent_gemma.py RecurrentGemmaMlp (modeling_recurrent_gemma.py:476-492);
 *      docs/specs/more-hybrids.md §6.4.
 */
#include "layers/layer.h"

static tk_status geglu_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    char prefix[32], nm[128];
    TK_CHECK(tk_bind_ffn(m, tab, tk_blk_name(prefix, sizeof prefix, il, ""), 1, l));
    const int64_t F = l->n_ff, D = m->hp.n_embd;
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    TK_CHECK(tk_bind_vec(m, tab, NAME("ffn_gate.bias"), TK_SHAPE(F), 1, &l->ffn_gate_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ffn_up.bias"), TK_SHAPE(F), 1, &l->ffn_up_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ffn_down.bias"), TK_SHAPE(D), 1, &l->ffn_down_b));
#undef NAME
    return TK_OK;
}

typedef struct { const tk_layer * l; float * g; const float * u; int64_t F; int32_t act; } geglu_job;

/* g[t] = act(g[t] + b_g) * (u[t] + b_u) over rows [t0, t1) (gelu_tanh: tk_gelu_tanh inline, as before) */
static void geglu_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const geglu_job * j = arg;
    const float * bg = j->l->ffn_gate_b, * bu = j->l->ffn_up_b;
    (void) thread;
    if (j->act == TK_ACT_GELU_TANH) {
        for (int64_t t = t0; t < t1; t++) {
            float * g = j->g + t * j->F;
            const float * u = j->u + t * j->F;
            for (int64_t i = 0; i < j->F; i++) g[i] = tk_gelu_tanh(g[i] + bg[i]) * (u[i] + bu[i]);
        }
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        float * g = j->g + t * j->F;
        const float * u = j->u + t * j->F;
        for (int64_t i = 0; i < j->F; i++) g[i] = tk_act(j->act, g[i] + bg[i]) * (u[i] + bu[i]);
    }
}

static tk_status geglu_forward(tk_context * ctx, const tk_layer * l, int32_t U, float * out) {
    const int64_t F = l->n_ff;
    TK_CHECK(tk_matmul2(&l->ffn_gate, &l->ffn_up, 0, ctx->cur, U, ctx->g, ctx->u, &ctx->mm));
    geglu_job j = {l, ctx->g, ctx->u, F, ctx->model->hp.ffn.act};
    tk_par_rows(ctx->pool, U, F, geglu_rows, &j);
    TK_CHECK(tk_matmul(&l->ffn_down, 0, ctx->g, U, out, &ctx->mm));
    tk_bias_rows(ctx, out, l->ffn_down_b, ctx->model->hp.n_embd, U, 0);
    return TK_OK;
}

const tk_ffn_ops tk_ffn_geglu = {
    .name = "geglu",
    .bind = geglu_bind,
    .forward = geglu_forward,
};
