"""What the KDA-family converter tests share (test_convert_glm5_next.py, test_convert_bailingmoe3.py):
register a family for a test, convert a fixture to f32, read a GGUF back, compare with llama.cpp's file."""
from __future__ import annotations

import pathlib

import numpy as np

from cli_runner import cli as run_cli

FIX = pathlib.Path(__file__).parent.parent / "fixtures"


def read_gguf(path):
    """({tensor name: ReaderTensor}, {key: value}) without the general.*, tokenizer.* and GGUF.* keys."""
    import gguf
    r = gguf.GGUFReader(str(path))
    keys = {k: f.contents() for k, f in r.fields.items() if not k.startswith(("tokenizer.", "general.", "GGUF."))}
    return {t.name: t for t in r.tensors}, keys


def convert(monkeypatch, capsys, src, out, *extra) -> str:
    """convert src to f32 at out; returns stderr + stdout"""
    rc, o, err = run_cli(monkeypatch, capsys, "convert", str(src), str(out), "--outtype", "f32", *extra)
    assert rc == 0, err
    return err + o


def same_as_llama_cpp(ours_path, name):
    """Our f32 file of fixture ``name`` has llama.cpp's tensor names, shapes, types and data, and its
    keys with the same values; returns (our keys, our keys llama.cpp's file lacks)."""
    ours, ok = read_gguf(ours_path)
    theirs, tk = read_gguf(FIX / "llamacpp" / f"{name}.f32.gguf")
    assert sorted(ours) == sorted(theirs)
    for n, t in theirs.items():
        o = ours[n]
        assert list(o.shape) == list(t.shape) and o.tensor_type == t.tensor_type, n
        assert np.array_equal(np.asarray(o.data), np.asarray(t.data)), n
    assert {k: v for k, v in ok.items() if k in tk} == tk
    return ok, sorted(set(ok) - set(tk))
