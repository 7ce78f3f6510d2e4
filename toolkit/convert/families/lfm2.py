"""Lfm2ForCausalLM -> GGUF ``lfm2``; Lfm2MoeForCausalLM -> ``lfm2moe`` (llama.cpp 0c1e570's
``conversion/lfm2.py`` LFM2Model / LFM2MoeModel: same keys, names and data).

Sources: transformers 5.24 ``models/lfm2``, ``models/lfm2_moe`` (configs, parameter names);
llama.cpp ``conversion/lfm2.py``, ``conversion/base.py`` TextModel.set_gguf_parameters,
``src/models/lfm2.cpp`` / ``lfm2moe.cpp`` (what the loader reads).

Glossary: D = hidden_size, K = conv_L_cache (short conv kernel), Hq / Hkv attention heads of
hd = D / Hq, F = the dense FFN width, E experts of width Fe = moe_intermediate_size.

HF tensor (numpy shape)                                 GGUF tensor
model.embed_tokens.weight [V, D]                        token_embd.weight (the output too: tied)
model.embedding_norm.weight [D] (the FINAL norm)        token_embd_norm.weight (llama.cpp's name)
layers.i.operator_norm / ffn_norm [D]                   blk.i.attn_norm / ffn_norm
conv layer: conv.in_proj [3D, D] (B | C | x)            blk.i.shortconv.in_proj
            conv.conv [D, 1, K]                         blk.i.shortconv.conv [D, K] (squeezed)
            conv.out_proj [D, D]                        blk.i.shortconv.out_proj
attention:  self_attn.{q,k,v}_proj, out_proj            blk.i.attn_{q,k,v}, attn_output
            self_attn.{q,k}_layernorm [hd]              blk.i.attn_{q,k}_norm (as stored: no +1)
dense FFN:  feed_forward.w1 / w3 / w2                   blk.i.ffn_gate / ffn_up / ffn_down
MoE (lfm2moe, layers >= num_dense_layers):
            feed_forward.gate [E, D]                    blk.i.ffn_gate_inp
            feed_forward.experts.e.w1 / w3 / w2         blk.i.ffn_{gate,up,down}_exps (stacked)
            feed_forward.expert_bias [E]                blk.i.exp_probs_b.bias
lm_head.weight [V, D] (tie_word_embeddings false)       output.weight

Transforms: the conv squeeze [D, 1, K] -> [D, K] (the layout ggml_ssm_conv takes; a reshape of
the same bytes) and the expert stacking.  Nothing else: LFM2's RMSNorms multiply by w itself.

Keys: llama.cpp's, plus ours ``attention.layer_indices``; for lfm2moe also
``expert_weights_scale`` (routed_scaling_factor) and ``expert_weights_norm`` (norm_topk_prob),
written only when they differ from what llama.cpp's graph hard-codes (scale 1, renormalised),
so the files of the usual configs equal llama.cpp's, and the others still run right here
(llama.cpp ignores both keys for this architecture).
"""
from __future__ import annotations

from typing import ClassVar

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.rope_scaling import SCALED_ROPE_TYPES, SCALED_WHY, rope_scaling_kv
from toolkit.convert.plan import KV, kv_arr_i32, kv_bool, kv_f32, kv_u32
from toolkit.convert.config_keys import ConfigKeys
from toolkit.errors import InputError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_LFM2, ARCH_LFM2MOE, GGUFValueType

# the short conv's biases (HF conv_bias, in_proj / conv / out_proj): LFM2, LFM2-MoE and LFM3 convert
# them (our names: llama.cpp's lfm2 layout has none)

_L = r"model\.layers\.\d+\."
_CONV_TYPE, _ATTN_TYPE = "conv", "full_attention"
_COMMON = (r"model\.embed_tokens\.weight", r"model\.embedding_norm\.weight", r"lm_head\.weight",
           _L + r"(?:operator_norm|ffn_norm)\.weight",
           _L + r"conv\.(?:in_proj|conv|out_proj)\.(?:weight|bias)",
           _L + r"self_attn\.(?:q_proj|k_proj|v_proj|out_proj|q_layernorm|k_layernorm)\.weight",
           _L + r"feed_forward\.w[123]\.weight")
_MOE = (_L + r"feed_forward\.gate\.weight", _L + r"feed_forward\.expert_bias",
        _L + r"feed_forward\.experts\.\d+\.w[123]\.weight")


class LFM2Family(Family):
    """LFM2: gated short conv / attention layers (``layer_types``, or the original
    ``full_attn_idxs`` list), a dense SwiGLU FFN on every layer."""

    hf_archs = ("Lfm2ForCausalLM", "LFM2ForCausalLM")
    hf_configs = ("Lfm2Config",)
    config_keys = ConfigKeys.of(
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
        "max_position_embeddings norm_eps tie_word_embeddings rope_parameters conv_L_cache block_multiple_of "
        "block_ffn_dim_multiplier block_auto_adjust_ff_dim full_attn_idxs layer_types block_ff_dim conv_bias",
        rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY)
    families = ("LFM2",)
    arch = ARCH_LFM2
    known = _COMMON
    has_moe: ClassVar[bool] = False

    # ---- hparams ------------------------------------------------------------------------------
    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.n_ctx = c.int("max_position_embeddings", default=128000)
        self.eps = c.eps("norm_eps", default=1e-5)
        self.d_conv = c.int("conv_L_cache", default=3)
        self.conv_bias = c.flag("conv_bias", False)   # in_proj / conv / out_proj biases
        if not 2 <= self.d_conv <= 64:
            raise InputError(f"{c.path}: key 'conv_L_cache' = {self.d_conv} must be in [2, 64]")
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads")
        if self.n_embd % self.n_head or self.n_head % self.n_head_kv:
            raise InputError(f"{c.path}: num_attention_heads {self.n_head} must divide hidden_size {self.n_embd} and be "
                             f"a multiple of num_key_value_heads {self.n_head_kv}")
        self.head_dim = self.n_embd // self.n_head
        self.rope_theta = c.rope_theta(1000000.0)
        self.attn_layers = self._attention_layers()
        self.n_ff = self._ff_dim()

    def _attention_layers(self) -> list[int]:
        """Attention layers from ``layer_types`` ("conv" / "full_attention") or the original
        ``full_attn_idxs`` (both: they must agree); neither: every layer is attention, as
        Lfm2Config.__post_init__ has it.

        Raises:
            InputError: a list whose length is not num_hidden_layers, an unknown layer type, an
                index outside the layers, or two forms that disagree (names config.json and the key).
        """
        attn = self.cfg.layer_list(self.n_layer, indices_key="full_attn_idxs", period_key="", offset_key="",
                                   match_types=(_ATTN_TYPE,), other_types=(_CONV_TYPE,))
        return list(range(self.n_layer)) if attn is None else attn

    def _ff_dim(self) -> int:
        """The dense FFN width: intermediate_size (or block_ff_dim), reduced as Lfm2MLP does
        when block_auto_adjust_ff_dim (default true): int(2 F / 3), times
        block_ffn_dim_multiplier, rounded up to block_multiple_of (llama.cpp
        LFM2Model._add_feed_forward_length)."""
        c = self.cfg
        ff = c.int("block_ff_dim", "intermediate_size")
        if c.d.get("block_auto_adjust_ff_dim", True):
            ff = int(2 * ff / 3)
            mult = c.d.get("block_ffn_dim_multiplier", 1.0)
            if mult is not None:
                ff = int(c.float("block_ffn_dim_multiplier") * ff)
                m = c.int("block_multiple_of", default=256)
                ff = m * ((ff + m - 1) // m)
        return ff

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    # ---- plan -----------------------------------------------------------------------------
    def kv(self) -> list[KV]:
        """TextModel.set_gguf_parameters and LFM2Model's, in their order, then ours."""
        key, attn = self.key, set(self.attn_layers)
        return [kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
                kv_u32(key(Keys.LLM.CONTEXT_LENGTH), self.n_ctx),
                kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
                kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), self.n_ff),
                kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
                # per layer, 0 on the conv layers (how llama.cpp tells them apart)
                KV(key(Keys.Attention.HEAD_COUNT_KV), [self.n_head_kv if i in attn else 0 for i in range(self.n_layer)],
                   GGUFValueType.ARRAY, GGUFValueType.INT32),
                kv_f32(key(Keys.Rope.FREQ_BASE), self.rope_theta),
                kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps)] + self.moe_kv() + [
                kv_u32(key(Keys.LLM.VOCAB_SIZE), self.n_vocab),
                kv_u32(key(Keys.ShortConv.L_CACHE), self.d_conv),
                kv_arr_i32(key(Keys.Attention.LAYER_INDICES), sorted(attn))] + rope_scaling_kv(self.cfg, key)

    def moe_kv(self) -> list[KV]:
        return []

    def build(self):
        self.read_hparams()
        self.plan.kv += self.kv()
        D, attn = self.n_embd, set(self.attn_layers)
        self.copy(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, D))
        for i in range(self.n_layer):
            lp = f"model.layers.{i}."
            self.copy(tn(T.ATTN_NORM, i), lp + "operator_norm.weight", (D,))
            if i in attn:
                self._attention(i, lp + "self_attn.")
            else:
                self._short_conv(i, lp + "conv.")
            self.copy(tn(T.FFN_NORM, i), lp + "ffn_norm.weight", (D,))
            self.ffn(i, lp + "feed_forward.")
        # HF applies embedding_norm after the last layer: it is the final norm
        self.copy(tn(T.TOKEN_EMBD_NORM), "model.embedding_norm.weight", (D,))
        self._output()
        self.check_leftovers()
        return self.plan

    def _output(self) -> None:
        """output.weight from lm_head unless the embeddings are tied: ``tie_word_embeddings``, or
        the original config's ``tie_embedding`` (Lfm2Config pops it into the former), default
        true; a tied checkpoint's saved lm_head is checked for shape and left out."""
        d = self.cfg.d
        tie = d.get("tie_word_embeddings", d.get("tie_embedding", True))
        if not tie:
            self.copy(tn(T.OUTPUT), "lm_head.weight", (self.n_vocab, self.n_embd), why="tie_word_embeddings is false")
        elif self.has("lm_head.weight"):
            self.take("lm_head.weight", (self.n_vocab, self.n_embd))
            self.omit("lm_head.weight", "tie_word_embeddings: the output reuses token_embd.weight")

    def _attention(self, i: int, a: str) -> None:
        D, hd = self.n_embd, self.head_dim
        self.copy(tn(T.ATTN_Q, i), a + "q_proj.weight", (self.n_head * hd, D))
        self.copy(tn(T.ATTN_K, i), a + "k_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_V, i), a + "v_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_OUT, i), a + "out_proj.weight", (D, self.n_head * hd))
        self.copy(tn(T.ATTN_Q_NORM, i), a + "q_layernorm.weight", (hd,))
        self.copy(tn(T.ATTN_K_NORM, i), a + "k_layernorm.weight", (hd,))

    def _short_conv(self, i: int, s: str) -> None:
        D, K = self.n_embd, self.d_conv
        self.copy(tn(T.SHORTCONV_INPROJ, i), s + "in_proj.weight", (3 * D, D))
        self.copy(tn(T.SHORTCONV_CONV, i), s + "conv.weight", (D, 1, K), (D, K), note="squeeze [D,1,K] -> [D,K]",
                  why="conv_L_cache")
        self.copy(tn(T.SHORTCONV_OUTPROJ, i), s + "out_proj.weight", (D, D))
        if getattr(self, "conv_bias", False):   # HF conv_bias (LFM2, LFM2-MoE); our names: llama.cpp's lfm2 has none
            for out, src, n in ((T.SHORTCONV_INPROJ, "in_proj", 3 * D), (T.SHORTCONV_CONV, "conv", D),
                                (T.SHORTCONV_OUTPROJ, "out_proj", D)):
                self.copy(tn(out, i, ".bias"), s + src + ".bias", (n,), why="conv_bias is true")

    def ffn(self, i: int, f: str) -> None:
        self.dense(i, f, self.n_ff)

    def dense(self, i: int, f: str, n_ff: int) -> None:
        """SwiGLU w2(silu(w1 x) * w3 x): w1 -> ffn_gate, w3 -> ffn_up, w2 -> ffn_down."""
        D = self.n_embd
        self.copy(tn(T.FFN_GATE, i), f + "w1.weight", (n_ff, D), why="the FFN width from config.json")
        self.copy(tn(T.FFN_UP, i), f + "w3.weight", (n_ff, D), why="the FFN width from config.json")
        self.copy(tn(T.FFN_DOWN, i), f + "w2.weight", (D, n_ff), why="the FFN width from config.json")


class LFM2MoeFamily(LFM2Family):
    """LFM2-MoE: as LFM2, with the first ``num_dense_layers`` FFNs dense (intermediate_size,
    no auto-adjust) and the others routed experts: sigmoid scores, top-k of score +
    expert_bias, weights renormalised (norm_topk_prob) and scaled (routed_scaling_factor)."""

    hf_archs = ("Lfm2MoeForCausalLM",)
    hf_configs = ("Lfm2MoeConfig",)
    config_keys = ConfigKeys.of(
        "vocab_size hidden_size intermediate_size moe_intermediate_size num_hidden_layers tie_word_embeddings "
        "rope_parameters max_position_embeddings norm_eps num_attention_heads num_key_value_heads conv_L_cache "
        "num_dense_layers num_experts_per_tok num_experts use_expert_bias routed_scaling_factor norm_topk_prob "
        "layer_types full_attn_idxs conv_bias",
        rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY)
    arch = ARCH_LFM2MOE
    known = _COMMON + _MOE
    has_moe = True

    def read_hparams(self) -> None:
        super().read_hparams()
        c = self.cfg
        self.n_expert = c.int("num_experts")
        self.n_expert_used = c.int("num_experts_per_tok")
        if self.n_expert_used > self.n_expert:
            raise InputError(f"{c.path}: num_experts_per_tok {self.n_expert_used} > num_experts {self.n_expert}")
        self.n_ff_exp = c.int("moe_intermediate_size")
        self.n_dense = c.int("num_dense_layers", default=2, min_value=0)
        if self.n_dense > self.n_layer:
            raise InputError(f"{c.path}: num_dense_layers = {self.n_dense} is more than num_hidden_layers = {self.n_layer}")
        self.scale = c.float("routed_scaling_factor", default=1.0)
        self.norm_w = c.flag("norm_topk_prob", True)
        self.expert_bias = c.flag("use_expert_bias", True)

    def _ff_dim(self) -> int:
        return self.cfg.int("intermediate_size")     # Lfm2MoeMLP: no auto-adjust

    def moe_kv(self) -> list[KV]:
        """TextModel's expert counts, then LFM2MoeModel's keys (sigmoid gating = 2), then ours
        where the config differs from what llama.cpp's graph assumes."""
        key = self.key
        kv = [kv_u32(key(Keys.LLM.EXPERT_COUNT), self.n_expert),
              kv_u32(key(Keys.LLM.EXPERT_USED_COUNT), self.n_expert_used),
              kv_u32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), self.n_ff_exp),
              kv_u32(key(Keys.LLM.LEADING_DENSE_BLOCK_COUNT), self.n_dense),
              kv_u32(key(Keys.LLM.EXPERT_GATING_FUNC), 2)]
        if self.scale != 1.0:
            kv.append(kv_f32(key(Keys.LLM.EXPERT_WEIGHTS_SCALE), self.scale))
        if not self.norm_w:
            kv.append(kv_bool(key(Keys.LLM.EXPERT_WEIGHTS_NORM), False))
        return kv

    def ffn(self, i: int, f: str) -> None:
        if i < self.n_dense:
            self.dense(i, f, self.n_ff)
            return
        D, E, Fe = self.n_embd, self.n_expert, self.n_ff_exp
        self.copy(tn(T.FFN_GATE_INP, i), f + "gate.weight", (E, D))
        for out, w, shape in ((T.FFN_GATE_EXP, "w1", (Fe, D)), (T.FFN_DOWN_EXP, "w2", (D, Fe)),
                              (T.FFN_UP_EXP, "w3", (Fe, D))):
            self.stack(tn(out, i), f + "experts.{e}." + w + ".weight", E, shape, why="moe_intermediate_size",
                       note=f"stack of {E} experts")
        if self.expert_bias:
            self.copy(tn(T.FFN_EXP_PROBS_B, i, ".bias"), f + "expert_bias", (E,))
