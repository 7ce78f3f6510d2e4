"""Speculative decoding's partial rollback (Memory.set_draft_window; memory_rs.c's ring).

- after a verify batch of K+1 tokens, seq_rm(seq, p, -1) inside the window restores the state
  after p - 1 exactly: the sequence's state blob (recurrent state + KV cells) is byte-identical
  to that of a run that never saw the rejected tokens, on every recurrent kind the runtime has
  (Mamba-1, Mamba-2, GDN, short conv, parallel, Zamba2, and qwen4exp's PLE history and conv window), at every rollback point of the window
- several sequences in one batch, one rejecting while the others accept
- outside the window the removal is refused as before (nothing changes); seq_cp carries the
  ring; the memory report counts it
- the target's mode (keep_last=False, TK_SPEC_NO_LAST: no copy of the state after a call's last
  token) gives the same bits at every rollback point, also when the batch is split into several
  ubatches, and has no state for the end of an earlier call, which the default mode has
Models: converted at test time from tests/fixtures/hf/* (F32).
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.runtime import Context, Model
from families import names

pytestmark = pytest.mark.native

# one fixture per recurrent layer kind (and the hybrids that mix them with attention)
FAMILIES = names("rollback")   # tests/families.py
K = 4


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, hf_f32):
    m = Model(hf_f32(request.param))
    yield m
    m.close()


def toks(model, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, min(model.n_vocab, 512), n).astype(np.int32)


def reference_state(model, prefix, accepted, n_seq=1, seq=0) -> bytes:
    """The state blob of `seq` after the prefix as one call and the accepted tokens one at a time."""
    with Context(model, n_ctx=128, n_seq_max=n_seq, n_ubatch=32) as ctx:
        ctx.decode(prefix, seq_id=seq, logits="none")
        for t in accepted:
            ctx.decode([t], seq_id=seq, logits="none")
        return ctx.state_bytes(seq)


@pytest.mark.parametrize("keep_last", [True, False])
def test_rollback_at_every_point_of_the_window_is_bit_identical(model, keep_last):
    prefix, verify = toks(model, 11, 1), toks(model, K + 1, 2)
    with Context(model, n_ctx=128, n_ubatch=32) as ctx:
        ctx.memory.set_draft_window(K, keep_last=keep_last)
        ctx.decode(prefix, logits="none")
        blob0 = ctx.state_bytes(0)
        for n_keep in range(K + 1, 0, -1):          # keep 5, 4, ... 1 of the verify batch
            ctx.load_state(blob0, 0)                # the ring is not in blobs: verify again
            logits = ctx.decode(verify, logits="all", snapshots=True)
            assert logits.shape == (K + 1, model.n_vocab)
            p = len(prefix) + n_keep
            assert ctx.memory.rollback(0, p) == p   # exact: nothing to re-feed
            assert ctx.memory.seq_pos_max(0) == p - 1
            assert ctx.state_bytes(0) == reference_state(model, prefix, verify[:n_keep]), n_keep
            # and it goes on as the reference does
            nxt = ctx.decode(toks(model, 3, 3), logits="all")
            with Context(model, n_ctx=128, n_ubatch=32) as ref:
                ref.decode(np.concatenate([prefix, verify[:n_keep]]), logits="none")
                assert np.array_equal(nxt, ref.decode(toks(model, 3, 3), logits="all"))


def test_outside_the_window_is_refused(model):
    prefix, verify = toks(model, 9, 4), toks(model, K + 1, 5)
    with Context(model, n_ctx=128, n_ubatch=32) as ctx:
        ctx.memory.set_draft_window(K)
        ctx.decode(prefix, logits="none")
        ctx.decode(verify, logits="none", snapshots=True)
        before = ctx.state_bytes(0)
        assert not ctx.memory.seq_rm(0, len(prefix), -1)   # state after len(prefix)-1: a prompt token
        assert ctx.state_bytes(0) == before
        # without a window the same removal inside the verify batch is refused too
        ctx.memory.set_draft_window(0)
        assert not ctx.memory.seq_rm(0, len(prefix) + 2, -1)
        assert ctx.state_bytes(0) == before


@pytest.mark.parametrize("keep_last", [True, False])
def test_multi_sequence_one_rejects_others_accept(model, keep_last):
    n = 3
    prefixes = [toks(model, 7 + s, 10 + s) for s in range(n)]
    verifies = [toks(model, K + 1 - s, 20 + s) for s in range(n)]   # unequal lengths: several ubatches
    keep = [len(verifies[0]) - 1, 1, len(verifies[2]) - 1]           # sequence 1 rejects all its drafts
    with Context(model, n_ctx=256, n_seq_max=n, n_ubatch=32) as ctx:
        ctx.memory.set_draft_window(K, keep_last=keep_last)
        ctx.decode_batch([(p, s) for s, p in enumerate(prefixes)], logits="none")
        ctx.decode_batch([(v, s) for s, v in enumerate(verifies)], logits="all", snapshots=True)
        for s in range(n):
            p = len(prefixes[s]) + keep[s]
            assert ctx.memory.rollback(s, p) == p
        for s in range(n):
            assert ctx.state_bytes(s) == reference_state(model, prefixes[s], verifies[s][:keep[s]], n, s), s


@pytest.mark.parametrize("keep_last", [True, False])
def test_end_of_an_earlier_call_only_with_keep_last(model, keep_last):
    """The target mode copies no state after a call's last token: a rollback to the end of the
    verify call, once another token followed, is not exact from the ring (it goes back to the
    prompt's checkpoint and re-feeds); the default mode has that state."""
    prefix, verify = toks(model, 9, 50), toks(model, K + 1, 51)
    with Context(model, n_ctx=128, n_ubatch=32, n_checkpoints=2) as ctx:
        ctx.memory.set_draft_window(K, keep_last=keep_last)
        ctx.decode(prefix, logits="none")
        ctx.decode(verify, logits="none", snapshots=True)
        ctx.decode(toks(model, 1, 52), logits="none")
        p = len(prefix) + K + 1
        got = ctx.memory.rollback(0, p)
        if keep_last:
            assert got == p
            nxt = ctx.decode(toks(model, 2, 53), logits="all")
            with Context(model, n_ctx=128, n_ubatch=32) as ref:
                ref.decode(np.concatenate([prefix, verify]), logits="none")
                assert np.array_equal(nxt, ref.decode(toks(model, 2, 53), logits="all"))
        else:
            assert got == len(prefix)                   # the end-of-prompt checkpoint


@pytest.mark.parametrize("keep_last", [True, False])
def test_a_checkpoint_restore_drops_the_ring_of_the_history_it_cuts(model, keep_last):
    """A rollback through a checkpoint cuts the history: the ring's states of positions after
    it belong to tokens that are gone and must not be restored later (found by a fresh-eyes
    review: a later rollback restored the old sequence's state 'exactly')."""
    prefix, old, verify, new = toks(model, 10, 60), toks(model, 10, 61), toks(model, 4, 62), toks(model, 13, 63)
    with Context(model, n_ctx=128, n_ubatch=32, n_checkpoints=4) as ctx:
        ctx.memory.set_draft_window(K, keep_last=keep_last)
        ctx.decode(prefix, logits="none")                       # checkpoint at its end
        for t in old:
            ctx.decode([t], logits="none")
        ctx.decode(verify, logits="none", snapshots=True)       # ring rows for positions 20..
        assert ctx.memory.rollback(0, 12) == len(prefix)        # back to the checkpoint
        for t in new:                                            # positions 10..22, other tokens
            ctx.decode([t], logits="none")
        p = len(prefix) + 12
        got = ctx.memory.rollback(0, p)
        assert got is None or got <= len(prefix)                # no state of position 21 is kept now
        if got is not None:
            ctx.decode(new[got - len(prefix):12], logits="none")
        nxt = ctx.decode(new[12:], logits="all")
    with Context(model, n_ctx=128, n_ubatch=32) as ref:
        ref.decode(np.concatenate([prefix, new[:12]]), logits="none")
        assert np.array_equal(nxt, ref.decode(new[12:], logits="all"))


def test_prompt_chunks_run_and_checkpoint_as_without_a_window(model):
    """With a draft window as wide as a prompt chunk, a call that does not ask for snapshots
    (a prompt chunk) keeps none: same kernels (Mamba-2's chunked SSD from 32 tokens), same bits
    as without a window, and its end-of-call checkpoint is taken (a later request resumes
    there)."""
    prefix, chunk, more = toks(model, 5, 70), toks(model, 40, 71), toks(model, 3, 72)
    out = []
    for window in (0, 48):
        with Context(model, n_ctx=128, n_ubatch=64, n_checkpoints=4) as ctx:
            if window:
                ctx.memory.set_draft_window(window, keep_last=False)
            ctx.decode(prefix, logits="none")
            out.append(ctx.decode(chunk, logits="all"))
            ctx.decode(more, logits="none")
            p = len(prefix) + len(chunk)
            assert ctx.memory.rollback(0, p) == p                # the chunk's end-of-call checkpoint
    assert np.array_equal(out[0], out[1])


def test_seq_cp_carries_the_window_and_report_counts_it(model):
    prefix, verify = toks(model, 6, 30), toks(model, K + 1, 31)
    with Context(model, n_ctx=128, n_seq_max=2, n_ubatch=32) as ctx:
        assert ctx.memory_report()["draft"] == 0
        ctx.memory.set_draft_window(K)
        rep = ctx.memory_report()
        assert rep["draft"] == 2 * (K + 1) * rep["recurrent"] // 2
        ctx.memory.set_draft_window(K, keep_last=False)      # the target's window: K rows
        assert ctx.memory_report()["draft"] == 2 * K * rep["recurrent"] // 2
        ctx.memory.set_draft_window(K)
        ctx.decode(prefix, logits="none")
        ctx.decode(verify, logits="none", snapshots=True)
        ctx.memory.seq_cp(0, 1)
        assert ctx.memory.rollback(1, len(prefix) + 2) == len(prefix) + 2
        assert ctx.memory.seq_pos_max(0) == len(prefix) + K       # the source is untouched
        assert ctx.state_bytes(1) == reference_state(model, prefix, verify[:2])


def test_state_blobs_stay_valid_without_the_ring(model):
    """A blob written with a window (after a verify and a rollback) loads into a context
    without one and goes on as the reference does; the ring itself is not in the blob."""
    prefix, verify, more = toks(model, 8, 40), toks(model, K + 1, 41), toks(model, 3, 42)
    with Context(model, n_ctx=128, n_ubatch=32) as ctx:
        ctx.memory.set_draft_window(K)
        ctx.decode(prefix, logits="none")
        ctx.decode(verify, logits="none", snapshots=True)
        assert ctx.memory.rollback(0, len(prefix) + 2) == len(prefix) + 2
        blob = ctx.state_bytes(0)
    with Context(model, n_ctx=128, n_ubatch=32) as plain:
        plain.decode(prefix, logits="none")
        plain.decode(verify[:2], logits="none")
        want = plain.decode(more, logits="all")
    with Context(model, n_ctx=128, n_ubatch=32) as ctx2:
        ctx2.load_state(blob, 0)
        assert ctx2.memory.seq_pos_max(0) == len(prefix) + 1
        assert np.array_equal(ctx2.decode(more, logits="all"), want)
