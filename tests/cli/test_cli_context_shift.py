"""toolkit run --context-shift [--keep N] (issue 22): generation past a full context, as
llama-cli's; --json and -v report the shifts; without the flag a full context still stops;
a session written after shifts holds the tokens the memory holds.
Models: converted at test time from tests/fixtures/hf/* (F32)."""
from __future__ import annotations

import json

import pytest

from cli_runner import cli
from families import names

pytestmark = pytest.mark.native

FAMILIES = names("cli_shift")
PROMPT = "3,14,15,92,65,35,89,79"


def run_json(monkeypatch, capsys, model, *args) -> dict:
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(model), "--temp", "0", "--tokens", PROMPT,
                       "--json", *args)
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.parametrize("name", FAMILIES)
def test_500_tokens_in_a_64_token_context(monkeypatch, capsys, hf_f32, name):
    r = run_json(monkeypatch, capsys, hf_f32(name), "-c", "64", "--context-shift", "-n", "500", "--ignore-eos")
    assert r["stop_reason"] == "n_predict" and len(r["tokens"]) == 500
    # --keep 0 keeps the BOS only when the model adds one; each shift drops half of the rest
    assert r["n_shifts"] >= (8 + 500 - 64) // 32 + 1


def test_without_the_flag_a_full_context_stops(monkeypatch, capsys, hf_f32):
    r = run_json(monkeypatch, capsys, hf_f32("qwen35-tiny"), "-c", "32", "-n", "100", "--ignore-eos")
    assert r["stop_reason"] == "ctx_full" and "n_shifts" not in r and len(r["tokens"]) == 32 - 8 + 1


def test_keep_verbose_and_session(monkeypatch, capsys, hf_f32, tmp_path):
    from toolkit.runtime import Context, Model
    from toolkit.runtime.session import read_session
    model, sess = hf_f32("bamba-tiny"), tmp_path / "s.session"
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(model), "--temp", "0", "--tokens", PROMPT,
                       "-c", "32", "--context-shift", "--keep", "-1", "-n", "60", "--ignore-eos", "-v",
                       "--session", str(sess), "--no-display-prompt")
    assert rc == 0, err
    assert "context shifts: " in err
    n = int(err.split("context shifts: ")[1].split()[0])
    assert n >= 2
    held, _ = read_session(sess)
    assert held[:8] == [int(t) for t in PROMPT.split(",")]          # --keep -1: the whole prompt
    with Model(model) as m, Context(m, n_ctx=32) as ctx:
        from toolkit.runtime.session import restore_session
        assert restore_session(ctx, sess, held + [1])[0] == len(held)
        assert ctx.memory.seq_pos_max(0) == len(held) - 1 < 32


def test_keep_is_checked(monkeypatch, capsys, hf_f32):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(hf_f32("bamba-tiny")), "--tokens", PROMPT,
                       "--keep", "-2", "--context-shift")
    assert rc != 0 and "--keep" in err and "Traceback" not in err


def test_chat_answer_past_a_full_context(monkeypatch, capsys, tmp_path):
    """-cnv --context-shift: an answer goes on past a full context; --json and -v count the
    shifts of the turn."""
    import pathlib
    from toolkit.runtime.chat import CHATML
    tpl = tmp_path / "chatml.jinja"
    tpl.write_text(CHATML)
    demo = pathlib.Path(__file__).resolve().parents[2] / "toolkit" / "data" / "default.gguf"
    rc, out, err = cli(monkeypatch, capsys, "run", "-cnv", "-m", str(demo), "--chat-template", str(tpl),
                       "--temp", "0", "-n", "120", "--ignore-eos", "-c", "96", "--context-shift", "--json",
                       "-v", "-t", "2", "-ub", "16", stdin="Hi\n")
    assert rc == 0, err
    t = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert len(t) == 1 and len(t[0]["tokens"]) == 120 and t[0]["n_shifts"] >= 1
    assert f"context shifts: {t[0]['n_shifts']}" in err


def test_chat_turns_go_on_after_a_shift(monkeypatch, capsys, tmp_path, hf_f32):
    """-cnv --context-shift over several turns: once a shift has dropped part of the history (or
    the whole rendering no longer fits), a turn appends only the text it adds to the rendering
    to what the memory holds, as llama-cli does, shifting first when needed; the memory's
    positions stay contiguous; /regen is refused after a shift with one line and the chat goes
    on.  Without --context-shift the second turn is refused as before."""
    from toolkit.runtime.chat import CHATML
    tpl = tmp_path / "chatml.jinja"
    tpl.write_text(CHATML)
    model = hf_f32("qwen35-tiny")
    args = ("run", "-cnv", "-m", str(model), "--chat-template", str(tpl), "--temp", "0", "-n", "80",
            "--ignore-eos", "-c", "160", "--json", "-t", "1")
    rc, out, err = cli(monkeypatch, capsys, *args, "--context-shift",
                       stdin="Hello\nWhat is a list?\n/regen\nAnd a dict?\n")
    assert rc == 2, err           # piped input with a refused command (/regen): the chat goes on, exit 2
    turns = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert len(turns) == 3, (out, err)
    assert all(len(t["tokens"]) == 80 for t in turns)
    assert sum(t["n_shifts"] for t in turns) >= 2
    assert all(t["n_reused"] > 0 for t in turns[1:])            # later turns decode only their new text
    assert all(t["n_decoded"] < 60 for t in turns[1:])
    assert "/regen: not after a context shift" in err and "Traceback" not in err
    rc, out, err = cli(monkeypatch, capsys, *args, stdin="Hello\nWhat is a list?\n")
    assert "the conversation has" in err and "--context-shift" in err



def test_chat_first_message_over_the_context_with_context_shift(monkeypatch, capsys, tmp_path):
    """A first message longer than the context under --context-shift: one line that does not
    tell the user to add the --context-shift they gave (a shift only makes room for new text
    after a history)."""
    import pathlib
    from toolkit.runtime.chat import CHATML
    tpl = tmp_path / "chatml.jinja"
    tpl.write_text(CHATML)
    demo = pathlib.Path(__file__).resolve().parents[2] / "toolkit" / "data" / "default.gguf"
    rc, out, err = cli(monkeypatch, capsys, "run", "-cnv", "-m", str(demo), "--chat-template", str(tpl),
                       "--temp", "0", "-n", "4", "-c", "24", "--context-shift", stdin="Hello there\n")
    assert rc == 2 and "the conversation has" in err and "raise --ctx-size" in err, err
    assert "--context-shift" not in err and "Traceback" not in err, err

def test_chat_memory_stays_contiguous_after_shifts(hf_f32):
    """Chat (the library): after turns with shifts, the sequence holds exactly the tokens Chat
    says it holds, at positions 0 .. len - 1."""
    from toolkit.runtime import Context, Model
    from toolkit.runtime.chat import CHATML, Chat, ChatTemplate
    from toolkit.runtime.sampling import Sampler, SamplerParams
    from toolkit.runtime.tokenizer import Tokenizer
    with Model(hf_f32("qwen35moe-tiny"), n_threads=1) as m, Context(m, n_ctx=160, n_checkpoints=4) as ctx:
        tok = Tokenizer.from_gguf(m.gguf)
        chat = Chat(ctx, tok, ChatTemplate(CHATML, "chatml"), Sampler(SamplerParams(temp=0.0)))
        shifts = 0
        for user in ("Hi", "Tell me more", "And then?", "Why?"):
            t = chat.send(user, 60, context_shift=True, n_keep=0, ignore_eos=True)
            shifts += t.n_shifts
            assert ctx.memory.seq_pos_max(0) + 1 == len(chat.held) <= 160
        assert shifts >= 2 and chat.shifted
