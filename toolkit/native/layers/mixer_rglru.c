/* mixer_rglru.c: RecurrentGemma's recurrent block (TK_LAYER_RGLRU: Griffin's temporal block
 * with the RG-LRU).
 *
 * Shapes (U ubatch tokens, D n_embd, lru = d_inner (rglru.width), nh = n_head, bw = lru / nh,
 * K = d_conv):
 *   in:  ctx->cur [U, D]            out: [U, D]
 *   rglru_x, rglru_y [D, lru] + .bias [lru]      (linear_x, linear_y)
 *   ssm_conv1d [K, lru] + .bias [lru]            (conv_1d, depthwise, squeezed)
 *   rglru_gate_i, rglru_gate_a [bw, bw, nh] + .bias [bw, nh]   (per head W[h] [in][out], as HF stores)
 *   rglru_param [lru]                            (Lambda)
 *   ssm_out [lru, D] + .bias [D]                 (linear_out)
 *   state per sequence: "conv" [lru, K-1] (the last K-1 conv inputs, oldest first) and
 *     "ssm" [lru] (the RG-LRU's h, float32 as HF keeps it); both zero at a new sequence
 * Formula, per sequence, tokens in order (docs/specs/more-hybrids.md §6.4; transformers 5.24
 * modeling_recurrent_gemma.py RecurrentGemmaRecurrentBlock.forward, modeling_recurrent_gemma.py:392-461):
 *   yb = act(rglru_y x + b_y)     (act hp.ffn.act: HF hidden_activation, default gelu_pytorch_tanh)
 *   u  = causal_conv_K(rglru_x x + b_x) + b_conv          (no activation)
 *   ga = u_h . Wa_h + ba_h, gi = u_h . Wi_h + bi_h per head (block-diagonal)
 *   h  = RG-LRU scan (kernels/rglru.c: a = sigmoid(Lambda)^(8 r) as exp(-8 r softplus(Lambda)),
 *        h <- a h + sqrt(1 - a^2) (i u); at position 0 a = 0 and the multiplier 1)
 *   out = ssm_out (h * yb) + b_out
 * Speculative window: the conv window's snapshots through tk_rs_snap_conv before the conv,
 * h's after each token by the scan (the scan is token by token in every case).
 * Scratch: proj [U, lru] (the conv input), conv [U, lru] (u), y [U, lru] (yb, then h * yb),
 *   step [U, 2 lru] (ga | gi).
 * ref: Botev et al. 2024, "RecurrentGemma" / De et al. 2024, "Griffin" eq. (1)-(4); HF as above.
 */
#include <math.h>
#include <string.h>

#include "layers/layer.h"

static int32_t rglru_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) {
    const size_t lru = (size_t) m->hp.ssm.d_inner;
    (void) il;
    out[0] = (tk_rs_piece) {"conv", (size_t) (m->hp.ssm.d_conv - 1) * lru, 1};
    out[1] = (tk_rs_piece) {"ssm", lru, 1};
    return 2;
}

static void rglru_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    const size_t lru = (size_t) m->hp.ssm.d_inner;
    (void) il; (void) n_ubatch; (void) n_threads;
    tk_scratch_need(&need->proj, lru);
    tk_scratch_need(&need->conv, lru);
    tk_scratch_need(&need->y, lru);
    tk_scratch_need(&need->step, 2 * lru);
}

static tk_status rglru_check(const tk_hparams * hp, int il) {
    if (hp->ssm.d_conv < 2 || hp->ssm.d_conv > 64)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: RG-LRU conv kernel d_conv = %d must be in [2, 64]", il, hp->ssm.d_conv);
    if (hp->ssm.d_inner <= 0 || hp->ssm.d_inner > (1 << 20) || hp->attn.n_head <= 0 || hp->ssm.d_inner % hp->attn.n_head)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: RG-LRU width d_inner = %d must be a positive multiple of n_head = %d", il,
                       hp->ssm.d_inner, hp->attn.n_head);
    return TK_OK;
}

static tk_status rglru_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd, lru = hp->ssm.d_inner, nh = hp->attn.n_head, bw = lru / nh;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    TK_CHECK(tk_bind_weight(m, tab, NAME("rglru_x.weight"), TK_SHAPE(D, lru), 1, &l->rglru_x));
    TK_CHECK(tk_bind_vec(m, tab, NAME("rglru_x.bias"), TK_SHAPE(lru), 1, &l->rglru_x_b));
    TK_CHECK(tk_bind_weight(m, tab, NAME("rglru_y.weight"), TK_SHAPE(D, lru), 1, &l->rglru_y));
    TK_CHECK(tk_bind_vec(m, tab, NAME("rglru_y.bias"), TK_SHAPE(lru), 1, &l->rglru_y_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_conv1d.weight"), TK_SHAPE(hp->ssm.d_conv, lru), 1, &l->ssm_conv1d));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_conv1d.bias"), TK_SHAPE(lru), 1, &l->ssm_conv1d_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("rglru_gate_i.weight"), TK_SHAPE(bw, bw, nh), 1, &l->rglru_gate_i));
    TK_CHECK(tk_bind_vec(m, tab, NAME("rglru_gate_i.bias"), TK_SHAPE(bw, nh), 1, &l->rglru_gate_i_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("rglru_gate_a.weight"), TK_SHAPE(bw, bw, nh), 1, &l->rglru_gate_a));
    TK_CHECK(tk_bind_vec(m, tab, NAME("rglru_gate_a.bias"), TK_SHAPE(bw, nh), 1, &l->rglru_gate_a_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("rglru_param.weight"), TK_SHAPE(lru), 1, &l->rglru_neg8_sp));
    for (int64_t c = 0; c < lru; c++) l->rglru_neg8_sp[c] = -8.0f * tk_softplus(l->rglru_neg8_sp[c]);
    TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_out.weight"), TK_SHAPE(lru, D), 1, &l->ssm_out));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_out.bias"), TK_SHAPE(D), 1, &l->ssm_out_b));
#undef NAME
    return TK_OK;
}

typedef struct {
    tk_context * ctx;
    const tk_layer * l;
    const tk_ubatch * ub;
    tk_rs_view rv;             /* piece 1: "ssm" [lru] per cell */
    int32_t lru, nh, bw;
    int32_t n_chunk;           /* channel chunks per sequence row */
} rglru_job;

#define RGLRU_CHUNK 64         /* channels per scan task (a multiple of 8: the AVX2 lanes) */

/* gate tasks: (token block of 4, head) pairs; tokens [4 q, 4 q + 4) of the ubatch, head p % nh */
static void rglru_gate_task(void * arg, int64_t p0, int64_t p1, int thread) {
    const rglru_job * j = arg;
    const tk_context * ctx = j->ctx;
    const int32_t U = j->ub->n_tokens, lru = j->lru;
    (void) thread;
    for (int64_t p = p0; p < p1; p++) {
        const int32_t t0 = (int32_t) (p / j->nh) * 4, h = (int32_t) (p % j->nh), nt = U - t0 < 4 ? U - t0 : 4;
        const float * u = ctx->conv + (int64_t) t0 * lru;
        float * st = ctx->step + (int64_t) t0 * 2 * lru;
        tk_rglru_gates(u, lru, nt, j->l->rglru_gate_a, j->l->rglru_gate_a_b, h, h + 1, j->bw, st, 2 * lru);
        tk_rglru_gates(u, lru, nt, j->l->rglru_gate_i, j->l->rglru_gate_i_b, h, h + 1, j->bw, st + lru, 2 * lru);
    }
}

/* scan tasks: (sequence row s, channel chunk) pairs */
static void rglru_scan_task(void * arg, int64_t p0, int64_t p1, int thread) {
    const rglru_job * j = arg;
    const tk_context * ctx = j->ctx;
    const int32_t nst = j->ub->n_seq_tokens, lru = j->lru;
    (void) thread;
    for (int64_t p = p0; p < p1; p++) {
        const int32_t s = (int32_t) (p / j->n_chunk), q = (int32_t) (p % j->n_chunk);
        const int32_t c0 = q * RGLRU_CHUNK, c1 = c0 + RGLRU_CHUNK < lru ? c0 + RGLRU_CHUNK : lru;
        const int64_t t0 = (int64_t) s * nst;
        uint8_t reset[256];
        float * snap[256];
        float * h = j->rv.piece[1] + (size_t) j->rv.ub_cells[s] * j->rv.piece_n[1];
        for (int32_t i0 = 0; i0 < nst; i0 += 256) {      /* runs of at most 256 tokens (the stack arrays) */
            const int32_t n = nst - i0 < 256 ? nst - i0 : 256;
            int any = 0;
            for (int32_t i = 0; i < n; i++) {
                reset[i] = j->ub->pos[t0 + i0 + i] == 0;
                snap[i] = tk_rs_snap(&j->rv, 1, s, nst, i0 + i);
                any |= snap[i] != NULL;
            }
            const int64_t r = t0 + i0;
            tk_rglru_scan(ctx->step + r * 2 * lru, ctx->step + r * 2 * lru + lru, 2 * lru, ctx->conv + r * lru, ctx->y + r * lru, lru,
                          j->l->rglru_neg8_sp, reset, n, c0, c1, h, ctx->y + r * lru, lru, any ? snap : NULL);
        }
    }
}

static tk_status rglru_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t lru = hp->ssm.d_inner, K = hp->ssm.d_conv, U = ub->n_tokens, nst = ub->n_seq_tokens;
    tk_rs_view rv;
    TK_CHECK(ctx->mem->rs_view(ctx->mem, il, &rv));

    TK_CHECK(tk_matmul(&l->rglru_y, 0, ctx->cur, U, ctx->y, &ctx->mm));
    tk_bias_act_rows(ctx, ctx->y, l->rglru_y_b, lru, U, hp->ffn.act);   /* HF hidden_activation (gelu_pytorch_tanh) */
    TK_CHECK(tk_matmul(&l->rglru_x, 0, ctx->cur, U, ctx->proj, &ctx->mm));
    tk_bias_rows(ctx, ctx->proj, l->rglru_x_b, lru, U, 0);
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        const int64_t t0 = (int64_t) s * nst;
        tk_rs_snap_conv(&rv, 0, s, ctx->proj + t0 * lru, lru, nst, lru, K);
        tk_conv_rows(ctx, ctx->proj + t0 * lru, lru, nst, lru, K, l->ssm_conv1d, l->ssm_conv1d_b,
                     rv.piece[0] + (size_t) rv.ub_cells[s] * rv.piece_n[0], ctx->conv + t0 * lru, lru);
    }
    rglru_job j = {ctx, l, ub, rv, lru, hp->attn.n_head, lru / hp->attn.n_head, (lru + RGLRU_CHUNK - 1) / RGLRU_CHUNK};
    tk_par_rows(ctx->pool, (int64_t) ((U + 3) / 4) * j.nh, (int64_t) 8 * j.bw * j.bw, rglru_gate_task, &j);
    tk_par_rows(ctx->pool, (int64_t) ub->n_seqs * j.n_chunk, (int64_t) nst * RGLRU_CHUNK * 8, rglru_scan_task, &j);
    TK_CHECK(tk_matmul(&l->ssm_out, 0, ctx->y, U, out, &ctx->mm));
    tk_bias_rows(ctx, out, l->ssm_out_b, hp->n_embd, U, 0);
    return TK_OK;
}

const tk_mixer_ops tk_mixer_rglru = {
    .name = "rglru",
    .check = rglru_check,
    .bind = rglru_bind,
    .rs_pieces = rglru_rs_pieces,
    .scratch = rglru_scratch,
    .forward = rglru_forward,
};
