"""quantize on a qwen4exp file: per_layer_token_embd (the PLE n-gram table) in row bands, named
by ``--tensor-type per_layer_token_embd=TYPE``; the UINT64 hash constants copied exactly.

The input is the tiny qwen4exp fixture converted to f32 after widening its PLE rows from 16
to 32 elements (ple_embed_dim 128), so the table can take 32-element blocks.
"""
from __future__ import annotations

import json
import pathlib
import shutil
import sys

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from toolkit.cli import main
from toolkit.convert import convert
from toolkit.gguf_io import GGMLType
from toolkit.quantize import Options, quantize_file

SRC = pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / "qwen4exp-tiny"
PLE = "model.layers.1.ple."


@pytest.fixture(scope="module")
def f32(tmp_path_factory) -> pathlib.Path:
    tmp = tmp_path_factory.mktemp("qple")
    d = tmp / "qwen4exp-wide"
    shutil.copytree(SRC, d)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    rng = np.random.default_rng(0)
    for fn in sorted(set(idx["weight_map"].values())):
        t = load_file(str(d / fn))
        hit = False
        for n in list(t):
            if ".ngram_embedding.shard_" in n:
                t[n] = rng.standard_normal((t[n].shape[0], 32), dtype=np.float32)
                hit = True
            elif n in (PLE + "key_proj.weight", PLE + "value_proj.weight"):
                t[n] = 0.08 * rng.standard_normal((t[n].shape[0], 128), dtype=np.float32)
                hit = True
        if hit:
            save_file(t, str(d / fn), metadata={"format": "pt"})
    c = json.loads((d / "config.json").read_text())
    c["ple_embed_dim"] = 128
    (d / "config.json").write_text(json.dumps(c))
    out = tmp / "wide.f32.gguf"
    convert(str(d), str(out), "f32")
    return out


def types(path) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}


def data(path, name) -> bytes:
    return next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == name).data.tobytes()


def test_tensor_type_names_the_ple_table(f32, tmp_path, monkeypatch):
    """llama.cpp 0c1e570 (llama_tensor_get_type): per_layer_token_embd follows
    --token-embedding-type unless a --tensor-type pattern names it."""
    out = tmp_path / "a.gguf"
    monkeypatch.setattr(sys, "argv", ["toolkit", "quantize", str(f32), str(out), "Q8_0", "--token-embedding-type", "Q4_0",
                                      "--tensor-type", "per_layer_token_embd=Q5_0"])
    try:
        main()
    except SystemExit as e:
        assert e.code in (0, None)
    t = types(out)
    assert t["token_embd.weight"] == "Q4_0"
    assert t["per_layer_token_embd.weight"] == "Q5_0"
    out2 = tmp_path / "b.gguf"
    quantize_file(str(f32), str(out2), "Q8_0", Options(token_embedding_type=GGMLType.Q4_0), n_threads=1)
    t2 = types(out2)
    assert t2["token_embd.weight"] == t2["per_layer_token_embd.weight"] == "Q4_0"


def test_ple_table_in_row_bands_is_byte_exact(f32, tmp_path):
    """Bands of a few rows give the same bytes as one band, and the Q8_0 table equals gguf-py's
    reference quantizer on the whole f32 table."""
    from toolkit.quantize.driver import band_rows

    assert band_rows(32 * 4, 34, 256, int(0.004 * 2**20)) <= 32      # the 256-row table takes >= 8 bands
    opts = Options(tensor_types=[("per_layer_token_embd", GGMLType.Q8_0)])
    small, big = tmp_path / "small.gguf", tmp_path / "big.gguf"
    quantize_file(str(f32), str(small), "Q4_0", opts, n_threads=2, band_mb=0.004)    # ~4 KiB: a few rows a band
    quantize_file(str(f32), str(big), "Q4_0", opts, n_threads=1)
    name = "per_layer_token_embd.weight"
    assert types(small)[name] == "Q8_0"
    table = np.frombuffer(data(f32, name), dtype=np.float32).reshape(256, 32)
    want = gguf.quants.quantize(table, GGMLType.Q8_0).tobytes()
    assert data(small, name) == want == data(big, name)
    assert small.read_bytes() == big.read_bytes()


def test_hash_constants_survive_quantize_exactly(f32, tmp_path):
    out = tmp_path / "q.gguf"
    quantize_file(str(f32), str(out), "Q4_K_M", Options(), n_threads=1)
    a, b = gguf.GGUFReader(str(f32)), gguf.GGUFReader(str(out))
    for key in ("qwen4exp.ple.layer_multipliers", "qwen4exp.ple.head_offsets", "qwen4exp.ple.head_vocab_sizes"):
        fa, fb = a.fields[key], b.fields[key]
        assert [gguf.GGUFValueType(x) for x in fb.types] == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT64]
        assert [int(x) for x in fb.contents()] == [int(x) for x in fa.contents()]
    assert max(int(x) for x in b.fields["qwen4exp.ple.layer_multipliers"].contents()) > 2**53
