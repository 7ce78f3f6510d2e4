"""ZambaForCausalLM (Zamba v1) -> GGUF ``zamba`` (llama.cpp has no Zamba: our layout, README "Zamba layout").

Glossary: D = hidden_size, L = num_hidden_layers, V = vocab rows; Mamba-1: I = mamba_expand * D,
M = n_mamba_heads, Dm = I / M, N = mamba_d_state, K = mamba_d_conv, R = mamba_dt_rank; shared
block: A = attention_hidden_size (= 2 D: the block reads [x | embedding]), Hq / Hkv =
num_attention_heads / num_key_value_heads, hd = attention_head_dim, F = intermediate_size.

Every layer is a multi-head Mamba-1 block; the "hybrid" layers (``layers_block_type``) first run
a shared attention + MLP block, then their own linear projection, and add the result to the
Mamba input only (transformers modeling_zamba.py ZambaHybridLayer; docs/specs/more-hybrids.md §7).
Sharing (docs/specs/more-hybrids.md §7.2): transformers ties every hybrid layer's ``shared_transf`` to the first
one's only when ``tie_word_embeddings`` is true; then one block is stored (``shared.0.*``, any
later copies are ties and left out).  With ``tie_word_embeddings`` false each hybrid layer has,
and saves, its own block: block j (``shared.j.*``) is the j-th hybrid layer's, and a hybrid
layer without one is an error.  The runtime runs block j % shared_block_count (zamba2's rule).

HF tensor (numpy shape)                                   GGUF tensor
model.embed_tokens.weight [V, D]                          token_embd.weight
model.layers.i.input_layernorm.weight [D]                 blk.i.attn_norm.weight   (Mamba layer)
model.layers.i.mamba_decoder.input_layernorm.weight [D]   blk.i.attn_norm.weight   (hybrid layer)
(mamba_decoder.)mamba.:
  in_proj.weight [2I, D], rows interleaved x_c = 2c,      blk.i.ssm_in.weight [2I, D], rows [x | z]
    z_c = 2c + 1 (view(.., I, 2, T))                        (llama.cpp's mamba layout; de-interleaved)
  in_proj.bias [2I] (mamba_proj_bias), interleaved alike  blk.i.ssm_in.bias [2I], [x | z] (de-interleaved)
  conv1d.weight [I, 1, K] / conv1d.bias [I]               blk.i.ssm_conv1d.weight [I, K] / .bias
  x_proj_weight [M, R + 2N, Dm]                           blk.i.ssm_x.weight (same; [R + 2N, Dm] when M = 1)
  dt_proj_weight [M, Dm, R] / dt_proj_bias [M, Dm]        blk.i.ssm_dt.weight (same; [Dm, R] when M = 1) / .bias [I]
  A_log [M, Dm, N]                                        blk.i.ssm_a [I, N] = -exp(A_log)
  D [M, Dm]                                               blk.i.ssm_d [I]
  out_proj.weight [D, I]                                  blk.i.ssm_out.weight
  out_proj.bias [D] (mamba_proj_bias)                     blk.i.ssm_out.bias
linear.weight [D, D]                                      blk.i.shared_linear.weight
shared_transf of the block's hybrid layer:
  input_layernorm.weight [A]                              shared.b.attn_norm.weight
  self_attn.{q,k,v}_proj.weight [Hq hd | Hkv hd, A]       shared.b.attn_{q,k,v}.weight
  self_attn.o_proj.weight [D, Hq hd]                      shared.b.attn_output.weight
  pre_ff_layernorm.weight [D]                             shared.b.ffn_norm.weight
  feed_forward.{gate,up,down}_proj.weight                 shared.b.ffn_{gate,up,down}.weight
model.final_layernorm.weight [D]                          output_norm.weight
lm_head.weight [V, D]                                     output.weight (omitted when tied)
"""
from __future__ import annotations

import math

import numpy as np

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.activation import ffn_act_kv, ssm_act_kv
from toolkit.convert.base import Family
from toolkit.convert.families.zamba2 import Zamba2Family, copy_shared_attention, shared_attention_kv, shared_block_map
from toolkit.convert.plan import kv_arr_i32, kv_u32
from toolkit.convert.config_keys import ConfigKeys
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import Keys
from toolkit.gguf_io.constants import ARCH_ZAMBA

_L = r"model\.layers\.\d+\."
_MIXER = (r"mamba\.(A_log|D|dt_proj_bias|dt_proj_weight|x_proj_weight|conv1d\.weight|conv1d\.bias|in_proj\.(weight|bias)"
          r"|out_proj\.(weight|bias))")
_ST = _L + r"shared_transf\."


class ZambaFamily(Family):
    hf_archs = ("ZambaForCausalLM",)
    hf_configs = ("ZambaConfig",)
    config_keys = ConfigKeys.of(
        "vocab_size tie_word_embeddings hidden_size attention_hidden_size intermediate_size num_hidden_layers "
        "num_attention_heads attention_head_dim num_key_value_heads n_mamba_heads rms_norm_eps attn_layer_period "
        "attn_layer_offset mamba_d_state mamba_d_conv mamba_expand mamba_dt_rank mamba_conv_bias layers_block_type "
        "hidden_act mamba_proj_bias hidden_mamba_act",
        irrelevant={"max_position_embeddings": "Zamba has no RoPE; no context limit is written (llama.cpp's converter neither)"},
        aliases={"layer_types": "layers_block_type", "head_dim": "attention_head_dim"})
    families = ("Zamba",)
    llama_cpp = False   # our layout (Zamba2's shared-block names): llama.cpp has no Zamba
    vllm = False        # vLLM implements Zamba2, not Zamba v1
    arch = ARCH_ZAMBA
    known = (
        r"model\.embed_tokens\.weight", r"model\.final_layernorm\.weight", r"lm_head\.weight",
        _L + r"input_layernorm\.weight", _L + _MIXER, _L + r"linear\.weight",
        _L + r"mamba_decoder\.input_layernorm\.weight", _L + r"mamba_decoder\." + _MIXER,
        _ST + r"(input_layernorm|pre_ff_layernorm)\.weight", _ST + r"self_attn\.[qkvo]_proj\.weight",
        _ST + r"feed_forward\.(gate_proj|up_proj|down_proj)\.weight",
    )

    def _hybrid_layers(self) -> list[int]:
        """Hybrid layers from ``layers_block_type``, or HF's default pattern when it is absent
        (layer 2, then i + 3 with i % attn_layer_period == attn_layer_offset; ZambaConfig)."""
        if self.cfg.d.get("layers_block_type") is None:
            per, off = self.cfg.int("attn_layer_period", default=6), self.cfg.int("attn_layer_offset", default=4, min_value=0)
            return [i for i in range(self.n_layer) if i == 2 or (i >= 3 and (i - 3) % per == off)]
        return Zamba2Family._hybrid_layers(self)

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size")
        self.n_layer = self.layer_count("num_hidden_layers")
        self.n_vocab = c.int("vocab_size")
        self.hybrid = self._hybrid_layers()
        self.d_conv, self.d_state = c.int("mamba_d_conv", default=4), c.int("mamba_d_state", default=16)
        self.d_inner = c.int("mamba_expand", default=2) * self.n_embd
        self.n_mh = c.int("n_mamba_heads", default=2)
        if self.d_inner % self.n_mh:
            raise InputError(f"{c.path}: mamba_expand x hidden_size = {self.d_inner} is not divisible by n_mamba_heads {self.n_mh}")
        r = c.get("mamba_dt_rank")
        self.dt_rank = math.ceil(self.n_embd / 16) if r in (None, "auto") else c.int("mamba_dt_rank")
        self.eps = c.eps("rms_norm_eps", default=1e-5)
        self.n_head = c.int("num_attention_heads")
        self.n_head_kv = c.int("num_key_value_heads", default=self.n_head)
        self.attn_in = c.int("attention_hidden_size", default=2 * self.n_embd)
        self.head_dim = c.int("attention_head_dim", default=2 * self.n_embd // self.n_head)
        if self.attn_in != 2 * self.n_embd or self.n_head % self.n_head_kv:
            raise UnsupportedError(f"{c.path}: attention_hidden_size {self.attn_in} must be 2 x hidden_size, and "
                                   f"num_key_value_heads {self.n_head_kv} must divide num_attention_heads {self.n_head}")
        self.n_ff = c.int("intermediate_size")
        self.tied = c.flag("tie_word_embeddings", True)
        # tied: one block (the first hybrid layer's); untied: one per hybrid layer (docs/specs/more-hybrids.md §7.2)
        self.n_mem = 1 if self.tied or not self.hybrid else len(self.hybrid)

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def _keys(self) -> None:
        key, p = self.key, self.plan
        bmap = shared_block_map(self)
        p.kv += shared_attention_kv(self, bmap) + [   # no RoPE keys: Zamba's attention has none
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.INNER_SIZE), self.d_inner),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_state),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.dt_rank),
            kv_u32(key(Keys.SSM.HEAD_COUNT), self.n_mh),
            kv_arr_i32(key(Keys.Attention.LAYER_INDICES), list(self.hybrid)),
            kv_u32(key(Keys.Zamba2.SHARED_BLOCK_COUNT), self.n_mem),
            kv_arr_i32(key(Keys.Zamba2.SHARED_BLOCK_MAP), bmap),
        ]
        # the shared block's MLP act (ZambaMLP ACT2FN[hidden_act]); written only when not gelu
        p.kv += ffn_act_kv(self.cfg.path, self.cfg.d, key, default="gelu")
        # hidden_mamba_act: the Mamba conv's act (causal_conv1d_fn activation=); the gate z's is F.silu, fixed.
        # Written only when not silu
        p.kv += ssm_act_kv(self.cfg.path, self.cfg.d, key, attr="hidden_mamba_act")

    def _shared_block(self, b: int, st: str) -> None:
        D, F = self.n_embd, self.n_ff
        copy_shared_attention(self, b, st)
        self.copy(tn(T.SHARED_FFN_GATE, b), st + "feed_forward.gate_proj.weight", (F, D))
        self.copy(tn(T.SHARED_FFN_UP, b), st + "feed_forward.up_proj.weight", (F, D))
        self.copy(tn(T.SHARED_FFN_DOWN, b), st + "feed_forward.down_proj.weight", (D, F))

    def _mamba(self, i: int, m: str) -> None:
        D, I, N, K, R, M = self.n_embd, self.d_inner, self.d_state, self.d_conv, self.dt_rank, self.n_mh
        Dm = I // M
        # HF splits in_proj's output with view(B, I, 2, T): x_c is row 2c, z_c row 2c + 1
        deint = lambda: np.concatenate([np.arange(0, 2 * I, 2), np.arange(1, 2 * I, 2)])  # noqa: E731
        self.copy(tn(T.SSM_IN, i), m + "in_proj.weight", (2 * I, D), perm=deint, block=2 * I,
                  note="rows de-interleaved: [x (I) | z (I)]")
        proj_bias = self.cfg.flag("mamba_proj_bias", False)
        if proj_bias:   # one row of 2I, its columns de-interleaved as the weight's rows
            self.copy(tn(T.SSM_IN, i, ".bias"), m + "in_proj.bias", (2 * I,), why="mamba_proj_bias is true",
                      note="de-interleaved: [x (I) | z (I)]").col_perm = deint()
        self.copy(tn(T.SSM_CONV1D, i), m + "conv1d.weight", (I, 1, K), (I, K), note="squeeze [C,1,K] -> [C,K]")
        if self.cfg.flag("mamba_conv_bias", True):
            self.copy(tn(T.SSM_CONV1D, i, ".bias"), m + "conv1d.bias", (I,))
        xs, dts = (M, R + 2 * N, Dm), (M, Dm, R)
        self.copy(tn(T.SSM_X, i), m + "x_proj_weight", xs, xs if M > 1 else xs[1:], note="one matrix per Mamba head")
        self.copy(tn(T.SSM_DT, i), m + "dt_proj_weight", dts, dts if M > 1 else dts[1:], note="one matrix per Mamba head")
        self.copy(tn(T.SSM_DT, i, ".bias"), m + "dt_proj_bias", (M, Dm), (I,), note="heads flattened")
        # the runtime wants A itself; HF stores log(-A) for the parametrisation A = -exp(A_log)
        self.copy(tn(T.SSM_A, i, ""), m + "A_log", (M, Dm, N), (I, N), op="neg_exp", note="A = -exp(A_log), heads flattened")
        self.copy(tn(T.SSM_D, i, ""), m + "D", (M, Dm), (I,), note="heads flattened")
        self.copy(tn(T.SSM_OUT, i), m + "out_proj.weight", (D, I))
        if proj_bias:
            self.copy(tn(T.SSM_OUT, i, ".bias"), m + "out_proj.bias", (D,), why="mamba_proj_bias is true")

    def _block_owners(self) -> dict[int, int]:
        """Shared block b -> the hybrid layer whose ``shared_transf`` it is."""
        if self.n_mem == 1:
            return {0: self.hybrid[0]} if self.hybrid else {}
        owners = {}
        for j, i in enumerate(self.hybrid):
            if not self.has(f"model.layers.{i}.shared_transf.input_layernorm.weight"):
                raise InputError(f"{self.hf.path}: layer {i} has no shared block ('model.layers.{i}.shared_transf.*'): "
                                 f"with tie_word_embeddings false every hybrid layer of a Zamba checkpoint has its own "
                                 f"(transformers unties them), and this one is missing")
            owners[j] = i
        return owners

    def build(self):
        self.read_hparams()
        self._keys()
        D = self.n_embd
        self.copy(tn(T.TOKEN_EMBD), "model.embed_tokens.weight", (self.n_vocab, D))
        owner = self._block_owners()
        for b, i in sorted(owner.items()):
            self._shared_block(b, f"model.layers.{i}.shared_transf.")
        for i in range(self.n_layer):
            pre = f"model.layers.{i}."
            if i in self.hybrid:
                self.copy(tn(T.SHARED_LINEAR, i), pre + "linear.weight", (D, D))
                pre += "mamba_decoder."
            self.copy(tn(T.ATTN_NORM, i), pre + "input_layernorm.weight", (D,))
            self._mamba(i, pre + "mamba.")
        owners = set(owner.values())
        for name in list(self.hf.tensors):   # tied checkpoints that store the later copies too
            if ".shared_transf." in name and name not in self._taken and int(name.split(".")[2]) not in owners:
                self.omit(name, "tied to the first hybrid layer's shared block")
        self.copy(tn(T.OUTPUT_NORM), "model.final_layernorm.weight", (D,))
        self.tied_output("model.embed_tokens.weight", "lm_head.weight", self.n_vocab, D, tie_default=True)
        self.check_leftovers()
        return self.plan
