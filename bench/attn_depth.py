#!/usr/bin/env python3
"""The blocked attention kernel against the reference one (tk_attn_set_reference), paired, in
one process: ppP and tgN at each depth, the two kernels alternating run by run (order swapped
every round) on the same model, context and machine load.

    python bench/attn_depth.py MODEL.gguf [-p 4096] [-n 32] [-d 0,4096,8192] [-r 2] [-t 2] [-ub 512]

Each depth D is filled once (D random tokens, blocked kernel, untimed) and its state saved;
every timed run loads it (as llama-bench's -d does) and then decodes the P prompt tokens in
one call (ubatches of -ub) or the N tokens one at a time.  Prints tokens/s of each kernel and
the ratio blocked / reference.  Weights are repacked (TOOLKIT_REPACK=1) unless set otherwise.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",")]   # noqa: E731
    ap.add_argument("model")
    ap.add_argument("-p", type=ints, default=[4096])
    ap.add_argument("-n", type=ints, default=[32])
    ap.add_argument("-d", type=ints, default=[0, 4096, 8192])
    ap.add_argument("-r", type=int, default=2)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-ub", type=int, default=512)
    args = ap.parse_args()
    os.environ.setdefault("TOOLKIT_REPACK", "1")
    import numpy as np
    from toolkit.binding import lib
    from toolkit.runtime import Context, Model

    rng = np.random.default_rng(1234)
    m = Model(args.model, n_threads=args.t)
    n_ctx = max(args.d) + max(args.p + args.n) + 1
    with open("/proc/loadavg") as fh:
        print(f"{os.path.basename(args.model)}: -t {args.t} -ub {args.ub}, load {fh.read().split()[:3]}", flush=True)
    with Context(m, n_ctx=n_ctx, n_ubatch=args.ub, n_threads=args.t) as ctx:
        for d in args.d:
            ctx.memory.clear()
            lib.tk_attn_set_reference(0)
            fill = rng.integers(0, m.n_vocab, d).astype(np.int32)
            t0 = time.perf_counter()
            if d:
                ctx.decode(fill, logits="last")
            state = ctx.state_bytes(0) if d else None
            print(f"  depth {d}: filled in {time.perf_counter() - t0:.1f} s", flush=True)
            for p, n in [(p, 0) for p in args.p if p] + [(0, n) for n in args.n if n]:
                toks = rng.integers(0, m.n_vocab, max(p, n)).astype(np.int32)
                ts = {0: [], 1: []}
                for k in range(args.r):
                    for ref in ((0, 1) if k % 2 == 0 else (1, 0)):
                        lib.tk_attn_set_reference(ref)
                        ctx.memory.clear()
                        if state:
                            ctx.load_state(state, 0)
                        t0 = time.perf_counter()
                        if p:
                            ctx.decode(toks, logits="last")
                        for i in range(n):
                            ctx.decode(toks[i:i + 1], logits="last")
                        ts[ref].append((p or n) / (time.perf_counter() - t0))
                name = (f"pp{p}" if p else f"tg{n}") + (f" @ d{d}" if d else "")
                b, r = statistics.fmean(ts[0]), statistics.fmean(ts[1])
                runs = " / ".join(f"{x:.1f}" for x in ts[0]) + " vs " + " / ".join(f"{x:.1f}" for x in ts[1])
                print(f"  {name:>16s}  blocked {b:8.2f} t/s  reference {r:8.2f} t/s  ratio {b / r:5.2f}x  ({runs})",
                      flush=True)
    lib.tk_attn_set_reference(-1)
    m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
