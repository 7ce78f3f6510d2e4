"""Speculative decoding per slot (``toolkit serve --lookup``): concurrent greedy streams with
prompt-lookup drafts get, token for token, what each prompt gets alone without drafts, while
the slots both keep and reject drafts (so the exact rollback of each sequence runs, with other
sequences in the same batch); sampled requests finish with their counts; the draft counters
reach the response ``timings`` and /metrics; the flags are checked."""
from __future__ import annotations

import httpx
import pytest

from serve_util import DEMO, greedy_alone, spec_prompts as _prompts, stream_concurrent

UBATCH = 40
N_GEN = 40


@pytest.mark.native
@pytest.mark.parametrize("which", ["demo", "bamba-tiny"])
def test_lookup_streams_equal_plain_greedy(which, start_server, hf_f32):
    path = DEMO if which == "demo" else hf_f32("bamba-tiny")
    prompts = _prompts()
    want = greedy_alone(path, prompts, N_GEN, UBATCH)
    s = start_server(path, n_slots=3, n_ctx=3 * 1024, n_ubatch=UBATCH, draft_max=4)
    got = stream_concurrent(s.url, prompts, N_GEN)     # 4 prompts on 3 slots: a slot is reused
    for p, w, g in zip(prompts, want, got):
        assert g == w, f"{which} {p[:30]!r}: with drafts {g} != plain {w}"
    st = s.svc.engine.stats()
    assert st["draft_tokens"] > 0, "no draft was sent"
    assert 0 < st["draft_tokens_accepted"] < st["draft_tokens"], st   # kept some, rejected some
    assert st["slots_busy"] == 0


@pytest.mark.native
def test_sampled_requests_and_counters(start_server):
    s = start_server(DEMO, n_slots=2, n_ctx=2048, n_ubatch=UBATCH, draft_max=8, draft_ngram=2)
    body = {"prompt": _prompts()[0], "max_tokens": 24, "temperature": 0.8, "seed": 7, "ignore_eos": True}
    with httpx.Client(timeout=120) as c:
        r = c.post(s.url + "/v1/completions", json=body).json()
        assert r["usage"]["completion_tokens"] == 24
        t = r["timings"]
        assert t["draft_n"] >= t["draft_n_accepted"] >= 0 and t["predicted_n"] == 24
        greedy = c.post(s.url + "/v1/completions", json=dict(body, temperature=0)).json()["timings"]
        assert greedy["draft_n"] > 0
        m = c.get(s.url + "/metrics").text
    assert "toolkit_draft_tokens_total" in m and "toolkit_draft_tokens_accepted_total" in m


@pytest.mark.native
def test_prefix_reuse_with_lookup(start_server):
    """Prompt chunks take their checkpoints with a draft window as without one: the same
    request twice reuses the slot's prefix (a fresh-eyes review found cached_tokens 0)."""
    s = start_server(DEMO, n_slots=1, n_ctx=1024, n_ubatch=UBATCH, draft_max=16)
    body = {"prompt": "def fibonacci(n):", "max_tokens": 8, "temperature": 0}
    with httpx.Client(timeout=60) as c:
        first = c.post(s.url + "/v1/completions", json=body).json()
        second = c.post(s.url + "/v1/completions", json=body).json()
    assert second["choices"][0]["text"] == first["choices"][0]["text"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_flags(monkeypatch, capsys):
    from cli_runner import cli
    rc, out, _ = cli(monkeypatch, capsys, "serve", "--help")
    assert rc == 0 and "--lookup" in out and "--draft-max" in out
    for args, flag in ((["--draft-max", "4"], "--lookup"), (["--lookup", "--draft-max", "0"], "--draft-max"),
                       (["--draft-ngram", "0"], "--draft-ngram"), (["--lookup", "--draft-min", "9", "--draft-max", "4"], "--draft-min")):
        rc, _, err = cli(monkeypatch, capsys, "serve", *args)
        assert rc == 2, (args, err)
        assert flag in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_metrics_help_names_every_draft_source():
    # /metrics' HELP lines for the draft counters named --lookup and --draft-model but not --mtp
    from types import SimpleNamespace
    from toolkit.serve.app import prometheus
    svc = SimpleNamespace(engine=SimpleNamespace(stats=lambda: {"slots_busy": 0, "slots": 1, "queue": 0}), http={})
    helps = {ln.split()[2]: ln for ln in prometheus(svc).splitlines() if ln.startswith("# HELP")}
    for name in ("toolkit_draft_tokens_total", "toolkit_draft_tokens_accepted_total", "toolkit_draft_errors_total"):
        assert "--mtp" in helps[name] and "--draft-model" in helps[name], helps[name]
