"""Isolation: 8 concurrent streaming greedy clients on different prompts get, token for token,
what each prompt gets alone: ``generate()`` on a fresh one-sequence Context, no server.  Two
rounds on 4 slots, so slots are reused with another prompt's state in them (and a prompt that
extends another's reuses its prefix), on the demo model and on a hybrid fixture (bamba-tiny:
Mamba-2 + attention)."""
from __future__ import annotations

import threading

import httpx
import pytest

from serve_util import DEMO, sse_events

pytestmark = pytest.mark.native

PROMPTS = ["def fibonacci(n):", "import numpy as np\n", "class Stack:\n    def", "# A list of primes\n",
           "for i in range(10):", "def fibonacci(n):\n    if n", "Once upon a time", "x = {'a': 1,",
           # long enough for chunks of 32+ tokens: Mamba-2's chunked SSD path runs on them
           "import os\nimport sys\n\ndef main(argv):\n    for name in argv[1:]:\n        with open(name) as fh:\n"
           "            for line in fh:\n                print(line.rstrip())\n    return 0\n\nif __name__ =="]
UBATCH = 40
N_GEN = 16


def alone(model_path, prompts: list[str]) -> list[list[int]]:
    """Greedy tokens of each prompt on a fresh Context (micro-batches of UBATCH tokens, the
    prompt's last token decoded in a call of its own, as the server does)."""
    from toolkit.runtime import Context, Model
    from toolkit.runtime.generate import generate
    from toolkit.runtime.sampling import Sampler, SamplerParams
    from toolkit.runtime.tokenizer import Tokenizer
    m = Model(str(model_path), n_threads=2)
    tok = Tokenizer.from_gguf(m.gguf)
    out = []
    for p in prompts:
        ctx = Context(m, n_ctx=512, n_checkpoints=4, n_ubatch=UBATCH)   # the server's chunks
        ids = tok.encode(p, add_special=True, parse_special=True)
        res = generate(ctx, tok, ids, N_GEN, Sampler(SamplerParams(temp=0)), split_last=True, ignore_eos=True)
        out.append(res.tokens)
        ctx.close()
    m.close()
    return out


def concurrent(url: str, prompts: list[str]) -> list[list[int]]:
    """Stream every prompt at once (one thread each); the token ids each stream carried."""
    got: list = [None] * len(prompts)
    barrier = threading.Barrier(len(prompts))

    def one(i):
        body = {"prompt": prompts[i], "max_tokens": N_GEN, "temperature": 0, "stream": True,
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


@pytest.mark.parametrize("which", ["demo", "bamba-tiny"])
def test_concurrent_streams_equal_alone(which, start_server, hf_f32):
    path = DEMO if which == "demo" else hf_f32("bamba-tiny")
    want = alone(path, PROMPTS)
    assert len({tuple(w) for w in want}) > 4, "the prompts should give different answers"
    s = start_server(path, n_slots=4, n_ctx=2048, n_ubatch=UBATCH)
    first = concurrent(s.url, PROMPTS)
    second = concurrent(s.url, PROMPTS[::-1])[::-1]
    for p, w, a, b in zip(PROMPTS, want, first, second):
        assert a == w, f"{which} {p!r}: concurrent {a} != alone {w}"
        assert b == w, f"{which} {p!r}: second round {b} != alone {w}"
    # then one at a time: a prompt another slot's prompt extends resumes from that slot's memory
    # (rolled back from the end of its answer), and still gives its own tokens
    for i in (5, 0, 5):
        r = httpx.post(s.url + "/v1/completions", timeout=60, json={
            "prompt": PROMPTS[i], "max_tokens": N_GEN, "temperature": 0, "return_tokens": True, "ignore_eos": True}).json()
        assert r["choices"][0]["tokens"] == want[i]
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    st = s.svc.engine.stats()
    assert st["requests"] == 2 * len(PROMPTS) + 3 and st["slots_busy"] == 0
