#!/usr/bin/env python3
"""The lightning attention kernels (toolkit/native/kernels/lightning.c) on one head, one thread:
tokens/s of the token-by-token recurrence against HF's block form, per run length, at each
SIMD level, and the recurrence at each CPU level.  What TK_LIGHTNING_MIN_DEFAULT is set from.

    python bench/lightning_kernels.py [-r 5] [--dims 128,64] [--tokens 1,2,4,...] [--levels avx2,avx512]

Per (level, d, n_tok): tk_lightning_recurrent and tk_lightning_block on the same inputs, -r
samples of each taken in alternation, a sample repeating the call until it lasts >= 20 ms of
the thread's CPU time; printed: the median tokens/s (n_tok x calls / seconds) of each and the
median of the per-pair ratios block / recurrent ("x").  Inputs as the layer gives them: q, k, v
after a SiLU; slope 0.1.  MiniMax-Text-01 has 64 heads of d = 128; the 0.5B bench model
(bench/minimax-0.5b.json) 8 of 128.  The suggested threshold is the shortest run from which
the block form is faster at every longer run measured, for every head dim and level.  Never a
test: speed depends on the machine and its load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from toolkit.binding import ffi, lib

TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512)
LEVELS = {"scalar": lib.TK_CPU_SCALAR, "avx2": lib.TK_CPU_AVX2, "avx512": lib.TK_CPU_AVX512}


def make_head(d: int, n_tok: int, seed: int = 0):
    """A tk_lightning_head over fresh inputs (and the arrays it points into, to keep alive)."""
    rng = np.random.default_rng(seed)

    def silu(x):
        return x / (1 + np.exp(-x))
    arrs = {"q": silu(rng.standard_normal((n_tok, d))), "k": silu(rng.standard_normal((n_tok, d))),
            "v": silu(rng.standard_normal((n_tok, d))), "S": rng.standard_normal((d, d)) * 0.5,
            "o": np.zeros((n_tok, d)), "work": np.zeros(lib.tk_lightning_work_floats(d))}
    arrs = {k: np.ascontiguousarray(a, np.float32) for k, a in arrs.items()}
    h = ffi.new("tk_lightning_head *")
    p = {k: ffi.cast("float *", ffi.from_buffer(a)) for k, a in arrs.items()}
    h.n_tok, h.d, h.slope = n_tok, d, 0.1
    h.q, h.q_stride, h.k, h.k_stride, h.v, h.v_stride = p["q"], d, p["k"], d, p["v"], d
    h.S, h.o, h.o_stride, h.work = p["S"], p["o"], d, p["work"]
    return h, (arrs, p)


def calls_for(fn, h, min_s: float = 0.02) -> int:
    """Calls of fn that take >= min_s of this thread's CPU time (after one warm-up call)."""
    fn(h)
    calls = 1
    while True:
        t0 = time.thread_time()
        for _ in range(calls):
            fn(h)
        if time.thread_time() - t0 >= min_s:
            return calls
        calls *= 2


def sample(fn, h, calls: int) -> float:
    """n_tok x calls / seconds of this thread's CPU time (on a shared machine the time other
    processes hold the core is not counted)."""
    t0 = time.thread_time()
    for _ in range(calls):
        fn(h)
    return h.n_tok * calls / (time.thread_time() - t0)


def paired(h, repeats: int) -> tuple[float, float, float]:
    """Recurrent and block samples in alternation: the median tokens/s of each and the median
    of the per-pair ratios block / recurrent."""
    c_rec, c_blk = calls_for(lib.tk_lightning_recurrent, h), calls_for(lib.tk_lightning_block, h)
    rec, blk = [], []
    for _ in range(repeats):
        rec.append(sample(lib.tk_lightning_recurrent, h, c_rec))
        blk.append(sample(lib.tk_lightning_block, h, c_blk))
    return statistics.median(rec), statistics.median(blk), statistics.median(b / r for r, b in zip(rec, blk))


def crossover(args) -> int:
    """The recurrence against the block form per run length and level; the suggested threshold."""
    print(f"recurrent vs block, tokens/s of one head, 1 thread, median of {args.r}; load {os.getloadavg()[0]:.2f}")
    cols = [(lv, d) for lv in args.levels for d in args.dims]
    print(f"{'n_tok':>6} " + " ".join(f"{f'{lv} d{d} rec':>15} {'block':>9} {'x':>5}" for lv, d in cols))
    faster = {c: [] for c in cols}
    for n in args.tokens:
        cells = []
        for lv, d in cols:
            lib.tk_cpu_set_level(LEVELS[lv])
            h, keep = make_head(d, n)
            rec, blk, ratio = paired(h, args.r)
            faster[(lv, d)].append(ratio > 1.0)
            cells.append(f"{rec:15.0f} {blk:9.0f} {ratio:5.2f}")
        lib.tk_cpu_set_level(lib.tk_cpu_detected())
        print(f"{n:6d} " + " ".join(cells), flush=True)
    thr = 0
    for i, n in enumerate(args.tokens):
        if all(all(f[i:]) for f in faster.values()):
            thr = n
            break
    print(f"suggested threshold (TK_LIGHTNING_MIN_DEFAULT): {thr if thr else 'none: the block form never wins'}")
    return thr


def step_levels(args) -> None:
    """The recurrence (n_tok = 1 and 64 per call) at every CPU level the machine has."""
    levels = [name for name, lv in LEVELS.items() if lv <= lib.tk_cpu_detected()]
    print(f"\nrecurrence per level, tokens/s of one head, 1 thread, median of {args.r}")
    for d in args.dims:
        for n in (1, 64):
            h, keep = make_head(d, n)
            res = {}
            for name in levels:
                lib.tk_cpu_set_level(LEVELS[name])
                calls = calls_for(lib.tk_lightning_recurrent, h)
                res[name] = statistics.median(sample(lib.tk_lightning_recurrent, h, calls) for _ in range(args.r))
            lib.tk_cpu_set_level(lib.tk_cpu_detected())
            line = "  ".join(f"{name} {res[name]:9.0f}" for name in levels)
            ratios = "  ".join(f"{name}/scalar {res[name] / res['scalar']:5.2f}x" for name in levels[1:])
            print(f"d{d} n_tok={n:3d}: {line}  {ratios}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-r", type=int, default=5, help="samples per figure (the median is printed)")
    ap.add_argument("--dims", default="128,64", help="head dims, comma-separated")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="run lengths, comma-separated")
    ap.add_argument("--levels", default="avx2,avx512", help="levels of the crossover table")
    ap.add_argument("--no-steps", action="store_true", help="skip the per-level recurrence table")
    args = ap.parse_args()
    args.dims = [int(x) for x in args.dims.split(",")]
    args.tokens = [int(x) for x in args.tokens.split(",")]
    args.levels = [lv for lv in args.levels.split(",") if LEVELS[lv] <= lib.tk_cpu_detected()]
    crossover(args)
    if not args.no_steps:
        step_levels(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
