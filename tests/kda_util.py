"""Kimi Delta Attention (KDA) kernel helpers for tests: random heads, a float64 reference of
the recurrence, and a caller of gdn.c's entry points with per-channel decay (tk_gdn_head.gk);
the shared code is tests/gdn_util.py's (inputs with ``gk`` take its per-channel paths).

The operator (docs/specs/kda-family.md §2.1; transformers modeling_kimi_linear.py
recurrent_kimi_delta_attention, modeling_kimi_linear.py:449-462), per head, S in R^{Dk x Dv}:
    S <- Diag(exp(g_t)) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
with g_t in R^{Dk} the per-key-channel log decay (<= 0).  The C buffer holds S as llama.cpp
does: element (key i, value j) at S[j*dk + i], i.e. S^T row-major, shape [Dv, Dk].
"""
from __future__ import annotations

import gdn_util
from gdn_util import reference, rel, run  # noqa: F401  (this module's API, as before)


def make_inputs(rng, n_tok, dk, dv, n_head=3, g_range=(-3.0, 0.0), mixed=False):
    """Token rows as a KDA layer holds them: q, k, v of n_head heads side by side (strides of
    n_head heads), gk [n_tok, n_head, dk] uniform in g_range (mixed: each channel either
    no decay, g = 0, or strong, g in [-30, -5], half of each), beta [n_tok, n_head]; q, k
    l2-normed (q also scaled by 1/sqrt(Dk)); this head is head 1."""
    return gdn_util.make_inputs(rng, n_tok, dk, dv, n_head=n_head, g_range=g_range, per_channel=True, mixed=mixed)
