"""The gated delta rule kernels (gdn.c) against a float64 numpy reference of the recurrence.

One value head of one sequence (contract: tk_testing.h, tk_gdn_head):
    S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
S is Dk x Dv, stored as llama.cpp stores it: element (key i, value j) at S[j*dk + i], i.e. the
C buffer is S^T row-major, shape [Dv, Dk].  ref: Yang, Kautz, Hatamizadeh 2024 "Gated Delta
Networks" eq. (10); transformers modeling_qwen3_next.py torch_recurrent_gated_delta_rule.

The recurrent form runs at every CPU level the machine has; the chunked form (WY/UT, chunks
of 64) is forced with tk_gdn_set_threshold(1) and runs at every level too.  Inputs are
realistic: q, k l2-normed (q also scaled by 1/sqrt(Dk), as the caller does), g in [-3, 0],
beta in (0, 1).  Errors are max |got - ref| / max |ref| over the outputs and the final state.
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.binding import ffi, lib
from gdn_util import make_inputs, reference, rel, run

pytestmark = pytest.mark.native

LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2) if lv <= lib.tk_cpu_detected()]
# float32 kernels against float64: measured 0.5e-7 .. 5e-7 (all forms, levels, shapes here)
TOL = 3e-6


@pytest.fixture
def at_level(request):
    """Run at the CPU level request.param names, the detected level restored after."""
    def set_level(level):
        assert lib.tk_cpu_set_level(level) == level
    yield set_level
    lib.tk_cpu_set_level(lib.tk_cpu_detected())


@pytest.fixture
def threshold():
    """tk_gdn_set_threshold for the test; the default (or TOOLKIT_GDN_MIN) restored after."""
    yield lib.tk_gdn_set_threshold
    lib.tk_gdn_set_threshold(-1)


# Dk != Dv; the bench model's head; Dk % 8 and Dv % 4 tails (masked lanes, single value
# rows); Dk a multiple of 8 but not of 16
DIMS = [(32, 64), (128, 128), (19, 13), (40, 6)]
N_TOK = [1, 5, 63, 64, 65, 130]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dk,dv", DIMS)
@pytest.mark.parametrize("n_tok", N_TOK)
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_gdn_matches_reference(form, n_tok, dk, dv, level, at_level, threshold):
    at_level(level)
    threshold(1 if form == "chunked" else 0)
    inp = make_inputs(np.random.default_rng(n_tok * 1000 + dk + dv), n_tok, dk, dv)
    o_ref, S_ref = reference(inp)
    o, S = run(inp, lib.tk_gdn_run)
    eo, es = rel(o, o_ref), rel(S, S_ref)
    assert eo < TOL and es < TOL, f"{form} n_tok={n_tok} {dk}x{dv} level {level}: o {eo:.2e}, S {es:.2e}"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
@pytest.mark.parametrize("split", [1, 40, 64, 100])
def test_gdn_state_carried_across_calls(split, form, level, at_level, threshold):
    """Tokens [0, split) then [split, 130) on the carried state = [0, 130) in one call (the
    recurrence bit for bit; the chunked form to rounding: its chunks start elsewhere)."""
    at_level(level)
    threshold(1 if form == "chunked" else 0)
    inp = make_inputs(np.random.default_rng(split), 130, 32, 48)
    o_one, S_one = run(inp, lib.tk_gdn_run)
    o_a, S_two = run(inp, lib.tk_gdn_run, 0, split)
    o_b, S_two = run(inp, lib.tk_gdn_run, split, 130, S=S_two)
    o_two = np.concatenate([o_a, o_b])
    if form == "recurrent":
        assert np.array_equal(o_one, o_two) and np.array_equal(S_one, S_two)
    else:
        assert rel(o_two, o_one) < TOL and rel(S_two, S_one) < TOL
    o_ref, S_ref = reference(inp)
    assert rel(o_two, o_ref) < TOL and rel(S_two, S_ref) < TOL


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
@pytest.mark.parametrize("g_range", [(-0.05, 0.0), (-30.0, -5.0), (0.0, 0.0)])
def test_gdn_decay_regimes(g_range, form, level, at_level, threshold):
    """Weak decay (the chunk's decays near 1), strong (a chunk's products far below float32's
    range: the chunked form's flush to 0), none (g = 0: the plain delta rule)."""
    at_level(level)
    threshold(1 if form == "chunked" else 0)
    inp = make_inputs(np.random.default_rng(11), 130, 48, 40, g_range=g_range)
    o_ref, S_ref = reference(inp)
    o, S = run(inp, lib.tk_gdn_run)
    eo, es = rel(o, o_ref), rel(S, S_ref)
    assert eo < TOL and es < TOL, f"{form} g in {g_range} level {level}: o {eo:.2e}, S {es:.2e}"


@pytest.mark.parametrize("level", LEVELS)
def test_gdn_recurrent_token_by_token_calls(level, at_level):
    """Decode: one call per token gives the bits of one call over the run (the AVX2 form
    blocks tokens; its arithmetic must not depend on where a call starts)."""
    at_level(level)
    inp = make_inputs(np.random.default_rng(5), 45, 40, 20)
    o_one, S_one = run(inp, lib.tk_gdn_recurrent)
    S = inp["S"].copy()
    o_each = np.concatenate([run(inp, lib.tk_gdn_recurrent, t, t + 1, S=S)[0] for t in range(45)])
    assert np.array_equal(o_one, o_each) and np.array_equal(S_one, S)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_gdn_output_over_v(form, level, at_level, threshold):
    """o may be v itself (tk_testing.h): the outputs written over the value rows are those
    of separate buffers, bit for bit."""
    at_level(level)
    threshold(1 if form == "chunked" else 0)
    inp = make_inputs(np.random.default_rng(9), 70, 24, 16)
    o_sep, S_sep = run(inp, lib.tk_gdn_run)
    n_head, h, dv = inp["n_head"], inp["head"], 16
    v = inp["v"].copy()
    S = inp["S"].copy()
    hd = ffi.new("tk_gdn_head *")
    ws = np.zeros(lib.tk_gdn_work_floats(24, dv), np.float32)
    p = {name: ffi.cast("float *", ffi.from_buffer(a)) for name, a in
         (("q", inp["q"]), ("k", inp["k"]), ("v", v), ("g", inp["g"]), ("b", inp["beta"]), ("S", S), ("w", ws))}
    hd.n_tok, hd.dk, hd.dv = 70, 24, dv
    hd.q, hd.q_stride = p["q"] + h * 24, n_head * 24
    hd.k, hd.k_stride = p["k"] + h * 24, n_head * 24
    hd.v, hd.v_stride = p["v"] + h * dv, n_head * dv
    hd.o, hd.o_stride = hd.v, n_head * dv
    hd.g, hd.beta, hd.gb_stride = p["g"] + h, p["b"] + h, n_head
    hd.S, hd.work = p["S"], p["w"]
    lib.tk_gdn_run(hd)
    assert np.array_equal(v[:, h], o_sep) and np.array_equal(S, S_sep)
    assert np.array_equal(np.delete(v, h, axis=1), np.delete(inp["v"], h, axis=1))


@pytest.mark.parametrize("level", LEVELS)
def test_gdn_threshold_picks_the_form(level, at_level, threshold):
    """Below the threshold, without a workspace, or with the threshold 0, tk_gdn_run is the
    recurrence bit for bit; from the threshold on it is the chunked form (not those bits)."""
    at_level(level)
    inp = make_inputs(np.random.default_rng(7), 70, 32, 64)
    o_rec, S_rec = run(inp, lib.tk_gdn_recurrent)
    for thr, work in ((71, True), (0, True), (1, False)):
        threshold(thr)
        o, S = run(inp, lib.tk_gdn_run, work=work)
        assert np.array_equal(o, o_rec) and np.array_equal(S, S_rec), (thr, work)
    threshold(70)
    o, S = run(inp, lib.tk_gdn_run)
    assert not np.array_equal(o, o_rec)
    assert rel(o, o_rec) < TOL and rel(S, S_rec) < TOL


def test_gdn_threshold_default_and_override(monkeypatch, threshold):
    """tk_gdn_set_threshold(n >= 0) sets it; (-1) goes back to the measured default (0 = never
    chunked: see gdn.c); the library reads no environment (TOOLKIT_GDN_MIN is the CLI's:
    toolkit.runtime.options)."""
    assert threshold(9) == 9 and lib.tk_gdn_threshold() == 9
    monkeypatch.delenv("TOOLKIT_GDN_MIN", raising=False)
    default = threshold(-1)
    assert default >= 0 and lib.tk_gdn_threshold() == default
    monkeypatch.setenv("TOOLKIT_GDN_MIN", "17")
    assert threshold(-1) == default and lib.tk_gdn_threshold() == default


def test_gdn_work_floats():
    """The workspace grows with the head (Dk x Dv state, chunk rows of Dk and Dv); no head, none."""
    assert lib.tk_gdn_work_floats(128, 128) >= 128 * 128 + 3 * 64 * 128
    assert lib.tk_gdn_work_floats(32, 64) < lib.tk_gdn_work_floats(64, 64)
    assert lib.tk_gdn_work_floats(0, 64) == 0
