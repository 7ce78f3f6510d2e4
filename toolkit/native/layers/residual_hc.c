/* residual_hc.c: hyper-connections, the block skeleton of a model whose residual is
 * hc = hc_count streams of D (hp.hc.count > 1; forward.c hands the ubatch here), in two forms:
 * qwen4exp's low-rank mix (below) and GLM-5-Next's manifold-constrained hyper-connections (mHC,
 * hp.hc.sinkhorn_iters > 0; further down, "mHC").  Both start every stream as the token embedding
 * and wrap the mixer and the FFN of each layer in a mix before and a combine after.
 *
 * Shapes (U ubatch tokens, D n_embd, hcD = hc D, stream c at [c D, (c + 1) D) of a row,
 * R = hc_lowrank, from the tensors):
 *   per block and per sub-block (attn, ffn): hc_{attn,ffn}_norm [hcD] (HF's (1 + w) folded in),
 *     hc_*_down [hcD, R], hc_*_up [R, hcD], hc_*_inject [hcD, hc];
 *   the final mixer: output_hc_norm [hcD], output_hc_down [hcD, R], output_hc_up [R, hcD]
 *   (no output_norm, no attn_norm, no post_attention_norm)
 * Formula (HF Qwen4ExpTextGatedResidual / Qwen4ExpTextDecoderLayer; docs/specs/gdn-family.md §2.5.1):
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layer.h"

static tk_status mhc_forward(tk_context * ctx, const tk_ubatch * ub, float * logits_out);

/* every stream of every token = its embedding row (both forms) */
static tk_status hc_embed(tk_context * ctx, const tk_ubatch * ub) {
    const tk_model * m = ctx->model;
    const int32_t D = m->hp.n_embd, U = ub->n_tokens, hc = m->hp.hc.count, HD = hc * D;
    tk_model_prefetch_rows(m, ub->token, U);
    for (int32_t t = 0; t < U; t++) {
        float * xt = ctx->hx + (size_t) t * HD;
        TK_CHECK(tk_weight_row(&m->tok_embd, ub->token[t], xt));
        for (int32_t c = 1; c < hc; c++) memcpy(xt + (size_t) c * D, xt, (size_t) D * sizeof(float));
    }
    return TK_OK;
}

static tk_status hc_bind_set(tk_model * m, const tk_table * tab, const char * norm, const char * down, const char * up,
                             const char * inject, float ** w_norm, tk_weight * w_down, tk_weight * w_up, tk_weight * w_inj) {
    const tk_hparams * hp = &m->hp;
    const int64_t HD = (int64_t) hp->hc.count * hp->n_embd;
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
    if (inject) TK_CHECK(tk_bind_weight(m, tab, inject, TK_SHAPE(HD, hp->hc.count), 1, w_inj));
    if (R > m->hc_rank) m->hc_rank = (int32_t) R;
    return TK_OK;
}

static tk_status mhc_bind_layer(tk_model * m, const tk_table * tab, int il, tk_layer * l);

tk_status tk_hc_bind_layer(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    if (m->hp.hc.sinkhorn_iters > 0) return mhc_bind_layer(m, tab, il, l);
    char a[8][128];
    const char * sfx[8] = {"hc_attn_norm.weight", "hc_attn_down.weight", "hc_attn_up.weight", "hc_attn_inject.weight",
                           "hc_ffn_norm.weight", "hc_ffn_down.weight", "hc_ffn_up.weight", "hc_ffn_inject.weight"};
    for (int i = 0; i < 8; i++) tk_blk_name(a[i], sizeof a[i], il, sfx[i]);
    TK_CHECK(hc_bind_set(m, tab, a[0], a[1], a[2], a[3], &l->hc_attn_norm, &l->hc_attn_down, &l->hc_attn_up, &l->hc_attn_inject));
    return hc_bind_set(m, tab, a[4], a[5], a[6], a[7], &l->hc_ffn_norm, &l->hc_ffn_down, &l->hc_ffn_up, &l->hc_ffn_inject);
}

tk_status tk_hc_bind_output(tk_model * m, const tk_table * tab) {
    if (m->hp.hc.sinkhorn_iters > 0) return TK_OK;     /* mHC: the mean of the streams, then output_norm */
    return hc_bind_set(m, tab, "output_hc_norm.weight", "output_hc_down.weight", "output_hc_up.weight", NULL,
                       &m->output_hc_norm, &m->output_hc_down, &m->output_hc_up, NULL);
}

/* ctx->hn = the normed streams of ctx->hx; xin [U, D] the mixed block input; with inject,
 * ctx->hi [U, hc] the inject weights */
static tk_status hc_mix(tk_context * ctx, int32_t U, const float * norm, const tk_weight * down, const tk_weight * up,
                        const tk_weight * inject, float * xin) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t hc = hp->hc.count, D = hp->n_embd, HD = hc * D, R = (int32_t) down->ne[1];
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
    const int32_t hc = hp->hc.count, D = hp->n_embd, HD = hc * D;
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
    const int32_t D = hp->n_embd, U = ub->n_tokens;
    if (hp->hc.sinkhorn_iters > 0) return mhc_forward(ctx, ub, logits_out);   /* any hc_count */

    TK_CHECK(hc_embed(ctx, ub));
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


/* ==== mHC: GLM-5-Next's manifold-constrained hyper-connections ========================
 * Shapes (U ubatch tokens, D n_embd, hcD = hc D, stream c at [c D, (c + 1) D) of a row,
 * M = hc (2 + hc)):
 *   per layer and per block (attn, ffn): hc_{attn,ffn}_fn [hcD, M], hc_*_base [M], hc_*_scale [3];
 *   attn_norm, ffn_norm [D] (HF input_layernorm / post_attention_layernorm) and output_norm [D]
 *   as in the plain skeleton.
 * Formula (transformers 5.24 models/glm5_next/modeling_glm5_next.py Glm5NextTextHyperConnection
 * (:266-319), Glm5NextTextDecoderLayer.forward (:1302-1351), Glm5NextTextHyperHead (:322-326);
 * docs/specs/kda-family.md §2.5; llama.cpp 0c1e570 glm5-next.cpp build_hc_pre / build_hc_post):
 *   X_c = embed(token) for every stream c
 *   pre/post of a block: f = X / sqrt(mean(X^2) + rms_eps) over all hcD values (no weight)
 *     m = fn f  [M] = [m_pre (hc) | m_post (hc) | m_comb (hc hc)]
 *     pre = sigmoid(m_pre scale[0] + base[0:hc]) + hc_eps;  post = 2 sigmoid(m_post scale[1] + base[hc:2hc])
 *     Mc[i][j] = softmax_j(m_comb[i hc + j] scale[2] + base[2hc + i hc + j]) + hc_eps
 *     Mc /= column sums + hc_eps; then (iters - 1) times: rows /= (row sum + hc_eps), columns likewise
 *     x_in = sum_c pre_c X_c;  y = block(rmsnorm(x_in) * norm)
 *     X'_j = post_j y + sum_i Mc[i][j] X_i
 *   logits = output(rmsnorm((1/hc) sum_c X_c) * output_norm)   (that normed vector is tk_batch.hidden_out's
 *   row when asked: the h an MTP draft reads)
 * The coefficients are computed in float32 as HF computes them (its .float()).  No state. */

static tk_status mhc_bind_set(tk_model * m, const tk_table * tab, int il, const char * blk, tk_weight * fn, float ** base,
                              float ** scale) {
    const tk_hparams * hp = &m->hp;
    const int64_t hc = hp->hc.count, HD = hc * hp->n_embd, M = hc * (2 + hc);
    char a[128];
    snprintf(a, sizeof a, "blk.%d.hc_%s_fn.weight", il, blk);
    TK_CHECK(tk_bind_weight(m, tab, a, TK_SHAPE(HD, M), 1, fn));
    snprintf(a, sizeof a, "blk.%d.hc_%s_base.weight", il, blk);
    TK_CHECK(tk_bind_vec(m, tab, a, TK_SHAPE(M), 1, base));
    snprintf(a, sizeof a, "blk.%d.hc_%s_scale.weight", il, blk);
    return tk_bind_vec(m, tab, a, TK_SHAPE(3), 1, scale);
}

static tk_status mhc_bind_layer(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const int64_t D = m->hp.n_embd, M = (int64_t) m->hp.hc.count * (2 + m->hp.hc.count);
    char a[128];
    TK_CHECK(mhc_bind_set(m, tab, il, "attn", &l->hc_attn_fn, &l->hc_attn_base, &l->hc_attn_scale));
    TK_CHECK(mhc_bind_set(m, tab, il, "ffn", &l->hc_ffn_fn, &l->hc_ffn_base, &l->hc_ffn_scale));
    snprintf(a, sizeof a, "blk.%d.attn_norm.weight", il);
    TK_CHECK(tk_bind_vec(m, tab, a, TK_SHAPE(D), 1, &l->attn_norm));
    if (tk_ffn_ops_of(l->ffn_kind)) {
        snprintf(a, sizeof a, "blk.%d.ffn_norm.weight", il);
        TK_CHECK(tk_bind_vec(m, tab, a, TK_SHAPE(D), 1, &l->ffn_norm));
    }
    if (M > m->hc_rank) m->hc_rank = (int32_t) M;      /* ctx->hl holds the M coefficients of a token */
    return TK_OK;
}

/* One token's coefficients from m = fn f (see above): pre [hc], post [hc], comb [hc hc] (row i,
 * column j at i hc + j). */
void tk_mhc_coeffs(const float * mix, const float * scale, const float * base, int32_t hc, float hc_eps, int32_t iters,
                   float * pre, float * post, float * comb) {
    for (int32_t c = 0; c < hc; c++) {
        pre[c] = tk_sigmoid(mix[c] * scale[0] + base[c]) + hc_eps;
        post[c] = 2.0f * tk_sigmoid(mix[hc + c] * scale[1] + base[hc + c]);
    }
    const float * mc = mix + 2 * hc, * bc = base + 2 * hc;
    for (int32_t i = 0; i < hc; i++) {      /* softmax over each row, + eps */
        float * r = comb + (size_t) i * hc, mx = -INFINITY, sum = 0.0f;
        for (int32_t j = 0; j < hc; j++) {
            r[j] = mc[i * hc + j] * scale[2] + bc[i * hc + j];
            if (r[j] > mx) mx = r[j];
        }
        for (int32_t j = 0; j < hc; j++) { r[j] = expf(r[j] - mx); sum += r[j]; }
        for (int32_t j = 0; j < hc; j++) r[j] = r[j] / sum + hc_eps;
    }
    for (int32_t it = 0; it < iters; it++) {
        if (it > 0)                          /* rows (not before the first column pass) */
            for (int32_t i = 0; i < hc; i++) {
                float * r = comb + (size_t) i * hc, sum = 0.0f;
                for (int32_t j = 0; j < hc; j++) sum += r[j];
                sum += hc_eps;
                for (int32_t j = 0; j < hc; j++) r[j] /= sum;
            }
        for (int32_t j = 0; j < hc; j++) {   /* columns */
            float sum = 0.0f;
            for (int32_t i = 0; i < hc; i++) sum += comb[(size_t) i * hc + j];
            sum += hc_eps;
            for (int32_t i = 0; i < hc; i++) comb[(size_t) i * hc + j] /= sum;
        }
    }
}

/* from the coefficients m [U, M] of the streams X [U, hcD]: xin [U, D], post [U, hc], comb [U, hc hc] */
static void mhc_apply_pre(const float * X, const float * mix, int32_t U, int32_t hc, int32_t D, const float * base,
                          const float * scale, float hc_eps, int32_t iters, float * xin, float * post, float * comb) {
    const int32_t M = hc * (2 + hc);
    float pre[64];
    for (int32_t t = 0; t < U; t++) {
        const float * x = X + (size_t) t * hc * D;
        tk_mhc_coeffs(mix + (size_t) t * M, scale, base, hc, hc_eps, iters, pre, post + (size_t) t * hc,
                      comb + (size_t) t * hc * hc);
        float * o = xin + (size_t) t * D;
        for (int32_t i = 0; i < D; i++) {
            float sum = 0.0f;
            for (int32_t c = 0; c < hc; c++) sum += pre[c] * x[(size_t) c * D + i];
            o[i] = sum;
        }
    }
}

/* X'_j = post_j y + sum_i comb[i][j] X_i, in place; work [hcD] */
static void mhc_apply_post(float * X, const float * y, const float * post, const float * comb, int32_t U, int32_t hc,
                           int32_t D, float * work) {
    const size_t HD = (size_t) hc * D;
    for (int32_t t = 0; t < U; t++) {
        float * x = X + (size_t) t * HD;
        const float * p = post + (size_t) t * hc, * cm = comb + (size_t) t * hc * hc, * yt = y + (size_t) t * D;
        for (int32_t j = 0; j < hc; j++)
            for (int32_t i = 0; i < D; i++) {
                float sum = 0.0f;
                for (int32_t c = 0; c < hc; c++) sum += cm[c * hc + j] * x[(size_t) c * D + i];
                work[(size_t) j * D + i] = p[j] * yt[i] + sum;
            }
        memcpy(x, work, HD * sizeof(float));
    }
}

tk_status tk_mhc_pre_rows(const float * X, int32_t U, int32_t hc, int32_t D, const float * fn, const float * base,
                          const float * scale, float rms_eps, float hc_eps, int32_t iters, float * xin, float * post,
                          float * comb) {
    if (U <= 0 || hc < 1 || hc > 64 || D <= 0 || iters < 1) return TK_FAIL(TK_ERR_INVALID, "mHC: bad sizes");
    const int64_t HD = (int64_t) hc * D, M = (int64_t) hc * (2 + hc);
    float * f = malloc((size_t) HD * sizeof(float)), * mix = malloc((size_t) (U * M) * sizeof(float));
    tk_status st = TK_OK;
    if (!f || !mix) { st = TK_FAIL(TK_ERR_NOMEM, "out of memory"); goto done; }
    for (int32_t t = 0; t < U && st == TK_OK; t++) {
        tk_rms_norm(X + (size_t) t * HD, NULL, rms_eps, HD, f);
        st = tk_mat_mul(0, fn, HD, M, f, 1, mix + (size_t) t * M);
    }
    if (st == TK_OK) mhc_apply_pre(X, mix, U, hc, D, base, scale, hc_eps, iters, xin, post, comb);
done:
    free(f);
    free(mix);
    return st;
}

void tk_mhc_post_rows(float * X, const float * y, const float * post, const float * comb, int32_t U, int32_t hc, int32_t D) {
    float * work = malloc((size_t) hc * D * sizeof(float));
    if (!work) return;
    mhc_apply_post(X, y, post, comb, U, hc, D, work);
    free(work);
}

/* ctx->cur = rmsnorm(x_in) * norm of the streams ctx->hx; ctx->hl = their coefficients [U, M],
 * ctx->hi = post [U, hc], ctx->hg = comb [U, hc hc] (ctx->hn: the normed flat streams) */
static tk_status mhc_pre(tk_context * ctx, int32_t U, const tk_weight * fn, const float * base, const float * scale,
                         const float * norm) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t hc = hp->hc.count, D = hp->n_embd, HD = hc * D;
    for (int32_t t = 0; t < U; t++) tk_rms_norm(ctx->hx + (size_t) t * HD, NULL, hp->rms_eps, HD, ctx->hn + (size_t) t * HD);
    TK_CHECK(tk_matmul(fn, 0, ctx->hn, U, ctx->hl, &ctx->mm));
    mhc_apply_pre(ctx->hx, ctx->hl, U, hc, D, base, scale, hp->hc.eps, hp->hc.sinkhorn_iters, ctx->out, ctx->hi, ctx->hg);
    tk_rms_norm_rows(ctx, ctx->out, norm, hp->rms_eps, D, U, ctx->cur);
    return TK_OK;
}

static tk_status mhc_forward(tk_context * ctx, const tk_ubatch * ub, float * logits_out) {
    const tk_model * m = ctx->model;
    const tk_hparams * hp = &m->hp;
    const int32_t D = hp->n_embd, U = ub->n_tokens, hc = hp->hc.count, HD = hc * D;

    TK_CHECK(hc_embed(ctx, ub));
    for (int il = 0; il < hp->n_layer; il++) {
        const tk_layer * l = &m->layers[il];
        if (__atomic_load_n(&ctx->abort_requested, __ATOMIC_RELAXED)) return TK_FAIL(TK_ERR_STATE, "decode aborted");
        TK_CHECK(mhc_pre(ctx, U, &l->hc_attn_fn, l->hc_attn_base, l->hc_attn_scale, l->attn_norm));
        TK_CHECK(tk_mixer_ops_of(l->kind)->forward(ctx, l, il, ub, ctx->out));
        mhc_apply_post(ctx->hx, ctx->out, ctx->hi, ctx->hg, U, hc, D, ctx->hn);
        const tk_ffn_ops * ffn = tk_ffn_ops_of(l->ffn_kind);
        if (!ffn) continue;
        TK_CHECK(mhc_pre(ctx, U, &l->hc_ffn_fn, l->hc_ffn_base, l->hc_ffn_scale, l->ffn_norm));
        TK_CHECK(ffn->forward(ctx, l, U, ctx->out));
        mhc_apply_post(ctx->hx, ctx->out, ctx->hi, ctx->hg, U, hc, D, ctx->hn);
    }
    /* logits for the rows that ask; the normed state of every row when asked (an MTP draft's h) */
    for (int32_t t = 0; t < U; t++) {
        if (ub->out_row[t] < 0 && !ctx->hidden_out) continue;
        const float * xt = ctx->hx + (size_t) t * HD;
        float * h = ctx->out;
        for (int32_t i = 0; i < D; i++) {
            float sum = 0.0f;
            for (int32_t c = 0; c < hc; c++) sum += xt[(size_t) c * D + i];
            h[i] = sum / (float) hc;
        }
        tk_rms_norm(h, m->output_norm, hp->rms_eps, D, ctx->cur);
        if (ctx->hidden_out) memcpy(ctx->hidden_out + (int64_t) ub->bidx[t] * D, ctx->cur, (size_t) D * sizeof(float));
        if (ub->out_row[t] < 0) continue;
        float * lo = logits_out + (int64_t) ub->out_row[t] * hp->n_vocab;
        TK_CHECK(tk_matmul(&m->output, 0, ctx->cur, 1, lo, &ctx->mm));
    }
    return TK_OK;
}
