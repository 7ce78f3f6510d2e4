"""A 7-turn conversation with rewinds through toolkit.runtime.session.Conversation.

Turns: user / answer pairs; turn 3 and 6 regenerate their answer (rewind to the end of the
user turn, sample another token), turns 4 and 7 edit the user turn (rewind to its start).
Every logits row the conversation produced is checked against a fresh context that decodes
the whole current history at once: bit-identical (F32).  Run on the tiny hybrids and Mamba-2
converted at test time (tests/fixtures/hf).
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from toolkit.runtime import Context, Model
from toolkit.runtime.session import Conversation

pytestmark = pytest.mark.native

HF = pathlib.Path(__file__).parent.parent / "fixtures" / "hf"
# Every context here runs ubatches of at most UB tokens: below the chunked-SSD threshold
# (tk_ssd_threshold, 32), so the token-by-token recurrence runs in the reference and in the
# rolled-back run alike - the same computation, compared bit for bit.
UB = 16


@pytest.fixture(scope="module", params=["bamba-tiny", "granitehybrid-moe-tiny", "jamba-tiny", "mamba2-tiny",
                                                 "nemotronh-tiny", "zamba2-tiny", "qwen4exp-tiny",
                                                 "qwen4exp-ple2-tiny", "glm5next-tiny", "bailinghybrid-tiny"])
def model(request, tmp_path_factory):
    from toolkit.convert import convert
    out = tmp_path_factory.mktemp("mt") / f"{request.param}.f32.gguf"
    convert(str(HF / request.param), str(out), "f32")
    m = Model(out)
    yield m
    m.close()


def ids(n: int, seed: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(0, 512, n)]


class Checked:
    """Conversation + a record of every logits row by position, checked against a recompute."""

    def __init__(self, model, ctx, tol: float = 0.0):
        self.model, self.conv, self.rec = model, Conversation(ctx), {}
        self.ub, self.tol = ctx.n_ubatch, tol

    def feed(self, toks):
        p = len(self.conv.tokens)
        out = self.conv.feed(toks)
        for i in range(len(toks)):
            self.rec[p + i] = out[i]
        return out[-1]

    def answer(self, first_logits, n: int, rank: int = 0) -> None:
        lg = first_logits
        for k in range(n):
            order = np.argsort(-lg, kind="stable")
            lg = self.feed([int(order[rank if k == 0 else 0])])

    def rewind(self, p: int, logits: bool = False):
        for q in [q for q in self.rec if q >= p]:
            del self.rec[q]
        out = self.conv.rewind(p, logits=logits)
        if logits:
            self.rec[p - 1] = out[0]
            return out[0]
        return None

    def check(self, turn: int) -> None:
        with Context(self.model, n_ubatch=self.ub, n_ctx=256) as fresh:
            ref = fresh.decode(self.conv.tokens, logits="all")
        assert sorted(self.rec) == list(range(len(self.conv.tokens))), f"turn {turn}: positions"
        for p, row in self.rec.items():
            err = np.abs(row - ref[p]).max() / np.abs(ref[p]).max()
            assert (np.array_equal(row, ref[p]) if self.tol == 0 else err <= self.tol), \
                f"turn {turn}, position {p}: relative max diff {err:.3e}"


@pytest.mark.parametrize("n_ubatch,tol", [(UB, 0.0), (512, 1e-5)])
def test_seven_turns_with_rewinds_match_recompute(model, n_ubatch, tol):
    """(UB, 0): the same computation, bit for bit.  (512, 1e-5): long runs take the chunked
    SSD scan in the recompute but not in the 1-token steps (a different summation order)."""
    with Context(model, n_ctx=256, n_ubatch=n_ubatch, n_checkpoints=6, checkpoint_every=0) as ctx:
        c = Checked(model, ctx, tol)
        for turn in range(1, 8):
            start = len(c.conv.tokens)
            lg = c.feed(ids(5 + turn, 100 + turn))
            c.answer(lg, 4)
            c.check(turn)
            if turn in (3, 6):                                  # regenerate the answer
                user_end = start + 5 + turn
                lg = c.rewind(user_end, logits=True)
                assert len(c.conv.tokens) == user_end
                c.answer(lg, 4, rank=1)
                c.check(turn)
            if turn in (4, 7):                                  # edit the user turn
                c.rewind(start)
                assert len(c.conv.tokens) == start
                lg = c.feed(ids(3 + turn, 200 + turn))
                c.answer(lg, 3)
                c.check(turn)
        assert len(c.conv.tokens) > 60
        # the rewinds were served by checkpoints, not by recomputing from position 0
        assert c.conv.n_recomputed == 0
