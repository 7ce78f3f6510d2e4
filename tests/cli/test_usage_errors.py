"""Every usage error is one line naming the flag, with exit 2, as the other errors are
(issue 37: click's 4-line box, and `--foo` suggesting `--lookup`)."""
from __future__ import annotations

import pytest

from cli_runner import cli

CASES = [
    (["run", "-n", "abc"], ["-n/--n-predict", "'abc'", "integer"]),
    (["run", "--seed=abc"], ["-s/--seed", "'abc'"]),
    (["run", "--temp", "x"], ["--temp", "'x'", "number"]),
    (["run", "-n"], ["-n/--n-predict", "needs a value"]),
    (["run", "--foo"], ["no such option: --foo", "toolkit run -h"]),
    (["run", "--tmep", "0"], ["no such option: --tmep", "did you mean --temp?"]),
    (["chat", "--foo"], ["no such option: --foo", "toolkit chat -h"]),
    (["bench", "-o"], ["-o/--output", "needs a value"]),
    (["serve", "--port", "http"], ["--port", "'http'", "integer"]),
    (["quantise"], ["no such command: quantise", "did you mean quantize?"]),
    (["convert"], ["missing", "HF_DIR"]),
    (["info", "a", "b", "c"], ["unexpected extra argument", "b c"]),
    # was: "unexpected extra argument: s) (b c (toolkit info ..." (typer's "argument(s) (b c)" cut at its first "(")
    (["info", "a", "b", "c"], ["error: unexpected extra argument: b c (toolkit info -h shows the usage)"]),
    (["convert", "a", "b", "c"], ["error: unexpected extra argument: c (toolkit convert -h shows the usage)"]),
]


@pytest.mark.parametrize("args,want", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_usage_error_is_one_line(monkeypatch, capsys, args, want):
    rc, out, err = cli(monkeypatch, capsys, *args)
    assert rc == 2, (rc, err)
    assert err.count("\n") == 1 and err.startswith("error: "), err
    for w in want:
        assert w in err, (w, err)
    assert "Possible options" not in err and "--lookup" not in err, err


@pytest.mark.parametrize("args,msg", [
    (["serve", "-ngl", "99"], "not supported: -ngl (toolkit runs on CPU)"),
    (["serve", "--n-gpu-layers", "99"], "not supported: --n-gpu-layers (toolkit runs on CPU)"),
    (["serve", "-fa"], "not supported: -fa"),
    (["serve", "-ctk", "q9_9"], "-ctk 'q9_9': not a KV cache type"),
    (["serve", "-kvu"], "not supported: -kvu"),
    (["serve", "-cnv"], "no such option: -cnv"),      # not a server flag: no chat advice
])
def test_serve_refuses_llama_cpp_flags_by_name(monkeypatch, capsys, args, msg):
    # serve -ngl 99 said `no such option`; run says why
    rc, out, err = cli(monkeypatch, capsys, *args)
    assert rc == 2 and err.count("\n") == 1 and msg in err, err
    assert "one sequence per run" not in err


def test_serve_keeps_its_own_flags():
    from toolkit.cli.app import _option_names
    from toolkit.cli.argv import check_argv
    argv = ["serve", "-np", "2", "--parallel", "2", "-c", "512"]
    assert check_argv(argv, _option_names()) == argv
