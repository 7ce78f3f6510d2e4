#!/usr/bin/env python3
"""Speed, side by side: `toolkit bench` and llama.cpp's llama-bench on the same GGUF files,
same threads, alternating run by run so that both see the same machine load.

    python bench/run.py MODEL.gguf [MODEL.gguf ...] [-p 512] [-n 128] [-d 0,4096] [-r 3] [-t 2]
        [-ctk f16 -ctv f16] [--llama-bench PATH] [--llama-args '--poll 0'] [--json OUT.json]
    python bench/run.py --ssd          # Mamba-2 scan: recurrence vs chunked SSD per run length
    python bench/run.py --bandwidth    # plain read bandwidth (numpy max over 1 GiB, 1 and -t threads)

For each model, each depth (-d, llama-bench's n_depth: tokens put in the memory before the
timed part; passed to both sides) and each test (ppP, tgN) it runs, R times, one unmeasured warm-up and then
toolkit and llama-bench (order swapped every round), each with `-r 1 --no-warmup`, and
prints the mean t/s of each, their sample spread and the ratio toolkit / llama.cpp.  The
load average before and after is printed too: on a shared machine only the ratio of runs
taken side by side means something.

Generation is bounded by memory traffic: for tgN it also prints the bytes read per token
(every weight tensor except the token embedding table, of which one row is read, plus the
recurrent state and KV cache, read and written) and the GB/s that implies.

toolkit runs with its default, the weights re-laid where that wins (TOOLKIT_REPACK=auto), unless
--no-repack is given (TOOLKIT_REPACK=0) or TOOLKIT_REPACK is already set: llama-bench re-lays its
weights at load by default too (its CPU_REPACK buffer), so that is the like-for-like comparison.

llama-bench is looked for at --llama-bench, $LLAMA_BENCH, /tmp/lcpp/build/bin/llama-bench
and on PATH; without it only toolkit's figures are printed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def find_llama_bench(arg: str | None) -> str | None:
    for cand in (arg, os.environ.get("LLAMA_BENCH"), "/tmp/lcpp/build/bin/llama-bench", shutil.which("llama-bench")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


# -d and the cache types, for both sides (set by main)
DEPTH_ARGS: dict = {"d": 0, "ctk": None, "ctv": None}


def _common_args() -> list[str]:
    out = ["-d", str(DEPTH_ARGS["d"])] if DEPTH_ARGS["d"] else []
    for flag in ("ctk", "ctv"):
        if DEPTH_ARGS[flag]:
            out += [f"-{flag}", DEPTH_ARGS[flag]]
    return out


def run_toolkit(model: str, p: int, n: int, threads: int, env: dict | None = None) -> float:
    cmd = [sys.executable, "-m", "toolkit", "bench", "-m", model, "-p", str(p), "-n", str(n), "-r", "1",
           "-t", str(threads), "--no-warmup", "--json", *_common_args()]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd="/", env=env)
    if r.returncode != 0:
        raise SystemExit(f"toolkit bench failed: {r.stderr.strip()}")
    return float(json.loads(r.stdout)[0]["avg_ts"])


LLAMA_EXTRA: list[str] = []


def run_llama(exe: str, model: str, p: int, n: int, threads: int) -> float:
    cmd = [exe, "-m", model, "-p", str(p), "-n", str(n), "-r", "1", "-t", str(threads), "--no-warmup", "-o", "json",
           *_common_args(), *LLAMA_EXTRA]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"llama-bench failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    rows = json.loads(r.stdout)
    return float(rows[0]["avg_ts"])


def bytes_per_token(model: str) -> int:
    """Weight bytes a generated token reads: every tensor but the embedding table (one row)."""
    from toolkit.gguf_io import GGUFFile
    f = GGUFFile(model)
    total = 0
    for t in f:
        if t.name == "token_embd.weight":
            total += t.nbytes // max(1, t.shape[1] if len(t.shape) > 1 else 1)
        else:
            total += t.nbytes
    return total


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "?"


def mean_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def side_by_side(args) -> int:
    exe = find_llama_bench(args.llama_bench)
    args.models = [os.path.abspath(m) for m in args.models]
    tests = [(p, 0, d) for d in args.d for p in args.p if p > 0] + [(0, n, d) for d in args.d for n in args.n if n > 0]
    results = []
    print(f"load average at start: {loadavg()}  (nproc {os.cpu_count()}); threads {args.t}; llama-bench: {exe or 'not found'}")
    for model in args.models:
        bpt = bytes_per_token(model)
        for p, n, d in tests:
            name = (f"pp{p}" if p else f"tg{n}") + (f"@d{d}" if d else "")
            ours, theirs, base = [], [], []
            # warm-up: page the weights in for both (at depth 0: a fill is long)
            DEPTH_ARGS["d"] = 0
            run_toolkit(model, min(p, 32) if p else 0, min(n, 4) if n else 0, args.t)
            if exe:
                run_llama(exe, model, min(p, 32) if p else 0, min(n, 4) if n else 0, args.t)
            DEPTH_ARGS["d"] = d
            for k in range(args.r):
                # --baseline-env: a third runner, toolkit with that environment (before / after)
                order = (0, 1, 2) if k % 2 == 0 else (2, 1, 0)
                for who in order:
                    if who == 0:
                        ours.append(run_toolkit(model, p, n, args.t))
                    elif who == 1 and exe:
                        theirs.append(run_llama(exe, model, p, n, args.t))
                    elif who == 2 and args.baseline_env:
                        base.append(run_toolkit(model, p, n, args.t, env=dict(os.environ, **args.baseline_env)))
            mo, so = mean_sd(ours)
            row = {"model": os.path.basename(model), "test": name, "n_depth": d, "threads": args.t, "toolkit_ts": mo, "toolkit_sd": so,
                   "toolkit_samples": ours, "load_after": loadavg()}
            line = f"{os.path.basename(model):32s} {name:>12s}  toolkit {mo:8.2f} ± {so:6.2f}"
            if theirs:
                ml, sl = mean_sd(theirs)
                row.update(llama_ts=ml, llama_sd=sl, llama_samples=theirs, ratio=mo / ml)
                line += f"   llama.cpp {ml:8.2f} ± {sl:6.2f}   ratio {mo / ml:5.2f}x"
            if base:
                mb, sb = mean_sd(base)
                row.update(baseline_ts=mb, baseline_sd=sb, baseline_samples=base, speedup=mo / mb)
                line += f"   baseline {mb:8.2f} ± {sb:6.2f} (x{mo / mb:4.2f})"
            if n:
                row.update(bytes_per_token=bpt, toolkit_gbs=bpt * mo / 1e9)
                line += f"   {bpt / 2**20:.0f} MiB/token -> {bpt * mo / 1e9:.2f} GB/s"
                if theirs:
                    row["llama_gbs"] = bpt * row["llama_ts"] / 1e9
            line += f"   [load {loadavg()}]"
            print(line, flush=True)
            results.append(row)
    print(f"load average at end: {loadavg()}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


def ssd_crossover(args) -> int:
    """Per-token time of the Mamba-2 scan, recurrence vs SSD, Bamba-430m shapes, 1 thread."""
    import numpy as np
    from toolkit.binding import check, ffi, lib

    H, P, N, G = 32, 64, 128, 1
    rng = np.random.default_rng(0)

    def fp(a):
        return ffi.cast("float *", ffi.from_buffer(a))

    print(f"Mamba-2 scan, H={H} P={P} N={N} G={G}, 1 thread; load {loadavg()}")
    for T in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        xBC = rng.standard_normal((T, H * P + 2 * G * N)).astype(np.float32)
        dt = np.log1p(np.exp(rng.standard_normal((T, H)) - 3.0)).astype(np.float32)
        A = (-np.exp(rng.uniform(0, np.log(16), H))).astype(np.float32)
        D = rng.standard_normal(H).astype(np.float32)
        y = np.empty((T, H * P), np.float32)
        res = []
        for thr in (0, 1):
            lib.tk_ssd_set_threshold(thr)
            best = float("inf")
            for _ in range(args.r):
                s = np.zeros((H, P, N), np.float32)
                t0 = time.perf_counter()
                check(lib.tk_ssm_mamba2_seq(fp(s), fp(xBC), xBC.shape[1], fp(dt), H, fp(A), fp(D), T, H, P, N, G, fp(y), H * P, 1))
                best = min(best, time.perf_counter() - t0)
            res.append(best / T * 1e6)
        print(f"T={T:4d}  recurrence {res[0]:8.1f} us/token   SSD {res[1]:8.1f} us/token   SSD speed-up {res[0] / res[1]:5.2f}x")
    lib.tk_ssd_set_threshold(-1)
    return 0


def bandwidth(args) -> int:
    """Plain read bandwidth: numpy max-reductions over 1 GiB, on 1 thread and on args.t
    threads at once (each over its own slice; numpy releases the GIL in the reduction).
    A max is a SIMD compare per load, so it reads at the memory's pace: np.sum's pairwise
    float adds measured 15.0 / 24.8 GB/s (1 / 2 threads) where max gave 19.9 / 31.4."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    a = np.ones(2**28, np.float32)          # 1 GiB
    reps = max(3, args.r)
    for nt in sorted({1, max(1, args.t)}):
        parts = np.array_split(a, nt)
        best = float("inf")
        with ThreadPoolExecutor(nt) as ex:
            for _ in range(reps):
                t0 = time.perf_counter()
                list(ex.map(np.max, parts))
                best = min(best, time.perf_counter() - t0)
        print(f"read bandwidth (numpy max over 1 GiB, {nt} thread{'s' if nt > 1 else ''}, best of {reps}): "
              f"{a.nbytes / best / 1e9:.2f} GB/s; load {loadavg()}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("-p", type=lambda s: [int(x) for x in s.split(",")], default=[512])
    ap.add_argument("-n", type=lambda s: [int(x) for x in s.split(",")], default=[128])
    ap.add_argument("-d", type=lambda s: [int(x) for x in s.split(",")], default=[0],
                    help="depths (llama-bench's -d, comma-separated), passed to both sides")
    ap.add_argument("-ctk", help="KV cache type of K (f32, f16, bf16, q8_0, q4_0), passed to both sides (llama.cpp's default: f16, ours: f32)")
    ap.add_argument("-ctv", help="KV cache type of V, passed to both sides")
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--llama-bench")
    ap.add_argument("--baseline-env", action="append", default=[], metavar="NAME=VALUE",
                    help="also run toolkit with this environment (repeatable), alternating with the others: "
                         "before/after figures, e.g. --baseline-env TOOLKIT_REPACK=0 with TOOLKIT_REPACK=1 set")
    ap.add_argument("--llama-args", default="", help="extra llama-bench flags, e.g. '--poll 0'")
    ap.add_argument("--no-repack", action="store_true",
                    help="run toolkit on the mapped file as it is (TOOLKIT_REPACK=0; default: toolkit's, "
                         "re-laying the types that win, or TOOLKIT_REPACK when set)")
    ap.add_argument("--json")
    ap.add_argument("--ssd", action="store_true")
    ap.add_argument("--bandwidth", action="store_true")
    args = ap.parse_args()
    LLAMA_EXTRA.extend(args.llama_args.split())
    DEPTH_ARGS.update(ctk=args.ctk, ctv=args.ctv)
    if any("=" not in e for e in args.baseline_env):
        ap.error("--baseline-env takes NAME=VALUE")
    args.baseline_env = dict(e.split("=", 1) for e in args.baseline_env)
    if args.no_repack:
        os.environ["TOOLKIT_REPACK"] = "0"
    if args.ssd:
        return ssd_crossover(args)
    if args.bandwidth:
        return bandwidth(args)
    if not args.models:
        ap.error("give at least one GGUF model (or --ssd / --bandwidth)")
    return side_by_side(args)


if __name__ == "__main__":
    sys.exit(main())
