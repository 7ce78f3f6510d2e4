"""Parity of qwen4exp (hyper-connections, QSA indexed attention, PLE n-gram embeddings) with HF.

tests/fixtures/hf/NAME/reference.npz (tools/make_qwen4exp_fixture.py --reference / --variants,
transformers 5.24 eager attention, float32): 160 random tokens with EOS tokens at 40, 41 and 97
(the PLE hash restarts after each), HF's logits for every position and its 16-token greedy
continuation through its own cache.  QSA is sparse from position budget + ratio - 1 on (11 in
qwen4exp-tiny, 14 in the hc3 variant, 23 in the ple2 variant), so most positions choose blocks.

Checked on our own f32 conversions (the session's ``hf_f32``):
- relative L2 error of all 160 positions' logits < 1e-5 in one shot and in ubatches of 1 and 7,
  the greedy continuation identical (parity_util.check_against_hf);
- the logits at ubatch sizes 1, 7, 16 and 64 within 1e-6 (relative L2) of the one-shot run:
  the cuts go through PLE conv windows, n-gram histories and QSA blocks;
- two sequences in one batch give each the logits of its own run (the QSA blocks and the PLE
  history are per sequence).
Measured figures are written to the terminal.
"""
from __future__ import annotations

import numpy as np
import pytest

from parity_util import check_against_hf, logits_of, rel_l2, terminal_report, two_sequences_vs_separate

pytestmark = pytest.mark.native

# the main fixture (hc_count 2, budget 8 / ratio 4, one PLE layer, silu output gate) and the
# held-back-style variants: hc_count 3 with budget 12 / ratio 3, a sigmoid gate and an
# eos_token_id list; hc_count 4 with two PLE layers, 4-grams and budget 16 / ratio 8
NAMES = ["qwen4exp-tiny", "qwen4exp-hc3-tiny", "qwen4exp-ple2-tiny"]
F32_BOUND = 1e-5
SPLIT_BOUND = 1e-6


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "qwen4exp parity")


@pytest.mark.parametrize("name", NAMES)
def test_converted_f32_matches_hf(fixtures, hf_f32, report, name):
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    check_against_hf(hf_f32(name), ref, f"{name} (toolkit convert f32)", report, F32_BOUND)


@pytest.mark.parametrize("name", NAMES)
def test_reference_exercises_qsa_and_eos(fixtures, name):
    """The reference is long enough for sparse QSA selections and holds EOS tokens mid-prompt."""
    import json
    cfg = json.loads((fixtures / "hf" / name / "config.json").read_text())
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    eos = cfg["eos_token_id"][0] if isinstance(cfg["eos_token_id"], list) else cfg["eos_token_id"]
    first_sparse = cfg["indexer_budget"] + cfg["indexer_compress_ratio"] - 1
    assert len(ref["tokens"]) == 160 and first_sparse < 60
    assert {40, 41, 97} <= set(np.flatnonzero(ref["tokens"] == eos).tolist())


@pytest.mark.parametrize("name", NAMES)
def test_ubatch_splits_match_one_shot(hf_f32, fixtures, report, name):
    tok = np.load(fixtures / "hf" / name / "reference.npz")["tokens"]
    path = hf_f32(name)
    one = logits_of(path, tok)
    errs = {b: rel_l2(logits_of(path, tok, n_ubatch=b), one) for b in (1, 7, 16, 64)}
    report.append(f"{name}: vs one-shot, rel L2 " + ", ".join(f"-b {b} {e:.1e}" for b, e in errs.items()))
    for b, e in errs.items():
        assert e < SPLIT_BOUND, f"{name} -b {b}: relative L2 {e:.3e} from the one-shot logits"


@pytest.mark.parametrize("name", ["qwen4exp-tiny", "qwen4exp-ple2-tiny"])
def test_two_sequences_in_one_batch_equal_separate_runs(hf_f32, fixtures, report, name):
    tok = np.load(fixtures / "hf" / name / "reference.npz")["tokens"]
    diff = two_sequences_vs_separate(hf_f32(name), tok)
    report.append(f"{name}: two sequences in one batch vs separate runs: max |diff| {diff:.1e}")
    assert diff == 0.0
