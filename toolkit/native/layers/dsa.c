/* dsa.c: GLM-5-Next's DSA k-pool indexer: which KV cells each token of an attention layer
 * attends (the MLA kind calls it on glm5-next's attention layers; QSA's block indexer in
 * mixer_qsa.c is its cousin and shares indexer_select.c).
 *
 * Shapes (U ubatch tokens, D n_embd, rq q_lora_rank, nI = idx_n_head heads of dI = idx_head_dim,
 * kp = dsa_kpool tokens per pool, B = idx_top_k budget in tokens, B % kp == 0):
 *   on "full" indexer layers (hp.dsa.full[il]):
 *     indexer.attn_q_b [rq, nI dI] (l->idx_q), indexer.attn_k [D, dI] (l->idx_k),
 *     indexer.k_norm.weight / .bias [dI] (a LayerNorm, eps hp.dsa.k_norm_eps),
 *     indexer.proj [D, nI] (l->idx_proj), indexer_compressor_gate [D, dI] (l->idx_gate),
 *     indexer_compressor_ape [dI, kp] (l->idx_ape: row j = the j-th token of a pool)
 *   "shared" layers have none and reuse the selection of the last full layer before them.
 *   KV cache per cell, full layers: [k_I (dI) | gamma (dI)] in the cache's third array (kv_idx_dim).
 * Formula (transformers 5.24 models/glm5_next/modeling_glm5_next.py Glm5NextTextIndexer
 * :772-1061; docs/specs/kda-family.md §2.4; llama.cpp 0c1e570 glm5-next.cpp:766-919):
 *   x the attention input, q_r = rmsnorm(W_qa x) * q_a_norm (the MLA's q-LoRA latent)
 *   q_I[h] = (W_Iqb q_r)_h;  k_I = LayerNorm(W_Ik x);  gamma = W_gate x;  w = (W_proj x) nI^-1/2
 *   the sequence's cells in position order j = 0, 1, ...; pool p = cells [p kp, (p + 1) kp),
 *   complete pools only; P_p[c] = sum_j softmax_j(gamma_{p kp + j}[c] + ape[j][c]) k_I,{p kp + j}[c]
 *   for a query with n_vis visible cells (pos <= its own): n_blk = n_vis / kp candidate pools,
 *   s(p) = sum_h w_h relu(dI^-1/2 q_I[h] . P_p); the min(B / kp, n_blk) best (torch.topk's choice
 *   among equal scores, tk_topk_torch), all their cells, and with dsa_select_tail the tail
 *   cells [n_blk kp, n_vis).  Without the tail a query before the first complete pool selects
 *   nothing (HF: undefined, docs/specs/kda-family.md D18).
 * Pooled keys are kept across calls, per full layer and sequence (struct tk_dsa_pools): a pool is
 * final once its kp cells are in place, so a decode at depth pools only the pools completed since
 * the last call, and its cost grows with the pools it scores, not with the cells it pools.  A kept
 * pool is used while its kp cells are still the sequence's cells at its place (checked at every
 * call) and no sequence op removed or moved them since (tk_dsa_forget, from context.c); it holds
 * the bits a recomputation gives (the same arithmetic on the same rows).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layer.h"

int32_t tk_dsa_idx_dim(const tk_model * m, int il) {
    const tk_hparams * hp = &m->hp;
    return hp->dsa.full && hp->dsa.full[il] ? 2 * hp->idx.head_dim : 0;
}

tk_status tk_dsa_check(const tk_hparams * hp, int il) {
    if (!hp->dsa.full) return TK_FAIL(TK_ERR_INVALID, "layer %d: DSA indexer types missing", il);
    if (hp->idx.n_head <= 0 || hp->idx.n_head > 4096 || hp->idx.head_dim <= 0 || hp->idx.head_dim > 4096)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: DSA indexer heads %d of %d out of range", il, hp->idx.n_head, hp->idx.head_dim);
    if (hp->dsa.kpool <= 0 || hp->idx.top_k <= 0 || hp->idx.top_k % hp->dsa.kpool)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: DSA k-pool %d and budget %d (a positive multiple of it) invalid", il,
                       hp->dsa.kpool, hp->idx.top_k);
    if (!(hp->dsa.k_norm_eps >= 0) || !isfinite(hp->dsa.k_norm_eps))
        return TK_FAIL(TK_ERR_INVALID, "layer %d: DSA key norm epsilon %g invalid", il, hp->dsa.k_norm_eps);
    if (!hp->dsa.full[il]) {   /* shared: some full indexer layer before it */
        int found = 0;
        for (int i = il - 1; i >= 0 && !found; i--) found = hp->dsa.full[i] && hp->layer_kinds[i] == hp->layer_kinds[il];
        if (!found) return TK_FAIL(TK_ERR_INVALID, "layer %d: a shared DSA layer needs a full indexer layer before it", il);
    }
    return TK_OK;
}

tk_status tk_dsa_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l, int64_t rq) {
    const tk_hparams * hp = &m->hp;
    if (!hp->dsa.full[il]) return TK_OK;
    const int64_t D = hp->n_embd, nI = hp->idx.n_head, dI = hp->idx.head_dim, kp = hp->dsa.kpool;
    char nm[128];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%d." s, il), nm)
    TK_CHECK(tk_bind_weight(m, tab, NAME("indexer.attn_q_b.weight"), TK_SHAPE(rq, nI * dI), 1, &l->idx_q));
    TK_CHECK(tk_bind_weight(m, tab, NAME("indexer.attn_k.weight"), TK_SHAPE(D, dI), 1, &l->idx_k));
    TK_CHECK(tk_bind_vec(m, tab, NAME("indexer.k_norm.weight"), TK_SHAPE(dI), 1, &l->idx_k_norm));
    TK_CHECK(tk_bind_vec(m, tab, NAME("indexer.k_norm.bias"), TK_SHAPE(dI), 1, &l->idx_k_norm_b));
    TK_CHECK(tk_bind_weight(m, tab, NAME("indexer.proj.weight"), TK_SHAPE(D, nI), 1, &l->idx_proj));
    TK_CHECK(tk_bind_weight(m, tab, NAME("indexer_compressor_gate.weight"), TK_SHAPE(D, dI), 1, &l->idx_gate));
    TK_CHECK(tk_bind_vec(m, tab, NAME("indexer_compressor_ape.weight"), TK_SHAPE(dI, kp), 1, &l->idx_ape));
#undef NAME
    return TK_OK;
}

/* pooled keys of the n_pool complete pools: pooled [n_pool, dI] */
static void dsa_pool(const float * kg, const int32_t * rows, int64_t stride, int32_t n_pool, const float * ape,
                     int32_t dI, int32_t kp, float * pooled) {
    for (int32_t p = 0; p < n_pool; p++) {
        float * pk = pooled + (size_t) p * dI;
        for (int32_t c = 0; c < dI; c++) {
            float mx = -INFINITY, sum = 0.0f, acc = 0.0f;
            for (int32_t j = 0; j < kp; j++) {
                const float * r = kg + (rows ? rows[p * kp + j] : p * kp + j) * stride;
                const float z = r[dI + c] + ape[(size_t) j * dI + c];
                if (z > mx) mx = z;
            }
            for (int32_t j = 0; j < kp; j++) {
                const float * r = kg + (rows ? rows[p * kp + j] : p * kp + j) * stride;
                const float e = expf(r[dI + c] + ape[(size_t) j * dI + c] - mx);
                sum += e;
                acc += e * r[c];
            }
            pk[c] = acc / sum;
        }
    }
}

/* the selection rows of n_q queries from the pooled keys of the sequence's n / kp complete pools
 * (pooled [n / kp, dI]): the scoring half of tk_dsa_select */
static tk_status dsa_select_pooled(const float * pooled, const int32_t * rows, int32_t n, const float * qI,
                                   const float * w, const int32_t * n_vis, int32_t n_q, int32_t nI, int32_t dI,
                                   int32_t kp, int32_t top_k, int32_t tail, uint8_t * sel, int64_t sel_stride) {
    const int32_t n_pool = n / kp, nb_top = top_k / kp;
    float * score = malloc(((size_t) n_pool + 1) * sizeof(float));
    tk_topk_elem * order = malloc(((size_t) n_pool + 1) * sizeof(tk_topk_elem));
    uint8_t * keep = malloc((size_t) n_pool + 1);
    tk_status st = TK_OK;
    if (!score || !order || !keep) { st = TK_FAIL(TK_ERR_NOMEM, "out of memory (DSA pools)"); goto done; }
    const float isq = (float) (1.0 / sqrt((double) dI));
    for (int32_t i = 0; i < n_q; i++) {
        uint8_t * row = sel + (size_t) i * sel_stride;
        const int32_t nv = n_vis[i] < n ? n_vis[i] : n, n_blk = nv / kp;
#define ROW(j) (rows ? rows[j] : (j))
        for (int32_t j = 0; j < nv; j++) row[ROW(j)] = 0;
        if (n_blk <= nb_top) {
            for (int32_t j = 0; j < n_blk * kp; j++) row[ROW(j)] = 1;
        } else {
            const float * q = qI + (size_t) i * nI * dI, * wi = w + (size_t) i * nI;
            for (int32_t p = 0; p < n_blk; p++) {
                const float * pk = pooled + (size_t) p * dI;
                float s = 0.0f;
                for (int32_t h = 0; h < nI; h++) {
                    float d = 0.0f;
                    for (int32_t c = 0; c < dI; c++) d += q[(size_t) h * dI + c] * pk[c];
                    d *= isq;
                    s += wi[h] * (d > 0.0f ? d : 0.0f);
                }
                score[p] = s;
            }
            tk_topk_torch(score, n_blk, nb_top, order, keep);
            for (int32_t p = 0; p < n_blk; p++)
                if (keep[p]) for (int32_t j = p * kp; j < (p + 1) * kp; j++) row[ROW(j)] = 1;
        }
        if (tail) for (int32_t j = n_blk * kp; j < nv; j++) row[ROW(j)] = 1;
#undef ROW
    }
done:
    free(score);
    free(order);
    free(keep);
    return st;
}

tk_status tk_dsa_select(const float * kg, const int32_t * rows, int64_t stride, int32_t n, const float * ape,
                        const float * qI, const float * w, const int32_t * n_vis, int32_t n_q, int32_t nI, int32_t dI,
                        int32_t kp, int32_t top_k, int32_t tail, uint8_t * sel, int64_t sel_stride) {
    if (n < 0 || n_q < 0 || nI <= 0 || dI <= 0 || kp <= 0 || top_k <= 0 || top_k % kp)
        return TK_FAIL(TK_ERR_INVALID, "DSA selection: bad sizes (kpool %d, top_k %d)", kp, top_k);
    const int32_t n_pool = n / kp;
    float * pooled = malloc(((size_t) n_pool * dI + 1) * sizeof(float));
    if (!pooled) return TK_FAIL(TK_ERR_NOMEM, "out of memory (DSA pools)");
    dsa_pool(kg, rows, stride, n_pool, ape, dI, kp, pooled);
    const tk_status st = dsa_select_pooled(pooled, rows, n, qI, w, n_vis, n_q, nI, dI, kp, top_k, tail, sel, sel_stride);
    free(pooled);
    return st;
}

/* ---- the pooled keys kept across calls ---- */

struct tk_dsa_pools {          /* one full layer's pools of one sequence, in the sequence's order */
    int32_t n_valid;           /* pools [0, n_valid) hold their pooled key */
    int32_t cap;               /* pools room: n_ctx / kp */
    float * pooled;            /* [cap, dI] */
    int32_t * cells;           /* [cap, kp] the cells each was pooled from */
    int32_t * pos_hi;          /* [cap] the last position among them */
};

/* one region per cache: pooled, cells and pos_hi of cap pools */
static size_t dsa_pools_bytes(int32_t cap, int32_t dI, int32_t kp) {
    return (size_t) cap * ((size_t) dI * sizeof(float) + (size_t) kp * sizeof(int32_t) + sizeof(int32_t));
}

/* layer il runs an indexer of its own (the MLA kind calls dsa.c on glm5-next's attention layers) */
static int dsa_runs(const tk_hparams * hp, int il) {
    return hp->dsa.full && hp->dsa.full[il] && hp->layer_kinds[il] == TK_LAYER_MLA;
}

static int dsa_has(const tk_hparams * hp) {
    for (int i = 0; i < hp->n_layer; i++)
        if (dsa_runs(hp, i)) return 1;
    return 0;
}

size_t tk_dsa_cache_bytes(const tk_model * m, int32_t n_ctx, int32_t n_seq, int32_t n_ubatch) {
    const tk_hparams * hp = &m->hp;
    if (!dsa_has(hp) || hp->dsa.kpool <= 0) return 0;
    size_t n_full = 0;
    for (int i = 0; i < hp->n_layer; i++) n_full += dsa_runs(hp, i);
    const int32_t cap = n_ctx / hp->dsa.kpool;
    return (size_t) n_ubatch * (size_t) n_ctx                                   /* the selection rows */
           + n_full * (size_t) n_seq * dsa_pools_bytes(cap, hp->idx.head_dim, hp->dsa.kpool)
           + (size_t) hp->n_layer * (size_t) n_seq * sizeof(struct tk_dsa_pools);
}

tk_status tk_dsa_cache_alloc(tk_context * ctx) {
    const tk_hparams * hp = &ctx->model->hp;
    if (!dsa_has(hp) || hp->dsa.kpool <= 0) return TK_OK;
    const int32_t n_seq = ctx->params.n_seq_max, n_ctx = ctx->params.n_ctx, kp = hp->dsa.kpool, dI = hp->idx.head_dim;
    const int32_t cap = n_ctx / kp;
    const size_t need = (size_t) ctx->params.n_ubatch * (size_t) n_ctx;
    ctx->dsa_sel = malloc(need ? need : 1);
    ctx->dsa_sel_cap = need;
    ctx->dsa_pools = calloc((size_t) hp->n_layer * (size_t) n_seq, sizeof(struct tk_dsa_pools));
    if (!ctx->dsa_sel || !ctx->dsa_pools) return TK_FAIL(TK_ERR_NOMEM, "out of memory (DSA selection and pools)");
    for (int il = 0; il < hp->n_layer; il++) {
        if (!dsa_runs(hp, il)) continue;
        for (int32_t s = 0; s < n_seq; s++) {
            struct tk_dsa_pools * c = &ctx->dsa_pools[(size_t) il * n_seq + s];
            char * region = malloc(dsa_pools_bytes(cap, dI, kp) + 1);
            if (!region) return TK_FAIL(TK_ERR_NOMEM, "out of memory (DSA pools)");
            c->cap = cap;
            c->pooled = (float *) (void *) region;
            c->cells = (int32_t *) (void *) (region + (size_t) cap * dI * sizeof(float));
            c->pos_hi = c->cells + (size_t) cap * kp;
        }
    }
    ctx->scratch_bytes += tk_dsa_cache_bytes(ctx->model, n_ctx, n_seq, ctx->params.n_ubatch);
    return TK_OK;
}

void tk_dsa_cache_free(tk_context * ctx) {
    if (!ctx->dsa_pools) return;
    const size_t n = (size_t) ctx->model->hp.n_layer * (size_t) ctx->params.n_seq_max;
    for (size_t i = 0; i < n; i++) free(ctx->dsa_pools[i].pooled);   /* the region's start */
    free(ctx->dsa_pools);
    ctx->dsa_pools = NULL;
}

int64_t tk_context_dsa_pooled(const tk_context * ctx) { return ctx ? ctx->dsa_pooled : 0; }

void tk_dsa_forget(tk_context * ctx, int32_t seq, int32_t p0) {
    if (!ctx || !ctx->dsa_pools) return;
    const int32_t n_seq = ctx->params.n_seq_max;
    for (int il = 0; il < ctx->model->hp.n_layer; il++)
        for (int32_t s = 0; s < n_seq; s++) {
            struct tk_dsa_pools * c = &ctx->dsa_pools[(size_t) il * n_seq + s];
            if (seq >= 0 && s != seq) continue;
            int32_t p = 0;
            while (p0 > 0 && p < c->n_valid && c->pos_hi[p] < p0) p++;   /* pools wholly before p0 stay */
            c->n_valid = p;
        }
}

/* the pooled keys of the sequence's first n_pool pools (rows: its cells in position order), kept
 * ones checked and reused, the others pooled and kept; returns the [n_pool, dI] array (the
 * cache's), or NULL where the context keeps none (the caller pools them itself) */
static const float * dsa_pools_of(tk_context * ctx, int il, int32_t seq, const tk_kv_view * kv, const int32_t * rows,
                                  int32_t n_pool, const float * ape) {
    if (!ctx->dsa_pools || seq < 0 || seq >= ctx->params.n_seq_max) return NULL;
    const tk_hparams * hp = &ctx->model->hp;
    struct tk_dsa_pools * c = &ctx->dsa_pools[(size_t) il * ctx->params.n_seq_max + seq];
    const int32_t kp = hp->dsa.kpool, dI = hp->idx.head_dim;
    if (n_pool > c->cap) return NULL;
    int32_t p = 0;
    while (p < c->n_valid && p < n_pool && !memcmp(c->cells + (size_t) p * kp, rows + (size_t) p * kp, (size_t) kp * sizeof(int32_t)))
        p++;
    c->n_valid = p;            /* the first pool whose cells changed, and all after it, are pooled again */
    if (p < n_pool) {
        dsa_pool(kv->ik, rows + (size_t) p * kp, kv->ik_dim, n_pool - p, ape, dI, kp, c->pooled + (size_t) p * dI);
        ctx->dsa_pooled += n_pool - p;
        for (int32_t q = p; q < n_pool; q++) {
            int32_t hi = 0;
            for (int32_t j = 0; j < kp; j++) {
                const int32_t cell = rows[(size_t) q * kp + j];
                c->cells[(size_t) q * kp + j] = cell;
                if (kv->pos[cell] > hi) hi = kv->pos[cell];
            }
            c->pos_hi[q] = hi;
        }
        c->n_valid = n_pool;
    }
    return c->pooled;
}

/* LayerNorm over n: (x - mean) / sqrt(var + eps) * w + b (biased variance, torch's) */
static void dsa_layer_norm(float * x, const float * w, const float * b, float eps, int32_t n) {
    float mean = 0.0f, var = 0.0f;
    for (int32_t i = 0; i < n; i++) mean += x[i];
    mean /= (float) n;
    for (int32_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    const float r = 1.0f / sqrtf(var / (float) n + eps);
    for (int32_t i = 0; i < n; i++) x[i] = (x[i] - mean) * r * w[i] + b[i];
}

/* the selection of a full layer: ctx->dsa_sel [U, n_cells] */
static tk_status dsa_full_select(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, const float * x,
                                 const float * qr, const tk_kv_view * kv) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t U = ub->n_tokens, nI = hp->idx.n_head, dI = hp->idx.head_dim, nst = ub->n_seq_tokens;
    float * qI = malloc((size_t) U * ((size_t) nI * dI + 2 * (size_t) dI + nI) * sizeof(float));
    int32_t * cells = malloc(((size_t) kv->n_cells + (size_t) nst + 1) * sizeof(int32_t));
    tk_status st = TK_OK;
    if (!qI || !cells) { st = TK_FAIL(TK_ERR_NOMEM, "out of memory (DSA indexer)"); goto done; }
    float * k = qI + (size_t) U * nI * dI, * g = k + (size_t) U * dI, * w = g + (size_t) U * dI;
    if ((st = tk_matmul(&l->idx_q, 0, qr, U, qI, &ctx->mm)) != TK_OK) goto done;
    if ((st = tk_matmul(&l->idx_k, 0, x, U, k, &ctx->mm)) != TK_OK) goto done;
    if ((st = tk_matmul(&l->idx_gate, 0, x, U, g, &ctx->mm)) != TK_OK) goto done;
    if ((st = tk_matmul(&l->idx_proj, 0, x, U, w, &ctx->mm)) != TK_OK) goto done;
    const float wscale = (float) (1.0 / sqrt((double) nI));
    for (int32_t t = 0; t < U; t++) {
        float * kt = k + (size_t) t * dI, * row = kv->ik + (size_t) kv->ub_cells[t] * kv->ik_dim;
        dsa_layer_norm(kt, l->idx_k_norm, l->idx_k_norm_b, hp->dsa.k_norm_eps, dI);
        memcpy(row, kt, (size_t) dI * sizeof(float));
        memcpy(row + dI, g + (size_t) t * dI, (size_t) dI * sizeof(float));
        for (int32_t h = 0; h < nI; h++) w[(size_t) t * nI + h] *= wscale;
    }
    /* the cells a token sees were claimed before the forward, so the whole ubatch's keys are in place */
    memset(ctx->dsa_sel, 0, (size_t) U * (size_t) kv->n_cells);
    int32_t * n_vis = cells + kv->n_cells;
    for (int32_t s = 0; s < ub->n_seqs && st == TK_OK; s++) {
        const int32_t t0 = s * nst;
        const int32_t n = tk_kv_seq_cells(kv, UINT64_C(1) << ub->seq[s], ub->pos[t0 + nst - 1], cells);
        for (int32_t i = 0; i < nst; i++) {
            int32_t v = 0;
            while (v < n && kv->pos[cells[v]] <= ub->pos[t0 + i]) v++;
            n_vis[i] = v;
        }
        const float * pooled = dsa_pools_of(ctx, il, ub->seq[s], kv, cells, n / hp->dsa.kpool, l->idx_ape);
        if (pooled)
            st = dsa_select_pooled(pooled, cells, n, qI + (size_t) t0 * nI * dI, w + (size_t) t0 * nI, n_vis, nst, nI,
                                   dI, hp->dsa.kpool, hp->idx.top_k, hp->dsa.select_tail,
                                   ctx->dsa_sel + (size_t) t0 * kv->n_cells, kv->n_cells);
        else
            st = tk_dsa_select(kv->ik, cells, kv->ik_dim, n, l->idx_ape, qI + (size_t) t0 * nI * dI, w + (size_t) t0 * nI,
                               n_vis, nst, nI, dI, hp->dsa.kpool, hp->idx.top_k, hp->dsa.select_tail,
                               ctx->dsa_sel + (size_t) t0 * kv->n_cells, kv->n_cells);
    }
done:
    free(qI);
    free(cells);
    return st;
}

tk_status tk_dsa_selection(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, const float * x,
                           const float * qr, const tk_kv_view * kv, const uint8_t ** sel) {
    const tk_hparams * hp = &ctx->model->hp;
    const size_t need = (size_t) ub->n_tokens * (size_t) kv->n_cells;
    *sel = NULL;
    if (!hp->dsa.full[il]) {   /* shared: the last full layer's selection of this ubatch (tk_dsa_check) */
        if (!ctx->dsa_sel || ctx->dsa_sel_n < need) return TK_FAIL(TK_ERR_STATE, "layer %d: no DSA selection to share", il);
        *sel = ctx->dsa_sel;
        return TK_OK;
    }
    if (!kv->ik || kv->ik_dim != 2 * hp->idx.head_dim) return TK_FAIL(TK_ERR_STATE, "layer %d has no DSA key cache", il);
    if (ctx->dsa_sel_cap < need) {
        uint8_t * p = realloc(ctx->dsa_sel, need);
        if (!p) return TK_FAIL(TK_ERR_NOMEM, "out of memory (DSA selection, %d x %d)", ub->n_tokens, kv->n_cells);
        ctx->dsa_sel = p;
        ctx->dsa_sel_cap = need;
    }
    ctx->dsa_sel_n = need;
    TK_CHECK(dsa_full_select(ctx, l, il, ub, x, qr, kv));
    *sel = ctx->dsa_sel;
    return TK_OK;
}
