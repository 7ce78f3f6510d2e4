"""Mamba-2 chunked SSD scan against the token-by-token recurrence (ssm.c).

The recurrence (tk_ssm_scan_mamba2, one token at a time) is the reference: the chunked
form must agree to 1e-6 relative (L2 over the outputs and over the final state), and
splitting a run at chunk multiples must give the same bits as one run."""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.binding import check, ffi, lib

pytestmark = pytest.mark.native


def fp(a):
    assert a.dtype == np.float32 and a.flags.c_contiguous
    return ffi.cast("float *", ffi.from_buffer(a))


def make(T, H, P, N, G, seed=0, dt_scale=1.0):
    rng = np.random.default_rng(seed)
    DI = H * P
    xBC = rng.standard_normal((T, DI + 2 * G * N)).astype(np.float32)
    # dt after softplus of a (bias + projection) ~ the magnitudes Mamba-2 checkpoints use
    dt = (np.log1p(np.exp(rng.standard_normal((T, H)) - 3.0)) * dt_scale).astype(np.float32)
    A = (-np.exp(rng.uniform(0.0, np.log(16.0), H))).astype(np.float32)
    D = rng.standard_normal(H).astype(np.float32)
    s0 = (rng.standard_normal((H, P, N)) * 0.5).astype(np.float32)
    return xBC, dt, A, D, s0


def recurrence(xBC, dt, A, D, s0, H, P, N, G):
    T, DI = xBC.shape[0], H * P
    s = s0.copy()
    y = np.empty((T, DI), np.float32)
    for t in range(T):
        x = np.ascontiguousarray(xBC[t, :DI])
        B = np.ascontiguousarray(xBC[t, DI:DI + G * N])
        C = np.ascontiguousarray(xBC[t, DI + G * N:])
        d = np.ascontiguousarray(dt[t])
        lib.tk_ssm_scan_mamba2(fp(s), fp(x), fp(d), fp(A), fp(B), fp(C), fp(D), H, P, N, G, fp(y[t]))
    return y, s


def run(xBC, dt, A, D, s0, H, P, N, G, threads=1):
    T, DI = xBC.shape[0], H * P
    s = s0.copy()
    y = np.empty((T, DI), np.float32)
    check(lib.tk_ssm_mamba2_seq(fp(s), fp(xBC), xBC.shape[1], fp(dt), H, fp(A), fp(D), T, H, P, N, G, fp(y), DI, threads))
    return y, s


def rel(a, b):
    return float(np.linalg.norm((a - b).astype(np.float64)) / np.linalg.norm(b.astype(np.float64)))


@pytest.fixture
def ssd_threshold():
    def set_(n):
        return lib.tk_ssd_set_threshold(n)
    yield set_
    lib.tk_ssd_set_threshold(-1)


@pytest.mark.parametrize("T,H,P,N,G", [(200, 4, 16, 32, 1), (64, 4, 8, 16, 2), (131, 6, 8, 24, 3), (1, 2, 8, 16, 1)])
@pytest.mark.parametrize("dt_scale", [1.0, 20.0])
def test_ssd_matches_recurrence(T, H, P, N, G, dt_scale, ssd_threshold):
    xBC, dt, A, D, s0 = make(T, H, P, N, G, seed=T + H, dt_scale=dt_scale)
    y_ref, s_ref = recurrence(xBC, dt, A, D, s0, H, P, N, G)
    ssd_threshold(1)               # SSD for every run length
    y, s = run(xBC, dt, A, D, s0, H, P, N, G)
    assert rel(y, y_ref) < 1e-6, rel(y, y_ref)
    assert rel(s, s_ref) < 1e-6, rel(s, s_ref)
    ssd_threshold(0)               # never: the recurrence, bit for bit
    y2, s2 = run(xBC, dt, A, D, s0, H, P, N, G)
    assert np.array_equal(y2, y_ref) and np.array_equal(s2, s_ref)


def test_ssd_threads_and_chunk_splits_bit_identical(ssd_threshold):
    H, P, N, G, T = 8, 16, 32, 2, 256
    xBC, dt, A, D, s0 = make(T, H, P, N, G, seed=5)
    ssd_threshold(1)
    y1, s1 = run(xBC, dt, A, D, s0, H, P, N, G, threads=1)
    y3, s3 = run(xBC, dt, A, D, s0, H, P, N, G, threads=3)
    assert np.array_equal(y1, y3) and np.array_equal(s1, s3)
    # the same run as 128 + 64 + 64 tokens (splits at chunk multiples)
    s = s0.copy()
    parts = []
    for a, b in ((0, 128), (128, 192), (192, 256)):
        y, s = run(np.ascontiguousarray(xBC[a:b]), np.ascontiguousarray(dt[a:b]), A, D, s, H, P, N, G)
        parts.append(y)
    assert np.array_equal(np.concatenate(parts), y1) and np.array_equal(s, s1)


def test_threshold_env(tmp_path):
    """TOOLKIT_SSD_MIN is read by toolkit.runtime.options (the CLI), not by the library: the
    process default stays the measured one, and the options carry the variable's value."""
    import os
    import subprocess
    import sys
    code = ("from toolkit.binding import lib; from toolkit.runtime import RuntimeOptions; "
            "print(lib.tk_ssd_threshold(), RuntimeOptions.from_env().ssd_min)")
    default = subprocess.run([sys.executable, "-c", code], env={k: v for k, v in os.environ.items() if k != "TOOLKIT_SSD_MIN"},
                             cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
    assert default[1] == "None"
    for val, want in (("0", 0), ("17", 17)):
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TOOLKIT_SSD_MIN=val), cwd=tmp_path,
                             capture_output=True, text=True, check=True).stdout.split()
        assert out == [default[0], str(want)]


# ---- through the model ---------------------------------------------------------------------

MODELS = ["mamba2-tiny.f32.gguf", "bamba-tiny.f32.gguf"]


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    import pathlib
    from toolkit.runtime import Model
    m = Model(pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / request.param)
    yield m
    m.close()


def _logits(model, toks, **kw):
    from toolkit.runtime import Context
    with Context(model, n_ctx=512, **kw) as ctx:
        return ctx.decode(toks, logits="all")


def test_model_ssd_prefill_matches_recurrence(model, ssd_threshold):
    toks = np.random.default_rng(3).integers(0, 512, 200).astype(np.int32)
    ssd_threshold(0)
    ref = _logits(model, toks, n_ubatch=256)
    ssd_threshold(64)
    got = _logits(model, toks, n_ubatch=256)
    assert not np.array_equal(got, ref)           # the SSD path ran
    assert rel(got, ref) < 1e-5, rel(got, ref)
    # chunked prefill at multiples of the SSD chunk == one-shot, bit for bit (threshold 1:
    # the 8-token tail of 200 = 3 x 64 + 8 takes the SSD path too)
    assert np.array_equal(_logits(model, toks, n_ubatch=128), got)
    ssd_threshold(1)
    assert np.array_equal(_logits(model, toks, n_ubatch=64, n_threads=2), got)


def test_context_ssd_min_overrides_the_process_default(model, ssd_threshold):
    """A context's own threshold (tk_context_params.ssd_min, RuntimeOptions.ssd_min: the CLI's
    TOOLKIT_SSD_MIN) wins over the process default: 64 gives the SSD path's bits with the process
    default at 0 (never), and 0 (never) the recurrence's with the default at 64."""
    from toolkit.runtime import RuntimeOptions
    toks = np.random.default_rng(3).integers(0, 512, 200).astype(np.int32)
    ssd_threshold(0)
    rec = _logits(model, toks, n_ubatch=256)
    ssd_threshold(64)
    ssd = _logits(model, toks, n_ubatch=256)
    assert not np.array_equal(rec, ssd)
    assert np.array_equal(_logits(model, toks, n_ubatch=256, options=RuntimeOptions(ssd_min=0)), rec)
    ssd_threshold(0)
    assert np.array_equal(_logits(model, toks, n_ubatch=256, options=RuntimeOptions(ssd_min=64)), ssd)
