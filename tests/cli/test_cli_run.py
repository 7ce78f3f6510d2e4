"""`toolkit run` and generate(): the real C runtime on llama.cpp's mamba-tiny GGUF, plus a
scripted fake context for the stopping rules."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from toolkit.errors import InputError
from toolkit.gguf_io import GGUFFile
from toolkit.runtime.generate import generate
from toolkit.runtime.sampling import Sampler, SamplerParams
from toolkit.runtime.tokenizer import Tokenizer
from cli_runner import cli

MODEL = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "mamba-tiny.f32.gguf"
PROMPT = "Hello world, the cat"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_gguf(GGUFFile(MODEL))




def run_json(monkeypatch, capsys, *args) -> dict:
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), "--json", *args)
    assert rc == 0, err
    return json.loads(out)


# ---------------------------------------------------------------------------------------------
# generate() with a scripted context
# ---------------------------------------------------------------------------------------------
class ScriptedContext:
    """Logits that make greedy sampling emit ``script`` in order (then token 0 forever)."""

    def __init__(self, n_vocab: int, script: list[int], n_ctx: int = 4096, interrupt_after: int | None = None):
        self.n_vocab, self.script, self.n_ctx = n_vocab, script, n_ctx
        self.interrupt_after = interrupt_after
        self.calls = 0
        self.n_gen = 0

    def decode(self, tokens, seq_id=0, logits="last"):
        self.calls += 1
        if self.interrupt_after is not None and self.calls > self.interrupt_after:
            raise KeyboardInterrupt
        nxt = self.script[self.n_gen] if self.n_gen < len(self.script) else 0
        self.n_gen += 1
        row = np.zeros((1, self.n_vocab), np.float32)
        row[0, nxt] = 10.0
        if logits == "all":
            return np.repeat(row, len(tokens), axis=0)
        return row


GREEDY = Sampler(SamplerParams(temp=0.0))


def test_generate_streams_whole_characters_and_stops_at_eog(tok):
    text = "🦙 你好 ✅"
    ids = tok.encode(text, add_special=False)
    assert len(ids) > 4
    eos = tok.eos_id
    ctx = ScriptedContext(tok.n_vocab, ids + [eos, 5, 6])
    chunks: list[str] = []
    res = generate(ctx, tok, [1, 2], n_predict=100, sampler=GREEDY, on_text=chunks.append)
    assert res.tokens == ids and res.stop_reason == "eog"
    assert res.text == "".join(chunks) == text
    assert all("\ufffd" not in c for c in chunks)
    assert len(chunks) < len(ids)          # pieces of split characters were held back, not emitted
    assert res.timings.n_prompt == 2 and res.timings.n_gen == len(ids)


def test_generate_n_predict_and_ctx_full(tok):
    res = generate(ScriptedContext(tok.n_vocab, [7] * 50), tok, [1], n_predict=5, sampler=GREEDY)
    assert res.tokens == [7] * 5 and res.stop_reason == "n_predict"
    res = generate(ScriptedContext(tok.n_vocab, [7] * 50), tok, [1], n_predict=0, sampler=GREEDY)
    assert res.tokens == [] and res.text == ""
    # n_ctx 4, prompt of 2: positions 2 and 3 can be decoded, the 3rd token sampled fills the context
    res = generate(ScriptedContext(tok.n_vocab, [7] * 50, n_ctx=4), tok, [1, 2], n_predict=-1, sampler=GREEDY)
    assert res.stop_reason == "ctx_full" and len(res.tokens) == 3
    with pytest.raises(InputError, match="context size 4"):
        generate(ScriptedContext(tok.n_vocab, [], n_ctx=4), tok, [1] * 5, n_predict=1, sampler=GREEDY)
    with pytest.raises(InputError, match="empty"):
        generate(ScriptedContext(tok.n_vocab, []), tok, [], n_predict=1, sampler=GREEDY)


def test_generate_interrupted_keeps_partial(tok):
    ctx = ScriptedContext(tok.n_vocab, [40, 41, 42, 43, 44], interrupt_after=3)
    res = generate(ctx, tok, [1], n_predict=10, sampler=GREEDY)
    assert res.interrupted and res.tokens == [40, 41, 42]
    assert res.text == tok.decode([40, 41, 42], strip_space_prefix=False)


# ---------------------------------------------------------------------------------------------
# `toolkit run` on the real runtime
# ---------------------------------------------------------------------------------------------
def reference_greedy(prompt_ids: list[int], n: int) -> tuple[np.ndarray, list[int]]:
    """Prompt logits and greedy continuation computed directly with Context.decode."""
    from toolkit.runtime import Context, Model
    with Model(str(MODEL)) as m:
        ctx = Context(m, n_ctx=256)
        logits = ctx.decode(prompt_ids, seq_id=0, logits="all")
        out, last = [], logits[-1]
        for _ in range(n):
            t = int(np.argmax(last))
            out.append(t)
            last = ctx.decode([t], seq_id=0, logits="last")[-1]
        ctx.close()
    return logits, out


def test_logits_out_equals_decode_all(monkeypatch, capsys, tmp_path):
    ids = [5, 17, 300, 42, 8, 511, 0, 77]
    out = tmp_path / "logits.npy"
    d = run_json(monkeypatch, capsys, "--tokens", ",".join(map(str, ids)), "-n", "6", "--temp", "0",
                 "--logits-out", str(out), "-b", "3")
    arr = np.load(out)
    assert arr.dtype == np.float32 and arr.shape == (len(ids), 512)
    ref, greedy = reference_greedy(ids, 6)
    np.testing.assert_array_equal(arr, ref)
    assert d["prompt_tokens"] == ids and d["logits_out"] == str(out)
    assert d["tokens"] == greedy[: len(d["tokens"])] and len(d["tokens"]) >= 1   # sampled from the last row
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


def test_json_fields_and_greedy_matches_step_by_step(monkeypatch, capsys, tok):
    d = run_json(monkeypatch, capsys, PROMPT, "-n", "12", "--temp", "0")
    assert set(d) >= {"prompt_tokens", "tokens", "text", "timings", "stop_reason", "sampling"}
    assert d["prompt_tokens"] == tok.encode(PROMPT, add_special=True, parse_special=True)
    _, want = reference_greedy(d["prompt_tokens"], 12)
    # greedy stops early only at an end-of-generation token
    if tok.eos_id in want:
        want = want[: want.index(tok.eos_id)]
    assert d["tokens"] == want
    assert d["text"] == tok.decode(d["tokens"], strip_space_prefix=False)
    t = d["timings"]
    assert t["n_prompt"] == len(d["prompt_tokens"]) and t["n_gen"] == len(d["tokens"])
    assert t["prompt_tokens_per_s"] > 0 and t["gen_tokens_per_s"] > 0
    again = run_json(monkeypatch, capsys, PROMPT, "-n", "12", "--temp", "0")
    assert again["tokens"] == d["tokens"]


def test_seed_reproducible(monkeypatch, capsys):
    args = (PROMPT, "-n", "24", "--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0")
    a = run_json(monkeypatch, capsys, *args, "--seed", "7")
    b = run_json(monkeypatch, capsys, *args, "--seed", "7")
    c = run_json(monkeypatch, capsys, *args, "--seed", "8")
    assert a["tokens"] == b["tokens"] and a["sampling"]["seed"] == 7
    assert a["tokens"] != c["tokens"]


def test_streaming_output_and_display_prompt(monkeypatch, capsys, tok):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), PROMPT, "-n", "8", "--temp", "0")
    assert rc == 0 and out.startswith(PROMPT)
    assert "prompt:" in err and "t/s" in err and "generation:" in err
    rc, out2, _ = cli(monkeypatch, capsys, "run", "-m", str(MODEL), PROMPT, "-n", "8", "--temp", "0",
                      "--no-display-prompt")
    assert rc == 0 and out == PROMPT + out2
    rc, out3, _ = cli(monkeypatch, capsys, "run", "-m", str(MODEL), "-", "-n", "8", "--temp", "0",
                      "--no-display-prompt", stdin=PROMPT)
    assert rc == 0 and out3 == out2


@pytest.mark.parametrize("args,msg", [
    (["-m", "no/such/model.gguf", "hi"], "no such model file"),
    (["-m", str(MODEL), "--tokens", "1,512"], "outside the vocabulary [0, 512)"),
    (["-m", str(MODEL), "--tokens", "1,x"], "not an integer"),
    (["-m", str(MODEL), "-c", "3", "one two three four five"], "more than --ctx-size 3"),
    (["-m", str(MODEL), "hi", "--tokens", "1"], "one prompt source, not PROMPT and --tokens"),
    (["-m", str(MODEL)], "no prompt"),
    (["-m", str(MODEL), "hi", "--top-p", "2"], "--top-p"),
    (["-m", str(MODEL), "hi", "-n", "-5"], "--n-predict"),
    (["-m", str(MODEL), "hi", "--logits-out", "/no/such/dir/x.npy"], "does not exist"),
])
def test_bad_input_one_line_exit_2(monkeypatch, capsys, args, msg):
    rc, out, err = cli(monkeypatch, capsys, "run", *args)
    assert rc == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and msg in lines[0] and "Traceback" not in err


def test_missing_default_model_says_pass_m(monkeypatch, capsys, tmp_path):
    import toolkit.cli.cmd_run as cmd_run
    monkeypatch.setattr(cmd_run, "DEFAULT_MODEL", tmp_path / "default.gguf")
    rc, _, err = cli(monkeypatch, capsys, "run", "hi")
    assert rc == 2 and "-m/--model" in err
    monkeypatch.setattr(cmd_run, "DEFAULT_MODEL", MODEL)
    rc, out, _ = cli(monkeypatch, capsys, "run", "hi", "-n", "2", "--json")
    assert rc == 0 and json.loads(out)["model"] == str(MODEL)


def test_interrupt_in_process_exit_130_with_partial_json(monkeypatch, capsys):
    from toolkit.runtime import Context
    real = Context.decode
    calls = {"n": 0}

    def decode(self, tokens, seq_id=0, logits="last"):
        calls["n"] += 1
        if calls["n"] > 4:
            raise KeyboardInterrupt
        return real(self, tokens, seq_id=seq_id, logits=logits)

    monkeypatch.setattr(Context, "decode", decode)
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), PROMPT, "-n", "50", "--temp", "0", "--json")
    assert rc == 130 and "interrupted" in err
    d = json.loads(out)
    assert d["stop_reason"] == "interrupted" and len(d["tokens"]) == 4


def test_sigint_subprocess_stops_cleanly():
    env = dict(os.environ, TOOLKIT_THREADS="1")
    p = subprocess.Popen([sys.executable, "-m", "toolkit", "run", "-m", str(MODEL), PROMPT, "-n", "-1",
                          "-c", "10000000", "--temp", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    # greedy on this prompt falls into a cycle without an end-of-generation token (checked by
    # test_json_fields_and_greedy_matches_step_by_step's reference), so only Ctrl-C ends it
    try:
        first = p.stdout.read(len(PROMPT) + 1)  # the echoed prompt and generated text: it is running
        assert first.startswith(PROMPT.encode()) and len(first) == len(PROMPT) + 1
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err.decode()
    assert b"interrupted" in err and b"Traceback" not in err
    assert len(out) > 0            # what was generated before Ctrl-C was printed
    (first + out).decode("utf-8")  # and it is valid UTF-8 (no split character)


def test_hybrid_model_stops_when_the_context_is_full(monkeypatch, capsys):
    """Bamba (Mamba-2 + attention, KV cache of -c cells): -n -1 runs until the context is full;
    every position 0..c-1 was decoded, the last sampled token needs no decode."""
    bamba = MODEL.parent / "bamba-tiny.f32.gguf"
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(bamba), PROMPT, "-c", "16", "-n", "-1",
                       "--temp", "0", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["stop_reason"] == "ctx_full"
    assert len(d["prompt_tokens"]) + len(d["tokens"]) == 16 + 1


@pytest.mark.parametrize("name", ["qwen35-tiny", "qwen3next-tiny"])
def test_gated_delta_net_model_runs(monkeypatch, capsys, name):
    """`toolkit run -m qwen35-tiny.f32.gguf "def f"` (llama.cpp's file of a gated-delta-net
    family): greedy tokens are those of step-by-step decoding of the prompt's tokens."""
    from toolkit.runtime import Context, Model
    path = MODEL.parent / f"{name}.f32.gguf"
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(path), "def f", "-n", "8", "--temp", "0", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["stop_reason"] in ("n_predict", "eog") and d["prompt_tokens"]
    with Model(path) as m, Context(m, n_ctx=64) as ctx:
        lg, want = ctx.decode(d["prompt_tokens"]), []
        eos = Tokenizer.from_gguf(m.gguf).eos_id
        while len(want) < 8:
            want.append(int(np.argmax(lg[-1])))
            if want[-1] == eos:
                want.pop()
                break
            lg = ctx.decode([want[-1]])
    assert d["tokens"] == want
