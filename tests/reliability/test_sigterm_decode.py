"""SIGTERM while a decode runs on the helper thread (Context._run_interruptible) ends the
process cleanly with 143: the decode is aborted and joined before the context is freed --
not SIGSEGV (context freed under the running decode) nor a hang (tk_pool_free waiting on a
condition variable the decode thread still waits on).  Found by a fresh-user attack: half
of the trials crashed or hung before the fix."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.native, pytest.mark.slow]   # 4 x ~2.5 s of subprocess

MODEL = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "llamacpp", "bamba-small.f32.gguf")


@pytest.mark.parametrize("trial", range(4))
def test_sigterm_during_bench_exits_143(trial):
    p = subprocess.Popen([sys.executable, "-m", "toolkit", "bench", "-m", MODEL, "-p", "8", "-n", "2",
                          "-r", "1000000000", "-t", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/")
    time.sleep(2.0 + 0.13 * trial)
    assert p.poll() is None, p.stderr.read()[-300:]
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        pytest.fail("toolkit bench hung after SIGTERM")
    assert rc == 128 + signal.SIGTERM, (rc, p.stderr.read()[-300:])
