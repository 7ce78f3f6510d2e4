"""Help that tells the truth (issue 37): the command list, each command's own usage, flag
spellings, the families, the version."""
from __future__ import annotations

from cli_runner import cli


def test_root_help_lists_chat(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "-h")
    assert rc == 0
    names = [ln.strip("│ ").split(" ")[0] for ln in out.split("Commands")[1].splitlines()]
    assert "chat" in names, out


def test_chat_help_is_chats_own(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "chat", "-h")
    assert rc == 0
    assert "toolkit chat" in out and "toolkit run [" not in out, out
    assert "--conversation" not in out, out
