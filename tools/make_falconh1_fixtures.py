"""Make the held-back-style Falcon-H1 fixtures (tests/fixtures/hf/*): checkpoints with the
options the shared falconh1-tiny (mamba_rms_norm with the norm before the gate, 1 group,
head_dim = hidden / heads, untied) does not cover:

    falconh1-gates-tiny   mamba_norm_before_gate false (llama.cpp's gate-then-norm order), 2 B/C
                          groups, d_conv 3, an explicit head_dim 24 != hidden / heads, mamba_d_ssm
                          null (expand x hidden), 3 layers, other multipliers
    falconh1-yarn-tiny    rope_parameters yarn (factor 4, original_max_position_embeddings 16, base 100,
                          beta_fast 4, beta_slow 0.25), 2 layers (issue 43 item 4)
    falconh1-projbias-tiny  mamba_proj_bias (in_proj bias), projectors_bias (out_proj bias) and
                          mlp_bias (gate / up / down_proj biases), with ssm / mlp multipliers that
                          scale them, 2 layers (issue 43)
    falconh1-nonorm-tiny  mamba_rms_norm false (no gated norm: y * silu(z)), tied embeddings with
                          lm_head_multiplier != embedding_multiplier, Hkv = Hq, no conv bias,
                          d_conv 2, 3 layers, mamba_d_head "auto"

Runs only where torch and transformers 5.24 are installed (here /tmp/venv-hf), never in the
tests:

    /tmp/venv-hf/bin/python tools/make_falconh1_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf

Like the reference set (round 2): seeded, every parameter redrawn: matrices and conv kernels
N(0, 0.08); RMSNorm weights (Falcon-H1 computes x w: input / pre-FF / final / mamba norms) and D
1 + N(0, 0.1); dt_bias and conv bias N(0, 0.1); A_log = log U(1, 16).  Several safetensors
shards; the 512-token tokenizer and 64 tokens of Python source of tools/make_gdn_fixtures.py.
reference.npz: ``tokens`` int32 [64], ``logits`` float32 [64, 512] (eager attention), ``greedy``
(16 tokens from HF ``generate``, greedy, its own cache).
"""
from __future__ import annotations

import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import REPO, write_fixture  # noqa: E402

_BASE = dict(vocab_size=512, hidden_size=64, intermediate_size=96, hidden_act="silu", max_position_embeddings=8192,
             initializer_range=0.08, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=0, pad_token_id=1,
             mamba_d_state=16, mamba_chunk_size=256, rope_parameters=dict(rope_type="default", rope_theta=10000.0))

SPECS = {
    "falconh1-gates-tiny": dict(seed=17, config=dict(
        _BASE, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
        mamba_d_ssm=None, mamba_expand=2, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_conv=3,
        mamba_rms_norm=True, mamba_norm_before_gate=False, tie_word_embeddings=False,
        embedding_multiplier=2.5, lm_head_multiplier=0.6, key_multiplier=1.3, attention_in_multiplier=0.8,
        attention_out_multiplier=1.2, ssm_in_multiplier=0.9, ssm_out_multiplier=1.4,
        mlp_multipliers=[1.2, 0.7], ssm_multipliers=[1.3, 0.6, 0.9, 1.2, 0.7])),
    "falconh1-nonorm-tiny": dict(seed=31, config=dict(
        _BASE, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
        mamba_d_ssm=96, mamba_n_heads=6, mamba_d_head="auto", mamba_n_groups=1, mamba_d_conv=2,
        mamba_conv_bias=False, mamba_rms_norm=False, mamba_norm_before_gate=True, tie_word_embeddings=True,
        embedding_multiplier=0.3, lm_head_multiplier=1.5, key_multiplier=0.8, attention_in_multiplier=1.1,
        attention_out_multiplier=0.9, ssm_in_multiplier=1.2, ssm_out_multiplier=0.6,
        mlp_multipliers=[0.9, 1.1], ssm_multipliers=[0.7, 1.2, 1.1, 0.8, 1.3])),
    # issue 43: attention_bias (q/k/v/o_proj biases), with key / attention_out multipliers that scale them
    "falconh1-attnbias-tiny": dict(seed=43, config=dict(
        _BASE, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, mamba_d_ssm=None, mamba_expand=2, mamba_n_heads=6, mamba_d_head=16, mamba_n_groups=1, mamba_d_conv=4,
        mamba_rms_norm=True, mamba_norm_before_gate=True, tie_word_embeddings=False, attention_bias=True,
        embedding_multiplier=1.5, lm_head_multiplier=0.8, key_multiplier=1.7, attention_in_multiplier=0.6,
        attention_out_multiplier=1.4, ssm_in_multiplier=1.1, ssm_out_multiplier=0.9,
        mlp_multipliers=[1.1, 0.9], ssm_multipliers=[1.2, 0.8, 1.0, 1.1, 0.9])),
    # issue 43: the projection / MLP biases, with multipliers != 1 on each of the blocks they pass through
    "falconh1-projbias-tiny": dict(seed=45, config=dict(
        _BASE, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, mamba_d_ssm=None, mamba_expand=2, mamba_n_heads=6, mamba_d_head=16, mamba_n_groups=2, mamba_d_conv=4,
        mamba_rms_norm=True, mamba_norm_before_gate=True, tie_word_embeddings=False,
        mamba_proj_bias=True, projectors_bias=True, mlp_bias=True,
        embedding_multiplier=1.5, lm_head_multiplier=0.8, key_multiplier=1.7, attention_in_multiplier=0.6,
        attention_out_multiplier=1.4, ssm_in_multiplier=1.3, ssm_out_multiplier=0.7,
        mlp_multipliers=[1.3, 0.6], ssm_multipliers=[1.2, 0.8, 1.4, 0.9, 1.1])),
    # issue 43 item 4: yarn RoPE scaling past the original context (16 of the 64 + 16 positions), base 100
    # and betas 4 / 0.25 so that the ramp runs over pairs 0..5 of 8 (head_dim 16); HF's default
    # attention_factor 0.1 ln 4 + 1
    "falconh1-yarn-tiny": dict(seed=44, config=dict(
        _BASE, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, mamba_d_ssm=None, mamba_expand=2, mamba_n_heads=6, mamba_d_head=16, mamba_n_groups=1, mamba_d_conv=4,
        mamba_rms_norm=True, mamba_norm_before_gate=True, tie_word_embeddings=False, max_position_embeddings=64,
        rope_parameters=dict(rope_type="yarn", rope_theta=100.0, factor=4.0, original_max_position_embeddings=16,
                             beta_fast=4.0, beta_slow=0.25),
        embedding_multiplier=1.5, lm_head_multiplier=0.8, key_multiplier=1.7, attention_in_multiplier=0.6,
        attention_out_multiplier=1.4, ssm_in_multiplier=1.1, ssm_out_multiplier=0.9,
        mlp_multipliers=[1.1, 0.9], ssm_multipliers=[1.2, 0.8, 1.0, 1.1, 0.9])),
}


def _redraw(torch, named, g) -> None:
    """Every parameter redrawn (see the module docstring)."""
    with torch.no_grad():
        for name, p in named:
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif name.endswith(("norm.weight", "layernorm.weight", ".D")):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def make(name: str, out_root: str) -> None:
    import torch
    import transformers

    spec = SPECS[name]
    torch.manual_seed(spec["seed"])
    cfg = transformers.FalconH1Config(**spec["config"])
    cfg.architectures = ["FalconH1ForCausalLM"]
    model = transformers.FalconH1ForCausalLM._from_config(cfg, attn_implementation="eager").eval()
    _redraw(torch, model.named_parameters(), torch.Generator().manual_seed(spec["seed"]))
    write_fixture(model, os.path.join(out_root, name), min_new=False)


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    for n in argv[1:] or list(SPECS):
        make(n, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
