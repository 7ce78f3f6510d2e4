/* memory_kv.c: the attention KV cache (tk_memory_kv), one implementation of tk_memory.
 *
 * n_cells cells; a cell holds one token's K and V for every attention layer (tensors
 * exist only for attention layers), its position, and the set of sequences that see it.
 * Cells are claimed lowest index first, so a sequence's cells are in position order and
 * attention sums over them in the same order however the prompt was split.
 * ref: llama.cpp src/llama-kv-cache.{h,cpp} (cells with pos + seq set).
 */
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"

static tk_memory_kv * KV(tk_memory * m) { return (tk_memory_kv *) m; }

static int32_t clamp_p1(int32_t p1) { return p1 < 0 ? INT32_MAX : p1; }

static void kv_clear(tk_memory * m) {
    tk_memory_kv * kv = KV(m);
    for (int32_t i = 0; i < kv->n_cells; i++) { kv->pos[i] = -1; kv->seqs[i] = 0; }
}

static bool kv_can_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    (void) m; (void) seq; (void) p0; (void) p1;
    return true;                /* any range can be dropped from a KV cache */
}

static void kv_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    tk_memory_kv * kv = KV(m);
    if (p0 < 0) p0 = 0;
    p1 = clamp_p1(p1);
    for (int32_t i = 0; i < kv->n_cells; i++) {
        if (kv->pos[i] < p0 || kv->pos[i] >= p1) continue;
        if (seq < 0) kv->seqs[i] = 0;
        else kv->seqs[i] &= ~(UINT64_C(1) << seq);
        if (!kv->seqs[i]) kv->pos[i] = -1;
    }
}

static void kv_seq_cp(tk_memory * m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    tk_memory_kv * kv = KV(m);
    if (src == dst) return;
    if (p0 < 0) p0 = 0;
    p1 = clamp_p1(p1);
    for (int32_t i = 0; i < kv->n_cells; i++)
        if (kv->pos[i] >= p0 && kv->pos[i] < p1 && (kv->seqs[i] >> src & 1)) kv->seqs[i] |= UINT64_C(1) << dst;
}

static void kv_seq_keep(tk_memory * m, int32_t seq) {
    tk_memory_kv * kv = KV(m);
    for (int32_t i = 0; i < kv->n_cells; i++) {
        kv->seqs[i] &= UINT64_C(1) << seq;
        if (!kv->seqs[i]) kv->pos[i] = -1;
    }
}

static int32_t kv_seq_pos_min(tk_memory * m, int32_t seq) {
    tk_memory_kv * kv = KV(m);
    int32_t r = -1;
    for (int32_t i = 0; i < kv->n_cells; i++)
        if ((kv->seqs[i] >> seq & 1) && (r < 0 || kv->pos[i] < r)) r = kv->pos[i];
    return r;
}

static int32_t kv_seq_pos_max(tk_memory * m, int32_t seq) {
    tk_memory_kv * kv = KV(m);
    int32_t r = -1;
    for (int32_t i = 0; i < kv->n_cells; i++)
        if ((kv->seqs[i] >> seq & 1) && kv->pos[i] > r) r = kv->pos[i];
    return r;
}

/* A shift is refused (nothing changes) when a cell in range is shared with another sequence
 * (the shift would move it for that sequence too), a position would become negative, or the
 * shifted positions would collide with the sequence's cells outside the range. */
static bool kv_can_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    tk_memory_kv * kv = KV(m);
    if (seq < 0 || seq >= TK_MAX_SEQ) return false;
    if (p0 < 0) p0 = 0;
    p1 = clamp_p1(p1);
    const uint64_t bit = UINT64_C(1) << seq;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int32_t i = 0; i < kv->n_cells; i++) {
        if (!(kv->seqs[i] & bit) || kv->pos[i] < p0 || kv->pos[i] >= p1) continue;
        if (kv->seqs[i] != bit) return false;
        const int64_t q = (int64_t) kv->pos[i] + delta;
        if (q < 0 || q >= INT32_MAX) return false;
        if (q < lo) lo = q;
        if (q > hi) hi = q;
    }
    if (lo > hi || delta == 0) return true;
    for (int32_t i = 0; i < kv->n_cells; i++) {
        if (!(kv->seqs[i] & bit) || (kv->pos[i] >= p0 && kv->pos[i] < p1)) continue;
        if (kv->pos[i] >= lo && kv->pos[i] <= hi) return false;
    }
    return true;
}

/* pos += delta on seq's cells in [p0, p1); K was stored rotated by its position, so with
 * RoPE it is rotated on by delta (rotations compose: equal to a fresh rotation up to float
 * rounding).  ref: llama.cpp llama_kv_cache::seq_add + the K-shift graph. */
static void kv_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    tk_memory_kv * kv = KV(m);
    if (delta == 0) return;
    if (p0 < 0) p0 = 0;
    p1 = clamp_p1(p1);
    const uint64_t bit = UINT64_C(1) << seq;
    const tk_hparams * hp = &kv->model->hp;
    for (int32_t i = 0; i < kv->n_cells; i++) {
        if (!(kv->seqs[i] & bit) || kv->pos[i] < p0 || kv->pos[i] >= p1) continue;
        kv->pos[i] += delta;
        if (!hp->use_rope || hp->n_rot <= 0) continue;
        for (int32_t l = 0; l < kv->n_layer; l++)
            if (kv->k[l]) tk_rope_norm(kv->k[l] + (size_t) i * kv->kv_dim[l], kv->kv_dim[l] / hp->head_dim, hp->head_dim,
                                       hp->n_rot, delta, hp->rope_freq_base);
    }
}

static tk_status kv_can_fit(tk_memory * m, int32_t n_tokens) {
    tk_memory_kv * kv = KV(m);
    int32_t free_cells = 0;
    for (int32_t i = 0; i < kv->n_cells; i++) free_cells += kv->pos[i] < 0;
    if (free_cells < n_tokens)
        return TK_FAIL(TK_ERR_NOMEM, "KV cache full: %d tokens need cells, %d of %d free (raise n_ctx)",
                       n_tokens, free_cells, kv->n_cells);
    return TK_OK;
}

/* Move the used cells to the front, keeping their index order (so each sequence's cells
 * stay in position order); afterwards every free cell follows every used one. */
static void kv_compact(tk_memory_kv * kv) {
    int32_t j = 0;
    for (int32_t i = 0; i < kv->n_cells; i++) {
        if (kv->pos[i] < 0) continue;
        if (i != j) {
            kv->pos[j] = kv->pos[i];
            kv->seqs[j] = kv->seqs[i];
            for (int32_t l = 0; l < kv->n_layer; l++) {
                if (!kv->k[l]) continue;
                const size_t d = (size_t) kv->kv_dim[l];
                memcpy(kv->k[l] + (size_t) j * d, kv->k[l] + (size_t) i * d, d * sizeof(float));
                memcpy(kv->v[l] + (size_t) j * d, kv->v[l] + (size_t) i * d, d * sizeof(float));
            }
            kv->pos[i] = -1;
            kv->seqs[i] = 0;
        }
        j++;
    }
}

/* Claim one cell per ubatch token and tag it with pos and seq.  A token's cell is the first
 * free one after every cell its sequence already has, so a sequence's cells are always in
 * position order and attention sums over them in the same order as a fresh run would
 * (bit-identical after removals, copies and restores).  When no such cell is left the cache
 * is compacted first (can_fit guarantees the room). */
static tk_status kv_prepare(tk_memory * m, const tk_ubatch * ub) {
    tk_memory_kv * kv = KV(m);
    TK_CHECK(kv_can_fit(m, ub->n_tokens));
    for (int pass = 0; pass < 2; pass++) {
        int32_t t = 0;
        for (int32_t s = 0; s < ub->n_seqs; s++) {
            const uint64_t bit = UINT64_C(1) << ub->seq[s];
            int32_t c = 0;
            for (int32_t i = kv->n_cells - 1; i >= 0; i--)
                if (kv->pos[i] >= 0 && (kv->seqs[i] & bit)) { c = i + 1; break; }
            for (int32_t i = 0; i < ub->n_seq_tokens; i++, t++) {
                while (c < kv->n_cells && kv->pos[c] >= 0) c++;
                if (c >= kv->n_cells) break;
                kv->pos[c] = ub->pos[t];
                kv->seqs[c] = bit;
                kv->ub_cells[t] = c;
            }
            if (t < (s + 1) * ub->n_seq_tokens) break;
        }
        if (t == ub->n_tokens) return TK_OK;
        for (int32_t i = 0; i < t; i++) { kv->pos[kv->ub_cells[i]] = -1; kv->seqs[kv->ub_cells[i]] = 0; }
        kv_compact(kv);
    }
    return TK_FAIL(TK_ERR_STATE, "KV cache: no cell order for the ubatch");   /* not reached */
}

static void kv_free(tk_memory * m) {
    tk_memory_kv * kv = KV(m);
    if (!kv) return;
    if (kv->k) for (int32_t l = 0; l < kv->n_layer; l++) free(kv->k[l]);
    if (kv->v) for (int32_t l = 0; l < kv->n_layer; l++) free(kv->v[l]);
    free(kv->k);
    free(kv->v);
    free(kv->kv_dim);
    free(kv->pos);
    free(kv->seqs);
    free(kv->ub_cells);
    free(kv);
}

tk_status tk_memory_kv_new(const tk_model * model, int32_t n_cells, int32_t n_ubatch, tk_memory_kv ** out) {
    const tk_hparams * hp = &model->hp;
    *out = NULL;
    if (n_cells <= 0) return TK_FAIL(TK_ERR_INVALID, "n_ctx = %d must be > 0 for a model with attention layers", n_cells);
    tk_memory_kv * kv = calloc(1, sizeof *kv);
    if (!kv) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    kv->base = (tk_memory){kv_clear, kv_can_seq_rm, kv_seq_rm, kv_seq_cp, kv_seq_keep, kv_seq_pos_min,
                           kv_seq_pos_max, kv_can_fit, kv_prepare, kv_free, kv_can_seq_add, kv_seq_add};
    kv->model = model;
    kv->n_cells = n_cells;
    kv->n_layer = hp->n_layer;
    kv->pos = malloc((size_t) n_cells * sizeof(int32_t));
    kv->seqs = calloc((size_t) n_cells, sizeof(uint64_t));
    kv->ub_cells = malloc((size_t) n_ubatch * sizeof(int32_t));
    kv->kv_dim = calloc((size_t) hp->n_layer, sizeof(int32_t));
    kv->k = calloc((size_t) hp->n_layer, sizeof(float *));
    kv->v = calloc((size_t) hp->n_layer, sizeof(float *));
    if (!kv->pos || !kv->seqs || !kv->ub_cells || !kv->kv_dim || !kv->k || !kv->v) {
        kv_free(&kv->base);
        return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    }
    for (int32_t l = 0; l < hp->n_layer; l++) {
        if (hp->layer_kinds[l] != TK_LAYER_ATTENTION) continue;
        kv->kv_dim[l] = hp->n_head_kv[l] * hp->head_dim;
        size_t n = (size_t) n_cells * (size_t) kv->kv_dim[l];
        kv->k[l] = calloc(n, sizeof(float));
        kv->v[l] = calloc(n, sizeof(float));
        if (!kv->k[l] || !kv->v[l]) {
            kv_free(&kv->base);
            return TK_FAIL(TK_ERR_NOMEM, "out of memory allocating the KV cache (%zu floats per layer)", 2 * n);
        }
    }
    kv_clear(&kv->base);
    *out = kv;
    return TK_OK;
}
