/* mixer_qsa.c: qwen4exp's attention layer (TK_LAYER_QSA): the gated attention of
 * mixer_attention.c over the cells the QSA block indexer selects for each token.
 *
 * Shapes (U ubatch tokens, D n_embd, Hi = idx_n_head indexer heads of di = idx_head_dim,
 * r = compress_ratios[il], B = idx_top_k budget in tokens):
 *   in:  ctx->cur [U, D]            out: [U, D]
 *   the attention tensors of mixer_attention.c (attn_q [D, 2 H hd] = [q_h | gate_h] per head,
 *     attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm)
 *   indexer.q_proj [D, Hi di], indexer.k_proj [D, di] (HF index_qk_proj split by rows),
 *   indexer.q_norm, indexer.k_norm [di] (HF's (1 + w) folded in)
 *   KV cache per cell: K, V as the attention kind, plus the raw indexer key kraw [di] (no norm,
 *     no RoPE) in the cache's third array (memory_kv.c: same cells as K and V)
 * Formula (HF Qwen4ExpTextQSAIndexer / Qwen4ExpTextAttention; docs/specs/gdn-family.md §2.5.3):
 *   qI_h = RoPE_pos(rmsnorm(q_proj x)_h * q_norm) over the first n_rot dims (NEOX), kraw = k_proj x
 *   for a token at position p of sequence s: the visible cells are s's cells with pos <= p, in
 *   position order, j = 0 .. n_vis - 1; n_blk = n_vis / r whole blocks (j in [b r, b r + r)), the
 *   tail j >= n_blk r.
 *   if n_blk <= B / r: every visible cell (dense attention, exactly)
 *   else: Kb = RoPE_{pos of the block's first cell}(rmsnorm(mean of the block's kraw) * k_norm),
 *     score_b = sum_h relu(qI_h . Kb) / sqrt(di); the cells of the B / r best blocks (equal
 *     scores resolved as torch.topk does, tk_topk_torch) and of the tail
 *   then the attention of mixer_attention.c over those cells (softmax over the selected cells).
 * Below B + r - 1 visible tokens the layer is exactly the dense gated attention.
 * Scratch: proj [U, Hi di] the indexer queries, then [U, di] the raw keys; the selection
 *   [U, n_cells] bytes and the pooled keys are allocated per call.
 * ref: transformers 5.24 models/qwen4_exp/modeling_qwen4_exp.py (Qwen4ExpTextQSAIndexer);
 *      llama.cpp 0c1e570 qwen4exp.cpp build_qsa_top_k (whose token-level top-k of width
 *      B + r - 1 differs from HF's whole blocks when the tail has fewer than r - 1 tokens, B4).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layer.h"

static int32_t qsa_idx_dim(const tk_model * m, int il) {
    (void) il;
    return m->hp.idx.head_dim;
}

static void qsa_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    tk_attention_scratch(m, il, n_ubatch, n_threads, need);
    tk_scratch_need(&need->proj, ((size_t) m->hp.idx.n_head + 1) * (size_t) m->hp.idx.head_dim);   /* queries, keys */
}

static tk_status qsa_check(const tk_hparams * hp, int il) {
    TK_CHECK(tk_attention_check(hp, il));
    const int32_t r = hp->idx.compress_ratios ? hp->idx.compress_ratios[il] : 0;
    if (hp->idx.n_head <= 0 || hp->idx.n_head > 4096 || hp->idx.head_dim <= 0 || hp->idx.head_dim > 4096)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: QSA indexer heads %d of %d out of range", il, hp->idx.n_head, hp->idx.head_dim);
    if (r <= 0 || hp->idx.top_k <= 0 || hp->idx.top_k % r)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: QSA compress ratio %d and budget %d (a positive multiple of it) invalid",
                       il, r, hp->idx.top_k);
    if (hp->attn.n_rot > hp->idx.head_dim)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: n_rot %d > indexer head dim %d", il, hp->attn.n_rot, hp->idx.head_dim);
    return TK_OK;
}

static tk_status qsa_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd, Hi = hp->idx.n_head, di = hp->idx.head_dim;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    TK_CHECK(tk_attention_bind(m, tab, il, l));
    TK_CHECK(tk_bind_weight(m, tab, NAME("indexer.q_proj.weight"), TK_SHAPE(D, Hi * di), 1, &l->idx_q));
    TK_CHECK(tk_bind_weight(m, tab, NAME("indexer.k_proj.weight"), TK_SHAPE(D, di), 1, &l->idx_k));
    TK_CHECK(tk_bind_vec(m, tab, NAME("indexer.q_norm.weight"), TK_SHAPE(di), 1, &l->idx_q_norm));
    TK_CHECK(tk_bind_vec(m, tab, NAME("indexer.k_norm.weight"), TK_SHAPE(di), 1, &l->idx_k_norm));
#undef NAME
    return TK_OK;
}

/* one sequence row's selection: pooled keys of its whole blocks, then per token the best blocks */
typedef struct {
    tk_context * ctx;
    const tk_ubatch * ub;
    const tk_layer * l;
    tk_kv_view kv;
    uint8_t * sel;             /* [U, n_cells] */
    int32_t r, nb_top;
} qsa_job;

static tk_status qsa_select_seq(const qsa_job * j, int32_t s) {
    tk_context * ctx = j->ctx;
    const tk_hparams * hp = &ctx->model->hp;
    const tk_ubatch * ub = j->ub;
    const tk_kv_view * kv = &j->kv;
    const int32_t nst = ub->n_seq_tokens, r = j->r, di = hp->idx.head_dim, Hi = hp->idx.n_head;
    const uint64_t bit = UINT64_C(1) << ub->seq[s];
    const int32_t t0 = s * nst, pmax = ub->pos[t0 + nst - 1];
    const tk_rope_scaling sc = tk_rope_scaling_of(&hp->attn, hp->attn.n_rot, hp->attn.rope_freq_base, 1);
    /* the sequence's cells up to its last position in this ubatch, in position order */
    int32_t * cells = malloc((size_t) kv->n_cells * sizeof(int32_t));
    if (!cells) return TK_FAIL(TK_ERR_NOMEM, "out of memory (QSA cell list)");
    const int32_t n = tk_kv_seq_cells(kv, bit, pmax, cells);
    const int32_t nb_all = n / r;
    float * pooled = malloc(((size_t) nb_all * di + 1) * sizeof(float));
    float * score = malloc(((size_t) nb_all + 1) * sizeof(float));
    tk_topk_elem * order = malloc(((size_t) nb_all + 1) * sizeof(tk_topk_elem));
    uint8_t * keep = malloc((size_t) nb_all + 1);
    tk_status st = TK_OK;
    if (!pooled || !score || !order || !keep) { st = TK_FAIL(TK_ERR_NOMEM, "out of memory (QSA blocks)"); goto done; }
    /* pooled keys of the whole blocks: mean of the raw keys (float32, in order), k_norm, RoPE at
     * the block's first position */
    for (int32_t b = 0; b < nb_all; b++) {
        float * pk = pooled + (size_t) b * di;
        for (int32_t i = 0; i < di; i++) pk[i] = 0.0f;
        for (int32_t k = 0; k < r; k++) {
            const float * kr = kv->ik + (size_t) cells[b * r + k] * kv->ik_dim;
            for (int32_t i = 0; i < di; i++) pk[i] += kr[i];
        }
        for (int32_t i = 0; i < di; i++) pk[i] /= (float) r;
        tk_rms_norm(pk, j->l->idx_k_norm, hp->rms_eps, di, pk);
        if (hp->attn.use_rope && hp->attn.n_rot > 0)   /* HF: the attention's cos / sin (rope.scaling.* included) */
            tk_rope_neox_pairs_scaled(pk, 1, di, hp->attn.n_rot, hp->attn.n_rot / 2, kv->pos[cells[b * r]], hp->attn.rope_freq_base, &sc);
    }
    const float isq = (float) (1.0 / sqrt((double) di));
    for (int32_t i = 0; i < nst; i++) {
        const int32_t t = t0 + i, p = ub->pos[t];
        uint8_t * row = j->sel + (size_t) t * kv->n_cells;
        memset(row, 0, (size_t) kv->n_cells);
        int32_t n_vis = 0;
        while (n_vis < n && kv->pos[cells[n_vis]] <= p) n_vis++;
        const int32_t n_blk = n_vis / r;
        if (n_blk <= j->nb_top) {          /* below the budget: dense */
            for (int32_t k = 0; k < n_vis; k++) row[cells[k]] = 1;
            continue;
        }
        const float * qi = ctx->proj + (size_t) t * Hi * di;
        for (int32_t b = 0; b < n_blk; b++) {
            const float * pk = pooled + (size_t) b * di;
            float sum = 0.0f;
            for (int32_t h = 0; h < Hi; h++) {
                float d = 0.0f;
                for (int32_t e = 0; e < di; e++) d += qi[h * di + e] * pk[e];
                sum += d > 0.0f ? d : 0.0f;
            }
            score[b] = sum * isq;
        }
        tk_topk_torch(score, n_blk, j->nb_top, order, keep);
        for (int32_t b = 0; b < n_blk; b++)
            if (keep[b]) for (int32_t k = 0; k < r; k++) row[cells[b * r + k]] = 1;
        for (int32_t k = n_blk * r; k < n_vis; k++) row[cells[k]] = 1;   /* the tail */
    }
done:
    free(cells);
    free(pooled);
    free(score);
    free(order);
    free(keep);
    return st;
}

static tk_status qsa_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t U = ub->n_tokens, Hi = hp->idx.n_head, di = hp->idx.head_dim;
    tk_kv_view kv;
    TK_CHECK(ctx->mem->kv_view(ctx->mem, il, &kv));
    if (!kv.ik || kv.ik_dim != di) return TK_FAIL(TK_ERR_STATE, "layer %d has no indexer key cache", il);
    const tk_rope_scaling sc = tk_rope_scaling_of(&hp->attn, hp->attn.n_rot, hp->attn.rope_freq_base, 1);
    /* indexer: queries normed and rotated per head, raw keys into the cells */
    float * keys = ctx->proj + (size_t) U * Hi * di;   /* [U, di] after the queries [U, Hi di] */
    TK_CHECK(tk_matmul(&l->idx_q, 0, ctx->cur, U, ctx->proj, &ctx->mm));
    TK_CHECK(tk_matmul(&l->idx_k, 0, ctx->cur, U, keys, &ctx->mm));
    for (int32_t t = 0; t < U; t++) {
        float * q = ctx->proj + (size_t) t * Hi * di;
        for (int32_t h = 0; h < Hi; h++) tk_rms_norm(q + (size_t) h * di, l->idx_q_norm, hp->rms_eps, di, q + (size_t) h * di);
        if (hp->attn.use_rope && hp->attn.n_rot > 0)
            tk_rope_neox_pairs_scaled(q, Hi, di, hp->attn.n_rot, hp->attn.n_rot / 2, ub->pos[t], hp->attn.rope_freq_base, &sc);
        memcpy(kv.ik + (size_t) kv.ub_cells[t] * di, keys + (size_t) t * di, (size_t) di * sizeof(float));
    }
    /* the cells a token sees are claimed before the forward (prepare), so the raw keys of the
     * whole ubatch are in place before any selection */
    uint8_t * sel = malloc((size_t) U * (size_t) kv.n_cells);
    if (!sel) return TK_FAIL(TK_ERR_NOMEM, "out of memory (QSA selection, %d x %d)", U, kv.n_cells);
    const int32_t r = hp->idx.compress_ratios[il];
    qsa_job j = {ctx, ub, l, kv, sel, r, hp->idx.top_k / r};
    tk_status st = TK_OK;
    for (int32_t s = 0; s < ub->n_seqs && st == TK_OK; s++) st = qsa_select_seq(&j, s);
    if (st == TK_OK) st = tk_attention_forward_sel(ctx, l, il, ub, out, sel);
    free(sel);
    return st;
}

const tk_mixer_ops tk_mixer_qsa = {
    .name = "qsa",
    .check = qsa_check,
    .bind = qsa_bind,
    .kv_dim = tk_attention_kv_dim,
    .scratch = qsa_scratch,
    .forward = qsa_forward,
    .kv_idx_dim = qsa_idx_dim,
};
