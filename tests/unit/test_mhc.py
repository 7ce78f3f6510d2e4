"""GLM-5-Next's manifold-constrained hyper-connections (residual_hc.c, mHC) against a float64
numpy reference written from transformers 5.24 modeling_glm5_next.py
(Glm5NextTextHyperConnection.forward, :294-319; the decoder layer's combine, :1338-1340;
docs/specs/kda-family.md §2.5):

    f = X / sqrt(mean(X^2) + rms_eps)          over all hc D values of a token, no weight
    m = fn f = [m_pre | m_post | m_comb]
    pre = sigmoid(m_pre s0 + b_pre) + eps;   post = 2 sigmoid(m_post s1 + b_post)
    Mc = softmax_j(m_comb s2 + b_comb) + eps; Mc /= colsum + eps; (iters - 1) x (rows, columns)
    x_in = sum_c pre_c X_c;   X'_j = post_j y + sum_i Mc[i, j] X_i

Any hc (1 .. 8 here; llama.cpp accepts only 4), odd iteration counts, eps large enough to
matter.  The reference also checks the doubly-stochastic property it should converge to, so a
wrong pass order (rows first) or a missing eps is seen failing.
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.binding import ffi, lib

pytestmark = pytest.mark.native
TOL = 2e-6          # float32 C against float64: measured below 4e-7 on these shapes


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def ref_coeffs(mix, scale, base, hc, eps, iters):
    """(pre [hc], post [hc], comb [hc, hc]) in float64 from one token's m = fn f."""
    mix, scale, base = (np.asarray(a, np.float64) for a in (mix, scale, base))
    pre = sigmoid(mix[:hc] * scale[0] + base[:hc]) + eps
    post = 2.0 * sigmoid(mix[hc:2 * hc] * scale[1] + base[hc:2 * hc])
    z = (mix[2 * hc:] * scale[2] + base[2 * hc:]).reshape(hc, hc)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    comb = z / z.sum(axis=1, keepdims=True) + eps
    comb = comb / (comb.sum(axis=0, keepdims=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(axis=1, keepdims=True) + eps)
        comb = comb / (comb.sum(axis=0, keepdims=True) + eps)
    return pre, post, comb


def ref_pre(X, fn, base, scale, rms_eps, eps, iters, hc, D):
    X = X.astype(np.float64)
    f = X / np.sqrt((X ** 2).mean(axis=1, keepdims=True) + rms_eps)
    mix = f @ fn.astype(np.float64).T
    xin, post, comb = [], [], []
    for t in range(X.shape[0]):
        p, q, c = ref_coeffs(mix[t], scale, base, hc, eps, iters)
        xin.append((p[:, None] * X[t].reshape(hc, D)).sum(axis=0))
        post.append(q)
        comb.append(c)
    return np.array(xin), np.array(post), np.array(comb)


def ref_post(X, y, post, comb, hc, D):
    X = X.astype(np.float64).reshape(-1, hc, D)
    out = post[:, :, None] * y.astype(np.float64)[:, None, :] + np.einsum("tij,tid->tjd", comb, X)
    return out.reshape(-1, hc * D)


def f32(a):
    return np.ascontiguousarray(a, np.float32)


def ptr(a):
    return ffi.cast("float *", ffi.from_buffer(a))


def make(rng, U, hc, D):
    M = hc * (2 + hc)
    X = f32(rng.standard_normal((U, hc * D)) * rng.uniform(0.5, 3.0, (U, 1)))
    fn = f32(rng.standard_normal((M, hc * D)) * 0.3)
    base = f32(rng.standard_normal(M) * 0.5)
    scale = f32(rng.uniform(0.2, 1.5, 3))
    return X, fn, base, scale


def rel(got, ref):
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


@pytest.mark.parametrize("hc,iters,eps", [(4, 20, 1e-6), (1, 3, 1e-6), (2, 1, 1e-3), (3, 7, 1e-2), (8, 20, 1e-6)])
def test_coeffs(hc, iters, eps):
    rng = np.random.default_rng(hc * 100 + iters)
    M = hc * (2 + hc)
    for _ in range(5):
        mix, base = f32(rng.standard_normal(M) * 2), f32(rng.standard_normal(M))
        scale = f32(rng.uniform(0.2, 2.0, 3))
        pre, post, comb = (np.zeros(n, np.float32) for n in (hc, hc, hc * hc))
        lib.tk_mhc_coeffs(ptr(mix), ptr(scale), ptr(base), hc, eps, iters, ptr(pre), ptr(post), ptr(comb))
        rp, rq, rc = ref_coeffs(mix, scale, base, hc, eps, iters)
        assert rel(pre, rp) < TOL and rel(post, rq) < TOL
        assert rel(comb.reshape(hc, hc), rc) < TOL, (comb.reshape(hc, hc), rc)
        if iters >= 7 and eps <= 1e-6:       # converged: doubly stochastic
            assert np.allclose(rc.sum(0), 1, atol=1e-5) and np.allclose(rc.sum(1), 1, atol=1e-3)


def test_columns_first():
    """One iteration is the softmax (over each row) then one column pass: columns sum to 1,
    rows do not; a rows-first order would give row sums of 1 instead."""
    hc, M = 4, 24
    rng = np.random.default_rng(3)
    mix, base, scale = f32(rng.standard_normal(M) * 3), f32(rng.standard_normal(M)), f32([1, 1, 1])
    pre, post, comb = (np.zeros(n, np.float32) for n in (hc, hc, hc * hc))
    lib.tk_mhc_coeffs(ptr(mix), ptr(scale), ptr(base), hc, 1e-6, 1, ptr(pre), ptr(post), ptr(comb))
    c = comb.reshape(hc, hc)
    assert np.allclose(c.sum(0), 1, atol=1e-5)
    assert not np.allclose(c.sum(1), 1, atol=1e-2)


@pytest.mark.parametrize("U,hc,D", [(3, 4, 64), (5, 2, 16), (2, 1, 32), (4, 6, 24)])
def test_pre_post_rows(U, hc, D):
    rng = np.random.default_rng(U * 1000 + hc * 10 + D)
    X, fn, base, scale = make(rng, U, hc, D)
    rms_eps, eps, iters = 1e-5, 1e-6, 20
    xin, post, comb = np.zeros((U, D), np.float32), np.zeros((U, hc), np.float32), np.zeros((U, hc * hc), np.float32)
    st = lib.tk_mhc_pre_rows(ptr(X), U, hc, D, ptr(fn), ptr(base), ptr(scale), rms_eps, eps, iters,
                             ptr(xin), ptr(post), ptr(comb))
    assert st == 0
    rx, rp, rc = ref_pre(X, fn, base, scale, rms_eps, eps, iters, hc, D)
    assert rel(xin, rx) < TOL and rel(post, rp) < TOL and rel(comb.reshape(U, hc, hc), rc) < TOL
    y = f32(rng.standard_normal((U, D)))
    Xo = X.copy()
    lib.tk_mhc_post_rows(ptr(Xo), ptr(y), ptr(post), ptr(comb), U, hc, D)
    assert rel(Xo, ref_post(X, y, rp, rc, hc, D)) < TOL


def test_pre_rows_refuses_bad_sizes():
    X = f32(np.zeros((1, 8)))
    out = f32(np.zeros(64))
    assert lib.tk_mhc_pre_rows(ptr(X), 1, 0, 8, ptr(out), ptr(out), ptr(out), 1e-5, 1e-6, 20,
                               ptr(out), ptr(out), ptr(out)) != 0
