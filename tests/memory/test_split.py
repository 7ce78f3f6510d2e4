"""The batch -> ubatch split (toolkit/native/context.c) and its keep-tail rule (llama.cpp's
n_keep_tail in split_equal): with tk_context_set_keep_tail(n), the last n tokens of each
sequence of a batch land in one ubatch, never a sequence's last token apart from the ones
before it; the logits do not depend on the split (below the SSD threshold: bit for bit).
Models: converted at test time from tests/fixtures/hf/* (F32)."""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.binding import ffi, lib
from toolkit.errors import NativeError
from toolkit.runtime import Context, Model

pytestmark = pytest.mark.native

UB = 16


def toks(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 512, n).astype(np.int32)


def ubatches(ctx) -> list[tuple[int, int]]:
    a, b = ffi.new("int32_t[]", 64), ffi.new("int32_t[]", 64)
    n = lib.tk_context_ubatches(ctx.ptr, a, b, 64)
    return [(a[i], b[i]) for i in range(min(n, 64))]


def keep_tail(ctx, n: int) -> None:
    st = lib.tk_context_set_keep_tail(ctx.ptr, n)
    if st != lib.TK_OK:
        raise NativeError(f"keep_tail: {st}")


@pytest.fixture(scope="module", params=["bamba-tiny", "qwen35-tiny", "mamba2-tiny"])
def model(request, hf_f32):
    m = Model(hf_f32(request.param))
    yield m
    m.close()


@pytest.mark.parametrize("keep,sizes,want", [
    (0, (17,), [(1, 16), (1, 1)]),            # today's split: the last token alone
    (2, (17,), [(1, 15), (1, 2)]),            # cut so that 2 remain together
    (0, (10, 11), [(2, 8), (2, 2), (1, 1)]),  # 16 / 2 tokens each, then the rest
    (2, (10, 11), [(2, 8), (1, 2), (1, 3)]),  # the second would leave 1: deferred, then whole
    (3, (40,), [(1, 16), (1, 16), (1, 8)]),   # remainders >= 3 all along: unchanged
    (5, (20,), [(1, 15), (1, 5)]),
])
def test_keep_tail_split(model, keep, sizes, want):
    items = [(toks(n, 70 + i), i) for i, n in enumerate(sizes)]
    with Context(model, n_ctx=128, n_seq_max=2, n_ubatch=UB) as ref_ctx:
        ref = ref_ctx.decode_batch(items, logits="all")
    with Context(model, n_ctx=128, n_seq_max=2, n_ubatch=UB) as ctx:
        keep_tail(ctx, keep)
        got = ctx.decode_batch(items, logits="all")
        assert ubatches(ctx) == want
        for s, n in enumerate(sizes):                       # every token went in
            assert ctx.memory.seq_pos_max(s) == n - 1
    for a, b in zip(got, ref):
        assert np.array_equal(a, b)


def test_keep_tail_against_a_periodic_checkpoint(model):
    """A checkpoint cut (every 8) would leave the 9th token alone: with keep 2 the sequence
    runs to its end in one ubatch instead (the end-of-call checkpoint holds the state)."""
    t = toks(9, 80)
    with Context(model, n_ctx=64, n_ubatch=UB, n_checkpoints=4, checkpoint_every=8) as ctx:
        ctx.decode(t, logits="none")
        assert ubatches(ctx) == [(1, 8), (1, 1)]
        assert ctx.memory.checkpoints(0) == [7, 8]
    with Context(model, n_ctx=64, n_ubatch=UB, n_checkpoints=4, checkpoint_every=8) as ctx:
        keep_tail(ctx, 2)
        ctx.decode(t, logits="none")
        assert ubatches(ctx) == [(1, 9)]
        assert ctx.memory.checkpoints(0) == [8]


def test_keep_tail_bounds(model):
    with Context(model, n_ctx=64, n_ubatch=UB) as ctx:
        for bad in (-1, UB):
            assert lib.tk_context_set_keep_tail(ctx.ptr, bad) == lib.TK_ERR_INVALID
        assert lib.tk_context_set_keep_tail(ctx.ptr, UB - 1) == lib.TK_OK
