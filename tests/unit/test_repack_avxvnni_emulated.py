"""The AVX-VNNI tiles of the repacked formats (quants/x86/repack_avxvnni.c, repack_avx2_tiles.h with
RPY_VNNI 1) checked on machines without AVX-VNNI: the source compiled with -DTK_EMULATE_AVXVNNI
(SIMDe in place of <immintrin.h>, no target attribute: tk_avxvnni.h) into a small shared library
whose other symbols (the drives, tk_rp_q4x_table) resolve against the loaded toolkit._native.
Every type's VNNI rows kernel must give the scalar tiles' bits (repack.h: one float order at
every level) on the same re-laid matrix and activations, tile remainders in rows (M 13, 37)
and tokens (21).  On an AVX-VNNI machine test_repack.py runs the same kernels natively.

Skipped, naming what is missing, where gcc or the SIMDe headers (Debian: libsimde-dev) are absent.
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
import toolkit._native as native_mod
from toolkit.binding import lib

pytestmark = pytest.mark.native

T = gguf.GGMLQuantizationType
NATIVE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "toolkit", "native")
CFLAGS = ["-std=gnu11", "-fno-strict-aliasing", "-fPIC", "-Wall", "-Wno-unused-function", "-Wno-psabi", "-I", NATIVE]
# type -> (kernel stem, activation quantizer, activation block: elements, bytes)
TYPES = {T.Q8_0: ("q8_0", "tk_quantize_act_q8_0", 32, 34), T.Q4_0: ("q4_0", "tk_quantize_act_q8_0", 32, 34),
         T.IQ4_NL: ("iq4_nl", "tk_quantize_act_q8_0", 32, 34), T.Q4_K: ("q4_K", "tk_quantize_act_q8_K", 256, 292),
         T.Q5_K: ("q5_K", "tk_quantize_act_q8_K", 256, 292), T.Q6_K: ("q6_K", "tk_quantize_act_q8_K", 256, 292),
         T.IQ4_XS: ("iq4_xs", "tk_quantize_act_q8_K", 256, 292)}
ROWS = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
ROWS_FN = ctypes.CFUNCTYPE(None, *ROWS)


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    if not shutil.which("gcc"):
        pytest.skip("AVX-VNNI emulation: gcc not found")
    probe = subprocess.run(["gcc", "-E", "-x", "c", "-", "-o", os.devnull], input="#include <simde/x86/avx512.h>\n",
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("AVX-VNNI emulation: SIMDe headers (simde/x86/avx512.h; Debian: libsimde-dev) not found")
    d = tmp_path_factory.mktemp("rpvnni")
    obj, so = str(d / "repack_avxvnni.o"), str(d / "librpvnni.so")
    r = subprocess.run(["gcc", *CFLAGS, "-O0", "-DTK_EMULATE_AVXVNNI", "-c",
                        os.path.join(NATIVE, "quants", "x86", "repack_avxvnni.c"), "-o", obj], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    if shutil.which("objdump"):   # no VNNI instruction (VEX or EVEX), nor any 256-bit one: this machine would SIGILL
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True, text=True, check=True).stdout
        assert "vpdp" not in asm and "%ymm" not in asm
    r = subprocess.run(["gcc", "-shared", "-o", so, obj, "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    # the drives and the nibble table from the extension already loaded, made global for the new library
    nat = ctypes.CDLL(native_mod.__file__, mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(so), nat


@pytest.mark.parametrize("K,M", [(256, 13), (768, 16), (2048, 37)])
@pytest.mark.parametrize("qtype", list(TYPES), ids=lambda t: t.name)
def test_emulated_avxvnni_tiles_equal_scalar_bits(emu, qtype, K, M):
    vnni, nat = emu
    stem, quantizer, blck, blk_bytes = TYPES[qtype]
    rng = np.random.default_rng(int(qtype) * 1000 + K + M)
    w = rng.standard_normal((M, K)).astype(np.float32) * 0.1
    w[3] *= 8.0
    w[7] = 0.5 + 0.01 * w[7]
    x = rng.standard_normal((21, K)).astype(np.float32)
    x[9, ::7] *= 30.0
    raw = np.ascontiguousarray(qref.quantize_rows(qtype, w))
    rp = np.zeros(lib.tk_repack_matrix_bytes(int(qtype), K, M), np.uint8)
    nat.tk_repack_matrix.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    nat.tk_repack_matrix(int(qtype), raw.ctypes.data, raw.shape[1], K, M, rp.ctypes.data)
    q = getattr(nat, quantizer)
    q.argtypes, q.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    a = np.zeros((x.shape[0], K // blck * blk_bytes), np.uint8)
    for t in range(x.shape[0]):
        q(x[t].ctypes.data, a[t].ctypes.data, K)
    nat.tk_rp_prep_bytes.argtypes, nat.tk_rp_prep_bytes.restype = [ctypes.c_int64, ctypes.c_int64], ctypes.c_size_t
    prep = np.zeros(nat.tk_rp_prep_bytes(x.shape[0], K), np.uint8)
    nat.tk_rp_prep.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                               ctypes.c_int64, ctypes.c_void_p]
    nat.tk_rp_prep(int(qtype), a.ctypes.data, a.shape[1], K, a.shape[0], 0, a.shape[0], prep.ctypes.data)
    nat.tk_repack_rows.argtypes, nat.tk_repack_rows.restype = [ctypes.c_int, ctypes.c_int, ctypes.c_int], ctypes.c_void_p
    scalar = ROWS_FN(nat.tk_repack_rows(int(qtype), lib.TK_CPU_SCALAR, 0))
    emulated = getattr(vnni, f"tk_rp_avxvnni_rows_{stem}")
    emulated.argtypes, emulated.restype = ROWS, None
    ng = (M + 15) // 16
    ys = []
    for fn in (scalar, emulated):
        y = np.full((x.shape[0], M), np.nan, np.float32)
        fn(rp.ctypes.data, K, M, a.ctypes.data, a.shape[1], a.shape[0], prep.ctypes.data, y.ctypes.data, M, 0, ng)
        ys.append(y)
    assert np.all(np.isfinite(ys[0]))
    np.testing.assert_array_equal(ys[1], ys[0])
