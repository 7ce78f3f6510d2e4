"""README's --session example, run as written on the packaged model: the second prompt reuses
the first one's state (the old "Question: why" / "Question: how" pair reused 0 tokens)."""
from __future__ import annotations

import json
import pathlib
import re
import shlex
import sys

import pytest

from toolkit.cli.app import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "toolkit" / "data" / "default.gguf"

pytestmark = pytest.mark.skipif(not DEFAULT.is_file(), reason="no packaged default model")


def test_readme_session_example_reuses(monkeypatch, capsys, tmp_path):
    lines = [l for l in (ROOT / "README.md").read_text().splitlines()
             if l.startswith("toolkit run ") and "chat.session" in l]
    assert len(lines) == 2, lines
    got = []
    for line in lines:
        argv = shlex.split(line)[1:]
        i = argv.index("-m")
        argv[i + 1] = str(DEFAULT)
        k = next(i for i, a in enumerate(argv) if a.endswith("chat.session"))
        argv[k] = str(tmp_path / "chat.session")
        monkeypatch.setattr(sys, "argv", ["toolkit", *argv, "--json", "-n", "4"])
        try:
            main()
        except SystemExit as e:
            assert not e.code, capsys.readouterr().err
        got.append(json.loads(capsys.readouterr().out))
    assert got[0]["n_reused"] == 0
    assert got[1]["n_reused"] == len(got[0]["prompt_tokens"]) > 0
