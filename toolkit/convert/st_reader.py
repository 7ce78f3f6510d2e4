"""A minimal safetensors reader: parse the header ourselves, read raw bytes into reused buffers.

Why not the ``safetensors`` package: its numpy backend cannot return bfloat16 (it raises on
the all-BF16 bench checkpoint), and reading through one memmap makes every touched page
count in peak RSS.  Here the data is read with ``os.preadv`` into a caller's buffer, so the
resident set stays at one band of rows.

File layout (ref: https://github.com/huggingface/safetensors, "Format"):
    8 bytes   little-endian u64 N, the header length in bytes
    N bytes   UTF-8 JSON: {name: {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
              "__metadata__": {...} (optional)}; offsets are relative to the end of the header
    rest      tensor data, row-major, little-endian
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

import numpy as np

from toolkit.errors import InputError, UnsupportedError

# safetensors dtype name -> (numpy dtype used to view the raw bytes, bytes per element).
# BF16 is viewed as uint16 (numpy has no bfloat16); the converter widens it to float32.
DTYPES: dict[str, tuple[np.dtype, int]] = {
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "F64": (np.dtype("<f8"), 8),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
    "BOOL": (np.dtype("?"), 1),
}
FLOAT_DTYPES = ("F32", "F16", "BF16")

_MAX_HEADER = 100 * 2**20   # the safetensors spec limits the header to 100 MB


@dataclass(frozen=True)
class STTensor:
    """One tensor of a safetensors file.

    name:    HF parameter name
    dtype:   safetensors dtype string ("F32", "BF16", ...)
    shape:   numpy (row-major) order
    path:    the shard file
    offset:  absolute byte offset of the data in the file
    nbytes:  bytes of data
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    path: str
    offset: int
    nbytes: int

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype][1]

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def read_header(path: str) -> dict[str, STTensor]:
    """Parse and validate the header of one safetensors file (no tensor data is read).

    Raises:
        InputError: missing file, truncated or corrupt header, offsets outside the file,
            a size that disagrees with dtype x shape, overlapping data (message names the
            file and the tensor).
    """
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InputError(f"{path}: truncated safetensors file ({size} bytes, no header length)")
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > _MAX_HEADER or 8 + n > size:
                raise InputError(f"{path}: corrupt or truncated safetensors header (header length {n}, file {size} bytes)")
            raw = f.read(n)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (a shard named in the index is missing)") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a safetensors file") from None
    try:
        hdr = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:  # RecursionError: "[[[[..." nested too deep
        raise InputError(f"{path}: corrupt safetensors header (not JSON: {e})") from None
    if not isinstance(hdr, dict):
        raise InputError(f"{path}: corrupt safetensors header (not a JSON object)")
    data_start = 8 + n
    data_size = size - data_start
    out: dict[str, STTensor] = {}
    spans = []
    for name, ent in hdr.items():
        if name == "__metadata__":
            continue
        if not isinstance(ent, dict) or not {"dtype", "shape", "data_offsets"} <= ent.keys():
            raise InputError(f"{path}: corrupt safetensors header entry for tensor {name!r}")
        dtype, shape, offs = ent["dtype"], ent["shape"], ent["data_offsets"]
        if not isinstance(dtype, str):
            raise InputError(f"{path}: corrupt safetensors header entry for tensor {name!r} (dtype {dtype!r})")
        if dtype not in DTYPES:
            raise UnsupportedError(f"{path}: tensor {name!r} has dtype {dtype!r}; supported: {', '.join(DTYPES)}")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
                or not isinstance(offs, list) or len(offs) != 2 or not all(isinstance(o, int) for o in offs)):
            raise InputError(f"{path}: corrupt safetensors header entry for tensor {name!r} (shape {shape!r}, offsets {offs!r})")
        b, e = offs
        n_el = 1
        for d in shape:
            n_el *= d
        if not (0 <= b <= e <= data_size):
            raise InputError(f"{path}: tensor {name!r} data [{b}, {e}) lies outside the file's data ({data_size} bytes; truncated file?)")
        if e - b != n_el * DTYPES[dtype][1]:
            raise InputError(f"{path}: tensor {name!r} has {e - b} bytes of data, {dtype} x {shape} needs {n_el * DTYPES[dtype][1]}")
        out[name] = STTensor(name, dtype, tuple(shape), path, data_start + b, e - b)
        spans.append((b, e, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise InputError(f"{path}: tensors {n0!r} and {n1!r} overlap in the data section")
    return out


class ShardReader:
    """Reads byte ranges of shard files into caller-provided buffers (``os.preadv``).

    One file descriptor per shard, opened on first use, closed by :meth:`close`.
    """

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def fd(self, path: str) -> int:
        """The read-only descriptor of shard ``path`` (opened once)."""
        return self._fd(path)

    def _fd(self, path: str) -> int:
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                raise InputError(f"{path}: no such file (a shard named in the index is missing)") from None
            self._fds[path] = fd
        return fd

    def read_into(self, t: STTensor, byte_start: int, out: memoryview) -> None:
        """Fill ``out`` (len(out) bytes) with tensor ``t``'s data from byte ``byte_start`` on.

        Raises:
            InputError: the file is shorter than its header says (names file and tensor).
        """
        if byte_start < 0 or byte_start + len(out) > t.nbytes:
            raise ValueError(f"read of [{byte_start}, {byte_start + len(out)}) outside tensor {t.name!r} ({t.nbytes} bytes)")
        fd = self._fd(t.path)
        pos = t.offset + byte_start
        done = 0
        while done < len(out):
            if hasattr(os, "preadv"):
                got = os.preadv(fd, [out[done:]], pos + done)
            else:  # pragma: no cover - non-Linux fallback
                os.lseek(fd, pos + done, os.SEEK_SET)
                got = os.readv(fd, [out[done:]])
            if got == 0:
                raise InputError(f"{t.path}: tensor {t.name!r} is truncated (file ends at byte {pos + done})")
            done += got

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> "ShardReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
