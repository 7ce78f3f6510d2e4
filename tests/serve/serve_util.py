"""Servers for the tests: toolkit.serve's app on uvicorn in a thread, on a free loopback port
(port 0: the kernel picks one), stopped and its context freed at the end; the greedy answers of
prompts alone and streamed at once.  (A module, not a conftest.py: tests/conftest.py already
has that module name.)"""
from __future__ import annotations

import json
import pathlib
import threading
import time

import httpx
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "toolkit" / "data" / "default.gguf"


class ServerThread:
    """``toolkit serve`` in-process: ``.url`` (http://127.0.0.1:PORT), ``.svc``; ``close()``."""

    def __init__(self, model, **kw):
        import uvicorn

        from toolkit.serve import create_app, load, stop_jobs_on_shutdown
        kw.setdefault("n_threads", 2)
        self.svc = load(str(model), **kw)
        self.server = uvicorn.Server(uvicorn.Config(create_app(self.svc), host="127.0.0.1", port=0,
                                                    log_level="warning", access_log=False,
                                                    timeout_graceful_shutdown=2))   # as toolkit serve
        stop_jobs_on_shutdown(self.server, self.svc.engine)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        t0 = time.time()
        while not self.server.started:
            assert self.thread.is_alive() and time.time() - t0 < 30, "server did not start"
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.svc.engine.close()


@pytest.fixture
def start_server():
    """start_server(model, **load_kwargs) -> ServerThread (closed after the test)."""
    started = []

    def start(model=DEMO, **kw):
        s = ServerThread(model, **kw)
        started.append(s)
        return s
    yield start
    for s in started:
        if s.thread.is_alive():
            s.close()


def sse_events(resp) -> list:
    """The JSON objects of an httpx streaming response's ``data:`` lines, up to [DONE]."""
    out = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            if line == "data: [DONE]":
                break
            out.append(json.loads(line[6:]))
    return out


def spec_prompts() -> list[str]:
    """Prompts for speculative decoding: answers that copy them in part (where lookup drafts get
    accepted), and others."""
    with open(ROOT / "bench" / "data" / "stdlib-heldout.txt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    func = "\n".join(lines[411:432])
    edit = f"{func}\n\n\n# The same function with `addrinfos` renamed to `infos`:\n{lines[411].replace('addrinfos', 'infos')}\n"
    return [edit, "a = [1, 2, 3]\nb = [1, 2, 3]\nc = [1, 2,", "def fibonacci(n):", "for i in range(10):\n    print(i)\n"]


def greedy_alone(model_path, prompts: list[str], n_gen: int, ubatch: int) -> list[list[int]]:
    """Greedy tokens of each prompt on a fresh Context (micro-batches of ``ubatch`` tokens, the
    prompt's last token decoded in a call of its own, as the server does)."""
    from toolkit.runtime import Context, Model
    from toolkit.runtime.generate import generate
    from toolkit.runtime.sampling import Sampler, SamplerParams
    from toolkit.runtime.tokenizer import Tokenizer
    m = Model(str(model_path), n_threads=2)
    tok = Tokenizer.from_gguf(m.gguf)
    out = []
    for p in prompts:
        ctx = Context(m, n_ctx=2048, n_checkpoints=4, n_ubatch=ubatch)   # the server's chunks
        ids = tok.encode(p, add_special=True, parse_special=True)
        res = generate(ctx, tok, ids, n_gen, Sampler(SamplerParams(temp=0)), split_last=True, ignore_eos=True)
        out.append(res.tokens)
        ctx.close()
    m.close()
    return out


def stream_concurrent(url: str, prompts: list[str], n_gen: int) -> list[list[int]]:
    """Stream every prompt at once (one thread each); the token ids each stream carried."""
    got: list = [None] * len(prompts)
    barrier = threading.Barrier(len(prompts))

    def one(i):
        body = {"prompt": prompts[i], "max_tokens": n_gen, "temperature": 0, "stream": True,
                "return_tokens": True, "ignore_eos": True}
        with httpx.Client(timeout=120) as c:
            barrier.wait()
            with c.stream("POST", url + "/v1/completions", json=body) as r:
                assert r.status_code == 200
                got[i] = [t for ev in sse_events(r) for t in ev["choices"][0].get("tokens", [])]
    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return got
