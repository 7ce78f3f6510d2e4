"""Integer dot products of Q5_0 (Q8_0 activations) and Q4_1 / Q5_1 (Q8_1 activations) weights
(toolkit/native/quants/qdot.c, scalar; qdot_legacy_avx2.c, AVX2).

Through tk_mat_mul at each kernel level this machine has:
- the scalar level equals the float64 product dequant(W) @ dequant(quantize_q8(x)) to
  1e-6 of the magnitude (sum |w| |x| plus, for Q4_1 / Q5_1, sum over blocks of |m| sum |x|),
  plus for Q8_1 the rounding of s = f16(d * sum q) the block minimum meets (2^-10 of the
  m part);
- the AVX2 level agrees with the scalar one to 1e-6 of the magnitude (float reordering only:
  both read the same s);
- at every level a token's result is bit-identical alone (generation, n_tok = 1), in a
  batch of 11 (tiles of 4 + 4 + 3 tokens), in a batch split at another token, and when the
  weight rows are split (13 rows: 3-row tiles and a remainder);
- Q8_0's prompt tiles (4 rows x 2 tokens, scales converted per token block) give every
  token its generation result bit for bit across a token block boundary.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import qref
from toolkit.binding import lib

pytestmark = pytest.mark.native

T = gguf.GGMLQuantizationType
LTYPES = [T.Q5_0, T.Q4_1, T.Q5_1]
LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2) if lv <= lib.tk_cpu_detected()]
M, N_TOK = 13, 11
REL = 1e-6
KS = (32, 256, 1056)


_quantize = qref.quantize_rows
_dequant = qref.dequantize_rows
_mat_mul = qref.mat_mul


def _case(qtype, K: int):
    """13 weight rows of mixed scale (one with a large offset: large block minima relative
    to the spread; one all-positive, one all-negative) and 11 tokens, one with an all-zero
    first block (d = 0; with K = 32 the whole token is zero and so must be its outputs)."""
    rng = np.random.default_rng(1000 * int(qtype) + K)
    w = rng.standard_normal((M, K)).astype(np.float32) * 0.1
    w[3] *= 8.0
    w[7] = 0.5 + 0.01 * w[7]
    w[10] = np.abs(w[10])
    w[11] = -np.abs(w[11]) - 0.2
    x = rng.standard_normal((N_TOK, K)).astype(np.float32)
    x[2] *= 1e-3
    x[5, :32] = 0.0
    x[9, ::7] *= 30.0
    x[4] += 2.0                                   # large sum(q): a large m * s term
    raw = _quantize(qtype, np.ascontiguousarray(w))
    return raw, _dequant(qtype, raw, K), x


def _block_min(qtype, raw: np.ndarray, K: int) -> np.ndarray:
    """[M, K/32] float64 |m| of each Q4_1 / Q5_1 block (the f16 after d), zeros for Q5_0."""
    nb = K // 32
    if T(qtype) not in qref.Q8_1_ACT:
        return np.zeros((raw.shape[0], nb))
    bs = raw.shape[1] // nb
    blocks = raw.reshape(raw.shape[0], nb, bs)
    return np.abs(blocks[:, :, 2:4].copy().view(np.float16)[:, :, 0].astype(np.float64))


def _mags(qtype, raw, wf, x, K):
    """(sum |w| |act| per output, sum over blocks |m| sum |act| per output)."""
    act = np.abs(qref.act_values(qtype, x)).astype(np.float64)
    mag = act @ np.abs(wf.astype(np.float64)).T
    ablk = act.reshape(act.shape[0], K // 32, 32).sum(axis=2)       # [n_tok, nb]
    mmag = ablk @ _block_min(qtype, raw, K).T
    return mag, mmag


IDS = lambda v: v.name if hasattr(v, "name") else str(v)  # noqa: E731


@pytest.mark.parametrize("qtype,K", [(t, K) for t in LTYPES for K in KS], ids=IDS)
def test_scalar_matches_float64_reference(qtype, K, at_level):
    raw, wf, x = _case(qtype, K)
    assert at_level(lib.TK_CPU_SCALAR) == lib.TK_CPU_SCALAR
    got = _mat_mul(qtype, raw, K, x)
    ref = qref.reference(qtype, wf, x)
    mag, mmag = _mags(qtype, raw, wf, x, K)
    bound = REL * (mag + mmag) + 2.0 ** -10 * mmag
    err = np.abs(got - ref)
    assert np.all(np.isfinite(got))
    if K == 32:
        assert np.all(got[5] == 0.0), "an all-zero token must give zeros"
    assert np.all(err <= bound), f"{qtype.name} K={K}: max error {(err / bound).max():.3g} of the bound"


@pytest.mark.skipif(lib.TK_CPU_AVX2 not in LEVELS, reason="no AVX2 on this machine")
@pytest.mark.parametrize("qtype,K", [(t, K) for t in LTYPES for K in KS], ids=IDS)
def test_avx2_agrees_with_scalar(qtype, K, at_level):
    raw, wf, x = _case(qtype, K)
    ys, ya = qref.mat_mul_scalar_avx2(qtype, raw, K, x, at_level)
    mag, mmag = _mags(qtype, raw, wf, x, K)
    err = np.abs(ya - ys)
    assert np.all(err <= REL * (mag + mmag)), \
        f"{qtype.name} K={K}: AVX2 vs scalar {(err / (mag + mmag)).max():.3g} of the magnitude"
    err = np.abs(ya - qref.reference(qtype, wf, x))
    assert np.all(err <= REL * (mag + mmag) + 2.0 ** -10 * mmag), f"{qtype.name} K={K}: AVX2 vs float64 reference"


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: ["scalar", "avx2"][lv])
@pytest.mark.parametrize("qtype,K", [(t, K) for t in LTYPES for K in (256, 1056)], ids=IDS)
def test_batch_and_row_split_invariance(qtype, K, level, at_level):
    raw, _, x = _case(qtype, K)
    assert at_level(level) == level
    qref.assert_split_invariant(qtype, raw, K, x)


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: ["scalar", "avx2"][lv])
@pytest.mark.parametrize("K,n_tok", [(1024, 183), (33792, 5)])
def test_q8_0_prompt_tiles_across_token_blocks(level, K, n_tok, at_level):
    """Q8_0 prompts run tiles of 4 rows x 2 tokens over token blocks of about 192 KiB of
    activations (180 tokens at K = 1024), with the f16 scales converted to float once per
    block: 183 tokens x 7 rows cross a token block boundary and leave a row remainder (3)
    and a token remainder (1); K = 33792 (over 1024 blocks) takes the 3 x 4 tiles instead.
    Every output must equal its token's generation result (n_tok = 1) bit for bit, and the
    float64 reference to 1e-6 of the magnitude."""
    rows = 7
    rng = np.random.default_rng(8)
    w = (rng.standard_normal((rows, K)) * np.array([0.1, 3.0, 1e-3, 0.5, 10.0, 0.02, 1.0])[:, None]).astype(np.float32)
    x = rng.standard_normal((n_tok, K)).astype(np.float32)
    x[n_tok - 2] *= 1e3                           # in the second token block (K = 1024)
    x[3, :64] = 0.0
    raw = _quantize(T.Q8_0, np.ascontiguousarray(w))
    wf = _dequant(T.Q8_0, raw, K)
    assert at_level(level) == level
    got = _mat_mul(T.Q8_0, raw, K, x)
    for t in range(n_tok):
        np.testing.assert_array_equal(_mat_mul(T.Q8_0, raw, K, x[t:t + 1])[0], got[t], err_msg=f"token {t}")
    mag = np.abs(qref.act_values(T.Q8_0, x)).astype(np.float64) @ np.abs(wf.astype(np.float64)).T
    err = np.abs(got - qref.reference(T.Q8_0, wf, x))
    assert np.all(err <= REL * mag), f"max error {(err / mag).max():.3g} of the magnitude"
