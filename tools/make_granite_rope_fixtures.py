"""Make the RoPE-scaling fixtures of the granitehybrid family (issue 43 item 4): random tiny HF
checkpoints whose ``rope_parameters`` scale the RoPE, with HF's own float32 logits.

    bamba-yarn-tiny           BambaForCausalLM, yarn (factor 4, original_max_position_embeddings 16,
                              base 100, beta_fast 4, beta_slow 0.5) on partial NORM RoPE
                              (partial_rotary_factor 0.5: 8 of 16 dims), attention at 1 and 3 of 4
    granitehybrid-linear-tiny GraniteMoeHybridForCausalLM, position_embedding_type "rope", linear
                              (factor 4, base 100), 4 experts of 2 + a shared MLP, attention at 1 and 3,
                              multipliers other than 1

max_position_embeddings 64: the 64 tokens run past the original context (16) of yarn / the
unscaled context of linear.  Weights N(0, 0.08); RMSNorm weights and D 1 + N(0, 0.1); other 1-D
parameters N(0, 0.1); A_log = log U(1, 16).  The 512-token tokenizer (linked to
tests/fixtures/tokenizer/ afterwards, as the other fixtures) and 64 tokens of Python source of
tools/make_gdn_fixtures.py.  reference.npz: ``tokens`` int32 [64], ``logits`` float32 [64, 512]
(eager attention), ``greedy`` (16 tokens from HF ``generate``, greedy, its own cache).

Runs only where torch and transformers are installed (/work/tfvenv), never in the tests:

    python tools/make_granite_rope_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
"""
from __future__ import annotations

import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_falconh1_fixtures import _redraw  # noqa: E402
from make_gdn_fixtures import REPO, write_fixture  # noqa: E402

_MAMBA = dict(vocab_size=512, hidden_act="silu", initializer_range=0.08, rms_norm_eps=1e-5, bos_token_id=1,
              eos_token_id=2, pad_token_id=0, mamba_d_state=16, mamba_chunk_size=256, mamba_d_conv=4,
              mamba_expand=2, mamba_n_groups=1, max_position_embeddings=64, tie_word_embeddings=False)

SPECS = {
    "bamba-yarn-tiny": dict(seed=61, cls="Bamba", config=dict(
        _MAMBA, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, attn_layer_indices=[1, 3], mamba_n_heads=8, mamba_d_head=16,
        rope_parameters=dict(rope_type="yarn", rope_theta=100.0, factor=4.0, original_max_position_embeddings=16,
                             beta_fast=4.0, beta_slow=0.5, partial_rotary_factor=0.5))),
    "granitehybrid-linear-tiny": dict(seed=62, cls="GraniteMoeHybrid", config=dict(
        _MAMBA, hidden_size=32, intermediate_size=32, shared_intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"], mamba_n_heads=4, mamba_d_head=16,
        position_embedding_type="rope", embedding_multiplier=2.0, attention_multiplier=0.3,
        residual_multiplier=0.7, logits_scaling=1.5,
        rope_parameters=dict(rope_type="linear", rope_theta=100.0, factor=4.0))),
}


def make(name: str, out_root: str) -> None:
    import torch
    import transformers

    spec = SPECS[name]
    torch.manual_seed(spec["seed"])
    cfg = getattr(transformers, spec["cls"] + "Config")(**spec["config"])
    cfg.architectures = [spec["cls"] + "ForCausalLM"]
    model = getattr(transformers, spec["cls"] + "ForCausalLM")._from_config(cfg, attn_implementation="eager").eval()
    _redraw(torch, model.named_parameters(), torch.Generator().manual_seed(spec["seed"]))
    write_fixture(model, os.path.join(out_root, name), min_new=False)


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    for n in argv[1:] or list(SPECS):
        make(n, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
