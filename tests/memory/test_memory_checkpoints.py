"""Recurrent checkpoints and the sequence operations, on five tiny families (F32).

- seq_rm(seq, p0, -1) restores the newest checkpoint before p0; re-feeding the gap gives the
  logits of a from-scratch run bit for bit, in the recurrent and (hybrid) the KV child alike
- with no checkpoint before p0 the removal is refused and nothing changes
- periodic / end-of-call / explicit checkpoints land where documented; when full, the one
  leaving the smallest gap goes (ties: the oldest)
- seq_cp copies state and checkpoints (copy on write), seq_keep / whole removal / clear zero
- seq_add: a whole-sequence renumbering is allowed; a shift of the end of the history moves
  the state's position bookkeeping (context shift); a negative or colliding position is refused;
  with RoPE the cached K is rotated on in the model's mode (NORM pairs, or NEOX for qwen35 /
  falcon-h1), so the renumbered sequence continues as the original would
Models: converted at test time from tests/fixtures/hf/* with toolkit.convert.
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.runtime import Context, Model

pytestmark = pytest.mark.native

FAMILIES = ["bamba-tiny", "granitehybrid-moe-tiny", "jamba-tiny", "mamba2-tiny", "falconh1-tiny", "qwen4exp-tiny"]
# Every context here runs ubatches of at most UB tokens: below the chunked-SSD threshold
# (tk_ssd_threshold, 32), so the token-by-token recurrence runs in the reference and in the
# rolled-back run alike - the same computation, compared bit for bit.
UB = 16


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, hf_f32):
    m = Model(hf_f32(request.param))
    yield m
    m.close()


def toks(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 512, n).astype(np.int32)


def fresh(model, t) -> np.ndarray:
    with Context(model, n_ubatch=UB, n_ctx=128) as ctx:
        return ctx.decode(t, logits="all")


def test_rollback_to_checkpoint_is_bit_identical(model):
    a, alt = toks(20, 1), toks(6, 2)
    with Context(model, n_ubatch=UB, n_ctx=128, n_checkpoints=8, checkpoint_every=4) as ctx:
        ctx.decode(a[:13], logits="none")
        ctx.decode(a[13:], logits="none")
        # periodic at pos+1 = 4, 8, 12, 16, 20 and the end of each multi-token call (12, 19)
        assert ctx.memory.checkpoints(0) == [3, 7, 11, 12, 15, 19]
        resume = ctx.memory.rollback(0, 11)
        assert resume == 8                          # newest checkpoint before 11 is 7
        assert ctx.memory.seq_pos_max(0) == 7 and ctx.memory.checkpoints(0) == [3, 7]
        got = ctx.decode(np.concatenate([a[8:11], alt]), logits="all")
    ref = fresh(model, np.concatenate([a[:11], alt]))
    assert np.array_equal(got, ref[8:])


def test_rollback_exact_position(model):
    a = toks(12, 3)
    ref = fresh(model, a)
    with Context(model, n_ubatch=UB, n_ctx=64, n_checkpoints=2) as ctx:
        ctx.decode(a[:6], logits="none")            # end-of-call checkpoint at 5
        ctx.decode(a[6:], logits="none")            # ... and at 11
        assert ctx.memory.rollback(0, 6) == 6       # state at 5 is exactly what is needed
        assert np.array_equal(ctx.decode(a[6:], logits="all"), ref[6:])


def test_finite_range_past_the_end_rolls_back_both_children(model):
    a = toks(12, 14)
    ref = fresh(model, a)
    with Context(model, n_ubatch=UB, n_ctx=64, n_checkpoints=3, checkpoint_every=4) as ctx:
        ctx.decode(a, logits="none")                # checkpoints 3, 7, 11
        assert ctx.memory.seq_rm(0, 6, 1000)        # [6, 1000) covers the end: back to 3
        assert ctx.memory.seq_pos_max(0) == 3 and ctx.memory.seq_pos_min(0) == 3
        assert np.array_equal(ctx.decode(a[4:], logits="all"), ref[4:])


def test_no_checkpoint_before_p0_is_refused_unchanged(model):
    a = toks(16, 4)
    ref = fresh(model, a)
    with Context(model, n_ubatch=UB, n_ctx=64, n_checkpoints=4) as ctx:
        ctx.decode(a[:10], logits="none")           # one checkpoint, at 9
        blob = ctx.state_bytes()
        assert ctx.memory.rollback(0, 9) is None    # needs a state at <= 8
        assert not ctx.memory.seq_rm(0, 3, -1)      # nor a longer tail
        assert ctx.state_bytes() == blob            # nothing moved, in either child
        assert np.array_equal(ctx.decode(a[10:], logits="all"), ref[10:])


def test_without_checkpoints_tail_removal_is_refused(model):
    a = toks(8, 5)
    with Context(model, n_ubatch=UB, n_ctx=64) as ctx:
        ctx.decode(a)
        assert ctx.memory.checkpoints(0) == []
        assert not ctx.memory.seq_rm(0, 4, -1)
        assert ctx.memory.seq_pos_max(0) == 7


def test_explicit_checkpoints_and_eviction(model):
    a = toks(10, 6)
    with Context(model, n_ubatch=UB, n_ctx=64, n_checkpoints=3) as ctx:
        for i in range(10):
            ctx.decode(a[i:i + 1], logits="none")   # one token a call: no automatic checkpoint
            if i in (1, 3, 5, 7):
                ctx.memory.checkpoint(0)
        assert ctx.memory.checkpoints(0) == [3, 5, 7]   # equal gaps: the oldest (1) went
        ctx.decode(a[:1], logits="none")            # pos 10
        ctx.memory.checkpoint(0)                    # 3 (gap 5) < 5 (gap 4) > 7 (gap 5): 5 goes
        assert ctx.memory.checkpoints(0) == [3, 7, 10]
        ctx.memory.set_checkpoints(3, 0)
        assert ctx.memory.checkpoints(0) == []


def test_seq_cp_copies_checkpoints_copy_on_write(model):
    a, x, y = toks(12, 7), toks(3, 8), toks(4, 9)
    with Context(model, n_ubatch=UB, n_ctx=128, n_seq_max=3, n_checkpoints=4, checkpoint_every=4) as ctx:
        ctx.decode(a, seq_id=0, logits="none")
        ctx.memory.seq_cp(0, 1)
        assert ctx.memory.checkpoints(1) == ctx.memory.checkpoints(0) == [3, 7, 11]
        assert ctx.memory.rollback(1, 6) == 4       # seq 1 rewinds; seq 0 keeps its state
        g1 = ctx.decode(np.concatenate([a[4:6], y]), seq_id=1, logits="all")
        g0 = ctx.decode(x, seq_id=0, logits="all")
        assert ctx.memory.checkpoints(0) == [3, 7, 11, 14]
    assert np.array_equal(g1, fresh(model, np.concatenate([a[:6], y]))[4:])
    assert np.array_equal(g0, fresh(model, np.concatenate([a, x]))[12:])


def test_whole_removal_keep_clear_zero_the_state(model):
    a, b = toks(9, 10), toks(7, 11)
    ref = fresh(model, b)
    with Context(model, n_ubatch=UB, n_ctx=128, n_seq_max=2, n_checkpoints=2) as ctx:
        ctx.decode(a, seq_id=0)
        ctx.decode(a, seq_id=1)
        assert ctx.memory.seq_rm(0, 0, -1)
        assert ctx.memory.checkpoints(0) == [] and ctx.memory.seq_pos_max(0) == -1
        assert np.array_equal(ctx.decode(b, seq_id=0, logits="all"), ref)
        ctx.memory.seq_keep(0)
        assert ctx.memory.seq_pos_max(1) == -1 and ctx.memory.checkpoints(1) == []
        assert np.array_equal(ctx.decode(b, seq_id=1, logits="all"), ref)
        ctx.memory.clear()
        assert ctx.memory.checkpoints(0) == ctx.memory.checkpoints(1) == []
        assert np.array_equal(ctx.decode(b, seq_id=0, logits="all"), ref)


def test_seq_add_rules(model):
    a, x = toks(10, 12), toks(4, 13)
    hybrid = model.hparams.attention_layers and not model.hparams.use_rope
    with Context(model, n_ubatch=UB, n_ctx=128, n_seq_max=2, n_checkpoints=2) as ctx:
        ctx.decode(a, logits="none")
        blob = ctx.state_bytes()
        # the end of the history moves (a context shift): positions and checkpoints with it
        assert ctx.memory.seq_add(0, 4, -1, 2)       # a gap at 4, 5
        assert ctx.memory.seq_pos_max(0) == 11 and ctx.memory.checkpoints(0) == [11]
        assert ctx.memory.seq_add(0, 6, -1, -2)      # and back
        assert ctx.memory.seq_pos_max(0) == 9 and ctx.memory.checkpoints(0) == [9]
        if not model.hparams.use_rope or not model.hparams.attention_layers:
            assert ctx.state_bytes() == blob         # no K to rotate: exactly as before
        blob = ctx.state_bytes()
        # KV cells 4.. onto 3.., still held: refused; a pure recurrent state holds no positions
        assert ctx.memory.seq_add(0, 4, -1, -1) == (not model.hparams.attention_layers)
        if not model.hparams.attention_layers:
            assert ctx.memory.seq_pos_max(0) == 8 and ctx.memory.seq_add(0, 3, -1, 1)
        assert not ctx.memory.seq_add(0, 0, -1, -1)  # first position would be negative
        assert ctx.state_bytes() == blob
        assert ctx.memory.seq_add(0, 20, -1, 5)      # misses the sequence: allowed, no-op
        assert ctx.state_bytes() == blob
        ctx.memory.seq_cp(0, 1)
        blob = ctx.state_bytes()
        assert ctx.memory.seq_add(0, 0, -1, 3) == (not model.hparams.attention_layers)
        if model.hparams.attention_layers:           # KV cells shared with seq 1: refused
            assert ctx.state_bytes() == blob
            ctx.memory.seq_rm(1, 0, -1)
            assert ctx.memory.seq_add(0, 0, -1, 3)
        assert ctx.memory.seq_pos_max(0) == 12 and ctx.memory.checkpoints(0) == [12]
        got = ctx.decode(x, logits="all")
    if hybrid or not model.hparams.attention_layers:
        # positions do not enter the computation (no RoPE): the renumbered sequence continues
        # exactly as the original would
        assert np.array_equal(got, fresh(model, np.concatenate([a, x]))[10:])


@pytest.mark.parametrize("name", ["bamba-tiny", "qwen35-tiny", "falconh1-tiny"])
def test_whole_sequence_shift_rotates_k_in_the_models_rope_mode(hf_f32, name):
    """After seq_add(0, 0, -1, 7) the next tokens see the same relative positions: their logits
    equal those of the unshifted run up to float rounding of the extra rotation (NORM RoPE for
    bamba; NEOX for qwen35 and falcon-h1, where a NORM re-rotation gave rel L2 0.67 and 0.04)."""
    a, x = toks(20, 21), toks(10, 22)
    with Model(hf_f32(name)) as m:
        assert m.hparams.use_rope and m.hparams.attention_layers
        with Context(m, n_ctx=128) as ctx:
            ctx.decode(a, logits="none")
            assert ctx.memory.seq_add(0, 0, -1, 7) and ctx.memory.seq_pos_max(0) == 26
            got = ctx.decode(x, logits="all")
        want = fresh(m, np.concatenate([a, x]))[20:]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
