"""The Mamba-2 dt clamp keys (HF ``dt_limit``: ``time_step_limit``, Nemotron-H / Zamba2
``time_step_min``): written as ``{arch}.ssm.dt_min`` / ``ssm.dt_max`` only where they clamp,
read back into hparams, and one-line errors for the values that cannot be run.  The parity of
the clamped fixtures against HF is tests/parity/test_families.py (*-dtclamp-tiny,
nemotronh-dtmin-tiny, zamba2-dtfloor-tiny, zamba2-noconvb-tiny)."""
from __future__ import annotations

import json

import gguf
import pytest

from cli_runner import cli as run_cli
from convert_error_util import HF, config, copy, expect_error


def _convert(monkeypatch, capsys, tmp_path, src) -> dict:
    out = tmp_path / "out.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(src), str(out), "--outtype", "f32")
    assert rc == 0, err
    r = gguf.GGUFReader(str(out))
    return {k: f.contents() for k, f in r.fields.items() if ".ssm.dt_" in k}


def _with(tmp_path, name: str, **changes):
    d = copy(tmp_path, name)
    c = config(d)
    c.update(changes)
    (d / "config.json").write_text(json.dumps(c))
    return d


@pytest.mark.parametrize("limit,want", [
    ([0.0, {"__float__": "Infinity"}], {}),                  # transformers 5's spelling of HF's default
    ([0.0, "Infinity"], {}),
    (None, {}),                                              # null: HF's default
    ([-1.0, 5.0], {"mamba2.ssm.dt_max": 5.0}),               # a floor <= 0 clamps nothing (softplus >= 0)
    ([0.25, {"__float__": "Infinity"}], {"mamba2.ssm.dt_min": 0.25}),
    ([0.4, 1.0], {"mamba2.ssm.dt_min": 0.4, "mamba2.ssm.dt_max": 1.0}),
])
def test_keys_only_where_they_clamp(monkeypatch, capsys, tmp_path, limit, want):
    got = _convert(monkeypatch, capsys, tmp_path, _with(tmp_path, "mamba2-tiny", time_step_limit=limit))
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v)


def test_default_file_unchanged(monkeypatch, capsys, tmp_path):
    """mamba2-tiny's own config ((0, inf)) gives the same bytes as with the key deleted."""
    a = tmp_path / "a.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(HF / "mamba2-tiny"), str(a), "--outtype", "f32")
    assert rc == 0, err
    d = copy(tmp_path, "mamba2-tiny")
    c = config(d)
    del c["time_step_limit"]
    (d / "config.json").write_text(json.dumps(c))
    b = tmp_path / "b.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(d), str(b), "--outtype", "f32")
    assert rc == 0, err
    assert a.read_bytes() == b.read_bytes()


def test_nemotronh_floor_is_time_step_min(monkeypatch, capsys, tmp_path):
    """NemotronHMamba2Mixer: dt_limit = (time_step_min, inf); time_step_limit is not read."""
    got = _convert(monkeypatch, capsys, tmp_path, _with(tmp_path, "nemotronh-dense-tiny", time_step_min=0.02,
                                                        time_step_limit=[0.5, 0.6]))
    assert got.keys() == {"nemotron_h.ssm.dt_min"} and got["nemotron_h.ssm.dt_min"] == pytest.approx(0.02)


def test_hparams_read_back(tmp_path):
    from toolkit.arch.hparams import HParams
    from toolkit.convert import convert
    from toolkit.gguf_io import GGUFFile
    out = tmp_path / "f.gguf"
    convert(str(_with(tmp_path, "bamba-tiny", time_step_limit=[0.125, 2.0])), str(out), outtype="f32")
    hp = HParams.from_gguf(GGUFFile(str(out)))
    assert (hp.ssm_dt_min, hp.ssm_dt_max) == (0.125, 2.0)
    base = HParams.from_gguf(GGUFFile(str(HF.parent / "llamacpp" / "mamba2-tiny.f32.gguf")))   # llama.cpp's file
    assert (base.ssm_dt_min, base.ssm_dt_max) == (0.0, 0.0)


@pytest.mark.parametrize("limit,code,needle", [
    ([0.1], 2, "must be two numbers"),
    ("wide", 2, "must be two numbers"),
    ([0.1, True], 2, "must be two numbers"),
    ([0.0, 0.0], 3, "a dt ceiling <= 0"),
    ([{"__float__": "Infinity"}, {"__float__": "Infinity"}], 3, "an infinite dt floor"),
])
def test_bad_limits(monkeypatch, capsys, tmp_path, limit, code, needle):
    d = _with(tmp_path, "falconh1-tiny", time_step_limit=limit)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "time_step_limit", needle, code=code)
