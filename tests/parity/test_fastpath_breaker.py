"""Adversarial checks of the integer fast path (qdot*.c) and the threaded forward pass, at
the level of a whole model rather than one kernel.

DESIGN's batch invariance, end to end: for a quantized bamba-small (hidden 256, so the
k-quant tensors really are Q4_K / Q5_K / Q6_K / Q2_K / Q3_K / IQ4_XS, not the Q5_0 / Q8_0
fallbacks a 64-wide tiny model gets), the logits of every prompt position and of each
generated token are bit-identical

  * whatever the thread count (1, 2, 3, 7 -- 7 > cores, odd splits of 256 / 512 / 768 rows),
  * whatever the ubatch (1, 7, 512) for a prompt under the SSD threshold (24 < 32 tokens),
  * at every kernel level this machine has (scalar, and AVX2 where present).

The same at the C level on edge activations: tk_mat_mul on all-zero rows gives exact zeros
at every level, and the scalar and AVX2 results agree to float reordering on ordinary rows.
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.binding import ffi, lib
from toolkit.runtime.context import Context
from toolkit.runtime.model import Model
from toolkit.binding import check

TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"]
LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2) if lv <= lib.tk_cpu_detected()]
N_PROMPT, N_GEN = 24, 4


@pytest.fixture(scope="module")
def qfiles(bamba_small_q):
    return {t: str(bamba_small_q(t)) for t in TYPES}   # quantized once per session (conftest.py)


def _run(path: str, n_threads: int, n_ubatch: int) -> np.ndarray:
    """Logits [N_PROMPT + N_GEN, n_vocab]: the prompt's, then N_GEN greedy steps one token each."""
    tokens = (np.arange(N_PROMPT, dtype=np.int32) * 61 + 11) % 512
    with Model(path, n_threads=n_threads) as m, Context(m, n_ctx=64, n_ubatch=n_ubatch, n_threads=n_threads) as c:
        rows = [c.decode(tokens, logits="all")]
        nxt = int(np.argmax(rows[0][-1]))
        for _ in range(N_GEN):
            g = c.decode([nxt], logits="last")
            rows.append(g)
            nxt = int(np.argmax(g[0]))
    return np.concatenate(rows)


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: {0: "scalar"}.get(lv, f"level{lv}"))
@pytest.mark.parametrize("qtype", TYPES)
def test_threads_and_ubatch_bit_identical(qfiles, qtype, level, at_level):
    assert at_level(level) == level
    ref = _run(qfiles[qtype], 1, 1)
    assert np.isfinite(ref).all()
    for n_threads, n_ubatch in [(2, 1), (3, 7), (7, 7), (1, 512), (2, 512), (3, 512), (7, 512)]:
        got = _run(qfiles[qtype], n_threads, n_ubatch)
        assert np.array_equal(got, ref), (
            f"{qtype} level {level}: -t {n_threads} -ub {n_ubatch} differs from -t 1 -ub 1 by "
            f"{np.abs(got - ref).max():.3e}")


# ---- tk_mat_mul on edge activations --------------------------------------------------
GGML = {"Q8_0": 8, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12,
        "Q5_K": 13, "Q6_K": 14, "IQ4_NL": 20, "IQ4_XS": 23}


def _quant(t: int, w: np.ndarray) -> np.ndarray:
    raw = np.empty((w.shape[0], lib.tk_quant_row_size(t, w.shape[1])), np.uint8)
    check(lib.tk_quantize_rows(t, ffi.cast("float *", ffi.from_buffer(w)), ffi.from_buffer(raw), w.shape[0], w.shape[1], 1))
    return raw


def _mm(t: int, raw: np.ndarray, K: int, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    y = np.full((x.shape[0], raw.shape[0]), np.nan, np.float32)
    check(lib.tk_mat_mul(t, ffi.from_buffer(raw), K, raw.shape[0], ffi.cast("float *", ffi.from_buffer(x)),
                         x.shape[0], ffi.cast("float *", ffi.from_buffer(y))))
    return y


@pytest.mark.parametrize("name", list(GGML))
def test_mat_mul_zero_rows_and_level_agreement(name, at_level):
    t = GGML[name]
    K, M = 512, 9
    rng = np.random.default_rng(7 + t)
    w = (rng.standard_normal((M, K)) * 0.1).astype(np.float32)
    raw = _quant(t, w)
    x = rng.standard_normal((6, K)).astype(np.float32)
    x[1] = 0.0                 # a whole zero token: d = 0 in every activation block
    x[3, :256] = 0.0           # a zero first block / super-block next to a non-zero one
    x[4] *= 1e-3
    ys = {}
    for lv in LEVELS:
        assert at_level(lv) == lv
        ys[lv] = _mm(t, raw, K, x)
        assert np.isfinite(ys[lv]).all(), (name, lv)
        assert np.all(ys[lv][1] == 0.0), (name, lv)
    if len(ys) > 1:
        a, b = ys[LEVELS[0]], ys[LEVELS[-1]]
        scale = np.abs(a).max(axis=1, keepdims=True)
        # float reordering of per-block terms only: a few ulps of the row's largest output
        assert np.all(np.abs(a - b) <= 1e-5 * np.maximum(scale, 1e-30)), (name, float(np.abs(a - b).max()))
