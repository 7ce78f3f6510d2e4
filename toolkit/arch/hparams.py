"""Typed, validated hyper-parameters of the supported architectures, read from GGUF metadata.

Glossary (Mamba's symbols, llama.cpp's keys):
    n_embd    D, model width                      {arch}.embedding_length
    n_layer   L, blocks run                       {arch}.block_count - {arch}.nextn_predict_layers
    d_inner   recurrent width (expand * D)        {arch}.ssm.inner_size
    d_state   N, SSM state size                   {arch}.ssm.state_size
    d_conv    causal conv kernel width            {arch}.ssm.conv_kernel
    dt_rank   Mamba-1: rank of the dt projection; Mamba-2: number of heads H
                                                  {arch}.ssm.time_step_rank
    n_group   G, Mamba-2 B/C groups               {arch}.ssm.group_count
    head_dim  P = d_inner / H (Mamba-2)           {arch}.ssm.head_dim (ours) or derived

Gated delta net (Qwen3-Next / Qwen3.5; docs/specs/gdn-family.md) on the same fields:
    d_state = Dk key head dim, ssm_head_dim = Dv value head dim ({arch}.ssm.value_head_dim, ours,
    else Dk), n_group = Hk key heads, ssm_n_head = dt_rank = Hv value heads, d_inner = Hv Dv,
    d_conv = K; gdn_gate_act: the gated norm's activation of z (0 silu, 1 sigmoid).

Falcon-H1 (falcon-h1): every layer is parallel (attention and Mamba-2 on the same input), so
it counts among both attention_layers and recurrent_layers; ssm_norm_before_gate is
{arch}.ssm.norm_before_gate (ours, HF mamba_norm_before_gate).
LFM2 short conv (:func:`toolkit.arch.readers.read_shortconv`): d_conv = K
({arch}.shortconv.l_cache), d_inner = D (its conv channels), d_state = dt_rank = 0.

Layer kinds come from the file: ``{arch}.attention.layer_indices`` when present, else the
per-layer ``{arch}.attention.head_count_kv`` array (0 = recurrent), never from the name.
Which keys a family has is the architecture table's (:mod:`toolkit.arch.table`) business: its
row lists the readers (:mod:`toolkit.arch.readers`) that fill an :class:`HParams`.
"""
from __future__ import annotations

from dataclasses import asdict, make_dataclass
from typing import Any

from toolkit.arch import fields as F

from toolkit.arch.kinds import LayerKind
from toolkit.arch.readers import KeyReader
from toolkit.arch.table import RUNTIME_ARCHES, arch_spec
from toolkit.errors import UnsupportedError


class _HParamsMethods:
    """The hparams of one model; fields that a family lacks keep their defaults.

    The fields, their types, defaults and order are :data:`toolkit.arch.fields.HPARAMS`' rows
    (one declaration per hparam: its GGUF key, range, C field); which of them reach the C
    runtime's ``tk_hparams`` is :mod:`toolkit.arch.abi`'s list, generated from the same rows.
    """

    @property
    def attention_layers(self) -> list[int]:
        """Layers with attention (and a KV cache): attention layers, parallel ones, zamba / zamba2's hybrid ones."""
        return [i for i, kd in enumerate(self.layer_kinds) if kd in (LayerKind.ATTENTION, LayerKind.PARALLEL,
                                                                     LayerKind.ZAMBA2_SHARED, LayerKind.QSA,
                                                                     LayerKind.ZAMBA_SHARED, LayerKind.MLA)]

    @property
    def recurrent_layers(self) -> list[int]:
        """Layers with recurrent state: every layer but the attention and mixer-less ones (parallel ones too)."""
        return [i for i, kd in enumerate(self.layer_kinds) if kd not in (LayerKind.ATTENTION, LayerKind.NONE, LayerKind.QSA,
                                                                          LayerKind.MLA)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["layer_kinds"] = [kd.name.lower() for kd in self.layer_kinds]
        d["ffn_kinds"] = [kd.name.lower() for kd in self.ffn_kinds]
        return d

    # ------------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, f) -> "HParams":
        """Read and validate from a :class:`toolkit.gguf_io.GGUFFile`, running the readers of the
        architecture's row of :mod:`toolkit.arch.table` in order.

        Raises:
            UnsupportedError: architecture not run here (lists the supported ones).
            InputError: a missing or inconsistent key (names the key and the file).
        """
        spec = arch_spec(f.arch)
        if spec is None or not spec.runs:
            raise UnsupportedError(f"{f.path}: architecture {f.arch!r} is not supported; supported: {', '.join(RUNTIME_ARCHES)}")
        hp = cls(arch=f.arch, n_vocab=0, n_embd=0, n_layer=0, n_ctx_train=0, rms_eps=0.0, layer_kinds=[], ffn_kinds=[])
        r = KeyReader(f, f.arch)
        for read in spec.readers:
            read(r, hp, spec)
        return hp


HParams = make_dataclass("HParams", [F.field_spec(h) for h in F.hparams_fields()], bases=(_HParamsMethods,))
HParams.__module__ = __name__
HParams.__doc__ = _HParamsMethods.__doc__


# ---- which fields a model uses (``toolkit info``) ---------------------------------------------
def used_fields(hp: HParams) -> list[str]:
    """The fields of ``hp`` its model uses, in declaration order: the common ones, those of its
    layer and FFN kinds (no SSM fields without recurrent layers, no MoE fields without experts,
    no attention fields without attention), and any other field whose value is not the default
    (Granite's multipliers, qwen4exp's hyper-connections and PLE)."""
    # LayerKind and FFNKind values overlap (IntEnum): compare them with their class
    have = {"all"} | {(type(k), k) for k in (*hp.layer_kinds, *hp.ffn_kinds)} | ({"attention"} if hp.attention_layers else set())
    want = {h.name for h in F.hparams_fields() if have & {k if isinstance(k, str) else (type(k), k) for k in h.kinds}}
    blank = HParams(arch=hp.arch, n_vocab=0, n_embd=0, n_layer=0, n_ctx_train=0, rms_eps=0.0, layer_kinds=[], ffn_kinds=[])
    cur, default = asdict(hp), asdict(blank)
    return [k for k in cur if k in want or cur[k] != default[k]]
