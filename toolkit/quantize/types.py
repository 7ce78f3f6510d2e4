"""Type registry: the ggml tensor types we quantize to, and llama.cpp's file types (mixtures).

Tensor types are ggml's (``GGMLType``, numbers as in ggml.h); file types are llama.cpp's
``llama_ftype`` (``gguf.LlamaFileType``), the value written to ``general.file_type``.
Block sizes and bytes per block come from gguf-py's ``GGML_QUANT_SIZES`` (ggml's type traits).

ref: llama.cpp tools/quantize/quantize.cpp (QUANT_OPTIONS), src/llama-quant.cpp
(llama_ftype_get_default_type), build 0c1e570.
"""
from __future__ import annotations

from dataclasses import dataclass

import gguf

from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import GGMLType, type_size

FileType = gguf.LlamaFileType

#: tensor types this toolkit can write (and read back through tk_dequantize_row)
TENSOR_TYPES: dict[str, GGMLType] = {t.name: t for t in (
    GGMLType.F32, GGMLType.F16, GGMLType.BF16,
    GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1,
    GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K,
    GGMLType.IQ4_NL, GGMLType.IQ4_XS,
)}

#: quantized types (ggml_is_quantized: block types, not F32/F16/BF16)
QUANTIZED = frozenset(t for t in TENSOR_TYPES.values() if t not in (GGMLType.F32, GGMLType.F16, GGMLType.BF16))


@dataclass(frozen=True)
class FileTypeInfo:
    """A file type (mixture) as llama-quantize names it on its command line."""

    name: str             # "Q4_K_M"
    ftype: FileType       # value of general.file_type
    default: GGMLType     # llama_ftype_get_default_type
    description: str


def _ft(name: str, ftype: FileType, default: GGMLType, desc: str) -> FileTypeInfo:
    return FileTypeInfo(name, ftype, default, desc)


FILE_TYPES: dict[str, FileTypeInfo] = {f.name: f for f in (
    _ft("F32", FileType.ALL_F32, GGMLType.F32, "float32, no quantization"),
    _ft("F16", FileType.MOSTLY_F16, GGMLType.F16, "float16 weights"),
    _ft("BF16", FileType.MOSTLY_BF16, GGMLType.BF16, "bfloat16 weights"),
    _ft("Q8_0", FileType.MOSTLY_Q8_0, GGMLType.Q8_0, "8.5 bpw"),
    _ft("Q4_0", FileType.MOSTLY_Q4_0, GGMLType.Q4_0, "4.5 bpw, legacy"),
    _ft("Q4_1", FileType.MOSTLY_Q4_1, GGMLType.Q4_1, "5.0 bpw, legacy"),
    _ft("Q5_0", FileType.MOSTLY_Q5_0, GGMLType.Q5_0, "5.5 bpw, legacy"),
    _ft("Q5_1", FileType.MOSTLY_Q5_1, GGMLType.Q5_1, "6.0 bpw, legacy"),
    _ft("Q2_K", FileType.MOSTLY_Q2_K, GGMLType.Q2_K, "k-quant mixture, Q2_K/Q3_K"),
    _ft("Q3_K_S", FileType.MOSTLY_Q3_K_S, GGMLType.Q3_K, "k-quant mixture, mostly Q3_K"),
    _ft("Q3_K_M", FileType.MOSTLY_Q3_K_M, GGMLType.Q3_K, "k-quant mixture, Q3_K/Q4_K/Q5_K"),
    _ft("Q3_K_L", FileType.MOSTLY_Q3_K_L, GGMLType.Q3_K, "k-quant mixture, Q3_K/Q5_K"),
    _ft("Q4_K_S", FileType.MOSTLY_Q4_K_S, GGMLType.Q4_K, "k-quant mixture, mostly Q4_K"),
    _ft("Q4_K_M", FileType.MOSTLY_Q4_K_M, GGMLType.Q4_K, "k-quant mixture, Q4_K/Q6_K"),
    _ft("Q5_K_S", FileType.MOSTLY_Q5_K_S, GGMLType.Q5_K, "k-quant mixture, mostly Q5_K"),
    _ft("Q5_K_M", FileType.MOSTLY_Q5_K_M, GGMLType.Q5_K, "k-quant mixture, Q5_K/Q6_K"),
    _ft("Q6_K", FileType.MOSTLY_Q6_K, GGMLType.Q6_K, "6.56 bpw k-quant"),
    _ft("IQ4_NL", FileType.MOSTLY_IQ4_NL, GGMLType.IQ4_NL, "4.5 bpw non-linear"),
    _ft("IQ4_XS", FileType.MOSTLY_IQ4_XS, GGMLType.IQ4_XS, "4.25 bpw non-linear"),
)}

#: llama-quantize's aliases
ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}


def file_type(name: str) -> FileTypeInfo:
    """Look up a file type by its llama-quantize name (case-insensitive, aliases allowed) or its
    numeric id, as llama-quantize takes both (``7`` = Q8_0, ``15`` = Q4_K_M: the ``llama_ftype``
    value, ``gguf.LlamaFileType``, of tools/quantize/quantize.cpp's QUANT_OPTIONS).

    Raises:
        InputError: unknown name or id, or an id of a type this toolkit does not write (the
            message lists the valid ones).
    """
    if name.strip().isdigit():
        n = int(name)
        for info in FILE_TYPES.values():
            if int(info.ftype) == n:
                return info
        try:
            known = f" ({FileType(n).name.removeprefix('MOSTLY_')}: not a type toolkit quantize writes)"
        except ValueError:
            known = ""
        raise InputError(f"unsupported quantization type id {n}{known}; valid ids: "
                         + ", ".join(f"{int(i.ftype)}={k}" for k, i in FILE_TYPES.items()))
    key = ALIASES.get(name.upper(), name.upper())
    try:
        return FILE_TYPES[key]
    except KeyError:
        raise InputError(f"unknown quantization type {name!r}; valid types: {', '.join(FILE_TYPES)} "
                         f"(aliases: {', '.join(ALIASES)})") from None


def tensor_type(name: str, what: str = "tensor type") -> GGMLType:
    """Look up a ggml tensor type by name (``q4_k`` or ``Q4_K``).

    Raises:
        InputError: unknown name, or a ggml type this toolkit does not write (lists the valid ones).
    """
    key = name.strip().upper()
    if key in TENSOR_TYPES:
        return TENSOR_TYPES[key]
    raise InputError(f"unknown {what} {name!r}; valid types: {', '.join(TENSOR_TYPES)}")


def block_size(t: int) -> int:
    """Elements per block of ggml type ``t`` (1 for F32/F16/BF16, 32 or 256 otherwise)."""
    return type_size(t)[0]


def is_supported_source(t: int) -> bool:
    """Whether tensors of ggml type ``t`` can be read (dequantized) by the C library."""
    return GGMLType(t) in TENSOR_TYPES.values()


def require_supported_source(t: int, tensor: str, path: str) -> None:
    if not is_supported_source(t):
        raise UnsupportedError(f"{path}: tensor {tensor!r} has ggml type {GGMLType(t).name}, which this toolkit "
                               f"cannot read; readable types: {', '.join(TENSOR_TYPES)}")
