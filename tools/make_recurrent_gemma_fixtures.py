"""Make the held-back RecurrentGemma fixture (tests/fixtures/hf/recurrentgemma-odd-tiny);
recurrentgemma-tiny is the reference set's (4 layers r, r, a, r; H 64, 4 heads / 1 KV head of 16,
lru 64, K 4, window 16, 8 of 16 dims rotated, soft cap 30).

    recurrentgemma-odd-tiny  5 layers from block_types [recurrent, attention] cycled (r, a, r, a, r),
                             hidden 96 (embedding scale bf16(sqrt 96) = 9.8125, not 9.798), 4 heads of
                             24 over 2 KV heads (GQA, not MQA), partial_rotary_factor 0.25 (6 of 24
                             dims), rope_theta 500, window 8 (the 64-token prompt is 8 windows),
                             attention_bias true (q / k / v biases), lru_width 80 (RG-LRU blocks of 20:
                             not a multiple of 8 or 16), conv1d_width 3, intermediate_size 128 (MLP 64),
                             logits_soft_cap 12, rms_norm_eps 1e-5, tied embeddings
    recurrentgemma-act-tiny  hidden_activation "gelu" (the erf form, not gelu_pytorch_tanh; issue 43):
                             the MLP's gate and the recurrent block's y branch; recurrentgemma-tiny's
                             shapes (r, r, a, r; H 64, 4 heads / 1 KV head of 16, lru 64, K 4, window 16)

Runs only where torch and transformers are installed (here /tmp/devenv_m1), never in the tests:

    /tmp/devenv_m1/bin/python tools/make_recurrent_gemma_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
    /tmp/devenv_m1/bin/python tools/make_recurrent_gemma_fixtures.py --bench-spec bench/recurrentgemma-0.5b

The second form writes the bench model's spec for tools/make_random_checkpoint.py (config.json,
tensors.json: every tensor's saved name, shape, dtype and shard, from transformers' model built on
the meta device; the tokenizer files of bench/qwen35-0.5b): BENCH_CFG below, 0.50 B
parameters, RecurrentGemma-2B's shape (r, r, a cycled over 26 layers, MQA, window 2048) scaled down.

Seeded; every parameter redrawn (RecurrentGemma's own initialiser ignores initializer_range):
matrices and the RG-LRU gate blocks N(0, 0.06); norm weights (HF adds the 1) N(0, 0.1); biases and
the RG-LRU gate biases N(0, 0.3); Lambda (recurrent_param) U(-7, 1), so softplus(Lambda) spans
1e-3 .. 1.3 (slow and fast channels).  Shards, tokenizer, 64 prompt tokens, float32 logits and
the 16 greedy tokens (HF ``generate``, ``min_new_tokens=16``: end-of-text suppressed) as
tools/make_gdn_fixtures.write_fixture writes them.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import REPO, write_fixture  # noqa: E402

SPECS = {
    "recurrentgemma-odd-tiny": dict(seed=61, cfg=dict(
        vocab_size=512, bos_token_id=0, eos_token_id=0, pad_token_id=1, hidden_size=96, intermediate_size=128,
        num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2, lru_width=80, attention_window_size=8,
        conv1d_width=3, logits_soft_cap=12.0, rms_norm_eps=1e-5, block_types=["recurrent", "attention"],
        attention_bias=True, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.25},
        max_position_embeddings=4096)),
    "recurrentgemma-act-tiny": dict(seed=62, cfg=dict(
        vocab_size=512, bos_token_id=0, eos_token_id=0, pad_token_id=1, hidden_size=64, intermediate_size=192,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, lru_width=64, attention_window_size=16,
        conv1d_width=4, logits_soft_cap=30.0, rms_norm_eps=1e-6, block_types=["recurrent", "recurrent", "attention"],
        attention_bias=False, hidden_activation="gelu", tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        max_position_embeddings=4096)),
}


def _redraw(torch, named, g) -> None:
    with torch.no_grad():
        for name, p in named:
            if name.endswith("recurrent_param"):
                p.copy_(torch.empty(p.shape).uniform_(-7.0, 1.0, generator=g))
            elif name.endswith("norm.weight"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.06 * torch.randn(p.shape, generator=g))


def make(name: str, out_root: str) -> None:
    import torch
    import transformers

    spec = SPECS[name]
    torch.manual_seed(spec["seed"])
    cfg = transformers.RecurrentGemmaConfig(**spec["cfg"])
    cfg.architectures = ["RecurrentGemmaForCausalLM"]
    model = transformers.RecurrentGemmaForCausalLM._from_config(cfg).eval()
    _redraw(torch, model.named_parameters(), torch.Generator().manual_seed(spec["seed"]))
    write_fixture(model, os.path.join(out_root, name),
                  lambda out: transformers.RecurrentGemmaForCausalLM.from_pretrained(out).eval(),
                  describe=lambda m: f"normalizer {float(m.model.normalizer)}")


# the bench model: H 1024, lru 1280 (8 heads of 160 in the RG-LRU; 8 attention heads of 128, 1 KV
# head), MLP 4608 (intermediate_size 9216), 26 layers (18 recurrent, 8 attention), vocab 32768, bf16
BENCH_CFG = dict(vocab_size=32768, bos_token_id=1, eos_token_id=2, pad_token_id=0, hidden_size=1024,
                 intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=1,
                 lru_width=1280, attention_window_size=2048, conv1d_width=4, logits_soft_cap=30.0, rms_norm_eps=1e-6,
                 block_types=["recurrent", "recurrent", "attention"], attention_bias=False,
                 hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
                 max_position_embeddings=8192, dtype="bfloat16")
SHARED_BENCH_TOKENIZER = os.path.join(REPO, "..", "shared", "bench", "qwen35-0.5b")


def bench_spec(out: str) -> None:
    import json
    import shutil

    import torch
    import transformers

    cfg = transformers.RecurrentGemmaConfig(**BENCH_CFG)
    cfg.architectures = ["RecurrentGemmaForCausalLM"]
    with torch.device("meta"):
        model = transformers.RecurrentGemmaForCausalLM(cfg)
    os.makedirs(out, exist_ok=True)
    cfg.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(SHARED_BENCH_TOKENIZER, f), os.path.join(out, f))
    params = [(n, list(p.shape)) for n, p in model.named_parameters() if n != "lm_head.weight"]
    total = sum(int(torch.Size(s).numel()) for _, s in params)
    shards = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    tensors, acc = [], 0
    for n, shape in params:
        tensors.append({"name": n, "shape": shape, "dtype": "BF16",
                        "shard": shards[0 if acc < total / 2 else 1]})
        acc += int(torch.Size(shape).numel())
    with open(os.path.join(out, "tensors.json"), "w") as fh:
        json.dump({"shards": shards, "tensors": tensors}, fh, indent=0)
    print(f"wrote {out}: {len(tensors)} tensors, {total / 1e9:.3f} B parameters")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--bench-spec"]:
        bench_spec(argv[1])
        return
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        make(name, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
