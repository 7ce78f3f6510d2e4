/* memory_iswa.c: a full KV cache and a sliding-window KV cache as one (tk_memory_iswa).
 *
 * A model with sliding-window attention layers (hp.attn.swa_layers) keeps their K and V in a
 * sliding-window cache (memory_kv.c, TK_KV_SWA: each sequence's last W + k positions) and
 * every other attention layer's in a full one (n_ctx cells; with no such layer it holds
 * positions only).  Every sequence operation goes to both; a tail removal is refused when the
 * sliding one no longer holds the window the next token would see (can_seq_rm, can_end_at:
 * every position of [q + 2 - W, q] the full cache has, the sliding one has too).
 * Positions are the full cache's.  State: the full cache's KV section, then the sliding
 * one's (TK_TAG_KV_SWA: the window, and the one before each recurrent checkpoint when the
 * hybrid passes its recurrent child in w->ckpts); both must end every sequence at the same position.
 * ref: llama.cpp src/llama-kv-cache-iswa.{h,cpp} (kv_base + kv_swa).
 */
#include <stdlib.h>

#include "tk_internal.h"

typedef struct {
    tk_memory base;
    tk_memory * full;          /* the non-sliding attention layers (positions of every sequence) */
    tk_memory * swa;           /* the sliding-window layers */
    const int32_t * swa_layers;/* [n_layer] of the model */
    int32_t n_layer, n_swa;
} tk_memory_iswa;

static tk_memory_iswa * IS(tk_memory * m) { return (tk_memory_iswa *) m; }
#define FM(m) (IS(m)->full)
#define SM(m) (IS(m)->swa)

static void is_clear(tk_memory * m) { FM(m)->clear(FM(m)); SM(m)->clear(SM(m)); }

/* seq can continue exactly after position q: the sliding cache holds every position of
 * [q + 2 - W, q] the sequence has (the full cache has them all) */
static bool is_can_end_at(tk_memory * m, int32_t seq, int32_t q) {
    if (q < 0 || seq < 0) return true;
    const int32_t lo = q + 2 - IS(m)->n_swa > 0 ? q + 2 - IS(m)->n_swa : 0;
    return tk_kv_count(SM(m), seq, lo, q) == tk_kv_count(FM(m), seq, lo, q);
}

/* a tail [p0, end) of a sequence goes only when the sliding cache can continue from p0 - 1 */
static bool is_can_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    if (!FM(m)->can_seq_rm(FM(m), seq, p0, p1) || !SM(m)->can_seq_rm(SM(m), seq, p0, p1)) return false;
    if (p0 <= 0) return true;
    if (p1 < 0) p1 = INT32_MAX;
    const int32_t lo = seq < 0 ? 0 : seq, hi = seq < 0 ? TK_MAX_SEQ : seq + 1;
    for (int32_t s = lo; s < hi; s++) {
        const int32_t last = FM(m)->seq_pos_max(FM(m), s);
        if (p0 < p1 && p0 <= last && p1 > last && !is_can_end_at(m, s, p0 - 1)) return false;
    }
    return true;
}
static void is_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    FM(m)->seq_rm(FM(m), seq, p0, p1);
    SM(m)->seq_rm(SM(m), seq, p0, p1);
}
static void is_seq_cp(tk_memory * m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    FM(m)->seq_cp(FM(m), src, dst, p0, p1);
    SM(m)->seq_cp(SM(m), src, dst, p0, p1);
}
static void is_seq_keep(tk_memory * m, int32_t seq) { FM(m)->seq_keep(FM(m), seq); SM(m)->seq_keep(SM(m), seq); }
static int32_t is_seq_pos_min(tk_memory * m, int32_t seq) { return FM(m)->seq_pos_min(FM(m), seq); }
static int32_t is_seq_pos_max(tk_memory * m, int32_t seq) { return FM(m)->seq_pos_max(FM(m), seq); }
static tk_status is_can_fit(tk_memory * m, int32_t n_tokens) {
    TK_CHECK(FM(m)->can_fit(FM(m), n_tokens));
    return SM(m)->can_fit(SM(m), n_tokens);
}
static tk_status is_prepare(tk_memory * m, const tk_ubatch * ub) {
    TK_CHECK(FM(m)->prepare(FM(m), ub));
    return SM(m)->prepare(SM(m), ub);
}
static void is_free(tk_memory * m) {
    if (!m) return;
    FM(m)->free(FM(m));
    SM(m)->free(SM(m));
    free(m);
}
static bool is_can_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    return FM(m)->can_seq_add(FM(m), seq, p0, p1, delta) && SM(m)->can_seq_add(SM(m), seq, p0, p1, delta);
}
static void is_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    FM(m)->seq_add(FM(m), seq, p0, p1, delta);
    SM(m)->seq_add(SM(m), seq, p0, p1, delta);
}
static tk_status is_kv_view(tk_memory * m, int il, tk_kv_view * out) {
    const int sliding = il >= 0 && il < IS(m)->n_layer && IS(m)->swa_layers[il];
    tk_memory * c = sliding ? SM(m) : FM(m);
    return c->kv_view(c, il, out);
}
/* checkpoints: a KV cache needs none (memory_kv.c's no-ops) */
/* the sliding cache makes room for the checkpoints' windows */
static tk_status is_set_checkpoints(tk_memory * m, int32_t n, int32_t every) {
    TK_CHECK(FM(m)->set_checkpoints(FM(m), n, every));
    return SM(m)->set_checkpoints(SM(m), n, every);
}
static void is_checkpoint(tk_memory * m, int32_t seq) { (void) m; (void) seq; }
static int32_t is_checkpoints(tk_memory * m, int32_t seq, int32_t * pos, int32_t cap) { (void) m; (void) seq; (void) pos; (void) cap; return 0; }
static int32_t is_ckpt_next(tk_memory * m, int32_t pos) { (void) m; (void) pos; return INT32_MAX; }
static void is_after_ubatch(tk_memory * m, const tk_ubatch * ub) {
    FM(m)->after_ubatch(FM(m), ub);
    SM(m)->after_ubatch(SM(m), ub);
}
static void is_prefault(tk_memory * m) { FM(m)->prefault(FM(m)); SM(m)->prefault(SM(m)); }
static void is_report(tk_memory * m, tk_memory_report * r) { FM(m)->report(FM(m), r); SM(m)->report(SM(m), r); }
static void is_state_write(tk_memory * m, tk_wbuf * w, int32_t seq, float * tmp) {
    FM(m)->state_write(FM(m), w, seq, tmp);
    SM(m)->state_write(SM(m), w, seq, tmp);
}
static tk_status is_state_read(tk_memory * m, uint32_t tag, tk_rbuf * q, tk_state_rd * rd) {
    tk_memory * c = tag == TK_TAG_KV_SWA ? SM(m) : FM(m);
    return c->state_read(c, tag, q, rd);
}
/* both sections, and each sequence ends at the same position in both */
static tk_status is_state_read_end(tk_memory * m, const tk_state_rd * rd) {
    TK_CHECK(FM(m)->state_read_end(FM(m), rd));
    TK_CHECK(SM(m)->state_read_end(SM(m), rd));
    for (int32_t s = 0; s < rd->n_seq; s++)
        if (rd->kv_last[s] != rd->swa_last[s])
            return TK_STATE_BAD("sequence %d ends at %d in the KV cache but at %d in the sliding-window KV cache", s,
                                rd->kv_last[s], rd->swa_last[s]);
    return TK_OK;
}
static size_t is_state_tmp_floats(tk_memory * m) { (void) m; return 0; }
static tk_status is_set_spec_window(tk_memory * m, int32_t k, uint32_t flags) { return SM(m)->set_spec_window(SM(m), k, flags); }
static void is_trim(tk_memory * m, int32_t seq, int32_t last, const int32_t * ck, int32_t n_ck) {
    SM(m)->trim(SM(m), seq, last, ck, n_ck);
}

static const tk_memory IS_METHODS = {
    .clear = is_clear,
    .can_seq_rm = is_can_seq_rm,
    .seq_rm = is_seq_rm,
    .seq_cp = is_seq_cp,
    .seq_keep = is_seq_keep,
    .seq_pos_min = is_seq_pos_min,
    .seq_pos_max = is_seq_pos_max,
    .can_fit = is_can_fit,
    .prepare = is_prepare,
    .free = is_free,
    .can_seq_add = is_can_seq_add,
    .seq_add = is_seq_add,
    .kv_view = is_kv_view,
    .rs_view = tk_memory_no_view_rs,
    .set_checkpoints = is_set_checkpoints,
    .checkpoint = is_checkpoint,
    .checkpoints = is_checkpoints,
    .ckpt_next = is_ckpt_next,
    .after_ubatch = is_after_ubatch,
    .report = is_report,
    .prefault = is_prefault,
    .state_write = is_state_write,
    .state_read = is_state_read,
    .state_read_end = is_state_read_end,
    .state_tmp_floats = is_state_tmp_floats,
    .set_spec_window = is_set_spec_window,
    .seq_rm_end = NULL,
    .can_end_at = is_can_end_at,
    .trim = is_trim,
};

tk_status tk_memory_iswa_new(const tk_model * model, tk_memory * full, tk_memory * swa, tk_memory ** out) {
    *out = NULL;
    tk_memory_iswa * h = calloc(1, sizeof *h);
    if (!h) {
        full->free(full);
        swa->free(swa);
        return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    }
    h->base = IS_METHODS;
    h->full = full;
    h->swa = swa;
    h->swa_layers = model->hp.attn.swa_layers;
    h->n_layer = model->hp.n_layer;
    h->n_swa = model->hp.attn.n_swa;
    *out = &h->base;
    return TK_OK;
}
