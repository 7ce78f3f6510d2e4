"""The RG-LRU kernels alone (kernels/rglru.c), scalar against AVX2, at the bench model's shape.

    python bench/rglru_kernels.py [--tokens 512] [--lru 1280] [--heads 8] [--rounds 5]

One thread.  Per round and level (alternating levels, so a loaded machine's drift falls on both):
the scan of TOKENS tokens over LRU channels, and the two gate mat-muls (blocks of LRU / HEADS) over
the same tokens.  Prints the median microseconds per token of each and the AVX2 / scalar ratio.
Not a test: the figures depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from toolkit.binding import ffi, lib


def _p(a):
    return ffi.cast("float *", ffi.from_buffer(a))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--lru", type=int, default=1280)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    n, lru, nh = a.tokens, a.lru, a.heads
    bw = lru // nh
    rng = np.random.default_rng(0)
    g = rng.standard_normal((n, 2 * lru)).astype(np.float32)
    x = rng.standard_normal((n, lru)).astype(np.float32)
    yb = rng.standard_normal((n, lru)).astype(np.float32)
    neg8sp = (-8 * np.log1p(np.exp(rng.uniform(-7, 1, lru)))).astype(np.float32)
    W = (rng.standard_normal((nh, bw, bw)) * 0.05).astype(np.float32)
    b = rng.standard_normal(lru).astype(np.float32)
    y = np.empty_like(x)
    reset = ffi.new("uint8_t[]", n)
    levels = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2) if lv <= lib.tk_cpu_detected()]
    times = {(lv, k): [] for lv in levels for k in ("scan", "gates")}
    try:
        for _ in range(a.rounds):
            for lv in levels:
                lib.tk_cpu_set_level(lv)
                h = np.zeros(lru, np.float32)
                t0 = time.perf_counter()
                lib.tk_rglru_scan(_p(g), _p(g) + lru, 2 * lru, _p(x), _p(yb), lru, _p(neg8sp), reset, n, 0, lru, _p(h),
                                  _p(y), lru, ffi.NULL)
                t1 = time.perf_counter()
                lib.tk_rglru_gates(_p(x), lru, n, _p(W), _p(b), 0, nh, bw, _p(g), 2 * lru)
                lib.tk_rglru_gates(_p(x), lru, n, _p(W), _p(b), 0, nh, bw, _p(g) + lru, 2 * lru)
                t2 = time.perf_counter()
                times[(lv, "scan")].append((t1 - t0) / n * 1e6)
                times[(lv, "gates")].append((t2 - t1) / n * 1e6)
    finally:
        lib.tk_cpu_set_level(lib.tk_cpu_detected())
    print(f"tokens {n}, lru {lru}, {nh} heads of {bw}, 1 thread, {a.rounds} rounds (median us / token)")
    for k in ("scan", "gates"):
        med = {lv: statistics.median(times[(lv, k)]) for lv in levels}
        line = ", ".join(f"{ffi.string(lib.tk_cpu_level_name(lv)).decode()} {med[lv]:.2f}" for lv in levels)
        ratio = f", scalar / avx2 {med[lib.TK_CPU_SCALAR] / med[lib.TK_CPU_AVX2]:.2f}x" if len(levels) > 1 else ""
        print(f"{k}: {line}{ratio}")


if __name__ == "__main__":
    main()
