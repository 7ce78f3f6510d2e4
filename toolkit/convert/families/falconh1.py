"""FalconH1ForCausalLM -> GGUF ``falcon-h1`` (llama.cpp's FalconH1Model converter: same keys,
names and data, muP multipliers folded into the weights the same way).

Glossary: D = hidden_size, L = num_hidden_layers, V = vocab rows, DI = mamba_d_ssm (else
mamba_expand * D) = H * P, H = mamba_n_heads, P = mamba_d_head, G = mamba_n_groups,
N = mamba_d_state, K = mamba_d_conv, W = 2 DI + 2 G N + H (in_proj rows: z, x, B, C, dt);
attention: Hq = num_attention_heads, Hkv = num_key_value_heads, hd = head_dim (else D / Hq);
F = intermediate_size.

Every layer runs attention and Mamba-2 side by side on the same normed input and sums them
(the runtime's parallel layer kind).  HF's muP multipliers are products with linear maps, so
they are folded into the weights as llama.cpp does (each a float32 product of the source
element, in llama.cpp's order):

HF tensor (numpy shape)                        GGUF tensor                     folded factor
model.embed_tokens.weight [V, D]               token_embd.weight               embedding_multiplier
layers.i.input_layernorm.weight [D]            blk.i.attn_norm.weight
  self_attn.q_proj.weight [Hq hd, D]           blk.i.attn_q.weight             attention_in_multiplier
  self_attn.k_proj.weight [Hkv hd, D]          blk.i.attn_k.weight             key_multiplier, then attention_in_multiplier
  self_attn.v_proj.weight [Hkv hd, D]          blk.i.attn_v.weight             attention_in_multiplier
  self_attn.o_proj.weight [D, Hq hd]           blk.i.attn_output.weight        attention_out_multiplier
  self_attn.{q,k,v,o}_proj.bias (attention_bias) blk.i.attn_{q,k,v,output}.bias  k: key_multiplier, o: attention_out_multiplier
  mamba.in_proj.weight [W, D]                  blk.i.ssm_in.weight             ssm_in_multiplier, then ssm_multipliers[0..4]
                                                                               on the z, x, B, C, dt row blocks
  mamba.in_proj.bias [W] (mamba_proj_bias)     blk.i.ssm_in.bias               ssm_multipliers[0..4] on the z, x, B, C, dt
                                                                               blocks (HF scales in_proj's output by
                                                                               mup_vector; ssm_in_multiplier is on its input)
  mamba.conv1d.weight [DI+2GN, 1, K] / .bias   blk.i.ssm_conv1d.weight [DI+2GN, K] / .bias
  mamba.dt_bias [H]                            blk.i.ssm_dt.bias
  mamba.A_log [H]                              blk.i.ssm_a [H, 1] = -exp(A_log)
  mamba.D [H]                                  blk.i.ssm_d [H, 1]
  mamba.norm.weight [DI]                       blk.i.ssm_norm.weight [G, DI/G] (only with mamba_rms_norm)
  mamba.out_proj.weight [D, DI]                blk.i.ssm_out.weight            ssm_out_multiplier
  mamba.out_proj.bias [D] (projectors_bias)    blk.i.ssm_out.bias              ssm_out_multiplier
  pre_ff_layernorm.weight [D]                  blk.i.ffn_norm (llama.cpp's name: no .weight)
  feed_forward.gate_proj.weight [F, D]         blk.i.ffn_gate.weight           mlp_multipliers[0]
  feed_forward.up_proj.weight [F, D]           blk.i.ffn_up.weight
  feed_forward.down_proj.weight [D, F]         blk.i.ffn_down.weight           mlp_multipliers[1]
  feed_forward.{gate,up,down}_proj.bias (mlp_bias) blk.i.ffn_{gate,up,down}.bias gate: mlp_multipliers[0], down: [1]
model.final_layernorm.weight [D]               output_norm.weight
lm_head.weight [V, D]                          output.weight                   lm_head_multiplier

Tied embeddings (``tie_word_embeddings``): HF's logits are embed_tokens(h) * lm_head_multiplier
while its inputs are embed_tokens * embedding_multiplier, so ``output.weight`` is written
from embed_tokens with lm_head_multiplier (llama.cpp's converter would leave it out and reuse
the embedding_multiplier-scaled token_embd, which is wrong unless the two multipliers agree).

The biases are llama.cpp's tensor names (gguf-py: ``.bias`` of the same tensor); llama.cpp's
falcon-h1 graph has none of the ssm_in / ssm_out / ffn biases, so a file with them is not
expected to match HF there (not tried); the runtime here binds each where the file has it.

RoPE: HF rotates halves (Llama's rotate_half); llama.cpp runs falcon-h1 with NEOX RoPE, so q/k
rows stay as stored and ``rope.dimension_count`` is not written (llama.cpp: the head dim).

Keys: llama.cpp's (Mamba2Model + FalconH1Model set_gguf_parameters, with
``attention.key_length`` = head_dim from config or D / Hq, where llama.cpp 0c1e570 fails on a
transformers-5 config with ``KeyError: 'head_dim'``), plus ours: ``attention.layer_indices``
(every layer), ``ssm.head_dim`` and, when ``mamba_norm_before_gate`` is true,
``ssm.norm_before_gate``: the gated norm is then rmsnorm(y) w * silu(z), which llama.cpp does
not do (it always gates first), so such a file does not match HF in llama.cpp.
"""
from __future__ import annotations

import math

import numpy as np

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.rope_scaling import SCALED_ROPE_TYPES, SCALED_WHY, rope_scaling_kv
from toolkit.convert.plan import Segment, kv_arr_i32, kv_bool, kv_f32, kv_u32
from toolkit.convert.activation import ffn_act_kv, ssm_act_kv
from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.families.mamba2 import dt_limit_kv
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_FALCON_H1

_L = r"model\.layers\.\d+\."


class FalconH1Family(Family):
    hf_archs = ("FalconH1ForCausalLM",)
    hf_configs = ("FalconH1Config",)
    config_keys = ConfigKeys.of(
        "vocab_size tie_word_embeddings hidden_size intermediate_size num_hidden_layers num_attention_heads "
        "num_key_value_heads rms_norm_eps max_position_embeddings mamba_d_ssm mamba_n_heads mamba_d_head mamba_n_groups "
        "mamba_d_state mamba_d_conv mamba_expand mamba_norm_before_gate mamba_rms_norm rope_parameters "
        "lm_head_multiplier embedding_multiplier mlp_multipliers key_multiplier attention_out_multiplier "
        "attention_in_multiplier ssm_multipliers ssm_in_multiplier ssm_out_multiplier "
        "mamba_conv_bias attention_bias mamba_proj_bias projectors_bias mlp_bias time_step_limit hidden_act",
        rope_types=SCALED_ROPE_TYPES, rope_why=SCALED_WHY, aliases={"layers_block_type": "layer_types"})
    families = ("Falcon-H1",)
    arch = ARCH_FALCON_H1
    known = (
        r"model\.embed_tokens\.weight", r"model\.final_layernorm\.weight", r"lm_head\.weight",
        _L + r"(input_layernorm|pre_ff_layernorm)\.weight",
        _L + r"mamba\.(A_log|D|dt_bias|conv1d\.weight|conv1d\.bias|in_proj\.(weight|bias)|norm\.weight|out_proj\.(weight|bias))",
        _L + r"self_attn\.(q_proj|k_proj|v_proj|o_proj)\.(weight|bias)",
        _L + r"feed_forward\.(gate_proj|up_proj|down_proj)\.(weight|bias)",
    )

    # ---- config.json ----------------------------------------------------------------------
    def _multiplier(self, key: str) -> float:
        """A scalar muP multiplier (absent or null: 1.0, the FalconH1Config default)."""
        return self.cfg.float(key, default=1.0) if self.cfg.d.get(key) is not None else 1.0

    def _multipliers(self, key: str, n: int) -> list[float]:
        """A list muP multiplier of exactly ``n`` finite numbers (absent or null: all 1.0)."""
        v = self.cfg.d.get(key)
        if v is None:
            return [1.0] * n
        if (not isinstance(v, list) or len(v) != n
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)):
            raise InputError(f"{self.cfg.path}: key {key!r} = {str(v)[:60]} must be a list of {n} finite numbers")
        return [float(x) for x in v]

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.eps = c.eps("rms_norm_eps", default=1e-5)
        self._read_mamba()
        self._read_attention()
        self.n_ff = c.int("intermediate_size")
        # muP multipliers (FalconH1Config defaults when absent)
        self.mult = {k: self._multiplier(k) for k in (
            "embedding_multiplier", "lm_head_multiplier", "key_multiplier", "attention_in_multiplier",
            "attention_out_multiplier", "ssm_in_multiplier", "ssm_out_multiplier")}
        self.mlp_mult = self._multipliers("mlp_multipliers", 2)
        self.ssm_mult = self._multipliers("ssm_multipliers", 5)

    def _read_mamba(self) -> None:
        c = self.cfg
        self.d_conv = c.int("mamba_d_conv", default=4)
        self.d_state = c.int("mamba_d_state", default=256)
        self.n_group = c.int("mamba_n_groups", default=1)
        self.ssm_n_head = c.int("mamba_n_heads", default=128)
        if c.d.get("mamba_d_ssm") is not None:
            self.d_inner = c.int("mamba_d_ssm")
        else:
            expand = c.float("mamba_expand", default=2)
            if expand <= 0:
                raise InputError(f"{c.path}: key 'mamba_expand' = {expand} must be positive")
            self.d_inner = int(expand * self.n_embd)
        dh = c.d.get("mamba_d_head", "auto")
        self.ssm_head_dim = self.d_inner // self.ssm_n_head if dh in (None, "auto") else c.int("mamba_d_head")
        if self.ssm_n_head * self.ssm_head_dim != self.d_inner:
            raise InputError(f"{c.path}: mamba_n_heads {self.ssm_n_head} x mamba_d_head {self.ssm_head_dim} != "
                             f"mamba_d_ssm = {self.d_inner}")
        if self.ssm_n_head % self.n_group:
            raise InputError(f"{c.path}: mamba_n_groups {self.n_group} does not divide mamba_n_heads {self.ssm_n_head}")
        self.rms_norm = c.flag("mamba_rms_norm", False)
        self.conv_bias = c.flag("mamba_conv_bias", True)   # false: no conv1d.bias (a stored one is a leftover)
        self.attn_bias = c.flag("attention_bias", False)   # q/k/v/o_proj biases
        self.in_bias = c.flag("mamba_proj_bias", False)    # mamba.in_proj's bias
        self.out_bias = c.flag("projectors_bias", False)   # mamba.out_proj's bias
        self.mlp_bias = c.flag("mlp_bias", False)          # feed_forward.{gate,up,down}_proj biases
        self.norm_before_gate = c.flag("mamba_norm_before_gate", True)

    def _read_attention(self) -> None:
        c = self.cfg
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads", default=self.n_head)
        if self.n_head % self.n_head_kv:
            raise InputError(f"{c.path}: num_key_value_heads {self.n_head_kv} does not divide num_attention_heads {self.n_head}")
        if self.n_embd % self.n_head:
            raise InputError(f"{c.path}: num_attention_heads {self.n_head} does not divide hidden_size {self.n_embd}")
        # LlamaAttention: config.head_dim when set, else hidden_size / num_attention_heads
        self.head_dim = c.int("head_dim") if c.d.get("head_dim") is not None else self.n_embd // self.n_head
        if self.head_dim % 2:
            raise InputError(f"{c.path}: head_dim {self.head_dim} must be even (RoPE)")
        self.rope_theta = c.rope_theta(10000.0)
        if c.rope("partial_rotary_factor", 1.0) != 1.0:
            raise UnsupportedError(f"{c.path}: partial_rotary_factor: only RoPE on the whole head is supported")

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    # ---- the plan --------------------------------------------------------------------------
    def build(self):
        self.read_hparams()
        c, key, p = self.cfg, self.key, self.plan
        # llama.cpp's keys: Mamba2Model.set_gguf_parameters, then FalconH1Model's overrides
        p.kv += [
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), c.int("max_position_embeddings", default=2**20)),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
            kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), self.n_ff),
            kv_u32(key(Keys.Attention.HEAD_COUNT), self.n_head),
            kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.INNER_SIZE), self.d_inner),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_state),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.ssm_n_head),
            kv_u32(key(Keys.SSM.GROUP_COUNT), self.n_group),
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
            kv_u32(key(Keys.LLM.VOCAB_SIZE), self.n_vocab),
            kv_u32(key(Keys.Attention.HEAD_COUNT_KV), self.n_head_kv),
            kv_u32(key(Keys.Attention.KEY_LENGTH), self.head_dim),
            kv_u32(key(Keys.Attention.VALUE_LENGTH), self.head_dim),
            kv_f32(key(Keys.Rope.FREQ_BASE), self.rope_theta),
            # ours: every layer has attention; Mamba-2 head dim; the gate order when it is not llama.cpp's
            kv_arr_i32(key(Keys.Attention.LAYER_INDICES), list(range(self.n_layer))),
            kv_u32(key(Keys.SSM.HEAD_DIM), self.ssm_head_dim),
        ] + rope_scaling_kv(c, key) + dt_limit_kv(self)
        if self.rms_norm and self.norm_before_gate:
            p.kv.append(kv_bool(key(Keys.SSM.NORM_BEFORE_GATE), True))
        # hidden_act: the Mamba conv's act (causal_conv1d_fn activation=) and the MLP gate's (ACT2FN[hidden_act],
        # after gate_multiplier, folded into ffn_gate); the gates of y are F.silu, fixed.  Written only when not silu
        p.kv += ffn_act_kv(c.path, c.d, key) + ssm_act_kv(c.path, c.d, key)
        D, m = self.n_embd, self.mult
        self.scaled(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, D), [m["embedding_multiplier"]])
        for i in range(self.n_layer):
            pre = f"model.layers.{i}."
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (D,))
            self._attention(i, pre + "self_attn.")
            self._mamba(i, pre + "mamba.")
            f = pre + "feed_forward."
            # llama.cpp's name, without .weight: its tensor map takes pre_ff_layernorm.weight
            # whole (FFN_PRE_NORM) and its falcon-h1 loader asks for blk.N.ffn_norm
            self.copy(tn(T.FFN_NORM, i, ""), pre + "pre_ff_layernorm.weight", (D,))
            self.scaled(tn(T.FFN_GATE, i), f + "gate_proj.weight", (self.n_ff, D), [self.mlp_mult[0]])
            self.copy(tn(T.FFN_UP, i), f + "up_proj.weight", (self.n_ff, D))
            self.scaled(tn(T.FFN_DOWN, i), f + "down_proj.weight", (D, self.n_ff), [self.mlp_mult[1]])
            if self.mlp_bias:   # HF: act(gate_proj(x) * gate_multiplier) * up_proj(x), down_proj(y) * down_multiplier
                self.scaled(tn(T.FFN_GATE, i, ".bias"), f + "gate_proj.bias", (self.n_ff,), [self.mlp_mult[0]])
                self.copy(tn(T.FFN_UP, i, ".bias"), f + "up_proj.bias", (self.n_ff,), why="mlp_bias is true")
                self.scaled(tn(T.FFN_DOWN, i, ".bias"), f + "down_proj.bias", (D,), [self.mlp_mult[1]])
        self.copy(tn(T.OUTPUT_NORM), "model.final_layernorm.weight", (D,))
        self._output()
        self.check_leftovers()
        return p

    def scaled(self, out: str, src: str, shape: tuple[int, ...], scales: list[float], note: str = "") -> None:
        """``src`` times each of ``scales`` in turn (float32 products) as ``out``."""
        t = self.take(src, shape)
        rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
        self.emit(out, shape, [Segment(t, 0, rows, scales=tuple(scales))],
                  note=note or "x " + " x ".join(f"{s:g}" for s in scales))

    def _attention(self, i: int, a: str) -> None:
        D, hd, m = self.n_embd, self.head_dim, self.mult
        ain = m["attention_in_multiplier"]
        self.scaled(tn(T.ATTN_Q, i), a + "q_proj.weight", (self.n_head * hd, D), [ain])
        self.scaled(tn(T.ATTN_K, i), a + "k_proj.weight", (self.n_head_kv * hd, D), [m["key_multiplier"], ain])
        self.scaled(tn(T.ATTN_V, i), a + "v_proj.weight", (self.n_head_kv * hd, D), [ain])
        self.scaled(tn(T.ATTN_OUT, i), a + "o_proj.weight", (D, self.n_head * hd), [m["attention_out_multiplier"]])
        if self.attn_bias:   # added after the projection: attention_in_multiplier (on its input) leaves it alone
            for out, src, n, sc in ((T.ATTN_Q, "q_proj", self.n_head * hd, []),
                                    (T.ATTN_K, "k_proj", self.n_head_kv * hd, [m["key_multiplier"]]),
                                    (T.ATTN_V, "v_proj", self.n_head_kv * hd, []),
                                    (T.ATTN_OUT, "o_proj", D, [m["attention_out_multiplier"]])):
                self.scaled(tn(out, i, ".bias"), a + src + ".bias", (n,), sc or [1.0])

    def _mamba(self, i: int, s: str) -> None:
        D, DI, N, G, H, K = self.n_embd, self.d_inner, self.d_state, self.n_group, self.ssm_n_head, self.d_conv
        C = DI + 2 * G * N
        t = self.take(s + "in_proj.weight", (2 * DI + 2 * G * N + H, D))
        blocks = (DI, DI, G * N, G * N, H)     # z, x, B, C, dt rows (compute_mup_vector's slices)
        ssm_in = self.mult["ssm_in_multiplier"]
        segs, r0 = [], 0
        for n, f in zip(blocks, self.ssm_mult):
            segs.append(Segment(t, r0, n, scales=(ssm_in, f)))
            r0 += n
        self.emit(tn(T.SSM_IN, i), (2 * DI + 2 * G * N + H, D), segs,
                  note=f"x ssm_in_multiplier {ssm_in:g}, then ssm_multipliers on the z, x, B, C, dt rows")
        if self.in_bias:   # HF: in_proj(x * ssm_in_multiplier) * mup_vector: the bias gets mup_vector only
            W = 2 * DI + 2 * G * N + H
            mup = np.concatenate([np.full(n, f, np.float32) for n, f in zip(blocks, self.ssm_mult)])
            b = self.take(s + "in_proj.bias", (W,), why="mamba_proj_bias is true")
            self.emit(tn(T.SSM_IN, i, ".bias"), (W,), [Segment(b, 0, 1, col_scales=mup)],
                      note="x ssm_multipliers on the z, x, B, C, dt blocks (HF's mup_vector)")
        self.copy(tn(T.SSM_CONV1D, i), s + "conv1d.weight", (C, 1, K), (C, K), note="squeeze [C,1,K] -> [C,K]")
        if self.conv_bias:
            self.copy(tn(T.SSM_CONV1D, i, ".bias"), s + "conv1d.bias", (C,), why="mamba_conv_bias is true")
        self.copy(tn(T.SSM_DT, i, ".bias"), s + "dt_bias", (H,))
        self.copy(tn(T.SSM_A, i, ""), s + "A_log", (H,), (H, 1), op="neg_exp", note="A = -exp(A_log), [H] -> [H,1]")
        self.copy(tn(T.SSM_D, i, ""), s + "D", (H,), (H, 1), note="[H] -> [H,1]")
        if self.rms_norm:
            self.copy(tn(T.SSM_NORM, i), s + "norm.weight", (DI,), (G, DI // G), note="[DI] -> [G, DI/G]")
        elif self.has(s + "norm.weight"):
            self.take(s + "norm.weight", (DI,))
            self.omit(s + "norm.weight", "mamba_rms_norm is false: FalconH1Mixer does not use its norm")
        self.scaled(tn(T.SSM_OUT, i), s + "out_proj.weight", (D, DI), [self.mult["ssm_out_multiplier"]])
        if self.out_bias:   # HF: out_proj(y) * ssm_out_multiplier
            self.scaled(tn(T.SSM_OUT, i, ".bias"), s + "out_proj.bias", (D,), [self.mult["ssm_out_multiplier"]])

    def _output(self) -> None:
        V, D = self.n_vocab, self.n_embd
        lm = [self.mult["lm_head_multiplier"]]
        if self.cfg.flag("tie_word_embeddings", False):
            # the embedding is already taken for token_embd: read it again, with the lm_head scale
            emb = self.hf.tensors["model.embed_tokens.weight"]
            self.emit(tn(T.OUTPUT), (V, D), [Segment(emb, 0, V, scales=tuple(lm))],
                      note="tied: embed_tokens x lm_head_multiplier (written, not shared: token_embd has its own scale)")
            if self.has("lm_head.weight"):
                self.take("lm_head.weight", (V, D))
                self.omit("lm_head.weight", "tie_word_embeddings: output.weight is embed_tokens x lm_head_multiplier")
            return
        self.scaled(tn(T.OUTPUT), "lm_head.weight", (V, D), lm)
