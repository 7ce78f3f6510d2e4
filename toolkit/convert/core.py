"""``convert``: plan from headers, then stream every output tensor band by band into the GGUF.

Memory: one band of rows is resident at a time (source bytes read with ``os.preadv`` into
one reused buffer, plus the band's converted copy), so peak memory does not grow with the
model.  Output goes through :func:`toolkit.gguf_io.atomic_output`: on any error nothing is
left at OUT.
"""
from __future__ import annotations

import errno
import logging
import os
import resource
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from toolkit.convert.encode import PASSTHROUGH, encode, widen
from toolkit.convert.families import REGISTRY, supported
from toolkit.convert.hfdir import HFDir
from toolkit.convert.plan import OutTensor, Plan, kv_str
from toolkit.convert.st_reader import DTYPES, ShardReader
from toolkit.convert.tokenizer import tokenizer_kv
from toolkit.errors import InputError, ResourceError, UnsupportedError
from toolkit.gguf_io import GGMLType, GGUFStreamWriter, Keys, atomic_output, row_nbytes, tensor_nbytes

log = logging.getLogger(__name__)

# Elements per band (rows are grouped up to this many elements): 4 Mi elements is 16 MiB of
# float32 working copy, small against the 250 MB budget and large enough that per-band
# overhead vanishes.
BAND_ELEMENTS = 4 * 2**20


def make_plan(hf_dir: str, outtype: str = "f32", no_mtp: bool = False) -> Plan:
    """The full plan (key/values incl. tokenizer, tensors with types) from headers only.

    no_mtp: leave out an MTP / NextN draft head (``mtp.*``: qwen3next, qwen35, qwen35moe; the
        layers after the main ones: glm5-next, bailingmoe3).

    Raises:
        InputError: anything wrong with the directory (names the file, key or tensor).
        UnsupportedError: an architecture not in the registry (lists the supported ones, exit
            3 like every "valid input this version does not handle"), or a known architecture
            with a feature this version does not handle.
    """
    hf = HFDir(hf_dir)
    fam_cls = REGISTRY.get(hf.arch_name)
    if fam_cls is None:
        # a valid checkpoint of an architecture this version does not handle: exit 3
        from toolkit.convert.families import closest
        near = closest(str(hf.arch_name))
        hint = f" (did you mean {near}?)" if near else ""
        raise UnsupportedError(f"{hf.config.path}: architecture {hf.arch_name!r} is not supported{hint}; "
                               f"supported: {', '.join(supported())} (toolkit convert --list-archs)")
    fam = fam_cls(hf, outtype)
    fam.no_mtp = no_mtp
    plan = fam.build()
    name = os.path.basename(os.path.normpath(hf.path)) or "model"
    plan.kv = [kv_str(Keys.General.NAME, name)] + plan.kv + fam.general_kv()
    plan.kv += tokenizer_kv(hf, fam.n_vocab_rows(), plan.warnings)
    plan.outtype = fam.outtype
    plan.outtype_reason = fam.outtype_reason
    plan.no_mtp = no_mtp
    plan.hf_path = hf.path
    return plan


def plan_to_dict(plan: Plan) -> dict:
    """The plan as plain data (``--dry-run --json``)."""
    return {
        "architecture": plan.arch,
        "hf_architecture": plan.hf_arch,
        "outtype": plan.outtype,
        "outtype_reason": plan.outtype_reason,
        "kv": {kv.key: kv.display() for kv in plan.kv},
        "tensors": [{"name": t.name, "shape": list(reversed(t.shape)), "type": t.type.name,
                     "bytes": tensor_nbytes(t.shape, t.type), "sources": t.sources, "transform": t.note}
                    for t in plan.tensors],
        "omitted": [{"name": n, "why": w} for n, w in plan.omitted],
        "warnings": list(plan.warnings),
        "n_tensors": len(plan.tensors),
        "n_bytes": sum(tensor_nbytes(t.shape, t.type) for t in plan.tensors),
    }


@dataclass
class Summary:
    out: str
    arch: str
    outtype: str
    outtype_reason: str    # how ``auto`` (the default) chose, "" when --outtype named the type
    n_tensors: int
    n_bytes: int           # bytes of tensor data written
    file_bytes: int        # size of the GGUF file
    wall_s: float
    peak_rss_bytes: int    # ru_maxrss of this process
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # Linux: KiB


# Rows converted to F16 / BF16 / Q8_0 go through the C row converter (native/quants/quants.c, bit-exact
# ports of ggml's reference rounding, the same bytes as gguf-py's numpy quantizers; a test
# holds the two paths equal).  Without the built library, or with USE_NATIVE = False, numpy.
USE_NATIVE = True
_NATIVE_OUT = (GGMLType.F16, GGMLType.BF16, GGMLType.Q8_0)
_GGML_OF = {"F32": GGMLType.F32, "F16": GGMLType.F16, "BF16": GGMLType.BF16}
_native_mod = None


def _native():
    """toolkit.binding.rows, or None when the C library is not available."""
    global _native_mod
    if _native_mod is None:
        try:
            from toolkit.binding import rows as mod
            mod.row_size(int(GGMLType.Q8_0), 32)
            _native_mod = mod
        except Exception as e:   # not built, or an old build: numpy does the same job
            log.debug("native row converter unavailable (%s); using numpy", e)
            _native_mod = False
    return _native_mod or None


class _Buffer:
    """One growable byte buffer reused for every band read."""

    def __init__(self) -> None:
        self.buf = bytearray(0)

    def view(self, n: int) -> memoryview:
        if len(self.buf) < n:
            self.buf = bytearray(max(n, len(self.buf) * 5 // 4))
        return memoryview(self.buf)[:n]


class F16Overflow(InputError):
    """A value beyond F16's range (or inf/NaN) in a tensor converted to F16."""


# outputs whose range is narrower than the checkpoint's: a value beyond F16's 65504 becomes inf
_RANGE_CHECKED = (GGMLType.F16, GGMLType.Q8_0)


def _check_finite(t: OutTensor, src, data, r0: int, row_len: int) -> None:
    """InputError naming the tensor and row when a converted band holds inf/NaN (an F16 value,
    a Q8_0 block scale: ggml_validate_row_data's rule, as quantize applies it)."""
    from toolkit.gguf_io.validate import first_invalid
    bad = first_invalid(t.type, memoryview(data).cast("B"))
    if bad is not None:
        per_row = row_len // (32 if t.type == GGMLType.Q8_0 else 1)
        where = f"tensor {src.name!r} ({t.name}), row {r0 + bad[0] // per_row}: {bad[1]}"
        e = (F16Overflow if t.type == GGMLType.F16 else InputError)(
            f"{src.path}: {where} after conversion to {t.type.name} (a value beyond F16's range +-65504, or "
            f"inf/NaN in the checkpoint); use --outtype bf16 or f32")
        e.where = where
        raise e


def _write_transposed(w: GGUFStreamWriter, rd: ShardReader, buf: _Buffer, t: OutTensor, seg, np_dtype, isz: int,
                      progress: Callable[[int], None] | None) -> None:
    """A Segment with ``tblock`` (a, b): from source row ``row0`` (rows of b elements), each a x b
    block is written as b rows of a (= the output's row length)."""
    a, b = seg.tblock
    for blk in range(seg.n_rows // b):
        mv = buf.view(a * b * isz)
        rd.read_into(seg.src, (seg.row0 * b + blk * a * b) * isz, mv)
        raw = np.ascontiguousarray(np.frombuffer(mv, dtype=np_dtype).reshape(a, b).T)
        data = encode(raw, seg.src.dtype, t.type, t.op)
        if t.type in _RANGE_CHECKED:
            _check_finite(t, seg.src, data, blk * b, a)
        w.write(t.name, data)
        if progress:
            progress(len(memoryview(data).cast("B")))


def _write_tensor(w: GGUFStreamWriter, rd: ShardReader, buf: _Buffer, obuf: _Buffer, t: OutTensor,
                  progress: Callable[[int], None] | None) -> None:
    row_len = t.row_len
    nat = _native() if (USE_NATIVE and t.type in _NATIVE_OUT and t.op is None) else None
    out_row = row_nbytes(t.type, row_len)
    for seg in t.segments:
        src = seg.src
        np_dtype, isz = DTYPES[src.dtype]
        row_bytes = row_len * isz
        if (seg.perm is None and t.op is None and t.col_perm is None and not seg.scales and seg.tblock is None
                and seg.col_scales is None
                and (src.dtype, t.type) in PASSTHROUGH):
            # the bytes are already what GGUF wants: copy them inside the kernel, no band in memory
            n = seg.n_rows * row_bytes
            try:
                w.copy_from(t.name, rd.fd(src.path), src.offset + seg.row0 * row_bytes, n)
            except EOFError:
                raise InputError(f"{src.path}: tensor {src.name!r} is truncated") from None
            if progress:
                progress(n)
            continue
        if seg.tblock is not None:   # a x b blocks written transposed, one block at a time
            _write_transposed(w, rd, buf, t, seg, np_dtype, isz, progress)
            continue
        step = max(1, BAND_ELEMENTS // max(row_len, 1))
        if seg.perm is not None and seg.block > 1:
            step = max(seg.block, step // seg.block * seg.block)   # never split a permutation block
        for r0 in range(0, seg.n_rows, step):
            r1 = min(seg.n_rows, r0 + step)
            mv = buf.view((r1 - r0) * row_bytes)
            rd.read_into(src, (seg.row0 + r0) * row_bytes, mv)
            raw = np.frombuffer(mv, dtype=np_dtype).reshape(r1 - r0, row_len)
            if seg.perm is not None:
                raw = raw[seg.perm[r0:r1] - r0]
            if t.col_perm is not None:
                raw = raw[:, t.col_perm]
            dtype = src.dtype
            if seg.scales:         # folded multipliers: float32 products, then encoded as from F32
                raw, dtype = widen(raw, dtype).astype(np.float32), "F32"
                for f in seg.scales:
                    raw = raw * np.float32(f)
            if seg.col_scales is not None:   # per column: float32 products
                raw, dtype = widen(raw, dtype).astype(np.float32) * seg.col_scales.astype(np.float32), "F32"
            if nat is not None:
                data = obuf.view((r1 - r0) * out_row)
                nat.convert_rows(int(_GGML_OF[dtype]), np.ascontiguousarray(raw), int(t.type), data,
                                 r1 - r0, row_len, os.cpu_count() or 1)
            else:
                data = encode(raw, dtype, t.type, t.op)
            if t.type in _RANGE_CHECKED:
                _check_finite(t, src, data, r0, row_len)
            w.write(t.name, data)
            if progress:
                progress(len(memoryview(data).cast("B")))


def convert(hf_dir: str, out: str | None, outtype: str = "f32",
            progress_factory: Callable[[int], Callable[[int], None]] | None = None,
            plan: Plan | None = None, no_mtp: bool = False) -> Summary:
    """Convert the checkpoint at ``hf_dir`` into the GGUF file ``out`` (None or a directory:
    llama.cpp's default name, see :func:`out_path`; ``Summary.out`` says where it went).

    ``auto`` (see :meth:`Family._resolve_outtype`) that picked f16: a value that F16 cannot
    hold restarts the conversion in bf16 (``Summary.outtype_reason`` says so).

    progress_factory(total_bytes) returns a callback called with the bytes of each band written.
    no_mtp: as :func:`make_plan` (used only when ``plan`` is None).

    Raises:
        InputError / UnsupportedError: see :func:`make_plan`; a shard shorter than its header.
        ResourceError: not enough disk space (checked first, and on ENOSPC/EDQUOT/EFBIG).
        Nothing is left at ``out`` on any error.
    """
    t0 = time.perf_counter()
    if plan is None:
        plan = make_plan(hf_dir, outtype, no_mtp)
    dest = out_path(plan, out)
    try:
        _convert(plan, dest, progress_factory)
    except F16Overflow as e:
        if not (plan.outtype == "f16" and plan.outtype_reason.startswith("auto")):
            raise
        # llama.cpp's converter would write the inf; ``auto`` (the default) picks bf16 instead,
        # which has F32's range, and says why.  Nothing was left at OUT by the first attempt.
        plan = make_plan(plan.hf_path, "bf16", plan.no_mtp)
        plan.outtype_reason = f"auto: f16 would overflow ({e.where} in F16), so bf16"
        log.debug("%s", plan.outtype_reason)
        dest = out_path(plan, out)
        _convert(plan, dest, progress_factory)
    total = sum(tensor_nbytes(t.shape, t.type) for t in plan.tensors)
    return Summary(out=dest, arch=plan.arch, outtype=plan.outtype, outtype_reason=plan.outtype_reason,
                   n_tensors=len(plan.tensors), n_bytes=total, file_bytes=os.path.getsize(dest),
                   wall_s=time.perf_counter() - t0, peak_rss_bytes=_peak_rss(), warnings=list(plan.warnings))


def _convert(plan: Plan, out: str, progress_factory) -> None:
    total = sum(tensor_nbytes(t.shape, t.type) for t in plan.tensors)
    out_dir = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out_dir):
        free = shutil.disk_usage(out_dir).free
        if free < total:
            raise ResourceError(f"{out}: needs about {total / 2**20:.1f} MiB, only {free / 2**20:.1f} MiB free on its disk")
    inputs = tuple(os.path.join(plan.hf_path, f) for f in os.listdir(plan.hf_path))
    progress = progress_factory(total) if progress_factory else None
    try:
        with atomic_output(out, inputs=inputs) as tmp, ShardReader() as rd:
            w = GGUFStreamWriter(tmp, plan.arch)
            try:
                for kv in plan.kv:
                    if kv.sub_type is not None and len(kv.value) == 0:
                        # GGUF cannot type an empty array (gguf-py refuses it); an absent key
                        # means the same here (e.g. no attention layers, no merges)
                        log.debug("key %s: empty array, not written", kv.key)
                        continue
                    w.kv.add_key_value(kv.key, kv.value, kv.vtype, sub_type=kv.sub_type)
                for t in plan.tensors:
                    w.add_tensor(t.name, t.shape, t.type)
                w.begin_data()
                buf, obuf = _Buffer(), _Buffer()
                for t in plan.tensors:
                    _write_tensor(w, rd, buf, obuf, t, progress)
                w.close()
            except BaseException:
                w.abort()
                raise
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise ResourceError(f"{out}: cannot write ({os.strerror(e.errno)})") from None
        raise


def _param_counts(plan: Plan) -> tuple[int, int, int, int]:
    """(total, shared, expert, expert count) of the GGUF tensors, as gguf-py's
    ``GGUFWriter.get_total_parameter_count`` counts them (experts: ``*_exps.*`` tensors)."""
    total = shared = expert = expert_sum = n_exp = 0
    for t in plan.tensors:
        size = int(np.prod(t.shape, dtype=np.int64))
        if "_exps." in t.name and len(t.shape) >= 3:
            n = t.shape[-2 if ".bias" in t.name else -3]
            expert += size // n
            expert_sum += n
            n_exp += 1
        else:
            shared += size
        total += size
    return total, shared, expert, (expert_sum // n_exp if n_exp else 0)


def default_out_name(plan: Plan) -> str:
    """The file name llama.cpp's converter gives when no ``--outfile`` is named (gguf-py's
    naming convention: ``{Name}-{size label}-{OUTTYPE}.gguf``, e.g. ``Mamba-Tiny-94K-F16.gguf``;
    name, fine-tune, version and size come from the model card / directory name, as gguf-py's
    ``Metadata.load`` finds them, the size label else from the parameter count)."""
    import pathlib

    import gguf

    from toolkit.convert.base import FILE_TYPE

    total, shared, expert, n_expert = _param_counts(plan)
    hf = pathlib.Path(os.path.abspath(plan.hf_path))   # '.' has no name; abspath keeps symlinks
    try:
        md = gguf.Metadata.load(None, hf, None, total)
    except Exception as e:   # a README model card gguf-py cannot parse: the directory name
        log.debug("gguf.Metadata.load(%s): %s", plan.hf_path, e)
        md = gguf.Metadata()
    name = md.name or hf.name
    size = md.size_label or (gguf.size_label(total, shared, expert, n_expert) if total > 0 else None)
    ftype = FILE_TYPE[plan.outtype].name.partition("_")[2]   # MOSTLY_BF16 -> BF16
    return gguf.naming_convention(name, md.basename, md.finetune, md.version, size, ftype) + ".gguf"


def out_path(plan: Plan, out: str | None) -> str:
    """Where ``convert`` writes: OUT as given; an existing directory (or no OUT: HF_DIR itself,
    as llama.cpp's converter) gets :func:`default_out_name` inside it; ``{ftype}`` / ``{FTYPE}``
    (also ``{outtype}`` / ``{OUTTYPE}``) in OUT become the output type, as gguf-py fills them."""
    if out is None:
        out = plan.hf_path
    if os.path.isdir(out):
        return os.path.join(out, default_out_name(plan))
    head, base = os.path.split(out)
    for key, val in (("{ftype}", plan.outtype.lower()), ("{outtype}", plan.outtype.lower()),
                     ("{FTYPE}", plan.outtype.upper()), ("{OUTTYPE}", plan.outtype.upper())):
        base = base.replace(key, val)
    return os.path.join(head, base)
