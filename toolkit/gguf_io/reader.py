"""Read GGUF files without loading tensor data (memmap), with errors that name the file and key.

Shapes are reported in **ggml order** (``ne``: fastest-varying dimension first), as
``gguf-py`` and llama.cpp print them.  ``TensorInfo.np_shape`` is the numpy (row-major) order.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import gguf

from toolkit.errors import InputError
from toolkit.gguf_io.constants import GGMLType, Keys, k
from toolkit.gguf_io.layout import check_layout

_MISSING = object()


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


class GGUFFile:
    """A GGUF file opened read-only (memmap); the input file is never modified.

    Raises:
        InputError: the file is missing, not GGUF, truncated or inconsistent (message names it).
        UnsupportedError: GGUF version other than 2/3, or big-endian.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise InputError(f"{self.path}: no such file")
        check_layout(self.path)   # bounds-checked header walk first: gguf-py trusts counts and lengths
        try:
            self._r = gguf.GGUFReader(self.path, "r")
        except Exception as e:  # gguf-py raises many kinds on malformed input
            raise InputError(f"{self.path}: not a valid GGUF file ({type(e).__name__}: {e})") from None
        size = os.path.getsize(self.path)
        self.tensors: dict[str, TensorInfo] = {}
        for t in self._r.tensors:
            if t.name in self.tensors:
                raise InputError(f"{self.path}: duplicate tensor name {t.name!r}")
            try:
                ttype = GGMLType(int(t.tensor_type))
            except ValueError:
                raise InputError(f"{self.path}: tensor {t.name!r} has unknown ggml type {int(t.tensor_type)}") from None
            info = TensorInfo(t.name, tuple(int(x) for x in t.shape), ttype, int(t.data_offset), int(t.n_bytes))
            if info.offset + info.nbytes > size:
                raise InputError(f"{self.path}: tensor {t.name!r} data [{info.offset}, {info.offset + info.nbytes}) lies beyond the end of the file ({size} bytes)")
            self.tensors[t.name] = info

    # ---- metadata -------------------------------------------------------------------
    @property
    def arch(self) -> str:
        return str(self.require(Keys.General.ARCHITECTURE))

    def keys(self) -> list[str]:
        return list(self._r.fields.keys())

    def get(self, key: str, default: Any = None) -> Any:
        """Value of ``key`` (``{arch}`` is filled in), or ``default`` when absent."""
        if "{arch}" in key:
            key = k(key, self.arch)
        f = self._r.fields.get(key)
        if f is None:
            return default
        try:
            v = f.contents()
        except Exception as e:
            raise InputError(f"{self.path}: key {key!r} is malformed ({e})") from None
        return v

    def require(self, key: str) -> Any:
        """Value of ``key``; raises InputError naming the key and file when absent."""
        v = self.get(key, _MISSING)
        if v is _MISSING:
            if "{arch}" in key:
                key = k(key, self.arch)
            raise InputError(f"{self.path}: missing key {key!r}")
        return v

    def value_type(self, key: str) -> gguf.GGUFValueType | None:
        f = self._r.fields.get(key)
        return None if f is None else gguf.GGUFValueType(f.types[0])

    def metadata(self) -> dict[str, Any]:
        """All key/values except the bulky tokenizer arrays (summarised as lengths)."""
        out: dict[str, Any] = {}
        for key, f in self._r.fields.items():
            if key.startswith("GGUF."):
                continue
            if f.types and f.types[0] == gguf.GGUFValueType.ARRAY and len(f.data) > 64:
                out[key] = f"<array of {len(f.data)}>"
            elif key == Keys.Tokenizer.HF_JSON:
                out[key] = f"<json, {len(bytes(f.parts[f.data[0]]))} bytes>"
            else:
                out[key] = self.get(key)
        return out

    # ---- tensors --------------------------------------------------------------------
    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.tensors.values())

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise InputError(f"{self.path}: missing tensor {name!r}") from None

    def raw(self, name: str) -> np.memmap:
        """The tensor's bytes as a uint8 memmap view (no copy, nothing read yet)."""
        t = self.tensor(name)
        return self._r.data[t.offset : t.offset + t.nbytes]

    def array(self, name: str) -> np.ndarray:
        """F32/F16 tensors as a numpy view in numpy order; other types as raw uint8 rows."""
        t = self.tensor(name)
        raw = self.raw(name)
        if t.type == GGMLType.F32:
            return raw.view(np.float32).reshape(t.np_shape)
        if t.type == GGMLType.F16:
            return raw.view(np.float16).reshape(t.np_shape)
        return raw

    @property
    def data_offset(self) -> int:
        return int(self._r.data_offset)

    @property
    def alignment(self) -> int:
        return int(self._r.alignment)
