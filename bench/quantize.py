#!/usr/bin/env python3
"""Benchmark `toolkit quantize` (wall time, peak RSS), optionally side by side with llama-quantize.

Each run is a fresh process (peak RSS from wait4's rusage, the same figure `/usr/bin/time -v`
prints as "Maximum resident set size"); the page cache is warm after the first run, so each
command runs once untimed first.  With --llama-quantize the same conversions run through
llama.cpp's tool on the same machine, and the outputs are compared byte for byte.

    python bench/quantize.py /tmp/bamba-430m.bf16.gguf --types Q8_0 Q4_K_M --threads 2 \
        [--llama-quantize /path/to/llama-quantize] [--repeat 3]

The bench checkpoint: python tools/make_random_checkpoint.py bench/bamba-430m /tmp/bamba-430m
then `toolkit convert /tmp/bamba-430m /tmp/bamba-430m.bf16.gguf --outtype bf16`.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time


def run(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds user+sys) of one child process; raises on a
    non-zero exit.  CPU time is the fairer figure on a shared, loaded machine."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-2000:]}")
    return wall, ru.ru_maxrss / 1024.0, ru.ru_utime + ru.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="source GGUF (e.g. the bf16 bench checkpoint)")
    ap.add_argument("--types", nargs="+", default=["Q8_0", "Q4_K_M"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--band-mb", type=float, default=None, help="toolkit's --band-mb (default: its default)")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per command (best wall, max RSS reported)")
    ap.add_argument("--llama-quantize", default=None, help="llama-quantize binary for a side-by-side run")
    ap.add_argument("--outdir", default=None, help="where outputs go (default: a temp dir, removed)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args()

    outdir = a.outdir or tempfile.mkdtemp(prefix="bench-quantize-")
    rows = []
    try:
        for t in a.types:
            cmds = {}
            ours = os.path.join(outdir, f"toolkit.{t}.gguf")
            c = [sys.executable, "-m", "toolkit", "quantize", a.input, ours, t, "--threads", str(a.threads), "--json"]
            if a.band_mb:
                c += ["--band-mb", str(a.band_mb)]
            cmds["toolkit"] = c
            theirs = os.path.join(outdir, f"llama.{t}.gguf")
            if a.llama_quantize:
                cmds["llama-quantize"] = [a.llama_quantize, a.input, theirs, t, str(a.threads)]
            res = {}
            for who, cmd in cmds.items():
                run(cmd)  # warm the page cache and the binary
                walls, cpus, rss = [], [], 0.0
                for _ in range(a.repeat):
                    w, r, c = run(cmd)
                    walls.append(w)
                    cpus.append(c)
                    rss = max(rss, r)
                res[who] = (min(walls), rss, min(cpus))
            same = None
            if a.llama_quantize:
                same = filecmp.cmp(ours, theirs, shallow=False)
            rows.append({"type": t, "threads": a.threads,
                         **{f"{who}_wall_s": round(v[0], 2) for who, v in res.items()},
                         **{f"{who}_peak_rss_mb": round(v[1], 1) for who, v in res.items()},
                         **{f"{who}_cpu_s": round(v[2], 2) for who, v in res.items()},
                         "identical_to_llama": same, "out_mb": round(os.path.getsize(ours) / 2**20, 1)})
            for p in (ours, theirs):
                if not a.outdir and os.path.exists(p):
                    os.unlink(p)
    finally:
        if not a.outdir:
            try:
                os.rmdir(outdir)
            except OSError:
                pass
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"input: {a.input} ({os.path.getsize(a.input) / 2**20:.0f} MiB), threads {a.threads}, "
              f"best of {a.repeat}, load average {os.getloadavg()[0]:.1f}")
        for r in rows:
            line = (f"{r['type']:>7}: toolkit {r['toolkit_wall_s']:6.2f} s wall {r['toolkit_cpu_s']:6.2f} s cpu "
                    f"{r['toolkit_peak_rss_mb']:6.0f} MiB")
            if "llama-quantize_wall_s" in r:
                line += (f" | llama-quantize {r['llama-quantize_wall_s']:6.2f} s wall {r['llama-quantize_cpu_s']:6.2f} s cpu "
                         f"{r['llama-quantize_peak_rss_mb']:6.0f} MiB"
                         f" | identical: {r['identical_to_llama']}")
            print(line + f" | out {r['out_mb']} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
