"""Mamba2ForCausalLM -> GGUF ``mamba2`` (llama.cpp's Mamba2Model converter: same keys, names, data).

Glossary: D = hidden_size, d_inner = expand * D = H * P, H = num_heads, P = head_dim,
G = n_groups, N = d_state, K = d_conv, C = d_inner + 2 G N (conv channels: x, B, C).

HF tensor (numpy shape)                         GGUF tensor
backbone.embeddings.weight [V, D]               token_embd.weight
backbone.layers.i.norm.weight [D]               blk.i.attn_norm.weight
  mixer.in_proj.weight [2 d_inner + 2GN + H, D] blk.i.ssm_in.weight      (z, xBC, dt)
  mixer.in_proj.bias (use_bias)                 blk.i.ssm_in.bias (ours: not in llama.cpp's mamba2)
  mixer.conv1d.weight [C, 1, K] / bias [C]      blk.i.ssm_conv1d.weight [C, K] / .bias (zeros when use_conv_bias is false)
  mixer.dt_bias [H]                             blk.i.ssm_dt.bias
  mixer.A_log [H]                               blk.i.ssm_a [H, 1] = -exp(A_log)
  mixer.D [H]                                   blk.i.ssm_d [H, 1]
  mixer.norm.weight [d_inner]                   blk.i.ssm_norm.weight [G, d_inner / G]
  mixer.out_proj.weight [D, d_inner]            blk.i.ssm_out.weight
  mixer.out_proj.bias (use_bias)                blk.i.ssm_out.bias (ours)
backbone.norm_f.weight [D]                      output_norm.weight
lm_head.weight [V, D]                           output.weight (omitted when tied)
"""
from __future__ import annotations

import math

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.base import Family
from toolkit.convert.activation import ssm_act_kv
from toolkit.convert.config_keys import ConfigKeys, json_number
from toolkit.convert.plan import kv_f32, kv_u32
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import ARCH_MAMBA2, Keys

_L = r"backbone\.layers\.\d+\."


class Mamba2Family(Family):
    hf_archs = ("Mamba2ForCausalLM",)
    families = ("Mamba-2",)
    arch = ARCH_MAMBA2
    hf_configs = ("Mamba2Config",)
    config_keys = ConfigKeys.of(
        "num_heads head_dim vocab_size hidden_size state_size num_hidden_layers layer_norm_epsilon expand conv_kernel "
        "n_groups tie_word_embeddings use_bias use_conv_bias time_step_limit hidden_act",
        irrelevant={"time_step_rank": "not used by HF's Mamba-2 mixer"})
    known = (
        r"backbone\.embeddings\.weight", r"backbone\.norm_f\.weight", r"lm_head\.weight",
        _L + r"norm\.weight",
        _L + r"mixer\.(A_log|D|dt_bias|conv1d\.weight|conv1d\.bias|in_proj\.(weight|bias)|norm\.weight|out_proj\.(weight|bias))",
    )

    def read_hparams(self) -> None:
        c = self.cfg
        self.n_embd = c.int("hidden_size", "d_model")
        self.n_layer = self.layer_count("num_hidden_layers", "n_layer")
        self.n_vocab = c.int("vocab_size")
        self.d_conv = c.int("conv_kernel", "d_conv", default=4)
        self.d_state = c.int("state_size", "d_state", default=128)
        self.n_group = c.int("n_groups", default=1)
        self.eps = c.eps("layer_norm_epsilon", "rms_norm_eps", default=1e-5)
        expand = c.float("expand", default=2)
        if expand <= 0:
            raise InputError(f"{c.path}: key 'expand' = {expand} must be positive")
        self.d_inner = c.int("intermediate_size", "d_inner", default=int(expand * self.n_embd))
        self.head_dim = c.int("head_dim", default=64)
        self.conv_bias = c.flag("use_conv_bias", True)    # false: no conv1d.bias (zeros written)
        self.proj_bias = c.flag("use_bias", False)        # in_proj / out_proj biases
        self.n_head = c.int("num_heads", default=self.d_inner // self.head_dim)
        if self.n_head * self.head_dim != self.d_inner:
            raise InputError(f"{c.path}: num_heads {self.n_head} x head_dim {self.head_dim} != expand x hidden_size = {self.d_inner}")
        if self.n_head % self.n_group:
            raise InputError(f"{c.path}: n_groups {self.n_group} does not divide num_heads {self.n_head}")

    def n_vocab_rows(self) -> int:
        return self.n_vocab

    def build(self):
        self.read_hparams()
        key = self.key
        p = self.plan
        # llama.cpp Mamba2Model.set_gguf_parameters, same keys and order
        p.kv += [
            kv_u32(key(Keys.LLM.CONTEXT_LENGTH), 2**20),
            kv_u32(key(Keys.LLM.EMBEDDING_LENGTH), self.n_embd),
            kv_u32(key(Keys.LLM.FEED_FORWARD_LENGTH), 0),
            kv_u32(key(Keys.Attention.HEAD_COUNT), 0),
            kv_u32(key(Keys.LLM.BLOCK_COUNT), self.n_layer),
            kv_u32(key(Keys.SSM.CONV_KERNEL), self.d_conv),
            kv_u32(key(Keys.SSM.INNER_SIZE), self.d_inner),
            kv_u32(key(Keys.SSM.STATE_SIZE), self.d_state),
            kv_u32(key(Keys.SSM.TIME_STEP_RANK), self.n_head),
            kv_u32(key(Keys.SSM.GROUP_COUNT), self.n_group),
            kv_f32(key(Keys.Attention.LAYERNORM_RMS_EPS), self.eps),
            kv_u32(key(Keys.SSM.HEAD_DIM), self.head_dim),   # ours; llama.cpp derives it
        ] + dt_limit_kv(self)
        # the conv's act (HF causal_conv1d_fn(..., activation=hidden_act); the gated norm's is F.silu, fixed)
        p.kv += ssm_act_kv(self.cfg.path, self.cfg.d, key)
        D = self.n_embd
        self.copy(tn(T.TOKEN_EMBD), "backbone.embeddings.weight", (self.n_vocab, D))
        for i in range(self.n_layer):
            pre = f"backbone.layers.{i}."
            self.copy(tn(T.ATTN_NORM, i), pre + "norm.weight", (D,))
            emit_mamba2_mixer(self, i, pre + "mixer.", D, self.d_inner, self.d_state, self.n_group,
                              self.n_head, self.d_conv, self.conv_bias, self.proj_bias)
        self.copy(tn(T.OUTPUT_NORM), "backbone.norm_f.weight", (D,))
        self.tied_output("backbone.embeddings.weight", "lm_head.weight", self.n_vocab, D, tie_default=False)
        self.check_leftovers()
        return p


def dt_limit_kv(fam: Family, floor: float | None = None) -> list:
    """The dt clamp keys ``ssm.dt_min`` / ``ssm.dt_max`` (ours: llama.cpp's Mamba-2 scan has no
    clamp) of HF's chunked scan, dt = clamp(softplus(dt + dt_bias), lo, hi) (``dt_limit``).

    floor None: (lo, hi) is config.json's ``time_step_limit`` (Mamba-2, Bamba / Granite 4.0-H,
    Falcon-H1; absent or null: (0, inf)); else (floor, inf) (Nemotron-H: its mixer sets dt_limit
    = (time_step_min, inf) and never reads time_step_limit).  Each key is written only where it
    clamps (lo > 0, hi finite), so a file without a clamp is the one written before.  HF applies
    the clamp in its prompt (chunked) pass, not in its one-token decode step
    (mamba2_selective_state_update takes no dt_limit); the runtime applies it at every token.
    """
    c = fam.cfg
    if floor is not None:
        lo, hi = floor, math.inf
    else:
        v = c.d.get("time_step_limit")
        if v is None:
            return []
        lim = [json_number(x) for x in v] if isinstance(v, (list, tuple)) else None
        if (lim is None or len(lim) != 2 or any(isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x)
                                               for x in lim)):
            raise InputError(f"{c.path}: key 'time_step_limit' must be two numbers [min, max], got {v!r}")
        lo, hi = float(lim[0]), float(lim[1])
    if not math.isfinite(lo) and lo > 0:
        raise UnsupportedError(f"{c.path}: key 'time_step_limit' = {[lo, hi]}: an infinite dt floor is not supported")
    if not hi > 0:
        raise UnsupportedError(f"{c.path}: key 'time_step_limit' = {[lo, hi]}: a dt ceiling <= 0 (every dt {hi}) "
                               "is not supported")
    key = fam.key
    out = []
    if lo > 0:   # softplus >= 0: a floor <= 0 clamps nothing
        out.append(kv_f32(key(Keys.SSM.DT_MIN), lo))
    if math.isfinite(hi):
        out.append(kv_f32(key(Keys.SSM.DT_MAX), hi))
    return out


def emit_mamba2_mixer(fam: Family, i: int, m: str, D: int, d_inner: int, N: int, G: int, H: int, K: int,
                      conv_bias: bool = True, proj_bias: bool = False) -> None:
    """The Mamba-2 mixer tensors of layer ``i`` (HF prefix ``m``), shared by mamba2 and granitehybrid.

    conv_bias:  HF use_conv_bias / mamba_conv_bias; false: the checkpoint has no conv1d.bias and
                ssm_conv1d.bias is written as zeros (llama.cpp's loader requires it; the sum is the same)
    proj_bias:  HF use_bias / mamba_proj_bias: in_proj / out_proj biases as blk.i.ssm_in.bias [W] /
                blk.i.ssm_out.bias [D] (ours: llama.cpp's mamba2 graph has none)
    """
    C = d_inner + 2 * G * N
    W = 2 * d_inner + 2 * G * N + H
    fam.copy(tn(T.SSM_IN, i), m + "in_proj.weight", (W, D))
    if proj_bias:
        fam.copy(tn(T.SSM_IN, i, ".bias"), m + "in_proj.bias", (W,), why="the projection-bias switch is true")
    conv = fam.copy(tn(T.SSM_CONV1D, i), m + "conv1d.weight", (C, 1, K), (C, K), note="squeeze [C,1,K] -> [C,K]")
    if conv_bias:
        fam.copy(tn(T.SSM_CONV1D, i, ".bias"), m + "conv1d.bias", (C,), why="the conv-bias switch is true")
    else:
        fam.zeros(tn(T.SSM_CONV1D, i, ".bias"), conv, C, note="zeros: the conv-bias switch is false")
    fam.copy(tn(T.SSM_DT, i, ".bias"), m + "dt_bias", (H,))
    # A as a column [H, 1], the shape llama.cpp's Mamba-2 graph broadcasts; A = -exp(A_log)
    fam.copy(tn(T.SSM_A, i, ""), m + "A_log", (H,), (H, 1), op="neg_exp", note="A = -exp(A_log), [H] -> [H,1]")
    fam.copy(tn(T.SSM_D, i, ""), m + "D", (H,), (H, 1), note="[H] -> [H,1]")
    # the gated RMSNorm is per group: [d_inner] -> [G, d_inner / G]
    fam.copy(tn(T.SSM_NORM, i), m + "norm.weight", (d_inner,), (G, d_inner // G), note="[d_inner] -> [G, d_inner/G]")
    fam.copy(tn(T.SSM_OUT, i), m + "out_proj.weight", (D, d_inner))
    if proj_bias:
        fam.copy(tn(T.SSM_OUT, i, ".bias"), m + "out_proj.bias", (D,), why="the projection-bias switch is true")
