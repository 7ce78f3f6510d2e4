"""``tk_hparams`` (toolkit/native/toolkit.h): where each C field's value comes from.

The runtime fills the struct from this list alone (``toolkit.runtime.model``), and
tests/unit/test_arch_table.py holds it equal to the cffi layout with :func:`struct_mismatches`:
every C field is filled, every :class:`toolkit.arch.HParams` field reaches C or is listed in
:data:`PYTHON_ONLY` with the reason, and the value kinds agree.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable

from toolkit.arch.table import ArchSpec

# C type spelling (as cffi reports it: ffi.typeof(...).fields[i][1].type.cname) -> value kind
C_KINDS = {"int32_t": "int32", "float": "float", "int32_t *": "int32[]", "int32_t const *": "int32[]",
           "uint64_t *": "uint64[]", "uint64_t const *": "uint64[]"}


@dataclass(frozen=True)
class CField:
    """One ``tk_hparams`` field: its C name, value kind and source.

    ``kind``: ``"int32"``, ``"float"``, ``"int32[]"`` (a per-layer array of n_layer ints; an
    empty list is passed as NULL) or ``"uint64[]"`` (exact unsigned 64-bit values; empty: NULL).
    ``source``: an :class:`HParams` attribute, or ``"spec.ATTR"`` for an :class:`ArchSpec` one.
    """

    name: str
    kind: str
    source: str = ""

    @property
    def src(self) -> str:
        return self.source or self.name

    def value(self, hp: Any, spec: ArchSpec) -> Any:
        """The raw value for this field from ``hp`` (HParams) and its row ``spec``."""
        if self.src.startswith("spec."):
            return getattr(spec, self.src[5:])
        return getattr(hp, self.src)


def _i(name: str, source: str = "") -> CField:
    return CField(name, "int32", source)


def _f(name: str) -> CField:
    return CField(name, "float")


def _a(name: str) -> CField:
    return CField(name, "int32[]")


TK_HPARAMS: tuple[CField, ...] = (
    _i("arch", "spec.c_id"),
    _i("n_vocab"), _i("n_embd"), _i("n_layer"), _f("rms_eps"),
    # recurrent
    _i("d_conv"), _i("d_inner"), _i("d_state"), _i("dt_rank"), _i("n_group"), _i("ssm_n_head"),
    _i("ssm_head_dim"), _i("dt_b_c_rms"), _i("ssm_dt_b_c_norms", "spec.ssm_dt_b_c_norms"),
    # attention
    _i("n_head"), _i("head_dim"), _i("n_rot"), _f("rope_freq_base"), _i("use_rope"), _f("attention_scale"),
    # ffn
    _i("n_expert"), _i("n_expert_used"), _i("moe_softmax_topk", "spec.moe_softmax_topk"),
    # granite multipliers
    _f("embedding_scale"), _f("residual_scale"), _f("logit_scale"),
    # per layer
    _a("layer_kinds"), _a("ffn_kinds"), _a("n_head_kv"),
    # gated delta net families (appended: the fields above keep their offsets)
    _i("gdn_head_tiled", "spec.gdn_head_tiled"), _i("gdn_gate_act"), _i("rope_neox", "spec.rope_neox"),
    _i("attn_q_gate", "spec.attn_q_gate"), _i("attn_qk_norm", "spec.attn_qk_norm"),
    _i("ffn_norm_post_attn", "spec.ffn_norm_post_attn"), _i("moe_renorm", "spec.moe_renorm"),
    # Nemotron-H MoE routing (appended)
    _i("moe_sigmoid"), _i("moe_relu2", "spec.moe_relu2"), _i("moe_n_group"),
    _i("moe_topk_group"), _i("moe_weights_norm"), _f("moe_weights_scale"),
    # Falcon-H1 (appended)
    _i("ssm_norm_before_gate"), _i("ffn_norm_bare", "spec.ffn_norm_bare"),
    # LFM2 / LFM2-MoE (appended); the sigmoid routing fields above are shared with it
    _i("output_norm_embd", "spec.output_norm_embd"), _f("moe_weights_norm_eps"),
    # zamba2 (appended)
    _i("n_shared_block"), _f("ssm_dt_min"),
    # qwen4exp (appended)
    _i("hc_count"), _i("idx_n_head"), _i("idx_head_dim"), _i("idx_top_k"), _a("compress_ratios"), _a("ple_index"),
    _i("ple_ngram_size"), _i("ple_heads_per_ngram"), _i("ple_conv_kernel"), _i("ple_eos_token"), _i("ple_n_module"),
    CField("ple_consts", "uint64[]"),
    # FalconMamba (appended)
    _f("ssm_dt_b_c_eps"),
    # OLMo-Hybrid (appended)
    _f("gdn_beta_scale"), _f("gdn_norm_eps"), _i("attn_post_norm", "spec.attn_post_norm"),
    _i("attn_qk_norm_full", "spec.attn_qk_norm_full"), _i("gdn_qkv_apart", "spec.gdn_qkv_apart"),
    # sliding-window attention (appended)
    _i("n_swa"), _a("swa_layers"),
    # LFM3 (appended)
    _f("rope_freq_base_swa"), _i("rope_prop_rot"), _i("attn_head_gate"), _i("sandwich_norm"),
    # Lara-Mini (appended)
    _i("rope_swa_only"),
    # MiniMax-Text-01 (appended)
    _i("residual_normed"), _f("res_alpha_lin"), _f("res_alpha_full"), _f("res_alpha_mlp"),
    _f("res_beta_lin"), _f("res_beta_full"), _f("res_beta_mlp"),
    # RecurrentGemma (appended)
    _f("rglru_logit_softcap"), _i("rglru_attn_bias"),
    _i("kda_n_head"), _i("kda_head_dim"), _f("kda_l2_eps"), _f("kda_gate_lower_bound"),
    _i("mla_q_lora_rank"), _i("mla_kv_lora_rank"), _i("mla_dn"), _i("mla_dr"), _i("mla_dv"), _f("mla_norm_eps"),
    # GLM-5-Next mHC (appended)
    _i("hc_sinkhorn_iters"), _f("hc_eps"),
    # GLM-5-Next DSA k-pool indexer (appended)
    _i("dsa_kpool"), _i("dsa_select_tail"), _f("dsa_k_norm_eps"), _a("dsa_full"),
    # GLM-5-Next SwiGLU clamp (appended)
    _f("swiglu_clamp_exp"), _f("swiglu_clamp_shexp"),
    # Ling 3 (appended)
    _i("kda_a_positive"), _i("mla_rope"),
)

# HParams fields the C side does not take, and why
PYTHON_ONLY: dict[str, str] = {
    "arch": "the name; C gets the row's tk_arch id (spec.c_id)",
    "n_ctx_train": "informational (info, default context size)",
    "n_ff": "C reads FFN widths from the ffn_up / ffn_up_exps tensors",
    "n_ff_shexp": "C reads the shared expert width from ffn_up_shexp",
}


def struct_mismatches(c_fields: Iterable[tuple[str, str]], py_fields: Iterable[str],
                      table: Iterable[CField] = TK_HPARAMS,
                      python_only: dict[str, str] | None = None) -> list[str]:
    """What disagrees between the C struct, the HParams fields and the field list; [] when all agree.

    Args:
        c_fields: (name, C type spelling) of every ``tk_hparams`` field, in any order.
        py_fields: names of every HParams field.
        table: the field list (default :data:`TK_HPARAMS`).
        python_only: HParams fields deliberately not passed (default :data:`PYTHON_ONLY`).
    Returns:
        one line per problem.  Raises nothing.
    """
    python_only = PYTHON_ONLY if python_only is None else python_only
    c = dict(c_fields)
    py = set(py_fields)
    spec_attrs = {f.name for f in dataclasses.fields(ArchSpec)}
    rows = {f.name: f for f in table}
    out = [f"tk_hparams.{n} ({t}) is not filled from Python" for n, t in c.items() if n not in rows]
    for f in rows.values():
        if f.name not in c:
            out.append(f"field list fills tk_hparams.{f.name}, which the C struct lacks")
        elif C_KINDS.get(c[f.name]) != f.kind:
            out.append(f"tk_hparams.{f.name} is {c[f.name]} in C, {f.kind} in the field list")
        ok = f.src[5:] in spec_attrs if f.src.startswith("spec.") else f.src in py
        if not ok:
            out.append(f"tk_hparams.{f.name}: source {f.src!r} is not a field of "
                       f"{'ArchSpec' if f.src.startswith('spec.') else 'HParams'}")
    used = {f.src for f in rows.values()}
    out += [f"HParams.{n} is not passed to C (nor listed as Python-only)"
            for n in sorted(py - used - set(python_only))]
    out += [f"HParams.{n} is listed as Python-only but also passed to C" for n in sorted(set(python_only) & used)]
    out += [f"Python-only {n!r} is not an HParams field" for n in sorted(set(python_only) - py)]
    return out
