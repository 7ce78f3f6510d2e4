"""Turn a band of source rows (F32 / F16 / BF16 raw) into the bytes of an output ggml type.

Bit-exactness: F16 is numpy's ``astype`` (round to nearest even, as gguf-py), BF16 is
gguf-py's rounding (quiet NaN, round to nearest even), Q8_0 is gguf-py's numpy quantizer
(``gguf.quants``, the reference llama.cpp's converter uses).  When the source dtype already
is the output type and no op applies, the raw bytes pass through untouched.
"""
from __future__ import annotations

import gguf
import numpy as np

from toolkit.gguf_io import GGMLType

# (source dtype, output type) pairs whose bytes are identical: copied as they are
PASSTHROUGH = {("F32", GGMLType.F32), ("F16", GGMLType.F16), ("BF16", GGMLType.BF16)}


def widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values of raw source elements (``raw`` viewed as <f4, <f2 or <u2 for BF16)."""
    if dtype == "F32":
        return raw
    if dtype == "F16":
        return raw.astype(np.float32)
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    raise ValueError(f"cannot widen {dtype}")


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) of float32 ``x``: NaN kept quiet, round to nearest even.
    Same bits as gguf-py's ``BF16.quantize_blocks``; done in uint32 (no overflow: the largest
    value after the NaN fix-up is 0xFFFF0000 | 0x00400000, plus at most 0x8000)."""
    n = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = (n & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        n = np.where(nan, (n & np.uint32(0xFFFF0000)) | np.uint32(64 << 16), n)
    r = (n >> np.uint32(16)) & np.uint32(1)
    r += np.uint32(0x7FFF)
    r += n
    r >>= np.uint32(16)
    return r.astype(np.uint16)


def encode(raw: np.ndarray, dtype: str, out: GGMLType, op: str | None) -> np.ndarray:
    """Bytes-like array of ``raw`` (rows x row_len of source dtype ``dtype``) as ggml type ``out``.

    op: None or "neg_exp" (A = -exp(A_log) in float64, rounded once to float32: bit-identical
    to llama.cpp's float32 torch result on the fixtures, where numpy's float32 exp is 1 ulp off),
    "exp" (+exp(A_log) likewise: bailingmoe3),
    or "plus_one" (zero-centred RMSNorm gamma w -> 1 + w, added in float32 as llama.cpp's
    ``data_torch + 1`` does for a float32 checkpoint).
    """
    if op is None and (dtype, out) in PASSTHROUGH:
        return raw
    x = widen(raw, dtype)
    if op == "neg_exp":
        x = (-np.exp(x.astype(np.float64))).astype(np.float32)
    elif op == "exp":      # bailingmoe3's ssm_a = +exp(A_log), likewise
        x = np.exp(x.astype(np.float64)).astype(np.float32)
    elif op == "plus_one":
        x = x.astype(np.float32) + np.float32(1)
    elif op is not None:
        raise ValueError(f"unknown op {op!r}")
    if out == GGMLType.F32:
        return x.astype(np.float32, copy=False)
    if out == GGMLType.F16:
        return x.astype(np.float16)
    if out == GGMLType.BF16:
        return f32_to_bf16(x)
    if out == GGMLType.Q8_0:
        return gguf.quants.quantize(np.ascontiguousarray(x, dtype=np.float32), GGMLType.Q8_0)
    raise ValueError(f"cannot encode to {GGMLType(out).name}")
