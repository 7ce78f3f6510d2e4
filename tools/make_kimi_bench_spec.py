"""Write bench/kimilinear-1.5b: a Kimi-Linear spec folder for tools/make_random_checkpoint.py
(config.json in the published form, tensors.json as the published checkpoints name and shard
them, BF16; the tokenizer of bench/qwen35moe-1.5b).

    python3 tools/make_kimi_bench_spec.py [OUT_DIR]     # default bench/kimilinear-1.5b

The model: hidden 1024, 24 layers (MLA every 4th, 1-based 4, 8, ..., 24; KDA the others: 16 heads
of 64, conv 4), MLA 16 heads (dn 64, dr 32, dv 64, kv_lora_rank 256, no q-LoRA), layer 0 dense
(2816), then MoE: 72 experts of 256, top-6, one shared expert, sigmoid router with bias;
vocab 32768.  About 1.5B parameters in all, 0.3B active per token (the parameter counts are
printed).
"""
import json
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOK = os.path.join(REPO, "..", "shared", "bench", "qwen35moe-1.5b")
H, L, V = 1024, 24, 32768
n, D, K = 16, 64, 4
h, dn, dr, dv, rkv = 16, 64, 32, 64, 256
F, E, Fe, k, S = 2816, 72, 256, 6, 1
FULL = [i for i in range(1, L + 1) if i % 4 == 0]

CONFIG = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "hidden_size": H,
    "num_hidden_layers": L, "vocab_size": V, "intermediate_size": F, "moe_intermediate_size": Fe,
    "num_attention_heads": h, "num_key_value_heads": h, "q_lora_rank": None, "kv_lora_rank": rkv,
    "qk_nope_head_dim": dn, "qk_rope_head_dim": dr, "v_head_dim": dv, "num_experts": E,
    "num_experts_per_token": k, "num_shared_experts": S, "num_expert_group": 1, "topk_group": 1,
    "moe_renormalize": True, "routed_scaling_factor": 2.446, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 1,
    "model_max_length": 1048576, "first_k_dense_replace": 1, "moe_router_activation_func": "sigmoid",
    "mla_use_nope": True, "num_nextn_predict_layers": 0, "torch_dtype": "bfloat16",
    "linear_attn_config": {"full_attn_layers": FULL, "kda_layers": [i for i in range(1, L + 1) if i not in FULL],
                           "head_dim": D, "num_heads": n, "short_conv_kernel_size": K},
}


def tensors():
    C = n * D
    t = [("model.embed_tokens.weight", [V, H])]
    for i in range(L):
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", [H]), (p + "post_attention_layernorm.weight", [H])]
        a = p + "self_attn."
        if i + 1 in FULL:
            t += [(a + "q_proj.weight", [h * (dn + dr), H]), (a + "kv_a_proj_with_mqa.weight", [rkv + dr, H]),
                  (a + "kv_a_layernorm.weight", [rkv]), (a + "kv_b_proj.weight", [h * (dn + dv), rkv]),
                  (a + "o_proj.weight", [H, h * dv])]
        else:
            t += [(a + f"{x}_proj.weight", [C, H]) for x in "qkv"]
            t += [(a + f"{x}_conv1d.weight", [C, 1, K]) for x in "qkv"]
            t += [(a + "f_a_proj.weight", [D, H]), (a + "f_b_proj.weight", [C, D]), (a + "g_a_proj.weight", [D, H]),
                  (a + "g_b_proj.weight", [C, D]), (a + "b_proj.weight", [n, H]), (a + "A_log", [1, 1, n, 1]),
                  (a + "dt_bias", [C]), (a + "o_norm.weight", [D]), (a + "o_proj.weight", [H, C])]
        if i == 0:
            t += [(p + f"mlp.{x}_proj.weight", [F, H]) for x in ("gate", "up")] + [(p + "mlp.down_proj.weight", [H, F])]
        else:
            m = p + "block_sparse_moe."
            t += [(m + "gate.weight", [E, H]), (m + "gate.e_score_correction_bias", [E])]
            for e in range(E):
                t += [(m + f"experts.{e}.w1.weight", [Fe, H]), (m + f"experts.{e}.w3.weight", [Fe, H]),
                      (m + f"experts.{e}.w2.weight", [H, Fe])]
            t += [(m + f"shared_experts.{x}_proj.weight", [Fe * S, H]) for x in ("gate", "up")]
            t += [(m + "shared_experts.down_proj.weight", [H, Fe * S])]
    t += [("model.norm.weight", [H]), ("lm_head.weight", [V, H])]
    return t


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    ts = tensors()
    n_sh = 8
    per = (len(ts) + n_sh - 1) // n_sh
    shards = [f"model-{j + 1:05d}-of-{n_sh:05d}.safetensors" for j in range(n_sh)]
    f32 = ("A_log", "dt_bias", "e_score_correction_bias", "gate.weight")
    rows = [{"name": nm, "shape": sh, "dtype": "F32" if nm.endswith(f32) else "BF16", "shard": shards[j // per]}
            for j, (nm, sh) in enumerate(ts)]
    with open(os.path.join(out, "tensors.json"), "w") as fh:
        json.dump({"shards": shards, "tensors": rows}, fh, indent=1)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(CONFIG, fh, indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(TOK, f), os.path.join(out, f))
    total = sum(int(__import__("math").prod(s)) for _, s in ts)
    expert = (L - 1) * E * 3 * H * Fe
    print(f"{out}: {len(ts)} tensors, {total / 1e9:.2f}B parameters, {(total - expert + expert * k // E) / 1e9:.2f}B active")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "bench", "kimilinear-1.5b"))
