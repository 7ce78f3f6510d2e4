"""The RG-LRU kernels (kernels/rglru.c) against a float64 numpy reference, at every CPU level the
machine has (scalar, AVX2+FMA).

Contracts (tk_testing.h): tk_rglru_gates, out[t][h bw + j] = b[h][j] + sum_i x[t][h bw + i] W[h][i][j];
tk_rglru_scan, r = sigmoid(ga), i = sigmoid(gi), log a = neg8sp r, a = exp(log a),
m = sqrt(1 - exp(2 log a)) (a = 0, m = 1 where reset), h <- a h + (x i) m, y = h yb
(docs/specs/more-hybrids.md §6.4; HF RecurrentGemmaRglru).  Also: a channel's bits do not depend on
the channel range it is scanned in or on how a run is split over calls, and a token's gates do
not depend on the tokens beside it (what rollback and the ubatch splits need); the snapshots
are the state after each token.
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.binding import ffi, lib

pytestmark = pytest.mark.native

LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2) if lv <= lib.tk_cpu_detected()]
TOL = 3e-6      # float32 kernels against float64 (measured: at most 3.0e-7 over these shapes and levels)


@pytest.fixture
def at_level():
    def set_level(level):
        assert lib.tk_cpu_set_level(level) == level
    yield set_level
    lib.tk_cpu_set_level(lib.tk_cpu_detected())


def _p(a):
    return ffi.cast("float *", ffi.from_buffer(a))


def gates(x, W, b, h0=None, h1=None):
    n_tok = x.shape[0]
    nh, bw = W.shape[0], W.shape[1]
    out = np.full((n_tok, nh * bw), np.nan, np.float32)
    lib.tk_rglru_gates(_p(x), nh * bw, n_tok, _p(W), _p(b), 0 if h0 is None else h0, nh if h1 is None else h1, bw,
                       _p(out), nh * bw)
    return out


def scan(g, x, yb, neg8sp, reset, h, c0=0, c1=None, snap=False):
    """g [n, 2 lru] (ga | gi), x, yb [n, lru]; h updated in place; returns (y, snapshots or None)"""
    n, lru = x.shape
    c1 = lru if c1 is None else c1
    y = np.full((n, lru), np.nan, np.float32)
    snaps = np.full((n, lru), np.nan, np.float32) if snap else None
    sp = ffi.new("float *[]", [_p(snaps) + i * lru for i in range(n)]) if snap else ffi.NULL
    rs = ffi.from_buffer("uint8_t[]", np.ascontiguousarray(reset, np.uint8))
    lib.tk_rglru_scan(_p(g), _p(g) + lru, 2 * lru, _p(x), _p(yb), lru, _p(neg8sp), rs, n, c0, c1, _p(h), _p(y), lru, sp)
    return y, snaps


def ref_scan(g, x, yb, neg8sp, reset, h):
    lru = x.shape[1]
    g, x, yb, h = (a.astype(np.float64) for a in (g, x, yb, h))
    r, i = 1 / (1 + np.exp(-g[:, :lru])), 1 / (1 + np.exp(-g[:, lru:]))
    la = neg8sp.astype(np.float64) * r
    a, m = np.exp(la), np.sqrt(1 - np.exp(2 * la))
    ys, hs = [], []
    for t in range(len(x)):
        at, mt = (0.0, 1.0) if reset[t] else (a[t], m[t])
        h = at * h + x[t] * i[t] * mt
        ys.append(h * yb[t])
        hs.append(h.copy())
    return np.array(ys), np.array(hs)


def inputs(rng, n, lru):
    g = rng.standard_normal((n, 2 * lru)).astype(np.float32) * 2
    x = rng.standard_normal((n, lru)).astype(np.float32)
    yb = rng.standard_normal((n, lru)).astype(np.float32)
    lam = rng.uniform(-7, 1, lru)
    neg8sp = (-8 * np.log1p(np.exp(lam))).astype(np.float32)
    h = rng.standard_normal(lru).astype(np.float32)
    return g, x, yb, neg8sp, h


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("nh, bw", [(4, 16), (4, 20), (2, 33), (1, 5)])
def test_gates_match_reference_and_are_per_token(at_level, level, nh, bw):
    at_level(level)
    rng = np.random.default_rng(nh * 100 + bw)
    x = rng.standard_normal((9, nh * bw)).astype(np.float32)
    W = rng.standard_normal((nh, bw, bw)).astype(np.float32) * 0.2
    b = rng.standard_normal(nh * bw).astype(np.float32)
    got = gates(x, W, b)
    want = np.einsum("thi,hij->thj", x.reshape(9, nh, bw).astype(np.float64), W.astype(np.float64)).reshape(9, -1) + b
    assert rel(got, want) < TOL
    one = np.concatenate([gates(x[t:t + 1], W, b) for t in range(9)])
    assert np.array_equal(one, got)                       # a token's bits: the same alone as in a block
    part = gates(x, W, b, 1, nh) if nh > 1 else got       # a head range writes only its heads
    assert np.isnan(part[:, :bw]).all() or nh == 1
    assert np.array_equal(part[:, bw:], got[:, bw:])


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("lru", [64, 20, 5])
def test_scan_matches_reference_with_reset(at_level, level, lru):
    at_level(level)
    rng = np.random.default_rng(lru)
    n = 13
    g, x, yb, neg8sp, h = inputs(rng, n, lru)
    reset = np.zeros(n, bool)
    reset[0] = reset[7] = True                            # position 0 at token 0 and again at 7
    want_y, want_h = ref_scan(g, x, yb, neg8sp, reset, h)
    h1 = h.copy()
    y, snaps = scan(g, x, yb, neg8sp, reset, h1, snap=True)
    assert rel(y, want_y) < TOL and rel(h1, want_h[-1]) < TOL
    assert np.array_equal(snaps[-1], h1) and rel(snaps, want_h) < TOL
    # no reset: the state decays into the first token
    h2 = h.copy()
    y2, _ = scan(g, x, yb, neg8sp, np.zeros(n, bool), h2)
    assert rel(y2, ref_scan(g, x, yb, neg8sp, np.zeros(n, bool), h)[0]) < TOL and rel(y2, y) > 1e-3


@pytest.mark.parametrize("level", LEVELS)
def test_scan_bits_do_not_depend_on_split(at_level, level):
    at_level(level)
    rng = np.random.default_rng(7)
    n, lru = 11, 37
    g, x, yb, neg8sp, h = inputs(rng, n, lru)
    reset = np.zeros(n, bool)
    hw = h.copy()
    y, _ = scan(g, x, yb, neg8sp, reset, hw)
    # channels in three ranges (one not on a lane boundary), tokens in calls of 4 + 7
    hs = h.copy()
    ys = np.full_like(y, np.nan)
    for c0, c1 in ((0, 9), (9, 24), (24, lru)):
        for t0, t1 in ((0, 4), (4, n)):
            yy, _ = scan(g[t0:t1].copy(), x[t0:t1].copy(), yb[t0:t1].copy(), neg8sp, reset[t0:t1], hs, c0, c1)
            ys[t0:t1, c0:c1] = yy[:, c0:c1]
    assert np.array_equal(ys, y) and np.array_equal(hs, hw)


def test_avx2_agrees_with_scalar(at_level):
    if lib.TK_CPU_AVX2 not in LEVELS:
        pytest.skip("no AVX2 here")
    rng = np.random.default_rng(3)
    g, x, yb, neg8sp, h = inputs(rng, 32, 72)
    reset = np.zeros(32, bool)
    reset[0] = True
    out = {}
    for level in LEVELS:
        at_level(level)
        hh = h.copy()
        out[level] = scan(g, x, yb, neg8sp, reset, hh)[0]
    assert rel(out[lib.TK_CPU_AVX2], out[lib.TK_CPU_SCALAR]) < TOL
