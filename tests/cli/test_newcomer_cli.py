"""What a second newcomer from llama.cpp found in the CLI (issue 44, section 2, items 5, 7-10)."""
from __future__ import annotations

import pathlib

import pytest

from cli_runner import cli

FIX = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
MODEL = FIX / "llamacpp" / "mamba-tiny.f32.gguf"


def test_no_arguments_prints_help_and_exits_2(monkeypatch, capsys):
    """`toolkit` alone: the help (the usage and every command) on stdout, nothing on stderr, exit 2."""
    from toolkit.cli.app import _COMMANDS
    rc, out, err = cli(monkeypatch, capsys)
    assert rc == 2
    assert "Usage: toolkit [OPTIONS] COMMAND" in out
    assert all(f" {c} " in out for c in (*_COMMANDS, "chat")), out
    assert err == "", repr(err)


@pytest.mark.native
@pytest.mark.parametrize("what,c_msg,want", [
    ("context", "context needs 9.00 GiB (KV cache ...)", "context needs 9.00 GiB (KV cache ...)"),
    ("state", "state: bad section tag 7", "state: bad section tag 7"),
    ("checkpoints", "checkpoints = -1 must be >= 0", "checkpoints = -1 must be >= 0"),
    ("memory estimate", "n_ctx = 0 must be > 0", "memory estimate: n_ctx = 0 must be > 0"),
    ("context", "contextual note", "context: contextual note"),
])
def test_native_error_prefix_said_once(monkeypatch, what, c_msg, want):
    """`error: context: context needs ...` said "context" twice (issue 44 §2 item 9): the
    caller's prefix is dropped when the C message already starts with it."""
    import toolkit.binding as b
    monkeypatch.setattr(b, "last_error", lambda: c_msg)
    with pytest.raises(b.ToolkitError) as ei:
        b.check(b.lib.TK_ERR_NOMEM if what == "context" else b.lib.TK_ERR_INVALID, what)
    assert str(ei.value) == want


@pytest.mark.native
@pytest.mark.parametrize("cmd", ["convert", "quantize"])
def test_json_wall_s_counts_the_whole_command(monkeypatch, capsys, tmp_path, cmd):
    """convert --json's wall_s counted only the writing, quantize's only the driver (issue 44
    §2 item 10): here a step before that takes 0.3 s more, and wall_s must include it."""
    import json
    import time

    import toolkit.cli.cmd_quantize as cq
    import toolkit.convert as conv
    mod, name = (conv, "make_plan") if cmd == "convert" else (cq, "_check_keys")
    real = getattr(mod, name)

    def slow(*a, **k):
        time.sleep(0.3)
        return real(*a, **k)
    monkeypatch.setattr(mod, name, slow)
    out = tmp_path / "o.gguf"
    args = (["convert", str(FIX / "hf" / "mamba-tiny"), str(out)] if cmd == "convert"
            else ["quantize", str(MODEL), str(out), "Q8_0"])
    rc, stdout, err = cli(monkeypatch, capsys, *args, "--json")
    assert rc == 0, err
    assert json.loads(stdout)["wall_s"] >= 0.3, stdout


def test_wall_s_counts_from_the_process_start(tmp_path):
    """The toolkit command's wall_s starts with the process (Python's start-up and imports
    count), not at the CLI's entry: 2 s spent before it are in it (the command alone takes
    about 0.5 s)."""
    import json
    import subprocess
    import sys
    code = ("import sys, time; time.sleep(2.0); sys.argv = ['toolkit', 'info', sys.argv[1], '--json'];"
            "import toolkit.__main__ as m; m.main()")
    r = subprocess.run([sys.executable, "-c", code, str(MODEL)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["wall_s"] >= 2.0, r.stdout


def _compute_bytes(monkeypatch, capsys, *args) -> int:
    import json
    rc, out, err = cli(monkeypatch, capsys, "info", str(MODEL), "--memory", "--json", *args)
    assert rc == 0, err
    return json.loads(out)["memory"]["compute"]


@pytest.mark.native
def test_batch_and_ubatch_are_llama_cpp_s(monkeypatch, capsys):
    """-b is the logical batch and -ub the micro-batch (issue 44 §2 item 5): they were one
    option, the last given winning, so `-ub 64 -b 2048` sized the compute buffers for 2048
    tokens.  Now the micro-batch is min(-b, -ub), as in llama.cpp."""
    ub64 = _compute_bytes(monkeypatch, capsys, "-ub", "64")
    assert _compute_bytes(monkeypatch, capsys, "-ub", "64", "-b", "2048") == ub64
    assert _compute_bytes(monkeypatch, capsys, "-b", "2048", "-ub", "64") == ub64
    assert _compute_bytes(monkeypatch, capsys, "-b", "64") == ub64          # -ub 512 capped by -b
    assert _compute_bytes(monkeypatch, capsys, "-b", "2048") == _compute_bytes(monkeypatch, capsys)
    rc, _, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), "hi", "-n", "1", "-v", "-ub", "64", "-b", "2048")
    assert rc == 0, err
    assert f"({ub64} bytes)" in err, err


def test_batch_and_ubatch_are_two_options_everywhere():
    """Every command with -b / -ub reads them as two options (help included)."""
    from toolkit.cli.app import _option_names
    import typer.main
    from toolkit.cli.app import app
    names = _option_names()
    group = typer.main.get_command(app)
    for cmd in ("run", "chat", "serve", "perplexity", "info"):
        params = {o: p.name for p in group.commands[cmd].params for o in p.opts}
        assert params["-b"] == params["--batch-size"] != params["-ub"] == params["--ubatch-size"], cmd
        assert names[cmd]["-b"] and names[cmd]["-ub"]


@pytest.mark.native
def test_harmless_llama_cpp_habits_are_no_ops(monkeypatch, capsys):
    """--no-warmup, --log-disable, --no-perf, --simple-io change nothing (issue 44 §2 item 7)."""
    import json
    base = ["run", "-m", str(MODEL), "hi", "-n", "2", "--temp", "0", "--json"]
    rc, plain, err = cli(monkeypatch, capsys, *base)
    assert rc == 0, err
    rc, out, err = cli(monkeypatch, capsys, *base, "--no-warmup", "--log-disable", "--no-perf", "--simple-io")
    assert rc == 0, err
    assert json.loads(out)["tokens"] == json.loads(plain)["tokens"]


def test_serve_cb_is_a_no_op_and_nocb_refused():
    from toolkit.cli.app import _option_names
    from toolkit.cli.argv import check_argv
    from toolkit.errors import InputError
    known = _option_names()
    assert check_argv(["serve", "-m", "x.gguf", "-cb", "--cont-batching", "-c", "64"], known) == \
        ["serve", "-m", "x.gguf", "-c", "64"]
    with pytest.raises(InputError, match=r"not supported: -nocb \(toolkit serve always batches continuously\)"):
        check_argv(["serve", "-nocb"], known)
    # a no-op spelling given as a value stays a value
    assert check_argv(["run", "-p", "--no-perf"], known) == ["run", "-p", "--no-perf"]


@pytest.mark.parametrize("args,why", [
    (["run", "hi", "-cb"], "not supported: -cb (continuous batching is the server's"),
    (["chat", "--cont-batching"], "not supported: --cont-batching (continuous batching"),
    (["run", "hi", "--color"], "not supported: --color (toolkit prints plain text"),
])
def test_llama_cpp_flags_refused_by_name(monkeypatch, capsys, args, why):
    """-cb got "did you mean -c?", a harmful hint; --color was an unknown option."""
    rc, out, err = cli(monkeypatch, capsys, *args)
    assert rc == 2 and why in err and "did you mean" not in err, err


@pytest.mark.parametrize("cmd", ["run", "chat", "serve", "bench", "perplexity", "quantize", "convert", "info"])
def test_version_on_every_command(monkeypatch, capsys, cmd):
    from toolkit import __version__
    rc, out, err = cli(monkeypatch, capsys, cmd, "--version")
    assert rc == 0 and out.startswith(f"toolkit {__version__} (commit "), (out, err)


@pytest.mark.native
def test_quantize_positional_nthreads(monkeypatch, capsys, tmp_path):
    """llama-quantize IN OUT TYPE NTHREADS (and IN TYPE NTHREADS)."""
    import json
    import shutil
    src = tmp_path / "m.gguf"
    shutil.copy(MODEL, src)
    rc, out, err = cli(monkeypatch, capsys, "quantize", str(src), str(tmp_path / "o.gguf"), "Q8_0", "1", "--json")
    assert rc == 0, err
    assert json.loads(out)["threads"] == 1
    rc, out, err = cli(monkeypatch, capsys, "quantize", str(src), "Q8_0", "2", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["threads"] == 2 and d["output"] == str(tmp_path / "ggml-model-Q8_0.gguf")
    rc, _, err = cli(monkeypatch, capsys, "quantize", str(src), str(tmp_path / "p.gguf"), "Q8_0", "2", "-t", "3")
    assert rc == 2 and "give the threads once" in err, err
    rc, _, err = cli(monkeypatch, capsys, "quantize", str(src), str(tmp_path / "p.gguf"), "Q8_0", "two")
    assert rc == 2 and "NTHREADS 'two'" in err, err


@pytest.mark.native
def test_bench_pg(monkeypatch, capsys):
    """llama-bench's -pg PP,TG: one test, the prompt then the generation, column ppPP+tgTG."""
    import json
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-p", "0", "-n", "0", "-pg", "8,4",
                       "-r", "1", "-o", "jsonl")
    assert rc == 0, err
    row = json.loads(out)
    assert (row["n_prompt"], row["n_gen"]) == (8, 4)
    assert abs(row["avg_ts"] - 12e9 / row["avg_ns"]) < 1e-6 * row["avg_ts"]
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-p", "8", "-n", "4", "-pg", "8,4", "-r", "1")
    assert rc == 0, err
    assert [ln.split("|")[-3].strip() for ln in out.splitlines()[2:5]] == ["pp8", "tg4", "pp8+tg4"], out
    rc, _, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-pg", "8")
    assert rc == 2 and "-pg '8': expected PP,TG" in err, err


def test_info_memory_takes_the_no_repack_it_mentions(monkeypatch, capsys, tmp_path):
    # info --memory's re-laid line says "--no-repack: none"; info must take that flag (it did not)
    from toolkit.binding import lib
    from toolkit.quantize import quantize_file
    if lib.tk_cpu_level() not in (lib.TK_CPU_AVX2, lib.TK_CPU_AVX512):
        pytest.skip("repacking at load needs the avx2 or avx512 level")
    f = tmp_path / "q8.gguf"
    quantize_file(str(FIX / "llamacpp" / "qwen35-small.f32.gguf"), str(f), "Q8_0", n_threads=1)
    rc, out, err = cli(monkeypatch, capsys, "info", str(f), "--memory", "--repack")
    assert rc == 0 and "re-laid at load" in out and "--no-repack: none" in out, err
    rc, out, err = cli(monkeypatch, capsys, "info", str(f), "--memory", "--no-repack")
    assert rc == 0 and "re-laid at load" not in out, (out, err)
    rc, out, err = cli(monkeypatch, capsys, "info", str(f), "--no-repack")
    assert rc == 2 and "--repack/--no-repack" in err and "only used with --memory" in err, err


@pytest.mark.native
def test_quantize_numeric_type_ids(monkeypatch, capsys, tmp_path):
    """llama-quantize's numeric ftype ids (QUANT_OPTIONS: 7 = Q8_0, 2 = Q4_0, 15 = Q4_K_M), as TYPE
    with or without OUT and NTHREADS; an id of a type not written, or no type, is one line, exit 2."""
    import json
    import shutil
    src = tmp_path / "m.gguf"
    shutil.copy(MODEL, src)
    for tid, name in (("7", "Q8_0"), ("2", "Q4_0"), ("15", "Q4_K_M")):
        rc, out, err = cli(monkeypatch, capsys, "quantize", str(src), str(tmp_path / f"o{tid}.gguf"), tid, "--json")
        assert rc == 0, (tid, err)
        assert (json.loads(out)["file_type"], json.loads(out)["file_type_id"]) == (name, int(tid)), out
    rc, out, err = cli(monkeypatch, capsys, "quantize", str(src), "7", "1", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["threads"] == 1 and d["output"] == str(tmp_path / "ggml-model-Q8_0.gguf")
    for bad, needle in (("19", "IQ2_XXS: not a type toolkit quantize writes"), ("99", "unsupported quantization type id 99")):
        rc, _, err = cli(monkeypatch, capsys, "quantize", str(src), str(tmp_path / "x.gguf"), bad)
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
