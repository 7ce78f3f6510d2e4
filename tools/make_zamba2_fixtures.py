"""Make the held-back-style Zamba2 fixtures (tests/fixtures/hf/*), checkpoints that
the reference set's zamba2-tiny (one shared block, hybrid layers 1 and 4) does not cover:

    zamba2-mem2-tiny    two shared blocks (num_mem_blocks 2) over three hybrid layers (1, 2, 4 of 5:
                        blocks 0, 1, 0), the original hub form of ``layers_block_type`` ("mamba" /
                        "hybrid"), mamba_ngroups 2, mamba_d_conv 3, mamba_expand 1 (4 heads of 16),
                        2 attention heads of 64, adapter rank 4, intermediate_size 64
    zamba2-dtfloor-tiny hybrid layers 0 and 3 of 4, no RoPE (use_mem_rope false), no attention adapters
                        (use_shared_attention_adapter false: the MLP ones only), dt_bias -9 so that
                        softplus(dt + dt_bias) falls under time_step_min (1e-3) and HF's chunked scan
                        floors it (dt_limit); greedy: argmax of repeated full forwards (HF's decode
                        step does not apply dt_limit, its prompt pass does)
    zamba2-act-tiny     hidden_act "silu" (not gelu; issue 43: the shared block's MLP, adapters on its
                        gate_up_proj), hybrid layers 1 and 3 of 4, one shared block, 4 attention heads,
                        mamba_expand 1 (4 heads of 16), intermediate_size 64
    zamba2-bias-tiny    add_bias_linear: the Mamba-2 in_proj / out_proj biases and the shared MLP's
                        gate_up_proj / down_proj biases (N(0, 0.1)), hybrid layers 1 and 3 of 4,
                        one shared block, RoPE and attention adapters (issue 43)

Runs only where torch and transformers 5.24 are installed (here /tmp/venv-hf), never in the tests:

    /tmp/venv-hf/bin/python tools/make_zamba2_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf

Seeded; every parameter redrawn: matrices N(0, 0.08); RMSNorm weights (Zamba2 computes x w)
1 + N(0, 0.1); A_log = log U(1, 16); D and dt_bias N(0, 0.1) (dt_bias -9 in zamba2-dtfloor-tiny).
Several safetensors shards (max_shard_size 160KB); the tokenizer, token text and reference.npz
layout of tools/make_gdn_fixtures.py (64 tokens, float32 logits [64, 512], 16 greedy tokens).
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import N_GREEDY, N_TOKENS, REPO, TOKENIZER_SRC, tokens_of_source  # noqa: E402

_BASE = dict(vocab_size=512, hidden_size=64, initializer_range=0.08, rms_norm_eps=1e-5, bos_token_id=0,
             eos_token_id=0, pad_token_id=1, mamba_d_state=16, mamba_headdim=16, n_mamba_heads=8, mamba_expand=2,
             intermediate_size=96, chunk_size=256, max_position_embeddings=4096, tie_word_embeddings=True,
             use_mem_rope=True, use_shared_attention_adapter=True, time_step_min=0.001)

SPECS = {
    "zamba2-mem2-tiny": dict(seed=31, text=dict(_BASE, num_hidden_layers=5, num_mem_blocks=2, mamba_ngroups=2,
                                                  mamba_d_conv=3, num_attention_heads=2, num_key_value_heads=2,
                                                  adapter_rank=4, mamba_expand=1, n_mamba_heads=4, intermediate_size=64,
                                                  layers_block_type=["mamba", "hybrid", "hybrid", "mamba", "hybrid"]),
                             hub_block_types=True),
    "zamba2-dtfloor-tiny": dict(seed=32, text=dict(_BASE, num_hidden_layers=4, num_mem_blocks=1, mamba_ngroups=1,
                                                     mamba_d_conv=4, num_attention_heads=4, num_key_value_heads=4,
                                                     adapter_rank=8, use_mem_rope=False,
                                                     use_shared_attention_adapter=False,
                                                     layers_block_type=["hybrid", "mamba", "mamba", "hybrid"]),
                                dt_bias=-9.0, greedy_full_forward=True),
    "zamba2-act-tiny": dict(seed=33, text=dict(_BASE | dict(hidden_act="silu"), num_hidden_layers=4, num_mem_blocks=1,
                                                 mamba_ngroups=1, mamba_d_conv=4, num_attention_heads=4,
                                                 num_key_value_heads=4, adapter_rank=8, mamba_expand=1,
                                                 n_mamba_heads=4, intermediate_size=64,
                                                 layers_block_type=["mamba", "hybrid", "mamba", "hybrid"])),
    "zamba2-bias-tiny": dict(seed=33, text=dict(_BASE, num_hidden_layers=4, num_mem_blocks=1, mamba_ngroups=2,
                                                  mamba_d_conv=4, num_attention_heads=4, num_key_value_heads=4,
                                                  adapter_rank=8, add_bias_linear=True,
                                                  layers_block_type=["mamba", "hybrid", "mamba", "hybrid"])),
}


def _redraw(torch, named, g, dt_bias: float | None) -> None:
    with torch.no_grad():
        for name, p in named:
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif name.endswith("dt_bias") and dt_bias is not None:
                p.fill_(dt_bias)
            elif name.endswith("_proj.bias"):   # add_bias_linear
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(("dt_bias", ".D")):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def _greedy(torch, model, ids, full_forward: bool) -> np.ndarray:
    with torch.no_grad():
        if not full_forward:
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_GREEDY,
                                 do_sample=False)
            return gen[0, N_TOKENS:].numpy().astype(np.int32)
        seq = ids
        for _ in range(N_GREEDY):
            nxt = model(input_ids=seq).logits[0, -1].argmax()
            seq = torch.cat([seq, nxt.view(1, 1)], dim=1)
        return seq[0, N_TOKENS:].numpy().astype(np.int32)


def make(name: str, out_root: str) -> None:
    import torch
    import transformers

    spec = SPECS[name]
    torch.manual_seed(spec["seed"])
    cfg = transformers.Zamba2Config(**spec["text"])
    cfg.architectures = ["Zamba2ForCausalLM"]
    model = transformers.Zamba2ForCausalLM._from_config(cfg, attn_implementation="eager").eval()
    _redraw(torch, model.named_parameters(), torch.Generator().manual_seed(spec["seed"]), spec.get("dt_bias"))
    out = os.path.join(out_root, name)
    if os.path.exists(out):
        shutil.rmtree(out)
    model.save_pretrained(out, max_shard_size="160KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_SRC, f), os.path.join(out, f))
    if spec.get("hub_block_types"):   # the original config.json form ("mamba" / "hybrid")
        path = os.path.join(out, "config.json")
        with open(path) as fh:
            c = json.load(fh)
        c["layers_block_type"] = list(spec["text"]["layers_block_type"])
        with open(path, "w") as fh:
            json.dump(c, fh, indent=2)
    tokens = tokens_of_source()
    ids = torch.tensor(tokens[None].astype(np.int64))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float().numpy().astype(np.float32)
    greedy = _greedy(torch, model, ids, spec.get("greedy_full_forward", False))
    np.savez(os.path.join(out, "reference.npz"), tokens=tokens, logits=logits, greedy=greedy)
    files = sorted(os.listdir(out))
    total = sum(os.path.getsize(os.path.join(out, f)) for f in files)
    print(f"wrote {out}: {total / 1024:.0f} KiB, greedy {greedy.tolist()}")
    if total > 1.4 * 2**20:
        sys.exit(f"{out} is {total / 2**20:.2f} MiB, over the 1.4 MiB fixture budget (< 1.5 MB)")


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        make(name, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
