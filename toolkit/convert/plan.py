"""The conversion plan: key/values and output tensors, each output tensor a list of row segments
of source tensors.  Building a plan reads only headers; executing it streams the data.

Rows: an output tensor of numpy shape (..., n) is written as rows of ``n`` elements.  A
:class:`Segment` takes ``n_rows`` consecutive rows of a source tensor viewed as a flat array
of rows of the same length (optionally reordered within blocks of ``block`` rows), so every
transform we need is expressible without holding a whole tensor:

    squeeze / reshape (conv1d [C,1,K] -> [C,K]; Mamba-2 A [H] -> [H,1]; ssm_norm [d_inner] -> [G, d_inner/G])
        one segment, the bytes unchanged
    split (Granite input_linear [E, 2F, D] -> gate [E,F,D], up [E,F,D])
        one segment per expert
    stack (Jamba experts.{e}.gate_proj [F,D] -> ffn_gate_exps [E,F,D])
        one segment per source tensor
    head reorder (q/k rows for NORM RoPE)
        one segment with a row permutation that stays within each head (``block`` = head_dim)
    elementwise op ("neg_exp": A = -exp(A_log))
        applied per band after widening to float
    scale (Falcon-H1's muP multipliers folded into a weight, per row block)
        one segment per block, each with its factors (``Segment.scales``)
    scale per column (Falcon-H1's ssm_multipliers folded into in_proj's bias, a vector whose
        z / x / B / C / dt blocks get different factors)
        one segment with ``Segment.col_scales``
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit.convert.st_reader import STTensor
from toolkit.gguf_io import GGMLType
from toolkit.gguf_io.constants import GGUFValueType


@dataclass
class KV:
    """One GGUF key/value as it will be written (``key`` already formatted with the arch)."""

    key: str
    value: Any
    vtype: GGUFValueType
    sub_type: GGUFValueType | None = None

    def display(self) -> Any:
        if isinstance(self.value, (list, tuple)) and len(self.value) > 16:
            return f"[{len(self.value)} x {self.sub_type.name if self.sub_type else '?'}]"
        if isinstance(self.value, str) and len(self.value) > 120:
            return f"<{len(self.value)} chars>"
        return self.value


def kv_u32(key: str, v: int) -> KV:
    return KV(key, int(v), GGUFValueType.UINT32)


def kv_f32(key: str, v: float) -> KV:
    return KV(key, float(v), GGUFValueType.FLOAT32)


def kv_bool(key: str, v: bool) -> KV:
    return KV(key, bool(v), GGUFValueType.BOOL)


def kv_str(key: str, v: str) -> KV:
    return KV(key, str(v), GGUFValueType.STRING)


def kv_arr_i32(key: str, v: list[int]) -> KV:
    return KV(key, [int(x) for x in v], GGUFValueType.ARRAY, GGUFValueType.INT32)


def kv_arr_f32(key: str, v: list[float]) -> KV:
    return KV(key, [float(x) for x in v], GGUFValueType.ARRAY, GGUFValueType.FLOAT32)


def kv_arr_bool(key: str, v: list[bool]) -> KV:
    return KV(key, [bool(x) for x in v], GGUFValueType.ARRAY, GGUFValueType.BOOL)


def kv_arr_str(key: str, v: list[str]) -> KV:
    return KV(key, list(v), GGUFValueType.ARRAY, GGUFValueType.STRING)


@dataclass
class Segment:
    """``n_rows`` rows of ``src`` from row ``row0`` (rows of the output's row length).

    perm:   optional int array of length n_rows; output row i <- source row row0 + perm[i].
            Must map each block of ``block`` rows onto itself (bands never split a block).
    scales: factors the rows are multiplied by, in turn, after widening to float32 (each a
            float32 product, as llama.cpp's ``tensor * multiplier`` on a float32 tensor)
    col_scales: float32 array of the output's row length or None: each row multiplied by it
            elementwise after ``scales`` (one float32 product per element)
    tblock: (a, b) or None: the segment is n_rows / b blocks, each an a x b matrix in the source
            starting at source row ``row0`` (here counted in rows of b elements) and written
            transposed (b rows of a, the output's row length); MLA's per-head k_b (llama.cpp's
            ``k_b.transpose(1, 2)``)
    """

    src: STTensor
    row0: int
    n_rows: int
    perm: np.ndarray | None = None
    block: int = 1
    scales: tuple[float, ...] = ()
    tblock: tuple[int, int] | None = None
    col_scales: np.ndarray | None = None


@dataclass
class OutTensor:
    """One GGUF tensor to write.

    name:      GGUF tensor name
    shape:     numpy (row-major) order; the GGUF ``ne`` is its reverse
    type:      ggml type written
    segments:  where the rows come from, in order
    op:        None, "neg_exp" (A = -exp(A_log), computed in float64, rounded to float32) or
               "plus_one" (zero-centred norm gamma -> 1 + w)
    note:      the transform, for --dry-run
    col_perm:  optional int array of length row_len: output column j <- source column col_perm[j]
               of every row (a reorder along the last axis, e.g. out_proj input columns)
    """

    name: str
    shape: tuple[int, ...]
    type: GGMLType
    segments: list[Segment]
    op: str | None = None
    note: str = ""
    col_perm: np.ndarray | None = None

    @property
    def row_len(self) -> int:
        return int(self.shape[-1]) if self.shape else 1

    @property
    def n_rows(self) -> int:
        n = 1
        for d in self.shape[:-1]:
            n *= int(d)
        return n

    @property
    def sources(self) -> list[str]:
        return list(dict.fromkeys(s.src.name for s in self.segments))


@dataclass
class Plan:
    """Everything ``convert`` will write: arch, key/values (in order), tensors (in order)."""

    arch: str
    hf_arch: str
    outtype: str = ""
    outtype_reason: str = ""     # how ``auto`` chose (see Family._resolve_outtype)
    no_mtp: bool = False
    hf_path: str = ""
    kv: list[KV] = field(default_factory=list)
    tensors: list[OutTensor] = field(default_factory=list)
    omitted: list[tuple[str, str]] = field(default_factory=list)   # (HF name, why)
    warnings: list[str] = field(default_factory=list)
