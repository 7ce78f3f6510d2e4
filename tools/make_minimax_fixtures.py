"""Make the held-back MiniMax-Text-01 fixtures (tests/fixtures/hf/minimax-*-tiny); minimax-tiny is
the reference set's (lightning at 0, 1, 3, attention at 2; 4 heads of 16 over 2 KV heads; MoE 4 top-2;
α 1.7 on every branch, β 1; block_size 16).

    minimax-gelu-tiny   minimax-ab-tiny with hidden_act "gelu_pytorch_tanh" (the experts' gate, issue 43)
    minimax-relu2-tiny  minimax-ab-tiny with hidden_act "relu2"
    minimax-ab-tiny     5 layers [full, linear, linear, full, linear] (attention first and twice),
                        hidden 48, 3 heads of 16 over 1 KV head (MQA), MoE 3 experts top-2 of width 24;
                        residual factors all distinct and β != 1: linear α 1.3 / β 0.8, full α 0.6 /
                        β 1.25, mlp α 1.1 / β 0.7; block_size 24 (64 tokens = 24 + 24 + 16)
    minimax-wide-tiny   5 layers [linear x 4, full] (llama.cpp's every-8th-layer default would type
                        layer 4 wrong), hidden 48, 2 heads of 40 (head_dim != hidden / heads, not a
                        multiple of 16) over 2 KV heads, MoE 3 top-1 of width 24; α: linear
                        0.9, full 1.0, mlp 0.5, β: linear 1.6, full 1, mlp 1.5; block_size 40;
                        rms_norm_eps 1e-6, rope_theta 1e4 (tied embeddings were tried: the greedy
                        continuation repeats one token, 16 times, whatever the factors)
    minimax-linear-tiny 2 layers [linear, linear] (no attention layer: the heads come from
                        attention.head_count alone), hidden 32, 2 heads of 16, MoE 2 top-1 of
                        width 16; α 1.2 / β 0.9 on every branch; block_size 16

Runs only where torch and transformers 5.24 are installed (here /tmp/devenv_m1), never in the tests:

    /tmp/devenv_m1/bin/python tools/make_minimax_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf

Seeded; every parameter redrawn: matrices N(0, 0.08); 1-D parameters (the RMSNorm weights) 1 + N(0, 0.1).
The four decay buffers (slope_rate, query/key/diagonal_decay) are buffers, not parameters: HF derives
them from the config and saves them; the converter drops them.  Tokenizer, token text and
reference.npz layout of tools/make_gdn_fixtures.py (64 tokens, float32 logits [64, 512], eager
attention); the 16 greedy tokens by HF ``generate`` with ``min_new_tokens=16`` (end-of-text, id 0,
suppressed), as the reference set round 3.  HF runs the prompt by its block form (no cache) and
the continuation by the recurrence.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import REPO, write_fixture  # noqa: E402

COMMON = dict(vocab_size=512, initializer_range=0.08, bos_token_id=0, eos_token_id=0, pad_token_id=1,
              hidden_act="silu", max_position_embeddings=4096, router_jitter_noise=0.0)

# minimax-ab-tiny's text config; its activation variants differ in hidden_act only
_AB_TEXT = dict(
    COMMON, hidden_size=48, intermediate_size=24, num_hidden_layers=5, num_attention_heads=3,
    num_key_value_heads=1, head_dim=16,
    layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention", "linear_attention"],
    num_local_experts=3, num_experts_per_tok=2, block_size=24,
    linear_attn_alpha_factor=1.3, linear_attn_beta_factor=0.8,
    full_attn_alpha_factor=0.6, full_attn_beta_factor=1.25,
    mlp_alpha_factor=1.1, mlp_beta_factor=0.7,
    rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False)

SPECS = {
    "minimax-ab-tiny": dict(seed=61, text=_AB_TEXT),
    "minimax-gelu-tiny": dict(seed=64, text=dict(_AB_TEXT, hidden_act="gelu_pytorch_tanh")),
    "minimax-relu2-tiny": dict(seed=65, text=dict(_AB_TEXT, hidden_act="relu2")),
    "minimax-wide-tiny": dict(seed=63, text=dict(
        COMMON, hidden_size=48, intermediate_size=24, num_hidden_layers=5, num_attention_heads=2,
        num_key_value_heads=2, head_dim=40,
        layer_types=["linear_attention"] * 4 + ["full_attention"],
        num_local_experts=3, num_experts_per_tok=1, block_size=40,
        linear_attn_alpha_factor=0.9, linear_attn_beta_factor=1.6,
        full_attn_alpha_factor=1.0, full_attn_beta_factor=1.0,
        mlp_alpha_factor=0.5, mlp_beta_factor=1.5,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e4}, tie_word_embeddings=False)),
    "minimax-linear-tiny": dict(seed=65, text=dict(
        COMMON, hidden_size=32, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, head_dim=16, layer_types=["linear_attention"] * 2,
        num_local_experts=2, num_experts_per_tok=1, block_size=16,
        linear_attn_alpha_factor=1.2, linear_attn_beta_factor=0.9,
        full_attn_alpha_factor=1.2, full_attn_beta_factor=0.9,
        mlp_alpha_factor=1.2, mlp_beta_factor=0.9,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False)),
}


def _redraw(torch, named, g) -> None:
    with torch.no_grad():
        for _, p in named:
            if p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def make(name: str, out_root: str) -> None:
    import torch
    import transformers

    spec = SPECS[name]
    torch.manual_seed(spec["seed"])
    cfg = transformers.MiniMaxConfig(**spec["text"])
    cfg.architectures = ["MiniMaxForCausalLM"]
    model = transformers.MiniMaxForCausalLM._from_config(cfg, attn_implementation="eager").eval()
    _redraw(torch, model.named_parameters(), torch.Generator().manual_seed(spec["seed"]))
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    def reload(out):
        return transformers.MiniMaxForCausalLM.from_pretrained(out, attn_implementation="eager").eval()

    def describe(re):
        c = re.config
        return (f"block_size {c.block_size}, α lin/full/mlp {c.linear_attn_alpha_factor}/{c.full_attn_alpha_factor}/"
                f"{c.mlp_alpha_factor}, β {c.linear_attn_beta_factor}/{c.full_attn_beta_factor}/{c.mlp_beta_factor}")

    write_fixture(model, os.path.join(out_root, name), reload, describe=describe)


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        make(name, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
