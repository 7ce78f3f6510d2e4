"""Lfm3ForCausalLM -> GGUF ``lfm3`` (no llama.cpp architecture: llama.cpp's ``lfm2`` keys and
names, plus what LFM3 adds; README "LFM3 layout", docs/specs/more-hybrids.md §4).

Sources: transformers 5.24 ``models/lfm3`` (config, parameter names, forward); llama.cpp
``conversion/lfm2.py`` (the lfm2 keys and names followed here).

Glossary: D = hidden_size, K = conv_L_cache, H / Hkv attention heads of hd = head_dim,
F = intermediate_size (as is: no LFM2 auto-adjust), W = sliding_window.

HF tensor (numpy shape)                                 GGUF tensor
model.embed_tokens.weight [V, D]                        token_embd.weight (the output too: tied)
model.embedding_norm.weight [D] (the FINAL norm)        token_embd_norm.weight (lfm2's name)
layers.i.operator_norm / ffn_norm [D]                   blk.i.attn_norm / ffn_norm
layers.i.post_operator_norm / post_ffn_norm [D]         blk.i.post_attention_norm / post_ffw_norm (sandwich)
conv layer: conv.in_proj [3D, D] (B | C | x)            blk.i.shortconv.in_proj
            conv.conv [D, 1, K]                         blk.i.shortconv.conv [D, K] (squeezed)
            conv.out_proj [D, D]                        blk.i.shortconv.out_proj
attention:  self_attn.{q,k,v,o}_proj                    blk.i.attn_{q,k,v}, attn_output
            self_attn.{q,k}_norm [hd]                   blk.i.attn_{q,k}_norm
            self_attn.gate_proj [H, D] (per-head gate)  blk.i.attn_gate
            self_attn.{q,k,v,o}_proj.bias               blk.i.attn_{q,k,v,output}.bias (attention_bias)
dense FFN:  feed_forward.w1 / w3 / w2                   blk.i.ffn_gate / ffn_up / ffn_down
lm_head.weight [V, D] (tie_word_embeddings false)       output.weight

Keys: lfm2's (per-layer head_count_kv with 0 on conv layers, shortconv.l_cache, ...), then
``attention.sliding_window`` = W and ``attention.sliding_window_pattern`` (llama.cpp's),
``rope.freq_base`` (the full layers' θ), ``rope.freq_base_swa`` (the sliding layers', llama.cpp's
gemma name), ``rope.dimension_count`` = hd, and ours ``rope.proportional_dimension_count`` =
2 int(prf hd / 2): the full layers' "proportional" RoPE rotates the NEOX pairs (i, i + hd/2),
i < that / 2, at θ^(-2i/hd) (written only when it is not hd).  RoPE scaling of the full layers
(``rope_parameters.full_attention`` linear / yarn, or proportional with ``factor``: linear) as
llama.cpp's ``rope.scaling.*``, which llama.cpp applies to the non-sliding layers only; the sliding
layers' scaling is refused (llama.cpp has no key for it).  docs/specs/more-hybrids.md's proposal of a
``rope_freqs`` tensor (llama.cpp's Gemma-4 encoding) is not followed: this writer streams source
tensors only.
"""
from __future__ import annotations

from types import SimpleNamespace

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.families.lfm2 import LFM2Family
from toolkit.convert.plan import KV, kv_f32, kv_u32
from toolkit.convert.rope_scaling import SCALED_WHY, rope_scaling_kv

from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_LFM3, GGUFValueType

_L = r"model\.layers\.\d+\."
_TYPES = ("conv", "sliding_attention", "full_attention")


class LFM3Family(LFM2Family):
    """LFM3: LFM2's gated short conv, full and sliding-window attention (per-kind RoPE, q/k
    RMSNorm, an optional per-head sigmoid gate), optional sandwich norms, dense SwiGLU."""

    hf_archs = ("Lfm3ForCausalLM",)
    hf_configs = ("Lfm3Config",)
    config_keys = ConfigKeys.of(
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
        "max_position_embeddings norm_eps tie_word_embeddings rope_parameters conv_L_cache layer_types head_dim "
        "sliding_window use_sandwich_norm use_attention_gate conv_bias attention_bias",
        rope_types=("default", "proportional", "linear", "yarn"), rope_why=SCALED_WHY, aliases={"rms_norm_eps": "norm_eps"})
    families = ("LFM3",)
    llama_cpp = False   # llama.cpp 0c1e570 has no lfm3 (nor does it load this file as lfm2: sliding window, gates)
    vllm = False        # not in vLLM's supported-models list as we read it
    arch = ARCH_LFM3
    known = (r"model\.embed_tokens\.weight", r"model\.embedding_norm\.weight", r"lm_head\.weight",
             _L + r"(?:operator_norm|ffn_norm|post_operator_norm|post_ffn_norm)\.weight",
             _L + r"conv\.(?:in_proj|conv|out_proj)\.(?:weight|bias)",
             _L + r"self_attn\.(?:q_proj|k_proj|v_proj|o_proj|q_norm|k_norm|gate_proj)\.weight",
             _L + r"self_attn\.[qkvo]_proj\.bias",      # attention_bias
             _L + r"feed_forward\.w[123]\.weight")

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.n_ctx = c.int("max_position_embeddings", default=128000)
        self.eps = c.eps("norm_eps", "rms_norm_eps", default=1e-5)
        self.d_conv = c.int("conv_L_cache", default=7)
        if not 2 <= self.d_conv <= 64:
            raise InputError(f"{c.path}: key 'conv_L_cache' = {self.d_conv} must be in [2, 64]")
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads", default=self.n_head)
        if self.n_head % self.n_head_kv:
            raise InputError(f"{c.path}: num_attention_heads {self.n_head} must be a multiple of num_key_value_heads "
                             f"{self.n_head_kv}")
        self.head_dim = c.int("head_dim", default=self.n_embd // self.n_head)
        if self.head_dim % 2:
            raise InputError(f"{c.path}: key 'head_dim' = {self.head_dim} must be even (RoPE pairs)")
        self.window = c.int("sliding_window", default=256)    # < 1: "out of range (must be >= 1)"
        if self.window > 1 << 24:   # the runtime's bound (toolkit.arch.readers.read_sliding_window)
            raise InputError(f"{c.path}: key 'sliding_window' = {self.window} is out of range (must be <= {1 << 24})")
        self.sandwich = c.flag("use_sandwich_norm", True)
        self.gate = c.flag("use_attention_gate", True)
        self.conv_bias = c.flag("conv_bias", False)   # the short conv's in_proj / conv / out_proj biases (LFM2's path)
        self.types = self._layer_types()
        self.attn_layers = [i for i, t in enumerate(self.types) if t != "conv"]
        self.scaling = []      # rope.scaling.* of the full layers (_rope)
        self.theta_full, self.prop_dims = self._rope("full_attention", 1000000.0)
        self.theta_swa, swa_dims = self._rope("sliding_attention", 10000.0)
        if swa_dims != self.head_dim:
            raise UnsupportedError(f"{c.path}: rope_parameters.sliding_attention must rotate the whole head")
        self.n_ff = c.int("intermediate_size")

    def _layer_types(self) -> list[str]:
        """``layer_types`` (conv / sliding_attention / full_attention), or Lfm3Config's default:
        full attention at i % 4 == 2, sliding at i % 4 == 0 (i > 0), else conv."""
        c = self.cfg
        t = c.d.get("layer_types")
        if t is None:
            return ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv"
                    for i in range(self.n_layer)]
        if not isinstance(t, list) or len(t) != self.n_layer or any(x not in _TYPES for x in t):
            raise InputError(f"{c.path}: key 'layer_types' must list {self.n_layer} of {', '.join(_TYPES)}")
        return list(t)

    def _rope(self, kind: str, theta_default: float) -> tuple[float, int]:
        """(θ, rotated dims) of a layer kind's ``rope_parameters[kind]``: "default", "linear" and
        "yarn" rotate the whole head (Lfm3's apply_rotary_pos_emb takes the whole head);
        "proportional" the pairs i < int(partial_rotary_factor hd / 2), its inv_freq divided by
        ``factor`` (linear scaling).  The full layers' linear / yarn / proportional factor become
        ``rope.scaling.*`` (``self.scaling``: llama.cpp applies them to the non-sliding layers);
        the sliding layers take none (llama.cpp's rope.freq_scale_swa has no key)."""
        c = self.cfg
        rps = c.d.get("rope_parameters") or {}
        if not isinstance(rps, dict):
            raise InputError(f"{c.path}: key 'rope_parameters' must be an object")
        rp = rps.get(kind, {})
        if not isinstance(rp, dict):
            raise InputError(f"{c.path}: rope_parameters.{kind} must be an object")
        theta = rp.get("rope_theta", theta_default)
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise InputError(f"{c.path}: rope_parameters.{kind}.rope_theta = {theta!r} must be a positive number")
        rt = rp.get("rope_type", "proportional" if kind == "full_attention" else "default")
        factor = rp.get("factor", 1.0) if rt == "proportional" else None
        scaled = rt in ("linear", "yarn") or (factor is not None and factor != 1.0)
        if scaled and kind != "full_attention":
            raise UnsupportedError(f"{c.path}: key 'rope_parameters.{kind}.rope_type' = {rt!r} with scaling is not "
                                   f"supported (only on full_attention: llama.cpp's rope.scaling.* keys scale the "
                                   f"non-sliding layers, the sliding ones have no key)")
        if rt in ("linear", "yarn"):
            if rp.get("partial_rotary_factor", 1.0) != 1.0:   # HF: inv_freq shorter than the head, a shape error
                raise UnsupportedError(f"{c.path}: key 'rope_parameters.{kind}.partial_rotary_factor' = "
                                       f"{rp['partial_rotary_factor']!r} is not supported with {rt} (only 1: Lfm3 "
                                       f"rotates the whole head)")
            self.scaling = rope_scaling_kv(SimpleNamespace(path=c.path, d={**c.d, "rope_parameters": rp}), self.key)
            return float(theta), self.head_dim
        if rt == "default":
            return float(theta), self.head_dim
        if rt != "proportional":
            raise UnsupportedError(f"{c.path}: rope_parameters.{kind}.rope_type = {rt!r} is not supported "
                                   f"(default, proportional, linear, yarn)")
        prf = rp.get("partial_rotary_factor", 1.0)
        if isinstance(prf, bool) or not isinstance(prf, (int, float)) or not 0 <= prf <= 1:
            raise InputError(f"{c.path}: rope_parameters.{kind}.partial_rotary_factor = {prf!r} must be in [0, 1]")
        if scaled:    # HF's _compute_proportional_rope_parameters: inv_freq /= factor, linear scaling
            lin = {"rope_type": "linear", "factor": factor}
            self.scaling = rope_scaling_kv(SimpleNamespace(path=c.path, d={"rope_parameters": lin}), self.key)
        return float(theta), 2 * int(prf * self.head_dim // 2)

    def kv(self) -> list[KV]:
        key, attn = self.key, set(self.attn_layers)
        kv = [kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
              kv_u32(key(Keys.LLM.CONTEXT_LENGTH), self.n_ctx),
              kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
              kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), self.n_ff),
              kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
              KV(key(Keys.Attention.HEAD_COUNT_KV), [self.n_head_kv if i in attn else 0 for i in range(self.n_layer)],
                 GGUFValueType.ARRAY, GGUFValueType.INT32),
              kv_u32(key(Keys.Attention.KEY_LENGTH), self.head_dim),
              kv_u32(key(Keys.Attention.VALUE_LENGTH), self.head_dim),
              kv_f32(key(Keys.Rope.FREQ_BASE), self.theta_full),
              kv_f32(key(Keys.Rope.FREQ_BASE_SWA), self.theta_swa),
              kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.head_dim),
              kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
              kv_u32(key(Keys.LLM.VOCAB_SIZE), self.n_vocab),
              kv_u32(key(Keys.ShortConv.L_CACHE), self.d_conv),
              KV(key(Keys.Attention.LAYER_INDICES), sorted(attn), GGUFValueType.ARRAY, GGUFValueType.INT32),
              kv_u32(key(Keys.Attention.SLIDING_WINDOW), self.window),
              KV(key(Keys.Attention.SLIDING_WINDOW_PATTERN), [t == "sliding_attention" for t in self.types],
                 GGUFValueType.ARRAY, GGUFValueType.BOOL)]
        if self.prop_dims != self.head_dim:
            kv.append(kv_u32(key(Keys.Rope.PROPORTIONAL_DIMS), self.prop_dims))
        return kv + self.scaling

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
            if self.sandwich:
                self.copy(tn(T.ATTN_POST_NORM, i), lp + "post_operator_norm.weight", (D,), why="use_sandwich_norm")
                self.copy(tn(T.FFN_POST_NORM, i), lp + "post_ffn_norm.weight", (D,), why="use_sandwich_norm")
            self.ffn(i, lp + "feed_forward.")
        self.copy(tn(T.TOKEN_EMBD_NORM), "model.embedding_norm.weight", (D,))
        self._output()
        self.check_leftovers()
        return self.plan

    def _attention(self, i: int, a: str) -> None:
        D, hd = self.n_embd, self.head_dim
        self.copy(tn(T.ATTN_Q, i), a + "q_proj.weight", (self.n_head * hd, D))
        self.copy(tn(T.ATTN_K, i), a + "k_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_V, i), a + "v_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_OUT, i), a + "o_proj.weight", (D, self.n_head * hd))
        self.copy(tn(T.ATTN_Q_NORM, i), a + "q_norm.weight", (hd,))
        self.copy(tn(T.ATTN_K_NORM, i), a + "k_norm.weight", (hd,))
        if self.gate:
            self.copy(tn(T.ATTN_GATE, i), a + "gate_proj.weight", (self.n_head, D), why="use_attention_gate")
        if self.cfg.flag("attention_bias", False):   # Lfm3Attention: q/k/v_proj (before q/k_norm) and o_proj biases
            for out, src, n in ((T.ATTN_Q, "q_proj", self.n_head * hd), (T.ATTN_K, "k_proj", self.n_head_kv * hd),
                                (T.ATTN_V, "v_proj", self.n_head_kv * hd), (T.ATTN_OUT, "o_proj", D)):
                self.copy(tn(out, i, ".bias"), a + src + ".bias", (n,), why="attention_bias is true")
