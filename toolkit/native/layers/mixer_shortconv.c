/* mixer_shortconv.c: LFM2's double-gated short convolution (TK_LAYER_SHORTCONV: the conv
 * layers of lfm2 and lfm2moe).
 *
 * Shapes (U ubatch tokens, D n_embd = the conv channels, K d_conv = shortconv.l_cache):
 *   in:  ctx->cur [U, D]            out: [U, D]
 *   shortconv.in_proj [D, 3D]: output rows [B (D) | C (D) | x (D)]   (l->ssm_in)
 *   shortconv.conv [K, D]: the depthwise kernel                       (l->ssm_conv1d, [D][K])
 *   with HF conv_bias (ours: llama.cpp's lfm2 has none): shortconv.{in_proj,conv,out_proj}.bias
 *     [3D], [D], [D], added after the in_proj / conv / out_proj products
 *   shortconv.out_proj [D, D]                                         (l->ssm_out)
 *   state per sequence: "conv" [D, K-1] (the last K-1 values of B*x, oldest first; zero at
 *     position 0)
 * Formula, per sequence, tokens in order:
 *   (B, C, x) = in_proj(cur);  bx = B * x
 *   c_t = sum_{k<K} conv[k] * bx_{t-K+1+k}   (causal, the window carried in the state)
 *   out = out_proj(C * c)
 * No activation anywhere (the gates are the products).
 * Scratch: proj [U, 3D] (B | C | x), conv [U, D] bx (the conv's input), y [U, D] the conv output,
 *   then C * it.
 * ref: transformers modeling_lfm2.py Lfm2ShortConv.slow_forward; llama.cpp src/models/lfm2.cpp
 *      build_shortconv_block.
 */
#include "layers/layer.h"

static int32_t sc_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) {
    (void) il;
    out[0] = (tk_rs_piece) {"conv", (size_t) (m->hp.ssm.d_conv - 1) * (size_t) m->hp.n_embd, 1};
    return 1;
}

static void sc_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    const size_t D = (size_t) m->hp.n_embd;
    (void) il; (void) n_ubatch; (void) n_threads;
    tk_scratch_need(&need->proj, 3 * D);
    tk_scratch_need(&need->conv, D);
    tk_scratch_need(&need->y, D);
}

/* ---- load: hparams and tensors ---- */

static tk_status sc_check(const tk_hparams * hp, int il) {
    if (hp->ssm.d_conv < 2 || hp->ssm.d_conv > 64)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: short conv kernel d_conv = %d must be in [2, 64]", il, hp->ssm.d_conv);
    if (hp->ssm.d_inner != hp->n_embd)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: short conv d_inner = %d must equal n_embd = %d", il, hp->ssm.d_inner, hp->n_embd);
    return TK_OK;
}

static tk_status sc_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const int64_t D = m->hp.n_embd;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    TK_CHECK(tk_bind_weight(m, tab, NAME("shortconv.in_proj.weight"), TK_SHAPE(D, 3 * D), 1, &l->ssm_in));
    TK_CHECK(tk_bind_vec(m, tab, NAME("shortconv.conv.weight"), TK_SHAPE(m->hp.ssm.d_conv, D), 1, &l->ssm_conv1d));
    TK_CHECK(tk_bind_weight(m, tab, NAME("shortconv.out_proj.weight"), TK_SHAPE(D, D), 1, &l->ssm_out));
    /* HF conv_bias: in_proj, conv and out_proj biases, the three together (absent: none) */
    const int cb = tk_table_find(tab, NAME("shortconv.in_proj.bias")) != NULL;
    TK_CHECK(tk_bind_vec(m, tab, NAME("shortconv.in_proj.bias"), TK_SHAPE(3 * D), cb, &l->ssm_in_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("shortconv.conv.bias"), TK_SHAPE(D), cb, &l->ssm_conv1d_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("shortconv.out_proj.bias"), TK_SHAPE(D), cb, &l->ssm_out_b));
#undef NAME
    return TK_OK;
}

/* ---- forward ---- */

static tk_status sc_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const int32_t D = ctx->model->hp.n_embd, K = ctx->model->hp.ssm.d_conv, W = 3 * D;
    const int32_t U = ub->n_tokens, nst = ub->n_seq_tokens;
    tk_rs_view rv;
    TK_CHECK(ctx->mem->rs_view(ctx->mem, il, &rv));

    TK_CHECK(tk_matmul(&l->ssm_in, 0, ctx->cur, U, ctx->proj, &ctx->mm));
    if (l->ssm_in_b) tk_bias_rows(ctx, ctx->proj, l->ssm_in_b, W, U, 0);
    for (int32_t t = 0; t < U; t++) {           /* bx = B * x */
        const float * bt = ctx->proj + (int64_t) t * W, * xt = bt + 2 * D;
        float * o = ctx->conv + (int64_t) t * D;
        for (int32_t i = 0; i < D; i++) o[i] = bt[i] * xt[i];
    }
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        const int64_t t0 = (int64_t) s * nst;
        tk_rs_snap_conv(&rv, 0, s, ctx->conv + t0 * D, D, nst, D, K);
        tk_conv_rows(ctx, ctx->conv + t0 * D, D, nst, D, K, l->ssm_conv1d, l->ssm_conv1d_b,
                     rv.piece[0] + (size_t) rv.ub_cells[s] * rv.piece_n[0], ctx->y + t0 * D, D);
    }
    for (int32_t t = 0; t < U; t++) {           /* y = C * conv */
        const float * ct = ctx->proj + (int64_t) t * W + D;
        float * yt = ctx->y + (int64_t) t * D;
        for (int32_t i = 0; i < D; i++) yt[i] *= ct[i];
    }
    TK_CHECK(tk_matmul(&l->ssm_out, 0, ctx->y, U, out, &ctx->mm));
    if (l->ssm_out_b) tk_bias_rows(ctx, out, l->ssm_out_b, D, U, 0);
    return TK_OK;
}

const tk_mixer_ops tk_mixer_shortconv = {
    .name = "shortconv",
    .check = sc_check,
    .bind = sc_bind,
    .rs_pieces = sc_rs_pieces,
    .scratch = sc_scratch,
    .forward = sc_forward,
};
