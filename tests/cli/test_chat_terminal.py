"""`toolkit chat` on a terminal and through a pipe, as people use it (issue 37): line editing and
history (readline), commands that say what they did, answers separated when piped, a newline
before leaving on Ctrl-C / Ctrl-D, and the no-template fallback (chatml, as llama.cpp and as
`toolkit serve`)."""
from __future__ import annotations

import json
import os
import pathlib
import pty
import select
import subprocess
import sys
import time

import pytest

from cli_runner import cli
from toolkit.gguf_io import GGUFFile
from toolkit.runtime.chat import CHATML, ChatTemplate
from toolkit.runtime.tokenizer import Tokenizer

pytestmark = pytest.mark.native

DEMO = pathlib.Path(__file__).resolve().parents[2] / "toolkit" / "data" / "default.gguf"
ARGS = ["-m", str(DEMO), "--temp", "0", "-n", "2", "-t", "1"]
LEFT, UP = "\x1b[D", "\x1b[A"


def _own_terminal() -> None:
    """In the child: a new session whose controlling terminal is the pty (so that Ctrl-C sends
    SIGINT, as a shell's terminal does)."""
    import fcntl
    import termios
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Term:
    """``toolkit chat ARGS`` on a pseudo-terminal: ``send`` keys, ``wait_for`` output."""

    def __init__(self, *args: str):
        self.master, slave = pty.openpty()
        env = dict(os.environ, TERM="xterm", COLUMNS="100", LINES="40")
        env.pop("INPUTRC", None)
        self.p = subprocess.Popen([sys.executable, "-m", "toolkit", "chat", *args], stdin=slave, stdout=slave,
                                  stderr=slave, env=env, close_fds=True, preexec_fn=_own_terminal)
        os.close(slave)
        self.out = b""

    def read(self, timeout: float) -> None:
        end = time.time() + timeout
        while time.time() < end:
            r, _, _ = select.select([self.master], [], [], 0.05)
            if r:
                try:
                    b = os.read(self.master, 65536)
                except OSError:
                    return
                if not b:
                    return
                self.out += b

    def prompts(self) -> int:
        return self.out.count(b"> ")

    def send(self, s: str) -> None:
        os.write(self.master, s.encode())

    def finish(self, timeout: float = 30) -> int:
        end = time.time() + timeout
        while self.p.poll() is None and time.time() < end:
            self.read(0.1)
        self.read(0.2)
        rc = self.p.wait(timeout=5)
        os.close(self.master)
        return rc

    def next_prompt(self, k: int, timeout: float = 60) -> None:
        """Wait until the k-th prompt has been drawn."""
        end = time.time() + timeout
        while self.prompts() < k:
            assert time.time() < end and self.p.poll() is None, self.out
            self.read(0.1)


def test_line_editing_and_history_on_a_terminal(tmp_path):
    saved = tmp_path / "c.json"
    t = Term(*ARGS, "--chat-template", "chatml")
    t.next_prompt(1)
    t.send("abc" + LEFT + LEFT + "X\r")        # abc, <- <-, X, Enter: X goes in before the b
    t.next_prompt(2)
    t.send(UP + "\r")                            # Up recalls that line
    t.next_prompt(3)
    t.send(f"/save {saved}\r")
    t.next_prompt(4)
    t.send("\x04")                               # Ctrl-D: leave, on a fresh line
    rc = t.finish()
    out = t.out.decode("utf-8", "replace")
    assert rc == 0, out
    msgs = json.loads(saved.read_text())["messages"]
    assert [m["content"] for m in msgs if m["role"] == "user"] == ["aXbc", "aXbc"], (msgs, out)
    assert "\x1b[D" not in saved.read_text()
    assert f"saved 4 messages to {saved}" in out, out
    assert out.rstrip(" ").endswith("\n"), repr(out[-40:])    # the shell prompt starts on its own line


def test_ctrl_c_at_the_prompt_leaves_on_a_fresh_line():
    t = Term(*ARGS, "--chat-template", "chatml")
    t.next_prompt(1)
    t.send("\x03")
    rc = t.finish()
    out = t.out.decode("utf-8", "replace").replace("\r", "")
    assert rc == 130, out
    last = [x for x in out.split("\n") if x.strip()][-1]
    assert last.strip() == "interrupted", repr(out[-80:])


def test_piped_commands_say_what_they_did_and_answers_are_separated(monkeypatch, capsys, tmp_path):
    f = tmp_path / "c.json"
    rc, one, err = cli(monkeypatch, capsys, "chat", *ARGS, "--chat-template", "chatml", stdin="Hello\n")
    assert rc == 0, err
    rc, out, err = cli(monkeypatch, capsys, "chat", *ARGS, "--chat-template", "chatml",
                       stdin=f"Hello\nWhat is a list?\n/undo\n/save {f}\n/load {f}\n/reset\n")
    assert rc == 0, err
    assert out.startswith(one + "\n"), (one, out)          # a blank line after the first answer
    for what in ("undone: the last exchange was dropped (2 messages left)", f"saved 2 messages to {f}",
                 f"loaded 2 messages from {f}", "reset: the conversation starts over"):
        assert what in err, (what, err)


def test_no_template_falls_back_to_chatml_in_chat_and_serve(monkeypatch, capsys):
    # the demo model has no tokenizer.chat_template: chat fell back to plain completion, serve to chatml
    rc, out, err = cli(monkeypatch, capsys, "chat", *ARGS, "--json", stdin="Once upon a time\n")
    assert rc == 0, err
    assert "no chat template" in err and "using chatml, as llama.cpp does" in err, err
    assert len([x for x in err.splitlines() if "no chat template" in x]) == 1
    (turn,) = [json.loads(x) for x in out.splitlines()]
    tok = Tokenizer.from_gguf(GGUFFile(DEMO))
    assert turn["n_prompt"] == len(ChatTemplate(CHATML, "chatml").encode(tok, [{"role": "user",
                                                                                "content": "Once upon a time"}]))
    from toolkit.serve import load
    svc = load(str(DEMO), n_slots=1, n_ctx=256, n_threads=1)
    try:
        assert svc.template.source == CHATML and svc.template_note and "chatml" in svc.template_note
    finally:
        svc.engine.close()
