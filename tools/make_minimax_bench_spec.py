"""Write bench/minimax-0.5b/ (config.json, tensors.json, tokenizer and generation config): the spec that
tools/make_random_checkpoint.py turns into a random-weight MiniMaxForCausalLM of 0.5B for
bench/run.py.  Shapes after MiniMax-Text-01 scaled down: heads of 128 (8 query heads, 2 KV heads),
attention on every 8th layer (7 and 15 of 16, as MiniMax-Text-01's pattern), MoE on every layer (8
experts, top-2, width 896), one residual α on every branch and β 1 (MiniMax-Text-01's
3.5566, so llama.cpp's single residual_scale represents it), block_size 256, vocab 32768.  The
tensor list is what transformers 5.24 saves for this config (the model built on the meta device:
nothing allocated), the four lightning decay buffers included (the converter drops them).

    /tmp/devenv_m1/bin/python tools/make_minimax_bench_spec.py [OUT_DIR]   # default bench/minimax-0.5b
"""
import json
import math
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TOKENIZER = os.path.join(REPO, "tests", "fixtures", "hf", "minimax-tiny")
ALPHA = 3.5565588200778455

CONFIG = dict(
    vocab_size=32768, hidden_size=1024, intermediate_size=896, num_hidden_layers=16, num_attention_heads=8,
    num_key_value_heads=2, head_dim=128, num_local_experts=8, num_experts_per_tok=2, block_size=256,
    layer_types=["full_attention" if (i + 1) % 8 == 0 else "linear_attention" for i in range(16)],
    full_attn_alpha_factor=ALPHA, linear_attn_alpha_factor=ALPHA, mlp_alpha_factor=ALPHA,
    full_attn_beta_factor=1.0, linear_attn_beta_factor=1.0, mlp_beta_factor=1.0,
    rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1e7}, max_position_embeddings=32768,
    bos_token_id=0, eos_token_id=0, pad_token_id=1, tie_word_embeddings=False, initializer_range=0.02)
N_SHARDS = 4


def main(argv):
    import torch
    import transformers
    out = argv[0] if argv else os.path.join(REPO, "bench", "minimax-0.5b")
    os.makedirs(out, exist_ok=True)
    cfg = transformers.MiniMaxConfig(**CONFIG)
    cfg.architectures = ["MiniMaxForCausalLM"]
    cfg.dtype = "bfloat16"
    with torch.device("meta"):
        model = transformers.MiniMaxForCausalLM(cfg)
    shapes = {}
    for k, v in model.state_dict().items():      # the module's names -> the saved ones (docs/specs/more-hybrids.md §5.2)
        if ".mlp.experts.gate_up_proj" in k:       # [E, 2F, H] fused: saved as w1 (gate), w3 (up)
            for e in range(v.shape[0]):
                for w in ("w1", "w3"):
                    shapes[k.replace("mlp.experts.gate_up_proj", f"block_sparse_moe.experts.{e}.{w}.weight")] = \
                        [v.shape[1] // 2, v.shape[2]]
        elif ".mlp.experts.down_proj" in k:        # [E, H, F]: w2
            for e in range(v.shape[0]):
                shapes[k.replace("mlp.experts.down_proj", f"block_sparse_moe.experts.{e}.w2.weight")] = list(v.shape[1:])
        else:
            shapes[k.replace(".mlp.gate.", ".block_sparse_moe.gate.")] = list(v.shape)
    names = list(shapes)
    buffer = lambda n: "decay" in n or "slope" in n  # noqa: E731
    total = sum(math.prod(shapes[n]) for n in names if not buffer(n))
    per = -(-len(names) // N_SHARDS)
    shards = [f"model-{i + 1:05d}-of-{N_SHARDS:05d}.safetensors" for i in range(N_SHARDS)]
    tensors = [dict(name=n, shape=shapes[n], dtype="F32" if buffer(n) else "BF16", shard=shards[i // per])
               for i, n in enumerate(names)]
    with open(os.path.join(out, "tensors.json"), "w") as fh:
        json.dump(dict(shards=shards, tensors=tensors), fh, indent=1)
    cfg.to_json_file(os.path.join(out, "config.json"))
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(TOKENIZER, f), out)
    print(f"{out}: {len(names)} tensors, {total / 1e6:.0f}M parameters (decay buffers aside)")


if __name__ == "__main__":
    main(sys.argv[1:])
