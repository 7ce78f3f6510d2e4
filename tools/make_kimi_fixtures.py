"""Make the held-back-like Kimi-Linear fixture (tests/fixtures/hf/kimilinear-var-tiny); kimilinear-tiny
is the reference set's (tools/make_fixtures3_kda.py there).

    kimilinear-var-tiny   5 layers, hidden 64: MLA at 0 and 3 (attention first), KDA at 1, 2, 4 with
                          3 heads of 24 (KDA heads != the 2 MLA heads), conv 3; MLA with q-LoRA 24,
                          kv_lora_rank 20, dn 12, dr 4, dv 10; dense SwiGLU (96) on layers 0-1, then
                          MoE: 8 experts in 4 groups (2 kept), top-3, norm_topk_prob false, 2 shared
                          experts of 16, routed_scaling_factor 1.7; rms_norm_eps 1e-5.  Saved as
                          transformers 5.24 writes it (layer_types / mlp_layer_types / linear_* keys,
                          num_expert_group, moe_renormalize; the dense MLP as block_sparse_moe.*).

Runs only where torch and transformers are installed (here /tmp/devenv_m1), never in the tests:

    /tmp/devenv_m1/bin/python tools/make_kimi_fixtures.py [OUT_DIR]   # default tests/fixtures/hf

Every parameter redrawn (matrices N(0, 0.08), norm weights 1 + N(0, 0.1), A_log = log U(1, 16),
dt_bias N(0, 1), the routers' e_score_correction_bias buffers N(0, 0.05)); the seed is the first
from 1 up whose reference pass has, at every position of every MoE layer, a gap of at least 1e-4
between the last chosen and the first rejected expert and group (so no reference depends on
tie-breaking).  The tokenizer, token text and reference.npz layout of tools/make_gdn_fixtures.py.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import REPO, tokens_of_source, write_fixture  # noqa: E402

CONFIG = dict(vocab_size=512, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=5,
              num_attention_heads=2, num_key_value_heads=2, q_lora_rank=24, kv_lora_rank=20, qk_nope_head_dim=12,
              qk_rope_head_dim=4, v_head_dim=10, num_local_experts=8, num_experts_per_tok=3, n_shared_experts=2,
              n_group=4, topk_group=2, norm_topk_prob=False, routed_scaling_factor=1.7, rms_norm_eps=1e-5,
              linear_head_dim=24, linear_num_heads=3, linear_conv_kernel_dim=3,
              layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention", "linear_attention"],
              mlp_layer_types=["dense", "dense", "sparse", "sparse", "sparse"],
              bos_token_id=0, eos_token_id=0, pad_token_id=1, tie_word_embeddings=False)
GAP = 1e-4


def _redraw(torch, model, g) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn(b.shape, generator=g))


def _min_gap(torch, model, ids) -> float:
    """the smallest routing margin of one forward pass: per token, the gap between the last kept
    and the first dropped group, and between the k-th and (k+1)-th expert among the kept groups"""
    gaps = []

    def hook(router, args, out):
        x = args[0].reshape(-1, router.hidden_dim).float()
        s = torch.nn.functional.linear(x, router.weight.float()).sigmoid() + router.e_score_correction_bias
        G, E = router.num_group, router.num_experts
        gs = s.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1).sort(-1, descending=True)[0]
        if router.topk_group < G:
            gaps.append((gs[:, router.topk_group - 1] - gs[:, router.topk_group]).min().item())
        keep = s.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1).topk(router.topk_group, dim=-1)[1]
        mask = torch.zeros(s.shape[0], G, dtype=torch.bool).scatter_(1, keep, True)
        c = s.masked_fill(~mask.repeat_interleave(E // G, dim=1), float("-inf")).sort(-1, descending=True)[0]
        gaps.append((c[:, router.top_k - 1] - c[:, router.top_k]).min().item())

    hs = [m.register_forward_hook(hook) for m in model.modules() if type(m).__name__ == "KimiLinearTopkRouter"]
    with torch.no_grad():
        model(input_ids=ids)
    for h in hs:
        h.remove()
    return min(gaps, default=1.0)


def main(argv: list[str]) -> None:
    import numpy as np
    import torch
    import transformers

    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    ids = torch.tensor(tokens_of_source()[None].astype(np.int64))
    for seed in range(1, 200):
        torch.manual_seed(seed)
        cfg = transformers.KimiLinearConfig(**CONFIG)
        cfg.architectures = ["KimiLinearForCausalLM"]
        model = transformers.KimiLinearForCausalLM._from_config(cfg).eval()
        _redraw(torch, model, torch.Generator().manual_seed(seed))
        gap = _min_gap(torch, model, ids)
        if gap >= GAP:
            break
    print(f"seed {seed}: smallest routing gap {gap:.2e}")
    write_fixture(model, os.path.join(out_root, "kimilinear-var-tiny"),
                  lambda out: transformers.KimiLinearForCausalLM.from_pretrained(out).eval())


if __name__ == "__main__":
    main(sys.argv[1:])
