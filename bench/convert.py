#!/usr/bin/env python3
"""Wall time and peak RSS of `toolkit convert` on a checkpoint (default: the 417M Bamba bench).

usage: python bench/convert.py [HF_DIR] [--outtype bf16] [--repeat 3] [--out DIR] [--json]

Make the bench checkpoint once (numpy only, ~13 s, 796 MiB; not in the repository):
    python tools/make_random_checkpoint.py bench/bamba-430m /tmp/bamba-430m

Each run is a fresh `python -m toolkit convert` subprocess; peak RSS is that child's
ru_maxrss (what /usr/bin/time reports), wall time is measured around the subprocess.
The output file is deleted after each run.  Reference on the machine the fixtures were
made on (2 cores): llama.cpp's convert_hf_to_gguf --outtype bf16 took 9.9 s / 607 MB.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run_once(hf_dir: str, out: str, outtype: str) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one conversion in a child process."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # child: exec the CLI so ru_maxrss is the converter's alone
        try:
            os.execv(sys.executable, [sys.executable, "-m", "toolkit", "convert", hf_dir, out, "--outtype", outtype, "--json"])
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"convert failed with exit code {os.waitstatus_to_exitcode(status)}")
    return wall, ru.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hf_dir", nargs="?", default="/tmp/bamba-430m")
    ap.add_argument("--outtype", default="bf16")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="directory for the output (default: next to nothing, a temp dir)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.hf_dir, "config.json")):
        raise SystemExit(f"{a.hf_dir}: no checkpoint; make it with make_random_checkpoint.py (see --help)")
    walls, rss = [], []
    with tempfile.TemporaryDirectory(dir=a.out) as d:
        out = os.path.join(d, "bench.gguf")
        for _ in range(a.repeat):
            with open(os.devnull, "w") as devnull:  # keep the child's JSON off our stdout
                saved = os.dup(1)
                os.dup2(devnull.fileno(), 1)
                try:
                    w, r = run_once(a.hf_dir, out, a.outtype)
                finally:
                    os.dup2(saved, 1)
                    os.close(saved)
            size = os.path.getsize(out)
            os.unlink(out)
            walls.append(w)
            rss.append(r)
    res = {"hf_dir": a.hf_dir, "outtype": a.outtype, "runs": a.repeat, "out_bytes": size,
           "wall_s": {"min": min(walls), "median": statistics.median(walls), "max": max(walls)},
           "peak_rss_mb": {"min": min(rss) / 1e6, "max": max(rss) / 1e6}}
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"convert {a.hf_dir} --outtype {a.outtype}: {size / 2**20:.1f} MiB out, {a.repeat} runs, "
              f"wall min {min(walls):.2f} s / median {statistics.median(walls):.2f} s / max {max(walls):.2f} s, "
              f"peak RSS {max(rss) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
