"""The family base class: owns the source tensors, type rules and bookkeeping; a family
(``toolkit/convert/families/*.py``) overrides only its hparams and its tensor map.

A family's ``build()`` calls :meth:`Family.take` for every HF tensor it expects (with the
shape config.json implies) and :meth:`Family.emit` for every GGUF tensor.  Names no rule
knows raise at once (``unknown tensor``); tensors never taken raise at the end (``leftover``).
"""
from __future__ import annotations

import math
import re
from typing import ClassVar, Iterable

import gguf
import numpy as np

from toolkit.arch.tensor_names import T, tn
from toolkit.convert.config_keys import ConfigKeys, Refused
from toolkit.convert.hfdir import HFDir
from toolkit.convert.plan import KV, OutTensor, Plan, Segment, kv_u32
from toolkit.convert.st_reader import FLOAT_DTYPES, STTensor
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import GGMLType, Keys, k

OUTTYPES = ("f32", "f16", "bf16", "q8_0", "auto")

_OUT_GGML = {"f32": GGMLType.F32, "f16": GGMLType.F16, "bf16": GGMLType.BF16, "q8_0": GGMLType.Q8_0}
# general.file_type, llama.cpp's LlamaFileType
FILE_TYPE = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
              "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}

# GGUF tensors llama.cpp's converter always keeps in F32 (convert_hf_to_gguf.py, prepare_tensors:
# "Some tensor types are always in float32"); 1-D tensors, "*_norm.weight" and names not
# ending in ".weight" (ssm_a, ssm_d, biases) are F32 by the rules in :func:`pick_type`.
_ALWAYS_F32 = tuple(t.split(".")[-1] + ".weight" for t in (T.FFN_GATE_INP, T.SSM_CONV1D, T.SHORTCONV_CONV,
                                                            # "Kimi KDA conv weights should be F32" (ggml_ssm_conv
                                                            # asserts an F32 kernel); olmo-hybrid's too
                                                            T.SSM_CONV1D_Q, T.SSM_CONV1D_K, T.SSM_CONV1D_V))


def pick_type(name: str, np_shape: tuple[int, ...], outtype: str) -> GGMLType:
    """ggml type of one output tensor under ``--outtype`` (llama.cpp's converter rules).

    F32: 1-D tensors, ``*_norm.weight``, anything not ending in ``.weight`` (ssm_a, ssm_d,
    biases), ``ffn_gate_inp`` (router), ``ssm_conv1d`` (and KDA's ``ssm_conv1d_{q,k,v}``) and LFM2's
    ``shortconv.conv``.  Otherwise the outtype's type;
    Q8_0 needs rows that are a multiple of 32 elements, else F16 (llama.cpp's fallback).
    """
    if outtype == "f32" or len(np_shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return GGMLType.F32
    if name.split(".")[-2] + ".weight" in _ALWAYS_F32:
        return GGMLType.F32
    t = _OUT_GGML[outtype]
    if t == GGMLType.Q8_0 and np_shape[-1] % 32:
        return GGMLType.F16
    return t



# the Mamba-1 / Mamba-2 mixer's bias switches (llama.cpp's layout: a conv bias, no in/out
# projection biases); the hybrids' spellings take a prefix
SSM_CONV_BIAS = Refused((True,), "llama.cpp's layout needs ssm_conv1d.bias")
SSM_PROJ_BIAS = Refused((False,), "in/out projection biases: not in llama.cpp's layout")

def head_perm(n_head: int, head_dim: int, n_rot: int) -> np.ndarray:
    """Row order that turns HF's half-split RoPE layout into llama.cpp's NORM (adjacent pairs).

    Within each head, among the first ``n_rot`` rows, pairs (i, i + n_rot/2) move to
    (2i, 2i + 1); rows n_rot..head_dim-1 stay.  Output row r <- source row perm[r].
    With n_rot == head_dim this is llama.cpp's ``LlamaModel.permute``.
    Shape: int64 [n_head * head_dim].
    """
    if n_rot % 2 or not (0 <= n_rot <= head_dim):
        raise ValueError(f"n_rot {n_rot} must be even and at most head_dim {head_dim}")
    half = n_rot // 2
    one = np.arange(head_dim, dtype=np.int64)
    one[0:n_rot:2] = np.arange(half)
    one[1:n_rot:2] = np.arange(half) + half
    return (np.arange(n_head, dtype=np.int64)[:, None] * head_dim + one[None, :]).reshape(-1)


class Family:
    """Base class of one converter family.  Subclasses set ``hf_archs``, ``arch``, ``known``
    (regexes of every HF tensor name the family understands) and implement ``build``."""

    hf_archs: ClassVar[tuple[str, ...]] = ()
    arch: ClassVar[str] = ""
    # what people call the models (help texts, README, `convert --list-archs`; a test keeps
    # every list of families equal to the union of these)
    families: ClassVar[tuple[str, ...]] = ()
    gguf_archs: ClassVar[str] = ""       # `--list-archs`' GGUF column when not just ``arch``
    llama_cpp: ClassVar[bool] = True     # llama.cpp loads the file we write
    vllm: ClassVar[bool] = True          # vLLM runs the HF checkpoint (its supported-models list)
    known: ClassVar[tuple[str, ...]] = ()
    # regexes of HF tensors that may hold integers (read by the family itself, e.g. hash constants)
    int_known: ClassVar[tuple[str, ...]] = ()
    # ``toolkit convert --no-mtp``: leave out an MTP / NextN draft head (families that write one)
    no_mtp: bool = False
    # the HF configuration classes this family converts (as transformers names them) and what it
    # does with each of their attributes (toolkit/convert/config_keys.py; docs/config-audit.md)
    hf_configs: ClassVar[tuple[str, ...]] = ()
    config_keys: ClassVar[ConfigKeys | None] = None

    def __init__(self, hf: HFDir, outtype: str):
        if outtype not in OUTTYPES:
            raise InputError(f"--outtype {outtype!r}: must be one of {', '.join(OUTTYPES)}")
        self.hf = hf
        self.cfg = hf.config
        if self.config_keys is not None:   # before the tensors: a refused setting names its key, not a bias tensor
            d = self.cfg.d
            self.config_keys.enforce(self.cfg.path, {**d, **d["text_config"]} if isinstance(d.get("text_config"), dict) else d)
        self.outtype = self._resolve_outtype(outtype)
        self.plan = Plan(arch=self.arch, hf_arch=hf.arch_name)
        self._taken: set[str] = set()
        self._known = [re.compile(p) for p in self.known]
        for name, t in hf.tensors.items():
            if not any(r.fullmatch(name) for r in self._known):
                raise InputError(f"{t.path}: unknown tensor name {name!r} for {hf.arch_name}")
            if t.dtype not in FLOAT_DTYPES and not any(re.fullmatch(p, name) for p in self.int_known):
                raise UnsupportedError(f"{t.path}: tensor {name!r} has dtype {t.dtype}; supported: {', '.join(FLOAT_DTYPES)}")

    # ---- helpers for subclasses ---------------------------------------------------------
    def key(self, template: str) -> str:
        return k(template, self.arch)

    def _resolve_outtype(self, outtype: str) -> str:
        """``auto`` as llama.cpp's converter resolves it (``--outtype auto``, its default): the
        first matrix (>= 2-D tensor, shards and names in order) stored as BF16 gives bf16, as F16
        gives f16; a checkpoint with neither gives f16.  Sets ``outtype_reason``."""
        self.outtype_reason = ""
        if outtype != "auto":
            return outtype
        for t in sorted(self.hf.tensors.values(), key=lambda t: (t.path, t.name)):
            if len(t.shape) >= 2 and t.dtype in ("BF16", "F16"):
                self.outtype_reason = f"auto: the first matrix, {t.name}, is {t.dtype}"
                return t.dtype.lower()
        self.outtype_reason = "auto: no F16/BF16 matrix in the checkpoint, f16 as llama.cpp's converter picks"
        return "f16"

    @property
    def file_type(self) -> int:
        return int(FILE_TYPE[self.outtype])

    def layer_count(self, *names: str) -> int:
        """The block count from config.json, bounded by the checkpoint (every block has at
        least one tensor), so a wrong value fails here and not by allocating per-layer lists.

        Raises:
            InputError: missing, not a positive integer, or more blocks than tensors.
        """
        n = self.cfg.int(*names)
        if n > len(self.hf.tensors):
            raise InputError(f"{self.cfg.path}: key {names[0]!r} = {n} but the checkpoint has only "
                             f"{len(self.hf.tensors)} tensors")
        return n

    def has(self, name: str) -> bool:
        return name in self.hf.tensors

    def take(self, name: str, shape: Iterable[int] | None = None, why: str = "") -> STTensor:
        """The source tensor ``name``, checked against the shape config.json implies.

        Raises:
            InputError: missing tensor, or a shape that disagrees (names tensor, file, shape).
        """
        t = self.hf.tensors.get(name)
        if t is None:
            raise InputError(f"{self.hf.path}: missing tensor {name!r}{' (' + why + ')' if why else ''}")
        if name in self._taken:
            raise ValueError(f"tensor {name!r} taken twice")
        if shape is not None and tuple(shape) != t.shape:
            raise InputError(f"{t.path}: tensor {name!r} has shape {list(t.shape)}, config.json implies "
                             f"{list(shape)}{' (' + why + ')' if why else ''}")
        self._taken.add(name)
        return t

    def omit(self, name: str, why: str) -> None:
        """Mark a source tensor as deliberately not written (e.g. a tied lm_head)."""
        self._taken.add(name)
        self.plan.omitted.append((name, why))

    def emit(self, name: str, shape: tuple[int, ...], segments: list[Segment], op: str | None = None,
             note: str = "") -> OutTensor:
        shape = tuple(int(x) for x in shape)
        ot = OutTensor(name, shape, pick_type(name, shape, self.outtype), segments, op, note)
        rows = sum(s.n_rows for s in segments)
        if rows != ot.n_rows:
            raise ValueError(f"{name}: segments give {rows} rows, shape {shape} needs {ot.n_rows}")
        for s in segments:
            if s.tblock is not None:   # row0 counts source rows of tblock[1]; whole a x b blocks
                a, b = s.tblock
                if a != ot.row_len or s.n_rows % b or s.row0 * b + s.n_rows * a > s.src.n_elements:
                    raise ValueError(f"{name}: transposed blocks {s.tblock} x {s.n_rows // max(b, 1)} do not fit {s.src.name}")
                continue
            if s.col_scales is not None and s.col_scales.shape != (ot.row_len,):
                raise ValueError(f"{name}: col_scales of shape {s.col_scales.shape} for rows of {ot.row_len}")
            if s.src.n_elements % ot.row_len or (s.row0 + s.n_rows) * ot.row_len > s.src.n_elements:
                raise ValueError(f"{name}: segment rows [{s.row0}, {s.row0 + s.n_rows}) x {ot.row_len} outside {s.src.name} {s.src.shape}")
        self.plan.tensors.append(ot)
        return ot

    def copy(self, out: str, src: str, shape: tuple[int, ...], out_shape: tuple[int, ...] | None = None,
             op: str | None = None, note: str = "", perm=None, block: int = 1,
             why: str = "") -> OutTensor:
        """Write source ``src`` (expected ``shape``) as ``out`` with ``out_shape`` (a reshape of
        the same elements; default the same shape), optionally reordering rows (``perm``, or a
        function returning it, called once the source's shape is checked: a config value out of
        reason then fails as that shape error, not while building a row index of its size)."""
        t = self.take(src, shape, why)
        if callable(perm):
            perm = perm()
        out_shape = tuple(out_shape if out_shape is not None else shape) or (1,)
        if math.prod(out_shape) != t.n_elements:
            raise ValueError(f"{out}: out shape {out_shape} does not hold the {t.n_elements} elements of {src}")
        rows = math.prod(out_shape[:-1]) if len(out_shape) > 1 else 1
        return self.emit(out, out_shape, [Segment(t, 0, rows, perm, block)], op, note)

    def zeros(self, out: str, like: OutTensor, n: int, note: str) -> OutTensor:
        """``out`` [n] of zeros, for a tensor llama.cpp's loader requires that the checkpoint
        leaves out (a conv bias switched off): row 0 of ``like``'s source, viewed as rows of
        ``n`` (its element count a multiple of n), times 0."""
        return self.emit(out, (n,), [Segment(like.segments[0].src, 0, 1, scales=(0.0,))], note=note)

    def stack(self, out: str, src: str, n: int, shape: tuple[int, ...], why: str = "", note: str = "") -> OutTensor:
        """Write sources ``src.format(e=e)`` (each of ``shape``), e = 0 .. n - 1, as ``out`` [n,
        *shape], in that order (routed experts); ``why`` may name ``{e}`` too."""
        srcs = [self.take(src.format(e=e), shape, why.format(e=e)) for e in range(n)]
        return self.emit(out, (n,) + tuple(shape), [Segment(t, 0, shape[0]) for t in srcs], note=note)

    def check_leftovers(self) -> None:
        left = [n for n in self.hf.tensors if n not in self._taken]
        if left:
            t = self.hf.tensors[left[0]]
            raise InputError(f"{t.path}: tensor {left[0]!r} was not converted (it does not fit the layer layout "
                             f"config.json describes){f'; {len(left) - 1} more' if len(left) > 1 else ''}")

    def tied_output(self, embd: str, lm_head: str, n_vocab: int, n_embd: int, tie_default: bool) -> None:
        """output.weight from ``lm_head`` unless the embeddings are tied (config.json
        ``tie_word_embeddings``, default ``tie_default`` as the HF config class has it): then
        the output reuses ``embd`` (llama.cpp falls back to token_embd when output is absent)
        and a saved ``lm_head`` is checked for shape and left out."""
        tie = self.cfg.flag("tie_word_embeddings", tie_default)
        if tie:
            if self.has(lm_head):
                self.take(lm_head, (n_vocab, n_embd))
                self.omit(lm_head, "tie_word_embeddings: the output reuses token_embd.weight")
            return
        self.copy(tn(T.OUTPUT), lm_head, (n_vocab, n_embd), why="tie_word_embeddings is false")

    # ---- to implement ---------------------------------------------------------------
    def build(self) -> Plan:
        """Fill ``self.plan``: hparams key/values then tensors (the tokenizer is added by the caller)."""
        raise NotImplementedError

    def general_kv(self) -> list[KV]:
        return [kv_u32(Keys.General.FILE_TYPE, self.file_type)]

    def n_vocab_rows(self) -> int:
        """Rows of the token embedding: the token list is padded to exactly this many entries
        (``[PAD{i}]``, type UNUSED), so that llama.cpp's n_vocab equals the embedding's rows.
        (llama.cpp's converter rounds the count up to a multiple of 8/16 for Mamba; real
        checkpoints already store that many rows, and a count above the rows would not load.)"""
        raise NotImplementedError
