"""Progress on a terminal is one line updated in place (issue 37: perplexity's `\\r` was dropped
by rich, so the chunks ran together: `chunk 1/6  PPL 40633.9584chunk 2/6 ...`)."""
from __future__ import annotations

import os
import pathlib
import pty
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "toolkit" / "data" / "default.gguf"


def run_on_tty(args: list[str], timeout: float = 120) -> tuple[int, str]:
    """(exit code, everything written to the terminal) of ``toolkit ARGS`` with stdout and
    stderr on a pseudo-terminal of 100 columns."""
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    env = dict(os.environ, COLUMNS="100", TERM="xterm")
    p = subprocess.Popen([sys.executable, "-m", "toolkit", *args], stdin=subprocess.DEVNULL, stdout=slave,
                         stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:     # EIO: the child closed the terminal
            break
        if not b:
            break
        chunks.append(b)
    os.close(master)
    rc = p.wait(timeout=timeout)
    return rc, b"".join(chunks).decode("utf-8", "replace")


def test_perplexity_progress_in_place(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("def add(a, b):\n    return a + b\n\n" * 200)
    rc, out = run_on_tty(["perplexity", "-m", str(DEMO), "-f", str(text), "-c", "64", "--chunks", "3"])
    assert rc == 0, out
    assert not re.search(r"PPL +[0-9.]+chunk", out), out          # chunks run together on one line
    assert "PPL" in out and "+/-" in out, out
    assert "\r" in out or "\x1b[" in out, out                   # redrawn in place
