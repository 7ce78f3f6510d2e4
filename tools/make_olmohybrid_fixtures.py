"""Make the held-back OLMo-Hybrid fixture (tests/fixtures/hf/olmohybrid-nope-tiny); olmohybrid-tiny
is the reference set's (GDN at 0, 1, 3 with Hk 2, Hv 4, Dk 16, Dv 32, beta x2; RoPE attention at 2).

    olmohybrid-nope-tiny  5 layers [full, linear, linear, full, linear] (attention first and twice),
                          hidden 48, 3 attention heads of 16 over 1 KV head (MQA), NoPE
                          (``rope_theta`` null, as the released checkpoints), GDN Hk 3, Hv 6, Dk 8,
                          Dv 12 (neither Dk nor 2 Dk), conv kernel 3, linear_allow_neg_eigval false
                          (beta = sigmoid, x1), rms_norm_eps 1e-5, tied embeddings
    olmohybrid-bias-tiny  olmohybrid-tiny's layout (GDN at 0, 1, 3; RoPE attention at 2, GQA 4/2) with
                          attention_bias true (q/k/v/o_proj biases, N(0, 0.1)), hidden 32, untied
                          (the config audit's first supported flag, issue 43)
    olmohybrid-linear-tiny  rope_parameters linear (factor 4, base 100), hidden 48, 3 heads of 16 over 1 KV
                          head, attention at 1 and 3 (issue 43 item 4: RoPE scaling)

Runs only where torch and transformers are installed (here /tmp/devenv_m1), never in the tests:

    /tmp/devenv_m1/bin/python tools/make_olmohybrid_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf

Seeded; every parameter redrawn: matrices N(0, 0.08); RMSNorm weights (1-D) 1 + N(0, 0.1); A_log =
log U(1, 16); dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 0.1].  Several safetensors shards
(max_shard_size 160KB); tokenizer, token text and reference.npz layout of tools/make_gdn_fixtures.py
(64 tokens, float32 logits [64, 512]); the 16 greedy tokens by HF ``generate`` with
``min_new_tokens=16`` (end-of-text, id 0, suppressed), as the reference set round 3.
"""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import REPO, write_fixture  # noqa: E402

SPECS = {
    "olmohybrid-nope-tiny": dict(seed=51, text=dict(
        vocab_size=512, initializer_range=0.08, bos_token_id=0, eos_token_id=0, pad_token_id=1,
        hidden_size=48, intermediate_size=96, num_hidden_layers=5, num_attention_heads=3, num_key_value_heads=1,
        layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention", "linear_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": None}, attention_bias=False,
        linear_num_key_heads=3, linear_num_value_heads=6, linear_key_head_dim=8, linear_value_head_dim=12,
        linear_conv_kernel_dim=3, linear_allow_neg_eigval=False, rms_norm_eps=1e-5, tie_word_embeddings=True,
        max_position_embeddings=4096)),
    "olmohybrid-bias-tiny": dict(seed=52, rope=True, text=dict(
        vocab_size=512, initializer_range=0.08, bos_token_id=0, eos_token_id=0, pad_token_id=1,
        hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, attention_bias=True,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096)),
    "olmohybrid-linear-tiny": dict(seed=53, rope=True, text=dict(
        vocab_size=512, initializer_range=0.08, bos_token_id=0, eos_token_id=0, pad_token_id=1,
        hidden_size=48, intermediate_size=64, num_hidden_layers=4, num_attention_heads=3, num_key_value_heads=1,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        rope_parameters={"rope_type": "linear", "rope_theta": 100.0, "factor": 4.0}, attention_bias=False,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=64)),
}


def _redraw(torch, named, g) -> None:
    with torch.no_grad():
        for name, p in named:
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif name.endswith("dt_bias"):
                dt = torch.exp(torch.empty(p.shape).uniform_(math.log(1e-3), math.log(0.1), generator=g))
                p.copy_(dt + torch.log(-torch.expm1(-dt)))          # inverse softplus
            elif name.endswith(".bias"):
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
    cfg = transformers.OlmoHybridConfig(**spec["text"])
    cfg.architectures = ["OlmoHybridForCausalLM"]
    model = transformers.OlmoHybridForCausalLM._from_config(cfg).eval()
    rope = spec.get("rope", False)
    assert (model.model.rotary_emb is None) != rope, "NoPE / RoPE not as the spec says"
    _redraw(torch, model.named_parameters(), torch.Generator().manual_seed(spec["seed"]))

    def reload(out):
        re = transformers.OlmoHybridForCausalLM.from_pretrained(out).eval()
        assert (re.model.rotary_emb is None) != rope, "NoPE / RoPE did not survive save / reload"
        return re

    write_fixture(model, os.path.join(out_root, name), reload)


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        make(name, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
