"""Write bench/glm5next-1b: a GLM-5-Next spec folder for tools/make_random_checkpoint.py
(config.json in the published form, tensors.json as HF's Glm5NextForConditionalGeneration names
them, BF16; the tokenizer of bench/kimilinear-1.5b).  The vision tower is left out (the converter
leaves model.visual.* out with one line); MTP is off (num_nextn_predict_layers 0).

    python3 tools/make_glm5_bench_spec.py [OUT_DIR]     # default bench/glm5next-1b

The model: hidden 1024, 24 layers (indexed MLA attention every 4th, 1-based 4, 8, ..., 24; KDA the
others: 16 heads of 64, conv 4), mHC residual streams (hc_mult 4), MLA 16 heads (dn 64, NoPE,
dv 64, kv_lora_rank 256: a latent row of 256 values, q_lora_rank 384), the DSA indexer (16 heads
of 64, k-pool 16, top-k 2048 tokens, the tail always selected) full on the 1st, 3rd and 5th
attention layers, shared on the others; layer 0 dense (2816), then MoE: 48 experts of 256, top-6,
one shared expert, sigmoid router with bias; vocab 32768.  About 1.0B parameters, 0.2B active per
token (the counts are printed).
"""
import json
import math
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOK = os.path.join(REPO, "bench", "kimilinear-1.5b")
H, L, V = 1024, 24, 32768
n, D, K = 16, 64, 4
h, dn, dr, dv, rkv, rq = 16, 64, 0, 64, 256, 384
nI, dI, KP, TOPK = 16, 64, 16, 2048
F, E, Fe, k, S = 2816, 48, 256, 6, 1
HC = 4
ATTN = [i for i in range(L) if (i + 1) % 4 == 0]
FULL_IDX = [a for j, a in enumerate(ATTN) if j % 2 == 0]

TEXT = {
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0, "hc_eps": 1e-6,
    "hc_mult": HC, "hc_sinkhorn_iters": 20, "head_dim": 0, "hidden_act": "silu", "hidden_size": H,
    "index_head_dim": dI, "index_kpool": KP, "index_kpool_always_select_tail": True, "index_n_heads": nI,
    "index_topk": TOPK,
    "indexer_types": ["shared" if i in ATTN and i not in FULL_IDX else "full" for i in range(L)],
    "initializer_range": 0.02, "intermediate_size": F, "kv_lora_rank": rkv,
    "layer_types": ["indexed_attention" if i in ATTN else "linear_attention" for i in range(L)],
    "max_position_embeddings": 1048576, "mlp_layer_types": ["dense"] + ["sparse"] * (L - 1),
    "model_type": "glm5_next_text", "moe_intermediate_size": Fe, "n_group": 1, "n_routed_experts": E,
    "n_shared_experts": S, "norm_topk_prob": True, "num_attention_heads": h, "num_experts_per_tok": k,
    "num_hidden_layers": L, "num_key_value_heads": h, "output_router_logits": False, "pad_token_id": 1,
    "q_lora_rank": rq, "qk_nope_head_dim": dn, "qk_rope_head_dim": dr, "rms_norm_eps": 1e-5,
    "routed_scaling_factor": 2.5, "router_aux_loss_coef": 0.001, "swiglu_limit": 10.0, "tie_word_embeddings": False,
    "topk_group": 1, "use_cache": True, "v_head_dim": dv, "vocab_size": V,
    "linear_attn_config": {"num_heads": n, "head_dim": D, "short_conv_kernel_size": K, "gate_lower_bound": -5.0},
    "first_k_dense_replace": 1, "mla_use_nope": True, "mhc": True, "scoring_func": "sigmoid",
    "num_nextn_predict_layers": 0,
}
CONFIG = {"architectures": ["Glm5NextForConditionalGeneration"], "dtype": "bfloat16", "model_type": "glm5_next",
          "text_config": TEXT, "tie_word_embeddings": False, "transformers_version": "5.24.0"}


def tensors():
    C, M = n * D, HC * (2 + HC)
    P = "model.language_model."
    t = [(P + "embed_tokens.weight", [V, H])]
    for i in range(L):
        p = f"{P}layers.{i}."
        t += [(p + "input_layernorm.weight", [H]), (p + "post_attention_layernorm.weight", [H])]
        for b in ("attn", "ffn"):
            t += [(p + f"hc_{b}_fn", [M, HC * H]), (p + f"hc_{b}_base", [M]), (p + f"hc_{b}_scale", [3])]
        a = p + "self_attn."
        if i in ATTN:
            t += [(a + "q_a_proj.weight", [rq, H]), (a + "q_a_layernorm.weight", [rq]),
                  (a + "q_b_proj.weight", [h * (dn + dr), rq]), (a + "kv_a_proj_with_mqa.weight", [rkv + dr, H]),
                  (a + "kv_a_layernorm.weight", [rkv]), (a + "kv_b_proj.weight", [h * (dn + dv), rkv]),
                  (a + "o_proj.weight", [H, h * dv])]
            if i in FULL_IDX:
                x = a + "indexer."
                t += [(x + "wq_b.weight", [nI * dI, rq]), (x + "wk.weight", [dI, H]), (x + "k_norm.weight", [dI]),
                      (x + "k_norm.bias", [dI]), (x + "weights_proj.weight", [nI, H]),
                      (x + "index_kpool_compress_ape", [KP, dI]), (x + "index_kpool_compress_gate", [dI, H])]
        else:
            t += [(a + f"{x}_proj.weight", [C, H]) for x in "qkv"]
            t += [(a + f"{x}_conv1d.weight", [C, 1, K]) for x in "qkv"]
            t += [(a + "f_a_proj.weight", [D, H]), (a + "f_b_proj.weight", [C, D]), (a + "g_a_proj.weight", [D, H]),
                  (a + "g_b_proj.weight", [C, D]), (a + "b_proj.weight", [n, H]), (a + "A_log", [n]),
                  (a + "dt_bias", [C]), (a + "o_norm.weight", [D]), (a + "o_proj.weight", [H, C])]
        m = p + "mlp."
        if i == 0:
            t += [(m + f"{x}_proj.weight", [F, H]) for x in ("gate", "up")] + [(m + "down_proj.weight", [H, F])]
        else:
            t += [(m + "gate.weight", [E, H]), (m + "gate.e_score_correction_bias", [E])]
            for e in range(E):
                t += [(m + f"experts.{e}.gate_proj.weight", [Fe, H]), (m + f"experts.{e}.up_proj.weight", [Fe, H]),
                      (m + f"experts.{e}.down_proj.weight", [H, Fe])]
            t += [(m + f"shared_experts.{x}_proj.weight", [Fe * S, H]) for x in ("gate", "up")]
            t += [(m + "shared_experts.down_proj.weight", [H, Fe * S])]
    t += [(P + "norm.weight", [H]), ("lm_head.weight", [V, H])]
    return t


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    ts = tensors()
    n_sh = 8
    per = (len(ts) + n_sh - 1) // n_sh
    shards = [f"model-{j + 1:05d}-of-{n_sh:05d}.safetensors" for j in range(n_sh)]
    f32 = ("A_log", "dt_bias", "e_score_correction_bias", "gate.weight", "hc_attn_fn", "hc_attn_base", "hc_attn_scale",
           "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale", "index_kpool_compress_ape", "index_kpool_compress_gate")
    rows = [{"name": nm, "shape": sh, "dtype": "F32" if nm.endswith(f32) else "BF16", "shard": shards[j // per]}
            for j, (nm, sh) in enumerate(ts)]
    with open(os.path.join(out, "tensors.json"), "w") as fh:
        json.dump({"shards": shards, "tensors": rows}, fh, indent=1)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(CONFIG, fh, indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(TOK, f), os.path.join(out, f))
    total = sum(math.prod(s) for _, s in ts)
    expert = (L - 1) * E * 3 * H * Fe
    print(f"{out}: {len(ts)} tensors, {total / 1e9:.2f}B parameters, {(total - expert + expert * k // E) / 1e9:.2f}B active")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "bench", "glm5next-1b"))
