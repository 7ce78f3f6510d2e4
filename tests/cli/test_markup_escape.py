"""User text is never read as rich markup: brackets and ``[/x]`` in paths and messages print
intact, in every command, and never end in a traceback (issue 37).

rich reads ``[draft]`` as a style tag (dropped from the line) and ``[/bold]`` as a closing tag
(MarkupError).  A path such as ``T/[/x]y [draft].gguf`` is the folder ``[`` holding the file
``x]y [draft].gguf``.
"""
from __future__ import annotations

import pathlib
import shutil

import pytest

from cli_runner import cli

FIX = pathlib.Path(__file__).parent.parent / "fixtures"
MODEL = FIX / "llamacpp" / "mamba-tiny.f32.gguf"


def _odd(tmp_path, name: str) -> pathlib.Path:
    """``tmp_path/[/x]NAME``: a path with a closing tag and (NAME) brackets in it."""
    d = tmp_path / "["
    d.mkdir(exist_ok=True)
    return d / f"x]{name}"


def _ok(rc, out, err, path, want_rc=0):
    assert "Traceback" not in err and "MarkupError" not in err, err
    assert rc == want_rc, (rc, out, err)
    assert str(path) in out + err, (str(path), out, err)


@pytest.mark.parametrize("cmd", [["run", "-p", "x", "-n", "1", "-m"], ["chat", "-m"], ["bench", "-m"],
                                 ["serve", "-m"], ["perplexity", "-f", "__TEXT__", "-m"], ["info"],
                                 ["quantize"]])
def test_missing_file_named_intact(monkeypatch, capsys, tmp_path, cmd):
    missing = _odd(tmp_path, "[draft].gguf")
    text = tmp_path / "t.txt"
    text.write_text("hello world\n" * 50)
    args = [str(text) if a == "__TEXT__" else a for a in cmd]
    if cmd[0] == "quantize":
        args = ["quantize", str(missing), str(tmp_path / "o.gguf"), "Q8_0"]
    else:
        args = args + [str(missing)]
    rc, out, err = cli(monkeypatch, capsys, *args, stdin="")
    _ok(rc, out, err, missing, want_rc=2)
    assert err.count("\n") == 1, err       # one line


def test_run_closing_tag_path(monkeypatch, capsys, tmp_path):
    # `toolkit run -m '[/bold]x.gguf'` was a 22-line MarkupError traceback, exit 1
    bad = tmp_path / "[" / "bold]x.gguf"
    bad.parent.mkdir()
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(bad), "-p", "x")
    _ok(rc, out, err, bad, want_rc=2)


def test_convert_paths_intact(monkeypatch, capsys, tmp_path):
    src = _odd(tmp_path, "hf[v2]")
    shutil.copytree(FIX / "hf" / "mamba-tiny", src)
    out_path = _odd(tmp_path, "out[v2].gguf")
    rc, out, err = cli(monkeypatch, capsys, "convert", str(src), str(out_path))
    _ok(rc, out, err, out_path)
    assert out_path.is_file()
    rc, out, err = cli(monkeypatch, capsys, "convert", str(src), str(out_path), "--dry-run")
    _ok(rc, out, err, src)
    rc, out, err = cli(monkeypatch, capsys, "convert", str(_odd(tmp_path, "none[x]")), str(out_path))
    _ok(rc, out, err, _odd(tmp_path, "none[x]"), want_rc=2)


def test_quantize_paths_intact(monkeypatch, capsys, tmp_path):
    src = _odd(tmp_path, "in[f32].gguf")
    shutil.copy(MODEL, src)
    dst = _odd(tmp_path, "out[q8].gguf")
    rc, out, err = cli(monkeypatch, capsys, "quantize", str(src), str(dst), "Q8_0")
    _ok(rc, out, err, dst)


def test_info_path_intact(monkeypatch, capsys, tmp_path):
    src = _odd(tmp_path, "m[f32].gguf")
    shutil.copy(MODEL, src)
    rc, out, err = cli(monkeypatch, capsys, "info", str(src), "--no-tensors")
    _ok(rc, out, err, src)


def test_perplexity_paths_intact(monkeypatch, capsys, tmp_path):
    src = _odd(tmp_path, "m[f32].gguf")
    shutil.copy(MODEL, src)
    text = _odd(tmp_path, "t[1].txt")
    text.write_text("def f(x):\n    return x + 1\n" * 40)
    rc, out, err = cli(monkeypatch, capsys, "perplexity", "-m", str(src), "-f", str(text), "-c", "16",
                       "--chunks", "1")
    _ok(rc, out, err, src)
    assert str(text) in out


def test_chat_save_path_intact(monkeypatch, capsys, tmp_path):
    dst = _odd(tmp_path, "conv[1].json")
    rc, out, err = cli(monkeypatch, capsys, "chat", "-m", str(MODEL), "--chat-template", "chatml", "-n", "2",
                       stdin=f"hi\n/save {dst}\n/load {_odd(tmp_path, 'no[such].json')}\n")
    assert "Traceback" not in err, err
    assert dst.is_file()
    assert str(_odd(tmp_path, "no[such].json")) in err, err


def test_messages_with_brackets_intact(monkeypatch, capsys):
    # a message that names a shape ("expected [rows, row_dim]") kept its brackets only by luck
    from toolkit.cli.app import print_error
    print_error("t.safetensors: tensor 'x' has shape [4], expected [rows, row_dim] [/x]")
    err = capsys.readouterr().err
    assert err == "error: t.safetensors: tensor 'x' has shape [4], expected [rows, row_dim] [/x]\n", err
