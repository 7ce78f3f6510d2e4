/* mixer_mamba2.c: the Mamba-2 mixer (TK_LAYER_MAMBA2: mamba2, granitehybrid; and the Mamba-2
 * half of TK_LAYER_PARALLEL, falcon-h1, through tk_mamba2_bind and tk_mixer_mamba2.forward).
 *
 * Shapes (U ubatch tokens, D n_embd, DI d_inner, N d_state, H heads, P = DI/H head dim,
 * G n_group, K d_conv, CD = DI + 2 G N conv channels, W = 2 DI + 2 G N + H):
 *   in:  ctx->cur [U, D]            out: [U, D]
 *   state per sequence: "conv" [CD, K-1] (causal conv window), "ssm" [H, P, N]
 * Formula:
 *   (z, xBC, dt) = in_proj(cur) [W] (+ ssm_in.bias where the file has it: use_bias / mamba_proj_bias, ours);  xBC = act(conv1d(xBC) + b) (hp.ssm.act, HF hidden_act; default silu);  dt = softplus(dt + dt_bias), clamped to [ssm_dt_min, ssm_dt_max] where set (HF dt_limit)
 *   per head h: s_h = exp(dt_h A_h) s_h + dt_h x_h B_g^T;  y_h = s_h C_g + D_h x_h
 *     (the recurrence, or the chunked SSD form for runs of tk_ssd_threshold() tokens)
 *   y = grouped RMSNorm(y * silu(z)) * w (group size DI/G);  out = out_proj(y) (+ ssm_out.bias with ssm_in.bias)
 *   speculative window (memory_rs.c): a row that keeps per-token snapshots takes the recurrence
 *     and copies "conv" (tk_rs_snap_conv) and "ssm" after each token
 *   Falcon-H1 variants: no ssm_norm tensor (mamba_rms_norm false): y = y * silu(z);
 *   hp.ssm.norm_before_gate (mamba_norm_before_gate): y = grouped RMSNorm(y) * w * silu(z)
 * ref: transformers modeling_mamba2.py Mamba2Mixer.torch_forward, MambaRMSNormGated;
 *      modeling_falcon_h1.py FalconH1Mixer, FalconH1RMSNormGated; llama.cpp build_mamba2_layer.
 */
#include "layers/layer.h"
#include "tk_cpu.h"
#include <math.h>

/* CD: channels of the causal conv (x, B, C) */
static int32_t m2_conv_dim(const tk_hparams * hp) { return hp->ssm.d_inner + 2 * hp->ssm.n_group * hp->ssm.d_state; }

static int32_t m2_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) {
    const tk_hparams * hp = &m->hp;
    (void) il;
    out[0] = (tk_rs_piece) {"conv", (size_t) (hp->ssm.d_conv - 1) * (size_t) m2_conv_dim(hp), 1};
    out[1] = (tk_rs_piece) {"ssm", (size_t) hp->ssm.d_state * (size_t) hp->ssm.d_inner, 1};
    return 2;
}

/* proj [W] (z | xBC | dt), conv [CD], y [DI] and the SSD workspace */
static void m2_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    const tk_hparams * hp = &m->hp;
    const size_t DI = (size_t) hp->ssm.d_inner, N = (size_t) hp->ssm.d_state, G = (size_t) hp->ssm.n_group;
    const size_t H = (size_t) hp->ssm.n_head;
    (void) il;
    tk_scratch_need(&need->proj, 2 * DI + 2 * G * N + H);
    tk_scratch_need(&need->conv, (size_t) m2_conv_dim(hp));
    tk_scratch_need(&need->y, DI);
    tk_scratch_need(&need->work_bytes, tk_ssd_workspace_bytes(n_ubatch, hp->ssm.n_head, hp->ssm.head_dim, hp->ssm.d_state,
                                                              hp->ssm.n_group, n_threads));
}

/* ---- load: hparams and tensors ---- */

static tk_status m2_check(const tk_hparams * hp, int il) {
    (void) il;
    if (hp->ssm.d_conv < 1 || hp->ssm.d_conv > 64 || hp->ssm.d_inner <= 0 || hp->ssm.d_state <= 0 || hp->ssm.d_state > 4096 || hp->ssm.dt_rank <= 0)
        return TK_FAIL(TK_ERR_INVALID, "recurrent hparams out of range (d_conv %d, d_inner %d, d_state %d, dt_rank %d)",
                       hp->ssm.d_conv, hp->ssm.d_inner, hp->ssm.d_state, hp->ssm.dt_rank);
    if (hp->ssm.n_head <= 0 || hp->ssm.n_group <= 0 || hp->ssm.n_head % hp->ssm.n_group ||
        hp->ssm.head_dim * hp->ssm.n_head != hp->ssm.d_inner || hp->ssm.d_inner % hp->ssm.n_group)
        return TK_FAIL(TK_ERR_INVALID, "Mamba-2 hparams inconsistent: n_head %d, head_dim %d, n_group %d, d_inner %d",
                       hp->ssm.n_head, hp->ssm.head_dim, hp->ssm.n_group, hp->ssm.d_inner);
    return TK_OK;
}

tk_status tk_mamba2_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l, int norm_required) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd, DI = hp->ssm.d_inner, N = hp->ssm.d_state;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    const int64_t H = hp->ssm.n_head, G = hp->ssm.n_group;
    const int64_t conv_dim = DI + 2 * G * N;
    TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_in.weight"), TK_SHAPE(D, 2 * DI + 2 * G * N + H), 1, &l->ssm_in));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_conv1d.weight"), TK_SHAPE(hp->ssm.d_conv, conv_dim), 1, &l->ssm_conv1d));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_conv1d.bias"), TK_SHAPE(conv_dim), 0, &l->ssm_conv1d_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_dt.bias"), TK_SHAPE(H), 1, &l->ssm_dt_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_a"), TK_SHAPE(1, H), 1, &l->ssm_a));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_d"), TK_SHAPE(1, H), 1, &l->ssm_d));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ssm_norm.weight"), TK_SHAPE(DI / G, G), norm_required, &l->ssm_norm));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ssm_out.weight"), TK_SHAPE(DI, D), 1, &l->ssm_out));
#undef NAME
    return TK_OK;
}

static tk_status m2_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    TK_CHECK(tk_mamba2_bind(m, tab, il, l, 1));
    /* in_proj / out_proj biases (HF Mamba2 use_bias, Bamba / Granite mamba_proj_bias): ours, the
     * two together; llama.cpp's mamba2 graph has none */
    char nm[128];
    const int64_t W = 2 * (int64_t) hp->ssm.d_inner + 2 * (int64_t) hp->ssm.n_group * hp->ssm.d_state + hp->ssm.n_head;
    const int biased = tk_table_find(tab, tk_blk_name(nm, sizeof nm, il, "ssm_in.bias")) != NULL;
    TK_CHECK(tk_bind_vec(m, tab, tk_blk_name(nm, sizeof nm, il, "ssm_in.bias"), TK_SHAPE(W), biased, &l->ssm_in_b));
    TK_CHECK(tk_bind_vec(m, tab, tk_blk_name(nm, sizeof nm, il, "ssm_out.bias"), TK_SHAPE(hp->n_embd), biased, &l->ssm_out_b));
    return TK_OK;
}

/* Falcon-H1's gates (the Mamba-2 one is tk_gated_norm_rows): y = rmsnorm(y) w * silu(z) per
 * group (norm before gate), or y = y * silu(z) when the layer has no ssm_norm (j->b NULL) */
static void norm_then_gate_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    (void) thread;
    const int64_t gs = j->n / j->groups;
    for (int64_t t = t0; t < t1; t++) {
        float * y = j->y + t * j->y_stride;
        if (j->b)
            for (int32_t g = 0; g < j->groups; g++) tk_rms_norm(y + g * gs, j->b + g * gs, j->f, gs, y + g * gs);
        tk_mul_silu_row(y, j->a + t * j->a_stride, j->n);
    }
}

static tk_status m2_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t DI = hp->ssm.d_inner, N = hp->ssm.d_state, H = hp->ssm.n_head, P = hp->ssm.head_dim, G = hp->ssm.n_group;
    const int32_t K = hp->ssm.d_conv, CD = m2_conv_dim(hp), W = 2 * DI + 2 * G * N + H;
    const int32_t U = ub->n_tokens, nst = ub->n_seq_tokens;
    tk_rs_view rv;
    TK_CHECK(ctx->mem->rs_view(ctx->mem, il, &rv));

    TK_CHECK(tk_matmul(&l->ssm_in, 0, ctx->cur, U, ctx->proj, &ctx->mm));
    if (l->ssm_in_b) tk_bias_rows(ctx, ctx->proj, l->ssm_in_b, W, U, 0);   /* use_bias / mamba_proj_bias */
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        const int32_t cell = rv.ub_cells[s];
        tk_rs_snap_conv(&rv, 0, s, ctx->proj + (int64_t) s * nst * W + DI, W, nst, CD, K);
        tk_conv_act(ctx, hp->ssm.act, ctx->proj + (int64_t) s * nst * W + DI, W, nst, CD, K, l->ssm_conv1d, l->ssm_conv1d_b,
                      rv.piece[0] + (size_t) cell * rv.piece_n[0], ctx->conv + (int64_t) s * nst * CD, CD);
    }

    /* dt = softplus(dt + dt_bias), in place in proj's dt columns; then each sequence's run
     * through the scan (recurrence, or chunked SSD from tk_ssd_threshold() tokens; heads
     * split over the threads) */
    for (int32_t t = 0; t < U; t++) {
        float * dtr = ctx->proj + (int64_t) t * W + DI + CD;
        for (int32_t h = 0; h < H; h++) dtr[h] = tk_softplus(dtr[h] + l->ssm_dt_b[h]);
        if (hp->ssm.dt_min > 0.0f)   /* HF's dt_limit floor: time_step_limit[0] (Zamba2, Nemotron-H: time_step_min) */
            for (int32_t h = 0; h < H; h++) dtr[h] = fmaxf(dtr[h], hp->ssm.dt_min);
        if (hp->ssm.dt_max > 0.0f)   /* its ceiling: time_step_limit[1] (torch.clamp: the floor, then this) */
            for (int32_t h = 0; h < H; h++) dtr[h] = fminf(dtr[h], hp->ssm.dt_max);
    }
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        float * state = rv.piece[1] + (size_t) rv.ub_cells[s] * rv.piece_n[1];
        const int64_t t = (int64_t) s * nst;
        if (tk_rs_snaps_row(&rv, s, nst)) {   /* speculative window: the recurrence, a snapshot per token */
            float * snap[TK_MAX_UB_SNAP];
            for (int32_t i = 0; i < nst && i < TK_MAX_UB_SNAP; i++) snap[i] = tk_rs_snap(&rv, 1, s, nst, i);
            TK_CHECK(tk_ssm_mamba2_run_snap(ctx->pool, state, ctx->conv + t * CD, CD, ctx->proj + t * W + DI + CD, W, l->ssm_a,
                                            l->ssm_d, nst, H, P, N, G, ctx->y + t * DI, DI, snap));
            continue;
        }
        TK_CHECK(tk_ssm_mamba2_run(ctx->pool, state, ctx->conv + t * CD, CD, ctx->proj + t * W + DI + CD, W, l->ssm_a,
                                   l->ssm_d, nst, H, P, N, G, ctx->y + t * DI, DI, ctx->work, ctx->work_bytes,
                                   ctx->params.ssd_min));
    }
    tk_rows_job gj = {ctx->proj, l->ssm_norm, ctx->y, W, DI, DI, hp->rms_eps, G};
    const int gate_first = l->ssm_norm && !hp->ssm.norm_before_gate;
    tk_par_rows(ctx->pool, U, DI, gate_first ? tk_gated_norm_rows : norm_then_gate_rows, &gj);
    TK_CHECK(tk_matmul(&l->ssm_out, 0, ctx->y, U, out, &ctx->mm));
    if (l->ssm_out_b) tk_bias_rows(ctx, out, l->ssm_out_b, hp->n_embd, U, 0);
    return TK_OK;
}

const tk_mixer_ops tk_mixer_mamba2 = {
    .name = "mamba2",
    .check = m2_check,
    .bind = m2_bind,
    .rs_pieces = m2_rs_pieces,
    .scratch = m2_scratch,
    .forward = m2_forward,
};
