"""A GGUF model loaded into the C runtime (weights mmap'd, zero copy; ``mmap=False``, the CLI's
``--no-mmap``: read into memory first).

Python parses the GGUF (:class:`toolkit.gguf_io.GGUFFile`, :class:`toolkit.arch.HParams`) and
hands the C library a description: a ``tk_hparams`` struct and the tensor table (name,
absolute offset, ggml type, ``ne``). The C side mmaps the file and validates every tensor
(type, shape, byte range) before use; see ``toolkit/native/model.c``.
"""
from __future__ import annotations

import errno
import os
import re
import weakref

import numpy as np

from toolkit.arch import HParams, arch_spec
from toolkit.arch.abi import TK_HPARAMS
from toolkit.binding import NativeHandle, check, ffi, lib
from toolkit.binding.cpu import default_threads  # noqa: F401  (re-exported: runtime's thread default)
from toolkit.errors import InputError, NativeError, ResourceError, UnsupportedError
from toolkit.gguf_io import GGUFFile
from toolkit.runtime.options import RuntimeOptions


def _check_weights_fit(path: str, f: GGUFFile) -> None:
    """ResourceError when the tensors claim more bytes than the machine has RAM.

    The weights are mapped from the file (zero copy) and every one is read for every token, so
    a model larger than RAM would page from disk on each token (and a sparse or crafted file can
    claim terabytes); refuse it up front, naming the sizes, before anything is mapped.
    """
    need = sum(t.nbytes for t in f)
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return
    if ram > 0 and need > ram:
        raise ResourceError(f"{path}: the model's tensors need {need / 2**30:.2f} GiB, more than this machine's "
                            f"{ram / 2**30:.2f} GiB of RAM (use a smaller quantization)")


class Model(NativeHandle):
    """A GGUF model of a supported architecture, ready for :class:`toolkit.runtime.Context`.

    Attributes:
        path:     the GGUF file
        gguf:     :class:`toolkit.gguf_io.GGUFFile` (metadata, tokenizer keys)
        hparams:  :class:`toolkit.arch.HParams`
        n_vocab:  logits width
        options:  :class:`toolkit.runtime.options.RuntimeOptions`: repacking and the BF16 GEMM at
                  load, the chunk thresholds its contexts take (default: no repacking, the
                  library's thresholds; the CLI's are ``RuntimeOptions.from_env()``)

    Raises:
        InputError: not a GGUF file, missing/malformed key (from the Python parser).
        NativeError: a missing, misshaped or out-of-range tensor (named in the message).
        UnsupportedError: architecture or tensor type this build does not run.
        ResourceError: the tensors need more bytes than the machine has RAM (unless
            ``check_ram`` is False: a model only measured, :func:`toolkit.runtime.memory_estimate`,
            never run).
    """

    def __init__(self, path: str | os.PathLike[str], n_threads: int | None = None, check_ram: bool = True,
                 mmap: bool = True, options: RuntimeOptions | None = None):
        self.path = os.fspath(path)
        self.mmap = mmap
        self.options = options if options is not None else RuntimeOptions()
        self.gguf = GGUFFile(self.path)
        self.hparams = HParams.from_gguf(self.gguf)
        if check_ram:
            _check_weights_fit(self.path, self.gguf)
        self.n_threads = n_threads if n_threads is not None else default_threads()
        self.n_vocab = self.hparams.n_vocab
        self._ptr = ffi.NULL
        self._contexts = weakref.WeakSet()   # closed before the model is freed
        hp = self.hparams
        n = hp.n_layer
        # the per-layer arrays stay alive with the model (tk_model_load copies them; tests reuse them)
        self._c_hparams, self._c_arrays = c_hparams(hp)

        from toolkit.runtime.mtp import nextn_tensor_names
        skip = nextn_tensor_names(self.gguf)   # the NextN blocks: MtpModel's table (--mtp)
        try:
            self._ptr = load_table(self.path, self._c_hparams, [t for t in self.gguf if t.name not in skip], mmap=mmap,
                                   params=self.options.model_params())
        except NativeError as e:
            # name the layer kind the file implies: a missing 'blk.N.ssm_in' on what the file
            # meant as an attention layer points at its layer indices / head_count_kv keys
            m = re.search(r"missing tensor 'blk\.(\d+)\.", str(e))
            if m and int(m.group(1)) < n:
                i = int(m.group(1))
                raise type(e)(f"{e} (layer {i} is {hp.layer_kinds[i].name.lower()} per the file's "
                              f"attention.layer_indices / attention.head_count_kv)") from None
            raise

    @property
    def weight_bytes(self) -> int:
        """Bytes of the tensors the model loads: the file's, less the NextN (MTP) blocks', which
        only ``--mtp`` loads (toolkit.runtime.mtp.MtpModel counts those)."""
        from toolkit.runtime.mtp import nextn_tensor_names
        skip = nextn_tensor_names(self.gguf)
        return int(sum(t.nbytes for t in self.gguf if t.name not in skip))

    @property
    def repack_info(self) -> dict:
        """What re-laying the weights at load cost (``options.repack``; toolkit.h tk_repack_info):
        ``{"n_tensors", "bytes", "ms", "released"}`` (released: bytes of the mapped file given
        back after it), all 0 without it."""
        info = ffi.new("tk_repack_info *")
        lib.tk_model_repack_info(self.ptr, info)
        return {"n_tensors": int(info.n_tensors), "bytes": int(info.bytes), "ms": float(info.ms),
                "released": int(info.released)}

    @property
    def ptr(self):
        if self._ptr == ffi.NULL:
            raise InputError(f"{self.path}: model is closed")
        return self._ptr

    def close(self) -> None:
        """Free the C model (unmaps the file); closes the contexts made from it first."""
        mtp = getattr(self, "_mtp", None)   # its NextN block's model (toolkit.runtime.mtp), if one was made
        if mtp is not None:
            self._mtp = None
            mtp.close()
        for c in list(getattr(self, "_contexts", ())):
            c.close()
        if self._ptr != ffi.NULL:
            lib.tk_model_free(self._ptr)
            self._ptr = ffi.NULL

    def __repr__(self) -> str:
        return f"Model({self.path!r}, arch={self.hparams.arch!r}, n_layer={self.hparams.n_layer})"


def c_hparams(hp: HParams) -> tuple["ffi.CData", list]:
    """A ``tk_hparams *`` filled from ``hp`` by the field list :data:`toolkit.arch.abi.TK_HPARAMS`
    (HParams fields, and the architecture row's tk_arch id and MoE routing rule), and the
    per-layer int32 arrays and names it points to (keep them alive as long as the struct is used).

    Raises:
        UnsupportedError: ``hp.arch`` has no runtime row (HParams.from_gguf refuses it first).
    """
    spec = arch_spec(hp.arch)
    if spec is None or not spec.runs:
        raise UnsupportedError(f"architecture {hp.arch!r} is not run by this runtime")
    c = ffi.new("tk_hparams *")
    arrays = []
    for fld in TK_HPARAMS:
        v = fld.value(hp, spec)
        if fld.kind in ("int32[]", "uint64[]"):
            if len(v):
                v = ffi.new("int32_t[]" if fld.kind == "int32[]" else "uint64_t[]", [int(x) for x in v])
                arrays.append(v)
            else:
                v = ffi.NULL      # the family has none (qwen4exp's arrays elsewhere)
        elif fld.kind == "str":
            v = ffi.new("char[]", v.encode())
            arrays.append(v)
        elif fld.kind == "int32":
            v = int(v)
        else:
            v = float(v)
        fld.set(c, v)
    return c, arrays


def load_table(path: str, c_hparams, infos, mmap: bool = True, params=ffi.NULL) -> "ffi.CData":
    """tk_model_load with the tensor table of ``infos`` (:class:`toolkit.gguf_io.TensorInfo`) and
    ``params`` (a ``tk_model_params *``, NULL: no repacking).

    ``mmap=False`` (llama.cpp's ``--no-mmap``): the whole file is first read into memory the
    process owns (an anonymous memory file, ``memfd_create``), and the C side maps that copy, so
    no weight is paged in from the file later and the file may change or go away meanwhile.
    """
    descs = ffi.new("tk_tensor_desc[]", max(len(infos), 1))
    names = []  # keep the name buffers alive during the call
    for i, t in enumerate(infos):
        if len(t.shape) > 4:
            raise InputError(f"{path}: tensor {t.name!r} has {len(t.shape)} dims (at most 4)")
        nm = ffi.new("char[]", t.name.encode("utf-8"))
        names.append(nm)
        d = descs[i]
        d.name = nm
        d.offset = t.offset
        d.type = int(t.type)
        d.n_dims = max(1, len(t.shape))
        ne = list(t.shape) + [1] * (4 - len(t.shape))
        for j in range(4):
            d.ne[j] = int(ne[j])
    out = ffi.new("tk_model **")
    if mmap:
        check(lib.tk_model_load(path.encode(), c_hparams, descs, len(infos), params, out))  # message names the file
        return out[0]
    fd = _read_into_memory(path)
    mem = f"/proc/self/fd/{fd}"
    try:
        check(lib.tk_model_load(mem.encode(), c_hparams, descs, len(infos), params, out))
    except (NativeError, InputError, UnsupportedError, ResourceError) as e:
        raise type(e)(str(e).replace(mem, path)) from None   # the message names the file, not the copy
    finally:
        os.close(fd)   # the C side's mapping keeps the pages
    return out[0]


def _read_into_memory(path: str) -> int:
    """A file descriptor of an anonymous memory file holding ``path``'s bytes."""
    if not hasattr(os, "memfd_create"):   # pragma: no cover - non-Linux
        raise UnsupportedError("--no-mmap: not supported on this platform (needs memfd_create)")
    size = os.path.getsize(path)
    fd = os.memfd_create("toolkit-weights", os.MFD_CLOEXEC)
    try:
        with open(path, "rb") as src:
            left = size
            while left > 0:
                n = os.sendfile(fd, src.fileno(), None, min(left, 1 << 30))
                if n == 0:
                    raise InputError(f"{path}: shorter than expected while reading it into memory")
                left -= n
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.ENOMEM, errno.ENOSPC):
            raise ResourceError(f"{path}: not enough memory to load {size / 2**20:.1f} MiB (--no-mmap)") from None
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def as_tokens(tokens) -> np.ndarray:
    """``tokens`` (a 1-D sequence of integer ids) as a contiguous int32 array; InputError otherwise."""
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise InputError(f"tokens must be a 1-D sequence of ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InputError(f"tokens must be integers, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int32)


_load = load_table   # the name the tests call it by
