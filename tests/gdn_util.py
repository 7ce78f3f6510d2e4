"""Gated delta rule kernel helpers for tests (gdn.c; tests/unit/test_gdn_kernels.py, and through
tests/kda_util.py test_kda_kernels.py): random heads, a float64 reference of the recurrence, and
a caller of gdn.c's entry points.

One value head of one sequence (contract: tk_testing.h, tk_gdn_head), S in R^{Dk x Dv}:
    S <- D_t S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
with D_t = exp(g_t) (GDN: one scalar log decay per token; ref: Yang, Kautz, Hatamizadeh 2024
"Gated Delta Networks" eq. (10)) or Diag(exp(g_t)), g_t in R^{Dk} (KDA: a log decay per key
channel, inp["gk"], tk_gdn_head.gk).  The C buffer holds S as llama.cpp does: element (key i,
value j) at S[j*dk + i], i.e. S^T row-major, shape [Dv, Dk].
"""
from __future__ import annotations

import numpy as np

from toolkit.binding import ffi, lib


def make_inputs(rng, n_tok, dk, dv, n_head=3, g_range=(-3.0, 0.0), per_channel=False, mixed=False):
    """Token rows as the layer holds them: q, k, v of n_head heads side by side in one buffer
    (strides of n_head heads), the log decay uniform in g_range -- g [n_tok, n_head], or with
    per_channel gk [n_tok, n_head, dk] (mixed: each channel either no decay, g = 0, or strong,
    g in [-30, -5], half of each) -- and beta [n_tok, n_head]; q, k l2-normed (q also scaled by
    1/sqrt(Dk)); this head is head 1."""
    def l2(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True)
    q = l2(rng.standard_normal((n_tok, n_head, dk))) / np.sqrt(dk)
    k = l2(rng.standard_normal((n_tok, n_head, dk)))
    v = rng.standard_normal((n_tok, n_head, dv))
    if per_channel:
        g = rng.uniform(*g_range, (n_tok, n_head, dk))
        if mixed:
            strong = rng.random(dk) < 0.5
            g = np.where(strong, rng.uniform(-30.0, -5.0, g.shape), 0.0)
    else:
        g = rng.uniform(*g_range, (n_tok, n_head))
    beta = rng.uniform(0.01, 0.99, (n_tok, n_head))
    S = rng.standard_normal((dv, dk)) * 0.5            # S^T: row j = S[:, j]
    f = lambda a: np.ascontiguousarray(a, np.float32)  # noqa: E731
    return {"q": f(q), "k": f(k), "v": f(v), ("gk" if per_channel else "g"): f(g), "beta": f(beta), "S": f(S),
            "n_head": n_head, "head": 1}


def reference(inp, t0=0, t1=None, S=None):
    """float64 recurrence over tokens [t0, t1) of the head: (o [n, Dv], S^T [Dv, Dk])."""
    h = inp["head"]
    t1 = inp["q"].shape[0] if t1 is None else t1
    St = (inp["S"] if S is None else S).astype(np.float64).T.copy()      # [Dk, Dv]
    out = []
    for t in range(t0, t1):
        q, k, v = (inp[x][t, h].astype(np.float64) for x in ("q", "k", "v"))
        if "gk" in inp:
            St *= np.exp(inp["gk"][t, h].astype(np.float64))[:, None]   # key row i scaled by exp(g_t[i])
        else:
            St *= np.exp(np.float64(inp["g"][t, h]))
        u = np.float64(inp["beta"][t, h]) * (v - St.T @ k)
        St += np.outer(k, u)
        out.append(St.T @ q)
    return np.array(out).reshape(-1, St.shape[1]), St.T.copy()


def run(inp, fn, t0=0, t1=None, S=None, work=True):
    """Call fn (lib.tk_gdn_run / lib.tk_gdn_recurrent) on tokens [t0, t1) of the head, on the
    state S (default: a copy of inp's; updated in place); with inp["gk"] the per-channel decay
    is set and the scalar g is NULL (gk replaces it), the work buffer then sized by
    tk_kda_work_floats.  Returns (o, S); asserts no other head's output row was written."""
    n_head, h = inp["n_head"], inp["head"]
    kda = "gk" in inp
    t1 = inp["q"].shape[0] if t1 is None else t1
    n = t1 - t0
    dk, dv = inp["k"].shape[2], inp["v"].shape[2]
    S = inp["S"].copy() if S is None else S
    o = np.full((max(n, 1), n_head, dv), np.nan, np.float32)     # other heads' rows: untouched
    work_floats = lib.tk_kda_work_floats if kda else lib.tk_gdn_work_floats
    ws = np.full(work_floats(dk, dv), np.nan, np.float32) if work else None
    keep = []

    def ptr(a, off):
        keep.append(a)
        return ffi.cast("float *", ffi.from_buffer(a)) + off

    hd = ffi.new("tk_gdn_head *")
    hd.n_tok, hd.dk, hd.dv = n, dk, dv
    hd.q, hd.q_stride = ptr(inp["q"], (t0 * n_head + h) * dk), n_head * dk
    hd.k, hd.k_stride = ptr(inp["k"], (t0 * n_head + h) * dk), n_head * dk
    hd.v, hd.v_stride = ptr(inp["v"], (t0 * n_head + h) * dv), n_head * dv
    if kda:
        hd.g, hd.beta, hd.gb_stride = ffi.NULL, ptr(inp["beta"], t0 * n_head + h), n_head
        hd.gk, hd.gk_stride = ptr(inp["gk"], (t0 * n_head + h) * dk), n_head * dk
    else:
        hd.g, hd.beta, hd.gb_stride = ptr(inp["g"], t0 * n_head + h), ptr(inp["beta"], t0 * n_head + h), n_head
    hd.S = ptr(S, 0)
    hd.o, hd.o_stride = ptr(o, h * dv), n_head * dv
    hd.work = ptr(ws, 0) if work else ffi.NULL
    fn(hd)
    others = np.delete(o, h, axis=1)
    assert np.isnan(others).all(), "a kernel wrote outside its head's output rows"
    return o[:n, h].copy(), S


def rel(got, ref):
    """max |got - ref| / max |ref|"""
    return float(np.abs(got - ref).max() / np.abs(ref).max())
