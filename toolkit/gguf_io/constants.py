"""GGUF key constants: the only place key strings are spelled.

Most keys come from the ``gguf`` package (llama.cpp's gguf-py); what gguf 0.19 lacks is
defined here.  Per-architecture keys are templates with ``{arch}``; use :func:`k` to
format them.  Example: ``k(Keys.SSM.STATE_SIZE, "mamba2") == "mamba2.ssm.state_size"``.
"""
from __future__ import annotations

import gguf
from gguf import GGMLQuantizationType as GGMLType  # noqa: F401  (re-exported)
from gguf import GGUFValueType  # noqa: F401  (re-exported)


class Keys:
    class General:
        ARCHITECTURE = gguf.Keys.General.ARCHITECTURE
        NAME = gguf.Keys.General.NAME
        FILE_TYPE = gguf.Keys.General.FILE_TYPE
        QUANTIZATION_VERSION = gguf.Keys.General.QUANTIZATION_VERSION
        ALIGNMENT = gguf.Keys.General.ALIGNMENT
        TYPE = gguf.Keys.General.TYPE

    class LLM:
        VOCAB_SIZE = gguf.Keys.LLM.VOCAB_SIZE
        CONTEXT_LENGTH = gguf.Keys.LLM.CONTEXT_LENGTH
        EMBEDDING_LENGTH = gguf.Keys.LLM.EMBEDDING_LENGTH
        BLOCK_COUNT = gguf.Keys.LLM.BLOCK_COUNT
        FEED_FORWARD_LENGTH = gguf.Keys.LLM.FEED_FORWARD_LENGTH
        EXPERT_COUNT = gguf.Keys.LLM.EXPERT_COUNT
        EXPERT_USED_COUNT = gguf.Keys.LLM.EXPERT_USED_COUNT
        EXPERT_SHARED_FEED_FORWARD_LENGTH = gguf.Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH
        EMBEDDING_SCALE = gguf.Keys.LLM.EMBEDDING_SCALE
        RESIDUAL_SCALE = gguf.Keys.LLM.RESIDUAL_SCALE
        LOGIT_SCALE = gguf.Keys.LLM.LOGIT_SCALE
        EXPERT_FEED_FORWARD_LENGTH = gguf.Keys.LLM.EXPERT_FEED_FORWARD_LENGTH
        MOE_LATENT_SIZE = gguf.Keys.LLM.MOE_LATENT_SIZE   # nemotron_h_moe's latent MoE (Nemotron 3 Super)
        FULL_ATTENTION_INTERVAL = gguf.Keys.LLM.FULL_ATTENTION_INTERVAL
        FINAL_LOGIT_SOFTCAPPING = gguf.Keys.LLM.FINAL_LOGIT_SOFTCAPPING   # Gemma-2's; recurrent-gemma's logits_soft_cap
        # qwen4exp: row width of per_layer_token_embd (one PLE n-gram head)
        EMBD_LENGTH_PER_LAYER_INP = gguf.Keys.LLM.EMBD_LENGTH_PER_LAYER_INP
        # MTP / NextN layers appended after the main layers (block_count includes them;
        # the runtime runs block_count - nextn_predict_layers layers)
        NEXTN_PREDICT_LAYERS = gguf.Keys.LLM.NEXTN_PREDICT_LAYERS
        # Nemotron-H MoE routing (llama.cpp's gguf-py names; spelled out for older gguf packages)
        EXPERT_SHARED_COUNT = "{arch}.expert_shared_count"
        EXPERT_WEIGHTS_NORM = "{arch}.expert_weights_norm"
        EXPERT_WEIGHTS_SCALE = "{arch}.expert_weights_scale"
        EXPERT_GROUP_COUNT = "{arch}.expert_group_count"
        EXPERT_GROUP_USED_COUNT = "{arch}.expert_group_used_count"
        # MoE routing (LFM2-MoE): dense blocks before the MoE ones, the score function
        # (llama.cpp llama_expert_gating_func_type: 1 softmax, 2 sigmoid), the routed weights'
        # scale and renormalisation
        LEADING_DENSE_BLOCK_COUNT = gguf.Keys.LLM.LEADING_DENSE_BLOCK_COUNT
        EXPERT_GATING_FUNC = gguf.Keys.LLM.EXPERT_GATING_FUNC
        # ours (not in llama.cpp, which hard-codes each architecture's FFN activation): HF's
        # hidden_act of the FFN gate (act(gate x) * up x), written only when it is not the
        # family's default (silu), so default files stay byte-identical; llama.cpp runs such a
        # file with its own activation (wrong logits).  Values: toolkit.arch.readers.FFN_ACTS
        FEED_FORWARD_ACTIVATION = "{arch}.feed_forward.activation"

    class Attention:
        HEAD_COUNT = gguf.Keys.Attention.HEAD_COUNT
        HEAD_COUNT_KV = gguf.Keys.Attention.HEAD_COUNT_KV
        KEY_LENGTH = gguf.Keys.Attention.KEY_LENGTH
        VALUE_LENGTH = gguf.Keys.Attention.VALUE_LENGTH
        LAYERNORM_RMS_EPS = gguf.Keys.Attention.LAYERNORM_RMS_EPS
        LAYERNORM_EPS = gguf.Keys.Attention.LAYERNORM_EPS   # Nemotron-H: what llama.cpp's loader reads
        SCALE = gguf.Keys.Attention.SCALE
        # ours (not in gguf 0.19): explicit list of attention layers of a hybrid model
        LAYER_INDICES = "{arch}.attention.layer_indices"
        # llama.cpp 0c1e570's gguf-py (not in gguf 0.19): per layer, tokens averaged into one QSA
        # index block (0 = dense / not an indexed layer), INT32 array
        COMPRESS_RATIOS = "{arch}.attention.compress_ratios"
        # llama.cpp 0c1e570's gguf-py (not in gguf 0.19): per layer, true = recurrent, BOOL array
        RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"
        # llama.cpp's (gguf-py Keys.Attention): the window of the sliding-window layers, and per
        # layer true = sliding (BOOL array)
        SLIDING_WINDOW = gguf.Keys.Attention.SLIDING_WINDOW
        SLIDING_WINDOW_PATTERN = gguf.Keys.Attention.SLIDING_WINDOW_PATTERN

        class Indexer:
            """QSA / DSA token indexer (gguf-py Keys.Attention.Indexer)."""
            HEAD_COUNT = gguf.Keys.Attention.Indexer.HEAD_COUNT
            KEY_LENGTH = gguf.Keys.Attention.Indexer.KEY_LENGTH
            TOP_K = gguf.Keys.Attention.Indexer.TOP_K
            # llama.cpp 0c1e570's glm5-next DSA k-pool keys (not in gguf 0.19)
            KPOOL = "{arch}.attention.indexer.kpool"                      # tokens per pool
            KPOOL_SELECT_TAIL = "{arch}.attention.indexer.kpool_select_tail"  # bool: the incomplete tail is attended
            TYPES = "{arch}.attention.indexer.types"                      # bool [block_count]: full (own indexer) / shared

    class Rope:
        DIMENSION_COUNT = gguf.Keys.Rope.DIMENSION_COUNT
        FREQ_BASE = gguf.Keys.Rope.FREQ_BASE
        SCALING_FINETUNED = gguf.Keys.Rope.SCALING_FINETUNED
        DIMENSION_SECTIONS = gguf.Keys.Rope.DIMENSION_SECTIONS
        # llama.cpp's RoPE scaling (rope.scaling.type "none" / "linear" / "yarn" / "longrope")
        SCALING_TYPE = gguf.Keys.Rope.SCALING_TYPE
        SCALING_FACTOR = gguf.Keys.Rope.SCALING_FACTOR
        SCALING_ORIG_CTX_LEN = gguf.Keys.Rope.SCALING_ORIG_CTX_LEN
        SCALING_ATTN_FACTOR = gguf.Keys.Rope.SCALING_ATTN_FACTOR
        SCALING_YARN_BETA_FAST = gguf.Keys.Rope.SCALING_YARN_BETA_FAST
        SCALING_YARN_BETA_SLOW = gguf.Keys.Rope.SCALING_YARN_BETA_SLOW
        # llama.cpp's (gemma3 / gemma4): the RoPE base of the sliding-window layers
        FREQ_BASE_SWA = "{arch}.rope.freq_base_swa"
        # ours (LFM3's "proportional" RoPE on the full-attention layers): the dims whose pairs
        # (i, i + n_rot/2) rotate, at base^(-2i/n_rot); the other pairs do not rotate
        PROPORTIONAL_DIMS = "{arch}.rope.proportional_dimension_count"

    class SSM:
        CONV_KERNEL = gguf.Keys.SSM.CONV_KERNEL
        INNER_SIZE = gguf.Keys.SSM.INNER_SIZE
        STATE_SIZE = gguf.Keys.SSM.STATE_SIZE
        TIME_STEP_RANK = gguf.Keys.SSM.TIME_STEP_RANK
        GROUP_COUNT = gguf.Keys.SSM.GROUP_COUNT
        DT_B_C_RMS = gguf.Keys.SSM.DT_B_C_RMS
        # ours (not in gguf 0.19): Mamba-2 head dim (d_inner / n_head)
        HEAD_DIM = "{arch}.ssm.head_dim"
        # ours (not in llama.cpp): gated delta net value head dim Dv, written only when it
        # differs from the key head dim Dk (ssm.state_size); llama.cpp reads both from
        # ssm.state_size, so files with Dk == Dv stay identical to its own
        VALUE_HEAD_DIM = "{arch}.ssm.value_head_dim"
        # ours (not in llama.cpp): Falcon-H1's mamba_norm_before_gate, written only when true
        # (the gated norm is rmsnorm(y) w * silu(z)); llama.cpp always gates first
        NORM_BEFORE_GATE = "{arch}.ssm.norm_before_gate"
        # ours (not in llama.cpp): the gated delta net's output gate activation, "silu" or
        # "sigmoid" (HF qwen4_exp ``output_gate_type or hidden_act``); llama.cpp's qwen4exp
        # hard-codes sigmoid (docs/specs/gdn-family.md B3), so a file without the key is read as sigmoid
        OUTPUT_GATE_TYPE = "{arch}.ssm.output_gate_type"
        # ours (not in llama.cpp): the epsilon of FalconMamba's weightless dt / B / C RMSNorms
        # (HF mixer_rms_eps), written only when it differs from layer_norm_rms_epsilon, which
        # llama.cpp uses there (docs/specs/more-hybrids.md F1); a file without it reads rms_eps
        DT_B_C_RMS_EPS = "{arch}.ssm.dt_b_c_rms_epsilon"
        # ours (not in llama.cpp): Mamba-1 heads with their own x_proj / dt_proj (Zamba v1
        # n_mamba_heads; docs/specs/more-hybrids.md §7.3)
        HEAD_COUNT = "{arch}.ssm.head_count"
        # ours (not in llama.cpp, whose Mamba-2 scan has no dt clamp): the Mamba-2 dt clamp
        # dt = min(max(softplus(dt + dt_bias), dt_min), dt_max) of HF's chunked scan (dt_limit:
        # time_step_limit for Mamba-2 / Bamba / Granite 4.0-H / Falcon-H1, (time_step_min, inf) for
        # Zamba2 and Nemotron-H), each written only when it clamps (dt_min > 0, dt_max finite)
        DT_MIN = "{arch}.ssm.dt_min"
        DT_MAX = "{arch}.ssm.dt_max"
        # ours (not in llama.cpp): the gated delta net's beta = sigmoid(b) * beta_scale (OLMo-Hybrid's
        # linear_allow_neg_eigval: 2.0, beta in (0, 2); docs/specs/more-hybrids.md §3.3), written only
        # when it is not 1, llama.cpp's GDN value; a file without it reads 1
        BETA_SCALE = "{arch}.ssm.beta_scale"
        # ours (not in llama.cpp, which hard-codes SiLU after the causal conv of its Mamba / GDN / KDA
        # graphs): HF's hidden_act of the mixer's conv (Nemotron-H mamba_hidden_act, Zamba
        # hidden_mamba_act), an HF ACT2FN name, written only when it is not silu, so default files stay
        # byte-identical; llama.cpp runs such a file with SiLU (wrong logits).  Values:
        # toolkit.arch.readers.FFN_ACTS
        ACTIVATION = "{arch}.ssm.activation"

    class KDA:
        """Kimi Delta Attention and its MLA / MoE neighbours (docs/specs/kda-family.md §1.2).  llama.cpp
        0c1e570's keys (not in gguf 0.19), then ours, each written only where llama.cpp's file
        cannot say the value (a file without them reads what llama.cpp assumes)."""
        HEAD_DIM = "{arch}.kda.head_dim"                      # llama.cpp: D
        GATE_LOWER_BOUND = "{arch}.kda.gate_lower_bound"      # llama.cpp (glm5-next, bailingmoe3): bounded gate
        SAFE_GATE = "{arch}.kda.safe_gate"                    # llama.cpp (bailingmoe3): bool, the bounded gate;
                                                              # ours on glm5-next: false = the softplus gate
        SWIGLU_CLAMP_EXP = "{arch}.swiglu_clamp_exp"          # llama.cpp: float [block_count], routed experts
        SWIGLU_CLAMP_SHEXP = "{arch}.swiglu_clamp_shexp"      # llama.cpp: float [block_count], shared / dense
        Q_LORA_RANK = "{arch}.attention.q_lora_rank"          # llama.cpp writes it (its kimi loader ignores it)
        KV_LORA_RANK = "{arch}.attention.kv_lora_rank"
        KEY_LENGTH_MLA = "{arch}.attention.key_length_mla"    # dn + dr
        VALUE_LENGTH_MLA = "{arch}.attention.value_length_mla"  # dv
        # ours: KDA heads when they differ from attention.head_count (llama.cpp uses head_count)
        HEAD_COUNT = "{arch}.kda.head_count"
        # ours: epsilon of the KDA q / k l2-norm (HF 1e-6; llama.cpp uses layer_norm_rms_epsilon)
        L2_NORM_EPS = "{arch}.kda.l2_norm_epsilon"
        # ours: epsilon of the MLA q_a / kv_a RMSNorms (HF kimi 1e-6; llama.cpp uses layer_norm_rms_epsilon)
        MLA_NORM_EPS = "{arch}.attention.mla_norm_epsilon"

    class RGLRU:
        """RecurrentGemma's RG-LRU (docs/specs/more-hybrids.md §6.3's proposed key)."""
        WIDTH = "{arch}.rglru.width"                   # lru_width: the recurrence's channel count

    class ShortConv:
        """LFM2's gated short convolution (llama.cpp gguf-py ``Keys.ShortConv``; not in gguf 0.19)."""
        L_CACHE = "{arch}.shortconv.l_cache"          # conv kernel width K (HF conv_L_cache)

    class HyperConnection:
        """Hyper-connections (qwen4exp); llama.cpp 0c1e570's gguf-py ``Keys.HyperConnection``
        (not in gguf 0.19)."""
        COUNT = "{arch}.hyper_connection.count"          # residual streams (hc_count)
        LOW_RANK = "{arch}.hyper_connection.low_rank"    # rank of the input mixer (hc_lowrank)
        # llama.cpp 0c1e570's glm5-next mHC keys (not in gguf 0.19); its loader accepts only a count of 4
        SINKHORN_ITERATIONS = "{arch}.hyper_connection.sinkhorn_iterations"
        EPSILON = "{arch}.hyper_connection.epsilon"

    class Zamba2:
        """Zamba2's shared transformer blocks (ours: llama.cpp has no Zamba2; README "Zamba2 layout")."""
        SHARED_BLOCK_COUNT = "{arch}.shared_block_count"  # num_mem_blocks: shared.{b}.* sets stored once
        SHARED_BLOCK_MAP = "{arch}.shared_block_map"      # INT32 [block_count]: -1 Mamba-2 only, else b
        ADAPTER_RANK = "{arch}.adapter_rank"              # LoRA rank r of the per-layer adapters
        SSM_DT_MIN = "{arch}.ssm.dt_min"                  # time_step_min: dt floor of the chunked scan (= SSM.DT_MIN)

    class PerLayerEmbedding:
        """Per-layer n-gram hash embeddings, PLE (qwen4exp); llama.cpp 0c1e570's gguf-py
        ``Keys.PerLayerEmbedding`` (not in gguf 0.19).  The hash constants are UINT64 arrays
        (gguf-py ``_add_u64_array``): multipliers reach 2^45 (2^54 for a 512-token vocabulary),
        which neither INT32 nor a float holds exactly."""
        LAYERS = "{arch}.ple.layers"                       # 0-based layer ids, INT32 array
        NGRAM_SIZE = "{arch}.ple.ngram_size"
        HEADS_PER_NGRAM = "{arch}.ple.heads_per_ngram"
        CONV_KERNEL = "{arch}.ple.conv_kernel"
        LAYER_MULTIPLIERS = "{arch}.ple.layer_multipliers"  # UINT64 [ngram_size]
        HEAD_OFFSETS = "{arch}.ple.head_offsets"            # UINT64 [(ngram_size - 1) * heads_per_ngram]
        HEAD_VOCAB_SIZES = "{arch}.ple.head_vocab_sizes"    # UINT64 [(ngram_size - 1) * heads_per_ngram]
        EOS_TOKEN_ID = "{arch}.ple.eos_token_id"
        IMAGE_TOKEN_ID = "{arch}.ple.image_token_id"

    class Tokenizer:
        MODEL = gguf.Keys.Tokenizer.MODEL
        PRE = gguf.Keys.Tokenizer.PRE
        LIST = gguf.Keys.Tokenizer.LIST
        TOKEN_TYPE = gguf.Keys.Tokenizer.TOKEN_TYPE
        SCORES = gguf.Keys.Tokenizer.SCORES
        MERGES = gguf.Keys.Tokenizer.MERGES
        BOS_ID = gguf.Keys.Tokenizer.BOS_ID
        EOS_ID = gguf.Keys.Tokenizer.EOS_ID
        EOT_ID = gguf.Keys.Tokenizer.EOT_ID
        EOM_ID = gguf.Keys.Tokenizer.EOM_ID
        UNK_ID = gguf.Keys.Tokenizer.UNK_ID
        PAD_ID = gguf.Keys.Tokenizer.PAD_ID
        SEP_ID = gguf.Keys.Tokenizer.SEP_ID
        MASK_ID = gguf.Keys.Tokenizer.MASK_ID
        ADD_SEP = gguf.Keys.Tokenizer.ADD_SEP
        ADD_BOS = gguf.Keys.Tokenizer.ADD_BOS
        ADD_EOS = gguf.Keys.Tokenizer.ADD_EOS
        ADD_PREFIX = gguf.Keys.Tokenizer.ADD_PREFIX
        CHAT_TEMPLATE = gguf.Keys.Tokenizer.CHAT_TEMPLATE
        HF_JSON = gguf.Keys.Tokenizer.HF_JSON

    class IMatrix:
        # llama.cpp's imatrix GGUF (tools/imatrix): tensors NAME.in_sum2 / NAME.counts
        DATASETS = gguf.Keys.IMatrix.DATASETS
        CHUNK_COUNT = gguf.Keys.IMatrix.CHUNK_COUNT
        CHUNK_SIZE = gguf.Keys.IMatrix.CHUNK_SIZE

    class Quantize:
        # written by llama-quantize --imatrix (tools/quantize/quantize.cpp); not in gguf 0.19
        IMATRIX_FILE = "quantize.imatrix.file"
        IMATRIX_DATASET = "quantize.imatrix.dataset"
        IMATRIX_N_ENTRIES = "quantize.imatrix.entries_count"
        IMATRIX_N_CHUNKS = "quantize.imatrix.chunks_count"


def k(template: str, arch: str) -> str:
    """Format a per-architecture key template: ``k("{arch}.block_count", "mamba")``."""
    return template.format(arch=arch)


# Architecture names as llama.cpp spells them (general.architecture).
ARCH_MAMBA = "mamba"
ARCH_MAMBA2 = "mamba2"
ARCH_GRANITE_HYBRID = "granitehybrid"
ARCH_JAMBA = "jamba"
# which of these the runtime runs: toolkit.arch.table.RUNTIME_ARCHES
ARCH_QWEN4EXP = "qwen4exp"
ARCH_QWEN3NEXT = "qwen3next"
ARCH_QWEN35 = "qwen35"
ARCH_QWEN35MOE = "qwen35moe"
ARCH_NEMOTRON_H = "nemotron_h"
ARCH_NEMOTRON_H_MOE = "nemotron_h_moe"
ARCH_FALCON_H1 = "falcon-h1"
ARCH_LFM2 = "lfm2"
ARCH_LFM2MOE = "lfm2moe"
ARCH_ZAMBA2 = "zamba2"           # no llama.cpp architecture: our layout (README "Zamba2 layout")
ARCH_ZAMBA = "zamba"             # Zamba v1; no llama.cpp architecture: our layout (README "Zamba layout")
ARCH_OLMO_HYBRID = "olmo-hybrid" # no llama.cpp architecture: docs/specs/more-hybrids.md §3.3's proposed names
ARCH_LFM3 = "lfm3"               # no llama.cpp architecture: llama.cpp's lfm2 layout + sliding window (README "LFM3 layout")
ARCH_RECURRENT_GEMMA = "recurrent-gemma"  # no llama.cpp architecture: docs/specs/more-hybrids.md §6.3's proposed names
ARCH_MINIMAX = "minimax-01"       # llama.cpp's MiniMax-Text-01 (docs/specs/more-hybrids.md §5)
# ours (minimax-01): [lightning, attention, FFN] residual factors, written only when llama.cpp's one
# residual_scale (alpha, every beta 1) cannot say them
MINIMAX_RESIDUAL_ALPHA = "{arch}.residual_alpha"
MINIMAX_RESIDUAL_BETA = "{arch}.residual_beta"
ARCH_KIMI_LINEAR = "kimi-linear"   # llama.cpp's Kimi-Linear (docs/specs/kda-family.md §1.2)
ARCH_GLM5_NEXT = "glm5-next"       # llama.cpp's GLM-5-Next text model (docs/specs/kda-family.md §1.3)
ARCH_BAILINGMOE3 = "bailingmoe3"   # llama.cpp's Ling 3 / BailingMoeV3 (docs/specs/kda-family.md §1.4)
ARCH_LARA_MINI = "lara-mini"       # no llama.cpp architecture: docs/specs/more-hybrids.md §8.3's proposed names (qwen35moe's layout)

GGUF_DEFAULT_ALIGNMENT = gguf.GGUF_DEFAULT_ALIGNMENT


def type_size(ggml_type: int) -> tuple[int, int]:
    """(block_size in elements, type_size in bytes) of a ggml type, from gguf's table."""
    return gguf.GGML_QUANT_SIZES[GGMLType(ggml_type)]


def row_nbytes(ggml_type: int, n_per_row: int) -> int:
    """Bytes of one row of ``n_per_row`` elements; raises ValueError if not a block multiple."""
    bs, ts = type_size(ggml_type)
    if n_per_row % bs:
        raise ValueError(f"row of {n_per_row} elements is not a multiple of the {GGMLType(ggml_type).name} block size {bs}")
    return n_per_row // bs * ts
