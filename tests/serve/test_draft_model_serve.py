"""Speculative decoding per slot with a draft model (``toolkit serve --draft-model``): concurrent
greedy streams on several slots get, token for token, what each prompt gets alone without
drafts, with the target itself as the draft (every draft accepted: the draft's sequences hold
exactly the slots' tokens, rolled back after each rejection-free step) and with an early exit of
it (drafts kept and rejected: the draft's sequences are rolled back); a request cancelled
mid-stream leaves its slot and its draft sequence fit for the next one; sampled requests are
reproducible from their seed; the counters reach ``timings`` and /metrics; a draft whose
vocabulary differs is refused in one line before the server starts."""
from __future__ import annotations

import importlib.util

import httpx
import pytest

from serve_util import DEMO, ROOT, greedy_alone, spec_prompts, sse_events, stream_concurrent
from stats_util import gammq

UBATCH = 40
N_GEN = 40
N_SEEDS = 1000


@pytest.fixture(scope="module")
def early2(tmp_path_factory):
    """The demo model cut to its first 2 of 4 blocks (bench/speculative.py --make-early-exit):
    the same vocabulary, other logits."""
    spec = importlib.util.spec_from_file_location("bench_speculative", ROOT / "bench" / "speculative.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path_factory.mktemp("draft") / "demo-early2.gguf"
    mod.make_early_exit(str(DEMO), 2, str(out))
    return out


def _timings(url: str, prompt: str, n: int, **kw) -> dict:
    r = httpx.post(url + "/v1/completions", timeout=120,
                   json={"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
                         "return_tokens": True, **kw})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.native
@pytest.mark.parametrize("which", ["self", "early2", "bamba-moe"])
def test_draft_model_streams_equal_plain_greedy(which, start_server, hf_f32, early2):
    """4 prompts at once on 3 slots (a slot is reused).  self: every draft is accepted (a
    deterministic count: a draft sequence that kept a rejected token, or lost its place, would
    draft other tokens); early2 / granitehybrid-moe-tiny drafting for bamba-tiny (a hybrid
    draft: KV cells and recurrent state rolled back): drafts rejected (early2: some kept)."""
    target = hf_f32("bamba-tiny") if which == "bamba-moe" else DEMO
    draft = {"self": DEMO, "early2": early2, "bamba-moe": hf_f32("granitehybrid-moe-tiny")}[which]
    prompts = spec_prompts()
    want = greedy_alone(target, prompts, N_GEN, UBATCH)
    s = start_server(target, n_slots=3, n_ctx=3 * 1024, n_ubatch=UBATCH, draft_max=4, draft_model=str(draft))
    got = stream_concurrent(s.url, prompts, N_GEN)
    for p, w, g in zip(prompts, want, got):
        assert g == w, f"{which} {p[:30]!r}: with a draft model {g} != plain {w}"
    st = s.svc.engine.stats()
    assert st["draft_tokens"] > 0, "no draft was sent"
    if which == "self":
        assert st["draft_tokens_accepted"] == st["draft_tokens"], st
        # a full draft of 4 is kept with the slot's own token: 5 tokens per verify at best
        assert st["draft_tokens"] >= len(prompts) * (N_GEN - 2) * 4 // 5 - 4 * len(prompts), st
    elif which == "early2":
        assert 0 < st["draft_tokens_accepted"] < st["draft_tokens"], st
    else:                           # random weights of another model: (nearly) never agree
        assert st.get("draft_tokens_accepted", 0) < st["draft_tokens"], st
    assert st["slots_busy"] == 0 and not st.get("draft_errors"), st
    t = _timings(s.url, prompts[2], 12)["timings"]        # per request too
    assert t["draft_n"] > 0 and t["predicted_n"] == 12
    if which == "self":
        assert t["draft_n_accepted"] == t["draft_n"], t


@pytest.mark.native
def test_cancelled_request_then_the_same_slot_is_exact(start_server):
    """One slot: a stream cancelled after a few tokens (its draft sequence holds drafts past what
    the slot kept), then requests that share its prompt (prefix reuse rolls both sequences back
    to checkpoints) and one that does not: each answer equals the plain one, and with the target
    as its own draft every draft is still accepted."""
    prompts = spec_prompts()
    a, b = prompts[0], prompts[1]
    want = greedy_alone(DEMO, [a, b], N_GEN, UBATCH)
    s = start_server(DEMO, n_slots=1, n_ctx=32768, n_ubatch=UBATCH, draft_max=4, draft_model=str(DEMO))   # the stream outlasts the client
    body = {"prompt": a, "max_tokens": 30000, "temperature": 0, "ignore_eos": True, "stream": True,
            "return_tokens": True}
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", s.url + "/v1/completions", json=body) as r:
            n = 0
            for line in r.iter_lines():
                n += line.startswith("data: ")
                if n >= 6:
                    break
    for p, w in ((a, want[0]), (a, want[0]), (b, want[1])):
        out = _timings(s.url, p, N_GEN)
        assert out["choices"][0]["tokens"] == w
        t = out["timings"]
        assert t["draft_n"] > 0 and t["draft_n_accepted"] == t["draft_n"], t
    st = s.svc.engine.stats()
    assert st["cancelled"] == 1 and st["slots_busy"] == 0, st


@pytest.mark.native
def test_sampled_requests_reproducible_and_counted(start_server, early2):
    s = start_server(DEMO, n_slots=2, n_ctx=2048, n_ubatch=UBATCH, draft_max=4, draft_model=str(early2))
    body = {"prompt": spec_prompts()[0], "max_tokens": 24, "temperature": 0.8, "seed": 7, "ignore_eos": True}
    with httpx.Client(timeout=120) as c:
        r1 = c.post(s.url + "/v1/completions", json=body).json()
        r2 = c.post(s.url + "/v1/completions", json=dict(body, stream=True, return_tokens=True))
        events = sse_events(r2)
        m = c.get(s.url + "/metrics").text
    assert r1["usage"]["completion_tokens"] == 24
    t = r1["timings"]
    assert t["draft_n"] > 0 and t["draft_n"] >= t["draft_n_accepted"] >= 0
    assert "".join(e["choices"][0].get("text", "") for e in events) == r1["choices"][0]["text"]
    st = s.svc.engine.stats()
    assert f"toolkit_draft_tokens_total {st['draft_tokens']}" in m, m
    assert st["draft_tokens"] >= t["draft_n"]


def test_cli_draft_model_flags(monkeypatch, capsys, hf_f32):
    """A draft with another vocabulary: one line naming it, exit 2 (as toolkit run), the server
    never listens; --draft-model with --lookup: run's rule and message."""
    from cli_runner import cli
    rc, out, _ = cli(monkeypatch, capsys, "serve", "--help")
    assert rc == 0 and "--draft-model" in out
    other = str(hf_f32("mamba-tiny"))
    rc, out, err = cli(monkeypatch, capsys, "serve", "-m", str(DEMO), "--port", "0", "-md", other)
    assert rc == 2 and f"--draft-model {other}" in err and "vocabulary" in err, err
    assert "listening" not in err and len(err.strip().splitlines()) == 2, err   # "loading ...", the error
    for args, msg in ((["-md", str(DEMO), "--lookup"], "choose one draft source"),
                      (["-md", "/nonexistent.gguf"], "--draft-model /nonexistent.gguf: no such file"),
                      (["--draft-max", "4"], "--draft-max needs a draft source: --lookup, --mtp or --draft-model FILE")):
        rc, _, err = cli(monkeypatch, capsys, "serve", "--port", "0", *args)
        assert rc == 2 and msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, (args, err)


@pytest.mark.native
def test_context_full_and_json_schema_as_plain(start_server):
    """A slot of 96 tokens filled to the end (drafts cut to the room left), and a
    json_schema-constrained answer (the draft model drafts under the slot's grammar, so the
    target itself as draft has every draft kept): both as a plain server gives them."""
    kw = dict(n_slots=2, n_ctx=192, n_ubatch=UBATCH)
    plain = start_server(DEMO, **kw)
    spec = start_server(DEMO, draft_max=8, draft_model=str(DEMO), **kw)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    bodies = [{"prompt": spec_prompts()[1], "temperature": 0, "ignore_eos": True, "return_tokens": True},
              {"prompt": "x = ", "max_tokens": 24, "temperature": 0, "return_tokens": True,
               "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}]
    for body in bodies:
        a = httpx.post(plain.url + "/v1/completions", json=body, timeout=120).json()
        b = httpx.post(spec.url + "/v1/completions", json=body, timeout=120).json()
        assert b["choices"][0]["tokens"] == a["choices"][0]["tokens"], body
        assert b["choices"][0]["finish_reason"] == a["choices"][0]["finish_reason"]
        assert b["timings"]["draft_n"] > 0
    assert a["choices"][0]["text"].startswith("{")
    # the draft (the target itself) drafts under the slot's grammar: every draft is kept
    assert b["timings"]["draft_n_accepted"] == b["timings"]["draft_n"], b["timings"]
    full = httpx.post(spec.url + "/v1/completions", json=bodies[0], timeout=120).json()
    assert full["usage"]["total_tokens"] == 96 and full["choices"][0]["finish_reason"] == "length", full["usage"]
    st = spec.svc.engine.stats()
    assert not st.get("draft_errors") and st["slots_busy"] == 0, st


@pytest.mark.native
def test_sampled_tokens_follow_the_target(early2):
    """With sampling, a slot's tokens after a verify call with draft-model drafts are distributed
    as the target's own (speculative sampling with the draft's q, row by row): the Engine itself
    (no HTTP), two slots, N_SEEDS seeds, the demo model drafted for by its early exit, where
    their distributions overlap (drafts are kept and rejected); Pearson's chi-square of the
    (token 1, token 2) pairs against the target's p(t1) p(t2 | t1) (p-value > 0.01).  Token 2
    comes from a verify row with a draft."""
    import collections
    import threading

    from toolkit.runtime import Context, Model
    from toolkit.runtime.sampling import Sampler, SamplerParams
    from toolkit.runtime.speculative import open_draft_model
    from toolkit.runtime.tokenizer import Tokenizer
    from toolkit.serve.engine import Engine, Job

    target = Model(str(DEMO), n_threads=2)
    tok = Tokenizer.from_gguf(target.gguf)
    dm = open_draft_model(str(early2), tok, 2)
    eng = Engine(target, tok, n_slots=2, n_ctx=2 * 64, n_threads=2, draft_max=2, draft_model=dm)
    try:
        prompt = tok.encode("The list of", add_special=True, parse_special=True)   # draft and target overlap here
        params = dict(temp=1.5, top_k=6, top_p=1.0, min_p=0.0)
        free = threading.Semaphore(8)
        jobs = []
        for seed in range(N_SEEDS):
            free.acquire()
            j = Job(prompt, 4, SamplerParams(seed=seed, **params), ignore_eos=True,
                    on_event=lambda ev: free.release() if ev[0] in ("done", "error") else None)
            eng.submit(j)
            jobs.append(j)
        for _ in range(8):
            free.acquire()
        assert all(j.finish_reason == "length" and len(j.tokens) == 4 for j in jobs)
        st = eng.stats()
        assert st["draft_tokens"] >= 2 * N_SEEDS and st["draft_tokens_accepted"] > 0, st   # 2 drafts after token 1
        # the target's joint distribution of (token 1, token 2): p(t1) p(t2 | t1), from plain decodes
        sampler = Sampler(SamplerParams(**params))
        joint: dict[tuple[int, int], float] = {}
        with Context(target, n_ctx=64) as c:
            ids1, p1 = sampler.candidates(c.decode(prompt, logits="last")[-1])
        for t1, q1 in zip(ids1.tolist(), p1.tolist()):
            with Context(target, n_ctx=64) as c:
                ids2, p2 = sampler.candidates(c.decode(prompt + [t1], logits="last")[-1])
            joint.update({(t1, t2): q1 * q2 for t2, q2 in zip(ids2.tolist(), p2.tolist())})
        seen = collections.Counter((j.tokens[0], j.tokens[1]) for j in jobs)
        assert set(seen) <= set(joint), "a pair of probability 0 was drawn"
        # Pearson's chi-square, the cells expected fewer than 5 times pooled into one
        big = [k for k, v in joint.items() if v * N_SEEDS >= 5]
        exp = [joint[k] * N_SEEDS for k in big] + [N_SEEDS * (1 - sum(joint[k] for k in big))]
        obs = [seen[k] for k in big] + [N_SEEDS - sum(seen[k] for k in big)]
        stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp) if e > 0)
        assert gammq((len(exp) - 1 - (exp[-1] <= 0)) / 2.0, stat / 2.0) > 0.01, (stat, len(exp))
    finally:
        eng.close()
        target.close()
