"""GGUF tensor names as llama.cpp spells them (from gguf-py's table), templated by block id.

    tn(T.SSM_IN, 3)             -> "blk.3.ssm_in.weight"
    tn(T.SSM_A, 3, suffix="")   -> "blk.3.ssm_a"
    tn(T.TOKEN_EMBD)            -> "token_embd.weight"

Used by convert (what to write), quantize (type rules) and the runtime (what to load).
"""
from __future__ import annotations

import gguf

_M = gguf.MODEL_TENSOR


class T:
    TOKEN_EMBD = gguf.TENSOR_NAMES[_M.TOKEN_EMBD]
    OUTPUT = gguf.TENSOR_NAMES[_M.OUTPUT]
    OUTPUT_NORM = gguf.TENSOR_NAMES[_M.OUTPUT_NORM]
    ATTN_NORM = gguf.TENSOR_NAMES[_M.ATTN_NORM]
    ATTN_Q = gguf.TENSOR_NAMES[_M.ATTN_Q]
    ATTN_K = gguf.TENSOR_NAMES[_M.ATTN_K]
    ATTN_V = gguf.TENSOR_NAMES[_M.ATTN_V]
    ATTN_OUT = gguf.TENSOR_NAMES[_M.ATTN_OUT]
    FFN_NORM = gguf.TENSOR_NAMES[_M.FFN_NORM]
    FFN_GATE = gguf.TENSOR_NAMES[_M.FFN_GATE]
    FFN_UP = gguf.TENSOR_NAMES[_M.FFN_UP]
    FFN_DOWN = gguf.TENSOR_NAMES[_M.FFN_DOWN]
    FFN_GATE_INP = gguf.TENSOR_NAMES[_M.FFN_GATE_INP]
    FFN_GATE_EXP = gguf.TENSOR_NAMES[_M.FFN_GATE_EXP]
    FFN_UP_EXP = gguf.TENSOR_NAMES[_M.FFN_UP_EXP]
    FFN_DOWN_EXP = gguf.TENSOR_NAMES[_M.FFN_DOWN_EXP]
    FFN_GATE_SHEXP = gguf.TENSOR_NAMES[_M.FFN_GATE_SHEXP]
    FFN_UP_SHEXP = gguf.TENSOR_NAMES[_M.FFN_UP_SHEXP]
    FFN_DOWN_SHEXP = gguf.TENSOR_NAMES[_M.FFN_DOWN_SHEXP]
    FFN_LATENT_DOWN = gguf.TENSOR_NAMES[_M.MOE_LATENT_DOWN]   # nemotron_h_moe latent MoE: D -> Dl
    FFN_LATENT_UP = gguf.TENSOR_NAMES[_M.MOE_LATENT_UP]       # Dl -> D
    SSM_IN = gguf.TENSOR_NAMES[_M.SSM_IN]
    SSM_CONV1D = gguf.TENSOR_NAMES[_M.SSM_CONV1D]
    SSM_X = gguf.TENSOR_NAMES[_M.SSM_X]
    SSM_DT = gguf.TENSOR_NAMES[_M.SSM_DT]
    SSM_A = gguf.TENSOR_NAMES[_M.SSM_A]
    SSM_D = gguf.TENSOR_NAMES[_M.SSM_D]
    SSM_NORM = gguf.TENSOR_NAMES[_M.SSM_NORM]
    SSM_OUT = gguf.TENSOR_NAMES[_M.SSM_OUT]
    SSM_DT_NORM = gguf.TENSOR_NAMES[_M.SSM_DT_NORM]
    SSM_B_NORM = gguf.TENSOR_NAMES[_M.SSM_B_NORM]
    SSM_C_NORM = gguf.TENSOR_NAMES[_M.SSM_C_NORM]
    # gated delta net (Qwen3-Next / Qwen3.5 / qwen4exp) and gated attention
    ATTN_QKV = gguf.TENSOR_NAMES[_M.ATTN_QKV]
    ATTN_GATE = gguf.TENSOR_NAMES[_M.ATTN_GATE]
    ATTN_NORM_2 = gguf.TENSOR_NAMES[_M.ATTN_NORM_2]             # minimax-01: the lightning output's norm
    ATTN_Q_NORM = gguf.TENSOR_NAMES[_M.ATTN_Q_NORM]
    ATTN_K_NORM = gguf.TENSOR_NAMES[_M.ATTN_K_NORM]
    SSM_ALPHA = gguf.TENSOR_NAMES[_M.SSM_ALPHA]
    SSM_BETA = gguf.TENSOR_NAMES[_M.SSM_BETA]
    SSM_BETA_ALPHA = gguf.TENSOR_NAMES[_M.SSM_BETA_ALPHA]         # qwen3next: [b(r) | a(r)] per key head
    ATTN_POST_NORM = gguf.TENSOR_NAMES[_M.ATTN_POST_NORM]         # "post_attention_norm": the Qwen FFN pre-norm
    # (olmo-hybrid: the attention output's norm, as llama.cpp's olmo2; lfm3: the sandwich norm of the
    # mixer output) and the FFN output's norm (olmo-hybrid's post-norm, lfm3's sandwich norm)
    FFN_POST_NORM = gguf.TENSOR_NAMES[_M.FFN_POST_NORM]           # "post_ffw_norm"
    # olmo-hybrid's gated delta net convs, saved per part (names as llama.cpp's kimi-linear)
    SSM_CONV1D_Q = "blk.{bid}.ssm_conv1d_q"
    SSM_CONV1D_K = "blk.{bid}.ssm_conv1d_k"
    SSM_CONV1D_V = "blk.{bid}.ssm_conv1d_v"
    # KDA (llama.cpp 0c1e570's kimi-linear names, not in gguf 0.19): low-rank forget / output gates
    SSM_F_A = "blk.{bid}.ssm_f_a"
    SSM_F_B = "blk.{bid}.ssm_f_b"
    SSM_G_A = "blk.{bid}.ssm_g_a"
    SSM_G_B = "blk.{bid}.ssm_g_b"
    # MLA (deepseek2's names)
    ATTN_Q_A = gguf.TENSOR_NAMES[_M.ATTN_Q_A]
    ATTN_Q_B = gguf.TENSOR_NAMES[_M.ATTN_Q_B]
    ATTN_Q_A_NORM = gguf.TENSOR_NAMES[_M.ATTN_Q_A_NORM]
    ATTN_KV_A_MQA = gguf.TENSOR_NAMES[_M.ATTN_KV_A_MQA]
    ATTN_KV_A_NORM = gguf.TENSOR_NAMES[_M.ATTN_KV_A_NORM]
    ATTN_K_B = gguf.TENSOR_NAMES[_M.ATTN_K_B]
    ATTN_V_B = gguf.TENSOR_NAMES[_M.ATTN_V_B]
    # recurrent-gemma's RG-LRU (docs/specs/more-hybrids.md §6.3's proposed names)
    RGLRU_X = "blk.{bid}.rglru_x"              # linear_x: the conv's input branch
    RGLRU_Y = "blk.{bid}.rglru_y"              # linear_y: the GeLU output gate branch
    RGLRU_GATE_I = "blk.{bid}.rglru_gate_i"    # input gate, per head x_h . W_h (HF layout [nh, in, out])
    RGLRU_GATE_A = "blk.{bid}.rglru_gate_a"    # recurrence gate, same layout
    RGLRU_PARAM = "blk.{bid}.rglru_param"      # recurrent_param Lambda (log a = -8 r softplus(Lambda))
    # MTP / NextN block, at blk.{n_layer + i} (runs only as a draft head)
    NEXTN_EH_PROJ = gguf.TENSOR_NAMES[_M.NEXTN_EH_PROJ]
    NEXTN_ENORM = gguf.TENSOR_NAMES[_M.NEXTN_ENORM]
    NEXTN_HNORM = gguf.TENSOR_NAMES[_M.NEXTN_HNORM]
    NEXTN_SHARED_HEAD_NORM = gguf.TENSOR_NAMES[_M.NEXTN_SHARED_HEAD_NORM]
    NEXTN_SHARED_HEAD_HEAD = gguf.TENSOR_NAMES[_M.NEXTN_SHARED_HEAD_HEAD]
    NEXTN_EMBED_TOKENS = gguf.TENSOR_NAMES[_M.NEXTN_EMBED_TOKENS]
    LAYER_OUT_NORM = gguf.TENSOR_NAMES[_M.LAYER_OUT_NORM]   # Ling 3's NextN block: its shared head's norm (HF final_layernorm)
    FFN_GATE_INP_SHEXP = gguf.TENSOR_NAMES[_M.FFN_GATE_INP_SHEXP]
    FFN_EXP_PROBS_B = "blk.{bid}.exp_probs_b"      # Nemotron-H MoE expert choice bias (".bias")
    PER_LAYER_TOKEN_EMBD = gguf.TENSOR_NAMES[_M.PER_LAYER_TOKEN_EMBD]
    # LFM2 / LFM2-MoE: the gated short conv, the final norm (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2
    # spells it "token_embd_norm"), the expert selection bias
    SHORTCONV_CONV = gguf.TENSOR_NAMES[_M.SHORTCONV_CONV]
    SHORTCONV_INPROJ = gguf.TENSOR_NAMES[_M.SHORTCONV_INPROJ]
    SHORTCONV_OUTPROJ = gguf.TENSOR_NAMES[_M.SHORTCONV_OUTPROJ]
    TOKEN_EMBD_NORM = gguf.TENSOR_NAMES[_M.TOKEN_EMBD_NORM]
    FFN_EXP_PROBS_B = gguf.TENSOR_NAMES[_M.FFN_EXP_PROBS_B]
    # qwen4exp names gguf 0.19 lacks, as llama.cpp 0c1e570's gguf-py TENSOR_NAMES spells them
    INDEXER_Q_PROJ = "blk.{bid}.indexer.q_proj"
    INDEXER_K_PROJ = "blk.{bid}.indexer.k_proj"
    INDEXER_Q_NORM = "blk.{bid}.indexer.q_norm"
    INDEXER_K_NORM = "blk.{bid}.indexer.k_norm"
    HC_HEAD_NORM = "output_hc_norm"
    HC_HEAD_DOWN = "output_hc_down"
    HC_HEAD_UP = "output_hc_up"
    HC_ATTN_NORM = "blk.{bid}.hc_attn_norm"
    HC_ATTN_DOWN = "blk.{bid}.hc_attn_down"
    HC_ATTN_UP = "blk.{bid}.hc_attn_up"
    HC_ATTN_INJECT = "blk.{bid}.hc_attn_inject"
    HC_FFN_NORM = "blk.{bid}.hc_ffn_norm"
    HC_FFN_DOWN = "blk.{bid}.hc_ffn_down"
    HC_FFN_UP = "blk.{bid}.hc_ffn_up"
    HC_FFN_INJECT = "blk.{bid}.hc_ffn_inject"
    PLE_KEY = "blk.{bid}.ple_key"
    PLE_VALUE = "blk.{bid}.ple_value"
    PLE_NORM_KEY = "blk.{bid}.ple_norm_key"
    PLE_NORM_QUERY = "blk.{bid}.ple_norm_query"
    PLE_NORM_CONV = "blk.{bid}.ple_norm_conv"
    PLE_CONV1D = "blk.{bid}.ple_conv1d"
    # zamba2 (our layout, README "Zamba2 layout"): shared block {bid} = b, stored once
    SHARED_ATTN_NORM = "shared.{bid}.attn_norm"
    SHARED_ATTN_Q = "shared.{bid}.attn_q"
    SHARED_ATTN_K = "shared.{bid}.attn_k"
    SHARED_ATTN_V = "shared.{bid}.attn_v"
    SHARED_ATTN_OUT = "shared.{bid}.attn_output"
    SHARED_FFN_NORM = "shared.{bid}.ffn_norm"
    SHARED_FFN_GATE = "shared.{bid}.ffn_gate"
    SHARED_FFN_UP = "shared.{bid}.ffn_up"
    SHARED_FFN_DOWN = "shared.{bid}.ffn_down"
    # ... and per hybrid layer: its LoRA adapters (A [r, in], B [out, r]) and its linear projection
    ATTN_Q_LORA_A = "blk.{bid}.attn_q_lora_a"
    ATTN_Q_LORA_B = "blk.{bid}.attn_q_lora_b"
    ATTN_K_LORA_A = "blk.{bid}.attn_k_lora_a"
    ATTN_K_LORA_B = "blk.{bid}.attn_k_lora_b"
    ATTN_V_LORA_A = "blk.{bid}.attn_v_lora_a"
    ATTN_V_LORA_B = "blk.{bid}.attn_v_lora_b"
    FFN_LORA_A = "blk.{bid}.ffn_lora_a"
    FFN_GATE_LORA_B = "blk.{bid}.ffn_gate_lora_b"
    FFN_UP_LORA_B = "blk.{bid}.ffn_up_lora_b"
    SHARED_LINEAR = "blk.{bid}.shared_linear"


def tn(template: str, bid: int | None = None, suffix: str = ".weight") -> str:
    """Format a tensor name template (``blk.{bid}.ssm_in``) with a block id and a suffix."""
    name = template.format(bid=bid) if "{bid}" in template else template
    return name + suffix
