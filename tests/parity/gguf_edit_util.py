"""Rewriting a GGUF file with some keys changed, and running toolkit on it expecting one error
line: what the bad-input tests of several families share."""
from __future__ import annotations

import sys

import gguf
import pytest

from toolkit.cli.app import main


def rewrite(src, dst, kv: dict | None = None, drop_kv: tuple[str, ...] = (), drop_tensors: str | None = None,
            add_tensors: dict | None = None) -> None:
    """Copy GGUF ``src`` to ``dst`` with the key/values ``kv`` (name -> (value, type, sub type))
    set and ``drop_kv`` left out; tensors unchanged (an f32 file), less those whose name starts
    with ``drop_tensors``, plus ``add_tensors`` (name -> float32 array)."""
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    kv = kv or {}
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in drop_kv or name in kv:
            continue
        vt = gguf.GGUFValueType(f.types[0])
        sub = gguf.GGUFValueType(f.types[-1]) if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vt, sub_type=sub)
    for name, (v, vt, sub) in kv.items():
        w.add_key_value(name, v, vt, sub_type=sub)
    for t in r.tensors:
        if drop_tensors and t.name.startswith(drop_tensors):
            continue
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    for name, a in (add_tensors or {}).items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run_error(monkeypatch, capsys, path) -> str:
    monkeypatch.setattr(sys, "argv", ["toolkit", "run", "-m", str(path), "-p", "hello", "-n", "1"])
    with pytest.raises(SystemExit) as e:
        main()
    _, err = capsys.readouterr()
    assert e.value.code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err
