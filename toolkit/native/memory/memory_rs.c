/* memory_rs.c: the recurrent state cache (tk_memory_rs), one implementation of tk_memory.
 *
 * n_cells = n_seq_max cells.  A cell holds, for every recurrent layer, the pieces its
 * layer kind names (tk_mixer_ops.rs_pieces: Mamba's conv window [conv_dim, d_conv-1] and
 * SSM state [d_inner, d_state] (Mamba-2: [H, P, N]); later GDN's delta state, ...); the
 * kernels update them in place.  A cell's whole state, packed layer by layer and piece by
 * piece in that order, is what checkpoints and state files hold (cell_n floats).  Each sequence points at its tail cell; seq_cp shares a cell
 * (copy on write: a shared cell is copied to a free one before the sequence advances).
 * A cell claimed for a sequence with no state is zeroed, and so is a cell no sequence uses
 * any more: position 0 starts from zero state.
 *
 * A state cannot be partly rolled back token by token.  Checkpoints make a tail removal
 * possible: each sequence keeps up to n_ckpt snapshots (whole state + the position it
 * holds), taken at the end of a multi-token decode call, every `ckpt_every` positions and
 * on request.  seq_rm(seq, p0, end) restores the newest snapshot at a position < p0 and
 * the caller re-feeds the gap (seq_pos_max says where the sequence now ends); with no such
 * snapshot the removal is refused and nothing changes.
 *
 * Context shift (ref: llama.cpp "memory: Hybrid context shift", llama_memory_recurrent::
 * seq_rm / seq_add): a state is the state after the sequence's last token, so removing a
 * range [p0, p1) that ends at or before that token (p1 <= its position) is accepted and leaves
 * the state as it is ("the context is already compressed"); only the snapshots at positions in
 * [p0, p1) go (the tokens they end at are gone).  seq_add moves position bookkeeping only: the
 * state's position and its first position when they lie in the range, and the snapshots in the
 * range with it (shifted, not dropped: a snapshot at q is the state after the token now at
 * q + delta, so a rollback after the shift lands where the KV cells are).  Snapshots before the
 * range (the kept head of a context shift) stay valid as they are.  When all n_ckpt slots are full the
 * snapshot whose removal leaves the smallest gap between its neighbours (the previous one
 * and the new one) is replaced, ties the oldest: the kept ones stay spread over the history.
 * ref: llama.cpp src/llama-memory-recurrent.{h,cpp} (cells, tails, copy on write).
 *
 * Speculative window (rs_set_spec_window, k > 0; ref: llama.cpp n_rs_seq, "allow partial
 * seq_rm for GDN models for speculative decoding", here for every recurrent kind): a ring of
 * k + 1 rows per sequence and per (layer, piece) (k with TK_SPEC_NO_LAST, below), row
 * seq * rows + pos % rows holding the piece after the token at pos, ring_pos[row] that
 * position (-1: none).  prepare marks
 * the rows a ubatch writes: every token of a row of at most k + 1 tokens of a batch that asks
 * for them (TK_BATCH_SNAPSHOTS: a verify call, a draft model's step; a longer row, or any row
 * of another batch, such as a prompt chunk, keeps none and runs as without a window), but for a context with TK_SPEC_NO_LAST not a
 * sequence's last token of the decode call (its cell holds that state; ub->snap_skip_last); the layer kinds copy their pieces there as
 * they step through the tokens (tk_rs_snap, memory.h).  seq_rm(seq, p, end) with the state
 * after p - 1 in the ring copies it back into the sequence's cell: the state is then exactly
 * the one a run that never saw the tokens >= p has.  Entries after it go; so do all of a
 * sequence's entries when it is dropped, shifted (seq_add) or read from a state blob.
 */
#include <stdlib.h>
#include <string.h>

#include "layers/layer.h"

typedef struct {
    tk_memory base;
    int32_t n_cells;           /* == n_seq_max */
    int32_t n_layer;
    int32_t * pos;             /* [n_cells] last position folded into the state, -1 = empty */
    uint64_t * seqs;           /* [n_cells] sequences sharing this state */
    int32_t tail[TK_MAX_SEQ];  /* cell holding each sequence's state, -1 = none */
    int32_t * ub_cells;        /* [n_seqs of current ubatch] */
    int32_t * n_pieces;        /* [n_layer] 0 = not a recurrent layer */
    tk_rs_piece (*piece)[TK_RS_MAX_PIECES];   /* [n_layer] names and floats per cell */
    float * (*data)[TK_RS_MAX_PIECES];        /* [n_layer] -> [n_cells, piece n] */
    /* checkpoints (rollback points): up to n_ckpt snapshots per sequence, row = seq id */
    int32_t start[TK_MAX_SEQ]; /* first position folded into each sequence's state (-1 = none) */
    int32_t n_ckpt;            /* snapshots kept per sequence (0 = none) */
    int32_t ckpt_every;        /* also snapshot when pos+1 is a multiple of this (0 = off) */
    size_t  cell_n;            /* floats of one whole state, all recurrent layers' pieces */
    int32_t * ckpt_pos;        /* [n_cells * n_ckpt] position of each snapshot, -1 = empty */
    float * ckpt;              /* [n_cells * n_ckpt, cell_n] */
    /* speculative window (see the file comment) */
    int32_t n_snap;            /* ring rows per sequence: k + 1, or k with TK_SPEC_NO_LAST; 0 = off */
    int32_t n_verify;          /* longest ubatch row that keeps snapshots: k + 1 */
    float * (*ring)[TK_RS_MAX_PIECES];   /* [n_layer] -> [n_cells * n_snap, piece n] */
    int32_t * ring_pos;        /* [n_cells * n_snap] position whose state the row holds, -1 = none */
    int32_t * snap_row;        /* [snap_cap] ring row of each token of the current ubatch, -1 = none */
    int32_t snap_cap;
} tk_memory_rs;

static tk_memory_rs * RS(tk_memory * m) { return (tk_memory_rs *) m; }

static int popcount64(uint64_t v) { int n = 0; while (v) { v &= v - 1; n++; } return n; }

/* piece k of layer l in cell c */
static float * piece_at(const tk_memory_rs * rs, int32_t l, int32_t k, int32_t c) {
    return rs->data[l][k] + (size_t) c * rs->piece[l][k].n;
}

static void cell_zero(tk_memory_rs * rs, int32_t c) {
    for (int32_t l = 0; l < rs->n_layer; l++)
        for (int32_t k = 0; k < rs->n_pieces[l]; k++) memset(piece_at(rs, l, k, c), 0, rs->piece[l][k].n * sizeof(float));
}

static void cell_copy(tk_memory_rs * rs, int32_t dst, int32_t src) {
    for (int32_t l = 0; l < rs->n_layer; l++)
        for (int32_t k = 0; k < rs->n_pieces[l]; k++)
            memcpy(piece_at(rs, l, k, dst), piece_at(rs, l, k, src), rs->piece[l][k].n * sizeof(float));
}

/* cell c -> cell_n floats (layer by layer, piece by piece) */
static void cell_pack(const tk_memory_rs * rs, int32_t c, float * dst) {
    for (int32_t l = 0; l < rs->n_layer; l++)
        for (int32_t k = 0; k < rs->n_pieces[l]; k++) {
            memcpy(dst, piece_at(rs, l, k, c), rs->piece[l][k].n * sizeof(float));
            dst += rs->piece[l][k].n;
        }
}

/* cell_n floats -> cell c */
static void cell_unpack(tk_memory_rs * rs, int32_t c, const float * src) {
    for (int32_t l = 0; l < rs->n_layer; l++)
        for (int32_t k = 0; k < rs->n_pieces[l]; k++) {
            memcpy(piece_at(rs, l, k, c), src, rs->piece[l][k].n * sizeof(float));
            src += rs->piece[l][k].n;
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

/* drop the snapshots of seq at positions in [p0, p1) */
static void ckpt_drop_range(tk_memory_rs * rs, int32_t seq, int32_t p0, int32_t p1) {
    for (int32_t j = 0; j < rs->n_ckpt; j++) {
        const int32_t q = ck_pos(rs, seq)[j];
        if (q >= p0 && q < p1) ck_pos(rs, seq)[j] = -1;
    }
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

static void rs_checkpoint(tk_memory * m, int32_t seq) {
    tk_memory_rs * rs = RS(m);
    if ( rs->n_ckpt <= 0 || seq < 0 || seq >= rs->n_cells) return;
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
    cell_pack(rs, c, ck_data(rs, seq, slot));
}

static int32_t rs_ckpt_next(tk_memory * m, int32_t pos) {
    const tk_memory_rs * rs = RS(m);
    if ( rs->n_ckpt <= 0 || rs->ckpt_every <= 0) return INT32_MAX;
    /* smallest q > pos with (q + 1) % every == 0 */
    const int64_t e = rs->ckpt_every, q = ((int64_t) pos + 1) / e * e + e - 1;
    return q > INT32_MAX ? INT32_MAX : (int32_t) q;
}

static void rs_after_ubatch(tk_memory * m, const tk_ubatch * ub) {
    tk_memory_rs * rs = RS(m);
    if ( rs->n_ckpt <= 0 || rs->ckpt_every <= 0) return;
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        const int32_t last = ub->pos[s * ub->n_seq_tokens + ub->n_seq_tokens - 1];
        if ((last + 1) % rs->ckpt_every == 0) rs_checkpoint(m, ub->seq[s]);
    }
}

static tk_status check_ckpt(int32_t n_ckpt) {
    if (n_ckpt < 0 || n_ckpt > 1024) return TK_FAIL(TK_ERR_INVALID, "checkpoints = %d must be in [0, 1024]", n_ckpt);
    return TK_OK;
}

static tk_status rs_set_checkpoints(tk_memory * m, int32_t n_ckpt, int32_t every) {
    tk_memory_rs * rs = RS(m);
    TK_CHECK(check_ckpt(n_ckpt));
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

/* ---- speculative window: the snapshot ring ----------------------------------------------- */

static void ring_drop_from(tk_memory_rs * rs, int32_t seq, int32_t p) {
    for (int32_t j = 0; j < rs->n_snap; j++) {
        int32_t * q = &rs->ring_pos[(size_t) seq * rs->n_snap + j];
        if (*q >= p) *q = -1;
    }
}

/* ring row of seq holding the state after position p, or -1 */
static int32_t ring_find(const tk_memory_rs * rs, int32_t seq, int32_t p) {
    if (rs->n_snap <= 0 || p < 0) return -1;
    const int32_t r = seq * rs->n_snap + p % rs->n_snap;
    return rs->ring_pos[r] == p ? r : -1;
}

/* ring row r -> cell c */
static void ring_restore(tk_memory_rs * rs, int32_t r, int32_t c) {
    for (int32_t l = 0; l < rs->n_layer; l++)
        for (int32_t k = 0; k < rs->n_pieces[l]; k++)
            memcpy(piece_at(rs, l, k, c), rs->ring[l][k] + (size_t) r * rs->piece[l][k].n, rs->piece[l][k].n * sizeof(float));
}

static void ring_free(tk_memory_rs * rs) {
    if (rs->ring)
        for (int32_t l = 0; l < rs->n_layer; l++)
            for (int32_t k = 0; k < TK_RS_MAX_PIECES; k++) free(rs->ring[l][k]);
    free(rs->ring);
    free(rs->ring_pos);
    rs->ring = NULL;
    rs->ring_pos = NULL;
    rs->n_snap = 0;
}

/* the name of the first of the n pieces pc[] whose kind writes no per-token snapshots
 * (tk_rs_piece.snap 0: it would be restored stale, so a window is refused), or NULL */
static const char * unsnapped_piece(const tk_rs_piece * pc, int32_t n) {
    for (int32_t j = 0; j < n; j++)
        if (!pc[j].snap) return pc[j].name;
    return NULL;
}

/* a speculative window of k tokens over layer `layer`'s pieces (set_spec_window's checks) */
static tk_status check_window(int32_t k, const tk_rs_piece * pc, int32_t n, int32_t layer) {
    if (k < 0 || k > 256) return TK_FAIL(TK_ERR_INVALID, "speculative window = %d must be in [0, 256]", k);
    const char * bad = k > 0 ? unsnapped_piece(pc, n) : NULL;
    if (bad)
        return TK_FAIL(TK_ERR_UNSUPPORTED, "speculative decoding: layer %d's recurrent piece '%s' keeps no per-token "
                       "snapshots (a rollback would not be exact)", layer, bad);
    return TK_OK;
}

/* ring rows per sequence for a window of k tokens */
static int32_t window_rows(int32_t k, uint32_t flags) {
    if (k == 0) return 0;
    return (flags & TK_SPEC_NO_LAST) ? k : k + 1;   /* a call's last token keeps no row */
}

static tk_status rs_set_spec_window(tk_memory * m, int32_t k, uint32_t flags) {
    tk_memory_rs * rs = RS(m);
    TK_CHECK(check_window(k, NULL, 0, -1));
    for (int32_t l = 0; l < rs->n_layer; l++) TK_CHECK(check_window(k, rs->piece[l], rs->n_pieces[l], l));
    ring_free(rs);
    if (k == 0) return TK_OK;
    const int32_t n_rows = window_rows(k, flags);
    const size_t rows = (size_t) rs->n_cells * (size_t) n_rows;
    rs->ring = calloc((size_t) rs->n_layer, sizeof *rs->ring);
    rs->ring_pos = malloc(rows * sizeof(int32_t));
    int ok = rs->ring && rs->ring_pos;
    for (int32_t l = 0; ok && l < rs->n_layer; l++)
        for (int32_t j = 0; ok && j < rs->n_pieces[l]; j++)
            ok = (rs->ring[l][j] = malloc(rows * rs->piece[l][j].n * sizeof(float) + 1)) != NULL;
    if (!ok) {
        ring_free(rs);
        return TK_FAIL(TK_ERR_NOMEM, "out of memory for a speculative window of %d tokens (%zu bytes per sequence)", k,
                       (size_t) n_rows * rs->cell_n * sizeof(float));
    }
    for (size_t i = 0; i < rows; i++) rs->ring_pos[i] = -1;
    rs->n_snap = n_rows;
    rs->n_verify = k + 1;
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
    if (rs->n_snap > 0) ring_drop_from(rs, seq, 0);
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
    for (size_t i = 0; i < (size_t) rs->n_cells * rs->n_snap; i++) rs->ring_pos[i] = -1;
}

/* Allowed: a range that misses the state (p0 > its position), a range that ends at or before
 * its position (the state stays: it already holds those tokens), the whole sequence
 * (p0 <= its first position, p1 past its end), or the tail [p0, end) when a snapshot at a
 * position < p0 exists.  Refused: a tail with no such snapshot (it would cut the state). */
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
    if (p1 <= cpos) return true;                   /* a middle range: the state stays (context shift) */
    if (p0 <= rs->start[seq]) return true;         /* whole state */
    if (ring_find(rs, seq, p0 - 1) >= 0) return true;   /* speculative window: exact rollback */
    return rs->n_ckpt > 0 && ckpt_before(rs, seq, p0) >= 0;
}

/* where seq's state ends after seq_rm(seq, p0, p1) (can_seq_rm said yes), as seq_rm_one
 * decides: unchanged, dropped (-1), p0 - 1 from the speculative window, or a checkpoint */
static int32_t rs_seq_rm_end(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    tk_memory_rs * rs = RS(m);
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    const int32_t c = seq >= 0 && seq < rs->n_cells ? rs->tail[seq] : -1;
    if (c < 0) return -1;
    if (p0 >= p1 || p0 > rs->pos[c] || p1 <= rs->pos[c]) return rs->pos[c];
    if (p0 <= rs->start[seq]) return -1;
    if (ring_find(rs, seq, p0 - 1) >= 0) return p0 - 1;
    const int32_t j = rs->n_ckpt > 0 ? ckpt_before(rs, seq, p0) : -1;
    return j < 0 ? -1 : ck_pos(rs, seq)[j];
}

static int32_t free_cell(tk_memory_rs * rs) {
    for (int32_t i = 0; i < rs->n_cells; i++)
        if (!rs->seqs[i]) return i;
    return -1;
}

static void seq_rm_one(tk_memory_rs * rs, int32_t seq, int32_t p0, int32_t p1) {
    int32_t c = rs->tail[seq];
    if (c < 0 || p0 >= p1 || p0 > rs->pos[c] || p1 <= rs->pos[c]) {   /* the state stays */
        if (rs->n_ckpt > 0) ckpt_drop_range(rs, seq, p0, p1);
        if (c >= 0 && rs->n_snap > 0 && p0 < p1 && p0 <= rs->pos[c]) ring_drop_from(rs, seq, p0);
        return;
    }
    if (p0 <= rs->start[seq]) { seq_drop(rs, seq); return; }
    const int32_t r = ring_find(rs, seq, p0 - 1);
    if (r >= 0) {              /* speculative window: the state after p0 - 1, exactly */
        if (popcount64(rs->seqs[c]) > 1) {
            const int32_t nc = free_cell(rs);
            if (nc < 0) return;
            rs->seqs[c] &= ~(UINT64_C(1) << seq);
            rs->seqs[nc] = UINT64_C(1) << seq;
            rs->tail[seq] = c = nc;
        }
        ring_restore(rs, r, c);
        rs->pos[c] = p0 - 1;
        ring_drop_from(rs, seq, p0);
        if (rs->n_ckpt > 0) ckpt_drop_from(rs, seq, p0);
        return;
    }
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
    cell_unpack(rs, c, ck_data(rs, seq, j));
    rs->pos[c] = q;
    ckpt_drop_from(rs, seq, q + 1);
    if (rs->n_snap > 0) ring_drop_from(rs, seq, q + 1);   /* states of the history that goes */
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
    if (rs->n_snap > 0) {      /* and within the speculative window */
        const size_t n = (size_t) rs->n_snap;
        memcpy(rs->ring_pos + (size_t) dst * n, rs->ring_pos + (size_t) src * n, n * sizeof(int32_t));
        for (int32_t l = 0; l < rs->n_layer; l++)
            for (int32_t k = 0; k < rs->n_pieces[l]; k++)
                memcpy(rs->ring[l][k] + (size_t) dst * n * rs->piece[l][k].n, rs->ring[l][k] + (size_t) src * n * rs->piece[l][k].n,
                       n * rs->piece[l][k].n * sizeof(float));
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

/* A state holds no positions, only the count of tokens folded in: a shift moves bookkeeping
 * only (the state's last and first positions when in [p0, p1), its snapshots in the range).
 * Refused (nothing changes) when a position would become negative or overflow, or the last
 * position would fall before the first. */
/* range [p0, p1) misses the state: nothing of seq to shift */
static bool add_misses(const tk_memory_rs * rs, int32_t seq, int32_t c, int32_t p0, int32_t p1, int32_t delta) {
    return c < 0 || delta == 0 || p0 >= p1 || p0 > rs->pos[c] || p1 <= rs->start[seq];
}

/* position q after shifting [p0, p1) by delta (64-bit: the caller checks the range) */
static int64_t shifted(int32_t q, int32_t p0, int32_t p1, int32_t delta) {
    return q >= p0 && q < p1 ? (int64_t) q + delta : q;
}

static bool rs_can_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    tk_memory_rs * rs = RS(m);
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    if (seq < 0 || seq >= rs->n_cells) return false;
    const int32_t c = rs->tail[seq];
    if (add_misses(rs, seq, c, p0, p1, delta)) return true;
    const int64_t first = shifted(rs->start[seq], p0, p1, delta), last = shifted(rs->pos[c], p0, p1, delta);
    return first >= 0 && last >= first && last < INT32_MAX;
}

static void rs_seq_add(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    tk_memory_rs * rs = RS(m);
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    const int32_t c = rs->tail[seq];
    if (add_misses(rs, seq, c, p0, p1, delta)) return;
    if (rs->n_snap > 0) ring_drop_from(rs, seq, 0);   /* the ring is keyed by position */
    if (popcount64(rs->seqs[c]) > 1) {          /* shared: the other sequences keep their numbering */
        const int32_t nc = free_cell(rs);
        if (nc < 0) return;
        cell_copy(rs, nc, c);
        rs->seqs[c] &= ~(UINT64_C(1) << seq);
        rs->seqs[nc] = UINT64_C(1) << seq;
        rs->tail[seq] = nc;
        rs->pos[nc] = rs->pos[c];
    }
    rs->pos[rs->tail[seq]] = (int32_t) shifted(rs->pos[rs->tail[seq]], p0, p1, delta);
    rs->start[seq] = (int32_t) shifted(rs->start[seq], p0, p1, delta);
    int32_t * P = rs->n_ckpt > 0 ? ck_pos(rs, seq) : NULL;
    for (int32_t j = 0; P && j < rs->n_ckpt; j++) {   /* snapshots in the range move with it */
        if (P[j] < p0 || P[j] >= p1) continue;
        const int64_t q = (int64_t) P[j] + delta;
        for (int32_t k = 0; k < rs->n_ckpt; k++)        /* an unshifted one at the same place goes */
            if (P[k] == q && (P[k] < p0 || P[k] >= p1)) P[k] = -1;
        P[j] = q >= 0 ? (int32_t) q : -1;
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
    if (rs->n_snap > 0) {      /* the ring rows this ubatch writes: rows of at most k + 1 tokens (n_verify) */
        if (ub->n_tokens > rs->snap_cap) {
            int32_t * p = realloc(rs->snap_row, (size_t) ub->n_tokens * sizeof(int32_t));
            if (!p) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
            rs->snap_row = p;
            rs->snap_cap = ub->n_tokens;
        }
        for (int32_t s = 0; s < ub->n_seqs; s++)
            for (int32_t i = 0; i < ub->n_seq_tokens; i++) {
                const int32_t t = s * ub->n_seq_tokens + i, pos = ub->pos[t];
                rs->snap_row[t] = -1;
                if (!ub->keep_snaps || ub->n_seq_tokens > rs->n_verify) continue;
                if (i == ub->n_seq_tokens - 1 && ub->snap_skip_last && ub->snap_skip_last[s]) continue;
                rs->snap_row[t] = ub->seq[s] * rs->n_snap + pos % rs->n_snap;
                rs->ring_pos[rs->snap_row[t]] = pos;
            }
    }
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

/* positions of seq's snapshots, ascending: the first min(n, cap) into pos; returns n */
static int32_t rs_checkpoints(tk_memory * m, int32_t seq, int32_t * pos, int32_t cap) {
    const tk_memory_rs * rs = RS(m);
    int32_t n = 0;
    for (int32_t j = 0; j < rs->n_ckpt; j++) {
        const int32_t q = rs->ckpt_pos[(size_t) seq * rs->n_ckpt + j];
        if (q < 0) continue;
        int32_t i = n < cap ? n : cap;
        if (n < cap) {
            while (i > 0 && pos[i - 1] > q) { pos[i] = pos[i - 1]; i--; }
            pos[i] = q;
        }
        n++;
    }
    return n;
}

static tk_status rs_view(tk_memory * m, int il, tk_rs_view * out) {
    tk_memory_rs * rs = RS(m);
    if (il < 0 || il >= rs->n_layer || !rs->n_pieces[il]) return TK_FAIL(TK_ERR_STATE, "layer %d has no recurrent state", il);
    memset(out, 0, sizeof *out);
    out->n_pieces = rs->n_pieces[il];
    for (int32_t k = 0; k < out->n_pieces; k++) {
        out->piece[k] = rs->data[il][k];
        out->piece_n[k] = rs->piece[il][k].n;
    }
    out->ub_cells = rs->ub_cells;
    if (rs->n_snap > 0) {
        for (int32_t k = 0; k < out->n_pieces; k++) out->snap[k] = rs->ring[il][k];
        out->snap_row = rs->snap_row;
    }
    return TK_OK;
}

static void rs_report(tk_memory * m, tk_memory_report * r) {
    const tk_memory_rs * rs = RS(m);
    r->recurrent_bytes += (uint64_t) rs->n_cells * rs->cell_n * sizeof(float);
    r->checkpoint_bytes += (uint64_t) rs->n_cells * (uint64_t) rs->n_ckpt * rs->cell_n * sizeof(float);
    r->draft_bytes += (uint64_t) rs->n_cells * (uint64_t) rs->n_snap * rs->cell_n * sizeof(float);
}

/* ---- state: sections RS and CKPT (layout in state.c) ---------------------------------------- */

static void rs_write_states(tk_memory_rs * rs, tk_wbuf * w, int32_t seq, float * tmp) {
    const uint64_t bit = seq < 0 ? 0 : UINT64_C(1) << seq;
    const uint64_t at = tk_section_begin(w, TK_TAG_RS);
    uint32_t n = 0;
    for (int32_t c = 0; c < rs->n_cells; c++) n += rs->seqs[c] && (seq < 0 || (rs->seqs[c] & bit));
    tk_put_u32(w, n);
    tk_put_u32(w, 0);
    tk_put_u64(w, rs->cell_n);
    for (int32_t c = 0; c < rs->n_cells; c++) {
        if (!rs->seqs[c] || (seq >= 0 && !(rs->seqs[c] & bit))) continue;
        int32_t first = -1;
        for (int32_t s = 0; s < rs->n_cells; s++) if (rs->tail[s] == c) { first = rs->start[s]; break; }
        tk_put_i32(w, rs->pos[c]);
        tk_put_i32(w, first);
        tk_put_u64(w, seq < 0 ? rs->seqs[c] : 1);
        if (tmp) cell_pack(rs, c, tmp);
        if (tmp) tk_put(w, tmp, rs->cell_n * sizeof(float));
        else w->off += rs->cell_n * sizeof(float);
    }
    tk_section_end(w, at);
}

static void rs_write_ckpts(tk_memory_rs * rs, tk_wbuf * w, int32_t seq) {
    const uint64_t at = tk_section_begin(w, TK_TAG_CKPT);
    uint32_t n = 0;
    for (int32_t s = 0; s < rs->n_cells; s++)
        for (int32_t j = 0; j < rs->n_ckpt; j++)
            n += (seq < 0 || s == seq) && rs->ckpt_pos[(size_t) s * rs->n_ckpt + j] >= 0;
    tk_put_u32(w, n);
    tk_put_u32(w, 0);
    tk_put_u64(w, rs->cell_n);
    for (int32_t s = 0; s < rs->n_cells; s++)
        for (int32_t j = 0; j < rs->n_ckpt; j++) {
            const size_t k = (size_t) s * rs->n_ckpt + j;
            if ((seq >= 0 && s != seq) || rs->ckpt_pos[k] < 0) continue;
            tk_put_i32(w, seq < 0 ? s : 0);
            tk_put_i32(w, rs->ckpt_pos[k]);
            tk_put(w, rs->ckpt + k * rs->cell_n, rs->cell_n * sizeof(float));
        }
    tk_section_end(w, at);
}

static void rs_state_write(tk_memory * m, tk_wbuf * w, int32_t seq, float * tmp) {
    rs_write_states(RS(m), w, seq, tmp);
    rs_write_ckpts(RS(m), w, seq);
}

static tk_status rs_read_states(tk_memory_rs * rs, tk_rbuf * q, tk_state_rd * rd) {
    if (rd->seen[TK_TAG_RS]++) return TK_STATE_BAD("two recurrent sections");
    uint32_t ns, pad;
    uint64_t cn;
    if (!tk_get(q, &ns, 4) || !tk_get(q, &pad, 4) || !tk_get(q, &cn, 8)) return TK_STATE_BAD("recurrent section truncated");
    if (cn != rs->cell_n) return TK_STATE_BAD("recurrent state of %llu floats, the model's is %zu", (unsigned long long) cn, rs->cell_n);
    if ((int64_t) ns > (rd->seq < 0 ? rs->n_cells : 1)) return TK_STATE_BAD("%u recurrent states for %d cells", ns, rd->seq < 0 ? rs->n_cells : 1);
    uint64_t used = 0;
    for (uint32_t i = 0; i < ns; i++) {
        int32_t pos, first;
        uint64_t set;
        if (!tk_get(q, &pos, 4) || !tk_get(q, &first, 4) || !tk_get(q, &set, 8)) return TK_STATE_BAD("recurrent state %u truncated", i);
        if (rd->seq < 0 ? (!set || (set & ~rd->all_seqs) || (set & used)) : set != 1)
            return TK_STATE_BAD("recurrent state %u has sequence set %#llx", i, (unsigned long long) set);
        if (first < 0 || pos < first) return TK_STATE_BAD("recurrent state %u: positions %d..%d", i, first, pos);
        if (rd->seq >= 0) set = rd->dst_bit;
        used |= set;
        for (int32_t s = 0; s < rd->n_seq; s++) if (set >> s & 1) rd->rs_pos[s] = pos;
        int32_t c = -1;
        if (rd->apply) {
            for (int32_t k = 0; k < rs->n_cells && c < 0; k++) if (!rs->seqs[k]) c = k;
            if (c < 0) return TK_FAIL(TK_ERR_STATE, "state: no free recurrent cell");  /* not reached */
            rs->seqs[c] = set;
            rs->pos[c] = pos;
            for (int32_t s = 0; s < rd->n_seq; s++) if (set >> s & 1) { rs->tail[s] = c; rs->start[s] = first; }
            for (int32_t s = 0; s < rd->n_seq && rs->n_snap > 0; s++) if (set >> s & 1) ring_drop_from(rs, s, 0);
            memcpy(rd->tmp, q->p + q->off, rs->cell_n * sizeof(float));   /* the blob may be unaligned */
            cell_unpack(rs, c, rd->tmp);
        }
        if (!tk_get(q, NULL, rs->cell_n * sizeof(float))) return TK_STATE_BAD("recurrent state %u truncated", i);
    }
    return TK_OK;
}

/* keep the newest n_ckpt snapshots of sequence ds */
static void rs_read_ckpt_apply(tk_memory_rs * rs, int32_t ds, int32_t pos, const uint8_t * data) {
    int32_t * P = rs->ckpt_pos + (size_t) ds * rs->n_ckpt, slot = -1;
    for (int32_t j = 0; j < rs->n_ckpt && slot < 0; j++) if (P[j] < 0) slot = j;
    if (slot < 0) {
        slot = 0;
        for (int32_t j = 1; j < rs->n_ckpt; j++) if (P[j] < P[slot]) slot = j;
        if (P[slot] > pos) slot = -1;
    }
    if (slot >= 0) {
        P[slot] = pos;
        memcpy(rs->ckpt + ((size_t) ds * rs->n_ckpt + slot) * rs->cell_n, data, rs->cell_n * sizeof(float));
    }
}

static tk_status rs_read_ckpts(tk_memory_rs * rs, tk_rbuf * q, tk_state_rd * rd) {
    if (rd->seen[TK_TAG_CKPT]++) return TK_STATE_BAD("two checkpoint sections");
    if (!rd->seen[TK_TAG_RS]) return TK_STATE_BAD("checkpoint section before the recurrent section");
    uint32_t n, pad;
    uint64_t cn;
    if (!tk_get(q, &n, 4) || !tk_get(q, &pad, 4) || !tk_get(q, &cn, 8)) return TK_STATE_BAD("checkpoint section truncated");
    if (cn != rs->cell_n) return TK_STATE_BAD("checkpoints of %llu floats, the model's state is %zu", (unsigned long long) cn, rs->cell_n);
    for (uint32_t i = 0; i < n; i++) {
        int32_t s, pos;
        if (!tk_get(q, &s, 4) || !tk_get(q, &pos, 4)) return TK_STATE_BAD("checkpoint %u truncated", i);
        if (rd->seq >= 0 && s != 0) return TK_STATE_BAD("checkpoint %u for sequence %d in a one-sequence state", i, s);
        if (s < 0 || s >= rd->n_seq) return TK_STATE_BAD("checkpoint %u for sequence %d (n_seq_max = %d)", i, s, rd->n_seq);
        const int32_t ds = rd->seq >= 0 ? rd->seq : s;
        if (pos < 0 || pos > rd->rs_pos[ds]) return TK_STATE_BAD("checkpoint %u at position %d, sequence %d ends at %d", i, pos, s, rd->rs_pos[ds]);
        if (rd->apply && rs->n_ckpt > 0 && q->n - q->off >= rs->cell_n * sizeof(float))
            rs_read_ckpt_apply(rs, ds, pos, q->p + q->off);
        if (!tk_get(q, NULL, rs->cell_n * sizeof(float))) return TK_STATE_BAD("checkpoint %u truncated", i);
    }
    return TK_OK;
}

static tk_status rs_state_read(tk_memory * m, uint32_t tag, tk_rbuf * q, tk_state_rd * rd) {
    if (tag == TK_TAG_RS) return rs_read_states(RS(m), q, rd);
    if (tag == TK_TAG_CKPT) return rs_read_ckpts(RS(m), q, rd);
    return TK_STATE_BAD("a KV section, but this model has no attention layer");
}

static tk_status rs_state_read_end(tk_memory * m, const tk_state_rd * rd) {
    (void) m;
    if (!rd->seen[TK_TAG_RS] || !rd->seen[TK_TAG_CKPT]) return TK_STATE_BAD("no recurrent or checkpoint section");
    return TK_OK;
}

static size_t rs_state_tmp_floats(tk_memory * m) { return RS(m)->cell_n; }

static void rs_free(tk_memory * m) {
    tk_memory_rs * rs = RS(m);
    if (!rs) return;
    if (rs->data)
        for (int32_t l = 0; l < rs->n_layer; l++)
            for (int32_t k = 0; k < TK_RS_MAX_PIECES; k++) free(rs->data[l][k]);
    free(rs->data);
    free(rs->piece);
    free(rs->n_pieces);
    free(rs->pos);
    free(rs->seqs);
    free(rs->ub_cells);
    free(rs->ckpt_pos);
    free(rs->ckpt);
    ring_free(rs);
    free(rs->snap_row);
    free(rs);
}

static void rs_prefault(tk_memory * m) {
    tk_memory_rs * rs = RS(m);
    const size_t ring_rows = (size_t) rs->n_cells * (size_t) rs->n_snap;
    for (int32_t l = 0; l < rs->n_layer; l++)
        for (int32_t k = 0; k < rs->n_pieces[l]; k++) {
            tk_touch_pages(rs->data[l][k], ((size_t) rs->n_cells * rs->piece[l][k].n + 1) * sizeof(float));
            if (rs->ring) tk_touch_pages(rs->ring[l][k], ring_rows * rs->piece[l][k].n * sizeof(float) + 1);
        }
    tk_touch_pages(rs->ckpt, (size_t) rs->n_cells * (size_t) rs->n_ckpt * rs->cell_n * sizeof(float) + 1);
}

static const tk_memory RS_METHODS = {
    .clear = rs_clear,
    .can_seq_rm = rs_can_seq_rm,
    .seq_rm_end = rs_seq_rm_end,
    .seq_rm = rs_seq_rm,
    .seq_cp = rs_seq_cp,
    .seq_keep = rs_seq_keep,
    .seq_pos_min = rs_seq_pos_min,
    .seq_pos_max = rs_seq_pos_max,
    .can_fit = rs_can_fit,
    .prepare = rs_prepare,
    .free = rs_free,
    .can_seq_add = rs_can_seq_add,
    .seq_add = rs_seq_add,
    .kv_view = tk_memory_no_view_kv,
    .rs_view = rs_view,
    .set_checkpoints = rs_set_checkpoints,
    .checkpoint = rs_checkpoint,
    .checkpoints = rs_checkpoints,
    .ckpt_next = rs_ckpt_next,
    .after_ubatch = rs_after_ubatch,
    .report = rs_report,
    .prefault = rs_prefault,
    .state_write = rs_state_write,
    .state_read = rs_state_read,
    .state_read_end = rs_state_read_end,
    .state_tmp_floats = rs_state_tmp_floats,
    .set_spec_window = rs_set_spec_window,
};

/* the pieces of each recurrent layer, as its kind names them, zeroed */
static tk_status rs_alloc_pieces(tk_memory_rs * rs, const tk_model * model) {
    for (int32_t l = 0; l < rs->n_layer; l++) {
        const tk_mixer_ops * ops = tk_mixer_ops_of(model->hp.layer_kinds[l]);
        if (!ops || !ops->rs_pieces) continue;
        rs->n_pieces[l] = ops->rs_pieces(model, l, rs->piece[l]);
        for (int32_t k = 0; k < rs->n_pieces[l]; k++) {
            rs->data[l][k] = calloc((size_t) rs->n_cells * rs->piece[l][k].n + 1, sizeof(float));
            if (!rs->data[l][k]) return TK_FAIL(TK_ERR_NOMEM, "out of memory allocating the recurrent state");
            rs->cell_n += rs->piece[l][k].n;
        }
    }
    return TK_OK;
}

tk_status tk_memory_rs_estimate(const tk_model * model, int32_t n_cells, int32_t n_ckpt, int32_t k, uint32_t flags,
                                tk_memory_report * r) {
    TK_CHECK(check_ckpt(n_ckpt));
    TK_CHECK(check_window(k, NULL, 0, -1));
    uint64_t cell_n = 0;       /* floats of one state: every piece of every layer, as rs_alloc_pieces sizes them */
    for (int32_t l = 0; l < model->hp.n_layer; l++) {
        const tk_mixer_ops * ops = tk_mixer_ops_of(model->hp.layer_kinds[l]);
        if (!ops || !ops->rs_pieces) continue;
        tk_rs_piece pc[TK_RS_MAX_PIECES];
        const int32_t n = ops->rs_pieces(model, l, pc);
        TK_CHECK(check_window(k, pc, n, l));
        for (int32_t j = 0; j < n; j++) cell_n = tk_sat_add(cell_n, pc[j].n);
    }
    const uint64_t state = tk_sat_mul(tk_sat_mul((uint64_t) n_cells, cell_n), sizeof(float));
    r->recurrent_bytes = tk_sat_add(r->recurrent_bytes, state);
    r->checkpoint_bytes = tk_sat_add(r->checkpoint_bytes, tk_sat_mul(state, (uint64_t) n_ckpt));
    r->draft_bytes = tk_sat_add(r->draft_bytes, tk_sat_mul(state, (uint64_t) window_rows(k, flags)));
    return TK_OK;
}

tk_status tk_memory_rs_new(const tk_model * model, int32_t n_cells, tk_memory ** out) {
    const tk_hparams * hp = &model->hp;
    *out = NULL;
    if (n_cells <= 0 || n_cells > TK_MAX_SEQ) return TK_FAIL(TK_ERR_INVALID, "n_seq_max = %d must be in [1, %d]", n_cells, TK_MAX_SEQ);
    tk_memory_rs * rs = calloc(1, sizeof *rs);
    if (!rs) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    rs->base = RS_METHODS;
    rs->n_cells = n_cells;
    rs->n_layer = hp->n_layer;
    rs->pos = malloc((size_t) n_cells * sizeof(int32_t));
    rs->seqs = calloc((size_t) n_cells, sizeof(uint64_t));
    rs->ub_cells = malloc((size_t) n_cells * sizeof(int32_t));
    rs->n_pieces = calloc((size_t) hp->n_layer, sizeof *rs->n_pieces);
    rs->piece = calloc((size_t) hp->n_layer, sizeof *rs->piece);
    rs->data = calloc((size_t) hp->n_layer, sizeof *rs->data);
    if (!rs->pos || !rs->seqs || !rs->ub_cells || !rs->n_pieces || !rs->piece || !rs->data) {
        rs_free(&rs->base);
        return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    }
    tk_status st = rs_alloc_pieces(rs, model);
    if (st != TK_OK) {
        rs_free(&rs->base);
        return st;
    }
    rs_clear(&rs->base);
    *out = &rs->base;
    return TK_OK;
}
