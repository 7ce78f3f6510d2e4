#!/usr/bin/env python3
"""Extract what the quantize tests compare from llama-quantize's outputs (kept out of the repo).

For every QUANT_DIR/GLOB (default *.gguf) this writes OUT_DIR/<file name>.json:

    {"source": "bamba-small.Q4_K_M.gguf",
     "input": "bamba-small.f32.gguf", "type": "Q4_K_M",
     "imatrix": imatrix file name or null (from the quantize.imatrix.file key),
     "tensors": {tensor name: [ggml type name, sha256 of the tensor's data bytes]},
     "metadata": {key: value for the keys whose value differs from (or is absent in) INPUT},
     "order": [tensor names in the file's order],
     "file_sha256": sha256 of the whole file}

Usage:
    python tools/make_quant_reference.py REFSET/llamacpp/bamba-small.f32.gguf \   # REFSET: the reference set (docs/glossary.md)
        REFSET/llamacpp/quant tests/fixtures/quant ['bamba-small.*.gguf']
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import sys

import gguf
import numpy as np


def _value(r: gguf.GGUFReader, key: str):
    v = r.fields[key].contents()
    if isinstance(v, np.generic):
        v = v.item()
    return v


def metadata(r: gguf.GGUFReader) -> dict:
    return {k: _value(r, k) for k in r.fields if not k.startswith("GGUF.")}


def tensor_digests(r: gguf.GGUFReader) -> dict:
    out = {}
    for t in r.tensors:
        data = np.asarray(t.data).view(np.uint8).reshape(-1)
        assert data.size == int(t.n_bytes), t.name
        out[t.name] = [t.tensor_type.name, hashlib.sha256(data.tobytes()).hexdigest()]
    return out


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    inp, qdir, outdir = argv[1:4]
    pattern = argv[4] if len(argv) == 5 else "*.gguf"
    base = metadata(gguf.GGUFReader(inp))
    os.makedirs(outdir, exist_ok=True)
    for path in sorted(glob.glob(os.path.join(qdir, pattern))):
        r = gguf.GGUFReader(path)
        meta = {k: v for k, v in metadata(r).items() if base.get(k, object()) != v}
        im = meta.get("quantize.imatrix.file")
        ref = {"source": os.path.basename(path), "input": os.path.basename(inp),
               "type": os.path.basename(path)[: -len(".gguf")].rsplit(".", 1)[1],
               "imatrix": os.path.basename(im) if im else None,
               "tensors": tensor_digests(r), "metadata": meta,
               "order": [t.name for t in r.tensors], "file_sha256": _file_sha256(path)}
        name = os.path.basename(path)[: -len(".gguf")] + ".json"
        with open(os.path.join(outdir, name), "w") as fh:
            json.dump(ref, fh, indent=1, sort_keys=True)
            fh.write("\n")
        print(f"{name}: {len(ref['tensors'])} tensors, metadata changed: {sorted(meta)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
