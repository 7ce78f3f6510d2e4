"""Broken copies of Hugging Face checkpoints for the `toolkit convert` error tests
(tests/cli/test_convert_*_errors.py): copy a fixture to tmp_path, edit its config.json or a
tensor, and expect one error line naming the file/key/tensor, with nothing left at OUT."""
from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
from safetensors.numpy import load_file, save_file

from cli_runner import cli as run_cli

HF = pathlib.Path(__file__).parent.parent / "fixtures" / "hf"


def copy(tmp_path, name) -> pathlib.Path:
    d = tmp_path / "in" / name
    shutil.copytree(HF / name, d)
    return d


def expect_error(monkeypatch, capsys, tmp_path, src, *needles, code=2, extra=()):
    out = tmp_path / "out.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(src), str(out), *extra)
    assert rc == code, err
    line = " ".join(err.split())          # rich may wrap the one line on a narrow terminal
    assert line.startswith("error:"), err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3   # one (wrapped) line
    for n in needles:
        assert n in line, (n, line)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []
    return line


def config(d: pathlib.Path) -> dict:
    return json.loads((d / "config.json").read_text())


def edit_config(d: pathlib.Path, drop=(), **kw) -> None:
    c = config(d)
    c.update(kw)
    for k in drop:
        c.pop(k, None)
    (d / "config.json").write_text(json.dumps(c))


def edit_rope(d: pathlib.Path, **kw) -> None:
    c = config(d)
    edit_config(d, rope_parameters={**c["rope_parameters"], **kw})


def drop_tensor(d: pathlib.Path, name: str) -> str:
    """Remove tensor ``name`` from its shard and from the index; returns the shard's file name."""
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    fn = idx["weight_map"].pop(name)
    t = load_file(str(d / fn))
    del t[name]
    save_file(t, str(d / fn), metadata={"format": "pt"})
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    return fn


def replace_tensor(d: pathlib.Path, name: str, a: np.ndarray) -> str:
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    fn = idx["weight_map"][name]
    t = load_file(str(d / fn))
    t[name] = a
    save_file(t, str(d / fn), metadata={"format": "pt"})
    return fn
