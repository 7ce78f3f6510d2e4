/* memory_hybrid.c: owns one KV cache and one recurrent cache (tk_memory_hybrid).
 *
 * Every operation goes to both children; seq_rm asks BOTH whether they can before
 * changing either, so a refusal (a partial removal of a recurrent state) changes nothing.
 * Positions: seq_pos_min is the larger of the children's, seq_pos_max the smaller
 * (what both memories hold).  The forward pass routes each layer to its child by kind.
 * ref: llama.cpp src/llama-memory-hybrid.{h,cpp}.
 */
#include <stdlib.h>

#include "tk_internal.h"

typedef struct {
    tk_memory base;
    tk_memory * kv;            /* attention layers */
    tk_memory * rs;            /* recurrent layers */
    int32_t n_seq;             /* n_seq_max */
} tk_memory_hybrid;

static tk_memory_hybrid * HY(tk_memory * m) { return (tk_memory_hybrid *) m; }
#define KVM(m) (HY(m)->kv)
#define RSM(m) (HY(m)->rs)

static void hy_clear(tk_memory * m) { KVM(m)->clear(KVM(m)); RSM(m)->clear(RSM(m)); }

/* both children can.  With a sliding-window KV cache (can_end_at) the question is whether it
 * can continue from where the recurrent child ends each sequence (p0 - 1, or a checkpoint
 * before p0: the sliding cache keeps the window before each checkpoint) */
static bool hy_can_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    if (!RSM(m)->can_seq_rm(RSM(m), seq, p0, p1)) return false;
    if (!KVM(m)->can_end_at || !RSM(m)->seq_rm_end) return KVM(m)->can_seq_rm(KVM(m), seq, p0, p1);
    const int32_t lo = seq < 0 ? 0 : seq, hi = seq < 0 ? HY(m)->n_seq : seq + 1;
    for (int32_t s = lo; s < hi; s++)
        if (!KVM(m)->can_end_at(KVM(m), s, RSM(m)->seq_rm_end(RSM(m), s, p0, p1))) return false;
    return true;
}

/* The recurrent child decides (can_seq_rm); when it rolls a sequence back to a checkpoint
 * at position q < p0 - 1, the KV child drops [q + 1, p1) too (p1 lies past the sequence's
 * end in that case, so that is everything after q): both end at q and the caller re-feeds
 * the gap [q + 1, p0). */
static void hy_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    RSM(m)->seq_rm(RSM(m), seq, p0, p1);
    const int32_t lo = seq < 0 ? 0 : seq, hi = seq < 0 ? HY(m)->n_seq : seq + 1;
    for (int32_t s = lo; s < hi; s++) {
        const int32_t q = RSM(m)->seq_pos_max(RSM(m), s);
        const int32_t kp0 = q >= 0 && q + 1 < (p0 < 0 ? 0 : p0) ? q + 1 : p0;
        KVM(m)->seq_rm(KVM(m), s, kp0, p1);
    }
}

static bool hy_can_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    return KVM(m)->can_seq_add(KVM(m), seq, p0, p1, delta) && RSM(m)->can_seq_add(RSM(m), seq, p0, p1, delta);
}

static void hy_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    KVM(m)->seq_add(KVM(m), seq, p0, p1, delta);
    RSM(m)->seq_add(RSM(m), seq, p0, p1, delta);
}

/* dst becomes a copy of src in both children: the recurrent state is whole, so the range is
 * ignored and dst's own cells go first (else dst's KV cells would outlive its replaced state). */
static void hy_seq_cp(tk_memory * m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    (void) p0; (void) p1;
    if (src == dst) return;
    KVM(m)->seq_rm(KVM(m), dst, 0, -1);
    KVM(m)->seq_cp(KVM(m), src, dst, 0, -1);
    RSM(m)->seq_cp(RSM(m), src, dst, 0, -1);
}

static void hy_seq_keep(tk_memory * m, int32_t seq) { KVM(m)->seq_keep(KVM(m), seq); RSM(m)->seq_keep(RSM(m), seq); }

static int32_t hy_seq_pos_min(tk_memory * m, int32_t seq) {
    int32_t a = KVM(m)->seq_pos_min(KVM(m), seq), b = RSM(m)->seq_pos_min(RSM(m), seq);
    return a > b ? a : b;
}

static int32_t hy_seq_pos_max(tk_memory * m, int32_t seq) {
    int32_t a = KVM(m)->seq_pos_max(KVM(m), seq), b = RSM(m)->seq_pos_max(RSM(m), seq);
    return a < b ? a : b;
}

static tk_status hy_can_fit(tk_memory * m, int32_t n_tokens) {
    TK_CHECK(KVM(m)->can_fit(KVM(m), n_tokens));
    return RSM(m)->can_fit(RSM(m), n_tokens);
}

static tk_status hy_prepare(tk_memory * m, const tk_ubatch * ub) {
    TK_CHECK(KVM(m)->prepare(KVM(m), ub));
    return RSM(m)->prepare(RSM(m), ub);
}

static void hy_free(tk_memory * m) {
    if (!m) return;
    KVM(m)->free(KVM(m));
    RSM(m)->free(RSM(m));
    free(m);
}

/* ---- views route by layer; checkpoints are the recurrent child's; report and state both ---- */

static tk_status hy_kv_view(tk_memory * m, int il, tk_kv_view * out) { return KVM(m)->kv_view(KVM(m), il, out); }
static tk_status hy_rs_view(tk_memory * m, int il, tk_rs_view * out) { return RSM(m)->rs_view(RSM(m), il, out); }

static tk_status hy_set_checkpoints(tk_memory * m, int32_t n, int32_t every) {
    TK_CHECK(RSM(m)->set_checkpoints(RSM(m), n, every));
    return KVM(m)->set_checkpoints(KVM(m), n, every);   /* a sliding-window cache makes room for their windows */
}
static void hy_checkpoint(tk_memory * m, int32_t seq) { RSM(m)->checkpoint(RSM(m), seq); }
static int32_t hy_checkpoints(tk_memory * m, int32_t seq, int32_t * pos, int32_t cap) { return RSM(m)->checkpoints(RSM(m), seq, pos, cap); }
static int32_t hy_ckpt_next(tk_memory * m, int32_t pos) { return RSM(m)->ckpt_next(RSM(m), pos); }
/* the recurrent child's periodic checkpoints, then a sliding-window KV cache trims each
 * sequence of the ubatch, keeping the window before each of its checkpoints */
static void hy_after_ubatch(tk_memory * m, const tk_ubatch * ub) {
    RSM(m)->after_ubatch(RSM(m), ub);
    if (!KVM(m)->trim) { KVM(m)->after_ubatch(KVM(m), ub); return; }
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        int32_t buf[64], * ck = buf;
        const int32_t n = RSM(m)->checkpoints(RSM(m), ub->seq[s], buf, 64);
        if (n > 64 && (ck = malloc((size_t) n * sizeof(int32_t))) != NULL) RSM(m)->checkpoints(RSM(m), ub->seq[s], ck, n);
        if (!ck) ck = buf;   /* out of memory: the 64 latest are kept, an older rollback is refused */
        KVM(m)->trim(KVM(m), ub->seq[s], ub->pos[(s + 1) * ub->n_seq_tokens - 1], ck, n > 64 && ck == buf ? 64 : n);
        if (ck != buf) free(ck);
    }
}

static void hy_prefault(tk_memory * m) { KVM(m)->prefault(KVM(m)); RSM(m)->prefault(RSM(m)); }
static void hy_report(tk_memory * m, tk_memory_report * r) { KVM(m)->report(KVM(m), r); RSM(m)->report(RSM(m), r); }

/* a sliding-window KV cache writes the window before each checkpoint of the recurrent child
 * too (the cells kv_trim keeps for it), so a loaded state rolls back to them as the saved one did */
static void hy_state_write(tk_memory * m, tk_wbuf * w, int32_t seq, float * tmp) {
    tk_memory * const saved = w->ckpts;
    w->ckpts = RSM(m);
    KVM(m)->state_write(KVM(m), w, seq, tmp);
    w->ckpts = saved;
    RSM(m)->state_write(RSM(m), w, seq, tmp);
}

static tk_status hy_state_read(tk_memory * m, uint32_t tag, tk_rbuf * q, tk_state_rd * rd) {
    tk_memory * child = tag == TK_TAG_KV || tag == TK_TAG_KV_SWA ? KVM(m) : RSM(m);
    return child->state_read(child, tag, q, rd);
}

/* both children's sections present, and every sequence ends at the same position in both */
static tk_status hy_state_read_end(tk_memory * m, const tk_state_rd * rd) {
    TK_CHECK(KVM(m)->state_read_end(KVM(m), rd));
    TK_CHECK(RSM(m)->state_read_end(RSM(m), rd));
    for (int32_t s = 0; s < rd->n_seq; s++)
        if (rd->kv_last[s] != rd->rs_pos[s])
            return TK_STATE_BAD("sequence %d ends at %d in the KV cache but at %d in the recurrent state", s, rd->kv_last[s], rd->rs_pos[s]);
    return TK_OK;
}

static size_t hy_state_tmp_floats(tk_memory * m) {
    const size_t a = KVM(m)->state_tmp_floats(KVM(m)), b = RSM(m)->state_tmp_floats(RSM(m));
    return a > b ? a : b;
}

/* the speculative window is the recurrent child's; a KV cache rolls back without one */
static tk_status hy_set_spec_window(tk_memory * m, int32_t k, uint32_t flags) {
    TK_CHECK(RSM(m)->set_spec_window(RSM(m), k, flags));
    /* a sliding-window KV cache keeps k more positions per sequence */
    return KVM(m)->set_spec_window ? KVM(m)->set_spec_window(KVM(m), k, flags) : TK_OK;
}

static bool hy_can_end_at(tk_memory * m, int32_t seq, int32_t q) {
    return !KVM(m)->can_end_at || KVM(m)->can_end_at(KVM(m), seq, q);
}

/* a memory without KV / recurrent layers: what asking it for a view answers */
tk_status tk_memory_no_view_kv(tk_memory * m, int il, tk_kv_view * out) {
    (void) m; (void) out;
    return TK_FAIL(TK_ERR_STATE, "layer %d: this memory has no KV cache", il);
}

tk_status tk_memory_no_view_rs(tk_memory * m, int il, tk_rs_view * out) {
    (void) m; (void) out;
    return TK_FAIL(TK_ERR_STATE, "layer %d: this memory has no recurrent state", il);
}

static const tk_memory HY_METHODS = {
    .clear = hy_clear,
    .can_seq_rm = hy_can_seq_rm,
    .seq_rm = hy_seq_rm,
    .seq_cp = hy_seq_cp,
    .seq_keep = hy_seq_keep,
    .seq_pos_min = hy_seq_pos_min,
    .seq_pos_max = hy_seq_pos_max,
    .can_fit = hy_can_fit,
    .prepare = hy_prepare,
    .free = hy_free,
    .can_seq_add = hy_can_seq_add,
    .seq_add = hy_seq_add,
    .kv_view = hy_kv_view,
    .rs_view = hy_rs_view,
    .set_checkpoints = hy_set_checkpoints,
    .checkpoint = hy_checkpoint,
    .checkpoints = hy_checkpoints,
    .ckpt_next = hy_ckpt_next,
    .after_ubatch = hy_after_ubatch,
    .report = hy_report,
    .prefault = hy_prefault,
    .state_write = hy_state_write,
    .state_read = hy_state_read,
    .state_read_end = hy_state_read_end,
    .state_tmp_floats = hy_state_tmp_floats,
    .set_spec_window = hy_set_spec_window,
    .seq_rm_end = NULL,
    .can_end_at = hy_can_end_at,
    .trim = NULL,
};

tk_status tk_memory_hybrid_new(tk_memory * kv, tk_memory * rs, int32_t n_seq, tk_memory ** out) {
    *out = NULL;
    tk_memory_hybrid * h = calloc(1, sizeof *h);
    if (!h) {
        kv->free(kv);
        rs->free(rs);
        return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    }
    h->base = HY_METHODS;
    h->kv = kv;
    h->rs = rs;
    h->n_seq = n_seq;
    *out = &h->base;
    return TK_OK;
}
