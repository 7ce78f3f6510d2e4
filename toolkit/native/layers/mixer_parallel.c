/* mixer_parallel.c: attention and Mamba-2 side by side (TK_LAYER_PARALLEL: falcon-h1).
 *
 * Shapes (U ubatch tokens, D n_embd; the attention half as mixer_attention.c, the Mamba-2
 * half as mixer_mamba2.c, both on the same layer's tensors blk.il.attn_* and blk.il.ssm_*):
 *   in:  ctx->cur [U, D]            out: [U, D]
 *   memory: the layer's KV cells (attention) and its "conv" / "ssm" recurrent pieces (Mamba-2)
 *   scratch: both halves', plus ctx->mix [U, D] for the attention half's output
 * Formula:
 *   out = mamba2(cur) + attention(cur)
 * Falcon-H1's muP multipliers are folded into the weights by the converter, as llama.cpp's
 * does (ssm_in_multiplier and the five zxbcdt ssm_multipliers into ssm_in's row blocks,
 * attention_in_multiplier into attn_q/k/v, key_multiplier into attn_k, ssm_out_multiplier into
 * ssm_out, attention_out_multiplier into attn_output; the same factors into the biases the
 * checkpoint may have), so the sum has no factors here.
 * ref: transformers modeling_falcon_h1.py FalconH1DecoderLayer.forward; llama.cpp
 *      src/models/falcon-h1.cpp (attention and build_mamba2_layer on the same attn_norm output).
 */
#include "layers/layer.h"

static tk_status par_check(const tk_hparams * hp, int il) {
    TK_CHECK(tk_mixer_attention.check(hp, il));
    return tk_mixer_mamba2.check(hp, il);
}

/* attention tensors, then Mamba-2's (ssm_norm optional: Falcon-H1's mamba_rms_norm), then the
 * in_proj / out_proj biases, each where the file has it (Falcon-H1: mamba_proj_bias gives
 * ssm_in.bias [W], projectors_bias ssm_out.bias [D], independently; llama.cpp's names) */
static tk_status par_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    TK_CHECK(tk_mixer_attention.bind(m, tab, il, l));
    TK_CHECK(tk_mamba2_bind(m, tab, il, l, 0));
    char nm[128];
    const int64_t W = 2 * (int64_t) hp->ssm.d_inner + 2 * (int64_t) hp->ssm.n_group * hp->ssm.d_state + hp->ssm.n_head;
    const int in_b = tk_table_find(tab, tk_blk_name(nm, sizeof nm, il, "ssm_in.bias")) != NULL;
    TK_CHECK(tk_bind_vec(m, tab, nm, TK_SHAPE(W), in_b, &l->ssm_in_b));
    const int out_b = tk_table_find(tab, tk_blk_name(nm, sizeof nm, il, "ssm_out.bias")) != NULL;
    return tk_bind_vec(m, tab, nm, TK_SHAPE(hp->n_embd), out_b, &l->ssm_out_b);
}

static int32_t par_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) { return tk_mixer_mamba2.rs_pieces(m, il, out); }

static int32_t par_kv_dim(const tk_model * m, int il) { return tk_mixer_attention.kv_dim(m, il); }

static void par_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    tk_mixer_attention.scratch(m, il, n_ubatch, n_threads, need);
    tk_mixer_mamba2.scratch(m, il, n_ubatch, n_threads, need);
    tk_scratch_need(&need->mix, (size_t) m->hp.n_embd);
}

static tk_status par_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const int32_t D = ctx->model->hp.n_embd, U = ub->n_tokens;
    TK_CHECK(tk_mixer_attention.forward(ctx, l, il, ub, ctx->mix));
    TK_CHECK(tk_mixer_mamba2.forward(ctx, l, il, ub, out));
    tk_rows_job j = {ctx->mix, NULL, out, D, D, D, 1.0f, 1};   /* out += mix (ssm + attention, HF's order) */
    tk_par_rows(ctx->pool, U, D, tk_add_rows, &j);
    return TK_OK;
}

const tk_mixer_ops tk_mixer_parallel = {
    .name = "parallel",
    .check = par_check,
    .bind = par_bind,
    .rs_pieces = par_rs_pieces,
    .kv_dim = par_kv_dim,
    .scratch = par_scratch,
    .forward = par_forward,
};
