"""Few-token mat-muls (a speculative verify call, several serve slots: n_tok = 2..16 in one
ubatch) with quantized weights: each token's outputs are bit-identical to its own
generation call (n_tok = 1), for every n_tok from 1 to two past the few-token drives' limit
(qdot_legacy_avx2.c LG_Q8_FEW_MAX, qdot_kquants_avx2.c KQ_FEW_MAX: 16), at
every kernel level this machine has.  The row count (23) is a multiple of none of the row
groups (Q8_0 4, the other 32-value blocks 3, the k-quants' chunk 16), so the remainder
tiles run too.  (Prefetch hints may point past the last row: harmless on x86, where a
prefetch never faults, and invisible to ASan, so nothing here checks them.)"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import qref

from toolkit.binding import ffi, lib

pytestmark = pytest.mark.native

FEW_MAX = 16   # LG_Q8_FEW_MAX / KQ_FEW_MAX
LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2, lib.TK_CPU_AVX512) if lv <= lib.tk_cpu_detected()]
NAMES = {lv: ffi.string(lib.tk_cpu_level_name(lv)).decode() for lv in LEVELS}
Q = gguf.GGMLQuantizationType
TYPES = [Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.Q5_K, Q.Q3_K, Q.Q2_K, Q.IQ4_XS, Q.Q4_0, Q.Q5_0, Q.IQ4_NL, Q.Q4_1, Q.Q5_1]


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_each_token_of_a_few_token_call_equals_its_generation_call(qtype, at_level):
    K, M, T = 512, 23, FEW_MAX + 2
    rng = np.random.default_rng(int(qtype))
    raw = qref.quantize_rows(qtype, (rng.standard_normal((M, K)) * 0.1).astype(np.float32))
    x = rng.standard_normal((T, K)).astype(np.float32)
    for lv in LEVELS:
        assert at_level(lv) == lv
        alone = np.concatenate([qref.mat_mul(qtype, raw, K, x[t:t + 1]) for t in range(T)])
        assert np.all(np.isfinite(alone))
        for n in range(1, T + 1):
            got = qref.mat_mul(qtype, raw, K, x[:n])
            for t in range(n):
                assert got[t].tobytes() == alone[t].tobytes(), (
                    f"{NAMES[lv]}: n_tok {n}, token {t}: rows {np.flatnonzero(got[t] != alone[t]).tolist()} differ")
