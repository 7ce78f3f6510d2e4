"""Make the held-back-style Zamba (v1) fixtures (tests/fixtures/hf/zamba-*), checkpoints that
the reference set's zamba-tiny (2 Mamba heads, hybrid layers 2 and 4, one tied shared block;
copied here as it is) does not cover:

    zamba-odd-tiny    tie_word_embeddings false, so transformers unties the shared blocks: hybrid
                      layers 0 and 3 of 4 each save their own (docs/specs/more-hybrids.md §7.2); the hub
                      form of ``layers_block_type`` ("mamba" / "hybrid"); hidden 48, 3 Mamba heads of
                      32 (expand 2), d_state 8, d_conv 3, dt_rank 5, 4 attention heads of 24 over 2
                      KV heads, intermediate_size 80, no conv bias
    zamba-1head-tiny  one Mamba head (n_mamba_heads 1: x_proj / dt_proj stored 2-D), HF's default
                      layer pattern (attn_layer_period 2, offset 0: hybrid layers 2, 3, 5 of 6),
                      tied, rms_norm_eps 1e-6, 2 attention heads of 64, intermediate_size 64
    zamba-act-tiny    hidden_act "silu" (not gelu; issue 43: the shared block's MLP), else
                      zamba-odd-tiny's shapes, tied (one shared block), hybrid layers 1 and 3 of 4
    zamba-projbias-tiny mamba_proj_bias (in_proj / out_proj biases N(0, 0.1), in the Mamba layers and
                      the hybrid layers' mamba_decoder), hybrid layers 1 and 3 of 4, tied, hidden 48,
                      2 Mamba heads, 4 attention heads of 24 (issue 43)

Runs only where torch and transformers are installed (here /tmp/devenv_m1), never in the tests:

    /tmp/devenv_m1/bin/python tools/make_zamba_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf

Seeded; every parameter redrawn as the reference set's zamba-tiny was: matrices N(0, 0.08); RMSNorm
weights and the per-head D 1 + N(0, 0.3); conv and dt_proj biases N(0, 0.3); A_log = log U(1, 16).
Several safetensors shards (max_shard_size 160KB); the tokenizer, token text and reference.npz
layout of tools/make_gdn_fixtures.py (64 tokens, float32 logits [64, 512]); the 16 greedy tokens by
HF ``generate`` with ``min_new_tokens=16`` (end-of-text, id 0, suppressed), as round 3.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import REPO, write_fixture  # noqa: E402

_BASE = dict(vocab_size=512, initializer_range=0.08, bos_token_id=0, eos_token_id=0, pad_token_id=1,
             hidden_act="gelu", hidden_mamba_act="silu", max_position_embeddings=4096, mamba_expand=2,
             mamba_proj_bias=False, use_mamba_kernels=False)

SPECS = {
    "zamba-odd-tiny": dict(seed=51, text=dict(_BASE, hidden_size=48, num_hidden_layers=4, n_mamba_heads=3,
                                                mamba_d_state=8, mamba_d_conv=3, mamba_dt_rank=5, num_attention_heads=4,
                                                num_key_value_heads=2, intermediate_size=80, rms_norm_eps=1e-5,
                                                mamba_conv_bias=False, tie_word_embeddings=False,
                                                layers_block_type=["hybrid", "mamba", "mamba", "hybrid"]),
                           hub_block_types=True),
    "zamba-1head-tiny": dict(seed=52, text=dict(_BASE, hidden_size=64, num_hidden_layers=6, n_mamba_heads=1,
                                                  mamba_d_state=16, mamba_d_conv=4, mamba_dt_rank="auto",
                                                  num_attention_heads=2, num_key_value_heads=2, intermediate_size=64,
                                                  rms_norm_eps=1e-6, attn_layer_period=2, attn_layer_offset=0,
                                                  tie_word_embeddings=True)),
    "zamba-act-tiny": dict(seed=53, text=dict(_BASE | dict(hidden_act="silu"), hidden_size=48,
                                                num_hidden_layers=4, n_mamba_heads=3, mamba_d_state=8, mamba_d_conv=3,
                                                mamba_dt_rank=5, num_attention_heads=4, num_key_value_heads=2,
                                                intermediate_size=80, rms_norm_eps=1e-5, mamba_conv_bias=True,
                                                tie_word_embeddings=True,
                                                layers_block_type=["mamba", "hybrid", "mamba", "hybrid"]),
                           hub_block_types=True),
    "zamba-projbias-tiny": dict(seed=53, text=dict(_BASE, hidden_size=48, num_hidden_layers=4, n_mamba_heads=2,
                                                     mamba_d_state=8, mamba_d_conv=4, mamba_dt_rank="auto",
                                                     num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
                                                     rms_norm_eps=1e-5, mamba_proj_bias=True, tie_word_embeddings=True,
                                                     layers_block_type=["mamba", "hybrid", "mamba", "hybrid"])),
}


def _redraw(torch, named, g) -> None:
    with torch.no_grad():
        for name, p in named:
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif name.endswith("_proj.bias"):   # mamba_proj_bias
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(("conv1d.bias", "dt_proj_bias")):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1 or name.endswith(".D"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def make(name: str, out_root: str) -> None:
    import torch
    import transformers

    spec = SPECS[name]
    torch.manual_seed(spec["seed"])
    cfg = transformers.ZambaConfig(**spec["text"])
    cfg.architectures = ["ZambaForCausalLM"]
    model = transformers.ZambaForCausalLM._from_config(cfg, attn_implementation="eager").eval()
    _redraw(torch, model.named_parameters(), torch.Generator().manual_seed(spec["seed"]))

    def hub_block_types(c: dict) -> None:   # the original config.json form ("mamba" / "hybrid")
        c["layers_block_type"] = list(spec["text"]["layers_block_type"])

    def blocks(re) -> str:
        return f"shared_transf in layers {sorted({k.split('.')[2] for k in re.state_dict() if '.shared_transf.' in k})}"

    write_fixture(model, os.path.join(out_root, name),
                  lambda out: transformers.ZambaForCausalLM.from_pretrained(out, attn_implementation="eager").eval(),
                  edit_config=hub_block_types if spec.get("hub_block_types") else None, describe=blocks)


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        make(name, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
