"""numpy references for the integer mat-mul path (toolkit/native/qdot.h).

Quantized weights are multiplied with activations that were themselves quantized per block
(Q8_0 / Q8_1 / Q8_K, ggml's vec_dot_type), so the reference for such a product is
``dequant(W) @ dequant(quantize_act(x))`` in float64; the kernels' integer sums are exact,
and only the order of the per-block float multiply-adds can differ from it.

The activation quantizers follow ggml's (quantize_row_q8_0 AVX2 scale 127/amax,
quantize_row_q8_K_ref), every rounding to nearest even.
"""
from __future__ import annotations

import gguf
import numpy as np

from toolkit.binding import check, ffi, lib

T = gguf.GGMLQuantizationType
Q8_0_ACT = {T.Q8_0, T.Q4_0, T.Q5_0, T.IQ4_NL}
Q8_1_ACT = {T.Q4_1, T.Q5_1}
Q8_K_ACT = {T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_XS}
INTEGER_PATH = Q8_0_ACT | Q8_1_ACT | Q8_K_ACT


def act_q8_0(x: np.ndarray) -> np.ndarray:
    """[n, K] float32 -> the float32 values the Q8_0 (or Q8_1) activation blocks hold."""
    x = np.asarray(x, np.float32)
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        iden = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint((b * iden).astype(np.float32))
    d = (amax / np.float32(127)).astype(np.float32).astype(np.float16).astype(np.float32)
    return (d * q).astype(np.float32).reshape(x.shape)


def act_q8_K(x: np.ndarray) -> np.ndarray:
    """[n, K] float32 -> the float32 values the Q8_K activation blocks hold (d * q)."""
    x = np.asarray(x, np.float32)
    b = x.reshape(-1, 256)
    idx = np.abs(b).argmax(axis=1)                      # the first of largest magnitude
    mx = b[np.arange(len(b)), idx][:, None]
    out = np.zeros_like(b)
    nz = (mx != 0)[:, 0]
    iscale = (np.float32(-127) / mx[nz]).astype(np.float32)
    q = np.minimum(np.rint((iscale * b[nz]).astype(np.float32)), 127)
    out[nz] = (np.float32(1) / iscale).astype(np.float32) * q
    return out.reshape(x.shape)


def act_values(qtype, x: np.ndarray) -> np.ndarray:
    """What the kernel multiplies weights of ``qtype`` with: x itself for the float types."""
    qtype = T(qtype)
    if qtype in Q8_0_ACT or qtype in Q8_1_ACT:
        return act_q8_0(x)
    if qtype in Q8_K_ACT:
        return act_q8_K(x)
    return np.asarray(x, np.float32)


def reference(qtype, wf: np.ndarray, x: np.ndarray) -> np.ndarray:
    """float64 ``act_values(x) @ wf.T`` (wf: the dequantized [M, K] weights)."""
    return act_values(qtype, x).astype(np.float64) @ np.asarray(wf, np.float64).T


def bound(qtype, wf: np.ndarray, x: np.ndarray, ulps: float = 8.0) -> np.ndarray:
    """Float-reordering bound per output: ulps * K * eps * (|act| @ |wf|^T)."""
    K = wf.shape[1]
    a = np.abs(act_values(qtype, x)).astype(np.float64)
    mag = a @ np.abs(np.asarray(wf, np.float64)).T
    b = ulps * K * np.finfo(np.float32).eps * mag
    if T(qtype) in Q8_1_ACT:       # the block minimum meets s = f16(d * sum q): 2^-11 relative
        b = b + 2.0 ** -10 * mag
    return b


# ---- the C kernels, through the public test API -------------------------------------------

def quantize_rows(qtype, w: np.ndarray) -> np.ndarray:
    """[rows, K] float32 -> [rows, row bytes] uint8 of ``qtype`` (toolkit's quantizers)."""
    w = np.ascontiguousarray(w, np.float32)
    rows, K = w.shape
    raw = np.empty((rows, lib.tk_quant_row_size(int(qtype), K)), np.uint8)
    check(lib.tk_quantize_rows(int(qtype), ffi.cast("float *", ffi.from_buffer(w)), ffi.from_buffer(raw), rows, K, 1))
    return raw


def dequantize_rows(qtype, raw: np.ndarray, K: int) -> np.ndarray:
    """[rows, row bytes] of ``qtype`` -> [rows, K] float32 (F32 weights: returned as they are)."""
    if T(qtype) == T.F32:
        return np.asarray(raw, np.float32).reshape(raw.shape[0], K)
    out = np.empty((raw.shape[0], K), np.float32)
    check(lib.tk_dequantize_rows(int(qtype), ffi.from_buffer(np.ascontiguousarray(raw)),
                                 ffi.cast("float *", ffi.from_buffer(out)), raw.shape[0], K, 1))
    return out


def mat_mul(qtype, raw: np.ndarray, K: int, x: np.ndarray) -> np.ndarray:
    """y [n_tok, rows] = W x at the current kernel level (lib.tk_mat_mul); W: raw's rows."""
    raw = np.ascontiguousarray(raw)
    x = np.ascontiguousarray(x, np.float32)
    y = np.full((x.shape[0], raw.shape[0]), np.nan, np.float32)
    check(lib.tk_mat_mul(int(qtype), ffi.from_buffer(raw), K, raw.shape[0], ffi.cast("float *", ffi.from_buffer(x)),
                         x.shape[0], ffi.cast("float *", ffi.from_buffer(y))))
    return y


def mat_mul_scalar_avx2(qtype, raw: np.ndarray, K: int, x: np.ndarray, at_level) -> tuple[np.ndarray, np.ndarray]:
    """(scalar, AVX2) results of mat_mul on one case; at_level: the conftest fixture."""
    at_level(lib.TK_CPU_SCALAR)
    ys = mat_mul(qtype, raw, K, x)
    assert at_level(lib.TK_CPU_AVX2) == lib.TK_CPU_AVX2
    return ys, mat_mul(qtype, raw, K, x)


def assert_split_invariant(qtype, raw: np.ndarray, K: int, x: np.ndarray) -> None:
    """At the current level, W x is bit-identical for each token alone (generation), for the
    batch split 3 + rest, and for W's rows split 1 + 5 + rest (13 rows expected)."""
    full = mat_mul(qtype, raw, K, x)
    for t in range(x.shape[0]):                                     # generation: one token
        alone = mat_mul(qtype, raw, K, x[t:t + 1])
        assert alone.tobytes() == full[t:t + 1].tobytes(), f"token {t} alone differs from the batch"
    split = np.concatenate([mat_mul(qtype, raw, K, x[:3]), mat_mul(qtype, raw, K, x[3:])])
    assert split.tobytes() == full.tobytes(), "batch split 3 + 8 differs from 11"
    rows = np.concatenate([mat_mul(qtype, raw[r0:r1], K, x) for r0, r1 in ((0, 1), (1, 6), (6, 13))], axis=1)
    assert rows.tobytes() == full.tobytes(), "rows split 1 + 5 + 7 differs from 13"
