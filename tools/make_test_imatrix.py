#!/usr/bin/env python3
"""Write a synthetic llama.cpp imatrix GGUF for a model (for quantize --imatrix tests).

For every quantizable weight NAME of MODEL (2-D/3-D, named *weight): NAME.in_sum2 F32
[ne0, n_mat] = count * a positive random importance per column, NAME.counts F32 [1, n_mat];
one column block of the first entry gets count 0 (llama-quantize then uses importance 1).
Keys imatrix.datasets / chunk_count / chunk_size as llama-imatrix writes them.

    python tools/make_test_imatrix.py tests/fixtures/llamacpp/bamba-small.f32.gguf OUT.imatrix.gguf
"""
from __future__ import annotations

import os
import sys

import gguf
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from toolkit.gguf_io.header import GGUFHeader  # noqa: E402
from toolkit.quantize.rules import allows_quantization  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    h = GGUFHeader(argv[1])
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(argv[2], arch="imatrix")
    w.add_type("imatrix")
    w.add_array(gguf.Keys.IMatrix.DATASETS, ["synthetic-test-data.txt"])
    w.add_uint32(gguf.Keys.IMatrix.CHUNK_COUNT, 10)
    w.add_uint32(gguf.Keys.IMatrix.CHUNK_SIZE, 512)
    first = True
    for t in h.tensors.values():
        if not allows_quantization(t.name, t.shape):
            continue
        ne0 = int(t.shape[0])
        n_mat = int(t.shape[2]) if len(t.shape) > 2 else 1
        counts = rng.integers(100, 5000, n_mat).astype(np.float32)
        if first:
            counts[0] = 0.0
            first = False
        imp = rng.gamma(0.5, 2.0, (n_mat, ne0)).astype(np.float32) + np.float32(1e-3)
        sums = (imp * counts[:, None]).astype(np.float32)
        w.add_tensor(t.name + ".in_sum2", sums)
        w.add_tensor(t.name + ".counts", counts.reshape(n_mat, 1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
