"""MiniMaxForCausalLM (and the remote-code MiniMaxText01ForCausalLM / MiniMaxM1ForCausalLM) ->
GGUF ``minimax-01`` (llama.cpp's names and keys; docs/specs/more-hybrids.md §5).

Sources: transformers 5.24 ``models/minimax`` (config keys, saved names, forward); llama.cpp
0c1e570 ``conversion/minimax.py`` and ``src/models/minimax-01.cpp`` (names and keys followed).

Glossary: D = hidden_size, nh / nkv heads of hd = head_dim, F = intermediate_size (the expert
width), E = num_local_experts.

HF tensor (numpy shape)                              GGUF tensor
model.embed_tokens.weight [V, D]                     token_embd.weight
layers.i.input_layernorm / post_attention_layernorm  blk.i.attn_norm / blk.i.ffn_norm
lightning: self_attn.qkv_proj [3 nh hd, D]           blk.i.attn_qkv (unchanged: per head [q_h | k_h | v_h])
           self_attn.output_gate [nh hd, D]          blk.i.attn_gate
           self_attn.norm [nh hd]                    blk.i.attn_norm_2
           self_attn.out_proj [D, nh hd]             blk.i.attn_output
           slope_rate, query_decay, key_decay,       (derived constants: dropped)
           diagonal_decay
attention: self_attn.{q,k,v,o}_proj                  blk.i.attn_{q,k,v,output} (NeoX RoPE: no reorder)
block_sparse_moe.gate [E, D]                         blk.i.ffn_gate_inp
block_sparse_moe.experts.e.w1 / w3 [F, D]            blk.i.ffn_gate_exps / ffn_up_exps [E, F, D] (stacked)
block_sparse_moe.experts.e.w2 [D, F]                 blk.i.ffn_down_exps [E, D, F]
model.norm.weight / lm_head.weight                   output_norm.weight / output.weight

Keys: llama.cpp's (``residual_scale`` = the α all branches share, ``rope.dimension_count``,
``expert_count`` ...), and ``attention.recurrent_layers`` written from ``layer_types`` (llama.cpp's
loader otherwise assumes attention on every 8th layer).  ``rope.dimension_count`` is what
transformers 5.24 rotates: all ``head_dim`` channels, whatever ``rotary_dim`` says (README
"MiniMax-Text-01").  Residual factors: h = α x + β y with x the NORMED input; when the three
branches' α differ, or any β is not 1 (llama.cpp's single ``residual_scale`` cannot say so), ours
``minimax-01.residual_alpha`` / ``residual_beta`` = [linear, full, mlp] are written instead of
``residual_scale``, so that llama.cpp refuses the file rather than run another model.
HF ``sliding_window`` (set: every full_attention layer attends the last W keys, itself included):
``attention.sliding_window`` = W and ``attention.sliding_window_pattern`` true on those layers, written
only when set (llama.cpp's keys; its minimax-01 graph was not checked to read them).
"""
from __future__ import annotations

import numpy as np

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.activation import ffn_act_kv
from toolkit.convert.plan import KV, kv_arr_f32, kv_f32, kv_u32
from toolkit.convert.st_reader import DTYPES, ShardReader
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.rope_scaling import SCALED_ROPE_TYPES, SCALED_WHY, rope_scaling_kv
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_MINIMAX, MINIMAX_RESIDUAL_ALPHA, MINIMAX_RESIDUAL_BETA, GGUFValueType

_L = r"model\.layers\.\d+\."
_TYPES = ("linear_attention", "full_attention")
# (transformers 5.24 key, remote-code key), per factor, in the order [linear, full, mlp]
_ALPHA = (("linear_attn_alpha_factor", "layernorm_linear_attention_alpha"),
          ("full_attn_alpha_factor", "layernorm_full_attention_alpha"),
          ("mlp_alpha_factor", "layernorm_mlp_alpha"))
_BETA = (("linear_attn_beta_factor", "layernorm_linear_attention_beta"),
         ("full_attn_beta_factor", "layernorm_full_attention_beta"),
         ("mlp_beta_factor", "layernorm_mlp_beta"))


class MiniMaxFamily(Family):
    """MiniMax-Text-01: lightning (linear) attention layers and softmax attention layers, a
    softmax top-k MoE FFN on every layer, residuals on the normed input scaled by α / β."""

    hf_archs = ("MiniMaxForCausalLM", "MiniMaxText01ForCausalLM", "MiniMaxM1ForCausalLM")
    hf_configs = ("MiniMaxConfig",)
    config_keys = ConfigKeys.of(
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads head_dim "
        "max_position_embeddings rms_norm_eps tie_word_embeddings num_experts_per_tok num_local_experts rope_parameters "
        "layer_types full_attn_alpha_factor full_attn_beta_factor linear_attn_alpha_factor linear_attn_beta_factor "
        "mlp_alpha_factor mlp_beta_factor hidden_act sliding_window",
        irrelevant={"block_size": "the block length of HF's lightning-attention form: an evaluation order, the same math"},
        rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY, aliases={"num_experts": "num_local_experts"})
    families = ("MiniMax-Text-01",)
    vllm = True          # vLLM lists MiniMaxText01ForCausalLM
    arch = ARCH_MINIMAX
    known = (r"model\.embed_tokens\.weight", r"model\.norm\.weight", r"lm_head\.weight",
             _L + r"(?:input_layernorm|post_attention_layernorm)\.weight",
             _L + r"self_attn\.(?:qkv_proj|output_gate|norm|out_proj|q_proj|k_proj|v_proj|o_proj)\.weight",
             _L + r"self_attn\.(?:slope_rate|query_decay|key_decay|diagonal_decay)",
             _L + r"block_sparse_moe\.gate\.weight",
             _L + r"block_sparse_moe\.experts\.\d+\.w[123]\.weight")

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("rms_norm_eps", default=1e-5)
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads", default=self.n_head)
        if self.n_head % self.n_head_kv:
            raise InputError(f"{c.path}: num_attention_heads {self.n_head} must be a multiple of num_key_value_heads "
                             f"{self.n_head_kv}")
        hd = c.d.get("head_dim")
        self.head_dim = c.int("head_dim") if hd is not None else self.n_embd // self.n_head
        if self.head_dim % 2:
            raise InputError(f"{c.path}: head_dim {self.head_dim} must be even (RoPE pairs)")
        self.n_ff = c.int("intermediate_size")
        self.n_expert = c.int("num_local_experts", "num_experts")
        self.n_expert_used = c.int("num_experts_per_tok", default=2)
        if self.n_expert_used > self.n_expert:
            raise InputError(f"{c.path}: num_experts_per_tok {self.n_expert_used} must be in [1, num_local_experts="
                             f"{self.n_expert}]")
        rp = c.d.get("rope_parameters")
        if rp is None:
            rp = {"rope_theta": c.d.get("rope_theta", 1e6)}
        if not isinstance(rp, dict):
            raise InputError(f"{c.path}: key 'rope_parameters' must be an object")
        theta = rp.get("rope_theta", 1e6)
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise InputError(f"{c.path}: rope_parameters.rope_theta = {theta!r} must be a positive number")
        self.rope_theta = float(theta)
        if c.d.get("postnorm", True) is not True:     # remote code: false joins the un-normed residual
            raise UnsupportedError(f"{c.path}: key 'postnorm' = {c.d.get('postnorm')!r} is not supported (the branches "
                                   f"join the normed input, as transformers 5.24 and MiniMax-Text-01's postnorm true)")
        self.alpha = [c.float(*k, default=1.0) for k in _ALPHA]
        self.beta = [c.float(*k, default=1.0) for k in _BETA]
        self.layer_types = self._layer_types()
        # HF: sliding_window set -> every full_attention layer's mask is create_sliding_window_causal_mask
        # (key j visible to query i when i - W < j <= i; modeling_minimax.py MiniMaxModel.forward)
        self.window = c.int("sliding_window") if c.d.get("sliding_window") is not None else None
        if self.window is not None and self.window > 1 << 24:   # the runtime's bound (readers.read_sliding_window)
            raise InputError(f"{c.path}: key 'sliding_window' = {self.window} is out of range (must be <= {1 << 24})")

    def _layer_types(self) -> list[str]:
        c, L = self.cfg, self.n_layer
        lt = c.d.get("layer_types")
        if lt is None and c.d.get("attn_type_list") is not None:   # remote code: 0 lightning, 1 softmax
            at = c.d["attn_type_list"]
            if not isinstance(at, list) or any(v not in (0, 1) or isinstance(v, bool) for v in at):
                raise InputError(f"{c.path}: key 'attn_type_list' must be a list of 0 (lightning) / 1 (softmax)")
            lt = [_TYPES[v] for v in at]
        if lt is None:      # transformers 5.24's default: full attention on even layers
            lt = ["full_attention" if i % 2 == 0 else "linear_attention" for i in range(L)]
        if not isinstance(lt, list) or len(lt) != L:
            raise InputError(f"{c.path}: key 'layer_types' must list {L} layer types (num_hidden_layers)")
        for i, t in enumerate(lt):
            if t not in _TYPES:
                raise InputError(f"{c.path}: layer_types[{i}] = {t!r} is not one of {', '.join(_TYPES)}")
        return list(lt)

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def _keys(self) -> None:
        key, p = self.key, self.plan
        p.kv += [
            kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), self.cfg.int("max_position_embeddings", default=10240000)),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
            kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), self.n_ff),
            kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
            kv_u32(key(Keys.Attention.HEAD_COUNT_KV), self.n_head_kv),
            kv_f32(key(Keys.Rope.FREQ_BASE), self.rope_theta),
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
            kv_u32(key(Keys.LLM.EXPERT_COUNT), self.n_expert),
            kv_u32(key(Keys.LLM.EXPERT_USED_COUNT), self.n_expert_used),
            kv_u32(key(Keys.Attention.KEY_LENGTH), self.head_dim),
            kv_u32(key(Keys.Attention.VALUE_LENGTH), self.head_dim),
            kv_u32(key(Keys.Rope.DIMENSION_COUNT), self.head_dim),   # what transformers 5.24 rotates
            KV(key(Keys.Attention.RECURRENT_LAYERS), [t == "linear_attention" for t in self.layer_types],
               GGUFValueType.ARRAY, GGUFValueType.BOOL),
            *rope_scaling_kv(self.cfg, key),    # llama.cpp's rope.scaling.*: the softmax layers' RoPE
        ]
        if self.window is not None:   # llama.cpp's keys; every softmax-attention layer slides
            p.kv += [kv_u32(key(Keys.Attention.SLIDING_WINDOW), self.window),
                     KV(key(Keys.Attention.SLIDING_WINDOW_PATTERN), [t == "full_attention" for t in self.layer_types],
                        GGUFValueType.ARRAY, GGUFValueType.BOOL)]
        # the experts' act (MiniMaxExperts / MiniMaxMLP ACT2FN[config.hidden_act]); written only when not silu
        p.kv += ffn_act_kv(self.cfg.path, self.cfg.d, key)
        if len(set(self.alpha)) > 1 or any(b != 1.0 for b in self.beta):
            # not residual_scale: llama.cpp would load the file and run another model (its one
            # factor on both branches, beta 1: 0.25 / 0.58 from HF on minimax-ab / -wide-tiny,
            # docs/llamacpp-crosscheck.md); without that required key it refuses the file
            p.kv += [kv_arr_f32(key(MINIMAX_RESIDUAL_ALPHA), self.alpha), kv_arr_f32(key(MINIMAX_RESIDUAL_BETA), self.beta)]
        else:
            p.kv.append(kv_f32(key(Keys.LLM.RESIDUAL_SCALE), self.alpha[0]))

    def _lightning(self, i: int, a: str) -> None:
        D, W = self.n_embd, self.n_head * self.head_dim
        self.copy(tn(T.ATTN_QKV, i), a + "qkv_proj.weight", (3 * W, D), note="per head [q_h | k_h | v_h]")
        self.copy(tn(T.ATTN_GATE, i), a + "output_gate.weight", (W, D))
        self.copy(tn(T.ATTN_NORM_2, i), a + "norm.weight", (W,))
        self.copy(tn(T.ATTN_OUT, i), a + "out_proj.weight", (D, W))
        self._check_slopes(i, a + "slope_rate")
        for b in ("slope_rate", "query_decay", "key_decay", "diagonal_decay"):
            if self.has(a + b):
                self.omit(a + b, "a derived constant (the runtime computes the slopes)")

    def _check_slopes(self, i: int, name: str) -> None:
        """The checkpoint's ``slope_rate`` buffer of layer i, when saved, against the slopes the
        runtime computes (HF modeling_minimax.py get_slope_rate, docs/specs/more-hybrids.md §5.4):
        s_h = (2^(-8/nh))^(h+1) (1 - i/(L-1+1e-5) + 1e-5), one per head.

        Raises:
            InputError: a slope count other than num_attention_heads (names the tensor).
            UnsupportedError: slopes other than HF's formula (the file has no key to carry them).
        """
        t = self.hf.tensors.get(name)
        if t is None:
            return
        n = int(np.prod(t.shape))
        if n != self.n_head:
            raise InputError(f"{t.path}: tensor {name!r} has shape {list(t.shape)}: {n} slopes, but "
                             f"num_attention_heads = {self.n_head} (one slope per head)")
        if t.dtype not in ("F32", "F16", "BF16", "F64"):
            raise InputError(f"{t.path}: tensor {name!r} has dtype {t.dtype}; slopes must be floats")
        buf = bytearray(t.nbytes)
        with ShardReader() as rd:
            rd.read_into(t, 0, memoryview(buf))
        raw = np.frombuffer(bytes(buf), dtype=DTYPES[t.dtype][0])
        got = ((raw.astype(np.uint32) << 16).view(np.float32) if t.dtype == "BF16" else raw).astype(np.float64)
        L, nh = len(self.layer_types), self.n_head
        want = (2.0 ** (-8.0 / nh)) ** np.arange(1, nh + 1) * (1.0 - i / (L - 1 + 1e-5) + 1e-5)
        tol = 1e-2 if t.dtype in ("F16", "BF16") else 1e-5
        bad = np.flatnonzero(~(np.abs(got - want) <= tol * want))
        if bad.size:
            h = int(bad[0])
            raise UnsupportedError(f"{t.path}: tensor {name!r}: head {h}'s slope {got[h]:.6g} is not HF's "
                                   f"{want[h]:.6g} (the runtime computes the slopes from the head and layer "
                                   f"index; a GGUF has no key for others)")

    def _attention(self, i: int, a: str) -> None:
        D, hd = self.n_embd, self.head_dim
        self.copy(tn(T.ATTN_Q, i), a + "q_proj.weight", (self.n_head * hd, D))
        self.copy(tn(T.ATTN_K, i), a + "k_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_V, i), a + "v_proj.weight", (self.n_head_kv * hd, D))
        self.copy(tn(T.ATTN_OUT, i), a + "o_proj.weight", (D, self.n_head * hd))

    def _moe(self, i: int, f: str) -> None:
        D, F, E = self.n_embd, self.n_ff, self.n_expert
        self.copy(tn(T.FFN_GATE_INP, i), f + "gate.weight", (E, D))
        for out, w, shape in ((T.FFN_GATE_EXP, "w1", (F, D)), (T.FFN_UP_EXP, "w3", (F, D)),
                              (T.FFN_DOWN_EXP, "w2", (D, F))):
            self.stack(tn(out, i), f + "experts.{e}." + w + ".weight", E, shape, why=f"expert {{e}} of layer {i}",
                       note=f"{E} experts stacked")

    def build(self):
        self.read_hparams()
        self._keys()
        D = self.n_embd
        self.copy(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, D))
        for i, lt in enumerate(self.layer_types):
            pre = f"model.layers.{i}."
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (D,))
            if lt == "linear_attention":
                self._lightning(i, pre + "self_attn.")
            else:
                self._attention(i, pre + "self_attn.")
            self.copy(tn(T.FFN_NORM, i), pre + "post_attention_layernorm.weight", (D,))
            self._moe(i, pre + "block_sparse_moe.")
        self.copy(tn(T.OUTPUT_NORM), "model.norm.weight", (D,))
        self.tied_output("model.embed_tokens.weight", "lm_head.weight", self.n_vocab, D, tie_default=False)
        self.check_leftovers()
        return self.plan
