"""``toolkit serve`` with speculative decoding against plain: generated tokens/s of concurrent
greedy clients and the acceptance, per mode (not a timed test: figures depend on the machine).

    python bench/speculative.py toolkit/data/default.gguf --make-early-exit 2 /tmp/demo-early2.gguf
    python bench/serve_speculative.py -m toolkit/data/default.gguf --draft-model /tmp/demo-early2.gguf

Modes: plain, ``--draft-model F --draft-max K`` for each K in --k-draft (with --draft-model),
``--lookup --draft-max K`` for each K in --k-lookup.  Each mode starts its own server
(``-np CLIENTS -c CTX -t THREADS --port 0``); CLIENTS clients then each send the same list of
prompts in turn (the code-editing prompt of bench/speculative.py, then short code prompts;
``temperature`` 0, ``ignore_eos``, -n tokens each, not streamed), all at once.  tokens/s = the
completion tokens of all clients / the wall time from the first request to the last answer.
The servers run one after the other, modes alternating within each round (a shared machine's
load drifts); the table shows the median over the rounds.  The answers of every mode are
checked to be the plain mode's, token for token.  Acceptance: /metrics' draft counters.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from speculative import edit_prompt  # noqa: E402

PROMPTS = [edit_prompt(), "def fibonacci(n):", "a = [1, 2, 3]\nb = [1, 2, 3]\nc = [1, 2,",
           "for i in range(10):\n    print(i)\n"]


def start(model: str, flags: list[str], slots: int, ctx: int, threads: int) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "toolkit", "serve", "-m", model, "-np", str(slots), "-c", str(ctx),
           "-t", str(threads), "--port", "0", "--json", *flags]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line:
        raise SystemExit(f"toolkit serve {' '.join(flags)}: exited: {p.stderr.read()[-2000:]}")
    return p, json.loads(line)["url"]


def metrics(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("toolkit_draft_tokens"):
            k, v = line.split()
            out[k] = float(v)
    return out


def one_mode(model: str, flags: list[str], a) -> dict:
    p, url = start(model, flags, a.clients, a.ctx, a.threads)
    try:
        with httpx.Client(timeout=600) as c:           # warm-up: one short request
            c.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 4, "temperature": 0})
        m0 = metrics(url)
        answers: list = [None] * a.clients
        n_tok = [0] * a.clients
        barrier = threading.Barrier(a.clients)

        def client(i: int) -> None:
            got = []
            with httpx.Client(timeout=600) as c:
                barrier.wait()
                for pr in PROMPTS:
                    r = c.post(url + "/v1/completions", json={"prompt": pr, "max_tokens": a.n, "temperature": 0,
                                                              "ignore_eos": True, "return_tokens": True}).json()
                    got.append(r["choices"][0]["tokens"])
                    n_tok[i] += r["usage"]["completion_tokens"]
            answers[i] = got
        ts = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        m1 = metrics(url)
    finally:
        p.terminate()
        p.wait(30)
    d = m1.get("toolkit_draft_tokens_total", 0) - m0.get("toolkit_draft_tokens_total", 0)
    acc = m1.get("toolkit_draft_tokens_accepted_total", 0) - m0.get("toolkit_draft_tokens_accepted_total", 0)
    return {"tps": sum(n_tok) / wall, "drafted": int(d), "accepted": int(acc), "answers": answers}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="toolkit/data/default.gguf")
    ap.add_argument("--draft-model", default=None)
    ap.add_argument("--k-draft", type=int, nargs="*", default=[2, 4])
    ap.add_argument("--k-lookup", type=int, nargs="*", default=[4])
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    modes = [("plain", [])]
    if a.draft_model:
        modes += [(f"draft K={k}", ["--draft-model", a.draft_model, "--draft-max", str(k)]) for k in a.k_draft]
    modes += [(f"lookup K={k}", ["--lookup", "--draft-max", str(k)]) for k in a.k_lookup]
    runs: dict[str, list] = {name: [] for name, _ in modes}
    for _ in range(a.repeat):
        for name, flags in modes:
            runs[name].append(one_mode(a.model, flags, a))
    ref = runs["plain"][0]["answers"]
    ok = all(r["answers"] == ref for rs in runs.values() for r in rs)
    base = statistics.median(r["tps"] for r in runs["plain"])
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; {a.clients} clients x {len(PROMPTS)} prompts x "
          f"{a.n} tokens, -t {a.threads}, median of {a.repeat}")
    print("| mode | gen t/s | vs plain | accepted / drafted | rounds (t/s) |")
    print("|---|---:|---:|---:|---|")
    for name, _ in modes:
        rs = runs[name]
        tps = statistics.median(r["tps"] for r in rs)
        acc = f"{rs[0]['accepted']} / {rs[0]['drafted']}" if rs[0]["drafted"] else ""
        print(f"| {name} | {tps:.1f} | {tps / base:.2f}x | {acc} | {', '.join(format(r['tps'], '.0f') for r in rs)} |")
    print("answers: " + ("every mode's equal plain's, token for token" if ok else "DIFFER from plain's"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
