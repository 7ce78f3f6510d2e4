/* memory.h: the memory interface (the shape of llama.cpp's llama_memory_i) and its three
 * implementations: kv (memory_kv.c), rs (memory_rs.c), hybrid (memory_hybrid.c).
 *
 * The context holds only a tk_memory *.  Everything that touches cached state goes
 * through it: sequence operations, what a layer reads and writes during a ubatch (views),
 * checkpoints, the memory report and state files (each memory writes and reads its own
 * sections of the blob; framing, checksum and fingerprint are state.c's).
 *
 * Recurrent state is a list of named per-layer pieces (conv window, SSM state, ...) whose
 * sizes the layer kind gives (tk_mixer_ops.rs_pieces, layer.h); checkpoints, seq_cp, state
 * files and the report handle any piece without new code.
 */
#ifndef TK_MEMORY_H
#define TK_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "toolkit.h"

#define TK_MAX_SEQ 64
#define TK_RS_MAX_PIECES 4     /* recurrent pieces per layer */
#define TK_MAX_UB_SNAP 257     /* tokens of a ubatch row that keeps snapshots: speculative window k + 1 <= 257 */

/* One micro-batch: n_seqs sequences x n_seq_tokens tokens, token t = s*n_seq_tokens + i. */
typedef struct {
    int32_t n_tokens;
    int32_t n_seqs;
    int32_t n_seq_tokens;
    int32_t * token;           /* [n_tokens] */
    int32_t * pos;             /* [n_tokens] */
    int32_t * seq;             /* [n_seqs] sequence id of each row */
    int32_t * out_row;         /* [n_tokens] logits row or -1 */
    uint8_t * snap_skip_last;  /* [n_seqs] 1: row s ends with its sequence's last token of the batch and the
                                * context asked for no snapshot there (TK_SPEC_NO_LAST; memory_rs.c) */
    int32_t keep_snaps;        /* the batch asked for the speculative window's snapshots (TK_BATCH_SNAPSHOTS) */
    int32_t * bidx;            /* [n_tokens] the token's index in the batch (tk_batch.embd / hidden_out rows) */
} tk_ubatch;

/* What an attention layer sees of the KV cache during a ubatch (after prepare). */
typedef struct {
    void * k, * v;             /* cell c's K row at (char *) k + c * k_row, V row at (char *) v + c * v_row:
                                * kv_dim values of type_k / type_v (tk_context_params; f32: [n_cells, kv_dim] floats) */
    const int32_t * pos;       /* [n_cells] position, -1 = empty */
    const uint64_t * seqs;     /* [n_cells] bit set of sequences that see the cell */
    const int32_t * ub_cells;  /* [n_tokens of the ubatch] cell of each token */
    int32_t n_cells, kv_dim;
    float * ik;                /* cell c's third row (QSA raw indexer key) at + c * ik_dim, or NULL */
    int32_t ik_dim;
    int32_t window;            /* sliding-window layer: a token at p sees cells with p - window < pos <= p; 0: all */
    int32_t type_k, type_v;    /* ggml types of the K and V rows (TK_GGML_F32, F16, BF16, Q8_0, Q4_0) */
    size_t k_row, v_row;       /* bytes of one cell's K row and V row */
} tk_kv_view;

/* What a recurrent layer sees of its state during a ubatch (after prepare): ubatch row s
 * (sequence ub->seq[s]) owns piece k at piece[k] + ub_cells[s] * piece_n[k]. */
typedef struct {
    float * piece[TK_RS_MAX_PIECES];
    size_t piece_n[TK_RS_MAX_PIECES];   /* floats per cell */
    int32_t n_pieces;
    const int32_t * ub_cells;  /* [n_seqs of the ubatch] */
    /* speculative window (tk_context_set_spec_window, memory_rs.c): the ring of piece k,
     * [n_seq_max * (K+1), piece_n[k]] (NULL: no window), and the ring row that keeps the
     * state after ubatch token t = s * n_seq_tokens + i, or -1 (see tk_rs_snap) */
    float * snap[TK_RS_MAX_PIECES];
    const int32_t * snap_row;  /* [n_tokens of the ubatch] */
} tk_rs_view;

/* Where a recurrent kind copies piece k of ubatch row s's state after that row's token i
 * (the whole piece of one cell, at the offsets the live piece uses), or NULL when no
 * snapshot is kept for that token.  A row with any snapshot takes the token-by-token
 * recurrence (its bits equal n one-token steps), never a chunked form. */
static inline float * tk_rs_snap(const tk_rs_view * v, int k, int32_t s, int32_t n_seq_tokens, int32_t i) {
    if (!v->snap[k] || !v->snap_row) return NULL;
    const int32_t r = v->snap_row[s * n_seq_tokens + i];
    return r < 0 ? NULL : v->snap[k] + (size_t) r * v->piece_n[k];
}
/* does row s keep any snapshot in this ubatch? */
static inline int tk_rs_snaps_row(const tk_rs_view * v, int32_t s, int32_t n_seq_tokens) {
    for (int32_t i = 0; v->snap[0] && v->snap_row && i < n_seq_tokens; i++)
        if (v->snap_row[s * n_seq_tokens + i] >= 0) return 1;
    return 0;
}

/* A piece's description (given by the layer kind). */
typedef struct {
    const char * name;         /* "conv", "ssm", ... */
    size_t n;                  /* floats per sequence */
    int snap;                  /* 1: the kind writes the piece's per-token snapshots (tk_rs_snap,
                                  tk_rs_snap_conv) in a speculative window; 0: a window is refused
                                  for the model (a rollback would restore the piece stale) */
} tk_rs_piece;

/* ---- state blobs: section writer and reader (state.c) ---- */
/* ckpts: the memory whose checkpoints a sliding-window KV cache writes the windows of (the
 * hybrid sets it to its recurrent child; NULL: only the window the next token sees) */
typedef struct { uint8_t * p; uint64_t cap, off; struct tk_memory * ckpts; } tk_wbuf;   /* p NULL: size pass */
typedef struct { const uint8_t * p; uint64_t n, off; } tk_rbuf;
/* Make [p, p + n) resident: read and write back one byte per page (state.c) */
void tk_touch_pages(void * p, size_t n);
void tk_put(tk_wbuf * w, const void * src, size_t n);
void tk_put_u32(tk_wbuf * w, uint32_t v);
void tk_put_i32(tk_wbuf * w, int32_t v);
void tk_put_u64(tk_wbuf * w, uint64_t v);
uint64_t tk_section_begin(tk_wbuf * w, uint32_t tag);
void tk_section_end(tk_wbuf * w, uint64_t at);
int tk_get(tk_rbuf * r, void * dst, uint64_t n);   /* 0 when short; dst NULL skips */
#define TK_STATE_BAD(...) TK_FAIL(TK_ERR_INVALID, "state: " __VA_ARGS__)
enum { TK_TAG_KV = 1, TK_TAG_RS = 2, TK_TAG_CKPT = 3, TK_TAG_KV_SWA = 4 };

/* What a blob read carries from section to section. */
typedef struct {
    int32_t seq;               /* -1: a context blob into the whole context; else the target sequence */
    int apply;                 /* 0: check only; 1: write into the memory (after a clean check) */
    int32_t n_seq;             /* n_seq_max */
    uint64_t all_seqs, dst_bit;
    int seen[5];               /* sections seen, by tag */
    int32_t kv_last[TK_MAX_SEQ];   /* last position per sequence in the KV section, -1 none */
    int32_t rs_pos[TK_MAX_SEQ];    /* state position per sequence in the recurrent section */
    float * tmp;               /* scratch of state_tmp_floats */
    int32_t swa_last[TK_MAX_SEQ];  /* last position per sequence in the sliding-window KV section, -1 none */
} tk_state_rd;

typedef struct tk_memory tk_memory;
struct tk_memory {
    void     (*clear)(tk_memory * m);
    bool     (*can_seq_rm)(tk_memory * m, int32_t seq, int32_t p0, int32_t p1);
    void     (*seq_rm)(tk_memory * m, int32_t seq, int32_t p0, int32_t p1);   /* after can_seq_rm */
    void     (*seq_cp)(tk_memory * m, int32_t src, int32_t dst, int32_t p0, int32_t p1);
    void     (*seq_keep)(tk_memory * m, int32_t seq);
    int32_t  (*seq_pos_min)(tk_memory * m, int32_t seq);
    int32_t  (*seq_pos_max)(tk_memory * m, int32_t seq);
    /* room for a batch of n_tokens over these sequences? (checked before any change) */
    tk_status (*can_fit)(tk_memory * m, int32_t n_tokens);
    /* claim cells for the ubatch (kv: one per token; rs: one per sequence) */
    tk_status (*prepare)(tk_memory * m, const tk_ubatch * ub);
    void     (*free)(tk_memory * m);
    /* shift positions [p0, p1) of seq by delta; can_ first, then seq_add */
    bool     (*can_seq_add)(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta);
    void     (*seq_add)(tk_memory * m, int32_t seq, int32_t p0, int32_t p1, int32_t delta);
    /* views of layer il for the current ubatch; TK_ERR_STATE when this memory has none */
    tk_status (*kv_view)(tk_memory * m, int il, tk_kv_view * out);
    tk_status (*rs_view)(tk_memory * m, int il, tk_rs_view * out);
    /* checkpoints (recurrent snapshots; a KV cache rolls back without them) */
    tk_status (*set_checkpoints)(tk_memory * m, int32_t n_per_seq, int32_t every);
    void     (*checkpoint)(tk_memory * m, int32_t seq);                   /* snapshot seq now */
    int32_t  (*checkpoints)(tk_memory * m, int32_t seq, int32_t * pos, int32_t cap);  /* ascending; returns n */
    int32_t  (*ckpt_next)(tk_memory * m, int32_t pos);   /* next periodic snapshot position > pos, or INT32_MAX */
    void     (*after_ubatch)(tk_memory * m, const tk_ubatch * ub);         /* periodic snapshots */
    /* bytes held (kv_bytes, recurrent_bytes, checkpoint_bytes; compute_bytes is the context's) */
    void     (*report)(tk_memory * m, tk_memory_report * r);
    /* write every page of what report counts (contents kept): tk_context_prefault */
    void     (*prefault)(tk_memory * m);
    /* state files: write this memory's sections (seq -1: all, else one sequence); read one
     * section (TK_ERR_INVALID for a tag it does not own); after the last section of the
     * check pass, read_end checks that nothing is missing and the children agree */
    void     (*state_write)(tk_memory * m, tk_wbuf * w, int32_t seq, float * tmp);
    tk_status (*state_read)(tk_memory * m, uint32_t tag, tk_rbuf * q, tk_state_rd * rd);
    tk_status (*state_read_end)(tk_memory * m, const tk_state_rd * rd);
    size_t   (*state_tmp_floats)(tk_memory * m);   /* scratch floats state_write/read need */
    /* speculative window: keep per sequence the states after its last k + 1 tokens decoded
     * in ubatch rows of at most k + 1 tokens (0: off); seq_rm(seq, p, -1) with the state at
     * p - 1 kept restores it (memory_rs.c).  NULL: a memory without recurrent state (a KV
     * cache rolls back without snapshots) */
    tk_status (*set_spec_window)(tk_memory * m, int32_t k, uint32_t flags);   /* flags: TK_SPEC_NO_LAST */
    /* where seq's state ends after seq_rm(seq, p0, p1) that can_seq_rm allowed (-1: dropped);
     * NULL: a memory without recurrent state (it ends at p0 - 1 or stays) */
    int32_t  (*seq_rm_end)(tk_memory * m, int32_t seq, int32_t p0, int32_t p1);
    /* can seq continue exactly after everything past position q is dropped?  A sliding-window
     * cache answers no when it no longer holds the window that position q + 1 sees.
     * NULL: always */
    bool     (*can_end_at)(tk_memory * m, int32_t seq, int32_t q);
    /* a sliding-window cache: seq keeps its last positions before last + 1 and the window of
     * each position ck[0..n_ck) (the recurrent checkpoints); NULL: nothing to trim */
    void     (*trim)(tk_memory * m, int32_t seq, int32_t last, const int32_t * ck, int32_t n_ck);
};

/* Constructors: kv allocates K and V for the layers whose kind has a kv_dim, rs the pieces of
 * the layers whose kind has rs_pieces (layer.h). */
tk_status tk_memory_kv_new(const tk_model * model, int32_t n_cells, int32_t n_ubatch, int32_t type_k, int32_t type_v,
                           tk_memory ** out);
/* sel TK_KV_ALL: every layer with a kv_dim (tk_memory_kv_new); TK_KV_FULL: those not sliding;
 * TK_KV_SWA: the sliding-window layers (hp.attn.swa_layers), cells holding only each sequence's
 * window (memory_kv.c: tk_kv_swa_cells) */
enum { TK_KV_ALL = 0, TK_KV_FULL = 1, TK_KV_SWA = 2 };
tk_status tk_memory_kv_new_sel(const tk_model * model, int32_t n_cells, int32_t n_ubatch, int32_t n_seq, int sel,
                               int32_t type_k, int32_t type_v, tk_memory ** out);
/* type_k / type_v: the ggml type of the K / V rows (tk_context_params.type_k, type_v; checked by
 * tk_kv_types_check); the third array (indexer keys) is always float32 */
/* TK_OK when type_k and type_v are KV cache types (f32, f16, bf16, q8_0, q4_0) the model's layers
 * can hold: a block type needs every K and V head a whole number of blocks, and MLA's latent row
 * (kv_lora_rank + rope values, of type_k; no V rows, type_v stores nothing there) a whole number
 * of blocks (TK_ERR_UNSUPPORTED names the layer) */
tk_status tk_kv_types_check(const tk_model * model, int32_t type_k, int32_t type_v);
/* bytes of one cell's row of n values of a KV type */
size_t tk_kv_row_bytes(int32_t type, int32_t n);
/* cells of the sliding-window cache: n_seq x (W + k + n_ckpt x (W - 1)) + n_ubatch (k: the
 * speculative window, n_ckpt: checkpoints per sequence), at most n_ctx */
int32_t tk_kv_swa_cells(int32_t n_swa, int32_t n_ctx, int32_t n_seq, int32_t n_ubatch, int32_t k, int32_t n_ckpt);
/* cells of a KV cache (memory_kv.c) that seq sees with positions in [lo, hi] */
int32_t tk_kv_count(tk_memory * kv, int32_t seq, int32_t lo, int32_t hi);
/* full (non-sliding) and sliding-window KV caches as one (memory_iswa.c); owns both */
tk_status tk_memory_iswa_new(const tk_model * model, tk_memory * full, tk_memory * swa, tk_memory ** out);
tk_status tk_memory_rs_new(const tk_model * model, int32_t n_cells, tk_memory ** out);
/* owns both children from here on (frees them on failure too) */
tk_status tk_memory_hybrid_new(tk_memory * kv, tk_memory * rs, int32_t n_seq, tk_memory ** out);

/* What such a memory would hold, without allocating it: the figures its `report` gives once it
 * is made, computed from the layer kinds as its constructor sizes them (a hybrid: both).
 * kv: kv_bytes of n_ctx cells per attention layer, or on a sliding-window layer (hp.attn.swa_layers)
 * the sliding cache's tk_kv_swa_cells(n_swa, n_ctx, n_seq, n_ubatch, k, n_ckpt).  rs:
 * recurrent_bytes of n_cells sequences, checkpoint_bytes with n_ckpt per sequence and
 * draft_bytes with a speculative window k (flags TK_SPEC_NO_LAST), n_ckpt and k refused as
 * set_checkpoints / set_spec_window refuse them.  Sums saturate. */
void tk_memory_kv_estimate(const tk_model * model, int32_t n_ctx, int32_t n_ubatch, int32_t n_seq, int32_t n_ckpt, int32_t k,
                           int32_t type_k, int32_t type_v, tk_memory_report * r);
tk_status tk_memory_rs_estimate(const tk_model * model, int32_t n_cells, int32_t n_ckpt, int32_t k, uint32_t flags,
                                tk_memory_report * r);

/* the tk_memory default methods a memory without that part uses (memory_hybrid.c) */
tk_status tk_memory_no_view_kv(tk_memory * m, int il, tk_kv_view * out);
tk_status tk_memory_no_view_rs(tk_memory * m, int il, tk_rs_view * out);

#endif
