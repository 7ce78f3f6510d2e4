"""Run-time CPU dispatch: every kernel level this machine supports gives the scalar path's
results (to float reordering), each level is deterministic and ubatch-split invariant,
and TOOLKIT_CPU caps the level."""
from __future__ import annotations

import os
import subprocess
import sys

import gguf
import numpy as np
import pytest

import qref

from toolkit.binding import ffi, lib

pytestmark = pytest.mark.native

LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2, lib.TK_CPU_AVX512) if lv <= lib.tk_cpu_detected()]
NAMES = {lv: ffi.string(lib.tk_cpu_level_name(lv)).decode() for lv in LEVELS}


def _mat_mul(qtype: int, raw: np.ndarray, K: int, M: int, x: np.ndarray) -> np.ndarray:
    return qref.mat_mul(qtype, raw, K, x)


def _weights(qtype, M, K, rng):
    w = (rng.standard_normal((M, K)) * 0.1).astype(np.float32)
    if qtype == gguf.GGMLQuantizationType.F32:
        return np.ascontiguousarray(w)
    if qtype == gguf.GGMLQuantizationType.F16:
        return np.ascontiguousarray(w.astype(np.float16))
    return qref.quantize_rows(qtype, w)


def _dequant(qtype, raw, M, K):
    return qref.dequantize_rows(qtype, raw, K)


TYPES = [gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16,
         gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_K,
         gguf.GGMLQuantizationType.Q6_K]


def test_levels_named_and_env_caps():
    assert lib.tk_cpu_level() <= lib.tk_cpu_detected()
    feats = ffi.string(lib.tk_cpu_features()).decode()
    assert feats
    code = ("from toolkit.binding import lib, ffi;"
            "print(lib.tk_cpu_level(), lib.tk_cpu_detected(), lib.tk_type_vec_dot_type_at(30, lib.tk_cpu_level()))")
    has_bf16 = lib.tk_cpu_has_avx512bf16()
    assert not has_bf16 or ("avx512bf16" in feats and lib.tk_cpu_detected() == lib.TK_CPU_AVX512)
    has_vnni = lib.tk_cpu_has_avxvnni()
    assert has_vnni == ("avxvnni" in feats.split() and lib.tk_cpu_detected() >= lib.TK_CPU_AVX2)
    code += ";print(lib.tk_cpu_avxvnni())"
    for name, want in (("scalar", 0), ("avx2", 1), ("avx2-novnni", 1), ("avx512", 2), ("bogus", 0), ("neon", 0)):   # neon: not x86
        env = dict(os.environ, TOOLKIT_CPU=name)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
        level, detected, bf16_act, vnni = int(out[0]), int(out[1]), int(out[2]), int(out[3])
        assert level == min(want, detected), (name, out)
        # BF16 weights take bf16 activations only at avx512 on an AVX512_BF16 machine
        assert bf16_act == (30 if level == lib.TK_CPU_AVX512 and has_bf16 else 0), (name, out)
        # the AVX-VNNI kernels: on where the machine has them, but for avx2-novnni
        assert vnni == (has_vnni and name != "avx2-novnni"), (name, out)


def test_avxvnni_switch(avxvnni):
    """tk_cpu_set_avxvnni turns the AVX-VNNI kernels off, and on only where the machine has
    them (never on this machine if it lacks AVX-VNNI: the kernels would raise SIGILL)."""
    has = lib.tk_cpu_has_avxvnni()
    assert avxvnni(0) == 0 and lib.tk_cpu_avxvnni() == 0
    assert avxvnni(1) == has and lib.tk_cpu_avxvnni() == has


def test_activation_type_per_level():
    """The activation type of each weight type per level (tk_type_vec_dot_type): BF16 weights
    switch to bf16 activations only at avx512 with AVX512_BF16; every other type keeps its
    own at every level."""
    T = gguf.GGMLQuantizationType
    for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2, lib.TK_CPU_AVX512, lib.TK_CPU_NEON):
        bf16 = lv == lib.TK_CPU_AVX512 and lib.tk_cpu_has_avx512bf16()
        want = {T.F32: 0, T.F16: 0, T.BF16: 30 if bf16 else 0, T.Q8_0: 8, T.Q4_0: 8, T.Q4_1: 9, T.Q4_K: 15, T.Q6_K: 15}
        for t, v in want.items():
            assert lib.tk_type_vec_dot_type_at(int(t), lv) == v, (t.name, lv)


@pytest.mark.parametrize("qtype,K", [(t, K) for t in TYPES for K in (256, 264, 1024) if K % gguf.GGML_QUANT_SIZES[t][0] == 0],
                         ids=lambda v: v.name if hasattr(v, "name") else str(v))
def test_levels_agree_with_scalar(qtype, K, at_level):
    rng = np.random.default_rng(K + int(qtype))
    M, T = 21, 7
    raw = _weights(qtype, M, K, rng)
    x = rng.standard_normal((T, K)).astype(np.float32)
    at_level(lib.TK_CPU_SCALAR)
    ref = _mat_mul(qtype, raw, K, M, x)
    for lv in LEVELS[1:]:
        assert at_level(lv) == lv
        got = _mat_mul(qtype, raw, K, M, x)
        want = ref
        if qref.bf16_in_force(qtype):     # the BF16 kernel: against the scalar path on bf16-rounded x
            xr = qref.act_values(qtype, x)
            at_level(lib.TK_CPU_SCALAR)
            want = _mat_mul(qtype, raw, K, M, xr)
            at_level(lv)
        # float reordering: |err| <= a few ulps of sum |w x| (x as the kernel sees it)
        wf = _dequant(qtype, raw, M, K) if qtype != gguf.GGMLQuantizationType.F32 else raw
        assert np.all(np.abs(got - want) <= qref.bound(qtype, wf, x) + 1e-30), NAMES[lv]


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_token_result_independent_of_batch(qtype, at_level):
    """Per level, a token's outputs are bit-identical alone (mat-vec path) or in any batch
    (mat-mat path, tiles of 4 tokens)."""
    K, M, T = 512, 13, 11
    rng = np.random.default_rng(7)
    raw = _weights(qtype, M, K, rng)
    x = rng.standard_normal((T, K)).astype(np.float32)
    for lv in LEVELS:
        at_level(lv)
        full = _mat_mul(qtype, raw, K, M, x)
        for t in range(T):
            one = _mat_mul(qtype, raw, K, M, np.ascontiguousarray(x[t:t + 1]))
            assert np.array_equal(one[0], full[t]), (NAMES[lv], t)
        part = _mat_mul(qtype, raw, K, M, np.ascontiguousarray(x[3:9]))
        assert np.array_equal(part, full[3:9]), NAMES[lv]


FLOAT_TYPES = [gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16]


@pytest.mark.parametrize("qtype", FLOAT_TYPES, ids=lambda t: t.name)
def test_few_token_outputs_bit_identical_to_generation(qtype, at_level):
    """Float weights, n_tok 1..24 (ops_avx2.c's few-token tiles up to TK_FEWTOK_MAX = 16 for
    F16 / BF16 and 3 for F32, the 3 x 4 tiles past it): every token's outputs have the bits of its own n_tok == 1 call
    (the mat-vec), at every level.  K = 5 (no 8-lane step), 203 (K % 8 == 3: the fmaf tail);
    M = 23 rows, not a multiple of any tile's rows (4 and 2), so the 1-row tiles run too.
    Speculative decoding's exactness rests on this (a verify ubatch == plain generation)."""
    rng = np.random.default_rng(20)
    M = 23
    for K in (5, 203):
        raw = _weights(qtype, M, K, rng)
        x = rng.standard_normal((24, K)).astype(np.float32)
        for lv in LEVELS:
            at_level(lv)
            alone = np.concatenate([_mat_mul(qtype, raw, K, M, x[t:t + 1]) for t in range(24)])
            for n in range(2, 25):
                got = _mat_mul(qtype, raw, K, M, x[:n])
                bad = np.argwhere(got.view(np.uint32) != alone[:n].view(np.uint32))
                assert not len(bad), f"{NAMES[lv]} K={K} n_tok={n}: (token, row) {bad[:4].tolist()} differ from n_tok=1"


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: NAMES[lv])
def test_runtime_parity_at_every_level(level, tmp_path):
    """The "Run, correct" parity and memory-invariant tests, re-run with TOOLKIT_CPU capping
    the kernel level (a fresh interpreter: the level is read once per process)."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TOOLKIT_CPU=NAMES[level])
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        os.path.join(tests, "parity", "test_runtime_parity.py"), os.path.join(tests, "memory", "test_runtime_memory.py"),
                        os.path.join(tests, "unit", "test_kernels.py")],
                       env=env, capture_output=True, text=True, cwd=tmp_path)   # not the source tree: the built package
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_expanded_weights_are_the_dequantizers(qtype, at_level):
    """At every level, W x for one-hot x returns W's elements: exactly for the float types
    (the SIMD unpacking gives the floats of tk_dequantize_row, ggml's dequantize_row_*);
    for the integer path, times the quantized one-hot activation (f16(1/127) * 127), to
    a few ulps."""
    K, M = 512, 6
    rng = np.random.default_rng(11)
    raw = _weights(qtype, M, K, rng)
    ref = _dequant(qtype, raw, M, K) if qtype != gguf.GGMLQuantizationType.F32 else raw
    eye = np.eye(K, dtype=np.float32)
    for lv in LEVELS:
        at_level(lv)
        got = _mat_mul(qtype, raw, K, M, eye)          # [K tokens, M rows] = W^T
        if qtype in qref.INTEGER_PATH:
            want = qref.reference(qtype, ref, eye)
            # per row of W: a few ulps of its largest element (the k-quants subtract a minimum)
            scale = np.abs(want).max(axis=0, keepdims=True)
            assert np.all(np.abs(got - want) <= 16 * np.finfo(np.float32).eps * scale), NAMES[lv]
        else:
            assert np.array_equal(got.T, ref), NAMES[lv]


@pytest.mark.parametrize("qtype", sorted(qref.INTEGER_PATH), ids=lambda t: t.name)
def test_non_finite_activations_give_nan_at_every_level(qtype, at_level):
    """An inf or NaN in a token's activations makes that token's outputs NaN (as the float
    path does) at every level, instead of vanishing in the block quantizer; the other tokens
    of the batch are untouched."""
    K, M = 512, 5
    rng = np.random.default_rng(int(qtype))
    raw = qref.quantize_rows(qtype, (rng.standard_normal((M, K)) * 0.1).astype(np.float32))
    x = rng.standard_normal((3, K)).astype(np.float32)
    x[1, 7] = np.nan
    x[2, 300] = np.inf
    for lv in LEVELS:
        at_level(lv)
        y = qref.mat_mul(qtype, raw, K, x)
        assert np.isnan(y[1]).all() and np.isnan(y[2]).all(), NAMES[lv]
        assert np.array_equal(y[0], qref.mat_mul(qtype, raw, K, x[:1])[0]) and np.isfinite(y[0]).all(), NAMES[lv]


AVX512_KERNELS = [(gguf.GGMLQuantizationType.Q8_0, K) for K in (32, 96, 1024, 3584)] + \
    [(t, K) for t in (gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q5_K, gguf.GGMLQuantizationType.Q6_K,
                      gguf.GGMLQuantizationType.Q3_K, gguf.GGMLQuantizationType.Q2_K) for K in (256, 1024)]


@pytest.mark.skipif(lib.tk_cpu_detected() < lib.TK_CPU_AVX512,
                    reason="no AVX-512 F+BW+VL+VNNI with OS zmm state on this machine (test_avx512_emulated.py runs these kernels under SIMDe)")
@pytest.mark.parametrize("qtype,K", AVX512_KERNELS, ids=lambda v: v.name if hasattr(v, "name") else str(v))
def test_avx512_bit_identical_to_avx2(qtype, K, at_level):
    """The AVX-512 VNNI prompt kernels (qdot_avx512.c: Q8_0; qdot_kquants_avx512.c: Q4_K,
    Q5_K, Q6_K, Q3_K, Q2_K) form the same exact integer lanes as the AVX2 ones and then the
    same float operations per output, so every output is bit-identical to AVX2's, for every
    tile remainder (rows 1..9, tokens 1..19: Q8_0's pairs with the odd token paired with
    itself, the k-quants' groups of 8) and in generation (n_tok = 1)."""
    rng = np.random.default_rng(K + int(qtype))
    for M, T in ((1, 2), (4, 8), (5, 3), (9, 19), (7, 1), (3, 16), (21, 7), (6, 15)):
        raw = _weights(qtype, M, K, rng)
        x = (rng.standard_normal((T, K)) * rng.uniform(0.1, 10.0, (T, 1))).astype(np.float32)
        at_level(lib.TK_CPU_AVX2)
        want = _mat_mul(qtype, raw, K, M, x)
        assert at_level(lib.TK_CPU_AVX512) == lib.TK_CPU_AVX512
        got = _mat_mul(qtype, raw, K, M, x)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (qtype.name, K, M, T)


def test_cpu_info_names_avx2_without_vnni(monkeypatch):
    """bench's cpu_level (binding.cpu.cpu_info) says "avx2-novnni" where the level is avx2 on
    an AVX-VNNI machine with those kernels off, so the two halves of an A/B run differ; "avx2"
    where they are on or the machine has none; other levels keep their names."""
    from toolkit.binding import cpu
    for lv, has, on, want in ((lib.TK_CPU_AVX2, True, False, "avx2-novnni"), (lib.TK_CPU_AVX2, True, True, "avx2"),
                              (lib.TK_CPU_AVX2, False, False, "avx2"), (lib.TK_CPU_AVX512, True, False, "avx512"),
                              (lib.TK_CPU_SCALAR, True, False, "scalar")):
        monkeypatch.setattr(cpu, "level", lambda lv=lv: lv)
        monkeypatch.setattr(cpu, "has_avxvnni", lambda has=has: has)
        monkeypatch.setattr(cpu, "avxvnni", lambda on=on: on)
        assert cpu.cpu_info()["cpu_level"] == want, (lv, has, on)


@pytest.fixture
def avxvnni():
    """Turn the AVX-VNNI kernels on / off for a test (tk_cpu_set_avxvnni); the process's state
    is restored after."""
    was = lib.tk_cpu_avxvnni()
    yield lambda on: lib.tk_cpu_set_avxvnni(on)
    lib.tk_cpu_set_avxvnni(was)


VNNI_KERNELS = AVX512_KERNELS   # qdot_avxvnni.c covers the same types: Q8_0, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K


@pytest.mark.skipif(not lib.tk_cpu_has_avxvnni(),
                    reason="no AVX-VNNI (cpuid.(7,1):EAX bit 4) with the avx2 level on this machine "
                           "(test_avx512_emulated.py runs these kernels under SIMDe)")
@pytest.mark.parametrize("qtype,K", VNNI_KERNELS, ids=lambda v: v.name if hasattr(v, "name") else str(v))
def test_avxvnni_bit_identical_to_avx2(qtype, K, at_level, avxvnni):
    """At the avx2 level, the AVX-VNNI prompt kernels (qdot_avxvnni.c: Q8_0, Q4_K, Q5_K,
    Q6_K, Q3_K, Q2_K) give every output the plain AVX2 kernels' bits (exact integer lanes, the same float
    operations), for every tile remainder (rows 1..21, tokens 1..19: Q8_0's pairs, the
    k-quants' groups of 8) and in generation (n_tok = 1, the AVX2 kernel)."""
    rng = np.random.default_rng(K + int(qtype))
    assert at_level(lib.TK_CPU_AVX2) == lib.TK_CPU_AVX2
    for M, T in ((1, 2), (4, 8), (5, 3), (9, 19), (7, 1), (3, 16), (21, 7), (6, 15)):
        raw = _weights(qtype, M, K, rng)
        x = (rng.standard_normal((T, K)) * rng.uniform(0.1, 10.0, (T, 1))).astype(np.float32)
        assert avxvnni(0) == 0
        want = _mat_mul(qtype, raw, K, M, x)
        assert avxvnni(1) == 1
        got = _mat_mul(qtype, raw, K, M, x)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (qtype.name, K, M, T)


NO_BF16 = pytest.mark.skipif(not lib.tk_cpu_has_avx512bf16(),
                             reason="no AVX512_BF16 (with AVX-512 F+BW+VL+VNNI and OS zmm state) on this machine "
                                    "(test_avx512_emulated.py runs the BF16 kernel under SIMDe)")


def _bf16_native_cases(at_level):
    """(K, M, T, got at avx512, x, raw) over the tile remainders (rows 1..21, tokens 1..19,
    generation) and K with a partial last chunk; checks on the way that avx2 gives BF16
    weights the float path back."""
    rng = np.random.default_rng(30)
    for K in (32, 70, 1000):
        for M, T_ in ((1, 2), (4, 8), (5, 3), (9, 19), (7, 1), (13, 1), (21, 7), (6, 15)):
            raw = _weights(gguf.GGMLQuantizationType.BF16, M, K, rng)
            x = (rng.standard_normal((T_, K)) * rng.uniform(0.1, 10.0, (T_, 1))).astype(np.float32)
            assert at_level(lib.TK_CPU_AVX512) == lib.TK_CPU_AVX512
            assert qref.bf16_in_force(gguf.GGMLQuantizationType.BF16)
            got = _mat_mul(gguf.GGMLQuantizationType.BF16, raw, K, M, x)
            at_level(lib.TK_CPU_AVX2)
            assert not qref.bf16_in_force(gguf.GGMLQuantizationType.BF16)
            yield K, M, T_, got, x, raw


@NO_BF16
def test_bf16_kernel_native_within_bound(at_level):
    """At avx512 on an AVX512_BF16 machine, BF16 weights go through qdot_bf16_avx512.c on
    activations rounded to bf16 once per mat-mul: every output is within the recursive-summation
    bound of the float64 dot of the bf16 values (a lane left out or a chunk dropped is far
    outside it)."""
    for K, M, T_, got, x, raw in _bf16_native_cases(at_level):
        wf = qref.bf16_float(raw.view(np.uint16)).astype(np.float64)
        af = qref.bf16_float(qref.bf16_bits(x)).astype(np.float64)
        bound = (K / 16 + 5) * 2.0**-24 * (np.abs(af) @ np.abs(wf).T)
        assert np.all(np.abs(got - af @ wf.T) <= bound), (K, M, T_)


@NO_BF16
def test_bf16_kernel_native_bits_match_sdm_model(at_level):
    """The same outputs are bit-identical to the float64 model of VDPBF16PS as the Intel SDM
    defines it (qref.vdpbf16ps: odd pair first, single-rounded adds, DAZ/FTZ), the model the
    emulated test holds the kernel to.  If only this test fails, the CPU's VDPBF16PS rounds
    differently from the SDM's definition (the kernel is still within bound above)."""
    for K, M, T_, got, x, raw in _bf16_native_cases(at_level):
        want = qref.vdpbf16ps(raw.view(np.uint16), qref.bf16_bits(x))
        diff = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
        assert not len(diff), f"K={K} M={M} T={T_}: {len(diff)} of {got.size} outputs differ from the SDM model"
