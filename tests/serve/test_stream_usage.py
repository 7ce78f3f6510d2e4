"""stream_options.include_usage: usage is sent once, in a final chunk with empty ``choices``,
as OpenAI sends it (issue 37: it came in the finish chunk too, so a client that adds the
chunks' usage up counted it twice)."""
from __future__ import annotations

import httpx
import pytest

from serve_util import DEMO, sse_events

pytestmark = pytest.mark.native


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
    ("/v1/completions", {"prompt": "def fibonacci(n):"}),
])
def test_usage_once_with_include_usage(start_server, path, body):
    s = start_server(DEMO, n_slots=1, n_ctx=512)
    req = dict(body, max_tokens=4, temperature=0, stream=True)
    with httpx.stream("POST", s.url + path, json=dict(req, stream_options={"include_usage": True}), timeout=60) as r:
        ev = sse_events(r)
    with_usage = [e for e in ev if e.get("usage")]
    assert len(with_usage) == 1, ev
    assert ev[-1] is with_usage[0] and ev[-1]["choices"] == [], ev[-1]
    assert ev[-1]["usage"]["completion_tokens"] == 4
    assert all("usage" in e and e["usage"] is None for e in ev[:-1]), ev     # OpenAI: null on the others
    assert [e["choices"][0]["finish_reason"] for e in ev if e["choices"]][-1] == "length"
    with httpx.stream("POST", s.url + path, json=req, timeout=60) as r:    # without: once, in the finish chunk
        ev = sse_events(r)
    assert len([e for e in ev if e.get("usage")]) == 1 and ev[-1]["choices"], ev
