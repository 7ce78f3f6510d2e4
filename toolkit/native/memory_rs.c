/* memory_rs.c: the recurrent state cache (tk_memory_rs), one implementation of tk_memory.
 *
 * n_cells = n_seq_max cells.  A cell holds, for every recurrent layer, one conv state
 * [conv_dim, d_conv-1] and one SSM state [d_inner, d_state] (Mamba-2: [H, P, N]); the
 * kernels update it in place.  Each sequence points at its tail cell; seq_cp shares a cell
 * (copy on write: a shared cell is copied to a free one before the sequence advances).
 * A cell claimed for a sequence with no state is zeroed: position 0 starts from zero state.
 * A state cannot be partly rolled back, so seq_rm refuses a removal that would cut it.
 * ref: llama.cpp src/llama-memory-recurrent.{h,cpp}.
 */
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"

static tk_memory_rs * RS(tk_memory * m) { return (tk_memory_rs *) m; }

static int popcount64(uint64_t v) { int n = 0; while (v) { v &= v - 1; n++; } return n; }

static void cell_release(tk_memory_rs * rs, int32_t seq) {
    int32_t c = rs->tail[seq];
    if (c < 0) return;
    rs->seqs[c] &= ~(UINT64_C(1) << seq);
    if (!rs->seqs[c]) rs->pos[c] = -1;
    rs->tail[seq] = -1;
}

static void rs_clear(tk_memory * m) {
    tk_memory_rs * rs = RS(m);
    for (int32_t i = 0; i < rs->n_cells; i++) { rs->pos[i] = -1; rs->seqs[i] = 0; }
    for (int32_t s = 0; s < TK_MAX_SEQ; s++) rs->tail[s] = -1;
}

/* Refuse a removal that would leave part of a state: the range must cover the whole
 * sequence (p0 <= 0 and the state's position inside) or lie entirely after its end. */
static bool rs_can_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    tk_memory_rs * rs = RS(m);
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    if (seq < 0) return p0 == p1 || (p0 == 0 && p1 == INT32_MAX);
    int32_t c = rs->tail[seq];
    if (c < 0) return true;
    const int32_t cpos = rs->pos[c];
    if (p0 >= p1 || p0 > cpos) return true;        /* nothing of this state in range */
    return p0 == 0 && p1 > cpos;                   /* whole state */
}

static void rs_seq_rm(tk_memory * m, int32_t seq, int32_t p0, int32_t p1) {
    tk_memory_rs * rs = RS(m);
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    if (p0 >= p1) return;
    if (seq < 0) { rs_clear(m); return; }
    int32_t c = rs->tail[seq];
    if (c >= 0 && p0 <= rs->pos[c] && rs->pos[c] < p1) cell_release(rs, seq);
}

static void rs_seq_cp(tk_memory * m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    tk_memory_rs * rs = RS(m);
    (void) p0; (void) p1;      /* a state is whole: dst gets src's state as it is */
    if (src == dst) return;
    cell_release(rs, dst);
    int32_t c = rs->tail[src];
    if (c < 0) return;
    rs->seqs[c] |= UINT64_C(1) << dst;
    rs->tail[dst] = c;
}

static void rs_seq_keep(tk_memory * m, int32_t seq) {
    tk_memory_rs * rs = RS(m);
    for (int32_t s = 0; s < TK_MAX_SEQ; s++)
        if (s != seq) cell_release(rs, s);
}

static int32_t rs_seq_pos_min(tk_memory * m, int32_t seq) {
    tk_memory_rs * rs = RS(m);
    return rs->tail[seq] < 0 ? -1 : rs->pos[rs->tail[seq]];
}

static int32_t rs_seq_pos_max(tk_memory * m, int32_t seq) { return rs_seq_pos_min(m, seq); }

static tk_status rs_can_fit(tk_memory * m, int32_t n_tokens) {
    (void) m; (void) n_tokens;  /* one cell per sequence always exists (n_cells = n_seq_max) */
    return TK_OK;
}

static int32_t free_cell(tk_memory_rs * rs) {
    for (int32_t i = 0; i < rs->n_cells; i++)
        if (!rs->seqs[i]) return i;
    return -1;
}

static void cell_copy(tk_memory_rs * rs, int32_t dst, int32_t src) {
    for (int32_t l = 0; l < rs->n_layer; l++) {
        if (!rs->conv[l]) continue;
        memcpy(rs->conv[l] + (size_t) dst * rs->conv_n, rs->conv[l] + (size_t) src * rs->conv_n, rs->conv_n * sizeof(float));
        memcpy(rs->ssm[l] + (size_t) dst * rs->ssm_n, rs->ssm[l] + (size_t) src * rs->ssm_n, rs->ssm_n * sizeof(float));
    }
}

static void cell_zero(tk_memory_rs * rs, int32_t c) {
    for (int32_t l = 0; l < rs->n_layer; l++) {
        if (!rs->conv[l]) continue;
        memset(rs->conv[l] + (size_t) c * rs->conv_n, 0, rs->conv_n * sizeof(float));
        memset(rs->ssm[l] + (size_t) c * rs->ssm_n, 0, rs->ssm_n * sizeof(float));
    }
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
            if (c < 0) cell_zero(rs, nc);
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
    free(rs);
}

tk_status tk_memory_rs_new(const tk_model * model, int32_t n_cells, tk_memory_rs ** out) {
    const tk_hparams * hp = &model->hp;
    *out = NULL;
    if (n_cells <= 0 || n_cells > TK_MAX_SEQ) return TK_FAIL(TK_ERR_INVALID, "n_seq_max = %d must be in [1, %d]", n_cells, TK_MAX_SEQ);
    tk_memory_rs * rs = calloc(1, sizeof *rs);
    if (!rs) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    rs->base = (tk_memory){rs_clear, rs_can_seq_rm, rs_seq_rm, rs_seq_cp, rs_seq_keep, rs_seq_pos_min,
                           rs_seq_pos_max, rs_can_fit, rs_prepare, rs_free};
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
    }
    rs_clear(&rs->base);
    *out = rs;
    return TK_OK;
}
