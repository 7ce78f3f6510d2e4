"""RecurrentGemmaForCausalLM -> GGUF ``recurrent-gemma`` (no llama.cpp architecture:
docs/specs/more-hybrids.md §6.3's proposed names and keys).

Sources: transformers 5.24 ``models/recurrent_gemma`` (config configuration_recurrent_gemma.py:57-105, parameter names,
forward modeling_recurrent_gemma.py); docs/specs/more-hybrids.md §6.

Glossary: H = hidden_size, F = intermediate_size (the MLP is F/2 wide, modeling_recurrent_gemma.py:480), nh / nkv
attention heads of D = H / nh (configuration_recurrent_gemma.py:85 forces it), lru = lru_width, bw = lru / nh, K =
conv1d_width, W = attention_window_size.

HF tensor (numpy shape)                                GGUF tensor
model.embed_tokens.weight [V, H]                       token_embd.weight (tied output)
model.final_norm.weight [H]                            output_norm.weight, 1 + w folded (Gemma)
layers.i.temporal_pre_norm / channel_pre_norm [H]      blk.i.attn_norm / ffn_norm, 1 + w folded
mlp_block.gate_proj / up_proj [F/2, H] + bias          blk.i.ffn_gate / ffn_up (+ .bias)
mlp_block.down_proj [H, F/2] + bias                    blk.i.ffn_down (+ .bias)
recurrent: temporal_block.linear_x / linear_y [lru, H] + bias
                                                       blk.i.rglru_x / rglru_y (+ .bias)
           conv_1d.weight [lru, 1, K] + bias           blk.i.ssm_conv1d [lru, K] (squeezed) + .bias
           rg_lru.input_gate_weight [nh, bw, bw]       blk.i.rglru_gate_i, AS STORED: applied x_h . W[h]
           rg_lru.recurrent_gate_weight [nh, bw, bw]   blk.i.rglru_gate_a, as stored (row = input channel)
           rg_lru.{input,recurrent}_gate_bias [nh, bw] blk.i.rglru_gate_i.bias / rglru_gate_a.bias
           rg_lru.recurrent_param [lru]                blk.i.rglru_param (Lambda, as stored)
           linear_out [H, lru] + bias                  blk.i.ssm_out (+ .bias)
attention: temporal_block.{q,k,v}_proj (+ bias)        blk.i.attn_q / attn_k / attn_v (+ .bias), rows
                                                       as stored (HF rotates NEOX halves of the
                                                       first rot channels: no reorder)
           o_proj [H, nh D] + bias (always, modeling_recurrent_gemma.py:217)   blk.i.attn_output (+ .bias)

Keys: block / context / embedding counts, feed_forward_length = F / 2, head_count, head_count_kv,
key/value_length = D, rope.dimension_count = int(D partial_rotary_factor), rope.freq_base,
layernorm_rms_epsilon, attention.sliding_window = W, attention.recurrent_layers (block_types
cycled over the layers, configuration_recurrent_gemma.py:98-103), ssm.conv_kernel = K, final_logit_softcapping =
logits_soft_cap (Gemma-2's key; absent when null), ours rglru.width = lru, and embedding_scale =
bf16(sqrt(H)) (Granite's key, which the runtime's forward already multiplies the embedding by):
HF's normalizer is a bfloat16 buffer (modeling_recurrent_gemma.py:624, 671), and sqrt(H) unrounded puts a 96-wide model
at 1.9e-3 relative error (docs/specs/more-hybrids.md §6.4's trap; 2560 -> 50.5, 96 -> 9.8125).

The gate matrices are not transposed: the plan writes rows of source tensors and cannot swap
the last two axes, so a kernel reads W[h] as [in, out] (out_j = sum_i x_i W[h][i][j]).
"""
from __future__ import annotations

import math

import numpy as np

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.activation import ffn_act_kv
from toolkit.convert.base import Family
from toolkit.convert.encode import f32_to_bf16
from toolkit.convert.plan import KV, kv_f32, kv_u32
from toolkit.convert.config_keys import ConfigKeys
from toolkit.errors import InputError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_RECURRENT_GEMMA, GGUFValueType

_L = r"model\.layers\.\d+\."
_TYPES = ("recurrent", "attention")


def embedding_normalizer(n_embd: int) -> float:
    """HF's ``normalizer``: sqrt(n_embd) as a bfloat16 (round to nearest even), as a float."""
    bits = f32_to_bf16(np.array([math.sqrt(n_embd)], dtype=np.float32)).astype(np.uint32) << np.uint32(16)
    return float(bits.view(np.float32)[0])


class RecurrentGemmaFamily(Family):
    """RecurrentGemma (Griffin): RG-LRU recurrent blocks (a short conv, a gated diagonal linear
    recurrence, a GeLU gate) and local multi-query attention, GeGLU MLPs with biases."""

    hf_archs = ("RecurrentGemmaForCausalLM",)
    hf_configs = ("RecurrentGemmaConfig",)
    config_keys = ConfigKeys.of(
        "num_hidden_layers vocab_size hidden_size intermediate_size num_attention_heads lru_width attention_window_size "
        "conv1d_width logits_soft_cap rms_norm_eps rope_parameters block_types num_key_value_heads attention_bias "
        "tie_word_embeddings max_position_embeddings hidden_activation",
        irrelevant={"w_init_variance_scale": "weight initialisation only"},
        rope_types=("default",), aliases={"sliding_window": "attention_window_size", "layer_types": "layers_block_type"},
        rope_why="HF's RecurrentGemmaRotaryEmbedding raises for any other type (modeling_recurrent_gemma.py)")
    families = ("RecurrentGemma",)
    llama_cpp = False   # llama.cpp 0c1e570: "Model RecurrentGemmaForCausalLM is not supported"
    vllm = False        # not in vLLM's supported-models list as we read it
    arch = ARCH_RECURRENT_GEMMA
    known = (r"model\.embed_tokens\.weight", r"model\.final_norm\.weight", r"lm_head\.weight",
             _L + r"(?:temporal_pre_norm|channel_pre_norm)\.weight",
             _L + r"mlp_block\.(?:gate_proj|up_proj|down_proj)\.(?:weight|bias)",
             _L + r"temporal_block\.(?:linear_x|linear_y|linear_out|conv_1d)\.(?:weight|bias)",
             _L + r"temporal_block\.rg_lru\.(?:input_gate|recurrent_gate)_(?:weight|bias)",
             _L + r"temporal_block\.rg_lru\.recurrent_param",
             _L + r"temporal_block\.(?:q_proj|k_proj|v_proj|o_proj)\.(?:weight|bias)")

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.n_ctx = c.int("max_position_embeddings", default=8192)
        self.eps = c.eps("rms_norm_eps", default=1e-6)
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads", default=self.n_head)
        if self.n_head % self.n_head_kv:
            raise InputError(f"{c.path}: num_attention_heads {self.n_head} must be a multiple of num_key_value_heads "
                             f"{self.n_head_kv}")
        if self.n_embd % self.n_head:
            raise InputError(f"{c.path}: hidden_size {self.n_embd} must be a multiple of num_attention_heads "
                             f"{self.n_head} (head_dim is hidden_size / num_attention_heads)")
        self.head_dim = self.n_embd // self.n_head    # configuration_recurrent_gemma.py:85 ignores a saved head_dim
        self.lru = c.int("lru_width", default=self.n_embd)
        if self.lru % self.n_head:
            raise InputError(f"{c.path}: lru_width {self.lru} must be a multiple of num_attention_heads "
                             f"{self.n_head} (the RG-LRU gates are block-diagonal per head)")
        self.d_conv = c.int("conv1d_width", default=4)
        if not 2 <= self.d_conv <= 64:
            raise InputError(f"{c.path}: key 'conv1d_width' = {self.d_conv} must be in [2, 64]")
        self.window = c.int("attention_window_size", "sliding_window", default=2048)
        ff = c.int("intermediate_size")
        if ff % 2:
            raise InputError(f"{c.path}: key 'intermediate_size' = {ff} must be even (the MLP is half as wide)")
        self.n_ff = ff // 2
        cap = c.d.get("logits_soft_cap", 30.0)
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0):
            raise InputError(f"{c.path}: key 'logits_soft_cap' = {cap!r} must be a positive number or null")
        self.cap = None if cap is None else float(cap)
        self.attn_bias = c.flag("attention_bias", False)
        self.theta = c.rope_theta(10000.0)
        prf = c.rope("partial_rotary_factor", 0.5)
        if isinstance(prf, bool) or not isinstance(prf, (int, float)) or not 0 < prf <= 1:
            raise InputError(f"{c.path}: rope_parameters.partial_rotary_factor = {prf!r} must be in (0, 1]")
        self.n_rot = int(self.head_dim * prf)
        if self.n_rot % 2:
            raise InputError(f"{c.path}: int(head_dim {self.head_dim} x partial_rotary_factor {prf}) = {self.n_rot} "
                             f"must be even (RoPE pairs)")
        bt = c.d.get("block_types", ["recurrent", "recurrent", "attention"])
        if not isinstance(bt, list) or not bt or any(t not in _TYPES for t in bt):
            raise InputError(f"{c.path}: key 'block_types' must be a non-empty list of {', '.join(_TYPES)}")
        self.types = [bt[i % len(bt)] for i in range(self.n_layer)]

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def kv(self) -> list[KV]:
        key = self.key
        kv = [kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
              kv_u32(key(Keys.LLM.CONTEXT_LENGTH), self.n_ctx),
              kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
              kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), self.n_ff),
              kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
              kv_u32(key(Keys.Attention.HEAD_COUNT_KV), self.n_head_kv),
              kv_u32(key(Keys.Attention.KEY_LENGTH), self.head_dim),
              kv_u32(key(Keys.Attention.VALUE_LENGTH), self.head_dim),
              kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.n_rot),
              kv_f32(key(Keys.Rope.FREQ_BASE), self.theta),
              kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
              kv_u32(key(Keys.LLM.VOCAB_SIZE), self.n_vocab),
              kv_u32(key(Keys.Attention.SLIDING_WINDOW), self.window),
              KV(key(Keys.Attention.RECURRENT_LAYERS), [t == "recurrent" for t in self.types],
                 GGUFValueType.ARRAY, GGUFValueType.BOOL),
              kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
              kv_u32(key(Keys.RGLRU.WIDTH), self.lru),
              kv_f32(key(Keys.LLM.EMBEDDING_SCALE), embedding_normalizer(self.n_embd))]
        if self.cap is not None:
            kv.append(kv_f32(key(Keys.LLM.FINAL_LOGIT_SOFTCAPPING), self.cap))
        # the MLP's and the recurrent block's y-branch act (RecurrentGemmaMlp / RecurrentGemmaRecurrentBlock
        # ACT2FN[hidden_activation]); written only when not gelu_pytorch_tanh
        kv += ffn_act_kv(self.cfg.path, self.cfg.d, key, attr="hidden_activation", default="gelu_pytorch_tanh")
        return kv

    def build(self):
        self.read_hparams()
        self.plan.kv += self.kv()
        H = self.n_embd
        self.copy(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, H))
        for i in range(self.n_layer):
            lp = f"model.layers.{i}."
            self._norm(tn(T.ATTN_NORM, i), lp + "temporal_pre_norm.weight")
            if self.types[i] == "recurrent":
                self._recurrent(i, lp + "temporal_block.")
            else:
                self._attention(i, lp + "temporal_block.")
            self._norm(tn(T.FFN_NORM, i), lp + "channel_pre_norm.weight")
            self._mlp(i, lp + "mlp_block.")
        self._norm(tn(T.OUTPUT_NORM), "model.final_norm.weight")
        self.tied_output("model.embed_tokens.weight", "lm_head.weight", self.n_vocab, H, True)
        self.check_leftovers()
        return self.plan

    def _norm(self, out: str, src: str) -> None:
        self.copy(out, src, (self.n_embd,), op="plus_one", note="1 + w (Gemma RMSNorm)")

    def _linear(self, out: str, src: str, n_out: int, n_in: int, why: str = "") -> None:
        self.copy(tn(out), src + ".weight", (n_out, n_in), why=why)
        self.copy(tn(out, suffix=".bias"), src + ".bias", (n_out,), why=why)

    def _mlp(self, i: int, m: str) -> None:
        H, F = self.n_embd, self.n_ff
        why = "the MLP is intermediate_size / 2 wide"
        self._linear(T.FFN_GATE.format(bid=i), m + "gate_proj", F, H, why)
        self._linear(T.FFN_UP.format(bid=i), m + "up_proj", F, H, why)
        self._linear(T.FFN_DOWN.format(bid=i), m + "down_proj", H, F, why)

    def _recurrent(self, i: int, r: str) -> None:
        H, lru, K, nh = self.n_embd, self.lru, self.d_conv, self.n_head
        bw = lru // nh
        why = "lru_width"
        self._linear(T.RGLRU_X.format(bid=i), r + "linear_x", lru, H, why)
        self._linear(T.RGLRU_Y.format(bid=i), r + "linear_y", lru, H, why)
        self.copy(tn(T.SSM_CONV1D, i), r + "conv_1d.weight", (lru, 1, K), (lru, K), note="[lru,1,K] -> [lru,K]",
                  why="lru_width, conv1d_width")
        self.copy(tn(T.SSM_CONV1D, i, ".bias"), r + "conv_1d.bias", (lru,), why=why)
        why = "num_attention_heads blocks of lru_width / num_attention_heads"
        self.copy(tn(T.RGLRU_GATE_I, i), r + "rg_lru.input_gate_weight", (nh, bw, bw), why=why,
                  note="as stored: x_h . W[h]")
        self.copy(tn(T.RGLRU_GATE_I, i, ".bias"), r + "rg_lru.input_gate_bias", (nh, bw), why=why)
        self.copy(tn(T.RGLRU_GATE_A, i), r + "rg_lru.recurrent_gate_weight", (nh, bw, bw), why=why,
                  note="as stored: x_h . W[h]")
        self.copy(tn(T.RGLRU_GATE_A, i, ".bias"), r + "rg_lru.recurrent_gate_bias", (nh, bw), why=why)
        self.copy(tn(T.RGLRU_PARAM, i), r + "rg_lru.recurrent_param", (lru,), why=why)
        self._linear(T.SSM_OUT.format(bid=i), r + "linear_out", H, lru, "lru_width")

    def _attention(self, i: int, a: str) -> None:
        H, D = self.n_embd, self.head_dim
        rows = {"q": self.n_head * D, "k": self.n_head_kv * D, "v": self.n_head_kv * D}
        names = {"q": T.ATTN_Q, "k": T.ATTN_K, "v": T.ATTN_V}
        for p, n in rows.items():
            self.copy(tn(names[p], i), a + f"{p}_proj.weight", (n, H))
            if self.attn_bias:
                self.copy(tn(names[p], i, ".bias"), a + f"{p}_proj.bias", (n,), why="attention_bias")
        self._linear(T.ATTN_OUT.format(bid=i), a + "o_proj", H, self.n_head * D, "o_proj always has a bias")
