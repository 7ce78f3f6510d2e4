"""Row-band driver: GGUF in -> GGUF out with llama-quantize's per-tensor types, bounded memory.

For each tensor, in llama.cpp's order (:func:`~toolkit.quantize.rules.llama_tensor_order`):
a band of whole rows is read from the input with ``os.preadv`` into a reused buffer,
dequantized to float32 (any source type quants.c reads) and quantized to the target type in
C (``n_threads`` pthreads), then appended to the output through ``GGUFStreamWriter``; sizes
are exact and declared up front.  A band holds at most ``band_mb`` MiB in all (the source rows
and two output slots: one being written on a background thread while the next band is
computed); C converts row by row through a one-row float32 scratch per thread, so no band of
float32 is ever staged, and peak memory does not depend on the largest tensor.
Rows are independent, so the band size never changes a byte of the output.

Metadata: every key of the input is copied in order, then ``general.quantization_version``
(2, GGML_QNT_VERSION) and ``general.file_type`` (the llama_ftype) are written last, as
llama-quantize does (it removes and re-appends them).
"""
from __future__ import annotations

import errno
import logging
import math
import os
import resource
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import gguf
import numpy as np

from toolkit.binding import rows
from toolkit.errors import InputError, ResourceError
from toolkit.gguf_io import GGMLType, GGUFStreamWriter, Keys, atomic_output, row_nbytes
from toolkit.gguf_io.constants import type_size
from toolkit.gguf_io.header import GGUFHeader
from toolkit.quantize.imatrix import IMatrix, load_imatrix
from toolkit.quantize.rules import ModelInfo, Options, TypeChooser, llama_tensor_order, n_dims
from toolkit.quantize.types import QUANTIZED, FileTypeInfo, file_type, require_supported_source
from toolkit.gguf_io.validate import first_invalid

log = logging.getLogger(__name__)

_FLOAT_TYPES = (GGMLType.F32, GGMLType.F16, GGMLType.BF16)

GGML_QNT_VERSION = 2   # ggml.h: the k-quant/legacy block formats' version (general.quantization_version)


@dataclass
class TensorPlan:
    """One tensor of the output.

    shape:     ggml order (ne0 = row width first)
    src_type / dst_type: ggml types; equal -> bytes are copied unchanged
    src_bytes / dst_bytes: exact data sizes in bytes
    """

    name: str
    shape: tuple[int, ...]
    src_type: GGMLType
    dst_type: GGMLType
    src_bytes: int
    dst_bytes: int
    offset: int
    fallback: str | None = None
    imatrix: np.ndarray | None = None   # float32 [n_mat * ne0] column importances, or None

    @property
    def n_per_row(self) -> int:
        return int(self.shape[0]) if self.shape else 1

    @property
    def n_rows(self) -> int:
        n = 1
        for d in self.shape[1:]:
            n *= int(d)
        return n

    @property
    def n_elements(self) -> int:
        return self.n_per_row * self.n_rows


@dataclass
class QuantPlan:
    """The whole job: file type, per-tensor plan (in output order) and warnings."""

    input: str
    arch: str
    ftype: FileTypeInfo
    tensors: list[TensorPlan]
    warnings: list[str] = field(default_factory=list)

    @property
    def src_bytes(self) -> int:
        return sum(t.src_bytes for t in self.tensors)

    @property
    def dst_bytes(self) -> int:
        return sum(t.dst_bytes for t in self.tensors)

    @property
    def n_elements(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    def to_dict(self) -> dict:
        n = max(1, self.n_elements)
        return {
            "input": self.input, "architecture": self.arch, "file_type": self.ftype.name,
            "file_type_id": int(self.ftype.ftype),
            "size_before": self.src_bytes, "size_after": self.dst_bytes,
            "bpw_before": self.src_bytes * 8 / n, "bpw_after": self.dst_bytes * 8 / n,
            "warnings": self.warnings,
            "tensors": [{"name": t.name, "shape": list(t.shape), "type_before": t.src_type.name,
                         "type_after": t.dst_type.name, "bytes_before": t.src_bytes, "bytes_after": t.dst_bytes,
                         "imatrix": t.imatrix is not None}
                        for t in self.tensors],
        }


def _first(v, default: int = 0) -> int:
    if v is None:
        return default
    if isinstance(v, (list, tuple, np.ndarray)):
        return int(v[0]) if len(v) else default
    return int(v)


def model_info(f: GGUFHeader) -> ModelInfo:
    """The hparams the mixture rules read (block_count, expert_count, n_gqa of layer 0)."""
    arch = f.arch
    n_layer = f.require(Keys.LLM.BLOCK_COUNT)
    n_head = _first(f.get(Keys.Attention.HEAD_COUNT))
    n_head_kv = _first(f.get(Keys.Attention.HEAD_COUNT_KV), n_head)
    return ModelInfo(arch=arch, n_layer=int(n_layer), n_expert=_first(f.get(Keys.LLM.EXPERT_COUNT)),
                     n_gqa=(n_head // n_head_kv) if n_head_kv else 0)


def make_plan(f: GGUFHeader, ftype_name: str, opts: Options | None = None, allow_requantize: bool = False,
              imatrix: IMatrix | None = None) -> QuantPlan:
    """Choose every tensor's output type the way llama-quantize would (and attach each
    converted tensor's imatrix row when one is given).

    Raises:
        InputError: unknown type name; a quantized input without ``allow_requantize``; an
        imatrix entry whose size is not ne0 * n_expert (token embeddings excepted, as llama.cpp).
        UnsupportedError: a tensor to convert has a source type quants.c cannot read.
    """
    ft = file_type(ftype_name)
    opts = opts or Options()
    names = llama_tensor_order(f.tensors)
    chooser = TypeChooser(model_info(f), ft.ftype, ft.default, opts, names, has_imatrix=imatrix is not None)
    plan = QuantPlan(f.path, f.arch, ft, [])
    for name in names:
        ti = f.tensors[name]
        c = chooser.choose(name, ti.shape, ti.type)
        dst = c.type
        if dst != ti.type:
            require_supported_source(ti.type, name, f.path)
            if ti.type in QUANTIZED and not allow_requantize:
                raise InputError(f"{f.path}: tensor {name!r} is already quantized ({ti.type.name}); requantizing "
                                 f"to {dst.name} loses accuracy and is disabled: pass --allow-requantize")
        if c.fallback:
            plan.warnings.append(c.fallback)
        n_rows = 1
        for d in ti.shape[1:]:
            n_rows *= int(d)
        dst_bytes = ti.nbytes if dst == ti.type else n_rows * row_nbytes(dst, int(ti.shape[0]))
        qw = None
        if imatrix is not None and dst != ti.type:
            qw = imatrix.data.get(name)
            if qw is None:
                log.info("%s: no imatrix entry for this tensor", name)
            else:
                want = int(ti.shape[0]) * (int(ti.shape[2]) if len(ti.shape) > 2 else 1)
                if qw.size != want:
                    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
                        qw = None  # llama.cpp ignores a mismatched token-embedding entry
                    else:
                        raise InputError(f"{imatrix.path}: imatrix entry of {name!r} has {qw.size} values, "
                                         f"the tensor needs {want}")
        plan.tensors.append(TensorPlan(name, tuple(ti.shape), ti.type, dst, ti.nbytes, dst_bytes, ti.offset,
                                       c.fallback, qw))
    for pat, hits in chooser.pattern_hits.items():
        if hits == 0:
            plan.warnings.append(f"--tensor-type {pat!r} matched no quantizable tensor")
    return plan


@dataclass
class Summary:
    plan: QuantPlan
    output: str
    wall_s: float
    peak_rss_mb: float
    band_mb: float
    n_threads: int

    def to_dict(self) -> dict:
        d = self.plan.to_dict()
        d.update(output=self.output, wall_s=self.wall_s, peak_rss_mb=self.peak_rss_mb, band_mb=self.band_mb,
                 threads=self.n_threads)
        return d


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB: VmHWM from /proc/self/status on Linux
    (ru_maxrss would also count the pre-exec image of the parent that forked us), else ru_maxrss."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _copy_metadata(src: GGUFHeader, w: GGUFStreamWriter, ftype: int, imatrix: IMatrix | None = None) -> None:
    """Copy every key/value of ``src`` with its exact value type, then the two keys llama-quantize sets."""
    skip = {Keys.General.ARCHITECTURE, Keys.General.QUANTIZATION_VERSION, Keys.General.FILE_TYPE,
            gguf.Keys.Split.LLM_KV_SPLIT_NO, gguf.Keys.Split.LLM_KV_SPLIT_COUNT, gguf.Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT}
    for kv in src.kv:
        if kv.key in skip:
            continue
        if kv.type == gguf.GGUFValueType.ARRAY and not kv.value:
            raise InputError(f"{src.path}: key {kv.key!r} is an empty array (not supported by the GGUF writer)")
        w.kv.add_key_value(kv.key, kv.value, kv.type, sub_type=kv.sub_type)
        if kv.key == Keys.General.ALIGNMENT:
            w.kv.data_alignment = int(kv.value)
    w.kv.add_uint32(Keys.General.QUANTIZATION_VERSION, GGML_QNT_VERSION)
    w.kv.add_uint32(Keys.General.FILE_TYPE, ftype)
    if imatrix is not None:
        # llama-quantize's kv overrides: strings cut at 127 bytes, integers written as u32
        w.kv.add_string(Keys.Quantize.IMATRIX_FILE, imatrix.path.encode()[:127].decode("utf-8", "ignore"))
        if imatrix.datasets:
            w.kv.add_string(Keys.Quantize.IMATRIX_DATASET, imatrix.datasets[0].encode()[:127].decode("utf-8", "ignore"))
        w.kv.add_uint32(Keys.Quantize.IMATRIX_N_ENTRIES, len(imatrix.data))
        if imatrix.chunk_count > 0:
            w.kv.add_uint32(Keys.Quantize.IMATRIX_N_CHUNKS, imatrix.chunk_count)


class _Buffers:
    """Reused band buffers, grown on demand (np.empty: pages are touched only when used)."""

    def __init__(self):
        self._b: dict[str, np.ndarray] = {}

    def get(self, key: str, n: int, dtype) -> np.ndarray:
        b = self._b.get(key)
        if b is None or b.size < n:
            self._b.pop(key, None)
            b = np.empty(max(n, 1), dtype)
            self._b[key] = b
        return b[:n]


def _pread_into(fd: int, buf, offset: int, path: str) -> None:
    mv = memoryview(buf).cast("B")
    done = 0
    while done < len(mv):
        n = os.preadv(fd, [mv[done:]], offset + done)
        if n <= 0:
            raise InputError(f"{path}: unexpected end of file at byte {offset + done}")
        done += n


ProgressFn = Callable[[int, int, str], None]


def quantize_file(in_path: str, out_path: str, ftype_name: str, opts: Options | None = None, *,
                  n_threads: int | None = None, band_mb: float = 256.0, allow_requantize: bool = False,
                  dry_run: bool = False, progress: ProgressFn | None = None, imatrix: str | None = None) -> Summary:
    """Quantize GGUF ``in_path`` to ``out_path`` with file type ``ftype_name`` (``"Q4_K_M"``).

    n_threads: C threads per band (default: all CPUs).  band_mb: MiB staged per band (source
    rows + output slots).  progress(done_elements, total_elements, tensor_name) is called after each band.

    Raises:
        InputError: unknown type, not GGUF / truncated input, OUT is IN, requantize refused.
        UnsupportedError: a source tensor type that cannot be read.
        ResourceError: disk full.
    """
    t0 = time.perf_counter()
    if not (isinstance(band_mb, (int, float)) and math.isfinite(band_mb) and 0 < band_mb <= 2**20):
        raise InputError(f"--band-mb {band_mb}: must be a number of MiB in (0, 1048576]")
    if n_threads is not None and not 0 <= n_threads <= 256:   # context.c's bound, like run -t
        raise InputError(f"--threads {n_threads}: must be in [1, 256] (0 = all CPUs)")
    if not dry_run and os.path.abspath(in_path) == os.path.abspath(out_path):
        raise InputError(f"{out_path}: output would overwrite the input")
    if not n_threads:
        from toolkit.binding.cpu import default_threads   # TOOLKIT_THREADS, else the CPUs
        n_threads = default_threads()
    n_threads = int(n_threads)
    f = GGUFHeader(in_path)
    im = load_imatrix(imatrix) if imatrix else None
    plan = make_plan(f, ftype_name, opts, allow_requantize, im)
    for msg in plan.warnings:
        log.warning("%s", msg)
    if dry_run:
        return Summary(plan, "", time.perf_counter() - t0, peak_rss_mb(), band_mb, n_threads)

    band_bytes = int(band_mb * 2**20)
    total = sum(t.n_elements for t in plan.tensors)
    done = 0
    bufs = _Buffers()
    fd = os.open(in_path, os.O_RDONLY)
    try:
        with atomic_output(out_path, inputs=(in_path,) + ((imatrix,) if imatrix else ())) as tmp:
            w = GGUFStreamWriter(tmp, f.arch)
            out = _Writer(w)
            try:
                _copy_metadata(f, w, int(plan.ftype.ftype), im)
                for t in plan.tensors:
                    # llama-quantize writes ggml_n_dims dims: trailing 1s dropped ([512, 1] -> [512])
                    w.add_tensor(t.name, tuple(reversed(t.shape[:n_dims(t.shape)])), t.dst_type)
                w.begin_data()
                for t in plan.tensors:
                    if t.src_type == t.dst_type:
                        _copy_tensor(fd, in_path, out, t, bufs, band_bytes)
                    else:
                        _convert_tensor(fd, in_path, out, t, bufs, band_bytes, n_threads,
                                        lambda n, name=t.name: progress(done + n, total, name) if progress else None)
                    done += t.n_elements
                    if progress:
                        progress(done, total, t.name)
                out.drain()
                w.close()
            except BaseException:
                out.drain(raise_errors=False)
                w.abort()
                raise
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENOMEM):   # EFBIG: file size limit (RLIMIT_FSIZE, FS max)
            raise ResourceError(f"{out_path}: {e.strerror or e}") from None
        raise InputError(f"{e.filename or out_path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    return Summary(plan, out_path, time.perf_counter() - t0, peak_rss_mb(), band_mb, n_threads)


class _Writer:
    """Writes bands on one background thread while the next band is computed.

    Two output slots alternate: a slot is reused only after its previous write finished, so at
    most two output bands exist at a time.  Errors surface on the next call or at drain().
    """

    def __init__(self, w: GGUFStreamWriter):
        self.w = w
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gguf-write")
        self.pending: list[Future] = []
        self.slot = 0

    def next_slot(self) -> str:
        """Name of the output buffer to fill next (waits until its last write is done)."""
        self.slot ^= 1
        if len(self.pending) >= 2:
            self.pending.pop(0).result()
        return f"out{self.slot}"

    def write(self, name: str, buf) -> None:
        self.pending.append(self.pool.submit(self.w.write, name, buf))

    def drain(self, raise_errors: bool = True) -> None:
        try:
            for fut in self.pending:
                fut.result() if raise_errors else fut.exception()
        finally:
            self.pending.clear()
            self.pool.shutdown(wait=True)


def _copy_tensor(fd: int, path: str, out: _Writer, t: TensorPlan, bufs: _Buffers, band_bytes: int) -> None:
    """Unchanged type: copy the bytes in slabs of whole rows."""
    row = t.src_bytes // max(1, t.n_rows)
    slab = max(row, (band_bytes // 2 // max(1, row)) * row) if row else t.src_bytes
    off = 0
    while off < t.src_bytes:
        n = min(slab, t.src_bytes - off)
        buf = bufs.get(out.next_slot(), n, np.uint8)
        _pread_into(fd, buf, t.offset + off, path)
        out.write(t.name, buf)
        off += n


def band_rows(src_row: int, dst_row: int, n_rows: int, band_bytes: int) -> int:
    """Rows per band so that the source rows and two output slots fit in band_bytes (at least
    one row).  No float32 band exists: C converts each row through a one-row scratch."""
    return max(1, min(n_rows, band_bytes // (src_row + 2 * dst_row)))


def _convert_tensor(fd: int, path: str, out: _Writer, t: TensorPlan, bufs: _Buffers, band_bytes: int,
                    n_threads: int, on_band: Callable[[int], None]) -> None:
    """Dequantize (if needed) and quantize one tensor, a band of whole rows at a time."""
    n_per_row, n_rows = t.n_per_row, t.n_rows
    src_row = row_nbytes(t.src_type, n_per_row)
    dst_row = row_nbytes(t.dst_type, n_per_row)
    rows_per_band = band_rows(src_row, dst_row, n_rows, band_bytes)
    ne0, rows_per_mat = n_per_row, (int(t.shape[1]) if len(t.shape) > 1 else 1)
    r0 = 0
    while r0 < n_rows:
        nr = min(rows_per_band, n_rows - r0)
        qw = None
        if t.imatrix is not None:
            # a band never crosses an expert boundary: each expert has its own imatrix slice
            nr = min(nr, rows_per_mat - r0 % rows_per_mat)
            e = r0 // rows_per_mat
            qw = t.imatrix[e * ne0:(e + 1) * ne0]
        raw = bufs.get("raw", nr * src_row, np.uint8)
        _pread_into(fd, raw, t.offset + r0 * src_row, path)
        q = bufs.get(out.next_slot(), nr * dst_row, np.uint8)
        rows.convert_rows(t.src_type, raw, t.dst_type, q, nr, n_per_row, n_threads, imatrix=qw)
        bad = first_invalid(t.dst_type, q)
        if bad is not None:      # llama-quantize: "quantized data validation failed"
            n_el = n_per_row // type_size(t.dst_type)[0]          # elements or blocks per row
            row = r0 + bad[0] // n_el
            raise InputError(f"{path}: tensor {t.name!r}: row {row} quantized to {GGMLType(t.dst_type).name} has "
                             f"{'an inf' if bad[1] == 'inf' else 'a NaN'} {'value' if t.dst_type in _FLOAT_TYPES else 'scale'} "
                             f"(the input holds inf or NaN; "
                             f"llama-quantize refuses it too: quantized data validation failed)")
        out.write(t.name, q)
        r0 += nr
        on_band(r0 * n_per_row)
