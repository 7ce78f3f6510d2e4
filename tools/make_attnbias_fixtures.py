"""Make the attention-bias fixtures of issue 43 from HF (needs /work/tfvenv: torch + transformers 5.24):
a family fixture with ``attention_bias`` true, its q/k/v/o_proj biases drawn N(0, 0.1) (seeded), the
other weights the base fixture's; reference.npz: the base fixture's tokens, HF's float32 logits
[T, n_vocab] and 16 greedy tokens (cache-free forward, end-of-text masked as ``min_new_tokens`` does),
written by tools/make_gdn_fixtures.py's write_variant.

    qwen35-attnbias-tiny   qwen35-tiny with attention_bias (gated attention: q_proj's bias [2 Hq hd]
                           covers the gate half)

    /work/tfvenv/bin/python tools/make_attnbias_fixtures.py [OUT_DIR] [NAME ...]   # default tests/fixtures/hf
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gdn_fixtures import REPO, write_variant  # noqa: E402

_ATTN = r"model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.weight"
# name: (base fixture, config.json changes, weight patterns that get a bias, seed)
SPECS = {"qwen35-attnbias-tiny": ("qwen35-tiny", dict(attention_bias=True), (_ATTN,), 451)}


def main(argv: list[str]) -> None:
    out_root = argv[0] if argv else os.path.join(REPO, "tests", "fixtures", "hf")
    src_root = os.path.join(REPO, "tests", "fixtures", "hf")
    for name in argv[1:] or list(SPECS):
        base, changes, biased, seed = SPECS[name]
        write_variant(os.path.join(out_root, name), os.path.join(src_root, base), changes, biased, seed)


if __name__ == "__main__":
    main(sys.argv[1:])
