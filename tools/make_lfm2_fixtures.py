"""Make the held-back-style LFM2 / LFM2-MoE fixtures (tests/fixtures/hf/*), checkpoints that
the reference set's lfm2-tiny / lfm2moe-tiny do not cover:

    lfm2-k4-tiny        Lfm2ForCausalLM, conv_L_cache 4 (the 4-tap conv kernel), 5 layers with
                        attention at 0 and 3 given by the original ``full_attn_idxs`` (no
                        ``layer_types`` in config.json), block_auto_adjust_ff_dim with
                        block_ffn_dim_multiplier 1.5 / block_multiple_of 32 (F = 160 from
                        intermediate_size 160), untied lm_head, 4 heads / 1 KV head
    lfm2-convbias-tiny  Lfm2ForCausalLM, conv_bias true (short-conv in_proj / conv / out_proj biases), 4 layers
    lfm2-yarn-tiny      Lfm2ForCausalLM, rope_parameters yarn (factor 8, original context 12, base 50) with
                        attention_factor 1.3, head_dim 16 (issue 43 item 4)
    lfm2moe-linear-tiny Lfm2MoeForCausalLM, rope_parameters linear (factor 4, base 100), 3 layers (issue 43 item 4)
    lfm2moe-bias-tiny   Lfm2MoeForCausalLM, 2 dense layers then MoE (8 experts, top 3), a
                        non-zero expert_bias (N(0, 0.2): it changes which experts are chosen),
                        conv_L_cache 2, attention at 1 and 4 of 5
    lfm2moe-scale-tiny  Lfm2MoeForCausalLM, routed_scaling_factor 2.5, norm_topk_prob false,
                        use_expert_bias false (no expert_bias tensor), 1 dense layer, attention
                        first (layer 0)

Runs only where torch and transformers 5.24 are installed (here /tmp/venv-hf), never in the tests:

    /tmp/venv-hf/bin/python tools/make_lfm2_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf

tests/fixtures/llamacpp/NAME.f32.summary.json: ``python tools/make_gdn_fixtures.py --summarize`` of
llama.cpp 0c1e570's ``convert_hf_to_gguf.py NAME --outtype f32`` (BPE pre-tokenizer check forced to
``gpt-2``, as for the reference set).

Like the reference set (round 2) and tools/make_gdn_fixtures.py (whose tokenizer, source text,
reference format and size budget this reuses): seeded, every parameter redrawn: matrices and
conv kernels N(0, 0.08), RMSNorm gammas (LFM2 multiplies by w) 1 + N(0, 0.3), the expert bias
buffer N(0, 0.2); several safetensors shards (max_shard_size 160KB).  reference.npz: ``tokens``
(64 tokens), ``logits`` [64, 512] float32 (eager attention), ``greedy`` (16 tokens of HF
``generate``).
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import N_GREEDY, N_TOKENS, REPO, TOKENIZER_SRC, tokens_of_source  # noqa: E402

_BASE = dict(vocab_size=512, hidden_size=64, max_position_embeddings=128000, initializer_range=0.08, norm_eps=1e-5,
             bos_token_id=0, eos_token_id=0, pad_token_id=1, conv_bias=False,
             rope_parameters=dict(rope_type="default", rope_theta=1000000.0))

SPECS = {
    "lfm2-k4-tiny": dict(
        cls="Lfm2ForCausalLM", conf="Lfm2Config", seed=21, full_attn_idxs=[0, 3],
        cfg=dict(_BASE, num_hidden_layers=5, intermediate_size=160, block_auto_adjust_ff_dim=True,
                 block_ffn_dim_multiplier=1.5, block_multiple_of=32, conv_L_cache=4, tie_word_embeddings=False,
                 num_attention_heads=4, num_key_value_heads=1,
                 layer_types=["full_attention", "conv", "conv", "full_attention", "conv"])),
    "lfm2moe-bias-tiny": dict(
        cls="Lfm2MoeForCausalLM", conf="Lfm2MoeConfig", seed=25,
        cfg=dict(_BASE, num_hidden_layers=5, intermediate_size=96, moe_intermediate_size=24, num_experts=8,
                 num_experts_per_tok=3, num_dense_layers=2, use_expert_bias=True, norm_topk_prob=True,
                 routed_scaling_factor=1.0, conv_L_cache=2, tie_word_embeddings=True,
                 num_attention_heads=4, num_key_value_heads=2,
                 layer_types=["conv", "full_attention", "conv", "conv", "full_attention"])),
    "lfm2moe-scale-tiny": dict(
        cls="Lfm2MoeForCausalLM", conf="Lfm2MoeConfig", seed=23,
        cfg=dict(_BASE, num_hidden_layers=4, intermediate_size=96, moe_intermediate_size=32, num_experts=4,
                 num_experts_per_tok=2, num_dense_layers=1, use_expert_bias=False, norm_topk_prob=False,
                 routed_scaling_factor=2.5, conv_L_cache=3, tie_word_embeddings=True,
                 num_attention_heads=2, num_key_value_heads=2,
                 layer_types=["full_attention", "conv", "conv", "conv"])),
    # issue 43: conv_bias true (in_proj, conv and out_proj biases of every short conv)
    "lfm2-convbias-tiny": dict(
        cls="Lfm2ForCausalLM", conf="Lfm2Config", seed=43,
        cfg=dict(_BASE, hidden_size=48, num_hidden_layers=4, intermediate_size=96, block_auto_adjust_ff_dim=False,
                 conv_L_cache=3, conv_bias=True, tie_word_embeddings=False, num_attention_heads=4, num_key_value_heads=2,
                 layer_types=["conv", "full_attention", "conv", "conv"])),
    # issue 43 item 4: yarn with an explicit attention_factor (llama.cpp: rope.scaling.attn_factor over
    # yarn's own 0.1 ln 8 + 1), factor 8 over an original context of 12, HF's betas 32 / 1, base 50
    "lfm2-yarn-tiny": dict(
        cls="Lfm2ForCausalLM", conf="Lfm2Config", seed=44,
        cfg=dict(_BASE, hidden_size=48, num_hidden_layers=4, intermediate_size=96, block_auto_adjust_ff_dim=False,
                 conv_L_cache=3, tie_word_embeddings=False, num_attention_heads=3, num_key_value_heads=1,
                 max_position_embeddings=96, layer_types=["conv", "full_attention", "conv", "full_attention"],
                 rope_parameters=dict(rope_type="yarn", rope_theta=50.0, factor=8.0, original_max_position_embeddings=12,
                                      attention_factor=1.3))),
    # issue 43 item 4: linear RoPE scaling on LFM2-MoE
    "lfm2moe-linear-tiny": dict(
        cls="Lfm2MoeForCausalLM", conf="Lfm2MoeConfig", seed=46,
        cfg=dict(_BASE, num_hidden_layers=3, intermediate_size=96, moe_intermediate_size=32, num_experts=4,
                 num_experts_per_tok=2, num_dense_layers=1, use_expert_bias=True, norm_topk_prob=True,
                 routed_scaling_factor=1.0, conv_L_cache=3, tie_word_embeddings=False, max_position_embeddings=96,
                 num_attention_heads=4, num_key_value_heads=2, layer_types=["conv", "full_attention", "conv"],
                 rope_parameters=dict(rope_type="linear", rope_theta=100.0, factor=4.0))),
}


def _redraw(torch, model, g) -> None:
    """Every parameter (and the expert_bias buffers) redrawn (see the module docstring)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):         # conv_bias's (lfm2-convbias-tiny; no other fixture has one)
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("expert_bias"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))


def _original_layer_form(out: str, idxs: list[int]) -> None:
    """config.json with LFM2's original ``full_attn_idxs`` and no ``layer_types`` (the config
    class builds layer_types from the same list, so the weights agree)."""
    path = os.path.join(out, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.pop("layer_types")
    cfg["full_attn_idxs"] = idxs
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def make(name: str, out_root: str) -> None:
    import torch
    import transformers

    spec = SPECS[name]
    torch.manual_seed(spec["seed"])
    cfg = getattr(transformers, spec["conf"])(**spec["cfg"])
    cfg.architectures = [spec["cls"]]
    model = getattr(transformers, spec["cls"])._from_config(cfg, attn_implementation="eager").eval()
    _redraw(torch, model, torch.Generator().manual_seed(spec["seed"]))
    out = os.path.join(out_root, name)
    if os.path.exists(out):
        shutil.rmtree(out)
    model.save_pretrained(out, max_shard_size="160KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_SRC, f), os.path.join(out, f))
    if "full_attn_idxs" in spec:
        _original_layer_form(out, spec["full_attn_idxs"])

    tokens = tokens_of_source()
    ids = torch.tensor(tokens[None].astype(np.int64))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float().numpy().astype(np.float32)
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_GREEDY,
                             do_sample=False)
    greedy = gen[0, N_TOKENS:].numpy().astype(np.int32)
    np.savez(os.path.join(out, "reference.npz"), tokens=tokens, logits=logits, greedy=greedy)
    files = sorted(os.listdir(out))
    total = sum(os.path.getsize(os.path.join(out, f)) for f in files)
    print(f"wrote {out}: {sum(f.endswith('.safetensors') for f in files)} shards, {total / 1024:.0f} KiB, "
          f"greedy {greedy.tolist()}")
    if total > 1.4 * 2**20:
        sys.exit(f"{out} is {total / 2**20:.2f} MiB, over the 1.4 MiB fixture budget (< 1.5 MB)")


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    for n in argv[1:] or list(SPECS):
        if n not in SPECS:
            sys.exit(f"unknown fixture {n!r}; known: {', '.join(SPECS)}")
        make(n, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
