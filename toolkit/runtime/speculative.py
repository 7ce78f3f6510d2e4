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
import logging
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from toolkit.errors import InputError
from toolkit.runtime.generate import GenerationResult, check_args, finish, n_held_after, start
from toolkit.runtime.sampling import Sampler, SamplerParams
from toolkit.runtime.shift import context_shift as context_shift_, shift_tokens
from toolkit.runtime.step import TokenStep, Verifier, speculative_accept  # noqa: F401  (speculative_accept: this module's API too)
from toolkit.runtime.tokenizer import Tokenizer

log = logging.getLogger(__name__)


@dataclass
class SpecStats:
    """n_drafted: draft tokens sent to the target; n_accepted: of those, kept; n_verify: target
    decode calls after the prompt (each scores its draft plus one position).  ``drafted_at[j]`` /
    ``accepted_at[j]``: drafts that had a (j+1)-th token, and those whose (j+1)-th token was
    kept (a kept token's predecessors were all kept)."""

    n_drafted: int = 0
    n_accepted: int = 0
    n_verify: int = 0
    drafted_at: list = dataclasses.field(default_factory=list)
    accepted_at: list = dataclasses.field(default_factory=list)

    @property
    def acceptance(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    def add(self, n_drafted: int, n_accepted: int) -> None:
        """One verify call that scored ``n_drafted`` drafts and kept the first ``n_accepted``."""
        self.n_verify += 1
        self.n_drafted += n_drafted
        self.n_accepted += n_accepted
        while len(self.drafted_at) < n_drafted:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for j in range(n_drafted):
            self.drafted_at[j] += 1
            self.accepted_at[j] += j < n_accepted

    def acceptance_at(self) -> list[float]:
        """Per draft position j (0-based): the share of drafts with a (j+1)-th token that kept it."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]

    def to_dict(self) -> dict:
        return {"n_drafted": self.n_drafted, "n_accepted": self.n_accepted, "n_verify": self.n_verify,
                "acceptance": round(self.acceptance, 4),
                "acceptance_at": [round(a, 4) for a in self.acceptance_at()]}


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

    def draft_batch(self, items) -> list[tuple[list[int], None]]:
        """:meth:`draft` for several sequences, as :meth:`DraftModel.draft_batch` takes them:
        ``items`` = [(seq, history, k, ...), ...]; per item (tokens, None)."""
        return [(self.draft(history, k)[0], None) for _, history, k, *_ in items]

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


def open_draft_model(path: str, target_tok: Tokenizer, n_threads: int | None = None, options=None):
    """Load the draft GGUF at ``path`` (a toolkit.runtime.Model, with its own ``options``:
    :class:`toolkit.runtime.options.RuntimeOptions`, None the defaults) and check that it shares
    ``target_tok``'s vocabulary (:func:`check_same_vocab`); the caller closes it.

    Raises:
        InputError: the vocabularies differ (one line naming ``path``); Model's errors.
    """
    from toolkit.runtime.model import Model

    dm = Model(path, n_threads=n_threads, options=options)
    try:
        check_same_vocab(target_tok, Tokenizer.from_gguf(dm.gguf), path)
    except BaseException:
        dm.close()
        raise
    return dm


def open_draft_context(model, draft_max: int, *, n_ctx: int, n_seq_max: int = 1, n_ubatch: int = 512,
                       n_threads: int | None = None, n_checkpoints: int = 1, checkpoint_every: int = 0,
                       params: SamplerParams | None = None, seed: int = 0) -> "DraftModel":
    """A :class:`DraftModel` over a new context of the draft ``model`` (one sequence per target
    sequence), with a draft window of ``draft_max`` that keeps the state after a call's last
    token too (a draft rolls back to the ends of earlier calls).  The caller closes it (its
    context; not ``model``).

    Raises:
        InputError / ResourceError: from Context (bad sizes, out of memory)."""
    from toolkit.runtime.context import Context

    dctx = Context(model, n_ctx=n_ctx, n_seq_max=n_seq_max, n_ubatch=n_ubatch, n_threads=n_threads,
                   n_checkpoints=n_checkpoints, checkpoint_every=checkpoint_every)
    try:
        dctx.memory.set_draft_window(draft_max)
    except BaseException:
        dctx.close()
        raise
    return DraftModel(dctx, params, seed)


def sample_draft(sampler, row: np.ndarray) -> tuple[int, tuple]:
    """One draft token from the logits ``row`` [V] under ``sampler`` (a draft_sampler: its
    candidates and its rng): (token, q as (ids, probs)); one candidate (greedy) is taken as is."""
    ids, probs = sampler.candidates(row)
    if ids.size == 1:
        return int(ids[0]), (ids, probs)
    j = int(np.searchsorted(np.cumsum(probs), sampler.rng.random(), side="right"))
    return int(ids[min(j, ids.size - 1)]), (ids, probs)


def draft_steps(items, ks: list[int], row: dict, choose, decode) -> list[tuple[list[int], list]]:
    """The draft loop of :meth:`DraftModel.draft_batch` and toolkit.runtime.mtp's
    ``MtpDraft.draft_batch``, once the drafter holds each history.

    ``items``: draft_batch's [(seq, history, k, sampler[, grammar]), ...]; ``ks[i]``: at most this
    many drafts for item i; ``row``: item index -> the logits [V] of its first draft (the items
    that draft at all); ``choose(item, j, row)`` -> (token, q) of the j-th draft;
    ``decode(step, tokens)``: feeds tokens[n] to the sequence of item step[n], all in one decode
    call, and returns each one's next logits [V] (on a failed call it empties those sequences and
    raises).  A grammar (the item's fifth entry) is forked: each draft is chosen from its masked
    row, and an item stops where the grammar is complete or allows no token.  Returns per item
    (tokens, q)."""
    out: list[tuple[list[int], list]] = [([], []) for _ in items]
    live = sorted(row)
    gram = {i: items[i][4].fork() for i in live if len(items[i]) > 4 and items[i][4] is not None}
    while live:
        step = []
        for i in live:
            g = gram.get(i)
            if g is not None:
                if g.done():
                    continue
                row[i] = g.mask(row[i])
                if not np.isfinite(row[i]).any():
                    continue
            d, q = choose(items[i], len(out[i][0]), row[i])
            out[i][0].append(d)
            out[i][1].append(q)
            if g is not None:
                g.accept(d)
            if len(out[i][0]) < ks[i]:
                step.append(i)
        if not step:
            break
        for i, r in zip(step, decode(step, [out[i][0][-1] for i in step])):
            row[i] = r
        live = step
    return out


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
        del self.held[seq][self.ctx.memory.keep_prefix(seq, self.held[seq], history, n_max):]

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

    def checkpoint(self, seq: int, history: Sequence[int] | None = None, n_min: int = 0) -> None:
        """Checkpoint ``seq`` at its current end (a point a later history may resume from);
        with ``history``, first roll it back to its common prefix with it (:meth:`trim`), and
        take the checkpoint only when more than ``n_min`` tokens are left."""
        if history is not None:
            self.trim(seq, history)
            if len(self.held[seq]) <= n_min:
                return
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
        live = [i for i in range(len(items)) if ks[i] > 0]

        def decode(step: list[int], toks: list[int]) -> list[np.ndarray]:
            seqs = [items[i][0] for i in step]
            try:
                new = self.ctx.decode_batch([([t], s) for t, s in zip(toks, seqs)], logits="last", snapshots=True)
            except BaseException:
                for s in seqs:
                    self.forget(s)
                raise
            for s, t in zip(seqs, toks):
                self.held[s].append(t)
            return [r[-1] for r in new]
        return draft_steps(items, ks, {i: rows[i][-1] for i in live}, lambda item, j, row: sample_draft(item[3], row),
                           decode)

    def close(self) -> None:
        self.ctx.close()


class SeqSpeculation:
    """Speculative decoding for the sequences of one target context (``toolkit serve``'s slots):
    a :class:`~toolkit.runtime.step.Verifier` on the target (its window set to ``draft_max``),
    and the drafts, prompt lookup (``draft_ngram``), the target's MTP head (``mtp``:
    toolkit.runtime.mtp, one sequence per target sequence), or ``draft_model``'s: one context of it
    with the target's ``sizes`` (Context's keyword arguments), sequence i drafting for target
    sequence i, closed with the model by :meth:`close`.  A failing draft model costs speed
    only: its sequences are emptied, re-fed at their next draft, and ``n_errors`` counts it.

    Raises:
        InputError / ResourceError / UnsupportedError: as Verifier.attach and Context."""

    def __init__(self, ctx, draft_max: int, draft_min: int = 0, draft_ngram: int = 3, draft_model=None,
                 sizes: dict | None = None, mtp: bool = False):
        self.verifier = Verifier.attach(ctx, draft_max, draft_min)
        self.model = draft_model
        if mtp:       # the target's own MTP head (toolkit.runtime.mtp), closed with the target
            from toolkit.runtime.mtp import open_mtp_draft
            self.draft = open_mtp_draft(ctx.model, ctx, **{k: v for k, v in (sizes or {}).items()
                                                           if k in ("n_ctx", "n_seq_max", "n_ubatch", "n_threads")})
        else:
            self.draft = open_draft_context(draft_model, draft_max, **(sizes or {})) if draft_model is not None else None
        self.drafter = self.draft if self.draft is not None else PromptLookup(draft_ngram)
        self.n_errors = 0

    def drafts(self, items) -> list[tuple[list[int], list | None]] | None:
        """:meth:`Verifier.drafts` (items: [(seq, history, k, draft sampler, grammar)]); None when
        the draft model failed (no drafts this step)."""
        try:
            return self.verifier.drafts(self.drafter, items) if items else []
        except Exception:   # noqa: BLE001 - the target's answer does not depend on the draft
            log.exception("draft step failed; this step sends no drafts")
            self.forget_all()
            self.n_errors += 1
            return None

    def feed(self, seq: int, history: Sequence[int]) -> None:
        """A prompt chunk the target decoded: the draft's sequence follows, in a call of its own."""
        if self.draft is not None:
            self._guard(self.draft.feed, seq, history)

    def settle(self, seq: int, history: Sequence[int], n_prompt: int) -> None:
        """The end of an answer: the draft's sequence is rolled back to what it shares with the
        target's ``history`` and checkpointed where that is past the prompt (``n_prompt``)."""
        if self.draft is not None and not self._guard(self.draft.checkpoint, seq, history, n_prompt):
            self.draft.forget(seq)

    def forget_all(self) -> None:
        if self.draft is not None:
            self.draft.forget_all()

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
            if self.model is not None:
                self.model.close()
            self.draft = None

    def _guard(self, f, *args) -> bool:
        try:
            f(*args)
            return True
        except Exception:   # noqa: BLE001 - the target's answer does not depend on the draft
            log.exception("draft model call failed")
            self.n_errors += 1
            return False


# ---- the loop ---------------------------------------------------------------------------------

def generate_speculative(ctx, tokenizer: Tokenizer, prompt_tokens: Sequence[int], n_predict: int, sampler: Sampler,
                         drafter, on_text: Callable[[str], None] | None = None, *, seq_id: int = 0,
                         draft_max: int = 16, draft_min: int = 0, n_reused: int = 0, split_last: bool = False,
                         prompt_logits: bool = False,
                         ignore_eos: bool = False, stop: Sequence[str] = (), n_probs: int = 0,
                         grammar=None, context_shift: bool = False, n_keep: int = 0) -> GenerationResult:
    """:func:`toolkit.runtime.generate.generate` with drafts from ``drafter`` (``draft(history,
    k) -> (tokens, q)``, q None for a deterministic draft, else per token (ids, probs)).

    ``ctx`` must have a draft window of at least ``draft_max`` (``ctx.memory.set_draft_window``).
    A draft shorter than ``draft_min`` is not sent (the step decodes one token).  Returns the
    GenerationResult with ``spec`` (:class:`SpecStats`) added.  Greedy output equals
    ``generate``'s token for token; sampled output has the same distribution.
    ``context_shift`` / ``n_keep``: as ``generate``'s: when the sequence holds n_ctx tokens, the
    shift is made (where plain decoding makes it) and the drafter told (its ``shift(seq, n_keep,
    n_discard)`` when it has one; else it follows the new history as after any rollback).

    Raises:
        InputError: as ``generate``; draft_max outside [1, the context's window] or draft_min < 0.
    """
    prompt, _ = check_args(ctx, prompt_tokens, n_predict, n_reused)
    verifier = Verifier(ctx, draft_max, draft_min)
    n_ctx = int(ctx.n_ctx)
    step = TokenStep(sampler, tokenizer, n_predict=n_predict, stop=stop, grammar=grammar, ignore_eos=ignore_eos,
                     n_probs=n_probs, on_text=on_text)
    res = GenerationResult(prompt_tokens=prompt, tokens=step.tokens, probs=step.probs)
    res.spec = SpecStats()
    history = list(prompt)       # every token of the sequence; the memory holds all but the last
    n_shifted = 0                # tokens context shifts dropped from history (history = prompt + tokens less them)
    t0 = time.perf_counter()
    try:
        logits = start(ctx, res, n_reused, seq_id, prompt_logits, split_last, sampler, t0)
        t1 = time.perf_counter()
        reason = "n_predict" if n_predict == 0 else None
        if reason is None:
            tok, reason = step(logits[-1])
            history += step.tokens[len(history) + n_shifted - len(prompt):]
        while reason is None:
            n_held = len(history) - 1            # the memory holds history[:-1]
            if n_held + 1 > n_ctx and context_shift:
                d = _shift(ctx, drafter, seq_id, n_keep, history, res)
                n_held, n_shifted = n_held - d, n_shifted + d
            if n_held + 1 > n_ctx:
                reason = "ctx_full"
                break
            k = verifier.room(n_ctx - n_held - 1, n_predict - len(res.tokens) - 1 if n_predict >= 0 else None)
            drafts, qs = [], None
            if k > 0:
                under = grammar is not None and hasattr(drafter, "draft_batch") and not isinstance(drafter, PromptLookup)
                drafts, qs = drafter.draft(history, k, grammar) if under else drafter.draft(history, k)
                drafts, qs = verifier.cut(drafts, qs, k, grammar)
            toks = [history[-1]] + drafts
            rows = ctx.decode(toks, seq_id=seq_id, logits="all", snapshots=True)
            v = verifier.verify(step, seq_id, n_held, toks, rows, qs)
            history += step.tokens[len(history) + n_shifted - len(prompt):]
            res.spec.add(len(drafts), v.n_accepted)
            reason = v.reason
            res.timings.gen_s = time.perf_counter() - t1
        res.stop_reason = reason
        res.timings.gen_s = time.perf_counter() - t1 if res.tokens else 0.0
    except KeyboardInterrupt:
        res.stop_reason = "interrupted"
        if res.timings.n_prompt == 0:
            res.timings.prompt_s = time.perf_counter() - t0
        # interrupted between a verify call's decode and its rollback: the memory still holds
        # the call's drafts past what history says.  Keep history, with the tokens the verify
        # took before the interrupt (accepted drafts, all fed), and drop the rest.
        history += step.tokens[len(history) + n_shifted - len(prompt):]
        if n_held_after(ctx, seq_id, len(history) + draft_max + 1) > len(history):
            ctx.memory.rollback(seq_id, len(history))
    finish(res, step)
    res.held_tokens = history[:n_held_after(ctx, seq_id, len(history))]
    return res


def _shift(ctx, drafter, seq_id: int, n_keep: int, history: list[int], res: GenerationResult) -> int:
    """A context shift of the full sequence (toolkit.runtime.shift), ``history`` (held tokens
    plus the next one) updated in place, the drafter told; returns the tokens dropped."""
    n_held = len(history) - 1
    n_keep = min(max(int(n_keep), 0), n_held)
    d = context_shift_(ctx, seq_id, n_keep, n_held)
    if d > 0:
        history[:] = shift_tokens(history[:-1], n_keep, d) + history[-1:]
        res.n_shifts += 1
        if hasattr(drafter, "shift"):
            drafter.shift(seq_id, n_keep, d)
    return d
