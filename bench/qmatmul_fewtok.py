"""Few-token mat-muls with quantized weights: the cost of tk_mat_mul for n_tok = T tokens
against one token (a speculative verify call, several serve slots or sequences decoding
together run every mat-mul on 2..16 tokens).

    python bench/qmatmul_fewtok.py --types Q8_0 Q4_K Q6_K --tokens 1 2 3 4 5 8 9 16 -K 2048 -M 16384

Random weights (M rows x K, quantized by the package's own quantizer) and activations; one
thread (tk_mat_mul runs on the calling thread); the minimum over --repeat calls.  Prints per
type and T: ms per call, ms per token, GB/s of weights read (the weight bytes over the time
of a call), and the ratio of the call's time to the T = 1 call's.  To compare two builds,
run it alternately against each (swap the built toolkit/_native*.so, or run from outside
the checkouts with PYTHONPATH set to each: the current directory comes first on sys.path).
On a shared machine --clock cpu leaves out the time spent waiting for a core.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", nargs="+", default=["Q8_0", "Q4_K", "Q6_K"], help="ggml type names [default: Q8_0 Q4_K Q6_K]")
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 3, 4, 5, 8, 9, 16],
                    help="token counts T per call [default: 1 2 3 4 5 8 9 16]")
    ap.add_argument("-K", type=int, default=2048, help="row length (multiple of 256) [default: 2048]")
    ap.add_argument("-M", type=int, default=16384, help="rows [default: 16384]")
    ap.add_argument("--repeat", type=int, default=7, help="calls per T; the minimum is printed [default: 7]")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall: time.perf_counter; cpu: the thread's CPU time (time.thread_time), which "
                         "leaves out the time the thread waits for a core on a loaded machine [default: wall]")
    a = ap.parse_args()
    from toolkit.binding import ffi, lib

    clock = time.perf_counter if a.clock == "wall" else time.thread_time
    rng = np.random.default_rng(0)
    w = rng.standard_normal((a.M, a.K), dtype=np.float32)
    fp = lambda arr: ffi.cast("float *", ffi.from_buffer(arr))  # noqa: E731
    types = []
    for name in a.types:
        ty = _type_number(name)
        if ty is None:
            ap.error(f"--types: unknown ggml type {name!r}")
        if a.K % _block(ty)[0] or a.K <= 0 or a.M <= 0:
            ap.error(f"-K {a.K} / -M {a.M}: K must be a positive multiple of the {name} block, M positive")
        types.append((name, ty))
    for name, ty in types:
        blck, nbytes = _block(ty)
        raw = np.zeros(a.M * a.K // blck * nbytes, np.uint8)
        if lib.tk_quantize_rows(ty, fp(w), ffi.from_buffer(raw), a.M, a.K, 2) != 0:
            raise SystemExit(f"{name}: quantize failed")
        print(f"{name}: M {a.M} x K {a.K}, {raw.nbytes / 2**20:.1f} MiB")
        t1 = None
        for T in a.tokens:
            x = rng.standard_normal((T, a.K), dtype=np.float32)
            y = np.zeros((T, a.M), np.float32)
            best = float("inf")
            for _ in range(a.repeat):
                t = clock()
                lib.tk_mat_mul(ty, ffi.from_buffer(raw), a.K, a.M, fp(x), T, fp(y))
                best = min(best, clock() - t)
            t1 = best if T == 1 or t1 is None else t1
            print(f"  T={T:<3d} {best * 1e3:9.3f} ms  {best * 1e3 / T:7.3f} ms/tok  "
                  f"{raw.nbytes / best / 1e9:5.1f} GB/s  x{best / t1:5.2f}", flush=True)


def _type_number(name: str) -> int | None:
    import gguf

    try:
        return int(gguf.GGMLQuantizationType[name])
    except KeyError:
        return None


def _block(ty: int) -> tuple[int, int]:
    import gguf

    return gguf.quants.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ty)]


if __name__ == "__main__":
    main()
