#!/usr/bin/env python3
"""The gated delta rule kernels (toolkit/native/kernels/gdn.c) on one value head, one thread:
tokens/s of the token-by-token recurrence against the chunked WY/UT form, per run length,
and the recurrent step at each CPU level.  What TK_GDN_MIN_DEFAULT (gdn.c) is set from;
with --kda, the same for Kimi Delta Attention heads (per-channel decay, tk_gdn_head.gk) and
TK_KDA_MIN_DEFAULT.

    python bench/gdn_kernels.py [-r 5] [--dims 128x128,64x64] [--tokens 1,2,4,...]
                                [--kda] [--levels avx2,avx512]

Per (Dk x Dv, n_tok): tk_gdn_recurrent and tk_gdn_run with the threshold at 1 (always
chunked) on the same inputs, -r samples of each taken in alternation, a sample repeating
the call until it lasts >= 20 ms of the thread's CPU time; printed: the median tokens/s
(n_tok x calls / seconds) of each and the median of the per-pair ratios chunked /
recurrent ("x").  Inputs as the GDN layer gives them: q, k l2-normed, g in [-3, 0], beta in (0, 1).
The 0.5B Qwen3.5 bench model has 16 value heads of Dk = Dv = 128; Kimi-Linear's KDA heads
are 128 x 128 too.  --kda: g per channel in [-3, 0] (gk), KDA's threshold; --levels: the
crossover at each of these kernel levels in turn (default: the level in force).  The suggested threshold
is the shortest run from which the chunked form is faster at every longer run measured, for
every head shape.  Never a test: speed depends on the machine and its load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from toolkit.binding import ffi, lib

TOKENS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512)


def make_head(dk: int, dv: int, n_tok: int, seed: int = 0, kda: bool = False):
    """A tk_gdn_head over fresh inputs (and the arrays it points into, to keep alive); kda:
    a per-channel decay gk [n_tok, dk] and KDA's workspace."""
    rng = np.random.default_rng(seed)

    def l2(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True)
    arrs = {
        "q": l2(rng.standard_normal((n_tok, dk))) / np.sqrt(dk), "k": l2(rng.standard_normal((n_tok, dk))),
        "v": rng.standard_normal((n_tok, dv)), "g": rng.uniform(-3.0, 0.0, n_tok),
        "beta": rng.uniform(0.01, 0.99, n_tok), "S": rng.standard_normal((dv, dk)) * 0.5,
        "o": np.zeros((n_tok, dv)),
        "work": np.zeros((lib.tk_kda_work_floats if kda else lib.tk_gdn_work_floats)(dk, dv)),
        "gk": rng.uniform(-3.0, 0.0, (n_tok, dk)),
    }
    arrs = {k: np.ascontiguousarray(a, np.float32) for k, a in arrs.items()}
    h = ffi.new("tk_gdn_head *")
    p = {k: ffi.cast("float *", ffi.from_buffer(a)) for k, a in arrs.items()}
    h.n_tok, h.dk, h.dv = n_tok, dk, dv
    h.q, h.q_stride, h.k, h.k_stride, h.v, h.v_stride = p["q"], dk, p["k"], dk, p["v"], dv
    h.g, h.beta, h.gb_stride = p["g"], p["beta"], 1
    h.S, h.o, h.o_stride, h.work = p["S"], p["o"], dv, p["work"]
    if kda:
        h.gk, h.gk_stride = p["gk"], dk
    return h, (arrs, p)


def calls_for(fn, h, min_s: float = 0.02) -> int:
    """Calls of fn that take >= min_s of this thread's CPU time (after one warm-up call)."""
    fn(h)                                            # warm-up (caches, page faults)
    calls = 1
    while True:
        t0 = time.thread_time()
        for _ in range(calls):
            fn(h)
        if time.thread_time() - t0 >= min_s:
            return calls
        calls *= 2


def sample(fn, h, calls: int) -> float:
    """n_tok x calls / seconds of this thread's CPU time (time.thread_time: on a shared
    machine, the time other processes hold the core is not counted)."""
    t0 = time.thread_time()
    for _ in range(calls):
        fn(h)
    return h.n_tok * calls / (time.thread_time() - t0)


def tokens_per_s(fn, h, repeats: int) -> float:
    """Median over `repeats` samples of tokens/s, each sample >= 20 ms of CPU time."""
    calls = calls_for(fn, h)
    return statistics.median(sample(fn, h, calls) for _ in range(repeats))


def paired(h, repeats: int, kda: bool = False) -> tuple[float, float, float]:
    """Recurrent and chunked samples taken in alternation (the same machine state for both):
    the median tokens/s of each and the median of the per-pair ratios chunked / recurrent."""
    set_threshold = lib.tk_kda_set_threshold if kda else lib.tk_gdn_set_threshold

    def chunked(hh):
        set_threshold(1)
        lib.tk_gdn_run(hh)
    c_rec, c_chk = calls_for(lib.tk_gdn_recurrent, h), calls_for(chunked, h)
    rec, chk = [], []
    for _ in range(repeats):
        rec.append(sample(lib.tk_gdn_recurrent, h, c_rec))
        chk.append(sample(chunked, h, c_chk))
    set_threshold(-1)
    return statistics.median(rec), statistics.median(chk), statistics.median(c / r for r, c in zip(rec, chk))


def crossover(args, dims) -> int:
    """The recurrence against the chunked form per run length; returns the suggested threshold."""
    level = ffi.string(lib.tk_cpu_level_name(lib.tk_cpu_level())).decode()
    print(f"{'KDA' if args.kda else 'GDN'} recurrent vs chunked, tokens/s of one head, 1 thread, level {level}, "
          f"median of {args.r}; load {os.getloadavg()[0]:.2f}")
    print(f"{'n_tok':>6} " + " ".join(f"{f'{dk}x{dv} rec':>13} {'chunked':>10} {'x':>5}" for dk, dv in dims))
    faster = {d: [] for d in dims}
    for n in args.tokens:
        cells = []
        for dk, dv in dims:
            h, keep = make_head(dk, dv, n, kda=args.kda)
            rec, chk, ratio = paired(h, args.r, args.kda)
            faster[(dk, dv)].append(ratio > 1.0)
            cells.append(f"{rec:13.0f} {chk:10.0f} {ratio:5.2f}")
        print(f"{n:6d} " + " ".join(cells))
    # the shortest run from which every longer one measured is faster chunked, for all shapes
    thr = 0
    for i, n in enumerate(args.tokens):
        if all(all(f[i:]) for f in faster.values()):
            thr = n
            break
    name = "TK_KDA_MIN_DEFAULT" if args.kda else "TK_GDN_MIN_DEFAULT"
    print(f"suggested threshold ({name}) at {level}: {thr if thr else 'none: chunked never wins'}")
    return thr


def step_levels(args, dims) -> None:
    """The recurrent step (n_tok = 1 and 64 per call) at every CPU level the machine has."""
    top = lib.TK_CPU_AVX512 if args.kda else lib.TK_CPU_AVX2       # GDN's recurrence has no AVX-512 form
    levels = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2, lib.TK_CPU_AVX512) if lv <= min(top, lib.tk_cpu_detected())]
    print(f"\nrecurrent step per level, tokens/s of one head, 1 thread, median of {args.r}")
    for dk, dv in dims:
        for n in (1, 64):
            h, keep = make_head(dk, dv, n, kda=args.kda)
            res = {}
            for lv in levels:
                lib.tk_cpu_set_level(lv)
                res[lv] = tokens_per_s(lib.tk_gdn_recurrent, h, args.r)
            lib.tk_cpu_set_level(lib.tk_cpu_detected())
            line = "  ".join(f"{ffi.string(lib.tk_cpu_level_name(lv)).decode()} {res[lv]:9.0f}" for lv in levels)
            ratio = "".join(f"  {ffi.string(lib.tk_cpu_level_name(lv)).decode()}/scalar "
                            f"{res[lv] / res[lib.TK_CPU_SCALAR]:5.2f}x" for lv in levels[1:])
            print(f"{dk}x{dv} n_tok={n:3d}: {line}{ratio}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-r", type=int, default=5, help="samples per figure (the median is printed)")
    ap.add_argument("--dims", default="128x128,64x64", help="head shapes DkxDv, comma-separated")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="run lengths, comma-separated")
    ap.add_argument("--kda", action="store_true", help="KDA heads (per-channel decay) instead of GDN")
    ap.add_argument("--levels", default="", help="kernel levels for the crossover, e.g. avx2,avx512 "
                    "(default: the level in force)")
    ap.add_argument("--no-steps", action="store_true", help="skip the recurrent step per level")
    args = ap.parse_args()
    dims = [tuple(int(x) for x in d.split("x")) for d in args.dims.split(",")]
    args.tokens = [int(x) for x in args.tokens.split(",")]
    names = {ffi.string(lib.tk_cpu_level_name(lv)).decode(): lv for lv in range(4)}
    for name in [x for x in args.levels.split(",") if x] or [None]:
        if name is not None and lib.tk_cpu_set_level(names[name]) != names[name]:
            print(f"level {name}: not on this machine")
            continue
        crossover(args, dims)
    lib.tk_cpu_set_level(lib.tk_cpu_detected())
    if not args.no_steps:
        step_levels(args, dims)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
