#!/usr/bin/env python3
"""Make the small qwen35moe / qwen3next checkpoints behind the MoE quantize references.

Needs torch + transformers >= 5.24 (run it in the HF venv, never in tests):

    /tmp/venv-hf/bin/python tools/make_gdn_moe_quant_models.py OUT_DIR

writes OUT_DIR/qwen35moe-small and OUT_DIR/qwen3next-small (save_pretrained, float32, several
safetensors shards, the 512-token byte-level BPE tokenizer of tests/fixtures/hf/qwen35moe-tiny).
Every quantized tensor's row width (ne0) is a multiple of 256, so the k-quants apply without
fallbacks: hidden 256, attention 4 heads x 64 (attn_output ne0 = 256), linear attention
Hk 2 x Dk 64, Hv 4 x Dv 64 (ssm_out ne0 = 256), expert and shared-expert widths 256.

| model | class | layers | experts |
|---|---|---|---|
| qwen35moe-small | Qwen3_5MoeForCausalLM | GDN, attention | 8, top 2, + shared (256) |
| qwen3next-small | Qwen3NextForCausalLM | GDN, attention | 4, top 2, + gated shared (256) |

8 experts is the count for which llama-quantize raises attn_v / attn_qkv / attn_k to Q8_0 and
attn_output to Q5_K; 4 takes its other branches (and both parse the layer from the name).
Values: normal(0, 0.08) matrices, every 1-D parameter randomised (norm gains around 1, biases
around 0, A_log = log U(1, 16)); seed 0.  Type selection does not depend on them, the bytes do.

A second job copies a Qwen3.5-MoE checkpoint and gives it the MTP block real checkpoints carry
(``mtp.*``, which save_pretrained drops): ``mtp.layers.0.*`` = the last layer's tensors x 0.9 +
0.01, ``mtp.fc`` [D, 2D] random, the three MTP norms random; ``mtp_num_hidden_layers`` = 1:

    /tmp/venv-hf/bin/python tools/make_gdn_moe_quant_models.py --add-mtp SRC_DIR OUT_DIR

(tests/fixtures/quant/qwen35moe-tiny-mtp.f32.gguf: from tests/fixtures/hf/qwen35moe-tiny, converted
without --no-mtp, so the GGUF has a blk.4 with nextn.* tensors and nextn_predict_layers 1.)

Then, with llama.cpp 0c1e570 (llama-cpp-python 0.3.36 sdist, vendor/llama.cpp; see
tests/fixtures/quant/README.md for the exact commands):
convert_hf_to_gguf.py --outtype f32 --no-mtp (BPE pre-tokenizer forced to ``gpt-2``),
llama-quantize to the 15 file types with 2 threads, tools/make_quant_reference.py.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_DIR = os.path.join(HERE, "..", "tests", "fixtures", "hf", "qwen35moe-tiny")

COMMON = dict(
    hidden_size=256, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
    num_attention_heads=4, num_key_value_heads=1, head_dim=64,
    linear_num_key_heads=2, linear_key_head_dim=64, linear_num_value_heads=4, linear_value_head_dim=64,
    linear_conv_kernel_dim=4, num_experts_per_tok=2, moe_intermediate_size=256,
    shared_expert_intermediate_size=256, vocab_size=512, max_position_embeddings=32768,
    rms_norm_eps=1e-6, initializer_range=0.08, tie_word_embeddings=False,
    bos_token_id=0, eos_token_id=0, pad_token_id=1, dtype="float32",
)

MODELS = {
    "qwen35moe-small": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(
        num_experts=8, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                        "mrope_interleaved": True, "mrope_section": [3, 3, 2]})),
    "qwen3next-small": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(
        num_experts=4, intermediate_size=512, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})),
}


def randomise(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Matrices ~ N(0, 0.08); 1-D parameters randomised so none is a constant."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 16.0, generator=gen)))
            elif p.dim() == 1 and "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=gen))


def make(out_dir: str, name: str) -> str:
    cfg_cls, model_cls, extra = MODELS[name]
    cfg = getattr(transformers, cfg_cls)(**COMMON, **extra)
    cfg.architectures = [model_cls]
    model = getattr(transformers, model_cls)(cfg).float().eval()
    randomise(model, torch.Generator().manual_seed(0))
    dst = os.path.join(out_dir, name)
    model.save_pretrained(dst, max_shard_size="2MB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_DIR, f), dst)
    n = sum(p.numel() for p in model.parameters())
    with open(os.path.join(dst, "config.json")) as fh:
        arch = json.load(fh)["architectures"]
    print(f"{dst}: {arch}, {n} parameters")
    return dst


def add_mtp(src: str, dst: str) -> str:
    """Copy checkpoint SRC to DST with an MTP block (mtp.*) in one more shard (numpy only)."""
    import numpy as np
    from safetensors.numpy import load_file, save_file
    shutil.copytree(src, dst)
    with open(os.path.join(src, "model.safetensors.index.json")) as fh:
        idx = json.load(fh)
    with open(os.path.join(src, "config.json")) as fh:
        cfg = json.load(fh)
    last, d = f"model.layers.{cfg['num_hidden_layers'] - 1}.", cfg["hidden_size"]
    rng = np.random.default_rng(5)
    mtp = {}
    for k, f in idx["weight_map"].items():
        if k.startswith(last):
            t = load_file(os.path.join(src, f))[k]
            mtp["mtp.layers.0." + k[len(last):]] = (t * np.float32(0.9) + np.float32(0.01)).astype(t.dtype)
    mtp["mtp.fc.weight"] = (0.08 * rng.standard_normal((d, 2 * d))).astype(np.float32)
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        mtp[f"mtp.{n}.weight"] = (0.1 * rng.standard_normal(d)).astype(np.float32)
    save_file(mtp, os.path.join(dst, "model-mtp.safetensors"), metadata={"format": "pt"})
    idx["weight_map"].update({k: "model-mtp.safetensors" for k in mtp})
    cfg["mtp_num_hidden_layers"] = 1
    for name, obj in (("model.safetensors.index.json", idx), ("config.json", cfg)):
        with open(os.path.join(dst, name), "w") as fh:
            json.dump(obj, fh, indent=2)
    print(f"{dst}: {len(mtp)} mtp tensors")
    return dst


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[1] == "--add-mtp":
        add_mtp(argv[2], argv[3])
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    for name in MODELS:
        make(argv[1], name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
