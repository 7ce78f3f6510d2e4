"""Parity of olmo-hybrid, OLMo-Hybrid (docs/specs/more-hybrids.md §3; names and keys proposed there), with
the HF reference.

tests/fixtures/hf/NAME/reference.npz: 64 tokens of Python source, HF's float32 logits and its
16-token greedy continuation with end-of-text (id 0) suppressed (``min_new_tokens``).
olmohybrid-tiny is the reference set's (GDN at 0, 1, 3: Hk 2, Hv 4, Dk 16, Dv 32, beta x 2; post-norm
attention at 2 with NEOX RoPE, GQA 4/2); tools/make_olmohybrid_fixtures.py made olmohybrid-nope-tiny
(attention at 0 and 3, NoPE as the released checkpoints, MQA 3/1; GDN Hk 3, Hv 6, Dk 8, Dv 12,
conv 3, beta x 1; tied).  llama.cpp has no OLMo-Hybrid: no llama.cpp file.

Checked: our f32 conversion's logits < F32_BOUND relative L2 one-shot and in ubatches of 1 and 7,
greedy identical, with the GDN's recurrence and with its chunked form forced; the calibration
(a file without ``ssm.beta_scale``: beta not doubled; RoPE on the NoPE file) far above the bound;
two sequences in one batch give each its own run's logits; ``toolkit quantize`` Q8_0 / Q4_K_M with
error ordered by bits; bad keys are one line.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import numpy as np
import pytest
from parity_util import check_against_hf, logits_of, rel_l2, terminal_report

pytestmark = pytest.mark.native

NAMES = ["olmohybrid-tiny", "olmohybrid-nope-tiny"]
F32_BOUND = 1e-5


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "olmo-hybrid parity")


@pytest.fixture
def gdn_threshold():
    """Set tk_gdn_threshold for one test (1: every run takes the chunked form), restored after it."""
    from toolkit.binding import lib
    before = lib.tk_gdn_threshold()
    yield lib.tk_gdn_set_threshold
    lib.tk_gdn_set_threshold(before)


def _ref(fixtures, name):
    return np.load(fixtures / "hf" / name / "reference.npz")


@pytest.mark.parametrize("name", NAMES)
def test_chunked_gdn_matches_hf(fixtures, hf_f32, report, gdn_threshold, name):
    gdn_threshold(1)
    check_against_hf(hf_f32(name), _ref(fixtures, name), f"{name} (chunked GDN)", report, F32_BOUND, suppress=(0,))


def test_fixtures_cover_the_layout(hf_f32):
    """Attention layers, NoPE / RoPE, Dv from inner_size, beta scale written only when not 1."""
    from toolkit.arch import HParams, LayerKind
    from toolkit.gguf_io import GGUFFile
    for name, attn, n_rot, dk, dv, beta in (("olmohybrid-tiny", [2], 16, 16, 32, 2.0),
                                            ("olmohybrid-nope-tiny", [0, 3], 0, 8, 12, None)):
        f = GGUFFile(str(hf_f32(name)))
        hp = HParams.from_gguf(f)
        assert hp.attention_layers == attn and set(hp.layer_kinds) == {LayerKind.GDN, LayerKind.ATTENTION}
        assert (hp.n_rot, hp.d_state, hp.ssm_head_dim, hp.gdn_norm_eps) == (n_rot, dk, dv, 1e-5)
        assert f.get("olmo-hybrid.ssm.beta_scale") == beta
        assert (f.get("olmo-hybrid.rope.freq_base") is not None) == (n_rot > 0)
        assert f"blk.{attn[0]}.attn_norm.weight" not in f.tensors and f"blk.{attn[0]}.post_ffw_norm.weight" in f.tensors
        assert ("output.weight" in f.tensors) == (name == "olmohybrid-tiny")


@pytest.mark.parametrize("name,drop,kv,what", [
    ("olmohybrid-tiny", ("olmo-hybrid.ssm.beta_scale",), {}, "beta not doubled"),
    ("olmohybrid-nope-tiny", (), {"olmo-hybrid.rope.dimension_count": 16}, "RoPE on a NoPE model"),
])
def test_calibration_wrong_readings_are_far_off(fixtures, hf_f32, tmp_path, report, name, drop, kv, what):
    import gguf
    from gguf_edit_util import rewrite
    bad = tmp_path / "bad.gguf"
    rewrite(hf_f32(name), bad, drop_kv=drop, kv={k: (v, gguf.GGUFValueType.UINT32, None) for k, v in kv.items()})
    ref = _ref(fixtures, name)
    err = rel_l2(logits_of(bad, ref["tokens"]), ref["logits"])
    report.append(f"{name} with {what}: rel L2 {err:.2e}")
    assert err > 100 * F32_BOUND


@pytest.mark.parametrize("kv,needles", [
    ({"olmo-hybrid.ssm.beta_scale": (-2.0, "FLOAT32", None)}, ["olmo-hybrid.ssm.beta_scale", "must be finite and > 0"]),
    ({"olmo-hybrid.ssm.inner_size": (130, "UINT32", None)}, ["olmo-hybrid.ssm.inner_size", "time_step_rank 4"]),
    ({"olmo-hybrid.attention.recurrent_layers": ([True, True, False], "ARRAY", "BOOL")},
     ["olmo-hybrid.attention.recurrent_layers", "3 entries"]),
])
def test_bad_gguf_keys_are_one_clear_line(monkeypatch, capsys, hf_f32, tmp_path, kv, needles):
    """`toolkit run` on a file with a bad beta scale, an inner size that is no multiple of the value
    heads, or a layer pattern of the wrong length: one line (exit 2), no traceback."""
    import gguf
    from gguf_edit_util import rewrite, run_error
    bad = tmp_path / "bad.gguf"
    rewrite(hf_f32("olmohybrid-tiny"), bad,
            kv={k: (v, gguf.GGUFValueType[t], s and gguf.GGUFValueType[s]) for k, (v, t, s) in kv.items()})
    err = run_error(monkeypatch, capsys, bad)
    for n in needles:
        assert n in err, err
