"""What llama.cpp users type (issue 37): `quantize IN TYPE` without an output name,
`perplexity -c/--ctx-size`, `-no-cnv`, `-st`, `--no-mmap`, convert without an output name."""
from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from cli_runner import cli

pytestmark = pytest.mark.native

FIX = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
MODEL = FIX / "llamacpp" / "mamba-tiny.f32.gguf"
DEMO = pathlib.Path(__file__).resolve().parents[2] / "toolkit" / "data" / "default.gguf"


def test_quantize_without_output_name(monkeypatch, capsys, tmp_path):
    # llama-quantize IN TYPE writes IN's folder/ggml-model-TYPE.gguf
    src = tmp_path / "m.gguf"
    shutil.copy(MODEL, src)
    rc, out, err = cli(monkeypatch, capsys, "quantize", str(src), "q8_0")
    assert rc == 0, err
    assert (tmp_path / "ggml-model-Q8_0.gguf").is_file() and str(tmp_path / "ggml-model-Q8_0.gguf") in out
    rc, out, err = cli(monkeypatch, capsys, "quantize", str(src), str(tmp_path / "o.gguf"))   # no TYPE
    assert rc == 2 and "unknown quantization type" in err and "the second is the TYPE" in err, err
    assert not (tmp_path / "o.gguf").exists()


def test_perplexity_ctx_size(monkeypatch, capsys, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("def add(a, b):\n    return a + b\n" * 40)
    for flag in ("-c", "--ctx-size", "--ctx"):
        rc, out, err = cli(monkeypatch, capsys, "perplexity", "-m", str(MODEL), "-f", str(text), flag, "16",
                           "--chunks", "1", "--json")
        assert rc == 0, err
        assert json.loads(out)["n_ctx"] == 16


CHAT = ["-m", str(DEMO), "--temp", "0", "-n", "2", "-t", "1", "--chat-template", "chatml", "--json"]


def test_single_turn(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "chat", "-st", *CHAT, stdin="Hello\nSecond\n")
    assert rc == 0, err
    assert len(out.splitlines()) == 1 and json.loads(out)["turn"] == 1      # the second line is not read
    rc, out, err = cli(monkeypatch, capsys, "run", "-cnv", "--single-turn", "-p", "Hi", *CHAT, stdin="never\n")
    assert rc == 0 and len(out.splitlines()) == 1, err
    rc, out, err = cli(monkeypatch, capsys, "run", "-st", "-p", "Hi", "-m", str(DEMO), "-n", "1")
    assert rc == 2 and "-st/--single-turn: only in a conversation" in err, err


def test_no_cnv(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "run", "-no-cnv", "-p", "Hi", "-m", str(DEMO), "-n", "2", "--temp", "0",
                       "--json")
    assert rc == 0 and json.loads(out)["prompt_tokens"], err


# ---- --no-mmap ------------------------------------------------------------------------------

def _logits(path, mmap: bool):
    import numpy as np
    from toolkit.runtime import Context, Model
    with Model(str(path), n_threads=1, mmap=mmap) as m, Context(m, n_ctx=32, n_threads=1) as c:
        return m, np.array(c.decode(list(range(1, 9)), logits="all"))


def test_no_mmap_identical_logits_and_independent_of_the_file(tmp_path):
    """--no-mmap reads the weights into memory: the same logits, and a file overwritten after
    loading changes nothing (a mapped file would show the new bytes)."""
    import numpy as np
    from toolkit.runtime import Context, Model
    src = tmp_path / "m.gguf"
    shutil.copy(DEMO, src)
    _, mapped = _logits(src, True)
    _, loaded = _logits(src, False)
    assert np.array_equal(mapped, loaded)

    with Model(str(src), n_threads=1, mmap=False) as m, Context(m, n_ctx=32, n_threads=1) as c:
        t = max(m.gguf, key=lambda t: t.nbytes)           # the largest tensor, overwritten in place
        with open(src, "r+b") as fh:
            fh.seek(t.offset)
            fh.write(b"\x00" * t.nbytes)
        after = np.array(c.decode(list(range(1, 9)), logits="all"))
    assert np.array_equal(after, loaded)


def test_no_mmap_flags(monkeypatch, capsys, tmp_path):
    base = ["-m", str(DEMO), "-p", "def f(x):", "-n", "4", "--temp", "0", "-t", "1", "--json"]
    rc, a, err = cli(monkeypatch, capsys, "run", *base)
    assert rc == 0, err
    rc, b, err = cli(monkeypatch, capsys, "run", "--no-mmap", *base)
    assert rc == 0, err
    assert json.loads(a)["tokens"] == json.loads(b)["tokens"]
    rc, out, err = cli(monkeypatch, capsys, "chat", "--no-mmap", "-st", *CHAT, stdin="Hello\n")
    assert rc == 0, err
    text = tmp_path / "t.txt"
    text.write_text("def add(a, b):\n    return a + b\n" * 40)
    ppl = []
    for extra in ((), ("--no-mmap",)):
        rc, out, err = cli(monkeypatch, capsys, "perplexity", "-m", str(MODEL), "-f", str(text), "-c", "16",
                           "--chunks", "2", "--json", *extra)
        assert rc == 0, err
        ppl.append(json.loads(out)["ppl"])
    assert ppl[0] == ppl[1]
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-p", "8", "-n", "2", "-r", "1", "-t", "1",
                       "--no-mmap", "-o", "jsonl")
    assert rc == 0, err
    assert [json.loads(ln)["use_mmap"] for ln in out.splitlines()] == [False, False]
    rc, out, err = cli(monkeypatch, capsys, "serve", "-h")
    assert "--no-mmap" in out
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(tmp_path / "[nope].gguf"), "--no-mmap", "-p", "x")
    assert rc == 2 and "[nope].gguf" in err and "Traceback" not in err


def test_serve_no_mmap_loads(tmp_path):
    from toolkit.serve import load
    svc = load(str(DEMO), n_slots=1, n_ctx=64, n_threads=1, mmap=False)
    try:
        assert svc.engine.model.mmap is False
    finally:
        svc.engine.close()
