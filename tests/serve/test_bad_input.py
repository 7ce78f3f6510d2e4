"""Bad input gets its status and an OpenAI error body, and disturbs nothing: malformed JSON,
unknown role, wrong field type, prompt longer than a slot's context -> 400; wrong or missing
API key -> 401; a body over --max-body -> 413; a full queue -> 503 + Retry-After; a client that
disconnects mid-stream frees its slot.  200 malformed requests, then a good one still works."""
from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

pytestmark = pytest.mark.native
KEY = "sk-test-key"
H = {"Authorization": f"Bearer {KEY}"}
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}


@pytest.fixture(scope="module")
def server():
    from serve_util import DEMO, ServerThread
    s = ServerThread(DEMO, n_slots=2, n_ctx=256, api_key=KEY, max_body=4096)
    yield s
    s.close()


def _err(r, status: int, param=None):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["message"]
    if param is not None:
        assert e["param"] == param, e
    return e


BAD = [
    (b"{not json", 400, None),
    (b"\xff\xfe", 400, None),
    (b"[1, 2]", 400, None),
    (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), 400, "messages[0].role"),
    (json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(), 400, "messages[0].content"),
    (json.dumps({"messages": "hello"}).encode(), 400, "messages"),
    (json.dumps(dict(CHAT, temperature="hot")).encode(), 400, "temperature"),
    (json.dumps(dict(CHAT, max_tokens=True)).encode(), 400, "max_tokens"),
    (json.dumps(dict(CHAT, top_p=3.0)).encode(), 400, "top_p"),
    (json.dumps(dict(CHAT, stream="yes")).encode(), 400, "stream"),
    (json.dumps(dict(CHAT, stop=[1])).encode(), 400, "stop"),
    (json.dumps(dict(CHAT, response_format={"type": "json_schema", "json_schema": {"schema": 3}})).encode(), 400,
     "response_format"),
    (json.dumps({"messages": [{"role": "user", "content": "word " * 400}]}).encode(), 400, "messages"),
]


@pytest.mark.parametrize("body,status,param", BAD)
def test_bad_chat_bodies(server, body, status, param):
    _err(httpx.post(server.url + "/v1/chat/completions", content=body, headers=H, timeout=30), status, param)


def test_bad_completion_bodies(server):
    u = server.url + "/v1/completions"
    _err(httpx.post(u, json={"prompt": 3}, headers=H), 400, "prompt")
    _err(httpx.post(u, json={"prompt": [1, 10**9]}, headers=H), 400, "prompt")
    e = _err(httpx.post(u, json={"prompt": "x " * 300}, headers=H), 400, "prompt")
    assert "context" in e["message"]
    _err(httpx.post(server.url + "/detokenize", json={"tokens": ["a"]}, headers=H), 400, "tokens")
    _err(httpx.post(server.url + "/tokenize", json={}, headers=H), 400, "content")
    _err(httpx.get(server.url + "/v1/nothing", headers=H), 404)


def test_api_key_and_body_limit(server):
    u = server.url + "/v1/chat/completions"
    assert _err(httpx.post(u, json=CHAT), 401)["type"] == "authentication_error"
    _err(httpx.post(u, json=CHAT, headers={"Authorization": "Bearer wrong"}), 401)
    _err(httpx.get(server.url + "/v1/models"), 401)
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}     # open, as llama-server's
    _err(httpx.post(u, json=dict(CHAT, pad="x" * 5000), headers=H), 413)

    def chunks():           # no Content-Length: the limit is counted as the body arrives
        for _ in range(10):
            yield b" " * 1000
    _err(httpx.post(u, content=chunks(), headers=H), 413)


def test_flood_of_malformed_requests_then_a_good_one(server):
    with httpx.Client(headers=H, timeout=30) as c:
        for i in range(200):
            body, status, _ = BAD[i % len(BAD)]
            assert c.post(server.url + "/v1/chat/completions", content=body).status_code == status
        r = c.post(server.url + "/v1/chat/completions", json=CHAT)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
        assert c.get(server.url + "/metrics").text.count("toolkit_slots_busy 0") == 1
        toks = c.post(server.url + "/tokenize", json={"content": "def f():"}).json()["tokens"]
        assert c.post(server.url + "/detokenize", json={"tokens": toks}).json()["content"] == "def f():"


def test_queue_full_503_and_disconnect_frees_the_slot(start_server):
    s = start_server(n_slots=1, n_ctx=32768, queue=1)
    u = s.url + "/v1/completions"
    long = {"prompt": "def f():", "max_tokens": 30000, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", u, json=long) as r:          # holds the only slot
            lines = r.iter_lines()      # kept: a dropped iterator closes the connection
            next(lines)
            waiting = threading.Thread(target=lambda: httpx.post(u, json=dict(long, stream=False, max_tokens=2), timeout=60))
            waiting.start()
            t0 = time.time()
            while s.svc.engine.stats()["queue"] < 1:
                assert time.time() - t0 < 10
                time.sleep(0.01)
            full = c.post(u, json=dict(long, stream=False))
            e = _err(full, 503)
            assert full.headers["retry-after"] == "1" and e["code"] == "queue_full"
        # the stream is closed: its slot is freed at the next step, the waiting one runs
        waiting.join(30)
        assert not waiting.is_alive()
    st = s.svc.engine.stats()
    assert st["cancelled"] == 1 and st["slots_busy"] == 0
    assert st["tokens_generated"] < 20000     # the cancelled stream did not run to its 30000 tokens


# ---- found by the fresh-eyes breaker: llama-server's output-changing fields ------------------

@pytest.mark.parametrize("field, value", [("grammar", 'root ::= "x"'), ("json_schema", {"type": "object"}),
                                          ("mirostat", 2), ("typical_p", 0.5), ("dynatemp_range", 0.5),
                                          ("xtc_probability", 0.5), ("dry_multiplier", 0.8),
                                          ("samplers", ["top_k", "temperature"])])
def test_llama_server_fields_we_lack_are_refused_not_ignored(field, value):
    """llama-server's `grammar` (and its other output-changing sampler fields) were silently
    ignored: a client asking for `root ::= "x"` got unconstrained text with 200.  They are now
    refused with 400 naming the field, as `logit_bias` is; their neutral values still pass."""
    from toolkit.serve.protocol import ApiError, read_common
    with pytest.raises(ApiError) as e:
        read_common({"prompt": "a", field: value}, chat=False)
    assert e.value.status == 400 and e.value.param == field and e.value.code == "not_supported"
    assert field in e.value.message


@pytest.mark.parametrize("field, value", [("grammar", ""), ("json_schema", {}), ("mirostat", 0), ("typical_p", 1.0),
                                          ("typical_p", 1), ("dynatemp_range", 0), ("xtc_probability", 0.0),
                                          ("dry_multiplier", 0), ("samplers", [])])
def test_neutral_values_of_those_fields_pass(field, value):
    from toolkit.serve.protocol import read_common
    read_common({"prompt": "a", field: value}, chat=False)


def test_wrong_method_says_so(server):
    """GET on a POST route answered 405 with "no such route" and code not_found (as a 404):
    it now says the method is not allowed and which one is (the Allow header too)."""
    r = httpx.get(server.url + "/v1/completions", headers=H)
    e = _err(r, 405)
    assert e["code"] == "method_not_allowed" and "POST" in e["message"] and "no such route" not in e["message"]
    assert r.headers.get("allow") == "POST"
    e = _err(httpx.get(server.url + "/v2/nothing", headers=H), 404)
    assert e["code"] == "not_found" and "no such route" in e["message"]
