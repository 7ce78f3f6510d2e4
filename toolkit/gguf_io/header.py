"""THE GGUF header parser: one bounds-checked walk over the key/values and tensor infos.

Every reader in the toolkit goes through :class:`GGUFHeader` (``GGUFFile`` is built on it; the
quantize driver and the imatrix loader use it directly).  It reads only the header through a
read-only mmap that is closed again before the constructor returns (tensor data is never
touched), decodes values with ``struct`` (strings kept as ``bytes`` in :attr:`GGUFHeader.kv`,
numeric arrays unpacked in one call) and keeps each key's value type, so metadata can be
copied exactly.  On a 32K-token vocabulary (bamba-430m) opening and reading the token list
takes ~0.03 s, where gguf-py's ``GGUFReader`` (a numpy view per array element) took 1.7-3 s
and ~100 MB of peak RSS.

Format: GGUF v2/v3 (ggml/docs/gguf.md): magic ``GGUF``, version u32, n_tensors u64, n_kv u64,
the key/values (name string, value type u32, value), the tensor infos (name string, n_dims
u32, ne[n_dims] u64, ggml type u32, offset u64), then tensor data aligned to
``general.alignment`` (default 32).  A string is a u64 byte length and UTF-8 bytes.

The rules are llama.cpp's (ggml/src/gguf.cpp ``gguf_init_from_file_impl``): GGUF version
2 or 3, known value types, no arrays of arrays, unique keys and tensor names, tensor names
shorter than GGML_MAX_NAME (64) bytes, 1..4 dims (0 allowed: a scalar), a known ggml
type, rows a multiple of the type's block size, an element count that fits in int64 (and,
stricter than gguf.cpp, is not zero: no model has an empty tensor),
``general.alignment`` a UINT32 power of two, every data offset a multiple of it and equal to
the end of the tensor before it padded to it (gguf.cpp's "tensor X has offset N, expected M"),
and all data inside the file, which ends with the last tensor's data (its padding optional):
a tensor count, dims or type that a flipped byte changed is a "corrupt header", not a weight
read from the wrong bytes.  Only little-endian files are read (the C runtime maps the data as
little-endian), so a byte-swapped header is an UnsupportedError.  Every count and length is
checked against the bytes left in the file before anything is allocated for it, and all
size arithmetic is on Python ints (no uint64 wrap-around).
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any

import gguf
import numpy as np

from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io.constants import GGMLType, Keys, k

GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64
_INT64_MAX = 2**63 - 1

VT = gguf.GGUFValueType
_FMT = {VT.UINT8: "B", VT.INT8: "b", VT.UINT16: "H", VT.INT16: "h", VT.UINT32: "I", VT.INT32: "i",
        VT.FLOAT32: "f", VT.BOOL: "?", VT.UINT64: "Q", VT.INT64: "q", VT.FLOAT64: "d"}
_SCALAR_SIZE = {vt: struct.calcsize("<" + f) for vt, f in _FMT.items()}
_TYPE_SIZES = {int(t): bs for t, bs in gguf.GGML_QUANT_SIZES.items()}   # ggml type -> (block, bytes)
_MISSING = object()

#: the pseudo-keys gguf-py's reader listed first (``GGUFFile.keys()`` keeps them)
_PSEUDO = (("GGUF.version", VT.UINT32), ("GGUF.tensor_count", VT.UINT64), ("GGUF.kv_count", VT.UINT64))


def missing_file_message(path: str) -> str:
    """Why ``path`` cannot be opened as an input file: "PATH: is a directory", "PATH: not a
    regular file" or "PATH: no such file"."""
    if os.path.isdir(path):
        return f"{path}: is a directory"
    if os.path.exists(path):
        return f"{path}: not a regular file"
    return f"{path}: no such file"


@dataclass
class KV:
    """One key/value as stored: ``value`` is a Python scalar, ``bytes`` (STRING) or a list
    (ARRAY; STRING elements as ``bytes``); ``sub_type`` is the element type of an ARRAY."""

    key: str
    type: gguf.GGUFValueType
    value: Any
    sub_type: gguf.GGUFValueType | None = None


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file.

    name:    GGUF tensor name (``blk.0.ssm_in.weight``)
    shape:   ggml order (ne0 first), ints
    type:    ggml type (``GGMLType``)
    offset:  absolute byte offset of the data in the file
    nbytes:  bytes of data
    """

    name: str
    shape: tuple[int, ...]
    type: GGMLType
    offset: int
    nbytes: int

    @property
    def np_shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.shape))

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


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
        s = self.buf[self.pos:self.pos + n]   # an mmap slice is a bytes copy
        self.pos += n
        return s

    def strings(self, n: int, key: str) -> list[bytes]:
        """``n`` strings (the caller has checked that ``n`` of them can fit); a fast loop that
        falls back to :meth:`string` for the error message of the element at fault."""
        buf, size, pos, unpack = self.buf, self.size, self.pos, struct.unpack_from
        out: list[bytes] = []
        append = out.append
        for i in range(n):
            if pos + 8 <= size:
                (ln,) = unpack("<Q", buf, pos)
                end = pos + 8 + ln
                if end <= size:
                    append(buf[pos + 8:end])
                    pos = end
                    continue
            self.pos = pos
            self.string(f"element {i} of key {key!r}")   # raises, naming the element
        self.pos = pos
        return out


def _text(b: bytes, path: str, what: str) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: {what} {b[:64]!r} is not valid UTF-8") from None


def _read_value(c: _Cursor, vt: int, key: str) -> tuple[Any, gguf.GGUFValueType | None]:
    if vt in _FMT:
        c.need(_SCALAR_SIZE[vt], f"value of key {key!r}")
        (v,) = struct.unpack_from("<" + _FMT[vt], c.buf, c.pos)
        c.pos += _SCALAR_SIZE[vt]
        return v, None
    if vt == VT.STRING:
        return c.string(f"string value of key {key!r}"), None
    if vt == VT.ARRAY:
        et = c.u32(f"element type of key {key!r}")
        n = c.u64(f"element count of key {key!r}")
        if et == VT.ARRAY:
            raise InputError(f"{c.path}: key {key!r} is an array of arrays (not valid GGUF)")
        if et in _FMT:
            c.need(n * _SCALAR_SIZE[et], f"array of {n} elements of key {key!r}")
            v = list(struct.unpack_from(f"<{n}{_FMT[et]}", c.buf, c.pos))
            c.pos += n * _SCALAR_SIZE[et]
            return v, VT(et)
        if et == VT.STRING:
            if n > (c.size - c.pos) // 8:
                raise InputError(f"{c.path}: key {key!r} declares {n} strings, more than fit in the rest of the file")
            return c.strings(n, key), VT.STRING
        raise InputError(f"{c.path}: key {key!r} is an array of unknown GGUF value type {et}")
    raise InputError(f"{c.path}: key {key!r} has unknown GGUF value type {vt}")


def _check_data_layout(path: str, infos: list, data_start: int, alignment: int, size: int) -> None:
    """The tensor infos and the data section agree, as gguf.cpp requires: each tensor's data
    follows the previous one's, padded to ``alignment`` (offsets 0, pad(nbytes_0), ...), and the
    data section fills the file up to the last tensor's padding.  A flipped byte in the tensor
    count, a dims or a type shifts this, and the weights would be read from the wrong bytes (a
    non-finite weight at ``run``, a NaN scale at ``quantize``): "corrupt header" instead.  Only a
    file that ends before its last tensors' data is "truncated".

    ``infos``: (name, dims, ggml type, relative offset, nbytes) in file order.  Raises InputError."""
    for name, _, _, off, nbytes in infos:   # first: a claim beyond the file names its bytes
        if data_start + off + nbytes > size:
            raise InputError(f"{path}: tensor {name!r} claims {nbytes} bytes of data at [{data_start + off}, "
                             f"{data_start + off + nbytes}), beyond the end of the file ({size} bytes): a truncated "
                             f"file or a corrupt header")
    if not infos:   # a vocabulary-only file: no data section
        return
    expect = 0
    for name, _, _, off, nbytes in infos:
        if off != expect:
            raise InputError(f"{path}: corrupt header: tensor {name!r} has data offset {off}, expected {expect} "
                             f"(the end of the tensor before it, padded to {alignment} bytes)")
        expect = off + nbytes + (-(off + nbytes) % alignment)
    end = data_start + infos[-1][3] + infos[-1][4]   # the last tensor's padding is optional
    if size - end >= alignment:
        raise InputError(f"{path}: corrupt header: its {len(infos)} tensor infos describe {end - data_start} bytes of "
                         f"data from offset {data_start}, but the file has {size - data_start} bytes there "
                         f"(a wrong tensor count, dims or type?)")


class GGUFHeader:
    """Metadata and tensor table of a GGUF file, parsed and checked in one walk; the file is
    then closed (nothing stays mapped).

    Attributes:
        path:        the file, as given
        version:     GGUF version (2 or 3)
        kv:          list of :class:`KV` in file order (raw values: STRING as ``bytes``)
        tensors:     ``{name: TensorInfo}`` in file order; shapes in ggml order, absolute offsets
        alignment:   ``general.alignment`` (default 32), bytes
        data_offset: absolute byte offset of the tensor data section

    Raises:
        InputError: missing file, not GGUF, truncated or inconsistent header, bad counts,
            lengths, value types, dims, ggml types, offsets or alignment; tensor data beyond
            the end of the file.  The message names the file and the key or tensor.
        UnsupportedError: GGUF version other than 2 or 3, or a big-endian file.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise InputError(missing_file_message(self.path))
        size = os.path.getsize(self.path)
        if size < 24:
            raise InputError(f"{self.path}: not a GGUF file ({size} bytes, too short for a GGUF header)")
        with open(self.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            self._parse(mm, size)
        self._decoded: dict[str, Any] = {}

    # ---- the walk ---------------------------------------------------------------------
    def _parse(self, buf, size: int) -> None:
        path = self.path
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
        self.version = version
        n_tensors = c.u64("tensor count")
        n_kv = c.u64("key/value count")
        # the smallest key/value is 8 (key length) + 4 (type) + 1 (u8) bytes, a tensor info 8 + 4 + 4 + 8
        if n_kv > (size - c.pos) // 13:
            raise InputError(f"{path}: header declares {n_kv} key/values, more than fit in the file ({size} bytes)")
        if n_tensors > (size - c.pos) // 24:
            raise InputError(f"{path}: header declares {n_tensors} tensors, more than fit in the file ({size} bytes)")

        alignment = gguf.GGUF_DEFAULT_ALIGNMENT
        self.kv: list[KV] = []
        kvd: dict[str, KV] = {}
        for i in range(n_kv):
            key = _text(c.string(f"name of key #{i}"), path, f"name of key #{i}")
            if key in kvd:
                raise InputError(f"{path}: duplicate key {key!r}")
            vt = c.u32(f"value type of key {key!r}")
            val, sub = _read_value(c, vt, key)
            kv = KV(key, VT(vt), val, sub)
            self.kv.append(kv)
            kvd[key] = kv
            if key == Keys.General.ALIGNMENT:
                if vt != VT.UINT32:
                    raise InputError(f"{path}: key 'general.alignment' must be UINT32, has type {VT(vt).name}")
                alignment = val
                if alignment == 0 or alignment & (alignment - 1):
                    raise InputError(f"{path}: key 'general.alignment' = {alignment} is not a power of two")

        infos: list[tuple[str, tuple[int, ...], int, int, int]] = []
        names: set[str] = set()
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
            infos.append((name, tuple(dims), ttype, off, n_el // blck * tsize))

        data_start = c.pos + (-c.pos % alignment)
        _check_data_layout(path, infos, data_start, alignment, size)
        self.tensors: dict[str, TensorInfo] = {}
        for name, dims, ttype, off, nbytes in infos:
            try:
                tt = GGMLType(ttype)
            except ValueError:   # known to ggml, not to the toolkit
                raise InputError(f"{path}: tensor {name!r} has unknown ggml type {ttype}") from None
            self.tensors[name] = TensorInfo(name, dims, tt, data_start + off, nbytes)
        self.alignment = alignment
        self.data_offset = data_start
        for pk, pt in _PSEUDO:   # looked up by get()/value_type(), never copied (not in self.kv)
            kvd[pk] = KV(pk, pt, {"GGUF.version": version, "GGUF.tensor_count": n_tensors,
                                  "GGUF.kv_count": n_kv}[pk])
        self._kvd = kvd

    # ---- metadata ---------------------------------------------------------------------
    @property
    def arch(self) -> str:
        """``general.architecture``; InputError when absent."""
        return str(self.require(Keys.General.ARCHITECTURE))

    def keys(self) -> list[str]:
        """All keys in file order, after gguf-py's pseudo-keys ``GGUF.version``,
        ``GGUF.tensor_count`` and ``GGUF.kv_count``."""
        return [pk for pk, _ in _PSEUDO] + [kv.key for kv in self.kv]

    def _resolve(self, key: str) -> str:
        return k(key, self.arch) if "{arch}" in key else key

    def get(self, key: str, default: Any = None) -> Any:
        """Value of ``key`` (``{arch}`` is filled in), or ``default`` when absent.

        STRING values are ``str``; arrays are (new) lists of Python scalars or ``str``.

        Raises:
            InputError: a STRING value (or element) that is not valid UTF-8 (names key and file).
        """
        key = self._resolve(key)
        kv = self._kvd.get(key)
        if kv is None:
            return default
        v = self._decoded.get(key, _MISSING)
        if v is _MISSING:
            try:
                if kv.type == VT.STRING:
                    v = kv.value.decode("utf-8")
                elif kv.type == VT.ARRAY and kv.sub_type == VT.STRING:
                    v = [s.decode("utf-8") for s in kv.value]
                else:
                    v = kv.value
            except UnicodeDecodeError as e:
                raise InputError(f"{self.path}: key {key!r} is malformed ({e})") from None
            self._decoded[key] = v
        return list(v) if isinstance(v, list) else v

    def require(self, key: str) -> Any:
        """Value of ``key``; raises InputError naming the key and file when absent."""
        v = self.get(key, _MISSING)
        if v is _MISSING:
            raise InputError(f"{self.path}: missing key {self._resolve(key)!r}")
        return v

    def value_type(self, key: str) -> gguf.GGUFValueType | None:
        """GGUF value type of ``key`` as stored (ARRAY for arrays), or None when absent."""
        kv = self._kvd.get(key)
        return None if kv is None else kv.type

    def array_len(self, key: str) -> int | None:
        """Element count of the ARRAY ``key``; None when absent or not an array."""
        kv = self._kvd.get(key)
        return len(kv.value) if kv is not None and kv.type == VT.ARRAY else None

    def string_nbytes(self, key: str) -> int | None:
        """Byte length of the STRING ``key``; None when absent or not a string."""
        kv = self._kvd.get(key)
        return len(kv.value) if kv is not None and kv.type == VT.STRING else None
