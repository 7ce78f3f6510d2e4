"""Read GGUF files without loading tensor data (memmap), with errors that name the file and key.

The header is parsed and checked by :class:`toolkit.gguf_io.header.GGUFHeader` (the one GGUF
header parser of the toolkit); :class:`GGUFFile` adds a read-only memmap of the tensor data.

Shapes are reported in **ggml order** (``ne``: fastest-varying dimension first), as
``gguf-py`` and llama.cpp print them.  ``TensorInfo.np_shape`` is the numpy (row-major) order.
"""
from __future__ import annotations

import os
from typing import Any, Iterator

import numpy as np

from toolkit.errors import InputError
from toolkit.gguf_io.constants import GGMLType, Keys
from toolkit.gguf_io.header import VT, GGUFHeader, TensorInfo

__all__ = ["GGUFFile", "TensorInfo"]


class GGUFFile(GGUFHeader):
    """A GGUF file opened read-only (memmap); the input file is never modified.

    Metadata access (``get``/``require``/``keys``/``value_type``/``arch``), ``tensors``,
    ``alignment`` and ``data_offset`` come from :class:`GGUFHeader`.

    Raises:
        InputError: the file is missing, not GGUF, truncated or inconsistent (message names it).
        UnsupportedError: GGUF version other than 2/3, or big-endian.
    """

    def __init__(self, path: str | os.PathLike[str]):
        super().__init__(path)
        self._data = np.memmap(self.path, dtype=np.uint8, mode="r")

    def metadata(self) -> dict[str, Any]:
        """All key/values except the bulky arrays (more than 64 elements, summarised as
        ``"<array of N>"``) and the tokenizer's HF JSON (``"<json, N bytes>"``)."""
        out: dict[str, Any] = {}
        for kv in self.kv:
            n = self.array_len(kv.key)
            if n is not None and n > 64:
                out[kv.key] = f"<array of {n}>"
            elif kv.key == Keys.Tokenizer.HF_JSON and kv.type == VT.STRING:
                out[kv.key] = f"<json, {self.string_nbytes(kv.key)} bytes>"
            else:
                out[kv.key] = self.get(kv.key)
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
        return self._data[t.offset : t.offset + t.nbytes]

    def array(self, name: str) -> np.ndarray:
        """F32/F16 tensors as a numpy view in numpy order; other types as raw uint8 rows."""
        t = self.tensor(name)
        raw = self.raw(name)
        if t.type == GGMLType.F32:
            return raw.view(np.float32).reshape(t.np_shape)
        if t.type == GGMLType.F16:
            return raw.view(np.float16).reshape(t.np_shape)
        return raw
