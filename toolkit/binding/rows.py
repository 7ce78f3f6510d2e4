"""The row codec, the Python side of native/quants/quants.c: quantize, dequantize and convert whole
rows of ggml types through cffi.

Types are ggml type ids (``int`` or :class:`toolkit.gguf_io.GGMLType`).  Buffers are numpy
arrays (or any buffer; destinations writable); nothing is copied on the way in or out.  The C
calls release the GIL and run ``n_threads`` pthreads over contiguous runs of rows.
"""
from __future__ import annotations

import numpy as np

from toolkit.binding import check, ffi, lib


def row_size(ggml_type: int, n_per_row: int) -> int:
    """Bytes of one row of ``n_per_row`` elements of ``ggml_type``.

    Raises:
        ValueError: the type is not handled by quants.c, or the width is not a block multiple.
    """
    n = int(lib.tk_quant_row_size(int(ggml_type), int(n_per_row)))
    if n < 0:
        raise ValueError(f"ggml type {int(ggml_type)}: no row size for width {n_per_row}")
    return n


def quantize_rows(ggml_type: int, src: np.ndarray, dst, n_rows: int, n_per_row: int, n_threads: int = 1) -> None:
    """src: float32 [n_rows * n_per_row] (C order) -> dst: n_rows * row_size bytes of ``ggml_type``.

    Raises:
        NativeError / UnsupportedError: bad shape or type (message from tk_last_error).
    """
    assert src.dtype == np.float32 and src.flags.c_contiguous and src.size >= n_rows * n_per_row
    check(lib.tk_quantize_rows(int(ggml_type), ffi.cast("float *", ffi.from_buffer(src)), ffi.from_buffer(dst),
                               int(n_rows), int(n_per_row), int(n_threads)), "quantize")


def dequantize_rows(ggml_type: int, src, dst: np.ndarray, n_rows: int, n_per_row: int, n_threads: int = 1) -> None:
    """src: n_rows rows of ``ggml_type`` (n_rows * row_size bytes) -> dst: float32
    [n_rows * n_per_row] (C order, writable).

    Raises:
        NativeError / UnsupportedError: bad shape or type (message from tk_last_error).
    """
    assert dst.dtype == np.float32 and dst.flags.c_contiguous and dst.size >= n_rows * n_per_row
    check(lib.tk_dequantize_rows(int(ggml_type), ffi.from_buffer(src), ffi.cast("float *", ffi.from_buffer(dst, require_writable=True)),
                                 int(n_rows), int(n_per_row), int(n_threads)), "dequantize")


def convert_rows(src_type: int, src, dst_type: int, dst, n_rows: int, n_per_row: int, n_threads: int = 1,
                 imatrix: np.ndarray | None = None) -> None:
    """src: n_rows rows of ``src_type`` -> dst: n_rows rows of ``dst_type`` (writable), each row
    through a one-row float32 scratch in C (same bytes as dequantize_rows then quantize_rows).
    imatrix: float32 [n_per_row] column importances (llama.cpp imatrix / counts), or None.

    Raises:
        NativeError / UnsupportedError: bad shape or type pair (message from tk_last_error).
    """
    qw = ffi.NULL
    if imatrix is not None:
        assert imatrix.dtype == np.float32 and imatrix.size == n_per_row and imatrix.flags.c_contiguous
        qw = ffi.cast("float *", ffi.from_buffer(imatrix))
    check(lib.tk_convert_rows_imatrix(int(src_type), ffi.from_buffer(src), int(dst_type),
                                      ffi.from_buffer(dst, require_writable=True), int(n_rows), int(n_per_row), qw,
                                      int(n_threads)), "convert")


def quantize(ggml_type: int, x: np.ndarray, n_threads: int = 1) -> np.ndarray:
    """x: float32-convertible [..., n_per_row] (last axis = row) -> uint8 [n_rows * row_size]
    of ggml blocks.

    Raises:
        ValueError: the width is not a block multiple of ``ggml_type``.
        NativeError / UnsupportedError: the type cannot be quantized.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    n_per_row = x.shape[-1]
    n_rows = x.size // n_per_row
    out = np.empty(n_rows * row_size(ggml_type, n_per_row), np.uint8)
    quantize_rows(ggml_type, x.reshape(-1), out, n_rows, n_per_row, n_threads)
    return out


def dequantize(ggml_type: int, data, n_per_row: int, n_threads: int = 1) -> np.ndarray:
    """data: raw bytes of whole rows of ``ggml_type`` -> float32 [n_rows, n_per_row].

    Raises:
        ValueError: no row size for the width, or ``data`` is not a whole number of rows.
        NativeError / UnsupportedError: the type cannot be dequantized.
    """
    buf = np.frombuffer(data, np.uint8)
    rs = row_size(ggml_type, n_per_row)
    if buf.size % rs:
        raise ValueError(f"{buf.size} bytes is not a whole number of rows of {rs} bytes")
    n_rows = buf.size // rs
    out = np.empty((n_rows, n_per_row), np.float32)
    dequantize_rows(ggml_type, buf, out.reshape(-1), n_rows, n_per_row, n_threads)
    return out
