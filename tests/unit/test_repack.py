"""Repacked weights (toolkit/native/quants/repack.c, x86/repack_avx512.c): Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K and IQ4_XS re-laid
in groups of 16 interleaved rows, through tk_mat_mul_repacked at each kernel level this machine has.

- the scalar tiles (the reference order, repack.h) equal the float64 product
  dequant(W) @ dequant(act) to 1e-6 of sum |w| |x| per output, as the row kernels do;
- every level's repacked kernel gives the scalar tiles' bits (the AVX-512 VNNI tiles, the AVX2
  tiles plain and with AVX-VNNI, where the machine has them: the same float order, exact
  integer sums);
- a token's result is bit-identical alone (generation), in a batch of 21 (tiles of 8 + 5) and in a
  batch split at another token, with row counts that leave a part-filled last group;
- repacked and plain kernels agree to the same 1e-6 bound (another float order: one rounding per
  block against eight lanes' partial sums, so not bit for bit);
- a type without a repacked form is refused.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import qref
from toolkit.binding import ffi, lib

pytestmark = pytest.mark.native

T = gguf.GGMLQuantizationType
RTYPES = [T.Q8_0, T.Q4_0, T.IQ4_NL, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_XS]
LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2, lib.TK_CPU_AVX512) if lv <= lib.tk_cpu_detected()]
# (level, AVX-VNNI on): at avx2 both the plain (vpmaddubsw) and, where the machine has it, the VNNI tiles
VARIANTS = [(lv, 0) for lv in LEVELS] + ([(lib.TK_CPU_AVX2, 1)] if lib.tk_cpu_has_avxvnni() else [])


def _name(v):
    return ffi.string(lib.tk_cpu_level_name(v[0])).decode() + ("-vnni" if v[1] else "")


@pytest.fixture
def at_variant(at_level):
    def set_variant(v):
        lib.tk_cpu_set_avxvnni(v[1])
        return at_level(v[0])
    yield set_variant
    lib.tk_cpu_set_avxvnni(1)
N_TOK = 21
REL = 1e-6


def _mm_repacked(qtype, raw, K, x):
    x = np.ascontiguousarray(x, np.float32)
    y = np.full((x.shape[0], raw.shape[0]), np.nan, np.float32)
    st = lib.tk_mat_mul_repacked(int(qtype), ffi.from_buffer(np.ascontiguousarray(raw)), K, raw.shape[0],
                                 ffi.cast("float *", ffi.from_buffer(x)), x.shape[0], ffi.cast("float *", ffi.from_buffer(y)))
    assert st == 0, ffi.string(lib.tk_last_error()).decode()
    return y


def _case(qtype, K: int, M: int):
    rng = np.random.default_rng(100 * int(qtype) + K + M)
    w = rng.standard_normal((M, K)).astype(np.float32) * 0.1
    w[3] *= 8.0
    w[7] = 0.5 + 0.01 * w[7]      # near-constant row: large mins (Q4_K)
    x = rng.standard_normal((N_TOK, K)).astype(np.float32)
    x[2] *= 1e-3
    x[5, :256] = 0.0              # an all-zero block / super-block
    x[9, ::7] *= 30.0
    raw = qref.quantize_rows(qtype, w)
    return raw, qref.dequantize_rows(qtype, raw, K), x


def _bound(qtype, wf, x):
    return REL * (np.abs(qref.act_values(qtype, x)).astype(np.float64) @ np.abs(wf.astype(np.float64)).T) + 1e-30


CASES = [(t, K, M) for t in RTYPES for K, M in ((256, 13), (512, 16), (768, 37), (2048, 50))]
IDS = [f"{t.name}-K{K}-M{M}" for t, K, M in CASES]


@pytest.mark.parametrize("qtype,K,M", CASES, ids=IDS)
def test_scalar_tiles_match_float64_reference(qtype, K, M, at_level):
    raw, wf, x = _case(qtype, K, M)
    at_level(lib.TK_CPU_SCALAR)
    y = _mm_repacked(qtype, raw, K, x)
    ref = qref.act_values(qtype, x).astype(np.float64) @ wf.astype(np.float64).T
    assert np.all(np.abs(y - ref) <= _bound(qtype, wf, x))
    if K == 256:
        assert np.all(y[5] == 0.0)


@pytest.mark.parametrize("variant", VARIANTS, ids=_name)
@pytest.mark.parametrize("qtype,K,M", CASES, ids=IDS)
def test_levels_equal_scalar_bits_and_ubatch_invariant(qtype, K, M, variant, at_variant):
    raw, _, x = _case(qtype, K, M)
    at_variant((lib.TK_CPU_SCALAR, 0))
    ref = _mm_repacked(qtype, raw, K, x)
    assert at_variant(variant) == variant[0]
    y = _mm_repacked(qtype, raw, K, x)
    np.testing.assert_array_equal(y, ref)
    alone = np.stack([_mm_repacked(qtype, raw, K, x[t:t + 1])[0] for t in range(N_TOK)])
    np.testing.assert_array_equal(alone, y)
    split = np.concatenate([_mm_repacked(qtype, raw, K, x[:11]), _mm_repacked(qtype, raw, K, x[11:])])
    np.testing.assert_array_equal(split, y)


@pytest.mark.parametrize("qtype,K,M", CASES, ids=IDS)
def test_repacked_and_plain_agree_to_the_bound(qtype, K, M, at_variant):
    raw, wf, x = _case(qtype, K, M)
    for level in VARIANTS:
        at_variant(level)
        y, plain = _mm_repacked(qtype, raw, K, x), qref.mat_mul(qtype, raw, K, x)
        assert np.all(np.abs(y.astype(np.float64) - plain) <= 2 * _bound(qtype, wf, x)), level


def test_type_without_repacked_form_is_refused():
    K, M = 256, 16
    raw = qref.quantize_rows(T.Q3_K, np.ones((M, K), np.float32))
    x = np.ones((1, K), np.float32)
    y = np.zeros((1, M), np.float32)
    st = lib.tk_mat_mul_repacked(int(T.Q3_K), ffi.from_buffer(raw), K, M, ffi.cast("float *", ffi.from_buffer(x)), 1,
                                 ffi.cast("float *", ffi.from_buffer(y)))
    assert st == lib.TK_ERR_UNSUPPORTED
    assert "no repacked form of q3_k" in ffi.string(lib.tk_last_error()).decode().lower()


@pytest.mark.parametrize("qtype", [T.Q4_0, T.IQ4_NL])
def test_q4_0_iq4_nl_relaid_take_the_files_bytes(qtype):
    """A group of 16 rows takes its 16 rows' blocks' bytes (18 per 32 values), no more; a part-filled
    last group is padded to 16 rows; both have SIMD kernels at avx2 and avx512, not at scalar, and
    are re-laid by default there (tk_repack_auto: bench/README.md "Q4_0 and IQ4_NL re-laid")."""
    assert lib.tk_repack_matrix_bytes(int(qtype), 4096, 32) == 32 * 4096 // 32 * 18
    assert lib.tk_repack_matrix_bytes(int(qtype), 4096, 17) == 32 * 4096 // 32 * 18
    assert lib.tk_repack_matrix_bytes(int(qtype), 4100, 16) == 0
    assert lib.tk_repack_fast(int(qtype), lib.TK_CPU_SCALAR) == 0
    assert lib.tk_repack_fast(int(qtype), lib.TK_CPU_AVX2) == 1
    assert lib.tk_repack_fast(int(qtype), lib.TK_CPU_AVX512) == 1
    assert lib.tk_repack_auto(int(qtype), lib.TK_CPU_AVX2) == 1 and lib.tk_repack_auto(int(qtype), lib.TK_CPU_AVX512) == 1
    assert lib.tk_repack_auto(int(qtype), lib.TK_CPU_SCALAR) == 0


@pytest.mark.parametrize("qtype,file_bytes", [(T.Q5_K, 176), (T.IQ4_XS, 136)])
def test_q5_k_iq4_xs_relaid_take_the_files_bytes(qtype, file_bytes):
    """A group of 16 rows takes its 16 rows' blocks' bytes (Q5_K 176, IQ4_XS 136 per 256 values: the
    scales stay packed, unpacked in the tiles), no more; a part-filled last group is padded to 16
    rows; SIMD kernels at avx2 and avx512, not at scalar; re-laid by default at avx512 only
    (tk_repack_auto: bench/README.md "Q5_K and IQ4_XS re-laid")."""
    assert lib.tk_repack_matrix_bytes(int(qtype), 4096, 32) == 32 * 4096 // 256 * file_bytes
    assert lib.tk_repack_matrix_bytes(int(qtype), 4096, 17) == 32 * 4096 // 256 * file_bytes
    assert lib.tk_repack_matrix_bytes(int(qtype), 4000, 16) == 0
    assert lib.tk_repack_fast(int(qtype), lib.TK_CPU_SCALAR) == 0
    assert lib.tk_repack_fast(int(qtype), lib.TK_CPU_AVX2) == 1
    assert lib.tk_repack_fast(int(qtype), lib.TK_CPU_AVX512) == 1
    assert lib.tk_repack_auto(int(qtype), lib.TK_CPU_SCALAR) == 0
    assert lib.tk_repack_auto(int(qtype), lib.TK_CPU_AVX2) == 0
    assert lib.tk_repack_auto(int(qtype), lib.TK_CPU_AVX512) == 1


# ---- BF16 (x86/repack_bf16_avx512.c, _avx2.c): FMA on widened weights, or VDPBF16PS ---------
NO_BF16 = pytest.mark.skipif(not lib.tk_cpu_has_avx512bf16(),
                             reason="no AVX512_BF16 on this machine: the VDPBF16PS kernel cannot run here")
BF16_CASES = [(64, 13), (70, 16), (512, 37), (1000, 50), (2048, 83)]
BF16_IDS = [f"K{K}-M{M}" for K, M in BF16_CASES]
FMA_LEVELS = [lv for lv in (lib.TK_CPU_AVX2, lib.TK_CPU_AVX512) if lv <= lib.tk_cpu_detected()]


@pytest.fixture
def bf16dot():
    """Set the BF16 GEMM's instruction (tk_cpu_set_bf16dot) for a test; the machine's choice after."""
    before = lib.tk_cpu_bf16dot()
    yield lib.tk_cpu_set_bf16dot
    lib.tk_cpu_set_bf16dot(before)


def _bf16_case(K, M):
    rng = np.random.default_rng(K * 7 + M)
    w = (rng.standard_normal((M, K)) * rng.uniform(0.01, 3.0, (M, 1))).astype(np.float32)
    x = (rng.standard_normal((N_TOK, K)) * rng.uniform(0.1, 10.0, (N_TOK, 1))).astype(np.float32)
    x[4] = 0.0
    return qref.quantize_rows(T.BF16, w), x


def _sum_bound(raw, xv, K):
    """K * 2^-24 * sum |w||x| (recursive summation in fp32) and the float64 product."""
    wf = qref.bf16_float(raw.view(np.uint16)).astype(np.float64)
    xv = np.asarray(xv, np.float64)
    return K * 2.0**-24 * (np.abs(xv) @ np.abs(wf).T) + 1e-30, xv @ wf.T


def _same_in_every_ubatch(raw, K, x, y):
    alone = np.stack([_mm_repacked(T.BF16, raw, K, x[t:t + 1])[0] for t in range(N_TOK)])
    np.testing.assert_array_equal(alone, y)
    split = np.concatenate([_mm_repacked(T.BF16, raw, K, x[:11]), _mm_repacked(T.BF16, raw, K, x[11:])])
    np.testing.assert_array_equal(split, y)


@pytest.mark.parametrize("K,M", BF16_CASES, ids=BF16_IDS)
def test_bf16_fma_scalar_reference_within_the_summation_bound(K, M, at_level):
    """The scalar reference of the FMA order (repack.c rp_bf16_tile_scalar, fp32 activations as
    they are): within K 2^-24 sum |w||x| of the float64 product."""
    raw, x = _bf16_case(K, M)
    at_level(lib.TK_CPU_SCALAR)
    y = _mm_repacked(T.BF16, raw, K, x)
    bound, exact = _sum_bound(raw, x, K)
    assert np.all(np.abs(y - exact) <= bound)
    assert np.all(y[4] == 0.0)


@pytest.mark.parametrize("level", FMA_LEVELS, ids=lambda lv: ffi.string(lib.tk_cpu_level_name(lv)).decode())
@pytest.mark.parametrize("K,M", BF16_CASES, ids=BF16_IDS)
def test_bf16_fma_tiles_equal_scalar_bits_in_every_ubatch(K, M, level, at_level, bf16dot):
    """The AVX2 (16 rows x 5 tokens) and AVX-512 (32 x 12) FMA tiles give the scalar reference's
    bits, alone (generation), in 21 tokens and split at 11."""
    raw, x = _bf16_case(K, M)
    bf16dot(0)
    at_level(lib.TK_CPU_SCALAR)
    ref = _mm_repacked(T.BF16, raw, K, x)
    assert at_level(level) == level and lib.tk_repack_fast(int(T.BF16), level) == 1
    y = _mm_repacked(T.BF16, raw, K, x)
    np.testing.assert_array_equal(y, ref)
    _same_in_every_ubatch(raw, K, x, y)


@NO_BF16
@pytest.mark.parametrize("K,M", BF16_CASES, ids=BF16_IDS)
def test_bf16_dpbf16_bits_match_the_pair_model_in_every_ubatch(K, M, at_level, bf16dot):
    """At avx512 with VDPBF16PS chosen, the repacked GEMM (4 groups x 6 tokens per tile, masked
    last group) gives qref.vdpbf16ps_pairs' bits on the bf16-rounded activations: one fp32 chain
    over the column pairs, each step one VDPBF16PS lane.  The same bits in every ubatch; within
    the summation bound, and not the row kernel's bits (another order)."""
    raw, x = _bf16_case(K, M)
    assert at_level(lib.TK_CPU_AVX512) == lib.TK_CPU_AVX512
    assert bf16dot(1) == 1
    y = _mm_repacked(T.BF16, raw, K, x)
    xb = qref.bf16_bits(x)
    want = qref.vdpbf16ps_pairs(raw.view(np.uint16), xb)
    bad = np.argwhere(y.view(np.uint32) != want.view(np.uint32))
    assert not len(bad), f"{len(bad)} of {y.size} outputs differ from the pair model, first {bad[:3].tolist()}"
    _same_in_every_ubatch(raw, K, x, y)
    bound, exact = _sum_bound(raw, qref.bf16_float(xb), K)
    plain = qref.mat_mul(T.BF16, raw, K, x)
    assert np.all(np.abs(y - exact) <= bound) and np.all(np.abs(plain - exact) <= bound)
    assert not np.array_equal(y, plain)


def test_bf16_repack_levels_and_sizes(bf16dot):
    """BF16 is re-laid at avx512 and avx2, not at scalar; the FMA kernels read fp32 activations, the
    VDPBF16PS one bf16 (tk_repack_act_f32); a matrix of odd width has no repacked form."""
    assert lib.tk_repack_fast(int(T.BF16), lib.TK_CPU_SCALAR) == 0
    assert lib.tk_repack_fast(int(T.BF16), lib.TK_CPU_AVX2) == 1
    assert lib.tk_repack_fast(int(T.BF16), lib.TK_CPU_AVX512) == 1
    assert lib.tk_repack_matrix_bytes(int(T.BF16), 70, 17) == 2 * 70 * 2 * 16
    assert lib.tk_repack_matrix_bytes(int(T.BF16), 71, 17) == 0
    assert bf16dot(0) == 0
    assert lib.tk_repack_act_f32(int(T.BF16), lib.TK_CPU_AVX512) == 1
    if lib.tk_cpu_has_avx512bf16():
        assert bf16dot(1) == 1
        assert lib.tk_repack_act_f32(int(T.BF16), lib.TK_CPU_AVX512) == 0
        assert lib.tk_repack_act_f32(int(T.BF16), lib.TK_CPU_AVX2) == 1


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q6_K], ids=lambda t: t.name)
def test_relaid_bytes_are_the_files(qtype):
    """Issue 44: Q8_0 and Q6_K re-laid take the file's bytes (Q6_K: 3360 per 16 rows x 256, was 4384);
    a part-filled last group takes a whole group's."""
    K = 768
    row = qref.quantize_rows(qtype, np.ones((1, K), np.float32)).shape[1]
    assert lib.tk_repack_matrix_bytes(int(qtype), K, 32) == 32 * row
    assert lib.tk_repack_matrix_bytes(int(qtype), K, 17) == 32 * row


def test_q6_k_relaid_by_default_at_avx512_only():
    """Q6_K has repacked tiles at both levels (--repack), but the default re-lays it at avx512 only:
    at avx2 it did not win in the model (repack.c tk_repack_auto; bench/README.md "Q6_K re-laid in
    the file's bytes")."""
    q6 = int(T.Q6_K)
    assert lib.tk_repack_fast(q6, lib.TK_CPU_AVX2) == 1 and lib.tk_repack_fast(q6, lib.TK_CPU_AVX512) == 1
    assert lib.tk_repack_auto(q6, lib.TK_CPU_AVX512) == 1
    assert lib.tk_repack_auto(q6, lib.TK_CPU_AVX2) == 0 and lib.tk_repack_auto(q6, lib.TK_CPU_SCALAR) == 0
