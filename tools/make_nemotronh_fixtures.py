"""Make the held-back-style Nemotron-H fixtures (tests/fixtures/hf/*), checkpoints that
the reference set's nemotronh-tiny (layers_block_type, M - * M E, one expert group) does not cover:

    nemotronh-pattern-tiny  NemotronHForCausalLM, MoE, config.json in the ORIGINAL form: a
                            ``hybrid_override_pattern`` string "ME*ME" + num_hidden_layers (no
                            layers_block_type); 8 experts in 4 groups, 2 groups kept
                            (n_group / topk_group), top-2, norm_topk_prob false,
                            routed_scaling_factor 2.5; Mamba-2 with 4 B/C groups and conv kernel 3;
                            attention head_dim 24 != hidden / heads, 1 KV head.  Only M, * and E
                            layers: the layout llama.cpp's runtime loads (nemotron_h_moe).
    nemotronh-latent-tiny   NemotronHForCausalLM, latent MoE (Nemotron 3 Super's): moe_latent_size
                            40 < hidden 64, the routed experts between fc1_latent_proj [40, 64]
                            and fc2_latent_proj [64, 40]; layers M E * M E, 8 experts in 2
                            groups, top-2, routed_scaling_factor 1.5.
    nemotronh-dense-tiny    NemotronHForCausalLM without MoE (GGUF ``nemotron_h``):
                            layers_block_type M - * M -, tied embeddings, conv kernel 2.
    nemotronh-act-tiny      mlp_hidden_act "silu" (not relu2; issue 43): an MLP layer and a MoE
                            layer (8 experts in 2 groups, top-2, shared expert), both
                            down(silu(up x)); layers M - * E M.

Runs only where torch and transformers 5.24 are installed (here /tmp/venv-hf), never in the tests:

    /tmp/venv-hf/bin/python tools/make_nemotronh_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf

Like the reference set (round 2): seeded, every parameter redrawn: matrices N(0, 0.08); the
RMSNorm weights (HF computes x w) and D around 1 (1 + N(0, 0.1)); A_log = log U(1, 16); other
1-D parameters and the router's e_score_correction_bias buffer N(0, 0.1) (a runtime that ignores
the bias picks other experts).  reference.npz: the 64 tokens of make_gdn_fixtures.py's source
text, HF's float32 logits (eager attention) and its 16-token greedy continuation.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import N_GREEDY, N_TOKENS, REPO, TOKENIZER_SRC, tokens_of_source  # noqa: E402

_BASE = dict(vocab_size=512, hidden_size=64, initializer_range=0.08, layer_norm_epsilon=1e-5, bos_token_id=0,
             eos_token_id=0, pad_token_id=1, max_position_embeddings=4096, mamba_num_heads=8, mamba_head_dim=16,
             ssm_state_size=16, num_attention_heads=4, intermediate_size=96, mlp_hidden_act="relu2",
             use_conv_bias=True, use_bias=False)

SPECS = {
    "nemotronh-pattern-tiny": dict(seed=31, pattern="ME*ME", cfg=dict(
        _BASE, n_groups=4, conv_kernel=3, head_dim=24, num_key_value_heads=1, n_routed_experts=8,
        num_experts_per_tok=2, n_group=4, topk_group=2, moe_intermediate_size=24,
        moe_shared_expert_intermediate_size=40, norm_topk_prob=False, routed_scaling_factor=2.5,
        tie_word_embeddings=False)),
    "nemotronh-latent-tiny": dict(seed=33, cfg=dict(
        _BASE, layers_block_type=["linear_attention", "moe", "full_attention", "linear_attention", "moe"],
        n_groups=2, conv_kernel=4, head_dim=16, num_key_value_heads=2, n_routed_experts=8,
        num_experts_per_tok=2, n_group=2, topk_group=1, moe_intermediate_size=24,
        moe_shared_expert_intermediate_size=40, moe_latent_size=40, norm_topk_prob=True,
        routed_scaling_factor=1.5, tie_word_embeddings=False)),
    "nemotronh-dense-tiny": dict(seed=32, cfg=dict(
        _BASE, layers_block_type=["linear_attention", "mlp", "full_attention", "linear_attention", "mlp"],
        n_groups=2, conv_kernel=2, head_dim=16, num_key_value_heads=2, tie_word_embeddings=True)),
    "nemotronh-act-tiny": dict(seed=34, cfg=dict(
        _BASE | dict(mlp_hidden_act="silu"),
        layers_block_type=["linear_attention", "mlp", "full_attention", "moe", "linear_attention"],
        n_groups=2, conv_kernel=4, head_dim=16, num_key_value_heads=2, n_routed_experts=8,
        num_experts_per_tok=2, n_group=2, topk_group=1, moe_intermediate_size=24,
        moe_shared_expert_intermediate_size=40, norm_topk_prob=True, routed_scaling_factor=1.5,
        tie_word_embeddings=False)),
}


def _redraw(torch, model, g) -> None:
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if not p.is_floating_point():
                continue
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif name.endswith(("norm.weight", "norm_f.weight", "mixer.D")):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("e_score_correction_bias") or p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim >= 2:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def _to_pattern_form(out: str, pattern: str) -> None:
    """Rewrite config.json in the original form: hybrid_override_pattern + num_hidden_layers."""
    path = os.path.join(out, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    del cfg["layers_block_type"]
    cfg["hybrid_override_pattern"] = pattern
    cfg["num_hidden_layers"] = len(pattern)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def make(name: str, out_root: str) -> None:
    import torch
    import transformers

    spec = SPECS[name]
    torch.manual_seed(spec["seed"])
    kw = dict(spec["cfg"])
    if "pattern" in spec:
        kw["hybrid_override_pattern"] = spec["pattern"]
    cfg = transformers.NemotronHConfig(**kw)
    cfg.architectures = ["NemotronHForCausalLM"]
    model = transformers.NemotronHForCausalLM._from_config(cfg, attn_implementation="eager").eval()
    _redraw(torch, model, torch.Generator().manual_seed(spec["seed"]))
    out = os.path.join(out_root, name)
    if os.path.exists(out):
        shutil.rmtree(out)
    model.save_pretrained(out, max_shard_size="160KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_SRC, f), os.path.join(out, f))
    if "pattern" in spec:
        _to_pattern_form(out, spec["pattern"])
    tokens = tokens_of_source()
    ids = torch.tensor(tokens[None].astype(np.int64))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float().numpy().astype(np.float32)
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_GREEDY,
                             do_sample=False)
    greedy = gen[0, N_TOKENS:].numpy().astype(np.int32)
    np.savez(os.path.join(out, "reference.npz"), tokens=tokens, logits=logits, greedy=greedy)
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"wrote {out}: {total / 1024:.0f} KiB, greedy {greedy.tolist()}")
    if total > 1.4 * 2**20:
        sys.exit(f"{out} is {total / 2**20:.2f} MiB, over the 1.4 MiB fixture budget (< 1.5 MB)")


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        make(name, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
