/* ffn_relu2.c: the ReLU² feed-forward without a gate (TK_FFN_RELU2: Nemotron-H MLP layers),
 * and the same function for Nemotron-H's routed and shared experts (ffn_moe.c, moe_relu2).
 *
 * Shapes (U tokens, D n_embd, F = n_ff of the layer):  in ctx->cur [U, D], out [U, D];
 * ffn_up [D, F] (ggml order), ffn_down [F, D]; scratch ctx->u [U, F].
 * Formula: out = down(act(up(x) + b_u)) + b_d, act hp.ffn.act (HF mlp_hidden_act, TK_ACT_* of layer.h;
 * default relu2: relu(x)^2), for the experts and shared expert too; the biases where the MLP
 * layer's file has ffn_up.bias / ffn_down.bias, HF mlp_bias; the experts have none.
 * ref: transformers modeling_nemotron_h.py NemotronHMLP, activations.py ReLUSquaredActivation;
 *      llama.cpp build_ffn (LLM_FFN_RELU_SQR, LLM_FFN_PAR with no gate).
 */
#include "layers/layer.h"

/* y[t] = act(y[t]) over rows of width n (j->act; relu2 max(y, 0)^2 inline, as before) */
static void relu2_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    (void) thread;
    if (j->act != TK_ACT_RELU2) {
        for (int64_t t = t0; t < t1; t++) {
            float * y = j->y + t * j->y_stride;
            for (int64_t i = 0; i < j->n; i++) y[i] = tk_act(j->act, y[i]);
        }
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        float * y = j->y + t * j->y_stride;
        for (int64_t i = 0; i < j->n; i++) {
            const float v = y[i] > 0.0f ? y[i] : 0.0f;
            y[i] = v * v;
        }
    }
}

/* down(act(up(x) + bu)) + bd (act hp.ffn.act, relu2 by default); bu [F] / bd [D] may be NULL */
static tk_status relu2_ffn_biased(tk_context * ctx, const tk_weight * up, const tk_weight * down, int64_t mat,
                                  const float * x, int32_t n, const float * bu, const float * bd, float * y) {
    const int64_t F = up->ne[1];
    TK_CHECK(tk_matmul(up, mat, x, n, ctx->u, &ctx->mm));
    if (bu) tk_bias_rows(ctx, ctx->u, bu, F, n, 0);
    tk_rows_job j = {NULL, NULL, ctx->u, F, F, F, 0.0f, 1};
    j.act = ctx->model->hp.ffn.act;   /* HF mlp_hidden_act */
    tk_par_rows(ctx->pool, n, F, relu2_rows, &j);
    TK_CHECK(tk_matmul(down, mat, ctx->u, n, y, &ctx->mm));
    if (bd) tk_bias_rows(ctx, y, bd, down->ne[1], n, 0);
    return TK_OK;
}

tk_status tk_relu2_ffn(tk_context * ctx, const tk_weight * up, const tk_weight * down, int64_t mat,
                       const float * x, int32_t n, float * y) {
    return relu2_ffn_biased(ctx, up, down, mat, x, n, NULL, NULL, y);
}

static tk_status relu2_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    char prefix[32], nm[128];
    TK_CHECK(tk_bind_ffn(m, tab, tk_blk_name(prefix, sizeof prefix, il, ""), 0, l));
    /* mlp_bias (Nemotron-H): ffn_up.bias [F] and ffn_down.bias [D], llama.cpp's names, the two together */
    const int biased = tk_table_find(tab, tk_blk_name(nm, sizeof nm, il, "ffn_up.bias")) != NULL;
    TK_CHECK(tk_bind_vec(m, tab, tk_blk_name(nm, sizeof nm, il, "ffn_up.bias"), TK_SHAPE(l->n_ff), biased, &l->ffn_up_b));
    TK_CHECK(tk_bind_vec(m, tab, tk_blk_name(nm, sizeof nm, il, "ffn_down.bias"), TK_SHAPE(m->hp.n_embd), biased,
                         &l->ffn_down_b));
    return TK_OK;
}

static tk_status relu2_forward(tk_context * ctx, const tk_layer * l, int32_t U, float * out) {
    return relu2_ffn_biased(ctx, &l->ffn_up, &l->ffn_down, 0, ctx->cur, U, l->ffn_up_b, l->ffn_down_b, out);
}

const tk_ffn_ops tk_ffn_relu2 = {
    .name = "relu2",
    .bind = relu2_bind,
    .forward = relu2_forward,
};
