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

from dataclasses import dataclass, field, asdict
from typing import Any

from toolkit.arch.kinds import FFNKind, LayerKind
from toolkit.arch.readers import KeyReader
from toolkit.arch.table import RUNTIME_ARCHES, arch_spec
from toolkit.errors import UnsupportedError


@dataclass
class HParams:
    """The hparams of one model; fields that a family lacks keep their defaults.

    Which fields reach the C runtime's ``tk_hparams`` is :mod:`toolkit.arch.abi`'s list.
    """

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
    ssm_dt_b_c_eps: float = 0.0  # epsilon of the dt/B/C norms (ssm.dt_b_c_rms_epsilon, else rms_eps)
    gdn_gate_act: int = 0        # GDN output gate act(z): 0 silu (Qwen3-Next, Qwen3.5), 1 sigmoid
    gdn_beta_scale: float = 0.0  # GDN beta = sigmoid(b) * this (OLMo-Hybrid: ssm.beta_scale, 2.0); 0: 1
    gdn_norm_eps: float = 0.0    # epsilon of the GDN gated norm (OLMo-Hybrid: 1e-5); 0: rms_eps
    ssm_norm_before_gate: bool = False  # Mamba-2 gated norm: rmsnorm(y) w * silu(z) (Falcon-H1), else rmsnorm(y silu(z)) w
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
    moe_n_group: int = 1          # expert groups (expert_group_count), Nemotron-H MoE
    moe_topk_group: int = 1       # groups kept per token (expert_group_used_count)
    # MoE routing by sigmoid scores (Nemotron-H MoE: readers.read_moe_routing; LFM2-MoE:
    # readers.read_lfm2_moe_routing)
    moe_sigmoid: bool = False       # top-k of sigmoid(r) (+ exp_probs_b), weights sigmoid(r) of the k
    moe_weights_norm: bool = False  # with moe_sigmoid: the k weights / (their sum + moe_weights_norm_eps)
    moe_weights_norm_eps: float = 1e-20  # HF: 1e-20 NemotronHTopkRouter, 1e-6 Lfm2MoeTopKRouter
    moe_weights_scale: float = 1.0  # routed weights times this (expert_weights_scale, routed_scaling_factor)
    # granite multipliers
    embedding_scale: float = 1.0
    residual_scale: float = 1.0
    logit_scale: float = 1.0
    # zamba2: shared blocks (the j-th hybrid layer runs block j % n_shared_block), Mamba-2 dt floor
    n_shared_block: int = 0
    ssm_dt_min: float = 0.0
    # qwen4exp (readers.read_qwen4exp; docs/specs/gdn-family.md §1.8): hyper-connection streams, the
    # QSA indexer, the PLE n-gram embedding (ple_index[i]: PLE module of layer i or -1;
    # ple_consts: per module the multipliers [n], head offsets [NH], head vocab sizes [NH])
    hc_count: int = 0
    idx_n_head: int = 0
    idx_head_dim: int = 0
    idx_top_k: int = 0
    compress_ratios: list[int] = field(default_factory=list)
    ple_index: list[int] = field(default_factory=list)
    ple_ngram_size: int = 0
    ple_heads_per_ngram: int = 0
    ple_conv_kernel: int = 0
    ple_eos_token: int = 0
    ple_n_module: int = 0
    ple_consts: list[int] = field(default_factory=list)
    # sliding-window attention (read_sliding_window): window W (a query at i sees keys j with
    # i - W < j <= i) and per layer 1 = sliding (empty: no sliding layer)
    n_swa: int = 0
    swa_layers: list[int] = field(default_factory=list)
    # LFM3 (read_lfm3): the sliding layers' RoPE base (0: rope_freq_base), the full layers'
    # proportional RoPE (rotated dims, 0: all), the per-head output gate, the sandwich norms
    rope_freq_base_swa: float = 0.0
    rope_prop_rot: int = 0
    attn_head_gate: int = 0
    sandwich_norm: int = 0
    # Lara-Mini (read_lara_mini): RoPE on the sliding-window layers only, the full layers NoPE
    rope_swa_only: int = 0
    # MiniMax-Text-01 (read_minimax): x = alpha * rmsnorm(x) + beta * branch per branch (lightning, attention, FFN)
    residual_normed: int = 0
    res_alpha_lin: float = 1.0
    res_alpha_full: float = 1.0
    res_alpha_mlp: float = 1.0
    res_beta_lin: float = 1.0
    res_beta_full: float = 1.0
    res_beta_mlp: float = 1.0
    # RecurrentGemma (read_recurrent_gemma): logits = cap tanh(logits / cap) (0: none); attention biases
    rglru_logit_softcap: float = 0.0
    rglru_attn_bias: int = 0
    # KDA (read_kda; docs/specs/kda-family.md §2.1): heads n, head dim D (key = value), the q/k l2-norm
    # epsilon (HF 1e-6; a file without ours reads rms_eps as llama.cpp), the gate's lower bound
    # (0: kimi's unbounded -exp(A_log) softplus(u); < 0: lb sigmoid(exp(A_log) u), glm5-next / Ling 3)
    kda_n_head: int = 0
    kda_head_dim: int = 0
    kda_l2_eps: float = 0.0
    kda_gate_lower_bound: float = 0.0
    # MLA (read_mla; §2.3): q-LoRA rank (0: attn_q), kv_lora_rank, the nope / rope / value head
    # dims, the epsilon of the q_a / kv_a RMSNorms (HF kimi 1e-6; absent: rms_eps as llama.cpp)
    mla_q_lora_rank: int = 0
    mla_kv_lora_rank: int = 0
    mla_dn: int = 0
    mla_dr: int = 0
    mla_dv: int = 0
    mla_norm_eps: float = 0.0
    # GLM-5-Next mHC (hyper_connection.*): Sinkhorn-normalised mixing when > 0 (with hc_count > 1)
    hc_sinkhorn_iters: int = 0
    hc_eps: float = 0.0
    # GLM-5-Next DSA k-pool indexer (attention.indexer.*): per-layer full (1) / shared (0)
    dsa_kpool: int = 0
    dsa_select_tail: int = 0
    dsa_k_norm_eps: float = 0.0
    dsa_full: list[int] = field(default_factory=list)
    # GLM-5-Next SwiGLU clamp (swiglu_clamp_exp / swiglu_clamp_shexp; 0: none)
    swiglu_clamp_exp: float = 0.0
    swiglu_clamp_shexp: float = 0.0
    # Ling 3 (read_bailingmoe3_extras): ssm_a = +exp(A_log); RoPE on MLA's dr dims
    kda_a_positive: int = 0
    mla_rope: int = 0

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


# ---- which fields a model uses (``toolkit info``) ---------------------------------------------
_ALWAYS = ("arch", "n_vocab", "n_embd", "n_layer", "n_ctx_train", "rms_eps", "layer_kinds", "ffn_kinds", "n_head_kv")
_SSM = ("d_conv", "d_inner", "d_state", "dt_rank")
_MAMBA2 = _SSM + ("n_group", "ssm_n_head", "ssm_head_dim", "ssm_norm_before_gate")
_BY_LAYER = {
    LayerKind.MAMBA1: _SSM + ("dt_b_c_rms",),
    LayerKind.MAMBA2: _MAMBA2,
    LayerKind.PARALLEL: _MAMBA2,
    LayerKind.ZAMBA2_SHARED: _MAMBA2 + ("n_shared_block", "ssm_dt_min"),
    LayerKind.GDN: _SSM + ("n_group", "ssm_n_head", "ssm_head_dim", "gdn_gate_act"),
    LayerKind.SHORTCONV: ("d_conv", "d_inner"),
    LayerKind.QSA: ("idx_n_head", "idx_head_dim", "idx_top_k", "compress_ratios"),
    LayerKind.KDA: ("d_conv", "kda_n_head", "kda_head_dim", "kda_l2_eps", "kda_gate_lower_bound"),
    LayerKind.MLA: ("mla_q_lora_rank", "mla_kv_lora_rank", "mla_dn", "mla_dr", "mla_dv", "mla_norm_eps"),
}
_ATTENTION = ("n_head", "head_dim", "n_rot", "rope_freq_base", "use_rope", "attention_scale")
_BY_FFN = {
    FFNKind.DENSE: ("n_ff",), FFNKind.RELU2: ("n_ff",),
    FFNKind.MOE: ("n_expert", "n_expert_used", "n_ff_shexp", "moe_n_group", "moe_topk_group", "moe_sigmoid",
                  "moe_weights_norm", "moe_weights_norm_eps", "moe_weights_scale"),
}


def used_fields(hp: HParams) -> list[str]:
    """The fields of ``hp`` its model uses, in declaration order: the common ones, those of its
    layer and FFN kinds (no SSM fields without recurrent layers, no MoE fields without experts,
    no attention fields without attention), and any other field whose value is not the default
    (Granite's multipliers, qwen4exp's hyper-connections and PLE)."""
    want = set(_ALWAYS)
    for kd in set(hp.layer_kinds):
        want.update(_BY_LAYER.get(kd, ()))
    if hp.attention_layers:
        want.update(_ATTENTION)
    for fk in set(hp.ffn_kinds):
        want.update(_BY_FFN.get(fk, ()))
    blank = HParams(arch=hp.arch, n_vocab=0, n_embd=0, n_layer=0, n_ctx_train=0, rms_eps=0.0, layer_kinds=[], ffn_kinds=[])
    cur, default = asdict(hp), asdict(blank)
    return [k for k in cur if k in want or cur[k] != default[k]]
