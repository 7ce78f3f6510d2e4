"""The vocabulary of the architecture table: mixer and FFN kinds of a block, norm placements, residual schemes.

``LayerKind``, ``FFNKind`` and ``Norm`` mirror C enums of ``toolkit/native/toolkit.h`` value for value
(tests/unit/test_arch_table.py holds them equal); ``Residual`` maps onto C's tk_residual (``c_id``).
"""
from __future__ import annotations

import enum


class LayerKind(enum.IntEnum):
    """Mixer of one block.  Values are shared with the C runtime (tk_layer_kind)."""

    MAMBA1 = 0
    MAMBA2 = 1
    ATTENTION = 2
    GDN = 3         # gated delta net (Qwen3-Next, Qwen3.5): toolkit/native/layers/mixer_gdn.c
    SHORTCONV = 4   # LFM2's double-gated short conv: toolkit/native/layers/mixer_shortconv.c
    NONE = 5        # no mixer: the block is x += ffn(attn_norm(x)) (Nemotron-H MLP / MoE layers)
    PARALLEL = 6    # attention + Mamba-2 side by side, outputs summed (Falcon-H1): mixer_parallel.c
    ZAMBA2_SHARED = 7  # Zamba2 hybrid layer: shared attention block + LoRA, then Mamba-2 (mixer_zamba2.c)
    QSA = 8         # qwen4exp gated attention over the QSA indexer's blocks: toolkit/native/layers/mixer_qsa.c
    ZAMBA_SHARED = 9  # Zamba (v1) hybrid layer: shared attention block, then multi-head Mamba-1 (mixer_zamba.c)
    LIGHTNING = 10  # MiniMax-Text-01's lightning attention (decayed linear attention): mixer_lightning.c
    RGLRU = 11      # RecurrentGemma's recurrent block (conv, RG-LRU scan, GeLU branch): mixer_rglru.c
    KDA = 12        # Kimi Delta Attention (per-channel decay delta rule): mixer_kda.c
    MLA = 13        # multi-head latent attention, the latent c cached: mixer_mla.c


class FFNKind(enum.IntEnum):
    """Feed-forward part of one block.  Values are shared with the C runtime (tk_ffn_kind)."""

    NONE = 0
    DENSE = 1   # SwiGLU: down(silu(gate(x)) * up(x))
    MOE = 2     # top-k routed SwiGLU experts (+ shared expert when present)
    RELU2 = 3   # down(relu(up(x))^2), no gate (Nemotron-H MLP)
    GEGLU = 4   # down(gelu_tanh(gate x + bg) * (up x + bu)) + bd (RecurrentGemma): ffn_geglu.c


class Norm(enum.IntEnum):
    """Where a block's RMSNorms sit.  Values are shared with the C runtime (tk_norm_place)."""

    PRE = 0         # x += f(norm(x)): attn_norm before the mixer, the FFN pre-norm before the FFN
    POST = 1        # OLMo-2's attention blocks: x += norm(f(x)) (post_attention_norm, post_ffw_norm); others PRE
    SANDWICH = 2    # LFM3: x += norm(f(norm(x))): the pre-norms and the post-norms
    HYPER = 3       # hyper-connections: the block's mixers stand for the norms (residual_hc.c)


class Residual(str, enum.Enum):
    """How a block's output joins the residual stream; :attr:`c_id` is the C runtime's tk_residual."""

    PLAIN = "plain"                          # x + f(x)
    MULTIPLIERS = "multipliers"              # Granite: x + residual_scale f(x) (and embedding / logit scales)
    HYPER_CONNECTIONS = "hyper_connections"  # qwen4exp: several streams mixed per block
    NORMED_FACTORS = "normed_factors"        # MiniMax: x = alpha * rmsnorm(x) + beta * f(rmsnorm(x)), per branch kind
    MHC = "mhc"                              # GLM-5-Next: hc streams, Sinkhorn-normalised mixing, mean at the end

    @property
    def c_id(self) -> int:
        """tk_residual: 0 plain (x += residual_scale f), 1 normed (alpha / beta per branch kind), 2 hyper-connections."""
        return {Residual.NORMED_FACTORS: 1, Residual.HYPER_CONNECTIONS: 2, Residual.MHC: 2}.get(self, 0)
