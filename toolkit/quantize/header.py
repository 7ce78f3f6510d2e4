"""A fast, read-only GGUF header parser for the quantize driver.

Why not ``gguf_io.GGUFFile``: gguf-py's reader builds a numpy memmap view for every element
of every metadata array; on a 32K-token vocabulary that is ~4 s and ~100 MB of Python objects,
more than quantizing a 400M-parameter model to Q8_0 takes.  This parser walks the header
once with ``struct`` (strings kept as bytes, numeric arrays through ``np.frombuffer``) and
keeps each key's value type, so the metadata is copied exactly.  Tensor data is never read here.

Format: GGUF v2/v3 (ggml/docs/gguf.md): magic, version u32, n_tensors u64, n_kv u64, the
key/values, the tensor infos (name, n_dims u32, ne[n_dims] u64, type u32, offset u64), then
data aligned to ``general.alignment`` (default 32).
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any

import gguf
import numpy as np

from toolkit.errors import InputError
from toolkit.gguf_io import GGMLType, Keys
from toolkit.gguf_io.layout import check_layout
from toolkit.gguf_io.writer import tensor_nbytes

VT = gguf.GGUFValueType
_SCALAR = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I", VT.INT32: "<i",
           VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d"}
_NP = {VT.UINT8: "<u1", VT.INT8: "<i1", VT.UINT16: "<u2", VT.INT16: "<i2", VT.UINT32: "<u4", VT.INT32: "<i4",
       VT.FLOAT32: "<f4", VT.BOOL: "?", VT.UINT64: "<u8", VT.INT64: "<i8", VT.FLOAT64: "<f8"}


@dataclass
class KV:
    """One key/value: ``value`` is a Python scalar, ``bytes`` (STRING) or a list (ARRAY)."""

    key: str
    type: gguf.GGUFValueType
    value: Any
    sub_type: gguf.GGUFValueType | None = None


@dataclass(frozen=True)
class Tensor:
    """name; shape in ggml order (ne0 first); ggml type; absolute data offset; data bytes."""

    name: str
    shape: tuple[int, ...]
    type: GGMLType
    offset: int
    nbytes: int


class _Cursor:
    def __init__(self, buf, path: str):
        self.b, self.p, self.path = buf, 0, path

    def take(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        if self.p + n > len(self.b):
            raise InputError(f"{self.path}: truncated GGUF header (at byte {self.p})")
        v = struct.unpack_from(fmt, self.b, self.p)[0]
        self.p += n
        return v

    def string(self) -> bytes:
        n = self.take("<Q")
        if self.p + n > len(self.b):
            raise InputError(f"{self.path}: truncated GGUF header (string of {n} bytes at byte {self.p})")
        s = bytes(self.b[self.p:self.p + n])
        self.p += n
        return s

    def value(self, vt: gguf.GGUFValueType, key: str) -> tuple[Any, gguf.GGUFValueType | None]:
        if vt in _SCALAR:
            return self.take(_SCALAR[vt]), None
        if vt == VT.STRING:
            return self.string(), None
        if vt == VT.ARRAY:
            sub = self._vtype(key)
            n = self.take("<Q")
            if sub in _NP:
                size = np.dtype(_NP[sub]).itemsize * n
                if self.p + size > len(self.b):
                    raise InputError(f"{self.path}: truncated GGUF header (array {key!r})")
                arr = np.frombuffer(self.b, _NP[sub], n, self.p).tolist()
                self.p += size
                return arr, sub
            return [self.value(sub, key)[0] for _ in range(n)], sub
        raise InputError(f"{self.path}: key {key!r} has unknown value type {int(vt)}")

    def _vtype(self, key: str) -> gguf.GGUFValueType:
        t = self.take("<I")
        try:
            return VT(t)
        except ValueError:
            raise InputError(f"{self.path}: key {key!r} has unknown value type {t}") from None


class GGUFHeader:
    """Metadata and tensor table of a GGUF file, parsed eagerly; the file is then closed.

    Raises:
        InputError: missing file, not GGUF, truncated header, tensor data beyond the end of the
        file, duplicate tensor names, unknown ggml types (the message names the file and key);
        every rule of :func:`toolkit.gguf_io.layout.check_layout`.
        UnsupportedError: GGUF version other than 2/3, or big-endian.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise InputError(f"{self.path}: no such file")
        check_layout(self.path)   # bounds, counts, alignment, dims overflow: the rules GGUFFile applies
        size = os.path.getsize(self.path)
        if size < 24:
            raise InputError(f"{self.path}: not a GGUF file (only {size} bytes)")
        # the header pages are mapped only while parsing (unmapped on close: no RSS kept)
        with open(self.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            self._parse(mm, size)

    def _parse(self, mm, size: int) -> None:
        c = _Cursor(memoryview(mm), self.path)
        try:
            if bytes(mm[:4]) != b"GGUF":
                raise InputError(f"{self.path}: not a GGUF file (bad magic {bytes(mm[:4])!r})")
            c.p = 4
            self.version = c.take("<I")
            if self.version not in (2, 3):
                raise InputError(f"{self.path}: unsupported GGUF version {self.version}")
            n_tensors, n_kv = c.take("<Q"), c.take("<Q")
            self.kv: list[KV] = []
            for _ in range(n_kv):
                key = c.string().decode("utf-8", "replace")
                vt = c._vtype(key)
                val, sub = c.value(vt, key)
                self.kv.append(KV(key, vt, val, sub))
            kvd = {kv.key: kv for kv in self.kv}
            align = kvd.get(Keys.General.ALIGNMENT)
            self.alignment = int(align.value) if align is not None else gguf.GGUF_DEFAULT_ALIGNMENT
            infos = []
            for _ in range(n_tensors):
                name = c.string().decode("utf-8", "replace")
                nd = c.take("<I")
                if nd > 4:
                    raise InputError(f"{self.path}: tensor {name!r} has {nd} dimensions")
                shape = tuple(c.take("<Q") for _ in range(nd))
                t = c.take("<I")
                try:
                    tt = GGMLType(t)
                except ValueError:
                    raise InputError(f"{self.path}: tensor {name!r} has unknown ggml type {t}") from None
                infos.append((name, shape, tt, c.take("<Q")))
            start = c.p + (-c.p) % self.alignment
        finally:
            c.b.release()
        self.data_offset = start
        self.tensors: dict[str, Tensor] = {}
        for name, shape, tt, off in infos:
            if name in self.tensors:
                raise InputError(f"{self.path}: duplicate tensor name {name!r}")
            try:
                nbytes = tensor_nbytes(tuple(reversed(shape)), tt) if shape else tensor_nbytes((1,), tt)
            except ValueError as e:
                raise InputError(f"{self.path}: tensor {name!r}: {e}") from None
            t = Tensor(name, shape, tt, start + off, nbytes)
            if t.offset + t.nbytes > size:
                raise InputError(f"{self.path}: tensor {name!r} data [{t.offset}, {t.offset + t.nbytes}) lies beyond "
                                 f"the end of the file ({size} bytes)")
            self.tensors[name] = t
        self._kvd = {kv.key: kv for kv in self.kv}

    def get(self, key: str, default: Any = None) -> Any:
        """Value of ``key`` (``{arch}`` filled in); strings decoded as UTF-8."""
        if "{arch}" in key:
            key = key.format(arch=self.arch)
        kv = self._kvd.get(key)
        if kv is None:
            return default
        if isinstance(kv.value, bytes):
            return kv.value.decode("utf-8", "replace")
        return kv.value

    def require(self, key: str) -> Any:
        v = self.get(key)
        if v is None:
            raise InputError(f"{self.path}: missing key {key.replace('{arch}', self.arch)!r}")
        return v

    @property
    def arch(self) -> str:
        kv = self._kvd.get(Keys.General.ARCHITECTURE)
        if kv is None or not isinstance(kv.value, bytes):
            raise InputError(f"{self.path}: missing key {Keys.General.ARCHITECTURE!r}")
        return kv.value.decode("utf-8", "replace")
