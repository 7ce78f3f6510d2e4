"""Servers for the tests: toolkit.serve's app on uvicorn in a thread, on a free loopback port
(port 0: the kernel picks one), stopped and its context freed at the end.  (A module, not a
conftest.py: tests/conftest.py already has that module name.)"""
from __future__ import annotations

import json
import pathlib
import threading
import time

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
