"""Goodness-of-fit tests without scipy: the tests that check sampled tokens against a target
distribution (tests/unit/test_speculative.py, tests/serve/test_draft_model_serve.py)."""
from __future__ import annotations

import math

import numpy as np


def gammq(a: float, x: float) -> float:
    """Regularized upper incomplete gamma Q(a, x) (Numerical Recipes 6.2: series below a + 1,
    Lentz continued fraction above)."""
    if x <= 0:
        return 1.0
    lg = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = s = 1.0 / a
        ap = a
        for _ in range(10000):
            ap += 1
            term *= x / ap
            s += term
            if abs(term) < abs(s) * 1e-15:
                break
        return 1.0 - s * math.exp(lg)
    b, c, d = x + 1 - a, 1e300, 1 / (x + 1 - a)
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(lg) * h


def chi2_p(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's chi-square goodness of fit of ``counts`` to ``probs``: the p-value."""
    n = counts.sum()
    keep = probs > 0
    assert counts[~keep].sum() == 0, "a token of probability 0 was drawn"
    e = n * probs[keep]
    stat = float((((counts[keep] - e) ** 2) / e).sum())
    return gammq((keep.sum() - 1) / 2.0, stat / 2.0)
