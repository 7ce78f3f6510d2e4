"""The structure-aware GGUF mutation codec and the helpers the fuzz / fault / limit tests share.

:class:`G` is a GGUF file as editable structure (:func:`parse` reads a trusted seed,
:meth:`G.encode` writes it back byte for byte); :data:`MUTATORS` edit it (header counts,
key/values, string and array lengths, value types, tensor infos, offsets, alignment, dims that
overflow when multiplied, n_dims > 4, duplicate names, data beyond EOF, raw header bytes) and
:func:`mutated` draws 1-3 of them for hypothesis.  :func:`cli` runs the toolkit CLI in this
process under a hang guard.

Used by tests/reliability/test_fuzz_gguf.py, test_fuzz_run.py, test_fuzz_native.py,
test_fuzz_convert.py, test_faults.py, test_limits.py and tools/fuzz_gguf.py (the longer runs).
"""
from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import pathlib
import struct
import sys
from dataclasses import dataclass

from hypothesis import strategies as st

from toolkit.errors import ToolkitError

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
SEEDS = {
    "mamba": FIXTURES / "llamacpp" / "mamba-tiny.f32.gguf",
    "mamba2": FIXTURES / "llamacpp" / "mamba2-tiny.f32.gguf",
    "bamba": FIXTURES / "llamacpp" / "bamba-tiny.f32.gguf",
    "qwen35moe": FIXTURES / "llamacpp" / "qwen35moe-tiny.f32.gguf",   # gated delta net, gated attention, MoE
}
# examples per seed file (TOOLKIT_FUZZ_EXAMPLES overrides; tools/fuzz_gguf.py runs thousands)
N_EXAMPLES = int(os.environ.get("TOOLKIT_FUZZ_EXAMPLES", "40"))
HANG_S = 20.0   # one example taking this long is a hang: faulthandler dumps and kills the run

# ---- GGUF value types (ref: gguf spec, ggml/include/gguf.h enum gguf_type) --------------
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
           U64: "<Q", I64: "<q", F64: "<d"}
INTERESTING_U64 = [0, 1, 2, 3, 4, 5, 7, 31, 32, 33, 255, 256, 4096, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
                   2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def u32(v: int) -> bytes:
    return struct.pack("<I", v & 0xFFFFFFFF)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def gstr(b: bytes, declared_len: int | None = None) -> bytes:
    return u64(len(b) if declared_len is None else declared_len) + b


def encode_value(vtype: int, v) -> bytes:
    """GGUF payload of a value (no type tag); arrays are (elem_type, list)."""
    if vtype == STR:
        return gstr(v if isinstance(v, bytes) else str(v).encode())
    if vtype == ARR:
        et, items = v
        return u32(et) + u64(len(items)) + b"".join(encode_value(et, x) for x in items)
    fmt = _SCALAR[vtype]
    if fmt[1] in "bhiq":   # signed: wrap into range like a C cast, then store the bits
        fmt = fmt.upper()
    if fmt[1] in "BHIQ":
        v = int(v) & ((1 << (8 * struct.calcsize(fmt))) - 1)
    return struct.pack(fmt, v)


@dataclass
class KV:
    key: bytes
    vtype: int
    payload: bytes          # encoded value, exactly as it follows the type tag


@dataclass
class TI:
    name: bytes
    dims: list[int]         # ggml order
    ttype: int
    offset: int             # relative to the start of the data section
    n_dims: int | None = None   # declared n_dims when it differs from len(dims)


@dataclass
class G:
    """A GGUF file as editable structure; :meth:`encode` writes it back byte for byte."""

    kvs: list[KV]
    tis: list[TI]
    data: bytes
    magic: bytes = b"GGUF"
    version: int = 3
    n_tensors: int | None = None   # declared counts (None: the real ones)
    n_kv: int | None = None
    alignment: int = 32
    tail_cut: int = 0              # bytes cut from the end of the file
    tail_extra: bytes = b""

    def encode(self) -> bytes:
        out = bytearray(self.magic + u32(self.version))
        out += u64(len(self.tis) if self.n_tensors is None else self.n_tensors)
        out += u64(len(self.kvs) if self.n_kv is None else self.n_kv)
        for kv in self.kvs:
            out += gstr(kv.key) + u32(kv.vtype) + kv.payload
        for t in self.tis:
            out += gstr(t.name) + u32(len(t.dims) if t.n_dims is None else t.n_dims)
            out += b"".join(u64(d) for d in t.dims) + u32(t.ttype) + u64(t.offset)
        al = self.alignment if 0 < self.alignment < 2**20 else 32
        out += b"\0" * (-len(out) % al)
        out += self.data + self.tail_extra
        if self.tail_cut:
            del out[max(0, len(out) - self.tail_cut):]
        return bytes(out)


def _skip_value(buf: bytes, o: int, vtype: int) -> int:
    if vtype == STR:
        (n,) = struct.unpack_from("<Q", buf, o)
        return o + 8 + n
    if vtype == ARR:
        et, n = struct.unpack_from("<IQ", buf, o)
        o += 12
        for _ in range(n):
            o = _skip_value(buf, o, et)
        return o
    return o + struct.calcsize(_SCALAR[vtype])


def parse(buf: bytes) -> G:
    """Parse a *trusted* seed file into :class:`G` (no validation: seeds are known good)."""
    assert buf[:4] == b"GGUF"
    version, n_t, n_kv = struct.unpack_from("<IQQ", buf, 4)
    o = 24
    kvs, align = [], 32
    for _ in range(n_kv):
        (kl,) = struct.unpack_from("<Q", buf, o)
        key = buf[o + 8:o + 8 + kl]
        o += 8 + kl
        (vt,) = struct.unpack_from("<I", buf, o)
        o += 4
        e = _skip_value(buf, o, vt)
        kvs.append(KV(key, vt, buf[o:e]))
        if key == b"general.alignment":
            align = struct.unpack_from("<I", buf, o)[0]
        o = e
    tis = []
    for _ in range(n_t):
        (nl,) = struct.unpack_from("<Q", buf, o)
        name = buf[o + 8:o + 8 + nl]
        o += 8 + nl
        (nd,) = struct.unpack_from("<I", buf, o)
        dims = list(struct.unpack_from(f"<{nd}Q", buf, o + 4))
        o += 4 + 8 * nd
        tt, off = struct.unpack_from("<IQ", buf, o)
        o += 12
        tis.append(TI(name, dims, tt, off))
    o += -o % align
    return G(kvs, tis, buf[o:], version=version, alignment=align)


# ---- mutations: each takes (g, draw) and edits g in place ---------------------------------

def _pick(draw, seq):
    return draw(st.sampled_from(seq)) if seq else None


def _interesting(draw):
    return draw(st.sampled_from(INTERESTING_U64) | st.integers(0, 2**64 - 1))


def m_header(g: G, draw):
    what = draw(st.sampled_from(["magic", "version", "n_tensors", "n_kv"]))
    if what == "magic":
        g.magic = draw(st.sampled_from([b"GGUF"[::-1], b"GGML", b"\0\0\0\0", b"GGU\0"]))
    elif what == "version":
        g.version = draw(st.sampled_from([0, 1, 2, 4, 0x03000000, 2**32 - 1]))
    elif what == "n_tensors":
        g.n_tensors = draw(st.sampled_from([len(g.tis) + 1, max(0, len(g.tis) - 1), 2**32, 2**63, 2**64 - 1]))
    else:
        g.n_kv = draw(st.sampled_from([len(g.kvs) + 1, max(0, len(g.kvs) - 1), 2**32, 2**63, 2**64 - 1]))


def m_kv_type(g: G, draw):
    kv = _pick(draw, g.kvs)
    if kv is None:
        return
    kv.vtype = draw(st.sampled_from([U8, I8, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64, 13, 255, 2**31, 2**32 - 1]))


def m_kv_value(g: G, draw):
    """A well-formed value of the wrong type or range for a key the parsers read."""
    kv = _pick(draw, g.kvs)
    if kv is None:
        return
    choice = draw(st.sampled_from([
        (U32, 0), (U32, 2**32 - 1), (I32, -1), (I32, -2**31), (U64, 2**64 - 1), (I64, -2**63), (U8, 0),
        (F32, float("nan")), (F32, float("inf")), (F32, -1.0), (F64, 1e308), (BOOL, 2),
        (STR, b""), (STR, b"abc"), (STR, b"\xff\xfe"), (STR, "mamba".encode()), (STR, b"granitehybrid"),
        (ARR, (U32, [])), (ARR, (U32, [0])), (ARR, (I32, [-1, 2**31 - 1])), (ARR, (STR, [b"a", b"\xff"])),
        (ARR, (ARR, [(U8, [1])])), (ARR, (F32, [float("nan")] * 3)), (ARR, (U32, list(range(40)))),
        (ARR, (BOOL, [True, False])),
    ]))
    kv.vtype, kv.payload = choice[0], encode_value(*choice)


def m_kv_length(g: G, draw):
    """A string or array whose declared length disagrees with its bytes."""
    cands = [kv for kv in g.kvs if kv.vtype in (STR, ARR)]
    kv = _pick(draw, cands)
    if kv is None:
        return
    n = _interesting(draw)
    if kv.vtype == STR:
        kv.payload = u64(n) + kv.payload[8:]
    else:
        kv.payload = kv.payload[:4] + u64(n) + kv.payload[12:]


def m_kv_array_elem_type(g: G, draw):
    cands = [kv for kv in g.kvs if kv.vtype == ARR]
    kv = _pick(draw, cands)
    if kv is None:
        return
    kv.payload = u32(draw(st.sampled_from([U8, U32, F32, STR, ARR, U64, 13, 2**32 - 1]))) + kv.payload[4:]


def m_kv_key(g: G, draw):
    kv = _pick(draw, g.kvs)
    if kv is None:
        return
    what = draw(st.sampled_from(["dup", "utf8", "empty", "drop", "long"]))
    if what == "dup":
        g.kvs.append(KV(kv.key, kv.vtype, kv.payload))
    elif what == "utf8":
        kv.key = kv.key[:3] + b"\xc3\x28" + kv.key[3:]
    elif what == "empty":
        kv.key = b""
    elif what == "drop":
        g.kvs.remove(kv)
    else:
        kv.key = kv.key * 3000     # far longer than any real key


def m_alignment(g: G, draw):
    a = draw(st.sampled_from([0, 1, 3, 7, 48, 2**31, 2**32 - 1]))
    vt = draw(st.sampled_from([U32, U32, U64, I32, STR]))
    g.kvs = [kv for kv in g.kvs if kv.key != b"general.alignment"]
    g.kvs.append(KV(b"general.alignment", vt, encode_value(vt, a) if vt != STR else gstr(b"32")))
    if vt == U32 and a and a & (a - 1) == 0 and a < 2**20:
        g.alignment = a


def m_ti_dims(g: G, draw):
    t = _pick(draw, g.tis)
    if t is None:
        return
    what = draw(st.sampled_from(["one", "overflow", "ndims", "zero", "ndims_lie"]))
    if what == "one" and t.dims:
        i = draw(st.integers(0, len(t.dims) - 1))
        t.dims[i] = _interesting(draw)
    elif what == "overflow":     # product wraps around 2**64 (or lands on a small number)
        t.dims = draw(st.sampled_from([[2**32, 2**32], [2**32 + 1, 2**32 - 1], [2**63, 2], [2**62, 4, 1, 1],
                                       [32, 2**59], [2**21, 2**21, 2**22], [2**16] * 4]))
    elif what == "ndims":        # more than GGML_MAX_DIMS = 4
        t.dims = t.dims + [1] * draw(st.integers(1, 4))
    elif what == "zero":
        t.dims = []
    else:                        # declared n_dims disagrees with the dims written
        t.n_dims = draw(st.sampled_from([0, 5, 64, 2**31, 2**32 - 1]))


def m_ti_type(g: G, draw):
    t = _pick(draw, g.tis)
    if t is None:
        return
    t.ttype = draw(st.sampled_from([1, 2, 8, 12, 13, 15, 24, 26, 28, 30, 31, 39, 40, 99, 2**31, 2**32 - 1]))


def m_ti_offset(g: G, draw):
    t = _pick(draw, g.tis)
    if t is None:
        return
    size = len(g.data)
    t.offset = draw(st.sampled_from([t.offset + 1, t.offset + 2, t.offset + 4, size, size - 4, size + 32,
                                     2**63, 2**64 - 32, 2**64 - 1]))


def m_ti_name(g: G, draw):
    t = _pick(draw, g.tis)
    if t is None:
        return
    what = draw(st.sampled_from(["dup", "utf8", "empty", "long", "swap"]))
    if what == "dup":
        other = _pick(draw, g.tis)
        t.name = other.name
        if other is t:
            g.tis.append(TI(t.name, list(t.dims), t.ttype, t.offset))
    elif what == "utf8":
        t.name = b"\xff" + t.name
    elif what == "empty":
        t.name = b""
    elif what == "long":
        t.name = t.name * 200   # > GGML_MAX_NAME (64) bytes
    else:
        other = _pick(draw, g.tis)
        t.name, other.name = other.name, t.name


def m_drop_tensor(g: G, draw):
    t = _pick(draw, g.tis)
    if t is None:
        return
    g.tis.remove(t)


def m_truncate(g: G, draw):
    g.tail_cut = draw(st.sampled_from([1, 4, 31, 4096, len(g.data) // 2, len(g.data)]))


class _Raw:
    """Byte-level edits applied after encoding (header region only: data bytes are opaque)."""

    def __init__(self, edits):
        self.edits = edits


def m_raw(g: G, draw):
    hdr = len(g.encode()) - len(g.data)
    n = draw(st.integers(1, 6))
    edits = []
    for _ in range(n):
        pos = draw(st.integers(4, max(5, hdr - 1)))
        if draw(st.booleans()):
            edits.append((pos, bytes([draw(st.integers(0, 255))])))
        else:
            edits.append((pos & ~7 if pos & ~7 >= 4 else 8, u64(_interesting(draw))))
    g.raw = _Raw(edits)  # type: ignore[attr-defined]


def m_hparam(g: G, draw):
    """A plausible-looking but wrong integer hparam: the layout stays valid, so the value reaches
    HParams and the C loader's shape checks."""
    cands = [kv for kv in g.kvs if kv.vtype in (U32, I32, U64) and b"." in kv.key and not kv.key.startswith(b"general.")]
    kv = _pick(draw, cands)
    if kv is None:
        return
    v = draw(st.sampled_from([0, 1, 2, 3, 4, 5, 7, 8, 16, 17, 31, 32, 63, 64, 65, 128, 256, 511, 512, 513,
                              4096, 2**20, 2**31 - 1]))
    kv.payload = encode_value(kv.vtype, v)


def m_ti_reshape(g: G, draw):
    """Same byte count, different shape (transposed or refactored): only a shape check can tell."""
    t = _pick(draw, g.tis)
    if t is None or len(t.dims) < 2:
        return
    if draw(st.booleans()):
        t.dims = t.dims[::-1]
    elif t.dims[1] % 2 == 0:
        t.dims = [t.dims[0] * 2, t.dims[1] // 2] + t.dims[2:]


def m_ti_same_size_type(g: G, draw):
    """F32 <-> I32 (4 bytes each) or F16 <-> BF16 <-> I16: valid layout, wrong meaning."""
    t = _pick(draw, g.tis)
    if t is None:
        return
    t.ttype = {0: draw(st.sampled_from([26, 0])), 1: 30, 30: 1}.get(t.ttype, t.ttype)


MUTATORS = [m_hparam, m_hparam, m_ti_reshape, m_ti_same_size_type, m_header, m_kv_type, m_kv_value, m_kv_length, m_kv_array_elem_type, m_kv_key, m_alignment,
            m_ti_dims, m_ti_type, m_ti_offset, m_ti_name, m_drop_tensor, m_truncate, m_raw]

_SEED_CACHE: dict[str, G] = {}


def seed(name: str) -> G:
    import copy
    if name not in _SEED_CACHE:
        _SEED_CACHE[name] = parse(SEEDS[name].read_bytes())
    return copy.deepcopy(_SEED_CACHE[name])


class Case(tuple):
    """(description, file bytes) whose repr stays short in hypothesis' failure reports."""

    def __repr__(self) -> str:
        return f"Case({self[0]!r}, <{len(self[1])} bytes>)"


@st.composite
def mutated(draw, seeds=tuple(SEEDS)) -> Case:
    """(description, file bytes): a seed with 1-3 structural mutations."""
    name = draw(st.sampled_from(seeds))
    g = seed(name)
    muts = draw(st.lists(st.sampled_from(MUTATORS), min_size=1, max_size=3))
    for m in muts:
        m(g, draw)
    b = bytearray(g.encode())
    raw = getattr(g, "raw", None)
    if raw is not None:
        for pos, rep in raw.edits:
            b[pos:pos + len(rep)] = rep
    return Case((f"{name}: {', '.join(m.__name__ for m in muts)}", bytes(b)))


@contextlib.contextmanager
def hang_guard(seconds: float = HANG_S):
    """Kill the test process with a traceback if the block runs longer than ``seconds``."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def expect_clean(fn, what: str):
    """Run ``fn``; only success or a ToolkitError is acceptable (anything else is a crash)."""
    try:
        with hang_guard():
            fn()
    except ToolkitError as e:
        msg = str(e)
        assert msg and "\n" not in msg.strip(), f"{what}: error message is not one line: {msg!r}"
        return e
    return None


# Outcomes per target, {target: {outcome: n}}; written as JSON to $TOOLKIT_FUZZ_REPORT at exit
# (the figures of the README's reliability table come from there).
OUTCOMES: dict[str, dict[str, int]] = {}


def record(target: str, outcome: str) -> None:
    d = OUTCOMES.setdefault(target, {})
    d[outcome] = d.get(outcome, 0) + 1


def _dump_outcomes() -> None:
    out = os.environ.get("TOOLKIT_FUZZ_REPORT")
    if out and OUTCOMES:
        import json
        try:
            with open(out) as fh:
                prev = json.load(fh)
        except (OSError, ValueError):
            prev = {}
        for tgt, d in OUTCOMES.items():
            for k_, v in d.items():
                prev.setdefault(tgt, {})[k_] = prev.get(tgt, {}).get(k_, 0) + v
        with open(out, "w") as fh:
            json.dump(prev, fh, indent=1, sort_keys=True)


import atexit  # noqa: E402
atexit.register(_dump_outcomes)


def cli(argv: list[str]) -> tuple[int, str, str]:
    """Run the toolkit CLI in this process; (exit code, stdout, stderr)."""
    from toolkit.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["toolkit"] + argv
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), hang_guard():
            main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    return code, out.getvalue(), err.getvalue()


def read_and_describe(path: str) -> None:
    """What `toolkit info --json` does, plus reading every key's value and every tensor's bytes."""
    from toolkit.cli.cmd_info import describe
    from toolkit.gguf_io import GGUFFile
    import json

    f = GGUFFile(path)
    for key in f.keys():
        f.get(key)
    for t in f:
        assert t.offset + t.nbytes <= os.path.getsize(path)
        f.raw(t.name)
    json.dumps(describe(path), default=str)

