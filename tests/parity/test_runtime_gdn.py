"""Parity of the gated-delta-net families (qwen3next, qwen35, qwen35moe) with the HF reference.

tests/fixtures/hf/NAME/reference.npz: 64 tokens of Python source, HF's float32 logits for them
and its 16-token greedy continuation.  The GGUF files are llama.cpp 0c1e570's own f32
conversions (tests/fixtures/llamacpp/NAME.f32.gguf) and, once our converter writes these
families, our own (the session's ``hf_f32`` conversions).

Checked for each: relative L2 error of all 64 positions' logits < F32_BOUND in one shot, in
ubatches of 1 and of 7 tokens, the greedy continuation identical; attention layers with fewer
KV heads than heads; two sequences in one batch give each the logits of its own run.
Measured figures are written to the terminal.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import numpy as np
import pytest

from parity_util import check_against_hf, greedy_of, logits_of, rel_l2, terminal_report, two_sequences_vs_separate

pytestmark = pytest.mark.native

TINY = ["qwen3next-tiny", "qwen35-tiny", "qwen35moe-tiny"]
# made by tools/make_gdn_fixtures.py: Dk != Dv and Hk != Hv (qwen35, qwen3next), attention at
# layers 0 and 4 (qwen3next), the full_attention_interval rule with Hk == Hv (qwen35moe), MTP
# tensors, a ConditionalGeneration checkpoint with a vision tower and an MoE MTP layer
F32_BOUND = 1e-5
# qwen35-small (widths 256): HF's own float32 logits are 1.96e-5 (rel L2) from a float64 run
# of the same checkpoint (transformers 5.24, torch 2.13; 1.78e-5 with HF's token-by-token
# recurrence instead of its chunked form), ours 1.2e-5 from it and 1.1e-5 from HF's float32
# ones: float32 rounding alone moves these logits by more than 1e-5.  (qwen35-tiny: HF f32
# 5.7e-6 from float64, ours 4.0e-6.)
BOUNDS = {"qwen35-small": 2e-5}


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "gdn parity")


@pytest.mark.parametrize("name", TINY)
def test_llamacpp_f32_matches_hf(fixtures, report, name):
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    check_against_hf(fixtures / "llamacpp" / f"{name}.f32.gguf", ref, f"{name} (llama.cpp f32)", report,
                     BOUNDS.get(name, F32_BOUND))


@pytest.mark.parametrize("name", TINY)
def test_fixture_has_grouped_query_attention(fixtures, name):
    """The attention layers these checks run have fewer KV heads than heads (GQA)."""
    from toolkit.arch import HParams
    from toolkit.gguf_io import GGUFFile
    hp = HParams.from_gguf(GGUFFile(str(fixtures / "llamacpp" / f"{name}.f32.gguf")))
    assert hp.attention_layers and hp.recurrent_layers
    assert all(0 < hp.n_head_kv[i] < hp.n_head for i in hp.attention_layers)


@pytest.mark.parametrize("name", TINY)
def test_two_sequences_in_one_batch_equal_separate_runs(fixtures, report, name):
    tok = np.load(fixtures / "hf" / name / "reference.npz")["tokens"]
    diff = two_sequences_vs_separate(fixtures / "llamacpp" / f"{name}.f32.gguf", tok)
    report.append(f"{name}: two sequences in one batch vs separate runs: max |diff| {diff:.1e}")
    assert diff == 0.0


@pytest.mark.parametrize("name", ["qwen35moe-tiny"])
def test_logits_do_not_depend_on_the_thread_count(fixtures, name):
    """Heads of the delta rule, rows and channels are split over the threads; every result is
    computed by the same loop whichever thread runs it."""
    from toolkit.runtime import Context, Model
    tok = np.load(fixtures / "hf" / name / "reference.npz")["tokens"]
    out = []
    for nt in (1, 3):
        with Model(fixtures / "llamacpp" / f"{name}.f32.gguf", n_threads=nt) as m, \
                Context(m, n_ctx=128, n_seq_max=2, n_threads=nt) as ctx:
            out.append(ctx.decode_batch([(tok[:40], 0), (tok[10:50], 1)], logits="all"))
    assert all(np.array_equal(a, b) for a, b in zip(*out))


@pytest.fixture
def gdn_threshold():
    """Set tk_gdn_threshold for one test (1: every run takes the chunked WY/UT form; 0: the
    token-by-token recurrence), restored after it."""
    from toolkit.binding import lib
    before = lib.tk_gdn_threshold()
    yield lib.tk_gdn_set_threshold
    lib.tk_gdn_set_threshold(before)


@pytest.mark.parametrize("name", TINY + ["qwen35-dkdv-tiny"])
def test_chunked_and_recurrent_prefill_agree(fixtures, hf_f32, report, gdn_threshold, name):
    """The chunked form (forced for every run) and the recurrence give the same logits to 1e-5
    (relative L2) and the same greedy continuation; the forms differ only in float rounding."""
    path = fixtures / "llamacpp" / f"{name}.f32.gguf"
    if not path.exists():   # no llama.cpp file (it cannot load Dk != Dv): ours
        path = hf_f32(name)
    tok = np.load(fixtures / "hf" / name / "reference.npz")["tokens"]
    res = {}
    for label, th in (("recurrent", 0), ("chunked", 1)):
        gdn_threshold(th)
        res[label] = (logits_of(path, tok), greedy_of(path, tok, 16))
    err = rel_l2(res["chunked"][0], res["recurrent"][0])
    report.append(f"{name}: chunked vs recurrent prefill: rel L2 {err:.2e}; greedy "
                  f"{'identical' if res['chunked'][1] == res['recurrent'][1] else 'DIFFERS'}")
    assert 0 < err < 1e-5, f"chunked vs recurrent: {err:.3e} (0 would mean the chunked form did not run)"
    assert res["chunked"][1] == res["recurrent"][1]
