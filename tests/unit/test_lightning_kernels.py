"""The lightning attention kernels (lightning.c) against a float64 NumPy reference.

One head of one sequence (contract: tk_testing.h, tk_lightning_head), MiniMax-Text-01's linear
attention with the per-head decay lambda = exp(-s):
    S <- lambda S + k_t v_t^T;  o_t = S^T q_t
S is d x d, stored as llama.cpp stores it: element (k, v) at S[v*d + k], i.e. the C buffer is
S^T row-major, shape [d(v), d(k)].  ref: transformers 5.24 modeling_minimax.py
MiniMaxLightningAttention (docs/specs/more-hybrids.md §5.4).

Two references: the recurrence token by token, and HF's block form written out in NumPy
(its query_decay / key_decay / diagonal_decay / block_decay, blocks of any size), which the
recurrence reproduces to float64 rounding (checked here too).  The kernels' recurrence runs at
every CPU level the machine has, the block form (blocks of 64) likewise, forced with
tk_lightning_set_threshold(1).  Inputs as the layer holds them: q, k, v after a SiLU of a
projection (here: silu of N(0, 1)), three heads side by side, this head the middle one; slopes
from HF's formula, 0.5 (the fastest a 8-head layer 0 gets) down to 1e-5 (a last layer's).
Errors are max |got - ref| / max |ref| over the outputs and the final state.
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.binding import ffi, lib

pytestmark = pytest.mark.native

LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2, lib.TK_CPU_AVX512) if lv <= lib.tk_cpu_detected()]
# float32 kernels against float64, measured worst over the cases here: block form 8.0e-7; the
# recurrence 2.8e-6 (lambda = exp(-s) rounded to float32 compounds over 130 tokens at s = 1e-5;
# HF's float32 recurrence does the same)
TOL = 5e-6


def silu(x):
    return x / (1 + np.exp(-x))


def make_inputs(rng, n_tok, d, slope, n_head=3):
    f = lambda a: np.ascontiguousarray(a, np.float32)  # noqa: E731
    q, k, v = (f(silu(rng.standard_normal((n_tok, n_head, d))) / np.sqrt(d)) for _ in range(3))
    S = f(rng.standard_normal((d, d)) * 0.5)            # S^T: row v = S[:, v]
    return dict(q=q, k=k, v=v, S=S, slope=np.float32(slope), n_head=n_head, head=1)


def reference(inp):
    """float64 recurrence: (o [n, d], S^T [d, d])."""
    h, lam = inp["head"], np.exp(-np.float64(inp["slope"]))
    St = inp["S"].astype(np.float64).T.copy()          # [k, v]
    out = []
    for t in range(inp["q"].shape[0]):
        q, k, v = (inp[x][t, h].astype(np.float64) for x in ("q", "k", "v"))
        St = lam * St + np.outer(k, v)
        out.append(St.T @ q)
    return np.array(out).reshape(-1, St.shape[1]), St.T.copy()


def reference_block(inp, block):
    """float64, HF's block form (MiniMaxLightningAttention.forward, no cache) with
    block_size `block`: (o [n, d], S^T [d, d])."""
    h, s = inp["head"], np.float64(inp["slope"])
    Q, K, V = (inp[x][:, h].astype(np.float64) for x in ("q", "k", "v"))
    r = np.arange(block) + 1
    query_decay = np.exp(-s * r)[:, None]
    key_decay = np.exp(-s * (block - r))[:, None]
    diff = r[:, None] - r[None, :]
    diagonal_decay = np.where(diff >= 0, np.exp(-s * np.maximum(diff, 0)), 0.0)
    kv = inp["S"].astype(np.float64).T.copy()
    out = []
    for a in range(0, Q.shape[0], block):
        q, k, v = Q[a:a + block], K[a:a + block], V[a:a + block]
        n = q.shape[0]
        out.append((q * query_decay[:n]) @ kv + ((q @ k.T) * diagonal_decay[:n, :n]) @ v)
        kv = kv * np.exp(-s * n) + (k * key_decay[block - n:]).T @ v
    return np.concatenate(out), kv.T.copy()


def run(inp, fn, t0=0, t1=None, S=None, work=True):
    """fn (lib.tk_lightning_run / _recurrent / _block) on tokens [t0, t1) of the head, on the
    state S (default: a copy of inp's; updated in place).  Returns (o, S)."""
    n_head, h = inp["n_head"], inp["head"]
    t1 = inp["q"].shape[0] if t1 is None else t1
    n, d = t1 - t0, inp["q"].shape[2]
    S = inp["S"].copy() if S is None else S
    o = np.full((max(n, 1), n_head, d), np.nan, np.float32)     # other heads' rows: untouched
    ws = np.full(lib.tk_lightning_work_floats(d), np.nan, np.float32) if work else None
    keep = []

    def ptr(a, off):
        keep.append(a)
        return ffi.cast("float *", ffi.from_buffer(a)) + off

    hd = ffi.new("tk_lightning_head *")
    hd.n_tok, hd.d, hd.slope = n, d, float(inp["slope"])
    for x in ("q", "k", "v"):
        setattr(hd, x, ptr(inp[x], (t0 * n_head + h) * d))
        setattr(hd, x + "_stride", n_head * d)
    hd.S = ptr(S, 0)
    hd.o, hd.o_stride = ptr(o, h * d), n_head * d
    hd.work = ptr(ws, 0) if work else ffi.NULL
    fn(hd)
    assert np.isnan(np.delete(o, h, axis=1)).all(), "a kernel wrote outside its head's output rows"
    return o[:n, h].copy(), S


def rel(got, ref):
    return float(np.abs(got - ref).max() / np.abs(ref).max())


@pytest.fixture
def at_level():
    def set_level(level):
        assert lib.tk_cpu_set_level(level) == level
    yield set_level
    lib.tk_cpu_set_level(lib.tk_cpu_detected())


@pytest.fixture
def threshold():
    """tk_lightning_set_threshold for the test; the default (or TOOLKIT_LIGHTNING_MIN) restored after."""
    yield lib.tk_lightning_set_threshold
    lib.tk_lightning_set_threshold(-1)


# MiniMax-Text-01's head (128); the tiny fixtures' 16; d % 8, d % 16 and d % 4 tails (masked
# lanes, single value rows); 40: a multiple of 8 but not of 16 / 32
DIMS = [128, 16, 19, 40, 6]
N_TOK = [1, 5, 63, 64, 65, 130]
SLOPES = [0.5, 0.0625, 1e-5]


def test_numpy_block_form_is_the_recurrence():
    """The two references agree (float64), for HF's block sizes 16, 24, 64, 256."""
    inp = make_inputs(np.random.default_rng(7), 100, 12, 0.3)
    o_ref, S_ref = reference(inp)
    for block in (16, 24, 64, 256):
        o, S = reference_block(inp, block)
        assert rel(o, o_ref) < 1e-12 and rel(S, S_ref) < 1e-12, block


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("n_tok", N_TOK)
@pytest.mark.parametrize("form", ["recurrent", "block"])
def test_lightning_matches_reference(form, n_tok, d, level, at_level, threshold):
    at_level(level)
    threshold(1 if form == "block" else 0)
    for slope in SLOPES:
        inp = make_inputs(np.random.default_rng(n_tok * 1000 + d), n_tok, d, slope)
        o_ref, S_ref = reference_block(inp, 24) if form == "block" else reference(inp)
        o, S = run(inp, lib.tk_lightning_run)
        eo, es = rel(o, o_ref), rel(S, S_ref)
        assert eo < TOL and es < TOL, f"{form} n_tok={n_tok} d={d} slope {slope} level {level}: o {eo:.2e}, S {es:.2e}"


@pytest.mark.parametrize("level", LEVELS)
def test_recurrent_split_is_bit_identical(level, at_level):
    """n calls of the recurrence give the bits of one call over the same tokens (any split)."""
    at_level(level)
    inp = make_inputs(np.random.default_rng(3), 77, 40, 0.2)
    o_one, S_one = run(inp, lib.tk_lightning_recurrent)
    S = inp["S"].copy()
    parts = []
    for a, b in ((0, 1), (1, 8), (8, 40), (40, 41), (41, 77)):
        o, S = run(inp, lib.tk_lightning_recurrent, a, b, S)
        parts.append(o)
    np.testing.assert_array_equal(np.concatenate(parts), o_one)
    np.testing.assert_array_equal(S, S_one)


@pytest.mark.parametrize("level", LEVELS)
def test_block_split_matches_one_call(level, at_level):
    """The block form over a run split at other points than its blocks: the same to float rounding."""
    at_level(level)
    inp = make_inputs(np.random.default_rng(4), 200, 32, 0.1)
    o_ref, S_ref = reference(inp)
    S = inp["S"].copy()
    parts = []
    for a, b in ((0, 7), (7, 100), (100, 200)):
        o, S = run(inp, lib.tk_lightning_block, a, b, S)
        parts.append(o)
    assert rel(np.concatenate(parts), o_ref) < TOL and rel(S, S_ref) < TOL


def test_no_work_takes_the_recurrence(threshold):
    """Without a workspace tk_lightning_run takes the recurrence (bit-identical to it)."""
    threshold(1)
    inp = make_inputs(np.random.default_rng(5), 70, 16, 0.3)
    o_a, S_a = run(inp, lib.tk_lightning_run, work=False)
    o_b, S_b = run(inp, lib.tk_lightning_recurrent, work=False)
    np.testing.assert_array_equal(o_a, o_b)
    np.testing.assert_array_equal(S_a, S_b)


def test_block_form_differs_from_the_recurrence_in_rounding_only(threshold):
    """Sanity that the threshold picks a different path: the bits differ, the values do not."""
    inp = make_inputs(np.random.default_rng(6), 130, 64, 0.05)
    threshold(1)
    o_b, _ = run(inp, lib.tk_lightning_run)
    threshold(0)
    o_r, _ = run(inp, lib.tk_lightning_run)
    assert not np.array_equal(o_b, o_r) and rel(o_b, o_r) < TOL


def test_threshold_default_and_override(threshold, monkeypatch):
    """tk_lightning_set_threshold(n >= 0) sets it; (-1) goes back to the measured default; the
    library reads no environment (TOOLKIT_LIGHTNING_MIN is the CLI's)."""
    assert threshold(9) == 9 and lib.tk_lightning_threshold() == 9
    monkeypatch.delenv("TOOLKIT_LIGHTNING_MIN", raising=False)
    default = threshold(-1)
    assert default >= 0 and lib.tk_lightning_threshold() == default
    monkeypatch.setenv("TOOLKIT_LIGHTNING_MIN", "17")
    assert threshold(-1) == default and lib.tk_lightning_threshold() == default
