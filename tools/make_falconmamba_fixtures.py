"""Make the FalconMamba fixtures (tests/fixtures/hf/falconmamba-*): the reference set has none.

    falconmamba-tiny      3 layers, hidden 64, d_state 16, expand 2 (d_inner 128), conv 4, dt_rank
                          "auto" (4), layer_norm_epsilon 1e-5 and mixer_rms_eps 1e-6 (HF's defaults:
                          the dt/B/C norms' epsilon differs from the layer norms'), tied embeddings
    falconmamba-odd-tiny  2 layers, hidden 48, d_state 8, expand 3 (d_inner 144), conv 3, dt_rank 6,
                          layer_norm_epsilon = mixer_rms_eps = 1e-6 (the file needs no key beyond
                          llama.cpp's), untied lm_head

Runs only where torch and transformers are installed (here /tmp/devenv_m1), never in the tests:

    /tmp/devenv_m1/bin/python tools/make_falconmamba_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf

Seeded; every parameter redrawn: matrices N(0, 0.08); RMSNorm weights 1 + N(0, 0.1); A_log =
log U(1, 16); D 1 + N(0, 0.1); conv bias N(0, 0.1); dt_proj.bias = softplus⁻¹(dt), dt log-uniform
in [1e-3, 0.1] (Mamba's init, redrawn).  Several safetensors shards (max_shard_size 160KB); the
tokenizer, token text and reference.npz layout of tools/make_gdn_fixtures.py (64 tokens, float32
logits [64, 512]); the 16 greedy tokens by HF ``generate`` with ``min_new_tokens=16`` (end-of-text,
id 0, suppressed), as the reference set round 3.
"""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import REPO, write_fixture  # noqa: E402

_BASE = dict(vocab_size=512, initializer_range=0.08, bos_token_id=0, eos_token_id=0, pad_token_id=0,
             use_bias=False, use_conv_bias=True, hidden_act="silu", residual_in_fp32=True, use_mambapy=False)

SPECS = {
    "falconmamba-tiny": dict(seed=41, text=dict(_BASE, hidden_size=64, num_hidden_layers=3, state_size=16, expand=2,
                                                  conv_kernel=4, time_step_rank="auto", layer_norm_epsilon=1e-5,
                                                  mixer_rms_eps=1e-6, tie_word_embeddings=True)),
    "falconmamba-odd-tiny": dict(seed=42, text=dict(_BASE, hidden_size=48, num_hidden_layers=2, state_size=8, expand=3,
                                                      conv_kernel=3, time_step_rank=6, layer_norm_epsilon=1e-6,
                                                      mixer_rms_eps=1e-6, tie_word_embeddings=False)),
}


def _redraw(torch, named, g) -> None:
    with torch.no_grad():
        for name, p in named:
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif name.endswith("dt_proj.bias"):
                dt = torch.exp(torch.empty(p.shape).uniform_(math.log(1e-3), math.log(0.1), generator=g))
                p.copy_(dt + torch.log(-torch.expm1(-dt)))          # inverse softplus
            elif name.endswith(".D"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("conv1d.bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def make(name: str, out_root: str) -> None:
    import torch
    import transformers

    spec = SPECS[name]
    torch.manual_seed(spec["seed"])
    cfg = transformers.FalconMambaConfig(**spec["text"])
    cfg.architectures = ["FalconMambaForCausalLM"]
    model = transformers.FalconMambaForCausalLM._from_config(cfg).eval()
    _redraw(torch, model.named_parameters(), torch.Generator().manual_seed(spec["seed"]))
    write_fixture(model, os.path.join(out_root, name),
                  lambda out: transformers.FalconMambaForCausalLM.from_pretrained(out).eval())


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        make(name, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
