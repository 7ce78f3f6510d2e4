/* mixer_mamba1.c: the Mamba-1 mixer (TK_LAYER_MAMBA1: mamba, FalconMamba, jamba, zamba).
 *
 * Shapes (U ubatch tokens, D n_embd, DI d_inner, N d_state, R dt_rank, K d_conv, M heads
 * (ssm_n_head; 0 or 1: one head), Dm = DI / M):
 *   in:  ctx->cur [U, D]            out: [U, D]
 *   state per sequence: "conv" [DI, K-1] (causal conv window), "ssm" [DI, N]
 *   one head: ssm_x [DI, R + 2N], ssm_dt [R, DI]; M heads (Zamba): ssm_x [Dm, R + 2N, M],
 *   ssm_dt [R, Dm, M], head n owning channels [n Dm, (n + 1) Dm) of x, dt, A, D, z, y
 * Formula:
 *   (x, z) = in_proj(cur) (+ ssm_in.bias where the file has it: use_bias / mamba_proj_bias, ours);  x = act(conv1d(x) + b) (act: hp.ssm.act, HF hidden_act; default silu)
 *   per head n: (dt, B, C) = x_proj[n](x_n)   [Jamba: RMSNorm on each; dt_b_c_rms: weightless (FalconMamba)]
 *                                     (their epsilon ssm_dt_b_c_eps: HF FalconMamba's mixer_rms_eps, 1e-6)
 *   dt_n = softplus(dt_proj[n](dt) + dt_bias_n)
 *   s_n = exp(dt_n A_n) s_n + dt_n B x_n;  y_n = (C.s_n + D_n x_n) * silu(z_n);  out = out_proj(y) (+ ssm_out.bias)
 * ref: transformers modeling_mamba.py MambaMixer.slow_forward, modeling_jamba.py
 *      JambaMambaMixer, modeling_falcon_mamba.py FalconMambaMixer (rms_forward, mixer_rms_eps),
 *      modeling_zamba.py ZambaMambaMixer.slow_forward (per-head x_proj_weight / dt_proj_weight);
 *      llama.cpp build_mamba_layer.
 */
#include <string.h>

#include "layers/layer.h"

/* M, the Mamba heads (1 unless ssm_n_head > 1) */
static int32_t m1_heads(const tk_hparams * hp) { return hp->ssm.n_head > 1 ? hp->ssm.n_head : 1; }

static int32_t m1_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) {
    const tk_hparams * hp = &m->hp;
    (void) il;
    out[0] = (tk_rs_piece) {"conv", (size_t) (hp->ssm.d_conv - 1) * (size_t) hp->ssm.d_inner, 1};
    out[1] = (tk_rs_piece) {"ssm", (size_t) hp->ssm.d_state * (size_t) hp->ssm.d_inner, 1};
    return 2;
}

/* proj [2 DI] (x | z), conv [DI], narrow [M (R + 2N)] (x_proj: dt | B | C, head-major: [M, U, R + 2N]),
 * step [M R] (dt's rank rows), dt [DI],
 * y [DI] (with M > 1 also a head's gathered x_n, then its dt_proj output, before the scan) */
static void m1_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    const tk_hparams * hp = &m->hp;
    const size_t DI = (size_t) hp->ssm.d_inner, N = (size_t) hp->ssm.d_state, R = (size_t) hp->ssm.dt_rank, M = (size_t) m1_heads(hp);
    (void) il; (void) n_ubatch; (void) n_threads;
    tk_scratch_need(&need->proj, 2 * DI);
    tk_scratch_need(&need->conv, DI);
    tk_scratch_need(&need->narrow, M * (R + 2 * N));
    tk_scratch_need(&need->step, M * R);
    tk_scratch_need(&need->dt, DI);
    tk_scratch_need(&need->y, DI);
}

/* ---- load: hparams and tensors ---- */

static tk_status m1_check(const tk_hparams * hp, int il) {
    (void) il;
    if (hp->ssm.d_conv < 1 || hp->ssm.d_conv > 64 || hp->ssm.d_inner <= 0 || hp->ssm.d_state <= 0 || hp->ssm.d_state > 4096 || hp->ssm.dt_rank <= 0)
        return TK_FAIL(TK_ERR_INVALID, "recurrent hparams out of range (d_conv %d, d_inner %d, d_state %d, dt_rank %d)",
                       hp->ssm.d_conv, hp->ssm.d_inner, hp->ssm.d_state, hp->ssm.dt_rank);
    if (hp->ssm.n_head < 0 || hp->ssm.d_inner % m1_heads(hp))
        return TK_FAIL(TK_ERR_INVALID, "Mamba-1 heads %d do not divide d_inner %d", hp->ssm.n_head, hp->ssm.d_inner);
    return TK_OK;
}

static tk_status m1_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd, DI = hp->ssm.d_inner, N = hp->ssm.d_state;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    const int64_t R = hp->ssm.dt_rank;
    TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_in.weight"), TK_SHAPE(D, 2 * DI), 1, &l->ssm_in));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_conv1d.weight"), TK_SHAPE(hp->ssm.d_conv, DI), 1, &l->ssm_conv1d));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_conv1d.bias"), TK_SHAPE(DI), 0, &l->ssm_conv1d_b));
    const int64_t M = m1_heads(hp), Dm = DI / M;
    if (M == 1) {
        TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_x.weight"), TK_SHAPE(DI, R + 2 * N), 1, &l->ssm_x));
        TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_dt.weight"), TK_SHAPE(R, DI), 1, &l->ssm_dt));
    } else {   /* one x_proj / dt_proj matrix per head (Zamba) */
        TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_x.weight"), TK_SHAPE(Dm, R + 2 * N, M), 1, &l->ssm_x));
        TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_dt.weight"), TK_SHAPE(R, Dm, M), 1, &l->ssm_dt));
    }
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_dt.bias"), TK_SHAPE(DI), 0, &l->ssm_dt_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_a"), TK_SHAPE(N, DI), 1, &l->ssm_a));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_d"), TK_SHAPE(DI), 1, &l->ssm_d));
    const int norms = hp->ssm.dt_b_c_norms;   /* Jamba: the dt/B/C norms have weights, required */
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_dt_norm.weight"), TK_SHAPE(R), norms, &l->ssm_dt_norm));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_b_norm.weight"), TK_SHAPE(N), norms, &l->ssm_b_norm));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_c_norm.weight"), TK_SHAPE(N), norms, &l->ssm_c_norm));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_out.weight"), TK_SHAPE(DI, D), 1, &l->ssm_out));
    /* in_proj / out_proj biases (HF use_bias, mamba_proj_bias): ours, the two together; llama.cpp's
     * mamba graph has none */
    const int biased = tk_table_find(tab, NAME("ssm_in.bias")) != NULL;
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_in.bias"), TK_SHAPE(2 * DI), biased, &l->ssm_in_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_out.bias"), TK_SHAPE(D), biased, &l->ssm_out_b));
#undef NAME
    return TK_OK;
}

/* (dt, B, C) rows of x_proj (U per head, head-major): optional RMSNorms, then dt's compact copy
 * for dt_proj */
static void m1_dt_b_c(tk_context * ctx, const tk_layer * l, int32_t U) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t N = hp->ssm.d_state, R = hp->ssm.dt_rank, XD = R + 2 * N;
    const float eps = hp->ssm.dt_b_c_eps > 0 ? hp->ssm.dt_b_c_eps : hp->rms_eps;   /* FalconMamba: mixer_rms_eps */
    for (int32_t t = 0; t < U; t++) {   /* U: tokens x heads */
        float * xd = ctx->narrow + (int64_t) t * XD;
        if (l->ssm_dt_norm || hp->ssm.dt_b_c_rms) {
            tk_rms_norm(xd, l->ssm_dt_norm, eps, R, xd);
            tk_rms_norm(xd + R, l->ssm_b_norm, eps, N, xd + R);
            tk_rms_norm(xd + R + N, l->ssm_c_norm, eps, N, xd + R + N);
        }
        memcpy(ctx->step + (int64_t) t * R, xd, (size_t) R * sizeof(float));
    }
}

/* x_proj, the dt/B/C norms and dt_proj, per head: narrow [M, U, R + 2N], dt [U, DI] (before
 * softplus).  One head reads conv and writes dt directly; with M heads, head n's x_n is gathered
 * into y [U, Dm] and its dt_proj output goes through y into dt's columns. */
static tk_status m1_project(tk_context * ctx, const tk_layer * l, int32_t U) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t DI = hp->ssm.d_inner, N = hp->ssm.d_state, R = hp->ssm.dt_rank, XD = R + 2 * N, M = m1_heads(hp), Dm = DI / M;
    if (M == 1) {
        TK_CHECK(tk_matmul(&l->ssm_x, 0, ctx->conv, U, ctx->narrow, &ctx->mm));
        m1_dt_b_c(ctx, l, U);
        return tk_matmul(&l->ssm_dt, 0, ctx->step, U, ctx->dt, &ctx->mm);
    }
    for (int32_t n = 0; n < M; n++) {
        for (int32_t t = 0; t < U; t++)
            memcpy(ctx->y + (int64_t) t * Dm, ctx->conv + (int64_t) t * DI + (int64_t) n * Dm, (size_t) Dm * sizeof(float));
        TK_CHECK(tk_matmul(&l->ssm_x, n, ctx->y, U, ctx->narrow + (int64_t) n * U * XD, &ctx->mm));
    }
    m1_dt_b_c(ctx, l, U * M);
    for (int32_t n = 0; n < M; n++) {
        TK_CHECK(tk_matmul(&l->ssm_dt, n, ctx->step + (int64_t) n * U * R, U, ctx->y, &ctx->mm));
        for (int32_t t = 0; t < U; t++)
            memcpy(ctx->dt + (int64_t) t * DI + (int64_t) n * Dm, ctx->y + (int64_t) t * Dm, (size_t) Dm * sizeof(float));
    }
    return TK_OK;
}

static tk_status m1_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t DI = hp->ssm.d_inner, N = hp->ssm.d_state, R = hp->ssm.dt_rank, K = hp->ssm.d_conv, M = m1_heads(hp), Dm = DI / M;
    const int32_t U = ub->n_tokens, nst = ub->n_seq_tokens, XD = R + 2 * N;
    tk_rs_view rv;
    TK_CHECK(ctx->mem->rs_view(ctx->mem, il, &rv));

    TK_CHECK(tk_matmul(&l->ssm_in, 0, ctx->cur, U, ctx->proj, &ctx->mm));
    if (l->ssm_in_b) tk_bias_rows(ctx, ctx->proj, l->ssm_in_b, 2 * DI, U, 0);   /* use_bias / mamba_proj_bias */
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        const int32_t cell = rv.ub_cells[s];
        tk_rs_snap_conv(&rv, 0, s, ctx->proj + (int64_t) s * nst * 2 * DI, 2 * DI, nst, DI, K);
        tk_conv_act(ctx, hp->ssm.act, ctx->proj + (int64_t) s * nst * 2 * DI, 2 * DI, nst, DI, K, l->ssm_conv1d, l->ssm_conv1d_b,
                      rv.piece[0] + (size_t) cell * rv.piece_n[0], ctx->conv + (int64_t) s * nst * DI, DI);
    }

    TK_CHECK(m1_project(ctx, l, U));
    for (int32_t t = 0; t < U; t++) {
        float * dt = ctx->dt + (int64_t) t * DI;
        for (int32_t c = 0; c < DI; c++) dt[c] = tk_softplus(l->ssm_dt_b ? dt[c] + l->ssm_dt_b[c] : dt[c]);
    }
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        float * state = rv.piece[1] + (size_t) rv.ub_cells[s] * rv.piece_n[1];
        for (int32_t i = 0; i < nst; i++) {
            const int64_t t = (int64_t) s * nst + i;
            for (int32_t n = 0; n < M; n++) {
                const int64_t c0 = (int64_t) n * Dm;
                const float * xd = ctx->narrow + ((int64_t) n * U + t) * XD;
                tk_ssm_scan_mamba1(state + c0 * N, ctx->conv + t * DI + c0, ctx->dt + t * DI + c0, l->ssm_a + c0 * N,
                                   xd + R, xd + R + N, l->ssm_d + c0, ctx->proj + t * 2 * DI + DI + c0, Dm, N,
                                   ctx->y + t * DI + c0);
            }
            float * snap = tk_rs_snap(&rv, 1, s, nst, i);   /* speculative window */
            if (snap) memcpy(snap, state, rv.piece_n[1] * sizeof(float));
        }
    }
    TK_CHECK(tk_matmul(&l->ssm_out, 0, ctx->y, U, out, &ctx->mm));
    if (l->ssm_out_b) tk_bias_rows(ctx, out, l->ssm_out_b, hp->n_embd, U, 0);
    return TK_OK;
}

const tk_mixer_ops tk_mixer_mamba1 = {
    .name = "mamba1",
    .check = m1_check,
    .bind = m1_bind,
    .rs_pieces = m1_rs_pieces,
    .scratch = m1_scratch,
    .forward = m1_forward,
};
