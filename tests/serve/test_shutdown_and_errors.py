"""What a reviewer found: ``--queue 0`` serves while a slot is free; shutdown ends running jobs
at once (a stream with an error event and [DONE], a non-streamed request with 503, no
traceback); a non-streamed client that leaves is a 499 in /metrics, never a 5xx; error bodies
name the field (empty prompt, a schema llguidance refuses, /detokenize without tokens, fields
that would change the output and are not implemented); "an integer", "1 slot"."""
from __future__ import annotations

import importlib.util
import json
import logging
import pathlib
import threading
import time

import httpx
import pytest

pytestmark = pytest.mark.native
ROOT = pathlib.Path(__file__).resolve().parents[2]
LONG = {"prompt": "def f():", "max_tokens": -1, "temperature": 0, "ignore_eos": True}


def _err(r, status: int, param=None, code=None) -> dict:
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["message"]
    assert param is None or e["param"] == param, e
    assert code is None or e["code"] == code, e
    return e


def _wait(cond, what: str, limit: float = 20.0) -> None:
    t0 = time.time()
    while not cond():
        assert time.time() - t0 < limit, what
        time.sleep(0.01)


def test_queue_zero_serves_while_a_slot_is_free(start_server):
    s = start_server(n_slots=1, n_ctx=8192, queue=0)
    u = s.url + "/v1/completions"
    r = httpx.post(u, json={"prompt": "def", "max_tokens": 2, "temperature": 0}, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
    with httpx.Client(timeout=30) as c, c.stream("POST", u, json=dict(LONG, stream=True)) as r:
        lines = r.iter_lines()
        next(lines)                                   # the only slot is busy
        _err(c.post(u, json=dict(LONG, max_tokens=2)), 503, code="queue_full")


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_shutdown_ends_running_jobs_at_once(start_server):
    s = start_server(n_slots=2, n_ctx=32768)
    u = s.url + "/v1/completions"
    seen = _Records()
    logging.getLogger("uvicorn.error").addHandler(seen)
    try:
        plain = {}
        t = threading.Thread(target=lambda: plain.update(r=httpx.post(u, json=LONG, timeout=60)))
        with httpx.Client(timeout=60) as c, c.stream("POST", u, json=dict(LONG, stream=True)) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            t.start()
            _wait(lambda: s.svc.engine.stats()["slots_busy"] == 2, "both slots busy")
            t0 = time.time()
            s.server.should_exit = True               # what SIGTERM / Ctrl-C do
            rest = [ln for ln in lines if ln.startswith("data: ")]
        t.join(30)
        assert time.time() - t0 < 1.9                 # not uvicorn's graceful period (2 s)
        assert rest[-1] == "data: [DONE]", rest[-3:]
        last = json.loads(rest[-2][6:])
        assert last["error"]["message"] == "server shutting down" and last["error"]["code"] == "server_shutting_down"
        _err(plain["r"], 503, code="server_shutting_down")
        s.thread.join(10)
        assert not s.thread.is_alive()
    finally:
        logging.getLogger("uvicorn.error").removeHandler(seen)
    assert not [r.getMessage() for r in seen.records if r.levelno >= logging.ERROR]


def test_non_streamed_disconnect_is_499_not_500(start_server):
    s = start_server(n_slots=1, n_ctx=32768)
    with pytest.raises(httpx.ReadTimeout):            # the client gives up and closes the connection
        httpx.post(s.url + "/v1/completions", json=LONG, timeout=1.0)
    _wait(lambda: s.svc.engine.stats().get("cancelled", 0) == 1, "the job cancelled")
    _wait(lambda: 'status="499"' in httpx.get(s.url + "/metrics").text, "the 499 counted")
    m = httpx.get(s.url + "/metrics").text
    assert 'toolkit_http_responses_total{route="completions",status="499"} 1' in m, m
    assert not [ln for ln in m.splitlines() if 'status="5' in ln], m
    # bench/serve_load.py's 5xx check reads the same counts (a client that left sees no status)
    spec = importlib.util.spec_from_file_location("serve_load", ROOT / "bench" / "serve_load.py")
    serve_load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve_load)
    seen = serve_load.server_statuses(s.url)
    assert seen[499] == 1 and not serve_load.bad_statuses(seen), seen
    assert serve_load.bad_statuses({200: 3, 503: 1, 500: 1}) == {500: 1}


def test_error_fields(start_server):
    s = start_server(n_slots=1, n_ctx=256)
    u = s.url + "/v1/completions"
    chat = s.url + "/v1/chat/completions"
    msgs = [{"role": "user", "content": "Hi"}]
    _err(httpx.post(u, json={"prompt": ""}), 400, "prompt", "invalid_value")
    bad_schema = {"type": "json_schema", "json_schema": {"schema": {"type": "no-such-type"}}}
    _err(httpx.post(chat, json={"messages": msgs, "response_format": bad_schema}), 400, "response_format")
    _err(httpx.post(s.url + "/detokenize", json={}), 400, "tokens", "missing")
    for field, v in (("echo", True), ("best_of", 2), ("logit_bias", {"1": 5}), ("suffix", "x"), ("best_of", True), ("echo", 1),
                     ("tools", [{"type": "function", "function": {"name": "f"}}])):
        e = _err(httpx.post(u, json={"prompt": "def", "max_tokens": 1, field: v}), 400, field, "not_supported")
        assert field in e["message"]
    _err(httpx.post(chat, json={"messages": msgs, "tools": [{"type": "function"}]}), 400, "tools")
    ok = httpx.post(u, json={"prompt": "def", "max_tokens": 1, "echo": False, "best_of": 1, "logit_bias": {},
                             "suffix": None, "tools": []})
    assert ok.status_code == 200, ok.text
    # articles
    assert "an integer" in _err(httpx.post(u, json={"prompt": "def", "max_tokens": "x"}), 400, "max_tokens")["message"]
    assert "an object" in _err(httpx.post(u, json={"prompt": "d", "response_format": "x"}), 400)["message"]
    assert "an array" in _err(httpx.post(s.url + "/detokenize", json={"tokens": "x"}), 400, "tokens")["message"]


def test_announce_says_1_slot(monkeypatch):
    import asyncio
    from types import SimpleNamespace

    from toolkit.cli import cmd_serve
    lines = []
    monkeypatch.setattr(cmd_serve.err_console, "print", lambda text, **kw: lines.append(text))
    sock = SimpleNamespace(getsockname=lambda: ("127.0.0.1", 1234))

    async def startup(sockets=None):
        pass
    for n, want in ((1, "(1 slot of 256 tokens"), (2, "(2 slots of 256 tokens")):
        server = SimpleNamespace(startup=startup, started=True, servers=[SimpleNamespace(sockets=[sock])])
        svc = SimpleNamespace(engine=SimpleNamespace(slots=[0] * n, n_ctx_slot=256), template=SimpleNamespace(name="chatml"))
        cmd_serve._announce(server, svc, "m.gguf", "127.0.0.1", False)
        asyncio.run(server.startup())
        assert want in lines[-1], lines
    # the start-up line says what re-laying the weights took (issue 44)
    server = SimpleNamespace(startup=startup, started=True, servers=[SimpleNamespace(sockets=[sock])])
    cmd_serve._announce(server, svc, "m.gguf", "127.0.0.1", False,
                        repack={"n_tensors": 3, "bytes": 3 << 20, "ms": 41.6, "released": 1 << 20})
    asyncio.run(server.startup())
    assert "repacked 3.00 MiB (3 tensors) in 42 ms" in lines[-1], lines
