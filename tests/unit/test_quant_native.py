"""native/quants/quants.c against gguf-py's numpy (de)quantizers, on random rows and edge cases.

gguf-py (gguf.quants) quantizes F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 byte-for-byte like
ggml's reference functions, and dequantizes every type; the k-quants and IQ types are
checked byte-exact against llama-quantize in test_quantize.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import quants as gq

from toolkit.gguf_io import GGMLType
from toolkit.binding import rows
from toolkit.binding import ffi, lib

ALL = [GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0,
       GGMLType.Q5_1, GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K,
       GGMLType.IQ4_NL, GGMLType.IQ4_XS]
NUMPY_QUANT = [GGMLType.F16, GGMLType.BF16, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1]


def _rows(seed: int, n_rows: int = 24, width: int = 512) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_rows, width)).astype(np.float32) * 0.05
    x[1] = 0.0                                   # an all-zero row (zero scales)
    x[2, :32] = 0.0                              # an all-zero block
    x[3] *= 1e4                                  # large values
    x[4] = np.abs(x[4])                          # all positive (min clamps to 0)
    x[5] = -np.abs(x[5])                         # all negative
    x[6, ::7] = 3.0                              # outliers
    x[7] = 1e-30                                 # tiny, below the k-quants' GROUP_MAX_EPS
    x[8] = np.float32(0.1)                       # constant rows (max == min)
    return x


@pytest.mark.parametrize("qtype", NUMPY_QUANT, ids=lambda t: t.name)
@pytest.mark.parametrize("seed", [0, 1])
def test_quantize_matches_gguf_py(qtype, seed):
    x = _rows(seed)
    want = gq.quantize(x, qtype).reshape(-1)
    got = rows.quantize(qtype, x, n_threads=2)
    assert np.array_equal(got, want.view(np.uint8)), f"{qtype.name}: {(got != want.view(np.uint8)).sum()} bytes differ"


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_f16_bf16_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 1e-8, 6e-8, -3e-5, 1.0000001, 3.3895314e38]
                 + [0.5] * 20, np.float32)
    for t in (GGMLType.F16, GGMLType.BF16):
        want = gq.quantize(x, t).view(np.uint8).reshape(-1)
        got = rows.quantize(t, x)
        assert np.array_equal(got, want), t.name


@pytest.mark.parametrize("qtype", ALL, ids=lambda t: t.name)
def test_dequantize_matches_gguf_py(qtype):
    x = _rows(3, width=512)
    q = rows.quantize(qtype, x, n_threads=2)
    got = rows.dequantize(qtype, q.tobytes(), 512, n_threads=2)
    want = gq.dequantize(q.reshape(x.shape[0], -1), qtype).reshape(x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    if qtype not in (GGMLType.F32,):
        # and the round trip is a quantization, not garbage: error well below the signal
        err = np.abs(got[9:] - x[9:]).max() / np.abs(x[9:]).max()
        assert err < 0.5, err


def test_dequantize_row_entry_point():
    x = _rows(4, n_rows=12, width=256)
    q = rows.quantize(GGMLType.Q4_K, x)
    out = np.empty(12 * 256, np.float32)
    st = lib.tk_dequantize_row(int(GGMLType.Q4_K), ffi.from_buffer(q), ffi.cast("float *", ffi.from_buffer(out)), 12 * 256)
    assert st == lib.TK_OK
    assert np.array_equal(out.reshape(12, 256), rows.dequantize(GGMLType.Q4_K, q.tobytes(), 256))
    # not a block multiple, unknown type: an error status and a message, no crash
    assert lib.tk_dequantize_row(int(GGMLType.Q4_K), ffi.from_buffer(q), ffi.cast("float *", ffi.from_buffer(out)), 100) == lib.TK_ERR_INVALID
    assert lib.tk_dequantize_row(99, ffi.from_buffer(q), ffi.cast("float *", ffi.from_buffer(out)), 256) == lib.TK_ERR_UNSUPPORTED
    assert b"99" in ffi.string(lib.tk_last_error())


@pytest.mark.parametrize("qtype", [GGMLType.Q4_K, GGMLType.IQ4_XS, GGMLType.Q2_K], ids=lambda t: t.name)
def test_threads_and_row_splits_do_not_change_bytes(qtype):
    x = _rows(5, n_rows=37, width=768)
    one = rows.quantize(qtype, x, n_threads=1)
    many = rows.quantize(qtype, x, n_threads=7)
    parts = np.concatenate([rows.quantize(qtype, x[:10]), rows.quantize(qtype, x[10:])])
    assert np.array_equal(one, many) and np.array_equal(one, parts)


def test_row_size_and_errors():
    assert rows.row_size(GGMLType.Q4_K, 512) == 288
    assert rows.row_size(GGMLType.Q8_0, 64) == 68
    with pytest.raises(ValueError):
        rows.row_size(GGMLType.Q4_K, 96)
    with pytest.raises(Exception, match="block size"):
        rows.quantize_rows(GGMLType.Q4_K, np.zeros(96, np.float32), np.zeros(200, np.uint8), 1, 96)
