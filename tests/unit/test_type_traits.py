"""The C type-traits table (native/quants/ggml_types.c) against gguf-py: for every ggml type id the
table knows, its name and block (elements, bytes per block) are gguf-py's GGML_QUANT_SIZES;
the types we write (toolkit.quantize.types.TENSOR_TYPES) convert both ways and have a
mat-mul kernel taking ggml's activation type (ggml-cpu type_traits_cpu vec_dot_type)."""
from __future__ import annotations

import gguf
import pytest

from toolkit.quantize.types import TENSOR_TYPES
from toolkit.binding import ffi, lib

pytestmark = pytest.mark.native

T = gguf.GGMLQuantizationType
DEQUANT, QUANT, IMATRIX, MATMUL, ACT = 1, 2, 4, 8, 16

#: gguf-py gives Q8_1 40 bytes (4 + 4 + 32); ggml's block_q8_1 is ggml_half2 ds + 32 int8 =
#: 36 (ggml.c type_traits: sizeof(block_q8_1)), as qdot.h's blk_q8_1
GGUF_PY_DIFFERS = {T.Q8_1: (32, 36)}

#: ggml-cpu's vec_dot_type of each type we write (float types: float32 activations here)
VEC_DOT = {T.F32: T.F32, T.F16: T.F32, T.BF16: T.F32, T.Q8_0: T.Q8_0, T.Q4_0: T.Q8_0, T.Q5_0: T.Q8_0,
           T.IQ4_NL: T.Q8_0, T.Q4_1: T.Q8_1, T.Q5_1: T.Q8_1, T.Q2_K: T.Q8_K, T.Q3_K: T.Q8_K, T.Q4_K: T.Q8_K,
           T.Q5_K: T.Q8_K, T.Q6_K: T.Q8_K, T.IQ4_XS: T.Q8_K}
#: ggml's quantize_row_*_impl takes an imatrix for every block type we write but Q8_0
IMATRIX_TYPES = {T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS}


def query(type_id: int):
    name, blck, size = ffi.new("const char **"), ffi.new("int64_t *"), ffi.new("int64_t *")
    vdt, flags = ffi.new("int *"), ffi.new("int *")
    if not lib.tk_type_traits_query(type_id, name, blck, size, vdt, flags):
        return None
    return ffi.string(name[0]).decode(), blck[0], size[0], vdt[0], flags[0]


def known_ids() -> list[int]:
    return [i for i in range(64) if query(i) is not None]


def test_table_matches_gguf_py():
    ids = known_ids()
    assert len(ids) == 32
    for i in ids:
        name, blck, size, _, _ = query(i)
        t = T(i)                               # every id we know, gguf-py knows
        assert name == t.name
        want = GGUF_PY_DIFFERS.get(t, gguf.GGML_QUANT_SIZES[t])
        assert (blck, size) == want, name
        assert lib.tk_quant_row_size(i, 1024) in (-1, 1024 // blck * size)


def test_unknown_ids():
    for i in (-1, 4, 5, 31, 32, 33, 36, 37, 38, 40, 41, 1 << 20):
        assert query(i) is None, i
        assert lib.tk_quant_type_supported(i) == 0


@pytest.mark.parametrize("t", list(TENSOR_TYPES.values()), ids=lambda t: t.name)
def test_written_types(t):
    name, blck, size, vdt, flags = query(int(t))
    assert flags & (DEQUANT | QUANT | MATMUL) == DEQUANT | QUANT | MATMUL, name
    assert bool(flags & IMATRIX) == (t in IMATRIX_TYPES), name
    assert vdt == VEC_DOT[t], name
    assert lib.tk_quant_type_supported(int(t)) == 1
    assert lib.tk_quant_row_size(int(t), 4 * blck) == 4 * size
    if vdt != T.F32:                            # the activation type's row: its quantizer
        assert query(vdt)[4] & ACT, name


def test_only_written_types_convert():
    for i in known_ids():
        _, _, _, vdt, flags = query(i)
        writes = T(i) in TENSOR_TYPES.values()
        assert bool(flags & (DEQUANT | QUANT)) == writes, T(i).name
        assert lib.tk_quant_type_supported(i) == int(writes)
        assert bool(flags & MATMUL) == writes and (vdt >= 0) == writes, T(i).name
