"""The architecture table: one :class:`ArchSpec` row per GGUF ``general.architecture``.

A family is data, not branches (docs/design.md).  A row says:

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
- the block recipe, which model.c binds and forward.c runs: ``norm`` (where the RMSNorms sit:
  :class:`toolkit.arch.kinds.Norm`), ``residual`` (how a branch joins: plain, scaled, alpha / beta
  per branch kind, hyper-connections), the norm tensors' names ``ffn_norm`` (the FFN pre-norm:
  ``ffn_norm.weight``; Qwen3-Next / Qwen3.5 ``post_attention_norm.weight``; llama.cpp's falcon-h1
  converter maps ``pre_ff_layernorm.weight`` whole to ``ffn_norm`` and its loader asks for that
  name) and ``output_norm`` (the final norm; LFM2: ``token_embd_norm.weight``, llama.cpp's
  LLM_TENSOR_OUTPUT_NORM_LFM2, "fix for wrong tensor name"), ``attn_bias`` (attention biases),
  ``logit_softcap`` (the logits may be soft-capped, final_logit_softcapping);
- the gated-delta-net families' choices: ``gdn_head_tiled`` (v-head h reads K-head h % Hk, the
  tiled order of qwen35 GGUFs, else h // (Hv/Hk), qwen3next's grouped order; docs/specs/gdn-family.md §1.4.2, B19),
  ``attn_q_gate`` / ``attn_qk_norm`` (gated attention: attn_q rows per head [q_h | gate_h],
  RMSNorm of q and k per head);
- the tensors the C loader (``toolkit/native/model.c``) binds: :meth:`ArchSpec.expected_tensors`;
- ``quant_keep`` / ``quant_min_q8_0``: llama-quantize's exceptions for the architecture, and
  ``quant_no_fallback`` ours (:mod:`toolkit.quantize.rules`).

Used by :meth:`toolkit.arch.HParams.from_gguf`, ``toolkit info`` and the runtime's
``tk_hparams`` filling (:mod:`toolkit.arch.abi`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from toolkit.arch import readers as R
from toolkit.arch.kinds import FFNKind, LayerKind, Norm, Residual
from toolkit.arch.tensor_names import T
from toolkit.gguf_io.constants import (
    ARCH_GRANITE_HYBRID, ARCH_JAMBA, ARCH_MAMBA, ARCH_MAMBA2, ARCH_QWEN3NEXT, ARCH_QWEN35, ARCH_QWEN35MOE,
    ARCH_QWEN4EXP, ARCH_NEMOTRON_H, ARCH_NEMOTRON_H_MOE, ARCH_FALCON_H1, ARCH_LFM2, ARCH_LFM2MOE, ARCH_LFM3, ARCH_LARA_MINI, ARCH_MINIMAX, ARCH_RECURRENT_GEMMA, ARCH_KIMI_LINEAR, ARCH_GLM5_NEXT, ARCH_BAILINGMOE3, ARCH_ZAMBA2,
    ARCH_ZAMBA, ARCH_OLMO_HYBRID,
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
# HF use_bias / mamba_proj_bias: the Mamba-1 / Mamba-2 in_proj and out_proj biases, together (ours)
_SSM_PROJ_BIASES = ((_b(T.SSM_IN), _b(T.SSM_OUT)),)
MAMBA1_TENSORS = TensorSet(required=_MAMBA1_CORE,
                           optional=((_b(T.SSM_CONV1D),), (_b(T.SSM_DT),)) + tuple((n,) for n in _DT_B_C_NORMS)
                           + _SSM_PROJ_BIASES)
JAMBA_MAMBA1_TENSORS = TensorSet(required=_MAMBA1_CORE + _DT_B_C_NORMS,  # Jamba's dt/B/C norms have weights
                                 optional=((_b(T.SSM_CONV1D),), (_b(T.SSM_DT),)) + _SSM_PROJ_BIASES)
_MAMBA2_CONV_BIAS = ((_b(T.SSM_CONV1D),),)
MAMBA2_TENSORS = TensorSet(required=(_w(T.SSM_IN), _w(T.SSM_CONV1D), _b(T.SSM_DT), T.SSM_A, T.SSM_D,
                                     _w(T.SSM_NORM), _w(T.SSM_OUT)),
                           optional=_MAMBA2_CONV_BIAS + _SSM_PROJ_BIASES)
# HF attention_bias (OLMo-Hybrid, Falcon-H1, Bamba / Granite 4.0-H, Lara-Mini write them; mixer_attention.c
# binds them for any attention; Qwen3-Next / Qwen3.5 with the q gate half): q / k / v's together, o's
ATTENTION_BIASES = ((_b(T.ATTN_Q), _b(T.ATTN_K), _b(T.ATTN_V)), (_b(T.ATTN_OUT),))
# HF attention_bias of the MLA families (mixer_mla.c): kv_a_proj_with_mqa's and o_proj's together, q_a_proj's (q-LoRA)
MLA_BIASES = ((_b(T.ATTN_KV_A_MQA), _b(T.ATTN_OUT)), (_b(T.ATTN_Q_A),))
ATTENTION_TENSORS = TensorSet(required=(_w(T.ATTN_Q), _w(T.ATTN_K), _w(T.ATTN_V), _w(T.ATTN_OUT)),
                              optional=ATTENTION_BIASES)
# gated attention (attn_qk_norm): the same plus the per-head q / k RMSNorm weights [head_dim]
GATED_ATTENTION_TENSORS = TensorSet(required=ATTENTION_TENSORS.required + (_w(T.ATTN_Q_NORM), _w(T.ATTN_K_NORM)))
# gated delta net: fused q|k|v, the output gate z, beta / alpha (qwen35: two matrices; qwen3next:
# ssm_ba, [b(r) | a(r)] per K-head), conv (no bias), dt bias, A, the gated norm, out
_GDN_CORE = (_w(T.ATTN_QKV), _w(T.ATTN_GATE), _w(T.SSM_CONV1D), _b(T.SSM_DT), T.SSM_A, _w(T.SSM_NORM), _w(T.SSM_OUT))
GDN_TENSORS = TensorSet(required=_GDN_CORE + (_w(T.SSM_BETA), _w(T.SSM_ALPHA)))
GDN_BA_TENSORS = TensorSet(required=_GDN_CORE + (_w(T.SSM_BETA_ALPHA),))
FFN_TENSORS = {
    FFNKind.NONE: TensorSet(),
    # RecurrentGemma's MLP: GeGLU (tanh GeLU), every matrix with its bias
    FFNKind.GEGLU: TensorSet(required=(_w(T.FFN_NORM),) + tuple(f(t) for t in (T.FFN_UP, T.FFN_GATE, T.FFN_DOWN)
                                                                  for f in (_w, _b))),
    # HF mlp_bias (Bamba): the three biases together
    FFNKind.DENSE: TensorSet(required=(_w(T.FFN_NORM), _w(T.FFN_UP), _w(T.FFN_GATE), _w(T.FFN_DOWN)),
                             optional=((_b(T.FFN_GATE), _b(T.FFN_UP), _b(T.FFN_DOWN)),)),
    FFNKind.MOE: TensorSet(required=(_w(T.FFN_NORM), _w(T.FFN_GATE_INP), _w(T.FFN_UP_EXP), _w(T.FFN_GATE_EXP),
                                     _w(T.FFN_DOWN_EXP)),
                           optional=((_w(T.FFN_UP_SHEXP), _w(T.FFN_GATE_SHEXP), _w(T.FFN_DOWN_SHEXP)),
                                     (_w(T.FFN_GATE_INP_SHEXP),),     # shared expert scaled by sigmoid(w . x)
                                     (_b(T.FFN_EXP_PROBS_B),))),      # selection bias (moe_sigmoid only)
}
# LFM2's gated short conv: in_proj [D, 3D] (B | C | x), the depthwise conv [K, D], out_proj; with HF
# conv_bias the three biases (together; ours: llama.cpp's lfm2 has none)
SHORTCONV_TENSORS = TensorSet(required=(_w(T.SHORTCONV_INPROJ), _w(T.SHORTCONV_CONV), _w(T.SHORTCONV_OUTPROJ)),
                              optional=((_b(T.SHORTCONV_INPROJ), _b(T.SHORTCONV_CONV), _b(T.SHORTCONV_OUTPROJ)),))
# zamba2 hybrid layer: its Mamba-2 block, its LoRA adapters and linear projection; the shared
# block (shared.{bid}.*, bid = the block it runs) is ZAMBA2_SHARED_BLOCK_TENSORS
ZAMBA2_LAYER_TENSORS = TensorSet(
    required=MAMBA2_TENSORS.required + tuple(_w(t) for t in (
        T.FFN_LORA_A, T.FFN_GATE_LORA_B, T.FFN_UP_LORA_B, T.SHARED_LINEAR)),
    optional=_MAMBA2_CONV_BIAS + _SSM_PROJ_BIASES + (tuple(_w(t) for t in (      # use_shared_attention_adapter
        T.ATTN_Q_LORA_A, T.ATTN_Q_LORA_B, T.ATTN_K_LORA_A, T.ATTN_K_LORA_B, T.ATTN_V_LORA_A, T.ATTN_V_LORA_B)),))
# zamba (v1) hybrid layer: its Mamba-1 block and its linear projection; the shared block as zamba2's
ZAMBA_LAYER_TENSORS = TensorSet(required=MAMBA1_TENSORS.required + (_w(T.SHARED_LINEAR),),
                                optional=((_b(T.SSM_CONV1D),), (_b(T.SSM_DT),)) + _SSM_PROJ_BIASES)   # mamba_proj_bias
ZAMBA2_SHARED_BLOCK_TENSORS = TensorSet(required=tuple(_w(t) for t in (
    T.SHARED_ATTN_NORM, T.SHARED_ATTN_Q, T.SHARED_ATTN_K, T.SHARED_ATTN_V, T.SHARED_ATTN_OUT, T.SHARED_FFN_NORM,
    T.SHARED_FFN_GATE, T.SHARED_FFN_UP, T.SHARED_FFN_DOWN)),
    optional=(tuple(_b(t) for t in (T.SHARED_FFN_GATE, T.SHARED_FFN_UP, T.SHARED_FFN_DOWN)),))   # zamba2 add_bias_linear
# parallel (Falcon-H1): attention and Mamba-2 in one block; ssm_norm absent when mamba_rms_norm is false;
# the in_proj / out_proj biases are two switches there (mamba_proj_bias, projectors_bias)
PARALLEL_TENSORS = TensorSet(required=ATTENTION_TENSORS.required + tuple(t for t in MAMBA2_TENSORS.required
                                                                         if t != _w(T.SSM_NORM)),
                             optional=_MAMBA2_CONV_BIAS + ((_w(T.SSM_NORM),),) + ATTENTION_BIASES
                             + ((_b(T.SSM_IN),), (_b(T.SSM_OUT),)))   # mamba_proj_bias, projectors_bias: each alone
# qwen4exp: gated attention plus the QSA indexer's projections and norms
QSA_TENSORS = TensorSet(required=GATED_ATTENTION_TENSORS.required + tuple(_w(t) for t in (
    T.INDEXER_Q_PROJ, T.INDEXER_K_PROJ, T.INDEXER_Q_NORM, T.INDEXER_K_NORM)), optional=ATTENTION_BIASES)   # + HF attention_bias
# qwen4exp hyper-connections (residual_hc.c): per block the attention and FFN mixers in place of
# attn_norm / post_attention_norm, and the final mixer in place of output_norm
HC_BLOCK_TENSORS = TensorSet(required=tuple(_w(t) for t in (
    T.HC_ATTN_NORM, T.HC_ATTN_DOWN, T.HC_ATTN_UP, T.HC_ATTN_INJECT, T.HC_FFN_NORM, T.HC_FFN_DOWN, T.HC_FFN_UP,
    T.HC_FFN_INJECT)))
HC_GLOBAL_TENSORS = TensorSet(required=(_w(T.TOKEN_EMBD), _w(T.HC_HEAD_NORM), _w(T.HC_HEAD_DOWN), _w(T.HC_HEAD_UP)),
                              optional=((_w(T.OUTPUT),),))
# a PLE layer (ple.c); the n-gram table of the first is the global per_layer_token_embd
# (llama.cpp's), of a later one blk.{bid}.per_layer_token_embd (ours)
PLE_TENSORS = TensorSet(required=tuple(_w(t) for t in (
    T.PLE_KEY, T.PLE_VALUE, T.PLE_NORM_KEY, T.PLE_NORM_QUERY, T.PLE_NORM_CONV, T.PLE_CONV1D)))
# RecurrentGemma's recurrent block (mixer_rglru.c): linear_x / linear_y, the conv, the RG-LRU's two
# per-head gate blocks and Lambda, linear_out, every linear with its bias
RGLRU_TENSORS = TensorSet(required=tuple(f(t) for t in (T.RGLRU_X, T.RGLRU_Y, T.SSM_CONV1D, T.RGLRU_GATE_I, T.RGLRU_GATE_A,
                                                         T.SSM_OUT) for f in (_w, _b)) + (_w(T.RGLRU_PARAM),))
MIXER_TENSORS = {LayerKind.MAMBA1: MAMBA1_TENSORS, LayerKind.MAMBA2: MAMBA2_TENSORS,
                 LayerKind.ATTENTION: ATTENTION_TENSORS, LayerKind.GDN: GDN_TENSORS, LayerKind.NONE: TensorSet(),
                 LayerKind.PARALLEL: PARALLEL_TENSORS,
                 LayerKind.SHORTCONV: SHORTCONV_TENSORS,
                 LayerKind.ZAMBA2_SHARED: ZAMBA2_LAYER_TENSORS, LayerKind.ZAMBA_SHARED: ZAMBA_LAYER_TENSORS,
                 # MiniMax-Text-01's lightning attention: per-head [q | k | v], output gate and norm
                 LayerKind.LIGHTNING: TensorSet(required=tuple(_w(t) for t in (T.ATTN_QKV, T.ATTN_GATE, T.ATTN_NORM_2, T.ATTN_OUT))),
                 LayerKind.QSA: QSA_TENSORS,
                 LayerKind.RGLRU: RGLRU_TENSORS,
                 # Kimi Delta Attention (mixer_kda.c): q / k / v and their convs, low-rank f / g gates,
                 # beta, A, dt bias, the gated norm, out
                 LayerKind.KDA: TensorSet(required=tuple(_w(t) for t in (
                     T.ATTN_Q, T.ATTN_K, T.ATTN_V, T.SSM_CONV1D_Q, T.SSM_CONV1D_K, T.SSM_CONV1D_V, T.SSM_F_A,
                     T.SSM_G_A, T.SSM_BETA, T.SSM_NORM, T.ATTN_OUT)) + (_b(T.SSM_DT), T.SSM_A),
                     optional=((_w(T.SSM_F_B), _w(T.SSM_G_B)),)),
                 # MLA (mixer_mla.c): attn_q or the q-LoRA trio, the kv_a latent and its norm, k_b / v_b
                 LayerKind.MLA: TensorSet(required=tuple(_w(t) for t in (
                     T.ATTN_KV_A_MQA, T.ATTN_KV_A_NORM, T.ATTN_K_B, T.ATTN_V_B, T.ATTN_OUT)),
                     optional=((_w(T.ATTN_Q),), (_w(T.ATTN_Q_A), _w(T.ATTN_Q_A_NORM), _w(T.ATTN_Q_B)),
                               *MLA_BIASES))}
# GLM-5-Next: mHC around each block (residual_hc.c), MLA with the DSA indexer on its full layers
MHC_BLOCK_TENSORS = TensorSet(required=(_w(T.ATTN_NORM),) + tuple(f"blk.{{bid}}.hc_{b}_{n}.weight"
                                                                  for b in ("attn", "ffn") for n in ("fn", "base", "scale")))
DSA_INDEXER = tuple(f"blk.{{bid}}.{n}" for n in (
    "indexer.attn_q_b.weight", "indexer.attn_k.weight", "indexer.k_norm.weight", "indexer.k_norm.bias",
    "indexer.proj.weight", "indexer_compressor_ape.weight", "indexer_compressor_gate.weight"))
GLM5_NEXT_MIXER_TENSORS = {**MIXER_TENSORS, LayerKind.MLA: TensorSet(
    required=MIXER_TENSORS[LayerKind.MLA].required + tuple(_w(t) for t in (T.ATTN_Q_A, T.ATTN_Q_A_NORM, T.ATTN_Q_B)),
    optional=(DSA_INDEXER, *MLA_BIASES))}
# Ling 3: MLA with the head-wise output gate
BAILINGMOE3_MIXER_TENSORS = {**MIXER_TENSORS, LayerKind.MLA: TensorSet(
    required=MIXER_TENSORS[LayerKind.MLA].required + (_w(T.ATTN_GATE),), optional=MIXER_TENSORS[LayerKind.MLA].optional)}
# Nemotron-H: a block is one mixer or one FFN under the block's attn_norm (no ffn_norm); ReLU²
# MLP and experts without gate matrices; the MoE's expert choice bias exp_probs_b (optional)
NEMOTRON_FFN_TENSORS = {
    FFNKind.NONE: TensorSet(),
    FFNKind.RELU2: TensorSet(required=(_w(T.FFN_UP), _w(T.FFN_DOWN)),
                             optional=((_b(T.FFN_UP), _b(T.FFN_DOWN)),)),          # HF mlp_bias
    FFNKind.MOE: TensorSet(required=(_w(T.FFN_GATE_INP), _w(T.FFN_UP_EXP), _w(T.FFN_DOWN_EXP)),
                           # the choice bias is optional in the loader (absent: 0), as for LFM2-MoE
                           optional=((_w(T.FFN_UP_SHEXP), _w(T.FFN_DOWN_SHEXP)), (_b(T.FFN_EXP_PROBS_B),),
                                     (_w(T.FFN_LATENT_DOWN), _w(T.FFN_LATENT_UP)))),   # HF moe_latent_size
}
# the Qwen3-Next / Qwen3.5 blocks: gated attention, GDN (with ssm_ba for qwen3next)
# (HF attention_bias: q / k / v's together, o's; q's [2 Hq hd] with the gate half)
QWEN35_MIXER_TENSORS = {**MIXER_TENSORS, LayerKind.ATTENTION: TensorSet(required=GATED_ATTENTION_TENSORS.required,
                                                                      optional=ATTENTION_BIASES)}
QWEN3NEXT_MIXER_TENSORS = {**QWEN35_MIXER_TENSORS, LayerKind.GDN: GDN_BA_TENSORS}
# Lara-Mini: Qwen3.5's, its attention (no q gate) with HF attention_bias's biases
LARA_MINI_MIXER_TENSORS = {**QWEN35_MIXER_TENSORS,
                           LayerKind.ATTENTION: TensorSet(required=GATED_ATTENTION_TENSORS.required,
                                                          optional=ATTENTION_BIASES)}
# LFM2: attention with q/k RMSNorms (no output gate)
LFM2_MIXER_TENSORS = {**MIXER_TENSORS, LayerKind.ATTENTION: GATED_ATTENTION_TENSORS}
# LFM3: LFM2's, plus the per-head output gate attn_gate [D, H] (use_attention_gate) and the
# sandwich norms on every block (use_sandwich_norm; the row's Norm.SANDWICH), each all-or-none;
# the short conv's three biases (conv_bias) as LFM2's
_SANDWICH = ((_w(T.ATTN_POST_NORM), _w(T.FFN_POST_NORM)),)
LFM3_MIXER_TENSORS = {**LFM2_MIXER_TENSORS,
                      LayerKind.ATTENTION: TensorSet(required=GATED_ATTENTION_TENSORS.required,
                                                     optional=((_w(T.ATTN_GATE),),) + _SANDWICH + ATTENTION_BIASES),
                      LayerKind.SHORTCONV: TensorSet(required=SHORTCONV_TENSORS.required,
                                                     optional=SHORTCONV_TENSORS.optional + _SANDWICH)}
# RecurrentGemma: local attention with o_proj's bias always, q / k / v biases with attention_bias
RECURRENT_GEMMA_MIXER_TENSORS = {
    **MIXER_TENSORS,
    LayerKind.ATTENTION: TensorSet(required=ATTENTION_TENSORS.required + (_b(T.ATTN_OUT),),
                                   optional=((_b(T.ATTN_Q), _b(T.ATTN_K), _b(T.ATTN_V)),)),
}
# OLMo-Hybrid: GDN with separate q / k / v projections and conv pieces (no attn_qkv / ssm_conv1d);
# post-norm attention (Norm.POST: the block's attn_norm / ffn_norm replaced by the norms of
# the attention and FFN outputs) with q / k RMSNorms over all heads
OLMO_HYBRID_MIXER_TENSORS = {
    **MIXER_TENSORS,
    LayerKind.GDN: TensorSet(required=tuple(_w(t) for t in (
        T.ATTN_Q, T.ATTN_K, T.ATTN_V, T.ATTN_GATE, T.SSM_CONV1D_Q, T.SSM_CONV1D_K, T.SSM_CONV1D_V, T.SSM_BETA,
        T.SSM_ALPHA, T.SSM_NORM, T.SSM_OUT)) + (_b(T.SSM_DT), T.SSM_A)),
    LayerKind.ATTENTION: TensorSet(required=GATED_ATTENTION_TENSORS.required + (_w(T.ATTN_POST_NORM), _w(T.FFN_POST_NORM)),
                                   optional=ATTENTION_BIASES),
}


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
    dense_ffn: FFNKind = FFNKind.DENSE  # the kind of a layer with blk.N.ffn_up (RELU2: Nemotron-H)
    moe_sigmoid: bool = False           # sigmoid router scores, choice biased by exp_probs_b, groups (Nemotron-H)
    moe_relu2: bool = False             # experts / shared expert are ReLU² up/down, no gate matrices
    attn_qk_norm_full: bool = False     # with attn_qk_norm: one RMSNorm over all heads ([H hd] / [Hkv hd] weights)
    gdn_qkv_apart: bool = False         # GDN q / k / v: attn_q, attn_k, attn_v + ssm_conv1d_{q,k,v} (not attn_qkv, ssm_conv1d)
    rope_swa_only: bool = False         # RoPE on the sliding-window layers only, the full ones NoPE (Lara-Mini)
    ffn_act: str = "silu"               # the FFN activation (HF ACT2FN name) of a file without feed_forward.activation
    # the block recipe
    norm: Norm = Norm.PRE               # where the RMSNorms sit (POST: attention blocks; the file may drop SANDWICH's)
    residual: Residual = Residual.PLAIN
    ffn_norm: str = _w("ffn_norm")      # the FFN pre-norm's tensor after blk.N.
    output_norm: str = _w(T.OUTPUT_NORM)
    attn_bias: bool = False             # attention biases: o_proj's required, q / k / v's optional (RecurrentGemma)
    logit_softcap: bool = False         # logits = cap tanh(logits / cap) when the file has final_logit_softcapping
    # llama-quantize's exceptions for the architecture (toolkit.quantize.rules): tensors (name substrings)
    # kept as they are beyond its common list, and tensors never quantized below Q8_0
    quant_keep: tuple[str, ...] = ()
    quant_min_q8_0: tuple[str, ...] = ()
    quant_no_fallback: tuple[str, ...] = ()   # ours: kept as they are where llama.cpp would take a fallback type
    mixer_tensors: dict[LayerKind, TensorSet] = field(default_factory=lambda: dict(MIXER_TENSORS))
    ffn_tensors: dict[FFNKind, TensorSet] = field(default_factory=lambda: dict(FFN_TENSORS))
    note: str = ""

    @property
    def c_residual(self) -> int:
        """The residual scheme as C's tk_residual."""
        return self.residual.c_id

    @property
    def runs(self) -> bool:
        """True when the C runtime runs this architecture (it has a tk_arch id)."""
        return self.c_id is not None

    def expected_tensors(self, layer_kinds: Sequence[LayerKind], ffn_kinds: Sequence[FFNKind],
                         n_shared_block: int = 1, ple_layers: Sequence[int] = ()) -> tuple[set[str], list[set[str]]]:
        """(required names, optional groups) of a model with these per-layer kinds; the j-th
        ZAMBA2_SHARED layer also needs shared block j % ``n_shared_block`` (zamba2); the layers
        ``ple_layers`` (qwen4exp, in order) their PLE tensors and n-gram table.

        Raises:
            ValueError: the row is convert-only (the runtime binds no tensors of it).
        """
        if not self.runs:
            raise ValueError(f"architecture {self.name!r} is convert/info only: no tensors are bound")
        hc = self.residual == Residual.HYPER_CONNECTIONS
        block = HC_BLOCK_TENSORS if hc else MHC_BLOCK_TENSORS if self.residual == Residual.MHC else BLOCK_TENSORS
        out_norm = {_w(T.OUTPUT_NORM): self.output_norm}
        glob = HC_GLOBAL_TENSORS if hc else GLOBAL_TENSORS
        req = {out_norm.get(t, t) for t in glob.required}
        opt = [set(g) for g in glob.optional]
        for j, i in enumerate(ple_layers):
            req |= {t.format(bid=i) for t in PLE_TENSORS.required}
            req.add(_w(T.PER_LAYER_TOKEN_EMBD) if j == 0 else f"blk.{i}.{_w(T.PER_LAYER_TOKEN_EMBD)}")
        ffn_norm = {_w(T.FFN_NORM): "blk.{bid}." + self.ffn_norm}
        hybrid = [i for i, kd in enumerate(layer_kinds) if kd in (LayerKind.ZAMBA2_SHARED, LayerKind.ZAMBA_SHARED)]
        req |= {t.format(bid=j % n_shared_block) for j in range(len(hybrid)) for t in ZAMBA2_SHARED_BLOCK_TENSORS.required}
        opt += [{t.format(bid=b) for t in g} for b in sorted({j % n_shared_block for j in range(len(hybrid))})
                for g in ZAMBA2_SHARED_BLOCK_TENSORS.optional]
        for i, (kd, fk) in enumerate(zip(layer_kinds, ffn_kinds)):
            # a post-norm block (Norm.POST) has neither pre-norm: its mixer row lists its post-norms
            pre = {_w(T.ATTN_NORM), _w(T.FFN_NORM)} if self.norm == Norm.POST and kd == LayerKind.ATTENTION else set()
            for ts in (block, self.mixer_tensors[kd], self.ffn_tensors[fk]):
                req |= {ffn_norm.get(t, t).format(bid=i) for t in ts.required
                        if not (hc and t == _w(T.FFN_NORM)) and t not in pre}
                opt += [{t.format(bid=i) for t in g} for g in ts.optional]
        return req, opt


# every row that runs: common keys, layer kinds, the recurrent sizes (required even when all
# layers are attention, as they always were)
_BASE_READERS = (R.read_common, R.read_layer_kinds, R.read_ssm)
_QWEN_READERS = _BASE_READERS + (R.read_gdn, R.read_attention, R.read_ffn)
# Qwen3-Next / Qwen3.5 gated attention (q/k RMSNorm, sigmoid gate, NEOX partial RoPE: text
# M-RoPE is NEOX, docs/specs/gdn-family.md §2.2, B15) and the post_attention_norm FFN pre-norm
_QWEN_FLAGS = dict(rope_neox=True, attn_q_gate=True, attn_qk_norm=True, ffn_norm="post_attention_norm.weight")
# LFM2 / LFM2-MoE: no ssm.* keys (read_shortconv instead of read_ssm)
_LFM2_READERS = (R.read_common, R.read_layer_kinds, R.read_shortconv, R.read_attention, R.read_sliding_window, R.read_ffn)
_LFM2_FLAGS = dict(rope_neox=True, attn_qk_norm=True, output_norm=_w(T.TOKEN_EMBD_NORM), mixer_tensors=LFM2_MIXER_TENSORS)

# Nemotron-H: attention layers as every hybrid's, then the FFN-only ones from the per-layer
# feed_forward_length (read_nemotron_layers)
_NEMOTRON_READERS = _BASE_READERS + (R.read_nemotron_layers, R.read_mamba2, R.read_attention, R.read_ffn,
                                     R.check_nemotron_layers, R.read_moe_routing, R.check_rms_eps)
_NEMOTRON_FLAGS = dict(dense_ffn=FFNKind.RELU2, moe_sigmoid=True, moe_relu2=True, ffn_act="relu2",
                       ffn_tensors=NEMOTRON_FFN_TENSORS)

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
    # gated delta net + gated attention (docs/specs/gdn-family.md): attention layers from
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
    # LFM2: gated short conv / attention with q/k norms (NEOX RoPE, HF rotate_half); attention
    # layers from the per-layer head_count_kv (0 = conv); LFM2-MoE: dense lead blocks, then MoE
    # with sigmoid routing and the expert bias (read_lfm2_moe_routing)
    ArchSpec(ARCH_LFM2, c_id=7,
             readers=_LFM2_READERS + (R.check_rms_eps,), mixers=(LayerKind.SHORTCONV, LayerKind.ATTENTION),
             recurrent=LayerKind.SHORTCONV, attention_from_file=True, ffns=(FFNKind.DENSE,), **_LFM2_FLAGS, note="LFM2"),
    ArchSpec(ARCH_LFM2MOE, c_id=8,
             readers=_LFM2_READERS + (R.read_lfm2_moe_routing, R.check_rms_eps), mixers=(LayerKind.SHORTCONV, LayerKind.ATTENTION),
             recurrent=LayerKind.SHORTCONV, attention_from_file=True, ffns=(FFNKind.DENSE, FFNKind.MOE), **_LFM2_FLAGS,
             note="LFM2-MoE"),
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
    # Falcon-H1: every layer attention + Mamba-2 in parallel (muP multipliers folded into the
    # weights by the converter, as llama.cpp's does), NEOX RoPE on the whole head, SwiGLU FFN
    ArchSpec(ARCH_FALCON_H1, c_id=11,
             readers=_BASE_READERS + (R.read_mamba2, R.read_attention, R.read_ffn, R.read_norm_before_gate,
                                        R.check_rms_eps),
             mixers=(LayerKind.PARALLEL,), recurrent=LayerKind.PARALLEL, ffns=(FFNKind.DENSE,),
             rope_neox=True, ffn_norm="ffn_norm", note="Falcon-H1"),
    # qwen4exp: qwen35moe's gated delta net (output gate from the file) and MoE, QSA attention,
    # hyper-connections in place of the norms, PLE n-gram embeddings (read_qwen4exp)
    ArchSpec(ARCH_QWEN4EXP, c_id=13,
             readers=_QWEN_READERS + (R.read_qwen4exp, R.check_rope_sections, R.check_rms_eps),
             mixers=(LayerKind.GDN, LayerKind.QSA), recurrent=LayerKind.GDN, attention_from_file=True,
             ffns=(FFNKind.MOE,), moe_softmax_topk=True, moe_renorm=True, rope_neox=True, attn_q_gate=True,
             attn_qk_norm=True, gdn_head_tiled=True, residual=Residual.HYPER_CONNECTIONS, norm=Norm.HYPER,
             mixer_tensors=QWEN35_MIXER_TENSORS,
             note="Qwen3.8-Flash-Next: gated delta net + QSA attention, hyper-connections, PLE"),
    # Zamba2 (our layout, README "Zamba2 layout"): Mamba-2 layers; the hybrid ones
    # (attention.layer_indices) first run a shared attention block (NEOX RoPE) with LoRA adapters
    ArchSpec(ARCH_ZAMBA2, c_id=12,
             readers=_BASE_READERS + (R.read_mamba2, R.read_attention, R.read_zamba2, R.read_ffn, R.check_rms_eps),
             mixers=(LayerKind.MAMBA2, LayerKind.ZAMBA2_SHARED), recurrent=LayerKind.MAMBA2, attention_from_file=True,
             rope_neox=True, ffn_act="gelu"),
    # Zamba v1 (our layout, README "Zamba layout"): multi-head Mamba-1 layers; the hybrid ones
    # (attention.layer_indices) first run a shared attention block (no RoPE), as zamba2's without
    # adapters; one block when the checkpoint ties them, one per hybrid layer when it does not
    ArchSpec(ARCH_ZAMBA, c_id=14,
             readers=_BASE_READERS + (R.read_mamba1_heads, R.read_attention, R.read_zamba2, R.read_ffn,
                                        R.check_rms_eps),
             mixers=(LayerKind.MAMBA1, LayerKind.ZAMBA_SHARED), recurrent=LayerKind.MAMBA1, attention_from_file=True,
             rope=False, ffn_act="gelu", note="Zamba (v1)"),
    # OLMo-Hybrid (docs/specs/more-hybrids.md §3; names proposed there): gated delta net layers (v-heads
    # grouped, beta x ssm.beta_scale, gated-norm epsilon 1e-5) and post-norm attention layers with
    # q / k norms over all heads, NoPE (rope.dimension_count 0) or NEOX RoPE over the whole head
    ArchSpec(ARCH_OLMO_HYBRID, c_id=15,
             readers=(R.read_common, R.read_layer_kinds, R.read_ssm, R.read_olmo_hybrid, R.read_attention, R.read_ffn,
                      R.check_rms_eps),
             mixers=(LayerKind.GDN, LayerKind.ATTENTION), recurrent=LayerKind.GDN, attention_from_file=True,
             ffns=(FFNKind.DENSE,), rope_neox=True, attn_qk_norm=True, attn_qk_norm_full=True, norm=Norm.POST,
             gdn_qkv_apart=True,
             gdn_head_tiled=False, mixer_tensors=OLMO_HYBRID_MIXER_TENSORS, note="OLMo-Hybrid"),
    # LFM3 (no llama.cpp architecture: lfm2's layout + the keys of README "LFM3 layout"): LFM2's
    # blocks with sliding-window and full attention layers (per-kind RoPE, the full layers'
    # proportional), a per-head output gate and sandwich norms (read_lfm3)
    ArchSpec(ARCH_LFM3, c_id=16,
             readers=_LFM2_READERS + (R.read_lfm3, R.check_rms_eps), mixers=(LayerKind.SHORTCONV, LayerKind.ATTENTION),
             recurrent=LayerKind.SHORTCONV, attention_from_file=True, ffns=(FFNKind.DENSE,),
             norm=Norm.SANDWICH, **{**_LFM2_FLAGS, "mixer_tensors": LFM3_MIXER_TENSORS}, note="LFM3"),
    # Lara-Mini (docs/specs/more-hybrids.md §8; qwen35moe's names): gated delta net (v-heads grouped,
    # plain norm weights, gated-norm epsilon rms_eps), attention with per-head q / k norms and no
    # output gate, NEOX RoPE on the sliding-window layers and NoPE on the full ones (rope_swa_only),
    # MoE (softmax, top-k, renormalised) with an ungated shared expert (no ffn_gate_inp_shexp)
    ArchSpec(ARCH_LARA_MINI, c_id=17,
             readers=_QWEN_READERS + (R.read_sliding_window, R.check_rms_eps),
             mixers=(LayerKind.GDN, LayerKind.ATTENTION), recurrent=LayerKind.GDN, attention_from_file=True,
             ffns=(FFNKind.MOE,), moe_softmax_topk=True, moe_renorm=True, rope_neox=True, attn_qk_norm=True,
             gdn_head_tiled=False, rope_swa_only=True, mixer_tensors=LARA_MINI_MIXER_TENSORS, note="Lara-Mini"),
    # MiniMax-Text-01 (llama.cpp's minimax-01; docs/specs/more-hybrids.md §5): lightning attention
    # (mixer_lightning.c) and plain GQA with NEOX RoPE, MoE on every layer (softmax, top-k,
    # renormalised), each branch joining as alpha * rmsnorm(x) + beta * branch (read_minimax); HF sliding_window:
    # attention.sliding_window / _pattern (every attention layer)
    ArchSpec(ARCH_MINIMAX, c_id=18,
             readers=(R.read_common, R.read_layer_kinds, R.read_attention, R.read_sliding_window, R.read_ffn, R.read_minimax,
                      R.check_rms_eps),
             mixers=(LayerKind.LIGHTNING, LayerKind.ATTENTION), recurrent=LayerKind.LIGHTNING, attention_from_file=True,
             ffns=(FFNKind.MOE,), moe_softmax_topk=True, moe_renorm=True, rope_neox=True,
             residual=Residual.NORMED_FACTORS, note="MiniMax-Text-01"),
    # RecurrentGemma (docs/specs/more-hybrids.md §6.3's proposed names): RG-LRU blocks (mixer_rglru.c) and
    # local MQA (every attention layer sliding, NEOX RoPE on rope.dimension_count < head_dim dims,
    # o_proj bias), GeGLU MLPs with biases (ffn_geglu.c); norms (1 + w) folded by the converter;
    # embedding * bf16(sqrt D), logits soft-capped (read_recurrent_gemma)
    ArchSpec(ARCH_RECURRENT_GEMMA, c_id=19,
             readers=(R.read_common, R.read_layer_kinds, R.read_rglru, R.read_attention, R.read_ffn,
                      R.read_recurrent_gemma, R.check_rms_eps),
             mixers=(LayerKind.RGLRU, LayerKind.ATTENTION), recurrent=LayerKind.RGLRU, attention_from_file=True,
             ffns=(FFNKind.GEGLU,), dense_ffn=FFNKind.GEGLU, ffn_act="gelu_pytorch_tanh", rope_neox=True, attn_bias=True, logit_softcap=True,
             # the per-head RG-LRU gate blocks, expanded to float32 at load: a fallback type only loses precision
             quant_no_fallback=(".rglru_gate_i.weight", ".rglru_gate_a.weight"),
             mixer_tensors=RECURRENT_GEMMA_MIXER_TENSORS, note="RecurrentGemma"),
    # Kimi-Linear (llama.cpp's kimi-linear; docs/specs/kda-family.md): KDA layers (mixer_kda.c) and MLA
    # layers (per-layer head_count_kv 1; mixer_mla.c, the latent cached), leading dense SwiGLU
    # layers, then MoE with sigmoid routing, choice bias, groups, renormalisation, scale, shared expert
    ArchSpec(ARCH_KIMI_LINEAR, c_id=20,
             readers=(R.read_common, R.read_layer_kinds, R.read_kda, R.read_mla, R.read_ffn, R.read_kda_moe_routing,
                      R.check_rms_eps),
             mixers=(LayerKind.KDA, LayerKind.MLA), recurrent=LayerKind.KDA, attention_from_file=True,
             ffns=(FFNKind.DENSE, FFNKind.MOE), rope=False, moe_sigmoid=True, note="Kimi-Linear"),
    # GLM-5-Next (llama.cpp's glm5-next; docs/specs/kda-family.md §1.3): kimi-linear's kinds with the
    # bounded KDA gate, NoPE MLA with the DSA k-pool indexer (dsa.c), mHC residual streams
    # (residual_hc.c), every SwiGLU clamped
    ArchSpec(ARCH_GLM5_NEXT, c_id=21,
             readers=(R.read_common, R.read_layer_kinds, R.read_kda, R.read_mla, R.read_ffn, R.read_kda_moe_routing,
                      R.read_glm5_next_extras, R.check_rms_eps),
             mixers=(LayerKind.KDA, LayerKind.MLA), recurrent=LayerKind.KDA, attention_from_file=True,
             ffns=(FFNKind.DENSE, FFNKind.MOE), rope=False, moe_sigmoid=True, residual=Residual.MHC,
             mixer_tensors=GLM5_NEXT_MIXER_TENSORS, note="GLM-5-Next",
             # llama-quant.cpp:332-347 (the mHC weights, the indexer, the KDA gates and beta, MLA's latent
             # projections stay as they are) and :472-485 (the q-LoRA projections, an MTP eh_proj)
             quant_keep=("hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate",
                         "indexer_compressor_ape", "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight",
                         "ssm_g_b.weight", "ssm_beta.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight",
                         "attn_v_b.weight"),
             quant_min_q8_0=("attn_q_a", "attn_q_b", "nextn.eh_proj")),
    # Ling 3 (llama.cpp's bailingmoe3; §1.4): KDA with full-rank gates (bounded or softplus; ssm_a =
    # +exp(A_log)), MLA with interleaved RoPE on the dr dims and a head-wise sigmoid output gate
    ArchSpec(ARCH_BAILINGMOE3, c_id=22,
             readers=(R.read_common, R.read_layer_kinds, R.read_kda, R.read_mla, R.read_ffn, R.read_kda_moe_routing,
                      R.read_bailingmoe3_extras, R.check_rms_eps),
             mixers=(LayerKind.KDA, LayerKind.MLA), recurrent=LayerKind.KDA, attention_from_file=True,
             ffns=(FFNKind.DENSE, FFNKind.MOE), rope=False, moe_sigmoid=True,
             mixer_tensors=BAILINGMOE3_MIXER_TENSORS, note="Ling 3"),
)

_BY_NAME = {a.name: a for a in ARCHES}

# the architectures the runtime runs, in table order (the "supported: ..." list of messages)
RUNTIME_ARCHES: tuple[str, ...] = tuple(a.name for a in ARCHES if a.runs)


def arch_spec(name: str) -> ArchSpec | None:
    """The row of ``general.architecture`` ``name``, or None when the table has none."""
    return _BY_NAME.get(name)
