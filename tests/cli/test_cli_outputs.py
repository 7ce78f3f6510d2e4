"""Every output path is checked against every input, and usage errors name the flag.

The tester's reports: `run --logits-out MODEL` and `quantize --imatrix IM IN IM` overwrote an
input; non-regular outputs (FIFO, device) were replaced by a regular file; ...
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from cli_runner import cli

FIX = pathlib.Path(__file__).parent.parent / "fixtures"
MODEL = FIX / "llamacpp" / "mamba-tiny.f32.gguf"
QSRC = FIX / "llamacpp" / "bamba-small.f32.gguf"
IMAT = FIX / "quant" / "bamba-small.imatrix.gguf"




def _digest(p) -> str:
    return hashlib.sha256(pathlib.Path(p).read_bytes()).hexdigest()


def test_run_logits_out_onto_model_refused(monkeypatch, capsys, tmp_path):
    victim = tmp_path / "victim.gguf"
    shutil.copy(MODEL, victim)
    before = _digest(victim)
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(victim), "hi", "-n", "0", "--logits-out", str(victim))
    assert rc == 2 and "overwrite the input" in err, err
    assert _digest(victim) == before
    link = tmp_path / "link.gguf"
    os.symlink(victim, link)
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(victim), "hi", "-n", "0", "--logits-out", str(link))
    assert rc == 2 and _digest(victim) == before


def test_run_session_onto_model_refused(monkeypatch, capsys, tmp_path):
    victim = tmp_path / "victim.gguf"
    shutil.copy(MODEL, victim)
    before = _digest(victim)
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(victim), "hi", "-n", "0", "--session", str(victim))
    assert rc == 2, err
    assert _digest(victim) == before


def test_quantize_out_onto_imatrix_refused(tmp_path):
    im = tmp_path / "im.gguf"
    shutil.copy(IMAT, im)
    before = _digest(im)
    p = subprocess.run([sys.executable, "-m", "toolkit", "quantize", str(QSRC), str(im), "Q4_K_M",
                        "--imatrix", str(im)], capture_output=True, text=True)
    assert p.returncode == 2 and "overwrite the input" in p.stderr, p.stderr
    assert _digest(im) == before


def test_atomic_output_refuses_non_regular(tmp_path):
    from toolkit.errors import InputError
    from toolkit.gguf_io import atomic_output
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        with atomic_output(str(fifo)) as tmp:
            pytest.fail("the block must not run")
    assert pathlib.Path(fifo).is_fifo()
    link = tmp_path / "null"
    os.symlink("/dev/null", link)   # what a device node looks like through stat
    with pytest.raises(InputError, match="not a regular file"):
        with atomic_output(str(link)):
            pass
    assert os.path.islink(link)


def test_quantize_to_fifo_refused(tmp_path):
    fifo = tmp_path / "out.gguf"
    os.mkfifo(fifo)
    p = subprocess.run([sys.executable, "-m", "toolkit", "quantize", str(QSRC), str(fifo), "Q4_K_M"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "not a regular file" in p.stderr, p.stderr
    assert fifo.is_fifo()


def test_run_logits_out_checked_before_generation(monkeypatch, capsys, tmp_path):
    d = tmp_path / "dir.npy"
    d.mkdir()
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), "hi", "-n", "5", "--logits-out", str(d))
    assert rc == 2 and "is a directory" in err and out == "", (out, err)
    if os.path.isdir("/proc/self"):
        rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), "hi", "-n", "5", "--logits-out", "/proc/x.npy")
        assert rc == 2 and "/proc/x.npy" in err and out == "", (out, err)


@pytest.mark.parametrize("how,data,byte", [
    ("argv", "def \udcff\udcfe", 4),          # what Python makes of argv bytes ff fe
    ("stdin", b"def \xff\xfe", 4),
    ("stdin", "hello \u00e9".encode()[:-1], 6),   # ends in half a UTF-8 character
])
def test_non_utf8_prompt_is_a_clean_error(monkeypatch, capsys, how, data, byte):
    if how == "argv":
        rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), data, "-n", "1")
    else:
        rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), "-", "-n", "1", stdin=data)
    assert rc == 2, err
    assert f"prompt is not valid UTF-8 (byte {byte})" in err and "internal error" not in err


def test_non_utf8_prompt_subprocess(tmp_path):
    p = subprocess.run([os.fsencode(sys.executable), b"-m", b"toolkit", b"run", b"-m", os.fsencode(str(MODEL)),
                        b"def \xff\xfe", b"-n", b"1"], capture_output=True)
    assert p.returncode == 2 and b"not valid UTF-8 (byte 4)" in p.stderr, p.stderr


# ---- 6: errors name the flag, never a C source line -----------------------------------------

@pytest.mark.parametrize("args,flag", [
    (["run", "-m", str(MODEL), "hi", "-t", "100000"], "--threads"),
    (["run", "-m", str(MODEL), "hi", "-c", "-1"], "--ctx-size"),
    (["run", "-m", str(MODEL), "hi", "-ub", "100000"], "-ub/--ubatch-size"),
    (["run", "-m", str(MODEL), "hi", "-b", "0"], "-b/--batch-size"),
    (["perplexity", "-m", str(MODEL), str(MODEL), "--ctx", "0"], "--ctx"),
    (["perplexity", "-m", str(MODEL), str(MODEL), "--ctx", "2"], "-c/--ctx-size 2: must be an even number >= 4"),  # said [2, ...]
])
def test_flag_ranges_name_the_flag(monkeypatch, capsys, args, flag):
    rc, out, err = cli(monkeypatch, capsys, *args)
    assert rc == 2 and flag in err, err
    assert ".c:" not in err


def test_huge_ctx_has_no_c_location(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), "hi", "-c", "2147483647")
    assert rc in (2, 4) and "n_ctx" in err and ".c:" not in err, err


def test_native_error_has_no_c_location(monkeypatch):
    from toolkit.errors import InputError
    from toolkit.runtime import Context, Model
    from toolkit.binding import check, lib
    monkeypatch.delenv("TOOLKIT_DEBUG", raising=False)
    with Model(str(MODEL)) as m:
        with pytest.raises(Exception) as ei:
            Context(m, n_ctx=16, n_seq_max=1, n_ubatch=0)
        assert "n_ubatch" in str(ei.value) and ".c:" not in str(ei.value)
        monkeypatch.setenv("TOOLKIT_DEBUG", "1")
        with pytest.raises(Exception) as ei:
            Context(m, n_ctx=16, n_seq_max=1, n_ubatch=0)
        assert "context.c:" in str(ei.value)


def test_toolkit_threads_env_range(monkeypatch, capsys):
    monkeypatch.setenv("TOOLKIT_THREADS", "100000")
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), "hi", "-n", "1")
    assert rc == 2 and "TOOLKIT_THREADS" in err and ".c:" not in err, err


# ---- 7: quantize numeric flags ------------------------------------------------------------

def _quantize(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "toolkit", "quantize", *args], capture_output=True, text=True, env=e)


@pytest.mark.parametrize("flag,value", [("--band-mb", "nan"), ("--band-mb", "inf"), ("--band-mb", "-1"),
                                        ("-t", "-1"), ("-t", "100000")])
def test_quantize_bad_numbers_exit_2_naming_the_flag(tmp_path, flag, value):
    out = tmp_path / "o.gguf"
    p = _quantize(str(QSRC), str(out), "Q8_0", flag, value)
    name = "--band-mb" if flag == "--band-mb" else "--threads"
    assert p.returncode == 2 and name in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not out.exists()


def test_quantize_toolkit_threads(tmp_path):
    p = _quantize(str(QSRC), str(tmp_path / "o.gguf"), "Q8_0", "--json", env={"TOOLKIT_THREADS": "1"})
    assert p.returncode == 0, p.stderr
    import json
    assert json.loads(p.stdout)["threads"] == 1
    p = _quantize(str(QSRC), str(tmp_path / "o.gguf"), "Q8_0", env={"TOOLKIT_THREADS": "100000"})
    assert p.returncode == 2 and "TOOLKIT_THREADS" in p.stderr


# ---- 8: Ctrl-C in quantize, info --memory flags ---------------------------------------------

def test_quantize_ctrl_c_says_interrupted(monkeypatch, capsys, tmp_path):
    import toolkit.quantize as q

    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(q, "quantize_file", boom)
    rc, out, err = cli(monkeypatch, capsys, "quantize", str(QSRC), str(tmp_path / "o.gguf"), "Q8_0")
    assert rc == 130 and "interrupted" in err, err


def test_info_memory_names_only_the_failing_flag(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "info", str(MODEL), "--memory", "-np", "0")
    assert rc == 2 and "--parallel 0" in err and "--ctx-size" not in err and "--ubatch" not in err, err


def test_info_memory_flags_without_memory(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "info", str(MODEL), "-c", "10")
    assert rc == 2 and "--ctx-size" in err and "--memory" in err, err
    rc, out, err = cli(monkeypatch, capsys, "info", str(MODEL), "--memory", "-c", "10", "--json")
    assert rc == 0 and '"n_ctx": 10' in out, err


def test_info_memory_ctx_0_is_the_models_context_length(monkeypatch, capsys):
    """-c 0 means the training context everywhere (README, issue 18), info --memory included."""
    import json
    from toolkit.gguf_io import GGUFFile
    n_train = int(GGUFFile(str(MODEL)).get("{arch}.context_length", 0) or 4096)
    rc, out, err = cli(monkeypatch, capsys, "info", str(MODEL), "--memory", "-c", "0", "--json")
    assert rc == 0 and json.loads(out)["n_ctx"] == n_train, err
    rc, out, err = cli(monkeypatch, capsys, "info", str(MODEL), "--memory", "-c", "-1")
    assert rc == 2 and "--ctx-size -1" in err, err


# ---- 9: messages that say what is wrong -----------------------------------------------------

@pytest.mark.parametrize("cmd", [["info", "{d}"], ["quantize", "{d}", "{out}", "Q8_0"], ["run", "-m", "{d}", "hi"]])
def test_directory_input_says_is_a_directory(monkeypatch, capsys, tmp_path, cmd):
    d = tmp_path / "adir"
    d.mkdir()
    args = [a.format(d=d, out=tmp_path / "o.gguf") for a in cmd]
    rc, out, err = cli(monkeypatch, capsys, *args)
    assert rc == 2 and "is a directory" in err, err


def test_convert_nonexistent_dir(monkeypatch, capsys, tmp_path):
    rc, out, err = cli(monkeypatch, capsys, "convert", str(tmp_path / "nope"), str(tmp_path / "o.gguf"))
    assert rc == 2 and "no such directory" in err, err
    f = tmp_path / "file"
    f.write_text("x")
    rc, out, err = cli(monkeypatch, capsys, "convert", str(f), str(tmp_path / "o.gguf"))
    assert rc == 2 and "not a directory" in err, err


def test_imatrix_text_file_is_exit_2(monkeypatch, capsys, tmp_path):
    t = tmp_path / "text.gguf"
    t.write_text("just some text\n")
    rc, out, err = cli(monkeypatch, capsys, "quantize", str(QSRC), str(tmp_path / "o.gguf"), "Q8_0", "--imatrix", str(t))
    assert rc == 2 and "legacy" not in err.split("not an imatrix file")[0], err
    assert "not an imatrix file" in err


def test_kld_base_text_file_clean_message(monkeypatch, capsys, tmp_path):
    t = tmp_path / "text.gguf"
    t.write_text("just some text\n" * 50)
    rc, out, err = cli(monkeypatch, capsys, "perplexity", "-m", str(MODEL), str(t), "--ctx", "16", "--kld-base", str(t))
    assert rc == 2 and "allow_pickle" not in err and "text.gguf" in err, err


# ---- 10: small ones ----------------------------------------------------------------------

def test_small_flag_checks(monkeypatch, capsys, tmp_path):
    rc, out, err = cli(monkeypatch, capsys, "perplexity", "-m", str(MODEL), str(MODEL), "--chunks", "-1")
    assert rc == 2 and "--chunks" in err, err
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), "hi", "--top-k", "-3")
    assert rc == 2 and "--top-k" in err, err


def test_convert_outtype_any_case(monkeypatch, capsys, tmp_path):
    hf = FIX / "hf" / "mamba2-tiny"
    rc, out, err = cli(monkeypatch, capsys, "convert", str(hf), str(tmp_path / "o.gguf"), "--outtype", "F16", "--dry-run")
    assert rc == 0, err


def test_version(monkeypatch, capsys):
    from toolkit import __version__
    rc, out, err = cli(monkeypatch, capsys, "--version")
    assert rc == 0 and out.startswith(f"toolkit {__version__} (commit "), (out, err)   # and the commit (issue 37)


def test_context_full_note(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(MODEL), "hi", "-c", "8", "-n", "50", "--temp", "0")
    assert rc == 0, err
    assert "context is full" in err and "--ctx-size 8" in err, err
