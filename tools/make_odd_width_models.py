#!/usr/bin/env python3
"""Make small granitehybrid GGUFs whose rows are not multiples of 256 (quantize fallbacks).

From bamba-small.f32.gguf's metadata and tensor layout: the embedding width becomes D and the
FFN width F, weights are seeded random normals (x0.05, norms around 1).  llama-quantize only
reads hparams and tensor shapes, so these files exercise its per-tensor fallback rules
(k-quants -> 32-block types -> F16).  Outputs: OUT_DIR/oddwidth-D{D}-F{F}.f32.gguf.

    python tools/make_odd_width_models.py tests/fixtures/llamacpp/bamba-small.f32.gguf tests/fixtures/quant
"""
from __future__ import annotations

import os
import sys

import gguf
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from toolkit.gguf_io.header import GGUFHeader  # noqa: E402

EMB_NE0 = ("token_embd", "output.weight", "ffn_gate", "ffn_up", "attn_q", "attn_k", "attn_v", "ssm_in",
           "attn_norm", "ffn_norm", "output_norm")
EMB_NE1 = ("ffn_down", "attn_output", "ssm_out")


def make(src: str, out_dir: str, D: int, F: int, seed: int) -> str:
    h = GGUFHeader(src)
    arch = h.arch
    out = os.path.join(out_dir, f"oddwidth-D{D}-F{F}.f32.gguf")
    w = gguf.GGUFWriter(out, arch)
    for kv in h.kv:
        if kv.key == gguf.Keys.General.ARCHITECTURE:
            continue
        val = kv.value
        if kv.key == f"{arch}.embedding_length":
            val = D
        elif kv.key == f"{arch}.feed_forward_length":
            val = F
        w.add_key_value(kv.key, val, kv.type, sub_type=kv.sub_type)
    rng = np.random.default_rng(seed)
    for t in h.tensors.values():
        ne = list(t.shape)
        if any(s in t.name for s in EMB_NE0):
            ne[0] = D
        if any(s in t.name for s in EMB_NE1):
            ne[1] = D
        if any(s in t.name for s in ("ffn_gate", "ffn_up")):
            ne[1] = F
        if "ffn_down" in t.name:
            ne[0] = F
        shape = tuple(reversed(ne))
        x = rng.standard_normal(shape).astype(np.float32) * 0.05
        if "norm" in t.name:
            x += 1.0
        w.add_tensor(t.name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    for D, F, seed in ((96, 192, 1), (64, 80, 2)):
        print(make(argv[1], argv[2], D, F, seed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
