"""The model shipped in the package (toolkit/data/default.gguf) and `toolkit perplexity` on it.

What these hold:
* the file is the hybrid the training script makes (granitehybrid, Mamba-2 + one attention
  layer, every matrix row a whole number of k-quant super-blocks);
* the C runtime reproduces the training script's own held-out perplexity (torch, float32,
  recorded in examples/demo-hf/train_meta.json) on the same text and chunks: a parity check of
  convert + quantize + runtime + tokenizer end to end;
* the trained model is far better than chance on held-out code;
* `toolkit run` with no -m prints Python-looking text, >= 16 tokens before any end of text,
  reproducibly with --seed.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.cli.cmd_run import DEFAULT_MODEL

REPO = Path(__file__).resolve().parents[2]
META = REPO / "examples" / "demo-hf" / "train_meta.json"
HELDOUT = REPO / "bench" / "data" / "stdlib-heldout.txt"

pytestmark = pytest.mark.native


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, TOOLKIT_THREADS=os.environ.get("TOOLKIT_THREADS", "2"))
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_shipped_model_is_the_small_hybrid():
    from toolkit.arch import HParams, LayerKind
    from toolkit.gguf_io import GGUFFile

    assert DEFAULT_MODEL.is_file(), f"{DEFAULT_MODEL} is missing"
    assert DEFAULT_MODEL.stat().st_size < 8 * 2**20
    f = GGUFFile(str(DEFAULT_MODEL))
    hp = HParams.from_gguf(f)
    assert hp.arch == "granitehybrid"
    assert [i for i, k in enumerate(hp.layer_kinds) if k == LayerKind.ATTENTION] == [2]
    assert sum(k == LayerKind.MAMBA2 for k in hp.layer_kinds) == 3
    quantized = [t for t in f if t.type.name == "Q8_0"]          # the matrices quantize converts
    assert len(quantized) >= 4 * 3 + 2
    for t in quantized:
        assert t.shape[0] % 256 == 0, f"{t.name}: row of {t.shape[0]} is not a whole k-quant super-block"


@pytest.mark.slow
def test_runtime_reproduces_the_training_scripts_heldout_perplexity():
    """Same text, same n_ctx and chunk count as tools/train_demo_model.py's final evaluation."""
    from toolkit.runtime.perplexity import perplexity_file

    meta = json.loads(META.read_text())
    ref = meta["heldout_ppl_trained"]
    n_chunks = ref["n_tokens"] // (ref["n_ctx"] - 1 - ref["n_ctx"] // 2)
    r = perplexity_file(str(DEFAULT_MODEL), str(HELDOUT), ref["n_ctx"], max_chunks=n_chunks, threads=2)
    assert r.n_scored == ref["n_tokens"]
    # default.gguf is Q8_0: its perplexity may differ from the float32 torch figure by the
    # quantization error (0.1-0.3 % measured by bench/quality.py), not by more than 1 %.
    assert r.ppl == pytest.approx(ref["ppl"], rel=0.01), (r.ppl, ref["ppl"])
    # and it is far below the same architecture with random weights (also from train_meta)
    assert r.ppl < meta["heldout_ppl_init"]["ppl"] / 50


@pytest.mark.slow
def test_perplexity_cli_json_and_kld_against_itself(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(HELDOUT.read_text(encoding="utf-8")[:40000], encoding="utf-8")
    r = _cli("perplexity", "-m", str(DEFAULT_MODEL), str(text), "--ctx", "128", "--chunks", "4", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["n_chunks"] == 4 and d["n_scored"] == 4 * 63
    assert 1.0 < d["ppl"] < 100 and d["ppl_stderr"] > 0
    assert d["nll"] == pytest.approx(math.log(d["ppl"]))
    out = tmp_path / "base.npz"
    r = _cli("perplexity", "-m", str(DEFAULT_MODEL), str(text), "--ctx", "128", "--chunks", "4", "--kld-out", str(out))
    assert r.returncode == 0, r.stderr
    r = _cli("perplexity", "-m", str(DEFAULT_MODEL), str(text), "--ctx", "128", "--chunks", "4",
             "--kld-base", str(out), "--json")
    assert r.returncode == 0, r.stderr
    k = json.loads(r.stdout)["kld"]
    assert k["mean"] < 1e-6 and k["top1"] == 1.0 and k["n_tokens"] == 4 * 63


@pytest.mark.slow
def test_perplexity_cli_errors(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("x = 1\n")
    r = _cli("perplexity", "-m", str(DEFAULT_MODEL), str(short), "--ctx", "128")
    assert r.returncode == 2 and "fewer than one chunk" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe" * 100)
    r = _cli("perplexity", "-m", str(DEFAULT_MODEL), str(bad))
    assert r.returncode == 2 and "not UTF-8" in r.stderr
    r = _cli("perplexity", "-m", str(DEFAULT_MODEL), str(short), "--kld-base", "a", "--kld-out", "b")
    assert r.returncode == 2 and "one or the other" in r.stderr
    r = _cli("perplexity", "-m", str(tmp_path / "nope.gguf"), str(short))
    assert r.returncode == 2 and "nope.gguf" in r.stderr


def test_run_without_model_prints_python_reproducibly():
    args = ("run", "def fibonacci(n):", "--seed", "42", "-n", "48", "--json")
    a = _cli(*args)
    assert a.returncode == 0, a.stderr
    b = _cli(*args)
    da, db = json.loads(a.stdout), json.loads(b.stdout)
    assert da["tokens"] == db["tokens"] and da["text"] == db["text"]
    assert da["model"].endswith("default.gguf")
    assert len(da["tokens"]) >= 16, da          # generation stops before (not at) an end-of-text token
    text = da["text"]
    # Python-looking: indentation, and at least two of Python's keywords or builtins.
    assert "\n    " in text or "\n        " in text, text
    words = {"return", "if", "def", "self", "for", "in", "else", "None", "not", "is", "import", "range", "len"}
    assert len(words & set(re.findall(r"[A-Za-z_]+", text))) >= 2, text
    c = _cli("run", "def fibonacci(n):", "--seed", "43", "-n", "48", "--json")
    assert json.loads(c.stdout)["tokens"] != da["tokens"]   # the seed matters
