"""Prompt time of `toolkit run --session` against the fraction of the prompt the session holds.

    python bench/session_reuse.py /tmp/b430/bamba-430m.q8_0.gguf --n-prompt 256 --threads 2

For each fraction f: a first run with the first f x N prompt tokens saves a session; a second
run with all N tokens restores it and decodes only the rest.  Prints n_reused, the second
run's prompt_ms, and a from-scratch run's prompt_ms; checks that both generate the same tokens.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(model, ids, threads, session=None):
    cmd = [sys.executable, "-c", "from toolkit.cli.app import main; main()", "run", "-m", model, "--json", "--temp", "0", "-n", "4",
           "-t", str(threads), "--tokens", ",".join(map(str, ids))]
    if session:
        cmd += ["--session", session]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n-prompt", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    a = ap.parse_args()
    ids = [int(x) for x in np.random.default_rng(0).integers(100, 30000, a.n_prompt)]
    scratch = run(a.model, ids, a.threads)
    print(f"scratch: prompt {a.n_prompt} tokens in {scratch['timings']['prompt_ms']:.0f} ms")
    print("fraction  n_reused  decoded  prompt_ms  same_tokens")
    for f in a.fractions:
        with tempfile.TemporaryDirectory() as d:
            sess = os.path.join(d, "s.session")
            k = max(1, int(round(f * a.n_prompt)))
            run(a.model, ids[:k] if k < a.n_prompt else ids, a.threads, sess)
            r = run(a.model, ids, a.threads, sess)
            t = r["timings"]
            print(f"{f:8.2f}  {r['n_reused']:8d}  {t['n_prompt']:7d}  {t['prompt_ms']:9.0f}  {r['tokens'] == scratch['tokens']}")


if __name__ == "__main__":
    main()
