"""Piped output is never wrapped (README): the one-line summaries of ``toolkit convert`` and
``toolkit quantize`` stay one line on a pipe however long the path (rich would wrap at 80)."""
from __future__ import annotations

import pathlib

import pytest

from cli_runner import cli

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "mamba-tiny"


def _one_line(out: str, start: str, end: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.startswith(start)]
    assert len(lines) == 1 and end in lines[0] and len(lines[0]) > 80, out
    return lines[0]


@pytest.mark.native
def test_convert_and_quantize_summaries_are_one_line_when_piped(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("COLUMNS", raising=False)
    d = tmp_path / ("a-directory-with-a-long-name-" * 3)
    d.mkdir()
    f16 = d / "mamba-tiny-with-a-long-file-name.gguf"
    rc, out, err = cli(monkeypatch, capsys, "convert", str(FIXTURE), str(f16))
    assert rc == 0, err
    _one_line(out, "wrote ", "peak memory")
    rc, out, err = cli(monkeypatch, capsys, "convert", str(FIXTURE), str(f16), "--dry-run")
    assert rc == 0, err
    _one_line(out, str(FIXTURE), "(dry run: nothing written)")
    rc, out, err = cli(monkeypatch, capsys, "quantize", str(f16), str(d / "q8.gguf"), "Q8_0")
    assert rc == 0, err
    _one_line(out, "wrote ", "peak RSS")
