"""`toolkit convert` defaults as llama.cpp's converter has them: no OUT writes
``{Name}-{size}-{OUTTYPE}.gguf`` (gguf-py's naming convention) inside HF_DIR; ``--outtype``
defaults to ``auto`` (bf16 when the first matrix is BF16, else f16), with bf16 where f16
would overflow; what was picked, and why, is said on stderr and in --json."""
from __future__ import annotations

import json
import pathlib
import shutil
import struct

import numpy as np
from safetensors.numpy import load_file, save_file

from cli_runner import cli
from toolkit.gguf_io import GGUFHeader

HF = pathlib.Path(__file__).parent.parent / "fixtures" / "hf"


def copy(tmp_path, name="mamba-tiny", dtype="F32") -> pathlib.Path:
    """A copy of fixture ``name`` whose tensors are stored as ``dtype`` (F32, F16 or BF16)."""
    d = tmp_path / "in" / name
    shutil.copytree(HF / name, d, ignore=None if dtype == "F32" else shutil.ignore_patterns("*.safetensors"))
    if dtype == "F32":
        return d
    for f in sorted((HF / name).glob("*.safetensors")):
        head, blobs, off = {}, [], 0
        for k, v in load_file(str(f)).items():
            v = v.astype(np.float32)
            b = v.astype(np.float16).tobytes() if dtype == "F16" else (v.view(np.uint32) >> 16).astype(np.uint16).tobytes()
            head[k] = {"dtype": dtype, "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
        h = json.dumps(head).encode()
        (d / f.name).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return d


def file_type(path) -> int:
    return int(GGUFHeader(str(path)).get("general.file_type"))


def test_no_out_writes_llama_cpp_name_inside_hf_dir(monkeypatch, capsys, tmp_path):
    """`toolkit convert HF_DIR` was 'missing argument OUT.gguf'; llama.cpp's converter writes
    HF_DIR/{Name}-{size label}-{OUTTYPE}.gguf (gguf.naming_convention)."""
    d = copy(tmp_path)
    rc, out, err = cli(monkeypatch, capsys, "convert", str(d))
    assert rc == 0, err
    want = d / "Mamba-Tiny-100K-F16.gguf"
    assert want.is_file() and f"wrote {want}" in out
    assert [p.name for p in d.glob("*.gguf")] == [want.name]


def test_hf_dir_dot_is_named_by_its_directory(monkeypatch, capsys, tmp_path):
    """`cd mamba-tiny && toolkit convert .` wrote ./-100K-F16.gguf (the name of Path('.') is ''):
    a file name that starts with a dash (-m -100K-F16.gguf reads as a flag)."""
    d = copy(tmp_path)
    monkeypatch.chdir(d)
    for hf in (".", "./", "../mamba-tiny/."):
        rc, out, err = cli(monkeypatch, capsys, "convert", hf, "--dry-run", "--json")
        assert rc == 0, err
        assert pathlib.Path(json.loads(out)["out"]).name == "Mamba-Tiny-100K-F16.gguf", (hf, out)


def test_out_directory_and_ftype_template(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path)
    dest = tmp_path / "models"
    dest.mkdir()
    rc, out, err = cli(monkeypatch, capsys, "convert", str(d), str(dest), "--outtype", "bf16", "--json")
    assert rc == 0, err
    assert json.loads(out)["out"] == str(dest / "Mamba-Tiny-100K-BF16.gguf")
    assert (dest / "Mamba-Tiny-100K-BF16.gguf").is_file()
    rc, out, err = cli(monkeypatch, capsys, "convert", str(d), str(tmp_path / "m-{ftype}.gguf"), "--outtype", "q8_0")
    assert rc == 0, err
    assert (tmp_path / "m-q8_0.gguf").is_file()
    rc, out, err = cli(monkeypatch, capsys, "convert", str(d), "--dry-run", "--json")
    assert rc == 0 and json.loads(out)["out"] == str(d / "Mamba-Tiny-100K-F16.gguf")
    assert not list(d.glob("*.gguf"))


def test_default_outtype_f32_checkpoint_is_f16_and_says_why(monkeypatch, capsys, tmp_path):
    """The default was f32; llama.cpp's converter gives f16 for an F32 checkpoint."""
    out = tmp_path / "m.gguf"
    rc, stdout, err = cli(monkeypatch, capsys, "convert", str(HF / "mamba-tiny"), str(out))
    assert rc == 0, err
    assert file_type(out) == 1          # MOSTLY_F16
    assert "outtype f16 (auto:" in " ".join(err.split())
    rc, stdout, err = cli(monkeypatch, capsys, "convert", str(HF / "mamba-tiny"), str(out), "--json")
    s = json.loads(stdout)
    assert s["outtype"] == "f16" and s["outtype_reason"].startswith("auto:")
    rc, stdout, err = cli(monkeypatch, capsys, "convert", str(HF / "mamba-tiny"), str(out), "--outtype", "f32", "--json")
    s = json.loads(stdout)
    assert s["outtype"] == "f32" and s["outtype_reason"] == "" and file_type(out) == 0


def test_default_outtype_follows_first_matrix(monkeypatch, capsys, tmp_path):
    for dtype, want, ft in (("BF16", "bf16", 32), ("F16", "f16", 1)):
        d = copy(tmp_path / dtype, dtype=dtype)
        rc, stdout, err = cli(monkeypatch, capsys, "convert", str(d), "--json")
        assert rc == 0, err
        s = json.loads(stdout)
        assert s["outtype"] == want and f"is {dtype}" in s["outtype_reason"], s
        assert s["out"].endswith(f"-{want.upper()}.gguf") and file_type(s["out"]) == ft


def test_default_outtype_is_bf16_where_f16_would_overflow(monkeypatch, capsys, tmp_path):
    """A weight beyond F16's 65504: an explicit --outtype f16 is refused (the test in
    test_convert_errors.py); the default picks bf16 instead, and says why."""
    d = copy(tmp_path)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    name = "backbone.layers.0.mixer.in_proj.weight"
    fn = d / idx["weight_map"][name]
    t = load_file(str(fn))
    t[name][3, 5] = 1e6
    save_file(t, str(fn), metadata={"format": "pt"})
    rc, stdout, err = cli(monkeypatch, capsys, "convert", str(d))
    assert rc == 0, err
    line = " ".join(err.split())
    assert "outtype bf16 (auto: f16 would overflow" in line and "blk.0.ssm_in.weight" in line and "row 3" in line
    assert [p.name for p in d.glob("*.gguf")] == ["Mamba-Tiny-100K-BF16.gguf"]
    assert file_type(d / "Mamba-Tiny-100K-BF16.gguf") == 32
    assert not [p for p in d.iterdir() if p.name.endswith(".part")]
    rc, stdout, err = cli(monkeypatch, capsys, "convert", str(d), str(tmp_path / "x.gguf"), "--json")
    s = json.loads(stdout)
    assert s["outtype"] == "bf16" and "f16 would overflow" in s["outtype_reason"]
    rc, stdout, err = cli(monkeypatch, capsys, "convert", str(d), str(tmp_path / "y.gguf"), "--outtype", "f16")
    assert rc == 2 and "bf16" in err and not (tmp_path / "y.gguf").exists()
