"""Kimi Delta Attention (the gated delta rule with a per-key-channel decay, tk_gdn_head.gk)
in gdn.c against a float64 numpy reference of the recurrence (tests/kda_util.py; spec
docs/specs/kda-family.md §2.1, transformers modeling_kimi_linear.py recurrent_kimi_delta_attention):
    S <- Diag(exp(g_t)) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t

The recurrent form and the chunked form (docs/specs/kda-family.md §2.2, chunks of 64 with sub-blocks of
16, forced with tk_kda_set_threshold(1)) run at every CPU level the machine has.  Inputs are
realistic: q, k l2-normed (q also scaled by 1/sqrt(Dk)), g in [-3, 0] per channel, beta in
(0, 1).  Errors are max |got - ref| / max |ref| over the outputs and the final state.
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.binding import ffi, lib
from kda_util import make_inputs, reference, rel, run

pytestmark = pytest.mark.native

LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2, lib.TK_CPU_AVX512) if lv <= lib.tk_cpu_detected()]
# float32 kernels against float64: measured up to 5.0e-7 (recurrent), 6.7e-7 (chunked)
TOL = 3e-6
# the chunked form against the recurrence at the same level: measured up to 7.7e-7
TOL_FORMS = 2e-6


@pytest.fixture
def at_level():
    """Run at a CPU level, the detected level restored after."""
    def set_level(level):
        assert lib.tk_cpu_set_level(level) == level
    yield set_level
    lib.tk_cpu_set_level(lib.tk_cpu_detected())


@pytest.fixture
def threshold():
    """tk_kda_set_threshold for the test; the default (or TOOLKIT_KDA_MIN) restored after."""
    yield lib.tk_kda_set_threshold
    lib.tk_kda_set_threshold(-1)


# Kimi-Linear's head (128); 16 and 64; Dk % 8, % 16 tails and Dv % 4 (masked lanes, single
# value rows); Dk != Dv
DIMS = [(16, 16), (64, 64), (128, 128), (19, 13), (40, 6), (24, 33)]
N_TOK = [1, 5, 63, 64, 65, 200]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dk,dv", DIMS)
@pytest.mark.parametrize("n_tok", N_TOK)
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_kda_matches_reference(form, n_tok, dk, dv, level, at_level, threshold):
    at_level(level)
    threshold(1 if form == "chunked" else 0)
    inp = make_inputs(np.random.default_rng(n_tok * 1000 + dk + dv), n_tok, dk, dv)
    o_ref, S_ref = reference(inp)
    o, S = run(inp, lib.tk_gdn_run)
    eo, es = rel(o, o_ref), rel(S, S_ref)
    assert eo < TOL and es < TOL, f"{form} n_tok={n_tok} {dk}x{dv} level {level}: o {eo:.2e}, S {es:.2e}"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("regime", ["weak", "strong", "none", "mixed"])
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_kda_decay_regimes(form, regime, level, at_level, threshold):
    """Weak decay (near 1), strong (the state's rows die within a few tokens; the chunked
    form's products far below float32's range, flushed to 0), none (g = 0: the plain delta
    rule), mixed (per channel: half never decay, half decay strongly; what a scalar decay
    cannot express)."""
    at_level(level)
    threshold(1 if form == "chunked" else 0)
    g_range = {"weak": (-0.05, 0.0), "strong": (-30.0, -5.0), "none": (0.0, 0.0), "mixed": (0.0, 0.0)}[regime]
    inp = make_inputs(np.random.default_rng(11), 130, 48, 40, g_range=g_range, mixed=regime == "mixed")
    o_ref, S_ref = reference(inp)
    o, S = run(inp, lib.tk_gdn_run)
    eo, es = rel(o, o_ref), rel(S, S_ref)
    assert eo < TOL and es < TOL, f"{form} {regime} level {level}: o {eo:.2e}, S {es:.2e}"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("d", [16, 64, 128])
@pytest.mark.parametrize("n_tok", [1, 63, 64, 65, 200])
@pytest.mark.parametrize("regime", ["uniform", "mixed"])
def test_kda_chunked_matches_recurrence(regime, n_tok, d, level, at_level, threshold):
    """The chunked form against the recurrence at the same level, Dk = Dv = d; and over a
    run split in three calls (chunks then start elsewhere: rounding only)."""
    at_level(level)
    inp = make_inputs(np.random.default_rng(n_tok + d), n_tok, d, d, mixed=regime == "mixed")
    threshold(0)
    o_rec, S_rec = run(inp, lib.tk_gdn_run)
    threshold(1)
    o_chk, S_chk = run(inp, lib.tk_gdn_run)
    eo, es = rel(o_chk, o_rec), rel(S_chk, S_rec)
    assert eo < TOL_FORMS and es < TOL_FORMS, f"{regime} n_tok={n_tok} d={d} level {level}: o {eo:.2e}, S {es:.2e}"
    cuts = [0, n_tok // 3, n_tok // 3 + (n_tok + 1) // 2, n_tok]
    S = inp["S"].copy()
    o_split = np.concatenate([run(inp, lib.tk_gdn_run, a, b, S=S)[0] for a, b in zip(cuts, cuts[1:]) if b > a])
    eo, es = rel(o_split, o_rec), rel(S, S_rec)
    assert eo < TOL_FORMS and es < TOL_FORMS, f"split {cuts}: o {eo:.2e}, S {es:.2e}"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("split", [1, 40, 64, 100])
def test_kda_recurrent_split_over_calls(split, level, at_level):
    """Tokens [0, split) then [split, 130) on the carried state = [0, 130) in one call, bit
    for bit; and one call per token too (decode)."""
    at_level(level)
    inp = make_inputs(np.random.default_rng(split), 130, 32, 48)
    o_one, S_one = run(inp, lib.tk_gdn_recurrent)
    o_a, S_two = run(inp, lib.tk_gdn_recurrent, 0, split)
    o_b, S_two = run(inp, lib.tk_gdn_recurrent, split, 130, S=S_two)
    assert np.array_equal(o_one, np.concatenate([o_a, o_b])) and np.array_equal(S_one, S_two)
    S = inp["S"].copy()
    o_each = np.concatenate([run(inp, lib.tk_gdn_recurrent, t, t + 1, S=S)[0] for t in range(130)])
    assert np.array_equal(o_one, o_each) and np.array_equal(S_one, S)


def test_kda_equals_gdn_for_a_channel_constant_decay(at_level):
    """With every channel's decay equal to one per-token g, the scalar KDA recurrence is the
    scalar GDN recurrence bit for bit (the same operations); per-channel decays differ from it."""
    at_level(lib.TK_CPU_SCALAR)
    inp = make_inputs(np.random.default_rng(3), 70, 32, 24)
    g = np.ascontiguousarray(inp["gk"][:, :, :1].repeat(32, axis=2))
    o_kda, S_kda = run(dict(inp, gk=g), lib.tk_gdn_recurrent)
    n_head, h = inp["n_head"], inp["head"]
    gs = np.ascontiguousarray(g[:, :, 0])
    S = inp["S"].copy()
    o = np.zeros((70, 24), np.float32)
    keep = [inp[x] for x in ("q", "k", "v", "beta")] + [gs, S, o]
    p = [ffi.cast("float *", ffi.from_buffer(a)) for a in keep]
    hd = ffi.new("tk_gdn_head *")
    hd.n_tok, hd.dk, hd.dv = 70, 32, 24
    hd.q, hd.q_stride, hd.k, hd.k_stride = p[0] + h * 32, n_head * 32, p[1] + h * 32, n_head * 32
    hd.v, hd.v_stride, hd.beta, hd.g, hd.gb_stride = p[2] + h * 24, n_head * 24, p[3] + h, p[4] + h, n_head
    hd.S, hd.o, hd.o_stride, hd.work, hd.gk = p[5], p[6], 24, ffi.NULL, ffi.NULL
    lib.tk_gdn_recurrent(hd)
    assert np.array_equal(o, o_kda) and np.array_equal(S, S_kda)
    o_pc, _ = run(inp, lib.tk_gdn_recurrent)
    assert rel(o_pc, o_kda) > 1e-2


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_kda_output_over_v(form, level, at_level, threshold):
    """o may be v itself: the outputs written over the value rows are those of separate
    buffers, bit for bit, and the other heads' value rows are untouched."""
    at_level(level)
    threshold(1 if form == "chunked" else 0)
    inp = make_inputs(np.random.default_rng(9), 70, 24, 16)
    o_sep, S_sep = run(inp, lib.tk_gdn_run)
    n_head, h, dv = inp["n_head"], inp["head"], 16
    v, S = inp["v"].copy(), inp["S"].copy()
    ws = np.zeros(lib.tk_kda_work_floats(24, dv), np.float32)
    p = {name: ffi.cast("float *", ffi.from_buffer(a)) for name, a in
         (("q", inp["q"]), ("k", inp["k"]), ("v", v), ("gk", inp["gk"]), ("b", inp["beta"]), ("S", S), ("w", ws))}
    hd = ffi.new("tk_gdn_head *")
    hd.n_tok, hd.dk, hd.dv = 70, 24, dv
    hd.q, hd.q_stride = p["q"] + h * 24, n_head * 24
    hd.k, hd.k_stride = p["k"] + h * 24, n_head * 24
    hd.v, hd.v_stride = p["v"] + h * dv, n_head * dv
    hd.o, hd.o_stride = hd.v, n_head * dv
    hd.g, hd.beta, hd.gb_stride = ffi.NULL, p["b"] + h, n_head
    hd.gk, hd.gk_stride = p["gk"] + h * 24, n_head * 24
    hd.S, hd.work = p["S"], p["w"]
    lib.tk_gdn_run(hd)
    assert np.array_equal(v[:, h], o_sep) and np.array_equal(S, S_sep)
    assert np.array_equal(np.delete(v, h, axis=1), np.delete(inp["v"], h, axis=1))


def test_kda_threshold_default_and_override(monkeypatch, threshold):
    """tk_kda_set_threshold(n >= 0) sets it; (-1) goes back to the measured default; the
    library reads no environment (TOOLKIT_KDA_MIN is the CLI's); GDN's threshold is its own."""
    gdn = lib.tk_gdn_threshold()
    assert threshold(9) == 9 and lib.tk_kda_threshold() == 9 and lib.tk_gdn_threshold() == gdn
    monkeypatch.delenv("TOOLKIT_KDA_MIN", raising=False)
    default = threshold(-1)
    assert default >= 0 and lib.tk_kda_threshold() == default
    monkeypatch.setenv("TOOLKIT_KDA_MIN", "17")
    assert threshold(-1) == default and lib.tk_kda_threshold() == default


def test_kda_work_floats():
    """The workspace grows with the head; no head, none."""
    assert lib.tk_kda_work_floats(128, 128) >= 128 * 128 + 4 * 64 * 128
    assert lib.tk_kda_work_floats(32, 64) < lib.tk_kda_work_floats(64, 64)
    assert lib.tk_kda_work_floats(0, 64) == 0 and lib.tk_kda_work_floats(64, 0) == 0


@pytest.mark.parametrize("level", LEVELS)
def test_kda_threshold_picks_the_form(level, at_level, threshold):
    """Below the threshold, without a workspace, or with the threshold 0, tk_gdn_run is the
    recurrence bit for bit; from the threshold on it is the chunked form (not those bits);
    GDN's threshold does not choose for KDA heads."""
    at_level(level)
    inp = make_inputs(np.random.default_rng(7), 70, 32, 64)
    o_rec, S_rec = run(inp, lib.tk_gdn_recurrent)
    gdn = lib.tk_gdn_threshold()
    try:
        lib.tk_gdn_set_threshold(1)
        for thr, work in ((71, True), (0, True), (1, False)):
            threshold(thr)
            o, S = run(inp, lib.tk_gdn_run, work=work)
            assert np.array_equal(o, o_rec) and np.array_equal(S, S_rec), (thr, work)
    finally:
        lib.tk_gdn_set_threshold(-1)
    assert lib.tk_gdn_threshold() == gdn
    threshold(70)
    o, S = run(inp, lib.tk_gdn_run)
    assert not np.array_equal(o, o_rec)
    assert rel(o, o_rec) < TOL_FORMS and rel(S, S_rec) < TOL_FORMS


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_kda_wide_head(form, level, at_level, threshold):
    """Heads wider than the recurrent forms' stack buffers (1024 key channels scalar, 4096
    SIMD: the scalar recurrence recomputing its exp(g) per value row) match the reference
    (to 1e-5: float sums of 4100 terms; the chunked outputs measured 3.7e-6, the rest < 2e-7)."""
    at_level(level)
    threshold(1 if form == "chunked" else 0)
    inp = make_inputs(np.random.default_rng(13), 5, 4100, 3, g_range=(-0.5, 0.0))
    o_ref, S_ref = reference(inp)
    o, S = run(inp, lib.tk_gdn_run)
    eo, es = rel(o, o_ref), rel(S, S_ref)
    assert eo < 1e-5 and es < TOL, f"{form} level {level}: o {eo:.2e}, S {es:.2e}"
