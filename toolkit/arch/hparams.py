"""Typed, validated hyper-parameters of the supported architectures, read from GGUF metadata.

Glossary (Mamba's symbols, llama.cpp's keys):
    n_embd    D, model width                      {arch}.embedding_length
    n_layer   L, blocks                           {arch}.block_count
    d_inner   recurrent width (expand * D)        {arch}.ssm.inner_size
    d_state   N, SSM state size                   {arch}.ssm.state_size
    d_conv    causal conv kernel width            {arch}.ssm.conv_kernel
    dt_rank   Mamba-1: rank of the dt projection; Mamba-2: number of heads H
                                                  {arch}.ssm.time_step_rank
    n_group   G, Mamba-2 B/C groups               {arch}.ssm.group_count
    head_dim  P = d_inner / H (Mamba-2)           {arch}.ssm.head_dim (ours) or derived

Layer kinds come from the file: ``{arch}.attention.layer_indices`` when present, else the
per-layer ``{arch}.attention.head_count_kv`` array (0 = recurrent), never from the name.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, asdict
from typing import Any

from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io.constants import (
    ARCH_GRANITE_HYBRID, ARCH_JAMBA, ARCH_MAMBA, ARCH_MAMBA2, SUPPORTED_ARCHES, Keys, k,
)


# value kinds of the hparam keys that are not int32 (for the type check in HParams.from_gguf)
_FLOAT_KEYS = {Keys.Attention.LAYERNORM_RMS_EPS, Keys.Rope.FREQ_BASE, Keys.Attention.SCALE,
               Keys.LLM.EMBEDDING_SCALE, Keys.LLM.RESIDUAL_SCALE, Keys.LLM.LOGIT_SCALE}
_BOOL_KEYS = {Keys.SSM.DT_B_C_RMS, Keys.Rope.SCALING_FINETUNED}
_LIST_KEYS = {Keys.Attention.HEAD_COUNT_KV, Keys.Attention.LAYER_INDICES}


class LayerKind(enum.IntEnum):
    """Mixer of one block.  Values are shared with the C runtime (tk_layer_kind)."""

    MAMBA1 = 0
    MAMBA2 = 1
    ATTENTION = 2


class FFNKind(enum.IntEnum):
    """Feed-forward part of one block.  Values are shared with the C runtime (tk_ffn_kind)."""

    NONE = 0
    DENSE = 1   # SwiGLU: down(silu(gate(x)) * up(x))
    MOE = 2     # top-k routed SwiGLU experts (+ shared expert when present)


@dataclass
class HParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_ctx_train: int
    rms_eps: float
    layer_kinds: list[LayerKind]
    ffn_kinds: list[FFNKind]
    # recurrent
    d_conv: int = 0
    d_inner: int = 0
    d_state: int = 0
    dt_rank: int = 0
    n_group: int = 1
    ssm_n_head: int = 0          # Mamba-2 heads (== dt_rank)
    ssm_head_dim: int = 0        # Mamba-2 P
    dt_b_c_rms: bool = False     # Falcon-Mamba style dt/B/C RMS norms (no weights)
    # attention
    n_head: int = 0
    n_head_kv: list[int] = field(default_factory=list)   # per layer, 0 on recurrent layers
    head_dim: int = 0
    n_rot: int = 0
    rope_freq_base: float = 10000.0
    use_rope: bool = True
    attention_scale: float = 0.0  # 0 -> 1/sqrt(head_dim)
    # ffn
    n_ff: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_shexp: int = 0
    # granite multipliers
    embedding_scale: float = 1.0
    residual_scale: float = 1.0
    logit_scale: float = 1.0

    @property
    def attention_layers(self) -> list[int]:
        return [i for i, kd in enumerate(self.layer_kinds) if kd == LayerKind.ATTENTION]

    @property
    def recurrent_layers(self) -> list[int]:
        return [i for i, kd in enumerate(self.layer_kinds) if kd != LayerKind.ATTENTION]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["layer_kinds"] = [kd.name.lower() for kd in self.layer_kinds]
        d["ffn_kinds"] = [kd.name.lower() for kd in self.ffn_kinds]
        return d

    # ------------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, f) -> "HParams":
        """Read and validate from a :class:`toolkit.gguf_io.GGUFFile`.

        Raises:
            UnsupportedError: architecture not supported (lists the supported ones).
            InputError: a missing or inconsistent key (names the key and the file).
        """
        arch = f.arch
        if arch not in SUPPORTED_ARCHES:
            raise UnsupportedError(f"{f.path}: architecture {arch!r} is not supported; supported: {', '.join(SUPPORTED_ARCHES)}")

        def bad(key: str, why: str) -> InputError:
            return InputError(f"{f.path}: key {k(key, arch)!r} {why}")

        def typed(key: str, v: Any) -> Any:
            # every hparam is a number (or, for two keys, a per-layer list of ints); a value of
            # another GGUF type, or an int that does not fit the C runtime's int32, is bad input
            if v is None:
                return v
            if key in _LIST_KEYS and isinstance(v, list):
                if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**31 for x in v):
                    raise bad(key, f"= {str(v)[:60]} must list integers in [0, 2**31)")
                return v
            if key in _BOOL_KEYS:
                ok = isinstance(v, (bool, int))
            elif key in _FLOAT_KEYS:
                ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            else:
                ok = isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31
            if not ok:
                raise bad(key, f"= {str(v)[:60]!s} ({type(v).__name__}) is not a valid value "
                               f"(expected {'a boolean' if key in _BOOL_KEYS else 'a number' if key in _FLOAT_KEYS else 'an int32'})")
            return v

        def req(key: str) -> Any:
            return typed(key, f.require(k(key, arch)))

        def opt(key: str, default: Any) -> Any:
            return typed(key, f.get(k(key, arch), default))

        n_layer = int(req(Keys.LLM.BLOCK_COUNT))
        n_embd = int(req(Keys.LLM.EMBEDDING_LENGTH))
        if n_layer <= 0 or n_layer > 4096:
            raise bad(Keys.LLM.BLOCK_COUNT, f"= {n_layer} is out of range")
        if n_embd <= 0:
            raise bad(Keys.LLM.EMBEDDING_LENGTH, f"= {n_embd} is out of range")
        tok = f.tensors.get("token_embd.weight")
        n_vocab = opt(Keys.LLM.VOCAB_SIZE, None)
        if n_vocab is None:
            if tok is None:
                raise InputError(f"{f.path}: missing tensor 'token_embd.weight' (needed for the vocabulary size)")
            n_vocab = tok.shape[1] if len(tok.shape) == 2 else 0
        if not 0 < n_vocab < 2**31:
            raise InputError(f"{f.path}: vocabulary size {n_vocab} (token_embd.weight / vocab_size) is out of range")
        hp = cls(
            arch=arch, n_vocab=int(n_vocab), n_embd=n_embd, n_layer=n_layer,
            n_ctx_train=int(opt(Keys.LLM.CONTEXT_LENGTH, 0)),
            rms_eps=float(req(Keys.Attention.LAYERNORM_RMS_EPS)),
            layer_kinds=[], ffn_kinds=[],
        )

        # ---- layer kinds -----------------------------------------------------------
        recurrent = LayerKind.MAMBA1 if arch in (ARCH_MAMBA, ARCH_JAMBA) else LayerKind.MAMBA2
        hkv = opt(Keys.Attention.HEAD_COUNT_KV, None)
        idx = opt(Keys.Attention.LAYER_INDICES, None)
        if arch in (ARCH_MAMBA, ARCH_MAMBA2):
            attn = set()
        elif idx is not None:
            idx = list(idx) if isinstance(idx, (list, tuple)) else [idx]
            if any(not (0 <= int(i) < n_layer) for i in idx):
                raise bad(Keys.Attention.LAYER_INDICES, f"= {idx} has an index outside [0, {n_layer})")
            attn = {int(i) for i in idx}
        elif isinstance(hkv, (list, tuple)):
            if len(hkv) != n_layer:
                raise bad(Keys.Attention.HEAD_COUNT_KV, f"has {len(hkv)} entries, block_count is {n_layer}")
            attn = {i for i, v in enumerate(hkv) if int(v) > 0}
        else:
            raise InputError(f"{f.path}: hybrid model without {k(Keys.Attention.LAYER_INDICES, arch)!r} or a per-layer "
                             f"{k(Keys.Attention.HEAD_COUNT_KV, arch)!r} array: cannot tell attention layers from recurrent ones")
        hp.layer_kinds = [LayerKind.ATTENTION if i in attn else recurrent for i in range(n_layer)]

        # ---- recurrent hparams ------------------------------------------------------
        hp.d_conv = int(req(Keys.SSM.CONV_KERNEL))
        hp.d_inner = int(req(Keys.SSM.INNER_SIZE))
        hp.d_state = int(req(Keys.SSM.STATE_SIZE))
        hp.dt_rank = int(req(Keys.SSM.TIME_STEP_RANK))
        hp.dt_b_c_rms = bool(opt(Keys.SSM.DT_B_C_RMS, False))
        for key, v in ((Keys.SSM.CONV_KERNEL, hp.d_conv), (Keys.SSM.INNER_SIZE, hp.d_inner),
                       (Keys.SSM.STATE_SIZE, hp.d_state), (Keys.SSM.TIME_STEP_RANK, hp.dt_rank)):
            if v <= 0 or v > (1 << 24):
                raise bad(key, f"= {v} is out of range")
        if recurrent == LayerKind.MAMBA2:
            hp.n_group = int(opt(Keys.SSM.GROUP_COUNT, 1))
            hp.ssm_n_head = hp.dt_rank
            if hp.d_inner % hp.ssm_n_head:
                raise bad(Keys.SSM.INNER_SIZE, f"= {hp.d_inner} is not a multiple of the head count {hp.ssm_n_head} (time_step_rank)")
            hp.ssm_head_dim = int(opt(Keys.SSM.HEAD_DIM, hp.d_inner // hp.ssm_n_head))
            if hp.ssm_head_dim * hp.ssm_n_head != hp.d_inner:
                raise bad(Keys.SSM.HEAD_DIM, f"= {hp.ssm_head_dim} disagrees with inner_size / time_step_rank = {hp.d_inner // hp.ssm_n_head}")
            if hp.n_group <= 0 or hp.ssm_n_head % hp.n_group:
                raise bad(Keys.SSM.GROUP_COUNT, f"= {hp.n_group} does not divide the head count {hp.ssm_n_head}")

        # ---- attention --------------------------------------------------------------
        if attn:
            hp.n_head = int(req(Keys.Attention.HEAD_COUNT))
            if hp.n_head <= 0 or n_embd % hp.n_head:
                raise bad(Keys.Attention.HEAD_COUNT, f"= {hp.n_head} does not divide embedding_length {n_embd}")
            hp.head_dim = int(opt(Keys.Attention.KEY_LENGTH, n_embd // hp.n_head))
            if isinstance(hkv, (list, tuple)):
                per = [int(v) for v in hkv]
                if len(per) != n_layer:
                    raise bad(Keys.Attention.HEAD_COUNT_KV, f"has {len(per)} entries, block_count is {n_layer}")
            else:
                per = [int(hkv if hkv is not None else hp.n_head)] * n_layer
            hp.n_head_kv = [per[i] if i in attn else 0 for i in range(n_layer)]
            for i in attn:
                if hp.n_head_kv[i] <= 0 or hp.n_head % hp.n_head_kv[i]:
                    raise bad(Keys.Attention.HEAD_COUNT_KV, f"[{i}] = {hp.n_head_kv[i]} must divide head_count {hp.n_head} on attention layer {i}")
            hp.use_rope = bool(opt(Keys.Rope.SCALING_FINETUNED, True)) and arch != ARCH_JAMBA
            hp.n_rot = int(opt(Keys.Rope.DIMENSION_COUNT, hp.head_dim)) if hp.use_rope else 0
            if hp.n_rot < 0 or hp.n_rot > hp.head_dim or hp.n_rot % 2:
                raise bad(Keys.Rope.DIMENSION_COUNT, f"= {hp.n_rot} must be even and at most the head dim {hp.head_dim}")
            hp.rope_freq_base = float(opt(Keys.Rope.FREQ_BASE, 10000.0))
            hp.attention_scale = float(opt(Keys.Attention.SCALE, 0.0))
        else:
            hp.n_head_kv = [0] * n_layer

        # ---- ffn --------------------------------------------------------------------
        hp.n_ff = int(opt(Keys.LLM.FEED_FORWARD_LENGTH, 0))
        hp.n_expert = int(opt(Keys.LLM.EXPERT_COUNT, 0))
        hp.n_expert_used = int(opt(Keys.LLM.EXPERT_USED_COUNT, 0))
        hp.n_ff_shexp = int(opt(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, 0))
        if hp.n_expert and not (0 < hp.n_expert_used <= hp.n_expert):
            raise bad(Keys.LLM.EXPERT_USED_COUNT, f"= {hp.n_expert_used} must be in [1, expert_count={hp.n_expert}]")
        for i in range(n_layer):
            if f"blk.{i}.ffn_gate_inp.weight" in f.tensors:
                if not hp.n_expert:
                    raise InputError(f"{f.path}: tensor 'blk.{i}.ffn_gate_inp.weight' present but key {k(Keys.LLM.EXPERT_COUNT, arch)!r} is missing")
                hp.ffn_kinds.append(FFNKind.MOE)
            elif f"blk.{i}.ffn_up.weight" in f.tensors:
                hp.ffn_kinds.append(FFNKind.DENSE)
            else:
                hp.ffn_kinds.append(FFNKind.NONE)

        # ---- granite multipliers ---------------------------------------------------
        if arch == ARCH_GRANITE_HYBRID:
            hp.embedding_scale = float(opt(Keys.LLM.EMBEDDING_SCALE, 1.0)) or 1.0
            hp.residual_scale = float(opt(Keys.LLM.RESIDUAL_SCALE, 1.0)) or 1.0
            hp.logit_scale = float(opt(Keys.LLM.LOGIT_SCALE, 1.0)) or 1.0
        if not math.isfinite(hp.rms_eps) or hp.rms_eps < 0:
            raise bad(Keys.Attention.LAYERNORM_RMS_EPS, f"= {hp.rms_eps} is not a valid epsilon")
        return hp
