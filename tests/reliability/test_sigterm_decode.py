"""SIGINT / SIGTERM at a random moment of `toolkit run` or `toolkit bench` end the process with
130 / 143, never with a crash, a hang, a traceback or exit 0, and leave no temp file.

The bug (issue 18): the main thread ran Context.close -> tk_context_free while the decode thread
was still in tk_decode (malloc_consolidate aborts, segfaults, "release unlocked lock"), and a
signal caught inside a finaliser was swallowed (exit 0).  toolkit/runtime/interrupt.py now only
records a signal while the C library works; the decode is aborted and joined at a safe point.

Here eight trials, one per signal x model x session, at random delays (seeded), half of them
with a long prompt (the signal lands in a prefill) and half with a short one (one-token decodes).
The acceptance figures of the issue (100 SIGINT runs, 30 SIGTERM runs, 0.2 to 3 s) come from the
long runs by hand:

    python tools/signal_trials.py --runs 100 --signal INT
    python tools/signal_trials.py --runs 30 --signal TERM
"""
from __future__ import annotations

import itertools
import random
import signal
import subprocess
import sys
import time

import pytest

from signal_util import DEMO, LARGER, ROOT as ROOT_DIR, check_trial, one_trial

pytestmark = [pytest.mark.native, pytest.mark.slow]

# signal x model x session: every combination once; the long prompt on half of them, so each
# signal, model and session kind meets both prompt lengths
TRIALS = list(itertools.product((signal.SIGINT, signal.SIGTERM), ("demo", "bamba-small"), (False, True)))


@pytest.mark.parametrize("sig,model,session", TRIALS,
                         ids=[f"{signal.Signals(s).name}-{m}-{'session' if se else 'nosession'}" for s, m, se in TRIALS])
def test_signal_at_a_random_time_during_run(sig, model, session, tmp_path):
    trial = TRIALS.index((sig, model, session))
    rng = random.Random(1800 + trial)
    long_prompt = (int(sig == signal.SIGTERM) + int(model == "demo") + int(session)) % 2 == 0
    path = DEMO if model == "demo" else LARGER
    rc, err, left = one_trial(path, sig, rng.uniform(0.2, 2.0), str(tmp_path) if session else None,
                              long_prompt=long_prompt)
    assert check_trial(rc, err, left, sig) == "", (sig, model, session, long_prompt)


@pytest.mark.parametrize("trial", range(2))
def test_sigterm_during_bench_exits_143(trial):
    p = subprocess.Popen([sys.executable, "-m", "toolkit", "bench", "-m", LARGER, "-p", "8", "-n", "2",
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


# A signal in the last moments of the process.  The command's work is done; the interpreter's
# shutdown used to follow, which puts the default handlers back: a SIGTERM landing there killed
# the process (status -15, where 143 is due; CI saw it once when a run stopped on a full
# context just as the signal came).  Here the signal comes from an atexit callback, the part of
# that shutdown a test can reach: it used to print a traceback ("Exception ignored in atexit
# callback ... SystemExit: 143") and exit 0.  Now the process ends at once after its cleanup.
_LATE = """
import atexit, os, signal, sys, time
def late():
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.3)
atexit.register(late)
sys.argv = ["toolkit"] + sys.argv[1:]
from toolkit.__main__ import main
main()
"""


@pytest.mark.parametrize("argv", [["--version"], ["info", DEMO]], ids=["version", "info"])
def test_no_interpreter_shutdown_after_the_command(argv):
    r = subprocess.run([sys.executable, "-c", _LATE, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT_DIR)
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr[-400:]
    assert r.returncode == 0, (r.returncode, r.stderr[-300:])
    assert r.stdout.strip(), "the command's output was flushed"


def test_signal_recorded_at_the_end_still_gives_143():
    # SIGTERM sent while the exit status is being settled (inside the deferred block): 143
    code = ("import os, signal, sys\n"
            "sys.argv = ['toolkit', '--version']\n"
            "import toolkit.cli.app\n"
            "app = sys.modules['toolkit.cli.app']\n"
            "orig = app._exit_status\n"
            "def late(rc):\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return orig(rc)\n"
            "app._exit_status = late\n"
            "from toolkit.__main__ import main\n"
            "main()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT_DIR)
    assert r.returncode == 143, (r.returncode, r.stderr[-300:])
    assert "terminated" in r.stderr and "Traceback" not in r.stderr, r.stderr[-300:]
