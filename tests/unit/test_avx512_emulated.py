"""The AVX-512 kernels (qdot_avx512.c, qdot_kquants_avx512.c) and the AVX-VNNI ones
(qdot_avxvnni.c) checked on machines without AVX-512 or AVX-VNNI: their sources are compiled
with -DTK_EMULATE_AVX512 (qdot_avxvnni.c: -DTK_EMULATE_AVXVNNI, the same SIMDe build through
tk_avxvnni.h), which puts SIMDe's portable intrinsics in place of <immintrin.h> and drops the
target attributes (tk_avx512.h), and linked with the native AVX2 and scalar kernels of the
same sources into a small shared library in a tmp dir (ctypes).  On random rows (tile
remainders in rows and tokens, several K, n_tok 1..40) every AVX-512 and AVX-VNNI kernel must
give the AVX2 kernel's bits (their operation order per output is the same by construction)
and agree with the scalar kernel to the AVX2 level's tolerance (qref.bound).

The BF16 x BF16 kernel (qdot_bf16_avx512.c) has no AVX2 twin: it must give, bit for bit, a
float64 model of VDPBF16PS on bf16-rounded activations (qref.vdpbf16ps), and its f32 -> bf16
conversion a by-distance rounding reference (qref.bf16_bits).

Skipped, naming what is missing, where gcc or the SIMDe headers (Debian: libsimde-dev) are
absent.  On a machine with AVX-512 (AVX-VNNI) the same kernels also run natively in
test_dispatch.py.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import gguf
import numpy as np
import pytest

import qref

# not `native`: the kernels run from the library built here (ctypes), never toolkit._native, so
# the sanitizer phase of .ci/run would only repeat this file

NATIVE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "toolkit", "native")
# sources, relative to NATIVE
EMULATED = ("quants/x86/qdot_avx512.c", "quants/x86/qdot_kquants_avx512.c", "quants/x86/qdot_bf16_avx512.c")   # AVX-512
EMULATED_VNNI = ("quants/x86/qdot_avxvnni.c",)                                                            # AVX-VNNI
NATIVE_SRC = ("quants/x86/qdot_legacy_avx2.c", "quants/x86/qdot_kquants_avx2.c", "quants/qdot.c", "quants/qdot_kquants.c",
              "quants/x86/qdot_avx2.c", "quants/quants_iquants.c")
CFLAGS = ["-std=gnu11", "-fno-strict-aliasing", "-fPIC", "-Wall", "-Wno-unused-function", "-Wno-psabi", "-I", NATIVE]
T = gguf.GGMLQuantizationType
# weight type -> (kernel name stem, activation quantizer, activation block: elements, bytes)
KERNELS = {T.Q8_0: ("q8_0", "tk_quantize_act_q8_0", 32, 34), T.Q4_K: ("q4_K", "tk_quantize_act_q8_K", 256, 292),
           T.Q5_K: ("q5_K", "tk_quantize_act_q8_K", 256, 292), T.Q6_K: ("q6_K", "tk_quantize_act_q8_K", 256, 292),
           T.Q3_K: ("q3_K", "tk_quantize_act_q8_K", 256, 292), T.Q2_K: ("q2_K", "tk_quantize_act_q8_K", 256, 292)}
VNNI_TYPES = tuple(KERNELS)   # qdot_avxvnni.c has the AVX-512 set: Q8_0 and the k-quants Q2_K..Q6_K


def _missing() -> str | None:
    """What the emulated build lacks on this machine, or None."""
    if not shutil.which("gcc"):
        return "gcc not found"
    probe = subprocess.run(["gcc", "-E", "-x", "c", "-", "-o", os.devnull], input="#include <simde/x86/avx512.h>\n",
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return "SIMDe headers (simde/x86/avx512.h; Debian: libsimde-dev) not found"
    return None


def _obj(src: str) -> str:
    """The object file's name for a source path (the basenames are unique)."""
    return os.path.basename(src)[:-2] + ".o"


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    """ctypes handle of the library: AVX-512 and AVX-VNNI kernels under SIMDe (-O0: SIMDe's
    inlined intrinsics take minutes to optimize), the rest native (-O1)."""
    why = _missing()
    if why:
        pytest.skip(f"AVX-512 / AVX-VNNI emulation: {why}")
    d = tmp_path_factory.mktemp("avx512emu")
    jobs = []
    for src in EMULATED + EMULATED_VNNI + NATIVE_SRC:
        flags = ["-O0", "-DTK_EMULATE_AVX512"] if src in EMULATED else \
            ["-O0", "-DTK_EMULATE_AVXVNNI"] if src in EMULATED_VNNI else ["-O1"]
        obj = str(d / _obj(src))
        jobs.append((obj, subprocess.Popen(["gcc", *CFLAGS, *flags, "-c", os.path.join(NATIVE, src), "-o", obj],
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    for obj, p in jobs:
        out, _ = p.communicate()
        assert p.returncode == 0, out[-3000:]
    so = str(d / "libtk_avx512emu.so")
    r = subprocess.run(["gcc", "-shared", "-o", so, *(o for o, _ in jobs), "-Wl,--no-undefined", "-lm"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    # the emulated kernels must not hold a single AVX-512 instruction (this machine would SIGILL)
    if shutil.which("objdump"):
        for src in EMULATED:
            asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(d / _obj(src))],
                                 capture_output=True, text=True, check=True).stdout
            assert "%zmm" not in asm, f"the emulated build of {src} holds AVX-512 instructions"
        for src in EMULATED_VNNI:   # no VNNI instruction (VEX or EVEX), nor any 256-bit one
            asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(d / _obj(src))],
                                 capture_output=True, text=True, check=True).stdout
            assert "vpdp" not in asm and "%ymm" not in asm, f"the emulated build of {src} holds AVX(-VNNI) instructions"
    return ctypes.CDLL(so)


def _rows_fn(lib, name):
    f = getattr(lib, name)
    f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64,
                  ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    f.restype = None
    return f


def _act(lib, quantizer, x, blck, blk_bytes):
    f = getattr(lib, quantizer)
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    f.restype = None
    T_, K = x.shape
    a = np.zeros((T_, K // blck * blk_bytes), np.uint8)
    for t in range(T_):
        f(x[t].ctypes.data, a[t].ctypes.data, K)
    return a


def _run(fn, raw, K, a, ldy, r0, r1, y):
    fn(raw.ctypes.data, raw.shape[1], K, a.ctypes.data, a.shape[1], a.shape[0], y.ctypes.data, ldy, r0, r1)


@pytest.mark.parametrize("qtype", list(KERNELS), ids=lambda t: t.name)
def test_emulated_avx512_bit_identical_to_avx2(emu, qtype):
    """Every output of the AVX-512 kernel has the AVX2 kernel's bits, for tile remainders in
    rows (1..18, a row range r0 > 0 of a larger matrix) and tokens (1..40: pairs, an odd
    token, several token groups), at several K; and agrees with the scalar kernel within the
    AVX2 tolerance (qref.bound)."""
    _check_bit_identical_to_avx2(emu, qtype, "avx512")


@pytest.mark.parametrize("qtype", VNNI_TYPES, ids=lambda t: t.name)
def test_emulated_avxvnni_bit_identical_to_avx2(emu, qtype):
    """The same for the AVX-VNNI kernels (qdot_avxvnni.c: Q8_0's 4 x 2 tiles, the k-quants'
    1 x 8 tiles in chunks of 16 rows; generation through the AVX2 kernel)."""
    _check_bit_identical_to_avx2(emu, qtype, "avxvnni")


def _check_bit_identical_to_avx2(emu, qtype, level):
    stem, quantizer, blck, blk_bytes = KERNELS[qtype]
    z, v2, sc = (_rows_fn(emu, f"tk_qdot_rows_{stem}_{lv}") for lv in (level, "avx2", "scalar"))
    rng = np.random.default_rng(int(qtype))
    Ks = (32, 96, 1024) if blck == 32 else (256, 768)
    # 18: two k-quant row chunks; 13, 14, 7, 5: token groups of 5..7 (AVX-VNNI's Q4_K / Q5_K
    # tiles start at 5 tokens; fewer go to the AVX2 kernel inside the same call)
    cases = ((1, 2), (4, 8), (5, 3), (9, 19), (3, 40), (7, 1), (2, 33), (18, 9), (3, 13), (6, 14), (2, 7), (4, 5))
    for K in Ks:
        for M, n_tok in cases:
            w = (rng.standard_normal((M + 2, K)) * rng.uniform(0.02, 0.3, (M + 2, 1))).astype(np.float32)
            raw = np.ascontiguousarray(qref.quantize_rows(qtype, w))
            x = (rng.standard_normal((n_tok, K)) * rng.uniform(0.1, 10.0, (n_tok, 1))).astype(np.float32)
            a = _act(emu, quantizer, x, blck, blk_bytes)
            ldy = M + 5
            r0, r1 = 1, M + 1                                  # a row range inside the matrix
            ys = {}
            for name, fn in ((level, z), ("avx2", v2), ("scalar", sc)):
                y = np.full((n_tok, ldy), np.nan, np.float32)
                _run(fn, raw, K, a, ldy, r0, r1, y)
                ys[name] = y
                assert np.isnan(y[:, :r0]).all() and np.isnan(y[:, r1:]).all(), (name, "wrote outside [r0, r1)")
            got, want = ys[level][:, r0:r1], ys["avx2"][:, r0:r1]
            diff = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
            assert not len(diff), f"{level} {qtype.name} K={K} M={M} n_tok={n_tok}: {len(diff)} outputs differ from AVX2, " \
                                  f"first (token, row) {tuple(diff[0])}: {got[tuple(diff[0])]!r} vs {want[tuple(diff[0])]!r}"
            wf = qref.dequantize_rows(qtype, raw[r0:r1], K)
            err = np.abs(got.astype(np.float64) - ys["scalar"][:, r0:r1])
            assert np.all(err <= qref.bound(qtype, wf, x) + 1e-30), (qtype.name, K, M, n_tok)


# ---- BF16 x BF16 (qdot_bf16_avx512.c, VDPBF16PS) ---------------------------------------

def test_emulated_bf16_activation_conversion(emu):
    """tk_quantize_act_bf16 (f32 -> bf16) rounds to nearest even: ties (both parities),
    values next to a tie, signed zeros, subnormals, the largest floats (to inf), inf, NaN
    (kept quiet), and random values of every magnitude, against a by-distance reference."""
    f = emu.tk_quantize_act_bf16
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    rng = np.random.default_rng(7)
    special = np.array([0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0x00000000, 0x80000000, 0x00000001,
                        0x807fffff, 0x00408000, 0x7f7fffff, 0xff7f8000, 0x7f7f7fff, 0x7f800000, 0xff800000,
                        0x7fc00000, 0x7f800001, 0xffa00000], np.uint32)
    bits = np.concatenate([special, rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32),
                           (rng.integers(0, 2**16, 1000, dtype=np.uint32) << 16) | 0x8000])   # random ties
    x = bits.view(np.float32)
    got = np.zeros(len(x), np.uint16)
    f(x.ctypes.data, got.ctypes.data, len(x))
    want = qref.bf16_bits(x)
    bad = np.flatnonzero(got != want)
    assert not len(bad), f"{len(bad)} conversions differ, first {bits[bad[0]]:#010x}: {got[bad[0]]:#06x} vs {want[bad[0]]:#06x}"


def test_emulated_bf16_kernel_matches_vdpbf16ps_semantics(emu):
    """tk_qdot_rows_bf16_avx512 gives, bit for bit, the float64 model of VDPBF16PS on
    bf16-rounded activations (qref.vdpbf16ps), for row remainders of the 8/4-row tiles
    (1..18 rows inside a larger matrix), token remainders of the 6-token tiles (n_tok 1..40),
    K with and without a partial last chunk; and agrees with the float64 dot of the same bf16
    values within the recursive-summation bound."""
    fn = _rows_fn(emu, "tk_qdot_rows_bf16_avx512")
    conv = emu.tk_quantize_act_bf16
    conv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    rng = np.random.default_rng(30)
    cases = ((1, 2), (4, 8), (5, 3), (9, 19), (3, 40), (7, 1), (2, 33), (18, 9), (13, 1), (12, 7), (11, 6))
    for K in (32, 70, 96, 1000):
        for M, n_tok in cases:
            w = (rng.standard_normal((M + 2, K)) * rng.uniform(0.02, 0.3, (M + 2, 1))).astype(np.float32)
            raw = np.ascontiguousarray(qref.bf16_bits(w)).view(np.uint8)
            x = (rng.standard_normal((n_tok, K)) * rng.uniform(0.1, 10.0, (n_tok, 1))).astype(np.float32)
            a = np.zeros((n_tok, 2 * K), np.uint8)
            for t in range(n_tok):
                conv(x[t].ctypes.data, a[t].ctypes.data, K)
            ldy = M + 5
            r0, r1 = 1, M + 1
            y = np.full((n_tok, ldy), np.nan, np.float32)
            _run(fn, raw, K, a, ldy, r0, r1, y)
            assert np.isnan(y[:, :r0]).all() and np.isnan(y[:, r1:]).all(), "wrote outside [r0, r1)"
            got = y[:, r0:r1]
            wb, ab = raw.view(np.uint16)[r0:r1], a.view(np.uint16)
            want = qref.vdpbf16ps(wb, ab)
            diff = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
            assert not len(diff), f"K={K} M={M} n_tok={n_tok}: {len(diff)} outputs differ from the VDPBF16PS model, " \
                                  f"first (token, row) {tuple(diff[0])}: {got[tuple(diff[0])]!r} vs {want[tuple(diff[0])]!r}"
            wf = (wb.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            af = (ab.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            exact = af @ wf.T
            bound = (K / 16 + 5) * 2.0**-24 * (np.abs(af) @ np.abs(wf).T)
            assert np.all(np.abs(got - exact) <= bound), (K, M, n_tok)



def test_emulated_bf16_kernel_flushes_denormals(emu):
    """Inputs below 2^-126 count as zero (DAZ) and sums that land there are flushed (FTZ), as
    the instruction does: weights and activations of every magnitude from 2^-140 up, against
    the model bit for bit; and an all-subnormal product gives +-0, not its float value."""
    fn = _rows_fn(emu, "tk_qdot_rows_bf16_avx512")
    rng = np.random.default_rng(32)
    K, M, n_tok = 96, 6, 5
    w = (rng.standard_normal((M, K)) * np.exp2(rng.uniform(-140, -100, (M, K)))).astype(np.float32)
    x = (rng.standard_normal((n_tok, K)) * np.exp2(rng.uniform(-40, 0, (n_tok, K)))).astype(np.float32)
    raw = np.ascontiguousarray(qref.bf16_bits(w)).view(np.uint8)
    a = np.ascontiguousarray(qref.bf16_bits(x)).view(np.uint8)
    assert (np.abs(qref.bf16_float(raw.view(np.uint16))) < 2.0**-126).mean() > 0.3     # many subnormal weights
    y = np.zeros((n_tok, M), np.float32)
    _run(fn, raw, K, a, M, 0, M, y)
    want = qref.vdpbf16ps(raw.view(np.uint16), a.view(np.uint16))
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
    tiny = np.full((1, 32), 2.0**-130, np.float32)                       # subnormal: DAZ
    one = np.ones((1, 32), np.float32)
    y1 = np.full((1, 1), np.nan, np.float32)
    _run(fn, np.ascontiguousarray(qref.bf16_bits(tiny)).view(np.uint8), 32,
         np.ascontiguousarray(qref.bf16_bits(one)).view(np.uint8), 1, 0, 1, y1)
    assert y1[0, 0] == 0.0


def test_emulated_bf16_kernel_ubatch_and_thread_split_invariant(emu):
    """A token's outputs do not depend on the ubatch it is in or on the row range a thread
    takes: 40 tokens at once == token groups of 1, 5, 6, 7, 21 == row ranges [0, 5), [5, 6),
    [6, 19), bit for bit."""
    fn = _rows_fn(emu, "tk_qdot_rows_bf16_avx512")
    rng = np.random.default_rng(31)
    K, M, n_tok = 200, 19, 40
    raw = np.ascontiguousarray(qref.bf16_bits(rng.standard_normal((M, K)).astype(np.float32))).view(np.uint8)
    a = np.ascontiguousarray(qref.bf16_bits(rng.standard_normal((n_tok, K)).astype(np.float32))).view(np.uint8)
    whole = np.zeros((n_tok, M), np.float32)
    _run(fn, raw, K, a, M, 0, M, whole)
    split = np.zeros_like(whole)
    t = 0
    for n in (1, 5, 6, 7, 21):
        part = np.ascontiguousarray(a[t:t + n])
        y = np.zeros((n, M), np.float32)
        _run(fn, raw, K, part, M, 0, M, y)
        split[t:t + n] = y
        t += n
    rows = np.zeros_like(whole)
    for r0, r1 in ((0, 5), (5, 6), (6, 19)):
        _run(fn, raw, K, a, M, r0, r1, rows)
    assert np.array_equal(whole.view(np.uint32), split.view(np.uint32))
    assert np.array_equal(whole.view(np.uint32), rows.view(np.uint32))
