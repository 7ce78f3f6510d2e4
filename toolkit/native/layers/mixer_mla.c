/* mixer_mla.c: multi-head latent attention (TK_LAYER_MLA: kimi-linear's attention layers),
 * run in the absorbed form with the latent cached.
 *
 * Shapes (U ubatch tokens, H n_embd, h = n_head heads, dn / dr / dv = mla_dn / mla_dr / mla_dv,
 * rq = mla_q_lora_rank, rkv = mla_kv_lora_rank):
 *   in:  ctx->cur [U, H]            out: [U, H]
 *   attn_q [H, h (dn + dr)], or attn_q_a [H, rq] + attn_q_a_norm [rq] + attn_q_b [rq, h (dn + dr)]
 *   attn_kv_a_mqa [H, rkv + dr];  attn_kv_a_norm [rkv]
 *   attn_k_b [dn, rkv, h] (head h: rkv rows of dn, kv_b's k rows transposed);  attn_v_b [rkv, dv, h]
 *   attn_output [h dv, H]
 *   KV cache per cell: one row [c (rkv) | k_rot (dr)], no V (kv_v_dim 0): rkv + dr values a token
 *     where caching K and V would take h (dn + dr + dv); of the K cache's type (tk_context_params.type_k:
 *     f32, f16, bf16, q8_0, q4_0, rkv + dr a multiple of the block), stored as ggml's from_float and read
 *     through its to_float; type_v stores nothing here (as llama.cpp's MLA, whose V is a view of K)
 * Formula (docs/specs/kda-family.md §2.3; HF's expanded form, modeling_kimi_linear.py:276-315):
 *   q_h = [q_nope_h (dn) | q_rot_h (dr)] = (attn_q x)_h, or (attn_q_b rmsnorm(attn_q_a x))_h
 *   [c | k_rot] = attn_kv_a_mqa x;  c <- rmsnorm(c) * attn_kv_a_norm   (q_a / kv_a eps mla_norm_eps)
 *   HF: k_h = [kv_b_k,h c | k_rot], v_h = kv_b_v,h c,  o_h = softmax(q_h . k_h^T (dn + dr)^-1/2) V_h
 *   absorbed (the same sums regrouped, llama.cpp LCK:410-452): qt_h = [k_b_h q_nope_h (rkv) | q_rot_h],
 *     a_h = softmax(qt_h . [c | k_rot]^T (dn + dr)^-1/2) over the cells of the token's sequence with
 *     pos <= its own, o_h = v_b_h (a_h . C)   (C: the cached c rows)
 *   out = attn_output [o_1 | ... | o_h]
 *   HF attention_bias (where the file has them): + attn_q_a.bias after attn_q_a (before its norm), + attn_kv_a_mqa.bias
 *   after attn_kv_a_mqa (before the norm / RoPE), + attn_output.bias on out (modeling_kimi_linear.py:218-246)
 *   No RoPE: kimi-linear shares k_rot unrotated (modeling_kimi_linear.py:191-193).  Ling 3 (hp.mla.rope): q_rot and
 *   k_rot rotated in adjacent pairs by pos base^(-2i/dr) (modeling_bailing_hybrid.py:253-289; HF de-interleaves after,
 *   which changes no dot product), scaled as rope.scaling.* says (tk_rope_scaling_of: linear / yarn, cos / sin * the
 *   yarn attn_factor; HF's mscale_all_dim softmax factor is folded into attn_q / attn_q_b by the converter) before the
 *   cache write (memory_kv.c's kv_seq_add rotates the
 *   cached k_rot on); the head-wise gate (hp.attn.head_gate): o_h *= sigmoid(attn_gate x)_h.
 *   GLM-5-Next (hp.dsa.full): the softmax runs over the cells dsa.c's indexer selects (q_r the
 *   q-LoRA latent), the indexer's [k_I | gamma] in the cells' third array (kv_idx_dim).
 * Scratch: narrow [U, rq] (q-LoRA), q [U, h max(dn + dr, dv)] q (then att: the heads' outputs),
 *   kv [U, rkv + dr] the latent rows, proj [U, h (rkv + dr)] the absorbed queries, y [U, h rkv]
 *   the attended latents, conv [U, max(dn, rkv)] one head's gathered rows, step [U, max(rkv, dv)]
 *   their product.
 * ref: transformers 5.24 modeling_kimi_linear.py KimiLinearAttention; llama.cpp 0c1e570
 *      src/models/kimi-linear.cpp (absorbed MLA), deepseek2's converter split of kv_b_proj.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/attn.h"
#include "layers/layer.h"

static int32_t mla_kv_dim(const tk_model * m, int il) { (void) il; return m->hp.mla.kv_lora_rank + m->hp.mla.dr; }
static int32_t mla_kv_v_dim(const tk_model * m, int il) { (void) m; (void) il; return 0; }

static size_t mx(size_t a, size_t b) { return a > b ? a : b; }

static void mla_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    const tk_hparams * hp = &m->hp;
    const size_t h = (size_t) hp->attn.n_head, dn = (size_t) hp->mla.dn, dr = (size_t) hp->mla.dr, dv = (size_t) hp->mla.dv;
    const size_t rkv = (size_t) hp->mla.kv_lora_rank;
    (void) il; (void) n_ubatch;
    tk_scratch_need(&need->narrow, (size_t) hp->mla.q_lora_rank);
    tk_scratch_need(&need->q, h * mx(dn + dr, dv));
    tk_scratch_need(&need->kv, rkv + dr);
    tk_scratch_need(&need->proj, h * (rkv + dr));
    tk_scratch_need(&need->y, mx(h * rkv, rkv + dr));   /* also ctx->row's width: a typed latent row as floats */
    tk_scratch_need(&need->conv, mx(dn, rkv));
    tk_scratch_need(&need->step, mx(rkv, dv));
    if (hp->attn.head_gate) tk_scratch_need(&need->gate, h);
    tk_scratch_need(&need->work_bytes, tk_attn_scratch_bytes((int32_t) h, 1, (int32_t) (rkv + dr), (int32_t) rkv, n_threads,
                                                              need->kv_typed));
    tk_scratch_need(&need->attn_part, tk_attn_part_floats((int32_t) h, 1, (int32_t) rkv));
}

static int32_t mla_idx_dim(const tk_model * m, int il) { return tk_dsa_idx_dim(m, il); }

static tk_status mla_check(const tk_hparams * hp, int il) {
    if (hp->dsa.full) {        /* GLM-5-Next: the DSA indexer reads the q-LoRA latent */
        TK_CHECK(tk_dsa_check(hp, il));
        if (hp->mla.q_lora_rank <= 0) return TK_FAIL(TK_ERR_INVALID, "layer %d: the DSA indexer needs q-LoRA (q_lora_rank 0)", il);
    }
    if (hp->mla.rope && (hp->mla.dr % 2 || !(hp->attn.rope_freq_base > 0)))
        return TK_FAIL(TK_ERR_INVALID, "layer %d: MLA RoPE over %d dims at base %g invalid", il, hp->mla.dr, hp->attn.rope_freq_base);
    if (hp->attn.n_head <= 0 || hp->attn.n_head > 65536 || hp->mla.dn <= 0 || hp->mla.dr < 0 || hp->mla.dv <= 0 ||
        hp->mla.kv_lora_rank <= 0 || hp->mla.q_lora_rank < 0 || hp->mla.dn > 65536 || hp->mla.dr > 65536 ||
        hp->mla.dv > 65536 || hp->mla.kv_lora_rank > 65536 || hp->mla.q_lora_rank > 65536)
        return TK_FAIL(TK_ERR_INVALID, "MLA hparams out of range (%d heads, dn %d, dr %d, dv %d, kv_lora_rank %d, q_lora_rank %d)",
                       hp->attn.n_head, hp->mla.dn, hp->mla.dr, hp->mla.dv, hp->mla.kv_lora_rank, hp->mla.q_lora_rank);
    if (!(hp->mla.norm_eps >= 0) || !isfinite(hp->mla.norm_eps))
        return TK_FAIL(TK_ERR_INVALID, "MLA norm eps %g invalid", hp->mla.norm_eps);
    return TK_OK;
}

static tk_status mla_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t H = hp->n_embd, h = hp->attn.n_head, dn = hp->mla.dn, dr = hp->mla.dr, dv = hp->mla.dv;
    const int64_t rkv = hp->mla.kv_lora_rank, rq = hp->mla.q_lora_rank;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    if (rq > 0) {
        TK_CHECK(tk_bind_weight(m, tab, NAME("attn_q_a.weight"), TK_SHAPE(H, rq), 1, &l->wq_a));
        TK_CHECK(tk_bind_vec(m, tab, NAME("attn_q_a_norm.weight"), TK_SHAPE(rq), 1, &l->q_a_norm));
        TK_CHECK(tk_bind_weight(m, tab, NAME("attn_q_b.weight"), TK_SHAPE(rq, h * (dn + dr)), 1, &l->wq_b));
    } else {
        TK_CHECK(tk_bind_weight(m, tab, NAME("attn_q.weight"), TK_SHAPE(H, h * (dn + dr)), 1, &l->wq));
    }
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_kv_a_mqa.weight"), TK_SHAPE(H, rkv + dr), 1, &l->wkv_a));
    TK_CHECK(tk_bind_vec(m, tab, NAME("attn_kv_a_norm.weight"), TK_SHAPE(rkv), 1, &l->kv_a_norm));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_k_b.weight"), TK_SHAPE(dn, rkv, h), 1, &l->wk_b));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_v_b.weight"), TK_SHAPE(rkv, dv, h), 1, &l->wv_b));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_output.weight"), TK_SHAPE(h * dv, H), 1, &l->wo));
    if (hp->attn.head_gate) TK_CHECK(tk_bind_weight(m, tab, NAME("attn_gate.weight"), TK_SHAPE(H, h), 1, &l->w_head_gate));
    /* HF attention_bias (q_a_proj, kv_a_proj_with_mqa, o_proj; q_proj / q_b / kv_b have none): kv_a's and the
     * output's together, q_a's with them where q-LoRA */
    const int bias = tk_table_find(tab, NAME("attn_kv_a_mqa.bias")) != NULL;
    TK_CHECK(tk_bind_vec(m, tab, NAME("attn_kv_a_mqa.bias"), TK_SHAPE(rkv + dr), bias, &l->kv_a_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("attn_output.bias"), TK_SHAPE(H), bias, &l->attn_out_b));
    if (rq > 0) TK_CHECK(tk_bind_vec(m, tab, NAME("attn_q_a.bias"), TK_SHAPE(rq), bias, &l->q_a_b));
#undef NAME
    if (hp->dsa.full) TK_CHECK(tk_dsa_bind(m, tab, il, l, rq));
    return TK_OK;
}

/* ---- forward ---- */

typedef struct {
    tk_context * ctx;
    const tk_ubatch * ub;
    tk_kv_view kv;
    float scale;
    const uint8_t * sel;       /* [U, n_cells] the cells each token attends (GLM-5-Next's DSA), or NULL: all it sees */
} mla_job;

/* cell c's latent row as floats: a float32 cache's in place, a typed cache's (type_k) converted
 * into buf [w] by the type's to_float */
static inline const float * mla_row(const tk_kv_view * kv, const tk_type_traits * tt, int32_t c, int32_t w, float * buf) {
    if (!tt) return (const float *) kv->k + (size_t) c * w;
    tt->to_float((const uint8_t *) kv->k + (size_t) c * kv->k_row, buf, w);
    return buf;
}

/* pairs [p0, p1) of (token t = p / h, head hh = p % h): a = softmax(qt . row * scale) over the
 * cells the token sees, o = a . C (the rows' first rkv floats) into ctx->y; scores in the
 * thread's row of ctx->vec, a typed row converted in its row of ctx->row; the same operations
 * per pair whatever the split */
static void mla_heads(void * arg, int64_t p0, int64_t p1, int thread) {
    const mla_job * j = arg;
    tk_context * ctx = j->ctx;
    const tk_kv_view * kv = &j->kv;
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t h = hp->attn.n_head, rkv = hp->mla.kv_lora_rank, w = kv->kv_dim;
    float * score = ctx->vec + (size_t) thread * ctx->vec_n;
    float * buf = ctx->row + (size_t) thread * ctx->row_n;   /* [w] (mla_scratch: row_n > w) */
    const tk_type_traits * tt = kv->type_k != TK_GGML_F32 ? tk_type_traits_get(kv->type_k) : NULL;
    for (int64_t p = p0; p < p1; p++) {
        const int32_t t = (int32_t) (p / h), hh = (int32_t) (p % h);
        const uint64_t sbit = UINT64_C(1) << j->ub->seq[t / j->ub->n_seq_tokens];
        const int32_t pos = j->ub->pos[t];
        const float * qt = ctx->proj + ((size_t) t * h + hh) * (size_t) w;
        const uint8_t * sel = j->sel ? j->sel + (size_t) t * (size_t) kv->n_cells : NULL;
        float m = -FLT_MAX;
        for (int32_t c = 0; c < kv->n_cells; c++) {
            if (!(kv->seqs[c] & sbit) || kv->pos[c] > pos || kv->pos[c] < 0 || (sel && !sel[c])) continue;
            const float * row = mla_row(kv, tt, c, w, buf);
            float acc[8] = {0};
            int32_t i = 0;
            for (; i + 8 <= w; i += 8)
                for (int e = 0; e < 8; e++) acc[e] += qt[i + e] * row[i + e];
            float d = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (; i < w; i++) d += qt[i] * row[i];
            score[c] = d * j->scale;
            if (score[c] > m) m = score[c];
        }
        float * o = ctx->y + ((size_t) t * h + hh) * (size_t) rkv;
        for (int32_t i = 0; i < rkv; i++) o[i] = 0.0f;
        double den = 0.0;
        for (int32_t c = 0; c < kv->n_cells; c++) {
            if (!(kv->seqs[c] & sbit) || kv->pos[c] > pos || kv->pos[c] < 0 || (sel && !sel[c])) continue;
            score[c] = expf(score[c] - m);
            den += score[c];
            const float * row = mla_row(kv, tt, c, w, buf);
            for (int32_t i = 0; i < rkv; i++) o[i] += score[c] * row[i];
        }
        const float inv = den > 0 ? (float) (1.0 / den) : 0.0f;
        for (int32_t i = 0; i < rkv; i++) o[i] *= inv;
    }
}

static tk_status mla_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t U = ub->n_tokens, h = hp->attn.n_head, dn = hp->mla.dn, dr = hp->mla.dr, dv = hp->mla.dv;
    const int32_t rkv = hp->mla.kv_lora_rank, rq = hp->mla.q_lora_rank, qs = dn + dr, w = rkv + dr;
    tk_kv_view kv;
    TK_CHECK(ctx->mem->kv_view(ctx->mem, il, &kv));
    /* q [U, h (dn + dr)] */
    if (rq > 0) {
        TK_CHECK(tk_matmul(&l->wq_a, 0, ctx->cur, U, ctx->narrow, &ctx->mm));
        if (l->q_a_b) tk_bias_rows(ctx, ctx->narrow, l->q_a_b, rq, U, 0);
        tk_rms_norm_rows(ctx, ctx->narrow, l->q_a_norm, hp->mla.norm_eps, rq, U, ctx->narrow);
        TK_CHECK(tk_matmul(&l->wq_b, 0, ctx->narrow, U, ctx->q, &ctx->mm));
    } else {
        TK_CHECK(tk_matmul(&l->wq, 0, ctx->cur, U, ctx->q, &ctx->mm));
    }
    /* the latent rows [c | k_rot], c normed, into the token's cell */
    TK_CHECK(tk_matmul(&l->wkv_a, 0, ctx->cur, U, ctx->k, &ctx->mm));
    if (l->kv_a_b) tk_bias_rows(ctx, ctx->k, l->kv_a_b, w, U, 0);
    /* Ling 3's rope.scaling.* (linear, yarn; its yarn attn_factor on the rotated dims, as llama.cpp's ggml_rope_ext) */
    const tk_rope_scaling sc = tk_rope_scaling_of(&hp->attn, dr, hp->attn.rope_freq_base, 1);
    for (int32_t t = 0; t < U; t++) {
        float * row = ctx->k + (int64_t) t * w;
        tk_rms_norm(row, l->kv_a_norm, hp->mla.norm_eps, rkv, row);
        if (hp->mla.rope) {    /* Ling 3: interleaved RoPE on k_rot (cached rotated) and each head's q_rot */
            tk_rope_norm_scaled(row + rkv, 1, dr, dr, ub->pos[t], hp->attn.rope_freq_base, &sc);
            tk_rope_norm_scaled(ctx->q + (int64_t) t * h * qs + dn, h, qs, dr, ub->pos[t], hp->attn.rope_freq_base, &sc);
        }
        /* the cache's type: ggml's from_float (f16 / bf16 rounding, quantize_row_*_ref), as llama.cpp's
         * ggml_set_rows into its MLA K cache */
        if (kv.type_k == TK_GGML_F32) memcpy((float *) kv.k + (size_t) kv.ub_cells[t] * (size_t) w, row, (size_t) w * sizeof(float));
        else tk_type_traits_get(kv.type_k)->from_float(row, (uint8_t *) kv.k + (size_t) kv.ub_cells[t] * kv.k_row, w);
    }
    const uint8_t * sel = NULL;   /* GLM-5-Next: the DSA indexer's choice (the cells above are in place) */
    if (hp->dsa.full) TK_CHECK(tk_dsa_selection(ctx, l, il, ub, ctx->cur, ctx->narrow, &kv, &sel));
    /* absorbed queries: qt_h = [k_b_h q_nope_h | q_rot_h] into proj [U, h w] */
    for (int32_t hh = 0; hh < h; hh++) {
        for (int32_t t = 0; t < U; t++)
            memcpy(ctx->conv + (int64_t) t * dn, ctx->q + ((int64_t) t * h + hh) * qs, (size_t) dn * sizeof(float));
        TK_CHECK(tk_matmul(&l->wk_b, hh, ctx->conv, U, ctx->step, &ctx->mm));
        for (int32_t t = 0; t < U; t++) {
            float * qt = ctx->proj + ((int64_t) t * h + hh) * w;
            memcpy(qt, ctx->step + (int64_t) t * rkv, (size_t) rkv * sizeof(float));
            memcpy(qt + rkv, ctx->q + ((int64_t) t * h + hh) * qs + dn, (size_t) dr * sizeof(float));
        }
    }
    const float scale = (float) (1.0 / sqrt((double) qs));
    /* kernels/attn.h: one KV head whose keys are the latent rows and values their first rkv floats; a typed
     * cache: the rows of type_k as both (vt = kt, v_cb = k_cb: attn.c takes V from K's converted rows) */
    const int typed = kv.type_k != TK_GGML_F32;
    const tk_attn_args a = {ctx->proj, (int64_t) h * w, w, ctx->y, (int64_t) h * rkv, rkv, kv.k, kv.k, w, 0, w, 0,
                            w, rkv, h, 1, scale, &kv, ub, sel, typed ? kv.k : NULL, typed ? kv.k : NULL,
                            kv.type_k, typed ? kv.type_k : TK_GGML_F32, typed ? kv.k_row : 0, 0, typed ? kv.k_row : 0, 0};
    if (tk_attn_reference() == 1 || !tk_attn_run(ctx, &a)) {   /* the reference */
        mla_job mj = {ctx, ub, kv, scale, sel};
        tk_par_rows(ctx->pool, (int64_t) U * h, (int64_t) kv.n_cells * w / 4, mla_heads, &mj);
    }
    /* o_h = v_b_h (a_h . C) into att [U, h dv] */
    for (int32_t hh = 0; hh < h; hh++) {
        for (int32_t t = 0; t < U; t++)
            memcpy(ctx->conv + (int64_t) t * rkv, ctx->y + ((int64_t) t * h + hh) * rkv, (size_t) rkv * sizeof(float));
        TK_CHECK(tk_matmul(&l->wv_b, hh, ctx->conv, U, ctx->step, &ctx->mm));
        for (int32_t t = 0; t < U; t++)
            memcpy(ctx->att + ((int64_t) t * h + hh) * dv, ctx->step + (int64_t) t * dv, (size_t) dv * sizeof(float));
    }
    if (hp->attn.head_gate) {  /* Ling 3: head hh's output * sigmoid(attn_gate x)_hh (modeling_bailing_hybrid.py:417-418) */
        TK_CHECK(tk_matmul(&l->w_head_gate, 0, ctx->cur, U, ctx->gate, &ctx->mm));
        for (int32_t t = 0; t < U; t++)
            for (int32_t hh = 0; hh < h; hh++) {
                const float gt = 1.0f / (1.0f + expf(-ctx->gate[(int64_t) t * h + hh]));
                float * o = ctx->att + ((int64_t) t * h + hh) * dv;
                for (int32_t i = 0; i < dv; i++) o[i] *= gt;
            }
    }
    TK_CHECK(tk_matmul(&l->wo, 0, ctx->att, U, out, &ctx->mm));
    if (l->attn_out_b) tk_bias_rows(ctx, out, l->attn_out_b, hp->n_embd, U, 0);   /* o_proj's bias */
    return TK_OK;
}

const tk_mixer_ops tk_mixer_mla = {
    .name = "mla",
    .check = mla_check,
    .bind = mla_bind,
    .kv_dim = mla_kv_dim,
    .kv_v_dim = mla_kv_v_dim,
    .scratch = mla_scratch,
    .forward = mla_forward,
    .kv_idx_dim = mla_idx_dim,
};
