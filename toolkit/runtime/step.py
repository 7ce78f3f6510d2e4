"""One generated token, and one speculative verify call: the rules every loop that generates
shares (``generate()``, ``generate_speculative()``, ``chat``, and the serve engine's slots).

    step = TokenStep(sampler, tok, n_predict=64, stop=["\\n\\n"], grammar=g, on_text=print)
    tok, reason = step(logits[-1])          # process, draw, commit, then the output rule
    ...
    text = step.finish()

    verifier = Verifier.attach(ctx, draft_max=8)     # sets the context's draft window
    drafts, qs = verifier.cut(drafts, qs, k, grammar)
    rows = ctx.decode([last] + drafts, seq_id, logits="all", snapshots=True)
    v = verifier.verify(step, seq_id, n0, [last] + drafts, rows, qs)   # keeps, rolls back

:class:`TokenStep` holds the per-token rule:
- the logits the draw sees (:meth:`TokenStep.process`): end-of-generation ids masked
  (``ignore_eos``: llama.cpp's logit bias of -inf on every EOG id, common/common.cpp), the
  sampler's penalties, the grammar's mask;
- after the draw (:meth:`TokenStep.commit`): the penalty window, the grammar's advance, the
  ``n_probs`` record;
- the output rule (:meth:`TokenStep.take`), in this order: an end-of-generation token ends it
  ("eog", not kept); otherwise the token is kept and its text streamed, then a stop string
  completed ("stop"), the grammar complete ("grammar"), ``n_predict`` reached ("n_predict"),
  the context's last cell reached ("ctx_full", only with ``n_ctx``).

:class:`Verifier` holds speculative decoding's side of a target context: the draft window
(:meth:`toolkit.runtime.context.Memory.set_draft_window`), the cut of a draft (to the room
left, to the grammar, ``draft_min``), the verification of a call's rows (greedy: the draft is
kept while it equals the target's token; sampling: Leviathan et al. 2023, Alg. 1), and the
rollback of what the target rejected.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from toolkit.errors import InputError
from toolkit.runtime.sampling import Sampler
from toolkit.runtime.tokenizer import Tokenizer


def top_probs(row: np.ndarray, token: int, n: int) -> dict:
    """{"id": token, "prob": p(token), "top": the n most probable [{"id", "prob"}]} of
    softmax(row), row float32 [n_vocab] (float64 arithmetic; -inf logits get 0)."""
    z = np.asarray(row, dtype=np.float64).reshape(-1)
    z = np.where(np.isnan(z), -np.inf, z)
    e = np.exp(z - z.max())
    p = e / e.sum()
    top = np.argsort(-p, kind="stable")[:n]
    return {"id": int(token), "prob": float(p[token]),
            "top": [{"id": int(i), "prob": float(p[i])} for i in top]}


def ends_with_stop(pieces: list[str], stops: Sequence[str]) -> bool:
    """True when one of ``stops`` occurs in the text that the last piece completed (it may end
    inside that piece, as llama.cpp's antiprompt search in common/ allows)."""
    if not pieces or not stops:
        return False
    last = len(pieces[-1])
    need, tail = max(len(x) for x in stops) + last, ""
    for p in reversed(pieces):
        tail = p + tail
        if len(tail) >= need:
            break
    return any(x in tail[max(0, len(tail) - last - len(x) + 1):] for x in stops)


class TokenStep:
    """The rule for each generated token of one answer (see the module docstring).

    Args:
        sampler: draws and keeps the penalty window (its ``accept`` is called for each
            generated token; the caller accepts the prompt's tokens first).
        tokenizer: end-of-generation ids and the text stream.
        n_predict: most tokens kept; -1 = no limit.
        stop: strings that end the answer at the token completing one (the token is kept).
        grammar: a toolkit.runtime.grammar.Grammar, or None.
        ignore_eos: mask every end-of-generation id before the draw.
        n_probs: record the n most probable tokens of each step (:func:`top_probs`).
        on_text: called with each new piece of complete UTF-8 text.
        n_ctx: tokens the sequence may hold (0: no check); :meth:`take` with ``n_held`` ends
            the answer with "ctx_full" when the token would fill the last cell.

    State: ``tokens`` (kept ids), ``probs`` (the n_probs records), ``pieces`` (text pieces).
    """

    def __init__(self, sampler: Sampler, tokenizer: Tokenizer, *, n_predict: int = -1, stop: Sequence[str] = (),
                 grammar=None, ignore_eos: bool = False, n_probs: int = 0,
                 on_text: Callable[[str], None] | None = None, n_ctx: int = 0):
        self.sampler, self.tokenizer, self.grammar = sampler, tokenizer, grammar
        self.n_predict, self.n_probs, self.on_text, self.n_ctx = int(n_predict), int(n_probs), on_text, int(n_ctx)
        self.stops = [x for x in stop if x]
        self.eog = sorted(tokenizer.eog_ids) if ignore_eos and tokenizer.eog_ids else None
        self.stream = tokenizer.stream()
        self.tokens: list[int] = []
        self.probs: list[dict] = []
        self.pieces: list[str] = []

    # ---- the draw --------------------------------------------------------------------------
    def process(self, row: np.ndarray) -> np.ndarray:
        """The logits the draw sees, float32 [n_vocab]: EOG masked (ignore_eos), penalties,
        the grammar's mask."""
        row = np.asarray(row, dtype=np.float32).reshape(-1)
        if self.eog is not None:
            row = row.copy()
            row[self.eog] = -np.inf
        row = self.sampler.penalize(row)
        if self.grammar is not None:
            row = self.grammar.mask(row)
        return row

    def commit(self, row: np.ndarray, tok: int) -> None:
        """``tok`` (drawn from the processed ``row``) into the penalty window, the grammar and
        the n_probs record."""
        self.sampler.accept(tok)
        if self.grammar is not None and not self.tokenizer.is_eog(tok):
            self.grammar.accept(tok)
        if self.n_probs > 0:
            self.probs.append(top_probs(row, tok, self.n_probs))

    def sample(self, row: np.ndarray) -> int:
        """Process ``row``, draw from it, commit the token; returns it."""
        row = self.process(row)
        tok = int(self.sampler.sample_penalized(row))
        self.commit(row, tok)
        return tok

    def verify(self, row: np.ndarray, draft: int | None, q, n_vocab: int) -> tuple[int, bool]:
        """Row i of a verify call (the target's logits after the call's token i): the target's
        token there and whether it accepts ``draft`` (the call's token i + 1; None when every
        draft was kept: the row's own token, False).  Greedy: accepted when it is the processed
        row's argmax; sampling: :func:`speculative_accept` with the draft's ``q`` ((ids, probs);
        None: one-hot on ``draft``, a deterministic draft).  The token is committed as
        :meth:`sample`'s is."""
        row = self.process(row)
        sampler = self.sampler
        if draft is None or sampler.greedy:
            tok = int(sampler.sample_penalized(row))
            ok = draft is not None and tok == draft
        else:
            ids, probs = sampler.candidates(row)
            p = _dense(ids, probs, n_vocab)
            qd = _dense(*q, n_vocab) if q is not None else _dense([draft], [1.0], n_vocab)
            ok, tok = speculative_accept(p, qd, draft, sampler.rng)
        self.commit(row, tok)
        return tok, ok

    # ---- the output --------------------------------------------------------------------------
    def take(self, tok: int, n_held: int | None = None) -> str | None:
        """Keep ``tok`` (an end-of-generation token is not kept); the stop reason it ends the
        answer with ("eog" | "stop" | "grammar" | "n_predict" | "ctx_full"), or None.
        ``n_held``: the tokens the sequence will hold before ``tok`` is fed (for ``n_ctx``)."""
        if self.tokenizer.is_eog(tok):
            return "eog"
        self.tokens.append(tok)
        self._emit(self.stream.push(tok))
        if self.stops and ends_with_stop(self.pieces, self.stops):
            return "stop"
        if self.grammar is not None and self.grammar.done():
            return "grammar"
        if self.n_predict >= 0 and len(self.tokens) >= self.n_predict:
            return "n_predict"
        if self.n_ctx and n_held is not None and n_held + 1 >= self.n_ctx:
            return "ctx_full"
        return None

    def __call__(self, row: np.ndarray, n_held: int | None = None) -> tuple[int, str | None]:
        """:meth:`sample` then :meth:`take`: (token, stop reason or None)."""
        tok = self.sample(row)
        return tok, self.take(tok, n_held)

    def finish(self) -> str:
        """The text the stream held back (an incomplete UTF-8 tail); returns the whole text."""
        self._emit(self.stream.flush())
        return self.text

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def _emit(self, s: str) -> None:
        if s:
            self.pieces.append(s)
            if self.on_text is not None:
                self.on_text(s)


# ---- speculative decoding: the acceptance rule --------------------------------------------------

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


def _dense(ids, probs, n: int) -> np.ndarray:
    out = np.zeros(n, np.float64)
    out[np.asarray(ids, dtype=np.int64)] = probs
    return out


def _draw(p: np.ndarray, rng: np.random.Generator) -> int:
    c = np.cumsum(p)
    k = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
    return min(k, p.size - 1)


@dataclass
class Verdict:
    """What one verify call left: ``tok`` the last token the target chose (the next one to feed
    unless ``reason`` ended the answer), ``n_accepted`` drafts kept, ``n_kept`` tokens of the
    call the sequence still holds (the call's first token plus the kept drafts)."""

    tok: int
    reason: str | None
    n_accepted: int
    n_kept: int


class Verifier:
    """Speculative decoding on sequences of one target context (see the module docstring).

    Args:
        ctx: a toolkit.runtime.Context whose draft window is at least ``draft_max``
            (:meth:`attach` sets it).
        draft_max: most drafts per verify call; draft_min: a shorter draft is not sent.

    Raises:
        InputError: draft_max outside [1, the context's window], or draft_min < 0.
    """

    def __init__(self, ctx, draft_max: int, draft_min: int = 0):
        window = int(getattr(ctx, "draft_window", 0))
        if not 1 <= draft_max <= window:
            raise InputError(f"--draft-max = {draft_max}: must be in [1, the context's draft window {window}]")
        if draft_min < 0:
            raise InputError(f"--draft-min must be >= 0, got {draft_min}")
        self.ctx, self.draft_max, self.draft_min = ctx, int(draft_max), int(draft_min)
        self.k_min = max(self.draft_min, 1)      # the shortest draft sent
        self.n_vocab = int(ctx.n_vocab)

    @classmethod
    def attach(cls, ctx, draft_max: int, draft_min: int = 0) -> "Verifier":
        """Set ``ctx``'s draft window to ``draft_max`` for a verifying target (no state copied
        after a call's last token: ``keep_last=False``) and return its Verifier."""
        if draft_max < 1:
            raise InputError(f"--draft-max = {draft_max}: must be >= 1")
        ctx.memory.set_draft_window(draft_max, keep_last=False)
        return cls(ctx, draft_max, draft_min)

    def room(self, n_free: int, n_left: int | None) -> int:
        """Most drafts to send now: draft_max, at most ``n_free`` (cells left after the call's
        first token) and ``n_left`` (tokens the answer may still keep after that one; None: no
        limit); 0 when none fit."""
        k = min(self.draft_max, n_free)
        if n_left is not None:
            k = min(k, n_left)
        return max(k, 0)

    def cut(self, drafts: list[int], qs: list | None, k: int, grammar=None) -> tuple[list[int], list | None]:
        """A draft as it is sent: at most ``k`` tokens, up to the first one ``grammar`` (in the
        state after the call's first token) refuses -- such a token could never be kept --, and
        nothing when shorter than draft_min (or empty).  ``qs``: per token (ids, probs), or None."""
        drafts = list(drafts[:max(k, 0)])
        if grammar is not None and drafts:
            drafts = drafts[:grammar.n_allowed(drafts)]
        if len(drafts) < self.k_min:
            return [], None
        return drafts, (qs[:len(drafts)] if qs is not None else None)

    def drafts(self, drafter, items) -> list[tuple[list[int], list | None]]:
        """Drafts for several sequences, each cut (:meth:`cut`): ``items`` = [(seq, history, k,
        sampler, grammar), ...] as ``drafter.draft_batch`` takes them (a PromptLookup or a
        DraftModel of toolkit.runtime.speculative; seq: the drafter's sequence, history: the
        target's tokens up to the call's first one, k >= 1, grammar or None).  Raises what
        the drafter raises."""
        got = drafter.draft_batch(items)
        return [self.cut(toks, q, it[2], it[4]) for it, (toks, q) in zip(items, got)]

    def verify(self, step: TokenStep, seq_id: int, n0: int, toks: Sequence[int], rows: np.ndarray,
               qs: list | None) -> Verdict:
        """The rows of a verify call: ``toks`` (the sequence's next token, then the drafts) were
        decoded from position ``n0`` with ``logits="all"``, ``rows[i]`` scoring the position
        after toks[i]; ``qs``: the drafts' distributions (None: deterministic drafts).  Keeps
        the drafts ``step`` accepts and one token of the target's own (each through
        :meth:`TokenStep.take`), then rolls the sequence back past the rest.

        Raises:
            RuntimeError: the memory refused the rollback (a draft window smaller than the call).
        """
        drafts = toks[1:]
        used, n_acc, reason, tok = 0, 0, None, -1
        for i in range(len(drafts) + 1):
            used = i + 1
            d = drafts[i] if i < len(drafts) else None   # None: every draft kept, the target's own token
            tok, ok = step.verify(rows[i], d, qs[i] if qs is not None and d is not None else None, self.n_vocab)
            n_acc += ok
            reason = step.take(tok, n0 + used)
            if reason is not None or not ok:
                break
        if used < len(toks):                      # the rows after `used` scored rejected tokens
            p0 = n0 + used
            if self.ctx.memory.rollback(seq_id, p0) != p0:
                raise RuntimeError(f"sequence {seq_id}: speculative rollback to position {p0} refused "
                                   f"(draft window too small?)")
        return Verdict(tok=tok, reason=reason, n_accepted=n_acc, n_kept=used)
