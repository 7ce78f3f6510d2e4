"""``toolkit serve`` as a command: --help, flag errors (exit 2, one line), and a real process on
port 0 that prints its address with --json, answers, and stops on SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

ENV = dict(os.environ, TOOLKIT_THREADS="2")


def test_help_and_flag_errors(monkeypatch, capsys):
    from cli_runner import cli
    rc, out, _ = cli(monkeypatch, capsys, "serve", "--help")
    assert rc == 0 and "--api-key" in out and "-np" in out
    for args, flag in ((["-np", "0"], "-np/--parallel"), (["--port", "70000"], "--port"),
                       (["-m", "/nonexistent.gguf"], "/nonexistent.gguf"), (["--max-body", "0"], "--max-body"),
                       (["--api-key", " "], "--api-key")):
        rc, _, err = cli(monkeypatch, capsys, "serve", *args)
        assert rc == 2, (args, err)
        assert flag in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.native
@pytest.mark.slow      # two processes started
def test_process_serves_and_stops_on_sigterm():
    p = subprocess.Popen([sys.executable, "-m", "toolkit", "serve", "--port", "0", "--json", "-np", "1", "-c", "32768"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        info = json.loads(p.stdout.readline())
        assert info["slots"] == 1 and info["n_ctx_slot"] == 32768 and info["architecture"] == "granitehybrid"
        r = httpx.post(info["url"] + "/v1/completions", json={"prompt": "def", "max_tokens": 3, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        # SIGTERM with a stream in flight: it ends at once with an error event and [DONE]
        with httpx.stream("POST", info["url"] + "/v1/completions", timeout=30, json={
                "prompt": "x", "max_tokens": -1, "stream": True, "ignore_eos": True}) as s:
            lines = s.iter_lines()
            assert next(lines).startswith("data: ")
            p.send_signal(signal.SIGTERM)
            rest = [ln for ln in lines if ln.startswith("data: ")]
        assert rest[-1] == "data: [DONE]" and "server shutting down" in rest[-2], rest[-3:]
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 143, err
    assert "Traceback" not in err and "Exception in ASGI" not in err and "ERROR" not in err, err
    # a port in use: one line, exit 2, before the model is loaded
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        r = subprocess.run([sys.executable, "-m", "toolkit", "serve", "--port", str(busy.getsockname()[1])],
                           capture_output=True, text=True, env=ENV, timeout=60)
    assert r.returncode == 2 and "cannot listen there" in r.stderr and "Traceback" not in r.stderr
