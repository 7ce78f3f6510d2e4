"""qwen4exp files the runtime refuses: one clear line naming the key or tensor, exit status 2,
never a traceback or a crash.  Each case is our f32 conversion of qwen4exp-tiny with one thing
changed (rewritten with gguf-py):

- attention.compress_ratios all zero while the indexer tensors are present (what llama.cpp
  0c1e570's converter writes under transformers 5.24, docs/specs/gdn-family.md B1);
- a PLE hash constant missing (ple.head_offsets);
- a PLE layer that is not a gated delta net layer (ple.layers names the attention layer 3);
- hyper-connection tensors of the wrong width (hyper_connection.count 3 for tensors of 2 streams).
"""
from __future__ import annotations

import sys

import gguf
import pytest

from gguf_edit_util import rewrite, run_error
from toolkit.cli.app import main

pytestmark = pytest.mark.native


A = gguf.GGUFValueType.ARRAY
CASES = {
    "ratios_all_zero": (dict(kv={"qwen4exp.attention.compress_ratios": ([0, 0, 0, 0], A, gguf.GGUFValueType.INT32)}),
                        ["qwen4exp.attention.compress_ratios", "all zero", "indexer"]),
    "missing_ple_constant": (dict(drop_kv=("qwen4exp.ple.head_offsets",)),
                             ["missing key", "qwen4exp.ple.head_offsets"]),
    "ple_on_attention_layer": (dict(kv={"qwen4exp.ple.layers": ([3], A, gguf.GGUFValueType.INT32)}),
                               ["qwen4exp.ple.layers", "layer 3", "gated delta net"]),
    "hc_width": (dict(kv={"qwen4exp.hyper_connection.count": (3, gguf.GGUFValueType.UINT32, None)}),
                 ["output_hc_down.weight", "hc_count x n_embd = 192"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_qwen4exp_file_one_line(monkeypatch, capsys, tmp_path, hf_f32, case):
    edit, needles = CASES[case]
    bad = tmp_path / f"{case}.gguf"
    rewrite(hf_f32("qwen4exp-tiny"), bad, **edit)
    err = run_error(monkeypatch, capsys, bad)
    for n in needles:
        assert n in err, (n, err)


def test_rewrite_alone_keeps_the_file_runnable(monkeypatch, capsys, tmp_path, hf_f32):
    """The copy itself is sound: without an edit it runs (so each case fails for its edit)."""
    ok = tmp_path / "same.gguf"
    rewrite(hf_f32("qwen4exp-tiny"), ok)
    monkeypatch.setattr(sys, "argv", ["toolkit", "run", "-m", str(ok), "-p", "hello", "-n", "1"])
    try:
        main()
    except SystemExit as e:
        assert e.code in (0, None)
