"""The command line people coming from llama.cpp type (issue 18): -h everywhere, the prompt flags,
multi-letter short flags, llama.cpp's flags we lack, -c 0 / -t 0, TOOLKIT_CPU, --session checks,
and the sampling flags (penalties, -r, --ignore-eos, --n-probs)."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from cli_runner import cli
from toolkit.cli.argv import process_escapes
from toolkit.errors import InputError
from toolkit.runtime.sampling import Sampler, SamplerParams

pytestmark = pytest.mark.native

MODEL = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "mamba-tiny.f32.gguf"
G = ["-m", str(MODEL), "--temp", "0", "-n", "4", "--json"]


def run_json(monkeypatch, capsys, *args, stdin=None) -> dict:
    rc, out, err = cli(monkeypatch, capsys, "run", *G, *args, stdin=stdin)
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.parametrize("cmd", ["run", "chat", "bench", "perplexity", "info", "convert", "quantize"])
def test_h_on_every_command(monkeypatch, capsys, cmd):
    rc, out, err = cli(monkeypatch, capsys, cmd, "-h")
    assert rc == 0 and "Usage" in out and "--help" in out, err


def test_prompt_sources_agree(monkeypatch, capsys, tmp_path):
    base = run_json(monkeypatch, capsys, "Hello world")["prompt_tokens"]
    assert run_json(monkeypatch, capsys, "-p", "Hello world")["prompt_tokens"] == base
    f = tmp_path / "p.txt"
    f.write_text("Hello world\n")                       # one trailing newline is dropped, as llama.cpp's -f
    assert run_json(monkeypatch, capsys, "-f", str(f))["prompt_tokens"] == base
    assert run_json(monkeypatch, capsys, "-f", "-", stdin="Hello world")["prompt_tokens"] == base
    dash = run_json(monkeypatch, capsys, "--", "-Hello")["prompt_tokens"]   # a prompt that starts with '-'
    assert dash == run_json(monkeypatch, capsys, "-p", "-Hello")["prompt_tokens"] and dash


@pytest.mark.parametrize("args,msg", [
    (["hi", "-p", "x"], "one prompt source, not PROMPT and -p/--prompt"),
    (["-f", "/nonexistent/p.txt"], "-f/--file /nonexistent/p.txt"),
    (["-ngl", "99", "hi"], "not supported: -ngl (toolkit runs on CPU)"),
    (["-ctk", "q9_9", "hi"], "-ctk 'q9_9': not a KV cache type"),
    (["--flash-attn", "hi"], "not supported: --flash-attn"),
    (["-xyz", "hi"], "no such option: -xyz"),
    (["-c", "-1", "hi"], "--ctx-size -1"),
    (["-t", "-1", "hi"], "--threads -1"),
    (["hi", "--repeat-penalty", "0"], "--repeat-penalty"),
    (["hi", "--repeat-last-n", "-2"], "--repeat-last-n"),
    (["hi", "--n-probs", "-1"], "--n-probs"),
    (["-p", "\\xff"], "not valid UTF-8 after escape processing"),
])
def test_bad_flags_one_line_exit_2(monkeypatch, capsys, args, msg):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), *args)
    assert rc == 2 and msg in err and "Traceback" not in err and out == "", err


def test_multi_letter_short_flags_are_themselves(monkeypatch, capsys):
    # -ub is --ubatch (not -u b), -sys is the system prompt (not -s ys: -s is --seed)
    assert run_json(monkeypatch, capsys, "-ub", "2", "hi")["text"] == run_json(monkeypatch, capsys, "hi")["text"]
    rc, _, err = cli(monkeypatch, capsys, "run", *G, "-sys", "be brief", "hi")
    assert rc == 2 and "needs a chat template" in err


def test_ctx_0_is_the_models_and_threads_0_all(monkeypatch, capsys):
    from toolkit.gguf_io import GGUFFile
    n_train = GGUFFile(MODEL).get("mamba.context_length")
    d = run_json(monkeypatch, capsys, "-c", "0", "-t", "0", "hi")
    assert d["n_ctx"] == n_train and n_train > 0


def test_mistyped_toolkit_cpu_is_an_error(monkeypatch, capsys):
    monkeypatch.setenv("TOOLKIT_CPU", "avx")
    rc, out, err = cli(monkeypatch, capsys, "run", *G, "hi")
    assert rc == 2 and "TOOLKIT_CPU='avx'" in err and "scalar, avx2" in err
    monkeypatch.setenv("TOOLKIT_CPU", "scalar")
    assert run_json(monkeypatch, capsys, "hi")["tokens"]


def test_mistyped_toolkit_bf16_gemm_is_an_error(monkeypatch, capsys):
    monkeypatch.setenv("TOOLKIT_BF16_GEMM", "bf16")
    rc, out, err = cli(monkeypatch, capsys, "run", *G, "hi")
    assert rc == 2 and "TOOLKIT_BF16_GEMM='bf16'" in err and "fma, dpbf16" in err
    monkeypatch.setenv("TOOLKIT_BF16_GEMM", "fma")
    assert run_json(monkeypatch, capsys, "hi")["tokens"]


@pytest.mark.parametrize("var,val,msg", [("TOOLKIT_REPACK", "yes", "is not 0, 1 or auto"),
                                         ("TOOLKIT_SSD_MIN", "32k", "is not a token count"),
                                         ("TOOLKIT_GDN_MIN", "-1", "is not a token count"),
                                         ("TOOLKIT_KDA_MIN", "x", "is not a token count"),
                                         ("TOOLKIT_LIGHTNING_MIN", "1.5", "is not a token count")])
def test_mistyped_runtime_option_variable_is_an_error(monkeypatch, capsys, var, val, msg):
    """Every TOOLKIT_* variable the runtime options read is checked: one line naming it, exit 2
    (TOOLKIT_REPACK=yes was silently ignored by the C library; the thresholds fell back to the
    default)."""
    monkeypatch.setenv(var, val)
    for cmd in (("run", *G, "hi"), ("info", "--memory", str(MODEL))):
        rc, out, err = cli(monkeypatch, capsys, *cmd)
        assert rc == 2 and f"{var}={val!r}" in err and msg in err and len(err.strip().splitlines()) == 1, err
    monkeypatch.setenv(var, "0")
    assert run_json(monkeypatch, capsys, "hi")["tokens"]


def test_session_unwritable_for_root_checked_before_work(monkeypatch, capsys, tmp_path):
    """access() says yes to root where no file can be made (/sys, a read-only mount): the
    check makes one, so the error comes before any text (it came after generation)."""
    import errno

    from toolkit.gguf_io import writer

    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(writer, "_create_temp", refuse)
    for flag, name in (("--session", "s.bin"), ("--logits-out", "l.npy")):
        rc, out, err = cli(monkeypatch, capsys, "run", *G, "hi", flag, str(tmp_path / name))
        assert rc == 2 and out == "" and f"{flag} " in err and "cannot create a file" in err, err


def test_session_directory_checked_before_work(monkeypatch, capsys, tmp_path):
    rc, out, err = cli(monkeypatch, capsys, "run", *G, "hi", "--session", str(tmp_path / "no" / "s.bin"))
    assert rc == 2 and "does not exist" in err
    (tmp_path / "f").write_text("")     # a file where a directory should be: said as such
    rc, out, err = cli(monkeypatch, capsys, "run", *G, "hi", "--session", str(tmp_path / "f" / "s.bin"))
    assert rc == 2 and "is not a directory" in err and "does not exist" not in err, err
    (tmp_path / "d").mkdir()
    rc, out, err = cli(monkeypatch, capsys, "run", *G, "hi", "--session", str(tmp_path / "d"))
    assert rc == 2 and out == "", err


def test_escapes_as_llamacpp():
    assert process_escapes(r"a\nb\tc\\d\'e\"f\x41\q") == "a\nb\tc\\d'e\"fA\\q"
    assert process_escapes(r"end\\") == "end\\" and process_escapes("x\\") == "x\\"
    assert process_escapes(r"\xc3\xa9") == "é"
    with pytest.raises(InputError):
        process_escapes(r"\xff")


def test_escape_flag(monkeypatch, capsys):
    on = run_json(monkeypatch, capsys, "-p", "a\\nb")["prompt_tokens"]
    assert on == run_json(monkeypatch, capsys, "-p", "a\nb")["prompt_tokens"]
    assert run_json(monkeypatch, capsys, "--no-escape", "-p", "a\\nb")["prompt_tokens"] != on


# ---- sampling ---------------------------------------------------------------------------------

def test_penalties_formula():
    s = Sampler(SamplerParams(temp=0, repeat_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25,
                              repeat_last_n=3))
    for t in (3, 1, 1, 2):                           # window of 3: [1, 1, 2]
        s.accept(t)
    z = s.penalize(np.array([1.0, 2.0, -2.0, 3.0], np.float32))
    # token 1: 2 / 2 - (2 * 0.5 + 0.25); token 2: -2 * 2 - (0.5 + 0.25); tokens 0 and 3 untouched
    assert z.tolist() == [1.0, -0.25, -4.75, 3.0]
    off = Sampler(SamplerParams(temp=0))
    off.accept(1)
    x = np.array([1.0, 2.0], np.float32)
    assert off.penalize(x).tolist() == [1.0, 2.0]


def test_penalties_change_generation(monkeypatch, capsys):
    plain = run_json(monkeypatch, capsys, "-n", "24", "Hello world, the cat")
    pen = run_json(monkeypatch, capsys, "-n", "24", "--repeat-penalty", "1.5", "--presence-penalty", "0.5",
                   "Hello world, the cat")
    assert pen["tokens"] != plain["tokens"]
    assert pen["sampling"]["repeat_penalty"] == 1.5


def test_reverse_prompt_stops_and_ignore_eos(monkeypatch, capsys):
    full = run_json(monkeypatch, capsys, "-n", "24", "Hello world, the cat")
    stop = full["text"][len(full["text"]) // 2:][:3]
    assert stop.strip()
    got = run_json(monkeypatch, capsys, "-n", "24", "-r", stop, "Hello world, the cat")
    assert got["stop_reason"] == "stop" and stop in got["text"][-len(stop) - 8:] and len(got["tokens"]) < 24
    shorter = run_json(monkeypatch, capsys, "-n", str(len(got["tokens"]) - 1), "Hello world, the cat")
    assert stop not in shorter["text"]                # it stopped at the first token completing it
    assert full["text"].startswith(got["text"])
    ie = run_json(monkeypatch, capsys, "-n", "8", "--ignore-eos", "Hello")
    assert ie["stop_reason"] == "n_predict" and len(ie["tokens"]) == 8


def test_n_probs_in_json(monkeypatch, capsys):
    d = run_json(monkeypatch, capsys, "--n-probs", "3", "hi")
    assert len(d["probs"]) == len(d["tokens"])
    for tok, p in zip(d["tokens"], d["probs"]):
        assert p["id"] == tok and len(p["top"]) == 3
        assert p["top"][0]["id"] == tok               # greedy: the most probable
        assert p["top"][0]["prob"] >= p["top"][1]["prob"] >= p["top"][2]["prob"] > 0
    assert "probs" not in run_json(monkeypatch, capsys, "hi")
