/* memory_kv.c: the attention KV cache (tk_memory_kv), one implementation of tk_memory.
 *
 * n_cells cells; a cell holds one token's K and V for every attention layer (tensors
 * exist only for attention layers), its position, and the set of sequences that see it.
 * A layer kind may keep a third array in the same cells (tk_mixer_ops.kv_idx_dim: QSA's raw
 * indexer keys), so it can never disagree with K and V: every cell operation moves, drops,
 * copies and saves it with them.
 * Cells are claimed lowest index first, so a sequence's cells are in position order and
 * attention sums over them in the same order however the prompt was split.
 * ref: llama.cpp src/llama-kv-cache.{h,cpp} (cells with pos + seq set).
 *
 * Sliding-window cache (TK_KV_SWA: the layers hp.attn.swa_layers marks, window W = hp.attn.n_swa; a
 * token at p sees the cells with p - W < pos <= p): after each ubatch a sequence keeps only
 * its last n_keep = W + k positions (k: the speculative window, 0 without one) and the
 * W - 1 positions before each of its recurrent checkpoints (the window the token after a
 * checkpoint sees: what rolling back to it needs; the hybrid hands them over, kv_trim), so
 * it holds n_seq x (W + k + n_ckpt x (W - 1)) + n_ubatch cells at most, whatever n_ctx is
 * (ref: llama.cpp's iSWA cache, n_swa x n_seq + n_ubatch cells, and its server's SWA
 * checkpoints).  Whether a sequence can continue exactly after position q (it holds every
 * position of [q + 2 - W, q] the sequence has) is memory_iswa.c's can_end_at; a rollback
 * past what is held is refused there.  State files carry the window the next token sees and
 * the window before each recurrent checkpoint (w->ckpts), so a loaded state rolls back to them.
 */
#include <stdlib.h>
#include <string.h>

#include "layers/layer.h"

typedef struct {
    tk_memory base;
    int32_t n_cells;
    int32_t n_layer;
    int32_t * pos;             /* [n_cells] -1 = empty */
    uint64_t * seqs;           /* [n_cells] bit set of sequence ids */
    int32_t * ub_cells;        /* [n_ubatch] cells of the current ubatch's tokens */
    int32_t * kv_dim;          /* [n_layer] values of K (and of V) per cell, 0 = no tensors */
    uint8_t ** k;              /* [n_layer] -> [n_cells] rows of k_row bytes (kv_dim values of type_k) or NULL */
    uint8_t ** v;              /* [n_layer] -> [n_cells] rows of v_row bytes (v_dim values of type_v) or NULL */
    int32_t * v_dim;           /* [n_layer] values of V per cell: kv_dim, or the kind's kv_v_dim (MLA: 0, no V) */
    size_t * k_row, * v_row;   /* [n_layer] bytes of one cell's K row, V row (tk_kv_row_bytes) */
    int32_t type_k, type_v;    /* ggml types of the rows (tk_context_params.type_k, type_v) */
    int32_t * ik_dim;          /* [n_layer] floats of the third array per cell, 0 = none */
    float ** ik;               /* [n_layer] -> [n_cells, ik_dim] or NULL */
    const tk_model * model;    /* RoPE parameters for seq_add (K is stored rotated) */
    /* sliding window (TK_KV_SWA; all 0 / NULL otherwise) */
    int32_t window;            /* W */
    int32_t n_keep;            /* positions kept per sequence after a ubatch: W + k */
    int32_t n_seq, n_ubatch, n_ctx;
    int32_t spec_k, n_ckpt;    /* the speculative window and checkpoints per sequence the cells are sized for */
    uint32_t tag;              /* state section: TK_TAG_KV or TK_TAG_KV_SWA */
} tk_memory_kv;

static tk_memory_kv * KV(tk_memory * m) { return (tk_memory_kv *) m; }

static int32_t clamp_p1(int32_t p1) { return p1 < 0 ? INT32_MAX : p1; }

static void kv_clear(tk_memory * m) {
    tk_memory_kv * kv = KV(m);
    for (int32_t i = 0; i < kv->n_cells; i++) { kv->pos[i] = -1; kv->seqs[i] = 0; }
}

int32_t tk_kv_count(tk_memory * m, int32_t seq, int32_t lo, int32_t hi) {
    tk_memory_kv * kv = KV(m);
    int32_t n = 0;
    for (int32_t i = 0; i < kv->n_cells; i++)
        n += (kv->seqs[i] >> seq & 1) && kv->pos[i] >= lo && kv->pos[i] <= hi;
    return n;
}

/* sliding window: seq keeps its positions >= last + 1 - n_keep and those in the window
 * [q + 2 - W, q] of each position ck[0..n_ck) (its recurrent checkpoints); the rest goes */
static void kv_trim(tk_memory * m, int32_t seq, int32_t last, const int32_t * ck, int32_t n_ck) {
    tk_memory_kv * kv = KV(m);
    if (!kv->window || seq < 0 || seq >= TK_MAX_SEQ) return;
    const uint64_t bit = UINT64_C(1) << seq;
    const int32_t lo = last + 1 - kv->n_keep;
    for (int32_t i = 0; i < kv->n_cells; i++) {
        if (!(kv->seqs[i] & bit) || kv->pos[i] >= lo) continue;
        int keep = 0;
        for (int32_t j = 0; j < n_ck && !keep; j++) keep = kv->pos[i] <= ck[j] && kv->pos[i] >= ck[j] + 2 - kv->window;
        if (keep) continue;
        kv->seqs[i] &= ~bit;
        if (!kv->seqs[i]) kv->pos[i] = -1;
    }
}

/* any range can be dropped from a KV cache (whether a sliding-window one can continue after
 * it is memory_iswa.c's can_end_at) */
static bool kv_can_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    (void) m; (void) seq; (void) p0; (void) p1;
    return true;
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

/* pos += delta on seq's cells in [p0, p1).  K was stored after its RoPE at the old position,
 * so it is rotated on by delta in the model's mode: NORM (adjacent pairs, tk_rope_norm) or
 * NEOX (pairs (i, i + n_rot/2), tk_rope_neox; qwen35's M-RoPE is NEOX on text), on the first
 * n_rot dims of each of the layer's kv_dim / head_dim heads (partial rotary: the rest of the
 * head is untouched); no RoPE (Jamba): positions only.  Rotations compose, so the result
 * equals a fresh rotation at pos + delta up to float rounding; V is never rotated.
 * ref: llama.cpp llama_kv_cache::seq_add + build_graph_shift (ggml_rope_ext of K by the
 * per-cell shift, same rope type as the model). */
static void kv_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    tk_memory_kv * kv = KV(m);
    if (delta == 0) return;
    if (p0 < 0) p0 = 0;
    p1 = clamp_p1(p1);
    const uint64_t bit = UINT64_C(1) << seq;
    const tk_hparams * hp = &kv->model->hp;
    const int rotate = hp->attn.use_rope && hp->attn.n_rot > 0;
    float * tmp = NULL;        /* a typed cache: one K row dequantized, rotated, quantized back (llama.cpp's shift) */
    if (kv->type_k != TK_GGML_F32) {
        int32_t w = 0;
        for (int32_t l = 0; l < kv->n_layer; l++) w = kv->kv_dim[l] > w ? kv->kv_dim[l] : w;
        tmp = malloc((size_t) (w > 0 ? w : 1) * sizeof(float));
        if (!tmp) return;      /* out of memory: positions and keys left as they were */
    }
    for (int32_t i = 0; i < kv->n_cells; i++) {
        if (!(kv->seqs[i] & bit) || kv->pos[i] < p0 || kv->pos[i] >= p1) continue;
        kv->pos[i] += delta;
        for (int32_t l = 0; hp->mla.rope && l < kv->n_layer; l++) {   /* Ling 3's MLA: the cached k_rot after c */
            if (!kv->k[l] || hp->layer_kinds[l] != TK_LAYER_MLA) continue;
            /* a typed latent row: the whole row dequantized, k_rot rotated, the row quantized back (llama.cpp's
             * shift of its MLA K cache: ggml_rope_ext on the dequantized view, stored with ggml_cpy) */
            uint8_t * row = kv->k[l] + (size_t) i * kv->k_row[l];
            if (tmp) tk_type_traits_get(kv->type_k)->to_float(row, tmp, kv->kv_dim[l]);
            float * k = (tmp ? tmp : (float *) (void *) row) + hp->mla.kv_lora_rank;
            /* rope.scaling.*'s angles, without the yarn attn_factor (the shift composes rotations, as tk_attention_rope_shift) */
            const tk_rope_scaling sc = tk_rope_scaling_of(&hp->attn, hp->mla.dr, hp->attn.rope_freq_base, 0);
            tk_rope_norm_scaled(k, 1, hp->mla.dr, hp->mla.dr, delta, hp->attn.rope_freq_base, &sc);
            if (tmp) tk_type_traits_get(kv->type_k)->from_float(tmp, row, kv->kv_dim[l]);
        }
        for (int32_t l = 0; rotate && l < kv->n_layer; l++) {
            if (!kv->k[l] || hp->layer_kinds[l] == TK_LAYER_MLA) continue;   /* MLA's rows: the loop above */
            uint8_t * row = kv->k[l] + (size_t) i * kv->k_row[l];
            float * k = tmp ? tmp : (float *) (void *) row;
            if (tmp) tk_type_traits_get(kv->type_k)->to_float(row, tmp, kv->kv_dim[l]);
            tk_attention_rope_shift(hp, l, k, kv->kv_dim[l] / hp->attn.head_dim, hp->attn.head_dim, delta);   /* the layer's RoPE */
            if (tmp) tk_type_traits_get(kv->type_k)->from_float(tmp, row, kv->kv_dim[l]);
        }
    }
    free(tmp);
}

static tk_status kv_can_fit(tk_memory * m, int32_t n_tokens) {
    tk_memory_kv * kv = KV(m);
    if (kv->window) return TK_OK;   /* sized for every ubatch: n_seq x n_keep held + n_ubatch new (trimmed after each) */
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
                const size_t d = kv->k_row[l];
                memcpy(kv->k[l] + (size_t) j * d, kv->k[l] + (size_t) i * d, d);
                const size_t dv = kv->v_row[l];
                if (dv) memcpy(kv->v[l] + (size_t) j * dv, kv->v[l] + (size_t) i * dv, dv);
                if (kv->ik[l]) {
                    const size_t e = (size_t) kv->ik_dim[l];
                    memcpy(kv->ik[l] + (size_t) j * e, kv->ik[l] + (size_t) i * e, e * sizeof(float));
                }
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
    if (kv->ik) for (int32_t l = 0; l < kv->n_layer; l++) free(kv->ik[l]);
    free(kv->k);
    free(kv->v);
    free(kv->ik);
    free(kv->ik_dim);
    free(kv->kv_dim);
    free(kv->v_dim);
    free(kv->k_row);
    free(kv->v_row);
    free(kv->pos);
    free(kv->seqs);
    free(kv->ub_cells);
    free(kv);
}

/* ---- views, checkpoints (none needed: any range can be dropped), report ---------------- */

static tk_status kv_view(tk_memory * m, int il, tk_kv_view * out) {
    tk_memory_kv * kv = KV(m);
    if (il < 0 || il >= kv->n_layer || !kv->k[il]) return TK_FAIL(TK_ERR_STATE, "layer %d has no KV cache", il);
    *out = (tk_kv_view) {kv->k[il], kv->v[il], kv->pos, kv->seqs, kv->ub_cells, kv->n_cells, kv->kv_dim[il],
                         kv->ik[il], kv->ik_dim[il], kv->window, kv->type_k, kv->type_v, kv->k_row[il], kv->v_row[il]};
    return TK_OK;
}

static tk_status kv_swa_resize(tk_memory_kv * kv);

static tk_status kv_set_checkpoints(tk_memory * m, int32_t n_per_seq, int32_t every) {
    tk_memory_kv * kv = KV(m);
    if (n_per_seq < 0 || every < 0) return TK_FAIL(TK_ERR_INVALID, "checkpoints = %d, interval = %d must be >= 0", n_per_seq, every);
    if (!kv->window) return TK_OK;   /* a full KV cache rolls back without snapshots */
    kv->n_ckpt = n_per_seq;          /* a sliding one keeps the window before each recurrent checkpoint */
    return kv_swa_resize(kv);
}
static void kv_checkpoint(tk_memory * m, int32_t seq) { (void) m; (void) seq; }
static int32_t kv_checkpoints(tk_memory * m, int32_t seq, int32_t * pos, int32_t cap) { (void) m; (void) seq; (void) pos; (void) cap; return 0; }
static int32_t kv_ckpt_next(tk_memory * m, int32_t pos) { (void) m; (void) pos; return INT32_MAX; }
/* sliding window: each sequence of the ubatch keeps its last n_keep positions */
static void kv_after_ubatch(tk_memory * m, const tk_ubatch * ub) {
    tk_memory_kv * kv = KV(m);
    if (!kv->window) return;
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        kv_trim(m, ub->seq[s], ub->pos[(s + 1) * ub->n_seq_tokens - 1], NULL, 0);
    }
}

static void kv_report(tk_memory * m, tk_memory_report * r) {
    tk_memory_kv * kv = KV(m);
    for (int32_t l = 0; l < kv->n_layer; l++) {
        const uint64_t kb = ((uint64_t) kv->k_row[l] + (uint64_t) kv->ik_dim[l] * sizeof(float)) * (uint64_t) kv->n_cells;
        const uint64_t vb = (uint64_t) kv->v_row[l] * (uint64_t) kv->n_cells;
        r->kv_k_bytes += kb;
        r->kv_v_bytes += vb;
        r->kv_bytes += kb + vb;
    }
}

/* ---- state: section KV (layout in state.c) ------------------------------------------------ */

/* the positions a sliding-window cache writes for each sequence: the window the next token
 * sees, [last + 2 - W, last], and the window before each of its recurrent checkpoints
 * (w->ckpts, when there is one), [ck + 2 - W, ck] */
typedef struct {
    int32_t last[TK_MAX_SEQ];
    int32_t * ck[TK_MAX_SEQ];  /* checkpoint positions of each sequence (NULL: none) */
    int32_t n_ck[TK_MAX_SEQ];
} kv_wsel;

static void kv_wsel_init(tk_memory_kv * kv, tk_memory * m, const tk_wbuf * w, kv_wsel * sel) {
    memset(sel, 0, sizeof *sel);
    for (int32_t s = 0; s < kv->n_seq && kv->window; s++) {
        sel->last[s] = kv_seq_pos_max(m, s);
        if (!w->ckpts) continue;
        const int32_t n = w->ckpts->checkpoints(w->ckpts, s, NULL, 0);
        if (n <= 0 || !(sel->ck[s] = malloc((size_t) n * sizeof(int32_t)))) continue;   /* out of memory: the window only */
        sel->n_ck[s] = w->ckpts->checkpoints(w->ckpts, s, sel->ck[s], n) < n ? 0 : n;
    }
}

static void kv_wsel_free(kv_wsel * sel) {
    for (int32_t s = 0; s < TK_MAX_SEQ; s++) free(sel->ck[s]);
}

/* is cell i written for seq (-1: any)?  A sliding-window cache writes only what the next
 * token of one of the cell's sequences sees, pos >= last + 2 - W, and the windows before
 * their checkpoints (kv_wsel) */
static int kv_writes(tk_memory_kv * kv, int32_t i, int32_t seq, const kv_wsel * sel) {
    if (kv->pos[i] < 0 || (seq >= 0 && !(kv->seqs[i] >> seq & 1))) return 0;
    if (!kv->window) return 1;
    const int32_t p = kv->pos[i];
    for (int32_t s = 0; s < kv->n_seq; s++) {
        if ((seq >= 0 && s != seq) || !(kv->seqs[i] >> s & 1)) continue;
        if (p >= sel->last[s] + 2 - kv->window) return 1;
        for (int32_t j = 0; j < sel->n_ck[s]; j++)
            if (p <= sel->ck[s][j] && p >= sel->ck[s][j] + 2 - kv->window) return 1;
    }
    return 0;
}

/* a layer's word of the section header: its K width, and the K and V types above it (f32: 0,
 * so a float32 cache writes the width alone; state.c's layout) */
static uint32_t kv_width_word(const tk_memory_kv * kv, int32_t l) {
    if (!kv->kv_dim[l]) return 0;
    return (uint32_t) kv->kv_dim[l] | (uint32_t) kv->type_k << 20 | (uint32_t) kv->type_v << 26;
}

/* a KV cache type's name as -ctk / -ctv spell it (llama.cpp's, ggml_type_name) */
static const char * kv_type_name(uint32_t t) {
    switch (t) {
        case TK_GGML_F32: return "f32";
        case TK_GGML_F16: return "f16";
        case TK_GGML_BF16: return "bf16";
        case TK_GGML_Q8_0: return "q8_0";
        case TK_GGML_Q4_0: return "q4_0";
        default: return "?";
    }
}

static void kv_state_write(tk_memory * m, tk_wbuf * w, int32_t seq, float * tmp) {
    tk_memory_kv * kv = KV(m);
    (void) tmp;
    kv_wsel sel;
    kv_wsel_init(kv, m, w, &sel);
    const uint64_t at = tk_section_begin(w, kv->tag);
    uint32_t n = 0;
    for (int32_t i = 0; i < kv->n_cells; i++) n += kv_writes(kv, i, seq, &sel);
    tk_put_u32(w, (uint32_t) kv->n_layer);
    tk_put_u32(w, n);
    for (int32_t l = 0; l < kv->n_layer; l++) tk_put_u32(w, kv_width_word(kv, l));
    for (int32_t i = 0; i < kv->n_cells; i++) {
        if (!kv_writes(kv, i, seq, &sel)) continue;
        tk_put_i32(w, kv->pos[i]);
        tk_put_u32(w, 0);
        tk_put_u64(w, seq < 0 ? kv->seqs[i] : 1);
        for (int32_t l = 0; l < kv->n_layer; l++) {
            if (!kv->kv_dim[l]) continue;
            tk_put(w, kv->k[l] + (size_t) i * kv->k_row[l], kv->k_row[l]);
            if (kv->v_dim[l]) tk_put(w, kv->v[l] + (size_t) i * kv->v_row[l], kv->v_row[l]);
            if (kv->ik_dim[l]) tk_put(w, kv->ik[l] + (size_t) i * kv->ik_dim[l], (size_t) kv->ik_dim[l] * sizeof(float));
        }
    }
    tk_section_end(w, at);
    kv_wsel_free(&sel);
}

/* the section's header: layer count and widths must be this model's; room for its cells */
static tk_status kv_read_header(tk_memory_kv * kv, tk_rbuf * q, const tk_state_rd * rd, uint32_t * nc) {
    uint32_t nl;
    if (!tk_get(q, &nl, 4) || !tk_get(q, nc, 4)) return TK_STATE_BAD("KV section truncated");
    if ((int32_t) nl != kv->n_layer) return TK_STATE_BAD("KV section for %u layers, the model has %d", nl, kv->n_layer);
    for (int32_t l = 0; l < kv->n_layer; l++) {
        uint32_t d;
        if (!tk_get(q, &d, 4)) return TK_STATE_BAD("KV section truncated");
        const uint32_t want = kv_width_word(kv, l);
        if (d != want && (d & 0xfffff) == (want & 0xfffff))
            return TK_FAIL(TK_ERR_INVALID, "state: KV cache types K %s, V %s in the file, this context's are K %s, V %s "
                           "(-ctk / -ctv must match the session's)", kv_type_name(d >> 20 & 63), kv_type_name(d >> 26),
                           kv_type_name((uint32_t) kv->type_k), kv_type_name((uint32_t) kv->type_v));
        if ((int32_t) (d & 0xfffff) != kv->kv_dim[l]) return TK_STATE_BAD("KV layer %d width %u, the model has %d", l, d & 0xfffff, kv->kv_dim[l]);
    }
    int32_t room = 0;
    for (int32_t i = 0; i < kv->n_cells; i++) room += kv->pos[i] < 0 || (rd->seq >= 0 && kv->seqs[i] == rd->dst_bit);
    if (rd->seq < 0) room = kv->n_cells;
    if ((int64_t) *nc > room) return TK_FAIL(TK_ERR_NOMEM, "state: %u KV cells, this context has room for %d (raise n_ctx)", *nc, room);
    return TK_OK;
}

static tk_status kv_state_read(tk_memory * m, uint32_t tag, tk_rbuf * q, tk_state_rd * rd) {
    tk_memory_kv * kv = KV(m);
    if (tag != kv->tag)
        return TK_STATE_BAD("a %s section, but this memory has none", tag == TK_TAG_RS ? "recurrent" : tag == TK_TAG_CKPT ? "checkpoint" :
                            tag == TK_TAG_KV_SWA ? "sliding-window KV" : "full KV");
    if (rd->seen[tag]++) return TK_STATE_BAD("two %sKV sections", kv->window ? "sliding-window " : "");
    int32_t * last = kv->window ? rd->swa_last : rd->kv_last;

    uint32_t nc;
    TK_CHECK(kv_read_header(kv, q, rd, &nc));
    int32_t cell = 0;
    for (uint32_t i = 0; i < nc; i++) {
        int32_t pos;
        uint32_t pad;
        uint64_t set;
        if (!tk_get(q, &pos, 4) || !tk_get(q, &pad, 4) || !tk_get(q, &set, 8)) return TK_STATE_BAD("KV cell %u truncated", i);
        if (pos < 0) return TK_STATE_BAD("KV cell %u has position %d", i, pos);
        if (rd->seq < 0 ? (!set || (set & ~rd->all_seqs)) : set != 1)
            return TK_STATE_BAD("KV cell %u has sequence set %#llx (n_seq_max = %d)", i, (unsigned long long) set, rd->n_seq);
        if (rd->seq >= 0) set = rd->dst_bit;
        for (int32_t s = 0; s < rd->n_seq; s++) {
            if (!(set >> s & 1)) continue;
            if (pos <= last[s]) return TK_STATE_BAD("KV cell %u: position %d of sequence %d after %d (out of order)", i, pos, s, last[s]);
            last[s] = pos;
        }
        if (rd->apply) {
            while (kv->pos[cell] >= 0) cell++;
            kv->pos[cell] = pos;
            kv->seqs[cell] = set;
        }
        for (int32_t l = 0; l < kv->n_layer; l++) {
            if (!kv->kv_dim[l]) continue;
            const size_t n = kv->k_row[l];
            const size_t nv = kv->v_dim[l] ? kv->v_row[l] : 0;
            if (!tk_get(q, rd->apply ? kv->k[l] + (size_t) cell * n : NULL, n) ||
                (nv && !tk_get(q, rd->apply ? kv->v[l] + (size_t) cell * nv : NULL, nv)))
                return TK_STATE_BAD("KV cell %u truncated", i);
            if (kv->ik_dim[l] && !tk_get(q, rd->apply ? kv->ik[l] + (size_t) cell * kv->ik_dim[l] : NULL,
                                         (size_t) kv->ik_dim[l] * sizeof(float)))
                return TK_STATE_BAD("KV cell %u truncated", i);
        }
    }
    return TK_OK;
}

static tk_status kv_state_read_end(tk_memory * m, const tk_state_rd * rd) {
    tk_memory_kv * kv = KV(m);
    return rd->seen[kv->tag] ? TK_OK : TK_STATE_BAD("no %sKV section", kv->window ? "sliding-window " : "");
}

/* sliding window: room for the speculative window's k more positions and the checkpoints'
 * windows per sequence (the cells grow, keeping their contents; they never shrink) */
static tk_status kv_swa_resize(tk_memory_kv * kv) {
    const int32_t n = tk_kv_swa_cells(kv->window, kv->n_ctx, kv->n_seq, kv->n_ubatch, kv->spec_k, kv->n_ckpt);
    if (n > kv->n_cells) {
        int32_t * pos = realloc(kv->pos, (size_t) n * sizeof(int32_t));
        if (pos) kv->pos = pos;
        uint64_t * seqs = realloc(kv->seqs, (size_t) n * sizeof(uint64_t));
        if (seqs) kv->seqs = seqs;
        if (!pos || !seqs) return TK_FAIL(TK_ERR_NOMEM, "out of memory growing the sliding-window KV cache");
        for (int32_t l = 0; l < kv->n_layer; l++) {
            if (!kv->k[l]) continue;
            uint8_t * kk = realloc(kv->k[l], (size_t) n * kv->k_row[l]);
            if (kk) kv->k[l] = kk;
            uint8_t * vv = kv->v_dim[l] ? realloc(kv->v[l], (size_t) n * kv->v_row[l]) : NULL;
            if (vv) kv->v[l] = vv;
            if (!kk || (kv->v_dim[l] && !vv)) return TK_FAIL(TK_ERR_NOMEM, "out of memory growing the sliding-window KV cache");
        }
        for (int32_t i = kv->n_cells; i < n; i++) { kv->pos[i] = -1; kv->seqs[i] = 0; }
        kv->n_cells = n;
    }
    kv->n_keep = kv->window + kv->spec_k;
    return TK_OK;
}

static tk_status kv_set_spec_window(tk_memory * m, int32_t k, uint32_t flags) {
    (void) flags;
    KV(m)->spec_k = k;
    return kv_swa_resize(KV(m));
}

int32_t tk_kv_swa_cells(int32_t n_swa, int32_t n_ctx, int32_t n_seq, int32_t n_ubatch, int32_t k, int32_t n_ckpt) {
    const int64_t n = (int64_t) n_seq * ((int64_t) n_swa + k + (int64_t) n_ckpt * (n_swa - 1)) + n_ubatch;
    return n < n_ctx ? (int32_t) n : n_ctx;
}

static size_t kv_state_tmp_floats(tk_memory * m) { (void) m; return 0; }

static void kv_prefault(tk_memory * m) {
    tk_memory_kv * kv = KV(m);
    for (int32_t l = 0; l < kv->n_layer; l++) {
        tk_touch_pages(kv->k[l], (size_t) kv->n_cells * kv->k_row[l]);
        tk_touch_pages(kv->v[l], (size_t) kv->n_cells * kv->v_row[l]);
        tk_touch_pages(kv->ik[l], (size_t) kv->n_cells * (size_t) kv->ik_dim[l] * sizeof(float));
    }
}

static const tk_memory KV_METHODS = {
    .clear = kv_clear,
    .can_seq_rm = kv_can_seq_rm,
    .seq_rm = kv_seq_rm,
    .seq_cp = kv_seq_cp,
    .seq_keep = kv_seq_keep,
    .seq_pos_min = kv_seq_pos_min,
    .seq_pos_max = kv_seq_pos_max,
    .can_fit = kv_can_fit,
    .prepare = kv_prepare,
    .free = kv_free,
    .can_seq_add = kv_can_seq_add,
    .seq_add = kv_seq_add,
    .kv_view = kv_view,
    .rs_view = tk_memory_no_view_rs,
    .set_checkpoints = kv_set_checkpoints,
    .checkpoint = kv_checkpoint,
    .checkpoints = kv_checkpoints,
    .ckpt_next = kv_ckpt_next,
    .after_ubatch = kv_after_ubatch,
    .report = kv_report,
    .prefault = kv_prefault,
    .state_write = kv_state_write,
    .state_read = kv_state_read,
    .state_read_end = kv_state_read_end,
    .state_tmp_floats = kv_state_tmp_floats,
    .set_spec_window = NULL,   /* no recurrent state: a KV cache rolls back without snapshots */
    .seq_rm_end = NULL,
    .can_end_at = NULL,        /* memory_iswa.c's: it compares with the full cache */
    .trim = kv_trim,
};

size_t tk_kv_row_bytes(int32_t type, int32_t n) {
    const tk_type_traits * tt = tk_type_traits_get(type);
    return tt && tt->blck_size ? (size_t) (n / tt->blck_size) * (size_t) tt->type_size : 0;
}

tk_status tk_kv_types_check(const tk_model * model, int32_t type_k, int32_t type_v) {
    const int32_t ts[2] = {type_k, type_v};
    static const char * const names[2] = {"type_k", "type_v"};
    const tk_hparams * hp = &model->hp;
    for (int i = 0; i < 2; i++) {
        const int32_t t = ts[i];
        if (t != TK_GGML_F32 && t != TK_GGML_F16 && t != TK_GGML_BF16 && t != TK_GGML_Q8_0 && t != TK_GGML_Q4_0)
            return TK_FAIL(TK_ERR_INVALID, "%s = %d is not a KV cache type (f32, f16, bf16, q8_0, q4_0)", names[i], t);
        if (t == TK_GGML_F32) continue;
        const char * tn = kv_type_name((uint32_t) t);
        const int64_t blk = tk_type_traits_get(t)->blck_size;
        for (int32_t l = 0; l < hp->n_layer; l++) {
            const tk_mixer_ops * ops = tk_mixer_ops_of(hp->layer_kinds[l]);
            if (!ops || !ops->kv_dim) continue;
            if (ops->kv_v_dim) {  /* MLA: one latent row [c | k_rot] of kv_dim values in type_k, V its first
                                     kv_lora_rank values (mixer_mla.c); no V rows, so type_v stores nothing */
                const int32_t wd = ops->kv_dim(model, l);
                if (i == 0 && wd % blk)
                    return TK_FAIL(TK_ERR_UNSUPPORTED, "KV cache type %s: layer %d (%s) latent row of %d values (kv_lora_rank "
                                   "%d + rope %d) is not a multiple of its block (%lld values)", tn, l, ops->name, wd,
                                   hp->mla.kv_lora_rank, hp->mla.dr, (long long) blk);
                continue;
            }
            if (hp->attn.head_dim % blk)
                return TK_FAIL(TK_ERR_UNSUPPORTED, "KV cache type %s: head_dim %d is not a multiple of its block (%lld values)",
                               tn, hp->attn.head_dim, (long long) blk);
        }
    }
    return TK_OK;
}

void tk_memory_kv_estimate(const tk_model * model, int32_t n_ctx, int32_t n_ubatch, int32_t n_seq, int32_t n_ckpt, int32_t k,
                           int32_t type_k, int32_t type_v, tk_memory_report * r) {
    const tk_hparams * hp = &model->hp;
    /* a sliding-window layer's cells: the sliding cache's, as tk_memory_kv_new_sel makes it and
     * kv_set_checkpoints / kv_set_spec_window grow it (memory_iswa.c holds both caches) */
    const int32_t swa_cells = hp->attn.swa_layers ? tk_kv_swa_cells(hp->attn.n_swa, n_ctx, n_seq, n_ubatch, k, n_ckpt) : 0;
    for (int32_t l = 0; l < hp->n_layer; l++) {   /* K and V of kv_dim, and the third array of kv_idx_dim */
        const tk_mixer_ops * ops = tk_mixer_ops_of(hp->layer_kinds[l]);
        if (!ops || !ops->kv_dim) continue;
        const int32_t n_cells = hp->attn.swa_layers && hp->attn.swa_layers[l] ? swa_cells : n_ctx;
        const int32_t ik = ops->kv_idx_dim ? ops->kv_idx_dim(model, l) : 0;
        const uint64_t k_cell = (uint64_t) tk_kv_row_bytes(type_k, ops->kv_dim(model, l)) + (uint64_t) (ik > 0 ? ik : 0) * sizeof(float);
        const uint64_t v_cell = (uint64_t) tk_kv_row_bytes(type_v, ops->kv_v_dim ? ops->kv_v_dim(model, l) : ops->kv_dim(model, l));
        const uint64_t kb = tk_sat_mul(k_cell, (uint64_t) n_cells), vb = tk_sat_mul(v_cell, (uint64_t) n_cells);
        r->kv_k_bytes = tk_sat_add(r->kv_k_bytes, kb);
        r->kv_v_bytes = tk_sat_add(r->kv_v_bytes, vb);
        r->kv_bytes = tk_sat_add(r->kv_bytes, tk_sat_add(kb, vb));
    }
}

tk_status tk_memory_kv_new(const tk_model * model, int32_t n_cells, int32_t n_ubatch, int32_t type_k, int32_t type_v,
                           tk_memory ** out) {
    return tk_memory_kv_new_sel(model, n_cells, n_ubatch, 1, TK_KV_ALL, type_k, type_v, out);
}

tk_status tk_memory_kv_new_sel(const tk_model * model, int32_t n_cells, int32_t n_ubatch, int32_t n_seq, int sel,
                               int32_t type_k, int32_t type_v, tk_memory ** out) {
    const tk_hparams * hp = &model->hp;
    *out = NULL;
    TK_CHECK(tk_kv_types_check(model, type_k, type_v));
    const int32_t n_ctx = n_cells;
    if (sel == TK_KV_SWA) {
        if (!hp->attn.swa_layers || hp->attn.n_swa <= 0) return TK_FAIL(TK_ERR_INVALID, "sliding-window KV cache for a model without a window");
        n_cells = tk_kv_swa_cells(hp->attn.n_swa, n_cells, n_seq, n_ubatch, 0, 0);
    }
    if (n_cells <= 0) return TK_FAIL(TK_ERR_INVALID, "n_ctx = %d must be > 0 for a model with attention layers", n_cells);
    tk_memory_kv * kv = calloc(1, sizeof *kv);
    if (!kv) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    kv->base = KV_METHODS;
    kv->model = model;
    kv->tag = sel == TK_KV_SWA ? TK_TAG_KV_SWA : TK_TAG_KV;
    kv->n_seq = n_seq;
    kv->n_ubatch = n_ubatch;
    kv->n_ctx = n_ctx;
    kv->type_k = type_k;
    kv->type_v = type_v;
    if (sel == TK_KV_SWA) {
        kv->base.set_spec_window = kv_set_spec_window;
        kv->window = hp->attn.n_swa;
        kv->n_keep = hp->attn.n_swa;
    }
    kv->n_cells = n_cells;
    kv->n_layer = hp->n_layer;
    kv->pos = malloc((size_t) n_cells * sizeof(int32_t));
    kv->seqs = calloc((size_t) n_cells, sizeof(uint64_t));
    kv->ub_cells = malloc((size_t) n_ubatch * sizeof(int32_t));
    kv->kv_dim = calloc((size_t) hp->n_layer, sizeof(int32_t));
    kv->v_dim = calloc((size_t) hp->n_layer, sizeof(int32_t));
    kv->k = calloc((size_t) hp->n_layer, sizeof(uint8_t *));
    kv->v = calloc((size_t) hp->n_layer, sizeof(uint8_t *));
    kv->k_row = calloc((size_t) hp->n_layer, sizeof(size_t));
    kv->v_row = calloc((size_t) hp->n_layer, sizeof(size_t));
    kv->ik_dim = calloc((size_t) hp->n_layer, sizeof(int32_t));
    kv->ik = calloc((size_t) hp->n_layer, sizeof(float *));
    if (!kv->pos || !kv->seqs || !kv->ub_cells || !kv->kv_dim || !kv->v_dim || !kv->k || !kv->v || !kv->ik_dim || !kv->ik ||
        !kv->k_row || !kv->v_row) {
        kv_free(&kv->base);
        return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    }
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const tk_mixer_ops * ops = tk_mixer_ops_of(hp->layer_kinds[l]);
        if (!ops || !ops->kv_dim) continue;
        const int sliding = hp->attn.swa_layers && hp->attn.swa_layers[l];
        if ((sel == TK_KV_FULL && sliding) || (sel == TK_KV_SWA && !sliding)) continue;
        kv->kv_dim[l] = ops->kv_dim(model, l);
        kv->v_dim[l] = ops->kv_v_dim ? ops->kv_v_dim(model, l) : kv->kv_dim[l];
        kv->k_row[l] = tk_kv_row_bytes(type_k, kv->kv_dim[l]);
        kv->v_row[l] = tk_kv_row_bytes(type_v, kv->v_dim[l]);
        size_t n = (size_t) n_cells * kv->k_row[l], nv = (size_t) n_cells * kv->v_row[l];
        kv->k[l] = calloc(n, 1);
        kv->v[l] = nv ? calloc(nv, 1) : NULL;
        if (!kv->k[l] || (nv && !kv->v[l])) {
            kv_free(&kv->base);
            return TK_FAIL(TK_ERR_NOMEM, "out of memory allocating the KV cache (%zu bytes per layer)", n + nv);
        }
        if (ops->kv_idx_dim && ops->kv_idx_dim(model, l) > 0) {   /* 0: none on this layer (DSA's shared layers) */
            kv->ik_dim[l] = ops->kv_idx_dim(model, l);
            kv->ik[l] = calloc((size_t) n_cells * (size_t) kv->ik_dim[l], sizeof(float));
            if (!kv->ik[l]) {
                kv_free(&kv->base);
                return TK_FAIL(TK_ERR_NOMEM, "out of memory allocating the indexer key cache");
            }
        }
    }
    kv_clear(&kv->base);
    *out = &kv->base;
    return TK_OK;
}
