"""llama.cpp importance matrices (``llama-imatrix`` GGUF output) for ``quantize --imatrix``.

File layout (llama.cpp common/imatrix-loader.cpp, build 0c1e570): keys ``imatrix.datasets``
(string array), ``imatrix.chunk_count``, ``imatrix.chunk_size``; for each weight NAME two F32
tensors ``NAME.in_sum2`` ([ne0, n_mat]: sums of squared activations per column, per expert)
and ``NAME.counts`` ([1, n_mat]: tokens seen).  The importance of a column is
``in_sum2 / lround(count)`` (1 where the count is 0), as llama-quantize computes it, in float32.
The legacy ``.dat`` format is not read.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import GGMLType, Keys
from toolkit.gguf_io.header import GGUFHeader

_SUMS, _COUNTS = ".in_sum2", ".counts"


@dataclass
class IMatrix:
    """path; data: tensor name -> float32 [n_mat * ne0] importances; datasets; chunk_count."""

    path: str
    data: dict[str, np.ndarray]
    datasets: list[str]
    chunk_count: int


def _read_f32(path: str, fd: int, t) -> np.ndarray:
    if t.type != GGMLType.F32:
        raise InputError(f"{path}: imatrix tensor {t.name!r} must be F32, got {t.type.name}")
    out = np.empty(t.nbytes // 4, np.float32)
    if os.preadv(fd, [memoryview(out).cast("B")], t.offset) != t.nbytes:
        raise InputError(f"{path}: imatrix tensor {t.name!r} is truncated")
    return out


def _looks_like_legacy_dat(head: bytes) -> bool:
    """llama-imatrix's legacy .dat starts with i32 n_entries, then per entry i32 name length
    and the tensor name (llama.cpp tools/imatrix/imatrix.cpp, save_imatrix_legacy)."""
    import struct
    if len(head) < 8:
        return False
    n, ln = struct.unpack_from("<ii", head)
    if not (0 < n < 1 << 20 and 0 < ln <= 512) or len(head) < 8 + ln:
        return False
    name = head[8:8 + ln]
    return all(0x21 <= c < 0x7F for c in name)


def load_imatrix(path: str) -> IMatrix:
    """Read an imatrix GGUF.

    Raises:
        InputError: missing, a directory, neither GGUF nor legacy .dat, missing imatrix
            metadata, unpaired or non-F32 tensors.
        UnsupportedError: a legacy .dat imatrix (not GGUF).
    """
    if not os.path.isfile(path):
        from toolkit.gguf_io.header import missing_file_message
        raise InputError(f"{missing_file_message(path)} (--imatrix)")
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if head[:4] != b"GGUF":
        if not _looks_like_legacy_dat(head):
            raise InputError(f"{path}: not an imatrix file (neither GGUF nor llama.cpp's legacy .dat)")
        raise UnsupportedError(f"{path}: not a GGUF imatrix (the legacy .dat format is not supported; "
                               f"convert it with llama-imatrix --output-format gguf)")
    h = GGUFHeader(path)
    keys = {kv.key for kv in h.kv}
    if not {Keys.IMatrix.DATASETS, Keys.IMatrix.CHUNK_COUNT, Keys.IMatrix.CHUNK_SIZE} <= keys:
        raise InputError(f"{path}: missing imatrix metadata ({Keys.IMatrix.DATASETS}, {Keys.IMatrix.CHUNK_COUNT}, "
                         f"{Keys.IMatrix.CHUNK_SIZE})")
    datasets = [d.decode("utf-8", "replace") if isinstance(d, bytes) else str(d)
                for d in (h.get(Keys.IMatrix.DATASETS) or [])]
    pairs: dict[str, list] = {}
    for t in h.tensors.values():
        for suf, i in ((_SUMS, 0), (_COUNTS, 1)):
            if t.name.endswith(suf):
                pairs.setdefault(t.name[: -len(suf)], [None, None])[i] = t
    if not pairs:
        raise InputError(f"{path}: no imatrix data")
    data: dict[str, np.ndarray] = {}
    fd = os.open(path, os.O_RDONLY)
    try:
        for name, (ts, tc) in pairs.items():
            if ts is None or tc is None:
                raise InputError(f"{path}: mismatched sums and counts for {name!r}")
            sums, counts = _read_f32(path, fd, ts), _read_f32(path, fd, tc)
            ne0 = sums.size // max(1, counts.size)
            e = np.empty_like(sums)
            for j, c in enumerate(counts):
                cnt = np.float32(np.floor(np.float64(c) + 0.5) if c >= 0 else np.ceil(np.float64(c) - 0.5))  # lround
                e[j * ne0:(j + 1) * ne0] = sums[j * ne0:(j + 1) * ne0] / cnt if cnt > 0 else np.float32(1)
            data[name] = e
    finally:
        os.close(fd)
    return IMatrix(path, data, datasets, int(h.get(Keys.IMatrix.CHUNK_COUNT) or 0))
