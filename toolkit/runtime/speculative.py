"""Speculative decoding: a cheap draft proposes up to K tokens, the target model scores them
all in one decode call (K + 1 positions in one ubatch, ``logits="all"``) and keeps the
longest acceptable prefix; a recurrent state is rolled back exactly to the last kept token by
the memory's speculative window (:meth:`toolkit.runtime.context.Memory.set_draft_window`).

    drafter = PromptLookup(ngram=3)                      # or DraftModel(Model("small.gguf"), ...)
    res = generate_speculative(ctx, tok, prompt_ids, 128, Sampler(SamplerParams(temp=0)),
                               drafter, draft_max=8)
    res.spec.acceptance                                  # accepted / drafted tokens

Verification (per verify call, rows i = 0..K of its logits, row i scoring the position after
the call's token i):
- greedy (``temp = 0``): the target's token at row i is its argmax after the usual processing
  (penalties, grammar, ``ignore_eos``); draft i is accepted while it equals that token, and the
  first token that differs (or, all accepted, row K's) is the target's own.  The output is the
  plain greedy output token for token.
- sampling: standard speculative sampling (Leviathan et al. 2023, "Fast Inference from
  Transformers via Speculative Decoding", Alg. 1; Chen et al. 2023): with p the target's
  distribution at row i (the sampler's chain: penalties, top-k, top-p, min-p, temperature) and
  q the draft's, draft d is accepted with probability min(1, p(d) / q(d)); on a rejection the
  token is drawn from max(0, p - q) normalised, and the call ends.  Each output token is then
  distributed exactly as p.  A lookup draft is deterministic: q is one-hot on d.

Drafts:
- :class:`PromptLookup` (``--lookup``, ``--draft-ngram N``): the tokens that followed the most
  recent earlier occurrence of the context's last n tokens (n = N down to 1) -- prompt lookup
  decoding; no second model, strongest when the output copies the input (code edits).
- :class:`DraftModel` (``--draft-model SMALL.gguf``): a second model with the same vocabulary
  (:func:`check_same_vocab`), its own context kept in step with the target's history and
  rolled back through the same window.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from toolkit.errors import InputError
from toolkit.runtime.generate import GenerationResult, _check_args, _n_held, _Output, _start, _Step
from toolkit.runtime.sampling import Sampler, SamplerParams
from toolkit.runtime.tokenizer import Tokenizer


@dataclass
class SpecStats:
    """n_drafted: draft tokens sent to the target; n_accepted: of those, kept; n_verify: target
    decode calls after the prompt (each scores its draft plus one position)."""

    n_drafted: int = 0
    n_accepted: int = 0
    n_verify: int = 0

    @property
    def acceptance(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    def to_dict(self) -> dict:
        return {"n_drafted": self.n_drafted, "n_accepted": self.n_accepted, "n_verify": self.n_verify,
                "acceptance": round(self.acceptance, 4)}


# ---- the acceptance rule ----------------------------------------------------------------

def _dense(ids: np.ndarray, probs: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.float64)
    out[np.asarray(ids, dtype=np.int64)] = probs
    return out


def speculative_accept(p: np.ndarray, q: np.ndarray, d: int, rng: np.random.Generator) -> tuple[bool, int]:
    """One step of speculative sampling: target distribution ``p`` and draft distribution ``q``
    (float64 [V], each summing to 1), draft token ``d`` drawn from q.  Returns (True, d) with
    probability min(1, p[d] / q[d]), else (False, t) with t drawn from max(0, p - q) normalised
    (from p when that is all zero).  The token returned is distributed as p.
    ref: Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, eq. (1)-(3)."""
    pd, qd = float(p[d]), float(q[d])
    if qd > 0.0 and rng.random() * qd < pd:      # u < p(d) / q(d), without dividing
        return True, d
    r = np.maximum(p - q, 0.0)
    s = r.sum()
    return False, _draw(r / s if s > 0 else p, rng)


def verify_token(step: _Step, sampler: Sampler, row: np.ndarray, draft: int | None, q, n_vocab: int,
                 res: GenerationResult) -> tuple[int, bool]:
    """Row i of a verify call (the target's logits after the call's token i): the target's
    token there and whether it accepts ``draft`` (the call's token i + 1; None when every
    draft was kept: the row's own token, False).  Greedy: accepted when it is the processed
    row's argmax; sampling: :func:`speculative_accept` with the draft's ``q`` ((ids, probs);
    None: one-hot on ``draft``, a deterministic draft).  The token goes through ``step.commit``
    (penalty window, grammar, n_probs) as a plain step's does."""
    row = step.process(row)
    if draft is None or sampler.greedy:
        tok = int(sampler.sample_penalized(row))
        ok = draft is not None and tok == draft
    else:
        ids, probs = sampler.candidates(row)
        p = _dense(ids, probs, n_vocab)
        qd = _dense(*q, n_vocab) if q is not None else _dense([draft], [1.0], n_vocab)
        ok, tok = speculative_accept(p, qd, draft, sampler.rng)
    step.commit(row, tok, res)
    return tok, ok


def _draw(p: np.ndarray, rng: np.random.Generator) -> int:
    c = np.cumsum(p)
    k = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
    return min(k, p.size - 1)


# ---- drafts --------------------------------------------------------------------------------

class PromptLookup:
    """Prompt lookup decoding: drafts are the tokens that followed the most recent earlier
    occurrence of the history's last n tokens, n from ``ngram`` down to 1 (the longest match
    wins).  Deterministic (q is one-hot)."""

    def __init__(self, ngram: int = 3):
        if ngram < 1:
            raise InputError(f"--draft-ngram must be >= 1, got {ngram}")
        self.ngram = int(ngram)

    def draft(self, history: Sequence[int], k: int) -> tuple[list[int], list | None]:
        h = np.asarray(history, dtype=np.int64)
        L = h.size
        for n in range(min(self.ngram, L - 1), 0, -1):
            pat = h[L - n:]
            win = np.lib.stride_tricks.sliding_window_view(h[:L - 1], n)   # starts 0 .. L - 1 - n
            hits = np.nonzero((win == pat).all(axis=1))[0]
            hits = hits[hits + n < L]                                       # something follows
            if hits.size:
                j = int(hits[-1]) + n
                return [int(t) for t in h[j:j + k]], None
        return [], None

    def close(self) -> None:
        pass


def check_same_vocab(target_tok: Tokenizer, draft_tok: Tokenizer, draft_path: str) -> None:
    """Raise InputError (one line naming the draft file) unless the two vocabularies have the
    same size and the same token texts."""
    if target_tok.n_vocab != draft_tok.n_vocab:
        raise InputError(f"--draft-model {draft_path}: vocabulary of {draft_tok.n_vocab} tokens, "
                         f"the model's has {target_tok.n_vocab} (the draft must share the vocabulary)")
    for i in range(target_tok.n_vocab):
        if target_tok.piece(i) != draft_tok.piece(i):
            raise InputError(f"--draft-model {draft_path}: token {i} is {draft_tok.piece(i)!r}, the model's is "
                             f"{target_tok.piece(i)!r} (the draft must share the vocabulary)")


class DraftModel:
    """Drafts from a second (smaller) model sharing the vocabulary.  It keeps its own context
    (one sequence, window ``draft_max``) in step with the target's history: the common prefix
    stays, the rest is rolled back (exactly inside the window; else to a checkpoint, re-fed)
    and the new tokens are fed.  Greedy targets draft greedily (q one-hot); sampling targets
    draw from the draft's own distribution under the same sampler settings (no penalties),
    with a generator of its own."""

    def __init__(self, ctx, params: SamplerParams, seed: int):
        self.ctx = ctx
        self.held: list[int] = []
        p = dataclasses.replace(params, seed=(int(seed) + 1) % 2**32, repeat_penalty=1.0,
                                presence_penalty=0.0, frequency_penalty=0.0)
        self.sampler = Sampler(p)

    def _sync(self, history: Sequence[int]) -> np.ndarray:
        n = 0
        m = min(len(self.held), len(history))
        while n < m and self.held[n] == history[n]:
            n += 1
        n = min(n, len(history) - 1)         # at least the last token is fed: its logits are the draft's start
        if n < len(self.held):
            r = self.ctx.memory.rollback(0, n)
            if r is None:
                self.ctx.memory.seq_rm(0, 0, -1)
                r = 0
            del self.held[r:]
        todo = list(history[len(self.held):])
        logits = self.ctx.decode(todo, seq_id=0, logits="last", snapshots=True)
        self.held.extend(todo)
        return logits[-1]

    def draft(self, history: Sequence[int], k: int, grammar=None) -> tuple[list[int], list | None]:
        """Up to ``k`` tokens after ``history`` and their q (ids, probs).  ``grammar`` (the
        target's, in the state after ``history``): the draft is sampled under a fork of it, so
        it proposes only tokens the target may take (q is then the masked distribution), and
        stops where the grammar is complete."""
        row = self._sync(history)
        room = self.ctx.n_ctx - len(self.held)
        k = min(k, room)
        out, qs = [], []
        g = grammar.fork() if grammar is not None else None
        for j in range(k):
            if g is not None:
                if g.done():
                    break
                row = g.mask(row)
                if not np.isfinite(row).any():
                    break
            ids, probs = self.sampler.candidates(row)
            if ids.size == 1:
                d = int(ids[0])
            else:
                d = int(ids[min(int(np.searchsorted(np.cumsum(probs), self.sampler.rng.random(), side="right")), ids.size - 1)])
            out.append(d)
            qs.append((ids, probs))
            if g is not None:
                g.accept(d)
            if j == k - 1:
                break
            row = self.ctx.decode([d], seq_id=0, logits="last", snapshots=True)[-1]
            self.held.append(d)
        return out, qs

    def close(self) -> None:
        self.ctx.close()


# ---- the loop ---------------------------------------------------------------------------------

def generate_speculative(ctx, tokenizer: Tokenizer, prompt_tokens: Sequence[int], n_predict: int, sampler: Sampler,
                         drafter, on_text: Callable[[str], None] | None = None, *, seq_id: int = 0,
                         draft_max: int = 16, draft_min: int = 0, n_reused: int = 0, split_last: bool = False,
                         prompt_logits: bool = False,
                         ignore_eos: bool = False, stop: Sequence[str] = (), n_probs: int = 0,
                         grammar=None) -> GenerationResult:
    """:func:`toolkit.runtime.generate.generate` with drafts from ``drafter`` (``draft(history,
    k) -> (tokens, q)``, q None for a deterministic draft, else per token (ids, probs)).

    ``ctx`` must have a draft window of at least ``draft_max`` (``ctx.memory.set_draft_window``).
    A draft shorter than ``draft_min`` is not sent (the step decodes one token).  Returns the
    GenerationResult with ``spec`` (:class:`SpecStats`) added.  Greedy output equals
    ``generate``'s token for token; sampled output has the same distribution.

    Raises:
        InputError: as ``generate``; draft_max outside [1, the context's window] or draft_min < 0.
    """
    prompt, _ = _check_args(ctx, prompt_tokens, n_predict, n_reused)
    if not 1 <= draft_max <= getattr(ctx, "draft_window", 0):
        raise InputError(f"--draft-max = {draft_max}: must be in [1, the context's draft window "
                         f"{getattr(ctx, 'draft_window', 0)}]")
    if draft_min < 0:
        raise InputError(f"--draft-min must be >= 0, got {draft_min}")
    n_ctx = int(ctx.n_ctx)
    res = GenerationResult(prompt_tokens=prompt)
    res.spec = SpecStats()
    out = _Output(res, tokenizer, on_text, stop, grammar, n_predict)
    step = _Step(sampler, tokenizer, ignore_eos, n_probs, grammar)
    V = ctx.n_vocab
    history = list(prompt)       # every token of the sequence; the memory holds all but the last
    done = False

    def take(tok: int) -> bool:
        """Append a target token to the output; True when generation ends with it."""
        nonlocal done
        if not tokenizer.is_eog(tok):
            history.append(tok)
        reason = out.take(tok)
        if reason is not None:
            res.stop_reason, done = reason, True
        return done

    t0 = time.perf_counter()
    try:
        logits = _start(ctx, res, n_reused, seq_id, prompt_logits, split_last, sampler, t0)
        t1 = time.perf_counter()
        if n_predict == 0:
            done = True
        else:
            take(step(logits[-1], res))
        while not done:
            n_held = len(history) - 1            # the memory holds history[:-1]
            if n_held + 1 > n_ctx:
                res.stop_reason = "ctx_full"
                break
            k = min(draft_max, n_ctx - n_held - 1)
            if n_predict >= 0:
                k = min(k, n_predict - len(res.tokens) - 1)
            if k <= 0:
                drafts, qs = [], None
            elif grammar is not None and isinstance(drafter, DraftModel):
                drafts, qs = drafter.draft(history, k, grammar)
            else:
                drafts, qs = drafter.draft(history, k)
            drafts = drafts[:max(k, 0)]
            if grammar is not None and drafts:         # not a token the grammar refuses: it could never be kept
                drafts = drafts[:grammar.n_allowed(drafts)]
                qs = qs[:len(drafts)] if qs is not None else None
            if len(drafts) < max(draft_min, 1):
                drafts, qs = [], None
            rows = ctx.decode([history[-1]] + drafts, seq_id=seq_id, logits="all", snapshots=True)
            res.spec.n_verify += 1
            res.spec.n_drafted += len(drafts)
            used = 0
            for i in range(len(drafts) + 1):
                used = i + 1
                d = drafts[i] if i < len(drafts) else None   # None: every draft kept, the target's own next token
                tok, ok = verify_token(step, sampler, rows[i], d, qs[i] if qs is not None and d is not None else None,
                                       V, res)
                if ok:
                    res.spec.n_accepted += 1
                if take(tok) or not ok:
                    break
            if used < len(drafts) + 1:                      # the rows after `used` scored rejected tokens
                p0 = n_held + used
                if ctx.memory.rollback(seq_id, p0) != p0:
                    raise RuntimeError(f"speculative rollback to position {p0} refused (draft window too small?)")
            res.timings.gen_s = time.perf_counter() - t1
        res.timings.gen_s = time.perf_counter() - t1 if res.tokens else 0.0
    except KeyboardInterrupt:
        res.stop_reason = "interrupted"
        if res.timings.n_prompt == 0:
            res.timings.prompt_s = time.perf_counter() - t0
    out.finish()
    res.held_tokens = history[:_n_held(ctx, seq_id, len(history))]
    return res
