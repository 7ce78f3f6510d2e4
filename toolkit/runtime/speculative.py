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
  rolled back through the same window; one sequence per target sequence, so ``toolkit serve``
  drafts for all its slots with one context, one decode call per draft step
  (:meth:`DraftModel.draft_batch`).
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


def draft_sampler(params: SamplerParams, seed: int) -> Sampler:
    """The draft's sampler for a target sampling with ``params`` and ``seed``: the same settings
    without penalties (the target applies its own when it verifies), seeded ``seed + 1``, so the
    draft's draws are its own and reproducible."""
    p = dataclasses.replace(params, seed=(int(seed) + 1) % 2**32, repeat_penalty=1.0,
                            presence_penalty=0.0, frequency_penalty=0.0)
    return Sampler(p)


def open_draft_model(path: str, target_tok: Tokenizer, n_threads: int | None = None):
    """Load the draft GGUF at ``path`` (a toolkit.runtime.Model) and check that it shares
    ``target_tok``'s vocabulary (:func:`check_same_vocab`); the caller closes it.

    Raises:
        InputError: the vocabularies differ (one line naming ``path``); Model's errors.
    """
    from toolkit.runtime.model import Model

    dm = Model(path, n_threads=n_threads)
    try:
        check_same_vocab(target_tok, Tokenizer.from_gguf(dm.gguf), path)
    except BaseException:
        dm.close()
        raise
    return dm


class DraftModel:
    """Drafts from a second (smaller) model sharing the vocabulary.  Its context ``ctx`` keeps
    one sequence per target sequence (``toolkit run``: sequence 0; ``toolkit serve``: one per
    slot, ``n_seq_max`` = the slots), each kept in step with its target's history: the common
    prefix stays, the rest is rolled back (exactly inside the window, which must be at least
    draft_max with ``keep_last`` on; else to a checkpoint, re-fed; else from 0) and the new
    tokens are fed.  The draft steps of several sequences go into one decode call per step
    (:meth:`draft_batch`).  Greedy targets draft greedily (q one-hot); sampling targets draw from
    the draft's own distribution under the same sampler settings (no penalties, see
    :func:`draft_sampler`).

    ``held[seq]`` is exactly the tokens the context holds for ``seq`` (checked against
    ``seq_pos_max`` before each use; on any mismatch the sequence is emptied and re-fed).
    """

    def __init__(self, ctx, params: SamplerParams | None = None, seed: int = 0):
        self.ctx = ctx
        self.held: list[list[int]] = [[] for _ in range(int(ctx.n_seq_max))]
        self.sampler = draft_sampler(params, seed) if params is not None else None   # draft()'s
        self.n_ctx_seq = int(ctx.n_ctx) // int(ctx.n_seq_max)

    # ---- keeping a sequence in step ----------------------------------------------------------
    def forget(self, seq: int) -> None:
        """Empty ``seq`` (its KV cells and recurrent state)."""
        self.ctx.memory.seq_rm(seq, 0, -1)
        self.held[seq] = []

    def forget_all(self) -> None:
        """Empty every sequence (after a failed call: the runtime has emptied them anyway)."""
        self.ctx.memory.clear()
        self.held = [[] for _ in self.held]

    def _keep(self, seq: int, history: Sequence[int], n_max: int) -> None:
        """Roll ``seq`` back to at most its common prefix with ``history`` (and at most n_max)."""
        held = self.held[seq]
        if self.ctx.memory.seq_pos_max(seq) + 1 != len(held):   # never draft on a state we cannot account for
            self.forget(seq)
            return
        m = min(len(held), len(history))
        neq = np.flatnonzero(np.asarray(held[:m], np.int64) != np.asarray(history[:m], np.int64))
        n = min(int(neq[0]) if neq.size else m, n_max)    # the common prefix (numpy: a step must not cost O(n) in Python)
        if n < len(held):
            r = self.ctx.memory.rollback(seq, n) if n > 0 else None
            if r is None:
                self.forget(seq)
            else:
                del held[r:]

    def feed(self, seq: int, history: Sequence[int]) -> None:
        """Make ``seq`` hold exactly ``history`` (no logits): a prompt chunk the target decoded,
        fed the same way (one call of its own) so that a draft equal to the target holds the
        same bits."""
        self._keep(seq, history, len(history))
        todo = list(history[len(self.held[seq]):])
        if todo:
            try:
                self.ctx.decode(todo, seq_id=seq, logits="none")   # as the target's chunk: its checkpoint too
            except BaseException:
                self.forget(seq)
                raise
            self.held[seq].extend(todo)

    def trim(self, seq: int, history: Sequence[int]) -> None:
        """Roll ``seq`` back to at most its common prefix with ``history`` (nothing fed)."""
        self._keep(seq, history, len(history))

    def checkpoint(self, seq: int) -> None:
        """Checkpoint ``seq`` at its current end (a point a later history may resume from)."""
        self.ctx.memory.checkpoint(seq)

    # ---- drafting ------------------------------------------------------------------------------
    def draft(self, history: Sequence[int], k: int, grammar=None) -> tuple[list[int], list | None]:
        """Up to ``k`` drafts after ``history`` for sequence 0 with the sampler given at
        construction: (tokens, q: per token (ids, probs)).  ``grammar`` (the target's, in the
        state after ``history``): the draft is sampled under a fork of it, so it proposes only
        tokens the target may take (q is then the masked distribution), and stops where the
        grammar is complete."""
        return self.draft_batch([(0, history, k, self.sampler, grammar)])[0]

    def draft_batch(self, items) -> list[tuple[list[int], list]]:
        """Drafts for several sequences: ``items`` = [(seq, history, k, sampler[, grammar]), ...]
        (distinct seqs, each history non-empty, k >= 1; ``grammar`` as in :meth:`draft`, or None).  Each sequence is brought to its ``history`` (the
        new tokens of all of them in one decode call; a tail longer than the window + 1 is fed
        first, alone, without logits), then each draft step is one decode call of one token per
        sequence still drafting.  Returns per item (tokens, q), at most k tokens (fewer when its
        sequence's share of the context, n_ctx / n_seq_max, is full).  On a failed call every
        sequence of it is emptied and the error raised."""
        rows_in = []
        ks = []
        for seq, history, k, *_ in items:
            self._keep(seq, history, len(history) - 1)   # the last token is always fed: its logits start the draft
            todo = list(history[len(self.held[seq]):])
            if len(todo) > getattr(self.ctx, "draft_window", 0) + 1:   # not a verify-sized row: alone, first
                self.feed(seq, history[:-1])
                todo = todo[-1:]
            rows_in.append((seq, todo))
            ks.append(max(0, min(int(k), self.n_ctx_seq - len(self.held[seq]) - len(todo))))
        try:
            rows = self.ctx.decode_batch([(t, s) for s, t in rows_in], logits="last", snapshots=True)
        except BaseException:
            for s, _ in rows_in:
                self.forget(s)
            raise
        for s, t in rows_in:
            self.held[s].extend(t)
        out: list[tuple[list[int], list]] = [([], []) for _ in items]
        live = [i for i in range(len(items)) if ks[i] > 0]
        row = {i: rows[i][-1] for i in live}
        gram = {i: items[i][4].fork() for i in live if len(items[i]) > 4 and items[i][4] is not None}
        while live:
            step = []
            for i in live:
                sampler = items[i][3]
                g = gram.get(i)
                if g is not None:
                    if g.done():
                        continue
                    row[i] = g.mask(row[i])
                    if not np.isfinite(row[i]).any():
                        continue
                ids, probs = sampler.candidates(row[i])
                if ids.size == 1:
                    d = int(ids[0])
                else:
                    j = int(np.searchsorted(np.cumsum(probs), sampler.rng.random(), side="right"))
                    d = int(ids[min(j, ids.size - 1)])
                out[i][0].append(d)
                out[i][1].append((ids, probs))
                if g is not None:
                    g.accept(d)
                if len(out[i][0]) < ks[i]:
                    step.append(i)
            if not step:
                break
            seqs = [items[i][0] for i in step]
            try:
                new = self.ctx.decode_batch([([out[i][0][-1]], s) for i, s in zip(step, seqs)], logits="last",
                                            snapshots=True)
            except BaseException:
                for s in seqs:
                    self.forget(s)
                raise
            for i, s, r in zip(step, seqs, new):
                self.held[s].append(out[i][0][-1])
                row[i] = r[-1]
            live = step
        return out

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
