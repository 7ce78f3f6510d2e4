/* mixer_lightning.c: lightning attention (TK_LAYER_LIGHTNING: MiniMax-Text-01's linear layers).
 *
 * Shapes (U ubatch tokens, D n_embd, nh heads of d = head_dim, W = nh d, L n_layer, il the layer):
 *   in:  ctx->cur [U, D]            out: [U, D]
 *   attn_qkv [D, 3W]: per head h the rows [q_h (d) | k_h (d) | v_h (d)] at 3 h d
 *   attn_gate [D, W], attn_norm_2 [W] (the output norm over all heads at once), attn_output [W, D]
 *   state per sequence: "S" [nh, d(v), d(k)]: head h's S (d x d, indexed [k][v]) with element
 *     (k, v) at h d d + v d + k (llama.cpp's layout, ne = [d(k), d(v), nh])
 * Formula, per token (docs/specs/more-hybrids.md §5.4; HF MiniMaxLightningAttention):
 *   q, k, v = thirds of act(attn_qkv x) per head (act: HF hidden_act, hp.ffn.act; silu by default)
 *   s_h = (2^(-8/nh))^(h+1) (1 - il / (L - 1 + 1e-5) + 1e-5)        (HF's slope rate)
 *   S_h <- exp(-s_h) S_h + k_h v_h^T;  o_h = S_h^T q_h               (no scaling, no softmax)
 *   y = rmsnorm(concat_h o_h; attn_norm_2, 1e-6) * sigmoid(attn_gate x)   (HF's fixed 1e-6; llama.cpp
 *     uses rms_eps here and drops the 1e-5 in the slope's denominator: 2.4e-5 from HF)
 *   out = attn_output y
 * Per (sequence row, head) the row's tokens go through tk_lightning_run (kernels/lightning.c):
 * HF's block form (intra-block masked product, inter-block state) for runs of at least
 * tk_lightning_threshold() tokens, the recurrence otherwise (the same sums in another order:
 * the two agree to float rounding).  A row that keeps per-token snapshots (speculative
 * window) runs the recurrence one token at a time and copies S after each such token.
 * Scratch: proj [U, 3W] (q | k | v after the SiLU), gate [U, W], y [U, W]; the block form's
 * workspace, tk_lightning_work_floats(d) per thread.
 * ref: transformers 5.24 modeling_minimax.py MiniMaxLightningAttention; llama.cpp minimax-01.cpp.
 */
#include <math.h>
#include <string.h>

#include "layers/layer.h"

#define LIGHTNING_NORM_EPS 1e-6f

static int32_t lightning_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) {
    const tk_hparams * hp = &m->hp;
    (void) il;
    out[0] = (tk_rs_piece) {"S", (size_t) hp->attn.n_head * (size_t) hp->attn.head_dim * (size_t) hp->attn.head_dim, 1};
    return 1;
}

static void lightning_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    const tk_hparams * hp = &m->hp;
    const size_t W = (size_t) hp->attn.n_head * (size_t) hp->attn.head_dim;
    (void) il;
    tk_scratch_need(&need->proj, 3 * W);
    tk_scratch_need(&need->gate, W);
    tk_scratch_need(&need->y, W);
    tk_scratch_need(&need->work_bytes, tk_chunked_work_bytes(tk_chunk_min(need->lightning_min, tk_lightning_threshold()), n_ubatch, n_threads,
                                                             tk_lightning_work_floats(hp->attn.head_dim)));
}

static tk_status lightning_check(const tk_hparams * hp, int il) {
    (void) il;
    if (hp->attn.n_head <= 0 || hp->attn.n_head > 65536 || hp->attn.head_dim <= 0 || hp->attn.head_dim > 4096)
        return TK_FAIL(TK_ERR_INVALID, "lightning attention hparams out of range (%d heads of %d)", hp->attn.n_head, hp->attn.head_dim);
    return TK_OK;
}

static tk_status lightning_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd, W = (int64_t) hp->attn.n_head * hp->attn.head_dim;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_qkv.weight"), TK_SHAPE(D, 3 * W), 1, &l->wqkv));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_gate.weight"), TK_SHAPE(D, W), 1, &l->wgate));
    TK_CHECK(tk_bind_vec(m, tab, NAME("attn_norm_2.weight"), TK_SHAPE(W), 1, &l->ssm_norm));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_output.weight"), TK_SHAPE(W, D), 1, &l->wo));
#undef NAME
    return TK_OK;
}

/* HF's slope rate of head h in layer il */
static float lightning_slope(const tk_hparams * hp, int il, int32_t h) {
    const double base = pow(2.0, -8.0 / (double) hp->attn.n_head);
    const double factor = 1.0 - (double) il / ((double) hp->n_layer - 1.0 + 1e-5) + 1e-5;
    return (float) (pow(base, (double) (h + 1)) * factor);
}

typedef struct {
    tk_context * ctx;          /* proj [U, 3W], y [U, W], work (the block form's workspace) */
    const tk_ubatch * ub;
    tk_rs_view rv;             /* piece 0: "S" [nh, d, d] per cell */
    int il;
    int64_t work_floats;       /* per thread: tk_lightning_work_floats(d) */
} lightning_job;

/* one (sequence row s, head h) pair p = s nh + h: the row's tokens through the head */
static void lightning_heads(void * arg, int64_t p0, int64_t p1, int thread) {
    const lightning_job * j = arg;
    const tk_hparams * hp = &j->ctx->model->hp;
    const int32_t nh = hp->attn.n_head, d = hp->attn.head_dim, W = nh * d, nst = j->ub->n_seq_tokens;
    float * work = tk_chunked_work(j->ctx, thread, j->work_floats);
    for (int64_t p = p0; p < p1; p++) {
        const int32_t s = (int32_t) (p / nh), h = (int32_t) (p % nh);
        const int64_t t0 = (int64_t) s * nst;
        float * S = j->rv.piece[0] + (size_t) j->rv.ub_cells[s] * j->rv.piece_n[0] + (size_t) h * d * d;
        const float * qkv = j->ctx->proj + t0 * 3 * W + (int64_t) h * 3 * d;
        const tk_lightning_head hd = {nst, d, qkv, 3 * W, qkv + d, 3 * W, qkv + 2 * d, 3 * W,
                                      lightning_slope(hp, j->il, h), S,
                                      j->ctx->y + t0 * W + (int64_t) h * d, W, work, j->ctx->params.lightning_min};
        if (!tk_rs_snaps_row(&j->rv, s, nst)) { tk_lightning_run(&hd); continue; }
        /* speculative window: one token at a time (the recurrence's bits do not depend on
         * the split), the head's S copied after each token that keeps a snapshot */
        for (int32_t i = 0; i < nst; i++) {
            tk_lightning_head h1 = hd;
            h1.n_tok = 1;
            h1.q += i * hd.q_stride; h1.k += i * hd.k_stride; h1.v += i * hd.v_stride; h1.o += i * hd.o_stride;
            tk_lightning_recurrent(&h1);
            float * snap = tk_rs_snap(&j->rv, 0, s, nst, i);
            if (snap) memcpy(snap + (size_t) h * d * d, S, (size_t) d * d * sizeof(float));
        }
    }
}

/* y[t] = rmsnorm(y[t]; attn_norm_2, 1e-6) * sigmoid(gate[t]) */
static void lightning_norm_gate_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    (void) thread;
    for (int64_t t = t0; t < t1; t++) {
        float * y = j->y + t * j->y_stride;
        const float * z = j->a + t * j->a_stride;
        tk_rms_norm(y, j->b, j->f, j->n, y);
        for (int64_t i = 0; i < j->n; i++) y[i] *= 1.0f / (1.0f + expf(-z[i]));
    }
}

static tk_status lightning_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t W = hp->attn.n_head * hp->attn.head_dim, U = ub->n_tokens;
    tk_rs_view rv;
    TK_CHECK(ctx->mem->rs_view(ctx->mem, il, &rv));
    TK_CHECK(tk_matmul(&l->wqkv, 0, ctx->cur, U, ctx->proj, &ctx->mm));
    const int32_t act = ctx->model->hp.ffn.act;   /* HF ACT2FN[hidden_act] on qkv_proj, the experts' act too */
    if (act == TK_ACT_SILU)
        for (int64_t i = 0; i < (int64_t) U * 3 * W; i++) ctx->proj[i] = ctx->proj[i] / (1.0f + expf(-ctx->proj[i]));
    else
        for (int64_t i = 0; i < (int64_t) U * 3 * W; i++) ctx->proj[i] = tk_act(act, ctx->proj[i]);
    TK_CHECK(tk_matmul(&l->wgate, 0, ctx->cur, U, ctx->gate, &ctx->mm));
    lightning_job j = {ctx, ub, rv, il, tk_lightning_work_floats(hp->attn.head_dim)};
    tk_par_rows(ctx->pool, (int64_t) ub->n_seqs * hp->attn.n_head, (int64_t) ub->n_seq_tokens * hp->attn.head_dim * hp->attn.head_dim,
                lightning_heads, &j);
    tk_rows_job gj = {ctx->gate, l->ssm_norm, ctx->y, W, W, W, LIGHTNING_NORM_EPS, 1};
    tk_par_rows(ctx->pool, U, W, lightning_norm_gate_rows, &gj);
    return tk_matmul(&l->wo, 0, ctx->y, U, out, &ctx->mm);
}

const tk_mixer_ops tk_mixer_lightning = {
    .name = "lightning",
    .check = lightning_check,
    .bind = lightning_bind,
    .rs_pieces = lightning_rs_pieces,
    .scratch = lightning_scratch,
    .forward = lightning_forward,
};
