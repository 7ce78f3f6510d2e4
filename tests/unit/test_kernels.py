"""The C kernels against numpy references written from the papers' / transformers' formulas.

Each reference is float64 numpy; the kernels run in float32, so bounds are a few float32
ulps scaled by the reduction length.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import qref

from toolkit.binding import check, ffi, lib

pytestmark = pytest.mark.native

RNG = np.random.default_rng(1234)


def fptr(a: np.ndarray, typ: str = "float *"):
    assert a.flags.c_contiguous and a.dtype == np.float32
    return ffi.cast(typ, ffi.from_buffer(a))


def f32(*shape, scale=1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# ---- type conversion ---------------------------------------------------------------------

def test_fp16_all_values():
    u = np.arange(65536, dtype=np.uint16)
    ref = u.view(np.float16).astype(np.float32)
    got = np.array([lib.tk_fp16_to_fp32(int(v)) for v in u], np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), ref[~nan].view(np.uint32))   # bit exact, -0 and subnormals too


def test_bf16_values():
    u = RNG.integers(0, 65536, 4096).astype(np.uint16)
    ref = (u.astype(np.uint32) << 16).view(np.float32)
    got = np.array([lib.tk_bf16_to_fp32(int(v)) for v in u], np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(got[~nan].view(np.uint32), ref[~nan].view(np.uint32))


# ---- mat-mul -----------------------------------------------------------------------------

@pytest.mark.parametrize("qtype", [gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                                   gguf.GGMLQuantizationType.BF16, gguf.GGMLQuantizationType.Q8_0,
                                   gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q5_1])
def test_mat_mul_types(qtype):
    K, M, T = 96, 37, 5
    w = f32(M, K, scale=0.1)
    if qtype == gguf.GGMLQuantizationType.F32:
        raw = w
    elif qtype == gguf.GGMLQuantizationType.F16:
        raw = w.astype(np.float16)
    else:
        raw = gguf.quants.quantize(w, qtype)
    raw = np.ascontiguousarray(raw)
    deq = w if qtype == gguf.GGMLQuantizationType.F32 else gguf.quants.dequantize(raw, qtype).reshape(M, K)
    x = f32(T, K)
    y = np.empty((T, M), np.float32)
    check(lib.tk_mat_mul(int(qtype), ffi.from_buffer(raw), K, M, fptr(x), T, fptr(y)))
    # quantized types: activations quantized per block first (tests/qref.py)
    ref = qref.reference(qtype, deq, x)
    err = np.abs(y - ref).max() / np.abs(ref).max()
    assert err < (1e-3 if qtype in qref.Q8_1_ACT else 2e-6), f"{qtype.name}: {err:.2e}"
    if qtype in qref.INTEGER_PATH:       # and that is not the float32 product
        exact = x.astype(np.float64) @ deq.astype(np.float64).T
        assert np.abs(y - exact).max() / np.abs(exact).max() > 1e-4


def test_mat_mul_rejects_bad_arguments():
    w = np.zeros(40, np.float32)
    x = np.zeros(40, np.float32)
    y = np.zeros(1, np.float32)
    assert lib.tk_mat_mul(8, ffi.from_buffer(w), 40, 1, fptr(x), 1, fptr(y)) == lib.TK_ERR_INVALID   # 40 % 32
    assert lib.tk_mat_mul(99, ffi.from_buffer(w), 40, 1, fptr(x), 1, fptr(y)) == lib.TK_ERR_INVALID


# ---- norms and rope ----------------------------------------------------------------------

@pytest.mark.parametrize("level", [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2) if lv <= lib.tk_cpu_detected()])
@pytest.mark.parametrize("n", [1, 7, 8, 300, 1024])
def test_rms_norm(level, n):
    """At every level, against float64: with a weight, without one (NULL), and in place
    (y aliasing x, as the gated norm calls it); n covers the 8-lane body and its tail."""
    try:
        assert lib.tk_cpu_set_level(level) == level
        x, w = f32(n) * 3.0, f32(n)
        xd = x.astype(np.float64)
        ref = xd / np.sqrt(np.mean(xd * xd) + 1e-5)
        y = np.empty_like(x)
        lib.tk_rms_norm(fptr(x), fptr(w), 1e-5, n, fptr(y))
        assert np.abs(y - ref * w).max() <= 1e-6 * np.abs(ref * w).max()
        lib.tk_rms_norm(fptr(x), ffi.NULL, 1e-5, n, fptr(y))
        assert np.abs(y - ref).max() <= 1e-6 * np.abs(ref).max()
        lib.tk_rms_norm(fptr(x), fptr(w), 1e-5, n, fptr(x))
        assert np.abs(x - ref * w).max() <= 1e-6 * np.abs(ref * w).max()
    finally:
        lib.tk_cpu_set_level(lib.tk_cpu_detected())


@pytest.mark.parametrize("n_rot,pos", [(8, 0), (8, 17), (16, 1000), (4, 3)])
def test_rope_norm_on_permuted_rows_equals_hf_rotate_half(n_rot, pos):
    """HF rotates halves (i, i + rot/2) within the first rot dims; the converter permutes
    q/k rows to adjacent pairs (2i, 2i+1), where ggml's NORM rope applies."""
    H, hd, base = 3, 16, 10000.0
    x = f32(H, hd)
    inv = 1.0 / base ** (np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    ang = pos * inv
    cos, sin = np.cos(np.concatenate([ang, ang])), np.sin(np.concatenate([ang, ang]))
    xr = x[:, :n_rot].astype(np.float64)
    rot = np.concatenate([-xr[:, n_rot // 2:], xr[:, :n_rot // 2]], axis=1)
    ref = x.astype(np.float64).copy()
    ref[:, :n_rot] = xr * cos + rot * sin
    perm = np.arange(hd)
    perm[:n_rot] = np.stack([np.arange(n_rot // 2), np.arange(n_rot // 2) + n_rot // 2], axis=1).reshape(-1)
    ours = np.ascontiguousarray(x[:, perm])
    lib.tk_rope_norm(fptr(ours), H, hd, n_rot, pos, base)
    back = np.empty_like(ours)
    back[:, perm] = ours
    assert np.abs(back - ref).max() < 1e-5


# ---- ssm_conv ----------------------------------------------------------------------------

def conv_ref(x, w, b, state):
    K = w.shape[1]
    xp = np.concatenate([state.T, x], axis=0).astype(np.float64)        # [K-1+T, C]
    T = x.shape[0]
    y = np.stack([(xp[t:t + K].T * w).sum(1) for t in range(T)]) + b
    return y, xp[-(K - 1):].T


@pytest.mark.parametrize("C,K", [(24, 4), (21, 4), (5, 4), (21, 3)])
@pytest.mark.parametrize("level", [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2) if lv <= lib.tk_cpu_detected()])
def test_ssm_conv_matches_reference_and_carries_state(C, K, level):
    """Every level, channels in full and partial 8-lane blocks (d_conv 4) or the generic
    loop (d_conv 3): reference to 1e-5; the state carried across calls and channel ranges
    cut at multiples of 8 (how forward.c splits threads) give the same bits."""
    lib.tk_cpu_set_level(level)
    try:
        _conv_case(C, K)
        if C > 8:                       # channels [0, 8) and [8, C) separately
            T = 9
            x, w, b, st0 = f32(T, C), f32(C, K), f32(C), f32(C, K - 1)
            st, y = st0.copy(), np.empty((T, C), np.float32)
            lib.tk_ssm_conv(fptr(x), C, T, C, K, fptr(w), fptr(b), fptr(st), fptr(y), C)
            st2, y2 = st0.copy(), np.empty((T, C), np.float32)
            for c0, c1 in ((0, 8), (8, C)):
                lib.tk_ssm_conv(fptr(x) + c0, C, T, c1 - c0, K, fptr(w) + c0 * K, fptr(b) + c0, fptr(st2) + c0 * (K - 1),
                                fptr(y2) + c0, C)
            assert np.array_equal(y2, y) and np.array_equal(st2, st)
    finally:
        lib.tk_cpu_set_level(lib.tk_cpu_detected())


def _conv_case(C, K):
    T = 9
    x, w, b = f32(T, C), f32(C, K), f32(C)
    st0 = f32(C, K - 1)
    ref, ref_state = conv_ref(x, w, b, st0)
    # one call
    st = st0.copy()
    y = np.empty((T, C), np.float32)
    lib.tk_ssm_conv(fptr(x), C, T, C, K, fptr(w), fptr(b), fptr(st), fptr(y), C)
    assert np.abs(y - ref).max() < 1e-5 and np.abs(st - ref_state).max() == 0
    # split 2 + 7: same bits (state carried between calls)
    st2 = st0.copy()
    y2 = np.empty((T, C), np.float32)
    for a, bnd in ((0, 2), (2, T)):
        xa = np.ascontiguousarray(x[a:bnd])
        ya = np.empty_like(xa)
        lib.tk_ssm_conv(fptr(xa), C, bnd - a, C, K, fptr(w), fptr(b), fptr(st2), fptr(ya), C)
        y2[a:bnd] = ya
    assert np.array_equal(y2, y) and np.array_equal(st2, st)


# ---- scans -------------------------------------------------------------------------------

def test_ssm_scan_mamba1():
    DI, N, T = 20, 8, 6
    A = -np.exp(f32(DI, N, scale=0.5))
    D = f32(DI)
    s = np.zeros((DI, N), np.float32)
    sr = np.zeros((DI, N))
    for _ in range(T):
        x, z, B, C = f32(DI), f32(DI), f32(N), f32(N)
        dt = np.log1p(np.exp(f32(DI))).astype(np.float32)
        y = np.empty(DI, np.float32)
        lib.tk_ssm_scan_mamba1(fptr(s), fptr(x), fptr(dt), fptr(A), fptr(B), fptr(C), fptr(D), fptr(z), DI, N, fptr(y))
        sr = np.exp(dt[:, None] * A) * sr + (dt * x)[:, None] * B[None, :]
        ref = (sr @ C + D * x) * (z / (1 + np.exp(-z.astype(np.float64))))
        assert np.abs(y - ref).max() < 1e-5 * max(1.0, np.abs(ref).max())
    assert np.abs(s - sr).max() < 1e-5 * np.abs(sr).max()


@pytest.mark.parametrize("N", [8, 12, 128])       # 12: not a multiple of the 8 AVX2 lanes
@pytest.mark.parametrize("G", [1, 2, 4])
def test_ssm_scan_mamba2_groups(G, N):
    H, P, T = 8, 4, 5
    A, D = -np.exp(f32(H, scale=0.5)), f32(H)
    s = np.zeros((H, P, N), np.float32)
    sr = np.zeros((H, P, N))
    for _ in range(T):
        x, B, C = f32(H, P), f32(G, N), f32(G, N)
        dt = np.log1p(np.exp(f32(H))).astype(np.float32)
        y = np.empty((H, P), np.float32)
        lib.tk_ssm_scan_mamba2(fptr(s), fptr(x), fptr(dt), fptr(A), fptr(B), fptr(C), fptr(D), H, P, N, G, fptr(y))
        g = np.arange(H) // (H // G)             # consecutive heads share a group (repeat_interleave)
        sr = np.exp(dt * A)[:, None, None] * sr + (dt[:, None] * x)[:, :, None] * B[g][:, None, :]
        ref = np.einsum("hpn,hn->hp", sr, C[g]) + D[:, None] * x
        assert np.abs(y - ref).max() < 1e-5 * max(1.0, np.abs(ref).max())


# ---- SiLU ----------------------------------------------------------------------------------

def _silu_row(y: np.ndarray) -> np.ndarray:
    y = np.ascontiguousarray(y, np.float32).copy()
    lib.tk_silu_row(fptr(y), len(y))
    return y


@pytest.mark.parametrize("level", [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2) if lv <= lib.tk_cpu_detected()])
def test_silu_row_accuracy_and_split_invariance(level):
    """SiLU at every kernel level within 4 ulp of float64 (the AVX2 level has its own vector
    exp); and an element's result does not depend on where a row is cut (thread splits)."""
    try:
        assert lib.tk_cpu_set_level(level) == level
        x = np.concatenate([np.linspace(-100, 100, 40001), RNG.standard_normal(20000) * 6,
                            [0.0, -0.0, 88.0, -88.0, 1e-30, -1e-30]]).astype(np.float32)
        ref = x.astype(np.float64) / (1.0 + np.exp(-x.astype(np.float64)))
        got = _silu_row(x)
        big = np.abs(ref) > 1e-30
        ulp = np.abs(got[big] - ref[big]) / np.spacing(np.abs(ref[big]).astype(np.float32))
        assert ulp.max() <= 4.0, f"max {ulp.max():.2f} ulp at x = {x[big][ulp.argmax()]}"
        assert np.all(np.abs(got[~big]) <= 1e-29)
        pieces = np.concatenate([_silu_row(x[a:b]) for a, b in ((0, 13), (13, 20), (20, 1000), (1000, len(x)))])
        assert np.array_equal(pieces, got)
    finally:
        lib.tk_cpu_set_level(lib.tk_cpu_detected())
