"""Make the RoPE-scaling fixtures of the families rope2 left (issue 43 item 4) from HF (needs
/work/tfvenv: torch + transformers 5.24): the family's fixture with ``rope_parameters`` set to a
scaled type, the weights the base fixture's, reference.npz by tools/make_gdn_fixtures.py's
write_variant (the base fixture's 64 tokens, HF's float32 logits with eager attention, 16 greedy
tokens of the cache-free forward with end-of-text masked).  Every yarn variant runs past its
original context (16 of the 64 positions).

    laramini-yarn-tiny       laramini-tiny, yarn (factor 4 over 16, base 100, betas 4 / 0.5) on its
                             sliding layers' RoPE (the full layers stay NoPE)
    minimax-yarn-tiny        minimax-tiny, yarn (factor 4 over 16, base 100, betas 4 / 0.5,
                             attention_factor 1.25) on the softmax layers
    zamba2-yarn-tiny         zamba2-tiny (use_mem_rope), yarn (factor 4 over 16, base 100, betas 8 / 0.5)
    zamba2-linear-tiny       zamba2-tiny, linear (factor 4, base 100)
    bailinghybrid-yarn-tiny  bailinghybrid-tiny (Ling 3), DeepSeek-style yarn on the MLA's 8 rotated dims
                             (factor 4 over 16, base 100, betas 4 / 0.5, mscale 1, mscale_all_dim 0.8:
                             cos / sin x mscale(4, 1) / mscale(4, 0.8), softmax scale x mscale(4, 0.8)^2)
    lfm3-yarn-tiny           lfm3-tiny, the full layers' RoPE yarn over the whole head (factor 4 over 16,
                             base 100, betas 4 / 0.5), the sliding layers' default (base 10000)
    lfm3-propscale-tiny      lfm3-tiny, the full layers' proportional RoPE with factor 4 (HF divides its
                             inv_freq by it: linear scaling on 4 of 8 pairs, base 100)

    /work/tfvenv/bin/python tools/make_rope3_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import REPO, write_variant  # noqa: E402

_YARN = dict(rope_type="yarn", rope_theta=100.0, factor=4.0, original_max_position_embeddings=16,
             beta_fast=4.0, beta_slow=0.5)
# name: (base fixture, config.json changes)
SPECS = {
    "laramini-yarn-tiny": ("laramini-tiny", dict(rope_parameters=_YARN)),
    "minimax-yarn-tiny": ("minimax-tiny", dict(rope_parameters=dict(_YARN, attention_factor=1.25))),
    "zamba2-yarn-tiny": ("zamba2-tiny", dict(rope_parameters=dict(_YARN, beta_fast=8.0))),
    "zamba2-linear-tiny": ("zamba2-tiny", dict(rope_parameters=dict(rope_type="linear", rope_theta=100.0, factor=4.0))),
    "bailinghybrid-yarn-tiny": ("bailinghybrid-tiny", dict(rope_theta=100.0, rope_parameters=dict(
        _YARN, mscale=1.0, mscale_all_dim=0.8))),
    "lfm3-yarn-tiny": ("lfm3-tiny", dict(rope_parameters=dict(
        sliding_attention=dict(rope_type="default", rope_theta=10000.0), full_attention=_YARN))),
    "lfm3-propscale-tiny": ("lfm3-tiny", dict(rope_parameters=dict(
        sliding_attention=dict(rope_type="default", rope_theta=10000.0),
        full_attention=dict(rope_type="proportional", rope_theta=100.0, partial_rotary_factor=0.5, factor=4.0)))),
}


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    src_root = os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        base, changes = SPECS[name]
        # bailinghybrid-tiny itself is 1.4 MiB (tools/make_glm_ling_fixtures.py's budget: under 2 MB)
        write_variant(os.path.join(out_root, name), os.path.join(src_root, base), changes,
                      load=dict(attn_implementation="eager"), budget_mib=1.9 if base == "bailinghybrid-tiny" else 1.4)


if __name__ == "__main__":
    main(sys.argv[1:])
