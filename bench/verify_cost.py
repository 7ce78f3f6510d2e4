"""Cost of a verify call: n tokens of one sequence decoded in one ubatch, through the chunked
SSD, through the token-by-token recurrence, through the recurrence writing the speculative
window's per-token snapshots, and writing them for all tokens but the last (the path a
target's verify takes: ``set_draft_window(k, keep_last=False)``); one decode of 1 token for
scale, without and with the target's window (a step that found no draft).

    python bench/verify_cost.py /tmp/b430/b430.q8_0.gguf --threads 2 --sizes 2 5 9 17 33 --repeat 7

Median ms per call over --repeat calls after a 200-token prefix; the state before each call is
restored from a blob outside the timed part.  Prints ms per call and per token.
"""
from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 5, 9, 17, 33])
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    from toolkit.binding import lib
    from toolkit.runtime import Context, Model

    m = Model(a.model, n_threads=a.threads)
    prefix = list(range(10, 210))
    rows = []
    for n in [1] + a.sizes:
        out = {}
        for path, thr, window, last in (("ssd", 1, 0, True), ("recurrence", 0, 0, True),
                                        ("recurrence+snapshots", 0, n - 1, True), ("verify", 0, max(n - 1, 4), False)):
            if n == 1 and path not in ("recurrence", "verify"):
                continue
            lib.tk_ssd_set_threshold(thr)
            with Context(m, n_ctx=512) as ctx:
                if window:
                    ctx.memory.set_draft_window(window, keep_last=last)
                ctx.decode(prefix, logits="none")
                blob = ctx.state_bytes(0)
                ts = []
                for _ in range(a.repeat):
                    t = time.perf_counter()
                    ctx.decode(list(range(300, 300 + n)), logits="all", snapshots=window > 0)
                    ts.append(time.perf_counter() - t)
                    ctx.memory.seq_rm(0, 0, -1)
                    ctx.load_state(blob, 0)
                out[path] = statistics.median(ts) * 1e3
        lib.tk_ssd_set_threshold(-1)
        rows.append((n, out))
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"{a.model}: {a.threads} threads, median of {a.repeat} (load average {load}; a shared machine)")
    print(f"{'tokens':>6}  {'ssd ms':>9}  {'recurrence ms':>14}  {'+snapshots ms':>14}  {'verify ms':>10}  "
          f"{'per token (verify)':>19}")
    for n, out in rows:
        f = lambda k: f"{out[k]:.2f}" if k in out else "-"
        print(f"{n:>6}  {f('ssd'):>9}  {f('recurrence'):>14}  {f('recurrence+snapshots'):>14}  {f('verify'):>10}  "
              f"{out['verify'] / n:>19.2f}")


if __name__ == "__main__":
    main()
