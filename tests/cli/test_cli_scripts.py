"""Output for scripts (issue 18): one JSON vocabulary (architecture, wall_s, peak_rss_bytes),
`info --json` with tokenizer metadata / file type / parameter count, `info` on a GGUF toolkit
cannot run, perplexity -f with plain progress lines when piped, `| head` exits quietly, piped
text never wrapped at 80 columns."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from cli_runner import cli

pytestmark = pytest.mark.native

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "toolkit" / "data" / "default.gguf"


def test_one_json_vocabulary(monkeypatch, capsys, tmp_path):
    rc, out, err = cli(monkeypatch, capsys, "run", "-m", str(DEMO), "-p", "hi", "-n", "2", "--json")
    run = json.loads(out)
    rc, out, err = cli(monkeypatch, capsys, "info", str(DEMO), "--json")
    info = json.loads(out)
    t = tmp_path / "t.txt"
    t.write_text("The quick brown fox jumps over the lazy dog. " * 20)
    rc, out, err = cli(monkeypatch, capsys, "perplexity", "-m", str(DEMO), "-f", str(t), "-c", "32", "--chunks", "1", "--json")
    assert rc == 0, err
    ppl = json.loads(out)
    for d in (run, info, ppl):
        assert d["architecture"] == "granitehybrid"
        assert isinstance(d["wall_s"], float) and d["wall_s"] > 0
        assert isinstance(d["peak_rss_bytes"], int) and d["peak_rss_bytes"] > 10 * 2**20


def test_info_json_metadata(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "info", str(DEMO), "--json")
    d = json.loads(out)
    assert d["runs"] is True and d["cannot_run"] is None
    assert d["file_type"] == {"id": 7, "name": "MOSTLY_Q8_0"}
    assert d["n_params"] == sum(int(np.prod(t["shape"])) for t in d["tensors"])
    for k in ("model", "pre", "n_tokens", "bos_token_id", "eos_token_id", "add_bos_token", "chat_template"):
        assert k in d["tokenizer"], k


def test_info_reads_any_gguf(monkeypatch, capsys, tmp_path):
    import gguf
    p = tmp_path / "other.gguf"
    w = gguf.GGUFWriter(str(p), "frobnicator")
    w.add_uint32("frobnicator.block_count", 2)
    w.add_tensor("blk.0.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    rc, out, err = cli(monkeypatch, capsys, "info", str(p))
    assert rc == 0 and "cannot run" in out and "frobnicator" in out, err
    rc, out, err = cli(monkeypatch, capsys, "info", str(p), "--json")
    d = json.loads(out)
    assert rc == 0 and d["runs"] is False and "frobnicator" in d["cannot_run"] and d["n_params"] == 32


def toolkit_pipe(args: list[str], shell_tail: str) -> subprocess.CompletedProcess:
    cmd = " ".join([sys.executable, "-m", "toolkit", *args]) + " | " + shell_tail
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, TOOLKIT_THREADS="1"), timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["run", "-p", "hi", "-n", "400", "--ignore-eos"],
    ["info", str(DEMO)],
    ["bench", "-m", str(DEMO), "-p", "8", "-n", "2", "-r", "1", "-t", "1,1,1,1,1,1", "-o", "jsonl"],
])
def test_closed_pipe_exits_quietly(args):
    r = toolkit_pipe(args, "head -c 5")
    assert r.returncode == 0 and "Error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stdout) == 5


@pytest.mark.slow
def test_piped_output_not_wrapped_and_progress_lines(tmp_path):
    long_name = tmp_path / ("a-rather-long-directory-name-" * 4)
    long_name.mkdir()
    m = long_name / "m.gguf"
    m.symlink_to(DEMO)
    r = toolkit_pipe(["info", str(m), "--no-tensors"], "cat")
    first = r.stdout.splitlines()[0]
    assert r.returncode == 0 and len(first) > 80 and first.startswith(str(m)), r.stdout[:300]
    t = tmp_path / "t.txt"
    t.write_text("The quick brown fox jumps over the lazy dog. " * 30)
    r = subprocess.run([sys.executable, "-m", "toolkit", "perplexity", "-m", str(DEMO), "-f", str(t), "-c", "32",
                        "--chunks", "3"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [ln.split(" PPL")[0] for ln in r.stderr.splitlines() if ln.startswith("chunk")] == \
        ["chunk 1/3", "chunk 2/3", "chunk 3/3"] and "\r" not in r.stderr


def test_perplexity_file_flag(monkeypatch, capsys, tmp_path):
    t = tmp_path / "t.txt"
    t.write_text("The quick brown fox jumps over the lazy dog. " * 20)
    rc, a, err = cli(monkeypatch, capsys, "perplexity", "-m", str(DEMO), "-f", str(t), "-c", "32", "--json")
    rc2, b, err2 = cli(monkeypatch, capsys, "perplexity", "-m", str(DEMO), str(t), "-c", "32", "--json")
    assert rc == rc2 == 0 and json.loads(a)["ppl"] == json.loads(b)["ppl"]
    rc, _, err = cli(monkeypatch, capsys, "perplexity", "-m", str(DEMO), "-c", "32")
    assert rc == 2 and "-f FILE" in err


def test_convert_and_quantize_json_use_the_shared_names(monkeypatch, capsys, tmp_path):
    """README's JSON table: every command names the architecture `architecture` and the peak
    memory `peak_rss_bytes`.  convert --json said `arch` (its --dry-run said `architecture`) and
    quantize --json gave only `peak_rss_mb`."""
    src = ROOT / "tests" / "fixtures" / "hf" / "mamba-tiny"
    g = tmp_path / "m.gguf"
    rc, out, err = cli(monkeypatch, capsys, "convert", str(src), str(g), "--json")
    assert rc == 0, err
    conv = json.loads(out)
    rc, out, err = cli(monkeypatch, capsys, "convert", str(src), str(g), "--json", "--dry-run")
    assert rc == 0, err
    assert json.loads(out)["architecture"] == "mamba"
    rc, out, err = cli(monkeypatch, capsys, "quantize", str(g), str(tmp_path / "q.gguf"), "Q8_0", "--json")
    assert rc == 0, err
    quant = json.loads(out)
    for d in (conv, quant):
        assert d["architecture"] == "mamba"
        assert isinstance(d["wall_s"], float) and d["wall_s"] > 0
        assert isinstance(d["peak_rss_bytes"], int) and d["peak_rss_bytes"] > 10 * 2**20
