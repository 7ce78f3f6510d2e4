"""Isolation: 8 concurrent streaming greedy clients on different prompts get, token for token,
what each prompt gets alone: ``generate()`` on a fresh one-sequence Context, no server.  Two
rounds on 4 slots, so slots are reused with another prompt's state in them (and a prompt that
extends another's reuses its prefix), on the demo model and on a hybrid fixture (bamba-tiny:
Mamba-2 + attention)."""
from __future__ import annotations

import httpx
import pytest

from serve_util import DEMO, greedy_alone, stream_concurrent

pytestmark = pytest.mark.native

PROMPTS = ["def fibonacci(n):", "import numpy as np\n", "class Stack:\n    def", "# A list of primes\n",
           "for i in range(10):", "def fibonacci(n):\n    if n", "Once upon a time", "x = {'a': 1,",
           # long enough for chunks of 32+ tokens: Mamba-2's chunked SSD path runs on them
           "import os\nimport sys\n\ndef main(argv):\n    for name in argv[1:]:\n        with open(name) as fh:\n"
           "            for line in fh:\n                print(line.rstrip())\n    return 0\n\nif __name__ =="]
UBATCH = 40
N_GEN = 16


@pytest.mark.parametrize("which", ["demo", "bamba-tiny"])
def test_concurrent_streams_equal_alone(which, start_server, hf_f32):
    path = DEMO if which == "demo" else hf_f32("bamba-tiny")
    want = greedy_alone(path, PROMPTS, N_GEN, UBATCH)
    assert len({tuple(w) for w in want}) > 4, "the prompts should give different answers"
    s = start_server(path, n_slots=4, n_ctx=2048, n_ubatch=UBATCH)
    first = stream_concurrent(s.url, PROMPTS, N_GEN)
    second = stream_concurrent(s.url, PROMPTS[::-1], N_GEN)[::-1]
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
