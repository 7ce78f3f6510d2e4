/* forward.c: one micro-batch through the model: the block skeleton and the layer-kind tables.
 *
 *   x = embed(tokens) * embedding_scale
 *   for each layer:  x += rs * mixer(rmsnorm(x));  x += rs * ffn(rmsnorm(x))   (ffn may be none)
 *   logits = output(rmsnorm(x)) / logit_scale          (only for tokens that ask)
 *
 * rs, embedding_scale, logit_scale: Granite's multipliers (1 elsewhere).  The mixer and FFN
 * of each layer come from the model (tk_layer.kind / ffn_kind) through the tables below;
 * each kind is a file of its own (layer.h lists them).  The block recipe (hp.block: model.c
 * binds the norms it names) decides the rest, never the family:
 * - where the norms sit (block.norm): a pre-norm is applied when the layer has one (attn_norm,
 *   ffn_norm; a block with no mixer, TK_LAYER_NONE, runs its FFN under attn_norm), a post-norm
 *   on the branch output when it has one (mixer_post_norm, ffn_post_norm: TK_NORM_POST's
 *   attention blocks, which have no pre-norms: x += rmsnorm(mixer(x)) * post_attention_norm;
 *   TK_NORM_SANDWICH's blocks, which have both);
 * - how a branch joins (block.residual): x += residual_scale * branch, or (TK_RESIDUAL_NORMED,
 *   MiniMax) x = alpha * rmsnorm(x) + beta * branch, the factors by the branch's kind (tk_layer's
 *   res_alpha / res_beta for the mixer, hp.res's FFN ones);
 * - the logits: divided by logit_scale, then soft-capped when logit_softcap > 0:
 *   logits = cap tanh(logits / cap) (final_logit_softcapping; RecurrentGemma).
 * A model with hyper-connections (tk_hc_on: qwen4exp's, GLM-5-Next's mHC) runs residual_hc.c's skeleton instead.
 * Glossary: U tokens in the ubatch (n_seqs rows x n_seq_tokens), D n_embd.
 * refs: transformers modeling_mamba.py, modeling_mamba2.py, modeling_bamba.py,
 *       modeling_granitemoehybrid.py, modeling_jamba.py, modeling_qwen3_next.py,
 *       modeling_qwen3_5.py, modeling_nemotron_h.py, modeling_falcon_h1.py, modeling_lfm2.py,
 *       modeling_lfm2_moe.py, modeling_olmo_hybrid.py (post-norm blocks); karpathy llama2.c forward().
 */
#include <math.h>
#include <string.h>

#include "layers/layer.h"

/* ==== the layer-kind tables ========================================================= */

/* sized by the enums' counts: a kind without a row here is NULL, "unknown" to model.c's check */
static const tk_mixer_ops * const MIXERS[TK_LAYER_KIND_COUNT] = {
    [TK_LAYER_MAMBA1] = &tk_mixer_mamba1,
    [TK_LAYER_MAMBA2] = &tk_mixer_mamba2,
    [TK_LAYER_ATTENTION] = &tk_mixer_attention,
    [TK_LAYER_GDN] = &tk_mixer_gdn,
    [TK_LAYER_SHORTCONV] = &tk_mixer_shortconv,
    [TK_LAYER_NONE] = &tk_mixer_none,
    [TK_LAYER_PARALLEL] = &tk_mixer_parallel,
    [TK_LAYER_ZAMBA2_SHARED] = &tk_mixer_zamba2,
    [TK_LAYER_QSA] = &tk_mixer_qsa,
    [TK_LAYER_ZAMBA_SHARED] = &tk_mixer_zamba,
    [TK_LAYER_LIGHTNING] = &tk_mixer_lightning,
    [TK_LAYER_RGLRU] = &tk_mixer_rglru,
    [TK_LAYER_KDA] = &tk_mixer_kda,
    [TK_LAYER_MLA] = &tk_mixer_mla,
};

static const tk_ffn_ops * const FFNS[TK_FFN_KIND_COUNT] = {
    [TK_FFN_NONE] = NULL,
    [TK_FFN_DENSE] = &tk_ffn_dense,
    [TK_FFN_MOE] = &tk_ffn_moe,
    [TK_FFN_RELU2] = &tk_ffn_relu2,
    [TK_FFN_GEGLU] = &tk_ffn_geglu,
};

const tk_mixer_ops * tk_mixer_ops_of(int32_t kind) {
    return kind >= 0 && kind < TK_LAYER_KIND_COUNT ? MIXERS[kind] : NULL;
}

const tk_ffn_ops * tk_ffn_ops_of(int32_t kind) {
    return kind >= 0 && kind < TK_FFN_KIND_COUNT ? FFNS[kind] : NULL;
}

/* ==== the whole ubatch =============================================================== */

/* cur = rmsnorm(x) * w, or x itself (a post-norm block: w NULL) */
static void block_input(tk_context * ctx, const float * w, int32_t D, int32_t U) {
    if (w) tk_rms_norm_rows(ctx, ctx->x, w, ctx->model->hp.rms_eps, D, U, ctx->cur);
    else memcpy(ctx->cur, ctx->x, (size_t) U * (size_t) D * sizeof(float));
    if (w && ctx->model->hp.block.residual == TK_RESIDUAL_NORMED) memcpy(ctx->x, ctx->cur, (size_t) U * (size_t) D * sizeof(float));
}

/* x += out * residual_scale; TK_RESIDUAL_NORMED: x = alpha * x + beta * out, x holding the
 * branch's normed input (block_input copied it there) */
static void residual_add(tk_context * ctx, int32_t D, int32_t U, float alpha, float beta) {
    if (ctx->model->hp.block.residual != TK_RESIDUAL_NORMED) {
        tk_rows_job j = {ctx->out, NULL, ctx->x, D, D, D, ctx->model->hp.residual_scale, 1};
        tk_par_rows(ctx->pool, U, D, tk_add_rows, &j);
        return;
    }
    for (int64_t i = 0; i < (int64_t) U * D; i++) ctx->x[i] = alpha * ctx->x[i] + beta * ctx->out[i];
}

tk_status tk_forward_ubatch(tk_context * ctx, const tk_ubatch * ub, float * logits_out) {
    const tk_model * m = ctx->model;
    const tk_hparams * hp = &m->hp;
    const int32_t D = hp->n_embd, U = ub->n_tokens;
    if (tk_hc_on(hp)) return tk_forward_ubatch_hc(ctx, ub, logits_out);   /* qwen4exp, GLM-5-Next: residual_hc.c */

    tk_model_prefetch_rows(m, ub->token, U);
    for (int32_t t = 0; t < U; t++) {
        float * xt = ctx->x + (int64_t) t * D;
        TK_CHECK(tk_weight_row(&m->tok_embd, ub->token[t], xt));
        if (hp->embedding_scale != 1.0f)
            for (int32_t i = 0; i < D; i++) xt[i] *= hp->embedding_scale;
    }
    if (m->nextn_eh_proj.data) TK_CHECK(tk_mtp_input(ctx, ub));   /* an MTP block: x = eh_proj [enorm(e); hnorm(h)] */
    for (int il = 0; il < hp->n_layer; il++) {
        const tk_layer * l = &m->layers[il];
        if (__atomic_load_n(&ctx->abort_requested, __ATOMIC_RELAXED)) return TK_FAIL(TK_ERR_STATE, "decode aborted");
        const tk_mixer_ops * mixer = tk_mixer_ops_of(l->kind);
        if (mixer->forward) {      /* TK_LAYER_NONE has none: the block is its FFN alone */
            block_input(ctx, l->attn_norm, D, U);
            TK_CHECK(mixer->forward(ctx, l, il, ub, ctx->out));
            if (l->mixer_post_norm) tk_rms_norm_rows(ctx, ctx->out, l->mixer_post_norm, hp->rms_eps, D, U, ctx->out);
            residual_add(ctx, D, U, l->res_alpha, l->res_beta);
        }
        const tk_ffn_ops * ffn = tk_ffn_ops_of(l->ffn_kind);
        if (!ffn) continue;
        block_input(ctx, l->ffn_norm, D, U);
        TK_CHECK(ffn->forward(ctx, l, U, ctx->out));
        if (l->ffn_post_norm) tk_rms_norm_rows(ctx, ctx->out, l->ffn_post_norm, hp->rms_eps, D, U, ctx->out);
        residual_add(ctx, D, U, hp->res.alpha_ffn, hp->res.beta_ffn);
    }
    /* logits only for the tokens that asked for them; the normed state of every token when asked (MTP) */
    for (int32_t t = 0; t < U; t++) {
        if (ub->out_row[t] < 0 && !ctx->hidden_out) continue;
        tk_rms_norm(ctx->x + (int64_t) t * D, m->output_norm, hp->rms_eps, D, ctx->cur);
        if (ctx->hidden_out) memcpy(ctx->hidden_out + (int64_t) ub->bidx[t] * D, ctx->cur, (size_t) D * sizeof(float));
        if (ub->out_row[t] < 0) continue;
        float * lo = logits_out + (int64_t) ub->out_row[t] * hp->n_vocab;
        TK_CHECK(tk_matmul(&m->output, 0, ctx->cur, 1, lo, &ctx->mm));
        if (hp->logit_scale != 1.0f)
            for (int32_t i = 0; i < hp->n_vocab; i++) lo[i] /= hp->logit_scale;
        if (hp->logit_softcap > 0.0f) {      /* RecurrentGemma: cap tanh(logits / cap), modeling_recurrent_gemma.py:744-746 */
            const float cap = hp->logit_softcap;
            for (int32_t i = 0; i < hp->n_vocab; i++) lo[i] = cap * tanhf(lo[i] / cap);
        }
    }
    return TK_OK;
}
