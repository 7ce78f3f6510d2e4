"""Speculative decoding (toolkit/runtime/speculative.py).

- exactness: greedy speculative output equals plain greedy output token for token, with
  --draft-max 1, 4, 8, drafts from the same model (all accepted), another model (the same
  architecture with other weights), prompt lookup, and a draft that is wrong on purpose (every
  position of every window rejected), on every recurrent family fixture
- the acceptance rule: chi-square over 20,000 draws (synthetic p, q on 6 tokens) cannot tell
  its output from p (p-value > 0.01); a broken rule (no residual) is told apart
- end to end with sampling: the first two tokens after a prompt, over many seeds, follow the
  target's distribution (chi-square)
- DraftModel over several sequences (serve's slots): one draft_batch drafts what a
  one-sequence DraftModel drafts for each history, through rejections and a history change
- CLI: a draft model with another vocabulary is one line, exit 2
Models: converted at test time from tests/fixtures/hf/* (F32); the demo model for the CLI.
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.runtime import Context, Model
from toolkit.runtime.generate import generate
from toolkit.runtime.sampling import Sampler, SamplerParams
from toolkit.runtime.speculative import (DraftModel, PromptLookup, generate_speculative, speculative_accept)
from toolkit.runtime.tokenizer import Tokenizer

from stats_util import chi2_p as _chi2_p, gammq as _gammq
from families import names

FAMILIES = names("spec")
N_GEN = 40


class WrongDraft:
    """Drafts tokens the target never picks: (argmax + 1) of a plain run's next tokens would
    be too clever; any fixed token that differs from the reference continuation will do."""

    def __init__(self, ref: list[int], n_prompt: int, n_vocab: int):
        self.ref, self.n_prompt, self.V = ref, n_prompt, n_vocab

    def draft(self, history, k):
        i = len(history) - self.n_prompt          # index of the next reference token
        return [(self.ref[j] + 1) % self.V if j < len(self.ref) else 0 for j in range(i, i + k)], None

    def close(self):
        pass


def _prompt(m) -> list[int]:
    rng = np.random.default_rng(7)
    base = rng.integers(0, min(m.n_vocab, 300), 12).tolist()
    return base + base[:6]      # a repeat, so that lookup finds something


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, hf_f32):
    m = Model(hf_f32(request.param))
    tok = Tokenizer.from_gguf(m.gguf)
    prompt = _prompt(m)
    with Context(m, n_ctx=256, n_ubatch=32) as ctx:
        ref = generate(ctx, tok, prompt, N_GEN, Sampler(SamplerParams(temp=0)), ignore_eos=True).tokens
    yield m, tok, prompt, ref
    m.close()


def _spec(m, tok, prompt, drafter_of, k, n=N_GEN):
    with Context(m, n_ctx=256, n_ubatch=32) as ctx:
        ctx.memory.set_draft_window(k)
        d = drafter_of(k)
        try:
            return generate_speculative(ctx, tok, prompt, n, Sampler(SamplerParams(temp=0)), d, draft_max=k,
                                        ignore_eos=True)
        finally:
            d.close()


def _self_draft(m):
    def make(k):
        dc = Context(m, n_ctx=256, n_ubatch=32, n_checkpoints=1)
        dc.memory.set_draft_window(k)
        return DraftModel(dc, SamplerParams(temp=0), 0)
    return make


@pytest.mark.native
@pytest.mark.parametrize("k", [1, 4, 8])
def test_greedy_equals_plain(fam, k):
    m, tok, prompt, ref = fam
    r = _spec(m, tok, prompt, _self_draft(m), k)
    assert r.tokens == ref
    assert r.spec.n_drafted > 0 and r.spec.n_accepted == r.spec.n_drafted     # the same model agrees with itself
    r = _spec(m, tok, prompt, lambda k: PromptLookup(2), k)
    assert r.tokens == ref
    r = _spec(m, tok, prompt, lambda k: WrongDraft(ref, len(prompt), m.n_vocab), k)
    assert r.tokens == ref
    assert r.spec.n_accepted == 0 and r.spec.n_drafted >= (N_GEN - 1) // (k + 1) * k   # rejected at every position


@pytest.mark.native
def test_greedy_with_another_model_as_draft(hf_f32):
    """bamba-tiny drafting for bamba-small? they differ in vocabulary; use the same architecture
    with other weights: granitehybrid-moe-tiny shares bamba-tiny's tokenizer and vocabulary."""
    target, draft = Model(hf_f32("bamba-tiny")), Model(hf_f32("granitehybrid-moe-tiny"))
    try:
        tok = Tokenizer.from_gguf(target.gguf)
        from toolkit.runtime.speculative import check_same_vocab
        check_same_vocab(tok, Tokenizer.from_gguf(draft.gguf), "draft")
        prompt = _prompt(target)
        with Context(target, n_ctx=256) as ctx:
            ref = generate(ctx, tok, prompt, N_GEN, Sampler(SamplerParams(temp=0)), ignore_eos=True).tokens
        for k in (1, 4, 8):
            def make(k):
                dc = Context(draft, n_ctx=256, n_checkpoints=1)
                dc.memory.set_draft_window(k)
                return DraftModel(dc, SamplerParams(temp=0), 0)
            r = _spec(target, tok, prompt, make, k)
            assert r.tokens == ref, k
            assert r.spec.n_accepted < r.spec.n_drafted      # another model: some rejections
    finally:
        target.close()
        draft.close()


_REF200: dict[str, tuple] = {}


@pytest.mark.native
@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_equals_plain_200_tokens(hf_f32, name, k):
    m = Model(hf_f32(name))
    try:
        tok = Tokenizer.from_gguf(m.gguf)
        prompt = _prompt(m)
        if name not in _REF200:
            with Context(m, n_ctx=512) as ctx:
                _REF200[name] = generate(ctx, tok, prompt, 200, Sampler(SamplerParams(temp=0)), ignore_eos=True).tokens
        ref = _REF200[name]
        for make in (_self_draft(m), lambda k: PromptLookup(3), lambda k: WrongDraft(ref, len(prompt), m.n_vocab)):
            with Context(m, n_ctx=512) as ctx:
                ctx.memory.set_draft_window(k)
                d = make(k)
                r = generate_speculative(ctx, tok, prompt, 200, Sampler(SamplerParams(temp=0)), d, draft_max=k,
                                         ignore_eos=True)
                d.close()
            assert r.tokens == ref
    finally:
        m.close()


# ---- the acceptance rule ---------------------------------------------------------------------

def test_chi2_p_values():
    """scipy.stats.chi2.sf reference values."""
    assert abs(_gammq(2.5, 11.0705 / 2) - 0.05) < 1e-4        # df 5, 95th percentile
    assert abs(_gammq(1.0, 9.21034 / 2) - 0.01) < 1e-5        # df 2, 99th percentile
    assert abs(_gammq(2.0, 1.0) - 0.7357588823) < 1e-8        # df 4, x 2


P = np.array([0.05, 0.30, 0.10, 0.25, 0.0, 0.30])
Q = np.array([0.40, 0.10, 0.20, 0.05, 0.25, 0.0])


def _draws(rule, n=20000, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros(P.size, np.int64)
    for _ in range(n):
        d = int(rng.choice(P.size, p=Q))
        _, t = rule(P, Q, d, rng)
        counts[t] += 1
    return counts


def test_acceptance_rule_gives_the_target_distribution():
    assert _chi2_p(_draws(speculative_accept), P) > 0.01


def test_a_broken_rule_is_detected():
    """Resampling from p instead of the residual max(0, p - q) is biased: the test sees it."""

    def broken(p, q, d, rng):
        if rng.random() * q[d] < p[d]:
            return True, d
        return False, int(rng.choice(p.size, p=p))
    assert _chi2_p(_draws(broken), P) < 0.01


def test_one_hot_draft_is_accepted_with_probability_p():
    rng = np.random.default_rng(1)
    q = np.zeros(P.size)
    q[3] = 1.0
    acc = sum(speculative_accept(P, q, 3, rng)[0] for _ in range(20000))
    assert abs(acc / 20000 - P[3]) < 0.015


@pytest.mark.native
def test_sampling_end_to_end_follows_the_target(hf_f32):
    """Temperature sampling with a draft model of other weights: the distribution of the first
    drafted position's token (the 2nd generated token, given the 1st) matches the target's."""
    target, draft = Model(hf_f32("bamba-tiny")), Model(hf_f32("granitehybrid-moe-tiny"))
    try:
        tok = Tokenizer.from_gguf(target.gguf)
        prompt = _prompt(target)
        params = SamplerParams(temp=1.5, top_k=6, top_p=1.0, min_p=0.0)
        # the target's distribution at position 2 given the greedy-forced first token
        first = None
        n, counts = 600, {}
        ctx = Context(target, n_ctx=64)
        ctx.memory.set_draft_window(2)
        dc = Context(draft, n_ctx=64, n_checkpoints=1)
        dc.memory.set_draft_window(2)
        blob = None
        for seed in range(n):
            ctx.memory.clear()
            dr = DraftModel(dc, params, seed)
            dc.memory.clear()
            r = generate_speculative(ctx, tok, prompt, 2, Sampler(SamplerParams(**{**params.__dict__, "seed": seed})),
                                     dr, draft_max=2, ignore_eos=True)
            counts.setdefault(r.tokens[0], []).append(r.tokens[1])
        first, seconds = max(counts.items(), key=lambda kv: len(kv[1]))
        with Context(target, n_ctx=64) as c2:
            row = c2.decode(prompt + [first], logits="last")[-1]
        ids, probs = Sampler(params).candidates(row)
        p = np.zeros(target.n_vocab)
        p[ids] = probs
        c = np.bincount(np.array(seconds), minlength=target.n_vocab)
        assert len(seconds) >= 100
        assert _chi2_p(c, p) > 0.01
        dc.close()
        ctx.close()
    finally:
        target.close()
        draft.close()


@pytest.mark.native
@pytest.mark.parametrize("name", ["bamba-tiny", "jamba-tiny", "qwen35-tiny"])
def test_draft_batch_equals_one_sequence_each(name, hf_f32):
    """DraftModel over several sequences (toolkit serve's slots): each sequence's greedy drafts
    from one draft_batch equal a one-sequence DraftModel's for the same history, also after the
    histories moved on with some of the drafts rejected (each sequence rolled back through the
    window, the others in the same calls) and after one sequence jumped to another history."""
    m = Model(hf_f32(name))
    try:
        g = Sampler(SamplerParams(temp=0))
        rng = np.random.default_rng(3)
        hist = [rng.integers(0, min(m.n_vocab, 300), n).tolist() for n in (9, 14, 5)]
        k = 4
        multi = Context(m, n_ctx=3 * 128, n_seq_max=3, n_checkpoints=2)
        multi.memory.set_draft_window(k)
        dm = DraftModel(multi)

        def alone(h, kk):
            with Context(m, n_ctx=128, n_checkpoints=1) as c:
                c.memory.set_draft_window(k)
                return DraftModel(c).draft_batch([(0, h, kk, g)])[0][0]
        for step in range(4):
            got = dm.draft_batch([(i, h, k - i % 2, g) for i, h in enumerate(hist)])
            for i, h in enumerate(hist):
                assert got[i][0] == alone(h, k - i % 2), (step, i)
            # seq i keeps i of its drafts and one other token; at step 2 seq 1 starts anew
            for i, h in enumerate(hist):   # what each sequence holds: its history and the drafts but the last
                assert dm.held[i] == h + got[i][0][:-1], (step, i)
                assert multi.memory.seq_pos_max(i) + 1 == len(dm.held[i]), (step, i)
            hist = [h + got[i][0][:i] + [int(rng.integers(0, 300))] for i, h in enumerate(hist)]
            if step == 2:
                hist[1] = hist[1][:3] + [7, 8, 9]
        multi.close()
    finally:
        m.close()


# ---- found by the fresh-eyes breaker ----------------------------------------------------------

@pytest.mark.native
@pytest.mark.parametrize("where", ["after_decode", "mid_verify"])
@pytest.mark.parametrize("name", ["lfm3-tiny", "bamba-tiny"])
def test_interrupt_in_a_verify_step_leaves_held_tokens_equal_to_the_memory(hf_f32, monkeypatch, tmp_path, name, where):
    """Ctrl-C between a verify call's decode and its rollback left the drafts in the memory:
    `toolkit run --lookup --session S` then said 'error: session S: sequence 0 holds 1012
    tokens, 996 given' and wrote no session.  Now the memory is rolled back to the tokens
    known right, ``held_tokens`` matches it, and the session saves."""
    from toolkit.runtime import speculative, step as step_mod
    from toolkit.runtime.session import save_session
    m = Model(hf_f32(name))
    try:
        tok = Tokenizer.from_gguf(m.gguf)
        prompt = _prompt(m)
        calls = {"n": 0}
        if where == "after_decode":
            real, attr, owner = speculative.Verifier.verify, "verify", speculative.Verifier
        else:
            real, attr, owner = step_mod.TokenStep.verify, "verify", step_mod.TokenStep

        def boom(*a, **kw):
            calls["n"] += 1
            if calls["n"] == 7:
                raise KeyboardInterrupt
            return real(*a, **kw)
        monkeypatch.setattr(owner, attr, boom)
        with Context(m, n_ctx=256, n_ubatch=32) as ctx:
            ctx.memory.set_draft_window(4)
            d = _self_draft(m)(4)
            try:
                r = generate_speculative(ctx, tok, prompt, N_GEN, Sampler(SamplerParams(temp=0)), d, draft_max=4,
                                         ignore_eos=True)
            finally:
                d.close()
            assert r.stop_reason == "interrupted"
            assert ctx.memory.seq_pos_max(0) + 1 == len(r.held_tokens) > len(prompt)
            save_session(ctx, tmp_path / "s.session", r.held_tokens)
            held = r.held_tokens            # and the memory is right: it continues as a fresh run
            got = ctx.decode([0], logits="last")
        with Context(m, n_ctx=256, n_ubatch=32) as c2:
            want = c2.decode(list(held) + [0], logits="last")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)   # another batching: not bit-equal
    finally:
        m.close()


def test_spec_stats_per_position():
    """SpecStats.add: acceptance per draft position (a kept token's predecessors were kept)."""
    from toolkit.runtime.speculative import SpecStats
    s = SpecStats()
    s.add(3, 1)
    s.add(2, 2)
    s.add(0, 0)
    assert (s.n_verify, s.n_drafted, s.n_accepted) == (3, 5, 3)
    assert s.drafted_at == [2, 2, 1] and s.accepted_at == [2, 1, 0]
    assert s.acceptance_at() == [1.0, 0.5, 0.0]
    assert s.to_dict()["acceptance_at"] == [1.0, 0.5, 0.0]
