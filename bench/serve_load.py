"""Load test of an OpenAI-compatible server: ``toolkit serve`` or llama-server, same GGUF, same
settings, one after the other (not a timed test: figures depend on the machine and its load).

    python bench/serve_load.py -m toolkit/data/default.gguf                 # toolkit serve
    python bench/serve_load.py -m M.gguf --llama-server /path/llama-server  # both, side by side

Each server is started as ``-m M -np SLOTS -c CTX --host 127.0.0.1 --port P`` (llama-server's
flag names; toolkit serve takes the same), warmed up for --warmup seconds, then CLIENTS
concurrent streaming clients send random prompts (random words of a fixed list, random
length, random max_tokens, greedy or sampled) for --duration seconds; a client drops its
connection mid-stream with probability --p-disconnect; a prompt is long (--long-words / 2 ..
--long-words words) with probability --p-long.  One request in --p-plain is not streamed;
with the same probability its client gives up (closes the connection) before the answer.
Checks, printed as PASS / FAIL:

    - no HTTP status >= 500 except 503 (a full queue), no transport error but the ones we made;
      for toolkit serve also the statuses it counted itself (/metrics), which include the
      answers nobody read (a client that left: 499, never a 5xx)
    - the server process is alive at the end and /health answers
    - RSS at the end is within --rss-tol (10%) of the RSS after the warm-up (VmRSS of the process,
      also sampled every 30 s: rss_samples_mib)
    - toolkit serve: no failed draft model call (/metrics draft_errors_total; with
      ``--toolkit-args '--draft-model D.gguf'``: flags given to toolkit serve only)

Reports completed requests, generated tokens per second (usage.completion_tokens of finished
streams / duration), p50 / p95 time to first token, 503 count, disconnects.  ``--json`` prints
the figures as one object per server.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time

import httpx

WORDS = ("the list of values is sorted and then each item is printed to a file named after the "
         "function that returns a dictionary with keys for every class in the module where a loop "
         "counts numbers until the result is greater than zero or the input is empty").split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def start(kind: str, binary: str, model: str, slots: int, ctx: int, threads: int,
          extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    port = free_port()
    common = ["-m", model, "-np", str(slots), "-c", str(ctx), "--host", "127.0.0.1", "--port", str(port),
              "-t", str(threads)]
    cmd = [sys.executable, "-m", "toolkit", "serve", *common, *extra] if kind == "toolkit" else [binary, *common]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    t0 = time.time()
    while time.time() - t0 < 120:
        if p.poll() is not None:
            raise SystemExit(f"{kind}: exited with {p.returncode}: {p.stderr.read()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return p, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    p.kill()
    raise SystemExit(f"{kind}: no /health after 120 s")


async def plain(c: httpx.AsyncClient, url: str, body: dict, stats: dict, give_up: float | None) -> None:
    """One non-streamed request; with ``give_up`` seconds, the client closes the connection
    then if no answer came (counted as a disconnect)."""
    body = dict(body, stream=False)
    body.pop("stream_options")
    try:
        r = await asyncio.wait_for(c.post(url + "/v1/completions", json=body), give_up)
    except asyncio.TimeoutError:
        stats["disconnects"] += 1
        return
    stats["status"][r.status_code] = stats["status"].get(r.status_code, 0) + 1
    if r.status_code == 200:
        stats["tokens"] += r.json()["usage"]["completion_tokens"]
        stats["done"] += 1
    else:
        await asyncio.sleep(0.2)


async def client(url: str, rng: random.Random, stop_at: float, stats: dict, p_disc: float, max_new: int,
                 p_plain: float, p_long: float = 0.0, long_words: int = 800) -> None:
    async with httpx.AsyncClient(timeout=600) as c:
        while time.time() < stop_at:
            n_words = rng.randint(long_words // 2, long_words) if rng.random() < p_long else rng.randint(4, 120)
            prompt = " ".join(rng.choice(WORDS) for _ in range(n_words))
            body = {"prompt": prompt, "max_tokens": rng.randint(8, max_new), "stream": True,
                    "stream_options": {"include_usage": True},
                    "temperature": rng.choice([0.0, 0.8]), "seed": rng.randint(0, 1 << 30)}
            if rng.random() < p_plain:
                try:
                    await plain(c, url, body, stats, rng.uniform(0.05, 2.0) if rng.random() < p_disc else None)
                except httpx.HTTPError as e:
                    stats["errors"].append(repr(e)[:200])
                continue
            drop_after = rng.randint(1, 8) if rng.random() < p_disc else None
            t0 = time.perf_counter()
            try:
                async with c.stream("POST", url + "/v1/completions", json=body) as r:
                    stats["status"][r.status_code] = stats["status"].get(r.status_code, 0) + 1
                    if r.status_code != 200:
                        await r.aread()
                        await asyncio.sleep(0.2)
                        continue
                    n_events, first, used = 0, None, None
                    async for line in r.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        ev = json.loads(line[6:])
                        if first is None and ev.get("choices") and (ev["choices"][0].get("text")):
                            first = time.perf_counter() - t0
                            stats["ttft"].append(first)
                        n_events += 1
                        if ev.get("usage") and ev["usage"].get("completion_tokens") is not None:
                            used = ev["usage"]["completion_tokens"]   # the last chunk that has it
                        if drop_after is not None and n_events >= drop_after:
                            stats["disconnects"] += 1
                            break       # leaving the block closes the connection mid-stream
                    else:
                        if used is not None:
                            stats["tokens"] += used
                            stats["done"] += 1
            except httpx.HTTPError as e:
                stats["errors"].append(repr(e)[:200])


async def load(url: str, clients: int, seconds: float, p_disc: float, max_new: int, seed: int,
               p_plain: float, p_long: float = 0.0, long_words: int = 800, pid: int | None = None) -> dict:
    """Run the clients for ``seconds``; with ``pid``, VmRSS (bytes) is also sampled every 30 s
    into stats["rss"]."""
    stats = {"status": {}, "ttft": [], "tokens": 0, "done": 0, "disconnects": 0, "errors": [], "rss": []}
    stop_at = time.time() + seconds

    async def sample_rss() -> None:
        while pid is not None and time.time() < stop_at:
            stats["rss"].append(rss_bytes(pid))
            await asyncio.sleep(min(30.0, max(0.0, stop_at - time.time())))

    await asyncio.gather(sample_rss(), *(client(url, random.Random(seed + i), stop_at, stats, p_disc, max_new,
                                                 p_plain, p_long, long_words) for i in range(clients)))
    return stats


def server_statuses(url: str) -> dict[int, int]:
    """toolkit serve's own count of its HTTP answers by status (/metrics), all routes."""
    out: dict[int, int] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("toolkit_http_responses_total{"):
            status = int(line.split('status="')[1].split('"')[0])
            out[status] = out.get(status, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def _draft_errors(url: str) -> int:
    """toolkit serve's draft_errors_total (a failed draft model call: no answer changes, but a bug)."""
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("toolkit_draft_errors_total "):
            return int(float(line.split()[1]))
    return 0


def bad_statuses(statuses: dict[int, int]) -> dict[int, int]:
    """The 5xx statuses but 503 (a full queue)."""
    return {k: v for k, v in statuses.items() if k >= 500 and k != 503}


def bench_one(kind: str, args) -> dict:
    p, url = start(kind, args.llama_server, args.model, args.slots, args.ctx, args.threads,
                   tuple(args.toolkit_args.split()))
    try:
        asyncio.run(load(url, args.clients, args.warmup, args.p_disconnect, args.max_tokens, 1000, args.p_plain))
        rss0 = rss_bytes(p.pid)
        t0 = time.time()
        st = asyncio.run(load(url, args.clients, args.duration, args.p_disconnect, args.max_tokens, 0, args.p_plain,
                              args.p_long, args.long_words, p.pid))
        wall = time.time() - t0
        time.sleep(1.0)
        rss1 = rss_bytes(p.pid)
        alive = p.poll() is None and httpx.get(url + "/health", timeout=5).status_code == 200
        served = server_statuses(url) if kind == "toolkit" else {}     # warm-up included
        draft_errors = _draft_errors(url) if kind == "toolkit" else 0
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
    bad = bad_statuses(st["status"]) or bad_statuses(served)
    ttft = sorted(st["ttft"])
    q = (lambda f: round(ttft[min(len(ttft) - 1, int(f * len(ttft)))] * 1e3, 1)) if ttft else (lambda f: None)
    return {"server": kind, "clients": args.clients, "slots": args.slots, "ctx": args.ctx, "seconds": round(wall, 1),
            "requests_done": st["done"], "tokens": st["tokens"], "tokens_per_s": round(st["tokens"] / wall, 1),
            "ttft_p50_ms": q(0.50), "ttft_p95_ms": q(0.95), "status": st["status"], "server_status": served, "disconnects": st["disconnects"],
            "transport_errors": len(st["errors"]), "first_transport_error": (st["errors"] or [None])[0], "rss_warm_mib": round(rss0 / 2**20, 1),
            "rss_end_mib": round(rss1 / 2**20, 1),
            "rss_samples_mib": [round(r / 2**20, 1) for r in st["rss"]], "checks": {
                "no_5xx_but_503": not bad, "no_draft_errors": not draft_errors, "alive": alive, "no_transport_errors": not st["errors"],
                f"rss_flat_{args.rss_tol:g}": abs(rss1 - rss0) <= args.rss_tol * rss0}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default="toolkit/data/default.gguf")
    ap.add_argument("--llama-server", default=None, help="path of llama-server: also run it, same settings")
    ap.add_argument("--only-llama", action="store_true", help="skip toolkit serve")
    ap.add_argument("-np", "--slots", type=int, default=4)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--p-disconnect", type=float, default=0.15)
    ap.add_argument("--p-plain", type=float, default=0.2, help="share of requests not streamed")
    ap.add_argument("--toolkit-args", default="", help="more flags for toolkit serve only, one string "
                    "(e.g. '--draft-model D.gguf --draft-max 4')")
    ap.add_argument("--p-long", type=float, default=0.0, help="share of long prompts (--long-words/2 .. --long-words words)")
    ap.add_argument("--long-words", type=int, default=800)
    ap.add_argument("--rss-tol", type=float, default=0.10, help="RSS check: |end - after warm-up| <= this share")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    kinds = ([] if args.only_llama else ["toolkit"]) + (["llama-server"] if args.llama_server else [])
    ok = True
    for kind in kinds:
        r = bench_one(kind, args)
        ok = ok and all(r["checks"].values())
        if args.json:
            print(json.dumps(r))
            continue
        print(f"{kind}: {r['requests_done']} requests, {r['tokens']} tokens in {r['seconds']} s = {r['tokens_per_s']} tok/s; "
              f"TTFT p50 {r['ttft_p50_ms']} ms, p95 {r['ttft_p95_ms']} ms; status {r['status']}; "
              f"{r['disconnects']} disconnects; RSS {r['rss_warm_mib']} -> {r['rss_end_mib']} MiB")
        for k, v in r["checks"].items():
            print(f"  {'PASS' if v else 'FAIL'} {k}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
