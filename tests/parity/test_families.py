"""The checks every family gets, driven by tests/families.py (each family module keeps only its
own special checks).

tests/fixtures/hf/NAME/reference.npz: the reference tokens, HF's float32 logits and its greedy
continuation (with the row's ``suppress`` ids masked, as the reference's ``min_new_tokens`` did).

- parity: our f32 conversion's logits within the row's bound (relative L2) in one shot and in
  ubatches of 1 and 7 tokens, the greedy continuation identical;
- two_seq: two sequences in one batch give each exactly its own run's logits;
- quant: `toolkit quantize` Q8_0 and Q4_K_M keep every 1-D tensor and the row's ``keep_f32``
  tensors (glob patterns) F32 (llama.cpp's name rules), quantize the rest, run finite, and the error against HF
  grows as the bits shrink: f32 < Q8_0 < Q4_K_M.
Each measured figure is written to the terminal.
"""
from __future__ import annotations

import fnmatch

import numpy as np
import pytest

from families import BY_NAME, names, params
from parity_util import check_against_hf, logits_of, rel_l2, terminal_report, two_sequences_vs_separate

pytestmark = pytest.mark.native


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "families parity")


def _ref(name):
    return np.load(BY_NAME[name].hf / "reference.npz")


@pytest.mark.parametrize("name", params("parity"))
def test_converted_f32_matches_hf(hf_f32, report, name):
    row = BY_NAME[name]
    check_against_hf(hf_f32(name), _ref(name), f"{name} (toolkit convert f32)", report, row.bound,
                     suppress=row.suppress)


@pytest.mark.parametrize("name", names("two_seq"))
def test_two_sequences_in_one_batch_equal_separate_runs(hf_f32, report, name):
    diff = two_sequences_vs_separate(hf_f32(name), _ref(name)["tokens"])
    report.append(f"{name}: two sequences in one batch vs separate runs: max |diff| {diff:.1e}")
    assert diff == 0.0


@pytest.mark.parametrize("name", names("quant"))
def test_quantize_error_ordered_by_bits(hf_f32, tmp_path, report, name):
    from toolkit.gguf_io import GGMLType, GGUFFile
    from toolkit.quantize import Options, quantize_file
    ref, src, keep = _ref(name), hf_f32(name), BY_NAME[name].keep_f32
    errs = {"F32": rel_l2(logits_of(src, ref["tokens"]), ref["logits"])}
    for qtype in ("Q8_0", "Q4_K_M"):
        out = tmp_path / f"{name}.{qtype}.gguf"
        quantize_file(str(src), str(out), qtype, Options(), n_threads=2)
        f = GGUFFile(str(out))
        for n, t in f.tensors.items():
            if len(t.shape) == 1 or any(fnmatch.fnmatchcase(n, k) for k in keep):
                assert t.type == GGMLType.F32, (qtype, n)
        assert any(t.type != GGMLType.F32 for t in f.tensors.values())
        lo = logits_of(out, ref["tokens"])
        assert np.isfinite(lo).all()
        errs[qtype] = rel_l2(lo, ref["logits"])
    report.append(f"{name} vs HF: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()))
    assert errs["F32"] < errs["Q8_0"] < errs["Q4_K_M"] < 1.0
