"""Mat-mul cost for a few tokens: one tk_mat_mul call (one thread, the kernel level in force)
on an M x K weight matrix of any ggml type toolkit computes with (F32, F16, BF16, Q8_0, the
k-quants, ...), for n_tok = T tokens.

    python bench/matmul_fewtok.py --types BF16 F16 F32 --tokens 1 2 3 4 5 8 9 16 -K 2048 -M 16384 --repeat 7
    python bench/matmul_fewtok.py --types Q8_0 Q4_K Q6_K --cpu-time

The matrix (64 MiB as BF16, 34 MiB as Q8_0 at the default size) is larger than the caches, so
a call that reads each weight once costs about what one token does.  Prints, per type and T, the fastest
of --repeat calls: ms per call, ms per token, GB/s of weights read (one pass) and the call's
cost over the T = 1 call's.  TOOLKIT_CPU=scalar|avx2 caps the kernel level as elsewhere.
Not a test: timings depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import time

import gguf
import numpy as np



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", nargs="+", default=["BF16", "F16", "F32"], help="weight types (ggml names)")
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 3, 4, 5, 8, 9, 16], help="n_tok values (T)")
    ap.add_argument("-K", type=int, default=2048, help="row length (elements) [default: 2048]")
    ap.add_argument("-M", type=int, default=16384, help="rows [default: 16384]")
    ap.add_argument("--repeat", type=int, default=7, help="calls per cell; the fastest is shown [default: 7]")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time each call on this thread's CPU clock (time.thread_time) instead of the wall clock: "
                         "leaves out the time the thread was descheduled on a shared machine")
    a = ap.parse_args()
    if a.K <= 0 or a.M <= 0 or a.repeat <= 0 or min(a.tokens) <= 0:
        ap.error("-K, -M, --repeat and --tokens must be positive")
    from toolkit.binding import ffi, lib
    for name in a.types:
        if name not in gguf.GGMLQuantizationType.__members__:
            ap.error(f"--types: unknown ggml type {name!r}")
        blck = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]][0]
        if a.K % blck:
            ap.error(f"-K {a.K}: not a multiple of the {name} block ({blck})")

    rng = np.random.default_rng(0)
    w = rng.standard_normal((a.M, a.K), dtype=np.float32)
    level = ffi.string(lib.tk_cpu_level_name(lib.tk_cpu_level())).decode()
    clock = time.thread_time if a.cpu_time else time.perf_counter
    print(f"M={a.M} K={a.K}, 1 thread, level {level}, fastest of {a.repeat} ({'CPU' if a.cpu_time else 'wall'} time)")
    print(f"{'type':5s} {'T':>3s} {'ms':>8s} {'ms/tok':>8s} {'GB/s':>6s} {'x T=1':>6s}")
    fp = lambda arr: ffi.cast("float *", ffi.from_buffer(arr))  # noqa: E731
    for name in a.types:
        qtype = int(gguf.GGMLQuantizationType[name])
        raw = np.empty((a.M, lib.tk_quant_row_size(qtype, a.K)), np.uint8)
        if lib.tk_quantize_rows(qtype, fp(w), ffi.from_buffer(raw), a.M, a.K, 1) != 0:
            raise SystemExit(f"tk_quantize_rows failed for {name}")
        one = None
        for T in a.tokens:
            x = rng.standard_normal((T, a.K), dtype=np.float32)
            y = np.zeros((T, a.M), np.float32)
            best = float("inf")
            for _ in range(a.repeat):
                t0 = clock()
                lib.tk_mat_mul(qtype, ffi.from_buffer(raw), a.K, a.M, fp(x), T, fp(y))
                best = min(best, clock() - t0)
            one = best if T == 1 else one
            ratio = f"{best / one:6.2f}" if one else "     -"
            print(f"{name:5s} {T:3d} {best * 1e3:8.2f} {best * 1e3 / T:8.3f} {raw.nbytes / best / 1e9:6.1f} {ratio}", flush=True)


if __name__ == "__main__":
    main()
