/* ffn_moe.c: the mixture-of-experts feed-forward (TK_FFN_MOE: jamba, Granite 4.0-H MoE,
 * qwen3next, qwen35moe, lfm2moe).
 *
 * Shapes (U tokens, D n_embd, E n_expert, k n_expert_used, Fe expert width, Fs shared
 * expert width):  in ctx->cur [U, D], out [U, D]; router logits in ctx->vec [E];
 * experts ffn_{gate,up,down}_exps [D, Fe, E] / [Fe, D, E]; shared expert [D, Fs] / [Fs, D];
 * shared expert gate ffn_gate_inp_shexp [D] (ggml [D, 1] or [D]), optional; expert
 * selection bias exp_probs_b [E] (moe_sigmoid only), optional.
 */
#include <float.h>
#include <math.h>

#include "layer.h"

/* MoE: router logits r = W_inp x [E];
 *   moe_softmax_topk (Jamba):  p = softmax(r); top-k of p; weights = p[k] (not renormalised)
 *     + moe_renorm (Qwen):     weights = p[k] / sum over the k of p
 *   moe_sigmoid (LFM2-MoE):    s = sigmoid(r); top-k of s + exp_probs_b (bias for the choice
 *                              only); weights = s[k], / (sum over the k + 1e-6) with
 *                              moe_weights_norm, then * moe_weights_scale
 *   else (Granite):            top-k of r; weights = softmax over the k logits
 * y = sum_k w_k * SwiGLU_k(x)  (+ shared expert SwiGLU(x) when present, times
 *     sigmoid(ffn_gate_inp_shexp . x) when that gate is present).
 * ref: transformers JambaSparseMoeBlock, GraniteMoeHybridTopKGating / GraniteMoeHybridMoE,
 *      Qwen3NextSparseMoeBlock (spec gdn-family.md §2.4), Lfm2MoeTopKRouter (its 1e-6 in
 *      the renormalisation; llama.cpp clamps the sum at 2^-14 instead); llama.cpp build_moe_ffn. */
static tk_status moe_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    const int64_t E = hp->n_expert;
    const tk_tensor_desc * up = tk_table_find(tab, NAME("ffn_up_exps.weight"));
    if (!up) return TK_FAIL(TK_ERR_INVALID, "%s: missing tensor '%s'", tab->path, nm);
    const int64_t F = up->ne[1];
    l->n_ff_exp = (int32_t) F;
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_gate_inp.weight"), TK_SHAPE(D, E), 1, &l->ffn_gate_inp));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_up_exps.weight"), TK_SHAPE(D, F, E), 1, &l->ffn_up_exps));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_gate_exps.weight"), TK_SHAPE(D, F, E), 1, &l->ffn_gate_exps));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_down_exps.weight"), TK_SHAPE(F, D, E), 1, &l->ffn_down_exps));
    const tk_tensor_desc * sh = tk_table_find(tab, NAME("ffn_up_shexp.weight"));
    if (sh) {
        const int64_t Fs = sh->ne[1];
        l->n_ff_shexp = (int32_t) Fs;
        TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_up_shexp.weight"), TK_SHAPE(D, Fs), 1, &l->ffn_up_shexp));
        TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_gate_shexp.weight"), TK_SHAPE(D, Fs), 1, &l->ffn_gate_shexp));
        TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_down_shexp.weight"), TK_SHAPE(Fs, D), 1, &l->ffn_down_shexp));
        TK_CHECK(tk_bind_vec(m, tab, NAME("ffn_gate_inp_shexp.weight"), TK_SHAPE(D), 0, &l->ffn_gate_inp_shexp));
    }
    TK_CHECK(tk_bind_vec(m, tab, NAME("exp_probs_b.bias"), TK_SHAPE(E), 0, &l->ffn_exp_probs_b));
    if (l->ffn_exp_probs_b && !hp->moe_sigmoid)
        return TK_FAIL(TK_ERR_UNSUPPORTED, "%s: tensor '%s': an expert selection bias needs sigmoid routing", tab->path, nm);
#undef NAME
    return TK_OK;
}


/* The k experts of one token and their weights (the routing rules above) from the router
 * logits r [E] (overwritten with the scores). */
static void moe_route(const tk_hparams * hp, const tk_layer * l, float * r, int32_t * sel, float * w) {
    const int32_t E = hp->n_expert, k = hp->n_expert_used;
    const float * bias = hp->moe_sigmoid ? l->ffn_exp_probs_b : NULL;
    if (hp->moe_softmax_topk) {
        float mx = -FLT_MAX;
        for (int32_t e = 0; e < E; e++) mx = r[e] > mx ? r[e] : mx;
        double sum = 0.0;
        for (int32_t e = 0; e < E; e++) { r[e] = expf(r[e] - mx); sum += r[e]; }
        for (int32_t e = 0; e < E; e++) r[e] = (float) (r[e] / sum);
    } else if (hp->moe_sigmoid) {
        for (int32_t e = 0; e < E; e++) r[e] = 1.0f / (1.0f + expf(-r[e]));
    }
    /* top-k, ties to the lower index (torch.topk order for distinct values) */
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++) {
            int taken = 0;
            for (int32_t q = 0; q < j; q++) taken |= sel[q] == e;
            if (taken) continue;
            if (best < 0 || (bias ? r[e] + bias[e] > r[best] + bias[best] : r[e] > r[best])) best = e;
        }
        sel[j] = best;
        w[j] = r[best];
    }
    if (hp->moe_softmax_topk && hp->moe_renorm) {
        double sum = 0.0;
        for (int32_t j = 0; j < k; j++) sum += w[j];
        for (int32_t j = 0; j < k; j++) w[j] = (float) (w[j] / sum);
    } else if (hp->moe_sigmoid) {
        float sum = 0.0f;
        for (int32_t j = 0; j < k; j++) sum += w[j];
        for (int32_t j = 0; j < k; j++) {
            if (hp->moe_weights_norm) w[j] /= sum + 1e-6f;
            w[j] *= hp->moe_weights_scale;
        }
    } else if (!hp->moe_softmax_topk) {
        const float mx = w[0];
        double sum = 0.0;
        for (int32_t j = 0; j < k; j++) { w[j] = expf(w[j] - mx); sum += w[j]; }
        for (int32_t j = 0; j < k; j++) w[j] = (float) (w[j] / sum);
    }
}

static tk_status moe_forward(tk_context * ctx, const tk_layer * l, int32_t U, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t D = hp->n_embd, k = hp->n_expert_used;
    float * r = ctx->vec;      /* [E] */
    int32_t sel[64];
    float w[64];
    if (k > 64) return TK_FAIL(TK_ERR_UNSUPPORTED, "n_expert_used = %d > 64", k);
    for (int32_t t = 0; t < U; t++) {
        const float * xt = ctx->cur + (int64_t) t * D;
        float * ot = out + (int64_t) t * D;
        TK_CHECK(tk_matmul(&l->ffn_gate_inp, 0, xt, 1, r, &ctx->mm));
        moe_route(hp, l, r, sel, w);
        for (int32_t i = 0; i < D; i++) ot[i] = 0.0f;
        for (int32_t j = 0; j < k; j++) {
            TK_CHECK(tk_swiglu(ctx, &l->ffn_gate_exps, &l->ffn_up_exps, &l->ffn_down_exps, sel[j], xt, 1, ctx->f1));
            for (int32_t i = 0; i < D; i++) ot[i] += w[j] * ctx->f1[i];
        }
        if (l->n_ff_shexp) {
            TK_CHECK(tk_swiglu(ctx, &l->ffn_gate_shexp, &l->ffn_up_shexp, &l->ffn_down_shexp, 0, xt, 1, ctx->f1));
            if (l->ffn_gate_inp_shexp) {
                double d = 0.0;
                for (int32_t i = 0; i < D; i++) d += (double) l->ffn_gate_inp_shexp[i] * xt[i];
                const float gs = 1.0f / (1.0f + expf(-(float) d));
                for (int32_t i = 0; i < D; i++) ctx->f1[i] *= gs;
            }
            for (int32_t i = 0; i < D; i++) ot[i] += ctx->f1[i];
        }
    }
    return TK_OK;
}

const tk_ffn_ops tk_ffn_moe = {"moe", moe_bind, moe_forward};
