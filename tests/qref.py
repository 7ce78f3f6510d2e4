"""numpy references for the integer mat-mul path (toolkit/native/quants/qdot.h).

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


def bf16_in_force(qtype) -> bool:
    """Whether a mat-mul with ``qtype`` weights runs the BF16 x BF16 kernel at the current level
    (BF16 weights at avx512 with AVX512_BF16: activations rounded to bf16 first)."""
    return int(lib.tk_type_vec_dot_type_at(int(qtype), lib.tk_cpu_level())) == int(T.BF16)


def act_values(qtype, x: np.ndarray) -> np.ndarray:
    """What the kernel multiplies weights of ``qtype`` with at the current level: x itself
    for the float types, x rounded to bf16 where the BF16 kernel is in force."""
    qtype = T(qtype)
    if bf16_in_force(qtype):
        return bf16_float(bf16_bits(np.asarray(x, np.float32)))
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


# ---- bf16 (qdot_bf16_avx512.c) -------------------------------------------------------------

def bf16_bits(x: np.ndarray) -> np.ndarray:
    """f32 -> bf16 bits rounded to nearest even, chosen by distance (not by the kernel's bit
    trick): the two bf16 neighbours of x, the nearer one, on a tie the even one; NaN -> a
    quiet NaN with x's high bits; values past the largest bf16's rounding range -> inf."""
    u = x.view(np.uint32)
    lo = (u >> 16).astype(np.uint32)                                  # truncation toward zero
    finite = (u & 0x7f800000) != 0x7f800000
    mag = np.abs(np.where(finite, x, 0).astype(np.float64))
    d_lo = mag - np.abs((lo << 16).view(np.float32).astype(np.float64))
    ulp = np.ldexp(1.0, np.maximum((lo >> 7) & 0xff, 1).astype(np.int32) - 134)   # bf16 step at lo
    d_hi = ulp - d_lo                                                 # to lo + 1 (0x7f80 counts as 2^128)
    pick_hi = finite & ((d_hi < d_lo) | ((d_hi == d_lo) & (lo & 1 == 1)))
    out = np.where(pick_hi, lo + 1, lo)
    nan = (u & 0x7fffffff) > 0x7f800000
    return np.where(nan, (u >> 16) | 64, out).astype(np.uint16)


def bf16_float(b: np.ndarray) -> np.ndarray:
    """bf16 bits -> the float32 values they hold (exact)."""
    return (np.asarray(b).astype(np.uint32) << 16).view(np.float32)


def _f32_round_exact(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """float32 round-to-nearest-even of the exact value s + e (s float64, |e| <= ulp(s)/2 the
    rounding error of s): numpy's cast of s is right unless s is exactly halfway between two
    float32 (low 29 significand bits 1 << 28) and e breaks the tie; then s is nudged one
    float64 step toward e first."""
    mid = (s.view(np.int64) & ((1 << 29) - 1)) == (1 << 28)
    nudge = mid & (e != 0)
    s = np.where(nudge, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def _bf16_daz(b: np.ndarray) -> np.ndarray:
    """bf16 bits -> float64 values, inputs below 2^-126 flushed to signed zero (DAZ)."""
    v = (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return np.where(np.abs(v) < 2.0**-126, np.copysign(0.0, v), v)


def _dpbf16_add(acc: np.ndarray, p: np.ndarray) -> np.ndarray:
    """One VDPBF16PS half-step per fp32 lane: acc (float32) + p (an exact product, float64),
    rounded once to fp32 (nearest even), the result flushed to zero below 2^-126 (FTZ)."""
    x = acc.astype(np.float64)
    s = x + p
    bb = s - x
    e = (x - (s - bb)) + (p - bb)                                  # TwoSum: s + e == x + p
    r = _f32_round_exact(s, e)
    return np.where(np.abs(r) < np.float32(2.0**-126), np.copysign(np.float32(0), r), r)


def vdpbf16ps_pairs(wb: np.ndarray, ab: np.ndarray) -> np.ndarray:
    """The repacked BF16 kernel's result per (token, row) (repack_bf16_avx512.c): one fp32
    accumulator per output over the column pairs j in order, each a VDPBF16PS lane step (odd
    product first, then the even one, each add rounded once, DAZ / FTZ).  wb: [M, K], ab: [T, K]
    bf16 bits, K even; returns float32 [T, M]."""
    w, a = _bf16_daz(wb), _bf16_daz(ab)
    acc = np.zeros((a.shape[0], w.shape[0]), np.float32)
    for j in range(0, w.shape[1], 2):
        for k in (j + 1, j):
            acc = _dpbf16_add(acc, a[:, None, k] * w[None, :, k])
    return acc


def vdpbf16ps(wb: np.ndarray, ab: np.ndarray) -> np.ndarray:
    """The kernel's result per (token, row) from the instruction's definition, in float64
    (Intel SDM vol. 2 VDPBF16PS): 16 fp32 lanes over 32-value chunks (the last zero-padded);
    per lane the odd pair's product added first, then the even one's, each add rounded once
    to fp32 (nearest even), inputs DAZ, results FTZ; then lanes 0-7 + lanes 8-15 and the
    fixed tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) in fp32.  wb: [M, K], ab: [T, K] bf16
    bits; returns float32 [T, M]."""
    K = wb.shape[1]
    pad = (-K) % 32
    def val(b):
        return _bf16_daz(np.pad(b, ((0, 0), (0, pad)))).reshape(b.shape[0], -1, 16, 2)   # [rows, chunk, lane, pair]
    w, a = val(wb), val(ab)
    acc = np.zeros((a.shape[0], w.shape[0], 16), np.float32)
    for c in range(w.shape[1]):
        for half in (1, 0):
            acc = _dpbf16_add(acc, a[:, None, c, :, half] * w[None, :, c, :, half])
    l = acc[..., :8] + acc[..., 8:]
    return ((l[..., 0] + l[..., 4]) + (l[..., 2] + l[..., 6])) + ((l[..., 1] + l[..., 5]) + (l[..., 3] + l[..., 7]))


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
