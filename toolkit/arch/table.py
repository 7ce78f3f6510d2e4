"""The architecture table: one :class:`ArchSpec` row per GGUF ``general.architecture``.

A family is data, not branches (DESIGN.md).  A row says:

- ``c_id``: its ``tk_arch`` id in the C runtime (None: convert/info only, the runtime refuses
  it with the "not supported" message);
- ``readers``: the hparams readers (:mod:`toolkit.arch.readers`) that apply, in order;
- the layer kinds: ``mixers`` a model may have, ``recurrent`` (the mixer of every layer the file
  does not mark as attention), ``attention_from_file`` (hybrid: attention layers from
  ``attention.layer_indices`` / per-layer ``attention.head_count_kv``); ``ffns`` the FFN kinds
  it may have (per layer from the tensors, see :func:`toolkit.arch.readers.read_ffn`);
- ``rope`` (attention layers rotate q/k), ``rope_neox`` (pairs (i, i + n_rot/2) instead of
  adjacent ones), ``moe_softmax_topk`` / ``moe_renorm`` (routing rule), ``ssm_dt_b_c_norms``
  (Mamba-1's dt/B/C RMSNorms have weights: Jamba), ``residual``;
- the gated-delta-net families' choices: ``gdn_head_tiled`` (v-head h reads K-head h % Hk, the
  tiled order of qwen35 GGUFs, else h // (Hv/Hk), qwen3next's grouped order; spec §1.4.2, B19),
  ``attn_q_gate`` / ``attn_qk_norm`` (gated attention: attn_q rows per head [q_h | gate_h],
  RMSNorm of q and k per head), ``ffn_norm_post_attn`` (the FFN pre-norm is
  ``blk.N.post_attention_norm``, not ``blk.N.ffn_norm``);
- the tensors the C loader (``toolkit/native/model.c``) binds: :meth:`ArchSpec.expected_tensors`.

Used by :meth:`toolkit.arch.HParams.from_gguf`, ``toolkit info`` and the runtime's
``tk_hparams`` filling (:mod:`toolkit.arch.abi`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from toolkit.arch import readers as R
from toolkit.arch.kinds import FFNKind, LayerKind, Residual
from toolkit.arch.tensor_names import T
from toolkit.gguf_io.constants import (
    ARCH_GRANITE_HYBRID, ARCH_JAMBA, ARCH_MAMBA, ARCH_MAMBA2, ARCH_QWEN3NEXT, ARCH_QWEN35, ARCH_QWEN35MOE,
    ARCH_QWEN4EXP, ARCH_NEMOTRON_H, ARCH_NEMOTRON_H_MOE,
)

Reader = Callable[..., None]   # (KeyReader, HParams, ArchSpec) -> None


@dataclass(frozen=True)
class TensorSet:
    """Tensor name templates (``blk.{bid}.…`` with their suffix) a part of a model has.

    ``required``: the loader fails without each; ``optional``: groups bound when present (a
    group's members come together, e.g. the three shared-expert matrices).
    """

    required: tuple[str, ...] = ()
    optional: tuple[tuple[str, ...], ...] = ()


def _w(template: str) -> str:
    return template + ".weight"


def _b(template: str) -> str:
    return template + ".bias"


# what model.c binds, per part of the model ---------------------------------------------------
GLOBAL_TENSORS = TensorSet(required=(_w(T.TOKEN_EMBD), _w(T.OUTPUT_NORM)),
                           optional=((_w(T.OUTPUT),),))                 # absent: tied embeddings
BLOCK_TENSORS = TensorSet(required=(_w(T.ATTN_NORM),))                  # every block's pre-norm
_MAMBA1_CORE = (_w(T.SSM_IN), _w(T.SSM_CONV1D), _w(T.SSM_X), _w(T.SSM_DT), T.SSM_A, T.SSM_D, _w(T.SSM_OUT))
_DT_B_C_NORMS = (_w(T.SSM_DT_NORM), _w(T.SSM_B_NORM), _w(T.SSM_C_NORM))
MAMBA1_TENSORS = TensorSet(required=_MAMBA1_CORE,
                           optional=((_b(T.SSM_CONV1D),), (_b(T.SSM_DT),)) + tuple((n,) for n in _DT_B_C_NORMS))
JAMBA_MAMBA1_TENSORS = TensorSet(required=_MAMBA1_CORE + _DT_B_C_NORMS,  # Jamba's dt/B/C norms have weights
                                 optional=((_b(T.SSM_CONV1D),), (_b(T.SSM_DT),)))
MAMBA2_TENSORS = TensorSet(required=(_w(T.SSM_IN), _w(T.SSM_CONV1D), _b(T.SSM_DT), T.SSM_A, T.SSM_D,
                                     _w(T.SSM_NORM), _w(T.SSM_OUT)),
                           optional=((_b(T.SSM_CONV1D),),))
ATTENTION_TENSORS = TensorSet(required=(_w(T.ATTN_Q), _w(T.ATTN_K), _w(T.ATTN_V), _w(T.ATTN_OUT)))  # biases refused
# gated attention (attn_qk_norm): the same plus the per-head q / k RMSNorm weights [head_dim]
GATED_ATTENTION_TENSORS = TensorSet(required=ATTENTION_TENSORS.required + (_w(T.ATTN_Q_NORM), _w(T.ATTN_K_NORM)))
# gated delta net: fused q|k|v, the output gate z, beta / alpha (qwen35: two matrices; qwen3next:
# ssm_ba, [b(r) | a(r)] per K-head), conv (no bias), dt bias, A, the gated norm, out
_GDN_CORE = (_w(T.ATTN_QKV), _w(T.ATTN_GATE), _w(T.SSM_CONV1D), _b(T.SSM_DT), T.SSM_A, _w(T.SSM_NORM), _w(T.SSM_OUT))
GDN_TENSORS = TensorSet(required=_GDN_CORE + (_w(T.SSM_BETA), _w(T.SSM_ALPHA)))
GDN_BA_TENSORS = TensorSet(required=_GDN_CORE + (_w(T.SSM_BETA_ALPHA),))
FFN_TENSORS = {
    FFNKind.NONE: TensorSet(),
    FFNKind.DENSE: TensorSet(required=(_w(T.FFN_NORM), _w(T.FFN_UP), _w(T.FFN_GATE), _w(T.FFN_DOWN))),
    FFNKind.MOE: TensorSet(required=(_w(T.FFN_NORM), _w(T.FFN_GATE_INP), _w(T.FFN_UP_EXP), _w(T.FFN_GATE_EXP),
                                     _w(T.FFN_DOWN_EXP)),
                           optional=((_w(T.FFN_UP_SHEXP), _w(T.FFN_GATE_SHEXP), _w(T.FFN_DOWN_SHEXP)),
                                     (_w(T.FFN_GATE_INP_SHEXP),))),   # shared expert scaled by sigmoid(w . x)
}
MIXER_TENSORS = {LayerKind.MAMBA1: MAMBA1_TENSORS, LayerKind.MAMBA2: MAMBA2_TENSORS,
                 LayerKind.ATTENTION: ATTENTION_TENSORS, LayerKind.GDN: GDN_TENSORS, LayerKind.NONE: TensorSet()}
# Nemotron-H: a block is one mixer or one FFN under the block's attn_norm (no ffn_norm); ReLU²
# MLP and experts without gate matrices; the MoE's expert choice bias exp_probs_b
NEMOTRON_FFN_TENSORS = {
    FFNKind.NONE: TensorSet(),
    FFNKind.RELU2: TensorSet(required=(_w(T.FFN_UP), _w(T.FFN_DOWN))),
    FFNKind.MOE: TensorSet(required=(_w(T.FFN_GATE_INP), _b(T.FFN_EXP_PROBS_B), _w(T.FFN_UP_EXP), _w(T.FFN_DOWN_EXP)),
                           optional=((_w(T.FFN_UP_SHEXP), _w(T.FFN_DOWN_SHEXP)),)),
}
# the Qwen3-Next / Qwen3.5 blocks: gated attention, GDN (with ssm_ba for qwen3next)
QWEN35_MIXER_TENSORS = {**MIXER_TENSORS, LayerKind.ATTENTION: GATED_ATTENTION_TENSORS}
QWEN3NEXT_MIXER_TENSORS = {**QWEN35_MIXER_TENSORS, LayerKind.GDN: GDN_BA_TENSORS}


@dataclass(frozen=True)
class ArchSpec:
    """One architecture: see the module docstring for the fields."""

    name: str
    c_id: int | None
    readers: tuple[Reader, ...] = ()
    mixers: tuple[LayerKind, ...] = ()
    recurrent: LayerKind | None = None
    attention_from_file: bool = False
    ffns: tuple[FFNKind, ...] = (FFNKind.NONE,)
    rope: bool = True
    rope_neox: bool = False             # NEOX pairs (i, i + n_rot/2) (Qwen), else adjacent pairs
    moe_softmax_topk: bool = False
    moe_renorm: bool = False            # with moe_softmax_topk: the k weights renormalised to sum 1 (Qwen)
    ssm_dt_b_c_norms: bool = False      # Mamba-1 dt, B, C each through an RMSNorm with weights (Jamba)
    gdn_head_tiled: bool = False        # GDN v-head h reads K-head h % Hk (tiled), else h // (Hv/Hk)
    attn_q_gate: bool = False           # attn_q rows per head [q_h | gate_h]; output * sigmoid(gate)
    attn_qk_norm: bool = False          # attn_q_norm / attn_k_norm: RMSNorm of q and k per head
    ffn_norm_post_attn: bool = False    # the FFN pre-norm is blk.N.post_attention_norm
    dense_ffn: FFNKind = FFNKind.DENSE  # the kind of a layer with blk.N.ffn_up (RELU2: Nemotron-H)
    moe_sigmoid: bool = False           # sigmoid router scores, choice biased by exp_probs_b, groups (Nemotron-H)
    moe_relu2: bool = False             # experts / shared expert are ReLU² up/down, no gate matrices
    residual: Residual = Residual.PLAIN
    mixer_tensors: dict[LayerKind, TensorSet] = field(default_factory=lambda: dict(MIXER_TENSORS))
    ffn_tensors: dict[FFNKind, TensorSet] = field(default_factory=lambda: dict(FFN_TENSORS))
    note: str = ""

    @property
    def runs(self) -> bool:
        """True when the C runtime runs this architecture (it has a tk_arch id)."""
        return self.c_id is not None

    def expected_tensors(self, layer_kinds: Sequence[LayerKind],
                         ffn_kinds: Sequence[FFNKind]) -> tuple[set[str], list[set[str]]]:
        """(required names, optional groups) of a model with these per-layer kinds.

        Raises:
            ValueError: the row is convert-only (the runtime binds no tensors of it).
        """
        if not self.runs:
            raise ValueError(f"architecture {self.name!r} is convert/info only: no tensors are bound")
        req = set(GLOBAL_TENSORS.required)
        opt = [set(g) for g in GLOBAL_TENSORS.optional]
        ffn_norm = {_w(T.FFN_NORM): _w(T.ATTN_POST_NORM)} if self.ffn_norm_post_attn else {}
        for i, (kd, fk) in enumerate(zip(layer_kinds, ffn_kinds)):
            for ts in (BLOCK_TENSORS, self.mixer_tensors[kd], self.ffn_tensors[fk]):
                req |= {ffn_norm.get(t, t).format(bid=i) for t in ts.required}
                opt += [{t.format(bid=i) for t in g} for g in ts.optional]
        return req, opt


# every row that runs: common keys, layer kinds, the recurrent sizes (required even when all
# layers are attention, as they always were)
_BASE_READERS = (R.read_common, R.read_layer_kinds, R.read_ssm)
_QWEN_READERS = _BASE_READERS + (R.read_gdn, R.read_attention, R.read_ffn)
# Qwen3-Next / Qwen3.5 gated attention (q/k RMSNorm, sigmoid gate, NEOX partial RoPE: text
# M-RoPE is NEOX, spec §2.2, B15) and the post_attention_norm FFN pre-norm
_QWEN_FLAGS = dict(rope_neox=True, attn_q_gate=True, attn_qk_norm=True, ffn_norm_post_attn=True)

# Nemotron-H: attention layers as every hybrid's, then the FFN-only ones from the per-layer
# feed_forward_length (read_nemotron_layers)
_NEMOTRON_READERS = _BASE_READERS + (R.read_nemotron_layers, R.read_mamba2, R.read_attention, R.read_ffn,
                                     R.check_nemotron_layers, R.read_moe_routing, R.check_rms_eps)
_NEMOTRON_FLAGS = dict(dense_ffn=FFNKind.RELU2, moe_sigmoid=True, moe_relu2=True, ffn_tensors=NEMOTRON_FFN_TENSORS)

ARCHES: tuple[ArchSpec, ...] = (
    ArchSpec(ARCH_MAMBA, c_id=0,
             readers=_BASE_READERS + (R.read_ffn, R.check_rms_eps),
             mixers=(LayerKind.MAMBA1,), recurrent=LayerKind.MAMBA1),
    ArchSpec(ARCH_MAMBA2, c_id=1,
             readers=_BASE_READERS + (R.read_mamba2, R.read_ffn, R.check_rms_eps),
             mixers=(LayerKind.MAMBA2,), recurrent=LayerKind.MAMBA2),
    ArchSpec(ARCH_GRANITE_HYBRID, c_id=2,
             readers=_BASE_READERS + (R.read_mamba2, R.read_attention, R.read_ffn, R.read_multipliers,
                                        R.check_rms_eps),
             mixers=(LayerKind.MAMBA2, LayerKind.ATTENTION), recurrent=LayerKind.MAMBA2, attention_from_file=True,
             ffns=(FFNKind.DENSE, FFNKind.MOE),
             # GraniteMoeHybridTopKGating: top-k of the logits, softmax over the k
             moe_softmax_topk=False, residual=Residual.MULTIPLIERS,
             note="Bamba and Granite 4.0-H"),
    ArchSpec(ARCH_JAMBA, c_id=3,
             readers=_BASE_READERS + (R.read_attention, R.read_ffn, R.check_rms_eps),
             mixers=(LayerKind.MAMBA1, LayerKind.ATTENTION), recurrent=LayerKind.MAMBA1, attention_from_file=True,
             ffns=(FFNKind.DENSE, FFNKind.MOE), rope=False,
             # JambaSparseMoeBlock: softmax over all experts, then top-k, not renormalised
             moe_softmax_topk=True, ssm_dt_b_c_norms=True,
             mixer_tensors={**MIXER_TENSORS, LayerKind.MAMBA1: JAMBA_MAMBA1_TENSORS}),
    # gated delta net + gated attention (spec gdn-family.md): attention layers from
    # attention.recurrent_layers or full_attention_interval; MoE: softmax, top-k, renormalised
    ArchSpec(ARCH_QWEN3NEXT, c_id=4,
             readers=_QWEN_READERS + (R.check_rms_eps,),
             mixers=(LayerKind.GDN, LayerKind.ATTENTION), recurrent=LayerKind.GDN, attention_from_file=True,
             ffns=(FFNKind.DENSE, FFNKind.MOE), moe_softmax_topk=True, moe_renorm=True, **_QWEN_FLAGS,
             gdn_head_tiled=False, mixer_tensors=QWEN3NEXT_MIXER_TENSORS, note="Qwen3-Next"),
    ArchSpec(ARCH_QWEN35, c_id=5,
             readers=_QWEN_READERS + (R.check_rope_sections, R.check_rms_eps),
             mixers=(LayerKind.GDN, LayerKind.ATTENTION), recurrent=LayerKind.GDN, attention_from_file=True,
             ffns=(FFNKind.DENSE, FFNKind.MOE), moe_softmax_topk=True, moe_renorm=True, **_QWEN_FLAGS,
             gdn_head_tiled=True, mixer_tensors=QWEN35_MIXER_TENSORS, note="Qwen3.5 (text)"),
    ArchSpec(ARCH_QWEN35MOE, c_id=6,
             readers=_QWEN_READERS + (R.check_rope_sections, R.check_rms_eps),
             mixers=(LayerKind.GDN, LayerKind.ATTENTION), recurrent=LayerKind.GDN, attention_from_file=True,
             ffns=(FFNKind.DENSE, FFNKind.MOE), moe_softmax_topk=True, moe_renorm=True, **_QWEN_FLAGS,
             gdn_head_tiled=True, mixer_tensors=QWEN35_MIXER_TENSORS, note="Qwen3.5 MoE (text)"),
    # Nemotron-H: one mixer (Mamba-2, attention without RoPE) or one FFN (ReLU² MLP, MoE) per
    # block; NemotronHTopkRouter: sigmoid scores, bias-corrected choice, groups, scaled weights
    ArchSpec(ARCH_NEMOTRON_H, c_id=9, readers=_NEMOTRON_READERS,
             mixers=(LayerKind.MAMBA2, LayerKind.ATTENTION, LayerKind.NONE), recurrent=LayerKind.MAMBA2,
             attention_from_file=True, ffns=(FFNKind.NONE, FFNKind.RELU2), rope=False, **_NEMOTRON_FLAGS,
             note="Nemotron-H"),
    ArchSpec(ARCH_NEMOTRON_H_MOE, c_id=10, readers=_NEMOTRON_READERS,
             mixers=(LayerKind.MAMBA2, LayerKind.ATTENTION, LayerKind.NONE), recurrent=LayerKind.MAMBA2,
             attention_from_file=True, ffns=(FFNKind.NONE, FFNKind.RELU2, FFNKind.MOE), rope=False,
             **_NEMOTRON_FLAGS, note="Nemotron-H MoE (Nemotron 3)"),
    ArchSpec(ARCH_QWEN4EXP, c_id=None, residual=Residual.HYPER_CONNECTIONS,
             note="convert/info only: gated delta net + QSA attention, hyper-connections, PLE"),
)

_BY_NAME = {a.name: a for a in ARCHES}

# the architectures the runtime runs, in table order (the "supported: ..." list of messages)
RUNTIME_ARCHES: tuple[str, ...] = tuple(a.name for a in ARCHES if a.runs)


def arch_spec(name: str) -> ArchSpec | None:
    """The row of ``general.architecture`` ``name``, or None when the table has none."""
    return _BY_NAME.get(name)
