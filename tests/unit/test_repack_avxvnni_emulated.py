"""The AVX-VNNI tiles of the repacked formats (quants/x86/repack_avxvnni.c, repack_avx2_tiles.h
with RPY_VNNI 1) checked on machines without AVX-VNNI: the tiles header is compiled with
-DTK_EMULATE_AVXVNNI (tk_avxvnni.h: SIMDe's vpdpbusd, no target attribute) under other names
(tk_rp_emu_rows_*) into a small shared library linked against toolkit._native's re-laying,
per-token terms and scalar tiles (repack.c).  For each repacked integer type, on random rows
(a part-filled last group, several K, n_tok 1..21: token quads and remainders) every output
must have the scalar tiles' bits, as test_repack.py asks of the kernels the machine runs.

Skipped, naming what is missing, where gcc or the SIMDe headers (Debian: libsimde-dev) are
absent.  On a machine with AVX-VNNI the same tiles also run natively in test_repack.py.
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

NATIVE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "toolkit", "native")
T = gguf.GGMLQuantizationType
# type -> the emulated rows function's stem
TYPES = {T.Q8_0: "q8_0", T.Q4_0: "q4_0", T.IQ4_NL: "iq4_nl", T.Q4_K: "q4_K", T.Q6_K: "q6_K"}

EMU_C = r"""
#include "quants/x86/tk_avxvnni.h"
#define RPY TK_AVXVNNI_TARGET
#define RPY_NAME(x) tk_rp_emu_##x
#define RPY_VNNI 1
#include "quants/x86/repack_avx2_tiles.h"
"""

# re-lay W, quantize the activations, the per-token terms, then the emulated rows and the scalar
# tiles (tk_repack_rows at TK_CPU_SCALAR) over all groups: y_emu, y_ref [n_tok][M]
DRIVER_C = r"""
#include <stdlib.h>
#include "quants/repack.h"
#include "tk_testing.h"
#define DECL(n) void tk_rp_emu_rows_##n(const uint8_t *, int64_t, int64_t, const uint8_t *, size_t, int64_t, \
                                       const uint8_t *, float *, int64_t, int64_t, int64_t);
DECL(q8_0) DECL(q4_0) DECL(iq4_nl) DECL(q4_K) DECL(q6_K)
int emu_check(int type, const uint8_t * w, size_t row_bytes, int64_t K, int64_t M, const float * x, int64_t n_tok,
              float * y_emu, float * y_ref) {
    const int kq = type == TK_GGML_Q4_K || type == TK_GGML_Q6_K;
    const size_t ab = kq ? (size_t) (K / 256) * sizeof(blk_q8_K) : (size_t) (K / 32) * sizeof(blk_q8_0);
    uint8_t * a = malloc(ab * n_tok), * wp = malloc(tk_repack_matrix_bytes(type, K, M)), * prep = malloc(tk_rp_prep_bytes(n_tok, K));
    if (!a || !wp || !prep) return -1;
    for (int64_t t = 0; t < n_tok; t++) (kq ? tk_quantize_act_q8_K : tk_quantize_act_q8_0)(x + t * K, a + t * ab, K);
    tk_repack_matrix(type, w, row_bytes, K, M, wp);
    tk_rp_prep(type, a, ab, K, n_tok, 0, n_tok, prep);
    const int64_t ng = (M + TK_RP_ROWS - 1) / TK_RP_ROWS;
    tk_rp_rows_fn emu = type == TK_GGML_Q8_0 ? tk_rp_emu_rows_q8_0 : type == TK_GGML_Q4_0 ? tk_rp_emu_rows_q4_0
                      : type == TK_GGML_IQ4_NL ? tk_rp_emu_rows_iq4_nl : type == TK_GGML_Q4_K ? tk_rp_emu_rows_q4_K
                      : tk_rp_emu_rows_q6_K;
    emu(wp, K, M, a, ab, n_tok, prep, y_emu, M, 0, ng);
    tk_repack_rows(type, TK_CPU_SCALAR, 0)(wp, K, M, a, ab, n_tok, prep, y_ref, M, 0, ng);
    free(a); free(wp); free(prep);
    return 0;
}
"""


def _missing() -> str | None:
    if not shutil.which("gcc"):
        return "gcc not found"
    probe = subprocess.run(["gcc", "-E", "-x", "c", "-", "-o", os.devnull], input="#include <simde/x86/avx512.h>\n",
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return "SIMDe headers (simde/x86/avx512.h; Debian: libsimde-dev) not found"
    return None


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    """ctypes handle of emu_check; toolkit._native re-opened RTLD_GLOBAL so that the library's
    undefined symbols (the re-laying, the scalar tiles) resolve to it."""
    why = _missing()
    if why:
        pytest.skip(f"AVX-VNNI emulation: {why}")
    from toolkit import _native
    ctypes.CDLL(_native.__file__, mode=ctypes.RTLD_GLOBAL)
    d = tmp_path_factory.mktemp("rpvnni")
    flags = ["-std=gnu11", "-fno-strict-aliasing", "-fPIC", "-Wall", "-Wno-unused-function", "-Wno-psabi", "-I", NATIVE]
    objs = []
    for name, src, opt in (("emu", EMU_C, ["-O0", "-DTK_EMULATE_AVXVNNI"]), ("driver", DRIVER_C, ["-O1"])):
        (d / f"{name}.c").write_text(src)
        r = subprocess.run(["gcc", *flags, *opt, "-c", str(d / f"{name}.c"), "-o", str(d / f"{name}.o")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        objs.append(str(d / f"{name}.o"))
    if shutil.which("objdump"):   # no VNNI instruction (VEX or EVEX), nor any 256-bit one: it runs here
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", objs[0]], capture_output=True, text=True,
                             check=True).stdout
        assert "vpdp" not in asm and "%ymm" not in asm
    so = str(d / "librpvnni.so")
    r = subprocess.run(["gcc", "-shared", "-o", so, *objs, "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    lib = ctypes.CDLL(so)
    f = lib.emu_check
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                  ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    f.restype = ctypes.c_int
    return f


@pytest.mark.parametrize("qtype", list(TYPES), ids=lambda t: t.name)
def test_emulated_avxvnni_repacked_tiles_equal_scalar_bits(emu, qtype):
    rng = np.random.default_rng(int(qtype) + 7)
    Ks = (256, 768) if qtype in (T.Q4_K, T.Q6_K) else (32, 96, 1024)
    for K in Ks:
        for M, n_tok in ((13, 1), (16, 5), (37, 21), (3, 8)):
            w = (rng.standard_normal((M, K)) * rng.uniform(0.02, 0.3, (M, 1))).astype(np.float32)
            raw = np.ascontiguousarray(qref.quantize_rows(qtype, w))
            x = (rng.standard_normal((n_tok, K)) * rng.uniform(0.1, 10.0, (n_tok, 1))).astype(np.float32)
            y_emu = np.full((n_tok, M), np.nan, np.float32)
            y_ref = np.full((n_tok, M), np.nan, np.float32)
            assert emu(int(qtype), raw.ctypes.data, raw.shape[1], K, M, x.ctypes.data, n_tok, y_emu.ctypes.data,
                       y_ref.ctypes.data) == 0
            assert np.isfinite(y_ref).all()
            diff = np.argwhere(y_emu.view(np.uint32) != y_ref.view(np.uint32))
            assert not len(diff), f"{qtype.name} K={K} M={M} n_tok={n_tok}: {len(diff)} outputs differ from the scalar " \
                                  f"tiles, first (token, row) {tuple(diff[0])}: {y_emu[tuple(diff[0])]!r} vs {y_ref[tuple(diff[0])]!r}"
