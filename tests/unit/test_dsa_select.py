"""GLM-5-Next's DSA k-pool selection (layers/dsa.c, tk_dsa_select) against a float64 numpy
transcription of transformers 5.24 modeling_glm5_next.py Glm5NextTextIndexer (:811-1061; spec
docs/specs/kda-family.md §2.4), one sequence without padding, every key in the cache (HF's one-shot call):

    pools of kp keys from position 0, complete pools only; P_p = sum_j softmax_j(gamma + ape[j]) k_I
    score(t, p) = sum_h w_h relu(dI^-1/2 q_h . P_p), pools whose last key <= t are candidates
    topk(min(B / kp, n_pools)) over all pools (the others masked to finfo.min), dropped if masked;
    then the tail [first + n_vis - n_vis % kp, t] when index_kpool_always_select_tail

Random inputs have no exact ties, so the chosen set is unique.  Covered: the dense phase (few
pools), the sparse phase, kp = 1 (HF allows it, llama.cpp does not: D20), no tail (the first
kp - 1 queries select nothing, as HF's indices say), rows scattered over cells (the KV
cache's layout), and a query whose own pool is complete (it competes like any other).
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.binding import ffi, lib

pytestmark = pytest.mark.native


def ref_select(k, g, ape, q, w, kp, top_k, tail):
    """HF's selection for queries at positions 0 .. T-1 over keys 0 .. n-1: (bool [T, n], bool [T]
    whether the row's choice is unique: no exact tie between the last chosen and the first left
    pool, which the per-head ReLU makes common with few heads)."""
    n, dI = k.shape
    T, nI = w.shape
    n_pool = n // kp
    P = np.zeros((n_pool, dI))
    for p in range(n_pool):
        z = g[p * kp:(p + 1) * kp] + ape                      # [kp, dI]
        e = np.exp(z - z.max(axis=0))
        P[p] = (e / e.sum(axis=0) * k[p * kp:(p + 1) * kp]).sum(axis=0)
    scores = np.maximum(np.einsum("thc,pc->thp", q, P) * dI ** -0.5, 0)
    idx = np.einsum("th,thp->tp", w, scores)
    sel = np.zeros((T, n), bool)
    unique = np.ones(T, bool)
    select_k = min(top_k // kp, n_pool)
    for t in range(T):
        valid = np.array([(p + 1) * kp - 1 <= t for p in range(n_pool)], bool)
        s = np.where(valid, idx[t], np.finfo(np.float32).min)
        order = np.argsort(-s, kind="stable")
        if valid.sum() > select_k:
            unique[t] = s[order[select_k - 1]] - s[order[select_k]] > 1e-9 * max(abs(s[order[0]]), 1e-30)
        for p in order[:select_k]:
            if valid[p]:
                sel[t, p * kp:(p + 1) * kp] = True
        if tail:
            n_vis = t + 1
            sel[t, n_vis - n_vis % kp:n_vis] = True
    return sel, unique


def f32(a):
    return np.ascontiguousarray(a, np.float32)


def run(k, g, ape, q, w, kp, top_k, tail, rows=None, n_cells=None):
    n, dI = k.shape
    T, nI = w.shape
    n_cells = n if n_cells is None else n_cells
    kg = np.zeros((n_cells, 2 * dI), np.float32)
    rr = np.arange(n) if rows is None else rows
    kg[rr, :dI], kg[rr, dI:] = k, g
    rows32 = np.ascontiguousarray(rr, np.int32)                  # kept alive through the call
    rows_c = ffi.NULL if rows is None else ffi.cast("int32_t *", ffi.from_buffer(rows32))
    n_vis = np.ascontiguousarray(np.arange(1, T + 1), np.int32)
    sel = np.zeros((T, n_cells), np.uint8)
    fp = lambda a: ffi.cast("float *", ffi.from_buffer(a))  # noqa: E731
    ape, q, w = f32(ape), f32(q), f32(w)
    st = lib.tk_dsa_select(fp(kg), rows_c, 2 * dI, n, fp(ape), fp(q), fp(w),
                           ffi.cast("int32_t *", ffi.from_buffer(n_vis)), T, nI, dI, kp, top_k, tail,
                           ffi.cast("uint8_t *", ffi.from_buffer(sel)), n_cells)
    assert st == 0
    return sel[:, rr].astype(bool)


def make(rng, n, nI, dI, kp):
    k = f32(rng.standard_normal((n, dI)))
    g = f32(rng.standard_normal((n, dI)))
    ape = f32(rng.standard_normal((kp, dI)) * 0.5)
    q = f32(rng.standard_normal((n, nI, dI)))
    w = f32(rng.standard_normal((n, nI)) * nI ** -0.5)          # weights_proj(x) nI^-1/2: either sign
    return k, g, ape, q, w


@pytest.mark.parametrize("n,nI,dI,kp,top_k,tail", [
    (160, 8, 16, 8, 32, 1),    # glm5next-tiny's sizes: sparse from position 39
    (70, 2, 8, 6, 12, 1),
    (50, 3, 8, 1, 5, 1),       # kp = 1: pools are tokens
    (64, 4, 8, 4, 8, 0),       # no tail
    (30, 4, 8, 8, 64, 1),      # never sparse
])
def test_select_matches_hf(n, nI, dI, kp, top_k, tail):
    rng = np.random.default_rng(n * 7 + kp)
    k, g, ape, q, w = make(rng, n, nI, dI, kp)
    ref, unique = ref_select(*(a.astype(np.float64) for a in (k, g, ape, q, w)), kp, top_k, tail)
    got = run(k, g, ape, q, w, kp, top_k, tail)
    bad = np.nonzero(((got != ref).any(axis=1)) & unique)[0]
    assert bad.size == 0, f"rows differ at positions {bad[:8]}"
    assert unique.mean() > 0.5                                     # most rows are checked
    if n > top_k + kp:                                             # the sparse phase is reached
        assert (ref.sum(axis=1) < np.arange(1, n + 1)).any()


def test_dense_until_budget_plus_pool():
    """With the tail, a query at t < B + kp - 1 sees every key <= t; at t = B + kp - 1 (the first
    time B / kp + 1 pools compete) it drops one pool."""
    rng = np.random.default_rng(5)
    kp, top_k = 8, 32
    k, g, ape, q, w = make(rng, 60, 4, 8, kp)
    got = run(k, g, ape, q, w, kp, top_k, 1)
    for t in range(top_k + kp - 1):
        assert got[t, :t + 1].all() and not got[t, t + 1:].any()
    t = top_k + kp - 1
    assert got[t].sum() == top_k


def test_scattered_rows():
    """Keys live in arbitrary KV cells (rows): the same choice, written at those cells."""
    rng = np.random.default_rng(9)
    n, kp = 48, 4
    k, g, ape, q, w = make(rng, n, 2, 8, kp)
    rows = rng.permutation(64)[:n]
    ref, unique = ref_select(*(a.astype(np.float64) for a in (k, g, ape, q, w)), kp, 8, 1)
    assert unique.mean() > 0.5
    assert (run(k, g, ape, q, w, kp, 8, 1, rows=rows, n_cells=64) == ref)[unique].all()


@pytest.mark.parametrize("kp,top_k", [(0, 8), (4, 6), (4, 0)])
def test_bad_sizes(kp, top_k):
    z = np.zeros(64, np.float32)
    fp = ffi.cast("float *", ffi.from_buffer(z))
    nv = np.ones(1, np.int32)
    sel = np.zeros(8, np.uint8)
    assert lib.tk_dsa_select(fp, ffi.NULL, 8, 4, fp, fp, fp, ffi.cast("int32_t *", ffi.from_buffer(nv)), 1, 1, 4,
                             kp, top_k, 1, ffi.cast("uint8_t *", ffi.from_buffer(sel)), 8) != 0
