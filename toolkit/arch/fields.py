"""Every hyper-parameter, declared once: its Python field, C field, GGUF key, type, default, range.

One :class:`HParam` row per field.  From this table come:

- :class:`toolkit.arch.HParams` (its dataclass fields, defaults and order: :mod:`toolkit.arch.hparams`);
- the ``tk_hparams`` field list (:data:`toolkit.arch.abi.TK_HPARAMS`: where each C field's value
  comes from);
- the C struct itself, ``tk_hparams`` and its per-kind sub-structs in ``toolkit/native/toolkit.h``
  (:func:`c_struct`, written there by ``python tools/gen_hparams.py``; tests/unit/test_arch_table.py
  fails when the header's block is not what this table gives, and when cffi's layout disagrees);
- the plain readers: a field with a ``key`` is read by :meth:`toolkit.arch.readers.KeyReader.fill`
  (type, default, range and their one-line errors), and the key's GGUF value type by
  :meth:`toolkit.arch.readers.KeyReader.typed`.  Rules across keys stay in the hand-written
  readers of :mod:`toolkit.arch.readers`.

A field the row of the architecture table sets (not the file) has ``source="spec.ATTR"``: it is
not an HParams field, and C gets the :class:`toolkit.arch.table.ArchSpec` attribute.  A field C
does not take has ``c=None`` (``why`` says why).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from toolkit.arch.kinds import FFNKind, LayerKind
from toolkit.gguf_io.constants import Keys

REQUIRED: Any = object()   # default of the fields every HParams is built with (no default)

# value type -> (C spelling, Python type)
TYPES = {"int32": ("int32_t", int), "bool": ("int32_t", bool), "float": ("float", float),
         "int32[]": ("const int32_t *", list), "uint64[]": ("const uint64_t *", list), "str": ("const char *", str)}

# the C sub-structs of tk_hparams, in struct order, with what they hold ("" is the top level)
GROUPS: dict[str, str] = {
    "": "the model",
    "block": "the block recipe (the architecture row's, toolkit/arch/table.py): where the norms sit, how a "
             "branch joins the residual, the norm tensors' names (model.c binds, forward.c runs them)",
    "ssm": "recurrent sizes: Mamba-1/2, and the conv / width of the gated delta net, short conv, RG-LRU and KDA "
           "(a GDN layer reads d_state = Dk, head_dim = Dv, n_group = Hk, n_head = Hv, d_inner = Hv Dv, d_conv = K)",
    "gdn": "gated delta net (mixer_gdn.c)",
    "attn": "attention: heads, RoPE, gates, norms, sliding window (mixer_attention.c, memory_iswa.c)",
    "moe": "routed experts (ffn_moe.c)",
    "ffn": "SwiGLU clamps (GLM-5-Next; 0: none)",
    "zamba": "Zamba / Zamba2 shared blocks (mixer_zamba.c, mixer_zamba2.c)",
    "idx": "sparse attention indexer: QSA (mixer_qsa.c) and DSA (dsa.c)",
    "dsa": "GLM-5-Next's DSA k-pool indexer (dsa.c); heads, head dim and budget are idx's",
    "ple": "qwen4exp's per-layer n-gram embedding (ple.c)",
    "hc": "hyper-connections (residual_hc.c): count > 1 qwen4exp's low-rank mix, sinkhorn_iters > 0 GLM-5-Next's mHC",
    "kda": "Kimi Delta Attention (mixer_kda.c): n heads of D (key dim = value dim), C = n D channels; "
           "d_conv is ssm's",
    "mla": "multi-head latent attention (mixer_mla.c), attn.n_head heads",
    "res": "block.residual 1 (MiniMax-Text-01): x = alpha * rmsnorm(x) + beta * branch(rmsnorm(x)), the factors "
           "per branch kind: a recurrent mixer (no KV cache), an attention mixer, the FFN",
}


@dataclass(frozen=True)
class HParam:
    """One hyper-parameter.

    ``name``: the :class:`HParams` attribute (or, with ``source``, the C field's name less its group).
    ``type``: ``"int32"``, ``"bool"`` (int32_t 0/1 in C), ``"float"``, ``"int32[]"`` (n_layer ints,
    NULL when empty) or ``"uint64[]"``.  ``default``: the HParams default (``REQUIRED``: none).
    ``group``: the C sub-struct (:data:`GROUPS`); ``c``: the member name in it (default: ``name``
    less a ``{group}_`` prefix; None: Python only, for the reason ``why``).
    ``source``: ``"spec.ATTR"`` when C takes the architecture row's attribute, not an HParams field.
    ``key``: the GGUF key template (``Keys.*``) a plain reader fills it from; ``absent``: its value
    when the key is absent (``REQUIRED``: the key must be there); ``lo`` / ``hi``: the inclusive
    range a read value must lie in, ``gt`` an exclusive lower bound (floats: also finite); ``zero_is_absent``: a stored 0 reads as
    ``absent`` (Granite's multipliers); ``key_type``: the key's value type where it is not ``type``
    (a GGUF bool read into an int32 0 / 1).
    ``kinds``: the layer / FFN kinds that use the field (``toolkit info`` lists it for them).
    ``doc``: what it is, with units and symbols; it is the C comment too.
    """

    name: str
    type: str
    default: Any
    doc: str
    group: str = ""
    c: str | None = ""
    source: str = ""
    why: str = ""
    key: str | None = None
    absent: Any = REQUIRED
    lo: float | None = None
    hi: float | None = None
    gt: float | None = None
    zero_is_absent: bool = False
    key_type: str = ""
    kinds: tuple = ()

    @property
    def c_name(self) -> str | None:
        """The C member name inside its group, or None (Python only)."""
        if self.c is None:
            return None
        if self.c:
            return self.c
        pre = self.group + "_"
        return self.name[len(pre):] if self.group and self.name.startswith(pre) else self.name

    @property
    def c_path(self) -> str | None:
        """``group.member`` (or ``member`` at the top level) as C code spells it after ``hp->``."""
        n = self.c_name
        return None if n is None else (f"{self.group}.{n}" if self.group else n)

    @property
    def in_hparams(self) -> bool:
        return not self.source


def _i(name, default, doc, **kw) -> HParam:
    return HParam(name, "int32", default, doc, **kw)


def _b(name, default, doc, **kw) -> HParam:
    return HParam(name, "bool", default, doc, **kw)


def _f(name, default, doc, **kw) -> HParam:
    return HParam(name, "float", default, doc, **kw)


def _a(name, doc, **kw) -> HParam:
    return HParam(name, "int32[]", [], doc, **kw)


def _spec(name, group, doc, attr=None, c="") -> HParam:
    """A 0 / 1 field C takes from the architecture row's attribute (``attr``, default ``name``)."""
    return HParam(name, "bool", False, doc, group=group, c=c, source=f"spec.{attr or name}")


_K = Keys
_MAMBA2 = (LayerKind.MAMBA2, LayerKind.PARALLEL, LayerKind.ZAMBA2_SHARED)
_MAMBA = (LayerKind.MAMBA1,) + _MAMBA2
_SSM_HEADS = _MAMBA2 + (LayerKind.GDN,)
_ATTN = "attention"      # kinds marker: a model with attention layers ("all": every model)
_MOE = (FFNKind.MOE,)

# In HParams order (``toolkit info`` lists fields in this order); C groups them (:data:`GROUPS`).
HPARAMS: tuple[HParam, ...] = (
    _spec("arch", "", "tk_arch (the row's c_id)", attr="c_id"),
    HParam("arch", "str", REQUIRED, "general.architecture", c=None, why="the name; C gets the row's tk_arch id (spec.c_id)",
           kinds=("all",)),
    _i("n_vocab", REQUIRED, "vocabulary size", kinds=("all",)),
    _i("n_embd", REQUIRED, "D, model width", kinds=("all",)),
    _i("n_layer", REQUIRED, "L, blocks run (block_count - nextn_predict_layers)", kinds=("all",)),
    _i("n_ctx_train", REQUIRED, "training context", c=None, why="informational (info, default context size)",
       key=_K.LLM.CONTEXT_LENGTH, absent=0, lo=0, kinds=("all",)),
    _f("rms_eps", REQUIRED, "epsilon of the RMSNorms", key=_K.Attention.LAYERNORM_RMS_EPS, kinds=("all",)),
    HParam("layer_kinds", "int32[]", REQUIRED, "[n_layer] tk_layer_kind", kinds=("all",)),
    HParam("ffn_kinds", "int32[]", REQUIRED, "[n_layer] tk_ffn_kind", kinds=("all",)),
    # recurrent
    _i("d_conv", 0, "causal conv kernel width K", group="ssm", key=_K.SSM.CONV_KERNEL, lo=1, hi=64, kinds=_MAMBA + (LayerKind.GDN, LayerKind.SHORTCONV,
                                                                              LayerKind.KDA)),
    _i("d_inner", 0, "recurrent width (expand * D)", group="ssm", key=_K.SSM.INNER_SIZE, lo=1, hi=1 << 24, kinds=_MAMBA + (LayerKind.GDN, LayerKind.SHORTCONV)),
    _i("d_state", 0, "N, SSM state size", group="ssm", key=_K.SSM.STATE_SIZE, lo=1, hi=4096, kinds=_MAMBA + (LayerKind.GDN,)),
    _i("dt_rank", 0, "Mamba-1 dt rank; Mamba-2 number of heads H", group="ssm", key=_K.SSM.TIME_STEP_RANK, lo=1,
       hi=1 << 24, kinds=_MAMBA + (LayerKind.GDN,)),
    _i("n_group", 1, "G, Mamba-2 B/C groups", group="ssm", kinds=_SSM_HEADS),
    _i("ssm_n_head", 0, "H (Mamba-2); Mamba-1: heads with their own x_proj / dt_proj (Zamba; 0 or 1: one)",
       group="ssm", kinds=_SSM_HEADS),
    _i("ssm_head_dim", 0, "P (Mamba-2)", group="ssm", kinds=_SSM_HEADS),
    _b("dt_b_c_rms", False, "weightless RMS norm of dt, B, C (Falcon-Mamba)", group="ssm",
       key=_K.SSM.DT_B_C_RMS, absent=False, kinds=(LayerKind.MAMBA1,)),
    _f("ssm_dt_b_c_eps", 0.0, "epsilon of the Mamba-1 dt / B / C RMSNorms (dt_b_c_rms, dt_b_c_norms); 0: rms_eps",
       group="ssm", c="dt_b_c_eps", key=_K.SSM.DT_B_C_RMS_EPS),
    _i("gdn_gate_act", 0, "GDN gated norm's act(z): 0 silu, 1 sigmoid", group="gdn", kinds=(LayerKind.GDN,)),
    _f("gdn_beta_scale", 0.0, "GDN beta = sigmoid(b) * this (2: beta in (0, 2)); 0: 1", group="gdn",
       key=_K.SSM.BETA_SCALE, absent=1.0, gt=0.0),
    _f("gdn_norm_eps", 0.0, "epsilon of the GDN gated norm; 0: rms_eps", group="gdn"),
    _f("ssm_dt_min", 0.0, "Mamba-2 dt = min(max(softplus(dt + dt_bias), dt_min), dt_max) (HF's dt_limit: "
       "time_step_limit[0]; Zamba2 / Nemotron-H time_step_min); 0 = no floor", group="ssm",
       key=_K.SSM.DT_MIN, absent=0.0, lo=0.0, kinds=_MAMBA2),
    _f("ssm_dt_max", 0.0, "the Mamba-2 dt ceiling (HF time_step_limit[1]); 0 = none (HF's inf)", group="ssm",
       key=_K.SSM.DT_MAX, absent=0.0, lo=0.0, kinds=_MAMBA2),
    _b("ssm_norm_before_gate", False, "Mamba-2 gated norm: 1 y = rmsnorm(y) w * silu(z) (mamba_norm_before_gate); "
       "0 y = rmsnorm(y * silu(z)) w", group="ssm", c="norm_before_gate", key=_K.SSM.NORM_BEFORE_GATE, absent=False,
       kinds=_MAMBA2),
    # attention
    _i("n_head", 0, "query heads (also the RG-LRU gates' blocks and the lightning heads)", group="attn",
       kinds=(_ATTN,)),
    _a("n_head_kv", "[n_layer] KV heads, 0 on recurrent layers", kinds=("all",)),
    _i("head_dim", 0, "head dim", group="attn", kinds=(_ATTN,)),
    _i("n_rot", 0, "rotated dims per head (NORM mode: adjacent pairs); 0 = none", group="attn", kinds=(_ATTN,)),
    _f("rope_freq_base", 10000.0, "RoPE base", group="attn", key=_K.Rope.FREQ_BASE, absent=10000.0, kinds=(_ATTN,)),
    _b("use_rope", True, "RoPE on q / k", group="attn", kinds=(_ATTN,)),
    # RoPE scaling as llama.cpp's rope.scaling.* keys say it (read_rope_scaling; kernels/ops.c tk_rope_angles)
    _i("rope_scaling_type", 0, "rope.scaling.type: 0 none, 1 linear (every pair's angle * freq_scale), 2 yarn "
       "(ramped between scaled and unscaled over the pairs, cos/sin * 0.1 ln(1/freq_scale) + 1)", group="attn",
       kinds=(_ATTN,)),
    _f("rope_freq_scale", 1.0, "1 / rope.scaling.factor (linear, yarn)", group="attn", kinds=(_ATTN,)),
    _i("rope_orig_ctx", 0, "yarn: the pretraining context L (rope.scaling.original_context_length; absent: "
       "context_length)", group="attn", kinds=(_ATTN,)),
    _f("rope_yarn_beta_fast", 32.0, "yarn: the ramp starts at the pair turning beta_fast times over L "
       "(rope.scaling.yarn_beta_fast)", group="attn", key=_K.Rope.SCALING_YARN_BETA_FAST, absent=32.0, gt=0.0,
       kinds=(_ATTN,)),
    _f("rope_yarn_beta_slow", 1.0, "yarn: the ramp ends at the pair turning beta_slow times over L "
       "(rope.scaling.yarn_beta_slow)", group="attn", key=_K.Rope.SCALING_YARN_BETA_SLOW, absent=1.0, gt=0.0,
       kinds=(_ATTN,)),
    _f("rope_attn_factor", 1.0, "the rotated dims' cos/sin * this (rope.scaling.attn_factor; HF's "
       "attention_factor over yarn's own 0.1 ln(factor) + 1)", group="attn", key=_K.Rope.SCALING_ATTN_FACTOR,
       absent=1.0, gt=0.0, kinds=(_ATTN,)),
    _f("attention_scale", 0.0, "0 -> 1/sqrt(head_dim)", group="attn", c="scale", key=_K.Attention.SCALE, absent=0.0,
       kinds=(_ATTN,)),
    # ffn
    _i("n_ff", 0, "FFN width", c=None, why="C reads FFN widths from the ffn_up / ffn_up_exps tensors",
       kinds=(FFNKind.DENSE, FFNKind.RELU2)),
    _i("n_expert", 0, "experts", group="moe", key=_K.LLM.EXPERT_COUNT, absent=0, kinds=_MOE),
    _i("n_expert_used", 0, "experts per token", group="moe", key=_K.LLM.EXPERT_USED_COUNT, absent=0, kinds=_MOE),
    _i("n_ff_shexp", 0, "shared expert width", c=None, why="C reads the shared expert width from ffn_up_shexp",
       key=_K.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, absent=0, kinds=_MOE),
    _i("moe_latent_size", 0, "routed experts' latent width Dl (HF moe_latent_size; 0: none): x -> ffn_latent_down "
       "[D, Dl] -> experts in Dl -> ffn_latent_up [Dl, D]", group="moe", key=_K.LLM.MOE_LATENT_SIZE, absent=0,
       kinds=_MOE),
    _i("moe_n_group", 1, "expert groups (expert_group_count; <= 1: none)", group="moe", kinds=_MOE),
    _i("moe_topk_group", 1, "groups kept per token (expert_group_used_count)", group="moe", kinds=_MOE),
    _b("moe_sigmoid", False, "s = sigmoid(logits); choose top-k of s + exp_probs_b; weights = s", group="moe",
       kinds=_MOE),
    _b("moe_weights_norm", False, "with moe.sigmoid: weights / (sum of the k + weights_norm_eps) (expert_weights_norm)",
       group="moe", key=_K.LLM.EXPERT_WEIGHTS_NORM, kinds=_MOE),
    _b("moe_renorm", False, "with moe.softmax_topk: the k weights renormalised to sum 1 (the row's moe_renorm: Qwen, "
       "Lara-Mini, MiniMax; off where expert_weights_norm is false: HF norm_topk_prob false)", group="moe",
       c="renorm", kinds=_MOE),
    _f("moe_weights_norm_eps", 1e-20, "added to the sum of the k weights before renormalising (HF: 1e-20 "
       "Nemotron-H, 1e-6 LFM2-MoE)", group="moe", kinds=_MOE),
    _f("moe_weights_scale", 1.0, "with moe.sigmoid: weights * this (expert_weights_scale, routed_scaling_factor)",
       group="moe", key=_K.LLM.EXPERT_WEIGHTS_SCALE, absent=1.0, kinds=_MOE),
    # granite multipliers
    _f("embedding_scale", 1.0, "embeddings * this", key=_K.LLM.EMBEDDING_SCALE, absent=1.0, zero_is_absent=True),
    _f("residual_scale", 1.0, "each branch * this before it joins the residual", key=_K.LLM.RESIDUAL_SCALE,
       absent=1.0, zero_is_absent=True),
    _f("logit_scale", 1.0, "logits are divided by this", key=_K.LLM.LOGIT_SCALE, absent=1.0, zero_is_absent=True),
    # zamba2
    _i("n_shared_block", 0, "M shared blocks: the j-th hybrid layer runs shared.{j % M}", group="zamba",
       kinds=(LayerKind.ZAMBA2_SHARED, LayerKind.ZAMBA_SHARED)),
    # qwen4exp
    _i("hc_count", 0, "hyper-connection streams (0: the plain residual)", group="hc",
       key=_K.HyperConnection.COUNT, lo=1, hi=64),
    _i("idx_n_head", 0, "indexer query heads (attention.indexer.head_count)", group="idx",
       key=_K.Attention.Indexer.HEAD_COUNT, lo=1, hi=1 << 20, kinds=(LayerKind.QSA,)),
    _i("idx_head_dim", 0, "indexer head dim (attention.indexer.key_length)", group="idx",
       key=_K.Attention.Indexer.KEY_LENGTH, lo=1, hi=1 << 20, kinds=(LayerKind.QSA,)),
    _i("idx_top_k", 0, "indexer budget B in tokens (attention.indexer.top_k)", group="idx",
       key=_K.Attention.Indexer.TOP_K, kinds=(LayerKind.QSA,)),
    _a("compress_ratios", "[n_layer] QSA block size r per layer (attention.compress_ratios), or NULL", group="idx",
       kinds=(LayerKind.QSA,)),
    _a("ple_index", "[n_layer] PLE module of the layer (0, 1, ... in layer order) or -1; NULL: no PLE", group="ple",
       c="index"),
    _i("ple_ngram_size", 0, "n (ple.ngram_size)", group="ple", key=_K.PerLayerEmbedding.NGRAM_SIZE, lo=2, hi=32),
    _i("ple_heads_per_ngram", 0, "ple.heads_per_ngram; NH = (n - 1) heads_per_ngram table heads", group="ple",
       key=_K.PerLayerEmbedding.HEADS_PER_NGRAM, lo=1, hi=4096),
    _i("ple_conv_kernel", 0, "Kp (ple.conv_kernel)", group="ple", key=_K.PerLayerEmbedding.CONV_KERNEL, lo=1, hi=64),
    _i("ple_eos_token", 0, "ple.eos_token_id: cuts the n-gram context", group="ple"),
    _i("ple_n_module", 0, "PLE layers (modules)", group="ple"),
    HParam("ple_consts", "uint64[]", [], "per module: multipliers [n], head offsets [NH], head vocab sizes [NH]",
           group="ple", c="consts"),
    # sliding-window attention
    _i("n_swa", 0, "W: a query at position i sees the keys j with i - W < j <= i on a sliding layer", group="attn"),
    _a("swa_layers", "[n_layer] 1 = sliding (an attention layer; its KV cells keep only the window), or NULL",
       group="attn"),
    # LFM3
    _f("rope_freq_base_swa", 0.0, "RoPE base of the sliding-window layers; 0: rope_freq_base", group="attn",
       key=_K.Rope.FREQ_BASE_SWA),
    _i("rope_prop_rot", 0, "> 0: the other attention layers' proportional NEOX RoPE rotates only the pairs "
       "(i, i + n_rot/2), i < rope_prop_rot/2, at base^(-2i/n_rot); 0: every pair", group="attn"),
    _i("attn_head_gate", 0, "attn_gate [D, H]: head h's output * sigmoid(attn_gate x)_h (required)",
       group="attn"),
    # Lara-Mini
    _spec("rope_swa_only", "attn", "RoPE on the sliding-window layers (swa_layers) only; the other attention layers "
          "NoPE"),
    # MiniMax-Text-01
    _f("res_alpha_lin", 1.0, "alpha of a recurrent mixer's branch (MiniMax: lightning)", group="res", c="alpha_rec"),
    _f("res_alpha_full", 1.0, "alpha of an attention mixer's branch", group="res", c="alpha_attn"),
    _f("res_alpha_mlp", 1.0, "alpha of the FFN branch", group="res", c="alpha_ffn"),
    _f("res_beta_lin", 1.0, "beta of a recurrent mixer's branch", group="res", c="beta_rec"),
    _f("res_beta_full", 1.0, "beta of an attention mixer's branch", group="res", c="beta_attn"),
    _f("res_beta_mlp", 1.0, "beta of the FFN branch", group="res", c="beta_ffn"),
    # the logits' post-processing (after logit_scale)
    _f("logit_softcap", 0.0, "> 0: logits = cap tanh(logits / cap) (final_logit_softcapping); 0: none",
       key=_K.LLM.FINAL_LOGIT_SOFTCAPPING),
    # KDA
    _i("kda_n_head", 0, "n", group="kda", kinds=(LayerKind.KDA,)),
    _i("kda_head_dim", 0, "D", group="kda", key=_K.KDA.HEAD_DIM, lo=1, hi=4096, kinds=(LayerKind.KDA,)),
    _f("kda_l2_eps", 0.0, "epsilon of the q / k l2-norm: x (sum x^2 + eps)^-1/2 (HF 1e-6)", group="kda",
       key=_K.KDA.L2_NORM_EPS,
       kinds=(LayerKind.KDA,)),
    _f("kda_gate_lower_bound", 0.0, "0: g = ssm_a softplus(u) (kimi; ssm_a = -exp(A_log)); < 0: the bounded gate "
       "g = lb sigmoid(-ssm_a u) (glm5-next's storage of ssm_a)", group="kda", key=_K.KDA.GATE_LOWER_BOUND,
       kinds=(LayerKind.KDA,)),
    # MLA
    _i("mla_q_lora_rank", 0, "rq: q = attn_q_b rmsnorm(attn_q_a x); 0: q = attn_q x", group="mla",
       key=_K.KDA.Q_LORA_RANK, absent=0, lo=0, hi=65536, kinds=(LayerKind.MLA,)),
    _i("mla_kv_lora_rank", 0, "rkv: the latent c cached per token", group="mla", key=_K.KDA.KV_LORA_RANK, lo=1,
       hi=65536, kinds=(LayerKind.MLA,)),
    _i("mla_dn", 0, "nope head dim", group="mla", kinds=(LayerKind.MLA,)),
    _i("mla_dr", 0, "rope head dim (the rope part shared by the heads)", group="mla", kinds=(LayerKind.MLA,)),
    _i("mla_dv", 0, "value head dim", group="mla", key=_K.KDA.VALUE_LENGTH_MLA, lo=1, hi=65536,
       kinds=(LayerKind.MLA,)),
    _f("mla_norm_eps", 0.0, "epsilon of the q_a / kv_a RMSNorms", group="mla", key=_K.KDA.MLA_NORM_EPS,
       kinds=(LayerKind.MLA,)),
    # GLM-5-Next mHC
    _i("hc_sinkhorn_iters", 0, "Sinkhorn iterations (hyper_connection.sinkhorn_iterations, HF hc_sinkhorn_iters)",
       group="hc", key=_K.HyperConnection.SINKHORN_ITERATIONS, absent=20, lo=1, hi=1000),
    _f("hc_eps", 0.0, "HF hc_eps (hyper_connection.epsilon)", group="hc", key=_K.HyperConnection.EPSILON,
       absent=1e-6, lo=0.0),
    # GLM-5-Next DSA
    _i("dsa_kpool", 0, "kp tokens per pool (attention.indexer.kpool)", group="dsa", key=_K.Attention.Indexer.KPOOL,
       lo=1, hi=1 << 20),
    _i("dsa_select_tail", 0, "the incomplete tail pool is always attended (attention.indexer.kpool_select_tail)",
       group="dsa", key=_K.Attention.Indexer.KPOOL_SELECT_TAIL, absent=True, key_type="bool"),
    _f("dsa_k_norm_eps", 0.0, "the indexer key LayerNorm's epsilon (attention.layer_norm_epsilon)", group="dsa",
       key=_K.Attention.LAYERNORM_EPS),
    _a("dsa_full", "[n_layer] 1: the layer runs its own indexer, 0: it reuses the last one's "
       "(attention.indexer.types); NULL: no DSA", group="dsa"),
    # GLM-5-Next SwiGLU clamp
    _f("swiglu_clamp_exp", 0.0, "routed experts (llama.cpp's per-layer swiglu_clamp_exp; HF swiglu_limit)",
       group="ffn"),
    _f("swiglu_clamp_shexp", 0.0, "shared experts and dense MLPs (swiglu_clamp_shexp)", group="ffn"),
    _i("ffn_act", 0, "act of the gate in act(gate x) * up x, dense MLPs and experts (HF hidden_act; the ungated "
       "down(act(up x)) of Nemotron-H, the Zamba shared MLP, RecurrentGemma's MLP and y branch too): 0 silu, 1 gelu "
       "(erf), 2 gelu_tanh, 3 relu, 4 relu2, 5 quick_gelu, 6 sigmoid, 7 tanh (feed_forward.activation, ours; "
       "absent: the row's ffn_act)",
       group="ffn", c="act"),
    # Ling 3
    _i("kda_a_positive", 0, "ssm_a holds +exp(A_log) (bailingmoe3; kimi-linear, glm5-next: -exp)", group="kda"),
    _i("mla_rope", 0, "RoPE on q_rot and k_rot (NORM: adjacent pairs, attn.rope_freq_base)", group="mla"),
    # the mixers' conv activation (issue 43)
    _i("ssm_act", 0, "act after the causal conv of the Mamba-1 / Mamba-2 / GDN / KDA mixers (HF hidden_act, "
       "Nemotron-H mamba_hidden_act, Zamba hidden_mamba_act): TK_ACT_* as ffn_act, 0 silu (ssm.activation, ours)",
       group="ssm", c="act", kinds=_MAMBA + (LayerKind.GDN, LayerKind.KDA)),
    # the architecture row's choices (toolkit.arch.table.ArchSpec)
    _spec("ssm_dt_b_c_norms", "ssm", "Mamba-1 dt, B, C each through an RMSNorm with weights (Jamba; required "
          "tensors)", c="dt_b_c_norms"),
    _spec("moe_softmax_topk", "moe", "softmax over all experts then top-k, weights not renormalised (Jamba) unless "
          "moe.renorm; 0: top-k of the logits then softmax over the k (Granite)", c="softmax_topk"),
    _spec("moe_relu2", "moe", "experts and shared expert are down(relu(up(x))^2), no gate tensors", c="relu2"),
    _spec("gdn_head_tiled", "gdn", "v-head h reads K-head h % Hk (tiled, qwen35 GGUFs); 0: h / (Hv/Hk) (grouped, "
          "qwen3next)"),
    _spec("gdn_qkv_apart", "gdn", "GDN q / k / v from attn_q, attn_k, attn_v and ssm_conv1d_{q,k,v}; 0: attn_qkv, "
          "ssm_conv1d"),
    _spec("rope_neox", "attn", "RoPE pairs (i, i + n_rot/2) (NEOX); 0: adjacent pairs (NORM)"),
    _spec("attn_q_gate", "attn", "attn_q rows per head [q_h (hd) | gate_h (hd)]; output * sigmoid(gate)"),
    _spec("attn_qk_norm", "attn", "attn_q_norm / attn_k_norm [hd] (required): RMSNorm of q, k per head"),
    _spec("attn_qk_norm_full", "attn", "with qk_norm: q / k RMSNorm over all heads at once (weights [H hd] / [Hkv hd])"),
    _spec("attn_bias", "attn", "attention layers have attn_output.bias (required) and attn_q/k/v.bias (optional, "
          "the three together); 0: attention biases refused", c="bias"),
    # the block recipe: the row's, the norm placement the file's (read_common, read_lfm3)
    _i("norm_place", 0, "tk_norm_place: 0 pre-norm blocks; 1 attention blocks post-norm (x += norm(f(x)): "
       "post_attention_norm, post_ffw_norm), the others pre-norm; 2 sandwich (both); 3 hyper-connections",
       group="block", c="norm"),
    HParam("residual", "int32", 0, "tk_residual: 0 x += residual_scale f(x); 1 alpha / beta per branch kind (res); "
           "2 hyper-connections (hc)", group="block", source="spec.c_residual"),
    HParam("ffn_norm", "str", "", "the FFN pre-norm's tensor after blk.N. (ffn_norm.weight; Qwen "
           "post_attention_norm.weight; llama.cpp's falcon-h1 ffn_norm)", group="block", source="spec.ffn_norm"),
    HParam("output_norm", "str", "", "the final RMSNorm's tensor (output_norm.weight; LFM2 token_embd_norm.weight)",
           group="block", source="spec.output_norm"),
)


def hparams_fields() -> tuple[HParam, ...]:
    """The rows that are :class:`HParams` fields, in its order."""
    return tuple(h for h in HPARAMS if h.in_hparams)


def c_fields() -> tuple[HParam, ...]:
    """The rows C takes, in the struct's order: the top level first, then each group of :data:`GROUPS`."""
    rows = [h for h in HPARAMS if h.c_name is not None]
    return tuple(h for g in GROUPS for h in rows if h.group == g)


BY_NAME: dict[str, HParam] = {h.name: h for h in hparams_fields()}


def python_type(h: HParam) -> type:
    return str if h.type == "str" else TYPES[h.type][1]


def field_spec(h: HParam) -> tuple:
    """``(name, type[, field])`` for :func:`dataclasses.make_dataclass`."""
    if h.default is REQUIRED:
        return (h.name, python_type(h))
    if isinstance(h.default, list):
        return (h.name, list, dataclasses.field(default_factory=list))
    return (h.name, python_type(h), dataclasses.field(default=h.default))


def _c_doc(text: str, indent: str, width: int = 110) -> list[str]:
    """``text`` as C comment lines of at most ``width`` characters."""
    words, lines, cur = text.replace("*/", "* /").split(), [], ""
    for w in words:
        if cur and len(indent) + 3 + len(cur) + 1 + len(w) + 3 > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    lines.append(cur)
    if len(lines) == 1:
        return [f"{indent}/* {lines[0]} */"]
    return [f"{indent}/* {lines[0]}"] + [f"{indent} * {ln}" for ln in lines[1:-1]] + [f"{indent} * {lines[-1]} */"]


def c_struct() -> str:
    """The C declarations of ``tk_hparams`` and its sub-structs (the text between toolkit.h's
    HPARAMS-BEGIN / HPARAMS-END lines), from :data:`HPARAMS`."""
    out = []
    rows = c_fields()

    def member(h: HParam, ind: str) -> list[str]:
        doc = h.doc + (f" [{h.source}]" if h.source else "")
        decl = f"{ind}{TYPES[h.type][0]} {h.c_name};"
        line = f"{decl:<34} /* {doc} */"
        return [line] if len(line) <= 118 and "*/" not in doc else _c_doc(doc, ind) + [decl]

    for g, what in GROUPS.items():
        if not g:
            continue
        out += _c_doc(f"tk_hparams.{g}: {what}", "")
        out.append("typedef struct {")
        for h in rows:
            if h.group == g:
                out += member(h, "    ")
        out.append(f"}} tk_hparams_{g};")
        out.append("")
    out.append("typedef struct {")
    for h in rows:
        if not h.group:
            out += member(h, "    ")
    for g in GROUPS:
        if g:
            out.append(f"    tk_hparams_{g} {g};")
    out.append("} tk_hparams;")
    return "\n".join(out) + "\n"


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def check_value(h: HParam, v: Any) -> str:
    """'' when ``v`` lies in ``h``'s range, else why not (said after the key: ``= v must ...``)."""
    fin = "finite and " if h.type == "float" else ""
    if h.gt is not None and not (v > h.gt and (not fin or math.isfinite(v))):
        return f"= {v} must be {fin}> {_n(h.gt)}"
    if h.hi is not None and h.lo is not None and not h.lo <= v <= h.hi:
        return f"= {v} must be in [{_n(h.lo)}, {_n(h.hi)}]"
    if h.lo is not None and not (v >= h.lo and (not fin or math.isfinite(v))):
        return f"= {v} must be {fin}>= {_n(h.lo)}"
    if fin and not math.isfinite(v):
        return f"= {v} is not finite"
    return ""


BEGIN = "/* HPARAMS-BEGIN: generated from toolkit/arch/fields.py by tools/gen_hparams.py; edit there */"
END = "/* HPARAMS-END */"


def header_with_struct(text: str) -> str:
    """``text`` (toolkit.h) with the block between :data:`BEGIN` and :data:`END` replaced by
    :func:`c_struct`.  Raises ValueError when the markers are missing."""
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError("toolkit.h has no HPARAMS-BEGIN / HPARAMS-END block")
    return text[:i + len(BEGIN)] + "\n" + c_struct() + text[j:]
