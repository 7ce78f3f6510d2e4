"""Prefix reuse across requests: a 5-turn chat sent as growing message lists decodes only the
new turn each time (usage.prompt_tokens_details.cached_tokens), and every answer equals a
fresh server's; on the demo model and on a hybrid fixture (recurrent rollback to checkpoints)."""
from __future__ import annotations

import httpx
import pytest

from serve_util import DEMO

from toolkit.runtime.session import common_prefix

pytestmark = pytest.mark.native

TURNS = ["Write a loop", "Now in reverse", "Add a docstring", "What does it return?", "Thanks"]


def ask(url: str, msgs: list[dict]) -> dict:
    r = httpx.post(url + "/v1/chat/completions", timeout=120,
                   json={"messages": msgs, "max_tokens": 10, "temperature": 0, "return_tokens": True})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("which", ["demo", "bamba-tiny"])
def test_five_turns_decode_only_the_new_turn(which, start_server, hf_f32):
    path = DEMO if which == "demo" else hf_f32("bamba-tiny")
    s = start_server(path, n_slots=2, n_ctx=2048, n_checkpoints=4, checkpoint_every=0)
    msgs = [{"role": "system", "content": "Be brief."}]
    held: list[int] = []
    for i, turn in enumerate(TURNS):
        msgs.append({"role": "user", "content": turn})
        prompt = s.svc.template.encode(s.svc.tok, msgs)
        ckpts = s.svc.engine.ctx.memory.checkpoints(0)   # the server is idle: slot 0 holds the chat
        out = ask(s.url, msgs)
        u = out["usage"]
        cached = u["prompt_tokens_details"]["cached_tokens"]
        assert u["prompt_tokens"] == len(prompt)
        # the slot held the last prompt and the answer (less its last token when that was never
        # fed back: a length stop).  The new rendering starts with all of it when the answer's
        # text tokenizes back to the same ids (the demo model); a random fixture writes stray
        # UTF-8 bytes that do not, and the slot rolls back to its checkpoint at the end of the
        # last prompt.  Either way only what follows the shared prefix is decoded, from the
        # newest checkpoint inside it when the slot must roll back.
        shared = common_prefix(held, prompt)
        if which == "demo":
            assert cached == shared == len(held), f"turn {i}: reused {cached} of the {len(held)} held"
        elif shared == len(held):
            assert cached == shared, f"turn {i}: reused {cached} of the {len(held)} held"
        else:
            want = max([q + 1 for q in ckpts if q + 1 <= shared], default=0)
            assert cached == want, f"turn {i}: reused {cached}, the prompt shares {shared}, checkpoints {ckpts}"
        assert out["timings"]["cache_n"] == cached and out["timings"]["prompt_n"] == len(prompt) - cached
        answer = out["choices"][0]["message"]["content"]
        gen = out["choices"][0]["tokens"]
        held = prompt + (gen[:-1] if out["choices"][0]["finish_reason"] == "length" else gen)
        fresh = start_server(path, n_slots=1, n_ctx=1024)
        assert ask(fresh.url, msgs)["choices"][0]["message"]["content"] == answer, f"turn {i}"
        fresh.close()
        msgs.append({"role": "assistant", "content": answer})
    m = httpx.get(s.url + "/metrics").text
    assert "toolkit_prompt_tokens_reused_total" in m
