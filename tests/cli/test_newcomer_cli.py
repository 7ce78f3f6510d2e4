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


@pytest.mark.native
@pytest.mark.parametrize("what,c_msg,want", [
    ("context", "context needs 9.00 GiB (KV cache ...)", "context needs 9.00 GiB (KV cache ...)"),
    ("state", "state: bad section tag 7", "state: bad section tag 7"),
    ("checkpoints", "checkpoints = -1 must be >= 0", "checkpoints = -1 must be >= 0"),
    ("memory estimate", "n_ctx = 0 must be > 0", "memory estimate: n_ctx = 0 must be > 0"),
    ("context", "contextual note", "context: contextual note"),
])
def test_native_error_prefix_said_once(monkeypatch, what, c_msg, want):
    """`error: context: context needs ...` said "context" twice (issue 44 §2 item 9): the
    caller's prefix is dropped when the C message already starts with it."""
    import toolkit.binding as b
    monkeypatch.setattr(b, "last_error", lambda: c_msg)
    with pytest.raises(b.ToolkitError) as ei:
        b.check(b.lib.TK_ERR_NOMEM if what == "context" else b.lib.TK_ERR_INVALID, what)
    assert str(ei.value) == want
