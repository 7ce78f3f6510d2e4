/* mixer_none.c: the block without a mixer (TK_LAYER_NONE: Nemotron-H's MLP and MoE layers).
 *
 * Shapes: none; the kind binds no tensor, keeps no memory and uses no scratch.
 * Formula: the block is  x += ffn(rmsnorm(x) * attn_norm)  alone: forward.c skips the mixer
 *   step of a kind whose forward is NULL, and model.c gives the FFN the block's one pre-norm
 *   blk.N.attn_norm (Nemotron-H has one norm per block; there is no blk.N.ffn_norm).
 * ref: transformers modeling_nemotron_h.py NemotronHBlock.forward (norm -> mixer -> residual,
 *      mixer = NemotronHMLP / NemotronHMoE); llama.cpp src/models/nemotron-h.cpp build_ffn_layer.
 */
#include "layers/layer.h"

static tk_status none_check(const tk_hparams * hp, int il) {
    (void) hp;
    if (hp->ffn_kinds[il] == TK_FFN_NONE) return TK_FAIL(TK_ERR_INVALID, "layer %d has neither a mixer nor an FFN", il);
    return TK_OK;
}

static tk_status none_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    (void) m; (void) tab; (void) il; (void) l;
    return TK_OK;
}

const tk_mixer_ops tk_mixer_none = {
    .name = "none",
    .check = none_check,
    .bind = none_bind,
    .forward = NULL,           /* no mixer: forward.c skips the step (rs_pieces, kv_dim, scratch: none) */
};
