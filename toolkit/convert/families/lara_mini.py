"""LaraMiniForCausalLM -> GGUF ``lara-mini`` (llama.cpp 0c1e570 has no Lara-Mini: the names and keys
proposed by docs/specs/more-hybrids.md §8.3, i.e. llama.cpp's ``qwen35moe`` layout).

Glossary: D = hidden_size, V = vocab rows, hd = head_dim, Hq / Hkv = num_attention_heads /
num_key_value_heads; gated delta net: Hk / Hv = linear_num_key_heads / linear_num_value_heads,
Dk / Dv = linear_key_head_dim / linear_value_head_dim, K = linear_conv_kernel_dim, C = 2 Hk Dk +
Hv Dv (the conv channels); MoE: E = num_experts, F = moe_intermediate_size, Fs =
shared_expert_intermediate_size; W = sliding_window.

Layers (``layer_types``; default period 5: linear, sliding, linear, full, sliding):
- ``linear_attention``: the Qwen3.5 gated delta net; v-head h reads k-head h // (Hv / Hk) (HF's
  grouped order, kept: the row's gdn_head_tiled = 0); the gated norm's epsilon is rms_norm_eps.
- ``sliding_attention``: attention (q / k RMSNorm per head, no output gate) with NeoX RoPE over the
  whole head and a window of W (``attention.sliding_window`` / ``_pattern``).
- ``full_attention``: the same without RoPE (NoPE; the arch fixes "RoPE on the sliding layers only").
Every layer: MoE FFN (softmax router, top-k, renormalised unless ``norm_topk_prob`` is false: then
``expert_weights_norm = false``, llama.cpp's key) plus a shared SwiGLU expert added without a gate
(no ffn_gate_inp_shexp).  ``attention_bias``: q/k/v/o_proj biases as blk.i.attn_{q,k,v,output}.bias
(llama.cpp's names), added before the q / k norms as HF does.
``hidden_act`` (default silu): the GDN conv's activation and the experts' / shared expert's gate, our
``lara-mini.ssm.activation`` / ``lara-mini.feed_forward.activation`` when not silu (the gated norm's is silu).
Every norm weight is a plain multiplier (modeling_lara_mini.py:52-68): written as stored, no +1 (unlike qwen35).

HF tensor (saved name; numpy shape)                    GGUF tensor
model.embed_tokens.weight [V, D]                       token_embd.weight
model.layers.i.input_layernorm.weight [D]              blk.i.attn_norm.weight
model.layers.i.post_attention_layernorm.weight [D]     blk.i.ffn_norm.weight
GDN layer, linear_attn.:
  in_proj.weight [C + Hv Dv + 2 Hv, D]                 rows [q k v | z | b | a] cut into
    (rows [q | k | v | z | b | a])                     blk.i.attn_qkv [C, D], attn_gate [Hv Dv, D],
                                                       ssm_beta [Hv, D], ssm_alpha [Hv, D]
  conv1d.weight [C, 1, K]                              blk.i.ssm_conv1d.weight [C, K] (squeezed)
  A_log [Hv]                                           blk.i.ssm_a = -exp(A_log)
  dt_bias [Hv]                                         blk.i.ssm_dt.bias
  out_norm.weight [Dv]                                 blk.i.ssm_norm.weight
  out_proj.weight [D, Hv Dv]                           blk.i.ssm_out.weight
attention layer, self_attn.:
  {q,k,v,o}_proj.weight                                blk.i.attn_{q,k,v,output}.weight
  {q,k}_norm.weight [hd]                               blk.i.attn_{q,k}_norm.weight
MoE, mlp.:
  gate.weight [E, D]                                   blk.i.ffn_gate_inp.weight
  experts.gate_up_proj [E, 2F, D]                      blk.i.ffn_gate_exps / ffn_up_exps [E, F, D] (rows :F / F:)
  experts.down_proj [E, D, F]                          blk.i.ffn_down_exps.weight
  shared_expert.{gate,up,down}_proj.weight             blk.i.ffn_{gate,up,down}_shexp.weight
model.norm.weight [D]                                  output_norm.weight
lm_head.weight [V, D]                                  output.weight (omitted when tied)
"""
from __future__ import annotations

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.activation import ffn_act_kv, ssm_act_kv
from toolkit.convert.families.qwen_gdn import MOE, QwenGDNFamily
from toolkit.convert.plan import KV, Segment, kv_f32, kv_u32
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.rope_scaling import SCALED_ROPE_TYPES, SCALED_WHY, rope_scaling_kv
from toolkit.errors import InputError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_LARA_MINI, GGUFValueType

_L = r"model\.layers\.\d+\."
_TYPES = ("linear_attention", "sliding_attention", "full_attention")
_DEFAULT_PERIOD = ("linear_attention", "sliding_attention", "linear_attention", "full_attention", "sliding_attention")


class LaraMiniFamily(QwenGDNFamily):
    hf_archs = ("LaraMiniForCausalLM",)
    hf_configs = ("LaraMiniConfig",)
    config_keys = ConfigKeys.of(
        "vocab_size hidden_size num_hidden_layers num_attention_heads num_key_value_heads max_position_embeddings "
        "rms_norm_eps tie_word_embeddings rope_parameters head_dim linear_conv_kernel_dim linear_key_head_dim "
        "linear_value_head_dim linear_num_key_heads linear_num_value_heads moe_intermediate_size "
        "shared_expert_intermediate_size num_experts_per_tok num_experts layer_types sliding_window attention_bias "
        "norm_topk_prob hidden_act",
        rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY)
    families = ("Lara-Mini",)
    llama_cpp = False   # llama.cpp 0c1e570: "Model LaraMiniForCausalLM is not supported" (docs/specs/more-hybrids.md §8.6)
    vllm = False        # not in vLLM's supported-models list as we read it
    arch = ARCH_LARA_MINI
    reorder_v = False   # HF's grouped v-heads kept (gdn_head_tiled = 0)
    known = (
        r"model\.embed_tokens\.weight", r"model\.norm\.weight", r"lm_head\.weight",
        _L + r"(input_layernorm|post_attention_layernorm)\.weight",
        _L + r"linear_attn\.(in_proj\.weight|A_log|dt_bias|conv1d\.weight|out_norm\.weight|out_proj\.weight)",
        _L + r"self_attn\.(q|k|v|o)_proj\.(weight|bias)", _L + r"self_attn\.(q|k)_norm\.weight",
    ) + tuple(_L + m for m in MOE if "shared_expert_gate" not in m) + (_L + r"mlp\.gate\.weight",)

    def _layer_types(self) -> list[str]:
        c, L = self.cfg, self.n_layer
        lt = c.d.get("layer_types")
        if lt is None:
            return [_DEFAULT_PERIOD[i % 5] for i in range(L)]
        if not isinstance(lt, list) or len(lt) != L or any(x not in _TYPES for x in lt):
            raise InputError(f"{c.path}: key 'layer_types' must list {L} of {', '.join(_TYPES)}")
        return list(lt)

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.check_layers(c, "model.", self.n_layer)
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("rms_norm_eps", default=1e-6)
        self.read_attention(c, "Lara-Mini attention")
        self.head_dim = c.int("head_dim", default=128)
        if self.n_head % self.n_head_kv:
            raise InputError(f"{c.path}: num_key_value_heads {self.n_head_kv} must divide num_attention_heads {self.n_head}")
        self.read_gdn(c)
        self.read_moe(c)
        rp = c.d.get("rope_parameters") or {}
        if not isinstance(rp, dict):
            raise InputError(f"{c.path}: key 'rope_parameters' must be an object")
        theta = rp.get("rope_theta", 10000.0)
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise InputError(f"{c.path}: rope_parameters.rope_theta = {theta!r} must be a positive number")
        self.rope_theta = float(theta)
        self.window = c.int("sliding_window", default=512)
        self.attn_bias = c.flag("attention_bias", False)      # q/k/v/o_proj biases
        self.layer_types = self._layer_types()

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def _keys(self) -> None:
        key, p, lt = self.key, self.plan, self.layer_types
        p.kv += [
            kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), self.cfg.int("max_position_embeddings", default=131072)),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
            kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
            kv_u32(key(Keys.Attention.HEAD_COUNT_KV), self.n_head_kv),
            kv_f32(key(Keys.Rope.FREQ_BASE), self.rope_theta),
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
            kv_u32(key(Keys.LLM.EXPERT_COUNT), self.n_expert),
            kv_u32(key(Keys.LLM.EXPERT_USED_COUNT), self.n_expert_used),
            kv_u32(key(Keys.Attention.KEY_LENGTH), self.head_dim),
            kv_u32(key(Keys.Attention.VALUE_LENGTH), self.head_dim),
            kv_u32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), self.n_ff_exp),
            kv_u32(key(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH), self.n_ff_shexp),
            *self.gdn_kv(),
            KV(key(Keys.Attention.RECURRENT_LAYERS), [t == "linear_attention" for t in lt],
               GGUFValueType.ARRAY, GGUFValueType.BOOL),
            kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.head_dim),
            kv_u32(key(Keys.Attention.SLIDING_WINDOW), self.window),
            KV(key(Keys.Attention.SLIDING_WINDOW_PATTERN), [t == "sliding_attention" for t in lt],
               GGUFValueType.ARRAY, GGUFValueType.BOOL),
            *self.moe_norm_kv(),
            *rope_scaling_kv(self.cfg, key),    # llama.cpp's rope.scaling.*: the sliding layers' RoPE (the full ones NoPE)
        ]
        # hidden_act: the GDN conv's act (causal_conv1d_fn activation=), the routed experts' and the shared
        # expert's gate (LaraMiniExperts / LaraMiniMLP ACT2FN[hidden_act]); the gated norm's is "silu", fixed
        # (LaraMiniRMSNormGated).  Each key written only when not silu: default files unchanged
        p.kv += ffn_act_kv(self.cfg.path, self.cfg.d, key) + ssm_act_kv(self.cfg.path, self.cfg.d, key)

    def _gdn(self, i: int, g: str) -> None:
        D, nk, nv, dk, dv = self.n_embd, self.n_k, self.n_v, self.d_k, self.d_v
        C, Vd = 2 * nk * dk + nv * dv, nv * dv
        rows = C + Vd + 2 * nv
        t = self.hf.tensors.get(g + "in_proj.weight")
        if t is not None and (len(t.shape) != 2 or t.shape != (rows, D)):
            raise InputError(f"{t.path}: fused tensor {t.name!r} has shape {list(t.shape)}, config.json implies "
                             f"[{rows}, {D}] (rows q, k: 2 x {nk * dk}, v, z: 2 x {Vd}, b, a: 2 x {nv})")
        t = self.take(g + "in_proj.weight", (rows, D))
        self.emit(tn(T.ATTN_QKV, i), (C, D), [Segment(t, 0, C)], note="rows [0, C) of in_proj (q | k | v)")
        self.emit(tn(T.ATTN_GATE, i), (Vd, D), [Segment(t, C, Vd)], note="z rows of in_proj")
        self.emit(tn(T.SSM_BETA, i), (nv, D), [Segment(t, C + Vd, nv)], note="b rows of in_proj")
        self.emit(tn(T.SSM_ALPHA, i), (nv, D), [Segment(t, C + Vd + nv, nv)], note="a rows of in_proj")
        self.copy(tn(T.SSM_A, i, suffix=""), g + "A_log", (nv,), op="neg_exp", note="A = -exp(A_log)")
        self.copy(tn(T.SSM_DT, i, suffix=".bias"), g + "dt_bias", (nv,))
        self.copy(tn(T.SSM_CONV1D, i), g + "conv1d.weight", (C, 1, self.d_conv), out_shape=(C, self.d_conv),
                  note="squeeze", why="linear_conv_kernel_dim")
        self.copy(tn(T.SSM_NORM, i), g + "out_norm.weight", (dv,), note="plain multiplier (no +1)")
        self.copy(tn(T.SSM_OUT, i), g + "out_proj.weight", (D, Vd))

    def _attention(self, i: int, a: str) -> None:
        D, hd = self.n_embd, self.head_dim
        self.copy(tn(T.ATTN_Q, i), a + "q_proj.weight", (self.n_head * hd, D))
        self.copy(tn(T.ATTN_K, i), a + "k_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_V, i), a + "v_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_OUT, i), a + "o_proj.weight", (D, self.n_head * hd))
        self.copy(tn(T.ATTN_Q_NORM, i), a + "q_norm.weight", (hd,), note="plain multiplier (no +1)")
        self.copy(tn(T.ATTN_K_NORM, i), a + "k_norm.weight", (hd,), note="plain multiplier (no +1)")
        if self.attn_bias:
            for out, src, n in ((T.ATTN_Q, "q_proj", self.n_head * hd), (T.ATTN_K, "k_proj", self.n_head_kv * hd),
                                (T.ATTN_V, "v_proj", self.n_head_kv * hd), (T.ATTN_OUT, "o_proj", D)):
                self.copy(tn(out, i, ".bias"), a + src + ".bias", (n,), why="attention_bias is true")

    def build(self):
        self.read_hparams()
        self._keys()
        D = self.n_embd
        self.copy(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, D))
        for i, lt in enumerate(self.layer_types):
            pre = f"model.layers.{i}."
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (D,))
            if lt == "linear_attention":
                self._gdn(i, pre + "linear_attn.")
            else:
                self._attention(i, pre + "self_attn.")
            self.copy(tn(T.FFN_NORM, i), pre + "post_attention_layernorm.weight", (D,))
            self.moe(i, pre + "mlp.", shared_gate=False)
        self.copy(tn(T.OUTPUT_NORM), "model.norm.weight", (D,))
        self.tied_output("model.embed_tokens.weight", "lm_head.weight", self.n_vocab, D, tie_default=True)
        self.check_leftovers()
        return self.plan
