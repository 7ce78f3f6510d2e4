"""`toolkit run` (the C runtime) on every quantized bamba-small: finite logits, and an error
against the F32 logits that shrinks with bits (Q8_0 < Q6_K < Q4_K_M < Q2_K).

The error is the relative L2 distance of the logits of 24 tokens from the F32 file's, both run
by our runtime; the table is printed (pytest -s) and put in the failure message.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.slow   # the module fixture runs bamba-small in 17 types (quantized once: conftest.py)

SRC = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "llamacpp", "bamba-small.f32.gguf")
TYPES = ["F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1", "Q4_0",
         "IQ4_NL", "IQ4_XS", "Q3_K_M", "Q3_K_L", "Q3_K_S", "Q2_K"]


def _logits(path: str, tokens: np.ndarray) -> np.ndarray:
    from toolkit.runtime.context import Context
    from toolkit.runtime.model import Model

    with Model(path, n_threads=2) as m, Context(m, n_ctx=64) as c:
        return c.decode(tokens, logits="all")


@pytest.fixture(scope="module")
def errors(bamba_small_q):
    tokens = (np.arange(24, dtype=np.int32) * 37 + 5) % 512
    ref = _logits(SRC, tokens)
    out = {}
    for t in TYPES:
        lg = _logits(str(bamba_small_q(t)), tokens)
        assert np.isfinite(lg).all(), t
        out[t] = float(np.linalg.norm(lg - ref) / np.linalg.norm(ref))
    print("\nrelative L2 error of logits vs F32 (bamba-small, 24 tokens):")
    for t, e in sorted(out.items(), key=lambda kv: kv[1]):
        print(f"  {t:>7}: {e:.3e}")
    return out


def test_every_quantized_file_runs(errors):
    assert set(errors) == set(TYPES)
    assert errors["F16"] < 1e-2 and errors["BF16"] < 5e-2, errors


def test_error_shrinks_with_bits(errors):
    order = ["Q8_0", "Q6_K", "Q4_K_M", "Q2_K"]
    e = [errors[t] for t in order]
    assert e == sorted(e) and e[0] < e[-1] / 4, {t: f"{errors[t]:.3e}" for t in order}
