"""ggml's ``ggml_validate_row_data`` (ggml/src/ggml-quants.c) for the types ``toolkit quantize``
writes: llama-quantize runs it on every tensor it quantizes and stops with "quantized data
validation failed" when a value (F32 / F16 / BF16) or a block scale (the fp16 ``d``, and
``m`` / ``dmin`` where the block has one) is inf or NaN -- an input with an inf gives a Q8_0
block of scale inf, one with a NaN an F16 NaN.

    bad = first_invalid(GGMLType.Q8_0, band)      # None, or (block index, "inf" | "nan")
"""
from __future__ import annotations

import numpy as np

from toolkit.gguf_io import GGMLType

# type -> (block bytes, byte offsets of its fp16 scales), from ggml-common.h's block structs
_F16_SCALES: dict[int, tuple[int, tuple[int, ...]]] = {
    GGMLType.Q4_0: (18, (0,)),          # d, qs[16]
    GGMLType.Q4_1: (20, (0, 2)),        # d, m, qs[16]
    GGMLType.Q5_0: (22, (0,)),          # d, qh[4], qs[16]
    GGMLType.Q5_1: (24, (0, 2)),        # d, m, qh[4], qs[16]
    GGMLType.Q8_0: (34, (0,)),          # d, qs[32]
    GGMLType.Q2_K: (84, (80, 82)),      # scales[16], qs[64], d, dmin
    GGMLType.Q3_K: (110, (108,)),       # hmask[32], qs[64], scales[12], d
    GGMLType.Q4_K: (144, (0, 2)),       # d, dmin, scales[12], qs[128]
    GGMLType.Q5_K: (176, (0, 2)),       # d, dmin, scales[12], qh[32], qs[128]
    GGMLType.Q6_K: (210, (208,)),       # ql[128], qh[64], scales[16], d
    GGMLType.IQ4_NL: (18, (0,)),        # d, qs[16]
    GGMLType.IQ4_XS: (136, (0,)),       # d, scales_h, scales_l[4], qs[128]
}


def _first_bad(u: np.ndarray, exp: int, man: int) -> tuple[int, str] | None:
    """u: unsigned bit patterns of a float type with exponent mask ``exp`` and mantissa mask
    ``man``; the first inf/NaN (exponent all ones).  One max-reduction on the fast path."""
    if not u.size:
        return None
    step = 1 << 18                       # chunks of 256 Ki elements: the scratch stays in cache
    tmp = np.empty(min(step, u.size), u.dtype)
    for i in range(0, u.size, step):
        seg = u[i:i + step]
        m = np.bitwise_and(seg, exp | man, out=tmp[:seg.size])
        if int(m.max()) >= exp:
            break
    else:
        return None
    i = int(np.flatnonzero((u & exp) == exp)[0])
    return i, "inf" if (int(u[i]) & man) == 0 else "nan"


def first_invalid(ggml_type: int, data) -> tuple[int, str] | None:
    """The first element (F32 / F16 / BF16) or block (quantized types) of ``data`` (bytes of
    whole rows of ``ggml_type``) that ggml_validate_row_data refuses, as (index, "inf" or
    "nan"); None when all are finite.  Types it does not check (none written here) pass."""
    b = np.frombuffer(data, dtype=np.uint8)
    t = int(ggml_type)
    if t == GGMLType.F32:
        return _first_bad(b.view("<u4"), 0x7F800000, 0x007FFFFF)
    if t == GGMLType.F16:
        return _first_bad(b.view("<u2"), 0x7C00, 0x03FF)
    if t == GGMLType.BF16:
        return _first_bad(b.view("<u2"), 0x7F80, 0x007F)
    if t not in _F16_SCALES:
        return None
    size, offs = _F16_SCALES[t]
    nb = b.size // size
    found = None
    for o in offs:
        # the fp16 scale of every block, read in place (a strided, possibly unaligned view)
        h = np.ndarray((nb,), dtype="<u2", buffer=b, offset=o, strides=(size,))
        r = _first_bad(h, 0x7C00, 0x03FF)
        if r is not None and (found is None or r[0] < found[0]):
            found = r
    return found
