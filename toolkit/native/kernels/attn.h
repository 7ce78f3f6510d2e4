/* attn.h: blocked attention over the KV cache (kernels/attn.c, the driver and the plain
 * instance; attn_avx2.c, attn_avx512.c the SIMD instances of attn_body.h).  Internal: the
 * attention kinds (mixer_attention.c for MHA / GQA, QSA's selected cells, sliding windows;
 * mixer_mla.c for MLA's latent rows and DSA's selected cells) fill a tk_attn_args and call
 * tk_attn_run.
 *
 * Shapes (U ubatch tokens, H query heads, Hkv KV heads, grp = H / Hkv, dk key width, dv value
 * width, n = kv->n_cells):
 *   query row (t, h): q + t q_ts + h q_hs           [dk]
 *   output row (t, h): o + t o_ts + h o_hs          [dv]  (written, fully)
 *   key of cell c, KV head g: k + c k_cs + g k_gs   [dk]
 *   value of cell c, KV head g: v + c v_cs + g v_gs [dv]  (MLA: v = k, the latent's first dv floats)
 *   a typed cache (type_k or type_v not TK_GGML_F32: tk_context_params.type_k / type_v): the
 *   rows are kt + c k_cb + g k_gb (bytes) of dk values of type_k, vt + c v_cb + g v_gb of dv
 *   of type_v, and k, v are unused.  Each chunk's rows that some token of the tile sees are
 *   converted (the type's to_float) into the thread's workspace, [CH, dk] and [CH, dv], and
 *   the chunk runs on them as on a float32 cache: never a float copy of the whole cache.  MLA's
 *   typed latent (vt = kt, v_cb = k_cb, v_gb = k_gb, type_v = type_k, dv <= dk): V is the prefix of
 *   K's converted row, converted once.
 * Formula, per (t, h), g = h / grp:
 *   o = sum_c softmax_c(scale q . k_c) v_c over the cells t sees: seqs[c] has t's sequence,
 *   0 <= pos[c] <= pos_t, pos[c] > pos_t - window (a sliding layer), sel[t n + c] (QSA / DSA);
 *   o = 0 when t sees no cell.
 * Blocked form (FlashAttention's online softmax, split-K as flash decoding):
 *   a token's cells are its sequence's, in position order, in chunks of TK_ATTN_CHUNK
 *   positions (chunk k: pos in [k CH, (k + 1) CH), slot pos - k CH), the chunks in
 *   super-chunks of TK_ATTN_SUPER.  Per row and chunk: m = max score, p = exp(s - m),
 *   l = sum p, O = sum p v.  A row's partials are folded in position order: chunks into
 *   their super-chunk's (m, l, O), super-chunks into the total, each fold (m, l, O) + (m', l', O'):
 *     M = max(m, m'), a = exp(m - M), b = exp(m' - M), O = a O + b O', l = a l + b l'.
 *   o = O / l.  A row's arithmetic depends only on its query and its sequence's cells by
 *   position (fixed boundaries, fixed order), never on the other rows of its tile, on where
 *   the cells lie in the cache, on the other sequences, or on which thread ran what: a
 *   token's output is the same in any ubatch, batch and thread count
 *   (tests/unit/test_attn_blocked.py).  A sequence with two cells at one position is left to
 *   the reference kernel (tk_attn_run returns 0).
 * Work: per ubatch row (one sequence), a tile is T of its tokens x the grp heads of one KV
 * group (T grp >= TK_ATTN_ROWS where the row allows), so each K / V chunk is read once per
 * tile; tiles x groups go to the threads.  When the tiles are fewer than twice the threads
 * (decoding), each (tile, super-chunk) is an item (split-K) that runs every group on each chunk
 * in turn (a cell's K and V lines read once for all groups), its (tile, group) partials land in
 * ctx->attn, and the folds run after, in order.
 * ref: Dao et al., FlashAttention-2 (2023) §3.1; Dao et al., Flash-Decoding (2023).
 */
#ifndef TK_ATTN_H
#define TK_ATTN_H

#include "tk_cpu.h"
#include "memory/memory.h"
#include "tk_internal.h"

#define TK_ATTN_CHUNK 128      /* cells per chunk (one max per row and chunk); a multiple of 16 */
#define TK_ATTN_SUPER 16       /* chunks per super-chunk: split-K's unit (2048 cells) */
#define TK_ATTN_ROWS 32        /* query rows per tile (tokens x heads of a group) aimed at */

typedef struct {
    const float * q;           /* query rows, see above */
    int64_t q_ts, q_hs;
    float * o;                 /* output rows */
    int64_t o_ts, o_hs;
    const float * k, * v;      /* the cache's K and V (cell 0, group 0) */
    int64_t k_cs, k_gs, v_cs, v_gs;
    int32_t dk, dv, H, Hkv;
    float scale;
    const tk_kv_view * kv;     /* cells: pos, seqs, n_cells, window */
    const tk_ubatch * ub;      /* tokens: pos, sequence */
    const uint8_t * sel;       /* [U, n_cells] the cells each token may attend (QSA, DSA), or NULL */
    /* a typed cache (above); all 0 (type_k = type_v = TK_GGML_F32): k and v are float32 */
    const uint8_t * kt, * vt;
    int32_t type_k, type_v;
    size_t k_cb, k_gb, v_cb, v_gb;
} tk_attn_args;

static inline int tk_attn_typed(const tk_attn_args * a) { return a->type_k != TK_GGML_F32 || a->type_v != TK_GGML_F32; }

/* tk_attn_work_bytes (the bytes of ctx->work tk_attn_run needs): tk_testing.h */
/* floats of one (tile, group) split-K partial (tk_scratch.attn_part), and of ctx->attn for
 * the largest such partial, n_ctx cells and n_threads */
size_t tk_attn_part_floats(int32_t H, int32_t Hkv, int32_t dv);
size_t tk_attn_buffer_floats(size_t part, int32_t n_ctx, int n_threads);
/* bytes of ctx->work a typed cache needs after tk_attn_work_bytes': n_threads x the chunk's
 * converted rows, TK_ATTN_CHUNK x (dk + dv) floats */
size_t tk_attn_conv_bytes(int32_t dk, int32_t dv, int n_threads);
/* the workspace bytes a kind asks the scratch plan for: tk_attn_work_bytes, and with a typed
 * cache (tk_scratch.kv_typed) tk_attn_conv_bytes after it */
size_t tk_attn_scratch_bytes(int32_t H, int32_t Hkv, int32_t dk, int32_t dv, int n_threads, int typed);
/* the attention above into a->o; ctx: pool, work (tk_attn_work_bytes), attn; returns 1, or
 * 0 (nothing written) when the workspaces are short or a sequence has two cells at one
 * position: the caller runs its reference kernel */
int tk_attn_run(tk_context * ctx, const tk_attn_args * a);
/* 1: the attention kinds run their reference kernel (per (token, head), every cell; the one
 * before the blocked form), 0: the blocked form, 2: the blocked form with a typed cache's rows
 * always converted first (tk_attn_set_reference in tk_testing.h) */
int tk_attn_reference(void);

/* ---- the per-level instances (attn_body.h) ---- */
/* A tile: rows r < Rp (Rp = R rounded up to 4), row r = (token t0 + j, head g grp + r % grp)
 * with j = r / grp; rows past R repeat row R - 1 (computed, then dropped). */
typedef struct {
    int32_t t0, R, Rp, grp, g;
} tk_attn_tile;
static inline int32_t tk_attn_row(const tk_attn_tile * tl, int32_t r) { return r < tl->R ? r : tl->R - 1; }
static inline const float * tk_attn_qrow(const tk_attn_args * a, const tk_attn_tile * tl, int32_t r) {
    r = tk_attn_row(tl, r);
    return a->q + (int64_t) (tl->t0 + r / tl->grp) * a->q_ts + (int64_t) (tl->g * tl->grp + r % tl->grp) * a->q_hs;
}
/* one chunk for the tile: cell[i] the cell at slot i (TK_ATTN_CHUNK slots; any[i] 0 where
 * there is none), vis[j TK_ATTN_CHUNK + i] 1 where the tile's token j sees slot i, any[i] 1
 * where some token does; out m, l [Rp] and O [Rp, dv]; m = -INFINITY where the row sees none
 * of the chunk.  ws: Rp TK_ATTN_CHUNK floats. */
typedef void (*tk_attn_chunk_fn)(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell,
                                 const uint8_t * vis, const uint8_t * any, float * m, float * l, float * O, float * ws);
/* the fold (m, l, O[dv]) += (m2, l2, O2), as above; an empty side (m = -INFINITY) is skipped or copied */
typedef void (*tk_attn_fold_fn)(int32_t dv, float * m, float * l, float * O, float m2, float l2, const float * O2);

void tk_attn_chunk_plain(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                         const uint8_t * any, float * m, float * l, float * O, float * ws);
void tk_attn_fold_plain(int32_t dv, float * m, float * l, float * O, float m2, float l2, const float * O2);
/* a typed cache's row of n values as floats, the type's to_float bit for bit; 0: not a type the
 * instance converts (f16 in the plain one, q4_0): the caller takes the type's to_float */
typedef int (*tk_attn_cvt_fn)(int32_t type, const uint8_t * src, float * dst, int32_t n);
int tk_attn_cvt_plain(int32_t type, const uint8_t * src, float * dst, int32_t n);
/* the chunk over a typed cache whose K and V are both bf16 (..._bf16) or both f16 (..._f16,
 * AVX2 / AVX-512 only), its rows read directly (a->kt, a->vt): the same floats as the chunk over
 * the rows converted first, without the conversion pass */
void tk_attn_chunk_bf16_plain(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                              const uint8_t * any, float * m, float * l, float * O, float * ws);
#ifdef TK_HAVE_X86
void tk_attn_chunk_avx2(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                        const uint8_t * any, float * m, float * l, float * O, float * ws);
void tk_attn_fold_avx2(int32_t dv, float * m, float * l, float * O, float m2, float l2, const float * O2);
int tk_attn_cvt_avx2(int32_t type, const uint8_t * src, float * dst, int32_t n);
void tk_attn_chunk_f16_avx2(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                        const uint8_t * any, float * m, float * l, float * O, float * ws);
void tk_attn_chunk_bf16_avx2(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                         const uint8_t * any, float * m, float * l, float * O, float * ws);
void tk_attn_chunk_avx512(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                          const uint8_t * any, float * m, float * l, float * O, float * ws);
void tk_attn_fold_avx512(int32_t dv, float * m, float * l, float * O, float m2, float l2, const float * O2);
int tk_attn_cvt_avx512(int32_t type, const uint8_t * src, float * dst, int32_t n);
void tk_attn_chunk_f16_avx512(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                        const uint8_t * any, float * m, float * l, float * O, float * ws);
void tk_attn_chunk_bf16_avx512(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                         const uint8_t * any, float * m, float * l, float * O, float * ws);
#endif

#endif
