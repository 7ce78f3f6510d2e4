"""toolkit serve --mtp: speculative decoding per slot with the model's own MTP head
(toolkit/runtime/mtp.py; one block sequence per slot, the slots' draft steps batched).  Concurrent
greedy streams on 3 slots (4 prompts: a slot is reused) get, token for token, what each prompt gets
alone without drafts: with the block's own drafts (random weights: rejected) and with forced
drafts (each slot's reference continuation, every second one wrong), so that the slots' block
caches are rolled back with accepted and rejected drafts in the same calls."""
from __future__ import annotations

import pytest

from serve_util import greedy_alone, spec_prompts, stream_concurrent

UBATCH = 40
N_GEN = 32


@pytest.mark.native
@pytest.mark.parametrize("forced", [False, True])
@pytest.mark.parametrize("name", ["qwen35-mtp-tiny", "qwen3next-mtp-tiny", "glm5next-mtp-tiny",
                                  "bailinghybrid-mtp-tiny"])
def test_mtp_streams_equal_plain_greedy(start_server, hf_f32, name, forced):
    from toolkit.runtime import Model
    from toolkit.runtime.tokenizer import Tokenizer
    target = hf_f32(name)
    prompts = spec_prompts()
    want = greedy_alone(target, prompts, N_GEN, UBATCH)
    with Model(str(target)) as m:
        tok = Tokenizer.from_gguf(m.gguf)
        ids = [tok.encode(p, add_special=True, parse_special=True) for p in prompts]
    s = start_server(target, n_slots=3, n_ctx=3 * 1024, n_ubatch=UBATCH, draft_max=3, mtp=True)
    if forced:
        def pick(history, j):
            i = max((i for i in range(len(ids)) if history[:len(ids[i])] == ids[i]), key=lambda i: len(ids[i]))
            n = len(history) - len(ids[i]) + j
            t = want[i][n] if n < len(want[i]) else 0
            return t if j % 2 == 0 else (t + 1) % 512
        s.svc.engine.spec.draft.pick = pick
    got = stream_concurrent(s.url, prompts, N_GEN)
    for p, w, g in zip(prompts, want, got):
        assert g == w, f"{name} {p[:30]!r}: with --mtp {g} != plain {w}"
    st = s.svc.engine.stats()
    assert st["draft_tokens"] > 0, "no draft was sent"
    if forced:
        assert 0 < st["draft_tokens_accepted"] < st["draft_tokens"], st


@pytest.mark.native
def test_start_up_memory_counts_the_mtp_head(start_server, hf_f32, monkeypatch, capsys):
    # serve's start-up line / --json left the MTP head out; info --memory --mtp counts it
    import json
    from cli_runner import cli
    from toolkit.cli.cmd_serve import _mtp_memory
    target = hf_f32("qwen35-mtp-tiny")
    s = start_server(target, n_slots=1, n_ctx=1024, n_ubatch=UBATCH, draft_max=3, mtp=True)
    got = _mtp_memory(s.svc.engine)
    rc, out, err = cli(monkeypatch, capsys, "info", str(target), "--memory", "--mtp", "-c", "1024", "--json")
    assert rc == 0, err
    want = json.loads(out)["mtp"]
    assert got is not None and got["weights"] == want["weights"] > 0 and got["kv"] == want["kv"], (got, want)
