"""Interrupting `toolkit run` at a chosen moment: one trial and its verdict.

Shared by tests/reliability/test_sigterm_decode.py (eight trials in CI) and
tools/signal_trials.py (the long runs: 100 SIGINT, 30 SIGTERM, random delays).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "toolkit", "data", "default.gguf")
LARGER = os.path.join(ROOT, "tests", "fixtures", "llamacpp", "bamba-small.f32.gguf")
BAD_WORDS = ("Traceback", "internal error", "Fatal Python error", "Segmentation", "malloc", "core dumped")


# a prompt of ~1700-2300 tokens: its prefill (ubatches of 512) keeps tk_decode busy for a good part
# of a second, where a signal lands mid-decode; a short prompt exercises the one-token decodes
LONG_PROMPT = "The quick brown fox jumps over the lazy dog. " * 80


def one_trial(model: str, sig: int, delay: float, session_dir: str | None, long_prompt: bool = False,
              threads: int = 2) -> tuple[int, str, list]:
    """Start `toolkit run` (endless: --ignore-eos, -n -1, --context-shift), send ``sig`` after ``delay`` seconds.

    Returns (exit status, stderr tail, files left in ``session_dir`` besides the session file).
    The run must still be going when the signal is sent (otherwise the trial proves nothing).
    """
    cmd = [sys.executable, "-m", "toolkit", "run", "-m", model, "-" if long_prompt else "Once upon a time",
           "-n", "-1", "--ignore-eos", "--context-shift", "-c", "4096", "-t", str(threads), "--seed", "1"]
    if session_dir is not None:
        cmd += ["--session", os.path.join(session_dir, "s.bin")]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    p.stdin.write(LONG_PROMPT.encode() if long_prompt else b"")
    p.stdin.close()
    p.stdin = None
    time.sleep(delay)
    still = p.poll() is None
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        return -999, "hung after the signal: " + err.decode(errors="replace")[-300:], []
    if not still:
        return -998, "finished before the signal: " + err.decode(errors="replace")[-300:], []
    left = sorted(set(os.listdir(session_dir)) - {"s.bin"}) if session_dir is not None else []
    return p.returncode, err.decode(errors="replace")[-400:], left


def check_trial(rc: int, err: str, left: list, sig: int) -> str:
    """'' when the trial is clean, else what went wrong."""
    if rc != 128 + sig:
        return f"exit {rc}, expected {128 + sig}: {err}"
    bad = [w for w in BAD_WORDS if w in err]
    if bad:
        return f"stderr has {bad}: {err}"
    if left:
        return f"files left behind: {left}"
    return ""
