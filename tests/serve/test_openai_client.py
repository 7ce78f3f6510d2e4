"""The official ``openai`` client against ``toolkit serve`` on the demo model: a chat completion,
a streamed one, a completion, logprobs, a JSON-schema response format, the model list."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.native
openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def client():
    from serve_util import DEMO, ServerThread
    s = ServerThread(DEMO, n_slots=2, n_ctx=1024)
    yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    s.close()


MSGS = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "Write a loop"}]


def test_chat_completion_streamed_equals_whole(client):
    whole = client.chat.completions.create(model="default", messages=MSGS, max_tokens=12, temperature=0)
    c = whole.choices[0]
    assert c.message.role == "assistant" and c.message.content
    assert c.finish_reason == "length"
    assert whole.usage.completion_tokens == 12
    assert whole.usage.prompt_tokens > 10
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + 12
    stream = client.chat.completions.create(model="default", messages=MSGS, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == c.message.content
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 12
    # the same prompt again: everything but its last token comes from the slot's memory
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == whole.usage.prompt_tokens - 1


def test_completion_and_logprobs(client):
    r = client.completions.create(model="default", prompt="def fibonacci(n):", max_tokens=8, temperature=0,
                                  logprobs=3)
    c = r.choices[0]
    assert c.text and r.usage.completion_tokens == 8
    lp = c.logprobs
    assert len(lp.tokens) == 8 and len(lp.token_logprobs) == 8 and len(lp.top_logprobs) == 8
    for tok, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) <= 3 and v <= 0
        assert max(top.values()) == pytest.approx(v)     # greedy: the chosen token is the most likely
    assert "".join(lp.tokens) == c.text
    chat = client.chat.completions.create(model="default", messages=MSGS, max_tokens=4, temperature=0,
                                          logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == 4 and all(len(t.top_logprobs) == 2 for t in content)
    assert "".join(t.token for t in content) == chat.choices[0].message.content


def test_sampling_with_seed_repeats(client):
    kw = dict(model="default", prompt="import os\n", max_tokens=10, temperature=1.0, top_p=0.9, seed=7)
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    assert a == b


def test_response_format_json_schema(client):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    r = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Answer"}],
                                       max_tokens=32, temperature=0.7, seed=3,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "a", "schema": schema}})
    out = json.loads(r.choices[0].message.content)
    assert isinstance(out["ok"], bool) and set(out) == {"ok"}


def test_models_and_stop(client):
    ms = client.models.list()
    assert [m.id for m in ms.data] == ["default.gguf"]
    free = client.completions.create(model="default", prompt="def f(x):\n", max_tokens=24, temperature=0).choices[0].text
    stop = free.strip()[2:4]
    assert stop and stop in free
    cut = client.completions.create(model="default", prompt="def f(x):\n", max_tokens=24, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == free[:free.index(stop)]


def test_streamed_stop_is_held_back_and_cut(client):
    free = client.completions.create(model="default", prompt="def f(x):\n", max_tokens=24, temperature=0).choices[0].text
    stop = free.strip()[2:6]     # several characters: its first ones arrive before it is complete
    whole = client.completions.create(model="default", prompt="def f(x):\n", max_tokens=24, temperature=0,
                                      stop=[stop]).choices[0].text
    chunks = list(client.completions.create(model="default", prompt="def f(x):\n", max_tokens=24, temperature=0,
                                            stop=[stop], stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole == free[:free.index(stop)]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
