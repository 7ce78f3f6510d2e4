/* residual_hc.c: qwen4exp's hyper-connections, the block skeleton of a model whose residual is
 * hc = hc_count streams of D (hp.hc_count > 1; forward.c hands the ubatch here).
 *
 * Shapes (U ubatch tokens, D n_embd, hcD = hc D, stream c at [c D, (c + 1) D) of a row,
 * R = hc_lowrank, from the tensors):
 *   per block and per sub-block (attn, ffn): hc_{attn,ffn}_norm [hcD] (HF's (1 + w) folded in),
 *     hc_*_down [hcD, R], hc_*_up [R, hcD], hc_*_inject [hcD, hc];
 *   the final mixer: output_hc_norm [hcD], output_hc_down [hcD, R], output_hc_up [R, hcD]
 *   (no output_norm, no attn_norm, no post_attention_norm)
 * Formula (HF Qwen4ExpTextGatedResidual / Qwen4ExpTextDecoderLayer; spec gdn-family.md §2.5.1):
 *   X_c = embed(token) for every stream c
 *   mix(X):  Xn_c = rmsnorm(X_c) * norm_c  (per stream over D, rms_eps)
 *            l = silu((down Xn) / hc);  G = sigmoid(up l)  [hcD]
 *            x_in = (1/hc) sum_c G_c * Xn_c  [D]       (the block's input)
 *            inj = 2 sigmoid((inject Xn) / hc)  [hc]
 *   combine: X_c += inj_c * block(x_in)
 *   layer: PLE layer: X += PLE(X) (ple.c); then mix/combine the mixer, mix/combine the FFN
 *   logits = output(mix(X; output_hc_*))
 * ref: transformers 5.24 models/qwen4_exp/modeling_qwen4_exp.py; llama.cpp 0c1e570
 *      qwen4exp.cpp build_hc_mix / build_hc_combine.
 */
#include <math.h>
#include <string.h>

#include "layers/layer.h"

static tk_status hc_bind_set(tk_model * m, const tk_table * tab, const char * norm, const char * down, const char * up,
                             const char * inject, float ** w_norm, tk_weight * w_down, tk_weight * w_up, tk_weight * w_inj) {
    const tk_hparams * hp = &m->hp;
    const int64_t HD = (int64_t) hp->hc_count * hp->n_embd;
    const tk_tensor_desc * d = tk_table_find(tab, down);
    if (!d) return TK_FAIL(TK_ERR_INVALID, "%s: missing tensor '%s'", tab->path, down);
    if (d->n_dims != 2 || d->ne[0] != HD)
        return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' has ne[0] = %lld, expected hc_count x n_embd = %lld (hyper-connection width)",
                       tab->path, down, (long long) d->ne[0], (long long) HD);
    const int64_t R = d->ne[1];
    if (R <= 0 || R > 65536) return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s': low rank %lld out of range", tab->path, down, (long long) R);
    TK_CHECK(tk_bind_vec(m, tab, norm, TK_SHAPE(HD), 1, w_norm));
    TK_CHECK(tk_bind_weight(m, tab, down, TK_SHAPE(HD, R), 1, w_down));
    TK_CHECK(tk_bind_weight(m, tab, up, TK_SHAPE(R, HD), 1, w_up));
    if (inject) TK_CHECK(tk_bind_weight(m, tab, inject, TK_SHAPE(HD, hp->hc_count), 1, w_inj));
    if (R > m->hc_rank) m->hc_rank = (int32_t) R;
    return TK_OK;
}

tk_status tk_hc_bind_layer(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    char a[8][128];
    const char * sfx[8] = {"hc_attn_norm.weight", "hc_attn_down.weight", "hc_attn_up.weight", "hc_attn_inject.weight",
                           "hc_ffn_norm.weight", "hc_ffn_down.weight", "hc_ffn_up.weight", "hc_ffn_inject.weight"};
    for (int i = 0; i < 8; i++) tk_blk_name(a[i], sizeof a[i], il, sfx[i]);
    TK_CHECK(hc_bind_set(m, tab, a[0], a[1], a[2], a[3], &l->hc_attn_norm, &l->hc_attn_down, &l->hc_attn_up, &l->hc_attn_inject));
    return hc_bind_set(m, tab, a[4], a[5], a[6], a[7], &l->hc_ffn_norm, &l->hc_ffn_down, &l->hc_ffn_up, &l->hc_ffn_inject);
}

tk_status tk_hc_bind_output(tk_model * m, const tk_table * tab) {
    return hc_bind_set(m, tab, "output_hc_norm.weight", "output_hc_down.weight", "output_hc_up.weight", NULL,
                       &m->output_hc_norm, &m->output_hc_down, &m->output_hc_up, NULL);
}

/* ctx->hn = the normed streams of ctx->hx; xin [U, D] the mixed block input; with inject,
 * ctx->hi [U, hc] the inject weights */
static tk_status hc_mix(tk_context * ctx, int32_t U, const float * norm, const tk_weight * down, const tk_weight * up,
                        const tk_weight * inject, float * xin) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t hc = hp->hc_count, D = hp->n_embd, HD = hc * D, R = (int32_t) down->ne[1];
    const float fhc = (float) hc;   /* HF divides (and its mean divides the sum) by hc */
    for (int32_t t = 0; t < U; t++)
        for (int32_t c = 0; c < hc; c++) {
            const size_t o = (size_t) t * HD + (size_t) c * D;
            tk_rms_norm(ctx->hx + o, norm + (size_t) c * D, hp->rms_eps, D, ctx->hn + o);
        }
    TK_CHECK(tk_matmul(down, 0, ctx->hn, U, ctx->hl, &ctx->mm));
    for (size_t i = 0; i < (size_t) U * R; i++) ctx->hl[i] = tk_silu(ctx->hl[i] / fhc);
    TK_CHECK(tk_matmul(up, 0, ctx->hl, U, ctx->hg, &ctx->mm));
    for (int32_t t = 0; t < U; t++) {
        const float * g = ctx->hg + (size_t) t * HD, * xn = ctx->hn + (size_t) t * HD;
        float * o = xin + (size_t) t * D;
        for (int32_t i = 0; i < D; i++) {
            float sum = 0.0f;
            for (int32_t c = 0; c < hc; c++) sum += tk_sigmoid(g[(size_t) c * D + i]) * xn[(size_t) c * D + i];
            o[i] = sum / fhc;
        }
    }
    if (inject) {
        TK_CHECK(tk_matmul(inject, 0, ctx->hn, U, ctx->hi, &ctx->mm));
        for (size_t i = 0; i < (size_t) U * hc; i++) ctx->hi[i] = 2.0f * tk_sigmoid(ctx->hi[i] / fhc);
    }
    return TK_OK;
}

/* X_c += inj_c * out */
static void hc_combine(tk_context * ctx, int32_t U, const float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t hc = hp->hc_count, D = hp->n_embd, HD = hc * D;
    for (int32_t t = 0; t < U; t++)
        for (int32_t c = 0; c < hc; c++) {
            float * x = ctx->hx + (size_t) t * HD + (size_t) c * D;
            const float w = ctx->hi[(size_t) t * hc + c], * o = out + (size_t) t * D;
            for (int32_t i = 0; i < D; i++) x[i] += w * o[i];
        }
}

tk_status tk_forward_ubatch_hc(tk_context * ctx, const tk_ubatch * ub, float * logits_out) {
    const tk_model * m = ctx->model;
    const tk_hparams * hp = &m->hp;
    const int32_t D = hp->n_embd, U = ub->n_tokens, hc = hp->hc_count, HD = hc * D;

    tk_model_prefetch_rows(m, ub->token, U);
    for (int32_t t = 0; t < U; t++) {
        float * xt = ctx->hx + (size_t) t * HD;
        TK_CHECK(tk_weight_row(&m->tok_embd, ub->token[t], xt));
        for (int32_t c = 1; c < hc; c++) memcpy(xt + (size_t) c * D, xt, (size_t) D * sizeof(float));
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const tk_layer * l = &m->layers[il];
        if (__atomic_load_n(&ctx->abort_requested, __ATOMIC_RELAXED)) return TK_FAIL(TK_ERR_STATE, "decode aborted");
        if (m->ple_index && m->ple_index[il] >= 0) {
            tk_rs_piece pc[TK_RS_MAX_PIECES];
            const tk_mixer_ops * ops = tk_mixer_ops_of(l->kind);
            const int32_t first = ops->rs_pieces(m, il, pc) - tk_ple_rs_pieces(m, il, pc);
            TK_CHECK(tk_ple_forward(ctx, l, il, ub, first));
        }
        TK_CHECK(hc_mix(ctx, U, l->hc_attn_norm, &l->hc_attn_down, &l->hc_attn_up, &l->hc_attn_inject, ctx->cur));
        TK_CHECK(tk_mixer_ops_of(l->kind)->forward(ctx, l, il, ub, ctx->out));
        hc_combine(ctx, U, ctx->out);
        const tk_ffn_ops * ffn = tk_ffn_ops_of(l->ffn_kind);
        if (!ffn) continue;
        TK_CHECK(hc_mix(ctx, U, l->hc_ffn_norm, &l->hc_ffn_down, &l->hc_ffn_up, &l->hc_ffn_inject, ctx->cur));
        TK_CHECK(ffn->forward(ctx, l, U, ctx->out));
        hc_combine(ctx, U, ctx->out);
    }
    /* the final mixer for every row (cheap next to the layers), logits for the rows that ask */
    TK_CHECK(hc_mix(ctx, U, m->output_hc_norm, &m->output_hc_down, &m->output_hc_up, NULL, ctx->cur));
    for (int32_t t = 0; t < U; t++) {
        if (ub->out_row[t] < 0) continue;
        float * lo = logits_out + (int64_t) ub->out_row[t] * hp->n_vocab;
        TK_CHECK(tk_matmul(&m->output, 0, ctx->cur + (size_t) t * D, 1, lo, &ctx->mm));
    }
    return TK_OK;
}
