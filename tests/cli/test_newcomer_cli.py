"""What a second newcomer from llama.cpp found in the CLI (issue 44, section 2, items 5, 7-10)."""
from __future__ import annotations

import pathlib

import pytest

from cli_runner import cli

FIX = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
MODEL = FIX / "llamacpp" / "mamba-tiny.f32.gguf"


def test_no_arguments_prints_help_and_exits_2(monkeypatch, capsys):
    """`toolkit` alone: the help (the usage and every command) on stdout, nothing on stderr, exit 2."""
    from toolkit.cli.app import _COMMANDS
    rc, out, err = cli(monkeypatch, capsys)
    assert rc == 2
    assert "Usage: toolkit [OPTIONS] COMMAND" in out
    assert all(f" {c} " in out for c in (*_COMMANDS, "chat")), out
    assert err == "", repr(err)
