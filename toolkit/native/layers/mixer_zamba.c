/* mixer_zamba.c: the Zamba (v1) hybrid layer (TK_LAYER_ZAMBA_SHARED: zamba's "hybrid" layers;
 * its other layers are plain TK_LAYER_MAMBA1 with ssm_n_head Mamba heads).
 *
 * Shapes (U ubatch tokens, D n_embd, E the token's embedding row [D], A = 2 D, H heads, Hkv KV
 * heads, hd head_dim, F the shared FFN width):
 *   in:  ctx->x [U, D] (the residual stream; the block's own pre-norm is applied below)
 *   out: [U, D]
 *   shared block b = (rank of this layer among the hybrid layers) % n_shared_block, tensors
 *   shared.b.* (one block when the checkpoint ties them; one per hybrid layer when it does not);
 *   this layer's blk.il.shared_linear [D, D]
 *   KV cache per cell: K [Hkv hd], V [Hkv hd] (no RoPE); recurrent state: Mamba-1's
 * Formula (transformers modeling_zamba.py ZambaHybridLayer / ZambaAttentionDecoderLayer /
 * ZambaMambaDecoderLayer; docs/specs/more-hybrids.md §7.4):
 *   h = rmsnorm([x | E]) * shared.attn_norm                                   [U, A]
 *   o = Wo softmax(q k^T * scale + causal) v,  q = Wq h, k = Wk h, v = Wv h
 *       (scale = attention.scale = (hd/2)^-1/2, no RoPE; tk_attention_core)
 *   f = rmsnorm(o) * shared.ffn_norm
 *   t = shared_linear(Wd (act(Wg f) * Wu f))          (act hp.ffn.act, HF hidden_act: default gelu, the erf form)
 *   out = mamba1(rmsnorm(x + t) * attn_norm)            (mixer_mamba1.c, ssm_n_head heads)
 * The block skeleton (forward.c) then adds out to x: t enters the Mamba input only.
 * The shared block is mixer_zamba2.c's (tk_zamba_shared_block) without LoRA adapters.
 */
#include "kernels/attn.h"
#include "layers/layer.h"

static int32_t z1_kv_dim(const tk_model * m, int il) { return m->hp.n_head_kv[il] * m->hp.attn.head_dim; }

static int32_t z1_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) {
    return tk_mixer_mamba1.rs_pieces(m, il, out);
}

/* Mamba-1's, plus the shared block's: proj [A] (h), y [H hd], q [H hd], kv [Hkv hd] */
static void z1_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    const tk_hparams * hp = &m->hp;
    tk_mixer_mamba1.scratch(m, il, n_ubatch, n_threads, need);
    tk_scratch_need(&need->proj, 2 * (size_t) hp->n_embd);
    tk_scratch_need(&need->y, (size_t) hp->attn.n_head * (size_t) hp->attn.head_dim);
    tk_scratch_need(&need->q, (size_t) hp->attn.n_head * (size_t) hp->attn.head_dim);
    tk_scratch_need(&need->kv, (size_t) z1_kv_dim(m, il));
    tk_scratch_need(&need->work_bytes, tk_attn_scratch_bytes(hp->attn.n_head, z1_kv_dim(m, il) / hp->attn.head_dim, hp->attn.head_dim,
                                                              hp->attn.head_dim, n_threads, need->kv_typed));   /* the blocked attention's */
    tk_scratch_need(&need->attn_part, tk_attn_part_floats(hp->attn.n_head, z1_kv_dim(m, il) / hp->attn.head_dim, hp->attn.head_dim));
}

static tk_status z1_check(const tk_hparams * hp, int il) {
    TK_CHECK(tk_mixer_mamba1.check(hp, il));
    if (hp->zamba.n_shared_block <= 0) return TK_FAIL(TK_ERR_INVALID, "n_shared_block = %d must be > 0", hp->zamba.n_shared_block);
    if (hp->attn.n_head <= 0 || hp->n_head_kv[il] <= 0 || hp->attn.n_head % hp->n_head_kv[il] || hp->attn.head_dim <= 0)
        return TK_FAIL(TK_ERR_INVALID, "layer %d: zamba attention needs n_head > 0 divisible by n_head_kv, head_dim > 0 "
                       "(n_head %d, n_head_kv %d, head_dim %d)", il, hp->attn.n_head, hp->n_head_kv[il], hp->attn.head_dim);
    if (hp->attn.use_rope && hp->attn.n_rot != 0)
        return TK_FAIL(TK_ERR_INVALID, "zamba's shared attention has no RoPE (n_rot = %d)", hp->attn.n_rot);
    return TK_OK;
}

static tk_status z1_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const int64_t D = m->hp.n_embd;
    char nm[128];
    TK_CHECK(tk_mixer_mamba1.bind(m, tab, il, l));
    TK_CHECK(tk_zamba_bind_shared(m, tab, tk_zamba_block(&m->hp, il), l));
    return tk_bind_weight(m, tab, tk_blk_name(nm, sizeof nm, il, "shared_linear.weight"), TK_SHAPE(D, D), 1,
                          &l->shared_linear);
}

static tk_status z1_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t U = ub->n_tokens, D = hp->n_embd;
    TK_CHECK(tk_zamba_shared_block(ctx, l, il, ub, out));
    /* cur = rmsnorm(x + t) * attn_norm: the Mamba-1 block's input */
    tk_rows_job j = {ctx->x, NULL, ctx->cur, D, D, D, 1.0f, 1};
    tk_par_rows(ctx->pool, U, D, tk_add_rows, &j);
    tk_rms_norm_rows(ctx, ctx->cur, l->attn_norm, hp->rms_eps, D, U, ctx->cur);
    return tk_mixer_mamba1.forward(ctx, l, il, ub, out);
}

const tk_mixer_ops tk_mixer_zamba = {
    .name = "zamba",
    .check = z1_check,
    .bind = z1_bind,
    .rs_pieces = z1_rs_pieces,
    .kv_dim = z1_kv_dim,
    .scratch = z1_scratch,
    .forward = z1_forward,
};
