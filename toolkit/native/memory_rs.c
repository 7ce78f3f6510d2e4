/* memory_rs.c: the recurrent state cache (tk_memory_rs), one implementation of tk_memory.
 *
 * n_cells = n_seq_max cells.  A cell holds, for every recurrent layer, one conv state
 * [conv_dim, d_conv-1] and one SSM state [d_inner, d_state] (Mamba-2: [H, P, N]); the
 * kernels update it in place.  Each sequence points at its tail cell; seq_cp shares a cell
 * (copy on write: a shared cell is copied to a free one before the sequence advances).
 * A cell claimed for a sequence with no state is zeroed, and so is a cell no sequence uses
 * any more: position 0 starts from zero state.
 *
 * A state cannot be partly rolled back token by token.  Checkpoints make a tail removal
 * possible: each sequence keeps up to n_ckpt snapshots (whole state + the position it
 * holds), taken at the end of a multi-token decode call, every `ckpt_every` positions and
 * on request.  seq_rm(seq, p0, end) restores the newest snapshot at a position < p0 and
 * the caller re-feeds the gap (seq_pos_max says where the sequence now ends); with no such
 * snapshot the removal is refused and nothing changes.  When all n_ckpt slots are full the
 * snapshot whose removal leaves the smallest gap between its neighbours (the previous one
 * and the new one) is replaced, ties the oldest: the kept ones stay spread over the history.
 * ref: llama.cpp src/llama-memory-recurrent.{h,cpp} (cells, tails, copy on write).
 */
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"

static tk_memory_rs * RS(tk_memory * m) { return (tk_memory_rs *) m; }

static int popcount64(uint64_t v) { int n = 0; while (v) { v &= v - 1; n++; } return n; }

static void cell_zero(tk_memory_rs * rs, int32_t c) {
    for (int32_t l = 0; l < rs->n_layer; l++) {
        if (!rs->conv[l]) continue;
        memset(rs->conv[l] + (size_t) c * rs->conv_n, 0, rs->conv_n * sizeof(float));
        memset(rs->ssm[l] + (size_t) c * rs->ssm_n, 0, rs->ssm_n * sizeof(float));
    }
}

static void cell_copy(tk_memory_rs * rs, int32_t dst, int32_t src) {
    for (int32_t l = 0; l < rs->n_layer; l++) {
        if (!rs->conv[l]) continue;
        memcpy(rs->conv[l] + (size_t) dst * rs->conv_n, rs->conv[l] + (size_t) src * rs->conv_n, rs->conv_n * sizeof(float));
        memcpy(rs->ssm[l] + (size_t) dst * rs->ssm_n, rs->ssm[l] + (size_t) src * rs->ssm_n, rs->ssm_n * sizeof(float));
    }
}

void tk_memory_rs_pack(const tk_memory_rs * rs, int32_t c, float * dst) {
    for (int32_t l = 0; l < rs->n_layer; l++) {
        if (!rs->conv[l]) continue;
        memcpy(dst, rs->conv[l] + (size_t) c * rs->conv_n, rs->conv_n * sizeof(float));
        dst += rs->conv_n;
        memcpy(dst, rs->ssm[l] + (size_t) c * rs->ssm_n, rs->ssm_n * sizeof(float));
        dst += rs->ssm_n;
    }
}

void tk_memory_rs_unpack(tk_memory_rs * rs, int32_t c, const float * src) {
    for (int32_t l = 0; l < rs->n_layer; l++) {
        if (!rs->conv[l]) continue;
        memcpy(rs->conv[l] + (size_t) c * rs->conv_n, src, rs->conv_n * sizeof(float));
        src += rs->conv_n;
        memcpy(rs->ssm[l] + (size_t) c * rs->ssm_n, src, rs->ssm_n * sizeof(float));
        src += rs->ssm_n;
    }
}

/* ---- checkpoints ----------------------------------------------------------------------- */

static int32_t * ck_pos(tk_memory_rs * rs, int32_t seq) { return rs->ckpt_pos + (size_t) seq * rs->n_ckpt; }
static float * ck_data(tk_memory_rs * rs, int32_t seq, int32_t j) {
    return rs->ckpt + ((size_t) seq * rs->n_ckpt + (size_t) j) * rs->cell_n;
}

static void ckpt_drop_all(tk_memory_rs * rs, int32_t seq) {
    for (int32_t j = 0; j < rs->n_ckpt; j++) ck_pos(rs, seq)[j] = -1;
}

/* drop the snapshots of seq at positions >= p */
static void ckpt_drop_from(tk_memory_rs * rs, int32_t seq, int32_t p) {
    for (int32_t j = 0; j < rs->n_ckpt; j++) if (ck_pos(rs, seq)[j] >= p) ck_pos(rs, seq)[j] = -1;
}

/* slot of the newest snapshot of seq at a position < p, or -1 */
static int32_t ckpt_before(tk_memory_rs * rs, int32_t seq, int32_t p) {
    int32_t best = -1;
    for (int32_t j = 0; j < rs->n_ckpt; j++) {
        const int32_t q = ck_pos(rs, seq)[j];
        if (q >= 0 && q < p && (best < 0 || q > ck_pos(rs, seq)[best])) best = j;
    }
    return best;
}

void tk_memory_rs_checkpoint(tk_memory_rs * rs, int32_t seq) {
    if (!rs || rs->n_ckpt <= 0 || seq < 0 || seq >= rs->n_cells) return;
    const int32_t c = rs->tail[seq];
    if (c < 0) return;
    int32_t * P = ck_pos(rs, seq), slot = -1;
    for (int32_t j = 0; j < rs->n_ckpt && slot < 0; j++) if (P[j] == rs->pos[c]) slot = j;
    for (int32_t j = 0; j < rs->n_ckpt && slot < 0; j++) if (P[j] < 0) slot = j;
    if (slot < 0) {            /* full: thin out, dropping the one whose loss leaves the smallest gap */
        int64_t best = INT64_MAX;
        for (int32_t j = 0; j < rs->n_ckpt; j++) {
            int64_t prev = -1, next = rs->pos[c];
            for (int32_t k = 0; k < rs->n_ckpt; k++) {
                if (P[k] < P[j] && P[k] > prev) prev = P[k];
                if (P[k] > P[j] && P[k] < next) next = P[k];
            }
            const int64_t gap = next - prev;   /* ties: the oldest */
            if (gap < best || (gap == best && P[j] < P[slot])) { best = gap; slot = j; }
        }
    }
    P[slot] = rs->pos[c];
    tk_memory_rs_pack(rs, c, ck_data(rs, seq, slot));
}

int32_t tk_memory_rs_ckpt_next(const tk_memory_rs * rs, int32_t pos) {
    if (!rs || rs->n_ckpt <= 0 || rs->ckpt_every <= 0) return INT32_MAX;
    /* smallest q > pos with (q + 1) % every == 0 */
    const int64_t e = rs->ckpt_every, q = ((int64_t) pos + 1) / e * e + e - 1;
    return q > INT32_MAX ? INT32_MAX : (int32_t) q;
}

void tk_memory_rs_after_ubatch(tk_memory_rs * rs, const tk_ubatch * ub) {
    if (!rs || rs->n_ckpt <= 0 || rs->ckpt_every <= 0) return;
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        const int32_t last = ub->pos[s * ub->n_seq_tokens + ub->n_seq_tokens - 1];
        if ((last + 1) % rs->ckpt_every == 0) tk_memory_rs_checkpoint(rs, ub->seq[s]);
    }
}

tk_status tk_memory_rs_set_checkpoints(tk_memory_rs * rs, int32_t n_ckpt, int32_t every) {
    if (n_ckpt < 0 || n_ckpt > 1024) return TK_FAIL(TK_ERR_INVALID, "checkpoints = %d must be in [0, 1024]", n_ckpt);
    if (every < 0) return TK_FAIL(TK_ERR_INVALID, "checkpoint interval = %d must be >= 0", every);
    int32_t * pos = NULL;
    float * data = NULL;
    if (n_ckpt > 0) {
        const size_t n = (size_t) rs->n_cells * (size_t) n_ckpt;
        pos = malloc(n * sizeof(int32_t));
        data = malloc(n * rs->cell_n * sizeof(float) + 1);
        if (!pos || !data) {
            free(pos);
            free(data);
            return TK_FAIL(TK_ERR_NOMEM, "out of memory for %d checkpoints of %zu bytes per sequence",
                           n_ckpt, rs->cell_n * sizeof(float));
        }
        for (size_t i = 0; i < n; i++) pos[i] = -1;
    }
    free(rs->ckpt_pos);
    free(rs->ckpt);
    rs->ckpt_pos = pos;
    rs->ckpt = data;
    rs->n_ckpt = n_ckpt;
    rs->ckpt_every = every;
    return TK_OK;
}

/* ---- the tk_memory interface -------------------------------------------------------------- */

static void cell_release(tk_memory_rs * rs, int32_t seq) {
    int32_t c = rs->tail[seq];
    if (c < 0) return;
    rs->seqs[c] &= ~(UINT64_C(1) << seq);
    if (!rs->seqs[c]) { rs->pos[c] = -1; cell_zero(rs, c); }
    rs->tail[seq] = -1;
    rs->start[seq] = -1;
}

/* the whole sequence goes: state zeroed (when no other sequence shares it), snapshots dropped */
static void seq_drop(tk_memory_rs * rs, int32_t seq) {
    cell_release(rs, seq);
    if (rs->n_ckpt > 0) ckpt_drop_all(rs, seq);
}

static void rs_clear(tk_memory * m) {
    tk_memory_rs * rs = RS(m);
    for (int32_t i = 0; i < rs->n_cells; i++) { rs->pos[i] = -1; rs->seqs[i] = 0; cell_zero(rs, i); }
    for (int32_t s = 0; s < TK_MAX_SEQ; s++) { rs->tail[s] = -1; rs->start[s] = -1; }
    if (rs->n_ckpt > 0)
        for (size_t i = 0; i < (size_t) rs->n_cells * rs->n_ckpt; i++) rs->ckpt_pos[i] = -1;
}

/* Allowed: a range that misses the state (p0 > its position), the whole sequence
 * (p0 <= its first position, p1 past its end), or the tail [p0, end) when a snapshot at a
 * position < p0 exists.  Anything else would cut the state partway. */
static bool rs_can_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    tk_memory_rs * rs = RS(m);
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    if (seq < 0) {
        if (p0 >= p1 || (p0 == 0 && p1 == INT32_MAX)) return true;
        for (int32_t s = 0; s < rs->n_cells; s++)
            if (!rs_can_seq_rm(m, s, p0, p1)) return false;
        return true;
    }
    int32_t c = rs->tail[seq];
    if (c < 0) return true;
    const int32_t cpos = rs->pos[c];
    if (p0 >= p1 || p0 > cpos) return true;        /* nothing of this state in range */
    if (p1 <= cpos) return false;                  /* would keep the end but drop its past */
    if (p0 <= rs->start[seq]) return true;         /* whole state */
    return rs->n_ckpt > 0 && ckpt_before(rs, seq, p0) >= 0;
}

static int32_t free_cell(tk_memory_rs * rs) {
    for (int32_t i = 0; i < rs->n_cells; i++)
        if (!rs->seqs[i]) return i;
    return -1;
}

static void seq_rm_one(tk_memory_rs * rs, int32_t seq, int32_t p0, int32_t p1) {
    int32_t c = rs->tail[seq];
    if (c < 0 || p0 >= p1 || p0 > rs->pos[c] || p1 <= rs->pos[c]) {
        if (rs->n_ckpt > 0 && p1 == INT32_MAX) ckpt_drop_from(rs, seq, p0);
        return;
    }
    if (p0 <= rs->start[seq]) { seq_drop(rs, seq); return; }
    const int32_t j = ckpt_before(rs, seq, p0);  /* exists: can_seq_rm said so */
    if (j < 0) return;
    if (popcount64(rs->seqs[c]) > 1) {          /* shared: restore into a private cell */
        const int32_t nc = free_cell(rs);        /* exists: a shared cell leaves one free */
        if (nc < 0) return;
        rs->seqs[c] &= ~(UINT64_C(1) << seq);
        rs->seqs[nc] = UINT64_C(1) << seq;
        rs->tail[seq] = c = nc;
    }
    const int32_t q = ck_pos(rs, seq)[j];
    tk_memory_rs_unpack(rs, c, ck_data(rs, seq, j));
    rs->pos[c] = q;
    ckpt_drop_from(rs, seq, q + 1);
}

static void rs_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    tk_memory_rs * rs = RS(m);
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    if (p0 >= p1) return;
    if (seq < 0) {
        if (p0 == 0 && p1 == INT32_MAX) { rs_clear(m); return; }
        for (int32_t s = 0; s < rs->n_cells; s++) seq_rm_one(rs, s, p0, p1);
        return;
    }
    seq_rm_one(rs, seq, p0, p1);
}

static void rs_seq_cp(tk_memory * m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    tk_memory_rs * rs = RS(m);
    (void) p0; (void) p1;      /* a state is whole: dst gets src's state as it is */
    if (src == dst) return;
    seq_drop(rs, dst);
    int32_t c = rs->tail[src];
    if (c < 0) return;
    rs->seqs[c] |= UINT64_C(1) << dst;
    rs->tail[dst] = c;
    rs->start[dst] = rs->start[src];
    if (rs->n_ckpt > 0) {      /* dst can roll back as far as src */
        memcpy(ck_pos(rs, dst), ck_pos(rs, src), (size_t) rs->n_ckpt * sizeof(int32_t));
        memcpy(ck_data(rs, dst, 0), ck_data(rs, src, 0), (size_t) rs->n_ckpt * rs->cell_n * sizeof(float));
    }
}

static void rs_seq_keep(tk_memory * m, int32_t seq) {
    tk_memory_rs * rs = RS(m);
    for (int32_t s = 0; s < rs->n_cells; s++)
        if (s != seq) seq_drop(rs, s);
}

static int32_t rs_seq_pos_min(tk_memory * m, int32_t seq) {
    tk_memory_rs * rs = RS(m);
    return rs->tail[seq] < 0 ? -1 : rs->pos[rs->tail[seq]];
}

static int32_t rs_seq_pos_max(tk_memory * m, int32_t seq) { return rs_seq_pos_min(m, seq); }

/* A state holds no positions, only the count of tokens folded in, so a shift is meaningful
 * only as a renumbering of the whole sequence: the range must miss the state entirely, or
 * contain all of it (p0 <= its first position, p1 past its end) with the first position
 * staying >= 0.  A shift of part of the history (a context shift after dropping a middle
 * range) cannot be expressed in a state and is refused. */
/* range [p0, p1) misses the state: nothing of seq to shift */
static bool add_misses(const tk_memory_rs * rs, int32_t seq, int32_t c, int32_t p0, int32_t p1, int32_t delta) {
    return c < 0 || delta == 0 || p0 >= p1 || p0 > rs->pos[c] || p1 <= rs->start[seq];
}

static bool rs_can_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    tk_memory_rs * rs = RS(m);
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    if (seq < 0 || seq >= rs->n_cells) return false;
    const int32_t c = rs->tail[seq];
    if (add_misses(rs, seq, c, p0, p1, delta)) return true;
    if (p1 <= rs->pos[c] || p0 > rs->start[seq]) return false;   /* part of the history only */
    return (int64_t) rs->start[seq] + delta >= 0 && (int64_t) rs->pos[c] + delta < INT32_MAX;
}

static void rs_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    tk_memory_rs * rs = RS(m);
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    const int32_t c = rs->tail[seq];
    if (add_misses(rs, seq, c, p0, p1, delta)) return;
    if (popcount64(rs->seqs[c]) > 1) {          /* shared: the other sequences keep their numbering */
        const int32_t nc = free_cell(rs);
        if (nc < 0) return;
        cell_copy(rs, nc, c);
        rs->seqs[c] &= ~(UINT64_C(1) << seq);
        rs->seqs[nc] = UINT64_C(1) << seq;
        rs->tail[seq] = nc;
        rs->pos[nc] = rs->pos[c];
    }
    rs->pos[rs->tail[seq]] += delta;
    rs->start[seq] += delta;
    if (rs->n_ckpt > 0)
        for (int32_t j = 0; j < rs->n_ckpt; j++) {
            int32_t * q = &ck_pos(rs, seq)[j];
            if (*q >= 0) *q = (int64_t) *q + delta >= 0 ? *q + delta : -1;
        }
}

static tk_status rs_can_fit(tk_memory * m, int32_t n_tokens) {
    (void) m; (void) n_tokens;  /* one cell per sequence always exists (n_cells = n_seq_max) */
    return TK_OK;
}

/* Give each ubatch sequence a cell of its own: a zeroed one when it has no state, a private
 * copy when its state is shared.  pos of the cell = last position of the ubatch. */
static tk_status rs_prepare(tk_memory * m, const tk_ubatch * ub) {
    tk_memory_rs * rs = RS(m);
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        const int32_t seq = ub->seq[s];
        int32_t c = rs->tail[seq];
        if (c < 0 || popcount64(rs->seqs[c]) > 1) {
            int32_t nc = free_cell(rs);
            if (nc < 0) return TK_FAIL(TK_ERR_STATE, "recurrent cache: no free cell for sequence %d", seq);
            if (c < 0) { cell_zero(rs, nc); rs->start[seq] = ub->pos[s * ub->n_seq_tokens]; }
            else { cell_copy(rs, nc, c); rs->seqs[c] &= ~(UINT64_C(1) << seq); }
            rs->seqs[nc] = UINT64_C(1) << seq;
            rs->tail[seq] = c = nc;
        }
        rs->pos[c] = ub->pos[s * ub->n_seq_tokens + ub->n_seq_tokens - 1];
        rs->ub_cells[s] = c;
    }
    return TK_OK;
}

static void rs_free(tk_memory * m) {
    tk_memory_rs * rs = RS(m);
    if (!rs) return;
    if (rs->conv) for (int32_t l = 0; l < rs->n_layer; l++) free(rs->conv[l]);
    if (rs->ssm) for (int32_t l = 0; l < rs->n_layer; l++) free(rs->ssm[l]);
    free(rs->conv);
    free(rs->ssm);
    free(rs->pos);
    free(rs->seqs);
    free(rs->ub_cells);
    free(rs->ckpt_pos);
    free(rs->ckpt);
    free(rs);
}

tk_status tk_memory_rs_new(const tk_model * model, int32_t n_cells, tk_memory_rs ** out) {
    const tk_hparams * hp = &model->hp;
    *out = NULL;
    if (n_cells <= 0 || n_cells > TK_MAX_SEQ) return TK_FAIL(TK_ERR_INVALID, "n_seq_max = %d must be in [1, %d]", n_cells, TK_MAX_SEQ);
    tk_memory_rs * rs = calloc(1, sizeof *rs);
    if (!rs) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    rs->base = (tk_memory){rs_clear, rs_can_seq_rm, rs_seq_rm, rs_seq_cp, rs_seq_keep, rs_seq_pos_min,
                           rs_seq_pos_max, rs_can_fit, rs_prepare, rs_free, rs_can_seq_add, rs_seq_add};
    rs->n_cells = n_cells;
    rs->n_layer = hp->n_layer;
    rs->conv_n = (size_t) (hp->d_conv - 1) * (size_t) model->conv_dim;
    rs->ssm_n = (size_t) hp->d_state * (size_t) hp->d_inner;
    rs->pos = malloc((size_t) n_cells * sizeof(int32_t));
    rs->seqs = calloc((size_t) n_cells, sizeof(uint64_t));
    rs->ub_cells = malloc((size_t) n_cells * sizeof(int32_t));
    rs->conv = calloc((size_t) hp->n_layer, sizeof(float *));
    rs->ssm = calloc((size_t) hp->n_layer, sizeof(float *));
    if (!rs->pos || !rs->seqs || !rs->ub_cells || !rs->conv || !rs->ssm) {
        rs_free(&rs->base);
        return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    }
    for (int32_t l = 0; l < hp->n_layer; l++) {
        if (hp->layer_kinds[l] == TK_LAYER_ATTENTION) continue;
        rs->conv[l] = calloc((size_t) n_cells * rs->conv_n + 1, sizeof(float));
        rs->ssm[l] = calloc((size_t) n_cells * rs->ssm_n, sizeof(float));
        if (!rs->conv[l] || !rs->ssm[l]) {
            rs_free(&rs->base);
            return TK_FAIL(TK_ERR_NOMEM, "out of memory allocating the recurrent state");
        }
        rs->cell_n += rs->conv_n + rs->ssm_n;
    }
    rs_clear(&rs->base);
    *out = rs;
    return TK_OK;
}
