"""Bounds-checked walk over a GGUF header, run before gguf-py parses the file.

gguf-py trusts the counts and lengths it reads: an array whose declared element count runs
past the end of the file loops (and allocates) once per declared element, a dims product
wraps around 2**64 in its uint64 arithmetic, and n_dims > 4, misaligned offsets or rows
that are not a whole number of blocks go through unnoticed.  This walk reads only the
header (key/values and tensor infos, never tensor data), does all size arithmetic on
Python ints, and raises one InputError naming the file and the key or tensor at fault.

The rules are llama.cpp's (ggml/src/gguf.cpp ``gguf_init_from_file_impl``): GGUF version
2 or 3, known value types, no arrays of arrays, unique keys and tensor names, tensor names
shorter than GGML_MAX_NAME (64) bytes, 1..4 dims (0 allowed: a scalar), a known ggml
type, rows a multiple of the type's block size, an element count that fits in int64 (and,
stricter than gguf.cpp, is not zero: no model has an empty tensor),
``general.alignment`` a UINT32 power of two, every data offset a multiple of it, and all
data inside the file.  Only little-endian files are read (the C runtime maps the data as
little-endian), so a byte-swapped header is an UnsupportedError.
"""
from __future__ import annotations

import mmap
import os
import struct

import gguf

from toolkit.errors import InputError, UnsupportedError

GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64
_INT64_MAX = 2**63 - 1

_VT = gguf.GGUFValueType
_SCALAR_SIZE = {_VT.UINT8: 1, _VT.INT8: 1, _VT.UINT16: 2, _VT.INT16: 2, _VT.UINT32: 4, _VT.INT32: 4,
                _VT.FLOAT32: 4, _VT.BOOL: 1, _VT.UINT64: 8, _VT.INT64: 8, _VT.FLOAT64: 8}
_TYPE_SIZES = {int(t): bs for t, bs in gguf.GGML_QUANT_SIZES.items()}   # ggml type -> (block, bytes)


class _Cursor:
    def __init__(self, buf, size: int, path: str):
        self.buf, self.size, self.path, self.pos = buf, size, path, 0

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise InputError(f"{self.path}: truncated or corrupt GGUF header: {what} needs {n} bytes at offset "
                             f"{self.pos}, the file has {self.size}")

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = struct.unpack_from("<I", self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = struct.unpack_from("<Q", self.buf, self.pos)
        self.pos += 8
        return v

    def string(self, what: str) -> bytes:
        n = self.u64(f"length of {what}")
        self.need(n, f"{what} ({n} bytes declared)")
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return s

    def skip_string(self, what: str) -> None:
        n = self.u64(f"length of {what}")
        self.need(n, f"{what} ({n} bytes declared)")
        self.pos += n


def _text(b: bytes, path: str, what: str) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: {what} {b[:64]!r} is not valid UTF-8") from None


def _skip_value(c: _Cursor, vt: int, key: str) -> None:
    if vt in _SCALAR_SIZE:
        c.need(_SCALAR_SIZE[vt], f"value of key {key!r}")
        c.pos += _SCALAR_SIZE[vt]
    elif vt == _VT.STRING:
        c.skip_string(f"string value of key {key!r}")
    elif vt == _VT.ARRAY:
        et = c.u32(f"element type of key {key!r}")
        n = c.u64(f"element count of key {key!r}")
        if et == _VT.ARRAY:
            raise InputError(f"{c.path}: key {key!r} is an array of arrays (not valid GGUF)")
        if et in _SCALAR_SIZE:
            c.need(n * _SCALAR_SIZE[et], f"array of {n} elements of key {key!r}")
            c.pos += n * _SCALAR_SIZE[et]
        elif et == _VT.STRING:
            if n > (c.size - c.pos) // 8:
                raise InputError(f"{c.path}: key {key!r} declares {n} strings, more than fit in the rest of the file")
            for i in range(n):
                c.skip_string(f"element {i} of key {key!r}")
        else:
            raise InputError(f"{c.path}: key {key!r} is an array of unknown GGUF value type {et}")
    else:
        raise InputError(f"{c.path}: key {key!r} has unknown GGUF value type {vt}")


def check_layout(path: str) -> None:
    """Walk the header of the GGUF file at ``path``; return quietly when its layout is sound.

    Reads the key/value section and the tensor infos through a read-only mmap (tensor data
    is never touched), so the cost is one pass over the header.

    Raises:
        InputError: truncated or inconsistent header, bad counts, lengths, value types,
            dims, ggml types, offsets or alignment; tensor data beyond the end of the file.
            The message names the file and the key or tensor.
        UnsupportedError: GGUF version other than 2 or 3, or a big-endian file.
    """
    size = os.path.getsize(path)
    if size < 24:
        raise InputError(f"{path}: not a GGUF file ({size} bytes, too short for a GGUF header)")
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        _check(mm, size, path)


def _check(buf, size: int, path: str) -> None:
    c = _Cursor(buf, size, path)
    magic = bytes(buf[0:4])
    if magic != b"GGUF":
        raise InputError(f"{path}: not a GGUF file (magic {magic!r})")
    c.pos = 4
    version = c.u32("version")
    if version not in (2, 3):
        if version & 0xFFFF == 0 and struct.unpack("<I", struct.pack(">I", version))[0] in (2, 3):
            raise UnsupportedError(f"{path}: big-endian GGUF files are not supported")
        raise UnsupportedError(f"{path}: GGUF version {version} is not supported (2 and 3 are)")
    n_tensors = c.u64("tensor count")
    n_kv = c.u64("key/value count")
    # the smallest key/value is 8 (key length) + 4 (type) + 1 (u8) bytes, a tensor info 8 + 4 + 4 + 8
    if n_kv > (size - c.pos) // 13:
        raise InputError(f"{path}: header declares {n_kv} key/values, more than fit in the file ({size} bytes)")
    if n_tensors > (size - c.pos) // 24:
        raise InputError(f"{path}: header declares {n_tensors} tensors, more than fit in the file ({size} bytes)")

    alignment = gguf.GGUF_DEFAULT_ALIGNMENT
    keys: set[str] = set()
    for i in range(n_kv):
        key = _text(c.string(f"name of key #{i}"), path, f"name of key #{i}")
        if key in keys:
            raise InputError(f"{path}: duplicate key {key!r}")
        keys.add(key)
        vt = c.u32(f"value type of key {key!r}")
        start = c.pos
        _skip_value(c, vt, key)
        if key == "general.alignment":
            if vt != _VT.UINT32:
                raise InputError(f"{path}: key 'general.alignment' must be UINT32, has type {_VT(vt).name}")
            (alignment,) = struct.unpack_from("<I", buf, start)
            if alignment == 0 or alignment & (alignment - 1):
                raise InputError(f"{path}: key 'general.alignment' = {alignment} is not a power of two")

    names: set[str] = set()
    spans: list[tuple[str, int, int]] = []
    for j in range(n_tensors):
        raw = c.string(f"name of tensor #{j}")
        name = _text(raw, path, f"name of tensor #{j}")
        if len(raw) >= GGML_MAX_NAME:
            raise InputError(f"{path}: tensor name {name[:80]!r}... is {len(raw)} bytes (at most {GGML_MAX_NAME - 1})")
        if name in names:
            raise InputError(f"{path}: duplicate tensor name {name!r}")
        names.add(name)
        nd = c.u32(f"n_dims of tensor {name!r}")
        if nd > GGML_MAX_DIMS:
            raise InputError(f"{path}: tensor {name!r} has {nd} dims (at most {GGML_MAX_DIMS})")
        dims = [c.u64(f"dims of tensor {name!r}") for _ in range(nd)]
        ttype = c.u32(f"ggml type of tensor {name!r}")
        off = c.u64(f"data offset of tensor {name!r}")
        if ttype not in _TYPE_SIZES:
            raise InputError(f"{path}: tensor {name!r} has unknown ggml type {ttype}")
        n_el = 1
        for d in dims:
            n_el *= d
        if any(d > _INT64_MAX for d in dims) or n_el > _INT64_MAX:
            raise InputError(f"{path}: tensor {name!r} dims {dims} overflow int64 ({n_el} elements)")
        if n_el == 0:   # legal for gguf.cpp, but no model has an empty tensor; the tools divide by rows
            raise InputError(f"{path}: tensor {name!r} has an empty dimension (dims {dims})")
        blck, tsize = _TYPE_SIZES[ttype]
        if dims and dims[0] % blck:
            raise InputError(f"{path}: tensor {name!r}: row of {dims[0]} elements is not a multiple of the "
                             f"{gguf.GGMLQuantizationType(ttype).name} block size {blck}")
        if off % alignment:
            raise InputError(f"{path}: tensor {name!r} data offset {off} is not a multiple of the alignment {alignment}")
        spans.append((name, off, n_el // blck * tsize))

    data_start = c.pos + (-c.pos % alignment)
    for name, off, nbytes in spans:
        if data_start + off + nbytes > size:
            raise InputError(f"{path}: tensor {name!r} claims {nbytes} bytes of data at [{data_start + off}, "
                             f"{data_start + off + nbytes}), beyond the end of the file ({size} bytes; truncated?)")
