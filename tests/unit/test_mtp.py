"""MTP drafts (toolkit/runtime/mtp.py): exactness and the block's state.

- greedy: generate_speculative with the NextN block's drafts gives plain greedy's tokens, at
  --draft-max 1 and 3, n_ubatch 1 and 512, on every fixture with a NextN head (random weights:
  the block's own drafts are rarely accepted), and with forced drafts (the reference's tokens,
  the second one of each window wrong on purpose) so that accepted and rejected drafts both
  happen and the block's cache rolls back with the main model's tokens
- the block's state after such a run equals a fresh block fed the whole history (the cache
  kept in step, the drafted positions gone)
- sampling: the 2nd token's distribution follows the target's (chi-square), as for -md
- several sequences (serve's slots): one draft_batch drafts what one sequence alone drafts
Models: converted at test time from tests/fixtures/hf/* (F32).
"""
from __future__ import annotations

import numpy as np
import pytest

from toolkit.runtime import Context, Model
from toolkit.runtime.generate import generate
from toolkit.runtime.mtp import MtpModel, open_mtp_draft
from toolkit.runtime.sampling import Sampler, SamplerParams
from toolkit.runtime.speculative import draft_sampler, generate_speculative
from toolkit.runtime.tokenizer import Tokenizer

from mtp_util import MTP_FIXTURES   # every fixture with a NextN head (glm5next-mtp-tiny: GLM-5-Next's MLA + DSA layer)
from stats_util import chi2_p

pytestmark = pytest.mark.native

N_GEN = 30


def _prompt(m) -> list[int]:
    rng = np.random.default_rng(11)
    base = rng.integers(0, min(m.n_vocab, 300), 10).tolist()
    return base + base[:5]


@pytest.fixture(scope="module", params=MTP_FIXTURES)
def fam(request, hf_f32):
    m = Model(hf_f32(request.param))
    tok = Tokenizer.from_gguf(m.gguf)
    prompt = _prompt(m)
    with Context(m, n_ctx=128, n_ubatch=32) as ctx:
        ref = generate(ctx, tok, prompt, N_GEN, Sampler(SamplerParams(temp=0)), ignore_eos=True).tokens
    yield m, tok, prompt, ref
    m.close()


def _spec(m, tok, prompt, k, n_ubatch, pick=None, n=N_GEN, params=None, seed=0):
    ctx = Context(m, n_ctx=128, n_ubatch=n_ubatch)
    ctx.memory.set_draft_window(k, keep_last=False)
    params = params or SamplerParams(temp=0)
    d = open_mtp_draft(m, ctx, n_ctx=128, n_ubatch=n_ubatch, params=params, seed=seed)
    d.pick = pick
    r = generate_speculative(ctx, tok, prompt, n, Sampler(SamplerParams(**{**params.__dict__, "seed": seed})), d,
                             draft_max=k, ignore_eos=True)
    return r, ctx, d


def _oracle(prompt, ref):
    """Drafts from the reference: right at even draft indices, wrong at odd ones."""
    def pick(history, j):
        i = len(history) - len(prompt) + j
        t = ref[i] if i < len(ref) else 0
        return t if j % 2 == 0 else (t + 1) % 512
    return pick


@pytest.mark.parametrize("n_ubatch", [1, 512])
@pytest.mark.parametrize("k", [1, 3])
def test_greedy_equals_plain(fam, k, n_ubatch):
    m, tok, prompt, ref = fam
    r, ctx, d = _spec(m, tok, prompt, k, n_ubatch)
    assert r.tokens == ref
    assert r.spec.n_drafted > 0
    d.close(); ctx.close()
    r, ctx, d = _spec(m, tok, prompt, k, n_ubatch, pick=_oracle(prompt, ref))
    assert r.tokens == ref
    assert r.spec.n_accepted > 0
    if k > 1:
        assert r.spec.n_accepted < r.spec.n_drafted
    d.close(); ctx.close()


def test_block_state_follows_the_accepted_tokens(fam):
    """After a run with accepted and rejected drafts, the block's next logits equal those of a
    fresh block fed the main model's hidden states of the whole history."""
    m, tok, prompt, ref = fam
    r, ctx, d = _spec(m, tok, prompt, 3, 32, pick=_oracle(prompt, ref))
    history = prompt + r.tokens
    n = len(history) - 1
    toks, rows = d._todo(0, history, n)          # the catch-up the next draft would feed
    got = d.ctx.decode_batch([(toks, 0)], logits="last", embd=[np.stack(rows)])[0][-1]
    assert d.base[0] == 0 and d.ctx.memory.seq_pos_max(0) + 1 == n
    with Context(m, n_ctx=128) as c2:
        _, hs = c2.decode_batch([(history[:-1], 0)], logits="none", hidden=True)
    mm = MtpModel(m)
    with Context(mm, n_ctx=128) as mc:
        want = mc.decode_batch([(history[1:], 0)], logits="last", embd=[hs[0]])[0][-1]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)   # other batchings: not bit-equal
    d.close(); ctx.close(); mm.close()


@pytest.mark.parametrize("forced", [False, True])
def test_sampling_follows_the_target(hf_f32, forced):
    """Temperature sampling with the block's drafts: the 2nd generated token, given the most
    common 1st, is distributed as the target's (chi-square p > 0.01), with the block's own drafts
    (q its sampled distribution; some accepted) and, ``forced``, the target's greedy token as the
    draft (q one-hot, accepted with probability p(d))."""
    m = Model(hf_f32("qwen35-mtp-tiny"))
    try:
        tok = Tokenizer.from_gguf(m.gguf)
        prompt = _prompt(m)
        params = SamplerParams(temp=1.5, top_k=6, top_p=1.0, min_p=0.0)
        ctx = Context(m, n_ctx=64)
        ctx.memory.set_draft_window(2, keep_last=False)
        d = open_mtp_draft(m, ctx, n_ctx=64, params=params, seed=0)
        c1 = Context(m, n_ctx=64)

        def greedy(history, j):
            c1.memory.clear()
            return int(np.argmax(c1.decode(history, logits="last")[-1])) if j == 0 else 0
        d.pick = greedy if forced else None
        counts, n_acc = {}, 0
        for seed in range(1000, 1600):
            ctx.memory.clear()
            d.forget_all()
            d.sampler = draft_sampler(params, seed)
            r = generate_speculative(ctx, tok, prompt, 3, Sampler(SamplerParams(**{**params.__dict__, "seed": seed})),
                                     d, draft_max=2, ignore_eos=True)   # 3: a draft of the 2nd (2 leaves no room)
            assert r.spec.n_drafted >= 1
            n_acc += r.spec.n_accepted
            counts.setdefault(r.tokens[0], []).append(r.tokens[1])
        assert n_acc > 0                                  # some drafted tokens were taken
        first, seconds = max(counts.items(), key=lambda kv: len(kv[1]))
        with Context(m, n_ctx=64) as c2:
            row = c2.decode(prompt + [first], logits="last")[-1]
        ids, probs = Sampler(params).candidates(row)
        p = np.zeros(m.n_vocab)
        p[ids] = probs
        c = np.bincount(np.array(seconds), minlength=m.n_vocab)
        assert len(seconds) >= 80
        assert chi2_p(c, p) > 0.01
        d.close()
        ctx.close()
        c1.close()
    finally:
        m.close()


def test_draft_batch_equals_one_sequence_each(hf_f32):
    """Three sequences in one block context (serve's slots) draft what each alone drafts."""
    m = Model(hf_f32("qwen3next-mtp-tiny"))
    try:
        g = Sampler(SamplerParams(temp=0))
        rng = np.random.default_rng(5)
        hist = [rng.integers(0, 300, n).tolist() for n in (9, 14, 5)]
        main = Context(m, n_ctx=3 * 64, n_seq_max=3)
        d = open_mtp_draft(m, main, n_ctx=3 * 64, n_seq_max=3)
        main.decode_batch([(h[:-1], i) for i, h in enumerate(hist)], logits="none")

        def alone(h, kk):
            with Context(m, n_ctx=64) as c:
                da = open_mtp_draft(m, c, n_ctx=64)
                c.decode(h[:-1], logits="none")
                out = da.draft_batch([(0, h, kk, g)])[0][0]
                da.close()
                return out
        for step in range(3):
            got = d.draft_batch([(i, h, 3, g) for i, h in enumerate(hist)])
            for i, h in enumerate(hist):
                assert got[i][0] == alone(h, 3), (step, i)
            # each main sequence takes its last token; the next is a draft (0, 2) or another (1)
            new = [got[i][0][0] if i != 1 else int(rng.integers(0, 300)) for i in range(3)]
            main.decode_batch([([h[-1]], i) for i, h in enumerate(hist)], logits="none")
            hist = [h + [t] for h, t in zip(hist, new)]
        d.close()
        main.close()
    finally:
        m.close()
