"""Interrupt `toolkit run` at random times, many times; count the outcomes.

The long form of tests/reliability/test_sigterm_decode.py (which runs eight trials in CI): each
run must end with exit 128 + signal, no traceback or crash on stderr, and no temp file left next
to a --session file.  Models alternate between the packaged demo model and bamba-small; runs 2
and 3 of every four use --session; three runs in five send a long prompt (the signal lands in a
prefill).  The acceptance figures of issue 18:

    python tools/signal_trials.py --runs 100 --signal INT
    python tools/signal_trials.py --runs 30 --signal TERM

Run it from a checkout with the package installed (pip install .).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import random
import signal
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from signal_util import DEMO, LARGER, check_trial, one_trial  # noqa: E402  (shared with the test)


def main() -> int:
    ap = argparse.ArgumentParser(description="Interrupt `toolkit run` at random times; count the outcomes.")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--signal", choices=("INT", "TERM"), default="INT")
    ap.add_argument("--min", type=float, default=0.2)
    ap.add_argument("--max", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    sig = getattr(signal, "SIG" + a.signal)
    rng = random.Random(a.seed)
    bad = 0
    for i in range(a.runs):
        model = (DEMO, LARGER)[i % 2]
        with tempfile.TemporaryDirectory() as d:
            session = d if i % 4 >= 2 else None
            delay = rng.uniform(a.min, a.max)
            rc, err, left = one_trial(model, sig, delay, session, long_prompt=i % 5 < 3)
            msg = check_trial(rc, err, left, sig)
        bad += bool(msg)
        print(f"{i:3d} {os.path.basename(model):22s} session={session is not None!s:5s} long={i % 5 < 3!s:5s} "
              f"delay={delay:.2f}s exit={rc} {msg or 'ok'}", flush=True)
    print(f"{a.runs - bad} of {a.runs} clean (exit {128 + sig}, no traceback, nothing left)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
