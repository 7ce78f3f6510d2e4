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
