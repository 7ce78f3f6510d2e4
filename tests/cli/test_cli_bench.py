"""`toolkit bench`: llama-bench's table and -o json schema, numbers consistent with the samples."""
from __future__ import annotations

import json
import os
import pathlib
import statistics

import pytest

from cli_runner import cli

pytestmark = pytest.mark.native

MODEL = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "bamba-tiny.f32.gguf"




def test_bench_json_schema(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-p", "16,40", "-n", "4", "-r", "3", "-t", "2", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert [(r["n_prompt"], r["n_gen"]) for r in rows] == [(16, 0), (40, 0), (0, 4)]
    for r in rows:
        for key in ("model_filename", "model_type", "model_size", "model_n_params", "n_batch", "n_ubatch",
                    "n_threads", "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns",
                    "samples_ts", "cpu_level"):
            assert key in r, key
        assert r["n_threads"] == 2 and len(r["samples_ns"]) == 3
        n = r["n_prompt"] or r["n_gen"]
        assert r["samples_ts"] == pytest.approx([n * 1e9 / s for s in r["samples_ns"]], rel=1e-6)
        assert r["avg_ts"] == pytest.approx(statistics.fmean(r["samples_ts"]))
        assert r["stddev_ts"] == pytest.approx(statistics.stdev(r["samples_ts"]))
        assert 0 < r["model_size"] < MODEL.stat().st_size


def test_bench_table(monkeypatch, capsys):
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-p", "8", "-n", "2", "-r", "1", "-t", "1")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("| model") and "t/s" in lines[0]
    assert any(" pp8 |" in ln for ln in lines) and any(" tg2 |" in ln for ln in lines)
    assert "kernels:" in out


@pytest.mark.parametrize("args", [["-p", "x"], ["-p", "-1"], ["-r", "0"], ["-t", "-1"], ["-t", "1,x"], ["-p", "0", "-n", "0"]])
def test_bench_bad_args(monkeypatch, capsys, args):
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), *args)
    assert rc == 2 and "error" in err.lower() and "Traceback" not in err


def test_bench_missing_model(monkeypatch, capsys, tmp_path):
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(tmp_path / "nope.gguf"))
    assert rc == 2 and "nope.gguf" in err


def test_bench_without_m_uses_the_packaged_model(monkeypatch, capsys):
    # as run: no -m is the packaged default model (was: "Missing option '-m'")
    from toolkit.cli.cmd_run import DEFAULT_MODEL
    rc, out, err = cli(monkeypatch, capsys, "bench", "-p", "4", "-n", "0", "-r", "1", "-t", "1", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["model_filename"] for r in rows] == [str(DEFAULT_MODEL)]


def test_bench_lists_models_and_formats(monkeypatch, capsys):
    import csv
    import io
    other = MODEL.parent / "bamba-tiny.f32.gguf"
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-m", str(other), "-p", "8", "-n", "2",
                       "-r", "1", "-t", "1,2", "-o", "jsonl")
    assert rc == 0, err
    rows = [json.loads(x) for x in out.splitlines()]
    assert [(os.path.basename(r["model_filename"]), r["n_threads"], r["n_prompt"], r["n_gen"]) for r in rows] == [
        (m.name, t, p, g) for m in (MODEL, other) for t in (1, 2) for p, g in ((8, 0), (0, 2))]
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-p", "8", "-n", "0", "-r", "1",
                       "-b", "4,8", "-ub", "2", "-o", "csv")
    assert rc == 0, err
    table = list(csv.DictReader(io.StringIO(out)))
    assert [(r["n_batch"], r["n_ubatch"], r["use_mmap"]) for r in table] == [("4", "2", "true"), ("8", "2", "true")]
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-p", "8", "-n", "0", "-r", "1", "-b", "4,8")
    assert rc == 0 and "n_batch" in out.splitlines()[0], err
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-o", "xml")
    assert rc == 2 and "-o xml" in err


def test_bench_md_type_names_and_column_widths(monkeypatch, capsys, tmp_path):
    """-o md: the model column names the file type as llama-bench does (llama.cpp's
    llama_model_ftype_name: 'Q4_K - Medium', 'all F32'), and every column is as wide as its
    content: all lines of the table have their '|' at the same places (a 30-wide model column
    overflowed for longer names)."""
    q = tmp_path / "m.Q4_K_M.gguf"
    assert cli(monkeypatch, capsys, "quantize", str(MODEL), str(q), "Q4_K_M")[0] == 0
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-m", str(q), "-p", "8", "-n", "0", "-r", "1",
                       "-t", "1", "-mmp", "0,1")
    assert rc == 0, err
    table = [ln for ln in out.splitlines() if ln.startswith("|")]
    assert len(table) == 2 + 4
    bars = {tuple(i for i, ch in enumerate(ln) if ch == "|") for ln in table}
    assert len(bars) == 1, "\n".join(table)
    assert "granitehybrid 0.25M all F32 " in table[2] and "granitehybrid 0.25M Q4_K - Medium " in table[4]
    assert "| mmap |" in table[0]
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(q), "-p", "8", "-n", "0", "-r", "1", "-t", "1", "-o", "json")
    assert json.loads(out)[0]["model_type"] == "granitehybrid 0.25M Q4_K - Medium"


def test_bench_depth(monkeypatch, capsys):
    """-d D (llama-bench's n_depth): D tokens in the memory before the timed part, filled once
    (decoded) and loaded from the saved state for the later runs; rows carry n_depth and the
    table's test column says `pp8 @ d24`."""
    from toolkit.runtime import Context
    seen = []   # (tokens decoded, the sequence's last position before the call)
    real_decode, real_load = Context.decode, Context.load_state

    def decode(self, tokens, *a, **k):
        seen.append((len(tokens), self.memory.seq_pos_max(0)))
        return real_decode(self, tokens, *a, **k)

    loads = []
    monkeypatch.setattr(Context, "decode", decode)
    monkeypatch.setattr(Context, "load_state", lambda self, blob, seq_id=-1: (loads.append(seq_id),
                                                                              real_load(self, blob, seq_id)))
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-p", "8", "-n", "2", "-d", "0,24", "-r", "2",
                       "-t", "1", "-b", "16", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert [(r["n_prompt"], r["n_gen"], r["n_depth"]) for r in rows] == [(8, 0, 0), (0, 2, 0), (8, 0, 24), (0, 2, 24)]
    # depth 0: every timed call starts on an empty memory; depth 24: pp8 is one call after
    # position 23 (the fill: 16 + 8 tokens in calls of -b 16, once), tg2 two calls after 23 and 24
    assert seen[:3] == [(8, -1)] * 3 and seen[3:9] == [(1, -1), (1, 0)] * 3
    assert seen[9:11] == [(16, -1), (8, 15)]
    assert seen[11:14] == [(8, 23)] * 3
    assert seen[14:] == [(1, 23), (1, 24)] * 3   # tg2 loads pp8's saved state: no second fill
    assert len(loads) == 2 + 3 and set(loads) == {0}
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-p", "8", "-n", "0", "-d", "24", "-r", "1", "-t", "1")
    assert rc == 0, err
    assert " pp8 @ d24 |" in out and "type_k" not in out


@pytest.mark.parametrize("args", [["-d", "x"], ["-d", "-4"], ["-ctk", "q9_9"], ["-ctv", "f32,nope"]])
def test_bench_depth_and_cache_type_bad_args(monkeypatch, capsys, args):
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), *args)
    assert rc == 2 and ("-d" in err or "-ct" in err) and "Traceback" not in err


def test_bench_mtp_rows(monkeypatch, capsys, hf_f32):
    """--mtp: per tgN a 'tgN greedy' row and per --draft-max K a 'tgN mtpK' row with the draft
    counts (per draft position too); the greedy tokens are checked equal inside the bench."""
    model = str(hf_f32("qwen35-mtp-tiny"))
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", model, "-p", "0", "-n", "12", "-r", "1", "-t", "1",
                       "--mtp", "--draft-max", "1,3", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert [(r["n_gen"], r.get("spec_type"), r.get("n_draft")) for r in rows] == [
        (12, None, None), (12, "none", 0), (12, "mtp", 1), (12, "mtp", 3)]
    for r in rows[2:]:
        assert r["n_drafted"] > 0 and len(r["acceptance_at"]) == r["n_draft"]
        assert r["samples_ts"] == pytest.approx([12 * 1e9 / s for s in r["samples_ns"]], rel=1e-6)
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", model, "-p", "0", "-n", "4", "-r", "1", "-t", "1",
                       "--mtp", "--draft-max", "2")
    assert rc == 0, err
    assert "tg4 greedy" in out and "tg4 mtp2" in out


@pytest.mark.parametrize("args, needle", [(("--mtp",), "has no MTP / NextN head"),
                                          (("--mtp", "--draft-max", "0"), "--draft-max"),
                                          (("--mtp", "-n", "0", "-p", "8"), "no tgN test")])
def test_bench_mtp_errors(monkeypatch, capsys, args, needle):
    rc, out, err = cli(monkeypatch, capsys, "bench", "-m", str(MODEL), "-n", "4", "-r", "1", *args)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
