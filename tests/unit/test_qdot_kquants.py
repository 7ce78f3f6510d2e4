"""Integer dot products of k-quant / IQ4_XS weights with Q8_K activations
(toolkit/native/quants/qdot_kquants.c, scalar; qdot_kquants_avx2.c, AVX2 for all six types).

Through tk_mat_mul at each kernel level this machine has:
- the scalar level equals the float64 product dequant(W) @ dequant(quantize_q8_K(x)) to
  1e-6 of sum |w| |x| per output (the integer parts are exact; what is left is float32
  rounding of the dequantized reference weights and of the per-super-block float terms);
- the AVX2 level agrees with the scalar one to the same bound (float reordering only);
- at every level a token's result is bit-identical alone (generation, n_tok = 1), in a
  batch of 11 (tiles of 8 + 3 tokens), in a batch split at another token, and when the
  weight rows are split (13 rows: not a multiple of any tile).
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import qref
from toolkit.binding import lib

pytestmark = pytest.mark.native

T = gguf.GGMLQuantizationType
KTYPES = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_XS]
LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2) if lv <= lib.tk_cpu_detected()]
M, N_TOK = 13, 11
REL = 1e-6


_quantize = qref.quantize_rows
_dequant = qref.dequantize_rows
_mat_mul = qref.mat_mul


def _case(qtype, K: int):
    """13 weight rows of mixed scale (one near-constant row: large mins relative to the
    spread) and 11 tokens, one of them with an all-zero first super-block (d = 0; with
    K = 256 the whole token is zero and so must be its outputs)."""
    rng = np.random.default_rng(1000 * int(qtype) + K)
    w = rng.standard_normal((M, K)).astype(np.float32) * 0.1
    w[3] *= 8.0
    w[7] = 0.5 + 0.01 * w[7]
    x = rng.standard_normal((N_TOK, K)).astype(np.float32)
    x[2] *= 1e-3
    x[5, :256] = 0.0
    x[9, ::7] *= 30.0
    raw = _quantize(qtype, np.ascontiguousarray(w))
    return raw, _dequant(qtype, raw, K), x


def _mag(qtype, wf, x):
    return np.abs(qref.act_values(qtype, x)).astype(np.float64) @ np.abs(wf.astype(np.float64)).T


IDS = lambda v: v.name if hasattr(v, "name") else str(v)  # noqa: E731


@pytest.mark.parametrize("qtype,K", [(t, K) for t in KTYPES for K in (256, 512, 768)], ids=IDS)
def test_scalar_matches_float64_reference(qtype, K, at_level):
    raw, wf, x = _case(qtype, K)
    assert at_level(lib.TK_CPU_SCALAR) == lib.TK_CPU_SCALAR
    got = _mat_mul(qtype, raw, K, x)
    ref = qref.reference(qtype, wf, x)
    err, mag = np.abs(got - ref), _mag(qtype, wf, x)
    assert np.all(np.isfinite(got))
    assert np.all(err <= REL * mag), f"{qtype.name} K={K}: max error {(err / mag).max():.3g} of sum|w||x| (bound {REL})"


@pytest.mark.skipif(lib.TK_CPU_AVX2 not in LEVELS, reason="no AVX2 on this machine")
@pytest.mark.parametrize("qtype,K", [(t, K) for t in KTYPES for K in (256, 512, 768)], ids=IDS)
def test_avx2_agrees_with_scalar(qtype, K, at_level):
    raw, wf, x = _case(qtype, K)
    ys, ya = qref.mat_mul_scalar_avx2(qtype, raw, K, x, at_level)
    mag = _mag(qtype, wf, x)
    err = np.abs(ya - ys)
    assert np.all(err <= REL * mag), f"{qtype.name} K={K}: AVX2 vs scalar {(err / mag).max():.3g} of sum|w||x|"
    err = np.abs(ya - qref.reference(qtype, wf, x))
    assert np.all(err <= REL * mag), f"{qtype.name} K={K}: AVX2 vs float64 reference {(err / mag).max():.3g}"


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: ["scalar", "avx2"][lv])
@pytest.mark.parametrize("qtype,K", [(t, K) for t in KTYPES for K in (512, 768)], ids=IDS)
def test_batch_and_row_split_invariance(qtype, K, level, at_level):
    raw, _, x = _case(qtype, K)
    assert at_level(level) == level
    qref.assert_split_invariant(qtype, raw, K, x)
