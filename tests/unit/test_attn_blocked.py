"""The blocked attention kernel (toolkit/native/kernels/attn.h) against its reference (the
per-(token, head) kernel the attention kinds had before, kept behind tk_attn_set_reference),
through whole models, at every kernel level this machine runs:

* the logits agree to float reordering (1e-5 of their scale) on every way into the kernel:
  GQA with the output gate (qwen35), MLA's latent rows (kimi-linear), MLA over DSA's selected
  cells (glm5next), QSA's selected cells (qwen4exp), sliding windows (lfm3, recurrentgemma),
  the shared block (zamba2), two sequences in one cache;
* a token's logits are bit-identical whatever its ubatch (1, 7, 512) and the thread count
  (1, 2, 3: decoding at depth > 2048 cells runs split-K, the KV groups inside, at every thread count;
  a prompt of many tiles does not).

The models are tests/families.py's rows carrying ``attn`` (``attn_deep``: at depth; ``attn_ub``:
ubatch and cell placement), on llama.cpp's f32 file where the row has one.
"""
from __future__ import annotations

import numpy as np
import pytest

from families import BY_NAME, names
from toolkit.binding import lib
from toolkit.runtime.context import Context
from toolkit.runtime.model import Model

pytestmark = pytest.mark.native

LEVELS = [lv for lv in (lib.TK_CPU_SCALAR, lib.TK_CPU_AVX2, lib.TK_CPU_AVX512) if lv <= lib.tk_cpu_detected()]
LEVEL_IDS = {0: "scalar", 1: "avx2", 2: "avx512"}


@pytest.fixture
def reference_off():
    yield
    lib.tk_attn_set_reference(-1)


def _path(name, hf_f32) -> str:
    """llama.cpp's f32 file of the row where it has one, else our conversion."""
    return str(BY_NAME[name].f32(hf_f32))


def _logits(path: str, reference: bool, n_tok: int = 150, n_ubatch: int = 32, n_threads: int = 2) -> np.ndarray:
    """All logits of a prompt of n_tok tokens, then of two sequences decoded side by side."""
    lib.tk_attn_set_reference(int(reference))
    with Model(path, n_threads=n_threads) as m, \
            Context(m, n_ctx=2 * n_tok + 16, n_seq_max=2, n_ubatch=n_ubatch, n_threads=n_threads) as c:
        toks = (np.arange(n_tok, dtype=np.int32) * 61 + 11) % m.n_vocab
        rows = [c.decode(toks, logits="all")]
        c.memory.seq_cp(0, 1)
        for i in range(3):    # two sequences sharing the prompt's cells, then each its own
            a, b = c.decode_batch([([int(toks[i])], 0), ([int(toks[-1 - i])], 1)], logits="last")
            rows += [a, b]
    return np.concatenate(rows)


@pytest.mark.parametrize("level", LEVELS, ids=LEVEL_IDS.get)
@pytest.mark.parametrize("name", names("attn"))
def test_blocked_matches_reference(name, level, hf_f32, at_level, reference_off):
    assert at_level(level) == level
    path = _path(name, hf_f32)
    ref = _logits(path, True)
    got = _logits(path, False)
    assert np.isfinite(ref).all()
    err = np.abs(got - ref).max()
    assert err <= 1e-5 * np.abs(ref).max(), f"{name} at {LEVEL_IDS[level]}: blocked vs reference {err:.3e}"


def _deep(path: str, n_threads: int, n_ubatch: int, n_tok: int) -> np.ndarray:
    """Logits of the prompt's last 8 tokens and of 3 tokens decoded one by one after it."""
    with Model(path, n_threads=n_threads) as m, Context(m, n_ctx=n_tok + 8, n_ubatch=n_ubatch, n_threads=n_threads) as c:
        toks = (np.arange(n_tok, dtype=np.int32) * 37 + 5) % m.n_vocab
        rows = [c.decode(toks, logits="all")[-8:]]
        for i in range(3):
            rows.append(c.decode([int(toks[i])], logits="last"))
    return np.concatenate(rows)


@pytest.mark.parametrize("level", LEVELS, ids=LEVEL_IDS.get)
@pytest.mark.parametrize("name", names("attn_deep"))   # qwen3next-tiny: 2 KV groups
def test_threads_and_ubatch_invariant_at_depth(name, level, hf_f32, at_level, reference_off):
    """2300 cells: two super-chunks, so split-K runs where (tile, group) items leave threads
    idle; the bits do not move with the thread count or the ubatch, and stay within float
    reordering of the reference."""
    assert at_level(level) == level
    path = _path(name, hf_f32)
    n_tok = 2300
    base = _deep(path, 1, 512, n_tok)
    for n_threads, n_ubatch in [(2, 512), (3, 512), (2, 7), (3, 97)]:
        got = _deep(path, n_threads, n_ubatch, n_tok)
        assert np.array_equal(got, base), f"{name} -t {n_threads} -ub {n_ubatch}: {np.abs(got - base).max():.3e}"
    lib.tk_attn_set_reference(1)
    ref = _deep(path, 2, 512, n_tok)
    err = np.abs(base - ref).max()
    assert err <= 1e-5 * np.abs(ref).max(), f"{name}: blocked vs reference at depth {err:.3e}"


@pytest.mark.parametrize("name", names("attn_ub"))
def test_ubatch_invariant(name, hf_f32, reference_off):
    path = _path(name, hf_f32)
    base = _logits(path, False, n_ubatch=512)
    for ub in (1, 7):
        assert np.array_equal(_logits(path, False, n_ubatch=ub), base), f"{name} -ub {ub}"


@pytest.mark.parametrize("name", names("attn_ub"))
def test_cell_placement_does_not_matter(name, hf_f32, reference_off):
    """Sequence 1's cells behind sequence 0's (from cell 100, so a 128-cell boundary would fall
    at its position 28): its logits are the bits of sequence 1 decoded alone from cell 0
    (chunks go by position, not by cell index: attn.h)."""
    path = _path(name, hf_f32)
    toks = (np.arange(150, dtype=np.int32) * 29 + 3) % 200
    with Model(path, n_threads=2) as m:
        with Context(m, n_ctx=256, n_seq_max=2, n_ubatch=64, n_threads=2) as c:
            c.decode(toks[:100], seq_id=0)
            got = c.decode(toks, seq_id=1, logits="all")
        with Context(m, n_ctx=256, n_seq_max=1, n_ubatch=64, n_threads=2) as c:
            want = c.decode(toks, logits="all")
    assert np.array_equal(got, want)
