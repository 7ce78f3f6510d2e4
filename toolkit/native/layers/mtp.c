/* mtp.c: the input of an MTP / NextN block (multi-token prediction) run as a draft model.
 *
 * The runtime runs a NextN block as a model of its own: one decoder block (the family's MTP
 * layer, e.g. Qwen3-Next / Qwen3.5's gated attention and MLP or MoE, at blk.0), the block's
 * shared_head_norm as output_norm, and the main model's token_embd and output.  Python hands the
 * tensor table over renamed (toolkit/runtime/mtp.py); the three tensors below mark it as one:
 *
 *   nextn.eh_proj.weight  [2D, D]   (HF mtp.fc; llama.cpp blk.L.nextn.eh_proj)
 *   nextn.enorm.weight    [D]       (HF mtp.pre_fc_norm_embedding, +1 at convert)
 *   nextn.hnorm.weight    [D]       (HF mtp.pre_fc_norm_hidden, +1 at convert)
 *
 * For each token t (the token just drafted or accepted) and h (the hidden state before it, read
 * from tk_batch.embd: the main model's output_norm'd final state at the previous position, or
 * the block's own shared_head_norm'd output at a later draft step):
 *
 *   x = eh_proj [ rmsnorm(embd(t)) * enorm ; rmsnorm(h) * hnorm ]      (concat order [e; h])
 *
 * then the block, then logits = output(rmsnorm(x) * shared_head_norm).  Shapes: U ubatch
 * tokens, D n_embd.  Source: vLLM qwen3_next_mtp.py (Qwen3NextMultiTokenPredictor.forward:
 * pre_fc_norm_embedding(embed), pre_fc_norm_hidden(hidden), cat([e, h]), fc, the layer, norm;
 * the target's hidden_states are what its lm_head reads, i.e. after its final norm).
 */
#include <string.h>

#include "layers/layer.h"

tk_status tk_mtp_bind(tk_model * m, const tk_table * tab) {
    const int64_t D = m->hp.n_embd;
    TK_CHECK(tk_bind_weight(m, tab, "nextn.eh_proj.weight", TK_SHAPE(2 * D, D), 0, &m->nextn_eh_proj));
    if (!m->nextn_eh_proj.data) return TK_OK;
    TK_CHECK(tk_bind_vec(m, tab, "nextn.enorm.weight", TK_SHAPE(D), 1, &m->nextn_enorm));
    return tk_bind_vec(m, tab, "nextn.hnorm.weight", TK_SHAPE(D), 1, &m->nextn_hnorm);
}

/* ctx->x [U, D] holds embd(token): replaced by eh_proj [enorm(e); hnorm(h)], h = embd_in[bidx] */
tk_status tk_mtp_input(tk_context * ctx, const tk_ubatch * ub) {
    const tk_model * m = ctx->model;
    const int32_t D = m->hp.n_embd, U = ub->n_tokens;
    const float eps = m->hp.rms_eps;
    for (int32_t t = 0; t < U; t++) {
        float * in = ctx->mtp_in + (int64_t) t * 2 * D;
        tk_rms_norm(ctx->x + (int64_t) t * D, m->nextn_enorm, eps, D, in);
        tk_rms_norm(ctx->embd_in + (int64_t) ub->bidx[t] * D, m->nextn_hnorm, eps, D, in + D);
    }
    return tk_matmul(&m->nextn_eh_proj, 0, ctx->mtp_in, U, ctx->x, &ctx->mm);
}
